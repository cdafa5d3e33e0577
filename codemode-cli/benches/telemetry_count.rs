//! A fixed number of warm 10-sequential-call cells (the cell of `benches/telemetry.rs`) with OTLP export off or
//! on, and no timing at all: a harness for instruction counts, since wall-clock time on a shared machine is noisy.
//! `cargo bench` runs it with no cells; to count, run it under callgrind twice with different cell counts and
//! subtract, so start-up and the pool's first fill drop out:
//!
//! ```sh
//! cargo bench -p codemode-cli --bench telemetry_count --no-run
//! valgrind --tool=callgrind target/release/deps/telemetry_count-<hash> off 10   # and: off 30, on 10, on 30
//! ```
//!
//! (instructions at 30 cells - instructions at 10 cells) / 20 is one cell's count, every thread of this process
//! included (the runtime, the batch span processor, the exporter); the worker processes are not counted.

#[path = "support/otlp_cell.rs"]
mod otlp_cell;

use std::time::Duration;

use codemode::{CodeModeResult, RunScope};
use codemode_cli::telemetry::{ExportConfig, Telemetry};
use otlp_cell::{TEN_CALLS, engine, sink};
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (export, cells) = match args.as_slice() {
        [mode, cells] if mode == "off" || mode == "on" => (mode == "on", cells.parse::<u32>().expect("a cell count")),
        _ => {
            eprintln!("usage: telemetry_count off|on <cells> (nothing to do under `cargo bench`)");
            return;
        }
    };
    let telemetry = export.then(|| Telemetry::install(&ExportConfig::from_env(Some(&sink()))).expect("export"));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let engine = rt.block_on(async { engine(600_000) });
    let input = json!({ "title": "bench", "code": TEN_CALLS });
    // One cell first, so the pool, the runtime's threads and (with export on) the instruments exist before counting.
    for _ in 0..=cells {
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(60)).await });
        let (engine, input) = (engine.clone(), input.clone());
        let result = rt.block_on(async {
            tokio::spawn(async move { engine.exec(input, RunScope::default()).await }).await.expect("the cell")
        });
        assert!(matches!(result, CodeModeResult::Completed(_)), "the cell completes: {result:?}");
    }
    drop(rt);
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
}
