//! A fixed number of warm 10-sequential-call cells (the cell of `benches/telemetry.rs`) with OTLP export off or
//! on: a harness for instruction counts and for paired wall-clock rounds, since wall-clock time on a shared machine
//! drifts by more than the difference between one process and the next. `cargo bench` runs it with no cells.
//!
//! Instructions: run it under callgrind twice with different cell counts and subtract, so start-up and the pool's
//! first fill drop out:
//!
//! ```sh
//! cargo bench -p codemode-cli --bench telemetry_count --no-run
//! valgrind --tool=callgrind target/release/deps/telemetry_count-<hash> off 10   # and: off 30, on 10, on 30
//! ```
//!
//! (instructions at 30 cells - instructions at 10 cells) / 20 is one cell's count, every thread of this process
//! included (the runtime, the batch span processor, the exporter); the worker processes are not counted.
//!
//! Wall clock: `cargo bench -p codemode-cli --bench telemetry_count -- pairs 8` runs 8 rounds, each a process with
//! export off and one with it on (in turns first), 100 cells each after one untimed, 60 ms apart as in
//! `benches/telemetry.rs`, and prints each process's median cell and the mean of the medians.

#[path = "support/otlp_cell.rs"]
mod otlp_cell;

use std::time::{Duration, Instant};

use codemode::{CodeModeResult, RunScope};
use codemode_cli::telemetry::{ExportConfig, Telemetry};
use otlp_cell::{TEN_CALLS, engine, sink};
use serde_json::json;

/// Cells each process of a paired round times.
const PAIRED_CELLS: u32 = 100;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [mode @ ("off" | "on"), cells] => {
            let median = cells_median(*mode == "on", cells.parse().expect("a cell count"));
            println!("median_us {median:.0}");
        }
        ["pairs", rounds] => pairs(rounds.parse().expect("a round count")),
        _ => eprintln!("usage: telemetry_count off|on <cells> | pairs <rounds> (nothing to do under `cargo bench`)"),
    }
}

/// Runs `cells` timed cells (after one untimed) and returns the median, in microseconds.
fn cells_median(export: bool, cells: u32) -> f64 {
    let telemetry = export.then(|| Telemetry::install(&ExportConfig::from_env(Some(&sink()))).expect("export"));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let engine = rt.block_on(async { engine(600_000) });
    let input = json!({ "title": "bench", "code": TEN_CALLS });
    // One cell first, so the pool, the runtime's threads and (with export on) the instruments exist before counting.
    let mut times = Vec::new();
    for _ in 0..=cells {
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(60)).await });
        let (engine, input) = (engine.clone(), input.clone());
        let started = Instant::now();
        let result = rt.block_on(async {
            tokio::spawn(async move { engine.exec(input, RunScope::default()).await }).await.expect("the cell")
        });
        times.push(started.elapsed().as_secs_f64() * 1e6);
        assert!(matches!(result, CodeModeResult::Completed(_)), "the cell completes: {result:?}");
    }
    drop(rt);
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    times.remove(0);
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied().unwrap_or(0.0)
}

/// Paired rounds, each in two fresh processes of this binary.
fn pairs(rounds: u32) {
    let exe = std::env::current_exe().expect("this binary");
    let median = |mode: &str| {
        let out = std::process::Command::new(&exe).args([mode, &PAIRED_CELLS.to_string()]).output().expect("a run");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines().find_map(|l| l.strip_prefix("median_us ")).and_then(|m| m.parse::<f64>().ok()).expect("a median")
    };
    let (mut off_sum, mut on_sum) = (0.0, 0.0);
    for round in 0..rounds {
        let (off, on) = if round % 2 == 0 {
            let off = median("off");
            (off, median("on"))
        } else {
            let on = median("on");
            (median("off"), on)
        };
        println!("round {}: off {off:.0} us, on {on:.0} us ({:+.1}%)", round + 1, (on / off - 1.0) * 100.0);
        off_sum += off;
        on_sum += on;
    }
    let n = f64::from(rounds.max(1));
    println!(
        "mean of medians: off {:.0} us, on {:.0} us ({:+.1}%)",
        off_sum / n,
        on_sum / n,
        (on_sum / off_sum - 1.0) * 100.0
    );
}
