//! `RunStore`: the suspended runs of this process, their slots under the 64-run cap, TTL expiry, scoping and the
//! one-resume-in-flight rule, written through to a durable backend.
//!
//! Invariants: stored runs + runs being resumed + reservations never exceed the cap at `reserve` time; a run is in
//! at most one of "parked" and "resuming"; `begin_resume` consumes the durable copy (atomic `take`), so each
//! checkpoint is resumed at most once across every process sharing the backend. The lock is never held across
//! backend I/O or while a live attachment is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use codemode_config::Limits;

use crate::{Checkpoint, CheckpointBackend, Clock, MemoryBackend, RunOwner, StoreError, SystemClock, is_valid_run_id};

/// The reference's process-wide cap on suspended runs (stored runs plus reservations).
pub const DEFAULT_MAX_SUSPENDED_RUNS: usize = 64;

/// The suspended runs of one process.
///
/// `L` is a live attachment the facade keeps for the fast path (e.g. a live worker that can continue without
/// replay). It is never persisted; the store drops it when its run expires, is aborted or is consumed, so its
/// `Drop` must release what it holds. Cloning a `RunStore` gives another handle to the same store.
pub struct RunStore<L> {
    inner: Arc<Inner<L>>,
}

impl<L> Clone for RunStore<L> {
    fn clone(&self) -> Self {
        RunStore { inner: Arc::clone(&self.inner) }
    }
}

struct Inner<L> {
    state: Mutex<State<L>>,
    backend: Arc<dyn CheckpointBackend>,
    clock: Arc<dyn Clock>,
    max_runs: usize,
}

struct State<L> {
    parked: HashMap<String, Parked<L>>,
    /// Runs being resumed, with whether they were aborted meanwhile.
    resuming: HashMap<String, bool>,
    reservations: usize,
}

struct Parked<L> {
    checkpoint: Checkpoint,
    live: Option<L>,
    /// When it parked (epoch ms), for [`RunStore::sweep`].
    parked_at_ms: u64,
}

impl<L> Inner<L> {
    fn lock(&self) -> MutexGuard<'_, State<L>> {
        // Every critical section leaves the state consistent before anything can panic, so a poisoned lock is safe.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<L> State<L> {
    fn occupied(&self) -> usize {
        self.parked.len() + self.resuming.len() + self.reservations
    }

    /// Removes runs expired at `now`, returning them (to be dropped and deleted outside the lock).
    fn take_expired(&mut self, now: u64) -> Vec<Expired<L>> {
        let ids: Vec<String> =
            self.parked.iter().filter(|(_, p)| p.checkpoint.is_expired(now)).map(|(id, _)| id.clone()).collect();
        ids.into_iter().filter_map(|id| self.parked.remove(&id).map(|p| Expired { run_id: id, live: p.live })).collect()
    }
}

/// A place under the cap: a reservation for a run that may park, or a run being resumed.
///
/// Dropping a slot frees it; for a resumed run that means the run is finished (completed or failed) and gone.
/// [`RunStore::park`] turns the slot into a stored run.
pub struct Slot<L> {
    inner: Arc<Inner<L>>,
    kind: SlotKind,
}

enum SlotKind {
    Reserved,
    Resuming(String),
    Spent,
}

impl<L> Slot<L> {
    /// The run being resumed, for a slot from [`RunStore::begin_resume`].
    pub fn run_id(&self) -> Option<&str> {
        match &self.kind {
            SlotKind::Resuming(id) => Some(id),
            _ => None,
        }
    }

    /// Frees the slot now (the same as dropping it).
    pub fn release(self) {}

    fn spend(&mut self, state: &mut State<L>) {
        match std::mem::replace(&mut self.kind, SlotKind::Spent) {
            SlotKind::Reserved => state.reservations = state.reservations.saturating_sub(1),
            SlotKind::Resuming(id) => {
                state.resuming.remove(&id);
            }
            SlotKind::Spent => {}
        }
    }
}

impl<L> Drop for Slot<L> {
    fn drop(&mut self) {
        if !matches!(self.kind, SlotKind::Spent) {
            let inner = Arc::clone(&self.inner);
            self.spend(&mut inner.lock());
        }
    }
}

