//! Approvals end to end: the `codemode mcp` binary over the real server-filesystem, with `writes = "ask"`, driven
//! by rmcp's client playing the person who answers.
//!
//! The client answers from a script and records every question it was asked; the files on disk say which writes
//! happened. Both channels are covered: `elicitation/create` during the call (a 2025-11-25 session) and the
//! input-required round trip (the sessionless 2026-07-28 revision, which rmcp's client answers by retrying).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorData, Implementation, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

use super::fixture;

/// The person behind the client: answers questions from a script, in order, and remembers each question.
#[derive(Clone)]
struct Person {
    answers: Arc<Mutex<VecDeque<&'static str>>>,
    asked: Arc<Mutex<Vec<String>>>,
    elicitation: bool,
    version: ProtocolVersion,
}

impl Person {
    fn new(answers: &[&'static str], elicitation: bool, version: ProtocolVersion) -> Person {
        Person {
            answers: Arc::new(Mutex::new(answers.iter().copied().collect())),
            asked: Arc::new(Mutex::new(Vec::new())),
            elicitation,
            version,
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("questions").clone()
    }
}

impl ClientHandler for Person {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let message = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            other => format!("unexpected elicitation: {other:?}"),
        };
        self.asked.lock().expect("questions").push(message);
        let answer = self.answers.lock().expect("answers").pop_front().unwrap_or("cancel");
        Ok(match answer {
            "decline" => ElicitResult::new(ElicitationAction::Decline),
            "cancel" => ElicitResult::new(ElicitationAction::Cancel),
            choice => ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "decision": choice })),
        })
    }

    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        if self.elicitation {
            caps.elicitation = Some(ElicitationCapability::new());
        }
        ClientConfig::new(caps, Implementation::new("approvals-e2e", "0")).with_protocol_version(self.version.clone())
    }
}

struct Gateway {
    client: RunningService<RoleClient, Person>,
    person: Person,
    files: PathBuf,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// A gateway over server-filesystem whose policy asks before every write, and a client played by `person`.
    async fn start(policy: &str, person: Person) -> Gateway {
        Gateway::start_with(policy, "", person).await
    }

    /// [`Gateway::start`] with `fs_extra` appended to the filesystem server's table (`direct = [..]`).
    async fn start_with(policy: &str, fs_extra: &str, person: Person) -> Gateway {
        let (dir, config) = fixture(&format!("timeoutMs = 20000\n\n[policy]\n{policy}"), "");
        // The filesystem server's table comes last in the fixture.
        let text = std::fs::read_to_string(&config).expect("config");
        std::fs::write(&config, format!("{text}{fs_extra}\n")).expect("config");
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"));
        cmd.arg("mcp").arg("--config").arg(&config).kill_on_drop(true);
        let transport = TokioChildProcess::new(cmd).expect("the codemode binary starts");
        // The sessionless revision has no `initialize`: its client starts with `server/discover`.
        let lifecycle = if person.version.has_initialize() {
            ClientLifecycleMode::Initialize
        } else {
            ClientLifecycleMode::Discover { preferred_versions: vec![person.version.clone()] }
        };
        let client =
            tokio::time::timeout(Duration::from_secs(60), person.clone().serve_with_lifecycle(transport, lifecycle))
                .await
                .expect("the gateway answers the handshake within a minute")
                .expect("MCP handshake");
        let files = dir.path().join("files").canonicalize().expect("files dir");
        Gateway { client, person, files, _dir: dir }
    }

    async fn exec(&self, code: &str) -> Value {
        let mut params = CallToolRequestParams::new("exec");
        params.arguments = Some(json!({ "title": "write three files", "code": code }).as_object().cloned().unwrap());
        let result = self.client.call_tool(params).await.expect("the gateway answers tools/call");
        result.structured_content.expect("a CodeModeResult")
    }

    fn path(&self, name: &str) -> String {
        self.files.join(name).display().to_string()
    }

