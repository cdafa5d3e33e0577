//! Snapshots on the real 130-tool catalog: the quick index (ours and the reference's packing), hints and
//! declaration files, plus the prompt-economy figures.

use codemode_catalog::{Catalog, CatalogOptions, ToolSource, index};

use crate::{build, real_tools};

fn native() -> Catalog {
    build(real_tools(ToolSource::Openclaw))
}

#[test]
fn quick_index_names_at_least_117_tools_within_the_reference_size() {
    let catalog = native();
    assert_eq!(catalog.entries().len(), 130);
    let ours = catalog.quick_index();
    let reference = catalog.reference_quick_index();
    println!(
        "reference: {} bytes, named {}, omitted {}; ours: {} bytes, named {}, omitted {}",
        reference.text.len(),
        reference.named,
        reference.omitted,
        ours.text.len(),
        ours.named,
        ours.omitted
    );
    assert!(ours.text.chars().count() <= index::DEFAULT_BUDGET);
    assert!(ours.text.len() <= reference.text.len(), "ours must not be larger than the reference's index");
    assert!(ours.named >= 117, "named only {}", ours.named);
    assert_eq!(ours.named + ours.omitted, 130);
    insta::assert_snapshot!("quick_index", ours.text);
    insta::assert_snapshot!("reference_quick_index", reference.text);
}

#[test]
fn quick_index_is_whole_when_it_fits() {
    let catalog = build(real_tools(ToolSource::Openclaw).into_iter().take(5).collect());
    let index = catalog.quick_index();
    assert_eq!((index.named, index.omitted), (5, 0));
    assert!(index.text.ends_with("Call these globals directly; use catalog.search(query) when lookup is ambiguous."));
}

#[test]
fn quick_index_under_a_tiny_budget_counts_what_it_omits() {
    let catalog = native();
    let index = catalog.quick_index_with_budget(1_000);
    assert!(index.text.chars().count() <= 1_000);
    assert_eq!(index.named + index.omitted, 130);
    assert!(index.text.ends_with(&format!(
        "{} additional tools omitted from this prompt index. Use catalog.search(query); results are callable.",
        index.omitted
    )));
}

#[test]
fn hints_of_every_tool() {
    let catalog = native();
    let text: String = catalog
        .entries()
        .iter()
        .map(|e| format!("{} {} -> {}\n", e.callable_name, e.input_hint, e.output_hint.as_deref().unwrap_or("?")))
        .collect();
    insta::assert_snapshot!("hints", text);
}

#[test]
fn untrusted_sources_get_no_hints() {
    let catalog = build(real_tools(ToolSource::Client));
    assert!(catalog.entries().iter().all(|e| e.input_hint == "unknown" && e.output_hint.is_none()));
    let all = catalog.all();
    assert!(all.iter().all(|h| h.source == "client"));
}

#[test]
fn tool_declaration_files() {
    let catalog = native();
    let mut text = String::new();
    for name in [
        "search_repositories",
        "browser_take_screenshot",
        "get_structured_content",
        "API_post_search",
        "create_entities",
    ] {
        let file = catalog.api_read(&format!("tools/{name}.d.ts")).expect("file exists");
        assert!(file.chars().count() <= codemode_catalog::dts::MAX_DTS_CHARS);
        text.push_str(&format!("// ===== tools/{name}.d.ts\n{file}\n"));
    }
    insta::assert_snapshot!("tool_dts", text);
}

#[test]
fn mcp_namespace_and_declaration_files() {
    let catalog = Catalog::build(real_tools(ToolSource::Mcp), CatalogOptions::default()).unwrap();
    assert!(catalog.entries().is_empty(), "MCP tools are not globals");
    assert_eq!(catalog.len(), 130);
    assert_eq!(catalog.source_counts().mcp, 130);
    let globals: Vec<&str> = catalog.mcp_servers().iter().map(|s| s.global_name.as_str()).collect();
    assert_eq!(
        globals,
        [
            "everything",
            "filesystem",
            "memory",
            "github",
            "gitlab",
            "slack",
            "sequentialThinking",
            "playwright",
            "notion",
            "postgres"
        ]
    );
    let entry = catalog.mcp_tool("github", "createIssue").expect("MCP.github.createIssue");
    assert_eq!(entry.definition.name, "create_issue");
    assert_eq!(catalog.mcp_tool("notion", "apiGetUser").unwrap().definition.name, "API-get-user");
    // Seed 000: search covers MCP tools too; their handles name their namespace path and declaration file.
    let found = catalog.search("create issue", None).unwrap();
    let first = found.first().expect("an MCP match");
    assert!(first.callable_name.starts_with("MCP.") && first.callable_name.ends_with(".createIssue"), "{first:?}");
    assert_eq!(
        first.api_path.as_deref(),
        Some(format!("mcp/{}.d.ts", first.callable_name.split('.').nth(1).unwrap()).as_str())
    );
    assert!(catalog.all().is_empty());
    let files: Vec<String> = catalog.api_list("mcp").unwrap().into_iter().map(|f| f.path).collect();
    assert_eq!(files.len(), 11);
    insta::assert_snapshot!("mcp_index_dts", catalog.api_read("mcp/index.d.ts").unwrap());
    insta::assert_snapshot!("mcp_slack_dts", catalog.api_read("mcp/slack.d.ts").unwrap());
    let github = catalog.api_read("mcp/github.d.ts").unwrap();
    assert!(github.contains("declare namespace MCP.github {"));
    assert!(github.contains("function createIssue(input: {"));
}

#[test]
fn a_gated_tool_keeps_its_policy_note_in_the_name_tier() {
    let names: Vec<String> = (0..40).map(|i| format!("tool_number_{i:02}")).collect();
    let note = codemode_catalog::policy_note(codemode_config::Decision::Ask);
    let items: Vec<index::IndexItem<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, name)| index::IndexItem {
            name,
            input: "{ path: string, content: string, mode?: string }",
            output: None,
            note: if i == 39 { note } else { None },
        })
        .collect();
    let index = index::build(&items, 1_200);
    assert_eq!(index.omitted, 0, "every name fits bare: {}", index.text);
    let tier = index.text.split(index::NAMES_HEADING).nth(1).expect("a name tier");
    assert!(tier.contains("tool_number_39 (needs approval)"), "{}", index.text);
    assert!(!tier.contains("tool_number_38 ("));
}
