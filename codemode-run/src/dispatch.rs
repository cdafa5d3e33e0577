//! Host-side execution of typed bridge requests (one `match` over the call): tool calls through the `ToolHost`
//! after policy and schema checks, catalog search and describe, API files, timers, the session store and yields.
//!
//! Invariant: a request that reaches the `ToolHost` passed the catalog (the tool exists and is not denied), the
//! restart-safety policy and the input contract; everything a tool returns comes back as a plain JSON settlement.

use std::sync::Arc;
use std::time::Duration;

use codemode_bridge::{
    AbortOnDrop, AbortSignal, ApiArgs, BridgeCall, BridgeErrorCode, BridgeMethod, BridgeRequest, CallContext,
    CallValueArgs, DescribeArgs, LoadArgs, NamespaceArgs, NamespaceTarget, ProgressSink, RequestDigest, ResultLoadArgs,
    SearchArgs, Settlement, SettlementValue, SleepArgs, StoreArgs, ToolError, YieldArgs,
};
use codemode_catalog::{ExecutionMode, ToolSource};
use serde_json::Value;

use crate::Inner;
use crate::run::{Refusal, RunParts};

/// Bytes one nested tool result may take; larger results fail the call with an error the program can catch.
const MAX_TOOL_RESULT_BYTES: usize = 8 * 1024 * 1024;

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
    parts: RunParts<'_>,
    request: BridgeRequest,
    digest: RequestDigest,
) -> Result<(), Refusal> {
    let BridgeRequest { id, call } = request;
    let method = call.method();
    let settle = |parts: RunParts<'_>, value: SettlementValue| settle_now(parts, id, method, digest, value);
    let session = parts.session.unwrap_or("default");
    let future: std::pin::Pin<Box<dyn std::future::Future<Output = SettlementValue> + Send>> = match call {
        BridgeCall::Yield(YieldArgs { reason }) => {
            *parts.yield_request = Some((id, reason));
            return Ok(());
        }
        BridgeCall::CallValue(CallValueArgs { tool, args }) => {
            let tool_args = args.unwrap_or_else(no_arguments);
            let Some(entry) = inner.catalog.by_callable(&tool) else {
                return settle(parts, invalid(unknown_tool(&tool)));
            };
            if parts.restart_safe && !entry.definition.replay_safe {
                return settle(parts, invalid(not_replay_safe(&tool)));
            }
            if let Err(e) = inner.catalog.validate_input(entry, &tool_args) {
                return settle(parts, SettlementValue::err(e.code, e.message));
            }
            *parts.replay_safe &= entry.definition.replay_safe;
            // An MCP tool reached through its catalog handle answers with third-party content too.
            *parts.untrusted |= entry.definition.source == ToolSource::Mcp;
            parts.scope.count_call();
            *parts.dispatch_started = true;
            let (cx, fire_abort) = call_context(inner, &parts, id, method, None);
            let mode = entry.definition.execution_mode;
            let scope = parts.scope.clone();
            let inner = inner.clone();
            Box::pin(async move {
                let _turn = scope.turn(mode).await;
                let Some(entry) = inner.catalog.by_callable(&tool) else {
                    return invalid(unknown_tool(&tool));
                };
                let name = entry.definition.name.clone();
                let result = inner.host.call_tool(&name, tool_args, cx).await;
                fire_abort.disarm();
                match result {
                    Ok(value) => match inner.catalog.validate_output(entry, &value) {
                        Ok(()) => bounded(value),
                        Err(e) => SettlementValue::err(e.code, e.message),
                    },
                    Err(ToolError { code, message }) => SettlementValue::err(code, inner.catalog.redact(&message)),
                }
            })
        }
        BridgeCall::Namespace(NamespaceArgs { server, target, args }) => {
            let call_args = args.unwrap_or_else(no_arguments);
            let Some(ns) = inner.catalog.mcp_servers().iter().find(|s| s.name == server) else {
                return settle(parts, invalid(format!("unknown MCP server \"{server}\"")));
            };
            let mut mode = ExecutionMode::Parallel;
            match &target {
                NamespaceTarget::Tool(tool) => {
                    let known = ns.tools.iter().find(|t| &t.name == tool);
                    let entry = known.and_then(|t| inner.catalog.mcp_tool(&ns.global_name, &t.js_name));
                    let Some(entry) = entry else {
                        return settle(parts, invalid(format!("unknown MCP tool {server}.{tool}")));
                    };
                    if parts.restart_safe && !entry.definition.replay_safe {
                        return settle(parts, invalid(not_replay_safe(tool)));
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
                NamespaceTarget::Op(_) => {}
            }
            parts.scope.count_call();
            *parts.dispatch_started = true;
            *parts.untrusted = true;
            let (cx, fire_abort) = call_context(inner, &parts, id, method, Some(&server));
            let scope = parts.scope.clone();
            let inner = inner.clone();
            Box::pin(async move {
                let result = match target {
                    NamespaceTarget::Tool(tool) => {
                        let _turn = scope.turn(mode).await;
                        inner.host.call_tool(&tool, call_args, cx).await
                    }
                    NamespaceTarget::Op(op) => inner.host.namespace(&server, &op, call_args, cx).await,
                };
                fire_abort.disarm();
                match result {
                    Ok(value) => bounded(value),
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
                // The whole API file of the server; `tool` and `schema` are the guest's to filter by.
                ApiArgs::McpApi { server, .. } => match inner.catalog.mcp_servers().iter().find(|s| s.name == server) {
                    Some(s) => match inner.catalog.api_read(&s.api_path()) {
                        Ok(text) => ok(Value::String(text)),
                        Err(e) => invalid(e.to_string()),
                    },
                    None => invalid(format!("unknown MCP server \"{server}\"")),
                },
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
            // `undefined` (which JSON leaves out) is stored as `null`.
            let settled = match inner.sessions.store(session, &key, value.unwrap_or(Value::Null)) {
                Ok(()) => ok(Value::Null),
                Err(e) => invalid(e.to_string()),
            };
            return settle(parts, settled);
        }
        BridgeCall::Load(LoadArgs { key }) => {
            let settled = match inner.sessions.load(session, &key) {
                Ok(value) => ok(value.unwrap_or(Value::Null)),
                Err(e) => invalid(e.to_string()),
            };
            return settle(parts, settled);
        }
        BridgeCall::ResultLoad(ResultLoadArgs { id: rid }) => {
            let settled = match inner.results.load(session, &rid) {
                Some(value) => ok(value),
                None => invalid(format!(
                    "no saved result \"{rid}\" in this session (it expired or was evicted); rerun the cell that produced it"
                )),
            };
            return settle(parts, settled);
        }
    };
    // A host that answers at once (a cache, a stub, an in-process tool) is settled here, without a task and the
    // thread hops it costs; anything else goes on running in a task.
    let mut future = Box::pin(async move { Settlement { id, value: future.await } });
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let handle = match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(settlement) => {
            parts.ready.push(settlement);
            None
        }
        std::task::Poll::Pending => Some(parts.in_flight.spawn(future)),
    };
    parts.pending.insert(id, (method, digest.0, handle));
    Ok(())
}

/// The context of a nested call, with the handle that fires its abort signal if the call's future is dropped
/// before the host answered.
fn call_context(
    inner: &Inner,
    parts: &RunParts<'_>,
    id: u32,
    method: BridgeMethod,
    server: Option<&str>,
) -> (CallContext, AbortOnDrop) {
    let request_id = format!("bridge:{}:{id}", method.as_str());
    let (abort, fire_abort) = AbortSignal::new();
    let mut cx = CallContext::new(parts.run_id, request_id);
    cx.session_id = parts.owner.session_id.clone();
    cx.agent_id = parts.owner.agent_id.clone();
    cx.agent_run_id = parts.owner.agent_run_id.clone();
    cx.server = server.map(str::to_owned);
    cx.progress = ProgressSink::new(inner.progress.clone(), parts.run_id, &cx.request_id);
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

fn bounded(value: Value) -> SettlementValue {
    let bytes = serde_json::to_string(&value).map(|s| s.len()).unwrap_or(0);
    if bytes > MAX_TOOL_RESULT_BYTES {
        return SettlementValue::err(
            BridgeErrorCode::ToolError,
            format!(
                "tool result is {bytes} bytes, over the {MAX_TOOL_RESULT_BYTES}-byte limit for one nested result; ask for less (filters, limits, pagination)"
            ),
        );
    }
    ok(value)
}

fn unknown_tool(tool: &str) -> String {
    format!("tool \"{tool}\" is not available in this run; use catalog.search(query) to find the tools that are")
}

fn not_replay_safe(tool: &str) -> String {
    format!("tool \"{tool}\" is not replay-safe; restartSafe cells may call only replay-safe tools")
}
