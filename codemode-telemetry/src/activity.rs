//! The activity record of a run: one [`CallRecord`] per nested tool call (who, when, how long, how it ended, what it
//! did to the world, whether it ran live or was replayed, and redacted previews of its arguments and result), the
//! bounded [`ActivityLog`] a parked run keeps in its checkpoint, the [`Activity`] returned with each result, and the
//! [`ActivityEvent`]s a host receives as calls start, report progress and finish.
//!
//! Pure data: nothing here runs a call or reads a clock. Invariant: everything in these types is meant for people
//! and is redacted before it is put here (the recorder in `codemode-run` does that); a log never holds more than its
//! [`ActivityLimits`], and what it drops is counted.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Bounds of a run's activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActivityLimits {
    /// Finished calls a run keeps (default 256); later ones are counted in [`Dropped`], not kept.
    pub max_calls: usize,
    /// Bytes of JSON the kept records of a run may take together (default 256 KiB); a record that does not fit
    /// is counted in [`Dropped`], not kept.
    pub max_bytes: usize,
    /// Bytes of each preview: a call's arguments, its result, its error message (default 512).
    pub preview_bytes: usize,
    /// Bytes of the redacted source an [`Activity`] shows (default 16 KiB); 0 leaves the source out.
    pub source_bytes: usize,
}

impl Default for ActivityLimits {
    fn default() -> Self {
        ActivityLimits { max_calls: 256, max_bytes: 256 * 1024, preview_bytes: 512, source_bytes: 16 * 1024 }
    }
}

/// How a nested call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// The call settled with a value.
    Ok,
    /// The call settled with an error (`errorCode` says which).
    Error,
}

/// What a nested call did to the world, as far as the host knows (the wire spelling of the bridge's effect status).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallEffect {
    /// The call never reached its tool (refused, denied, invalid).
    NotStarted,
    /// The tool ran and returned.
    Completed,
    /// The tool ran and reported a failure.
    Failed,
    /// The call reached its tool and nobody knows whether it had its effect (interrupted, cancelled).
    Uncertain,
}

/// A nested call as it starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallStart {
    /// The call id, `bridge:<method>:<n>`, as the tool host's `CallContext::request_id` carries it.
    pub call_id: String,
    /// The run the call belongs to (its parent).
    pub run_id: String,
    /// The cell of the run that made the call: 1 for the `exec`, 2 for the first `wait` that resumed it, and so on.
    pub cell: u32,
    /// The tool's own name (for MCP tools, the upstream tool name; for MCP namespace operations, the operation).
    pub tool: String,
    /// The callable path the program used, e.g. `read_file`, `MCP.fs.read_file` or `MCP.fs.resources.list`.
    pub path: String,
    /// The MCP server, for MCP calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// When the host received the call (epoch ms, the engine's clock).
    pub started_at_ms: u64,
    /// The arguments as compact JSON, redacted and capped (a cut preview ends with `…`).
    pub args: String,
    /// Whether this is a replayed call: a resume by replay delivered its recorded result again, without running
    /// its tool.
    #[serde(default, skip_serializing_if = "is_false")]
    pub replayed: bool,
}

/// A nested call that finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// Who, what and when.
    #[serde(flatten)]
    pub start: CallStart,
    /// From the start to the settlement (ms, the engine's clock).
    pub duration_ms: u64,
    /// `ok` or `error`.
    pub status: CallStatus,
    /// The error's code (`tool_error`, `denied`, `interrupted`, a host's own code), for `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The error's message, redacted and capped, for `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the call did to the world, as far as the host knows.
    pub effect: CallEffect,
    /// The result as compact JSON, redacted and capped, for `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

impl CallRecord {
    /// The record as a replayed call: the same call, its result delivered again by a resume.
    #[must_use]
    pub fn replayed(&self) -> CallRecord {
        let mut copy = self.clone();
        copy.start.replayed = true;
        copy
    }

    /// Bytes of its JSON, what [`ActivityLimits::max_bytes`] counts.
    pub fn encoded_len(&self) -> usize {
        crate::json_len(self)
    }
}

/// Records left out to keep within the [`ActivityLimits`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dropped {
    /// Finished calls not kept.
    pub calls: u32,
    /// Bytes of JSON those records would have taken.
    pub bytes: u64,
}

impl Dropped {
    /// Whether nothing was dropped.
    pub fn is_zero(&self) -> bool {
        *self == Dropped::default()
    }
}

