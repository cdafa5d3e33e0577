//! Durable homes for checkpoints and session values: the backend traits, an in-memory backend, and a directory
//! backend (`--state DIR`) that several processes may share; not a database (session writers: last writer wins).
//!
//! Invariant of the directory backend: a file is either absent or a complete, valid document (temp file renamed into
//! place); `take` is an atomic rename, so one process at most consumes a checkpoint; a file is read only if it is a
//! regular file (no symlink followed) under a size cap, a checkpoint only if the run id inside matches its name.
//! Files are created readable by their owner only (0600) in folders only their owner may enter (0700); with a
//! [`Keyring`] every document is sealed before it is written and must open under a key before it is used.

use std::collections::HashMap;
use std::fs;
use std::io::{ErrorKind, Read as _, Write};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::seal::{self, Keyring};
use crate::{Checkpoint, StoreError, is_valid_run_id};

/// The mode of every file the directory backend writes: its owner reads and writes it, nobody else.
pub const STATE_FILE_MODE: u32 = 0o600;

/// The mode of the directory backend's folders: only their owner may list or enter them.
pub const STATE_DIR_MODE: u32 = 0o700;

/// The largest checkpoint file the directory backend reads: the largest `maxSnapshotBytes` allows.
pub const MAX_CHECKPOINT_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// The largest session file the directory backend reads: 256 keys of 64 KiB (the default session limits) with room
/// for JSON escaping.
pub const MAX_SESSION_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Where checkpoints of suspended runs are kept between park and resume.
///
/// Methods are synchronous and do small I/O; call them from a blocking context when the backend is slow. Run ids
/// passed in are already validated by the store.
pub trait CheckpointBackend: Send + Sync + 'static {
    /// Stores `checkpoint` under its run id, replacing any earlier one.
    ///
    /// # Errors
    ///
    /// The backend could not write it.
    fn put(&self, checkpoint: &Checkpoint) -> Result<(), StoreError>;

    /// Reads the checkpoint of `run_id` without consuming it.
    ///
    /// # Errors
    ///
    /// The backend could not read or decode it.
    fn get(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError>;

    /// Removes and returns the checkpoint of `run_id`; of several concurrent callers (in any process sharing the
    /// backend) at most one gets it.
    ///
    /// # Errors
    ///
    /// The backend could not read or decode it.
    fn take(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError>;

    /// Removes the checkpoint of `run_id`; `true` when there was one.
    ///
    /// # Errors
    ///
    /// The backend could not remove it.
    fn delete(&self, run_id: &str) -> Result<bool, StoreError>;

    /// The run ids stored.
    ///
    /// # Errors
    ///
    /// The backend could not be listed.
    fn list(&self) -> Result<Vec<String>, StoreError>;
}

/// Where per-session `store`/`load` values are kept: one JSON object per session.
pub trait SessionBackend: Send + Sync + 'static {
    /// The values of `session` (empty when it has none).
    ///
    /// # Errors
    ///
    /// The backend could not read or decode them.
    fn load_session(&self, session: &str) -> Result<Map<String, Value>, StoreError>;

    /// Replaces the values of `session`; an empty map removes the session.
    ///
    /// # Errors
    ///
    /// The backend could not write them.
    fn save_session(&self, session: &str, values: &Map<String, Value>) -> Result<(), StoreError>;
}

/// Keeps everything in this process; nothing survives a restart.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    runs: Mutex<HashMap<String, Checkpoint>>,
    sessions: Mutex<HashMap<String, Map<String, Value>>>,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        MemoryBackend::default()
    }
}

impl CheckpointBackend for MemoryBackend {
    fn put(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner).insert(checkpoint.run_id.clone(), checkpoint.clone());
        Ok(())
    }

    fn get(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self.runs.lock().unwrap_or_else(PoisonError::into_inner).get(run_id).cloned())
    }

    fn take(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self.runs.lock().unwrap_or_else(PoisonError::into_inner).remove(run_id))
    }

    fn delete(&self, run_id: &str) -> Result<bool, StoreError> {
        Ok(self.runs.lock().unwrap_or_else(PoisonError::into_inner).remove(run_id).is_some())
    }

    fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.runs.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect())
    }
}

impl SessionBackend for MemoryBackend {
    fn load_session(&self, session: &str) -> Result<Map<String, Value>, StoreError> {
        Ok(self.sessions.lock().unwrap_or_else(PoisonError::into_inner).get(session).cloned().unwrap_or_default())
    }

    fn save_session(&self, session: &str, values: &Map<String, Value>) -> Result<(), StoreError> {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        if values.is_empty() {
            sessions.remove(session);
        } else {
            sessions.insert(session.to_owned(), values.clone());
        }
        Ok(())
    }
}

