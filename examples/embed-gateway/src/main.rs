//! An embedder's gateway: the MCP servers of the config file named by the first argument, and one tool of its own
//! (`forecast`), offered as `exec` + `wait` over stdio. Its own binary is the worker.

use std::process::ExitCode;
use std::sync::Arc;

use codemode::{CallContext, ToolError};
use codemode::{ToolDefinition, ToolHost};
use codemode_gateway::{GatewayBuilder, Listen, WORKER_ARG};
use serde_json::{Value, json};

// The worker counts the guest's allocations, so that `memoryLimitBytes` holds.
#[global_allocator]
static ALLOCATOR: codemode::worker::CountingAlloc = codemode::worker::CountingAlloc;

/// Runs the embedder's own tools (here: one that makes up a forecast for a city).
struct Forecasts;

#[async_trait::async_trait]
impl ToolHost for Forecasts {
    async fn call_tool(&self, tool: &str, args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        match (tool, args["city"].as_str()) {
            ("forecast", Some(city)) => Ok(json!({ "city": city, "sky": "clear", "highC": 21 })),
            _ => Err(ToolError::with_code("invalid_input", format!("{tool} needs a `city` string"))),
        }
    }
}

fn main() -> ExitCode {
    // First thing, before any thread or runtime exists: started as a worker, serve cells until the host hangs up.
    if std::env::args().nth(1).as_deref() == Some(WORKER_ARG) {
        codemode::worker::run_worker();
    }
    let Some(config) = std::env::args().nth(1) else {
        eprintln!("usage: codemode-embed-gateway-example <gateway.toml>");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime starts");
    if let Err(e) = runtime.block_on(serve(&config)) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

async fn serve(config: &str) -> Result<(), codemode_gateway::Error> {
    let forecast = ToolDefinition::new(
        "forecast",
        "Tomorrow's forecast for a city",
        json!({ "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"] }),
    )
    .read_only_hint(true);
    GatewayBuilder::load(config.as_ref())? // the servers, limits and policy of the file
        .tools(vec![forecast], Arc::new(Forecasts)) // beside them, in every program: `await forecast({ city })`
        .serve(Listen::Stdio { session: None }) // the default worker is this binary, started with WORKER_ARG
        .await
}
