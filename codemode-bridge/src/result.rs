//! The `CodeModeResult` union every `exec` and `wait` returns, with the seed's field names.
//!
//! Guest failures are data: a program that throws, times out or passes a limit is a `Failed` value, never a Rust
//! error. `Failed` always says which phase failed and whether any bridge work was dispatched, so a host knows
//! whether anything may have had an effect.

use codemode_telemetry::{Activity, Telemetry};
use serde::{Deserialize, Serialize};

/// One item of program output, in the order the program produced it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum OutputItem {
    /// `text(v)` and captured `console.*` lines.
    Text {
        /// The text.
        text: String,
    },
    /// `json(v)`.
    Json {
        /// The JSON-safe value.
        value: serde_json::Value,
    },
    /// `attach(block)`: an MCP content block (an image, audio, a resource link or an embedded resource) the
    /// program hands to the caller as it is; a gateway puts it in the `exec` result's `content`. An image or audio
    /// block may be a host's handle instead of its bytes (`attachment` and `bytes` in place of `data`: the host kept
    /// the bytes when the tool answered). It costs its encoded size (a handle: plus its `bytes`) against the output
    /// budget, and one that does not fit is refused whole (a text item says so).
    Attachment {
        /// The content block, `{"type": "image", "data": ..., "mimeType": ...}` and the like.
        block: serde_json::Value,
    },
}

/// The content block types `attach(block)` accepts, with the string fields each must have (for an image or audio
/// handle, `attachment` stands in for `data`).
pub const ATTACHMENT_TYPES: &[(&str, &[&str])] = &[
    ("image", &["data", "mimeType"]),
    ("audio", &["data", "mimeType"]),
    ("resource_link", &["uri", "name"]),
    ("resource", &[]),
];

/// Why `block` is not a content block `attach` accepts, if it is not: an object whose `type` is one of
/// [`ATTACHMENT_TYPES`] with that type's string fields (an embedded `resource` needs a `resource` object with a
/// `uri`).
pub fn attachment_problem(block: &serde_json::Value) -> Option<String> {
    let kinds = || ATTACHMENT_TYPES.iter().map(|(t, _)| format!("\"{t}\"")).collect::<Vec<_>>().join(", ");
    let Some(kind) = block.get("type").and_then(serde_json::Value::as_str) else {
        return Some(format!("attach(block) takes an MCP content block: an object whose type is one of {}", kinds()));
    };
    let Some((_, fields)) = ATTACHMENT_TYPES.iter().find(|(t, _)| *t == kind) else {
        return Some(format!(
            "attach(block) takes an image, audio, resource_link or resource block, not type \"{kind}\" (one of {}); \
             text goes through text(v) or the return value",
            kinds()
        ));
    };
    let handle = block.get("attachment").is_some_and(serde_json::Value::is_string);
    let present =
        |field: &str| block.get(field).is_some_and(serde_json::Value::is_string) || (field == "data" && handle);
    if let Some(missing) = fields.iter().find(|f| !present(f)) {
        return Some(format!("attach(block): a \"{kind}\" block needs a string \"{missing}\""));
    }
    if kind == "resource" && !block.get("resource").and_then(|r| r.get("uri")).is_some_and(serde_json::Value::is_string)
    {
        return Some("attach(block): a \"resource\" block needs a \"resource\" object with a string \"uri\"".into());
    }
    None
}

impl OutputItem {
    /// UTF-8 bytes this item costs against the output budget: its compact JSON encoding, plus, for an attachment
    /// that is a host's handle (`attachment`), the `bytes` the host keeps for it.
    pub fn encoded_len(&self) -> usize {
        let held = match self {
            OutputItem::Attachment { block } if block.get("attachment").is_some() => block
                .get("bytes")
                .and_then(serde_json::Value::as_u64)
                .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX)),
            _ => 0,
        };
        crate::json_len(self).saturating_add(held)
    }
}

/// Failure codes of a cell: exactly the seed's closed union, so a client that switches on `code` keeps working.
/// What a code does not say (an uncaught throw, the memory limit) is in the result's [`ErrorKind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The run was cancelled by the caller.
    Aborted,
    /// The input, source or a guest request was invalid, or the run is unknown, expired or another's; the model
    /// can fix it.
    InvalidInput,
    /// The executor could not start, or its worker ended in a way the host did not cause.
    RuntimeUnavailable,
    /// The execution deadline (`timeoutMs`, wall clock) passed.
    Timeout,
    /// Output could not fit the output budget even truncated.
    OutputLimitExceeded,
    /// The checkpoint of a suspended run passed `maxSnapshotBytes`.
    SnapshotLimitExceeded,
    /// Everything else: an uncaught throw, an unhandled rejection, the memory limit, a fault of ours.
    InternalError,
}

