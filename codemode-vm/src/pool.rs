//! The host side of the executor: finding the worker executable, checking that a worker speaks this host's protocol,
//! starting workers ahead of need, talking to them over their stdin/stdout, and telling how a worker died.
//!
//! Invariant: a worker serves one cell at a time and is either idle in the pool, owned by exactly one run, or
//! killed. A worker whose cell did not end cleanly (its program ended, or the host reset it at a quiescent point with
//! [`HostMessage::Reset`]) is never returned to the pool, and no worker serves a cell before its [`WorkerHello`] was
//! read and accepted.

use std::io::{BufRead as _, Read as _};
use std::os::fd::AsRawFd as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::confine::{
    Confinement, ConfinementReport, ENV_ADDRESS_SPACE, ENV_CONFINEMENT, EXIT_CONFINEMENT, OPT_OUT_HINT,
};
use crate::protocol::{
    ENV_INSTRUCTIONS, ENV_MEMORY, ENV_ROLE, EXIT_MEMORY, GuestGlobals, HostMessage, KeptGlobals, PROTOCOL_VERSION,
    Start, WorkerHello, WorkerMessage,
};

/// Environment variable naming the worker executable, overriding every other way of finding it.
pub const ENV_WORKER: &str = "CODEMODE_WORKER";
/// The bundled worker binary's name.
pub const WORKER_BIN: &str = "codemode-worker";
/// Memory the worker process needs besides the guest's own budget (engine, prelude, buffers).
const WORKER_BASE_MEMORY: u64 = 48 * 1024 * 1024;
/// The variable mimalloc (the worker's allocator) reads for how much address space it reserves at a time.
const ENV_ARENA_RESERVE: &str = "MIMALLOC_ARENA_RESERVE";
/// What workers reserve at a time: small steps, as their address space is limited ([`WorkerPool::address_space`]).
const ARENA_RESERVE: &str = "64MiB";
/// How long [`WorkerPool::check`] waits for a started worker's hello before it gives up on it. A worker writes its
/// hello before it builds anything (a few milliseconds after exec); only a binary that is not a worker is this slow.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Engine instructions per millisecond of `timeoutMs` the instruction budget allows: ten per nanosecond, over
/// twenty times what Boa executes on a fast core (about 0.4 per nanosecond measured here), so the budget never binds
/// before the host's wall-clock deadline, which kills the worker at `timeoutMs`. It stays as a backstop for a worker
/// the host cannot stop.
pub const INSTRUCTIONS_PER_MS: u64 = 10_000_000;

/// The engine instruction budget of a context for a run with `timeout_ms`: [`INSTRUCTIONS_PER_MS`] per millisecond.
/// `timeoutMs` is wall-clock time; the host's deadline ends a cell, never this budget.
pub fn instruction_budget(timeout_ms: u64) -> u64 {
    timeout_ms.saturating_mul(INSTRUCTIONS_PER_MS)
}

/// How to provide a worker, quoted by [`PoolError::NotFound`].
const HOW_TO_PROVIDE_A_WORKER: &str = "provide one of: (1) set $CODEMODE_WORKER to a `codemode-worker` binary (built \
    with `cargo build -p codemode-worker --features patched-boa --bin codemode-worker` in the codemode checkout); \
    (2) put `codemode-worker` beside this executable; (3) make this binary its own worker: call \
    `codemode::worker::run_worker()` first thing in `main` when it is started with a marker argument, and pass \
    `CodeModeBuilder::worker(WorkerCommand::current_exe(&[\"<marker>\"])?)` (README, \"The worker executable\")";

/// The `[patch.crates-io]` lines that give an embedder's build the patched Boa crates this checkout vendors, quoted
/// by [`PoolError::SlowEngine`].
pub fn boa_patch_lines() -> String {
    let vendor = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../vendor");
    let vendor = vendor.canonicalize().unwrap_or(vendor);
    ["boa_string", "boa_engine"]
        .map(|name| format!("{name} = {{ path = \"{}\" }}", vendor.join(name).display()))
        .join("; ")
}

