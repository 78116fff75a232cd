//! The lease record: what is stored at the lease key, in every backend.
//!
//! A small JSON object. The field `leaderrun` is both the marker that says
//! "this object is a leaderrun lease" and the format version; anything without
//! it is somebody else's data and is never overwritten.

use serde::{Deserialize, Serialize};

/// The format version this build writes and understands.
pub const FORMAT: u64 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Format version (and the marker of a leaderrun record).
    pub leaderrun: u64,
    /// Who holds (or last held) the lease, e.g. `host-a:4242`.
    pub holder: String,
    /// Fencing token: incremented on every acquisition, never reset, not even
    /// on release. The command receives it as `LEADERRUN_TOKEN`.
    pub token: u64,
    /// Random per acquisition: tells a holder's own writes from anyone else's,
    /// which is how an ambiguous write (timeout, 5xx) is resolved by re-reading.
    pub nonce: String,
    /// Incremented on every write of the record (acquire, renew, release), so
    /// that one write of a holder can be told from its previous one.
    pub serial: u64,
    /// The holder's ttl in milliseconds. Waiting candidates use the larger of
    /// this and their own ttl, so a holder with a longer ttl is never cut short.
    pub ttl_ms: u64,
    /// Set by a release: the next candidate may take the lease at once.
    pub released: bool,
    /// Wall-clock time of the acquisition on the holder's host (RFC 3339).
    /// For humans only: leaderrun never compares wall clocks across hosts.
    pub acquired_at: String,
    /// Wall-clock time of the last write on the holder's host (RFC 3339).
    /// For humans only.
    pub renewed_at: String,
}

/// Why stored bytes are not a record this build may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not a leaderrun record at all: someone else's data.
    Foreign,
    /// A leaderrun record of a newer format version.
    Newer(u64),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Foreign => {
                f.write_str("it is not a leaderrun lease record; refusing to touch it")
            }
            DecodeError::Newer(v) => write!(
                f,
                "it is a lease record of format {v}, newer than this leaderrun understands ({FORMAT}); upgrade leaderrun"
            ),
        }
    }
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("a record always serializes");
        out.push(b'\n');
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|_| DecodeError::Foreign)?;
        let version = value
            .as_object()
            .and_then(|o| o.get("leaderrun"))
            .and_then(|v| v.as_u64())
            .ok_or(DecodeError::Foreign)?;
        if version > FORMAT {
            return Err(DecodeError::Newer(version));
        }
        serde_json::from_value(value).map_err(|_| DecodeError::Foreign)
    }

    /// The first record of a lease that did not exist yet.
    pub fn first(holder: &str, nonce: &str, ttl_ms: u64) -> Record {
        let now = wall_now();
        Record {
            leaderrun: FORMAT,
            holder: holder.to_owned(),
            token: 1,
            nonce: nonce.to_owned(),
            serial: 1,
            ttl_ms,
            released: false,
            acquired_at: now.clone(),
            renewed_at: now,
        }
    }

    /// The record that takes over from `self` (released or expired).
    pub fn acquired_by(&self, holder: &str, nonce: &str, ttl_ms: u64) -> Record {
        let now = wall_now();
        Record {
            leaderrun: FORMAT,
            holder: holder.to_owned(),
            token: self.token + 1,
            nonce: nonce.to_owned(),
            serial: self.serial + 1,
            ttl_ms,
            released: false,
            acquired_at: now.clone(),
            renewed_at: now,
        }
    }

    /// The same holding, written again.
    pub fn renewed(&self) -> Record {
        Record {
            serial: self.serial + 1,
            renewed_at: wall_now(),
            ..self.clone()
        }
    }

    /// The same record marked released; the token is kept.
    pub fn released(&self) -> Record {
        Record {
            serial: self.serial + 1,
            released: true,
            renewed_at: wall_now(),
            ..self.clone()
        }
    }
}

/// The holder's wall clock, for humans.
pub fn wall_now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// A fresh random nonce (128 bits, hex).
pub fn new_nonce() -> String {
    use std::io::Read;
    let mut buf = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !filled {
        // Unique enough without /dev/urandom: pid, wall and monotonic time.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mono = std::time::Instant::now();
        let seed = format!("{}:{}:{:?}", std::process::id(), t.as_nanos(), mono);
        for (i, b) in seed.bytes().enumerate() {
            buf[i % 16] = buf[i % 16].rotate_left(3) ^ b;
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = Record::first("a:1", "n1", 15_000);
        assert_eq!(Record::decode(&r.encode()).unwrap(), r);
    }

    #[test]
    fn foreign_content_is_refused() {
        for bytes in [
            &b"hello"[..],
            b"{}",
            b"[1,2]",
            b"{\"holder\":\"x\"}",
            b"{\"leaderrun\":\"1\"}",
            b"",
        ] {
            assert_eq!(
                Record::decode(bytes),
                Err(DecodeError::Foreign),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn newer_format_is_refused() {
        assert_eq!(
            Record::decode(br#"{"leaderrun": 2, "whatever": true}"#),
            Err(DecodeError::Newer(2))
        );
    }

    #[test]
    fn token_grows_and_is_kept_on_release() {
        let a = Record::first("a:1", "n1", 1000);
        let r = a.renewed().released();
        assert_eq!(r.token, 1);
        assert!(r.released);
        let b = r.acquired_by("b:2", "n2", 1000);
        assert_eq!(b.token, 2);
        assert!(!b.released);
        assert!(b.serial > r.serial && r.serial > a.serial);
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(new_nonce(), new_nonce());
        assert_eq!(new_nonce().len(), 32);
    }
}
