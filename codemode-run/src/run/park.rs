//! Park and resume: a stopped run's checkpoint, parking it in the store (with its worker while the live window
//! lasts), and `wait`, which resumes it live or by replay and drives it to its next stop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use codemode_bridge::{
    ByteCharge, CodeModeResult, ErrorCode, Failed, FailurePhase, PendingToolCall, WaitReason, Waiting,
};
use codemode_snapshot::{
    Checkpoint, EffectEntry, PendingRequest, Projection, RunOwner, Slot, StoreError, YieldRequest,
};
use codemode_telemetry::Telemetry;
use codemode_telemetry::span::Span;
use codemode_vm::pool::{PoolConfig, WorkerPool};
use codemode_vm::protocol::{HostMessage, StartGlobals};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::activity::Recorder;
use crate::machine::RunMachine;
use crate::{Inner, RunOptions, RunScope};

use super::approvals::RunApprovals;
use super::driver::drive;
use super::exec::ended;
use super::{
    Cell, LiveRun, Stop, cell_limits, fail, message_cap, owner_of, store_failure, telemetry, untrusted_warnings,
    with_effects,
};

/// How long a parked run may keep its worker before the pool starts a replacement.
pub(super) const REPLENISH_AFTER_PARK: Duration = Duration::from_millis(50);

/// The checkpoint of a run as it stands: its journal and everything else a replay needs. The writes' previews are
/// rendered here, once each: later checkpoints and the run's result reuse them.
pub(super) fn checkpoint_of<C>(inner: &Inner, run: &mut LiveRun<C>, reason: WaitReason) -> Checkpoint {
    run.machine.show_effects(&inner.redactor);
    let machine = &run.machine;
    let mut checkpoint = Checkpoint::new(
        run.run_id.clone(),
        run.owner.clone(),
        machine.source.clone(),
        inner.tools_digest.clone(),
        machine.journal.clone(),
        machine.budget.clone(),
        reason,
    );
    checkpoint.restart_safe = machine.restart_safe;
    checkpoint.delivered_output = machine.emitted;
    checkpoint.counters = run.scope.counters();
    checkpoint.counter_scope = run.scope.id().to_owned();
    checkpoint.pending = machine
        .pending()
        .map(|(id, method, digest)| PendingRequest {
            id,
            method: method.as_str().to_owned(),
            args_digest: digest,
            due_ms: machine.timer_due(id),
        })
        .collect();
    checkpoint.yield_request =
        machine.yield_request.as_ref().map(|(id, reason)| YieldRequest { id: *id, reason: reason.clone() });
    checkpoint.untrusted = machine.untrusted;
    checkpoint.asked = machine.asked.values().cloned().collect();
    checkpoint.effects = machine
        .effects
        .iter()
        .map(|(id, effect)| EffectEntry { id: *id, effect: effect.shown_with(&inner.redactor) })
        .collect();
    checkpoint.approved_for_run = crate::dispatch::lock(&run.approvals.approved).iter().cloned().collect();
    checkpoint.idempotency_key = run.idempotency.clone();
    checkpoint.activity = run.activity.log();
    checkpoint.call_names = run.call_names.clone();
    checkpoint.tool_contracts = run.tool_contracts.clone();
    checkpoint.projection = Some(Projection::clone(&run.projection));
    checkpoint
}

/// Before a resumed run in a shared store dispatches `request`, writes the run's checkpoint with that request in
/// flight (under its claim): if this replica dies while the request runs, the replica that takes the run over
/// settles it as `interrupted` instead of running it again. `Err` when the claim was lost to another replica.
pub(super) async fn record_dispatch<C>(
    inner: &Inner,
    run: &mut LiveRun<C>,
    slot: &Slot<LiveRun>,
    request: &codemode_bridge::BridgeRequest,
    digest: u64,
) -> Result<(), StoreError> {
    let mut checkpoint = checkpoint_of(inner, run, WaitReason::PendingTools);
    // Output not yet handed to a caller is produced again by the replay.
    checkpoint.delivered_output = run.machine.emitted.saturating_sub(run.machine.new_output.len());
    checkpoint.pending.push(PendingRequest {
        id: request.id,
        method: request.method().as_str().to_owned(),
        args_digest: digest,
        due_ms: None,
    });
    inner.runs.record(slot, checkpoint, &inner.limits).await
}

pub(super) fn release_worker<C: Cell>(inner: &Inner, run: &mut LiveRun<C>) {
    match run.worker.take().map(Cell::into_process) {
        Some(Some(worker)) if run.machine.cell_reusable() => inner.pool.checkin(worker),
        // A cell that is not a worker process leaves the pool as it was.
        Some(None) => {}
        // A worker that did not end its cell cleanly is dropped, which kills it (kill_on_drop).
        _ => inner.pool.replenish(),
    }
    run.in_flight.abort_all();
}

