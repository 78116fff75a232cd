//! Test directories, spawning leaderrun, signals, waiting, and finding
//! processes a test left behind.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::helper::Helper;

/// The binary under test, built by cargo for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_leaderrun");

/// Environment variable put on every process a test spawns, naming its
/// [`TestDir`]; inherited by leaderrun, its watchdog, its command and the
/// command's children, so [`leftovers`] can find them all.
pub const MARKER: &str = "LRH_TESTDIR";

/// CLOCK_MONOTONIC in nanoseconds: the clock of the helper's records, shared
/// by every process on the host.
pub fn mono_ns() -> i64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() * 1_000_000_000 + t.tv_nsec()
}

/// A directory of its own for one test, under the system temp dir. Removed
/// when the test passes; kept (and its path printed) when it fails.
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    pub fn new(name: &str) -> TestDir {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join("leaderrun-tests").join(format!(
            "{name}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create test dir");
        TestDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// A `file://` lease URL for `name` inside this directory.
    pub fn file_lease(&self, name: &str) -> String {
        format!("file://{}", self.join(name).display())
    }

    /// A fresh sub-directory (for the helper's records, say).
    pub fn subdir(&self, name: &str) -> PathBuf {
        let p = self.join(name);
        fs::create_dir_all(&p).expect("create sub dir");
        p
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test files kept in {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Sends `sig` to one process; a process already gone is not an error.
pub fn send_signal(pid: i32, sig: Signal) {
    match kill(Pid::from_raw(pid), sig) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => panic!("cannot send {sig} to {pid}: {e}"),
    }
}

/// Polls `cond` every few milliseconds until it holds; returns how long that
/// took, or panics with `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if cond() {
            return start.elapsed();
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The few fields of `/proc/PID/stat` the harness needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    /// Start time in clock ticks since boot: tells a pid from its reuse.
    pub starttime: u64,
}

pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        starttime: f.get(19)?.parse().ok()?,
    })
}

/// Whether process `pid` (started at `starttime`, if known) still runs. A
/// zombie is dead: it runs no code; reaping it is its parent's business.
pub fn pid_alive(pid: i32, starttime: Option<u64>) -> bool {
    match proc_stat(pid) {
        None => false,
        Some(s) if starttime.is_some_and(|t| t != s.starttime) => false,
        Some(s) => !matches!(s.state, 'Z' | 'X' | 'x'),
    }
}

/// Live processes (not zombies) spawned by the test that owns `dir`, at any
/// depth: leaderrun, its watchdog, its command, the command's children.
pub fn leftovers(dir: &TestDir) -> Vec<String> {
    let needle = format!("{MARKER}={}", dir.path().display());
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let marked = environ.split(|&b| b == 0).any(|kv| kv == needle.as_bytes());
        if marked && pid_alive(pid, None) {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            found.push(format!("pid {pid}: {}", cmdline.trim()));
        }
    }
    found
}

/// A leaderrun invocation being put together.
pub struct Cmd {
    dir: PathBuf,
    marker: String,
    name: String,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
}

/// `leaderrun` with no arguments yet. `name` names its log files in `dir`
/// (`NAME.stderr`, `NAME.stdout`); reuse a name and the older logs are lost.
pub fn leaderrun(dir: &TestDir, name: &str) -> Cmd {
    let mut cmd = Cmd {
        dir: dir.path().to_owned(),
        marker: dir.path().display().to_string(),
        name: name.to_owned(),
        args: Vec::new(),
        env: Vec::new(),
    };
    // Nothing from the environment of the test run may steer leaderrun, and
    // a test may itself run under leaderrun.
    for k in [
        "LEADERRUN_LEASE",
        "LEADERRUN_TOKEN",
        "LEADERRUN_ID",
        "LRH_CHILD",
    ] {
        cmd = cmd.env_remove(k);
    }
    cmd
}

