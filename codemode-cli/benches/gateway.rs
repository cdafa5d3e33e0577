//! Exec round trip through the gateway over stdio: an rmcp client calls `exec` on `codemode mcp`, which wraps the
//! real `@modelcontextprotocol/server-everything`, and the program makes MCP calls.
//!
//! Target: a cell with 10 sequential MCP calls under 20 ms, the time OpenClaw's QuickJS executor takes for 10
//! in-process tool calls (DESIGN.md anchors), although each of ours is a stdio round trip to a node process.

use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

const TEN_SUMS: &str = "let n = 0;\n\
for (let i = 0; i < 10; i++) {\n\
  const r = await MCP.everything.getSum({ a: i, b: 1 });\n\
  n += r.content.length;\n\
}\n\
return n;";

const TEN_ECHOES_PARALLEL: &str = "const rs = await Promise.all(\
Array.from({ length: 10 }, (_, i) => MCP.everything.echo({ message: String(i) })));\n\
return rs.length;";

const TRIVIAL: &str = "return 1 + 1;";

fn everything_entry() -> String {
    let entry = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: run `npm ci --prefix mcp-servers` at the repository root first",
        entry.display()
    );
    entry.display().to_string()
}

async fn start(config: &Path) -> RunningService<RoleClient, ClientConfig> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"));
    cmd.arg("mcp").arg("--config").arg(config).kill_on_drop(true);
    let transport = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the codemode binary starts")
        .0;
    let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("gateway-bench", "0"));
    info.serve(transport).await.expect("MCP handshake")
}

async fn exec(client: &RunningService<RoleClient, ClientConfig>, code: &str) -> Value {
    let mut params = CallToolRequestParams::new("exec");
    params.arguments = json!({ "title": "bench", "code": code }).as_object().cloned();
    let result = client.call_tool(params).await.expect("tools/call");
    let value = result.structured_content.expect("structured result");
    assert_eq!(value["status"], "completed", "{value}");
    value
}

fn gateway(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("gateway.toml");
    let text = format!(
        "[limits]\ntimeoutMs = 30000\n\n[servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
        everything_entry()
    );
    std::fs::write(&config, text).expect("write config");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let client = rt.block_on(start(&config));
    // Warm the worker pool and the upstream connection before measuring.
    for code in [TRIVIAL, TEN_SUMS, TEN_ECHOES_PARALLEL] {
        rt.block_on(exec(&client, code));
    }

    let mut group = c.benchmark_group("gateway_stdio");
    group.sample_size(30).measurement_time(Duration::from_secs(10));
    group.bench_function("exec_trivial", |b| b.iter(|| rt.block_on(exec(&client, TRIVIAL))));
    group.bench_function("exec_10_sequential_mcp_calls", |b| b.iter(|| rt.block_on(exec(&client, TEN_SUMS))));
    group.bench_function("exec_10_parallel_mcp_calls", |b| {
        b.iter(|| rt.block_on(exec(&client, TEN_ECHOES_PARALLEL)));
    });
    group.finish();
    drop(client);
}

criterion_group!(benches, gateway);
criterion_main!(benches);
