//! The command under supervision: its own process group, signals forwarded,
//! stopped with escalation, reaped; and a backstop that kills the group even
//! if leaderrun itself is killed or frozen.

pub mod child;
pub mod signals;
pub mod watchdog;
