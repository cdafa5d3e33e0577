//! The run as a sans-IO state machine: it takes events (worker messages, settlements, clock readings, deadline and
//! death notices) and returns commands (send `Start`/`Settle`, dispatch a request, collect settlements, park,
//! finish). No processes, tasks, timers or clocks live here; the driver in `run/` does that I/O.
//!
//! Invariant: every settlement sent to the worker is appended to the journal, in delivery order, before the `Settle`
//! command is returned, so a checkpoint taken at any park replays to the same state. While a call waits for a
//! person's approval, the deadline and the park time do not run while the program sits idle (the seed's paused
//! clock); what the program computes meanwhile stays charged. A `wait` with a wait budget ([`RunMachine::hold`])
//! holds a run whose program is waiting on host work until something settles or the budget passes, instead of
//! parking at the park time; that waiting is not charged to the execution deadline.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use codemode_bridge::{
    ApprovalDecision, BridgeCall, BridgeErrorCode, BridgeMethod, BridgeRequest, ByteCharge, CallCounts, CallValueArgs,
    EffectFacts, EffectStatus, ErrorCode, ErrorKind, FailurePhase, Journal, OutputBudget, OutputItem, OverCap,
    RequestDigest, Round, Settlement, SettlementValue, SharedBytes, SleepArgs, WaitReason, WriteEffect,
};
use codemode_snapshot::{AskedCall, Checkpoint};
use codemode_telemetry::{Captured, Redactor};
use codemode_vm::pool::Death;
use codemode_vm::protocol::{CellFailure, CellLimits, GuestOutcome, HostMessage, Start, StartGlobals, WorkerMessage};
use serde_json::{Value, json};

/// Bytes of arguments a result's list of writes shows per write.
pub(crate) const EFFECT_PREVIEW_BYTES: usize = 256;

/// A write-class call in the run's record. Its arguments stay captured, not redacted, until someone reads the
/// record (a failed result's list of writes, a checkpoint), so a write no one inspects costs no redaction.
#[derive(Debug)]
pub(crate) struct Effect {
    /// The tool's own name.
    pub(crate) tool: String,
    /// The call id, `bridge:<method>:<n>`.
    pub(crate) call_id: String,
    pub(crate) status: EffectStatus,
    pub(crate) preview: Preview,
}

/// A write's preview: shown (redacted and cut) or still captured.
#[derive(Debug)]
pub(crate) enum Preview {
    /// From a checkpoint, or an approved call's question.
    Shown(String),
    /// The arguments as the call was handed to its host.
    Captured(Captured),
}

impl Effect {
    /// A write restored from a checkpoint, its preview shown already.
    fn shown(effect: WriteEffect) -> Self {
        Self {
            tool: effect.tool,
            call_id: effect.call_id,
            status: effect.status,
            preview: Preview::Shown(effect.preview),
        }
    }

    /// The write as results and checkpoints show it, its preview rendered by `redactor` if still captured.
    pub(crate) fn shown_with(&self, redactor: &Redactor) -> WriteEffect {
        let preview = match &self.preview {
            Preview::Shown(text) => text.clone(),
            Preview::Captured(captured) => redactor.render(captured),
        };
        WriteEffect { tool: self.tool.clone(), call_id: self.call_id.clone(), status: self.status, preview }
    }
}

/// What the driver must do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Write this message (`Start` or `Settle`) to the cell, then hand it back with [`RunMachine::sent`] (a
    /// `Settle`'s round joins the journal then, not copied); report a failed write with [`Event::SendFailed`].
    Send(HostMessage),
    /// Start the host work of this request (its journal digest is computed); report a refusal with
    /// [`Event::Refused`], and the host's answer, when it comes, with [`Event::Settled`].
    Dispatch(BridgeRequest, RequestDigest),
    /// The program cancelled this request: stop its host work if it still runs.
    Cancel(u32),
    /// Wait for the cell's next message until the deadline (epoch ms): report it with [`Event::Worker`],
    /// [`Event::Died`] or [`Event::Timeout`].
    Recv {
        /// When the run times out.
        deadline_ms: u64,
    },
    /// Gather settled host work with [`Event::Settled`], then report [`Event::Collected`]. Without `until_ms`, take
    /// only what has finished already; with it, wait until something finishes or `until_ms` passes, and keep
    /// waiting while `drain` holds and work is still in flight. `until_ms` is [`NO_PARK`] for a cell that awaits
    /// its results: it waits as long as the host work takes.
    Collect {
        /// How long to wait for a first settlement (epoch ms), or `None` to wait for nothing.
        until_ms: Option<u64>,
        /// The program has its outcome: its remaining requests are drained before it ends.
        drain: bool,
    },
    /// Stop the cell's process: it timed out, died or could not be written to.
    Kill,
    /// Park the run: the caller gets `waiting`.
    Park(WaitReason),
    /// End the run.
    Finish(Ending),
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    /// The program returned this value.
    Returned(Value),
    /// The run failed.
    Failed {
        /// The cause; its code is `kind.code()`.
        kind: ErrorKind,
        /// Where it failed.
        phase: FailurePhase,
        /// The message for the model (the driver budgets and redacts it).
        message: String,
    },
}

