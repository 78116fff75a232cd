//! Spawn the command in its own process group, reap, signal and stop the
//! whole group.
//!
//! leaderrun makes itself a child subreaper, so grandchildren orphaned inside
//! the group are re-parented to it and reaped here (no zombies, and "is the
//! group empty?" has an honest answer). Reaping is driven by SIGCHLD and
//! `waitpid(-1)`, so it also collects those orphans.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use super::signals::{Request, Signals};
use super::watchdog::PreArm;
use crate::exit;

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Code(i32),
    Signaled(i32),
}

impl Status {
    /// The exit status leaderrun reports for it (SPEC §4).
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Code(c) => (c & 0xff) as u8,
            Status::Signaled(s) => exit::from_signal(s),
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Code(c) => write!(f, "exit status {c}"),
            Status::Signaled(s) => match Signal::try_from(*s) {
                Ok(sig) => write!(f, "signal {sig}"),
                Err(_) => write!(f, "signal {s}"),
            },
        }
    }
}

/// How [`Child::stop`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// The command's status.
    pub status: Status,
    /// A shutdown signal received while stopping: leaderrun must exit.
    pub shutdown: Option<Signal>,
}

/// The command could not be started; carries the exit status to report.
#[derive(Debug)]
pub struct SpawnError {
    pub code: u8,
    pub message: String,
}

/// Reaps every child of leaderrun; remembers the status of the command.
pub struct Reaper {
    sigchld: tokio::signal::unix::Signal,
}

impl Reaper {
    /// Makes leaderrun a subreaper and starts listening for SIGCHLD. Call
    /// before spawning anything.
    pub fn install() -> std::io::Result<Reaper> {
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            crate::log::info(
                "warning",
                &format!(
                    "cannot become a child subreaper ({e}); orphaned grandchildren will not be reaped here"
                ),
            );
        }
        Ok(Reaper {
            sigchld: signal(SignalKind::child())?,
        })
    }
}

/// The running command: its pid is also its process-group id.
pub struct Child {
    pgid: Pid,
    status: Option<Status>,
}

/// Starts `argv` in a new process group with `env` added, stdio inherited.
/// With `guard`, the new process arms the watchdog for its group itself
/// before `exec`, so the command never runs unguarded.
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, String)],
    guard: Option<PreArm>,
) -> Result<Child, SpawnError> {
    let program = &argv[0];
    let mut cmd = std::process::Command::new(program);
    cmd.args(&argv[1..]).process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let parent = nix::unistd::getpid();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Covers the instant before the watchdog is armed: if leaderrun
            // dies first, the command dies with it.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            if nix::unistd::getppid() != parent {
                // leaderrun exited during the spawn (no allocation here).
                return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            if let Some(guard) = guard {
                // Make sure the group exists under our pid (std may set it
                // after these hooks), then put it under the watchdog's guard.
                let own = nix::unistd::Pid::from_raw(0);
                nix::unistd::setpgid(own, own).map_err(std::io::Error::from)?;
                guard.arm_self();
            }
            Ok(())
        });
    }
    let name = program.to_string_lossy();
    match cmd.spawn() {
        Ok(child) => Ok(Child {
            pgid: Pid::from_raw(child.id() as i32),
            status: None,
        }),
        Err(e) => {
            let (code, what) = match (e.kind(), e.raw_os_error()) {
                (ErrorKind::NotFound, _) => (exit::NOT_FOUND, "command not found"),
                (ErrorKind::PermissionDenied, _) => {
                    (exit::NOT_EXECUTABLE, "command is not executable")
                }
                (_, Some(8)) => (exit::NOT_EXECUTABLE, "command is not an executable format"),
                _ => (exit::NOT_EXECUTABLE, "cannot execute command"),
            };
            Err(SpawnError {
                code,
                message: format!("{what}: {name}: {e}"),
            })
        }
    }
}

impl Child {
    pub fn pgid(&self) -> Pid {
        self.pgid
    }

    /// The command's status, once it has been reaped.
    pub fn status(&self) -> Option<Status> {
        self.status
    }

