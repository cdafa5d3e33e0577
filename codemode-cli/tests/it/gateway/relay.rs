//! The gateway as its upstream servers' client, end to end: the `codemode mcp` binary over the real
//! server-everything and over `codemode-test-changing-tools` (a small rmcp server whose tools change on request),
//! driven by rmcp's client playing the person.
//!
//! Observed from the client: an upstream elicitation (form and URL modes) answered through the gateway (also during
//! an `exec` run as a task), declined for a client that cannot answer; sampling refused unless configured; a tool added upstream called in the next
//! cell, the gateway's own `tools/list_changed` when a direct-only tool changes, and a parked run failing with
//! `invalid_input` naming the tool that changed under it; an image (held by the gateway, a handle in the program)
//! and resource links a program attached, as content blocks of the `exec` result, an image a program returned (a
//! handle in its value) as a content block, and an attachment refused beyond the output budget; sampling answered by
//! the client with `sampling = "client"`; an upstream server that restarts with other tools.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577, and servers on earlier revisions still send it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability, ErrorData, FormElicitationCapability,
    Implementation, ProtocolVersion, SamplingCapability, SamplingMessage, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::fixture;

/// The person behind the client: accepts every form with a name and every URL, and records what was asked.
#[derive(Clone)]
struct Person {
    elicitation: bool,
    /// Whether the client declares sampling (and answers it as a model would).
    sampling: bool,
    /// Whether the client declares the tasks extension (its `exec` answers with a task).
    tasks: bool,
    asked: Arc<Mutex<Vec<(String, String)>>>,
    list_changed: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Person {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let (mode, shown, answer) = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. } => (
                "form",
                message.clone(),
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "name": "Ada Lovelace" })),
            ),
            ElicitRequestParams::UrlElicitationParams { url, .. } => {
                ("url", url.clone(), ElicitResult::new(ElicitationAction::Accept))
            }
            other => ("other", format!("{other:?}"), ElicitResult::new(ElicitationAction::Decline)),
        };
        self.asked.lock().expect("questions").push((mode.to_owned(), shown));
        Ok(answer)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let prompt = serde_json::to_value(&params.messages).expect("messages").to_string();
        self.asked.lock().expect("questions").push(("sampling".to_owned(), prompt));
        Ok(CreateMessageResult::new(SamplingMessage::assistant_text("a haiku about gateways"), "test-model".into())
            .with_stop_reason(CreateMessageResult::STOP_REASON_END_TURN))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.send(());
    }

    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        if self.elicitation {
            caps.elicitation = Some(
                ElicitationCapability::new()
                    .with_form(FormElicitationCapability::default())
                    .with_url(UrlElicitationCapability::new()),
            );
        }
        if self.sampling {
            caps.sampling = Some(SamplingCapability::default());
        }
        if self.tasks {
            caps.extensions = ClientCapabilities::builder().enable_tasks().build().extensions;
        }
        ClientConfig::new(caps, Implementation::new("relay-e2e", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

impl Person {
    /// What the client declares: (elicitation, sampling, tasks).
    fn with(elicitation: bool, sampling: bool, tasks: bool) -> (bool, bool, bool) {
        (elicitation, sampling, tasks)
    }
}

struct Gateway {
    client: RunningService<RoleClient, Person>,
    asked: Arc<Mutex<Vec<(String, String)>>>,
    list_changed: mpsc::UnboundedReceiver<()>,
    _dir: tempfile::TempDir,
}

impl Gateway {
    async fn start(config: &std::path::Path, dir: tempfile::TempDir, elicitation: bool) -> Gateway {
        Gateway::start_as(config, dir, Person::with(elicitation, false, false)).await
    }

    async fn start_as(config: &std::path::Path, dir: tempfile::TempDir, person: (bool, bool, bool)) -> Gateway {
        let (elicitation, sampling, tasks) = person;
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"));
        cmd.arg("mcp").arg("--config").arg(config).kill_on_drop(true);
        let transport = TokioChildProcess::new(cmd).expect("the codemode binary starts");
        let (tx, list_changed) = mpsc::unbounded_channel();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let person = Person { elicitation, sampling, tasks, asked: asked.clone(), list_changed: tx };
        let client = tokio::time::timeout(Duration::from_secs(60), person.serve(transport))
            .await
            .expect("the gateway answers the handshake within a minute")
            .expect("MCP handshake");
        Gateway { client, asked, list_changed, _dir: dir }
    }

    /// A gateway over server-everything (and server-filesystem), with `extra` top-level config lines.
    async fn everything(extra: &str, elicitation: bool) -> Gateway {
        Gateway::everything_with("timeoutMs = 20000", extra, elicitation).await
    }

    async fn everything_with(limits: &str, extra: &str, elicitation: bool) -> Gateway {
        let (dir, config) = fixture(limits, "");
        let text = std::fs::read_to_string(&config).expect("config");
        std::fs::write(&config, format!("{extra}\n{text}")).expect("config");
        Gateway::start(&config, dir, elicitation).await
    }

    /// A gateway over the changing-tools server only (as `dyn`, its `echo` direct-only).
    async fn changing() -> Gateway {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("gateway.toml");
        let server = env!("CARGO_BIN_EXE_codemode-test-changing-tools");
        // The file the server reads its changes at start from (written by its `restart_with` tool).
        let state = dir.path().join("next-start.txt");
        let text = format!(
            "[limits]\ntimeoutMs = 20000\n\n[servers.dyn]\ncommand = {server:?}\ndirect = [\"echo\"]\n\
             env = {{ CHANGING_TOOLS_NEXT_START = {state:?} }}\n",
            state = state.display().to_string(),
        );
        std::fs::write(&config, text).expect("config");
        Gateway::start(&config, dir, true).await
    }

    async fn call_raw(&self, tool: &str, args: Value) -> rmcp::model::CallToolResult {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = args.as_object().cloned();
        self.client.call_tool(params).await.expect("the gateway answers tools/call")
    }

    async fn call(&self, tool: &str, args: Value) -> Value {
        self.call_raw(tool, args).await.structured_content.expect("a CodeModeResult")
    }

    async fn exec(&self, code: &str) -> Value {
        self.call("exec", json!({ "title": "relay e2e", "code": code })).await
    }

    /// Waits for the gateway's next `notifications/tools/list_changed`.
    async fn next_list_changed(&mut self) {
        tokio::time::timeout(Duration::from_secs(60), self.list_changed.recv())
            .await
            .expect("the gateway says its tools changed within a minute")
            .expect("the client is running");
    }
}

fn completed(result: &Value) -> &Value {
    assert_eq!(result["status"], "completed", "{result}");
    &result["value"]
}

#[tokio::test]
async fn an_upstream_elicitation_is_answered_by_the_client_through_the_gateway() {
    let g = Gateway::everything("", true).await;
    let result = g
        .exec(
            r#"const texts = r => r.content.map(c => c.text).join("\n");
               const form = await MCP.everything.triggerElicitationRequest({});
               const url = await MCP.everything.triggerUrlElicitation({ url: "https://example.com/consent", message: "Open it" });
               return [texts(form), texts(url)];"#,
        )
        .await;
    let value = completed(&result);
    let form = value[0].as_str().expect("form text");
    assert!(form.contains("User provided the requested information") && form.contains("Ada Lovelace"), "{form}");
    let url = value[1].as_str().expect("url text");
    assert!(url.contains("User completed the URL elicitation flow"), "{url}");
    let asked = g.asked.lock().expect("questions").clone();
    assert_eq!(
        asked,
        [
            ("form".to_owned(), "Please provide inputs for the following fields:".to_owned()),
            ("url".to_owned(), "https://example.com/consent".to_owned()),
        ]
    );
}

#[tokio::test]
async fn an_elicitation_is_declined_for_a_client_that_cannot_answer() {
    // The gateway declares elicitation upstream always, so the tool exists; its client has no way to answer.
    let g = Gateway::everything("", false).await;
    let result = g
        .exec("const r = await MCP.everything.triggerElicitationRequest({}); return r.content.map(c => c.text).join('\\n');")
        .await;
    let text = completed(&result).as_str().expect("text").to_owned();
    assert!(text.contains("User declined"), "{text}");
}

#[tokio::test]
async fn sampling_is_answered_by_a_client_that_declared_it_with_sampling_client() {
    let (dir, config) = fixture("timeoutMs = 20000", "");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("sampling = \"client\"\n{text}")).expect("config");
    let g = Gateway::start_as(&config, dir, Person::with(true, true, false)).await;
    let result = g
        .exec(
            r#"const r = await MCP.everything.triggerSamplingRequest({ prompt: "write a haiku" });
                 return r.content.map(c => c.text).join("\n");"#,
        )
        .await;
    let text = completed(&result).as_str().expect("text").to_owned();
    assert!(text.contains("a haiku about gateways") && text.contains("test-model"), "{text}");
    let asked = g.asked.lock().expect("questions").clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].0, "sampling");
    assert!(asked[0].1.contains("write a haiku"), "the server's request reached the client unchanged: {asked:?}");
}

