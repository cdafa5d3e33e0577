//! Workspace automation: `cargo xtask tidy` checks the layering of the crates (that only codemode-worker itself
//! enables its `engine-api` feature, that the host side, codemode-vm and every crate below it, reaches no Boa crate,
//! and that the test-only crates are only dev-dependencies), a `//!` header on every Rust file, `[lints] workspace = true` in every crate,
//! that every declared dependency is named in the crate's code and that ARCHITECTURE.md's "may depend on" column
//! matches the manifests, that every crate depends on the hakari crate and that the examples' lock files pin the
//! workspace's versions (`deps`); `cargo xtask bench-medians` prints the median of every criterion
//! benchmark measured so far (criterion's summary line shows the mean, the README reports medians);
//! `cargo xtask perf [kind ...]` counts the host's instructions per unit of work under callgrind and fails on a kind
//! more than 3% above its committed baseline (`perf`); `cargo xtask snapshots <references>` fails on an insta snapshot file no test referenced (`.ci/run` runs the tests
//! with `INSTA_SNAPSHOT_REFERENCES_FILE`, which insta appends every snapshot file an assertion reads to).
//!
//! The same check runs as a `#[test]`, so a plain `cargo test` enforces it. It reads `cargo metadata`; it never
//! changes a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

mod deps;
mod perf;

/// The layer of every workspace crate; a normal dependency may only point to a lower layer.
const LAYERS: &[(&str, u32)] = &[
    ("codemode-config", 0),
    ("codemode-telemetry", 0),
    ("codemode-pg-harness", 0),
    ("codemode-store-conformance", 4),
    ("codemode-catalog", 1),
    ("codemode-bridge", 2),
    ("codemode-source", 2),
    ("codemode-vm", 3),
    ("codemode-worker", 4),
    ("codemode-snapshot", 3),
    ("codemode-mcp", 3),
    ("codemode-store-pg", 4),
    ("codemode-run", 4),
    ("codemode-surface", 4),
    ("codemode", 5),
    ("codemode-gateway", 6),
    ("codemode-cli", 7),
    ("codemode-python", 7),
    ("xtask", 8),
];

/// The crates that may depend on the facade: the gateway library and the applications on top (the binary, the Python
/// package).
const FACADE_USERS: &[&str] = &["codemode-gateway", "codemode-cli", "codemode-python"];

/// The crate hakari generates (`cargo hakari generate`) to give every third-party crate one feature set across the
/// workspace: outside the layers, and a normal dependency of every other workspace crate.
pub const HACK: &str = "workspace-hack";

/// The codemode-worker feature that exposes the engine in-process; a host never enables it.
const ENGINE_API: &str = "engine-api";

/// The crate with the engine, and the engine's own crates: the executor's host side must reach none of them.
const ENGINE_CRATES: &[&str] = &["codemode-worker", "boa_engine", "boa_gc", "boa_string"];
/// The crates that are not published (`publish = false`): the Python package (PyPI's), the test PostgreSQL and this
/// tool. Every other crate carries what crates.io needs.
const UNPUBLISHED: &[&str] = &["codemode-python", "codemode-pg-harness", "codemode-store-conformance", "xtask"];

/// The crates for tests only (the throwaway PostgreSQL, the fleet backends' shared suite): only ever
/// dev-dependencies.
const TEST_ONLY: &[&str] = &["codemode-pg-harness", "codemode-store-conformance"];
/// The executor's host side: with the crates it depends on, it must compile without an engine.
const HOST_SIDE: &str = "codemode-vm";

