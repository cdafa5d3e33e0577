//! Host-side execution of typed bridge requests (one `match` over the call): tool calls through the `ToolHost`
//! after policy and schema checks, catalog search and describe, API files, timers, the session store and yields.
//!
//! Invariant: a request that reaches the `ToolHost` passed the catalog (the tool exists and is not denied), the
//! restart-safety policy, the input contract and the tool policy (allowed, or approved by a person); everything a
//! tool returns comes back as a plain JSON settlement. A write-class call is in the run's effect record from the
//! moment it is handed to the host.

use std::sync::Arc;
use std::time::Duration;

use codemode_bridge::{
    AbortOnDrop, AbortSignal, ApiArgs, ApprovalDecision, ApprovalRequest, Approver, BridgeCall, BridgeErrorCode,
    BridgeMethod, BridgeRequest, CallContext, CallValueArgs, DescribeArgs, EffectStatus, LoadArgs, NamespaceArgs,
    NamespaceTarget, PauseSink, PendingApproval, ProgressSink, RequestDigest, ResultLoadArgs, SearchArgs, Settlement,
    SettlementValue, SleepArgs, StoreArgs, ToolError, YieldArgs,
};
use codemode_catalog::{CatalogEntry, ExecutionMode, ToolSource};
use codemode_config::{Decision, EffectClass, Fallback};
use codemode_snapshot::AskedCall;
use codemode_telemetry::Captured;
use codemode_telemetry::span::Span;
use serde_json::Value;

use crate::Inner;
use crate::machine::{Effect, Preview};
use crate::run::{Hold, Notice, Refusal, RunParts};

fn ok(value: Value) -> SettlementValue {
    SettlementValue::Ok { value }
}

fn invalid(message: impl Into<String>) -> SettlementValue {
    SettlementValue::err(BridgeErrorCode::InvalidInput, message)
}

