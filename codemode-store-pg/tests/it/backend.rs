//! The backend on its own, where a shared backend differs from a local one: claims by named replicas with timed
//! leases, the sweep of a run whose holder died, NOTIFY wake-ups across replicas and migrations under concurrent
//! start. What every backend shares is codemode-store-conformance's suite (`main.rs`). Time is the `now_ms` each
//! call is given, never the wall clock.

use std::time::Duration;

use codemode_pg_harness as harness;
use codemode_snapshot::{Claim, RunChange, StoreError};
use codemode_store_pg::{PgOptions, PgStore, SCHEMA_VERSION};

use crate::{checkpoint, owner, store};
use codemode_snapshot::FleetRuns;

const T: u64 = 1_800_000_000_000;
const LEASE: u64 = 10_000;

fn options() -> PgOptions {
    PgOptions { lease_ms: LEASE, ..PgOptions::default() }
}

#[tokio::test]
async fn a_stale_writer_cannot_overwrite_a_newer_park() {
    let (store, _) = store(options()).await;
    let mut cp = checkpoint(owner("s"), 2, T + 60_000);
    let id = cp.run_id.clone();
    store.put(&cp, 0, "a", "s").await.unwrap();
    // A second "new run" under the same id loses.
    let err = store.put(&cp, 0, "a", "s").await.unwrap_err();
    assert!(matches!(err, StoreError::Stale { stored: 1, expected: 0, .. }), "{err}");

    let Claim::Claimed(claimed) = store.claim(&id, "a", T).await.unwrap() else { panic!("a claims") };
    assert_eq!(claimed.generation, 1);
    cp.generation = 2;
    // Only the holder of the claim may park over generation 1.
    let err = store.put(&cp, 1, "b", "s").await.unwrap_err();
    assert!(matches!(err, StoreError::Stale { stored: 1, expected: 1, .. }), "{err}");
    store.put(&cp, 1, "a", "s").await.unwrap();
    // The claim ended with the park: the same writer, replaying its old claim, is stale now.
    let err = store.put(&cp, 1, "a", "s").await.unwrap_err();
    assert!(matches!(err, StoreError::Stale { stored: 2, expected: 1, .. }), "{err}");
    assert!(err.to_string().contains("Call wait again"), "{err}");
    assert_eq!(store.get(&id).await.unwrap().unwrap().generation, 2);
}

#[tokio::test]
async fn one_holder_at_a_time_until_release_finish_or_lease_expiry() {
    let (store, _) = store(options()).await;
    let cp = checkpoint(owner("s"), 1, T + 600_000);
    let id = cp.run_id.clone();
    store.put(&cp, 0, "a", "s").await.unwrap();

    assert!(matches!(store.claim(&id, "a", T).await.unwrap(), Claim::Claimed(_)));
    match store.claim(&id, "b", T + 1).await.unwrap() {
        Claim::Held { holder, until_ms } => {
            assert_eq!(holder, "a");
            assert_eq!(until_ms, T + LEASE);
        }
        other => panic!("expected the run held by a, got {other:?}"),
    }
    // a renews just before its lease ends, so b still waits after the first lease would have ended.
    assert!(store.renew(&id, "a", T + LEASE - 1).await.unwrap());
    assert!(!store.renew(&id, "b", T + LEASE - 1).await.unwrap(), "b holds nothing to renew");
    assert!(matches!(store.claim(&id, "b", T + LEASE).await.unwrap(), Claim::Held { .. }));
    // a stops renewing (it died): once its lease has run out, b claims the run.
    let Claim::Claimed(cp_b) = store.claim(&id, "b", T + 2 * LEASE - 1).await.unwrap() else {
        panic!("b claims once a's lease expired")
    };
    assert_eq!(cp_b.run_id, id);
    assert!(!store.renew(&id, "a", T + 2 * LEASE).await.unwrap(), "a's claim is gone");
    assert!(!store.finish(&id, "a",).await.unwrap(), "a cannot finish a run it no longer holds");

    // A release gives the run back unchanged.
    store.release(&id, "b").await.unwrap();
    assert!(matches!(store.claim(&id, "a", T + 2 * LEASE).await.unwrap(), Claim::Claimed(_)));
    assert!(store.finish(&id, "a").await.unwrap());
    assert!(store.get(&id).await.unwrap().is_none());
    assert!(matches!(store.claim(&id, "b", T + 2 * LEASE).await.unwrap(), Claim::Missing));
}

