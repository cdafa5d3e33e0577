//! The engine side of a cell: one fresh, locked-down Boa context running one program, driven from quiescent point
//! to quiescent point.
//!
//! This module runs inside the worker process only; it never touches a pipe or a tool. It keeps the replay
//! invariant: requests are numbered in creation order, settlements are applied only at quiescent points, and a
//! journal's rounds delivered into a fresh engine running the same source reproduce the original run exactly.

mod bridge;
mod encode;
mod hooks;
mod shared;

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use boa_engine::builtins::promise::PromiseState;
use boa_engine::context::ContextBuilder;
use boa_engine::object::builtins::JsPromise;
use boa_engine::{Context, JsError, JsNativeError, JsObject, JsResult, JsString, JsValue, Source, js_string};
use codemode_bridge::{Round, Settlement, truncation_marker};

pub use bridge::OutputSink;
use bridge::{BridgeState, LazyGlobals, Shared};
use codemode_vm::protocol::{CellFailure, GuestGlobals, GuestOutcome, Start, WorkerMessage};
use encode::{EncodeError, Intrinsics};
use hooks::{GuestHooks, Rejections, VirtualClock};
pub(crate) use shared::SHARED_SCRIPTS;

/// The file name user code runs under; error positions are reported against it.
pub const USER_FILE: &str = "codemode:user.js";
/// Lines the wrapper adds before the user's first line.
const WRAPPER_LINES: u32 = 1;
/// Largest final value, in bytes of JSON, a worker sends to the host; the host applies the real output budget.
const MAX_VALUE_BYTES: usize = 8 * 1024 * 1024;

/// What a driving step produced.
pub type Step = WorkerMessage;

/// A worker's guest globals, prepared once for every context it builds: the JSON the prelude's `install` reads (tool
/// names and the `MCP` namespace), and what natives serve on first use only (`catalog.all()` handles and the
/// declaration files), so that a context build does not grow with them.
pub struct PreparedGlobals {
    install_json: String,
    lazy: Rc<LazyGlobals>,
}

impl PreparedGlobals {
    /// Prepares `globals`.
    pub fn new(globals: &GuestGlobals) -> PreparedGlobals {
        let install_json = serde_json::to_string(&serde_json::json!({
            "tools": globals.tools,
            "mcp": globals.mcp.iter().map(|ns| serde_json::json!({
                "global": ns.global, "server": ns.server, "tools": ns.tools,
            })).collect::<Vec<_>>(),
        }))
        .expect("globals always serialize");
        let lazy = Rc::new(LazyGlobals::new(globals.handles.clone(), globals.api_files.clone()));
        PreparedGlobals { install_json, lazy }
    }
}

/// One cell's engine: a fresh context with the prelude loaded (its code compiled once per thread, see `shared`),
/// then the program.
pub struct Engine {
    context: Context,
    state: Shared,
    clock: Rc<VirtualClock>,
    rejections: Rejections,
    hooks: JsObject,
    top: Option<JsPromise>,
    /// Whether the program's promise settled and its outcome was encoded (once: encoding runs guest code).
    settled: bool,
    /// The encoded outcome until a report carries it to the host.
    outcome: Option<GuestOutcome>,
    /// Whether the program returned (rather than threw): only then can an unhandled rejection still fail it.
    program_returned: bool,
    finished: bool,
    /// Lines of the user's source: frames past it belong to the wrapper.
    user_lines: u32,
    /// Whether the run's globals are installed.
    installed: bool,
}

impl Engine {
    /// Builds a fresh context with the prelude loaded. `instructions` is the cell's engine instruction budget.
    ///
    /// # Errors
    ///
    /// Fails only if the engine itself cannot start (the prelude is ours and always evaluates).
    pub fn new(instructions: u64, sink: OutputSink) -> JsResult<Engine> {
        let clock = Rc::new(VirtualClock::default());
        let mut context = ContextBuilder::new()
            .clock(clock.clone())
            .host_hooks(Rc::new(GuestHooks))
            // No module loader: the source checks reject `import`, and Boa's default one resolves the worker's
            // working directory, which a confined worker may not read.
            .module_loader(Rc::new(boa_engine::module::IdleModuleLoader))
            .instructions_remaining(usize::try_from(instructions).unwrap_or(usize::MAX))
            .build()?;
        let state: Shared = Rc::new(RefCell::new(BridgeState::new(sink)));
        context.insert_data(state.clone());
        let rejections = Rejections::default();
        context.insert_data(rejections.clone());
        let intrinsics = Rc::new(Intrinsics::capture(&mut context));
        context.insert_data(intrinsics);
        hooks::seed_math_random(&mut context)?;
        crate::natives::install(&mut context)?;
        let natives = bridge::natives(&mut context);
        let prelude = shared::evaluate(shared::Shared::Prelude, &mut context)?;
        let prelude = prelude.as_object().expect("the prelude evaluates to a function");
        let hooks = prelude.call(&JsValue::undefined(), &[natives.into()], &mut context)?;
        let hooks = hooks.as_object().expect("the prelude returns its hooks object");
        Ok(Engine {
            context,
            state,
            clock,
            rejections,
            hooks,
            top: None,
            settled: false,
            outcome: None,
            program_returned: false,
            finished: false,
            user_lines: 0,
            installed: false,
        })
    }