impl ErrorCode {
    /// The wire spelling, e.g. `invalid_input`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Aborted => "aborted",
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::RuntimeUnavailable => "runtime_unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::OutputLimitExceeded => "output_limit_exceeded",
            ErrorCode::SnapshotLimitExceeded => "snapshot_limit_exceeded",
            ErrorCode::InternalError => "internal_error",
        }
    }
}

/// The cause of a failure, finer than its [`ErrorCode`]: the `errorKind` field of a failed result. Each kind
/// belongs to exactly one code ([`ErrorKind::code`]); a kind named like a code is that code's plain case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// Code `aborted`.
    Aborted,
    /// Code `invalid_input`.
    InvalidInput,
    /// Code `runtime_unavailable`: the worker could not start or ended for a reason the host did not cause.
    RuntimeUnavailable,
    /// Code `timeout`.
    Timeout,
    /// Code `output_limit_exceeded`.
    OutputLimitExceeded,
    /// Code `snapshot_limit_exceeded`.
    SnapshotLimitExceeded,
    /// Code `internal_error`: a fault of ours (a broken invariant, a replay divergence).
    InternalError,
    /// Code `internal_error`: the program threw (or its promise rejected) and did not catch it, or it awaits a
    /// promise nothing can settle any more.
    GuestError,
    /// Code `internal_error`: a promise rejected with no handler attached by the time the cell ended.
    UnhandledRejection,
    /// Code `internal_error`: the program passed `memoryLimitBytes` or the worker's stack.
    MemoryLimitExceeded,
    /// Code `internal_error`: an uncatchable engine limit (recursion depth, loop iterations).
    EngineLimit,
}

impl ErrorKind {
    /// The closed code this kind reports under.
    pub fn code(self) -> ErrorCode {
        match self {
            ErrorKind::Aborted => ErrorCode::Aborted,
            ErrorKind::InvalidInput => ErrorCode::InvalidInput,
            ErrorKind::RuntimeUnavailable => ErrorCode::RuntimeUnavailable,
            ErrorKind::Timeout => ErrorCode::Timeout,
            ErrorKind::OutputLimitExceeded => ErrorCode::OutputLimitExceeded,
            ErrorKind::SnapshotLimitExceeded => ErrorCode::SnapshotLimitExceeded,
            ErrorKind::InternalError
            | ErrorKind::GuestError
            | ErrorKind::UnhandledRejection
            | ErrorKind::MemoryLimitExceeded
            | ErrorKind::EngineLimit => ErrorCode::InternalError,
        }
    }

    /// The wire spelling, e.g. `memory_limit_exceeded`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::GuestError => "guest_error",
            ErrorKind::UnhandledRejection => "unhandled_rejection",
            ErrorKind::MemoryLimitExceeded => "memory_limit_exceeded",
            ErrorKind::EngineLimit => "engine_limit",
            other => other.code().as_str(),
        }
    }
}

impl From<ErrorCode> for ErrorKind {
    /// A code's plain case.
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::Aborted => ErrorKind::Aborted,
            ErrorCode::InvalidInput => ErrorKind::InvalidInput,
            ErrorCode::RuntimeUnavailable => ErrorKind::RuntimeUnavailable,
            ErrorCode::Timeout => ErrorKind::Timeout,
            ErrorCode::OutputLimitExceeded => ErrorKind::OutputLimitExceeded,
            ErrorCode::SnapshotLimitExceeded => ErrorKind::SnapshotLimitExceeded,
            ErrorCode::InternalError => ErrorKind::InternalError,
        }
    }
}

/// Where a failure happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePhase {
    /// Before the program ran: the input or the source was rejected.
    Input,
    /// Inside the program.
    Guest,
    /// While moving a request or a reply across the bridge.
    Bridge,
    /// In the host: the worker, the store, the deadline.
    Host,
}

/// Why a run is waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Bridge requests were still pending at the deadline.
    PendingTools,
    /// The program called `yield_control`.
    Yield,
    /// A nested call waits for a person's approval that nobody could give within this call (the approver
    /// deferred it); `pendingApprovals` lists it, and a `wait` that carries the answer resumes the run.
    Approval,
}

