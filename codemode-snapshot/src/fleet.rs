//! The fleet backend: the async interface every run store speaks, whether its runs live in this process, in a
//! `--state` folder or in a database several gateway replicas share, as four traits that [`FleetBackend`] joins:
//! [`FleetRuns`] (compare-and-set on a run's generation, a claim with a lease, TTL expiry by a sweep, a scope index
//! and a wake-up when a run changes), and the session values (`store`/`load`, [`FleetSessions`]), result references
//! (`results.load`, [`FleetResults`]) and idempotency keys ([`FleetIdempotency`]) that must not be local to one
//! replica.
//!
//! [`LocalFleet`] is the implementation over this crate's synchronous backends (memory, directory). Invariant of
//! every implementation: a stale writer never overwrites a newer park (`put` checks the generation it claimed), and
//! of several claimers of one run at most one holds it until it parks, finishes, releases or its lease expires.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::{Checkpoint, CheckpointBackend, FileBackend, MemoryBackend, SessionBackend, StoreError};

/// The default lease of a claim, in milliseconds: how long another replica waits for a resumer that stopped
/// answering before it may claim the run.
pub const DEFAULT_LEASE_MS: u64 = 30_000;

/// How many run changes a subscriber may fall behind before it misses some (it then sees `Lagged` and rechecks).
const CHANGES_CAPACITY: usize = 1024;

/// What [`FleetRuns::claim`] found.
#[derive(Debug)]
pub enum Claim {
    /// The run is now held by the claimer until it parks, finishes or releases it, or the lease expires.
    Claimed(Box<Checkpoint>),
    /// Another resumer holds it.
    Held {
        /// Who holds it.
        holder: String,
        /// When its lease expires (epoch ms); `u64::MAX` when it lasts as long as the holding process.
        until_ms: u64,
    },
    /// No such run (never parked, finished, aborted or expired).
    Missing,
}

/// A run that changed: parked again (`generation` is the new one) or gone (`generation` 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunChange {
    /// The run.
    pub run_id: String,
    /// Its generation now; 0 when it was finished, aborted or expired.
    pub generation: u32,
}

/// What an exec with an idempotency key found.
#[derive(Clone, Debug, PartialEq)]
pub enum Accepted {
    /// The key is new: the exec runs, under the run id it offered.
    New,
    /// The fleet already accepted this key for `run_id`; `result` is its final result once it ended.
    Existing {
        /// The run the first exec started.
        run_id: String,
        /// Its final result (`CodeModeResult` JSON) when it completed or failed; `None` while it runs or waits.
        result: Option<Value>,
    },
}

