//! Campaign, renew, step down: the election state machine of SPEC §1.
//!
//! - **Expiry is observed, never computed from a record's timestamps.** A
//!   waiting candidate takes a lease over only after it has seen the *same
//!   version* unchanged for the holder's ttl on its own monotonic clock. A
//!   record marked released is taken at once.
//! - **The leader's deadline is local and pessimistic**: `t_sent + ttl`, where
//!   `t_sent` is the instant *before* its last successful write was sent.
//! - **Every request is bounded** by the request timeout and by the time left
//!   before the leader would have to stop its command.
//! - **Lost for sure vs. unknown**: a conflict ends leadership at once; an
//!   unavailable store is retried until the stop instant.
//! - **Ambiguous writes are resolved by re-reading**: after a timeout or a
//!   transport error, the record is loaded again; if it carries this
//!   acquisition's nonce and the serial just written, the write landed.
//!
//! All instants are `tokio::time::Instant`, so the unit tests below drive the
//! machine with paused time against the in-memory store.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::{Instant, sleep_until, timeout_at};

use super::record::{Record, new_nonce};
use super::store::{Store, StoreError, Stored, Version};
use crate::config::{Timing, show};
use crate::log;

/// A held lease: what the leader last wrote and when it sent it.
#[derive(Debug, Clone)]
pub struct Lease {
    pub record: Record,
    pub version: Version,
    /// Monotonic instant before the last successful write was sent.
    pub sent_at: Instant,
    /// Monotonic instant before the acquiring write was sent.
    pub acquired_at: Instant,
    timing: Timing,
}

impl Lease {
    pub fn token(&self) -> u64 {
        self.record.token
    }
    /// The lease may have passed to someone else from this instant on.
    pub fn deadline(&self) -> Instant {
        self.sent_at + self.timing.ttl
    }
    /// Send the stop signal from here if no renewal has succeeded.
    pub fn stop_at(&self) -> Instant {
        self.sent_at + self.timing.stop_after()
    }
    /// The command's process group must be dead by here.
    pub fn kill_at(&self) -> Instant {
        self.sent_at + self.timing.kill_after()
    }
}

/// Why a campaign ended without a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CampaignError {
    /// `--wait` ran out. `holder` is who held the lease at the last look;
    /// `unavailable` is the last store error if the store could not be read.
    GaveUp {
        holder: Option<String>,
        unavailable: Option<String>,
    },
    /// The store cannot be used (auth, missing bucket, foreign object, ...).
    Fatal(String),
}

/// How leadership ended while it was being kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The caller asked to stop keeping it; the lease is still held.
    Cancelled,
    /// Somebody else wrote the record: lost for sure, stop now.
    Lost(String),
    /// No renewal succeeded before the stop instant: stop now.
    Expired(String),
}

/// The outcome of one conditional write, after resolving ambiguity.
#[derive(Debug)]
enum Write {
    Done(Version),
    Conflict(String),
    Unknown(String),
    Fatal(String),
}

/// One candidate for one lease.
pub struct Candidate {
    store: Arc<dyn Store>,
    id: String,
    timing: Timing,
}

impl Candidate {
    pub fn new(store: Arc<dyn Store>, id: String, timing: Timing) -> Candidate {
        Candidate { store, id, timing }
    }

    pub fn describe(&self) -> String {
        self.store.describe()
    }

