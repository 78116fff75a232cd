//! The store conformance suite against the file backend, plus what only a
//! file can show: the bytes of a foreign file stay exactly as they were.

use std::path::PathBuf;
use std::sync::Arc;

use leaderrun::backend::Location;
use leaderrun::lease::conformance;
use leaderrun::lease::store::Store;

fn fresh(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "leaderrun-file-store-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lease");
    (dir, path)
}

async fn open(path: &std::path::Path) -> Arc<dyn Store> {
    Location::parse(&format!("file://{}", path.display()))
        .unwrap()
        .open()
        .await
        .unwrap()
}

#[tokio::test]
async fn create_once() {
    let (_d, p) = fresh("create");
    conformance::create_once(open(&p).await).await;
}

#[tokio::test]
async fn stale_version_rejected() {
    let (_d, p) = fresh("stale");
    conformance::stale_version_rejected(open(&p).await).await;
}

#[tokio::test]
async fn replace_missing_is_conflict() {
    let (_d, p) = fresh("missing");
    conformance::replace_missing_is_conflict(open(&p).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_has_exactly_one_winner() {
    for round in 0..5 {
        let (_d, p) = fresh(&format!("race{round}"));
        let mut stores = Vec::new();
        for _ in 0..8 {
            stores.push(open(&p).await);
        }
        conformance::race(stores).await;
    }
}

#[tokio::test]
async fn foreign_file_is_refused_and_untouched() {
    let (_d, p) = fresh("foreign");
    let foreign = b"important: not a lease\n\x00\xff".to_vec();
    std::fs::write(&p, &foreign).unwrap();
    let path = p.clone();
    conformance::foreign_refused(open(&p).await, &foreign, || {
        let path = path.clone();
        async move { std::fs::read(&path).unwrap() }
    })
    .await;
}

#[tokio::test]
async fn missing_directory_is_fatal() {
    let store = open(std::path::Path::new("/nonexistent-leaderrun-dir/lease")).await;
    let err = store.load().await.unwrap_err();
    assert!(
        matches!(err, leaderrun::lease::store::StoreError::Fatal(_)),
        "{err:?}"
    );
}

#[test]
fn bad_file_urls_are_rejected() {
    for bad in [
        "file://host/path",
        "file:///",
        "file:///dir/",
        "file:///x?mode=1",
    ] {
        assert!(Location::parse(bad).is_err(), "{bad} should be rejected");
    }
}
