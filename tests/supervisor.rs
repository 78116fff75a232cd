//! The supervisor end to end, on file leases: hand-over and take-over,
//! stopping with escalation, process groups, forwarded signals, the modes
//! (`--restart`, `--hold-at-least`), the command's environment, the backstop
//! for a frozen leader, and the default local lease.
//!
//! Timing bounds leave room for a loaded two-core machine, but each is tight
//! enough to tell the intended mechanism from a fallback (a release from an
//! expiry, a watchdog kill from a renewal timeout).

mod harness;

use std::fs;
use std::time::{Duration, Instant};

use harness::{
    ChildRecord, Helper, Proc, TestDir, assert_safe, assert_safe_with, file_lease_record,
    leaderrun, mono_ns, pid_alive, proc_stat, wait_for_child, wait_until,
};
use nix::sys::signal::Signal;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn since(t0_ns: i64, t_ns: i64) -> Duration {
    Duration::from_nanos((t_ns - t0_ns).max(0) as u64)
}

/// Waits until `p` has logged `needle` on stderr.
fn wait_log(p: &Proc, needle: &str, timeout: Duration) {
    wait_until(timeout, &format!("{} to log {needle:?}", p.name), || {
        p.stderr().contains(needle)
    });
}

/// Reads the pid a shell script wrote to `path`, once it is there.
fn wait_pid_file(path: &std::path::Path) -> (i32, u64) {
    let mut pid = 0;
    wait_until(secs(10), &format!("pid file {}", path.display()), || {
        pid = fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid > 0
    });
    let stime = proc_stat(pid).map(|s| s.starttime).unwrap_or(0);
    (pid, stime)
}

#[test]
fn sigterm_hands_over_to_a_waiting_candidate_without_waiting_for_the_ttl() {
    let dir = TestDir::new("handover");
    let rec = dir.subdir("records");
    let lease = dir.file_lease("lease");
    // ttl 3s: a take-over by expiry could not come sooner than
    // ttl - renew-every = 2s after the signal; a release is seen at the next
    // poll (--retry-every defaults to 750ms).
    let run = |name: &str| {
        leaderrun(&dir, name)
            .lease(&lease)
            .args(["--ttl", "3s", "--id", name])
            .helper(&Helper::new(&rec))
            .spawn()
    };
    let mut a = run("a");
    let first = wait_for_child(&rec, secs(10), "a's command", |_| true);
    assert_eq!(first.ppid, a.pid());
    assert_eq!(first.token, Some(1));
    let mut b = run("b");
    wait_log(&b, "lease held by a", secs(10));

    let t0 = mono_ns();
    a.signal(Signal::SIGTERM);
    let second = wait_for_child(&rec, secs(10), "b's command", |r| r.ppid == b.pid());
    a.expect_code(secs(5), 143);
    let first = ChildRecord::load(&first.path).unwrap();
    assert_eq!(first.stop.as_ref().map(|s| s.1.as_str()), Some("signal=15"));
    assert!(a.stderr().contains("released token 1"), "{}", a.stderr());
    let took = since(t0, second.start_ns);
    assert!(
        took < ms(1500),
        "hand-over took {took:?}; it should follow the release, not the ttl"
    );
    assert!(first.last_ns < second.start_ns);
    assert_eq!(second.token, Some(2));

    b.signal(Signal::SIGTERM);
    b.expect_code(secs(5), 143);
    assert_safe(&dir, &rec);
}

