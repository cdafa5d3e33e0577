//! The `tracing` spans of the exec path, as any embedder's subscriber receives them: an `execute_tool exec`/`wait`
//! span per call of the engine and an `execute_tool <tool>` child per nested call, with the GenAI attributes, error
//! spans for a failed tool, a denied call, a call cut off by the run's timeout and a failed run, and the calls a
//! resume by replay delivers from the journal marked `codemode.replayed`. A recording layer is the thread's default
//! subscriber; `#[tokio::test]` runs every task on that thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use codemode::{CodeMode, CodeModeResult, Limits, Policy, RunScope};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

use crate::support::{TestHost, tools};

#[derive(Clone, Debug, Default)]
struct Recorded {
    id: u64,
    parent: Option<u64>,
    fields: HashMap<String, String>,
    closed: bool,
}

impl Recorded {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// The span's OpenTelemetry name (`otel.name`).
    fn name(&self) -> &str {
        self.field("otel.name").unwrap_or_default()
    }
}

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Recorded>>>);

impl Spans {
    fn all(&self) -> Vec<Recorded> {
        self.0.lock().unwrap().clone()
    }

    fn children(&self, parent: &Recorded) -> Vec<Recorded> {
        self.all().into_iter().filter(|s| s.parent == Some(parent.id)).collect()
    }

    fn named(&self, name: &str) -> Vec<Recorded> {
        self.all().into_iter().filter(|s| s.name() == name).collect()
    }
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.id().into_u64());
        self.0.lock().unwrap().push(Recorded { id: id.into_u64(), parent, fields, closed: false });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some(span) = spans.iter_mut().rev().find(|s| s.id == id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some(span) = spans.iter_mut().rev().find(|s| s.id == id.into_u64()) {
            span.closed = true;
        }
    }
}

fn recording() -> (Spans, tracing::subscriber::DefaultGuard) {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    (spans, tracing::subscriber::set_default(subscriber))
}

fn engine(timeout_ms: u64, replay: bool) -> CodeMode {
    let policy = Policy::from_json("policy", &json!({ "rules": [{ "match": "add", "policy": "deny" }] })).unwrap();
    CodeMode::builder()
        .limits(Limits { timeout_ms, ..Limits::default() })
        .tools(tools())
        .host(Arc::new(TestHost::default()))
        .policy(policy)
        .warm_workers(1)
        .replay_on_resume(replay)
        .build()
        .expect("the engine builds")
}

async fn exec(engine: &CodeMode, code: &str) -> CodeModeResult {
    engine.exec(json!({ "title": "spans", "code": code }), RunScope::default()).await
}

