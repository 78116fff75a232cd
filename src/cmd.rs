//! The subcommands that inspect or manage a lease without running anything.

pub mod doctor;
pub mod release;
pub mod status;