    /// Campaigns until elected, until `give_up_at`, or until the store turns
    /// out to be unusable.
    pub async fn campaign(&self, give_up_at: Option<Instant>) -> Result<Lease, CampaignError> {
        let ttl_ms = self.timing.ttl.as_millis() as u64;
        // The version last seen and the instant it was first seen.
        let mut seen: Option<(Version, Instant)> = None;
        let mut last_holder: Option<String> = None;
        let mut last_error: Option<String> = None;
        let mut backoff = self.timing.retry_every;
        let lease_url = self.store.describe();
        log::event(
            "campaigning",
            &format!("campaigning for {lease_url}"),
            &[("lease", json!(lease_url))],
        );
        loop {
            let now = Instant::now();
            if give_up_at.is_some_and(|g| now >= g) && (seen.is_some() || last_error.is_some()) {
                return Err(CampaignError::GaveUp {
                    holder: last_holder,
                    unavailable: last_error,
                });
            }
            let loaded =
                match timeout_at(now + self.timing.request_timeout, self.store.load()).await {
                    Ok(r) => r,
                    Err(_) => Err(StoreError::Unavailable(format!(
                        "no answer within {}",
                        show(self.timing.request_timeout)
                    ))),
                };
            let observed_at = Instant::now();
            let mut pause = self.timing.retry_every;
            match loaded {
                Err(StoreError::Fatal(e)) => return Err(CampaignError::Fatal(e)),
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(&msg) {
                        log::event(
                            "store-unavailable",
                            &format!("cannot read the lease, will retry: {msg}"),
                            &[],
                        );
                    }
                    last_error = Some(msg);
                    pause = backoff;
                    backoff = (backoff * 2).min(self.timing.ttl.max(self.timing.retry_every));
                }
                Ok(current) => {
                    backoff = self.timing.retry_every;
                    if last_error.take().is_some() {
                        log::info("store-available", "the lease store answers again");
                    }
                    let (expected, next, why) = match &current {
                        None => (
                            None,
                            Record::first(&self.id, &new_nonce(), ttl_ms),
                            "no lease yet".to_owned(),
                        ),
                        Some(s) if s.record.released => (
                            Some(s.version.clone()),
                            s.record.acquired_by(&self.id, &new_nonce(), ttl_ms),
                            format!("released by {}", s.record.holder),
                        ),
                        Some(s) => {
                            let hold = self.timing.ttl.max(Duration::from_millis(s.record.ttl_ms));
                            let first_seen = match &seen {
                                Some((v, t)) if *v == s.version => *t,
                                _ => {
                                    if last_holder.as_deref() != Some(&s.record.holder) {
                                        log::event(
                                            "following",
                                            &format!(
                                                "lease held by {} (token {})",
                                                s.record.holder, s.record.token
                                            ),
                                            &[
                                                ("holder", json!(s.record.holder)),
                                                ("token", json!(s.record.token)),
                                            ],
                                        );
                                    }
                                    last_holder = Some(s.record.holder.clone());
                                    seen = Some((s.version.clone(), observed_at));
                                    observed_at
                                }
                            };
                            let expires = first_seen + hold;
                            if observed_at < expires {
                                let mut wake = (observed_at + self.timing.retry_every).min(expires);
                                if let Some(g) = give_up_at {
                                    wake = wake.min(g.max(observed_at));
                                }
                                sleep_until(wake).await;
                                continue;
                            }
                            (
                                Some(s.version.clone()),
                                s.record.acquired_by(&self.id, &new_nonce(), ttl_ms),
                                format!("{} unchanged for {}", s.record.holder, show(hold)),
                            )
                        }
                    };
                    let sent_at = Instant::now();
                    let limit = sent_at + self.timing.request_timeout;
                    match self.write(expected.as_ref(), &next, limit, None).await {
                        Write::Done(version) => {
                            log::event(
                                "elected",
                                &format!(
                                    "elected with token {} on {lease_url} ({why})",
                                    next.token
                                ),
                                &[("token", json!(next.token)), ("lease", json!(lease_url))],
                            );
                            return Ok(Lease {
                                record: next,
                                version,
                                sent_at,
                                acquired_at: sent_at,
                                timing: self.timing,
                            });
                        }
                        Write::Conflict(_) => {
                            // Somebody else won the race: look again at once.
                            seen = None;
                            continue;
                        }
                        Write::Unknown(e) => {
                            log::event(
                                "store-unavailable",
                                &format!("acquiring failed, will retry: {e}"),
                                &[],
                            );
                            last_error = Some(e);
                        }
                        Write::Fatal(e) => return Err(CampaignError::Fatal(e)),
                    }
                }
            }
            let mut wake = Instant::now() + pause;
            if let Some(g) = give_up_at {
                wake = wake.min(g.max(Instant::now()));
            }
            sleep_until(wake).await;
        }
    }

    /// Keeps `lease` renewed until it is lost, runs out, or `cancel` fires.
    /// `on_renew` sees every successful renewal (to move the backstop's
    /// deadline). Returns the last state of the lease and how keeping ended.
    pub async fn keep(
        &self,
        mut lease: Lease,
        mut cancel: tokio::sync::oneshot::Receiver<()>,
        mut on_renew: impl FnMut(&Lease) + Send,
    ) -> (Lease, Ended) {
        let mut next_attempt = lease.sent_at + self.timing.renew_every;
        let mut failure: Option<String> = None;
        loop {
            tokio::select! {
                biased;
                _ = &mut cancel => return (lease, Ended::Cancelled),
                _ = sleep_until(next_attempt.min(lease.stop_at())) => {}
            }
            let stop_at = lease.stop_at();
            let now = Instant::now();
            if now >= stop_at {
                let why = failure.unwrap_or_else(|| "no renewal was attempted in time".into());
                return (lease, Ended::Expired(why));
            }
            let next = lease.record.renewed();
            let limit = (now + self.timing.request_timeout).min(stop_at);
            match self
                .write(Some(&lease.version), &next, limit, Some(stop_at))
                .await
            {
                Write::Done(version) => {
                    if failure.take().is_some() {
                        log::info("renewed", "renewal succeeded again");
                    }
                    lease.record = next;
                    lease.version = version;
                    lease.sent_at = now;
                    on_renew(&lease);
                    next_attempt = now + self.timing.renew_every;
                }
                Write::Conflict(why) => return (lease, Ended::Lost(why)),
                Write::Fatal(why) => return (lease, Ended::Lost(why)),
                Write::Unknown(why) => {
                    log::event(
                        "renew-failed",
                        &format!("renewal failed, retrying until the stop deadline: {why}"),
                        &[("reason", json!(why))],
                    );
                    failure = Some(why);
                    // Retry soon, but leave the store a moment.
                    next_attempt = Instant::now()
                        + (self.timing.renew_every / 4).max(Duration::from_millis(10));
                }
            }
        }
    }

    /// Marks the lease released (keeping its token) so the next candidate may
    /// take it at once. Only call this once the command's group is dead.
    pub async fn release(&self, lease: &Lease) -> Result<(), String> {
        let next = lease.record.released();
        let limit = Instant::now() + self.timing.request_timeout;
        match self.write(Some(&lease.version), &next, limit, None).await {
            Write::Done(_) => {
                log::event(
                    "released",
                    &format!("released token {}", next.token),
                    &[("token", json!(next.token))],
                );
                Ok(())
            }
            Write::Conflict(e) => Err(format!("the lease had already passed on: {e}")),
            Write::Unknown(e) | Write::Fatal(e) => Err(e),
        }
    }

    /// One conditional write, bounded by `limit`, with an ambiguous outcome
    /// resolved by reading the record back (within a request timeout, and
    /// never past `bound`, the leader's stop instant, when given).
    async fn write(
        &self,
        expected: Option<&Version>,
        next: &Record,
        limit: Instant,
        bound: Option<Instant>,
    ) -> Write {
        let attempt = async {
            match expected {
                None => self.store.create(next).await,
                Some(v) => self.store.replace(v, next).await,
            }
        };
        let outcome = match timeout_at(limit, attempt).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(
                "the request did not finish in time".into(),
            )),
        };
        match outcome {
            Ok(v) => Write::Done(v),
            Err(StoreError::Fatal(e)) => Write::Fatal(e),
            Err(first) => {
                // Conflict or unknown: did our own write land anyway (a retried
                // request that saw its own success as a conflict, a lost reply)?
                let now = Instant::now();
                let reread_limit = bound.map_or(now + self.timing.request_timeout, |b| {
                    b.min(now + self.timing.request_timeout)
                });
                let reread = if reread_limit > now {
                    timeout_at(reread_limit, self.store.load()).await.ok()
                } else {
                    None
                };
                match reread {
                    Some(Ok(current)) => resolve(&first, expected, next, current),
                    _ => match first {
                        StoreError::Conflict(e) => Write::Conflict(e),
                        other => Write::Unknown(other.to_string()),
                    },
                }
            }
        }
    }
}

