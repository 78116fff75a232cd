//! The `gs://` backend against a real GCS emulator (fake-gcs-server, on
//! loopback, started by `scripts/gcs-server.sh start`, which prints the
//! environment these tests need). Every test FAILS when that server is not
//! configured: nothing here is skipped.
//!
//! - the store conformance suite, run on the emulator;
//! - the real binary's exit status and one-line message for a missing
//!   bucket, a foreign object, an unreachable endpoint with `--wait`, and bad
//!   credentials. The emulator accepts any credentials (and none), so the
//!   credential paths are exercised with a token endpoint of our own on
//!   loopback: a malformed, unreadable or unsupported
//!   `GOOGLE_APPLICATION_CREDENTIALS` file, a service-account key the token
//!   endpoint rejects (`invalid_grant`), one it accepts (the bearer token
//!   must then reach the store, and never the logs), gcloud's
//!   `authorized_user` file, the metadata server, and no credentials at all;
//! - `leaderrun doctor` on the emulator;
//! - the five-contender fault test of the shared harness, on `gs://`;
//! - start-to-command time and request rates at default settings (printed).
//!
//! Each test uses its own bucket, so they run in parallel. No test lets
//! leaderrun look for the real metadata server: `GCE_METADATA_HOST` always
//! points at a closed loopback port or a stub of ours.

#![cfg(feature = "gcs")]

mod harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use leaderrun::backend::Location;
use leaderrun::lease::conformance;
use leaderrun::lease::store::Store;

const BIN: &str = env!("CARGO_BIN_EXE_leaderrun");
const STORE_UNUSABLE: i32 = 69;

// ---------------------------------------------------------------- fixtures

/// The emulator's URL; the test fails (with the way to start one) when
/// there is none.
fn endpoint() -> String {
    let e = std::env::var("LEADERRUN_GCS_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "LEADERRUN_GCS_ENDPOINT is not set: run the tests with scripts/test.sh, or first: eval \"$(scripts/gcs-server.sh start)\""
        )
    });
    assert!(
        e.starts_with("http://127.0.0.1:"),
        "LEADERRUN_GCS_ENDPOINT must be http://127.0.0.1:PORT, got {e}"
    );
    e
}

fn server_addr() -> SocketAddr {
    endpoint()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("LEADERRUN_GCS_ENDPOINT is http://IP:PORT")
}

/// A bucket name no other test (or earlier run) uses.
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

/// One plain HTTP/1.1 request to `addr` (`Connection: close`): status and body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect to the emulator");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer")
        + 4;
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let mut body = out[end..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(i) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap_or(0);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + n]);
        b = &b[i + 2 + n + 2..];
    }
}

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn new_bucket(prefix: &str) -> String {
    let bucket = unique(prefix);
    let (status, body) = http(
        server_addr(),
        "POST",
        "/storage/v1/b?project=leaderrun-test",
        &[("Content-Type", "application/json")],
        format!("{{\"name\":\"{bucket}\"}}").as_bytes(),
    );
    assert_eq!(
        status,
        200,
        "create bucket {bucket}: {}",
        String::from_utf8_lossy(&body)
    );
    bucket
}

/// Puts `data` at `object` without any condition (somebody else's data).
fn put_raw(bucket: &str, object: &str, data: &[u8]) {
    let (status, body) = http(
        server_addr(),
        "POST",
        &format!(
            "/upload/storage/v1/b/{bucket}/o?uploadType=media&name={}",
            pct(object)
        ),
        &[("Content-Type", "application/octet-stream")],
        data,
    );
    assert_eq!(
        status,
        200,
        "put {object}: {}",
        String::from_utf8_lossy(&body)
    );
}

/// The bytes at `object`, or `None`.
fn get_raw(bucket: &str, object: &str) -> Option<Vec<u8>> {
    let (status, body) = http(
        server_addr(),
        "GET",
        &format!("/storage/v1/b/{bucket}/o/{}?alt=media", pct(object)),
        &[],
        b"",
    );
    match status {
        200 => Some(body),
        404 => None,
        s => panic!("get {object}: {s} {}", String::from_utf8_lossy(&body)),
    }
}

