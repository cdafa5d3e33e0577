//! Tools that change while the engine runs (`CodeMode::set_tools`), and nested calls that wait for a person (the
//! host's `CallContext::pause`): the next cell sees new tools, a parked run resumes while every tool it called is
//! unchanged (live and by replay) and fails with `invalid_input` naming the tool otherwise, a resumed run keeps the
//! names it started with (a call of a tool the host no longer has fails catchably, naming it), and a call's wait for
//! a person pauses the deadline on a manual clock, while the program computing meanwhile stays charged.

use std::sync::Arc;

use async_trait::async_trait;
use codemode::store::{Clock, ManualClock};
use codemode::{CallContext, ToolError, ToolHost};
use codemode::{CodeMode, CodeModeResult, Limits, RunScope, ToolDefinition};
use serde_json::{Value, json};

use crate::support::{failure, tool, value};

async fn exec(engine: &CodeMode, code: &str) -> CodeModeResult {
    engine.exec(json!({ "title": "tools change", "code": code }), RunScope::default()).await
}

async fn wait(engine: &CodeMode, run_id: &str) -> CodeModeResult {
    engine.wait(json!({ "runId": run_id }), RunScope::default()).await
}

fn run_id(result: &CodeModeResult) -> String {
    match result {
        CodeModeResult::Waiting(w) => w.run_id.clone(),
        other => panic!("expected waiting, got {}", serde_json::to_string_pretty(other).unwrap()),
    }
}

/// Answers `echo` with its arguments and `greet` with a greeting.
struct Host;

#[async_trait]
impl ToolHost for Host {
    async fn call_tool(&self, tool: &str, args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        match tool {
            "echo" => Ok(args),
            "greet" => Ok(json!(format!("hello {}", args["who"].as_str().unwrap_or("you")))),
            other => Err(ToolError::new(format!("no tool {other}"))),
        }
    }
}

fn echo() -> ToolDefinition {
    tool("echo", json!({ "type": "object" }))
}

fn greet() -> ToolDefinition {
    tool("greet", json!({ "type": "object", "properties": { "who": { "type": "string" } } }))
}

fn engine(replay: bool) -> CodeMode {
    CodeMode::builder()
        .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
        .tools(vec![echo()])
        .host(Arc::new(Host))
        .warm_workers(1)
        .replay_on_resume(replay)
        .build()
        .expect("the engine builds (cargo build -p codemode-worker --features patched-boa --bin codemode-worker)")
}

#[tokio::test]
async fn the_next_cell_sees_a_tool_added_and_not_one_removed() {
    let engine = engine(false);
    let before = exec(&engine, "return typeof greet").await;
    assert_eq!(value(&before), json!("undefined"));
    assert!(!engine.set_tools(vec![echo()]).expect("catalog"), "the same tools change nothing");
    assert!(engine.set_tools(vec![echo(), greet()]).expect("catalog"));
    let surface = engine.surface();
    assert!(surface[0].description.contains("greet"), "the exec description indexes the new tool");
    assert!(engine.catalog().by_callable("greet").is_some());
    let called = exec(&engine, "return await greet({ who: 'Ada' })").await;
    assert_eq!(value(&called), json!("hello Ada"));
    let declared = exec(&engine, "return (await API.read('tools/greet.d.ts')).content").await;
    assert!(value(&declared).as_str().is_some_and(|d| d.contains("greet")), "{}", value(&declared));

    // Removed again: the next cell has no such global.
    assert!(engine.set_tools(vec![echo()]).expect("catalog"));
    let gone = exec(&engine, "return typeof greet").await;
    assert_eq!(value(&gone), json!("undefined"));
}

const CALL_THEN_YIELD: &str = "const a = await echo({ n: 1 }); await yield_control('look'); return a.n";

#[tokio::test]
async fn a_parked_run_resumes_when_the_tools_it_called_are_unchanged() {
    for replay in [false, true] {
        let engine = engine(replay);
        let parked = exec(&engine, CALL_THEN_YIELD).await;
        let id = run_id(&parked);
        assert!(engine.set_tools(vec![echo(), greet()]).expect("catalog"));
        let done = wait(&engine, &id).await;
        assert_eq!(value(&done), json!(1), "replay: {replay}");
    }
}

#[tokio::test]
async fn a_parked_run_fails_naming_a_tool_that_changed_or_went() {
    let changed = vec![tool("echo", json!({ "type": "object", "required": ["extra"] })), greet()];
    for (new_tools, change) in [(changed, "changed its input schema"), (vec![greet()], "was removed")] {
        let engine = engine(false);
        let parked = exec(&engine, CALL_THEN_YIELD).await;
        let id = run_id(&parked);
        assert!(engine.set_tools(new_tools).expect("catalog"));
        let (code, message) = failure(&wait(&engine, &id).await);
        assert_eq!(code, "invalid_input", "{message}");
        assert!(message.contains("echo") && message.contains(change), "{message}");
    }
}

fn remove_files() -> ToolDefinition {
    ToolDefinition::new("delete_files", "Deletes files", json!({ "type": "object" }))
        .source(codemode::ToolSource::Mcp)
        .server("fs")
}