#[tokio::test]
async fn the_sweep_deletes_expired_runs_but_not_one_being_resumed() {
    let (store, _) = store(options()).await;
    let idle = checkpoint(owner("s"), 1, T + 10);
    let held = checkpoint(owner("s"), 1, T + 10);
    store.put(&idle, 0, "a", "s").await.unwrap();
    store.put(&held, 0, "a", "s").await.unwrap();
    assert!(matches!(store.claim(&held.run_id, "a", T).await.unwrap(), Claim::Claimed(_)));

    assert!(store.sweep(T + 9).await.unwrap().is_empty());
    assert_eq!(store.sweep(T + 10).await.unwrap(), vec![idle.run_id.clone()]);
    assert_eq!(store.list(None).await.unwrap(), vec![held.run_id.clone()], "the held run waits for its holder");
    // Its holder died: once the lease ran out too, the sweep takes it.
    assert_eq!(store.sweep(T + LEASE).await.unwrap(), vec![held.run_id.clone()]);

    // An expired run is never claimed, swept or not.
    let late = checkpoint(owner("s"), 1, T + 10);
    store.put(&late, 0, "a", "s").await.unwrap();
    assert!(matches!(store.claim(&late.run_id, "b", T + 10).await.unwrap(), Claim::Missing));
    assert!(store.get(&late.run_id).await.unwrap().is_none(), "and the claim deleted it");
}

/// The next change, or a panic naming what was awaited: a guard against a hang, not a timed assertion.
async fn next(changes: &mut tokio::sync::broadcast::Receiver<RunChange>) -> RunChange {
    tokio::time::timeout(Duration::from_secs(60), changes.recv())
        .await
        .expect("a NOTIFY arrives")
        .expect("the channel is open")
}

#[tokio::test]
async fn every_replica_is_woken_when_a_run_changes() {
    let (a, url) = store(options()).await;
    let b = PgStore::connect(&url, options()).await.unwrap();
    let mut on_b = b.subscribe();
    let mut cp = checkpoint(owner("s"), 1, T + 60_000);
    let id = cp.run_id.clone();

    a.put(&cp, 0, "a", "s").await.unwrap();
    assert_eq!(next(&mut on_b).await, RunChange { run_id: id.clone(), generation: 1 });
    // A claim changes no generation and wakes no one; the park after it does.
    assert!(matches!(a.claim(&id, "a", T).await.unwrap(), Claim::Claimed(_)));
    cp.generation = 2;
    a.put(&cp, 1, "a", "s").await.unwrap();
    assert_eq!(next(&mut on_b).await, RunChange { run_id: id.clone(), generation: 2 });
    a.delete(&id).await.unwrap();
    assert_eq!(next(&mut on_b).await, RunChange { run_id: id, generation: 0 });
}

#[tokio::test]
async fn replicas_starting_together_migrate_once() {
    let url = harness::fresh_database().await.unwrap();
    let starts: Vec<_> = (0..6).map(|_| PgStore::connect(&url, options())).collect();
    let stores = futures_join_all(starts).await;
    assert!(
        stores.iter().all(Result::is_ok),
        "{:?}",
        stores.iter().filter_map(|s| s.as_ref().err()).collect::<Vec<_>>()
    );
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let rows = client.query("SELECT version FROM codemode_schema", &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i32>(0), SCHEMA_VERSION);

    // A schema newer than this build is refused, not misread.
    client.execute("INSERT INTO codemode_schema (version) VALUES (99)", &[]).await.unwrap();
    let err = PgStore::connect(&url, options()).await.unwrap_err();
    assert!(err.to_string().contains("schema is version 99, newer than this build's"), "{err}");
}

/// Runs the futures concurrently on this task and returns their outputs in order.
async fn futures_join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in set.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *out = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("every future finished")).collect()
}
