//! `gs://bucket/object`: a lease in one object of Google Cloud Storage.
//!
//! Compare-and-swap with generation preconditions through the JSON API: the
//! version is the object's generation; create is an upload with
//! `ifGenerationMatch=0` (only if absent), replace an upload with
//! `ifGenerationMatch=<generation>`. A 412 is a conflict, and so is a replace
//! of a record that has vanished (GCS answers 412 there too). Uploads are
//! `uploadType=multipart` (metadata and content in one request): that is what
//! the Google client libraries send for small objects, and fake-gcs-server
//! (v1.54) checks `ifGenerationMatch` on multipart uploads but silently
//! ignores it on `uploadType=media`. The XML API is not used at all.
//!
//! **No blind retries.** Every request is sent once; the election bounds each
//! call by the time left before the leader's deadline and resolves an
//! ambiguous outcome (timeout, 5xx, dropped connection) by reading the record
//! back and comparing nonce and serial. The only retry is the HTTP pool's own
//! resend of a request that never left (a pooled connection found closed).
//!
//! **Credentials** are Application Default Credentials, in the order of the
//! Google client libraries: the JSON file named by
//! `GOOGLE_APPLICATION_CREDENTIALS` (a service-account key or an
//! `authorized_user` file), gcloud's ADC file
//! (`$CLOUDSDK_CONFIG/application_default_credentials.json`, by default under
//! `~/.config/gcloud/`, written by `gcloud auth application-default login`),
//! then the metadata server (`GCE_METADATA_HOST`, else
//! `metadata.google.internal`). With `STORAGE_EMULATOR_HOST` set, requests go
//! to that emulator without credentials. Access tokens are cached and
//! refreshed in the background before they expire, so a renewal does not wait
//! for the token endpoint. A service-account key signs its token request
//! (an RS256 JWT, with aws-lc-rs): that is the one place this backend uses the
//! wall clock, because Google checks the JWT's issue time.
//!
//! **Errors a user can act on.** A missing bucket, 401/403, and credentials
//! that are missing, unreadable, malformed or rejected by the token endpoint
//! are [`StoreError::Fatal`] with one line naming the lease (bucket and
//! object) and never a secret or token; transport errors, 408, 429, 5xx and
//! rate limits are [`StoreError::Unavailable`].
//!
//! URL options: `endpoint=` (another JSON API endpoint, e.g. Private Service
//! Connect or an emulator, `https://host[:port]`; plain `http://` only on
//! loopback when credentials are sent). Precedence: `endpoint=`, then
//! `STORAGE_EMULATOR_HOST`, then `https://storage.googleapis.com`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::net::{error_chain, is_tls_failure};
use crate::lease::record::{Record, new_nonce};
use crate::lease::store::{Store, StoreError, Stored, Version};
use crate::lease::url::LeaseUrl;

/// A lease record is a few hundred bytes; anything much larger at the key is
/// somebody else's data, refused without downloading it.
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// The most of an error or token answer that is read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The public JSON API endpoint.
const GOOGLE_ENDPOINT: &str = "https://storage.googleapis.com";

/// The OAuth token endpoint when a credentials file names none.
const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// The metadata server's host when `GCE_METADATA_HOST` is not set.
const METADATA_HOST: &str = "metadata.google.internal";

/// Read and write objects, nothing else.
const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";

/// The election bounds lease calls much tighter; these only keep `status` and
/// `doctor` from hanging on a stalled store.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `open` waits for the metadata server before deciding that this
/// host has no Google credentials at all.
const METADATA_PROBE: Duration = Duration::from_secs(3);

/// A token is refreshed (in the background) this long before it expires, or
/// at half its lifetime if that is shorter; below `TOKEN_MIN_LEFT` it is not
/// used any more and a request waits for a new one.
const TOKEN_REFRESH_AHEAD: Duration = Duration::from_secs(300);
const TOKEN_MIN_LEFT: Duration = Duration::from_secs(30);

/// The suffix of the probe object that `leaderrun doctor` writes beside a lease.
const PROBE_SUFFIX: &str = ".leaderrun-probe";

const USER_AGENT: &str = concat!("leaderrun/", env!("CARGO_PKG_VERSION"));

// ------------------------------------------------------------------ location

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcsLocation {
    pub bucket: String,
    pub object: String,
    /// `endpoint=`: a JSON API endpoint URL, without user info or trailing `/`.
    pub endpoint: Option<String>,
}

impl GcsLocation {
    pub fn from_url(url: &LeaseUrl) -> Result<GcsLocation, String> {
        url.only_keys(&["endpoint"])?;
        if url.authority.contains('@') {
            return Err(
                "gs URL must not carry credentials (user:secret@); use Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud, the metadata server)".into(),
            );
        }
        let bucket = url.authority.clone();
        if bucket.is_empty() {
            return Err("gs URL must name a bucket and an object, as gs://BUCKET/OBJECT".into());
        }
        check_bucket(&bucket)?;
        let object = url.path.strip_prefix('/').unwrap_or(&url.path).to_owned();
        if object.is_empty() || object.ends_with('/') {
            return Err(format!(
                "gs URL must name an object, as gs://{bucket}/OBJECT (got no object name)"
            ));
        }
        if object.len() > 1024 || object.contains(['\r', '\n']) || object == "." || object == ".." {
            return Err(format!("'{object}' is not a valid GCS object name"));
        }
        let endpoint = match url.get("endpoint") {
            None => None,
            Some(e) => Some(check_endpoint(e).map_err(|m| format!("endpoint= {m}"))?),
        };
        Ok(GcsLocation {
            bucket,
            object,
            endpoint,
        })
    }

    /// The object beside the lease that `leaderrun doctor` writes and removes.
    pub fn probe(&self) -> GcsLocation {
        GcsLocation {
            object: format!("{}{PROBE_SUFFIX}", self.object),
            ..self.clone()
        }
    }
}

impl std::fmt::Display for GcsLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gs://{}/{}", self.bucket, self.object)?;
        if let Some(e) = &self.endpoint {
            write!(f, "?endpoint={e}")?;
        }
        Ok(())
    }
}

