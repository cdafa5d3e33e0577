//! The framed channel between the host and a worker: one compact JSON message per line, each way.
//!
//! The worker alternates between running the engine and waiting for a message; it reports every quiescent point
//! (its job queue is empty) with the requests made since the last report. Output items stream as they are produced
//! so a worker killed mid-cell keeps what it printed. A worker's first message is always [`WorkerMessage::Hello`]
//! with its [`PROTOCOL_VERSION`]; the host refuses a worker whose version differs from its own.

use std::sync::Arc;

use codemode_bridge::{BridgeRequest, Journal, OutputItem, Round};
use serde::{Deserialize, Serialize};

use crate::confine::ConfinementReport;

/// Exit code of a worker that passed its memory limit.
pub const EXIT_MEMORY: i32 = 86;
/// Environment variable that holds the worker's memory limit in bytes.
pub const ENV_MEMORY: &str = "CODEMODE_WORKER_MEMORY";
/// Environment variable that holds a cell's engine instruction budget.
pub const ENV_INSTRUCTIONS: &str = "CODEMODE_WORKER_INSTRUCTIONS";
/// Environment variable the pool sets on every process it starts as a worker. A process that has it and starts a
/// pool of its own did not call `codemode_worker::worker::run_worker` when started as a worker; the pool refuses instead of starting
/// itself again and again.
pub const ENV_ROLE: &str = "CODEMODE_WORKER_ROLE";

/// The version of this protocol, announced by every worker in its [`WorkerHello`] and checked by the host.
///
/// Bump it whenever a message changes in a way the other side cannot read (a variant or field added, removed,
/// renamed or given another meaning, including in the bridge types the messages carry): a host and a worker built
/// from different versions then refuse each other up front instead of misreading each other mid-cell. Changes that
/// only the sending side sees (a comment, a new optional field the other side ignores) need no bump.
pub const PROTOCOL_VERSION: u32 = 6;

/// What a worker announces about itself before anything else, so the host can refuse it before it serves a cell.
///
/// New facts about the worker are new fields here (with `#[serde(default)]` when an older worker may omit them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WorkerHello {
    /// The [`PROTOCOL_VERSION`] the worker was built with.
    pub protocol: u32,
    /// The engine's speed-ups, each from one of codemode's patched Boa crates.
    pub fast_paths: FastPaths,
    /// The confinement in force before the worker read anything from the host.
    pub confinement: ConfinementReport,
}

impl WorkerHello {
    /// The hello of a worker built from this crate, with `fast_paths`, confined as `confinement` says.
    pub fn new(fast_paths: FastPaths, confinement: ConfinementReport) -> WorkerHello {
        WorkerHello { protocol: PROTOCOL_VERSION, fast_paths, confinement }
    }
}

/// The engine speed-ups a worker has. Each needs one of the patched Boa crates in codemode's `vendor/`, which a
/// build gets through `[patch.crates-io]`; without them the engine runs the same programs, slower.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct FastPaths {
    /// Append strings: `s += x` in a loop is linear instead of copying the string every time (the patched
    /// `boa_string`). Measured by the worker at start, not assumed.
    pub append_strings: bool,
    /// The guest prelude compiled once per engine thread and run in each fresh realm, instead of parsed and
    /// compiled for every context (the patched `boa_engine`, compiled in by the worker's `patched-boa` feature).
    pub shared_scripts: bool,
}

impl FastPaths {
    /// Both speed-ups.
    pub const ALL: FastPaths = FastPaths { append_strings: true, shared_scripts: true };

    /// The speed-ups as their flags.
    pub fn new(append_strings: bool, shared_scripts: bool) -> FastPaths {
        FastPaths { append_strings, shared_scripts }
    }

    /// The names of the speed-ups this engine lacks, empty when it has both.
    pub fn missing(self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if !self.append_strings {
            missing.push("append strings");
        }
        if !self.shared_scripts {
            missing.push("shared scripts");
        }
        missing
    }
}

/// One MCP server as the guest sees it under `MCP.<global>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GuestNamespace {
    /// The identifier under `MCP`.
    pub global: String,
    /// The server's own name.
    pub server: String,
    /// `(js name, tool name)` pairs.
    pub tools: Vec<(String, String)>,
}

/// One declaration file `API.list` and `API.read` serve without a bridge request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GuestApiFile {
    /// The path to pass to `API.read`.
    pub path: String,
    /// What the file declares.
    pub description: String,
    /// The declarations.
    pub content: String,
}

