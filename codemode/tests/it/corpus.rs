//! The adversarial corpus: every program in `tests/corpus/*.js` runs, one at a time, through one real `CodeMode`; the
//! host must survive, the result must be a well-formed `CodeModeResult` with the expected status and code, arrive
//! within `timeoutMs` plus the 2 s grace, and the next cell must work. Header lines (leading `//`): `expect:
//! completed|waiting|failed:<errorKind>`, then any of `value:`, `value-contains:`, `output-contains:`, `error-contains:`,
//! and `known-bug: <why>` (safety must hold; the expectation may fail, some bugs depend on load; listed each run).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode::{CodeMode, CodeModeResult, RunScope};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::harness::{self, Host, TIMEOUT_MS};

/// The reference's watchdog grace: a result must arrive within `timeoutMs` plus this.
const GRACE: Duration = Duration::from_millis(2000);

#[derive(Debug, Default)]
struct Expect {
    status: String,
    code: Option<String>,
    value: Option<Value>,
    value_contains: Vec<String>,
    output_contains: Vec<String>,
    error_contains: Vec<String>,
    known_bug: Option<String>,
}

struct Fixture {
    name: String,
    source: String,
    expect: Expect,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn parse(name: &str, source: &str) -> Result<Expect, String> {
    let mut expect = Expect::default();
    for line in source.lines() {
        let Some(comment) = line.trim().strip_prefix("//") else { break };
        let Some((key, rest)) = comment.trim().split_once(':') else { continue };
        let rest = rest.trim();
        match key.trim() {
            "expect" => match rest.split_once(':') {
                Some(("failed", code)) => {
                    expect.status = "failed".into();
                    expect.code = Some(code.trim().to_owned());
                }
                _ => expect.status = rest.to_owned(),
            },
            "value" => {
                expect.value = Some(serde_json::from_str(rest).map_err(|e| format!("{name}: bad value line: {e}"))?)
            }
            "value-contains" => expect.value_contains.push(rest.to_owned()),
            "output-contains" => expect.output_contains.push(rest.to_owned()),
            "error-contains" => expect.error_contains.push(rest.to_owned()),
            "known-bug" => expect.known_bug = Some(rest.to_owned()),
            _ => {}
        }
    }
    if !["completed", "waiting", "failed"].contains(&expect.status.as_str()) {
        return Err(format!("{name}: missing or bad `// expect:` line"));
    }
    Ok(expect)
}

fn load() -> Vec<Fixture> {
    let filter = std::env::var("CORPUS_FILTER").unwrap_or_default();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("tests/corpus exists")
        .map(|e| e.expect("readable corpus entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "js"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_stem().expect("a file name").to_string_lossy().into_owned();
            let source = std::fs::read_to_string(&path).expect("fixture is UTF-8");
            let expect = parse(&name, &source).unwrap_or_else(|e| panic!("{e}"));
            Fixture { name, source, expect }
        })
        .filter(|f| filter.is_empty() || f.name.contains(&filter))
        .collect()
}

/// Text of the output items, with JSON items rendered as JSON.
fn output_text(result: &CodeModeResult) -> String {
    let mut text = String::new();
    for item in result.output() {
        match item {
            codemode::OutputItem::Text { text: t } => text.push_str(t),
            codemode::OutputItem::Json { value } => text.push_str(&value.to_string()),
            codemode::OutputItem::Attachment { block } => text.push_str(&block.to_string()),
        }
        text.push('\n');
    }
    text
}

/// The safety property every fixture must keep: a well-formed result, in time.
fn check_safety(result: &CodeModeResult, elapsed: Duration) -> Vec<String> {
    let mut problems = Vec::new();
    // Well-formed: it serializes, and what it serializes to reads back as the same result.
    // The activity is in the JSON only when the caller asked for it (`activity_in_result`).
    let mut shown = result.clone();
    if result.activity().is_some_and(|a| !a.in_json) {
        shown.set_activity(None);
    }
    match serde_json::to_string(result).map(|text| serde_json::from_str::<CodeModeResult>(&text)) {
        Ok(Ok(back)) if back == shown => {}
        other => problems.push(format!("result does not round-trip through JSON: {other:?}")),
    }
    if elapsed > Duration::from_millis(TIMEOUT_MS) + GRACE {
        problems.push(format!("took {elapsed:?}, over timeoutMs {TIMEOUT_MS} ms + grace"));
    }
    problems
}

/// The fixture's own expectation: status, code, value, output and error text.
fn check_expectation(fixture: &Fixture, result: &CodeModeResult) -> Vec<String> {
    let mut problems = Vec::new();
    let expect = &fixture.expect;
    if result.status() != expect.status {
        problems.push(format!("status {} (expected {})", result.status(), expect.status));
    }
    match result {
        CodeModeResult::Failed(failed) => {
            // The expectation names the error kind, which for a code's plain case is the code itself.
            let kind = failed.error_kind.as_str();
            if expect.code.as_deref().is_some_and(|c| c != kind) {
                problems.push(format!("errorKind {kind} (expected {})", expect.code.as_deref().unwrap_or("")));
            }
            if failed.error_kind.code() != failed.code {
                problems.push(format!("errorKind {kind} reported under code {}", failed.code.as_str()));
            }
            for needle in &expect.error_contains {
                if !failed.error.contains(needle.as_str()) {
                    problems.push(format!("error does not contain {needle:?}"));
                }
            }
        }
        CodeModeResult::Completed(completed) => {
            if let Some(value) = expect.value.as_ref().filter(|v| **v != completed.value) {
                problems.push(format!("value {} (expected {value})", completed.value));
            }
            let text = completed.value.to_string();
            for needle in &expect.value_contains {
                if !text.contains(needle.as_str()) {
                    problems.push(format!("value does not contain {needle:?}"));
                }
            }
        }
        CodeModeResult::Waiting(_) => {}
    }
    let output = output_text(result);
    for needle in &expect.output_contains {
        if !output.contains(needle.as_str()) {
            problems.push(format!("output does not contain {needle:?}"));
        }
    }
    problems
}

fn summary(result: &CodeModeResult) -> String {
    let mut text = serde_json::to_value(result).unwrap_or_default();
    if let Some(map) = text.as_object_mut() {
        map.remove("telemetry");
    }
    let mut text = text.to_string();
    if text.len() > 700 {
        let cut = (0..=700).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    text
}

enum Verdict {
    Pass,
    Fail(String),
    KnownBug(String),
}

async fn run_one(code_mode: &CodeMode, fixture: &Fixture) -> Verdict {
    let started = Instant::now();
    let result = code_mode.exec(json!({ "title": fixture.name, "code": fixture.source }), RunScope::default()).await;
    let elapsed = started.elapsed();
    let mut problems = check_safety(&result, elapsed);
    let unmet = check_expectation(fixture, &result);
    if let CodeModeResult::Waiting(waiting) = &result {
        code_mode.abort(&waiting.run_id).await;
    }
    let next = code_mode.exec(json!({ "title": "next cell", "code": "return 1+1" }), RunScope::default()).await;
    match &next {
        CodeModeResult::Completed(c) if c.value == json!(2) => {}
        other => problems.push(format!("the next cell did not succeed: {}", summary(other))),
    }
    let report = |problems: &[String]| {
        format!("{} ({elapsed:.2?}): {}\n    result: {}", fixture.name, problems.join("; "), summary(&result))
    };
    match &fixture.expect.known_bug {
        None => problems.extend(unmet),
        Some(why) if unmet.is_empty() && problems.is_empty() => {
            return Verdict::KnownBug(format!("{}: did not reproduce this run [{why}]", fixture.name));
        }
        Some(why) if problems.is_empty() => return Verdict::KnownBug(format!("{} [{why}]", report(&unmet))),
        Some(_) => problems.extend(unmet),
    }
    if problems.is_empty() { Verdict::Pass } else { Verdict::Fail(report(&problems)) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_keeps_the_host_safe() {
    let fixtures = load();
    if std::env::var("CORPUS_FILTER").is_err() {
        assert!(fixtures.len() >= 150, "the corpus holds {} programs; it must hold at least 150", fixtures.len());
    }
    let host = Arc::new(Host::default());
    let code_mode = harness::code_mode(host.clone());
    let started = Instant::now();
    let verdicts: Vec<Verdict> =
        futures::stream::iter(&fixtures).map(|fixture| run_one(&code_mode, fixture)).buffered(1).collect().await;
    let mut failures = Vec::new();
    let mut known = Vec::new();
    for verdict in verdicts {
        match verdict {
            Verdict::Pass => {}
            Verdict::Fail(text) => failures.push(text),
            Verdict::KnownBug(text) => known.push(text),
        }
    }
    let forbidden = host.forbidden_calls.lock().expect("host lock").clone();
    eprintln!("corpus: {} fixtures in {:.1?}", fixtures.len(), started.elapsed());
    for text in &known {
        eprintln!("known bug (safety held): {text}");
    }
    assert!(forbidden.is_empty(), "forbidden tools reached the host: {forbidden:?}");
    assert!(failures.is_empty(), "{} of {} fixtures failed:\n{}", failures.len(), fixtures.len(), failures.join("\n"));
}

/// Each cell starts from fresh globals: what one cell writes to `globalThis`, to prototypes or to the web globals
/// is gone in the next, whichever worker serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_never_share_globals_or_prototypes() {
    let code_mode = harness::code_mode(Arc::new(Host::default()));
    let poison = r#"
        globalThis.leaked = 1;
        Object.prototype.polluted = 'yes';
        Array.prototype.map = () => 'poisoned';
        TextEncoder.prototype.encode = () => 'poisoned';
        JSON.stringify = () => 'poisoned';
        Math.random = () => 4;
        console.log = () => {};
        return 'poisoned';
    "#;
    let probe = r#"
        return [typeof leaked, ({}).polluted, [1].map((x) => x + 1), Array.from(new TextEncoder().encode('a')),
                JSON.stringify({ a: 1 }), Math.random() === 4, typeof process, typeof require, typeof fetch];
    "#;
    let clean = json!(["undefined", null, [2], [97], "{\"a\":1}", false, "undefined", "undefined", "undefined"]);
    for round in 0..4 {
        let poisoned = code_mode.exec(json!({ "title": "poison", "code": poison }), RunScope::default()).await;
        assert_eq!(poisoned.status(), "completed", "round {round}: {poisoned:?}");
        let probed = code_mode.exec(json!({ "title": "probe", "code": probe }), RunScope::default()).await;
        match probed {
            CodeModeResult::Completed(c) => assert_eq!(c.value, clean, "round {round}"),
            other => panic!("round {round}: {other:?}"),
        }
    }
}
