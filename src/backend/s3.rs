//! `s3://bucket/key`: a lease in one object of an S3-compatible store.
//!
//! Compare-and-swap with HTTP preconditions on `PutObject`: create with
//! `If-None-Match: *`, replace with `If-Match: <etag>` (the version is the
//! ETag; every write changes the record's serial, so two writes never share
//! an ETag). A 412 is a conflict; a 404 on `If-Match` means the record has
//! vanished, also a conflict; a 409 `ConditionalRequestConflict` (a concurrent
//! conditional write on the same key) is retried here a few times.
//!
//! **No blind retries.** The SDK's own retry loop is disabled: the election
//! bounds every call by the time left before the leader's deadline and
//! resolves an ambiguous outcome (timeout, 5xx, dropped connection) by reading
//! the record back and comparing nonce and serial.
//!
//! **Errors a user can act on.** A missing bucket, denied access, rejected or
//! missing credentials, a wrong region and a TLS failure are
//! [`StoreError::Fatal`] with one line naming the bucket and key (never a
//! secret); transport errors and 5xx are [`StoreError::Unavailable`].
//!
//! URL options: `endpoint=` (MinIO, R2, Ceph, emulators; `AWS_ENDPOINT_URL_S3`
//! and `AWS_ENDPOINT_URL` are honoured too), `region=` (else `AWS_REGION`, the
//! profile, instance metadata; `us-east-1` for a custom endpoint), and
//! `path_style=true|false` (default: true for a custom non-AWS endpoint).
//! For non-AWS endpoints request checksums are sent only when required: the
//! SDK's default CRC32 on every PUT breaks several S3-compatible stores.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_config::meta::region::RegionProviderChain;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::{Region, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;

use super::net::{error_chain, is_tls_failure};
use crate::lease::record::Record;
use crate::lease::store::{Store, StoreError, Stored, Version};
use crate::lease::url::LeaseUrl;

/// A lease record is a few hundred bytes; anything much larger at the key is
/// somebody else's data, refused without downloading it.
const MAX_RECORD_BYTES: i64 = 64 * 1024;

/// How often a write that met a concurrent conditional write (409
/// ConditionalRequestConflict) is sent again before the outcome is "unknown".
const CONFLICT_ATTEMPTS: u32 = 3;

/// How long `open` waits for the credential chain before leaving it to the
/// first request (which the election bounds and retries).
const CREDENTIALS_WAIT: Duration = Duration::from_secs(10);

/// The suffix of the probe key that `leaderrun doctor` writes beside a lease.
const PROBE_SUFFIX: &str = ".leaderrun-probe";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    pub key: String,
    /// `endpoint=`: a custom endpoint URL, without user info.
    pub endpoint: Option<String>,
    /// `region=`.
    pub region: Option<String>,
    /// `path_style=`.
    pub path_style: Option<bool>,
}

impl S3Location {
    pub fn from_url(url: &LeaseUrl) -> Result<S3Location, String> {
        url.only_keys(&["endpoint", "region", "path_style"])?;
        if url.authority.contains('@') {
            return Err(
                "s3 URL must not carry credentials (user:secret@); use the AWS credential chain (environment, profile, instance role)".into(),
            );
        }
        let bucket = url.authority.clone();
        if bucket.is_empty() {
            return Err("s3 URL must name a bucket and a key, as s3://BUCKET/KEY".into());
        }
        if !bucket
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
        {
            return Err(format!(
                "'{bucket}' is not a valid bucket name (letters, digits, '.', '-', '_')"
            ));
        }
        let key = url.path.strip_prefix('/').unwrap_or(&url.path).to_owned();
        if key.is_empty() || key.ends_with('/') {
            return Err(format!(
                "s3 URL must name an object key, as s3://{bucket}/KEY (got no key)"
            ));
        }
        let endpoint = match url.get("endpoint") {
            None => None,
            Some(e) => Some(check_endpoint(e).map_err(|m| format!("endpoint= {m}"))?),
        };
        let region = match url.get("region") {
            None => None,
            Some(r)
                if !r.is_empty()
                    && r.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
            {
                Some(r.to_owned())
            }
            Some(r) => return Err(format!("region= '{r}' is not a region name")),
        };
        let path_style = match url.get("path_style") {
            None => None,
            Some("true" | "1" | "yes") => Some(true),
            Some("false" | "0" | "no") => Some(false),
            Some(v) => return Err(format!("path_style= must be true or false (got '{v}')")),
        };
        Ok(S3Location {
            bucket,
            key,
            endpoint,
            region,
            path_style,
        })
    }

