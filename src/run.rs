//! The main form: campaign, run the command while leader, step down, repeat.
//!
//! One loop ties the election to the supervisor:
//!
//! 1. Campaign (a shutdown signal meanwhile exits at once).
//! 2. Elected: start the command with `LEADERRUN_TOKEN`, arm the watchdog
//!    with the lease's kill instant, and renew in a background task whose
//!    every success moves that instant forward.
//! 3. Wait for the first of: the command exits, a signal, leadership ends.
//!    - Command exited: stop what is left of its group, then restart it
//!      (`--restart`), or hold the lease until `--hold-at-least`, release it
//!      and exit with the command's status.
//!    - SIGTERM/SIGINT/SIGQUIT: forward, escalate after `--grace`, release,
//!      exit with the command's status.
//!    - Leadership lost or expired: stop the group at once (SIGKILL no later
//!      than the lease's kill instant) and campaign again (`--once`: exit 76).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::backend::Location;
use crate::config::{self, RunConfig, show};
use crate::exit::{self, Exit};
use crate::lease::election::{CampaignError, Candidate, Ended, Lease};
use crate::log;
use crate::supervisor::child::{self, Child, Reaper, Status};
use crate::supervisor::signals::{Request, Signals};
use crate::supervisor::watchdog::Watchdog;

/// How one term as leader ended.
enum Term {
    /// Exit leaderrun with this status.
    Exit(u8),
    /// Leadership ended; the command's group is dead. Campaign again.
    Lost,
}

/// What interrupted the leader while its command ran or while it idled.
enum Event {
    Exited(Status),
    Shutdown(nix::sys::signal::Signal),
    /// Boxed: a lease is large next to the other variants.
    Ended(Box<Lease>, Ended),
}

/// Everything one leader term needs, borrowed from [`run`].
struct Leader<'a> {
    cfg: &'a RunConfig,
    candidate: &'a Arc<Candidate>,
    watchdog: &'a Watchdog,
    signals: &'a mut Signals,
    reaper: &'a mut Reaper,
    /// The renewing task, until it has ended and been joined.
    keeper: Option<JoinHandle<(Lease, Ended)>>,
    cancel: Option<oneshot::Sender<()>>,
    /// Kill instants published by the keeper after each renewal.
    kill_at: watch::Receiver<Instant>,
    grace: Duration,
    /// The fencing token of this term, for the command's environment.
    token: u64,
    /// When this term's lease was acquired, for `--hold-at-least`.
    acquired_at: Instant,
}

/// Runs the main form to completion and returns leaderrun's exit status.
pub async fn run(cfg: RunConfig, watchdog: Watchdog) -> anyhow::Result<u8> {
    let mut signals = Signals::install().context("cannot install signal handlers")?;
    let mut reaper = Reaper::install().context("cannot listen for child exits")?;
    ensure_default_dir(&cfg.location)?;
    let store = cfg.location.open().await.map_err(|e| {
        Exit::new(
            exit::STORE_UNUSABLE,
            format!("{}: {e}", cfg.location.redacted()),
        )
    })?;
    let candidate = Arc::new(Candidate::new(store, cfg.id.clone(), cfg.timing));
    loop {
        let give_up_at = cfg.wait.map(|w| Instant::now() + w);
        let lease = tokio::select! {
            r = candidate.campaign(give_up_at) => match r {
                Ok(lease) => lease,
                Err(CampaignError::Fatal(e)) => return Err(Exit::new(exit::STORE_UNUSABLE, e).into()),
                Err(CampaignError::GaveUp { unavailable: Some(e), .. }) => {
                    return Err(Exit::new(exit::STORE_UNUSABLE, format!("gave up after --wait: {e}")).into());
                }
                Err(CampaignError::GaveUp { holder, unavailable: None }) => {
                    let holder = holder.unwrap_or_else(|| "another candidate".into());
                    return Err(Exit::new(exit::NOT_LEADER, format!("not leader: the lease is held by {holder}")).into());
                }
            },
            sig = shutdown_requested(&mut signals) => {
                log::info("exiting", &format!("received {sig} while campaigning; exiting"));
                return Ok(exit::from_signal(sig as i32));
            }
        };
        let mut leader = Leader::start(
            &cfg,
            &candidate,
            &watchdog,
            &mut signals,
            &mut reaper,
            lease,
        );
        match leader.serve().await {
            Term::Exit(code) => return Ok(code),
            Term::Lost if cfg.once => {
                return Err(Exit::new(
                    exit::LOST,
                    "leadership was lost while the command ran (--once)",
                )
                .into());
            }
            Term::Lost => continue,
        }
    }
}

