//! The worker handshake: the real worker's first message is its hello, which names the engine's fast paths, and the
//! pool refuses a worker whose hello names another protocol version or is missing, or, when required, lacks a fast
//! path.
//!
//! The good path runs the real `codemode-worker`; the refusals use tiny shell scripts that print one crafted first
//! line, because a real worker of another version cannot be built in this workspace. The same tests run in the build
//! against crates.io's Boa (`scripts/vanilla.sh`), where the worker has no fast path.

use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use codemode_vm::pool::{PoolConfig, PoolError, WorkerCommand, WorkerPool};
use codemode_vm::protocol::{FastPaths, HostMessage, PROTOCOL_VERSION, WorkerMessage};

fn real_worker() -> WorkerCommand {
    WorkerCommand { program: PathBuf::from(env!("CARGO_BIN_EXE_codemode-worker")), args: Vec::new() }
}

/// The fast paths of this build: both with the workspace's patched Boa and the `patched-boa` feature, none against
/// crates.io's Boa.
fn this_build() -> FastPaths {
    if cfg!(feature = "patched-boa") { FastPaths::ALL } else { FastPaths::default() }
}

fn pool(command: WorkerCommand, require_fast_paths: bool) -> std::sync::Arc<WorkerPool> {
    WorkerPool::new(PoolConfig {
        command,
        warm: 0,
        memory_limit_bytes: 64 * 1024 * 1024,
        instructions: 1_000_000,
        globals: None,
        require_fast_paths,
        admission: None,
        confinement: Default::default(),
        max_idle: codemode_vm::pool::DEFAULT_MAX_IDLE,
        idle_ttl: codemode_vm::pool::DEFAULT_IDLE_TTL,
    })
}

/// A worker command that runs `body` as a POSIX shell script.
fn script(dir: &Path, name: &str, body: &str) -> WorkerCommand {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write the script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("make it executable");
    WorkerCommand { program: path, args: Vec::new() }
}

/// A fake worker whose first line is `hello` and that then waits for the host to hang up.
fn says(dir: &Path, name: &str, hello: &str) -> WorkerCommand {
    script(dir, name, &format!("printf '%s\\n' '{hello}'\nexec cat >/dev/null"))
}

#[test]
fn the_real_worker_introduces_itself_first() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_codemode-worker"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the worker starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("a line");
    assert!(child.wait().expect("it exits").success(), "a worker whose host hangs up exits cleanly");
    match serde_json::from_str::<WorkerMessage>(&line).expect("a worker message") {
        WorkerMessage::Hello(hello) => {
            assert_eq!(hello.protocol, PROTOCOL_VERSION);
            assert_eq!(hello.fast_paths, this_build());
        }
        other => panic!("first message {other:?}"),
    }
}

#[test]
fn the_engine_reports_the_fast_paths_of_its_build() {
    assert_eq!(codemode_worker::worker::engine_fast_paths(), this_build());
}

#[test]
fn check_accepts_the_real_worker() {
    let hello = pool(real_worker(), false).check().expect("the real worker passes");
    assert_eq!(hello.protocol, PROTOCOL_VERSION);
    assert_eq!(hello.fast_paths, this_build());
    // Required, the fast paths pass only in the workspace's build.
    assert_eq!(pool(real_worker(), true).check().is_ok(), this_build() == FastPaths::ALL);
}

#[test]
fn check_refuses_another_protocol_version_naming_both_and_the_worker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = says(dir.path(), "future-worker", r#"{"t":"hello","protocol":999,"shape":"unknown"}"#);
    let error = pool(worker.clone(), false).check().expect_err("refused");
    assert!(matches!(error, PoolError::Protocol { worker_protocol: 999, host_protocol: PROTOCOL_VERSION, .. }));
    let message = error.to_string();
    assert!(message.contains("protocol version 999"), "{message}");
    assert!(message.contains(&format!("version {PROTOCOL_VERSION}")), "{message}");
    assert!(message.contains(&worker.program.display().to_string()), "{message}");
}

#[test]
fn check_refuses_a_worker_without_a_hello() {
    let dir = tempfile::tempdir().expect("tempdir");
    let silent = script(dir.path(), "silent", "echo 'not a worker' >&2\nexit 3");
    let error = pool(silent, false).check().expect_err("refused");
    let message = error.to_string();
    assert!(matches!(error, PoolError::NoHello { .. }), "{message}");
    assert!(message.contains("exit status: 3") && message.contains("not a worker"), "{message}");
    let chatty = says(dir.path(), "chatty", r#"{"t":"ready"}"#);
    let message = pool(chatty, false).check().expect_err("refused").to_string();
    assert!(message.contains("its first message is not a hello"), "{message}");
}

#[test]
fn check_refuses_a_slow_engine_naming_the_patch_lines_only_when_required() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hello = format!(
        r#"{{"t":"hello","protocol":{PROTOCOL_VERSION},"fastPaths":{{"appendStrings":false,"sharedScripts":true}},"confinement":{{"mode":"off","steps":[]}}}}"#
    );
    let slow = says(dir.path(), "slow-worker", &hello);
    let accepted = pool(slow.clone(), false).check().expect("accepted by default");
    assert_eq!(accepted.fast_paths, FastPaths::new(false, true));
    let error = pool(slow, true).check().expect_err("refused when required");
    let vendor = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vendor").canonicalize().expect("vendor");
    let lines = format!(
        "boa_string = {{ path = \"{}\" }}; boa_engine = {{ path = \"{}\" }}",
        vendor.join("boa_string").display(),
        vendor.join("boa_engine").display()
    );
    assert_eq!(codemode_vm::pool::boa_patch_lines(), lines);
    let message = error.to_string();
    assert!(message.contains("lacks append strings ("), "{message}");
    assert!(message.contains(&format!("add `{lines}` under `[patch.crates-io]`")), "{message}");
    assert!(message.contains("`patched-boa` feature") && message.contains("require_fast_paths(false)"), "{message}");
}

#[tokio::test]
async fn a_pooled_worker_of_another_version_never_gets_a_cell() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = says(dir.path(), "old-worker", r#"{"t":"hello","protocol":0,"fastPaths":{}}"#);
    let pool = pool(worker, false);
    let mut process = pool.checkout().expect("the process starts");
    let error = process.send(&HostMessage::Shutdown).await.expect_err("refused before the first message");
    assert!(matches!(error, PoolError::Protocol { worker_protocol: 0, .. }), "{error}");
}

#[test]
fn error_texts() {
    let not_found = PoolError::NotFound {
        looked_at: vec![PathBuf::from("/app/bin/codemode-worker"), PathBuf::from("/app/codemode-worker")],
    };
    let protocol =
        PoolError::Protocol { worker: "/app/bin/worker".into(), worker_protocol: 0, host_protocol: PROTOCOL_VERSION };
    let slow = PoolError::SlowEngine {
        worker: "/app/bin/app __codemode_worker".into(),
        missing: "append strings and shared scripts".into(),
        patch_lines: r#"boa_string = { path = "/src/codemode/vendor/boa_string" }; boa_engine = { path = "/src/codemode/vendor/boa_engine" }"#.into(),
    };
    insta::assert_snapshot!([not_found.to_string(), protocol.to_string(), slow.to_string()].join("\n\n"));
}
