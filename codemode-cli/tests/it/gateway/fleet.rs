//! A fleet: two `codemode mcp --http` processes on one PostgreSQL database (the harness's throwaway server), driven
//! by rmcp's own client over the sessionless revision, which sends each request to whichever replica it likes; and
//! the same fleet with `[auth]`, where MCP sessions of one principal share its runs, values and result references
//! across replicas and another principal sees none of them.
//!
//! The upstream is `tests/fixtures/ledger.mjs`, whose one tool appends its id to a ledger file shared by both
//! replicas' copies of it, so the ledger proves that no call ran twice. Time never decides an outcome: leases and
//! TTLs run out when the test says so (the harness moves them into the past in the database), and the test waits
//! for states of the fleet (the ledger, a row), never for a duration.

use std::path::{Path, PathBuf};

use codemode_pg_harness as harness;
use jsonwebtoken::Algorithm;
use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, MetaObject,
    ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::auth::{AUDIENCE, ISSUER, UNKNOWN_RUN, jwt, keys, transport};
use super::{HttpGateway, kill};

type Client = RunningService<RoleClient, ClientConfig>;

/// One replica: a gateway process serving Streamable HTTP, and (without `[auth]`) a sessionless client of it.
struct Replica {
    gateway: HttpGateway,
    client: Option<Client>,
}

impl Replica {
    async fn start(config: &Path, args: &[&str], sessionless: bool) -> Replica {
        let gateway = HttpGateway::start_with(config, args).await;
        let client = if sessionless { Some(sessionless_client(&gateway.url).await) } else { None };
        Replica { gateway, client }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a fleet without [auth] has a sessionless client per replica")
    }

    fn pid(&self) -> u32 {
        self.gateway.pid()
    }

    async fn call(&self, tool: &str, args: Value, key: Option<&str>) -> Value {
        call_with_key(self.client(), tool, args, key).await
    }

    async fn exec(&self, code: &str) -> Value {
        self.call("exec", json!({ "title": "fleet", "code": code }), None).await
    }

    async fn wait(&self, run_id: &str) -> Value {
        self.call("wait", json!({ "runId": run_id }), None).await
    }

    /// A new MCP session (the stateful revision) carrying a bearer token, for a fleet with `[auth]`.
    async fn session(&self, token: &str) -> Client {
        let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("fleet-auth", "0"));
        info.serve(transport(&self.gateway.url, token)).await.expect("MCP handshake with a bearer token")
    }
}

/// A client of the sessionless revision (`server/discover`, no `initialize`, no session id).
async fn sessionless_client(url: &str) -> Client {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
    let version = ProtocolVersion::V_2026_07_28;
    let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("fleet", "0"))
        .with_protocol_version(version.clone());
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![version] };
    info.serve_with_lifecycle(transport, lifecycle).await.expect("server/discover over HTTP")
}

async fn call_with_key(client: &Client, tool: &str, args: Value, key: Option<&str>) -> Value {
    let Value::Object(args) = args else { panic!("tool arguments are an object") };
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = Some(args);
    if let Some(key) = key {
        let mut meta = serde_json::Map::new();
        meta.insert("codemode/idempotencyKey".into(), json!(key));
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
    }
    let result: CallToolResult = client.call_tool(params).await.expect("the gateway answers tools/call");
    result.structured_content.expect("a CodeModeResult")
}

async fn exec_on(client: &Client, code: &str) -> Value {
    call_with_key(client, "exec", json!({ "title": "fleet", "code": code }), None).await
}

async fn wait_on(client: &Client, run_id: &str) -> Value {
    call_with_key(client, "wait", json!({ "runId": run_id }), None).await
}

/// Two replicas on one fresh database, with the ledger server as their upstream.
struct Fleet {
    a: Replica,
    b: Replica,
    url: String,
    ledger: PathBuf,
    _dir: tempfile::TempDir,
}

impl Fleet {
    /// Two replicas with `[limits] timeoutMs`, these `[store]` lines, and no `[auth]`.
    async fn start(timeout_ms: u64, store: &str) -> Fleet {
        Fleet::start_with(&format!("timeoutMs = {timeout_ms}"), store, None).await
    }

