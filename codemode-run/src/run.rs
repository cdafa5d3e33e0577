//! The async driver of a run: it does the I/O the [`RunMachine`] asks for (writes to and reads from the cell,
//! dispatches requests, gathers settled host work, parks in the store) and turns the machine's ending into the
//! `exec`/`wait` result. Run logic (when to deliver, park, time out or finish) is the machine's, not this file's.
//!
//! Invariant: time reaches the run only through the engine's [`Clock`](codemode_snapshot::Clock) and a new run's
//! seed only through its [`Entropy`]; output handed to the caller is counted so a resumed run never delivers it twice.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_bridge::{
    ApprovalDecision, Approver, BridgeMethod, ByteCharge, CodeModeResult, Completed, EffectFacts, ErrorCode, ErrorKind,
    Failed, FailurePhase, PendingToolCall, Settlement, WaitReason, Waiting,
};
use codemode_snapshot::{
    Accepted, AskedCall, CallName, Checkpoint, Clock, EffectEntry, PendingRequest, Projection, RunOwner, Slot,
    StoreError, YieldRequest,
};
use codemode_telemetry::span::Span;
use codemode_telemetry::{ActivityLog, InputKind, Telemetry};
use codemode_vm::pool::{Death, PoolConfig, WorkerPool, WorkerProcess};
use codemode_vm::protocol::{CellLimits, HostMessage, StartGlobals, WorkerMessage};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};

use crate::activity::Recorder;
use crate::machine::{Command, Ending, Event, NO_PARK, RunMachine, RunSetup};
use crate::scope::CatalogScope;
use crate::{ExecInput, Inner, RunOptions, RunScope};

/// A cell the driver talks to: a worker process, or a scripted fake in tests.
pub trait Cell: Send {
    /// Writes one message to the cell.
    fn send(&mut self, message: &HostMessage) -> impl Future<Output = Result<(), String>> + Send;
    /// Reads the cell's next message, or how its process ended.
    fn recv(&mut self) -> impl Future<Output = Result<WorkerMessage, Death>> + Send;
}

impl Cell for WorkerProcess {
    async fn send(&mut self, message: &HostMessage) -> Result<(), String> {
        WorkerProcess::send(self, message).await.map_err(|e| e.to_string())
    }

    async fn recv(&mut self) -> Result<WorkerMessage, Death> {
        WorkerProcess::recv(self).await
    }
}

/// A run as it lives between calls: its machine, plus the live worker and in-flight host work.
pub struct LiveRun {
    run_id: String,
    /// The span of the `exec` or `wait` driving the run, the parent of its nested calls' spans; disabled while the
    /// run is parked, so that the span ends with its call.
    span: Span,
    owner: RunOwner,
    /// The catalog scope whose counters and schedule the run shares.
    scope: Arc<CatalogScope>,
    machine: RunMachine,
    worker: Option<WorkerProcess>,
    in_flight: JoinSet<Settlement>,
    /// The tasks of dispatched requests still running, by request id.
    handles: BTreeMap<u32, AbortHandle>,
    /// Approvals: who decides them in the current call, and what was decided.
    approvals: RunApprovals,
    /// The idempotency key of the `exec` that started the run, under which its final result is recorded.
    idempotency: Option<String>,
    /// The run's nested calls, as people see them.
    activity: Recorder,
    /// The tool each nested call named, kept with the checkpoint for the spans of a replay.
    call_names: Vec<CallName>,
    /// Calls settled at once whose spans and metrics are recorded once their settlements are sent.
    settled: Vec<crate::trace::Settled>,
    /// Pinged by each activity event of the current `wait` when progress keeps it waiting: a held collect then
    /// restarts the wait budget.
    kept_alive: Option<Arc<tokio::sync::Notify>>,
    /// The contract digest of each catalog tool the run called, by callable name, kept with the checkpoint.
    tool_contracts: BTreeMap<String, String>,
    /// While the run is parked with its worker: its place among the parked runs that may keep one
    /// ([`Inner::live_places`]); given back when the worker goes or the run resumes, ends or is dropped.
    live_place: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The callable names the program was given, kept with the checkpoint: a resume installs these.
    projection: Arc<Projection>,
}

