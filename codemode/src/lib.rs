//! Code mode for LLM agents: the model sees `exec` and `wait`; a model-written JavaScript (or TypeScript) program
//! runs in a supervised worker process where every hidden tool is an async global.
//!
//! This facade composes the lower crates into [`CodeMode`] (`surface`, `exec`, `wait`, `abort`) and exports what an
//! embedder names: the engine and its builder, tool definitions and the host that runs them, results, limits,
//! policy and approvals, activity, the worker processes, and the stores (in [`store`]); the lower crates themselves
//! stay the workspace's own. It builds the engine and checks the model's input through the surface; driving a run,
//! dispatching its bridge requests and keeping its results is `codemode-run`'s, and the only logic of its own besides
//! the builder is activation (`activation`: whether code mode owns the tool surface). Invariant: guest
//! failures come back as `failed` results, never as `Err`, and a suspended run is never dropped silently.
//!
//! ```no_run
//! use std::sync::Arc;
//! use codemode::{CallContext, CodeMode, RunScope, ToolDefinition, ToolError, ToolHost};
//!
//! struct Host;
//! #[async_trait::async_trait]
//! impl ToolHost for Host {
//!     async fn call_tool(&self, tool: &str, args: serde_json::Value, _: CallContext)
//!         -> Result<serde_json::Value, ToolError> {
//!         Ok(serde_json::json!({ "tool": tool, "args": args }))
//!     }
//! }
//!
//! # async fn demo() -> Result<(), codemode::Error> {
//! let tools = vec![ToolDefinition::new("ping", "Answers pong", serde_json::json!({ "type": "object" })).replay_safe(true)];
//! let code_mode = CodeMode::builder().tools(tools).host(Arc::new(Host)).build()?;
//! let result = code_mode
//!     .exec(serde_json::json!({ "title": "Ping once", "code": "return await ping({})" }), RunScope::default())
//!     .await;
//! println!("{}", serde_json::to_string(&result).unwrap());
//! # Ok(()) }
//! ```

// README's Rust snippet (the embedding example) is compiled as a doctest of this crate.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

mod activation;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// What an embedder names, and nothing else: the lower crates stay the workspace's own (ARCHITECTURE.md).

// The engine and the model's tools.
pub use activation::{ModelTools, model_tools};
pub use codemode_catalog::{Catalog, CatalogError, ExecutionMode, ToolDefinition, ToolSource};
pub use codemode_run::{RunOptions, RunScope};
pub use codemode_surface::{Language, SurfaceError, ToolSpec};
// The host that runs the tools.
pub use codemode_bridge::{AbortSignal, CallContext, CallProgress, ProgressHook, ToolError, ToolHost};
// What a cell or a wait returns.
pub use codemode_bridge::{
    CallCounts, CodeModeResult, Completed, EffectFacts, EffectStatus, ErrorCode, ErrorKind, Failed, FailurePhase,
    OutputItem, PendingApproval, PendingToolCall, TRUNCATION_GUIDANCE, UNTRUSTED_WARNING, WaitReason, Waiting,
    WriteEffect, model_text_of,
};
// Limits, policy and approvals.
pub use codemode_bridge::{ApprovalDecision, ApprovalRequest, Approver};
pub use codemode_config::{
    ConfigError, Decision, EffectClass, Limits, Policy, Resolution, RunFacts, resolve, resolve_with_fallbacks,
};
// Activity, redaction and telemetry.
pub use codemode_telemetry::{
    Activity, ActivityEvent, ActivityHook, ActivityLimits, CallEffect, CallProgressEvent, CallRecord, CallStart,
    CallStatus, CellStart, InputKind, Redactor, Telemetry,
};
// The keys that seal the state directory.
pub use codemode_snapshot::Keyring;
// The worker processes.
pub use codemode_vm::confine::Confinement;
pub use codemode_vm::pool::{PoolError, WorkerCommand};
pub use codemode_vm::protocol::{FastPaths, PROTOCOL_VERSION};
/// The worker's side: a binary that is its own worker calls [`worker::run_worker`] first thing in `main` and installs
/// [`worker::CountingAlloc`] as its global allocator.
pub use codemode_worker::worker;

/// Where suspended runs, session values and results are kept ([`CodeModeBuilder::store`],
/// [`CodeModeBuilder::state_dir`]), and the clock their deadlines are read on ([`CodeModeBuilder::clock`]).
pub mod store {
    pub use codemode_snapshot::{
        Accepted, Clock, DEFAULT_LEASE_MS, DEFAULT_MAX_SUSPENDED_RUNS, FileBackend, FleetBackend, FleetIdempotency,
        FleetResults, FleetRuns, FleetSessions, KeyError, Keyring, LocalFleet, ManualClock, StoreError, SystemClock,
    };
}

use codemode_catalog::CatalogOptions;
use codemode_snapshot::{
    DEFAULT_MAX_SUSPENDED_RUNS, FileBackend, FleetBackend, LocalFleet, RunStore, SessionStore, SystemClock,
};
use codemode_vm::pool::{PoolConfig, WorkerPool};

use codemode_run::Inner;