/// A nested call whose approval is pending when its run parked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    /// The call id, `bridge:<method>:<n>`: the key of its answer in a later `wait`.
    pub call_id: String,
    /// The tool's own name (for MCP tools, the upstream tool name).
    pub tool: String,
    /// The callable path the program used, e.g. `MCP.fs.write_file` or `send_email`.
    pub path: String,
    /// The arguments as JSON text, redacted and capped in size (a cut preview ends with `…`).
    pub preview: String,
}

/// A write-class nested call that may have had its effect, as the host recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteEffect {
    /// The tool's own name.
    pub tool: String,
    /// The call id, `bridge:<method>:<n>`.
    pub call_id: String,
    /// `completed` or `uncertain`.
    pub status: crate::EffectStatus,
    /// The arguments as JSON text, redacted and capped in size (a cut preview ends with `…`).
    pub preview: String,
}

/// What the host knows about the effects of a cell's write-class nested calls, across all its waits. Only the
/// host writes these; nothing the program returns can set them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectFacts {
    /// No write-class call reached its tool (every write was `not_started`): retrying cannot repeat an effect.
    #[serde(default = "yes")]
    pub mutation_free: bool,
    /// Writes the tool answered successfully (this and the other counts are omitted when zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub completed_writes: u32,
    /// Writes the tool answered with an error.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_writes: u32,
    /// Writes that reached the tool without an answer the host saw (timed out, aborted, process died).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub uncertain_writes: u32,
    /// On failed results: the `completed` and `uncertain` writes, to inspect before retrying.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<WriteEffect>,
    /// Every nested tool call of the cell (reads and writes) by the effect status the host recorded for it;
    /// omitted when the cell made none.
    #[serde(default, skip_serializing_if = "CallCounts::is_empty")]
    pub calls: CallCounts,
}

/// Nested tool calls (catalog tools and MCP namespace calls) by effect status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallCounts {
    /// Refused before they reached their tool: denied, or invalid input.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_started: u32,
    /// Answered by their tool.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub completed: u32,
    /// Answered by their tool with an error.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u32,
    /// Reached their tool without an answer the host saw (timed out, aborted, the tool host or process died).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub uncertain: u32,
}

impl CallCounts {
    /// Counts one call with `status`.
    pub fn add(&mut self, status: crate::EffectStatus) {
        let n = match status {
            crate::EffectStatus::NotStarted => &mut self.not_started,
            crate::EffectStatus::Completed => &mut self.completed,
            crate::EffectStatus::Failed => &mut self.failed,
            crate::EffectStatus::Uncertain => &mut self.uncertain,
        };
        *n = n.saturating_add(1);
    }

    /// Whether no call was counted.
    pub fn is_empty(&self) -> bool {
        *self == CallCounts::default()
    }
}

fn yes() -> bool {
    true
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Default for EffectFacts {
    /// No write reached a tool.
    fn default() -> Self {
        EffectFacts {
            mutation_free: true,
            completed_writes: 0,
            failed_writes: 0,
            uncertain_writes: 0,
            writes: Vec::new(),
            calls: CallCounts::default(),
        }
    }
}

/// A bridge request still in flight when a run parked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingToolCall {
    /// `bridge:<method>:<per-method sequence>`.
    pub id: String,
    /// The bridge method, e.g. `callValue`.
    pub method: String,
}

/// A run that finished.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completed {
    /// The program's return value, JSON-safe (or a truncation marker).
    pub value: serde_json::Value,
    /// Non-fatal notes for the model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Output not delivered by an earlier call of this run.
    #[serde(default)]
    pub output: Vec<OutputItem>,
    /// The host's record of the cell's write-class calls (counts only; `writes` stays empty).
    #[serde(flatten)]
    pub effects: EffectFacts,
    /// Counters for the run.
    pub telemetry: Telemetry,
    /// What the run's nested calls did during this call, for the library caller ([`CodeModeResult::activity`]);
    /// in the JSON only when the caller asked for it, so the model's payload does not grow.
    #[serde(default, skip_serializing_if = "Activity::hidden")]
    pub activity: Option<Box<Activity>>,
}

