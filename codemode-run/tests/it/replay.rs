//! The replay property, deterministic: a program with parallel calls, races, timers, yields and `Math.random` runs
//! in real worker processes driven by the run machine, with a scripted host whose settlement order the generator
//! chooses and a clock that moves only per round. The live path keeps one worker across its parks; the replay path
//! starts a fresh worker at every park, which replays the journal. Both must produce the same value and output.

use std::collections::BTreeSet;
use std::sync::Arc;

use codemode_bridge::{BridgeCall, BridgeRequest, OutputItem, Settlement, SettlementValue};
use codemode_run::Cell;
use codemode_run::machine::{Command, Ending, Event, RunMachine, RunSetup};
use codemode_vm::pool::{PoolConfig, WorkerCommand, WorkerPool, WorkerProcess};
use codemode_vm::protocol::{CellLimits, GuestGlobals, WorkerMessage};
use proptest::prelude::*;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
enum Step {
    /// `Promise.all` over this many calls; records the settlement order too.
    Parallel(usize),
    /// `Promise.race` over this many calls; the losers drain.
    Race(usize),
    /// A timer callback that records itself.
    Timer,
    /// `yield_control`.
    Yield,
    /// A draw from the seeded `Math.random`.
    Random,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1usize..4).prop_map(Step::Parallel),
        (1usize..4).prop_map(Step::Race),
        Just(Step::Timer),
        Just(Step::Yield),
        Just(Step::Random),
    ]
}

fn program(steps: &[Step]) -> String {
    let mut code = String::from("const out = []; const order = [];\n");
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Parallel(n) => {
                let calls: Vec<String> = (0..*n)
                    .map(|j| format!("slow({{tag: '{i}.{j}'}}).then(v => (order.push(v.tag), v.tag))"))
                    .collect();
                code.push_str(&format!("out.push(await Promise.all([{}]));\n", calls.join(", ")));
            }
            Step::Race(n) => {
                let calls: Vec<String> = (0..*n).map(|j| format!("slow({{tag: 'r{i}.{j}'}})")).collect();
                code.push_str(&format!("out.push((await Promise.race([{}])).tag);\n", calls.join(", ")));
            }
            Step::Timer => code.push_str(&format!("setTimeout(() => order.push('t{i}'), {});\n", 40 + i)),
            Step::Yield => code.push_str(&format!("out.push((await yield_control('y{i}')).reason);\n")),
            Step::Random => code.push_str("out.push(Math.random());\n"),
        }
        code.push_str(&format!("text('step {i} ' + order.join(','));\n"));
    }
    code.push_str("await new Promise(r => setTimeout(r, 250));\nreturn { out, order, now: Date.now() };\n");
    code
}

/// The host: every call and timer is in flight until the generator's choices settle it.
struct Host {
    in_flight: BTreeSet<u32>,
    args: std::collections::BTreeMap<u32, Value>,
    choices: Vec<u8>,
    next: usize,
    now: u64,
}

impl Host {
    fn choose(&mut self, n: usize) -> usize {
        let choice = self.choices[self.next % self.choices.len()];
        self.next += 1;
        usize::from(choice) % n
    }

    fn dispatch(&mut self, machine: &mut RunMachine, request: BridgeRequest) {
        let digest = request.digest();
        if let BridgeCall::Yield(args) = &request.call {
            machine.yielded(request.id, args.reason.clone());
            return;
        }
        let tag = match &request.call {
            BridgeCall::CallValue(call) => call.args.as_ref().map_or(Value::Null, |args| args["tag"].clone()),
            _ => Value::Null,
        };
        self.in_flight.insert(request.id);
        self.args.insert(request.id, tag);
        machine.dispatched(request.id, request.method(), digest, None);
    }

    /// Settles one to all of the work in flight, in an order the choices pick; the clock moves 10 ms a round.
    fn collect(&mut self, machine: &mut RunMachine, blocking: bool) {
        let idle = blocking && self.in_flight.is_empty();
        if blocking && !idle {
            let count = 1 + self.choose(self.in_flight.len());
            for _ in 0..count {
                let index = self.choose(self.in_flight.len());
                let id = *self.in_flight.iter().nth(index).expect("index < len");
                self.in_flight.remove(&id);
                let value = match self.args.remove(&id) {
                    Some(Value::Null) | None => Value::Null,
                    Some(tag) => json!({ "tag": tag }),
                };
                machine.handle(Event::Settled(Settlement { id, value: SettlementValue::Ok { value } }));
            }
        }
        self.now += 10;
        machine.handle(Event::Collected { since_ms: self.now, now_ms: self.now, timed_out: false, idle });
    }
}