/// The runs of a fleet: parked checkpoints with compare-and-set on their generation, claims with a lease, TTL
/// expiry by a sweep, a scope index and wake-ups.
///
/// Run ids passed in are already validated (`cm_<uuid>`). `scope` is the string that decides who may see a run: the
/// session today, or an authenticated principal; [`FleetRuns::list`] reads it back.
#[async_trait]
pub trait FleetRuns: Send + Sync + 'static {
    /// How long a claim lasts without renewal (ms); `None` when a claim lasts as long as the claiming process (a
    /// backend that only one machine shares).
    fn lease_ms(&self) -> Option<u64>;

    /// How long a parked run is kept (ms), when the backend's configuration sets it; the store uses
    /// `snapshotTtlSeconds` otherwise.
    fn ttl_ms(&self) -> Option<u64> {
        None
    }

    /// Stores `checkpoint` if no run is stored under its id (`expected` 0), or if the stored run has generation
    /// `expected` and `holder` holds its claim; the claim ends.
    ///
    /// # Errors
    ///
    /// `Stale` when the run was parked again, finished or claimed by another since `expected`; a backend error.
    async fn put(&self, checkpoint: &Checkpoint, expected: u32, holder: &str, scope: &str) -> Result<(), StoreError>;

    /// Replaces the checkpoint of a run `holder` holds, keeping its generation and the claim (a write-ahead record
    /// of calls about to be dispatched). A backend whose claims last as long as the claiming process has nothing to
    /// record for a successor and may do nothing.
    ///
    /// # Errors
    ///
    /// `Stale` when `holder` no longer holds the run at the checkpoint's generation; a backend error.
    async fn save(&self, checkpoint: &Checkpoint, holder: &str) -> Result<(), StoreError>;

    /// Reads a run's checkpoint without claiming it.
    ///
    /// # Errors
    ///
    /// The backend could not read or decode it.
    async fn get(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError>;

    /// Claims a run for `holder`: at most one holder at a time; a run past its TTL at `now_ms` is deleted and
    /// reported missing.
    ///
    /// # Errors
    ///
    /// The backend could not read or write it.
    async fn claim(&self, run_id: &str, holder: &str, now_ms: u64) -> Result<Claim, StoreError>;

    /// Extends `holder`'s lease on a run from `now_ms`; `false` when it no longer holds it.
    ///
    /// # Errors
    ///
    /// The backend could not be reached.
    async fn renew(&self, run_id: &str, holder: &str, now_ms: u64) -> Result<bool, StoreError>;

    /// Gives a claim back unchanged (a resume that did not start): the run is parked as it was.
    ///
    /// # Errors
    ///
    /// The backend could not be reached.
    async fn release(&self, run_id: &str, holder: &str) -> Result<(), StoreError>;

    /// Deletes a run `holder` holds (it completed or failed); `false` when it no longer held it.
    ///
    /// # Errors
    ///
    /// The backend could not be reached.
    async fn finish(&self, run_id: &str, holder: &str) -> Result<bool, StoreError>;

    /// [`FleetRuns::finish`] from a place that cannot wait (a dropped guard): done at once or in a task.
    fn finish_detached(&self, run_id: String, holder: String);

    /// Deletes a run past its TTL from a place that cannot wait: done at once or in a task; a failure is harmless
    /// (an expired run is refused when claimed, and the next sweep deletes it).
    fn delete_detached(&self, run_id: String);

    /// Deletes a run whoever holds it (abort); `true` when there was one.
    ///
    /// # Errors
    ///
    /// The backend could not be reached.
    async fn delete(&self, run_id: &str) -> Result<bool, StoreError>;

    /// The runs stored, of one scope or of all.
    ///
    /// # Errors
    ///
    /// The backend could not be listed.
    async fn list(&self, scope: Option<&str>) -> Result<Vec<String>, StoreError>;

    /// Deletes every run past its TTL at `now_ms` (and idempotency keys and results past theirs); returns the runs.
    ///
    /// # Errors
    ///
    /// The backend could not be reached.
    async fn sweep(&self, now_ms: u64) -> Result<Vec<String>, StoreError>;

    /// Wake-ups: every run parked again, finished, aborted or expired, by this process or (for a shared backend)
    /// any other.
    fn subscribe(&self) -> broadcast::Receiver<RunChange>;
}

/// A fleet's session values (`store`/`load`), per session, in the order their keys were first stored.
#[async_trait]
pub trait FleetSessions: Send + Sync + 'static {
    /// The value under `key` in `session`.
    ///
    /// # Errors
    ///
    /// The backend could not read it.
    async fn session_get(&self, session: &str, key: &str) -> Result<Option<Value>, StoreError>;

    /// Stores `value` under `key` in `session`, unless that would give the session more than `max_keys` keys.
    ///
    /// # Errors
    ///
    /// `TooManyKeys`, or the backend could not write it.
    async fn session_put(&self, session: &str, key: &str, value: &Value, max_keys: usize) -> Result<(), StoreError>;

    /// Removes `key` from `session`; `true` when it was there.
    ///
    /// # Errors
    ///
    /// The backend could not write it.
    async fn session_remove(&self, session: &str, key: &str) -> Result<bool, StoreError>;

    /// The keys of `session`, in the order they were first stored.
    ///
    /// # Errors
    ///
    /// The backend could not read them.
    async fn session_keys(&self, session: &str) -> Result<Vec<String>, StoreError>;

    /// Removes every value of `session`.
    ///
    /// # Errors
    ///
    /// The backend could not write it.
    async fn session_clear(&self, session: &str) -> Result<(), StoreError>;
}

/// A fleet's result references (`results.load`): oversized final values kept per session, oldest evicted first.
#[async_trait]
pub trait FleetResults: Send + Sync + 'static {
    /// Keeps an oversized final value of `session` for `results.load(id)`, evicting that session's oldest values
    /// past 64 entries or `max_bytes`.
    ///
    /// # Errors
    ///
    /// The backend could not write it.
    async fn result_put(&self, session: &str, id: &str, value: &Value, max_bytes: usize) -> Result<(), StoreError>;

    /// A value kept by [`FleetResults::result_put`], if the session still holds it.
    ///
    /// # Errors
    ///
    /// The backend could not read it.
    async fn result_get(&self, session: &str, id: &str) -> Result<Option<Value>, StoreError>;
}