/// Errors building a [`CodeMode`]. Guest failures are never errors: they are `failed` results.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The tool catalog could not be built.
    #[error("the tool catalog could not be built: {0}")]
    Catalog(#[from] CatalogError),
    /// No worker could be found or started; code mode fails closed.
    #[error("the code mode runtime cannot start: {0}")]
    Runtime(#[from] PoolError),
    /// The state directory could not be opened.
    #[error("the code mode state directory could not be opened: {0}")]
    State(#[from] store::StoreError),
    /// No tool host was given.
    #[error("a ToolHost is required: call CodeModeBuilder::host")]
    NoHost,
    /// The `tools.codeMode` config is invalid.
    #[error("invalid code mode config: {0}")]
    Config(#[from] ConfigError),
    /// The provider payload broke the code mode contract; the run fails closed.
    #[error("code mode payload check failed: {0}")]
    Surface(#[from] SurfaceError),
}

/// A snapshot of what a [`CodeMode`] holds, for operators and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineStats {
    /// Runs parked in this process.
    pub parked_runs: usize,
    /// Parked runs that still keep their worker process (they resume without replay).
    pub parked_with_worker: usize,
    /// Worker processes idle in the pool.
    pub idle_workers: usize,
    /// Cells (and resumes that needed a worker) that found no idle worker and waited for one to start.
    pub spawn_waits: u64,
    /// Cells that found as many cells computing as [`CodeModeBuilder::max_running_cells`] allows and queued.
    pub admission_waits: u64,
    /// Worker processes idle in the pool the per-call catalogs share ([`ExecOptions`]).
    pub per_call_idle_workers: usize,
    /// Cells of per-call catalogs that found no idle worker in their shared pool and waited for one to start.
    pub per_call_spawn_waits: u64,
    /// The engine's fast paths, as the worker checked by [`CodeModeBuilder::build`] announced them.
    pub fast_paths: FastPaths,
}

/// Builds a [`CodeMode`].
#[derive(Default)]
pub struct CodeModeBuilder {
    limits: Limits,
    tools: Vec<ToolDefinition>,
    denied: Vec<String>,
    host: Option<Arc<dyn ToolHost>>,
    state_dir: Option<PathBuf>,
    store: Option<Arc<dyn FleetBackend>>,
    worker: Option<WorkerCommand>,
    warm_workers: Option<usize>,
    max_idle_workers: Option<usize>,
    idle_worker_ttl: Option<Duration>,
    max_running_cells: Option<usize>,
    confinement: Confinement,
    replay_on_resume: bool,
    live_window: Option<Duration>,
    max_live_parked: Option<usize>,
    max_suspended_runs_per_owner: Option<usize>,
    require_fast_paths: bool,
    host_journal_bytes: Option<u64>,
    progress: Option<ProgressHook>,
    policy: Option<Policy>,
    approver: Option<Arc<dyn Approver>>,
    clock: Option<Arc<dyn codemode_snapshot::Clock>>,
    redactor: Option<Redactor>,
    activity: codemode_run::ActivityConfig,
    state_keys: Option<Keyring>,
}

impl CodeModeBuilder {
    /// Masks what people are shown (each result's activity, approval and effect previews, the source shown for a
    /// run): besides the built-in credential literals and token shapes, the secrets registered on it
    /// ([`Redactor::secret`]) and the patterns configured on it ([`Redactor::pattern`]). What runs is never changed.
    pub fn redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = Some(redactor);
        self
    }

    /// Receives the activity of every run as it happens: [`ActivityEvent::CallStarted`], `Progress` and
    /// `CallFinished` (redacted). It is called on the run's driver, so it should return quickly. An `exec`/`wait`
    /// can bring a hook of its own ([`ExecOptions::on_activity`]).
    pub fn on_activity(mut self, hook: impl Fn(&ActivityEvent) + Send + Sync + 'static) -> Self {
        self.activity.hook = Some(Arc::new(hook));
        self
    }

    /// Every run keeps its activity, whether or not a call asks for it: each result carries it
    /// ([`CodeModeResult::activity`]) and a parked run's checkpoint keeps its log (default: off; a cell's activity
    /// is recorded only when the engine has a hook ([`on_activity`](Self::on_activity)) or its `exec`/`wait` brings
    /// one or wants it in the result's JSON ([`ExecOptions::on_activity`], [`ExecOptions::activity_in_result`]), so
    /// that a run nobody watches pays nothing for redacted previews).
    pub fn keep_activity(mut self, yes: bool) -> Self {
        self.activity.keep = yes;
        self
    }

    /// The bounds of each run's activity (default: 256 calls, 256 KiB, 512-byte previews, 16 KiB of source).
    pub fn activity_limits(mut self, limits: ActivityLimits) -> Self {
        self.activity.limits = limits;
        self
    }

    /// Seals the state directory's run and session files with these keys (XChaCha20-Poly1305; the first key
    /// seals, every key opens what it sealed). Without this call, the keys of `CODEMODE_STATE_KEY` or the file
    /// `CODEMODE_STATE_KEY_FILE` names are used when set. With keys, files that are not sealed are refused.
    pub fn state_keys(mut self, keys: Keyring) -> Self {
        self.state_keys = Some(keys);
        self
    }
    /// Receives the progress the tool host reports for nested calls (`CallContext::progress`), with the run and
    /// call ids: a host that streams updates of long calls to its user sets it.
    pub fn on_progress(mut self, hook: impl Fn(CallProgress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(hook));
        self
    }

    /// The tool policy of every nested call (default: none, every call allowed). Each catalog tool's decision
    /// (`allow`, `ask` or `deny`) is resolved once, when the catalog is built: the first rule matching
    /// `<server>.<tool>` (native tools: the tool name), else `writes` for a write-class tool, else `default`. A
    /// `deny` call fails in the guest with `err.code === "denied"`; an `ask` call waits for the
    /// [`approver`](Self::approver), or gets the policy's `fallback` when there is none. The exec description and
    /// the `.d.ts` files mark the tools that need approval or are denied. Discovery is never gated.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Decides the calls the policy says to ask about, for every run whose `exec`/`wait` brings no approver of its
    /// own ([`ExecOptions::approver`]). While it decides, the run's deadline is paused.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// The clock of deadlines, approval pauses, park times and run expiry (default: the system clock). Tests pass
    /// a [`ManualClock`](codemode_snapshot::ManualClock) to move time by hand.
    pub fn clock(mut self, clock: Arc<dyn store::Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The limits of every run (default: the reference's defaults).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The tools hidden behind exec.
    pub fn tools(mut self, tools: Vec<ToolDefinition>) -> Self {
        self.tools = tools;
        self
    }

    /// Adds a host namespace: `operations` become `namespaces.<name>.<op>` in the guest (`nodes.<op>` and
    /// `skills.<op>` for those two names), listed by `catalog` and `API`, called through the same policy,
    /// approvals, journal and activity as tools; the tool host receives each call as `<name>.<op>`. Each
    /// operation's effect class, replay safety and schemas are its definition's. Call after [`Self::tools`],
    /// which replaces the list.
    pub fn namespace(mut self, name: &str, operations: Vec<ToolDefinition>) -> Self {
        self.tools.extend(operations.into_iter().map(|op| op.namespace(name)));
        self
    }

    /// Tool names that must not exist in any run.
    pub fn deny(mut self, names: Vec<String>) -> Self {
        self.denied = names;
        self
    }

    /// Runs the tools the guest calls.
    pub fn host(mut self, host: Arc<dyn ToolHost>) -> Self {
        self.host = Some(host);
        self
    }

    /// Keeps suspended runs and the session store on disk under `dir`, so another process can resume them. Without
    /// it (the default) they live in memory and end with the engine.
    pub fn state_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.state_dir = dir;
        self
    }

    /// Keeps suspended runs, session values, result references and idempotency keys in `store`, a backend that
    /// several engines (gateway replicas) may share, such as `codemode-store-pg`'s PostgreSQL store: any of them
    /// can then resume any run. It replaces [`state_dir`](Self::state_dir).
    pub fn store(mut self, store: Arc<dyn FleetBackend>) -> Self {
        self.store = Some(store);
        self
    }

    /// How to start workers (default: [`WorkerCommand::locate`], the bundled `codemode-worker`).
    pub fn worker(mut self, command: WorkerCommand) -> Self {
        self.worker = Some(command);
        self
    }

    /// Refuses a worker whose engine lacks a fast path (default: accepted, and [`EngineStats::fast_paths`] says
    /// which it has): [`build`](Self::build) then fails with the `[patch.crates-io]` lines and the feature to add.
    /// Without append strings `s += x` in a loop copies the whole string every time (a 100,000-piece string takes
    /// about 690 ms instead of 27 ms); without shared scripts every cell's context parses the guest prelude (about
    /// 3 ms more per cell).
    pub fn require_fast_paths(mut self, yes: bool) -> Self {
        self.require_fast_paths = yes;
        self
    }

    /// Idle workers kept ready ahead of demand (default 2): whenever a cell takes a worker and leaves fewer idle,
    /// the pool starts another in the background.
    pub fn warm_workers(mut self, n: usize) -> Self {
        self.warm_workers = Some(n);
        self
    }

    /// The most idle workers kept (default 32): workers a load needed beyond `warm_workers` come back to the pool
    /// and serve the next cells without a spawn, up to this many.
    pub fn max_idle_workers(mut self, n: usize) -> Self {
        self.max_idle_workers = Some(n);
        self
    }

    /// How long idle workers beyond `warm_workers` may sit unused before the pool stops them (default 60 s).
    pub fn idle_worker_ttl(mut self, ttl: Duration) -> Self {
        self.idle_worker_ttl = Some(ttl);
        self
    }

    /// How many cells compute at once (default: the number of cores; `0` for no limit). A cell computes from its
    /// start, or the delivery of its tool results, until its program waits again or ends; a cell that waits for
    /// its tool calls does not count. Further cells queue first in, first out, and take a worker only when they
    /// start, so under a load of many clients the cores run a few cells at a time, each to its end, instead of
    /// sharing out every client's cell at once. A cell that computes for longer than 50 ms runs on outside the
    /// limit, so a long program never holds up the queue for longer than that.
    pub fn max_running_cells(mut self, n: usize) -> Self {
        self.max_running_cells = Some(n);
        self
    }

    /// How each worker confines itself before it runs guest code (default [`Confinement::Required`]: Landlock and
    /// seccomp must apply, or the worker ends and exec fails with `runtime_unavailable`). `BestEffort` runs on a
    /// kernel without them and logs what is missing; `Off` applies none.
    pub fn confinement(mut self, confinement: Confinement) -> Self {
        self.confinement = confinement;
        self
    }

    /// Drops a parked run's live worker, so every `wait` resumes by replay (for tests and for hosts that prefer
    /// to hold no process per parked run).
    pub fn replay_on_resume(mut self, yes: bool) -> Self {
        self.replay_on_resume = yes;
        self
    }

    /// How long a parked run keeps its live worker (default 30 s); after that its worker is stopped and the next
    /// `wait` resumes it by replay. Runs past `snapshotTtlSeconds` are dropped on the same timer.
    pub fn live_window(mut self, window: Duration) -> Self {
        self.live_window = Some(window);
        self
    }

    /// How many parked runs may keep their live worker at once (default: no cap, the live window alone bounds
    /// them). A run that parks when that many hold one stops its worker at once and its next `wait` resumes it by
    /// replay, so the memory parked workers hold is bounded (a worker holds its engine's heap, up to
    /// `memoryLimitBytes`). 0 keeps none, as [`replay_on_resume`](Self::replay_on_resume) does.
    pub fn max_live_parked(mut self, runs: usize) -> Self {
        self.max_live_parked = Some(runs);
        self
    }

    /// Gives each owner (a run scope's session id: the gateway's principal with `[auth]`) at most `runs` of the 64
    /// places for suspended runs, so that one owner cannot take them all (default: none, as the reference: any
    /// owner may take every place). An owner over its share has its run fail at its first tool call with
    /// `invalid_input`, `too many suspended code mode runs for this principal: ...`; nothing of another owner's is
    /// touched.
    pub fn max_suspended_runs_per_owner(mut self, runs: usize) -> Self {
        self.max_suspended_runs_per_owner = Some(runs);
        self
    }

    /// Bytes of journal (the tool replies a run has received, kept for replay) that all of this engine's live runs
    /// may hold together (default 256 MiB); each run also stops at its own `maxSnapshotBytes`. A run whose
    /// replies would pass either cap fails with `snapshot_limit_exceeded`. A gateway serves every session from one
    /// engine, so this is the gateway's cap.
    pub fn host_journal_bytes(mut self, bytes: u64) -> Self {
        self.host_journal_bytes = Some(bytes);
        self
    }

    /// Builds the engine, checks one worker's hello and starts the worker pool.
    ///
    /// Call it inside a Tokio runtime (the pool's pipes are Tokio's). It blocks for as long as one worker process
    /// takes to start and introduce itself (a few milliseconds).
    ///
    /// # Errors
    ///
    /// When the catalog is invalid; when no worker is found or it cannot start, speaks another protocol version, or
    /// lacks a fast path under [`require_fast_paths`](Self::require_fast_paths) (all [`Error::Runtime`]: code
    /// mode fails closed, and the message says what to fix); or when the state directory cannot be opened.
    pub fn build(self) -> Result<CodeMode, Error> {
        let host = self.host.ok_or(Error::NoHost)?;
        let mut options = CatalogOptions::from_limits(&self.limits);
        options.denied = self.denied;
        options.policy = self.policy.filter(|p| !p.is_allow_all());
        let catalog = Catalog::build(self.tools.clone(), options.clone())?;
        let command = match self.worker {
            Some(command) => command,
            None => WorkerCommand::locate()?,
        };
        let instructions = codemode_vm::pool::instruction_budget(self.limits.timeout_ms);
        let globals = Arc::new(codemode_run::guest_globals(&catalog));
        let pool_config = PoolConfig {
            command,
            warm: self.warm_workers.unwrap_or(2),
            max_idle: self.max_idle_workers.unwrap_or(codemode_vm::pool::DEFAULT_MAX_IDLE),
            idle_ttl: self.idle_worker_ttl.unwrap_or(codemode_vm::pool::DEFAULT_IDLE_TTL),
            memory_limit_bytes: self.limits.memory_limit_bytes,
            instructions,
            globals: Some(globals),
            confinement: self.confinement,
            require_fast_paths: self.require_fast_paths,
            admission: match self.max_running_cells.unwrap_or_else(codemode_vm::pool::Admission::default_limit) {
                0 => None,
                n => Some(codemode_vm::pool::Admission::new(n, codemode_vm::pool::DEFAULT_ADMISSION_SLICE)),
            },
        };
        let pool = WorkerPool::new(pool_config.clone());
        // The check reads the hello of the worker the first cell gets, so that build starts no process of its own;
        // without one, or when its hello is refused, a worker started for the check says why.
        let filled = pool.fill();
        let fast_paths = match pool.check_idle() {
            Some(hello) => hello.fast_paths,
            None => pool.check()?.fast_paths,
        };
        filled?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let shared = self.store.is_some();
        let store: Arc<dyn FleetBackend> = match (self.store, &self.state_dir) {
            (Some(store), _) => store,
            (None, Some(dir)) => {
                let keys = match self.state_keys {
                    Some(keys) => Some(keys),
                    None => Keyring::from_env().map_err(codemode_snapshot::StoreError::from)?,
                };
                Arc::new(LocalFleet::directory(FileBackend::open(dir.clone())?.with_keys(keys.map(Arc::new))))
            }
            (None, None) => Arc::new(LocalFleet::memory()),
        };
        let runs = RunStore::fleet(store.clone(), clock.clone(), DEFAULT_MAX_SUSPENDED_RUNS);
        runs.set_owner_share(self.max_suspended_runs_per_owner);
        let sessions = SessionStore::new(store.clone());
        let results =
            if shared { codemode_run::ResultStore::shared(store) } else { codemode_run::ResultStore::default() };
        let tools_digest = tools_digest(&catalog);
        let projection = Arc::new(codemode_run::projection_of(&catalog));
        let inner = Arc::new(Inner {
            limits: self.limits,
            catalog,
            host,
            pool,
            globals: None,
            runs,
            sessions,
            tools_digest,
            projection,
            replay_on_resume: self.replay_on_resume,
            live_places: self.max_live_parked.map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
            results: Arc::new(results),
            clock,
            entropy: Arc::new(codemode_run::OsEntropy),
            journals: codemode_bridge::SharedBytes::new(self.host_journal_bytes.unwrap_or(DEFAULT_HOST_JOURNAL_BYTES)),
            scopes: Arc::new(codemode_run::CatalogScopes::default()),
            progress: self.progress,
            waits: Arc::new(codemode_run::Waits::default()),
            approver: self.approver,
            redactor: Arc::new(self.redactor.unwrap_or_default()),
            activity: self.activity,
        });
        let live_window = self.live_window.unwrap_or(DEFAULT_LIVE_WINDOW);
        codemode_run::start_sweeper(&inner, live_window);
        // Only a store given with `store` can change under this process (another engine or replica shares it); a
        // local fleet's wake-ups are this engine's own parks and finishes, which the listener would look up and
        // ignore at the cost of waking a runtime thread twice per suspend and resume.
        if shared {
            codemode_run::start_listener(&inner);
        }
        let per_run = Arc::new(PerRun {
            tools: Mutex::new(self.tools),
            options,
            pool: pool_config,
            shared_pool: std::sync::OnceLock::new(),
            recent: Mutex::new(Vec::new()),
            limits: inner.limits.clone(),
            live_window,
            shared,
            fast_paths,
        });
        Ok(CodeMode { inner: Arc::new(Current(std::sync::RwLock::new(inner))), per_run })
    }
}

/// The tool list the model would see for `tools` under `limits` (`exec`, `wait` and the direct-only tools), without
/// starting an engine: what [`CodeMode::surface`] returns once one is built with them.
///
/// # Errors
///
/// [`Error::Catalog`] when the tools do not form a valid catalog.
pub fn surface_of(tools: Vec<ToolDefinition>, limits: &Limits) -> Result<Vec<ToolSpec>, Error> {
    let catalog = Catalog::build(tools, CatalogOptions::from_limits(limits))?;
    Ok(codemode_surface::visible_tools(&catalog, limits))
}

/// Bytes of journal all live runs of one engine hold together by default.
pub const DEFAULT_HOST_JOURNAL_BYTES: u64 = 256 * 1024 * 1024;

/// One `exec` cell as a typed value: what [`CodeMode::exec`] takes besides the model's JSON arguments (any
/// `Into<serde_json::Value>`, so both are accepted). It becomes the JSON the model would have sent and is checked by
/// the same rules: a blank title or program fails the cell with `invalid_input`.
///
/// ```
/// let cell = codemode::Cell::new("Ping once", "return await ping({})").restart_safe(true);
/// assert_eq!(serde_json::Value::from(cell)["restartSafe"], true);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    title: String,
    code: String,
    language: Language,
    restart_safe: bool,
    await_results: bool,
}

impl Cell {
    /// A JavaScript cell with its purpose (`title`) and its program (`code`).
    pub fn new(title: impl Into<String>, code: impl Into<String>) -> Cell {
        Cell {
            title: title.into(),
            code: code.into(),
            language: Language::JavaScript,
            restart_safe: false,
            await_results: false,
        }
    }

    /// Declares the program's language (TypeScript syntax is stripped either way).
    pub fn language(mut self, language: Language) -> Cell {
        self.language = language;
        self
    }

    /// `restartSafe`: the cell may be replayed after a restart; only replay-safe tools are callable in it.
    pub fn restart_safe(mut self, restart_safe: bool) -> Cell {
        self.restart_safe = restart_safe;
        self
    }

    /// `awaitResults`: the call stays open until pending tool results settle instead of returning `waiting`.
    pub fn await_results(mut self, await_results: bool) -> Cell {
        self.await_results = await_results;
        self
    }
}

impl From<Cell> for serde_json::Value {
    fn from(cell: Cell) -> serde_json::Value {
        serde_json::json!({
            "title": cell.title,
            "code": cell.code,
            "language": cell.language.as_str(),
            "restartSafe": cell.restart_safe,
            "awaitResults": cell.await_results,
        })
    }
}

/// Per-call options of [`CodeMode::exec_with`], [`CodeMode::wait_with`] and [`CodeMode::surface_with`].
///
/// A call with its own tools, policy or client tools runs on a catalog of its own, without a new engine: the engine
/// keeps the catalogs of the last [`PER_RUN_CATALOGS`] such sets, and their cells share one pool of worker
/// processes (each cell's start carries its catalog's globals). A `wait` resumes with the catalog of the `exec` that
/// parked the run: pass the same options.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ExecOptions {
    /// The client tools of the current run. They join the call's tools in its catalog (source `client`, which wins
    /// an exact-name shadow).
    pub client_tools: Vec<ToolDefinition>,
    /// This call's own tools in place of the engine's (one agent's or one sender's set): its catalog and `.d.ts`
    /// files hold these and never the engine's, and the engine's host runs their calls. A set with a tool the engine
    /// lacks has counters of its own; a subset of the engine's tools keeps its counter lifetime. `None`: the
    /// engine's tools.
    pub tools: Option<Vec<ToolDefinition>>,
    /// This call's tool policy in place of the engine's, resolved for its catalog as
    /// [`CodeModeBuilder::policy`] is. `None`: the engine's policy.
    pub policy: Option<Policy>,
    /// The model's `exec` input before a hook or trusted policy rewrote it into the one this call passes: an alias
    /// (`code` or `command`) the model populated and the rewrite blanked or made a non-string invalidates both, and
    /// the call fails closed (`invalid_input`) instead of running the other alias.
    pub rewritten_from: Option<serde_json::Value>,
    /// What the run takes from the call, as `codemode-run` reads it: the approver (in place of the engine's), the
    /// answers to a parked run's pending approvals, the idempotency key, the activity hook, whether the result's JSON
    /// carries its activity and whether activity keeps a `wait` waiting. Set through the methods below; the facade
    /// fills in the title and a `wait`'s budget.
    pub run: RunOptions,
}

impl std::fmt::Debug for ExecOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecOptions")
            .field("client_tools", &self.client_tools)
            .field("tools", &self.tools)
            .field("policy", &self.policy)
            .field("rewritten_from", &self.rewritten_from)
            .field("run", &self.run)
            .finish()
    }
}

