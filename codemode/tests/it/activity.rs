//! Activity: each result carries the run's nested calls (ids, tool, path, server, timing, status, effect, redacted
//! previews), the JSON carries it only on request, a hook receives starts, progress and finishes as they happen,
//! a resume by replay marks the calls it delivers again without duplicating the run's record, a resume in another
//! process finishes the calls the parking process had in flight as interrupted, and no registered secret or token
//! shape reaches any of it (a property over generated programs).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use codemode::{
    Activity, ActivityEvent, CallEffect, CallStatus, CodeMode, CodeModeResult, ExecOptions, InputKind, Limits,
    Redactor, RunScope, ToolDefinition, ToolSource,
};
use codemode::{CallContext, ToolError, ToolHost};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A registered secret the host knows (say, an upstream password).
const SECRET: &str = "hunter2-upstream-pass";
/// A token shape the redactor knows without configuration.
const TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

/// Tools: `echo` returns its arguments, `leak` returns a text holding the secret, `fail` fails with a message
/// holding the token, `progress` reports progress twice before it answers, `later` never answers before its
/// `release` is set (for calls in flight at a park), and the MCP tool `docs.search` answers its query.
#[derive(Default)]
struct Host {
    release: tokio::sync::Notify,
}

#[async_trait]
impl ToolHost for Host {
    async fn call_tool(&self, tool: &str, args: Value, cx: CallContext) -> Result<Value, ToolError> {
        match tool {
            "echo" => Ok(args),
            "leak" => Ok(json!({ "text": format!("the password is {SECRET}"), "n": args["n"] })),
            "fail" => Err(ToolError::new(format!("upstream refused token {TOKEN}"))),
            "progress" => {
                cx.progress.report(1.0, Some(2.0), Some(format!("half way, key {TOKEN}")));
                cx.progress.report(2.0, Some(2.0), None);
                Ok(json!("done"))
            }
            "later" => {
                self.release.notified().await;
                Ok(json!("late"))
            }
            "search" => Ok(json!({ "hits": [args["q"]] })),
            other => Err(ToolError::new(format!("no tool {other}"))),
        }
    }
}

fn tools() -> Vec<ToolDefinition> {
    let object = json!({ "type": "object" });
    let tool = |name: &str| ToolDefinition::new(name, format!("test tool {name}"), object.clone()).replay_safe(true);
    vec![
        tool("echo"),
        tool("leak"),
        tool("fail"),
        tool("progress"),
        tool("later"),
        tool("search").source(ToolSource::Mcp).server("docs"),
        ToolDefinition::new(
            "strict",
            "takes an integer n",
            json!({ "type": "object", "properties": { "n": { "type": "integer" } }, "required": ["n"] }),
        ),
    ]
}

struct Setup {
    replay: bool,
    state: Option<std::path::PathBuf>,
    events: Option<Arc<Mutex<Vec<ActivityEvent>>>>,
}

fn engine(setup: Setup) -> (CodeMode, Arc<Host>) {
    let host = Arc::new(Host::default());
    let redactor = Redactor::new().secret(SECRET).pattern(r"acct-\d{6}").expect("a valid pattern");
    let mut builder = CodeMode::builder()
        .limits(Limits { timeout_ms: 3_000, ..Limits::default() })
        .tools(tools())
        .host(host.clone())
        .warm_workers(1)
        .replay_on_resume(setup.replay)
        .state_dir(setup.state)
        .redactor(redactor)
        .keep_activity(true);
    if let Some(events) = setup.events {
        builder = builder.on_activity(move |event| events.lock().unwrap().push(event.clone()));
    }
    (builder.build().expect("the engine builds"), host)
}

async fn exec(engine: &CodeMode, code: &str, options: &ExecOptions) -> CodeModeResult {
    engine.exec_with(json!({ "title": "activity", "code": code }), RunScope::default(), options).await
}

async fn wait(engine: &CodeMode, run_id: &str) -> CodeModeResult {
    engine.wait(json!({ "runId": run_id }), RunScope::default()).await
}

