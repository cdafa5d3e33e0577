//! The run store in one process: the cap, TTL expiry, scoping messages, one resume in flight, abort and eviction.

use std::sync::{Arc, Barrier};

use codemode_bridge::ErrorCode;
use codemode_snapshot::{AbortOutcome, CheckpointBackend, StoreError};

use crate::{Live, T0, checkpoint, fixture, owner, ready};

#[test]
fn cap_of_64_counts_reservations_and_parked_runs() {
    let f = fixture();
    let live = Arc::new(());
    let mut reservations = Vec::new();
    for i in 0..64 {
        if i % 2 == 0 {
            f.park(owner("s", "r"), &live);
        } else {
            reservations.push(f.store.reserve().unwrap());
        }
    }
    assert_eq!(f.store.occupied(), 64);
    assert_eq!(f.store.len(), 32);
    let err = f.store.reserve().err().unwrap();
    assert_eq!(err.to_string(), "too many suspended code mode runs.");
    assert_eq!(err.code(), ErrorCode::InvalidInput);

    // Dropping a reservation frees its place.
    reservations.pop();
    assert_eq!(f.store.occupied(), 63);
    assert!(f.store.reserve().is_ok());
}

#[test]
fn an_owner_share_leaves_places_for_other_owners_and_counts_each_owners_own() {
    let f = fixture();
    f.store.set_owner_share(Some(3));
    let live = Arc::new(());
    // Alice holds her share: two parked runs and a reservation.
    let parked = [f.park(owner("alice", "r"), &live), f.park(owner("alice", "r"), &live)];
    let reserved = f.store.reserve_for(&owner("alice", "r")).expect("a third place");
    let err = f.store.reserve_for(&owner("alice", "other-turn")).err().expect("over her share");
    assert_eq!(
        err.to_string(),
        "too many suspended code mode runs for this principal: it holds 3, its share (max_suspended_runs) of the 64 \
         places; finish its waiting runs with wait (or let them expire) before starting another that suspends"
    );
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    // Bob still gets places, and nothing of alice's was touched.
    f.park(owner("bob", "r"), &live);
    assert!(f.store.reserve_for(&owner("bob", "r")).is_ok());
    assert_eq!((f.store.len(), f.store.occupied()), (3, 4));

    // A run being resumed still counts as hers; a finished one gives her place back.
    let resumed = ready(f.store.begin_resume(&parked[0], &owner("alice", "r"))).expect("resumes");
    assert!(matches!(f.store.reserve_for(&owner("alice", "r")), Err(StoreError::TooManyRunsForOwner { .. })));
    drop(resumed);
    let again = f.store.reserve_for(&owner("alice", "r")).expect("the finished run's place came back");
    assert!(matches!(f.store.reserve_for(&owner("alice", "r")), Err(StoreError::TooManyRunsForOwner { .. })));
    drop((reserved, again));

    // Without a share, one owner may take every place, as the reference's single cap has it.
    f.store.set_owner_share(None);
    let all: Vec<_> = (0..62).map(|_| f.store.reserve_for(&owner("alice", "r")).expect("under the cap")).collect();
    assert_eq!(f.store.occupied(), 64);
    assert!(matches!(f.store.reserve_for(&owner("bob", "r")), Err(StoreError::TooManyRuns)));
    drop(all);
}

#[test]
fn a_run_being_resumed_keeps_its_place_under_the_cap() {
    let f = fixture();
    let live = Arc::new(());
    let ids: Vec<String> = (0..64).map(|_| f.park(owner("s", "r"), &live)).collect();
    let resumed = ready(f.store.begin_resume(&ids[0], &owner("s", "r"))).unwrap();
    assert_eq!(f.store.len(), 63);
    assert_eq!(f.store.occupied(), 64);
    assert!(matches!(f.store.reserve(), Err(StoreError::TooManyRuns)));
    drop(resumed);
    assert_eq!(f.store.occupied(), 63);
}

#[test]
fn ttl_expiry_drops_runs_and_their_live_attachments() {
    let f = fixture();
    let live = Arc::new(());
    let id = f.park(owner("s", "r"), &live);
    assert_eq!(Arc::strong_count(&live), 2);

    // One millisecond before the TTL the run is still there.
    f.clock.advance(f.limits.snapshot_ttl_seconds * 1000 - 1);
    assert!(ready(f.store.expire()).is_empty());
    assert!(f.store.contains(&id));

    f.clock.advance(1);
    let expired = ready(f.store.expire());
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].run_id, id);
    drop(expired);
    assert_eq!(Arc::strong_count(&live), 1, "the live attachment was handed back and dropped");
    assert!(f.store.is_empty());
    assert!(f.backend.list().unwrap().is_empty(), "the durable copy is deleted too");
    let err = ready(f.store.begin_resume(&id, &owner("s", "r"))).err().unwrap();
    assert_eq!(err.to_string(), "code mode run is unavailable or expired.");
}