#[tokio::test]
async fn sampling_is_refused_unless_configured() {
    // Refused by default: the gateway does not declare sampling, so the server offers no sampling tool.
    let g = Gateway::everything("", true).await;
    let absent = g.exec("return typeof MCP.everything.triggerSamplingRequest").await;
    assert_eq!(completed(&absent), "undefined");
    drop(g);
    // `sampling = "client"` relays it; this client declared no sampling, so the server hears why it cannot be done.
    let g = Gateway::everything("sampling = \"client\"", true).await;
    let result = g
        .exec(
            r#"try { const r = await MCP.everything.triggerSamplingRequest({ prompt: "hi" });
                     return JSON.stringify(r); }
               catch (e) { return e.message; }"#,
        )
        .await;
    let text = completed(&result).as_str().expect("text").to_owned();
    assert!(text.contains("did not declare sampling"), "{text}");
}

#[tokio::test]
async fn a_tool_added_upstream_is_called_in_the_next_cell() {
    let mut g = Gateway::changing().await;
    let before = g.exec("return typeof MCP.dyn.greet").await;
    assert_eq!(completed(&before), "undefined");
    // `greet` is added; then the direct-only `echo` changes, which the gateway tells its client about once the
    // catalog is rebuilt (so the rebuild has seen `greet` too).
    let changed =
        g.exec(r#"await MCP.dyn.add({ name: "greet" }); await MCP.dyn.change({ name: "echo" }); return 1"#).await;
    assert_eq!(completed(&changed), 1);
    g.next_list_changed().await;
    let listed = g.client.list_all_tools().await.expect("tools/list");
    let echo = listed.iter().find(|t| t.name == "echo").expect("the direct-only echo is listed");
    assert_eq!(echo.input_schema.get("required"), Some(&json!(["extra"])), "{echo:?}");
    let called = g.exec(r#"return (await MCP.dyn.greet({ who: "Ada" })).content[0].text"#).await;
    assert_eq!(completed(&called), r#"greet: {"who":"Ada"}"#);

    // A run parked after calling `greet` cannot resume once `greet` changed: its wait names the tool.
    let parked = g
        .exec(r#"const r = await MCP.dyn.greet({ who: "Bo" }); await yield_control("look"); return r.content[0].text"#)
        .await;
    assert_eq!(parked["status"], "waiting", "{parked}");
    let run_id = parked["runId"].as_str().expect("runId").to_owned();
    let changed =
        g.exec(r#"await MCP.dyn.change({ name: "greet" }); await MCP.dyn.change({ name: "echo" }); return 2"#).await;
    assert_eq!(completed(&changed), 2);
    g.next_list_changed().await;
    let failed = g.call("wait", json!({ "runId": run_id })).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["code"], "invalid_input", "{failed}");
    let error = failed["error"].as_str().expect("error");
    assert!(error.contains("MCP.dyn.greet") && error.contains("changed its input schema"), "{error}");
}

const ATTACH_IMAGE_AND_LINKS: &str = r#"
    const image = (await MCP.everything.getTinyImage({})).content.find(c => c.type === "image");
    attach(image);
    const links = (await MCP.everything.getResourceLinks({ count: 2 })).content.filter(c => c.type === "resource_link");
    for (const link of links) attach(link);
    let refused = "";
    try { attach({ type: "text", text: "not an attachment" }); } catch (e) { refused = e.name + ": " + e.message; }
    return { image: image.bytes, bytesInGuest: "data" in image, handle: image.attachment, links: links.length, refused };"#;

#[tokio::test]
async fn an_image_and_resource_links_a_program_attaches_reach_the_client_as_content() {
    let g = Gateway::everything("", false).await;
    let result = g.call_raw("exec", json!({ "title": "attach", "code": ATTACH_IMAGE_AND_LINKS })).await;
    let value = result.structured_content.clone().expect("a CodeModeResult");
    let returned = completed(&value);
    assert_eq!(returned["links"], 2, "{value}");
    // The program held a handle, not the image's bytes.
    assert_eq!(returned["bytesInGuest"], false, "{value}");
    assert!(returned["handle"].as_str().is_some_and(|h| h.starts_with("att_")), "{value}");
    assert!(
        returned["refused"].as_str().is_some_and(|r| r.starts_with("TypeError") && r.contains("text(v)")),
        "{value}"
    );
    let content = serde_json::to_value(&result.content).expect("content");
    assert_eq!(content.as_array().map(Vec::len), Some(4), "the text, the image and two links: {content}");
    assert_eq!(content[1]["type"], "image", "{content}");
    assert_eq!(content[1]["mimeType"], "image/png");
    assert_eq!(content[1]["data"].as_str().map(str::len), returned["image"].as_u64().map(|n| n as usize));
    assert_eq!(
        (content[2]["type"].as_str(), content[3]["type"].as_str()),
        (Some("resource_link"), Some("resource_link"))
    );
    // The output keeps a note where each block was attached; the bytes are only in the content block.
    let output = &value["output"];
    assert_eq!(
        output[0],
        json!({ "type": "attachment", "contentIndex": 1, "blockType": "image", "mimeType": "image/png" })
    );
    assert!(!value.to_string().contains(content[1]["data"].as_str().expect("data")), "no base64 in the text");
}

#[tokio::test]
async fn an_attachment_beyond_the_output_budget_is_refused_whole() {
    // The tiny image is about 5.4 KB of base64; 8 KiB of budget leaves 4 KiB for output.
    let g = Gateway::everything_with("timeoutMs = 20000\nmaxOutputBytes = 8192", "", false).await;
    let result = g.call_raw("exec", json!({ "title": "attach", "code": ATTACH_IMAGE_AND_LINKS })).await;
    let value = result.structured_content.clone().expect("a CodeModeResult");
    completed(&value);
    let output = value["output"].to_string();
    assert!(output.contains("the image block of") && output.contains("does not fit the output budget"), "{output}");
    let types: Vec<_> =
        result.content.iter().map(|c| serde_json::to_value(c).expect("block")["type"].clone()).collect();
    assert_eq!(types, [json!("text"), json!("resource_link"), json!("resource_link")], "the links still fit");
}

#[tokio::test]
async fn an_image_a_program_returns_from_a_nested_call_reaches_the_client_as_content() {
    let g = Gateway::everything("", false).await;
    // The image as the tool gave it, inside the returned value, twice (one block), and the whole tool result.
    let code = r#"const r = await MCP.everything.getTinyImage({});
        const image = r.content.find(c => c.type === "image");
        return { image, again: image, whole: r, bytesInGuest: "data" in image };"#;
    let result = g.call_raw("exec", json!({ "title": "return an image", "code": code })).await;
    let value = result.structured_content.clone().expect("a CodeModeResult");
    let returned = completed(&value);
    assert_eq!(returned["bytesInGuest"], false, "{value}");
    let content = serde_json::to_value(&result.content).expect("content");
    assert_eq!(content.as_array().map(Vec::len), Some(2), "the text and one image: {content}");
    assert_eq!(content[1]["type"], "image", "{content}");
    assert_eq!(content[1]["mimeType"], "image/png");
    assert_eq!(content[1]["data"].as_str().map(str::len), returned["image"]["bytes"].as_u64().map(|n| n as usize));
    // Each handle in the value names the block it became.
    assert_eq!(returned["image"]["contentIndex"], 1, "{value}");
    assert_eq!(returned["again"]["contentIndex"], 1, "{value}");
    let in_whole = returned["whole"]["content"].as_array().expect("content").iter().find(|c| c["type"] == "image");
    assert_eq!(in_whole.expect("the image handle")["contentIndex"], 1, "{value}");
    assert!(!value.to_string().contains(content[1]["data"].as_str().expect("data")), "no base64 in the text");
}

#[tokio::test]
async fn an_upstream_server_restarted_with_other_tools_is_cataloged_again() {
    let mut g = Gateway::changing().await;
    let before = g.exec("return typeof MCP.dyn.greet").await;
    assert_eq!(completed(&before), "undefined");
    // The server stops in the middle of the call, to start next time with `greet` and another `echo`.
    let stopped = g
        .exec(
            r#"try { await MCP.dyn.restartWith({ changes: ["add greet", "change echo"] }); return "answered"; }
                 catch (e) { return e.message; }"#,
        )
        .await;
    let stopped = completed(&stopped).as_str().expect("text").to_owned();
    assert!(stopped.contains("stopped during"), "{stopped}");
    // The next call starts it again; the gateway lists its tools, rebuilds the catalog and, since the direct-only
    // `echo` changed, tells the client.
    let again = g.exec(r#"return (await MCP.dyn.remove({ name: "nothing" })).content[0].text"#).await;
    assert_eq!(completed(&again), "remove: done");
    g.next_list_changed().await;
    let listed = g.client.list_all_tools().await.expect("tools/list");
    let echo = listed.iter().find(|t| t.name == "echo").expect("the direct-only echo is listed");
    assert_eq!(echo.input_schema.get("required"), Some(&json!(["extra"])), "{echo:?}");
    let called = g.exec(r#"return (await MCP.dyn.greet({ who: "Ada" })).content[0].text"#).await;
    assert_eq!(completed(&called), r#"greet: {"who":"Ada"}"#);
}

#[tokio::test]
async fn an_upstream_elicitation_during_a_task_is_answered_by_the_client() {
    let (dir, config) = fixture("timeoutMs = 20000", "");
    let g = Gateway::start_as(&config, dir, Person::with(true, false, true)).await;
    let code =
        "const r = await MCP.everything.triggerElicitationRequest({}); return r.content.map(c => c.text).join('\\n');";
    let mut params = CallToolRequestParams::new("exec");
    params.arguments = json!({ "title": "task elicitation", "code": code }).as_object().cloned();
    let rmcp::model::CallToolResponse::Task(created) =
        g.client.peer().call_tool_once(params).await.expect("tools/call")
    else {
        panic!("a client that declared tasks gets a task");
    };
    let id = created.task.task_id;
    let ended = loop {
        let got = g.client.peer().get_task(rmcp::model::GetTaskParams::new(id.clone())).await.expect("tasks/get");
        if got.task.status() != rmcp::model::TaskStatus::Working {
            break got.task;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let rmcp::model::TaskPayload::Completed { result } = &ended.payload else { panic!("completed: {ended:?}") };
    let text = result["structuredContent"]["value"].as_str().expect("text").to_owned();
    assert!(text.contains("Ada Lovelace"), "the client's answer reached the server: {text}");
    assert_eq!(g.asked.lock().expect("questions").len(), 1);
}
