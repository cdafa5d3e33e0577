//! The names of the spans, attributes and metrics code mode records, after the OpenTelemetry GenAI and MCP semantic
//! conventions (`execute_tool {gen_ai.tool.name}`, `tools/call {name}`), plus the
//! `codemode.*` attributes of its own, and the digest that stands in for a program's source on a span.
//!
//! It holds names, pure helpers and where the metrics go: which tracer (if any) records the spans
//! ([`crate::span`]) and where spans and metrics are exported is the embedding program's business. A process that exports installs a [`Metrics`] sink
//! (the `codemode` binary's records straight into OpenTelemetry instruments); without one each measurement is a
//! `tracing` event for tracing-opentelemetry's metrics layer, disabled at its call site when nobody listens.
//! Invariant: the source of a program never appears on a span, only [`source_digest`] and its length.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

/// The `tracing` target of the metric events recorded when no [`Metrics`] sink is installed, so a subscriber can
/// select them.
pub const TARGET: &str = "codemode";

/// `gen_ai.operation.name` of tool execution spans.
pub const EXECUTE_TOOL: &str = "execute_tool";
/// `mcp.method.name` of a tool call.
pub const TOOLS_CALL: &str = "tools/call";

/// What `gen_ai.tool.name` (and a span name) says for a tool that does not exist: one value for every made-up name,
/// so that a client's names make no new metric series and reach no span. The conventions' value for a name outside
/// the set an instrumentation knows (`http.request.method`'s `_OTHER`).
pub const OTHER: &str = "_OTHER";

/// Most bytes of an attribute value a client controls (a JSON-RPC request id, a session id, a run id): longer
/// values are cut to this, on a character boundary.
pub const MAX_ATTRIBUTE_BYTES: usize = 4096;

