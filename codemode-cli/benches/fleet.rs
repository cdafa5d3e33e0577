//! The fleet load benchmark: closed-loop clients (each sends its next cell when the last one answered), 1 to 32 of
//! them over Streamable HTTP (the sessionless revision), against one gateway with the in-memory store and against
//! two gateways sharing a PostgreSQL store (`$CODEMODE_TEST_PG_URL`'s server, else a throwaway cluster the
//! harness starts from the PostgreSQL 15 binaries; without either it runs the in-memory half and says PostgreSQL was
//! skipped). It prints throughput, p50 and p99 per case, what PostgreSQL adds, the p50 of a resume on the other
//! replica against the targets, and memory per idle worker and per parked run.
//!
//! Targets: PostgreSQL adds under 2 ms p50 per exec over the in-memory store; a resume on another replica takes
//! under 10 ms p50. Run it with `cargo bench -p codemode-cli --bench fleet` (`FLEET_SECONDS` sets the seconds per
//! case, 3 by default). The upstream is `tests/fixtures/ledger.mjs`, writing its ledger to /dev/null.

#[path = "support/http.rs"]
mod http;

use std::path::Path;
use std::time::{Duration, Instant};

use http::{Client, Figures, Mode, call, closed_loop, connect, exec, gateway, ms, percentile, tree};
use serde_json::json;

const TRIVIAL: &str = "return 1 + 1;";
const TEN_CALLS: &str = "for (let i = 0; i < 10; i++) await MCP.ledger.tick({ id: String(i) });\nreturn 10;";
const PARKS: &str = "await yield_control(\"bench\");\nreturn 1;";

