//! Callable names: the reference's table, shadowing, filtering, and the naming invariants as properties.

use codemode_catalog::globals::GUEST_GLOBALS;
use codemode_catalog::names::{RESERVED_WORDS, is_identifier, is_reserved_global, reserved_globals};
use codemode_catalog::{Catalog, CatalogOptions, ToolSource};
use proptest::prelude::*;

use crate::{build, tool};

fn callable_of(catalog: &Catalog, tool_name: &str) -> String {
    catalog.entries().iter().find(|e| e.definition.name == tool_name).expect("entry").callable_name.clone()
}

#[test]
fn reference_table() {
    let catalog =
        build(["web-search", "1password", "delete", "JSON", "read"].map(|n| tool(n, ToolSource::Openclaw)).to_vec());
    assert_eq!(callable_of(&catalog, "web-search"), "web_search");
    assert_eq!(callable_of(&catalog, "1password"), "tool_1password");
    assert_eq!(callable_of(&catalog, "read"), "read");
    let delete = callable_of(&catalog, "delete");
    let json = callable_of(&catalog, "JSON");
    insta::assert_snapshot!(format!("delete -> {delete}\nJSON -> {json}"), @r"
    delete -> delete_6a0beb5c
    JSON -> JSON_d5008803
    ");
    assert!(delete.starts_with("delete_") && delete.len() == "delete_".len() + 8);
    assert!(json.starts_with("JSON_") && json.len() == "JSON_".len() + 8);
}

#[test]
fn catalog_all_and_api_list_sort_as_locale_compare_does() {
    let catalog = build(
        ["JSON", "delete", "read", "Read_all", "read2", "read_all", "a-b"]
            .map(|n| tool(n, ToolSource::Openclaw))
            .to_vec(),
    );
    let all: Vec<String> = catalog.all().into_iter().map(|h| h.callable_name).collect();
    // Node: [...].sort((a, b) => a.localeCompare(b)).
    let expected = [
        "a_b",
        &callable_of(&catalog, "delete"),
        &callable_of(&catalog, "JSON"),
        "read",
        "read_all",
        "Read_all",
        "read2",
    ]
    .map(str::to_owned);
    assert_eq!(all, expected);
    let listed: Vec<String> = catalog.api_list("tools/").unwrap().into_iter().map(|f| f.path).collect();
    assert_eq!(listed, expected.map(|n| format!("tools/{n}.d.ts")));
}

#[test]
fn reserved_globals_are_never_taken() {
    let names: Vec<&str> = GUEST_GLOBALS.iter().copied().chain(["__openclawResult"]).collect();
    let catalog = build(names.iter().map(|n| tool(n, ToolSource::Openclaw)).collect());
    assert_eq!(catalog.entries().len(), names.len());
    for e in catalog.entries() {
        assert_ne!(e.callable_name, e.definition.name, "{} kept a reserved spelling", e.definition.name);
    }
    assert_eq!(callable_of(&catalog, "__openclawResult"), "tool___openclawResult");
}

/// Regression: the prelude installs `DOMException`, which the reserved list once missed, so a tool of that name
/// took the spelling and its function replaced the global.
#[test]
fn dom_exception_is_reserved() {
    assert!(is_reserved_global("DOMException"));
    let catalog = build(vec![tool("DOMException", ToolSource::Client)]);
    let callable = callable_of(&catalog, "DOMException");
    assert!(callable.starts_with("DOMException_") && callable.len() == "DOMException_".len() + 8, "{callable}");
}

#[test]
fn exact_safe_name_wins_over_normalized_neighbour() {
    let catalog = build(vec![tool("llm-task", ToolSource::Openclaw), tool("llm_task", ToolSource::Client)]);
    assert_eq!(callable_of(&catalog, "llm_task"), "llm_task");
    assert!(callable_of(&catalog, "llm-task").starts_with("llm_task_"));
}

#[test]
fn client_shadows_and_first_native_wins() {
    let mut core = tool("read", ToolSource::Openclaw);
    core.description = "core".into();
    let mut plugin = tool("read", ToolSource::BundledPlugin);
    plugin.description = "plugin".into();
    let mut client = tool("read", ToolSource::Client);
    client.description = "client".into();
    let catalog = build(vec![client.clone(), plugin.clone(), core.clone()]);
    assert_eq!(catalog.entries().len(), 1);
    assert_eq!(catalog.by_callable("read").unwrap().definition.description, "client");
    let catalog = build(vec![plugin, core]);
    assert_eq!(catalog.by_callable("read").unwrap().definition.description, "core");
}

#[test]
fn denied_control_and_direct_only_tools_are_absent() {
    let mut direct = tool("image", ToolSource::Openclaw);
    direct.direct_only = true;
    let defs = vec![
        tool("secret", ToolSource::Openclaw),
        tool("tool_search", ToolSource::Openclaw),
        tool("tool_describe", ToolSource::Openclaw),
        tool("tool_call", ToolSource::Openclaw),
        tool("tool_search_code", ToolSource::Openclaw),
        tool("exec", ToolSource::Openclaw),
        tool("wait", ToolSource::Openclaw),
        direct,
    ];
    let options = CatalogOptions { denied: vec!["secret".into()], ..CatalogOptions::default() };
    let catalog = Catalog::build(defs, options).unwrap();
    let names: Vec<&str> = catalog.entries().iter().map(|e| e.callable_name.as_str()).collect();
    // The control tools never enter a catalog; a host's own `exec` (a shell) or `wait` is an ordinary tool, as in
    // the reference (`shouldCatalogTool` skips only tools marked as code-mode controls).
    assert_eq!(names, ["exec", "wait"], "only the host's exec and wait tools stay cataloged");
    assert_eq!(catalog.direct_only().len(), 1);
    assert!(catalog.search("secret", None).unwrap().is_empty());
    assert!(catalog.api_read("tools/secret.d.ts").is_err());
    assert!(catalog.by_callable("image").is_none());
}

#[test]
fn redaction_replaces_ids_never_leaks_them() {
    let mut mcp = tool("create_issue", ToolSource::Mcp);
    mcp.server = Some("github".into());
    let catalog = build(vec![tool("web-search", ToolSource::Openclaw), mcp]);
    let message = "tool openclaw::web-search failed; then mcp:github:create_issue failed";
    assert_eq!(catalog.redact(message), "tool web_search failed; then MCP.github.createIssue failed");
}

fn name_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z_$][a-zA-Z0-9_$]{0,8}",
        "[a-z0-9 .\\-]{1,8}",
        prop::sample::select(
            RESERVED_WORDS.iter().copied().chain(reserved_globals()).map(str::to_owned).collect::<Vec<_>>()
        ),
    ]
}