    /// Two replicas with these `[limits]` and `[store]` lines, and `auth` as their `[auth]` table when given.
    async fn start_with(limits: &str, store: &str, auth: Option<&str>) -> Fleet {
        let url = harness::fresh_database().await.expect("the test PostgreSQL is available");
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger = dir.path().join("ledger.txt");
        std::fs::write(&ledger, "").expect("ledger");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ledger.mjs");
        let auth_table = auth.map(|a| format!("[auth]\n{a}\n")).unwrap_or_default();
        let config = |store_url: &str, name: &str| {
            let text = format!(
                "[limits]\n{limits}\n\n[store]\nurl = {store_url:?}\n{store}\n\n{auth_table}\n[servers.ledger]\n\
                 command = \"node\"\nargs = [{server:?}]\nenv = {{ LEDGER = {ledger:?} }}\n",
                server = server.display().to_string(),
                ledger = ledger.display().to_string(),
            );
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("config");
            path
        };
        // A names the database in `[store] url`; B's file names one that does not exist, and B's `--store` (which
        // overrides it and keeps the table's other keys) names the real one.
        let config_a = config(&url, "a.toml");
        let config_b = config("postgres://nobody@127.0.0.1:1/not_this_one", "b.toml");
        // Started one after the other: the second finds the schema the first created (concurrent starts are the
        // store's own test).
        let a = Replica::start(&config_a, &[], auth.is_none()).await;
        let b = Replica::start(&config_b, &["--store", &url], auth.is_none()).await;
        Fleet { a, b, url, ledger, _dir: dir }
    }

    /// The ids the ledger server was called with, in order, by either replica.
    fn ledger(&self) -> Vec<String> {
        std::fs::read_to_string(&self.ledger).expect("ledger").lines().map(str::to_owned).collect()
    }
}

fn status(result: &Value) -> &str {
    result["status"].as_str().unwrap_or_default()
}

fn run_id(result: &Value) -> String {
    assert_eq!(status(result), "waiting", "{result}");
    result["runId"].as_str().expect("runId").to_owned()
}

const YIELDS: &str = r#"await MCP.ledger.tick({ id: "one" });
await yield_control("half way");
await MCP.ledger.tick({ id: "two" });
return "done";"#;

#[tokio::test]
async fn a_run_parked_on_one_replica_completes_by_a_wait_sent_to_the_other() {
    let f = Fleet::start(10_000, "").await;
    let first = f.a.exec(YIELDS).await;
    let id = run_id(&first);
    assert_eq!(f.ledger(), ["one"]);

    let done = f.b.wait(&id).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(done["value"], "done");
    assert_eq!(f.ledger(), ["one", "two"], "B replayed the first call from the journal, it did not run it again");
    // The run is finished for the whole fleet.
    let again = f.a.wait(&id).await;
    assert_eq!(again["error"], "code mode run is unavailable or expired.", "{again}");
    assert!(harness::run_row(&f.url, &id).await.unwrap().is_none());
}

#[tokio::test]
async fn two_concurrent_waits_on_two_replicas_exactly_one_resumes() {
    // The resumed run's slow call outlasts the test (and `timeoutMs`, 60 s, is far away): the winner never answers
    // here, so the first wait to answer is the refused one, whichever replica won.
    let f = Fleet::start(60_000, "").await;
    let program = r#"await yield_control("pause");
        await MCP.ledger.tick({ id: "slow", ms: 600000 });
        return "never";"#;
    let id = run_id(&f.a.exec(program).await);
    let (on_a, on_b) = (f.a.wait(&id), f.b.wait(&id));
    tokio::pin!(on_a, on_b);
    let refused = tokio::select! {
        refused = &mut on_a => refused,
        refused = &mut on_b => refused,
    };
    assert_eq!(status(&refused), "failed", "{refused}");
    assert_eq!(refused["error"], "code mode run is already being resumed.", "{refused}");
    assert_eq!(refused["code"], "invalid_input");
    until(|| f.ledger() == ["slow"]).await;
    let row = harness::run_row(&f.url, &id).await.unwrap().expect("the run is in the store");
    assert!(row.lease_holder.is_some(), "the winner holds the run while its slow call runs: {row:?}");
    assert_eq!(f.ledger(), ["slow"], "the slow call was dispatched once, by the replica that resumed");
}

