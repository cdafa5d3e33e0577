//! `codemode._native`, the native half of the `codemode` Python package: a PyO3 binding over the facade's
//! [`CodeMode`] (build, `exec`, `wait`, `abort`, `surface`), with MCP servers through `codemode-mcp`, configured as
//! the gateway's are (`codemode-gateway`'s config checker), and nothing more.
//!
//! It is deliberately thin: JSON text crosses in both directions (tool definitions, limits, policy, results), the
//! Python half (`python/codemode/`) owns schemas, result classes and the event loop, and the engine runs on one
//! Tokio runtime of this module's own. Invariants: the GIL is never held while the engine works (it is taken only to
//! hand a call or a result to Python); a Python callback that fails becomes a tool error or a `deny`, never a panic.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};

use codemode::WorkerCommand;
use codemode::{
    ApprovalDecision, ApprovalRequest, Approver, CodeMode, CodeModeResult, Confinement, ExecOptions, Limits, Policy,
    RunScope, ToolDefinition, ToolHost,
};
use codemode::{CallContext, ToolError};
use codemode_mcp::{UpstreamManager, WithServers};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::{Value, json};
use tokio::sync::oneshot;

pyo3::create_exception!(
    codemode,
    EngineError,
    PyRuntimeError,
    "The engine could not be built (no worker, a worker that fails its hello, a state directory that cannot be opened)."
);

/// The runtime every engine of this process runs on: the worker pool's pipes, the run drivers and the timers.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("codemode")
            .enable_all()
            .build()
            .expect("a Tokio runtime starts")
    })
}

/// The door from the runtime's threads into Python: open until the interpreter begins to exit, with a count of
/// the threads inside.
///
/// A thread that takes the GIL while the interpreter finalizes aborts the process (`PyGILState_Release: thread
/// state must be current`), so [`shutdown`], registered with `atexit`, closes the door and waits for the threads
/// inside to leave before finalization starts.
struct Door {
    state: Mutex<(bool, usize)>,
    left: Condvar,
}

static DOOR: Door = Door { state: Mutex::new((true, 0)), left: Condvar::new() };

impl Door {
    fn lock(&self) -> std::sync::MutexGuard<'_, (bool, usize)> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Runs `f` with the GIL from a runtime thread; `None` when the interpreter is exiting or gone.
fn with_python<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    {
        let mut state = DOOR.lock();
        if !state.0 {
            return None;
        }
        state.1 += 1;
    }
    let result = Python::try_attach(f);
    let mut state = DOOR.lock();
    state.1 -= 1;
    if state.1 == 0 {
        DOOR.left.notify_all();
    }
    result
}

/// Closes the door into Python for the runtime's threads and waits (without the GIL) for those inside to leave;
/// `codemode` registers it with `atexit`. Later tool calls and approvals fail as if their callback were gone.
#[pyfunction]
fn shutdown(py: Python<'_>) {
    py.detach(|| {
        let mut state = DOOR.lock();
        state.0 = false;
        while state.1 > 0 {
            state = DOOR.left.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    });
}

/// The text a model reads of a result given as its JSON text: the JSON itself, wrapped between external-content
/// markers when the program read what an MCP server sent.
#[pyfunction]
fn model_text(result_json: &str) -> PyResult<String> {
    let value: serde_json::Value = serde_json::from_str(result_json)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("a result is JSON text: {e}")))?;
    Ok(codemode::model_text_of(&value))
}

/// What a Python tool call ends with: its result as JSON text, or a failure `(code, message)`.
type Outcome = Result<String, (String, String)>;

/// The one-shot answer handle a tool call gives Python: `ok(json)` or `error(code, message)`, once.
#[pyclass(frozen, module = "codemode._native")]
struct Completion(Mutex<Option<oneshot::Sender<Outcome>>>);

impl Completion {
    fn send(&self, outcome: Outcome) {
        let sender = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        // A call whose run ended meanwhile has no receiver any more; its answer has nowhere to go.
        if let Some(sender) = sender {
            let _ = sender.send(outcome);
        }
    }
}

#[pymethods]
impl Completion {
    /// Settles the call with a result, given as JSON text.
    fn ok(&self, json: String) {
        self.send(Ok(json));
    }

