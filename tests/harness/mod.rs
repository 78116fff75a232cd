//! The end-to-end harness shared by the test binaries (`mod harness;`).
//!
//! Everything here drives the real `leaderrun` binary and real processes; no
//! part of leaderrun is linked in. The lease is always given as a URL, so the
//! same helpers serve the file backend and every remote one.
//!
//! - [`process`]: a unique directory per test, leaderrun spawned with its
//!   stderr kept, signals, waiting with a timeout, leftover-process scans.
//! - [`helper`]: the child command the tests give leaderrun. It is this very
//!   test binary, re-executed: it records its start (with `LEADERRUN_TOKEN`),
//!   a heartbeat every few milliseconds on CLOCK_MONOTONIC, the signals it
//!   receives and how it stopped.
//! - [`records`]: reads those records back and checks the safety property:
//!   no two children's lives overlap, tokens strictly increase, nothing is
//!   left running.
//! - [`contention`]: N leaderrun processes on one lease while the leader is
//!   repeatedly killed, frozen and stopped; then the checks above.

#![allow(dead_code, unused_imports)]

pub mod contention;
pub mod helper;
pub mod process;
pub mod records;

pub use contention::{Contention, ContentionReport, Disruption};
pub use helper::Helper;
pub use process::{
    BIN, Finished, Proc, TestDir, leaderrun, leftovers, mono_ns, pid_alive, proc_stat, send_signal,
    wait_until,
};
pub use records::{
    ChildRecord, assert_safe, assert_safe_with, check_no_overlap, check_tokens, file_lease_record,
    load_heads, load_records, wait_for_child,
};

/// Entry point of the helper child: a no-op in a normal test run; when the
/// harness re-executes this test binary as leaderrun's command (with
/// `LRH_CHILD` set), it becomes the heartbeat child and never returns.
#[test]
fn helper_child_entry() {
    helper::main_if_child();
}