#[tokio::test]
async fn a_replica_killed_mid_call_loses_nothing_and_the_other_resumes_after_the_lease() {
    // A lease of ten minutes: it runs out only when the test expires it in the database.
    let f = Fleet::start(60_000, "lease_ms = 600000").await;
    let program = r#"await MCP.ledger.tick({ id: "one" });
        await yield_control("pause");
        let two;
        try { two = (await MCP.ledger.tick({ id: "two", ms: 600000 })).content[0].text; }
        catch (e) { two = e.code; }
        await MCP.ledger.tick({ id: "three" });
        return two;"#;
    let run = run_id(&f.a.exec(program).await);

    // A resumes the run (with its live worker) and calls `two`, which never answers: A holds the run's lease.
    let peer = f.a.client().peer().clone();
    let arguments = json!({ "runId": run.clone() }).as_object().cloned();
    let resume = tokio::spawn(async move {
        let mut params = CallToolRequestParams::new("wait");
        params.arguments = arguments;
        peer.call_tool(params).await
    });
    until(|| f.ledger() == ["one", "two"]).await;
    let row = harness::run_row(&f.url, &run).await.unwrap().expect("the run is in the store");
    assert!(row.lease_holder.is_some(), "A holds the run while `two` runs: {row:?}");

    kill(f.a.pid());
    // A's client sees its connection drop; what it reports is rmcp's business.
    let _ = resume.await;

    // While the dead replica's lease lasts, B says the run is being resumed.
    let held = f.b.wait(&run).await;
    assert_eq!(held["error"], "code mode run is already being resumed.", "{held}");
    assert_eq!(f.ledger(), ["one", "two"]);
    // The lease runs out (the test moves it into the past): B takes the run over by replay.
    assert!(harness::expire_lease(&f.url, &run).await.unwrap(), "the dead replica still held the run");
    let done = f.b.wait(&run).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(done["value"], "interrupted", "the call in flight on the dead replica is interrupted, never re-run");
    assert_eq!(f.ledger(), ["one", "two", "three"], "no call ran twice");
}

#[tokio::test]
async fn a_run_past_its_ttl_is_gone_on_every_replica() {
    let f = Fleet::start(10_000, "ttl_ms = 600000").await;
    let before = now_ms();
    let run = run_id(&f.a.exec(YIELDS).await);
    let row = harness::run_row(&f.url, &run).await.unwrap().expect("parked in the store");
    assert!(row.expires_at_ms >= before + 600_000, "the configured TTL sets the expiry: {row:?}");
    // The TTL runs out (the test moves the expiry into the past): the run is expired for every replica, the one
    // holding its live worker included.
    assert!(harness::expire_run(&f.url, &run).await.unwrap());
    let gone = f.b.wait(&run).await;
    assert_eq!(gone["error"], "code mode run is unavailable or expired.", "{gone}");
    assert!(harness::run_row(&f.url, &run).await.unwrap().is_none(), "B's claim deleted the expired run");
    let gone = f.a.wait(&run).await;
    assert_eq!(gone["error"], "code mode run is unavailable or expired.", "{gone}");
    assert_eq!(f.ledger(), ["one"]);
}

#[tokio::test]
async fn an_exec_the_fleet_already_accepted_returns_that_run_instead_of_running_twice() {
    let f = Fleet::start(10_000, "").await;
    let once = r#"await MCP.ledger.tick({ id: "once" }); return "ran";"#;
    let args = json!({ "title": "idempotent", "code": once });
    let first = f.a.call("exec", args.clone(), Some("key-1")).await;
    assert_eq!(status(&first), "completed", "{first}");
    let again = f.b.call("exec", args.clone(), Some("key-1")).await;
    assert_eq!(again, first, "B answers with A's result");
    assert_eq!(f.ledger(), ["once"]);

    // A run still waiting: the repeat gets its current state, and a wait completes it once.
    let parked = f.a.call("exec", json!({ "title": "idempotent", "code": YIELDS }), Some("key-2")).await;
    let run = run_id(&parked);
    let repeat = f.b.call("exec", json!({ "title": "idempotent", "code": YIELDS }), Some("key-2")).await;
    assert_eq!(run_id(&repeat), run, "{repeat}");
    let done = f.b.wait(&run).await;
    assert_eq!(done["value"], "done", "{done}");
    let after = f.a.call("exec", json!({ "title": "idempotent", "code": YIELDS }), Some("key-2")).await;
    assert_eq!(after, done, "once it ended, the key answers with its final result");
    assert_eq!(f.ledger(), ["once", "one", "two"]);

    // Another key runs the program again.
    let other = f.b.call("exec", args, Some("key-3")).await;
    assert_eq!(status(&other), "completed");
    assert_eq!(f.ledger(), ["once", "one", "two", "once"]);
}

