//! Limits: defaults, clamps, fallbacks for non-positive and non-integer values, and the range invariant.

use codemode_config::Limits;
use proptest::prelude::*;
use serde_json::{Value, json};

const MIB: u64 = 1024 * 1024;

#[test]
fn non_objects_yield_defaults() {
    for value in [json!(true), json!(false), json!("auto"), Value::Null, json!(5), json!([])] {
        assert_eq!(Limits::from_json(&value), Limits::default(), "{value}");
    }
}

#[test]
fn defaults_match_the_reference() {
    let d = Limits::default();
    assert_eq!(
        (d.timeout_ms, d.memory_limit_bytes, d.max_output_bytes, d.max_snapshot_bytes),
        (10_000, 64 * MIB, 64 * 1024, 10 * MIB)
    );
    assert_eq!(
        (d.max_pending_tool_calls, d.snapshot_ttl_seconds, d.search_default_limit, d.max_search_limit),
        (16, 900, 8, 50)
    );
    assert_eq!(d.inbox_bytes(), 10 * MIB);
    // Not a reference limit: the wait budget of issue 18, below common clients' request timeouts.
    assert_eq!(d.max_wait_ms, 25_000);
}

/// One limit key with an input and the expected effective value.
fn check(key: &str, input: Value, expected: u64) {
    let limits = Limits::from_json(&json!({ key: input.clone() }));
    let got = serde_json::to_value(&limits).expect("limits serialize")[key].as_u64().expect("limit is a number");
    assert_eq!(got, expected, "{key} = {input}");
}

#[test]
fn clamps_and_fallbacks() {
    let cases: &[(&str, Value, u64)] = &[
        ("timeoutMs", json!(5000), 5000),
        ("timeoutMs", json!(50), 100),
        ("timeoutMs", json!(100), 100),
        ("timeoutMs", json!(60_000), 60_000),
        ("timeoutMs", json!(60_001), 60_000),
        ("timeoutMs", json!(0), 10_000),
        ("timeoutMs", json!(-5), 10_000),
        ("timeoutMs", json!(1500.5), 10_000),
        ("timeoutMs", json!(1500.0), 1500),
        ("timeoutMs", json!("5000"), 10_000),
        ("timeoutMs", json!(true), 10_000),
        ("timeoutMs", json!(null), 10_000),
        ("timeoutMs", json!(1e300), 60_000),
        ("timeoutMs", json!(u64::MAX), 60_000),
        ("memoryLimitBytes", json!(1), MIB),
        ("memoryLimitBytes", json!(2 * 1024 * MIB), 1024 * MIB),
        ("memoryLimitBytes", json!(32 * MIB), 32 * MIB),
        ("maxOutputBytes", json!(10), 1024),
        ("maxOutputBytes", json!(100 * MIB), 10 * MIB),
        ("maxOutputBytes", json!(4096), 4096),
        ("maxSnapshotBytes", json!(1), 1024),
        ("maxSnapshotBytes", json!(1024 * MIB), 256 * MIB),
        ("maxPendingToolCalls", json!(1), 1),
        ("maxPendingToolCalls", json!(129), 128),
        ("maxPendingToolCalls", json!(0), 16),
        ("snapshotTtlSeconds", json!(86_401), 86_400),
        ("snapshotTtlSeconds", json!(1), 1),
        ("snapshotTtlSeconds", json!(-1), 900),
        ("maxSearchLimit", json!(51), 50),
        ("maxSearchLimit", json!(10), 10),
        ("maxSearchLimit", json!(0.5), 50),
        ("searchDefaultLimit", json!(20), 20),
        ("searchDefaultLimit", json!(500), 50),
        ("searchDefaultLimit", json!(0), 8),
        ("maxWaitMs", json!(60_000), 60_000),
        ("maxWaitMs", json!(700_000), 600_000),
        ("maxWaitMs", json!(0), 25_000),
        ("maxWaitMs", json!("25s"), 25_000),
    ];
    for (key, input, expected) in cases {
        check(key, input.clone(), *expected);
    }
}

#[test]
fn max_search_limit_clamps_search_default_limit() {
    let limits = Limits::from_json(&json!({ "maxSearchLimit": 5, "searchDefaultLimit": 20 }));
    assert_eq!((limits.search_default_limit, limits.max_search_limit), (5, 5));
    // The default of 8 is clamped too, not just explicit values.
    let limits = Limits::from_json(&json!({ "maxSearchLimit": 3 }));
    assert_eq!((limits.search_default_limit, limits.max_search_limit), (3, 3));
    // An invalid maxSearchLimit falls back to 50 first, so it does not clamp.
    let limits = Limits::from_json(&json!({ "maxSearchLimit": "3", "searchDefaultLimit": 40 }));
    assert_eq!((limits.search_default_limit, limits.max_search_limit), (40, 50));
}

#[test]
fn inbox_is_the_smaller_of_memory_and_snapshot() {
    let limits = Limits::from_json(&json!({ "memoryLimitBytes": 2 * MIB, "maxSnapshotBytes": 8 * MIB }));
    assert_eq!(limits.inbox_bytes(), 2 * MIB);
}

fn any_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z0-9]{0,6}".prop_map(Value::String),
    ]
}

proptest! {
    #[test]
    fn every_limit_stays_in_range(values in proptest::collection::vec(any_json(), 9)) {
        let object: serde_json::Map<String, Value> =
            codemode_config::LIMIT_KEYS.iter().map(|k| (*k).to_owned()).zip(values).collect();
        let l = Limits::from_json(&Value::Object(object));
        prop_assert!((100..=60_000).contains(&l.timeout_ms));
        prop_assert!((MIB..=1024 * MIB).contains(&l.memory_limit_bytes));
        prop_assert!((1024..=10 * MIB).contains(&l.max_output_bytes));
        prop_assert!((1024..=256 * MIB).contains(&l.max_snapshot_bytes));
        prop_assert!((1..=128).contains(&l.max_pending_tool_calls));
        prop_assert!((1..=86_400).contains(&l.snapshot_ttl_seconds));
        prop_assert!((1..=50).contains(&l.max_search_limit));
        prop_assert!((1..=l.max_search_limit).contains(&l.search_default_limit));
        prop_assert!((1..=600_000).contains(&l.max_wait_ms));
    }
}