fn run_id(result: &CodeModeResult) -> String {
    match result {
        CodeModeResult::Waiting(w) => w.run_id.clone(),
        other => panic!("expected waiting, got {}", serde_json::to_string_pretty(other).unwrap()),
    }
}

fn activity(result: &CodeModeResult) -> &Activity {
    result.activity().unwrap_or_else(|| panic!("no activity on {result:?}"))
}

#[tokio::test]
async fn an_engine_that_keeps_no_activity_records_only_the_cells_someone_reads() {
    let host = Arc::new(Host::default());
    let engine = CodeMode::builder()
        .limits(Limits { timeout_ms: 3_000, ..Limits::default() })
        .tools(tools())
        .host(host)
        .warm_workers(1)
        .build()
        .expect("the engine builds");
    let code = "await echo({ a: 1 }); return await echo({ a: 2 })";
    let unread = exec(&engine, code, &ExecOptions::default()).await;
    assert_eq!(crate::support::value(&unread), json!({ "a": 2 }));
    assert!(unread.activity().is_none(), "nobody asked: nothing recorded: {unread:?}");
    let in_json = exec(&engine, code, &ExecOptions::default().activity_in_result(true)).await;
    assert_eq!(activity(&in_json).calls.len(), 2);
    let seen = Arc::new(Mutex::new(0usize));
    let counted = seen.clone();
    let hooked = exec(&engine, code, &ExecOptions::default().on_activity(move |_| *counted.lock().unwrap() += 1)).await;
    assert_eq!((activity(&hooked).calls.len(), *seen.lock().unwrap()), (2, 5), "the cell, two starts and two finishes");
}

#[tokio::test]
async fn a_result_carries_its_calls_redacted_and_the_json_only_on_request() {
    let (engine, _) = engine(Setup { replay: false, state: None, events: None });
    let code = format!(
        "const apiKey = \"{TOKEN}\";\nconst a = await echo({{ apiKey, note: 'acct-123456' }});\n\
         const b = await leak({{ n: 1 }});\nlet c; try {{ await fail({{}}); }} catch (e) {{ c = e.code; }}\n\
         const d = await MCP.docs.search({{ q: 'x' }});\nawait catalog.search('echo');\nreturn [b.n, c, d.hits[0]];"
    );
    let result = exec(&engine, &code, &ExecOptions::default()).await;
    assert_eq!(crate::support::value(&result), json!([1, "tool_error", "x"]));
    let json = serde_json::to_value(&result).unwrap();
    assert!(json.get("activity").is_none(), "not in the model's payload by default: {json}");

    let activity = activity(&result);
    assert_eq!(activity.cell, 1);
    assert!(activity.run_id.starts_with("cm_"));
    let calls = &activity.calls;
    assert_eq!(calls.len(), 4, "tool calls only, not catalog.search: {calls:#?}");
    let paths: Vec<&str> = calls.iter().map(|c| c.start.path.as_str()).collect();
    assert_eq!(paths, ["echo", "leak", "fail", "MCP.docs.search"]);
    assert_eq!(calls[3].start.tool, "search");
    assert_eq!(calls[3].start.server.as_deref(), Some("docs"));
    for (n, call) in calls.iter().enumerate() {
        assert_eq!(call.start.call_id, format!("bridge:{}:{}", if n == 3 { "namespace" } else { "callValue" }, n + 1));
        assert_eq!(call.start.run_id, activity.run_id);
        assert!(!call.start.replayed);
    }
    assert_eq!((calls[0].status, calls[0].effect), (CallStatus::Ok, CallEffect::Completed));
    assert_eq!(calls[0].start.args, "{\"apiKey\":\"[REDACTED]\",\"note\":\"[REDACTED]\"}");
    assert_eq!(calls[1].result.as_deref(), Some("{\"text\":\"the password is [REDACTED]\",\"n\":1}"));
    assert_eq!((calls[2].status, calls[2].effect), (CallStatus::Error, CallEffect::Failed));
    assert_eq!(calls[2].error_code.as_deref(), Some("tool_error"));
    assert_eq!(calls[2].error.as_deref(), Some("upstream refused token [REDACTED]"));
    assert!(activity.source.contains("const apiKey = \"[REDACTED]\""), "{}", activity.source);
    assert!(!activity.source.contains(TOKEN));

    let shown = exec(&engine, "return await echo({ a: 1 })", &ExecOptions::default().activity_in_result(true)).await;
    let json = serde_json::to_value(&shown).unwrap();
    assert_eq!(json["activity"]["calls"][0]["path"], "echo", "{json}");
    assert_eq!(json["activity"]["calls"][0]["effect"], "completed", "{json}");
}