/// GCS bucket names: 3-222 characters of `a-z 0-9 - _ .`, starting and ending
/// with a letter or digit.
fn check_bucket(b: &str) -> Result<(), String> {
    let ok_chars = b
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
    let ok_ends = b.starts_with(|c: char| c.is_ascii_alphanumeric())
        && b.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok_chars && ok_ends && (3..=222).contains(&b.len()) {
        Ok(())
    } else {
        Err(format!(
            "'{b}' is not a valid bucket name (3-222 of a-z, 0-9, '-', '_', '.', starting and ending with a letter or digit)"
        ))
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
    if rest.contains(['?', '#']) {
        return Err("must not have a query or fragment".into());
    }
    Ok(raw.trim_end_matches('/').to_owned())
}

/// The host of an endpoint URL, without port or brackets.
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or("");
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Plain HTTP carries a bearer token (or a signed token request) in clear
/// text: only to this host itself.
fn may_carry_secrets(url: &str) -> bool {
    url.starts_with("https://") || is_loopback_host(url_host(url))
}

/// `STORAGE_EMULATOR_HOST`, as the Google libraries read it: `host:port` or
/// a URL.
fn emulator_host() -> Result<Option<String>, String> {
    match std::env::var("STORAGE_EMULATOR_HOST") {
        Ok(v) if !v.trim().is_empty() => {
            let v = v.trim();
            let url = if v.contains("://") {
                v.to_owned()
            } else {
                format!("http://{v}")
            };
            check_endpoint(&url)
                .map(Some)
                .map_err(|m| format!("STORAGE_EMULATOR_HOST {m}"))
        }
        _ => Ok(None),
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters (so `/`
/// in an object name becomes `%2F`, as the JSON API wants).
fn pct(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", pct(k), pct(v)))
        .collect::<Vec<_>>()
        .join("&")
}

// --------------------------------------------------------------------- HTTP

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One HTTP client per store: rustls with aws-lc-rs and the system's roots
/// (none found is not fatal here: plain-HTTP emulators need none, and an
/// HTTPS request then fails with a certificate error that says so).
fn http_client() -> HttpClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_nodelay(true);
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider.clone())
    {
        Ok(b) => b,
        Err(_) => {
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("aws-lc-rs supports the default protocol versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    let https = builder.https_or_http().enable_http1().wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(https)
}

/// A complete answer.
struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

/// Why no complete answer came.
#[derive(Debug)]
enum HttpError {
    /// The request may or may not have reached the server.
    Transport(String),
    /// A TLS failure that retrying cannot fix.
    Tls(String),
    /// The answer's body is longer than we read.
    TooLarge(u64),
}

impl HttpError {
    /// As a store error about `what` (e.g. "the store", a token endpoint).
    fn into_store(self, shown: &str, what: &str) -> StoreError {
        match self {
            HttpError::Transport(m) => {
                StoreError::Unavailable(format!("{shown}: cannot reach {what}: {m}"))
            }
            HttpError::Tls(m) => StoreError::Fatal(format!(
                "{shown}: TLS failure talking to {what} ({m}); check the endpoint's scheme and certificate (and that CA certificates are installed)"
            )),
            HttpError::TooLarge(n) => {
                StoreError::Unavailable(format!("{shown}: {what} sent an answer of {n} bytes"))
            }
        }
    }
}

/// Sends `req` once and reads the answer (at most `max` bytes of body).
async fn send(http: &HttpClient, req: Request<Full<Bytes>>, max: u64) -> Result<Answer, HttpError> {
    let exchange = async {
        let resp = http.request(req).await.map_err(|e| {
            let chain = error_chain(&e);
            if e.is_connect() && is_tls_failure(&chain) {
                HttpError::Tls(chain)
            } else {
                HttpError::Transport(chain)
            }
        })?;
        let (parts, body) = resp.into_parts();
        let declared = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = declared.filter(|&n| n > max) {
            return Err(HttpError::TooLarge(n));
        }
        let body = Limited::new(body, max as usize)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    HttpError::TooLarge(max + 1)
                } else {
                    HttpError::Transport(format!("reading the answer failed: {}", error_chain(&*e)))
                }
            })?
            .to_bytes();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(r) => r,
        Err(_) => Err(HttpError::Transport(format!(
            "no answer within {}s",
            REQUEST_TIMEOUT.as_secs()
        ))),
    }
}

fn request(method: Method, url: &str, token: Option<&str>) -> http::request::Builder {
    let mut b = Request::builder()
        .method(method)
        .uri(url)
        .header(http::header::USER_AGENT, USER_AGENT);
    if let Some(t) = token {
        b = b.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    b
}

/// At most `n` characters of `s` on one line.
fn clip(s: &str, n: usize) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        format!("{}...", one_line.chars().take(n).collect::<String>())
    }
}

// -------------------------------------------------------------- credentials

/// Where access tokens come from.
enum Source {
    /// `STORAGE_EMULATOR_HOST`: no credentials at all.
    Anonymous,
    ServiceAccount {
        email: String,
        key_id: Option<String>,
        key: aws_lc_rs::signature::RsaKeyPair,
        token_uri: String,
    },
    AuthorizedUser {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
    },
    /// `http://HOST/computeMetadata/v1/...`.
    Metadata { host: String },
}

#[derive(Clone)]
struct Token {
    value: Arc<str>,
    /// Refresh in the background from here on.
    refresh_at: Instant,
    /// Do not use after this.
    stale_at: Instant,
}

#[derive(Default)]
struct TokenState {
    token: Option<Token>,
    refreshing: bool,
}

/// Application Default Credentials and a cached access token. Never printed:
/// it has no `Debug`, and messages name only where credentials came from.
struct Auth {
    source: Source,
    /// Where the credentials came from, for messages.
    origin: String,
    http: HttpClient,
    state: Mutex<TokenState>,
    /// One token request at a time.
    fetching: tokio::sync::Mutex<()>,
}

/// Why no token: `Fatal` for credentials that will never work, `Unavailable`
/// for a token endpoint that may answer later. Messages carry no secret.
type TokenResult<T> = Result<T, StoreError>;

impl Auth {
    fn new(source: Source, origin: String, http: HttpClient) -> Auth {
        Auth {
            source,
            origin,
            http,
            state: Mutex::new(TokenState::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// Finds Application Default Credentials (without using them yet).
    fn discover(http: &HttpClient) -> Result<Auth, String> {
        if let Some(path) =
            std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").filter(|p| !p.is_empty())
        {
            let origin = format!(
                "the credentials file '{}' (GOOGLE_APPLICATION_CREDENTIALS)",
                std::path::Path::new(&path).display()
            );
            let text = std::fs::read(&path).map_err(|e| format!("cannot read {origin}: {e}"))?;
            let source = parse_credentials(&text, &origin)?;
            return Ok(Auth::new(source, origin, http.clone()));
        }
        if let Some(path) = gcloud_adc_file() {
            match std::fs::read(&path) {
                Ok(text) => {
                    let origin = format!("gcloud's credentials file '{}'", path.display());
                    let source = parse_credentials(&text, &origin)?;
                    return Ok(Auth::new(source, origin, http.clone()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(format!(
                        "cannot read gcloud's credentials file '{}': {e}",
                        path.display()
                    ));
                }
            }
        }
        let host = std::env::var("GCE_METADATA_HOST")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| METADATA_HOST.to_owned());
        let origin = format!("the metadata server at {host}");
        Ok(Auth::new(Source::Metadata { host }, origin, http.clone()))
    }

    /// The bearer token to send, or `None` for the emulator.
    async fn bearer(self: &Arc<Self>) -> TokenResult<Option<Arc<str>>> {
        if matches!(self.source, Source::Anonymous) {
            return Ok(None);
        }
        let now = Instant::now();
        {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(t) = st.token.clone() {
                if now < t.refresh_at {
                    return Ok(Some(t.value));
                }
                if now < t.stale_at {
                    if !st.refreshing {
                        st.refreshing = true;
                        let me = Arc::clone(self);
                        tokio::spawn(async move {
                            // A failure here is seen again, and reported,
                            // by the request that finds the token stale.
                            let _ = me.refresh(false).await;
                            me.state
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .refreshing = false;
                        });
                    }
                    return Ok(Some(t.value));
                }
            }
        }
        self.refresh(true).await.map(Some)
    }

    /// Fetches a new token, unless another caller just did. `urgent`: only
    /// a usable token is needed (a request is waiting), not a fresh one.
    async fn refresh(&self, urgent: bool) -> TokenResult<Arc<str>> {
        let _one = self.fetching.lock().await;
        {
            let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(t) = &st.token {
                let now = Instant::now();
                if now < t.refresh_at || (urgent && now < t.stale_at) {
                    return Ok(t.value.clone());
                }
            }
        }
        let sent = Instant::now();
        let (value, lifetime) =
            match tokio::time::timeout(REQUEST_TIMEOUT, self.fetch_token()).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(StoreError::Unavailable(format!(
                        "no access token from {} within {}s",
                        self.origin,
                        REQUEST_TIMEOUT.as_secs()
                    )));
                }
            };
        let value: Arc<str> = Arc::from(value);
        let ahead = TOKEN_REFRESH_AHEAD.min(lifetime / 2);
        let token = Token {
            value: value.clone(),
            refresh_at: sent + lifetime.saturating_sub(ahead),
            stale_at: sent + lifetime.saturating_sub(TOKEN_MIN_LEFT.min(lifetime / 4)),
        };
        self.state.lock().unwrap_or_else(|e| e.into_inner()).token = Some(token);
        Ok(value)
    }

    /// One token request: the access token and its lifetime.
    async fn fetch_token(&self) -> TokenResult<(String, Duration)> {
        let (req, endpoint) = match &self.source {
            Source::Anonymous => unreachable!("no tokens for the emulator"),
            Source::ServiceAccount {
                email,
                key_id,
                key,
                token_uri,
            } => {
                let jwt = sign_jwt(email, key_id.as_deref(), key, token_uri)
                    .map_err(StoreError::Fatal)?;
                let body = form(&[
                    ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                    ("assertion", &jwt),
                ]);
                (form_post(token_uri, body), token_uri.clone())
            }
            Source::AuthorizedUser {
                client_id,
                client_secret,
                refresh_token,
                token_uri,
            } => {
                let body = form(&[
                    ("grant_type", "refresh_token"),
                    ("client_id", client_id),
                    ("client_secret", client_secret),
                    ("refresh_token", refresh_token),
                ]);
                (form_post(token_uri, body), token_uri.clone())
            }
            Source::Metadata { host } => {
                let url = format!(
                    "http://{host}/computeMetadata/v1/instance/service-accounts/default/token"
                );
                let req = request(Method::GET, &url, None)
                    .header("Metadata-Flavor", "Google")
                    .body(Full::new(Bytes::new()))
                    .map_err(|e| {
                        StoreError::Fatal(format!("bad metadata server host '{host}': {e}"))
                    })?;
                (Ok(req), format!("http://{host}"))
            }
        };
        let req = req.map_err(|e| {
            StoreError::Fatal(format!(
                "{}: cannot build the token request: {e}",
                self.origin
            ))
        })?;
        let what = match &self.source {
            Source::Metadata { .. } => "the metadata server".to_owned(),
            _ => format!("the token endpoint {}", url_host(&endpoint)),
        };
        let answer = send(&self.http, req, MAX_ANSWER_BYTES as u64)
            .await
            .map_err(|e| match e {
                HttpError::Transport(m) => {
                    StoreError::Unavailable(format!("cannot reach {what} for an access token: {m}"))
                }
                HttpError::Tls(m) => StoreError::Fatal(format!(
                    "TLS failure talking to {what} ({m}); check that CA certificates are installed"
                )),
                HttpError::TooLarge(n) => {
                    StoreError::Unavailable(format!("{what} sent an answer of {n} bytes"))
                }
            })?;
        token_answer(&self.origin, &what, answer.status, &answer.body)
    }
}

fn form_post(url: &str, body: String) -> Result<Request<Full<Bytes>>, http::Error> {
    request(Method::POST, url, None)
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(Full::new(Bytes::from(body)))
}

/// Reads a token endpoint's answer. Pure, so it is unit-tested below.
fn token_answer(
    origin: &str,
    what: &str,
    status: StatusCode,
    body: &[u8],
) -> TokenResult<(String, Duration)> {
    let v: Option<Value> = serde_json::from_slice(body).ok();
    if status.is_success() {
        let token = v
            .as_ref()
            .and_then(|v| v.get("access_token"))
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty());
        let expires_in = v
            .as_ref()
            .and_then(|v| v.get("expires_in"))
            .and_then(|e| {
                e.as_u64()
                    .or_else(|| e.as_str().and_then(|s| s.parse().ok()))
            })
            .unwrap_or(3600);
        return match token {
            Some(t) => Ok((t.to_owned(), Duration::from_secs(expires_in.max(1)))),
            None => Err(StoreError::Unavailable(format!(
                "{what} answered {status} without an access token"
            ))),
        };
    }
    // OAuth errors: {"error": "invalid_grant", "error_description": "..."}.
    // Neither echoes a secret; the description is clipped all the same.
    let code = v.as_ref().and_then(|v| v.get("error")).and_then(|e| {
        e.as_str()
            .map(str::to_owned)
            .or_else(|| e.get("message").and_then(|m| m.as_str()).map(str::to_owned))
    });
    let desc = v
        .as_ref()
        .and_then(|v| v.get("error_description"))
        .and_then(|d| d.as_str());
    let detail = match (code, desc) {
        (Some(c), Some(d)) => format!("{} {c}: {}", status.as_u16(), clip(d, 160)),
        (Some(c), None) => format!("{} {c}", status.as_u16()),
        (None, _) => format!("HTTP {}", status.as_u16()),
    };
    let s = status.as_u16();
    if s == 408 || s == 429 || s >= 500 {
        return Err(StoreError::Unavailable(format!(
            "{what} did not issue an access token ({detail})"
        )));
    }
    let hint = if detail.contains("timeframe") || detail.contains("iat") || detail.contains("exp") {
        "; check this host's clock (NTP): a service-account token request carries the time"
    } else if origin.contains("metadata server") && s == 404 {
        "; the instance has no service account attached"
    } else {
        ""
    };
    Err(StoreError::Fatal(format!(
        "the Google credentials from {origin} were rejected by {what} ({detail}){hint}"
    )))
}

/// Signs the JWT of a service-account token request (RFC 7523, RS256).
fn sign_jwt(
    email: &str,
    key_id: Option<&str>,
    key: &aws_lc_rs::signature::RsaKeyPair,
    token_uri: &str,
) -> Result<String, String> {
    let mut header = json!({"alg": "RS256", "typ": "JWT"});
    if let Some(k) = key_id {
        header["kid"] = json!(k);
    }
    let iat = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let claims = json!({
        "iss": email,
        "scope": SCOPE,
        "aud": token_uri,
        "iat": iat,
        "exp": iat + 3600,
    });
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut sig = vec![0u8; key.public_modulus_len()];
    key.sign(
        &aws_lc_rs::signature::RSA_PKCS1_SHA256,
        &aws_lc_rs::rand::SystemRandom::new(),
        input.as_bytes(),
        &mut sig,
    )
    .map_err(|_| "signing the service-account token request failed".to_owned())?;
    Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig)))
}