pub(super) async fn park<C: Cell>(
    inner: Arc<Inner>,
    run: LiveRun<C>,
    slot: Option<Slot<LiveRun>>,
    reason: WaitReason,
) -> CodeModeResult {
    let mut run = run.into_stored();
    run.span = Span::none();
    let Some(slot) = slot else {
        // Only dispatched host work (a tool call, a timer, a yield) parks a run, and the first dispatch reserved.
        let message = "code mode run parked without a place among the suspended runs".to_owned();
        let result = fail(&inner, &mut run, ErrorCode::InternalError, FailurePhase::Host, message);
        release_worker(&inner, &mut run);
        return result;
    };
    let mut checkpoint = checkpoint_of(&inner, &mut run, reason);
    let activity = run.activity.take().map(Box::new);
    let machine = &mut run.machine;
    let pending_approvals = machine.asked.values().map(|a| a.approval.clone()).collect();
    checkpoint.call_counts = machine.call_counts;
    let effects = machine.effect_facts(Some(&inner.redactor), false);
    let checkpoint_untrusted = machine.untrusted;
    let pending_calls: Vec<PendingToolCall> = checkpoint
        .pending
        .iter()
        .map(|p| PendingToolCall {
            id: codemode_telemetry::otel::tool_call_id(&p.method, p.id),
            method: p.method.clone(),
        })
        .collect();
    let output = machine.budget.deliver(std::mem::take(&mut machine.new_output));
    let telemetry = telemetry(&inner, &run.scope);
    let run_id = run.run_id.clone();
    let replay_safe = machine.replay_safe;
    checkpoint.output_budget = machine.budget.clone();
    // The run keeps its worker while parked only if one of the live places is free (with a cap on them): the
    // memory of parked workers is bounded by the cap, not only by the live window.
    let live_place = match &inner.live_places {
        _ if inner.replay_on_resume || run.worker.is_none() => None,
        None => Some(None),
        Some(places) => places.clone().try_acquire_owned().ok().map(Some),
    };
    if let Some(place) = live_place {
        // The parked run keeps its worker: the pool starts a replacement unless the run is back soon.
        run.live_place = place;
        inner.pool.replenish_after(REPLENISH_AFTER_PARK);
    } else {
        // Keep the host work, drop the engine: the next wait replays the journal in a fresh context. A worker at a
        // quiescent point is told to drop the cell's context and build its next one, and goes back to the pool (a
        // process start and its prelude compile cost milliseconds of CPU, on a core the next cells need); any
        // other is stopped and the pool starts a replacement.
        match run.worker.take() {
            Some(mut worker) if run.machine.cell_reusable() => match Cell::send(&mut worker, &HostMessage::Reset).await
            {
                Ok(()) => inner.pool.checkin(worker),
                Err(_) => inner.pool.replenish(),
            },
            _ => inner.pool.replenish(),
        }
        run.machine.detach_cell();
    }
    let limits = inner.limits.clone();
    match inner.runs.park(slot, checkpoint, Some(run), &limits).await {
        Ok(_) => CodeModeResult::Waiting(Waiting {
            run_id,
            reason,
            pending_tool_calls: pending_calls,
            pending_approvals,
            replay_safe,
            warnings: untrusted_warnings(checkpoint_untrusted),
            output,
            telemetry,
            activity,
        }),
        Err(e) => CodeModeResult::Failed(Failed {
            error: e.to_string(),
            code: e.code(),
            error_kind: e.code().into(),
            failure_phase: FailurePhase::Host,
            bridge_dispatch_started: true,
            warnings: untrusted_warnings(checkpoint_untrusted),
            output,
            effects,
            telemetry,
            activity,
        }),
    }
}

/// `wait`: resumes a parked run, live when its worker is still attached, by replay otherwise.
///
/// A wait that cannot resume the run (another scope, another catalog) leaves it parked. Dropping the returned future
/// cancels the run: its worker is killed, its host work cancelled and the run released, so its id then fails as
/// unavailable. An [`abort`](fn@crate::abort) of the run while it waits ends the wait with `aborted` and the run's
/// final telemetry.
pub async fn wait(inner: Arc<Inner>, run_id: &str, scope: RunScope) -> CodeModeResult {
    wait_with(inner, run_id, scope, RunOptions::default()).await
}

