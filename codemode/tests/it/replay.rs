//! The replay property: a program with parallel calls, races, timers, yields and `Math.random`, whose settlement
//! order is chosen by the generator, produces the same value and output on the live path (the parked worker is
//! kept) and on the replay path (every wait replays the journal in a fresh worker).

use codemode::{CodeMode, CodeModeResult, Limits};
use proptest::prelude::*;
use serde_json::Value;

use crate::support::{engine_with, exec, wait};

#[derive(Clone, Debug)]
enum Step {
    /// `Promise.all` over calls settling after these delays; records the settlement order too.
    Parallel(Vec<u64>),
    /// `Promise.race`; the losers drain.
    Race(Vec<u64>),
    /// A timer callback that records itself.
    Timer(u64),
    /// `yield_control`.
    Yield,
    /// A draw from the seeded `Math.random`.
    Random,
}

/// Distinct delays 80 ms apart, shuffled: the settlement order the generator picks is the order that happens.
fn delays() -> impl Strategy<Value = Vec<u64>> {
    (1usize..4).prop_flat_map(|n| Just((0..n as u64).map(|k| k * 80).collect::<Vec<_>>()).prop_shuffle())
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        delays().prop_map(Step::Parallel),
        delays().prop_map(Step::Race),
        (0u64..3).prop_map(|d| Step::Timer(40 + d * 80)),
        Just(Step::Yield),
        Just(Step::Random),
    ]
}

fn program(steps: &[Step]) -> String {
    let mut code = String::from("const out = []; const order = [];\n");
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Parallel(ds) => {
                let calls: Vec<String> = ds
                    .iter()
                    .enumerate()
                    .map(|(j, d)| format!("slow({{ms: {d}, tag: '{i}.{j}'}}).then(v => (order.push(v.tag), v.tag))"))
                    .collect();
                code.push_str(&format!("out.push(await Promise.all([{}]));\n", calls.join(", ")));
            }
            Step::Race(ds) => {
                let calls: Vec<String> =
                    ds.iter().enumerate().map(|(j, d)| format!("slow({{ms: {d}, tag: 'r{i}.{j}'}})")).collect();
                code.push_str(&format!("out.push((await Promise.race([{}])).tag);\n", calls.join(", ")));
            }
            Step::Timer(d) => code.push_str(&format!("setTimeout(() => order.push('t{i}'), {});\n", d + 3 * i as u64)),
            Step::Yield => code.push_str(&format!("out.push((await yield_control('y{i}')).reason);\n")),
            Step::Random => code.push_str("out.push(Math.random());\n"),
        }
        code.push_str(&format!("text('step {i} ' + order.join(','));\n"));
    }
    code.push_str("await new Promise(r => setTimeout(r, 250));\nreturn { out, order };\n");
    code
}

/// Runs the program to the end, answering every `waiting` with a `wait`; returns the value and all output.
async fn run_to_end(engine: &CodeMode, code: &str) -> (Value, Vec<String>) {
    let mut output = Vec::new();
    let mut result = exec(engine, code).await;
    for _ in 0..20 {
        output.extend(crate::support::texts(&result));
        match &result {
            CodeModeResult::Waiting(w) => {
                let id = w.run_id.clone();
                result = wait(engine, &id).await;
            }
            CodeModeResult::Completed(c) => return (c.value.clone(), output),
            CodeModeResult::Failed(f) => panic!("the program failed: {} ({:?})\n{code}", f.error, f.code),
        }
    }
    panic!("the program did not finish in 20 waits");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn live_and_replay_paths_agree(steps in prop::collection::vec(step(), 1..6)) {
        let code = program(&steps);
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let (live, replayed) = rt.block_on(async {
            let limits = Limits { timeout_ms: 5_000, ..Limits::default() };
            let (live_engine, _) = engine_with(limits.clone(), false);
            let (replay_engine, _) = engine_with(limits, true);
            let live = run_to_end(&live_engine, &code).await;
            let replayed = run_to_end(&replay_engine, &code).await;
            (live, replayed)
        });
        prop_assert_eq!(&live.1, &replayed.1, "output differs for\n{}", code);
        // Math.random is seeded per run, so draws differ between the two runs; everything else must match.
        let strip = |v: &Value| -> Value {
            let mut v = v.clone();
            if let Some(out) = v.get_mut("out").and_then(Value::as_array_mut) {
                for item in out.iter_mut() {
                    if item.is_f64() { *item = Value::from("random"); }
                }
            }
            v
        };
        prop_assert_eq!(strip(&live.0), strip(&replayed.0), "value differs for\n{}", code);
    }
}