#[test]
fn sigkill_of_the_leader_kills_its_group_at_once_and_another_takes_over_after_the_ttl() {
    let dir = TestDir::new("takeover");
    let rec = dir.subdir("records");
    let lease = dir.file_lease("lease");
    let (ttl, retry_every) = (secs(2), ms(500));
    let run = |name: &str| {
        leaderrun(&dir, name)
            .lease(&lease)
            .args(["--ttl", "2s", "--id", name])
            .helper(&Helper::new(&rec).grandchild())
            .spawn()
    };
    let mut a = run("a");
    let first = wait_for_child(&rec, secs(10), "a's command", |_| true);
    let mut b = run("b");
    wait_log(&b, "lease held by a", secs(10));
    let first = ChildRecord::load(&first.path).unwrap();
    let (gc, gc_stime) = first.wait_grandchild();

    // Kill right after a renewal has landed, so that the lease's expiry is
    // known: a ttl from now.
    let lease_path = dir.join("lease");
    let serial = |p: &std::path::Path| file_lease_record(p).and_then(|r| r["serial"].as_u64());
    let before = serial(&lease_path);
    wait_until(secs(5), "a renewal", || serial(&lease_path) != before);
    let t0 = mono_ns();
    a.signal(Signal::SIGKILL);
    a.expect_exit(secs(5));
    wait_until(secs(1), "the watchdog to kill a's command", || {
        !first.alive()
    });
    let last_beat = ChildRecord::load(&first.path).unwrap().last_ns;
    let killed_in = since(t0, last_beat);
    assert!(killed_in < ms(500), "a's command ran on for {killed_in:?}");
    wait_until(secs(1), "the watchdog to kill a's grandchild", || {
        !pid_alive(gc, Some(gc_stime))
    });
    let second = wait_for_child(&rec, secs(10), "b's command", |r| r.ppid == b.pid());
    let took = since(t0, second.start_ns);
    eprintln!("command's last heartbeat {killed_in:?} after SIGKILL; take-over after {took:?}");
    // b takes over once it has seen a's last renewal unchanged for the ttl
    // (and sees it at most retry-every after it landed).
    assert!(
        took + ms(50) >= ttl,
        "b took over after {took:?}, before the lease could have expired"
    );
    assert!(
        took <= ttl + retry_every + ms(700),
        "take-over took {took:?}; expected within ttl + retry-every"
    );
    assert_eq!(second.token, Some(2));

    b.signal(Signal::SIGTERM);
    b.expect_code(secs(5), 143);
    assert_safe(&dir, &rec);
}

#[test]
fn a_frozen_leader_has_its_command_killed_by_the_deadline_and_campaigns_again() {
    let dir = TestDir::new("frozen");
    let rec = dir.subdir("records");
    let lease = dir.file_lease("lease");
    // ttl 2s, margin 200ms: the watchdog kills the group 1.8s after the
    // last renewal was sent, before the freeze; it must be dead before the
    // lease could pass to anyone else, within the ttl.
    let mut a = leaderrun(&dir, "a")
        .lease(&lease)
        .args(["--ttl", "2s"])
        .helper(&Helper::new(&rec).grandchild())
        .spawn();
    let first = wait_for_child(&rec, secs(10), "a's command", |_| true);
    let first = ChildRecord::load(&first.path).unwrap();
    let (gc, gc_stime) = first.wait_grandchild();
    std::thread::sleep(ms(300));

    let t0 = mono_ns();
    a.signal(Signal::SIGSTOP);
    wait_until(
        secs(3),
        "the watchdog to kill a frozen leader's command",
        || !first.alive(),
    );
    let first = ChildRecord::load(&first.path).unwrap();
    let ran_on = since(t0, first.last_ns);
    assert!(
        ran_on < secs(2),
        "the command ran on for {ran_on:?} after its leaderrun froze (ttl 2s)"
    );
    wait_until(secs(1), "the grandchild to die too", || {
        !pid_alive(gc, Some(gc_stime))
    });
    std::thread::sleep(ms(500));
    a.signal(Signal::SIGCONT);

    // Back from the freeze, it steps down and, alone, is elected again.
    let second = wait_for_child(&rec, secs(10), "a's next command", |r| r.token == Some(2));
    assert_eq!(second.ppid, a.pid());
    a.signal(Signal::SIGTERM);
    a.expect_code(secs(5), 143);
    assert_safe(&dir, &rec);
}

#[test]
fn a_command_ignoring_the_stop_signal_is_killed_after_grace() {
    let dir = TestDir::new("grace");
    let rec = dir.subdir("records");
    let mut a = leaderrun(&dir, "a")
        .lease(&dir.file_lease("lease"))
        .args(["--ttl", "4s", "--grace", "1s"])
        .helper(&Helper::new(&rec).ignore_term())
        .spawn();
    let child = wait_for_child(&rec, secs(10), "the command", |_| true);
    a.signal(Signal::SIGTERM);
    // Killed by SIGKILL: 128 + 9.
    a.expect_code(secs(10), 137);
    let child = ChildRecord::load(&child.path).unwrap();
    let got_term = child.got_signal(15).expect("the command received SIGTERM");
    let lived_on = since(got_term, child.last_ns);
    assert!(child.stop.is_none(), "it must not have exited by itself");
    assert!(
        lived_on >= ms(900) && lived_on <= ms(1700),
        "killed {lived_on:?} after SIGTERM; --grace is 1s"
    );
    assert!(!child.alive());
    assert_safe(&dir, &rec);
}

