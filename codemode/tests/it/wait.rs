//! Suspend and resume: yield_control, pending tools at the deadline, timers, live and replay paths, store scoping.

use std::sync::Arc;

use codemode::{CodeMode, CodeModeResult, Limits, RunScope};
use serde_json::json;

use crate::support::{TestHost, engine, engine_with, exec, failure, texts, tools, value, wait};

fn run_id(result: &CodeModeResult) -> String {
    match result {
        CodeModeResult::Waiting(w) => w.run_id.clone(),
        other => panic!("expected waiting, got {}", serde_json::to_string_pretty(other).unwrap()),
    }
}

const YIELD_PROGRAM: &str = "text('one'); const a = await add({a: 1, b: 2}); const r = await yield_control('check'); \
     text('two'); const b = await Promise.all([add({a: a, b: 1}), slow({ms: 10, tag: 'x'})]); \
     return { a, r, b, rnd: typeof Math.random(), now: Date.now() > 0 }";

async fn yield_round_trip(replay: bool) {
    let (engine, host) = engine_with(Limits { timeout_ms: 2_000, ..Limits::default() }, replay);
    let first = exec(&engine, YIELD_PROGRAM).await;
    assert_eq!(texts(&first), vec!["one"]);
    let id = run_id(&first);
    let second = wait(&engine, &id).await;
    assert_eq!(texts(&second), vec!["two"], "output before the wait is not delivered again");
    assert_eq!(
        value(&second),
        json!({ "a": 3, "r": { "status": "yielded", "reason": "check" }, "b": [4, { "slept": 10, "tag": "x" }], "rnd": "number", "now": true })
    );
    assert_eq!(host.calls.load(std::sync::atomic::Ordering::SeqCst), 3, "replay never re-executes a tool");
    let again = wait(&engine, &id).await;
    assert_eq!(failure(&again), ("invalid_input".into(), "code mode run is unavailable or expired.".into()));
}

#[tokio::test]
async fn yield_and_resume_on_the_live_path() {
    yield_round_trip(false).await;
}

#[tokio::test]
async fn yield_and_resume_by_replay() {
    yield_round_trip(true).await;
}

#[tokio::test]
async fn a_parked_runs_worker_is_reset_and_its_next_cell_sees_nothing_of_the_parked_program() {
    // No warm spare and one idle worker at most: the cell after the park runs in the very worker that held the
    // parked program, which the park reset (its context dropped) and returned to the pool.
    let engine = CodeMode::builder()
        .limits(Limits { timeout_ms: 5_000, ..Limits::default() })
        .tools(tools())
        .host(Arc::new(TestHost::default()))
        .warm_workers(0)
        .max_idle_workers(1)
        .replay_on_resume(true)
        .build()
        .expect("the engine builds (is codemode-worker built? cargo build -p codemode-worker --features patched-boa --bin codemode-worker)");
    const POISON: &str = "globalThis.leaked = 1; Object.prototype.polluted = 'yes'; Array.prototype.push = () => 0; \
         const r = await yield_control('x'); return [typeof leaked, ({}).polluted, [1].push(2), r.status]";
    let first = exec(&engine, POISON).await;
    let id = run_id(&first);
    assert_eq!(engine.stats().idle_workers, 1, "the parked run's worker went back to the pool");
    let spawned = engine.stats().spawn_waits;
    let probe = exec(&engine, "return [typeof leaked, ({}).polluted, [1].push(2)]").await;
    assert_eq!(value(&probe), json!(["undefined", null, 2]), "the reset worker's next context is fresh");
    assert_eq!(engine.stats().spawn_waits, spawned, "the probe ran in the reset worker, not in a new one");
    // The parked run resumes by replay in a fresh context of its own, poisoned again only there.
    let resumed = wait(&engine, &id).await;
    assert_eq!(value(&resumed), json!(["number", "yes", 0, "yielded"]));
}

