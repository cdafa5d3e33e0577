//! Runs and session values that outlive their store: two stores sharing a directory stand for two processes.

use std::sync::Arc;

use codemode_bridge::{SettlementValue, WaitReason};
use codemode_snapshot::{
    CheckpointBackend, FileBackend, INTERRUPTED_MESSAGE, LocalFleet, ManualClock, PendingRequest, RunStore,
    SessionStore, StoreError, interrupted_settlements,
};

use crate::{Live, T0, checkpoint, owner, ready};

fn store(dir: &std::path::Path, clock: &Arc<ManualClock>) -> RunStore<Live> {
    let backend = FileBackend::open(dir).unwrap();
    RunStore::new(Arc::new(backend), clock.clone())
}

#[test]
fn a_run_parked_by_one_store_is_resumed_by_another_sharing_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let limits = codemode_config::Limits::default();

    let first = store(dir.path(), &clock);
    let mut cp = checkpoint(owner("s", "r"), 10);
    cp.pending = vec![
        PendingRequest { id: 12, method: "callValue".into(), args_digest: 7, due_ms: None },
        PendingRequest { id: 11, method: "sleep".into(), args_digest: 8, due_ms: None },
        PendingRequest { id: 13, method: "yield".into(), args_digest: 9, due_ms: None },
    ];
    let id = cp.run_id.clone();
    let original = cp.clone();
    ready(first.park(first.reserve().unwrap(), cp, Some(Live(Arc::new(()))), &limits)).unwrap();
    drop(first); // the process dies

    let second = store(dir.path(), &clock);
    assert_eq!(ready(second.prune_backend()).unwrap(), 0);
    let err = ready(second.begin_resume(&id, &owner("s", "other"))).err().unwrap();
    assert_eq!(err.to_string(), "code mode run belongs to a different agent run.");
    let resumed = ready(second.begin_resume(&id, &owner("s", "r"))).unwrap();
    assert!(resumed.restored);
    assert!(resumed.live.is_none());
    assert_eq!(resumed.checkpoint.journal, original.journal);
    assert_eq!(resumed.checkpoint.source, original.source);
    assert_eq!(resumed.checkpoint.reason, WaitReason::PendingTools);

    let settlements = interrupted_settlements(&resumed.checkpoint);
    let mut with_timer = resumed.checkpoint.clone();
    with_timer.pending[1].due_ms = Some(T0 + 500);
    let ids: Vec<u32> = interrupted_settlements(&with_timer).iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![12], "a timer with a due time runs again instead");
    assert_eq!(settlements.iter().map(|s| s.id).collect::<Vec<_>>(), vec![11, 12], "yield is settled by resuming");
    for s in &settlements {
        assert_eq!(s.value, SettlementValue::Err { code: "interrupted".into(), message: INTERRUPTED_MESSAGE.into() });
    }

    // The resume consumed the file: a third process cannot resume it again.
    let third = store(dir.path(), &clock);
    assert!(matches!(ready(third.begin_resume(&id, &owner("s", "r"))), Err(StoreError::Unavailable)));

    // Parking again writes a new checkpoint that the first process's stale memory would not match.
    ready(second.park(resumed.guard, resumed.checkpoint, None, &limits)).unwrap();
    let again = ready(third.begin_resume(&id, &owner("s", "r"))).unwrap();
    assert_eq!(again.checkpoint.generation, 2);
}

