//! `RunStore`: the suspended runs of this process, their slots under the 64-run cap, TTL expiry, scoping and the
//! one-resume-in-flight rule, written through to a [`FleetBackend`] (this process, a folder, or a database that
//! several replicas share).
//!
//! Invariants: stored runs + runs being resumed + reservations never exceed the cap at `reserve` time, nor, with an
//! owner share, those of one owner (its run scope: the session, or the gateway's principal) its share; a run is in
//! at most one of "parked" and "resuming"; `begin_resume` claims the durable copy (one holder at a time across every
//! process sharing the backend) and a park writes only over the generation it claimed, so each checkpoint is
//! resumed at most once. The lock is never held across backend I/O or while a live attachment is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use codemode_config::Limits;

use crate::{
    Checkpoint, CheckpointBackend, Claim, Clock, FleetBackend, LocalFleet, MemoryBackend, RunOwner, StoreError,
    SystemClock, is_valid_run_id,
};

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
    backend: Arc<dyn FleetBackend>,
    /// Who this store is when it claims a run: unique per store, so two replicas (or two stores in one process)
    /// never mistake each other's claims.
    holder: String,
    clock: Arc<dyn Clock>,
    max_runs: usize,
}

struct State<L> {
    parked: HashMap<String, Parked<L>>,
    /// Runs being resumed.
    resuming: HashMap<String, Resuming>,
    reservations: usize,
    /// Reservations by owner (scope key), for the owner share.
    reserved_by: HashMap<String, usize>,
    /// The places one owner may hold ([`RunStore::set_owner_share`]); `None`: any number up to the cap.
    owner_share: Option<usize>,
}

/// A run being resumed: whether it was aborted meanwhile, and whose it is (scope key).
struct Resuming {
    aborted: bool,
    owner: String,
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

    /// The places `owner` (a scope key) holds: its parked runs, its runs being resumed and its reservations.
    fn occupied_by(&self, owner: &str) -> usize {
        let parked = self.parked.values().filter(|p| scope_of(&p.checkpoint.owner) == owner).count();
        let resuming = self.resuming.values().filter(|r| r.owner == owner).count();
        parked + resuming + self.reserved_by.get(owner).copied().unwrap_or(0)
    }

    fn is_aborted(&self, run_id: &str) -> bool {
        self.resuming.get(run_id).is_some_and(|r| r.aborted)
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
    /// The task renewing the claim's lease while the run is resumed, for a backend whose leases expire.
    renewal: Option<tokio::task::AbortHandle>,
}

enum SlotKind {
    /// A reservation of the owner with this scope key.
    Reserved(String),
    /// A run being resumed: its id, the generation claimed (what its next park must write over), when it first
    /// parked, and whether the backend claim is held (so dropping the slot finishes the run there).
    Resuming {
        run_id: String,
        generation: u32,
        created_at_ms: u64,
        claimed: bool,
    },
    Spent,
}

impl<L> Slot<L> {
    /// The run being resumed, for a slot from [`RunStore::begin_resume`].
    pub fn run_id(&self) -> Option<&str> {
        match &self.kind {
            SlotKind::Resuming { run_id, .. } => Some(run_id),
            _ => None,
        }
    }

    /// Frees the slot now (the same as dropping it).
    pub fn release(self) {}

