//! The `CodeModeResult` union every `exec` and `wait` returns, with the seed's field names.
//!
//! Guest failures are data: a program that throws, times out or passes a limit is a `Failed` value, never a Rust
//! error. `Failed` always says which phase failed and whether any bridge work was dispatched, so a host knows
//! whether anything may have had an effect.

use codemode_telemetry::Telemetry;
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
}

impl OutputItem {
    /// UTF-8 bytes this item costs against the output budget (its compact JSON encoding).
    pub fn encoded_len(&self) -> usize {
        crate::json_len(self)
    }
}

/// Failure codes of a cell, as the seed names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The run was cancelled by the host.
    Aborted,
    /// The input, source or a guest request was invalid; the model can fix it.
    InvalidInput,
    /// The executor could not start or the run is no longer available.
    RuntimeUnavailable,
    /// The wall-clock or instruction budget ran out.
    Timeout,
    /// The guest passed its memory limit.
    MemoryLimitExceeded,
    /// Output could not fit the output budget even truncated.
    OutputLimitExceeded,
    /// The checkpoint of a suspended run passed `maxSnapshotBytes`.
    SnapshotLimitExceeded,
    /// The guest program threw (or rejected) and did not catch it.
    GuestError,
    /// A fault of ours: a crashed worker, a replay divergence, a broken invariant.
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
            ErrorCode::MemoryLimitExceeded => "memory_limit_exceeded",
            ErrorCode::OutputLimitExceeded => "output_limit_exceeded",
            ErrorCode::SnapshotLimitExceeded => "snapshot_limit_exceeded",
            ErrorCode::GuestError => "guest_error",
            ErrorCode::InternalError => "internal_error",
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
    /// Counters for the run.
    pub telemetry: Telemetry,
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
    /// Whether every tool the run called is replay-safe.
    pub replay_safe: bool,
    /// Output not delivered by an earlier call of this run.
    #[serde(default)]
    pub output: Vec<OutputItem>,
    /// Counters for the run.
    pub telemetry: Telemetry,
}

/// A run that failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failed {
    /// What went wrong, for the model.
    pub error: String,
    /// The failure code.
    pub code: ErrorCode,
    /// Where it failed.
    pub failure_phase: FailurePhase,
    /// Whether any bridge request was dispatched to the host before the failure.
    pub bridge_dispatch_started: bool,
    /// Output not delivered by an earlier call of this run.
    #[serde(default)]
    pub output: Vec<OutputItem>,
    /// Counters for the run.
    pub telemetry: Telemetry,
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

    /// The failure, if this result is one.
    pub fn as_failed(&self) -> Option<&Failed> {
        match self {
            CodeModeResult::Failed(f) => Some(f),
            _ => None,
        }
    }

    /// A failure with no output, in the given phase.
    pub fn failed(code: ErrorCode, phase: FailurePhase, error: impl Into<String>, telemetry: Telemetry) -> Self {
        CodeModeResult::Failed(Failed {
            error: error.into(),
            code,
            failure_phase: phase,
            bridge_dispatch_started: false,
            output: Vec::new(),
            telemetry,
        })
    }
}
