//! The client side of the gateway: an rmcp server whose tools are exactly the facade's surface.
//!
//! `exec` and `wait` go to the `codemode` facade and come back as the `CodeModeResult` in compact JSON text (plus
//! `structuredContent`), `isError` set when the run failed; direct-only tools are forwarded to their upstream server
//! unchanged. It holds no run state of its own. Invariant: without `[auth]`, one client session is one `RunScope`
//! session id, so a run can only be resumed from the session that started it; with `[auth]`, the scope is the
//! request's principal, so any session of that principal may resume it and no other principal can see it.
//!
//! Besides the call itself (`notify`, `tasks`): a request that carries a progress token is sent
//! `notifications/progress` for each nested call as it starts, reports progress and finishes; upstream servers' log
//! messages are forwarded while a call runs (not with `[auth]`); a client that declared the tasks extension gets
//! `exec` and `wait` as tasks.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use codemode::WorkerCommand;
use codemode::{CodeMode, ExecOptions, RunScope};
use codemode_bridge::{ApprovalDecision, CodeModeResult, ToolHost};
use codemode_config::{Decision, EffectClass, Fallback, Policy};
use codemode_store_pg::{PgOptions, PgStore, redact_url};
use codemode_telemetry::span::{KeyValue, Parent, Span, SpanKind, Start};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;

use crate::Error;
use crate::approve::{self, Channel, Pending, StateSeal};
use crate::auth::Principal;
use crate::auth::http::AuthFront;
use crate::auth::limits::{PrincipalLimits, RequestRate};
use crate::config::{DEFAULT_MAX_LIVE_PARKED, GatewayConfig, Route};
use crate::console::Console;
use crate::notify::{ClientProgress, forward_logs};
use crate::tasks::{self, Outcome, Tasks};
use codemode_mcp::UpstreamManager;

/// The hidden subcommand the `codemode` binary runs as when it is its own worker (main.rs's `WORKER_MARKER`).
pub const WORKER_ARG: &str = "__worker";

/// The environment variable with the hex key that seals `requestState` (pending approvals of the sessionless
/// protocol). Replicas behind one load balancer share it; without it each process seals with a random key.
pub const REQUEST_STATE_KEY_VAR: &str = "CODEMODE_REQUEST_STATE_KEY";

const INSTRUCTIONS: &str = "This server runs JavaScript programs (the exec tool) against the MCP servers it wraps. \
Their tools live under MCP.<server>.<tool>({...}) inside the program; read their declarations with \
(await API.read(\"mcp/<server>.d.ts\")).content (API.list(\"mcp\") lists the files). Call wait only with the runId of a result whose \
status is \"waiting\".";

/// The engine and the upstream servers, shared by every client session.
pub struct Gateway {
    code_mode: CodeMode,
    upstream: Arc<UpstreamManager>,
    /// The embedder's own tools, cataloged beside the upstream ones.
    own: OwnTools,
    /// The model-visible tools and where direct-only ones go; replaced when an upstream server's tools change.
    surface: std::sync::RwLock<Arc<Surface>>,
    /// The client sessions told when the visible tools change (`notifications/tools/list_changed`).
    clients: std::sync::Mutex<Vec<rmcp::Peer<RoleServer>>>,
    /// Seals the `requestState` of input-required results (pending approvals).
    seal: StateSeal,
    /// The tool policy, unless it allows everything (then direct calls never look anything up).
    policy: Option<Policy>,
    /// The single-use ids of the sealed approvals of direct calls answered so far, with when each expires.
    answered: std::sync::Mutex<HashMap<String, u64>>,
    /// Each principal's limits, with `[auth]`.
    limits: Option<Arc<PrincipalLimits>>,
    /// Whether `exec` and `wait` results carry their activity for the model (`[telemetry] activity`).
    activity_in_result: bool,
    /// `exec` and `wait` calls running as MCP tasks.
    tasks: Arc<Tasks>,
    /// Whether a session's runs end with it: not when a fleet store keeps them for every replica.
    runs_end_with_session: bool,
    /// The approval console (`[console]`), when configured.
    console: Option<Arc<Console>>,
    /// Who answers programs' approvals (`[approvals] route`).
    route: Route,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("tools", &self.surface().tools.len()).field("upstream", &self.upstream).finish()
    }
}

/// The tools an embedder gives the gateway besides its MCP servers ([`GatewayBuilder::tools`](crate::GatewayBuilder::tools)):
/// their definitions (none naming a server) and the host that runs them.
#[derive(Clone, Default)]
pub(crate) struct OwnTools {
    pub(crate) definitions: Vec<codemode_catalog::ToolDefinition>,
    pub(crate) host: Option<Arc<dyn ToolHost>>,
}

impl OwnTools {
    /// The catalog's definitions: these tools first, then `upstream`'s.
    fn with(&self, upstream: Vec<codemode_catalog::ToolDefinition>) -> Vec<codemode_catalog::ToolDefinition> {
        self.definitions.iter().cloned().chain(upstream).collect()
    }
}

/// What the client sees of the gateway: its tools, in the facade's order, and the upstream target of each
/// direct-only one.
#[derive(Debug, Default)]
struct Surface {
    tools: Vec<Tool>,
    /// Direct-only tool name on the surface → its upstream target and what the policy decides for it.
    direct: HashMap<String, Direct>,
}

/// A direct-only tool: where its calls go, and the policy's decision on them, taken when the surface is built.
#[derive(Clone, Debug, PartialEq)]
struct Direct {
    server: String,
    tool: String,
    /// `allow` without a policy: a direct call then costs no policy lookup.
    decision: Decision,
    class: EffectClass,
}

impl Direct {
    /// The policy path of the tool, `<server>.<tool>`, as rules match it.
    fn path(&self) -> String {
        format!("{}.{}", self.server, self.tool)
    }
}

