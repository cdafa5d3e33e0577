//! Criterion benchmarks on a generated 1,000-tool catalog: build plus quick index (target < 5 ms), one warm
//! search (target < 200 µs), and the first search, which also builds the lazy search index.
//!
//! Not a correctness test; the figures go to the README's performance table.

use std::hint::black_box;

use codemode_catalog::{Catalog, CatalogOptions, ToolDefinition, ToolSource};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::json;

const VERBS: &[&str] = &["get", "list", "create", "update", "delete", "search", "send", "read", "write", "move"];
const NOUNS: &[&str] = &[
    "issue",
    "file",
    "page",
    "message",
    "channel",
    "user",
    "repository",
    "branch",
    "comment",
    "record",
    "invoice",
    "ticket",
    "calendar-event",
    "document",
    "image",
    "dataset",
    "report",
    "order",
    "customer",
    "deployment",
];

fn generated(n: usize) -> Vec<ToolDefinition> {
    (0..n)
        .map(|i| {
            let verb = VERBS[i % VERBS.len()];
            let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
            let name = format!("{verb}_{noun}_{i}");
            let description = format!(
                "{verb} a {noun} in workspace {}. Returns the {noun} with its id, owner and timestamps; fails when the \
                 {noun} does not exist or access is denied.",
                i % 17
            );
            let parameters = json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": format!("The {noun} id")},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                    "owner": {"type": "string", "description": "Owner login"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["id"],
                "additionalProperties": false
            });
            let definition = ToolDefinition::new(name, description, parameters).source(if i % 10 == 9 {
                ToolSource::Client
            } else {
                ToolSource::Openclaw
            });
            if i % 3 == 0 {
                definition.output_schema(json!({
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "ok": {"type": "boolean"}},
                    "required": ["id", "ok"],
                    "additionalProperties": false
                }))
            } else {
                definition
            }
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let defs = generated(1_000);
    c.bench_function("build + quick index (1,000 tools)", |b| {
        // The embedder hands its definitions over by value; cloning them is setup, not catalog work.
        b.iter_batched(
            || defs.clone(),
            // The catalog is returned so criterion drops it outside the timing: freeing the embedder's JSON
            // schemas at the end of a run (several ms for 1,000 serde_json trees) is not construction work.
            |defs| {
                let catalog = Catalog::build(defs, CatalogOptions::default()).expect("builds");
                let index = catalog.quick_index();
                (catalog, index)
            },
            BatchSize::SmallInput,
        )
    });
    c.bench_function("first search incl. index build (1,000 tools)", |b| {
        b.iter_batched(
            || Catalog::build(defs.clone(), CatalogOptions::default()).expect("builds"),
            |catalog| {
                let hits = catalog.search("update the customer invoice", None).expect("search");
                (catalog, hits)
            },
            BatchSize::SmallInput,
        )
    });
    let catalog = Catalog::build(defs.clone(), CatalogOptions::default()).expect("builds");
    let _ = catalog.search_index();
    c.bench_function("search (1,000 tools)", |b| {
        b.iter(|| black_box(catalog.search(black_box("update the customer invoice"), None).expect("search")))
    });
}

criterion_group!(catalog, benches);
criterion_main!(catalog);