    /// Settles the call with a failure the program can catch (`err.code`, `err.message`).
    fn error(&self, code: String, message: String) {
        self.send(Err((code, message)));
    }
}

/// The one-shot answer handle of an approval: called with `approve`, `approve_for_run`, `deny` or `defer`.
#[pyclass(frozen, module = "codemode._native")]
struct Decide(Mutex<Option<oneshot::Sender<ApprovalDecision>>>);

#[pymethods]
impl Decide {
    fn __call__(&self, decision: &str) -> PyResult<()> {
        let decision =
            serde_json::from_value::<ApprovalDecision>(Value::String(decision.to_owned())).map_err(|_| {
                PyValueError::new_err(format!(
                    "an approval decision is \"approve\", \"approve_for_run\", \"deny\" or \"defer\", not {decision:?}"
                ))
            })?;
        let sender = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(sender) = sender {
            let _ = sender.send(decision);
        }
        Ok(())
    }
}

/// Calls the cancel callable Python returned for a call (if any) when the call's future is dropped before its
/// answer came: the run ended, was aborted or stopped waiting for it.
struct CancelOnDrop(Option<Py<PyAny>>);

impl CancelOnDrop {
    fn disarm(mut self) {
        if let Some(cancel) = self.0.take() {
            // Dropping a Python reference outside the GIL only queues its decref; take the GIL if we can.
            with_python(|_| drop(cancel));
        }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(cancel) = self.0.take() {
            with_python(|py| {
                if let Err(e) = cancel.call0(py) {
                    e.write_unraisable(py, None);
                }
            });
        }
    }
}

/// Calls `dispatch(*args)` under the GIL; Python's answer is a cancel callable or `None`.
fn dispatch(dispatch: &Py<PyAny>, args: impl for<'py> pyo3::call::PyCallArgs<'py>) -> Result<CancelOnDrop, String> {
    match with_python(|py| dispatch.call1(py, args).map(|c| (!c.is_none(py)).then_some(c))) {
        None => Err("the Python interpreter is shutting down".into()),
        Some(Err(e)) => Err(format!("the Python dispatcher failed: {e}")),
        Some(Ok(cancel)) => Ok(CancelOnDrop(cancel)),
    }
}

/// The tool host: every call goes to the Python dispatcher, which runs the function on the event loop or a thread
/// and settles the [`Completion`].
struct PyHost {
    dispatch: Py<PyAny>,
}

#[async_trait::async_trait]
impl ToolHost for PyHost {
    async fn call_tool(&self, tool: &str, args: Value, cx: CallContext) -> Result<Value, ToolError> {
        let (tx, rx) = oneshot::channel();
        let completion = Completion(Mutex::new(Some(tx)));
        let guard = dispatch(&self.dispatch, (tool, args.to_string(), cx.run_id, cx.request_id, completion))
            .map_err(ToolError::new)?;
        let outcome = rx.await;
        guard.disarm();
        match outcome {
            Ok(Ok(text)) => serde_json::from_str(&text)
                .map_err(|e| ToolError::new(format!("the tool {tool} returned text that is not JSON: {e}"))),
            Ok(Err((code, message))) => Err(ToolError::with_code(code, message)),
            Err(_) => Err(ToolError::new(format!("the tool {tool} ended without a result"))),
        }
    }
}

/// The approver: every `ask` goes to the Python dispatcher, which calls the application's callback. A callback that
/// fails, or never answers before its run goes away, counts as `deny`.
struct PyApprover {
    dispatch: Py<PyAny>,
}

#[async_trait::async_trait]
impl Approver for PyApprover {
    async fn decide(&self, request: ApprovalRequest) -> ApprovalDecision {
        let (tx, rx) = oneshot::channel();
        let text = json!({
            "tool": request.tool,
            "path": request.path,
            "preview": request.preview,
            "title": request.title,
            "runId": request.context.run_id,
            "callId": request.context.request_id,
        })
        .to_string();
        let Ok(guard) = dispatch(&self.dispatch, (text, Decide(Mutex::new(Some(tx))))) else {
            return ApprovalDecision::Deny;
        };
        let decision = rx.await.unwrap_or(ApprovalDecision::Deny);
        guard.disarm();
        decision
    }
}

/// The handle of one `exec` or `wait` in flight: `cancel()` aborts its run.
#[pyclass(frozen, module = "codemode._native")]
struct Run(Mutex<Option<oneshot::Sender<()>>>);