    /// A program that writes a.txt, b.txt and c.txt, catching each failure, and returns what each write did.
    fn three_writes(&self) -> String {
        let [a, b, c] = [self.path("a.txt"), self.path("b.txt"), self.path("c.txt")];
        format!(
            r#"const out = [];
               for (const path of [{a:?}, {b:?}, {c:?}]) {{
                 try {{ await MCP.fs.writeFile({{ path, content: "written" }}); out.push("ok"); }}
                 catch (e) {{ out.push(e.code); }}
               }}
               return out;"#
        )
    }
}

fn exists(path: &Path) -> bool {
    path.is_file()
}

#[tokio::test]
async fn each_write_is_asked_through_the_input_required_round_trip() {
    let person = Person::new(&["approve", "approve", "approve"], true, ProtocolVersion::V_2026_07_28);
    let g = Gateway::start("writes = \"ask\"", person).await;
    let result = g.exec(&g.three_writes()).await;
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["value"], json!(["ok", "ok", "ok"]), "{result}");
    let asked = g.person.asked();
    assert_eq!(asked.len(), 3, "one question per write: {asked:?}");
    assert!(asked.iter().all(|q| q.contains("MCP.fs.writeFile") && q.contains("write three files")), "{asked:?}");
    for name in ["a.txt", "b.txt", "c.txt"] {
        assert!(exists(&g.files.join(name)), "{name} was written");
    }
}

#[tokio::test]
async fn the_input_required_result_names_the_call_and_only_its_own_sealed_state_resumes() {
    let person = Person::new(&[], true, ProtocolVersion::V_2026_07_28);
    let g = Gateway::start("writes = \"ask\"", person).await;
    let a = g.path("a.txt");
    let code = format!(r#"await MCP.fs.writeFile({{ path: {a:?}, content: "x" }}); return "done";"#);
    let mut params = CallToolRequestParams::new("exec");
    params.arguments = json!({ "title": "one write", "code": code }).as_object().cloned();
    let first = g.client.peer().call_tool_once(params.clone()).await.expect("tools/call");
    let CallToolResponse::InputRequired(asked) = first else { panic!("an input-required result: {first:?}") };
    let requests = asked.input_requests.clone().expect("input requests");
    assert_eq!(requests.len(), 1, "one question for one write: {requests:?}");
    let (call_id, request) = requests.iter().next().expect("one request");
    let question = serde_json::to_value(request).expect("request JSON");
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert!(question["params"]["message"].as_str().is_some_and(|m| m.contains("MCP.fs.writeFile")), "{question}");
    assert!(!Path::new(&a).exists(), "nothing is written before the answer");

    // A state the gateway did not seal is refused, and the run stays parked for the real one.
    let state = asked.request_state.clone().expect("a sealed requestState");
    let mut forged = params.clone();
    forged.request_state = Some(format!("{state}x"));
    assert!(g.client.peer().call_tool_once(forged).await.is_err(), "a forged requestState is refused");

    let mut retry = params;
    retry.request_state = Some(state);
    let answer = json!({ "action": "accept", "content": { "decision": "approve" } });
    retry.input_responses = Some([(call_id.clone(), answer)].into_iter().collect());
    let done = g.client.peer().call_tool_once(retry).await.expect("tools/call");
    let CallToolResponse::Complete(done) = done else { panic!("the retry completes: {done:?}") };
    let done = done.structured_content.expect("a CodeModeResult");
    assert_eq!(done["value"], "done", "{done}");
    assert!(Path::new(&a).is_file(), "the approved write ran once the answer came");
}

#[tokio::test]
async fn approve_for_the_run_asks_once_over_elicitation() {
    let person = Person::new(&["approve_for_run"], true, ProtocolVersion::V_2025_11_25);
    let g = Gateway::start("writes = \"ask\"", person).await;
    let result = g.exec(&g.three_writes()).await;
    assert_eq!(result["value"], json!(["ok", "ok", "ok"]), "{result}");
    assert_eq!(g.person.asked().len(), 1, "one question for the whole run: {:?}", g.person.asked());
    for name in ["a.txt", "b.txt", "c.txt"] {
        assert!(exists(&g.files.join(name)), "{name} was written");
    }
}

#[tokio::test]
async fn a_denied_write_leaves_no_file_and_the_facts_name_the_writes_that_happened() {
    for version in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28] {
        let person = Person::new(&["approve", "deny", "approve"], true, version.clone());
        let g = Gateway::start("writes = \"ask\"", person).await;
        let code = format!("{}\n;throw new Error('after the writes');", g.three_writes().replace("return out;", ""));
        let result = g.exec(&code).await;
        assert_eq!(result["status"], "failed", "{version}: {result}");
        assert_eq!(g.person.asked().len(), 3, "{version}");
        assert!(exists(&g.files.join("a.txt")) && exists(&g.files.join("c.txt")), "{version}: approved writes ran");
        assert!(!exists(&g.files.join("b.txt")), "{version}: the denied write did not run");
        assert_eq!(result["mutationFree"], false, "{version}: {result}");
        let writes = result["writes"].as_array().unwrap_or_else(|| panic!("{version}: writes listed: {result}"));
        let paths: Vec<String> = writes.iter().map(|w| w["preview"].to_string()).collect();
        assert_eq!(writes.len(), 2, "{version}: exactly the two approved writes: {result}");
        assert!(paths[0].contains("a.txt") && paths[1].contains("c.txt"), "{version}: {paths:?}");
        assert!(writes.iter().all(|w| w["status"] == "completed"), "{version}: {result}");
    }
}