/// The activity a run keeps with its checkpoint: its finished calls (bounded), what was dropped, the calls still
/// open when it parked, and the cell it is in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityLog {
    /// The cell the run is in (1 for the `exec`).
    #[serde(default)]
    pub cell: u32,
    /// Finished calls, in the order they finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallRecord>,
    /// Calls that started and had not finished when the run parked: a resume in another process finishes them as
    /// interrupted. They are the run's own bookkeeping, not history.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open: Vec<CallStart>,
    /// Finished calls left out.
    #[serde(default, skip_serializing_if = "Dropped::is_zero")]
    pub dropped: Dropped,
    /// Bytes of JSON the kept records take.
    #[serde(default)]
    pub bytes: u64,
    /// What the run's program was written in, as its `exec` found it.
    #[serde(default)]
    pub input_kind: InputKind,
}

impl ActivityLog {
    /// Whether the log holds nothing (a run that made no call yet).
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.open.is_empty() && self.dropped.is_zero() && self.cell == 0
    }

    /// Keeps `record` if it fits `limits`; otherwise counts it as dropped. Returns whether it was kept.
    pub fn record(&mut self, record: &CallRecord, limits: &ActivityLimits) -> bool {
        keep(&mut self.calls, &mut self.bytes, &mut self.dropped, record, limits)
    }

    /// The finished record of call `call_id`, if it was kept.
    pub fn find(&self, call_id: &str) -> Option<&CallRecord> {
        self.calls.iter().find(|c| c.start.call_id == call_id)
    }
}

/// Pushes `record` onto `calls` if it fits `limits`, else counts it in `dropped`.
fn keep(
    calls: &mut Vec<CallRecord>,
    bytes: &mut u64,
    dropped: &mut Dropped,
    record: &CallRecord,
    limits: &ActivityLimits,
) -> bool {
    let len = record.encoded_len() as u64;
    if calls.len() >= limits.max_calls || bytes.saturating_add(len) > limits.max_bytes as u64 {
        dropped.calls += 1;
        dropped.bytes += len;
        return false;
    }
    *bytes += len;
    calls.push(record.clone());
    true
}

/// What a run's nested calls did during one `exec` or `wait`: the `activity` of its result. The calls a resume by
/// replay delivered again come first (marked `replayed`, with their original ids, times and previews), then the
/// calls that finished live, in the order they finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    /// The run.
    pub run_id: String,
    /// The cell this result ends (1 for the `exec`).
    pub cell: u32,
    /// What the cell is to a host's hooks and policies: always [`TOOL_KIND`], a code-mode cell, not a shell-style
    /// `exec` of the same tool name (the seed's `toolKind`).
    #[serde(default = "tool_kind")]
    pub tool_kind: Cow<'static, str>,
    /// What the program was written in (the seed's `toolInputKind`).
    #[serde(default)]
    pub tool_input_kind: InputKind,
    /// The run's program as people may see it: credential literals, token shapes, registered secrets and
    /// configured patterns masked, capped at [`ActivityLimits::source_bytes`]. What runs is the original.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The calls, bounded by the run's [`ActivityLimits`].
    pub calls: Vec<CallRecord>,
    /// Calls of this cell left out of `calls` to keep within the limits.
    #[serde(default, skip_serializing_if = "Dropped::is_zero")]
    pub dropped: Dropped,
    /// Whether the result's JSON carries this activity (the caller asked for it); the library caller always has
    /// it through `CodeModeResult::activity`.
    #[serde(skip, default = "yes")]
    pub in_json: bool,
    #[serde(skip)]
    bytes: u64,
}

impl Activity {
    /// An empty activity of `cell` of run `run_id`, kept out of the result's JSON.
    pub fn new(run_id: impl Into<String>, cell: u32) -> Self {
        Activity {
            run_id: run_id.into(),
            cell,
            tool_kind: Cow::Borrowed(TOOL_KIND),
            tool_input_kind: InputKind::default(),
            source: String::new(),
            calls: Vec::new(),
            dropped: Dropped::default(),
            in_json: false,
            bytes: 0,
        }
    }

    /// Adds `record` if it fits `limits`; otherwise counts it as dropped. Returns whether it was kept.
    pub fn record(&mut self, record: &CallRecord, limits: &ActivityLimits) -> bool {
        keep(&mut self.calls, &mut self.bytes, &mut self.dropped, record, limits)
    }

    /// The calls replayed in this cell.
    pub fn replayed(&self) -> impl Iterator<Item = &CallRecord> {
        self.calls.iter().filter(|c| c.start.replayed)
    }