/// gcloud's ADC file: `$CLOUDSDK_CONFIG/application_default_credentials.json`,
/// by default `~/.config/gcloud/...`.
fn gcloud_adc_file() -> Option<std::path::PathBuf> {
    let dir = match std::env::var_os("CLOUDSDK_CONFIG").filter(|d| !d.is_empty()) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?)
            .join(".config")
            .join("gcloud"),
    };
    Some(dir.join("application_default_credentials.json"))
}

/// Parses a credentials file. Errors name the file and the field, never a
/// value from it.
fn parse_credentials(text: &[u8], origin: &str) -> Result<Source, String> {
    let v: Value = serde_json::from_slice(text)
        .map_err(|e| format!("{origin} is not a JSON credentials file ({e})"))?;
    let field = |name: &str| -> Result<String, String> {
        v.get(name)
            .and_then(|x| x.as_str())
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("{origin} has no '{name}'"))
    };
    let token_uri = |v: &Value| -> Result<String, String> {
        let uri = v
            .get("token_uri")
            .and_then(|x| x.as_str())
            .filter(|x| !x.is_empty())
            .unwrap_or(GOOGLE_TOKEN_URI);
        if !(uri.starts_with("https://") || uri.starts_with("http://")) || !may_carry_secrets(uri) {
            return Err(format!(
                "{origin} names a token_uri that is not https:// (plain http only to this host)"
            ));
        }
        Ok(uri.to_owned())
    };
    match v.get("type").and_then(|t| t.as_str()) {
        Some("service_account") => {
            let email = field("client_email")?;
            let pem = field("private_key")?;
            let key = parse_rsa_key(&pem)
                .map_err(|why| format!("the private_key in {origin} is unusable: {why}"))?;
            Ok(Source::ServiceAccount {
                email,
                key_id: v
                    .get("private_key_id")
                    .and_then(|x| x.as_str())
                    .filter(|x| !x.is_empty())
                    .map(str::to_owned),
                key,
                token_uri: token_uri(&v)?,
            })
        }
        Some("authorized_user") => Ok(Source::AuthorizedUser {
            client_id: field("client_id")?,
            client_secret: field("client_secret")?,
            refresh_token: field("refresh_token")?,
            token_uri: token_uri(&v)?,
        }),
        Some(other) => Err(format!(
            "{origin} holds credentials of type '{other}', which leaderrun does not support; use a service-account key, `gcloud auth application-default login`, or the metadata server"
        )),
        None => Err(format!(
            "{origin} has no 'type': it is not a Google credentials file"
        )),
    }
}