#[tokio::test]
async fn refused_calls_are_recorded_as_not_started() {
    let (engine, _) = engine(Setup { replay: false, state: None, events: None });
    let code = "try { await strict({}); } catch (e) { return e.code; }";
    let result = exec(&engine, code, &ExecOptions::default()).await;
    let code = crate::support::value(&result);
    let calls = &activity(&result).calls;
    assert_eq!(calls.len(), 1, "{result:?}");
    assert_eq!((calls[0].status, calls[0].effect), (CallStatus::Error, CallEffect::NotStarted));
    assert_eq!(calls[0].error_code.as_ref().map(|c| json!(c)), Some(code));
}

#[tokio::test]
async fn the_hook_sees_starts_progress_and_finishes_as_they_happen() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let (engine, _) = engine(Setup { replay: false, state: None, events: Some(events.clone()) });
    let own = Arc::new(Mutex::new(0usize));
    let counted = own.clone();
    let options = ExecOptions::default().on_activity(move |_| *counted.lock().unwrap() += 1);
    let result = exec(&engine, "return await progress({})", &options).await;
    assert_eq!(crate::support::value(&result), json!("done"));
    let events = events.lock().unwrap().clone();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            ActivityEvent::CellStarted(_) => "cell",
            ActivityEvent::CallStarted(_) => "started",
            ActivityEvent::Progress(_) => "progress",
            ActivityEvent::CallFinished(_) => "finished",
        })
        .collect();
    assert_eq!(kinds, ["cell", "started", "progress", "progress", "finished"]);
    let ActivityEvent::CellStarted(cell) = &events[0] else { unreachable!() };
    assert_eq!(
        (cell.tool.as_ref(), cell.tool_kind.as_ref(), cell.tool_input_kind, cell.cell),
        ("exec", "code_mode_exec", InputKind::Javascript, 1),
        "a hook tells a code-mode cell from a shell exec"
    );
    let ActivityEvent::Progress(first) = &events[2] else { unreachable!() };
    assert_eq!((first.progress, first.total), (1.0, Some(2.0)));
    assert_eq!(first.call_id, "bridge:callValue:1");
    assert_eq!(first.message.as_deref(), Some("half way, key [REDACTED]"));
    assert_eq!(*own.lock().unwrap(), 5, "the call's own hook gets the same events");

    let typed = exec(&engine, "const n: number = await echo({ n: 1 }).then((r) => r.n); return n", &options).await;
    assert_eq!(crate::support::value(&typed), json!(1));
    let activity = activity(&typed);
    assert_eq!((activity.tool_kind.as_ref(), activity.tool_input_kind), ("code_mode_exec", InputKind::Typescript));
    let json = serde_json::to_value(activity).unwrap();
    assert_eq!((&json["toolKind"], &json["toolInputKind"]), (&json!("code_mode_exec"), &json!("typescript")));
}

const PARKING: &str = "const a = await echo({ step: 1 }); const b = await leak({ n: 2 }); \
     await yield_control('check'); const c = await echo({ step: 3 }); return [a.step, b.n, c.step]";

async fn park_and_resume(replay: bool) -> (Vec<ActivityEvent>, CodeModeResult, CodeModeResult) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let (engine, _) = engine(Setup { replay, state: None, events: Some(events.clone()) });
    let first = exec(&engine, PARKING, &ExecOptions::default()).await;
    let second = wait(&engine, &run_id(&first)).await;
    assert_eq!(crate::support::value(&second), json!([1, 2, 3]));
    let events = events.lock().unwrap().clone();
    (events, first, second)
}

