//! The heartbeat child: the command the tests hand to leaderrun.
//!
//! It is the running test binary itself, re-executed with `LRH_CHILD` set and
//! libtest told to run only [`super::helper_child_entry`]; so it needs no
//! interpreter, no extra build target and starts in a few milliseconds. It
//! appends to `LRH_DIR/child-PID.rec`, one `write` per line:
//!
//! ```text
//! start NS pid=P ppid=P pgid=G stime=T token=N
//! env LEADERRUN_ID VALUE          (also LEADERRUN_LEASE, LEADERRUN_TOKEN)
//! grandchild PID STIME            (with LRH_GRANDCHILD=1)
//! beat NS                         (every LRH_PERIOD_MS, default 2)
//! signal N NS                     (each signal received)
//! stop NS signal=N | exit=CODE    (when it ends by itself)
//! ```
//!
//! NS is CLOCK_MONOTONIC in nanoseconds, comparable across processes.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

use super::process::{mono_ns, proc_stat};

/// How the helper behaves; passed to it through its environment.
#[derive(Debug, Clone)]
pub struct Helper {
    /// Where it writes its record file.
    pub dir: PathBuf,
    /// Time between heartbeats.
    pub period: Duration,
    /// Exit by itself this long after starting, with this code.
    pub exit_after: Option<(Duration, i32)>,
    /// Record SIGTERM but keep running (so only SIGKILL ends it).
    pub ignore_term: bool,
    /// Start a `sleep 1000` grandchild in its process group.
    pub grandchild: bool,
}

impl Helper {
    pub fn new(dir: impl AsRef<Path>) -> Helper {
        Helper {
            dir: dir.as_ref().to_owned(),
            period: Duration::from_millis(2),
            exit_after: None,
            ignore_term: false,
            grandchild: false,
        }
    }

    pub fn exit_after(mut self, after: Duration, code: i32) -> Helper {
        self.exit_after = Some((after, code));
        self
    }

    pub fn ignore_term(mut self) -> Helper {
        self.ignore_term = true;
        self
    }

    pub fn grandchild(mut self) -> Helper {
        self.grandchild = true;
        self
    }

    /// The command line that runs the helper.
    pub fn argv() -> Vec<OsString> {
        let exe = std::env::current_exe().expect("the test binary's own path");
        vec![
            exe.into(),
            "--exact".into(),
            "harness::helper_child_entry".into(),
            "--nocapture".into(),
            "--test-threads=1".into(),
            "-q".into(),
        ]
    }

    /// The environment that configures it.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("LRH_CHILD".into(), "1".into()),
            ("LRH_DIR".into(), self.dir.display().to_string()),
            ("LRH_PERIOD_US".into(), self.period.as_micros().to_string()),
        ];
        if let Some((after, code)) = self.exit_after {
            env.push(("LRH_EXIT_AFTER_MS".into(), after.as_millis().to_string()));
            env.push(("LRH_EXIT_CODE".into(), code.to_string()));
        }
        if self.ignore_term {
            env.push(("LRH_IGNORE_TERM".into(), "1".into()));
        }
        if self.grandchild {
            env.push(("LRH_GRANDCHILD".into(), "1".into()));
        }
        env
    }
}

/// Signals received and not yet recorded, one bit per signal number.
static PENDING: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(sig: nix::libc::c_int) {
    PENDING.fetch_or(1 << sig, Ordering::SeqCst);
}

const HANDLED: [Signal; 7] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// Runs the helper if this process was started as one; returns otherwise.
pub fn main_if_child() {
    if std::env::var_os("LRH_CHILD").is_none() {
        return;
    }
    let dir = PathBuf::from(std::env::var_os("LRH_DIR").expect("LRH_DIR"));
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let period = Duration::from_micros(num("LRH_PERIOD_US").unwrap_or(2_000));
    let exit_after = num("LRH_EXIT_AFTER_MS").map(Duration::from_millis);
    let exit_code = num("LRH_EXIT_CODE").unwrap_or(0) as i32;
    let ignore_term = std::env::var_os("LRH_IGNORE_TERM").is_some();
    let started = std::time::Instant::now();
    let t0 = mono_ns();

    for sig in HANDLED {
        let action = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        // SAFETY: the handler only touches an atomic.
        unsafe { sigaction(sig, &action) }.expect("install signal handler");
    }

    let pid = std::process::id() as i32;
    let mut out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("child-{pid}.rec")))
        .expect("open record file");
    let stat = proc_stat(pid).expect("own /proc/self/stat");
    let token = std::env::var("LEADERRUN_TOKEN").unwrap_or_else(|_| "none".into());
    line(
        &mut out,
        &format!(
            "start {t0} pid={pid} ppid={} pgid={} stime={} token={token}\n",
            stat.ppid, stat.pgrp, stat.starttime
        ),
    );
    for k in ["LEADERRUN_TOKEN", "LEADERRUN_LEASE", "LEADERRUN_ID"] {
        if let Some(v) = std::env::var_os(k) {
            line(&mut out, &format!("env {k} {}\n", v.to_string_lossy()));
        }
    }
    if std::env::var_os("LRH_GRANDCHILD").is_some() {
        let gc = std::process::Command::new("sleep")
            .arg("1000")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn grandchild");
        let gpid = gc.id() as i32;
        let stime = proc_stat(gpid).map(|s| s.starttime).unwrap_or(0);
        line(&mut out, &format!("grandchild {gpid} {stime}\n"));
        // Not waited for: it belongs to the process group, not to the test.
        std::mem::forget(gc);
    }

    loop {
        let pending = PENDING.swap(0, Ordering::SeqCst);
        for sig in HANDLED {
            if pending & (1 << sig as i32) == 0 {
                continue;
            }
            let n = sig as i32;
            line(&mut out, &format!("signal {n} {}\n", mono_ns()));
            let stops = matches!(sig, Signal::SIGTERM | Signal::SIGINT | Signal::SIGQUIT);
            if stops && !(ignore_term && sig == Signal::SIGTERM) {
                line(&mut out, &format!("stop {} signal={n}\n", mono_ns()));
                std::process::exit(128 + n);
            }
        }
        if exit_after.is_some_and(|d| started.elapsed() >= d) {
            line(&mut out, &format!("stop {} exit={exit_code}\n", mono_ns()));
            std::process::exit(exit_code);
        }
        line(&mut out, &format!("beat {}\n", mono_ns()));
        std::thread::sleep(period);
    }
}

/// One record line in one `write` (O_APPEND keeps lines whole).
fn line(out: &mut File, text: &str) {
    let _ = out.write_all(text.as_bytes());
}
