//! The native value encoder, through an in-process engine: it agrees with the engine's own `JSON.stringify` on
//! every value `JSON.stringify` accepts, and marks only the offending part of the values it refuses.

use codemode_bridge::Journal;
use codemode_vm::protocol::{CellLimits, GuestOutcome, Start, WorkerMessage};
use codemode_worker::engine::{Engine, collect_output};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Runs `code` in a fresh engine and returns what it returned, on a thread with a large stack as in the worker
/// (Boa recurses natively; a test thread's 2 MiB are not enough for every generated program in a debug build).
fn run(code: &str) -> Value {
    let code = code.to_owned();
    std::thread::Builder::new()
        .stack_size(64 * 1024 * 1024)
        .spawn(move || run_here(&code))
        .expect("the engine thread starts")
        .join()
        .expect("the engine thread returns")
}

fn run_here(code: &str) -> Value {
    let (sink, _) = collect_output();
    let mut engine = Engine::new(u64::MAX, sink).expect("the engine starts");
    let start = Start {
        source: code.to_owned(),
        globals: None,
        globals_key: None,
        limits: CellLimits::default(),
        journal: Journal::default(),
        skip_output: 0,
    };
    match engine.start(start, None) {
        WorkerMessage::Quiescent { outcome: Some(GuestOutcome::Returned { value }), .. } => value,
        other => panic!("{code}: expected a value, got {other:?}"),
    }
}

/// The encoder's result for `expr`, and what the engine's `JSON.stringify` makes of it.
fn both(expr: &str) -> (Value, Value) {
    // Wrapped in `{v}` on both sides, so `toJSON` sees the same key and a dropped value is dropped from both.
    let pair = run(&format!("const v = ({expr}); return [{{ v }}, JSON.stringify({{ v }})]"));
    let text = pair[1].as_str().expect("JSON.stringify's text");
    (pair[0].clone(), serde_json::from_str(text).expect("JSON.stringify's text parses"))
}