/// A PEM RSA private key (PKCS#8, as in service-account keys, or PKCS#1).
fn parse_rsa_key(pem: &str) -> Result<aws_lc_rs::signature::RsaKeyPair, &'static str> {
    let begin = pem.find("-----BEGIN ").ok_or("it is not PEM")?;
    let label_end = pem[begin + 11..].find("-----").ok_or("it is not PEM")? + begin + 11;
    let label = &pem[begin + 11..label_end];
    let body_start = label_end + 5;
    let end = pem[body_start..]
        .find("-----END ")
        .ok_or("it is not PEM (no END line)")?
        + body_start;
    let b64: String = pem[body_start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = STANDARD
        .decode(b64.as_bytes())
        .map_err(|_| "its PEM body is not base64")?;
    let key = match label {
        "PRIVATE KEY" => aws_lc_rs::signature::RsaKeyPair::from_pkcs8(&der),
        "RSA PRIVATE KEY" => aws_lc_rs::signature::RsaKeyPair::from_der(&der),
        _ => return Err("it is not a PEM private key"),
    };
    key.map_err(|_| "it is not a valid RSA private key")
}

/// Does this host say it is a Google Compute Engine machine (where the
/// metadata server exists even if it did not answer in time)?
fn on_gce() -> bool {
    std::fs::read_to_string("/sys/class/dmi/id/product_name").is_ok_and(|p| p.contains("Google"))
}

// -------------------------------------------------------------------- store

pub struct GcsStore {
    loc: GcsLocation,
    shown: String,
    /// The JSON API endpoint, without trailing `/`.
    base: String,
    http: HttpClient,
    auth: Arc<Auth>,
}

