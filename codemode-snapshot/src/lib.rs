//! The run store of code mode: checkpoints of suspended runs (journals, not heaps), the process-wide cap of 64
//! suspended runs, TTL expiry, run/session scoping with one resume in flight per run, durable backends so a run
//! can be resumed by another process (owner-only files, sealed at rest when a state key is configured: [`seal`]),
//! the fleet backend interface a shared store (a database) implements, and the per-session `store`/`load` values.
//!
//! It does not run guest code or tools: the facade replays a checkpoint in a worker. Invariant: a run is resumed at
//! most once per checkpoint, so a tool call is never silently executed twice.

mod backend;
mod checkpoint;
mod clock;
mod error;
mod fleet;
pub mod seal;
mod session;
mod store;

pub use backend::{
    CheckpointBackend, FileBackend, MAX_CHECKPOINT_FILE_BYTES, MAX_SESSION_FILE_BYTES, MemoryBackend, STATE_DIR_MODE,
    STATE_FILE_MODE, SessionBackend,
};
pub use checkpoint::{
    AskedCall, CHECKPOINT_VERSION, CallName, Checkpoint, EffectEntry, INTERRUPTED_CODE, INTERRUPTED_MESSAGE,
    PendingRequest, ProjectedServer, Projection, RunCounters, RunOwner, YieldRequest, interrupted_settlements,
    is_valid_run_id, new_run_id,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::StoreError;
pub use fleet::{
    Accepted, Claim, DEFAULT_LEASE_MS, FleetBackend, FleetIdempotency, FleetResults, FleetRuns, FleetSessions,
    LocalFleet, MAX_RESULTS_PER_SESSION, RunChange,
};
pub use seal::{KeyError, Keyring, SealError};
pub use session::{SessionLimits, SessionStore};
pub use store::{AbortOutcome, DEFAULT_MAX_SUSPENDED_RUNS, Expired, ParkReceipt, Resumed, RunStore, Slot};
