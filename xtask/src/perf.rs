//! The instruction gate (`cargo xtask perf`): counts the host's instructions per unit of work under valgrind's
//! callgrind and compares each kind with the baseline committed in `xtask/perf-baseline.txt`. It counts the dev
//! build the tests use (every crate at opt-level 2, debug assertions on, the feature resolution of
//! `scripts/test.sh`'s `cargo test --workspace --exclude codemode-worker`), so that CI compiles nothing more for it but
//! the bench;
//! `cargo xtask perf --release` counts the release build instead, for the figures docs quote (the baseline holds
//! the dev build's).
//!
//! A kind is counted by difference: the same program run at two sizes (n cells, then 3n), so that start-up, the
//! pool's first fill and the exit drop out, and (instructions at 3n - instructions at n) / 2n is one unit; each size
//! runs three times and the fewest instructions count (what differs between runs of one binary only adds work). Callgrind
//! does not follow the worker processes: the counts are the host's alone. Kinds:
//!
//! - `trivial`, `ten`, `live`, `replay100`: the `exec` bench's counting mode (`codemode/benches/exec.rs`): a trivial
//!   cell, 10 sequential calls, a suspend and resume on the live worker, and a run of 100 calls parked and resumed
//!   by replay (its `exec` and `wait` together);
//! - `gateway`: one `tools/call exec` of a trivial cell over the gateway's loopback HTTP, the gateway process counted
//!   (`codemode mcp --http`, the client the MCP Python SDK's in `target/py`, which `scripts/test.sh` installs).
//!
//! Invariant: a kind more than [`TOLERANCE`] above its baseline fails the gate, naming the kind and by how much; a
//! baseline moves only by editing the file, in a commit that says why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// How far above its baseline a kind may count: 3%.
pub const TOLERANCE: f64 = 0.03;

/// Runs of each size, of which the fewest instructions count.
const RUNS: usize = 3;

/// The committed baseline, relative to the workspace root.
pub const BASELINE: &str = "xtask/perf-baseline.txt";

/// A kind of work and the smaller of its two sizes.
struct Kind {
    name: &'static str,
    cells: u32,
}

const KINDS: [Kind; 5] = [
    Kind { name: "trivial", cells: 40 },
    Kind { name: "ten", cells: 10 },
    Kind { name: "live", cells: 40 },
    Kind { name: "replay100", cells: 3 },
    Kind { name: "gateway", cells: 40 },
];

/// Counts every kind (or those named in `only`), prints each against its baseline, and fails when one is above it by
/// more than [`TOLERANCE`] or has none.
pub fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let valgrind = Command::new("valgrind").arg("--version").output();
    if !valgrind.is_ok_and(|o| o.status.success()) {
        bail!("valgrind is not installed (fix: `apt-get install valgrind`, or your system's package)");
    }
    let release = args.iter().any(|a| a == "--release");
    let only: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let baseline = read_baseline(&root.join(BASELINE))?;
    let bins = build(root, release)?;
    let out = root.join("target/perf");
    std::fs::create_dir_all(&out)?;
    let mut failures = Vec::new();
    for kind in KINDS.iter().filter(|k| only.is_empty() || only.iter().any(|o| o.as_str() == k.name)) {
        let count = |cells: u32| -> anyhow::Result<u64> {
            let file = out.join(format!("{}.{cells}.callgrind", kind.name));
            if kind.name == "gateway" {
                count_gateway(root, &bins.codemode, cells, &file)
            } else {
                count_exec(&bins.exec, kind.name, cells, &file)
            }
        };
        // The fewest of three runs of each size: what varies between runs (a runtime thread woken once more, a
        // timer that fired) only adds instructions.
        let fewest = |cells: u32| -> anyhow::Result<u64> {
            let mut counts = (0..RUNS).map(|_| count(cells)).collect::<anyhow::Result<Vec<_>>>()?;
            counts.sort_unstable();
            Ok(counts[0])
        };
        let (small, large) = (fewest(kind.cells)?, fewest(kind.cells * 3)?);
        let per_unit = large.saturating_sub(small) / u64::from(kind.cells * 2);
        match baseline.get(kind.name) {
            Some(_) if release => {
                println!("perf: {:<10} {:>12} host instructions a unit (release)", kind.name, thousands(per_unit))
            }
            Some(&base) => {
                let change = per_unit as f64 / base as f64 - 1.0;
                println!(
                    "perf: {:<10} {:>12} host instructions a unit, baseline {:>12} ({:+.1}%)",
                    kind.name,
                    thousands(per_unit),
                    thousands(base),
                    change * 100.0
                );
                if change > TOLERANCE {
                    failures.push(format!(
                        "{} is {:+.1}% above its baseline ({} against {} host instructions a unit)",
                        kind.name,
                        change * 100.0,
                        thousands(per_unit),
                        thousands(base)
                    ));
                }
            }
            None => failures.push(format!(
                "{} has no baseline in {BASELINE} (fix: add the line `{} {per_unit}` with a comment saying why)",
                kind.name, kind.name
            )),
        }
    }
    if failures.is_empty() {
        println!("perf: every kind within {:.0}% of its baseline", TOLERANCE * 100.0);
        return Ok(());
    }
    for failure in &failures {
        eprintln!("perf: {failure}");
    }
    bail!(
        "{} kind(s) above the baseline (fix: find what the path gained with callgrind_annotate on target/perf/*.callgrind; \
         a baseline moves only in a commit that says why)",
        failures.len()
    )
}

