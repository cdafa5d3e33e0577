//! The driver proper: does the I/O the [`RunMachine`](crate::machine::RunMachine) asks for (writes to and reads
//! from the cell, dispatches requests, gathers settled host work) until the machine stops the run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use codemode_bridge::{BridgeMethod, ErrorCode, FailurePhase, Settlement};
use codemode_snapshot::Slot;
use codemode_vm::pool::Death;
use codemode_vm::protocol::HostMessage;
use tokio::task::AbortHandle;

use crate::Inner;
use crate::machine::{Command, Ending, Event, NO_PARK};

use super::approvals::{ApprovalParts, Links, take_notices};
use super::park::record_dispatch;
use super::{Cell, LiveRun, Refusal, RunParts, Stop, complete, fail};

/// A dispatched request until its settlement is delivered: method, argument digest, and its task while it runs.
pub(crate) type Pending = (BridgeMethod, u64, Option<AbortHandle>);

/// Where dispatch records a request: its method and digest in the machine, its task (if any) in the driver.
pub(crate) struct PendingSink<'a> {
    pub(super) methods: &'a mut BTreeMap<u32, (BridgeMethod, u64)>,
    pub(super) handles: &'a mut BTreeMap<u32, AbortHandle>,
}

impl PendingSink<'_> {
    /// Records request `id`.
    pub(crate) fn insert(&mut self, id: u32, (method, digest, handle): Pending) {
        self.methods.insert(id, (method, digest));
        if let Some(handle) = handle {
            self.handles.insert(id, handle);
        }
    }
}

/// Carries out the machine's commands until the run stops, then records the calls settled at once not yet recorded.
pub(super) async fn drive<C: Cell>(inner: &Arc<Inner>, run: &mut LiveRun<C>, slot: &mut Option<Slot<LiveRun>>) -> Stop {
    let stop = drive_commands(inner, run, slot).await;
    record_settled(run);
    stop
}

/// Records the spans and metrics of the calls settled at once since the last time.
pub(super) fn record_settled<C>(run: &mut LiveRun<C>) {
    for settled in run.settled.drain(..) {
        settled.record();
    }
}

