//! State sealed at rest in PostgreSQL: with state keys, a checkpoint, a session value, a saved result and a
//! recorded result are ciphertext in their rows; they open after a key rotation (new key first, old key kept); a
//! store without the key, or with another key only, refuses them instead of reading them; and a replica that cannot
//! open a run (no key, another key, an altered row) gives its claim back at once, saying the run exists.

use std::sync::Arc;

use codemode_snapshot::{Accepted, Claim, Keyring, StoreError};
use codemode_store_pg::{PgOptions, PgStore};
use serde_json::json;

use crate::{checkpoint, owner, store};
use codemode_snapshot::{FleetIdempotency, FleetResults, FleetRuns, FleetSessions};

const T: u64 = 1_800_000_000_000;
const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const K2: &str = "k2:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8";
const MARKER: &str = "sk-live-MARKER-7f3a";

fn keyed(spec: &str) -> PgOptions {
    PgOptions { keys: Some(Arc::new(Keyring::parse(spec).expect("valid keys"))), ..PgOptions::default() }
}

/// Every stored cell of the fleet tables, as text, read straight from the database.
async fn raw_rows(url: &str) -> String {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connects");
    tokio::spawn(connection);
    let mut out = String::new();
    for row in client.query("SELECT encode(checkpoint, 'escape') FROM codemode_runs", &[]).await.unwrap() {
        out.push_str(row.get::<_, &str>(0));
    }
    for table in ["codemode_sessions", "codemode_results"] {
        for row in client.query(&format!("SELECT value FROM {table}"), &[]).await.unwrap() {
            out.push_str(row.get::<_, &str>(0));
        }
    }
    for row in client.query("SELECT coalesce(result, '') FROM codemode_idempotency", &[]).await.unwrap() {
        out.push_str(row.get::<_, &str>(0));
    }
    out
}

#[tokio::test]
async fn with_state_keys_every_row_is_sealed_and_opens_only_under_a_configured_key() {
    let (pg, url) = store(keyed(K1)).await;
    let mut cp = checkpoint(owner("s"), 2, T + 600_000);
    cp.source = format!("const API_TOKEN = \"{MARKER}\"; await tools.ping({{}})");
    let id = cp.run_id.clone();
    pg.put(&cp, 0, "a", "s").await.unwrap();
    pg.session_put("s", "k", &json!({ "token": MARKER }), 16).await.unwrap();
    pg.result_put("s", "r1", &json!([MARKER]), 1 << 20).await.unwrap();
    assert!(matches!(pg.idempotency_accept("s", "key", &id, T + 600_000).await.unwrap(), Accepted::New));
    pg.idempotency_finish("s", "key", &json!({ "value": MARKER })).await.unwrap();

    let raw = raw_rows(&url).await;
    assert!(raw.contains("CMSEAL1") && raw.contains("sealed:"), "rows are sealed: {raw:.200}");
    assert!(!raw.contains(MARKER) && !raw.contains("tools.ping"), "no plaintext in any row");

    // The same store reads everything back.
    assert_eq!(pg.get(&id).await.unwrap().unwrap().source, cp.source);
    assert_eq!(pg.session_get("s", "k").await.unwrap(), Some(json!({ "token": MARKER })));
    assert_eq!(pg.result_get("s", "r1").await.unwrap(), Some(json!([MARKER])));

    // After a rotation (k2 seals, k1 still opens) the old rows open, and a new write is sealed with k2.
    let rotated = PgStore::connect(&url, keyed(&format!("{K2}\n{K1}"))).await.unwrap();
    assert_eq!(rotated.get(&id).await.unwrap().unwrap().source, cp.source);
    match rotated.idempotency_accept("s", "key", "other", T + 600_000).await.unwrap() {
        Accepted::Existing { run_id, result } => {
            assert_eq!(run_id, id);
            assert_eq!(result, Some(json!({ "value": MARKER })));
        }
        Accepted::New => panic!("the key was accepted before"),
    }
    rotated.session_put("s", "k2", &json!(1), 16).await.unwrap();
    // The store that has only k1 cannot open what k2 sealed.
    assert!(matches!(pg.session_get("s", "k2").await.unwrap_err(), StoreError::Sealed { .. }));

    // Without a key, or with only the new key, the old rows are refused, never read.
    let plain = PgStore::connect(&url, PgOptions::default()).await.unwrap();
    for err in [
        plain.get(&id).await.unwrap_err(),
        plain.session_get("s", "k").await.unwrap_err(),
        plain.result_get("s", "r1").await.unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::Sealed { .. }), "{err}");
        assert!(!err.to_string().contains(MARKER), "{err}");
    }
    let only_new = PgStore::connect(&url, keyed(K2)).await.unwrap();
    let err = only_new.get(&id).await.unwrap_err();
    assert!(err.to_string().contains("k1"), "the message names the missing key id: {err}");
}

