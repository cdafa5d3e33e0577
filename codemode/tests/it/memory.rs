//! The host's memory under hostile programs, measured on the host process (not its workers), and the budgets that
//! hold it: output counted as it arrives, nested results bounded by `maxOutputBytes`, the journal capped per run
//! and per engine, and the final value encoded once.
//!
//! A memory test re-runs this test binary as a child that runs one flood in-process and reports its own peak
//! resident set growth (`VmHWM` after the flood minus `VmRSS` before, the peak reset through `clear_refs`), so no
//! other test shares the process it measures; it counts nothing by time.

use std::sync::atomic::Ordering;

use serde_json::json;

use codemode::{CodeMode, Limits};

use crate::support::{TestHost, engine_with, exec, failure, value};

const MIB: u64 = 1024 * 1024;
/// The environment variable that makes [`flood_child`] run a flood instead of returning.
const FLOOD_ENV: &str = "CODEMODE_TEST_FLOOD";

/// One of `/proc/self/status`'s `kB` fields, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status is readable");
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in status"));
    let kb: u64 =
        line.trim_start_matches(field).trim_start_matches(':').trim().trim_end_matches(" kB").parse().unwrap();
    kb * 1024
}

/// The floods: a program, and its timeout.
fn flood(name: &str) -> (&'static str, u64) {
    match name {
        "output" => ("const s = 'x'.repeat(8e6); for (;;) text(s);", 8_000),
        "replies" => ("const a = 'x'.repeat(900 * 1024); for (;;) { try { await echo({ a }); } catch (e) {} }", 4_000),
        "journal" => (
            "const a = 'x'.repeat(60000); \
             for (;;) await Promise.all(Array.from({ length: 16 }, () => echo({ a }).catch(() => 0)));",
            8_000,
        ),
        other => panic!("no flood {other}"),
    }
}

/// Runs in the child only: one flood, then the growth of this process's peak resident set, on stdout.
#[test]
fn flood_child() {
    let Ok(name) = std::env::var(FLOOD_ENV) else { return };
    let (code, timeout_ms) = flood(&name);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let limits = Limits { timeout_ms, ..Limits::default() };
        let (engine, _) = engine_with(limits, false);
        // Warm up the paths the flood takes, so that what is measured is what the flood holds: output, a nested
        // call, and a failed result, whose list of writes is where the redactor first runs (its caches).
        exec(&engine, "text('warm'); try { await echo({ a: 'x'.repeat(1e5) }) } catch (e) {} throw new Error('warm')")
            .await;
        std::fs::write("/proc/self/clear_refs", "5").expect("the peak resident set can be reset");
        let before = status_bytes("VmRSS");
        let result = exec(&engine, code).await;
        let peak = status_bytes("VmHWM");
        let summary = serde_json::to_string(&json!({
            "status": result.status(),
            "code": result.as_failed().map(|f| f.code.as_str()),
            "error": result.as_failed().map(|f| f.error.chars().take(160).collect::<String>()),
            "outputItems": result.output().len(),
        }))
        .unwrap();
        println!("FLOOD-GROWTH {} {summary}", peak.saturating_sub(before));
        drop(engine);
    });
}