#[tokio::test]
async fn a_resume_by_replay_marks_the_calls_it_delivers_again() {
    let (events, first, second) = park_and_resume(true).await;
    let (first, second) = (activity(&first), activity(&second));
    assert_eq!(first.cell, 1);
    assert_eq!(first.calls.len(), 2);
    assert_eq!(second.cell, 2);
    let replayed: Vec<_> = second.replayed().collect();
    assert_eq!(replayed.len(), 2, "both earlier calls were delivered again: {second:#?}");
    for (copy, original) in replayed.iter().zip(&first.calls) {
        assert_eq!(copy.start.call_id, original.start.call_id);
        assert_eq!(copy.start.cell, 1, "a replayed call keeps the cell that made it");
        assert_eq!(copy.start.started_at_ms, original.start.started_at_ms);
        assert_eq!(copy.result, original.result);
    }
    let live: Vec<_> = second.live().collect();
    assert_eq!(live.len(), 1);
    assert_eq!((live[0].start.call_id.as_str(), live[0].start.cell), ("bridge:callValue:4", 2));
    let finished_live =
        events.iter().filter(|e| matches!(e, ActivityEvent::CallFinished(r) if !r.start.replayed)).count();
    let finished_replayed =
        events.iter().filter(|e| matches!(e, ActivityEvent::CallFinished(r) if r.start.replayed)).count();
    assert_eq!((finished_live, finished_replayed), (3, 2), "each call finished live once");
    let cells: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ActivityEvent::CellStarted(c) => Some((c.cell, c.tool.as_ref(), c.tool_input_kind)),
            _ => None,
        })
        .collect();
    assert_eq!(cells, [(1, "exec", InputKind::Javascript), (2, "wait", InputKind::Javascript)]);
}

#[tokio::test]
async fn a_live_resume_replays_nothing() {
    let (_, _, second) = park_and_resume(false).await;
    let second = activity(&second);
    assert_eq!(second.replayed().count(), 0);
    assert_eq!(second.live().count(), 1);
}

#[tokio::test]
async fn another_process_resumes_with_the_record_and_finishes_interrupted_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = Some(dir.path().to_path_buf());
    let (parker, parker_host) = engine(Setup { replay: true, state: state.clone(), events: None });
    // `later` is in flight when the run yields; the process that parked it is gone before it answers.
    let code = "const a = await echo({ step: 1 }); const l = later({}).catch(e => e.code); \
                await yield_control('check'); return [a.step, await l]";
    let first = exec(&parker, code, &ExecOptions::default()).await;
    let id = run_id(&first);
    drop(parker);
    drop(parker_host);

    let stored = std::fs::read(dir.path().join("runs").join(format!("{id}.json"))).expect("the checkpoint file");
    let checkpoint = codemode_snapshot::Checkpoint::decode(&stored).expect("a plain checkpoint");
    assert_eq!(checkpoint.activity.calls.len(), 1, "finished calls persist with the checkpoint");
    assert_eq!(checkpoint.activity.open.len(), 1, "the call in flight is kept open");

    let (resumer, _) = engine(Setup { replay: true, state, events: None });
    let second = resumer.wait(json!({ "runId": id }), RunScope::default()).await;
    assert_eq!(crate::support::value(&second), json!([1, "interrupted"]));
    let second = activity(&second);
    let replayed: Vec<_> = second.replayed().map(|c| c.start.path.as_str()).collect();
    assert_eq!(replayed, ["echo"]);
    let live: Vec<_> = second.live().collect();
    assert_eq!(live.len(), 1, "{second:#?}");
    assert_eq!(live[0].start.path, "later");
    assert_eq!(live[0].start.cell, 1, "it started in the exec");
    assert_eq!((live[0].status, live[0].effect), (CallStatus::Error, CallEffect::Uncertain));
    assert_eq!(live[0].error_code.as_deref(), Some("interrupted"));
}

