//! The `azblob://` backend against a real Azure Blob emulator (Azurite, on
//! loopback, started by `scripts/azure-server.sh start`, which prints the
//! environment these tests need). Every test FAILS when that server is not
//! configured: nothing here is skipped.
//!
//! - the store conformance suite, on Azurite (see `conformance_*` for what the
//!   Azure lease changes in it);
//! - the Azure lease itself: held while leading, a write by anyone without
//!   the lease id refused, a take-over refused while the lease runs, released
//!   on hand-over, broken by `release --force`;
//! - the real binary's exit status and one-line message for a rejected
//!   account key, a missing container, a foreign blob (left untouched) and a
//!   `--ttl` outside Azure's 15–60 s;
//! - `leaderrun doctor` on `azblob://`;
//! - the five-contender fault test of the shared harness (kill, freeze,
//!   stop), with `--ttl 15s`, Azure's minimum;
//! - start-to-command time and request rates, printed for the README.
//!
//! Each test uses its own container, so they run in parallel.

#![cfg(feature = "azure")]

mod harness;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use harness::{Contention, Proc, TestDir, leaderrun, wait_until};
use hmac::{Hmac, Mac};
use leaderrun::backend::Location;
use leaderrun::lease::conformance;
use leaderrun::lease::record::{Record, new_nonce};
use leaderrun::lease::store::{Store, StoreError};
use sha2::Sha256;

const STORE_UNUSABLE: i32 = 69;
const ACCOUNT: &str = "devstoreaccount1";
/// Azurite's published development key: a fixture, not a secret.
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// A well-formed key that Azurite does not know.
const WRONG_KEY: &str =
    "bGVhZGVycnVuLXRlc3Qtd3Jvbmcta2V5LW5vdC1hLXNlY3JldC0wMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMA==";

// ---------------------------------------------------------------- fixtures

/// The emulator's blob endpoint (`http://127.0.0.1:PORT/devstoreaccount1`);
/// the test fails, with the way to start one, when there is none.
fn endpoint() -> String {
    let hint =
        "run the tests with scripts/test.sh, or first: eval \"$(scripts/azure-server.sh start)\"";
    let e = std::env::var("LEADERRUN_AZURITE_ENDPOINT")
        .unwrap_or_else(|_| panic!("LEADERRUN_AZURITE_ENDPOINT is not set: {hint}"));
    assert!(
        std::env::var_os("AZURE_STORAGE_CONNECTION_STRING").is_some(),
        "AZURE_STORAGE_CONNECTION_STRING is not set: {hint}"
    );
    e.trim_end_matches('/').to_owned()
}

fn server_addr() -> SocketAddr {
    let e = endpoint();
    let hostport = e
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    hostport.parse().unwrap_or_else(|_| {
        panic!("LEADERRUN_AZURITE_ENDPOINT must be http://IP:PORT/ACCOUNT, got {e}")
    })
}

fn connection_string(endpoint: &str, key: &str) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};BlobEndpoint={endpoint};"
    )
}