fn source_strategy() -> impl Strategy<Value = ToolSource> {
    prop::sample::select(vec![
        ToolSource::Openclaw,
        ToolSource::BundledPlugin,
        ToolSource::ExternalPlugin,
        ToolSource::Client,
    ])
}

proptest! {
    #[test]
    fn callable_names_are_unique_valid_unreserved_and_order_independent(
        tools in prop::collection::vec((name_strategy(), source_strategy()), 0..40),
        seed in any::<u64>(),
    ) {
        let defs: Vec<_> = tools.iter().map(|(n, s)| tool(n, *s)).collect();
        let catalog = build(defs.clone());
        let mut seen = std::collections::HashSet::new();
        for e in catalog.entries() {
            prop_assert!(is_identifier(&e.callable_name), "{} is not an identifier", e.callable_name);
            prop_assert!(!RESERVED_WORDS.contains(&e.callable_name.as_str()));
            prop_assert!(!is_reserved_global(&e.callable_name));
            prop_assert!(seen.insert(e.callable_name.clone()), "duplicate {}", e.callable_name);
        }
        // Reordering must not change any name. Winners of a shared name legitimately depend on order, so the
        // stability check runs on one definition per name.
        let k = seed as usize;
        let mut unique = Vec::new();
        for d in &defs {
            if !unique.iter().any(|u: &codemode_catalog::ToolDefinition| u.name == d.name) {
                unique.push(d.clone());
            }
        }
        let mut rotated = unique.clone();
        rotated.rotate_left(k % unique.len().max(1));
        let a: Vec<(String, String)> = build(unique).entries().iter().map(|e| (e.definition.name.clone(), e.callable_name.clone())).collect();
        let b: Vec<(String, String)> = build(rotated).entries().iter().map(|e| (e.definition.name.clone(), e.callable_name.clone())).collect();
        prop_assert_eq!(a, b);
    }
}