/// What the guest's global scope holds besides the built-ins.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GuestGlobals {
    /// Callable names of the catalog tools, each an async global.
    pub tools: Vec<String>,
    /// The MCP namespace.
    pub mcp: Vec<GuestNamespace>,
    /// Every declaration file of the run, in `API.list()` order. A context turns them into guest values only when
    /// the program calls `API.list` or `API.read`.
    #[serde(default)]
    pub api_files: Vec<GuestApiFile>,
    /// The handle metadata `catalog.all()` returns, one object per native tool; turned into handles on first use.
    #[serde(default)]
    pub handles: Vec<serde_json::Value>,
}

/// In-engine limits of one cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellLimits {
    /// Requests in flight at once; more wait in the guest's queue.
    pub max_pending: u32,
    /// Requests that may wait in the guest's queue before the cell fails.
    pub max_queued: u32,
    /// Bytes of encoded replies the guest inbox holds over the cell.
    pub inbox_bytes: u64,
    /// Bytes one request's arguments may take.
    pub max_request_bytes: u64,
}

impl Default for CellLimits {
    fn default() -> Self {
        CellLimits {
            max_pending: 16,
            max_queued: 128,
            inbox_bytes: 10 * 1024 * 1024,
            max_request_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Starts a cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Start {
    /// The prepared JavaScript body (top-level await and return allowed).
    pub source: String,
    /// The globals to install, unless the worker was configured with them (then every context it builds already
    /// has them) or keeps them under `globals_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub globals: Option<Arc<GuestGlobals>>,
    /// The key of `globals`: a worker keeps the last [`GLOBALS_KEPT`] keys' globals prepared, and a `Start` with a
    /// key it keeps leaves `globals` out (the host's [`WorkerProcess`](crate::pool::WorkerProcess) does so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub globals_key: Option<u64>,
    /// In-engine limits.
    pub limits: CellLimits,
    /// The run's journal: its rounds are replayed before the cell goes live.
    pub journal: Journal,
    /// Output items already delivered by earlier calls; the worker does not send them again.
    pub skip_output: u64,
}

/// The globals a host puts in a cell's [`Start`] for a worker started without any, and the key a worker may keep
/// them under (`None`: installed once, not kept).
#[derive(Clone, Debug, PartialEq)]
pub struct StartGlobals {
    /// The globals.
    pub globals: Arc<GuestGlobals>,
    /// Their [`Start::globals_key`].
    pub key: Option<u64>,
}

/// How many keyed globals ([`Start::globals_key`]) a worker keeps prepared, the least recently used dropped first;
/// the host counts the same way to know which keys a worker keeps.
pub const GLOBALS_KEPT: usize = 8;

/// The keys of a worker's kept globals, least recently used first: the worker and the host each keep one and update
/// it identically for every keyed `Start`, so they agree on which keys the worker keeps.
#[derive(Debug)]
pub struct KeptGlobals<T> {
    entries: Vec<(u64, T)>,
}

impl<T> Default for KeptGlobals<T> {
    fn default() -> Self {
        KeptGlobals { entries: Vec::new() }
    }
}

impl<T> KeptGlobals<T> {
    /// The entry of `key`, now the most recently used, if kept.
    pub fn touch(&mut self, key: u64) -> Option<&T> {
        let at = self.entries.iter().position(|(k, _)| *k == key)?;
        let entry = self.entries.remove(at);
        self.entries.push(entry);
        self.entries.last().map(|(_, value)| value)
    }

    /// The most recently used entry.
    pub fn last(&self) -> Option<(u64, &T)> {
        self.entries.last().map(|(key, value)| (*key, value))
    }

    /// Keeps `value` under `key` as the most recently used, dropping the least recently used past [`GLOBALS_KEPT`].
    pub fn insert(&mut self, key: u64, value: T) {
        self.entries.retain(|(k, _)| *k != key);
        if self.entries.len() >= GLOBALS_KEPT {
            self.entries.remove(0);
        }
        self.entries.push((key, value));
    }
}

/// Host to worker.
///
/// On the wire each message is one object whose first key is its tag `t`, as serde writes an internally tagged enum.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "t", rename_all = "camelCase")]
pub enum HostMessage {
    /// The globals every context of this worker is built with; only as the worker's first message, so that the
    /// contexts it builds ahead of need carry them and a cell pays only for its program.
    Configure(Box<GuestGlobals>),
    /// Run a cell in the worker's fresh context.
    Start(Box<Start>),
    /// Deliver settlements at the current quiescent point.
    Settle(Round),
    /// Abandon the cell at its current quiescent point (its run parked, to resume by replay in a fresh context):
    /// the worker drops the cell's context without a word and builds its next one, as after a cell that ended, so
    /// that the host can return it to the pool instead of stopping it and starting another process.
    Reset,
    /// Stop the worker process.
    Shutdown,
}

impl Serialize for HostMessage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// The messages other than `Settle`, written by serde's derive.
        #[derive(Serialize)]
        #[serde(tag = "t", rename_all = "camelCase")]
        enum Tagged<'a> {
            Configure(&'a GuestGlobals),
            Start(&'a Start),
            Reset,
            Shutdown,
        }
        match self {
            // The message of every nested call: its fields written in turn, without serde's adapter for a tagged
            // newtype variant.
            HostMessage::Settle(round) => {
                use serde::ser::SerializeMap;
                let mut map = s.serialize_map(Some(3))?;
                map.serialize_entry("t", "settle")?;
                map.serialize_entry("clock_ms", &round.clock_ms)?;
                map.serialize_entry("settlements", &round.settlements)?;
                map.end()
            }
            HostMessage::Configure(globals) => Tagged::Configure(globals).serialize(s),
            HostMessage::Start(start) => Tagged::Start(start).serialize(s),
            HostMessage::Reset => Tagged::Reset.serialize(s),
            HostMessage::Shutdown => Tagged::Shutdown.serialize(s),
        }
    }
}

/// How the program's top-level promise ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum GuestOutcome {
    /// It returned this JSON-safe value.
    Returned {
        /// The value.
        value: serde_json::Value,
    },
    /// It threw.
    Threw {
        /// The error, formatted for the model (name, message and a stack in user coordinates).
        error: String,
    },
}

/// Why the worker failed the cell itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellFailure {
    /// The instruction budget ran out.
    Timeout,
    /// The guest broke a bridge rule (queue overflow, bad request).
    InvalidInput,
    /// The program can never finish (an engine limit after an await, or an await on a promise nothing settles).
    Stalled,
    /// An uncatchable engine limit (recursion, loop iterations) was hit.
    EngineLimit,
    /// Replay diverged or an invariant broke.
    Internal,
    /// The program completed while a promise it rejected was still unhandled (an unawaited failing call, a
    /// throwing timer callback, `Promise.reject()` with no handler).
    UnhandledRejection,
}

