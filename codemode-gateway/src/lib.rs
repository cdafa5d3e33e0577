//! The code-mode MCP gateway as a library: an MCP server that wraps any set of MCP servers (and an embedder's own
//! tools) and offers them as `exec` + `wait`, over stdio or Streamable HTTP.
//!
//! [`GatewayBuilder`] is the way in: a loaded [`GatewayConfig`], optional overrides (state folder, store,
//! confinement, worker command) and the embedder's own tools, then [`start`](GatewayBuilder::start) for a [`Gateway`]
//! to serve yourself or [`serve`](GatewayBuilder::serve) to serve it until the client leaves or the process is
//! stopped. The `codemode mcp` command is this builder behind its flags.
//!
//! `config` reads the file, `codemode_mcp` runs the wrapped servers and is the engine's tool host beside the
//! embedder's, `server` speaks MCP to the client (`approve` asks a person about a call, `notify` sends progress and
//! logs, `tasks` runs `exec`/`wait` as MCP tasks) over `stdio` or Streamable HTTP, behind `auth` when `[auth]` is
//! configured. The code mode engine itself is the `codemode` facade. Invariant: after start-up, nothing an upstream
//! server, a client or a guest program does can stop the gateway.

pub mod approve;
pub mod auth;
pub mod config;
pub mod console;
pub mod notify;
pub mod server;
pub mod stdio;
pub mod tasks;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use codemode::WorkerCommand;

pub use codemode_mcp::{UpstreamManager, install_tls_provider};
pub use config::{GatewayConfig, ServerConfig, Startup, StoreConfig, TelemetryConfig, Transport};
pub use server::{Gateway, GatewayServer, WORKER_ARG};

/// Everything that stops the gateway from starting or serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", file.display())]
    ReadConfig {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file's content is wrong.
    #[error("{}: {key}: {problem} (fix: {fix})", file.display())]
    Config {
        /// The file.
        file: PathBuf,
        /// The dotted key at fault, or `(file)` for the whole file.
        key: String,
        /// What is wrong with it.
        problem: String,
        /// What to write instead.
        fix: String,
    },
    /// `--http` named an address the gateway will not listen on.
    #[error("--http {addr}: {problem}")]
    HttpAddress {
        /// The address given.
        addr: SocketAddr,
        /// Why it is refused.
        problem: String,
    },
    /// `[auth]` could not be put in force: its token file or its JWK Set is unreadable or wrong.
    #[error("{0}")]
    Auth(String),
    /// The code mode engine could not be built.
    #[error("cannot start code mode: {0}")]
    Engine(String),
    /// Serving the client failed (stdio closed during the handshake, the port is taken, ...).
    #[error("cannot serve MCP: {0}")]
    Serve(String),
}

/// Reads `--confinement`.
///
/// # Errors
///
/// A name other than `required`, `best-effort` (`best_effort`) or `off`.
pub fn parse_confinement(name: &str) -> Result<codemode::Confinement, String> {
    codemode::Confinement::parse(name).ok_or_else(|| format!("`{name}` is not one of required, best-effort, off"))
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The `[telemetry] otlp_endpoint` of the gateway config `file`, read before the runtime starts (export is set up
/// once per process); `None` when the file has none or cannot be read (the gateway reports that itself).
pub fn configured_otlp_endpoint(file: &std::path::Path) -> Option<String> {
    GatewayConfig::load(file).ok().and_then(|c| c.telemetry.otlp_endpoint)
}

/// Where the gateway serves its client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// One client on stdin and stdout. `session` is its session id, so that a gateway started again with the same id
    /// and state folder can resume the runs an earlier one parked; a fresh id when `None`.
    Stdio {
        /// The client's session id.
        session: Option<String>,
    },
    /// Streamable HTTP at `/mcp` on this address. An address other than loopback needs `[auth]` in the config.
    Http(SocketAddr),
}

/// The state folder a stdio gateway keeps its runs and session values in when nothing else is named:
/// `$XDG_STATE_HOME/codemode`, else `~/.local/state/codemode`; `None` when neither variable names an absolute
/// folder. Sealed like any state folder when `CODEMODE_STATE_KEY` is set.
pub fn default_state_dir() -> Option<PathBuf> {
    let absolute = |var: &str| std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute());
    absolute("XDG_STATE_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".local/state")))
        .map(|base| base.join("codemode"))
}

/// The session id of a stdio gateway started with the config file at `config` and no `--session`: stable for one
/// file (`cfg_` and 16 hex digits of the SHA-256 of its canonical path), so that a gateway started again finds the
/// session values and parked runs of the one before.
pub fn config_session(config: &Path) -> String {
    use sha2::Digest;
    let path = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    let digest = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
    format!("cfg_{}", &hex::encode(digest)[..16])
}

/// How a gateway is started: its config with the overrides of the command line, and the tools of its embedder.
///
/// ```no_run
/// # async fn serve() -> Result<(), codemode_gateway::Error> {
/// use codemode_gateway::{GatewayBuilder, Listen};
///
/// GatewayBuilder::load("gateway.toml".as_ref())?
///     .state_dir("state")
///     .serve(Listen::Http("127.0.0.1:8931".parse().unwrap()))
///     .await
/// # }
/// ```
pub struct GatewayBuilder {
    config: GatewayConfig,
    state_dir: Option<PathBuf>,
    own: server::OwnTools,
    worker: Option<WorkerCommand>,
}

impl std::fmt::Debug for GatewayBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayBuilder")
            .field("config", &self.config.file)
            .field("state_dir", &self.state_dir)
            .field("own_tools", &self.own.definitions.len())
            .field("worker", &self.worker)
            .finish()
    }
}

