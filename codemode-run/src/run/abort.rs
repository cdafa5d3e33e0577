//! Ending runs from outside: `abort` (including a `wait` driving the run), and the ends of a session or an agent
//! run, which abort their parked runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use codemode_bridge::{CodeModeResult, ErrorCode, FailurePhase};
use codemode_snapshot::{RunOwner, StoreError};
use codemode_telemetry::Telemetry;
use tokio::sync::oneshot;

use crate::scope::CatalogScope;
use crate::{Inner, RunScope};

use super::{owner_of, scope_of, store_failure, telemetry, unknown_effects, with_effects};

/// How a wait in progress is stopped: send it the channel its final telemetry comes back on.
pub(super) type StopWait = oneshot::Sender<oneshot::Sender<Telemetry>>;

/// The waits in progress, by run id, with the owner of each run, so that [`abort`] can stop the one resuming its
/// run.
#[derive(Default)]
pub struct Waits(Mutex<HashMap<String, (RunOwner, StopWait)>>);

impl Waits {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (RunOwner, StopWait)>> {
        // Every critical section is one map operation, so a poisoned lock is consistent.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn register<'a>(&'a self, run_id: &str, owner: &RunOwner, stop: StopWait) -> Registered<'a> {
        self.lock().insert(run_id.to_owned(), (owner.clone(), stop));
        Registered { waits: self, run_id: run_id.to_owned() }
    }

    /// Whether a wait of `owner` is resuming `run_id` in this process.
    pub(super) fn owned_by(&self, run_id: &str, owner: &RunOwner) -> bool {
        self.lock().get(run_id).is_some_and(|(o, _)| o == owner)
    }

    /// Asks the wait resuming `run_id` to stop; its final telemetry comes back on the receiver.
    fn stop(&self, run_id: &str) -> Option<oneshot::Receiver<Telemetry>> {
        let (_, stop) = self.lock().remove(run_id)?;
        let (reply, telemetry) = oneshot::channel();
        stop.send(reply).ok()?;
        Some(telemetry)
    }
}

/// A wait's entry in [`Waits`], removed when the wait ends or is dropped.
pub(super) struct Registered<'a> {
    waits: &'a Waits,
    run_id: String,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.waits.lock().remove(&self.run_id);
    }
}

/// `abort`: cancels pending host work and drops the run. A run being resumed by a `wait` is stopped there: the wait
/// ends `aborted` too, and both carry the run's final telemetry.
pub async fn abort(inner: Arc<Inner>, run_id: &str) -> CodeModeResult {
    let unowned = RunScope::default();
    let aborted = |scope: &CatalogScope| {
        CodeModeResult::failed(
            ErrorCode::Aborted,
            FailurePhase::Host,
            "code mode run aborted",
            telemetry(&inner, scope),
        )
    };
    match inner.runs.abort(run_id).await {
        Ok(codemode_snapshot::AbortOutcome::Unknown) => store_failure(&inner, &unowned, &StoreError::Unavailable),
        Ok(codemode_snapshot::AbortOutcome::Parked { live: Some(mut run) }) => {
            run.in_flight.abort_all();
            run.worker = None;
            with_effects(aborted(&run.scope), run.machine.effect_facts(Some(&inner.redactor), true))
        }
        Ok(codemode_snapshot::AbortOutcome::Resuming) => match inner.waits.stop(run_id) {
            Some(telemetry) => match telemetry.await {
                Ok(telemetry) => with_effects(
                    CodeModeResult::failed(ErrorCode::Aborted, FailurePhase::Host, "code mode run aborted", telemetry),
                    unknown_effects(),
                ),
                Err(_) => with_effects(aborted(&scope_of(&inner, &unowned)), unknown_effects()),
            },
            None => with_effects(aborted(&scope_of(&inner, &unowned)), unknown_effects()),
        },
        // Reports the totals of the unowned scope: the run was not live here.
        Ok(_) => with_effects(aborted(&scope_of(&inner, &unowned)), unknown_effects()),
        Err(e) => store_failure(&inner, &unowned, &e),
    }
}

/// Ends every run of session `session` (its owner scope's key): each is aborted as [`abort`] does (calls in flight
/// cancelled, its snapshot dropped, its worker released); returns how many were ended. For an owner that ends with
/// its session; runs of an owner that outlives it (a principal, a shared store) are not ended.
///
/// # Errors
///
/// The run store could not list the session's runs.
pub async fn end_session(inner: Arc<Inner>, session: &str) -> Result<usize, StoreError> {
    let runs = inner.runs.backend().list(Some(session)).await?;
    for run_id in &runs {
        abort(inner.clone(), run_id).await;
    }
    Ok(runs.len())
}

/// Ends every run the agent run of `scope` (its `agent_run_id`, in its session) owns, as [`abort`] ends one; returns
/// how many. A scope without an agent run owns none.
///
/// # Errors
///
/// When the store could not list the session's runs or read one.
pub async fn end_agent_run(inner: Arc<Inner>, scope: &RunScope) -> Result<usize, StoreError> {
    let Some(agent_run) = scope.agent_run_id.as_deref() else { return Ok(0) };
    let backend = inner.runs.backend();
    let mut ended = 0;
    for run_id in backend.list(Some(&owner_of(scope).scope_key())).await? {
        let owned = backend.get(&run_id).await?.is_some_and(|c| c.owner.agent_run_id.as_deref() == Some(agent_run));
        if owned {
            abort(inner.clone(), &run_id).await;
            ended += 1;
        }
    }
    Ok(ended)
}
