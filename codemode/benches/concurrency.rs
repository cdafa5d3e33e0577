//! Closed-loop concurrency through the library: N clients each send their next cell as soon as the last one
//! answered, for a fixed time, against one `CodeMode` with its default pool. Prints, per N, the cells per second,
//! the p50 and p99 latency, and how many cells waited for a worker to be spawned while the load lasted.
//!
//! Target (issue 19): throughput does not fall as clients grow from 8 to 32, and no cell waits for a spawn once
//! the load is steady. Run: `cargo bench -p codemode --bench concurrency` (build `codemode-worker` first:
//! `cargo build --release -p codemode-vm --bin codemode-worker`). `CODEMODE_BENCH_SECONDS` (default 5) sets each
//! measurement's length, `CODEMODE_BENCH_CLIENTS` (default `1,8,16,32`) the client counts, and
//! `CODEMODE_BENCH_CODE` the cell (default `return 1+1`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use codemode::bridge::{CallContext, ToolError, ToolHost};
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
        let engine = CodeMode::builder()
            .limits(Limits { timeout_ms: 30_000, ..Limits::default() })
            .tools(vec![ping])
            .host(Arc::new(Ping))
            .build()
            .expect("the engine builds; build codemode-worker first");
        println!("cell: {code}; {seconds} s per measurement after a warm-up of half that");
        println!(
            "{:>7} {:>8} {:>10} {:>9} {:>9} {:>12} {:>12}",
            "clients", "cells", "cells/s", "p50", "p99", "spawn waits", "idle after"
        );
        for &n in &clients {
            // The warm-up grows the pool to the load; the measurement then counts only spawns the load still needs.
            closed_loop(&engine, &code, n, length / 2).await;
            let waits_before = engine.stats().spawn_waits;
            let started = Instant::now();
            let mut latencies = closed_loop(&engine, &code, n, length).await;
            let elapsed = started.elapsed();
            let waits = engine.stats().spawn_waits - waits_before;
            latencies.sort();
            println!(
                "{:>7} {:>8} {:>10.1} {:>7.3}ms {:>7.3}ms {:>12} {:>12}",
                n,
                latencies.len(),
                latencies.len() as f64 / elapsed.as_secs_f64(),
                percentile(&latencies, 0.50).as_secs_f64() * 1e3,
                percentile(&latencies, 0.99).as_secs_f64() * 1e3,
                waits,
                engine.stats().idle_workers,
            );
        }
    });
}
