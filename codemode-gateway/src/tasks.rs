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
//! same error as for an id that never existed. With a finished share (`[auth]`), the finished tasks one owner keeps
//! never pass its count and bytes (except its newest, always kept): its oldest are dropped first, never another
//! owner's. A finished task keeps its result as JSON text, so what it holds is what it counts.
//!
//! Tasks live in the memory of the replica that created them, which drives their runs. With `[store]` each task is
//! also written to the fleet store (the session values of `codemode/task/<id>`: key `task`, the task as `tasks/get`
//! shows it with its owner, written by the creating replica only, when the task starts and when it ends; key
//! `cancel`, written by any other replica that is sent `tasks/cancel`). So `tasks/get` and `tasks/cancel` resolve on
//! every replica: another replica reads the record, and a cancel it records is seen by the creating replica between
//! the steps of the task (each `wait` it sends itself, at most `maxWaitMs` long), which then aborts the run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codemode::store::{FleetBackend, StoreError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, DetailedTask, JsonObject, ServerNotification, Task,
    TaskPayload, TaskStatus, TaskStatusNotificationParams,
};
use rmcp::task_manager::current_timestamp;
use rmcp::{ErrorData, Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The polling interval a task suggests, in milliseconds.
const POLL_INTERVAL_MS: u64 = 500;

/// One task: whose it is, its state, and how to cancel its run.
struct Entry {
    owner: Option<String>,
    task: Task,
    /// The terminal payload once the task ended.
    terminal: Option<Terminal>,
    ended_at: Option<Instant>,
    cancel: Arc<Cancel>,
}

/// How a task ended, with its result or error as JSON text (a third of the memory of a `serde_json::Value` tree).
#[derive(Clone)]
enum Terminal {
    Completed(Arc<str>),
    Failed(Arc<str>),
    Cancelled,
}

impl Terminal {
    fn of(payload: &TaskPayload) -> Terminal {
        let text = |object: &JsonObject| Arc::from(serde_json::to_string(object).unwrap_or_else(|_| "{}".to_owned()));
        match payload {
            TaskPayload::Completed { result } => Terminal::Completed(text(result)),
            TaskPayload::Failed { error } => Terminal::Failed(text(error)),
            _ => Terminal::Cancelled,
        }
    }

    fn payload(&self) -> TaskPayload {
        let object = |text: &str| serde_json::from_str::<JsonObject>(text).unwrap_or_default();
        match self {
            Terminal::Completed(result) => TaskPayload::Completed { result: object(result) },
            Terminal::Failed(error) => TaskPayload::Failed { error: object(error) },
            Terminal::Cancelled => TaskPayload::Cancelled,
        }
    }

    /// The bytes it keeps.
    fn bytes(&self) -> u64 {
        match self {
            Terminal::Completed(text) | Terminal::Failed(text) => text.len() as u64,
            Terminal::Cancelled => 0,
        }
    }
}

/// What the finished tasks of one owner may keep: at most `tasks` of them and `bytes` of results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinishedShare {
    /// Finished tasks (`[auth] max_finished_tasks`).
    pub tasks: usize,
    /// Bytes of their results' JSON (`[auth] max_finished_task_bytes`).
    pub bytes: u64,
}

/// A task's cancellation: the flag the task's loop reads, and the signal its current `exec`/`wait` waits on.
#[derive(Default)]
pub struct Cancel {
    /// The task's id.
    id: String,
    requested: AtomicBool,
    signal: Notify,
}

impl Cancel {
    /// Whether `tasks/cancel` arrived (at this replica).
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// The id of the task.
    pub fn id(&self) -> &str {
        &self.id
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
    /// The fleet store, with `[store]`: where every replica finds the tasks.
    shared: Option<Arc<dyn FleetBackend>>,
    /// What each owner's finished tasks may keep (with `[auth]`); `None`: everything, until the TTL.
    finished_share: Option<FinishedShare>,
}

/// The store session that holds task `id`'s record.
fn session(id: &str) -> String {
    format!("codemode/task/{id}")
}

/// The record key of a task (written by its creating replica).
const RECORD: &str = "task";
/// The key of a cancel recorded by another replica.
const CANCEL: &str = "cancel";

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
    /// With `shared` (the fleet store), every task is also recorded there for the other replicas.
    pub fn new(ttl: Duration, shared: Option<Arc<dyn FleetBackend>>) -> Self {
        Tasks { entries: Mutex::new(HashMap::new()), ttl, shared, finished_share: None }
    }