    /// The calls that ran live in this cell.
    pub fn live(&self) -> impl Iterator<Item = &CallRecord> {
        self.calls.iter().filter(|c| !c.start.replayed)
    }

    /// Whether the result's JSON leaves it out (serde's `skip_serializing_if`).
    pub fn hidden(activity: &Option<Box<Activity>>) -> bool {
        activity.as_ref().is_none_or(|a| !a.in_json)
    }
}

fn yes() -> bool {
    true
}

fn tool_kind() -> Cow<'static, str> {
    Cow::Borrowed(TOOL_KIND)
}

/// The `toolKind` of a code-mode cell (an `exec` or a `wait` of code mode).
pub const TOOL_KIND: &str = "code_mode_exec";

/// What a program was written in: `typescript` when it used TypeScript-only syntax (its source went through the
/// TypeScript transform), else `javascript`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// JavaScript (also a TypeScript program with no TypeScript-only syntax).
    #[default]
    Javascript,
    /// TypeScript.
    Typescript,
}

impl InputKind {
    /// The kind as the seed spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            InputKind::Javascript => "javascript",
            InputKind::Typescript => "typescript",
        }
    }
}

/// A code-mode cell began: the `exec` (cell 1) or a `wait` that resumed the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CellStart {
    /// The run.
    pub run_id: String,
    /// The cell (1 for the `exec`).
    pub cell: u32,
    /// The outer tool: `exec` or `wait`.
    pub tool: Cow<'static, str>,
    /// Always [`TOOL_KIND`].
    pub tool_kind: Cow<'static, str>,
    /// What the program was written in.
    pub tool_input_kind: InputKind,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A nested call's progress, as its tool host reported it (the message redacted).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallProgressEvent {
    /// The run.
    pub run_id: String,
    /// The call, `bridge:<method>:<n>`.
    pub call_id: String,
    /// Progress so far.
    pub progress: f64,
    /// The total, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// A note for people, redacted and capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a host's activity hook receives, as it happens. Starts and progress are transient (only finished calls are
/// kept); a resume by replay sends a `CallStarted` and a `CallFinished` marked `replayed` for each call it delivers
/// again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum ActivityEvent {
    /// A cell began, before any of its calls.
    CellStarted(CellStart),
    /// A call reached the host.
    CallStarted(CallStart),
    /// A call's tool reported progress.
    Progress(CallProgressEvent),
    /// A call finished.
    CallFinished(CallRecord),
}

/// Receives [`ActivityEvent`]s. It is called on the run's driver task, so it should return quickly (hand the event
/// to a channel for slow work).
pub type ActivityHook = Arc<dyn Fn(&ActivityEvent) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u32, args: &str) -> CallRecord {
        CallRecord {
            start: CallStart {
                call_id: format!("bridge:callValue:{n}"),
                run_id: "cm_x".into(),
                cell: 1,
                tool: "t".into(),
                path: "t".into(),
                server: None,
                started_at_ms: 5,
                args: args.into(),
                replayed: false,
            },
            duration_ms: 1,
            status: CallStatus::Ok,
            error_code: None,
            error: None,
            effect: CallEffect::Completed,
            result: Some("{}".into()),
        }
    }

    #[test]
    fn the_log_keeps_within_its_limits_and_counts_the_rest() {
        let limits = ActivityLimits { max_calls: 2, ..ActivityLimits::default() };
        let mut log = ActivityLog::default();
        assert!(log.record(&record(1, "{}"), &limits));
        assert!(log.record(&record(2, "{}"), &limits));
        assert!(!log.record(&record(3, "{}"), &limits));
        assert_eq!(log.calls.len(), 2);
        assert_eq!(log.dropped.calls, 1);
        assert_eq!(log.dropped.bytes, record(3, "{}").encoded_len() as u64);

        let limits = ActivityLimits { max_bytes: 300, ..ActivityLimits::default() };
        let mut log = ActivityLog::default();
        assert!(log.record(&record(1, "{}"), &limits));
        assert!(!log.record(&record(2, &"x".repeat(400)), &limits));
        assert!(log.bytes <= 300);
    }

    #[test]
    fn records_serialize_flat_in_camel_case() {
        let json = serde_json::to_value(record(1, "{\"a\":1}").replayed()).unwrap();
        assert_eq!(json["callId"], "bridge:callValue:1");
        assert_eq!(json["replayed"], true);
        assert_eq!(json["effect"], "completed");
        assert!(json.get("errorCode").is_none());
        let back: CallRecord = serde_json::from_value(json).unwrap();
        assert!(back.start.replayed);
    }
}
