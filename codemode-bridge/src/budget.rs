//! Byte budgets and truncation markers.
//!
//! Output, value and error of one run share `maxOutputBytes` of UTF-8 across the exec and all its waits. Whatever
//! is cut keeps valid JSON and valid UTF-8: a truncated value becomes a marker object, a truncated error keeps its
//! leading cause and ends with ` [error truncated]`.

use serde_json::{Value, json};

use crate::OutputItem;

/// Guidance carried by every truncation marker.
pub const TRUNCATION_GUIDANCE: &str = "Output truncated; rerun with narrower args.";
const ERROR_SUFFIX: &str = " [error truncated]";

/// The longest prefix of `s` that is at most `max` bytes and ends on a character boundary.
pub fn utf8_prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `value` if its compact JSON fits `max` bytes, else the truncation marker (which itself fits `max` when
/// `max` is at least a few hundred bytes).
pub fn truncate_value(value: Value, max: usize) -> Value {
    let encoded = serde_json::to_string(&value).expect("JSON values always serialize");
    if encoded.len() <= max {
        return value;
    }
    truncation_marker(&encoded, max)
}

/// The truncation marker for an already-encoded JSON text that does not fit `max` bytes.
pub fn truncation_marker(encoded: &str, max: usize) -> Value {
    // The marker without a prefix costs about 130 bytes; the prefix gets what is left, and since it is embedded as
    // a JSON string, escapes can grow it, so shrink until the whole marker fits.
    let mut room = max.saturating_sub(160);
    loop {
        let prefix = utf8_prefix(encoded, room);
        let m = json!({
            "truncated": true,
            "omittedBytes": encoded.len() - prefix.len(),
            "guidance": TRUNCATION_GUIDANCE,
            "prefix": prefix,
        });
        if room == 0 || serde_json::to_string(&m).map(|s| s.len()).unwrap_or(usize::MAX) <= max {
            return m;
        }
        room = room * 3 / 4;
    }
}

/// `error` cut to at most `max` bytes, keeping its leading cause and ending with ` [error truncated]`.
pub fn truncate_error(error: &str, max: usize) -> String {
    if error.len() <= max {
        return error.to_owned();
    }
    let keep = max.saturating_sub(ERROR_SUFFIX.len());
    format!("{}{ERROR_SUFFIX}", utf8_prefix(error, keep))
}

/// The shared output budget of one run, carried across its exec and waits.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputBudget {
    /// The whole budget, `maxOutputBytes`.
    pub max: usize,
    /// Bytes already delivered or accepted.
    pub used: usize,
    /// Whether output was already cut once (later output is dropped).
    pub exhausted: bool,
}

impl OutputBudget {
    /// A fresh budget of `max` bytes.
    pub fn new(max: usize) -> Self {
        OutputBudget { max, used: 0, exhausted: false }
    }

    /// Admits output items while they fit the output share (half of what remains is kept for the value); when
    /// one does not fit, it is replaced by a truncation marker and everything after it is dropped.
    pub fn admit_output(&mut self, items: Vec<OutputItem>) -> Vec<OutputItem> {
        let mut admitted = Vec::with_capacity(items.len());
        for item in items {
            if self.exhausted {
                break;
            }
            let len = item.encoded_len();
            let share = self.max.saturating_sub(self.used) / 2;
            if len <= share {
                self.used += len;
                admitted.push(item);
            } else {
                let encoded = serde_json::to_string(&item).expect("output items always serialize");
                let value = truncation_marker(&encoded, share.max(200));
                self.used += serde_json::to_string(&value).map(|s| s.len()).unwrap_or(0);
                admitted.push(OutputItem::Json { value });
                self.exhausted = true;
            }
        }
        admitted
    }

    /// The final value, kept whole when it fits the rest of the budget, else the truncation marker.
    pub fn admit_value(&mut self, value: Value) -> Value {
        let room = self.max.saturating_sub(self.used).max(256);
        let value = truncate_value(value, room);
        self.used += serde_json::to_string(&value).map(|s| s.len()).unwrap_or(0);
        value
    }

    /// The error message, cut to its share: `max - min(used, max / 2)`.
    pub fn admit_error(&mut self, error: &str) -> String {
        let room = self.max - self.used.min(self.max / 2);
        truncate_error(error, room)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_respects_char_boundaries() {
        assert_eq!(utf8_prefix("a🦞b", 3), "a");
        assert_eq!(utf8_prefix("a🦞b", 5), "a🦞");
    }

    #[test]
    fn truncated_value_is_a_marker_that_fits() {
        let big = json!({ "s": "🦞\"\\".repeat(5000) });
        let v = truncate_value(big, 1024);
        assert_eq!(v["truncated"], true);
        assert!(serde_json::to_string(&v).unwrap().len() <= 1024);
    }

    #[test]
    fn truncated_error_keeps_the_cause() {
        let e = truncate_error(&format!("TypeError: boom {}", "é".repeat(100)), 72);
        assert!(e.starts_with("TypeError: boom"));
        assert!(e.ends_with(" [error truncated]"));
        assert!(e.len() <= 72);
    }
}
