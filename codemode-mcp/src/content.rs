//! Content blocks between upstream servers, programs and the client: the bytes of an image or audio block an
//! upstream tool returns stay in the gateway (the program gets a handle in their place), and each `attach(block)`
//! of a program becomes a content block of the `exec`/`wait` result, after the result's JSON text, its place in the
//! output keeping a small note that points at it (so the bytes are in the text and `structuredContent` not at all).
//! A handle the program returns (inside its return value, at any depth, as the tool gave it) becomes a content
//! block too, the handle in the value gaining the block's `contentIndex`.
//!
//! Invariant: a block reaches the client as the upstream server sent it (a handle is resolved to the very block it
//! stands for, and only when its declared size is its real one) or as the program built it (the vm checked its
//! shape); anything else stays in the output as a note saying why it was not attached.

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex};

use rmcp::model::ContentBlock;
use serde_json::{Value, json};

/// Bytes of `data` below which a block is handed to the program as it is: a handle would save nothing.
const HANDLE_MIN_BYTES: usize = 1024;
/// Bytes of blocks the gateway keeps for handles; the oldest are dropped past it.
const KEPT_BYTES: usize = 64 * 1024 * 1024;

/// The blocks kept for handles, oldest first.
#[derive(Default)]
struct Kept {
    blocks: HashMap<String, Value>,
    order: VecDeque<(String, usize)>,
    bytes: usize,
}

/// The blocks of this gateway process's handles.
static KEPT: LazyLock<Mutex<Kept>> = LazyLock::new(|| Mutex::new(Kept::default()));

fn kept() -> std::sync::MutexGuard<'static, Kept> {
    KEPT.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Replaces the bytes of each large image or audio block of a tool result (its `content`, as the guest will see it)
/// with a handle: `{type, mimeType, attachment: "att_<uuid>", bytes}` (annotations and `_meta` kept). The program
/// passes the handle to `attach` to send the block on; the bytes never enter the guest.
pub fn hand_off(result: &mut Value) {
    let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) else { return };
    for block in blocks.iter_mut().filter(|b| matches!(b["type"].as_str(), Some("image" | "audio"))) {
        let Some(len) = block.get("data").and_then(Value::as_str).map(str::len) else { continue };
        if len < HANDLE_MIN_BYTES {
            continue;
        }
        let handle = format!("att_{}", uuid::Uuid::new_v4().simple());
        let mut shown = block.clone();
        if let Value::Object(map) = &mut shown {
            map.remove("data");
            map.insert("attachment".into(), Value::String(handle.clone()));
            map.insert("bytes".into(), Value::from(len));
        }
        let whole = std::mem::replace(block, shown);
        let mut kept = kept();
        kept.blocks.insert(handle.clone(), whole);
        kept.order.push_back((handle, len));
        kept.bytes += len;
        while kept.bytes > KEPT_BYTES {
            let Some((old, old_len)) = kept.order.pop_front() else { break };
            kept.blocks.remove(&old);
            kept.bytes -= old_len;
        }
    }
}

/// The block a handle stands for, checked against what the handle says: the bytes it declared (the output budget
/// counted those) and its type.
fn resolve(handle_block: &Value) -> Result<Value, String> {
    let handle = handle_block["attachment"].as_str().unwrap_or_default();
    let Some(block) = kept().blocks.get(handle).cloned() else {
        return Err(format!(
            "attachment {handle} is not held by this gateway process any more (it keeps the newest {} MiB of tool \
             images and audio); call the tool again and attach its new result",
            KEPT_BYTES / (1024 * 1024)
        ));
    };
    let real = block["data"].as_str().map_or(0, str::len) as u64;
    if handle_block["bytes"].as_u64() != Some(real) || handle_block["type"] != block["type"] {
        return Err(format!("attachment {handle} was changed by the program: attach the handle as the tool gave it"));
    }
    Ok(block)
}

