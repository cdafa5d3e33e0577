//! The fail-closed payload check: exactly one exec, one wait, only approved direct-only tools.

use codemode_config::Limits;
use codemode_surface::{SurfaceError, ToolSpec, check_payload, exec_tool, wait_tool};
use serde_json::json;

fn tool(name: &str) -> ToolSpec {
    ToolSpec { name: name.into(), description: String::new(), parameters: json!({ "type": "object" }) }
}

fn surface(extra: &[&str]) -> Vec<ToolSpec> {
    let mut tools = vec![exec_tool("", &Limits::default()), wait_tool()];
    tools.extend(extra.iter().map(|n| tool(n)));
    tools
}

#[test]
fn accepts_the_engaged_surface() {
    let approved = vec!["computer".to_owned(), "view_image".to_owned()];
    check_payload(&surface(&[]), &approved).expect("exec and wait alone");
    check_payload(&surface(&["computer"]), &approved).expect("an approved direct-only tool");
    check_payload(&surface(&["view_image", "computer"]), &approved).expect("order does not matter");
}

#[test]
fn rejects_anything_else() {
    let approved = vec!["computer".to_owned()];
    let cases: Vec<(Vec<ToolSpec>, SurfaceError)> = vec![
        (vec![wait_tool()], SurfaceError::MissingControl { name: "exec" }),
        (vec![exec_tool("", &Limits::default())], SurfaceError::MissingControl { name: "wait" }),
        (vec![], SurfaceError::MissingControl { name: "exec" }),
        (surface(&["wait"]), SurfaceError::Duplicate { name: "wait".into(), count: 2 }),
        (surface(&["computer", "computer"]), SurfaceError::Duplicate { name: "computer".into(), count: 2 }),
        (surface(&["read_file"]), SurfaceError::Unapproved { name: "read_file".into() }),
        (surface(&["tool_search"]), SurfaceError::ToolSearchControl { name: "tool_search".into() }),
        (surface(&["tool_search_code"]), SurfaceError::ToolSearchControl { name: "tool_search_code".into() }),
        (vec![tool("exec"), wait_tool()], SurfaceError::ForeignExec),
    ];
    for (tools, want) in cases {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(check_payload(&tools, &approved), Err(want), "{names:?}");
    }
    // Approval cannot smuggle in a Tool Search control.
    let approved = vec!["tool_call".to_owned()];
    assert!(matches!(check_payload(&surface(&["tool_call"]), &approved), Err(SurfaceError::ToolSearchControl { .. })));
    let message = check_payload(&surface(&["read_file"]), &[]).expect_err("unapproved").to_string();
    assert!(message.contains("read_file") && message.contains("approve it as direct-only"), "{message}");
}
