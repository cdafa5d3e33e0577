//! Differential tests of `codemode_vm::strings` against Node's V8: fixed edge cases from
//! `tests/fixtures/strings-edge-cases.js` plus proptest-generated calls. Node is spawned once per batch.
//! Results are compared as printed by one JS harness (strings as code units, errors by name), not by message text.

use std::{
    io::Write,
    process::{Command, Stdio},
};

use boa_engine::{Context, Source};
use proptest::prelude::*;

/// Prints a completion value the same way in both engines; strings as code units so lone surrogates survive.
const HARNESS: &str = r#"
function __show(v) {
  if (typeof v === "string") { var u = []; for (var i = 0; i < v.length; i++) u.push(v.charCodeAt(i)); return "s[" + u.join(",") + "]"; }
  if (Array.isArray(v)) {
    var out = []; for (var j = 0; j < v.length; j++) out.push(__show(v[j]));
    var extra = typeof v.index === "number" ? "@" + v.index : "";
    if (v.groups !== undefined) extra += "g" + __show(Object.keys(v.groups).map(function (k) { return k + "=" + v.groups[k]; }).join(";"));
    return "[" + out.join(",") + "]" + extra;
  }
  if (typeof v === "number") return Object.is(v, -0) ? "-0" : String(v);
  if (v === null) return "null";
  if (typeof v === "object") {
    if (typeof v.next === "function") { var items = []; for (var x of v) items.push(__show(x)); return "iter[" + items.join(",") + "]"; }
    return "object";
  }
  return typeof v + ":" + String(v);
}
var __result;
try { __result = "ok " + __show((function () { __BODY__
})()); } catch (e) { __result = "throw " + (e instanceof Error ? e.name : typeof e); }
__result
"#;

/// Runs each case in a fresh `vm` context of one Node process.
const NODE_DRIVER: &str = r#"
const vm = require("vm");
let input = "";
process.stdin.on("data", (d) => (input += d));
process.stdin.on("end", () => {
  const out = JSON.parse(input).map((src) => { try { return String(vm.runInNewContext(src)); } catch (e) { return "harness " + e; } });
  process.stdout.write(JSON.stringify(out));
});
"#;

fn program(body: &str) -> String {
    HARNESS.replace("__BODY__", body)
}