/// A decision on a call's approval, sent by the call's task to its run before the task ends.
#[derive(Debug)]
pub(crate) struct Notice {
    pub(crate) id: u32,
    pub(crate) decision: ApprovalDecision,
    /// When it arrived (epoch ms, the engine's clock).
    pub(crate) at_ms: u64,
    /// Whether the call is write-class.
    pub(crate) write: bool,
}

/// A nested call starting (`on`) or ending a wait for a person (an elicitation relayed by the host), sent by the
/// call's [`PauseSink`](codemode_bridge::PauseSink) with the time it happened.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) id: u32,
    pub(crate) on: bool,
    /// When (epoch ms, the engine's clock).
    pub(crate) at_ms: u64,
}

/// What a run keeps about approvals.
struct RunApprovals {
    /// The approver, answers and title of the current `exec` or `wait`.
    options: RunOptions,
    /// Tools approved for the rest of the run (`<server>.<tool>` or the tool's name); shared with the calls'
    /// tasks, so a call waiting in the queue sees an approval given meanwhile.
    approved: Arc<Mutex<BTreeSet<String>>>,
    /// Held by the call being asked about: a run asks one question at a time, so a second call of a tool waits
    /// for the first's answer and is not asked at all when that answer covers the rest of the run.
    turn: Arc<tokio::sync::Mutex<()>>,
    notices: mpsc::UnboundedSender<Notice>,
    received: mpsc::UnboundedReceiver<Notice>,
    /// The pauses of nested calls waiting for a person (elicitations), sent by their tasks.
    holds: mpsc::UnboundedSender<Hold>,
    held: mpsc::UnboundedReceiver<Hold>,
}

impl RunApprovals {
    fn new(options: RunOptions, approved: BTreeSet<String>) -> Self {
        let (notices, received) = mpsc::unbounded_channel();
        let (holds, held) = mpsc::unbounded_channel();
        RunApprovals {
            options,
            approved: Arc::new(Mutex::new(approved)),
            turn: Arc::new(tokio::sync::Mutex::new(())),
            notices,
            received,
            holds,
            held,
        }
    }
}

/// The parts of a run's approvals that dispatch reads.
pub(crate) struct ApprovalParts<'a> {
    pub(crate) approver: &'a Option<Arc<dyn Approver>>,
    pub(crate) answers: &'a [(String, ApprovalDecision)],
    pub(crate) title: &'a Option<String>,
    pub(crate) approved: &'a Arc<Mutex<BTreeSet<String>>>,
    pub(crate) turn: &'a Arc<tokio::sync::Mutex<()>>,
    pub(crate) notices: &'a mpsc::UnboundedSender<Notice>,
    /// Where a call's pause sink sends its holds, and the clock that dates them.
    pub(crate) holds: (&'a mpsc::UnboundedSender<Hold>, &'a Arc<dyn Clock>),
}

/// How long a parked run may keep its worker before the pool starts a replacement.
const REPLENISH_AFTER_PARK: Duration = Duration::from_millis(50);

/// A dispatched request until its settlement is delivered: method, argument digest, and its task while it runs.
pub(crate) type Pending = (BridgeMethod, u64, Option<AbortHandle>);

/// Where dispatch records a request: its method and digest in the machine, its task (if any) in the driver.
pub(crate) struct PendingSink<'a> {
    methods: &'a mut BTreeMap<u32, (BridgeMethod, u64)>,
    handles: &'a mut BTreeMap<u32, AbortHandle>,
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

/// The untrusted-content notice, when the run read MCP content; on completed and failed results alike.
fn untrusted_warnings(untrusted: bool) -> Vec<String> {
    if untrusted { vec![codemode_bridge::UNTRUSTED_WARNING.to_owned()] } else { Vec::new() }
}

