//! Worker start: from spawning the bundled `codemode-worker` to its first `ready` (its first context built), with
//! each confinement mode. The difference between `required` and `off` is what the confinement costs a worker's
//! start (Landlock ruleset, seccomp filter compiled and installed); it is paid once per worker, never per cell.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};

const WORKER: &str = env!("CARGO_BIN_EXE_codemode-worker");

/// Starts a worker in `mode`, waits for its `ready` line, then ends it.
fn start_to_ready(mode: &str) {
    let mut child = Command::new(WORKER)
        .env("CODEMODE_WORKER_CONFINEMENT", mode)
        .env("CODEMODE_WORKER_ADDRESS_SPACE", (4u64 << 30).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the worker starts");
    // A worker builds its first context once the host's first message (the globals) has arrived.
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin.write_all(b"{\"t\":\"configure\",\"tools\":[],\"mcp\":[],\"api_files\":[]}\n").expect("the worker reads");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    loop {
        let line = lines.next().expect("the worker reports ready").expect("a line");
        if line.contains("\"t\":\"ready\"") {
            break;
        }
    }
    // Closing stdin ends the worker; wait so that no process outlives its sample.
    drop(stdin);
    child.wait().expect("the worker exits");
}

fn spawn(c: &mut Criterion) {
    let mut group = c.benchmark_group("worker_start");
    group.sample_size(30);
    for mode in ["off", "best_effort", "required"] {
        group.bench_function(mode, |b| b.iter(|| start_to_ready(mode)));
    }
    group.finish();
}

criterion_group!(benches, spawn);
criterion_main!(benches);