/// The baseline: `<kind> <instructions>` lines; `#` starts a comment.
fn read_baseline(path: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut kinds = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(kind), Some(count), None) = (words.next(), words.next(), words.next()) else {
            bail!("{}:{}: expected `<kind> <instructions>`, found `{line}`", path.display(), number + 1);
        };
        let count = count.replace('_', "").parse().with_context(|| format!("{}:{}", path.display(), number + 1))?;
        kinds.insert(kind.to_owned(), count);
    }
    Ok(kinds)
}

/// The release binaries the gate runs.
struct Bins {
    exec: PathBuf,
    codemode: PathBuf,
}

/// Builds the worker, the `codemode` binary and the `exec` bench. The dev build is the tests' own (`cargo test -p
/// codemode-worker --no-run`, then `cargo test --workspace --exclude codemode-worker --no-run`, as `scripts/test.sh`
/// builds), so that after the tests only the bench compiles; the release build is a `cargo build` of the three.
fn build(root: &Path, release: bool) -> anyhow::Result<Bins> {
    let (binaries, bench): (&[&str], &[&str]) = if release {
        (
            &[
                "build",
                "--release",
                "-p",
                "codemode-worker",
                "--bin",
                "codemode-worker",
                "-p",
                "codemode-cli",
                "--bin",
                "codemode",
            ],
            &["build", "--release", "-p", "codemode", "--bench", "exec"],
        )
    } else {
        (
            &["test", "--workspace", "--exclude", "codemode-worker", "--no-run"],
            &["test", "--workspace", "--exclude", "codemode-worker", "--no-run", "--bench", "exec"],
        )
    };
    if !release {
        let status = crate::cargo().current_dir(root).args(["test", "-p", "codemode-worker", "--no-run"]).status()?;
        if !status.success() {
            bail!("building the worker failed");
        }
    }
    let status = crate::cargo().current_dir(root).args(binaries).status()?;
    if !status.success() {
        bail!("building the binaries failed");
    }
    let output = crate::cargo()
        .current_dir(root)
        .args(bench)
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        bail!("building the exec bench failed");
    }
    let exec = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "exec")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo named no executable for the exec bench")?;
    let dir = if release { "target/release" } else { "target/debug" };
    Ok(Bins { exec, codemode: root.join(dir).join("codemode") })
}

/// Starts `program` (its arguments and environment) under callgrind, its profile to be written to `file`.
fn callgrind(program: Command, file: &Path) -> anyhow::Result<std::process::Child> {
    let args: Vec<_> =
        std::iter::once(program.get_program().to_owned()).chain(program.get_args().map(Into::into)).collect();
    let mut command = Command::new("valgrind");
    command.arg("--tool=callgrind").arg(format!("--callgrind-out-file={}", file.display())).args(args);
    for (key, value) in program.get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    command.stdout(Stdio::null()).stderr(Stdio::null());
    Ok(command.spawn()?)
}

/// The instructions a finished callgrind profile counted (its `totals:` or `summary:` line).
fn totals(file: &Path) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("totals:").or_else(|| l.strip_prefix("summary:")))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("{} has no totals", file.display()))
}

/// `cells` cells of `kind` in the exec bench's counting mode.
fn count_exec(exec: &Path, kind: &str, cells: u32, file: &Path) -> anyhow::Result<u64> {
    let mut program = Command::new(exec);
    program.arg("--bench").env("CODEMODE_EXEC_KIND", kind).env("CODEMODE_EXEC_COUNT", cells.to_string());
    let status = callgrind(program, file)?.wait()?;
    if !status.success() {
        bail!("the exec bench's count of {cells} {kind} cells failed ({status})");
    }
    totals(file)
}

/// `cells` trivial `exec`s over the gateway's loopback HTTP, the gateway under callgrind.
fn count_gateway(root: &Path, codemode: &Path, cells: u32, file: &Path) -> anyhow::Result<u64> {
    let python = root.join("target/py/bin/python");
    if !python.is_file() {
        bail!(
            "{} is missing (fix: run scripts/test.sh once, which installs the MCP Python SDK there)",
            python.display()
        );
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    // A gateway as it is used: one upstream server (the npm filesystem server, over stdio).
    let filesystem = root.join("mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    if !filesystem.is_file() {
        bail!("{} is missing (fix: npm ci --prefix mcp-servers)", filesystem.display());
    }
    let shared = root.join("target/perf/shared");
    std::fs::create_dir_all(&shared)?;
    let config = root.join("target/perf/gateway.toml");
    std::fs::write(
        &config,
        format!("[servers.fs]\ncommand = \"node\"\nargs = [{:?}, {:?}]\n", filesystem.display(), shared.display()),
    )?;
    let mut program = Command::new(codemode);
    program.args(["mcp", "--http", &format!("127.0.0.1:{port}"), "--config"]).arg(&config);
    let mut gateway = callgrind(program, file)?;
    let client = Command::new(&python)
        .arg(root.join("xtask/perf_gateway.py"))
        .args([format!("http://127.0.0.1:{port}/mcp"), cells.to_string()])
        .status();
    // SIGTERM: the gateway shuts down and callgrind writes the profile.
    terminate(gateway.id());
    let ended = gateway.wait()?;
    if !client?.success() {
        bail!("the gateway client's {cells} cells failed");
    }
    if !ended.success() {
        bail!("the gateway under callgrind ended with {ended}");
    }
    totals(file)
}

/// Sends SIGTERM to `pid` with the `kill` command.
fn terminate(pid: u32) {
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
}

/// `n` with thousands separated by commas.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
