//! The gateway's configuration file: codemode TOML, or the `{"mcpServers": {...}}` JSON desktop clients use.
//!
//! Both formats are read into one JSON tree and checked by hand, so every mistake is reported with the file, the
//! dotted key and the fix. This module only reads and checks; it starts nothing. Invariant: a `GatewayConfig` that
//! loaded is complete (each server has exactly one transport, no tool is both denied and direct-only).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use codemode::Confinement;
use codemode_config::{LIMIT_KEYS, Limits, Policy};
use serde_json::{Map, Value};

use crate::Error;

pub use codemode_mcp::config::{DEFAULT_INHERITED_ENV, SECRET_ENV, ServerConfig, Startup, Transport, inherited_env};

/// A loaded gateway configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayConfig {
    /// The file it was read from, for error messages.
    pub file: PathBuf,
    /// The code mode limits every run obeys.
    pub limits: Limits,
    /// The upstream servers by name, in name order.
    pub servers: BTreeMap<String, ServerConfig>,
    /// Where suspended runs are kept, if set (`state_dir` in TOML, `stateDir` in JSON).
    pub state_dir: Option<PathBuf>,
    /// How workers confine themselves (`confinement`: `required`, the default, `best_effort` or `off`).
    pub confinement: Confinement,
    /// Which nested calls are allowed, asked about or denied (`[policy]`; everything allowed when absent).
    pub policy: Policy,
    /// Who may call the gateway over HTTP (`[auth]`; TOML only). `None`: no authentication, loopback only.
    pub auth: Option<AuthSettings>,
    /// The shared run store of a fleet of replicas (`[store]`), if set.
    pub store: Option<StoreConfig>,
    /// Where traces and metrics go (`[telemetry]`); the `OTEL_EXPORTER_OTLP_*` variables take precedence.
    pub telemetry: TelemetryConfig,
    /// What an upstream server's `sampling/createMessage` gets (`sampling`: `refuse`, the default, or `client`,
    /// which passes it to the gateway's client when that client declared sampling).
    pub sampling: codemode_mcp::relay::Sampling,
    /// The worker processes that run cells (`[workers]`).
    pub workers: WorkersConfig,
    /// Where the questions of calls whose policy is `ask` go (`[approvals]`).
    pub approvals: ApprovalsConfig,
    /// The approval console (`[console]`; TOML only), off when absent.
    pub console: Option<ConsoleConfig>,
}

/// Who answers the approvals of programs' calls (`[approvals] route`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Route {
    /// The MCP client's person, through elicitation or an input-required result; the policy's `fallback` when the
    /// client cannot ask.
    #[default]
    Client,
    /// The console, whatever the client declares: every question parks the run until someone answers it there.
    Console,
}

/// The `[approvals]` table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApprovalsConfig {
    /// `route`: `"client"` (the default) or `"console"`.
    pub route: Route,
    /// `webhook`: an `http://` or `https://` URL that receives a JSON notice (`url`, `tool`, `runId`, `title`,
    /// `text`) for each question the console holds.
    pub webhook: Option<String>,
}

/// The `[console]` table: the approval console's listener and who operates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// `listen`: the console's own address, `127.0.0.1:PORT`.
    pub listen: std::net::SocketAddr,
    /// `public_url`: the base of the links the console hands out; `None`: `http://<the address it listens on>`.
    pub public_url: Option<String>,
    /// `operators`: principals (as `[auth]` names them) who see and decide every principal's runs.
    pub operators: Vec<String>,
}

/// The `[workers]` table: how the worker processes that run cells share the machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkersConfig {
    /// How many cells compute at once (`max_running` in TOML, `maxRunning` in JSON); the others queue, first in,
    /// first out. `None`: the number of cores. `Some(0)`: no limit.
    pub max_running: Option<usize>,
    /// How many parked runs keep their worker process at once (`max_live_parked` in TOML, `maxLiveParked` in
    /// JSON); a run parking past it stops its worker and resumes by replay. `None`: [`DEFAULT_MAX_LIVE_PARKED`].
    pub max_live_parked: Option<usize>,
}

/// The default of `[workers] max_live_parked`: 16 parked workers hold about 256 MB (SECURITY.md).
pub const DEFAULT_MAX_LIVE_PARKED: usize = 16;

/// The `[telemetry]` table: OpenTelemetry export (docs/observability.md), the activity record on results and what
/// redaction masks besides token shapes (docs/activity.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The OTLP http/protobuf base URL (`otlp_endpoint` in TOML, `otlpEndpoint` in JSON), e.g.
    /// `http://127.0.0.1:4318`; `/v1/traces` and `/v1/metrics` are appended.
    pub otlp_endpoint: Option<String>,
    /// Whether `exec` and `wait` results carry their `activity` (the cell's nested calls) for the model (`activity`;
    /// default false, so the model's payload does not grow).
    pub activity: bool,
    /// Regular expressions (`regex` syntax) whose matches are masked in everything recorded for people
    /// (`redact_patterns` in TOML, `redactPatterns` in JSON), besides token shapes and the upstream servers' `env`
    /// values, which are always masked.
    pub redact_patterns: Vec<String>,
}

/// The `[store]` table: where a fleet of gateway replicas keeps suspended runs, session values, result references
/// and idempotency keys. Its `Debug` shows the URL with its password masked.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// `postgres://user@host:port/database` (libpq's `key=value` form works too). Messages show it through
    /// [`codemode_store_pg::redact_url`], its password masked.
    pub url: String,
    /// How long a replica's claim on a run lasts without renewal (`lease_ms`, default 30000): how soon another
    /// replica takes over the runs of one that died.
    pub lease_ms: u64,
    /// How long a parked run is kept (`ttl_ms`); `limits.snapshotTtlSeconds` when absent.
    pub ttl_ms: Option<u64>,
}

const STORE_KEYS: [&str; 3] = ["url", "lease_ms", "ttl_ms"];

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &codemode_store_pg::redact_url(&self.url))
            .field("lease_ms", &self.lease_ms)
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

/// The `[auth]` table: bearer tokens the HTTP gateway accepts, and the limits each principal gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthSettings {
    /// `tokens_file`: one `PRINCIPAL sha256:HEX` line per static token (relative to the config file's folder).
    pub tokens_file: Option<PathBuf>,
    /// The JWT access tokens accepted, when `issuers` is set.
    pub jwt: Option<JwtSettings>,
    /// `resource`: this gateway's canonical URL (RFC 8707/9728); defaults to the JWT `audience`, else to
    /// `http://<Host header>/mcp`.
    pub resource: Option<String>,
    /// `required_scopes`: scopes every access token must carry (`scope` or `scp` claim); a static token has them
    /// all.
    pub required_scopes: Vec<String>,
    /// `max_concurrent_runs`: `exec`/`wait` calls one principal may have in progress at once.
    pub max_concurrent_runs: Option<u32>,
    /// `requests_per_minute`: HTTP requests one principal may make per minute (a bucket of that many, refilled
    /// evenly over the minute).
    pub requests_per_minute: Option<u32>,
    /// `requests_per_hour`: the same over an hour (a bucket of that many, refilled evenly over the hour); at most
    /// one of the two is set.
    pub requests_per_hour: Option<u32>,
    /// What each principal may hold at once, so that none starves another.
    pub shares: PrincipalShares,
}

/// What one principal may hold at once with `[auth]`: MCP sessions, suspended runs and finished tasks, each a
/// bounded share, so that one principal cannot take what every other needs nor grow the gateway without bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrincipalShares {
    /// `max_sessions`: MCP sessions (Streamable HTTP) one principal may have open at once.
    pub max_sessions: u32,
    /// `session_idle_seconds`: a session with no request in progress for this long is closed (an open `GET`
    /// stream alone is not activity).
    pub session_idle_seconds: u64,
    /// `max_suspended_runs`: the places among the 64 for suspended runs one principal may hold.
    pub max_suspended_runs: u32,
    /// `max_finished_tasks`: the finished tasks (results kept for `tasks/get`) one principal may have; past it its
    /// oldest finished task is dropped.
    pub max_finished_tasks: u32,
    /// `max_finished_task_bytes`: the bytes of JSON the finished tasks of one principal may keep; past it its
    /// oldest finished tasks are dropped (its newest is always kept).
    pub max_finished_task_bytes: u64,
}

