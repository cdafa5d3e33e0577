//! Closed-loop concurrency through the library: N clients each send their next cell as soon as the last one
//! answered, for a fixed time, against one `CodeMode` with its default pool. Prints, per N, the cells per second,
//! the p50 and p99 latency, and how many cells waited for a worker to be spawned while the load lasted.
//!
//! It also prints the CPU time per cell, of this process and its workers together (from `/proc`), which moves
//! much less than the cells per second when other work shares the machine, and how many cells queued for a place
//! among those computing (`CodeModeBuilder::max_running_cells`; `CODEMODE_BENCH_RUNNING` sets it, `0` for no limit).
//!
//! Target (issue 19): throughput does not fall as clients grow from 8 to 32, and no cell waits for a spawn once
//! the load is steady. Run: `cargo bench -p codemode --bench concurrency` (build `codemode-worker` first:
//! `cargo build --release -p codemode-worker --features patched-boa --bin codemode-worker`).
//! `CODEMODE_BENCH_SECONDS` (default 5) sets each measurement's length, `CODEMODE_BENCH_CLIENTS` (default `1,8,16,32`) the client counts, and
//! `CODEMODE_BENCH_CODE` the cell (default `return 1+1`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use codemode::{CallContext, ToolError, ToolHost};
use codemode::{CodeMode, CodeModeResult, Limits, RunScope, ToolDefinition};
use serde_json::{Value, json};

struct Ping;

#[async_trait]
impl ToolHost for Ping {
    async fn call_tool(&self, _tool: &str, _args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        Ok(json!({ "ok": true }))
    }
}

/// Runs `clients` closed-loop clients for `length`; the latencies of every cell that completed.
async fn closed_loop(engine: &CodeMode, code: &str, clients: usize, length: Duration) -> Vec<Duration> {
    let until = Instant::now() + length;
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let engine = engine.clone();
            let code = code.to_owned();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < until {
                    let started = Instant::now();
                    let result = engine.exec(json!({ "title": "bench", "code": code }), RunScope::default()).await;
                    assert!(matches!(result, CodeModeResult::Completed(_)), "the cell completes: {result:?}");
                    latencies.push(started.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("a client task"));
    }
    all
}

/// CPU time used so far by this process and every worker it started (live ones read from `/proc`, ended ones
/// through the reaped children's times), in seconds; `None` off Linux. On a machine shared with other work the
/// cells per second move with the load, the CPU time per cell much less.
fn cpu_seconds() -> Option<f64> {
    fn times(stat: &str) -> Option<[u64; 4]> {
        // Fields after the command (which may hold spaces) end with ')'; utime is the 14th field overall.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        let at = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok());
        Some([at(14)?, at(15)?, at(16)?, at(17)?])
    }
    let ticks = 100.0; // USER_HZ on Linux
    let own = times(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let mut total = own.iter().sum::<u64>();
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let children = std::fs::read_to_string(task.ok()?.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            if let Some(t) = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().as_deref().and_then(times) {
                total += t[0] + t[1];
            }
        }
    }
    Some(total as f64 / ticks)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let seconds = std::env::var("CODEMODE_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let clients: Vec<usize> = std::env::var("CODEMODE_BENCH_CLIENTS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8, 16, 32]);
    let code = std::env::var("CODEMODE_BENCH_CODE").unwrap_or_else(|_| "return 1+1".to_owned());
    let length = Duration::from_secs_f64(seconds);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let ping = ToolDefinition::new("ping", "Answers {ok: true}", json!({ "type": "object" })).replay_safe(true);
        let mut builder = CodeMode::builder();
        if let Some(n) = std::env::var("CODEMODE_BENCH_RUNNING").ok().and_then(|s| s.parse().ok()) {
            builder = builder.max_running_cells(n);
        }
        let engine = builder
            .limits(Limits { timeout_ms: 30_000, ..Limits::default() })
            .tools(vec![ping])
            .host(Arc::new(Ping))
            .build()
            .expect("the engine builds; build codemode-worker first");
        println!("cell: {code}; {seconds} s per measurement after a warm-up of half that");
        println!(
            "{:>7} {:>8} {:>10} {:>9} {:>9} {:>10} {:>12} {:>12} {:>12}",
            "clients", "cells", "cells/s", "p50", "p99", "cpu/cell", "spawn waits", "admit waits", "idle after"
        );
        for &n in &clients {
            // The warm-up grows the pool to the load; the measurement then counts only spawns the load still needs.
            closed_loop(&engine, &code, n, length / 2).await;
            let before = engine.stats();
            let cpu_before = cpu_seconds();
            let started = Instant::now();
            let mut latencies = closed_loop(&engine, &code, n, length).await;
            let elapsed = started.elapsed();
            let after = engine.stats();
            let cpu = cpu_seconds().zip(cpu_before).map(|(after, before)| after - before);
            latencies.sort();
            println!(
                "{:>7} {:>8} {:>10.1} {:>7.3}ms {:>7.3}ms {:>8} {:>12} {:>12} {:>12}",
                n,
                latencies.len(),
                latencies.len() as f64 / elapsed.as_secs_f64(),
                percentile(&latencies, 0.50).as_secs_f64() * 1e3,
                percentile(&latencies, 0.99).as_secs_f64() * 1e3,
                cpu.map_or("-".to_owned(), |cpu| format!("{:.0}µs", cpu * 1e6 / latencies.len() as f64)),
                after.spawn_waits - before.spawn_waits,
                after.admission_waits - before.admission_waits,
                after.idle_workers,
            );
        }
    });
}
