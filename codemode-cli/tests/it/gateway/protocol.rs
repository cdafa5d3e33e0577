//! The protocol beyond `tools/call`, observed from rmcp's client over the `codemode mcp` binary wrapping the real
//! server-everything: `exec` as a task polled to completion and a cancelled task (the tasks extension), progress
//! notifications during a long call (the gateway's own for each nested call and server-everything's for its
//! long-running operation), upstream log messages forwarded with the server's name, and one `wait` that covers a tool
//! call longer than the execution timeout.
//!
//! Nothing here asserts on time: each test waits for the notification or result it is about (under a generous guard
//! that only turns a hang into a failure).

#![allow(deprecated)] // MCP logging (`notifications/message`) is deprecated by SEP-2577 but still what servers send.

use std::path::Path;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, LoggingMessageNotificationParam, ProgressNotificationParam, TaskPayload, TaskStatus,
    TaskStatusNotificationParams,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::fixture;

/// What the client was sent besides answers.
#[derive(Debug)]
enum Heard {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
    Task(TaskStatusNotificationParams),
}

/// A client that declares the tasks extension (or not) and hands every notification to the test.
#[derive(Clone)]
pub(super) struct Listener {
    heard: mpsc::UnboundedSender<Heard>,
    tasks: bool,
}

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("gateway-protocol", "0"))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        let _ = self.heard.send(Heard::Progress(params));
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.heard.send(Heard::Log(params));
    }

    async fn on_task_status(&self, params: TaskStatusNotificationParams, _context: NotificationContext<RoleClient>) {
        let _ = self.heard.send(Heard::Task(params));
    }
}

pub(super) struct Client {
    pub(super) service: RunningService<RoleClient, Listener>,
    heard: mpsc::UnboundedReceiver<Heard>,
}

/// The longest any one expected notification or answer may take before the test fails instead of hanging.
const GUARD: Duration = Duration::from_secs(60);

impl Client {
    pub(super) async fn start(config: &Path, tasks: bool) -> Client {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"));
        cmd.arg("mcp").arg("--config").arg(config).kill_on_drop(true);
        let transport = TokioChildProcess::new(cmd).expect("the codemode binary starts");
        let (heard, receiver) = mpsc::unbounded_channel();
        let service = tokio::time::timeout(GUARD, Listener { heard, tasks }.serve(transport))
            .await
            .expect("the gateway answers the handshake")
            .expect("MCP handshake");
        Client { service, heard: receiver }
    }

    /// One `tools/call`, with the answer as sent (a result or a task).
    pub(super) async fn call(&self, tool: &str, args: Value) -> CallToolResponse {
        let Value::Object(args) = args else { panic!("tool arguments are an object") };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(args);
        tokio::time::timeout(GUARD, self.service.peer().call_tool_once(params))
            .await
            .expect("the gateway answers within the guard")
            .expect("the gateway answers tools/call")
    }

    /// One `tools/call` whose answer must be a result; its `CodeModeResult`.
    async fn result(&self, tool: &str, args: Value) -> Value {
        match self.call(tool, args).await {
            CallToolResponse::Complete(result) => result.structured_content.expect("a CodeModeResult"),
            other => panic!("expected a result, got {other:?}"),
        }
    }

    /// The next notification.
    async fn next(&mut self) -> Heard {
        tokio::time::timeout(GUARD, self.heard.recv()).await.expect("a notification within the guard").expect("open")
    }

    /// The next `notifications/tasks`, skipping others.
    pub(super) async fn task_notification(&mut self) -> TaskStatusNotificationParams {
        loop {
            if let Heard::Task(params) = self.next().await {
                return params;
            }
        }
    }
}

fn exec_args(code: &str) -> Value {
    json!({ "title": "protocol test", "code": code })
}

