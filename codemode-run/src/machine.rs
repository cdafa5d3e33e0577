//! The run as a sans-IO state machine: it takes events (worker messages, settlements, clock readings, deadline and
//! death notices) and returns commands (send `Start`/`Settle`, dispatch a request, collect settlements, park,
//! finish). No processes, tasks, timers or clocks live here; the driver in `run.rs` does that I/O.
//!
//! Invariant: every settlement sent to the worker is appended to the journal, in delivery order, before the `Settle`
//! command is returned, so a checkpoint taken at any park replays to the same state.

use std::collections::{BTreeMap, VecDeque};

use codemode_bridge::{
    BridgeMethod, BridgeRequest, ErrorCode, ErrorKind, FailurePhase, Journal, OutputBudget, OutputItem, RequestDigest,
    Round, Settlement, SettlementValue, WaitReason,
};
use codemode_snapshot::Checkpoint;
use codemode_vm::pool::Death;
use codemode_vm::protocol::{CellFailure, CellLimits, GuestOutcome, HostMessage, Start, WorkerMessage};
use serde_json::{Value, json};

/// What the driver must do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Write this message (`Start` or `Settle`) to the cell; report a failed write with [`Event::SendFailed`].
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
    /// waiting while `drain` holds and work is still in flight.
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
    /// The host refused a request outright; the whole cell fails.
    Refused {
        /// The error code.
        code: ErrorCode,
        /// Where it failed.
        phase: FailurePhase,
        /// Why.
        message: String,
    },
    /// Host work settled (a task that panicked settles as a `tool_error`).
    Settled(Settlement),
    /// A [`Command::Collect`] is over.
    Collected {
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
    /// A `Collect` is out; `blocking` when it waits for a first settlement.
    Collecting { blocking: bool },
    /// Parked or finished: no command until the run is resumed.
    Stopped,
}

/// Which message the last `Send` carried, so a failed write fails the run with the right code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    Start,
    Settle,
}

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
}

