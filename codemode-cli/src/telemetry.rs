//! Process-level OpenTelemetry export: when an OTLP endpoint is configured (the standard `OTEL_EXPORTER_OTLP_*`
//! variables, or the gateway's `[telemetry] otlp_endpoint`), the `codemode` spans go through tracing-opentelemetry
//! to the SDK's batch span processor, the measurements straight into the SDK's instruments (the
//! `codemode_telemetry::otel` metrics sink) and its periodic metric reader, and out over OTLP http/protobuf; [`Telemetry::shutdown`] flushes both
//! when the process ends. It also holds the W3C trace-context
//! helpers the gateway uses to continue a client's trace and hand its own to upstream servers (`params._meta`).
//!
//! Invariant: with no endpoint nothing is installed (no subscriber, no provider, no metrics sink, no thread), so
//! every `codemode` span and metric event is disabled at its call site. Only the `codemode` target is exported, never the spans of
//! libraries underneath (rmcp's).

use std::collections::HashMap;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;

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
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("traces", &self.tracer.is_some())
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
    /// An endpoint that is not a URL, or a global subscriber that is already set.
    pub fn install(config: &ExportConfig) -> Result<Telemetry, TelemetryError> {
        if !config.enabled() {
            return Ok(Telemetry::default());
        }
        // The exporter's HTTP client needs the process's TLS provider, even for http:// endpoints.
        crate::gateway::install_tls_provider();
        if let Ok(protocol) = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
            && protocol.trim() != "http/protobuf"
        {
            eprintln!("codemode: OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported; exporting http/protobuf");
        }
        let resource = resource();
        let mut telemetry = Telemetry::default();
        let mut layers = Vec::new();
        if config.traces {
            let mut exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(endpoint) = config.endpoint(TRACES_ENDPOINT_VAR, "/v1/traces") {
                exporter = exporter.with_endpoint(endpoint);
            }
            let exporter = exporter.build().map_err(|e| TelemetryError(e.to_string()))?;
            // The batch processor reads OTEL_BSP_* for its queue, batch size, delay and export timeout.
            let provider = SdkTracerProvider::builder()
                .with_span_processor(BatchSpanProcessor::builder(exporter).build())
                .with_resource(resource.clone())
                .build();
            let tracer = provider.tracer("codemode");
            // The spans with the attributes they are given: no code location, thread, target or busy/idle times,
            // and no OpenTelemetry context made current on every poll (nothing here reads `Context::current`;
            // parents come from the `tracing` span tree). Each of those cost every nested call allocations and
            // clock reads, and the exporter bytes.
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false)
                .with_context_activation(false);
            layers.push(layer.boxed());
            opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
            telemetry.tracer = Some(provider);
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
            codemode_telemetry::otel::set_metrics(Box::new(OtelMetrics::new(&provider)));
            telemetry.meter = Some(provider);
        } else {
            // Not exported: dropped, and never `tracing` events the span layer would attach to spans.
            codemode_telemetry::otel::set_metrics(Box::new(NoMetrics));
        }
        if !layers.is_empty() {
            // One global filter: only `codemode` spans (and no event, as every measurement goes to the sink) reach
            // the layer; the callsites of the libraries underneath stay disabled.
            let targets = Targets::new().with_target(codemode_telemetry::otel::TARGET, tracing::Level::TRACE);
            let subscriber = tracing_subscriber::registry().with(targets).with(layers);
            tracing::subscriber::set_global_default(subscriber).map_err(|e| TelemetryError(e.to_string()))?;
        }
        Ok(telemetry)
    }

    /// Whether spans are exported.
    pub fn traces(&self) -> bool {
        self.tracer.is_some()
    }

    /// Exports what is still buffered and stops the exporters; call it outside any async runtime, as the process
    /// ends. Failures are reported on stderr: the process's own outcome stands.
    pub fn shutdown(self) {
        if let Some(provider) = self.tracer
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

/// The resource of every span and metric: the SDK's detectors (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`),
/// with `service.name` [`DEFAULT_SERVICE_NAME`] when neither names the service.
fn resource() -> opentelemetry_sdk::Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let builder = opentelemetry_sdk::Resource::builder();
    if named { builder.build() } else { builder.with_service_name(DEFAULT_SERVICE_NAME).build() }
}

/// Makes `span` continue the trace whose W3C `traceparent` (and `tracestate`) a request carried. A missing or
/// malformed `traceparent` leaves the span where it is (a new trace, or under the current span).
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    let Some(traceparent) = traceparent else { return };
    if span.is_disabled() {
        return;
    }
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&Carrier(&mut carrier));
    let _ = span.set_parent(cx);
}