#[tokio::test]
async fn pending_tools_park_at_the_deadline_and_complete_on_wait() {
    for replay in [false, true] {
        let (engine, _) = engine_with(Limits { timeout_ms: 500, ..Limits::default() }, replay);
        let first = exec(&engine, "const v = await slow({ms: 400, tag: 'late'}); return v.tag").await;
        let id = run_id(&first);
        if let CodeModeResult::Waiting(w) = &first {
            assert_eq!(w.pending_tool_calls.len(), 1);
            assert_eq!(w.pending_tool_calls[0].method, "callValue");
        }
        // Under load a wait may park again before the call settles; it must complete within a few waits.
        let mut next = wait(&engine, &id).await;
        for _ in 0..5 {
            match &next {
                CodeModeResult::Waiting(w) => next = wait(&engine, &w.run_id.clone()).await,
                _ => break,
            }
        }
        assert_eq!(value(&next), json!("late"), "replay={replay}");
    }
}

#[tokio::test]
async fn a_busy_loop_of_immediate_calls_parks_and_resumes_with_nothing_lost() {
    // `add` answers at once, so the run is never idle: it must still park at the deadline, and the settlements it
    // holds undelivered at that moment must reach the program on the next wait.
    const PROGRAM: &str = "const start = Date.now(); let sum = 0; \
         while (Date.now() - start < 700) sum = await add({ a: sum, b: 1 }); return sum";
    for replay in [false, true] {
        let (engine, host) = engine_with(Limits { timeout_ms: 500, ..Limits::default() }, replay);
        let mut result = exec(&engine, PROGRAM).await;
        let mut waits = 0;
        while let CodeModeResult::Waiting(w) = &result {
            waits += 1;
            assert!(waits < 10, "the run keeps parking");
            result = wait(&engine, &w.run_id.clone()).await;
        }
        assert!(waits >= 1, "the run parked at least once (replay={replay})");
        let calls = host.calls.load(std::sync::atomic::Ordering::SeqCst) as i64;
        assert_eq!(value(&result), json!(calls), "every call's result reached the program (replay={replay})");
    }
}

#[tokio::test]
async fn a_run_parked_past_its_live_window_gives_its_worker_back_and_resumes_by_replay() {
    let host = std::sync::Arc::new(crate::support::TestHost::default());
    let engine = codemode::CodeMode::builder()
        .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
        .tools(crate::support::tools())
        .host(host.clone())
        .warm_workers(1)
        .live_window(std::time::Duration::from_millis(200))
        .build()
        .expect("the engine builds");
    let first = exec(&engine, YIELD_PROGRAM).await;
    let id = run_id(&first);
    assert_eq!((engine.stats().parked_runs, engine.stats().parked_with_worker), (1, 1));
    let mut waited = 0;
    while engine.stats().parked_with_worker > 0 {
        assert!(waited < 50, "the sweeper never took the parked run's worker");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        waited += 1;
    }
    assert_eq!(engine.stats().parked_runs, 1, "the run itself stays parked");
    let second = wait(&engine, &id).await;
    assert_eq!(value(&second)["a"], json!(3));
    assert_eq!(host.calls.load(std::sync::atomic::Ordering::SeqCst), 3, "replay never re-executes a tool");
}

#[tokio::test]
async fn parked_runs_keep_workers_only_up_to_the_live_cap_and_the_others_resume_by_replay() {
    let host = Arc::new(TestHost::default());
    let engine = CodeMode::builder()
        .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
        .tools(tools())
        .host(host.clone())
        .warm_workers(1)
        .max_live_parked(1)
        .build()
        .expect("the engine builds");
    let ids: Vec<String> =
        [exec(&engine, YIELD_PROGRAM).await, exec(&engine, YIELD_PROGRAM).await, exec(&engine, YIELD_PROGRAM).await]
            .iter()
            .map(run_id)
            .collect();
    assert_eq!((engine.stats().parked_runs, engine.stats().parked_with_worker), (3, 1), "one live place");
    // The live run resuming frees its place for the next run that parks.
    let live = wait(&engine, &ids[0]).await;
    assert_eq!(value(&live)["a"], json!(3));
    assert_eq!((engine.stats().parked_runs, engine.stats().parked_with_worker), (2, 0));
    run_id(&exec(&engine, YIELD_PROGRAM).await);
    assert_eq!((engine.stats().parked_runs, engine.stats().parked_with_worker), (3, 1));
    for id in &ids[1..] {
        assert_eq!(value(&wait(&engine, id).await)["a"], json!(3), "resumed by replay");
    }
    assert_eq!(host.calls.load(std::sync::atomic::Ordering::SeqCst), 10, "replay never re-executes a tool");
}

