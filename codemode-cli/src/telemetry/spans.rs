//! The span subscriber of an exporting process: each `codemode` `tracing` span becomes an OpenTelemetry span, kept
//! in the subscriber's own table while it is open and handed, as the SDK's `SpanData`, to the batch span processor
//! when it closes. A span ends when it was last exited (as with tracing-opentelemetry), or when it closes if it was
//! never entered: the span of a call that answered at once is closed once its settlement is on its way to the
//! program, but ends when the call's future last ran.
//!
//! It is a whole `tracing` subscriber rather than a layer over `tracing_subscriber`'s registry: the process has no
//! other consumer of spans, and a span's life here (a slot in one table, a thread's stack of entered spans) costs a
//! fraction of the registry's and its layers' bookkeeping (`docs/observability.md`, "Cost").
//!
//! It honours what the SDK's tracer would: the sampler and span limits of `OTEL_TRACES_SAMPLER`,
//! `OTEL_TRACES_SAMPLER_ARG` and `OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`, and tracing-opentelemetry's special fields
//! (`otel.name`, `otel.kind`, `otel.status_code`, `otel.status_description`). Invariants: only the spans of the
//! `codemode` target (and targets under it) are enabled, none while export is paused, and no event; a span is
//! exported once, when its last handle closes, and only when sampled; a child takes its trace, sampling decision and
//! trace state from its parent, or, for a span the gateway continues from a request's `traceparent`, from the
//! remote parent; an id names its slot and the slot's generation, so an id kept past its span's close finds nothing.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags};
use opentelemetry::{Context, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, Config, IdGenerator, SamplingDecision, ShouldSample, SpanData, SpanEvents, SpanLinks,
    SpanProcessor as _,
};
use thread_local::ThreadLocal;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata};
use tracing_core::span::Current;

/// Pauses and resumes a [`Spans`] subscriber.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pause(Arc<AtomicBool>);

impl Pause {
    /// Pauses (`true`) or resumes the spans: while paused, every callsite is disabled.
    pub(crate) fn set(&self, paused: bool) {
        self.0.store(paused, Ordering::Relaxed);
        tracing::callsite::rebuild_interest_cache();
    }

