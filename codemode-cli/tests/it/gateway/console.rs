//! The approval console in a real browser: Debian's Chromium driven by Playwright (`tests/py/console.py`), the MCP
//! Python SDK's client without an elicitation callback (so nobody can be asked during the call), the real
//! filesystem server, real gateway processes with `[auth]`, `[policy] fallback = "park"` and `[console]`, and for
//! the fleet two replicas on the harness's PostgreSQL.
//!
//! Nothing waits for a duration: each step waits for the browser's or the client's answer, and a webhook notice is
//! awaited as an event.

use std::path::{Path, PathBuf};
use std::process::Command;

use codemode_pg_harness as harness;
use serde_json::Value;
use sha2::Digest as _;

use super::approvals::python;
use super::{HttpGateway, fixture, servers_toml};

/// The principals of the tests: alice and bob run programs, carol operates the console.
const ALICE: &str = "alice-console-token";
const BOB: &str = "bob-console-token";
const CAROL: &str = "carol-console-token";

/// A gateway's folder: its config (with the filesystem server on `files/`) and tokens.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
    files: PathBuf,
}

impl Setup {
    /// A config with `[auth]` (alice, bob, carol), writes asked about and parked for the console, the console on a
    /// free port with carol as operator, `extra` tables, and the runs kept in `state_dir` unless `store` names a
    /// PostgreSQL database.
    fn new(extra: &str, store: Option<&str>) -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        let files = dir.path().join("files");
        std::fs::create_dir(&files).expect("files dir");
        let files = files.canonicalize().expect("canonical files dir");
        let tokens = dir.path().join("tokens.txt");
        let line = |name: &str, token: &str| format!("{name} sha256:{}\n", hex::encode(sha2::Sha256::digest(token)));
        std::fs::write(&tokens, [line("alice", ALICE), line("bob", BOB), line("carol", CAROL)].concat())
            .expect("tokens");
        let keep = match store {
            Some(url) => format!("[store]\nurl = {url:?}\n"),
            None => String::new(),
        };
        let state = match store {
            Some(_) => String::new(),
            None => format!("state_dir = {:?}\n", dir.path().join("state").display().to_string()),
        };
        let text = format!(
            "{state}\n[limits]\ntimeoutMs = 20000\n\n[policy]\nwrites = \"ask\"\nfallback = \"park\"\n\n\
             [auth]\ntokens_file = {tokens:?}\n\n[console]\nlisten = \"127.0.0.1:0\"\noperators = [\"carol\"]\n\n\
             {keep}\n{extra}\n{servers}",
            tokens = tokens.display().to_string(),
            servers = servers_toml(&files, ""),
        );
        let config = dir.path().join("gateway.toml");
        std::fs::write(&config, text).expect("config");
        Setup { dir, config, files }
    }

    /// The program that writes `name` under the files root and says whether it could.
    fn write(&self, name: &str) -> String {
        let path = self.files.join(name).display().to_string();
        format!(
            r#"try {{ await MCP.fs.writeFile({{ path: {path:?}, content: "approved in the console" }}); }}
               catch (e) {{ return {{ refused: e.code }}; }}
               return {{ written: true }};"#
        )
    }
}

