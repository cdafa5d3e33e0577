//! The wait budget through real workers, on a manual clock: one `wait` covers a tool call that runs far longer than
//! the execution timeout, a budget that passes with nothing settled returns `waiting`, and `maxWaitMs` is checked.
//!
//! The tools move the engine's clock themselves (a call that "takes" 60 s takes no real time), and the tests run on
//! tokio's current-thread runtime, so a tool's task runs only once the driver awaits its collect (each tool is
//! pending once first, so dispatch does not take it as answered on the spot).

use std::sync::Arc;

use async_trait::async_trait;
use codemode::store::ManualClock;
use codemode::{CallContext, ToolError, ToolHost};
use codemode::{CodeMode, CodeModeResult, Limits, RunScope};
use serde_json::{Value, json};

use crate::support::{failure, tool, value};

/// `took({ ms })` moves the clock by `ms` and answers; `stuck({ ms })` moves it by `ms` and never answers.
struct Clocked(Arc<ManualClock>);

#[async_trait]
impl ToolHost for Clocked {
    async fn call_tool(&self, name: &str, args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        // Pending once first: dispatch takes an answer ready on the first poll as instant, and the driver then
        // waits in its collect (where the tool's task runs).
        tokio::task::yield_now().await;
        self.0.advance(args["ms"].as_u64().unwrap_or(0));
        match name {
            "took" => Ok(json!({ "took": args["ms"] })),
            "stuck" => std::future::pending().await,
            other => Err(ToolError::new(format!("no tool {other}"))),
        }
    }
}

fn engine(timeout_ms: u64, max_wait_ms: u64) -> CodeMode {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let schema = json!({ "type": "object", "properties": { "ms": { "type": "integer" } } });
    CodeMode::builder()
        .limits(Limits { timeout_ms, max_wait_ms, ..Limits::default() })
        .tools(vec![tool("took", schema.clone()), tool("stuck", schema)])
        .host(Arc::new(Clocked(clock.clone())))
        .clock(clock)
        .warm_workers(1)
        .build()
        .expect("the engine builds (cargo build -p codemode-worker --features patched-boa --bin codemode-worker)")
}

/// Execs `code`, which must yield first, and returns the run id of its `waiting` result.
async fn yielded(engine: &CodeMode, code: &str) -> String {
    let result = engine.exec(json!({ "title": "hold test", "code": code }), RunScope::default()).await;
    match result {
        CodeModeResult::Waiting(w) => w.run_id,
        other => panic!("expected waiting, got {}", serde_json::to_string_pretty(&other).unwrap()),
    }
}

#[tokio::test]
async fn one_wait_covers_a_tool_call_of_a_minute() {
    let engine = engine(1_000, 120_000);
    // The yield makes the call start inside the wait.
    let run_id = yielded(&engine, "await yield_control('start'); return await took({ ms: 60000 });").await;
    let wait = engine.wait(json!({ "runId": run_id, "maxWaitMs": 90000 }), RunScope::default()).await;
    assert_eq!(value(&wait), json!({ "took": 60000 }), "a 60 s call within a 1 s timeout completes in one wait");
}

#[tokio::test]
async fn the_default_budget_covers_a_call_of_twenty_seconds() {
    let engine = engine(1_000, Limits::default().max_wait_ms);
    let run_id = yielded(&engine, "await yield_control('start'); return await took({ ms: 20000 });").await;
    let wait = engine.wait(json!({ "runId": run_id }), RunScope::default()).await;
    assert_eq!(value(&wait), json!({ "took": 20000 }));
}

#[tokio::test]
async fn a_budget_that_passes_with_nothing_settled_returns_waiting() {
    let engine = engine(1_000, 25_000);
    let run_id = yielded(&engine, "await yield_control('start'); return await stuck({ ms: 30000 });").await;
    let wait = engine.wait(json!({ "runId": run_id, "maxWaitMs": 200 }), RunScope::default()).await;
    match &wait {
        CodeModeResult::Waiting(w) => {
            assert_eq!(w.reason, codemode::WaitReason::PendingTools, "{wait:?}");
            assert_eq!(w.pending_tool_calls.len(), 1, "{wait:?}");
        }
        other => panic!("expected waiting, got {}", serde_json::to_string_pretty(other).unwrap()),
    }
    engine.abort(&run_id).await;
}

#[tokio::test]
async fn a_bad_max_wait_ms_is_invalid_input_naming_the_field() {
    let engine = engine(1_000, 25_000);
    for bad in [json!(-1), json!(1.5), json!("25s"), json!(true)] {
        let wait = engine.wait(json!({ "runId": "cm_x", "maxWaitMs": bad }), RunScope::default()).await;
        let (code, message) = failure(&wait);
        assert_eq!(code, "invalid_input", "{bad}");
        assert!(message.contains("maxWaitMs must be a whole number"), "{bad}: {message}");
    }
}
