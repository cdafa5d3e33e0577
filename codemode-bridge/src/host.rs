//! The `ToolHost` trait an embedder implements to run the tools a guest calls, and the [`CallContext`] each call
//! comes with: who runs it, its ids, an abort signal, a progress sink and a pause sink (for the time a call waits
//! for a person), so a host can run a nested call as it runs a normal one.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// Facts about one nested call, passed to the host with it.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct CallContext {
    /// The code mode run the call belongs to.
    pub run_id: String,
    /// The session that owns the run, if the embedder set one.
    pub session_id: Option<String>,
    /// The agent that owns the run, if the embedder set one.
    pub agent_id: Option<String>,
    /// The agent run (turn) that owns the run, if the embedder set one.
    pub agent_run_id: Option<String>,
    /// The call's id within the run, the bridge request id `bridge:<method>:<n>`.
    pub request_id: String,
    /// The MCP server, for MCP calls.
    pub server: Option<String>,
    /// Fires when the call is cancelled: the guest no longer waits for it, or the run ended, timed out or was
    /// aborted. The call's future is dropped then too; the signal is for work the host runs elsewhere.
    pub abort: AbortSignal,
    /// Where the host reports the call's progress.
    pub progress: ProgressSink,
    /// Where the host says the call waits for a person (an upstream server's `elicitation/create` relayed to the
    /// user): while a [`PauseGuard`] from it is held, the run's deadline stands still, as during an approval.
    pub pause: PauseSink,
    /// The nested call's span: the parent of the spans the host starts for the call (an upstream server's CLIENT
    /// span); disabled when spans are not recorded.
    pub span: codemode_telemetry::span::Span,
}

impl CallContext {
    /// A context for `run_id` and `request_id`, with no owner, server, abort or progress hook: for hosts' tests.
    pub fn new(run_id: impl Into<String>, request_id: impl Into<String>) -> Self {
        CallContext { run_id: run_id.into(), request_id: request_id.into(), ..CallContext::default() }
    }

    /// The same context for an MCP call to `server`.
    #[must_use]
    pub fn with_server(mut self, server: impl Into<String>) -> Self {
        self.server = Some(server.into());
        self
    }
}

/// A nested call's cancellation, observable by the host.
#[derive(Clone, Debug, Default)]
pub struct AbortSignal(CancellationToken);

impl AbortSignal {
    /// A signal that has not fired, with the handle that fires it.
    pub fn new() -> (AbortSignal, AbortOnDrop) {
        let token = CancellationToken::new();
        (AbortSignal(token.clone()), AbortOnDrop(token.drop_guard()))
    }

    /// Whether the call was cancelled.
    pub fn is_aborted(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Resolves when the call is cancelled.
    pub async fn aborted(&self) {
        self.0.cancelled().await;
    }
}

/// Fires its [`AbortSignal`] when dropped, unless [`AbortOnDrop::disarm`]ed first.
#[derive(Debug)]
pub struct AbortOnDrop(tokio_util::sync::DropGuard);

impl AbortOnDrop {
    /// Drops the handle without firing the signal: the call finished.
    pub fn disarm(self) {
        let _ = self.0.disarm();
    }
}

/// One progress report of a nested call, as MCP's `notifications/progress` carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallProgress {
    /// The run the call belongs to.
    pub run_id: String,
    /// The call, `bridge:<method>:<n>`.
    pub request_id: String,
    /// Progress so far; increases with each report.
    pub progress: f64,
    /// The total, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// A human-readable note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A hook that receives [`CallProgress`] reports.
pub type ProgressHook = Arc<dyn Fn(CallProgress) + Send + Sync>;

/// Where a host reports a nested call's progress; the embedder's hook receives it, or nothing does.
#[derive(Clone, Default)]
pub struct ProgressSink {
    hook: Option<ProgressHook>,
    run_id: String,
    request_id: String,
}

impl ProgressSink {
    /// A sink that hands every report about call `request_id` of `run_id` to `hook`.
    pub fn new(hook: Option<ProgressHook>, run_id: &str, request_id: &str) -> Self {
        ProgressSink { hook, run_id: run_id.to_owned(), request_id: request_id.to_owned() }
    }