impl Surface {
    /// The surface of `code_mode` over the upstream tools `definitions`, with `policy`'s decision on each
    /// direct-only tool.
    fn of(code_mode: &CodeMode, definitions: &[codemode_catalog::ToolDefinition], policy: Option<&Policy>) -> Surface {
        let mut direct_by_name: HashMap<String, Direct> = HashMap::new();
        for def in definitions.iter().filter(|d| d.direct_only) {
            if let Some(server) = &def.server {
                let class = def.effect_class();
                let decision = policy.map_or(Decision::Allow, |p| p.decide(&codemode_catalog::policy_path(def), class));
                let direct = Direct { server: server.clone(), tool: def.name.clone(), decision, class };
                direct_by_name.insert(def.name.clone(), direct);
            }
        }
        let mut tools = Vec::new();
        let mut direct = HashMap::new();
        for spec in code_mode.surface() {
            let schema = match spec.parameters {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            if let Some(target) = direct_by_name.get(&spec.name) {
                direct.insert(spec.name.clone(), target.clone());
            }
            tools.push(Tool::new(spec.name, spec.description, Arc::new(schema)));
        }
        Surface { tools, direct }
    }

    /// The direct-only tools as the client lists them, for noticing a change.
    fn direct_tools(&self) -> Vec<&Tool> {
        self.tools.iter().filter(|t| self.direct.contains_key(t.name.as_ref())).collect()
    }
}

/// What the policy lets one direct call do.
enum DirectGate {
    /// Forward it.
    Run,
    /// Answer with this instead; the call did not run.
    Answer(Box<CallToolResponse>),
}

impl Gateway {
    /// Starts the upstream servers and builds the code mode engine over their tools and the embedder's (`own`),
    /// its cells run by `worker`. [`GatewayBuilder::start`](crate::GatewayBuilder::start) calls it.
    ///
    /// # Errors
    ///
    /// A config error found while listing upstream tools (a `deny`/`direct` entry naming no tool), or an engine
    /// that cannot be built.
    pub(crate) async fn start(
        config: &GatewayConfig,
        state_dir: Option<PathBuf>,
        own: OwnTools,
        worker: WorkerCommand,
    ) -> Result<Arc<Gateway>, Error> {
        let redactor = config.redactor().map_err(Error::Engine)?;
        let upstream = UpstreamManager::start(&config.servers, config.sampling, redactor)
            .await
            .map_err(|e| Error::Config { file: config.file.clone(), key: e.key, problem: e.problem, fix: e.fix })?;
        let upstream = Arc::new(upstream);
        let definitions = own.with(upstream.tool_definitions());
        let host: Arc<dyn ToolHost> = Arc::new(codemode_mcp::WithServers::new(own.host.clone(), upstream.clone()));
        let mut builder = CodeMode::builder();
        let mut shared: Option<Arc<dyn codemode::store::FleetBackend>> = None;
        if let Some(store) = &config.store {
            // The state keys of `CODEMODE_STATE_KEY`/`CODEMODE_STATE_KEY_FILE` seal the rows, as they seal files.
            let keys = codemode::store::Keyring::from_env()
                .map_err(|e| Error::Engine(format!("state keys: {e}")))?
                .map(Arc::new);
            let options = PgOptions { lease_ms: store.lease_ms, ttl_ms: store.ttl_ms, keys, ..PgOptions::default() };
            let pg = PgStore::connect(&store.url, options)
                .await
                .map_err(|e| Error::Engine(format!("[store] url {}: {e}", redact_url(&store.url))))?;
            let pg: Arc<dyn codemode::store::FleetBackend> = Arc::new(pg);
            shared = Some(pg.clone());
            builder = builder.store(pg);
        }
        if let Some(n) = config.workers.max_running {
            builder = builder.max_running_cells(n);
        }
        builder = builder.max_live_parked(config.workers.max_live_parked.unwrap_or(DEFAULT_MAX_LIVE_PARKED));
        if let Some(auth) = &config.auth {
            // Each principal gets a share of the suspended-run places; without `[auth]` the one client takes all 64.
            builder = builder.max_suspended_runs_per_owner(auth.shares.max_suspended_runs as usize);
        }
        let code_mode = builder
            .redactor(upstream.redactor().clone())
            .limits(config.limits.clone())
            .tools(definitions.clone())
            .host(host)
            .policy(config.policy.clone())
            .state_dir(if config.store.is_some() { None } else { state_dir.clone() })
            .confinement(config.confinement)
            .worker(worker)
            .build()
            .map_err(|e| Error::Engine(e.to_string()))?;
        let policy = Some(config.policy.clone()).filter(|p| !p.is_allow_all());
        let surface = std::sync::RwLock::new(Arc::new(Surface::of(&code_mode, &definitions, policy.as_ref())));
        // One key seals `requestState` and signs the console's links: the configured one, else a random one.
        let key: Vec<u8> = match std::env::var(REQUEST_STATE_KEY_VAR) {
            Ok(hex_key) => hex::decode(hex_key.trim())
                .map_err(|e| Error::Engine(format!("{REQUEST_STATE_KEY_VAR}: {e} (fix: 64 or more hex digits)")))?,
            Err(_) => (0..2).flat_map(|_| uuid::Uuid::new_v4().into_bytes()).collect(),
        };
        let seal = StateSeal::new(key.clone())
            .map_err(|e| Error::Engine(format!("{REQUEST_STATE_KEY_VAR}: {e} (fix: 64 or more hex digits)")))?;
        let console = match &config.console {
            Some(settings) => {
                let ledger: Arc<dyn codemode::store::FleetBackend> = match (&shared, &state_dir) {
                    (Some(shared), _) => shared.clone(),
                    (None, Some(dir)) => {
                        let files = codemode::store::FileBackend::open(dir.join("console"))
                            .map_err(|e| Error::Engine(format!("the console's ledger in {}: {e}", dir.display())))?;
                        let keys = codemode::store::Keyring::from_env()
                            .map_err(|e| Error::Engine(format!("state keys: {e}")))?
                            .map(Arc::new);
                        Arc::new(codemode::store::LocalFleet::directory(files.with_keys(keys)))
                    }
                    (None, None) => Arc::new(codemode::store::LocalFleet::memory()),
                };
                let console = Console::new(
                    settings.clone(),
                    ledger,
                    key,
                    config.approvals.webhook.clone(),
                    Arc::new(codemode::store::SystemClock),
                    std::time::Duration::from_secs(config.limits.snapshot_ttl_seconds),
                )
                .map_err(|e| Error::Engine(format!("{REQUEST_STATE_KEY_VAR}: {e}")))?;
                Some(Arc::new(console))
            }
            None => None,
        };
        let limits = config.auth.as_ref().map(|auth| {
            Arc::new(PrincipalLimits::new(
                auth.requests_per_minute
                    .map(RequestRate::per_minute)
                    .or(auth.requests_per_hour.map(RequestRate::per_hour)),
                auth.max_concurrent_runs,
                Arc::new(codemode::store::SystemClock),
            ))
        });
        let activity_in_result = config.telemetry.activity;
        // A task stays readable as long as a parked run stays resumable; with `[auth]`, within its principal's share.
        let ttl = std::time::Duration::from_secs(config.limits.snapshot_ttl_seconds);
        let finished = config.auth.as_ref().map(|auth| tasks::FinishedShare {
            tasks: auth.shares.max_finished_tasks as usize,
            bytes: auth.shares.max_finished_task_bytes,
        });
        let tasks = Arc::new(Tasks::new(ttl, shared).with_finished_share(finished));
        let clients = std::sync::Mutex::new(Vec::new());
        let answered = std::sync::Mutex::default();
        let gateway = Arc::new(Gateway {
            code_mode,
            upstream,
            own,
            surface,
            clients,
            seal,
            policy,
            answered,
            limits,
            activity_in_result,
            tasks,
            runs_end_with_session: config.store.is_none(),
            console,
            route: config.approvals.route,
        });
        gateway.follow_tool_changes();
        Ok(gateway)
    }

