//! Secrets stay in the gateway, checked on the `codemode mcp` binary with the real npm servers: a stdio server starts
//! with a clean environment (the default set and what `inherit_env` names, never the gateway's keys); a secret with
//! `"`, `\` or a control character is masked in its JSON-escaped spellings in activity previews and approval
//! questions; a store password is masked in every form on a failed start; a state key file others can read stops
//! the gateway with the `chmod` that fixes it.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, ErrorData, Implementation,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::fixture;

/// A valid state key (`keyid:base64` of 32 bytes) and request-state key (64 hex digits).
const STATE_KEY: &str = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const REQUEST_STATE_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
/// A secret an upstream server is given, holding what JSON escapes: `"`, `\` and a tab.
const QUOTED_SECRET: &str = "Zq9\"Kp\\w7\tmx4R-sec";

/// The client's side: records every elicitation message and denies.
#[derive(Clone, Default)]
struct Person {
    asked: Arc<Mutex<Vec<String>>>,
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
        Ok(ElicitResult::new(ElicitationAction::Decline))
    }

    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.elicitation = Some(ElicitationCapability::new());
        ClientConfig::new(caps, Implementation::new("secrets-e2e", "0"))
    }
}

/// `codemode mcp --config <config>` with `env` added to this process's environment, and a client session on it.
async fn start(config: &Path, env: &[(&str, &str)], person: Person) -> RunningService<RoleClient, Person> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"));
    cmd.arg("mcp").arg("--config").arg(config).envs(env.iter().copied()).kill_on_drop(true);
    let transport = TokioChildProcess::new(cmd).expect("the codemode binary starts");
    tokio::time::timeout(Duration::from_secs(60), person.serve(transport))
        .await
        .expect("the gateway answers the handshake within a minute")
        .expect("MCP handshake")
}

/// Runs `code` through `exec` and returns the CodeModeResult.
async fn exec(client: &RunningService<RoleClient, Person>, code: &str) -> Value {
    let mut params = CallToolRequestParams::new("exec");
    params.arguments = json!({ "title": "secrets", "code": code }).as_object().cloned();
    let result = client.call_tool(params).await.expect("the gateway answers tools/call");
    result.structured_content.expect("a CodeModeResult")
}

/// Whether `shown` holds any spelling of [`QUOTED_SECRET`] or a recognizable piece of one: each spelling (as
/// written, JSON-escaped once or twice) begins with `Zq9` and ends with `mx4R-sec`.
fn shows_quoted_secret(shown: &str) -> bool {
    shown.contains("Zq9") || shown.contains("mx4R-sec") || shown.contains("Kp\\")
}

#[tokio::test]
async fn an_upstream_server_gets_a_clean_environment_without_the_gateway_s_secrets() {
    let (_dir, config) = fixture("timeoutMs = 20000", "inherit_env = [\"CODEMODE_TEST_NAMED\"]");
    let secrets = [
        ("CODEMODE_STATE_KEY", STATE_KEY),
        ("CODEMODE_STATE_KEY_FILE", "/run/secrets/codemode-state-keys"),
        ("CODEMODE_REQUEST_STATE_KEY", REQUEST_STATE_KEY),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Basic b3RlbDpzZWNyZXQ="),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-api-key=otlp-traces-secret"),
    ];
    let others = [("CODEMODE_TEST_NAMED", "named-value"), ("CODEMODE_TEST_UNNAMED", "unnamed"), ("LC_TIME", "C")];
    let env: Vec<(&str, &str)> = secrets.iter().chain(&others).copied().collect();
    let client = start(&config, &env, Person::default()).await;
    // server-everything's `get-env` returns its whole `process.env` as JSON text.
    let result = exec(&client, "return (await MCP.everything.getEnv({})).content[0].text").await;
    assert_eq!(result["status"], "completed", "{result}");
    let text = result["value"].as_str().expect("the environment as text");
    let seen: serde_json::Map<String, Value> = serde_json::from_str(text).expect("JSON");
    for (name, value) in secrets {
        assert!(!seen.contains_key(name) && !text.contains(value), "{name} reached the server: {text}");
    }
    assert_eq!(seen.get("CODEMODE_TEST_NAMED"), Some(&json!("named-value")), "inherit_env passes it on: {text}");
    assert_eq!(seen.get("LC_TIME"), Some(&json!("C")), "the locale is passed on: {text}");
    assert!(!seen.contains_key("CODEMODE_TEST_UNNAMED"), "a variable nobody named stays home: {text}");
    // Node found its way: the default set is there.
    let path = std::env::var("PATH").expect("the test runs with a PATH");
    assert_eq!(seen.get("PATH"), Some(&json!(path)), "{text}");
    // Nothing else of the gateway's environment: each variable is in the default set, the locale, or named.
    let allowed = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "CODEMODE_TEST_NAMED"];
    for name in seen.keys() {
        assert!(allowed.contains(&name.as_str()) || name.starts_with("LC_"), "{name} reached the server: {text}");
    }
}