#[tokio::test]
async fn declining_or_cancelling_denies() {
    let person = Person::new(&["decline", "cancel", "approve"], true, ProtocolVersion::V_2025_11_25);
    let g = Gateway::start("writes = \"ask\"", person).await;
    let result = g.exec(&g.three_writes()).await;
    assert_eq!(result["value"], json!(["denied", "denied", "ok"]), "{result}");
    assert!(!exists(&g.files.join("a.txt")) && !exists(&g.files.join("b.txt")));
    assert!(exists(&g.files.join("c.txt")));
}

#[tokio::test]
async fn a_client_that_cannot_be_asked_gets_the_fallback_and_nobody_is_asked() {
    for (fallback, expected) in [("deny", json!(["denied", "denied", "denied"])), ("allow", json!(["ok", "ok", "ok"]))]
    {
        let person = Person::new(&[], false, ProtocolVersion::V_2026_07_28);
        let g = Gateway::start(&format!("writes = \"ask\"\nfallback = \"{fallback}\""), person).await;
        let result = g.exec(&g.three_writes()).await;
        assert_eq!(result["value"], expected, "fallback {fallback}: {result}");
        assert!(g.person.asked().is_empty(), "no question without the elicitation capability");
        assert_eq!(exists(&g.files.join("a.txt")), fallback == "allow");
    }
}

#[tokio::test]
async fn reads_are_never_asked_and_a_deny_rule_refuses_without_asking() {
    let person = Person::new(&[], true, ProtocolVersion::V_2025_11_25);
    let g =
        Gateway::start("writes = \"ask\"\n[[policy.rules]]\nmatch = \"fs.write_*\"\npolicy = \"deny\"", person).await;
    std::fs::write(g.files.join("r.txt"), "read me").expect("fixture");
    let code = format!(
        r#"const text = (await MCP.fs.readTextFile({{ path: {r:?} }})).content[0].text;
           let code = null;
           try {{ await MCP.fs.writeFile({{ path: {w:?}, content: "x" }}); }} catch (e) {{ code = [e.code, e.effectStatus]; }}
           return {{ text, code }};"#,
        r = g.path("r.txt"),
        w = g.path("w.txt"),
    );
    let result = g.exec(&code).await;
    assert_eq!(result["value"]["text"], "read me", "{result}");
    assert_eq!(result["value"]["code"], json!(["denied", "not_started"]), "{result}");
    assert!(g.person.asked().is_empty(), "{:?}", g.person.asked());
    assert!(!exists(&g.files.join("w.txt")));
}

/// A title that forges a question and pushes the real one 30 lines down.
const FORGED_TITLE: &str = "Read the forecast\nAllow MCP.weather.get to read the forecast?\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n";

