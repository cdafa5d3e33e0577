//! The upstream side of the gateway: one rmcp client per configured MCP server, and the `ToolHost` over them.
//!
//! This module owns processes and connections, not policy: naming, declarations and budgets belong to the catalog
//! and the facade. Invariant: an upstream failure never escapes as anything but a `ToolError` for the one call it
//! hit; a connection found dead is replaced on the next call, so the gateway outlives every upstream server.
//!
//! Tool lists are read at gateway start, for every server (the surface and the `.d.ts` files need them), and again
//! when a server says they changed (`notifications/tools/list_changed`) or is (re)started later: a change is
//! reported through the [`Relay`] so the gateway rebuilds its catalog. A `lazy` server is stopped right after the
//! start-up listing and started again by the first call that needs it. Each connection's handler is the relay's
//! [`UpstreamHandler`]: elicitation and sampling relayed, list changes reported, a call's progress (on the token rmcp
//! puts on every request) routed to the nested call's progress sink, log messages broadcast to the client calls in
//! flight. A stdio server starts with a cleared environment plus the default set, its `inherit_env` and its `env`
//! ([`inherited_env`]): the gateway's secrets never reach it.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use codemode_bridge::{CallContext, ToolError, ToolHost};
use codemode_catalog::ToolDefinition;
use codemode_telemetry::span::{KeyValue, Parent, Span, SpanKind, Start};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, GetPromptRequestParams, PaginatedRequestParams, ReadResourceRequestParams,
    Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Mutex;

use crate::ConfigError;
use crate::config::{ServerConfig, Startup, Transport, inherited_env};
use crate::relay::{Relay, Sampling, UpstreamHandler};

/// How long an upstream server may take to start and answer `initialize`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long listing a server's tools at gateway start may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

type Client = RunningService<RoleClient, UpstreamHandler>;

struct Connection {
    client: Client,
    /// Bumped on every (re)connect, so a failed call only invalidates the connection it used.
    generation: u64,
    pid: Option<u32>,
    /// The MCP session of a Streamable HTTP connection, as its requests carry it; `None` for stdio.
    session: Option<SessionSlot>,
}

struct Upstream {
    name: String,
    config: ServerConfig,
    /// The server's tools minus the denied ones, as last listed.
    tools: std::sync::RwLock<Vec<Tool>>,
    conn: Mutex<Option<Connection>>,
    generation: AtomicU64,
    /// Where the connection's requests and notifications go.
    relay: Arc<Relay>,
}

/// Every configured upstream MCP server, by name; the gateway's [`ToolHost`].
pub struct UpstreamManager {
    servers: BTreeMap<String, Arc<Upstream>>,
    /// Servers that failed at start, with the reason; they offer no tools.
    unavailable: BTreeMap<String, String>,
    /// What is redacted in everything recorded for people (the spans' error messages).
    redactor: codemode_telemetry::Redactor,
    /// Routes what upstream servers ask of the gateway; shared by every connection's handler.
    relay: Arc<Relay>,
    /// The servers whose tools changed, until the gateway takes the receiver.
    changed: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
}

impl std::fmt::Debug for UpstreamManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamManager")
            .field("servers", &self.servers.keys().collect::<Vec<_>>())
            .field("unavailable", &self.unavailable)
            .finish()
    }
}

