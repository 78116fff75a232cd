//! N leaderrun processes on one lease while the leader is repeatedly killed,
//! frozen and stopped; then the safety checks of [`super::records`].
//!
//! Generic over the lease URL: a backend test builds a [`Contention`] with its
//! own URL (and environment, for credentials) and calls [`Contention::run`].

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::helper::Helper;
use super::process::{Proc, TestDir, leaderrun, mono_ns, send_signal, wait_until};
use super::records::{ChildRecord, assert_safe, load_heads};

/// What the runner does to the current leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disruption {
    /// SIGKILL the leader's leaderrun: its watchdog must kill the command at
    /// once, and another contender takes over once the lease has expired.
    Kill,
    /// SIGSTOP the leader's leaderrun for this long (make it longer than the
    /// ttl), then SIGCONT: its watchdog must have killed the command by the
    /// lease deadline; it goes back to campaigning afterwards.
    Freeze(Duration),
    /// SIGTERM the leader's leaderrun: it stops its command, releases the
    /// lease and exits 143.
    Terminate,
    /// SIGKILL the command itself: leaderrun exits 137 and releases.
    KillCommand,
}

/// The scenario. Build with [`Contention::new`], adjust the fields, run.
#[derive(Debug, Clone)]
pub struct Contention {
    pub lease_url: String,
    /// How many leaderrun processes contend at all times.
    pub contenders: usize,
    /// Keep disrupting leaders for this long.
    pub duration: Duration,
    /// `--ttl` of every contender.
    pub ttl: Duration,
    /// Further leaderrun arguments (before `--`).
    pub args: Vec<String>,
    /// Further environment for leaderrun (credentials, endpoints).
    pub env: Vec<(String, String)>,
    /// Applied to successive leaders, round robin.
    pub disruptions: Vec<Disruption>,
    /// How long a new leader may take to start its command after a
    /// disruption before the run fails.
    pub takeover_timeout: Duration,
    /// How long a signalled leaderrun may take to exit.
    pub exit_timeout: Duration,
}

/// One disruption and what followed.
#[derive(Debug, Clone)]
pub struct Event {
    pub disruption: Disruption,
    /// The leader's token.
    pub token: u64,
    /// CLOCK_MONOTONIC when the signal was sent.
    pub at_ns: i64,
    /// From the signal to the last record of the old command.
    pub old_child_ended_after: Option<Duration>,
    /// From the signal to the first record of the next command.
    pub next_started_after: Option<Duration>,
}

/// What a run saw; every safety check has already passed.
#[derive(Debug)]
pub struct ContentionReport {
    pub records: Vec<ChildRecord>,
    pub events: Vec<Event>,
    /// Leadership changes nobody provoked (renewals too slow under load).
    pub unprovoked: usize,
}

impl ContentionReport {
    /// A few lines for the test's output: counts and latencies per kind.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{} commands ran, {} disruptions, {} unprovoked hand-overs\n",
            self.records.len(),
            self.events.len(),
            self.unprovoked
        );
        for kind in ["Kill", "Freeze", "Terminate", "KillCommand"] {
            let of_kind: Vec<&Event> = self
                .events
                .iter()
                .filter(|e| format!("{:?}", e.disruption).starts_with(kind))
                .filter(|e| !(kind == "Kill" && matches!(e.disruption, Disruption::KillCommand)))
                .collect();
            if of_kind.is_empty() {
                continue;
            }
            let stats = |f: &dyn Fn(&Event) -> Option<Duration>| {
                let mut v: Vec<Duration> = of_kind.iter().filter_map(|e| f(e)).collect();
                v.sort();
                match (v.first(), v.get(v.len() / 2), v.last()) {
                    (Some(a), Some(m), Some(z)) => format!(
                        "min {:.0} / median {:.0} / max {:.0} ms",
                        a.as_secs_f64() * 1e3,
                        m.as_secs_f64() * 1e3,
                        z.as_secs_f64() * 1e3
                    ),
                    _ => "n/a".into(),
                }
            };
            out.push_str(&format!(
                "  {kind} x{}: old command ended {}; next command started {}\n",
                of_kind.len(),
                stats(&|e| e.old_child_ended_after),
                stats(&|e| e.next_started_after)
            ));
        }
        out
    }
}

impl Contention {
    /// Five contenders for 30 s with `--ttl 1s`, every kind of disruption.
    pub fn new(lease_url: &str) -> Contention {
        let ttl = Duration::from_secs(1);
        Contention {
            lease_url: lease_url.to_owned(),
            contenders: 5,
            duration: Duration::from_secs(30),
            ttl,
            args: Vec::new(),
            env: Vec::new(),
            disruptions: vec![
                Disruption::Kill,
                Disruption::Freeze(ttl * 2),
                Disruption::Terminate,
                Disruption::KillCommand,
            ],
            takeover_timeout: ttl * 4 + Duration::from_secs(5),
            exit_timeout: Duration::from_secs(10),
        }
    }

    fn spawn(&self, dir: &TestDir, records: &Path, seq: usize) -> Proc {
        let name = format!("c{seq}");
        let mut cmd = leaderrun(dir, &name)
            .lease(&self.lease_url)
            .arg("--ttl")
            .arg(format!("{}ms", self.ttl.as_millis()))
            .arg("--id")
            .arg(&name)
            .args(&self.args);
        for (k, v) in &self.env {
            cmd = cmd.env(k, v);
        }
        cmd.helper(&Helper::new(records)).spawn()
    }

