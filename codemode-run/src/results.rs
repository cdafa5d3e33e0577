//! The result store: oversized final objects and arrays kept host-side, per session, so a later exec can read them
//! back with `results.load(id)` instead of losing them to truncation.
//!
//! Bounded in entries (64) and bytes (the inbox size, `min(memoryLimitBytes, maxSnapshotBytes)`); the oldest entries
//! are evicted first. A reference the model sees is at most 768 bytes. In a fleet the values are written to the
//! shared store too, so `results.load` works on any replica.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use codemode_bridge::utf8_prefix;
use codemode_snapshot::{FleetBackend, StoreError};
use serde_json::{Value, json};

const MAX_ENTRIES: usize = 64;
const MAX_REFERENCE_BYTES: usize = 768;
const GUIDANCE: &str = "Full result saved for this run; use results.load(reference.id) in a later exec.";

/// `(id, value, encoded bytes)`, oldest first.
type Entries = VecDeque<(String, Value, usize)>;

/// A saved value not yet written to the shared store: `(session, id, value, max_bytes)`.
type Unwritten = (String, String, Value, usize);

/// Oversized final values per session, oldest evicted first; kept in this process, and in the fleet's store too
/// when the engine has one, so another replica's `results.load` finds them.
#[derive(Default)]
pub struct ResultStore {
    sessions: Mutex<HashMap<String, Entries>>,
    shared: Option<Arc<dyn FleetBackend>>,
    unwritten: Mutex<Vec<Unwritten>>,
}

impl ResultStore {
    /// A store that also keeps every value in `backend`, shared by the replicas of a fleet.
    pub fn shared(backend: Arc<dyn FleetBackend>) -> Self {
        ResultStore { shared: Some(backend), ..ResultStore::default() }
    }

    /// Saves `value` (an object or array whose JSON is `bytes` long) and returns the reference marker, or `None`
    /// when it cannot be kept (too large for the store). With a shared store, [`ResultStore::flush`] writes it
    /// there before the result that names it is returned.
    pub(crate) fn save(&self, session: &str, value: Value, bytes: usize, max_bytes: usize) -> Option<Value> {
        if bytes > max_bytes || !(value.is_object() || value.is_array()) {
            return None;
        }
        let id = format!("result_{}", uuid::Uuid::new_v4());
        let marker = reference(&id, &value, bytes);
        if self.shared.is_some() {
            let unwritten = (session.to_owned(), id.clone(), value.clone(), max_bytes);
            self.unwritten.lock().expect("result store lock").push(unwritten);
        }
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

    /// Writes the values saved since the last flush to the shared store, if there is one. A value that could not
    /// be written stays readable in this process.
    pub(crate) async fn flush(&self) {
        let Some(shared) = &self.shared else { return };
        let unwritten = std::mem::take(&mut *self.unwritten.lock().expect("result store lock"));
        for (session, id, value, max_bytes) in unwritten {
            let _ = shared.result_put(&session, &id, &value, max_bytes).await;
        }
    }

    /// The saved value, if the session still holds it (here, or in the shared store).
    ///
    /// # Errors
    ///
    /// The shared store could not be read.
    pub(crate) async fn load(&self, session: &str, id: &str) -> Result<Option<Value>, StoreError> {
        let local = {
            let sessions = self.sessions.lock().expect("result store lock");
            sessions.get(session).and_then(|e| e.iter().find(|(i, _, _)| i == id)).map(|(_, v, _)| v.clone())
        };
        match (local, &self.shared) {
            (Some(value), _) => Ok(Some(value)),
            (None, Some(shared)) => shared.result_get(session, id).await,
            (None, None) => Ok(None),
        }
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
