//! The virtual API files: listing, reading, and path checks.

use codemode_catalog::{CatalogError, ToolSource};

use crate::{build, tool};

#[test]
fn list_and_read() {
    let mut mcp = tool("create_issue", ToolSource::Mcp);
    mcp.server = Some("github".into());
    let catalog = build(vec![tool("web-search", ToolSource::Openclaw), tool("read", ToolSource::Client), mcp]);
    let all: Vec<String> = catalog.api_list("").unwrap().into_iter().map(|f| f.path).collect();
    assert_eq!(all, ["tools/read.d.ts", "tools/web_search.d.ts", "mcp/index.d.ts", "mcp/github.d.ts"]);
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
