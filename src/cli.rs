//! The command line as typed: clap definitions only.
//!
//! Nothing here is validated beyond the syntax of a single value; the
//! cross-flag rules (timing arithmetic, URL parsing) live in [`crate::config`].
//! The doc comments on these items are the `--help` text and the man page.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use nix::sys::signal::Signal;

/// Run a command as a cluster-wide singleton under a distributed lease.
///
/// Every host runs the same line. Exactly one of them holds the lease and runs
/// COMMAND; the others wait. The leader renews the lease in the background and
/// stops COMMAND's whole process group before the lease could pass to anyone
/// else. When the leader dies, hangs or is cut off, another host takes over
/// once the lease has expired on its own monotonic clock.
#[derive(Debug, Parser)]
#[command(
    name = "leaderrun",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_long_help = AFTER_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub run: RunArgs,
}

const AFTER_HELP: &str = "\
EXIT STATUS:
  N        the command exited on its own with status N while leader
  128+N    the command was killed by signal N
  126      the command is not executable
  127      the command was not found
  64       usage error (bad flag, bad URL, bad duration, missing command)
  69       the lease store is unusable (auth, missing bucket, not a lease record)
  75       not leader: --once (or --wait) gave up while another holder had the lease
  76       leadership was lost in --once mode

ENVIRONMENT OF THE COMMAND:
  LEADERRUN_TOKEN  fencing token: grows with every acquisition, never reset
  LEADERRUN_LEASE  the lease URL, without secrets
  LEADERRUN_ID     this candidate's --id

EXAMPLES:
  leaderrun -- ./migrate.sh
  leaderrun --lease s3://ops-leases/nightly-report --once --wait 1m -- ./report.sh
  leaderrun --lease gs://ops-leases/indexer --restart -- ./indexer
  leaderrun --lease azblob://opsaccount/leases/reaper -- ./reaper.sh
  leaderrun --lease file:///var/lib/leases/worker --restart -- ./worker
  leaderrun status --lease s3://ops-leases/nightly-report";

/// Subcommands that inspect or manage a lease without running anything.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show who holds a lease, its fencing token and its age.
    ///
    /// Without --lease or --name, lists every local file lease in the default
    /// directory.
    Status(StatusArgs),
    /// Hand a lease back so another candidate can take it at once.
    ///
    /// Without --force, the lease is released only once it has been seen
    /// unchanged for its whole ttl (its holder is gone); a live holder makes
    /// this fail with exit status 75. With --force, the lease is marked
    /// released at once, keeping its fencing token: a live holder sees the
    /// conflict at its next renewal and stops its command, but until then a new
    /// leader may already be running. Use --force only when the holder is gone.
    Release(ReleaseArgs),
    /// Check that a store really honours conditional writes.
    ///
    /// Writes a probe record beside the lease, checks that a second
    /// create-if-absent and a stale compare-and-swap are both rejected, reports
    /// the round-trip time, and removes the probe. The lease itself is not
    /// touched.
    Doctor(DoctorArgs),
}

/// Where the lease lives; shared by every form of the command.
#[derive(Debug, Args, Clone)]
pub struct LeaseArgs {
    /// Lease URL: file:///PATH, s3://BUCKET/KEY, gs://BUCKET/OBJECT or azblob://ACCOUNT/CONTAINER/BLOB.
    ///
    /// s3:// takes ?endpoint=URL&region=R&path_style=true for MinIO, R2, Ceph
    /// and emulators; gs:// takes ?endpoint=URL; azblob:// takes
    /// ?endpoint=URL (Azurite, sovereign clouds). Credentials come from each
    /// cloud's usual chain, never from the URL.
    ///
    /// Without it, a local file lease is used, named by --name (or by the
    /// command line) under $XDG_RUNTIME_DIR/leaderrun/ or /tmp/leaderrun-$UID/.
    #[arg(
        long,
        value_name = "URL",
        env = "LEADERRUN_LEASE",
        help_heading = "Lease"
    )]
    pub lease: Option<String>,

    /// Name of the local file lease used when --lease is absent.
    ///
    /// Defaults to a name derived from the command line, so that the same
    /// command on the same host always meets the same lease.
    #[arg(long, value_name = "NAME", help_heading = "Lease")]
    pub name: Option<String>,
}

