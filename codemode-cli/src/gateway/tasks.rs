//! `exec` and `wait` as MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663, as rmcp 3.11 speaks
//! it): a client that declared the extension gets a task id at once and polls `tasks/get`, cancels with
//! `tasks/cancel`, and is sent `notifications/tasks` when the task ends; its result, inlined in `tasks/get`, is the
//! `CodeModeResult` tool result.
//!
//! A task keeps its run going at no model cost: while the run parks on pending tool calls, the task calls `wait` on
//! it itself (the output of each step is kept and handed over with the final result). A run that yields, or that
//! waits for approvals, ends its task with that `waiting` result, whose `runId` goes on with `wait`. A cancelled task
//! aborts its run.
//!
//! Invariant: a task is visible only to the caller that created it (its run scope's owner); another caller gets the
//! same error as for an id that never existed. Tasks live in this process's memory: with `[store]`, the runs they
//! drive resume on any replica, but the task ids do not.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, DetailedTask, JsonObject, ServerNotification, Task,
    TaskPayload, TaskStatus, TaskStatusNotificationParams,
};
use rmcp::task_manager::current_timestamp;
use rmcp::{ErrorData, Peer, RoleServer};
use serde_json::Value;
use tokio::sync::Notify;

/// The polling interval a task suggests, in milliseconds.
const POLL_INTERVAL_MS: u64 = 500;

/// One task: whose it is, its state, and how to cancel its run.
struct Entry {
    owner: Option<String>,
    task: Task,
    /// The terminal payload once the task ended.
    terminal: Option<TaskPayload>,
    ended_at: Option<Instant>,
    cancel: Arc<Cancel>,
}

/// A task's cancellation: the flag the task's loop reads, and the signal its current `exec`/`wait` waits on.
#[derive(Default)]
pub struct Cancel {
    requested: AtomicBool,
    signal: Notify,
}

impl Cancel {
    /// Whether `tasks/cancel` arrived.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Resolves when `tasks/cancel` arrives (at once if it already did).
    pub async fn cancelled(&self) {
        if self.requested() {
            return;
        }
        self.signal.notified().await;
    }
}

/// The gateway's tasks, across its client sessions.
pub struct Tasks {
    entries: Mutex<HashMap<String, Entry>>,
    /// How long a task stays readable after it ends, and how long one may run (its `ttlMs`).
    ttl: Duration,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").field("tasks", &lock(&self.entries).len()).field("ttl", &self.ttl).finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a task's operation ended with.
pub enum Outcome {
    /// The `exec`/`wait` answered (a failed run is a completed task whose result has `isError`).
    Result(CallToolResult),
    /// The request was refused (a JSON-RPC error).
    Error(ErrorData),
    /// `tasks/cancel` stopped the run.
    Cancelled,
}

impl Tasks {
    /// Tasks that stay readable for `ttl` after they end.
    pub fn new(ttl: Duration) -> Self {
        Tasks { entries: Mutex::new(HashMap::new()), ttl }
    }

    /// Starts `operation` as a task of `owner`; when it ends, the task's terminal state is recorded and `peer` (the
    /// session that created it) is sent `notifications/tasks`. Returns the task as it starts (`working`).
    pub fn spawn<F, Fut>(self: &Arc<Self>, owner: Option<String>, peer: Peer<RoleServer>, operation: F) -> Task
    where
        F: FnOnce(Arc<Cancel>) -> Fut,
        Fut: std::future::Future<Output = Outcome> + Send + 'static,
    {
        let id = uuid::Uuid::new_v4().to_string();
        let now = current_timestamp();
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_ttl_ms(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX))
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        let cancel = Arc::new(Cancel::default());
        {
            let mut entries = lock(&self.entries);
            self.sweep(&mut entries);
            let entry = Entry { owner, task: task.clone(), terminal: None, ended_at: None, cancel: cancel.clone() };
            entries.insert(id.clone(), entry);
        }
        let future = operation(cancel);
        let tasks = self.clone();
        tokio::spawn(async move {
            let outcome = future.await;
            if let Some(detailed) = tasks.finish(&id, outcome) {
                let params = TaskStatusNotificationParams::new(detailed);
                let notification = ServerNotification::TaskStatusNotification(rmcp::model::Notification::new(params));
                // A client that went away learns the state by polling, if ever.
                let _ = peer.send_notification(notification).await;
            }
        });
        task
    }