/// A run handed to its resumer.
pub struct Resumed<L> {
    /// The checkpoint to resume from.
    pub checkpoint: Checkpoint,
    /// The live attachment kept at park time, if it was not evicted (fast path; else replay).
    pub live: Option<L>,
    /// `true` when the checkpoint came from the durable backend rather than this process's memory: the run was
    /// parked by another (possibly dead) process, so its pending requests were interrupted
    /// (see [`crate::interrupted_settlements`]).
    pub restored: bool,
    /// The run's slot: pass it to [`RunStore::park`] to suspend again, drop it when the run finishes.
    pub guard: Slot<L>,
}

/// What [`RunStore::park`] stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParkReceipt {
    /// Encoded size of the checkpoint.
    pub encoded_len: usize,
    /// When the run expires (epoch ms).
    pub expires_at_ms: u64,
    /// The checkpoint's generation.
    pub generation: u32,
}

/// A run dropped because its TTL passed.
pub struct Expired<L> {
    /// The run.
    pub run_id: String,
    /// Its live attachment, for the caller to shut down.
    pub live: Option<L>,
}

/// What [`RunStore::abort`] found.
pub enum AbortOutcome<L> {
    /// A parked run, now dropped; its live attachment is handed back.
    Parked {
        /// The live attachment, if any.
        live: Option<L>,
    },
    /// A run being resumed: it is marked aborted, so its next park fails and its resumer should stop.
    Resuming,
    /// A run known only to the durable backend (parked by another process), now deleted.
    Persisted,
    /// No such run.
    Unknown,
}