/// A fleet's idempotency keys: which run an `exec` with a key started, and its final result once it ended.
#[async_trait]
pub trait FleetIdempotency: Send + Sync + 'static {
    /// Records that an exec with idempotency `key` in `scope` starts `run_id`, unless the key was accepted before
    /// (then the earlier run is returned). The key is kept until `expires_at_ms`.
    ///
    /// # Errors
    ///
    /// The backend could not be reached.
    async fn idempotency_accept(
        &self,
        scope: &str,
        key: &str,
        run_id: &str,
        expires_at_ms: u64,
    ) -> Result<Accepted, StoreError>;

    /// Records the final result of the run an idempotency key started.
    ///
    /// # Errors
    ///
    /// The backend could not be reached.
    async fn idempotency_finish(&self, scope: &str, key: &str, result: &Value) -> Result<(), StoreError>;
}

/// The run store's durable, shared side: runs, session values, result references and idempotency keys, each its
/// own trait so that a backend is written and tested one concern at a time (codemode-store-conformance's suite
/// checks all four). Every type with the four is one.
pub trait FleetBackend: FleetRuns + FleetSessions + FleetResults + FleetIdempotency {}

impl<T: FleetRuns + FleetSessions + FleetResults + FleetIdempotency> FleetBackend for T {}

/// Result references kept per session: `(id, value, bytes)`, oldest first.
type Results = HashMap<String, VecDeque<(String, Value, usize)>>;

/// The most result references a session keeps.
pub const MAX_RESULTS_PER_SESSION: usize = 64;

/// A [`FleetBackend`] over this crate's synchronous backends ([`MemoryBackend`], [`FileBackend`], or any
/// [`CheckpointBackend`] and [`SessionBackend`]).
///
/// A claim is the backend's atomic `take` (for a directory, a rename): of several processes sharing the folder one
/// gets the run, which is then absent until it parks again. The claim lasts as long as the claiming process (no
/// lease expiry: a process killed mid-resume loses that run, as it lost it before), and wake-ups, result
/// references and idempotency keys stay in this process. Across machines, use a database backend.
pub struct LocalFleet {
    backend: Arc<dyn CheckpointBackend>,
    sessions: Arc<dyn SessionBackend>,
    state: Mutex<LocalState>,
    changes: broadcast::Sender<RunChange>,
}

#[derive(Default)]
struct LocalState {
    /// Runs this process claimed (taken from the backend), with the generation taken and the scope it was parked
    /// under.
    claimed: HashMap<String, (u32, String, Checkpoint)>,
    /// The scope of each run parked through this process.
    scopes: HashMap<String, String>,
    results: Results,
    /// `(scope, key)` to the run it started and its final result.
    idempotency: HashMap<(String, String), (String, Option<Value>, u64)>,
}

impl std::fmt::Debug for LocalFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFleet").finish_non_exhaustive()
    }
}

impl LocalFleet {
    /// Everything in this process.
    pub fn memory() -> Self {
        let backend = Arc::new(MemoryBackend::new());
        LocalFleet::new(backend.clone(), backend)
    }

    /// Runs and session values in `backend`'s folder.
    pub fn directory(backend: FileBackend) -> Self {
        let backend = Arc::new(backend);
        LocalFleet::new(backend.clone(), backend)
    }

    /// A fleet backend keeping runs in `runs` and session values in `sessions`.
    pub fn new(runs: Arc<dyn CheckpointBackend>, sessions: Arc<dyn SessionBackend>) -> Self {
        LocalFleet {
            backend: runs,
            sessions,
            state: Mutex::new(LocalState::default()),
            changes: broadcast::channel(CHANGES_CAPACITY).0,
        }
    }

    /// The synchronous checkpoint backend underneath.
    pub fn runs(&self) -> &Arc<dyn CheckpointBackend> {
        &self.backend
    }

