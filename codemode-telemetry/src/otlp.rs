//! Process-level OpenTelemetry export (the `otlp` feature): when an OTLP endpoint is configured (the standard
//! `OTEL_EXPORTER_OTLP_*` variables, or a base URL from the caller's configuration, such as the gateway's
//! `[telemetry] otlp_endpoint`), the `codemode` spans ([`crate::span`]) go straight to the SDK's tracer and batch
//! span processor, the measurements straight into the SDK's instruments (the [`crate::otel`] metrics sink) and its
//! periodic metric reader, and out over OTLP http/protobuf; [`Telemetry::shutdown`] flushes both when the process
//! ends. It also holds the W3C trace-context helpers a server uses to continue a client's trace and hand its own to
//! the servers it calls (`params._meta`).
//!
//! Invariant: with no endpoint nothing is installed (no tracer, no processor, no metrics sink, no thread), so every
//! `codemode` span and metric event is disabled at its call site; the spans of libraries underneath (rmcp's `tracing`
//! spans) are never exported, and no span is recorded while export is paused.

use std::collections::HashMap;
use std::sync::Mutex;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{BoundCounter, BoundHistogram, Counter, Histogram};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};

use crate::span::{Context, Span};

/// The generic OTLP endpoint variable (`/v1/traces` and `/v1/metrics` are appended).
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The traces endpoint variable (used as is).
pub const TRACES_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The metrics endpoint variable (used as is).
pub const METRICS_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// Turns the whole SDK off when `true`.
pub const SDK_DISABLED_VAR: &str = "OTEL_SDK_DISABLED";
/// The service name resources carry when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "codemode";

/// Where the process exports, if anywhere: read from the environment, with a configured base URL as fallback.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportConfig {
    /// Export traces.
    pub traces: bool,
    /// Export metrics.
    pub metrics: bool,
    /// A base URL from configuration (`http://collector:4318`), used only when no `OTEL_EXPORTER_OTLP_*` endpoint
    /// variable is set; `/v1/traces` and `/v1/metrics` are appended.
    pub configured: Option<String>,
}

impl ExportConfig {
    /// What the environment (and `configured`, a base URL from a config file) asks for. `OTEL_SDK_DISABLED=true`
    /// turns everything off.
    pub fn from_env(configured: Option<&str>) -> ExportConfig {
        let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
        if std::env::var(SDK_DISABLED_VAR).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return ExportConfig::default();
        }
        let configured =
            configured.map(str::trim).filter(|c| !c.is_empty()).map(|c| c.trim_end_matches('/').to_owned());
        let generic = set(ENDPOINT_VAR) || configured.is_some();
        ExportConfig {
            traces: generic || set(TRACES_ENDPOINT_VAR),
            metrics: generic || set(METRICS_ENDPOINT_VAR),
            configured,
        }
    }

    /// Whether anything is exported.
    pub fn enabled(&self) -> bool {
        self.traces || self.metrics
    }

    /// The endpoint to give the exporter for a signal: the configured base URL plus `path`, unless the standard
    /// variables name one (they win).
    fn endpoint(&self, signal_var: &str, path: &str) -> Option<String> {
        let env_set = [signal_var, ENDPOINT_VAR].iter().any(|v| std::env::var(v).is_ok_and(|v| !v.trim().is_empty()));
        if env_set { None } else { self.configured.as_ref().map(|base| format!("{base}{path}")) }
    }
}

/// The installed exporters, flushed and stopped by [`Telemetry::shutdown`]; empty when export is off.
#[derive(Default)]
pub struct Telemetry {
    spans: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("traces", &self.spans.is_some())
            .field("metrics", &self.meter.is_some())
            .finish()
    }
}

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot set up OpenTelemetry export: {0} (fix: check the OTEL_EXPORTER_OTLP_* variables or [telemetry] otlp_endpoint)"
)]
pub struct TelemetryError(String);

