//! Per-call catalogs: a host adds the client tools of the current run, or gives one agent's cell its own tools and
//! policy, on one engine and its workers; the catalog refreshes for the next cell, and a run parked with them
//! resumes with them.

use codemode::{CodeModeResult, ExecOptions, RunScope};
use serde_json::{Value, json};

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

/// One agent's cell: its own tools and, for `alice`, its own policy.
fn agent(name: &str) -> ExecOptions {
    match name {
        "alice" => ExecOptions::default()
            .tools(vec![tool("echo", json!({ "type": "object" })), tool("lookup", json!({ "type": "object" }))])
            .policy(
                codemode::Policy::from_json("policy", &json!({ "rules": [{ "match": "lookup", "policy": "deny" }] }))
                    .expect("a valid policy"),
            ),
        other => ExecOptions::default().tools(vec![
            tool("add", json!({ "type": "object" })),
            tool(&format!("{other}_only"), json!({ "type": "object" })),
        ]),
    }
}

const AGENT_PROBE: &str = "const names = catalog.all().map((h) => h.callableName); \
    let got; try { got = await CALL; } catch (e) { got = e.code ?? e.name; } \
    return { names, files: (await API.list('tools/')).files.map((f) => f.path), got }";

fn agent_probe(call: &str) -> Value {
    json!({ "title": "agent probe", "code": AGENT_PROBE.replace("CALL", call) })
}

#[tokio::test]
async fn each_call_brings_its_own_tools_and_policy_and_shares_the_engines_workers() {
    let (engine, host) = engine();
    let alice = value(&engine.exec_with(agent_probe("lookup({ q: 1 })"), RunScope::default(), &agent("alice")).await);
    assert_eq!(alice["names"], json!(["echo", "lookup"]), "alice sees her tools and none of the engine's: {alice}");
    assert_eq!(alice["got"], "denied", "alice's policy denies lookup: {alice}");
    assert_eq!(alice["files"], json!(["tools/echo.d.ts", "tools/lookup.d.ts"]));

    let bob = value(&engine.exec_with(agent_probe("add({ a: 1, b: 2 })"), RunScope::default(), &agent("bob")).await);
    assert_eq!(bob["names"], json!(["add", "bob_only"]), "bob never sees alice's tools: {bob}");
    assert_eq!(bob["got"], 3, "the engine's host runs bob's add: {bob}");

    // The engine's own catalog is unchanged, policy included.
    let own = value(&engine.exec(agent_probe("echo({ n: 1 })"), RunScope::default()).await);
    assert_eq!(own["names"], json!(["add", "echo", "fail", "slow"]));
    assert_eq!(own["got"], json!({ "n": 1 }));
    let calls = host.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(calls, 2, "alice's denied call never reached the host");

    // Many agents, one pool: after the first cell, every set finds a worker another set left. Alice's and Bob's
    // cells come again after more sets than a worker keeps, then one after the other (a worker installs the last
    // set's globals ahead of need).
    let agents = ["carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "niaj"];
    for name in ["alice", "bob"].into_iter().chain(agents).chain(["alice", "bob", "bob", "alice", "alice"]) {
        let v = value(&engine.exec_with(agent_probe("echo({ n: 2 })"), RunScope::default(), &agent(name)).await);
        let names: Vec<String> = match name {
            "alice" => vec!["echo".into(), "lookup".into()],
            other => vec!["add".into(), format!("{other}_only")],
        };
        assert_eq!(v["names"], json!(names), "{v}");
        let echoed = if name == "alice" { json!({ "n": 2 }) } else { json!("ReferenceError") };
        assert_eq!(v["got"], echoed, "{name}: {v}");
    }
    let stats = engine.stats();
    assert!(stats.per_call_spawn_waits <= 1, "the per-call catalogs share one pool: {stats:?}");
    assert!(stats.per_call_idle_workers <= 2, "{stats:?}");
}

#[tokio::test]
async fn a_run_parked_with_its_own_tools_resumes_by_replay_with_them() {
    let (engine, _) =
        crate::support::engine_with(codemode::Limits { timeout_ms: 2_000, ..codemode::Limits::default() }, true);
    let options = agent("bob");
    let code = "const before = await add({ a: 1, b: 1 }); await yield_control('later'); \
        return { before, after: await add({ a: 2, b: 3 }), echo: typeof echo, own: typeof bob_only }";
    let parked = engine.exec_with(json!({ "title": "park", "code": code }), RunScope::default(), &options).await;
    let run_id = match &parked {
        CodeModeResult::Waiting(w) => w.run_id.clone(),
        other => panic!("expected waiting, got {other:?}"),
    };
    let resumed = engine.wait_with(json!({ "runId": run_id }), RunScope::default(), &options).await;
    assert_eq!(value(&resumed), json!({ "before": 2, "after": 5, "echo": "undefined", "own": "function" }));
}