#[test]
fn a_stale_in_memory_copy_defers_to_a_newer_durable_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let limits = codemode_config::Limits::default();
    let a = store(dir.path(), &clock);
    let b = store(dir.path(), &clock);

    let cp = checkpoint(owner("s", "r"), 2);
    let id = cp.run_id.clone();
    ready(a.park(a.reserve().unwrap(), cp, Some(Live(Arc::new(()))), &limits)).unwrap();

    // b resumes and re-parks; a still holds generation 1 with a live worker.
    let resumed = ready(b.begin_resume(&id, &owner("s", "r"))).unwrap();
    let mut next = resumed.checkpoint;
    next.delivered_output = 4;
    ready(b.park(resumed.guard, next, None, &limits)).unwrap();

    let from_a = ready(a.begin_resume(&id, &owner("s", "r"))).unwrap();
    assert!(from_a.live.is_none(), "the stale live worker is not used");
    assert!(from_a.restored);
    assert_eq!(from_a.checkpoint.delivered_output, 4);
    assert_eq!(from_a.checkpoint.generation, 2);

    // b's memory is stale now that a consumed the run.
    drop(from_a);
    assert!(matches!(ready(b.begin_resume(&id, &owner("s", "r"))), Err(StoreError::Unavailable)));
}

#[test]
fn expired_checkpoints_are_pruned_at_start_and_refused_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let limits = codemode_config::Limits::default();
    let first = store(dir.path(), &clock);
    let ids: Vec<String> = (0..3)
        .map(|_| {
            let cp = checkpoint(owner("s", "r"), 1);
            let id = cp.run_id.clone();
            ready(first.park(first.reserve().unwrap(), cp, None, &limits)).unwrap();
            id
        })
        .collect();
    drop(first);
    clock.advance(limits.snapshot_ttl_seconds * 1000);

    let second = store(dir.path(), &clock);
    assert!(matches!(ready(second.begin_resume(&ids[0], &owner("s", "r"))), Err(StoreError::Unavailable)));
    assert_eq!(ready(second.backend().list(None)).unwrap().len(), 2, "the expired file was deleted on load");
    assert_eq!(ready(second.prune_backend()).unwrap(), 2);
    assert!(ready(second.backend().list(None)).unwrap().is_empty());
}

#[test]
fn a_corrupt_checkpoint_is_reported_unreadable_and_left_in_place_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let backend = FileBackend::open(dir.path()).unwrap();
    let id = codemode_snapshot::new_run_id();
    std::fs::write(dir.path().join("runs").join(format!("{id}.json")), b"{\"v\":1,").unwrap();
    assert_eq!(backend.list().unwrap(), vec![id.clone()]);
    let store: RunStore<Live> = RunStore::new(Arc::new(backend), clock);
    assert_eq!(ready(store.prune_backend()).unwrap(), 0);
    let err = ready(store.begin_resume(&id, &owner("s", "r"))).err().unwrap();
    assert!(matches!(&err, StoreError::Unreadable { run_id, .. } if *run_id == id), "{err}");
    assert!(err.to_string().contains("exists, but this replica cannot open"), "{err}");
    assert_eq!(err.code(), codemode_bridge::ErrorCode::InternalError);
    assert_eq!(store.occupied(), 0);
    // The file is where it was, for a process that can open it.
    assert_eq!(std::fs::read(dir.path().join("runs").join(format!("{id}.json"))).unwrap(), b"{\"v\":1,");
}

#[test]
fn session_values_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = SessionStore::new(Arc::new(LocalFleet::directory(FileBackend::open(dir.path()).unwrap())));
    ready(first.store("agent:main:chat/1", "cursor", serde_json::json!({"page": 3}))).unwrap();
    ready(first.store("other session", "cursor", serde_json::json!(1))).unwrap();
    drop(first);

    let second = SessionStore::new(Arc::new(LocalFleet::directory(FileBackend::open(dir.path()).unwrap())));
    assert_eq!(ready(second.load("agent:main:chat/1", "cursor")).unwrap(), Some(serde_json::json!({"page": 3})));
    assert_eq!(ready(second.load("other session", "cursor")).unwrap(), Some(serde_json::json!(1)));
    assert_eq!(ready(second.load("agent:main:chat/1", "missing")).unwrap(), None);
    ready(second.clear("other session")).unwrap();
    assert_eq!(ready(second.load("other session", "cursor")).unwrap(), None);
}

