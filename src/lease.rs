//! The lease itself, independent of where it is stored.

pub mod conformance;
pub mod election;
pub mod memory;
pub mod record;
pub mod store;
pub mod url;
