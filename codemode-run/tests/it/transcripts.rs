//! Transcripts of the run machine: each test scripts the cell, the host work and the clock, and snapshots every
//! command and event of the run, so a change in when the run delivers, parks, times out or finishes shows up here.

use codemode_bridge::{BridgeErrorCode, BridgeMethod, SettlementValue};
use codemode_vm::pool::Death;
use codemode_vm::protocol::{CellFailure, GuestOutcome, WorkerMessage};
use insta::assert_snapshot;
use serde_json::json;

use crate::script::{Beat, Stage, call, fresh, journal_text, ok, quiescent, request, returned, text};

#[test]
fn trivial_completion() {
    let mut run = fresh(false);
    let transcript =
        Stage::at(1_000).play(&mut run, 30_000, vec![Beat::Msg(WorkerMessage::Ready), returned(json!(42), 0)]);
    assert_snapshot!(transcript);
}

#[test]
fn one_tool_call() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(
        &mut run,
        30_000,
        vec![
            quiescent(vec![call(1, "ping", json!({}))], 1),
            Beat::Tick(3),
            Beat::Settle(vec![(1, ok(json!({ "pong": true })))]),
            returned(json!("pong"), 0),
        ],
    );
    assert_snapshot!(transcript);
}

#[test]
fn parallel_calls_settle_out_of_order_and_are_journaled_in_delivery_order() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(
        &mut run,
        30_000,
        vec![
            quiescent(vec![call(1, "a", json!({})), call(2, "b", json!({})), call(3, "c", json!({}))], 3),
            Beat::Tick(5),
            Beat::Settle(vec![(3, ok(json!("c"))), (1, ok(json!("a")))]),
            quiescent(vec![], 1),
            Beat::Tick(7),
            Beat::Settle(vec![(2, ok(json!("b")))]),
            returned(json!(["a", "b", "c"]), 0),
        ],
    );
    assert_snapshot!(format!("{transcript}journal: {}", journal_text(run.journal())));
}

#[test]
fn detached_calls_drain_before_the_run_ends() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(
        &mut run,
        30_000,
        vec![
            Beat::Msg(WorkerMessage::Quiescent {
                requests: vec![call(1, "log", json!({}))],
                outcome: Some(GuestOutcome::Returned { value: json!("early") }),
                open: 1,
                canceled: Vec::new(),
            }),
            Beat::Settle(vec![(1, ok(json!(null)))]),
            quiescent(vec![], 0),
        ],
    );
    assert_snapshot!(transcript);
}

#[test]
fn pending_tools_park_before_the_deadline_and_resume() {
    let mut run = fresh(false);
    let mut stage = Stage::at(1_000);
    let parked =
        stage.play(&mut run, 1_000, vec![quiescent(vec![call(1, "slow", json!({ "ms": 5_000 }))], 1), Beat::Expire]);
    let pending: Vec<_> = run.pending().map(|(id, method, _)| format!("#{id} {}", method.as_str())).collect();
    let resumed = stage.play(
        &mut run,
        1_000,
        vec![Beat::Tick(100), Beat::Settle(vec![(1, ok(json!("done")))]), returned(json!("done"), 0)],
    );
    assert_snapshot!(format!("{parked}pending at park: {pending:?}\n--- wait\n{resumed}"));
}

#[test]
fn a_yield_parks_and_the_wait_answers_it() {
    let mut run = fresh(false);
    let mut stage = Stage::at(1_000);
    let parked = stage.play(
        &mut run,
        30_000,
        vec![text("before"), quiescent(vec![request(1, BridgeMethod::Yield, json!({ "reason": "check" }))], 1)],
    );
    stage.advance(60_000);
    let resumed = stage.play(&mut run, 30_000, vec![returned(json!("after"), 0)]);
    assert_snapshot!(format!("{parked}--- wait\n{resumed}"));
}

