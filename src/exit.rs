//! The exit-status table (SPEC §4), as named constants.
//!
//! When the command ran and finished on its own, leaderrun exits with the
//! command's own status (128+N when it was killed by signal N). The codes below
//! are leaderrun's own outcomes; they follow `sysexits.h` where one fits.

/// The command could not be executed (permission denied, not a binary).
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;
/// Usage error: bad flag, URL, duration, signal name, or missing command.
pub const USAGE: u8 = 64;
/// The lease store is unusable: authentication, missing bucket, an object at
/// the lease key that is not a lease record, a record of a newer format, or an
/// unreachable store after `--wait`.
pub const STORE_UNUSABLE: u8 = 69;
/// Leaderrun itself failed in a way that is a bug.
pub const INTERNAL: u8 = 70;
/// Not leader: another candidate held the lease when `--once` (or `--wait`)
/// gave up. Cron can simply try again later.
pub const NOT_LEADER: u8 = 75;
/// Leadership was lost while the command ran in `--once` mode.
pub const LOST: u8 = 76;

/// The status a shell reports for a process killed by `signal`.
pub fn from_signal(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}

/// An outcome of leaderrun's own that ends the process with `code`.
///
/// Carried through `anyhow` so that any layer can end the run with a
/// documented status and a one-line message.
#[derive(Debug)]
pub struct Exit {
    pub code: u8,
    pub message: String,
}

impl Exit {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Exit {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}
