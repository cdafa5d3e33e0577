//! Integration tests of the PostgreSQL store against a real throwaway PostgreSQL 15 (the harness's): the backend's
//! compare-and-set, leases, TTL sweep, wake-ups, migrations under concurrent start, session values, result
//! references and idempotency keys; and two run stores over one database standing for two replicas.

mod backend;
mod replicas;
mod sealed;

use std::sync::Arc;

use codemode_bridge::{Journal, OutputBudget, RequestDigest, Round, Settlement, SettlementValue, WaitReason};
use codemode_pg_harness as harness;
use codemode_snapshot::{Checkpoint, RunOwner, new_run_id};
use codemode_store_pg::{PgOptions, PgStore};

/// A store on a fresh database.
pub async fn store(options: PgOptions) -> (Arc<PgStore>, String) {
    let url = harness::fresh_database().await.expect("the test PostgreSQL is available");
    let store = PgStore::connect(&url, options).await.expect("connects and migrates");
    (Arc::new(store), url)
}

pub fn owner(session: &str) -> RunOwner {
    RunOwner { session_id: Some(session.to_owned()), agent_id: Some("main".into()), agent_run_id: None }
}

/// A checkpoint of `calls` calls each returning `{ok:true}`, expiring at `expires_at_ms`.
pub fn checkpoint(owner: RunOwner, calls: u32, expires_at_ms: u64) -> Checkpoint {
    let journal = Journal {
        seed: 7,
        start_clock_ms: 1_767_225_600_000,
        requests: (1..=calls).map(|i| RequestDigest(u64::from(i))).collect(),
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