#[tokio::test]
async fn an_owner_past_its_share_of_suspended_runs_fails_at_its_first_call_and_others_still_park() {
    let engine = CodeMode::builder()
        .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
        .tools(tools())
        .host(Arc::new(TestHost::default()))
        .warm_workers(1)
        .max_suspended_runs_per_owner(1)
        .build()
        .expect("the engine builds");
    let scope = |who: &str| RunScope { session_id: Some(who.to_owned()), ..RunScope::default() };
    let cell = json!({ "title": "parks", "code": "await yield_control('p'); return 1" });
    run_id(&engine.exec(cell.clone(), scope("alice")).await);
    run_id(&engine.exec(cell.clone(), scope("bob")).await);
    let refused = engine.exec(cell.clone(), scope("alice")).await;
    let (code, message) = failure(&refused);
    assert_eq!(code, "invalid_input");
    assert!(message.contains("its share (max_suspended_runs) of the 64 places"), "{message}");
    // The refusal took nothing from anyone else (nor broke the worker it ran in).
    run_id(&engine.exec(cell, scope("carol")).await);
}

#[tokio::test]
async fn timers_survive_suspension_and_clear_timeout_cancels() {
    let (engine, _) = engine_with(Limits { timeout_ms: 1_000, ..Limits::default() }, true);
    let code = "const t = setTimeout(() => text('never'), 5000); await yield_control('pause'); clearTimeout(t); \
                await new Promise(r => setTimeout(r, 20)); return 'done'";
    let first = exec(&engine, code).await;
    let second = wait(&engine, &run_id(&first)).await;
    assert_eq!(value(&second), json!("done"));
    assert!(texts(&second).is_empty());
}

#[tokio::test]
async fn await_results_keeps_the_exec_open() {
    // Without awaitResults the exec would park 250 ms before its 2 s deadline, before the call settles.
    let (engine, _) = engine_with(Limits { timeout_ms: 2_000, ..Limits::default() }, false);
    let r = engine
        .exec(
            json!({ "title": "wait inline", "code": "return (await slow({ms: 1780})).slept", "awaitResults": true }),
            RunScope::default(),
        )
        .await;
    assert_eq!(value(&r), json!(1780));
}

#[tokio::test]
async fn waits_are_scoped_to_their_session() {
    let (engine, _) = engine();
    let scope = RunScope { session_id: Some("a".into()), ..RunScope::default() };
    let first = engine.exec(json!({ "title": "t", "code": "await yield_control(); return 1" }), scope.clone()).await;
    let id = run_id(&first);
    let other = RunScope { session_id: Some("b".into()), ..RunScope::default() };
    let r = engine.wait(json!({ "runId": id }), other).await;
    assert_eq!(failure(&r), ("invalid_input".into(), "code mode run belongs to a different session.".into()));
    let r = engine.wait(json!({ "runId": id }), scope).await;
    assert_eq!(value(&r), json!(1));
}

#[tokio::test]
async fn an_authenticated_caller_sees_another_owner_s_run_as_unknown() {
    let (engine, _) = engine();
    let alice = RunScope { session_id: Some("jwt:alice".into()), authenticated: true, ..RunScope::default() };
    let bob = RunScope { session_id: Some("jwt:bob".into()), authenticated: true, ..RunScope::default() };
    let first = engine.exec(json!({ "title": "t", "code": "await yield_control(); return 1" }), alice.clone()).await;
    let id = run_id(&first);
    let unknown = engine.wait(json!({ "runId": "cm_00000000-0000-4000-8000-000000000000" }), bob.clone()).await;
    let foreign = engine.wait(json!({ "runId": id }), bob).await;
    assert_eq!(failure(&unknown), ("invalid_input".into(), "code mode run is unavailable or expired.".into()));
    assert_eq!(failure(&foreign), failure(&unknown), "another's run reads exactly as an unknown one");
    let r = engine.wait(json!({ "runId": id }), alice).await;
    assert_eq!(value(&r), json!(1), "the owner still resumes it");
}

