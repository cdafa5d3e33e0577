//! What tracing costs the exec path: the 10-sequential-call cell of `codemode/benches/exec.rs` with a warm pool,
//! first with nothing installed (export off, the default: every `codemode` span and metric event is disabled at its
//! call site), then with the process's OTLP export on (`codemode_cli::telemetry`, the gateway's setup) sending to a
//! loopback receiver started here.
//!
//! Target: export on stays within 10% of export off. Export is installed once per process, so the off case runs
//! first.

use std::hint::black_box;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use codemode::bridge::{CallContext, ToolError, ToolHost};
use codemode::vm::pool::WorkerCommand;
use codemode::{CodeMode, Limits, RunScope, ToolDefinition};
use codemode_cli::telemetry::{ExportConfig, Telemetry};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

const TEN_CALLS: &str = "let n = 0; for (let i = 0; i < 10; i++) { if ((await ping({})).ok) n++ } return n";

struct Ping;

#[async_trait]
impl ToolHost for Ping {
    async fn call_tool(&self, _tool: &str, _args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        Ok(json!({ "ok": true }))
    }
}

fn engine() -> CodeMode {
    let ping = ToolDefinition::new("ping", "Answers {ok: true}", json!({ "type": "object" })).replay_safe(true);
    let worker = WorkerCommand { program: env!("CARGO_BIN_EXE_codemode").into(), args: vec!["__worker".into()] };
    CodeMode::builder()
        .limits(Limits { timeout_ms: 30_000, ..Limits::default() })
        .tools(vec![ping])
        .host(Arc::new(Ping))
        .worker(worker)
        .warm_workers(2)
        .build()
        .expect("the engine builds")
}

/// A loopback OTLP/HTTP sink: reads each request and answers `200` with an empty protobuf body.
fn sink() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the sink");
    let addr = listener.local_addr().expect("sink address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut writer = stream;
                loop {
                    let mut length = 0;
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
                    if writer.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let engine = rt.block_on(async { engine() });
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
