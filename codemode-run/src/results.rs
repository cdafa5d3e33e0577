//! The result store: oversized final objects and arrays kept host-side, per session, so a later exec can read them
//! back with `results.load(id)` instead of losing them to truncation.
//!
//! Bounded in entries (64) and bytes (the inbox size, `min(memoryLimitBytes, maxSnapshotBytes)`); the oldest entries
//! are evicted first. A reference the model sees is at most 768 bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use codemode_bridge::utf8_prefix;
use serde_json::{Value, json};

const MAX_ENTRIES: usize = 64;
const MAX_REFERENCE_BYTES: usize = 768;
const GUIDANCE: &str = "Full result saved for this run; use results.load(reference.id) in a later exec.";

/// `(id, value, encoded bytes)`, oldest first.
type Entries = VecDeque<(String, Value, usize)>;

/// Oversized final values per session, oldest evicted first.
#[derive(Default)]
pub struct ResultStore {
    sessions: Mutex<HashMap<String, Entries>>,
}

impl ResultStore {
    /// Saves `value` (an object or array whose JSON is `bytes` long) and returns the reference marker, or `None`
    /// when it cannot be kept (too large for the store).
    pub(crate) fn save(&self, session: &str, value: Value, bytes: usize, max_bytes: usize) -> Option<Value> {
        if bytes > max_bytes || !(value.is_object() || value.is_array()) {
            return None;
        }
        let id = format!("result_{}", uuid::Uuid::new_v4());
        let marker = reference(&id, &value, bytes);
        let mut sessions = self.sessions.lock().expect("result store lock");
        let entries = sessions.entry(session.to_owned()).or_default();
        entries.push_back((id, value, bytes));
        let mut total: usize = entries.iter().map(|e| e.2).sum();
        while entries.len() > MAX_ENTRIES || total > max_bytes {
            let Some((_, _, b)) = entries.pop_front() else { break };
            total -= b;
        }
        Some(marker)
    }

    /// The saved value, if the session still holds it.
    pub(crate) fn load(&self, session: &str, id: &str) -> Option<Value> {
        let sessions = self.sessions.lock().expect("result store lock");
        sessions.get(session)?.iter().find(|(i, _, _)| i == id).map(|(_, v, _)| v.clone())
    }
}

fn shape(value: &Value) -> String {
    match value {
        Value::Array(items) => match items.first() {
            Some(Value::Object(first)) => {
                let keys: Vec<&str> = first.keys().take(12).map(String::as_str).collect();
                format!("array of {} objects {{{}}}", items.len(), keys.join(", "))
            }
            Some(other) => format!("array of {} {}", items.len(), kind(other)),
            None => "empty array".into(),
        },
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().take(16).map(String::as_str).collect();
            format!("object {{{}}}", keys.join(", "))
        }
        other => kind(other).into(),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "booleans",
        Value::Number(_) => "numbers",
        Value::String(_) => "strings",
        Value::Array(_) => "arrays",
        Value::Object(_) => "objects",
    }
}

fn reference(id: &str, value: &Value, bytes: usize) -> Value {
    let count = match value {
        Value::Array(a) => a.len(),
        Value::Object(o) => o.len(),
        _ => 1,
    };
    let encoded = value.to_string();
    let mut room = 320;
    loop {
        let preview = utf8_prefix(&encoded, room);
        let mut shape = shape(value);
        shape.truncate(utf8_prefix(&shape, 160).len());
        let marker = json!({
            "truncated": true,
            "reference": {
                "id": id,
                "bytes": bytes,
                "count": count,
                "shape": shape,
                "preview": preview,
                "previewTruncated": preview.len() < encoded.len(),
            },
            "guidance": GUIDANCE,
        });
        let reference_len = marker["reference"].to_string().len();
        if reference_len <= MAX_REFERENCE_BYTES || room == 0 {
            return marker;
        }
        room /= 2;
    }
}