/// The `[auth]` table of an authenticated fleet: JWTs from the test issuer (alice) and a static token (bob), the
/// tokens file written into `dir`.
fn auth_table(dir: &Path) -> String {
    let tokens = dir.join("tokens.txt");
    let digest = hex::encode(sha2::Sha256::digest(BOB_TOKEN.as_bytes()));
    std::fs::write(&tokens, format!("bob sha256:{digest}\n")).expect("tokens file");
    format!(
        "tokens_file = {tokens:?}\nissuers = [{ISSUER:?}]\naudience = {AUDIENCE:?}\njwks_file = {jwks:?}\n",
        tokens = tokens.display().to_string(),
        jwks = keys().join("jwks.json").display().to_string(),
    )
}

const BOB_TOKEN: &str = "bob-static-token";

/// Alice's access token: a JWT of the test issuer, subject `alice`.
fn alice() -> String {
    jwt("rsa-issuer.pem", Algorithm::RS256, "rsa-1", json!({ "sub": "alice" }))
}

/// What `results.load(id)` gives a program: `{ count }` of the value, or `{ error }` with the id written `ID`.
fn load_result(id: &str) -> String {
    format!(
        "try {{ const all = await results.load({id:?}); return {{ count: all.length }}; }} \
         catch (e) {{ return {{ error: String(e.message ?? e).replaceAll({id:?}, 'ID') }}; }}"
    )
}

#[tokio::test]
async fn an_authenticated_principal_resumes_its_run_from_another_session_on_the_other_replica() {
    let tokens = tempfile::tempdir().expect("temp dir");
    let f = Fleet::start_with("timeoutMs = 20000\nmaxOutputBytes = 2048", "", Some(&auth_table(tokens.path()))).await;

    // Alice, on A: a value stored, a call, a pause; and an oversized result kept for `results.load`.
    let alice_a = f.a.session(&alice()).await;
    let program = r#"await store("note", "from alice");
        await MCP.ledger.tick({ id: "one" });
        await yield_control("half way");
        await MCP.ledger.tick({ id: "two" });
        return await load("note");"#;
    let run = run_id(&exec_on(&alice_a, program).await);
    let big = exec_on(&alice_a, "return [...Array(500).keys()].map(i => ({ i, name: 'item ' + i }));").await;
    let reference = big["value"]["reference"]["id"].as_str().expect("a result reference").to_owned();
    assert_eq!(f.ledger(), ["one"]);
    // All three live in the database under alice's principal, not under her MCP session.
    let principal = "jwt:alice";
    assert_eq!(harness::column(&f.url, "SELECT scope FROM codemode_runs").await.unwrap(), [principal]);
    assert_eq!(harness::column(&f.url, "SELECT session FROM codemode_sessions").await.unwrap(), [principal]);
    assert_eq!(harness::column(&f.url, "SELECT session FROM codemode_results").await.unwrap(), [principal]);

    // Bob, on B: alice's run reads exactly as a run that never existed; her value and her result are not his.
    let bob_b = f.b.session(BOB_TOKEN).await;
    let made_up = wait_on(&bob_b, "cm_00000000-0000-4000-8000-000000000000").await;
    assert_eq!(made_up["error"], UNKNOWN_RUN, "{made_up}");
    let foreign = wait_on(&bob_b, &run).await;
    assert_eq!(
        (&foreign["status"], &foreign["code"], &foreign["error"]),
        (&made_up["status"], &made_up["code"], &made_up["error"]),
        "{foreign}"
    );
    assert_eq!(exec_on(&bob_b, "return await load(\"note\");").await["value"], Value::Null, "{run}");
    let unknown = format!("{}x", &reference[..reference.len() - 1]);
    let theirs = exec_on(&bob_b, &load_result(&reference)).await;
    let nobody = exec_on(&bob_b, &load_result(&unknown)).await;
    assert!(theirs["value"]["error"].is_string(), "{theirs}");
    assert_eq!(theirs["value"], nobody["value"], "alice's result reads as one that does not exist");
    let row = harness::run_row(&f.url, &run).await.unwrap().expect("still parked");
    assert_eq!(row.lease_holder, None, "bob's wait claimed nothing");

    // Alice again, on a new MCP session on B: her value, her result and her run.
    let alice_b = f.b.session(&alice()).await;
    assert_eq!(exec_on(&alice_b, "return await load(\"note\");").await["value"], "from alice");
    assert_eq!(exec_on(&alice_b, &load_result(&reference)).await["value"], json!({ "count": 500 }));
    let done = wait_on(&alice_b, &run).await;
    assert_eq!((status(&done), &done["value"]), ("completed", &json!("from alice")), "{done}");
    assert_eq!(f.ledger(), ["one", "two"], "B replayed the first call from the journal, it did not run it again");
    assert!(harness::run_row(&f.url, &run).await.unwrap().is_none(), "the finished run is gone from the store");
    let again = wait_on(&alice_a, &run).await;
    assert_eq!(again["error"], UNKNOWN_RUN, "finished for the whole fleet: {again}");
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    i64::try_from(since.as_millis()).expect("fits")
}