/// What happened, as the driver reports it.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The cell sent a message.
    Worker(WorkerMessage),
    /// The cell's process ended.
    Died(Death),
    /// The deadline passed while waiting for the cell.
    Timeout,
    /// A message could not be written to the cell.
    SendFailed(String),
    /// The host refused a request outright; the whole cell fails and its worker is killed.
    Refused {
        /// The error code.
        code: ErrorCode,
        /// Where it failed.
        phase: FailurePhase,
        /// Why.
        message: String,
    },
    /// Host work settled.
    Settled(Settlement),
    /// The task running call `id` panicked: the call settles as a `tool_error`, and its effect is `uncertain`
    /// (the tool host may have acted before it failed).
    HostFailed(u32),
    /// A [`Command::Collect`] is over.
    Collected {
        /// The clock when it began (epoch ms): a cell that awaits its results is not charged the time between.
        since_ms: u64,
        /// The clock when it ended (epoch ms): the park check and the delivery round read it.
        now_ms: u64,
        /// Whether `until_ms` passed.
        timed_out: bool,
        /// Whether nothing was in flight when it began.
        idle: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The cell has no program: the next command sends `Start` (with the journal, for a replay).
    Start,
    /// The cell runs: the next command waits for its message.
    Running,
    /// The cell waits for a `Settle`.
    Quiescent,
    /// A `Collect` is out; `blocking` when it waits for a first settlement, `held` when it waits under the wait
    /// budget (until `hold_until_ms`, not charged to execution).
    Collecting { blocking: bool, held: bool },
    /// Parked or finished: no command until the run is resumed.
    Stopped,
}

/// Which message the last `Send` carried, so a failed write fails the run with the right code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    Start,
    Settle,
}

/// The park time of a cell that awaits its results: it never parks, and its collects wait without a time limit.
pub const NO_PARK: u64 = u64::MAX;

/// How a new run starts.
#[derive(Clone, Debug)]
pub struct RunSetup {
    /// The prepared JavaScript.
    pub source: String,
    /// The cell's in-engine limits.
    pub limits: CellLimits,
    /// The seed of the run's `Math.random` (from the engine's randomness source).
    pub seed: u64,
    /// The clock at the start (epoch ms): the guest's virtual clock starts here.
    pub start_clock_ms: u64,
    /// The output budget of the run.
    pub max_output_bytes: usize,
    /// Whether the cell may call only replay-safe tools.
    pub restart_safe: bool,
    /// Whether the cell waits for its tool calls up to the deadline instead of parking before it.
    pub await_results: bool,
    /// Bytes of JSON the run's journal may hold besides its successful replies (which the inbox bounds, at
    /// `limits.inbox_bytes`): `maxSnapshotBytes`. The run fails as it passes them.
    pub max_journal_bytes: u64,
    /// The cap the journals of all the engine's runs share, if any.
    pub shared_journal: Option<Arc<SharedBytes>>,
}

/// Whether a settlement of a call to an MCP server carries what the server sent: its result or its error, not a
/// refusal of ours (the policy or a person denied it) or the interruption of a process that died.
fn server_answered(value: &SettlementValue) -> bool {
    match value {
        SettlementValue::Ok { .. } => true,
        SettlementValue::Err { code, .. } => !matches!(code, BridgeErrorCode::Denied | BridgeErrorCode::Interrupted),
    }
}

/// Bytes a request's digest adds to the journal (a JSON number of up to 20 digits and its separator).
const DIGEST_BYTES: u64 = 21;

/// The state of one run between its events.
#[derive(Debug)]
pub struct RunMachine {
    pub(crate) source: String,
    limits: CellLimits,
    pub(crate) restart_safe: bool,
    await_results: bool,
    pub(crate) journal: Journal,
    /// What the journal holds, charged against the run's cap and the engine's shared one as it grows.
    journal_charge: ByteCharge,
    /// Bytes of successful replies delivered so far, against the program's inbox (`limits.inbox_bytes`).
    inbox_used: u64,
    pub(crate) budget: OutputBudget,
    /// Output items the worker has emitted so far (delivered or pending delivery).
    pub(crate) emitted: usize,
    pub(crate) new_output: Vec<OutputItem>,
    pub(crate) dispatch_started: bool,
    pub(crate) replay_safe: bool,
    /// Whether content from an MCP server (untrusted) reached the program.
    pub(crate) untrusted: bool,
    /// Requests answered by an MCP server (its tools, resources and prompts), dispatched and not delivered yet: the
    /// run reads untrusted content when one of them delivers what the server sent.
    pub(crate) untrusted_calls: BTreeSet<u32>,
    /// Whether the worker waits for a `Settle` (it is at a quiescent point, or ended its cell itself).
    pub(crate) quiescent: bool,
    /// Requests dispatched and not delivered yet: method and argument digest.
    pub(crate) pending: BTreeMap<u32, (BridgeMethod, u64)>,
    /// Settlements to deliver at the next quiescent point, in the order they settled.
    pub(crate) ready: Vec<Settlement>,
    pub(crate) yield_request: Option<(u32, Option<String>)>,
    /// Timers (`sleep` requests) not delivered yet: when each is due on the guest's virtual clock (epoch ms).
    timers: BTreeMap<u32, u64>,
    /// Timers of a restored run, to be started again for the delay they had left: id, due time, digest.
    restored_timers: Vec<(u32, u64, u64)>,
    outcome: Option<GuestOutcome>,
    phase: Phase,
    last_sent: Sent,
    deadline_ms: u64,
    park_at_ms: u64,
    /// The end of the current `wait`'s budget (epoch ms), while it holds the run; `None` for an `exec`.
    hold_until_ms: Option<u64>,
    /// The current `wait`'s budget (ms), by which [`RunMachine::extend_hold`] moves `hold_until_ms`.
    hold_ms: u64,
    queue: VecDeque<Command>,
    /// Calls waiting for a person's decision, by request id: being asked, or deferred by the approver.
    pub(crate) asked: BTreeMap<u32, AskedCall>,
    /// Where the uncredited part of the current pause begins (epoch ms), while a call is being asked or held.
    pause_since: Option<u64>,
    /// A clock reading known to fall in the program's current idle stretch (it reported quiescence and has not
    /// been sent a `Settle` since): a pause is credited only from here. `None` while the program computes, and
    /// after a quiescent report until such a reading comes.
    idle_since: Option<u64>,
    /// The first request id of the last quiescent report (`u32::MAX`: none). Request ids are creation-ordered, so
    /// the ids from here on are that report's: a pause notice about one of them was read after the report, and its
    /// clock reading falls in the idle stretch.
    fresh_from: u32,
    /// Nested calls waiting for a person (an elicitation the host relays), by request id, with how many waits each
    /// has open: while any is, the deadline and the park time stand still, as during an approval.
    held: BTreeMap<u32, u32>,
    /// The host's record of the run's write-class calls, by request id, across all its waits.
    pub(crate) effects: BTreeMap<u32, Effect>,
    /// Nested tool calls (`callValue`, `namespace`) dispatched and not settled yet, by request id.
    tool_calls: BTreeSet<u32>,
    /// Tool calls whose task panicked: their effect is `uncertain`, whatever their settlement says.
    pub(crate) host_failed: BTreeSet<u32>,
    /// The run's settled nested tool calls by effect status.
    pub(crate) call_counts: CallCounts,
    /// The globals the next `Start` installs: `None` for a worker whose contexts carry the catalog's already.
    globals: Option<StartGlobals>,
}

