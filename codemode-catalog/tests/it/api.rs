//! The virtual API files: listing, reading, and path checks.

use codemode_catalog::{CatalogError, ToolSource};

use crate::{build, tool};

#[test]
fn list_and_read() {
    let mut mcp = tool("create_issue", ToolSource::Mcp);
    mcp.server = Some("github".into());
    let catalog = build(vec![tool("web-search", ToolSource::Openclaw), tool("read", ToolSource::Client), mcp]);
    let all: Vec<String> = catalog.api_list("").unwrap().into_iter().map(|f| f.path).collect();
    assert_eq!(all, ["results.d.ts", "tools/read.d.ts", "tools/web_search.d.ts", "mcp/index.d.ts", "mcp/github.d.ts"]);
    assert!(catalog.api_read("results.d.ts").unwrap().contains("load(id: string): Promise<unknown>;"));
    let with_content = catalog.api_files_with_content();
    assert_eq!(with_content.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), all);
    assert_eq!(with_content[2].content, catalog.api_read("tools/web_search.d.ts").unwrap());
    let tools: Vec<String> = catalog.api_list("tools/").unwrap().into_iter().map(|f| f.path).collect();
    assert_eq!(tools.len(), 2);
    assert!(catalog.api_list("nothing").unwrap().is_empty());
    let file = catalog.api_read("tools/web_search.d.ts").unwrap();
    assert!(file.contains("declare function web_search(input: Record<string, unknown>): Promise<unknown>;"), "{file}");
    assert!(catalog.api_read("mcp/github.d.ts").unwrap().contains("function createIssue("));
}

#[test]
fn rejects_unknown_paths_and_dot_segments() {
    let catalog = build(vec![tool("read", ToolSource::Openclaw)]);
    for path in ["tools/../secret", "./tools/read.d.ts", "tools/./read.d.ts", "..", "mcp/.."] {
        assert!(matches!(catalog.api_read(path), Err(CatalogError::InvalidApiPath { .. })), "{path}");
    }
    assert!(matches!(catalog.api_list("tools/.."), Err(CatalogError::InvalidApiPath { .. })));
    for path in ["tools/nope.d.ts", "mcp/index.d.ts", "mcp/github.d.ts", "", "tools/read"] {
        assert!(matches!(catalog.api_read(path), Err(CatalogError::UnknownApiPath { .. })), "{path}");
    }
}

#[test]
fn mcp_api_is_the_header_its_declaration_promises() {
    let mut create = tool("create_issue", ToolSource::Mcp);
    create.server = Some("github".into());
    create.parameters = serde_json::json!({ "type": "object", "properties": { "title": { "type": "string" } } });
    let mut list = tool("list_issues", ToolSource::Mcp);
    list.server = Some("github".into());
    let catalog = build(vec![create, list]);
    let all = catalog.mcp_api("github", None, false).unwrap();
    assert_eq!(all["server"], "github");
    assert_eq!(all["tools"], serde_json::json!(["createIssue", "listIssues"]));
    assert_eq!(all["declaration"], catalog.api_read("mcp/github.d.ts").unwrap());
    assert!(all.get("schema").is_none());
    for name in ["createIssue", "create_issue"] {
        let one = catalog.mcp_api("github", Some(name), true).unwrap();
        assert_eq!(one["tools"], serde_json::json!(["createIssue"]));
        assert!(one["declaration"].as_str().unwrap().contains("function createIssue(input: {"));
        assert!(!one["declaration"].as_str().unwrap().contains("listIssues"));
        assert_eq!(one["schema"]["properties"]["title"]["type"], "string");
    }
    assert!(matches!(catalog.mcp_api("github", Some("nope"), false), Err(CatalogError::UnknownMcpTool { .. })));
    assert!(matches!(catalog.mcp_api("gitlab", None, false), Err(CatalogError::UnknownMcpTool { .. })));
}
