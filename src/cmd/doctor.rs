//! `leaderrun doctor`: does this store honour conditional writes?
//!
//! Some S3-compatible stores silently ignore `If-None-Match` / `If-Match`;
//! on such a store two leaders are possible. The check runs on a probe key
//! beside the lease, never on the lease itself.

use std::time::Duration;

use tokio::time::Instant;

use crate::cli::DoctorArgs;
use crate::config::resolve_location;
use crate::exit::{self, Exit};
use crate::lease::record::{Record, new_nonce};
use crate::lease::store::{Store, StoreError};

pub async fn run(args: DoctorArgs) -> anyhow::Result<u8> {
    let location = resolve_location(&args.lease, None).map_err(|e| Exit::new(exit::USAGE, e))?;
    let shown = location.redacted();
    let unusable = |e: StoreError| Exit::new(exit::STORE_UNUSABLE, format!("{shown}: {e}"));
    let lease = location.open().await.map_err(unusable)?;
    println!("lease:  {shown}");
    match lease.load().await {
        Ok(None) => println!("record: none yet"),
        Ok(Some(s)) => println!(
            "record: {} by {} (token {})",
            if s.record.released {
                "released"
            } else {
                "held"
            },
            s.record.holder,
            s.record.token
        ),
        Err(e) => println!("record: {e}"),
    }
    let probe_location = location.probe();
    let probe = probe_location.open().await.map_err(unusable)?;
    println!("probe:  {}", probe_location.redacted());
    let failures = check(probe.as_ref()).await.map_err(unusable)?;
    if failures == 0 {
        println!("result: ok: this store honours conditional writes");
        Ok(0)
    } else {
        Err(Exit::new(
            exit::STORE_UNUSABLE,
            format!("{shown}: {failures} check(s) failed: this store does not honour conditional writes; do not use it for leases"),
        )
        .into())
    }
}

/// Runs the checks on `probe`, printing one line each; returns how many failed.
async fn check(probe: &dyn Store) -> Result<usize, StoreError> {
    // A probe left behind by an interrupted run is ours to clean up.
    if let Some(old) = probe.load().await? {
        let _ = probe.remove(&old.version).await;
    }
    let mut failures = 0;
    let mut report = |name: &str, ok: bool, took: Duration, detail: String| {
        println!(
            "{} {name:<38} {:>8.1} ms  {detail}",
            if ok { "ok  " } else { "FAIL" },
            took.as_secs_f64() * 1e3
        );
        if !ok {
            failures += 1;
        }
    };
    let a = Record::first("leaderrun-doctor", &new_nonce(), 1_000);
    let t = Instant::now();
    let v1 = probe.create(&a).await?;
    report("create if absent", true, t.elapsed(), String::new());

    let t = Instant::now();
    let r = probe
        .create(&Record::first("leaderrun-doctor-2", &new_nonce(), 1_000))
        .await;
    report(
        "second create is rejected",
        matches!(r, Err(StoreError::Conflict(_))),
        t.elapsed(),
        outcome(&r),
    );

    let t = Instant::now();
    let b = a.renewed();
    let v2 = probe.replace(&v1, &b).await?;
    report(
        "replace with current version",
        true,
        t.elapsed(),
        String::new(),
    );

    let t = Instant::now();
    let r = probe.replace(&v1, &b.renewed()).await;
    report(
        "replace with stale version is rejected",
        matches!(r, Err(StoreError::Conflict(_))),
        t.elapsed(),
        outcome(&r),
    );

    let t = Instant::now();
    let now = probe.load().await?;
    let intact = now
        .as_ref()
        .is_some_and(|s| s.record == b && s.version == v2);
    report(
        "record is the last accepted write",
        intact,
        t.elapsed(),
        String::new(),
    );

    let t = Instant::now();
    let cleaned = match now {
        Some(s) => probe.remove(&s.version).await,
        None => Ok(()),
    };
    report(
        "probe removed",
        cleaned.is_ok(),
        t.elapsed(),
        outcome(&cleaned),
    );
    Ok(failures)
}

fn outcome<T>(r: &Result<T, StoreError>) -> String {
    match r {
        Ok(_) => "(accepted)".into(),
        Err(e) => format!("({e})"),
    }
}
