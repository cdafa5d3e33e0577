//! Byte budgets and truncation markers.
//!
//! Output, value and error of one run share `maxOutputBytes` of UTF-8 across the exec and all its waits. Whatever
//! is cut keeps valid JSON and valid UTF-8: a truncated value becomes a marker object, a truncated error keeps its
//! leading cause and ends with ` [error truncated]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use codemode_telemetry::json_len;
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
    bound_value(value, max)
}

/// The truncation marker for an already-encoded JSON text that does not fit `max` bytes.
pub fn truncation_marker(encoded: &str, max: usize) -> Value {
    marker(encoded, encoded.len(), max)
}

/// `value` if its compact JSON fits `max` bytes, else the truncation marker; in one pass over the value that
/// keeps at most `max` bytes of its text, so a huge value is never encoded whole.
pub fn bound_value(value: Value, max: usize) -> Value {
    match encoded_head(&value, max) {
        None => value,
        Some((head, total)) => marker(&head, total, max),
    }
}

/// `None` when `value`'s compact JSON fits `max` bytes; else its first `max` bytes (cut back to a character
/// boundary) and its whole length, counted without keeping the rest.
///
/// A value that fits is only counted, without a copy of its text; the count stops at the first byte over `max`.
pub fn encoded_head(value: &impl serde::Serialize, max: usize) -> Option<(String, usize)> {
    struct Count {
        max: usize,
        total: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.total += bytes.len();
            if self.total > self.max {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    if serde_json::to_writer(Count { max, total: 0 }, value).is_ok() {
        return None;
    }
    struct Head {
        kept: Vec<u8>,
        max: usize,
        total: usize,
    }
    impl std::io::Write for Head {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let room = self.max.saturating_sub(self.kept.len()).min(bytes.len());
            self.kept.extend_from_slice(&bytes[..room]);
            self.total += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut head = Head { kept: Vec::new(), max, total: 0 };
    // Writing to memory cannot fail; a value that cannot serialize (never a JSON value) keeps what it wrote.
    let _ = serde_json::to_writer(&mut head, value);
    if head.total <= max {
        return None;
    }
    let text = match String::from_utf8(head.kept) {
        Ok(text) => text,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
    };
    Some((text, head.total))
}

/// The marker for a JSON text of `total` bytes that starts with `head` (at least the marker's prefix room).
fn marker(head: &str, total: usize, max: usize) -> Value {
    // The marker without a prefix costs about 130 bytes; the prefix gets what is left, and since it is embedded as
    // a JSON string, escapes can grow it, so shrink until the whole marker fits.
    let mut room = max.saturating_sub(160);
    loop {
        let prefix = utf8_prefix(head, room);
        let m = json!({
            "truncated": true,
            "omittedBytes": total - prefix.len(),
            "guidance": TRUNCATION_GUIDANCE,
            "prefix": prefix,
        });
        if room == 0 || json_len(&m) <= max {
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
///
/// Output is admitted item by item as the worker sends it ([`OutputBudget::admit_item`]), so the host never holds
/// more than the budget of output; what does not fit is counted and dropped at once, and the truncation marker
/// that stands for it says, when it is delivered ([`OutputBudget::deliver`]), how many bytes it stands for.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputBudget {
    /// The whole budget, `maxOutputBytes`.
    pub max: usize,
    /// Bytes already delivered or accepted.
    pub used: usize,
    /// Whether output was already cut once (later output is dropped).
    pub exhausted: bool,
    /// Bytes of output dropped since the marker was admitted and not yet reported by a delivered marker.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
    /// Whether the marker was admitted and not delivered yet (it is then the last undelivered item).
    #[serde(skip)]
    marker_undelivered: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl OutputBudget {
    /// A fresh budget of `max` bytes.
    pub fn new(max: usize) -> Self {
        OutputBudget { max, used: 0, exhausted: false, dropped: 0, marker_undelivered: false }
    }

    /// Admits output items while they fit the output share (half of what remains is kept for the value); when
    /// one does not fit, it is replaced by a truncation marker and everything after it is dropped (and counted).
    pub fn admit_output(&mut self, items: Vec<OutputItem>) -> Vec<OutputItem> {
        let mut admitted = Vec::with_capacity(items.len());
        for item in items {
            self.admit_item(item, &mut admitted);
        }
        self.deliver(admitted)
    }

    /// Admits one output item as it arrives, appending what is kept to `into` (undelivered output): the item
    /// itself while it fits the output share, else the truncation marker once; an item after the marker is
    /// dropped and only its encoded length is kept, for the marker.
    pub fn admit_item(&mut self, item: OutputItem, into: &mut Vec<OutputItem>) {
        let len = item.encoded_len();
        if self.exhausted {
            self.dropped = self.dropped.saturating_add(len as u64);
            return;
        }
        let share = self.max.saturating_sub(self.used) / 2;
        if len <= share {
            self.used += len;
            into.push(item);
        } else if let OutputItem::Attachment { block } = &item {
            // An attachment is whole or absent: a cut block would be no block at all.
            let kind = block.get("type").and_then(Value::as_str).unwrap_or("content").to_owned();
            let text = format!(
                "attach(): the {kind} block of {len} bytes was not attached: it does not fit the output budget \
                 (maxOutputBytes {}, {share} bytes left for output); attach less, or a smaller block",
                self.max
            );
            let refusal = OutputItem::Text { text };
            self.used += refusal.encoded_len().min(share);
            into.push(refusal);
        } else {
            let room = share.max(200);
            let (head, total) = encoded_head(&item, room).unwrap_or_else(|| (String::new(), len));
            drop(item);
            let value = marker(&head, total, room);
            self.used += crate::json_len(&value);
            into.push(OutputItem::Json { value });
            self.exhausted = true;
            self.marker_undelivered = true;
        }
    }

    /// The undelivered output `items`, ready to hand to the caller: the marker among them counts every byte
    /// dropped after it so far; when the marker went out with an earlier result and more was dropped since, a
    /// marker for those bytes (without a prefix) ends the output.
    pub fn deliver(&mut self, mut items: Vec<OutputItem>) -> Vec<OutputItem> {
        let dropped = std::mem::take(&mut self.dropped);
        let undelivered = std::mem::take(&mut self.marker_undelivered);
        if dropped == 0 {
            return items;
        }
        if undelivered && let Some(OutputItem::Json { value }) = items.last_mut() {
            let omitted = value["omittedBytes"].as_u64().unwrap_or(0);
            value["omittedBytes"] = Value::from(omitted.saturating_add(dropped));
        } else {
            let value = json!({
                "truncated": true,
                "omittedBytes": dropped,
                "guidance": TRUNCATION_GUIDANCE,
                "prefix": "",
            });
            self.used += crate::json_len(&value);
            items.push(OutputItem::Json { value });
        }
        items
    }

    /// The final value, kept whole when it fits the rest of the budget, else the truncation marker.
    pub fn admit_value(&mut self, value: Value) -> Value {
        let room = self.max.saturating_sub(self.used).max(256);
        let value = truncate_value(value, room);
        self.used += crate::json_len(&value);
        value
    }

    /// The error message, cut to its share: `max - min(used, max / 2)`.
    pub fn admit_error(&mut self, error: &str) -> String {
        let room = self.max - self.used.min(self.max / 2);
        truncate_error(error, room)
    }
}

/// The message of a reply refused because it would overflow the program's reply inbox (`inboxBytes` of encoded
/// replies per run): `bytes` is the reply, `left` what the inbox still takes, `max` its size. The worker and the
/// host both use it, so the journal holds the same refusal the program sees.
pub fn inbox_overflow_message(bytes: u64, left: u64, max: u64) -> String {
    format!(
        "Code Mode program-data budget exceeded: this reply is {bytes} bytes and the program has {left} of {max} \
         bytes left. Ask tools for smaller results (filters, limits, pagination)."
    )
}

/// A byte cap shared by every run of one engine (one host or gateway): what their journals hold together.
#[derive(Debug)]
pub struct SharedBytes {
    max: u64,
    used: AtomicU64,
}

impl SharedBytes {
    /// A shared cap of `max` bytes, none used.
    pub fn new(max: u64) -> Arc<SharedBytes> {
        Arc::new(SharedBytes { max, used: AtomicU64::new(0) })
    }

    /// Bytes charged now, by all runs together.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The cap.
    pub fn max(&self) -> u64 {
        self.max
    }
}

/// Which cap a [`ByteCharge`] would pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverCap {
    /// The run's own cap: `(bytes it would hold, cap)`.
    Run(u64, u64),
    /// The cap shared by all runs of the engine: `(bytes they would hold, cap)`.
    Shared(u64, u64),
}

/// What one run holds against its own cap and the engine's shared one; dropping it gives the bytes back to the
/// shared cap. Some bytes may count against the shared cap only (those another cap of the run bounds already).
#[derive(Debug)]
pub struct ByteCharge {
    max: u64,
    /// Bytes counted against the run's cap.
    held: u64,
    /// Bytes counted against the shared cap (all the run holds).
    total: u64,
    shared: Option<Arc<SharedBytes>>,
}

impl ByteCharge {
    /// A charge of nothing against `max` bytes for this run and, when given, the shared cap.
    pub fn new(max: u64, shared: Option<Arc<SharedBytes>>) -> ByteCharge {
        ByteCharge { max, held: 0, total: 0, shared }
    }

    /// Bytes this run holds against its own cap.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Charges `bytes` more against both caps, unless that passes either (then nothing is charged).
    ///
    /// # Errors
    ///
    /// The cap it would pass, with the bytes that would be held.
    pub fn add(&mut self, bytes: u64) -> Result<(), OverCap> {
        self.add_split(bytes, bytes)
    }

    /// Charges `total` bytes against the shared cap, of which `own` also count against the run's cap, unless that
    /// passes either (then nothing is charged).
    ///
    /// # Errors
    ///
    /// The cap it would pass, with the bytes that would be held.
    pub fn add_split(&mut self, own: u64, total: u64) -> Result<(), OverCap> {
        let held = self.held.saturating_add(own);
        if held > self.max {
            return Err(OverCap::Run(held, self.max));
        }
        if let Some(shared) = &self.shared {
            let max = shared.max;
            shared
                .used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                    used.checked_add(total).filter(|sum| *sum <= max)
                })
                .map_err(|used| OverCap::Shared(used.saturating_add(total), max))?;
        }
        self.held = held;
        self.total = self.total.saturating_add(total);
        Ok(())
    }
}

impl Drop for ByteCharge {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.used.fetch_sub(self.total, Ordering::Relaxed);
        }
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
    fn a_value_fits_up_to_its_exact_length_and_past_it_gives_its_head_and_length() {
        let value = json!({ "s": "ab🦞".repeat(40), "n": [1, 2.5, null] });
        let text = serde_json::to_string(&value).unwrap();
        assert_eq!(encoded_head(&value, text.len()), None);
        assert_eq!(encoded_head(&value, usize::MAX), None);
        let (head, total) = encoded_head(&value, text.len() - 1).expect("one byte over");
        assert_eq!(total, text.len());
        assert_eq!(head, text[..text.len() - 1]);
        // The cut backs off to a character boundary: 9 bytes end inside the first crab.
        assert_eq!(encoded_head(&value, 9), Some((text[..8].to_owned(), text.len())), "{text}");
        assert_eq!(bound_value(value.clone(), text.len()), value);
    }

    #[test]
    fn truncated_value_is_a_marker_that_fits() {
        let big = json!({ "s": "🦞\"\\".repeat(5000) });
        let v = truncate_value(big, 1024);
        assert_eq!(v["truncated"], true);
        assert!(serde_json::to_string(&v).unwrap().len() <= 1024);
    }

    #[test]
    fn dropped_output_is_counted_by_the_marker() {
        let mut budget = OutputBudget::new(1024);
        let mut undelivered = Vec::new();
        let line = OutputItem::Text { text: "x".repeat(30) };
        let each = line.encoded_len() as u64;
        for _ in 0..3000 {
            budget.admit_item(line.clone(), &mut undelivered);
        }
        let kept = undelivered.len() as u64;
        assert!(undelivered.len() < 20, "the host keeps only what fits");
        let out = budget.deliver(undelivered);
        let OutputItem::Json { value } = out.last().unwrap() else { panic!("a marker ends the output") };
        let prefix = value["prefix"].as_str().unwrap().len() as u64;
        // Every byte of the lines not kept is counted: the cut line's tail and all the dropped ones.
        assert_eq!(value["omittedBytes"].as_u64().unwrap(), (3000 - kept + 1) * each - prefix);
        // Dropped after the marker went out: a later delivery says so with a marker of its own.
        let mut later = Vec::new();
        budget.admit_item(line.clone(), &mut later);
        let out = budget.deliver(later);
        assert_eq!(out.len(), 1);
        let OutputItem::Json { value } = &out[0] else { panic!("a marker") };
        assert_eq!(value["omittedBytes"].as_u64().unwrap(), each);
    }

    #[test]
    fn charges_stop_at_either_cap_and_give_back_on_drop() {
        let shared = SharedBytes::new(100);
        let mut a = ByteCharge::new(80, Some(shared.clone()));
        let mut b = ByteCharge::new(80, Some(shared.clone()));
        a.add(60).unwrap();
        assert_eq!(a.add(30), Err(OverCap::Run(90, 80)));
        assert_eq!(b.add(50), Err(OverCap::Shared(110, 100)));
        b.add(40).unwrap();
        assert_eq!(shared.used(), 100);
        drop(a);
        assert_eq!(shared.used(), 40);
        b.add(40).unwrap();
    }

    #[test]
    fn truncated_error_keeps_the_cause() {
        let e = truncate_error(&format!("TypeError: boom {}", "é".repeat(100)), 72);
        assert!(e.starts_with("TypeError: boom"));
        assert!(e.ends_with(" [error truncated]"));
        assert!(e.len() <= 72);
    }
}
