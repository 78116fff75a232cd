//! Five leaderrun processes on one file lease for 30 s while the leader is
//! killed, frozen past its ttl, stopped, and has its command killed; the
//! checker proves no two commands ever ran at once, tokens only grew and
//! nothing was left running.

mod harness;

use harness::{Contention, TestDir};

#[test]
fn five_contenders_on_a_file_lease_never_overlap() {
    let dir = TestDir::new("contention-file");
    let lease = dir.file_lease("lease");
    let report = Contention::new(&lease).run(&dir);
    eprintln!("{}", report.summary());
}

/// The checker is not vacuous: two leaderruns on *different* leases share one
/// records directory, so their commands overlap and both get token 1.
#[test]
fn the_checker_catches_overlapping_commands() {
    use harness::{Helper, check_no_overlap, check_tokens, leaderrun, load_records, wait_until};
    use nix::sys::signal::Signal;
    use std::time::Duration;

    let dir = TestDir::new("contention-checker");
    let rec = dir.subdir("records");
    let mut procs: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| {
            leaderrun(&dir, name)
                .lease(&dir.file_lease(&format!("lease-{name}")))
                .args(["--ttl", "1s"])
                .helper(&Helper::new(&rec))
                .spawn()
        })
        .collect();
    wait_until(Duration::from_secs(10), "both commands to run", || {
        load_records(&rec).iter().filter(|r| r.beats > 10).count() == 2
    });
    for p in &procs {
        p.signal(Signal::SIGTERM);
    }
    for p in procs.iter_mut() {
        p.expect_code(Duration::from_secs(5), 143);
    }
    let records = load_records(&rec);
    let overlap = check_no_overlap(&records).expect_err("overlap must be reported");
    assert!(overlap.contains("OVERLAP"), "{overlap}");
    check_tokens(&records, true).expect_err("equal tokens must be reported");
    check_tokens(&records, false).expect("equal tokens pass the non-strict check");
}
