//! The recorder of a run's activity: it turns the nested tool calls the driver dispatches and the settlements they
//! get into redacted [`CallRecord`]s, streams [`ActivityEvent`]s to the host's hooks as calls start, report progress
//! and finish, marks the calls a resume by replay delivers again, and hands each `exec`/`wait` result its
//! [`Activity`].
//!
//! It holds no clock and runs no call: the driver tells it the time. It records only a cell someone reads: when the
//! engine keeps every run's activity ([`ActivityConfig::keep`]) or has a hook, or the cell's call brings a hook or
//! wants the activity in its result's JSON; any other cell costs it one check per call. Invariant: everything it
//! stores or sends has passed the engine's redactor; a finished call is kept once in the run's log (a replay adds marked copies to the
//! result, never to the log); starts and progress are only sent, never kept.

use std::collections::BTreeMap;
use std::sync::Arc;

use codemode_bridge::{
    BridgeCall, BridgeErrorCode, BridgeRequest, CallProgress, CallValueArgs, EffectStatus, Journal, NamespaceArgs,
    NamespaceTarget, ProgressHook, SettlementValue,
};
use codemode_telemetry::{
    Activity, ActivityEvent, ActivityHook, ActivityLimits, ActivityLog, CallEffect, CallProgressEvent, CallRecord,
    CallStart, CallStatus, CellStart, Redactor, TOOL_KIND,
};
use serde_json::Value;

use crate::Inner;

/// How an engine records the activity of its runs.
#[derive(Clone, Default)]
pub struct ActivityConfig {
    /// The bounds of each run's activity.
    pub limits: ActivityLimits,
    /// Receives every run's activity events (besides the hook of each `exec`/`wait`).
    pub hook: Option<ActivityHook>,
    /// Every run keeps its activity, for its results (`CodeModeResult::activity`) and its checkpoint, whether or not
    /// a call asks for it.
    pub keep: bool,
}

impl std::fmt::Debug for ActivityConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActivityConfig")
            .field("limits", &self.limits)
            .field("hook", &self.hook.is_some())
            .field("keep", &self.keep)
            .finish()
    }
}

/// A call that started and has not finished: what was recorded, and whether it was handed to its tool host.
struct Open {
    start: CallStart,
    handed: bool,
}

/// The activity of one run, across its `exec` and `wait`s.
pub(crate) struct Recorder {
    run_id: String,
    log: ActivityLog,
    /// The current cell's activity, handed out with its result.
    cell: Activity,
    open: BTreeMap<u32, Open>,
    /// The hook of the current `exec` or `wait` (with the engine's), shared with the progress hooks of calls still
    /// running from an earlier one, so their reports reach whoever waits on the run now.
    hook: Arc<std::sync::RwLock<Option<ActivityHook>>>,
    redactor: Arc<Redactor>,
    limits: ActivityLimits,
    /// Whether the current cell is recorded (someone reads it).
    recording: bool,
}

impl Recorder {
    /// The recorder of run `run_id`, continuing `log` (empty for a new run). The calls the log has open were in
    /// flight in the process that parked the run.
    pub(crate) fn new(inner: &Inner, run_id: &str, mut log: ActivityLog) -> Recorder {
        let open = std::mem::take(&mut log.open)
            .into_iter()
            .filter_map(|start| Some((call_number(&start.call_id)?, Open { start, handed: true })))
            .collect();
        Recorder {
            run_id: run_id.to_owned(),
            cell: Activity::new(run_id, log.cell),
            log,
            open,
            hook: Arc::default(),
            redactor: inner.redactor.clone(),
            limits: inner.activity.limits,
            recording: false,
        }
    }

