//! Host-side execution of bridge requests: tool calls through the `ToolHost` (after policy and schema checks),
//! catalog search and describe, API files, timers, the session store and yields.
//!
//! Invariant: a request that reaches the `ToolHost` passed the catalog (the tool exists and is not denied), the
//! restart-safety policy and the input contract; everything a tool returns comes back as a plain JSON settlement.

use std::sync::Arc;
use std::time::Duration;

use codemode_bridge::{
    BridgeMethod, BridgeRequest, CallContext, RequestDigest, Settlement, SettlementValue, ToolError,
};
use serde_json::{Value, json};

use crate::Inner;
use crate::run::{Refusal, RunParts};

/// Bytes one nested tool result may take; larger results fail the call with an error the program can catch.
const MAX_TOOL_RESULT_BYTES: usize = 8 * 1024 * 1024;

fn ok(value: Value) -> SettlementValue {
    SettlementValue::Ok { value }
}

fn err(code: &str, message: impl Into<String>) -> SettlementValue {
    SettlementValue::Err { code: code.into(), message: message.into() }
}

/// Starts the host work for one request; the settlement arrives through `parts.in_flight`.
/// `digest` is the request's journal digest, computed once by the caller.
pub(crate) fn dispatch(
    inner: &Arc<Inner>,
    parts: RunParts<'_>,
    request: BridgeRequest,
    digest: RequestDigest,
) -> Result<(), Refusal> {
    let BridgeRequest { id, method, args } = request.clone();
    if method == BridgeMethod::Yield {
        let reason = args.get("reason").and_then(Value::as_str).map(str::to_owned);
        *parts.yield_request = Some((id, reason));
        return Ok(());
    }
    let cx = CallContext {
        run_id: parts.run_id.to_owned(),
        session_id: parts.session.map(str::to_owned),
        request_id: format!("bridge:{}:{id}", method.as_str()),
        server: None,
    };
    let session = parts.session.unwrap_or("default").to_owned();
    let future: std::pin::Pin<Box<dyn std::future::Future<Output = SettlementValue> + Send>> = match method {
        BridgeMethod::CallValue => {
            let tool = args.get("tool").and_then(Value::as_str).unwrap_or_default().to_owned();
            let tool_args = args.get("args").cloned().unwrap_or_else(|| json!({}));
            let Some(entry) = inner.catalog.by_callable(&tool) else {
                return settle_now(parts, &request, digest, err("invalid_input", unknown_tool(&tool)));
            };
            if parts.restart_safe && !entry.definition.replay_safe {
                return settle_now(parts, &request, digest, err("invalid_input", not_replay_safe(&tool)));
            }
            if let Err(e) = inner.catalog.validate_input(entry, &tool_args) {
                return settle_now(parts, &request, digest, err(&e.code, e.message));
            }
            *parts.replay_safe &= entry.definition.replay_safe;
            parts.counters.call_count += 1;
            *parts.dispatch_started = true;
            let inner = inner.clone();
            Box::pin(async move {
                let Some(entry) = inner.catalog.by_callable(&tool) else {
                    return err("invalid_input", unknown_tool(&tool));
                };
                let name = entry.definition.name.clone();
                match inner.host.call_tool(&name, tool_args, cx).await {
                    Ok(value) => match inner.catalog.validate_output(entry, &value) {
                        Ok(()) => bounded(value),
                        Err(e) => err(&e.code, e.message),
                    },
                    Err(ToolError { code, message }) => err(&code, inner.catalog.redact(&message)),
                }
            })
        }
        BridgeMethod::Namespace => {
            let server = args.get("server").and_then(Value::as_str).unwrap_or_default().to_owned();
            let tool = args.get("tool").and_then(Value::as_str).map(str::to_owned);
            let op = args.get("op").and_then(Value::as_str).map(str::to_owned);
            let call_args = args.get("args").cloned().unwrap_or_else(|| json!({}));
            let Some(ns) = inner.catalog.mcp_servers().iter().find(|s| s.name == server) else {
                return settle_now(
                    parts,
                    &request,
                    digest,
                    err("invalid_input", format!("unknown MCP server \"{server}\"")),
                );
            };
            if let Some(tool) = &tool {
                let known = ns.tools.iter().find(|t| &t.name == tool);
                let entry = known.and_then(|t| inner.catalog.mcp_tool(&ns.global_name, &t.js_name));
                let Some(entry) = entry else {
                    return settle_now(
                        parts,
                        &request,
                        digest,
                        err("invalid_input", format!("unknown MCP tool {server}.{tool}")),
                    );
                };
                if parts.restart_safe && !entry.definition.replay_safe {
                    return settle_now(parts, &request, digest, err("invalid_input", not_replay_safe(tool)));
                }
                *parts.replay_safe &= entry.definition.replay_safe;
            } else if parts.restart_safe {
                return settle_now(
                    parts,
                    &request,
                    digest,
                    err(
                        "invalid_input",
                        "MCP namespace operations are not replay-safe; restartSafe cells cannot use them",
                    ),
                );
            }
            parts.counters.call_count += 1;
            *parts.dispatch_started = true;
            *parts.untrusted = true;
            let inner = inner.clone();
            let mut cx = cx;
            cx.server = Some(server.clone());
            Box::pin(async move {
                let result = match (tool, op) {
                    (Some(tool), _) => inner.host.call_tool(&tool, call_args, cx).await,
                    (None, Some(op)) => inner.host.namespace(&server, &op, call_args, cx).await,
                    (None, None) => Err(ToolError::with_code("invalid_input", "namespace request without tool or op")),
                };
                match result {
                    Ok(value) => bounded(value),
                    Err(ToolError { code, message }) => err(&code, message),
                }
            })
        }
        BridgeMethod::Search => {
            parts.counters.search_count += 1;
            let value = if args.get("all").and_then(Value::as_bool) == Some(true) {
                ok(serde_json::to_value(inner.catalog.all()).unwrap_or_default())
            } else {
                let query = args.get("query").and_then(Value::as_str).unwrap_or_default();
                let limit = args.get("limit").filter(|v| !v.is_null());
                match inner.catalog.search(query, limit) {
                    Ok(found) => {
                        let value = serde_json::to_value(found).unwrap_or_default();
                        let bytes = value.to_string().len() as u64;
                        if bytes > inner.limits.max_output_bytes {
                            err(
                                "invalid_input",
                                format!(
                                    "catalog.search results are {bytes} bytes, over the {}-byte output budget; pass a smaller limit or a more specific query.",
                                    inner.limits.max_output_bytes
                                ),
                            )
                        } else {
                            ok(value)
                        }
                    }
                    Err(e) => err("invalid_input", e.to_string()),
                }
            };
            return settle_now(parts, &request, digest, value);
        }
        BridgeMethod::Describe => {
            parts.counters.describe_count += 1;
            let tool = args.get("tool").and_then(Value::as_str).unwrap_or_default();
            let value = match inner.catalog.describe(tool) {
                Some(value) => ok(value),
                None => err("invalid_input", unknown_tool(tool)),
            };
            return settle_now(parts, &request, digest, value);
        }
        BridgeMethod::Api => {
            let path = args.get("path").and_then(Value::as_str).unwrap_or_default();
            let value = match args.get("op").and_then(Value::as_str) {
                Some("list") => match inner.catalog.api_list(path) {
                    // The MCP files live in the guest already; list only what the host serves.
                    Ok(files) => ok(serde_json::to_value(
                        files.into_iter().filter(|f| !f.path.starts_with("mcp/")).collect::<Vec<_>>(),
                    )
                    .unwrap_or_default()),
                    Err(e) => err("invalid_input", e.to_string()),
                },
                Some("mcpApi") => {
                    let server = args.get("server").and_then(Value::as_str).unwrap_or_default();
                    match inner.catalog.mcp_servers().iter().find(|s| s.name == server) {
                        Some(s) => match inner.catalog.api_read(&s.api_path()) {
                            Ok(text) => ok(Value::String(text)),
                            Err(e) => err("invalid_input", e.to_string()),
                        },
                        None => err("invalid_input", format!("unknown MCP server \"{server}\"")),
                    }
                }
                _ => match inner.catalog.api_read(path) {
                    Ok(text) => ok(Value::String(text)),
                    Err(e) => err("invalid_input", e.to_string()),
                },
            };
            return settle_now(parts, &request, digest, value);
        }
        BridgeMethod::Sleep => {
            let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                ok(Value::Null)
            })
        }
        BridgeMethod::Store | BridgeMethod::Load if parts.restart_safe => {
            return settle_now(
                parts,
                &request,
                digest,
                err("invalid_input", "store and load are unavailable in restartSafe cells"),
            );
        }
        BridgeMethod::Store => {
            *parts.dispatch_started = true;
            let key = args.get("key").and_then(Value::as_str).unwrap_or_default();
            let value = args.get("value").cloned().unwrap_or(Value::Null);
            let settled = match inner.sessions.store(&session, key, value) {
                Ok(()) => ok(Value::Null),
                Err(e) => err("invalid_input", e.to_string()),
            };
            return settle_now(parts, &request, digest, settled);
        }
        BridgeMethod::Load => {
            let key = args.get("key").and_then(Value::as_str).unwrap_or_default();
            let settled = match inner.sessions.load(&session, key) {
                Ok(value) => ok(value.unwrap_or(Value::Null)),
                Err(e) => err("invalid_input", e.to_string()),
            };
            return settle_now(parts, &request, digest, settled);
        }
        BridgeMethod::ResultLoad => {
            let rid = args.get("id").and_then(Value::as_str).unwrap_or_default();
            let settled = match inner.results.load(&session, rid) {
                Some(value) => ok(value),
                None => err(
                    "invalid_input",
                    format!(
                        "no saved result \"{rid}\" in this session (it expired or was evicted); rerun the cell that produced it"
                    ),
                ),
            };
            return settle_now(parts, &request, digest, settled);
        }
        BridgeMethod::Yield => unreachable!("handled above"),
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

/// Settles a request whose answer is known at once; it is delivered at the next quiescent point.
fn settle_now(
    parts: RunParts<'_>,
    request: &BridgeRequest,
    digest: RequestDigest,
    value: SettlementValue,
) -> Result<(), Refusal> {
    parts.pending.insert(request.id, (request.method, digest.0, None));
    parts.ready.push(Settlement { id: request.id, value });
    Ok(())
}

fn bounded(value: Value) -> SettlementValue {
    let bytes = serde_json::to_string(&value).map(|s| s.len()).unwrap_or(0);
    if bytes > MAX_TOOL_RESULT_BYTES {
        return err(
            "tool_error",
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