/// The state of one run between its events.
#[derive(Debug)]
pub struct RunMachine {
    pub(crate) source: String,
    limits: CellLimits,
    pub(crate) restart_safe: bool,
    await_results: bool,
    pub(crate) journal: Journal,
    pub(crate) budget: OutputBudget,
    /// Output items the worker has emitted so far (delivered or pending delivery).
    pub(crate) emitted: usize,
    pub(crate) new_output: Vec<OutputItem>,
    pub(crate) dispatch_started: bool,
    pub(crate) replay_safe: bool,
    /// Whether content from an MCP server (untrusted) reached the program.
    pub(crate) untrusted: bool,
    /// Whether the worker waits for a `Settle` (it is at a quiescent point, or ended its cell itself).
    pub(crate) quiescent: bool,
    /// Requests dispatched and not delivered yet: method and argument digest.
    pub(crate) pending: BTreeMap<u32, (BridgeMethod, u64)>,
    /// Settlements to deliver at the next quiescent point, in the order they settled.
    pub(crate) ready: Vec<Settlement>,
    pub(crate) yield_request: Option<(u32, Option<String>)>,
    outcome: Option<GuestOutcome>,
    phase: Phase,
    last_sent: Sent,
    deadline_ms: u64,
    park_at_ms: u64,
    queue: VecDeque<Command>,
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
            budget: OutputBudget::new(setup.max_output_bytes),
            emitted: 0,
            new_output: Vec::new(),
            dispatch_started: false,
            replay_safe: true,
            untrusted: false,
            quiescent: false,
            pending: BTreeMap::new(),
            ready: Vec::new(),
            yield_request: None,
            outcome: None,
            phase: Phase::Start,
            last_sent: Sent::Start,
            deadline_ms: u64::MAX,
            park_at_ms: u64::MAX,
            queue: VecDeque::new(),
        }
    }

    /// A run rebuilt from its checkpoint, to be replayed in a fresh cell. Requests that were in flight are gone with
    /// the process that parked it: they settle as interrupted, except a pending yield, which the resume answers.
    pub fn restore(checkpoint: &Checkpoint, limits: CellLimits) -> RunMachine {
        let mut machine = RunMachine {
            source: checkpoint.source.clone(),
            limits,
            restart_safe: checkpoint.restart_safe,
            await_results: false,
            journal: checkpoint.journal.clone(),
            budget: checkpoint.output_budget.clone(),
            emitted: checkpoint.delivered_output,
            new_output: Vec::new(),
            dispatch_started: true,
            replay_safe: checkpoint.restart_safe,
            untrusted: checkpoint.untrusted,
            quiescent: false,
            pending: BTreeMap::new(),
            ready: codemode_snapshot::interrupted_settlements(checkpoint),
            yield_request: None,
            outcome: None,
            phase: Phase::Start,
            last_sent: Sent::Start,
            deadline_ms: u64::MAX,
            park_at_ms: u64::MAX,
            queue: VecDeque::new(),
        };
        if let Some(y) = &checkpoint.yield_request {
            machine.ready.retain(|s| s.id != y.id);
            machine.yield_request = Some((y.id, y.reason.clone()));
        }
        machine
    }

    /// Begins an `exec` or a `wait` at `now_ms` with `timeout_ms` to run: sets the deadline and the park time (a
    /// margin before the deadline, unless the cell awaits its results), and answers a pending yield.
    pub fn begin(&mut self, now_ms: u64, timeout_ms: u64) {
        self.deadline_ms = now_ms.saturating_add(timeout_ms);
        let margin = 250.min(timeout_ms / 2);
        self.park_at_ms = if self.await_results { self.deadline_ms } else { self.deadline_ms - margin };
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
                self.last_sent = Sent::Start;
                let start = Start {
                    source: self.source.clone(),
                    // The pool's workers build every context with the catalog's globals.
                    globals: None,
                    limits: self.limits.clone(),
                    journal: self.journal.clone(),
                    skip_output: self.emitted as u64,
                };
                Some(Command::Send(HostMessage::Start(Box::new(start))))
            }
            Phase::Running => Some(Command::Recv { deadline_ms: self.deadline_ms }),
            Phase::Quiescent => {
                if self.ready.is_empty() && self.yield_request.is_some() {
                    self.phase = Phase::Stopped;
                    return Some(Command::Park(WaitReason::Yield));
                }
                let drain = self.outcome.is_some();
                // Settlements already at hand go out at once, with whatever else has finished by now; otherwise the
                // driver waits for the first one until the park time.
                if self.ready.is_empty() {
                    self.phase = Phase::Collecting { blocking: true };
                    Some(Command::Collect { until_ms: Some(self.park_at_ms), drain })
                } else {
                    self.phase = Phase::Collecting { blocking: false };
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
                let (code, phase) = match death {
                    Death::Memory | Death::Stack => (ErrorKind::MemoryLimitExceeded, FailurePhase::Guest),
                    Death::Other(_) => (ErrorKind::InternalError, FailurePhase::Guest),
                    // The worker ended before running anything: the runtime, not the program, is at fault.
                    Death::Confinement(_) => (ErrorKind::RuntimeUnavailable, FailurePhase::Host),
                };
                self.kill_and_fail(code, phase, death.message());
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
            Event::Refused { code, phase, message } => {
                self.queue.clear();
                self.finish(Ending::Failed { kind: code.into(), phase, message });
            }
            Event::Settled(settlement) => {
                if self.pending.contains_key(&settlement.id) {
                    self.ready.push(settlement);
                }
            }
            Event::Collected { now_ms, timed_out, idle } => self.on_collected(now_ms, timed_out, idle),
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

    /// Records a `yield_control` request: the run parks once nothing else is ready to deliver.
    pub fn yielded(&mut self, id: u32, reason: Option<String>) {
        self.yield_request = Some((id, reason));
    }

    /// The pending requests' `(id, method, digest)`, for a checkpoint.
    pub fn pending(&self) -> impl Iterator<Item = (u32, BridgeMethod, u64)> + '_ {
        self.pending.iter().map(|(id, (method, digest))| (*id, *method, *digest))
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
                self.new_output.push(item);
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
                };
                self.finish(Ending::Failed { kind: code, phase, message });
            }
            WorkerMessage::Quiescent { requests, outcome, open, canceled } => {
                self.quiescent = true;
                self.phase = Phase::Quiescent;
                for id in canceled {
                    if self.pending.remove(&id).is_some() {
                        self.queue.push_back(Command::Cancel(id));
                    }
                    self.ready.retain(|s| s.id != id);
                }
                for request in requests {
                    let digest = request.digest();
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

    fn on_collected(&mut self, now_ms: u64, timed_out: bool, idle: bool) {
        let Phase::Collecting { blocking } = self.phase else { return };
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
            if timed_out {
                self.phase = Phase::Stopped;
                self.queue.push_back(Command::Park(WaitReason::PendingTools));
            } else {
                self.phase = Phase::Quiescent;
            }
            return;
        }
        let clock_ms = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let round = Round { clock_ms, settlements: std::mem::take(&mut self.ready) };
        for settlement in &round.settlements {
            self.pending.remove(&settlement.id);
        }
        self.journal.rounds.push(round.clone());
        self.phase = Phase::Running;
        self.quiescent = false;
        self.last_sent = Sent::Settle;
        self.queue.push_back(Command::Send(HostMessage::Settle(round)));
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