    /// The key beside the lease that `leaderrun doctor` writes and removes.
    pub fn probe(&self) -> S3Location {
        S3Location {
            key: format!("{}{PROBE_SUFFIX}", self.key),
            ..self.clone()
        }
    }
}

impl std::fmt::Display for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)?;
        let mut sep = '?';
        if let Some(e) = &self.endpoint {
            write!(f, "{sep}endpoint={e}")?;
            sep = '&';
        }
        if let Some(r) = &self.region {
            write!(f, "{sep}region={r}")?;
            sep = '&';
        }
        if let Some(p) = self.path_style {
            write!(f, "{sep}path_style={p}")?;
        }
        Ok(())
    }
}

/// An endpoint URL must be `http(s)://host[:port][/path]` with no user info.
fn check_endpoint(raw: &str) -> Result<String, String> {
    let rest = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
        .ok_or("must start with http:// or https://")?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.contains('@') {
        return Err("must not carry credentials (user:secret@)".into());
    }
    if authority.is_empty() {
        return Err("has no host".into());
    }
    Ok(raw.trim_end_matches('/').to_owned())
}

/// The host of an endpoint URL, without port or brackets.
fn endpoint_host(endpoint: &str) -> &str {
    let rest = endpoint
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(endpoint);
    let authority = rest.split('/').next().unwrap_or("");
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

/// Is this endpoint AWS itself (a FIPS, dual-stack or VPC endpoint)?
fn is_aws_endpoint(endpoint: &str) -> bool {
    let host = endpoint_host(endpoint).to_ascii_lowercase();
    host.ends_with(".amazonaws.com")
        || host.ends_with(".amazonaws.com.cn")
        || host.ends_with(".api.aws")
}

/// The endpoint in effect: the URL's, else the environment's.
fn effective_endpoint(loc: &S3Location) -> Result<Option<String>, String> {
    if let Some(e) = &loc.endpoint {
        return Ok(Some(e.clone()));
    }
    for var in ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"] {
        if let Ok(v) = std::env::var(var)
            && !v.trim().is_empty()
        {
            return check_endpoint(v.trim())
                .map(Some)
                .map_err(|m| format!("{var} {m}"));
        }
    }
    Ok(None)
}

pub struct S3Store {
    loc: S3Location,
    client: Client,
    shown: String,
}