fn engine_in(dir: &std::path::Path, tools: Vec<ToolDefinition>) -> CodeMode {
    CodeMode::builder()
        .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
        .tools(tools)
        .host(Arc::new(Host))
        .state_dir(Some(dir.to_path_buf()))
        .warm_workers(1)
        .build()
        .expect("the engine builds")
}

/// Parks after one call, then calls `greet` and `MCP.fs.deleteFiles`, which it never called before it parked,
/// catching what each throws.
const CALLS_AFTER_THE_PARK: &str = r#"
    await echo({ n: 1 });
    await yield_control('look');
    const names = [typeof greet, typeof MCP.fs?.deleteFiles];
    const outcomes = [];
    for (const call of [() => greet({ who: 'Ada' }), () => MCP.fs.deleteFiles({})]) {
      try { outcomes.push({ value: await call() }); }
      catch (e) { outcomes.push({ code: e.code, message: e.message }); }
    }
    return { names, outcomes };"#;

/// Checks what [`CALLS_AFTER_THE_PARK`] returned under a host that no longer has `greet` nor `fs.delete_files`:
/// both names are still there, and each call fails catchably with a code and a message naming its tool.
fn assert_names_kept_and_calls_refused(done: &CodeModeResult, how: &str) {
    let done = value(done);
    assert_eq!(done["names"], json!(["function", "function"]), "{how}: {done}");
    for (outcome, tool) in done["outcomes"].as_array().expect("outcomes").iter().zip(["greet", "delete_files"]) {
        assert_eq!(outcome["code"], "invalid_input", "{how}: {outcome}");
        let message = outcome["message"].as_str().unwrap_or_default();
        assert!(message.contains(tool) && message.contains("no longer"), "{how}: {message}");
    }
}

#[tokio::test]
async fn a_run_resumed_by_another_engine_without_a_tool_keeps_its_name_and_the_call_fails_catchably() {
    let dir = tempfile::tempdir().expect("tempdir");
    let id = {
        let before = engine_in(dir.path(), vec![echo(), greet(), remove_files()]);
        run_id(&exec(&before, CALLS_AFTER_THE_PARK).await)
    };
    let after = engine_in(dir.path(), vec![echo()]);
    assert_names_kept_and_calls_refused(&wait(&after, &id).await, "another engine");
}

#[tokio::test]
async fn a_run_resumed_after_its_tools_went_keeps_their_names_live_and_by_replay() {
    for replay in [false, true] {
        let engine = CodeMode::builder()
            .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
            .tools(vec![echo(), greet(), remove_files()])
            .host(Arc::new(Host))
            .warm_workers(1)
            .replay_on_resume(replay)
            .build()
            .expect("the engine builds");
        let id = run_id(&exec(&engine, CALLS_AFTER_THE_PARK).await);
        assert!(engine.set_tools(vec![echo()]).expect("catalog"));
        assert_names_kept_and_calls_refused(&wait(&engine, &id).await, &format!("replay: {replay}"));
        // A new cell has the host's names only.
        assert_eq!(value(&exec(&engine, "return typeof greet").await), json!("undefined"));
    }
}

/// A host whose `ask` tool waits for a person: it holds the call's pause while the manual clock moves 10 s.
struct Asking {
    clock: Arc<ManualClock>,
}

#[async_trait]
impl ToolHost for Asking {
    async fn call_tool(&self, tool: &str, _args: Value, cx: CallContext) -> Result<Value, ToolError> {
        assert_eq!(tool, "ask");
        let paused = cx.pause.hold();
        self.clock.advance(10_000);
        drop(paused);
        Ok(json!({ "answer": "yes" }))
    }
}

#[tokio::test]
async fn a_call_waiting_for_a_person_pauses_the_deadline() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let engine = CodeMode::builder()
        .limits(Limits { timeout_ms: 3_000, ..Limits::default() })
        .tools(vec![tool("ask", json!({ "type": "object" }))])
        .host(Arc::new(Asking { clock: clock.clone() }))
        .clock(clock.clone())
        .warm_workers(1)
        .build()
        .expect("the engine builds");
    let code = "const work = () => { let x = 0; for (let i = 0; i < 100000; i++) x += i % 7; return x }; \
                const a = await ask({}); work(); const b = await ask({}); work(); return [a.answer, b.answer]";
    let result = exec(&engine, code).await;
    assert_eq!(value(&result), json!(["yes", "yes"]), "two 10 s questions in a 3 s cell");
    assert_eq!(clock.now_ms(), 1_700_000_020_000);
}

/// A host whose `ask` waits for a person (its pause held) until `tick` has been called `answer_after` times.
struct SlowPerson {
    ticks: std::sync::atomic::AtomicU32,
    answer_after: u32,
    answered: tokio::sync::Notify,
}