    /// Rebuilds the catalog whenever an upstream server's tools change (its `tools/list_changed`, or a restart with
    /// other tools), until the gateway is dropped.
    fn follow_tool_changes(self: &Arc<Self>) {
        let Some(mut changed) = self.upstream.take_changes() else { return };
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(server) = changed.recv().await {
                let mut servers = std::collections::BTreeSet::from([server]);
                while let Ok(more) = changed.try_recv() {
                    servers.insert(more);
                }
                let Some(gateway) = gateway.upgrade() else { return };
                gateway.tools_changed(&servers).await;
            }
        });
    }

    /// Lists the tools of `servers` again and, when the catalog changed, rebuilds it for the next cell; tells every
    /// client when the direct-only tools (the ones it sees besides exec and wait) changed.
    async fn tools_changed(&self, servers: &std::collections::BTreeSet<String>) {
        for server in servers {
            if let Err(e) = self.upstream.refresh(server).await {
                eprintln!("codemode gateway: MCP server \"{server}\" said its tools changed, but: {}", e.message);
            }
        }
        let definitions = self.own.with(self.upstream.tool_definitions());
        match self.code_mode.set_tools(definitions.clone()) {
            Ok(false) => return,
            Ok(true) => {}
            Err(e) => {
                eprintln!("codemode gateway: the new tools of {servers:?} cannot be cataloged, keeping the old: {e}");
                return;
            }
        }
        let surface = Arc::new(Surface::of(&self.code_mode, &definitions, self.policy.as_ref()));
        let old = std::mem::replace(
            &mut *self.surface.write().unwrap_or_else(std::sync::PoisonError::into_inner),
            surface.clone(),
        );
        if old.direct_tools() == surface.direct_tools() {
            return;
        }
        let clients: Vec<_> = {
            let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            clients.retain(|peer| !peer.is_transport_closed());
            clients.clone()
        };
        for peer in clients {
            let _ = peer.notify_tool_list_changed().await;
        }
    }

    /// The client's view of the gateway now.
    /// The tool name a span and a metric carry for a `tools/call` of `name`: `name` when this gateway offers it
    /// (`exec`, `wait`, a direct tool), else [`codemode_telemetry::otel::OTHER`], so that made-up names neither
    /// reach the exported telemetry nor make new metric series.
    fn traced_tool_name<'a>(&self, name: &'a str) -> &'a str {
        if matches!(name, "exec" | "wait") || self.surface().direct.contains_key(name) {
            name
        } else {
            codemode_telemetry::otel::OTHER
        }
    }

    fn surface(&self) -> Arc<Surface> {
        self.surface.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Each principal's limits, when `[auth]` is configured.
    pub fn limits(&self) -> Option<&Arc<PrincipalLimits>> {
        self.limits.as_ref()
    }

    /// The model-visible tools, as they are now.
    pub fn tools(&self) -> Vec<Tool> {
        self.surface().tools.clone()
    }

    /// The upstream servers.
    pub fn upstream(&self) -> &Arc<UpstreamManager> {
        &self.upstream
    }

    /// What the engine holds right now (parked runs, their workers, idle workers), for the gauges.
    pub fn stats(&self) -> codemode::EngineStats {
        self.code_mode.stats()
    }

    /// The approval console, when `[console]` is configured.
    pub fn console(&self) -> Option<&Arc<Console>> {
        self.console.as_ref()
    }

    /// How the person behind a request is asked: the console with `[approvals] route = "console"`, else what the
    /// client declared.
    fn channel(&self, context: &RequestContext<RoleServer>) -> Channel {
        match (&self.console, self.route) {
            (Some(_), Route::Console) => Channel::Console,
            _ => Channel::of(context),
        }
    }

    /// Stops the upstream servers.
    pub async fn shutdown(&self) {
        self.upstream.shutdown().await;
    }

    /// Serves one tool call. A client that cancels an `exec` or a `wait` (`notifications/cancelled`) aborts its
    /// run: its worker is killed, its upstream calls cancelled, and the run released. `approvals` is how the person
    /// behind this request can be asked about calls whose policy is `ask`; `progress`, when the client sent a
    /// progress token, receives the run's activity (and keeps a `wait` waiting while it reports).
    async fn call(
        &self,
        request: CallToolRequestParams,
        meta: &rmcp::model::RequestMetaObject,
        scope: RunScope,
        approvals: Channel,
        cancelled: impl std::future::Future<Output = ()>,
        progress: Option<Arc<ClientProgress>>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.as_ref();
        // With `[auth]`, an exec or wait holds one of its principal's run places until it answers.
        let _permit = match (&self.limits, &scope.session_id) {
            (Some(limits), Some(owner)) if scope.authenticated && matches!(name, "exec" | "wait") => {
                match limits.begin_run(owner) {
                    Ok(permit) => Some(permit),
                    Err(too_many) => {
                        let result = CodeModeResult::failed(
                            codemode_bridge::ErrorKind::RuntimeUnavailable,
                            codemode_bridge::FailurePhase::Host,
                            format!(
                                "too many runs in progress: this principal may have {} exec or wait calls running \
                                 at once; call again when one of them has answered",
                                too_many.max
                            ),
                            codemode::Telemetry::default(),
                        );
                        return Ok(CallToolResponse::Complete(code_mode_result(&result, 0)));
                    }
                }
            }
            _ => None,
        };
        let input = request.arguments.clone().map_or(Value::Object(serde_json::Map::new()), Value::Object);
        let mut options = ExecOptions::default().activity_in_result(self.activity_in_result);
        if let Some(approver) = approvals.approver() {
            options = options.approver(approver);
        }
        let title = input.get("title").and_then(Value::as_str).map(str::to_owned);
        // The console lists the run: its activity is recorded (only with `[console]`).
        let seen = self.console.clone().filter(|_| matches!(name, "exec" | "wait")).map(|console| {
            let (owner, title) = (scope.session_id.clone(), title.clone());
            // The run this call started or resumed, once its cell starts: a wait that cannot resume the run it names
            // (another owner's) leaves the console as it was.
            let run_id = Arc::new(std::sync::Mutex::new(None::<String>));
            let seen = run_id.clone();
            let hook: codemode::ActivityHook = Arc::new(move |event: &codemode::ActivityEvent| {
                if let codemode::ActivityEvent::CellStarted(cell) = event {
                    *seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cell.run_id.clone());
                }
                console.saw(&owner, &title, event);
            });
            (hook, run_id)
        });
        match (progress, &seen) {
            (Some(progress), Some((hook, _))) => {
                let hook = hook.clone();
                options = options
                    .on_activity(move |event| {
                        hook(event);
                        progress.event(event);
                    })
                    .progress_keeps_waiting(true);
            }
            (Some(progress), None) => {
                options = options.on_activity(move |event| progress.event(event)).progress_keeps_waiting(true);
            }
            (None, Some((hook, _))) => {
                let hook = hook.clone();
                options = options.on_activity(move |event| hook(event));
            }
            (None, None) => {}
        }
        if let Some(key) = idempotency_key(&request, meta) {
            if name != "exec" {
                return Err(ErrorData::invalid_params(
                    format!("{IDEMPOTENCY_KEY} applies to exec only, not {name}; drop it"),
                    None,
                ));
            }
            options = options.idempotency_key(key?);
        }
        let owner = scope.session_id.clone();
        // A retry that answers an input-required result resumes the run it names, whatever the tool's arguments.
        if let Some(sealed) = request.request_state.as_ref().filter(|_| matches!(name, "exec" | "wait")) {
            let Some(pending) = self.seal.open(sealed, &owner).filter(|p| p.direct.is_none()) else {
                return Err(ErrorData::invalid_params(
                    "requestState is not one this gateway issued to this client, or it expired; call exec again",
                    None,
                ));
            };
            let options = options.answers(approve::answers(&pending.calls, request.input_responses.as_ref()));
            let input = serde_json::json!({ "runId": pending.run_id });
            let result = self.code_mode.wait_until_with(input, scope, &options, cancelled).await;
            return Ok(self.respond(result, pending.title, owner, &approvals));
        }
        let result = match name {
            "exec" => self.code_mode.exec_until_with(input, scope, &options, cancelled).await,
            "wait" => {
                // A run parked for the console resumes with the answers recorded there, waiting a while for a first.
                if let (Some(console), Some(run_id)) = (&self.console, input.get("runId").and_then(Value::as_str)) {
                    let answers = console.answers(run_id, &owner, CONSOLE_ANSWER_HOLD).await;
                    if !answers.is_empty() {
                        options = options.answers(answers);
                    }
                }
                self.code_mode.wait_until_with(input, scope, &options, cancelled).await
            }
            _ => {
                let surface = self.surface();
                let Some(direct) = surface.direct.get(name) else {
                    return Err(ErrorData::invalid_params(
                        format!("unknown tool \"{name}\": this server offers {}", self.tool_names()),
                        None,
                    ));
                };
                if direct.decision != Decision::Allow || request.request_state.is_some() {
                    match self.gate_direct(direct, &request, &input, &owner, &approvals, cancelled).await? {
                        DirectGate::Run => {}
                        DirectGate::Answer(answer) => return Ok(*answer),
                    }
                }
                let (server, tool) = (&direct.server, &direct.tool);
                // An elicitation of its server during the call reaches this client.
                let _in_flight =
                    self.upstream.relay().register_call(server, owner, Default::default(), Default::default());
                return Ok(CallToolResponse::Complete(match self.upstream.call(server, tool, input).await {
                    Ok(result) => result,
                    Err(e) => CallToolResult::error(vec![ContentBlock::text(e.message)]),
                }));
            }
        };
        if let (Some(console), Some((_, run_id))) = (&self.console, &seen) {
            let run_id = run_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            if let Some(run_id) = run_id {
                console.ended(&run_id, &owner, &title, &result);
                if !matches!(result, CodeModeResult::Waiting(_)) {
                    console.forget_questions(&run_id).await;
                }
            }
        }
        let result = self.ask_console(result, &owner, &title, &approvals).await;
        Ok(self.respond(result, title, owner, &approvals))
    }

    /// A run parked on approvals that the console answers: its questions are recorded there (and sent to the
    /// webhook), and the model is told that a person decides them elsewhere.
    async fn ask_console(
        &self,
        result: CodeModeResult,
        owner: &Option<String>,
        title: &Option<String>,
        approvals: &Channel,
    ) -> CodeModeResult {
        let Some(console) = &self.console else { return result };
        let mut waiting = match result {
            CodeModeResult::Waiting(waiting)
                if !waiting.pending_approvals.is_empty() && !matches!(approvals, Channel::InputRequired) =>
            {
                waiting
            }
            other => return other,
        };
        console.ask(&waiting.run_id, owner, title, &waiting.pending_approvals).await;
        waiting.warnings.push(CONSOLE_NOTE.to_owned());
        CodeModeResult::Waiting(waiting)
    }

    /// Applies the tool policy to a direct call of `direct` with `input`, as to a program's call: `deny` refuses it;
    /// `ask` asks the person through this request's channel (an elicitation now, or an input-required result whose
    /// retry carries the answer), or takes the policy's fallback when nobody can be asked.
    ///
    /// # Errors
    ///
    /// A `requestState` that is not one this gateway sealed for this client and this very call, or one already
    /// answered.
    async fn gate_direct(
        &self,
        direct: &Direct,
        request: &CallToolRequestParams,
        input: &Value,
        owner: &Option<String>,
        approvals: &Channel,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<DirectGate, ErrorData> {
        let name = request.name.as_ref();
        let path = direct.path();
        let explain = || self.policy.as_ref().map_or_else(String::new, |p| p.explain(&path, direct.class));
        let refused = |message: String| {
            let mut result = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
            result.structured_content = Some(serde_json::json!({ "code": "denied", "error": message }));
            Ok(DirectGate::Answer(Box::new(CallToolResponse::Complete(result))))
        };
        let denied_by_person = || {
            refused(format!(
                "a person denied this call of tool \"{name}\"; it did not run. Retrying will not help: do without \
                 it, or tell the user what it was for"
            ))
        };
        let binding = approve::DirectCall::binding(name, input);
        if let Some(sealed) = &request.request_state {
            let pending = self.seal.open(sealed, owner);
            let Some((pending, call)) = pending.and_then(|p| p.direct.clone().map(|d| (p, d))) else {
                return Err(ErrorData::invalid_params(
                    "requestState is not one this gateway issued to this client for a direct call; call the tool \
                     again without it",
                    None,
                ));
            };
            if call.binding != binding {
                return Err(ErrorData::invalid_params(
                    format!(
                        "requestState approves another call than this one: retry {name} with exactly the arguments \
                         it was asked about, or call it again without requestState"
                    ),
                    None,
                ));
            }
            if !self.first_answer(&call) {
                return Err(ErrorData::invalid_params(
                    "requestState was answered already, or it expired: an approval of a direct call runs it once; \
                     call the tool again without requestState to be asked again",
                    None,
                ));
            }
            let answer = approve::answers(&pending.calls, request.input_responses.as_ref());
            return match answer.first().map(|(_, d)| *d) {
                Some(ApprovalDecision::Approve | ApprovalDecision::ApproveForRun) => Ok(DirectGate::Run),
                _ => denied_by_person(),
            };
        }
        match direct.decision {
            Decision::Allow => return Ok(DirectGate::Run),
            Decision::Deny => {
                return refused(format!(
                    "tool \"{name}\" is denied by the tool policy by {}; the call did not run. Retrying will not \
                     help: do without it, or tell the user the task needs it",
                    explain()
                ));
            }
            Decision::Ask => {}
        }
        let preview = self.upstream.redactor().preview(input, APPROVAL_PREVIEW_BYTES);
        let question = approve::question(&path, &preview, &approve::Asker::Client);
        match approvals {
            Channel::Elicit(peer) => {
                let answer = tokio::select! {
                    answer = peer.create_elicitation(approve::direct_form(&question)) => answer,
                    () = cancelled => return Err(ErrorData::internal_error("the client cancelled the call", None)),
                };
                match answer.as_ref().map(approve::decision) {
                    Ok(ApprovalDecision::Approve | ApprovalDecision::ApproveForRun) => Ok(DirectGate::Run),
                    // A client that fails the request has not approved anything.
                    _ => denied_by_person(),
                }
            }
            Channel::InputRequired => {
                let call_id = format!("direct:{}", uuid::Uuid::new_v4());
                let expires_ms = now_ms().saturating_add(self.code_mode.limits().snapshot_ttl_seconds * 1_000);
                let call = approve::DirectCall { binding, nonce: call_id.clone(), expires_ms };
                let requests = approve::direct_input_requests(&call_id, &question);
                let pending = Pending {
                    run_id: String::new(),
                    owner: owner.clone(),
                    title: None,
                    calls: vec![call_id],
                    direct: Some(call),
                };
                let state = self.seal.seal(&pending);
                Ok(DirectGate::Answer(Box::new(CallToolResponse::InputRequired(InputRequiredResult::new(
                    Some(requests),
                    Some(state),
                )))))
            }
            Channel::Console => refused(format!(
                "tool \"{name}\" needs a person's approval, which this gateway takes in its console, and a direct \
                 call has no run to park until a person decides there; the call did not run. Retrying will not help: \
                 do without it, or tell the user the task needs it"
            )),
            Channel::Nobody => match self.policy.as_ref().map_or(Fallback::Deny, |p| p.fallback) {
                Fallback::Allow => Ok(DirectGate::Run),
                Fallback::Park => refused(format!(
                    "tool \"{name}\" needs a person's approval, which this gateway takes in its console when the \
                     client cannot ask, and a direct call has no run to park until a person decides there; the call \
                     did not run. Retrying will not help: do without it, or tell the user the task needs it"
                )),
                Fallback::Deny => refused(format!(
                    "tool \"{name}\" needs a person's approval and nobody can be asked here (the client declared no \
                     elicitation), so the policy's fallback denied it; the call did not run. Retrying will not help: \
                     do without it, or tell the user the task needs it"
                )),
            },
        }
    }

    /// Whether this is the first answer to the sealed approval of direct call `call` and it has not expired; records
    /// it, and forgets the answers that expired.
    fn first_answer(&self, call: &approve::DirectCall) -> bool {
        let now = now_ms();
        if call.expires_ms <= now {
            return false;
        }
        let mut answered = self.answered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        answered.retain(|_, expires| *expires > now);
        answered.insert(call.nonce.clone(), call.expires_ms).is_none()
    }

    /// The MCP answer for a result: an input-required result when the run parked on approvals that this request's
    /// client answers by retrying, else the result itself.
    fn respond(
        &self,
        result: CodeModeResult,
        title: Option<String>,
        owner: Option<String>,
        approvals: &Channel,
    ) -> CallToolResponse {
        if let (Channel::InputRequired, CodeModeResult::Waiting(waiting)) = (approvals, &result)
            && !waiting.pending_approvals.is_empty()
        {
            let requests = approve::input_requests(&title, &waiting.pending_approvals);
            let calls = waiting.pending_approvals.iter().map(|p| p.call_id.clone()).collect();
            let state = self.seal.seal(&Pending { run_id: waiting.run_id.clone(), owner, title, calls, direct: None });
            return CallToolResponse::InputRequired(InputRequiredResult::new(Some(requests), Some(state)));
        }
        CallToolResponse::Complete(code_mode_result(&result, self.output_budget()))
    }

    /// Runs an `exec` or `wait` as a task's operation: the call, then, while its run is parked on pending tool calls
    /// with nothing for a person to answer, `wait` on it, until it completes, fails, yields or waits for approvals.
    /// Output of the intermediate steps is handed over with the final result. `tasks/cancel` aborts the run.
    async fn task(
        self: Arc<Self>,
        request: CallToolRequestParams,
        meta: rmcp::model::RequestMetaObject,
        scope: RunScope,
        approvals: Channel,
        cancel: Arc<tasks::Cancel>,
    ) -> Outcome {
        // The output items and content blocks (after the text) of the steps before the last.
        let (mut earlier, mut earlier_blocks) = (Vec::new(), Vec::new());
        let (mut request, mut meta) = (request, meta);
        loop {
            let response = self.call(request, &meta, scope.clone(), approvals.clone(), cancel.cancelled(), None).await;
            let response = match response {
                Ok(response) => response,
                Err(error) => return Outcome::Error(error),
            };
            if cancel.requested() {
                return Outcome::Cancelled;
            }
            let Some(value) = tasks::result_value(&response) else {
                // Not a CodeModeResult (an input-required answer cannot be a task's result): hand it over as is.
                return match response {
                    CallToolResponse::Complete(result) => Outcome::Result(result),
                    _ => Outcome::Error(ErrorData::internal_error("the task's call asked for input", None)),
                };
            };
            let parked = tasks::parked_on_tools(value).or_else(|| {
                // A run parked for the console: its wait holds until someone decides there.
                self.console
                    .as_ref()
                    .and(tasks::parked_on_approvals(value))
                    .filter(|_| !matches!(approvals, Channel::InputRequired))
            });
            match parked {
                // A `tasks/cancel` another replica recorded: this replica drives the run, so it aborts it.
                Some(run_id) if self.tasks.cancelled_elsewhere(cancel.id()).await => {
                    self.code_mode.abort(run_id).await;
                    return Outcome::Cancelled;
                }
                Some(run_id) => {
                    let mut step = value.clone();
                    codemode_mcp::content::shift_indexes(&mut step, earlier_blocks.len());
                    if let Some(Value::Array(items)) = step.get("output") {
                        earlier.extend(items.iter().cloned());
                    }
                    earlier_blocks.extend(blocks_after_text(&response));
                    request = tasks::wait_request(run_id);
                    // The exec's `_meta` (its idempotency key) is not the wait's.
                    meta = rmcp::model::RequestMetaObject::default();
                }
                None => {
                    let mut last = value.clone();
                    codemode_mcp::content::shift_indexes(&mut last, earlier_blocks.len());
                    let mut result = json_result(tasks::with_earlier_output(last, earlier));
                    result.content.extend(earlier_blocks);
                    result.content.extend(blocks_after_text(&response));
                    return Outcome::Result(result);
                }
            }
        }
    }

    /// The bytes of returned image and audio blocks one result may carry (`maxOutputBytes`).
    fn output_budget(&self) -> usize {
        usize::try_from(self.code_mode.limits().max_output_bytes).unwrap_or(usize::MAX)
    }

    fn tool_names(&self) -> String {
        self.surface().tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>().join(", ")
    }
}