/// The host's peak growth under flood `name`, measured in a child process.
fn host_growth(name: &str) -> u64 {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", "memory::flood_child", "--nocapture", "--test-threads", "1"])
        .env(FLOOD_ENV, name)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find_map(|l| l.split_once("FLOOD-GROWTH ").map(|(_, rest)| rest)).unwrap_or_else(|| {
        panic!("the flood child reported nothing:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr))
    });
    eprintln!("flood {name}: {line}");
    line.split(' ').next().unwrap().parse().unwrap()
}

/// SECURITY.md's bound for one run's floods: the output budget, one message in flight (read, parsed) and the
/// journal's caps, with room for the allocator; far below what the floods reached before (hundreds of MiB).
const RUN_BOUND: u64 = 64 * MIB;

#[test]
fn an_output_flood_keeps_the_host_bounded() {
    let growth = host_growth("output");
    assert!(growth < RUN_BOUND, "the host grew by {} MiB under an output flood", growth / MIB);
}

#[test]
fn a_tool_reply_flood_keeps_the_host_bounded() {
    let growth = host_growth("replies");
    assert!(growth < RUN_BOUND, "the host grew by {} MiB under a tool-reply flood", growth / MIB);
}

#[test]
fn journal_growth_keeps_the_host_bounded() {
    let growth = host_growth("journal");
    assert!(growth < RUN_BOUND, "the host grew by {} MiB under journal growth", growth / MIB);
}

fn small_engine(limits: Limits, host_journal_bytes: Option<u64>) -> (CodeMode, std::sync::Arc<TestHost>) {
    let host = std::sync::Arc::new(TestHost::default());
    let mut builder = CodeMode::builder().limits(limits).tools(crate::support::tools()).host(host.clone());
    if let Some(bytes) = host_journal_bytes {
        builder = builder.host_journal_bytes(bytes);
    }
    (builder.warm_workers(1).build().expect("the engine builds"), host)
}

#[tokio::test]
async fn a_run_past_its_journal_cap_fails_at_once_with_snapshot_limit_exceeded() {
    let limits = Limits { timeout_ms: 5_000, max_snapshot_bytes: 4096, ..Limits::default() };
    let (engine, host) = small_engine(limits, None);
    let r = exec(&engine, "for (;;) { try { await fail({}) } catch (e) {} }").await;
    let (code, error) = failure(&r);
    assert_eq!(code, "snapshot_limit_exceeded", "{error}");
    assert!(error.contains("maxSnapshotBytes (4096)"), "{error}");
    // Each failed call journals about 150 bytes: the run stops after a few dozen, not at its deadline.
    let calls = host.calls.load(Ordering::SeqCst);
    assert!(calls < 60, "{calls} calls before the run failed");
}

#[tokio::test]
async fn the_engine_wide_journal_cap_is_shared_by_its_runs() {
    let limits = Limits { timeout_ms: 5_000, ..Limits::default() };
    let (engine, host) = small_engine(limits, Some(8192));
    let r = exec(&engine, "for (;;) { try { await fail({}) } catch (e) {} }").await;
    let (code, error) = failure(&r);
    assert_eq!(code, "snapshot_limit_exceeded", "{error}");
    assert!(error.contains("the host's shared cap (8192)"), "{error}");
    assert!(host.calls.load(Ordering::SeqCst) < 100);
    // The failed run gave its bytes back: the next run has the whole cap.
    let r =
        exec(&engine, "let n = 0; for (let i = 0; i < 20; i++) { try { await fail({}) } catch (e) { n++ } } return n")
            .await;
    assert_eq!(value(&r), json!(20));
}

#[tokio::test]
async fn the_final_value_and_a_thrown_error_are_encoded_once() {
    let (engine, host) = engine_with(Limits { timeout_ms: 3_000, ..Limits::default() }, false);
    let r = exec(&engine, "return { get x() { echo({}); return 1 } }").await;
    assert_eq!(value(&r), json!({ "x": 1 }));
    assert_eq!(host.calls.swap(0, Ordering::SeqCst), 1, "the getter's call ran once");
    let r = exec(&engine, "let n = 0; echo({}); return { get x() { return ++n } }").await;
    assert_eq!(value(&r), json!({ "x": 1 }), "as in Node");
    host.calls.store(0, Ordering::SeqCst);
    let r = exec(&engine, "let n = 0; throw { name: 'Error', get message() { echo({}); return 'boom ' + ++n } }").await;
    let (_, error) = failure(&r);
    assert!(error.contains("boom 1"), "{error}");
    assert_eq!(host.calls.load(Ordering::SeqCst), 1, "the error's getter ran once");
    let r = exec(&engine, "return { get x() { setTimeout(() => {}, 1); store('k', 1); return 1 } }").await;
    assert_eq!(value(&r), json!({ "x": 1 }));
}

#[tokio::test]
async fn the_marker_counts_every_dropped_byte() {
    let (engine, _) = engine_with(Limits { timeout_ms: 5_000, ..Limits::default() }, false);
    // 3,000 lines of 40 characters; each costs 65 bytes as an output item (`{"type":"text","text":"…"}`).
    let r = exec(&engine, "for (let i = 0; i < 3000; i++) text(String(i).padStart(40, '.')); return 'done'").await;
    let items = r.output();
    let codemode::OutputItem::Json { value: marker } = items.last().expect("output") else { panic!("a marker") };
    let kept = (items.len() - 1) as u64;
    let prefix = marker["prefix"].as_str().unwrap().len() as u64;
    assert_eq!(marker["omittedBytes"].as_u64().unwrap(), (3000 - kept) * 65 - prefix, "{marker}");
}

#[tokio::test]
async fn a_nested_result_over_max_output_bytes_is_a_truncation_marker() {
    let limits = Limits { timeout_ms: 5_000, max_output_bytes: 4096, ..Limits::default() };
    let (engine, _) = engine_with(limits, false);
    let r = exec(
        &engine,
        "const r = await echo({ s: 'y'.repeat(10000) }); return [r.truncated, r.omittedBytes, r.guidance]",
    )
    .await;
    let v = value(&r);
    assert_eq!(v[0], json!(true), "{v}");
    assert!(v[1].as_u64().unwrap() > 10_008 - 4096, "{v}");
    assert_eq!(v[2], json!("Output truncated; rerun with narrower args."));
    let r = exec(&engine, "const r = await echo({ s: 'y'.repeat(1000) }); return r.s.length").await;
    assert_eq!(value(&r), json!(1000));
}

#[tokio::test]
async fn replies_past_the_inbox_fail_the_call_and_the_run_goes_on() {
    // The inbox is min(memoryLimitBytes, maxSnapshotBytes): 64 KiB here; replies of 10,008 bytes, 6 fit.
    let limits = Limits { timeout_ms: 5_000, max_snapshot_bytes: 64 * 1024, ..Limits::default() };
    let (engine, _) = engine_with(limits, false);
    let r = exec(
        &engine,
        "let ok = 0; let error = ''; \
         for (let i = 0; i < 10; i++) { try { await echo({ s: 'y'.repeat(10000) }); ok++ } catch (e) { error = e.message } } \
         return [ok, error]",
    )
    .await;
    let v = value(&r);
    assert_eq!(v[0], json!(6), "{v}");
    assert!(
        v[1].as_str().unwrap().starts_with("Code Mode program-data budget exceeded: this reply is 10008 bytes"),
        "{v}"
    );
}

#[tokio::test]
async fn a_value_encoded_once_replays_to_the_same_value() {
    // The getter's call is still running when the run parks; the resume replays the cell in a fresh worker, which
    // encodes the value at the same point, makes the same request and gets its settlement.
    let (engine, host) = engine_with(Limits { timeout_ms: 1_000, ..Limits::default() }, true);
    let r = exec(&engine, "let n = 0; return { get x() { slow({ ms: 1200 }); return ++n } }").await;
    let codemode::CodeModeResult::Waiting(waiting) = &r else { panic!("expected waiting, got {r:?}") };
    let r = crate::support::wait(&engine, &waiting.run_id).await;
    let r = match &r {
        codemode::CodeModeResult::Waiting(w) => crate::support::wait(&engine, &w.run_id).await,
        _ => r,
    };
    assert_eq!(value(&r), json!({ "x": 1 }));
    assert_eq!(host.calls.load(Ordering::SeqCst), 1, "the getter's call ran once, and replay did not repeat it");
}
