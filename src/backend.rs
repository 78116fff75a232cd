//! Lease backends: one file per store, and the one place that dispatches on
//! the URL scheme. Adding a store means adding its file, a variant here, and a
//! line in each `match` below; the election and the supervisor do not change.

#[cfg(feature = "azure")]
pub mod azblob;
pub mod file;
#[cfg(feature = "gcs")]
pub mod gcs;
#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
mod net;
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
    #[cfg(feature = "azure")]
    AzBlob(azblob::AzBlobLocation),
    #[cfg(feature = "gcs")]
    Gcs(gcs::GcsLocation),
}

/// The schemes this build understands, for error messages.
pub fn schemes() -> String {
    let mut list = vec!["file://"];
    if cfg!(feature = "s3") {
        list.push("s3://");
    }
    if cfg!(feature = "gcs") {
        list.push("gs://");
    }
    if cfg!(feature = "azure") {
        list.push("azblob://");
    }
    list.join(", ")
}

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
            #[cfg(feature = "azure")]
            "azblob" => azblob::AzBlobLocation::from_url(&url).map(Location::AzBlob),
            #[cfg(not(feature = "azure"))]
            "azblob" => Err("this leaderrun was built without the azure feature".into()),
            #[cfg(feature = "gcs")]
            "gs" => gcs::GcsLocation::from_url(&url).map(Location::Gcs),
            #[cfg(not(feature = "gcs"))]
            "gs" => Err("this leaderrun was built without the gcs feature".into()),
            other => Err(format!(
                "unknown scheme '{other}://' (supported: {})",
                schemes()
            )),
        }
    }

    /// The location for logs and `status`, with no secret in it.
    pub fn redacted(&self) -> String {
        match self {
            Location::File(l) => l.to_string(),
            #[cfg(feature = "s3")]
            Location::S3(l) => l.to_string(),
            #[cfg(feature = "azure")]
            Location::AzBlob(l) => l.to_string(),
            #[cfg(feature = "gcs")]
            Location::Gcs(l) => l.to_string(),
        }
    }

    /// Checks the timing against what this store allows (an Azure blob
    /// lease lasts 15 to 60 s). The error is a one-line usage message.
    pub fn check_timing(&self, timing: &crate::config::Timing) -> Result<(), String> {
        match self {
            #[cfg(feature = "azure")]
            Location::AzBlob(_) => azblob::check_ttl(timing.ttl),
            _ => {
                let _ = timing;
                Ok(())
            }
        }
    }

    /// A location beside this one for `leaderrun doctor`'s probe record.
    pub fn probe(&self) -> Location {
        match self {
            Location::File(l) => Location::File(l.probe()),
            #[cfg(feature = "s3")]
            Location::S3(l) => Location::S3(l.probe()),
            #[cfg(feature = "azure")]
            Location::AzBlob(l) => Location::AzBlob(l.probe()),
            #[cfg(feature = "gcs")]
            Location::Gcs(l) => Location::Gcs(l.probe()),
        }
    }

    /// Connects to the store (loads credentials, builds clients).
    pub async fn open(&self) -> Result<Arc<dyn Store>, StoreError> {
        match self {
            Location::File(l) => Ok(Arc::new(file::FileStore::new(l.clone()))),
            #[cfg(feature = "s3")]
            Location::S3(l) => Ok(Arc::new(s3::S3Store::open(l).await?)),
            #[cfg(feature = "azure")]
            Location::AzBlob(l) => Ok(Arc::new(azblob::AzBlobStore::open(l).await?)),
            #[cfg(feature = "gcs")]
            Location::Gcs(l) => Ok(Arc::new(gcs::GcsStore::open(l).await?)),
        }
    }
}
