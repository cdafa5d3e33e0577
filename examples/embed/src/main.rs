//! An embedder's program: one tool, one cell, the result printed as JSON. Its own binary is the worker.
//!
//! Everything below this header is README's "Using the library" snippet, word for word (a test compares them).

use std::process::ExitCode;
use std::sync::Arc;

use codemode::{CallContext, CodeMode, RunScope, ToolDefinition, ToolError, ToolHost, WorkerCommand};
use serde_json::{Value, json};

// The worker counts the guest's allocations, so that `memoryLimitBytes` holds.
#[global_allocator]
static ALLOCATOR: codemode::worker::CountingAlloc = codemode::worker::CountingAlloc;

/// The argument this binary gets when the worker pool starts it as a worker.
const WORKER_MARKER: &str = "__codemode_worker";

/// Runs the tools the guest calls (here: one that echoes its arguments).
struct Host;

#[async_trait::async_trait]
impl ToolHost for Host {
    async fn call_tool(&self, tool: &str, args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        Ok(json!({ "tool": tool, "args": args }))
    }
}

fn main() -> ExitCode {
    // First thing, before any thread or runtime exists: started as a worker, serve cells until the host hangs up.
    if std::env::args().nth(1).as_deref() == Some(WORKER_MARKER) {
        codemode::worker::run_worker();
    }
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime starts");
    if let Err(e) = runtime.block_on(run()) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let tools = vec![
        ToolDefinition::new("ping", "Answers with the tool name and its arguments", json!({ "type": "object" }))
            .replay_safe(true),
    ];
    let engine = CodeMode::builder()
        .tools(tools)
        .host(Arc::new(Host))
        .worker(WorkerCommand::current_exe(&[WORKER_MARKER])?) // this binary, started with the marker
        .build()?; // checks one worker's hello, starts the pool; fails closed with a message that names the fix
    let surface: Vec<String> = engine.surface().into_iter().map(|tool| tool.name).collect();
    println!("the model sees: {}", surface.join(", ")); // exec, wait (+ direct-only tools)
    println!("fast paths: {:?}", engine.stats().fast_paths); // none against crates.io's Boa (README)
    let result = engine
        .exec(json!({ "title": "Ping once", "code": "return await ping({ n: 1 })" }), RunScope::default())
        .await;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}