    /// Whether anyone receives the reports (a host may skip computing them otherwise).
    pub fn is_observed(&self) -> bool {
        self.hook.is_some()
    }

    /// Reports progress: `progress` so far, out of `total` when known, with an optional note.
    pub fn report(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if let Some(hook) = &self.hook {
            hook(CallProgress {
                run_id: self.run_id.clone(),
                request_id: self.request_id.clone(),
                progress,
                total,
                message,
            });
        }
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressSink").field("observed", &self.hook.is_some()).finish_non_exhaustive()
    }
}

/// A hook told when a nested call starts (`true`) and stops (`false`) waiting for a person.
pub type PauseHook = Arc<dyn Fn(bool) + Send + Sync>;

/// Where a host says a nested call waits for a person; without a hook (hosts' tests), holding it does nothing.
#[derive(Clone, Default)]
pub struct PauseSink {
    hook: Option<PauseHook>,
}

impl PauseSink {
    /// A sink whose holds go to `hook`: `true` when one begins, `false` when it ends.
    pub fn new(hook: PauseHook) -> Self {
        PauseSink { hook: Some(hook) }
    }

    /// Pauses the run's deadline until the returned guard is dropped.
    #[must_use = "the pause ends when the guard is dropped"]
    pub fn hold(&self) -> PauseGuard {
        if let Some(hook) = &self.hook {
            hook(true);
        }
        PauseGuard { hook: self.hook.clone() }
    }
}

impl std::fmt::Debug for PauseSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PauseSink").field("observed", &self.hook.is_some()).finish()
    }
}

/// Ends a pause of [`PauseSink::hold`] when dropped.
pub struct PauseGuard {
    hook: Option<PauseHook>,
}

impl Drop for PauseGuard {
    fn drop(&mut self) {
        if let Some(hook) = &self.hook {
            hook(false);
        }
    }
}

impl std::fmt::Debug for PauseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PauseGuard")
    }
}

/// A tool failure, as the guest will see it: a catchable `Error` with `.code` and `.message`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// `tool_error`, `input_contract`, `output_contract`, `invalid_contract` or `invalid_input`.
    pub code: String,
    /// What went wrong, for the model.
    pub message: String,
}

impl ToolError {
    /// A plain tool failure (`tool_error`).
    pub fn new(message: impl Into<String>) -> Self {
        ToolError { code: "tool_error".into(), message: message.into() }
    }

    /// A failure with a specific code.
    pub fn with_code(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError { code: code.into(), message: message.into() }
    }
}

/// Runs the tools a guest program calls. Implemented by the embedder.
///
/// Calls may arrive concurrently (a program's `Promise.all`); an implementation must not assume one at a time.
#[async_trait]
pub trait ToolHost: Send + Sync + 'static {
    /// Runs `tool` (the tool's own name, not its callable name) with JSON `args`.
    ///
    /// # Errors
    ///
    /// A `ToolError` becomes a catchable `Error` in the guest with the error's code and message.
    async fn call_tool(
        &self,
        tool: &str,
        args: serde_json::Value,
        cx: CallContext,
    ) -> Result<serde_json::Value, ToolError>;

    /// Runs a namespace operation of an MCP server that is not a tool call: `resources.list`, `resources.read`,
    /// `prompts.list` or `prompts.get`, with the MCP request's params as `args`.
    ///
    /// # Errors
    ///
    /// The default implementation supports nothing; a `ToolError` becomes a catchable `Error` in the guest.
    async fn namespace(
        &self,
        server: &str,
        op: &str,
        args: serde_json::Value,
        cx: CallContext,
    ) -> Result<serde_json::Value, ToolError> {
        let _ = (args, cx);
        Err(ToolError::with_code("invalid_input", format!("MCP server \"{server}\" does not support {op}")))
    }
}