    /// Begins the next cell of the run (the `exec`, or a `wait`): its activity starts empty, shows `source`
    /// redacted, goes into the result's JSON when `in_json`, and streams to the engine's hook and `hook`. Nobody
    /// reading it (no hook, not in the JSON, the engine keeping none), the cell records nothing.
    pub(crate) fn begin(&mut self, inner: &Inner, source: &str, hook: Option<ActivityHook>, in_json: bool) {
        self.log.cell += 1;
        self.cell = Activity::new(&self.run_id, self.log.cell);
        self.cell.in_json = in_json;
        self.recording = inner.activity.keep || inner.activity.hook.is_some() || hook.is_some() || in_json;
        if self.recording && self.limits.source_bytes > 0 {
            let shown = codemode_source::redact_source(source, &self.redactor);
            self.cell.source = codemode_telemetry::redact::cut(shown, self.limits.source_bytes);
        }
        let current: Option<ActivityHook> = match (inner.activity.hook.clone(), hook) {
            (Some(engine), Some(call)) => Some(Arc::new(move |event: &ActivityEvent| {
                engine(event);
                call(event);
            })),
            (engine, call) => engine.or(call),
        };
        self.cell.tool_input_kind = self.log.input_kind;
        if let Some(hook) = &current {
            hook(&ActivityEvent::CellStarted(CellStart {
                run_id: self.run_id.clone(),
                cell: self.log.cell,
                tool: if self.log.cell == 1 { "exec".into() } else { "wait".into() },
                tool_kind: TOOL_KIND.into(),
                tool_input_kind: self.log.input_kind,
            }));
        }
        *self.hook.write().unwrap_or_else(std::sync::PoisonError::into_inner) = current;
    }

    fn emit(&self, event: &ActivityEvent) {
        emit(&self.hook, event);
    }

    /// Records that `request` reached the host at `now_ms`, if it is a nested tool call (a catalog tool or an MCP
    /// call); other requests (search, timers, the session store) are not activity.
    pub(crate) fn started(&mut self, inner: &Inner, request: &BridgeRequest, now_ms: u64) {
        if !self.recording || self.open.contains_key(&request.id) {
            // A call that waited for an approval is dispatched again by the resume: it is the same call.
            return;
        }
        let (tool, path, server, args) = match &request.call {
            BridgeCall::CallValue(CallValueArgs { tool, args }) => match inner.catalog.by_callable(tool) {
                Some(entry) => (
                    entry.definition.host_name().into_owned(),
                    tool.clone(),
                    entry.definition.server.clone(),
                    args.as_ref(),
                ),
                None => (tool.clone(), tool.clone(), None, args.as_ref()),
            },
            BridgeCall::Namespace(NamespaceArgs { server, target, args }) => {
                let global = inner.catalog.mcp_servers().iter().find(|s| s.name == *server);
                match target {
                    NamespaceTarget::Tool(tool) => {
                        let path = global
                            .and_then(|ns| {
                                let known = ns.tools.iter().find(|t| &t.name == tool)?;
                                inner.catalog.mcp_tool(&ns.global_name, &known.js_name)
                            })
                            .map_or_else(|| format!("MCP.{server}.{tool}"), |e| e.callable_name.clone());
                        (tool.clone(), path, Some(server.clone()), args.as_ref())
                    }
                    NamespaceTarget::Op(op) => {
                        let global = global.map_or(server.as_str(), |ns| ns.global_name.as_str());
                        (op.clone(), format!("MCP.{global}.{op}"), Some(server.clone()), args.as_ref())
                    }
                }
            }
            _ => return,
        };
        let empty = Value::Object(serde_json::Map::new());
        let start = CallStart {
            call_id: codemode_telemetry::otel::tool_call_id(request.call.method().as_str(), request.id),
            run_id: self.run_id.clone(),
            cell: self.log.cell,
            tool,
            path,
            server,
            started_at_ms: now_ms,
            args: self.redactor.preview(args.unwrap_or(&empty), self.limits.preview_bytes),
            replayed: false,
        };
        let hook = self.hook.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(hook) = hook {
            hook(&ActivityEvent::CallStarted(start.clone()));
        }
        self.open.insert(request.id, Open { start, handed: false });
    }

    /// Marks call `id` as handed to its tool host (it passed the catalog, the restart-safety policy, the input
    /// contract and the tool policy, or waits for a person's approval).
    pub(crate) fn handed(&mut self, id: u32) {
        if let Some(open) = self.open.get_mut(&id) {
            open.handed = true;
        }
    }

    /// Records that call `id` settled with `value` at `now_ms`, with the effect status the host recorded for it
    /// (`not_started` when it never reached its tool host).
    pub(crate) fn finished(&mut self, id: u32, value: &SettlementValue, now_ms: u64, recorded: EffectStatus) {
        self.finish(id, value, now_ms, effect(recorded));
    }