impl ExecOptions {
    /// Options with an idempotency key for [`CodeMode::exec_with`].
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.run.idempotency_key = Some(key.into());
        self
    }

    /// Options with these client tools.
    pub fn client_tools(mut self, tools: Vec<ToolDefinition>) -> Self {
        self.client_tools = tools;
        self
    }

    /// Options whose call has these tools in place of the engine's (see [`tools`](Self::tools)).
    pub fn tools(mut self, tools: Vec<ToolDefinition>) -> Self {
        self.tools = Some(tools);
        self
    }

    /// Options whose call has this tool policy in place of the engine's (see [`policy`](Self::policy)).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Options for an `exec` whose input a hook rewrote from `original` (see [`rewritten_from`](Self::rewritten_from)).
    pub fn rewritten_from(mut self, original: serde_json::Value) -> Self {
        self.rewritten_from = Some(original);
        self
    }

    /// Whether the call runs on the engine's own catalog.
    fn engine_catalog(&self) -> bool {
        self.client_tools.is_empty() && self.tools.is_none() && self.policy.is_none()
    }

    /// Options whose approvals this approver decides (for [`CodeMode::exec_with`] and [`CodeMode::wait_with`]).
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.run.approver = Some(approver);
        self
    }

    /// Options carrying answers to a parked run's pending approvals: `(call_id, decision)`, the call ids of
    /// `Waiting::pending_approvals`. A [`CodeMode::wait_with`] applies them before the run goes on; a pending
    /// approval without an answer is asked again of the approver (or gets the policy's fallback without one).
    pub fn answers(mut self, answers: Vec<(String, ApprovalDecision)>) -> Self {
        self.run.answers = answers;
        self
    }

    /// Options whose activity events (`CallStarted`, `Progress`, `CallFinished`) go to `hook` as they happen.
    pub fn on_activity(mut self, hook: impl Fn(&ActivityEvent) + Send + Sync + 'static) -> Self {
        self.run.activity = Some(Arc::new(hook));
        self
    }

    /// Options whose result's JSON carries its `activity` (for a person or a log, not the model).
    pub fn activity_in_result(mut self, yes: bool) -> Self {
        self.run.activity_in_json = yes;
        self
    }

    /// Options whose `wait`s restart their wait budget on each activity event (see
    /// [`progress_keeps_waiting`](Self::progress_keeps_waiting)).
    pub fn progress_keeps_waiting(mut self, yes: bool) -> Self {
        self.run.progress_keeps_waiting = yes;
        self
    }

    fn run_options(&self, title: Option<String>) -> RunOptions {
        RunOptions { title, max_wait_ms: None, ..self.run.clone() }
    }
}

