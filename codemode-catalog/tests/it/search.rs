//! Search: exact names, ranking on the real catalog, tokenization, limits.

use codemode_catalog::search::{split_words, stem};
use codemode_catalog::{CatalogError, ToolSource};
use serde_json::json;

use crate::{build, real_tools, tool};

fn top(query: &str, n: usize) -> Vec<String> {
    let catalog = build(real_tools(ToolSource::Openclaw));
    catalog.search(query, Some(&json!(n))).unwrap().into_iter().map(|h| h.callable_name).collect()
}

#[test]
fn exact_name_returns_only_that_handle() {
    let catalog = build(real_tools(ToolSource::Openclaw));
    let hits = catalog.search("  read_file ", None).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].callable_name, "read_file");
    let hits = catalog.search("API-get-user", None).unwrap();
    assert_eq!(hits.iter().map(|h| h.callable_name.as_str()).collect::<Vec<_>>(), ["API_get_user"]);
    let hits = catalog.search("BROWSER_CLICK", None).unwrap();
    assert_eq!(hits[0].callable_name, "browser_click");
    assert_eq!(hits.len(), 1);
}

#[test]
fn ranking_cases() {
    let cases: &[(&str, &str)] = &[
        ("take a screenshot of the page", "browser_take_screenshot"),
        ("post a message to a slack channel", "slack_post_message"),
        ("list directory contents", "list_directory"),
        ("merge pull request", "merge_pull_request"),
        ("run a sql query", "query"),
        ("search github repositories", "search_repositories"),
        ("navigate to url", "browser_navigate"),
        ("add emoji reaction", "slack_add_reaction"),
        ("knowledge graph entities", "create_entities"),
        ("move or rename files", "move_file"),
    ];
    let mut report = String::new();
    for (query, expected) in cases {
        let hits = top(query, 3);
        report.push_str(&format!("{query} => {}\n", hits.join(", ")));
        assert!(hits.iter().take(3).any(|h| h == expected), "{query}: expected {expected} in {hits:?}");
    }
    insta::assert_snapshot!("ranking", report);
}

#[test]
fn ranking_is_deterministic_and_limited() {
    let a = top("file", 5);
    assert_eq!(a.len(), 5);
    assert_eq!(a, top("file", 5));
    let catalog = build(real_tools(ToolSource::Openclaw));
    assert_eq!(catalog.search("file", None).unwrap().len(), 8, "default limit");
    assert!(catalog.search("zzzqqq", None).unwrap().is_empty());
    assert!(catalog.search("   ", None).unwrap().is_empty());
}

#[test]
fn limit_errors_are_errors_not_partial_lists() {
    let catalog = build(vec![tool("read", ToolSource::Openclaw)]);
    for bad in [json!(0), json!(-1), json!(1.5), json!("3"), json!(true), json!([1])] {
        assert_eq!(catalog.search("read", Some(&bad)), Err(CatalogError::InvalidLimit), "{bad}");
    }
    assert_eq!(CatalogError::InvalidLimit.to_string(), "limit must be a positive integer.");
    assert_eq!(catalog.search("read", Some(&json!(51))), Err(CatalogError::LimitTooLarge { max: 50 }));
    assert!(catalog.search("read", Some(&json!(50))).is_ok());
    assert!(catalog.search("read", Some(&json!(2.0))).is_ok());
    assert!(catalog.search("read", Some(&json!(null))).is_ok());
}

#[test]
fn tokenizer_splits_identifiers() {
    let mut words = Vec::new();
    for text in ["get_pull_request", "getPullRequest", "get-pull-request", "HTTPServer", "API-post-search", "v2Api"] {
        split_words(text, &mut words);
        words.push("|".into());
    }
    assert_eq!(
        words.join(" "),
        "get pull request | get pull request | get pull request | http server | api post search | v 2 api |"
    );
    assert_eq!(stem("entries"), "entry");
    assert_eq!(stem("running"), "run");
    assert_eq!(stem("created"), stem("creates"));
    assert_eq!(stem("status"), "status");
    assert_eq!(stem("files"), stem("file"));
}

#[test]
fn handles_carry_bounded_metadata_without_ids() {
    let catalog = build(real_tools(ToolSource::Openclaw));
    let handle = &catalog.search("get-structured-content", None).unwrap()[0];
    let json = serde_json::to_value(handle).unwrap();
    insta::assert_json_snapshot!("handle", json);
    let text = json.to_string();
    assert!(!text.contains("openclaw::"), "no catalog id in {text}");
    let describe = catalog.describe("get_structured_content").unwrap();
    assert!(describe.get("parameters").is_some());
    assert!(describe.get("outputSchema").is_some(), "trusted output schema is described");
}