/// Creates the default local lease directory (private to this user) if the
/// lease lives there, so that `leaderrun -- ./job.sh` works on a fresh
/// machine. Any other missing directory stays an error of the store.
fn ensure_default_dir(location: &Location) -> Result<(), Exit> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    #[allow(irrefutable_let_patterns)]
    let Location::File(file) = location else {
        return Ok(());
    };
    let dir = config::default_dir();
    if file.path.parent() != Some(dir.as_path()) {
        return Ok(());
    }
    let unusable = |e: String| Exit::new(exit::STORE_UNUSABLE, e);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| unusable(format!("cannot create {}: {e}", dir.display())))?;
    // Under /tmp another user could have made it first.
    let meta = std::fs::metadata(&dir)
        .map_err(|e| unusable(format!("cannot inspect {}: {e}", dir.display())))?;
    if meta.uid() != nix::unistd::getuid().as_raw() {
        return Err(unusable(format!(
            "{} belongs to another user; refusing to keep leases there",
            dir.display()
        )));
    }
    Ok(())
}

/// Waits for SIGTERM/SIGINT/SIGQUIT, ignoring the forwardable signals (there is
/// no command to forward them to).
async fn shutdown_requested(signals: &mut Signals) -> nix::sys::signal::Signal {
    loop {
        if let Request::Shutdown(sig) = signals.recv().await {
            return sig;
        }
    }
}

