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
//! `benches/telemetry.rs`, and prints each process's median and mean cell, and the means of both over the rounds.
//!
//! Interleaved: `cargo bench -p codemode-cli --bench telemetry_count -- interleaved 150` runs 150 pairs of cells in
//! one process with export installed, one cell of each pair with export paused (`Telemetry::pause`: every span and
//! measurement off, as in a process without export) and one exporting, in turns first, so that both states meet the
//! same process and the same moments of the machine; it prints each state's median and mean and the median of the
//! pairs' changes.

#[path = "support/otlp_cell.rs"]
mod otlp_cell;

use std::time::{Duration, Instant};

use codemode::{CodeModeResult, RunScope};
use codemode_telemetry::otlp::{ExportConfig, Telemetry};
use otlp_cell::{TEN_CALLS, engine, sink};
use serde_json::json;

/// Cells each process of a paired round times.
const PAIRED_CELLS: u32 = 100;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [mode @ ("off" | "on"), cells] => {
            let mut times = cell_times(*mode == "on", cells.parse().expect("a cell count"));
            times.sort_by(f64::total_cmp);
            let at = |q: f64| times.get((times.len() as f64 * q) as usize).copied().unwrap_or(0.0);
            println!("median_us {:.0} mean_us {:.0} p90_us {:.0}", at(0.5), mean(&times), at(0.9));
        }
        ["pairs", rounds] => pairs(rounds.parse().expect("a round count")),
        ["interleaved", pairs] => interleaved(pairs.parse().expect("a pair count")),
        _ => eprintln!(
            "usage: telemetry_count off|on <cells> | pairs <rounds> | interleaved <pairs> (nothing to do under `cargo bench`)"
        ),
    }
}

/// A process with a warm engine, a multi-thread runtime and, when `export`, OTLP export to a loopback sink.
struct Bench {
    telemetry: Option<Telemetry>,
    rt: tokio::runtime::Runtime,
    engine: codemode::CodeMode,
}

impl Bench {
    fn new(export: bool) -> Bench {
        let telemetry = export.then(|| Telemetry::install(&ExportConfig::from_env(Some(&sink()))).expect("export"));
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
        let engine = rt.block_on(async { engine(600_000) });
        Bench { telemetry, rt, engine }
    }

    /// Runs one cell after a 60 ms pause (in which the pool refills, as between an agent's turns), as
    /// `benches/telemetry.rs` does; its time in microseconds.
    fn cell(&self) -> f64 {
        self.rt.block_on(async { tokio::time::sleep(Duration::from_millis(60)).await });
        let (engine, input) = (self.engine.clone(), json!({ "title": "bench", "code": TEN_CALLS }));
        let started = Instant::now();
        let result = self.rt.block_on(async {
            tokio::spawn(async move { engine.exec(input, RunScope::default()).await }).await.expect("the cell")
        });
        let elapsed = started.elapsed().as_secs_f64() * 1e6;
        assert!(matches!(result, CodeModeResult::Completed(_)), "the cell completes: {result:?}");
        elapsed
    }

    fn end(self) {
        drop(self.rt);
        if let Some(telemetry) = self.telemetry {
            telemetry.shutdown();
        }
    }
}

/// Runs `cells` timed cells (after one untimed, so that the pool, the runtime's threads and, with export on, the
/// instruments exist before counting) and returns their times in microseconds.
fn cell_times(export: bool, cells: u32) -> Vec<f64> {
    let bench = Bench::new(export);
    bench.cell();
    let times = (0..cells).map(|_| bench.cell()).collect();
    bench.end();
    times
}

fn mean(times: &[f64]) -> f64 {
    times.iter().sum::<f64>() / times.len().max(1) as f64
}

fn median(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

/// `pairs` pairs of cells in one process with export installed, one cell paused (export off) and one not, in turns
/// first: both states meet the same process, pool and machine, moment by moment. Prints the median and mean of each
/// state and the median of the pairs' ratios.
fn interleaved(pairs: u32) {
    let bench = Bench::new(true);
    let telemetry = bench.telemetry.as_ref().expect("export installed");
    for paused in [true, false] {
        telemetry.pause(paused);
        bench.cell();
    }
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        for on_now in if pair % 2 == 0 { [false, true] } else { [true, false] } {
            telemetry.pause(!on_now);
            let time = bench.cell();
            if on_now { on.push(time) } else { off.push(time) }
        }
    }
    telemetry.pause(false);
    bench.end();
    let change = |off: f64, on: f64| (on / off - 1.0) * 100.0;
    let ratios: Vec<f64> = off.iter().zip(&on).map(|(off, on)| change(*off, *on)).collect();
    println!(
        "{pairs} pairs: median off {:.0} us, on {:.0} us ({:+.1}%); mean off {:.0} us, on {:.0} us ({:+.1}%); median of the pairs' changes {:+.1}%",
        median(&off),
        median(&on),
        change(median(&off), median(&on)),
        mean(&off),
        mean(&on),
        change(mean(&off), mean(&on)),
        median(&ratios)
    );
}

/// Paired rounds, each in two fresh processes of this binary: compares the medians (a cell's usual cost) and the
/// means (which include the cells an export ran beside).
fn pairs(rounds: u32) {
    let exe = std::env::current_exe().expect("this binary");
    let stats = |mode: &str| -> [f64; 2] {
        let out = std::process::Command::new(&exe).args([mode, &PAIRED_CELLS.to_string()]).output().expect("a run");
        let text = String::from_utf8_lossy(&out.stdout);
        let words: Vec<&str> = text.split_whitespace().collect();
        let field = |name: &str| {
            let at = words.iter().position(|w| *w == name).unwrap_or_else(|| panic!("{name} printed: {text}"));
            words[at + 1].parse::<f64>().expect("a number")
        };
        [field("median_us"), field("mean_us")]
    };
    let (mut off_sum, mut on_sum) = ([0.0; 2], [0.0; 2]);
    let change = |off: f64, on: f64| (on / off - 1.0) * 100.0;
    for round in 0..rounds {
        let (off, on) = if round % 2 == 0 {
            let off = stats("off");
            (off, stats("on"))
        } else {
            let on = stats("on");
            (stats("off"), on)
        };
        println!(
            "round {}: median off {:.0} us, on {:.0} us ({:+.1}%); mean off {:.0} us, on {:.0} us ({:+.1}%)",
            round + 1,
            off[0],
            on[0],
            change(off[0], on[0]),
            off[1],
            on[1],
            change(off[1], on[1])
        );
        for i in 0..2 {
            off_sum[i] += off[i];
            on_sum[i] += on[i];
        }
    }
    let n = f64::from(rounds.max(1));
    for (i, what) in ["medians", "means"].iter().enumerate() {
        println!(
            "mean of {what}: off {:.0} us, on {:.0} us ({:+.1}%)",
            off_sum[i] / n,
            on_sum[i] / n,
            change(off_sum[i], on_sum[i])
        );
    }
}