/// The settlement of call `id` whose tool host panicked: a `tool_error`; its effect is `uncertain`.
pub(crate) fn host_failure(id: u32) -> Settlement {
    let value = SettlementValue::err(
        BridgeErrorCode::ToolError,
        "the tool host failed while running this call; it may have acted before it failed",
    );
    Settlement { id, value }
}

/// The effect status a settlement from the host means for a call that reached it.
pub fn effect_status(value: &SettlementValue) -> EffectStatus {
    match value {
        SettlementValue::Ok { .. } => EffectStatus::Completed,
        SettlementValue::Err { code, .. } => match code {
            BridgeErrorCode::Interrupted => EffectStatus::Uncertain,
            // The tool answered; only its answer broke the contract.
            BridgeErrorCode::OutputContract => EffectStatus::Completed,
            // Refused before the tool was called: the policy, its arguments, or a schema that does not compile
            // (`validate_input` compiles the output schema too, so `invalid_contract` never follows a call).
            BridgeErrorCode::Denied | BridgeErrorCode::InputContract | BridgeErrorCode::InvalidContract => {
                EffectStatus::NotStarted
            }
            _ => EffectStatus::Failed,
        },
    }
}

/// Which failure a worker's death is. The host's own limits keep their meaning (memory or stack: the program
/// passed a limit); every other end the host did not cause (a crash, a signal the host did not send, a confinement
/// exit) is the runtime's fault, not the program's: `runtime_unavailable`. The host's deadline kill never reaches
/// here: it is [`Event::Timeout`].
pub fn death_kind(death: &Death) -> (ErrorKind, FailurePhase) {
    match death {
        Death::Memory | Death::Stack => (ErrorKind::MemoryLimitExceeded, FailurePhase::Guest),
        // A message over the host's read cap: the host stopped reading and killed the worker.
        Death::Oversized(_) => (ErrorKind::OutputLimitExceeded, FailurePhase::Bridge),
        Death::Other(_) | Death::Confinement(_) => (ErrorKind::RuntimeUnavailable, FailurePhase::Host),
    }
}

/// Whether a nested call collects results as a required cell does (seed 000): a shell `exec` or `agents_wait` called
/// with `awaitResults: true` makes the cell that calls it required.
fn collects_results(call: &BridgeCall) -> bool {
    let BridgeCall::CallValue(CallValueArgs { tool, args: Some(args), .. }) = call else { return false };
    matches!(tool.as_str(), "exec" | "agents_wait") && args.get("awaitResults") == Some(&Value::Bool(true))
}

impl RunMachine {
    /// A run about to start in a fresh cell.
    pub fn new(setup: RunSetup) -> RunMachine {
        let journal = Journal {
            seed: setup.seed,
            start_clock_ms: i64::try_from(setup.start_clock_ms).unwrap_or(i64::MAX),
            requests: Vec::new(),
            rounds: Vec::new(),
        };
        RunMachine {
            source: setup.source,
            limits: setup.limits,
            restart_safe: setup.restart_safe,
            await_results: setup.await_results,
            journal,
            journal_charge: ByteCharge::new(setup.max_journal_bytes, setup.shared_journal),
            inbox_used: 0,
            budget: OutputBudget::new(setup.max_output_bytes),
            emitted: 0,
            new_output: Vec::new(),
            dispatch_started: false,
            replay_safe: true,
            untrusted: false,
            untrusted_calls: BTreeSet::new(),
            quiescent: false,
            pending: BTreeMap::new(),
            ready: Vec::new(),
            yield_request: None,
            timers: BTreeMap::new(),
            restored_timers: Vec::new(),
            outcome: None,
            phase: Phase::Start,
            last_sent: Sent::Start,
            deadline_ms: u64::MAX,
            park_at_ms: u64::MAX,
            hold_until_ms: None,
            hold_ms: 0,
            queue: VecDeque::new(),
            asked: BTreeMap::new(),
            pause_since: None,
            idle_since: None,
            fresh_from: u32::MAX,
            held: BTreeMap::new(),
            effects: BTreeMap::new(),
            tool_calls: BTreeSet::new(),
            host_failed: BTreeSet::new(),
            call_counts: CallCounts::default(),
            globals: None,
        }
    }