#[test]
fn a_second_stop_signal_kills_at_once() {
    let dir = TestDir::new("second-signal");
    let rec = dir.subdir("records");
    let mut a = leaderrun(&dir, "a")
        .lease(&dir.file_lease("lease"))
        .args(["--ttl", "10s", "--grace", "2s"])
        .helper(&Helper::new(&rec).ignore_term())
        .spawn();
    let child = wait_for_child(&rec, secs(10), "the command", |_| true);
    a.signal(Signal::SIGTERM);
    wait_until(secs(5), "the command to receive SIGTERM", || {
        ChildRecord::load(&child.path).is_some_and(|c| c.got_signal(15).is_some())
    });
    let t0 = mono_ns();
    a.signal(Signal::SIGINT);
    a.expect_code(secs(5), 137);
    let child = ChildRecord::load(&child.path).unwrap();
    let lived_on = since(t0, child.last_ns);
    assert!(
        lived_on < ms(700),
        "killed {lived_on:?} after the second signal; --grace 2s must be cut short"
    );
    assert_safe(&dir, &rec);
}

#[test]
fn a_grandchild_ignoring_sigterm_dies_with_the_group() {
    let dir = TestDir::new("grandchild-term");
    let gc_file = dir.join("gc.pid");
    let script = format!(
        "(trap '' TERM; exec sleep 1000) & echo $! > {}; wait",
        gc_file.display()
    );
    let mut a = leaderrun(&dir, "a")
        .lease(&dir.file_lease("lease"))
        .args(["--ttl", "4s", "--grace", "1s"])
        .sh(&script)
        .spawn();
    let (gc, stime) = wait_pid_file(&gc_file);
    assert!(pid_alive(gc, Some(stime)));
    a.signal(Signal::SIGTERM);
    // sh dies of the SIGTERM; the sleep outlives it until the SIGKILL.
    a.expect_code(secs(10), 143);
    assert!(!pid_alive(gc, Some(stime)), "grandchild {gc} survived");
    assert!(harness::leftovers(&dir).is_empty());
}

#[test]
fn sigkill_of_leaderrun_kills_a_shell_and_its_grandchild() {
    let dir = TestDir::new("grandchild-kill");
    let gc_file = dir.join("gc.pid");
    let script = format!("sleep 1000 & echo $! > {}; wait", gc_file.display());
    let mut a = leaderrun(&dir, "a")
        .lease(&dir.file_lease("lease"))
        .args(["--ttl", "2s"])
        .sh(&script)
        .spawn();
    let (gc, stime) = wait_pid_file(&gc_file);
    a.signal(Signal::SIGKILL);
    a.expect_exit(secs(5));
    wait_until(secs(1), "the watchdog to kill the grandchild", || {
        !pid_alive(gc, Some(stime))
    });
    wait_until(secs(1), "every process of the test to be gone", || {
        harness::leftovers(&dir).is_empty()
    });
}

#[test]
fn a_grandchild_left_behind_by_a_finished_command_is_stopped() {
    let dir = TestDir::new("grandchild-left");
    let gc_file = dir.join("gc.pid");
    let script = format!("sleep 1000 & echo $! > {}; exit 5", gc_file.display());
    let done = leaderrun(&dir, "a")
        .lease(&dir.file_lease("lease"))
        .args(["--ttl", "2s"])
        .sh(&script)
        .run(secs(10));
    done.assert_code(5);
    let pid: i32 = fs::read_to_string(&gc_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!pid_alive(pid, None), "grandchild {pid} survived");
}

