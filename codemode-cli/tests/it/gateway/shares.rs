//! No principal starves another: with `[auth]`, each principal holds a bounded share of the suspended-run places,
//! of the MCP sessions (closed when idle) and of the finished tasks, and the parked runs that keep a worker are
//! capped (`[workers] max_live_parked`). Each bound is driven through a real `codemode mcp --http` process with
//! static tokens, with caps set small; a second principal is served throughout.
//!
//! Nothing here waits on time: the idle expiry is a one-second setting whose effect is awaited as an event (the
//! session's `GET` stream ends when the gateway closes it), under a guard that only turns a hang into a failure.

use std::time::Duration;

use futures::StreamExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams, Implementation,
    TaskPayload, TaskStatus, TaskStatusNotificationParams,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::auth::{AuthGateway, call, exec, transport};

/// The longest one expected answer or event may take before the test fails instead of hanging.
const GUARD: Duration = Duration::from_secs(60);

const ALICE: &str = "alice-static-token";
const CAROL: &str = "carol-static-token";

/// A program that parks (yields) and completes with "resumed" on its `wait`.
const PARKS: &str = "await yield_control('parked'); return 'resumed';";

fn run_id(result: &Value) -> String {
    assert_eq!(result["status"], "waiting", "{result}");
    result["runId"].as_str().expect("a runId").to_owned()
}

#[tokio::test]
async fn a_principal_parks_only_its_share_of_runs_and_another_principal_still_parks() {
    let g = AuthGateway::start("max_suspended_runs = 2", "").await;
    let alice = g.client(ALICE).await;
    let first = run_id(&exec(&alice, PARKS).await);
    run_id(&exec(&alice, PARKS).await);

    // Alice holds her whole share; carol still parks.
    let carol = g.client(CAROL).await;
    let hers = run_id(&exec(&carol, PARKS).await);
    assert_eq!(call(&carol, "wait", json!({ "runId": hers })).await["value"], "resumed");

    // A run of hers that finishes gives its place back to her.
    let done = call(&alice, "wait", json!({ "runId": first })).await;
    assert_eq!((&done["status"], &done["value"]), (&json!("completed"), &json!("resumed")), "{done}");
    run_id(&exec(&alice, PARKS).await);

    // One more fails at its first tool call, naming the share, though the store has places left.
    let refused = exec(&alice, PARKS).await;
    assert_eq!((&refused["status"], &refused["code"]), (&json!("failed"), &json!("invalid_input")), "{refused}");
    let error = refused["error"].as_str().expect("an error");
    assert!(
        error.starts_with(
            "too many suspended code mode runs for this principal: it holds 2, its share (max_suspended_runs) of the \
             64 places"
        ),
        "{error}"
    );
    // Refused, alice took nothing from carol, who parks again.
    run_id(&exec(&carol, PARKS).await);
}

#[tokio::test]
async fn a_run_parking_past_the_live_cap_gives_its_worker_back_and_resumes_by_replay() {
    let g = AuthGateway::start("", "[workers]\nmax_live_parked = 1\n\n[telemetry]\nactivity = true\n").await;
    let alice = g.client(ALICE).await;
    let code = "const said = await MCP.everything.echo({ message: 'hi' }); await yield_control('p'); return said;";
    let live = run_id(&exec(&alice, code).await);
    // The one live place is taken: this run parks without its worker.
    let replayed = run_id(&exec(&alice, code).await);

    let replayed_calls = |result: &Value| {
        result["activity"]["calls"].as_array().map_or(0, |calls| calls.iter().filter(|c| c["replayed"] == true).count())
    };
    let first = call(&alice, "wait", json!({ "runId": live })).await;
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(replayed_calls(&first), 0, "resumed on its live worker: {first}");
    let second = call(&alice, "wait", json!({ "runId": replayed })).await;
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(replayed_calls(&second), 1, "resumed by replay, its echo delivered again: {second}");
    assert_eq!(first["value"], second["value"], "both paths give the same result");
}

/// A raw request on session `id` of `token`'s principal.
fn on_session(g: &AuthGateway, method: reqwest::Method, token: &str, id: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .request(method, &g.url)
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", "2025-11-25")
        .header("accept", "application/json, text/event-stream")
}

/// Opens a session with a raw `initialize`; its id, once its answer has been read.
async fn open(g: &AuthGateway, token: &str) -> String {
    let response = g.bearer(token).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["mcp-session-id"].to_str().expect("ASCII").to_owned();
    response.text().await.expect("the initialize answer");
    id
}

#[tokio::test]
async fn a_principal_opens_only_its_share_of_sessions_and_a_closed_one_gives_its_place_back() {
    let g = AuthGateway::start("max_sessions = 2", "").await;
    let first = open(&g, ALICE).await;
    open(&g, ALICE).await;

    let refused = g.bearer(ALICE).await;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().get("mcp-session-id").is_none(), "the refused session is never handed out");
    let body: Value = serde_json::from_str(&refused.text().await.expect("body")).expect("JSON");
    assert_eq!(body["error"], "too_many_sessions", "{body}");
    let description = body["error_description"].as_str().expect("a description");
    assert!(description.starts_with("principal \"alice\" has 2 MCP sessions open, its share (max_sessions = 2)"));

    // Another principal is not counted with her, and cannot close her sessions.
    open(&g, CAROL).await;
    let foreign = on_session(&g, reqwest::Method::DELETE, CAROL, &first).send().await.expect("answers");
    assert_eq!(foreign.status(), 404);
    assert_eq!(g.bearer(ALICE).await.status(), 429);

    let closed = on_session(&g, reqwest::Method::DELETE, ALICE, &first).send().await.expect("answers");
    assert!(closed.status().is_success(), "{}", closed.status());
    open(&g, ALICE).await;
}

