//! Differential tests of the native `JSON.parse` and sorts (`src/natives/json.rs`, `src/natives/sort.rs`) against Node's V8:
//! fixed edge cases from `tests/fixtures/{json,sort}-edge-cases.js` plus proptest-generated inputs, each run in
//! our engine (with `install`) and in Node. Values are compared as a deep dump (own keys in order, attributes,
//! prototypes, strings as code units, -0), errors by name only, inconsistent comparators by permutation only.

use proptest::prelude::*;

use super::strings::{disagreements, literal};

/// Dumps a completion value the same way in both engines: every own key in order with its attributes, the
/// prototype kind, strings as code units so lone surrogates survive, -0 apart from 0.
const HARNESS: &str = r#"
function __dump(v) {
  if (typeof v === "string") { var u = []; for (var i = 0; i < v.length; i++) u.push(v.charCodeAt(i)); return "s[" + u.join(",") + "]"; }
  if (typeof v === "number") return Object.is(v, -0) ? "-0" : String(v);
  if (typeof v === "bigint") return String(v) + "n";
  if (v === null || v === undefined || typeof v === "boolean") return String(v);
  if (typeof v !== "object") return typeof v;
  var proto = Object.getPrototypeOf(v);
  var tag = Array.isArray(v) ? (proto === Array.prototype ? "A" : "A?")
    : ArrayBuffer.isView(v) ? Object.prototype.toString.call(v)
    : proto === Object.prototype ? "O" : proto === null ? "N" : "O?";
  var keys = Reflect.ownKeys(v), out = [];
  for (var k = 0; k < keys.length; k++) {
    var key = keys[k];
    if (typeof key === "symbol") { out.push("symbol"); continue; }
    var d = Object.getOwnPropertyDescriptor(v, key);
    var flags = (d.writable ? "w" : "") + (d.enumerable ? "e" : "") + (d.configurable ? "c" : "");
    out.push(__dump(key) + flags + "=" + ("value" in d ? __dump(d.value) : "accessor"));
  }
  return tag + "{" + out.join(",") + "}";
}
var __result;
try { __result = "ok " + __dump((function () { __BODY__
})()); } catch (e) { __result = "throw " + (e instanceof Error ? e.name : typeof e); }
__result
"#;

/// Runs every body in both engines; returns the disagreements as readable lines.
fn differences(bodies: &[String]) -> Vec<String> {
    let programs: Vec<String> = bodies.iter().map(|body| HARNESS.replace("__BODY__", body)).collect();
    disagreements(bodies, &programs, |_, _| None)
}

fn fixture(text: &str) -> Vec<String> {
    text.lines().filter(|line| !line.trim().is_empty() && !line.starts_with("//")).map(str::to_owned).collect()
}

/// Every case of a fixture file agrees with Node; `at_least` guards against a file that lost its cases.
fn fixture_matches_node(text: &str, at_least: usize) {
    let bodies = fixture(text);
    assert!(bodies.len() > at_least, "the fixture file lost its cases");
    let diffs = differences(&bodies);
    assert!(diffs.is_empty(), "{} of {} cases differ from node:\n{}", diffs.len(), bodies.len(), diffs.join("\n"));
}

#[test]
fn json_edge_cases_match_node() {
    fixture_matches_node(include_str!("../fixtures/json-edge-cases.js"), 60);
}

/// Deeper than V8 goes with a reviver (its recursive walk throws a RangeError at a few thousand levels): the
/// reviver walks whatever the parser accepts, as deep as without a reviver.
#[test]
fn a_reviver_walks_text_nested_as_deep_as_the_parser_accepts() {
    let program = r#"
        var depth = 100000, calls = 0;
        var s = "[".repeat(depth) + "\"\\ud800\"" + "]".repeat(depth);
        var r = JSON.parse(s, function (k, v) { calls++; return v; });
        var n = 0; while (Array.isArray(r)) { r = r[0]; n++; }
        [n, calls, r.charCodeAt(0)].join()
    "#;
    assert_eq!(super::strings::boa(program, true), "100000,100001,55296");
}

#[test]
fn sort_edge_cases_match_node() {
    fixture_matches_node(include_str!("../fixtures/sort-edge-cases.js"), 40);
}

fn units(text: &str) -> Vec<u16> {
    text.encode_utf16().collect()
}

/// JSON whitespace, and sometimes none.
fn whitespace() -> impl Strategy<Value = Vec<u16>> {
    prop::sample::select(vec!["", "", "", " ", "\t", "\n", "\r\n", "  "]).prop_map(units)
}

