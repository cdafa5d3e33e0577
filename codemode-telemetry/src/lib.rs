//! Telemetry carried by every code mode result (catalog size and sources, cumulative counters, the counter scope
//! and the visible control tools), the activity record of a run's nested calls ([`activity`]), the redaction of
//! everything recorded for people ([`redact`]), the names of spans and metrics ([`otel`]), the spans themselves,
//! recorded straight into an OpenTelemetry tracer ([`span`]) and, with the `otlp` feature, a process's OpenTelemetry
//! export over OTLP (`otlp`).
//!
//! The telemetry and activity types are pure data with serde shapes that match the seed (`camelCase`); redaction
//! only masks copies of text, never what runs.

pub mod activity;
pub mod otel;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod redact;
pub mod span;

use serde::{Deserialize, Serialize};

pub use activity::{
    Activity, ActivityEvent, ActivityHook, ActivityLimits, ActivityLog, CallEffect, CallProgressEvent, CallRecord,
    CallStart, CallStatus, CellStart, Dropped, InputKind, TOOL_KIND,
};
pub use redact::{Captured, MASK, PatternError, Redactor};

/// Bytes of `value` as compact JSON text, counted without building the text.
pub fn json_len(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail; a value that cannot serialize (never a JSON value) counts what it wrote.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Catalog entries per source kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCounts {
    /// Core and plugin tools.
    pub openclaw: u32,
    /// MCP tools.
    pub mcp: u32,
    /// Client tools.
    pub client: u32,
}

/// The telemetry object of a `CodeModeResult`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Telemetry {
    /// Entries in the run's catalog.
    pub catalog_size: u32,
    /// `catalog_size` broken down by source.
    pub sources: SourceCounts,
    /// What the cumulative counters count over: the run's catalog.
    pub counter_scope: String,
    /// `catalog.search` calls so far in this run.
    pub search_count: u32,
    /// `describe()` calls so far in this run.
    pub describe_count: u32,
    /// Nested tool calls (catalog and MCP) so far in this run.
    pub call_count: u32,
    /// The control tools the model sees.
    pub visible_tools: Vec<String>,
}