impl GcsStore {
    /// Finds the endpoint and the credentials. Fails only when retrying cannot
    /// help: unreadable or malformed credentials, or none at all.
    pub async fn open(loc: &GcsLocation) -> Result<GcsStore, StoreError> {
        let shown = loc.to_string();
        let emulator = emulator_host().map_err(StoreError::Fatal)?;
        let base = loc
            .endpoint
            .clone()
            .or_else(|| emulator.clone())
            .unwrap_or_else(|| GOOGLE_ENDPOINT.to_owned());
        let http = http_client();
        let auth = if emulator.is_some() {
            Auth::new(
                Source::Anonymous,
                "nowhere (STORAGE_EMULATOR_HOST is set: no credentials are sent)".into(),
                http.clone(),
            )
        } else {
            if !may_carry_secrets(&base) {
                return Err(StoreError::Fatal(format!(
                    "endpoint {base} is plain http and not on this host: leaderrun will not send Google credentials over it; use https://, or STORAGE_EMULATOR_HOST for an emulator"
                )));
            }
            Auth::discover(&http).map_err(StoreError::Fatal)?
        };
        let auth = Arc::new(auth);
        if let Source::Metadata { .. } = auth.source {
            // Not on Google Cloud and no credentials file: say so now rather
            // than campaigning forever. On GCE, a slow metadata server is
            // only a transient failure.
            let probe = tokio::time::timeout(METADATA_PROBE, auth.refresh(true)).await;
            let why = match probe {
                Ok(Ok(_)) => None,
                Ok(Err(StoreError::Fatal(m))) => return Err(StoreError::Fatal(m)),
                Ok(Err(StoreError::Unavailable(m) | StoreError::Conflict(m))) => Some(m),
                Err(_) => Some(format!("no answer within {}s", METADATA_PROBE.as_secs())),
            };
            if let Some(why) = why.filter(|_| !on_gce()) {
                let adc = gcloud_adc_file()
                    .map(|p| format!(" no {},", p.display()))
                    .unwrap_or_default();
                return Err(StoreError::Fatal(format!(
                    "no Google credentials found (GOOGLE_APPLICATION_CREDENTIALS is not set,{adc} and {} did not answer: {why}); set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run `gcloud auth application-default login`, or run on Google Cloud",
                    auth.origin
                )));
            }
        }
        Ok(GcsStore {
            loc: loc.clone(),
            shown,
            base,
            http,
            auth,
        })
    }

    fn object_url(&self) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            self.base,
            pct(&self.loc.bucket),
            pct(&self.loc.object)
        )
    }

    /// Sends one request to the store, with a token, once.
    async fn call(
        &self,
        op: Op,
        method: Method,
        url: &str,
        body: Option<(String, Bytes)>,
        max: u64,
    ) -> Result<Answer, StoreError> {
        let token = self.auth.bearer().await.map_err(|e| match e {
            StoreError::Fatal(m) => StoreError::Fatal(format!("{}: {m}", self.shown)),
            StoreError::Unavailable(m) => StoreError::Unavailable(format!("{}: {m}", self.shown)),
            c => c,
        })?;
        let mut b = request(method, url, token.as_deref());
        let body = match body {
            Some((content_type, bytes)) => {
                b = b.header(http::header::CONTENT_TYPE, content_type);
                Full::new(bytes)
            }
            None => Full::new(Bytes::new()),
        };
        let req = b.body(body).map_err(|e| {
            StoreError::Fatal(format!("{}: cannot build the request: {e}", self.shown))
        })?;
        send(&self.http, req, max).await.map_err(|e| match e {
            HttpError::TooLarge(n) if op == Op::Load => {
                self.foreign(format!("the object is {n} bytes or more"))
            }
            e => e.into_store(&self.shown, "the store"),
        })
    }

    /// The meaning of an error answer.
    fn failure(&self, op: Op, a: &Answer) -> Failure {
        let (reason, message) = error_details(&a.body);
        classify(
            &self.shown,
            &self.loc,
            op,
            &Response {
                status: a.status.as_u16(),
                reason: reason.as_deref(),
                message: message.as_deref(),
            },
            &self.auth.origin,
        )
    }

    /// One conditional multipart upload.
    async fn upload(
        &self,
        op: Op,
        if_generation: &str,
        record: &Record,
    ) -> Result<Version, StoreError> {
        let boundary = format!("leaderrun-{}", new_nonce());
        let meta = json!({
            "name": self.loc.object,
            "contentType": "application/json",
            "cacheControl": "no-store",
        });
        let mut body = Vec::with_capacity(512);
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n--{boundary}\r\nContent-Type: application/json\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(&record.encode());
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=multipart&ifGenerationMatch={}&fields=generation",
            self.base,
            pct(&self.loc.bucket),
            pct(if_generation)
        );
        let a = self
            .call(
                op,
                Method::POST,
                &url,
                Some((
                    format!("multipart/related; boundary={boundary}"),
                    Bytes::from(body),
                )),
                MAX_ANSWER_BYTES as u64,
            )
            .await?;
        if a.status.is_success() {
            let generation = serde_json::from_slice::<Value>(&a.body)
                .ok()
                .and_then(|v| generation_of(&v));
            return match generation {
                Some(g) => Ok(Version(g)),
                None => self.version_of_own_write(record).await,
            };
        }
        match self.failure(op, &a) {
            Failure::Missing => Err(StoreError::Conflict("the lease record has vanished".into())),
            Failure::Error(e) => Err(e),
        }
    }

    /// An upload accepted without a generation in the answer: read the record
    /// back; if it is ours, its generation is the one stored.
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

    /// The object's current generation, or `None` if there is no object.
    async fn generation(&self) -> Result<Option<String>, StoreError> {
        let url = format!("{}?fields=generation", self.object_url());
        let a = self
            .call(Op::Remove, Method::GET, &url, None, MAX_ANSWER_BYTES as u64)
            .await?;
        if a.status.is_success() {
            return serde_json::from_slice::<Value>(&a.body)
                .ok()
                .and_then(|v| generation_of(&v))
                .map(Some)
                .ok_or_else(|| {
                    StoreError::Unavailable(format!(
                        "{}: the store answered without a generation",
                        self.shown
                    ))
                });
        }
        match self.failure(Op::Load, &a) {
            Failure::Missing => Ok(None),
            Failure::Error(e) => Err(e),
        }
    }

    fn foreign(&self, why: String) -> StoreError {
        StoreError::Fatal(format!(
            "{}: {why}: it is not a leaderrun lease record; refusing to touch it",
            self.shown
        ))
    }
}

fn generation_of(v: &Value) -> Option<String> {
    let g = v.get("generation")?;
    let s = g
        .as_str()
        .map(str::to_owned)
        .or_else(|| g.as_u64().map(|n| n.to_string()))?;
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then_some(s)
}

