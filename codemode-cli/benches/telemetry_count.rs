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

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use codemode::bridge::{CallContext, ToolError, ToolHost};
use codemode::vm::pool::WorkerCommand;
use codemode::{CodeMode, CodeModeResult, Limits, RunScope, ToolDefinition};
use codemode_cli::telemetry::{ExportConfig, Telemetry};
use serde_json::{Value, json};

const TEN_CALLS: &str = "let n = 0; for (let i = 0; i < 10; i++) { if ((await ping({})).ok) n++ } return n";

struct Ping;

#[async_trait]
impl ToolHost for Ping {
    async fn call_tool(&self, _tool: &str, _args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        Ok(json!({ "ok": true }))
    }
}

/// A loopback OTLP/HTTP sink that answers every request `200` with an empty body.
fn sink() -> String {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the sink");
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
    let ping = ToolDefinition::new("ping", "Answers {ok: true}", json!({ "type": "object" })).replay_safe(true);
    let worker = WorkerCommand { program: env!("CARGO_BIN_EXE_codemode").into(), args: vec!["__worker".into()] };
    let engine = rt.block_on(async {
        CodeMode::builder()
            .limits(Limits { timeout_ms: 600_000, ..Limits::default() })
            .tools(vec![ping])
            .host(Arc::new(Ping))
            .worker(worker)
            .warm_workers(2)
            .build()
            .expect("the engine builds")
    });
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