#[test]
fn expired_runs_are_dropped_lazily_by_begin_resume() {
    let f = fixture();
    let live = Arc::new(());
    let id = f.park(owner("s", "r"), &live);
    f.clock.advance(f.limits.snapshot_ttl_seconds * 1000);
    assert!(matches!(ready(f.store.begin_resume(&id, &owner("s", "r"))), Err(StoreError::Unavailable)));
    assert_eq!(Arc::strong_count(&live), 1);
    assert_eq!(f.store.occupied(), 0);
}

#[test]
fn sweep_expires_runs_and_trims_live_attachments_parked_too_long() {
    let f = fixture();
    let (old, young) = (Arc::new(()), Arc::new(()));
    let old_id = f.park(owner("s", "old"), &old);
    f.clock.advance(20_000);
    let young_id = f.park(owner("s", "young"), &young);
    f.clock.advance(15_000);

    // Parked 35 s and 15 s ago: only the first has outlived a 30 s window; `trim` takes its attachment.
    let expired = ready(f.store.sweep(std::time::Duration::from_secs(30), |live: &mut Live| Some(live.0.clone())));
    assert_eq!(expired, 0);
    assert_eq!(Arc::strong_count(&old), 2, "trim ran on the old run and what it returned was dropped");
    assert_eq!(Arc::strong_count(&young), 2);
    let mut trimmed = 0;
    ready(f.store.sweep(std::time::Duration::from_secs(30), |_: &mut Live| -> Option<()> {
        trimmed += 1;
        None
    }));
    assert_eq!(trimmed, 1, "only runs past the window are offered to trim");

    // Past the TTL both are gone, attachments and durable copies.
    f.clock.advance(f.limits.snapshot_ttl_seconds * 1000);
    assert_eq!(ready(f.store.sweep(std::time::Duration::from_secs(30), |_: &mut Live| -> Option<()> { None })), 2);
    assert_eq!((Arc::strong_count(&old), Arc::strong_count(&young)), (1, 1));
    assert_eq!(f.store.occupied(), 0);
    for id in [old_id, young_id] {
        assert!(f.backend.get(&id).expect("the backend answers").is_none());
    }
}

#[test]
fn scoping_messages_match_the_reference_and_leave_the_run_in_place() {
    let f = fixture();
    let live = Arc::new(());
    let id = f.park(owner("s1", "r1"), &live);

    let cases = [
        (owner("s1", "r2"), "code mode run belongs to a different agent run."),
        (owner("s2", "r1"), "code mode run belongs to a different session."),
        (
            codemode_snapshot::RunOwner { agent_id: Some("other".into()), ..owner("s1", "r1") },
            "code mode run belongs to a different session.",
        ),
    ];
    for (caller, message) in cases {
        let err = ready(f.store.begin_resume(&id, &caller)).err().unwrap();
        assert_eq!(err.to_string(), message);
        assert_eq!(err.code(), ErrorCode::InvalidInput);
        assert!(f.store.contains(&id), "a refused wait does not consume the run");
    }

    for unknown in ["cm_00000000-0000-4000-8000-000000000000", "../../etc/passwd", "", "cm_"] {
        let err = ready(f.store.begin_resume(unknown, &owner("s1", "r1"))).err().unwrap();
        assert_eq!(err.to_string(), "code mode run is unavailable or expired.");
    }

    let resumed = ready(f.store.begin_resume(&id, &owner("s1", "r1"))).unwrap();
    assert!(resumed.live.is_some());
    assert!(!resumed.restored);
    assert_eq!(resumed.guard.run_id(), Some(id.as_str()));
}

#[test]
fn a_resumed_run_is_consumed_once_finished() {
    let f = fixture();
    let live = Arc::new(());
    let id = f.park(owner("s", "r"), &live);
    let resumed = ready(f.store.begin_resume(&id, &owner("s", "r"))).unwrap();
    drop(resumed); // the run completed
    assert_eq!(Arc::strong_count(&live), 1);
    let err = ready(f.store.begin_resume(&id, &owner("s", "r"))).err().unwrap();
    assert_eq!(err.to_string(), "code mode run is unavailable or expired.");
    assert_eq!(f.store.occupied(), 0);
}