impl S3Store {
    /// Builds the client: region, endpoint, credential chain, no SDK retries.
    /// Fails only when retrying cannot help (no region, no credentials at all).
    pub async fn open(loc: &S3Location) -> Result<S3Store, StoreError> {
        let shown = loc.to_string();
        let endpoint = effective_endpoint(loc).map_err(StoreError::Fatal)?;
        let custom = endpoint.as_deref().is_some_and(|e| !is_aws_endpoint(e));

        let region = match &loc.region {
            Some(r) => Region::new(r.clone()),
            None => {
                // Environment and profile first; instance metadata only for AWS
                // itself (a custom endpoint does not care, and waiting for
                // metadata on a host without it costs seconds).
                let chain = if custom {
                    RegionProviderChain::first_try(
                        aws_config::environment::region::EnvironmentVariableRegionProvider::new(),
                    )
                    .or_else(aws_config::profile::ProfileFileRegionProvider::new())
                    .or_else(Region::from_static("us-east-1"))
                } else {
                    RegionProviderChain::default_provider()
                };
                chain.region().await.ok_or_else(|| {
                    StoreError::Fatal(
                        "no AWS region configured: set AWS_REGION or add ?region=REGION to the lease URL"
                            .into(),
                    )
                })?
            }
        };

        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(region)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                // The election bounds lease calls much tighter; this only
                // keeps `status` and `doctor` from hanging on a stalled store.
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(3))
                    .operation_timeout(Duration::from_secs(30))
                    .build(),
            );
        if let Some(e) = &endpoint {
            loader = loader.endpoint_url(e.clone());
        }
        let sdk = loader.load().await;

        // Fail early and clearly when there are no credentials at all; leave
        // anything slower or transient to the first request.
        if let Some(provider) = sdk.credentials_provider()
            && let Ok(Err(e)) =
                tokio::time::timeout(CREDENTIALS_WAIT, provider.provide_credentials()).await
            && let Some(msg) = credentials_fatal(&e)
        {
            return Err(StoreError::Fatal(msg));
        }

        let checksums = if custom {
            (
                RequestChecksumCalculation::WhenRequired,
                ResponseChecksumValidation::WhenRequired,
            )
        } else {
            (
                RequestChecksumCalculation::WhenSupported,
                ResponseChecksumValidation::WhenSupported,
            )
        };
        let config = aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(loc.path_style.unwrap_or(custom))
            .request_checksum_calculation(checksums.0)
            .response_checksum_validation(checksums.1)
            .retry_config(RetryConfig::disabled())
            .build();
        Ok(S3Store {
            loc: loc.clone(),
            client: Client::from_conf(config),
            shown,
        })
    }

    /// Turns an SDK error into the store's vocabulary.
    fn classify<E>(&self, op: Op, err: &SdkError<E, HttpResponse>) -> Failure
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        match err {
            SdkError::ServiceError(se) => {
                let raw = se.raw();
                let e = se.err();
                classify_response(
                    &self.shown,
                    &self.loc,
                    op,
                    &Response {
                        status: raw.status().as_u16(),
                        code: e.code(),
                        message: e.message(),
                        bucket_region: raw.headers().get("x-amz-bucket-region"),
                    },
                )
            }
            SdkError::TimeoutError(_) => Failure::Error(StoreError::Unavailable(format!(
                "{}: timed out",
                self.shown
            ))),
            SdkError::DispatchFailure(df) => {
                let chain = error_chain(err);
                if let Some(cred) = find_credentials_error(err) {
                    return Failure::Error(match credentials_fatal(cred) {
                        Some(msg) => StoreError::Fatal(format!("{}: {msg}", self.shown)),
                        None => StoreError::Unavailable(format!(
                            "{}: could not load AWS credentials: {}",
                            self.shown,
                            error_chain(cred)
                        )),
                    });
                }
                if df.as_connector_error().is_some_and(|c| !c.is_timeout())
                    && is_tls_failure(&chain)
                {
                    return Failure::Error(StoreError::Fatal(format!(
                        "{}: TLS failure talking to the store ({chain}); check the endpoint's scheme and certificate",
                        self.shown
                    )));
                }
                Failure::Error(StoreError::Unavailable(format!(
                    "{}: cannot reach the store: {chain}",
                    self.shown
                )))
            }
            SdkError::ConstructionFailure(_) => Failure::Error(StoreError::Fatal(format!(
                "{}: cannot build the request: {}",
                self.shown,
                error_chain(err)
            ))),
            _ => Failure::Error(StoreError::Unavailable(format!(
                "{}: bad answer from the store: {}",
                self.shown,
                error_chain(err)
            ))),
        }
    }

    /// One conditional PUT, sent again on a 409 ConditionalRequestConflict.
    async fn put(
        &self,
        op: Op,
        condition: Condition<'_>,
        record: &Record,
    ) -> Result<Version, StoreError> {
        let body = record.encode();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let req = self
                .client
                .put_object()
                .bucket(&self.loc.bucket)
                .key(&self.loc.key)
                .content_type("application/json")
                .body(ByteStream::from(body.clone()));
            let req = match condition {
                Condition::Absent => req.if_none_match("*"),
                Condition::Matches(v) => req.if_match(&v.0),
            };
            match req.send().await {
                Ok(out) => {
                    return match out.e_tag() {
                        Some(etag) if !etag.is_empty() => Ok(etag_version(etag)),
                        _ => self.version_of_own_write(record).await,
                    };
                }
                Err(e) => match self.classify(op, &e) {
                    Failure::Retry if attempt < CONFLICT_ATTEMPTS => {
                        tokio::time::sleep(Duration::from_millis(25 << attempt)).await;
                    }
                    Failure::Retry => {
                        return Err(StoreError::Unavailable(format!(
                            "{}: concurrent conditional writes kept conflicting (409 ConditionalRequestConflict)",
                            self.shown
                        )));
                    }
                    Failure::Unsupported => {
                        return Err(StoreError::Fatal(format!(
                            "{}: the store does not implement this write",
                            self.shown
                        )));
                    }
                    Failure::Missing => {
                        return Err(match op {
                            Op::Create => StoreError::Fatal(format!(
                                "{}: the store answered 404 Not Found to a write of bucket '{}', key '{}'; check the endpoint URL",
                                self.shown, self.loc.bucket, self.loc.key
                            )),
                            _ => StoreError::Conflict("the lease record has vanished".into()),
                        });
                    }
                    Failure::Error(e) => return Err(e),
                },
            }
        }
    }

    /// A store that accepted a write without returning an ETag: read the
    /// record back; if it is ours, its version is the one stored.
    async fn version_of_own_write(&self, record: &Record) -> Result<Version, StoreError> {
        match self.load().await? {
            Some(s) if s.record.nonce == record.nonce && s.record.serial == record.serial => {
                Ok(s.version)
            }
            Some(s) => Err(StoreError::Conflict(format!(
                "the lease record was written by {} right after our write",
                s.record.holder
            ))),
            None => Err(StoreError::Conflict("the lease record has vanished".into())),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Load,
    Create,
    Replace,
    Remove,
}

#[derive(Clone, Copy)]
enum Condition<'a> {
    Absent,
    Matches(&'a Version),
}

/// What one failed request means.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// 404 for the object (not the bucket).
    Missing,
    /// 409 ConditionalRequestConflict: send the write again.
    Retry,
    /// 501 on a conditional delete: the store has no conditional deletes.
    Unsupported,
    Error(StoreError),
}