#[tokio::test]
async fn a_secret_holding_quotes_is_masked_in_activity_previews_escaped_once_and_twice() {
    let secret = serde_json::to_string(QUOTED_SECRET).expect("a JSON string, also a TOML basic string");
    let (_dir, config) = fixture("timeoutMs = 20000", &format!("env = {{ DEMO_TOKEN = {secret} }}"));
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str("\n[telemetry]\nactivity = true\n");
    std::fs::write(&config, text).expect("config");
    let client = start(&config, &[], Person::default()).await;
    // The first call's arguments and result hold the secret escaped once in their JSON previews; the second's, JSON
    // text inside a JSON string, escaped twice.
    let code = format!(
        r#"const once = await MCP.everything.echo({{ message: {secret} }});
           const twice = await MCP.everything.echo({{ message: JSON.stringify({{ v: {secret} }}) }});
           return [once.content[0].text, twice.content[0].text];"#
    );
    let result = exec(&client, &code).await;
    assert_eq!(result["status"], "completed", "{result}");
    // The model's value is what the tool returned: only the record meant for people is masked.
    assert_eq!(result["value"][0], json!(format!("Echo: {QUOTED_SECRET}")), "{result}");
    let calls = result["activity"]["calls"].as_array().unwrap_or_else(|| panic!("activity on the result: {result}"));
    assert_eq!(calls.len(), 2, "{result}");
    for call in calls {
        for field in ["args", "result"] {
            let preview = call[field].as_str().unwrap_or_else(|| panic!("a {field} preview: {call}"));
            assert!(!shows_quoted_secret(preview), "the secret shows in the {field} preview: {preview}");
            assert!(preview.contains("[REDACTED]"), "{preview}");
        }
    }
}

#[tokio::test]
async fn a_secret_holding_quotes_is_masked_in_the_approval_question() {
    let secret = serde_json::to_string(QUOTED_SECRET).expect("a JSON string, also a TOML basic string");
    let (dir, config) =
        fixture("timeoutMs = 20000\n\n[policy]\nwrites = \"ask\"", &format!("env = {{ DEMO_TOKEN = {secret} }}"));
    let target = dir.path().join("files").canonicalize().expect("files dir").join("token.txt");
    let person = Person::default();
    let client = start(&config, &[], person.clone()).await;
    let code = format!(
        r#"try {{ await MCP.fs.writeFile({{ path: {path:?}, content: {secret} }}); return "written"; }}
           catch (e) {{ return e.code; }}"#,
        path = target.display().to_string(),
    );
    let result = exec(&client, &code).await;
    assert_eq!(result["status"], "completed", "{result}");
    assert!(!target.exists(), "a declined write leaves no file");
    let asked = person.asked.lock().expect("questions").clone();
    assert_eq!(asked.len(), 1, "one question for the write: {asked:?}");
    assert!(asked[0].contains("MCP.fs.writeFile"), "{asked:?}");
    assert!(!shows_quoted_secret(&asked[0]), "the secret shows in the question: {}", asked[0]);
    assert!(asked[0].contains("[REDACTED]"), "{}", asked[0]);
}

