//! The guest API an engine serves from its globals alone: `catalog.all()`, `API.list` and `API.read` answer without
//! a bridge request, and a cell that ends with a rejection nothing handled fails.

use codemode_bridge::Journal;
use codemode_vm::protocol::{
    CellFailure, CellLimits, GuestApiFile, GuestGlobals, GuestNamespace, GuestOutcome, Start, WorkerMessage,
};
use codemode_worker::engine::{Engine, collect_output};
use serde_json::{Value, json};

fn globals() -> GuestGlobals {
    let file = |path: &str, content: &str| GuestApiFile {
        path: path.into(),
        description: format!("about {path}"),
        content: content.into(),
    };
    GuestGlobals {
        tools: vec!["echo".into()],
        mcp: vec![GuestNamespace {
            global: "fs".into(),
            server: "file-system".into(),
            tools: vec![("readFile".into(), "read_file".into()), ("stat".into(), "stat".into())],
        }],
        api_files: vec![
            file("results.d.ts", "declare const results: {};"),
            file("tools/echo.d.ts", "declare function echo(input: unknown): Promise<unknown>;"),
            file("mcp/index.d.ts", "// MCP.fs"),
            file("mcp/fs.d.ts", "declare namespace MCP.fs {}"),
        ],
        handles: vec![json!({ "callableName": "echo", "toolName": "echo", "label": "echo", "source": "openclaw" })],
    }
}

/// Runs `source` in a fresh engine with [`globals`]; the first report.
fn run(source: &str) -> WorkerMessage {
    let source = source.to_owned();
    crate::strings::on_engine_thread(move || {
        let (sink, _) = collect_output();
        let mut engine = Engine::new(u64::MAX, sink).expect("the engine starts");
        engine.start(
            Start {
                source,
                globals: Some(std::sync::Arc::new(globals())),
                globals_key: None,
                limits: CellLimits::default(),
                journal: Journal::default(),
                skip_output: 0,
            },
            None,
        )
    })
}

fn returned_without_requests(message: WorkerMessage) -> Value {
    match message {
        WorkerMessage::Quiescent { requests, outcome: Some(GuestOutcome::Returned { value }), open: 0, .. } => {
            assert!(requests.is_empty(), "no bridge request: {requests:?}");
            value
        }
        other => panic!("expected a completed cell, got {other:?}"),
    }
}

#[test]
fn catalog_all_and_api_files_answer_without_a_request() {
    let value = returned_without_requests(run("const all = catalog.all();
         const listed = await API.list();
         const mcp = await API.list('mcp/');
         const read = [];
         for (const f of listed.files) read.push(await API.read(f.path));
         return { array: Array.isArray(all), same: all === catalog.all(), frozen: Object.isFrozen(all),
           names: all.map((h) => h.callableName), label: all[0].label, callable: typeof all[0],
           files: listed.files, mcp: mcp.files.map((f) => f.path), read }"));
    assert_eq!(value["array"], true);
    assert_eq!(value["same"], true);
    assert_eq!(value["frozen"], true);
    assert_eq!(value["names"], json!(["echo"]));
    assert_eq!(value["label"], "echo");
    assert_eq!(value["callable"], "function");
    assert_eq!(
        value["files"][1],
        json!({ "path": "tools/echo.d.ts", "description": "about tools/echo.d.ts", "bytes": 56 })
    );
    assert_eq!(value["mcp"], json!(["mcp/index.d.ts", "mcp/fs.d.ts"]));
    assert_eq!(value["read"].as_array().map(Vec::len), Some(4));
    assert_eq!(value["read"][1]["path"], "tools/echo.d.ts");
    assert_eq!(value["read"][1]["content"], "declare function echo(input: unknown): Promise<unknown>;");
}

#[test]
fn api_read_rejects_unknown_paths_and_dot_segments_with_invalid_input() {
    let value = returned_without_requests(run("const out = [];
         for (const p of ['tools/nope.d.ts', 'tools/../results.d.ts']) {
           try { await API.read(p); out.push('read'); } catch (e) { out.push(e.code + ': ' + e.message); }
         }
         return out"));
    assert_eq!(
        value,
        json!([
            "invalid_input: unknown api path \"tools/nope.d.ts\"; API.list() shows the available files",
            "invalid_input: api path \"tools/../results.d.ts\" is rejected: '.' and '..' segments are not allowed",
        ])
    );
}

#[test]
fn namespaces_enumerate_their_servers_and_tools_and_stay_frozen() {
    let value = returned_without_requests(run("'use strict';
         let threw = false;
         try { MCP.fs.extra = 1; } catch (_) { threw = true; }
         return { servers: Object.keys(MCP), tools: Object.keys(MCP.fs), frozen: Object.isFrozen(MCP) && Object.isFrozen(MCP.fs),
           threw, api: typeof MCP.fs.$api, describe: typeof echo.describe }"));
    assert_eq!(
        value,
        json!({ "servers": ["fs"], "tools": ["readFile", "stat"], "frozen": true, "threw": true, "api": "function", "describe": "function" })
    );
}

#[test]
fn a_rejection_nothing_handled_fails_the_cell() {
    match run("Promise.reject(new TypeError('left alone')); return 1") {
        WorkerMessage::Failed { failure: CellFailure::UnhandledRejection, message } => {
            assert!(message.contains("unhandled: TypeError: left alone"), "{message}");
        }
        other => panic!("expected an unhandled rejection, got {other:?}"),
    }
    // Handled late, but before the cell ends: completed.
    let value = returned_without_requests(run(
        "const p = Promise.reject(new Error('late')); await null; await null; return await p.catch((e) => e.message)",
    ));
    assert_eq!(value, "late");
    // The program's own throw stays the program's error, not an unhandled rejection.
    match run("throw new Error('mine')") {
        WorkerMessage::Quiescent { outcome: Some(GuestOutcome::Threw { error }), .. } => {
            assert!(error.starts_with("Error: mine"), "{error}")
        }
        other => panic!("expected the program's throw, got {other:?}"),
    }
}