/// Polls `ready` until it holds (at most a minute): the state of the fleet, not a duration, decides.
async fn until(ready: impl Fn() -> bool) {
    for _ in 0..6_000 {
        if ready() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the fleet never reached the state the test waits for");
}

/// A client of the sessionless revision that declares the tasks extension: its `exec` answers with a task.
async fn tasks_client(url: &str) -> Client {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
    let version = ProtocolVersion::V_2026_07_28;
    let info =
        ClientConfig::new(ClientCapabilities::builder().enable_tasks().build(), Implementation::new("fleet", "0"))
            .with_protocol_version(version.clone());
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![version] };
    info.serve_with_lifecycle(transport, lifecycle).await.expect("server/discover over HTTP")
}

/// Starts `code` as an `exec` task; its id.
async fn exec_task(client: &Client, code: &str) -> String {
    let Value::Object(args) = json!({ "title": "fleet task", "code": code }) else { unreachable!() };
    let mut params = CallToolRequestParams::new("exec");
    params.arguments = Some(args);
    match client.peer().call_tool_once(params).await.expect("the gateway answers tools/call") {
        rmcp::model::CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("a client that declared tasks gets a task, not {other:?}"),
    }
}

/// `tasks/get` on `client`, polled until the task is no longer working.
async fn ended_task(client: &Client, id: &str) -> rmcp::model::DetailedTask {
    for _ in 0..6_000 {
        let got = client.peer().get_task(rmcp::model::GetTaskParams::new(id.to_owned())).await.expect("tasks/get");
        if got.task.status() != rmcp::model::TaskStatus::Working {
            return got.task;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("task {id} never ended");
}

#[tokio::test]
async fn a_task_created_on_one_replica_is_polled_and_cancelled_on_the_other() {
    // A 1 s exec and 50 ms waits: the task's replica (A) takes a step at least every few hundred ms, so a cancel
    // recorded by B reaches it soon; nothing here depends on how soon.
    let f = Fleet::start_with("timeoutMs = 1000\nmaxWaitMs = 50", "", None).await;
    let (on_a, on_b) = (tasks_client(&f.a.gateway.url).await, tasks_client(&f.b.gateway.url).await);

    // Created on A, polled to completion on B: the result is the run's CodeModeResult.
    let id = exec_task(&on_a, r#"await MCP.ledger.tick({ id: "one" }); return "done";"#).await;
    let ended = ended_task(&on_b, &id).await;
    let rmcp::model::TaskPayload::Completed { result } = &ended.payload else { panic!("completed: {ended:?}") };
    assert_eq!(result["structuredContent"]["status"], "completed", "{result:?}");
    assert_eq!(result["structuredContent"]["value"], "done", "{result:?}");
    assert_eq!(f.ledger(), ["one"]);

    // Created on A (its call never answers), cancelled on B: A aborts the run; both replicas report it cancelled.
    let id = exec_task(&on_a, r#"await MCP.ledger.tick({ id: "slow", ms: 600000 }); return "never";"#).await;
    until(|| f.ledger() == ["one", "slow"]).await;
    on_b.peer().cancel_task(rmcp::model::CancelTaskParams::new(id.clone())).await.expect("tasks/cancel on B");
    let ended = ended_task(&on_b, &id).await;
    assert_eq!(ended.status(), rmcp::model::TaskStatus::Cancelled, "{ended:?}");
    let on_a_view = on_a.peer().get_task(rmcp::model::GetTaskParams::new(id.clone())).await.expect("tasks/get on A");
    assert_eq!(on_a_view.task.status(), rmcp::model::TaskStatus::Cancelled);
    assert_eq!(f.ledger(), ["one", "slow"], "nothing ran twice");

    // An id no replica created is unknown on both.
    for client in [&on_a, &on_b] {
        let unknown = client.peer().get_task(rmcp::model::GetTaskParams::new("no-such-task".to_owned())).await;
        assert!(unknown.is_err(), "{unknown:?}");
    }
}
