//! The `s3://` backend against a real S3-compatible server (moto, on
//! loopback, started by `scripts/s3-server.sh start`, which prints the
//! environment these tests need). Every test FAILS when that server is not
//! configured: nothing here is skipped.
//!
//! - the store conformance suite, run on the server;
//! - the real binary's exit status and one-line message for bad credentials,
//!   denied access, a missing bucket, missing credentials, a TLS failure, a
//!   foreign object, and an unreachable endpoint with `--wait`;
//! - `leaderrun doctor`, on the server (passes) and through a proxy that strips
//!   the conditional headers (fails, as on a store that ignores them);
//! - store outages through a TCP proxy (pass / refuse / stall): the leader
//!   stops its command before its deadline, a leader is elected again after;
//! - the five-contender fault test of the shared harness, on `s3://`.
//!
//! Each test uses its own bucket, so they run in parallel.

#![cfg(feature = "s3")]

mod harness;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_s3::primitives::ByteStream;
use leaderrun::backend::Location;
use leaderrun::lease::conformance;
use leaderrun::lease::store::Store;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_leaderrun");
const STORE_UNUSABLE: i32 = 69;

/// Credentials of a user that exists on the test server and may do nothing
/// (see scripts/s3-server.py). A fixture, not a secret.
const DENIED_KEY_ID: &str = "AKIALEADERRUNDENY000";
const DENIED_SECRET: &str = "leaderrun-test-denied-secret-00000000000";

// ---------------------------------------------------------------- fixtures

/// The test server's endpoint; the test fails (with the way to start one)
/// when there is none.
fn endpoint() -> String {
    let hint =
        "run the tests with scripts/test.sh, or first: eval \"$(scripts/s3-server.sh start)\"";
    let e = std::env::var("LEADERRUN_S3_ENDPOINT")
        .unwrap_or_else(|_| panic!("LEADERRUN_S3_ENDPOINT is not set: {hint}"));
    for var in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var} is not set (any value works with the test server): {hint}"
        );
    }
    e
}