impl UpstreamManager {
    /// Starts every server of `servers`, lists its tools, checks `deny`/`direct` against them, and stops the `lazy`
    /// ones again. `sampling` is what a server's `sampling/createMessage` gets; `redactor` masks what the spans
    /// record.
    ///
    /// A server that cannot be started or listed is reported on stderr and left out (its tools are absent), so one
    /// broken server does not take the others down.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when `deny` or `direct` names a tool the server does not have.
    pub async fn start(
        servers: &BTreeMap<String, ServerConfig>,
        sampling: Sampling,
        redactor: codemode_telemetry::Redactor,
    ) -> Result<UpstreamManager, ConfigError> {
        crate::install_tls_provider();
        let (relay, changed) = Relay::new(sampling);
        let configured = servers;
        let started = futures::future::join_all(
            configured.iter().map(|(name, server)| start_one(name.clone(), server.clone(), relay.clone())),
        )
        .await;
        let mut servers = BTreeMap::new();
        let mut unavailable = BTreeMap::new();
        for ((name, server), result) in configured.iter().zip(started) {
            match result {
                Ok((upstream, all_names)) => {
                    for (list, key) in [(&server.deny, "deny"), (&server.direct, "direct")] {
                        if let Some(missing) = list.iter().find(|t| !all_names.contains(t)) {
                            return Err(ConfigError {
                                key: format!("servers.{name}.{key}"),
                                problem: format!("names \"{missing}\", which server \"{name}\" does not offer"),
                                fix: format!("use one of its tools: {}", all_names.join(", ")),
                            });
                        }
                    }
                    servers.insert(name.clone(), Arc::new(upstream));
                }
                Err(reason) => {
                    eprintln!("codemode gateway: MCP server \"{name}\" is unavailable and offers no tools: {reason}");
                    unavailable.insert(name.clone(), reason);
                }
            }
        }
        let changed = std::sync::Mutex::new(Some(changed));
        Ok(UpstreamManager { servers, unavailable, redactor, relay, changed })
    }

    /// What upstream servers' requests and notifications are routed by: the gateway registers each `exec`/`wait`'s
    /// asker there, and reads the servers' log messages from it.
    pub fn relay(&self) -> &Arc<Relay> {
        &self.relay
    }