    /// A run rebuilt from its checkpoint, to be replayed in a fresh cell. Requests that were in flight are gone with
    /// the process that parked it: they settle as interrupted, except a pending yield, which the resume answers.
    /// `journal_charge` takes the restored journal's bytes; a journal past its caps fails the run when it begins.
    pub fn restore(checkpoint: &Checkpoint, limits: CellLimits, journal_charge: ByteCharge) -> RunMachine {
        let mut machine = RunMachine {
            source: checkpoint.source.clone(),
            limits,
            restart_safe: checkpoint.restart_safe,
            await_results: false,
            journal: checkpoint.journal.clone(),
            journal_charge,
            inbox_used: 0,
            budget: checkpoint.output_budget.clone(),
            emitted: checkpoint.delivered_output,
            new_output: Vec::new(),
            dispatch_started: true,
            replay_safe: checkpoint.restart_safe,
            untrusted: checkpoint.untrusted,
            untrusted_calls: BTreeSet::new(),
            quiescent: false,
            pending: BTreeMap::new(),
            ready: codemode_snapshot::interrupted_settlements(checkpoint),
            yield_request: None,
            timers: BTreeMap::new(),
            restored_timers: Vec::new(),
            outcome: None,
            phase: Phase::Start,
            last_sent: Sent::Start,
            deadline_ms: u64::MAX,
            park_at_ms: u64::MAX,
            hold_until_ms: None,
            hold_ms: 0,
            queue: VecDeque::new(),
            asked: BTreeMap::new(),
            pause_since: None,
            idle_since: None,
            fresh_from: u32::MAX,
            held: BTreeMap::new(),
            effects: checkpoint.effects.iter().map(|e| (e.id, Effect::shown(e.effect.clone()))).collect(),
            // Calls in flight when it parked: settled later (by their tool, or as interrupted), then counted.
            tool_calls: checkpoint
                .pending
                .iter()
                .filter(|p| matches!(p.bridge_method(), Some(BridgeMethod::CallValue | BridgeMethod::Namespace)))
                .map(|p| p.id)
                .collect(),
            host_failed: BTreeSet::new(),
            call_counts: checkpoint.call_counts,
            globals: None,
        };
        // Calls that were waiting for a decision never reached their tool: each is asked again (or answered by
        // the wait) as the run begins.
        for call in &checkpoint.asked {
            let id = call.request.id;
            if let Some(p) = checkpoint.pending.iter().find(|p| p.id == id)
                && let Some(method) = p.bridge_method()
            {
                machine.pending.insert(id, (method, p.args_digest));
                machine.asked.insert(id, AskedCall { deferred: true, ..call.clone() });
            }
        }
        if let Some(y) = &checkpoint.yield_request {
            machine.ready.retain(|s| s.id != y.id);
            machine.yield_request = Some((y.id, y.reason.clone()));
        }
        // A pending timer is host work that needs no tool: it runs again, for the delay it had left.
        for p in &checkpoint.pending {
            if let (Some(due), Some(BridgeMethod::Sleep)) = (p.due_ms, p.bridge_method()) {
                machine.pending.insert(p.id, (BridgeMethod::Sleep, p.args_digest));
                machine.timers.insert(p.id, due);
                machine.restored_timers.push((p.id, due, p.args_digest));
            }
        }
        for round in &checkpoint.journal.rounds {
            for settlement in &round.settlements {
                if let SettlementValue::Ok { value } = &settlement.value {
                    machine.inbox_used += codemode_bridge::json_len(value) as u64;
                }
            }
        }
        let bytes = codemode_bridge::json_len(&machine.journal) as u64;
        if let Err(over) = machine.journal_charge.add_split(bytes.saturating_sub(machine.inbox_used), bytes) {
            machine.over_journal_cap(over);
        }
        machine
    }

    /// Begins an `exec` or a `wait` at `now_ms` with `timeout_ms` to run: sets the deadline and the park time (a
    /// margin before the deadline, unless the cell awaits its results), and answers a pending yield.
    pub fn begin(&mut self, now_ms: u64, timeout_ms: u64) {
        self.hold_until_ms = None;
        self.deadline_ms = now_ms.saturating_add(timeout_ms);
        let margin = 250.min(timeout_ms / 2);
        self.park_at_ms = if self.await_results { NO_PARK } else { self.deadline_ms - margin };
        // Deferred approvals are dispatched again: the wait's answer or its approver decides them. A call still
        // being asked keeps the clock paused from now (time parked earns no credit).
        let deferred: Vec<u32> = self.asked.iter().filter(|(_, a)| a.deferred).map(|(id, _)| *id).collect();
        for id in deferred {
            if let (Some(call), Some((_, digest))) = (self.asked.remove(&id), self.pending.get(&id)) {
                self.queue.push_back(Command::Dispatch(call.request, RequestDigest(*digest)));
            }
        }
        self.pause_since = self.asking().then_some(now_ms);
        self.fresh_from = u32::MAX;
        // Timers that came due while the run was parked fire now, in the order they were due (as zero-delay sleeps
        // they would settle in any order); the others sleep for what they have left.
        let mut restored = std::mem::take(&mut self.restored_timers);
        restored.sort_by_key(|&(id, due, _)| (due, id));
        for (id, due, digest) in restored {
            if due <= now_ms {
                self.ready.push(Settlement { id, value: SettlementValue::Ok { value: Value::Null } });
            } else {
                let call = BridgeCall::Sleep(SleepArgs { ms: due - now_ms });
                self.queue.push_back(Command::Dispatch(BridgeRequest { id, call }, RequestDigest(digest)));
            }
        }
        // A yield is answered by the wait that resumes it.
        if let Some((id, reason)) = self.yield_request.take() {
            self.ready.push(Settlement {
                id,
                value: SettlementValue::Ok { value: json!({ "status": "yielded", "reason": reason }) },
            });
        }
        if self.phase == Phase::Stopped {
            self.phase = if self.quiescent { Phase::Quiescent } else { Phase::Start };
        }
        // A live quiescent cell sits idle from now; a cell about to start computes.
        self.idle_since = (self.phase == Phase::Quiescent).then_some(now_ms);
    }

    /// Gives the current `wait` (after [`begin`](Self::begin)) a wait budget of `budget_ms` from `now_ms`: while the
    /// program waits on host work and has printed nothing new in this wait, the run is held until something settles
    /// or the budget passes, and the time held is not charged to the deadline. `0`, or a cell that awaits its
    /// results (it never parks anyway), holds nothing.
    pub fn hold(&mut self, now_ms: u64, budget_ms: u64) {
        if budget_ms > 0 && !self.await_results {
            self.hold_until_ms = Some(now_ms.saturating_add(budget_ms));
            self.hold_ms = budget_ms;
        }
    }