    fn paused(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The subscriber: where closed spans go, how new ones are sampled and named, and the open ones.
pub(crate) struct Spans {
    processor: Arc<BatchSpanProcessor>,
    sampler: Box<dyn ShouldSample>,
    ids: Box<dyn IdGenerator>,
    max_attributes: usize,
    scope: InstrumentationScope,
    pause: Pause,
    slots: Mutex<Slots>,
    /// Each thread's entered spans, innermost last.
    entered: ThreadLocal<RefCell<Vec<Id>>>,
}

/// The open spans, each in a slot; a closed span's slot is reused under its next generation.
#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

struct Slot {
    generation: u32,
    /// The span's handles (`Span` values) still open.
    handles: usize,
    metadata: &'static Metadata<'static>,
    /// `None` while the slot is free.
    span: Option<OpenSpan>,
}

impl Slots {
    /// The open span `id` names.
    fn get(&mut self, id: &Id) -> Option<&mut Slot> {
        let (index, generation) = split(id);
        self.slots.get_mut(index).filter(|slot| slot.generation == generation && slot.span.is_some())
    }

    /// Opens a slot for `span`; its id.
    fn insert(&mut self, metadata: &'static Metadata<'static>, span: OpenSpan) -> Id {
        let index = match self.free.pop() {
            Some(index) => index as usize,
            None => {
                self.slots.push(Slot { generation: 0, handles: 0, metadata, span: None });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.handles = 1;
        slot.metadata = metadata;
        slot.span = Some(span);
        join(index, slot.generation)
    }
}

/// An id's slot index and generation: the low 32 bits hold the index plus one (ids are never 0), the high ones the
/// generation.
fn split(id: &Id) -> (usize, u32) {
    let raw = id.into_u64();
    (((raw & 0xffff_ffff) as usize).wrapping_sub(1), (raw >> 32) as u32)
}

fn join(index: usize, generation: u32) -> Id {
    Id::from_u64((u64::from(generation) << 32) | (index as u64 + 1))
}

impl Spans {
    /// A subscriber handing closed spans to `processor`, with `config`'s sampler, id generator and attribute limit
    /// (`Config::default()` reads them from the environment).
    pub(crate) fn new(processor: Arc<BatchSpanProcessor>, config: Config) -> Spans {
        Spans {
            processor,
            sampler: config.sampler,
            ids: config.id_generator,
            max_attributes: config.span_limits.max_attributes_per_span as usize,
            scope: InstrumentationScope::builder("codemode").build(),
            pause: Pause::default(),
            slots: Mutex::default(),
            entered: ThreadLocal::new(),
        }
    }

    /// What pauses and resumes this subscriber.
    pub(crate) fn pause(&self) -> Pause {
        self.pause.clone()
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the spans of `metadata` are recorded.
    fn wants(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_span() && !self.pause.paused() && metadata.target().starts_with(codemode_telemetry::otel::TARGET)
    }

    /// The innermost span this thread entered.
    fn current(&self) -> Option<Id> {
        self.entered.get().and_then(|stack| stack.borrow().last().cloned())
    }

    /// Samples a span with no local parent: under `remote` (a parent from another process), or as a trace's root.
    fn sample(&self, open: &mut OpenSpan, remote: Option<&SpanContext>) {
        let parent = remote.map(|remote| Context::new().with_remote_span_context(remote.clone()));
        let trace_id = remote.map_or_else(|| self.ids.new_trace_id(), SpanContext::trace_id);
        let attributes = open.key_values();
        let result = self.sampler.should_sample(parent.as_ref(), trace_id, open.name(), &open.kind, &attributes, &[]);
        let flags = remote.map_or(TraceFlags::default(), SpanContext::trace_flags);
        let sampled = result.decision == SamplingDecision::RecordAndSample;
        let span_id = open.context.span_id();
        open.context = SpanContext::new(trace_id, span_id, flags.with_sampled(sampled), false, result.trace_state);
        open.parent = remote.map_or(SpanId::INVALID, SpanContext::span_id);
        open.parent_remote = remote.is_some();
        if sampled {
            open.attributes.extend(result.attributes.into_iter().map(Attribute::Value));
        }
    }

    /// Hands a closed span to the processor, if it is sampled.
    fn export(&self, mut open: OpenSpan) {
        if !open.context.is_sampled() {
            return;
        }
        let attributes = open.take_key_values();
        let name = match &open.name_text {
            Some(range) => Cow::Owned(open.text(range).to_owned()),
            None => open.name,
        };
        let status = match open.error {
            Some(true) => Status::Error { description: open.description.unwrap_or_default().into() },
            Some(false) => Status::Ok,
            None => Status::Unset,
        };
        self.processor.on_end(SpanData {
            span_context: open.context,
            parent_span_id: open.parent,
            parent_span_is_remote: open.parent_remote,
            span_kind: open.kind,
            name,
            start_time: open.start,
            end_time: open.exited.unwrap_or_else(SystemTime::now),
            attributes,
            dropped_attributes_count: open.dropped,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        });
    }
}
/// Room for the strings of a span as it opens: a nested call's (its name, tool, call id and run id) fit.
const TEXT_BYTES: usize = 128;

/// One open span.
struct OpenSpan {
    /// Its trace id, span id, sampling flag and trace state.
    context: SpanContext,
    parent: SpanId,
    parent_remote: bool,
    kind: SpanKind,
    name: Cow<'static, str>,
    /// `otel.name` as the span opened, in `texts`.
    name_text: Option<Range<u32>>,
    start: SystemTime,
    /// When the span was last exited: its end time, if it was ever entered.
    exited: Option<SystemTime>,
    /// Collected only while the span may be exported: empty under an unsampled parent.
    attributes: Vec<Attribute>,
    /// The strings recorded as the span opened, one after another: copied into one buffer then (instead of one
    /// string each), and made attribute values when the span closes.
    texts: String,
    dropped: u32,
    /// `otel.status_code`: `Some(true)` for `ERROR`, `Some(false)` for `OK`.
    error: Option<bool>,
    description: Option<String>,
}

/// An attribute of an open span: a value, or a string recorded as the span opened, kept in the span's `texts`.
enum Attribute {
    Value(KeyValue),
    Text(&'static str, Range<u32>),
}

impl OpenSpan {
    /// Sets `key` to `value`, replacing a value recorded before; beyond `max` attributes the new one is dropped and
    /// counted.
    fn set(&mut self, key: &'static str, value: Value, max: usize, replace: bool) {
        let same = |attribute: &&mut Attribute| match attribute {
            Attribute::Value(kv) => kv.key.as_str() == key,
            Attribute::Text(name, _) => *name == key,
        };
        if replace && let Some(attribute) = self.attributes.iter_mut().find(same) {
            *attribute = Attribute::Value(KeyValue::new(key, value));
        } else if self.attributes.len() < max {
            self.attributes.push(Attribute::Value(KeyValue::new(key, value)));
        } else {
            self.dropped += 1;
        }
    }

    /// Sets `key` to the string `value` as the span opens (no value to replace).
    fn set_text(&mut self, key: &'static str, value: &str, max: usize) {
        if self.attributes.len() < max {
            let range = self.push_text(value);
            self.attributes.push(Attribute::Text(key, range));
        } else {
            self.dropped += 1;
        }
    }

    /// Appends `value` to `texts`; its place there.
    fn push_text(&mut self, value: &str) -> Range<u32> {
        let start = self.texts.len();
        self.texts.push_str(value);
        // Field values come from the process's own call sites, far below 4 GiB together.
        u32::try_from(start).unwrap_or(u32::MAX)..u32::try_from(self.texts.len()).unwrap_or(u32::MAX)
    }

    fn text(&self, range: &Range<u32>) -> &str {
        self.texts.get(range.start as usize..range.end as usize).unwrap_or_default()
    }

    /// The span's name: `otel.name`, else its `tracing` name.
    fn name(&self) -> &str {
        self.name_text.as_ref().map_or(&self.name, |range| self.text(range))
    }

    /// The attributes as the SDK takes them, left empty.
    fn take_key_values(&mut self) -> Vec<KeyValue> {
        let attributes = std::mem::take(&mut self.attributes);
        let value = |attribute| match attribute {
            Attribute::Value(kv) => kv,
            Attribute::Text(key, range) => KeyValue::new(key, Value::from(self.text(&range).to_owned())),
        };
        attributes.into_iter().map(value).collect()
    }

    /// The attributes as the SDK takes them.
    fn key_values(&self) -> Vec<KeyValue> {
        let value = |attribute: &Attribute| match attribute {
            Attribute::Value(kv) => kv.clone(),
            Attribute::Text(key, range) => KeyValue::new(*key, Value::from(self.text(range).to_owned())),
        };
        self.attributes.iter().map(value).collect()
    }
}

/// Records `tracing` field values on an [`OpenSpan`]: the special `otel.*` fields set its name, kind and status,
/// every other field becomes an attribute.
struct Fields<'a> {
    span: &'a mut OpenSpan,
    max: usize,
    /// Whether a value may replace one recorded before (a `record` after creation).
    replace: bool,
}

impl Fields<'_> {
    fn value(&mut self, field: &Field, value: Value) {
        self.span.set(field.name(), value, self.max, self.replace);
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "otel.name" if self.replace => {
                self.span.name = Cow::Owned(value.to_owned());
                self.span.name_text = None;
            }
            "otel.name" => self.span.name_text = Some(self.span.push_text(value)),
            "otel.kind" => self.span.kind = kind(value),
            "otel.status_code" => {
                self.span.error = if value.eq_ignore_ascii_case("ERROR") {
                    Some(true)
                } else if value.eq_ignore_ascii_case("OK") {
                    Some(false)
                } else {
                    None
                };
            }
            "otel.status_description" => self.span.description = Some(value.to_owned()),
            _ if self.replace => self.value(field, Value::from(value.to_owned())),
            _ => self.span.set_text(field.name(), value, self.max),
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.value(field, Value::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.value(field, Value::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(value) => self.value(field, Value::I64(value)),
            Err(_) => self.value(field, Value::from(value.to_string())),
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.value(field, Value::F64(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.value(field, Value::from(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

/// The span kind `otel.kind` names (in any case), `INTERNAL` for anything else.
fn kind(value: &str) -> SpanKind {
    let kinds = [
        ("server", SpanKind::Server),
        ("client", SpanKind::Client),
        ("producer", SpanKind::Producer),
        ("consumer", SpanKind::Consumer),
    ];
    kinds.into_iter().find(|(name, _)| value.eq_ignore_ascii_case(name)).map_or(SpanKind::Internal, |(_, kind)| kind)
}

impl tracing::Subscriber for Spans {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.wants(metadata) { Interest::always() } else { Interest::never() }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.wants(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(if self.pause.paused() { LevelFilter::OFF } else { LevelFilter::TRACE })
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let parent = if attrs.is_contextual() { self.current() } else { attrs.parent().cloned() };
        let parent = parent.and_then(|parent| Some(self.slots().get(&parent)?.span.as_ref()?.context.clone()));
        let mut open = OpenSpan {
            context: SpanContext::empty_context(),
            parent: SpanId::INVALID,
            parent_remote: false,
            kind: SpanKind::Internal,
            name: Cow::Borrowed(attrs.metadata().name()),
            name_text: None,
            start: SystemTime::now(),
            exited: None,
            attributes: Vec::new(),
            texts: String::new(),
            dropped: 0,
            error: None,
            description: None,
        };
        // Under an unsampled parent nothing is exported, so no field is collected.
        if parent.as_ref().is_none_or(SpanContext::is_sampled) {
            open.attributes.reserve_exact(attrs.fields().len());
            open.texts.reserve(TEXT_BYTES);
            attrs.record(&mut Fields { span: &mut open, max: self.max_attributes, replace: false });
        }
        let span_id = self.ids.new_span_id();
        match parent {
            // The decision of every sampler `OTEL_TRACES_SAMPLER` can name is the same for all spans of a trace
            // under a local parent (the parent-based ones follow the parent, the others decide by trace id alone),
            // so a child takes its parent's instead of asking again.
            Some(parent) => {
                open.parent = parent.span_id();
                let state = parent.trace_state().clone();
                open.context = SpanContext::new(parent.trace_id(), span_id, parent.trace_flags(), false, state);
            }
            None => {
                let invalid = opentelemetry::trace::TraceId::INVALID;
                open.context = SpanContext::new(invalid, span_id, TraceFlags::default(), false, Default::default());
                self.sample(&mut open, None);
            }
        }
        self.slots().insert(attrs.metadata(), open)
    }

    fn record(&self, id: &Id, values: &Record<'_>) {
        let mut slots = self.slots();
        if let Some(open) = slots.get(id).and_then(|slot| slot.span.as_mut())
            && open.context.is_sampled()
        {
            values.record(&mut Fields { span: open, max: self.max_attributes, replace: true });
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, id: &Id) {
        self.entered.get_or_default().borrow_mut().push(id.clone());
    }

    fn exit(&self, id: &Id) {
        if let Some(stack) = self.entered.get() {
            let mut stack = stack.borrow_mut();
            if let Some(at) = stack.iter().rposition(|entered| entered == id) {
                stack.remove(at);
            }
        }
        let now = SystemTime::now();
        if let Some(open) = self.slots().get(id).and_then(|slot| slot.span.as_mut())
            && open.context.is_sampled()
        {
            open.exited = Some(now);
        }
    }

    fn clone_span(&self, id: &Id) -> Id {
        if let Some(slot) = self.slots().get(id) {
            slot.handles += 1;
        }
        id.clone()
    }

    fn try_close(&self, id: Id) -> bool {
        let closed = {
            let mut slots = self.slots();
            let Some(slot) = slots.get(&id) else { return false };
            slot.handles -= 1;
            if slot.handles > 0 {
                return false;
            }
            slot.generation = slot.generation.wrapping_add(1);
            let closed = slot.span.take();
            slots.free.push(split(&id).0 as u32);
            closed
        };
        if let Some(open) = closed {
            self.export(open);
        }
        true
    }

    fn current_span(&self) -> Current {
        match self.current().and_then(|id| Some((self.slots().get(&id)?.metadata, id))) {
            Some((metadata, id)) => Current::new(id, metadata),
            None => Current::none(),
        }
    }
}

/// Runs `f` on the subscriber and the open span behind `span`, when the process's subscriber is [`Spans`] and the
/// span is recorded; `None` otherwise.
fn with_open<T>(span: &tracing::Span, f: impl FnOnce(&Spans, &mut OpenSpan) -> T) -> Option<T> {
    span.with_subscriber(|(id, dispatch)| {
        let spans = dispatch.downcast_ref::<Spans>()?;
        let mut slots = spans.slots();
        let open = slots.get(id)?.span.as_mut()?;
        Some(f(spans, open))
    })
    .flatten()
}

/// Makes `span` a child of `remote`, a span of another process, and samples it again under it. Only a span without
/// children yet may move: the gateway calls it on a request's SERVER span as it opens.
pub(crate) fn set_remote_parent(span: &tracing::Span, remote: &SpanContext) {
    with_open(span, |spans, open| spans.sample(open, Some(remote)));
}

/// The trace context of `span`, to hand to the server a request goes to.
pub(crate) fn span_context(span: &tracing::Span) -> Option<SpanContext> {
    with_open(span, |_, open| open.context.clone())
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{TraceId, TraceState};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, Sampler};

    use super::*;

    /// Runs `f` under the subscriber (sampling with `sampler`, at most `max_attributes` a span) and
    /// returns the spans it exported, in the order they closed.
    fn exported(sampler: Sampler, max_attributes: u32, f: impl FnOnce()) -> Vec<SpanData> {
        let exporter = InMemorySpanExporter::default();
        let processor = Arc::new(BatchSpanProcessor::builder(exporter.clone()).build());
        let mut config = Config::default();
        config.sampler = Box::new(sampler);
        config.span_limits.max_attributes_per_span = max_attributes;
        tracing::subscriber::with_default(Spans::new(processor.clone(), config), f);
        processor.force_flush().expect("flush");
        exporter.get_finished_spans().expect("spans")
    }

    fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
        span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
    }

    fn remote(sampled: bool) -> SpanContext {
        SpanContext::new(
            TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c),
            SpanId::from(0xb7ad_6b71_6920_3331),
            TraceFlags::default().with_sampled(sampled),
            true,
            TraceState::from_key_value([("vendor", "x")]).expect("a trace state"),
        )
    }

    #[test]
    fn spans_keep_their_tree_names_kinds_attributes_and_status() {
        let spans = exported(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), 128, || {
            let run = tracing::info_span!("execute_tool", "otel.name" = "execute_tool exec", "otel.kind" = "internal");
            let call = tracing::info_span!(
                parent: &run,
                "execute_tool",
                "otel.name" = "execute_tool echo",
                "gen_ai.tool.name" = "echo",
                "codemode.replayed" = false,
                "jsonrpc.request.id" = 7_u64,
                "codemode.status" = tracing::field::Empty,
                "otel.status_code" = tracing::field::Empty,
                "otel.status_description" = tracing::field::Empty,
            );
            call.record("codemode.status", "ok");
            call.record("codemode.status", "error");
            call.record("otel.status_code", "ERROR");
            call.record("otel.status_description", "boom");
            drop(call);
            let server = tracing::info_span!(parent: None, "tools/call", "otel.kind" = "server");
            drop(server);
        });
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["execute_tool echo", "tools/call", "execute_tool exec"]);
        let (call, server, run) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(call.parent_span_id, run.span_context.span_id());
        assert_eq!(call.span_context.trace_id(), run.span_context.trace_id());
        assert!(!call.parent_span_is_remote);
        assert_eq!(run.parent_span_id, SpanId::INVALID);
        assert_ne!(server.span_context.trace_id(), run.span_context.trace_id(), "a root starts a trace");
        assert_eq!((run.span_kind.clone(), server.span_kind.clone()), (SpanKind::Internal, SpanKind::Server));
        assert_eq!(attribute(call, "gen_ai.tool.name"), Some(&Value::from("echo")));
        assert_eq!(attribute(call, "codemode.replayed"), Some(&Value::Bool(false)));
        assert_eq!(attribute(call, "jsonrpc.request.id"), Some(&Value::I64(7)));
        // A field recorded twice keeps its last value, once; the special fields are not attributes.
        assert_eq!(call.attributes.iter().filter(|kv| kv.key.as_str() == "codemode.status").count(), 1);
        assert_eq!(attribute(call, "codemode.status"), Some(&Value::from("error")));
        assert!(call.attributes.iter().all(|kv| !kv.key.as_str().starts_with("otel.")));
        assert_eq!(call.status, Status::error("boom"));
        assert_eq!(run.status, Status::Unset);
        assert!(call.start_time <= call.end_time && run.start_time <= call.start_time);
    }

    #[test]
    fn a_span_ends_when_it_was_last_exited() {
        let mut exited = None;
        let spans = exported(Sampler::AlwaysOn, 128, || {
            let span = tracing::info_span!("execute_tool");
            span.in_scope(|| {});
            exited = Some(SystemTime::now());
        });
        let exited = exited.expect("the span ran");
        assert!(spans[0].end_time <= exited, "{:?} after {exited:?}", spans[0].end_time);
        assert!(spans[0].start_time <= spans[0].end_time);
    }

    #[test]
    fn a_span_continues_a_remote_trace_and_hands_its_own_context_on() {
        let mut handed = None;
        let spans = exported(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), 128, || {
            let server = tracing::info_span!("tools/call", "otel.kind" = "server");
            set_remote_parent(&server, &remote(true));
            let client = tracing::info_span!(parent: &server, "tools/call", "otel.kind" = "client");
            handed = span_context(&client);
        });
        let (client, server) = (&spans[0], &spans[1]);
        assert_eq!(server.span_context.trace_id(), remote(true).trace_id());
        assert_eq!(server.parent_span_id, remote(true).span_id());
        assert!(server.parent_span_is_remote);
        assert_eq!(server.span_context.trace_state().header(), "vendor=x");
        assert_eq!(client.parent_span_id, server.span_context.span_id());
        assert_eq!(client.span_context.trace_id(), remote(true).trace_id());
        let handed = handed.expect("a recorded span has a context");
        assert_eq!(handed.span_id(), client.span_context.span_id());
        assert!(handed.is_sampled() && !handed.is_remote());
    }

    #[test]
    fn unsampled_traces_are_not_exported_but_still_propagate() {
        let mut handed = None;
        let spans = exported(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), 128, || {
            let server = tracing::info_span!("tools/call");
            set_remote_parent(&server, &remote(false));
            let child = tracing::info_span!(parent: &server, "execute_tool", "gen_ai.tool.name" = "echo");
            handed = span_context(&child);
        });
        assert!(spans.is_empty(), "{spans:?}");
        let handed = handed.expect("an unsampled span still has a context");
        assert_eq!(handed.trace_id(), remote(false).trace_id());
        assert!(!handed.is_sampled());

        let spans = exported(Sampler::AlwaysOff, 128, || {
            let _root = tracing::info_span!("execute_tool");
        });
        assert!(spans.is_empty(), "{spans:?}");
    }

    #[test]
    fn a_value_recorded_after_opening_replaces_the_one_it_opened_with() {
        let spans = exported(Sampler::AlwaysOn, 128, || {
            let span = tracing::info_span!("x", "otel.name" = "first name", tool = "echo", n = 1_i64);
            span.record("tool", "grep");
            span.record("otel.name", "second name");
            span.record("n", 2_i64);
        });
        assert_eq!(spans[0].name, "second name");
        assert_eq!(spans[0].attributes.len(), 2, "{:?}", spans[0].attributes);
        assert_eq!(attribute(&spans[0], "tool"), Some(&Value::from("grep")));
        assert_eq!(attribute(&spans[0], "n"), Some(&Value::I64(2)));
    }

    #[test]
    fn a_span_is_the_parent_of_spans_opened_while_entered_and_closes_with_its_last_handle() {
        let spans = exported(Sampler::AlwaysOn, 128, || {
            let outer = tracing::info_span!("outer");
            let copy = outer.clone();
            outer.in_scope(|| {
                assert_eq!(tracing::Span::current().metadata().map(|m| m.name()), Some("outer"));
                let inner = tracing::info_span!("inner");
                inner.in_scope(|| assert_eq!(tracing::Span::current().id(), inner.id()));
                assert_eq!(tracing::Span::current().id(), outer.id(), "exiting the inner span");
                let root = tracing::info_span!(parent: None, "root");
                drop((inner, root));
            });
            assert!(tracing::Span::current().is_none());
            drop(outer);
            assert!(!copy.is_disabled(), "the copy still holds the span open");
        });
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["inner", "root", "outer"], "each span exported once, as its last handle closed");
        let (inner, root, outer) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(inner.parent_span_id, outer.span_context.span_id());
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        assert_ne!(root.span_context.trace_id(), outer.span_context.trace_id());
    }

    #[test]
    fn a_paused_subscriber_records_no_span_and_an_old_id_finds_nothing() {
        let exporter = InMemorySpanExporter::default();
        let processor = Arc::new(BatchSpanProcessor::builder(exporter.clone()).build());
        let subscriber = Spans::new(processor.clone(), Config::default());
        let pause = subscriber.pause();
        let dispatch = tracing::Dispatch::new(subscriber);
        tracing::dispatcher::with_default(&dispatch, || {
            pause.set(true);
            assert!(tracing::info_span!("paused").is_disabled());
            pause.set(false);
            let span = tracing::info_span!("resumed");
            assert!(!span.is_disabled());
            let id = span.id().expect("an id");
            drop(span);
            // The slot is reused by the next span, under a new generation: the old id names nothing.
            let next = tracing::info_span!("next");
            assert_ne!(next.id(), Some(id.clone()));
            let spans = dispatch.downcast_ref::<Spans>().expect("the subscriber");
            assert!(spans.slots().get(&id).is_none());
            assert!(!tracing::Subscriber::try_close(spans, id), "closing an old id closes nothing");
        });
        processor.force_flush().expect("flush");
        let names: Vec<String> =
            exporter.get_finished_spans().expect("spans").iter().map(|s| s.name.to_string()).collect();
        assert_eq!(names, ["resumed", "next"]);
    }

    #[test]
    fn attributes_beyond_the_limit_are_dropped_and_counted() {
        let spans = exported(Sampler::AlwaysOn, 2, || {
            let _span = tracing::info_span!("x", a = 1_i64, b = 2_i64, c = 3_i64, d = "four");
        });
        assert_eq!(spans[0].attributes.len(), 2);
        assert_eq!(spans[0].dropped_attributes_count, 2);
    }
}
