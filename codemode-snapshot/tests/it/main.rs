//! Integration tests of codemode-snapshot: the run store (cap, TTL, scoping, one resume in flight, persistence
//! across stores sharing a directory), checkpoints (wire form, size), the session store's bounds, and state at rest
//! (file modes, sealing with state keys), and the fleet backends' shared suite on the memory and directory backends.

mod checkpoint;
mod conformance;
mod persistence;
mod seal;
mod session;
mod store;

use std::sync::Arc;

use codemode_bridge::{Journal, OutputBudget, RequestDigest, Round, Settlement, SettlementValue, WaitReason};
use codemode_config::Limits;
use codemode_snapshot::{Checkpoint, CheckpointBackend, ManualClock, MemoryBackend, RunOwner, RunStore, new_run_id};

/// A live attachment that counts how many of its kind are alive, to prove the store drops them.
#[derive(Debug)]
pub struct Live(pub Arc<()>);

pub const T0: u64 = 1_800_000_000_000;

pub fn owner(session: &str, agent_run: &str) -> RunOwner {
    RunOwner {
        session_id: Some(session.to_owned()),
        agent_id: Some("main".to_owned()),
        agent_run_id: Some(agent_run.to_owned()),
    }
}

/// A journal of `calls` sequential calls each returning `{ok:true}`.
pub fn journal(calls: u32) -> Journal {
    Journal {
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
    }
}

pub fn checkpoint(owner: RunOwner, calls: u32) -> Checkpoint {
    Checkpoint::new(
        new_run_id(),
        owner,
        "for (let i = 0; i < 11; i++) await tools.ping({ i });".to_owned(),
        "3f2a9c1d8e7b6a50".to_owned(),
        journal(calls),
        OutputBudget::new(65_536),
        WaitReason::PendingTools,
    )
}

pub struct Fixture {
    pub store: RunStore<Live>,
    pub clock: Arc<ManualClock>,
    pub backend: Arc<MemoryBackend>,
    pub limits: Limits,
}

pub fn fixture() -> Fixture {
    let clock = Arc::new(ManualClock::new(T0));
    let backend = Arc::new(MemoryBackend::new());
    let store = RunStore::new(backend.clone() as Arc<dyn CheckpointBackend>, clock.clone());
    Fixture { store, clock, backend, limits: Limits::default() }
}

impl Fixture {
    /// Parks a fresh run owned by `owner` with a live attachment; returns its id.
    pub fn park(&self, owner: RunOwner, live: &Arc<()>) -> String {
        let slot = self.store.reserve_for(&owner).expect("under the cap");
        let cp = checkpoint(owner, 3);
        let id = cp.run_id.clone();
        ready(self.store.park(slot, cp, Some(Live(live.clone())), &self.limits)).expect("parks");
        id
    }
}

/// The output of a future that is ready at its first poll, as every call on a local backend is.
pub fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("a local backend answers at once"),
    }
}