/// The W3C `traceparent` and `tracestate` of `span`, to hand to the server a request goes to; `None` when the span
/// is not exported.
pub fn trace_headers(span: &tracing::Span) -> Option<(String, Option<String>)> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut Carrier(&mut carrier));
    let parent = carrier.remove("traceparent")?;
    Some((parent, carrier.remove("tracestate").filter(|s| !s.is_empty())))
}

/// Longest status message a span carries, in bytes.
const MESSAGE_BYTES: usize = 512;

/// Records an error on `span`: `error.type`, the ERROR status and the message, redacted with `redactor` and capped.
pub fn record_error(span: &tracing::Span, kind: &str, message: &str, redactor: &codemode::Redactor) {
    if span.is_disabled() {
        return;
    }
    span.record("error.type", kind);
    span.record("otel.status_code", "ERROR");
    let redacted = redactor.redact(message);
    let mut end = redacted.len().min(MESSAGE_BYTES);
    while !redacted.is_char_boundary(end) {
        end -= 1;
    }
    span.record("otel.status_description", &redacted[..end]);
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

/// The metrics sink of an exporting process: the instruments of `codemode_telemetry::otel::metric`, recorded
/// directly (durations in seconds).
struct OtelMetrics {
    exec_duration: Histogram<f64>,
    call_duration: Histogram<f64>,
    calls: Counter<u64>,
    replays: Counter<u64>,
    mcp_client_duration: Histogram<f64>,
    mcp_server_duration: Histogram<f64>,
}

impl OtelMetrics {
    fn new(provider: &SdkMeterProvider) -> OtelMetrics {
        use codemode_telemetry::otel::metric;
        use opentelemetry::metrics::MeterProvider as _;
        let meter = provider.meter("codemode");
        let seconds = |name: &'static str, description: &'static str| {
            meter.f64_histogram(name).with_unit("s").with_description(description).build()
        };
        OtelMetrics {
            exec_duration: seconds(metric::EXEC_DURATION, "How long an exec or wait took"),
            call_duration: seconds(metric::CALL_DURATION, "How long a live nested tool call took"),
            calls: meter.u64_counter(metric::CALLS).with_description("Nested tool calls, by status").build(),
            replays: meter.u64_counter(metric::REPLAYS).with_description("Runs resumed by replay").build(),
            mcp_client_duration: seconds(metric::MCP_CLIENT_DURATION, "MCP requests sent to upstream servers"),
            mcp_server_duration: seconds(metric::MCP_SERVER_DURATION, "MCP requests the gateway served"),
        }
    }
}

/// The sink of a process that exports traces but not metrics.
struct NoMetrics;

impl codemode_telemetry::otel::Metrics for NoMetrics {
    fn exec(&self, _: &'static str, _: &'static str, _: f64) {}
    fn call(&self, _: &str, _: &'static str, _: bool, _: Option<f64>) {}
    fn replay(&self) {}
    fn mcp_client(&self, _: &str, _: Option<&str>, _: f64) {}
    fn mcp_server(&self, _: &str, _: Option<&str>, _: f64) {}
}

impl codemode_telemetry::otel::Metrics for OtelMetrics {
    fn exec(&self, tool: &'static str, status: &'static str, seconds: f64) {
        use codemode_telemetry::otel::attr;
        self.exec_duration
            .record(seconds, &[KeyValue::new(attr::GEN_AI_TOOL_NAME, tool), KeyValue::new(attr::STATUS, status)]);
    }

    fn call(&self, tool: &str, status: &'static str, replayed: bool, seconds: Option<f64>) {
        use codemode_telemetry::otel::attr;
        let attributes = [
            KeyValue::new(attr::GEN_AI_TOOL_NAME, tool.to_owned()),
            KeyValue::new(attr::STATUS, status),
            KeyValue::new(attr::REPLAYED, replayed),
        ];
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
    use codemode_telemetry::otel::{TOOLS_CALL, attr};
    let mut attributes =
        vec![KeyValue::new(attr::MCP_METHOD_NAME, TOOLS_CALL), KeyValue::new(attr::GEN_AI_TOOL_NAME, tool.to_owned())];
    if let Some(kind) = error_type {
        attributes.push(KeyValue::new(attr::ERROR_TYPE, kind.to_owned()));
    }
    attributes
}

/// Registers the engine gauges (parked runs, live workers) on the global meter; `stats` reads the engine, or
/// returns `None` once it is gone. A no-op meter when metrics are off.
pub fn observe_engine(stats: impl Fn() -> Option<codemode::EngineStats> + Send + Sync + 'static) {
    use codemode_telemetry::otel::metric;
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

    #[test]
    fn trace_context_round_trips_through_a_span_only_when_exported() {
        // No subscriber in this test binary: spans are disabled and nothing is injected.
        let span = tracing::info_span!(target: "codemode", "x");
        assert!(trace_headers(&span).is_none());
        continue_trace(&span, Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), None);
    }
}