impl Default for PrincipalShares {
    /// Sized for a gateway of 2 cores and 4 GB (SECURITY.md, "Shares of a principal").
    fn default() -> Self {
        PrincipalShares {
            max_sessions: 64,
            session_idle_seconds: 300,
            max_suspended_runs: 16,
            max_finished_tasks: 64,
            max_finished_task_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Where the keys that sign access tokens come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    /// `jwks_file`: a JWK Set read once at start.
    File(PathBuf),
    /// `jwks_url`: a JWK Set fetched at start and again when a token names a key it does not hold.
    Url(String),
}

/// The JWT settings of `[auth]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtSettings {
    /// `issuers`: the accepted `iss` values, also the metadata's `authorization_servers`.
    pub issuers: Vec<String>,
    /// `audience`: the value `aud` must contain, this resource's identifier (RFC 8707).
    pub audience: String,
    /// `jwks_file` or `jwks_url`.
    pub jwks: JwksSource,
    /// `algorithms`: the signature algorithms accepted (default RS256, ES256, EdDSA); never HMAC or `none`.
    pub algorithms: Vec<String>,
    /// `leeway_seconds`: clock skew allowed on `exp` and `nbf` (default 60).
    pub leeway_seconds: u64,
    /// `qualify_subject`: the principal is `<iss>#<sub>` instead of `sub` (default: when more than one issuer).
    pub qualify_subject: bool,
}

/// The signature algorithms `[auth] algorithms` may name.
pub const JWT_ALGORITHMS: [&str; 9] = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];
const DEFAULT_JWT_ALGORITHMS: [&str; 3] = ["RS256", "ES256", "EdDSA"];
const AUTH_KEYS: [&str; 18] = [
    "tokens_file",
    "issuers",
    "audience",
    "jwks_file",
    "jwks_url",
    "algorithms",
    "leeway_seconds",
    "qualify_subject",
    "resource",
    "required_scopes",
    "max_concurrent_runs",
    "requests_per_minute",
    "requests_per_hour",
    "max_sessions",
    "session_idle_seconds",
    "max_suspended_runs",
    "max_finished_tasks",
    "max_finished_task_bytes",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Toml,
    Json,
}

const TOML_TOP_KEYS: [&str; 12] = [
    "limits",
    "servers",
    "state_dir",
    "confinement",
    "policy",
    "auth",
    "store",
    "telemetry",
    "sampling",
    "workers",
    "approvals",
    "console",
];
/// The largest `[workers] max_running`: each running cell is a worker process.
const MAX_RUNNING_CELLS: usize = 1024;
const TOML_SERVER_KEYS: [&str; 8] = ["command", "args", "env", "inherit_env", "url", "startup", "deny", "direct"];

impl GatewayConfig {
    /// What the gateway redacts in everything recorded for people, besides the built-in token shapes: the
    /// configured `redact_patterns`, and every stdio server's `env` value as a secret (the tokens it hands its
    /// servers).
    ///
    /// # Errors
    ///
    /// A pattern does not compile (`parse` refuses such a file first).
    pub fn redactor(&self) -> Result<codemode::Redactor, String> {
        let mut redactor = codemode::Redactor::new();
        for pattern in &self.telemetry.redact_patterns {
            redactor = redactor.pattern(pattern).map_err(|e| format!("[telemetry] redact_patterns: {e}"))?;
        }
        for server in self.servers.values() {
            if let Transport::Stdio { env, .. } = &server.transport {
                for value in env.values() {
                    redactor = redactor.secret(value.clone());
                }
            }
        }
        Ok(redactor)
    }

    /// Reads and checks a config file. `.json` files (or any file whose first non-blank character is `{`) are read
    /// as desktop-client JSON, everything else as TOML.
    ///
    /// # Errors
    ///
    /// [`Error::ReadConfig`] when the file cannot be read, [`Error::Config`] naming the key and the fix when its
    /// content is wrong.
    pub fn load(file: &Path) -> Result<GatewayConfig, Error> {
        let text =
            std::fs::read_to_string(file).map_err(|source| Error::ReadConfig { file: file.to_path_buf(), source })?;
        GatewayConfig::parse(file, &text)
    }

    /// Checks config text as if it were read from `file` (whose extension picks the format).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the key and the fix.
    pub fn parse(file: &Path, text: &str) -> Result<GatewayConfig, Error> {
        let is_json =
            file.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) || text.trim_start().starts_with('{');
        let format = if is_json { Format::Json } else { Format::Toml };
        let err = |key: &str, problem: String, fix: &str| config_error(file, key, problem, fix);
        let root: Value = match format {
            Format::Json => serde_json::from_str(text).map_err(|e| {
                err("(file)", format!("is not valid JSON: {e}"), "fix the JSON syntax at that line and column")
            })?,
            Format::Toml => {
                let table: toml::Table = toml::from_str(text).map_err(|e| {
                    let at = e.span().map(|s| line_col(text, s.start)).unwrap_or_default();
                    err("(file)", format!("is not valid TOML{at}: {}", e.message()), "fix the TOML syntax there")
                })?;
                serde_json::to_value(table).map_err(|e| {
                    err("(file)", format!("holds a value JSON cannot represent: {e}"), "use plain strings and numbers")
                })?
            }
        };
        let Value::Object(root) = root else {
            return Err(err("(file)", "is not an object".into(), "write `{\"mcpServers\": {...}}`"));
        };
        Checker { file, format }.root(&root)
    }
}

struct Checker<'a> {
    file: &'a Path,
    format: Format,
}