    /// Records how task `id` ended; the task as `tasks/get` now shows it.
    fn finish(&self, id: &str, outcome: Outcome) -> Option<DetailedTask> {
        let mut entries = lock(&self.entries);
        let entry = entries.get_mut(id)?;
        let payload = match outcome {
            Outcome::Result(result) => TaskPayload::Completed { result: object(&result) },
            Outcome::Error(error) => TaskPayload::Failed { error: object(&error) },
            Outcome::Cancelled => TaskPayload::Cancelled,
        };
        entry.terminal = Some(payload);
        entry.ended_at = Some(Instant::now());
        entry.task.last_updated_at = current_timestamp();
        Some(detailed(entry))
    }

    /// `tasks/get` for `owner`.
    ///
    /// # Errors
    ///
    /// `invalid_params` for a task that does not exist, expired, or is another caller's.
    pub fn get(&self, id: &str, owner: &Option<String>) -> Result<DetailedTask, ErrorData> {
        let mut entries = lock(&self.entries);
        self.sweep(&mut entries);
        match entries.get(id) {
            Some(entry) if entry.owner == *owner => Ok(detailed(entry)),
            _ => Err(unknown(id)),
        }
    }

    /// `tasks/cancel` for `owner`: the task's run is aborted (an ended task stays as it ended).
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub fn cancel(&self, id: &str, owner: &Option<String>) -> Result<(), ErrorData> {
        let mut entries = lock(&self.entries);
        self.sweep(&mut entries);
        match entries.get_mut(id) {
            Some(entry) if entry.owner == *owner => {
                if entry.terminal.is_none() {
                    entry.cancel.requested.store(true, Ordering::SeqCst);
                    entry.cancel.signal.notify_one();
                    entry.task.status_message = Some("cancelling: the run is being aborted".to_owned());
                    entry.task.last_updated_at = current_timestamp();
                }
                Ok(())
            }
            _ => Err(unknown(id)),
        }
    }

    /// Drops tasks that ended longer than the TTL ago.
    fn sweep(&self, entries: &mut HashMap<String, Entry>) {
        entries.retain(|_, entry| entry.ended_at.is_none_or(|ended| ended.elapsed() < self.ttl));
    }
}

fn detailed(entry: &Entry) -> DetailedTask {
    let payload = entry.terminal.clone().unwrap_or(TaskPayload::Working);
    DetailedTask::new(entry.task.clone(), payload)
}

fn object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

fn unknown(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("unknown task \"{id}\": it never existed here, it ended longer ago than its ttlMs, or it is not yours"),
        None,
    )
}

/// Whether a `CodeModeResult` (as JSON) is a run parked on pending tool calls with nothing for a person to answer:
/// a task keeps such a run going with `wait`. Returns its run id.
pub fn parked_on_tools(result: &Value) -> Option<&str> {
    let no_approvals = result.get("pendingApprovals").and_then(Value::as_array).is_none_or(Vec::is_empty);
    (result.get("status").and_then(Value::as_str) == Some("waiting")
        && result.get("reason").and_then(Value::as_str) == Some("pending_tools")
        && no_approvals)
        .then(|| result.get("runId").and_then(Value::as_str))
        .flatten()
}

/// The `wait` request a task sends itself for `run_id`.
pub fn wait_request(run_id: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("wait");
    let mut arguments = JsonObject::new();
    arguments.insert("runId".into(), Value::String(run_id.to_owned()));
    params.arguments = Some(arguments);
    params
}

/// The `CodeModeResult` of an `exec`/`wait` response, if it is one.
pub fn result_value(response: &CallToolResponse) -> Option<&Value> {
    match response {
        CallToolResponse::Complete(result) => result.structured_content.as_ref(),
        _ => None,
    }
}

/// `result` with `earlier` output items first: what the task's earlier steps printed reaches the client once.
pub fn with_earlier_output(mut result: Value, earlier: Vec<Value>) -> Value {
    if earlier.is_empty() {
        return result;
    }
    if let Some(map) = result.as_object_mut() {
        let mut output = earlier;
        if let Some(Value::Array(later)) = map.remove("output") {
            output.extend(later);
        }
        map.insert("output".into(), Value::Array(output));
    }
    result
}