fn server_addr() -> SocketAddr {
    let e = endpoint();
    let hostport = e.trim_start_matches("http://").trim_end_matches('/');
    hostport
        .parse()
        .unwrap_or_else(|_| panic!("LEADERRUN_S3_ENDPOINT must be http://IP:PORT, got {e}"))
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

/// A plain client for the test's own setup (buckets, foreign objects).
fn client() -> aws_sdk_s3::Client {
    let creds = aws_sdk_s3::config::Credentials::new("testing", "testing", None, None, "test");
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version_latest()
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(endpoint())
        .force_path_style(true)
        .credentials_provider(creds)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

async fn new_bucket(prefix: &str) -> String {
    let bucket = unique(prefix);
    client()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap_or_else(|e| panic!("create bucket {bucket}: {e:?}"));
    bucket
}

/// Same, for tests that are not async.
fn new_bucket_blocking(prefix: &str) -> String {
    rt().block_on(new_bucket(prefix))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn lease_url(bucket: &str, key: &str) -> String {
    format!(
        "s3://{bucket}/{key}?endpoint={}&region=us-east-1",
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

/// The binary with an environment of its own: test credentials, no profile
/// files, no instance metadata, nothing inherited that could steer it.
fn leaderrun() -> Command {
    let mut c = Command::new(BIN);
    for k in [
        "LEADERRUN_LEASE",
        "LEADERRUN_TOKEN",
        "LEADERRUN_ID",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        c.env_remove(k);
    }
    c.env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/nonexistent/leaderrun-test/config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/leaderrun-test/credentials",
        )
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

/// Asserts exit status 69 and one clear line naming bucket and key.
fn assert_unusable(out: &Output, bucket: &str, key: &str, mentions: &[&str], secret: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(STORE_UNUSABLE),
        "exit status\nstderr:\n{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(bucket) && last.contains(key),
        "the message must name bucket and key: {last}"
    );
    for m in mentions {
        assert!(last.contains(m), "the message must mention {m:?}: {last}");
    }
    assert!(!stderr.contains(secret), "a secret leaked:\n{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
}

// ------------------------------------------------------------- conformance

#[tokio::test]
async fn conformance_create_once() {
    let b = new_bucket("lr-create").await;
    conformance::create_once(open(&lease_url(&b, "jobs/create")).await).await;
}

#[tokio::test]
async fn conformance_stale_version_rejected() {
    let b = new_bucket("lr-stale").await;
    conformance::stale_version_rejected(open(&lease_url(&b, "jobs/stale")).await).await;
}

#[tokio::test]
async fn conformance_replace_missing_is_conflict() {
    let b = new_bucket("lr-missing").await;
    conformance::replace_missing_is_conflict(open(&lease_url(&b, "jobs/missing")).await).await;
}

#[tokio::test]
async fn conformance_race_of_eight_stores() {
    let b = new_bucket("lr-race").await;
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
    let b = new_bucket("lr-foreign").await;
    let key = "jobs/foreign";
    let foreign = b"{\"somebody\": \"else's data\"}\n".to_vec();
    client()
        .put_object()
        .bucket(&b)
        .key(key)
        .body(ByteStream::from(foreign.clone()))
        .send()
        .await
        .unwrap();
    let read_raw = || {
        let (b, key) = (b.clone(), key.to_owned());
        async move {
            let out = client()
                .get_object()
                .bucket(b)
                .key(key)
                .send()
                .await
                .unwrap();
            out.body.collect().await.unwrap().into_bytes().to_vec()
        }
    };
    conformance::foreign_refused(open(&lease_url(&b, key)).await, &foreign, read_raw).await;
}

#[tokio::test]
async fn large_foreign_object_is_refused_without_reading_it() {
    let b = new_bucket("lr-large").await;
    let key = "big";
    client()
        .put_object()
        .bucket(&b)
        .key(key)
        .body(ByteStream::from(vec![b'x'; 200_000]))
        .send()
        .await
        .unwrap();
    let err = open(&lease_url(&b, key)).await.load().await.unwrap_err();
    assert!(
        err.to_string().contains("not a leaderrun lease record"),
        "{err}"
    );
}

#[tokio::test]
async fn records_round_trip_and_describe_is_redacted() {
    let b = new_bucket("lr-describe").await;
    let store = open(&lease_url(&b, "k")).await;
    assert_eq!(
        store.describe(),
        format!("s3://{b}/k?endpoint={}&region=us-east-1", endpoint())
    );
    let rec = leaderrun::lease::record::Record::first("me", "n1", 1000);
    let v = store.create(&rec).await.unwrap();
    let got = store.load().await.unwrap().unwrap();
    assert_eq!((got.record, got.version), (rec, v));
}

// ------------------------------------------------------- errors, via binary

#[test]
fn missing_bucket_exits_69_naming_bucket_and_key() {
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
    assert_unusable(
        &out,
        &bucket,
        "jobs/k1",
        &["NoSuchBucket"],
        "testing-nothing",
    );
}

#[test]
fn invalid_access_key_exits_69_without_the_secret() {
    // "authcheck-" buckets are served with IAM authentication on.
    let bucket = unique("authcheck-badkey");
    let secret = "wJalrXUtnFEMI-leaderrun-not-a-real-secret";
    let mut cmd = leaderrun();
    cmd.args([
        "--ttl",
        "2s",
        "--lease",
        &lease_url(&bucket, "jobs/k2"),
        "--",
        "true",
    ])
    .env("AWS_ACCESS_KEY_ID", "AKIALEADERRUNBADKEY0")
    .env("AWS_SECRET_ACCESS_KEY", secret);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(&out, &bucket, "jobs/k2", &["InvalidAccessKeyId"], secret);
}

#[test]
fn wrong_secret_exits_69_without_the_secret() {
    let bucket = unique("authcheck-badsig");
    let secret = "leaderrun-wrong-secret-for-a-real-key-0000";
    let mut cmd = leaderrun();
    cmd.args([
        "--ttl",
        "2s",
        "--lease",
        &lease_url(&bucket, "jobs/k3"),
        "--",
        "true",
    ])
    .env("AWS_ACCESS_KEY_ID", DENIED_KEY_ID)
    .env("AWS_SECRET_ACCESS_KEY", secret);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(&out, &bucket, "jobs/k3", &["SignatureDoesNotMatch"], secret);
}

#[test]
fn access_denied_exits_69_and_says_which_permissions() {
    let bucket = unique("authcheck-denied");
    let mut cmd = leaderrun();
    cmd.args([
        "--ttl",
        "2s",
        "--lease",
        &lease_url(&bucket, "jobs/k4"),
        "--",
        "true",
    ])
    .env("AWS_ACCESS_KEY_ID", DENIED_KEY_ID)
    .env("AWS_SECRET_ACCESS_KEY", DENIED_SECRET);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(
        &out,
        &bucket,
        "jobs/k4",
        &["AccessDenied", "s3:GetObject", "s3:PutObject"],
        DENIED_SECRET,
    );
}

#[test]
fn missing_credentials_exit_69() {
    let bucket = new_bucket_blocking("lr-nocreds");
    let mut cmd = leaderrun();
    cmd.args([
        "--ttl",
        "2s",
        "--lease",
        &lease_url(&bucket, "jobs/k5"),
        "--",
        "true",
    ])
    .env_remove("AWS_ACCESS_KEY_ID")
    .env_remove("AWS_SECRET_ACCESS_KEY");
    let out = run(cmd, Duration::from_secs(30));
    assert_unusable(&out, &bucket, "jobs/k5", &["no AWS credentials"], "testing");
}

#[test]
fn tls_failure_exits_69() {
    // https:// to the plain-HTTP test server: the TLS handshake fails.
    let bucket = new_bucket_blocking("lr-tls");
    let url = format!(
        "s3://{bucket}/jobs/k6?endpoint=https://{}&region=us-east-1",
        server_addr()
    );
    let mut cmd = leaderrun();
    cmd.args(["--ttl", "2s", "--lease", &url, "--", "true"]);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(&out, &bucket, "jobs/k6", &["TLS"], "testing-nothing");
}

#[test]
fn foreign_object_exits_69_and_is_left_alone() {
    let bucket = new_bucket_blocking("lr-foreignbin");
    let data = b"#!/bin/sh\necho somebody else's script\n".to_vec();
    rt().block_on(async {
        client()
            .put_object()
            .bucket(&bucket)
            .key("jobs/k7")
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .unwrap()
    });
    let mut cmd = leaderrun();
    cmd.args([
        "--ttl",
        "2s",
        "--lease",
        &lease_url(&bucket, "jobs/k7"),
        "--",
        "true",
    ]);
    let out = run(cmd, Duration::from_secs(20));
    assert_unusable(
        &out,
        &bucket,
        "jobs/k7",
        &["not a leaderrun lease record"],
        "testing-nothing",
    );
    let now = rt().block_on(async {
        let o = client()
            .get_object()
            .bucket(&bucket)
            .key("jobs/k7")
            .send()
            .await
            .unwrap();
        o.body.collect().await.unwrap().into_bytes().to_vec()
    });
    assert_eq!(now, data);
}

#[test]
fn unreachable_endpoint_gives_up_after_wait_with_69() {
    // A loopback port nobody listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url =
        format!("s3://lr-unreachable/jobs/k8?endpoint=http://127.0.0.1:{port}&region=us-east-1");
    let mut cmd = leaderrun();
    cmd.args(["--ttl", "2s", "--wait", "2s", "--lease", &url, "--", "true"]);
    let out = run(cmd, Duration::from_secs(30));
    assert_unusable(&out, "lr-unreachable", "jobs/k8", &[], "testing-nothing");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot reach the store"), "{stderr}");
}

// ------------------------------------------------------------------ doctor

#[test]
fn doctor_passes_on_the_test_server() {
    let bucket = new_bucket_blocking("lr-doctor");
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
    // The probe is gone; the lease key was never written.
    rt().block_on(async {
        let list = client()
            .list_objects_v2()
            .bucket(&bucket)
            .send()
            .await
            .unwrap();
        assert_eq!(list.key_count(), Some(0), "{list:?}");
    });
}

#[test]
fn doctor_fails_on_a_store_that_ignores_conditional_headers() {
    let bucket = new_bucket_blocking("lr-doctorbad");
    let proxy = Proxy::start(server_addr());
    proxy.set(Mode::StripConditions);
    let url = format!(
        "s3://{bucket}/jobs/doc?endpoint=http://{}&region=us-east-1",
        proxy.addr
    );
    let mut cmd = leaderrun();
    cmd.args(["doctor", "--lease", &url]);
    let out = run(cmd, Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(STORE_UNUSABLE),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("FAIL"), "{stdout}");
    assert!(
        stderr.contains("does not honour conditional writes"),
        "{stderr}"
    );
}

// ----------------------------------------------------------------- outages

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Mode {
    /// Forward both ways.
    Pass = 0,
    /// Not listening: connections are refused.
    Refuse = 1,
    /// Accept and read, never answer.
    Stall = 2,
    /// Forward, without If-Match / If-None-Match request headers: a store
    /// that silently ignores conditional writes.
    StripConditions = 3,
}

impl Mode {
    fn from_u8(v: u8) -> Mode {
        match v {
            0 => Mode::Pass,
            1 => Mode::Refuse,
            2 => Mode::Stall,
            _ => Mode::StripConditions,
        }
    }
}

/// A loopback TCP proxy in front of the test server, on its own thread and
/// runtime. Counts the connections it accepts (the test server closes each
/// connection after one request, so these are requests).
struct Proxy {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(Mode::Pass as u8));
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (mode, accepted, stop) = (mode.clone(), accepted.clone(), stop.clone());
            std::thread::spawn(move || {
                rt().block_on(serve(listener, addr, upstream, mode, accepted, stop))
            })
        };
        Proxy {
            addr,
            mode,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: Arc<AtomicU8>,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    listener.set_nonblocking(true).unwrap();
    let mut listener = Some(tokio::net::TcpListener::from_std(listener).unwrap());
    while !stop.load(Ordering::SeqCst) {
        let m = Mode::from_u8(mode.load(Ordering::SeqCst));
        if m == Mode::Refuse {
            listener = None;
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        if listener.is_none() {
            // Listen again on the same port.
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => listener = Some(l),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let l = listener.as_ref().unwrap();
        let Ok(Ok((conn, _))) = tokio::time::timeout(Duration::from_millis(10), l.accept()).await
        else {
            continue;
        };
        accepted.fetch_add(1, Ordering::SeqCst);
        let stop = stop.clone();
        tokio::spawn(async move {
            let _ = handle(conn, upstream, m, stop).await;
        });
    }
}

async fn handle(
    mut conn: tokio::net::TcpStream,
    upstream: SocketAddr,
    mode: Mode,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    match mode {
        Mode::Refuse => Ok(()),
        Mode::Stall => {
            // Swallow the request and never answer, until the client gives up.
            let mut buf = [0u8; 4096];
            while !stop.load(Ordering::SeqCst) {
                match tokio::time::timeout(Duration::from_millis(50), conn.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    _ => {}
                }
            }
            Ok(())
        }
        Mode::Pass => {
            let mut up = tokio::net::TcpStream::connect(upstream).await?;
            tokio::io::copy_bidirectional(&mut conn, &mut up).await?;
            Ok(())
        }
        Mode::StripConditions => {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            let end = loop {
                let n = conn.read(&mut buf).await?;
                if n == 0 {
                    return Ok(());
                }
                head.extend_from_slice(&buf[..n]);
                if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
            };
            let text = String::from_utf8_lossy(&head[..end]).into_owned();
            let kept: String = text
                .split_inclusive("\r\n")
                .filter(|line| {
                    let l = line.to_ascii_lowercase();
                    !(l.starts_with("if-match:") || l.starts_with("if-none-match:"))
                })
                .collect();
            let mut up = tokio::net::TcpStream::connect(upstream).await?;
            up.write_all(kept.as_bytes()).await?;
            up.write_all(&head[end..]).await?;
            tokio::io::copy_bidirectional(&mut conn, &mut up).await?;
            Ok(())
        }
    }
}

/// Wall-clock nanoseconds, the clock of the heartbeat script's `date +%s%N`.
fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// One heartbeat line: who, which token, when.
#[derive(Debug, Clone)]
struct Beat {
    id: String,
    token: u64,
    ns: i128,
}

fn beats(path: &Path) -> Vec<Beat> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some(Beat {
                id: f.next()?.to_owned(),
                token: f.next()?.parse().ok()?,
                ns: f.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// A leaderrun whose command appends "ID TOKEN WALL_NS" to `file` every 50 ms.
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

/// Kills a leaderrun left running by a failed test.
struct Reap(Option<Child>);

impl Reap {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().unwrap()
    }

    /// SIGTERM, and the exit status within `timeout`.
    fn terminate(&mut self, timeout: Duration) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child().id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(s) = self.child().try_wait().unwrap() {
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

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir()
        .join("leaderrun-tests")
        .join(unique(name));
    std::fs::create_dir_all(&d).unwrap();
    d
}

const TTL_NS: i128 = 2_000_000_000;

#[test]
fn outage_stops_the_command_before_the_deadline_and_recovers() {
    let bucket = new_bucket_blocking("lr-outage");
    let dir = temp_dir("s3-outage");
    let (file, log) = (dir.join("beats"), dir.join("leader.stderr"));
    let proxy = Proxy::start(server_addr());
    let url = format!(
        "s3://{bucket}/jobs/outage?endpoint=http://{}&region=us-east-1",
        proxy.addr
    );
    let mut leader = Reap(Some(heartbeat_leader(&url, "solo", &file, &log)));
    let logs = [log.as_path()];
    wait_for(
        Duration::from_secs(20),
        "the command to run",
        || beats(&file).iter().any(|b| b.token == 1),
        &logs,
    );
    std::thread::sleep(Duration::from_millis(1500));

    // Stalled store: requests are accepted and never answered.
    proxy.set(Mode::Stall);
    let stalled_at = now_ns();
    std::thread::sleep(Duration::from_millis(3000));
    let last = beats(&file).last().unwrap().clone();
    assert_eq!(last.token, 1);
    eprintln!(
        "store stalled: last heartbeat {} ms after the stall (ttl 2000 ms)",
        (last.ns - stalled_at) / 1_000_000
    );
    assert!(
        last.ns < stalled_at + TTL_NS,
        "the command ran {} ms after the store stalled (ttl 2s): a stalled renewal held it past the deadline\n{}",
        (last.ns - stalled_at) / 1_000_000,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        leader.child().try_wait().unwrap().is_none(),
        "leaderrun must keep campaigning, not exit\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // Refused connections: still nothing runs.
    proxy.set(Mode::Refuse);
    std::thread::sleep(Duration::from_millis(2000));
    let count = beats(&file).len();
    assert!(
        beats(&file).iter().all(|b| b.ns < stalled_at + TTL_NS),
        "the command ran during the outage"
    );

    // The store is back: a leader is elected again and the command runs again.
    proxy.set(Mode::Pass);
    let back_at = now_ns();
    wait_for(
        Duration::from_secs(20),
        "the command to run again after the outage",
        || beats(&file).iter().any(|b| b.token >= 2),
        &logs,
    );
    let again = beats(&file);
    let first_new = again.iter().find(|b| b.token >= 2).unwrap();
    assert!(first_new.ns > back_at);
    assert!(again.len() > count);
    assert_eq!(leader.terminate(Duration::from_secs(10)), Some(143));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stalled_leader_stops_before_a_direct_follower_takes_over() {
    let bucket = new_bucket_blocking("lr-takeover");
    let dir = temp_dir("s3-takeover");
    let file = dir.join("beats");
    let (log_a, log_b) = (dir.join("a.stderr"), dir.join("b.stderr"));
    let logs = [log_a.as_path(), log_b.as_path()];
    let proxy = Proxy::start(server_addr());
    let via_proxy = format!(
        "s3://{bucket}/jobs/takeover?endpoint=http://{}&region=us-east-1",
        proxy.addr
    );
    let direct = lease_url(&bucket, "jobs/takeover");

    let mut a = Reap(Some(heartbeat_leader(&via_proxy, "a", &file, &log_a)));
    wait_for(
        Duration::from_secs(20),
        "a to lead",
        || beats(&file).iter().any(|b| b.id == "a"),
        &logs,
    );
    let mut b = Reap(Some(heartbeat_leader(&direct, "b", &file, &log_b)));
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        beats(&file).iter().all(|x| x.id == "a"),
        "b must follow while a renews"
    );

    proxy.set(Mode::Stall);
    let stalled_at = now_ns();
    wait_for(
        Duration::from_secs(20),
        "b to take over",
        || beats(&file).iter().any(|x| x.id == "b"),
        &logs,
    );
    let all = beats(&file);
    let a_last = all
        .iter()
        .filter(|x| x.id == "a")
        .map(|x| x.ns)
        .max()
        .unwrap();
    let b_first = all
        .iter()
        .filter(|x| x.id == "b")
        .map(|x| x.ns)
        .min()
        .unwrap();
    assert!(
        a_last < b_first,
        "overlap: a's command ran until {a_last}, b's started at {b_first}"
    );
    assert!(
        a_last < stalled_at + TTL_NS,
        "a's command outlived its deadline"
    );

    // Back online, a follows b; when b hands over, a leads again.
    proxy.set(Mode::Pass);
    std::thread::sleep(Duration::from_millis(2500));
    let b_token = all.iter().find(|x| x.id == "b").unwrap().token;
    assert_eq!(b.terminate(Duration::from_secs(10)), Some(143));
    wait_for(
        Duration::from_secs(20),
        "a to lead again",
        || {
            beats(&file)
                .iter()
                .any(|x| x.id == "a" && x.token > b_token)
        },
        &logs,
    );
    assert_eq!(a.terminate(Duration::from_secs(10)), Some(143));

    // Over the whole run: terms in token order, never overlapping.
    let all = beats(&file);
    let mut terms: Vec<(u64, i128, i128)> = Vec::new();
    for x in &all {
        match terms.iter_mut().find(|t| t.0 == x.token) {
            Some(t) => {
                t.1 = t.1.min(x.ns);
                t.2 = t.2.max(x.ns);
            }
            None => terms.push((x.token, x.ns, x.ns)),
        }
    }
    terms.sort();
    for w in terms.windows(2) {
        assert!(w[0].2 < w[1].1, "terms overlap: {w:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// -------------------------------------------------- measurements (printed)

/// Time from start to the command running, and the requests a leader and a
/// follower make, measured through proxies; printed for the README.
#[test]
fn startup_time_and_request_rates() {
    let bucket = new_bucket_blocking("lr-measure");
    let dir = temp_dir("s3-measure");
    let marker = dir.join("started");
    let (pl, pf) = (Proxy::start(server_addr()), Proxy::start(server_addr()));
    let url = |p: &Proxy| {
        format!(
            "s3://{bucket}/jobs/measure?endpoint=http://{}&region=us-east-1",
            p.addr
        )
    };
    let t0 = Instant::now();
    let mut cmd = leaderrun();
    cmd.args(["--id", "leader", "--lease", &url(&pl), "--", "sh", "-c"])
        .arg(format!("touch '{}'; exec sleep 1000", marker.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut leader = Reap(Some(cmd.spawn().unwrap()));
    wait_for(
        Duration::from_secs(20),
        "the command",
        || marker.exists(),
        &[],
    );
    let startup = t0.elapsed();
    let mut cmd = leaderrun();
    cmd.args(["--id", "follower", "--lease", &url(&pf), "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut follower = Reap(Some(cmd.spawn().unwrap()));
    std::thread::sleep(Duration::from_millis(500));
    let (l0, f0, t) = (pl.accepted(), pf.accepted(), Instant::now());
    std::thread::sleep(Duration::from_secs(20));
    let secs = t.elapsed().as_secs_f64();
    let per_hour = |n: usize| n as f64 / secs * 3600.0;
    let (l, f) = (pl.accepted() - l0, pf.accepted() - f0);
    let report = format!(
        "s3 measurements (default settings, ttl 15s): start to command {:.0} ms; leader {l} requests in {secs:.0}s = {:.0}/h; follower {f} = {:.0}/h\n",
        startup.as_secs_f64() * 1e3,
        per_hour(l),
        per_hour(f)
    );
    eprint!("{report}");
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::temp_dir().join("leaderrun-s3-measurements.txt"))
        .and_then(|mut fh| fh.write_all(report.as_bytes()));
    // Sanity: a leader renews every ttl/3 (5 s), a follower polls every 2 s.
    assert!(
        (2..=6).contains(&l),
        "leader made {l} requests in {secs:.0}s"
    );
    assert!(
        (6..=14).contains(&f),
        "follower made {f} requests in {secs:.0}s"
    );
    assert!(startup < Duration::from_secs(10));
    assert_eq!(follower.terminate(Duration::from_secs(10)), Some(143));
    assert_eq!(leader.terminate(Duration::from_secs(10)), Some(143));
    let _ = std::fs::remove_dir_all(&dir);
}

// --------------------------------------------- five contenders (harness)

#[test]
fn contention_five_contenders_on_an_s3_lease_never_overlap() {
    use harness::{Contention, TestDir};
    let bucket = new_bucket_blocking("lr-contention");
    let dir = TestDir::new("contention-s3");
    let mut c = Contention::new(&lease_url(&bucket, "jobs/contention"));
    c.env = vec![
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        (
            "AWS_CONFIG_FILE".into(),
            "/nonexistent/leaderrun-test/config".into(),
        ),
        (
            "AWS_SHARED_CREDENTIALS_FILE".into(),
            "/nonexistent/leaderrun-test/credentials".into(),
        ),
    ];
    let report = c.run(&dir);
    eprintln!("{}", report.summary());
}