    fn lock(&self) -> MutexGuard<'_, LocalState> {
        // Every critical section is a few map operations that leave the state consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn changed(&self, run_id: &str, generation: u32) {
        // No subscriber is not an error: nothing listens in a process without live runs to drop.
        let _ = self.changes.send(RunChange { run_id: run_id.to_owned(), generation });
    }

    fn put_sync(&self, checkpoint: &Checkpoint, expected: u32, scope: &str) -> Result<(), StoreError> {
        let run_id = &checkpoint.run_id;
        let stale = |stored: u32| StoreError::Stale { run_id: run_id.clone(), expected, stored };
        let claimed = self.lock().claimed.get(run_id).map(|(generation, _, _)| *generation);
        match claimed {
            Some(generation) if generation == expected => {}
            Some(generation) => return Err(stale(generation)),
            // A new run: its id is a fresh uuid, so nothing can be stored under it (and a read would cost a file).
            None if expected == 0 => {}
            // Not claimed here: another process holds it, or it is gone.
            None => return Err(stale(0)),
        }
        let mut state = self.lock();
        state.claimed.remove(run_id);
        state.scopes.insert(run_id.clone(), scope.to_owned());
        drop(state);
        self.backend.put(checkpoint)?;
        self.changed(run_id, checkpoint.generation);
        Ok(())
    }

    fn session_update<T>(
        &self,
        session: &str,
        update: impl FnOnce(&mut serde_json::Map<String, Value>) -> Result<(bool, T), StoreError>,
    ) -> Result<T, StoreError> {
        // The lock serializes this process's read-modify-write of the session's document.
        let _state = self.lock();
        let mut values = self.sessions.load_session(session)?;
        let (changed, out) = update(&mut values)?;
        if changed {
            self.sessions.save_session(session, &values)?;
        }
        Ok(out)
    }
}

#[async_trait]
impl FleetRuns for LocalFleet {
    fn lease_ms(&self) -> Option<u64> {
        None
    }

    async fn put(&self, checkpoint: &Checkpoint, expected: u32, _holder: &str, scope: &str) -> Result<(), StoreError> {
        self.put_sync(checkpoint, expected, scope)
    }

    async fn save(&self, _checkpoint: &Checkpoint, _holder: &str) -> Result<(), StoreError> {
        // A claim here ends with this process, and the run with it: no successor reads a record.
        Ok(())
    }

    async fn get(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.backend.get(run_id)
    }

    async fn claim(&self, run_id: &str, holder: &str, now_ms: u64) -> Result<Claim, StoreError> {
        if self.lock().claimed.contains_key(run_id) {
            return Ok(Claim::Held { holder: holder.to_owned(), until_ms: u64::MAX });
        }
        let taken = self.backend.take(run_id).map_err(|e| match e {
            // The file was left where it was, for a process that can open it.
            StoreError::Sealed { .. } | StoreError::Corrupt { .. } => StoreError::unreadable(run_id, &e),
            other => other,
        })?;
        let Some(checkpoint) = taken else { return Ok(Claim::Missing) };
        if checkpoint.is_expired(now_ms) {
            self.lock().scopes.remove(run_id);
            self.changed(run_id, 0);
            return Ok(Claim::Missing);
        }
        let mut state = self.lock();
        let scope = state.scopes.get(run_id).cloned().unwrap_or_else(|| checkpoint.owner.scope_key());
        state.claimed.insert(run_id.to_owned(), (checkpoint.generation, scope, checkpoint.clone()));
        Ok(Claim::Claimed(Box::new(checkpoint)))
    }

    async fn renew(&self, run_id: &str, _holder: &str, _now_ms: u64) -> Result<bool, StoreError> {
        Ok(self.lock().claimed.contains_key(run_id))
    }

    async fn release(&self, run_id: &str, _holder: &str) -> Result<(), StoreError> {
        let claimed = self.lock().claimed.remove(run_id);
        if let Some((_, scope, checkpoint)) = claimed {
            self.lock().scopes.insert(run_id.to_owned(), scope);
            self.backend.put(&checkpoint)?;
        }
        Ok(())
    }

    async fn finish(&self, run_id: &str, _holder: &str) -> Result<bool, StoreError> {
        let mut state = self.lock();
        let held = state.claimed.remove(run_id).is_some();
        state.scopes.remove(run_id);
        drop(state);
        if held {
            self.changed(run_id, 0);
        }
        Ok(held)
    }

    fn finish_detached(&self, run_id: String, holder: String) {
        let mut state = self.lock();
        state.claimed.remove(&run_id);
        state.scopes.remove(&run_id);
        drop(state);
        let _ = holder;
        self.changed(&run_id, 0);
    }

    fn delete_detached(&self, run_id: String) {
        self.lock().scopes.remove(&run_id);
        if let Ok(true) = self.backend.delete(&run_id) {
            self.changed(&run_id, 0);
        }
    }

    async fn delete(&self, run_id: &str) -> Result<bool, StoreError> {
        let mut state = self.lock();
        let held = state.claimed.remove(run_id).is_some();
        state.scopes.remove(run_id);
        drop(state);
        let deleted = self.backend.delete(run_id)? || held;
        if deleted {
            self.changed(run_id, 0);
        }
        Ok(deleted)
    }

