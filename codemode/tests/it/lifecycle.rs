//! The run lifecycle of issue 14: required cells never park, the cap counts only runs with host work, a cancelled or
//! aborted wait releases its run, a refused wait leaves it parked, a cell refused at its first dispatch leaves no
//! broken worker behind, and timers survive a resume in another process.
//! That `timeoutMs` is wall-clock time is proven without a clock by codemode-worker's `budget::` tests.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use codemode::{CodeMode, CodeModeResult, Limits, RunScope};
use serde_json::json;

use crate::support::{TestHost, engine, engine_with, exec, failure, tool, tools, value, wait};

fn run_id(result: &CodeModeResult) -> String {
    match result {
        CodeModeResult::Waiting(w) => w.run_id.clone(),
        other => panic!("expected waiting, got {}", serde_json::to_string_pretty(other).unwrap()),
    }
}

fn required(code: &str) -> serde_json::Value {
    json!({ "title": "required", "code": code, "awaitResults": true })
}

/// Lets the engine's tasks run until `engine` holds no parked run (a wait has taken it), without sleeping.
async fn until_resuming(engine: &CodeMode) {
    while engine.stats().parked_runs > 0 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_required_cell_waits_past_its_deadline_for_host_work_and_never_returns_waiting() {
    // The call takes longer than the whole timeoutMs, off the VM: the cell still completes.
    let (engine, _) = engine_with(Limits { timeout_ms: 500, ..Limits::default() }, false);
    let r = engine.exec(required("return (await slow({ms: 1200})).slept"), RunScope::default()).await;
    assert_eq!(value(&r), json!(1200));
}

#[tokio::test]
async fn yield_control_in_a_required_cell_rejects_catchably_and_the_program_finishes() {
    let (engine, host) = engine();
    let code = "const slow_call = slow({ ms: 20, tag: 'kept' }); \
                let caught; try { await yield_control('pause'); } catch (e) { caught = [e.code, e.message]; } \
                return { caught, after: (await slow_call).tag }";
    let r = engine.exec(required(code), RunScope::default()).await;
    let v = value(&r);
    assert_eq!(v["caught"][0], "invalid_input", "{v}");
    assert!(v["caught"][1].as_str().is_some_and(|m| m.contains("cannot park a cell run with awaitResults")), "{v}");
    assert_eq!(v["after"], "kept", "the pending call was not cancelled: {v}");
    assert_eq!(host.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Uncaught, it fails the program as any rejected call does, and nothing is parked.
    let r = engine.exec(required("await yield_control('pause'); return 1"), RunScope::default()).await;
    let (_, error) = failure(&r);
    assert!(error.contains("yield_control cannot park a cell run with awaitResults"), "{error}");
    assert_eq!(engine.stats().parked_runs, 0);
}

#[tokio::test]
async fn cells_without_host_work_run_with_64_runs_parked() {
    let (engine, _) = engine_with(Limits { timeout_ms: 2_000, ..Limits::default() }, true);
    for _ in 0..64 {
        run_id(&exec(&engine, "await yield_control(); return 1").await);
    }
    assert_eq!(engine.stats().parked_runs, 64);
    // No host work: no place under the cap needed.
    assert_eq!(value(&exec(&engine, "return 1").await), json!(1));
    // The first dispatch of host work is where a cell needs one.
    let r = exec(&engine, "await echo({}); return 2").await;
    assert_eq!(failure(&r), ("invalid_input".into(), "too many suspended code mode runs.".into()));
}

#[tokio::test]
async fn a_cell_refused_at_its_first_dispatch_leaves_no_broken_worker_in_the_pool() {
    // At most two idle workers, taken first in, first out: three cells after the refusal reach every worker the
    // pool holds, the refused cell's included if it had gone back.
    let engine = CodeMode::builder()
        .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
        .tools(tools())
        .host(Arc::new(TestHost::default()))
        .warm_workers(1)
        .max_idle_workers(2)
        .replay_on_resume(true)
        .build()
        .expect("engine");
    for _ in 0..64 {
        run_id(&exec(&engine, "await yield_control(); return 1").await);
    }
    // Refused at its first dispatch: the worker stopped mid-program, waiting for the answer to `echo`.
    let r = exec(&engine, "const before = 1; await echo({}); return before").await;
    assert_eq!(failure(&r), ("invalid_input".into(), "too many suspended code mode runs.".into()));
    let other = RunScope { session_id: Some("another-session".into()), ..RunScope::default() };
    for i in 0..3 {
        let code = json!({ "title": "after the refusal", "code": format!("return {i} + 1") });
        assert_eq!(value(&engine.exec(code, other.clone()).await), json!(i + 1), "cell {i} after the refusal");
    }
}

#[tokio::test]
async fn abort_during_a_wait_ends_it_aborted_with_the_final_telemetry() {
    let (engine, _) = engine_with(Limits { timeout_ms: 1_000, ..Limits::default() }, false);
    let first = exec(&engine, "await add({a: 1, b: 2}); return (await slow({ms: 60000})).tag").await;
    let id = run_id(&first);
    let waiting = tokio::spawn({
        let (engine, id) = (engine.clone(), id.clone());
        async move { wait(&engine, &id).await }
    });
    until_resuming(&engine).await;
    let aborted = engine.abort(&id).await;
    assert_eq!(failure(&aborted).0, "aborted");
    let CodeModeResult::Failed(f) = &aborted else { unreachable!() };
    assert_eq!(f.telemetry.call_count, 2, "the final telemetry counts the run's calls");
    let waited = waiting.await.expect("the wait task ends");
    assert_eq!(failure(&waited).0, "aborted");
    assert_eq!(failure(&wait(&engine, &id).await).1, "code mode run is unavailable or expired.");
}

#[tokio::test]
async fn a_cancelled_wait_cancels_its_run_and_its_tool_calls() {
    let (engine, host) = engine_with(Limits { timeout_ms: 1_000, ..Limits::default() }, false);
    let first = exec(&engine, "return (await slow({ms: 60000})).tag").await;
    let id = run_id(&first);
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let waiting = tokio::spawn({
        let (engine, id) = (engine.clone(), id.clone());
        async move {
            let cancelled = async move {
                let _ = cancelled.await;
            };
            engine.wait_until(json!({ "runId": id }), RunScope::default(), cancelled).await
        }
    });
    until_resuming(&engine).await;
    cancel.send(()).expect("the wait listens");
    let r = waiting.await.expect("the wait task ends");
    assert_eq!(failure(&r).0, "aborted");
    assert_eq!(failure(&wait(&engine, &id).await).1, "code mode run is unavailable or expired.");
    assert_eq!(engine.stats().parked_runs, 0);
    assert_eq!(host.calls.load(Ordering::SeqCst), 1, "the call is not run again");
}

fn build_in(dir: &std::path::Path, tools: Vec<codemode::ToolDefinition>) -> CodeMode {
    CodeMode::builder()
        .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
        .tools(tools)
        .host(Arc::new(TestHost::default()))
        .state_dir(Some(dir.to_path_buf()))
        .warm_workers(1)
        .build()
        .expect("engine")
}

#[tokio::test]
async fn a_wait_under_another_catalog_leaves_the_run_for_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = build_in(dir.path(), tools());
    let first = exec(&home, "await echo({}); await yield_control(); return 'resumed'").await;
    let id = run_id(&first);
    // Another process with one tool whose definition changed.
    let mut changed = tools();
    changed[0] = tool("echo", json!({ "type": "object", "properties": { "x": { "type": "string" } } }));
    let elsewhere = build_in(dir.path(), changed);
    let (code, error) = failure(&wait(&elsewhere, &id).await);
    assert_eq!(code, "invalid_input");
    assert!(error.contains("echo") && error.contains("changed its input schema"), "{error}");
    assert_eq!(value(&wait(&home, &id).await), json!("resumed"));
}

#[tokio::test]
async fn a_timer_pending_at_park_fires_after_a_resume_in_another_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = {
        let before = build_in(dir.path(), tools());
        exec(
            &before,
            "const p = new Promise(r => setTimeout(() => r('fired'), 50)); await yield_control(); return await p",
        )
        .await
        // `before` is dropped here, with its timer task.
    };
    let after = build_in(dir.path(), tools());
    assert_eq!(value(&wait(&after, &run_id(&first)).await), json!("fired"));
}