#[tokio::test]
async fn each_nested_call_is_a_child_span_and_failures_are_error_spans() {
    let (spans, _guard) = recording();
    let engine = engine(5_000, false);
    let code = "const secret = 'sk-proj-abcdefghijklmnopqrstuvwxyz0123';\n\
                await echo({ secret });\n\
                try { await fail({}) } catch {}\n\
                try { await add({ a: 1, b: 2 }) } catch {}\n\
                return 1;";
    let result = exec(&engine, code).await;
    assert!(matches!(result, CodeModeResult::Completed(_)), "{result:?}");

    let exec_span = spans.named("execute_tool exec").pop().expect("the exec span");
    assert_eq!(exec_span.field("otel.kind"), Some("internal"));
    assert_eq!(exec_span.field("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(exec_span.field("gen_ai.tool.name"), Some("exec"));
    assert_eq!(exec_span.field("codemode.status"), Some("completed"));
    assert!(exec_span.field("codemode.run_id").is_some_and(|id| id.starts_with("cm_")), "{exec_span:?}");
    assert_eq!(exec_span.field("codemode.source.length"), Some(code.len().to_string().as_str()));
    assert_eq!(exec_span.field("codemode.source.sha256").map(str::len), Some(64));
    for span in spans.all() {
        assert!(span.fields.values().all(|v| !v.contains("sk-proj-")), "no secret and no source on a span: {span:?}");
    }

    let calls = spans.children(&exec_span);
    let names: Vec<&str> = calls.iter().map(Recorded::name).collect();
    assert_eq!(names, ["execute_tool echo", "execute_tool fail", "execute_tool add"]);
    let [echo, fail, add] = [&calls[0], &calls[1], &calls[2]];
    assert_eq!(echo.field("gen_ai.tool.call.id"), Some("bridge:callValue:1"));
    assert_eq!(echo.field("codemode.replayed"), Some("false"));
    assert_eq!(echo.field("codemode.status"), Some("ok"));
    assert_eq!(echo.field("otel.status_code"), None);
    assert_eq!((fail.field("error.type"), fail.field("otel.status_code")), (Some("tool_error"), Some("ERROR")));
    assert!(fail.field("otel.status_description").is_some_and(|m| m.contains("failed on purpose")), "{fail:?}");
    assert_eq!((add.field("error.type"), add.field("otel.status_code")), (Some("denied"), Some("ERROR")));
    assert!(calls.iter().all(|c| c.closed), "every call span ended: {calls:?}");
}

#[tokio::test]
async fn a_timeout_fails_the_run_span_and_cuts_off_the_call_in_flight() {
    let (spans, _guard) = recording();
    let engine = engine(1_000, false);
    let result = exec(&engine, "slow({ ms: 60000 }); await new Promise((r) => setTimeout(r, 0)); while (true) {}").await;
    assert!(matches!(&result, CodeModeResult::Failed(f) if f.code.as_str() == "timeout"), "{result:?}");
    let exec_span = spans.named("execute_tool exec").pop().expect("the exec span");
    assert_eq!((exec_span.field("error.type"), exec_span.field("codemode.status")), (Some("timeout"), Some("failed")));
    // The cancelled call's task is dropped when the runtime next runs it: bounded, on the data.
    let mut slow = spans.children(&exec_span).pop().expect("the slow call's span");
    for _ in 0..1_000 {
        if slow.closed {
            break;
        }
        tokio::task::yield_now().await;
        slow = spans.children(&exec_span).pop().expect("the slow call's span");
    }
    assert!(slow.closed, "the cut-off call's span ended: {slow:?}");
    assert_eq!((slow.field("error.type"), slow.field("otel.status_code")), (Some("aborted"), Some("ERROR")));
}

#[tokio::test]
async fn a_resume_by_replay_marks_the_calls_it_delivers_from_the_journal() {
    let (spans, _guard) = recording();
    let engine = engine(5_000, true);
    let code = "await echo({ n: 1 }); try { await fail({}) } catch {}\n\
                await yield_control('test');\n\
                return (await echo({ n: 2 })).n;";
    let parked = exec(&engine, code).await;
    let CodeModeResult::Waiting(waiting) = &parked else { panic!("parked: {parked:?}") };
    let done = engine.wait(json!({ "runId": waiting.run_id }), RunScope::default()).await;
    assert!(matches!(&done, CodeModeResult::Completed(c) if c.value == json!(2)), "{done:?}");

    let wait_span = spans.named("execute_tool wait").pop().expect("the wait span");
    assert_eq!(wait_span.field("codemode.replayed"), Some("true"));
    assert_eq!(wait_span.field("codemode.run_id"), Some(waiting.run_id.as_str()));
    let calls = spans.children(&wait_span);
    let seen: Vec<(&str, Option<&str>)> = calls.iter().map(|c| (c.name(), c.field("codemode.replayed"))).collect();
    assert_eq!(
        seen,
        [
            ("execute_tool echo", Some("true")),
            ("execute_tool fail", Some("true")),
            ("execute_tool echo", Some("false")),
        ]
    );
    assert_eq!(calls[1].field("error.type"), Some("tool_error"), "a replayed failure is still an error span");
    assert_eq!(calls[0].field("gen_ai.tool.call.id"), Some("bridge:callValue:1"));
}
