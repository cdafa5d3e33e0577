//! The session store's bounds and their messages.

use codemode_bridge::ErrorCode;
use codemode_snapshot::SessionStore;
use serde_json::json;

use crate::ready;

#[test]
fn store_and_load_round_trip_per_session() {
    let s = SessionStore::in_memory();
    ready(s.store("a", "k", json!({"x": [1, 2]}))).unwrap();
    ready(s.store("a", "k", json!("replaced"))).unwrap();
    ready(s.store("b", "k", json!(null))).unwrap();
    assert_eq!(ready(s.load("a", "k")).unwrap(), Some(json!("replaced")));
    assert_eq!(ready(s.load("b", "k")).unwrap(), Some(json!(null)));
    assert_eq!(ready(s.load("c", "k")).unwrap(), None);
    assert!(ready(s.remove("a", "k")).unwrap());
    assert!(!ready(s.remove("a", "k")).unwrap());
}

#[test]
fn key_bound_is_128_characters() {
    let s = SessionStore::in_memory();
    ready(s.store("a", &"é".repeat(128), json!(1))).unwrap();
    let err = ready(s.store("a", &"k".repeat(129), json!(1))).err().unwrap();
    assert_eq!(err.to_string(), "store key must be 1 to 128 characters long, got 129");
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    let err = ready(s.load("a", "")).err().unwrap();
    assert_eq!(err.to_string(), "store key must be 1 to 128 characters long, got 0");
}

#[test]
fn value_bound_is_64_kib_of_json() {
    let s = SessionStore::in_memory();
    // A JSON string costs its content plus two quotes.
    ready(s.store("a", "k", json!("x".repeat(65_534)))).unwrap();
    let err = ready(s.store("a", "k", json!("x".repeat(65_535)))).err().unwrap();
    assert_eq!(err.to_string(), "store value is 65537 bytes of JSON, over the limit of 65536 bytes");
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    assert_eq!(
        ready(s.load("a", "k")).unwrap().unwrap().as_str().unwrap().len(),
        65_534,
        "a refused write changes nothing"
    );
}

#[test]
fn key_count_bound_is_256_per_session() {
    let s = SessionStore::in_memory();
    for i in 0..256 {
        ready(s.store("a", &format!("k{i}"), json!(i))).unwrap();
    }
    let err = ready(s.store("a", "one-more", json!(0))).err().unwrap();
    assert_eq!(err.to_string(), "session store is full: at most 256 keys per session; overwrite or remove a key first");
    // Overwriting an existing key and other sessions are fine.
    ready(s.store("a", "k0", json!("new"))).unwrap();
    ready(s.store("b", "one-more", json!(0))).unwrap();
    assert_eq!(ready(s.keys("a")).unwrap().len(), 256);
}