/// Keeps checkpoints and session values as files under one directory: `runs/<runId>.json` (the checkpoint's
/// stored form, [`Checkpoint::to_stored`]: its JSON, deflated when that is shorter) and
/// `sessions/<sha256 of the session id>.json`.
///
/// Writes are synced to disk before the rename by default (durable across power loss, ~3 ms per write here);
/// [`FileBackend::without_fsync`] keeps them atomic and crash-safe for the process but not for the machine.
#[derive(Debug, Clone)]
pub struct FileBackend {
    dir: PathBuf,
    fsync: bool,
    keys: Option<Arc<Keyring>>,
}

impl FileBackend {
    /// Uses `dir`, creating it and its `runs/` and `sessions/` folders when missing; all three are made 0700 (only
    /// their owner may list or enter them), existing ones included.
    ///
    /// # Errors
    ///
    /// A folder could not be created or its mode set.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let backend = FileBackend { dir: dir.into(), fsync: true, keys: None };
        for folder in [backend.dir.clone(), backend.runs_dir(), backend.sessions_dir()] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(STATE_DIR_MODE)
                .create(&folder)
                .map_err(|e| StoreError::io(&folder, e))?;
            fs::set_permissions(&folder, fs::Permissions::from_mode(STATE_DIR_MODE))
                .map_err(|e| StoreError::io(&folder, e))?;
        }
        Ok(backend)
    }

    /// Seals every checkpoint and session file with `keys` (the first key seals; any key opens what it sealed).
    /// Files that are not sealed are then refused, never read.
    #[must_use]
    pub fn with_keys(mut self, keys: Option<Arc<Keyring>>) -> Self {
        self.keys = keys;
        self
    }

    /// Skips the fsync before each rename: a process crash still leaves only complete files, a power loss may not.
    #[must_use]
    pub fn without_fsync(mut self) -> Self {
        self.fsync = false;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn runs_dir(&self) -> PathBuf {
        self.dir.join("runs")
    }

    fn sessions_dir(&self) -> PathBuf {
        self.dir.join("sessions")
    }

    fn run_path(&self, run_id: &str) -> Result<PathBuf, StoreError> {
        // The store validates ids already; this keeps a direct caller of the backend from escaping the folder.
        if !is_valid_run_id(run_id) {
            return Err(StoreError::InvalidRunId(run_id.to_owned()));
        }
        Ok(self.runs_dir().join(format!("{run_id}.json")))
    }

    fn session_path(&self, session: &str) -> PathBuf {
        let digest = Sha256::digest(session.as_bytes());
        let name: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.sessions_dir().join(format!("{name}.json"))
    }
}

/// Writes `bytes` to `path` through a temp file in the same folder, optionally synced, then renamed into place.
fn write_atomic(path: &Path, bytes: &[u8], fsync: bool) -> Result<(), StoreError> {
    let folder = path.parent().expect("backend paths always have a parent folder");
    let tmp = folder.join(format!(".tmp-{}", uuid::Uuid::new_v4().simple()));
    let write = || -> std::io::Result<()> {
        let mut file = fs::File::options().write(true).create_new(true).mode(STATE_FILE_MODE).open(&tmp)?;
        file.write_all(bytes)?;
        if fsync {
            file.sync_all()?;
        }
        fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        StoreError::io(path, e)
    })
}

/// The file's bytes, `None` when it does not exist.
///
/// Only a regular file of at most `cap` bytes is read: the last component is not followed (a symlink is refused,
/// so one to `/dev/zero` cannot exhaust memory), and opening does not block (a FIFO is refused, not waited on).
fn read_optional(path: &Path, cap: u64) -> Result<Option<Vec<u8>>, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { path: path.to_owned(), reason };
    let file =
        fs::File::options().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC).open(path);
    let file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(corrupt("a symbolic link, not a file".into())),
        Err(e) => return Err(StoreError::io(path, e)),
    };
    let meta = file.metadata().map_err(|e| StoreError::io(path, e))?;
    if !meta.file_type().is_file() {
        return Err(corrupt("not a regular file".into()));
    }
    if meta.len() > cap {
        return Err(corrupt(format!("{} bytes, over the {cap}-byte cap for a state file", meta.len())));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // The file may grow after the fstat; `take` keeps the read within the cap whatever it holds.
    file.take(cap + 1).read_to_end(&mut bytes).map_err(|e| StoreError::io(path, e))?;
    if bytes.len() as u64 > cap {
        return Err(corrupt(format!("over the {cap}-byte cap for a state file")));
    }
    Ok(Some(bytes))
}

