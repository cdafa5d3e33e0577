//! The upstream manager against the real npm servers: listing, the seed's result shape, namespace operations,
//! config checks that need the tool list, lazy start, and restart after the server is killed mid-call.

use std::time::Duration;

use codemode_bridge::{CallContext, ProgressSink, ToolHost};
use codemode_catalog::ToolSource;
use codemode_mcp::{ServerConfig, Startup, UpstreamManager};
use serde_json::{Value, json};

use crate::{alive, kill, servers};

async fn start(everything: impl FnOnce(&mut ServerConfig)) -> (tempfile::TempDir, UpstreamManager) {
    let (dir, servers) = servers(everything);
    let manager =
        UpstreamManager::start(&servers, Default::default(), Default::default()).await.expect("upstream servers start");
    assert!(manager.unavailable().is_empty(), "servers failed: {:?}", manager.unavailable());
    (dir, manager)
}

fn cx(server: &str) -> CallContext {
    CallContext::default().with_server(server)
}

#[tokio::test]
async fn lists_tools_as_mcp_definitions_with_deny_and_direct() {
    let (_dir, up) = start(|everything| {
        everything.deny = vec!["get-env".into()];
        everything.direct = vec!["get-tiny-image".into()];
    })
    .await;
    let defs = up.tool_definitions();
    assert!(defs.iter().all(|d| d.source == ToolSource::Mcp));
    let find = |server: &str, name: &str| defs.iter().find(|d| d.server.as_deref() == Some(server) && d.name == name);
    let echo = find("everything", "echo").expect("echo listed");
    assert_eq!(echo.parameters["properties"]["message"]["type"], "string");
    assert!(!echo.direct_only);
    assert!(find("everything", "get-env").is_none(), "denied tool must not be listed");
    assert!(find("everything", "get-tiny-image").expect("direct tool listed").direct_only);
    let read = find("fs", "read_text_file").expect("fs tool listed");
    assert!(read.output_schema.is_some(), "outputSchema is carried over");
    up.shutdown().await;
}

#[tokio::test]
async fn call_results_follow_the_seed_shape() {
    let (_dir, up) = start(|_| {}).await;
    let echo = up.call_tool("echo", json!({"message": "hi"}), cx("everything")).await.expect("echo");
    assert_eq!(echo, json!({"content": [{"type": "text", "text": "Echo: hi"}]}));

    let annotated = up
        .call_tool("get-annotated-message", json!({"messageType": "error", "includeImage": false}), cx("everything"))
        .await
        .expect("annotated message");
    assert_eq!(annotated["content"][0]["annotations"]["priority"], json!(1.0), "{annotated}");

    let structured = up
        .call_tool("get-structured-content", json!({"location": "Chicago"}), cx("everything"))
        .await
        .expect("structured content");
    assert!(structured["structuredContent"].is_object(), "{structured}");
    assert!(structured.get("_meta").is_none());

    // An application failure resolves: the guest inspects isError instead of catching.
    let denied =
        up.call_tool("read_text_file", json!({"path": "/etc/hostname"}), cx("fs")).await.expect("isError resolves");
    assert_eq!(denied["isError"], json!(true), "{denied}");

    let unknown = up.call_tool("nope", json!({}), cx("everything")).await.expect_err("unknown tool");
    assert_eq!(unknown.code, "invalid_input");
    let denied_tool = up.call_tool("echo", json!([1]), cx("everything")).await.expect_err("array argument");
    assert!(denied_tool.message.contains("takes one object argument, not an array"), "{}", denied_tool.message);
    let no_server = up.call_tool("echo", json!({}), CallContext::default()).await.expect_err("no server");
    assert!(no_server.message.contains("names no MCP server"));
    up.shutdown().await;
}