#[tokio::test]
async fn an_exec_task_is_polled_to_completion_through_a_parked_run() {
    // A 2 s upstream call in a 1 s exec: the run parks, and the task keeps it going with wait.
    let (_dir, config) = fixture("timeoutMs = 1000", "");
    let mut client = Client::start(&config, true).await;
    let code = r#"text("before");
        const r = await MCP.everything.triggerLongRunningOperation({ duration: 2, steps: 2 });
        text("after");
        return r.content[0].text;"#;
    let CallToolResponse::Task(created) = client.call("exec", exec_args(code)).await else {
        panic!("a client that declared tasks gets a task");
    };
    let task_id = created.task.task_id.clone();
    assert_eq!(created.task.status, TaskStatus::Working);
    let polled = client.service.peer().get_task(GetTaskParams::new(task_id.clone())).await.expect("tasks/get");
    assert_eq!(polled.task.task.task_id, task_id);

    let notified = client.task_notification().await;
    assert_eq!(notified.task.task.task_id, task_id);
    assert_eq!(notified.task.status(), TaskStatus::Completed);
    let polled = client.service.peer().get_task(GetTaskParams::new(task_id.clone())).await.expect("tasks/get");
    let TaskPayload::Completed { result } = polled.task.payload else { panic!("completed: {:?}", polled.task) };
    let value = &result["structuredContent"];
    assert_eq!(value["status"], "completed", "{value}");
    assert!(value["value"].as_str().is_some_and(|v| v.contains("Long running operation completed")), "{value}");
    let output = value["output"].to_string();
    assert!(output.contains("before") && output.contains("after"), "output of every step reaches the client: {value}");
    assert_eq!(result["isError"], false, "{result:?}");
}

#[tokio::test]
async fn a_cancelled_task_aborts_its_run() {
    let (_dir, config) = fixture("timeoutMs = 1000", "");
    let mut client = Client::start(&config, true).await;
    let code = "return await MCP.everything.triggerLongRunningOperation({ duration: 60, steps: 60 });";
    let CallToolResponse::Task(created) = client.call("exec", exec_args(code)).await else { panic!("a task") };
    let task_id = created.task.task_id.clone();
    client.service.peer().cancel_task(CancelTaskParams::new(task_id.clone())).await.expect("tasks/cancel");
    let notified = client.task_notification().await;
    assert_eq!(notified.task.status(), TaskStatus::Cancelled, "{notified:?}");
    let polled = client.service.peer().get_task(GetTaskParams::new(task_id.clone())).await.expect("tasks/get");
    assert_eq!(polled.task.status(), TaskStatus::Cancelled);
    // Another task id is unknown, and the gateway keeps serving.
    let unknown = client.service.peer().get_task(GetTaskParams::new("no-such-task")).await;
    assert!(unknown.is_err(), "{unknown:?}");
    let CallToolResponse::Task(_) = client.call("exec", exec_args("return 1")).await else { panic!("a task") };
    assert_eq!(client.task_notification().await.task.status(), TaskStatus::Completed);
}

#[tokio::test]
async fn a_client_without_tasks_gets_results_and_progress_during_a_long_call() {
    let (_dir, config) = fixture("timeoutMs = 20000", "");
    let mut client = Client::start(&config, false).await;
    let code = "return (await MCP.everything.triggerLongRunningOperation({ duration: 2, steps: 2 })).content[0].text;";
    let result = client.result("exec", exec_args(code)).await;
    assert_eq!(result["status"], "completed", "{result}");
    // rmcp's client sends a progress token with every request; the gateway sent, before its answer, the nested
    // call's start, server-everything's own progress (its first step comes mid-call; its last one races the call's
    // answer), and the call's end, with increasing values.
    let mut messages: Vec<String> = Vec::new();
    let mut last = 0.0;
    while !messages.last().is_some_and(|m| m.starts_with("finished")) {
        if let Heard::Progress(p) = client.next().await {
            assert!(p.progress > last, "progress increases: {p:?}");
            last = p.progress;
            messages.push(p.message.unwrap_or_default());
        }
    }
    let call = "MCP.everything.triggerLongRunningOperation";
    assert!(messages.first().is_some_and(|m| m == &format!("started {call}")), "{messages:?}");
    assert!(messages.iter().any(|m| m.ends_with(": 1/2")), "upstream progress is relayed: {messages:?}");
    assert!(messages.last().is_some_and(|m| m.starts_with(&format!("finished {call} (ok"))), "{messages:?}");
}

#[tokio::test]
async fn upstream_log_messages_are_forwarded_with_the_server_name() {
    let (_dir, config) = fixture("timeoutMs = 20000", "");
    let mut client = Client::start(&config, false).await;
    // Turning simulated logging on sends one message at once; the program stays in flight until it arrives.
    let code = "await MCP.everything.toggleSimulatedLogging({}); \
                await MCP.everything.triggerLongRunningOperation({ duration: 1, steps: 1 }); \
                return (await MCP.everything.toggleSimulatedLogging({})).content[0].text;";
    let peer = client.service.peer().clone();
    let Value::Object(args) = exec_args(code) else { unreachable!() };
    let mut params = CallToolRequestParams::new("exec");
    params.arguments = Some(args);
    let call = tokio::spawn(async move { peer.call_tool_once(params).await });
    let log = loop {
        if let Heard::Log(log) = client.next().await {
            break log;
        }
    };
    let answered = tokio::time::timeout(GUARD, call).await.expect("the exec answers").expect("joined");
    assert!(matches!(answered, Ok(CallToolResponse::Complete(_))), "{answered:?}");
    assert_eq!(log.logger.as_deref(), Some("everything"), "{log:?}");
    assert!(log.data.as_str().is_some_and(|d| d.contains("message")), "{log:?}");
}