#[tokio::test]
async fn an_idle_session_is_closed_and_gives_its_place_back() {
    let g = AuthGateway::start("max_sessions = 1\nsession_idle_seconds = 1", "").await;
    let idle = open(&g, ALICE).await;
    // Its GET stream is not activity: it ends when the gateway closes the idle session (or the session is already
    // gone by the time it is asked for).
    let listening = on_session(&g, reqwest::Method::GET, ALICE, &idle).send().await.expect("answers");
    if listening.status() == 200 {
        let mut stream = listening.bytes_stream();
        tokio::time::timeout(GUARD, async { while stream.next().await.is_some() {} })
            .await
            .expect("the idle session is closed within the guard");
    } else {
        assert_eq!(listening.status(), 404, "an unknown session");
    }
    let gone = on_session(&g, reqwest::Method::POST, ALICE, &idle)
        .header("content-type", "application/json")
        .body(json!({ "jsonrpc": "2.0", "id": 2, "method": "ping" }).to_string())
        .send()
        .await
        .expect("answers");
    assert_eq!(gone.status(), 404, "the idle session is closed");
    open(&g, ALICE).await;
}

/// A client that declares the tasks extension and hands each task notification to the test.
#[derive(Clone)]
struct TaskClient {
    ended: mpsc::UnboundedSender<TaskStatusNotificationParams>,
}

impl ClientHandler for TaskClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::builder().enable_tasks().build(), Implementation::new("shares", "0"))
    }

    async fn on_task_status(&self, params: TaskStatusNotificationParams, _context: NotificationContext<RoleClient>) {
        let _ = self.ended.send(params);
    }
}

struct Tasks {
    service: RunningService<RoleClient, TaskClient>,
    ended: mpsc::UnboundedReceiver<TaskStatusNotificationParams>,
}

impl Tasks {
    async fn start(g: &AuthGateway, token: &str) -> Tasks {
        let (ended, receiver) = mpsc::unbounded_channel();
        let service = TaskClient { ended }.serve(transport(&g.url, token)).await.expect("MCP handshake");
        Tasks { service, ended: receiver }
    }

    /// Runs `code` as a task and waits for the notification that it completed; its id.
    async fn finished(&mut self, code: &str) -> String {
        let mut params = CallToolRequestParams::new("exec");
        params.arguments = json!({ "title": "shares", "code": code }).as_object().cloned();
        let answer = self.service.peer().call_tool_once(params).await.expect("tools/call");
        let CallToolResponse::Task(created) = answer else { panic!("a client that declared tasks gets a task") };
        let ended = tokio::time::timeout(GUARD, self.ended.recv()).await.expect("ends within the guard").expect("open");
        assert_eq!(ended.task.task.task_id, created.task.task_id);
        assert_eq!(ended.task.status(), TaskStatus::Completed, "{ended:?}");
        created.task.task_id
    }

    /// `tasks/get`: the task's value, or the error's message.
    async fn get(&self, id: &str) -> Result<Value, String> {
        match self.service.peer().get_task(GetTaskParams::new(id.to_owned())).await {
            Ok(got) => match got.task.payload {
                TaskPayload::Completed { result } => Ok(result["structuredContent"]["value"].clone()),
                other => panic!("completed: {other:?}"),
            },
            Err(e) => Err(e.to_string()),
        }
    }
}

#[tokio::test]
async fn a_principal_keeps_its_share_of_finished_tasks_oldest_dropped_first() {
    let g = AuthGateway::start("max_finished_tasks = 2\nmax_finished_task_bytes = 4096", "").await;
    let mut carol = Tasks::start(&g, CAROL).await;
    let hers = carol.finished("return 'carol';").await;

    let mut alice = Tasks::start(&g, ALICE).await;
    let one = alice.finished("return 1;").await;
    let two = alice.finished("return 2;").await;
    let three = alice.finished("return 3;").await;
    let dropped = alice.get(&one).await.expect_err("her oldest finished task was dropped");
    assert!(dropped.contains("max_finished_tasks and max_finished_task_bytes"), "{dropped}");
    assert_eq!((alice.get(&two).await, alice.get(&three).await), (Ok(json!(2)), Ok(json!(3))));

    // A result over the byte share is kept alone: it is her newest, and everything older goes.
    let big = alice.finished("return 'x'.repeat(3000);").await;
    assert!(alice.get(&two).await.is_err() && alice.get(&three).await.is_err());
    assert_eq!(alice.get(&big).await.map(|v| v.as_str().map(str::len)), Ok(Some(3000)));
    assert_eq!(carol.get(&hers).await, Ok(json!("carol")), "nothing of another principal's is dropped");
}