impl<'a> Leader<'a> {
    fn start(
        cfg: &'a RunConfig,
        candidate: &'a Arc<Candidate>,
        watchdog: &'a Watchdog,
        signals: &'a mut Signals,
        reaper: &'a mut Reaper,
        lease: Lease,
    ) -> Leader<'a> {
        let (token, acquired_at) = (lease.token(), lease.acquired_at);
        let (cancel, cancel_rx) = oneshot::channel();
        let (kill_tx, kill_at) = watch::channel(lease.kill_at());
        let keeper = {
            let candidate = candidate.clone();
            tokio::spawn(async move {
                candidate
                    .keep(lease, cancel_rx, move |l| {
                        let _ = kill_tx.send(l.kill_at());
                    })
                    .await
            })
        };
        Leader {
            cfg,
            candidate,
            watchdog,
            signals,
            reaper,
            keeper: Some(keeper),
            cancel: Some(cancel),
            kill_at,
            grace: cfg.timing.grace,
            token,
            acquired_at,
        }
    }

    /// The current kill instant of the lease.
    fn kill_at(&self) -> Instant {
        *self.kill_at.borrow()
    }

    /// The instant from which the lease can no longer be trusted.
    fn stop_at(&self) -> Instant {
        self.kill_at() - self.grace
    }

    /// When a stop begun now must end with SIGKILL.
    fn kill_deadline(&self) -> Instant {
        (Instant::now() + self.grace).min(self.kill_at())
    }

    async fn serve(&mut self) -> Term {
        let env = [
            ("LEADERRUN_TOKEN", self.token.to_string()),
            ("LEADERRUN_LEASE", self.cfg.location.redacted()),
            ("LEADERRUN_ID", self.cfg.id.clone()),
        ];
        loop {
            let left = self.kill_at().saturating_duration_since(Instant::now());
            let guard = self.watchdog.pre_arm(left);
            let mut child = match child::spawn(&self.cfg.command, &env, Some(guard)) {
                Ok(c) => c,
                Err(e) => {
                    // The failed process may have armed the watchdog.
                    self.watchdog.disarm();
                    log::event("spawn-failed", &e.message, &[("exit", json!(e.code))]);
                    self.release().await;
                    return Term::Exit(e.code);
                }
            };
            log::event(
                "started",
                &format!("started command (pid {})", child.pgid()),
                &[("pid", json!(child.pgid().as_raw()))],
            );
            self.arm(&child);
            match self.watch(&mut child).await {
                Event::Shutdown(sig) => {
                    log::info("stopping", &format!("received {sig}: stopping the command"));
                    let status = child
                        .stop(sig, self.kill_deadline(), true, self.reaper, self.signals)
                        .await
                        .status;
                    self.watchdog.disarm();
                    log::event(
                        "exited",
                        &format!("command ended by {status}"),
                        &[("status", json!(status.exit_code()))],
                    );
                    self.release().await;
                    return Term::Exit(status.exit_code());
                }
                Event::Ended(lease, how) => {
                    let why = match &how {
                        Ended::Lost(why) => format!("leadership lost: {why}"),
                        Ended::Expired(why) => format!("lease could not be renewed in time: {why}"),
                        Ended::Cancelled => "leadership ended".to_owned(),
                    };
                    log::event(
                        "stepping-down",
                        &format!("{why}; stopping the command"),
                        &[("reason", json!(why))],
                    );
                    let kill_at = (Instant::now() + self.grace).min(lease.kill_at());
                    let stopped = child
                        .stop(
                            self.cfg.stop_signal,
                            kill_at,
                            false,
                            self.reaper,
                            self.signals,
                        )
                        .await;
                    let status = stopped.status;
                    self.watchdog.disarm();
                    log::event(
                        "exited",
                        &format!("command ended by {status}"),
                        &[("status", json!(status.exit_code()))],
                    );
                    if matches!(how, Ended::Expired(_)) {
                        // The group is dead: handing the lease back is safe and
                        // spares the others a ttl of waiting, if the store answers.
                        let _ = self.candidate.release(&lease).await;
                    }
                    if stopped.shutdown.is_some() {
                        // Asked to exit while stepping down: no new campaign.
                        return Term::Exit(status.exit_code());
                    }
                    return Term::Lost;
                }
                Event::Exited(status) => {
                    log::event(
                        "exited",
                        &format!("command exited with {status}"),
                        &[("status", json!(status.exit_code()))],
                    );
                    let mut shutdown = None;
                    if child.group_alive() {
                        shutdown = child
                            .stop(
                                self.cfg.stop_signal,
                                self.kill_deadline(),
                                false,
                                self.reaper,
                                self.signals,
                            )
                            .await
                            .shutdown;
                    }
                    self.watchdog.disarm();
                    if shutdown.is_some() {
                        // Asked to exit while the rest of the group was being
                        // stopped: no restart, no holding.
                        self.release().await;
                        return Term::Exit(status.exit_code());
                    }
                    if Instant::now() >= self.stop_at() {
                        // leaderrun was frozen or starved past its own stop
                        // instant, and the lease may be someone else's. A
                        // SIGKILL may be the watchdog's: not an exit of the
                        // command's own, so campaign and run it again. Any
                        // other status is the command's own and stands: a job
                        // that finished must not run a second time. Releasing
                        // is a compare-and-swap, harmless if the lease moved.
                        let killed = status == Status::Signaled(nix::libc::SIGKILL);
                        if killed || self.cfg.restart {
                            log::info(
                                "stepping-down",
                                "the lease ran out while the command was ending",
                            );
                            self.finish_keeper().await;
                            return Term::Lost;
                        }
                        self.release().await;
                        return Term::Exit(status.exit_code());
                    }
                    if self.cfg.restart {
                        let again = Instant::now() + self.cfg.timing.retry_every;
                        log::info(
                            "restarting",
                            &format!(
                                "restarting the command in {}",
                                show(self.cfg.timing.retry_every)
                            ),
                        );
                        match self.idle(again).await {
                            None => continue,
                            Some(Event::Shutdown(_)) => {
                                self.release().await;
                                return Term::Exit(status.exit_code());
                            }
                            Some(_) => return Term::Lost,
                        }
                    }
                    let hold_until = self.acquired_at + self.cfg.hold_at_least;
                    if Instant::now() < hold_until {
                        log::info(
                            "holding",
                            &format!(
                                "holding the lease for --hold-at-least {}",
                                show(self.cfg.hold_at_least)
                            ),
                        );
                        if let Some(Event::Ended(..)) = self.idle(hold_until).await {
                            return Term::Exit(status.exit_code());
                        }
                    }
                    self.release().await;
                    return Term::Exit(status.exit_code());
                }
            }
        }
    }

    fn arm(&self, child: &Child) {
        let left = self.kill_at().saturating_duration_since(Instant::now());
        self.watchdog.arm(child.pgid(), left);
    }

    /// Waits for the command to exit, a shutdown signal or the end of
    /// leadership, forwarding signals and moving the watchdog's deadline.
    async fn watch(&mut self, child: &mut Child) -> Event {
        loop {
            let keeper = self.keeper.as_mut().expect("keeper runs while leading");
            tokio::select! {
                // A command that has already ended by itself is reported as
                // such even when the end of leadership is seen at the same
                // time (after a freeze, say): its status is its own, and a
                // finished job must not be run again.
                biased;
                status = child.wait(self.reaper) => return Event::Exited(status),
                req = self.signals.recv() => match req {
                    Request::Forward(sig) => child.signal_group(sig),
                    Request::Shutdown(sig) => return Event::Shutdown(sig),
                },
                joined = keeper => {
                    self.keeper = None;
                    let (lease, how) = joined.expect("the keeper task does not panic");
                    return Event::Ended(Box::new(lease), how);
                }
                Ok(()) = self.kill_at.changed() => self.arm(child),
            }
        }
    }

    /// Keeps the lease without a command until `until`. Returns what cut it
    /// short, if anything.
    async fn idle(&mut self, until: Instant) -> Option<Event> {
        loop {
            let keeper = self.keeper.as_mut().expect("keeper runs while leading");
            tokio::select! {
                _ = sleep_until(until) => return None,
                req = self.signals.recv() => {
                    if let Request::Shutdown(sig) = req {
                        return Some(Event::Shutdown(sig));
                    }
                }
                joined = keeper => {
                    self.keeper = None;
                    let (lease, how) = joined.expect("the keeper task does not panic");
                    return Some(Event::Ended(Box::new(lease), how));
                }
            }
        }
    }

    /// Stops the keeper and returns the lease it kept, if still held.
    async fn finish_keeper(&mut self) -> Option<Lease> {
        if let Some(cancel) = self.cancel.take() {
            let _ = cancel.send(());
        }
        let keeper = self.keeper.take()?;
        match keeper.await {
            Ok((lease, Ended::Cancelled)) => Some(lease),
            _ => None,
        }
    }

    /// Hands the lease back (the command's group must already be dead).
    async fn release(&mut self) {
        if let Some(lease) = self.finish_keeper().await
            && let Err(e) = self.candidate.release(&lease).await
        {
            log::info(
                "release-failed",
                &format!("could not release the lease: {e}"),
            );
        }
    }
}
