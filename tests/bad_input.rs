//! Bad input (SPEC §5): every malformed value is a one-line error on stderr
//! that names the flag, with the usage status 64 and never a panic; data at
//! the lease path that leaderrun did not write is refused and left untouched.

mod harness;

use std::fs;
use std::time::Duration;

use harness::{Finished, TestDir, leaderrun};

/// Runs leaderrun with `args` and `env`, with backtraces switched on so that a
/// panic could not hide.
fn run_with(dir: &TestDir, args: &[&str], env: &[(&str, &str)]) -> Finished {
    let mut cmd = leaderrun(dir, "bad").env("RUST_BACKTRACE", "1");
    for (k, v) in env {
        cmd = cmd.env(k, v);
    }
    cmd.args(args).run(Duration::from_secs(10))
}

/// One line on stderr naming `names` (each of them), status 64, nothing on
/// stdout, no panic.
fn assert_usage(done: &Finished, args: &[&str], names: &[&str]) {
    let ctx = format!("leaderrun {args:?}\nstderr:\n{}", done.stderr);
    assert_eq!(done.code(), 64, "{ctx}");
    let lines: Vec<&str> = done.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "not one line: {ctx}");
    let line = lines[0];
    assert!(line.starts_with("leaderrun: "), "{ctx}");
    for name in names {
        assert!(
            line.to_lowercase().contains(&name.to_lowercase()),
            "does not name {name}: {ctx}"
        );
    }
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "thread '"] {
        assert!(!done.stderr.contains(bad), "{ctx}");
    }
    assert!(done.stdout.is_empty(), "stdout: {}\n{ctx}", done.stdout);
}

fn check(dir: &TestDir, args: &[&str], names: &[&str]) {
    assert_usage(&run_with(dir, args, &[]), args, names);
}

#[test]
fn malformed_durations_name_their_flag() {
    let dir = TestDir::new("bad-durations");
    for flag in [
        "--ttl",
        "--renew-every",
        "--retry-every",
        "--grace",
        "--request-timeout",
        "--hold-at-least",
        "--wait",
    ] {
        for value in ["abc", "5", "1parsec", "-1s", "", "99999999999999999999s"] {
            let arg = format!("{flag}={value}");
            check(&dir, &[&arg, "--", "true"], &[flag]);
        }
        check(&dir, &[flag], &[flag]);
    }
    // Zero is meaningless for every duration but --wait.
    for flag in [
        "--ttl",
        "--renew-every",
        "--retry-every",
        "--grace",
        "--request-timeout",
        "--hold-at-least",
    ] {
        for zero in ["0", "0s", "0ms"] {
            check(&dir, &[flag, zero, "--", "true"], &[flag]);
        }
    }
}

#[test]
fn a_negative_duration_after_a_space_names_its_flag() {
    // `--ttl -1s` is read by the parser as an unknown flag `-1`; the message
    // must still point at --ttl.
    let dir = TestDir::new("bad-negative");
    check(&dir, &["--ttl", "-1s", "--", "true"], &["--ttl"]);
}

#[test]
fn malformed_stop_signals_name_the_flag() {
    let dir = TestDir::new("bad-signal");
    for value in ["NOPE", "SIGNOPE", "99", "-3", "", "TERM9"] {
        let arg = format!("--stop-signal={value}");
        check(&dir, &[&arg, "--", "true"], &["--stop-signal"]);
    }
}

#[test]
fn malformed_and_unknown_lease_urls_name_the_flag() {
    let dir = TestDir::new("bad-lease");
    for (url, also) in [
        ("not-a-url", "not a url"),
        ("/var/lib/lease", "not a url"),
        ("ftp://host/lease", "ftp"),
        ("gopher://x/y", "gopher"),
        ("://x/y", "scheme"),
        ("file://otherhost/x", "otherhost"),
        ("file:///tmp/dir/", "file"),
        ("file://", "file"),
        ("file:///tmp/x?color=blue", "color"),
        ("file:///tmp/%zz", "%zz"),
    ] {
        check(&dir, &["--lease", url, "--", "true"], &["--lease", also]);
        // The same from the environment.
        let done = run_with(&dir, &["--", "true"], &[("LEADERRUN_LEASE", url)]);
        assert_usage(&done, &["LEADERRUN_LEASE", url], &["--lease"]);
    }
    // The subcommands share the parser.
    for sub in ["status", "release", "doctor"] {
        check(&dir, &[sub, "--lease", "ftp://x/y"], &["--lease", "ftp"]);
    }
}

#[test]
fn timing_rule_violations_name_the_flags_and_numbers() {
    let dir = TestDir::new("bad-timing");
    check(
        &dir,
        &["--ttl", "2s", "--renew-every", "2s", "--", "true"],
        &[
            "--renew-every 2s",
            "--ttl 2s",
            "--grace",
            "--request-timeout",
        ],
    );
    check(
        &dir,
        &["--ttl", "1s", "--grace", "900ms", "--", "true"],
        &["--grace 900ms", "--ttl 1s"],
    );
    check(
        &dir,
        &["--ttl", "10s", "--request-timeout", "8s", "--", "true"],
        &["--request-timeout 8s", "--ttl 10s"],
    );
    // Too short to renew, stop and kill in time: a busy loop otherwise.
    for ttl in ["1ms", "1ns", "499ms"] {
        check(&dir, &["--ttl", ttl, "--", "true"], &["--ttl", "too short"]);
    }
}