#[tokio::test]
async fn ending_a_session_ends_its_runs_and_cancels_their_calls_and_leaves_other_sessions_alone() {
    let (engine, host) = crate::support::gated_engine();
    let session = |id: &str| RunScope { session_id: Some(id.to_owned()), ..RunScope::default() };
    let cell = |code: &str| json!({ "title": "session", "code": code });
    let parked = run_id(&engine.exec(cell("await yield_control('look'); return 1"), session("s1")).await);
    // A run parked while its call is still running (timeoutMs 2 s; `hold` never answers).
    let holding = engine.exec(cell("hold({}); await yield_control('look'); return 2"), session("s1")).await;
    let holding = run_id(&holding);
    let kept = run_id(&engine.exec(cell("await yield_control('look'); return 3"), session("s2")).await);
    assert_eq!(engine.stats().parked_runs, 3);
    let mut held = host.held.subscribe();
    held.wait_for(|n| *n == 1).await.expect("the hold call started");

    assert_eq!(engine.end_session("s1").await.expect("the runs are listed"), 2);
    let mut dropped = host.dropped.subscribe();
    dropped.wait_for(|n| *n == 1).await.expect("the held call was cancelled");
    for run in [&parked, &holding] {
        let r = engine.wait(json!({ "runId": run }), session("s1")).await;
        let (_, error) = failure(&r);
        assert!(error.contains("unavailable or expired"), "{error}");
    }
    assert_eq!(engine.stats().parked_runs, 1);
    assert_eq!(value(&engine.wait(json!({ "runId": kept }), session("s2")).await), json!(3));
    assert_eq!(engine.end_session("s1").await.expect("nothing left"), 0);
}

