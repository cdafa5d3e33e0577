//! The surface on the real 130-tool catalog (ten npm MCP servers' tools, taken as native tools): snapshots of what
//! the model reads, and the prompt-economy target (description <= 10,100 bytes, >= 117 tools named).

use codemode_catalog::{Catalog, CatalogOptions, ToolDefinition};
use codemode_config::Limits;
use codemode_surface::{approved_direct, check_payload, exec_schema, visible_tools, wait_schema};
use serde_json::{Value, json};

/// The reference's exec description on this catalog, in bytes.
const REFERENCE_DESCRIPTION_BYTES: usize = 10_100;
/// 90% of the 130 tools.
const MIN_NAMED: usize = 117;

/// The data file as native (trusted) tool definitions, in file order. The eight names github and gitlab share get
/// the later server's prefix (`gitlab_create_issue`), so all 130 tools stay distinct, as in the reference measure.
pub fn tools_130() -> Vec<ToolDefinition> {
    let text = include_str!("../data/mcp-tools-130.json");
    let servers: serde_json::Map<String, Value> = serde_json::from_str(text).expect("the data file is a JSON object");
    let mut seen = std::collections::HashSet::new();
    let mut defs = Vec::new();
    for (server, tools) in servers {
        for tool in tools.as_array().expect("each server holds an array") {
            let raw = tool["name"].as_str().expect("every tool has a name");
            let name = if seen.insert(raw.to_owned()) { raw.to_owned() } else { format!("{server}_{raw}") };
            let mut def = json!({
                "name": name,
                "description": tool["description"],
                "parameters": tool["inputSchema"],
                "source": "openclaw",
            });
            if let Some(output) = tool.get("outputSchema") {
                def["outputSchema"] = output.clone();
            }
            defs.push(definition(def));
        }
    }
    defs
}

/// A definition from its JSON form, so these tests do not break when `ToolDefinition` gains optional fields.
fn definition(value: Value) -> ToolDefinition {
    serde_json::from_value(value).expect("a valid tool definition")
}

fn catalog_130() -> Catalog {
    let defs = tools_130();
    assert_eq!(defs.len(), 130);
    Catalog::build(defs, CatalogOptions::default()).expect("the 130-tool catalog builds")
}

#[test]
fn exec_description_snapshot() {
    let tools = visible_tools(&catalog_130(), &Limits::default());
    insta::assert_snapshot!("exec_description_130", tools[0].description);
}

#[test]
fn visible_tools_are_exec_and_wait_only() {
    let catalog = catalog_130();
    let tools = visible_tools(&catalog, &Limits::default());
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["exec", "wait"]);
    check_payload(&tools, &approved_direct(&catalog)).expect("the built surface passes its own check");
    insta::assert_json_snapshot!("wait_tool", tools[1]);
}

#[test]
fn schemas_use_flat_string_enums_only() {
    insta::assert_json_snapshot!("exec_schema", exec_schema());
    insta::assert_json_snapshot!("wait_schema", wait_schema());
    for schema in [exec_schema(), wait_schema()] {
        let text = schema.to_string();
        for banned in ["oneOf", "anyOf", "allOf", "$ref"] {
            assert!(!text.contains(banned), "{banned} in {text}");
        }
    }
    assert_eq!(exec_schema()["properties"]["language"]["enum"], json!(["javascript", "typescript"]));
    assert_eq!(exec_schema()["required"], json!(["title", "code"]));
}

#[test]
fn description_fits_the_reference_size_and_names_most_tools() {
    let catalog = catalog_130();
    let index = catalog.quick_index();
    let description = &visible_tools(&catalog, &Limits::default())[0].description;
    let bytes = description.len();
    println!("exec description: {bytes} bytes; quick index names {} of 130 (omits {})", index.named, index.omitted);
    assert!(bytes <= REFERENCE_DESCRIPTION_BYTES, "exec description is {bytes} bytes");
    assert!(index.named >= MIN_NAMED, "quick index names only {}", index.named);
    assert_eq!(index.named + index.omitted, 130);
}

#[test]
fn description_embeds_the_effective_limits() {
    let limits =
        Limits::from_json(&json!({ "timeoutMs": 2500, "memoryLimitBytes": 2_097_152, "maxOutputBytes": 3000 }));
    let description = &visible_tools(&catalog_130(), &limits)[0].description;
    for fragment in ["2500 ms per call", "2 MiB inbox", "share 3000 bytes"] {
        assert!(description.contains(fragment), "{fragment:?} missing");
    }
    let defaults = &visible_tools(&catalog_130(), &Limits::default())[0].description;
    for fragment in ["10000 ms per call", "10 MiB inbox", "share 64 KiB"] {
        assert!(defaults.contains(fragment), "{fragment:?} missing");
    }
}

#[test]
fn direct_only_tools_stay_visible_and_controls_never_leak() {
    let mut defs = tools_130();
    let direct =
        |name: &str| definition(json!({ "name": name, "description": format!("{name} directly"), "directOnly": true }));
    defs.push(direct("view_image"));
    defs.push(direct("computer"));
    for control in ["tool_search", "tool_describe", "tool_call", "tool_search_code"] {
        defs.push(direct(control).direct_only(false));
        defs.push(direct(control));
    }
    let catalog = Catalog::build(defs, CatalogOptions::default()).expect("builds");
    let tools = visible_tools(&catalog, &Limits::default());
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["exec", "wait", "view_image", "computer"]);
    assert_eq!(approved_direct(&catalog), ["view_image", "computer"]);
    check_payload(&tools, &approved_direct(&catalog)).expect("passes");
    // Neither the direct-only tools nor the controls are in the hidden catalog or its index.
    let index = catalog.quick_index().text;
    for name in ["view_image", "computer", "tool_search", "tool_call"] {
        assert!(catalog.entries().iter().all(|e| e.definition.name != name), "{name} cataloged");
        assert!(!index.contains(&format!("- {name} ")), "{name} indexed");
    }
}
