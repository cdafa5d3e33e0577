//! Pure callbacks (`src/natives/pure.rs`) against real calls: generated arrays of records, primitives, inherited and
//! accessor properties, proxies that log their traps, symbols and BigInts, sorted by a one-line comparator or
//! passed through `map`/`filter`/`find`/`findIndex`/`some`/`every` with a one-line callback, as written (eligible
//! for the native path) and wrapped in a function that calls it (never eligible). The result, the log and any
//! error must be the same, and the native path must have been taken for most programs.

use proptest::prelude::*;

use super::strings::{boa_here, on_engine_thread};

/// Runs `program` in a fresh context with our built-ins, on an engine thread of its own; returns its completion
/// value and whether a call took the native path (the counter is per thread).
fn run(program: &str) -> (String, bool) {
    let program = program.to_owned();
    on_engine_thread(move || (boa_here(&program, true), codemode_worker::natives::pure_calls() > 0))
}

/// The program's completion value: the result's labels (and the array's, for a sort), the log, or the error's name.
const PROGRAM: &str = r#"
var log = [];
var items = [__ITEMS__];
__SHAPE__
var cmp = __CMP__;
var result;
try { var out = items.__METHOD__(__USE__); result = show(out) + " / " + show(items); }
catch (e) { result = "throw " + (e instanceof Error ? e.name : typeof e); }
result + " | " + log.join(",")
"#;

/// Defined before every program: how to name an item, and the helpers the generated items use.
const PRELUDE: &str = r#"
function show(v) {
  if (!Array.isArray(v)) return label(v);
  var out = []; for (var i = 0; i < v.length; i++) out.push(i in v ? label(v[i]) : "hole");
  return "[" + out.join(" ") + "]" + (Object.getPrototypeOf(v) === Array.prototype ? "" : "sub");
}
function label(x) {
  if (x !== null && typeof x === "object") return "o" + (Object.prototype.hasOwnProperty.call(x, "id") ? x.id : "?");
  return typeof x === "symbol" ? "sym" : typeof x + ":" + String(x);
}
function rec(id, score, name, extra) { var o = { id: id, score: score, name: name, active: id % 2 === 0, meta: { rank: id % 5 } }; if (extra) extra(o); return o; }
var base = { score: 7, name: "proto" };
function inherits(id) { var o = Object.create(base); o.id = id; o.meta = { rank: 1 }; return o; }
function getter(id) { return Object.defineProperty({ id: id, name: "g" }, "score", { get: function () { log.push("get" + id); return id; }, enumerable: true }); }
class Tagged extends Array {}
function proxied(id) { return new Proxy({ id: id, score: id, name: "p", meta: { rank: 2 } }, { get: function (t, k) { log.push("trap" + String(k)); return t[k]; } }); }
"#;

const COMPARATORS: &[&str] = &[
    "(a, b) => a.score - b.score",
    "function (a, b) { return b.score - a.score || a.id - b.id; }",
    "(a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0",
    "(a, b) => a.name.localeCompare(b.name)",
    "(a, b) => a - b",
    "(a, b) => b - a",
    "(a, b) => a.meta.rank - b.meta.rank || b.id - a.id",
    "(a, b) => (a.score ?? 0) - (b.score ?? 0)",
    "(a, b) => +a.active - +b.active",
    "(a, b) => a.name.length - b.name.length",
    "(a, b) => a.score > b.score",
    "(a, b) => a.id % 3 - b.id % 3",
    "(a, b) => !a.active - !b.active",
    "(a, b) => a.score == b.score ? 0 : a.score < b.score ? -1 : 1",
    "(a, b) => { return a[\"score\"] * 2 - b[\"score\"] / 0.5; }",
    "(a, b) => a[0] - b[0] || (a[1] < b[1] ? 1 : -1)",
    "(x, y) => String(x) < String(y)",
    "(a, b) => a.score + \"\" < b.score + \"\" ? -1 : 1",
];

const CALLBACKS: &[&str] = &[
    "r => r.name",
    "function (r) { return r.score > 1 && r.active; }",
    "(r) => r.meta",
    "r => r.meta.rank * 2 + 1",
    "r => r.score ?? -1",
    "r => !r.active",
    "r => r[0]",
    "x => x > 2",
    "x => x",
    "x => typeof x",
    "r => r.name.length > 2 ? r.name : r.id",
    "r => r.id % 7 === 3",
];

/// How the array is set up before the call: mostly as built, sometimes a shape the native path must refuse.
const SHAPES: &[&str] = &[
    "",
    "",
    "",
    "",
    "items[items.length + 3] = items[0];",
    "items.constructor = function () { log.push('ctor'); return []; };",
    "Object.defineProperty(items, 5, { get: function () { log.push('idx'); return 1; } });",
    "items = Tagged.from(items);",
    "items = new Proxy(items, { get: function (t, k) { log.push('get' + String(k)); return t[k]; } });",
    "Object.defineProperty(Array, Symbol.species, { get: function () { log.push('species'); return Array; } });",
    "Object.defineProperty(Object.prototype, 'score', { get: function () { log.push('proto'); return 3; }, configurable: true });",
];

/// One item: mostly plain records (with edge-case scores), sometimes something the fast path must refuse.
fn item() -> impl Strategy<Value = String> {
    let scores = prop::sample::select(vec![
        "1",
        "2",
        "2",
        "-0",
        "0",
        "NaN",
        "Infinity",
        "-5.5",
        "1e21",
        "undefined",
        "null",
        "\"10\"",
        "\"9\"",
        "true",
    ]);
    let names =
        prop::sample::select(vec!["\"ann\"", "\"Bob\"", "\"bob\"", "\"\"", "\"\\u00e9\"", "\"\\ud83d\\ude00\""]);
    (0..1000u32, scores, names, 0..100u32).prop_map(|(id, score, name, kind)| match kind {
        0 => format!("inherits({id})"),
        1 => format!("getter({id})"),
        2 => format!("proxied({id})"),
        3 => "Symbol(\"s\")".to_owned(),
        4 => format!("{id}n"),
        5..=14 => score.to_owned(),
        15..=22 => format!("[{score}, {name}]"),
        23..=26 => name.to_owned(),
        _ => format!("rec({id}, {score}, {name})"),
    })
}