impl Telemetry {
    /// Installs export as `config` says: nothing at all when it exports nothing. Call it outside any async
    /// runtime (the blocking HTTP client is built on its own thread either way) and once per process.
    ///
    /// # Errors
    ///
    /// An endpoint that is not a URL, or a tracer that is already set ([`crate::span::set_tracer`]).
    pub fn install(config: &ExportConfig) -> Result<Telemetry, TelemetryError> {
        if !config.enabled() {
            return Ok(Telemetry::default());
        }
        // The exporter's HTTP client (reqwest, built without a TLS provider of its own) needs the process's, even
        // for http:// endpoints; a provider installed before stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
        if let Ok(protocol) = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
            && protocol.trim() != "http/protobuf"
        {
            eprintln!("codemode: OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported; exporting http/protobuf");
        }
        let resource = resource();
        let mut telemetry = Telemetry::default();
        if config.traces {
            let mut exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(endpoint) = config.endpoint(TRACES_ENDPOINT_VAR, "/v1/traces") {
                exporter = exporter.with_endpoint(endpoint);
            }
            let exporter = exporter.build().map_err(|e| TelemetryError(e.to_string()))?;
            // The batch processor reads OTEL_BSP_* for its queue, batch size, delay and export timeout; the
            // provider reads the sampler and span limits (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
            // OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT).
            let provider = SdkTracerProvider::builder()
                .with_span_processor(BatchSpanProcessor::builder(Background(exporter)).build())
                .with_resource(resource.clone())
                .build();
            if !crate::span::set_tracer(provider.tracer("codemode")) {
                return Err(TelemetryError("a tracer is already installed in this process".to_owned()));
            }
            opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
            telemetry.spans = Some(provider);
        }
        if config.metrics {
            let mut exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(endpoint) = config.endpoint(METRICS_ENDPOINT_VAR, "/v1/metrics") {
                exporter = exporter.with_endpoint(endpoint);
            }
            let exporter = exporter.build().map_err(|e| TelemetryError(e.to_string()))?;
            // The periodic reader reads OTEL_METRIC_EXPORT_INTERVAL and OTEL_METRIC_EXPORT_TIMEOUT.
            let provider = SdkMeterProvider::builder()
                .with_reader(PeriodicReader::builder(exporter).build())
                .with_resource(resource)
                .build();
            opentelemetry::global::set_meter_provider(provider.clone());
            // Measurements go straight into the instruments, not through `tracing` events.
            crate::otel::set_metrics(Box::new(OtelMetrics::new(&provider)));
            telemetry.meter = Some(provider);
        } else {
            // Not exported: dropped, and never `tracing` events (the span subscriber takes none).
            crate::otel::set_metrics(Box::new(NoMetrics));
        }
        Ok(telemetry)
    }

    /// Whether spans are exported.
    pub fn traces(&self) -> bool {
        self.spans.is_some()
    }

    /// Pauses (`true`) or resumes export: while paused, every `codemode` span is disabled at its call site and no
    /// measurement reaches the metrics sink, as in a process without export; what was recorded before is still
    /// exported. The telemetry benches compare the two states in one process with it.
    pub fn pause(&self, paused: bool) {
        if self.spans.is_some() {
            crate::span::pause(paused);
        }
        crate::otel::pause(paused);
    }

    /// Exports what is still buffered and stops the exporters; call it outside any async runtime, as the process
    /// ends. Failures are reported on stderr: the process's own outcome stands.
    pub fn shutdown(self) {
        if let Some(provider) = self.spans
            && let Err(e) = provider.shutdown()
        {
            eprintln!("codemode: exporting the last spans failed: {e}");
        }
        if let Some(provider) = self.meter
            && let Err(e) = provider.shutdown()
        {
            eprintln!("codemode: exporting the last metrics failed: {e}");
        }
    }
}

/// A span exporter whose batches are converted and encoded at a lower scheduling priority (nice 10): the batch
/// processor calls it on its own thread, which then gives way to the runs' host threads and workers when they want
/// the CPU, and takes what they leave (at full load still about a tenth of a core, several times what exporting
/// takes).
#[derive(Debug)]
struct Background<E>(E);