#[test]
fn hup_usr1_usr2_and_winch_are_forwarded_to_the_command() {
    let dir = TestDir::new("forward");
    let rec = dir.subdir("records");
    let mut a = leaderrun(&dir, "a")
        .lease(&dir.file_lease("lease"))
        .args(["--ttl", "2s"])
        .helper(&Helper::new(&rec))
        .spawn();
    let child = wait_for_child(&rec, secs(10), "the command", |_| true);
    for sig in [
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGWINCH,
    ] {
        a.signal(sig);
        wait_until(secs(3), &format!("the command to receive {sig}"), || {
            ChildRecord::load(&child.path).is_some_and(|c| c.got_signal(sig as i32).is_some())
        });
    }
    assert!(a.running(), "a forwarded signal must not stop leaderrun");
    assert!(child.alive());
    a.signal(Signal::SIGTERM);
    a.expect_code(secs(5), 143);
    assert_safe(&dir, &rec);
}

#[test]
fn a_stop_signal_while_campaigning_exits_promptly() {
    let dir = TestDir::new("campaign-signal");
    let rec = dir.subdir("records");
    let lease = dir.file_lease("lease");
    let mut a = leaderrun(&dir, "a")
        .lease(&lease)
        .args(["--ttl", "5s", "--id", "a"])
        .helper(&Helper::new(&rec))
        .spawn();
    let held = wait_for_child(&rec, secs(10), "a's command", |_| true);
    for (name, sig, code) in [
        ("b", Signal::SIGTERM, 143),
        ("c", Signal::SIGINT, 130),
        ("d", Signal::SIGQUIT, 131),
    ] {
        let mut p = leaderrun(&dir, name)
            .lease(&lease)
            .args(["--ttl", "5s"])
            .helper(&Helper::new(&rec))
            .spawn();
        wait_log(&p, "lease held by a", secs(10));
        // Forwardable signals have no command to go to: ignored.
        p.signal(Signal::SIGHUP);
        std::thread::sleep(ms(100));
        assert!(p.running(), "SIGHUP ended a campaigning leaderrun");
        let t = Instant::now();
        p.signal(sig);
        p.expect_code(secs(5), code);
        assert!(
            t.elapsed() < ms(1000),
            "{sig} while campaigning took {:?} to exit",
            t.elapsed()
        );
    }
    assert!(held.alive(), "the leader's command must be untouched");
    a.signal(Signal::SIGTERM);
    a.expect_code(secs(5), 143);
    assert_eq!(harness::load_records(&rec).len(), 1);
    assert_safe(&dir, &rec);
}

#[test]
fn restart_starts_the_command_again_within_the_same_term() {
    let dir = TestDir::new("restart");
    let rec = dir.subdir("records");
    let lease = dir.file_lease("lease");
    let mut a = leaderrun(&dir, "a")
        .lease(&lease)
        .args(["--ttl", "2s", "--restart"])
        .helper(&Helper::new(&rec).exit_after(ms(100), 3))
        .spawn();
    wait_until(secs(10), "three runs of the command", || {
        harness::load_heads(&rec).len() >= 3
    });
    // Another candidate is not let in between the runs.
    leaderrun(&dir, "b")
        .lease(&lease)
        .args(["--ttl", "2s", "--once"])
        .sh("true")
        .run(secs(10))
        .assert_code(75);
    a.signal(Signal::SIGTERM);
    let status = a.expect_exit(secs(5));
    assert!(
        matches!(status.code(), Some(3 | 143)),
        "{status:?}: the last run's status (3) or its SIGTERM (143)\n{}",
        a.stderr()
    );
    let runs = assert_safe_with(&dir, &rec, false);
    assert!(runs.iter().all(|r| r.token == Some(1) && r.ppid == a.pid()));
    assert!(
        runs.iter()
            .filter(|r| r.stop.as_ref().is_some_and(|s| s.1 == "exit=3"))
            .count()
            >= 2
    );
}