/// Numbers that stress the conversion: -0, i32 edges, 2^53 + 1, exponents past the double range, subnormals,
/// plus random digit strings.
fn number() -> impl Strategy<Value = Vec<u16>> {
    let fixed = prop::sample::select(vec![
        "0",
        "-0",
        "-0.0",
        "0e5",
        "1",
        "-1",
        "123456789",
        "1234567890",
        "2147483647",
        "2147483648",
        "-2147483648",
        "-2147483649",
        "4294967295",
        "9007199254740993",
        "123456789012345678901234567890",
        "1e400",
        "-1e400",
        "1e-400",
        "5e-324",
        "2.4703282292062328e-324",
        "1.7976931348623157e308",
        "0.1",
        "0.30000000000000004",
        "1.5",
        "1E+2",
        "1e-2",
        "123.456e7",
        "1.0",
        "-1e3",
        "1e9",
        "100000000000000000000",
    ])
    .prop_map(units);
    let random = ("-?", "(0|[1-9][0-9]{0,20})", "(\\.[0-9]{1,20})?", "([eE][+-]?[0-9]{1,3})?")
        .prop_map(|(sign, int, frac, exp)| units(&format!("{sign}{int}{frac}{exp}")));
    prop_oneof![fixed, random]
}

/// String literals mixing raw code units (Latin-1, BMP, surrogate pairs, lone surrogates) and every escape.
fn string() -> impl Strategy<Value = Vec<u16>> {
    let pieces: Vec<Vec<u16>> = vec![
        units("a"),
        units("Z"),
        units(" "),
        units("\u{e9}"),
        units("\u{7f}"),
        units("\u{20ac}"),
        units("\u{2028}"),
        units("\u{1f600}"),
        vec![0xd800],
        vec![0xdfff],
        units("\\\""),
        units("\\\\"),
        units("\\/"),
        units("\\b\\f\\n\\r\\t"),
        units("\\u0041"),
        units("\\u00e9"),
        units("\\u20AC"),
        units("\\ud83d\\ude00"),
        units("\\ud800"),
        units("\\uDC00x"),
        units("\\u0000"),
    ];
    prop::collection::vec(prop::sample::select(pieces), 0..6).prop_map(|parts| {
        let mut out = units("\"");
        out.extend(parts.concat());
        out.push(u16::from(b'"'));
        out
    })
}

/// Member names chosen to collide: duplicates, `__proto__`, array-index-like names, escapes of the same name.
fn key() -> impl Strategy<Value = Vec<u16>> {
    let fixed = prop::sample::select(vec![
        "\"a\"",
        "\"b\"",
        "\"\\u0061\"",
        "\"__proto__\"",
        "\"__pro\\u0074o__\"",
        "\"constructor\"",
        "\"length\"",
        "\"0\"",
        "\"1\"",
        "\"10\"",
        "\"01\"",
        "\"-1\"",
        "\"4294967294\"",
        "\"4294967295\"",
        "\"\"",
        "\"\u{e9}\"",
        "\"\\ud800\"",
    ])
    .prop_map(units);
    prop_oneof![4 => fixed, 1 => string()]
}

fn join(open: &str, items: Vec<Vec<u16>>, close: &str, ws: Vec<u16>) -> Vec<u16> {
    let mut out = units(open);
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.extend(&ws);
            out.push(u16::from(b','));
        }
        out.extend(&ws);
        out.extend(item);
    }
    out.extend(&ws);
    out.extend(units(close));
    out
}

fn json_value() -> impl Strategy<Value = Vec<u16>> {
    let leaf = prop_oneof![
        3 => number(),
        3 => string(),
        1 => Just(units("true")),
        1 => Just(units("false")),
        1 => Just(units("null")),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..6), whitespace())
                .prop_map(|(items, ws)| join("[", items, "]", ws)),
            (prop::collection::vec((key(), whitespace(), inner), 0..6), whitespace()).prop_map(|(members, ws)| {
                let members = members
                    .into_iter()
                    .map(|(mut key, ws, value)| {
                        key.extend(&ws);
                        key.push(u16::from(b':'));
                        key.extend(ws);
                        key.extend(value);
                        key
                    })
                    .collect();
                join("{", members, "}", ws)
            }),
        ]
    })
}

/// A JSON text, valid or broken on purpose: truncated, with a stray character, or with a trailing comma.
fn json_text() -> impl Strategy<Value = Vec<u16>> {
    let stray = prop::sample::select(vec![
        "x", ",", "]", "}", "\"", "'", ":", "\u{b}", "\u{a0}", "\u{feff}", "01", "+1", ".5", "1.", "-", "\\", "\n",
        "\u{0}",
    ]);
    (whitespace(), json_value(), whitespace(), 0..10u8, any::<prop::sample::Index>(), stray).prop_map(
        |(before, value, after, mutation, at, stray)| {
            let mut text = before;
            text.extend(value);
            text.extend(after);
            match mutation {
                0 => {
                    let cut = at.index(text.len() + 1);
                    text.truncate(cut);
                }
                1 => {
                    let position = at.index(text.len() + 1);
                    text.splice(position..position, units(stray));
                }
                2 => text.extend(units(",")),
                _ => {}
            }
            text
        },
    )
}