    /// Bounds what each owner's finished tasks keep (`None`: no bound but the TTL).
    #[must_use]
    pub fn with_finished_share(mut self, share: Option<FinishedShare>) -> Self {
        self.finished_share = share;
        self
    }

    /// Starts `operation` as a task of `owner`; when it ends, the task's terminal state is recorded and `peer` (the
    /// session that created it) is sent `notifications/tasks`. Returns the task as it starts (`working`), once the
    /// fleet store (with `[store]`) holds it.
    ///
    /// # Errors
    ///
    /// `internal_error` when the fleet store cannot record the task (nothing was started).
    pub async fn spawn<F, Fut>(
        self: &Arc<Self>,
        owner: Option<String>,
        peer: Peer<RoleServer>,
        operation: F,
    ) -> Result<Task, ErrorData>
    where
        F: FnOnce(Arc<Cancel>) -> Fut,
        Fut: std::future::Future<Output = Outcome> + Send + 'static,
    {
        let id = uuid::Uuid::new_v4().to_string();
        let now = current_timestamp();
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_ttl_ms(ttl_ms(self.ttl))
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        let cancel = Arc::new(Cancel { id: id.clone(), ..Cancel::default() });
        let entry = Entry { owner, task: task.clone(), terminal: None, ended_at: None, cancel: cancel.clone() };
        self.record(&id, &entry).await?;
        {
            let mut entries = lock(&self.entries);
            self.sweep(&mut entries);
            entries.insert(id.clone(), entry);
        }
        let future = operation(cancel);
        let tasks = self.clone();
        tokio::spawn(async move {
            let outcome = future.await;
            let (ended, dropped) = tasks.finish(&id, outcome);
            if let Some(store) = &tasks.shared {
                // Dropped from the owner's share here, gone for every replica; one that cannot be deleted expires
                // with its TTL.
                for old in dropped {
                    let _ = store.session_remove(&session(&old), RECORD).await;
                }
            }
            if let Some((detailed, entry)) = ended {
                // Another replica's `tasks/get` reads the end from the store; a store that fails here leaves the
                // record `working` there (this replica still answers from memory).
                if let Err(e) = tasks.record(&id, &entry).await {
                    eprintln!("codemode gateway: task {id} ended, but {}", e.message);
                }
                let params = TaskStatusNotificationParams::new(detailed);
                let notification = ServerNotification::TaskStatusNotification(rmcp::model::Notification::new(params));
                // A client that went away learns the state by polling, if ever.
                let _ = peer.send_notification(notification).await;
            }
        });
        Ok(task)
    }

    /// Records how task `id` ended; the task as `tasks/get` now shows it and a copy of its entry's record, and the
    /// ids of the owner's older finished tasks dropped to keep it within its share.
    fn finish(&self, id: &str, outcome: Outcome) -> (Option<(DetailedTask, Entry)>, Vec<String>) {
        let payload = match outcome {
            Outcome::Result(result) => TaskPayload::Completed { result: object(&result) },
            Outcome::Error(error) => TaskPayload::Failed { error: object(&error) },
            Outcome::Cancelled => TaskPayload::Cancelled,
        };
        let terminal = Terminal::of(&payload);
        let mut entries = lock(&self.entries);
        let Some(entry) = entries.get_mut(id) else { return (None, Vec::new()) };
        entry.terminal = Some(terminal);
        entry.ended_at = Some(Instant::now());
        entry.task.last_updated_at = current_timestamp();
        let copy = Entry {
            owner: entry.owner.clone(),
            task: entry.task.clone(),
            terminal: entry.terminal.clone(),
            ended_at: entry.ended_at,
            cancel: entry.cancel.clone(),
        };
        let detailed = DetailedTask::new(entry.task.clone(), payload);
        let dropped = match self.finished_share {
            Some(share) => keep_within(&mut entries, &copy.owner, share),
            None => Vec::new(),
        };
        (Some((detailed, copy)), dropped)
    }

    /// Writes the record of a task this replica created to the fleet store (nothing without one).
    async fn record(&self, id: &str, entry: &Entry) -> Result<(), ErrorData> {
        let Some(store) = &self.shared else { return Ok(()) };
        let ended_ms = entry.ended_at.map(|_| now_ms());
        let record = json!({ "owner": entry.owner, "task": detailed(entry), "endedAtMs": ended_ms });
        store
            .session_put(&session(id), RECORD, &record, 2)
            .await
            .map_err(|e| ErrorData::internal_error(format!("the fleet store cannot record task {id}: {e}"), None))
    }