/// Runs each program in a fresh `vm` context of one Node process and returns their completion values as strings.
pub(crate) fn node(programs: &[String]) -> Vec<String> {
    let mut child = Command::new("node")
        .args(["-e", NODE_DRIVER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node is installed");
    let input = serde_json::to_vec(programs).expect("a list of strings serializes");
    child.stdin.take().expect("stdin is piped").write_all(&input).expect("node reads its input");
    let output = child.wait_with_output().expect("node runs");
    assert!(output.status.success(), "node failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("node prints a JSON list")
}

/// Runs `program` in a fresh Boa context, with our built-ins when `install` is set and Boa's own otherwise.
pub(crate) fn boa(program: &str, install: bool) -> String {
    let program = program.to_owned();
    on_engine_thread(move || boa_here(&program, install))
}

/// Runs `f` on a thread of its own with a large stack, as in the worker: Boa recurses natively, and a test thread
/// has 2 MiB.
pub(crate) fn on_engine_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(64 * 1024 * 1024)
        .spawn(f)
        .expect("the engine thread starts")
        .join()
        .expect("the engine thread returns")
}

/// [`boa`] on the calling thread.
pub(crate) fn boa_here(program: &str, install: bool) -> String {
    let mut context = Context::builder().instructions_remaining(1 << 40).build().expect("a context builds");
    if install {
        codemode_worker::natives::install(&mut context).expect("install succeeds");
    }
    match context.eval(Source::from_bytes(program)) {
        Ok(value) => {
            value.to_string(&mut context).map_or_else(|e| format!("harness {e}"), |s| s.to_std_string_escaped())
        }
        Err(error) => format!("harness {error}"),
    }
}

/// Runs every body in both engines; returns the disagreements as readable lines. With `regexp_leeway`, a regex
/// case may instead agree with Boa's own built-ins: the regex engine underneath (regress) is Boa's, not ours, and
/// where it differs from V8 (escaped surrogate pairs in non-unicode patterns, for one) our layer must not.
fn differences(bodies: &[String], regexp_leeway: bool) -> Vec<String> {
    let programs: Vec<String> = bodies.iter().map(|b| program(b)).collect();
    disagreements(bodies, &programs, |body, program| {
        (regexp_leeway && body.contains("RegExp")).then(|| boa(program, false))
    })
}

/// Runs each program in Node and in our engine (with `install`); a line per body whose results differ, unless
/// `also` names another acceptable result of ours for it.
pub(crate) fn disagreements(
    bodies: &[String],
    programs: &[String],
    also: impl Fn(&str, &str) -> Option<String>,
) -> Vec<String> {
    let expected = node(programs);
    bodies
        .iter()
        .zip(programs)
        .zip(expected)
        .filter_map(|((body, program), expected)| {
            let actual = boa(program, true);
            if actual == expected || also(body, program).is_some_and(|alternative| actual == alternative) {
                return None;
            }
            Some(format!("{body}\n    node: {expected}\n    ours: {actual}"))
        })
        .collect()
}

#[test]
fn edge_cases_match_node() {
    let bodies: Vec<String> = include_str!("../fixtures/strings-edge-cases.js")
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with("//"))
        .map(str::to_owned)
        .collect();
    assert!(bodies.len() > 100, "the fixture file lost its cases");
    let diffs = differences(&bodies, false);
    assert!(diffs.is_empty(), "{} of {} cases differ from node:\n{}", diffs.len(), bodies.len(), diffs.join("\n"));
}

/// A JS string literal spelling every code unit as `\uXXXX`, so lone surrogates reach both engines intact.
pub(crate) fn literal(units: &[u16]) -> String {
    let mut out = String::from("\"");
    for unit in units {
        out.push_str(&format!("\\u{unit:04x}"));
    }
    out.push('"');
    out
}

/// Code-unit pieces chosen so needles occur often: ASCII, Latin-1, BMP, a surrogate pair and lone halves.
pub(crate) fn text() -> impl Strategy<Value = Vec<u16>> {
    let pieces: [&[u16]; 10] = [
        &[0x61],
        &[0x62],
        &[0x61, 0x62],
        &[0x24],
        &[0x0a],
        &[0xe9],
        &[0x20ac],
        &[0xd83d, 0xde00],
        &[0xd800],
        &[0xde00],
    ];
    prop::collection::vec(prop::sample::select(pieces.to_vec()), 0..12).prop_map(|p| p.concat())
}

fn template() -> impl Strategy<Value = String> {
    let pieces = ["$$", "$&", "$`", "$'", "$1", "$01", "$<x>", "$<", "$", "x", "\\u20ac"];
    prop::collection::vec(prop::sample::select(pieces.to_vec()), 0..5).prop_map(|p| format!("\"{}\"", p.concat()))
}

fn position() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["undefined", "-1", "0", "1", "3", "100", "NaN", "Infinity", "-Infinity", "2.5"])
}

fn limit() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["undefined", "0", "1", "2", "5", "-1", "4294967297"])
}

/// Escapes a needle for use as a RegExp source (code units outside ASCII go through `\uXXXX`).
fn regexp_source(units: &[u16]) -> String {
    units
        .iter()
        .map(|&u| match u {
            0x61 | 0x62 => char::from(u as u8).to_string(),
            _ => format!("\\u{u:04x}"),
        })
        .collect()
}

fn call() -> impl Strategy<Value = String> {
    let flags = prop::sample::select(vec!["g", "gu", "gi", "gy", "gm", ""]);
    (text(), text(), template(), position(), limit(), flags, 0..14usize).prop_map(
        |(hay, needle, template, position, limit, flags, op)| {
            let (h, n) = (literal(&hay), literal(&needle));
            let re = format!("new RegExp(\"{}\", \"{flags}\")", regexp_source(&needle).replace('\\', "\\\\"));
            match op {
                0 => format!("return {h}.split({n}, {limit})"),
                1 => format!("return {h}.replace({n}, {template})"),
                2 => format!("return {h}.replaceAll({n}, {template})"),
                3 => format!("return {h}.indexOf({n}, {position})"),
                4 => format!("return {h}.lastIndexOf({n}, {position})"),
                5 => format!("return {h}.includes({n}, {position})"),
                6 => format!("return {h}.startsWith({n}, {position})"),
                7 => format!("return {h}.endsWith({n}, {position})"),
                8 => format!("return {h}.split({re}, {limit})"),
                9 => format!("return {h}.replace({re}, {template})"),
                10 => format!("return {h}.match({re})"),
                11 => format!("return [...{h}.matchAll({re})]"),
                12 => format!("return {h}.replaceAll({n}, function (m, p) {{ return \"<\" + m + p + \">\"; }})"),
                _ => format!("return {h}.repeat(300).split({re}, {limit}).length + \":\" + {h}.repeat(300).replace({re}, {template}).length"),
            }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn generated_calls_match_node(bodies in prop::collection::vec(call(), 150)) {
        let diffs = differences(&bodies, true);
        prop_assert!(diffs.is_empty(), "{} cases differ from node:\n{}", diffs.len(), diffs.join("\n"));
    }
}
