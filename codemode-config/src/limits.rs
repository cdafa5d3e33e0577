//! Run limits with the reference's defaults and clamps.
//!
//! Invariant: every field of a `Limits` is inside its documented range; out-of-range input is clamped and
//! non-positive or non-integer input falls back to the default.

use serde::{Deserialize, Serialize};

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
}

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
        }
    }
}

impl Limits {
    /// Bytes of encoded replies the guest inbox holds: `min(memoryLimitBytes, maxSnapshotBytes)`.
    pub fn inbox_bytes(&self) -> u64 {
        self.memory_limit_bytes.min(self.max_snapshot_bytes)
    }
}
