//! What the HTTP load benches share (`benches/fleet.rs`, `benches/load.rs`): a gateway process serving Streamable
//! HTTP on a free loopback port, rmcp clients (sessionless or with a session), closed-loop clients, percentiles and
//! the gateway's process tree.

// Each bench uses a part of it.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService, ServiceExt};
use serde_json::{Value, json};

pub type Client = RunningService<RoleClient, ClientConfig>;

/// A `codemode mcp --http` process and the URL it serves.
pub struct Gateway {
    pub process: tokio::process::Child,
    pub url: String,
}

/// Starts the gateway with `config` on a free loopback port and waits until it serves.
pub async fn gateway(config: &Path) -> Gateway {
    use tokio::io::AsyncBufReadExt;
    let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
        .arg("mcp")
        .arg("--config")
        .arg(config)
        .arg("--http")
        .arg("127.0.0.1:0")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the codemode binary starts");
    let mut lines = tokio::io::BufReader::new(process.stderr.take().expect("piped stderr")).lines();
    let url = loop {
        let line = lines.next_line().await.expect("stderr").expect("the gateway serves HTTP");
        if let Some(url) = line.split("serving Streamable HTTP at ").nth(1) {
            break url.trim().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Gateway { process, url }
}

/// How a client talks to the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The sessionless revision (`server/discover`, no `Mcp-Session-Id`).
    Sessionless,
    /// `initialize` and a stateful session, as the MCP Python SDK's client does by default.
    Session,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sessionless => "sessionless",
            Mode::Session => "session",
        }
    }
}

/// An rmcp client of `url`, connected in `mode`.
pub async fn client(url: &str, mode: Mode) -> Client {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
    let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("load-bench", "0"));
    match mode {
        Mode::Sessionless => {
            let version = ProtocolVersion::V_2026_07_28;
            info.with_protocol_version(version.clone())
                .serve_with_lifecycle(transport, ClientLifecycleMode::Discover { preferred_versions: vec![version] })
                .await
                .expect("server/discover")
        }
        Mode::Session => info.serve(transport).await.expect("initialize"),
    }
}

/// `tools/call` of `tool` with `args`; its structured result.
pub async fn call(client: &Client, tool: &str, args: Value) -> Value {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = args.as_object().cloned();
    client.call_tool(params).await.expect("tools/call").structured_content.expect("a CodeModeResult")
}

/// `exec` of `code`; its structured result.
pub async fn exec(client: &Client, code: &str) -> Value {
    call(client, "exec", json!({ "title": "bench", "code": code })).await
}

/// Throughput and latency of one closed-loop case.
pub struct Figures {
    pub cells: usize,
    pub elapsed: Duration,
    pub throughput: f64,
    pub p50: Duration,
    pub p99: Duration,
}

/// The `p` quantile (0 to 1) of sorted latencies.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Connects `clients` clients in `mode`, spread over `urls` round robin, and warms each with one `code` cell.
pub async fn connect(urls: &[String], clients: usize, mode: Mode, code: &str) -> Vec<Client> {
    let mut connected = Vec::new();
    for i in 0..clients {
        connected.push(client(&urls[i % urls.len()], mode).await);
    }
    for c in &connected {
        exec(c, code).await;
    }
    connected
}

/// Every client sends `code` and, when it is answered, sends it again, for `seconds`.
pub async fn closed_loop(connected: Vec<Client>, code: &'static str, seconds: f64) -> Figures {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in connected {
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let sent = Instant::now();
                let result = exec(&c, code).await;
                assert_eq!(result["status"], "completed", "{result}");
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("client task"));
    }
    let elapsed = started.elapsed();
    all.sort();
    Figures {
        cells: all.len(),
        elapsed,
        throughput: all.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&all, 0.5),
        p99: percentile(&all, 0.99),
    }
}

/// The children of a process: those of every one of its threads (a child spawned from a runtime thread is listed
/// under that thread, not under the main one).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let listed = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(listed.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
    }
    out
}

/// A process and all its descendants.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let next = children(all[i]);
        all.extend(next);
        i += 1;
    }
    all
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
