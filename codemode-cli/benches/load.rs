//! The gateway's load benchmark with a Rust client: closed-loop rmcp clients (each sends its next trivial cell when
//! the last one answered), 1, 8 and 32 of them, over Streamable HTTP's sessionless revision and with stateful
//! sessions, against one `codemode mcp --http` process with the in-memory store. For each case it prints
//! throughput, p50 and p99, and the CPU each cell cost the gateway process, its workers and this client (from
//! `/proc/<pid>/stat`, so the figures include the kernel's share: the syscalls, wake-ups and pipes a cell costs).
//!
//! The client is rmcp's, in one process on a runtime of its own, so that it is not what bounds throughput (the MCP
//! Python SDK's figures, `benches/py/gateway_load.py`, are what a Python client sees).
//!
//! Targets (issue 37): at most 0.3 ms of gateway CPU per trivial `exec`; at least 1,500 cells/s with 32 clients on
//! 2 cores. Run it with `cargo bench -p codemode-cli --bench load` (`LOAD_SECONDS` sets the seconds per case, 5 by
//! default; `LOAD_CLIENTS` the client counts, `1,8,32` by default).

#[path = "support/http.rs"]
mod http;

use std::path::Path;

use http::{Mode, closed_loop, connect, gateway, ms, tree};

const TRIVIAL: &str = "return 1 + 1;";

/// CPU time a process used, split into its own and its waited-for children's, in clock ticks.
#[derive(Clone, Copy, Default)]
struct Cpu {
    own: u64,
    children: u64,
}

/// `/proc/<pid>/stat`'s utime + stime and cutime + cstime.
fn cpu(pid: u32) -> Cpu {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name's closing parenthesis start at field 3 (state).
    let rest: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().skip(1).map(|f| f.parse().unwrap_or(0)).collect())
        .unwrap_or_default();
    let field = |n: usize| rest.get(n - 4).copied().unwrap_or(0);
    Cpu { own: field(14) + field(15), children: field(16) + field(17) }
}

/// The CPU of the gateway and of its workers (every live descendant, plus what the gateway reaped).
fn split(pid: u32) -> (u64, u64) {
    let gateway = cpu(pid);
    let descendants: u64 = tree(pid).into_iter().skip(1).map(|p| cpu(p).own).sum();
    (gateway.own, gateway.children + descendants)
}

fn ticks_ms(ticks: u64) -> f64 {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 * 1000.0 / per_second
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (a filter) is ignored: this binary runs every case.
    let seconds: f64 = std::env::var("LOAD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let counts: Vec<usize> = std::env::var("LOAD_CLIENTS")
        .unwrap_or_else(|_| "1,8,32".to_owned())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    // rmcp's HTTP client (reqwest on rustls) needs the process's TLS provider, as the gateway installs its own.
    codemode_gateway::install_tls_provider();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    rt.block_on(async move {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("gateway.toml");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ledger.mjs");
        let text = format!(
            "[limits]\ntimeoutMs = 30000\n\n[servers.ledger]\ncommand = \"node\"\nargs = [{:?}]\nenv = {{ LEDGER = \
             \"/dev/null\" }}\n",
            server.display().to_string()
        );
        std::fs::write(&config, text).expect("config");
        let gateway = gateway(&config).await;
        let pid = gateway.process.id().expect("gateway pid");
        let me = std::process::id();

        println!("trivial cells, closed loop over Streamable HTTP, {seconds} s per case, one gateway (memory store)");
        println!();
        println!(
            "| clients | mode | cells/s | p50 | p99 | gateway CPU per cell | workers CPU per cell | client CPU per cell |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for mode in [Mode::Sessionless, Mode::Session] {
            for &clients in &counts {
                let connected = connect(std::slice::from_ref(&gateway.url), clients, mode, TRIVIAL).await;
                let (gateway_before, workers_before) = split(pid);
                let client_before = cpu(me).own;
                let figures = closed_loop(connected, TRIVIAL, seconds).await;
                let (gateway_after, workers_after) = split(pid);
                let client_after = cpu(me).own;
                let per_cell = |ticks: u64| ticks_ms(ticks) / figures.cells.max(1) as f64;
                println!(
                    "| {clients} | {} | {:.0} | {:.2} ms | {:.2} ms | {:.3} ms | {:.3} ms | {:.3} ms |",
                    mode.name(),
                    figures.throughput,
                    ms(figures.p50),
                    ms(figures.p99),
                    per_cell(gateway_after.saturating_sub(gateway_before)),
                    per_cell(workers_after.saturating_sub(workers_before)),
                    per_cell(client_after.saturating_sub(client_before)),
                );
            }
        }
        println!();
        println!("targets: gateway CPU per trivial exec <= 0.3 ms; >= 1,500 cells/s with 32 clients on 2 cores");
        drop(gateway);
    });
}