/// Starts the host work for one request; the settlement arrives through `parts.in_flight`.
/// `digest` is the request's journal digest, computed once by the caller.
pub(crate) fn dispatch(
    inner: &Arc<Inner>,
    mut parts: RunParts<'_>,
    request: BridgeRequest,
    digest: RequestDigest,
) -> Result<(), Refusal> {
    let BridgeRequest { id, call } = request;
    let method = call.method();
    // The catalog entry a tool call names, looked up once.
    let at = match &call {
        BridgeCall::CallValue(CallValueArgs { tool, .. }) => inner.catalog.position(tool),
        _ => None,
    };
    let entry = at.map(|at| &inner.catalog.entries()[at]);
    // A tool call is named for the spans of a replay, and gets its `execute_tool` span, which ends as it settles.
    let mut span = Span::none();
    let trace = std::cell::Cell::new(crate::trace::call_name(inner, id, &call, entry).map(|named| {
        span = crate::trace::call_span(parts.run_id, &named, false, parts.span);
        let trace = crate::trace::CallTrace::new(span.clone(), &named, &inner.redactor);
        parts.call_names.push(named);
        trace
    }));
    let settle = |parts: RunParts<'_>, value: SettlementValue| {
        if let Some(settled) = trace.take().and_then(|trace| trace.settled_later(&value)) {
            parts.settled.push(settled);
        }
        settle_now(parts, id, method, digest, value)
    };
    let session = parts.session.unwrap_or("default");
    let max_result = usize::try_from(inner.limits.max_output_bytes).unwrap_or(usize::MAX);
    // A call that asks for approval always runs in a task, so its decision reaches the run (through the notices)
    // before its settlement does.
    let mut asks = false;
    let mut future: std::pin::Pin<Box<dyn std::future::Future<Output = SettlementValue> + Send>> = match call {
        BridgeCall::Yield(YieldArgs { reason }) => {
            *parts.yield_request = Some((id, reason));
            return Ok(());
        }
        BridgeCall::CallValue(CallValueArgs { tool, args }) => {
            let tool_args = args.unwrap_or_else(no_arguments);
            let (Some(at), Some(entry)) = (at, entry) else {
                return settle(parts, invalid(unknown_tool(&tool)));
            };
            called(&mut parts, entry);
            if parts.restart_safe && !entry.definition.replay_safe {
                return settle(parts, invalid(not_replay_safe(&tool)));
            }
            if let Err(e) = inner.catalog.validate_input(entry, &tool_args) {
                return settle(parts, SettlementValue::err(e.code, e.message));
            }
            let request = || BridgeRequest {
                id,
                call: BridgeCall::CallValue(CallValueArgs { tool: tool.clone(), args: Some(tool_args.clone()) }),
            };
            let ask = match gate(
                inner,
                &mut parts,
                id,
                method,
                entry.decision,
                || Gated::of(entry),
                &tool,
                &tool_args,
                request,
            ) {
                Gate::Run => None,
                Gate::Refuse(value) => return settle(parts, value),
                Gate::Ask(ask) => Some(ask),
            };
            *parts.replay_safe &= entry.definition.replay_safe;
            // An MCP tool reached through its catalog handle answers with third-party content too.
            if entry.definition.source == ToolSource::Mcp {
                parts.untrusted_calls.insert(id);
            }
            parts.scope.count_call();
            *parts.dispatch_started = true;
            asks = ask.is_some();
            let (mut cx, fire_abort) = call_context(&parts, id, method, None);
            if !asks {
                record_write(&mut parts, id, &cx.request_id, entry, &tool_args);
            }
            cx.span = span.clone();
            let mode = entry.definition.execution_mode;
            let scope = parts.scope.clone();
            let inner = inner.clone();
            Box::pin(async move {
                if let Some(ask) = ask
                    && let Err(refused) = ask.decide().await
                {
                    return refused;
                }
                let _turn = scope.turn(mode).await;
                let entry = &inner.catalog.entries()[at];
                let name = entry.definition.host_name().into_owned();
                let result = inner.host.call_tool(&name, tool_args, cx).await;
                fire_abort.disarm();
                match result {
                    Ok(value) => match inner.catalog.validate_output(entry, &value) {
                        Ok(()) => bounded(value, max_result),
                        Err(e) => SettlementValue::err(e.code, e.message),
                    },
                    Err(ToolError { code, message }) => SettlementValue::err(code, inner.catalog.redact(&message)),
                }
            })
        }
        BridgeCall::Namespace(NamespaceArgs { server, target, args }) => {
            let call_args = args.unwrap_or_else(no_arguments);
            let Some(ns) = inner.catalog.mcp_servers().iter().find(|s| s.name == server) else {
                let what = match &target {
                    NamespaceTarget::Tool(tool) => format!("MCP tool {server}.{tool}"),
                    NamespaceTarget::Op(op) => format!("MCP server \"{server}\" (for {op})"),
                };
                return settle(parts, invalid(unavailable(&what)));
            };
            let mut mode = ExecutionMode::Parallel;
            let mut ask = None;
            match &target {
                NamespaceTarget::Tool(tool) => {
                    let known = ns.tools.iter().find(|t| &t.name == tool);
                    let entry = known.and_then(|t| inner.catalog.mcp_tool(&ns.global_name, &t.js_name));
                    let Some(entry) = entry else {
                        return settle(parts, invalid(unavailable(&format!("MCP tool {server}.{tool}"))));
                    };
                    called(&mut parts, entry);
                    if parts.restart_safe && !entry.definition.replay_safe {
                        return settle(parts, invalid(not_replay_safe(tool)));
                    }
                    let request = || BridgeRequest {
                        id,
                        call: BridgeCall::Namespace(NamespaceArgs {
                            server: server.clone(),
                            target: target.clone(),
                            args: Some(call_args.clone()),
                        }),
                    };
                    let path = entry.callable_name.clone();
                    match gate(
                        inner,
                        &mut parts,
                        id,
                        method,
                        entry.decision,
                        || Gated::of(entry),
                        &path,
                        &call_args,
                        request,
                    ) {
                        Gate::Run => {
                            let call_id = codemode_telemetry::otel::tool_call_id(method.as_str(), id);
                            record_write(&mut parts, id, &call_id, entry, &call_args);
                        }
                        Gate::Refuse(value) => return settle(parts, value),
                        Gate::Ask(gated) => ask = Some(gated),
                    }
                    *parts.replay_safe &= entry.definition.replay_safe;
                    mode = entry.definition.execution_mode;
                }
                NamespaceTarget::Op(_) if parts.restart_safe => {
                    return settle(
                        parts,
                        invalid("MCP namespace operations are not replay-safe; restartSafe cells cannot use them"),
                    );
                }
                NamespaceTarget::Op(op) => {
                    // Reading a resource or getting a prompt hands the program a server's content, as a read-class
                    // tool does: the policy decides it at `<server>.resources.read` / `<server>.prompts.get`. The
                    // lists are discovery, as `catalog` and `API` are, and are never gated.
                    let policy = inner.catalog.options().policy.as_ref();
                    if let Some(policy) = policy.filter(|_| matches!(op.as_str(), "resources.read" | "prompts.get")) {
                        let key = format!("{server}.{op}");
                        let decision = policy.decide(&key, EffectClass::Read);
                        let request = || BridgeRequest {
                            id,
                            call: BridgeCall::Namespace(NamespaceArgs {
                                server: server.clone(),
                                target: target.clone(),
                                args: Some(call_args.clone()),
                            }),
                        };
                        let gated = || Gated {
                            name: key.clone(),
                            key: key.clone(),
                            class: EffectClass::Read,
                            server: Some(server.clone()),
                        };
                        let path = format!("MCP.{}.{op}", ns.global_name);
                        match gate(inner, &mut parts, id, method, decision, gated, &path, &call_args, request) {
                            Gate::Run => {}
                            Gate::Refuse(value) => return settle(parts, value),
                            Gate::Ask(gated) => ask = Some(gated),
                        }
                    }
                }
            }
            parts.scope.count_call();
            *parts.dispatch_started = true;
            parts.untrusted_calls.insert(id);
            asks = ask.is_some();
            let (mut cx, fire_abort) = call_context(&parts, id, method, Some(&server));
            cx.span = span.clone();
            let scope = parts.scope.clone();
            let inner = inner.clone();
            Box::pin(async move {
                if let Some(ask) = ask
                    && let Err(refused) = ask.decide().await
                {
                    return refused;
                }
                let result = match target {
                    NamespaceTarget::Tool(tool) => {
                        let _turn = scope.turn(mode).await;
                        inner.host.call_tool(&tool, call_args, cx).await
                    }
                    NamespaceTarget::Op(op) => inner.host.namespace(&server, &op, call_args, cx).await,
                };
                fire_abort.disarm();
                match result {
                    Ok(value) => bounded(value, max_result),
                    Err(ToolError { code, message }) => SettlementValue::err(code, message),
                }
            })
        }
        BridgeCall::Search(search) => {
            parts.scope.count_search();
            let value = match search {
                SearchArgs::All => ok(to_json(inner.catalog.all())),
                SearchArgs::Query { query, limit } => match inner.catalog.search(&query, limit.as_ref()) {
                    Ok(found) => {
                        let value = to_json(found);
                        let bytes = value.to_string().len() as u64;
                        if bytes > inner.limits.max_output_bytes {
                            invalid(format!(
                                "catalog.search results are {bytes} bytes, over the {}-byte output budget; pass a smaller limit or a more specific query.",
                                inner.limits.max_output_bytes
                            ))
                        } else {
                            ok(value)
                        }
                    }
                    Err(e) => invalid(e.to_string()),
                },
            };
            return settle(parts, value);
        }
        BridgeCall::Describe(DescribeArgs { tool }) => {
            parts.scope.count_describe();
            let value = match inner.catalog.describe(&tool) {
                Some(value) => ok(value),
                None => invalid(unknown_tool(&tool)),
            };
            return settle(parts, value);
        }
        BridgeCall::Api(api) => {
            let value = match api {
                ApiArgs::List { path } => match inner.catalog.api_list(&path) {
                    // The MCP files live in the guest already; list only what the host serves.
                    Ok(files) => {
                        ok(to_json(files.into_iter().filter(|f| !f.path.starts_with("mcp/")).collect::<Vec<_>>()))
                    }
                    Err(e) => invalid(e.to_string()),
                },
                ApiArgs::McpApi { server, tool, schema } => {
                    match inner.catalog.mcp_api(&server, tool.as_deref(), schema) {
                        Ok(header) => ok(header),
                        Err(e) => invalid(e.to_string()),
                    }
                }
                ApiArgs::Read { path } => match inner.catalog.api_read(&path) {
                    Ok(text) => ok(Value::String(text)),
                    Err(e) => invalid(e.to_string()),
                },
            };
            return settle(parts, value);
        }
        BridgeCall::Sleep(SleepArgs { ms }) => Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ok(Value::Null)
        }),
        BridgeCall::Store(_) | BridgeCall::Load(_) if parts.restart_safe => {
            return settle(parts, invalid("store and load are unavailable in restartSafe cells"));
        }
        BridgeCall::Store(StoreArgs { key, value }) => {
            *parts.dispatch_started = true;
            let sessions = inner.sessions.clone();
            let session = session.to_owned();
            // A local store answers at once (settled below without a task); a shared one runs in a task.
            Box::pin(async move {
                // `undefined` (which JSON leaves out) is stored as `null`.
                match sessions.store(&session, &key, value.unwrap_or(Value::Null)).await {
                    Ok(()) => ok(Value::Null),
                    Err(e) => invalid(e.to_string()),
                }
            })
        }
        BridgeCall::Load(LoadArgs { key }) => {
            let sessions = inner.sessions.clone();
            let session = session.to_owned();
            Box::pin(async move {
                match sessions.load(&session, &key).await {
                    Ok(value) => ok(value.unwrap_or(Value::Null)),
                    Err(e) => invalid(e.to_string()),
                }
            })
        }
        BridgeCall::ResultLoad(ResultLoadArgs { id: rid }) => {
            let results = inner.results.clone();
            let session = session.to_owned();
            Box::pin(async move {
                match results.load(&session, &rid).await {
                    Ok(Some(value)) => ok(value),
                    Ok(None) => invalid(format!(
                        "no saved result \"{rid}\" in this session (it expired or was evicted); rerun the cell that produced it"
                    )),
                    Err(e) => invalid(e.to_string()),
                }
            })
        }
    };
    // A host that answers at once (a cache, a stub, an in-process tool) is settled here, without a task and the
    // thread hops it costs; anything else goes on running in a task.
    let trace = trace.take();
    let in_task = |future, trace: Option<crate::trace::CallTrace>| async move {
        let value = future.await;
        if let Some(trace) = trace {
            trace.settled(&value);
        }
        Settlement { id, value }
    };
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let handle = if asks {
        Some(parts.in_flight.spawn(in_task(future, trace)))
    } else {
        // A host that panics on this first poll fails the call as it would in a task, not the run.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
            Ok(std::task::Poll::Ready(value)) => {
                if let Some(effect) = parts.effects.get_mut(&id) {
                    effect.status = crate::machine::effect_status(&value);
                }
                drop(future);
                if let Some(settled) = trace.and_then(|trace| trace.settled_later(&value)) {
                    parts.settled.push(settled);
                }
                parts.ready.push(Settlement { id, value });
                None
            }
            Ok(std::task::Poll::Pending) => Some(parts.in_flight.spawn(in_task(future, trace))),
            Err(_) => {
                parts.host_failed.insert(id);
                parts.ready.push(crate::machine::host_failure(id));
                None
            }
        }
    };
    parts.pending.insert(id, (method, digest.0, handle));
    Ok(())
}