fn main() -> anyhow::Result<()> {
    let task = std::env::args().nth(1).unwrap_or_default();
    match task.as_str() {
        "tidy" => {
            let problems = tidy(&workspace_root())?;
            if problems.is_empty() {
                println!("tidy: ok");
                Ok(())
            } else {
                for p in &problems {
                    eprintln!("tidy: {p}");
                }
                bail!("{} tidy problem(s)", problems.len())
            }
        }
        "perf" => perf::run(&workspace_root(), &std::env::args().skip(2).collect::<Vec<_>>()),
        "bench-medians" => {
            for (id, median_ns) in bench_medians(&workspace_root().join("target/criterion"))? {
                println!("{id:<60} {}", human(median_ns));
            }
            Ok(())
        }
        "snapshots" => {
            let references = std::env::args().nth(2).context("usage: cargo xtask snapshots <references file>")?;
            let unreferenced = unreferenced_snapshots(&workspace_root(), Path::new(&references))?;
            if unreferenced.is_empty() {
                println!("snapshots: every snapshot file is referenced");
                return Ok(());
            }
            for path in &unreferenced {
                eprintln!(
                    "snapshots: {}: no test references it (fix: delete it, or restore its assertion)",
                    path.display()
                );
            }
            bail!("{} unreferenced snapshot file(s)", unreferenced.len())
        }
        _ => bail!(
            "usage: cargo xtask tidy | cargo xtask perf [kind ...] | cargo xtask bench-medians | cargo xtask snapshots <references file>"
        ),
    }
}

/// `(benchmark id, median in ns)` of every benchmark with a `new/estimates.json` under `dir`, sorted by id.
fn bench_medians(dir: &Path) -> anyhow::Result<Vec<(String, f64)>> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let estimates = current.join("new/estimates.json");
        if estimates.is_file() {
            let text = std::fs::read_to_string(&estimates).with_context(|| estimates.display().to_string())?;
            let value: serde_json::Value = serde_json::from_str(&text).context("parsing criterion estimates")?;
            let id = current.strip_prefix(dir).unwrap_or(&current).display().to_string();
            if let Some(median) = value["median"]["point_estimate"].as_f64() {
                found.push((id, median));
            }
        }
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && !matches!(path.file_name().and_then(|n| n.to_str()), Some("new" | "base" | "report")) {
                stack.push(path);
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

/// A duration in ns as criterion prints it.
fn human(ns: f64) -> String {
    match ns {
        ns if ns >= 1e9 => format!("{:.2} s", ns / 1e9),
        ns if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        ns if ns >= 1e3 => format!("{:.1} µs", ns / 1e3),
        ns => format!("{ns:.0} ns"),
    }
}

/// The `.snap` files under `root` (outside `target`, `vendor` and `node_modules`) that `references`, the file insta
/// appended every snapshot file it asserted against to, does not name; sorted.
///
/// # Errors
///
/// A references file that cannot be read (the tests did not run with `INSTA_SNAPSHOT_REFERENCES_FILE`), or a folder
/// that cannot be listed.
fn unreferenced_snapshots(root: &Path, references: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(references).with_context(|| {
        format!("reading {} (run the tests with INSTA_SNAPSHOT_REFERENCES_FILE set to it first)", references.display())
    })?;
    let canonical = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let referenced: std::collections::BTreeSet<PathBuf> =
        text.lines().filter(|l| !l.trim().is_empty()).map(|l| canonical(Path::new(l.trim()))).collect();
    let mut unreferenced = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if path.is_dir() {
                if !matches!(name, "target" | "vendor" | "node_modules" | ".git") {
                    stack.push(path);
                }
            } else if name.ends_with(".snap") && !referenced.contains(&canonical(&path)) {
                unreferenced.push(path);
            }
        }
    }
    unreferenced.sort();
    Ok(unreferenced)
}

/// The variables cargo sets for a crate's process (besides the `CARGO_PKG_` and `CARGO_BIN_EXE_` families), which
/// `cargo xtask` passes on to this one.
const CRATE_VARS: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "OUT_DIR",
];

