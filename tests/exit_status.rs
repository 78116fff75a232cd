//! Every row of the exit-status table (SPEC §4, `src/exit.rs`, the EXIT
//! STATUS section of `--help`), through the real binary.

mod harness;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use harness::{ChildRecord, Helper, TestDir, leaderrun, wait_for_child, wait_until};
use nix::sys::signal::Signal;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// leaderrun on a fresh file lease in `dir` with `--ttl 2s` and `args`.
fn run(dir: &TestDir, name: &str, args: &[&str]) -> harness::Finished {
    leaderrun(dir, name)
        .lease(&dir.file_lease("lease"))
        .args(["--ttl", "2s"])
        .args(args)
        .run(secs(20))
}

#[test]
fn the_commands_own_exit_code() {
    let dir = TestDir::new("exit-code");
    for code in [0, 1, 7, 42, 255] {
        let script = format!("exit {code}");
        run(&dir, "a", &["--", "sh", "-c", &script]).assert_code(code);
    }
}

#[test]
fn killed_by_signal_n_is_128_plus_n() {
    let dir = TestDir::new("exit-signal");
    for (sig, code) in [("USR1", 138), ("KILL", 137), ("SEGV", 139), ("TERM", 143)] {
        let script = format!("kill -{sig} $$");
        run(&dir, "a", &["--", "sh", "-c", &script]).assert_code(code);
    }
}

#[test]
fn not_executable_is_126() {
    let dir = TestDir::new("exit-126");
    let script = dir.join("script.sh");
    fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let done = run(&dir, "a", &["--", script.to_str().unwrap()]);
    done.assert_code(126);
    assert!(done.stderr.contains("not executable"), "{}", done.stderr);
    // A directory is not executable either.
    run(&dir, "b", &["--", dir.path().to_str().unwrap()]).assert_code(126);
    // (A file with execute bits but no valid format is run by /bin/sh,
    // as execvp does; its status is then the shell's.)
    // The lease was released each time: nothing holds it now.
    run(&dir, "d", &["--once", "--", "true"]).assert_code(0);
}

#[test]
fn not_found_is_127() {
    let dir = TestDir::new("exit-127");
    let done = run(&dir, "a", &["--", "no-such-command-leaderrun-test"]);
    done.assert_code(127);
    assert!(done.stderr.contains("not found"), "{}", done.stderr);
    run(
        &dir,
        "b",
        &["--", dir.join("missing/prog").to_str().unwrap()],
    )
    .assert_code(127);
    run(&dir, "c", &["--once", "--", "true"]).assert_code(0);
}

#[test]
fn usage_error_is_64() {
    let dir = TestDir::new("exit-64");
    run(&dir, "a", &["--ttl", "soon", "--", "true"]).assert_code(64);
    run(&dir, "b", &[]).assert_code(64);
    run(&dir, "c", &["--no-such-flag", "--", "true"]).assert_code(64);
}

#[test]
fn unusable_store_is_69() {
    let dir = TestDir::new("exit-69");
    // Somebody else's file at the lease path.
    fs::write(dir.join("lease"), "not a lease\n").unwrap();
    let done = run(&dir, "a", &["--", "true"]);
    done.assert_code(69);
    assert!(
        done.stderr.contains("not a leaderrun lease"),
        "{}",
        done.stderr
    );
    // A lease in a directory that does not exist.
    let missing = format!("file://{}/no/such/dir/lease", dir.path().display());
    let done = leaderrun(&dir, "b")
        .lease(&missing)
        .args(["--ttl", "2s", "--", "true"])
        .run(secs(20));
    done.assert_code(69);
    assert!(done.stderr.contains("does not exist"), "{}", done.stderr);
    // A record of a newer format.
    fs::write(dir.join("newer"), r#"{"leaderrun": 99, "holder": "x"}"#).unwrap();
    let done = leaderrun(&dir, "c")
        .lease(&dir.file_lease("newer"))
        .args(["--ttl", "2s", "--", "true"])
        .run(secs(20));
    done.assert_code(69);
    assert!(done.stderr.contains("newer"), "{}", done.stderr);
}

#[test]
fn a_store_that_stays_unavailable_past_wait_is_69() {
    let dir = TestDir::new("exit-69-wait");
    // Hold the file store's own lock: every write waits, then times out.
    let lock = fs::File::create(dir.join("lease.lock")).unwrap();
    let lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .unwrap();
    let done = run(&dir, "a", &["--once", "--wait", "1s", "--", "true"]);
    done.assert_code(69);
    assert!(
        done.stderr.contains("gave up after --wait"),
        "{}",
        done.stderr
    );
    assert!(done.elapsed < secs(6), "gave up after {:?}", done.elapsed);
    drop(lock);
}

#[test]
fn not_leader_with_once_is_75() {
    let dir = TestDir::new("exit-75");
    let rec = dir.subdir("records");
    let mut holder = leaderrun(&dir, "holder")
        .lease(&dir.file_lease("lease"))
        .args(["--ttl", "2s", "--id", "holder"])
        .helper(&Helper::new(&rec))
        .spawn();
    wait_for_child(&rec, secs(10), "the holder's command", |_| true);
    let done = run(&dir, "a", &["--once", "--", "true"]);
    done.assert_code(75);
    assert!(done.stderr.contains("holder"), "{}", done.stderr);
    assert!(done.elapsed < secs(2), "--once took {:?}", done.elapsed);
    // With --wait, it waits that long first.
    let done = run(&dir, "b", &["--once", "--wait", "1s", "--", "true"]);
    done.assert_code(75);
    assert!(
        done.elapsed >= Duration::from_millis(950) && done.elapsed < secs(3),
        "--wait 1s gave up after {:?}",
        done.elapsed
    );
    holder.signal(Signal::SIGTERM);
    holder.expect_code(secs(5), 143);
}

#[test]
fn leadership_lost_in_once_mode_is_76() {
    let dir = TestDir::new("exit-76");
    let rec = dir.subdir("records");
    let lease = dir.file_lease("lease");
    let mut a = leaderrun(&dir, "a")
        .lease(&lease)
        .args(["--ttl", "2s", "--once"])
        .helper(&Helper::new(&rec))
        .spawn();
    let child = wait_for_child(&rec, secs(10), "the command", |_| true);
    leaderrun(&dir, "breaker")
        .args(["release", "--lease", &lease, "--force"])
        .run(secs(10))
        .assert_code(0);
    // Seen at the next renewal (ttl/3): the command is stopped, no restart.
    a.expect_code(secs(5), 76);
    let child = ChildRecord::load(&child.path).unwrap();
    assert_eq!(child.stop.as_ref().map(|s| s.1.as_str()), Some("signal=15"));
    assert!(a.stderr().contains("lost"), "{}", a.stderr());
    wait_until(secs(1), "the command to be gone", || !child.alive());
}
