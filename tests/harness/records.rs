//! Reading the helper's records back, and the checks of the one safety
//! property: at no instant do two children of the same lease run at once.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::process::{TestDir, leftovers, pid_alive};

/// Everything one helper child recorded.
#[derive(Debug, Clone)]
pub struct ChildRecord {
    pub path: PathBuf,
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// Start time in clock ticks since boot, to tell the pid from its reuse.
    pub stime: u64,
    /// `LEADERRUN_TOKEN` as a number (`None` if absent or not a number).
    pub token: Option<u64>,
    /// CLOCK_MONOTONIC of the first record.
    pub start_ns: i64,
    /// CLOCK_MONOTONIC of the last record (heartbeat, signal or stop).
    pub last_ns: i64,
    pub beats: usize,
    /// Signals received: (number, when).
    pub signals: Vec<(i32, i64)>,
    /// How it ended by itself: (when, `signal=N` or `exit=CODE`).
    pub stop: Option<(i64, String)>,
    /// Grandchildren it started: (pid, start time).
    pub grandchildren: Vec<(i32, u64)>,
    /// The `LEADERRUN_*` variables it saw.
    pub env: Vec<(String, String)>,
}

impl ChildRecord {
    /// Parses one record file; `None` while it has no start line yet.
    pub fn load(path: &Path) -> Option<ChildRecord> {
        Self::parse(path, usize::MAX)
    }

    /// Only the first lines (start and environment): cheap, for polling.
    pub fn load_head(path: &Path) -> Option<ChildRecord> {
        Self::parse(path, 5)
    }

    fn parse(path: &Path, max_lines: usize) -> Option<ChildRecord> {
        let file = fs::File::open(path).ok()?;
        let mut lines = BufReader::new(file).lines().map_while(Result::ok);
        let first = lines.next()?;
        let mut words = first.split_whitespace();
        if words.next()? != "start" {
            return None;
        }
        let start_ns: i64 = words.next()?.parse().ok()?;
        let mut r = ChildRecord {
            path: path.to_owned(),
            pid: 0,
            ppid: 0,
            pgid: 0,
            stime: 0,
            token: None,
            start_ns,
            last_ns: start_ns,
            beats: 0,
            signals: Vec::new(),
            stop: None,
            grandchildren: Vec::new(),
            env: Vec::new(),
        };
        for kv in words {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            match k {
                "pid" => r.pid = v.parse().ok()?,
                "ppid" => r.ppid = v.parse().ok()?,
                "pgid" => r.pgid = v.parse().ok()?,
                "stime" => r.stime = v.parse().ok()?,
                "token" => r.token = v.parse().ok(),
                _ => {}
            }
        }
        for line in lines.take(max_lines) {
            let mut w = line.splitn(3, ' ');
            let (kind, a, b) = (w.next(), w.next(), w.next());
            let ns = |s: Option<&str>| s.and_then(|s| s.parse::<i64>().ok());
            match kind {
                Some("beat") => {
                    if let Some(t) = ns(a) {
                        r.beats += 1;
                        r.last_ns = r.last_ns.max(t);
                    }
                }
                Some("signal") => {
                    if let (Some(n), Some(t)) = (a.and_then(|a| a.parse().ok()), ns(b)) {
                        r.signals.push((n, t));
                        r.last_ns = r.last_ns.max(t);
                    }
                }
                Some("stop") => {
                    if let Some(t) = ns(a) {
                        r.stop = Some((t, b.unwrap_or("").to_owned()));
                        r.last_ns = r.last_ns.max(t);
                    }
                }
                Some("grandchild") => {
                    if let (Some(p), Some(s)) = (
                        a.and_then(|a| a.parse().ok()),
                        b.and_then(|b| b.parse().ok()),
                    ) {
                        r.grandchildren.push((p, s));
                    }
                }
                Some("env") => {
                    if let (Some(k), v) = (a, b) {
                        r.env.push((k.to_owned(), v.unwrap_or("").to_owned()));
                    }
                }
                _ => {}
            }
        }
        Some(r)
    }

    /// The value of a `LEADERRUN_*` variable in the child's environment.
    pub fn env(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the child process itself still runs.
    pub fn alive(&self) -> bool {
        pid_alive(self.pid, Some(self.stime))
    }

    /// Its first grandchild (pid, start time), once recorded (the helper
    /// records it just after its start).
    pub fn wait_grandchild(&self) -> (i32, u64) {
        let mut found = None;
        super::process::wait_until(
            std::time::Duration::from_secs(10),
            &format!("child {} to record its grandchild", self.pid),
            || {
                found =
                    ChildRecord::load(&self.path).and_then(|r| r.grandchildren.first().copied());
                found.is_some()
            },
        );
        found.expect("found")
    }

    /// When it received signal `n` first, if it did.
    pub fn got_signal(&self, n: i32) -> Option<i64> {
        self.signals.iter().find(|(s, _)| *s == n).map(|(_, t)| *t)
    }

    fn describe(&self) -> String {
        format!(
            "child pid {} (leaderrun {}) token {:?}: {} .. {} ({} beats{})",
            self.pid,
            self.ppid,
            self.token,
            self.start_ns,
            self.last_ns,
            self.beats,
            match &self.stop {
                Some((_, how)) => format!(", stopped {how}"),
                None => String::new(),
            }
        )
    }
}

/// Every child recorded in `dir`, in the order they started.
pub fn load_records(dir: &Path) -> Vec<ChildRecord> {
    load_with(dir, ChildRecord::load)
}

/// Like [`load_records`] but reading only each file's first lines.
pub fn load_heads(dir: &Path) -> Vec<ChildRecord> {
    load_with(dir, ChildRecord::load_head)
}

fn load_with(dir: &Path, load: fn(&Path) -> Option<ChildRecord>) -> Vec<ChildRecord> {
    let mut out: Vec<ChildRecord> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "rec"))
                .filter_map(|p| load(&p))
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|r| r.start_ns);
    out
}