/// Per-call catalogs (tools, policy, client tools) an engine keeps.
pub const PER_RUN_CATALOGS: usize = 32;

/// What an engine keeps to build the catalog of a call with its own tools, policy or client tools: its own tools,
/// the catalog options and the pool settings, the catalogs built lately and the workers they share.
struct PerRun {
    /// The engine's own tools, as last set ([`CodeModeBuilder::tools`], [`CodeMode::set_tools`]).
    tools: Mutex<Vec<ToolDefinition>>,
    options: CatalogOptions,
    pool: PoolConfig,
    /// The workers of every per-call catalog, started without globals (each cell's start carries its own); made
    /// when the first such call comes.
    shared_pool: std::sync::OnceLock<Arc<WorkerPool>>,
    /// `(digest of the call's options and the engine's catalog, the run state over their catalog)`, most recently
    /// used last.
    recent: Mutex<Vec<(String, Arc<Inner>)>>,
    /// The limits every run obeys (they never change).
    limits: Limits,
    /// How long a parked run keeps its worker, for the housekeeping of a rebuilt catalog.
    live_window: Duration,
    /// Whether the run store was given with `store` (shared): a rebuilt catalog's state listens for its changes.
    shared: bool,
    /// The fast paths of the worker `build` checked.
    fast_paths: FastPaths,
}

