//! The catalog's integration tests, one binary: names, hints and index snapshots on the real 130-tool catalog,
//! search ranking, validation messages, API files and the naming invariants as properties.

mod api;
mod names;
mod real;
mod search;
mod validate;

use codemode_catalog::{Catalog, CatalogOptions, ToolDefinition, ToolSource};
use serde_json::{Value, json};

/// The 130 tools ten npm MCP servers publish, taken as native (openclaw) tools. Names that two servers share
/// (github and gitlab both have `create_issue`) are kept once under the plain name and once as `<server>_<name>`,
/// so all 130 tools stay distinct, as in the reference measurement.
pub fn real_tools(source: ToolSource) -> Vec<ToolDefinition> {
    let raw: Value = serde_json::from_str(include_str!("../data/mcp-tools-130.json")).expect("fixture is JSON");
    let mut out: Vec<ToolDefinition> = Vec::new();
    let servers = raw.as_object().expect("fixture is keyed by server");
    for (server, tools) in servers {
        for t in tools.as_array().expect("tool list") {
            let mut name = t["name"].as_str().expect("name").to_owned();
            if source != ToolSource::Mcp && out.iter().any(|d| d.name == name) {
                name = format!("{}_{name}", server.replace('-', "_"));
            }
            let mut definition = ToolDefinition::new(
                name,
                t.get("description").and_then(Value::as_str).unwrap_or(""),
                t.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"})),
            )
            .source(source);
            definition.label = t.get("title").and_then(Value::as_str).map(str::to_owned);
            definition.output_schema = t.get("outputSchema").cloned();
            definition.server = (source == ToolSource::Mcp).then(|| server.clone());
            out.push(definition);
        }
    }
    out
}

/// A plain tool definition.
pub fn tool(name: &str, source: ToolSource) -> ToolDefinition {
    ToolDefinition::new(name, format!("The {name} tool."), json!({"type": "object", "properties": {}})).source(source)
}

/// Builds a catalog with default options.
pub fn build(defs: Vec<ToolDefinition>) -> Catalog {
    Catalog::build(defs, CatalogOptions::default()).expect("catalog builds")
}