    /// Installs the run's globals (`kept`, the globals the worker keeps prepared for the start's `globals_key`, else
    /// the start's own), starts the program, replays the journal and returns the first live report.
    pub fn start(&mut self, start: Start, kept: Option<&PreparedGlobals>) -> Step {
        {
            let mut state = self.state.borrow_mut();
            state.configure(&start);
        }
        self.clock.set(start.journal.start_clock_ms);
        hooks::reseed(&mut self.context, start.journal.seed);
        let installed = match (kept, &start.globals) {
            (Some(_), _) | (None, Some(_)) if self.installed => {
                Err("the worker's contexts already carry their globals".to_owned())
            }
            (Some(prepared), _) => self.install(prepared),
            (None, Some(globals)) => self.install(&PreparedGlobals::new(globals)),
            (None, None) if self.installed => Ok(()),
            (None, None) => self.install(&PreparedGlobals::new(&GuestGlobals::default())),
        };
        if let Err(e) = installed {
            return failure(CellFailure::Internal, format!("code mode could not install the run's globals: {e}"));
        }
        self.user_lines = start.source.lines().count().max(1) as u32;
        let wrapped = format!("(async () => {{\n{}\n}})()", start.source);
        let evaluated = self.context.eval(Source::from_bytes(&wrapped).with_path(Path::new(USER_FILE)));
        match evaluated {
            Ok(value) => match value.as_promise() {
                Some(promise) => self.top = Some(promise),
                None => return failure(CellFailure::Internal, "the cell wrapper did not produce a promise".into()),
            },
            Err(e) => return self.engine_error(e),
        }
        if let Err(e) = self.context.run_jobs() {
            return self.engine_error(e);
        }
        // Each round was delivered at a quiescent point where the recorded run had encoded its outcome if its
        // promise had settled; encoding runs guest code (getters may make requests), so replay does the same, and
        // refills the free slots as its report did.
        self.encode_outcome();
        for round in &start.journal.rounds {
            self.state.borrow_mut().release_queued();
            if let Some(step) = self.check() {
                return step;
            }
            if let Err(message) = self.apply(round) {
                return failure(CellFailure::Internal, message);
            }
            if let Err(e) = self.context.run_jobs() {
                return self.engine_error(e);
            }
            self.encode_outcome();
        }
        self.state.borrow_mut().finish_replay();
        self.report()
    }

    /// Installs the guest globals (tools, `MCP`, `API`); once per context, before its program starts.
    ///
    /// # Errors
    ///
    /// When they are installed already, or the prelude rejects them.
    pub fn install(&mut self, globals: &PreparedGlobals) -> Result<(), String> {
        if self.installed {
            return Err("the globals are installed already".into());
        }
        self.context.insert_data(globals.lazy.clone());
        self.call_hook("install", &[js_string!(globals.install_json.as_str()).into()]).map_err(|e| e.to_string())?;
        self.installed = true;
        Ok(())
    }

    /// Delivers one round of settlements and runs the program to its next quiescent point.
    pub fn settle(&mut self, round: &Round) -> Step {
        if self.finished {
            return failure(CellFailure::Internal, "settlements arrived after the cell finished".into());
        }
        if let Err(message) = self.apply(round) {
            return failure(CellFailure::Internal, message);
        }
        if let Err(e) = self.context.run_jobs() {
            return self.engine_error(e);
        }
        self.report()
    }

