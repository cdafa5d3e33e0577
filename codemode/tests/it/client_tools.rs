//! Per-run client tools: a host adds the tools of the current run to one engine, without building another; the
//! catalog refreshes for the next cell, and a run parked with them resumes with them.

use codemode::{CodeModeResult, ExecOptions, RunScope};
use serde_json::json;

use crate::support::{engine, tool, value};

fn client_tools() -> ExecOptions {
    let mut shadow = tool("echo", json!({ "type": "object" }));
    shadow.description = "The client's own echo".into();
    ExecOptions::default().client_tools(vec![shadow, tool("client_only", json!({ "type": "object" }))])
}

const PROBE: &str = "const all = catalog.all(); \
    const echo = all.find((h) => h.callableName === 'echo'); \
    return { clientOnly: typeof client_only, source: echo.source, description: echo.description, \
      files: (await API.list('tools/')).files.map((f) => f.path), echoed: await echo({ via: 'handle' }) }";

#[tokio::test]
async fn client_tools_join_the_catalog_for_the_cells_that_pass_them() {
    let (engine, _) = engine();
    let cell = |code: &str| json!({ "title": "client tools", "code": code });
    let with = engine.exec_with(cell(PROBE), RunScope::default(), &client_tools()).await;
    let v = value(&with);
    assert_eq!(v["clientOnly"], "function");
    assert_eq!(v["source"], "client", "a client tool wins an exact-name shadow");
    assert_eq!(v["description"], "The client's own echo");
    assert!(v["files"].as_array().unwrap().contains(&json!("tools/client_only.d.ts")), "{v}");
    assert_eq!(v["echoed"], json!({ "via": "handle" }));
    let telemetry = serde_json::to_value(&with).unwrap()["telemetry"].clone();
    assert_eq!(telemetry["sources"]["client"], 2, "{telemetry}");

    // The next cell without them sees the engine's catalog again; the same set again finds its catalog.
    let without = value(&engine.exec(cell(PROBE), RunScope::default()).await);
    assert_eq!(without["clientOnly"], "undefined");
    assert_eq!(without["source"], "openclaw");
    assert_eq!(
        value(&engine.exec_with(cell(PROBE), RunScope::default(), &client_tools()).await)["clientOnly"],
        "function"
    );
    let surface = engine.surface_with(&client_tools()).expect("the client tools catalog");
    assert!(surface[0].description.contains("client_only"), "the exec description indexes the client tools");
}

#[tokio::test]
async fn a_run_parked_with_client_tools_resumes_with_them() {
    let (engine, _) = engine();
    let options = client_tools();
    let code = "await yield_control('later'); return { clientOnly: typeof client_only, echoed: await echo({ n: 1 }) }";
    let parked = engine.exec_with(json!({ "title": "park", "code": code }), RunScope::default(), &options).await;
    let run_id = match &parked {
        CodeModeResult::Waiting(w) => w.run_id.clone(),
        other => panic!("expected waiting, got {other:?}"),
    };
    let resumed = engine.wait_with(json!({ "runId": run_id }), RunScope::default(), &options).await;
    assert_eq!(value(&resumed), json!({ "clientOnly": "function", "echoed": { "n": 1 } }));
}
