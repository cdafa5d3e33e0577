//! The paused clock on the machine, with a clock the test moves: while a call waits for a person's decision the
//! deadline and the park time stand still, and the cell resumes with exactly its unused budget.

use codemode_bridge::{ApprovalDecision, BridgeRequest, PendingApproval, WaitReason};
use codemode_run::machine::{Command, Event, RunMachine};
use codemode_snapshot::AskedCall;
use serde_json::json;

use crate::script::{call, fresh, send};

fn asked(request: BridgeRequest) -> AskedCall {
    let approval = PendingApproval {
        call_id: format!("bridge:callValue:{}", request.id),
        tool: "echo".into(),
        path: "echo".into(),
        preview: "{}".into(),
    };
    AskedCall { request, approval, deferred: false }
}

/// Begins at `t0` with `timeout_ms`, plays the start and one quiescent point with a call to `echo`, and returns the
/// machine waiting in its first collect.
fn asking(t0: u64, timeout_ms: u64) -> RunMachine {
    let mut m = fresh(false);
    m.begin(t0, timeout_ms);
    send(&mut m, "the start goes out");
    assert!(matches!(m.poll(), Some(Command::Recv { .. })));
    let request = call(1, "echo", json!({}));
    m.handle(Event::Worker(codemode_vm::protocol::WorkerMessage::Quiescent {
        requests: vec![request.clone()],
        outcome: None,
        open: 1,
        canceled: Vec::new(),
    }));
    let Some(Command::Dispatch(dispatched, digest)) = m.poll() else { panic!("the call is dispatched") };
    m.dispatched(dispatched.id, dispatched.call.method(), digest, None);
    m.approval_asked(asked(request), t0 + 100);
    m
}

#[test]
fn an_approval_pauses_the_deadline_for_exactly_its_length() {
    let t0 = 10_000;
    let mut m = asking(t0, 1_000);
    // The first collect waits until the park time, 250 ms before the deadline.
    assert_eq!(m.poll(), Some(Command::Collect { until_ms: Some(t0 + 750), drain: false }));
    // It ends at the park time with the person still deciding: the run does not park; the 650 ms since the
    // question count for nothing, so the next collect waits 650 ms longer.
    m.handle(Event::Collected { since_ms: t0, now_ms: t0 + 750, timed_out: true, idle: false });
    assert_eq!(m.poll(), Some(Command::Collect { until_ms: Some(t0 + 750 + 650), drain: false }));
    assert_eq!(m.deadline_ms(), t0 + 1_000 + 650);
    // The decision comes 5 s after the question: the deadline moved by exactly that.
    m.approval_decided(1, ApprovalDecision::Approve, t0 + 5_100, true);
    assert_eq!(m.deadline_ms(), t0 + 1_000 + 5_000);
    // Time after the decision is the cell's again: a collect that ends past the moved park time parks.
    m.handle(Event::Collected { since_ms: t0 + 750, now_ms: t0 + 5_751, timed_out: true, idle: false });
    assert_eq!(m.poll(), Some(Command::Park(WaitReason::PendingTools)));
    assert_eq!(m.deadline_ms(), t0 + 6_000, "no credit beyond the pause");
}

#[test]
fn a_deferred_approval_parks_the_run_and_stops_the_pause() {
    let t0 = 10_000;
    let mut m = asking(t0, 1_000);
    assert!(matches!(m.poll(), Some(Command::Collect { .. })));
    m.approval_decided(1, ApprovalDecision::Defer, t0 + 300, true);
    assert_eq!(m.deadline_ms(), t0 + 1_200, "the 200 ms of asking are credited");
    m.handle(Event::Collected { since_ms: t0, now_ms: t0 + 300, timed_out: false, idle: false });
    assert_eq!(m.poll(), Some(Command::Park(WaitReason::Approval)));
    // The next wait dispatches the deferred call again, for its answer or its approver.
    m.begin(t0 + 60_000, 1_000);
    assert!(matches!(m.poll(), Some(Command::Dispatch(r, _)) if r.id == 1));
    assert_eq!(m.deadline_ms(), t0 + 61_000, "parked time earns no credit");
}

#[test]
fn an_approval_credits_only_the_time_the_program_sits_idle() {
    // The program fires `echo` (asked about) without awaiting it, then computes in slices between `tick` calls.
    let t0 = 10_000;
    let mut m = fresh(false);
    m.begin(t0, 1_000);
    send(&mut m, "the start goes out");
    assert!(matches!(m.poll(), Some(Command::Recv { .. })));
    let mut clock = t0;
    let mut next_id = 1;
    let quiescent = |m: &mut RunMachine, requests: Vec<BridgeRequest>| {
        let open = requests.len() as u32;
        m.handle(Event::Worker(codemode_vm::protocol::WorkerMessage::Quiescent {
            requests,
            outcome: None,
            open,
            canceled: Vec::new(),
        }));
        while let Some(Command::Dispatch(request, digest)) = m.poll() {
            m.dispatched(request.id, request.call.method(), digest, None);
        }
    };
    let ask = call(next_id, "echo", json!({}));
    next_id += 1;
    quiescent(&mut m, vec![ask.clone(), call(next_id, "tick", json!({}))]);
    m.approval_asked(asked(ask), clock);
    // Each round: `tick` answers after 10 ms of waiting, the program then computes 400 ms and calls it again.
    for round in 1..=3 {
        m.handle(Event::Settled(codemode_bridge::Settlement { id: next_id, value: crate::script::ok(json!(1)) }));
        m.handle(Event::Collected { since_ms: clock, now_ms: clock + 10, timed_out: false, idle: false });
        clock += 10;
        send(&mut m, &format!("round {round}: the settlement goes out"));
        let Some(Command::Recv { deadline_ms }) = m.poll() else { panic!("round {round}: the program runs") };
        assert_eq!(deadline_ms, t0 + 1_000 + round * 10, "round {round}: only the waiting is credited");
        clock += 400;
        next_id += 1;
        quiescent(&mut m, vec![call(next_id, "tick", json!({}))]);
    }
    // 1,200 ms of computing under a 1,000 ms timeout, with the question still open: the deadline has passed.
    assert!(m.deadline_ms() < clock, "the computing stays charged");
}
