//! The store conformance suite: the same compare-and-swap checks for every
//! backend, run by each backend's tests against its real server (and by the
//! unit tests against the in-memory store).
//!
//! Each check takes a *fresh, empty* lease location from the caller, so that
//! backends can run the checks in parallel on distinct keys.

use std::sync::Arc;

use super::record::{Record, new_nonce};
use super::store::{Store, StoreError};

fn record(holder: &str) -> Record {
    Record::first(holder, &new_nonce(), 10_000)
}

/// Create succeeds once; a second create is a conflict; load returns what was
/// written under the version create returned.
pub async fn create_once(store: Arc<dyn Store>) {
    assert_eq!(
        store.load().await.unwrap(),
        None,
        "fresh location must be empty"
    );
    let a = record("a");
    let v = store.create(&a).await.expect("first create succeeds");
    let err = store
        .create(&record("b"))
        .await
        .expect_err("second create must fail");
    assert!(
        matches!(err, StoreError::Conflict(_)),
        "second create: {err:?}"
    );
    let got = store.load().await.unwrap().expect("record is there");
    assert_eq!(got.record, a);
    assert_eq!(got.version, v);
}

/// Replace with the current version succeeds; with a stale one it is a
/// conflict and changes nothing.
pub async fn stale_version_rejected(store: Arc<dyn Store>) {
    let a = record("a");
    let v1 = store.create(&a).await.unwrap();
    let b = a.renewed();
    let v2 = store
        .replace(&v1, &b)
        .await
        .expect("replace with current version");
    assert_ne!(v1, v2, "a write must change the version");
    let err = store
        .replace(&v1, &b.renewed())
        .await
        .expect_err("stale replace must fail");
    assert!(
        matches!(err, StoreError::Conflict(_)),
        "stale replace: {err:?}"
    );
    let got = store.load().await.unwrap().unwrap();
    assert_eq!((got.record, got.version), (b, v2));
}

/// Replacing a record that does not exist is a conflict, and creates nothing.
pub async fn replace_missing_is_conflict(store: Arc<dyn Store>) {
    let a = record("a");
    let v = store.create(&a).await.unwrap();
    store.remove(&v).await.expect("remove with current version");
    let err = store
        .replace(&v, &a.renewed())
        .await
        .expect_err("replace of a vanished record");
    assert!(
        matches!(err, StoreError::Conflict(_)),
        "replace of vanished: {err:?}"
    );
    assert_eq!(store.load().await.unwrap(), None);
}

/// `n` writers race to create, then `n` writers race to replace the same
/// version: exactly one wins each race, every loser sees a conflict.
pub async fn race(stores: Vec<Arc<dyn Store>>) {
    let n = stores.len();
    assert!(n >= 2);
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = s.clone();
            tokio::spawn(async move { s.create(&record(&format!("c{i}"))).await })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(StoreError::Conflict(_)) => {}
            Err(e) => panic!("create race: unexpected {e:?}"),
        }
    }
    assert_eq!(wins, 1, "exactly one of {n} creates may win");

    let current = stores[0].load().await.unwrap().unwrap();
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = s.clone();
            let cur = current.clone();
            tokio::spawn(async move {
                let next = cur
                    .record
                    .acquired_by(&format!("r{i}"), &new_nonce(), 10_000);
                s.replace(&cur.version, &next).await.map(|_| next)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(rec) => winners.push(rec),
            Err(StoreError::Conflict(_)) => {}
            Err(e) => panic!("replace race: unexpected {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one of {n} replaces may win");
    assert_eq!(stores[0].load().await.unwrap().unwrap().record, winners[0]);
}

/// Bytes that are not a lease record are refused by every operation and left
/// exactly as they were. The caller has put `foreign` at the location and
/// passes a function that reads the raw bytes back.
pub async fn foreign_refused<F, Fut>(store: Arc<dyn Store>, foreign: &[u8], read_raw: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Vec<u8>>,
{
    let err = store.load().await.expect_err("load of a foreign object");
    assert!(matches!(err, StoreError::Fatal(_)), "load: {err:?}");
    assert!(
        err.to_string().contains("not a leaderrun lease record"),
        "{err}"
    );
    let err = store
        .create(&record("a"))
        .await
        .expect_err("create over a foreign object");
    assert!(
        !matches!(err, StoreError::Unavailable(_)),
        "create: {err:?}"
    );
    assert_eq!(
        read_raw().await,
        foreign,
        "foreign object must be untouched"
    );
}
