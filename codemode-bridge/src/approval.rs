//! Approvals: what the host asks a person before a nested call whose policy is `ask` runs, and the answers.
//!
//! Not the policy itself (that is `codemode_config::Policy`) nor where the answer comes from (an embedder's
//! `Approver`, the gateway's elicitation). Invariant: a request never carries raw arguments, only a redacted,
//! size-capped preview, so nothing an approver shows a person leaks a secret the program handled.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::CallContext;

/// One nested call waiting for a person's decision.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The tool's own name (for MCP tools, the upstream tool name).
    pub tool: String,
    /// The callable path the program used, e.g. `MCP.fs.write_file` or `send_email`.
    pub path: String,
    /// The arguments as JSON text, redacted and capped in size (a cut preview ends with `…`).
    pub preview: String,
    /// The program's `title`, if its `exec` gave one.
    pub title: Option<String>,
    /// The call's owner and ids: `run_id`, `request_id` (the call id), session and agent, server, and the abort
    /// signal, which fires when the call is no longer wanted (the approver may stop asking then).
    pub context: CallContext,
}

impl ApprovalRequest {
    /// A request for `tool` at `path`, with its argument `preview` and the call's `context`.
    pub fn new(
        tool: impl Into<String>,
        path: impl Into<String>,
        preview: impl Into<String>,
        context: CallContext,
    ) -> Self {
        ApprovalRequest { tool: tool.into(), path: path.into(), preview: preview.into(), title: None, context }
    }

    /// The same request with the program's title.
    #[must_use]
    pub fn with_title(mut self, title: Option<String>) -> Self {
        self.title = title;
        self
    }
}

/// A person's answer to an [`ApprovalRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// This call runs.
    Approve,
    /// This call runs, and so does every later call of the same tool in the same run, without asking.
    ApproveForRun,
    /// This call is refused: the guest gets a catchable error and its effect status is `not_started`.
    Deny,
    /// Nobody can answer within this request: the run parks with the approval pending, its clock stopped, and a
    /// later `wait` that carries the answer resumes it (the sessionless MCP revision's input-required round trip).
    Defer,
}

/// Decides the calls whose policy is `ask`. Implemented by the embedder (or the gateway, which asks its client).
///
/// While `decide` is pending the run's deadline and execution allowance are paused; sibling calls keep running.
/// Decisions are journaled, so a resumed or replayed run never asks twice.
#[async_trait]
pub trait Approver: Send + Sync + 'static {
    /// The decision for one call.
    async fn decide(&self, request: ApprovalRequest) -> ApprovalDecision;
}