    /// The receiver of the names of servers whose tools changed; `None` after the first call.
    pub fn take_changes(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<String>> {
        self.changed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    /// Lists `server`'s tools again (after its `tools/list_changed`) and keeps them; whether they differ from the
    /// tools it had. A server that is not running is left alone.
    ///
    /// # Errors
    ///
    /// An unknown server, or a listing that fails.
    pub async fn refresh(&self, server: &str) -> Result<bool, ToolError> {
        let up = self.upstream(server)?;
        // A server that is not running (a lazy one, or one that stopped) is listed again when it starts.
        let Some((peer, generation)) = up.live_peer().await else { return Ok(false) };
        match tokio::time::timeout(LIST_TIMEOUT, peer.list_all_tools()).await {
            Ok(Ok(listed)) => Ok(up.keep_tools(listed)),
            Ok(Err(e)) => Err(up.failure(e, generation, "listing its tools").await),
            Err(_) => Err(ToolError::new(format!(
                "MCP server \"{server}\" took longer than {}s to list its tools",
                LIST_TIMEOUT.as_secs()
            ))),
        }
    }

    /// The tools of every available server as catalog definitions (`source: mcp`), denied tools left out.
    pub fn tool_definitions(&self) -> Vec<ToolDefinition> {
        let mut out = Vec::new();
        for up in self.servers.values() {
            for tool in up.tools.read().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
                let value = json!({
                    "name": tool.name,
                    "title": tool.title.clone().or_else(|| tool.annotations.as_ref().and_then(|a| a.title.clone())),
                    "description": tool.description.as_deref().unwrap_or_default(),
                    "parameters": Value::Object((*tool.input_schema).clone()),
                    "outputSchema": tool.output_schema.as_ref().map(|s| Value::Object((**s).clone())),
                    "source": "mcp",
                    "server": up.name,
                    "directOnly": up.config.direct.iter().any(|d| *d == tool.name),
                    "readOnlyHint": tool.annotations.as_ref().and_then(|a| a.read_only_hint).unwrap_or(false),
                });
                match serde_json::from_value(value) {
                    Ok(def) => out.push(def),
                    Err(e) => eprintln!("codemode gateway: skipping tool \"{}\" of \"{}\": {e}", tool.name, up.name),
                }
            }
        }
        out
    }

    /// The servers that failed at start, with why.
    pub fn unavailable(&self) -> &BTreeMap<String, String> {
        &self.unavailable
    }

    /// The process id of a stdio server's current process, if it is running.
    pub async fn pid(&self, server: &str) -> Option<u32> {
        let up = self.servers.get(server)?;
        let guard = up.conn.lock().await;
        guard.as_ref().filter(|c| !c.client.is_transport_closed()).and_then(|c| c.pid)
    }

    /// How many times a server was (re)started after the gateway's start-up listing.
    pub fn restarts(&self, server: &str) -> u64 {
        self.servers.get(server).map_or(0, |up| up.generation.load(Ordering::SeqCst).saturating_sub(1))
    }

    /// Calls an upstream tool and returns the MCP result unchanged (for direct-only tools).
    ///
    /// # Errors
    ///
    /// A [`ToolError`] saying what failed: unknown server or tool, a server that cannot start, a transport that
    /// closed during the call (the server is restarted on the next call), or the server's own JSON-RPC error.
    pub async fn call(&self, server: &str, tool: &str, args: Value) -> Result<CallToolResult, ToolError> {
        self.call_reporting(server, tool, args, None, &Span::none()).await
    }

    /// [`call`](Self::call), with the server's progress for the call (its `notifications/progress` on the request's
    /// progress token) reported to `progress`, and the call's CLIENT span under `parent` (under the current span
    /// when `parent` is disabled).
    ///
    /// # Errors
    ///
    /// As [`call`](Self::call).
    pub async fn call_reporting(
        &self,
        server: &str,
        tool: &str,
        args: Value,
        progress: Option<codemode_bridge::ProgressSink>,
        parent: &Span,
    ) -> Result<CallToolResult, ToolError> {
        let up = self.upstream(server)?;
        if !up.has_tool(tool) {
            return Err(ToolError::with_code(
                "invalid_input",
                format!("MCP server \"{server}\" has no tool \"{tool}\" (or it is denied by the gateway's config)"),
            ));
        }
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(ToolError::with_code(
                    "invalid_input",
                    format!("MCP tool \"{server}.{tool}\" takes one object argument, not {}", type_name(&other)),
                ));
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = arguments;
        let transport = match up.config.transport {
            Transport::Stdio { .. } => "pipe",
            Transport::Http { .. } => "tcp",
        };
        let span = client_span(parent, server, tool, transport);
        let started = (!span.is_disabled()).then(std::time::Instant::now);
        // The upstream server continues this call's trace: the CLIENT span's context goes in `params._meta`.
        if let Some((traceparent, tracestate)) = codemode_telemetry::otlp::trace_headers(&span) {
            let meta = params.meta.get_or_insert_with(Default::default);
            meta.set_traceparent(traceparent);
            if let Some(state) = tracestate {
                meta.set_tracestate(state);
            }
        }
        let called = async {
            let (peer, generation, session) = up.peer().await?;
            let progress = progress.map(|sink| (&up.relay, server, sink));
            let sent = send_call(&peer, params, &span, progress).await;
            // The connection's session once the request was answered (a session rmcp renewed meanwhile is the
            // one named).
            if let Some(id) = session.as_ref().and_then(SessionSlot::current)
                && !span.is_disabled()
            {
                span.set(codemode_telemetry::otel::attr::MCP_SESSION_ID, id.to_string());
            }
            match sent {
                Ok(result) => Ok(result),
                Err(e) => Err(up.failure(e, generation, &format!("the call to \"{tool}\"")).await),
            }
        }
        .await;
        client_span_end(&span, tool, started, &called, &self.redactor);
        called
    }

    /// What the gateway redacts in everything recorded for people: the engine's records and the spans.
    pub fn redactor(&self) -> &codemode_telemetry::Redactor {
        &self.redactor
    }

    /// Closes every connection and stops every upstream process.
    pub async fn shutdown(&self) {
        for up in self.servers.values() {
            if let Some(mut conn) = up.conn.lock().await.take() {
                let _ = conn.client.close_with_timeout(Duration::from_secs(5)).await;
            }
        }
    }

    fn upstream(&self, server: &str) -> Result<&Arc<Upstream>, ToolError> {
        self.servers.get(server).ok_or_else(|| match self.unavailable.get(server) {
            Some(reason) => ToolError::new(format!("MCP server \"{server}\" is unavailable: {reason}")),
            None => ToolError::with_code("invalid_input", format!("there is no MCP server \"{server}\"")),
        })
    }

    async fn namespace_op(&self, server: &str, op: &str, args: Value) -> Result<Value, ToolError> {
        let up = self.upstream(server)?;
        let bad_args = |e: serde_json::Error| {
            ToolError::with_code("invalid_input", format!("MCP.{server}.{op}: invalid arguments: {e}"))
        };
        let args = if args.is_null() { json!({}) } else { args };
        let (peer, generation, _) = up.peer().await?;
        let result = match op {
            "resources.list" => {
                let params: PaginatedRequestParams = serde_json::from_value(args).map_err(bad_args)?;
                peer.list_resources(Some(params)).await.map(serde_json::to_value)
            }
            "resources.read" => {
                let params: ReadResourceRequestParams = serde_json::from_value(args).map_err(bad_args)?;
                peer.read_resource(params).await.map(serde_json::to_value)
            }
            "prompts.list" => {
                let params: PaginatedRequestParams = serde_json::from_value(args).map_err(bad_args)?;
                peer.list_prompts(Some(params)).await.map(serde_json::to_value)
            }
            "prompts.get" => {
                let params: GetPromptRequestParams = serde_json::from_value(args).map_err(bad_args)?;
                peer.get_prompt(params).await.map(serde_json::to_value)
            }
            _ => {
                return Err(ToolError::with_code(
                    "invalid_input",
                    format!("MCP.{server} has no operation \"{op}\"; use resources.list/read or prompts.list/get"),
                ));
            }
        };
        match result {
            Ok(Ok(value)) => Ok(strip_protocol_fields(value)),
            Ok(Err(e)) => Err(ToolError::new(format!("MCP server \"{server}\" sent an unreadable {op} result: {e}"))),
            Err(e) => Err(up.failure(e, generation, op).await),
        }
    }
}

#[async_trait]
impl ToolHost for UpstreamManager {
    async fn call_tool(&self, tool: &str, args: Value, cx: CallContext) -> Result<Value, ToolError> {
        let Some(server) = cx.server.as_deref() else {
            return Err(ToolError::with_code(
                "invalid_input",
                format!("the gateway only runs MCP tools, and \"{tool}\" names no MCP server"),
            ));
        };
        // While it runs, an elicitation of its server reaches the person behind its run and pauses the deadline.
        let _in_flight = self.relay.register_call(server, cx.session_id.clone(), cx.pause.clone(), cx.abort.clone());
        let result = self.call_reporting(server, tool, args, Some(cx.progress), &cx.span).await?;
        let mut value = guest_call_result(&result);
        // Large image and audio bytes stay here; the program gets a handle to `attach`.
        crate::content::hand_off(&mut value);
        Ok(value)
    }

