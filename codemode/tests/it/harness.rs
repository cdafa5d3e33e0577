//! The test rig shared by the facade's integration tests: one `CodeMode` with a small set of real tools and two host
//! namespaces (`namespaces.kv`, `nodes`) behind an in-test `ToolHost`, and short limits.
//!
//! It is not a mock of the engine: cells run in real `codemode-worker` processes. The host records every call to a
//! tool the guest must never reach (denied, control and direct-only tools), so tests can assert none arrived.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use codemode::{CallContext, ToolError, ToolHost};
use codemode::{CodeMode, Limits, ToolDefinition};
use serde_json::{Value, json};

/// Wall-clock budget of one cell in these tests.
pub const TIMEOUT_MS: u64 = 1500;
/// Tools that exist in the embedder's list but must never reach the host from a guest.
pub const FORBIDDEN: &[&str] = &["admin_delete", "tool_search", "screenshot"];

/// The in-test tool host.
#[derive(Default)]
pub struct Host {
    /// Names of forbidden tools that reached the host anyway.
    pub forbidden_calls: Mutex<Vec<String>>,
    /// Every call that reached the host.
    pub calls: AtomicUsize,
    /// What the `give` tool returns.
    pub give: Mutex<Value>,
}

#[async_trait]
impl ToolHost for Host {
    async fn call_tool(&self, tool: &str, args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if FORBIDDEN.contains(&tool) {
            self.forbidden_calls.lock().expect("host lock").push(tool.to_owned());
            return Err(ToolError::new("forbidden tool reached the host"));
        }
        match tool {
            "echo" => Ok(args),
            "slow" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(200).min(10_000);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(json!({ "slept": ms }))
            }
            "failing" => Err(ToolError::new("the failing tool failed, as it always does")),
            "big" => {
                let bytes = args.get("bytes").and_then(Value::as_u64).unwrap_or(1024).min(64 * 1024 * 1024) as usize;
                Ok(Value::String("x".repeat(bytes)))
            }
            "give" => Ok(self.give.lock().expect("host lock").clone()),
            "kv.get" | "kv.put" | "nodes.list" => Ok(json!({ "op": tool, "args": args })),
            other => Err(ToolError::new(format!("the test host has no tool {other}"))),
        }
    }
}

fn tool(name: &str, description: &str) -> ToolDefinition {
    ToolDefinition::new(name, description, json!({ "type": "object" })).replay_safe(true)
}

/// The limits of the rig: a short timeout, the default memory limit and output budget.
pub fn limits() -> Limits {
    Limits { timeout_ms: TIMEOUT_MS, ..Limits::default() }
}

/// A `CodeMode` over the in-test host. Panics with the build hint when the worker binary is missing.
pub fn code_mode(host: Arc<Host>) -> CodeMode {
    let mut screenshot = tool("screenshot", "Returns an image; direct-only");
    screenshot.direct_only = true;
    let tools = vec![
        tool("echo", "Returns its arguments"),
        tool("slow", "Sleeps args.ms milliseconds"),
        tool("failing", "Always fails"),
        tool("big", "Returns a string of args.bytes bytes"),
        tool("give", "Returns the value the test set"),
        tool("Summary_Report", "A capitalized name: catalog order is localeCompare's, not byte order"),
        tool("admin_delete", "Denied by policy"),
        tool("tool_search", "A tool-search control tool"),
        screenshot,
    ];
    CodeMode::builder()
        .limits(limits())
        .tools(tools)
        .namespace("kv", vec![tool("get", "Reads a key"), tool("put", "Writes a key").replay_safe(false)])
        .namespace("nodes", vec![tool("list", "Lists the nodes")])
        .deny(vec!["admin_delete".into()])
        .host(host)
        .warm_workers(2)
        .build()
        .unwrap_or_else(|e| {
            panic!("{e} (run `cargo build -p codemode-worker --features patched-boa --bin codemode-worker` first)")
        })
}