    /// Frees the place under the cap; returns the run id and whether its backend claim is still held.
    fn spend(&mut self, state: &mut State<L>) -> Option<(String, bool)> {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
        match std::mem::replace(&mut self.kind, SlotKind::Spent) {
            SlotKind::Reserved(owner) => {
                state.reservations = state.reservations.saturating_sub(1);
                if let Some(n) = state.reserved_by.get_mut(&owner) {
                    *n -= 1;
                    if *n == 0 {
                        state.reserved_by.remove(&owner);
                    }
                }
                None
            }
            SlotKind::Resuming { run_id, claimed, .. } => {
                state.resuming.remove(&run_id);
                Some((run_id, claimed))
            }
            SlotKind::Spent => None,
        }
    }
}

impl<L> Drop for Slot<L> {
    fn drop(&mut self) {
        if !matches!(self.kind, SlotKind::Spent) {
            let inner = Arc::clone(&self.inner);
            let spent = self.spend(&mut inner.lock());
            // A resumed run whose slot is dropped has ended (completed, failed or cancelled): it leaves the backend.
            if let Some((run_id, true)) = spent {
                inner.backend.finish_detached(run_id, inner.holder.clone());
            }
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
    /// A store writing through to `backend` (kept by this process: runs, claims and wake-ups; session values in
    /// memory), reading time from `clock`, capped at 64 runs.
    pub fn new(backend: Arc<dyn CheckpointBackend>, clock: Arc<dyn Clock>) -> Self {
        RunStore::with_max_runs(backend, clock, DEFAULT_MAX_SUSPENDED_RUNS)
    }

    /// A store with another cap than the reference's 64.
    pub fn with_max_runs(backend: Arc<dyn CheckpointBackend>, clock: Arc<dyn Clock>, max_runs: usize) -> Self {
        let fleet = LocalFleet::new(backend, Arc::new(MemoryBackend::new()));
        RunStore::fleet(Arc::new(fleet), clock, max_runs)
    }

    /// A store over a fleet backend (shared with other processes or not), capped at `max_runs` runs in this
    /// process.
    pub fn fleet(backend: Arc<dyn FleetBackend>, clock: Arc<dyn Clock>, max_runs: usize) -> Self {
        let state = State {
            parked: HashMap::new(),
            resuming: HashMap::new(),
            reservations: 0,
            reserved_by: HashMap::new(),
            owner_share: None,
        };
        let holder = format!("{}:{}", std::process::id(), uuid::Uuid::new_v4().simple());
        RunStore { inner: Arc::new(Inner { state: Mutex::new(state), backend, holder, clock, max_runs }) }
    }

    /// A store with a [`MemoryBackend`] and the system clock: nothing survives the process.
    pub fn in_memory() -> Self {
        RunStore::new(Arc::new(MemoryBackend::new()), Arc::new(SystemClock))
    }

    /// The durable backend.
    pub fn backend(&self) -> &Arc<dyn FleetBackend> {
        &self.inner.backend
    }

    /// Who this store is when it claims a run.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// The cap on stored runs plus reservations.
    pub fn max_runs(&self) -> usize {
        self.inner.max_runs
    }

    /// Gives each owner (run scope: the session, or the gateway's authenticated principal) at most `share` of the
    /// places under the cap, so that one owner cannot take them all; `None` (the default) lets any owner take up to
    /// the cap. Runs already held are kept; the share applies to the next [`reserve_for`](Self::reserve_for).
    pub fn set_owner_share(&self, share: Option<usize>) {
        self.inner.lock().owner_share = share;
    }

    /// The places one owner may hold, if the store shares them out.
    pub fn owner_share(&self) -> Option<usize> {
        self.inner.lock().owner_share
    }

    /// Deletes expired checkpoints from the backend; call it once at start. Files that cannot be decoded or opened
    /// with the configured state keys are left in place.
    /// Returns how many were deleted.
    ///
    /// # Errors
    ///
    /// The backend could not be listed, or a file could not be read or deleted.
    pub async fn prune_backend(&self) -> Result<usize, StoreError> {
        Ok(self.inner.backend.sweep(self.inner.clock.now_ms()).await?.len())
    }

    /// Reserves a place for a run without an owner (no session) that may park; see
    /// [`reserve_for`](Self::reserve_for).
    ///
    /// # Errors
    ///
    /// As [`reserve_for`](Self::reserve_for).
    pub fn reserve(&self) -> Result<Slot<L>, StoreError> {
        self.reserve_for(&RunOwner::default())
    }

    /// Reserves a place for a run of `owner` that may park; the reference reserves when the first bridge call is
    /// dispatched.
    ///
    /// # Errors
    ///
    /// `TooManyRuns` (`too many suspended code mode runs.`) when stored runs, runs being resumed and reservations
    /// reach the cap; `TooManyRunsForOwner` when, with an owner share, the owner's own reach its share (checked
    /// first, so an owner over its share is told so even when the store is also full).
    pub fn reserve_for(&self, owner: &RunOwner) -> Result<Slot<L>, StoreError> {
        let now = self.inner.clock.now_ms();
        let owner = scope_of(owner);
        let mut state = self.inner.lock();
        let expired = state.take_expired(now);
        let result = match state.owner_share {
            Some(share) if state.occupied_by(owner) >= share => {
                Err(StoreError::TooManyRunsForOwner { share, cap: self.inner.max_runs })
            }
            _ if state.occupied() >= self.inner.max_runs => Err(StoreError::TooManyRuns),
            _ => {
                state.reservations += 1;
                *state.reserved_by.entry(owner.to_owned()).or_insert(0) += 1;
                Ok(Slot { inner: Arc::clone(&self.inner), kind: SlotKind::Reserved(owner.to_owned()), renewal: None })
            }
        };
        drop(state);
        self.discard(expired);
        result
    }

    /// Parks a run: stamps the checkpoint (`created_at_ms` when it first parked, `expires_at_ms = now +
    /// snapshotTtlSeconds`, the generation after the one the slot claimed), checks it against `maxSnapshotBytes`,
    /// writes it to the backend over the generation the slot claimed (compare-and-set) and keeps it (with `live`)
    /// in memory. The slot becomes the stored run.
    ///
    /// A resumed run parks again under the same run id with the next generation. On error the slot is freed (the
    /// run is gone) and `live` is dropped.
    ///
    /// # Errors
    ///
    /// `SnapshotTooLarge` past `maxSnapshotBytes`; `InvalidRunId` for a run id that is not `cm_<uuid>`;
    /// `Unavailable` when the run was aborted while being resumed; `Stale` when another resumer changed the run
    /// since this one claimed it; a backend error when it could not be written.
    ///
    /// # Panics
    ///
    /// When `slot` comes from another store (a bug in the caller).
    pub async fn park(
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
        let (expected, created_at_ms) = match &slot.kind {
            SlotKind::Resuming { generation, created_at_ms, .. } => (*generation, *created_at_ms),
            _ => (0, 0),
        };
        let now = self.inner.clock.now_ms();
        checkpoint.created_at_ms = if created_at_ms != 0 { created_at_ms } else { now };
        let ttl_ms = self.inner.backend.ttl_ms().unwrap_or(limits.snapshot_ttl_seconds.saturating_mul(1000));
        checkpoint.expires_at_ms = now.saturating_add(ttl_ms);
        checkpoint.generation = expected.wrapping_add(1).max(1);
        let encoded_len = checkpoint.check_size(limits.max_snapshot_bytes)?;
        let scope = checkpoint.owner.scope_key();
        if let Err(e) = self.inner.backend.put(&checkpoint, expected, &self.inner.holder, &scope).await {
            if matches!(e, StoreError::Stale { .. }) {
                // Not ours any more: the slot is freed without finishing the run another resumer holds.
                slot.spend(&mut self.inner.lock());
            }
            return Err(e);
        }

        let receipt =
            ParkReceipt { encoded_len, expires_at_ms: checkpoint.expires_at_ms, generation: checkpoint.generation };
        let run_id = checkpoint.run_id.clone();
        if let Err(live) = self.keep_parked(&mut slot, checkpoint, live, now) {
            // Aborted while the checkpoint was being written: undo the write.
            drop(live);
            let _ = self.inner.backend.delete(&run_id).await;
            return Err(StoreError::Unavailable);
        }
        Ok(receipt)
    }

    /// Turns `slot` into the parked run in memory, or hands `live` back when the run was aborted meanwhile.
    fn keep_parked(
        &self,
        slot: &mut Slot<L>,
        checkpoint: Checkpoint,
        live: Option<L>,
        now: u64,
    ) -> Result<(), Option<L>> {
        let mut state = self.inner.lock();
        if matches!(&slot.kind, SlotKind::Resuming { run_id: id, .. } if state.is_aborted(id)) {
            slot.spend(&mut state);
            return Err(live);
        }
        slot.spend(&mut state);
        let replaced = state.parked.insert(checkpoint.run_id.clone(), Parked { checkpoint, live, parked_at_ms: now });
        let expired = state.take_expired(now);
        drop(state);
        drop(replaced);
        self.discard(expired);
        Ok(())
    }

    /// Hands a parked run to its resumer, after checking it exists, has not expired, belongs to `caller` and is not
    /// already being resumed (here or by another process sharing the backend). Claims the durable copy: no one else
    /// resumes it until the resumer parks it again, finishes (drops the slot) or its lease expires.
    ///
    /// A run this process does not hold in memory, or holds at an older generation than the backend's (another
    /// process resumed it since), comes back with `restored: true` and no live attachment: it resumes by replay.
    ///
    /// # Errors
    ///
    /// `Unavailable` (unknown, expired, finished or malformed id), `DifferentAgentRun`, `DifferentSession`,
    /// `AlreadyResuming`, or a backend error. A scoping error leaves the run in place.
    pub async fn begin_resume(&self, run_id: &str, caller: &RunOwner) -> Result<Resumed<L>, StoreError> {
        self.begin_resume_if(run_id, caller, |_| Ok(())).await
    }

    /// [`RunStore::begin_resume`] for a resumer that can resume only some checkpoints: `resumable` sees the
    /// checkpoint after the scope check and before it is kept, and a refusal leaves the run in place (for a caller
    /// that can resume it) until its TTL.
    ///
    /// # Errors
    ///
    /// Those of [`RunStore::begin_resume`], and the error `resumable` returns.
    pub async fn begin_resume_if(
        &self,
        run_id: &str,
        caller: &RunOwner,
        resumable: impl Fn(&Checkpoint) -> Result<(), StoreError>,
    ) -> Result<Resumed<L>, StoreError> {
        if !is_valid_run_id(run_id) {
            return Err(StoreError::Unavailable);
        }
        let now = self.inner.clock.now_ms();
        let in_memory = self.start_resume(run_id, caller, &resumable, now)?;
        let kind = SlotKind::Resuming { run_id: run_id.to_owned(), generation: 0, created_at_ms: 0, claimed: false };
        let mut guard = Slot { inner: Arc::clone(&self.inner), kind, renewal: None };

        let claim = self.inner.backend.claim(run_id, &self.inner.holder, now).await;
        let checkpoint = match claim.and_then(|c| own_claim(run_id, c)) {
            Ok(Claim::Claimed(checkpoint)) => *checkpoint,
            Ok(Claim::Held { .. }) => {
                self.forget(guard, in_memory);
                return Err(StoreError::AlreadyResuming);
            }
            // Finished, aborted or expired elsewhere: a live attachment here belongs to a run that is gone.
            Ok(Claim::Missing) => {
                self.forget(guard, None);
                return Err(StoreError::Unavailable);
            }
            Err(e) => {
                // Nothing was claimed: put the run back as it was.
                self.forget(guard, in_memory);
                return Err(e);
            }
        };
        guard.kind = SlotKind::Resuming {
            run_id: run_id.to_owned(),
            generation: checkpoint.generation,
            created_at_ms: checkpoint.created_at_ms,
            claimed: true,
        };
        let refused = match &in_memory {
            // Our copy is current: the scope and catalog were checked above.
            Some(parked) if parked.checkpoint.generation == checkpoint.generation => None,
            _ => checkpoint.owner.check(caller).and_then(|()| resumable(&checkpoint)).err(),
        };
        if let Some(e) = refused {
            // Not ours to resume: give the claim back for a caller that can.
            self.release(guard).await;
            return Err(e);
        }
        self.start_renewal(&mut guard);
        match in_memory {
            Some(parked) if parked.checkpoint.generation == checkpoint.generation => {
                Ok(Resumed { checkpoint: parked.checkpoint, live: parked.live, restored: false, guard })
            }
            // The durable copy is newer than ours: another process resumed and re-parked the run. The live
            // attachment belongs to the older state and must not be used.
            _ => Ok(Resumed { checkpoint, live: None, restored: true, guard }),
        }
    }

    /// Ends a resumed run that completed or failed: frees its slot and deletes it from the backend (what dropping
    /// the slot does in a task; this waits for it, so the run is gone everywhere before its result is returned).
    pub async fn finish(&self, mut slot: Slot<L>) {
        let spent = slot.spend(&mut self.inner.lock());
        if let Some((run_id, true)) = spent {
            // A failed delete leaves the run for its TTL; it can no longer be claimed by this holder's next park.
            let _ = self.inner.backend.finish(&run_id, &self.inner.holder).await;
        }
    }

    /// Whether a run resumed under `slot` writes its checkpoint before each dispatch ([`RunStore::record`]): when it
    /// holds a claim in a backend whose leases expire, so that a replica taking the run over after this one died
    /// knows which calls were in flight.
    pub fn records(&self, slot: &Slot<L>) -> bool {
        matches!(slot.kind, SlotKind::Resuming { claimed: true, .. }) && self.inner.backend.lease_ms().is_some()
    }

    /// Writes the checkpoint of a run being resumed under `slot` without ending its claim (a write-ahead record of
    /// what it is about to do); the generation stays the one claimed.
    ///
    /// # Errors
    ///
    /// `Stale` when the claim was lost (the lease expired and another resumer took the run), `SnapshotTooLarge`,
    /// or a backend error.
    pub async fn record(&self, slot: &Slot<L>, mut checkpoint: Checkpoint, limits: &Limits) -> Result<(), StoreError> {
        let SlotKind::Resuming { generation, created_at_ms, claimed: true, .. } = &slot.kind else {
            return Ok(());
        };
        let now = self.inner.clock.now_ms();
        checkpoint.generation = *generation;
        checkpoint.created_at_ms = if *created_at_ms != 0 { *created_at_ms } else { now };
        let ttl_ms = self.inner.backend.ttl_ms().unwrap_or(limits.snapshot_ttl_seconds.saturating_mul(1000));
        checkpoint.expires_at_ms = now.saturating_add(ttl_ms);
        checkpoint.check_size(limits.max_snapshot_bytes)?;
        self.inner.backend.save(&checkpoint, &self.inner.holder).await
    }

    /// Marks `run_id` as being resumed here and takes its parked copy out of memory, after the checks that need no
    /// backend: not already resuming here, and (for a copy in memory) the caller's scope and `resumable`.
    fn start_resume(
        &self,
        run_id: &str,
        caller: &RunOwner,
        resumable: &impl Fn(&Checkpoint) -> Result<(), StoreError>,
        now: u64,
    ) -> Result<Option<Parked<L>>, StoreError> {
        let mut state = self.inner.lock();
        let expired = state.take_expired(now);
        let result = if state.resuming.contains_key(run_id) {
            Err(StoreError::AlreadyResuming)
        } else {
            match state.parked.get(run_id) {
                Some(parked) => {
                    match parked.checkpoint.owner.check(caller).and_then(|()| resumable(&parked.checkpoint)) {
                        Err(e) => Err(e),
                        Ok(()) => Ok(state.parked.remove(run_id)),
                    }
                }
                None => Ok(None),
            }
        };
        if result.is_ok() {
            state.resuming.insert(run_id.to_owned(), Resuming { aborted: false, owner: scope_of(caller).to_owned() });
        }
        drop(state);
        self.discard(expired);
        result
    }

    /// Frees a resuming slot that claimed nothing, putting back the run it took from memory (if any).
    fn forget(&self, mut guard: Slot<L>, parked: Option<Parked<L>>) {
        let mut state = self.inner.lock();
        guard.spend(&mut state);
        if let Some(parked) = parked {
            state.parked.insert(parked.checkpoint.run_id.clone(), parked);
        }
    }

    /// Gives a claim back to the backend unchanged.
    async fn release(&self, mut guard: Slot<L>) {
        let spent = guard.spend(&mut self.inner.lock());
        if let Some((run_id, true)) = spent {
            // A failed release leaves the claim to expire with its lease.
            let _ = self.inner.backend.release(&run_id, &self.inner.holder).await;
        }
    }

    /// Keeps the claim's lease alive while the run is resumed, for a backend whose leases expire.
    fn start_renewal(&self, guard: &mut Slot<L>) {
        let (Some(lease_ms), Ok(runtime)) = (self.inner.backend.lease_ms(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let Some(run_id) = guard.run_id().map(str::to_owned) else { return };
        let inner = Arc::downgrade(&self.inner);
        let every = std::time::Duration::from_millis((lease_ms / 3).max(1));
        let task = runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = inner.upgrade() else { return };
                let now = inner.clock.now_ms();
                // A renewal that fails (the database is briefly away) is tried again; one that finds the claim gone
                // stops: the next park then fails its compare-and-set.
                if let Ok(false) = inner.backend.renew(&run_id, &inner.holder, now).await {
                    return;
                }
            }
        });
        guard.renewal = Some(task.abort_handle());
    }

    /// Drops a run: a parked run is removed (memory and backend) and its live attachment handed back; a run being
    /// resumed here is marked aborted so its next park fails; a run held by another process is deleted, so that
    /// process's next park fails.
    ///
    /// # Errors
    ///
    /// The backend could not delete the checkpoint.
    pub async fn abort(&self, run_id: &str) -> Result<AbortOutcome<L>, StoreError> {
        if !is_valid_run_id(run_id) {
            return Ok(AbortOutcome::Unknown);
        }
        let outcome = self.abort_here(run_id);
        let deleted = self.inner.backend.delete(run_id).await?;
        Ok(match outcome {
            AbortOutcome::Unknown if deleted => AbortOutcome::Persisted,
            other => other,
        })
    }

    /// The part of [`RunStore::abort`] in this process's memory.
    fn abort_here(&self, run_id: &str) -> AbortOutcome<L> {
        let mut state = self.inner.lock();
        if let Some(parked) = state.parked.remove(run_id) {
            AbortOutcome::Parked { live: parked.live }
        } else if let Some(resuming) = state.resuming.get_mut(run_id) {
            resuming.aborted = true;
            AbortOutcome::Resuming
        } else {
            AbortOutcome::Unknown
        }
    }

    /// Takes the live attachment of a parked run, so its next resume replays. The run itself stays.
    pub fn evict_live(&self, run_id: &str) -> Option<L> {
        self.inner.lock().parked.get_mut(run_id).and_then(|p| p.live.take())
    }

    /// Forgets this process's copy of a run that another process changed (a wake-up): its live attachment, if
    /// its generation is older than `generation` (0: the run is gone), is handed back.
    pub fn changed_elsewhere(&self, run_id: &str, generation: u32) -> Option<L> {
        let mut state = self.inner.lock();
        let stale = state.parked.get(run_id).is_some_and(|p| generation == 0 || p.checkpoint.generation < generation);
        if !stale {
            return None;
        }
        state.parked.remove(run_id).and_then(|p| p.live)
    }

    /// Drops runs whose TTL passed (memory and backend) and hands back their live attachments. Other operations
    /// expire runs lazily too; call this from a timer to release live workers promptly.
    pub async fn expire(&self) -> Vec<Expired<L>> {
        let now = self.inner.clock.now_ms();
        let expired = self.inner.lock().take_expired(now);
        for run in &expired {
            let _ = self.inner.backend.delete(&run.run_id).await;
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
            SlotKind::Resuming { run_id, .. } => self.inner.lock().is_aborted(run_id),
            _ => false,
        }
    }

    /// Housekeeping, for a timer: drops the runs whose TTL has passed (their live attachments and durable copies,
    /// including those parked by other processes sharing the backend), and lets `trim` take what it wants to let
    /// go of (a worker process) from the live attachment of every run parked longer than `live_for`; what `trim`
    /// returns is dropped after the lock is released. Returns how many runs expired here.
    pub async fn sweep<D>(&self, live_for: std::time::Duration, trim: impl FnMut(&mut L) -> Option<D>) -> usize {
        let now = self.inner.clock.now_ms();
        let count = self.sweep_here(now, live_for, trim);
        // Runs parked elsewhere expire here too; a failed sweep is tried again on the next tick.
        let _ = self.inner.backend.sweep(now).await;
        count
    }

    /// The part of [`RunStore::sweep`] that touches only this process's runs (no lock is held across an await).
    fn sweep_here<D>(
        &self,
        now: u64,
        live_for: std::time::Duration,
        mut trim: impl FnMut(&mut L) -> Option<D>,
    ) -> usize {
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

    /// Deletes expired runs from the backend and drops their attachments, outside the lock.
    fn discard(&self, expired: Vec<Expired<L>>) {
        for run in expired {
            // A failed delete is harmless: the run is expired and is refused (and deleted) when next claimed.
            self.inner.backend.delete_detached(run.run_id);
        }
    }
}

/// The scope key of `owner` (what [`RunOwner::scope_key`] returns), borrowed.
fn scope_of(owner: &RunOwner) -> &str {
    owner.session_id.as_deref().unwrap_or("")
}

/// A claim of `run_id` that hands back another run's checkpoint is refused: whatever the backend, a run never
/// resumes from another run's checkpoint (which would run that run's remaining calls a second time).
fn own_claim(run_id: &str, claim: Claim) -> Result<Claim, StoreError> {
    match claim {
        Claim::Claimed(c) => own(run_id, Some(*c)).map(|c| c.map_or(Claim::Missing, |c| Claim::Claimed(Box::new(c)))),
        other => Ok(other),
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
