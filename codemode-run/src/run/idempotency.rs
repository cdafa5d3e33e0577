//! Idempotency keys: an `exec` retried with the key of one the store accepted before answers with that run, never
//! a second run.

use codemode_bridge::{CodeModeResult, ErrorCode, FailurePhase, PendingToolCall, Waiting};
use codemode_snapshot::{Accepted, RunOwner};
use serde_json::Value;

use crate::{Inner, RunScope};

use super::{owner_of, scope_of, store_failure, telemetry, unknown_effects, untrusted_warnings, with_effects};

/// Accepts `key` for the new run `run_id` of `scope`'s caller, for the snapshot TTL. `Err` holds the answer instead of
/// a new run: the run the key was accepted for before, or the store's failure.
pub(super) async fn accept(inner: &Inner, scope: &RunScope, key: &str, run_id: &str) -> Result<(), CodeModeResult> {
    let scope_key = owner_of(scope).scope_key();
    let ttl_ms = inner.limits.snapshot_ttl_seconds.saturating_mul(1000);
    let expires_at_ms = inner.clock.now_ms().saturating_add(ttl_ms);
    match inner.runs.backend().idempotency_accept(&scope_key, key, run_id, expires_at_ms).await {
        Ok(Accepted::New) => Ok(()),
        Ok(Accepted::Existing { run_id, result }) => Err(already_accepted(inner, scope, &run_id, result).await),
        Err(e) => Err(store_failure(inner, scope, &e)),
    }
}

/// Records `result` as the final answer under `key`, the idempotency key of the `exec` that started `owner`'s run.
/// A result that could not be recorded is still returned; a retry with the key then reports the run gone.
pub(super) async fn record(inner: &Inner, owner: &RunOwner, key: &str, result: &CodeModeResult) {
    let value = serde_json::to_value(result).expect("results always serialize");
    let _ = inner.runs.backend().idempotency_finish(&owner.scope_key(), key, &value).await;
}

/// The answer to an `exec` whose idempotency key the store accepted before: the run's final result if it ended,
/// else its current state (waiting, with the pending calls it parked with), else a failure naming the run.
async fn already_accepted(inner: &Inner, scope: &RunScope, run_id: &str, result: Option<Value>) -> CodeModeResult {
    if let Some(result) = result.and_then(|r| serde_json::from_value::<CodeModeResult>(r).ok()) {
        return result;
    }
    let parked = match inner.runs.backend().get(run_id).await {
        Ok(parked) => parked,
        Err(e) => return store_failure(inner, scope, &e),
    };
    let telemetry = telemetry(inner, &scope_of(inner, scope));
    match parked {
        Some(checkpoint) if checkpoint.owner == owner_of(scope) => CodeModeResult::Waiting(Waiting {
            run_id: run_id.to_owned(),
            reason: checkpoint.reason,
            pending_tool_calls: checkpoint
                .pending
                .iter()
                .map(|p| PendingToolCall {
                    id: codemode_telemetry::otel::tool_call_id(&p.method, p.id),
                    method: p.method.clone(),
                })
                .collect(),
            pending_approvals: checkpoint.asked.iter().map(|a| a.approval.clone()).collect(),
            replay_safe: false,
            warnings: untrusted_warnings(checkpoint.untrusted),
            output: Vec::new(),
            telemetry,
            activity: None,
        }),
        _ => with_effects(
            CodeModeResult::failed(
                ErrorCode::InvalidInput,
                FailurePhase::Input,
                format!(
                    "an exec with this idempotency key was already accepted as run {run_id}, which is running now \
                     or has ended without a recorded result; call wait with runId {run_id} instead of repeating \
                     the exec"
                ),
                telemetry,
            ),
            unknown_effects(),
        ),
    }
}
