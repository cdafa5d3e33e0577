//! The spans and the measurements of a run: one INTERNAL `execute_tool exec` (or `wait`) span per call of
//! the engine, one INTERNAL `execute_tool <tool>` child per nested tool call (live, or delivered from the journal by
//! a replay, then marked `codemode.replayed`), named and attributed after the OpenTelemetry GenAI conventions; and
//! the measurements (durations, calls by status, replays), recorded through `codemode_telemetry::otel`'s metrics
//! sink or as `tracing` events. Names are `codemode_telemetry::otel`'s. A call settled at once is recorded after
//! its settlement was sent to the program ([`Settled`]), so that the program does not wait for that.
//!
//! Invariant: nothing here changes what a run does. With no tracer installed (`codemode_telemetry::span`) and no
//! metrics sink installed, every span is disabled and every helper returns at its first check, so a run pays no
//! clock read, hash or string for them. A span never carries a program's source (its SHA-256 and length only) nor an unredacted message.

use std::sync::Arc;
use std::time::Instant;

use codemode_bridge::{BridgeCall, BridgeErrorCode, CodeModeResult, NamespaceArgs, NamespaceTarget, SettlementValue};
use codemode_catalog::CatalogEntry;
use codemode_config::EffectClass;
use codemode_snapshot::{CallName, Checkpoint};
use codemode_telemetry::Redactor;
use codemode_telemetry::otel::{self, attr};
use codemode_telemetry::span::{KeyValue, Parent, Span, SpanKind, Start};
use serde_json::Value;

use crate::Inner;

/// The INTERNAL span of an `exec` or a `wait` (`tool`), under the current span (the gateway's SERVER span of the
/// request). Its attributes are built only when spans are recorded.
pub(crate) fn run_span(tool: &'static str) -> Span {
    codemode_telemetry::span::start(Parent::Current, || Start {
        name: otel::execute_tool_name(tool).into(),
        kind: SpanKind::Internal,
        attributes: vec![
            KeyValue::new(attr::GEN_AI_OPERATION_NAME, otel::EXECUTE_TOOL),
            KeyValue::new(attr::GEN_AI_TOOL_NAME, tool),
            KeyValue::new(attr::TOOL_KIND, codemode_telemetry::TOOL_KIND),
        ],
    })
}

/// Puts what the program was written in on an `exec` span.
pub(crate) fn record_input_kind(span: &Span, kind: codemode_telemetry::InputKind) {
    if !span.is_disabled() {
        span.set(attr::TOOL_INPUT_KIND, kind.as_str());
    }
}

/// Puts the program's digest and length on an `exec` span.
pub(crate) fn record_source(span: &Span, source: &str) {
    if !span.is_disabled() {
        span.set(attr::SOURCE_SHA256, otel::source_digest(source));
        span.set(attr::SOURCE_LENGTH, i64::try_from(source.len()).unwrap_or(i64::MAX));
    }
}

/// Puts the run id on `span` (a `wait`'s is the client's, cut to [`otel::MAX_ATTRIBUTE_BYTES`]).
pub(crate) fn record_run_id(span: &Span, run_id: &str) {
    if !span.is_disabled() {
        span.set(attr::RUN_ID, otel::client_attribute(run_id).to_owned());
    }
}

/// When a traced or measured operation started; `None` when nobody listens (no span recorded, no metrics sink), so
/// no clock is read.
pub(crate) fn started(span: &Span) -> Option<Instant> {
    (!span.is_disabled() || otel::metrics_installed()).then(Instant::now)
}

/// Ends an `exec`/`wait` span with the result's status (a failed result is an error span with its code and the
/// model's message, redacted with `redactor`), and records its duration.
pub(crate) fn finish_run(
    span: &Span,
    tool: &'static str,
    started: Option<Instant>,
    result: &CodeModeResult,
    redactor: &Redactor,
) {
    let Some(started) = started else { return };
    let status = match result {
        CodeModeResult::Completed(_) => "completed",
        CodeModeResult::Waiting(_) => "waiting",
        CodeModeResult::Failed(f) => {
            span.error(f.code.as_str(), &f.error, redactor);
            "failed"
        }
    };
    span.set(attr::STATUS, status);
    otel::record_exec(tool, status, started.elapsed().as_secs_f64());
}

/// Marks a `wait` span as a resume by replay and counts it.
pub(crate) fn replay(span: &Span) {
    if span.is_disabled() && !otel::metrics_installed() {
        return;
    }
    span.set(attr::REPLAYED, true);
    otel::record_replay();
}