/// Records the contract of a catalog tool the run calls, the first time it calls it: a resume under a rebuilt
/// catalog checks it.
fn called(parts: &mut RunParts<'_>, entry: &CatalogEntry) {
    if !parts.tool_contracts.contains_key(&entry.callable_name) {
        parts.tool_contracts.insert(entry.callable_name.clone(), entry.contract_digest());
    }
}

/// The context of a nested call, with the handle that fires its abort signal if the call's future is dropped
/// before the host answered.
fn call_context(
    parts: &RunParts<'_>,
    id: u32,
    method: BridgeMethod,
    server: Option<&str>,
) -> (CallContext, AbortOnDrop) {
    let request_id = codemode_telemetry::otel::tool_call_id(method.as_str(), id);
    let (abort, fire_abort) = AbortSignal::new();
    let mut cx = CallContext::new(parts.run_id, request_id);
    cx.session_id = parts.owner.session_id.clone();
    cx.agent_id = parts.owner.agent_id.clone();
    cx.agent_run_id = parts.owner.agent_run_id.clone();
    cx.server = server.map(str::to_owned);
    cx.progress = ProgressSink::new(parts.progress.clone(), parts.run_id, &cx.request_id);
    let (holds, clock) = (parts.approvals.holds.0.clone(), parts.approvals.holds.1.clone());
    cx.pause = PauseSink::new(Arc::new(move |on| {
        let _ = holds.send(Hold { id, on, at_ms: clock.now_ms() });
    }));
    cx.abort = abort;
    (cx, fire_abort)
}

