//! The backstop: a tiny process, forked before the async runtime starts, that
//! kills the command's process group when leaderrun cannot.
//!
//! leaderrun tells it, through a pipe, which process group to guard and the
//! monotonic instant by which that group must be dead (the lease's kill
//! instant, moved forward by every successful renewal). The watchdog sends
//! SIGKILL to the whole group:
//!
//! - when the pipe closes while armed: leaderrun died (even by `kill -9`), so
//!   nobody renews the lease or stops the command any more;
//! - when the kill instant passes while armed: leaderrun is frozen (SIGSTOP, a
//!   hung syscall) or too late, and the lease may already be someone else's.
//!
//! `PR_SET_PDEATHSIG` alone would cover neither grandchildren nor a frozen
//! parent. The watchdog ignores the signals a terminal or an operator sends to
//! stop a job, so only SIGKILL ends it; it exits by itself when the pipe closes.
//!
//! CLOCK_MONOTONIC is shared by all processes of a host, so an instant
//! computed in leaderrun means the same in the watchdog.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigHandler, Signal, killpg, signal};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::{ForkResult, Pid, fork, pipe};

/// The leaderrun end of the pipe.
pub struct Watchdog {
    tx: File,
    pid: Pid,
}

fn monotonic_ns() -> i64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() * 1_000_000_000 + t.tv_nsec()
}

impl Watchdog {
    /// Forks the watchdog. Must be called while the process has one thread
    /// (before the async runtime starts).
    pub fn start() -> std::io::Result<Watchdog> {
        let (rx, tx) = pipe()?;
        set_cloexec(&rx)?;
        set_cloexec(&tx)?;
        // SAFETY: called before any other thread exists (see above), so the
        // child may run ordinary code.
        match unsafe { fork() }? {
            ForkResult::Child => {
                drop(tx);
                let code = watch(File::from(rx));
                // Skip Rust's exit machinery (atexit handlers, stdio flush)
                // inherited from the parent.
                unsafe { nix::libc::_exit(code) }
            }
            ForkResult::Parent { child } => {
                drop(rx);
                Ok(Watchdog {
                    tx: File::from(tx),
                    pid: child,
                })
            }
        }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Guard process group `pgid`: kill it if leaderrun dies, or after
    /// `kill_in` from now unless moved by another `arm`.
    pub fn arm(&self, pgid: Pid, kill_in: Duration) {
        let at = monotonic_ns().saturating_add(kill_in.as_nanos().min(i64::MAX as u128) as i64);
        self.send(&format!("A {} {at}\n", pgid.as_raw()));
    }

    /// What the command's own process needs to arm the watchdog for its
    /// group between fork and exec, so that no instant passes in which the
    /// command runs unguarded (see [`super::child::spawn`]).
    pub fn pre_arm(&self, kill_in: Duration) -> PreArm {
        use std::os::fd::AsRawFd;
        PreArm {
            fd: self.tx.as_raw_fd(),
            at: monotonic_ns().saturating_add(kill_in.as_nanos().min(i64::MAX as u128) as i64),
        }
    }

    /// The group is gone: nothing to guard.
    pub fn disarm(&self) {
        self.send("D\n");
    }

    fn send(&self, line: &str) {
        // A write of a few bytes to a pipe is atomic and does not block unless
        // the watchdog is frozen with a full pipe; the pipe holds thousands of
        // these lines.
        if let Err(e) = (&self.tx).write_all(line.as_bytes()) {
            crate::log::info(
                "watchdog-lost",
                &format!("cannot reach the backstop watchdog: {e}"),
            );
        }
    }
}

/// Arms the watchdog from inside the command's process, after `fork` and
/// before `exec`: leaderrun may be killed before it gets to arm it itself, and
/// `PR_SET_PDEATHSIG` would then kill the command but not its children.
#[derive(Debug, Clone, Copy)]
pub struct PreArm {
    /// The write end of the pipe, inherited across `fork` (closed on `exec`).
    fd: std::os::fd::RawFd,
    /// The kill instant, CLOCK_MONOTONIC nanoseconds.
    at: i64,
}

impl PreArm {
    /// Sends `A <own pid> <instant>` to the watchdog. Async-signal-safe: no
    /// allocation, one `write`. A failure is left to leaderrun's own `arm`
    /// right after the spawn, which logs it.
    pub fn arm_self(&self) {
        let mut buf = [0u8; 64];
        buf[..2].copy_from_slice(b"A ");
        let mut n = 2;
        n += write_decimal(&mut buf[n..], nix::unistd::getpid().as_raw() as i64);
        buf[n] = b' ';
        n += 1;
        n += write_decimal(&mut buf[n..], self.at);
        buf[n] = b'\n';
        n += 1;
        // SAFETY: a plain write(2) of a stack buffer to a descriptor that
        // stays open until exec.
        let _ = unsafe { nix::libc::write(self.fd, buf.as_ptr().cast(), n) };
    }
}

/// Writes `v` (>= 0) in decimal at the start of `out`; returns the length.
fn write_decimal(out: &mut [u8], v: i64) -> usize {
    let mut digits = [0u8; 20];
    let (mut v, mut len) = (v.max(0) as u64, 0);
    loop {
        digits[len] = b'0' + (v % 10) as u8;
        len += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..len {
        out[i] = digits[len - 1 - i];
    }
    len
}

fn set_cloexec(fd: &OwnedFd) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    use std::os::fd::AsRawFd;
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    Ok(())
}

/// The watchdog's whole life. Returns its exit code.
fn watch(mut rx: File) -> i32 {
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGPIPE,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGWINCH,
    ] {
        // SAFETY: SIG_IGN installs no handler code.
        unsafe {
            let _ = signal(sig, SigHandler::SigIgn);
        }
    }
    let mut armed: Option<(Pid, i64)> = None;
    let mut buf = Vec::<u8>::new();
    let mut chunk = [0u8; 512];
    loop {
        let timeout = match armed {
            None => PollTimeout::NONE,
            Some((_, at)) => {
                let left_ms = (at - monotonic_ns()).max(0) / 1_000_000;
                PollTimeout::try_from(left_ms.min(60_000) as i32).unwrap_or(PollTimeout::MAX)
            }
        };
        let ready = {
            let mut fds = [PollFd::new(rx.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, timeout) {
                Ok(n) => n > 0,
                Err(nix::errno::Errno::EINTR) => false,
                Err(_) => return kill_and_exit(armed),
            }
        };
        if let Some((pgid, at)) = armed
            && monotonic_ns() >= at
        {
            let _ = killpg(pgid, Signal::SIGKILL);
            armed = None;
        }
        if !ready {
            continue;
        }
        match rx.read(&mut chunk) {
            Ok(0) => return kill_and_exit(armed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return kill_and_exit(armed),
        }
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("A"), Some(pgid), Some(at)) => {
                    if let (Ok(pgid), Ok(at)) = (pgid.parse::<i32>(), at.parse::<i64>())
                        && pgid > 1
                    {
                        armed = Some((Pid::from_raw(pgid), at));
                    }
                }
                (Some("D"), _, _) => armed = None,
                _ => {}
            }
        }
    }
}

fn kill_and_exit(armed: Option<(Pid, i64)>) -> i32 {
    if let Some((pgid, _)) = armed {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    0
}