impl Cmd {
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Cmd {
        self.args.push(a.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Cmd {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `--lease URL`.
    pub fn lease(self, url: &str) -> Cmd {
        self.arg("--lease").arg(url)
    }

    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Cmd {
        self.env
            .push((k.as_ref().to_owned(), Some(v.as_ref().to_owned())));
        self
    }

    pub fn env_remove(mut self, k: impl AsRef<OsStr>) -> Cmd {
        self.env.push((k.as_ref().to_owned(), None));
        self
    }

    /// `-- ARGV...`: the command leaderrun supervises.
    pub fn command<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(self, argv: I) -> Cmd {
        self.arg("--").args(argv)
    }

    /// `-- sh -c SCRIPT`.
    pub fn sh(self, script: &str) -> Cmd {
        self.command(["sh", "-c", script])
    }

    /// `-- HELPER`: the heartbeat child, configured through its environment.
    pub fn helper(mut self, helper: &Helper) -> Cmd {
        for (k, v) in helper.env() {
            self = self.env(k, v);
        }
        self.command(Helper::argv())
    }

    fn build(&self) -> Command {
        let mut c = Command::new(BIN);
        c.args(&self.args);
        for (k, v) in &self.env {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.env(MARKER, &self.marker);
        c.stdin(Stdio::null());
        c.stdout(File::create(self.dir.join(format!("{}.stdout", self.name))).unwrap());
        c.stderr(File::create(self.dir.join(format!("{}.stderr", self.name))).unwrap());
        c
    }

    /// Starts leaderrun in the background.
    pub fn spawn(self) -> Proc {
        let child = self.build().spawn().expect("spawn leaderrun");
        Proc {
            child,
            name: self.name.clone(),
            stdout: self.dir.join(format!("{}.stdout", self.name)),
            stderr: self.dir.join(format!("{}.stderr", self.name)),
            status: None,
        }
    }

    /// Runs leaderrun to completion (failing the test after `timeout`).
    pub fn run(self, timeout: Duration) -> Finished {
        let mut p = self.spawn();
        let started = Instant::now();
        let status = p.expect_exit(timeout);
        Finished {
            status,
            elapsed: started.elapsed(),
            stdout: p.stdout(),
            stderr: p.stderr(),
        }
    }
}

/// A leaderrun run that has ended.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub elapsed: Duration,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// The exit code; panics (showing stderr) if leaderrun itself was killed
    /// by a signal.
    pub fn code(&self) -> i32 {
        match self.status.code() {
            Some(c) => c,
            None => panic!(
                "leaderrun was killed by signal {:?}\nstderr:\n{}",
                self.status.signal(),
                self.stderr
            ),
        }
    }

    pub fn assert_code(&self, want: i32) -> &Finished {
        assert_eq!(
            self.code(),
            want,
            "unexpected exit status\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

/// A leaderrun process started by a test. Killed (with its stopped state
/// cleared) when dropped, so a failing test leaves nothing behind.
pub struct Proc {
    child: std::process::Child,
    pub name: String,
    stdout: PathBuf,
    stderr: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: Signal) {
        if self.status.is_none() {
            send_signal(self.pid(), sig);
        }
    }

    /// The exit status if it has exited, without waiting.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    pub fn running(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Waits up to `timeout` for it to exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.try_status() {
                return Some(s);
            }
            if start.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits up to `timeout` for it to exit; panics, showing its stderr, if
    /// it does not.
    pub fn expect_exit(&mut self, timeout: Duration) -> ExitStatus {
        match self.wait_timeout(timeout) {
            Some(s) => s,
            None => panic!(
                "{} (pid {}) did not exit within {timeout:?}\nstderr:\n{}",
                self.name,
                self.pid(),
                self.stderr()
            ),
        }
    }

    /// Waits for it to exit and checks its exit code.
    pub fn expect_code(&mut self, timeout: Duration, want: i32) {
        let status = self.expect_exit(timeout);
        assert_eq!(
            status.code(),
            Some(want),
            "{} exited with {status:?}\nstderr:\n{}",
            self.name,
            self.stderr()
        );
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn stdout(&self) -> String {
        fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// The pid of leaderrun's backstop watchdog: its child that is itself
    /// leaderrun (the command is never the leaderrun binary in these tests).
    pub fn watchdog_pid(&self) -> Option<i32> {
        let me = self.pid();
        let children =
            fs::read_to_string(format!("/proc/{me}/task/{me}/children")).unwrap_or_default();
        children
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .find(|&p| {
                fs::read_link(format!("/proc/{p}/exe"))
                    .is_ok_and(|exe| exe == fs::canonicalize(BIN).unwrap_or_default())
            })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            let _ = kill(Pid::from_raw(self.pid()), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(self.pid()), Signal::SIGCONT);
            let _ = self.child.wait();
        }
    }
}
