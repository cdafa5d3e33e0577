//! `exec`: checks the source, accepts the idempotency key, starts a worker and drives the new run to its first
//! stop; and how a run's ending becomes its result.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use codemode_bridge::{CodeModeResult, ErrorCode, FailurePhase};
use codemode_snapshot::Slot;
use codemode_telemetry::span::Span;
use codemode_telemetry::{ActivityLog, InputKind};
use tokio::task::JoinSet;

use crate::activity::Recorder;
use crate::machine::{RunMachine, RunSetup};
use crate::{ExecInput, Inner, RunOptions, RunScope};

use super::approvals::RunApprovals;
use super::driver::drive;
use super::idempotency;
use super::park::{park, release_worker};
use super::{Cell, LiveRun, Stop, cell_limits, input_failure, message_cap, owner_of, scope_of, telemetry};

/// `exec`: checks the source, starts a worker and drives the run (the surface validated `input`).
pub async fn exec(inner: Arc<Inner>, input: ExecInput, scope: RunScope) -> CodeModeResult {
    exec_with(inner, input, scope, RunOptions::default()).await
}

/// [`exec`] with the call's approver and title.
pub async fn exec_with(inner: Arc<Inner>, input: ExecInput, scope: RunScope, options: RunOptions) -> CodeModeResult {
    let span = crate::trace::run_span("exec");
    crate::trace::record_source(&span, &input.code);
    let started = crate::trace::started(&span);
    let redactor = started.map(|_| inner.redactor.clone());
    // Boxed: the run's future holds the whole driver (tens of KB), and every move of an unboxed one (into a
    // spawned task, through each caller's own future) is a memcpy of all of it: 70% of the host's instructions per
    // trivial cell before (PERFORMANCE-NOTES.md, "The per-cell path").
    let result = Box::pin(exec_run(inner, input, scope, options, &span)).await;
    if let Some(redactor) = redactor {
        crate::trace::finish_run(&span, "exec", started, &result, &redactor);
    }
    result
}

/// Runs `input` as [`exec_with`] does, over `cell` instead of a worker from the pool and without ending the run's
/// span into a trace: a test drives the run's driver, dispatch and stores with a scripted fake. A run that parks
/// leaves a cell that is not a worker process behind and resumes by replay.
pub async fn exec_on<C: Cell>(
    inner: Arc<Inner>,
    input: ExecInput,
    scope: RunScope,
    options: RunOptions,
    cell: C,
) -> CodeModeResult {
    let begun = match begin(&inner, &input, &scope, &options).await {
        Ok(begun) => begun,
        Err(answer) => return answer,
    };
    let run = new_run(&inner, input, scope, options, &crate::trace::run_span("exec"), begun, cell);
    Box::pin(finish(inner, run, None)).await
}

pub(super) async fn exec_run(
    inner: Arc<Inner>,
    input: ExecInput,
    scope: RunScope,
    options: RunOptions,
    span: &Span,
) -> CodeModeResult {
    let begun = match begin(&inner, &input, &scope, &options).await {
        Ok(begun) => begun,
        Err(answer) => return answer,
    };
    let worker = match inner.pool.checkout_admitted().await {
        Ok(mut worker) => {
            worker.set_max_message_bytes(message_cap(&cell_limits(&inner)));
            worker
        }
        Err(e) => {
            return CodeModeResult::failed(
                ErrorCode::RuntimeUnavailable,
                FailurePhase::Host,
                format!("code mode runtime unavailable: {e}"),
                telemetry(&inner, &scope_of(&inner, &scope)),
            );
        }
    };
    let run = new_run(&inner, input, scope, options, span, begun, worker);
    // The run takes a place under the cap of suspended runs only when it first dispatches host work.
    finish(inner, run, None).await
}

/// A run `exec` accepted: its checked source, and the id and idempotency key it runs under.
struct Begun {
    source: String,
    typescript: bool,
    run_id: String,
    idempotency: Option<String>,
}