/// `reason` and `message` of a JSON API error answer
/// (`{"error": {"code", "message", "errors": [{"reason", "message"}]}}`),
/// or the first line of a plain-text one.
fn error_details(body: &[u8]) -> (Option<String>, Option<String>) {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => {
            let e = v.get("error");
            let reason = e
                .and_then(|e| e.get("errors"))
                .and_then(|es| es.get(0))
                .and_then(|e0| e0.get("reason"))
                .and_then(|r| r.as_str())
                .map(str::to_owned);
            let message = e
                .and_then(|e| e.get("message"))
                .and_then(|m| m.as_str())
                .map(|m| clip(m, 200));
            (reason, message)
        }
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let first = text.lines().next().unwrap_or("").trim();
            (None, (!first.is_empty()).then(|| clip(first, 200)))
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

/// What one error answer means.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// 404 for the object (not the bucket).
    Missing,
    Error(StoreError),
}

/// The parts of an error answer that decide its meaning.
struct Response<'a> {
    status: u16,
    reason: Option<&'a str>,
    message: Option<&'a str>,
}

/// Maps a JSON API error answer; pure, so it is unit-tested below.
fn classify(shown: &str, loc: &GcsLocation, op: Op, r: &Response, origin: &str) -> Failure {
    let reason = r.reason.unwrap_or("");
    let what = match (r.reason, r.message) {
        (Some(c), Some(m)) if !m.is_empty() && !c.eq_ignore_ascii_case(m) => {
            format!("{} {c}: {m}", r.status)
        }
        (None, Some(m)) if !m.is_empty() => format!("{} {m}", r.status),
        (Some(c), _) => format!("{} {c}", r.status),
        (None, _) => format!("HTTP {}", r.status),
    };
    let fatal = |m: String| Failure::Error(StoreError::Fatal(format!("{shown}: {m}")));
    let unavailable = |m: String| Failure::Error(StoreError::Unavailable(format!("{shown}: {m}")));
    let bucket = format!("bucket '{}'", loc.bucket);
    let object = format!("object '{}' in {bucket}", loc.object);
    let bucket_missing = || {
        fatal(format!(
            "{bucket} does not exist ({what}); create it or fix the lease URL"
        ))
    };
    // Not just "bucket" anywhere: "No such object: my-bucket/k" names one.
    let about_bucket = r.message.is_some_and(|m| {
        let m = m.to_ascii_lowercase();
        m.contains("bucket does not exist") || m.contains("no such bucket")
    });
    match r.status {
        412 => Failure::Error(StoreError::Conflict(match op {
            Op::Create => "the lease record already exists".into(),
            _ => "the lease record changed since it was read".into(),
        })),
        // A read of a missing object is "no record yet" unless the store says
        // the bucket is missing (GCS: "The specified bucket does not exist.").
        // An upload names no object in its path: its 404 is the bucket (or a
        // wrong endpoint), and the create that follows a read says so.
        404 if about_bucket || matches!(op, Op::Create | Op::Replace) => bucket_missing(),
        404 => Failure::Missing,
        401 => fatal(format!(
            "the store rejected the credentials ({what}) for {object}; they came from {origin}"
        )),
        403 if reason.to_ascii_lowercase().contains("ratelimit") => unavailable(what),
        403 => {
            let scopes = if origin.contains("metadata server") {
                "; on a Compute Engine VM, its access scopes must also allow storage read-write"
            } else {
                ""
            };
            fatal(format!(
                "access denied to {object} ({what}); the credentials from {origin} need storage.objects.get, storage.objects.create and storage.objects.delete on the bucket (overwriting an object takes both create and delete), e.g. roles/storage.objectUser{scopes}"
            ))
        }
        408 | 429 => unavailable(what),
        501 if op != Op::Load => fatal(format!(
            "the store does not implement conditional writes ({what}) for {object}; it cannot hold a lease"
        )),
        s if s >= 500 => unavailable(what),
        409 => unavailable(what),
        s if (300..400).contains(&s) => {
            unavailable(format!("unexpected redirect ({what}); check the endpoint"))
        }
        s if (400..500).contains(&s) => fatal(format!(
            "the store refused the request for {object} ({what})"
        )),
        _ => unavailable(what),
    }
}