/// [`wait`] with the call's approver and the answers to the run's pending approvals.
pub async fn wait_with(inner: Arc<Inner>, run_id: &str, scope: RunScope, options: RunOptions) -> CodeModeResult {
    let span = crate::trace::run_span("wait");
    let started = crate::trace::started(&span);
    crate::trace::record_run_id(&span, run_id);
    let redactor = started.map(|_| inner.redactor.clone());
    // Boxed, as in `exec_with`.
    let result = Box::pin(wait_run(inner, run_id, scope, options, &span)).await;
    if let Some(redactor) = redactor {
        crate::trace::finish_run(&span, "wait", started, &result, &redactor);
    }
    result
}

pub(super) async fn wait_run(
    inner: Arc<Inner>,
    run_id: &str,
    scope: RunScope,
    options: RunOptions,
    span: &Span,
) -> CodeModeResult {
    let resumable = |checkpoint: &Checkpoint| resumable_under(&inner, checkpoint);
    let caller = owner_of(&scope);
    let resumed = match inner.runs.begin_resume_if(run_id, &caller, resumable).await {
        Ok(resumed) => resumed,
        Err(e) => return store_failure(&inner, &scope, &concealed(&inner, run_id, &scope, &caller, e)),
    };
    let (abort_tx, mut aborted) = oneshot::channel();
    let _registered = inner.waits.register(run_id, &caller, abort_tx);
    let now_ms = inner.clock.now_ms();
    let checkpoint = resumed.checkpoint;
    let (mut activity_hook, activity_in_json) = (options.activity.clone(), options.activity_in_json);
    let max_wait_ms = options.max_wait_ms;
    // Progress keeps the wait going: every activity event (which the caller forwards as a progress notification)
    // restarts the wait budget.
    let kept_alive = match (&activity_hook, options.progress_keeps_waiting && max_wait_ms.is_some()) {
        (Some(hook), true) => {
            let notify = Arc::new(tokio::sync::Notify::new());
            let (hook, ping) = (hook.clone(), notify.clone());
            let pinging: codemode_telemetry::ActivityHook =
                Arc::new(move |event: &codemode_telemetry::ActivityEvent| {
                    hook(event);
                    ping.notify_one();
                });
            activity_hook = Some(pinging);
            Some(notify)
        }
        _ => None,
    };
    let restored = resumed.live.is_none();
    let mut run = match resumed.live {
        Some(mut run) => {
            run.approvals.options = options;
            // Running again, the run no longer counts among the parked runs that keep a worker.
            run.live_place = None;
            run
        }
        None => {
            // Parked by another process (or this one before a restart): rebuild from the checkpoint. Requests that
            // were in flight are gone with that process; the program learns they were interrupted. The restored
            // catalog is a new counter lifetime: the run joins its owner's scope in this process, or starts one
            // (the checkpoint's `counterScope` and counters were the parked catalog's).
            let machine = RunMachine::restore(
                &checkpoint,
                cell_limits(&inner),
                ByteCharge::new(inner.limits.max_snapshot_bytes, Some(inner.journals.clone())),
            );
            let activity = Recorder::new(&inner, &checkpoint.run_id, checkpoint.activity.clone());
            LiveRun {
                run_id: checkpoint.run_id.clone(),
                span: Span::none(),
                owner: checkpoint.owner.clone(),
                scope: inner.scopes.get(&checkpoint.owner, &inner.catalog),
                machine,
                worker: None,
                in_flight: JoinSet::new(),
                handles: BTreeMap::new(),
                approvals: RunApprovals::new(options, checkpoint.approved_for_run.iter().cloned().collect()),
                idempotency: checkpoint.idempotency_key.clone(),
                activity,
                call_names: checkpoint.call_names.clone(),
                settled: Vec::new(),
                kept_alive: None,
                tool_contracts: checkpoint.tool_contracts.clone(),
                live_place: None,
                // A checkpoint from before projections were kept resumes with this host's names.
                projection: checkpoint.projection.clone().map_or_else(|| inner.projection.clone(), Arc::new),
            }
        }
    };
    run.activity.begin(&inner, &run.machine.source, activity_hook, activity_in_json);
    run.kept_alive = kept_alive;
    run.span = span.clone();
    if restored {
        // The calls in flight in the process that parked the run settle as interrupted in this cell.
        for settlement in &run.machine.ready {
            let recorded = run.machine.effect_of(settlement.id, &settlement.value);
            run.activity.finished(settlement.id, &settlement.value, now_ms, recorded);
        }
    }
    if inner.runs.aborted(&resumed.guard) {
        return aborted_during_wait(&inner, run, None).await;
    }
    run.machine.begin(now_ms, inner.limits.timeout_ms);
    if let Some(budget_ms) = max_wait_ms {
        run.machine.hold(now_ms, budget_ms);
    }
    if run.worker.is_none() {
        // A program keeps the names it started with: when this host's catalog gives other names (its tools changed
        // since), the run replays in a worker started without globals, which installs the run's own.
        let (checkout, globals) =
            if Arc::ptr_eq(&run.projection, &inner.projection) || run.projection == inner.projection {
                (inner.pool.checkout_admitted().await, inner.globals.clone())
            } else {
                let bare = WorkerPool::new(PoolConfig { globals: None, warm: 0, ..inner.pool.config().clone() });
                let globals = Arc::new(crate::projected_globals(&inner.catalog, &run.projection));
                (bare.checkout_admitted().await, Some(StartGlobals { globals, key: None }))
            };
        run.machine.set_globals(globals);
        match checkout {
            Ok(mut worker) => {
                worker.set_max_message_bytes(message_cap(&cell_limits(&inner)));
                run.worker = Some(worker);
            }
            Err(e) => {
                let result = fail(&inner, &mut run, ErrorCode::RuntimeUnavailable, FailurePhase::Host, e.to_string());
                return ended(&inner, &mut run, result).await;
            }
        }
        run.machine.detach_cell();
        // A fresh worker replays the journal: the calls it delivers from there get spans marked as replayed.
        crate::trace::replay(span);
        crate::trace::replayed_calls(span, &checkpoint, &inner.redactor);
    }
    let mut slot = Some(resumed.guard);
    let stop = tokio::select! {
        stop = Box::pin(drive(&inner, &mut run, &mut slot)) => stop,
        Ok(reply) = &mut aborted => return aborted_during_wait(&inner, run, Some(reply)).await,
    };
    match stop {
        Stop::Done(result) => {
            if let Some(slot) = slot {
                inner.runs.finish(slot).await;
            }
            release_worker(&inner, &mut run);
            ended(&inner, &mut run, *result).await
        }
        Stop::Park(reason) => Box::pin(park(inner.clone(), run, slot, reason)).await,
    }
}