pub(super) async fn drive_commands<C: Cell>(
    inner: &Arc<Inner>,
    run: &mut LiveRun<C>,
    slot: &mut Option<Slot<LiveRun>>,
) -> Stop {
    // The cell's deadline as a timer that stays registered across its reports, set again only when it moves.
    let mut deadline: Option<Deadline> = None;
    loop {
        let Some(command) = run.machine.poll() else {
            return Stop::Done(Box::new(fail(
                inner,
                run,
                ErrorCode::InternalError,
                FailurePhase::Host,
                "code mode run stopped without an ending".into(),
            )));
        };
        match command {
            Command::Send(message) => {
                if let HostMessage::Start(start) = &message
                    && !start.journal.rounds.is_empty()
                {
                    run.activity.replaying(&start.journal);
                }
                let sent = match run.worker.as_mut() {
                    Some(worker) => Cell::send(worker, &message).await,
                    None => Err("the run has no worker".into()),
                };
                run.machine.sent(message);
                if let Err(e) = sent {
                    run.machine.handle(Event::SendFailed(e));
                }
                // While the program goes on with what was sent, the calls it settled are recorded.
                record_settled(run);
            }
            Command::Dispatch(request, digest) => {
                if let Some(claimed) = slot.as_ref().filter(|s| inner.runs.records(s))
                    && let Err(e) = record_dispatch(inner, run, claimed, &request, digest.0).await
                {
                    let message = format!("the run's call was not dispatched: {e}");
                    run.machine.handle(Event::Refused { code: e.code(), phase: FailurePhase::Host, message });
                    continue;
                }
                if slot.is_none() {
                    match inner.runs.reserve_for(&run.owner) {
                        Ok(reserved) => *slot = Some(reserved),
                        Err(e) => {
                            let (code, message) = (e.code(), e.to_string());
                            run.machine.handle(Event::Refused { code, phase: FailurePhase::Host, message });
                            continue;
                        }
                    }
                }
                let id = request.id;
                run.activity.started(inner, &request, inner.clock.now_ms());
                // Dispatch sets `dispatch_started` when it hands a call to its tool host.
                let dispatch_started = std::mem::take(&mut run.machine.dispatch_started);
                let progress = run.activity.progress_hook(inner.progress.clone());
                let mut sink = PendingSink { methods: &mut run.machine.pending, handles: &mut run.handles };
                let mut asked = Vec::new();
                let options = &run.approvals.options;
                let links = run.approvals.links.get_or_insert_with(Links::new);
                let parts = RunParts {
                    run_id: &run.run_id,
                    span: &run.span,
                    session: run.owner.session_id.as_deref(),
                    restart_safe: run.machine.restart_safe,
                    replay_safe: &mut run.machine.replay_safe,
                    untrusted_calls: &mut run.machine.untrusted_calls,
                    owner: &run.owner,
                    scope: &run.scope,
                    dispatch_started: &mut run.machine.dispatch_started,
                    in_flight: &mut run.in_flight,
                    pending: &mut sink,
                    yield_request: &mut run.machine.yield_request,
                    ready: &mut run.machine.ready,
                    effects: &mut run.machine.effects,
                    host_failed: &mut run.machine.host_failed,
                    asked: &mut asked,
                    call_names: &mut run.call_names,
                    settled: &mut run.settled,
                    tool_contracts: &mut run.tool_contracts,
                    approvals: ApprovalParts {
                        approver: if options.approver.is_some() { &options.approver } else { &inner.approver },
                        answers: &options.answers,
                        title: &options.title,
                        approved: &run.approvals.approved,
                        turn: &links.turn,
                        notices: &links.notices,
                        holds: (&links.holds, &inner.clock),
                    },
                    progress,
                    redactor: &inner.redactor,
                };
                let refused = crate::dispatch::dispatch(inner, parts, request, digest);
                if run.machine.dispatch_started {
                    run.activity.handed(id);
                }
                run.machine.dispatch_started |= dispatch_started;
                settled(inner, run, id);
                if let Err(Refusal(code, phase, message)) = refused {
                    run.machine.handle(Event::Refused { code, phase, message });
                }
                if !asked.is_empty() {
                    let now_ms = inner.clock.now_ms();
                    for call in asked {
                        run.machine.approval_asked(call, now_ms);
                    }
                }
            }
            Command::Cancel(id) => {
                if let Some(handle) = run.handles.remove(&id) {
                    handle.abort();
                }
            }
            Command::Recv { deadline_ms } => {
                let Some(worker) = run.worker.as_mut() else {
                    run.machine.handle(Event::Died(Death::Other("the run has no worker".into())));
                    continue;
                };
                let left = Duration::from_millis(deadline_ms.saturating_sub(inner.clock.now_ms()));
                let timer = Deadline::at(&mut deadline, tokio::time::Instant::now() + left);
                let event = tokio::select! {
                    biased;
                    received = Cell::recv(worker) => match received {
                        Err(death) => Event::Died(death),
                        Ok(message) => Event::Worker(message),
                    },
                    () = timer => Event::Timeout,
                };
                run.machine.handle(event);
            }
            Command::Collect { until_ms, drain } => collect(inner, run, until_ms, drain).await,
            Command::Kill => run.worker = None,
            Command::Park(reason) => return Stop::Park(reason),
            Command::Finish(Ending::Returned(value)) => return Stop::Done(Box::new(complete(inner, run, value))),
            Command::Finish(Ending::Failed { kind, phase, message }) => {
                return Stop::Done(Box::new(fail(inner, run, kind, phase, message)));
            }
        }
    }
}

