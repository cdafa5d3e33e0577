//! The principal-shares load benchmark: one `codemode mcp --http` gateway with `[auth]` static tokens and the
//! default shares, flooded by one principal (alice) with each resource in turn while a second principal (carol) is
//! checked to be served after each flood; it prints how much each flood grew the gateway's resident memory.
//!
//! Floods, with the targets of issue 31: 300 finished tasks of 120 KB each (at most +50 MB; the oldest are dropped
//! past the share); suspended runs until the share refuses one (the parked workers bounded by `[workers]
//! max_live_parked`, carol still parks); 2,000 MCP sessions opened and abandoned, last since they hold alice's
//! places until they idle out (at most +100 MB; the cap answers the rest `429 too_many_sessions`). `SHARES_UNCAPPED=1` sets every share to its largest value, for the figures
//! without them. Run it with `cargo bench -p codemode-cli --bench shares`; the figures go to SECURITY.md.

#[path = "support/http.rs"]
mod http;

use std::path::Path;
use std::time::Instant;

use http::gateway;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams, Implementation,
    TaskStatusNotificationParams,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use sha2::Digest as _;
use tokio::sync::mpsc;

const ALICE: &str = "alice-bench-token";
const CAROL: &str = "carol-bench-token";
const SESSIONS: usize = 2_000;
const TASKS: usize = 300;
const TASK_BYTES: usize = 120 * 1024;
const PARKS: &str = "await yield_control('bench'); return 1;";

fn config(dir: &Path, uncapped: bool) -> std::path::PathBuf {
    let digest = |token: &str| hex::encode(sha2::Sha256::digest(token.as_bytes()));
    std::fs::write(dir.join("tokens.txt"), format!("alice sha256:{}\ncarol sha256:{}\n", digest(ALICE), digest(CAROL)))
        .expect("tokens file");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ledger.mjs");
    let shares = if uncapped {
        "max_sessions = 100000\nmax_suspended_runs = 64\nmax_finished_tasks = 100000\n\
         max_finished_task_bytes = 1099511627776\n"
    } else {
        ""
    };
    let text = format!(
        "[limits]\ntimeoutMs = 30000\nmaxOutputBytes = 1048576\n\n[auth]\ntokens_file = \"tokens.txt\"\n{shares}\n\
         [servers.ledger]\ncommand = \"node\"\nargs = [{:?}]\nenv = {{ LEDGER = \"/dev/null\" }}\n",
        server.display().to_string()
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).expect("config");
    path
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    kib as f64 / 1024.0
}

/// The children of a process: those of every one of its threads.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let listed = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(listed.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
    }
    out
}

/// The gateway's worker processes (itself re-executed as `codemode __worker`, under any confinement wrapper), and
/// their resident memory together.
fn workers(pid: u32) -> (usize, f64) {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let next = children(all[i]);
        all.extend(next);
        i += 1;
    }
    let workers: Vec<u32> = all
        .into_iter()
        .skip(1)
        .filter(|c| {
            std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default().windows(8).any(|w| w == b"__worker")
        })
        .collect();
    (workers.len(), workers.iter().map(|w| rss_mib(*w)).sum())
}

/// A raw `initialize` of a new session; the answer's status.
async fn initialize(http: &reqwest::Client, url: &str, token: &str) -> u16 {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "flood", "version": "0" } }
    });
    let response = http
        .post(url)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status().as_u16();
    // The session is abandoned: its answer is read, and nothing more is ever sent on it.
    let _ = response.bytes().await;
    status
}

/// A client declaring the tasks extension, handing task notifications over.
#[derive(Clone)]
struct TaskClient {
    ended: mpsc::UnboundedSender<TaskStatusNotificationParams>,
}

impl ClientHandler for TaskClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::builder().enable_tasks().build(), Implementation::new("flood", "0"))
    }

    async fn on_task_status(&self, params: TaskStatusNotificationParams, _context: NotificationContext<RoleClient>) {
        let _ = self.ended.send(params);
    }
}

fn transport(url: &str, token: &str) -> StreamableHttpClientTransport<reqwest::Client> {
    StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url).auth_header(token))
}

async fn exec(client: &RunningService<RoleClient, ClientConfig>, code: &str) -> Value {
    let mut params = CallToolRequestParams::new("exec");
    params.arguments = json!({ "title": "bench", "code": code }).as_object().cloned();
    client.call_tool(params).await.expect("tools/call").structured_content.expect("a CodeModeResult")
}

