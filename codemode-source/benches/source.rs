//! `prepare()` on the snippets a model typically sends: about 2 KB of JavaScript (one parse and one walk, the
//! text returned unchanged) and about 2 KB of TypeScript (plus semantic analysis, the strip and codegen); and
//! `redact_source()`, the source an activity record shows, on a one-line cell and on the 2 KB snippet.
//! Target: JavaScript well under 100 µs, TypeScript under 150 µs (the Boa prototype measured 67-91 µs for
//! the strip alone); a cell costs about 1 ms to run, so checks stay a small fraction of it.

use std::hint::black_box;

use codemode_source::{prepare, redact_source};
use codemode_telemetry::Redactor;
use criterion::{Criterion, criterion_group, criterion_main};

const JS: &str = r#"// Collect the largest files under src/ and summarize them by extension.
const entries = await list({ path: "src", recursive: true });
const files = entries.filter((e) => e.type === "file" && !e.path.includes("/target/"));
const byExtension = new Map();
for (const file of files) {
  const dot = file.path.lastIndexOf(".");
  const ext = dot >= 0 ? file.path.slice(dot + 1) : "(none)";
  const bucket = byExtension.get(ext) ?? { count: 0, bytes: 0, largest: null };
  bucket.count += 1;
  bucket.bytes += file.size;
  if (!bucket.largest || file.size > bucket.largest.size) {
    bucket.largest = { path: file.path, size: file.size };
  }
  byExtension.set(ext, bucket);
}
const top = [...files].sort((a, b) => b.size - a.size).slice(0, 5);
const contents = await Promise.all(top.map((f) => read({ path: f.path })));
const summaries = top.map((f, i) => {
  const text = contents[i]?.text ?? "";
  const lines = text.split("\n");
  const todos = lines.filter((l) => /TODO|FIXME/.test(l)).length;
  return { path: f.path, size: f.size, lines: lines.length, todos };
});
const totals = Object.fromEntries(
  [...byExtension.entries()].map(([ext, b]) => [ext, { count: b.count, kb: Math.round(b.bytes / 1024) }]),
);
text(`Scanned ${files.length} files in ${byExtension.size} extensions.`);
for (const s of summaries) {
  text(`${s.path}: ${s.lines} lines, ${s.todos} TODO/FIXME`);
}
const warnings = summaries.filter((s) => s.todos > 3).map((s) => s.path);
if (warnings.length > 0) {
  console.log("files with many TODOs:", warnings.join(", "));
}
const matches = await search({ query: "deprecated", path: "src", limit: 20 });
const deprecated = matches.map((m) => ({ file: m.path, line: m.line, snippet: m.text.trim().slice(0, 80) }));
return { totals, top: summaries, deprecated, scannedAt: new Date(0).toISOString() };
"#;

const TS: &str = r#"interface FileEntry { path: string; size: number; type: "file" | "dir"; tags?: string[] }
type Result<T> = { ok: true; value: T } | { ok: false; error: string };
enum Level { Low = 1, High = 2 }
function classify(e: FileEntry): Level {
  return e.size > 1000 ? Level.High : Level.Low;
}
class Index<K extends string, V> {
  private items = new Map<K, V>();
  constructor(private readonly name: string) {}
  add(k: K, v: V): this { this.items.set(k, v); return this; }
  get(k: K): V | undefined { return this.items.get(k); }
  get size(): number { return this.items.size; }
}
const files: FileEntry[] = (await list({ path: "src" })) as FileEntry[];
function summarize(list: readonly FileEntry[]): Result<Record<string, number>> {
  if (list.length === 0) return { ok: false, error: "empty" };
  const out: Record<string, number> = {};
  for (const f of list) {
    const ext = f.path.split(".").pop() as string;
    out[ext] = (out[ext] ?? 0) + f.size;
  }
  return { ok: true, value: out };
}
const idx = new Index<string, FileEntry>("files");
for (const f of files) idx.add(f.path, f);
const levels = files.map((f): [string, Level] => [f.path, classify(f)]);
const tagged = files.filter((f): f is Required<FileEntry> => !!f.tags?.length);
let total = 0 as number;
for (const f of files) {
  total += f.size!;
}
const r = (await read({ path: "README.md" })) as unknown as { text: string };
declare const something: unknown;
namespace NS { export const k = 1; }
function generic<T,>(x: T): T { return x; }
const s = summarize(files);
if (!s.ok) throw new Error(s.error);
const big = files.filter((f) => classify(f) === Level.High).map((f) => f.path);
abstract class Shape { abstract area(): number; }
class Sq extends Shape { constructor(public side: number) { super(); } area() { return this.side ** 2; } }
const sq = new Sq(3);
const satisfied = { a: 1 } satisfies Record<string, number>;
const words: Array<string> = r.text.split(/\s+/).filter(Boolean);
const counts = new Map<string, number>();
for (const w of words) counts.set(w, (counts.get(w) ?? 0) + 1);
return {
  total, levels, tagged: tagged.length, idx: idx.size, s, big, words: words.length,
  area: sq.area(), ns: NS.k, g: generic<number>(5), satisfied, distinct: counts.size,
};
"#;

fn bench(c: &mut Criterion) {
    assert!(!prepare(JS).expect("the JavaScript snippet is accepted").transformed);
    assert!(prepare(TS).expect("the TypeScript snippet is accepted").transformed);
    let mut group = c.benchmark_group("prepare");
    group.bench_function(format!("javascript_{}b", JS.len()), |b| b.iter(|| prepare(black_box(JS))));
    group.bench_function(format!("typescript_{}b", TS.len()), |b| b.iter(|| prepare(black_box(TS))));
    group.finish();
    // The source shown for a run in its activity: one more parse and walk, then the redactor's patterns.
    let redactor = Redactor::new();
    let ten_calls = "let n = 0; for (let i = 0; i < 10; i++) { if ((await ping({})).ok) n++ } return n";
    let mut group = c.benchmark_group("redact_source");
    group.bench_function(format!("javascript_{}b", ten_calls.len()), |b| {
        b.iter(|| redact_source(black_box(ten_calls), &redactor))
    });
    group.bench_function(format!("javascript_{}b", JS.len()), |b| b.iter(|| redact_source(black_box(JS), &redactor)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