#[pymethods]
impl Run {
    /// Aborts the run: its worker is killed, its tool calls still running are cancelled, nothing is parked, and the
    /// result delivered is `failed` with code `aborted`.
    fn cancel(&self) {
        let sender = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(sender) = sender {
            let _ = sender.send(());
        }
    }
}

/// Resolves when `rx` is sent to; never when its sender is only dropped (a Python handle garbage-collected).
async fn cancelled(rx: oneshot::Receiver<()>) {
    if rx.await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs `call` on the runtime and hands its result, as JSON text, to `done`.
fn spawn_call(done: Py<PyAny>, call: impl Future<Output = CodeModeResult> + Send + 'static) {
    runtime().spawn(async move {
        let result = call.await;
        let text = serde_json::to_string(&result).expect("results serialize to JSON");
        with_python(|py| {
            if let Err(e) = done.call1(py, (text,)) {
                e.write_unraisable(py, None);
            }
        });
    });
}

fn parse_json(what: &str, text: &str) -> PyResult<Value> {
    serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("{what} is not valid JSON: {e}")))
}

/// One engine: a catalog of Python tools and MCP servers' tools, a worker pool and a run store.
#[pyclass(frozen, module = "codemode._native")]
struct Engine {
    engine: CodeMode,
    upstream: Option<std::sync::Arc<UpstreamManager>>,
}

