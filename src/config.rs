//! Validated settings: raw flags from [`crate::cli`] become one [`RunConfig`]
//! that holds every invariant, so nothing downstream re-checks.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::backend::Location;
use crate::backend::file::FileLocation;
use crate::cli::{LeaseArgs, LogFormat, RunArgs};

/// The election's timing, all derived from `--ttl` unless given.
///
/// The leader's lease is valid until `t_sent + ttl`, where `t_sent` is the
/// monotonic instant before its last successful renewal was sent. It sends the
/// stop signal at `deadline - grace - margin` if no renewal has succeeded by
/// then, and SIGKILL at `deadline - margin`. For a renewal to have a chance
/// before that, `renew_every + request_timeout + grace + margin < ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a record must be seen unchanged before it is taken over, and
    /// how long after a successful renewal the leader's lease is valid.
    pub ttl: Duration,
    /// Time between the leader's renewals.
    pub renew_every: Duration,
    /// Time between a waiting candidate's polls.
    pub retry_every: Duration,
    /// Time between the stop signal and SIGKILL.
    pub grace: Duration,
    /// Longest time one store request may take.
    pub request_timeout: Duration,
    /// Safety margin before the deadline: covers clock-rate differences
    /// between hosts and the time a SIGKILL takes to land. Not a flag:
    /// min(1s, ttl/10).
    pub margin: Duration,
}

/// The shortest `--ttl` accepted: below it, the margins shrink to the size of
/// a scheduling hiccup and the derived periods to a busy loop.
pub const MIN_TTL: Duration = Duration::from_millis(500);

impl Timing {
    /// Fills defaults from `ttl` and checks the rule; the error names the flags.
    pub fn new(
        ttl: Option<Duration>,
        renew_every: Option<Duration>,
        retry_every: Option<Duration>,
        grace: Option<Duration>,
        request_timeout: Option<Duration>,
    ) -> Result<Timing, String> {
        let ttl = ttl.unwrap_or(Duration::from_secs(15));
        let t = Timing {
            ttl,
            renew_every: renew_every.unwrap_or(ttl / 3),
            retry_every: retry_every.unwrap_or((ttl / 4).min(Duration::from_secs(2))),
            grace: grace.unwrap_or((ttl / 4).min(Duration::from_secs(5))),
            request_timeout: request_timeout.unwrap_or((ttl / 5).min(Duration::from_secs(5))),
            margin: (ttl / 10).min(Duration::from_secs(1)),
        };
        if t.ttl < MIN_TTL {
            return Err(format!(
                "--ttl {} is too short: leaderrun needs at least {} to renew, stop and kill in time",
                show(t.ttl),
                show(MIN_TTL)
            ));
        }
        for (flag, d) in [
            ("--ttl", t.ttl),
            ("--renew-every", t.renew_every),
            ("--retry-every", t.retry_every),
            ("--grace", t.grace),
            ("--request-timeout", t.request_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{flag} must be greater than zero"));
            }
        }
        let sum = t.renew_every + t.request_timeout + t.grace + t.margin;
        if sum >= t.ttl {
            return Err(format!(
                "invalid timing: --renew-every {} + --request-timeout {} + --grace {} + margin {} = {} must be less than --ttl {}",
                show(t.renew_every),
                show(t.request_timeout),
                show(t.grace),
                show(t.margin),
                show(sum),
                show(t.ttl)
            ));
        }
        Ok(t)
    }

    /// From the last successful renewal's send instant to the stop signal.
    pub fn stop_after(&self) -> Duration {
        self.ttl - self.grace - self.margin
    }

    /// From the last successful renewal's send instant to SIGKILL.
    pub fn kill_after(&self) -> Duration {
        self.ttl - self.margin
    }
}

/// A duration as humans write it: `1s 500ms`.
pub fn show(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

/// Everything the main form needs, validated.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub location: Location,
    pub timing: Timing,
    pub stop_signal: Signal,
    /// Holder identity written into the record.
    pub id: String,
    pub once: bool,
    /// Give up campaigning after this long (`None`: never).
    pub wait: Option<Duration>,
    pub hold_at_least: Duration,
    pub restart: bool,
    /// The program and its arguments, already wrapped in `sh -c` for `--shell`.
    pub command: Vec<OsString>,
    pub log_format: LogFormat,
}

