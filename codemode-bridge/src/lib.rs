//! The bridge between the guest program and the host: the result union a host receives, the requests a guest
//! makes and the settlements it gets back, the journal that makes replay possible, byte budgets with their
//! truncation markers, the `ToolHost` trait an embedder implements, and the untrusted-content wrapping of the text a
//! model reads.
//!
//! Everything here is plain data that crosses process boundaries as JSON; no engine type appears in this crate.

mod approval;
mod budget;
mod call;
mod code;
mod host;
mod request;
mod result;
mod untrusted;

pub use approval::{ApprovalDecision, ApprovalRequest, Approver};
pub use budget::{
    ByteCharge, OutputBudget, OverCap, SharedBytes, TRUNCATION_GUIDANCE, bound_value, encoded_head,
    inbox_overflow_message, json_len, truncate_error, truncate_value, truncation_marker, utf8_prefix,
};
pub use call::{
    ApiArgs, BridgeCall, CallValueArgs, DescribeArgs, LoadArgs, MalformedRequest, NamespaceArgs, NamespaceTarget,
    ResultLoadArgs, SearchArgs, SleepArgs, StoreArgs, YieldArgs,
};
pub use code::{BridgeErrorCode, EffectStatus};
pub use host::{
    AbortOnDrop, AbortSignal, CallContext, CallProgress, PauseGuard, PauseHook, PauseSink, ProgressHook, ProgressSink,
    ToolError, ToolHost,
};
pub use request::{BridgeMethod, BridgeRequest, Journal, RequestDigest, Round, Settlement, SettlementValue};
pub use result::{
    ATTACHMENT_TYPES, CallCounts, CodeModeResult, Completed, EffectFacts, ErrorCode, ErrorKind, Failed, FailurePhase,
    OutputItem, PendingApproval, PendingToolCall, WaitReason, Waiting, WriteEffect, attachment_problem,
};
pub use untrusted::{MAX_WRAPPED_CHARS, UNTRUSTED_WARNING, model_text_of, sanitize, wrap_untrusted};