/// The parts of an error response that decide its meaning.
struct Response<'a> {
    status: u16,
    code: Option<&'a str>,
    message: Option<&'a str>,
    bucket_region: Option<&'a str>,
}

/// Maps an S3 error response; pure, so it is unit-tested below.
fn classify_response(shown: &str, loc: &S3Location, op: Op, r: &Response) -> Failure {
    let code = r.code.unwrap_or("");
    let what = match (r.code, r.message) {
        (Some(c), Some(m)) if !m.is_empty() => format!("{c}: {m}"),
        (Some(c), _) => c.to_owned(),
        (None, _) => format!("HTTP {}", r.status),
    };
    let fatal = |m: String| Failure::Error(StoreError::Fatal(format!("{shown}: {m}")));
    let unavailable = |m: String| Failure::Error(StoreError::Unavailable(format!("{shown}: {m}")));
    let bucket = format!("bucket '{}'", loc.bucket);
    let object = format!("{bucket}, key '{}'", loc.key);

    // Wrong region: a redirect or a signature scoped to the wrong region.
    let wrong_region = matches!(
        code,
        "PermanentRedirect" | "AuthorizationHeaderMalformed" | "IllegalLocationConstraintException"
    ) || r.status == 301;
    if wrong_region {
        let hint = match r.bucket_region {
            Some(reg) => format!(
                "the bucket is in region '{reg}': add ?region={reg} to the lease URL or set AWS_REGION={reg}"
            ),
            None => "set the bucket's region with ?region= or AWS_REGION".into(),
        };
        return fatal(format!("wrong region for {object} ({what}); {hint}"));
    }
    match (r.status, code) {
        (412, _) | (_, "PreconditionFailed") => Failure::Error(StoreError::Conflict(match op {
            Op::Create => "the lease record already exists".into(),
            _ => "the lease record changed since it was read".into(),
        })),
        (409, "ConditionalRequestConflict") => Failure::Retry,
        (_, "NoSuchBucket") => fatal(format!(
            "{bucket} does not exist (NoSuchBucket); create it or fix the lease URL"
        )),
        // A 404 without an S3 error code may be a wrong endpoint path; on a
        // read it looks like "no record yet", and the create that follows
        // says what is wrong.
        (404, _) | (_, "NoSuchKey") => Failure::Missing,
        (_, "AccessDenied" | "AllAccessDisabled" | "AccountProblem") => fatal(format!(
            "access denied to {object} ({code}); the credentials need s3:GetObject and s3:PutObject on the key, s3:ListBucket on the bucket (and s3:DeleteObject on the doctor's probe key)"
        )),
        (
            _,
            "InvalidAccessKeyId"
            | "SignatureDoesNotMatch"
            | "InvalidToken"
            | "InvalidSecurity"
            | "ExpiredToken"
            | "TokenRefreshRequired"
            | "InvalidClientTokenId",
        ) => fatal(format!(
            "the store rejected the AWS credentials ({code}) for {object}; check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or the instance role"
        )),
        (_, "RequestTimeTooSkewed") => fatal(format!(
            "this host's clock is too far from the store's ({code}) for {object}; fix the system clock (NTP)"
        )),
        (
            _,
            "RequestTimeout" | "SlowDown" | "InternalError" | "ServiceUnavailable"
            | "OperationAborted",
        ) => unavailable(what),
        (501, _) | (_, "NotImplemented") if op == Op::Remove => Failure::Unsupported,
        (501, _) | (_, "NotImplemented") if op != Op::Load => fatal(format!(
            "the store does not implement conditional writes ({what}) for {object}; it cannot hold a lease"
        )),
        (s, _) if s == 429 || s >= 500 => unavailable(what),
        (307, _) => unavailable(format!("temporary redirect ({what})")),
        (s, _) if (400..500).contains(&s) => fatal(format!(
            "the store refused the request for {object} ({what})"
        )),
        _ => unavailable(what),
    }
}