#[tokio::test]
async fn the_record_is_bounded_and_says_what_it_dropped() {
    let host = Arc::new(Host::default());
    let engine = CodeMode::builder()
        .tools(tools())
        .host(host)
        .warm_workers(1)
        .activity_limits(codemode::ActivityLimits { max_calls: 3, ..codemode::ActivityLimits::default() })
        .keep_activity(true)
        .build()
        .expect("the engine builds");
    let result =
        exec(&engine, "for (let i = 0; i < 5; i++) await echo({ i }); return 1", &ExecOptions::default()).await;
    let activity = activity(&result);
    assert_eq!(activity.calls.len(), 3);
    assert_eq!(activity.dropped.calls, 2);
    assert!(activity.dropped.bytes > 0);
}

/// Token shapes of the kinds the redactor knows, with a generated body.
fn token() -> impl Strategy<Value = String> {
    (0..6usize, "[A-Za-z0-9]{40}").prop_map(|(kind, body)| match kind {
        0 => format!("sk-proj-{body}"),
        1 => format!("ghp_{body}"),
        2 => format!("AKIA{}", body[..16].to_uppercase()),
        3 => format!("eyJ{}.eyJ{}.{}", &body[..10], &body[10..20], &body[20..]),
        4 => format!("xoxb-{body}"),
        _ => format!("sk-ant-{body}"),
    })
}

/// A program that puts `value` (a JS string literal's content) in a literal, a template, a tool's arguments, a
/// tool's result, a tool's error, or progress; every program makes at least one call.
fn program(place: usize, value: &str) -> String {
    match place {
        0 => format!("const API_TOKEN = \"{value}\";\nreturn await echo({{ ok: 1 }});"),
        1 => format!("const v = `prefix {value} suffix`;\nreturn (await echo({{ v }})).v.length;"),
        2 => format!("return (await echo({{ headers: {{ note: \"{value}\" }} }})).headers.note.length;"),
        3 => format!("const r = await echo({{ deep: [{{ x: 'Bearer {value}' }}] }});\nreturn 1;"),
        4 => format!("try {{ await fail({{ why: '{value}' }}); }} catch (e) {{ return e.message.length; }}"),
        // The value straddles the 512-byte cut of the arguments' and the result's previews.
        _ => format!("const big = 'x'.repeat(495) + '{value}';\nreturn (await echo({{ big }})).big.length;"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_secret_or_token_reaches_any_record_for_people(
        secret in "S3cr[A-Za-z0-9]{8,20}",
        token in token(),
        place in 0..6usize,
        pick in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let value = if pick { secret.clone() } else { token.clone() };
        let (records, events) = runtime.block_on(async {
            let events = Arc::new(Mutex::new(Vec::new()));
            let seen = events.clone();
            let engine = CodeMode::builder()
                .tools(tools())
                .host(Arc::new(Host::default()))
                .warm_workers(1)
                .redactor(Redactor::new().secret(secret.clone()))
                .on_activity(move |e| seen.lock().unwrap().push(e.clone()))
                .build()
                .expect("the engine builds");
            let result = exec(&engine, &program(place, &value), &ExecOptions::default().activity_in_result(true)).await;
            let records = serde_json::to_string(&serde_json::to_value(&result).unwrap()["activity"]).unwrap();
            let events = serde_json::to_string(&*events.lock().unwrap()).unwrap();
            (records, events)
        });
        prop_assert!(records.contains("\"calls\":[{"), "{records}");
        // The previews are JSON text inside JSON: look for the value itself and for any 12-character piece of it.
        for text in [&records, &events] {
            prop_assert!(!text.contains(&value), "{value} reached {text}");
            for piece in value.as_bytes().windows(12) {
                let piece = std::str::from_utf8(piece).unwrap();
                prop_assert!(!text.contains(piece), "a piece {piece} of {value} reached {text}");
            }
        }
    }
}