/// Runs `codemode mcp` to its end with no client (stdin closed) and returns whether it succeeded and its stderr.
async fn run_to_end(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"));
    cmd.arg("mcp")
        .args(args)
        .env_remove("CODEMODE_STATE_KEY")
        .env_remove("CODEMODE_STATE_KEY_FILE")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("the gateway ends within two minutes")
        .expect("the codemode binary runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A config whose only server exits at once (it is reported unavailable), so a start gets to the store quickly.
fn bare_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let config = dir.join("gateway.toml");
    std::fs::write(&config, format!("[servers.gone]\ncommand = \"true\"\n{extra}")).expect("config");
    config
}

#[tokio::test]
async fn a_failed_start_masks_the_store_password_in_every_form() {
    const PASSWORD: &str = "s3cret-pw-4711";
    let dir = tempfile::tempdir().expect("temp dir");
    // Nothing listens on port 1: each start fails connecting, and says which store it tried.
    let forms = [
        format!("postgres://app:{PASSWORD}@127.0.0.1:1/codemode"),
        format!("postgres://127.0.0.1:1/codemode?user=app&password={PASSWORD}"),
        format!("host=127.0.0.1 port=1 user=app password={PASSWORD} dbname=codemode"),
        format!("host=127.0.0.1 port=1 user=app password='{PASSWORD}' dbname=codemode"),
    ];
    let config = bare_config(dir.path(), "");
    for url in &forms {
        let (ok, stderr) = run_to_end(&["--config", config.to_str().expect("utf-8"), "--store", url], &[]).await;
        assert!(!ok, "no store, no start: {stderr}");
        assert!(stderr.contains("[store] url") && stderr.contains("***"), "the store is named, masked: {stderr}");
        assert!(!stderr.contains(PASSWORD), "the password shows for {url}: {stderr}");
    }
    // The same from the config file, and a value the config check refuses.
    for url in [forms[2].as_str(), &format!("mysql://app:{PASSWORD}@127.0.0.1:1/codemode")] {
        let config = bare_config(dir.path(), &format!("\n[store]\nurl = {url:?}\n"));
        let (ok, stderr) = run_to_end(&["--config", config.to_str().expect("utf-8")], &[]).await;
        assert!(!ok, "no store, no start: {stderr}");
        assert!(stderr.contains("***"), "{stderr}");
        assert!(!stderr.contains(PASSWORD), "the password shows for {url}: {stderr}");
    }
}

#[tokio::test]
async fn a_state_key_file_group_or_others_can_read_stops_the_gateway_with_the_chmod_that_fixes_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = dir.path().join("state-keys");
    std::fs::write(&keys, format!("{STATE_KEY}\n")).expect("key file");
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let config = bare_config(dir.path(), "");
    let state = dir.path().join("state");
    let args = ["--config", config.to_str().expect("utf-8"), "--state-dir", state.to_str().expect("utf-8")];
    let key_file = [("CODEMODE_STATE_KEY_FILE", keys.to_str().expect("utf-8"))];
    let (ok, stderr) = run_to_end(&args, &key_file).await;
    assert!(!ok, "an open key file stops the gateway: {stderr}");
    let fix = format!(
        "state key file {path} is accessible by group or others (mode 0644): run `chmod 600 {path}` so that only its \
         owner can read it",
        path = keys.display()
    );
    assert!(stderr.contains(&fix), "{stderr}");
    // Once fixed, the keys are read: the gateway starts and ends when its client (stdin) is gone.
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (_, stderr) = run_to_end(&args, &key_file).await;
    assert!(!stderr.contains("state key file"), "{stderr}");
}