impl GatewayBuilder {
    /// A builder over `config`; runs are parked in its `state_dir`, if it has one.
    pub fn new(config: GatewayConfig) -> GatewayBuilder {
        let state_dir = config.state_dir.clone();
        GatewayBuilder { config, state_dir, own: server::OwnTools::default(), worker: None }
    }

    /// A builder over the config file `file` (codemode TOML, or a desktop client's `{"mcpServers": {...}}` JSON).
    ///
    /// # Errors
    ///
    /// [`Error::ReadConfig`] when the file cannot be read, [`Error::Config`] naming the key and the fix when its
    /// content is wrong.
    pub fn load(file: &Path) -> Result<GatewayBuilder, Error> {
        Ok(GatewayBuilder::new(GatewayConfig::load(file)?))
    }

    /// The config as it stands, overrides applied.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// Parks suspended runs in `dir` (instead of the config's `state_dir`); a store set by [`store`](Self::store)
    /// or `[store]` takes precedence.
    #[must_use]
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> GatewayBuilder {
        self.state_dir = Some(dir.into());
        self
    }

    /// Keeps suspended runs and session values in memory only, whatever the config's `state_dir` says.
    #[must_use]
    pub fn in_memory(mut self) -> GatewayBuilder {
        self.state_dir = None;
        self
    }

    /// Whether runs are kept anywhere but in memory: a state folder or a fleet store.
    pub fn persists(&self) -> bool {
        self.state_dir.is_some() || self.config.store.is_some()
    }

    /// Keeps suspended runs, session values and result references in the PostgreSQL database at `url` (instead of
    /// the config's `[store] url`), shared by every replica started with it.
    #[must_use]
    pub fn store(mut self, url: impl Into<String>) -> GatewayBuilder {
        let url = url.into();
        self.config.store = Some(match self.config.store.take() {
            Some(store) => StoreConfig { url, ..store },
            None => StoreConfig { url, lease_ms: codemode::store::DEFAULT_LEASE_MS, ttl_ms: None },
        });
        self
    }

    /// How workers confine themselves (instead of the config's `confinement`).
    #[must_use]
    pub fn confinement(mut self, confinement: codemode::Confinement) -> GatewayBuilder {
        self.config.confinement = confinement;
        self
    }

    /// Gives programs the embedder's own tools beside the MCP servers': each of `definitions` (none may name a
    /// server or be direct-only) becomes a global in the guest, and `host` runs its calls. The policy, budgets and
    /// approvals apply to them as to MCP tools.
    #[must_use]
    pub fn tools(
        mut self,
        definitions: Vec<codemode::ToolDefinition>,
        host: Arc<dyn codemode::ToolHost>,
    ) -> GatewayBuilder {
        self.own = server::OwnTools { definitions, host: Some(host) };
        self
    }

    /// Runs cells in workers started by `worker`. The default is this executable with [`WORKER_ARG`], which needs
    /// the program to call `codemode::worker::run_worker()` when it is started with that argument.
    #[must_use]
    pub fn worker(mut self, worker: WorkerCommand) -> GatewayBuilder {
        self.worker = Some(worker);
        self
    }