/// Arrays that are all records or all numbers, so that most programs are eligible for the fast path.
fn uniform_items() -> impl Strategy<Value = Vec<String>> {
    let numbers = prop::collection::vec((-50..50i32).prop_map(|n| n.to_string()), 64..160);
    let records = prop::collection::vec(
        (0..1000u32, -50..50i32).prop_map(|(id, score)| format!("rec({id}, {score}, \"n{}\")", id % 17)),
        64..160,
    );
    prop_oneof![1 => numbers, 3 => records]
}

fn program(items: &[String], method: &str, callback: &str, shape: &str, wrapped: bool) -> String {
    let using = match (wrapped, method) {
        (false, _) => "cmp",
        (true, "sort") => "function (a, b) { return cmp(a, b); }",
        (true, _) => "function (x) { return cmp(x); }",
    };
    let body = PROGRAM
        .replace("__ITEMS__", &items.join(", "))
        .replace("__SHAPE__", shape)
        .replace("__CMP__", callback)
        .replace("__METHOD__", method)
        .replace("__USE__", using);
    format!("{PRELUDE}{body}")
}

/// One call: the items, the method, its callback and the set-up of the array.
type Case = (Vec<String>, &'static str, &'static str, &'static str);

/// The disagreements between the as-written and wrapped calls, and how many as-written calls were native.
fn check(cases: &[Case]) -> (Vec<String>, usize) {
    let mut native = 0;
    let diffs = cases
        .iter()
        .filter_map(|(items, method, callback, shape)| {
            let (fast, took_native) = run(&program(items, method, callback, shape, false));
            let (slow, wrapped_native) = run(&program(items, method, callback, shape, true));
            assert!(!wrapped_native, "a callback that calls another function was taken as pure");
            native += usize::from(took_native);
            (fast != slow).then(|| {
                format!("{shape} {method}({callback}) over [{}]\n    fast: {fast}\n    slow: {slow}", items.join(", "))
            })
        })
        .collect();
    (diffs, native)
}

/// A method and a callback that fits it.
fn call() -> impl Strategy<Value = (&'static str, &'static str)> {
    let methods = prop::sample::select(vec!["map", "filter", "find", "findIndex", "some", "every"]);
    prop_oneof![
        1 => prop::sample::select(COMPARATORS.to_vec()).prop_map(|c| ("sort", c)),
        1 => (methods, prop::sample::select(CALLBACKS.to_vec())),
    ]
}

#[test]
fn record_calls_take_the_native_path_and_agree() {
    // Names in mixed case and beyond ASCII: `localeCompare` must agree with the engine's own, whatever that is.
    let names = ["ann", "Bob", "bob", "\\u00e9", "Zed", "zed", "a b", "\\ud83d\\ude00"];
    let items: Vec<String> =
        (0..200).map(|i| format!("rec({i}, {}, \"{}\")", (i * 37) % 23, names[(i * 11) % names.len()])).collect();
    let cases: Vec<Case> = COMPARATORS.iter().map(|c| (items.clone(), "sort", *c, "")).collect();
    let (diffs, native) = check(&cases);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    // Every comparator that reads records is eligible; the ones over primitives (`a - b`, `a[0]`) see objects.
    assert!(native >= 12, "only {native} of {} sorts were native", COMPARATORS.len());
    let mut cases = Vec::new();
    for method in ["map", "filter", "find", "findIndex", "some", "every"] {
        cases.extend(CALLBACKS.iter().map(|c| (items.clone(), method, *c, "")));
    }
    let (diffs, native) = check(&cases);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert!(native >= cases.len() / 2, "only {native} of {} callbacks were native", cases.len());
    // Every shape the native path must refuse (or see through), with callbacks it would otherwise take.
    let mut cases = Vec::new();
    for shape in SHAPES {
        for method in ["map", "filter", "find", "some", "sort"] {
            let callback = if method == "sort" { COMPARATORS[1] } else { CALLBACKS[1] };
            cases.push((items.clone(), method, callback, *shape));
        }
    }
    let (diffs, _) = check(&cases);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3, max_shrink_iters: 32, ..ProptestConfig::default() })]

    #[test]
    fn generated_calls_agree_with_real_calls(
        cases in prop::collection::vec(
            (prop::collection::vec(item(), 64..160), call(), prop::sample::select(SHAPES.to_vec())),
            50,
        ),
        uniform in prop::collection::vec((uniform_items(), call(), prop::sample::select(SHAPES.to_vec())), 50),
    ) {
        let cases: Vec<Case> = cases.into_iter().map(|(items, (method, callback), shape)| (items, method, callback, shape)).collect();
        let (diffs, _) = check(&cases);
        prop_assert!(diffs.is_empty(), "{} calls differ:\n{}", diffs.len(), diffs.join("\n"));
        let uniform: Vec<Case> =
            uniform.into_iter().map(|(items, (method, callback), shape)| (items, method, callback, shape)).collect();
        let (diffs, native) = check(&uniform);
        prop_assert!(diffs.is_empty(), "{} calls differ:\n{}", diffs.len(), diffs.join("\n"));
        prop_assert!(native >= uniform.len() / 4, "only {} of {} uniform calls were native", native, uniform.len());
    }
}