    /// Runs the scenario in `dir` and checks it; panics on any violation.
    pub fn run(&self, dir: &TestDir) -> ContentionReport {
        let records = dir.subdir("records");
        let mut seq = 0;
        let mut procs: Vec<Proc> = (0..self.contenders)
            .map(|_| {
                seq += 1;
                self.spawn(dir, &records, seq)
            })
            .collect();
        let mut rng = Lcg(mono_ns() as u64 | 1);
        let mut events: Vec<Event> = Vec::new();
        let mut unexpected: Vec<String> = Vec::new();
        let started = Instant::now();
        let mut last_token = 0u64;
        let mut round = 0usize;
        loop {
            // Whoever leads now: the newest live command with a newer token.
            let deadline = Instant::now() + self.takeover_timeout;
            let leader = loop {
                for p in procs.iter_mut() {
                    if let Some(status) = p.try_status() {
                        unexpected.push(format!(
                            "{} exited by itself with {status:?}:\n{}",
                            p.name,
                            tail(&p.stderr(), 15)
                        ));
                        seq += 1;
                        *p = self.spawn(dir, &records, seq);
                    }
                }
                let heads = load_heads(&records);
                if let Some(r) = heads
                    .iter()
                    .filter(|r| r.token.is_some_and(|t| t > last_token) && r.alive())
                    .max_by_key(|r| r.token)
                {
                    break r.clone();
                }
                if Instant::now() > deadline {
                    panic!(
                        "no new leader within {:?} after token {last_token}\n{}",
                        self.takeover_timeout,
                        all_stderr(&procs)
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            let token = leader.token.unwrap_or(0);
            if let Some(prev) = events.last_mut() {
                prev.next_started_after = Some(ns_between(prev.at_ns, leader.start_ns));
                // Commands that started in between, other than this one's
                // predecessors, were leadership changes nobody provoked.
            }
            last_token = token;
            if started.elapsed() >= self.duration {
                break;
            }
            // Let the leader renew a few times first.
            std::thread::sleep(Duration::from_millis(100 + rng.next() % 600));
            let Some(idx) = procs.iter().position(|p| p.pid() == leader.ppid) else {
                panic!(
                    "the leader's command {} has parent {}, not a contender",
                    leader.pid, leader.ppid
                );
            };
            if !leader.alive() {
                // Lost leadership meanwhile (a slow renewal): find the next.
                continue;
            }
            let disruption = self.disruptions[round % self.disruptions.len()];
            round += 1;
            let at_ns = mono_ns();
            let mut event = Event {
                disruption,
                token,
                at_ns,
                old_child_ended_after: None,
                next_started_after: None,
            };
            let child_gone = |timeout: Duration, what: &str| {
                wait_until(timeout, what, || !leader.alive());
            };
            match disruption {
                Disruption::Kill => {
                    procs[idx].signal(Signal::SIGKILL);
                    procs[idx].expect_exit(self.exit_timeout);
                    child_gone(
                        Duration::from_secs(2),
                        "the watchdog to kill the command of a SIGKILLed leaderrun",
                    );
                    seq += 1;
                    procs[idx] = self.spawn(dir, &records, seq);
                }
                Disruption::Freeze(d) => {
                    procs[idx].signal(Signal::SIGSTOP);
                    std::thread::sleep(d);
                    let alive = leader.alive();
                    procs[idx].signal(Signal::SIGCONT);
                    assert!(
                        !alive,
                        "the command {} of leaderrun {} frozen for {d:?} (ttl {:?}) was still running",
                        leader.pid, leader.ppid, self.ttl
                    );
                }
                Disruption::Terminate => {
                    procs[idx].signal(Signal::SIGTERM);
                    procs[idx].expect_code(self.exit_timeout, 143);
                    seq += 1;
                    procs[idx] = self.spawn(dir, &records, seq);
                }
                Disruption::KillCommand => {
                    let step_downs = |p: &Proc| p.stderr().matches("stopping the command").count();
                    let before = step_downs(&procs[idx]);
                    send_signal(leader.pid, Signal::SIGKILL);
                    match procs[idx].wait_timeout(self.exit_timeout) {
                        Some(status) => {
                            assert_eq!(
                                status.code(),
                                Some(137),
                                "{} exited with {status:?} after its command was killed\n{}",
                                procs[idx].name,
                                procs[idx].stderr()
                            );
                            seq += 1;
                            procs[idx] = self.spawn(dir, &records, seq);
                        }
                        // Leadership ended on its own (a slow renewal) just as
                        // the command was killed: it campaigns again instead.
                        None if step_downs(&procs[idx]) > before => {}
                        None => panic!(
                            "{} did not exit after its command was killed\n{}",
                            procs[idx].name,
                            procs[idx].stderr()
                        ),
                    }
                }
            }
            if let Some(r) = ChildRecord::load(&leader.path) {
                event.old_child_ended_after = Some(ns_between(at_ns, r.last_ns));
            }
            events.push(event);
        }

        // Stop everyone: campaigners and the leader alike exit promptly.
        for p in &procs {
            p.signal(Signal::SIGTERM);
        }
        for p in procs.iter_mut() {
            p.expect_code(self.exit_timeout, 143);
        }
        assert!(
            unexpected.is_empty(),
            "contenders exited without being told to:\n{}",
            unexpected.join("\n")
        );
        let all = assert_safe(dir, &records);
        assert!(
            all.len() > events.len(),
            "only {} commands ran for {} disruptions",
            all.len(),
            events.len()
        );
        let unprovoked = all.len().saturating_sub(events.len() + 1);
        ContentionReport {
            records: all,
            events,
            unprovoked,
        }
    }
}

fn ns_between(from: i64, to: i64) -> Duration {
    Duration::from_nanos((to - from).max(0) as u64)
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn all_stderr(procs: &[Proc]) -> String {
    procs
        .iter()
        .map(|p| {
            format!(
                "--- {} (pid {}):\n{}",
                p.name,
                p.pid(),
                tail(&p.stderr(), 20)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tiny deterministic generator for the dwell times.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}
