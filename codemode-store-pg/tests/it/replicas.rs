//! Two run stores over one database stand for two gateway replicas: a run parked on one is resumed by the other
//! (by replay: no live attachment crosses), one resume at a time, a dead holder's run is taken over after its lease,
//! a stale park is refused, and a run past its TTL is gone for both.

use std::sync::Arc;

use codemode_config::Limits;
use codemode_snapshot::{ManualClock, RunStore, StoreError};
use codemode_store_pg::{PgOptions, PgStore};

use crate::{checkpoint, owner, store};

const T: u64 = 1_800_000_000_000;

/// A live attachment (a worker process in the gateway).
#[derive(Debug)]
struct Live;

struct Fleet {
    a: RunStore<Live>,
    b: RunStore<Live>,
    clock_a: Arc<ManualClock>,
    clock_b: Arc<ManualClock>,
    limits: Limits,
}

async fn fleet(options: PgOptions) -> Fleet {
    let (pg_a, url) = store(options.clone()).await;
    let pg_b = Arc::new(PgStore::connect(&url, options).await.unwrap());
    let (clock_a, clock_b) = (Arc::new(ManualClock::new(T)), Arc::new(ManualClock::new(T)));
    Fleet {
        a: RunStore::fleet(pg_a, clock_a.clone(), 64),
        b: RunStore::fleet(pg_b, clock_b.clone(), 64),
        clock_a,
        clock_b,
        limits: Limits::default(),
    }
}

#[tokio::test]
async fn a_run_parked_on_one_replica_is_resumed_on_the_other_by_replay() {
    let f = fleet(PgOptions::default()).await;
    let cp = checkpoint(owner("s"), 3, 0);
    let id = cp.run_id.clone();
    let receipt = f.a.park(f.a.reserve().unwrap(), cp, Some(Live), &f.limits).await.unwrap();
    assert_eq!(receipt.generation, 1);

    // Another session cannot resume it, and the refusal leaves it claimable.
    let err = f.b.begin_resume(&id, &owner("other")).await.err().unwrap();
    assert!(matches!(err, StoreError::DifferentSession), "{err}");

    let resumed = f.b.begin_resume(&id, &owner("s")).await.unwrap();
    assert!(resumed.restored && resumed.live.is_none(), "B has no worker of this run: it replays");
    assert_eq!(resumed.checkpoint.journal.rounds.len(), 3);
    let receipt = f.b.park(resumed.guard, resumed.checkpoint, None, &f.limits).await.unwrap();
    assert_eq!(receipt.generation, 2);

    // A still holds its worker of generation 1: it must not use it.
    let back = f.a.begin_resume(&id, &owner("s")).await.unwrap();
    assert!(back.restored && back.live.is_none(), "the live worker of an older generation is dropped");
    assert_eq!(back.checkpoint.generation, 2);
    // A finishes the run: it is gone for B.
    f.a.finish(back.guard).await;
    let err = f.b.begin_resume(&id, &owner("s")).await.err().unwrap();
    assert!(matches!(err, StoreError::Unavailable), "{err}");
}

#[tokio::test]
async fn the_replica_that_holds_the_live_worker_resumes_without_replay() {
    let f = fleet(PgOptions::default()).await;
    let cp = checkpoint(owner("s"), 1, 0);
    let id = cp.run_id.clone();
    f.a.park(f.a.reserve().unwrap(), cp, Some(Live), &f.limits).await.unwrap();
    let resumed = f.a.begin_resume(&id, &owner("s")).await.unwrap();
    assert!(!resumed.restored && resumed.live.is_some());
}

#[tokio::test]
async fn two_concurrent_resumes_on_two_replicas_exactly_one_wins() {
    let f = fleet(PgOptions::default()).await;
    let cp = checkpoint(owner("s"), 1, 0);
    let id = cp.run_id.clone();
    f.a.park(f.a.reserve().unwrap(), cp, Some(Live), &f.limits).await.unwrap();

    let caller = owner("s");
    let (on_a, on_b) = tokio::join!(f.a.begin_resume(&id, &caller), f.b.begin_resume(&id, &caller));
    let (winner, loser) = match (on_a, on_b) {
        (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
        (a, b) => panic!("exactly one resume must win: {:?} / {:?}", a.err(), b.err()),
    };
    assert!(matches!(loser, StoreError::AlreadyResuming), "{loser}");
    assert_eq!(loser.to_string(), "code mode run is already being resumed.");
    drop(winner);
}

#[tokio::test]
async fn a_dead_holder_s_run_is_taken_over_after_its_lease_and_its_late_park_is_refused() {
    let f = fleet(PgOptions { lease_ms: 5_000, ..PgOptions::default() }).await;
    let cp = checkpoint(owner("s"), 2, 0);
    let id = cp.run_id.clone();
    f.a.park(f.a.reserve().unwrap(), cp, Some(Live), &f.limits).await.unwrap();
    let on_a = f.a.begin_resume(&id, &owner("s")).await.unwrap();

    // A stops answering. Before its lease ends, B is told the run is being resumed.
    f.clock_b.advance(4_999);
    assert!(matches!(f.b.begin_resume(&id, &owner("s")).await, Err(StoreError::AlreadyResuming)));
    f.clock_b.advance(1);
    let on_b = f.b.begin_resume(&id, &owner("s")).await.unwrap();
    assert!(on_b.restored);

    // A wakes up and tries to park what it did: refused, B's claim is intact.
    let err = f.a.park(on_a.guard, on_a.checkpoint, on_a.live, &f.limits).await.unwrap_err();
    assert!(matches!(err, StoreError::Stale { .. }), "{err}");
    let receipt = f.b.park(on_b.guard, on_b.checkpoint, None, &f.limits).await.unwrap();
    assert_eq!(receipt.generation, 2);
}

#[tokio::test]
async fn a_run_past_its_ttl_is_gone_on_every_replica() {
    let f = fleet(PgOptions { ttl_ms: Some(1_000), ..PgOptions::default() }).await;
    let cp = checkpoint(owner("s"), 1, 0);
    let id = cp.run_id.clone();
    let receipt = f.a.park(f.a.reserve().unwrap(), cp, Some(Live), &f.limits).await.unwrap();
    assert_eq!(receipt.expires_at_ms, T + 1_000, "the store's TTL replaces snapshotTtlSeconds");

    f.clock_b.advance(1_000);
    assert_eq!(f.b.sweep(std::time::Duration::from_secs(30), |_| None::<()>).await, 0, "B held nothing itself");
    assert!(f.b.backend().get(&id).await.unwrap().is_none(), "B's sweep deleted A's expired run");
    f.clock_a.advance(1_000);
    assert!(matches!(f.a.begin_resume(&id, &owner("s")).await, Err(StoreError::Unavailable)));
}