enum Stop {
    Done(Box<CodeModeResult>),
    Park(WaitReason),
}

fn owner_of(scope: &RunScope) -> RunOwner {
    RunOwner {
        session_id: scope.session_id.clone(),
        agent_id: scope.agent_id.clone(),
        agent_run_id: scope.agent_run_id.clone(),
    }
}

/// The telemetry of a result: counters are the cumulative totals of the caller's catalog scope.
pub(crate) fn telemetry(inner: &Inner, scope: &CatalogScope) -> Telemetry {
    let counters = scope.counters();
    Telemetry {
        catalog_size: inner.catalog.len() as u32,
        sources: inner.catalog.source_counts(),
        counter_scope: scope.id().to_owned(),
        search_count: counters.search_count,
        describe_count: counters.describe_count,
        call_count: counters.call_count,
        visible_tools: vec!["exec".into(), "wait".into()],
    }
}

/// The catalog scope of `scope`'s caller.
fn scope_of(inner: &Inner, scope: &RunScope) -> Arc<CatalogScope> {
    inner.scopes.get(&owner_of(scope), &inner.catalog)
}

/// A `failed` result for input the surface or the source check refused.
pub fn input_failure(inner: &Inner, scope: &RunScope, message: String) -> CodeModeResult {
    let telemetry = telemetry(inner, &scope_of(inner, scope));
    CodeModeResult::failed(ErrorCode::InvalidInput, FailurePhase::Input, message, telemetry)
}

fn cell_limits(inner: &Inner) -> CellLimits {
    CellLimits {
        max_pending: inner.limits.max_pending_tool_calls,
        max_queued: 128,
        inbox_bytes: inner.limits.inbox_bytes(),
        max_request_bytes: inner.limits.inbox_bytes().min(4 * 1024 * 1024),
    }
}

/// The longest message the host reads from a run's worker: a report releasing `max_pending` requests of
/// `max_request_bytes` each, plus 16 MiB for a final value (the worker cuts it at 8 MiB) and framing. A single
/// output item is bounded by the same cap; one longer fails the run with `output_limit_exceeded`.
fn message_cap(limits: &CellLimits) -> usize {
    let requests = u64::from(limits.max_pending).saturating_mul(limits.max_request_bytes);
    usize::try_from(requests.saturating_add(16 * 1024 * 1024)).unwrap_or(usize::MAX)
}

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