async fn client(url: &str) -> Client {
    http::client(url, Mode::Sessionless).await
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

/// `clients` closed-loop clients, spread over `urls` round robin, each sending `code` for `seconds`.
async fn run_case(urls: &[String], clients: usize, code: &'static str, seconds: u64) -> Figures {
    let connected = connect(urls, clients, Mode::Sessionless, code).await;
    closed_loop(connected, code, seconds as f64).await
}

/// Resident memory of a process and all its descendants, in KiB.
fn tree_rss_kib(pid: u32) -> u64 {
    tree(pid).into_iter().map(rss_kib).sum()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The gateway's worker processes (itself re-executed as `codemode __worker`, under any confinement wrapper).
fn workers(pid: u32) -> Vec<u32> {
    tree(pid)
        .into_iter()
        .skip(1)
        .filter(|c| {
            std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default().windows(8).any(|w| w == b"__worker")
        })
        .collect()
}

/// One row of the closed-loop table: the in-memory figures and, when PostgreSQL ran, its figures.
struct Row {
    clients: usize,
    cell: &'static str,
    memory: Figures,
    postgres: Option<Figures>,
}

fn cells(f: &Figures) -> String {
    format!("{:.0} | {:.2} ms | {:.2} ms", f.throughput, ms(f.p50), ms(f.p99))
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (a filter) is ignored: this binary runs every case.
    let seconds: u64 = std::env::var("FLEET_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    // rmcp's HTTP client (reqwest on rustls) needs the process's TLS provider, as the gateway installs its own.
    codemode_gateway::install_tls_provider();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    rt.block_on(async move {
        let dir = tempfile::tempdir().expect("temp dir");
        // `$CODEMODE_TEST_PG_URL`'s server, or a throwaway cluster the harness starts from the PostgreSQL 15
        // binaries; without either, the in-memory half runs alone.
        let pg_url = match codemode_pg_harness::fresh_database().await {
            Ok(url) => Some(url),
            Err(e) => {
                println!(
                    "PostgreSQL skipped: {e}\n(set CODEMODE_TEST_PG_URL, e.g. `source scripts/pg.sh; pg_start`, or \
                     install PostgreSQL 15 at /usr/lib/postgresql/15/bin)\n"
                );
                None
            }
        };
        let memory = gateway(&config(dir.path(), None)).await;
        let pg = match &pg_url {
            Some(url) => {
                let pg_config = config(dir.path(), Some(url));
                let a = gateway(&pg_config).await;
                let b = gateway(&pg_config).await;
                Some((a, b))
            }
            None => None,
        };

        println!(
            "closed loop over Streamable HTTP (sessionless), {seconds} s per case; memory: one gateway; postgres: two \
             gateways on one database, clients spread over both"
        );
        println!();
        println!(
            "| clients | cell | memory cells/s | memory p50 | memory p99 | postgres cells/s | postgres p50 | postgres p99 \
             | postgres added p50 |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        let mut rows = Vec::new();
        for clients in [1, 2, 4, 8, 16, 32] {
            for (cell, code) in [("trivial", TRIVIAL), ("10 calls", TEN_CALLS)] {
                let memory = run_case(std::slice::from_ref(&memory.url), clients, code, seconds).await;
                let postgres = match &pg {
                    Some((a, b)) => Some(run_case(&[a.url.clone(), b.url.clone()], clients, code, seconds).await),
                    None => None,
                };
                let row = Row { clients, cell, memory, postgres };
                let (pg_cells, added) = match &row.postgres {
                    Some(p) => (cells(p), format!("{:+.2} ms", ms(p.p50) - ms(row.memory.p50))),
                    None => ("skipped | - | -".to_owned(), "-".to_owned()),
                };
                println!("| {} | {} | {} | {pg_cells} | {added} |", row.clients, row.cell, cells(&row.memory));
                rows.push(row);
            }
        }

        // Park and resume, one client, 100 runs, with 60 ms untimed between runs (the pools rebuild their next
        // context, as between an agent's turns): on the in-memory gateway; on replica A of the PostgreSQL pair,
        // resumed on A (live worker, with the store's claim and delete); and parked on A, resumed on B (claim and
        // replay in a fresh worker).
        let local = client(&memory.url).await;
        let mut parks_memory = Vec::new();
        let mut resumes_memory = Vec::new();
        let mut parks_pg = Vec::new();
        let mut resumes_pg_same = Vec::new();
        let mut resumes_pg_other = Vec::new();
        let pair = match &pg {
            Some((a, b)) => Some((client(&a.url).await, client(&b.url).await)),
            None => None,
        };
        let pause = || tokio::time::sleep(Duration::from_millis(60));
        for _ in 0..100 {
            pause().await;
            let sent = Instant::now();
            let parked = exec(&local, PARKS).await;
            parks_memory.push(sent.elapsed());
            let run = parked["runId"].as_str().expect("parked").to_owned();
            pause().await;
            let sent = Instant::now();
            let done = call(&local, "wait", json!({ "runId": run })).await;
            resumes_memory.push(sent.elapsed());
            assert_eq!(done["status"], "completed", "{done}");

            if let Some((a, b)) = &pair {
                pause().await;
                let sent = Instant::now();
                let parked = exec(a, PARKS).await;
                parks_pg.push(sent.elapsed());
                let run = parked["runId"].as_str().expect("parked").to_owned();
                pause().await;
                let sent = Instant::now();
                let done = call(a, "wait", json!({ "runId": run })).await;
                resumes_pg_same.push(sent.elapsed());
                assert_eq!(done["status"], "completed", "{done}");

                pause().await;
                let parked = exec(a, PARKS).await;
                let run = parked["runId"].as_str().expect("parked").to_owned();
                pause().await;
                let sent = Instant::now();
                let done = call(b, "wait", json!({ "runId": run })).await;
                resumes_pg_other.push(sent.elapsed());
                assert_eq!(done["status"], "completed", "{done}");
            }
        }
        for v in [&mut parks_memory, &mut resumes_memory, &mut parks_pg, &mut resumes_pg_same, &mut resumes_pg_other] {
            v.sort();
        }
        println!();
        let p50 = |v: &[Duration]| if v.is_empty() { f64::NAN } else { ms(percentile(v, 0.5)) };
        let p99 = |v: &[Duration]| if v.is_empty() { f64::NAN } else { ms(percentile(v, 0.99)) };
        println!("park and resume, 1 client, 100 runs, 60 ms idle before each timed call:");
        println!("| | memory p50 | memory p99 | postgres p50 | postgres p99 |");
        println!("|---|---|---|---|---|");
        println!(
            "| exec that parks | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |",
            p50(&parks_memory),
            p99(&parks_memory),
            p50(&parks_pg),
            p99(&parks_pg)
        );
        println!(
            "| wait on the same gateway (live worker) | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |",
            p50(&resumes_memory),
            p99(&resumes_memory),
            p50(&resumes_pg_same),
            p99(&resumes_pg_same)
        );
        println!(
            "| wait on the other replica (claim + replay) | - | - | {:.2} ms | {:.2} ms |",
            p50(&resumes_pg_other),
            p99(&resumes_pg_other)
        );
        let parks_memory_p50 = p50(&parks_memory);
        let parks_pg_p50 = p50(&parks_pg);
        let resume = p50(&resumes_pg_other);
        println!();
        if let Some(row) = rows.iter().find(|r| r.clients == 1 && r.cell == "trivial")
            && let Some(p) = &row.postgres
        {
            let added = ms(p.p50) - ms(row.memory.p50);
            let added_park = parks_pg_p50 - parks_memory_p50;
            println!(
                "target: postgres adds < 2 ms p50 per exec: {added:+.2} ms (1 client, trivial cell), {added_park:+.2} ms \
                 (an exec that parks) -> {}",
                if added < 2.0 && added_park < 2.0 { "met" } else { "MISSED" }
            );
            println!(
                "target: a resume on another replica < 10 ms p50: {resume:.2} ms -> {}",
                if resume < 10.0 { "met" } else { "MISSED" }
            );
        } else {
            println!("targets: not checked (PostgreSQL skipped)");
        }

        // Memory: idle workers, then 32 parked runs (each keeps its live worker for the live window).
        let pid = memory.process.id().expect("gateway pid");
        let idle = workers(pid);
        let per_worker = idle.iter().map(|w| rss_kib(*w)).sum::<u64>() / idle.len().max(1) as u64;
        println!();
        println!("idle worker: {:.1} MiB resident ({} idle workers)", per_worker as f64 / 1024.0, idle.len());
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
        drop((memory, pg));
    });
}