/// Worker to host.
///
/// On the wire each message is one object whose first key is its tag `t` (as serde writes an internally tagged
/// enum); it is read in that order, the variant's fields straight into their types, without serde's buffering of
/// the whole message to find the tag.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "t", rename_all = "camelCase")]
pub enum WorkerMessage {
    /// The worker's first message, written before it reads anything.
    Hello(WorkerHello),
    /// The worker's next context is built; it reads the next `Start`. Workers of this version no longer send it
    /// (the host never waited for it); the host still skips it.
    Ready,
    /// An output item, as soon as it is produced.
    Output(OutputItem),
    /// The job queue is empty.
    Quiescent {
        /// Requests released to the host since the last report.
        requests: Vec<BridgeRequest>,
        /// The program's outcome, in the one report after its promise settled (it is encoded once).
        outcome: Option<GuestOutcome>,
        /// Requests released to the host and not settled yet.
        open: u32,
        /// Released requests the guest cancelled (`clearTimeout`); the host drops them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        canceled: Vec<u32>,
    },
    /// The worker failed the cell.
    Failed {
        /// Why.
        failure: CellFailure,
        /// For the model.
        message: String,
    },
}

impl<'de> Deserialize<'de> for WorkerMessage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MessageVisitor)
    }
}

/// The tag of a [`WorkerMessage`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
enum Tag {
    Hello,
    Ready,
    Output,
    Quiescent,
    Failed,
}

/// The one key a message may start with.
#[derive(Deserialize)]
enum TagKey {
    #[serde(rename = "t")]
    T,
}

/// The fields of [`WorkerMessage::Quiescent`].
#[derive(Deserialize)]
struct QuiescentFields {
    requests: Vec<BridgeRequest>,
    outcome: Option<GuestOutcome>,
    open: u32,
    #[serde(default)]
    canceled: Vec<u32>,
}

/// The fields of [`WorkerMessage::Failed`].
#[derive(Deserialize)]
struct FailedFields {
    failure: CellFailure,
    message: String,
}

struct MessageVisitor;