    /// Restarts the wait budget at `now_ms` (the caller's client was just kept alive by a progress notification).
    pub fn extend_hold(&mut self, now_ms: u64) {
        if let Some(until) = &mut self.hold_until_ms {
            *until = (*until).max(now_ms.saturating_add(self.hold_ms));
        }
    }

    /// Whether a blocking collect now waits under the wait budget: one is set, reaches past the park time, and the
    /// program printed nothing since the wait began (new output is something the model can act on, so the run goes
    /// on to its ordinary park time).
    fn holding(&self) -> bool {
        self.hold_until_ms.is_some_and(|until| until > self.park_at_ms) && self.new_output.is_empty()
    }

    /// The globals the next cell's `Start` installs: `None` for a worker of the catalog's own pool (its contexts
    /// carry the catalog's), the run's own for a worker started without any (a shared pool, a changed catalog).
    pub fn set_globals(&mut self, globals: Option<StartGlobals>) {
        self.globals = globals;
    }

    /// The cell is gone (parked without its worker, or swept): the next resume starts a fresh one and replays.
    pub fn detach_cell(&mut self) {
        self.quiescent = false;
        self.phase = Phase::Start;
    }

    /// Whether the cell ended its program cleanly and can serve another run.
    pub fn cell_reusable(&self) -> bool {
        self.quiescent
    }

    /// The next command, or `None` while the machine waits for an event (a `Collect` is out) or the run stopped.
    pub fn poll(&mut self) -> Option<Command> {
        if let Some(command) = self.queue.pop_front() {
            return Some(command);
        }
        match self.phase {
            Phase::Start => {
                self.phase = Phase::Running;
                self.quiescent = false;
                self.idle_since = None;
                self.last_sent = Sent::Start;
                let start = Start {
                    source: self.source.clone(),
                    // A catalog's own pool builds every context with its globals; a worker started without them
                    // gets the run's own.
                    globals: self.globals.as_ref().map(|g| g.globals.clone()),
                    globals_key: self.globals.as_ref().and_then(|g| g.key),
                    limits: self.limits.clone(),
                    journal: self.journal.clone(),
                    skip_output: self.emitted as u64,
                };
                Some(Command::Send(HostMessage::Start(Box::new(start))))
            }
            Phase::Running => Some(Command::Recv { deadline_ms: self.deadline_ms }),
            Phase::Quiescent => {
                // A cell run with awaitResults cannot be abandoned: its yield is refused catchably, and the program
                // goes on to finish (or its owner cancels it).
                if self.await_results
                    && let Some((id, _)) = self.yield_request.take()
                {
                    let value = SettlementValue::err(
                        BridgeErrorCode::InvalidInput,
                        "yield_control cannot park a cell run with awaitResults: true, which returns only when its \
                         program completes or fails; the program goes on (catch this error, or run the cell without \
                         awaitResults to yield and resume with wait)",
                    );
                    self.ready.push(Settlement { id, value });
                }
                if self.ready.is_empty() && self.yield_request.is_some() {
                    self.phase = Phase::Stopped;
                    return Some(Command::Park(WaitReason::Yield));
                }
                // Only deferred approvals are left: nothing more can happen in this call.
                if self.ready.is_empty()
                    && !self.pending.is_empty()
                    && self.pending.keys().all(|id| self.asked.get(id).is_some_and(|a| a.deferred))
                {
                    self.phase = Phase::Stopped;
                    return Some(Command::Park(WaitReason::Approval));
                }
                let drain = self.outcome.is_some();
                // Settlements already at hand go out at once, with whatever else has finished by now; otherwise the
                // driver waits for the first one until the park time.
                if self.ready.is_empty() {
                    let held = !drain && self.holding();
                    self.phase = Phase::Collecting { blocking: true, held };
                    let until_ms = match self.hold_until_ms {
                        Some(until) if held => until,
                        _ => self.park_at_ms,
                    };
                    Some(Command::Collect { until_ms: Some(until_ms), drain })
                } else {
                    self.phase = Phase::Collecting { blocking: false, held: false };
                    Some(Command::Collect { until_ms: None, drain })
                }
            }
            Phase::Collecting { .. } | Phase::Stopped => None,
        }
    }

    /// Takes one event.
    pub fn handle(&mut self, event: Event) {
        match event {
            Event::Worker(message) => self.on_message(message),
            Event::Died(death) => {
                let (kind, phase) = death_kind(&death);
                self.kill_and_fail(kind, phase, death.message());
            }
            Event::Timeout => {
                self.kill_and_fail(ErrorCode::Timeout, FailurePhase::Guest, "code mode timeout exceeded".into());
            }
            Event::SendFailed(error) => {
                let code = match self.last_sent {
                    Sent::Start => ErrorCode::RuntimeUnavailable,
                    Sent::Settle => ErrorCode::InternalError,
                };
                self.kill_and_fail(code, FailurePhase::Host, error);
            }
            // The cell stopped mid-program, waiting for a `Settle` that never comes: its worker cannot serve
            // another cell (a `Start` there is a protocol error that ends it), so it is killed, never pooled.
            Event::Refused { code, phase, message } => self.kill_and_fail(code, phase, message),
            Event::Settled(settlement) => {
                match self.asked.get(&settlement.id) {
                    // The approver deferred it: the call waits in the run, and this settlement says nothing.
                    Some(call) if call.deferred => return,
                    // Its task ended without a decision (it panicked): the call is over.
                    Some(_) => {
                        self.asked.remove(&settlement.id);
                        if !self.asking() {
                            self.pause_since = None;
                        }
                    }
                    None => {}
                }
                if self.pending.contains_key(&settlement.id) {
                    if let Some(effect) = self.effects.get_mut(&settlement.id)
                        && effect.status == EffectStatus::Uncertain
                    {
                        effect.status = effect_status(&settlement.value);
                    }
                    self.ready.push(settlement);
                }
            }
            Event::HostFailed(id) => {
                self.handle(Event::Settled(host_failure(id)));
                if let Some(effect) = self.effects.get_mut(&id) {
                    effect.status = EffectStatus::Uncertain;
                }
                self.host_failed.insert(id);
            }
            Event::Collected { since_ms, now_ms, timed_out, idle } => {
                // A collect begins after the quiescent report's requests went out: the program is idle.
                self.stamp_idle(since_ms);
                if self.await_results {
                    // Waiting on host work off the VM is not charged to the execution allowance.
                    self.deadline_ms = self.deadline_ms.saturating_add(now_ms.saturating_sub(since_ms));
                } else if let Phase::Collecting { held: true, .. } = self.phase {
                    // Nor is the time a wait holds the run: the program is not running. A pause is credited up to
                    // the hold, which credits the rest.
                    self.credit_pause(since_ms);
                    let held = now_ms.saturating_sub(since_ms);
                    self.deadline_ms = self.deadline_ms.saturating_add(held);
                    self.park_at_ms = self.park_at_ms.saturating_add(held);
                    if self.pause_since.is_some() {
                        self.pause_since = Some(now_ms);
                    }
                }
                self.credit_pause(now_ms);
                self.on_collected(now_ms, timed_out, idle);
                if self.phase == Phase::Running {
                    // A `Settle` goes out: the program computes again, and its time is charged.
                    self.idle_since = None;
                }
            }
        }
    }