fn literal() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("undefined".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i32>().prop_map(|n| n.to_string()),
        prop_oneof![Just(0.5f64), Just(-0.0), Just(1e21), Just(1e20), Just(2f64.powi(53)), Just(1e-7), Just(f64::MAX)]
            .prop_map(|n| format!("{n:?}")),
        Just("NaN".to_owned()),
        Just("-Infinity".to_owned()),
        "[a-z\u{e9}\u{4e2d}\u{1f600}\"\\\\\n]{0,8}".prop_map(|s| serde_json::to_string(&s).expect("a string")),
        Just("() => 1".to_owned()),
        Just("Symbol('s')".to_owned()),
        Just("new Date(86400000)".to_owned()),
        Just("new Number(7)".to_owned()),
        Just("new String('w')".to_owned()),
        Just("new Boolean(false)".to_owned()),
        Just("({ toJSON(key) { return 'key=' + key } })".to_owned()),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|items| format!("[{}]", items.join(", "))),
            prop::collection::vec(("[a-z0-9_]{1,4}", inner), 0..6).prop_map(|entries| {
                let fields: Vec<String> = entries.iter().map(|(k, v)| format!("{k:?}: {v}")).collect();
                format!("({{{}}})", fields.join(", "))
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn agrees_with_json_stringify(expr in literal()) {
        let (ours, theirs) = both(&expr);
        prop_assert_eq!(ours, theirs, "for {}", expr);
    }
}

#[test]
fn only_the_offending_part_is_marked() {
    let value = run("const a = { x: 1 }; a.self = a; return { a, big: 10n, ok: [1, 2], deep: [[[]]] }");
    assert_eq!(value, json!({ "a": { "x": 1, "self": "[Circular]" }, "big": "10", "ok": [1, 2], "deep": [[[]]] }));
    let value = run("return { get bad() { throw new Error('nope') }, good: 1 }");
    assert_eq!(value, json!({ "bad": "[Unserializable: nope]", "good": 1 }));
    let value = run("return { p: Promise.resolve(1), t: { toJSON() { throw 'plain' } } }");
    assert_eq!(value, json!({ "p": "[Unawaited Promise: await it before returning]", "t": "[Unserializable: plain]" }));
    let value = run("return new Proxy({}, { ownKeys() { throw new TypeError('trap') } })");
    assert_eq!(value, json!("[Unserializable: trap]"));
}

#[test]
fn a_shared_value_is_not_a_cycle() {
    let value = run("const s = { n: 1 }; return [s, s, { s }]");
    assert_eq!(value, json!([{ "n": 1 }, { "n": 1 }, { "s": { "n": 1 } }]));
}

#[test]
fn nesting_stops_at_the_depth_limit() {
    let value = run("let v = 0; for (let i = 0; i < 150; i++) v = [v]; return v");
    let mut depth = 0;
    let mut current = &value;
    while let Some(inner) = current.get(0) {
        depth += 1;
        current = inner;
    }
    assert_eq!(depth, 100);
    assert_eq!(current, &json!("[MaxDepth]"));
}

#[test]
fn errors_keep_name_message_and_code() {
    let value = run("const e = new TypeError('bad'); e.code = 'E1'; e.extra = [1]; return e");
    assert_eq!(value, json!({ "name": "TypeError", "message": "bad", "code": "E1", "extra": [1] }));
}

#[test]
fn lone_surrogates_become_replacement_characters() {
    assert_eq!(run("return { ['k\\ud800']: '\\udc00x' }"), json!({ "k\u{fffd}": "\u{fffd}x" }));
}

#[test]
fn long_strings_keep_a_prefix() {
    let value = run("return 'x'.repeat(1000001)");
    let text = value.as_str().expect("a string");
    assert_eq!(text.chars().count(), 1_000_001);
    assert!(text.ends_with('…'));
}

#[test]
fn numbers_follow_json() {
    assert_eq!(
        run("return [1, -0, 1.5, 2 ** 53, NaN, Infinity, 1e300]"),
        json!([1, 0, 1.5, 9007199254740992i64, null, null, 1e300])
    );
}

/// Wrapper objects are read as `JSON.stringify` reads them in Node: a `Number` object through `ToNumber`
/// (`Symbol.toPrimitive`, then `valueOf`, then `toString`), a `String` object through `ToString`, a `Boolean` by its
/// slot; an object that only inherits from a wrapper prototype is an ordinary object.
#[test]
fn wrapper_objects_match_node() {
    let cases = [
        "new Number(7)",
        "new String('ab')",
        "new Boolean(false)",
        "Object.assign(new String('ab'), { toString() { return 'T'; } })",
        "Object.assign(new String('ab'), { toString() { return {}; }, valueOf() { return 'V'; } })",
        "Object.assign(new String('ab'), { valueOf() { return 'V'; } })",
        "Object.assign(new String('a'), { [Symbol.toPrimitive](hint) { return hint; } })",
        "Object.assign(new Number(1), { [Symbol.toPrimitive](hint) { return hint === 'number' ? 42 : 0; } })",
        "Object.assign(new Number(1), { valueOf() { return 5; } })",
        "Object.assign(new Number(1), { valueOf() { return '12'; } })",
        "Object.assign(new Number(1), { valueOf() { return {}; }, toString() { return '3.5'; } })",
        "Object.assign(new Number(1), { valueOf() { return NaN; } })",
        "Object.assign(new Boolean(false), { valueOf() { return true; } })",
        "Object.create(Number.prototype)",
        "Object.create(String.prototype)",
        "Object.create(Boolean.prototype)",
        "Object.assign(Object.create(Number.prototype), { a: 1 })",
        "Number.prototype",
        "String.prototype",
        "Boolean.prototype",
        "Object(Symbol('s'))",
        "[new Number(-0), new String(''), Object.assign(new Number(2), { toJSON() { return 'j'; } })]",
        "(() => { class N extends Number {} return new N(9); })()",
    ];
    let programs: Vec<String> = cases.iter().map(|expr| format!("JSON.stringify({{ v: ({expr}) }})")).collect();
    let expected = super::strings::node(&programs);
    let mut diffs = Vec::new();
    for (expr, node) in cases.iter().zip(expected) {
        let node: Value = serde_json::from_str(&node).unwrap_or_else(|e| panic!("{expr}: node printed {node}: {e}"));
        let ours = run(&format!("return {{ v: ({expr}) }}"));
        if ours != node {
            diffs.push(format!("{expr}\n    node: {node}\n    ours: {ours}"));
        }
    }
    assert!(diffs.is_empty(), "{} of {} cases differ from node:\n{}", diffs.len(), cases.len(), diffs.join("\n"));
}