impl RunConfig {
    pub fn from_args(args: RunArgs) -> Result<RunConfig, String> {
        let timing = Timing::new(
            args.ttl,
            args.renew_every,
            args.retry_every,
            args.grace,
            args.request_timeout,
        )?;
        let command = if args.shell {
            let joined: Vec<String> = args
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            vec!["sh".into(), "-c".into(), joined.join(" ").into()]
        } else {
            args.command
        };
        if command.first().is_none_or(|c| c.is_empty()) {
            return Err("missing command: give it after `--`, e.g. leaderrun -- ./job.sh".into());
        }
        let location = resolve_location(&args.lease, Some(&command))?;
        location.check_timing(&timing)?;
        let id = match args.id {
            Some(id) if id.trim().is_empty() => {
                return Err("invalid value for --id: must not be empty".into());
            }
            Some(id) => id,
            None => default_id(),
        };
        Ok(RunConfig {
            location,
            timing,
            stop_signal: args.stop_signal.unwrap_or(Signal::SIGTERM),
            id,
            once: args.once,
            wait: args.wait.or(if args.once {
                Some(Duration::ZERO)
            } else {
                None
            }),
            hold_at_least: args.hold_at_least.unwrap_or(Duration::ZERO),
            restart: args.restart,
            command,
            log_format: args.log_format,
        })
    }
}

/// `hostname:pid`.
pub fn default_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

/// The lease location from `--lease`, or the default local file lease named
/// by `--name` or by the command line. `command` is `None` for subcommands.
pub fn resolve_location(
    lease: &LeaseArgs,
    command: Option<&[OsString]>,
) -> Result<Location, String> {
    if let Some(url) = &lease.lease {
        if lease.name.is_some() {
            return Err("--name names a local lease and cannot be combined with --lease".into());
        }
        return Location::parse(url).map_err(|e| format!("invalid value for --lease: {e}"));
    }
    let name = match (&lease.name, command) {
        (Some(n), _) => {
            if n.is_empty() || n == "." || n == ".." || n.contains('/') || n.contains('\0') {
                return Err(format!(
                    "invalid value '{n}' for --name: must be a plain name without '/'"
                ));
            }
            n.clone()
        }
        (None, Some(cmd)) => name_from_command(cmd),
        (None, None) => return Err("give --lease URL or --name NAME".into()),
    };
    Ok(Location::File(FileLocation {
        path: default_dir().join(format!("{name}.lease")),
    }))
}

/// `$XDG_RUNTIME_DIR/leaderrun` or `/tmp/leaderrun-$UID`.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("leaderrun"),
        _ => PathBuf::from(format!("/tmp/leaderrun-{}", nix::unistd::getuid())),
    }
}

/// A readable, collision-resistant file name for a command line: its words
/// with unsafe characters replaced, cut to 48 bytes, and a hash of the whole.
pub fn name_from_command(cmd: &[OsString]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325; // FNV-1a
    let mut slug = String::new();
    for word in cmd {
        for &b in word.as_bytes().iter().chain(std::iter::once(&0u8)) {
            hash = (hash ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let base = std::path::Path::new(word)
            .file_name()
            .map(|f| f.as_bytes())
            .unwrap_or(word.as_bytes());
        if !slug.is_empty() {
            slug.push('_');
        }
        slug.extend(base.iter().map(|&b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'.' {
                b as char
            } else {
                '_'
            }
        }));
    }
    let slug: String = slug
        .trim_matches(|c| c == '.' || c == '_')
        .chars()
        .take(48)
        .collect();
    format!("{slug}-{:08x}", hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_for_any_ttl() {
        for ms in [500, 999, 2_000, 15_000, 60_000, 3_600_000] {
            let t = Timing::new(Some(Duration::from_millis(ms)), None, None, None, None).unwrap();
            assert!(
                t.renew_every + t.request_timeout + t.grace + t.margin < t.ttl,
                "{t:?}"
            );
        }
        let t = Timing::new(None, None, None, None, None).unwrap();
        assert_eq!(t.ttl, Duration::from_secs(15));
        assert_eq!(t.renew_every, Duration::from_secs(5));
        assert_eq!(t.retry_every, Duration::from_secs(2));
        assert_eq!(t.margin, Duration::from_secs(1));
    }

    #[test]
    fn bad_timing_names_flags_and_numbers() {
        let e = Timing::new(
            Some(Duration::from_secs(10)),
            Some(Duration::from_secs(6)),
            None,
            Some(Duration::from_secs(3)),
            None,
        )
        .unwrap_err();
        assert!(
            e.contains("--renew-every 6s") && e.contains("--grace 3s") && e.contains("--ttl 10s"),
            "{e}"
        );
        assert!(e.contains("= 12s"), "{e}");
    }

    #[test]
    fn command_names_are_stable_and_distinct() {
        let a = name_from_command(&["./migrate.sh".into()]);
        assert_eq!(a, name_from_command(&["./migrate.sh".into()]));
        assert!(a.starts_with("migrate.sh-"), "{a}");
        assert_ne!(a, name_from_command(&["./migrate.sh".into(), "x".into()]));
        assert_ne!(
            name_from_command(&["a b".into()]),
            name_from_command(&["a".into(), "b".into()])
        );
        let weird = name_from_command(&[
            "/bin/sh".into(),
            "-c".into(),
            "rm -rf / ; echo $HOME".into(),
        ]);
        assert!(
            weird
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "{weird}"
        );
    }
}
