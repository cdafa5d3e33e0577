//! The guest API as the seeds describe it, through a real `CodeMode`: `catalog.all()` is a synchronous array,
//! tool globals and handles describe themselves, `API` serves every declaration file, `catalog.search` finds MCP
//! tools, `$api` returns its header object, and an unhandled rejection fails the cell.

use std::sync::Arc;

use codemode::{CodeMode, CodeModeResult, Limits, ToolSource};
use serde_json::{Value, json};

use crate::support::{TestHost, exec, failure, tools, value, wait};

/// The test tools plus an MCP server `fs` whose tools the test host answers by their own names.
fn engine(replay: bool) -> CodeMode {
    let mut defs = tools();
    let mut labelled = codemode::ToolDefinition::new("lookup", "Finds things", json!({ "type": "object" }));
    labelled.label = Some("Lookup service".into());
    defs.push(labelled.replay_safe(true));
    defs.push(
        codemode::ToolDefinition::new(
            "echo",
            "Sends the frobnicated payload back from the file server",
            json!({ "type": "object", "properties": { "q": { "type": "integer" } } }),
        )
        .source(ToolSource::Mcp)
        .server("fs"),
    );
    defs.push(
        codemode::ToolDefinition::new("add", "Adds", json!({ "type": "object" })).source(ToolSource::Mcp).server("fs"),
    );
    CodeMode::builder()
        .limits(Limits { timeout_ms: 2_000, ..Limits::default() })
        .tools(defs)
        .host(Arc::new(TestHost::default()))
        .warm_workers(1)
        .replay_on_resume(replay)
        .build()
        .expect("the engine builds (is codemode-worker built?)")
}

fn telemetry(result: &CodeModeResult) -> Value {
    serde_json::to_value(result).expect("results serialize")["telemetry"].clone()
}

#[tokio::test]
async fn catalog_all_is_a_synchronous_array_and_not_a_search() {
    let engine = engine(false);
    let r = exec(
        &engine,
        "const all = catalog.all(); \
         return { names: all.map((h) => h.callableName), labels: all.map((h) => h.label), frozen: Object.isFrozen(all), \
           called: await all.find((h) => h.callableName === 'echo')({ x: 1 }) }",
    )
    .await;
    let v = value(&r);
    assert_eq!(v["names"], json!(["add", "echo", "fail", "lookup", "slow"]), "native tools only, by callable name");
    assert_eq!(v["labels"], json!(["add", "echo", "fail", "Lookup service", "slow"]), "the label, or the name");
    assert_eq!(v["frozen"], true);
    assert_eq!(v["called"], json!({ "x": 1 }));
    assert_eq!(telemetry(&r)["searchCount"], 0, "discovery is not a search");
}

#[tokio::test]
async fn every_tool_global_describes_itself_as_its_handle_does() {
    let engine = engine(false);
    let r = exec(
        &engine,
        "const [h] = await catalog.search('lookup'); \
         return { global: await lookup.describe(), handle: await h.describe(), label: h.label }",
    )
    .await;
    let v = value(&r);
    assert_eq!(v["global"], v["handle"]);
    assert_eq!(v["global"]["name"], "lookup");
    assert_eq!(v["global"]["label"], "Lookup service");
    assert_eq!(v["label"], "Lookup service");
    assert_eq!(telemetry(&r)["describeCount"], 2);
}

#[tokio::test]
async fn api_lists_and_reads_every_declaration_file() {
    let engine = engine(false);
    let r = exec(
        &engine,
        "const { files } = await API.list(); const read = {}; \
         for (const f of files) { const file = await API.read(f.path); read[f.path] = file.path === f.path && file.content.length === f.bytes; } \
         return { paths: files.map((f) => f.path), read, echo: (await API.read('tools/echo.d.ts')).content, \
           results: (await API.read('results.d.ts')).content }",
    )
    .await;
    let v = value(&r);
    assert_eq!(
        v["paths"],
        json!([
            "results.d.ts",
            "tools/add.d.ts",
            "tools/echo.d.ts",
            "tools/fail.d.ts",
            "tools/lookup.d.ts",
            "tools/slow.d.ts",
            "mcp/index.d.ts",
            "mcp/fs.d.ts"
        ])
    );
    assert!(v["read"].as_object().unwrap().values().all(|ok| ok == true), "{v}");
    assert!(v["echo"].as_str().unwrap().contains("declare function echo("), "{v}");
    assert!(v["results"].as_str().unwrap().contains("load(id: string): Promise<unknown>"), "{v}");
}