#[tokio::test]
async fn namespace_operations_return_native_shapes() {
    let (_dir, up) = start(|_| {}).await;
    let list = up.namespace("everything", "resources.list", json!({}), cx("everything")).await.expect("list");
    let resources = list["resources"].as_array().expect("resources array");
    assert!(!resources.is_empty());
    assert!(list.get("_meta").is_none() && list.get("resultType").is_none());
    let uri = resources[0]["uri"].clone();
    let read = up.namespace("everything", "resources.read", json!({"uri": uri}), cx("everything")).await.unwrap();
    assert!(read["contents"][0]["text"].is_string(), "{read}");
    let prompts = up.namespace("everything", "prompts.list", Value::Null, cx("everything")).await.unwrap();
    assert!(prompts["prompts"].as_array().is_some_and(|p| p.iter().any(|p| p["name"] == "simple-prompt")));
    let got = up
        .namespace("everything", "prompts.get", json!({"name": "args-prompt", "arguments": {"city": "Oslo"}}), cx(""))
        .await
        .unwrap();
    assert!(got["messages"][0]["content"]["text"].as_str().is_some_and(|t| t.contains("Oslo")), "{got}");
    let bad = up.namespace("everything", "resources.read", json!({}), cx("")).await.expect_err("uri missing");
    assert!(bad.message.contains("invalid arguments"), "{}", bad.message);
    let unknown = up.namespace("everything", "tools.list", json!({}), cx("")).await.expect_err("unknown op");
    assert_eq!(unknown.code, "invalid_input");
    up.shutdown().await;
}

#[tokio::test]
async fn deny_naming_a_missing_tool_fails_at_start() {
    let (_dir, servers) = servers(|everything| everything.deny = vec!["get-evn".into()]);
    let err = UpstreamManager::start(&servers, Default::default(), Default::default())
        .await
        .expect_err("typo in deny must not expose tools");
    assert_eq!(err.key, "servers.everything.deny");
    let text = err.to_string();
    assert!(text.contains("servers.everything.deny: names \"get-evn\""), "{text}");
    assert!(text.contains("get-env"), "the fix lists the real tools: {text}");
}

#[tokio::test]
async fn lazy_server_starts_on_first_call() {
    let (_dir, up) = start(|everything| everything.startup = Startup::Lazy).await;
    assert!(up.tool_definitions().iter().any(|d| d.name == "echo"), "lazy servers are listed at start");
    assert_eq!(up.pid("everything").await, None, "stopped after listing");
    let echo = up.call_tool("echo", json!({"message": "late"}), cx("everything")).await.expect("first call");
    assert_eq!(echo["content"][0]["text"], "Echo: late");
    assert!(up.pid("everything").await.is_some());
    up.shutdown().await;
}

#[tokio::test]
async fn killed_server_fails_the_call_and_restarts_on_the_next() {
    let (_dir, up) = start(|_| {}).await;
    let up = std::sync::Arc::new(up);
    let pid = up.pid("everything").await.expect("eager server runs");
    // The server's first progress report says the call is running in it; the server is killed then.
    let (reported, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let mut context = cx("everything");
    context.progress = ProgressSink::new(
        Some(std::sync::Arc::new(move |report| {
            let _ = reported.send(report);
        })),
        "run",
        "bridge:call:1",
    );
    let slow = {
        let up = up.clone();
        tokio::spawn(async move {
            up.call_tool("trigger-long-running-operation", json!({"duration": 30, "steps": 30}), context).await
        })
    };
    let first = tokio::time::timeout(Duration::from_secs(60), progress.recv()).await;
    assert!(first.is_ok_and(|report| report.is_some()), "the server reports progress on the running call");
    kill(pid);
    let failed = tokio::time::timeout(Duration::from_secs(10), slow)
        .await
        .expect("a killed server must not hang the call")
        .expect("task")
        .expect_err("the call in flight fails");
    assert_eq!(failed.code, "tool_error");
    assert!(failed.message.contains("MCP server \"everything\" stopped during the call"), "{}", failed.message);

    let echo = up.call_tool("echo", json!({"message": "again"}), cx("everything")).await.expect("restarted");
    assert_eq!(echo["content"][0]["text"], "Echo: again");
    let new_pid = up.pid("everything").await.expect("running again");
    assert_ne!(new_pid, pid);
    assert_eq!(up.restarts("everything"), 1);
    assert!(!alive(pid));
    up.shutdown().await;
}