/// Runs `tests/py/console.py` with `args` and reads the JSON it prints.
fn script(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/console.py");
    let output = Command::new(python()).arg(script).args(args).output().expect("python runs");
    assert!(
        output.status.success(),
        "console.py {} failed: {}",
        args.first().unwrap_or(&""),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("console.py prints JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)))
}

async fn run_script(args: Vec<String>) -> Value {
    tokio::task::spawn_blocking(move || script(&args.iter().map(String::as_str).collect::<Vec<_>>()))
        .await
        .expect("the script's thread")
}

async fn exec(gateway: &HttpGateway, token: &str, code: &str) -> Value {
    run_script(vec!["exec".into(), gateway.url.clone(), token.into(), "write the report".into(), code.into()]).await
}

async fn wait(gateway: &HttpGateway, token: &str, run_id: &str) -> Value {
    run_script(vec!["wait".into(), gateway.url.clone(), token.into(), run_id.into()]).await
}

/// Clicks `button` on `run`'s pending question in the console as the principal of `token`; returns the run ids
/// listed before and after.
async fn decide(gateway: &HttpGateway, token: &str, run_id: &str, button: &str, shot: Option<&Path>) -> Value {
    let shot = shot.map_or_else(|| "-".to_owned(), |p| p.display().to_string());
    run_script(vec!["decide".into(), console(gateway), token.into(), run_id.into(), button.into(), shot]).await
}

/// What the principal of `token` sees: pending run ids, listed run ids, history rows.
async fn view(gateway: &HttpGateway, token: &str, shot: Option<&Path>) -> Value {
    let shot = shot.map_or_else(|| "-".to_owned(), |p| p.display().to_string());
    run_script(vec!["view".into(), console(gateway), token.into(), shot]).await
}

fn console(gateway: &HttpGateway) -> String {
    gateway.console.clone().expect("the gateway serves its console")
}

/// The run id of a result parked on one approval, after checking that it is.
fn parked(result: &Value) -> String {
    assert_eq!(result["status"], "waiting", "{result}");
    assert_eq!(result["reason"], "approval", "{result}");
    assert_eq!(result["pendingApprovals"].as_array().map(Vec::len), Some(1), "{result}");
    let warnings = result["warnings"].to_string();
    assert!(warnings.contains("approval console"), "the model is told where the decision is taken: {result}");
    result["runId"].as_str().expect("runId").to_owned()
}

fn runs(list: &Value) -> Vec<&str> {
    list.as_array().map(|l| l.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

/// Where the tests put their screenshots (docs/gateway.md's Console section shows them).
fn shots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/console-shots");
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir
}

#[tokio::test]
async fn a_write_nobody_can_ask_about_parks_and_completes_once_a_person_approves_it_in_the_console() {
    let s = Setup::new("", None);
    let gateway = HttpGateway::start(&s.config).await;
    let run_id = parked(&exec(&gateway, ALICE, &s.write("approved.txt")).await);
    assert!(!s.files.join("approved.txt").exists(), "nothing is written before the decision");

    let clicked = decide(&gateway, ALICE, &run_id, "Approve once", Some(&shots().join("console-pending.png"))).await;
    assert_eq!(runs(&clicked["pending"]), [run_id.as_str()], "{clicked}");
    assert!(runs(&clicked["after"]).is_empty(), "answered, the question leaves the list: {clicked}");

    let done = wait(&gateway, ALICE, &run_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["value"], serde_json::json!({ "written": true }), "{done}");
    let text = std::fs::read_to_string(s.files.join("approved.txt")).expect("the filesystem server wrote the file");
    assert_eq!(text, "approved in the console");

    let seen = view(&gateway, ALICE, Some(&shots().join("console"))).await;
    assert_eq!(runs(&seen["runs"]), [run_id.as_str()], "{seen}");
    assert_eq!(seen["history"][0], serde_json::json!(["alice", "approved once", run_id]), "{seen}");
}

#[tokio::test]
async fn route_console_parks_even_for_a_client_that_can_elicit() {
    let s = Setup::new("[approvals]\nroute = \"console\"\n", None);
    let gateway = HttpGateway::start(&s.config).await;
    let args = vec!["exec-eliciting".into(), gateway.url.clone(), ALICE.into(), "route".into(), s.write("routed.txt")];
    let out = run_script(args).await;
    assert_eq!(out["asked"], serde_json::json!([]), "the client is never asked: {out}");
    let run_id = parked(&out["result"]);
    decide(&gateway, ALICE, &run_id, "Approve once", None).await;
    let done = wait(&gateway, ALICE, &run_id).await;
    assert_eq!(done["value"], serde_json::json!({ "written": true }), "{done}");
}

#[tokio::test]
async fn a_denied_write_writes_nothing_and_the_program_sees_the_refusal() {
    let s = Setup::new("", None);
    let gateway = HttpGateway::start(&s.config).await;
    let run_id = parked(&exec(&gateway, ALICE, &s.write("denied.txt")).await);
    decide(&gateway, ALICE, &run_id, "Deny", None).await;
    let done = wait(&gateway, ALICE, &run_id).await;
    assert_eq!(done["value"], serde_json::json!({ "refused": "denied" }), "{done}");
    assert!(!s.files.join("denied.txt").exists(), "a denied write never reaches the server");
}

/// A webhook receiver: every `POST` body it gets, as JSON, in order.
async fn webhook() -> (String, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the webhook");
    let url = format!("http://{}/hook", listener.local_addr().expect("address"));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            let body = loop {
                let n = stream.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break None;
                }
                request.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&request).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if body.len() >= length {
                        break Some(body[..length].to_owned());
                    }
                }
            };
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            if let Some(body) = body.and_then(|b| serde_json::from_str(&b).ok()) {
                let _ = tx.send(body);
            }
        }
    });
    (url, rx)
}

