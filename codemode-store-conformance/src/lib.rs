//! The behaviour every [`FleetBackend`] shares, as one suite: the memory and directory backends' tests
//! (codemode-snapshot) and the PostgreSQL backend's (codemode-store-pg) each call [`run`] on a fresh backend.
//!
//! It checks what a run store may rely on whichever backend holds the runs: a park over a claim, one resumer at a
//! time, release, finish and abort, expiry at claim and at the sweep, the scope index, wake-ups, session values,
//! result references and idempotency keys. What differs by design stays in each backend's own tests: who holds a
//! claim (a shared backend names the replica and times its lease; a local one holds for the process) and how a
//! concurrent start migrates. Time is the `now_ms` each call is given, never the wall clock.

use std::sync::Arc;
use std::time::Duration;

use codemode_bridge::{Journal, OutputBudget, RequestDigest, Round, Settlement, SettlementValue, WaitReason};
use codemode_snapshot::{Accepted, Checkpoint, Claim, FleetBackend, RunChange, RunOwner, StoreError, new_run_id};
use serde_json::json;

/// An instant the suite's checkpoints expire after (epoch ms).
pub const T: u64 = 1_800_000_000_000;

/// A run owner in session `session`.
pub fn owner(session: &str) -> RunOwner {
    RunOwner { session_id: Some(session.to_owned()), agent_id: Some("main".into()), agent_run_id: None }
}

/// A checkpoint at generation 1 of `calls` calls each returning `{ok:true}`, expiring at `expires_at_ms`.
pub fn checkpoint(owner: RunOwner, calls: u32, expires_at_ms: u64) -> Checkpoint {
    let journal = Journal {
        seed: 7,
        start_clock_ms: 1_767_225_600_000,
        requests: (1..=calls).map(|i| RequestDigest(u64::from(i))).collect(),
        rounds: (1..=calls)
            .map(|i| Round {
                clock_ms: 1_767_225_600_000 + i64::from(i),
                settlements: vec![Settlement { id: i, value: SettlementValue::Ok { value: json!({"ok": true}) } }],
            })
            .collect(),
    };
    let mut cp = Checkpoint::new(
        new_run_id(),
        owner,
        "await tools.ping({})".into(),
        "digest".into(),
        journal,
        OutputBudget::new(65_536),
        WaitReason::PendingTools,
    );
    cp.expires_at_ms = expires_at_ms;
    cp.generation = 1;
    cp
}

/// Runs the whole suite on `backend`, which must be empty; panics naming the first behaviour that differs.
pub async fn run(backend: Arc<dyn FleetBackend>) {
    a_park_goes_over_its_claim_and_a_stale_one_is_refused(&*backend).await;
    one_resumer_at_a_time_until_release_or_finish(&*backend).await;
    an_expired_run_is_never_claimed_and_the_sweep_takes_it(&*backend).await;
    the_scope_index_lists_each_scope_s_runs(&*backend).await;
    parks_and_finishes_wake_subscribers(&*backend).await;
    session_values_keep_their_key_order_and_bounds(&*backend).await;
    result_references_evict_the_oldest_past_the_byte_bound(&*backend).await;
    an_idempotency_key_is_accepted_once_and_then_answers_with_its_run(&*backend).await;
}

async fn a_park_goes_over_its_claim_and_a_stale_one_is_refused(store: &dyn FleetBackend) {
    let mut cp = checkpoint(owner("s"), 2, T + 60_000);
    let id = cp.run_id.clone();
    store.put(&cp, 0, "a", "s").await.unwrap();
    assert_eq!(store.get(&id).await.unwrap().expect("a parked run reads back").journal, cp.journal);

    let Claim::Claimed(claimed) = store.claim(&id, "a", T).await.unwrap() else { panic!("a parked run is claimed") };
    assert_eq!((claimed.run_id.as_str(), claimed.generation), (id.as_str(), 1));
    cp.generation = 2;
    store.put(&cp, 1, "a", "s").await.expect("the holder parks over the generation it claimed");
    // The claim ended with the park: replaying it is stale.
    let err = store.put(&cp, 1, "a", "s").await.unwrap_err();
    assert!(matches!(err, StoreError::Stale { expected: 1, .. }), "a second park over one claim: {err}");
    assert_eq!(store.get(&id).await.unwrap().expect("still parked").generation, 2);
    assert!(store.delete(&id).await.unwrap(), "an abort deletes it");
    assert!(!store.delete(&id).await.unwrap(), "and finds nothing the second time");
    assert!(store.get(&id).await.unwrap().is_none());
}

