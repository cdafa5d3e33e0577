//! The pool's sizing: a checkout that finds no idle worker waits for a spawn and is counted; workers a load needed
//! beyond `warm` come back to the pool up to `max_idle`, and a shrink stops those the load left unused since the
//! last shrink, never going below `warm`.
//!
//! Deterministic: `warm` is 0 here, so no background refill runs, and the shrinks are explicit calls (`idle_ttl` is
//! an hour, so the pool's own timer never fires during a test).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use codemode_vm::pool::{PoolConfig, WorkerCommand, WorkerPool};

/// A pool without admission that keeps up to `max_idle` idle workers and refills none ahead of demand.
pub(crate) fn pool(max_idle: usize) -> Arc<WorkerPool> {
    WorkerPool::new(PoolConfig {
        command: WorkerCommand { program: PathBuf::from(env!("CARGO_BIN_EXE_codemode-worker")), args: Vec::new() },
        warm: 0,
        max_idle,
        idle_ttl: Duration::from_secs(3600),
        memory_limit_bytes: 64 * 1024 * 1024,
        instructions: 1_000_000,
        globals: None,
        confinement: Default::default(),
        require_fast_paths: false,
        admission: None,
    })
}

#[tokio::test]
async fn checkouts_without_an_idle_worker_are_counted_as_spawn_waits() {
    let pool = pool(4);
    let a = pool.checkout().expect("a worker starts");
    let b = pool.checkout().expect("a worker starts");
    assert_eq!(pool.stats().spawn_waits, 2);
    pool.checkin(a);
    pool.checkin(b);
    assert_eq!(pool.stats().idle, 2);
    // Two idle workers serve two more checkouts without a spawn.
    let a = pool.checkout().expect("an idle worker");
    let b = pool.checkout().expect("an idle worker");
    assert_eq!(pool.stats().spawn_waits, 2);
    let c = pool.checkout().expect("a worker starts");
    assert_eq!(pool.stats().spawn_waits, 3);
    for worker in [a, b, c] {
        pool.checkin(worker);
    }
    assert_eq!(pool.stats().idle, 3);
}

#[tokio::test]
async fn idle_workers_are_kept_up_to_max_idle_and_shrink_when_unused() {
    let pool = pool(2);
    let workers: Vec<_> = (0..3).map(|_| pool.checkout().expect("a worker starts")).collect();
    for worker in workers {
        pool.checkin(worker);
    }
    // The third came back to a pool holding `max_idle` and was stopped.
    assert_eq!(pool.idle_count(), 2);
    // Since the last shrink (none yet) the load took every idle worker: nothing is surplus.
    assert_eq!(pool.shrink_idle(), 0);
    assert_eq!(pool.idle_count(), 2);
    // One cell since: one worker was needed, the other sat unused and goes.
    let worker = pool.checkout().expect("an idle worker");
    pool.checkin(worker);
    assert_eq!(pool.shrink_idle(), 1);
    assert_eq!(pool.idle_count(), 1);
    // No cell since: the last one goes too (`warm` is 0).
    assert_eq!(pool.shrink_idle(), 1);
    assert_eq!(pool.idle_count(), 0);
    assert_eq!(pool.stats().spawn_waits, 3);
}