/// Timers that came due while a run was parked in a state folder fire in the order they were due once another
/// engine restores it (each used to become its own zero-delay sleep, settling in any order).
#[tokio::test]
async fn timers_that_came_due_while_parked_fire_in_their_order_after_a_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(codemode::store::ManualClock::new(1_000_000));
    let build = || {
        CodeMode::builder()
            .limits(Limits { timeout_ms: 5_000, ..Limits::default() })
            .tools(tools())
            .host(Arc::new(TestHost::default()))
            .state_dir(Some(dir.path().to_path_buf()))
            .clock(clock.clone())
            .warm_workers(1)
            .build()
            .expect("the engine builds")
    };
    let code = "const order = []; \
        for (const [name, ms] of [['d', 800], ['a', 500], ['c', 700], ['b', 600], ['e', 650]]) \
          setTimeout(() => order.push(name), ms); \
        const done = new Promise((r) => setTimeout(r, 900)); \
        await yield_control('later'); await done; return order";
    let first = build();
    let parked = exec(&first, code).await;
    let CodeModeResult::Waiting(w) = &parked else { panic!("expected waiting, got {parked:?}") };
    drop(first);
    clock.advance(60_000);
    let restored = build();
    let done = wait(&restored, &w.run_id).await;
    assert_eq!(value(&done), json!(["a", "b", "e", "c", "d"]));
}

/// Seed 003: `clearTimeout` removes a timer without starting a host timer, also when the program sets and clears it
/// in one stretch; a run resumed by replay makes and clears it again, and no settlement of it was journaled.
#[tokio::test]
async fn a_timer_set_and_cleared_at_once_is_never_started_and_replays() {
    let (engine, _) = engine_with(Limits { timeout_ms: 5_000, ..Limits::default() }, true);
    let code = "const t = setTimeout(() => console.log('fired'), 20); clearTimeout(t); \
        await new Promise((r) => setTimeout(r, 50)); console.log('slept'); \
        await yield_control('pause'); return 'done'";
    let parked = exec(&engine, code).await;
    let CodeModeResult::Waiting(w) = &parked else { panic!("expected waiting, got {parked:?}") };
    let done = wait(&engine, &w.run_id).await;
    assert_eq!(value(&done), json!("done"), "{done:?}");
    let printed = serde_json::to_string(&parked).unwrap() + &serde_json::to_string(&done).unwrap();
    assert!(printed.contains("slept") && !printed.contains("fired"), "{printed}");
}