#[test]
fn a_resumed_run_parks_again_under_the_same_id_with_a_new_generation() {
    let f = fixture();
    let live = Arc::new(());
    let id = f.park(owner("s", "r"), &live);
    let resumed = ready(f.store.begin_resume(&id, &owner("s", "r"))).unwrap();
    assert_eq!(resumed.checkpoint.generation, 1);
    f.clock.advance(5_000);
    let receipt = ready(f.store.park(resumed.guard, resumed.checkpoint, resumed.live, &f.limits)).unwrap();
    assert_eq!(receipt.generation, 2);
    assert_eq!(receipt.expires_at_ms, T0 + 5_000 + f.limits.snapshot_ttl_seconds * 1000);
    assert_eq!(f.store.occupied(), 1);
    let again = ready(f.store.begin_resume(&id, &owner("s", "r"))).unwrap();
    assert_eq!(again.checkpoint.created_at_ms, T0, "creation time survives a re-park");
}

#[test]
fn concurrent_resume_is_refused() {
    let f = fixture();
    let live = Arc::new(());
    let id = f.park(owner("s", "r"), &live);
    let first = ready(f.store.begin_resume(&id, &owner("s", "r"))).unwrap();
    let err = ready(f.store.begin_resume(&id, &owner("s", "r"))).err().unwrap();
    assert_eq!(err.to_string(), "code mode run is already being resumed.");
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    drop(first);

    // Racing threads: exactly one wins.
    let id = f.park(owner("s", "r"), &live);
    let barrier = Arc::new(Barrier::new(8));
    let outcomes: Vec<Result<bool, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (store, barrier, id) = (f.store.clone(), barrier.clone(), id.clone());
                scope.spawn(move || {
                    barrier.wait();
                    // Keep the winner's slot alive until every thread has tried.
                    let result = ready(store.begin_resume(&id, &owner("s", "r")));
                    barrier.wait();
                    result.map(|r| r.live.is_some()).map_err(|e| e.to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
    for o in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert_eq!(o, "code mode run is already being resumed.");
    }
}

#[test]
fn abort_drops_parked_runs_and_poisons_resuming_ones() {
    let f = fixture();
    let live = Arc::new(());
    let id = f.park(owner("s", "r"), &live);
    match ready(f.store.abort(&id)).unwrap() {
        AbortOutcome::Parked { live: Some(_) } => {}
        _ => panic!("expected the parked run with its live attachment"),
    }
    assert_eq!(Arc::strong_count(&live), 1);
    assert!(matches!(ready(f.store.begin_resume(&id, &owner("s", "r"))), Err(StoreError::Unavailable)));
    assert!(matches!(ready(f.store.abort(&id)).unwrap(), AbortOutcome::Unknown));

    let id = f.park(owner("s", "r"), &live);
    let resumed = ready(f.store.begin_resume(&id, &owner("s", "r"))).unwrap();
    assert!(matches!(ready(f.store.abort(&id)).unwrap(), AbortOutcome::Resuming));
    let err = ready(f.store.park(resumed.guard, resumed.checkpoint, resumed.live, &f.limits)).err().unwrap();
    assert!(matches!(err, StoreError::Unavailable));
    assert_eq!(f.store.occupied(), 0);
    assert!(f.backend.list().unwrap().is_empty());
}

#[test]
fn evicting_the_live_attachment_keeps_the_run() {
    let f = fixture();
    let live = Arc::new(());
    let id = f.park(owner("s", "r"), &live);
    assert!(f.store.evict_live(&id).is_some());
    assert!(f.store.evict_live(&id).is_none());
    let resumed = ready(f.store.begin_resume(&id, &owner("s", "r"))).unwrap();
    assert!(resumed.live.is_none(), "the next resume replays");
    assert!(!resumed.restored);
}

#[test]
fn an_oversized_checkpoint_fails_with_snapshot_limit_exceeded() {
    let f = fixture();
    let limits = codemode_config::Limits { max_snapshot_bytes: 1024, ..f.limits.clone() };
    let mut cp = checkpoint(owner("s", "r"), 3);
    cp.source = "x".repeat(2048);
    let slot = f.store.reserve().unwrap();
    let err = ready(f.store.park(slot, cp, None, &limits)).err().unwrap();
    assert!(err.to_string().starts_with("code mode snapshot is over maxSnapshotBytes (1024): at least "), "{err}");
    assert_eq!(err.code(), ErrorCode::SnapshotLimitExceeded);
    let StoreError::SnapshotTooLarge { size, .. } = err else { panic!("{err}") };
    assert!(size > 1024, "{size}");
    assert_eq!(f.store.occupied(), 0, "the failed park freed its slot");
    assert!(f.backend.list().unwrap().is_empty());
}