/// The cargo that runs xtask, without the variables it set for xtask's process: a build script that reruns when one
/// of them changes (ring's) would otherwise rerun in every cargo xtask starts, and every crate above it recompile.
pub(crate) fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_") || key.starts_with("CARGO_BIN_EXE_") || CRATE_VARS.contains(&&*key) {
            command.env_remove(&*key);
        }
    }
    command
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace root").to_path_buf()
}

/// Every problem found, as a sentence naming the file or crate and the fix.
/// [`HOST_SIDE`] and the workspace crates it depends on (normal dependencies, transitively) name none of
/// [`ENGINE_CRATES`], so a host that runs workers compiles no engine. Third-party crates other than Boa's never
/// depend on Boa, so the workspace's own manifests decide it.
fn check_host_side_has_no_engine(packages: &[serde_json::Value], problems: &mut Vec<String>) {
    let by_name: BTreeMap<&str, &serde_json::Value> =
        packages.iter().map(|p| (p["name"].as_str().unwrap_or_default(), p)).collect();
    let mut todo = vec![HOST_SIDE];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name) {
            continue;
        }
        let Some(package) = by_name.get(name) else { continue };
        for dep in package["dependencies"].as_array().into_iter().flatten().filter(|d| d["kind"].is_null()) {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            if ENGINE_CRATES.contains(&dep_name) {
                problems.push(format!(
                    "{name} depends on {dep_name}, so {HOST_SIDE} (the executor's host side) compiles an engine: \
                     keep engine code in codemode-worker"
                ));
            }
            todo.push(dep_name);
        }
    }
}

/// The feature that needs the workspace's patched Boa (`[patch.crates-io]`), which a crates.io build does not have.
const PATCHED_BOA: &str = "patched-boa";

/// Every crate but [`UNPUBLISHED`] and the hakari crate can be published: a description, a license and a repository,
/// no `publish = false`, a version on each normal dependency on another workspace crate (cargo refuses a path
/// without one), and no [`PATCHED_BOA`] turned on in a normal dependency. The unpublished ones say `publish = false`.
fn check_publishable(packages: &[serde_json::Value], problems: &mut Vec<String>) {
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        if name == HACK {
            continue;
        }
        let unpublished = package["publish"].as_array().is_some_and(Vec::is_empty);
        if UNPUBLISHED.contains(&name) {
            if !unpublished {
                problems.push(format!("{name} is not for crates.io: add `publish = false` to its manifest"));
            }
            continue;
        }
        if unpublished {
            problems.push(format!("{name} says `publish = false`: every library crate and the binary are published"));
        }
        for field in ["description", "license", "repository"] {
            if package[field].as_str().is_none_or(str::is_empty) {
                problems.push(format!("{name} has no `{field}`: crates.io needs it (`{field}.workspace = true`)"));
            }
        }
        let dependencies = package["dependencies"].as_array().into_iter().flatten();
        for dep in dependencies.clone().filter(|d| d["kind"].is_null()) {
            if dep["features"].as_array().is_some_and(|f| f.iter().any(|f| f == PATCHED_BOA)) {
                let dep_name = dep["name"].as_str().unwrap_or_default();
                problems.push(format!(
                    "{name} turns on {dep_name}'s `{PATCHED_BOA}` in its dependency: a published crate must build \
                     against crates.io's Boa, so leave it to a feature of its own (as codemode-cli's default does)"
                ));
            }
        }
        for dep in dependencies.filter(|d| d["kind"].is_null() && d["path"].is_string()) {
            if dep["req"] == "*" {
                let dep_name = dep["name"].as_str().unwrap_or_default();
                problems.push(format!(
                    "{name} depends on {dep_name} by path without a version: give its workspace dependency one"
                ));
            }
        }
    }
}