/// A run that parked and can be resumed with `wait`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// The handle for `wait`, `cm_<uuid>`.
    pub run_id: String,
    /// Why the run parked.
    pub reason: WaitReason,
    /// Requests still in flight.
    #[serde(default)]
    pub pending_tool_calls: Vec<PendingToolCall>,
    /// Calls waiting for a person's approval; answer them in the `wait` that resumes the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<PendingApproval>,
    /// Whether every tool the run called is replay-safe.
    pub replay_safe: bool,
    /// Notes for the model; the untrusted-content notice when the run read MCP content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Output not delivered by an earlier call of this run.
    #[serde(default)]
    pub output: Vec<OutputItem>,
    /// Counters for the run.
    pub telemetry: Telemetry,
    /// What the run's nested calls did during this call, for the library caller ([`CodeModeResult::activity`]);
    /// in the JSON only when the caller asked for it, so the model's payload does not grow.
    #[serde(default, skip_serializing_if = "Activity::hidden")]
    pub activity: Option<Box<Activity>>,
}

/// A run that failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failed {
    /// What went wrong, for the model.
    pub error: String,
    /// The failure code, one of the seed's closed union.
    pub code: ErrorCode,
    /// The cause within `code`, e.g. `guest_error` or `memory_limit_exceeded` under `internal_error`.
    pub error_kind: ErrorKind,
    /// Where it failed.
    pub failure_phase: FailurePhase,
    /// Whether any bridge request was dispatched to the host before the failure.
    pub bridge_dispatch_started: bool,
    /// Notes for the model; the untrusted-content notice when the run read MCP content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Output not delivered by an earlier call of this run.
    #[serde(default)]
    pub output: Vec<OutputItem>,
    /// The host's record of the cell's write-class calls across all its waits: `mutationFree`, the counts, and
    /// the completed or uncertain writes to inspect before retrying.
    #[serde(flatten)]
    pub effects: EffectFacts,
    /// Counters for the run.
    pub telemetry: Telemetry,
    /// What the run's nested calls did during this call, for the library caller ([`CodeModeResult::activity`]);
    /// in the JSON only when the caller asked for it, so the model's payload does not grow.
    #[serde(default, skip_serializing_if = "Activity::hidden")]
    pub activity: Option<Box<Activity>>,
}

/// What every `exec` and `wait` returns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum CodeModeResult {
    /// The program finished.
    Completed(Completed),
    /// The program parked; resume it with `wait`.
    Waiting(Waiting),
    /// The program failed.
    Failed(Failed),
}

impl CodeModeResult {
    /// The status string: `completed`, `waiting` or `failed`.
    pub fn status(&self) -> &'static str {
        match self {
            CodeModeResult::Completed(_) => "completed",
            CodeModeResult::Waiting(_) => "waiting",
            CodeModeResult::Failed(_) => "failed",
        }
    }

    /// The output items of this result.
    pub fn output(&self) -> &[OutputItem] {
        match self {
            CodeModeResult::Completed(c) => &c.output,
            CodeModeResult::Waiting(w) => &w.output,
            CodeModeResult::Failed(f) => &f.output,
        }
    }

    /// What the run's nested calls did during this `exec` or `wait`: each call's ids, tool, timing, status, effect
    /// and redacted previews, replayed calls marked. `None` for a call that ran no program (refused input, an
    /// unknown run), and for a cell nobody asked to record (see `CodeModeBuilder::keep_activity`).
    pub fn activity(&self) -> Option<&Activity> {
        match self {
            CodeModeResult::Completed(c) => c.activity.as_deref(),
            CodeModeResult::Waiting(w) => w.activity.as_deref(),
            CodeModeResult::Failed(f) => f.activity.as_deref(),
        }
    }

    /// Sets the activity of this result.
    pub fn set_activity(&mut self, activity: Option<Activity>) {
        let slot = match self {
            CodeModeResult::Completed(c) => &mut c.activity,
            CodeModeResult::Waiting(w) => &mut w.activity,
            CodeModeResult::Failed(f) => &mut f.activity,
        };
        *slot = activity.map(Box::new);
    }

    /// The failure, if this result is one.
    pub fn as_failed(&self) -> Option<&Failed> {
        match self {
            CodeModeResult::Failed(f) => Some(f),
            _ => None,
        }
    }

    /// A failure with no output, in the given phase; `kind` is an [`ErrorKind`] or an [`ErrorCode`]'s plain case.
    pub fn failed(
        kind: impl Into<ErrorKind>,
        phase: FailurePhase,
        error: impl Into<String>,
        telemetry: Telemetry,
    ) -> Self {
        let error_kind = kind.into();
        CodeModeResult::Failed(Failed {
            error: error.into(),
            code: error_kind.code(),
            error_kind,
            failure_phase: phase,
            bridge_dispatch_started: false,
            warnings: Vec::new(),
            output: Vec::new(),
            effects: EffectFacts::default(),
            telemetry,
            activity: None,
        })
    }
}