/// A raw `POST` of a link's form, as a second use would send it.
async fn post_link(url: &str, answer: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("answer={answer}"))
        .send()
        .await
        .expect("the console answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn the_webhook_gets_a_single_use_link_that_decides_once_and_only_its_own_call() {
    super::tls();
    let (hook, mut notices) = webhook().await;
    let s = Setup::new(&format!("[approvals]\nwebhook = {hook:?}\n"), None);
    let gateway = HttpGateway::start(&s.config).await;
    let run_id = parked(&exec(&gateway, ALICE, &s.write("linked.txt")).await);
    let notice = notices.recv().await.expect("the webhook gets a notice");
    assert_eq!(notice["runId"], run_id.as_str(), "{notice}");
    assert_eq!(notice["tool"], "MCP.fs.writeFile", "{notice}");
    assert_eq!(notice["title"], "write the report", "{notice}");
    assert!(notice["text"].as_str().is_some_and(|t| t.contains("MCP.fs.writeFile")), "{notice}");
    let link = notice["url"].as_str().expect("the notice carries the link").to_owned();
    assert!(link.starts_with(&format!("{}/approve/", console(&gateway))), "{link}");

    // An altered link decides nothing, and neither does a post without the page's CSRF token.
    let (status, text) = post_link(&format!("{link}x"), "approve_once").await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("not valid"), "{text}");
    let (status, text) = post_link(&link, "deny").await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("CSRF"), "{text}");

    // Used in the browser without signing in, the link decides; used again, it changes nothing.
    let shot = shots().join("console-link.png").display().to_string();
    let first = run_script(vec!["link".into(), link.clone(), "Approve once".into(), shot]).await;
    assert_eq!(first["status"], 200, "{first}");
    assert!(first["text"].as_str().is_some_and(|t| t.contains("Decided: approved once by link")), "{first}");
    assert_eq!(first["again"]["status"], 409, "{first}");
    assert!(first["again"]["text"].as_str().is_some_and(|t| t.contains("answered already")), "{first}");

    let done = wait(&gateway, ALICE, &run_id).await;
    assert_eq!(done["value"], serde_json::json!({ "written": true }), "the first use stands: {done}");
    assert!(s.files.join("linked.txt").is_file());
}

#[tokio::test]
async fn a_forged_csrf_token_decides_nothing_and_principals_see_only_their_own_runs() {
    let s = Setup::new("", None);
    let gateway = HttpGateway::start(&s.config).await;
    let alices = parked(&exec(&gateway, ALICE, &s.write("alice.txt")).await);
    let bobs = parked(&exec(&gateway, BOB, &s.write("bob.txt")).await);

    let forged = run_script(vec!["forge".into(), console(&gateway), ALICE.into(), alices.clone()]).await;
    assert_eq!(forged["status"], 403, "{forged}");
    assert!(forged["text"].as_str().is_some_and(|t| t.contains("CSRF")), "{forged}");

    let alice = view(&gateway, ALICE, None).await;
    assert_eq!(runs(&alice["pending"]), [alices.as_str()], "still pending, and only alice's: {alice}");
    assert_eq!(runs(&alice["runs"]), [alices.as_str()], "{alice}");
    let bob = view(&gateway, BOB, None).await;
    assert_eq!(runs(&bob["pending"]), [bobs.as_str()], "{bob}");
    assert_eq!(runs(&bob["runs"]), [bobs.as_str()], "{bob}");
    let carol = view(&gateway, CAROL, None).await;
    let mut all = runs(&carol["pending"]);
    all.sort_unstable();
    let mut both = [alices.as_str(), bobs.as_str()];
    both.sort_unstable();
    assert_eq!(all, both, "the operator sees every principal's questions: {carol}");

    // Bob's wait on alice's run fails and leaves her question where it was.
    let refused = wait(&gateway, BOB, &alices).await;
    assert_eq!(refused["status"], "failed", "{refused}");
    let alice = view(&gateway, ALICE, None).await;
    assert_eq!(runs(&alice["pending"]), [alices.as_str()], "{alice}");

    // The operator decides bob's question.
    decide(&gateway, CAROL, &bobs, "Deny", None).await;
    let done = wait(&gateway, BOB, &bobs).await;
    assert_eq!(done["value"], serde_json::json!({ "refused": "denied" }), "{done}");
    assert!(!s.files.join("alice.txt").exists() && !s.files.join("bob.txt").exists());
}