enum Stop {
    Parked,
    Ended(Ending),
}

/// Drives one `exec`/`wait` of `machine` in `cell` until it parks or ends; output items go to `output`.
async fn drive(machine: &mut RunMachine, cell: &mut WorkerProcess, host: &mut Host, output: &mut Vec<String>) -> Stop {
    machine.begin(host.now, 60_000);
    loop {
        let Some(command) = machine.poll() else { panic!("the machine stopped without an ending") };
        match command {
            Command::Send(message) => {
                let sent = Cell::send(cell, &message).await;
                machine.sent(message);
                if let Err(e) = sent {
                    machine.handle(Event::SendFailed(e));
                }
            }
            Command::Dispatch(request, _) => host.dispatch(machine, request),
            Command::Cancel(id) => {
                host.in_flight.remove(&id);
            }
            Command::Recv { .. } => match Cell::recv(cell).await {
                Ok(message) => {
                    if let WorkerMessage::Output(item) = &message {
                        output.push(match item {
                            OutputItem::Text { text } => text.clone(),
                            OutputItem::Json { value } => value.to_string(),
                            OutputItem::Attachment { block } => block.to_string(),
                        });
                    }
                    machine.handle(Event::Worker(message));
                }
                Err(death) => machine.handle(Event::Died(death)),
            },
            Command::Collect { until_ms, .. } => host.collect(machine, until_ms.is_some()),
            Command::Kill => {}
            Command::Park(_) => return Stop::Parked,
            Command::Finish(ending) => return Stop::Ended(ending),
        }
    }
}

fn pool() -> Arc<WorkerPool> {
    let command = WorkerCommand::locate()
        .expect("build the worker first: cargo build -p codemode-worker --features patched-boa --bin codemode-worker");
    let globals = GuestGlobals { tools: vec!["slow".into()], mcp: Vec::new(), ..GuestGlobals::default() };
    let pool = WorkerPool::new(PoolConfig {
        command,
        warm: 1,
        memory_limit_bytes: 256 * 1024 * 1024,
        instructions: 1_000_000_000,
        globals: Some(Arc::new(globals)),
        confinement: Default::default(),
        require_fast_paths: false,
        admission: None,
        max_idle: codemode_vm::pool::DEFAULT_MAX_IDLE,
        idle_ttl: codemode_vm::pool::DEFAULT_IDLE_TTL,
    });
    pool.fill().expect("a worker starts");
    pool
}

/// Runs the program to its end, answering every park; with `replay`, every resume starts a fresh worker.
async fn run_to_end(pool: &Arc<WorkerPool>, code: &str, choices: &[u8], replay: bool) -> (Value, Vec<String>) {
    let source = codemode_source::prepare(code).expect("the program is valid").js;
    let mut machine = RunMachine::new(RunSetup {
        source,
        limits: CellLimits::default(),
        seed: 11,
        start_clock_ms: 1_700_000_000_000,
        max_output_bytes: 1 << 20,
        restart_safe: false,
        await_results: false,
        max_journal_bytes: u64::MAX,
        shared_journal: None,
    });
    let mut host = Host {
        in_flight: BTreeSet::new(),
        args: Default::default(),
        choices: choices.to_vec(),
        next: 0,
        now: 1_700_000_000_000,
    };
    let mut output = Vec::new();
    let mut cell = pool.checkout().expect("a worker");
    for _ in 0..20 {
        match drive(&mut machine, &mut cell, &mut host, &mut output).await {
            Stop::Parked if replay => {
                machine.detach_cell();
                cell = pool.checkout().expect("a worker");
            }
            Stop::Parked => {}
            Stop::Ended(Ending::Returned(value)) => return (value, output),
            Stop::Ended(other) => panic!("the program failed: {other:?}\n{code}"),
        }
    }
    panic!("the program did not finish in 20 calls");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn live_and_replay_paths_agree(
        steps in prop::collection::vec(step(), 1..6),
        choices in prop::collection::vec(any::<u8>(), 1..32),
    ) {
        let code = program(&steps);
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let (live, replayed) = runtime.block_on(async {
            let pool = pool();
            let live = run_to_end(&pool, &code, &choices, false).await;
            let replayed = run_to_end(&pool, &code, &choices, true).await;
            (live, replayed)
        });
        prop_assert_eq!(&live.1, &replayed.1, "output differs for\n{}", code);
        prop_assert_eq!(&live.0, &replayed.0, "value differs for\n{}", code);
    }
}