/// The engine's current run state: replaced whole when its tools change ([`CodeMode::set_tools`]). A cell reads it
/// once, as it starts (one uncontended read lock and an `Arc` clone), and keeps that state to its end.
struct Current(std::sync::RwLock<Arc<Inner>>);

impl Current {
    fn get(&self) -> Arc<Inner> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn set(&self, inner: Arc<Inner>) -> Arc<Inner> {
        std::mem::replace(&mut *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner), inner)
    }
}

/// The engine's catalog as it is now; it stays valid (and unchanged) while held, even if the tools change meanwhile.
pub struct CatalogRef(Arc<Inner>);

impl std::ops::Deref for CatalogRef {
    type Target = Catalog;
    fn deref(&self) -> &Catalog {
        &self.0.catalog
    }
}

impl std::fmt::Debug for CatalogRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogRef").field("tools", &self.0.catalog.len()).finish()
    }
}

/// How long a parked run keeps its live worker by default.
const DEFAULT_LIVE_WINDOW: Duration = Duration::from_secs(30);

/// The code mode engine: one catalog, one tool host, one worker pool, one run store (and, for calls with their own
/// tools, policy or client tools, a catalog per recent set, over the same stores and one shared pool).
#[derive(Clone)]
pub struct CodeMode {
    inner: Arc<Current>,
    per_run: Arc<PerRun>,
}