#[tokio::test]
async fn catalog_search_finds_mcp_tools_as_callable_handles() {
    let engine = engine(false);
    let r = exec(
        &engine,
        "const [h] = await catalog.search('frobnicated payload'); \
         return { meta: JSON.parse(JSON.stringify(h)), described: await h.describe(), called: await h({ q: 7 }) }",
    )
    .await;
    let v = value(&r);
    assert_eq!(v["meta"]["callableName"], "MCP.fs.echo");
    assert_eq!(v["meta"]["apiPath"], "mcp/fs.d.ts");
    assert_eq!(v["meta"]["source"], "mcp");
    assert_eq!(v["described"]["tools"], json!(["echo"]));
    assert!(v["described"]["declaration"].as_str().unwrap().contains("function echo(input: {"), "{v}");
    assert_eq!(v["described"]["schema"]["properties"]["q"]["type"], "integer");
    assert_eq!(v["called"], json!({ "q": 7 }), "the handle dispatches like MCP.fs.echo");
    match &r {
        CodeModeResult::Completed(c) => assert!(c.warnings.iter().any(|w| w.contains("untrusted")), "{c:?}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn mcp_api_returns_the_header_its_declaration_promises() {
    let engine = engine(false);
    let r = exec(
        &engine,
        "const all = await MCP.fs.$api(); const one = await MCP.fs.$api('echo', { schema: true }); \
         return { all, one, servers: Object.keys(MCP), tools: Object.keys(MCP.fs), frozen: Object.isFrozen(MCP.fs) }",
    )
    .await;
    let v = value(&r);
    assert_eq!(v["all"]["server"], "fs");
    assert_eq!(v["all"]["tools"], json!(["echo", "add"]));
    assert!(v["all"].get("schema").is_none());
    assert!(v["all"]["declaration"].as_str().unwrap().contains("declare namespace MCP.fs {"));
    assert_eq!(v["one"]["tools"], json!(["echo"]));
    assert_eq!(v["one"]["schema"]["type"], "object");
    assert_eq!(v["servers"], json!(["fs"]));
    assert_eq!(v["tools"], json!(["echo", "add"]));
    assert_eq!(v["frozen"], true);
}

#[tokio::test]
async fn an_unhandled_rejection_fails_the_cell() {
    let engine = engine(false);
    for program in [
        "fail({}); return 1",
        "setTimeout(() => { throw new Error('timer boom'); }, 1); await new Promise((r) => setTimeout(r, 20)); return 1",
        "Promise.reject(new Error('nobody listens')); return 1",
    ] {
        let r = exec(&engine, program).await;
        let (code, error) = failure(&r);
        assert_eq!(code, "unhandled_rejection", "{program}");
        assert!(error.contains("promise rejection unhandled"), "{program}: {error}");
        assert_eq!(serde_json::to_value(&r).unwrap()["code"], "internal_error", "{program}");
    }
    let handled = exec(
        &engine,
        "const p = fail({}); await new Promise((r) => setTimeout(r, 20)); return await p.catch((e) => e.message)",
    )
    .await;
    assert_eq!(value(&handled), "the tool failed on purpose");
}

#[tokio::test]
async fn a_handler_attached_after_a_suspension_still_handles_its_promise() {
    for replay in [false, true] {
        let engine = engine(replay);
        let r = exec(&engine, "const p = fail({}); await yield_control('later'); try { await p; return 'no'; } catch (e) { return e.message; }").await;
        let run_id = match &r {
            CodeModeResult::Waiting(w) => w.run_id.clone(),
            other => panic!("expected waiting, got {other:?}"),
        };
        assert_eq!(value(&wait(&engine, &run_id).await), "the tool failed on purpose", "replay: {replay}");
    }
}
