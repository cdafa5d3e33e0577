//! The span layer of an exporting process: each `codemode` `tracing` span becomes an OpenTelemetry span, kept in the
//! span's registry extensions while it is open and handed, as the SDK's `SpanData`, to the batch span processor
//! when it closes. A span ends when it was last exited (as with tracing-opentelemetry), or when it closes if it was
//! never entered: the span of a call that answered at once is closed once its settlement is on its way to the
//! program, but ends when the call's future last ran. It replaces tracing-opentelemetry's layer, which built every
//! span through the SDK's `SpanBuilder` and tracer and cost a cell's runtime threads about half as much again
//! (`docs/observability.md`, "Cost").
//!
//! It honours what the SDK's tracer would: the sampler and span limits of `OTEL_TRACES_SAMPLER`,
//! `OTEL_TRACES_SAMPLER_ARG` and `OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`, and tracing-opentelemetry's special fields
//! (`otel.name`, `otel.kind`, `otel.status_code`, `otel.status_description`). Invariant: a span is exported once,
//! when it closes, and only when sampled; a child takes its trace, sampling decision and trace state from its
//! parent, or, for a span the gateway continues from a request's `traceparent`, from the remote parent.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags};
use opentelemetry::{Context, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, Config, IdGenerator, SamplingDecision, ShouldSample, SpanData, SpanEvents, SpanLinks,
    SpanProcessor as _,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Registry;
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;

/// The layer: where closed spans go, and how new ones are sampled and named.
pub(crate) struct SpanLayer {
    processor: Arc<BatchSpanProcessor>,
    sampler: Box<dyn ShouldSample>,
    ids: Box<dyn IdGenerator>,
    max_attributes: usize,
    scope: InstrumentationScope,
}

impl SpanLayer {
    /// A layer handing closed spans to `processor`, with `config`'s sampler, id generator and attribute limit
    /// (`Config::default()` reads them from the environment).
    pub(crate) fn new(processor: Arc<BatchSpanProcessor>, config: Config) -> SpanLayer {
        SpanLayer {
            processor,
            sampler: config.sampler,
            ids: config.id_generator,
            max_attributes: config.span_limits.max_attributes_per_span as usize,
            scope: InstrumentationScope::builder("codemode").build(),
        }
    }

    /// Samples a span with no local parent: under `remote` (a parent from another process), or as a trace's root.
    fn sample(&self, open: &mut OpenSpan, remote: Option<&SpanContext>) {
        let parent = remote.map(|remote| Context::new().with_remote_span_context(remote.clone()));
        let trace_id = remote.map_or_else(|| self.ids.new_trace_id(), SpanContext::trace_id);
        let result =
            self.sampler.should_sample(parent.as_ref(), trace_id, &open.name, &open.kind, &open.attributes, &[]);
        let flags = remote.map_or(TraceFlags::default(), SpanContext::trace_flags);
        let sampled = result.decision == SamplingDecision::RecordAndSample;
        let span_id = open.context.span_id();
        open.context = SpanContext::new(trace_id, span_id, flags.with_sampled(sampled), false, result.trace_state);
        open.parent = remote.map_or(SpanId::INVALID, SpanContext::span_id);
        open.parent_remote = remote.is_some();
        if sampled {
            open.attributes.extend(result.attributes);
        }
    }
}

/// One open span.
struct OpenSpan {
    /// Its trace id, span id, sampling flag and trace state.
    context: SpanContext,
    parent: SpanId,
    parent_remote: bool,
    kind: SpanKind,
    name: Cow<'static, str>,
    start: SystemTime,
    /// When the span was last exited: its end time, if it was ever entered.
    exited: Option<SystemTime>,
    /// Collected only while the span may be exported: empty under an unsampled parent.
    attributes: Vec<KeyValue>,
    dropped: u32,
    /// `otel.status_code`: `Some(true)` for `ERROR`, `Some(false)` for `OK`.
    error: Option<bool>,
    description: Option<String>,
}

impl OpenSpan {
    /// Sets `key` to `value`, replacing a value recorded before; beyond `max` attributes the new one is dropped and
    /// counted.
    fn set(&mut self, key: &'static str, value: Value, max: usize, replace: bool) {
        if replace && let Some(kv) = self.attributes.iter_mut().find(|kv| kv.key.as_str() == key) {
            kv.value = value;
        } else if self.attributes.len() < max {
            self.attributes.push(KeyValue::new(key, value));
        } else {
            self.dropped += 1;
        }
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
            "otel.name" => self.span.name = Cow::Owned(value.to_owned()),
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
            _ => self.value(field, Value::from(value.to_owned())),
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

impl<S> tracing_subscriber::Layer<S> for SpanLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span.parent().and_then(|parent| parent.extensions().get::<OpenSpan>().map(|p| p.context.clone()));
        let mut open = OpenSpan {
            context: SpanContext::empty_context(),
            parent: SpanId::INVALID,
            parent_remote: false,
            kind: SpanKind::Internal,
            name: Cow::Borrowed(attrs.metadata().name()),
            start: SystemTime::now(),
            exited: None,
            attributes: Vec::new(),
            dropped: 0,
            error: None,
            description: None,
        };
        // Under an unsampled parent nothing is exported, so no field is collected.
        if parent.as_ref().is_none_or(SpanContext::is_sampled) {
            open.attributes.reserve_exact(attrs.fields().len());
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
        span.extensions_mut().insert(open);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(open) = extensions.get_mut::<OpenSpan>()
            && open.context.is_sampled()
        {
            values.record(&mut Fields { span: open, max: self.max_attributes, replace: true });
        }
    }

    fn on_exit(&self, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(open) = span.extensions_mut().get_mut::<OpenSpan>()
            && open.context.is_sampled()
        {
            open.exited = Some(SystemTime::now());
        }
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<OpenSpan>() else { return };
        if !open.context.is_sampled() {
            return;
        }
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
            name: open.name,
            start_time: open.start,
            end_time: open.exited.unwrap_or_else(SystemTime::now),
            attributes: open.attributes,
            dropped_attributes_count: open.dropped,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        });
    }
}