/// `value` cut to at most [`MAX_ATTRIBUTE_BYTES`], on a character boundary: for an attribute a client controls.
pub fn client_attribute(value: &str) -> &str {
    if value.len() <= MAX_ATTRIBUTE_BYTES {
        return value;
    }
    let mut end = MAX_ATTRIBUTE_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// Attribute keys.
pub mod attr {
    /// The GenAI operation: always [`super::EXECUTE_TOOL`] here.
    pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
    /// The tool's name: `exec`, `wait`, or the nested tool's name.
    pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
    /// The tool call's id: `bridge:callValue:3` for a nested call.
    pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// The class of error an operation ended with (`timeout`, `denied`, `tool_error`, ...).
    pub const ERROR_TYPE: &str = "error.type";
    /// The MCP method (`tools/call`).
    pub const MCP_METHOD_NAME: &str = "mcp.method.name";
    /// The MCP session the request belongs to.
    pub const MCP_SESSION_ID: &str = "mcp.session.id";
    /// The JSON-RPC request id, as a string.
    pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";
    /// `pipe` (stdio) or `tcp` (Streamable HTTP).
    pub const NETWORK_TRANSPORT: &str = "network.transport";
    /// The run the span belongs to (`cm_<uuid>`).
    pub const RUN_ID: &str = "codemode.run_id";
    /// Whether the nested call was delivered from the run's journal by replay instead of running.
    pub const REPLAYED: &str = "codemode.replayed";
    /// A write-class call's effect status (`completed`, `failed`, `uncertain`, `not_started`).
    pub const EFFECT_STATUS: &str = "codemode.effect_status";
    /// How the `exec`/`wait` ended: `completed`, `waiting` or `failed`; a nested call's `ok` or `error`.
    pub const STATUS: &str = "codemode.status";
    /// The upstream MCP server of a nested call.
    pub const SERVER: &str = "codemode.server";
    /// The SHA-256 of the program's source, hex.
    pub const SOURCE_SHA256: &str = "codemode.source.sha256";
    /// The program's length in bytes.
    pub const SOURCE_LENGTH: &str = "codemode.source.length";
    /// An `exec`/`wait` span's kind of tool: `code_mode_exec` (the seed's `toolKind`).
    pub const TOOL_KIND: &str = "codemode.tool_kind";
    /// What an `exec`'s program was written in: `javascript` or `typescript` (the seed's `toolInputKind`).
    pub const TOOL_INPUT_KIND: &str = "codemode.tool_input_kind";
}

/// Metric names (OpenTelemetry instruments, recorded by the [`Metrics`] sink, or through tracing-opentelemetry's
/// metrics layer when none is installed).
pub mod metric {
    /// Histogram, seconds: how long an `exec` or `wait` took, by `gen_ai.tool.name` and `codemode.status`.
    pub const EXEC_DURATION: &str = "codemode.exec.duration";
    /// Histogram, seconds: how long a nested tool call took, by `gen_ai.tool.name` and `codemode.status`.
    pub const CALL_DURATION: &str = "codemode.call.duration";
    /// Counter: nested tool calls, by `codemode.status` (`ok`, `error`) and `codemode.replayed`.
    pub const CALLS: &str = "codemode.calls";
    /// Counter: resumes by replay (a parked run resumed in a fresh worker).
    pub const REPLAYS: &str = "codemode.replays";
    /// Gauge: runs parked in this process.
    pub const PARKED_RUNS: &str = "codemode.runs.parked";
    /// Gauge: worker processes alive, by `codemode.worker.state` (`idle`, `parked`).
    pub const LIVE_WORKERS: &str = "codemode.workers.live";
    /// Histogram, seconds: MCP requests the gateway served (the MCP conventions' server metric).
    pub const MCP_SERVER_DURATION: &str = "mcp.server.operation.duration";
    /// Histogram, seconds: MCP requests the gateway sent upstream (the MCP conventions' client metric).
    pub const MCP_CLIENT_DURATION: &str = "mcp.client.operation.duration";
}

/// Where the measurements of runs and nested calls go when a process installed it with [`set_metrics`]: the
/// `codemode` binary's sink records them straight into OpenTelemetry instruments, which costs a nested call a small
/// fraction of what a `tracing` event through tracing-opentelemetry's metrics layer costs.
pub trait Metrics: Send + Sync + 'static {
    /// An `exec` or `wait` (`tool`) ended with `status` after `seconds` ([`metric::EXEC_DURATION`]).
    fn exec(&self, tool: &'static str, status: &'static str, seconds: f64);
    /// A nested call settled with `status` ([`metric::CALLS`]); `seconds` is a live call's duration
    /// ([`metric::CALL_DURATION`]), `None` for a call a replay delivered from the journal.
    fn call(&self, tool: &str, status: &'static str, replayed: bool, seconds: Option<f64>);
    /// A run resumed by replay ([`metric::REPLAYS`]).
    fn replay(&self);
    /// A `tools/call` to an upstream MCP server answered after `seconds`, with `error_type` when it failed
    /// ([`metric::MCP_CLIENT_DURATION`]).
    fn mcp_client(&self, tool: &str, error_type: Option<&str>, seconds: f64);
    /// The gateway answered a `tools/call` after `seconds`, with `error_type` when it failed
    /// ([`metric::MCP_SERVER_DURATION`]).
    fn mcp_server(&self, tool: &str, error_type: Option<&str>, seconds: f64);
}

static METRICS: OnceLock<Box<dyn Metrics>> = OnceLock::new();

/// Set while the installed sink is paused ([`pause`]).
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Installs the process's metrics sink; `false` (and `sink` dropped) when one is installed already.
pub fn set_metrics(sink: Box<dyn Metrics>) -> bool {
    METRICS.set(sink).is_ok()
}

/// Whether a metrics sink is installed and not paused: measurements are then taken even when no span is recorded.
pub fn metrics_installed() -> bool {
    sink().is_some()
}

/// Pauses (`true`) or resumes the installed sink: while paused, measurements are taken and recorded as in a process
/// with none.
pub fn pause(paused: bool) {
    PAUSED.store(paused, Ordering::Relaxed);
}

/// The installed sink, unless paused.
fn sink() -> Option<&'static dyn Metrics> {
    METRICS.get().filter(|_| !PAUSED.load(Ordering::Relaxed)).map(Box::as_ref)
}

/// Records an `exec`/`wait`'s end (see [`Metrics::exec`]).
pub fn record_exec(tool: &'static str, status: &'static str, seconds: f64) {
    match sink() {
        Some(sink) => sink.exec(tool, status, seconds),
        None => tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            histogram.codemode.exec.duration = seconds,
            "gen_ai.tool.name" = tool,
            "codemode.status" = status,
        ),
    }
}

/// Records a nested call's settlement (see [`Metrics::call`]).
pub fn record_call(tool: &str, status: &'static str, replayed: bool, seconds: Option<f64>) {
    match (sink(), seconds) {
        (Some(sink), _) => sink.call(tool, status, replayed, seconds),
        (None, Some(seconds)) => tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            histogram.codemode.call.duration = seconds,
            monotonic_counter.codemode.calls = 1_u64,
            "codemode.status" = status,
            "codemode.replayed" = replayed,
            "gen_ai.tool.name" = tool,
        ),
        (None, None) => tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            monotonic_counter.codemode.calls = 1_u64,
            "codemode.status" = status,
            "codemode.replayed" = replayed,
            "gen_ai.tool.name" = tool,
        ),
    }
}

/// Records a resume by replay (see [`Metrics::replay`]).
pub fn record_replay() {
    match sink() {
        Some(sink) => sink.replay(),
        None => tracing::event!(target: TARGET, tracing::Level::INFO, monotonic_counter.codemode.replays = 1_u64),
    }
}