/// Seed 000: a nested `agents_wait({ awaitResults: true })` (or a shell `exec` with it) makes an ordinary cell
/// required: its yield is refused catchably and its waits on host work never park it.
#[tokio::test]
async fn a_nested_call_with_await_results_makes_the_cell_required() {
    let host = Arc::new(TestHost::default());
    let mut defs = tools();
    defs.push(tool("agents_wait", json!({ "type": "object" })));
    let engine = CodeMode::builder()
        .limits(Limits { timeout_ms: 300, ..Limits::default() })
        .tools(defs)
        .host(host)
        .warm_workers(1)
        .build()
        .expect("the engine builds");
    let code = "await agents_wait({ awaitResults: true }); \
        let y; try { await yield_control('later'); y = 'yielded'; } catch (e) { y = e.code; } \
        const s = await slow({ ms: 400 }); return { y, slept: s.slept }";
    let result = exec(&engine, code).await;
    assert_eq!(value(&result), json!({ "y": "invalid_input", "slept": 400 }), "{result:?}");
}

/// Seed 000: ending the owning agent run (a turn cancelled, its catalog closed at teardown) ends its parked runs and
/// cancels their calls without a `wait`; another agent run of the same session keeps its own.
#[tokio::test]
async fn ending_an_agent_run_ends_its_runs_and_leaves_the_sessions_others_alone() {
    let (engine, host) = crate::support::gated_engine();
    let turn = |id: &str| RunScope {
        session_id: Some("s1".to_owned()),
        agent_run_id: Some(id.to_owned()),
        ..RunScope::default()
    };
    let cell = |code: &str| json!({ "title": "turn", "code": code });
    let holding = engine.exec(cell("hold({}); await yield_control('look'); return 1"), turn("a1")).await;
    let holding = run_id(&holding);
    let kept = run_id(&engine.exec(cell("await yield_control('look'); return 2"), turn("a2")).await);
    let mut held = host.held.subscribe();
    held.wait_for(|n| *n == 1).await.expect("the hold call started");

    assert_eq!(engine.end_agent_run(&turn("a1")).await.expect("the runs are listed"), 1);
    let mut dropped = host.dropped.subscribe();
    dropped.wait_for(|n| *n == 1).await.expect("the held call was cancelled");
    let (_, error) = failure(&engine.wait(json!({ "runId": holding }), turn("a1")).await);
    assert!(error.contains("unavailable or expired"), "{error}");
    assert_eq!(value(&engine.wait(json!({ "runId": kept }), turn("a2")).await), json!(2));
    assert_eq!(engine.end_agent_run(&turn("a1")).await.expect("nothing left"), 0);
}

/// Seed 003: continuations run before queued requests refill the free slots, so a queued timer a continuation
/// clears is never started, and the run resumes by replay without diverging.
#[tokio::test]
async fn a_queued_timer_cleared_by_a_continuation_is_never_started() {
    let (engine, _) = engine_with(Limits { timeout_ms: 5_000, ..Limits::default() }, true);
    // Sixteen timers fill the in-flight slots; the seventeenth waits in the guest's queue until the first fires,
    // whose callback clears it. Timers that settle together may run in either order, so the program sorts.
    let code = "const fired = []; let queued; \
        for (let i = 0; i < 16; i++) setTimeout(() => { fired.push(i); if (i === 0) clearTimeout(queued); }, 10 + i); \
        queued = setTimeout(() => fired.push('queued'), 1); \
        await new Promise((r) => setTimeout(r, 60)); \
        await yield_control('pause'); return fired.sort((a, b) => a - b)";
    let parked = exec(&engine, code).await;
    let CodeModeResult::Waiting(w) = &parked else { panic!("expected waiting, got {parked:?}") };
    let done = wait(&engine, &w.run_id).await;
    let expected: Vec<u32> = (0..16).collect();
    assert_eq!(value(&done), json!(expected), "{done:?}");
}