/// The names of the objects in `bucket`.
fn list(bucket: &str) -> Vec<String> {
    let (status, body) = http(
        server_addr(),
        "GET",
        &format!("/storage/v1/b/{bucket}/o"),
        &[],
        b"",
    );
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v.get("items")
        .and_then(|i| i.as_array())
        .map(|items| {
            items
                .iter()
                .filter_map(|o| o.get("name")?.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn lease_url(bucket: &str, object: &str) -> String {
    format!("gs://{bucket}/{object}")
}

/// Opens a store in this process: the emulator, no credentials.
async fn open(url: &str) -> Arc<dyn Store> {
    // SAFETY of the environment: every test of this binary wants the same value.
    assert_eq!(
        std::env::var("STORAGE_EMULATOR_HOST").ok().as_deref(),
        Some(endpoint().as_str()),
        "STORAGE_EMULATOR_HOST must be the emulator (scripts/gcs-server.sh start exports it)"
    );
    Location::parse(url)
        .unwrap()
        .open()
        .await
        .unwrap_or_else(|e| panic!("open {url}: {e}"))
}

/// A loopback port nobody listens on (bound, then closed).
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The binary with an environment of its own: the emulator, and nothing that
/// could make it look for real credentials or the real metadata server.
fn leaderrun() -> Command {
    let mut c = Command::new(BIN);
    for k in [
        "LEADERRUN_LEASE",
        "LEADERRUN_TOKEN",
        "LEADERRUN_ID",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ] {
        c.env_remove(k);
    }
    c.env("STORAGE_EMULATOR_HOST", endpoint())
        .env("CLOUDSDK_CONFIG", "/nonexistent/leaderrun-test/gcloud")
        .env("GCE_METADATA_HOST", format!("127.0.0.1:{}", closed_port()))
        .stdin(Stdio::null());
    c
}

/// Runs the binary to completion, failing the test after `timeout`.
fn run(mut cmd: Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn leaderrun");
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "leaderrun did not exit within {timeout:?}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asserts exit status 69 and one clear last line naming bucket and object.
fn assert_unusable(out: &Output, bucket: &str, object: &str, mentions: &[&str], secrets: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(STORE_UNUSABLE),
        "exit status\nstderr:\n{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(bucket) && last.contains(object),
        "the message must name bucket and object: {last}"
    );
    for m in mentions {
        assert!(last.contains(m), "the message must mention {m:?}: {last}");
    }
    for s in secrets {
        assert!(!stderr.contains(s), "a secret leaked ({s}):\n{stderr}");
    }
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir()
        .join("leaderrun-tests")
        .join(unique(name));
    std::fs::create_dir_all(&d).unwrap();
    d
}

// ------------------------------------------------------------- conformance

#[tokio::test]
async fn conformance_create_once() {
    let b = new_bucket("lr-create");
    conformance::create_once(open(&lease_url(&b, "jobs/create")).await).await;
}

#[tokio::test]
async fn conformance_stale_version_rejected() {
    let b = new_bucket("lr-stale");
    conformance::stale_version_rejected(open(&lease_url(&b, "jobs/stale")).await).await;
}

#[tokio::test]
async fn conformance_replace_missing_is_conflict() {
    let b = new_bucket("lr-missing");
    conformance::replace_missing_is_conflict(open(&lease_url(&b, "jobs/missing")).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_race_of_eight_stores() {
    let b = new_bucket("lr-race");
    let url = lease_url(&b, "jobs/race");
    let mut stores = Vec::new();
    for _ in 0..8 {
        // Separate clients: separate connection pools, as on separate hosts.
        stores.push(open(&url).await);
    }
    conformance::race(stores).await;
}

#[tokio::test]
async fn conformance_foreign_object_refused_and_untouched() {
    let b = new_bucket("lr-foreign");
    let object = "jobs/foreign";
    let foreign = b"{\"somebody\": \"else's data\"}\n".to_vec();
    put_raw(&b, object, &foreign);
    let read_raw = || {
        let b = b.clone();
        async move { get_raw(&b, object).expect("the foreign object is still there") }
    };
    conformance::foreign_refused(open(&lease_url(&b, object)).await, &foreign, read_raw).await;
}

#[tokio::test]
async fn large_foreign_object_is_refused_without_reading_it() {
    let b = new_bucket("lr-large");
    put_raw(&b, "big", &vec![b'x'; 200_000]);
    let err = open(&lease_url(&b, "big")).await.load().await.unwrap_err();
    assert!(
        err.to_string().contains("not a leaderrun lease record"),
        "{err}"
    );
    assert_eq!(get_raw(&b, "big").unwrap().len(), 200_000);
}

#[tokio::test]
async fn records_round_trip_under_awkward_names_and_describe_is_plain() {
    let b = new_bucket("lr-names");
    for object in ["k", "jobs/a b/c+d", "ünï/cødé?x#y", "a%2Fb"] {
        let url = format!("gs://{b}/{}", pct(object));
        let store = open(&url).await;
        assert_eq!(store.describe(), format!("gs://{b}/{object}"));
        let rec = leaderrun::lease::record::Record::first("me", "n1", 1000);
        let v = store.create(&rec).await.unwrap();
        let got = store.load().await.unwrap().unwrap();
        assert_eq!((got.record, got.version), (rec.clone(), v));
        let raw = get_raw(&b, object)
            .unwrap_or_else(|| panic!("object {object:?} was not written under its own name"));
        assert_eq!(leaderrun::lease::record::Record::decode(&raw).unwrap(), rec);
    }
    let with_endpoint = format!("gs://{b}/k?endpoint={}", endpoint());
    assert_eq!(
        open(&with_endpoint).await.describe(),
        format!("gs://{b}/k?endpoint={}", endpoint())
    );
}

// ------------------------------------------------------- errors, via binary

#[test]
fn missing_bucket_exits_69_naming_bucket_and_object() {
    let bucket = unique("lr-nosuch");
    let mut cmd = leaderrun();
    cmd.args([
        "--ttl",
        "2s",
        "--lease",
        &lease_url(&bucket, "jobs/k1"),
        "--",
        "true",
    ]);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(&out, &bucket, "jobs/k1", &["does not exist"], &[]);
}

#[test]
fn foreign_object_exits_69_and_is_left_alone() {
    let bucket = new_bucket("lr-foreignbin");
    let data = b"#!/bin/sh\necho somebody else's script\n".to_vec();
    put_raw(&bucket, "jobs/k2", &data);
    let mut cmd = leaderrun();
    cmd.args([
        "--ttl",
        "2s",
        "--lease",
        &lease_url(&bucket, "jobs/k2"),
        "--",
        "true",
    ]);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(
        &out,
        &bucket,
        "jobs/k2",
        &["not a leaderrun lease record"],
        &[],
    );
    assert_eq!(get_raw(&bucket, "jobs/k2").unwrap(), data);
}

#[test]
fn unreachable_endpoint_gives_up_after_wait_with_69() {
    let url = format!(
        "gs://lr-unreachable/jobs/k3?endpoint=http://127.0.0.1:{}",
        closed_port()
    );
    let mut cmd = leaderrun();
    cmd.args(["--ttl", "2s", "--wait", "2s", "--lease", &url, "--", "true"]);
    let out = run(cmd, Duration::from_secs(30));
    assert_unusable(
        &out,
        "lr-unreachable",
        "jobs/k3",
        &["cannot reach the store"],
        &[],
    );
}

/// A lease URL that reaches the emulator with credentials: `endpoint=` and
/// no `STORAGE_EMULATOR_HOST`.
fn authenticated(cmd: &mut Command, bucket: &str, object: &str, via: SocketAddr) -> String {
    cmd.env_remove("STORAGE_EMULATOR_HOST");
    format!("gs://{bucket}/{object}?endpoint=http://{via}")
}

#[test]
fn malformed_credentials_file_exits_69_without_echoing_it() {
    // The emulator accepts any credentials, so bad ones are caught before
    // any request: a file that is no key, naming the file, not its content.
    let bucket = new_bucket("lr-badcreds");
    let dir = temp_dir("gcs-badcreds");
    let secret = "leaderrun-test-not-a-key-0123456789";
    let cases: Vec<(PathBuf, &str)> = vec![
        (dir.join("garbage.json"), "not a JSON credentials file"),
        (dir.join("nokey.json"), "unusable"),
        (dir.join("external.json"), "'external_account'"),
        (dir.join("missing.json"), "cannot read"),
        (dir.clone(), "cannot read"),
    ];
    std::fs::write(&cases[0].0, format!("{secret} {{")).unwrap();
    std::fs::write(
        &cases[1].0,
        format!(
            r#"{{"type":"service_account","client_email":"x@leaderrun-test.iam.gserviceaccount.com","private_key":"-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n"}}"#,
            base64::engine::general_purpose::STANDARD.encode(secret)
        ),
    )
    .unwrap();
    std::fs::write(
        &cases[2].0,
        format!(r#"{{"type":"external_account","audience":"{secret}"}}"#),
    )
    .unwrap();
    for (i, (path, mention)) in cases.iter().enumerate() {
        let object = format!("jobs/k4-{i}");
        let mut cmd = leaderrun();
        let url = authenticated(&mut cmd, &bucket, &object, server_addr());
        cmd.env("GOOGLE_APPLICATION_CREDENTIALS", path)
            .args(["--ttl", "2s", "--lease", &url, "--", "true"]);
        let out = run(cmd, Duration::from_secs(20));
        let shown = path.display().to_string();
        assert_unusable(&out, &bucket, &object, &[mention, &shown], &[secret]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_credentials_at_all_exits_69() {
    let bucket = new_bucket("lr-nocreds");
    let mut cmd = leaderrun();
    let url = authenticated(&mut cmd, &bucket, "jobs/k5", server_addr());
    cmd.args(["--ttl", "2s", "--lease", &url, "--", "true"]);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(
        &out,
        &bucket,
        "jobs/k5",
        &[
            "no Google credentials found",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ],
        &[],
    );
}

#[test]
fn plain_http_endpoint_elsewhere_gets_no_credentials() {
    let mut cmd = leaderrun();
    cmd.env_remove("STORAGE_EMULATOR_HOST").args([
        "--ttl",
        "2s",
        "--lease",
        "gs://lr-plain/jobs/k6?endpoint=http://storage.invalid",
        "--",
        "true",
    ]);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(&out, "lr-plain", "jobs/k6", &["plain http"], &[]);
}

// ------------------------------------- credentials, with a token endpoint

/// A loopback HTTP server standing in for Google's token endpoint or the
/// metadata server: answers every request with `status` and `body`, and
/// keeps the requests it saw.
struct Stub {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Stub {
    fn start(status: u16, body: &'static str) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Ok((conn, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    conn.set_nonblocking(false).unwrap();
                    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    if let Some(req) = read_request(&conn) {
                        seen.lock().unwrap().push(req);
                    }
                    let mut conn = conn;
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
        Stub { addr, seen, stop }
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// One request (head and body) as text.
fn read_request(conn: &TcpStream) -> Option<String> {
    let mut r = BufReader::new(conn);
    let mut text = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
        text.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    text.push_str(&String::from_utf8_lossy(&body));
    Some(text)
}

/// A TCP proxy in front of the emulator that keeps what clients sent and
/// counts their requests; [`Recorder::stall`] makes it swallow everything
/// clients send from then on (a store that accepts requests and never
/// answers), on new and on kept-alive connections alike.
struct Recorder {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<u8>>>,
    stalled: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Recorder {
    fn start(upstream: SocketAddr) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let stalled = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (sent, stalled, stop) = (sent.clone(), stalled.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Ok((client, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    client.set_nonblocking(false).unwrap();
                    let Ok(server) = TcpStream::connect(upstream) else {
                        continue;
                    };
                    let (mut c_in, mut s_out) =
                        (client.try_clone().unwrap(), server.try_clone().unwrap());
                    let (mut s_in, mut c_out) = (server, client);
                    let (sent, stalled) = (sent.clone(), stalled.clone());
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 8192];
                        while let Ok(n) = c_in.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            if stalled.load(Ordering::SeqCst) {
                                continue;
                            }
                            if s_out.write_all(&buf[..n]).is_err() {
                                break;
                            }
                            sent.lock().unwrap().extend_from_slice(&buf[..n]);
                        }
                        let _ = s_out.shutdown(std::net::Shutdown::Write);
                    });
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut s_in, &mut c_out);
                        let _ = c_out.shutdown(std::net::Shutdown::Write);
                    });
                }
            });
        }
        Recorder {
            addr,
            sent,
            stalled,
            stop,
        }
    }

    fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.sent.lock().unwrap()).into_owned()
    }

    /// Requests sent so far (request lines; bodies are lease records and
    /// never hold one).
    fn requests(&self) -> usize {
        self.text().matches(" HTTP/1.1\r\n").count()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A service-account key file with a fresh RSA key whose token_uri is `token_uri`.
fn service_account_key(dir: &Path, token_uri: &str) -> (PathBuf, Vec<u8>) {
    use aws_lc_rs::encoding::AsDer;
    let key = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
    let pkcs8 = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&key).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref());
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        b64.as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    );
    use aws_lc_rs::signature::KeyPair as _;
    let public = key.public_key().as_ref().to_vec();
    let file = serde_json::json!({
        "type": "service_account",
        "project_id": "leaderrun-test",
        "private_key_id": "0123abcd",
        "private_key": pem,
        "client_email": "leaderrun@leaderrun-test.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    });
    let path = dir.join("key.json");
    std::fs::write(&path, file.to_string()).unwrap();
    (path, public)
}

/// Checks the JWT in a token request: signed by `public`, for the right
/// audience and scope.
fn check_jwt_request(req: &str, public: &[u8], token_uri: &str) {
    assert!(req.starts_with("POST /token "), "{req}");
    let body = req.split("\r\n\r\n").nth(1).unwrap();
    assert!(
        body.contains("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"),
        "{body}"
    );
    let jwt = body
        .split("assertion=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3, "{jwt}");
    let header: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    let claims: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(header["alg"], "RS256");
    assert_eq!(header["kid"], "0123abcd");
    assert_eq!(
        claims["iss"],
        "leaderrun@leaderrun-test.iam.gserviceaccount.com"
    );
    assert_eq!(claims["aud"], token_uri);
    assert_eq!(
        claims["scope"],
        "https://www.googleapis.com/auth/devstorage.read_write"
    );
    let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    aws_lc_rs::signature::UnparsedPublicKey::new(
        &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
        public,
    )
    .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig)
    .expect("the JWT is signed with the key from the file");
}

#[test]
fn rejected_service_account_key_exits_69_with_the_reason() {
    let bucket = new_bucket("lr-rejected");
    let dir = temp_dir("gcs-rejected");
    let stub = Stub::start(
        400,
        r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
    );
    let token_uri = format!("http://{}/token", stub.addr);
    let (key, public) = service_account_key(&dir, &token_uri);
    let mut cmd = leaderrun();
    let url = authenticated(&mut cmd, &bucket, "jobs/k7", server_addr());
    cmd.env("GOOGLE_APPLICATION_CREDENTIALS", &key)
        .args(["--ttl", "2s", "--lease", &url, "--", "true"]);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(
        &out,
        &bucket,
        "jobs/k7",
        &[
            "invalid_grant",
            "Invalid JWT Signature",
            &key.display().to_string(),
        ],
        &["BEGIN PRIVATE KEY", "assertion"],
    );
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 1, "one token request, no retries: {reqs:?}");
    check_jwt_request(&reqs[0], &public, &token_uri);
    let _ = std::fs::remove_dir_all(&dir);
}

const TOKEN: &str = "ya29.leaderrun-test-access-token";
const TOKEN_ANSWER: &str = r#"{"access_token":"ya29.leaderrun-test-access-token","expires_in":3599,"token_type":"Bearer"}"#;

/// Runs `true` under leaderrun through a recording proxy; asserts success,
/// the token on every store request and nowhere in the output.
fn run_authenticated(bucket: &str, object: &str, setup: impl FnOnce(&mut Command)) {
    let recorder = Recorder::start(server_addr());
    let mut cmd = leaderrun();
    let url = authenticated(&mut cmd, bucket, object, recorder.addr);
    setup(&mut cmd);
    cmd.args(["--ttl", "2s", "--once", "--lease", &url, "--", "true"]);
    let out = run(cmd, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert!(!stderr.contains(TOKEN), "the token leaked:\n{stderr}");
    let sent = recorder.text();
    let n = recorder.requests();
    assert!(n >= 3, "load, create, release: {n}\n{sent}");
    assert_eq!(
        sent.to_ascii_lowercase()
            .matches(&format!(
                "authorization: bearer {}\r\n",
                TOKEN.to_ascii_lowercase()
            ))
            .count(),
        n,
        "every request carries the token:\n{sent}"
    );
    let rec = leaderrun::lease::record::Record::decode(&get_raw(bucket, object).unwrap()).unwrap();
    assert!(rec.released, "{rec:?}");
}

#[test]
fn service_account_key_is_used_and_its_token_never_shown() {
    let bucket = new_bucket("lr-sakey");
    let dir = temp_dir("gcs-sakey");
    let stub = Stub::start(200, TOKEN_ANSWER);
    let token_uri = format!("http://{}/token", stub.addr);
    let (key, public) = service_account_key(&dir, &token_uri);
    run_authenticated(&bucket, "jobs/k8", |cmd| {
        cmd.env("GOOGLE_APPLICATION_CREDENTIALS", &key);
    });
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 1, "the token is cached: {reqs:?}");
    check_jwt_request(&reqs[0], &public, &token_uri);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gcloud_authorized_user_file_is_used() {
    let bucket = new_bucket("lr-gcloud");
    let dir = temp_dir("gcs-gcloud");
    let stub = Stub::start(200, TOKEN_ANSWER);
    let refresh = "1//leaderrun-test-refresh-token";
    std::fs::write(
        dir.join("application_default_credentials.json"),
        serde_json::json!({
            "type": "authorized_user",
            "client_id": "leaderrun-test.apps.googleusercontent.com",
            "client_secret": "leaderrun-test-client-secret",
            "refresh_token": refresh,
            "token_uri": format!("http://{}/token", stub.addr),
        })
        .to_string(),
    )
    .unwrap();
    run_authenticated(&bucket, "jobs/k9", |cmd| {
        cmd.env("CLOUDSDK_CONFIG", &dir);
    });
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert!(
        reqs[0].contains("grant_type=refresh_token")
            && reqs[0].contains("refresh_token=1%2F%2Fleaderrun-test-refresh-token"),
        "{}",
        reqs[0]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn metadata_server_is_used_when_nothing_else_is_configured() {
    let bucket = new_bucket("lr-metadata");
    let stub = Stub::start(200, TOKEN_ANSWER);
    run_authenticated(&bucket, "jobs/k10", |cmd| {
        cmd.env("GCE_METADATA_HOST", stub.addr.to_string());
    });
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert!(
        reqs[0].starts_with(
            "GET /computeMetadata/v1/instance/service-accounts/default/token HTTP/1.1\r\n"
        ) && reqs[0]
            .to_ascii_lowercase()
            .contains("metadata-flavor: google"),
        "{}",
        reqs[0]
    );
}

// ------------------------------------------------------------------ outage

/// Wall-clock nanoseconds, the clock of the heartbeat script's `date +%s%N`.
fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// Heartbeat lines "ID TOKEN WALL_NS" as (id, token, ns).
fn beats(path: &Path) -> Vec<(String, u64, i128)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.to_owned(),
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// A leaderrun (ttl 2s) whose command appends "ID TOKEN WALL_NS" to `file`
/// every 50 ms.
fn heartbeat_leader(url: &str, id: &str, file: &Path, log: &Path) -> Child {
    let script = format!(
        "while :; do echo \"$LEADERRUN_ID $LEADERRUN_TOKEN $(date +%s%N)\" >> '{}'; sleep 0.05; done",
        file.display()
    );
    let mut cmd = leaderrun();
    cmd.args([
        "--ttl", "2s", "--id", id, "--lease", url, "--", "sh", "-c", &script,
    ])
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(log).unwrap());
    cmd.spawn().expect("spawn leaderrun")
}

fn wait_for(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool, logs: &[&Path]) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > timeout {
            let mut text = String::new();
            for l in logs {
                text.push_str(&format!(
                    "--- {}:\n{}\n",
                    l.display(),
                    std::fs::read_to_string(l).unwrap_or_default()
                ));
            }
            panic!("timed out after {timeout:?} waiting for {what}\n{text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The leader's store stalls (requests accepted, never answered): its
/// command must stop before its deadline, and before a follower that still
/// reaches the store starts its own.
#[test]
fn stalled_leader_stops_before_a_direct_follower_takes_over() {
    const TTL_NS: i128 = 2_000_000_000;
    let bucket = new_bucket("lr-stall");
    let dir = temp_dir("gcs-stall");
    let file = dir.join("beats");
    let (log_a, log_b) = (dir.join("a.stderr"), dir.join("b.stderr"));
    let logs = [log_a.as_path(), log_b.as_path()];
    let proxy = Recorder::start(server_addr());
    let via_proxy = format!("gs://{bucket}/jobs/stall?endpoint=http://{}", proxy.addr);
    let direct = lease_url(&bucket, "jobs/stall");

    let mut a = Reap(Some(heartbeat_leader(&via_proxy, "a", &file, &log_a)));
    wait_for(
        Duration::from_secs(20),
        "a to lead",
        || beats(&file).iter().any(|b| b.0 == "a"),
        &logs,
    );
    let mut b = Reap(Some(heartbeat_leader(&direct, "b", &file, &log_b)));
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        beats(&file).iter().all(|x| x.0 == "a"),
        "b must follow while a renews"
    );

    proxy.stall();
    let stalled_at = now_ns();
    wait_for(
        Duration::from_secs(20),
        "b to take over",
        || beats(&file).iter().any(|x| x.0 == "b"),
        &logs,
    );
    let all = beats(&file);
    let a_last = all
        .iter()
        .filter(|x| x.0 == "a")
        .map(|x| x.2)
        .max()
        .unwrap();
    let b_first = all
        .iter()
        .filter(|x| x.0 == "b")
        .map(|x| x.2)
        .min()
        .unwrap();
    let b_token = all.iter().find(|x| x.0 == "b").unwrap().1;
    let a_token = all.iter().find(|x| x.0 == "a").unwrap().1;
    eprintln!(
        "store stalled: a's command ran {} ms more, b's started after {} ms (ttl 2000 ms)",
        (a_last - stalled_at) / 1_000_000,
        (b_first - stalled_at) / 1_000_000
    );
    assert!(
        a_last < b_first,
        "overlap: a ran until {a_last}, b started at {b_first}"
    );
    assert!(
        a_last < stalled_at + TTL_NS,
        "a's command outlived its deadline"
    );
    assert!(b_token > a_token, "tokens grow: {a_token} then {b_token}");
    assert_eq!(b.terminate(Duration::from_secs(10)), Some(143));
    assert!(
        a.0.as_mut().unwrap().try_wait().unwrap().is_none(),
        "a keeps campaigning while the store is stalled"
    );
    assert_eq!(a.terminate(Duration::from_secs(10)), Some(143));
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------ doctor

#[test]
fn doctor_passes_on_the_emulator() {
    let bucket = new_bucket("lr-doctor");
    let mut cmd = leaderrun();
    cmd.args(["doctor", "--lease", &lease_url(&bucket, "jobs/doc")]);
    let out = run(cmd, Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("honours conditional writes"), "{stdout}");
    // The probe is gone; the lease object was never written.
    assert_eq!(list(&bucket), Vec::<String>::new());
}

// -------------------------------------------------- measurements (printed)

/// Kills a leaderrun left running by a failed test.
struct Reap(Option<Child>);

impl Reap {
    /// SIGTERM, and the exit status within `timeout`.
    fn terminate(&mut self, timeout: Duration) -> Option<i32> {
        let child = self.0.as_mut().unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(s) = child.try_wait().unwrap() {
                self.0 = None;
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Time from start to the command running, and the requests a leader and a
/// follower make at default settings (ttl 15s), counted by proxies; printed
/// for the README.
#[test]
fn startup_time_and_request_rates() {
    let bucket = new_bucket("lr-measure");
    let dir = temp_dir("gcs-measure");
    let marker = dir.join("started");
    let (pl, pf) = (
        Recorder::start(server_addr()),
        Recorder::start(server_addr()),
    );
    let url = |p: &Recorder| format!("gs://{bucket}/jobs/measure?endpoint=http://{}", p.addr);
    let t0 = Instant::now();
    let mut cmd = leaderrun();
    cmd.args(["--id", "leader", "--lease", &url(&pl), "--", "sh", "-c"])
        .arg(format!("touch '{}'; exec sleep 1000", marker.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut leader = Reap(Some(cmd.spawn().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the command did not start");
        std::thread::sleep(Duration::from_millis(2));
    }
    let startup = t0.elapsed();
    let mut cmd = leaderrun();
    cmd.args(["--id", "follower", "--lease", &url(&pf), "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut follower = Reap(Some(cmd.spawn().unwrap()));
    std::thread::sleep(Duration::from_millis(500));
    let (l0, f0, t) = (pl.requests(), pf.requests(), Instant::now());
    std::thread::sleep(Duration::from_secs(30));
    let secs = t.elapsed().as_secs_f64();
    let per_hour = |n: usize| n as f64 / secs * 3600.0;
    let (l, f) = (pl.requests() - l0, pf.requests() - f0);
    let report = format!(
        "gcs measurements (fake-gcs-server, default settings, ttl 15s): start to command {:.0} ms; leader {l} requests in {secs:.0}s = {:.0}/h; follower {f} = {:.0}/h\n",
        startup.as_secs_f64() * 1e3,
        per_hour(l),
        per_hour(f)
    );
    eprint!("{report}");
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::temp_dir().join("leaderrun-gcs-measurements.txt"))
        .and_then(|mut fh| fh.write_all(report.as_bytes()));
    // Sanity: a leader renews every ttl/3 (5 s), a follower polls every 2 s.
    assert!(
        (4..=8).contains(&l),
        "leader made {l} requests in {secs:.0}s"
    );
    assert!(
        (12..=18).contains(&f),
        "follower made {f} requests in {secs:.0}s"
    );
    assert!(startup < Duration::from_secs(10));
    assert_eq!(follower.terminate(Duration::from_secs(10)), Some(143));
    assert_eq!(leader.terminate(Duration::from_secs(10)), Some(143));
    let _ = std::fs::remove_dir_all(&dir);
}

// --------------------------------------------- five contenders (harness)

#[test]
fn contention_five_gcs_contenders_never_overlap() {
    use harness::{Contention, TestDir};
    let bucket = new_bucket("lr-contention");
    let dir = TestDir::new("contention-gcs");
    let mut c = Contention::new(&lease_url(&bucket, "jobs/contention"));
    c.env = vec![
        ("STORAGE_EMULATOR_HOST".into(), endpoint()),
        (
            "CLOUDSDK_CONFIG".into(),
            "/nonexistent/leaderrun-test/gcloud".into(),
        ),
        (
            "GCE_METADATA_HOST".into(),
            format!("127.0.0.1:{}", closed_port()),
        ),
    ];
    let report = c.run(&dir);
    eprintln!("{}", report.summary());
}