/// Errors of the worker pool.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// No worker executable was given and none could be found.
    #[error(
        "no code mode worker executable: ${ENV_WORKER} is unset and there is no `{WORKER_BIN}` at {}; {HOW_TO_PROVIDE_A_WORKER}",
        looked_at.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" or ")
    )]
    NotFound {
        /// Where the bundled worker was looked for.
        looked_at: Vec<PathBuf>,
    },
    /// The running executable could not be named, so neither a worker beside it nor itself can be started.
    #[error("the running executable cannot be named ({0}); set ${ENV_WORKER} to a `{WORKER_BIN}` binary")]
    NoCurrentExe(#[source] std::io::Error),
    /// This process was started as a worker but builds a pool: its `main` did not call `run_worker` first.
    #[error(
        "this process was started as a code mode worker (${ENV_ROLE} is set) but starts a worker pool instead of \
         serving: call `codemode::worker::run_worker()` first thing in `main` when the worker marker argument \
         is present"
    )]
    StartedAsWorker,
    /// The worker could not be started.
    #[error("the code mode worker {path} could not start: {source}")]
    Spawn {
        /// The executable.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The worker's pipe broke.
    #[error("the code mode worker pipe broke: {0}")]
    Pipe(#[from] std::io::Error),
    /// The worker could not confine itself and ended before running anything.
    #[error("the code mode worker could not confine itself ({0}); {OPT_OUT_HINT}")]
    Confinement(String),
    /// The worker did not introduce itself with a hello.
    #[error(
        "the code mode worker {worker} did not introduce itself ({reason}): it is not a code mode worker, or one \
         older than protocol version {PROTOCOL_VERSION}"
    )]
    NoHello {
        /// The worker command.
        worker: String,
        /// What it did instead.
        reason: String,
    },
    /// The worker speaks another protocol version than this host.
    #[error(
        "the code mode worker {worker} speaks protocol version {worker_protocol}, this host speaks version \
         {host_protocol}: build the worker from the same codemode sources as the host"
    )]
    Protocol {
        /// The worker command.
        worker: String,
        /// The worker's version.
        worker_protocol: u32,
        /// This host's version ([`PROTOCOL_VERSION`]).
        host_protocol: u32,
    },
    /// The worker's engine lacks a fast path and the embedder required them all.
    #[error(
        "the code mode worker {worker} lacks {missing} (it was built against crates.io's Boa, or without the \
         `patched-boa` feature): add `{patch_lines}` under `[patch.crates-io]` in the Cargo.toml at the root of \
         your workspace and enable codemode's `patched-boa` feature, or accept the slower engine with \
         `CodeModeBuilder::require_fast_paths(false)`"
    )]
    SlowEngine {
        /// The worker command.
        worker: String,
        /// The fast paths it lacks, from [`FastPaths::missing`](crate::protocol::FastPaths::missing).
        missing: String,
        /// The lines to add, from [`boa_patch_lines`].
        patch_lines: String,
    },
}

/// How to start a worker process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (e.g. a marker subcommand when a host binary re-executes itself as a worker).
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// Finds the bundled worker: `$CODEMODE_WORKER`, else `codemode-worker` next to the running executable or in
    /// its parent folder (where cargo puts binaries relative to test executables).
    ///
    /// # Errors
    ///
    /// [`PoolError::NotFound`] when none exists (its message lists the ways to provide one).
    pub fn locate() -> Result<WorkerCommand, PoolError> {
        if let Some(path) = std::env::var_os(ENV_WORKER) {
            return Ok(WorkerCommand { program: PathBuf::from(path), args: Vec::new() });
        }
        let exe = std::env::current_exe().map_err(PoolError::NoCurrentExe)?;
        let name = format!("{WORKER_BIN}{}", std::env::consts::EXE_SUFFIX);
        let mut looked_at = Vec::new();
        let mut dir = exe.parent();
        for _ in 0..2 {
            let Some(d) = dir else { break };
            let candidate = d.join(&name);
            if candidate.is_file() {
                return Ok(WorkerCommand { program: candidate, args: Vec::new() });
            }
            looked_at.push(candidate);
            dir = d.parent();
        }
        Err(PoolError::NotFound { looked_at })
    }

    /// Re-executes the running binary with `args` (the binary must call `codemode_worker::worker::run_worker` first
    /// thing in `main` when it sees them).
    ///
    /// # Errors
    ///
    /// [`PoolError::NoCurrentExe`] when the running executable cannot be named.
    pub fn current_exe(args: &[&str]) -> Result<WorkerCommand, PoolError> {
        let program = std::env::current_exe().map_err(PoolError::NoCurrentExe)?;
        Ok(WorkerCommand { program, args: args.iter().map(|s| (*s).to_owned()).collect() })
    }

    /// The command as a person would type it, for error messages.
    fn display(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Settings of a pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// How to start a worker.
    pub command: WorkerCommand,
    /// Idle workers kept ready ahead of demand: whenever a checkout leaves fewer idle, the pool starts more in the
    /// background, so that a load that grows finds its next worker started.
    pub warm: usize,
    /// The most idle workers kept: a worker that comes back to a pool holding this many is stopped. Workers
    /// beyond `warm` stay while the load that needed them lasts, and are stopped once they sat unused for
    /// `idle_ttl` (see [`WorkerPool::shrink_idle`]).
    pub max_idle: usize,
    /// How long workers beyond `warm` may sit unused before the pool stops them.
    pub idle_ttl: Duration,
    /// The guest's memory budget in bytes.
    pub memory_limit_bytes: u64,
    /// Engine instructions one cell may execute.
    pub instructions: u64,
    /// The globals every context is built with, sent to each worker as it starts; `None` leaves them to `Start`.
    pub globals: Option<Arc<GuestGlobals>>,
    /// How each worker confines itself before it runs anything (default [`Confinement::Required`]).
    pub confinement: Confinement,
    /// Refuse workers whose engine lacks a fast path (see [`PoolError::SlowEngine`]).
    pub require_fast_paths: bool,
    /// How many cells of this pool's workers compute at once (shared with the engine's other pools); `None`: no
    /// limit, every cell computes as soon as it starts.
    pub admission: Option<Arc<Admission>>,
}

/// How many cells compute at once, across every pool that shares it (one engine's pools), and the queue of the
/// others.
///
/// A cell takes a place when the host sends its worker `Start` or `Settle`, and gives it back when the worker
/// reports its next quiescent point (or fails, or dies): a cell that waits for its tool calls holds no place.
/// Cells wait for a place in the order they asked (first in, first out). A cell that computes for longer than the
/// time slice gives its place back and runs on without one, so a long program never holds up the queue for more
/// than one slice; the kernel then shares the cores among it and the admitted cells.
#[derive(Debug)]
pub struct Admission {
    places: Arc<tokio::sync::Semaphore>,
    limit: usize,
    slice: Duration,
    /// Cells that found every place taken and queued.
    queued: std::sync::atomic::AtomicU64,
}

