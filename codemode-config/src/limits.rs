//! Run limits with the reference's defaults and clamps.
//!
//! Invariant: every field of a `Limits` is inside its documented range; out-of-range input is clamped and
//! non-positive or non-integer input falls back to the default.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The limits one code mode run obeys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Wall-clock budget of one `exec` or `wait` call, in milliseconds (100..=60,000; default 10,000).
    pub timeout_ms: u64,
    /// Memory the guest may use, in bytes (1 MiB..=1 GiB; default 64 MiB).
    pub memory_limit_bytes: u64,
    /// UTF-8 budget shared by output, value and error across an exec and its waits (1 KiB..=10 MiB; default 64 KiB).
    pub max_output_bytes: u64,
    /// Largest checkpoint a suspended run may keep (1 KiB..=256 MiB; default 10 MiB).
    pub max_snapshot_bytes: u64,
    /// Bridge requests in flight at once (1..=128; default 16).
    pub max_pending_tool_calls: u32,
    /// How long a suspended run stays resumable, in seconds (1..=86,400; default 900).
    pub snapshot_ttl_seconds: u64,
    /// Results `catalog.search` returns without a `limit` (1..=max_search_limit; default 8).
    pub search_default_limit: u32,
    /// Largest `limit` `catalog.search` accepts (1..=50; default 50).
    pub max_search_limit: u32,
    /// How long one `wait` may hold a run whose tool calls are still pending, waiting for something the model can
    /// act on, in milliseconds (1..=600,000; default 25,000). Not execution time: `timeout_ms` bounds the program's
    /// own running. The default stays below the request timeouts common MCP clients use.
    #[serde(default = "default_max_wait_ms")]
    pub max_wait_ms: u64,
}

fn default_max_wait_ms() -> u64 {
    DEFAULT_MAX_WAIT_MS
}

/// The default of [`Limits::max_wait_ms`].
pub const DEFAULT_MAX_WAIT_MS: u64 = 25_000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: 10_000,
            memory_limit_bytes: 64 * 1024 * 1024,
            max_output_bytes: 64 * 1024,
            max_snapshot_bytes: 10 * 1024 * 1024,
            max_pending_tool_calls: 16,
            snapshot_ttl_seconds: 900,
            search_default_limit: 8,
            max_search_limit: 50,
            max_wait_ms: DEFAULT_MAX_WAIT_MS,
        }
    }
}

/// The config keys of the limits, in the order the seed lists them.
pub const LIMIT_KEYS: [&str; 9] = [
    "timeoutMs",
    "memoryLimitBytes",
    "maxOutputBytes",
    "maxSnapshotBytes",
    "maxPendingToolCalls",
    "snapshotTtlSeconds",
    "searchDefaultLimit",
    "maxSearchLimit",
    "maxWaitMs",
];

const MIB: u64 = 1024 * 1024;

impl Limits {
    /// Bytes of encoded replies the guest inbox holds: `min(memoryLimitBytes, maxSnapshotBytes)`.
    pub fn inbox_bytes(&self) -> u64 {
        self.memory_limit_bytes.min(self.max_snapshot_bytes)
    }

    /// Reads the limits from a `tools.codeMode` value (usually its object form).
    ///
    /// Anything that is not an object (`true`, `"auto"`, null) yields the defaults. Each key that is absent, not a
    /// positive integer (a string, a fraction, zero, a negative) falls back to its default; an integer outside its
    /// range is clamped to the nearest bound. `searchDefaultLimit` is clamped to the effective `maxSearchLimit`.
    /// This never fails: limits are forgiving, activation is strict.
    pub fn from_json(value: &Value) -> Limits {
        let d = Limits::default();
        let get = |key: &str, default: u64, min: u64, max: u64| -> u64 {
            value.get(key).and_then(positive_integer).map_or(default, |n| n.clamp(min, max))
        };
        let max_search_limit = get("maxSearchLimit", d.max_search_limit.into(), 1, 50);
        Limits {
            timeout_ms: get("timeoutMs", d.timeout_ms, 100, 60_000),
            memory_limit_bytes: get("memoryLimitBytes", d.memory_limit_bytes, MIB, 1024 * MIB),
            max_output_bytes: get("maxOutputBytes", d.max_output_bytes, 1024, 10 * MIB),
            max_snapshot_bytes: get("maxSnapshotBytes", d.max_snapshot_bytes, 1024, 256 * MIB),
            max_pending_tool_calls: narrow(get("maxPendingToolCalls", d.max_pending_tool_calls.into(), 1, 128)),
            snapshot_ttl_seconds: get("snapshotTtlSeconds", d.snapshot_ttl_seconds, 1, 86_400),
            // The default of 8 is clamped too: `maxSearchLimit: 3` alone gives a default limit of 3.
            search_default_limit: narrow(
                get("searchDefaultLimit", d.search_default_limit.into(), 1, max_search_limit).min(max_search_limit),
            ),
            max_search_limit: narrow(max_search_limit),
            max_wait_ms: get("maxWaitMs", d.max_wait_ms, 1, 600_000),
        }
    }
}

/// A JSON number that is a positive integer (`3` or `3.0`), saturated to `u64`; anything else is `None`.
fn positive_integer(value: &Value) -> Option<u64> {
    if let Some(n) = value.as_u64() {
        return (n > 0).then_some(n);
    }
    let f = value.as_f64()?;
    // Fractions, negatives and NaN fall back; `as` saturates huge integral floats, and the caller clamps them.
    (f.is_finite() && f >= 1.0 && f.fract() == 0.0).then_some(f as u64)
}

/// Narrows a value already clamped to at most 128 into `u32`.
fn narrow(n: u64) -> u32 {
    u32::try_from(n).expect("clamped to at most 128 before narrowing")
}
