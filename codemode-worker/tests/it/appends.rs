//! Differential tests of the patched string concatenation (`vendor/boa_string`, append strings) against Node's
//! V8: generated programs concatenate into a few variables every way the language offers, keep old values alive,
//! and print a checksum of every value ever seen, so an append that overwrote a live string shows as a mismatch.

use proptest::prelude::*;

use super::strings::{disagreements, literal, node, text};

/// Checksums every kept value by code unit, with the same arithmetic in both engines.
const PROGRAM: &str = r##"
function __sum(s) { var h = s.length | 0; for (var i = 0; i < s.length; i++) h = (Math.imul(h, 31) + s.charCodeAt(i)) | 0; return s.length + "#" + h; }
var v = ["", "x".repeat(300), "\u00e9".repeat(200), "\u20ac".repeat(260)], kept = [];
(function () { __BODY__
})();
kept.concat(v).map(__sum).join(" ")
"##;

/// One statement over the variables `v[0..4]`; `piece` is a short literal, `times` makes it long.
fn statement() -> impl Strategy<Value = String> {
    (0..4usize, 0..4usize, 0..4usize, text(), 1..400usize, 0..10usize).prop_map(|(i, j, k, piece, times, op)| {
        let p = literal(&piece);
        let long = format!("{p}.repeat({times})");
        match op {
            0 => format!("v[{i}] += {p};"),
            1 => format!("v[{i}] = v[{j}] + {p};"),
            2 => format!("v[{i}] = v[{j}] + v[{k}];"),
            3 => format!("v[{i}] += {long};"),
            4 => format!("kept.push(v[{i}]); v[{i}] += {p};"),
            5 => format!("v[{i}] = v[{j}].slice(0, {times}) + {p};"),
            6 => format!("v[{i}] = `${{v[{j}]}}${{{p}}}${{v[{k}]}}`;"),
            7 => format!("v[{i}] = v[{j}].concat({p}, v[{k}]);"),
            8 => format!("for (var n = 0; n < {times}; n++) v[{i}] += {p} + n;"),
            _ => format!("kept.push(v[{j}]); v[{i}] = {p} + v[{j}];"),
        }
    })
}

#[test]
fn long_accumulations_match_node() {
    // The bench's loop, with two interleaved accumulators and snapshots of each along the way.
    let body = "var a = '', b = ''; for (var i = 0; i < 20000; i++) { a += i + ','; b += '\\u20ac' + i; \
                if (i % 997 === 0) kept.push(a, b); } kept.push(a, b, a + b, b + a);";
    let program = PROGRAM.replace("__BODY__", body);
    let diffs = disagreements(&[body.to_owned()], &[program], |_, _| None);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn node_checksums_are_not_trivial() {
    // The checksum tells apart strings that differ in one unit, so a mismatch cannot hide.
    let programs = ["v[1] += 'a';", "v[1] += 'b';"].map(|body| PROGRAM.replace("__BODY__", body));
    let out = node(&programs);
    assert_ne!(out[0], out[1]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn generated_concatenations_match_node(bodies in prop::collection::vec(
        prop::collection::vec(statement(), 1..40).prop_map(|s| s.join(" ")),
        60,
    )) {
        let programs: Vec<String> = bodies.iter().map(|body| PROGRAM.replace("__BODY__", body)).collect();
        let diffs = disagreements(&bodies, &programs, |_, _| None);
        prop_assert!(diffs.is_empty(), "{} programs differ from node:\n{}", diffs.len(), diffs.join("\n"));
    }
}