    fn apply(&mut self, round: &Round) -> Result<(), String> {
        self.clock.set(round.clock_ms);
        for Settlement { id, value } in &round.settlements {
            let resolvers = self.state.borrow_mut().take_resolvers(*id, value);
            let Some((resolvers, payload)) = resolvers? else { continue };
            let (function, arg) = match payload {
                // Tool results become JS values the way JSON.parse builds them, with shared shapes.
                Ok(value) => (&resolvers.resolve, crate::natives::json::from_serde(&value, &mut self.context)),
                Err(error) => (&resolvers.reject, self.bridge_error(&error)),
            };
            function.call(&JsValue::undefined(), &[arg], &mut self.context).map_err(|e| e.to_string())?;
        }
        // The freed slots are refilled when the cell reports, after the continuations ran (seed 003): a queued timer
        // they clear is never started.
        Ok(())
    }

    /// The `Error` a failed request rejects with: the message, its `code`, and `effectStatus`: `not_started` for
    /// the codes the host gives only before a call reaches its tool (`denied`, `input_contract`, `invalid_contract`),
    /// else `unknown`
    /// (the host may have acted before it failed).
    fn bridge_error(&mut self, error: &bridge::RequestError) -> JsValue {
        let object = JsNativeError::error().with_message(error.message.clone()).into_opaque(&mut self.context);
        let effect = match error.code {
            codemode_bridge::BridgeErrorCode::Denied
            | codemode_bridge::BridgeErrorCode::InputContract
            | codemode_bridge::BridgeErrorCode::InvalidContract => "not_started",
            _ => "unknown",
        };
        for (key, value) in [("code", error.code.as_str()), ("effectStatus", effect)] {
            object
                .create_data_property_or_throw(JsString::from(key), JsString::from(value), &mut self.context)
                .expect("a fresh error object takes new properties");
        }
        object.into()
    }

    /// A failure the bridge state holds (admission, divergence) or an exhausted budget.
    fn check(&mut self) -> Option<Step> {
        if let Some((failure_kind, message)) = self.state.borrow_mut().sticky_failure() {
            return Some(failure(failure_kind, message));
        }
        if self.context.instructions_remaining() == 0 {
            return Some(failure(CellFailure::Timeout, "code mode timeout exceeded".into()));
        }
        None
    }

    fn report(&mut self) -> Step {
        if let Some(step) = self.check() {
            self.finished = true;
            return step;
        }
        self.encode_outcome();
        // Encoding the value runs guest code (getters, toJSON, proxy traps), which may exhaust the budget.
        if let Some(step) = self.check() {
            self.finished = true;
            return step;
        }
        let outcome = self.outcome.take();
        let mut state = self.state.borrow_mut();
        state.release_queued();
        let open = state.open_count();
        if !self.settled && open == 0 {
            self.finished = true;
            return failure(
                CellFailure::Stalled,
                "code mode program can no longer finish: it awaits a promise that nothing will settle, or an engine \
                 limit (recursion depth) was hit after an await. Check for a missing await or resolve call, and \
                 avoid deep recursion."
                    .into(),
            );
        }
        if self.settled && open == 0 {
            self.finished = true;
            // The program is done: a rejection nothing handled fails it, as an error it never saw would.
            if self.program_returned
                && let Some(reason) = self.rejections.first_unhandled(self.top.as_ref())
            {
                drop(state);
                return failure(CellFailure::UnhandledRejection, self.unhandled_message(&reason));
            }
        }
        let (requests, canceled) = state.take_released();
        WorkerMessage::Quiescent { requests, outcome, open, canceled }
    }

    /// Whether the cell is over: its program settled with nothing open, or it failed.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Encodes the program's outcome the first time its promise is found settled, and never again: the value's
    /// getters, `toJSON` and proxy traps (and a thrown error's) run once, as `JSON.stringify` would run them once
    /// in Node, however many quiescent points the cell still passes while its requests drain.
    fn encode_outcome(&mut self) {
        if self.settled {
            return;
        }
        let outcome = match self.top.as_ref().map(JsPromise::state) {
            Some(PromiseState::Fulfilled(value)) => self.returned(&value),
            Some(PromiseState::Rejected(reason)) => self.threw(&reason),
            Some(PromiseState::Pending) | None => return,
        };
        self.settled = true;
        self.program_returned = matches!(outcome, GuestOutcome::Returned { .. });
        self.outcome = Some(outcome);
    }

    fn returned(&mut self, value: &JsValue) -> GuestOutcome {
        let intrinsics = self.context.get_data::<Rc<Intrinsics>>().expect("the engine captured its intrinsics").clone();
        match encode::encode(value, false, &intrinsics, &mut self.context) {
            Ok(value) => {
                let value = value.unwrap_or(serde_json::Value::Null);
                let text = serde_json::to_string(&value).expect("JSON values always serialize");
                let value =
                    if text.len() > MAX_VALUE_BYTES { truncation_marker(&text, MAX_VALUE_BYTES) } else { value };
                GuestOutcome::Returned { value }
            }
            Err(EncodeError::Engine(e)) => {
                GuestOutcome::Threw { error: format!("the return value could not be encoded: {e}") }
            }
            Err(e) => GuestOutcome::Threw { error: e.message() },
        }
    }