/// Runs `f` on the layer and the open span behind `span`, when the process's subscriber has this layer and the
/// span is recorded; `None` otherwise.
fn with_open<T>(span: &tracing::Span, f: impl FnOnce(&SpanLayer, &mut OpenSpan) -> T) -> Option<T> {
    span.with_subscriber(|(id, dispatch)| {
        let layer = dispatch.downcast_ref::<SpanLayer>()?;
        let registry = dispatch.downcast_ref::<Registry>()?;
        let data = registry.span(id)?;
        let mut extensions = data.extensions_mut();
        let open = extensions.get_mut::<OpenSpan>()?;
        Some(f(layer, open))
    })
    .flatten()
}

/// Makes `span` a child of `remote`, a span of another process, and samples it again under it. Only a span without
/// children yet may move: the gateway calls it on a request's SERVER span as it opens.
pub(crate) fn set_remote_parent(span: &tracing::Span, remote: &SpanContext) {
    with_open(span, |layer, open| layer.sample(open, Some(remote)));
}

/// The trace context of `span`, to hand to the server a request goes to.
pub(crate) fn span_context(span: &tracing::Span) -> Option<SpanContext> {
    with_open(span, |_, open| open.context.clone())
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{TraceId, TraceState};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, Sampler};
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Runs `f` under a subscriber with the layer (sampling with `sampler`, at most `max_attributes` a span) and
    /// returns the spans it exported, in the order they closed.
    fn exported(sampler: Sampler, max_attributes: u32, f: impl FnOnce()) -> Vec<SpanData> {
        let exporter = InMemorySpanExporter::default();
        let processor = Arc::new(BatchSpanProcessor::builder(exporter.clone()).build());
        let mut config = Config::default();
        config.sampler = Box::new(sampler);
        config.span_limits.max_attributes_per_span = max_attributes;
        let subscriber = tracing_subscriber::registry().with(SpanLayer::new(processor.clone(), config));
        tracing::subscriber::with_default(subscriber, f);
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
    fn attributes_beyond_the_limit_are_dropped_and_counted() {
        let spans = exported(Sampler::AlwaysOn, 2, || {
            let _span = tracing::info_span!("x", a = 1_i64, b = 2_i64, c = 3_i64, d = "four");
        });
        assert_eq!(spans[0].attributes.len(), 2);
        assert_eq!(spans[0].dropped_attributes_count, 2);
    }
}