/// The main form: supervise COMMAND while leader.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,

    /// Identity of this candidate, shown by `status` [default: HOSTNAME:PID].
    #[arg(long, value_name = "ID", help_heading = "Lease")]
    pub id: Option<String>,

    /// How long a lease stays valid without renewal, e.g. 15s, 1m30s.
    ///
    /// A waiting candidate takes over only after seeing the same lease record
    /// unchanged for this long on its own monotonic clock. The other timing
    /// defaults derive from it, so --ttl alone is always valid.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, help_heading = "Timing")]
    pub ttl: Option<Duration>,

    /// How often the leader renews the lease [default: ttl/3].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, help_heading = "Timing")]
    pub renew_every: Option<Duration>,

    /// How often a waiting candidate polls the lease [default: min(2s, ttl/4)].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, help_heading = "Timing")]
    pub retry_every: Option<Duration>,

    /// Time between the stop signal and SIGKILL [default: min(5s, ttl/4)].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, help_heading = "Timing")]
    pub grace: Option<Duration>,

    /// Longest time one store request may take [default: min(5s, ttl/5)].
    ///
    /// Every request is also cut short by the time left before the leader
    /// would have to stop its command.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, help_heading = "Timing")]
    pub request_timeout: Option<Duration>,

    /// Signal that asks the command to stop, e.g. TERM, SIGINT, 15 [default: SIGTERM].
    #[arg(long, value_name = "SIGNAL", value_parser = parse_signal, help_heading = "Command")]
    pub stop_signal: Option<Signal>,

    /// Cron mode: try to acquire once, run the command once, release, exit.
    ///
    /// If another candidate holds the lease, exit at once with status 75
    /// (or after --wait). If leadership is lost while running, exit with 76.
    #[arg(long, help_heading = "Mode")]
    pub once: bool,

    /// Give up campaigning after this long [default: 0 with --once, forever without].
    ///
    /// A lease left behind by a holder that died is taken over only after it
    /// has been seen unchanged for its ttl, so give --once a --wait longer than
    /// the ttl if a crashed run must not block the next ones.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_or_zero, allow_hyphen_values = true, help_heading = "Mode")]
    pub wait: Option<Duration>,

    /// Keep the lease at least this long after acquiring it, even if the command finishes sooner.
    ///
    /// Stops a cron entry that fires a little later on a host with a skewed
    /// clock from running the job a second time.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, help_heading = "Mode")]
    pub hold_at_least: Option<Duration>,

    /// Start the command again whenever it exits while leader.
    #[arg(long, conflicts_with = "once", help_heading = "Mode")]
    pub restart: bool,

    /// Run the command through `sh -c` (the words are joined with spaces).
    #[arg(long, help_heading = "Command")]
    pub shell: bool,

    /// Format of the one-line-per-transition log on stderr.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Human, help_heading = "Output")]
    pub log_format: LogFormat,

    /// The command to run while leader, after `--`.
    #[arg(last = true, value_name = "COMMAND", num_args = 1..)]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,

    /// Print one JSON object (or, when listing, one per line) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,

    /// Mark the lease released at once, even while another holder has it.
    #[arg(long)]
    pub force: bool,

    /// Format of the log on stderr.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `leaderrun: elected (token 7) on file:///...`
    Human,
    /// One JSON object per line.
    Json,
}

/// A humantime duration that must be greater than zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration_or_zero(s)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// A humantime duration; zero allowed (`--wait 0`).
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err("must not be negative".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{e} (expected a duration with a unit, e.g. 15s, 500ms, 1m30s)"))
}

/// A signal by name (`TERM`, `SIGTERM`, `term`) or number (`15`).
pub fn parse_signal(s: &str) -> Result<Signal, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| format!("no signal number {n}"));
    }
    let upper = t.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<Signal>()
        .map_err(|_| format!("unknown signal name '{t}'"))
}
