//! Criterion benchmark: building the engaged surface (exec with its description and quick index, wait, direct-only
//! tools) for a generated 1,000-tool catalog. Target: under 5 ms.
//!
//! Not a correctness test; the figure goes to the README's performance table. Catalog construction is measured
//! separately (`build_and_surface`) so the surface's own share is visible.

use std::hint::black_box;

use codemode_catalog::{Catalog, CatalogOptions, ToolDefinition};
use codemode_config::Limits;
use codemode_surface::{approved_direct, check_payload, visible_tools};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

const VERBS: &[&str] = &["get", "list", "create", "update", "delete", "search", "send", "read", "write", "move"];
const NOUNS: &[&str] = &["issue", "file", "page", "message", "channel", "user", "repo", "branch", "comment", "order"];

/// `n` tools with realistic schemas: a tenth declare an output, one in a hundred is direct-only.
fn generated(n: usize) -> Vec<ToolDefinition> {
    (0..n)
        .map(|i| {
            let verb = VERBS[i % VERBS.len()];
            let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
            let mut def = json!({
                "name": format!("{verb}_{noun}_{i}"),
                "description": format!("{verb} a {noun} in service {}; returns the {noun} record.", i % 37),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "id": { "type": "string", "description": format!("The {noun} id") },
                        "limit": { "type": "integer", "minimum": 1, "maximum": 100 },
                        "mode": { "type": "string", "enum": ["fast", "full"] },
                    },
                    "required": ["id"],
                },
                "directOnly": i % 100 == 99,
            });
            if i % 10 == 0 {
                def["outputSchema"] = json!({
                    "type": "object",
                    "properties": { "id": { "type": "string" }, "ok": { "type": "boolean" } },
                    "required": ["id", "ok"],
                    "additionalProperties": false,
                });
            }
            serde_json::from_value::<ToolDefinition>(def).expect("a valid generated definition")
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let defs = generated(1_000);
    let catalog = Catalog::build(defs.clone(), CatalogOptions::default()).expect("the generated catalog builds");
    let limits = Limits::from_json(&Value::Null);
    let tools = visible_tools(&catalog, &limits);
    println!(
        "surface: {} visible tools, exec description {} bytes, {} direct-only",
        tools.len(),
        tools[0].description.len(),
        approved_direct(&catalog).len()
    );
    c.bench_function("surface_1000", |b| b.iter(|| visible_tools(black_box(&catalog), black_box(&limits))));
    let approved = approved_direct(&catalog);
    c.bench_function("check_payload_1000", |b| b.iter(|| check_payload(black_box(&tools), black_box(&approved))));
    c.bench_function("build_and_surface_1000", |b| {
        b.iter(|| {
            let catalog = Catalog::build(black_box(defs.clone()), CatalogOptions::default()).expect("builds");
            visible_tools(&catalog, &limits)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