/// Settles a request whose answer is known at once; it is delivered at the next quiescent point.
fn settle_now(
    parts: RunParts<'_>,
    id: u32,
    method: BridgeMethod,
    digest: RequestDigest,
    value: SettlementValue,
) -> Result<(), Refusal> {
    parts.pending.insert(id, (method, digest.0, None));
    parts.ready.push(Settlement { id, value });
    Ok(())
}

/// The arguments of a call whose guest arguments JSON drops (a function, a symbol): none, as for `undefined`.
fn no_arguments() -> Value {
    Value::Object(serde_json::Map::new())
}

/// A catalog answer as JSON; the catalog's types have string keys only.
fn to_json(value: impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("catalog answers serialize to JSON")
}

/// A nested tool result bounded by `maxOutputBytes` (seed 001, "Output budget"): kept whole when its JSON fits,
/// else the truncation marker (`truncated`, `omittedBytes`, `guidance`, a UTF-8-safe `prefix`), which the program
/// receives as a successful partial result. One pass over the value, keeping at most `max` bytes of its text.
fn bounded(value: Value, max: usize) -> SettlementValue {
    ok(codemode_bridge::bound_value(value, max))
}

fn unknown_tool(tool: &str) -> String {
    unavailable(&format!("tool \"{tool}\""))
}