#[test]
fn hold_at_least_keeps_the_lease_after_the_command_finished() {
    let dir = TestDir::new("hold");
    let lease_path = dir.join("lease");
    let lease = dir.file_lease("lease");
    let t = Instant::now();
    let mut a = leaderrun(&dir, "a")
        .lease(&lease)
        .args(["--ttl", "1s", "--hold-at-least", "3s", "--id", "a"])
        .sh("true")
        .spawn();
    wait_log(&a, "holding the lease", secs(5));
    // Well past the ttl: still held, and renewed meanwhile.
    std::thread::sleep(ms(2000).saturating_sub(t.elapsed()));
    let record = file_lease_record(&lease_path).unwrap();
    assert_eq!(record["released"], false, "{record}");
    assert_eq!(record["holder"], "a");
    assert!(
        record["serial"].as_u64().unwrap() >= 4,
        "not renewed: {record}"
    );
    leaderrun(&dir, "b")
        .lease(&lease)
        .args(["--ttl", "1s", "--once"])
        .sh("true")
        .run(secs(10))
        .assert_code(75);
    a.expect_code(secs(5), 0);
    let held = t.elapsed();
    assert!(
        held >= ms(3000) && held < ms(4500),
        "held for {held:?} with --hold-at-least 3s"
    );
    let record = file_lease_record(&lease_path).unwrap();
    assert_eq!(record["released"], true, "{record}");
    leaderrun(&dir, "c")
        .lease(&lease)
        .args(["--ttl", "1s", "--once"])
        .sh("true")
        .run(secs(10))
        .assert_code(0);
}

#[test]
fn the_command_gets_token_lease_and_id_in_its_environment() {
    let dir = TestDir::new("env");
    let rec = dir.subdir("records");
    let lease_path = dir.join("lease");
    let lease = dir.file_lease("lease");
    let mut a = leaderrun(&dir, "a")
        .lease(&lease)
        .args(["--ttl", "2s", "--id", "worker-7"])
        .helper(&Helper::new(&rec))
        .spawn();
    let child = wait_for_child(&rec, secs(10), "the command", |_| true);
    let record = file_lease_record(&lease_path).unwrap();
    assert_eq!(child.env("LEADERRUN_TOKEN"), Some("1"));
    assert_eq!(child.token, record["token"].as_u64());
    assert_eq!(child.env("LEADERRUN_LEASE"), Some(lease.as_str()));
    assert_eq!(child.env("LEADERRUN_ID"), Some("worker-7"));
    assert_eq!(record["holder"], "worker-7");
    a.signal(Signal::SIGTERM);
    a.expect_code(secs(5), 143);

    // The default identity is hostname:pid.
    let mut b = leaderrun(&dir, "b")
        .lease(&lease)
        .args(["--ttl", "2s"])
        .helper(&Helper::new(&rec))
        .spawn();
    let child = wait_for_child(&rec, secs(10), "the second command", |r| r.token == Some(2));
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let want = format!("{}:{}", host.trim(), b.pid());
    assert_eq!(child.env("LEADERRUN_ID"), Some(want.as_str()));
    assert_eq!(child.env("LEADERRUN_TOKEN"), Some("2"));
    b.signal(Signal::SIGTERM);
    b.expect_code(secs(5), 143);
    assert_safe(&dir, &rec);
}

#[test]
fn without_lease_a_local_file_lease_under_xdg_runtime_dir_is_used() {
    let dir = TestDir::new("default-lease");
    let xdg = dir.subdir("xdg");
    let local = |name: &str| {
        leaderrun(&dir, name)
            .env("XDG_RUNTIME_DIR", &xdg)
            .args(["--ttl", "2s"])
    };
    // Named from the command line; the directory is created on first use.
    // The command line is the same each time; NAP (not part of it) says how
    // long the command runs.
    let script = "echo \"$LEADERRUN_LEASE\"; sleep \"$NAP\"";
    let done = local("first").env("NAP", "0").sh(script).run(secs(10));
    done.assert_code(0);
    let url = done.stdout.trim().to_owned();
    let prefix = format!("file://{}/leaderrun/", xdg.display());
    assert!(url.starts_with(&prefix) && url.ends_with(".lease"), "{url}");
    let path = std::path::PathBuf::from(url.trim_start_matches("file://"));
    let record = file_lease_record(&path).unwrap();
    assert_eq!(record["released"], true);

    // The same command meets the same lease; --name picks another.
    let mut holder = local("holder").env("NAP", "30").sh(script).spawn();
    wait_until(secs(10), "the holder to start", || {
        !holder.stdout().is_empty()
    });
    assert_eq!(holder.stdout().trim(), url);
    local("same")
        .arg("--once")
        .env("NAP", "0")
        .sh(script)
        .run(secs(10))
        .assert_code(75);
    let named = local("named")
        .args(["--once", "--name", "nightly"])
        .env("NAP", "0")
        .sh(script)
        .run(secs(10));
    named.assert_code(0);
    assert_eq!(named.stdout.trim(), format!("{prefix}nightly.lease"));
    holder.signal(Signal::SIGTERM);
    holder.expect_code(secs(5), 143);
}