    fn unhandled_message(&mut self, reason: &JsValue) -> String {
        let described = self
            .call_hook("describeError", std::slice::from_ref(reason))
            .ok()
            .and_then(|v| v.as_string())
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s.to_std_string_lossy()).ok())
            .unwrap_or_default();
        let name = described["name"].as_str().unwrap_or("Error");
        let message = described["message"].as_str().unwrap_or("");
        let mut reason = format!("{name}: {message}");
        if let Some(code) = described["code"].as_str() {
            reason.push_str(&format!(" (code: {code})"));
        }
        format!(
            "code mode program left a promise rejection unhandled: {reason}. Await every tool call and timer, or \
             handle its rejection with try/catch or .catch()."
        )
    }

    fn threw(&mut self, reason: &JsValue) -> GuestOutcome {
        let described = self
            .call_hook("describeError", std::slice::from_ref(reason))
            .ok()
            .and_then(|v| v.as_string())
            .map(|s| s.to_std_string_lossy())
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .unwrap_or_default();
        let name = described["name"].as_str().unwrap_or("Error");
        let message = described["message"].as_str().unwrap_or("");
        let stack = map_stack(described["stack"].as_str().unwrap_or(""), self.user_lines);
        let mut error = format!("{name}: {message}");
        if let Some(code) = described["code"].as_str() {
            error.push_str(&format!(" (code: {code})"));
        }
        if !stack.is_empty() {
            error.push('\n');
            error.push_str(&stack);
        }
        GuestOutcome::Threw { error }
    }

    fn engine_error(&mut self, error: JsError) -> Step {
        self.finished = true;
        if self.context.instructions_remaining() == 0 {
            return failure(CellFailure::Timeout, "code mode timeout exceeded".into());
        }
        if let Some(engine) = error.as_engine() {
            return failure(CellFailure::EngineLimit, format!("code mode engine limit exceeded: {engine}"));
        }
        // A syntax error or an early error: the source checks should have caught it; report it in user terms.
        let text = error.to_string();
        failure(CellFailure::Internal, map_stack(&text, self.user_lines))
    }

    fn call_hook(&mut self, name: &str, args: &[JsValue]) -> JsResult<JsValue> {
        let function = self.hooks.get(js_string!(name), &mut self.context)?;
        let function = function.as_object().expect("prelude hooks are functions");
        function.call(&JsValue::undefined(), args, &mut self.context)
    }
}

fn failure(failure: CellFailure, message: String) -> Step {
    WorkerMessage::Failed { failure, message }
}

/// Rewrites `codemode:user.js:L:C` positions of the wrapped source into the user's own lines, and drops frames
/// of the prelude and of native code: the model should see its own program, not our machinery.
fn map_stack(stack: &str, user_lines: u32) -> String {
    let mut out = String::with_capacity(stack.len());
    for line in stack.lines() {
        let frame = line.trim_start().starts_with("at ");
        if frame && !line.contains(USER_FILE) {
            continue;
        }
        let Some(mapped) = map_line(line, user_lines) else { continue };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&mapped);
    }
    out
}

/// The line in user coordinates, or `None` for a frame of the wrapper itself.
fn map_line(line: &str, user_lines: u32) -> Option<String> {
    let Some(at) = line.find(USER_FILE) else { return Some(line.to_owned()) };
    let rest = &line[at + USER_FILE.len()..];
    let mut parts = rest.splitn(3, ':');
    let (_, Some(l), Some(tail)) = (parts.next(), parts.next(), parts.next()) else { return Some(line.to_owned()) };
    let Ok(l) = l.parse::<u32>() else { return Some(line.to_owned()) };
    if l <= WRAPPER_LINES || l > user_lines + WRAPPER_LINES {
        return None;
    }
    Some(format!("{}{USER_FILE}:{}:{tail}", &line[..at], l - WRAPPER_LINES))
}

/// An output item delivered to the sink, for tests that drive an engine in-process.
#[cfg(feature = "engine-api")]
pub fn collect_output() -> (OutputSink, Rc<RefCell<Vec<codemode_bridge::OutputItem>>>) {
    let items = Rc::new(RefCell::new(Vec::new()));
    let sink_items = items.clone();
    (Box::new(move |item| sink_items.borrow_mut().push(item)), items)
}