impl Checker<'_> {
    fn err(&self, key: &str, problem: impl Into<String>, fix: impl AsRef<str>) -> Error {
        config_error(self.file, key, problem.into(), fix.as_ref())
    }

    fn root(&self, root: &Map<String, Value>) -> Result<GatewayConfig, Error> {
        let servers_key = match self.format {
            Format::Toml => {
                for key in root.keys() {
                    if !TOML_TOP_KEYS.contains(&key.as_str()) {
                        return Err(self.unknown_key(key, key, &TOML_TOP_KEYS));
                    }
                }
                "servers"
            }
            // Desktop config files carry unrelated settings next to `mcpServers`; VS Code names the table `servers`.
            Format::Json if root.contains_key("mcpServers") => "mcpServers",
            Format::Json if root.contains_key("servers") => "servers",
            Format::Json => {
                return Err(self.err(
                    "mcpServers",
                    "is missing",
                    "add `\"mcpServers\": {\"name\": {\"command\": \"...\", \"args\": [...]}}`",
                ));
            }
        };
        let limits = match root.get("limits") {
            None => Limits::default(),
            Some(value) => self.limits(value)?,
        };
        let state_key = if self.format == Format::Toml { "state_dir" } else { "stateDir" };
        let state_dir = match root.get(state_key) {
            None => None,
            Some(Value::String(s)) if !s.is_empty() => Some(PathBuf::from(s)),
            Some(_) => return Err(self.err(state_key, "must be a non-empty string", "write a directory path")),
        };
        let confinement = match root.get("confinement").map(|v| v.as_str().and_then(Confinement::parse)) {
            None => Confinement::default(),
            Some(Some(confinement)) => confinement,
            Some(None) => {
                return Err(self.err(
                    "confinement",
                    "must be \"required\", \"best_effort\" or \"off\"",
                    "keep \"required\" unless the kernel lacks Landlock or seccomp",
                ));
            }
        };
        let sampling = match root.get("sampling").map(|v| v.as_str().and_then(codemode_mcp::relay::Sampling::parse)) {
            None => codemode_mcp::relay::Sampling::default(),
            Some(Some(sampling)) => sampling,
            Some(None) => {
                return Err(self.err(
                    "sampling",
                    "must be \"refuse\" or \"client\"",
                    "keep \"refuse\" unless upstream servers may spend the client's model through sampling",
                ));
            }
        };
        let policy = match root.get("policy") {
            None => Policy::allow_all(),
            Some(value) => Policy::from_json("policy", value).map_err(|e| match e {
                codemode_config::ConfigError::InvalidPolicy { key, reason } => self.err(
                    &key,
                    reason,
                    "see docs/gateway.md, \"Tool policy\": default, writes and fallback take allow, ask or deny; \
                     rules are [[policy.rules]] tables with match and policy",
                ),
                other => self.err("policy", other.to_string(), "fix the policy table"),
            })?,
        };
        let auth = match root.get("auth") {
            Some(value) if self.format == Format::Toml => Some(self.auth(value)?),
            _ => None,
        };
        let store = match root.get("store") {
            None => None,
            Some(value) => Some(self.store(value)?),
        };
        if store.is_some() && state_dir.is_some() {
            return Err(self.err(
                state_key,
                "is set together with [store]",
                "keep [store] for a fleet of replicas, or state_dir for one machine, not both",
            ));
        }
        let telemetry = match root.get("telemetry") {
            None => TelemetryConfig::default(),
            Some(value) => self.telemetry(value)?,
        };
        let workers = match root.get("workers") {
            None => WorkersConfig::default(),
            Some(value) => self.workers(value)?,
        };
        let approvals = match root.get("approvals") {
            None => ApprovalsConfig::default(),
            Some(value) => self.approvals(value)?,
        };
        let console = match root.get("console") {
            Some(value) if self.format == Format::Toml => Some(self.console(value)?),
            _ => None,
        };
        let parks = policy.fallback == codemode_config::Fallback::Park || approvals.route == Route::Console;
        if parks && console.is_none() {
            let key = if approvals.route == Route::Console { "approvals.route" } else { "policy.fallback" };
            return Err(self.err(
                key,
                "parks runs for a person to answer in the console, but there is no [console]",
                "add `[console]` with `listen = \"127.0.0.1:8790\"`, or use fallback \"deny\" and route \"client\"",
            ));
        }
        let servers = match root.get(servers_key) {
            None => {
                return Err(self.err(
                    servers_key,
                    "is missing: the gateway has nothing to offer",
                    "add a `[servers.<name>]` table with `command` (stdio) or `url` (Streamable HTTP)",
                ));
            }
            Some(Value::Object(map)) => map,
            Some(_) => return Err(self.err(servers_key, "must be a table of servers", "write `[servers.<name>]`")),
        };
        let mut out = BTreeMap::new();
        for (name, value) in servers {
            let key = format!("{servers_key}.{name}");
            if name.trim().is_empty() {
                return Err(self.err(&key, "has an empty server name", "give the server a name"));
            }
            let Value::Object(table) = value else {
                return Err(self.err(&key, "must be a table", "write `command = \"...\"` or `url = \"...\"` under it"));
            };
            if let Some(server) = self.server(&key, table)? {
                out.insert(name.clone(), server);
            }
        }
        if out.is_empty() {
            return Err(self.err(servers_key, "names no enabled server", "add at least one server"));
        }
        Ok(GatewayConfig {
            file: self.file.to_path_buf(),
            limits,
            servers: out,
            state_dir,
            confinement,
            policy,
            auth,
            store,
            telemetry,
            sampling,
            workers,
            approvals,
            console,
        })
    }

    fn approvals(&self, value: &Value) -> Result<ApprovalsConfig, Error> {
        let known = ["route", "webhook"];
        let Value::Object(map) = value else {
            return Err(self.err("approvals", "must be a table", "write `[approvals]` with `route = \"console\"`"));
        };
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                return Err(self.unknown_key(&format!("approvals.{key}"), key, &known));
            }
        }
        let route = match map.get("route").map(Value::as_str) {
            None | Some(Some("client")) => Route::Client,
            Some(Some("console")) => Route::Console,
            Some(_) => {
                return Err(self.err(
                    "approvals.route",
                    "must be \"client\" or \"console\"",
                    "write \"console\" to send every question to the console, else keep \"client\"",
                ));
            }
        };
        let webhook = match map.get("webhook") {
            None => None,
            Some(Value::String(url)) if url.starts_with("http://") || url.starts_with("https://") => Some(url.clone()),
            Some(_) => {
                return Err(self.err(
                    "approvals.webhook",
                    "must be an http:// or https:// URL",
                    "write the URL that receives a JSON notice per question, e.g. a Slack incoming webhook",
                ));
            }
        };
        Ok(ApprovalsConfig { route, webhook })
    }

    fn console(&self, value: &Value) -> Result<ConsoleConfig, Error> {
        let known = ["listen", "public_url", "operators"];
        let Value::Object(map) = value else {
            return Err(self.err("console", "must be a table", "write `[console]` with `listen = \"127.0.0.1:8790\"`"));
        };
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                return Err(self.unknown_key(&format!("console.{key}"), key, &known));
            }
        }
        let listen = match map.get("listen").and_then(Value::as_str).map(str::parse::<std::net::SocketAddr>) {
            Some(Ok(addr)) => addr,
            _ => {
                return Err(self.err(
                    "console.listen",
                    "must be an address with a port",
                    "write `listen = \"127.0.0.1:8790\"`",
                ));
            }
        };
        let public_url = match map.get("public_url") {
            None => None,
            Some(Value::String(url)) if url.starts_with("http://") || url.starts_with("https://") => {
                Some(url.trim_end_matches('/').to_owned())
            }
            Some(_) => {
                return Err(self.err(
                    "console.public_url",
                    "must be an http:// or https:// URL",
                    "write the URL people reach the console at, e.g. \"https://approvals.example.com\"",
                ));
            }
        };
        let operators = self.strings("console.operators", map.get("operators"))?;
        Ok(ConsoleConfig { listen, public_url, operators })
    }

    fn workers(&self, value: &Value) -> Result<WorkersConfig, Error> {
        let toml = self.format == Format::Toml;
        let running_key = if toml { "max_running" } else { "maxRunning" };
        let live_key = if toml { "max_live_parked" } else { "maxLiveParked" };
        let known = [running_key, live_key];
        let Value::Object(map) = value else {
            return Err(self.err("workers", "must be a table", format!("write `[workers]` with `{running_key} = 2`")));
        };
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                return Err(self.unknown_key(&format!("workers.{key}"), key, &known));
            }
        }
        let max_running = match map.get(running_key) {
            None => None,
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()).filter(|n| *n <= MAX_RUNNING_CELLS) {
                Some(n) => Some(n),
                None => {
                    return Err(self.err(
                        &format!("workers.{running_key}"),
                        format!("must be a whole number from 0 to {MAX_RUNNING_CELLS}, not {v}"),
                        "write the number of cells that may compute at once, about the number of cores \
                         (0 for no limit)",
                    ));
                }
            },
        };
        let max_live_parked = match map.get(live_key) {
            None => None,
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()).filter(|n| *n <= MAX_RUNNING_CELLS) {
                Some(n) => Some(n),
                None => {
                    return Err(self.err(
                        &format!("workers.{live_key}"),
                        format!("must be a whole number from 0 to {MAX_RUNNING_CELLS}, not {v}"),
                        "write how many parked runs may keep their worker process (0: none, every wait replays)",
                    ));
                }
            },
        };
        Ok(WorkersConfig { max_running, max_live_parked })
    }

    fn store(&self, value: &Value) -> Result<StoreConfig, Error> {
        let Value::Object(map) = value else {
            return Err(self.err("store", "must be a table", "write `[store]` with `url = \"postgres://...\"`"));
        };
        for key in map.keys() {
            if !STORE_KEYS.contains(&key.as_str()) {
                return Err(self.unknown_key(&format!("store.{key}"), key, &STORE_KEYS));
            }
        }
        let url = match map.get("url") {
            // A `postgres://` URL, or libpq's `key=value` form (`host=db user=app dbname=codemode`).
            Some(Value::String(url))
                if url.starts_with("postgres://") || url.starts_with("postgresql://") || url.contains('=') =>
            {
                url.clone()
            }
            Some(other) => {
                // The value may hold a password: it is shown masked.
                let shown = match other {
                    Value::String(url) => format!("{:?}", codemode_store_pg::redact_url(url)),
                    other => other.to_string(),
                };
                return Err(self.err(
                    "store.url",
                    format!("is {shown}, not a postgres:// URL or a `key=value` connection string"),
                    "write `url = \"postgres://user@host:5432/codemode\"`",
                ));
            }
            None => {
                return Err(self.err(
                    "store.url",
                    "is missing",
                    "write `url = \"postgres://user@host:5432/codemode\"`",
                ));
            }
        };
        let millis = |key: &str| -> Result<Option<u64>, Error> {
            match map.get(key) {
                None => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(n) if n > 0 => Ok(Some(n)),
                    _ => Err(self.err(
                        &format!("store.{key}"),
                        format!("must be a positive number of milliseconds, not {v}"),
                        "write a whole number",
                    )),
                },
            }
        };
        Ok(StoreConfig {
            url,
            lease_ms: millis("lease_ms")?.unwrap_or(codemode::store::DEFAULT_LEASE_MS),
            ttl_ms: millis("ttl_ms")?,
        })
    }

    fn telemetry(&self, value: &Value) -> Result<TelemetryConfig, Error> {
        let toml = self.format == Format::Toml;
        let endpoint_key = if toml { "otlp_endpoint" } else { "otlpEndpoint" };
        let patterns_key = if toml { "redact_patterns" } else { "redactPatterns" };
        let known = [endpoint_key, "activity", patterns_key];
        let Value::Object(map) = value else {
            return Err(self.err(
                "telemetry",
                "must be a table",
                format!("write `[telemetry]` with `{endpoint_key} = \"http://127.0.0.1:4318\"`"),
            ));
        };
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                return Err(self.unknown_key(&format!("telemetry.{key}"), key, &known));
            }
        }
        let otlp_endpoint = match map.get(endpoint_key) {
            None => None,
            Some(Value::String(url)) if url.starts_with("http://") || url.starts_with("https://") => Some(url.clone()),
            Some(_) => {
                return Err(self.err(
                    &format!("telemetry.{endpoint_key}"),
                    "must be an http:// or https:// URL",
                    "write the collector's OTLP/HTTP base URL, e.g. \"http://127.0.0.1:4318\"",
                ));
            }
        };
        let activity = match map.get("activity") {
            None => false,
            Some(Value::Bool(on)) => *on,
            Some(other) => {
                return Err(self.err(
                    "telemetry.activity",
                    format!("must be true or false, not {other}"),
                    "write `activity = true`",
                ));
            }
        };
        let patterns_path = format!("telemetry.{patterns_key}");
        let redact_patterns = self.strings(&patterns_path, map.get(patterns_key))?;
        for pattern in &redact_patterns {
            if let Err(e) = codemode::Redactor::new().pattern(pattern) {
                return Err(self.err(&patterns_path, e.to_string(), "write a regular expression in `regex` syntax"));
            }
        }
        Ok(TelemetryConfig { otlp_endpoint, activity, redact_patterns })
    }

    fn limits(&self, value: &Value) -> Result<Limits, Error> {
        let Value::Object(map) = value else {
            return Err(self.err("limits", "must be a table", "write `[limits]` with keys like `timeoutMs = 10000`"));
        };
        for (key, v) in map {
            let dotted = format!("limits.{key}");
            if !LIMIT_KEYS.contains(&key.as_str()) {
                return Err(self.unknown_key(&dotted, key, &LIMIT_KEYS));
            }
            if v.as_u64().is_none_or(|n| n == 0) {
                return Err(self.err(&dotted, format!("must be a positive integer, not {v}"), "write a whole number"));
            }
        }
        Ok(Limits::from_json(value))
    }

    fn server(&self, key: &str, table: &Map<String, Value>) -> Result<Option<ServerConfig>, Error> {
        // Unknown keys are typos in our TOML; in desktop JSON they are the client's own (`autoApprove`, `timeout`).
        if self.format == Format::Toml {
            for k in table.keys() {
                if !TOML_SERVER_KEYS.contains(&k.as_str()) {
                    return Err(self.unknown_key(&format!("{key}.{k}"), k, &TOML_SERVER_KEYS));
                }
            }
        }
        if self.format == Format::Json {
            if table.get("disabled").and_then(Value::as_bool) == Some(true) {
                return Ok(None);
            }
            if let Some(kind) = table.get("type") {
                match kind.as_str() {
                    Some("stdio" | "http" | "streamable-http" | "streamableHttp") => {}
                    Some("sse") => {
                        return Err(self.err(
                            &format!("{key}.type"),
                            "is \"sse\", the legacy HTTP+SSE transport, which the gateway does not speak",
                            "point `url` at the server's Streamable HTTP endpoint and drop `type`",
                        ));
                    }
                    _ => {
                        return Err(self.err(
                            &format!("{key}.type"),
                            format!("is {kind}, not a transport the gateway knows"),
                            "use \"stdio\" with `command`, or \"http\" with `url`",
                        ));
                    }
                }
            }
        }
        let inherit_key = if self.format == Format::Toml { "inherit_env" } else { "inheritEnv" };
        let transport = match (table.get("command"), table.get("url")) {
            (Some(_), Some(_)) => {
                return Err(self.err(
                    key,
                    "sets both `command` and `url`",
                    "keep `command` for stdio or `url` for HTTP",
                ));
            }
            (None, None) => {
                return Err(self.err(
                    key,
                    "sets neither `command` nor `url`",
                    "add `command = \"npx\"` (with `args`) for a stdio server or `url = \"http://...\"`",
                ));
            }
            (Some(command), None) => {
                let command = match command {
                    Value::String(s) if !s.trim().is_empty() => s.clone(),
                    _ => {
                        return Err(self.err(
                            &format!("{key}.command"),
                            "must be a non-empty string",
                            "name a program",
                        ));
                    }
                };
                let args = self.strings(&format!("{key}.args"), table.get("args"))?;
                let env = self.env(&format!("{key}.env"), table.get("env"))?;
                let inherit_env = self.inherit_env(&format!("{key}.{inherit_key}"), table.get(inherit_key))?;
                Transport::Stdio { command, args, env, inherit_env }
            }
            (None, Some(url)) => {
                for k in ["args", "env", inherit_key] {
                    if table.contains_key(k) {
                        return Err(self.err(
                            &format!("{key}.{k}"),
                            "only applies to stdio servers, and this one has a `url`",
                            format!("remove `{k}`"),
                        ));
                    }
                }
                match url.as_str() {
                    Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                        Transport::Http { url: u.to_owned() }
                    }
                    _ => {
                        return Err(self.err(
                            &format!("{key}.url"),
                            format!("is {url}, not an http:// or https:// URL"),
                            "write the server's Streamable HTTP endpoint, e.g. \"http://127.0.0.1:3001/mcp\"",
                        ));
                    }
                }
            }
        };
        let startup = match table.get("startup") {
            None => Startup::default(),
            Some(v) => match v.as_str() {
                Some("eager") => Startup::Eager,
                Some("lazy") => Startup::Lazy,
                _ => {
                    return Err(self.err(
                        &format!("{key}.startup"),
                        format!("is {v}"),
                        "write \"eager\" (start with the gateway) or \"lazy\" (start on first call)",
                    ));
                }
            },
        };
        let deny = self.strings(&format!("{key}.deny"), table.get("deny"))?;
        let direct = self.strings(&format!("{key}.direct"), table.get("direct"))?;
        if let Some(both) = deny.iter().find(|t| direct.contains(t)) {
            return Err(self.err(
                &format!("{key}.direct"),
                format!("lists \"{both}\", which `deny` also lists"),
                format!("remove \"{both}\" from one of the two lists"),
            ));
        }
        Ok(Some(ServerConfig { transport, startup, deny, direct }))
    }

    fn strings(&self, key: &str, value: Option<&Value>) -> Result<Vec<String>, Error> {
        let Some(value) = value else { return Ok(Vec::new()) };
        let fix = "write a list of strings, e.g. [\"a\", \"b\"]";
        let Value::Array(items) = value else {
            return Err(self.err(key, format!("must be a list of strings, not {value}"), fix));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(self.err(&format!("{key}[{i}]"), format!("must be a string, not {other}"), "quote it")),
            })
            .collect()
    }

    /// `inherit_env`: names of variables, none of them a secret of the gateway's.
    fn inherit_env(&self, key: &str, value: Option<&Value>) -> Result<Vec<String>, Error> {
        let names = self.strings(key, value)?;
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(self.err(
                    &format!("{key}[{i}]"),
                    format!("is {name:?}, not the name of an environment variable"),
                    "write a variable's name, e.g. \"GITHUB_TOKEN\"",
                ));
            }
            if SECRET_ENV.contains(&name.as_str()) {
                return Err(self.err(
                    &format!("{key}[{i}]"),
                    format!("names {name}, which the gateway reads as a secret and never passes to a server"),
                    format!("remove \"{name}\"; a server that needs such a value of its own gets it in `env`"),
                ));
            }
        }
        Ok(names)
    }

    fn env(&self, key: &str, value: Option<&Value>) -> Result<BTreeMap<String, String>, Error> {
        let Some(value) = value else { return Ok(BTreeMap::new()) };
        let Value::Object(map) = value else {
            return Err(self.err(key, "must be a table of strings", "write `env = { NAME = \"value\" }`"));
        };
        map.iter()
            .map(|(name, v)| match v {
                Value::String(s) => Ok((name.clone(), s.clone())),
                other => Err(self.err(
                    &format!("{key}.{name}"),
                    format!("must be a string, not {other}"),
                    "quote the value: environment variables are strings",
                )),
            })
            .collect()
    }

    /// The `[auth]` table. A file path is taken relative to the config file's folder.
    fn auth(&self, value: &Value) -> Result<AuthSettings, Error> {
        let Value::Object(map) = value else {
            return Err(self.err("auth", "must be a table", "write `[auth]` with `tokens_file` or `issuers`"));
        };
        for key in map.keys() {
            if !AUTH_KEYS.contains(&key.as_str()) {
                return Err(self.unknown_key(&format!("auth.{key}"), key, &AUTH_KEYS));
            }
        }
        let string = |key: &str, fix: &str| -> Result<Option<String>, Error> {
            match map.get(key) {
                None => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
                Some(other) => {
                    Err(self.err(&format!("auth.{key}"), format!("must be a non-empty string, not {other}"), fix))
                }
            }
        };
        let path = |key: &str| -> Result<Option<PathBuf>, Error> {
            Ok(string(key, "write a file path")?.map(|p| {
                let p = PathBuf::from(p);
                match self.file.parent() {
                    Some(dir) if p.is_relative() => dir.join(p),
                    _ => p,
                }
            }))
        };
        let count = |key: &str| -> Result<Option<u32>, Error> {
            match map.get(key) {
                None => Ok(None),
                Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0) {
                    Some(n) => Ok(Some(n)),
                    None => Err(self.err(
                        &format!("auth.{key}"),
                        format!("must be a positive integer, not {v}"),
                        "write a whole number, or remove it for no limit",
                    )),
                },
            }
        };
        let url = |key: &str| -> Result<Option<String>, Error> {
            let value = string(key, "write an https:// URL")?;
            match value {
                Some(u) if !(u.starts_with("https://") || u.starts_with("http://")) => Err(self.err(
                    &format!("auth.{key}"),
                    format!("is \"{u}\", not an http:// or https:// URL"),
                    "write the full URL, e.g. \"https://gateway.example.com/mcp\"",
                )),
                other => Ok(other),
            }
        };
        let tokens_file = path("tokens_file")?;
        let resource = url("resource")?;
        let required_scopes = self.strings("auth.required_scopes", map.get("required_scopes"))?;
        if let Some(bad) = required_scopes.iter().find(|s| s.is_empty() || s.contains(char::is_whitespace)) {
            return Err(self.err("auth.required_scopes", format!("holds {bad:?}"), "write scope names without spaces"));
        }
        let issuers = self.strings("auth.issuers", map.get("issuers"))?;
        let jwt_keys = ["audience", "jwks_file", "jwks_url", "algorithms", "leeway_seconds", "qualify_subject"];
        let jwt = if issuers.is_empty() {
            if let Some(key) = jwt_keys.iter().find(|k| map.contains_key(**k)) {
                return Err(self.err(
                    &format!("auth.{key}"),
                    "is a JWT setting, but `issuers` is not set",
                    "add `issuers = [\"https://your-idp.example.com/\"]`, or remove the JWT settings",
                ));
            }
            None
        } else {
            let audience = string("audience", "write this gateway's resource identifier")?.ok_or_else(|| {
                self.err(
                    "auth.audience",
                    "is missing: JWT access tokens must be checked against this gateway's identifier (RFC 8707)",
                    "add `audience = \"https://gateway.example.com/mcp\"`, the resource clients request tokens for",
                )
            })?;
            let jwks = match (path("jwks_file")?, url("jwks_url")?) {
                (Some(file), None) => JwksSource::File(file),
                (None, Some(url)) => JwksSource::Url(url),
                (Some(_), Some(_)) => {
                    return Err(self.err("auth.jwks_url", "is set with `jwks_file`", "keep one of the two"));
                }
                (None, None) => {
                    return Err(self.err(
                        "auth.jwks_url",
                        "is missing: the keys that sign access tokens are needed",
                        "add `jwks_url = \"https://your-idp.example.com/.well-known/jwks.json\"` or `jwks_file = PATH`",
                    ));
                }
            };
            let algorithms = match map.get("algorithms") {
                None => DEFAULT_JWT_ALGORITHMS.iter().map(|a| (*a).to_owned()).collect(),
                Some(value) => {
                    let list = self.strings("auth.algorithms", Some(value))?;
                    if list.is_empty() {
                        return Err(self.err("auth.algorithms", "is empty", "list at least one, e.g. [\"RS256\"]"));
                    }
                    for (i, alg) in list.iter().enumerate() {
                        if !JWT_ALGORITHMS.contains(&alg.as_str()) {
                            return Err(self.err(
                                &format!("auth.algorithms[{i}]"),
                                format!("is \"{alg}\", not an asymmetric signature algorithm the gateway accepts"),
                                format!("use one of {}", JWT_ALGORITHMS.join(", ")),
                            ));
                        }
                    }
                    list
                }
            };
            let leeway_seconds = match map.get("leeway_seconds") {
                None => 60,
                Some(v) => match v.as_u64().filter(|n| *n <= 600) {
                    Some(n) => n,
                    None => {
                        return Err(self.err(
                            "auth.leeway_seconds",
                            format!("must be a whole number of seconds from 0 to 600, not {v}"),
                            "keep the default, 60",
                        ));
                    }
                },
            };
            let qualify_subject = match map.get("qualify_subject") {
                None => issuers.len() > 1,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(self.err(
                        "auth.qualify_subject",
                        format!("must be true or false, not {v}"),
                        "write true or false",
                    ));
                }
            };
            Some(JwtSettings { issuers, audience, jwks, algorithms, leeway_seconds, qualify_subject })
        };
        if tokens_file.is_none() && jwt.is_none() {
            return Err(self.err(
                "auth",
                "accepts no token: it sets neither `tokens_file` nor `issuers`",
                "add `tokens_file = \"tokens.txt\"` (static tokens) or `issuers`, `audience` and `jwks_url` (JWT)",
            ));
        }
        // An audience that is a URL is the resource identifier clients request tokens for (RFC 8707).
        let resource = resource.or_else(|| {
            jwt.as_ref().map(|j| j.audience.clone()).filter(|a| a.starts_with("https://") || a.starts_with("http://"))
        });
        let (requests_per_minute, requests_per_hour) = (count("requests_per_minute")?, count("requests_per_hour")?);
        if requests_per_minute.is_some() && requests_per_hour.is_some() {
            return Err(self.err(
                "auth.requests_per_hour",
                "is set together with `requests_per_minute`; a principal has one request rate",
                "keep one of `requests_per_minute` and `requests_per_hour`",
            ));
        }
        Ok(AuthSettings {
            tokens_file,
            jwt,
            resource,
            required_scopes,
            max_concurrent_runs: count("max_concurrent_runs")?,
            requests_per_minute,
            requests_per_hour,
            shares: self.shares(map)?,
        })
    }

    /// The shares of `[auth]`: each key within its bounds, the default where absent.
    fn shares(&self, map: &Map<String, Value>) -> Result<PrincipalShares, Error> {
        let share = |key: &str, min: u64, max: u64, default: u64| -> Result<u64, Error> {
            match map.get(key) {
                None => Ok(default),
                Some(v) => v.as_u64().filter(|n| (min..=max).contains(n)).ok_or_else(|| {
                    self.err(
                        &format!("auth.{key}"),
                        format!("must be a whole number from {min} to {max}, not {v}"),
                        format!("write a number in that range, or remove it for the default, {default}"),
                    )
                }),
            }
        };
        // Each count's upper bound fits in a u32.
        let count = |key: &str, max: u32, default: u32| -> Result<u32, Error> {
            share(key, 1, u64::from(max), u64::from(default)).map(|n| u32::try_from(n).unwrap_or(max))
        };
        let defaults = PrincipalShares::default();
        let cap = u32::try_from(codemode::store::DEFAULT_MAX_SUSPENDED_RUNS).unwrap_or(u32::MAX);
        Ok(PrincipalShares {
            max_sessions: count("max_sessions", 100_000, defaults.max_sessions)?,
            session_idle_seconds: share("session_idle_seconds", 1, 86_400, defaults.session_idle_seconds)?,
            max_suspended_runs: count("max_suspended_runs", cap, defaults.max_suspended_runs)?,
            max_finished_tasks: count("max_finished_tasks", 100_000, defaults.max_finished_tasks)?,
            max_finished_task_bytes: share("max_finished_task_bytes", 1024, 1 << 40, defaults.max_finished_task_bytes)?,
        })
    }

    fn unknown_key(&self, dotted: &str, key: &str, known: &[&str]) -> Error {
        let fix = match closest(key, known) {
            Some(near) => format!("did you mean `{near}`? known keys: {}", known.join(", ")),
            None => format!("remove it; known keys: {}", known.join(", ")),
        };
        self.err(dotted, "is not a known key", fix)
    }
}