#[test]
fn lost_leadership_stops_the_command_at_once_and_campaigns_again() {
    let dir = TestDir::new("lost");
    let rec = dir.subdir("records");
    let lease = dir.file_lease("lease");
    let mut a = leaderrun(&dir, "a")
        .lease(&lease)
        .args(["--ttl", "3s", "--stop-signal", "INT"])
        .helper(&Helper::new(&rec))
        .spawn();
    let first = wait_for_child(&rec, secs(10), "the command", |_| true);
    let t0 = mono_ns();
    leaderrun(&dir, "breaker")
        .args(["release", "--lease", &lease, "--force"])
        .run(secs(10))
        .assert_code(0);
    // Seen at the next renewal (every 1s): stop the command at once.
    wait_until(secs(5), "the command to be stopped", || !first.alive());
    let first = ChildRecord::load(&first.path).unwrap();
    let stopped_after = since(t0, first.last_ns);
    assert!(
        stopped_after < ms(1000) + ms(700),
        "stopped {stopped_after:?} after the lease was broken; renewals come every 1s"
    );
    // --stop-signal INT: the command is asked to stop with SIGINT.
    assert_eq!(first.stop.as_ref().map(|s| s.1.as_str()), Some("signal=2"));
    // The record is released: a campaigns again and takes it at once.
    let second = wait_for_child(&rec, secs(5), "the next command", |r| r.token == Some(2));
    assert_eq!(second.ppid, a.pid());
    a.signal(Signal::SIGTERM);
    a.expect_code(secs(5), 143);
    assert_safe(&dir, &rec);
}

#[test]
fn a_command_that_finished_while_leaderrun_was_frozen_is_not_run_again() {
    let dir = TestDir::new("finished-frozen");
    let runs = dir.join("runs");
    let script = format!("echo run >> {}; sleep 0.3", runs.display());
    let mut a = leaderrun(&dir, "a")
        .lease(&dir.file_lease("lease"))
        .args(["--ttl", "1s"])
        .sh(&script)
        .spawn();
    wait_until(secs(10), "the command to start", || runs.exists());
    a.signal(Signal::SIGSTOP);
    // The command ends by itself meanwhile; the lease runs out.
    std::thread::sleep(ms(2000));
    a.signal(Signal::SIGCONT);
    a.expect_code(secs(5), 0);
    assert_eq!(
        fs::read_to_string(&runs).unwrap().lines().count(),
        1,
        "the finished job ran again\n{}",
        a.stderr()
    );
}

#[test]
fn a_stop_signal_while_stepping_down_still_exits() {
    let dir = TestDir::new("stepping-down-signal");
    let rec = dir.subdir("records");
    let lease = dir.file_lease("lease");
    let mut a = leaderrun(&dir, "a")
        .lease(&lease)
        .args(["--ttl", "4s", "--grace", "1s"])
        .helper(&Helper::new(&rec).ignore_term())
        .spawn();
    let child = wait_for_child(&rec, secs(10), "the command", |_| true);
    leaderrun(&dir, "breaker")
        .args(["release", "--lease", &lease, "--force"])
        .run(secs(10))
        .assert_code(0);
    // At its next renewal it steps down; the command ignores the stop
    // signal, so the step-down lasts the 1s grace. A SIGTERM meanwhile
    // means: exit once the command is gone, do not campaign again.
    wait_log(&a, "stopping the command", secs(5));
    a.signal(Signal::SIGTERM);
    a.expect_code(secs(5), 137);
    assert!(!child.alive());
    assert_eq!(harness::load_records(&rec).len(), 1, "{}", a.stderr());
    assert_safe(&dir, &rec);
}
