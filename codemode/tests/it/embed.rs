//! Embedding from outside the workspace: `examples/embed` (its own workspace, a path dependency on the facade, its
//! own binary as the worker) is built and run, README's library snippet is that program word for word, and a
//! worker refused by its hello fails `build()` or, once the pool runs, the cell with `runtime_unavailable`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use codemode::PROTOCOL_VERSION;
use codemode::{CodeMode, CodeModeResult, ErrorCode, RunScope};
use codemode::{PoolError, WorkerCommand};
use serde_json::{Value, json};

use crate::support::TestHost;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the facade sits in the repository").to_path_buf()
}

/// The target folder this test binary was built in (`<target>/debug/deps/it-…`): the example, built there with the
/// workspace's hakari crate patched in (as `scripts/test.sh` builds it), reuses every third-party crate the tests'
/// build compiled.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    exe.ancestors().nth(3).expect("<target>/<profile>/deps/<binary>").to_path_buf()
}

/// The `--config` that patches crates.io's empty `workspace-hack` with the workspace's (what `scripts/test.sh` passes).
fn hack() -> String {
    format!("patch.crates-io.workspace-hack.path={:?}", repo().join("workspace-hack").display().to_string())
}

/// The cargo that runs this test, without the variables it set for this test's process (the `CARGO_PKG_` and
/// `CARGO_BIN_EXE_` families, `CARGO_MANIFEST_DIR`, …): a build script that reruns when one of them changes (ring's)
/// would otherwise rerun, and every crate above it recompile.
fn cargo() -> Command {
    let mut command = Command::new(env!("CARGO"));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_") || key.starts_with("CARGO_BIN_EXE_") || CRATE_VARS.contains(&&*key) {
            command.env_remove(&*key);
        }
    }
    command
}

/// The variables cargo sets for a crate's process besides the two families.
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

#[test]
fn the_example_embeds_the_facade_from_outside_the_workspace() {
    let output = cargo()
        .args(["run", "--quiet", "--offline", "--config", &hack(), "--manifest-path"])
        .arg(repo().join("examples/embed/Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove("CODEMODE_WORKER")
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the example failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("the model sees: exec, wait"));
    // Built from README's dependency lines alone: crates.io's Boa, without the fast paths.
    assert_eq!(lines.next(), Some(format!("fast paths: {:?}", codemode::FastPaths::default()).as_str()));
    let result: Value = serde_json::from_str(lines.next().expect("the result line")).expect("the result is JSON");
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["value"], json!({ "tool": "ping", "args": { "n": 1 } }), "{result}");
}

#[test]
fn the_readme_library_snippet_is_the_example_word_for_word() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README");
    let section = &readme[readme.find("## Using the library").expect("the library section")..];
    let start = section.find("```rust,no_run\n").expect("the Rust snippet") + "```rust,no_run\n".len();
    let snippet = &section[start..start + section[start..].find("\n```").expect("the snippet ends")];
    let main = std::fs::read_to_string(repo().join("examples/embed/src/main.rs")).expect("the example");
    let body = main.lines().skip_while(|l| l.starts_with("//!")).skip_while(|l| l.is_empty()).collect::<Vec<_>>();
    assert_eq!(snippet, body.join("\n"), "README's snippet and examples/embed/src/main.rs differ");
    // The example's dependencies are README's first block, without a patch; the second block adds the fast paths.
    let manifest = std::fs::read_to_string(repo().join("examples/embed/Cargo.toml")).expect("the manifest");
    let dependencies = |text: &str| {
        let start = text.find("[dependencies]\n").expect("a dependency table");
        text[start..]
            .lines()
            .skip(1)
            .take_while(|l| !l.is_empty() && !l.starts_with("```"))
            .map(dependency_name)
            .collect::<Vec<_>>()
    };
    let first = &section[section.find("```toml\n").expect("README's dependency block")..];
    assert_eq!(dependencies(&manifest), dependencies(first));
    assert!(!manifest.contains("[patch") && !first[..first.find("\n```\n").expect("ends")].contains("[patch"));
    assert!(section.contains("[patch.crates-io]\nboa_string = { path = \"../codemode/vendor/boa_string\" }"));
    assert!(section.contains("features = [\"patched-boa\"]"));
}

/// A dependency line's crate name.
fn dependency_name(line: &str) -> String {
    line.split(['=', ' ']).next().unwrap_or_default().to_owned()
}

/// A worker command that runs `body` as a POSIX shell script.
/// An executable script running `body`. A child process writes it: a file this process held open for writing could
/// be inherited by a process another test forks at that moment, and starting the script would then fail with
/// `ETXTBSY` until that process execs.
fn script(dir: &Path, body: &str) -> WorkerCommand {
    let path = dir.join("worker.sh");
    let mut writer = Command::new("sh")
        .args(["-c", r#"cat > "$0" && chmod 755 "$0""#])
        .arg(&path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("start sh");
    let mut stdin = writer.stdin.take().expect("a piped stdin");
    stdin.write_all(format!("#!/bin/sh\n{body}\n").as_bytes()).expect("write the script");
    drop(stdin);
    assert!(writer.wait().expect("sh ends").success(), "the script was written");
    WorkerCommand { program: path, args: Vec::new() }
}

fn builder(worker: WorkerCommand) -> codemode::CodeModeBuilder {
    CodeMode::builder().host(Arc::new(TestHost::default())).worker(worker).warm_workers(1)
}

#[tokio::test]
async fn build_refuses_a_worker_of_another_protocol_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = script(dir.path(), r#"printf '%s\n' '{"t":"hello","protocol":7}'; exec cat >/dev/null"#);
    let error = builder(worker.clone()).build().expect_err("refused");
    assert!(matches!(error, codemode::Error::Runtime(PoolError::Protocol { worker_protocol: 7, .. })), "{error}");
    let message = error.to_string();
    assert!(message.contains("protocol version 7"), "{message}");
    assert!(message.contains(&format!("this host speaks version {PROTOCOL_VERSION}")), "{message}");
    assert!(message.contains(&worker.program.display().to_string()), "{message}");
}

#[tokio::test]
async fn a_worker_replaced_after_build_fails_the_cell_closed() {
    // Build's check (started with stdin on /dev/null) gets the real worker; the pool's workers (stdin a pipe)
    // announce protocol 0.
    let dir = tempfile::tempdir().expect("tempdir");
    let real = WorkerCommand::locate().expect("the bundled worker");
    let body = format!(
        "if [ ! -p /dev/stdin ]; then exec '{real}'; fi\n\
         printf '%s\\n' '{{\"t\":\"hello\",\"protocol\":0,\"fastPaths\":{{}}}}'; exec cat >/dev/null",
        real = real.program.display(),
    );
    let engine = builder(script(dir.path(), &body)).build().expect("the check saw the real worker");
    let result = engine.exec(json!({ "title": "t", "code": "return 1" }), RunScope::default()).await;
    let CodeModeResult::Failed(failed) = &result else { panic!("{result:?}") };
    assert_eq!(failed.code, ErrorCode::RuntimeUnavailable, "{result:?}");
    assert!(failed.error.contains("protocol version 0"), "{}", failed.error);
    assert!(failed.error.contains(&format!("version {PROTOCOL_VERSION}")), "{}", failed.error);
}