/// The nice value of the thread that exports spans.
const EXPORT_NICE: libc::c_int = 10;

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter for Background<E> {
    fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        thread_local! {
            static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        if !LOWERED.replace(true) {
            // SAFETY: setpriority only reads its arguments; on Linux, PRIO_PROCESS with 0 names the calling thread.
            // A failure leaves the thread at its priority, which only costs the runs some time.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, 0, EXPORT_NICE);
            }
        }
        self.0.export(batch)
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.0.set_resource(resource);
    }
}

/// The resource of every span and metric: the SDK's detectors (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`),
/// with `service.name` [`DEFAULT_SERVICE_NAME`] when neither names the service.
fn resource() -> opentelemetry_sdk::Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let builder = opentelemetry_sdk::Resource::builder();
    if named { builder.build() } else { builder.with_service_name(DEFAULT_SERVICE_NAME).build() }
}

/// The remote parent a request's W3C `traceparent` (and `tracestate`) names, for [`crate::span::Parent::Remote`];
/// `None` when there is none or it is malformed (the span then starts under the current span, or a new trace).
pub fn remote_parent(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Context> {
    let traceparent = traceparent?;
    if !crate::span::enabled() {
        return None;
    }
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&Carrier(&mut carrier));
    cx.span().span_context().is_valid().then_some(cx)
}

/// The W3C `traceparent` and `tracestate` of `span`, to hand to the server a request goes to; `None` when the span
/// is disabled.
pub fn trace_headers(span: &Span) -> Option<(String, Option<String>)> {
    let cx = span.context()?;
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut Carrier(&mut carrier));
    let parent = carrier.remove("traceparent")?;
    Some((parent, carrier.remove("tracestate").filter(|s| !s.is_empty())))
}

struct Carrier<'a>(&'a mut HashMap<String, String>);

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

impl Injector for Carrier<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

/// The metrics sink of an exporting process: the instruments of `crate::otel::metric`, recorded
/// directly (durations in seconds).
struct OtelMetrics {
    exec_duration: Histogram<f64>,
    call_duration: Histogram<f64>,
    calls: Counter<u64>,
    /// The call instruments bound to each attribute set seen (by tool, then [`CallSet::slot`]), so that a nested
    /// call's two measurements skip hashing and looking up their attributes; at most [`BOUND_TOOLS`] tools.
    bound: Mutex<HashMap<String, [Option<BoundCall>; CallSet::SLOTS]>>,
    /// The exec duration bound to each `(gen_ai.tool.name, codemode.status)` pair seen (static names, a handful).
    bound_exec: Mutex<Vec<(ExecSet, BoundHistogram<f64>)>>,
    replays: Counter<u64>,
    mcp_client_duration: Histogram<f64>,
    mcp_server_duration: Histogram<f64>,
}

impl OtelMetrics {
    fn new(provider: &SdkMeterProvider) -> OtelMetrics {
        use crate::otel::metric;
        use opentelemetry::metrics::MeterProvider as _;
        let meter = provider.meter("codemode");
        let seconds = |name: &'static str, description: &'static str| {
            meter.f64_histogram(name).with_unit("s").with_description(description).build()
        };
        OtelMetrics {
            exec_duration: seconds(metric::EXEC_DURATION, "How long an exec or wait took"),
            call_duration: seconds(metric::CALL_DURATION, "How long a live nested tool call took"),
            calls: meter.u64_counter(metric::CALLS).with_description("Nested tool calls, by status").build(),
            bound: Mutex::new(HashMap::new()),
            bound_exec: Mutex::new(Vec::new()),
            replays: meter.u64_counter(metric::REPLAYS).with_description("Runs resumed by replay").build(),
            mcp_client_duration: seconds(metric::MCP_CLIENT_DURATION, "MCP requests sent to upstream servers"),
            mcp_server_duration: seconds(metric::MCP_SERVER_DURATION, "MCP requests the gateway served"),
        }
    }
}

/// Most tools whose call instruments are bound; the calls of further tools are recorded unbound (the SDK's
/// cardinality limit applies either way).
const BOUND_TOOLS: usize = 512;