async fn one_resumer_at_a_time_until_release_or_finish(store: &dyn FleetBackend) {
    let cp = checkpoint(owner("s"), 1, T + 600_000);
    let id = cp.run_id.clone();
    store.put(&cp, 0, "a", "s").await.unwrap();

    assert!(matches!(store.claim(&id, "a", T).await.unwrap(), Claim::Claimed(_)));
    assert!(matches!(store.claim(&id, "b", T + 1).await.unwrap(), Claim::Held { .. }), "one resumer at a time");
    assert!(store.renew(&id, "a", T + 2).await.unwrap(), "the holder renews");
    // A release gives the run back unchanged.
    store.release(&id, "a").await.unwrap();
    let Claim::Claimed(again) = store.claim(&id, "b", T + 3).await.unwrap() else { panic!("released, it is claimed") };
    assert_eq!(again.journal, cp.journal, "unchanged");
    assert!(store.finish(&id, "b").await.unwrap(), "the holder finishes it");
    assert!(store.get(&id).await.unwrap().is_none());
    assert!(matches!(store.claim(&id, "a", T + 4).await.unwrap(), Claim::Missing), "a finished run is gone");
    assert!(!store.finish(&id, "b").await.unwrap(), "and cannot be finished twice");
}

async fn an_expired_run_is_never_claimed_and_the_sweep_takes_it(store: &dyn FleetBackend) {
    let idle = checkpoint(owner("s"), 1, T + 10);
    let held = checkpoint(owner("s"), 1, T + 10);
    store.put(&idle, 0, "a", "s").await.unwrap();
    store.put(&held, 0, "a", "s").await.unwrap();
    assert!(matches!(store.claim(&held.run_id, "a", T).await.unwrap(), Claim::Claimed(_)));

    assert!(store.sweep(T + 9).await.unwrap().is_empty(), "nothing has expired yet");
    assert_eq!(store.sweep(T + 10).await.unwrap(), vec![idle.run_id.clone()], "the idle run expires");
    assert!(store.get(&idle.run_id).await.unwrap().is_none());
    assert!(store.finish(&held.run_id, "a").await.unwrap(), "the held run waited for its holder");

    let late = checkpoint(owner("s"), 1, T + 10);
    store.put(&late, 0, "a", "s").await.unwrap();
    assert!(matches!(store.claim(&late.run_id, "b", T + 10).await.unwrap(), Claim::Missing), "expired at claim");
    assert!(store.get(&late.run_id).await.unwrap().is_none(), "and the claim deleted it");
}

async fn the_scope_index_lists_each_scope_s_runs(store: &dyn FleetBackend) {
    let mine = checkpoint(owner("alice"), 1, T + 60_000);
    let theirs = checkpoint(owner("bob"), 1, T + 60_000);
    store.put(&mine, 0, "a", "principal:alice").await.unwrap();
    store.put(&theirs, 0, "a", "principal:bob").await.unwrap();
    assert_eq!(store.list(Some("principal:alice")).await.unwrap(), vec![mine.run_id.clone()]);
    assert_eq!(store.list(Some("principal:bob")).await.unwrap(), vec![theirs.run_id.clone()]);
    assert!(store.list(Some("principal:carol")).await.unwrap().is_empty());
    let mut all = store.list(None).await.unwrap();
    all.sort();
    let mut both = vec![mine.run_id.clone(), theirs.run_id.clone()];
    both.sort();
    assert_eq!(all, both);
    for id in both {
        assert!(store.delete(&id).await.unwrap());
    }
}