#[async_trait]
impl Store for GcsStore {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn load(&self) -> Result<Option<Stored>, StoreError> {
        let url = format!("{}?alt=media", self.object_url());
        let a = self
            .call(Op::Load, Method::GET, &url, None, MAX_RECORD_BYTES)
            .await?;
        if !a.status.is_success() {
            return match self.failure(Op::Load, &a) {
                Failure::Missing => Ok(None),
                Failure::Error(e) => Err(e),
            };
        }
        let generation = a
            .headers
            .get("x-goog-generation")
            .and_then(|v| v.to_str().ok())
            .map(|g| g.trim().to_owned())
            .filter(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()));
        let record = Record::decode(&a.body)
            .map_err(|e| StoreError::Fatal(format!("{}: {e}", self.shown)))?;
        let version = match generation {
            Some(g) => Version(g),
            None => {
                // No generation header (a proxy dropped it?): read the
                // generation, then the content pinned to it.
                let Some(g) = self.generation().await? else {
                    return Ok(None);
                };
                let pinned = format!("{url}&generation={g}");
                let a = self
                    .call(Op::Load, Method::GET, &pinned, None, MAX_RECORD_BYTES)
                    .await?;
                if !a.status.is_success() {
                    return Err(StoreError::Unavailable(format!(
                        "{}: the record changed while it was read",
                        self.shown
                    )));
                }
                let record = Record::decode(&a.body)
                    .map_err(|e| StoreError::Fatal(format!("{}: {e}", self.shown)))?;
                return Ok(Some(Stored {
                    record,
                    version: Version(g),
                }));
            }
        };
        Ok(Some(Stored { record, version }))
    }

    async fn create(&self, record: &Record) -> Result<Version, StoreError> {
        self.upload(Op::Create, "0", record).await
    }

    async fn replace(&self, expected: &Version, record: &Record) -> Result<Version, StoreError> {
        self.upload(Op::Replace, &expected.0, record).await
    }

    /// `DELETE ...?ifGenerationMatch=`. GCS honours the precondition on
    /// deletes; fake-gcs-server (v1.54) ignores it, so the generation is
    /// first read and compared here as well. That check is best effort (a
    /// write between the read and the delete is not caught on such a store):
    /// `remove` only serves `leaderrun doctor`'s probe object, never a lease.
    async fn remove(&self, expected: &Version) -> Result<(), StoreError> {
        match self.generation().await? {
            None => return Err(StoreError::Conflict("the record has vanished".into())),
            Some(g) if g != expected.0 => {
                return Err(StoreError::Conflict(
                    "the record changed since it was read".into(),
                ));
            }
            Some(_) => {}
        }
        let url = format!(
            "{}?ifGenerationMatch={}",
            self.object_url(),
            pct(&expected.0)
        );
        let a = self
            .call(
                Op::Remove,
                Method::DELETE,
                &url,
                None,
                MAX_ANSWER_BYTES as u64,
            )
            .await?;
        if a.status.is_success() {
            return Ok(());
        }
        match self.failure(Op::Remove, &a) {
            Failure::Missing => Err(StoreError::Conflict("the record has vanished".into())),
            Failure::Error(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(raw: &str) -> Result<GcsLocation, String> {
        GcsLocation::from_url(&LeaseUrl::parse(raw)?)
    }

    #[test]
    fn parses_bucket_object_and_endpoint() {
        let l = loc("gs://ops-leases/jobs/nightly?endpoint=http://127.0.0.1:4443/").unwrap();
        assert_eq!(l.bucket, "ops-leases");
        assert_eq!(l.object, "jobs/nightly");
        assert_eq!(l.endpoint.as_deref(), Some("http://127.0.0.1:4443"));
        assert_eq!(
            l.to_string(),
            "gs://ops-leases/jobs/nightly?endpoint=http://127.0.0.1:4443"
        );
        assert_eq!(l.probe().object, "jobs/nightly.leaderrun-probe");
        assert_eq!(loc("gs://b_1.x/k").unwrap().to_string(), "gs://b_1.x/k");
        assert_eq!(loc("gs://bkt/a%20b").unwrap().object, "a b");
    }

    #[test]
    fn rejects_bad_urls_without_echoing_secrets() {
        for bad in [
            "gs://bucket",
            "gs://bucket/",
            "gs://bucket/dir/",
            "gs:///object",
            "gs://Bucket/k",
            "gs://bu cket/k",
            "gs://ab/k",
            "gs://-bkt/k",
            "gs://bkt/k?endpoint=ftp://x",
            "gs://bkt/k?endpoint=http://user:hunter2@host",
            "gs://bkt/k?region=us",
            "gs://bkt/k?secret=hunter2",
            "gs://user:hunter2@bkt/k",
            "gs://bkt/a%0Ab",
        ] {
            let err = loc(bad).expect_err(bad);
            assert!(!err.contains("hunter2"), "{bad}: {err}");
        }
    }

    #[test]
    fn object_names_are_escaped_for_the_path() {
        assert_eq!(pct("jobs/a b+c"), "jobs%2Fa%20b%2Bc");
        assert_eq!(pct("é"), "%C3%A9");
        assert_eq!(form(&[("a b", "x=y&z")]), "a%20b=x%3Dy%26z");
    }

    #[test]
    fn secrets_travel_only_over_tls_or_loopback() {
        assert!(may_carry_secrets("https://storage.googleapis.com"));
        assert!(may_carry_secrets("http://127.0.0.1:4443"));
        assert!(may_carry_secrets("http://localhost:1/x"));
        assert!(may_carry_secrets("http://[::1]:9"));
        assert!(!may_carry_secrets("http://10.0.0.1:4443"));
        assert!(!may_carry_secrets("http://storage.example"));
    }

    fn classify_(op: Op, status: u16, reason: Option<&str>, message: Option<&str>) -> Failure {
        classify(
            "gs://b/k",
            &loc("gs://bkt/k").unwrap(),
            op,
            &Response {
                status,
                reason,
                message,
            },
            "the credentials file '/x' (GOOGLE_APPLICATION_CREDENTIALS)",
        )
    }

    fn fatal_text(f: Failure) -> String {
        match f {
            Failure::Error(StoreError::Fatal(m)) => m,
            other => panic!("expected fatal, got {other:?}"),
        }
    }

    #[test]
    fn classifies_answers() {
        for op in [Op::Create, Op::Replace, Op::Remove] {
            assert!(matches!(
                classify_(
                    op,
                    412,
                    Some("conditionNotMet"),
                    Some("At least one of the pre-conditions you specified did not hold.")
                ),
                Failure::Error(StoreError::Conflict(_))
            ));
        }
        assert_eq!(
            classify_(
                Op::Load,
                404,
                Some("notFound"),
                Some("No such object: bkt/k")
            ),
            Failure::Missing
        );
        assert_eq!(
            classify_(
                Op::Load,
                404,
                Some("notFound"),
                Some("No such object: ops-bucket/k")
            ),
            Failure::Missing
        );
        assert_eq!(
            classify_(Op::Load, 404, None, Some("Not Found")),
            Failure::Missing
        );
        assert_eq!(classify_(Op::Remove, 404, None, None), Failure::Missing);
        let m = fatal_text(classify_(
            Op::Load,
            404,
            Some("notFound"),
            Some("The specified bucket does not exist."),
        ));
        assert!(m.contains("bucket 'bkt' does not exist"), "{m}");
        let m = fatal_text(classify_(Op::Create, 404, None, Some("Not Found")));
        assert!(m.contains("bucket 'bkt' does not exist"), "{m}");
        let m = fatal_text(classify_(
            Op::Load,
            401,
            Some("required"),
            Some("Invalid Credentials"),
        ));
        assert!(
            m.contains("rejected the credentials") && m.contains("GOOGLE_APPLICATION_CREDENTIALS"),
            "{m}"
        );
        let m = fatal_text(classify_(
            Op::Replace,
            403,
            Some("forbidden"),
            Some("sa@p.iam.gserviceaccount.com does not have storage.objects.create access"),
        ));
        assert!(
            m.contains("access denied to object 'k' in bucket 'bkt'")
                && m.contains("storage.objects.delete")
                && m.contains("roles/storage.objectUser"),
            "{m}"
        );
        for (status, reason) in [
            (429, None),
            (403, Some("rateLimitExceeded")),
            (403, Some("userRateLimitExceeded")),
            (408, None),
            (500, None),
            (502, None),
            (503, Some("backendError")),
            (409, None),
        ] {
            assert!(
                matches!(
                    classify_(Op::Replace, status, reason, None),
                    Failure::Error(StoreError::Unavailable(_))
                ),
                "{status} {reason:?}"
            );
        }
        let m = fatal_text(classify_(Op::Create, 501, None, None));
        assert!(m.contains("conditional writes"), "{m}");
        let m = fatal_text(classify_(
            Op::Load,
            400,
            Some("invalid"),
            Some("Invalid bucket name"),
        ));
        assert!(m.contains("refused"), "{m}");
    }

    #[test]
    fn error_details_from_json_and_text() {
        let (r, m) = error_details(
            br#"{"error":{"code":403,"message":"denied","errors":[{"reason":"forbidden","message":"x"}]}}"#,
        );
        assert_eq!(
            (r.as_deref(), m.as_deref()),
            (Some("forbidden"), Some("denied"))
        );
        let (r, m) = error_details(b"Not Found\n");
        assert_eq!((r, m.as_deref()), (None, Some("Not Found")));
        assert_eq!(error_details(b""), (None, None));
    }

    #[test]
    fn generations_are_digits() {
        assert_eq!(
            generation_of(&json!({"generation": "17"})),
            Some("17".into())
        );
        assert_eq!(generation_of(&json!({"generation": 17})), Some("17".into()));
        assert_eq!(generation_of(&json!({"generation": "x"})), None);
        assert_eq!(generation_of(&json!({})), None);
    }

    #[test]
    fn token_answers() {
        let (t, life) = token_answer(
            "o",
            "w",
            StatusCode::OK,
            br#"{"access_token":"ya29.x","expires_in":3599,"token_type":"Bearer"}"#,
        )
        .unwrap();
        assert_eq!((t.as_str(), life), ("ya29.x", Duration::from_secs(3599)));
        let e = token_answer(
            "the credentials file '/k.json' (GOOGLE_APPLICATION_CREDENTIALS)",
            "the token endpoint oauth2.googleapis.com",
            StatusCode::BAD_REQUEST,
            br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
        )
        .unwrap_err();
        match e {
            StoreError::Fatal(m) => assert!(
                m.contains("invalid_grant")
                    && m.contains("Invalid JWT Signature")
                    && m.contains("/k.json"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        let e = token_answer(
            "o",
            "w",
            StatusCode::BAD_REQUEST,
            br#"{"error":"invalid_grant","error_description":"Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("clock"), "{e}");
        for s in [500, 503, 429, 408] {
            let e = token_answer("o", "w", StatusCode::from_u16(s).unwrap(), b"").unwrap_err();
            assert!(matches!(e, StoreError::Unavailable(_)), "{s}: {e:?}");
        }
        let e =
            token_answer("the metadata server at m", "w", StatusCode::NOT_FOUND, b"").unwrap_err();
        assert!(e.to_string().contains("no service account"), "{e}");
        assert!(matches!(
            token_answer("o", "w", StatusCode::OK, br#"{"expires_in":1}"#),
            Err(StoreError::Unavailable(_))
        ));
    }

    /// A metadata server on loopback that hands out `t1`, `t2`, ... valid
    /// for `lifetime_s` seconds each, and counts its requests.
    async fn token_stub(lifetime_s: u64) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let n = count.clone();
        tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let mut got = 0;
                while !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf[got..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => got += k,
                    }
                }
                let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                let body = format!(r#"{{"access_token":"t{i}","expires_in":{lifetime_s}}}"#);
                let _ = conn
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        (host, count)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tokens_are_cached_and_refreshed_ahead_in_the_background() {
        use std::sync::atomic::Ordering::SeqCst;
        let (host, count) = token_stub(4).await;
        let auth = Arc::new(Auth::new(
            Source::Metadata { host },
            "the metadata server at stub".into(),
            http_client(),
        ));
        // Lifetime 4 s: refreshed ahead from 2 s on, not used after 3 s.
        let t = |v: Option<Arc<str>>| v.unwrap().to_string();
        assert_eq!(t(auth.bearer().await.unwrap()), "t1");
        assert_eq!(t(auth.bearer().await.unwrap()), "t1");
        assert_eq!(count.load(SeqCst), 1, "cached");
        tokio::time::sleep(Duration::from_millis(2300)).await;
        // Due for refresh: the old token is still returned at once, and a
        // new one is fetched in the background.
        assert_eq!(t(auth.bearer().await.unwrap()), "t1");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(count.load(SeqCst), 2, "one background refresh");
        assert_eq!(t(auth.bearer().await.unwrap()), "t2");
        assert_eq!(t(auth.bearer().await.unwrap()), "t2");
        assert_eq!(count.load(SeqCst), 2);
        // Not even refreshed ahead once stale (the background refresh did
        // not run): a request waits for a new token.
        let auth = Arc::new(Auth::new(
            Source::Metadata {
                host: auth_host(&auth),
            },
            "the metadata server at stub".into(),
            http_client(),
        ));
        assert_eq!(t(auth.bearer().await.unwrap()), "t3");
        auth.state.lock().unwrap().refreshing = true; // no background refresh
        tokio::time::sleep(Duration::from_millis(3100)).await;
        assert_eq!(t(auth.bearer().await.unwrap()), "t4");
        assert_eq!(count.load(SeqCst), 4);
    }

    fn auth_host(a: &Auth) -> String {
        match &a.source {
            Source::Metadata { host } => host.clone(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn credentials_files_are_checked_without_echoing_them() {
        let origin = "the credentials file '/c.json' (GOOGLE_APPLICATION_CREDENTIALS)";
        let secret = "s3cr3t-refresh-token-value";
        for (text, expect) in [
            ("not json", "not a JSON credentials file"),
            ("{}", "has no 'type'"),
            (
                r#"{"type":"external_account","audience":"s3cr3t-refresh-token-value"}"#,
                "'external_account'",
            ),
            (
                r#"{"type":"service_account","client_email":"a@b"}"#,
                "has no 'private_key'",
            ),
            (
                r#"{"type":"service_account","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nczNjcjN0LXJlZnJlc2g=\n-----END PRIVATE KEY-----\n"}"#,
                "not a valid RSA private key",
            ),
            (
                r#"{"type":"service_account","client_email":"a@b","private_key":"s3cr3t-refresh-token-value"}"#,
                "it is not PEM",
            ),
            (
                r#"{"type":"authorized_user","client_id":"c","client_secret":"s3cr3t-refresh-token-value"}"#,
                "has no 'refresh_token'",
            ),
            (
                r#"{"type":"authorized_user","client_id":"c","client_secret":"x","refresh_token":"s3cr3t-refresh-token-value","token_uri":"http://evil.example/token"}"#,
                "token_uri",
            ),
        ] {
            let err = match parse_credentials(text.as_bytes(), origin) {
                Ok(_) => panic!("{text} was accepted"),
                Err(e) => e,
            };
            assert!(err.contains(expect), "{text}: {err}");
            assert!(err.contains("/c.json"), "{err}");
            assert!(!err.contains(secret), "{err}");
        }
        assert!(matches!(
            parse_credentials(
                br#"{"type":"authorized_user","client_id":"c","client_secret":"x","refresh_token":"r"}"#,
                origin
            ),
            Ok(Source::AuthorizedUser { ref token_uri, .. }) if token_uri == GOOGLE_TOKEN_URI
        ));
    }
}