/// The tool a request names, when it is a tool call (or an MCP namespace operation), as the checkpoint keeps it
/// for the spans of a later replay; `entry` is the catalog's entry of a tool call's callable name. A tool (or
/// server, or operation) the catalog does not have is named [`otel::OTHER`]: names the program made up never become
/// attributes or metric series.
pub(crate) fn call_name(inner: &Inner, id: u32, call: &BridgeCall, entry: Option<&CatalogEntry>) -> Option<CallName> {
    let method = call.method().as_str().to_owned();
    let (tool, server, write) = match call {
        BridgeCall::CallValue(_) => match entry {
            Some(entry) => (
                entry.definition.host_name().into_owned(),
                entry.definition.server.clone(),
                entry.definition.effect_class() == EffectClass::Write,
            ),
            None => (otel::OTHER.to_owned(), None, false),
        },
        BridgeCall::Namespace(NamespaceArgs { server, target: NamespaceTarget::Tool(tool), .. }) => {
            let ns = inner.catalog.mcp_servers().iter().find(|s| &s.name == server);
            let entry = ns.and_then(|ns| {
                let known = ns.tools.iter().find(|t| &t.name == tool)?;
                inner.catalog.mcp_tool(&ns.global_name, &known.js_name)
            });
            match entry {
                Some(entry) => {
                    (tool.clone(), Some(server.clone()), entry.definition.effect_class() == EffectClass::Write)
                }
                None => (otel::OTHER.to_owned(), ns.map(|_| server.clone()), false),
            }
        }
        BridgeCall::Namespace(NamespaceArgs { server, target: NamespaceTarget::Op(op), .. }) => {
            let ns = inner.catalog.mcp_servers().iter().find(|s| &s.name == server);
            let op = match op.as_str() {
                "resources.list" | "resources.read" | "prompts.list" | "prompts.get" if ns.is_some() => op.clone(),
                _ => otel::OTHER.to_owned(),
            };
            (op, ns.map(|_| server.clone()), false)
        }
        _ => return None,
    };
    Some(CallName { id, method, tool, server, write })
}

/// The INTERNAL span of one nested call, a child of `parent` (the span of the `exec` or `wait` driving the run).
pub(crate) fn call_span(run_id: &str, call: &CallName, replayed: bool, parent: &Span) -> Span {
    codemode_telemetry::span::start(Parent::Span(parent), || {
        let mut attributes = Vec::with_capacity(7);
        attributes.extend([
            KeyValue::new(attr::GEN_AI_OPERATION_NAME, otel::EXECUTE_TOOL),
            KeyValue::new(attr::GEN_AI_TOOL_NAME, call.tool.clone()),
            KeyValue::new(attr::GEN_AI_TOOL_CALL_ID, otel::tool_call_id(&call.method, call.id)),
            KeyValue::new(attr::RUN_ID, run_id.to_owned()),
            KeyValue::new(attr::REPLAYED, replayed),
        ]);
        if let Some(server) = &call.server {
            attributes.push(KeyValue::new(attr::SERVER, server.clone()));
        }
        Start { name: otel::execute_tool_name(&call.tool).into(), kind: SpanKind::Internal, attributes }
    })
}

/// Records how a nested call settled on its span: `ok`, or an error span for a refused or failed call and for a
/// tool result with `isError: true` (`error.type` `tool_error`), with the message redacted with `redactor`; the
/// effect status of a write-class call; and the call's metrics (its duration only for a live call).
pub(crate) fn settled(
    span: &Span,
    call: &CallName,
    value: &SettlementValue,
    replayed: bool,
    started: Option<Instant>,
    redactor: &Redactor,
) {
    if span.is_disabled() && !otel::metrics_installed() {
        return;
    }
    let seconds = started.map(|started| started.elapsed().as_secs_f64());
    record(span, &call.tool, Outcome::of(value, call.write), replayed, seconds, redactor);
}

/// What a settlement says about its call, for the call's span and metrics.
struct Outcome {
    status: &'static str,
    /// `error.type` and the unredacted message of an error span.
    error: Option<(String, String)>,
    /// A write-class call's effect status.
    effect: Option<&'static str>,
}

impl Outcome {
    fn of(value: &SettlementValue, write: bool) -> Outcome {
        let (status, error) = match value {
            SettlementValue::Ok { value } => match tool_error_text(value) {
                Some(text) => ("error", Some(("tool_error".to_owned(), text))),
                None => ("ok", None),
            },
            // An approver deferred the call: it waits in the run and is dispatched again when the run resumes.
            SettlementValue::Err { code: BridgeErrorCode::Other(code), .. } if code == "deferred" => ("deferred", None),
            SettlementValue::Err { code, message } => ("error", Some((code.as_str().to_owned(), message.clone()))),
        };
        let effect = write.then(|| crate::machine::effect_status(value).as_str());
        Outcome { status, error, effect }
    }
}

