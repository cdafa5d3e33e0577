//! Integration tests of the PostgreSQL store against a real throwaway PostgreSQL 15 (the harness's): the suite every
//! fleet backend passes (codemode-store-conformance), what a shared backend does beyond it (named claims with timed
//! leases, NOTIFY wake-ups across replicas, migrations under concurrent start), and two run stores over one database
//! standing for two replicas.

mod backend;
mod replicas;
mod sealed;

use std::sync::Arc;

use codemode_pg_harness as harness;
use codemode_store_pg::{PgOptions, PgStore};

/// A store on a fresh database.
pub async fn store(options: PgOptions) -> (Arc<PgStore>, String) {
    let url = harness::fresh_database().await.expect("the test PostgreSQL is available");
    let store = PgStore::connect(&url, options).await.expect("connects and migrates");
    (Arc::new(store), url)
}

pub use codemode_store_conformance::{checkpoint, owner};

#[tokio::test]
async fn the_postgresql_backend_behaves_as_every_fleet_backend() {
    let (store, _) = store(PgOptions::default()).await;
    codemode_store_conformance::run(store).await;
}