#[tokio::test]
async fn store_and_load_keep_values_across_cells() {
    let (engine, _) = engine();
    let r = exec(&engine, "await store('k', {n: 1}); return 1").await;
    assert_eq!(value(&r), json!(1));
    let r = exec(&engine, "return await load('k')").await;
    assert_eq!(value(&r), json!({ "n": 1 }));
}

#[tokio::test]
async fn abort_drops_the_run() {
    let (engine, _) = engine();
    let first = exec(&engine, "await yield_control(); return 1").await;
    let id = run_id(&first);
    assert_eq!(failure(&engine.abort(&id).await).0, "aborted");
    assert_eq!(failure(&wait(&engine, &id).await).0, "invalid_input");
}

#[tokio::test]
async fn unknown_runs_fail_as_unavailable() {
    let (engine, _) = engine();
    let r = wait(&engine, "cm_00000000-0000-4000-8000-000000000000").await;
    assert_eq!(failure(&r), ("invalid_input".into(), "code mode run is unavailable or expired.".into()));
}

#[tokio::test]
async fn a_run_survives_a_restart_and_in_flight_calls_are_interrupted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = Limits { timeout_ms: 1_500, ..Limits::default() };
    let build = || {
        codemode::CodeMode::builder()
            .limits(limits.clone())
            .tools(crate::support::tools())
            .host(std::sync::Arc::new(crate::support::TestHost::default()))
            .state_dir(Some(dir.path().to_path_buf()))
            .warm_workers(1)
            .build()
            .expect("engine")
    };
    let code = "const a = await add({a: 1, b: 1}); \
                try { await slow({ms: 5000}) } catch (e) { return { a, code: e.code, message: e.message } } return 'ran'";
    let first = {
        let before = build();
        exec(&before, code).await
        // `before` is dropped here: its workers and in-flight calls die with it, as in a crash.
    };
    let id = run_id(&first);
    let after = build();
    let resumed = wait(&after, &id).await;
    let v = value(&resumed);
    assert_eq!(v["a"], json!(2));
    assert_eq!(v["code"], "interrupted");
    assert!(v["message"].as_str().unwrap().contains("interrupted by restart"), "{v}");
}

#[tokio::test]
async fn restart_safe_cells_call_only_replay_safe_tools() {
    let (engine, _) = engine();
    let r = engine
        .exec(json!({ "title": "t", "code": "try { await store('k', 1) } catch (e) { return e.code }", "restartSafe": true }), RunScope::default())
        .await;
    assert_eq!(value(&r), json!("invalid_input"));
}

#[tokio::test]
async fn checkpoints_over_max_snapshot_bytes_fail() {
    let limits = Limits { timeout_ms: 2_000, max_snapshot_bytes: 1_024, ..Limits::default() };
    let (engine, _) = engine_with(limits, false);
    let r = exec(
        &engine,
        "for (let i = 0; i < 40; i++) await echo({ pad: 'x'.repeat(10) }); await yield_control(); return 1",
    )
    .await;
    assert_eq!(failure(&r).0, "snapshot_limit_exceeded");
}

#[tokio::test]
async fn a_cancelled_exec_is_aborted_with_its_tool_calls() {
    let (engine, host) = crate::support::gated_engine();
    // `hold` never answers: the exec returns only because it was cancelled, once the call had started.
    let input = json!({ "title": "cancel", "code": "await hold({}); text('never'); return 1" });
    let mut held = host.held.subscribe();
    let cancel = async move {
        let _ = held.wait_for(|n| *n == 1).await;
    };
    let r = engine.exec_until(input, RunScope::default(), cancel).await;
    assert_eq!(failure(&r).0, "aborted", "{r:?}");
    assert_eq!(engine.stats().parked_runs, 0, "nothing is parked");
    // The tool call was dropped mid-flight: its future is dropped with the run (a guard turns a hang into a failure).
    let mut dropped = host.dropped.subscribe();
    let guard = std::time::Duration::from_secs(60);
    assert!(tokio::time::timeout(guard, dropped.wait_for(|n| *n == 1)).await.is_ok(), "the held call was cancelled");
    // A cell that ends before its caller cancels is unaffected.
    let quick = json!({ "title": "quick", "code": "return 2" });
    let r = engine.exec_until(quick, RunScope::default(), std::future::pending()).await;
    assert_eq!(value(&r), json!(2));
}