/// How long a `wait` on a run parked for the console holds for a first decision before it answers `waiting` again.
const CONSOLE_ANSWER_HOLD: std::time::Duration = std::time::Duration::from_secs(20);

/// What the model reads in a result parked for the console.
const CONSOLE_NOTE: &str = "A person decides the pending approvals in this gateway's approval console, not through \
this client. Call wait with this runId: it returns once they have decided (or, after a while, waiting again).";

/// Bytes of arguments the approval question of a direct call shows, as for a program's call.
const APPROVAL_PREVIEW_BYTES: usize = 1024;

/// The system clock in epoch milliseconds, for the expiry of sealed direct-call approvals.
fn now_ms() -> u64 {
    use codemode::store::Clock as _;
    codemode::store::SystemClock.now_ms()
}

/// The `_meta` key of an `exec`'s idempotency key.
pub const IDEMPOTENCY_KEY: &str = "codemode/idempotencyKey";

/// The longest idempotency key accepted, in bytes.
const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// The request's idempotency key (`_meta["codemode/idempotencyKey"]`, in the request or its context), if any; an
/// error for one that is not a non-empty string of at most 256 bytes.
fn idempotency_key(
    request: &CallToolRequestParams,
    meta: &rmcp::model::RequestMetaObject,
) -> Option<Result<String, ErrorData>> {
    let value = meta.get(IDEMPOTENCY_KEY).or_else(|| request.meta.as_ref()?.get(IDEMPOTENCY_KEY))?;
    Some(match value.as_str() {
        Some(key) if !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_BYTES => Ok(key.to_owned()),
        _ => Err(ErrorData::invalid_params(
            format!(
                "_meta[\"{IDEMPOTENCY_KEY}\"] must be a non-empty string of at most {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
            ),
            None,
        )),
    })
}

