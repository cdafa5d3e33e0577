//! The transcript harness: a scripted fake [`Cell`] plays worker messages, a fake host answers dispatches, and the
//! script decides which host work settles at each collect and how the clock moves. Every command the machine emits
//! and every event fed back is written to one transcript, which the tests snapshot.

use std::collections::{BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use codemode_bridge::{
    BridgeCall, BridgeMethod, BridgeRequest, ErrorCode, FailurePhase, Journal, OutputItem, Settlement, SettlementValue,
};
use codemode_run::Cell;
use codemode_run::machine::{Command, Ending, Event, NO_PARK, RunMachine, RunSetup};
use codemode_vm::pool::Death;
use codemode_vm::protocol::{CellLimits, GuestOutcome, HostMessage, WorkerMessage};
use serde_json::{Value, json};

/// One step of a script, consumed in order as the machine asks.
pub enum Beat {
    /// The cell's next message (answers a `Recv`).
    Msg(WorkerMessage),
    /// The cell's process ends (answers a `Recv`).
    Die(Death),
    /// The clock moves forward by this many ms (consumed before the next answer).
    Tick(u64),
    /// The next `Recv` waits past its deadline.
    Hang,
    /// Host work settles, in this order, during the next collect.
    Settle(Vec<(u32, SettlementValue)>),
    /// The next blocking collect waits until its park time passes with nothing settled.
    Expire,
    /// The next write to the cell fails.
    BrokenPipe,
    /// The host refuses the next dispatch outright (as when the suspended-run cap is reached).
    Refuse,
}

/// A cell that replays scripted messages and records what it was sent.
pub struct FakeCell {
    replies: VecDeque<Result<WorkerMessage, Death>>,
    fail_next_send: bool,
    /// What the cell was sent, one line per message.
    sent: Arc<Mutex<Vec<String>>>,
}

impl FakeCell {
    /// A cell that answers with `replies` in order (then dies) and writes what it is sent to `sent`.
    pub fn playing(replies: Vec<WorkerMessage>, sent: Arc<Mutex<Vec<String>>>) -> FakeCell {
        FakeCell { replies: replies.into_iter().map(Ok).collect(), fail_next_send: false, sent }
    }
}

impl Cell for FakeCell {
    async fn send(&mut self, message: &HostMessage) -> Result<(), String> {
        self.sent.lock().expect("the sent log").push(host_message(message));
        if std::mem::take(&mut self.fail_next_send) { Err("broken pipe".into()) } else { Ok(()) }
    }

    async fn recv(&mut self) -> Result<WorkerMessage, Death> {
        self.replies.pop_front().unwrap_or_else(|| Err(Death::Other("the script ended".into())))
    }
}

/// The world around one run across its calls: the clock and the host work in flight.
pub struct Stage {
    now: u64,
    beats: VecDeque<Beat>,
    in_flight: BTreeSet<u32>,
    out: String,
}

impl Stage {
    /// A stage whose clock reads `now`.
    pub fn at(now: u64) -> Stage {
        Stage { now, beats: VecDeque::new(), in_flight: BTreeSet::new(), out: String::new() }
    }

    /// Moves the clock between calls (the model took this long to call `wait`).
    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
    }

    /// One `exec` or `wait`: begins `machine` with `timeout_ms` and plays `beats` until it parks or finishes;
    /// returns the transcript of this call.
    pub fn play(&mut self, machine: &mut RunMachine, timeout_ms: u64, beats: Vec<Beat>) -> String {
        self.beats = beats.into();
        self.out.clear();
        let now = self.now;
        self.line(format!("   begin @{now}, timeout {timeout_ms}"));
        machine.begin(self.now, timeout_ms);
        self.run(machine);
        assert!(self.beats.is_empty(), "the script has unused beats:\n{}", self.out);
        std::mem::take(&mut self.out)
    }

    fn line(&mut self, text: impl AsRef<str>) {
        self.out.push_str(text.as_ref());
        self.out.push('\n');
    }

    fn ticks(&mut self) {
        while let Some(Beat::Tick(ms)) = self.beats.front() {
            self.now += ms;
            let now = self.now;
            self.beats.pop_front();
            self.line(format!("   clock {now}"));
        }
    }

    fn run(&mut self, machine: &mut RunMachine) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
        let mut cell = FakeCell::playing(Vec::new(), Arc::default());
        for _ in 0..1000 {
            let Some(command) = machine.poll() else {
                self.line("(the machine waits for nothing: stuck)");
                return;
            };
            match command {
                Command::Send(message) => {
                    self.line(format!("-> {}", host_message(&message)));
                    self.ticks();
                    if matches!(self.beats.front(), Some(Beat::BrokenPipe)) {
                        self.beats.pop_front();
                        cell.fail_next_send = true;
                    }
                    let sent = runtime.block_on(cell.send(&message));
                    machine.sent(message);
                    if let Err(e) = sent {
                        self.line(format!("<- send failed: {e}"));
                        machine.handle(Event::SendFailed(e));
                    }
                }
                Command::Dispatch(request, _digest) => {
                    let wire = serde_json::to_value(&request).expect("a request serializes");
                    self.line(format!("   dispatch #{} {} {}", request.id, request.method().as_str(), wire["args"]));
                    if matches!(self.beats.front(), Some(Beat::Refuse)) {
                        self.beats.pop_front();
                        self.line("<- refused");
                        let message = "too many suspended code mode runs.".to_owned();
                        machine.handle(Event::Refused {
                            code: ErrorCode::InvalidInput,
                            phase: FailurePhase::Host,
                            message,
                        });
                        continue;
                    }
                    self.dispatch(machine, request);
                }
                Command::Cancel(id) => {
                    self.in_flight.remove(&id);
                    self.line(format!("   cancel #{id}"));
                }
                Command::Recv { deadline_ms } => {
                    self.line(format!("   recv until {deadline_ms}"));
                    self.ticks();
                    let event = match self.beats.pop_front() {
                        Some(Beat::Msg(message)) => {
                            cell.replies.push_back(Ok(message));
                            match runtime.block_on(cell.recv()) {
                                Ok(message) => Event::Worker(message),
                                Err(death) => Event::Died(death),
                            }
                        }
                        Some(Beat::Die(death)) => Event::Died(death),
                        Some(Beat::Hang) => {
                            self.now = self.now.max(deadline_ms);
                            Event::Timeout
                        }
                        _ => panic!("the script has no answer for recv:\n{}", self.out),
                    };
                    self.line(format!("<- {}", event_text(&event)));
                    machine.handle(event);
                }
                Command::Collect { until_ms, drain } => self.collect(machine, until_ms, drain),
                Command::Kill => self.line("   kill"),
                Command::Park(reason) => {
                    self.line(format!("   park {}", serde_json::to_string(&reason).expect("a reason serializes")));
                    return;
                }
                Command::Finish(ending) => {
                    self.line(format!("   finish {}", ending_text(&ending)));
                    return;
                }
            }
        }
        panic!("the run did not stop in 1000 commands:\n{}", self.out);
    }

    /// The fake host: `yield` parks, `sleep` and `callValue` run as tasks (settled by the script), everything else
    /// settles at once with `{"answer": method}`.
    fn dispatch(&mut self, machine: &mut RunMachine, request: BridgeRequest) {
        let digest = request.digest();
        match (&request.call, request.method()) {
            (BridgeCall::Yield(args), _) => machine.yielded(request.id, args.reason.clone()),
            (_, method @ (BridgeMethod::CallValue | BridgeMethod::Sleep | BridgeMethod::Namespace)) => {
                self.in_flight.insert(request.id);
                machine.dispatched(request.id, method, digest, None);
            }
            (_, method) => {
                let value = SettlementValue::Ok { value: json!({ "answer": method.as_str() }) };
                machine.dispatched(request.id, method, digest, Some(value));
            }
        }
    }

    fn collect(&mut self, machine: &mut RunMachine, until_ms: Option<u64>, drain: bool) {
        let since_ms = self.now;
        let until = match until_ms {
            None => "now".to_owned(),
            Some(NO_PARK) => "settled".to_owned(),
            Some(t) => t.to_string(),
        };
        self.line(format!("   collect until {until}{}", if drain { ", draining" } else { "" }));
        self.ticks();
        let idle = until_ms.is_some() && self.in_flight.is_empty();
        let mut timed_out = false;
        if !idle {
            match self.beats.front() {
                Some(Beat::Settle(_)) => {
                    let Some(Beat::Settle(settled)) = self.beats.pop_front() else { unreachable!() };
                    for (id, value) in settled {
                        assert!(self.in_flight.remove(&id), "#{id} is not in flight:\n{}", self.out);
                        let settlement = Settlement { id, value };
                        self.line(format!("<- settled {}", settlement_text(&settlement)));
                        machine.handle(Event::Settled(settlement));
                    }
                }
                Some(Beat::Expire) if until_ms.is_some() => {
                    self.beats.pop_front();
                    self.now = self.now.max(until_ms.unwrap_or(0));
                    timed_out = true;
                }
                _ if until_ms.is_some() => panic!("the script has no answer for a blocking collect:\n{}", self.out),
                _ => {}
            }
        }
        let event = Event::Collected { since_ms, now_ms: self.now, timed_out, idle };
        self.line(format!("<- {}", event_text(&event)));
        machine.handle(event);
    }
}

