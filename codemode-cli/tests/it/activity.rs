//! `codemode run` and `codemode wait` with `--activity`: the result prints the program's nested calls under
//! `activity` (and not without the flag); a `wait` in a fresh process resumes by replay and marks the replayed call;
//! the `--state` folder holds owner-only files, sealed when `CODEMODE_STATE_KEY` is set, and a `wait` without the
//! key fails with a message naming it.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const KEY: &str = "ops-1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Runs the binary with `args` in `root`, with the state key `key` (or none); returns its exit code and result.
fn codemode(root: &Path, key: Option<&str>, args: &[&str]) -> (i32, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_codemode"));
    cmd.args(args).arg("--root").arg(root).env_remove("CODEMODE_STATE_KEY").env_remove("CODEMODE_STATE_KEY_FILE");
    if let Some(key) = key {
        cmd.env("CODEMODE_STATE_KEY", key);
    }
    let out = cmd.output().expect("the codemode binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {stdout:?}, stderr {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), result)
}

const PROGRAM: &str = "const note = await read({ path: 'note.txt' }); \
     const apiKey = 'sk-proj-abcdefghijklmnopqrstuvwxyz0123'; \
     await yield_control('look'); \
     const again = await read({ path: 'note.txt' }); return [note.content.trim(), again.content.trim(), apiKey.length];";

#[test]
fn run_and_wait_print_activity_and_keep_sealed_owner_only_state() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("note.txt"), "hello\n").unwrap();
    let state = dir.path().join("state");
    let state_arg = state.to_str().unwrap();

    let (code, first) = codemode(&root, Some(KEY), &["run", "--code", PROGRAM, "--state", state_arg, "--activity"]);
    assert_eq!((code, first["status"].as_str()), (0, Some("waiting")), "{first}");
    let activity = &first["activity"];
    assert_eq!(activity["cell"], 1, "{first}");
    assert_eq!(activity["calls"].as_array().map(Vec::len), Some(1), "{first}");
    let call = &activity["calls"][0];
    assert_eq!((call["path"].as_str(), call["status"].as_str()), (Some("read"), Some("ok")), "{call}");
    assert_eq!(call["effect"], "completed");
    assert_eq!(call["callId"], "bridge:callValue:1");
    assert!(call["result"].as_str().unwrap().contains("hello"), "{call}");
    let source = activity["source"].as_str().unwrap();
    assert!(source.contains("const apiKey = '[REDACTED]'") && !source.contains("sk-proj-"), "{source}");

    // The state folder: owner-only, and the checkpoint sealed.
    let run_id = first["runId"].as_str().unwrap().to_owned();
    let file = state.join("runs").join(format!("{run_id}.json"));
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(&state).unwrap().permissions().mode() & 0o777, 0o700);
    let raw = std::fs::read(&file).unwrap();
    assert!(raw.starts_with(b"CMSEAL1\n"), "the checkpoint is sealed");
    assert!(!String::from_utf8_lossy(&raw).contains("note.txt"), "its source is not readable at rest");

    // Without the key, the run cannot be resumed, and the message says which key it needs; the run stays parked.
    let (code, refused) = codemode(&root, None, &["wait", &run_id, "--state", state_arg, "--activity"]);
    assert_eq!(code, 1, "{refused}");
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("encrypted with state key \"ops-1\"") && error.contains("CODEMODE_STATE_KEY"), "{error}");
    assert!(refused.get("activity").is_none(), "no run ran: {refused}");

    // With it, a fresh process resumes by replay: the first read is marked replayed, the second ran live.
    let (code, second) = codemode(&root, Some(KEY), &["wait", &run_id, "--state", state_arg, "--activity"]);
    assert_eq!(code, 0, "{second}");
    assert_eq!(second["value"], serde_json::json!(["hello", "hello", 38]), "{second}");
    let calls = second["activity"]["calls"].as_array().unwrap();
    assert_eq!(second["activity"]["cell"], 2, "{second}");
    assert_eq!(calls.len(), 2, "{second}");
    assert_eq!((calls[0]["callId"].as_str(), calls[0]["replayed"].as_bool()), (Some("bridge:callValue:1"), Some(true)));
    assert_eq!(calls[0]["cell"], 1);
    assert_eq!((calls[1]["callId"].as_str(), calls[1].get("replayed")), (Some("bridge:callValue:3"), None));
    assert_eq!(calls[1]["cell"], 2);
}

#[test]
fn without_the_flag_the_result_has_no_activity() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(dir.path().join("note.txt"), "hi").unwrap();
    let (code, result) =
        codemode(dir.path(), None, &["run", "--code", "return (await read({ path: 'note.txt' })).content"]);
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["value"], "hi");
    assert!(result.get("activity").is_none(), "{result}");
}