    /// Records a dispatched request; `settled` is its answer when the host gave it at once.
    pub fn dispatched(
        &mut self,
        id: u32,
        method: BridgeMethod,
        digest: RequestDigest,
        settled: Option<SettlementValue>,
    ) {
        self.pending.insert(id, (method, digest.0));
        if let Some(value) = settled {
            self.ready.push(Settlement { id, value });
        }
    }

    /// Records a call whose approval is being asked since `now_ms` (or was deferred): while one is being asked, the
    /// deadline and the park time stand still.
    pub fn approval_asked(&mut self, call: AskedCall, now_ms: u64) {
        // Asked as it is dispatched, after the quiescent report that released it.
        self.stamp_idle(now_ms);
        if !call.deferred && !self.asking() {
            self.pause_since = Some(now_ms);
        }
        self.asked.insert(call.request.id, call);
    }

    /// The decision on call `id` arrived at `at_ms`. Approved, a write-class call (`write`) enters the effect record
    /// as `uncertain` until its tool answers; denied, its settlement follows; deferred, it waits in the run for a
    /// later `wait`'s answer. The last decision pending ends the pause: the deadline moves by the time it took.
    pub fn approval_decided(&mut self, id: u32, decision: ApprovalDecision, at_ms: u64, write: bool) {
        if id >= self.fresh_from {
            self.stamp_idle(at_ms);
        }
        let Some(call) = self.asked.get_mut(&id) else { return };
        let approved = matches!(decision, ApprovalDecision::Approve | ApprovalDecision::ApproveForRun);
        if decision == ApprovalDecision::Defer {
            call.deferred = true;
        } else if let Some(call) = self.asked.remove(&id)
            && approved
            && write
        {
            let preview = codemode_telemetry::redact::cut(call.approval.preview, EFFECT_PREVIEW_BYTES);
            self.effects.insert(
                id,
                Effect {
                    tool: call.approval.tool,
                    call_id: call.approval.call_id,
                    status: EffectStatus::Uncertain,
                    preview: Preview::Shown(preview),
                },
            );
        }
        if !self.asking() {
            self.credit_pause(at_ms);
            self.pause_since = None;
        }
    }

    /// The effect status the host records for tool call `id` settled with `value`: `uncertain` when its tool host
    /// failed, a write's recorded status, else what the settlement says.
    pub(crate) fn effect_of(&self, id: u32, value: &SettlementValue) -> EffectStatus {
        if self.host_failed.contains(&id) {
            return EffectStatus::Uncertain;
        }
        self.effects.get(&id).map_or_else(|| effect_status(value), |e| e.status)
    }

