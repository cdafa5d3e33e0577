//! The host side of the executor: finding the worker executable, starting workers ahead of need, talking to them
//! over their stdin/stdout, and telling how a worker died.
//!
//! Invariant: a worker serves one cell at a time and is either idle in the pool, owned by exactly one run, or
//! killed. A worker whose cell did not end cleanly is never returned to the pool.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::confine::{
    Confinement, ConfinementReport, ENV_ADDRESS_SPACE, ENV_CONFINEMENT, EXIT_CONFINEMENT, OPT_OUT_HINT,
};
use crate::protocol::{GuestGlobals, HostMessage, WorkerMessage};
use crate::worker::{ENV_INSTRUCTIONS, ENV_MEMORY, EXIT_MEMORY};

/// Environment variable naming the worker executable, overriding every other way of finding it.
pub const ENV_WORKER: &str = "CODEMODE_WORKER";
/// The bundled worker binary's name.
pub const WORKER_BIN: &str = "codemode-worker";
/// Memory the worker process needs besides the guest's own budget (engine, prelude, buffers).
const WORKER_BASE_MEMORY: u64 = 48 * 1024 * 1024;

/// Errors of the worker pool.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// No worker executable could be found.
    #[error(
        "no code mode worker executable found (looked at ${ENV_WORKER}, then `{WORKER_BIN}` next to {0}); build it \
         with `cargo build -p codemode-vm --bin codemode-worker` or set {ENV_WORKER}"
    )]
    NotFound(String),
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
    /// [`PoolError::NotFound`] when none exists.
    pub fn locate() -> Result<WorkerCommand, PoolError> {
        if let Some(path) = std::env::var_os(ENV_WORKER) {
            return Ok(WorkerCommand { program: PathBuf::from(path), args: Vec::new() });
        }
        let exe = std::env::current_exe().map_err(|e| PoolError::NotFound(e.to_string()))?;
        let name = format!("{WORKER_BIN}{}", std::env::consts::EXE_SUFFIX);
        let mut dir = exe.parent();
        for _ in 0..2 {
            let Some(d) = dir else { break };
            let candidate = d.join(&name);
            if candidate.is_file() {
                return Ok(WorkerCommand { program: candidate, args: Vec::new() });
            }
            dir = d.parent();
        }
        Err(PoolError::NotFound(exe.display().to_string()))
    }

    /// Re-executes the running binary with `args` (the binary must call `codemode_vm::worker::run_worker` when
    /// it sees them).
    ///
    /// # Errors
    ///
    /// [`PoolError::NotFound`] when the running executable cannot be named.
    pub fn current_exe(args: &[&str]) -> Result<WorkerCommand, PoolError> {
        let program = std::env::current_exe().map_err(|e| PoolError::NotFound(e.to_string()))?;
        Ok(WorkerCommand { program, args: args.iter().map(|s| (*s).to_owned()).collect() })
    }
}

/// Settings of a pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// How to start a worker.
    pub command: WorkerCommand,
    /// Idle workers kept ready.
    pub warm: usize,
    /// The guest's memory budget in bytes.
    pub memory_limit_bytes: u64,
    /// Engine instructions one cell may execute.
    pub instructions: u64,
    /// The globals every context is built with, sent to each worker as it starts; `None` leaves them to `Start`.
    pub globals: Option<Arc<GuestGlobals>>,
    /// How each worker confines itself before it runs anything (default [`Confinement::Required`]).
    pub confinement: Confinement,
}

/// Pre-started workers, each with a context already built.
#[derive(Debug)]
pub struct WorkerPool {
    config: PoolConfig,
    /// The `Configure` message each worker gets first, serialized once.
    configure: Option<Arc<Vec<u8>>>,
    idle: Mutex<Vec<WorkerProcess>>,
}

impl WorkerPool {
    /// A pool that starts workers with `config`; call [`WorkerPool::fill`] to start them ahead of need.
    pub fn new(config: PoolConfig) -> Arc<WorkerPool> {
        let configure = config.globals.as_ref().map(|globals| {
            let mut line = serde_json::to_vec(&HostMessage::Configure(Box::new(GuestGlobals::clone(globals))))
                .expect("host messages always serialize");
            line.push(b'\n');
            Arc::new(line)
        });
        Arc::new(WorkerPool { config, configure, idle: Mutex::new(Vec::new()) })
    }