fn tidy(root: &Path) -> anyhow::Result<Vec<String>> {
    let output = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).context("parsing cargo metadata")?;
    let layers: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let mut problems = Vec::new();
    let packages = metadata["packages"].as_array().map(Vec::as_slice).unwrap_or_default();
    deps::check_architecture_table(root, packages, &mut problems)?;
    deps::check_example_locks(root, &mut problems)?;
    check_host_side_has_no_engine(packages, &mut problems);
    check_publishable(packages, &mut problems);
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        if name == HACK {
            continue;
        }
        let dependencies = package["dependencies"].as_array().into_iter().flatten();
        if !dependencies.clone().any(|d| d["name"] == HACK && d["kind"].is_null()) {
            problems.push(format!("{name} does not depend on {HACK}: run `cargo hakari manage-deps`"));
        }
        let Some(&layer) = layers.get(name) else {
            problems
                .push(format!("crate {name} has no layer: add it to LAYERS in xtask/src/main.rs and ARCHITECTURE.md"));
            continue;
        };
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            let Some(&dep_layer) = layers.get(dep_name) else { continue };
            let features = dep["features"].as_array().into_iter().flatten();
            if dep_name == "codemode-worker" && name != "codemode-worker" && features.clone().any(|f| f == ENGINE_API) {
                problems.push(format!(
                    "{name} enables codemode-worker's `{ENGINE_API}`: only the worker's own tests and benches may build \
                     an engine in-process"
                ));
            }
            if !dep["kind"].is_null() {
                continue; // dev- and build-dependencies may point anywhere below the facade
            }
            if TEST_ONLY.contains(&dep_name) {
                problems.push(format!("{name} depends on {dep_name} as a normal dependency: it is for tests only"));
                continue;
            }
            if dep_name == "codemode" || dep_name == "xtask" {
                if !FACADE_USERS.contains(&name) || dep_name == "xtask" {
                    problems.push(format!(
                        "{name} depends on {dep_name}: nothing but the CLI and the Python package depend on the facade"
                    ));
                }
                continue;
            }
            if dep_layer >= layer {
                problems.push(format!(
                    "{name} (layer {layer}) depends on {dep_name} (layer {dep_layer}): dependencies must point down"
                ));
            }
        }
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
        let text = std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
        if !text.contains("[lints]\nworkspace = true") {
            problems.push(format!("{}: add `[lints]\\nworkspace = true`", manifest.display()));
        }
        let dir = manifest.parent().expect("a manifest has a folder");
        for sub in ["src", "tests", "benches"] {
            check_headers(&dir.join(sub), &mut problems)?;
        }
        deps::check_unused(package, dir, &mut problems)?;
    }
    Ok(problems)
}

fn check_headers(dir: &Path, problems: &mut Vec<String>) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            check_headers(&path, problems)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)?;
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
            if !first.starts_with("//!") {
                problems.push(format!("{}: start the file with a `//!` header saying what it is", path.display()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_snapshot_file_no_test_asserted_against_is_reported() {
        let dir = tempfile_dir();
        let snapshots = dir.join("crate/tests/it/snapshots");
        std::fs::create_dir_all(&snapshots).expect("snapshots folder");
        std::fs::create_dir_all(dir.join("target/x/snapshots")).expect("target folder");
        for name in ["it__used.snap", "it__stale.snap"] {
            std::fs::write(snapshots.join(name), "---\n").expect("snapshot");
        }
        std::fs::write(dir.join("target/x/snapshots/ignored.snap"), "").expect("snapshot under target");
        let references = dir.join("references");
        std::fs::write(&references, format!("{}\n", snapshots.join("it__used.snap").display())).expect("references");
        let found = super::unreferenced_snapshots(&dir, &references).expect("the check runs");
        assert_eq!(found, [snapshots.join("it__stale.snap")]);
        assert!(super::unreferenced_snapshots(&dir, &dir.join("missing")).is_err(), "no references file is an error");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// A fresh folder under the system's temp folder (xtask has no tempfile dependency).
    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-snapshots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn tidy() {
        let problems = super::tidy(&super::workspace_root()).expect("tidy runs");
        assert!(problems.is_empty(), "tidy problems:\n{}", problems.join("\n"));
    }
}
