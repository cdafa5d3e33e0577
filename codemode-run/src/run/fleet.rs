//! The fleet's background tasks: the sweeper, which expires parked runs and lets their workers go, and the
//! listener, which drops the live copy of a run another replica changed.

use std::sync::Arc;
use std::time::Duration;

use crate::Inner;

use super::LiveRun;

/// Starts the run store's housekeeping: every so often, runs past their TTL are dropped and runs parked longer
/// than `live_window` give their worker back (they resume by replay). It stops when the engine is dropped.
pub fn start_sweeper(inner: &Arc<Inner>, live_window: Duration) {
    let every = (live_window / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let inner = Arc::downgrade(inner);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(inner) = inner.upgrade() else { return };
            inner
                .runs
                .sweep(live_window, |run: &mut LiveRun| {
                    run.machine.detach_cell();
                    run.live_place = None;
                    run.worker.take()
                })
                .await;
        }
    });
}

/// Listens for runs changed by another process sharing the store (a wake-up): a run this process holds parked at
/// an older generation, or one that is gone, drops its live worker at once instead of at its next `wait` or TTL.
/// It stops when the engine is dropped.
pub fn start_listener(inner: &Arc<Inner>) {
    let mut changes = inner.runs.backend().subscribe();
    let inner = Arc::downgrade(inner);
    tokio::spawn(async move {
        loop {
            let change = match changes.recv().await {
                Ok(change) => change,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let Some(inner) = inner.upgrade() else { return };
            if let Some(mut run) = inner.runs.changed_elsewhere(&change.run_id, change.generation) {
                run.in_flight.abort_all();
                if run.worker.take().is_some() {
                    inner.pool.replenish();
                }
            }
        }
    });
}