/// The default time slice of [`Admission`]: long enough for a trivial cell (under a millisecond) many times over.
pub const DEFAULT_ADMISSION_SLICE: Duration = Duration::from_millis(50);

impl Admission {
    /// At most `limit` cells computing at once (at least one), each for at most `slice` before it runs on without
    /// a place.
    pub fn new(limit: usize, slice: Duration) -> Arc<Admission> {
        let limit = limit.max(1);
        Arc::new(Admission {
            places: Arc::new(tokio::sync::Semaphore::new(limit)),
            limit,
            slice,
            queued: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The default limit: the cores this process may run on (`std::thread::available_parallelism`).
    pub fn default_limit() -> usize {
        std::thread::available_parallelism().map(std::num::NonZeroUsize::get).unwrap_or(2)
    }

    /// The most cells computing at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Cells that found every place taken and waited for one.
    pub fn queued(&self) -> u64 {
        self.queued.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Places taken now.
    pub fn running(&self) -> usize {
        self.limit - self.places.available_permits()
    }

    /// Takes a place, waiting in line for one when all are taken.
    async fn enter(self: &Arc<Self>) -> Place {
        let permit = match self.places.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.queued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.places.clone().acquire_owned().await.expect("the admission semaphore is never closed")
            }
        };
        Place { _permit: permit, until: tokio::time::Instant::now() + self.slice }
    }
}

/// A cell's place among those computing; dropping it lets the next cell in line start.
#[derive(Debug)]
struct Place {
    _permit: tokio::sync::OwnedSemaphorePermit,
    /// When the cell gives its place back even if it still computes.
    until: tokio::time::Instant,
}

/// The defaults of [`PoolConfig::max_idle`] and [`PoolConfig::idle_ttl`].
pub const DEFAULT_MAX_IDLE: usize = 32;
/// See [`DEFAULT_MAX_IDLE`].
pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(60);

/// Pre-started workers, each with a context already built.
#[derive(Debug)]
pub struct WorkerPool {
    config: PoolConfig,
    /// The `Configure` message each worker gets first, serialized once.
    configure: Option<Arc<Vec<u8>>>,
    idle: Mutex<Idle>,
    /// Checkouts that found no idle worker and waited for one to start.
    spawn_waits: std::sync::atomic::AtomicU64,
    /// This pool's id, which its workers carry: a worker is only ever checked in to the pool that started it (its
    /// contexts carry that pool's globals).
    id: u64,
    /// Set by [`WorkerPool::retire`]: the pool starts and keeps no more workers.
    retired: std::sync::atomic::AtomicBool,
}

/// The idle workers, and how many of them the load has left unused since the last shrink.
#[derive(Debug)]
struct Idle {
    workers: Vec<WorkerProcess>,
    /// Workers being started in the background (by `fill`), counted toward `warm`.
    starting: usize,
    /// The fewest idle workers since the last shrink: that many were never needed in the meantime.
    low_water: usize,
    last_shrink: std::time::Instant,
}

/// What a pool has done, for operators and benches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Workers idle in the pool (their context built or being built).
    pub idle: usize,
    /// Checkouts that found no idle worker and waited for one to start (the cell paid for a spawn).
    pub spawn_waits: u64,
    /// Cells that found every place among those computing taken and queued for one (see [`Admission`]; counted
    /// over every pool sharing the admission).
    pub admission_waits: u64,
}

/// The id of the next pool.
static NEXT_POOL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl WorkerPool {
    /// A pool that starts workers with `config`; call [`WorkerPool::fill`] to start them ahead of need.
    pub fn new(config: PoolConfig) -> Arc<WorkerPool> {
        let configure = config.globals.as_ref().map(|globals| {
            let mut line = serde_json::to_vec(&HostMessage::Configure(Box::new(GuestGlobals::clone(globals))))
                .expect("host messages always serialize");
            line.push(b'\n');
            Arc::new(line)
        });
        // No checkout yet: until the first, every idle worker above `warm` counts as unused.
        let idle =
            Idle { workers: Vec::new(), starting: 0, low_water: usize::MAX, last_shrink: std::time::Instant::now() };
        let pool = Arc::new(WorkerPool {
            config,
            configure,
            idle: Mutex::new(idle),
            spawn_waits: std::sync::atomic::AtomicU64::new(0),
            id: NEXT_POOL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            retired: std::sync::atomic::AtomicBool::new(false),
        });
        // Idle workers beyond `warm` are stopped even when no cell comes to notice them.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&pool);
            let every = pool.config.idle_ttl.max(Duration::from_millis(100));
            runtime.spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(pool) = weak.upgrade() else { return };
                    pool.shrink_if_due();
                }
            });
        }
        pool
    }

    /// Stops the idle workers and keeps no more: the engine replaced this pool (its catalog changed). Workers still
    /// checked out end with their cell or parked run.
    pub fn retire(&self) {
        self.retired.store(true, std::sync::atomic::Ordering::SeqCst);
        // Dropping a worker kills its process.
        let stopped = std::mem::take(&mut self.idle.lock().expect("pool lock").workers);
        drop(stopped);
    }

    fn is_retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The pool's settings.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Workers idle in the pool (their context built or being built).
    pub fn idle_count(&self) -> usize {
        self.idle.lock().expect("pool lock").workers.len()
    }

    /// Idle workers and checkouts that waited for a spawn.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            idle: self.idle_count(),
            spawn_waits: self.spawn_waits.load(std::sync::atomic::Ordering::Relaxed),
            admission_waits: self.config.admission.as_ref().map_or(0, |a| a.queued()),
        }
    }

    /// Stops the idle workers that the load left unused since the last shrink, keeping at least `warm`: if the
    /// idle count never fell below `n` since then, `n - warm` of them were not needed. Returns how many it
    /// stopped. The pool calls it every `idle_ttl` (from a checkout, a checkin, or a background task when no cell
    /// comes); tests call it directly.
    pub fn shrink_idle(&self) -> usize {
        let surplus = {
            let mut idle = self.idle.lock().expect("pool lock");
            let unused = idle.low_water.min(idle.workers.len());
            let stop = unused.saturating_sub(self.config.warm);
            // The workers returned longest ago are taken first by checkouts; the newest go.
            let keep = idle.workers.len() - stop;
            let surplus = idle.workers.split_off(keep);
            idle.low_water = idle.workers.len();
            idle.last_shrink = std::time::Instant::now();
            surplus
        };
        let stopped = surplus.len();
        // Dropping a worker kills it (`kill_on_drop`); its reaping is tokio's.
        drop(surplus);
        stopped
    }

    fn shrink_if_due(&self) {
        let due = self.idle.lock().expect("pool lock").last_shrink.elapsed() >= self.config.idle_ttl;
        if due {
            self.shrink_idle();
        }
    }

    /// Reads and checks the hello of the idle worker the next cell gets, as [`check`](Self::check) does, without
    /// starting a process of its own. `None` when no worker is idle, or when the worker's hello is missing or
    /// refused: that worker is stopped, and `check` then says why. Blocking, as `check` is.
    pub fn check_idle(&self) -> Option<WorkerHello> {
        if std::env::var_os(ENV_ROLE).is_some() {
            return None;
        }
        let mut worker = {
            let mut idle = self.idle.lock().expect("pool lock");
            if idle.workers.is_empty() {
                return None;
            }
            idle.workers.remove(0)
        };
        let hello = worker.greet_blocking()?;
        self.idle.lock().expect("pool lock").workers.insert(0, worker);
        Some(hello)
    }

    /// Starts one worker the way the pool does (stdin closed), reads its [`WorkerHello`], stops it and checks the
    /// hello against this host, so that a wrong worker fails here, once, rather than in every cell. Blocking: it
    /// waits for the worker process to start (a few milliseconds for a worker).
    ///
    /// # Errors
    ///
    /// [`PoolError::StartedAsWorker`] in a process the pool started as a worker, [`PoolError::Spawn`] when the
    /// command cannot start, [`PoolError::NoHello`], [`PoolError::Protocol`] or [`PoolError::SlowEngine`] when
    /// its hello is missing or refused.
    pub fn check(&self) -> Result<WorkerHello, PoolError> {
        if std::env::var_os(ENV_ROLE).is_some() {
            return Err(PoolError::StartedAsWorker);
        }
        let command = &self.config.command;
        let worker = command.display();
        let mut child = std::process::Command::new(&command.program)
            .args(&command.args)
            .envs(self.worker_env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| PoolError::Spawn { path: worker.clone(), source })?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take()
            && wait_readable(stdout.as_raw_fd(), HELLO_TIMEOUT)
        {
            // A hello is one short line; a binary that prints something else gets its first 64 KiB read.
            let _ = std::io::BufReader::new(stdout.take(64 * 1024)).read_line(&mut line);
        }
        let _ = child.kill();
        let status = child.wait();
        if line.is_empty() {
            let mut stderr = Vec::new();
            if let Some(pipe) = child.stderr.take() {
                let _ = pipe.take(4096).read_to_end(&mut stderr);
            }
            let ended = match status {
                Ok(status) if status.code().is_some() => format!("it exited with {status} without a word"),
                _ => format!("it wrote nothing within {} s", HELLO_TIMEOUT.as_secs()),
            };
            let stderr = String::from_utf8_lossy(&stderr);
            if matches!(&status, Ok(status) if status.code() == Some(EXIT_CONFINEMENT)) {
                let line = stderr.lines().rev().find(|l| l.contains("confinement step")).unwrap_or("no reason given");
                return Err(PoolError::Confinement(line.trim_start_matches("codemode worker: ").to_owned()));
            }
            let reason = match stderr.trim() {
                "" => ended,
                said => format!("{ended}; its stderr: {said}"),
            };
            return Err(PoolError::NoHello { worker, reason });
        }
        read_hello(&line, &worker, self.config.require_fast_paths)
    }

    /// Starts workers until `warm` are idle.
    ///
    /// # Errors
    ///
    /// When a worker cannot be started.
    pub fn fill(&self) -> Result<(), PoolError> {
        loop {
            {
                let mut idle = self.idle.lock().expect("pool lock");
                // Workers another fill is starting count: two refills never start one worker each for one gap.
                if self.is_retired()
                    || idle.workers.len() + idle.starting >= self.config.warm.min(self.config.max_idle.max(1))
                {
                    return Ok(());
                }
                idle.starting += 1;
            }
            let worker = self.spawn();
            let mut idle = self.idle.lock().expect("pool lock");
            idle.starting -= 1;
            idle.workers.push(worker?);
        }
    }

    /// An idle worker, or a new one when none is idle (then the pool refills itself in the background).
    ///
    /// # Errors
    ///
    /// When no worker can be started.
    pub fn checkout(self: &Arc<Self>) -> Result<WorkerProcess, PoolError> {
        let (reused, short) = {
            let mut idle = self.idle.lock().expect("pool lock");
            // First in, first out: the worker returned longest ago has most likely finished building its next
            // context.
            let mut found = None;
            while !idle.workers.is_empty() {
                let mut worker = idle.workers.remove(0);
                if worker.is_alive() {
                    found = Some(worker);
                    break;
                }
            }
            idle.low_water = idle.low_water.min(idle.workers.len());
            (found, idle.workers.len() + idle.starting < self.config.warm)
        };
        self.shrink_if_due();
        let worker = match reused {
            Some(worker) => worker,
            None => {
                self.spawn_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.spawn()?
            }
        };
        // Ahead of demand: the next checkout should find a worker started.
        if short {
            self.replenish();
        }
        Ok(worker)
    }

    /// [`WorkerPool::checkout`] once the cell has a place among those computing (see [`Admission`]; at once without
    /// one): cells that queue hold no worker yet, so the pool needs only about as many workers as cells compute at
    /// once. The worker's first `Start` uses that place.
    ///
    /// # Errors
    ///
    /// When no worker can be started.
    pub async fn checkout_admitted(self: &Arc<Self>) -> Result<WorkerProcess, PoolError> {
        let place = match &self.config.admission {
            Some(admission) => Some(admission.enter().await),
            None => None,
        };
        let mut worker = self.checkout()?;
        worker.place = place;
        Ok(worker)
    }

    /// Returns a worker whose cell ended cleanly; its next context is already being built. A worker that comes
    /// back to a pool holding `max_idle` idle workers is stopped, and so are workers of another pool (a parked run's
    /// worker from before the catalog changed) and every worker of a retired pool.
    pub fn checkin(&self, mut worker: WorkerProcess) {
        if worker.pool != self.id || self.is_retired() {
            return;
        }
        worker.place = None;
        let surplus = {
            let mut idle = self.idle.lock().expect("pool lock");
            if idle.workers.len() < self.config.max_idle.max(1) {
                idle.workers.push(worker);
                None
            } else {
                Some(worker)
            }
        };
        drop(surplus);
        self.shrink_if_due();
    }

    /// Starts workers in the background until `warm` are idle: call it when a checked-out worker will not come
    /// back (it was killed, or a parked run keeps it).
    pub fn replenish(self: &Arc<Self>) {
        self.replenish_after(std::time::Duration::ZERO);
    }

    /// [`WorkerPool::replenish`] after `delay`, when workers are still missing then: a run that parks only briefly
    /// brings its worker back before a replacement is started (and stopped again as surplus).
    pub fn replenish_after(self: &Arc<Self>, delay: std::time::Duration) {
        let pool = self.clone();
        tokio::spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if let Err(e) = pool.fill() {
                tracing::warn!("code mode worker pool could not refill: {e}");
            }
        });
    }

    /// The worker's address-space limit: twice the guest's budget, the worker's own needs, and 1 GiB for the
    /// engine thread's stack reservation and the allocator's arenas.
    fn address_space(&self) -> u64 {
        self.config.memory_limit_bytes.saturating_mul(2).saturating_add(WORKER_BASE_MEMORY + 1024 * 1024 * 1024)
    }

    /// The environment of every worker this pool starts, for [`WorkerPool::check`] and the pool alike: its role
    /// marker, limits and confinement mode. The address-space limit is set by the worker itself, as the first step
    /// of its confinement, so a failure is handled and reported.
    fn worker_env(&self) -> [(&'static str, String); 6] {
        [
            // mimalloc (the worker's allocator) reserves 1 GiB of address space at its first allocation unless
            // told otherwise, which would leave the engine thread's stack no room under the limit above.
            (ENV_ARENA_RESERVE, ARENA_RESERVE.to_owned()),
            (ENV_ROLE, "1".to_owned()),
            (ENV_MEMORY, self.config.memory_limit_bytes.to_string()),
            (ENV_INSTRUCTIONS, self.config.instructions.to_string()),
            (ENV_CONFINEMENT, self.config.confinement.as_str().to_owned()),
            (ENV_ADDRESS_SPACE, self.address_space().to_string()),
        ]
    }

    fn spawn(&self) -> Result<WorkerProcess, PoolError> {
        let command = &self.config.command;
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .envs(self.worker_env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child =
            cmd.spawn().map_err(|source| PoolError::Spawn { path: command.program.display().to_string(), source })?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let (stdin, configuring) = match &self.configure {
            // Written in the background so the pool never blocks on a pipe; the first `send` waits for it.
            Some(configure) => {
                let configure = configure.clone();
                let task = tokio::spawn(async move {
                    stdin.write_all(&configure).await?;
                    stdin.flush().await?;
                    Ok(stdin)
                });
                (None, Some(task))
            }
            None => (Some(stdin), None),
        };
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let stderr_tail = Arc::new(Mutex::new(String::new()));
        let tail = stderr_tail.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut tail = tail.lock().expect("stderr lock");
                tail.push_str(&String::from_utf8_lossy(&buf[..n]));
                if tail.len() > 8192 {
                    let cut = tail.len() - 4096;
                    let cut = (cut..tail.len()).find(|i| tail.is_char_boundary(*i)).unwrap_or(tail.len());
                    tail.drain(..cut);
                }
            }
        });
        Ok(WorkerProcess {
            child,
            worker: command.display().into(),
            require_fast_paths: self.config.require_fast_paths,
            greeted: false,
            stdin,
            configuring,
            stdout: BufReader::new(stdout),
            stderr_tail,
            line: String::new(),
            message: Vec::new(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            confinement: None,
            pool: self.id,
            admission: self.config.admission.clone(),
            place: None,
            kept: KeptGlobals::default(),
        })
    }
}

