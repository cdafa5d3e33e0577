//! `codemode mcp`: an MCP server that wraps any set of MCP servers and offers them as `exec` + `wait`.
//!
//! `config` reads the file, `upstream` runs the wrapped servers and is the facade's `ToolHost`, `relay` answers what
//! those servers ask of their client (elicitation, sampling, tool list changes), `content` turns a program's
//! attachments into content blocks, `server` speaks MCP to the client over `stdio` (or Streamable HTTP, behind `auth` when `[auth]` is configured). This module only wires them; the code mode engine itself is the `codemode` facade. Invariant: after
//! start-up, nothing an upstream server or a guest program does can stop the gateway.

pub mod approve;
pub mod auth;
pub mod config;
pub mod content;
pub mod notify;
pub mod relay;
pub mod server;
pub mod stdio;
pub mod tasks;
pub mod upstream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use config::{GatewayConfig, ServerConfig, Startup, StoreConfig, TelemetryConfig, Transport};
pub use server::{Gateway, GatewayServer};
pub use upstream::UpstreamManager;

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

/// The arguments of `codemode mcp`.
#[derive(Clone, Debug, clap::Args)]
pub struct GatewayArgs {
    /// The gateway config: codemode TOML, or a desktop client's `{"mcpServers": {...}}` JSON.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Serve Streamable HTTP on this address (e.g. 127.0.0.1:8931) instead of stdio. An address other than
    /// loopback needs `[auth]` in the config.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Keep suspended runs in this directory (overrides the config's `state_dir`).
    #[arg(long, value_name = "DIR", conflicts_with = "store")]
    pub state_dir: Option<PathBuf>,
    /// Keep suspended runs, session values and result references in this PostgreSQL database, shared by every
    /// replica started with it (overrides the config's `[store] url`).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// How workers confine themselves: required (default), best-effort or off (overrides the config's
    /// `confinement`).
    #[arg(long, value_name = "MODE", value_parser = parse_confinement)]
    pub confinement: Option<codemode::Confinement>,
    /// The session id of the stdio client (runs are scoped to it), so that a gateway started again with the same
    /// id and `--state-dir` can resume the runs an earlier one parked; a fresh id per process when absent.
    #[arg(long, value_name = "ID", conflicts_with = "http")]
    pub session: Option<String>,
}

/// Installs the process's TLS provider (rustls with ring). reqwest, which the gateway's HTTP clients use (upstream
/// Streamable HTTP servers, the JWKS fetch), is built without a provider of its own and panics when a client is
/// built before one is installed; a second call changes nothing.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
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

/// Runs the gateway until the client disconnects (stdio) or the process gets SIGINT or SIGTERM.
///
/// # Errors
///
/// A bad config (with the file, the key and the fix), an engine that cannot start, or a transport that cannot be
/// served. Upstream servers that fail at start are reported on stderr and left out instead.
pub async fn run_gateway(args: GatewayArgs) -> anyhow::Result<()> {
    install_tls_provider();
    let mut config = GatewayConfig::load(&args.config)?;
    if let Some(confinement) = args.confinement {
        config.confinement = confinement;
    }
    if let Some(addr) = args.http
        && !addr.ip().is_loopback()
        && config.auth.is_none()
    {
        return Err(Error::HttpAddress {
            addr,
            problem: format!(
                "a non-loopback address is served only with authentication: add an [auth] table to {} \
                 (`tokens_file`, or `issuers`, `audience` and `jwks_url`; see docs/gateway.md, \"Authentication\"), \
                 or listen on 127.0.0.1",
                config.file.display()
            ),
        }
        .into());
    }
    // The token file and the JWK Set are read before any upstream server starts, so a mistake there costs nothing.
    let front = match (&config.auth, args.http) {
        (Some(settings), Some(_)) => {
            let clock: Arc<dyn codemode::snapshot::Clock> = Arc::new(codemode::snapshot::SystemClock);
            let authenticator = Arc::new(auth::Authenticator::new(settings, clock).await?);
            Some(authenticator)
        }
        _ => None,
    };
    if let Some(url) = args.store {
        config.store = Some(match config.store.take() {
            Some(store) => StoreConfig { url, ..store },
            None => StoreConfig { url, lease_ms: codemode::snapshot::DEFAULT_LEASE_MS, ttl_ms: None },
        });
        config.state_dir = None;
    }
    let state_dir = args.state_dir.or_else(|| config.state_dir.clone());
    let gateway = server::Gateway::start(&config, state_dir).await?;
    // The gauges read the live engine; once it is gone (the last export, at exit), what it held when it stopped.
    let stopped = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (weak, last) = (std::sync::Arc::downgrade(&gateway), stopped.clone());
    crate::telemetry::observe_engine(move || {
        let stats = match weak.upgrade() {
            Some(gateway) => Some(gateway.stats()),
            None => *last.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        };
        stats.map(|s: codemode::EngineStats| crate::telemetry::EngineGauges {
            parked_runs: s.parked_runs,
            idle_workers: s.idle_workers,
            parked_with_worker: s.parked_with_worker,
        })
    });
    let serving = async {
        match args.http {
            Some(addr) => {
                let front = match (front, &config.auth, gateway.limits()) {
                    (Some(authenticator), Some(settings), Some(limits)) => Some(Arc::new(auth::http::AuthFront::new(
                        authenticator,
                        limits.clone(),
                        auth::sessions::Sessions::new(
                            settings.shares.max_sessions as usize,
                            std::time::Duration::from_secs(settings.shares.session_idle_seconds),
                        ),
                        settings.resource.clone(),
                        settings.jwt.as_ref().map(|j| j.issuers.clone()).unwrap_or_default(),
                        settings.required_scopes.clone(),
                    ))),
                    _ => None,
                };
                server::serve_http(gateway.clone(), addr, front).await
            }
            None => server::serve_stdio(gateway.clone(), args.session).await,
        }
    };
    // Stopped by SIGINT or SIGTERM, the gateway shuts down as when its stdio client leaves: upstream servers are
    // stopped and the process's telemetry is flushed.
    let served = tokio::select! {
        served = serving => served,
        () = stop_signal() => Ok(()),
    };
    *stopped.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(gateway.stats());
    gateway.shutdown().await;
    Ok(served?)
}