/// Decides an ambiguous write from the record read back afterwards.
fn resolve(
    first: &StoreError,
    expected: Option<&Version>,
    next: &Record,
    current: Option<Stored>,
) -> Write {
    match current {
        // Same acquisition, same write count, same released flag: our write.
        // (An operator's forced release keeps the nonce and bumps the serial
        // too, but it sets `released`, which a renewal never does.)
        Some(s)
            if s.record.nonce == next.nonce
                && s.record.serial == next.serial
                && s.record.released == next.released =>
        {
            Write::Done(s.version)
        }
        // Still as before: the write did not land (yet). A conflict here would
        // be a store that contradicts itself; treat it as unknown.
        Some(s) if Some(&s.version) == expected => Write::Unknown(first.to_string()),
        None if expected.is_none() => Write::Unknown(first.to_string()),
        Some(s) => Write::Conflict(format!(
            "the lease record was written by {} (token {}){}",
            s.record.holder,
            s.record.token,
            if s.record.released { ", released" } else { "" }
        )),
        None => Write::Conflict("the lease record has vanished".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::memory::{Fault, MemoryStore};
    use tokio::time::sleep;

    fn timing(ttl_ms: u64) -> Timing {
        Timing::new(Some(Duration::from_millis(ttl_ms)), None, None, None, None).unwrap()
    }

    fn candidate(store: &Arc<MemoryStore>, id: &str) -> Candidate {
        Candidate::new(store.clone(), id.into(), timing(10_000))
    }

    fn cancel_never() -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::mem::forget(tx);
        rx
    }

    #[tokio::test(start_paused = true)]
    async fn first_candidate_creates_with_token_one() {
        let store = Arc::new(MemoryStore::new());
        let lease = candidate(&store, "a").campaign(None).await.unwrap();
        assert_eq!(lease.token(), 1);
        assert_eq!(store.peek().unwrap().record.holder, "a");
        assert_eq!(lease.deadline() - lease.sent_at, Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn takeover_only_after_unchanged_for_ttl_on_local_clock() {
        let store = Arc::new(MemoryStore::new());
        let a = candidate(&store, "a").campaign(None).await.unwrap();
        let start = Instant::now();
        let b = candidate(&store, "b").campaign(None).await.unwrap();
        let waited = Instant::now() - start;
        assert!(
            waited >= Duration::from_secs(10),
            "took over after {waited:?}"
        );
        assert!(
            waited
                < Duration::from_secs(10) + timing(10_000).retry_every + Duration::from_millis(1)
        );
        assert_eq!(b.token(), a.token() + 1);
        assert!(
            Instant::now() >= a.deadline(),
            "b must start only after a's own deadline"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn released_lease_is_taken_at_once_and_token_kept() {
        let store = Arc::new(MemoryStore::new());
        let ca = candidate(&store, "a");
        let a = ca.campaign(None).await.unwrap();
        ca.release(&a).await.unwrap();
        assert_eq!(store.peek().unwrap().record.token, 1);
        let start = Instant::now();
        let b = candidate(&store, "b").campaign(None).await.unwrap();
        assert_eq!(Instant::now(), start, "no waiting for a released lease");
        assert_eq!(b.token(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewing_leader_is_never_taken_over() {
        let store = Arc::new(MemoryStore::new());
        let ca = Arc::new(candidate(&store, "a"));
        let a = ca.campaign(None).await.unwrap();
        let keeper = {
            let ca = ca.clone();
            tokio::spawn(async move { ca.keep(a, cancel_never(), |_| {}).await })
        };
        let give_up = Instant::now() + Duration::from_secs(60);
        let err = candidate(&store, "b")
            .campaign(Some(give_up))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            CampaignError::GaveUp {
                holder: Some("a".into()),
                unavailable: None
            }
        );
        assert!(!keeper.is_finished());
        assert!(
            store.writes() >= 12,
            "leader renewed {} times",
            store.writes()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn outage_expires_the_leader_before_anyone_could_take_over() {
        let store = Arc::new(MemoryStore::new());
        let ca = candidate(&store, "a");
        let a = ca.campaign(None).await.unwrap();
        let deadline = a.deadline();
        store.set_fault(Fault::Down);
        let (lease, ended) = ca.keep(a, cancel_never(), |_| {}).await;
        assert!(matches!(ended, Ended::Expired(_)), "{ended:?}");
        assert_eq!(Instant::now(), lease.stop_at());
        assert!(Instant::now() + timing(10_000).grace < deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_store_cannot_hold_a_renewal_past_the_stop_instant() {
        let store = Arc::new(MemoryStore::new());
        let ca = candidate(&store, "a");
        let a = ca.campaign(None).await.unwrap();
        let stop_at = a.stop_at();
        store.set_fault(Fault::Hang);
        let (_, ended) = ca.keep(a, cancel_never(), |_| {}).await;
        assert!(matches!(ended, Ended::Expired(_)), "{ended:?}");
        assert_eq!(Instant::now(), stop_at);
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_is_lost_at_once() {
        let store = Arc::new(MemoryStore::new());
        let ca = candidate(&store, "a");
        let a = ca.campaign(None).await.unwrap();
        // An operator's `release --force`.
        let cur = store.peek().unwrap();
        store
            .replace(&cur.version, &cur.record.released())
            .await
            .unwrap();
        let start = Instant::now();
        let (_, ended) = ca.keep(a, cancel_never(), |_| {}).await;
        assert!(matches!(ended, Ended::Lost(_)), "{ended:?}");
        let took = Instant::now() - start;
        let renew = timing(10_000).renew_every;
        assert!(
            took >= renew && took <= renew + Duration::from_millis(1),
            "lost at the first renewal, after {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_reply_is_resolved_by_rereading_the_nonce() {
        let store = Arc::new(MemoryStore::new());
        let ca = candidate(&store, "a");
        let a = ca.campaign(None).await.unwrap();
        store.set_fault(Fault::LoseReplies);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut renewals = Vec::new();
        let keeper = ca.keep(a, rx, |l| renewals.push(l.record.serial));
        let stopper = async {
            sleep(Duration::from_secs(30)).await;
            tx.send(()).unwrap();
        };
        let ((lease, ended), ()) = tokio::join!(keeper, stopper);
        assert_eq!(
            ended,
            Ended::Cancelled,
            "renewals whose replies were lost still count"
        );
        assert!(renewals.len() >= 8, "{renewals:?}");
        assert_eq!(store.peek().unwrap().version, lease.version);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_create_reply_still_elects() {
        let store = Arc::new(MemoryStore::new());
        store.set_fault(Fault::LoseReplies);
        let lease = candidate(&store, "a").campaign(None).await.unwrap();
        assert_eq!(store.peek().unwrap().version, lease.version);
    }

    #[tokio::test(start_paused = true)]
    async fn store_down_at_start_keeps_campaigning_then_gives_up_with_the_reason() {
        let store = Arc::new(MemoryStore::new());
        store.set_fault(Fault::Down);
        let give_up = Instant::now() + Duration::from_secs(20);
        let err = candidate(&store, "a")
            .campaign(Some(give_up))
            .await
            .unwrap_err();
        match err {
            CampaignError::GaveUp {
                holder: None,
                unavailable: Some(e),
            } => assert!(e.contains("outage"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() >= give_up && Instant::now() < give_up + Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn store_recovers_and_candidate_is_elected() {
        let store = Arc::new(MemoryStore::new());
        store.set_fault(Fault::Down);
        let s2 = store.clone();
        tokio::spawn(async move {
            sleep(Duration::from_secs(7)).await;
            s2.set_fault(Fault::None);
        });
        let lease = candidate(&store, "a").campaign(None).await.unwrap();
        assert_eq!(lease.token(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_longer_holder_ttl_is_respected() {
        let store = Arc::new(MemoryStore::new());
        let long = Candidate::new(store.clone(), "long".into(), timing(30_000));
        long.campaign(None).await.unwrap();
        let start = Instant::now();
        candidate(&store, "short").campaign(None).await.unwrap();
        assert!(Instant::now() - start >= Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn wait_zero_gives_up_after_one_look() {
        let store = Arc::new(MemoryStore::new());
        candidate(&store, "a").campaign(None).await.unwrap();
        let start = Instant::now();
        let err = candidate(&store, "b")
            .campaign(Some(start))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            CampaignError::GaveUp {
                holder: Some("a".into()),
                unavailable: None
            }
        );
        assert_eq!(Instant::now(), start);
    }

    #[tokio::test(start_paused = true)]
    async fn many_candidates_never_overlap() {
        // Leaders that stop renewing at random moments; followers take over.
        // The invariant: a new lease starts only after the previous holder's
        // own kill instant.
        let store = Arc::new(MemoryStore::new());
        let mut last_kill_at: Option<Instant> = None;
        let mut last_token = 0;
        for round in 0..20u64 {
            let c = Candidate::new(store.clone(), format!("c{round}"), timing(2_000));
            let lease = c.campaign(None).await.unwrap();
            if let Some(k) = last_kill_at {
                assert!(
                    Instant::now() >= k,
                    "round {round}: elected before the previous kill instant"
                );
            }
            assert!(lease.token() > last_token);
            last_token = lease.token();
            // Keep it for a while, then "die" without releasing.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let keep_for = Duration::from_millis(300 * (round % 7));
            let (lease, _) = tokio::join!(c.keep(lease, rx, |_| {}), async {
                sleep(keep_for).await;
                let _ = tx.send(());
            })
            .0;
            last_kill_at = Some(lease.kill_at());
            if round % 3 == 0 {
                c.release(&lease).await.unwrap();
                last_kill_at = Some(Instant::now());
            }
        }
    }
}