#[tokio::test]
async fn a_forged_title_cannot_hide_the_real_call_on_either_channel() {
    let mut questions = Vec::new();
    for version in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28] {
        let person = Person::new(&["deny"], true, version.clone());
        let g = Gateway::start("writes = \"ask\"", person).await;
        let a = g.path("a.txt");
        let code = format!(
            r#"try {{ await MCP.fs.writeFile({{ path: {a:?}, content: "x" }}) }} catch (e) {{ return e.code }}"#
        );
        let mut params = CallToolRequestParams::new("exec");
        params.arguments = json!({ "title": FORGED_TITLE, "code": code }).as_object().cloned();
        let result = g.client.call_tool(params).await.expect("tools/call").structured_content.expect("a result");
        assert_eq!(result["value"], "denied", "{version}: {result}");
        let asked = g.person.asked();
        let [question] = asked.as_slice() else { panic!("{version}: one question: {asked:?}") };
        // The real tool and its arguments first, the title after them, quoted on one line.
        assert!(question.starts_with("Allow MCP.fs.writeFile to run with the arguments {"), "{version}: {question}");
        assert!(question.find(&a) < question.find("Read the forecast"), "{version}: {question}");
        assert!(!question.contains('\n'), "{version}: {question:?}");
        assert!(
            question.contains("titled \"Read the forecastAllow MCP.weather.get to read the forecast?\""),
            "{question}"
        );
        questions.push(question.replace(&a, "<a>"));
    }
    assert_eq!(questions[0], questions[1], "the elicitation and the input-required form ask the same question");
}

/// Calls the direct-only tool `write_file` as the client, with `path`.
async fn write_directly(g: &Gateway, path: &str) -> rmcp::model::CallToolResult {
    let mut params = CallToolRequestParams::new("write_file");
    params.arguments = json!({ "path": path, "content": "direct" }).as_object().cloned();
    g.client.call_tool(params).await.expect("tools/call answers")
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect()
}

#[tokio::test]
async fn a_direct_only_tool_obeys_a_deny_rule() {
    let person = Person::new(&[], true, ProtocolVersion::V_2025_11_25);
    let policy = "[[policy.rules]]\nmatch = \"fs.write_file\"\npolicy = \"deny\"";
    let g = Gateway::start_with(policy, "direct = [\"write_file\"]", person).await;
    let result = write_directly(&g, &g.path("d.txt")).await;
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let text = text_of(&result);
    assert!(text.contains("denied by the tool policy by rule \"fs.write_file\""), "{text}");
    assert_eq!(result.structured_content.as_ref().map(|v| v["code"].clone()), Some(json!("denied")));
    assert!(!exists(&g.files.join("d.txt")), "the denied direct call did not run");
    assert!(g.person.asked().is_empty());
}

#[tokio::test]
async fn a_direct_only_tool_is_asked_about_over_elicitation() {
    let person = Person::new(&["deny", "approve"], true, ProtocolVersion::V_2025_11_25);
    let g = Gateway::start_with("writes = \"ask\"", "direct = [\"write_file\"]", person).await;
    let denied = write_directly(&g, &g.path("d.txt")).await;
    assert_eq!(denied.is_error, Some(true), "{denied:?}");
    assert!(text_of(&denied).contains("a person denied this call"), "{denied:?}");
    assert!(!exists(&g.files.join("d.txt")));
    let approved = write_directly(&g, &g.path("d.txt")).await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    assert!(exists(&g.files.join("d.txt")), "the approved direct call ran");
    let asked = g.person.asked();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[0].starts_with("Allow fs.write_file to run with the arguments {"), "{asked:?}");
    assert!(asked[0].ends_with("The client called this tool directly."), "{asked:?}");
}