/// A `CodeModeResult` as an MCP tool result: compact JSON text (wrapped as external untrusted content when the
/// program read what an MCP server sent), the raw value as `structuredContent`, and `isError` for a failed run; the program's attachments follow the text as content blocks.
pub fn code_mode_result(result: &CodeModeResult, budget: usize) -> CallToolResult {
    let mut value = serde_json::to_value(result).unwrap_or_else(|e| {
        serde_json::json!({ "status": "failed", "code": "internal_error", "error": format!("unencodable result: {e}") })
    });
    let mut attachments = codemode_mcp::content::take_attachments(&mut value, 1);
    let returned = codemode_mcp::content::take_returned(&mut value, 1 + attachments.len(), budget);
    attachments.extend(returned);
    let text = codemode_bridge::model_text_of(&value);
    let mut content = vec![ContentBlock::text(text)];
    content.extend(attachments);
    let mut out =
        if result.as_failed().is_some() { CallToolResult::error(content) } else { CallToolResult::success(content) };
    out.structured_content = Some(value);
    out
}

/// The content blocks of an `exec`/`wait` answer after its JSON text: its attachments.
fn blocks_after_text(response: &CallToolResponse) -> Vec<ContentBlock> {
    match response {
        CallToolResponse::Complete(result) => result.content.iter().skip(1).cloned().collect(),
        _ => Vec::new(),
    }
}