/// A container name no other test (or earlier run) uses.
fn unique(prefix: &str) -> String {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{}-{nanos:x}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn lease_url(container: &str, blob: &str) -> String {
    format!(
        "azblob://{ACCOUNT}/{container}/{blob}?endpoint={}",
        endpoint()
    )
}

async fn open(url: &str) -> Arc<dyn Store> {
    Location::parse(url)
        .unwrap()
        .open()
        .await
        .unwrap_or_else(|e| panic!("open {url}: {e}"))
}

/// The store of a doctor probe beside `url`'s blob. The conformance suite
/// writes records with a 10 s ttl, below Azure's 15 s minimum; a probe
/// location gives those the nearest Azure lease duration instead of refusing
/// them, exactly as for `leaderrun doctor`'s 1 s records.
async fn open_lenient(url: &str) -> Arc<dyn Store> {
    let Location::AzBlob(loc) = Location::parse(url).unwrap() else {
        panic!("not an azblob URL: {url}");
    };
    Location::AzBlob(loc.probe())
        .open()
        .await
        .unwrap_or_else(|e| panic!("open {url}: {e}"))
}

fn record(holder: &str, ttl_ms: u64) -> Record {
    Record::first(holder, &new_nonce(), ttl_ms)
}

// ------------------------------------------------ a raw client, for setup

/// A plain Shared Key client for the tests' own setup and inspection, written
/// independently of the backend (so it also checks the backend's signing).
struct Raw {
    http: reqwest::Client,
    endpoint: String,
    key: Vec<u8>,
}

struct RawResponse {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl RawResponse {
    fn header(&self, k: &str) -> String {
        self.headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }
    fn code(&self) -> String {
        self.header("x-ms-error-code")
    }
}

impl Raw {
    fn new() -> Raw {
        let key = base64::engine::general_purpose::STANDARD
            .decode(DEV_KEY)
            .unwrap();
        Raw {
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            endpoint: endpoint(),
            key,
        }
    }

    /// One signed request. `path` is `/container[/blob]`, `query` sorted.
    async fn send(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> RawResponse {
        let date = httpdate(SystemTime::now());
        let mut all: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        all.push(("x-ms-date".into(), date));
        all.push(("x-ms-version".into(), "2023-11-03".into()));
        let get = |k: &str| {
            all.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let len = if body.is_empty() {
            String::new()
        } else {
            body.len().to_string()
        };
        let mut ms: Vec<&(String, String)> =
            all.iter().filter(|(k, _)| k.starts_with("x-ms-")).collect();
        ms.sort();
        let mut s = format!(
            "{method}\n\n\n{len}\n\n{}\n\n\n{}\n{}\n\n\n",
            get("content-type"),
            get("if-match"),
            get("if-none-match")
        );
        for (k, v) in ms {
            s.push_str(&format!("{k}:{v}\n"));
        }
        let base_path = self.endpoint.splitn(4, '/').nth(3).unwrap_or("");
        s.push_str(&format!("/{ACCOUNT}/{base_path}{path}"));
        for (k, v) in query {
            s.push_str(&format!("\n{k}:{v}"));
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).unwrap();
        mac.update(s.as_bytes());
        let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let mut url = format!("{}{path}", self.endpoint);
        for (i, (k, v)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("{k}={v}"));
        }
        let mut req = self
            .http
            .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url)
            .header("Authorization", format!("SharedKey {ACCOUNT}:{sig}"));
        for (k, v) in &all {
            req = req.header(k.as_str(), v.as_str());
        }
        let resp = req.body(body.to_vec()).send().await.unwrap();
        RawResponse {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.bytes().await.unwrap().to_vec(),
        }
    }

    async fn create_container(&self, name: &str) {
        let r = self
            .send(
                "PUT",
                &format!("/{name}"),
                &[("restype", "container")],
                &[],
                b"",
            )
            .await;
        assert_eq!(r.status, 201, "create container {name}: {}", r.code());
    }

    async fn put_blob(
        &self,
        container: &str,
        blob: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> RawResponse {
        let mut headers = vec![("x-ms-blob-type", "BlockBlob")];
        headers.extend_from_slice(extra);
        self.send("PUT", &format!("/{container}/{blob}"), &[], &headers, body)
            .await
    }

    async fn get_blob(&self, container: &str, blob: &str) -> RawResponse {
        self.send("GET", &format!("/{container}/{blob}"), &[], &[], b"")
            .await
    }

    /// `x-ms-lease-state` of the blob.
    async fn lease_state(&self, container: &str, blob: &str) -> String {
        let r = self
            .send("HEAD", &format!("/{container}/{blob}"), &[], &[], b"")
            .await;
        assert_eq!(r.status, 200);
        r.header("x-ms-lease-state")
    }
}

async fn new_container(prefix: &str) -> String {
    let c = unique(prefix);
    Raw::new().create_container(&c).await;
    c
}

fn new_container_blocking(prefix: &str) -> String {
    rt().block_on(new_container(prefix))
}

/// RFC 1123, independently of the backend.
fn httpdate(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (mut y, mut d) = (1970i64, days);
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    loop {
        let n = if leap(y) { 366 } else { 365 };
        if d < n {
            break;
        }
        d -= n;
        y += 1;
    }
    let lens = [
        31,
        if leap(y) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let mut m = 0;
    while d >= lens[m] {
        d -= lens[m];
        m += 1;
    }
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let mn = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][m];
    format!(
        "{wd}, {:02} {mn} {y} {:02}:{:02}:{:02} GMT",
        d + 1,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// ------------------------------------------------------------- conformance

#[tokio::test]
async fn conformance_create_once() {
    let c = new_container("lr-create").await;
    conformance::create_once(open_lenient(&lease_url(&c, "jobs/create")).await).await;
}

#[tokio::test]
async fn conformance_stale_version_rejected() {
    let c = new_container("lr-stale").await;
    conformance::stale_version_rejected(open_lenient(&lease_url(&c, "jobs/stale")).await).await;
}

#[tokio::test]
async fn conformance_replace_missing_is_conflict() {
    let c = new_container("lr-missing").await;
    conformance::replace_missing_is_conflict(open_lenient(&lease_url(&c, "jobs/missing")).await)
        .await;
}

#[tokio::test]
async fn conformance_foreign_blob_refused_and_untouched() {
    let c = new_container("lr-foreign").await;
    let blob = "jobs/foreign";
    let foreign = b"{\"somebody\": \"else's data\"}\n".to_vec();
    let raw = Raw::new();
    // The lenient store writes beside the lease URL's blob (the probe name).
    let url = lease_url(&c, blob);
    let probe_blob = format!("{blob}.leaderrun-probe");
    assert_eq!(
        raw.put_blob(&c, &probe_blob, &foreign, &[]).await.status,
        201
    );
    let read_raw = || {
        let (c, b) = (c.clone(), probe_blob.clone());
        async move { Raw::new().get_blob(&c, &b).await.body }
    };
    conformance::foreign_refused(open_lenient(&url).await, &foreign, read_raw).await;
    // And through a normal (strict) store, with a valid ttl.
    assert_eq!(raw.put_blob(&c, blob, &foreign, &[]).await.status, 201);
    let strict = open(&url).await;
    let err = strict.load().await.unwrap_err();
    assert!(
        err.to_string().contains("not a leaderrun lease record"),
        "{err}"
    );
    let err = strict.create(&record("a", 15_000)).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(raw.get_blob(&c, blob).await.body, foreign);
    assert_eq!(raw.lease_state(&c, blob).await, "available");
}

/// `conformance::race`, adapted. Its create race is unchanged. Its replace
/// race has every writer take over a record that is still *held*; with an
/// Azure lease on the blob, only the holder can write it (that is the point),
/// so the eight would all (rightly) be told "lease still active". Here the
/// replace race runs twice: on the held record (nobody wins, nobody is told
/// "conflict", the record is untouched) and, after the holder released it,
/// on the released record (exactly one wins, all others see a conflict).
#[tokio::test]
async fn race_of_eight_stores() {
    let c = new_container("lr-race").await;
    let url = lease_url(&c, "jobs/race");
    let mut stores = Vec::new();
    for _ in 0..8 {
        // Separate clients, as on separate hosts.
        stores.push(open(&url).await);
    }
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = s.clone();
            tokio::spawn(async move {
                let r = record(&format!("c{i}"), 15_000);
                s.create(&r).await.map(|v| (i, r, v))
            })
        })
        .collect();
    let mut winner = None;
    for t in tasks {
        match t.await.unwrap() {
            Ok(w) => {
                assert!(winner.is_none(), "two creates won");
                winner = Some(w);
            }
            Err(StoreError::Conflict(_)) => {}
            Err(e) => panic!("create race: unexpected {e:?}"),
        }
    }
    let (wi, held, version) = winner.expect("one create must win");
    assert_eq!(Raw::new().lease_state(&c, "jobs/race").await, "leased");

    // Held: nobody may take it over, and nobody is told it was lost.
    let race = |stores: &Vec<Arc<dyn Store>>, cur: leaderrun::lease::store::Stored| {
        stores
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != wi)
            .map(|(i, s)| {
                let s = s.clone();
                let cur = cur.clone();
                tokio::spawn(async move {
                    let next = cur
                        .record
                        .acquired_by(&format!("r{i}"), &new_nonce(), 15_000);
                    s.replace(&cur.version, &next).await.map(|_| next)
                })
            })
            .collect::<Vec<_>>()
    };
    let current = stores[0].load().await.unwrap().unwrap();
    assert_eq!(
        (current.record.clone(), current.version.clone()),
        (held.clone(), version.clone())
    );
    for t in race(&stores, current.clone()) {
        match t.await.unwrap() {
            Err(StoreError::Unavailable(m)) => {
                assert!(m.contains("has not expired"), "{m}")
            }
            other => panic!("take-over of a held record: {other:?}"),
        }
    }
    assert_eq!(stores[0].load().await.unwrap().unwrap(), current);

    // Released by its holder: exactly one of the seven takes it over.
    stores[wi]
        .replace(&version, &held.released())
        .await
        .expect("the holder releases");
    assert_eq!(Raw::new().lease_state(&c, "jobs/race").await, "available");
    let current = stores[0].load().await.unwrap().unwrap();
    assert!(current.record.released);
    let mut winners = Vec::new();
    for t in race(&stores, current.clone()) {
        match t.await.unwrap() {
            Ok(rec) => winners.push(rec),
            Err(StoreError::Conflict(_)) => {}
            Err(e) => panic!("replace race: unexpected {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one of 7 take-overs may win");
    let now = stores[0].load().await.unwrap().unwrap();
    assert_eq!(now.record, winners[0]);
    assert_eq!(now.record.token, held.token + 1);
    assert_eq!(Raw::new().lease_state(&c, "jobs/race").await, "leased");
}

// --------------------------------------------------------- the Azure lease

#[tokio::test]
async fn the_holder_keeps_an_azure_lease_and_nobody_else_can_write() {
    let c = new_container("lr-lease").await;
    let blob = "jobs/lease";
    let url = lease_url(&c, blob);
    let raw = Raw::new();
    let holder = open(&url).await;
    let a = record("holder", 15_000);
    let v1 = holder.create(&a).await.unwrap();
    let head = raw
        .send("HEAD", &format!("/{c}/{blob}"), &[], &[], b"")
        .await;
    assert_eq!(head.header("x-ms-lease-state"), "leased");
    assert_eq!(head.header("x-ms-lease-duration"), "fixed");
    assert_eq!(
        head.header("etag"),
        v1.0,
        "a lease operation must not change the ETag"
    );

    // A write without the lease id, even with the right ETag: refused.
    let body = a.renewed().encode();
    let r = raw.put_blob(&c, blob, &body, &[("If-Match", &v1.0)]).await;
    assert_eq!((r.status, r.code().as_str()), (412, "LeaseIdMissing"));
    // With a wrong lease id: refused.
    let r = raw
        .put_blob(
            &c,
            blob,
            &body,
            &[
                ("If-Match", &v1.0),
                ("x-ms-lease-id", "00000000-0000-4000-8000-000000000000"),
            ],
        )
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (412, "LeaseIdMismatchWithBlobOperation")
    );

    // Another candidate taking over (as if it had seen the record unchanged
    // for the ttl): "unknown, retry", the record is untouched.
    let other = open(&url).await;
    let err = other
        .replace(&v1, &a.acquired_by("other", &new_nonce(), 15_000))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert_eq!(other.load().await.unwrap().unwrap().version, v1);

    // The holder renews (the lease and the record) and reads its own write.
    let b = a.renewed();
    let v2 = holder.replace(&v1, &b).await.unwrap();
    assert_ne!(v1, v2);
    let got = other.load().await.unwrap().unwrap();
    assert_eq!((got.record, got.version), (b.clone(), v2.clone()));

    // A ttl outside Azure's range is refused with a message naming --ttl.
    let err = holder
        .replace(
            &v2,
            &Record {
                ttl_ms: 5_000,
                ..b.renewed()
            },
        )
        .await
        .unwrap_err();
    match err {
        StoreError::Fatal(m) => assert!(
            m.contains("--ttl") && m.contains("15s") && m.contains("60s"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }

    // An operator's forced release breaks the lease; the holder's next
    // renewal is lost for sure.
    let forced = Record {
        nonce: new_nonce(),
        ..b.released()
    };
    let v3 = other.replace(&v2, &forced).await.expect("forced release");
    // "broken" on Azure; Azurite reports a lease broken with period 0 as
    // "available". Either way nobody holds it.
    let state = raw.lease_state(&c, blob).await;
    assert!(state == "broken" || state == "available", "{state}");
    let err = holder.replace(&v2, &b.renewed()).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    // And the released record is taken over at once, under a new lease.
    let taken = forced.acquired_by("other", &new_nonce(), 15_000);
    other
        .replace(&v3, &taken)
        .await
        .expect("take-over of a released record");
    assert_eq!(raw.lease_state(&c, blob).await, "leased");
    assert_eq!(other.load().await.unwrap().unwrap().record.token, 2);
}

// ------------------------------------------------------- errors, via binary

fn base_cmd(dir: &TestDir, name: &str) -> harness::process::Cmd {
    let mut cmd = leaderrun(dir, name);
    for k in [
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_AUTH_MODE",
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
        "IDENTITY_ENDPOINT",
        "IDENTITY_HEADER",
    ] {
        cmd = cmd.env_remove(k);
    }
    cmd.env(
        "AZURE_STORAGE_CONNECTION_STRING",
        connection_string(&endpoint(), DEV_KEY),
    )
}

/// Asserts exit status 69 and one clear last line naming account, container
/// and blob, without the secret.
fn assert_unusable(
    f: &harness::Finished,
    container: &str,
    blob: &str,
    mentions: &[&str],
    secret: &str,
) {
    assert_eq!(
        f.code(),
        STORE_UNUSABLE,
        "exit status\nstderr:\n{}",
        f.stderr
    );
    let last = f.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(ACCOUNT) && last.contains(container) && last.contains(blob),
        "the message must name account, container and blob: {last}"
    );
    for m in mentions {
        assert!(last.contains(m), "the message must mention {m:?}: {last}");
    }
    assert!(!f.stderr.contains(secret), "a secret leaked:\n{}", f.stderr);
    assert!(
        !f.stderr.contains("panicked") && !f.stderr.contains("backtrace"),
        "{}",
        f.stderr
    );
}

#[test]
fn wrong_account_key_exits_69_without_the_key() {
    let c = new_container_blocking("lr-badkey");
    let dir = TestDir::new("az-badkey");
    let f = base_cmd(&dir, "badkey")
        .env(
            "AZURE_STORAGE_CONNECTION_STRING",
            connection_string(&endpoint(), WRONG_KEY),
        )
        .lease(&lease_url(&c, "jobs/k1"))
        .command(["true"])
        .run(Duration::from_secs(20));
    assert_unusable(
        &f,
        &c,
        "jobs/k1",
        &[
            "rejected the credentials",
            "AZURE_STORAGE_CONNECTION_STRING",
        ],
        WRONG_KEY,
    );

    // The same through AZURE_STORAGE_KEY.
    let f = base_cmd(&dir, "badkey2")
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .env("AZURE_STORAGE_KEY", WRONG_KEY)
        .lease(&lease_url(&c, "jobs/k1"))
        .command(["true"])
        .run(Duration::from_secs(20));
    assert_unusable(
        &f,
        &c,
        "jobs/k1",
        &["rejected the credentials", "AZURE_STORAGE_KEY"],
        WRONG_KEY,
    );
}

#[test]
fn missing_container_exits_69() {
    let c = unique("lr-nosuch");
    let dir = TestDir::new("az-nocontainer");
    let f = base_cmd(&dir, "nocontainer")
        .lease(&lease_url(&c, "jobs/k2"))
        .command(["true"])
        .run(Duration::from_secs(20));
    assert_unusable(
        &f,
        &c,
        "jobs/k2",
        &["ContainerNotFound", "does not exist"],
        DEV_KEY,
    );
}

#[test]
fn foreign_blob_exits_69_and_is_left_alone() {
    let c = new_container_blocking("lr-foreignbin");
    let data = b"#!/bin/sh\necho somebody else's script\n".to_vec();
    rt().block_on(async {
        assert_eq!(
            Raw::new().put_blob(&c, "jobs/k3", &data, &[]).await.status,
            201
        );
    });
    let dir = TestDir::new("az-foreign");
    let f = base_cmd(&dir, "foreign")
        .lease(&lease_url(&c, "jobs/k3"))
        .command(["true"])
        .run(Duration::from_secs(20));
    assert_unusable(
        &f,
        &c,
        "jobs/k3",
        &["not a leaderrun lease record"],
        DEV_KEY,
    );
    rt().block_on(async {
        let raw = Raw::new();
        assert_eq!(raw.get_blob(&c, "jobs/k3").await.body, data);
        assert_eq!(raw.lease_state(&c, "jobs/k3").await, "available");
    });
}

#[test]
fn ttl_outside_the_azure_lease_range_is_refused() {
    let c = new_container_blocking("lr-ttl");
    let dir = TestDir::new("az-ttl");
    for ttl in ["2s", "90s"] {
        let f = base_cmd(&dir, "ttl")
            .args(["--ttl", ttl])
            .lease(&lease_url(&c, "jobs/k4"))
            .command(["true"])
            .run(Duration::from_secs(20));
        assert_eq!(f.code(), 64, "a usage error: {}", f.stderr);
        let last = f.stderr.lines().last().unwrap_or_default();
        assert!(
            last.contains("--ttl") && last.contains("15s") && last.contains("60s"),
            "{last}"
        );
    }
    // Nothing was written.
    rt().block_on(async {
        assert_eq!(Raw::new().get_blob(&c, "jobs/k4").await.status, 404);
    });
}

/// An account SAS for the blob service signed with the development key
/// (Azure's account SAS, version 2020-12-06 and later).
fn account_sas(permissions: &str) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(DEV_KEY)
        .unwrap();
    let (sv, expiry) = ("2021-08-06", "2099-01-01T00:00:00Z");
    let to_sign = format!("{ACCOUNT}\n{permissions}\nb\nsco\n\n{expiry}\n\nhttps,http\n{sv}\n\n");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(to_sign.as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    let sig: String = sig
        .bytes()
        .map(|b| match b {
            b'+' => "%2B".to_owned(),
            b'/' => "%2F".to_owned(),
            b'=' => "%3D".to_owned(),
            b => (b as char).to_string(),
        })
        .collect();
    format!("sv={sv}&ss=b&srt=sco&sp={permissions}&se={expiry}&spr=https,http&sig={sig}")
}

/// A SAS token (AZURE_STORAGE_SAS_TOKEN) works for the whole cycle; a SAS
/// without write permission is refused with 69; the SAS never shows.
#[test]
fn sas_token_runs_a_command_and_a_read_only_sas_is_refused() {
    let c = new_container_blocking("lr-sas");
    let dir = TestDir::new("az-sas");
    let sas = account_sas("rwdlac");
    let sig = sas.rsplit("sig=").next().unwrap().to_owned();
    let f = base_cmd(&dir, "sas")
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .env("AZURE_STORAGE_SAS_TOKEN", format!("?{sas}"))
        .args(["--once", "--ttl", "15s"])
        .lease(&lease_url(&c, "jobs/sas"))
        .sh("echo token=$LEADERRUN_TOKEN")
        .run(Duration::from_secs(30));
    assert_eq!(f.code(), 0, "{}", f.stderr);
    assert!(f.stdout.contains("token=1"), "{}", f.stdout);
    assert!(!f.stderr.contains(&sig) && !f.stdout.contains(&sig));
    rt().block_on(async {
        // Released on exit, lease and record alike.
        let raw = Raw::new();
        assert_eq!(raw.lease_state(&c, "jobs/sas").await, "available");
        let rec = Record::decode(&raw.get_blob(&c, "jobs/sas").await.body).unwrap();
        assert!(rec.released && rec.token == 1, "{rec:?}");
    });

    let read_only = account_sas("rl");
    let sig = read_only.rsplit("sig=").next().unwrap().to_owned();
    let f = base_cmd(&dir, "sas-ro")
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .env("AZURE_STORAGE_SAS_TOKEN", &read_only)
        .args(["--ttl", "15s"])
        .lease(&lease_url(&c, "jobs/sas-ro"))
        .command(["true"])
        .run(Duration::from_secs(30));
    assert_unusable(&f, &c, "jobs/sas-ro", &["access denied"], &sig);
}

// ------------------------------------------------------- doctor and runs

#[test]
fn doctor_passes_on_azurite_and_leaves_nothing_behind() {
    let c = new_container_blocking("lr-doctor");
    let dir = TestDir::new("az-doctor");
    let f = base_cmd(&dir, "doctor")
        .args(["doctor", "--lease", &lease_url(&c, "jobs/doc")])
        .run(Duration::from_secs(30));
    assert_eq!(f.code(), 0, "stdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
    assert!(
        f.stdout.contains("honours conditional writes"),
        "{}",
        f.stdout
    );
    rt().block_on(async {
        let raw = Raw::new();
        let list = raw
            .send(
                "GET",
                &format!("/{c}"),
                &[("comp", "list"), ("restype", "container")],
                &[],
                b"",
            )
            .await;
        let text = String::from_utf8_lossy(&list.body);
        assert!(!text.contains("<Blob>"), "blobs left behind: {text}");
    });
}

/// A leader's command runs with the token; `release --force` breaks the
/// lease, the leader stops its command at its next renewal and campaigns
/// again; `status` shows the holder.
#[test]
fn release_force_breaks_a_live_leader() {
    let c = new_container_blocking("lr-force");
    let dir = TestDir::new("az-force");
    let url = lease_url(&c, "jobs/force");
    let marker = dir.join("tokens");
    let mut leader = base_cmd(&dir, "leader")
        .args(["--ttl", "15s", "--id", "leader"])
        .lease(&url)
        .sh(&format!(
            "echo $LEADERRUN_TOKEN >> '{}'; exec sleep 1000",
            marker.display()
        ))
        .spawn();
    let tokens = || std::fs::read_to_string(&marker).unwrap_or_default();
    wait_until(Duration::from_secs(20), "the command to start", || {
        tokens().lines().count() == 1
    });
    assert_eq!(tokens().trim(), "1");
    let status = base_cmd(&dir, "status")
        .args(["status", "--lease", &url])
        .run(Duration::from_secs(20));
    assert_eq!(status.code(), 0, "{}", status.stderr);
    assert!(status.stdout.contains("leader"), "{}", status.stdout);
    rt().block_on(async {
        assert_eq!(Raw::new().lease_state(&c, "jobs/force").await, "leased");
    });

    let f = base_cmd(&dir, "release")
        .args(["release", "--force", "--lease", &url])
        .run(Duration::from_secs(20));
    assert_eq!(f.code(), 0, "{}", f.stderr);
    // At its next renewal (every 5 s) the leader learns it lost, stops the
    // command, campaigns, and takes the released lease again with token 2.
    wait_until(
        Duration::from_secs(20),
        "the command to start again",
        || tokens().lines().count() == 2,
    );
    assert_eq!(tokens().lines().last(), Some("2"));
    assert!(
        leader.stderr().contains("lost")
            || leader.stderr().contains("Lost")
            || leader.stderr().contains("stepping down"),
        "{}",
        leader.stderr()
    );
    leader.signal(nix::sys::signal::Signal::SIGTERM);
    leader.expect_code(Duration::from_secs(20), 143);
    rt().block_on(async {
        // Released on exit: the Azure lease is free at once.
        assert_eq!(Raw::new().lease_state(&c, "jobs/force").await, "available");
    });
}

// -------------------------------------------------- measurements (printed)

/// A loopback TCP proxy that counts the HTTP requests passing through it
/// (every request of the backend carries one `x-ms-version` header).
struct CountingProxy {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl CountingProxy {
    fn start(upstream: SocketAddr) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (req, st) = (requests.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(upstream) else {
                            continue;
                        };
                        let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                        let req = req.clone();
                        std::thread::spawn(move || pump(client, server, Some(req)));
                        std::thread::spawn(move || pump(s2, c2, None));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        CountingProxy {
            addr,
            requests,
            stop,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, count: Option<Arc<AtomicUsize>>) {
    let needle = b"x-ms-version:";
    let mut buf = [0u8; 16384];
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(c) = &count {
            let mut hay = std::mem::take(&mut tail);
            hay.extend_from_slice(&buf[..n]);
            let lower = hay.to_ascii_lowercase();
            c.fetch_add(
                lower.windows(needle.len()).filter(|w| w == needle).count(),
                Ordering::Relaxed,
            );
            let keep = hay.len().min(needle.len() - 1);
            tail = hay[hay.len() - keep..].to_vec();
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// Start-to-command time, and the requests a leader and a follower make at
/// default settings (ttl 15 s: renew every 5 s, poll every 2 s).
#[test]
fn startup_time_and_request_rates() {
    let c = new_container_blocking("lr-measure");
    let dir = TestDir::new("az-measure");
    let marker = dir.join("started");
    let (pl, pf) = (
        CountingProxy::start(server_addr()),
        CountingProxy::start(server_addr()),
    );
    let url = |p: &CountingProxy| {
        format!(
            "azblob://{ACCOUNT}/{c}/jobs/measure?endpoint=http://{}/{ACCOUNT}",
            p.addr
        )
    };
    let t0 = Instant::now();
    let mut leader: Proc = base_cmd(&dir, "leader")
        .args(["--id", "leader"])
        .lease(&url(&pl))
        .sh(&format!("touch '{}'; exec sleep 1000", marker.display()))
        .spawn();
    wait_until(Duration::from_secs(20), "the command", || marker.exists());
    let startup = t0.elapsed();
    let mut follower = base_cmd(&dir, "follower")
        .args(["--id", "follower"])
        .lease(&url(&pf))
        .command(["true"])
        .spawn();
    std::thread::sleep(Duration::from_millis(500));
    let (l0, f0, t) = (pl.requests(), pf.requests(), Instant::now());
    std::thread::sleep(Duration::from_secs(20));
    let secs = t.elapsed().as_secs_f64();
    let per_hour = |n: usize| n as f64 / secs * 3600.0;
    let (l, f) = (pl.requests() - l0, pf.requests() - f0);
    let report = format!(
        "azblob measurements on Azurite (default settings, ttl 15s): start to command {:.0} ms; leader {l} requests in {secs:.0}s = {:.0}/h; follower {f} = {:.0}/h\n",
        startup.as_secs_f64() * 1e3,
        per_hour(l),
        per_hour(f)
    );
    eprint!("{report}");
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::temp_dir().join("leaderrun-azblob-measurements.txt"))
        .and_then(|mut fh| fh.write_all(report.as_bytes()));
    // A leader renews every 5 s with two requests (renew the Azure lease,
    // write the record); a follower reads every 2 s.
    assert!(
        (6..=10).contains(&l),
        "leader made {l} requests in {secs:.0}s"
    );
    assert!(
        (8..=12).contains(&f),
        "follower made {f} requests in {secs:.0}s"
    );
    assert!(startup < Duration::from_secs(10));
    follower.signal(nix::sys::signal::Signal::SIGTERM);
    follower.expect_code(Duration::from_secs(10), 143);
    leader.signal(nix::sys::signal::Signal::SIGTERM);
    leader.expect_code(Duration::from_secs(10), 143);
}

// --------------------------------------------- five contenders (harness)

#[test]
fn contention_five_contenders_on_an_azblob_lease_never_overlap() {
    use harness::Disruption;
    let c = new_container_blocking("lr-contention");
    let dir = TestDir::new("contention-azblob");
    let mut run = Contention::new(&lease_url(&c, "jobs/contention"));
    // Azure's shortest lease is 15 s. Hand-overs by release first (fast),
    // then a SIGKILLed and a frozen leader (each waits out the ttl).
    run.ttl = Duration::from_secs(15);
    run.duration = Duration::from_secs(20);
    run.disruptions = vec![
        Disruption::Terminate,
        Disruption::KillCommand,
        Disruption::Kill,
        Disruption::Freeze(Duration::from_secs(16)),
    ];
    run.takeover_timeout = Duration::from_secs(40);
    run.env = vec![
        (
            "AZURE_STORAGE_CONNECTION_STRING".into(),
            connection_string(&endpoint(), DEV_KEY),
        ),
        ("AZURE_STORAGE_AUTH_MODE".into(), "key".into()),
    ];
    let report = run.run(&dir);
    eprintln!("{}", report.summary());
}