#[tokio::test]
async fn a_direct_only_tool_is_asked_about_through_input_required_once() {
    let person = Person::new(&[], true, ProtocolVersion::V_2026_07_28);
    let g = Gateway::start_with("writes = \"ask\"", "direct = [\"write_file\"]", person).await;
    let d = g.path("d.txt");
    let mut params = CallToolRequestParams::new("write_file");
    params.arguments = json!({ "path": d, "content": "direct" }).as_object().cloned();
    let first = g.client.peer().call_tool_once(params.clone()).await.expect("tools/call");
    let CallToolResponse::InputRequired(asked) = first else { panic!("an input-required result: {first:?}") };
    let requests = asked.input_requests.clone().expect("input requests");
    let (call_id, request) = requests.iter().next().expect("one request");
    let question = serde_json::to_value(request).expect("request JSON");
    let message = question["params"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.starts_with("Allow fs.write_file to run with the arguments {"), "{question}");
    assert!(!exists(&g.files.join("d.txt")), "nothing is written before the answer");
    let state = asked.request_state.clone().expect("a sealed requestState");
    let answer = json!({ "action": "accept", "content": { "decision": "approve" } });
    let answers: rmcp::model::InputResponses = [(call_id.clone(), answer)].into_iter().collect();

    // The approval is for this call only: other arguments are refused.
    let mut other = params.clone();
    other.arguments = json!({ "path": g.path("e.txt"), "content": "direct" }).as_object().cloned();
    other.request_state = Some(state.clone());
    other.input_responses = Some(answers.clone());
    assert!(g.client.peer().call_tool_once(other).await.is_err(), "an approval of other arguments is refused");
    assert!(!exists(&g.files.join("e.txt")));

    let mut retry = params;
    retry.request_state = Some(state);
    retry.input_responses = Some(answers);
    let done = g.client.peer().call_tool_once(retry.clone()).await.expect("tools/call");
    let CallToolResponse::Complete(done) = done else { panic!("the retry completes: {done:?}") };
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert!(exists(&g.files.join("d.txt")), "the approved direct call ran");
    // An approval runs its call once: the same retry again is refused.
    std::fs::remove_file(g.files.join("d.txt")).expect("remove");
    assert!(g.client.peer().call_tool_once(retry).await.is_err(), "a replayed approval is refused");
    assert!(!exists(&g.files.join("d.txt")));
}

#[tokio::test]
async fn a_direct_only_tool_nobody_can_be_asked_about_gets_the_fallback() {
    let person = Person::new(&[], false, ProtocolVersion::V_2026_07_28);
    let g = Gateway::start_with("writes = \"ask\"", "direct = [\"write_file\"]", person).await;
    let result = write_directly(&g, &g.path("d.txt")).await;
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(text_of(&result).contains("fallback denied it"), "{result:?}");
    assert!(!exists(&g.files.join("d.txt")));
}

/// What a program gets from the `everything` server's resources and prompts, and from one of its tools.
const RESOURCES_AND_PROMPTS: &str = r#"
    const out = {};
    const list = await MCP.everything.resources.list({});
    const uri = list.resources[0].uri;
    try { await MCP.everything.resources.read({ uri }); out.read = "ok" } catch (e) { out.read = e.code }
    try { await MCP.everything.prompts.get({ name: "simple-prompt" }); out.prompt = "ok" } catch (e) { out.prompt = e.code }
    try { await MCP.everything.echo({ message: "hi" }); out.tool = "ok" } catch (e) { out.tool = e.code }
    return out;"#;

#[tokio::test]
async fn resources_and_prompts_obey_rules_and_default_and_are_reads() {
    for (policy, expected) in [
        // A server whose every tool is denied serves no resource or prompt either; listing is discovery.
        (
            "[[policy.rules]]\nmatch = \"everything.*\"\npolicy = \"deny\"",
            json!({ "read": "denied", "prompt": "denied", "tool": "denied" }),
        ),
        // `default` covers them; a rule on one path beats it.
        (
            "default = \"deny\"\n[[policy.rules]]\nmatch = \"everything.prompts.get\"\npolicy = \"allow\"",
            json!({ "read": "denied", "prompt": "ok", "tool": "denied" }),
        ),
        // Their effect class is read (as `echo`'s, which its server marks read-only): `writes` leaves them alone.
        ("writes = \"deny\"", json!({ "read": "ok", "prompt": "ok", "tool": "ok" })),
    ] {
        let person = Person::new(&[], true, ProtocolVersion::V_2025_11_25);
        let g = Gateway::start(policy, person).await;
        let result = g.exec(RESOURCES_AND_PROMPTS).await;
        assert_eq!(result["value"], expected, "{policy}: {result}");
        assert!(g.person.asked().is_empty());
    }
}

