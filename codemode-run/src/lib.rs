//! Driving a run: the run as a sans-IO state machine ([`machine`]), its async driver over a [`Cell`] (`exec`,
//! `wait`, `abort`), and the dispatch of bridge requests. The facade builds an [`Inner`] context and calls in here.
//!
//! It does not parse the model's input (the surface does) nor build the catalog or the pool (the facade does).
//! Invariant: guest failures come back as `failed` results, never as `Err`; a suspended run is parked or fails.

mod activity;
mod dispatch;
pub mod machine;
mod projection;
mod results;
mod run;
mod scope;
mod trace;

use std::sync::Arc;

use codemode_bridge::{ApprovalDecision, Approver, ProgressHook, ToolHost};
use codemode_catalog::Catalog;
use codemode_config::Limits;
use codemode_snapshot::{Clock, Projection, RunStore, SessionStore};
use codemode_vm::pool::WorkerPool;
use codemode_vm::protocol::StartGlobals;

pub use activity::ActivityConfig;
pub use projection::{guest_globals, projected_globals, projection_of};
pub use results::ResultStore;
pub use run::{
    Cell, LiveRun, Waits, abort, cancelled, end_agent_run, end_session, exec, exec_on, exec_with, input_failure,
    start_listener, start_sweeper, wait, wait_with,
};
pub use scope::{CatalogScope, CatalogScopes, MAX_SCOPES};

/// Who is calling: runs are scoped to their session and agent run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunScope {
    /// The session the run belongs to; also the namespace of `store`/`load`.
    pub session_id: Option<String>,
    /// The agent that runs it.
    pub agent_id: Option<String>,
    /// The agent run (turn).
    pub agent_run_id: Option<String>,
    /// The session id names an authenticated principal (the gateway's `[auth]`): a `wait` on a run another owner
    /// holds then fails exactly as a `wait` on an unknown run, so a caller cannot learn that the run exists.
    pub authenticated: bool,
}

/// Everything a run reads from its engine: limits, catalog, tool host, worker pool and stores.
pub struct Inner {
    /// The limits every run obeys.
    pub limits: Limits,
    /// The tool catalog.
    pub catalog: Catalog,
    /// Runs the tools the guest calls.
    pub host: Arc<dyn ToolHost>,
    /// The worker processes.
    pub pool: Arc<WorkerPool>,
    /// The catalog's globals, which each cell's `Start` carries when `pool`'s workers serve several catalogs (the
    /// engine's per-call catalogs share one pool), keyed so that a worker prepares them once; `None` when the pool's
    /// workers build every context with them.
    pub globals: Option<StartGlobals>,
    /// Parked runs; a clone of the engine's store in the `Inner` of a per-run catalog.
    pub runs: RunStore<LiveRun>,
    /// The session store behind `store`/`load`.
    pub sessions: SessionStore,
    /// The digest of the catalog's callable names; a run parked under another catalog is not resumed.
    pub tools_digest: String,
    /// The catalog's callable names ([`projection_of`]), which a run's checkpoint carries.
    pub projection: Arc<Projection>,
    /// Whether a parked run drops its worker, so every `wait` resumes by replay.
    pub replay_on_resume: bool,
    /// The places for parked runs that keep their worker process (a worker holds its engine's memory until the
    /// live window ends); a run parking when none is free stops its worker and resumes by replay. `None`: no cap.
    pub live_places: Option<Arc<tokio::sync::Semaphore>>,
    /// Oversized final values kept for `results.load`; shared by the engine's per-run catalogs.
    pub results: Arc<ResultStore>,
    /// The clock of deadlines, park times and the guest's virtual clock.
    pub clock: Arc<dyn Clock>,
    /// Where a new run's `Math.random` seed comes from.
    pub entropy: Arc<dyn Entropy>,
    /// What the cells of each run catalog share: cumulative counters and the sequential tools' schedule. The
    /// engine's per-run catalogs (client tools) share it, so appending tools keeps a run's counter scope.
    pub scopes: Arc<CatalogScopes>,
    /// Receives the progress the tool host reports for nested calls, if the embedder set it.
    pub progress: Option<ProgressHook>,
    /// The waits in progress, which `abort` stops.
    pub waits: Arc<Waits>,
    /// The cap the journals of all this engine's live runs share (each run also has its own, `maxSnapshotBytes`).
    pub journals: Arc<codemode_bridge::SharedBytes>,
    /// Decides the calls the tool policy (the catalog's) says to ask about, unless an `exec`/`wait` brings its own.
    pub approver: Option<Arc<dyn Approver>>,
    /// Masks what people are shown: activity previews, approval and effect previews, the source of a run.
    pub redactor: Arc<codemode_telemetry::Redactor>,
    /// The bounds of each run's activity and the engine's activity hook.
    pub activity: ActivityConfig,
}

/// What one `exec` or `wait` brings besides its input: who decides the calls that need approval, the answers to
/// approvals a parked run is waiting for, and the program's title (shown to the person asked).
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Decides approvals during this call; the engine's approver when `None`.
    pub approver: Option<Arc<dyn Approver>>,
    /// Answers to pending approvals, by call id (`bridge:callValue:3`).
    pub answers: Vec<(String, ApprovalDecision)>,
    /// The `exec`'s title.
    pub title: Option<String>,
    /// The `exec`'s idempotency key: an `exec` whose key the store already accepted (in this scope) returns that
    /// run's result, or its current state, instead of running the program again.
    pub idempotency_key: Option<String>,
    /// Receives this call's activity events (besides the engine's hook).
    pub activity: Option<codemode_telemetry::ActivityHook>,
    /// Whether the result's JSON carries its activity (the library caller has it either way).
    pub activity_in_json: bool,
    /// A `wait`'s budget: how long it may hold a run whose program waits on host work (ms); `None` holds nothing
    /// (an `exec`, or a caller that wants the run back at its park time).
    pub max_wait_ms: Option<u64>,
    /// Whether each of the run's activity events restarts the wait budget: the caller turns them into progress
    /// notifications, which keep its client's request alive.
    pub progress_keeps_waiting: bool,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("approver", &self.approver.is_some())
            .field("answers", &self.answers)
            .field("title", &self.title)
            .field("idempotency_key", &self.idempotency_key)
            .field("activity", &self.activity.is_some())
            .field("activity_in_json", &self.activity_in_json)
            .field("max_wait_ms", &self.max_wait_ms)
            .field("progress_keeps_waiting", &self.progress_keeps_waiting)
            .finish()
    }
}

/// The source of a new run's seed, behind a trait so tests can pin it.
pub trait Entropy: Send + Sync + 'static {
    /// A fresh seed.
    fn seed(&self) -> u64;
}

/// Seeds from the operating system's randomness (through a v4 uuid).
#[derive(Clone, Copy, Debug, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn seed(&self) -> u64 {
        let bytes = *uuid::Uuid::new_v4().as_bytes();
        u64::from_le_bytes(bytes[..8].try_into().expect("a uuid has 16 bytes"))
    }
}

/// What `exec` runs, once the surface has validated the model's input.
#[derive(Clone, Debug)]
pub struct ExecInput {
    /// The program, as the model wrote it (JavaScript or TypeScript).
    pub code: String,
    /// Whether the cell may call only replay-safe tools.
    pub restart_safe: bool,
    /// Whether the cell waits for its tool calls up to the deadline instead of parking before it.
    pub await_results: bool,
}