/// The comparators every engine must agree on: consistent ones, some returning non-numbers or NaN for "equal".
fn consistent_comparator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "undefined",
        "function (x, y) { return x.k - y.k; }",
        "function (x, y) { return y.k - x.k; }",
        "function (x, y) { return (x.k > y.k) - (x.k < y.k); }",
        "function (x, y) { return String(x.k - y.k); }",
        "function (x, y) { return { valueOf: function () { return x.k - y.k; } }; }",
        "function (x, y) { return x.k === y.k ? NaN : x.k - y.k; }",
        "function (x, y) { return (x.k - y.k) * Infinity || 0; }",
    ])
}

/// Comparators that are not a consistent order: only the permutation of the result is defined.
fn inconsistent_comparator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "function () { return Math.random() - 0.5; }",
        "function (x, y) { return x.k < y.k; }",
        "function () { return 1; }",
        "function () { return -1; }",
        "function () { return NaN; }",
        "(function () { var n = 0; return function () { return n++ % 3 - 1; }; })()",
        "function (x, y) { return x.id % 2 ? 1 : -1; }",
    ])
}

/// Array elements as source: records `{k, id}` (k collides, id is the position), undefined, holes.
fn records() -> impl Strategy<Value = String> {
    prop::collection::vec(0..10u8, 0..40).prop_map(|kinds| {
        let items: Vec<String> = kinds
            .iter()
            .enumerate()
            .map(|(id, kind)| match kind {
                0 => String::new(),
                1 => "undefined".to_owned(),
                k => format!("{{ k: {}, id: {id} }}", k % 4),
            })
            .collect();
        // A trailing hole needs its own comma to count.
        format!("[{}{}]", items.join(", "), if items.last().is_some_and(String::is_empty) { "," } else { "" })
    })
}

/// Primitive elements for the default (string) order: numbers that print alike, strings, null, booleans, holes.
fn primitives() -> impl Strategy<Value = String> {
    let element = prop::sample::select(vec![
        "",
        "undefined",
        "null",
        "true",
        "false",
        "0",
        "-0",
        "1",
        "2",
        "10",
        "-1",
        "1.5",
        "NaN",
        "Infinity",
        "1e21",
        "\"\"",
        "\"a\"",
        "\"B\"",
        "\"10\"",
        "\"\\u00e9\"",
        "\"\\ud800\"",
        "\"\\ud83d\\ude00\"",
        "\"\\uffff\"",
    ]);
    prop::collection::vec(element, 0..30).prop_map(|items| {
        format!("[{}{}]", items.join(", "), if items.last().is_some_and(|item| item.is_empty()) { "," } else { "" })
    })
}

fn sort_call() -> impl Strategy<Value = String> {
    (records(), primitives(), consistent_comparator(), inconsistent_comparator(), 0..7u8, 0..40u8).prop_map(
        |(records, primitives, consistent, inconsistent, op, throw_at)| match op {
            0 => format!("var a = {records}; var r = a.sort({consistent}); return [r === a, a];"),
            1 => format!("var a = {records}; return [a.toSorted({consistent}), a];"),
            2 => format!("var a = {primitives}; a.sort(); return a;"),
            3 => format!("var a = {primitives}; return a.toSorted();"),
            4 => format!(
                "var a = {records}; a.sort({inconsistent}); var seen = {{}}; \
                 for (var i = 0; i < a.length; i++) {{ \
                 var id = !(i in a) ? 'hole' : a[i] === undefined ? 'u' : a[i].id; \
                 seen[id] = (seen[id] || 0) + 1; }} return [a.length, seen];"
            ),
            // How many calls a sort makes is the implementation's choice, so the comparator throws on an element
            // rather than after a count: every sort of two or more items must look at each of them.
            5 => format!(
                "var a = {records}; try {{ a.sort(function (x, y) {{ \
                 if (x.id === {throw_at} || y.id === {throw_at}) throw new RangeError('stop'); return x.k - y.k; }}); \
                 return ['done', a]; }} catch (e) {{ return [e.name, a]; }}"
            ),
            _ => format!(
                "var o = {{}}; var a = {records}; for (var i = 0; i < a.length; i++) if (i in a) o[i] = a[i]; \
                 o.length = a.length; Array.prototype.sort.call(o, {consistent}); return o;"
            ),
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn generated_json_parses_like_node(texts in prop::collection::vec(json_text(), 200)) {
        let bodies: Vec<String> = texts.iter().map(|text| format!("return JSON.parse({});", literal(text))).collect();
        let diffs = differences(&bodies);
        prop_assert!(diffs.is_empty(), "{} cases differ from node:\n{}", diffs.len(), diffs.join("\n"));
    }

    #[test]
    fn generated_sorts_match_node(bodies in prop::collection::vec(sort_call(), 150)) {
        let diffs = differences(&bodies);
        prop_assert!(diffs.is_empty(), "{} cases differ from node:\n{}", diffs.len(), diffs.join("\n"));
    }
}