#[async_trait]
impl ToolHost for SlowPerson {
    async fn call_tool(&self, tool: &str, _args: Value, cx: CallContext) -> Result<Value, ToolError> {
        match tool {
            "ask" => {
                let _paused = cx.pause.hold();
                let answered = self.answered.notified();
                if self.ticks.load(std::sync::atomic::Ordering::SeqCst) < self.answer_after {
                    answered.await;
                }
                Ok(json!({ "answer": "yes" }))
            }
            _ => {
                if self.ticks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == self.answer_after {
                    self.answered.notify_waiters();
                }
                Ok(json!(null))
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_computing_while_a_person_is_asked_stays_charged_for_its_computing() {
    // Before the pause credited only idle time, this program computed for 2,000 slices (seconds) under a 1 s
    // timeout: the question stayed open, and every collect credited the whole time since the last one.
    let host = SlowPerson { ticks: Default::default(), answer_after: 2_000, answered: tokio::sync::Notify::new() };
    let engine = CodeMode::builder()
        .limits(Limits { timeout_ms: 1_000, ..Limits::default() })
        .tools(vec![tool("ask", json!({ "type": "object" })), tool("tick", json!({ "type": "object" }))])
        .host(Arc::new(host))
        .warm_workers(1)
        .build()
        .expect("the engine builds");
    let code = "const work = () => { let x = 0; for (let i = 0; i < 100000; i++) x += i % 7; return x }; \
                let answered = false; ask({}).then(() => { answered = true }); let slices = 0; \
                while (!answered) { work(); await tick({}); slices++ } return slices";
    let result = exec(&engine, code).await;
    // Its 1 s spent, the program parks at the park time (the question still open) or times out mid-slice.
    match &result {
        CodeModeResult::Waiting(_) => {}
        CodeModeResult::Failed(_) => assert_eq!(failure(&result).0, "timeout"),
        other => panic!("the program ran past its timeout: {}", serde_json::to_string(other).unwrap()),
    }
}

fn counter_scope(result: &CodeModeResult) -> String {
    let telemetry = match result {
        CodeModeResult::Completed(c) => &c.telemetry,
        CodeModeResult::Waiting(w) => &w.telemetry,
        CodeModeResult::Failed(f) => &f.telemetry,
    };
    telemetry.counter_scope.clone()
}

#[tokio::test]
async fn the_counter_scope_is_kept_when_tools_are_appended_and_changes_when_they_are_replaced_or_restored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine_in(dir.path(), vec![echo()]);
    let first = counter_scope(&exec(&engine, "await echo({}); return 1").await);
    assert!(engine.set_tools(vec![echo(), greet()]).expect("the tools change"));
    let appended = exec(&engine, "await greet({}); return 2").await;
    assert_eq!(counter_scope(&appended), first, "appending a tool keeps the counter lifetime");
    assert_eq!(
        match &appended {
            CodeModeResult::Completed(c) => c.telemetry.call_count,
            _ => 0,
        },
        2
    );
    assert!(engine.set_tools(vec![greet()]).expect("the tools change"));
    let parked = exec(&engine, "await greet({}); await yield_control('look'); return 3").await;
    let replaced = counter_scope(&parked);
    assert_ne!(replaced, first, "removing a tool starts a new counter lifetime");
    let id = run_id(&parked);
    drop(engine);

    // Another engine over the same folder restores the parked run with a catalog of its own.
    let restored = engine_in(dir.path(), vec![greet()]);
    let done = wait(&restored, &id).await;
    assert_eq!(value(&done), json!(3));
    let scope = counter_scope(&done);
    assert!(scope.starts_with("cs_") && scope != replaced, "a restored catalog is a new counter lifetime: {scope}");
    assert_eq!(counter_scope(&exec(&restored, "return 4").await), scope, "and the restoring engine's cells share it");
}

/// Seed 001: the counter lifetime stays when a prompt's policy or a subset of the engine's tools narrows the catalog
/// for one call, and a call with a tool of its own counts apart.
#[tokio::test]
async fn narrowing_the_catalog_for_a_call_keeps_the_counter_scope() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine_in(dir.path(), vec![echo(), greet()]);
    let call = |options: codemode::ExecOptions| {
        let engine = engine.clone();
        async move {
            let input = json!({ "title": "count", "code": "await echo({}); return 1" });
            engine.exec_with(input, RunScope::default(), &options).await
        }
    };
    let first = counter_scope(&call(codemode::ExecOptions::default()).await);
    let subset = call(codemode::ExecOptions::default().tools(vec![echo()])).await;
    assert_eq!(counter_scope(&subset), first, "a subset narrows the catalog");
    let policy = codemode::Policy::from_json("policy", &json!({ "rules": [{ "match": "greet", "policy": "deny" }] }))
        .expect("a policy");
    let narrowed = call(codemode::ExecOptions::default().policy(policy)).await;
    assert_eq!(counter_scope(&narrowed), first, "a policy narrows the catalog");
    let own = call(codemode::ExecOptions::default().tools(vec![echo(), tool_of_its_own()])).await;
    assert_ne!(counter_scope(&own), first, "a set with a tool of its own is another catalog");
}

fn tool_of_its_own() -> ToolDefinition {
    ToolDefinition::new("mine", "A tool only one agent has", json!({ "type": "object" })).replay_safe(true)
}