    /// The pool's settings.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Workers idle in the pool (their context built or being built).
    pub fn idle_count(&self) -> usize {
        self.idle.lock().expect("pool lock").len()
    }

    /// Starts workers until `warm` are idle.
    ///
    /// # Errors
    ///
    /// When a worker cannot be started.
    pub fn fill(&self) -> Result<(), PoolError> {
        loop {
            if self.idle.lock().expect("pool lock").len() >= self.config.warm {
                return Ok(());
            }
            let worker = self.spawn()?;
            self.idle.lock().expect("pool lock").push(worker);
        }
    }

    /// An idle worker, or a new one when none is idle (then the pool refills itself in the background).
    ///
    /// # Errors
    ///
    /// When no worker can be started.
    pub fn checkout(self: &Arc<Self>) -> Result<WorkerProcess, PoolError> {
        let reused = {
            let mut idle = self.idle.lock().expect("pool lock");
            // First in, first out: the worker returned longest ago has most likely finished building its next
            // context.
            let mut found = None;
            while !idle.is_empty() {
                let mut worker = idle.remove(0);
                if worker.is_alive() {
                    found = Some(worker);
                    break;
                }
            }
            found
        };
        match reused {
            Some(worker) => Ok(worker),
            None => {
                let worker = self.spawn()?;
                self.replenish();
                Ok(worker)
            }
        }
    }

    /// Returns a worker whose cell ended cleanly; its next context is already being built. Workers beyond `warm`
    /// are stopped.
    pub fn checkin(&self, worker: WorkerProcess) {
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() < self.config.warm.max(1) {
            idle.push(worker);
        }
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

    fn spawn(&self) -> Result<WorkerProcess, PoolError> {
        let command = &self.config.command;
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .env(ENV_MEMORY, self.config.memory_limit_bytes.to_string())
            .env(ENV_INSTRUCTIONS, self.config.instructions.to_string())
            .env(ENV_CONFINEMENT, self.config.confinement.as_str())
            // The worker sets it itself, as the first step of its confinement, so a failure is handled and reported.
            .env(ENV_ADDRESS_SPACE, self.address_space().to_string())
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
            stdin,
            configuring,
            stdout: BufReader::new(stdout),
            stderr_tail,
            line: String::new(),
            confinement: None,
        })
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
        }
    }
}

/// One worker process, owned by one run at a time.
#[derive(Debug)]
pub struct WorkerProcess {
    child: Child,
    /// `None` while the `Configure` message is being written, or after that write failed.
    stdin: Option<ChildStdin>,
    configuring: Option<tokio::task::JoinHandle<std::io::Result<ChildStdin>>>,
    stdout: BufReader<ChildStdout>,
    stderr_tail: Arc<Mutex<String>>,
    line: String,
    /// What the worker reported in its first message, once read.
    confinement: Option<ConfinementReport>,
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
        let mut text = serde_json::to_vec(message).expect("host messages always serialize");
        text.push(b'\n');
        if let Some(task) = self.configuring.take() {
            self.stdin = Some(task.await.map_err(std::io::Error::other)??);
        }
        let stdin = self.stdin.as_mut().ok_or_else(|| PoolError::Pipe(std::io::ErrorKind::BrokenPipe.into()))?;
        stdin.write_all(&text).await?;
        stdin.flush().await?;
        Ok(())
    }

    /// The next message other than `Ready` and `Confined` (kept for [`WorkerProcess::confinement`]), or how the
    /// worker died.
    pub async fn recv(&mut self) -> Result<WorkerMessage, Death> {
        loop {
            self.line.clear();
            let read = self.stdout.read_line(&mut self.line).await;
            match read {
                Ok(0) | Err(_) => return Err(self.death().await),
                Ok(_) => match serde_json::from_str::<WorkerMessage>(&self.line) {
                    Ok(WorkerMessage::Ready) => continue,
                    Ok(WorkerMessage::Confined(report)) => {
                        warn_unconfined(&report);
                        self.confinement = Some(report);
                        continue;
                    }
                    Ok(message) => return Ok(message),
                    Err(e) => {
                        let _ = self.child.start_kill();
                        return Err(Death::Other(format!("it sent a malformed message: {e}")));
                    }
                },
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
