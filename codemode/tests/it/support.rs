//! The test tool host and helpers shared by the facade's integration tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use codemode::{CallContext, ToolError, ToolHost};
use codemode::{CodeMode, CodeModeResult, Limits, RunScope, ToolDefinition};
use serde_json::{Value, json};

/// A tool host with a few real tools: `echo`, `add`, `fail`, `slow` (sleeps `ms`), `meet` (answers once `n` calls of
/// it are in flight at once), `hold` (answers never; says when it started and when its future was dropped),
/// `DOMException` (a name the guest reserves), and a call counter.
#[derive(Default)]
pub struct TestHost {
    pub calls: AtomicUsize,
    pub concurrent: AtomicUsize,
    pub max_concurrent: AtomicUsize,
    /// `meet` calls that have arrived so far.
    pub met: tokio::sync::watch::Sender<usize>,
    /// `hold` calls started so far.
    pub held: tokio::sync::watch::Sender<usize>,
    /// `hold` calls whose future was dropped (cancelled) so far.
    pub dropped: tokio::sync::watch::Sender<usize>,
}

/// Counts a dropped `hold` call when its future is dropped.
struct Dropped<'a>(&'a tokio::sync::watch::Sender<usize>);

impl Drop for Dropped<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n += 1);
    }
}

#[async_trait]
impl ToolHost for TestHost {
    async fn call_tool(&self, tool: &str, args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match tool {
            "echo" | "lookup" | "agents_wait" => Ok(args),
            "docs.search" | "skills.list" | "skills.read" => Ok(json!({ "op": tool, "args": args })),
            "add" => Ok(json!(args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0))),
            "DOMException" => Ok(json!("the DOMException tool")),
            "fail" => Err(ToolError::new("the tool failed on purpose")),
            "explode" => panic!("the tool host fails while running the call"),
            "slow" => {
                let now = self.concurrent.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_concurrent.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(50))).await;
                self.concurrent.fetch_sub(1, Ordering::SeqCst);
                Ok(json!({ "slept": args["ms"], "tag": args["tag"] }))
            }
            "meet" => {
                // Dispatched one at a time, the first call would wait here until the cell's deadline.
                let now = self.concurrent.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_concurrent.fetch_max(now, Ordering::SeqCst);
                let n = args["n"].as_u64().unwrap_or(1) as usize;
                self.met.send_modify(|met| *met += 1);
                let _ = self.met.subscribe().wait_for(|met| *met >= n).await;
                self.concurrent.fetch_sub(1, Ordering::SeqCst);
                Ok(json!({ "tag": args["tag"] }))
            }
            "hold" => {
                let _dropped = Dropped(&self.dropped);
                self.held.send_modify(|n| *n += 1);
                std::future::pending::<()>().await;
                Ok(json!(null))
            }
            other => Err(ToolError::new(format!("no tool {other}"))),
        }
    }
}

pub fn tool(name: &str, parameters: Value) -> ToolDefinition {
    ToolDefinition::new(name, format!("test tool {name}"), parameters).replay_safe(true)
}

pub fn tools() -> Vec<ToolDefinition> {
    vec![
        tool("echo", json!({ "type": "object" })),
        tool(
            "add",
            json!({ "type": "object", "properties": { "a": { "type": "number" }, "b": { "type": "number" } }, "required": ["a", "b"] }),
        ),
        tool("fail", json!({ "type": "object" })),
        tool("slow", json!({ "type": "object", "properties": { "ms": { "type": "integer" }, "tag": {} } })),
    ]
}

pub fn engine_with(limits: Limits, replay: bool) -> (CodeMode, Arc<TestHost>) {
    let host = Arc::new(TestHost::default());
    let engine = CodeMode::builder()
        .limits(limits)
        .tools(tools())
        .host(host.clone())
        .warm_workers(1)
        .replay_on_resume(replay)
        .build()
        .expect("the engine builds (is codemode-worker built? cargo build -p codemode-worker --features patched-boa --bin codemode-worker)");
    (engine, host)
}

/// [`engine`] with two more tools that answer on events instead of after a time: `meet` and `hold`.
pub fn gated_engine() -> (CodeMode, Arc<TestHost>) {
    let host = Arc::new(TestHost::default());
    let mut tools = tools();
    tools.push(tool("meet", json!({ "type": "object", "properties": { "n": { "type": "integer" }, "tag": {} } })));
    tools.push(tool("hold", json!({ "type": "object" })));
    let engine = CodeMode::builder()
        .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
        .tools(tools)
        .host(host.clone())
        .warm_workers(1)
        .build()
        .expect("the engine builds (is codemode-worker built? cargo build -p codemode-worker --features patched-boa --bin codemode-worker)");
    (engine, host)
}

pub fn engine() -> (CodeMode, Arc<TestHost>) {
    let limits = Limits { timeout_ms: 2_000, ..Limits::default() };
    engine_with(limits, false)
}

pub async fn exec(engine: &CodeMode, code: &str) -> CodeModeResult {
    engine.exec(json!({ "title": "test cell", "code": code }), RunScope::default()).await
}

pub async fn wait(engine: &CodeMode, run_id: &str) -> CodeModeResult {
    engine.wait(json!({ "runId": run_id }), RunScope::default()).await
}

/// The completed value, or a panic showing the whole result.
pub fn value(result: &CodeModeResult) -> Value {
    match result {
        CodeModeResult::Completed(c) => c.value.clone(),
        other => panic!("expected completed, got {}", serde_json::to_string_pretty(other).unwrap()),
    }
}

/// `(code, error)` of a failed result, or a panic showing the whole result.
/// A failed result's `errorKind` (which for a code's plain case is the code) and message.
pub fn failure(result: &CodeModeResult) -> (String, String) {
    match result {
        CodeModeResult::Failed(f) => {
            assert_eq!(f.error_kind.code(), f.code, "a kind reports under its own code");
            (f.error_kind.as_str().to_owned(), f.error.clone())
        }
        other => panic!("expected failed, got {}", serde_json::to_string_pretty(other).unwrap()),
    }
}

pub fn texts(result: &CodeModeResult) -> Vec<String> {
    result
        .output()
        .iter()
        .map(|item| match item {
            codemode::OutputItem::Text { text } => text.clone(),
            codemode::OutputItem::Json { value } => value.to_string(),
            codemode::OutputItem::Attachment { block } => block.to_string(),
        })
        .collect()
}