fn config_error(file: &Path, key: &str, problem: String, fix: &str) -> Error {
    Error::Config { file: file.to_path_buf(), key: key.to_owned(), problem, fix: fix.to_owned() }
}

fn line_col(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(" at line {line}, column {col}")
}

/// The known key nearest to `key` by edit distance (case-insensitive, `_`/`-` ignored), if it is close.
fn closest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let norm = |s: &str| s.chars().filter(|c| *c != '_' && *c != '-').flat_map(char::to_lowercase).collect::<Vec<_>>();
    let k = norm(key);
    known
        .iter()
        .map(|cand| (levenshtein(&k, &norm(cand)), *cand))
        .filter(|(d, _)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, cand)| cand)
}

fn levenshtein(a: &[char], b: &[char]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml_err(text: &str) -> String {
        GatewayConfig::parse(Path::new("gw.toml"), text).expect_err("config should be rejected").to_string()
    }

    fn json_err(text: &str) -> String {
        GatewayConfig::parse(Path::new("claude.json"), text).expect_err("config should be rejected").to_string()
    }

    #[test]
    fn the_policy_table_reads_in_toml_and_json_and_names_its_mistakes() {
        use codemode_config::{Decision, EffectClass};
        let toml = "[policy]\ndefault = \"allow\"\nwrites = \"ask\"\nfallback = \"deny\"\n\
                    [[policy.rules]]\nmatch = \"fs.write_*\"\npolicy = \"deny\"\n\
                    [servers.fs]\ncommand = \"node\"\n";
        let config = GatewayConfig::parse(Path::new("gw.toml"), toml).expect("valid");
        assert_eq!(config.policy.decide("fs.write_file", EffectClass::Write), Decision::Deny);
        assert_eq!(config.policy.decide("fs.move_file", EffectClass::Write), Decision::Ask);
        assert_eq!(config.policy.decide("fs.read_file", EffectClass::Read), Decision::Allow);
        let json = r#"{"mcpServers": {"fs": {"command": "node"}}, "policy": {"writes": "deny"}}"#;
        let config = GatewayConfig::parse(Path::new("claude.json"), json).expect("valid");
        assert_eq!(config.policy.decide("fs.move_file", EffectClass::Write), Decision::Deny);
        let none = GatewayConfig::parse(Path::new("gw.toml"), "[servers.fs]\ncommand = \"node\"\n").expect("valid");
        assert!(none.policy.is_allow_all(), "no [policy] allows everything, as before");
        let bad = toml_err("[policy]\nwrites = \"sometimes\"\n[servers.fs]\ncommand = \"node\"\n");
        assert!(bad.starts_with("gw.toml: policy.writes: must be"), "{bad}");
    }

    #[test]
    fn the_shares_of_a_principal_have_defaults_and_bounds() {
        let servers = "[servers.a]\ncommand = \"node\"\n";
        let read = |auth: &str| {
            GatewayConfig::parse(Path::new("gw.toml"), &format!("[auth]\ntokens_file = \"t.txt\"\n{auth}\n{servers}"))
        };
        let shares = read("").unwrap().auth.expect("[auth]").shares;
        assert_eq!(shares, PrincipalShares::default());
        assert_eq!(
            (shares.max_sessions, shares.session_idle_seconds, shares.max_suspended_runs),
            (64, 300, 16),
            "the documented defaults"
        );
        let set = read(
            "max_sessions = 2\nsession_idle_seconds = 1\nmax_suspended_runs = 64\nmax_finished_tasks = 3\n\
             max_finished_task_bytes = 4096\n",
        )
        .unwrap()
        .auth
        .expect("[auth]")
        .shares;
        let expected = PrincipalShares {
            max_sessions: 2,
            session_idle_seconds: 1,
            max_suspended_runs: 64,
            max_finished_tasks: 3,
            max_finished_task_bytes: 4096,
        };
        assert_eq!(set, expected);
        let err = read("max_suspended_runs = 65").unwrap_err().to_string();
        assert!(
            err.starts_with("gw.toml: auth.max_suspended_runs: must be a whole number from 1 to 64, not 65"),
            "{err}"
        );
        assert!(err.contains("(fix: write a number in that range, or remove it for the default, 16)"), "{err}");
        let err = read("max_sessions = 0").unwrap_err().to_string();
        assert!(err.starts_with("gw.toml: auth.max_sessions: must be a whole number from 1 to 100000"), "{err}");
        let err = read("max_finished_task_bytes = 10").unwrap_err().to_string();
        assert!(err.starts_with("gw.toml: auth.max_finished_task_bytes: must be a whole number from 1024"), "{err}");

        let workers = |head: &str| GatewayConfig::parse(Path::new("gw.toml"), &format!("{head}{servers}"));
        assert_eq!(workers("").unwrap().workers.max_live_parked, None, "the gateway's default, 16");
        assert_eq!(workers("[workers]\nmax_live_parked = 0\n").unwrap().workers.max_live_parked, Some(0));
        let json = r#"{"mcpServers": {"a": {"command": "x"}}, "workers": {"maxLiveParked": 4}}"#;
        assert_eq!(GatewayConfig::parse(Path::new("claude.json"), json).unwrap().workers.max_live_parked, Some(4));
        let err = toml_err(&format!("[workers]\nmax_live_parked = -1\n{servers}"));
        assert!(err.starts_with("gw.toml: workers.max_live_parked: must be a whole number from 0 to 1024"), "{err}");
    }

    #[test]
    fn the_workers_table_reads_max_running_and_names_its_mistakes() {
        let servers = "[servers.a]\ncommand = \"node\"\n";
        let read = |head: &str| GatewayConfig::parse(Path::new("gw.toml"), &format!("{head}{servers}"));
        assert_eq!(read("").unwrap().workers.max_running, None, "no [workers]: the engine's default (the cores)");
        assert_eq!(read("[workers]\nmax_running = 3\n").unwrap().workers.max_running, Some(3));
        assert_eq!(read("[workers]\nmax_running = 0\n").unwrap().workers.max_running, Some(0), "0: no limit");
        let json = r#"{"mcpServers": {"a": {"command": "x"}}, "workers": {"maxRunning": 4}}"#;
        assert_eq!(GatewayConfig::parse(Path::new("claude.json"), json).unwrap().workers.max_running, Some(4));
        for bad in ["-1", "2.5", "\"2\"", "1025"] {
            let err = toml_err(&format!("[workers]\nmax_running = {bad}\n{servers}"));
            assert!(err.starts_with("gw.toml: workers.max_running: must be a whole number from 0 to 1024"), "{err}");
            assert!(err.contains("(fix: write the number of cells that may compute at once"), "{err}");
        }
        let err = toml_err(&format!("[workers]\nmax_runing = 2\n{servers}"));
        assert!(err.starts_with("gw.toml: workers.max_runing: is not a known key (fix: did you mean `max_running`?"));
        let err = toml_err(&format!("workers = 2\n{servers}"));
        assert!(err.starts_with("gw.toml: workers: must be a table"), "{err}");
    }

    #[test]
    fn the_telemetry_table_reads_activity_and_redaction_patterns_and_names_its_mistakes() {
        let servers = "[servers.a]\ncommand = \"node\"\n";
        let read = |head: &str| GatewayConfig::parse(Path::new("gw.toml"), &format!("{head}{servers}"));
        let config = read("[telemetry]\nactivity = true\nredact_patterns = [\"acct-[0-9]+\"]\n").unwrap();
        assert!(config.telemetry.activity);
        assert_eq!(config.telemetry.redact_patterns, ["acct-[0-9]+"]);
        assert_eq!(read("").unwrap().telemetry, TelemetryConfig::default());
        let json =
            r#"{"mcpServers": {"a": {"command": "x"}}, "telemetry": {"activity": true, "redactPatterns": ["x+"]}}"#;
        let config = GatewayConfig::parse(Path::new("claude.json"), json).unwrap();
        assert!(config.telemetry.activity);
        assert_eq!(config.telemetry.redact_patterns, ["x+"]);
        let err = toml_err(&format!("[telemetry]\nredact_patterns = [\"(unclosed\"]\n{servers}"));
        assert!(err.starts_with("gw.toml: telemetry.redact_patterns: ") && err.contains("(unclosed"), "{err}");
        assert!(err.ends_with("(fix: write a regular expression in `regex` syntax)"), "{err}");
        let err = toml_err(&format!("[telemetry]\nactivity = \"yes\"\n{servers}"));
        assert!(err.contains("telemetry.activity: must be true or false"), "{err}");
    }

    #[test]
    fn confinement_defaults_to_required_and_reads_the_other_modes() {
        let servers = "[servers.a]\ncommand = \"node\"\n";
        let read = |head: &str| GatewayConfig::parse(Path::new("gw.toml"), &format!("{head}{servers}"));
        assert_eq!(read("").unwrap().confinement, Confinement::Required);
        assert_eq!(read("confinement = \"best_effort\"\n").unwrap().confinement, Confinement::BestEffort);
        assert_eq!(read("confinement = \"off\"\n").unwrap().confinement, Confinement::Off);
        assert_eq!(
            toml_err(&format!("confinement = \"none\"\n{servers}")),
            "gw.toml: confinement: must be \"required\", \"best_effort\" or \"off\" (fix: keep \"required\" unless \
             the kernel lacks Landlock or seccomp)"
        );
    }

    #[test]
    fn full_toml_loads() {
        let text = r#"
state_dir = "/tmp/cm"
[limits]
timeoutMs = 20000
[servers.everything]
command = "node"
args = ["index.js", "stdio"]
env = { A = "1" }
startup = "lazy"
deny = ["get-env"]
direct = ["get-tiny-image"]
[servers.remote]
url = "http://127.0.0.1:3001/mcp"
"#;
        let cfg = GatewayConfig::parse(Path::new("gw.toml"), text).unwrap();
        assert_eq!(cfg.limits.timeout_ms, 20_000);
        assert_eq!(cfg.state_dir.as_deref(), Some(Path::new("/tmp/cm")));
        let ev = &cfg.servers["everything"];
        assert_eq!(ev.startup, Startup::Lazy);
        assert_eq!(ev.deny, ["get-env"]);
        assert_eq!(ev.direct, ["get-tiny-image"]);
        let Transport::Stdio { command, args, env, .. } = &ev.transport else { panic!("stdio expected") };
        assert_eq!((command.as_str(), args.len(), env["A"].as_str()), ("node", 2, "1"));
        assert_eq!(cfg.servers["remote"].transport, Transport::Http { url: "http://127.0.0.1:3001/mcp".into() });
        assert_eq!(cfg.servers["remote"].startup, Startup::Eager);
    }

    #[test]
    fn desktop_json_is_accepted_as_is() {
        let text = r#"{
  "globalShortcut": "Ctrl+Space",
  "mcpServers": {
    "fs": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], "autoApprove": [] },
    "web": { "type": "http", "url": "https://example.com/mcp" },
    "off": { "command": "x", "disabled": true }
  }
}"#;
        let cfg = GatewayConfig::parse(Path::new("claude_desktop_config.json"), text).unwrap();
        assert_eq!(cfg.servers.keys().collect::<Vec<_>>(), ["fs", "web"]);
        assert_eq!(cfg.limits, Limits::default());
    }

    #[test]
    fn json_is_detected_by_content() {
        let cfg = GatewayConfig::parse(Path::new("servers.conf"), r#" {"mcpServers": {"a": {"command": "x"}}}"#);
        assert!(cfg.is_ok());
    }

    #[test]
    fn toml_syntax_error_names_line() {
        let e = toml_err("[servers.a]\ncommand = \n");
        assert!(e.starts_with("gw.toml: (file): is not valid TOML at line 2"), "{e}");
    }

    #[test]
    fn json_syntax_error() {
        assert!(json_err("{\"mcpServers\": ").contains("is not valid JSON"));
    }

    #[test]
    fn unknown_top_key_suggests() {
        assert_eq!(
            toml_err("[server.a]\ncommand = \"x\"\n"),
            "gw.toml: server: is not a known key (fix: did you mean `servers`? known keys: limits, servers, state_dir, confinement, policy, auth, store, telemetry, sampling, workers, approvals, console)"
        );
    }

    #[test]
    fn unknown_server_key_suggests() {
        let e = toml_err("[servers.a]\ncomand = \"x\"\n");
        assert!(e.starts_with("gw.toml: servers.a.comand: is not a known key (fix: did you mean `command`?"), "{e}");
    }

    #[test]
    fn missing_servers() {
        assert!(toml_err("[limits]\ntimeoutMs = 5\n").starts_with("gw.toml: servers: is missing"));
        assert!(json_err("{}").starts_with("claude.json: mcpServers: is missing"));
    }

    #[test]
    fn command_and_url_are_exclusive() {
        assert!(toml_err("[servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n").contains("servers.a: sets both"));
        assert!(toml_err("[servers.a]\nstartup = \"lazy\"\n").contains("servers.a: sets neither"));
    }

    #[test]
    fn empty_command() {
        assert!(toml_err("[servers.a]\ncommand = \"\"\n").contains("servers.a.command: must be a non-empty string"));
    }

    #[test]
    fn bad_url() {
        let e = toml_err("[servers.a]\nurl = \"ws://h\"\n");
        assert!(e.contains("servers.a.url: is \"ws://h\", not an http:// or https:// URL"), "{e}");
    }

    #[test]
    fn args_on_http_server() {
        assert!(toml_err("[servers.a]\nurl = \"http://h\"\nargs = []\n").contains("servers.a.args: only applies"));
    }

    #[test]
    fn args_must_be_strings() {
        let e = toml_err("[servers.a]\ncommand = \"x\"\nargs = [\"a\", 3]\n");
        assert!(e.contains("servers.a.args[1]: must be a string, not 3 (fix: quote it)"), "{e}");
        assert!(toml_err("[servers.a]\ncommand = \"x\"\nargs = \"a\"\n").contains("servers.a.args: must be a list"));
    }

    #[test]
    fn env_values_must_be_strings() {
        let e = toml_err("[servers.a]\ncommand = \"x\"\nenv = { PORT = 80 }\n");
        assert!(e.contains("servers.a.env.PORT: must be a string, not 80"), "{e}");
    }

    #[test]
    fn inherit_env_names_variables_and_never_a_secret_of_the_gateway() {
        let cfg = GatewayConfig::parse(
            Path::new("gw.toml"),
            "[servers.a]\ncommand = \"x\"\ninherit_env = [\"GITHUB_TOKEN\", \"NODE_OPTIONS\"]\n",
        )
        .unwrap();
        let Transport::Stdio { inherit_env, .. } = &cfg.servers["a"].transport else { panic!("stdio expected") };
        assert_eq!(inherit_env, &["GITHUB_TOKEN", "NODE_OPTIONS"]);
        let json = r#"{"mcpServers": {"a": {"command": "x", "inheritEnv": ["AWS_PROFILE"]}}}"#;
        let cfg = GatewayConfig::parse(Path::new("claude.json"), json).unwrap();
        let Transport::Stdio { inherit_env, .. } = &cfg.servers["a"].transport else { panic!("stdio expected") };
        assert_eq!(inherit_env, &["AWS_PROFILE"]);
        for secret in SECRET_ENV {
            let e = toml_err(&format!("[servers.a]\ncommand = \"x\"\ninherit_env = [\"HOME\", \"{secret}\"]\n"));
            assert_eq!(
                e,
                format!(
                    "gw.toml: servers.a.inherit_env[1]: names {secret}, which the gateway reads as a secret and never \
                     passes to a server (fix: remove \"{secret}\"; a server that needs such a value of its own gets \
                     it in `env`)"
                )
            );
        }
        let e = toml_err("[servers.a]\ncommand = \"x\"\ninherit_env = [\"A=1\"]\n");
        assert!(e.contains("servers.a.inherit_env[0]: is \"A=1\", not the name of an environment variable"), "{e}");
        let e = toml_err("[servers.a]\nurl = \"http://h\"\ninherit_env = [\"A\"]\n");
        assert!(e.contains("servers.a.inherit_env: only applies to stdio servers"), "{e}");
    }

    #[test]
    fn a_server_inherits_the_default_set_the_locale_and_what_it_names_and_no_secret() {
        let parent = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("OTHER", "1"),
            ("CODEMODE_STATE_KEY", "k1:AAAA"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Basic x"),
            ("BASH_FUNC_f%%", "() { :; }"),
        ];
        let parent = parent.iter().map(|(k, v)| (k.into(), v.into()));
        // Even a list that names a secret (the config check refuses such a file) passes none on.
        let named = ["GITHUB_TOKEN".to_owned(), "CODEMODE_STATE_KEY".to_owned(), "BASH_FUNC_f%%".to_owned()];
        let got: Vec<String> = inherited_env(parent, &named)
            .into_iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        assert_eq!(got, ["PATH=/usr/bin", "HOME=/home/u", "LANG=C.UTF-8", "LC_ALL=C", "GITHUB_TOKEN=ghp_x"]);
    }

    #[test]
    fn bad_startup() {
        let e = toml_err("[servers.a]\ncommand = \"x\"\nstartup = \"soon\"\n");
        assert!(e.contains("servers.a.startup: is \"soon\" (fix: write \"eager\""), "{e}");
    }

    #[test]
    fn denied_and_direct() {
        let e = toml_err("[servers.a]\ncommand = \"x\"\ndeny = [\"t\"]\ndirect = [\"t\"]\n");
        assert!(e.contains("servers.a.direct: lists \"t\", which `deny` also lists"), "{e}");
    }

    #[test]
    fn unknown_limit() {
        let e = toml_err("[limits]\ntimeout_ms = 5\n[servers.a]\ncommand = \"x\"\n");
        assert!(e.contains("limits.timeout_ms: is not a known key (fix: did you mean `timeoutMs`?"), "{e}");
    }

    #[test]
    fn limit_must_be_positive_integer() {
        let e = toml_err("[limits]\ntimeoutMs = \"10s\"\n[servers.a]\ncommand = \"x\"\n");
        assert!(e.contains("limits.timeoutMs: must be a positive integer, not \"10s\""), "{e}");
    }

    #[test]
    fn sse_type_is_rejected_with_fix() {
        let e = json_err(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}"#);
        assert!(e.contains("mcpServers.a.type: is \"sse\""), "{e}");
    }

    #[test]
    fn all_disabled() {
        let e = json_err(r#"{"mcpServers": {"a": {"command": "x", "disabled": true}}}"#);
        assert!(e.contains("mcpServers: names no enabled server"), "{e}");
    }

    #[test]
    fn server_must_be_table() {
        assert!(toml_err("servers = { a = 1 }\n").contains("servers.a: must be a table"));
    }

    #[test]
    fn fallback_park_and_the_console_route_need_a_console() {
        let servers = "[servers.a]\ncommand = \"x\"\n";
        let parks = format!("[policy]\nwrites = \"ask\"\nfallback = \"park\"\n{servers}");
        assert!(toml_err(&parks).contains("policy.fallback: parks runs"), "{}", toml_err(&parks));
        let routes = format!("[approvals]\nroute = \"console\"\n{servers}");
        assert!(toml_err(&routes).contains("approvals.route: parks runs"), "{}", toml_err(&routes));
        let text = format!(
            "[policy]\nfallback = \"park\"\n[approvals]\nroute = \"console\"\nwebhook = \"https://hooks.example/x\"\n\
             [console]\nlisten = \"127.0.0.1:8790\"\noperators = [\"carol\"]\n{servers}"
        );
        let config = GatewayConfig::parse(Path::new("gw.toml"), &text).expect("a console config");
        assert_eq!(config.policy.fallback, codemode_config::Fallback::Park);
        assert_eq!(
            config.approvals,
            ApprovalsConfig { route: Route::Console, webhook: Some("https://hooks.example/x".into()) }
        );
        let console = config.console.expect("[console]");
        assert_eq!(
            (console.listen.port(), console.public_url, console.operators),
            (8790, None, vec!["carol".to_owned()])
        );
    }

    #[test]
    fn console_mistakes_name_their_key() {
        let servers = "[servers.a]\ncommand = \"x\"\n";
        for (table, key) in [
            ("[console]\nlisten = \"localhost\"\n", "console.listen"),
            ("[console]\nlisten = \"127.0.0.1:1\"\npublic_url = \"ftp://x\"\n", "console.public_url"),
            ("[console]\nlisten = \"127.0.0.1:1\"\nport = 2\n", "console.port"),
            ("[approvals]\nroute = \"email\"\n", "approvals.route"),
            ("[approvals]\nwebhook = \"hooks.example\"\n", "approvals.webhook"),
            ("[policy]\nfallback = \"ask\"\n", "policy.fallback"),
        ] {
            let err = toml_err(&format!("{table}{servers}"));
            assert!(err.contains(&format!("{key}:")), "{key}: {err}");
        }
    }
}