impl std::fmt::Debug for CodeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeMode").field("tools", &self.inner.get().catalog.len()).finish_non_exhaustive()
    }
}

impl CodeMode {
    /// A builder with the default limits.
    pub fn builder() -> CodeModeBuilder {
        CodeModeBuilder::default()
    }

    /// The tool list the model sees: `exec`, `wait` and the direct-only tools.
    pub fn surface(&self) -> Vec<ToolSpec> {
        let inner = self.inner.get();
        codemode_surface::visible_tools(&inner.catalog, &inner.limits)
    }

    /// What the engine holds right now: parked runs, the worker processes they keep, idle workers.
    pub fn stats(&self) -> EngineStats {
        let inner = self.inner.get();
        let (parked_runs, parked_with_worker) = inner.runs.parked_counts(codemode_run::LiveRun::holds_worker);
        let pool = inner.pool.stats();
        let per_call = self.per_run.shared_pool.get().map(|pool| pool.stats());
        EngineStats {
            parked_runs,
            parked_with_worker,
            idle_workers: pool.idle,
            spawn_waits: pool.spawn_waits,
            admission_waits: pool.admission_waits,
            per_call_idle_workers: per_call.as_ref().map_or(0, |p| p.idle),
            per_call_spawn_waits: per_call.map_or(0, |p| p.spawn_waits),
            fast_paths: self.per_run.fast_paths,
        }
    }

    /// The engine's catalog as it is now.
    pub fn catalog(&self) -> CatalogRef {
        CatalogRef(self.inner.get())
    }

    /// The limits runs obey.
    pub fn limits(&self) -> &Limits {
        &self.per_run.limits
    }

    /// Replaces the engine's tools (an MCP server's tool list changed, say): the catalog, the `.d.ts` files, the
    /// surface and the guest globals of every cell that starts from now on. Cells already running keep the catalog
    /// they started with. A parked run resumes under the new catalog while every tool it called still exists with
    /// the same contract (name and input schema); otherwise its `wait` fails with `invalid_input` naming the tool.
    /// Returns whether anything changed (the same tools again rebuild nothing).
    ///
    /// It starts the new catalog's workers in the background and stops the idle workers of the old one.
    ///
    /// # Errors
    ///
    /// [`Error::Catalog`] when the new tools cannot be cataloged; the engine keeps its tools then.
    pub fn set_tools(&self, tools: Vec<ToolDefinition>) -> Result<bool, Error> {
        let per_run = &self.per_run;
        // Locks in the order `inner_for` takes them: the client-tool catalogs, then the tools.
        let mut recent = per_run.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut own = per_run.tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if serde_json::to_value(&*own).ok() == serde_json::to_value(&tools).ok() {
            return Ok(false);
        }
        let catalog = Catalog::build(tools.clone(), per_run.options.clone())?;
        let pool = WorkerPool::new(PoolConfig {
            globals: Some(Arc::new(codemode_run::guest_globals(&catalog))),
            ..per_run.pool.clone()
        });
        let base = self.inner.get();
        // One counter lifetime (`counterScope`) per catalog: kept when tools were only appended, new when any tool
        // was removed or changed.
        let old: Vec<serde_json::Value> = own.iter().filter_map(|t| serde_json::to_value(t).ok()).collect();
        let new: Vec<serde_json::Value> = tools.iter().filter_map(|t| serde_json::to_value(t).ok()).collect();
        let scopes = if old.iter().all(|t| new.contains(t)) {
            base.scopes.clone()
        } else {
            Arc::new(codemode_run::CatalogScopes::default())
        };
        let inner = Arc::new(derived(&base, catalog, pool.clone(), None, scopes));
        pool.replenish();
        codemode_run::start_sweeper(&inner, per_run.live_window);
        if per_run.shared {
            codemode_run::start_listener(&inner);
        }
        let old = self.inner.set(inner);
        old.pool.retire();
        // The per-call catalogs were built over the old tools.
        recent.clear();
        *own = tools;
        Ok(true)
    }

