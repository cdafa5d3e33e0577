//! The fleet load benchmark: closed-loop clients (each sends its next cell when the last one answered), 1 to 32 of
//! them over Streamable HTTP (the sessionless revision), against one gateway with the in-memory store and against
//! two gateways sharing a PostgreSQL store (the harness's throwaway server, or `$CODEMODE_TEST_PG_URL`). It prints
//! throughput, p50 and p99 per case, the p50 of a resume on the other replica, and memory per idle worker and per
//! parked run.
//!
//! Targets: PostgreSQL adds under 2 ms p50 per exec over the in-memory store; a resume on another replica takes
//! under 10 ms p50. Run it with `cargo bench -p codemode-cli --bench fleet` (`FLEET_SECONDS` sets the seconds per
//! case, 3 by default). The upstream is `tests/fixtures/ledger.mjs`, writing its ledger to /dev/null.

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use serde_json::{Value, json};

const TRIVIAL: &str = "return 1 + 1;";
const TEN_CALLS: &str = "for (let i = 0; i < 10; i++) await MCP.ledger.tick({ id: String(i) });\nreturn 10;";
const PARKS: &str = "await yield_control(\"bench\");\nreturn 1;";

type Client = RunningService<RoleClient, ClientConfig>;

struct Gateway {
    process: tokio::process::Child,
    url: String,
}

async fn gateway(config: &Path) -> Gateway {
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

async fn client(url: &str) -> Client {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
    let version = ProtocolVersion::V_2026_07_28;
    let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("fleet-bench", "0"))
        .with_protocol_version(version.clone());
    info.serve_with_lifecycle(transport, ClientLifecycleMode::Discover { preferred_versions: vec![version] })
        .await
        .expect("server/discover")
}

async fn call(client: &Client, tool: &str, args: Value) -> Value {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = args.as_object().cloned();
    client.call_tool(params).await.expect("tools/call").structured_content.expect("a CodeModeResult")
}

async fn exec(client: &Client, code: &str) -> Value {
    call(client, "exec", json!({ "title": "bench", "code": code })).await
}

fn config(dir: &Path, store: Option<&str>) -> std::path::PathBuf {
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ledger.mjs");
    let store = store.map(|url| format!("[store]\nurl = {url:?}\n")).unwrap_or_default();
    let text = format!(
        "[limits]\ntimeoutMs = 30000\n\n{store}\n[servers.ledger]\ncommand = \"node\"\nargs = [{:?}]\nenv = {{ LEDGER \
         = \"/dev/null\" }}\n",
        server.display().to_string()
    );
    let path = dir.join(if store.is_empty() { "memory.toml" } else { "pg.toml" });
    std::fs::write(&path, text).expect("config");
    path
}

struct Figures {
    throughput: f64,
    p50: Duration,
    p99: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// `clients` closed-loop clients, spread over `urls` round robin, each sending `code` for `seconds`.
async fn closed_loop(urls: &[String], clients: usize, code: &'static str, seconds: u64) -> Figures {
    let mut connected = Vec::new();
    for i in 0..clients {
        connected.push(client(&urls[i % urls.len()]).await);
    }
    // Warm every client's path once.
    for c in &connected {
        exec(c, code).await;
    }
    let until = Instant::now() + Duration::from_secs(seconds);
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
        throughput: all.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&all, 0.5),
        p99: percentile(&all, 0.99),
    }
}

/// Resident memory of a process and all its descendants, in KiB.
fn tree_rss_kib(pid: u32) -> u64 {
    let mut total = rss_kib(pid);
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
        total += tree_rss_kib(child);
    }
    total
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The gateway's worker processes (its children re-executed as `__worker`).
fn workers(pid: u32) -> Vec<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .filter(|c| {
            std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default().windows(8).any(|w| w == b"__worker")
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (a filter) is ignored: this binary runs every case.
    let seconds: u64 = std::env::var("FLEET_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    rt.block_on(async move {
        let dir = tempfile::tempdir().expect("temp dir");
        let pg_url = codemode_store_pg::harness::fresh_database().await.expect("a PostgreSQL for the bench");
        let memory = gateway(&config(dir.path(), None)).await;
        let pg_config = config(dir.path(), Some(&pg_url));
        let pg_a = gateway(&pg_config).await;
        let pg_b = gateway(&pg_config).await;

        println!("| clients | cell | store | throughput (cells/s) | p50 | p99 |");
        println!("|---|---|---|---|---|---|");
        for clients in [1, 2, 4, 8, 16, 32] {
            for (cell, code) in [("trivial", TRIVIAL), ("10 calls", TEN_CALLS)] {
                let stores =
                    [("memory", vec![memory.url.clone()]), ("postgres", vec![pg_a.url.clone(), pg_b.url.clone()])];
                for (store, urls) in stores {
                    let f = closed_loop(&urls, clients, code, seconds).await;
                    println!(
                        "| {clients} | {cell} | {store} | {:.0} | {:.2} ms | {:.2} ms |",
                        f.throughput,
                        ms(f.p50),
                        ms(f.p99)
                    );
                }
            }
        }

        // Park on one replica, resume on the other (replay in a fresh worker), one client, closed loop.
        let (a, b) = (client(&pg_a.url).await, client(&pg_b.url).await);
        let mut resumes = Vec::new();
        let mut parks_memory = Vec::new();
        let mut parks_pg = Vec::new();
        let local = client(&memory.url).await;
        for _ in 0..200 {
            let sent = Instant::now();
            let parked = exec(&local, PARKS).await;
            parks_memory.push(sent.elapsed());
            let run = parked["runId"].as_str().expect("parked").to_owned();
            call(&local, "wait", json!({ "runId": run })).await;

            let sent = Instant::now();
            let parked = exec(&a, PARKS).await;
            parks_pg.push(sent.elapsed());
            let run = parked["runId"].as_str().expect("parked").to_owned();
            let sent = Instant::now();
            let done = call(&b, "wait", json!({ "runId": run })).await;
            resumes.push(sent.elapsed());
            assert_eq!(done["status"], "completed", "{done}");
        }
        for v in [&mut resumes, &mut parks_memory, &mut parks_pg] {
            v.sort();
        }
        println!();
        println!(
            "exec that parks: memory p50 {:.2} ms, postgres p50 {:.2} ms",
            ms(percentile(&parks_memory, 0.5)),
            ms(percentile(&parks_pg, 0.5))
        );
        println!(
            "resume on the other replica (postgres, replay): p50 {:.2} ms, p99 {:.2} ms",
            ms(percentile(&resumes, 0.5)),
            ms(percentile(&resumes, 0.99))
        );

        // Memory: idle workers, then 32 parked runs (each keeps its live worker for the live window).
        let pid = memory.process.id().expect("gateway pid");
        let idle = workers(pid);
        let per_worker = idle.iter().map(|w| rss_kib(*w)).sum::<u64>() / idle.len().max(1) as u64;
        println!("idle worker: {} MiB resident ({} idle workers)", per_worker / 1024, idle.len());
        let before = tree_rss_kib(pid);
        let mut parked = Vec::new();
        for _ in 0..32 {
            parked.push(exec(&local, PARKS).await);
        }
        let after = tree_rss_kib(pid);
        println!(
            "parked run with its live worker: {:.1} MiB each ({} runs, gateway tree {} -> {} MiB)",
            (after.saturating_sub(before)) as f64 / 1024.0 / 32.0,
            parked.len(),
            before / 1024,
            after / 1024
        );
        drop((memory, pg_a, pg_b));
    });
}