#[tokio::test]
async fn an_open_pending_page_shows_a_new_question_by_itself() {
    let s = Setup::new("", None);
    let gateway = HttpGateway::start(&s.config).await;
    let args = vec!["live".into(), console(&gateway), ALICE.into(), gateway.url.clone(), s.write("live.txt")];
    let live = run_script(args).await;
    assert!(runs(&live["before"]).is_empty(), "{live}");
    let run_id = parked(&live["result"]);
    assert_eq!(runs(&live["listed"]), [run_id.as_str()], "the page reloaded on the server's event: {live}");
}

#[tokio::test]
async fn a_decision_and_its_history_outlive_a_gateway_restart() {
    let s = Setup::new("", None);
    let gateway = HttpGateway::start(&s.config).await;
    let run_id = parked(&exec(&gateway, ALICE, &s.write("restart.txt")).await);
    decide(&gateway, ALICE, &run_id, "Approve for this run", None).await;
    drop(gateway);

    let again = HttpGateway::start(&s.config).await;
    let seen = view(&again, ALICE, None).await;
    assert_eq!(seen["history"][0], serde_json::json!(["alice", "approved for the run", run_id]), "{seen}");
    let done = wait(&again, ALICE, &run_id).await;
    assert_eq!(done["value"], serde_json::json!({ "written": true }), "{done}");
    assert!(s.files.join("restart.txt").is_file());
    drop(s.dir);
}

#[tokio::test]
async fn a_decision_on_one_replica_resumes_the_run_on_the_other() {
    let url = harness::fresh_database().await.expect("the test PostgreSQL is available");
    let s = Setup::new("", Some(&url));
    // Both replicas share one request-state key, so each opens the other's links.
    let key = "ab".repeat(32);
    let a = HttpGateway::start_with_env(&s.config, &[], &[("CODEMODE_REQUEST_STATE_KEY", &key)]).await;
    let b = HttpGateway::start_with_env(&s.config, &[], &[("CODEMODE_REQUEST_STATE_KEY", &key)]).await;
    let run_id = parked(&exec(&a, ALICE, &s.write("fleet.txt")).await);
    // B lists the question A recorded, and the decision taken there resumes the run on A.
    let clicked = decide(&b, ALICE, &run_id, "Approve once", None).await;
    assert_eq!(runs(&clicked["pending"]), [run_id.as_str()], "{clicked}");
    let done = wait(&a, ALICE, &run_id).await;
    assert_eq!(done["value"], serde_json::json!({ "written": true }), "{done}");
    let on_a = view(&a, CAROL, None).await;
    assert_eq!(on_a["history"][0], serde_json::json!(["alice", "approved once", run_id]), "{on_a}");
}

#[tokio::test]
async fn a_task_waits_for_the_console_and_completes_with_the_decision() {
    use rmcp::model::{CallToolResponse, TaskStatus};
    super::tls();
    let (hook, mut notices) = webhook().await;
    let policy = "timeoutMs = 20000\n\n[policy]\nwrites = \"ask\"\nfallback = \"park\"";
    let (dir, config) = fixture(policy, "");
    let text = std::fs::read_to_string(&config).expect("config");
    let tables = format!("[approvals]\nwebhook = {hook:?}\n\n[console]\nlisten = \"127.0.0.1:0\"\n");
    std::fs::write(&config, format!("{text}\n{tables}")).expect("config");
    let path = dir.path().join("files").canonicalize().expect("files").join("task.txt");
    let code = format!(
        "await MCP.fs.writeFile({{ path: {:?}, content: \"from a task\" }}); return \"written\";",
        path.display().to_string()
    );

    // A stdio client that declared tasks and cannot elicit: its exec becomes a task that holds for the console.
    let mut client = super::protocol::Client::start(&config, true).await;
    let args = serde_json::json!({ "title": "task write", "code": code });
    let CallToolResponse::Task(created) = client.call("exec", args).await else { panic!("a task") };
    assert_eq!(created.task.status, TaskStatus::Working);
    let notice = notices.recv().await.expect("the webhook gets the question");
    assert!(!path.exists());
    let link = notice["url"].as_str().expect("a link").to_owned();
    let shot = "-".to_owned();
    let decided = run_script(vec!["link".into(), link, "Approve once".into(), shot]).await;
    assert_eq!(decided["status"], 200, "{decided}");
    let notified = client.task_notification().await;
    assert_eq!(notified.task.status(), TaskStatus::Completed, "{notified:?}");
    assert_eq!(std::fs::read_to_string(&path).expect("written"), "from a task");
}