    /// Starts the upstream servers and the code mode engine.
    ///
    /// # Errors
    ///
    /// An own tool that names a server or is direct-only, a `deny`/`direct` entry naming a tool its server does not
    /// offer ([`Error::Config`]), state keys, a store or a worker that cannot be used ([`Error::Engine`]). Upstream
    /// servers that fail at start are reported on stderr and left out instead.
    pub async fn start(self) -> Result<Arc<Gateway>, Error> {
        install_tls_provider();
        if let Some(def) = self.own.definitions.iter().find(|d| d.server.is_some() || d.direct_only) {
            return Err(Error::Engine(format!(
                "the embedder's tool \"{}\" names an MCP server or is direct-only; own tools run inside programs only \
                 (fix: leave `server` unset and `direct_only` false)",
                def.name
            )));
        }
        let worker = match self.worker {
            Some(worker) => worker,
            None => WorkerCommand::current_exe(&[WORKER_ARG]).map_err(|e| Error::Engine(e.to_string()))?,
        };
        let state_dir = if self.config.store.is_some() { None } else { self.state_dir };
        Gateway::start(&self.config, state_dir, self.own, worker).await
    }

    /// Starts the gateway and serves it on `listen` until the client disconnects (stdio) or the process gets SIGINT
    /// or SIGTERM; then stops the upstream servers.
    ///
    /// # Errors
    ///
    /// What [`start`](Self::start) refuses, a non-loopback HTTP address without `[auth]` ([`Error::HttpAddress`]), an
    /// `[auth]` whose token file or JWK Set cannot be used ([`Error::Auth`]), or a transport that cannot be served
    /// ([`Error::Serve`]).
    pub async fn serve(self, listen: Listen) -> Result<(), Error> {
        install_tls_provider();
        if let Listen::Http(addr) = listen
            && !addr.ip().is_loopback()
            && self.config.auth.is_none()
        {
            return Err(Error::HttpAddress {
                addr,
                problem: format!(
                    "a non-loopback address is served only with authentication: add an [auth] table to {} \
                     (`tokens_file`, or `issuers`, `audience` and `jwks_url`; see docs/gateway.md, \"Authentication\"), \
                     or listen on 127.0.0.1",
                    self.config.file.display()
                ),
            });
        }
        // The token file and the JWK Set are read before any upstream server starts, so a mistake there costs nothing.
        let authenticator = match (&self.config.auth, &listen) {
            (Some(settings), _) if matches!(listen, Listen::Http(_)) || self.config.console.is_some() => {
                let clock: Arc<dyn codemode::store::Clock> = Arc::new(codemode::store::SystemClock);
                Some(Arc::new(auth::Authenticator::new(settings, clock).await?))
            }
            _ => None,
        };
        let auth = self.config.auth.clone();
        let gateway = self.start().await?;
        // The gauges read the live engine; once it is gone (the last export, at exit), what it held when it stopped.
        let stopped = Arc::new(std::sync::Mutex::new(None));
        let (weak, last) = (Arc::downgrade(&gateway), stopped.clone());
        codemode_telemetry::otlp::observe_engine(move || {
            let stats = match weak.upgrade() {
                Some(gateway) => Some(gateway.stats()),
                None => *last.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
            };
            stats.map(|s: codemode::EngineStats| codemode_telemetry::otlp::EngineGauges {
                parked_runs: s.parked_runs,
                idle_workers: s.idle_workers,
                parked_with_worker: s.parked_with_worker,
            })
        });
        // The console serves on its own listener beside the client's transport; its pages sign in through `[auth]`.
        let console = gateway.console().cloned().map(|c| console::web::serve(c, authenticator.clone()));
        let console = async {
            match console {
                Some(console) => console.await,
                None => std::future::pending().await,
            }
        };
        let serving = async {
            match listen {
                Listen::Http(addr) => {
                    let front = match (authenticator, &auth, gateway.limits()) {
                        (Some(authenticator), Some(settings), Some(limits)) => {
                            Some(Arc::new(auth::http::AuthFront::new(
                                authenticator,
                                limits.clone(),
                                auth::sessions::Sessions::new(
                                    settings.shares.max_sessions as usize,
                                    std::time::Duration::from_secs(settings.shares.session_idle_seconds),
                                ),
                                settings.resource.clone(),
                                settings.jwt.as_ref().map(|j| j.issuers.clone()).unwrap_or_default(),
                                settings.required_scopes.clone(),
                            )))
                        }
                        _ => None,
                    };
                    server::serve_http(gateway.clone(), addr, front).await
                }
                Listen::Stdio { session } => server::serve_stdio(gateway.clone(), session).await,
            }
        };
        // Stopped by SIGINT or SIGTERM, the gateway shuts down as when its stdio client leaves: upstream servers are
        // stopped (the process's telemetry is flushed by its owner).
        let served = tokio::select! {
            served = serving => served,
            served = console => served,
            () = stop_signal() => Ok(()),
        };
        *stopped.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(gateway.stats());
        gateway.shutdown().await;
        served
    }
}