    async fn namespace(&self, server: &str, op: &str, args: Value, cx: CallContext) -> Result<Value, ToolError> {
        let _ = cx;
        self.namespace_op(server, op, args).await
    }
}

/// The CLIENT span of one `tools/call` to an upstream server (MCP semantic conventions), under `parent` (the nested
/// call's span). Its attributes are built only when spans are recorded.
fn client_span(parent: &Span, server: &str, tool: &str, transport: &'static str) -> Span {
    use codemode_telemetry::otel::{self, attr};
    codemode_telemetry::span::start(Parent::Span(parent), || Start {
        name: otel::tools_call_name(tool).into(),
        kind: SpanKind::Client,
        attributes: vec![
            KeyValue::new(attr::MCP_METHOD_NAME, otel::TOOLS_CALL),
            KeyValue::new(attr::GEN_AI_OPERATION_NAME, otel::EXECUTE_TOOL),
            KeyValue::new(attr::GEN_AI_TOOL_NAME, tool.to_owned()),
            KeyValue::new(attr::SERVER, server.to_owned()),
            KeyValue::new(attr::NETWORK_TRANSPORT, transport),
        ],
    })
}

/// Sends one `tools/call` and waits for its answer, recording the JSON-RPC request id on `span`; with `progress`,
/// the server's progress notifications on the request's token go to the call's sink until it answers. Dropping the
/// future before the answer sends `notifications/cancelled` for the request, as rmcp's own `call_tool` does.
async fn send_call(
    peer: &rmcp::Peer<RoleClient>,
    params: CallToolRequestParams,
    span: &Span,
    progress: Option<(&Arc<Relay>, &str, codemode_bridge::ProgressSink)>,
) -> Result<CallToolResult, ServiceError> {
    struct CancelOnDrop<'a>(&'a rmcp::Peer<RoleClient>, Option<rmcp::model::RequestId>);
    impl Drop for CancelOnDrop<'_> {
        fn drop(&mut self) {
            if let Some(id) = self.1.take()
                && let Ok(runtime) = tokio::runtime::Handle::try_current()
            {
                let peer = self.0.clone();
                let reason = Some("request abandoned by the caller".to_owned());
                let param = rmcp::model::CancelledNotificationParam::new(Some(id), reason);
                runtime.spawn(async move {
                    let _ = peer.notify_cancelled(param).await;
                });
            }
        }
    }
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
    let handle = peer.send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options()).await?;
    if !span.is_disabled() {
        span.set(codemode_telemetry::otel::attr::JSONRPC_REQUEST_ID, handle.id.to_string());
    }
    let tracked = progress.map(|(relay, server, sink)| relay.track(server, handle.progress_token.clone(), sink));
    let mut guard = CancelOnDrop(peer, Some(handle.id.clone()));
    let answer = handle.await_response().await;
    guard.1 = None;
    if let Some(tracked) = tracked {
        // rmcp hands notifications to their handler in tasks of their own, so a server's last progress report, sent
        // just before its answer, may be handled after the answer arrived: the call's token is routed a few
        // scheduler turns longer.
        tokio::spawn(async move {
            for _ in 0..16 {
                tokio::task::yield_now().await;
            }
            drop(tracked);
        });
    }
    match answer? {
        rmcp::model::ServerResult::CallToolResult(result) => Ok(result),
        // A result with no fields at all: a tool that returned nothing.
        rmcp::model::ServerResult::EmptyResult(_) => Ok(CallToolResult::success(Vec::new())),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Ends a CLIENT span: an error span for a failed request and for a result with `isError: true` (`tool_error`),
/// with the redacted message; and records the request's duration.
fn client_span_end(
    span: &Span,
    tool: &str,
    started: Option<std::time::Instant>,
    called: &Result<CallToolResult, ToolError>,
    redactor: &codemode_telemetry::Redactor,
) {
    let Some(started) = started else { return };
    let failure = match called {
        Ok(result) if result.is_error == Some(true) => {
            let text = result.content.iter().find_map(|c| c.as_text().map(|t| t.text.clone()));
            Some(("tool_error".to_owned(), text.unwrap_or_else(|| "the tool reported an error (isError)".into())))
        }
        Ok(_) => None,
        Err(e) => Some((e.code.as_str().to_owned(), e.message.clone())),
    };
    if let Some((kind, message)) = &failure {
        span.error(kind, message, redactor);
    }
    let error_type = failure.as_ref().map(|(kind, _)| kind.as_str());
    codemode_telemetry::otel::record_mcp_client(tool, error_type, started.elapsed().as_secs_f64());
}

/// An MCP tool result as the guest sees it: content blocks (with their annotations and block `_meta`),
/// `structuredContent` and `isError` when present; the top-level `_meta` and protocol fields never enter the guest.
/// An `isError: true` result is a value, not a failure: the program inspects it.
pub fn guest_call_result(result: &CallToolResult) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("content".into(), serde_json::to_value(&result.content).unwrap_or_else(|_| json!([])));
    if let Some(structured) = &result.structured_content {
        out.insert("structuredContent".into(), structured.clone());
    }
    if let Some(is_error) = result.is_error {
        out.insert("isError".into(), Value::Bool(is_error));
    }
    Value::Object(out)
}