    fn finish(&mut self, id: u32, value: &SettlementValue, now_ms: u64, handed_effect: CallEffect) {
        let Some(Open { start, handed }) = self.open.remove(&id) else { return };
        let effect = if handed { handed_effect } else { CallEffect::NotStarted };
        let max = self.limits.preview_bytes;
        let (status, error_code, error, result) = match value {
            SettlementValue::Ok { value } => (CallStatus::Ok, None, None, Some(self.redactor.preview(value, max))),
            SettlementValue::Err { code, message } => {
                (CallStatus::Error, Some(code.as_str().to_owned()), Some(self.redactor.text(message, max)), None)
            }
        };
        let record = CallRecord {
            duration_ms: now_ms.saturating_sub(start.started_at_ms),
            start,
            status,
            error_code,
            error,
            effect,
            result,
        };
        self.log.record(&record, &self.limits);
        self.cell.record(&record, &self.limits);
        self.emit(&ActivityEvent::CallFinished(record));
    }

    /// A cell is starting by replay of `journal`: every kept call whose settlement it delivers again is added to
    /// the cell's activity as replayed, and sent as a replayed start and finish. The log is not touched.
    pub(crate) fn replaying(&mut self, journal: &Journal) {
        if !self.recording {
            return;
        }
        // The kept records by request id, looked up once per settlement (a scan of the log per settlement made a
        // replay of n calls cost n times the log).
        let mut kept = std::collections::HashMap::with_capacity(self.log.calls.len());
        for (at, call) in self.log.calls.iter().enumerate() {
            if let Some(id) = call_number(&call.start.call_id) {
                kept.entry(id).or_insert(at);
            }
        }
        for round in &journal.rounds {
            for settlement in &round.settlements {
                let Some(&at) = kept.get(&settlement.id) else { continue };
                let record = self.log.calls[at].replayed();
                self.cell.record(&record, &self.limits);
                self.emit(&ActivityEvent::CallStarted(record.start.clone()));
                self.emit(&ActivityEvent::CallFinished(record));
            }
        }
    }

    /// The run ended with calls still open (it failed, timed out or was aborted, and their tasks were cancelled):
    /// each finishes as cancelled at `now_ms`, its effect uncertain if it reached its tool host.
    pub(crate) fn cancel_open(&mut self, now_ms: u64) {
        for id in self.open.keys().copied().collect::<Vec<_>>() {
            let value = SettlementValue::err(
                BridgeErrorCode::Other("cancelled".into()),
                "the run ended before the call settled; the call was cancelled",
            );
            self.finish(id, &value, now_ms, CallEffect::Uncertain);
        }
    }

    /// A progress hook that also sends the reports as redacted [`ActivityEvent::Progress`] events to the hook of
    /// the run's `exec` or `wait` at the time of the report (a call started by an `exec` may report during a
    /// later `wait`).
    pub(crate) fn progress_hook(&self, base: Option<ProgressHook>) -> Option<ProgressHook> {
        let hook = self.hook.clone();
        let redactor = self.redactor.clone();
        let max = self.limits.preview_bytes;
        Some(Arc::new(move |report: CallProgress| {
            emit(
                &hook,
                &ActivityEvent::Progress(CallProgressEvent {
                    run_id: report.run_id.clone(),
                    call_id: report.request_id.clone(),
                    progress: report.progress,
                    total: report.total,
                    message: report.message.as_deref().map(|m| redactor.text(m, max)),
                }),
            );
            if let Some(base) = &base {
                base(report);
            }
        }))
    }

    /// The log a checkpoint keeps: the finished calls, and the calls still open.
    pub(crate) fn log(&self) -> ActivityLog {
        let mut log = self.log.clone();
        log.open = self.open.values().map(|o| o.start.clone()).collect();
        log
    }

    /// The current cell's activity, for its result; `None` when the cell was not recorded.
    pub(crate) fn take(&mut self) -> Option<Activity> {
        let next = Activity::new(&self.run_id, self.log.cell);
        let cell = std::mem::replace(&mut self.cell, next);
        self.recording.then_some(cell)
    }
}

/// The request id of a call id `bridge:<method>:<n>`.
fn call_number(call_id: &str) -> Option<u32> {
    call_id.rsplit(':').next()?.parse().ok()
}

/// The activity spelling of an effect status.
fn effect(status: EffectStatus) -> CallEffect {
    match status {
        EffectStatus::NotStarted => CallEffect::NotStarted,
        EffectStatus::Completed => CallEffect::Completed,
        EffectStatus::Failed => CallEffect::Failed,
        _ => CallEffect::Uncertain,
    }
}

/// Hands `event` to the current hook, if any (the lock is not held while the hook runs).
fn emit(hook: &std::sync::RwLock<Option<ActivityHook>>, event: &ActivityEvent) {
    let current = hook.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    if let Some(hook) = current {
        hook(event);
    }
}