#[test]
fn other_malformed_flags_name_the_flag() {
    let dir = TestDir::new("bad-other");
    check(
        &dir,
        &["--log-format", "xml", "--", "true"],
        &["--log-format"],
    );
    check(&dir, &["--id=", "--", "true"], &["--id"]);
    check(&dir, &["--id", "  ", "--", "true"], &["--id"]);
    check(&dir, &["--name", "a/b", "--", "true"], &["--name"]);
    check(&dir, &["--name", "..", "--", "true"], &["--name"]);
    check(
        &dir,
        &["--name", "x", "--lease", "file:///tmp/x", "--", "true"],
        &["--name", "--lease"],
    );
    check(
        &dir,
        &["--once", "--restart", "--", "true"],
        &["--once", "--restart"],
    );
    check(&dir, &["--no-such-flag", "--", "true"], &["--no-such-flag"]);
    check(&dir, &["release"], &["--lease"]);
}

#[test]
fn a_missing_command_is_named() {
    let dir = TestDir::new("bad-command");
    check(&dir, &[], &["command"]);
    check(&dir, &["--ttl", "2s"], &["command"]);
    check(&dir, &["--ttl", "2s", "--"], &["command"]);
    check(&dir, &["--ttl", "2s", "--", ""], &["command"]);
}

#[test]
fn foreign_data_at_the_lease_path_is_refused_and_left_untouched() {
    let dir = TestDir::new("bad-foreign");
    let contents: [&[u8]; 6] = [
        b"precious data\n",
        b"",
        b"{\"holder\": \"someone\", \"token\": 3}\n",
        b"[1, 2, 3]",
        b"{\"leaderrun\": \"1\"}",
        &[0xff, 0x00, 0xfe, 0x7b, 0x22],
    ];
    for (i, bytes) in contents.iter().enumerate() {
        let path = dir.join(format!("lease-{i}"));
        fs::write(&path, bytes).unwrap();
        // Somebody else's file at the lock path too: opened, never written.
        let lock = dir.join(format!("lease-{i}.lock"));
        fs::write(&lock, b"also mine\n").unwrap();
        let before = fs::metadata(&path).unwrap().modified().unwrap();
        let url = format!("file://{}", path.display());
        for args in [
            vec!["--lease", &url, "--ttl", "1s", "--", "true"],
            vec![
                "--lease", &url, "--ttl", "1s", "--once", "--wait", "2s", "--", "true",
            ],
            vec!["release", "--lease", &url],
            vec!["release", "--lease", &url, "--force"],
            vec!["status", "--lease", &url],
            vec!["status", "--json", "--lease", &url],
        ] {
            let done = run_with(&dir, &args, &[]);
            let ctx = format!("leaderrun {args:?}\nstderr:\n{}", done.stderr);
            assert_eq!(done.code(), 69, "{ctx}");
            // The refusal is the last line (the main form logs that it
            // started campaigning first).
            assert!(
                done.stderr
                    .lines()
                    .last()
                    .is_some_and(|l| l.contains("not a leaderrun lease record")),
                "{ctx}"
            );
            assert!(!done.stderr.contains("panicked"), "{ctx}");
            assert_eq!(&fs::read(&path).unwrap()[..], *bytes, "{ctx}");
            assert_eq!(fs::read(&lock).unwrap(), b"also mine\n", "{ctx}");
        }
        assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), before);
    }
}

#[test]
fn a_record_of_a_newer_format_is_refused_and_left_untouched() {
    let dir = TestDir::new("bad-newer");
    let path = dir.join("lease");
    let bytes = br#"{"leaderrun": 2, "holder": "future:1", "token": 9}"#;
    fs::write(&path, bytes).unwrap();
    let url = format!("file://{}", path.display());
    for args in [
        vec!["--lease", &url, "--ttl", "1s", "--", "true"],
        vec!["release", "--lease", &url, "--force"],
    ] {
        let done = run_with(&dir, &args, &[]);
        let ctx = format!("leaderrun {args:?}\nstderr:\n{}", done.stderr);
        assert_eq!(done.code(), 69, "{ctx}");
        assert!(
            done.stderr
                .lines()
                .last()
                .is_some_and(|l| l.contains("newer")),
            "{ctx}"
        );
    }
    assert_eq!(fs::read(&path).unwrap(), bytes);
}

#[test]
fn usage_errors_follow_log_format_json() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leaderrun"))
        .args(["--log-format", "json", "--ttl", "soon", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let line: serde_json::Value = serde_json::from_str(stderr.trim()).expect("one JSON object");
    assert_eq!(line["event"], "error");
    assert_eq!(line["exit"], 64);
    assert!(
        line["message"].as_str().unwrap().contains("--ttl"),
        "{line}"
    );
}
