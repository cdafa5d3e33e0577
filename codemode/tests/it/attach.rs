//! `attach(block)`: an MCP content block a program hands to the caller, checked as the program calls it and counted
//! against the output budget (refused whole when it does not fit).

use codemode::{Limits, OutputItem, RunScope};
use serde_json::json;

use crate::support::{engine, engine_with, value};

#[tokio::test]
async fn attach_adds_a_content_block_to_the_output_and_refuses_other_values() {
    let (engine, _) = engine();
    let code = "attach({ type: 'image', data: 'aGk=', mimeType: 'image/png' }); \
                attach({ type: 'resource_link', uri: 'file:///a.txt', name: 'a.txt' }); \
                const refused = []; \
                for (const bad of [{ type: 'image' }, { type: 'text', text: 'x' }, 'image']) { \
                  try { attach(bad) } catch (e) { refused.push(e.name + ': ' + e.message) } } \
                return refused";
    let result = engine.exec(json!({ "title": "attach", "code": code }), RunScope::default()).await;
    let refused = value(&result);
    assert_eq!(refused[0], "TypeError: attach(block): a \"image\" block needs a string \"data\"", "{refused}");
    assert!(refused[1].as_str().is_some_and(|m| m.contains("not type \"text\"")), "{refused}");
    assert!(refused[2].as_str().is_some_and(|m| m.contains("takes an MCP content block")), "{refused}");
    let blocks: Vec<_> = result
        .output()
        .iter()
        .filter_map(|item| match item {
            OutputItem::Attachment { block } => Some(block.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        blocks,
        [
            json!({ "type": "image", "data": "aGk=", "mimeType": "image/png" }),
            json!({ "type": "resource_link", "uri": "file:///a.txt", "name": "a.txt" }),
        ]
    );
}

#[tokio::test]
async fn an_attachment_beyond_the_output_budget_is_refused_whole() {
    let (engine, _) = engine_with(Limits { timeout_ms: 2_000, max_output_bytes: 2048, ..Limits::default() }, false);
    // 3000 bytes of data do not fit half of a 2 KiB budget; the small link after it does.
    let code = "attach({ type: 'image', data: 'A'.repeat(3000), mimeType: 'image/png' }); \
                attach({ type: 'resource_link', uri: 'file:///a.txt', name: 'a.txt' }); return 1";
    let result = engine.exec(json!({ "title": "attach", "code": code }), RunScope::default()).await;
    assert_eq!(value(&result), json!(1));
    let output = result.output();
    assert_eq!(output.len(), 2, "{output:?}");
    assert!(
        matches!(&output[0], OutputItem::Text { text } if text.contains("the image block of") && text.contains("does not fit the output budget")),
        "{output:?}"
    );
    assert!(matches!(&output[1], OutputItem::Attachment { block } if block["type"] == "resource_link"), "{output:?}");
}