/// Decodes the checkpoint file of `run_id`, refusing one that holds another run's checkpoint: a file copied under
/// another run's name must not resume (and re-run the calls of) the run it came from.
fn decode_checkpoint(
    path: &Path,
    run_id: &str,
    bytes: &[u8],
    keys: Option<&Keyring>,
) -> Result<Checkpoint, StoreError> {
    let bytes = seal::open(keys, run_id, bytes)
        .map_err(|e| StoreError::Sealed { path: path.to_owned(), reason: e.to_string() })?;
    let checkpoint =
        Checkpoint::decode(&bytes).map_err(|reason| StoreError::Corrupt { path: path.to_owned(), reason })?;
    if checkpoint.run_id != run_id {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            reason: format!("the file of run {run_id} holds the checkpoint of run {}", checkpoint.run_id),
        });
    }
    Ok(checkpoint)
}

impl CheckpointBackend for FileBackend {
    fn put(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let encoded = checkpoint.to_stored();
        let bytes = seal::seal(self.keys.as_deref(), &checkpoint.run_id, &encoded);
        write_atomic(&self.run_path(&checkpoint.run_id)?, &bytes, self.fsync)
    }

    fn get(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        let path = self.run_path(run_id)?;
        read_optional(&path, MAX_CHECKPOINT_FILE_BYTES)?
            .map(|bytes| decode_checkpoint(&path, run_id, &bytes, self.keys.as_deref()))
            .transpose()
    }

    fn take(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        let path = self.run_path(run_id)?;
        // The rename is the claim: of several processes only one moves the file away.
        let claimed = self.runs_dir().join(format!(".taken-{}", uuid::Uuid::new_v4().simple()));
        match fs::rename(&path, &claimed) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e)),
        }
        let taken = read_optional(&claimed, MAX_CHECKPOINT_FILE_BYTES).and_then(|bytes| match bytes {
            Some(bytes) => decode_checkpoint(&path, run_id, &bytes, self.keys.as_deref()).map(Some),
            None => Ok(None),
        });
        match taken {
            // A file this process cannot read or open goes back where it was: for a process with the right state
            // key, for a read that succeeds later, or for a person to look at.
            Err(e) => {
                let _ = fs::rename(&claimed, &path);
                Err(e)
            }
            taken => {
                let _ = fs::remove_file(&claimed);
                taken
            }
        }
    }

    fn delete(&self, run_id: &str) -> Result<bool, StoreError> {
        let path = self.run_path(run_id)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StoreError::io(&path, e)),
        }
    }

    fn list(&self) -> Result<Vec<String>, StoreError> {
        let dir = self.runs_dir();
        let mut ids = Vec::new();
        for entry in fs::read_dir(&dir).map_err(|e| StoreError::io(&dir, e))? {
            let entry = entry.map_err(|e| StoreError::io(&dir, e))?;
            let name = entry.file_name();
            if let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json"))
                && is_valid_run_id(id)
            {
                ids.push(id.to_owned());
            }
        }
        ids.sort();
        Ok(ids)
    }
}

#[derive(serde::Deserialize)]
struct SessionFile {
    session: String,
    values: Map<String, Value>,
}

#[derive(serde::Serialize)]
struct SessionFileRef<'a> {
    session: &'a str,
    values: &'a Map<String, Value>,
}

impl SessionBackend for FileBackend {
    fn load_session(&self, session: &str) -> Result<Map<String, Value>, StoreError> {
        let path = self.session_path(session);
        let Some(bytes) = read_optional(&path, MAX_SESSION_FILE_BYTES)? else { return Ok(Map::new()) };
        let bytes = seal::open(self.keys.as_deref(), session, &bytes)
            .map_err(|e| StoreError::Sealed { path: path.clone(), reason: e.to_string() })?;
        let file: SessionFile = serde_json::from_slice(&bytes)
            .map_err(|e| StoreError::Corrupt { path: path.clone(), reason: e.to_string() })?;
        if file.session != session {
            return Err(StoreError::Corrupt { path, reason: "the file belongs to another session".to_owned() });
        }
        Ok(file.values)
    }

    fn save_session(&self, session: &str, values: &Map<String, Value>) -> Result<(), StoreError> {
        let path = self.session_path(session);
        if values.is_empty() {
            return match fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                Err(e) => Err(StoreError::io(&path, e)),
            };
        }
        let file = SessionFileRef { session, values };
        let bytes = serde_json::to_vec(&file).expect("JSON maps always serialize");
        write_atomic(&path, &seal::seal(self.keys.as_deref(), session, &bytes), self.fsync)
    }
}