/// Runs `code` as `count` tasks, one after the other, each awaited to its end; the id of the last.
async fn tasks(url: &str, token: &str, code: &str, count: usize) -> (RunningService<RoleClient, TaskClient>, String) {
    let (ended, mut receiver) = mpsc::unbounded_channel();
    let client = TaskClient { ended }.serve(transport(url, token)).await.expect("handshake");
    let mut last = String::new();
    for _ in 0..count {
        let mut params = CallToolRequestParams::new("exec");
        params.arguments = json!({ "title": "bench", "code": code }).as_object().cloned();
        let CallToolResponse::Task(created) = client.peer().call_tool_once(params).await.expect("tools/call") else {
            panic!("a task")
        };
        let done = receiver.recv().await.expect("the task ends");
        assert_eq!(done.task.task.task_id, created.task.task_id);
        last = created.task.task_id;
    }
    (client, last)
}

#[tokio::main]
async fn main() {
    codemode_gateway::install_tls_provider();
    let uncapped = std::env::var("SHARES_UNCAPPED").is_ok_and(|v| v == "1");
    let dir = tempfile::tempdir().expect("temp dir");
    let g = gateway(&config(dir.path(), uncapped)).await;
    let http = reqwest::Client::new();
    let pid = g.process.id().expect("the gateway runs");
    println!(
        "shares {}: one principal floods, a second is served after each flood",
        if uncapped { "off" } else { "on (defaults)" }
    );
    println!();
    println!("| flood (one principal) | gateway RSS before | after | growth | target | second principal |");
    println!("|---|---|---|---|---|---|");

    // Warm the paths the floods take, so their first allocations are not counted as growth.
    let carol = transport(&g.url, CAROL);
    let carol = ClientConfig::default().serve(carol).await.expect("carol connects");
    exec(&carol, "return 1;").await;
    let _ = tasks(&g.url, CAROL, "return 1;", 1).await;

    let before = rss_mib(pid);
    let big = format!("return 'x'.repeat({TASK_BYTES});");
    let (alice_tasks, last) = tasks(&g.url, ALICE, &big, TASKS).await;
    let after = rss_mib(pid);
    let newest = alice_tasks.peer().get_task(GetTaskParams::new(last)).await.is_ok();
    let (carol_tasks, hers) = tasks(&g.url, CAROL, "return 'carol';", 1).await;
    let served = carol_tasks.peer().get_task(GetTaskParams::new(hers)).await.is_ok();
    println!(
        "| {TASKS} finished tasks of 120 KB (newest readable: {newest}) | {before:.0} MB | {after:.0} MB | {:+.0} MB | \
         +50 MB | {} |",
        after - before,
        if served { "its task is kept" } else { "LOST" }
    );
    drop((alice_tasks, carol_tasks));

    let before = rss_mib(pid);
    let (_, workers_before) = workers(pid);
    let alice = ClientConfig::default().serve(transport(&g.url, ALICE)).await.expect("alice connects");
    let mut parked = 0;
    let refusal = loop {
        let result = exec(&alice, PARKS).await;
        if result["status"] == "waiting" {
            parked += 1;
            continue;
        }
        break result["error"].as_str().unwrap_or_default().to_owned();
    };
    let after = rss_mib(pid);
    let (count, workers_after) = workers(pid);
    let hers = exec(&carol, PARKS).await;
    println!(
        "| suspended runs until refused: {parked} parked, then `{}` | {before:.0} MB (workers {workers_before:.0} MB) | \
         {after:.0} MB (workers {workers_after:.0} MB, {count} processes) | {:+.0} MB (workers {:+.0} MB) | a share \
         of 64 | {} |",
        refusal.split(':').next().unwrap_or_default(),
        after - before,
        workers_after - workers_before,
        if hers["status"] == "waiting" { "parks a run" } else { "REFUSED" }
    );

    let before = rss_mib(pid);
    let started = Instant::now();
    let mut refused = 0;
    for _ in 0..SESSIONS {
        match initialize(&http, &g.url, ALICE).await {
            200 => {}
            429 => refused += 1,
            other => panic!("initialize answered {other}"),
        }
    }
    let elapsed = started.elapsed();
    let after = rss_mib(pid);
    let served = initialize(&http, &g.url, CAROL).await == 200;
    println!(
        "| {SESSIONS} sessions opened and abandoned in {:.1} s ({refused} refused `too_many_sessions`) | {before:.0} MB | \
         {after:.0} MB | {:+.0} MB | +100 MB | {} |",
        elapsed.as_secs_f64(),
        after - before,
        if served { "opens a session" } else { "REFUSED" }
    );
}
