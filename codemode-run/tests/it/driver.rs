//! The driver over the scripted fake: `exec` on a [`FakeCell`] runs the real driver, dispatch, catalog, tool host
//! and run store, with no worker process, and a run that parks leaves the fake behind.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use codemode_bridge::{BridgeMethod, CallContext, CodeModeResult, ErrorCode, ToolError, ToolHost, WaitReason};
use codemode_catalog::{Catalog, CatalogOptions, ToolDefinition};
use codemode_config::Limits;
use codemode_run::{ActivityConfig, Entropy, ExecInput, Inner, LiveRun, RunOptions, RunScope};
use codemode_snapshot::{ManualClock, RunStore, SessionStore};
use codemode_vm::pool::{PoolConfig, WorkerCommand, WorkerPool};
use serde_json::{Value, json};

use crate::script::{FakeCell, call, quiescent_message, request, returned_message};

/// Answers `echo` with its arguments.
struct Echo;

#[async_trait]
impl ToolHost for Echo {
    async fn call_tool(&self, tool: &str, args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        match tool {
            "echo" => Ok(json!({ "echoed": args })),
            other => Err(ToolError::new(format!("no tool {other}"))),
        }
    }
}

/// Seeds every run with 7.
struct Seven;

impl Entropy for Seven {
    fn seed(&self) -> u64 {
        7
    }
}

/// A run context with one tool, `echo`, at clock 1,000, whose pool never starts a worker: every cell is a fake.
fn inner() -> Arc<Inner> {
    let limits = Limits::default();
    let echo = ToolDefinition::new("echo", "Echoes its arguments", json!({ "type": "object" }));
    let catalog = Catalog::build(vec![echo], CatalogOptions::from_limits(&limits)).expect("a catalog");
    let pool = WorkerPool::new(PoolConfig {
        command: WorkerCommand { program: "/nonexistent/codemode-worker".into(), args: Vec::new() },
        warm: 0,
        max_idle: 0,
        idle_ttl: codemode_vm::pool::DEFAULT_IDLE_TTL,
        memory_limit_bytes: 64 * 1024 * 1024,
        instructions: 1_000_000,
        globals: None,
        confinement: Default::default(),
        require_fast_paths: false,
        admission: None,
    });
    let clock = Arc::new(ManualClock::new(1_000));
    Arc::new(Inner {
        tools_digest: "scripted".into(),
        projection: Arc::new(codemode_run::projection_of(&catalog)),
        catalog,
        host: Arc::new(Echo),
        pool,
        globals: None,
        runs: RunStore::<LiveRun>::in_memory(),
        sessions: SessionStore::in_memory(),
        replay_on_resume: false,
        live_places: None,
        results: Arc::default(),
        clock,
        entropy: Arc::new(Seven),
        scopes: Arc::default(),
        progress: None,
        waits: Arc::default(),
        journals: codemode_bridge::SharedBytes::new(u64::MAX),
        approver: None,
        redactor: Arc::default(),
        activity: ActivityConfig::default(),
        limits,
    })
}

fn input(code: &str) -> ExecInput {
    ExecInput { code: code.into(), restart_safe: false, await_results: false }
}

/// `exec` on a fake that plays `replies`: the result and the lines the fake was sent.
async fn exec_playing(inner: &Arc<Inner>, replies: Vec<codemode_vm::protocol::WorkerMessage>) -> (Value, Vec<String>) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let cell = FakeCell::playing(replies, sent.clone());
    let result =
        codemode_run::exec_on(inner.clone(), input("/* scripted */"), RunScope::default(), RunOptions::default(), cell)
            .await;
    let sent = sent.lock().expect("the sent log").clone();
    (serde_json::to_value(&result).expect("a result serializes"), sent)
}

#[tokio::test]
async fn exec_drives_a_scripted_cell_through_dispatch_to_the_tool_host() {
    let inner = inner();
    let replies = vec![
        quiescent_message(vec![call(1, "echo", json!({ "n": 1 }))], 1),
        returned_message(json!({ "done": true }), 0),
    ];
    let (result, sent) = exec_playing(&inner, replies).await;
    assert_eq!(result["status"], "completed", "{result:#}");
    assert_eq!(result["value"], json!({ "done": true }));
    assert_eq!(result["telemetry"]["callCount"], 1);
    assert_eq!(
        sent,
        [
            "start (skip 0 outputs; journal: seed 7, clock 1000, 0 requests)",
            r#"settle @1000 [#1 ok {"echoed":{"n":1}}]"#,
        ]
    );
    assert!(inner.runs.is_empty(), "a run that ended leaves nothing parked");
}

#[tokio::test]
async fn a_call_to_a_tool_the_catalog_lacks_settles_as_an_error_in_the_program() {
    let inner = inner();
    let replies = vec![quiescent_message(vec![call(1, "missing", json!({}))], 1), returned_message(json!("caught"), 0)];
    let (result, sent) = exec_playing(&inner, replies).await;
    assert_eq!(result["status"], "completed", "{result:#}");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent[1].starts_with("settle @1000 [#1 err "), "{sent:?}");
}

#[tokio::test]
async fn a_cell_that_dies_fails_the_run() {
    let inner = inner();
    let (result, sent) = exec_playing(&inner, Vec::new()).await;
    assert_eq!(result["status"], "failed", "{result:#}");
    assert_eq!(sent.len(), 1, "only the start was sent: {sent:?}");
}

#[tokio::test]
async fn a_scripted_run_parks_without_its_cell_and_is_aborted() {
    let inner = inner();
    let replies = vec![quiescent_message(vec![request(1, BridgeMethod::Yield, json!({ "reason": "later" }))], 1)];
    let (result, _) = exec_playing(&inner, replies).await;
    assert_eq!(result["status"], "waiting", "{result:#}");
    assert_eq!(result["reason"], serde_json::to_value(WaitReason::Yield).expect("a reason"));
    assert_eq!(inner.runs.len(), 1, "the run is parked");
    let run_id = result["runId"].as_str().expect("a run id").to_owned();
    let aborted = codemode_run::abort(inner.clone(), &run_id).await;
    let CodeModeResult::Failed(failed) = aborted else { panic!("the abort fails the run: {aborted:?}") };
    assert_eq!(failed.code, ErrorCode::Aborted);
    let gone = codemode_run::wait(inner.clone(), &run_id, RunScope::default()).await;
    assert!(matches!(gone, CodeModeResult::Failed(_)), "an aborted run is gone: {gone:?}");
    assert!(inner.runs.is_empty());
}