    /// The record of task `id` in the fleet store, if `owner` may see it and it has not expired.
    async fn shared_record(&self, id: &str, owner: &Option<String>) -> Result<Option<DetailedTask>, ErrorData> {
        let Some(store) = &self.shared else { return Ok(None) };
        let failed =
            |e: StoreError| ErrorData::internal_error(format!("the fleet store cannot read task {id}: {e}"), None);
        let Some(record) = store.session_get(&session(id), RECORD).await.map_err(failed)? else { return Ok(None) };
        let record_owner: Option<String> = serde_json::from_value(record["owner"].clone()).unwrap_or(None);
        if record_owner != *owner {
            return Ok(None);
        }
        let Ok(mut task) = serde_json::from_value::<DetailedTask>(record["task"].clone()) else { return Ok(None) };
        if task.status() == TaskStatus::Working {
            if store.session_get(&session(id), CANCEL).await.map_err(failed)?.is_some() {
                task.task.status_message = Some(CANCELLING.to_owned());
            }
        } else if record["endedAtMs"].as_u64().is_some_and(|ended| now_ms().saturating_sub(ended) > ttl_ms(self.ttl)) {
            return Ok(None);
        }
        Ok(Some(task))
    }

    /// Whether another replica recorded `tasks/cancel` for task `id` (never without a fleet store).
    pub async fn cancelled_elsewhere(&self, id: &str) -> bool {
        let Some(store) = &self.shared else { return false };
        matches!(store.session_get(&session(id), CANCEL).await, Ok(Some(_)))
    }

    /// `tasks/get` for `owner`: this replica's task, or (with `[store]`) another replica's.
    ///
    /// # Errors
    ///
    /// `invalid_params` for a task that does not exist, expired, or is another caller's; `internal_error` when the
    /// fleet store cannot be read.
    pub async fn get(&self, id: &str, owner: &Option<String>) -> Result<DetailedTask, ErrorData> {
        {
            let mut entries = lock(&self.entries);
            self.sweep(&mut entries);
            match entries.get(id) {
                Some(entry) if entry.owner == *owner => return Ok(detailed(entry)),
                Some(_) => return Err(unknown(id, self.finished_share)),
                None => {}
            }
        }
        self.shared_record(id, owner).await?.ok_or_else(|| unknown(id, self.finished_share))
    }

    /// `tasks/cancel` for `owner`: the task's run is aborted (an ended task stays as it ended). Another replica's
    /// task is cancelled by recording the cancel in the fleet store; its replica aborts the run between two steps.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub async fn cancel(&self, id: &str, owner: &Option<String>) -> Result<(), ErrorData> {
        {
            let mut entries = lock(&self.entries);
            self.sweep(&mut entries);
            match entries.get_mut(id) {
                Some(entry) if entry.owner == *owner => {
                    if entry.terminal.is_none() {
                        entry.cancel.requested.store(true, Ordering::SeqCst);
                        entry.cancel.signal.notify_one();
                        entry.task.status_message = Some(CANCELLING.to_owned());
                        entry.task.last_updated_at = current_timestamp();
                    }
                    return Ok(());
                }
                Some(_) => return Err(unknown(id, self.finished_share)),
                None => {}
            }
        }
        let task = self.shared_record(id, owner).await?.ok_or_else(|| unknown(id, self.finished_share))?;
        if task.status() == TaskStatus::Working
            && let Some(store) = &self.shared
        {
            let at = json!({ "requestedAt": current_timestamp() });
            store.session_put(&session(id), CANCEL, &at, 2).await.map_err(|e| {
                ErrorData::internal_error(format!("the fleet store cannot record the cancel of task {id}: {e}"), None)
            })?;
        }
        Ok(())
    }

    /// Drops tasks that ended longer than the TTL ago.
    fn sweep(&self, entries: &mut HashMap<String, Entry>) {
        entries.retain(|_, entry| entry.ended_at.is_none_or(|ended| ended.elapsed() < self.ttl));
    }
}

/// The status message of a task whose cancel arrived and whose run is being aborted.
const CANCELLING: &str = "cancelling: the run is being aborted";

