//! The async side of a run, one module per part: `exec` starts a run (with `idempotency` for an `exec` retried with
//! its key), `driver` does the I/O the [`RunMachine`] asks for (writes to and reads from the cell, dispatches
//! requests, gathers settled host work) until the machine stops the run, `park` parks a stopped run and `wait`s
//! resume it, `approvals` keeps who decides a run's approvals and what they decided, `abort` ends runs from outside,
//! and `fleet` runs the sweeper and the listener. This module holds what they share: the [`Cell`] a run talks to,
//! the [`LiveRun`], and how a machine's ending becomes a result. Run logic (when to deliver, park, time out or
//! finish) is the machine's, not these modules'.
//!
//! Invariant: time reaches the run only through the engine's [`Clock`](codemode_snapshot::Clock) and a new run's
//! seed only through its [`Entropy`]; output handed to the caller is counted so a resumed run never delivers it twice.

mod abort;
mod approvals;
mod driver;
mod exec;
mod fleet;
mod idempotency;
mod park;

pub use abort::{Waits, abort, end_agent_run, end_session};
use approvals::RunApprovals;
pub(crate) use approvals::{ApprovalParts, Hold, Notice};
pub(crate) use driver::PendingSink;
pub use exec::{exec, exec_on, exec_with};
pub use fleet::{start_listener, start_sweeper};
pub use park::{wait, wait_with};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use codemode_bridge::{
    CodeModeResult, Completed, EffectFacts, ErrorCode, ErrorKind, Failed, FailurePhase, Settlement, WaitReason,
};
use codemode_snapshot::{AskedCall, CallName, Projection, RunOwner, StoreError};
use codemode_telemetry::Telemetry;
use codemode_telemetry::span::Span;
use codemode_vm::pool::{Death, WorkerProcess};
use codemode_vm::protocol::{CellLimits, HostMessage, WorkerMessage};
use serde_json::Value;
use tokio::task::{AbortHandle, JoinSet};

use crate::activity::Recorder;
use crate::machine::RunMachine;
use crate::scope::CatalogScope;
use crate::{Inner, RunScope};

/// A cell the driver talks to: a worker process, or a scripted fake in tests.
pub trait Cell: Send {
    /// Writes one message to the cell.
    fn send(&mut self, message: &HostMessage) -> impl Future<Output = Result<(), String>> + Send;
    /// Reads the cell's next message, or how its process ended.
    fn recv(&mut self) -> impl Future<Output = Result<WorkerMessage, Death>> + Send;
    /// The worker process behind the cell, which the pool takes back or a parked run keeps; `None` for a cell that
    /// is not one (a scripted fake), whose run parks without it and resumes by replay.
    fn into_process(self) -> Option<WorkerProcess>
    where
        Self: Sized,
    {
        None
    }
}

impl Cell for WorkerProcess {
    async fn send(&mut self, message: &HostMessage) -> Result<(), String> {
        WorkerProcess::send(self, message).await.map_err(|e| e.to_string())
    }

    async fn recv(&mut self) -> Result<WorkerMessage, Death> {
        WorkerProcess::recv(self).await
    }

    fn into_process(self) -> Option<WorkerProcess> {
        Some(self)
    }
}

/// A run as it lives between calls: its machine, plus the live cell (a worker process, unless a test drives a
/// scripted fake) and in-flight host work. The run store keeps runs whose cell is a worker process.
pub struct LiveRun<C = WorkerProcess> {
    run_id: String,
    /// The span of the `exec` or `wait` driving the run, the parent of its nested calls' spans; disabled while the
    /// run is parked, so that the span ends with its call.
    span: Span,
    owner: RunOwner,
    /// The catalog scope whose counters and schedule the run shares.
    scope: Arc<CatalogScope>,
    machine: RunMachine,
    worker: Option<C>,
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

impl<C> LiveRun<C> {
    /// Whether the run keeps a worker process.
    pub fn holds_worker(&self) -> bool {
        self.worker.is_some()
    }
}

impl<C: Cell> LiveRun<C> {
    /// The run as the store keeps it: with its cell's worker process, or none when the cell is not one.
    fn into_stored(self) -> LiveRun {
        let LiveRun {
            run_id,
            span,
            owner,
            scope,
            machine,
            worker,
            in_flight,
            handles,
            approvals,
            idempotency,
            activity,
            call_names,
            settled,
            kept_alive,
            tool_contracts,
            live_place,
            projection,
        } = self;
        LiveRun {
            run_id,
            span,
            owner,
            scope,
            machine,
            worker: worker.and_then(Cell::into_process),
            in_flight,
            handles,
            approvals,
            idempotency,
            activity,
            call_names,
            settled,
            kept_alive,
            tool_contracts,
            live_place,
            projection,
        }
    }
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

fn fail<C>(
    inner: &Inner,
    run: &mut LiveRun<C>,
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

fn complete<C>(inner: &Inner, run: &mut LiveRun<C>, value: Value) -> CodeModeResult {
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
