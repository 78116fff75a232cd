//! leaderrun: run any command as a cluster-wide singleton under a lease.
//!
//! # Layout
//!
//! The modules follow one run from the command line to the exit status:
//!
//! - [`cli`]: the command line as typed (clap); its doc comments are the man page.
//! - [`config`]: validated settings; the timing arithmetic of SPEC §1.
//! - [`lease`]: the lease independent of storage:
//!   [`lease::record`] (the versioned JSON record),
//!   [`lease::store`] (the compare-and-swap trait every backend implements),
//!   [`lease::election`] (campaign, renew, step down),
//!   [`lease::conformance`] (the tests every backend passes),
//!   [`lease::memory`] (an in-memory store for unit tests),
//!   [`lease::url`] (URL splitting and redaction).
//! - [`backend`]: one file per store (`file://`, ...) and the scheme dispatch.
//! - [`supervisor`]: the command in its own process group: spawn, forward
//!   signals, stop with escalation, reap, and the backstop watchdog process.
//! - [`run`]: ties the election and the supervisor together.
//! - [`cmd`]: the `status`, `release` and `doctor` subcommands.
//! - [`exit`]: the exit-status table.
//! - [`log`]: one stderr line per transition.

pub mod backend;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod exit;
pub mod lease;
pub mod log;
pub mod run;
pub mod supervisor;
