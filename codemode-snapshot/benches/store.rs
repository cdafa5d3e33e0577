//! Benchmarks of the run store: park + begin_resume on the memory backend (target: well under the 1 ms live-path
//! round trip the facade aims for; OpenClaw's QuickJS suspend+resume is 16.9 ms here), and the encoded size of a
//! checkpoint after 10 calls returning `{ok:true}` (target < 1 KB; QuickJS heap snapshot: 1.5 MB).

use std::hint::black_box;
use std::sync::Arc;

use codemode_bridge::{Journal, OutputBudget, RequestDigest, Round, Settlement, SettlementValue, WaitReason};
use codemode_config::Limits;
use codemode_snapshot::{Checkpoint, FileBackend, MemoryBackend, RunOwner, RunStore, SystemClock, new_run_id};
use criterion::{Criterion, criterion_group, criterion_main};

fn checkpoint(calls: u32) -> Checkpoint {
    let journal = Journal {
        seed: 0x9e37_79b9_7f4a_7c15,
        start_clock_ms: 1_767_225_600_000,
        requests: (1..=calls).map(|i| RequestDigest(u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15))).collect(),
        rounds: (1..=calls)
            .map(|i| Round {
                clock_ms: 1_767_225_600_000 + i64::from(i),
                settlements: vec![Settlement {
                    id: i,
                    value: SettlementValue::Ok { value: serde_json::json!({"ok": true}) },
                }],
            })
            .collect(),
    };
    let owner = RunOwner {
        session_id: Some("agent:main:main".into()),
        agent_id: Some("main".into()),
        agent_run_id: Some("run-1".into()),
    };
    Checkpoint::new(
        new_run_id(),
        owner,
        "for (let i = 0; i < 11; i++) await tools.ping({ i });".into(),
        "3f2a9c1d8e7b6a50".into(),
        journal,
        OutputBudget::new(65_536),
        WaitReason::PendingTools,
    )
}

/// The output of a future that is ready at its first poll, as every call on a local backend is.
fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("a local backend answers at once"),
    }
}

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let cp = checkpoint(10);
    let owner = cp.owner.clone();
    println!("checkpoint after 10 calls returning {{ok:true}}: {} bytes encoded", cp.encoded_len());

    let store: RunStore<()> = RunStore::new(Arc::new(MemoryBackend::new()), Arc::new(SystemClock));
    c.bench_function("park+begin_resume/memory/10 calls", |b| {
        b.iter(|| {
            let slot = store.reserve().expect("the store is empty");
            ready(store.park(slot, cp.clone(), Some(()), &limits)).expect("parks");
            let resumed = ready(store.begin_resume(&cp.run_id, &owner)).expect("resumes");
            black_box(resumed.checkpoint.generation)
        })
    });

    let dir = tempfile::tempdir().expect("a temp dir");
    let store: RunStore<()> =
        RunStore::new(Arc::new(FileBackend::open(dir.path()).expect("opens")), Arc::new(SystemClock));
    c.bench_function("park+begin_resume/file/10 calls", |b| {
        b.iter(|| {
            let slot = store.reserve().expect("the store is empty");
            ready(store.park(slot, cp.clone(), None, &limits)).expect("parks");
            let resumed = ready(store.begin_resume(&cp.run_id, &owner)).expect("resumes");
            black_box(resumed.checkpoint.generation)
        })
    });

    let dir = tempfile::tempdir().expect("a temp dir");
    let backend = FileBackend::open(dir.path()).expect("opens").without_fsync();
    let store: RunStore<()> = RunStore::new(Arc::new(backend), Arc::new(SystemClock));
    c.bench_function("park+begin_resume/file without fsync/10 calls", |b| {
        b.iter(|| {
            let slot = store.reserve().expect("the store is empty");
            ready(store.park(slot, cp.clone(), None, &limits)).expect("parks");
            let resumed = ready(store.begin_resume(&cp.run_id, &owner)).expect("resumes");
            black_box(resumed.checkpoint.generation)
        })
    });

    c.bench_function("checkpoint encode/10 calls", |b| b.iter(|| black_box(cp.encoded_len())));
    let bytes = cp.encode();
    c.bench_function("checkpoint decode/10 calls", |b| b.iter(|| black_box(Checkpoint::decode(&bytes))));
}

criterion_group!(benches, bench);
criterion_main!(benches);
