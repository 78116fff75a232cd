//! The compare-and-swap interface every lease backend implements.
//!
//! Three operations on one record: load it, create it if absent, replace it if
//! its version is still the one last read. No backend may read and then write
//! blindly. Errors say what the election must do next:
//!
//! - [`StoreError::Conflict`]: somebody else wrote first; the caller has lost
//!   the race (or the lease) *for sure*.
//! - [`StoreError::Unavailable`]: the outcome is unknown (timeout, transport
//!   error, 5xx); retry until the deadline.
//! - [`StoreError::Fatal`]: retrying cannot help (auth, missing bucket, an
//!   object that is not a lease record, a newer record format).

use async_trait::async_trait;

use super::record::Record;

/// An opaque version of the stored record: an ETag, a generation, a revision.
/// Two loads that return equal versions saw the same write.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(pub String);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A record together with the version it was stored under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub record: Record,
    pub version: Version,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The precondition failed: another writer got there first.
    Conflict(String),
    /// The outcome is unknown; the store may or may not have applied a write.
    Unavailable(String),
    /// The store cannot be used for this lease; retrying will not help.
    Fatal(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Conflict(m) => write!(f, "conflict: {m}"),
            StoreError::Unavailable(m) => write!(f, "store unavailable: {m}"),
            StoreError::Fatal(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for StoreError {}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The lease's location for messages, without any secret.
    fn describe(&self) -> String;

    /// Read the record, or `None` if there is none. Content that is not a
    /// lease record (or of a newer format) is a [`StoreError::Fatal`].
    async fn load(&self) -> Result<Option<Stored>, StoreError>;

    /// Store `record` only if nothing is stored yet.
    async fn create(&self, record: &Record) -> Result<Version, StoreError>;

    /// Store `record` only if the stored version is still `expected`. A record
    /// that has vanished is a conflict.
    async fn replace(&self, expected: &Version, record: &Record) -> Result<Version, StoreError>;

    /// Delete the record only if its version is still `expected`. Used only by
    /// `leaderrun doctor` on its probe key; a lease itself is never deleted,
    /// so its fencing token is never reset.
    async fn remove(&self, expected: &Version) -> Result<(), StoreError>;
}