/// Whether a parked run may resume under this engine's catalog: always under the catalog it parked under; under
/// another (tools added, removed or changed since), only while every tool it called exists with the same contract,
/// since a replay or the rest of the program would otherwise meet a tool it was not written for. Tools it has not
/// called yet are looked up as it calls them.
pub(super) fn resumable_under(inner: &Inner, checkpoint: &Checkpoint) -> Result<(), StoreError> {
    if checkpoint.tools_digest == inner.tools_digest {
        return Ok(());
    }
    for (tool, digest) in &checkpoint.tool_contracts {
        let change = match inner.catalog.by_callable(tool).or_else(|| mcp_entry(inner, tool)) {
            None => "was removed",
            Some(entry) if entry.contract_digest() != *digest => "changed its input schema",
            Some(_) => continue,
        };
        return Err(StoreError::ToolChanged { tool: tool.clone(), change: change.to_owned() });
    }
    Ok(())
}

/// The catalog entry of an MCP tool by its callable name `MCP.<server>.<tool>`.
pub(super) fn mcp_entry<'a>(inner: &'a Inner, callable: &str) -> Option<&'a codemode_catalog::CatalogEntry> {
    let rest = callable.strip_prefix("MCP.")?;
    let (global, js_name) = rest.split_once('.')?;
    inner.catalog.mcp_tool(global, js_name)
}

/// The error an authenticated caller sees: another owner's run reads as an unknown one, and so does a run being
/// resumed by a wait that is not the caller's own (a run in the instant between its claim and its wait's
/// registration reads as unknown too). Callers without authentication keep the seed's messages.
pub(super) fn concealed(
    inner: &Inner,
    run_id: &str,
    scope: &RunScope,
    caller: &RunOwner,
    error: StoreError,
) -> StoreError {
    if !scope.authenticated {
        return error;
    }
    match error {
        StoreError::DifferentSession | StoreError::DifferentAgentRun => StoreError::Unavailable,
        StoreError::AlreadyResuming if !inner.waits.owned_by(run_id, caller) => StoreError::Unavailable,
        other => other,
    }
}

/// Ends a wait whose run was aborted: kills its worker, cancels its host work and hands the final telemetry to the
/// [`abort`] that asked (the run's slot is freed as the caller drops it).
pub(super) async fn aborted_during_wait(
    inner: &Inner,
    mut run: LiveRun,
    reply: Option<oneshot::Sender<Telemetry>>,
) -> CodeModeResult {
    run.in_flight.abort_all();
    if run.worker.take().is_some() {
        inner.pool.replenish();
    }
    let telemetry = telemetry(inner, &run.scope);
    if let Some(reply) = reply {
        let _ = reply.send(telemetry.clone());
    }
    let result = with_effects(
        CodeModeResult::failed(ErrorCode::Aborted, FailurePhase::Host, "code mode run aborted", telemetry),
        run.machine.effect_facts(Some(&inner.redactor), true),
    );
    ended(inner, &mut run, result).await
}