/// The attribute set of an exec duration: `gen_ai.tool.name` and `codemode.status`.
type ExecSet = (&'static str, &'static str);

/// A nested call's instruments bound to one attribute set; the duration's on the set's first live call, so that
/// replayed calls (which have none) export no empty histogram.
struct BoundCall {
    duration: Option<BoundHistogram<f64>>,
    calls: BoundCounter<u64>,
}

/// The `(codemode.status, codemode.replayed)` pairs a nested call's metrics carry.
struct CallSet;

impl CallSet {
    /// `ok`, `error` and `deferred`, live or replayed.
    const SLOTS: usize = 6;

    /// The slot of a pair, `None` for a status not listed.
    fn slot(status: &str, replayed: bool) -> Option<usize> {
        let status = match status {
            "ok" => 0,
            "error" => 1,
            "deferred" => 2,
            _ => return None,
        };
        Some(status * 2 + usize::from(replayed))
    }
}

/// The sink of a process that exports traces but not metrics.
struct NoMetrics;

impl crate::otel::Metrics for NoMetrics {
    fn exec(&self, _: &'static str, _: &'static str, _: f64) {}
    fn call(&self, _: &str, _: &'static str, _: bool, _: Option<f64>) {}
    fn replay(&self) {}
    fn mcp_client(&self, _: &str, _: Option<&str>, _: f64) {}
    fn mcp_server(&self, _: &str, _: Option<&str>, _: f64) {}
}

impl crate::otel::Metrics for OtelMetrics {
    fn exec(&self, tool: &'static str, status: &'static str, seconds: f64) {
        use crate::otel::attr;
        let mut bound = self.bound_exec.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = bound.iter().position(|(set, _)| *set == (tool, status));
        let index = found.unwrap_or_else(|| {
            let attributes = [KeyValue::new(attr::GEN_AI_TOOL_NAME, tool), KeyValue::new(attr::STATUS, status)];
            bound.push(((tool, status), self.exec_duration.bind(&attributes)));
            bound.len() - 1
        });
        bound[index].1.record(seconds);
    }

    fn call(&self, tool: &str, status: &'static str, replayed: bool, seconds: Option<f64>) {
        use crate::otel::attr;
        let attributes = || {
            [
                KeyValue::new(attr::GEN_AI_TOOL_NAME, tool.to_owned()),
                KeyValue::new(attr::STATUS, status),
                KeyValue::new(attr::REPLAYED, replayed),
            ]
        };
        let record = |slots: &mut [Option<BoundCall>; CallSet::SLOTS], slot: usize| {
            let call =
                slots[slot].get_or_insert_with(|| BoundCall { duration: None, calls: self.calls.bind(&attributes()) });
            if let Some(seconds) = seconds {
                call.duration.get_or_insert_with(|| self.call_duration.bind(&attributes())).record(seconds);
            }
            call.calls.add(1);
        };
        if let Some(slot) = CallSet::slot(status, replayed) {
            let mut bound = self.bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // A tool seen before is looked up once, and its name not copied.
            if let Some(slots) = bound.get_mut(tool) {
                return record(slots, slot);
            }
            if bound.len() < BOUND_TOOLS {
                return record(bound.entry(tool.to_owned()).or_default(), slot);
            }
        }
        let attributes = attributes();
        if let Some(seconds) = seconds {
            self.call_duration.record(seconds, &attributes);
        }
        self.calls.add(1, &attributes);
    }

    fn replay(&self) {
        self.replays.add(1, &[]);
    }

    fn mcp_client(&self, tool: &str, error_type: Option<&str>, seconds: f64) {
        self.mcp_client_duration.record(seconds, &mcp_attributes(tool, error_type));
    }