/// The MCP servers of `text`, the JSON of `{"<name>": {"command": ..., "args": [...]} | {"url": ...}}` as a desktop
/// client's `mcpServers` holds them, checked as the gateway checks its config.
fn mcp_servers(text: &str) -> PyResult<std::collections::BTreeMap<String, codemode_mcp::ServerConfig>> {
    let text = format!("{{\"mcpServers\": {text}}}");
    codemode_gateway::GatewayConfig::parse(Path::new("mcp_servers.json"), &text)
        .map(|config| config.servers)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

#[pymethods]
impl Engine {
    /// Builds the engine and starts its worker pool (the GIL is released meanwhile).
    #[new]
    #[pyo3(signature = (*, tools, host, worker=None, limits=None, policy=None, approver=None, state_dir=None,
        confinement=None, warm_workers=None, replay_on_resume=false, mcp_servers=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        tools: &str,
        host: Py<PyAny>,
        worker: Option<PathBuf>,
        limits: Option<&str>,
        policy: Option<&str>,
        approver: Option<Py<PyAny>>,
        state_dir: Option<PathBuf>,
        confinement: Option<&str>,
        warm_workers: Option<usize>,
        replay_on_resume: bool,
        mcp_servers: Option<&str>,
    ) -> PyResult<Self> {
        let mut tools: Vec<ToolDefinition> = serde_json::from_value(parse_json("tools", tools)?)
            .map_err(|e| PyValueError::new_err(format!("invalid tool definitions: {e}")))?;
        let own: std::sync::Arc<dyn ToolHost> = std::sync::Arc::new(PyHost { dispatch: host });
        let servers = mcp_servers.map(self::mcp_servers).transpose()?;
        // The servers start with the GIL released; one that cannot start is left out (and named on stderr).
        let upstream = match servers {
            None => None,
            Some(servers) => Some(std::sync::Arc::new(
                py.detach(|| {
                    runtime().block_on(UpstreamManager::start(&servers, Default::default(), Default::default()))
                })
                .map_err(|e| PyValueError::new_err(e.to_string()))?,
            )),
        };
        let host: std::sync::Arc<dyn ToolHost> = match &upstream {
            None => own,
            Some(upstream) => {
                tools.extend(upstream.tool_definitions());
                std::sync::Arc::new(WithServers::new(Some(own), upstream.clone()))
            }
        };
        let mut builder = CodeMode::builder().tools(tools).host(host).state_dir(state_dir);
        if let Some(limits) = limits {
            builder = builder.limits(Limits::from_json(&parse_json("limits", limits)?));
        }
        if let Some(policy) = policy {
            let policy: Policy = serde_json::from_value(parse_json("policy", policy)?)
                .map_err(|e| PyValueError::new_err(format!("invalid policy: {e}")))?;
            builder = builder.policy(policy);
        }
        if let Some(approver) = approver {
            builder = builder.approver(std::sync::Arc::new(PyApprover { dispatch: approver }));
        }
        if let Some(worker) = worker {
            builder = builder.worker(WorkerCommand { program: worker, args: Vec::new() });
        }
        if let Some(name) = confinement {
            let mode = Confinement::parse(name).ok_or_else(|| {
                PyValueError::new_err(format!("confinement is \"required\", \"best_effort\" or \"off\", not {name:?}"))
            })?;
            builder = builder.confinement(mode);
        }
        if let Some(n) = warm_workers {
            builder = builder.warm_workers(n);
        }
        builder = builder.replay_on_resume(replay_on_resume);
        let engine = py
            .detach(|| {
                let _entered = runtime().enter();
                builder.build()
            })
            .map_err(|e| EngineError::new_err(e.to_string()))?;
        Ok(Engine { engine, upstream })
    }

    /// Stops the MCP servers (the GIL is released meanwhile); their calls still running fail.
    fn close(&self, py: Python<'_>) {
        if let Some(upstream) = &self.upstream {
            py.detach(|| runtime().block_on(upstream.shutdown()));
        }
    }

    /// Starts an `exec` (`input` is exec's input object as JSON text); `done` gets the result as JSON text.
    #[pyo3(signature = (input, done, idempotency_key=None))]
    fn exec(&self, input: &str, done: Py<PyAny>, idempotency_key: Option<String>) -> PyResult<Run> {
        let input = parse_json("exec input", input)?;
        let (tx, rx) = oneshot::channel();
        let engine = self.engine.clone();
        let mut options = ExecOptions::default();
        options.run.idempotency_key = idempotency_key;
        spawn_call(
            done,
            async move { engine.exec_until_with(input, RunScope::default(), &options, cancelled(rx)).await },
        );
        Ok(Run(Mutex::new(Some(tx))))
    }

    /// Starts a `wait` (`input` is wait's input object as JSON text) with answers to pending approvals (JSON text
    /// of `{callId: decision}`); `done` gets the result as JSON text.
    #[pyo3(signature = (input, done, answers=None))]
    fn wait(&self, input: &str, done: Py<PyAny>, answers: Option<&str>) -> PyResult<Run> {
        let input = parse_json("wait input", input)?;
        let answers = match answers {
            None => Vec::new(),
            Some(text) => serde_json::from_value::<std::collections::BTreeMap<String, ApprovalDecision>>(parse_json(
                "answers", text,
            )?)
            .map_err(|e| PyValueError::new_err(format!("invalid answers: {e}")))?
            .into_iter()
            .collect(),
        };
        let (tx, rx) = oneshot::channel();
        let engine = self.engine.clone();
        let options = ExecOptions::default().answers(answers);
        spawn_call(
            done,
            async move { engine.wait_until_with(input, RunScope::default(), &options, cancelled(rx)).await },
        );
        Ok(Run(Mutex::new(Some(tx))))
    }

    /// Aborts a run and returns its final result as JSON text (the GIL is released meanwhile).
    fn abort(&self, py: Python<'_>, run_id: &str) -> String {
        let engine = self.engine.clone();
        let result = py.detach(|| runtime().block_on(engine.abort(run_id)));
        serde_json::to_string(&result).expect("results serialize to JSON")
    }

    /// The tools the model sees (`exec`, `wait`), as JSON text of `[{name, description, parameters}]`.
    fn surface(&self) -> String {
        serde_json::to_string(&self.engine.surface()).expect("tool specs serialize to JSON")
    }

    /// What the engine holds: `{parkedRuns, parkedWithWorker, idleWorkers}` as JSON text.
    fn stats(&self) -> String {
        let stats = self.engine.stats();
        json!({
            "parkedRuns": stats.parked_runs,
            "parkedWithWorker": stats.parked_with_worker,
            "idleWorkers": stats.idle_workers,
        })
        .to_string()
    }
}

/// The module `codemode._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(model_text, m)?)?;
    m.add("UNTRUSTED_WARNING", codemode::UNTRUSTED_WARNING)?;
    m.add_class::<Engine>()?;
    m.add_class::<Run>()?;
    m.add_class::<Completion>()?;
    m.add_class::<Decide>()?;
    m.add("EngineError", m.py().get_type::<EngineError>())?;
    Ok(())
}
