//! A fleet: two `codemode mcp --http` processes on one PostgreSQL database (the harness's throwaway server), driven
//! by rmcp's own client over the sessionless revision, which sends each request to whichever replica it likes.
//!
//! The upstream is `tests/fixtures/ledger.mjs`, whose one tool appends its id to a ledger file shared by both
//! replicas' copies of it, so the ledger proves that no call ran twice. Timing comes from configuration (`[store]`
//! lease and TTL, `timeoutMs`) and from watching the database, never from sleeping.

use std::path::{Path, PathBuf};
use std::time::Duration;

use codemode_store_pg::harness;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, MetaObject,
    ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use serde_json::{Value, json};

use super::kill;

/// One replica: a gateway process serving Streamable HTTP, and a sessionless client of it.
struct Replica {
    process: tokio::process::Child,
    client: RunningService<RoleClient, ClientConfig>,
}

impl Replica {
    async fn start(config: &Path) -> Replica {
        use tokio::io::AsyncBufReadExt;
        let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
            .arg("mcp")
            .arg("--config")
            .arg(config)
            .arg("--http")
            .arg("127.0.0.1:0")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the codemode binary starts");
        let stderr = process.stderr.take().expect("piped stderr");
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.expect("read stderr") {
                if let Some(url) = line.split("serving Streamable HTTP at ").nth(1) {
                    return url.trim().to_owned();
                }
                eprintln!("gateway: {line}");
            }
            panic!("the gateway exited without serving HTTP");
        })
        .await
        .expect("the gateway listens within a minute");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        // rmcp's HTTP client (reqwest) needs the process's TLS provider.
        super::tls();
        let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
        let version = ProtocolVersion::V_2026_07_28;
        let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("fleet", "0"))
            .with_protocol_version(version.clone());
        let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![version] };
        let client = info.serve_with_lifecycle(transport, lifecycle).await.expect("server/discover over HTTP");
        Replica { process, client }
    }

    fn pid(&self) -> u32 {
        self.process.id().expect("the gateway runs")
    }

    async fn call(&self, tool: &str, args: Value, key: Option<&str>) -> Value {
        let Value::Object(args) = args else { panic!("tool arguments are an object") };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(args);
        if let Some(key) = key {
            let mut meta = serde_json::Map::new();
            meta.insert("codemode/idempotencyKey".into(), json!(key));
            params.meta = Some(RequestMetaObject(MetaObject(meta)));
        }
        let result: CallToolResult = self.client.call_tool(params).await.expect("the gateway answers tools/call");
        result.structured_content.expect("a CodeModeResult")
    }

    async fn exec(&self, code: &str) -> Value {
        self.call("exec", json!({ "title": "fleet", "code": code }), None).await
    }

    async fn wait(&self, run_id: &str) -> Value {
        self.call("wait", json!({ "runId": run_id }), None).await
    }
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
    async fn start(timeout_ms: u64, store: &str) -> Fleet {
        let url = harness::fresh_database().await.expect("the test PostgreSQL is available");
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger = dir.path().join("ledger.txt");
        std::fs::write(&ledger, "").expect("ledger");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ledger.mjs");
        let config = dir.path().join("gateway.toml");
        let text = format!(
            "[limits]\ntimeoutMs = {timeout_ms}\n\n[store]\nurl = {url:?}\n{store}\n\n[servers.ledger]\ncommand = \
             \"node\"\nargs = [{server:?}]\nenv = {{ LEDGER = {ledger:?} }}\n",
            server = server.display().to_string(),
            ledger = ledger.display().to_string(),
        );
        std::fs::write(&config, text).expect("config");
        // Started one after the other: the second finds the schema the first created (concurrent starts are the
        // store's own test).
        let a = Replica::start(&config).await;
        let b = Replica::start(&config).await;
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
    let f = Fleet::start(3_000, "").await;
    let program = r#"await yield_control("pause");
        await MCP.ledger.tick({ id: "slow", ms: 600000 });
        return "never";"#;
    let id = run_id(&f.a.exec(program).await);
    let (on_a, on_b) = tokio::join!(f.a.wait(&id), f.b.wait(&id));
    let refused: Vec<&Value> = [&on_a, &on_b].into_iter().filter(|r| status(r) == "failed").collect();
    let resumed: Vec<&Value> = [&on_a, &on_b].into_iter().filter(|r| status(r) == "waiting").collect();
    assert_eq!((refused.len(), resumed.len()), (1, 1), "{on_a}\n{on_b}");
    assert_eq!(refused[0]["error"], "code mode run is already being resumed.", "{}", refused[0]);
    assert_eq!(refused[0]["code"], "invalid_input");
    assert_eq!(f.ledger(), ["slow"], "the slow call was dispatched once, by the replica that resumed");
}

#[tokio::test]
async fn a_replica_killed_mid_call_loses_nothing_and_the_other_resumes_after_the_lease() {
    let f = Fleet::start(4_000, "lease_ms = 1500").await;
    let program = r#"await MCP.ledger.tick({ id: "one" });
        await yield_control("pause");
        let two;
        try { two = (await MCP.ledger.tick({ id: "two", ms: 600000 })).content[0].text; }
        catch (e) { two = e.code; }
        await MCP.ledger.tick({ id: "three" });
        return two;"#;
    let run = run_id(&f.a.exec(program).await);

    // A resumes the run (with its live worker) and calls `two`, which never answers: A holds the run's lease.
    let peer = f.a.client.peer().clone();
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

    // Until the dead replica's lease runs out, B says the run is being resumed; then B takes it over by replay.
    let mut refusals = 0;
    let done = loop {
        let result = f.b.wait(&run).await;
        if result["error"] == "code mode run is already being resumed." {
            refusals += 1;
            assert!(refusals < 3_000, "the lease never expired: {result}");
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        break result;
    };
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(done["value"], "interrupted", "the call in flight on the dead replica is interrupted, never re-run");
    assert_eq!(f.ledger(), ["one", "two", "three"], "no call ran twice");
}

#[tokio::test]
async fn a_run_past_its_ttl_is_gone_on_every_replica() {
    let f = Fleet::start(10_000, "ttl_ms = 1").await;
    let run = run_id(&f.a.exec(YIELDS).await);
    let row = harness::run_row(&f.url, &run).await.unwrap().expect("parked in the store");
    // The TTL is 1 ms: once the clock has passed it (no sleep: it is a millisecond), the run is expired everywhere.
    until(|| now_ms() > row.expires_at_ms).await;
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
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the fleet never reached the state the test waits for");
}