/// A `CodeModeResult` already in JSON as an MCP tool result, as [`code_mode_result`] makes it.
fn json_result(value: Value) -> CallToolResult {
    let text = codemode_bridge::model_text_of(&value);
    let mut out = if value.get("status").and_then(Value::as_str) == Some("failed") {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    out.structured_content = Some(value);
    out
}

/// One client session's view of the gateway.
#[derive(Clone, Debug)]
pub struct GatewayServer {
    gateway: Arc<Gateway>,
    /// The session id of a stdio session; HTTP sessions take theirs from the `Mcp-Session-Id` header.
    session: Option<String>,
    /// The lowest level of upstream log messages this session wants (`logging/setLevel`); all when unset.
    #[allow(deprecated)]
    log_level: Arc<std::sync::Mutex<Option<rmcp::model::LoggingLevel>>>,
    /// For an HTTP session whose runs end with it: ends them when the session's last handler drops.
    ends: Option<Arc<SessionEnd>>,
}

/// Ends the runs of an HTTP session without a principal when the session closes (the client's `DELETE`, or rmcp
/// dropping it): rmcp drops a session's handler, and with it the last clone of this, when the session ends.
#[derive(Debug)]
struct SessionEnd {
    gateway: Arc<Gateway>,
    /// The run scope's session id, known from the session's first request.
    session: std::sync::OnceLock<String>,
}

impl Drop for SessionEnd {
    fn drop(&mut self) {
        let (Some(session), Ok(runtime)) = (self.session.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let gateway = self.gateway.clone();
        runtime.spawn(async move {
            let _ = gateway.code_mode.end_session(&session).await;
        });
    }
}

impl GatewayServer {
    /// A session over stdio, with a fresh session id.
    pub fn stdio(gateway: Arc<Gateway>) -> Self {
        GatewayServer::new(gateway, Some(format!("stdio-{}", uuid::Uuid::new_v4())))
    }

    /// A session over stdio with the id the client gave (`--session`), so a later gateway process with the same id
    /// and state directory resumes its runs.
    pub fn stdio_session(gateway: Arc<Gateway>, session: &str) -> Self {
        GatewayServer::new(gateway, Some(format!("stdio-{session}")))
    }

    /// A handler for Streamable HTTP requests; the session id comes from each request. Without a fleet store, the
    /// runs of a session without a principal end when the session does.
    pub fn http(gateway: Arc<Gateway>) -> Self {
        let ends = gateway
            .runs_end_with_session
            .then(|| Arc::new(SessionEnd { gateway: gateway.clone(), session: std::sync::OnceLock::new() }));
        GatewayServer { ends, ..GatewayServer::new(gateway, None) }
    }

    fn new(gateway: Arc<Gateway>, session: Option<String>) -> Self {
        GatewayServer { gateway, session, log_level: Arc::default(), ends: None }
    }

    /// Forwards upstream log messages to this request's client until the returned guard drops (the call answered);
    /// none with `[auth]`: upstream connections are shared by every principal, so a message cannot be attributed.
    /// On the sessionless revision a request opts in with `_meta["io.modelcontextprotocol/logLevel"]` (none without
    /// it); with a session, `logging/setLevel` (or that key) sets the level, and all messages come without either.
    #[allow(deprecated)]
    fn forward_logs(&self, context: &RequestContext<RoleServer>, scope: &RunScope) -> Option<AbortOnDrop> {
        if scope.authenticated {
            return None;
        }
        let requested = context
            .meta
            .get(LOG_LEVEL_META)
            .and_then(|v| serde_json::from_value::<rmcp::model::LoggingLevel>(v.clone()).ok());
        let sessionless = context.protocol_version().is_some_and(|v| !v.has_initialize());
        let level = match requested {
            Some(level) => Some(level),
            None if sessionless => return None,
            None => *self.log_level.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        };
        let logs = self.gateway.upstream.relay().logs();
        Some(AbortOnDrop(tokio::spawn(forward_logs(context.peer.clone(), logs, level))))
    }

    /// The caller: the principal the auth front verified, else this stdio session or the request's MCP session.
    fn scope(&self, context: &RequestContext<RoleServer>) -> RunScope {
        let parts = context.extensions.get::<hyper::http::request::Parts>();
        if let Some(principal) = parts.and_then(|p| p.extensions.get::<Principal>()) {
            return RunScope { session_id: Some(principal.key.clone()), authenticated: true, ..RunScope::default() };
        }
        let session_id = self.session.clone().or_else(|| {
            let id = parts?.headers.get("mcp-session-id")?.to_str().ok()?;
            Some(format!("http-{id}"))
        });
        if let (Some(ends), Some(id)) = (&self.ends, &session_id) {
            ends.session.get_or_init(|| id.clone());
        }
        RunScope { session_id, ..RunScope::default() }
    }
}

/// The `_meta` key by which a request on the sessionless revision opts in to log messages, at or above its level.
const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether this request's client declared the tasks extension (in the request's `_meta` or at `initialize`).
fn wants_task(request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> bool {
    matches!(request.name.as_ref(), "exec" | "wait")
        && request.request_state.is_none()
        && context.client_capabilities().is_some_and(|caps| caps.supports_tasks())
}

impl ServerHandler for GatewayServer {
    // Logging is deprecated by SEP-2577, but clients on earlier revisions still receive upstream logs through it.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("codemode", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.gateway.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.gateway.surface().tools.iter().find(|t| t.name == name).cloned()
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        // Told when the visible tools change; sessions gone since are dropped.
        let mut clients = self.gateway.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        clients.retain(|peer| !peer.is_transport_closed());
        clients.push(context.peer);
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let scope = self.scope(&context);
        // While the call (or its task) runs, an upstream server's elicitation during one of its nested calls reaches
        // this client.
        let asker = codemode_mcp::relay::Asker::of(&context)
            .map(|asker| self.gateway.upstream.relay().register_asker(scope.session_id.clone(), asker));
        let approvals = self.gateway.channel(&context);
        if wants_task(&request, &context) {
            // Nobody can answer an input-required result inside a task: approvals then take the policy's fallback.
            let approvals = if matches!(approvals, Channel::InputRequired) { Channel::Nobody } else { approvals };
            let (gateway, meta, owner) = (self.gateway.clone(), context.meta.clone(), scope.session_id.clone());
            let task = self
                .gateway
                .tasks
                .spawn(owner, context.peer.clone(), move |cancel| {
                    let operation = gateway.task(request, meta, scope, approvals, cancel);
                    async move {
                        let _asker = asker;
                        operation.await
                    }
                })
                .await?;
            return Ok(CallToolResponse::Task(rmcp::model::CreateTaskResult::new(task)));
        }
        let _logs = self.forward_logs(&context, &scope);
        let progress = context
            .meta
            .get_progress_token()
            .filter(|_| matches!(request.name.as_ref(), "exec" | "wait"))
            .map(|token| ClientProgress::start(context.peer.clone(), token));
        let cancelled = context.ct.clone().cancelled_owned();
        let transport = if self.session.is_some() { "pipe" } else { "tcp" };
        let span = server_span(&self.gateway, &request, &context, scope.session_id.as_deref(), transport);
        let started = (!span.is_disabled()).then(std::time::Instant::now);
        let name = started.map(|_| self.gateway.traced_tool_name(&request.name).to_owned());
        let response = self.gateway.call(request, &context.meta, scope, approvals, cancelled, progress.clone());
        let response = span.instrument(response).await;
        // Every progress notification goes out before the answer; none after it.
        if let Some(progress) = progress {
            progress.finish().await;
        }
        if let (Some(name), Some(started)) = (name, started) {
            server_span_end(&span, &name, started, &response, self.gateway.upstream.redactor());
        }
        response
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.log_level.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(request.level);
        Ok(())
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        let owner = self.scope(&context).session_id;
        Ok(rmcp::model::GetTaskResult::new(self.gateway.tasks.get(&request.task_id, &owner).await?))
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let owner = self.scope(&context).session_id;
        self.gateway.tasks.cancel(&request.task_id, &owner).await
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let owner = self.scope(&context).session_id;
        self.gateway.tasks.get(&request.task_id, &owner).await?;
        Err(ErrorData::invalid_params(
            "the gateway's tasks never ask for input (inputRequests): approvals inside a task take the policy's \
             fallback, or end the task with a waiting result whose pendingApprovals a wait answers",
            None,
        ))
    }
}

/// The SERVER span of one `tools/call` from the client (MCP semantic conventions), continuing the client's trace
/// when the request's `_meta` carries a W3C `traceparent`. Its attributes are built only when spans are recorded.
/// What the client chose is bounded: a tool this gateway does not offer is named [`otel::OTHER`], and the session
/// and request ids are cut to [`otel::MAX_ATTRIBUTE_BYTES`].
///
/// [`otel::OTHER`]: codemode_telemetry::otel::OTHER
/// [`otel::MAX_ATTRIBUTE_BYTES`]: codemode_telemetry::otel::MAX_ATTRIBUTE_BYTES
fn server_span(
    gateway: &Gateway,
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    session: Option<&str>,
    transport: &'static str,
) -> Span {
    use codemode_telemetry::otel::{self, attr};
    if !codemode_telemetry::span::enabled() {
        return Span::none();
    }
    // rmcp moves the request's `_meta` into the context; a hand-built request may still carry it in params.
    let meta = request.meta.as_ref().filter(|m| m.get_traceparent().is_some()).unwrap_or(&context.meta);
    let parent = codemode_telemetry::otlp::remote_parent(meta.get_traceparent(), meta.get_tracestate());
    codemode_telemetry::span::start(Parent::Remote(parent), || {
        let name = gateway.traced_tool_name(request.name.as_ref());
        let mut attributes = vec![
            KeyValue::new(attr::MCP_METHOD_NAME, otel::TOOLS_CALL),
            KeyValue::new(attr::GEN_AI_OPERATION_NAME, otel::EXECUTE_TOOL),
            KeyValue::new(attr::GEN_AI_TOOL_NAME, name.to_owned()),
            KeyValue::new(attr::JSONRPC_REQUEST_ID, otel::client_attribute(&context.id.to_string()).to_owned()),
            KeyValue::new(attr::NETWORK_TRANSPORT, transport),
        ];
        if let Some(session) = session {
            attributes.push(KeyValue::new(attr::MCP_SESSION_ID, otel::client_attribute(session).to_owned()));
        }
        Start { name: otel::tools_call_name(name).into(), kind: SpanKind::Server, attributes }
    })
}

/// Ends a SERVER span: an error span for a JSON-RPC error and for a result with `isError: true` (for a failed run,
/// `error.type` is its code and the message its error); and records the request's duration.
fn server_span_end(
    span: &Span,
    tool: &str,
    started: std::time::Instant,
    response: &Result<CallToolResponse, ErrorData>,
    redactor: &codemode::Redactor,
) {
    let failure = match response {
        Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
            let field = |key: &str| {
                result.structured_content.as_ref().and_then(|v| v.get(key)).and_then(Value::as_str).map(str::to_owned)
            };
            let text = result.content.iter().find_map(|c| c.as_text().map(|t| t.text.clone()));
            Some((
                field("code").unwrap_or_else(|| "tool_error".to_owned()),
                field("error").or(text).unwrap_or_else(|| "the tool reported an error (isError)".to_owned()),
            ))
        }
        Ok(_) => None,
        Err(e) => Some((e.code.0.to_string(), e.message.to_string())),
    };
    if let Some((kind, message)) = &failure {
        span.error(kind, message, redactor);
    }
    let error_type = failure.as_ref().map(|(kind, _)| kind.as_str());
    codemode_telemetry::otel::record_mcp_server(tool, error_type, started.elapsed().as_secs_f64());
}