#[test]
fn a_resume_without_its_worker_starts_a_replay_with_the_journal() {
    let mut run = fresh(false);
    let mut stage = Stage::at(1_000);
    let parked = stage.play(
        &mut run,
        30_000,
        vec![
            text("one"),
            quiescent(vec![call(1, "ping", json!({}))], 1),
            Beat::Tick(2),
            Beat::Settle(vec![(1, ok(json!("pong")))]),
            text("two"),
            quiescent(vec![request(2, BridgeMethod::Yield, json!({ "reason": null }))], 1),
        ],
    );
    // The engine drops a parked run's worker (replay on resume, or the live window passed).
    run.detach_cell();
    let resumed = stage.play(&mut run, 30_000, vec![quiescent(vec![], 1), returned(json!("end"), 0)]);
    assert_snapshot!(format!("{parked}--- detached, wait\n{resumed}"));
}

#[test]
fn a_worker_out_of_memory_fails_with_memory_limit_exceeded() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(&mut run, 30_000, vec![text("allocating"), Beat::Die(Death::Memory)]);
    assert_snapshot!(transcript);
    assert!(!run.cell_reusable());
}

#[test]
fn a_worker_out_of_stack_fails_with_memory_limit_exceeded() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(&mut run, 30_000, vec![Beat::Die(Death::Stack)]);
    assert_snapshot!(transcript);
}

#[test]
fn a_worker_that_dies_otherwise_fails_with_internal_error() {
    let mut run = fresh(false);
    let transcript =
        Stage::at(1_000).play(&mut run, 30_000, vec![Beat::Die(Death::Other("signal 9 (SIGKILL)".into()))]);
    assert_snapshot!(transcript);
}

#[test]
fn a_worker_past_the_deadline_is_killed_and_the_run_times_out() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(&mut run, 2_000, vec![Beat::Hang]);
    assert_snapshot!(transcript);
}

#[test]
fn a_cell_the_worker_fails_itself_keeps_the_worker() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(
        &mut run,
        30_000,
        vec![Beat::Msg(WorkerMessage::Failed {
            failure: CellFailure::Stalled,
            message: "the program awaits a promise nothing settles".into(),
        })],
    );
    assert_snapshot!(transcript);
    assert!(run.cell_reusable(), "a worker that ended its cell itself goes back to the pool");
}

#[test]
fn a_cancelled_timer_stops_its_host_work() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(
        &mut run,
        30_000,
        vec![
            quiescent(vec![request(1, BridgeMethod::Sleep, json!({ "ms": 10_000 })), call(2, "ping", json!({}))], 2),
            Beat::Settle(vec![(2, ok(json!("pong")))]),
            Beat::Msg(WorkerMessage::Quiescent {
                requests: Vec::new(),
                outcome: Some(GuestOutcome::Returned { value: json!("pong") }),
                open: 0,
                canceled: vec![1],
            }),
        ],
    );
    assert_snapshot!(transcript);
}

#[test]
fn a_broken_pipe_on_settle_kills_the_worker() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(
        &mut run,
        30_000,
        vec![
            quiescent(vec![call(1, "ping", json!({}))], 1),
            Beat::Settle(vec![(1, SettlementValue::err(BridgeErrorCode::ToolError, "down"))]),
            Beat::BrokenPipe,
        ],
    );
    assert_snapshot!(transcript);
}

#[test]
fn a_busy_loop_of_immediate_settlements_parks_at_the_park_time() {
    let mut run = fresh(false);
    let mut stage = Stage::at(1_000);
    // Timeout 1000 ms: the run parks 250 ms before its deadline, at 1750.
    let parked = stage.play(
        &mut run,
        1_000,
        vec![
            quiescent(vec![request(1, BridgeMethod::Load, json!({ "key": "k" }))], 1),
            Beat::Tick(400),
            quiescent(vec![request(2, BridgeMethod::Load, json!({ "key": "k" }))], 1),
            Beat::Tick(400),
        ],
    );
    let resumed = stage.play(&mut run, 1_000, vec![returned(json!("loaded"), 0)]);
    assert_snapshot!(format!("{parked}--- wait\n{resumed}"));
}

#[test]
fn await_results_waits_until_the_deadline_itself() {
    let mut run = fresh(true);
    let transcript =
        Stage::at(1_000).play(&mut run, 1_000, vec![quiescent(vec![call(1, "slow", json!({}))], 1), Beat::Expire]);
    assert_snapshot!(transcript);
}

#[test]
fn a_program_waiting_on_nothing_in_flight_fails_as_internal() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(&mut run, 30_000, vec![quiescent(vec![], 1)]);
    assert_snapshot!(transcript);
}