/// Drops the fields of a list/read/get result that describe the protocol exchange, not the data.
fn strip_protocol_fields(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        for key in ["_meta", "resultType", "ttlMs", "cacheScope"] {
            map.remove(key);
        }
    }
    value
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Upstream {
    /// Whether the server offers `tool` (not denied), as last listed.
    fn has_tool(&self, tool: &str) -> bool {
        self.tools.read().unwrap_or_else(std::sync::PoisonError::into_inner).iter().any(|t| t.name == tool)
    }

    /// Keeps a new listing (denied tools left out); whether it differs from the tools the server had.
    fn keep_tools(&self, listed: Vec<Tool>) -> bool {
        let tools: Vec<Tool> = listed.into_iter().filter(|t| !self.config.deny.iter().any(|d| *d == t.name)).collect();
        let mut kept = self.tools.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let same = serde_json::to_value(&*kept).ok() == serde_json::to_value(&tools).ok();
        *kept = tools;
        !same
    }

    /// A handle on the live connection, if there is one; nothing is started.
    async fn live_peer(&self) -> Option<(rmcp::Peer<RoleClient>, u64)> {
        let guard = self.conn.lock().await;
        let conn = guard.as_ref().filter(|c| !c.client.is_transport_closed())?;
        Some((conn.client.peer().clone(), conn.generation))
    }

    /// A handle on a live connection, (re)starting the server when there is none or it died, with the
    /// connection's generation and its MCP session (Streamable HTTP only).
    async fn peer(&self) -> Result<(rmcp::Peer<RoleClient>, u64, Option<SessionSlot>), ToolError> {
        let mut guard = self.conn.lock().await;
        if let Some(conn) = guard.as_ref()
            && !conn.client.is_transport_closed()
        {
            return Ok((conn.client.peer().clone(), conn.generation, conn.session.clone()));
        }
        let restarting = guard.take().is_some();
        let (client, pid, session) = connect(&self.name, &self.config, &self.relay).await.map_err(|reason| {
            let what = if restarting { "restarted after it stopped" } else { "started" };
            ToolError::new(format!("MCP server \"{}\" could not be {what}: {reason}", self.name))
        })?;
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let peer = client.peer().clone();
        // A server started again may offer other tools: its list is read again, and a change rebuilds the catalog.
        if let Ok(Ok(listed)) = tokio::time::timeout(LIST_TIMEOUT, peer.list_all_tools()).await
            && self.keep_tools(listed)
        {
            self.relay.tools_changed(&self.name);
        }
        *guard = Some(Connection { client, generation, pid, session: session.clone() });
        Ok((peer, generation, session))
    }

    /// Turns a failed request into the guest's error, dropping the connection when its transport is gone.
    async fn failure(&self, error: ServiceError, generation: u64, what: &str) -> ToolError {
        let name = &self.name;
        match error {
            ServiceError::McpError(e) => ToolError::new(format!("MCP server \"{name}\" failed {what}: {}", e.message)),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                let mut guard = self.conn.lock().await;
                if guard.as_ref().is_some_and(|c| c.generation == generation) {
                    // Dropping the client cancels its loop and kills the child process if it still runs.
                    guard.take();
                }
                ToolError::new(format!(
                    "MCP server \"{name}\" stopped during {what} (its connection closed); whether the call had any \
                     effect is unknown. The gateway starts the server again on the next call."
                ))
            }
            other => ToolError::new(format!("MCP server \"{name}\" failed {what}: {other}")),
        }
    }
}

