//! What tracing costs the exec path: the 10-sequential-call cell of `codemode/benches/exec.rs` with a warm pool,
//! first with nothing installed (export off, the default: every `codemode` span and metric event is disabled at its
//! call site), then with the process's OTLP export on (`codemode_telemetry::otlp`, the gateway's setup) sending to a
//! loopback receiver started here.
//!
//! Target: export on stays within 10% of export off. Export is installed once per process, so the off case runs
//! first.

#[path = "support/otlp_cell.rs"]
mod otlp_cell;

use std::hint::black_box;
use std::time::{Duration, Instant};

use codemode::RunScope;
use codemode_telemetry::otlp::{ExportConfig, Telemetry};
use criterion::{Criterion, criterion_group, criterion_main};
use otlp_cell::{TEN_CALLS, engine, sink};
use serde_json::json;

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let engine = rt.block_on(async { engine(30_000) });
    std::thread::sleep(Duration::from_millis(300));
    let input = json!({ "title": "bench", "code": TEN_CALLS });
    // As `exec/10_sequential_calls` in codemode/benches/exec.rs: between iterations (untimed, 60 ms) the workers
    // build their next context, as they do between an agent's turns; each cell runs in a task on the runtime.
    let warm = |iters: u64| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            rt.block_on(async { tokio::time::sleep(Duration::from_millis(60)).await });
            let (engine, input) = (engine.clone(), input.clone());
            let started = Instant::now();
            black_box(rt.block_on(async {
                tokio::spawn(async move { engine.exec(input, RunScope::default()).await }).await.expect("the cell")
            }));
            total += started.elapsed();
        }
        total
    };

    c.bench_function("telemetry/10_sequential_calls/off", |b| b.iter_custom(warm));

    // Installed outside the runtime, as `main` does.
    let telemetry = Telemetry::install(&ExportConfig::from_env(Some(&sink()))).expect("export installs");
    assert!(telemetry.traces(), "export is on");
    c.bench_function("telemetry/10_sequential_calls/otlp_export", |b| b.iter_custom(warm));
    drop(rt);
    telemetry.shutdown();
}

criterion_group!(name = telemetry; config = Criterion::default().sample_size(60); targets = benches);
criterion_main!(telemetry);