    async fn list(&self, scope: Option<&str>) -> Result<Vec<String>, StoreError> {
        let ids = self.backend.list()?;
        let Some(scope) = scope else { return Ok(ids) };
        let mut out = Vec::new();
        for id in ids {
            let known = self.lock().scopes.get(&id).cloned();
            let of = match known {
                Some(s) => s,
                None => match self.backend.get(&id) {
                    Ok(Some(cp)) => cp.owner.scope_key(),
                    _ => continue,
                },
            };
            if of == scope {
                out.push(id);
            }
        }
        Ok(out)
    }

    async fn sweep(&self, now_ms: u64) -> Result<Vec<String>, StoreError> {
        let mut gone = Vec::new();
        for run_id in self.backend.list()? {
            match self.backend.get(&run_id) {
                Ok(Some(cp)) if cp.is_expired(now_ms) => {
                    if self.backend.delete(&run_id)? {
                        self.lock().scopes.remove(&run_id);
                        self.changed(&run_id, 0);
                        gone.push(run_id);
                    }
                }
                // An undecodable file, or one no configured state key opens, is left for a person to look at; it is
                // refused when loaded.
                Ok(_) | Err(StoreError::Corrupt { .. } | StoreError::Sealed { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.lock().idempotency.retain(|_, (_, _, expires)| *expires > now_ms);
        Ok(gone)
    }

    fn subscribe(&self) -> broadcast::Receiver<RunChange> {
        self.changes.subscribe()
    }
}

#[async_trait]
impl FleetSessions for LocalFleet {
    async fn session_get(&self, session: &str, key: &str) -> Result<Option<Value>, StoreError> {
        Ok(self.sessions.load_session(session)?.remove(key))
    }

    async fn session_put(&self, session: &str, key: &str, value: &Value, max_keys: usize) -> Result<(), StoreError> {
        self.session_update(session, |values| {
            if !values.contains_key(key) && values.len() >= max_keys {
                return Err(StoreError::TooManyKeys { max: max_keys });
            }
            values.insert(key.to_owned(), value.clone());
            Ok((true, ()))
        })
    }

    async fn session_remove(&self, session: &str, key: &str) -> Result<bool, StoreError> {
        self.session_update(session, |values| {
            let removed = values.shift_remove(key).is_some();
            Ok((removed, removed))
        })
    }

    async fn session_keys(&self, session: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.sessions.load_session(session)?.keys().cloned().collect())
    }

    async fn session_clear(&self, session: &str) -> Result<(), StoreError> {
        let _state = self.lock();
        self.sessions.save_session(session, &serde_json::Map::new())
    }
}

#[async_trait]
impl FleetResults for LocalFleet {
    async fn result_put(&self, session: &str, id: &str, value: &Value, max_bytes: usize) -> Result<(), StoreError> {
        let bytes = codemode_bridge::json_len(value);
        let mut state = self.lock();
        let entries = state.results.entry(session.to_owned()).or_default();
        entries.push_back((id.to_owned(), value.clone(), bytes));
        let mut total: usize = entries.iter().map(|e| e.2).sum();
        while entries.len() > MAX_RESULTS_PER_SESSION || total > max_bytes {
            let Some((_, _, b)) = entries.pop_front() else { break };
            total -= b;
        }
        Ok(())
    }

    async fn result_get(&self, session: &str, id: &str) -> Result<Option<Value>, StoreError> {
        let state = self.lock();
        Ok(state.results.get(session).and_then(|e| e.iter().find(|(i, _, _)| i == id)).map(|(_, v, _)| v.clone()))
    }
}

#[async_trait]
impl FleetIdempotency for LocalFleet {
    async fn idempotency_accept(
        &self,
        scope: &str,
        key: &str,
        run_id: &str,
        expires_at_ms: u64,
    ) -> Result<Accepted, StoreError> {
        let mut state = self.lock();
        match state.idempotency.entry((scope.to_owned(), key.to_owned())) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let (run_id, result, _) = e.get();
                Ok(Accepted::Existing { run_id: run_id.clone(), result: result.clone() })
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert((run_id.to_owned(), None, expires_at_ms));
                Ok(Accepted::New)
            }
        }
    }

    async fn idempotency_finish(&self, scope: &str, key: &str, result: &Value) -> Result<(), StoreError> {
        if let Some(entry) = self.lock().idempotency.get_mut(&(scope.to_owned(), key.to_owned())) {
            entry.1 = Some(result.clone());
        }
        Ok(())
    }
}