async fn exec_run(
    inner: Arc<Inner>,
    input: ExecInput,
    scope: RunScope,
    options: RunOptions,
    span: &Span,
) -> CodeModeResult {
    let prepared = match codemode_source::prepare(&input.code) {
        Ok(prepared) => prepared,
        Err(e) => return input_failure(&inner, &scope, e.message),
    };
    let typescript = prepared.transformed;
    let run_id = codemode_snapshot::new_run_id();
    let idempotency = options.idempotency_key.clone();
    if let Some(key) = &idempotency {
        let scope_key = owner_of(&scope).scope_key();
        let ttl_ms = inner.limits.snapshot_ttl_seconds.saturating_mul(1000);
        let expires_at_ms = inner.clock.now_ms().saturating_add(ttl_ms);
        match inner.runs.backend().idempotency_accept(&scope_key, key, &run_id, expires_at_ms).await {
            Ok(Accepted::New) => {}
            Ok(Accepted::Existing { run_id, result }) => {
                return already_accepted(&inner, &scope, &run_id, result).await;
            }
            Err(e) => return store_failure(&inner, &scope, &e),
        }
    }
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
    let now_ms = inner.clock.now_ms();
    let mut machine = RunMachine::new(RunSetup {
        source: prepared.js,
        limits: cell_limits(&inner),
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
    let mut activity = Recorder::new(&inner, &run_id, ActivityLog { input_kind, ..ActivityLog::default() });
    activity.begin(&inner, &machine.source, options.activity.clone(), options.activity_in_json);
    let run = LiveRun {
        run_id,
        span: span.clone(),
        owner: owner_of(&scope),
        scope: scope_of(&inner, &scope),
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
    };
    crate::trace::record_run_id(span, &run.run_id);
    // The run takes a place under the cap of suspended runs only when it first dispatches host work.
    finish(inner, run, None).await
}

/// Drives the run until it ends or parks, then returns the result (parking it in the store if needed). `slot` is
/// the run's place under the cap: a resumed run's, or `None` until the run first dispatches host work.
async fn finish(inner: Arc<Inner>, mut run: LiveRun, mut slot: Option<Slot<LiveRun>>) -> CodeModeResult {
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
async fn ended(inner: &Inner, run: &mut LiveRun, mut result: CodeModeResult) -> CodeModeResult {
    run.activity.cancel_open(inner.clock.now_ms());
    result.set_activity(run.activity.take());
    inner.results.flush().await;
    if let Some(key) = &run.idempotency {
        let value = serde_json::to_value(&result).expect("results always serialize");
        // A result that could not be recorded is still returned; a retry with the key then reports the run gone.
        let _ = inner.runs.backend().idempotency_finish(&run.owner.scope_key(), key, &value).await;
    }
    result
}

/// The answer to an `exec` whose idempotency key the store accepted before: the run's final result if it ended,
/// else its current state (waiting, with the pending calls it parked with), else a failure naming the run.
async fn already_accepted(inner: &Inner, scope: &RunScope, run_id: &str, result: Option<Value>) -> CodeModeResult {
    if let Some(result) = result.and_then(|r| serde_json::from_value::<CodeModeResult>(r).ok()) {
        return result;
    }
    let parked = match inner.runs.backend().get(run_id).await {
        Ok(parked) => parked,
        Err(e) => return store_failure(inner, scope, &e),
    };
    let telemetry = telemetry(inner, &scope_of(inner, scope));
    match parked {
        Some(checkpoint) if checkpoint.owner == owner_of(scope) => CodeModeResult::Waiting(Waiting {
            run_id: run_id.to_owned(),
            reason: checkpoint.reason,
            pending_tool_calls: checkpoint
                .pending
                .iter()
                .map(|p| PendingToolCall {
                    id: codemode_telemetry::otel::tool_call_id(&p.method, p.id),
                    method: p.method.clone(),
                })
                .collect(),
            pending_approvals: checkpoint.asked.iter().map(|a| a.approval.clone()).collect(),
            replay_safe: false,
            warnings: untrusted_warnings(checkpoint.untrusted),
            output: Vec::new(),
            telemetry,
            activity: None,
        }),
        _ => with_effects(
            CodeModeResult::failed(
                ErrorCode::InvalidInput,
                FailurePhase::Input,
                format!(
                    "an exec with this idempotency key was already accepted as run {run_id}, which is running now \
                     or has ended without a recorded result; call wait with runId {run_id} instead of repeating \
                     the exec"
                ),
                telemetry,
            ),
            unknown_effects(),
        ),
    }
}

/// The checkpoint of a run as it stands: its journal and everything else a replay needs. The writes' previews are
/// rendered here, once each: later checkpoints and the run's result reuse them.
fn checkpoint_of(inner: &Inner, run: &mut LiveRun, reason: WaitReason) -> Checkpoint {
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
async fn record_dispatch(
    inner: &Inner,
    run: &mut LiveRun,
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

fn release_worker(inner: &Inner, run: &mut LiveRun) {
    match run.worker.take() {
        Some(worker) if run.machine.cell_reusable() => inner.pool.checkin(worker),
        // A worker that did not end its cell cleanly is dropped, which kills it (kill_on_drop).
        _ => inner.pool.replenish(),
    }
    run.in_flight.abort_all();
}

impl LiveRun {
    /// Whether the run keeps a worker process.
    pub fn holds_worker(&self) -> bool {
        self.worker.is_some()
    }
}

async fn park(inner: Arc<Inner>, mut run: LiveRun, slot: Option<Slot<LiveRun>>, reason: WaitReason) -> CodeModeResult {
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

/// Starts the run store's housekeeping: every so often, runs past their TTL are dropped and runs parked longer
/// than `live_window` give their worker back (they resume by replay). It stops when the engine is dropped.
pub fn start_sweeper(inner: &Arc<Inner>, live_window: Duration) {
    let every = (live_window / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let inner = Arc::downgrade(inner);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(inner) = inner.upgrade() else { return };
            inner
                .runs
                .sweep(live_window, |run: &mut LiveRun| {
                    run.machine.detach_cell();
                    run.live_place = None;
                    run.worker.take()
                })
                .await;
        }
    });
}

/// Listens for runs changed by another process sharing the store (a wake-up): a run this process holds parked at
/// an older generation, or one that is gone, drops its live worker at once instead of at its next `wait` or TTL.
/// It stops when the engine is dropped.
pub fn start_listener(inner: &Arc<Inner>) {
    let mut changes = inner.runs.backend().subscribe();
    let inner = Arc::downgrade(inner);
    tokio::spawn(async move {
        loop {
            let change = match changes.recv().await {
                Ok(change) => change,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let Some(inner) = inner.upgrade() else { return };
            if let Some(mut run) = inner.runs.changed_elsewhere(&change.run_id, change.generation) {
                run.in_flight.abort_all();
                if run.worker.take().is_some() {
                    inner.pool.replenish();
                }
            }
        }
    });
}

/// `wait`: resumes a parked run, live when its worker is still attached, by replay otherwise.
///
/// A wait that cannot resume the run (another scope, another catalog) leaves it parked. Dropping the returned future
/// cancels the run: its worker is killed, its host work cancelled and the run released, so its id then fails as
/// unavailable. An [`abort`] of the run while it waits ends the wait with `aborted` and the run's final telemetry.
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

async fn wait_run(
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
fn resumable_under(inner: &Inner, checkpoint: &Checkpoint) -> Result<(), StoreError> {
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
fn mcp_entry<'a>(inner: &'a Inner, callable: &str) -> Option<&'a codemode_catalog::CatalogEntry> {
    let rest = callable.strip_prefix("MCP.")?;
    let (global, js_name) = rest.split_once('.')?;
    inner.catalog.mcp_tool(global, js_name)
}

/// The error an authenticated caller sees: another owner's run reads as an unknown one, and so does a run being
/// resumed by a wait that is not the caller's own (a run in the instant between its claim and its wait's
/// registration reads as unknown too). Callers without authentication keep the seed's messages.
fn concealed(inner: &Inner, run_id: &str, scope: &RunScope, caller: &RunOwner, error: StoreError) -> StoreError {
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
async fn aborted_during_wait(
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

/// `result` with the host's effect facts (a failed or completed result).
fn with_effects(mut result: CodeModeResult, facts: EffectFacts) -> CodeModeResult {
    match &mut result {
        CodeModeResult::Failed(f) => f.effects = facts,
        CodeModeResult::Completed(c) => c.effects = facts,
        CodeModeResult::Waiting(_) => {}
    }
    result
}

/// The facts of a result whose run the host no longer has: it cannot vouch that no write happened.
fn unknown_effects() -> EffectFacts {
    EffectFacts { mutation_free: false, ..EffectFacts::default() }
}

/// How a wait in progress is stopped: send it the channel its final telemetry comes back on.
type StopWait = oneshot::Sender<oneshot::Sender<Telemetry>>;

/// The waits in progress, by run id, with the owner of each run, so that [`abort`] can stop the one resuming its
/// run.
#[derive(Default)]
pub struct Waits(Mutex<HashMap<String, (RunOwner, StopWait)>>);

impl Waits {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (RunOwner, StopWait)>> {
        // Every critical section is one map operation, so a poisoned lock is consistent.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn register<'a>(&'a self, run_id: &str, owner: &RunOwner, stop: StopWait) -> Registered<'a> {
        self.lock().insert(run_id.to_owned(), (owner.clone(), stop));
        Registered { waits: self, run_id: run_id.to_owned() }
    }

    /// Whether a wait of `owner` is resuming `run_id` in this process.
    fn owned_by(&self, run_id: &str, owner: &RunOwner) -> bool {
        self.lock().get(run_id).is_some_and(|(o, _)| o == owner)
    }

    /// Asks the wait resuming `run_id` to stop; its final telemetry comes back on the receiver.
    fn stop(&self, run_id: &str) -> Option<oneshot::Receiver<Telemetry>> {
        let (_, stop) = self.lock().remove(run_id)?;
        let (reply, telemetry) = oneshot::channel();
        stop.send(reply).ok()?;
        Some(telemetry)
    }
}

/// A wait's entry in [`Waits`], removed when the wait ends or is dropped.
struct Registered<'a> {
    waits: &'a Waits,
    run_id: String,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.waits.lock().remove(&self.run_id);
    }
}

/// `abort`: cancels pending host work and drops the run. A run being resumed by a `wait` is stopped there: the wait
/// ends `aborted` too, and both carry the run's final telemetry.
pub async fn abort(inner: Arc<Inner>, run_id: &str) -> CodeModeResult {
    let unowned = RunScope::default();
    let aborted = |scope: &CatalogScope| {
        CodeModeResult::failed(
            ErrorCode::Aborted,
            FailurePhase::Host,
            "code mode run aborted",
            telemetry(&inner, scope),
        )
    };
    match inner.runs.abort(run_id).await {
        Ok(codemode_snapshot::AbortOutcome::Unknown) => store_failure(&inner, &unowned, &StoreError::Unavailable),
        Ok(codemode_snapshot::AbortOutcome::Parked { live: Some(mut run) }) => {
            run.in_flight.abort_all();
            run.worker = None;
            with_effects(aborted(&run.scope), run.machine.effect_facts(Some(&inner.redactor), true))
        }
        Ok(codemode_snapshot::AbortOutcome::Resuming) => match inner.waits.stop(run_id) {
            Some(telemetry) => match telemetry.await {
                Ok(telemetry) => with_effects(
                    CodeModeResult::failed(ErrorCode::Aborted, FailurePhase::Host, "code mode run aborted", telemetry),
                    unknown_effects(),
                ),
                Err(_) => with_effects(aborted(&scope_of(&inner, &unowned)), unknown_effects()),
            },
            None => with_effects(aborted(&scope_of(&inner, &unowned)), unknown_effects()),
        },
        // Reports the totals of the unowned scope: the run was not live here.
        Ok(_) => with_effects(aborted(&scope_of(&inner, &unowned)), unknown_effects()),
        Err(e) => store_failure(&inner, &unowned, &e),
    }
}

/// Ends every run of session `session` (its owner scope's key): each is aborted as [`abort`] does (calls in flight
/// cancelled, its snapshot dropped, its worker released); returns how many were ended. For an owner that ends with
/// its session; runs of an owner that outlives it (a principal, a shared store) are not ended.
///
/// # Errors
///
/// The run store could not list the session's runs.
pub async fn end_session(inner: Arc<Inner>, session: &str) -> Result<usize, StoreError> {
    let runs = inner.runs.backend().list(Some(session)).await?;
    for run_id in &runs {
        abort(inner.clone(), run_id).await;
    }
    Ok(runs.len())
}

/// Ends every run the agent run of `scope` (its `agent_run_id`, in its session) owns, as [`abort`] ends one; returns
/// how many. A scope without an agent run owns none.
///
/// # Errors
///
/// When the store could not list the session's runs or read one.
pub async fn end_agent_run(inner: Arc<Inner>, scope: &RunScope) -> Result<usize, StoreError> {
    let Some(agent_run) = scope.agent_run_id.as_deref() else { return Ok(0) };
    let backend = inner.runs.backend();
    let mut ended = 0;
    for run_id in backend.list(Some(&owner_of(scope).scope_key())).await? {
        let owned = backend.get(&run_id).await?.is_some_and(|c| c.owner.agent_run_id.as_deref() == Some(agent_run));
        if owned {
            abort(inner.clone(), &run_id).await;
            ended += 1;
        }
    }
    Ok(ended)
}

/// The result of a cell its caller cancelled: dropping the run killed its worker and aborted its tool calls.
pub fn cancelled(inner: &Inner, scope: &RunScope) -> CodeModeResult {
    let result = CodeModeResult::failed(
        ErrorCode::Aborted,
        FailurePhase::Host,
        "code mode run aborted: the caller cancelled it before it ended; its tool calls were cancelled",
        telemetry(inner, &scope_of(inner, scope)),
    );
    with_effects(result, unknown_effects())
}

/// A `wait` or `abort` the store refused: the run (if any) did not run in this call, but its earlier calls may
/// have written, so the result does not claim `mutationFree`.
fn store_failure(inner: &Inner, scope: &RunScope, error: &StoreError) -> CodeModeResult {
    let telemetry = telemetry(inner, &scope_of(inner, scope));
    with_effects(
        CodeModeResult::failed(error.code(), FailurePhase::Input, error.to_string(), telemetry),
        unknown_effects(),
    )
}

fn fail(
    inner: &Inner,
    run: &mut LiveRun,
    kind: impl Into<ErrorKind>,
    phase: FailurePhase,
    error: String,
) -> CodeModeResult {
    let machine = &mut run.machine;
    let output = machine.budget.deliver(std::mem::take(&mut machine.new_output));
    let error = inner.catalog.redact(&machine.budget.admit_error(&error));
    let error_kind = kind.into();
    CodeModeResult::Failed(Failed {
        error,
        code: error_kind.code(),
        error_kind,
        failure_phase: phase,
        bridge_dispatch_started: machine.dispatch_started,
        warnings: untrusted_warnings(machine.untrusted),
        output,
        effects: machine.effect_facts(Some(&inner.redactor), true),
        telemetry: telemetry(inner, &run.scope),
        activity: None,
    })
}

fn complete(inner: &Inner, run: &mut LiveRun, value: Value) -> CodeModeResult {
    let machine = &mut run.machine;
    let output = machine.budget.deliver(std::mem::take(&mut machine.new_output));
    // An oversized object or array is kept host-side for a later `results.load(id)` instead of being cut.
    let bytes = codemode_bridge::json_len(&value);
    let room = machine.budget.max.saturating_sub(machine.budget.used);
    let value = if bytes > room && !machine.restart_safe && (value.is_object() || value.is_array()) {
        let session = run.owner.session_id.as_deref().unwrap_or("default");
        match inner.results.save(session, value.clone(), bytes, inner.limits.inbox_bytes() as usize) {
            Some(reference) => machine.budget.admit_value(reference),
            None => machine.budget.admit_value(value),
        }
    } else {
        machine.budget.admit_value(value)
    };
    let warnings = untrusted_warnings(machine.untrusted);
    let effects = machine.effect_facts(None, true);
    let telemetry = telemetry(inner, &run.scope);
    CodeModeResult::Completed(Completed { value, warnings, output, effects, telemetry, activity: None })
}

/// Carries out the machine's commands until the run stops, then records the calls settled at once not yet recorded.
async fn drive(inner: &Arc<Inner>, run: &mut LiveRun, slot: &mut Option<Slot<LiveRun>>) -> Stop {
    let stop = drive_commands(inner, run, slot).await;
    record_settled(run);
    stop
}

/// Records the spans and metrics of the calls settled at once since the last time.
fn record_settled(run: &mut LiveRun) {
    for settled in run.settled.drain(..) {
        settled.record();
    }
}

async fn drive_commands(inner: &Arc<Inner>, run: &mut LiveRun, slot: &mut Option<Slot<LiveRun>>) -> Stop {
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
                        turn: &run.approvals.turn,
                        notices: &run.approvals.notices,
                        holds: (&run.approvals.holds, &inner.clock),
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
                let event = match tokio::time::timeout(left, Cell::recv(worker)).await {
                    Err(_) => Event::Timeout,
                    Ok(Err(death)) => Event::Died(death),
                    Ok(Ok(message)) => Event::Worker(message),
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

/// Gathers settled host work as [`Command::Collect`] asks, then reports the clock to the machine.
async fn collect(inner: &Inner, run: &mut LiveRun, until_ms: Option<u64>, drain: bool) {
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

/// Hands the machine the approval decisions that arrived. A call's task sends its decision before it ends, so
/// taking them before each settlement keeps a decision ahead of its call's settlement.
fn take_notices(run: &mut LiveRun) {
    while let Ok(notice) = run.approvals.received.try_recv() {
        run.machine.approval_decided(notice.id, notice.decision, notice.at_ms, notice.write);
    }
    while let Ok(hold) = run.approvals.held.try_recv() {
        run.machine.hold_changed(hold.id, hold.on, hold.at_ms);
    }
}

fn accept(inner: &Inner, run: &mut LiveRun, joined: Result<Settlement, tokio::task::JoinError>) {
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
fn settled(inner: &Inner, run: &mut LiveRun, id: u32) {
    if let Some(settlement) = run.machine.ready.iter().rev().find(|s| s.id == id) {
        let recorded = run.machine.effect_of(id, &settlement.value);
        run.activity.finished(id, &settlement.value, inner.clock.now_ms(), recorded);
    }
}

/// The parts of a run that dispatch needs.
pub(crate) struct RunParts<'a> {
    pub(crate) run_id: &'a str,
    /// The span of the `exec` or `wait` driving the run.
    pub(crate) span: &'a Span,
    pub(crate) session: Option<&'a str>,
    pub(crate) restart_safe: bool,
    pub(crate) replay_safe: &'a mut bool,
    pub(crate) untrusted_calls: &'a mut BTreeSet<u32>,
    pub(crate) owner: &'a RunOwner,
    pub(crate) scope: &'a Arc<CatalogScope>,
    pub(crate) dispatch_started: &'a mut bool,
    pub(crate) in_flight: &'a mut JoinSet<Settlement>,
    pub(crate) pending: &'a mut PendingSink<'a>,
    pub(crate) yield_request: &'a mut Option<(u32, Option<String>)>,
    /// Settlements to deliver at the next quiescent point.
    pub(crate) ready: &'a mut Vec<Settlement>,
    /// The run's record of write-class calls.
    pub(crate) effects: &'a mut BTreeMap<u32, crate::machine::Effect>,
    /// Calls whose tool host panicked: their effect is `uncertain`.
    pub(crate) host_failed: &'a mut std::collections::BTreeSet<u32>,
    /// Calls dispatch sent to an approver; the driver hands them to the machine.
    pub(crate) asked: &'a mut Vec<AskedCall>,
    /// The tool each nested call named (for the spans of a replay).
    pub(crate) call_names: &'a mut Vec<CallName>,
    /// Calls settled at once, their spans and metrics to record after the settlements are sent.
    pub(crate) settled: &'a mut Vec<crate::trace::Settled>,
    /// The contract digest of each catalog tool the run called.
    pub(crate) tool_contracts: &'a mut BTreeMap<String, String>,
    /// Who decides approvals in this call, and what was decided.
    pub(crate) approvals: ApprovalParts<'a>,
    /// Receives the progress tool hosts report for the run's calls.
    pub(crate) progress: Option<codemode_bridge::ProgressHook>,
    /// Redacts what people are shown (approval and effect previews).
    pub(crate) redactor: &'a codemode_telemetry::Redactor,
}

/// A request the host refuses outright fails the whole cell: `(code, phase, message)`.
pub(crate) struct Refusal(pub ErrorCode, pub FailurePhase, pub String);
