//! Engine benchmarks: realistic model programs over 1 MB of log text and a 10,000-record JSON tool result,
//! run in-process on a fresh Boa context with `codemode_worker::natives::install`. Not the worker or IPC path.
//! Targets (PERFORMANCE-NOTES.md): every workload within 2x of quickjs-wasi (`benches/node`), and the
//! `split_replaceall_match` program under 100 ms. Set `CODEMODE_BENCH_BUILTIN=1` to also time Boa's own
//! built-ins without `install` (slow: minutes).

use std::hint::black_box;

use boa_engine::{Context, Source};
use criterion::{Criterion, criterion_group, criterion_main};

const SETUP: &str = include_str!("workloads/setup.js");

/// The workloads, by name; each is one script whose completion value is a short summary string.
const WORKLOADS: &[(&str, &str)] = &[
    ("lines", include_str!("workloads/lines.js")),
    ("grep", include_str!("workloads/grep.js")),
    ("regex", include_str!("workloads/regex.js")),
    ("replace", include_str!("workloads/replace.js")),
    ("split_replaceall_match", include_str!("workloads/split_replaceall_match.js")),
    ("group_sort", include_str!("workloads/group_sort.js")),
    ("json_roundtrip", include_str!("workloads/json_roundtrip.js")),
    ("string_build", include_str!("workloads/string_build.js")),
];

/// Single-operation probes for the pathological paths documented in PERFORMANCE-NOTES.md (no target).
const PROBES: &[(&str, &str)] = &[
    ("json_parse", include_str!("workloads/probes/json_parse.js")),
    ("json_stringify", include_str!("workloads/probes/json_stringify.js")),
    ("json_pretty", include_str!("workloads/probes/json_pretty.js")),
    ("json_deep", include_str!("workloads/probes/json_deep.js")),
    ("sort_comparator", include_str!("workloads/probes/sort_comparator.js")),
    ("concat_loop", include_str!("workloads/probes/concat_loop.js")),
    ("array_join", include_str!("workloads/probes/array_join.js")),
    ("array_includes", include_str!("workloads/probes/array_includes.js")),
    ("key_churn", include_str!("workloads/probes/key_churn.js")),
];

/// A fresh context with the workload inputs built; `install` selects our string built-ins or Boa's.
fn context(install: bool) -> Context {
    let mut context =
        Context::builder().instructions_remaining(usize::MAX).build().expect("a default context always builds");
    if install {
        codemode_worker::natives::install(&mut context).expect("install succeeds on a fresh context");
    }
    context.eval(Source::from_bytes(SETUP)).expect("the setup script runs");
    context
}

fn run(context: &mut Context, script: &str) -> String {
    let value = context.eval(Source::from_bytes(script)).expect("the workload runs");
    value.to_string(context).expect("a summary string").to_std_string_escaped()
}

fn workloads(c: &mut Criterion) {
    let mut group = c.benchmark_group("workload");
    group.sample_size(10);
    for &(name, script) in WORKLOADS {
        let mut context = context(true);
        println!("{name}: {}", run(&mut context, script));
        group.bench_function(name, |b| b.iter(|| black_box(run(&mut context, script))));
    }
    group.finish();
    let mut group = c.benchmark_group("probe");
    group.sample_size(10);
    for &(name, script) in PROBES {
        let mut context = context(true);
        group.bench_function(name, |b| b.iter(|| black_box(run(&mut context, script))));
    }
    group.finish();
    if std::env::var_os("CODEMODE_BENCH_BUILTIN").is_some() {
        let mut group = c.benchmark_group("builtin");
        group.sample_size(10);
        for &(name, script) in WORKLOADS {
            let mut context = context(false);
            group.bench_function(name, |b| b.iter(|| black_box(run(&mut context, script))));
        }
        group.finish();
    }
}

criterion_group!(benches, workloads);
criterion_main!(benches);
