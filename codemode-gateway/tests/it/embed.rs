//! Embedding the gateway from an outside crate: `examples/embed-gateway` is built in this test's target folder and
//! started as an MCP server over stdio with a config naming the real server-everything; one program calls the
//! embedder's own tool and an MCP tool, and the policy of the config holds for the own tool too.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crate sits in the repository").to_path_buf()
}

/// The target folder this test binary was built in (`<target>/debug/deps/it-…`): the example, built there with the
/// workspace's hakari crate patched in (as `scripts/test.sh` builds it), reuses every third-party crate the tests'
/// build compiled.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    exe.ancestors().nth(3).expect("<target>/<profile>/deps/<binary>").to_path_buf()
}

/// The `--config` that patches crates.io's empty `workspace-hack` with the workspace's (what `scripts/test.sh` passes).
fn hack() -> String {
    format!("patch.crates-io.workspace-hack.path={:?}", repo().join("workspace-hack").display().to_string())
}

/// The cargo that runs this test, without the variables it set for this test's process (the `CARGO_PKG_` and
/// `CARGO_BIN_EXE_` families, `CARGO_MANIFEST_DIR`, …): a build script that reruns when one of them changes (ring's)
/// would otherwise rerun, and every crate above it recompile.
fn cargo() -> Command {
    let mut command = Command::new(env!("CARGO"));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_") || key.starts_with("CARGO_BIN_EXE_") || CRATE_VARS.contains(&&*key) {
            command.env_remove(&*key);
        }
    }
    command
}

/// The variables cargo sets for a crate's process besides the two families.
const CRATE_VARS: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "OUT_DIR",
];

/// Builds the example (a no-op when `scripts/test.sh` built it first) and returns its binary.
fn example() -> PathBuf {
    let output = cargo()
        .args(["build", "--quiet", "--offline", "--config", &hack(), "--manifest-path"])
        .arg(repo().join("examples/embed-gateway/Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "the example does not build:\n{}", String::from_utf8_lossy(&output.stderr));
    target_dir().join("debug/codemode-embed-gateway-example")
}

/// A config wrapping server-everything, with `extra` appended, in a temp dir.
fn config(extra: &str) -> (tempfile::TempDir, PathBuf) {
    let everything = repo().join("mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(everything.is_file(), "{} is missing: run `npm ci --prefix mcp-servers` first", everything.display());
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("gateway.toml");
    let text = format!(
        "{extra}\n\n[servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
        everything.display().to_string()
    );
    std::fs::write(&file, text).expect("config file");
    (dir, file)
}

async fn connect(config: &Path) -> RunningService<RoleClient, ClientConfig> {
    let mut command = tokio::process::Command::new(example());
    command.arg(config).kill_on_drop(true);
    let transport = TokioChildProcess::new(command).expect("the example starts");
    let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("embed-gateway", "0"));
    tokio::time::timeout(Duration::from_secs(120), info.serve(transport))
        .await
        .expect("the embedded gateway answers the handshake")
        .expect("MCP handshake")
}

async fn exec(client: &RunningService<RoleClient, ClientConfig>, code: &str) -> Value {
    let mut params = CallToolRequestParams::new("exec");
    params.arguments = json!({ "title": "embedded", "code": code }).as_object().cloned();
    let result = client.call_tool(params).await.expect("the gateway answers tools/call");
    result.structured_content.expect("exec results carry structuredContent")
}

#[tokio::test]
async fn an_outside_crate_serves_its_own_tool_beside_mcp_servers() {
    let (_dir, file) = config("");
    let client = connect(&file).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["exec", "wait"]);
    let result = exec(
        &client,
        "const sky = await forecast({ city: 'Oslo' });\n\
         const echo = await MCP.everything.echo({ message: 'hi' });\n\
         const found = await catalog.search('forecast');\n\
         return { sky, echo: echo.content[0].text, found: found.map(t => t.toolName) };",
    )
    .await;
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["value"]["sky"], json!({ "city": "Oslo", "sky": "clear", "highC": 21 }), "{result}");
    assert_eq!(result["value"]["echo"], "Echo: hi", "{result}");
    assert!(result["value"]["found"].as_array().is_some_and(|f| f.contains(&json!("forecast"))), "{result}");
    let refused = exec(&client, "return await forecast({})").await;
    assert_eq!(refused["status"], "failed", "{refused}");
    client.cancel().await.expect("the session closes");
}

#[tokio::test]
async fn the_config_policy_holds_for_the_embedders_own_tools() {
    let (_dir, file) = config("[policy]\n[[policy.rules]]\nmatch = \"forecast\"\npolicy = \"deny\"");
    let client = connect(&file).await;
    let result =
        exec(&client, "try { await forecast({ city: 'Oslo' }); return 'ran' } catch (e) { return e.code }").await;
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["value"], "denied", "{result}");
    let echo = exec(&client, "return (await MCP.everything.echo({ message: 'still' })).content[0].text").await;
    assert_eq!(echo["value"], "Echo: still", "{echo}");
    client.cancel().await.expect("the session closes");
}