    /// Nested call `id` began (`on`) or ended a wait for a person at `at_ms`: the first wait to begin pauses the
    /// deadline and the park time (unless an approval already did), the last to end moves them by the pause.
    pub fn hold_changed(&mut self, id: u32, on: bool, at_ms: u64) {
        if id >= self.fresh_from {
            self.stamp_idle(at_ms);
        }
        let was = self.asking();
        if on {
            *self.held.entry(id).or_default() += 1;
        } else if let Some(count) = self.held.get_mut(&id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.held.remove(&id);
            }
        }
        match (was, self.asking()) {
            (false, true) => self.pause_since = Some(at_ms),
            (true, false) => {
                self.credit_pause(at_ms);
                self.pause_since = None;
            }
            _ => {}
        }
    }

    /// Whether a call is being asked about now (not deferred), or waits for a person through its host.
    fn asking(&self) -> bool {
        !self.held.is_empty() || self.asked.values().any(|a| !a.deferred)
    }

    /// Records that the program is idle at `at_ms`, the first such reading of its current idle stretch.
    fn stamp_idle(&mut self, at_ms: u64) {
        if self.idle_since.is_none() && !matches!(self.phase, Phase::Start | Phase::Running) {
            self.idle_since = Some(at_ms);
        }
    }

    /// Moves the deadline and the park time by the part of the pause up to `now_ms` that the program sat idle
    /// waiting: from the later of the pause's start and the idle stretch's. Time it computed stays charged.
    fn credit_pause(&mut self, now_ms: u64) {
        let Some(since) = self.pause_since else { return };
        let Some(idle) = self.idle_since else { return };
        let paused = now_ms.saturating_sub(since.max(idle));
        // A cell that awaits its results is not charged for host work anyway.
        if !self.await_results {
            self.deadline_ms = self.deadline_ms.saturating_add(paused);
            if self.park_at_ms != NO_PARK {
                self.park_at_ms = self.park_at_ms.saturating_add(paused);
            }
        }
        self.pause_since = Some(now_ms.max(since));
    }

    /// Renders every write's preview still captured, for a run about to show them more than once (its checkpoints
    /// and its result).
    pub(crate) fn show_effects(&mut self, redactor: &Redactor) {
        for effect in self.effects.values_mut() {
            if let Preview::Captured(captured) = &effect.preview {
                effect.preview = Preview::Shown(redactor.render(captured));
            }
        }
    }

    /// The effect facts of the run so far; with a redactor (`list`), also the completed and uncertain writes
    /// (failed results), their previews rendered by it. With `ended` (the run failed or was aborted), calls still
    /// in flight count as `uncertain`; otherwise (a park) they are not counted yet.
    pub fn effect_facts(&self, list: Option<&Redactor>, ended: bool) -> EffectFacts {
        let mut facts = EffectFacts { calls: self.call_counts, ..EffectFacts::default() };
        if ended {
            for _ in &self.tool_calls {
                facts.calls.add(EffectStatus::Uncertain);
            }
        }
        for effect in self.effects.values() {
            match effect.status {
                EffectStatus::NotStarted => continue,
                EffectStatus::Completed => facts.completed_writes += 1,
                EffectStatus::Failed => facts.failed_writes += 1,
                _ => facts.uncertain_writes += 1,
            }
            facts.mutation_free = false;
            if let Some(redactor) = list
                && effect.status != EffectStatus::Failed
            {
                facts.writes.push(effect.shown_with(redactor));
            }
        }
        facts
    }

    /// The deadline (epoch ms) of the current `exec` or `wait`, moved by approval pauses so far.
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// Records a `yield_control` request: the run parks once nothing else is ready to deliver.
    pub fn yielded(&mut self, id: u32, reason: Option<String>) {
        self.yield_request = Some((id, reason));
    }

    /// The pending requests' `(id, method, digest)`, for a checkpoint.
    pub fn pending(&self) -> impl Iterator<Item = (u32, BridgeMethod, u64)> + '_ {
        self.pending.iter().map(|(id, (method, digest))| (*id, *method, *digest))
    }

    /// When pending timer `id` is due on the guest's virtual clock (epoch ms); `None` for any other request.
    pub fn timer_due(&self, id: u32) -> Option<u64> {
        self.timers.get(&id).copied()
    }

    /// The run's journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    fn on_message(&mut self, message: WorkerMessage) {
        match message {
            // `recv` consumes the hello and skips `Ready`.
            WorkerMessage::Hello(_) | WorkerMessage::Ready => {}
            WorkerMessage::Output(item) => {
                self.emitted += 1;
                // Budgeted as it arrives: past the budget, only its length is kept, for the truncation marker.
                self.budget.admit_item(item, &mut self.new_output);
            }
            WorkerMessage::Failed { failure, message } => {
                // The worker ended the cell itself and is building a fresh context: it can serve again.
                self.quiescent = true;
                let (code, phase) = match failure {
                    CellFailure::Timeout => (ErrorKind::Timeout, FailurePhase::Guest),
                    CellFailure::InvalidInput => (ErrorKind::InvalidInput, FailurePhase::Bridge),
                    CellFailure::Stalled => (ErrorKind::GuestError, FailurePhase::Guest),
                    CellFailure::EngineLimit => (ErrorKind::EngineLimit, FailurePhase::Guest),
                    CellFailure::Internal => (ErrorKind::InternalError, FailurePhase::Host),
                    CellFailure::UnhandledRejection => (ErrorKind::UnhandledRejection, FailurePhase::Guest),
                };
                self.finish(Ending::Failed { kind: code, phase, message });
            }
            WorkerMessage::Quiescent { requests, outcome, open, canceled } => {
                self.quiescent = true;
                self.phase = Phase::Quiescent;
                self.fresh_from = requests.first().map_or(u32::MAX, |r| r.id);
                // A request the program made and gave up on in the same stretch (a timer set and cleared) is never
                // started: its replay makes and clears it again, and no settlement may be journaled for it.
                let withdrawn: BTreeSet<u32> =
                    canceled.iter().copied().filter(|id| requests.iter().any(|r| r.id == *id)).collect();
                for id in canceled {
                    self.timers.remove(&id);
                    // The program gave up on it; the host may already have handed it to its tool.
                    if self.tool_calls.remove(&id) {
                        self.call_counts.add(EffectStatus::Uncertain);
                    }
                    if self.pending.remove(&id).is_some() {
                        self.queue.push_back(Command::Cancel(id));
                    }
                    self.ready.retain(|s| s.id != id);
                }
                if let Err(over) = self.journal_charge.add(DIGEST_BYTES.saturating_mul(requests.len() as u64)) {
                    self.over_journal_cap(over);
                    return;
                }
                for request in requests {
                    let digest = request.digest();
                    if withdrawn.contains(&request.id) {
                        self.journal.requests.push(digest);
                        continue;
                    }
                    if let BridgeCall::Sleep(SleepArgs { ms }) = &request.call {
                        // The guest's virtual clock reads the last round's clock (or the start) until the next one.
                        let clock = self.journal.rounds.last().map_or(self.journal.start_clock_ms, |r| r.clock_ms);
                        let clock = u64::try_from(clock).unwrap_or(0);
                        self.timers.insert(request.id, clock.saturating_add(*ms));
                    }
                    if matches!(request.call, BridgeCall::CallValue(_) | BridgeCall::Namespace(_)) {
                        self.tool_calls.insert(request.id);
                    }
                    if collects_results(&request.call) {
                        self.require_results();
                    }
                    self.journal.requests.push(digest);
                    self.queue.push_back(Command::Dispatch(request, digest));
                }
                if let Some(outcome) = outcome {
                    self.outcome = Some(outcome);
                }
                if self.outcome.is_some() && open == 0 {
                    let ending = match self.outcome.take().expect("checked above") {
                        GuestOutcome::Returned { value } => Ending::Returned(value),
                        GuestOutcome::Threw { error } => {
                            Ending::Failed { kind: ErrorKind::GuestError, phase: FailurePhase::Guest, message: error }
                        }
                    };
                    self.finish(ending);
                }
            }
        }
    }

    /// Makes the cell required from now on, as `awaitResults: true` on its `exec` would have: it no longer parks
    /// at the park time, its waits on host work are not charged to its deadline, and its yields are refused.
    fn require_results(&mut self) {
        self.await_results = true;
        self.park_at_ms = NO_PARK;
        self.hold_until_ms = None;
    }

    fn on_collected(&mut self, now_ms: u64, timed_out: bool, idle: bool) {
        let Phase::Collecting { blocking, held } = self.phase else { return };
        let draining = self.outcome.is_some();
        if !blocking {
            // A program still running that is due to park parks instead; its undelivered settlements wait in the run.
            if !draining && now_ms >= self.park_at_ms {
                self.phase = Phase::Stopped;
                self.queue.push_back(Command::Park(WaitReason::PendingTools));
                return;
            }
        } else if idle {
            self.finish(Ending::Failed {
                kind: ErrorKind::InternalError,
                phase: FailurePhase::Host,
                message: "code mode run has nothing in flight but the program waits for a settlement".into(),
            });
            return;
        } else if self.ready.is_empty() {
            // An approval pause moved the park time past the collect's end: keep collecting. A held collect ends
            // the wait when the wait budget passed with nothing settled.
            let due_ms = if held { self.hold_until_ms.unwrap_or(self.park_at_ms) } else { self.park_at_ms };
            if timed_out && now_ms >= due_ms {
                self.phase = Phase::Stopped;
                self.queue.push_back(Command::Park(WaitReason::PendingTools));
            } else {
                self.phase = Phase::Quiescent;
            }
            return;
        }
        let clock_ms = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let mut round = Round { clock_ms, settlements: std::mem::take(&mut self.ready) };
        let mut replies = 0;
        for settlement in &mut round.settlements {
            replies += self.admit_reply(settlement);
        }
        // The journal keeps every settlement delivered. Successful replies are bounded by the inbox already; the
        // rest (errors, framing) counts against the run's cap, and everything against the engine's shared cap. A
        // run that would pass either fails now, before the host holds any more.
        let total = codemode_bridge::json_len(&round) as u64;
        if let Err(over) = self.journal_charge.add_split(total.saturating_sub(replies), total) {
            self.over_journal_cap(over);
            return;
        }
        for settlement in &round.settlements {
            self.pending.remove(&settlement.id);
            if self.untrusted_calls.remove(&settlement.id) {
                self.untrusted |= server_answered(&settlement.value) && !self.host_failed.contains(&settlement.id);
            }
            self.timers.remove(&settlement.id);
            if self.tool_calls.remove(&settlement.id) {
                let status = if self.host_failed.remove(&settlement.id) {
                    EffectStatus::Uncertain
                } else {
                    self.effects.get(&settlement.id).map_or_else(|| effect_status(&settlement.value), |e| e.status)
                };
                self.call_counts.add(status);
            }
        }
        self.phase = Phase::Running;
        self.quiescent = false;
        self.last_sent = Sent::Settle;
        self.queue.push_back(Command::Send(HostMessage::Settle(round)));
    }

    /// Takes back a message [`Command::Send`] had written: a `Settle`'s round is the journal's next.
    pub fn sent(&mut self, message: HostMessage) {
        if let HostMessage::Settle(round) = message {
            self.journal.rounds.push(round);
        }
    }

    /// Counts a successful reply against the program's inbox as the worker does; one that would overflow it
    /// becomes the same catchable error the worker would make of it, so the journal never holds the refused reply.
    /// Returns the bytes of the reply it admitted (0 for an error or a refused reply).
    fn admit_reply(&mut self, settlement: &mut Settlement) -> u64 {
        let SettlementValue::Ok { value } = &settlement.value else { return 0 };
        let bytes = codemode_bridge::json_len(value) as u64;
        let max = self.limits.inbox_bytes;
        if self.inbox_used.saturating_add(bytes) > max {
            let message = codemode_bridge::inbox_overflow_message(bytes, max.saturating_sub(self.inbox_used), max);
            settlement.value = SettlementValue::err(codemode_bridge::BridgeErrorCode::InvalidInput, message);
            0
        } else {
            self.inbox_used += bytes;
            bytes
        }
    }

    fn over_journal_cap(&mut self, over: OverCap) {
        let message = match over {
            OverCap::Run(bytes, max) => format!(
                "code mode snapshot limit exceeded: the run's journal of tool errors and calls would hold {bytes} \
                 bytes besides its replies, over maxSnapshotBytes ({max}). Make fewer calls per run, and stop \
                 retrying calls that keep failing."
            ),
            OverCap::Shared(bytes, max) => format!(
                "code mode snapshot limit exceeded: the journals of this host's runs would hold {bytes} bytes, over \
                 the host's shared cap ({max}). Ask tools for smaller results, or retry once other runs have ended."
            ),
        };
        self.kill_and_fail(ErrorKind::SnapshotLimitExceeded, FailurePhase::Host, message);
    }

    fn kill_and_fail(&mut self, kind: impl Into<ErrorKind>, phase: FailurePhase, message: String) {
        self.queue.clear();
        self.quiescent = false;
        self.queue.push_back(Command::Kill);
        self.finish(Ending::Failed { kind: kind.into(), phase, message });
    }

    fn finish(&mut self, ending: Ending) {
        self.phase = Phase::Stopped;
        self.queue.push_back(Command::Finish(ending));
    }
}