/// An ETag as a version, always in its quoted form, so that a store that
/// quotes it in one answer and not in another still compares equal.
fn etag_version(etag: &str) -> Version {
    let e = etag.trim();
    if e.starts_with('"') || e.starts_with("W/") {
        Version(e.to_owned())
    } else {
        Version(format!("\"{e}\""))
    }
}

fn find_credentials_error<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a CredentialsError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(c) = e.downcast_ref::<CredentialsError>() {
            return Some(c);
        }
        cur = e.source();
    }
    None
}

/// A credentials error that retrying cannot fix, as a message (no secret:
/// the SDK's messages name providers and files, not keys).
fn credentials_fatal(e: &CredentialsError) -> Option<String> {
    match e {
        CredentialsError::CredentialsNotLoaded(_) => Some(
            "no AWS credentials found (looked in the environment, profile files, web identity, container and instance metadata); set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or attach a role".into(),
        ),
        CredentialsError::InvalidConfiguration(_) => Some(format!(
            "the AWS credentials configuration is invalid: {}",
            error_chain(e)
        )),
        _ => None,
    }
}

#[async_trait]
impl Store for S3Store {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn load(&self) -> Result<Option<Stored>, StoreError> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.loc.bucket)
            .key(&self.loc.key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                return match self.classify(Op::Load, &e) {
                    Failure::Missing => Ok(None),
                    Failure::Retry | Failure::Unsupported => Err(StoreError::Unavailable(format!(
                        "{}: unexpected answer to a read",
                        self.shown
                    ))),
                    Failure::Error(e) => Err(e),
                };
            }
        };
        let foreign = |why: String| {
            StoreError::Fatal(format!(
                "{}: {why}: it is not a leaderrun lease record; refusing to touch it",
                self.shown
            ))
        };
        if out.content_length().is_some_and(|n| n > MAX_RECORD_BYTES) {
            return Err(foreign(format!(
                "the object is {} bytes",
                out.content_length().unwrap_or_default()
            )));
        }
        let etag = out.e_tag().map(etag_version).ok_or_else(|| {
            StoreError::Fatal(format!(
                "{}: the store returned no ETag, so it cannot do conditional writes",
                self.shown
            ))
        })?;
        let bytes = out.body.collect().await.map_err(|e| {
            StoreError::Unavailable(format!(
                "{}: reading the record failed: {}",
                self.shown,
                error_chain(&e)
            ))
        })?;
        let record = Record::decode(&bytes.into_bytes())
            .map_err(|e| StoreError::Fatal(format!("{}: {e}", self.shown)))?;
        Ok(Some(Stored {
            record,
            version: etag,
        }))
    }

    async fn create(&self, record: &Record) -> Result<Version, StoreError> {
        self.put(Op::Create, Condition::Absent, record).await
    }

    async fn replace(&self, expected: &Version, record: &Record) -> Result<Version, StoreError> {
        self.put(Op::Replace, Condition::Matches(expected), record)
            .await
    }

    /// Only `leaderrun doctor` removes, and only its probe key. A store that
    /// does not implement conditional deletes (501) gets a plain delete of
    /// the probe it has just read back.
    async fn remove(&self, expected: &Version) -> Result<(), StoreError> {
        let mut attempt = 0;
        let mut conditional = true;
        loop {
            attempt += 1;
            let req = self
                .client
                .delete_object()
                .bucket(&self.loc.bucket)
                .key(&self.loc.key);
            let req = if conditional {
                req.if_match(&expected.0)
            } else {
                req
            };
            match req.send().await {
                Ok(_) => return Ok(()),
                Err(e) => match self.classify(Op::Remove, &e) {
                    Failure::Unsupported if conditional => conditional = false,
                    Failure::Unsupported => {
                        return Err(StoreError::Fatal(format!(
                            "{}: the store refused to delete the probe (501 Not Implemented)",
                            self.shown
                        )));
                    }
                    Failure::Retry if attempt < CONFLICT_ATTEMPTS => {
                        tokio::time::sleep(Duration::from_millis(25 << attempt)).await;
                    }
                    Failure::Retry => {
                        return Err(StoreError::Unavailable(format!(
                            "{}: 409 ConditionalRequestConflict on delete",
                            self.shown
                        )));
                    }
                    Failure::Missing => {
                        return Err(StoreError::Conflict("the record has vanished".into()));
                    }
                    Failure::Error(e) => return Err(e),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(raw: &str) -> Result<S3Location, String> {
        S3Location::from_url(&LeaseUrl::parse(raw)?)
    }

    #[test]
    fn parses_bucket_key_and_options() {
        let l = loc("s3://ops-leases/jobs/nightly?endpoint=http://127.0.0.1:9000/&region=eu-west-1&path_style=true").unwrap();
        assert_eq!(l.bucket, "ops-leases");
        assert_eq!(l.key, "jobs/nightly");
        assert_eq!(l.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(l.region.as_deref(), Some("eu-west-1"));
        assert_eq!(l.path_style, Some(true));
        assert_eq!(
            l.to_string(),
            "s3://ops-leases/jobs/nightly?endpoint=http://127.0.0.1:9000&region=eu-west-1&path_style=true"
        );
        assert_eq!(l.probe().key, "jobs/nightly.leaderrun-probe");
        assert_eq!(loc("s3://b/k").unwrap().to_string(), "s3://b/k");
    }

    #[test]
    fn rejects_bad_urls_without_echoing_secrets() {
        for bad in [
            "s3://bucket",
            "s3://bucket/",
            "s3://bucket/dir/",
            "s3:///key",
            "s3://bu cket/k",
            "s3://b/k?endpoint=ftp://x",
            "s3://b/k?endpoint=http://user:hunter2@host",
            "s3://b/k?path_style=maybe",
            "s3://b/k?region=",
            "s3://b/k?secret=hunter2",
            "s3://AKIA:hunter2@b/k",
        ] {
            let err = loc(bad).expect_err(bad);
            assert!(!err.contains("hunter2"), "{bad}: {err}");
        }
    }

    #[test]
    fn aws_endpoints_are_recognised() {
        assert!(is_aws_endpoint("https://s3.eu-west-1.amazonaws.com"));
        assert!(is_aws_endpoint(
            "https://bucket.vpce-1a2b.s3.us-east-1.vpce.amazonaws.com"
        ));
        assert!(!is_aws_endpoint("http://127.0.0.1:9000"));
        assert!(!is_aws_endpoint("https://acct.r2.cloudflarestorage.com"));
        assert!(!is_aws_endpoint("http://[::1]:9000"));
        assert_eq!(endpoint_host("http://[::1]:9000/x"), "::1");
    }

    fn classify(op: Op, status: u16, code: Option<&str>, region: Option<&str>) -> Failure {
        classify_response(
            "s3://b/k",
            &loc("s3://b/k").unwrap(),
            op,
            &Response {
                status,
                code,
                message: Some("msg"),
                bucket_region: region,
            },
        )
    }

    fn fatal_text(f: Failure) -> String {
        match f {
            Failure::Error(StoreError::Fatal(m)) => m,
            other => panic!("expected fatal, got {other:?}"),
        }
    }

    #[test]
    fn classifies_responses() {
        assert!(matches!(
            classify(Op::Replace, 412, Some("PreconditionFailed"), None),
            Failure::Error(StoreError::Conflict(_))
        ));
        assert!(matches!(
            classify(Op::Create, 412, None, None),
            Failure::Error(StoreError::Conflict(_))
        ));
        assert_eq!(
            classify(Op::Replace, 409, Some("ConditionalRequestConflict"), None),
            Failure::Retry
        );
        assert_eq!(
            classify(Op::Load, 404, Some("NoSuchKey"), None),
            Failure::Missing
        );
        assert_eq!(
            classify(Op::Replace, 404, Some("NoSuchKey"), None),
            Failure::Missing
        );
        for status in [500, 502, 503, 429] {
            assert!(matches!(
                classify(Op::Replace, status, None, None),
                Failure::Error(StoreError::Unavailable(_))
            ));
        }
        assert!(matches!(
            classify(Op::Replace, 400, Some("RequestTimeout"), None),
            Failure::Error(StoreError::Unavailable(_))
        ));
        assert!(matches!(
            classify(Op::Load, 409, Some("OperationAborted"), None),
            Failure::Error(StoreError::Unavailable(_))
        ));
        let m = fatal_text(classify(Op::Load, 404, Some("NoSuchBucket"), None));
        assert!(m.contains("'b'") && m.contains("NoSuchBucket"), "{m}");
        let m = fatal_text(classify(Op::Load, 403, Some("AccessDenied"), None));
        assert!(
            m.contains("bucket 'b', key 'k'") && m.contains("AccessDenied"),
            "{m}"
        );
        for code in [
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "ExpiredToken",
        ] {
            let m = fatal_text(classify(Op::Load, 403, Some(code), None));
            assert!(m.contains(code) && m.contains("key 'k'"), "{m}");
        }
        let m = fatal_text(classify(
            Op::Load,
            301,
            Some("PermanentRedirect"),
            Some("eu-west-2"),
        ));
        assert!(m.contains("region=eu-west-2"), "{m}");
        let m = fatal_text(classify(
            Op::Load,
            400,
            Some("AuthorizationHeaderMalformed"),
            Some("ap-south-1"),
        ));
        assert!(m.contains("ap-south-1"), "{m}");
        assert_eq!(
            classify(Op::Remove, 501, Some("NotImplemented"), None),
            Failure::Unsupported
        );
        let m = fatal_text(classify(Op::Create, 501, Some("NotImplemented"), None));
        assert!(m.contains("conditional writes"), "{m}");
        let m = fatal_text(classify(Op::Load, 403, Some("RequestTimeTooSkewed"), None));
        assert!(m.contains("clock"), "{m}");
    }

    #[test]
    fn etags_compare_in_quoted_form() {
        assert_eq!(etag_version("abc"), etag_version("\"abc\""));
        assert_eq!(etag_version("W/\"x\"").0, "W/\"x\"");
    }

    #[test]
    fn tls_failures_are_recognised() {
        assert!(is_tls_failure(
            "io error: received corrupt message of type InvalidContentType"
        ));
        assert!(is_tls_failure("invalid peer certificate: UnknownIssuer"));
        assert!(is_tls_failure("invalid peer certificate: NotValidForName"));
        assert!(is_tls_failure("received fatal alert: HandshakeFailure"));
        assert!(!is_tls_failure(
            "io error: Connection refused (os error 111)"
        ));
        assert!(!is_tls_failure("client error (Connect): tls handshake eof"));
        assert!(!is_tls_failure("connection reset by peer"));
    }
}