#[tokio::test]
async fn a_keyed_store_refuses_rows_written_without_a_key() {
    let (plain, url) = store(PgOptions::default()).await;
    let cp = checkpoint(owner("s"), 1, T + 600_000);
    plain.put(&cp, 0, "a", "s").await.unwrap();
    plain.session_put("s", "k", &json!(1), 16).await.unwrap();
    let keyed = PgStore::connect(&url, keyed(K1)).await.unwrap();
    assert!(matches!(keyed.get(&cp.run_id).await.unwrap_err(), StoreError::Sealed { .. }));
    assert!(matches!(keyed.session_get("s", "k").await.unwrap_err(), StoreError::Sealed { .. }));
}

/// The lease holder of `run_id`'s row, read straight from the database.
async fn lease_holder(url: &str, run_id: &str) -> Option<String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connects");
    tokio::spawn(connection);
    let row = client.query_one("SELECT lease_holder FROM codemode_runs WHERE run_id = $1", &[&run_id]).await;
    row.expect("the run's row is there").get(0)
}

#[tokio::test]
async fn a_replica_that_cannot_open_a_run_gives_its_claim_back_and_says_the_run_exists() {
    let (keyed_store, url) = store(keyed(K1)).await;
    let cp = checkpoint(owner("s"), 2, T + 600_000);
    let id = cp.run_id.clone();
    keyed_store.put(&cp, 0, "keyed", "s").await.unwrap();

    // No key, or another key only: the claim is refused with what this replica lacks, and given back at once.
    for (name, options) in [("no key", PgOptions::default()), ("another key", keyed(K2))] {
        let other = PgStore::connect(&url, options).await.unwrap();
        let err = other.claim(&id, "other", T).await.unwrap_err();
        assert!(matches!(&err, StoreError::Unreadable { run_id, .. } if *run_id == id), "{name}: {err}");
        assert_eq!(err.code(), codemode_bridge::ErrorCode::InternalError, "{name}");
        let message = err.to_string();
        assert!(message.contains(&format!("run {id} exists, but this replica cannot open")), "{name}: {message}");
        assert!(message.contains("k1"), "{name}: the message names the key the run needs: {message}");
        assert_eq!(lease_holder(&url, &id).await, None, "{name}: no lease is left behind");
    }

    // A row altered in the database: the replica with the key refuses it too, and holds nothing afterwards.
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connects");
    tokio::spawn(connection);
    let original: Vec<u8> =
        client.query_one("SELECT checkpoint FROM codemode_runs WHERE run_id = $1", &[&id]).await.unwrap().get(0);
    let mut altered = original.clone();
    let last = altered.len() - 1;
    altered[last] ^= 0x01;
    client.execute("UPDATE codemode_runs SET checkpoint = $2 WHERE run_id = $1", &[&id, &altered]).await.unwrap();
    let err = keyed_store.claim(&id, "keyed", T).await.unwrap_err();
    assert!(matches!(err, StoreError::Unreadable { .. }), "{err}");
    assert!(err.to_string().contains("altered"), "{err}");
    assert_eq!(lease_holder(&url, &id).await, None);

    // Put right, the run is claimed at once by the replica that can open it: no lease of another was in its way.
    client.execute("UPDATE codemode_runs SET checkpoint = $2 WHERE run_id = $1", &[&id, &original]).await.unwrap();
    match keyed_store.claim(&id, "keyed", T).await.unwrap() {
        Claim::Claimed(claimed) => assert_eq!(claimed.source, cp.source),
        other => panic!("the keyed replica claims the run, got {other:?}"),
    }
}
