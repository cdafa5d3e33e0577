//! Property: any JSON value a tool returns crosses the bridge into the guest and back out as the cell's value
//! unchanged, and a value over the per-result bound (`maxOutputBytes`) arrives as the truncation marker.
//!
//! Equality is JSON equality: numbers compare as numbers (`3.0` and `3` are the same JSON number, as are `-0` and
//! `0`), and object keys compare as a set (JavaScript orders integer-like keys first).

use std::sync::Arc;

use codemode::{CodeMode, CodeModeResult, RunScope};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::harness::{self, Host};

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("__proto__".to_owned()),
        Just("constructor".to_owned()),
        Just("toJSON".to_owned()),
        Just("0".to_owned()),
        Just("42".to_owned()),
        Just(String::new()),
        "[a-z_$][a-z0-9_]{0,8}",
        any::<String>(),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53)..(1i64 << 53)).prop_map(|n| json!(n)),
        any::<f64>().prop_filter("JSON numbers are finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
        "[\\u{0}-\\u{7f}\\u{fffd}\\u{feff}\\u{2028}\\u{1f99e}]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..8).prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

fn rig() -> (tokio::runtime::Runtime, Arc<Host>, CodeMode) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let host = Arc::new(Host::default());
    let code_mode = runtime.block_on(async { harness::code_mode(host.clone()) });
    (runtime, host, code_mode)
}

fn give(
    runtime: &tokio::runtime::Runtime,
    host: &Host,
    code_mode: &CodeMode,
    value: Value,
    code: &str,
) -> CodeModeResult {
    *host.give.lock().expect("host lock") = value;
    runtime.block_on(code_mode.exec(json!({ "title": "round trip", "code": code }), RunScope::default()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn tool_results_round_trip_through_the_guest(value in json_value()) {
        thread_local! {
            static RIG: (tokio::runtime::Runtime, Arc<Host>, CodeMode) = rig();
        }
        RIG.with(|(runtime, host, code_mode)| {
            let result = give(runtime, host, code_mode, value.clone(), "return await give({})");
            match &result {
                CodeModeResult::Completed(c) => prop_assert!(same(&c.value, &value), "sent {value}\ngot  {}", c.value),
                other => prop_assert!(false, "sent {value}\ngot {other:?}"),
            }
            Ok(())
        })?;
    }
}

#[test]
fn a_result_over_max_output_bytes_arrives_as_a_truncation_marker() {
    let (runtime, host, code_mode) = rig();
    let max = harness::limits().max_output_bytes;
    let huge = Value::String("x".repeat(2 * 1024 * 1024));
    let read = "const r = await give({}); return [r.truncated, r.omittedBytes, r.guidance, JSON.stringify(r).length];";
    match give(&runtime, &host, &code_mode, huge, read) {
        CodeModeResult::Completed(c) => {
            assert_eq!(c.value[0], json!(true), "{}", c.value);
            let omitted = c.value[1].as_u64().expect("omittedBytes");
            assert!(omitted > 2 * 1024 * 1024 - max && omitted < 2 * 1024 * 1024, "{omitted}");
            assert_eq!(c.value[2], json!(codemode::TRUNCATION_GUIDANCE));
            assert!(c.value[3].as_u64().expect("a length") <= max, "the marker fits maxOutputBytes");
        }
        other => panic!("{other:?}"),
    }
}
