//! The `ToolHost` trait an embedder implements to run the tools a guest calls.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Facts about one nested call, passed to the host with it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallContext {
    /// The code mode run the call belongs to.
    pub run_id: String,
    /// The session that owns the run, if the embedder set one.
    pub session_id: Option<String>,
    /// The bridge request id, `bridge:<method>:<n>`.
    pub request_id: String,
    /// The MCP server, for MCP calls.
    pub server: Option<String>,
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