impl<L: Send + 'static> RunStore<L> {
    /// A store writing through to `backend`, reading time from `clock`, capped at 64 runs.
    pub fn new(backend: Arc<dyn CheckpointBackend>, clock: Arc<dyn Clock>) -> Self {
        RunStore::with_max_runs(backend, clock, DEFAULT_MAX_SUSPENDED_RUNS)
    }

    /// A store with another cap than the reference's 64.
    pub fn with_max_runs(backend: Arc<dyn CheckpointBackend>, clock: Arc<dyn Clock>, max_runs: usize) -> Self {
        let state = State { parked: HashMap::new(), resuming: HashMap::new(), reservations: 0 };
        RunStore { inner: Arc::new(Inner { state: Mutex::new(state), backend, clock, max_runs }) }
    }

    /// A store with a [`MemoryBackend`] and the system clock: nothing survives the process.
    pub fn in_memory() -> Self {
        RunStore::new(Arc::new(MemoryBackend::new()), Arc::new(SystemClock))
    }

    /// The durable backend.
    pub fn backend(&self) -> &Arc<dyn CheckpointBackend> {
        &self.inner.backend
    }

    /// The cap on stored runs plus reservations.
    pub fn max_runs(&self) -> usize {
        self.inner.max_runs
    }

    /// Deletes expired checkpoints from the backend; call it once at start. Files that cannot be decoded or opened
    /// with the configured state keys are left in place.
    /// Returns how many were deleted.
    ///
    /// # Errors
    ///
    /// The backend could not be listed, or a file could not be read or deleted.
    pub fn prune_backend(&self) -> Result<usize, StoreError> {
        let now = self.inner.clock.now_ms();
        let mut deleted = 0;
        for run_id in self.inner.backend.list()? {
            match self.inner.backend.get(&run_id) {
                Ok(Some(cp)) if cp.is_expired(now) => deleted += usize::from(self.inner.backend.delete(&run_id)?),
                Ok(_) | Err(StoreError::Corrupt { .. } | StoreError::Sealed { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    /// Reserves a place for a run that may park; the reference reserves when the first bridge call is dispatched.
    ///
    /// # Errors
    ///
    /// `TooManyRuns` (`too many suspended code mode runs.`) when stored runs, runs being resumed and reservations
    /// reach the cap.
    pub fn reserve(&self) -> Result<Slot<L>, StoreError> {
        let now = self.inner.clock.now_ms();
        let mut state = self.inner.lock();
        let expired = state.take_expired(now);
        let result = if state.occupied() >= self.inner.max_runs {
            Err(StoreError::TooManyRuns)
        } else {
            state.reservations += 1;
            Ok(Slot { inner: Arc::clone(&self.inner), kind: SlotKind::Reserved })
        };
        drop(state);
        self.discard(expired);
        result
    }

    /// Parks a run: stamps the checkpoint (`created_at_ms` if unset, `expires_at_ms = now + snapshotTtlSeconds`,
    /// `generation + 1`), checks it against `maxSnapshotBytes`, writes it to the backend and keeps it (with `live`)
    /// in memory. The slot becomes the stored run.
    ///
    /// A resumed run parks again under the same run id with a new generation; the old checkpoint was consumed by
    /// [`RunStore::begin_resume`]. On error the slot is freed (the run is gone) and `live` is dropped.
    ///
    /// # Errors
    ///
    /// `SnapshotTooLarge` past `maxSnapshotBytes`; `InvalidRunId` for a run id that is not `cm_<uuid>`;
    /// `Unavailable` when the run was aborted while being resumed; a backend error when it could not be written.
    ///
    /// # Panics
    ///
    /// When `slot` comes from another store (a bug in the caller).
    pub fn park(
        &self,
        mut slot: Slot<L>,
        mut checkpoint: Checkpoint,
        live: Option<L>,
        limits: &Limits,
    ) -> Result<ParkReceipt, StoreError> {
        assert!(Arc::ptr_eq(&slot.inner, &self.inner), "a slot parks only in the store that issued it");
        if !is_valid_run_id(&checkpoint.run_id) {
            return Err(StoreError::InvalidRunId(checkpoint.run_id));
        }
        if self.aborted(&slot) {
            return Err(StoreError::Unavailable);
        }
        let now = self.inner.clock.now_ms();
        if checkpoint.created_at_ms == 0 {
            checkpoint.created_at_ms = now;
        }
        checkpoint.expires_at_ms = now.saturating_add(limits.snapshot_ttl_seconds.saturating_mul(1000));
        checkpoint.generation = checkpoint.generation.wrapping_add(1);
        let encoded_len = checkpoint.check_size(limits.max_snapshot_bytes)?;
        self.inner.backend.put(&checkpoint)?;

        let receipt =
            ParkReceipt { encoded_len, expires_at_ms: checkpoint.expires_at_ms, generation: checkpoint.generation };
        let run_id = checkpoint.run_id.clone();
        let mut state = self.inner.lock();
        if matches!(&slot.kind, SlotKind::Resuming(id) if state.resuming.get(id) == Some(&true)) {
            // Aborted while the checkpoint was being written: undo the write.
            slot.spend(&mut state);
            drop(state);
            drop(live);
            let _ = self.inner.backend.delete(&run_id);
            return Err(StoreError::Unavailable);
        }
        slot.spend(&mut state);
        let replaced = state.parked.insert(run_id, Parked { checkpoint, live, parked_at_ms: now });
        let expired = state.take_expired(now);
        drop(state);
        drop(replaced);
        self.discard(expired);
        Ok(receipt)
    }

    /// Hands a parked run to its resumer, after checking it exists, has not expired, belongs to `caller` and is not
    /// already being resumed. Consumes the durable copy: the run is gone unless the resumer parks it again.
    ///
    /// A run this process does not hold in memory is loaded from the backend (parked by another process with the
    /// same state directory); it comes back with `restored: true` and no live attachment.
    ///
    /// # Errors
    ///
    /// `Unavailable` (unknown, expired, consumed or malformed id), `DifferentAgentRun`, `DifferentSession`,
    /// `AlreadyResuming`, or a backend error. A scoping error leaves the run in place.
    pub fn begin_resume(&self, run_id: &str, caller: &RunOwner) -> Result<Resumed<L>, StoreError> {
        self.begin_resume_if(run_id, caller, |_| Ok(()))
    }

    /// [`RunStore::begin_resume`] for a resumer that can resume only some checkpoints: `resumable` sees the
    /// checkpoint after the scope check and before anything is consumed, and a refusal leaves the run in place (for
    /// a caller that can resume it) until its TTL.
    ///
    /// # Errors
    ///
    /// Those of [`RunStore::begin_resume`], and the error `resumable` returns.
    pub fn begin_resume_if(
        &self,
        run_id: &str,
        caller: &RunOwner,
        resumable: impl Fn(&Checkpoint) -> Result<(), StoreError>,
    ) -> Result<Resumed<L>, StoreError> {
        if !is_valid_run_id(run_id) {
            return Err(StoreError::Unavailable);
        }
        let now = self.inner.clock.now_ms();
        let mut state = self.inner.lock();
        let expired = state.take_expired(now);
        if state.resuming.contains_key(run_id) {
            drop(state);
            self.discard(expired);
            return Err(StoreError::AlreadyResuming);
        }
        let in_memory = match state.parked.get(run_id) {
            Some(parked) => {
                if let Err(e) = parked.checkpoint.owner.check(caller).and_then(|()| resumable(&parked.checkpoint)) {
                    drop(state);
                    self.discard(expired);
                    return Err(e);
                }
                state.parked.remove(run_id)
            }
            None => None,
        };
        state.resuming.insert(run_id.to_owned(), false);
        drop(state);
        self.discard(expired);
        let guard = Slot { inner: Arc::clone(&self.inner), kind: SlotKind::Resuming(run_id.to_owned()) };

        match in_memory {
            Some(parked) => self.resume_parked(parked, guard, &resumable),
            None => self.resume_persisted(run_id, caller, now, guard, &resumable),
        }
    }

    fn resume_parked(
        &self,
        parked: Parked<L>,
        guard: Slot<L>,
        resumable: &impl Fn(&Checkpoint) -> Result<(), StoreError>,
    ) -> Result<Resumed<L>, StoreError> {
        match self.inner.backend.take(&parked.checkpoint.run_id).and_then(|c| own(&parked.checkpoint.run_id, c)) {
            // Another process sharing the backend consumed the run (and may have finished it).
            Ok(None) => Err(StoreError::Unavailable),
            // The durable copy is newer than ours: another process resumed and re-parked the run. The live
            // attachment belongs to the older state and must not be used.
            Ok(Some(durable)) if durable.generation != parked.checkpoint.generation => {
                if durable.is_expired(self.inner.clock.now_ms()) {
                    return Err(StoreError::Unavailable);
                }
                if let Err(e) = resumable(&durable) {
                    // Not ours to resume: give the durable copy back for a caller that can.
                    self.inner.backend.put(&durable)?;
                    return Err(e);
                }
                Ok(Resumed { checkpoint: durable, live: None, restored: true, guard })
            }
            Ok(Some(_)) => Ok(Resumed { checkpoint: parked.checkpoint, live: parked.live, restored: false, guard }),
            Err(e) => {
                // Nothing was consumed: put the run back as it was.
                let mut guard = guard;
                let mut state = self.inner.lock();
                guard.spend(&mut state);
                state.parked.insert(parked.checkpoint.run_id.clone(), parked);
                Err(e)
            }
        }
    }

    fn resume_persisted(
        &self,
        run_id: &str,
        caller: &RunOwner,
        now: u64,
        guard: Slot<L>,
        resumable: &impl Fn(&Checkpoint) -> Result<(), StoreError>,
    ) -> Result<Resumed<L>, StoreError> {
        let Some(checkpoint) = own(run_id, self.inner.backend.get(run_id)?)? else {
            return Err(StoreError::Unavailable);
        };
        if checkpoint.is_expired(now) {
            let _ = self.inner.backend.delete(run_id);
            return Err(StoreError::Unavailable);
        }
        checkpoint.owner.check(caller)?;
        resumable(&checkpoint)?;
        match own(run_id, self.inner.backend.take(run_id)?)? {
            Some(checkpoint) => Ok(Resumed { checkpoint, live: None, restored: true, guard }),
            // Another process took it between our read and our claim.
            None => Err(StoreError::AlreadyResuming),
        }
    }

    /// Drops a run: a parked run is removed (memory and backend) and its live attachment handed back; a run being
    /// resumed is marked aborted so its next park fails.
    ///
    /// # Errors
    ///
    /// The backend could not delete the checkpoint.
    pub fn abort(&self, run_id: &str) -> Result<AbortOutcome<L>, StoreError> {
        if !is_valid_run_id(run_id) {
            return Ok(AbortOutcome::Unknown);
        }
        let mut state = self.inner.lock();
        let outcome = if let Some(parked) = state.parked.remove(run_id) {
            AbortOutcome::Parked { live: parked.live }
        } else if let Some(aborted) = state.resuming.get_mut(run_id) {
            *aborted = true;
            AbortOutcome::Resuming
        } else {
            AbortOutcome::Unknown
        };
        drop(state);
        let deleted = self.inner.backend.delete(run_id)?;
        Ok(match outcome {
            AbortOutcome::Unknown if deleted => AbortOutcome::Persisted,
            other => other,
        })
    }

    /// Takes the live attachment of a parked run, so its next resume replays. The run itself stays.
    pub fn evict_live(&self, run_id: &str) -> Option<L> {
        self.inner.lock().parked.get_mut(run_id).and_then(|p| p.live.take())
    }

    /// Drops runs whose TTL passed (memory and backend) and hands back their live attachments. Other operations
    /// expire runs lazily too; call this from a timer to release live workers promptly.
    pub fn expire(&self) -> Vec<Expired<L>> {
        let now = self.inner.clock.now_ms();
        let expired = self.inner.lock().take_expired(now);
        for run in &expired {
            let _ = self.inner.backend.delete(&run.run_id);
        }
        expired
    }

    /// Parked runs held in memory.
    pub fn len(&self) -> usize {
        self.inner.lock().parked.len()
    }

    /// Whether no run is parked in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the cap counts: parked runs, runs being resumed and reservations.
    pub fn occupied(&self) -> usize {
        self.inner.lock().occupied()
    }

    /// Runs parked in memory, and how many of them have a live attachment that `holds` says yes to.
    pub fn parked_counts(&self, holds: impl Fn(&L) -> bool) -> (usize, usize) {
        let state = self.inner.lock();
        (state.parked.len(), state.parked.values().filter(|p| p.live.as_ref().is_some_and(&holds)).count())
    }

    /// Whether `run_id` is parked in memory.
    pub fn contains(&self, run_id: &str) -> bool {
        self.inner.lock().parked.contains_key(run_id)
    }

    /// Whether the run behind `slot` was aborted while being resumed.
    pub fn aborted(&self, slot: &Slot<L>) -> bool {
        match &slot.kind {
            SlotKind::Resuming(id) => self.inner.lock().resuming.get(id) == Some(&true),
            _ => false,
        }
    }

    /// Deletes expired runs from the backend and drops their attachments, outside the lock.
    /// Housekeeping, for a timer: drops the runs whose TTL has passed (their live attachments and durable copies),
    /// and lets `trim` take what it wants to let go of (a worker process) from the live attachment of every run
    /// parked longer than `live_for`; what `trim` returns is dropped after the lock is released. Returns how many
    /// runs expired.
    pub fn sweep<D>(&self, live_for: std::time::Duration, mut trim: impl FnMut(&mut L) -> Option<D>) -> usize {
        let now = self.inner.clock.now_ms();
        let live_for = u64::try_from(live_for.as_millis()).unwrap_or(u64::MAX);
        let mut state = self.inner.lock();
        let expired = state.take_expired(now);
        let trimmed: Vec<D> = state
            .parked
            .values_mut()
            .filter(|p| now.saturating_sub(p.parked_at_ms) >= live_for)
            .filter_map(|p| p.live.as_mut().and_then(&mut trim))
            .collect();
        drop(state);
        drop(trimmed);
        let count = expired.len();
        self.discard(expired);
        count
    }

    fn discard(&self, expired: Vec<Expired<L>>) {
        for run in expired {
            // A failed delete is harmless: the file is expired and is refused (and deleted) when next loaded.
            let _ = self.inner.backend.delete(&run.run_id);
        }
    }
}

/// `checkpoint` if it is the checkpoint of `run_id`: whatever the backend, a run never resumes from another run's
/// checkpoint (which would run that run's remaining calls a second time).
fn own(run_id: &str, checkpoint: Option<Checkpoint>) -> Result<Option<Checkpoint>, StoreError> {
    match checkpoint {
        Some(c) if c.run_id != run_id => {
            Err(StoreError::ForeignCheckpoint { run_id: run_id.to_owned(), found: c.run_id })
        }
        other => Ok(other),
    }
}