/// Why a call of `what` (a tool, an MCP tool or server) is refused when the host's catalog does not have it: a run
/// keeps the names it started with, so after the host's tools changed it can call one the host no longer has.
fn unavailable(what: &str) -> String {
    format!(
        "{what} is not available: this host does not have it, or no longer has it (its tools changed since the run \
         started); use catalog.search(query) to find the tools it has"
    )
}

fn not_replay_safe(tool: &str) -> String {
    format!("tool \"{tool}\" is not replay-safe; restartSafe cells may call only replay-safe tools")
}

/// Bytes of arguments an approval request shows.
pub(crate) const APPROVAL_PREVIEW_BYTES: usize = 1024;

/// The arguments as JSON text, redacted with the engine's redactor and cut to `max` bytes (a cut preview ends with
/// `…`; see [`codemode_telemetry::Redactor::preview`]).
pub(crate) fn preview(redactor: &codemode_telemetry::Redactor, args: &Value, max: usize) -> String {
    redactor.preview(args, max)
}

/// Puts a write-class call in the run's effect record as it is handed to the host: `uncertain` until the host
/// answers, its arguments captured for a preview rendered only if someone reads the record; `call_id` is the call's
/// id as people see it.
fn record_write(parts: &mut RunParts<'_>, id: u32, call_id: &str, entry: &CatalogEntry, args: &Value) {
    if entry.definition.effect_class() != EffectClass::Write {
        return;
    }
    parts.effects.insert(
        id,
        Effect {
            tool: entry.definition.host_name().into_owned(),
            call_id: call_id.to_owned(),
            status: EffectStatus::Uncertain,
            preview: Preview::Captured(Captured::new(args, crate::machine::EFFECT_PREVIEW_BYTES)),
        },
    );
}