/// Reads a worker's first line as its hello and checks it against this host.
///
/// The version is read before the rest of the hello, so a worker of another version whose hello has another shape
/// is still named by its version.
/// Whether `fd` became readable (or hung up) within `limit`. A signal (a `SIGCHLD` from another child of this
/// process, say) interrupts `poll` with `EINTR`; the wait then goes on for the time left.
fn wait_readable(fd: std::os::fd::RawFd, limit: Duration) -> bool {
    let until = std::time::Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let timeout = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        let mut pollfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: `pollfd` is a valid pollfd for the duration of the call; poll only writes its `revents`.
        match unsafe { libc::poll(&mut pollfd, 1, timeout) } {
            n if n > 0 => return true,
            0 => return false,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted && !left.is_zero() => {}
            _ => return false,
        }
    }
}

fn read_hello(line: &str, worker: &str, require_fast_paths: bool) -> Result<WorkerHello, PoolError> {
    let no_hello = |reason: String| PoolError::NoHello { worker: worker.to_owned(), reason };
    let excerpt = || {
        let line = line.trim_end();
        let end = (0..=line.len().min(200)).rev().find(|i| line.is_char_boundary(*i)).unwrap_or(0);
        format!("`{}{}`", &line[..end], if end < line.len() { "…" } else { "" })
    };
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|_| no_hello(format!("its first line is not JSON: {}", excerpt())))?;
    if value.get("t").and_then(serde_json::Value::as_str) != Some("hello") {
        return Err(no_hello(format!("its first message is not a hello: {}", excerpt())));
    }
    let Some(protocol) = value.get("protocol").and_then(serde_json::Value::as_u64) else {
        return Err(no_hello(format!("its hello names no protocol version: {}", excerpt())));
    };
    if protocol != u64::from(PROTOCOL_VERSION) {
        return Err(PoolError::Protocol {
            worker: worker.to_owned(),
            worker_protocol: u32::try_from(protocol).unwrap_or(u32::MAX),
            host_protocol: PROTOCOL_VERSION,
        });
    }
    let hello = match serde_json::from_value::<WorkerMessage>(value) {
        Ok(WorkerMessage::Hello(hello)) => hello,
        Ok(_) => return Err(no_hello(format!("its first message is not a hello: {}", excerpt()))),
        Err(e) => return Err(no_hello(format!("its hello is malformed ({e}): {}", excerpt()))),
    };
    let missing = hello.fast_paths.missing();
    if require_fast_paths && !missing.is_empty() {
        return Err(PoolError::SlowEngine {
            worker: worker.to_owned(),
            missing: missing.join(" and "),
            patch_lines: boa_patch_lines(),
        });
    }
    Ok(hello)
}