fn run_file(dir: &std::path::Path, run_id: &str) -> std::path::PathBuf {
    dir.join("runs").join(format!("{run_id}.json"))
}

fn session_file(dir: &std::path::Path, session: &str) -> std::path::PathBuf {
    use sha2::Digest as _;
    let name: String = sha2::Sha256::digest(session.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    dir.join("sessions").join(format!("{name}.json"))
}

fn mkfifo(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt as _;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c_path` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn a_checkpoint_copied_under_another_runs_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let limits = codemode_config::Limits::default();
    let first = store(dir.path(), &clock);
    let (a, b) = (checkpoint(owner("s", "r"), 3), checkpoint(owner("s", "r"), 5));
    let (id_a, id_b) = (a.run_id.clone(), b.run_id.clone());
    ready(first.park(first.reserve().unwrap(), a, None, &limits)).unwrap();
    ready(first.park(first.reserve().unwrap(), b, None, &limits)).unwrap();
    std::fs::copy(run_file(dir.path(), &id_a), run_file(dir.path(), &id_b)).unwrap();

    // The same process, whose index knows b: the durable copy holds a, so b is refused.
    let err = ready(first.begin_resume(&id_b, &owner("s", "r"))).err().unwrap();
    assert_eq!(err.code(), codemode_bridge::ErrorCode::InternalError);
    assert!(err.to_string().contains(&format!("the file of run {id_b} holds the checkpoint of run {id_a}")), "{err}");

    // Another process that knows only the files: the same refusal, and a is untouched and resumes once.
    std::fs::copy(run_file(dir.path(), &id_a), run_file(dir.path(), &id_b)).unwrap();
    let second = store(dir.path(), &clock);
    let err = ready(second.begin_resume(&id_b, &owner("s", "r"))).err().unwrap();
    assert!(err.to_string().contains("holds the checkpoint of run"), "{err}");
    assert_eq!(second.occupied(), 0);
    let resumed = ready(second.begin_resume(&id_a, &owner("s", "r"))).unwrap();
    assert_eq!(resumed.checkpoint.run_id, id_a);
    assert_eq!(resumed.checkpoint.journal.rounds.len(), 3);
}

/// A backend that answers every run id with one checkpoint, as a careless custom backend might.
struct OneCheckpoint(codemode_snapshot::Checkpoint);

impl CheckpointBackend for OneCheckpoint {
    fn put(&self, _: &codemode_snapshot::Checkpoint) -> Result<(), StoreError> {
        Ok(())
    }
    fn get(&self, _: &str) -> Result<Option<codemode_snapshot::Checkpoint>, StoreError> {
        Ok(Some(self.0.clone()))
    }
    fn take(&self, _: &str) -> Result<Option<codemode_snapshot::Checkpoint>, StoreError> {
        Ok(Some(self.0.clone()))
    }
    fn delete(&self, _: &str) -> Result<bool, StoreError> {
        Ok(true)
    }
    fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(vec![self.0.run_id.clone()])
    }
}

#[test]
fn the_store_refuses_another_runs_checkpoint_from_any_backend() {
    let clock = Arc::new(ManualClock::new(T0));
    let limits = codemode_config::Limits::default();
    let mut foreign = checkpoint(owner("s", "r"), 2);
    foreign.expires_at_ms = T0 + 60_000;
    let store: RunStore<Live> = RunStore::new(Arc::new(OneCheckpoint(foreign.clone())), clock);
    let asked = codemode_snapshot::new_run_id();
    let err = ready(store.begin_resume(&asked, &owner("s", "r"))).err().unwrap();
    assert!(
        matches!(&err, StoreError::ForeignCheckpoint { run_id, found } if *run_id == asked && *found == foreign.run_id),
        "{err}"
    );
    // Parked in this process: the in-memory index names the run, the backend hands back another.
    let mine = checkpoint(owner("s", "r"), 1);
    let id = mine.run_id.clone();
    ready(store.park(store.reserve().unwrap(), mine, None, &limits)).unwrap();
    let err = ready(store.begin_resume(&id, &owner("s", "r"))).err().unwrap();
    assert!(matches!(err, StoreError::ForeignCheckpoint { .. }), "{err}");
}

#[test]
fn state_files_that_are_symlinks_fifos_or_huge_fail_fast() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = store(dir.path(), &clock);
    let sessions = SessionStore::new(Arc::new(LocalFleet::directory(FileBackend::open(dir.path()).unwrap())));
    let mut cases = Vec::new();
    for (name, make) in
        [("symlink to /dev/zero", 0), ("FIFO", 1), ("sparse file over the cap", 2), ("symlink to a valid file", 3)]
    {
        let run_id = codemode_snapshot::new_run_id();
        let session = format!("session {name}");
        for (path, cap) in [
            (run_file(dir.path(), &run_id), codemode_snapshot::MAX_CHECKPOINT_FILE_BYTES),
            (session_file(dir.path(), &session), codemode_snapshot::MAX_SESSION_FILE_BYTES),
        ] {
            match make {
                0 => std::os::unix::fs::symlink("/dev/zero", &path).unwrap(),
                1 => mkfifo(&path),
                2 => std::fs::File::create(&path).unwrap().set_len(cap + 1).unwrap(),
                _ => {
                    let target = dir.path().join(format!("target-{run_id}.json"));
                    std::fs::write(&target, b"{\"session\":\"x\",\"values\":{}}").unwrap();
                    std::os::unix::fs::symlink(&target, &path).unwrap();
                }
            }
        }
        cases.push((name, run_id, session));
    }
    for (name, run_id, session) in cases {
        let err = ready(store.begin_resume(&run_id, &owner("s", "r"))).err().unwrap();
        assert!(matches!(err, StoreError::Unreadable { .. }), "{name}: {err}");
        assert_eq!(store.occupied(), 0, "{name}");
        let err = ready(sessions.load(&session, "key")).err().unwrap();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{name}: {err}");
    }
}

#[test]
fn a_wait_with_another_catalog_leaves_the_run_for_the_right_caller() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let limits = codemode_config::Limits::default();
    let first = store(dir.path(), &clock);
    let cp = checkpoint(owner("s", "r"), 3);
    let id = cp.run_id.clone();
    let digest = cp.tools_digest.clone();
    ready(first.park(first.reserve().unwrap(), cp, Some(Live(Arc::new(()))), &limits)).unwrap();
    let same_catalog = |cp: &codemode_snapshot::Checkpoint| {
        if cp.tools_digest == digest { Ok(()) } else { Err(StoreError::DifferentCatalog) }
    };
    let other_catalog = |_: &codemode_snapshot::Checkpoint| Err(StoreError::DifferentCatalog);

    // In the process that parked it: refused, still parked.
    let err = ready(first.begin_resume_if(&id, &owner("s", "r"), other_catalog)).err().unwrap();
    assert_eq!(err.to_string(), "code mode run was started with a different tool catalog and cannot be resumed here.");
    assert_eq!(err.code(), codemode_bridge::ErrorCode::RuntimeUnavailable);
    assert!(first.contains(&id), "a refused wait does not consume the run");

    // In another process sharing the directory: refused, and the durable copy is still there.
    let second = store(dir.path(), &clock);
    assert!(matches!(
        ready(second.begin_resume_if(&id, &owner("s", "r"), other_catalog)),
        Err(StoreError::DifferentCatalog)
    ));
    assert!(ready(second.backend().get(&id)).unwrap().is_some(), "the durable copy is not consumed");

    // The right caller still resumes it.
    let resumed = ready(first.begin_resume_if(&id, &owner("s", "r"), same_catalog)).unwrap();
    assert!(resumed.live.is_some());
}