/// Serves one client over stdin/stdout until it disconnects. `session` is the client's session id (`--session`);
/// a fresh one when `None`.
///
/// # Errors
///
/// [`Error::Serve`] when the MCP handshake on stdio fails.
pub async fn serve_stdio(gateway: Arc<Gateway>, session: Option<String>) -> Result<(), Error> {
    // A session with a fresh id ends with its client (stdin's end): nothing can ever resume its runs. One with an
    // id the client gave is resumed by a later process by design.
    let ends = session.is_none() && gateway.runs_end_with_session;
    let server = match session {
        Some(session) => GatewayServer::stdio_session(gateway.clone(), &session),
        None => GatewayServer::stdio(gateway.clone()),
    };
    let id = server.session.clone().unwrap_or_default();
    let running = server
        .serve(crate::stdio::transport(tokio::io::stdin(), tokio::io::stdout()))
        .await
        .map_err(|e| Error::Serve(format!("stdio handshake failed: {e}")))?;
    let served = running.waiting().await.map_err(|e| Error::Serve(e.to_string()));
    if ends {
        let _ = gateway.code_mode.end_session(&id).await;
    }
    served.map(|_| ())
}

/// Serves Streamable HTTP until the process is stopped; behind `front` when `[auth]` is configured.
///
/// # Errors
///
/// [`Error::Serve`] when the address cannot be bound.
pub async fn serve_http(gateway: Arc<Gateway>, addr: SocketAddr, front: Option<Arc<AuthFront>>) -> Result<(), Error> {
    let mut config = StreamableHttpServerConfig::default();
    if front.is_some() {
        // rmcp accepts loopback `Host` headers only, against DNS rebinding: a page that makes a browser send
        // ambient credentials to a local server. A bearer token is never ambient, so with `[auth]` any host name
        // the gateway is reached by is served.
        config = config.disable_allowed_hosts();
    }
    // With `[auth]`, the front's registry holds the sessions: a bounded number per principal, closed when idle.
    let sessions = match &front {
        Some(front) => front.sessions().manager(),
        None => Arc::new(LocalSessionManager::default()),
    };
    let service = StreamableHttpService::new(move || Ok(GatewayServer::http(gateway.clone())), sessions, config);
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| Error::Serve(format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr().map_err(|e| Error::Serve(e.to_string()))?;
    eprintln!("codemode gateway: serving Streamable HTTP at http://{local}/mcp");
    loop {
        let (stream, _) = listener.accept().await.map_err(|e| Error::Serve(format!("accept failed: {e}")))?;
        let service = service.clone();
        let front = front.clone();
        let handler = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let service = service.clone();
            let front = front.clone();
            async move {
                let response = match front {
                    Some(front) => front.serve(request, |request| async move { service.handle(request).await }).await,
                    None => service.handle(request).await,
                };
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            // A broken connection only ends that connection.
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, handler).await;
        });
    }
}