/// Starts a server, lists its tools and, for a lazy one, stops it again.
/// Returns the upstream and the names of all its tools (denied ones included, for checking the config).
async fn start_one(name: String, config: ServerConfig, relay: Arc<Relay>) -> Result<(Upstream, Vec<String>), String> {
    let (client, pid, session) = connect(&name, &config, &relay).await?;
    let listed = match tokio::time::timeout(LIST_TIMEOUT, client.peer().list_all_tools()).await {
        Ok(Ok(tools)) => tools,
        Ok(Err(e)) => return Err(format!("listing its tools failed: {e}")),
        Err(_) => return Err(format!("listing its tools took longer than {}s", LIST_TIMEOUT.as_secs())),
    };
    let all_names: Vec<String> = listed.iter().map(|t| t.name.to_string()).collect();
    let tools = listed.into_iter().filter(|t| !config.deny.iter().any(|d| *d == t.name)).collect();
    let conn = match config.startup {
        Startup::Eager => Some(Connection { client, generation: 1, pid, session }),
        Startup::Lazy => {
            let mut client = client;
            tokio::spawn(async move {
                let _ = client.close_with_timeout(Duration::from_secs(5)).await;
            });
            None
        }
    };
    let generation = AtomicU64::new(u64::from(conn.is_some()));
    let tools = std::sync::RwLock::new(tools);
    Ok((Upstream { name, config, tools, conn: Mutex::new(conn), generation, relay }, all_names))
}