impl<'de> serde::de::Visitor<'de> for MessageVisitor {
    type Value = WorkerMessage;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a worker message: an object whose first key is its tag `t`")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<WorkerMessage, A::Error> {
        use serde::de::value::MapAccessDeserializer;
        if map.next_key::<TagKey>()?.is_none() {
            return Err(serde::de::Error::missing_field("t"));
        }
        let tag: Tag = map.next_value()?;
        let rest = MapAccessDeserializer::new(map);
        Ok(match tag {
            Tag::Hello => WorkerMessage::Hello(WorkerHello::deserialize(rest)?),
            Tag::Ready => {
                serde::de::IgnoredAny::deserialize(rest)?;
                WorkerMessage::Ready
            }
            Tag::Output => WorkerMessage::Output(OutputItem::deserialize(rest)?),
            Tag::Quiescent => {
                let QuiescentFields { requests, outcome, open, canceled } = QuiescentFields::deserialize(rest)?;
                WorkerMessage::Quiescent { requests, outcome, open, canceled }
            }
            Tag::Failed => {
                let FailedFields { failure, message } = FailedFields::deserialize(rest)?;
                WorkerMessage::Failed { failure, message }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_messages_read_back_as_written_and_need_their_tag_first() {
        use codemode_bridge::{BridgeCall, CallValueArgs};
        let messages = [
            WorkerMessage::Ready,
            WorkerMessage::Output(OutputItem::Text { text: "hi".into() }),
            WorkerMessage::Quiescent {
                requests: vec![BridgeRequest {
                    id: 1,
                    call: BridgeCall::CallValue(CallValueArgs {
                        tool: "ping".into(),
                        args: Some(serde_json::json!({})),
                    }),
                }],
                outcome: Some(GuestOutcome::Returned { value: serde_json::json!([1, "two"]) }),
                open: 1,
                canceled: vec![3],
            },
            WorkerMessage::Failed { failure: CellFailure::Stalled, message: "it can never finish".into() },
        ];
        for message in messages {
            let line = serde_json::to_string(&message).unwrap();
            assert!(line.starts_with(r#"{"t":""#), "{line}");
            assert_eq!(serde_json::from_str::<WorkerMessage>(&line).unwrap(), message, "{line}");
            let value: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(serde_json::from_value::<WorkerMessage>(value).unwrap(), message, "from a value: {line}");
        }
        let error = serde_json::from_str::<WorkerMessage>(r#"{"open":0,"t":"quiescent","requests":[]}"#).unwrap_err();
        assert!(error.to_string().contains("unknown variant `open`"), "{error}");
        assert!(serde_json::from_str::<WorkerMessage>(r#"{"t":"hello"}"#).is_err(), "a hello needs its fields");
    }

    #[test]
    fn a_settle_is_written_as_the_derived_tagged_form_writes_it() {
        use codemode_bridge::{BridgeErrorCode, Round, Settlement, SettlementValue};
        #[derive(Serialize)]
        #[serde(tag = "t", rename_all = "camelCase")]
        enum Derived {
            Settle(Round),
        }
        let round = Round {
            clock_ms: 1_700_000_000_123,
            settlements: vec![
                Settlement { id: 1, value: SettlementValue::Ok { value: serde_json::json!({"ok": true}) } },
                Settlement { id: 2, value: SettlementValue::err(BridgeErrorCode::ToolError, "no") },
            ],
        };
        let line = serde_json::to_string(&HostMessage::Settle(round.clone())).unwrap();
        assert_eq!(line, serde_json::to_string(&Derived::Settle(round.clone())).unwrap());
        assert_eq!(serde_json::from_str::<HostMessage>(&line).unwrap(), HostMessage::Settle(round));
        for message in [HostMessage::Reset, HostMessage::Shutdown] {
            let line = serde_json::to_string(&message).unwrap();
            assert_eq!(serde_json::from_str::<HostMessage>(&line).unwrap(), message, "{line}");
        }
    }

    #[test]
    fn kept_globals_drop_the_least_recently_used_past_the_limit() {
        let mut kept = KeptGlobals::default();
        for key in 0..GLOBALS_KEPT as u64 {
            kept.insert(key, key * 10);
        }
        assert_eq!(kept.touch(0), Some(&0), "a touch makes 0 the most recently used");
        kept.insert(100, 1000);
        assert_eq!(kept.touch(1), None, "1 was the least recently used");
        assert_eq!(kept.touch(0), Some(&0));
        assert_eq!(kept.touch(100), Some(&1000));
        assert_eq!(kept.entries.len(), GLOBALS_KEPT);
    }
}
