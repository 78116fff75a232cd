//! `file:///path`: a lease in a local file, for one host (and the default).
//!
//! Compare-and-swap under an exclusive `flock` on a sidecar `PATH.lock`: lock,
//! read, check the version, write a temporary file, fsync, rename over the
//! lease, fsync the directory, unlock. Readers need no lock: a rename is
//! atomic, so a reader sees either the old record or the new one.
//!
//! The version is the record's `serial` and `nonce` together: every write
//! increments the serial, and the nonce tells writers apart even if the file
//! was deleted and recreated.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::lease::record::Record;
use crate::lease::store::{Store, StoreError, Stored, Version};
use crate::lease::url::LeaseUrl;

/// How long one operation waits for the sidecar lock before giving up with
/// "unavailable". Operations under the lock take microseconds to a few
/// milliseconds; a holder frozen inside one is the only way to wait this long.
const LOCK_WAIT: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLocation {
    pub path: PathBuf,
}

impl FileLocation {
    pub fn from_url(url: &LeaseUrl) -> Result<FileLocation, String> {
        url.only_keys(&[])?;
        if !(url.authority.is_empty() || url.authority == "localhost") {
            return Err(format!(
                "file URL must name a local path, as file:///PATH (got host '{}')",
                url.host()
            ));
        }
        if url.path.is_empty() || url.path.ends_with('/') {
            return Err("file URL must name a file, as file:///PATH".into());
        }
        Ok(FileLocation {
            path: PathBuf::from(&url.path),
        })
    }

    pub fn probe(&self) -> FileLocation {
        FileLocation {
            path: sibling(&self.path, ".leaderrun-probe"),
        }
    }
}

impl std::fmt::Display for FileLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "file://{}", self.path.display())
    }
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

pub struct FileStore {
    loc: FileLocation,
    lock_path: PathBuf,
}

impl FileStore {
    pub fn new(loc: FileLocation) -> FileStore {
        let lock_path = sibling(&loc.path, ".lock");
        FileStore { loc, lock_path }
    }

    /// Runs `f` under the sidecar lock on the blocking pool.
    async fn locked<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Path) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let path = self.loc.path.clone();
        let lock_path = self.lock_path.clone();
        let describe = self.describe();
        tokio::task::spawn_blocking(move || {
            let _lock = lock(&lock_path, &describe)?;
            f(&path)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("file store task failed: {e}")))?
    }
}

fn version_of(record: &Record) -> Version {
    Version(format!("{}-{}", record.serial, record.nonce))
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    let msg = format!("cannot {what} {}: {e}", path.display());
    match e.kind() {
        ErrorKind::PermissionDenied
        | ErrorKind::NotFound
        | ErrorKind::ReadOnlyFilesystem
        | ErrorKind::NotADirectory
        | ErrorKind::IsADirectory => StoreError::Fatal(msg),
        _ => StoreError::Unavailable(msg),
    }
}

/// Takes the exclusive sidecar lock, polling so that a frozen holder cannot
/// make us wait forever.
fn lock(lock_path: &Path, describe: &str) -> Result<File, StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(lock_path)
        .map_err(|e| io_error("open lock file", lock_path, e))?;
    let started = Instant::now();
    let mut pause = Duration::from_micros(200);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                if started.elapsed() > LOCK_WAIT {
                    return Err(StoreError::Unavailable(format!(
                        "{describe}: lock file {} held by another process for over {:?}",
                        lock_path.display(),
                        LOCK_WAIT
                    )));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_error("lock", lock_path, e)),
        }
    }
}

/// Reads and decodes the lease file; `None` if there is none.
fn read(path: &Path) -> Result<Option<Stored>, StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            // A missing directory is a configuration error, not "no lease yet".
            if let Some(dir) = path.parent()
                && !dir.as_os_str().is_empty()
                && !dir.is_dir()
            {
                return Err(StoreError::Fatal(format!(
                    "directory {} does not exist",
                    dir.display()
                )));
            }
            return Ok(None);
        }
        Err(e) => return Err(io_error("read", path, e)),
    };
    let record = Record::decode(&bytes)
        .map_err(|e| StoreError::Fatal(format!("file://{}: {e}", path.display())))?;
    Ok(Some(Stored {
        version: version_of(&record),
        record,
    }))
}

/// Writes `record` atomically: temporary file, fsync, rename, fsync directory.
fn write(path: &Path, record: &Record) -> Result<Version, StoreError> {
    let tmp = sibling(path, &format!(".tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(&record.encode())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent()
            && let Ok(d) = File::open(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            })
        {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error("write", path, e)
    })?;
    Ok(version_of(record))
}

#[async_trait]
impl Store for FileStore {
    fn describe(&self) -> String {
        self.loc.to_string()
    }

    async fn load(&self) -> Result<Option<Stored>, StoreError> {
        let path = self.loc.path.clone();
        tokio::task::spawn_blocking(move || read(&path))
            .await
            .map_err(|e| StoreError::Unavailable(format!("file store task failed: {e}")))?
    }

    async fn create(&self, record: &Record) -> Result<Version, StoreError> {
        let record = record.clone();
        self.locked(move |path| match read(path)? {
            Some(_) => Err(StoreError::Conflict(
                "the lease record already exists".into(),
            )),
            None => write(path, &record),
        })
        .await
    }

    async fn replace(&self, expected: &Version, record: &Record) -> Result<Version, StoreError> {
        let record = record.clone();
        let expected = expected.clone();
        self.locked(move |path| match read(path)? {
            None => Err(StoreError::Conflict("the lease record has vanished".into())),
            Some(s) if s.version != expected => Err(StoreError::Conflict(format!(
                "the lease record changed (now held by {})",
                s.record.holder
            ))),
            Some(_) => write(path, &record),
        })
        .await
    }

    async fn remove(&self, expected: &Version) -> Result<(), StoreError> {
        let expected = expected.clone();
        self.locked(move |path| match read(path)? {
            None => Err(StoreError::Conflict("the record has vanished".into())),
            Some(s) if s.version != expected => {
                Err(StoreError::Conflict("the record changed".into()))
            }
            Some(_) => std::fs::remove_file(path).map_err(|e| io_error("remove", path, e)),
        })
        .await
    }
}