/// The longest worker message a [`WorkerProcess`] reads unless told otherwise.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// A message buffer up to this capacity is kept for the next message; a larger one is freed.
const KEPT_MESSAGE_BUFFER: usize = 1024 * 1024;

enum LineError {
    Io,
    TooLong,
}

/// Reads one line, with its newline, into `line` if it is at most `max` bytes: `Ok(false)` at end of input; a
/// longer line is not read further than `max` bytes.
async fn read_bounded_line(
    reader: &mut BufReader<ChildStdout>,
    line: &mut Vec<u8>,
    max: usize,
    place: &mut Option<Place>,
) -> Result<bool, LineError> {
    loop {
        // A cell past its time slice gives its place back and computes on without one (see `Admission`).
        if let Some(until) = place.as_ref().map(|p| p.until)
            && tokio::time::timeout_at(until, reader.fill_buf()).await.is_err()
        {
            *place = None;
        }
        let available = reader.fill_buf().await.map_err(|_| LineError::Io)?;
        if available.is_empty() {
            return Ok(false);
        }
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        if line.len() + take > max.saturating_add(1) {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&available[..take]);
        reader.consume(take);
        if done {
            return Ok(true);
        }
    }
}

/// How a worker process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Death {
    /// It passed its memory limit.
    Memory,
    /// It overflowed its stack.
    Stack,
    /// It could not confine itself and ended before running anything: the step that failed, and why.
    Confinement(String),
    /// Any other end: exit code or signal, with the end of its stderr.
    Other(String),
    /// It sent a message longer than the host reads (this many bytes); the host stopped reading and killed it.
    Oversized(usize),
}