/// Records `outcome` on the span of a call of `tool` and in the call metrics.
fn record(span: &Span, tool: &str, outcome: Outcome, replayed: bool, seconds: Option<f64>, redactor: &Redactor) {
    if let Some((kind, message)) = &outcome.error {
        span.error(kind, message, redactor);
    }
    span.set(attr::STATUS, outcome.status);
    if let Some(effect) = outcome.effect {
        span.set(attr::EFFECT_STATUS, effect);
    }
    otel::record_call(tool, outcome.status, replayed, seconds);
}

/// The text of an MCP tool result with `isError: true` (its first text block, or a fixed note), else `None`.
fn tool_error_text(value: &Value) -> Option<String> {
    if value.get("isError").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let text = value
        .get("content")
        .and_then(Value::as_array)
        .and_then(|blocks| blocks.iter().find_map(|b| b.get("text").and_then(Value::as_str)))
        .unwrap_or("the tool reported an error (isError) without text");
    Some(text.to_owned())
}

/// A live nested call's span until its settlement: records it, or, when the call is dropped before it settled (the
/// run timed out, was aborted or cancelled), an `aborted` error.
pub(crate) struct CallTrace {
    span: Span,
    /// The call's tool and effect class and the engine's redactor, kept only when the span is recorded.
    call: Option<(Traced, Arc<Redactor>)>,
    started: Option<Instant>,
}

/// What recording a call's settlement needs of its [`CallName`].
struct Traced {
    tool: String,
    write: bool,
}

impl CallTrace {
    /// Follows a nested call's span from now; `call` and `redactor` are kept only when the span is recorded.
    pub(crate) fn new(span: Span, call: &CallName, redactor: &Arc<Redactor>) -> CallTrace {
        let started = started(&span);
        let call = started.map(|_| (Traced { tool: call.tool.clone(), write: call.write }, redactor.clone()));
        CallTrace { span, call, started }
    }

    /// The call settled with `value`.
    pub(crate) fn settled(mut self, value: &SettlementValue) {
        if let Some((call, redactor)) = self.call.take() {
            let seconds = self.started.map(|started| started.elapsed().as_secs_f64());
            record(&self.span, &call.tool, Outcome::of(value, call.write), false, seconds, &redactor);
        }
    }

    /// The call settled with `value`, to be recorded later ([`Settled::record`]) with the duration it has now;
    /// `None` when nothing is recorded.
    pub(crate) fn settled_later(mut self, value: &SettlementValue) -> Option<Settled> {
        let (call, redactor) = self.call.take()?;
        let outcome = Outcome::of(value, call.write);
        let seconds = self.started.map(|started| started.elapsed().as_secs_f64());
        let span = std::mem::replace(&mut self.span, Span::none());
        Some(Settled { span, call, redactor, outcome: Some(outcome), seconds })
    }
}

/// A nested call that settled at once, its span and metrics still to record: the run records them once the
/// settlement is on its way to the program, while the program goes on. Dropped unrecorded, it records itself.
pub(crate) struct Settled {
    span: Span,
    call: Traced,
    redactor: Arc<Redactor>,
    /// `None` once recorded.
    outcome: Option<Outcome>,
    seconds: Option<f64>,
}

impl Settled {
    /// Records the settlement on the call's span and in its metrics, and ends the span.
    pub(crate) fn record(self) {
        drop(self);
    }
}

impl Drop for Settled {
    fn drop(&mut self) {
        if let Some(outcome) = self.outcome.take() {
            record(&self.span, &self.call.tool, outcome, false, self.seconds, &self.redactor);
        }
    }
}

impl Drop for CallTrace {
    fn drop(&mut self) {
        if let Some((call, redactor)) = self.call.take() {
            self.span.error(
                "aborted",
                "the call was cancelled before it answered: its run ended (timeout, abort or cancellation)",
                &redactor,
            );
            self.span.set(attr::STATUS, "error");
            if call.write {
                self.span.set(attr::EFFECT_STATUS, "uncertain");
            }
        }
    }
}

/// The spans of the calls a resume by replay delivers from the journal: one `execute_tool <tool>` per named call
/// settled in a recorded round, marked `codemode.replayed`, under `parent` (the `wait` span).
pub(crate) fn replayed_calls(parent: &Span, checkpoint: &Checkpoint, redactor: &Redactor) {
    if (parent.is_disabled() && !otel::metrics_installed()) || checkpoint.call_names.is_empty() {
        return;
    }
    for round in &checkpoint.journal.rounds {
        for settlement in &round.settlements {
            let Some(call) = checkpoint.call_names.iter().find(|c| c.id == settlement.id) else { continue };
            let span = call_span(&checkpoint.run_id, call, true, parent);
            settled(&span, call, &settlement.value, true, None, redactor);
        }
    }
}
