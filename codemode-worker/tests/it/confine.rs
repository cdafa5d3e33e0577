//! The worker's confinement, checked in real worker processes: the forbidden operations a confined worker attempts
//! from native code (the test-only probe) are each denied, a cell still runs, and a required step that fails ends
//! the worker with a message naming the step and the opt-out.

use std::process::{Command, Stdio};
use std::sync::Arc;

use codemode_bridge::Journal;
use codemode_vm::confine::{Confinement, Step, StepOutcome};
use codemode_vm::pool::{Death, PoolConfig, PoolError, WorkerCommand, WorkerPool};
use codemode_vm::protocol::{CellLimits, GuestOutcome, HostMessage, PROTOCOL_VERSION, Start, WorkerMessage};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_codemode-worker");

/// Runs the worker as the probe in `mode` and returns its JSON line.
fn probe(mode: &str) -> Value {
    let out = Command::new(WORKER)
        .env("CODEMODE_WORKER_PROBE", mode)
        .env("CODEMODE_WORKER_ADDRESS_SPACE", (4u64 << 30).to_string())
        .stdin(Stdio::null())
        .output()
        .expect("the worker starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "probe exited with {}: {stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("probe output is not JSON ({e}): {stdout}"))
}

/// The result of each probed operation, by name.
fn results(line: &Value) -> Vec<(String, String)> {
    line["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .map(|p| (p["op"].as_str().unwrap().to_owned(), p["result"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn every_forbidden_operation_is_denied_in_a_confined_worker() {
    let line = probe("all");
    let steps: Vec<(&str, &str)> = line["report"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [("address_space", "applied"), ("no_new_privs", "applied"), ("landlock", "applied"), ("seccomp", "applied")]
    );
    let results = results(&line);
    let ops: Vec<&str> = results.iter().map(|(op, _)| op.as_str()).collect();
    assert_eq!(
        ops,
        [
            "open /etc/passwd",
            "openat a new file",
            "socket",
            "connect",
            "execve /bin/true",
            "ptrace attach",
            "process_vm_readv",
            "fork",
            "thread spawn",
            "kill parent",
            "mmap PROT_EXEC",
        ]
    );
    for (op, result) in &results {
        assert_eq!(result, "EPERM", "{op} was not denied by the seccomp filter");
    }
}

#[test]
fn landlock_alone_denies_files_exec_and_connect() {
    let line = probe("landlock");
    let steps = line["report"]["steps"].as_array().unwrap();
    assert!(steps.iter().all(|s| s["step"] != "seccomp"), "the landlock probe leaves seccomp out: {steps:?}");
    let results = results(&line);
    let result = |op: &str| results.iter().find(|(o, _)| o == op).map(|(_, r)| r.as_str()).unwrap();
    // Without the filter, Landlock answers on its own: no file, no exec, no TCP connect, no signal or ptrace
    // outside the worker's domain.
    assert_eq!(result("open /etc/passwd"), "EACCES");
    assert_eq!(result("openat a new file"), "EACCES");
    assert_eq!(result("execve /bin/true"), "EACCES");
    assert_eq!(result("connect"), "EACCES");
    assert_eq!(result("kill parent"), "EPERM");
    assert_eq!(result("ptrace attach"), "EPERM");
}

fn pool(command: WorkerCommand, confinement: Confinement) -> Arc<WorkerPool> {
    WorkerPool::new(PoolConfig {
        command,
        warm: 0,
        memory_limit_bytes: 64 << 20,
        instructions: 10_000_000,
        globals: None,
        confinement,
        max_idle: codemode_vm::pool::DEFAULT_MAX_IDLE,
        idle_ttl: codemode_vm::pool::DEFAULT_IDLE_TTL,
        require_fast_paths: false,
        admission: None,
    })
}

fn start(source: &str) -> HostMessage {
    HostMessage::Start(Box::new(Start {
        source: source.into(),
        globals: None,
        globals_key: None,
        limits: CellLimits::default(),
        journal: Journal::default(),
        skip_output: 0,
    }))
}

/// A worker started with `CODEMODE_WORKER_PROBE=<probe>` in its environment.
fn probed(probe: &str) -> WorkerCommand {
    WorkerCommand {
        program: "/usr/bin/env".into(),
        args: vec![format!("CODEMODE_WORKER_PROBE={probe}"), WORKER.into()],
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn a_confined_worker_reports_first_then_runs_a_cell() {
    runtime().block_on(async {
        let pool = pool(WorkerCommand { program: WORKER.into(), args: Vec::new() }, Confinement::default());
        let mut worker = pool.checkout().unwrap();
        worker.send(&start("return [3, 1, 2].sort().join(',')")).await.unwrap();
        let message = worker.recv().await.unwrap();
        let WorkerMessage::Quiescent { outcome: Some(GuestOutcome::Returned { value }), .. } = message else {
            panic!("unexpected {message:?}")
        };
        assert_eq!(value, "1,2,3");
        let report = worker.confinement().expect("the first message reports the confinement");
        assert_eq!(report.mode, Confinement::Required);
        assert!(report.fully_applied(), "{report:?}");
        let steps: Vec<Step> = report.steps.iter().map(|s| s.step).collect();
        assert_eq!(steps, [Step::AddressSpace, Step::NoNewPrivs, Step::Landlock, Step::Seccomp]);
        worker.kill().await;
    });
}

#[test]
fn the_check_reads_the_hello_of_the_next_idle_worker_which_then_runs_the_cell() {
    runtime().block_on(async {
        let warm = WorkerPool::new(PoolConfig {
            warm: 1,
            ..pool(WorkerCommand { program: WORKER.into(), args: Vec::new() }, Confinement::default()).config().clone()
        });
        warm.fill().unwrap();
        let hello = warm.check_idle().expect("the idle worker's hello is accepted");
        assert_eq!(hello.protocol, PROTOCOL_VERSION);
        assert_eq!(warm.idle_count(), 1, "the worker went back to the pool");
        let mut worker = warm.checkout().unwrap();
        assert_eq!(worker.confinement(), Some(&hello.confinement), "its hello was read once, by the check");
        worker.send(&start("return 6 * 7")).await.unwrap();
        let message = worker.recv().await.unwrap();
        let WorkerMessage::Quiescent { outcome: Some(GuestOutcome::Returned { value }), .. } = message else {
            panic!("unexpected {message:?}")
        };
        assert_eq!(value, 42);
        worker.kill().await;

        // A worker that fails its confinement gives no hello: the check stops it and leaves the pool empty.
        let failing = WorkerPool::new(PoolConfig {
            warm: 1,
            ..pool(probed("fail-landlock"), Confinement::Required).config().clone()
        });
        failing.fill().unwrap();
        assert_eq!(failing.check_idle(), None);
        assert_eq!(failing.idle_count(), 0);
        assert!(matches!(failing.check(), Err(PoolError::Confinement(_))), "the check's own worker says why");
    });
}

#[test]
fn a_required_step_that_fails_ends_the_worker_naming_the_step_and_the_opt_out() {
    runtime().block_on(async {
        let pool = pool(probed("fail-landlock"), Confinement::Required);
        let mut worker = pool.checkout().unwrap();
        // The worker may be gone before the write (the pipe broke) or after it (its death is read).
        let message = match worker.send(&start("return 1")).await {
            Err(PoolError::Confinement(what)) => PoolError::Confinement(what).to_string(),
            Err(other) => panic!("unexpected send error {other}"),
            Ok(()) => match worker.recv().await {
                Err(death @ Death::Confinement(_)) => death.message(),
                other => panic!("unexpected {other:?}"),
            },
        };
        assert!(message.contains("confinement step landlock failed: failure injected"), "{message}");
        assert!(message.contains("best_effort"), "{message}");
    });
}

#[test]
fn best_effort_reports_a_failed_step_and_still_runs_the_cell() {
    runtime().block_on(async {
        let pool = pool(probed("fail-seccomp"), Confinement::BestEffort);
        let mut worker = pool.checkout().unwrap();
        worker.send(&start("return 40 + 2")).await.unwrap();
        let message = worker.recv().await.unwrap();
        assert!(matches!(message, WorkerMessage::Quiescent { outcome: Some(GuestOutcome::Returned { .. }), .. }));
        let report = worker.confinement().unwrap();
        assert_eq!(report.mode, Confinement::BestEffort);
        let missing: Vec<_> = report.missing().map(|s| (s.step, s.outcome.clone())).collect();
        assert_eq!(
            missing,
            [(Step::Seccomp, StepOutcome::Failed { error: "failure injected by the confinement probe".into() })]
        );
        worker.kill().await;
    });
}

#[test]
fn off_applies_only_the_address_space_limit() {
    runtime().block_on(async {
        let pool = pool(WorkerCommand { program: WORKER.into(), args: Vec::new() }, Confinement::Off);
        let mut worker = pool.checkout().unwrap();
        worker.send(&start("return 1")).await.unwrap();
        worker.recv().await.unwrap();
        let report = worker.confinement().unwrap();
        let outcomes: Vec<(Step, bool)> =
            report.steps.iter().map(|s| (s.step, matches!(s.outcome, StepOutcome::Applied { .. }))).collect();
        assert_eq!(
            outcomes,
            [(Step::AddressSpace, true), (Step::NoNewPrivs, false), (Step::Landlock, false), (Step::Seccomp, false)]
        );
        worker.kill().await;
    });
}
