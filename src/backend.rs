//! Lease backends: one file per store, and the one place that dispatches on
//! the URL scheme. Adding a store means adding its file, a variant here, and a
//! line in each `match` below; the election and the supervisor do not change.

pub mod file;
#[cfg(feature = "s3")]
pub mod s3;

use std::sync::Arc;

use crate::lease::store::{Store, StoreError};
use crate::lease::url::LeaseUrl;

/// Where a lease lives, parsed and checked (but not yet connected to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    File(file::FileLocation),
    #[cfg(feature = "s3")]
    S3(s3::S3Location),
}

/// The schemes this build understands, for error messages.
#[cfg(not(feature = "s3"))]
pub const SCHEMES: &str = "file://";
#[cfg(feature = "s3")]
pub const SCHEMES: &str = "file://, s3://";

impl Location {
    /// Parses a `--lease` URL. The error is a fragment for "invalid --lease: ...".
    pub fn parse(raw: &str) -> Result<Location, String> {
        let url = LeaseUrl::parse(raw)?;
        match url.scheme.as_str() {
            "file" => file::FileLocation::from_url(&url).map(Location::File),
            #[cfg(feature = "s3")]
            "s3" => s3::S3Location::from_url(&url).map(Location::S3),
            #[cfg(not(feature = "s3"))]
            "s3" => Err("this leaderrun was built without the s3 feature".into()),
            other => Err(format!(
                "unknown scheme '{other}://' (supported: {SCHEMES})"
            )),
        }
    }

    /// The location for logs and `status`, with no secret in it.
    pub fn redacted(&self) -> String {
        match self {
            Location::File(l) => l.to_string(),
            #[cfg(feature = "s3")]
            Location::S3(l) => l.to_string(),
        }
    }

    /// A location beside this one for `leaderrun doctor`'s probe record.
    pub fn probe(&self) -> Location {
        match self {
            Location::File(l) => Location::File(l.probe()),
            #[cfg(feature = "s3")]
            Location::S3(l) => Location::S3(l.probe()),
        }
    }

    /// Connects to the store (loads credentials, builds clients).
    pub async fn open(&self) -> Result<Arc<dyn Store>, StoreError> {
        match self {
            Location::File(l) => Ok(Arc::new(file::FileStore::new(l.clone()))),
            #[cfg(feature = "s3")]
            Location::S3(l) => Ok(Arc::new(s3::S3Store::open(l).await?)),
        }
    }
}