/// Checks the source and accepts the idempotency key; `Err` is the call's answer (a refused source, or the result
/// or state of the run that key already started).
async fn begin(
    inner: &Inner,
    input: &ExecInput,
    scope: &RunScope,
    options: &RunOptions,
) -> Result<Begun, CodeModeResult> {
    let prepared = codemode_source::prepare(&input.code).map_err(|e| input_failure(inner, scope, e.message))?;
    let run_id = codemode_snapshot::new_run_id();
    let idempotency = options.idempotency_key.clone();
    if let Some(key) = &idempotency {
        idempotency::accept(inner, scope, key, &run_id).await?;
    }
    Ok(Begun { source: prepared.js, typescript: prepared.transformed, run_id, idempotency })
}

/// The accepted run, started on `worker`.
fn new_run<C>(
    inner: &Arc<Inner>,
    input: ExecInput,
    scope: RunScope,
    options: RunOptions,
    span: &Span,
    begun: Begun,
    worker: C,
) -> LiveRun<C> {
    let Begun { source, typescript, run_id, idempotency } = begun;
    let now_ms = inner.clock.now_ms();
    let mut machine = RunMachine::new(RunSetup {
        source,
        limits: cell_limits(inner),
        seed: inner.entropy.seed(),
        start_clock_ms: now_ms,
        max_output_bytes: inner.limits.max_output_bytes as usize,
        restart_safe: input.restart_safe,
        await_results: input.await_results,
        max_journal_bytes: inner.limits.max_snapshot_bytes,
        shared_journal: Some(inner.journals.clone()),
    });
    machine.set_globals(inner.globals.clone());
    machine.begin(now_ms, inner.limits.timeout_ms);
    let input_kind = if typescript { InputKind::Typescript } else { InputKind::Javascript };
    crate::trace::record_input_kind(span, input_kind);
    let mut activity = Recorder::new(inner, &run_id, ActivityLog { input_kind, ..ActivityLog::default() });
    activity.begin(inner, &machine.source, options.activity.clone(), options.activity_in_json);
    crate::trace::record_run_id(span, &run_id);
    LiveRun {
        run_id,
        span: span.clone(),
        owner: owner_of(&scope),
        scope: scope_of(inner, &scope),
        machine,
        worker: Some(worker),
        in_flight: JoinSet::new(),
        handles: BTreeMap::new(),
        approvals: RunApprovals::new(options, BTreeSet::new()),
        idempotency,
        activity,
        call_names: Vec::new(),
        settled: Vec::new(),
        kept_alive: None,
        tool_contracts: BTreeMap::new(),
        live_place: None,
        projection: inner.projection.clone(),
    }
}

/// Drives the run until it ends or parks, then returns the result (parking it in the store if needed). `slot` is
/// the run's place under the cap: a resumed run's, or `None` until the run first dispatches host work.
pub(super) async fn finish<C: Cell>(
    inner: Arc<Inner>,
    mut run: LiveRun<C>,
    mut slot: Option<Slot<LiveRun>>,
) -> CodeModeResult {
    // Boxed, so that its state is not copied into (and with) every future around it.
    match Box::pin(drive(&inner, &mut run, &mut slot)).await {
        Stop::Done(result) => {
            if let Some(slot) = slot {
                inner.runs.finish(slot).await;
            }
            release_worker(&inner, &mut run);
            ended(&inner, &mut run, *result).await
        }
        // Boxed too: a park's state (the checkpoint, the store's park) is only paid for by runs that park.
        Stop::Park(reason) => Box::pin(park(inner, run, slot, reason)).await,
    }
}

/// `result` with the activity of the cell that ended it (calls still open were cancelled with the run's tasks),
/// after what the run leaves in the store: the values `results.load` will read (on any replica), and the result
/// under the idempotency key of the `exec` that started it.
pub(super) async fn ended<C>(inner: &Inner, run: &mut LiveRun<C>, mut result: CodeModeResult) -> CodeModeResult {
    run.activity.cancel_open(inner.clock.now_ms());
    result.set_activity(run.activity.take());
    inner.results.flush().await;
    if let Some(key) = &run.idempotency {
        idempotency::record(inner, &run.owner, key, &result).await;
    }
    result
}