    /// Sends `sig` to the whole group. A group already gone is not an error.
    pub fn signal_group(&self, sig: Signal) {
        match killpg(self.pgid, sig) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => crate::log::info(
                "warning",
                &format!("cannot send {sig} to process group {}: {e}", self.pgid),
            ),
        }
    }

    /// Whether any process of the group (the command or a descendant that
    /// stayed in it) still exists.
    pub fn group_alive(&self) -> bool {
        !matches!(killpg(self.pgid, None), Err(Errno::ESRCH))
    }

    /// Collects every exited child without blocking.
    fn reap(&mut self) {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == self.pgid => {
                    self.status = Some(Status::Code(code))
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == self.pgid => {
                    self.status = Some(Status::Signaled(sig as i32))
                }
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// Waits until the command itself has exited. Cancel-safe.
    pub async fn wait(&mut self, reaper: &mut Reaper) -> Status {
        loop {
            self.reap();
            if let Some(s) = self.status {
                return s;
            }
            reaper.sigchld.recv().await;
        }
    }

    /// Waits until the command and its whole group are gone, or `until`.
    /// Returns whether the group is gone.
    async fn wait_group(&mut self, reaper: &mut Reaper, until: Instant) -> bool {
        loop {
            self.reap();
            if self.status.is_some() && !self.group_alive() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            // Grandchildren that are not ours to reap give no SIGCHLD: poll too.
            let tick = (Instant::now() + Duration::from_millis(10)).min(until);
            tokio::select! {
                _ = reaper.sigchld.recv() => {}
                _ = sleep_until(tick) => {}
            }
        }
    }

    /// Stops the whole group: `first` now, SIGKILL at `kill_at`, then waits
    /// until every process of the group is gone. Forwardable signals received
    /// meanwhile are passed on.
    ///
    /// A shutdown signal (SIGTERM/SIGINT/SIGQUIT) received meanwhile is
    /// reported in [`Stopped::shutdown`], so that the caller exits instead
    /// of carrying on. If `shutting_down` (the stop was itself asked for by
    /// one), it is a second request and kills the group at once; otherwise it
    /// is forwarded, and a further one kills at once.
    pub async fn stop(
        &mut self,
        first: Signal,
        kill_at: Instant,
        shutting_down: bool,
        reaper: &mut Reaper,
        signals: &mut Signals,
    ) -> Stopped {
        if self.status.is_none() || self.group_alive() {
            self.signal_group(first);
            // SIGCONT too, so a stopped (SIGSTOP/SIGTSTP) group can act on it.
            self.signal_group(Signal::SIGCONT);
        }
        let mut shutting_down = shutting_down;
        let mut shutdown = None;
        let gone = loop {
            tokio::select! {
                gone = self.wait_group(reaper, kill_at) => {
                    if !gone {
                        self.signal_group(Signal::SIGKILL);
                    }
                    break gone;
                }
                req = signals.recv() => match req {
                    Request::Forward(sig) => self.signal_group(sig),
                    Request::Shutdown(sig) if shutting_down => {
                        shutdown = shutdown.or(Some(sig));
                        crate::log::info("killing", "second stop request: sending SIGKILL now");
                        self.signal_group(Signal::SIGKILL);
                        break false;
                    }
                    Request::Shutdown(sig) => {
                        crate::log::info(
                            "stopping",
                            &format!("received {sig}: will exit once the command is gone"),
                        );
                        shutting_down = true;
                        shutdown = Some(sig);
                        self.signal_group(sig);
                    }
                },
            }
        };
        if !gone
            && !self
                .wait_group(reaper, Instant::now() + Duration::from_secs(5))
                .await
        {
            crate::log::info(
                "warning",
                &format!(
                    "process group {} still has members after SIGKILL",
                    self.pgid
                ),
            );
        }
        // The command itself must be reaped to report its status.
        let status = match self.status {
            Some(s) => s,
            None => self.wait(reaper).await,
        };
        Stopped { status, shutdown }
    }
}