    /// Runs one cell: `input` is the model's `exec` arguments (`{title, code, ...}`) or a typed [`Cell`].
    pub async fn exec(&self, input: impl Into<serde_json::Value>, scope: RunScope) -> CodeModeResult {
        self.exec_with(input, scope, &ExecOptions::default()).await
    }

    /// Runs one cell with per-call options: its own tools, policy and client tools make this cell's catalog.
    pub async fn exec_with(
        &self,
        input: impl Into<serde_json::Value>,
        scope: RunScope,
        options: &ExecOptions,
    ) -> CodeModeResult {
        let input = input.into();
        let inner = match self.inner_for(options) {
            Ok(inner) => inner,
            Err(e) => return codemode_run::input_failure(&self.inner.get(), &scope, e.to_string()),
        };
        match Self::exec_input(&input, options.rewritten_from.as_ref()) {
            Ok((input, title)) => codemode_run::exec_with(inner, input, scope, options.run_options(Some(title))).await,
            Err(message) => codemode_run::input_failure(&inner, &scope, message),
        }
    }

    /// The tool list the model sees for a call with these options: the exec description indexes its catalog.
    ///
    /// # Errors
    ///
    /// [`Error::Catalog`] when the call's tools cannot be cataloged.
    pub fn surface_with(&self, options: &ExecOptions) -> Result<Vec<ToolSpec>, Error> {
        let inner = self.inner_for(options)?;
        Ok(codemode_surface::visible_tools(&inner.catalog, &inner.limits))
    }

    /// The run state over the catalog of `options`: the engine's own when they bring no tools, policy or client
    /// tools, else a recent one for the same options, else a new catalog on the shared workers, with the engine's
    /// host and stores.
    fn inner_for(&self, options: &ExecOptions) -> Result<Arc<Inner>, Error> {
        let base = self.inner.get();
        if options.engine_catalog() {
            return Ok(base);
        }
        let digest = {
            use sha2::{Digest, Sha256};
            let mut hasher = Sha256::new();
            let parts = (&options.client_tools, &options.tools, &options.policy);
            serde_json::to_writer(&mut hasher, &parts).expect("tool definitions and policies serialize to JSON");
            hasher.update(base.tools_digest.as_bytes());
            hasher.finalize()
        };
        let key = hex::encode(&digest[..16]);
        let per_run = &self.per_run;
        let mut recent = per_run.recent.lock().expect("per-run catalogs lock");
        if let Some(at) = recent.iter().position(|(k, _)| *k == key) {
            let entry = recent.remove(at);
            let inner = entry.1.clone();
            recent.push(entry);
            return Ok(inner);
        }
        let own = per_run.tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        // Client tools only add to the engine's tools and a policy or a subset of them only narrows its catalog, so
        // the counters go on (seed 001: one counter lifetime); a set with a tool of its own counts apart.
        let narrows = options.tools.as_ref().is_none_or(|tools| {
            let own: Vec<serde_json::Value> = own.iter().filter_map(|t| serde_json::to_value(t).ok()).collect();
            tools.iter().all(|t| serde_json::to_value(t).is_ok_and(|t| own.contains(&t)))
        });
        let mut tools = options.tools.clone().unwrap_or(own);
        tools.extend(options.client_tools.iter().cloned().map(|t| t.source(ToolSource::Client)));
        let mut catalog_options = per_run.options.clone();
        if let Some(policy) = &options.policy {
            catalog_options.policy = Some(policy.clone()).filter(|p| !p.is_allow_all());
        }
        let catalog = Catalog::build(tools, catalog_options)?;
        // Workers keep these globals prepared under the digest's first eight bytes.
        let globals = codemode_vm::protocol::StartGlobals {
            globals: Arc::new(codemode_run::guest_globals(&catalog)),
            key: Some(u64::from_le_bytes(digest[..8].try_into().expect("eight bytes"))),
        };
        let pool = per_run
            .shared_pool
            .get_or_init(|| WorkerPool::new(PoolConfig { globals: None, warm: 1, ..per_run.pool.clone() }))
            .clone();
        let scopes = if narrows { base.scopes.clone() } else { Arc::new(codemode_run::CatalogScopes::default()) };
        let inner = Arc::new(derived(&base, catalog, pool, Some(globals), scopes));
        if recent.len() >= PER_RUN_CATALOGS {
            recent.remove(0);
        }
        recent.push((key, inner.clone()));
        Ok(inner)
    }

    /// Validates exec's input object (rewritten from `original`, if given) against the surface's contract: the run's
    /// input and the cell's title; the error is the message for the model.
    fn exec_input(
        input: &serde_json::Value,
        original: Option<&serde_json::Value>,
    ) -> Result<(codemode_run::ExecInput, String), String> {
        let input = match original {
            Some(original) => codemode_surface::parse_rewritten_exec_input(original, input),
            None => codemode_surface::parse_exec_input(input),
        }
        .map_err(|e| e.to_string())?;
        let run = codemode_run::ExecInput {
            code: input.code,
            restart_safe: input.restart_safe,
            await_results: input.await_results,
        };
        Ok((run, input.title))
    }