impl Death {
    /// A message a model can act on.
    pub fn message(&self) -> String {
        match self {
            Death::Memory => "code mode memory limit exceeded: the program allocated more than memoryLimitBytes. \
                              Process data in smaller pieces and keep fewer large values alive."
                .into(),
            Death::Stack => "code mode stack limit exceeded: the program nested too deeply (recursion, or data \
                             nested thousands of levels deep being stringified). Flatten the data or iterate."
                .into(),
            Death::Confinement(what) => {
                format!("code mode runtime unavailable: the worker could not confine itself ({what}); {OPT_OUT_HINT}")
            }
            Death::Other(what) => format!("code mode worker ended unexpectedly ({what}); the host is unaffected"),
            Death::Oversized(max) => format!(
                "code mode output limit exceeded: the program produced a single output or message over {max} bytes, \
                 more than the host reads at once. Print or return less at a time."
            ),
        }
    }
}

/// One worker process, owned by one run at a time.
#[derive(Debug)]
pub struct WorkerProcess {
    child: Child,
    /// The command that started it, for error messages.
    worker: Arc<str>,
    require_fast_paths: bool,
    /// Whether its hello was read and accepted.
    greeted: bool,
    /// `None` while the `Configure` message is being written, or after that write failed.
    stdin: Option<ChildStdin>,
    configuring: Option<tokio::task::JoinHandle<std::io::Result<ChildStdin>>>,
    stdout: BufReader<ChildStdout>,
    stderr_tail: Arc<Mutex<String>>,
    line: String,
    /// The message being read by [`WorkerProcess::recv`].
    message: Vec<u8>,
    /// The longest message `recv` reads; a longer one kills the worker.
    max_message_bytes: usize,
    /// What the worker reported in its first message, once read.
    confinement: Option<ConfinementReport>,
    /// The id of the pool that started it.
    pool: u64,
    /// The admission its cells take a place from while they compute, if any.
    admission: Option<Arc<Admission>>,
    /// The place its cell holds while it computes.
    place: Option<Place>,
    /// The globals keys the worker keeps prepared (see [`Start::globals_key`]).
    kept: KeptGlobals<()>,
}