    fn mcp_server(&self, tool: &str, error_type: Option<&str>, seconds: f64) {
        self.mcp_server_duration.record(seconds, &mcp_attributes(tool, error_type));
    }
}

/// The attributes of the MCP request metrics: the method, the tool and, for a failed request, `error.type`.
fn mcp_attributes(tool: &str, error_type: Option<&str>) -> Vec<KeyValue> {
    use crate::otel::{TOOLS_CALL, attr};
    let mut attributes =
        vec![KeyValue::new(attr::MCP_METHOD_NAME, TOOLS_CALL), KeyValue::new(attr::GEN_AI_TOOL_NAME, tool.to_owned())];
    if let Some(kind) = error_type {
        attributes.push(KeyValue::new(attr::ERROR_TYPE, kind.to_owned()));
    }
    attributes
}

/// What the engine gauges read: runs parked in this process, idle workers and parked runs that keep their worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineGauges {
    /// Runs parked in this process.
    pub parked_runs: usize,
    /// Workers idle in the pool.
    pub idle_workers: usize,
    /// Parked runs that keep their live worker.
    pub parked_with_worker: usize,
}

/// Registers the engine gauges (parked runs, live workers) on the global meter; `stats` reads the engine, or
/// returns `None` once it is gone. A no-op meter when metrics are off.
pub fn observe_engine(stats: impl Fn() -> Option<EngineGauges> + Send + Sync + 'static) {
    use crate::otel::metric;
    let meter = opentelemetry::global::meter("codemode");
    let stats = std::sync::Arc::new(stats);
    let parked = stats.clone();
    let _ = meter
        .u64_observable_gauge(metric::PARKED_RUNS)
        .with_description("Runs parked in this process")
        .with_callback(move |gauge| {
            if let Some(s) = parked() {
                gauge.observe(s.parked_runs as u64, &[]);
            }
        })
        .build();
    let _ = meter
        .u64_observable_gauge(metric::LIVE_WORKERS)
        .with_description("Worker processes alive: idle in the pool, or kept by a parked run")
        .with_callback(move |gauge| {
            if let Some(s) = stats() {
                gauge.observe(s.idle_workers as u64, &[opentelemetry::KeyValue::new("codemode.worker.state", "idle")]);
                gauge.observe(
                    s.parked_with_worker as u64,
                    &[opentelemetry::KeyValue::new("codemode.worker.state", "parked")],
                );
            }
        })
        .build();
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::span::{Parent, Start, start};
    use opentelemetry::Value;
    use opentelemetry::trace::{SpanId, SpanKind, Status};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, Sampler, SpanData};

    /// A client's trace: trace id, parent span id, sampled.
    const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    /// Runs `f` with spans recorded by a tracer sampling with `sampler` (paused if `paused`) and returns the spans
    /// it exported, in the order they ended. The process's tracer is installed once, by the first test that asks;
    /// each test's spans go to that test's exporter, chosen by a thread-local.
    fn exported(sampler: Sampler, paused: bool, f: impl FnOnce()) -> Vec<SpanData> {
        let exporter = InMemorySpanExporter::default();
        let provider =
            SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).with_sampler(sampler).build();
        TEST_TRACER.with(|t| *t.borrow_mut() = Some(provider.tracer("codemode")));
        let _ = crate::span::set_tracer(ThreadTracer);
        // Tests run on threads of their own: pausing is per process, so a paused test waits for no other.
        let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        crate::span::pause(paused);
        f();
        crate::span::pause(false);
        TEST_TRACER.with(|t| t.borrow_mut().take());
        provider.force_flush().expect("flush");
        exporter.get_finished_spans().expect("spans")
    }

    static SERIAL: Mutex<()> = Mutex::new(());

    thread_local! {
        static TEST_TRACER: std::cell::RefCell<Option<opentelemetry_sdk::trace::SdkTracer>> =
            const { std::cell::RefCell::new(None) };
    }

    /// The process's tracer in these tests: the calling test's own.
    struct ThreadTracer;

    impl crate::span::Tracer for ThreadTracer {
        fn start(&self, builder: opentelemetry::trace::SpanBuilder, parent: &Context) -> Context {
            use opentelemetry::trace::Tracer as _;
            TEST_TRACER.with(|t| {
                let tracer = t.borrow().clone().expect("a test's tracer");
                parent.with_span(tracer.build_with_context(builder, parent))
            })
        }
    }

    fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
        span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
    }

    fn internal(name: &str) -> Start {
        Start { name: name.to_owned().into(), kind: SpanKind::Internal, attributes: Vec::new() }
    }

    #[test]
    fn trace_context_round_trips_through_a_span_only_when_exported() {
        assert!(trace_headers(&Span::none()).is_none());
    }

    #[test]
    fn spans_keep_their_tree_names_kinds_attributes_and_status() {
        let spans = exported(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), false, || {
            let run = start(Parent::Current, || internal("execute_tool exec"));
            let call = start(Parent::Span(&run), || Start {
                name: "execute_tool echo".into(),
                kind: SpanKind::Internal,
                attributes: vec![
                    KeyValue::new("gen_ai.tool.name", "echo"),
                    KeyValue::new("codemode.replayed", false),
                    KeyValue::new("jsonrpc.request.id", 7_i64),
                ],
            });
            call.set("codemode.status", "error");
            call.error("tool_error", "boom", &crate::Redactor::default());
            drop(call);
            let server = start(Parent::Remote(None), || Start {
                name: "tools/call".into(),
                kind: SpanKind::Server,
                attributes: Vec::new(),
            });
            drop(server);
            // Under the run while it instruments a future: the current span.
            let nested = run.instrument(async { start(Parent::Current, || internal("execute_tool nested")) });
            drop(futures_lite(nested));
        });
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["execute_tool echo", "tools/call", "execute_tool nested", "execute_tool exec"]);
        let (call, server, nested, run) = (&spans[0], &spans[1], &spans[2], &spans[3]);
        assert_eq!(call.parent_span_id, run.span_context.span_id());
        assert_eq!(nested.parent_span_id, run.span_context.span_id());
        assert_eq!(call.span_context.trace_id(), run.span_context.trace_id());
        assert_eq!(run.parent_span_id, SpanId::INVALID);
        assert_ne!(server.span_context.trace_id(), run.span_context.trace_id(), "a root starts a trace");
        assert_eq!((run.span_kind.clone(), server.span_kind.clone()), (SpanKind::Internal, SpanKind::Server));
        assert_eq!(attribute(call, "gen_ai.tool.name"), Some(&Value::from("echo")));
        assert_eq!(attribute(call, "codemode.replayed"), Some(&Value::Bool(false)));
        assert_eq!(attribute(call, "jsonrpc.request.id"), Some(&Value::I64(7)));
        assert_eq!(attribute(call, "codemode.status"), Some(&Value::from("error")));
        assert_eq!(attribute(call, "error.type"), Some(&Value::from("tool_error")));
        assert_eq!(call.status, Status::error("boom"));
        assert_eq!(run.status, Status::Unset);
        assert!(call.start_time <= call.end_time && run.start_time <= call.start_time);
    }

    /// Polls `future` to its end on this thread (it must not wait).
    fn futures_lite<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        match future.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(value) => value,
            std::task::Poll::Pending => panic!("the future waits"),
        }
    }

    #[test]
    fn a_span_continues_a_remote_trace_and_hands_its_own_context_on() {
        let mut handed = None;
        let spans = exported(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), false, || {
            let remote = remote_parent(Some(TRACEPARENT), Some("vendor=x"));
            let server = start(Parent::Remote(remote), || Start {
                name: "tools/call".into(),
                kind: SpanKind::Server,
                attributes: Vec::new(),
            });
            let client = start(Parent::Span(&server), || Start {
                name: "tools/call".into(),
                kind: SpanKind::Client,
                attributes: Vec::new(),
            });
            handed = trace_headers(&client);
        });
        let (client, server) = (&spans[0], &spans[1]);
        assert_eq!(format!("{:032x}", server.span_context.trace_id()), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(format!("{:016x}", server.parent_span_id), "b7ad6b7169203331");
        assert!(server.parent_span_is_remote);
        assert_eq!(server.span_context.trace_state().header(), "vendor=x");
        assert_eq!(client.parent_span_id, server.span_context.span_id());
        assert_eq!(client.span_context.trace_id(), server.span_context.trace_id());
        let (parent, state) = handed.expect("a recorded span has a context");
        let expected = format!("00-0af7651916cd43dd8448eb211c80319c-{:016x}-01", client.span_context.span_id());
        assert_eq!((parent, state.as_deref()), (expected, Some("vendor=x")));
    }

    #[test]
    fn unsampled_traces_are_not_exported_but_still_propagate() {
        let mut handed = None;
        let spans = exported(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), false, || {
            let remote = remote_parent(Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"), None);
            let server = start(Parent::Remote(remote), || internal("tools/call"));
            let child = start(Parent::Span(&server), || internal("execute_tool"));
            handed = trace_headers(&child);
        });
        assert!(spans.is_empty(), "{spans:?}");
        let (parent, _) = handed.expect("an unsampled span still has a context");
        assert!(parent.starts_with("00-0af7651916cd43dd8448eb211c80319c-") && parent.ends_with("-00"), "{parent}");
    }

    #[test]
    fn a_paused_tracer_records_no_span() {
        let spans = exported(Sampler::AlwaysOn, true, || {
            let span = start(Parent::Current, || internal("paused"));
            assert!(span.is_disabled());
            assert!(trace_headers(&span).is_none());
        });
        assert!(spans.is_empty(), "{spans:?}");
    }

    #[test]
    fn call_metrics_count_by_tool_status_and_replay_bound_or_not() {
        use crate::otel::Metrics as _;
        use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
        use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};

        let exporter = InMemoryMetricExporter::default();
        let provider =
            SdkMeterProvider::builder().with_reader(PeriodicReader::builder(exporter.clone()).build()).build();
        let sink = OtelMetrics::new(&provider);
        sink.call("echo", "ok", false, Some(0.25));
        sink.call("echo", "ok", false, Some(0.75));
        sink.call("echo", "error", true, None);
        // A status without a bound slot is recorded unbound, with the same attributes.
        sink.call("echo", "aborted", false, Some(1.0));
        provider.force_flush().expect("flush");
        let metrics = exporter.get_finished_metrics().expect("metrics");
        let find = |name: &str| {
            metrics
                .iter()
                .flat_map(|r| r.scope_metrics())
                .flat_map(|s| s.metrics())
                .find(|m| m.name() == name)
                .map(|m| m.data())
                .unwrap_or_else(|| panic!("{name} exported"))
        };
        let key = |attributes: &mut dyn Iterator<Item = &KeyValue>| {
            let mut pairs: Vec<String> = attributes.map(|kv| format!("{}={}", kv.key, kv.value)).collect();
            pairs.sort();
            pairs.join(",")
        };
        let AggregatedMetrics::U64(MetricData::Sum(calls)) = find(crate::otel::metric::CALLS) else {
            panic!("calls is a u64 sum")
        };
        let mut counts: Vec<(String, u64)> =
            calls.data_points().map(|p| (key(&mut p.attributes()), p.value())).collect();
        counts.sort();
        assert_eq!(
            counts,
            [
                ("codemode.replayed=false,codemode.status=aborted,gen_ai.tool.name=echo".to_owned(), 1),
                ("codemode.replayed=false,codemode.status=ok,gen_ai.tool.name=echo".to_owned(), 2),
                ("codemode.replayed=true,codemode.status=error,gen_ai.tool.name=echo".to_owned(), 1),
            ]
        );
        let AggregatedMetrics::F64(MetricData::Histogram(durations)) = find(crate::otel::metric::CALL_DURATION) else {
            panic!("call duration is an f64 histogram")
        };
        let mut sums: Vec<(String, u64, f64)> =
            durations.data_points().map(|p| (key(&mut p.attributes()), p.count(), p.sum())).collect();
        sums.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            sums,
            [
                ("codemode.replayed=false,codemode.status=aborted,gen_ai.tool.name=echo".to_owned(), 1, 1.0),
                ("codemode.replayed=false,codemode.status=ok,gen_ai.tool.name=echo".to_owned(), 2, 1.0),
            ]
        );
    }
}