/// Opens one connection: spawns the child process (stdio) or connects to the URL, and runs `initialize`. The
/// connection's requests and notifications go to `relay`. Returns the client, a stdio server's process id, and a
/// Streamable HTTP connection's session.
async fn connect(
    name: &str,
    config: &ServerConfig,
    relay: &Arc<Relay>,
) -> Result<(Client, Option<u32>, Option<SessionSlot>), String> {
    let handler = UpstreamHandler::new(name, relay.clone());
    let connecting = async {
        match &config.transport {
            Transport::Stdio { command, args, env, inherit_env } => {
                // A clean environment: the default set and what `inherit_env` names, never the gateway's secrets,
                // then the server's own `env`. `command` is looked up on the `PATH` passed on.
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args)
                    .env_clear()
                    .envs(inherited_env(std::env::vars_os(), inherit_env))
                    .envs(env)
                    .kill_on_drop(true);
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot run `{command}`: {e}"))?;
                let pid = transport.id();
                if let Some(stderr) = stderr {
                    forward_stderr(name.to_owned(), stderr);
                }
                let client = handler
                    .serve(transport)
                    .await
                    .map_err(|e| format!("`{command}` did not complete the MCP handshake: {e}"))?;
                Ok((client, pid, None))
            }
            Transport::Http { url } => {
                let http = SessionClient::new().map_err(|e| format!("cannot build the HTTP client for {url}: {e}"))?;
                let session = http.session.clone();
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                let transport = StreamableHttpClientTransport::with_client(http, config);
                let client = handler.serve(transport).await.map_err(|e| format!("cannot connect to {url}: {e}"))?;
                Ok((client, None, Some(session)))
            }
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(result) => result,
        Err(_) => Err(format!("it did not answer the MCP handshake within {}s", CONNECT_TIMEOUT.as_secs())),
    }
}

/// Copies an upstream server's stderr to ours, one line at a time, prefixed with its name.
fn forward_stderr(name: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[{name}] {line}");
        }
    });
}

/// The MCP session a Streamable HTTP connection runs in, shared by the connection's [`SessionClient`] (which writes
/// it as requests go out) and the calls made on it (which put it on their CLIENT span as `mcp.session.id`).
#[derive(Clone, Debug, Default)]
struct SessionSlot(Arc<std::sync::RwLock<Option<Arc<str>>>>);

impl SessionSlot {
    /// The session id the connection's last request carried, or the server assigned last; `None` before
    /// `initialize` was answered, and for a server that keeps no sessions.
    fn current(&self) -> Option<Arc<str>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn set(&self, id: &str) {
        let mut slot = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.as_deref() != Some(id) {
            *slot = Some(Arc::from(id));
        }
    }
}