impl WorkerProcess {
    /// Whether the process is still running.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process id, for supervision and tests.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The confinement the worker reported in its first message; `None` until [`WorkerProcess::recv`] has read it.
    pub fn confinement(&self) -> Option<&ConfinementReport> {
        self.confinement.as_ref()
    }

    /// Sends one message.
    ///
    /// # Errors
    ///
    /// When the pipe is broken (the worker died).
    pub async fn send(&mut self, message: &HostMessage) -> Result<(), PoolError> {
        match self.write(message).await {
            Err(PoolError::Pipe(e)) => match self.death().await {
                // A worker that could not confine itself closed its pipe on purpose: say why.
                Death::Confinement(what) => Err(PoolError::Confinement(what)),
                _ => Err(PoolError::Pipe(e)),
            },
            other => other,
        }
    }

    async fn write(&mut self, message: &HostMessage) -> Result<(), PoolError> {
        self.greet().await?;
        // The cell computes from this message to its next report: it takes a place first (see `Admission`).
        if matches!(message, HostMessage::Start(_) | HostMessage::Settle(_))
            && self.place.is_none()
            && let Some(admission) = &self.admission
        {
            self.place = Some(admission.enter().await);
        }
        let mut text = match message {
            // The worker keeps these globals prepared: the start leaves them out.
            HostMessage::Start(start) if start.globals.is_some() && self.kept_globals(start.globals_key) => {
                let light = HostMessage::Start(Box::new(Start { globals: None, ..Start::clone(start) }));
                serde_json::to_vec(&light)
            }
            _ => serde_json::to_vec(message),
        }
        .expect("host messages always serialize");
        text.push(b'\n');
        if let Some(task) = self.configuring.take() {
            self.stdin = Some(task.await.map_err(std::io::Error::other)??);
        }
        let stdin = self.stdin.as_mut().ok_or_else(|| PoolError::Pipe(std::io::ErrorKind::BrokenPipe.into()))?;
        stdin.write_all(&text).await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Whether the worker keeps the globals of `key` prepared; counts the start that carries them as the worker
    /// does.
    fn kept_globals(&mut self, key: Option<u64>) -> bool {
        let Some(key) = key else { return false };
        if self.kept.touch(key).is_some() {
            return true;
        }
        self.kept.insert(key, ());
        false
    }

    /// Reads and checks the worker's hello, once; a refused worker is killed.
    ///
    /// The worker writes its hello before it builds anything, so for a pooled worker it is already in the pipe.
    async fn greet(&mut self) -> Result<(), PoolError> {
        if self.greeted {
            return Ok(());
        }
        self.line.clear();
        let result = match self.stdout.read_line(&mut self.line).await {
            Ok(0) => match self.death().await {
                // A worker that could not confine itself ends before its hello, on purpose: say why.
                Death::Confinement(what) => Err(PoolError::Confinement(what)),
                death => Err(PoolError::NoHello {
                    worker: self.worker.to_string(),
                    reason: format!("it ended before writing a line: {}", death.message()),
                }),
            },
            Ok(_) => read_hello(&self.line, &self.worker, self.require_fast_paths).map(|hello| {
                warn_unconfined(&hello.confinement);
                self.confinement = Some(hello.confinement);
            }),
            Err(e) => Err(PoolError::Pipe(e)),
        };
        match result {
            Ok(()) => self.greeted = true,
            Err(_) => {
                let _ = self.child.start_kill();
            }
        }
        result
    }

    /// [`greet`](Self::greet) for a worker no message was read from yet, blocking: its hello is read straight from
    /// the pipe. `None` when it is missing, longer than 64 KiB, followed by anything, or refused.
    fn greet_blocking(&mut self) -> Option<WorkerHello> {
        let fd = self.stdout.get_ref().as_raw_fd();
        let until = std::time::Instant::now() + HELLO_TIMEOUT;
        let mut line = Vec::new();
        while !line.contains(&b'\n') {
            if line.len() > 64 * 1024 || !wait_readable(fd, until.saturating_duration_since(std::time::Instant::now()))
            {
                return None;
            }
            let mut buf = [0u8; 4096];
            // SAFETY: `buf` is valid for writes of its length; the pipe is this worker's stdout, which no reader
            // has read from yet.
            match unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } {
                0 => return None,
                n if n > 0 => line.extend_from_slice(&buf[..n.unsigned_abs()]),
                _ if matches!(
                    std::io::Error::last_os_error().kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
                _ => return None,
            }
        }
        // The worker writes nothing after its hello until it is sent a cell.
        if line.last() != Some(&b'\n') || line.iter().filter(|b| **b == b'\n').count() != 1 {
            return None;
        }
        let hello = read_hello(std::str::from_utf8(&line).ok()?, &self.worker, self.require_fast_paths).ok()?;
        warn_unconfined(&hello.confinement);
        self.confinement = Some(hello.confinement.clone());
        self.greeted = true;
        Some(hello)
    }

    /// Sets the longest message [`recv`](Self::recv) reads (default [`DEFAULT_MAX_MESSAGE_BYTES`]): a run sets
    /// it from its limits, so that no message is read whole into host memory without a cap.
    pub fn set_max_message_bytes(&mut self, max: usize) {
        self.max_message_bytes = max;
    }

    /// The next message other than `Ready`, or how the worker died. A message longer than the cap set with
    /// [`set_max_message_bytes`](Self::set_max_message_bytes) is not read further: the worker is killed and the
    /// death is [`Death::Oversized`].
    pub async fn recv(&mut self) -> Result<WorkerMessage, Death> {
        match self.greet().await {
            Ok(()) => {}
            Err(PoolError::Confinement(what)) => return Err(Death::Confinement(what)),
            Err(e) => return Err(Death::Other(e.to_string())),
        }
        loop {
            let mut message = std::mem::take(&mut self.message);
            message.clear();
            let read = read_bounded_line(&mut self.stdout, &mut message, self.max_message_bytes, &mut self.place).await;
            let parsed = match read {
                Ok(true) => serde_json::from_slice::<WorkerMessage>(&message),
                Ok(false) | Err(LineError::Io) => {
                    self.place = None;
                    return Err(self.death().await);
                }
                Err(LineError::TooLong) => {
                    self.place = None;
                    let _ = self.child.start_kill();
                    return Err(Death::Oversized(self.max_message_bytes));
                }
            };
            // A large message's buffer is not kept for the next one.
            if message.capacity() <= KEPT_MESSAGE_BUFFER {
                self.message = message;
            }
            // A report ends the cell's computing until the host settles something: its place goes to the next.
            if matches!(parsed, Ok(WorkerMessage::Quiescent { .. } | WorkerMessage::Failed { .. }) | Err(_)) {
                self.place = None;
            }
            match parsed {
                Ok(WorkerMessage::Ready) => continue,
                Ok(WorkerMessage::Hello(_)) => {
                    let _ = self.child.start_kill();
                    return Err(Death::Other("it sent a second hello".into()));
                }
                Ok(message) => return Ok(message),
                Err(e) => {
                    let _ = self.child.start_kill();
                    return Err(Death::Other(format!("it sent a malformed message: {e}")));
                }
            }
        }
    }

    async fn death(&mut self) -> Death {
        let status = self.child.wait().await;
        // Give the stderr reader a moment to collect the last words.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let tail = self.stderr_tail.lock().expect("stderr lock").clone();
        if let Ok(status) = &status
            && status.code() == Some(EXIT_CONFINEMENT)
        {
            let line = tail.lines().rev().find(|l| l.contains("confinement step")).unwrap_or("no reason given");
            return Death::Confinement(line.trim_start_matches("codemode worker: ").to_owned());
        }
        if tail.contains("overflowed its stack") || tail.contains("stack overflow") {
            return Death::Stack;
        }
        if tail.contains("memory limit exceeded") || tail.contains("memory allocation of") {
            return Death::Memory;
        }
        match status {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                if status.code() == Some(EXIT_MEMORY) {
                    Death::Memory
                } else if let Some(signal) = status.signal() {
                    Death::Other(format!("signal {signal}"))
                } else {
                    Death::Other(format!("exit code {}", status.code().unwrap_or(-1)))
                }
            }
            Err(e) => Death::Other(e.to_string()),
        }
    }

    /// Kills the process and reaps it.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Logs, once per process, a worker that runs without part of its confinement (best effort, or off).
fn warn_unconfined(report: &ConfinementReport) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if report.fully_applied() || WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let missing: Vec<String> = report
        .missing()
        .map(|s| match &s.outcome {
            crate::confine::StepOutcome::Failed { error } => format!("{} ({error})", s.step),
            _ => format!("{} (skipped)", s.step),
        })
        .collect();
    tracing::warn!("code mode workers run with confinement {} and without: {}", report.mode, missing.join(", "));
}