/// The next change about `run_id`, skipping others; a guard against a hang, not a timed assertion.
async fn next_of(changes: &mut tokio::sync::broadcast::Receiver<RunChange>, run_id: &str) -> RunChange {
    loop {
        let change = tokio::time::timeout(Duration::from_secs(60), changes.recv())
            .await
            .expect("a wake-up arrives")
            .expect("the channel is open");
        if change.run_id == run_id {
            return change;
        }
    }
}

async fn parks_and_finishes_wake_subscribers(store: &dyn FleetBackend) {
    let mut changes = store.subscribe();
    let cp = checkpoint(owner("s"), 1, T + 60_000);
    let id = cp.run_id.clone();
    store.put(&cp, 0, "a", "s").await.unwrap();
    assert_eq!(next_of(&mut changes, &id).await.generation, 1, "a park wakes with its generation");
    assert!(matches!(store.claim(&id, "a", T).await.unwrap(), Claim::Claimed(_)));
    assert!(store.finish(&id, "a").await.unwrap());
    assert_eq!(next_of(&mut changes, &id).await.generation, 0, "a finish wakes with generation 0");
}

async fn session_values_keep_their_key_order_and_bounds(store: &dyn FleetBackend) {
    let value = json!({"b": 1, "a": [2, {"z": null, "y": "é"}]});
    store.session_put("s", "k1", &value, 2).await.unwrap();
    store.session_put("s", "k2", &json!(2), 2).await.unwrap();
    let back = store.session_get("s", "k1").await.unwrap().unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), serde_json::to_string(&value).unwrap(), "keys in order");
    let err = store.session_put("s", "k3", &json!(3), 2).await.unwrap_err();
    assert!(matches!(err, StoreError::TooManyKeys { max: 2 }), "a third key past a bound of 2: {err}");
    store.session_put("s", "k1", &json!("new"), 2).await.expect("overwriting a key is within the bound");
    assert_eq!(store.session_keys("s").await.unwrap(), vec!["k1", "k2"]);
    assert_eq!(store.session_get("other", "k1").await.unwrap(), None, "sessions are apart");
    assert!(store.session_remove("s", "k1").await.unwrap());
    assert!(!store.session_remove("s", "k1").await.unwrap());
    store.session_clear("s").await.unwrap();
    assert!(store.session_keys("s").await.unwrap().is_empty());
}

async fn result_references_evict_the_oldest_past_the_byte_bound(store: &dyn FleetBackend) {
    let big = json!({"rows": "x".repeat(100)});
    let len = serde_json::to_string(&big).unwrap().len();
    for id in ["r1", "r2", "r3"] {
        store.result_put("s", id, &big, 2 * len).await.unwrap();
    }
    assert_eq!(store.result_get("s", "r1").await.unwrap(), None, "the oldest is evicted");
    assert_eq!(store.result_get("s", "r2").await.unwrap(), Some(big.clone()));
    assert_eq!(store.result_get("s", "r3").await.unwrap(), Some(big));
    assert_eq!(store.result_get("t", "r3").await.unwrap(), None, "per session");
}

async fn an_idempotency_key_is_accepted_once_and_then_answers_with_its_run(store: &dyn FleetBackend) {
    assert_eq!(store.idempotency_accept("s", "k", "cm_1", T + 1000).await.unwrap(), Accepted::New);
    assert_eq!(
        store.idempotency_accept("s", "k", "cm_2", T + 1000).await.unwrap(),
        Accepted::Existing { run_id: "cm_1".into(), result: None }
    );
    assert_eq!(store.idempotency_accept("other scope", "k", "cm_3", T + 1000).await.unwrap(), Accepted::New);
    store.idempotency_finish("s", "k", &json!({"status": "completed"})).await.unwrap();
    assert_eq!(
        store.idempotency_accept("s", "k", "cm_4", T + 1000).await.unwrap(),
        Accepted::Existing { run_id: "cm_1".into(), result: Some(json!({"status": "completed"})) }
    );
    // Past its TTL the key is swept and free again.
    store.sweep(T + 1000).await.unwrap();
    assert_eq!(store.idempotency_accept("s", "k", "cm_5", T + 2000).await.unwrap(), Accepted::New);
}