/// Polls `m` for a `Send` and hands the message back, as the driver does after writing it.
pub fn send(m: &mut RunMachine, what: &str) {
    match m.poll() {
        Some(Command::Send(message)) => m.sent(message),
        other => panic!("{what}: expected a send, got {other:?}"),
    }
}

/// A fresh run of a program (the source is not run: the script plays the cell).
pub fn fresh(await_results: bool) -> RunMachine {
    RunMachine::new(RunSetup {
        source: "/* scripted */".into(),
        limits: CellLimits::default(),
        seed: 7,
        start_clock_ms: 1_000,
        max_output_bytes: 4096,
        restart_safe: false,
        await_results,
        max_journal_bytes: u64::MAX,
        shared_journal: None,
    })
}

/// A bridge request as the worker reports it.
pub fn request(id: u32, method: BridgeMethod, args: Value) -> BridgeRequest {
    serde_json::from_value(json!({ "id": id, "method": method.as_str(), "args": args })).expect("a valid request")
}

/// `callValue` of tool `tool` with `args`.
pub fn call(id: u32, tool: &str, args: Value) -> BridgeRequest {
    request(id, BridgeMethod::CallValue, json!({ "tool": tool, "args": args }))
}

/// A quiescent report.
pub fn quiescent(requests: Vec<BridgeRequest>, open: u32) -> Beat {
    Beat::Msg(quiescent_message(requests, open))
}