    /// Runs one cell until it ends or `cancelled` resolves, whichever comes first. A cancelled cell is aborted on
    /// the spot: its worker is killed, its tool calls still running are cancelled, nothing is parked, and the result
    /// is `failed` with code `aborted`. A gateway passes the client's cancellation of the `exec` request.
    pub async fn exec_until(
        &self,
        input: impl Into<serde_json::Value>,
        scope: RunScope,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> CodeModeResult {
        self.exec_until_with(input, scope, &ExecOptions::default(), cancelled).await
    }

    /// [`exec_until`](Self::exec_until) with per-call options, as [`exec_with`](Self::exec_with) takes them.
    pub async fn exec_until_with(
        &self,
        input: impl Into<serde_json::Value>,
        scope: RunScope,
        options: &ExecOptions,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> CodeModeResult {
        let caller = scope.clone();
        tokio::select! {
            biased;
            result = self.exec_with(input, scope, options) => result,
            () = cancelled => codemode_run::cancelled(&self.inner.get(), &caller),
        }
    }

    /// Resumes a waiting run: `input` is wait's input object (`{runId}`). Dropping the future before it is ready
    /// cancels the run (see [`wait_until`](Self::wait_until)).
    pub async fn wait(&self, input: serde_json::Value, scope: RunScope) -> CodeModeResult {
        self.wait_with(input, scope, &ExecOptions::default()).await
    }

    /// Resumes a waiting run that an [`exec_with`](Self::exec_with) with these options parked.
    pub async fn wait_with(&self, input: serde_json::Value, scope: RunScope, options: &ExecOptions) -> CodeModeResult {
        let inner = match self.inner_for(options) {
            Ok(inner) => inner,
            Err(e) => return codemode_run::input_failure(&self.inner.get(), &scope, e.to_string()),
        };
        match codemode_surface::parse_wait_input(&input) {
            Ok(input) => {
                // The wait budget: the caller's `maxWaitMs`, bounded by the limit.
                let limit = inner.limits.max_wait_ms;
                let run_options = codemode_run::RunOptions {
                    max_wait_ms: Some(input.max_wait_ms.map_or(limit, |ms| ms.min(limit))),
                    ..options.run_options(None)
                };
                codemode_run::wait_with(inner, &input.run_id, scope, run_options).await
            }
            Err(e) => codemode_run::input_failure(&inner, &scope, e.to_string()),
        }
    }

    /// Resumes a waiting run until it ends, parks or `cancelled` resolves, whichever comes first. A cancelled wait
    /// cancels the run, as dropping the future of [`wait`](Self::wait) does: its worker is killed, its tool calls
    /// still running are cancelled and the run is released, so a later `wait` on it fails as unavailable; the result
    /// is `failed` with code `aborted`. A gateway passes the client's cancellation of the `wait` request.
    pub async fn wait_until(
        &self,
        input: serde_json::Value,
        scope: RunScope,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> CodeModeResult {
        self.wait_until_with(input, scope, &ExecOptions::default(), cancelled).await
    }

    /// [`wait_until`](Self::wait_until) with per-call options, as [`wait_with`](Self::wait_with) takes them.
    pub async fn wait_until_with(
        &self,
        input: serde_json::Value,
        scope: RunScope,
        options: &ExecOptions,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> CodeModeResult {
        let caller = scope.clone();
        tokio::select! {
            biased;
            result = self.wait_with(input, scope, options) => result,
            () = cancelled => codemode_run::cancelled(&self.inner.get(), &caller),
        }
    }

    /// Cancels a run's pending host work and drops it; a later `wait` fails as unavailable. A `wait` resuming the
    /// run meanwhile ends `aborted` too; both results carry the run's final telemetry.
    pub async fn abort(&self, run_id: &str) -> CodeModeResult {
        codemode_run::abort(self.inner.get(), run_id).await
    }

    /// Ends every run of the session `session_id` when that session ends (a client disconnected, a conversation
    /// closed): calls in flight are cancelled, snapshots dropped and workers released, as [`abort`](Self::abort)
    /// does for one run; returns how many runs were ended. Leave alone the runs of an owner that outlives its
    /// session (a principal, a session id a later process resumes).
    ///
    /// # Errors
    ///
    /// [`Error::State`] when the run store could not list the session's runs.
    pub async fn end_session(&self, session_id: &str) -> Result<usize, Error> {
        Ok(codemode_run::end_session(self.inner.get(), session_id).await?)
    }

    /// Ends every run an agent run owns (`scope.agent_run_id`, in `scope`'s session) when that agent run ends or is
    /// cancelled, or its tool catalog closes at teardown (seed 000), even if no `wait` follows: calls in flight are
    /// cancelled, snapshots dropped and workers released, as [`abort`](Self::abort) does for one run; returns how
    /// many runs were ended. The session's other agent runs keep theirs.
    ///
    /// # Errors
    ///
    /// [`Error::State`] when the run store could not list or read the session's runs.
    pub async fn end_agent_run(&self, scope: &RunScope) -> Result<usize, Error> {
        Ok(codemode_run::end_agent_run(self.inner.get(), scope).await?)
    }
}

/// The run state over `catalog`, `pool` (whose cells get `globals` with their start, when it serves several
/// catalogs) and the catalog scopes `scopes`, sharing everything else (host, stores, clock, hooks) with `base`.
fn derived(
    base: &Inner,
    catalog: Catalog,
    pool: Arc<WorkerPool>,
    globals: Option<codemode_vm::protocol::StartGlobals>,
    scopes: Arc<codemode_run::CatalogScopes>,
) -> Inner {
    Inner {
        limits: base.limits.clone(),
        tools_digest: tools_digest(&catalog),
        projection: Arc::new(codemode_run::projection_of(&catalog)),
        catalog,
        host: base.host.clone(),
        pool,
        globals,
        runs: base.runs.clone(),
        sessions: base.sessions.clone(),
        replay_on_resume: base.replay_on_resume,
        live_places: base.live_places.clone(),
        results: base.results.clone(),
        clock: base.clock.clone(),
        entropy: base.entropy.clone(),
        scopes,
        progress: base.progress.clone(),
        journals: base.journals.clone(),
        waits: base.waits.clone(),
        approver: base.approver.clone(),
        redactor: base.redactor.clone(),
        activity: base.activity.clone(),
    }
}

fn tools_digest(catalog: &Catalog) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for entry in catalog.entries() {
        hasher.update(entry.callable_name.as_bytes());
        hasher.update([0]);
        // A tool whose definition changed (its schema, its replay safety) is another tool: a run that may have
        // called it is not resumed under it.
        hasher.update(serde_json::to_vec(&entry.definition).expect("tool definitions serialize"));
        hasher.update([0]);
    }
    for server in catalog.mcp_servers() {
        hasher.update(server.global_name.as_bytes());
        for tool in &server.tools {
            hasher.update(tool.js_name.as_bytes());
            // An MCP tool whose definition changed upstream is another tool too.
            if let Some(entry) = catalog.mcp_tool(&server.global_name, &tool.js_name) {
                hasher.update(serde_json::to_vec(&entry.definition).expect("tool definitions serialize"));
            }
            hasher.update([0]);
        }
    }
    hex::encode(&hasher.finalize()[..8])
}