/// What the tool policy lets a call do.
enum Gate {
    /// It runs now.
    Run,
    /// It is refused with this settlement; it never reaches its tool.
    Refuse(SettlementValue),
    /// It runs once a person approves it.
    Ask(Box<Ask>),
}

/// A pending question to an approver, for one call.
pub(crate) struct Ask {
    approver: Arc<dyn Approver>,
    request: ApprovalRequest,
    /// `<server>.<tool>` or the tool's name: what `ApproveForRun` remembers.
    key: String,
    write: bool,
    id: u32,
    approved: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    turn: Arc<tokio::sync::Mutex<()>>,
    notices: tokio::sync::mpsc::UnboundedSender<Notice>,
    clock: Arc<dyn codemode_snapshot::Clock>,
    _fire_abort: AbortOnDrop,
}

impl Ask {
    /// Asks, reports the decision to the run, and returns the settlement of a refused call.
    async fn decide(self: Box<Self>) -> Result<(), SettlementValue> {
        // One question at a time; another call of the same tool may have been approved for the run meanwhile.
        let _turn = self.turn.lock().await;
        let remembered = lock(&self.approved).contains(&self.key);
        let decision =
            if remembered { ApprovalDecision::Approve } else { self.approver.decide(self.request.clone()).await };
        if decision == ApprovalDecision::ApproveForRun {
            lock(&self.approved).insert(self.key.clone());
        }
        let at_ms = self.clock.now_ms();
        let _ = self.notices.send(Notice { id: self.id, decision, at_ms, write: self.write });
        match decision {
            ApprovalDecision::Approve | ApprovalDecision::ApproveForRun => Ok(()),
            ApprovalDecision::Deny => Err(denied_by_person(&self.request.tool)),
            // The run drops this settlement: the call waits in the run for an answer.
            _ => Err(SettlementValue::err(BridgeErrorCode::Other("deferred".into()), "approval deferred")),
        }
    }
}

pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is one set operation, so a poisoned lock is consistent.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the policy knows of a gated call: built only for a call the policy does not simply allow.
struct Gated {
    /// The tool's own name (an operation's policy path), for messages and the approval request.
    name: String,
    /// The policy path (`<server>.<tool>`, a native tool's name, `<server>.resources.read`): what rules match and
    /// what `ApproveForRun` remembers.
    key: String,
    class: EffectClass,
    server: Option<String>,
}

impl Gated {
    fn of(entry: &CatalogEntry) -> Gated {
        let def = &entry.definition;
        Gated {
            name: def.name.clone(),
            key: codemode_catalog::policy_path(def),
            class: def.effect_class(),
            server: def.server.clone(),
        }
    }
}