/// Records an upstream `tools/call` (see [`Metrics::mcp_client`]).
pub fn record_mcp_client(tool: &str, error_type: Option<&str>, seconds: f64) {
    match sink() {
        Some(sink) => sink.mcp_client(tool, error_type, seconds),
        None => tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            histogram.mcp.client.operation.duration = seconds,
            "mcp.method.name" = TOOLS_CALL,
            "gen_ai.tool.name" = tool,
            "error.type" = error_type,
        ),
    }
}

/// Records a `tools/call` the gateway answered (see [`Metrics::mcp_server`]).
pub fn record_mcp_server(tool: &str, error_type: Option<&str>, seconds: f64) {
    match sink() {
        Some(sink) => sink.mcp_server(tool, error_type, seconds),
        None => tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            histogram.mcp.server.operation.duration = seconds,
            "mcp.method.name" = TOOLS_CALL,
            "gen_ai.tool.name" = tool,
            "error.type" = error_type,
        ),
    }
}

/// The hex SHA-256 of a program's source: what a span carries instead of the source.
pub fn source_digest(source: &str) -> String {
    let digest = Sha256::digest(source.as_bytes());
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    out
}

/// The span name of a tool execution: `execute_tool <tool>`.
pub fn execute_tool_name(tool: &str) -> String {
    joined(EXECUTE_TOOL, tool)
}

/// The span name of an MCP tool call: `tools/call <tool>`.
pub fn tools_call_name(tool: &str) -> String {
    joined(TOOLS_CALL, tool)
}

/// The id of a nested tool call, as its span (`gen_ai.tool.call.id`), its activity, its effect and its approval name
/// it: `bridge:<method>:<request id>`.
pub fn tool_call_id(method: &str, id: u32) -> String {
    let mut out = String::with_capacity(8 + method.len() + 10);
    out.push_str("bridge:");
    out.push_str(method);
    out.push(':');
    let mut digits = [0_u8; 10];
    let mut at = digits.len();
    let mut rest = id;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
    out
}

/// `operation` and `name` with a space between, built without the formatting machinery: these names are made on
/// every nested call while its program waits.
fn joined(operation: &str, name: &str) -> String {
    let mut out = String::with_capacity(operation.len() + 1 + name.len());
    out.push_str(operation);
    out.push(' ');
    out.push_str(name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the nested calls it is given.
    struct Count(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Metrics for Count {
        fn exec(&self, _: &'static str, _: &'static str, _: f64) {}
        fn call(&self, _: &str, _: &'static str, _: bool, _: Option<f64>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn replay(&self) {}
        fn mcp_client(&self, _: &str, _: Option<&str>, _: f64) {}
        fn mcp_server(&self, _: &str, _: Option<&str>, _: f64) {}
    }

    // The only test of this binary that installs the process's sink.
    #[test]
    fn a_paused_sink_is_as_none_and_takes_measurements_again_when_resumed() {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        assert!(set_metrics(Box::new(Count(calls.clone()))));
        assert!(metrics_installed());
        record_call("echo", "ok", false, Some(0.1));
        pause(true);
        assert!(!metrics_installed());
        record_call("echo", "ok", false, Some(0.1));
        pause(false);
        assert!(metrics_installed());
        record_call("echo", "ok", false, None);
        assert_eq!(calls.load(Ordering::Relaxed), 2, "the call made while paused is not recorded");
    }

    #[test]
    fn client_attributes_are_cut_on_a_character_boundary() {
        assert_eq!(client_attribute("req-7"), "req-7");
        let exact = "a".repeat(MAX_ATTRIBUTE_BYTES);
        assert_eq!(client_attribute(&exact), exact);
        // A 3-byte character straddles the limit: the cut falls before it.
        let straddling = format!("{}€tail", "a".repeat(MAX_ATTRIBUTE_BYTES - 1));
        assert_eq!(client_attribute(&straddling), "a".repeat(MAX_ATTRIBUTE_BYTES - 1));
        let long = "é".repeat(20_000);
        let cut = client_attribute(&long);
        assert_eq!((cut.len(), cut.chars().all(|c| c == 'é')), (MAX_ATTRIBUTE_BYTES, true));
    }

    #[test]
    fn the_digest_is_sha256_hex() {
        assert_eq!(source_digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(source_digest("return 1").len(), 64);
    }

    #[test]
    fn span_names_follow_the_conventions() {
        assert_eq!(execute_tool_name("exec"), "execute_tool exec");
        assert_eq!(tools_call_name("echo"), "tools/call echo");
    }

    #[test]
    fn tool_call_ids_name_the_method_and_the_request() {
        for id in [0, 7, 10, 4_021, u32::MAX] {
            assert_eq!(tool_call_id("callValue", id), format!("bridge:callValue:{id}"));
        }
    }
}