/// A cell's deadline timer and the instant it was set for.
struct Deadline {
    at: tokio::time::Instant,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl Deadline {
    /// The timer in `slot`, due at `at`: the one already there when it is due within 2 ms of `at` (the run's clock
    /// counts whole milliseconds), else one set again for `at` (a pause moved the deadline, or the run's clock is
    /// not the system's).
    fn at(slot: &mut Option<Deadline>, at: tokio::time::Instant) -> std::pin::Pin<&mut tokio::time::Sleep> {
        let timer = slot.get_or_insert_with(|| Deadline { at, sleep: Box::pin(tokio::time::sleep_until(at)) });
        let drift = if timer.at > at { timer.at - at } else { at - timer.at };
        if drift > Duration::from_millis(2) {
            timer.at = at;
            timer.sleep.as_mut().reset(at);
        }
        timer.sleep.as_mut()
    }
}

/// Gathers settled host work as [`Command::Collect`] asks, then reports the clock to the machine.
pub(super) async fn collect<C>(inner: &Inner, run: &mut LiveRun<C>, until_ms: Option<u64>, drain: bool) {
    let since_ms = inner.clock.now_ms();
    let mut timed_out = false;
    let mut idle = false;
    match until_ms {
        None => {
            while let Some(joined) = run.in_flight.try_join_next() {
                accept(inner, run, joined);
            }
        }
        Some(_) if run.in_flight.is_empty() => idle = true,
        Some(until_ms) => {
            // A cell that awaits its results waits as long as its host work takes.
            let until = (until_ms != NO_PARK).then(|| {
                tokio::time::Instant::now() + Duration::from_millis(until_ms.saturating_sub(inner.clock.now_ms()))
            });
            let kept_alive = run.kept_alive.clone();
            loop {
                let next = run.in_flight.join_next();
                let joined = match (until, &kept_alive) {
                    (Some(until), Some(kept_alive)) => tokio::select! {
                        joined = tokio::time::timeout_at(until, next) => Some(joined),
                        () = kept_alive.notified() => None,
                    },
                    (Some(until), None) => Some(tokio::time::timeout_at(until, next).await),
                    (None, _) => Some(Ok(next.await)),
                };
                let Some(joined) = joined else {
                    // The client was sent progress: the wait budget starts again, and the machine collects anew.
                    run.machine.extend_hold(inner.clock.now_ms());
                    break;
                };
                match joined {
                    Err(_) => {
                        timed_out = true;
                        break;
                    }
                    Ok(None) => break,
                    Ok(Some(joined)) => accept(inner, run, joined),
                }
                while let Some(joined) = run.in_flight.try_join_next() {
                    accept(inner, run, joined);
                }
                if !drain || run.in_flight.is_empty() {
                    break;
                }
            }
        }
    }
    take_notices(run);
    run.machine.handle(Event::Collected { since_ms, now_ms: inner.clock.now_ms(), timed_out, idle });
}

pub(super) fn accept<C>(inner: &Inner, run: &mut LiveRun<C>, joined: Result<Settlement, tokio::task::JoinError>) {
    take_notices(run);
    match joined {
        Ok(settlement) => {
            let id = settlement.id;
            run.handles.remove(&id);
            run.machine.handle(Event::Settled(settlement));
            settled(inner, run, id);
        }
        Err(e) if e.is_cancelled() => {}
        Err(e) => {
            // A tool host that panicked: the request fails, the run goes on.
            let failed = run.handles.iter().find(|(_, h)| h.id() == e.id()).map(|(id, _)| *id);
            if let Some(id) = failed {
                run.handles.remove(&id);
                run.machine.handle(Event::HostFailed(id));
                settled(inner, run, id);
            }
        }
    }
}

/// Records call `id` as finished if the machine took its settlement (a deferred approval's is dropped: the call
/// waits in the run).
pub(super) fn settled<C>(inner: &Inner, run: &mut LiveRun<C>, id: u32) {
    if let Some(settlement) = run.machine.ready.iter().rev().find(|s| s.id == id) {
        let recorded = run.machine.effect_of(id, &settlement.value);
        run.activity.finished(id, &settlement.value, inner.clock.now_ms(), recorded);
    }
}
