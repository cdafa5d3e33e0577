//! What the telemetry benches share (`benches/telemetry.rs`, `benches/telemetry_count.rs`): the 10-call cell, an
//! engine whose `ping` tool answers at once, and a loopback OTLP/HTTP sink.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::Arc;

use async_trait::async_trait;
use codemode::WorkerCommand;
use codemode::{CallContext, ToolError, ToolHost};
use codemode::{CodeMode, Limits, ToolDefinition};
use serde_json::{Value, json};

/// The `codemode` binary's allocator (`src/main.rs`), so the host's side of a cell, spans and export included, costs
/// what it costs in the gateway's process.
#[global_allocator]
static ALLOCATOR: codemode::worker::CountingAlloc = codemode::worker::CountingAlloc;

/// The 10-sequential-call cell of `codemode/benches/exec.rs`.
pub const TEN_CALLS: &str = "let n = 0; for (let i = 0; i < 10; i++) { if ((await ping({})).ok) n++ } return n";

/// A tool host that answers every call `{ok: true}` at once.
pub struct Ping;

#[async_trait]
impl ToolHost for Ping {
    async fn call_tool(&self, _tool: &str, _args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        Ok(json!({ "ok": true }))
    }
}

/// An engine with the `ping` tool and a warm pool of two `codemode __worker` processes; `timeout_ms` bounds each
/// cell (callgrind runs need far more than the default).
pub fn engine(timeout_ms: u64) -> CodeMode {
    let ping = ToolDefinition::new("ping", "Answers {ok: true}", json!({ "type": "object" })).replay_safe(true);
    let worker = WorkerCommand { program: env!("CARGO_BIN_EXE_codemode").into(), args: vec!["__worker".into()] };
    CodeMode::builder()
        .limits(Limits { timeout_ms, ..Limits::default() })
        .tools(vec![ping])
        .host(Arc::new(Ping))
        .worker(worker)
        .warm_workers(2)
        .build()
        .expect("the engine builds")
}

/// A loopback OTLP/HTTP sink: reads each request and answers `200` with an empty protobuf body.
pub fn sink() -> String {
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
