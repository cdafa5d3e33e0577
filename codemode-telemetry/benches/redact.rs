//! What an activity record costs per nested call: [`Redactor::preview`] of a tool's arguments and of its result
//! (compact JSON capped at 2 x 512 + 64 bytes, then every token shape and credential literal masked), on the
//! `{}` / `{"ok":true}` of the exec bench's `ping` and on a 2 KB result that is cut.

use std::hint::black_box;

use codemode_telemetry::Redactor;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn bench(c: &mut Criterion) {
    let redactor = Redactor::new();
    let empty = json!({});
    let ok = json!({ "ok": true });
    let rows: Vec<_> = (0..40)
        .map(|i| json!({ "id": i, "path": format!("src/module_{i}.rs"), "size": 1000 + i, "kind": "file" }))
        .collect();
    let large = json!({ "entries": rows, "apiKey": "not-a-real-key-but-masked" });
    let mut group = c.benchmark_group("preview");
    group.bench_function("args_empty", |b| b.iter(|| redactor.preview(black_box(&empty), 512)));
    group.bench_function("result_ok", |b| b.iter(|| redactor.preview(black_box(&ok), 512)));
    group.bench_function("result_2kb_cut", |b| b.iter(|| redactor.preview(black_box(&large), 512)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
