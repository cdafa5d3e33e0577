//! The engine's instruction budget is a backstop, never the deadline: a computation the old budget
//! (`timeoutMs × 150,000`) ended with `timeout` completes under the budget the pool gives the same `timeoutMs`.
//! The computation is measured in instructions (it exhausts the old budget), not in time, so nothing here is timed.

use codemode_bridge::Journal;
use codemode_vm::pool::instruction_budget;
use codemode_vm::protocol::{CellFailure, CellLimits, GuestOutcome, Start, WorkerMessage};
use codemode_worker::engine::{Engine, collect_output};
use serde_json::json;

/// The smallest `timeoutMs` the config accepts, where the old budget was 15 million instructions.
const TIMEOUT_MS: u64 = 100;
/// The budget before `timeoutMs` became wall-clock time.
const OLD_BUDGET: u64 = TIMEOUT_MS * 150_000;
/// A loop of four million iterations: several instructions each, so well over the old budget.
const LOOP: &str = "let x = 0; for (let i = 0; i < 4000000; i++) { x = (x + i) % 1000003 } return x";

fn run(instructions: u64) -> WorkerMessage {
    std::thread::Builder::new()
        .stack_size(64 * 1024 * 1024)
        .spawn(move || {
            let (sink, _) = collect_output();
            let mut engine = Engine::new(instructions, sink).expect("the engine starts");
            engine.start(
                Start {
                    source: LOOP.to_owned(),
                    globals: None,
                    globals_key: None,
                    limits: CellLimits::default(),
                    journal: Journal::default(),
                    skip_output: 0,
                },
                None,
            )
        })
        .expect("the engine thread starts")
        .join()
        .expect("the engine thread returns")
}

#[test]
fn a_computation_past_the_old_instruction_budget_completes() {
    // The loop exhausts the old budget: under it the engine ended the cell as a timeout.
    match run(OLD_BUDGET) {
        WorkerMessage::Failed { failure: CellFailure::Timeout, .. } => {}
        other => panic!("the loop should exhaust {OLD_BUDGET} instructions, got {other:?}"),
    }
    // Under the pool's budget for the same timeoutMs it runs to its end.
    match run(instruction_budget(TIMEOUT_MS)) {
        WorkerMessage::Quiescent { outcome: Some(GuestOutcome::Returned { value }), .. } => {
            let expected = (0..4_000_000u64).fold(0u64, |x, i| (x + i) % 1_000_003);
            assert_eq!(value, json!(expected));
        }
        other => panic!("the loop should complete, got {other:?}"),
    }
}

#[test]
fn the_budget_is_far_above_what_the_engine_can_execute_before_the_deadline() {
    // Boa executes well under one instruction per nanosecond; the budget allows ten, for every timeoutMs.
    for timeout_ms in [100, 4_000, 10_000, 60_000] {
        assert!(instruction_budget(timeout_ms) >= timeout_ms * 1_000_000 * 10);
    }
}