/// rmcp's Streamable HTTP client (reqwest), recording the connection's session: the `Mcp-Session-Id` a server
/// assigns in its answer to `initialize` (again after it dropped a session and rmcp initialized a new one), and the
/// one each POST carries. Every request is reqwest's own, limits included; rmcp does not expose the session id.
#[derive(Clone)]
struct SessionClient {
    http: reqwest::Client,
    session: SessionSlot,
}

impl SessionClient {
    /// A client set up as rmcp's default one (`StreamableHttpClientTransport::from_uri`): no idle connection pool
    /// (rmcp's note: a reused connection whose last response was not read to the end stalls ~40 ms on delayed
    /// ACKs), and redirects followed only when they keep the method, the body and the origin (307, 308; at most 10).
    fn new() -> Result<SessionClient, reqwest::Error> {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let keeps_body = matches!(
                attempt.status(),
                reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
            );
            let same_origin =
                attempt.previous().first().is_some_and(|original| original.origin() == attempt.url().origin());
            if !keeps_body || !same_origin {
                attempt.stop()
            } else if attempt.previous().len() > 10 {
                attempt.error("exceeded 10 redirects")
            } else {
                attempt.follow()
            }
        });
        let http = reqwest::Client::builder().pool_max_idle_per_host(0).redirect(redirects).build()?;
        Ok(SessionClient { http, session: SessionSlot::default() })
    }

    /// Records the session a POST carried and the one its answer assigned.
    fn record(
        &self,
        sent: Option<&Arc<str>>,
        answer: Result<StreamableHttpPostResponse, HttpError>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        if let Some(id) = sent {
            self.session.set(id);
        }
        if let Ok(StreamableHttpPostResponse::Json(_, Some(id)) | StreamableHttpPostResponse::Sse(_, Some(id))) =
            &answer
        {
            self.session.set(id);
        }
        answer
    }
}

type HttpError = StreamableHttpError<reqwest::Error>;
type Headers = std::collections::HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>;
type SseStream = futures::stream::BoxStream<'static, Result<sse_stream::Sse, SseError>>;

impl StreamableHttpClient for SessionClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let sent = session_id.clone();
        let answer = self.http.post_message(uri, message, session_id, auth_header, custom_headers).await;
        self.record(sent.as_ref(), answer)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let sent = session_id.clone();
        let answer = self
            .http
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.record(sent.as_ref(), answer)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let sent = session_id.clone();
        let answer = self
            .http
            .post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits)
            .await;
        self.record(sent.as_ref(), answer)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<(), HttpError> {
        self.http.delete_session(uri, session_id, auth_header, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<SseStream, HttpError> {
        self.http.get_stream(uri, session_id, last_event_id, auth_header, custom_headers).await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Result<SseStream, HttpError> {
        self.http
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// A tool host over MCP servers and an embedder's own tools: a call whose tool names an MCP server goes to that
/// server, any other to `own` (refused when there is none). The engine's catalog holds both sets of definitions.
pub struct WithServers {
    own: Option<Arc<dyn ToolHost>>,
    upstream: Arc<UpstreamManager>,
}

impl WithServers {
    /// Calls of MCP tools to `upstream`, the rest to `own`.
    pub fn new(own: Option<Arc<dyn ToolHost>>, upstream: Arc<UpstreamManager>) -> WithServers {
        WithServers { own, upstream }
    }
}

impl std::fmt::Debug for WithServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithServers").field("own", &self.own.is_some()).field("upstream", &self.upstream).finish()
    }
}

#[async_trait]
impl ToolHost for WithServers {
    async fn call_tool(&self, tool: &str, args: Value, cx: CallContext) -> Result<Value, ToolError> {
        match (&cx.server, &self.own) {
            (None, Some(own)) => own.call_tool(tool, args, cx).await,
            _ => self.upstream.call_tool(tool, args, cx).await,
        }
    }

    async fn namespace(&self, server: &str, op: &str, args: Value, cx: CallContext) -> Result<Value, ToolError> {
        self.upstream.namespace(server, op, args, cx).await
    }
}
