//! Transcripts of the run machine: each test scripts the cell, the host work and the clock, and snapshots every
//! command and event of the run, so a change in when the run delivers, parks, times out or finishes shows up here.

use codemode_bridge::{BridgeErrorCode, BridgeMethod, OutputBudget, SettlementValue, WaitReason};
use codemode_run::machine::RunMachine;
use codemode_snapshot::{Checkpoint, PendingRequest, RunOwner};
use codemode_vm::pool::Death;
use codemode_vm::protocol::{CellFailure, CellLimits, GuestOutcome, WorkerMessage};
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
fn a_dispatch_refused_at_the_first_call_kills_the_cell_it_stopped() {
    // The cell waits at its quiescent point for a settlement that never comes: it cannot serve another cell.
    let mut run = fresh(false);
    let transcript =
        Stage::at(1_000).play(&mut run, 30_000, vec![quiescent(vec![call(1, "ping", json!({}))], 1), Beat::Refuse]);
    assert!(!run.cell_reusable(), "a refused run's worker never goes back to the pool");
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
fn a_worker_that_dies_otherwise_fails_with_runtime_unavailable() {
    // A crash or a signal the host did not send is the runtime's failure, not the program's.
    let mut run = fresh(false);
    let transcript =
        Stage::at(1_000).play(&mut run, 30_000, vec![Beat::Die(Death::Other("signal 11 (SIGSEGV)".into()))]);
    assert_snapshot!(transcript);
}

#[test]
fn a_worker_that_breaks_its_confinement_fails_with_runtime_unavailable() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(
        &mut run,
        30_000,
        vec![Beat::Die(Death::Confinement("confinement step seccomp failed: EINVAL".into()))],
    );
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
fn a_required_cell_waits_for_its_host_work_past_the_deadline() {
    // Timeout 1000 ms from 1000: the call takes 5000 ms off the VM, which is not charged, so the program still has
    // its whole allowance when the settlement comes (recv until 7000) and the cell completes instead of parking.
    let mut run = fresh(true);
    let transcript = Stage::at(1_000).play(
        &mut run,
        1_000,
        vec![
            quiescent(vec![call(1, "slow", json!({}))], 1),
            Beat::Tick(5_000),
            Beat::Settle(vec![(1, ok(json!("late")))]),
            returned(json!("late"), 0),
        ],
    );
    assert_snapshot!(transcript);
}

#[test]
fn a_required_cell_still_times_out_on_its_own_computation() {
    let mut run = fresh(true);
    let transcript = Stage::at(1_000).play(
        &mut run,
        1_000,
        vec![
            quiescent(vec![call(1, "slow", json!({}))], 1),
            Beat::Tick(5_000),
            Beat::Settle(vec![(1, ok(json!("late")))]),
            Beat::Hang,
        ],
    );
    assert_snapshot!(transcript);
}

#[test]
fn yield_control_in_a_required_cell_rejects_catchably_and_the_program_goes_on() {
    let mut run = fresh(true);
    let transcript = Stage::at(1_000).play(
        &mut run,
        1_000,
        vec![
            quiescent(vec![request(1, BridgeMethod::Yield, json!({ "reason": "pause" }))], 1),
            returned(json!("caught"), 0),
        ],
    );
    assert_snapshot!(transcript);
    assert!(run.cell_reusable(), "the program finished: its worker goes back to the pool");
}

#[test]
fn a_timer_pending_at_park_runs_again_in_a_restored_run_for_the_delay_it_had_left() {
    // A 5000 ms timer set at 1000 is due at 6000 on the guest's virtual clock. The run parks at 1750, and another
    // process resumes it at 3000: the timer is started again for the 3000 ms it has left, not settled as
    // interrupted (its callback would never run).
    let mut run = fresh(false);
    let mut stage = Stage::at(1_000);
    let parked = stage.play(
        &mut run,
        1_000,
        vec![quiescent(vec![request(1, BridgeMethod::Sleep, json!({ "ms": 5_000 }))], 1), Beat::Expire],
    );
    assert_eq!(run.timer_due(1), Some(6_000));
    let mut checkpoint = Checkpoint::new(
        "cm_00000000-0000-4000-8000-000000000000".into(),
        RunOwner::default(),
        "/* scripted */".into(),
        "tools".into(),
        run.journal().clone(),
        OutputBudget::new(4096),
        WaitReason::PendingTools,
    );
    checkpoint.pending = run
        .pending()
        .map(|(id, method, digest)| PendingRequest {
            id,
            method: method.as_str().into(),
            args_digest: digest,
            due_ms: run.timer_due(id),
        })
        .collect();
    let mut restored =
        RunMachine::restore(&checkpoint, CellLimits::default(), codemode_bridge::ByteCharge::new(u64::MAX, None));
    stage.advance(1_250);
    let resumed = stage.play(
        &mut restored,
        1_000,
        vec![quiescent(vec![], 1), Beat::Settle(vec![(1, ok(json!(null)))]), returned(json!("fired"), 0)],
    );
    assert_snapshot!(format!("{parked}--- restored in another process, wait\n{resumed}"));
}

#[test]
fn a_program_waiting_on_nothing_in_flight_fails_as_internal() {
    let mut run = fresh(false);
    let transcript = Stage::at(1_000).play(&mut run, 30_000, vec![quiescent(vec![], 1)]);
    assert_snapshot!(transcript);
}