/// The worker's quiescent report.
pub fn quiescent_message(requests: Vec<BridgeRequest>, open: u32) -> WorkerMessage {
    WorkerMessage::Quiescent { requests, outcome: None, open, canceled: Vec::new() }
}

/// A quiescent report with the program's return value.
pub fn returned(value: Value, open: u32) -> Beat {
    Beat::Msg(returned_message(value, open))
}

/// The worker's quiescent report with the program's return value.
pub fn returned_message(value: Value, open: u32) -> WorkerMessage {
    WorkerMessage::Quiescent {
        requests: Vec::new(),
        outcome: Some(GuestOutcome::Returned { value }),
        open,
        canceled: Vec::new(),
    }
}

/// A text output item.
pub fn text(line: &str) -> Beat {
    Beat::Msg(WorkerMessage::Output(OutputItem::Text { text: line.into() }))
}

/// An ok settlement.
pub fn ok(value: Value) -> SettlementValue {
    SettlementValue::Ok { value }
}

fn settlement_text(s: &Settlement) -> String {
    match &s.value {
        SettlementValue::Ok { value } => format!("#{} ok {value}", s.id),
        SettlementValue::Err { code, message } => format!("#{} err {}: {message}", s.id, code.as_str()),
    }
}

/// The journal in one line.
pub fn journal_text(journal: &Journal) -> String {
    let mut text =
        format!("seed {}, clock {}, {} requests", journal.seed, journal.start_clock_ms, journal.requests.len());
    for round in &journal.rounds {
        let settled: Vec<String> = round.settlements.iter().map(settlement_text).collect();
        let _ = write!(text, "; round @{} [{}]", round.clock_ms, settled.join(", "));
    }
    text
}

fn host_message(message: &HostMessage) -> String {
    match message {
        HostMessage::Start(start) => {
            format!("start (skip {} outputs; journal: {})", start.skip_output, journal_text(&start.journal))
        }
        HostMessage::Settle(round) => {
            let settled: Vec<String> = round.settlements.iter().map(settlement_text).collect();
            format!("settle @{} [{}]", round.clock_ms, settled.join(", "))
        }
        other => format!("{other:?}"),
    }
}

fn event_text(event: &Event) -> String {
    match event {
        Event::Worker(WorkerMessage::Quiescent { requests, outcome, open, canceled }) => {
            let ids: Vec<String> = requests.iter().map(|r| format!("#{}", r.id)).collect();
            let mut text = format!("quiescent requests [{}] open {open}", ids.join(", "));
            if !canceled.is_empty() {
                let _ = write!(text, " canceled {canceled:?}");
            }
            match outcome {
                Some(GuestOutcome::Returned { value }) => {
                    let _ = write!(text, " returned {value}");
                }
                Some(GuestOutcome::Threw { error }) => {
                    let _ = write!(text, " threw {error:?}");
                }
                None => {}
            }
            text
        }
        Event::Worker(WorkerMessage::Output(item)) => format!("output {}", serde_json::to_string(item).expect("json")),
        Event::Worker(other) => format!("{other:?}"),
        Event::Died(death) => format!("died {death:?}"),
        Event::Timeout => "deadline passed".into(),
        Event::Collected { now_ms, timed_out, idle, .. } => {
            let mut text = format!("collected @{now_ms}");
            if *timed_out {
                text.push_str(", timed out");
            }
            if *idle {
                text.push_str(", nothing in flight");
            }
            text
        }
        other => format!("{other:?}"),
    }
}

fn ending_text(ending: &Ending) -> String {
    match ending {
        Ending::Returned(value) => format!("returned {value}"),
        Ending::Failed { kind, phase, message } => format!(
            "failed {} ({}): {message}",
            serde_json::to_value(kind).expect("a kind serializes"),
            serde_json::to_value(phase).expect("a phase serializes")
        ),
    }
}