/// Applies the tool policy's `decision` to a call at `path` (the callable path the program used); `gated` says
/// what is called, for a decision other than allow. `request` rebuilds the guest's request, for a call that must
/// wait for a person.
#[allow(clippy::too_many_arguments)]
fn gate(
    inner: &Arc<Inner>,
    parts: &mut RunParts<'_>,
    id: u32,
    method: BridgeMethod,
    decision: Decision,
    gated: impl FnOnce() -> Gated,
    path: &str,
    args: &Value,
    request: impl FnOnce() -> BridgeRequest,
) -> Gate {
    if decision == Decision::Allow {
        return Gate::Run;
    }
    let Gated { name, key, class, server } = gated();
    let policy = || inner.catalog.options().policy.as_ref();
    if decision == Decision::Deny {
        let why = policy().map_or_else(String::new, |p| format!(" by {}", p.explain(&key, class)));
        return Gate::Refuse(SettlementValue::err(
            BridgeErrorCode::Denied,
            format!(
                "tool \"{name}\" is denied by the tool policy{why}; the call did not run. Retrying will not help: \
                 do without it, or tell the user the task needs it"
            ),
        ));
    }
    if lock(parts.approvals.approved).contains(&key) {
        return Gate::Run;
    }
    let call_id = codemode_telemetry::otel::tool_call_id(method.as_str(), id);
    let answer = parts.approvals.answers.iter().find(|(c, _)| *c == call_id).map(|(_, d)| *d);
    match answer {
        Some(ApprovalDecision::Approve) => return Gate::Run,
        Some(ApprovalDecision::ApproveForRun) => {
            lock(parts.approvals.approved).insert(key);
            return Gate::Run;
        }
        Some(ApprovalDecision::Deny) => return Gate::Refuse(denied_by_person(&name)),
        _ => {}
    }
    let approver = match (parts.approvals.approver.clone(), policy().map_or(Fallback::Deny, |p| p.fallback)) {
        (Some(approver), _) => approver,
        // Nobody asked now: the call is deferred, so the run parks on it until a `wait` carries the answer.
        (None, Fallback::Park) => Arc::new(Parking),
        (None, Fallback::Allow) => return Gate::Run,
        (None, Fallback::Deny) => {
            return Gate::Refuse(SettlementValue::err(
                BridgeErrorCode::Denied,
                format!(
                    "tool \"{name}\" needs a person's approval and nobody can be asked here, so the policy's \
                     fallback denied it; the call did not run. Retrying will not help: do without it, or tell the \
                     user the task needs it"
                ),
            ));
        }
    };
    let shown = preview(parts.redactor, args, APPROVAL_PREVIEW_BYTES);
    let (cx, fire_abort) = call_context(parts, id, method, server.as_deref());
    let approval_request =
        ApprovalRequest::new(name.clone(), path, shown.clone(), cx).with_title(parts.approvals.title.clone());
    parts.asked.push(AskedCall {
        request: request(),
        approval: PendingApproval { call_id, tool: name, path: path.to_owned(), preview: shown },
        deferred: false,
    });
    Gate::Ask(Box::new(Ask {
        approver,
        request: approval_request,
        key,
        write: class == EffectClass::Write,
        id,
        approved: parts.approvals.approved.clone(),
        turn: parts.approvals.turn.clone(),
        notices: parts.approvals.notices.clone(),
        clock: inner.clock.clone(),
        _fire_abort: fire_abort,
    }))
}

/// The approver of `fallback = "park"`: defers every call it is asked about.
struct Parking;

#[async_trait::async_trait]
impl codemode_bridge::Approver for Parking {
    async fn decide(&self, _request: ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Defer
    }
}

fn denied_by_person(tool: &str) -> SettlementValue {
    SettlementValue::err(
        BridgeErrorCode::Denied,
        format!(
            "a person denied this call of tool \"{tool}\"; it did not run. Retrying will not help: do without it, \
             or tell the user what it was for"
        ),
    )
}
