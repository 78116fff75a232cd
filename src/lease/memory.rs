//! An in-memory store with fault injection, for unit tests of the election.
//! Never used by the binary: the backends are proven against real servers.

use std::sync::Mutex;

use async_trait::async_trait;

use super::record::Record;
use super::store::{Store, StoreError, Stored, Version};

/// How the store misbehaves, set by a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    #[default]
    None,
    /// Every call fails with `Unavailable` and changes nothing.
    Down,
    /// Writes are applied, but the reply is lost (`Unavailable`).
    LoseReplies,
    /// Every call hangs forever (a stalled connection).
    Hang,
}

#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    stored: Option<Stored>,
    next_version: u64,
    fault: Fault,
    writes: u64,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    pub fn set_fault(&self, fault: Fault) {
        self.state.lock().unwrap().fault = fault;
    }

    /// The record as stored, bypassing faults.
    pub fn peek(&self) -> Option<Stored> {
        self.state.lock().unwrap().stored.clone()
    }

    /// Successful writes so far.
    pub fn writes(&self) -> u64 {
        self.state.lock().unwrap().writes
    }

    async fn enter(&self) -> Result<(), StoreError> {
        let fault = self.state.lock().unwrap().fault;
        match fault {
            Fault::Down => Err(StoreError::Unavailable("injected outage".into())),
            Fault::Hang => std::future::pending().await,
            Fault::None | Fault::LoseReplies => Ok(()),
        }
    }

    fn put(&self, state: &mut State, record: &Record) -> Result<Version, StoreError> {
        state.next_version += 1;
        state.writes += 1;
        let version = Version(format!("v{}", state.next_version));
        state.stored = Some(Stored {
            record: record.clone(),
            version: version.clone(),
        });
        if state.fault == Fault::LoseReplies {
            return Err(StoreError::Unavailable("injected lost reply".into()));
        }
        Ok(version)
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn describe(&self) -> String {
        "memory://test".into()
    }

    async fn load(&self) -> Result<Option<Stored>, StoreError> {
        self.enter().await?;
        Ok(self.state.lock().unwrap().stored.clone())
    }

    async fn create(&self, record: &Record) -> Result<Version, StoreError> {
        self.enter().await?;
        let mut state = self.state.lock().unwrap();
        if state.stored.is_some() {
            return Err(StoreError::Conflict("exists".into()));
        }
        self.put(&mut state, record)
    }

    async fn replace(&self, expected: &Version, record: &Record) -> Result<Version, StoreError> {
        self.enter().await?;
        let mut state = self.state.lock().unwrap();
        match &state.stored {
            Some(s) if &s.version == expected => self.put(&mut state, record),
            _ => Err(StoreError::Conflict("version changed".into())),
        }
    }

    async fn remove(&self, expected: &Version) -> Result<(), StoreError> {
        self.enter().await?;
        let mut state = self.state.lock().unwrap();
        match &state.stored {
            Some(s) if &s.version == expected => {
                state.stored = None;
                Ok(())
            }
            _ => Err(StoreError::Conflict("version changed".into())),
        }
    }
}