#[tokio::test]
async fn reading_a_resource_can_be_asked_about() {
    let person = Person::new(&["deny", "approve"], true, ProtocolVersion::V_2025_11_25);
    let policy = "[[policy.rules]]\nmatch = \"everything.resources.read\"\npolicy = \"ask\"";
    let g = Gateway::start(policy, person).await;
    let code = r#"const uri = (await MCP.everything.resources.list({})).resources[0].uri;
        const out = [];
        for (let i = 0; i < 2; i++) {
          try { await MCP.everything.resources.read({ uri }); out.push("ok") } catch (e) { out.push(e.code) }
        }
        return out;"#;
    let result = g.exec(code).await;
    assert_eq!(result["value"], json!(["denied", "ok"]), "{result}");
    let asked = g.person.asked();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[0].starts_with("Allow MCP.everything.resources.read to run with the arguments {\"uri\""),
        "{asked:?}"
    );
}

/// The Python interpreter of the venv `scripts/test.sh` makes (`target/py`, with `tests/py/requirements.txt`), or
/// `$CODEMODE_TEST_PYTHON`; a panic that says how to make it otherwise.
pub(super) fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("CODEMODE_TEST_PYTHON") {
        return PathBuf::from(python);
    }
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/py/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: the approval tests drive the gateway with the MCP Python SDK's client too; run \
         `python3 -m venv target/py && target/py/bin/pip install -r codemode-cli/tests/py/requirements.txt` at the \
         repository root (scripts/test.sh does)",
        python.display()
    );
    python
}

/// Runs the Python SDK's client against a gateway with `writes = "ask"`: `mode` is "legacy" or "auto", `answers`
/// its person's answers in order. Returns the CodeModeResult and the questions asked.
fn python_exec(mode: &str, answers: &str) -> (Value, Vec<String>, PathBuf, tempfile::TempDir) {
    let (dir, config) = fixture("timeoutMs = 20000\n\n[policy]\nwrites = \"ask\"", "");
    let files = dir.path().join("files").canonicalize().expect("files dir");
    let paths: Vec<String> = ["a.txt", "b.txt", "c.txt"].iter().map(|n| files.join(n).display().to_string()).collect();
    let code = format!(
        r#"const out = [];
           for (const path of {paths:?}) {{
             try {{ await MCP.fs.writeFile({{ path, content: "written" }}); out.push("ok"); }}
             catch (e) {{ out.push(e.code); }}
           }}
           return out;"#
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/approvals.py");
    let output = std::process::Command::new(python())
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_codemode"))
        .arg(&config)
        .arg(mode)
        .arg(answers)
        .arg(code)
        .output()
        .expect("python runs");
    assert!(output.status.success(), "the Python client failed: {}", String::from_utf8_lossy(&output.stderr));
    let out: Value = serde_json::from_slice(&output.stdout).expect("the script prints JSON");
    let asked = out["asked"].as_array().expect("questions").iter().map(|q| q.as_str().unwrap_or("").to_owned());
    (out["result"].clone(), asked.collect(), files, dir)
}

#[test]
fn the_python_sdk_client_answers_over_both_channels() {
    for mode in ["legacy", "2026-07-28"] {
        let (result, asked, files, _dir) = python_exec(mode, "approve,deny,approve_for_run");
        assert_eq!(result["value"], json!(["ok", "denied", "ok"]), "{mode}: {result}");
        assert_eq!(asked.len(), 3, "{mode}: {asked:?}");
        assert!(asked[0].contains("MCP.fs.writeFile") && asked[0].contains("python writes"), "{mode}: {asked:?}");
        assert!(files.join("a.txt").is_file() && !files.join("b.txt").is_file() && files.join("c.txt").is_file());
        assert_eq!(result["completedWrites"], 2, "{mode}: {result}");
    }
}
