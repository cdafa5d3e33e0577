//! The `codemode` spans, recorded straight into an OpenTelemetry tracer: a [`Span`] is an OpenTelemetry
//! [`Context`] holding the span, started through the process's [`Tracer`] (installed once with [`set_tracer`], the
//! gateway's an SDK tracer with a batch processor) under the current span, another span, or a remote parent, and made
//! the current span of a future with [`Span::instrument`]. Names and attribute keys are [`crate::otel`]'s.
//!
//! Invariant: with no tracer installed, or while [`pause`]d, [`start`] returns [`Span::none`] after one load of a
//! static and one of an atomic, without evaluating its closure; every method of a disabled span returns at its first
//! check, and [`Span::instrument`] adds one branch per poll.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

pub use opentelemetry::Context;
pub use opentelemetry::KeyValue;
pub use opentelemetry::trace::SpanKind;
use opentelemetry::trace::{SpanBuilder, Status, TraceContextExt as _};

/// Starts spans: any OpenTelemetry tracer whose spans can be shared between threads is one.
pub trait Tracer: Send + Sync + 'static {
    /// Starts `builder`'s span under `parent` (whose span, if any, is the parent) and returns `parent` with the new
    /// span as its span.
    fn start(&self, builder: SpanBuilder, parent: &Context) -> Context;
}

impl<T> Tracer for T
where
    T: opentelemetry::trace::Tracer + Send + Sync + 'static,
    T::Span: Send + Sync + 'static,
{
    fn start(&self, builder: SpanBuilder, parent: &Context) -> Context {
        parent.with_span(self.build_with_context(builder, parent))
    }
}

static TRACER: OnceLock<Box<dyn Tracer>> = OnceLock::new();

/// Set while span recording is paused ([`pause`]).
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Installs the process's tracer; `false` (and `tracer` dropped) when one is installed already.
pub fn set_tracer(tracer: impl Tracer) -> bool {
    TRACER.set(Box::new(tracer)).is_ok()
}

/// Pauses (`true`) or resumes span recording: while paused, [`start`] returns [`Span::none`], as in a process with
/// no tracer; spans started before go on and end as usual.
pub fn pause(paused: bool) {
    PAUSED.store(paused, Ordering::Relaxed);
}

/// The installed tracer, unless paused.
fn tracer() -> Option<&'static dyn Tracer> {
    TRACER.get().filter(|_| !PAUSED.load(Ordering::Relaxed)).map(Box::as_ref)
}

/// Whether spans are recorded now: a tracer is installed and not paused.
pub fn enabled() -> bool {
    tracer().is_some()
}

/// Where a new span goes in its trace.
#[derive(Debug)]
pub enum Parent<'a> {
    /// Under the current span (the span of the future being polled, see [`Span::instrument`]), or a new trace.
    Current,
    /// Under this span; under the current span when it is disabled.
    Span(&'a Span),
    /// Under a remote span (a client's `traceparent`), or, when `None`, under the current span.
    Remote(Option<Context>),
}

/// What a span starts with: its name, kind and attributes.
#[derive(Debug)]
pub struct Start {
    /// The span's name (`execute_tool echo`).
    pub name: Cow<'static, str>,
    /// SERVER, CLIENT or INTERNAL.
    pub kind: SpanKind,
    /// The attributes known at its start.
    pub attributes: Vec<KeyValue>,
}

/// Starts a span under `parent` with what `start` returns, evaluated only when spans are recorded; a disabled span
/// otherwise.
pub fn start(parent: Parent<'_>, start: impl FnOnce() -> Start) -> Span {
    let Some(tracer) = tracer() else { return Span::none() };
    let Start { name, kind, attributes } = start();
    let builder = SpanBuilder::from_name(name).with_kind(kind).with_attributes(attributes);
    let cx = match parent {
        Parent::Span(Span(Some(cx))) => tracer.start(builder, cx),
        Parent::Remote(Some(cx)) => tracer.start(builder, &cx),
        Parent::Current | Parent::Span(Span(None)) | Parent::Remote(None) => {
            Context::map_current(|cx| tracer.start(builder, cx))
        }
    };
    Span(Some(cx))
}

/// A `codemode` span, or a disabled one ([`Span::none`]). Clones share the span, which ends when the last of them
/// (and of the futures it instruments) is dropped.
#[derive(Clone, Debug, Default)]
pub struct Span(Option<Context>);

impl Span {
    /// A disabled span: records nothing, and is nobody's parent.
    pub fn none() -> Span {
        Span(None)
    }

    /// Whether the span is disabled (no tracer, or paused when it started).
    pub fn is_disabled(&self) -> bool {
        self.0.is_none()
    }

    /// The span's context (to hand to a server a request goes to), `None` when disabled. A span its sampler
    /// dropped still has one, so that the trace goes on unsampled.
    pub fn context(&self) -> Option<&Context> {
        self.0.as_ref()
    }

    /// Sets the attribute `key`. The SDK keeps every value it is given, so a key is set once per span.
    pub fn set(&self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        if let Some(cx) = &self.0 {
            cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Marks the span as failed: `error.type` `kind`, and the ERROR status with `message`, redacted with
    /// `redactor` (token shapes, registered secrets, configured patterns) and cut to [`MESSAGE_BYTES`].
    pub fn error(&self, kind: &str, message: &str, redactor: &crate::Redactor) {
        let Some(cx) = &self.0 else { return };
        let span = cx.span();
        span.set_attribute(KeyValue::new(crate::otel::attr::ERROR_TYPE, kind.to_owned()));
        let redacted = redactor.redact(message);
        span.set_status(Status::error(crate::redact::utf8_prefix(&redacted, MESSAGE_BYTES).to_owned()));
    }

    /// `future` with this span as its current span while it is polled: the spans it starts under
    /// [`Parent::Current`] are this span's children. A disabled span leaves the current span as it is.
    pub fn instrument<F: Future>(&self, future: F) -> Instrumented<F> {
        Instrumented { future, cx: self.0.clone() }
    }
}

/// Longest status message a span carries, in bytes.
pub const MESSAGE_BYTES: usize = 512;

pin_project_lite::pin_project! {
    /// A future polled with a span current ([`Span::instrument`]).
    #[derive(Debug)]
    pub struct Instrumented<F> {
        #[pin]
        future: F,
        cx: Option<Context>,
    }
}

impl<F: Future> Future for Instrumented<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, task: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _current = this.cx.as_ref().map(|cx| cx.clone().attach());
        this.future.poll(task)
    }
}
