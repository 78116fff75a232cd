//! `leaderrun release`: hand a lease back, or break it with `--force`.

use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::cli::ReleaseArgs;
use crate::config::{resolve_location, show};
use crate::exit::{self, Exit};
use crate::lease::record::{Record, new_nonce};
use crate::lease::store::{Store, StoreError};
use crate::log;

pub async fn run(args: ReleaseArgs) -> anyhow::Result<u8> {
    let location = resolve_location(&args.lease, None).map_err(|e| Exit::new(exit::USAGE, e))?;
    let shown = location.redacted();
    let unusable = |e: StoreError| Exit::new(exit::STORE_UNUSABLE, format!("{shown}: {e}"));
    let store = location.open().await.map_err(unusable)?;
    // A few rounds: a conflict means the record moved under us; look again.
    for _ in 0..5 {
        let Some(current) = store.load().await.map_err(unusable)? else {
            log::info(
                "released",
                &format!("no lease at {shown}; nothing to release"),
            );
            return Ok(0);
        };
        if current.record.released {
            log::info(
                "released",
                &format!(
                    "{shown} is already released (token {})",
                    current.record.token
                ),
            );
            return Ok(0);
        }
        if !args.force {
            let ttl = Duration::from_millis(current.record.ttl_ms);
            log::info(
                "confirming",
                &format!(
                    "{shown} is held by {} (token {}); waiting {} to confirm the holder is gone",
                    current.record.holder,
                    current.record.token,
                    show(ttl)
                ),
            );
            if !unchanged_for(store.as_ref(), &current.version, ttl)
                .await
                .map_err(unusable)?
            {
                let now = store.load().await.map_err(unusable)?;
                if now.as_ref().is_none_or(|s| s.record.released) {
                    continue;
                }
                return Err(Exit::new(
                    exit::NOT_LEADER,
                    format!(
                        "{shown} is held by a live holder ({}); stop it, or break the lease with --force",
                        now.map(|s| s.record.holder).unwrap_or_default()
                    ),
                )
                .into());
            }
        }
        // A fresh nonce: the holder tells its own writes from others' by
        // nonce and serial, and must not mistake this one for its renewal
        // (which would carry the same serial) and write over it.
        let released = Record {
            nonce: new_nonce(),
            ..current.record.released()
        };
        match store.replace(&current.version, &released).await {
            Ok(_) => {
                log::info(
                    "released",
                    &format!(
                        "released {shown} (was held by {}, token {} kept){}",
                        current.record.holder,
                        current.record.token,
                        if args.force {
                            "; a live holder stops its command at its next renewal"
                        } else {
                            ""
                        }
                    ),
                );
                return Ok(0);
            }
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(unusable(e).into()),
        }
    }
    Err(Exit::new(
        exit::STORE_UNUSABLE,
        format!("{shown}: the record kept changing; try again"),
    )
    .into())
}

/// Whether the record keeps `version` for `ttl` on this host's monotonic clock.
async fn unchanged_for(
    store: &dyn Store,
    version: &crate::lease::store::Version,
    ttl: Duration,
) -> Result<bool, StoreError> {
    let until = Instant::now() + ttl;
    let poll = (ttl / 4).min(Duration::from_secs(1));
    while Instant::now() < until {
        sleep(poll.min(until - Instant::now())).await;
        match store.load().await? {
            Some(s) if &s.version == version => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}