/// Milliseconds since the Unix epoch, as the fleet's records keep time.
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

fn detailed(entry: &Entry) -> DetailedTask {
    let payload = entry.terminal.as_ref().map_or(TaskPayload::Working, Terminal::payload);
    DetailedTask::new(entry.task.clone(), payload)
}

/// Drops `owner`'s oldest finished tasks until it keeps at most `share.tasks` of them and `share.bytes` of results,
/// never its newest; returns the ids dropped. Tasks still working and other owners' tasks are not touched.
fn keep_within(entries: &mut HashMap<String, Entry>, owner: &Option<String>, share: FinishedShare) -> Vec<String> {
    let mut finished: Vec<(Instant, u64, &String)> = entries
        .iter()
        .filter(|(_, e)| e.owner == *owner)
        .filter_map(|(id, e)| Some((e.ended_at?, e.terminal.as_ref()?.bytes(), id)))
        .collect();
    finished.sort_by_key(|(ended, ..)| *ended);
    let (mut count, mut bytes) = (finished.len(), finished.iter().map(|(_, b, _)| b).sum::<u64>());
    let mut dropped = Vec::new();
    for (_, size, id) in &finished {
        if count <= 1 || (count <= share.tasks && bytes <= share.bytes) {
            break;
        }
        count -= 1;
        bytes -= size;
        dropped.push((*id).clone());
    }
    for id in &dropped {
        entries.remove(id);
    }
    dropped
}

fn object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

fn unknown(id: &str, share: Option<FinishedShare>) -> ErrorData {
    let dropped = match share {
        Some(share) => format!(
            ", or newer tasks of yours finished since (each principal keeps its newest {} finished tasks and {} bytes \
             of their results: [auth] max_finished_tasks and max_finished_task_bytes)",
            share.tasks, share.bytes
        ),
        None => String::new(),
    };
    ErrorData::invalid_params(
        format!(
            "unknown task \"{id}\": it never existed here, it ended longer ago than its ttlMs, or it is not \
             yours{dropped}"
        ),
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

/// Whether a `CodeModeResult` (as JSON) is a run parked on approvals a person answers elsewhere (the console):
/// a task keeps it going with `wait`, which holds until they decide. Returns its run id.
pub fn parked_on_approvals(result: &Value) -> Option<&str> {
    (result.get("status").and_then(Value::as_str) == Some("waiting")
        && result.get("reason").and_then(Value::as_str) == Some("approval"))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(owner: &str, id: &str, bytes: usize, at: Instant) -> (String, Entry) {
        let now = current_timestamp();
        let entry = Entry {
            owner: Some(owner.to_owned()),
            task: Task::new(id.to_owned(), TaskStatus::Completed, now.clone(), now),
            terminal: Some(Terminal::Completed(Arc::from("x".repeat(bytes)))),
            ended_at: Some(at),
            cancel: Arc::new(Cancel::default()),
        };
        (id.to_owned(), entry)
    }

    #[test]
    fn an_owner_keeps_its_newest_finished_tasks_within_its_share_and_no_one_else_loses_any() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut entries: HashMap<String, Entry> = [
            finished("alice", "a1", 10, at(1)),
            finished("alice", "a2", 10, at(2)),
            finished("bob", "b1", 10, at(0)),
            finished("alice", "a3", 10, at(3)),
        ]
        .into_iter()
        .collect();
        let mut working = finished("alice", "a0", 0, at(0));
        (working.1.terminal, working.1.ended_at) = (None, None);
        entries.insert(working.0, working.1);
        let alice = Some("alice".to_owned());

        let dropped = keep_within(&mut entries, &alice, FinishedShare { tasks: 2, bytes: 1000 });
        assert_eq!(dropped, vec!["a1".to_owned()], "the oldest finished task goes first");
        assert!(entries.contains_key("a0") && entries.contains_key("b1"), "working tasks and bob's stay");

        entries.extend([finished("alice", "a4", 500, at(4))]);
        let dropped = keep_within(&mut entries, &alice, FinishedShare { tasks: 10, bytes: 100 });
        assert_eq!(dropped, vec!["a2".to_owned(), "a3".to_owned()], "past the bytes, the oldest go until it fits");
        assert!(entries.contains_key("a4"), "the newest stays even alone over the bytes");
        assert_eq!(entries.len(), 3);
    }
}
