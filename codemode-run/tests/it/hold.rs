//! The wait budget on the machine, with a clock the test moves: a `wait` holds a run whose program waits on host work
//! until something settles or the budget passes, the time held is not execution time, progress restarts the
//! budget, and new output hands the run back at its ordinary park time.

use codemode_bridge::{OutputItem, Settlement, WaitReason};
use codemode_run::machine::{Command, Event, RunMachine};
use codemode_vm::protocol::WorkerMessage;
use serde_json::json;

use crate::script::{call, fresh, ok, send};

/// Begins at `t0` with `timeout_ms` (and the wait budget `budget_ms`, if any), plays the start and one quiescent
/// point with a call to `slow`, and returns the machine before its first collect.
fn waiting_on_a_call(t0: u64, timeout_ms: u64, budget_ms: Option<u64>) -> RunMachine {
    let mut m = fresh(false);
    m.begin(t0, timeout_ms);
    if let Some(budget_ms) = budget_ms {
        m.hold(t0, budget_ms);
    }
    send(&mut m, "the start goes out");
    assert!(matches!(m.poll(), Some(Command::Recv { .. })));
    m.handle(Event::Worker(WorkerMessage::Quiescent {
        requests: vec![call(1, "slow", json!({}))],
        outcome: None,
        open: 1,
        canceled: Vec::new(),
    }));
    let Some(Command::Dispatch(dispatched, digest)) = m.poll() else { panic!("the call is dispatched") };
    m.dispatched(dispatched.id, dispatched.call.method(), digest, None);
    m
}

#[test]
fn without_a_budget_the_run_parks_at_its_park_time() {
    let t0 = 10_000;
    let mut m = waiting_on_a_call(t0, 1_000, None);
    assert_eq!(m.poll(), Some(Command::Collect { until_ms: Some(t0 + 750), drain: false }));
    m.handle(Event::Collected { since_ms: t0, now_ms: t0 + 750, timed_out: true, idle: false });
    assert_eq!(m.poll(), Some(Command::Park(WaitReason::PendingTools)));
}

#[test]
fn a_wait_holds_the_run_until_its_budget_passes_and_parks_only_then() {
    let t0 = 10_000;
    let mut m = waiting_on_a_call(t0, 1_000, Some(25_000));
    assert_eq!(m.poll(), Some(Command::Collect { until_ms: Some(t0 + 25_000), drain: false }));
    m.handle(Event::Collected { since_ms: t0, now_ms: t0 + 25_000, timed_out: true, idle: false });
    assert_eq!(m.poll(), Some(Command::Park(WaitReason::PendingTools)));
}

#[test]
fn time_held_is_not_execution_time() {
    let t0 = 10_000;
    let mut m = waiting_on_a_call(t0, 1_000, Some(25_000));
    assert!(matches!(m.poll(), Some(Command::Collect { .. })));
    // The call takes 20 s, far past the 1 s the program may run: it settles within the budget and is delivered.
    m.handle(Event::Settled(Settlement { id: 1, value: ok(json!("done")) }));
    m.handle(Event::Collected { since_ms: t0, now_ms: t0 + 20_000, timed_out: false, idle: false });
    send(&mut m, "the settlement goes to the cell");
    // The program's own second of running is intact: its deadline moved by the 20 s held.
    assert_eq!(m.deadline_ms(), t0 + 21_000);
    assert_eq!(m.poll(), Some(Command::Recv { deadline_ms: t0 + 21_000 }));
}

#[test]
fn a_budget_of_zero_holds_nothing() {
    let t0 = 10_000;
    let mut m = waiting_on_a_call(t0, 1_000, Some(0));
    assert_eq!(m.poll(), Some(Command::Collect { until_ms: Some(t0 + 750), drain: false }));
}

#[test]
fn progress_restarts_the_budget() {
    let t0 = 10_000;
    let mut m = waiting_on_a_call(t0, 1_000, Some(25_000));
    assert_eq!(m.poll(), Some(Command::Collect { until_ms: Some(t0 + 25_000), drain: false }));
    // The call reported progress 20 s in (the client was sent a notification): the driver restarts the budget and
    // ends the collect, and the next one waits 25 s from then.
    m.extend_hold(t0 + 20_000);
    m.handle(Event::Collected { since_ms: t0, now_ms: t0 + 20_000, timed_out: false, idle: false });
    assert_eq!(m.poll(), Some(Command::Collect { until_ms: Some(t0 + 45_000), drain: false }));
    m.handle(Event::Collected { since_ms: t0 + 20_000, now_ms: t0 + 45_000, timed_out: true, idle: false });
    assert_eq!(m.poll(), Some(Command::Park(WaitReason::PendingTools)));
}

#[test]
fn new_output_hands_the_run_back_at_its_ordinary_park_time() {
    let t0 = 10_000;
    let mut m = waiting_on_a_call(t0, 1_000, Some(25_000));
    assert!(matches!(m.poll(), Some(Command::Collect { .. })));
    m.handle(Event::Settled(Settlement { id: 1, value: ok(json!("first")) }));
    m.handle(Event::Collected { since_ms: t0, now_ms: t0 + 5_000, timed_out: false, idle: false });
    send(&mut m, "the settlement goes to the cell");
    assert!(matches!(m.poll(), Some(Command::Recv { .. })));
    // The program prints, then waits on a second call: the model can act on the output, so the run is no longer
    // held; it parks at its park time (moved by the 5 s held before).
    m.handle(Event::Worker(WorkerMessage::Output(OutputItem::Text { text: "halfway".into() })));
    assert!(matches!(m.poll(), Some(Command::Recv { .. })));
    m.handle(Event::Worker(WorkerMessage::Quiescent {
        requests: vec![call(2, "slow", json!({}))],
        outcome: None,
        open: 1,
        canceled: Vec::new(),
    }));
    let Some(Command::Dispatch(dispatched, digest)) = m.poll() else { panic!("the call is dispatched") };
    m.dispatched(dispatched.id, dispatched.call.method(), digest, None);
    assert_eq!(m.poll(), Some(Command::Collect { until_ms: Some(t0 + 5_750), drain: false }));
}

#[test]
fn a_new_wait_without_a_budget_holds_nothing() {
    let t0 = 10_000;
    let mut m = waiting_on_a_call(t0, 1_000, Some(25_000));
    assert!(matches!(m.poll(), Some(Command::Collect { .. })));
    m.handle(Event::Collected { since_ms: t0, now_ms: t0 + 25_000, timed_out: true, idle: false });
    assert_eq!(m.poll(), Some(Command::Park(WaitReason::PendingTools)));
    // `begin` clears the budget: a resume that sets none (a library caller's choice) parks at its park time.
    m.begin(t0 + 30_000, 1_000);
    assert_eq!(m.poll(), Some(Command::Collect { until_ms: Some(t0 + 30_750), drain: false }));
}