/// No child starts before every earlier one has made its last record.
pub fn check_no_overlap(records: &[ChildRecord]) -> Result<(), String> {
    let mut latest: Option<&ChildRecord> = None;
    let mut problems = Vec::new();
    for r in records {
        if let Some(prev) = latest
            && r.start_ns <= prev.last_ns
        {
            problems.push(format!(
                "OVERLAP of {:.3} ms:\n  {}\n  {}",
                (prev.last_ns - r.start_ns) as f64 / 1e6,
                prev.describe(),
                r.describe()
            ));
        }
        if latest.is_none_or(|p| r.last_ns > p.last_ns) {
            latest = Some(r);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// Tokens strictly increase in the order the children started (with
/// `--restart`, one term's restarts share a token: pass `strict = false`).
pub fn check_tokens(records: &[ChildRecord], strict: bool) -> Result<(), String> {
    let mut prev: Option<&ChildRecord> = None;
    for r in records {
        let Some(t) = r.token else {
            return Err(format!("no numeric LEADERRUN_TOKEN: {}", r.describe()));
        };
        if let Some(p) = prev {
            let pt = p.token.unwrap_or(0);
            if t < pt || (strict && t == pt) {
                return Err(format!(
                    "tokens do not increase:\n  {}\n  {}",
                    p.describe(),
                    r.describe()
                ));
            }
        }
        prev = Some(r);
    }
    Ok(())
}

/// Every recorded child and grandchild is dead.
pub fn check_all_dead(records: &[ChildRecord]) -> Result<(), String> {
    let mut alive = Vec::new();
    for r in records {
        if r.alive() {
            alive.push(format!("still running: {}", r.describe()));
        }
        for &(g, stime) in &r.grandchildren {
            if pid_alive(g, Some(stime)) {
                alive.push(format!("grandchild {g} of child {} still running", r.pid));
            }
        }
    }
    if alive.is_empty() {
        Ok(())
    } else {
        Err(alive.join("\n"))
    }
}

/// Runs every check on the records in `records_dir` once every leaderrun of
/// the test has exited: no overlap, tokens strictly increasing, no recorded
/// child alive, and no process of the test left at all. Panics with all the
/// problems found; returns the records.
pub fn assert_safe(dir: &TestDir, records_dir: &Path) -> Vec<ChildRecord> {
    assert_safe_with(dir, records_dir, true)
}

/// [`assert_safe`], with tokens allowed to repeat (`strict_tokens = false`)
/// for `--restart`, whose restarts within one term share a token.
pub fn assert_safe_with(
    dir: &TestDir,
    records_dir: &Path,
    strict_tokens: bool,
) -> Vec<ChildRecord> {
    // The watchdog kills a group at once, but a SIGKILL takes a moment to
    // land: give stragglers a second before calling them leftovers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let mut left = leftovers(dir);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        left = leftovers(dir);
    }
    let records = load_records(records_dir);
    let mut problems = Vec::new();
    for check in [
        check_no_overlap(&records),
        check_tokens(&records, strict_tokens),
        check_all_dead(&records),
    ] {
        if let Err(e) = check {
            problems.push(e);
        }
    }
    if !left.is_empty() {
        problems.push(format!("processes left behind:\n  {}", left.join("\n  ")));
    }
    assert!(
        problems.is_empty(),
        "safety checks failed on {} children:\n{}",
        records.len(),
        problems.join("\n")
    );
    records
}

/// Waits for a recorded child that satisfies `pred` (reading only each
/// record's first lines) and returns its full record.
pub fn wait_for_child(
    records_dir: &Path,
    timeout: std::time::Duration,
    what: &str,
    mut pred: impl FnMut(&ChildRecord) -> bool,
) -> ChildRecord {
    let mut found = None;
    super::process::wait_until(timeout, what, || {
        found = load_heads(records_dir).into_iter().find(|r| pred(r));
        found.is_some()
    });
    let head = found.expect("found");
    ChildRecord::load(&head.path).unwrap_or(head)
}

/// The lease record in a `file://` lease, as JSON (`None` if there is none).
pub fn file_lease_record(path: &Path) -> Option<serde_json::Value> {
    let bytes = fs::read(path).ok()?;
    Some(serde_json::from_slice(&bytes).expect("the lease file holds JSON"))
}
