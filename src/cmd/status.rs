//! `leaderrun status`: who holds a lease, its token, its age.

use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::backend::Location;
use crate::backend::file::FileLocation;
use crate::cli::StatusArgs;
use crate::config::{default_dir, resolve_location, show};
use crate::exit::{self, Exit};
use crate::lease::store::Stored;

pub async fn run(args: StatusArgs) -> anyhow::Result<u8> {
    let locations = if args.lease.lease.is_none() && args.lease.name.is_none() {
        local_leases()?
    } else {
        vec![resolve_location(&args.lease, None).map_err(|e| Exit::new(exit::USAGE, e))?]
    };
    if locations.is_empty() && !args.json {
        println!("no local leases under {}", default_dir().display());
    }
    for location in locations {
        let shown = location.redacted();
        let store = location
            .open()
            .await
            .map_err(|e| Exit::new(exit::STORE_UNUSABLE, format!("{shown}: {e}")))?;
        let stored = store
            .load()
            .await
            .map_err(|e| Exit::new(exit::STORE_UNUSABLE, format!("{shown}: {e}")))?;
        if args.json {
            println!("{}", to_json(&shown, stored.as_ref()));
        } else {
            print!("{}", to_text(&shown, stored.as_ref()));
        }
    }
    Ok(0)
}

/// Every `*.lease` file in the default directory.
fn local_leases() -> anyhow::Result<Vec<Location>> {
    let dir = default_dir();
    let mut found = Vec::new();
    match std::fs::read_dir(&dir) {
        Ok(entries) => {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "lease") {
                    found.push(Location::File(FileLocation { path }));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Exit::new(
                exit::STORE_UNUSABLE,
                format!("cannot list {}: {e}", dir.display()),
            )
            .into());
        }
    }
    found.sort_by_key(|l| l.redacted());
    Ok(found)
}

/// Age of a record by this host's wall clock against the holder's: for
/// humans only, since the two clocks may disagree.
fn wall_age(renewed_at: &str) -> Option<Duration> {
    let then = humantime::parse_rfc3339_weak(renewed_at).ok()?;
    SystemTime::now().duration_since(then).ok()
}

fn to_json(lease: &str, stored: Option<&Stored>) -> serde_json::Value {
    match stored {
        None => json!({ "lease": lease, "exists": false }),
        Some(s) => {
            let r = &s.record;
            json!({
                "lease": lease,
                "exists": true,
                "state": if r.released { "released" } else { "held" },
                "holder": r.holder,
                "token": r.token,
                "ttl_ms": r.ttl_ms,
                "acquired_at": r.acquired_at,
                "renewed_at": r.renewed_at,
                "wall_age_ms": wall_age(&r.renewed_at).map(|d| d.as_millis() as u64),
                "version": s.version.0,
            })
        }
    }
}

fn to_text(lease: &str, stored: Option<&Stored>) -> String {
    match stored {
        None => format!("lease:    {lease}\nstate:    none (never acquired)\n"),
        Some(s) => {
            let r = &s.record;
            let age = match wall_age(&r.renewed_at) {
                Some(d) => format!(" ({} ago by wall clocks; hosts may disagree)", show(d)),
                None => String::new(),
            };
            format!(
                "lease:    {lease}\nstate:    {}\nholder:   {}\ntoken:    {}\nttl:      {}\nacquired: {}\nrenewed:  {}{age}\n",
                if r.released { "released" } else { "held" },
                r.holder,
                r.token,
                show(Duration::from_millis(r.ttl_ms)),
                r.acquired_at,
                r.renewed_at,
            )
        }
    }
}