#[tokio::test]
async fn one_wait_covers_a_tool_call_longer_than_the_timeout() {
    let (_dir, config) = fixture("timeoutMs = 1000", "");
    let client = Client::start(&config, false).await;
    let code = "return (await MCP.everything.triggerLongRunningOperation({ duration: 3, steps: 3 })).content[0].text;";
    let first = client.result("exec", exec_args(code)).await;
    assert_eq!(first["status"], "waiting", "a 3 s tool outlasts a 1 s exec: {first}");
    let run_id = first["runId"].as_str().expect("runId");
    let done = client.result("wait", json!({ "runId": run_id })).await;
    assert_eq!(done["status"], "completed", "one wait holds the run until its call answers: {done}");
}

/// The Python SDK's client: progress notifications through its progress callback during a long call, upstream log
/// messages through its logging callback, and an image the program returned as a content block of the result, on
/// both revisions (the sessionless one opts in to logs per request).
#[test]
fn the_python_sdk_client_gets_progress_upstream_logs_and_a_returned_image() {
    let (_dir, config) = fixture("timeoutMs = 20000", "");
    let code = "await MCP.everything.toggleSimulatedLogging({}); \
                await MCP.everything.triggerLongRunningOperation({ duration: 2, steps: 2 }); \
                const image = (await MCP.everything.getTinyImage({})).content.find(c => c.type === 'image'); \
                return { text: (await MCP.everything.toggleSimulatedLogging({})).content[0].text, image };";
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/protocol.py");
    for mode in ["legacy", "2026-07-28"] {
        let output = std::process::Command::new(super::approvals::python())
            .arg(&script)
            .arg(env!("CARGO_BIN_EXE_codemode"))
            .arg(&config)
            .arg(mode)
            .arg(code)
            .output()
            .expect("python runs");
        assert!(output.status.success(), "{mode}: the client failed: {}", String::from_utf8_lossy(&output.stderr));
        let out: Value = serde_json::from_slice(&output.stdout).expect("the script prints JSON");
        assert_eq!(out["result"]["status"], "completed", "{mode}: {out}");
        let messages: Vec<&str> =
            out["progress"].as_array().expect("progress").iter().filter_map(|p| p[2].as_str()).collect();
        assert!(
            messages.iter().any(|m| m.starts_with("started MCP.everything.triggerLongRunningOperation")),
            "{mode}: {messages:?}"
        );
        assert!(messages.iter().any(|m| m.ends_with(": 1/2")), "{mode}: upstream progress: {messages:?}");
        let logs = out["logs"].as_array().expect("logs");
        assert!(logs.iter().any(|l| l["logger"] == "everything"), "{mode}: {out}");
        let image = &out["result"]["value"]["image"];
        assert_eq!(out["content"][1]["type"], "image", "{mode}: {out}");
        assert_eq!(out["content"][1]["mimeType"], "image/png", "{mode}: {out}");
        assert_eq!(out["content"][1]["bytes"], image["bytes"], "{mode}: the whole image: {out}");
        assert_eq!(image["contentIndex"], 1, "{mode}: {out}");
    }
}

#[tokio::test]
async fn concurrent_execs_are_served_concurrently() {
    let (_dir, config) = fixture("timeoutMs = 60000", "");
    let mut client = Client::start(&config, false).await;
    let peer = client.service.peer().clone();
    let mut params = CallToolRequestParams::new("exec");
    let code = "await MCP.everything.triggerLongRunningOperation({ duration: 30, steps: 30 }); return 'slow';";
    params.arguments = exec_args(code).as_object().cloned();
    let slow = tokio::spawn(async move { peer.call_tool_once(params).await });
    // The gateway's progress says the slow cell's call has started: the quick cell is sent while it is open, and
    // must not queue behind it (the slow call runs for 30 s, the quick cell is answered long before).
    loop {
        if let Heard::Progress(p) = client.next().await
            && p.message.as_deref().is_some_and(|m| m.starts_with("started MCP.everything"))
        {
            break;
        }
    }
    let quick = client.result("exec", exec_args("return 'quick';")).await;
    assert_eq!(quick["value"], "quick", "{quick}");
    assert!(!slow.is_finished(), "the quick cell was answered while the slow cell's call was open");
    slow.abort();
}