/// Takes the attachments out of the output of `value` (a `CodeModeResult` as JSON), replacing each with a note
/// naming its index in the result's `content`; `first_index` is the index of the first block taken. A handle is
/// resolved to its block; one that cannot be, stays as a note saying why.
pub fn take_attachments(value: &mut Value, first_index: usize) -> Vec<ContentBlock> {
    let mut blocks = Vec::new();
    let Some(items) = value.get_mut("output").and_then(Value::as_array_mut) else { return blocks };
    for item in items.iter_mut().filter(|item| item["type"] == "attachment") {
        let attached = &item["block"];
        let block = if attached.get("attachment").is_some() { resolve(attached) } else { Ok(attached.clone()) };
        let block = block.and_then(|b| {
            serde_json::from_value::<ContentBlock>(b).map_err(|e| format!("not an MCP content block: {e}"))
        });
        *item = match block {
            Ok(block) => {
                let note = json!({
                    "type": "attachment",
                    "contentIndex": first_index + blocks.len(),
                    "blockType": attached["type"],
                    "mimeType": attached.get("mimeType").cloned().unwrap_or(Value::Null),
                });
                blocks.push(block);
                note
            }
            Err(why) => json!({ "type": "text", "text": format!("attach(): not attached: {why}") }),
        };
    }
    blocks
}

/// Turns each image or audio handle inside the returned value of `value` (a `CodeModeResult` as JSON, its `value`)
/// into a content block, numbered from `first_index`: the handle object gains `contentIndex` (a handle returned
/// twice names one block). Blocks beyond `budget` bytes of data in all, and handles that cannot be resolved, stay
/// handles with `notAttached` saying why.
pub fn take_returned(value: &mut Value, first_index: usize, budget: usize) -> Vec<ContentBlock> {
    let mut blocks = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut used = 0usize;
    if let Some(returned) = value.get_mut("value") {
        visit_handles(returned, &mut |handle| {
            let id = handle["attachment"].as_str().unwrap_or_default().to_owned();
            if let Some(index) = seen.get(&id) {
                handle["contentIndex"] = Value::from(*index);
                return;
            }
            let bytes = handle["bytes"].as_u64().map_or(usize::MAX, |b| usize::try_from(b).unwrap_or(usize::MAX));
            if used.saturating_add(bytes) > budget {
                handle["notAttached"] = Value::String(format!(
                    "the returned blocks exceed the output budget ({budget} bytes): attach() fewer, or return fewer"
                ));
                return;
            }
            let block = resolve(handle).and_then(|b| {
                serde_json::from_value::<ContentBlock>(b).map_err(|e| format!("not an MCP content block: {e}"))
            });
            match block {
                Ok(block) => {
                    let index = first_index + blocks.len();
                    used += bytes;
                    blocks.push(block);
                    seen.insert(id, index);
                    handle["contentIndex"] = Value::from(index);
                }
                Err(why) => handle["notAttached"] = Value::String(why),
            }
        });
    }
    blocks
}

/// Calls `found` on every object under `value` that is an image or audio handle (`type`, `attachment: "att_…"`).
fn visit_handles(value: &mut Value, found: &mut impl FnMut(&mut Value)) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|item| visit_handles(item, found)),
        Value::Object(map) => {
            let is_handle = matches!(map.get("type").and_then(Value::as_str), Some("image" | "audio"))
                && map.get("attachment").and_then(Value::as_str).is_some_and(|h| h.starts_with("att_"));
            if is_handle {
                found(value);
            } else {
                map.values_mut().for_each(|item| visit_handles(item, found));
            }
        }
        _ => {}
    }
}

/// Adds `by` to every `contentIndex` in `value` (a `CodeModeResult` as JSON): its blocks now follow `by` others.
pub fn shift_indexes(value: &mut Value, by: usize) {
    if by == 0 {
        return;
    }
    match value {
        Value::Array(items) => items.iter_mut().for_each(|item| shift_indexes(item, by)),
        Value::Object(map) => {
            if let Some(index) = map.get("contentIndex").and_then(Value::as_u64) {
                map.insert("contentIndex".into(), Value::from(index + by as u64));
            }
            map.values_mut().for_each(|item| shift_indexes(item, by));
        }
        _ => {}
    }
}
