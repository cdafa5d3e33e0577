//! The MCP client side of code mode: upstream MCP servers as a [`ToolHost`](codemode_bridge::ToolHost), so any engine
//! can give its programs `MCP.<server>.<tool>` tools.
//!
//! `config` says what an upstream server is, `upstream` runs the servers (one rmcp client per server, restarted when
//! found dead) and is the tool host over them, `relay` answers what the servers ask of their client (elicitation,
//! sampling, tool list changes, progress, logs), and `content` keeps the bytes of image and audio blocks behind
//! handles and turns a program's attachments into content blocks. Policy, naming and budgets are not here: they
//! belong to the catalog and the engine that uses this host.
//!
//! ```no_run
//! # async fn start() -> Result<(), codemode_mcp::ConfigError> {
//! use std::collections::BTreeMap;
//! use codemode_mcp::{ServerConfig, Startup, Transport, UpstreamManager};
//!
//! let everything = ServerConfig {
//!     transport: Transport::Stdio {
//!         command: "npx".into(),
//!         args: vec!["@modelcontextprotocol/server-everything".into()],
//!         env: BTreeMap::new(),
//!         inherit_env: Vec::new(),
//!     },
//!     startup: Startup::Eager,
//!     deny: Vec::new(),
//!     direct: Vec::new(),
//! };
//! let servers = BTreeMap::from([("everything".to_owned(), everything)]);
//! let upstream = UpstreamManager::start(&servers, Default::default(), Default::default()).await?;
//! // `upstream.tool_definitions()` go to the engine's catalog, `upstream` itself is its tool host.
//! # Ok(()) }
//! ```

pub mod config;
pub mod content;
pub mod relay;
pub mod upstream;

pub use config::{DEFAULT_INHERITED_ENV, SECRET_ENV, ServerConfig, Startup, Transport, inherited_env};
pub use relay::{Relay, Sampling};
pub use upstream::{UpstreamManager, WithServers};

/// Installs the process's TLS provider (rustls with ring). reqwest, which the HTTP clients use (upstream Streamable
/// HTTP servers, the gateway's JWKS fetch), is built without a provider of its own and panics when a client is built
/// before one is installed; [`UpstreamManager::start`] calls it, and a second call changes nothing.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A server entry that names a tool its server does not offer (in `deny` or `direct`), found when the servers
/// start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem} (fix: {fix})")]
pub struct ConfigError {
    /// The dotted key at fault, `servers.<name>.deny` or `servers.<name>.direct`.
    pub key: String,
    /// What is wrong with it.
    pub problem: String,
    /// What to write instead.
    pub fix: String,
}
