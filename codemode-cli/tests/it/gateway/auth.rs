//! `[auth]` end to end: a real `codemode mcp --http` process, raw HTTP requests for the resource-server answers
//! (401 challenges, metadata, 429) and rmcp's client with a bearer header for runs and limits.
//!
//! Tokens are signed here with the committed test keys (`codemode-gateway/tests/fixtures/auth`); the gateway reads
//! the matching JWK Set from a file. Static tokens are `alice-static-token` (principal `alice`) and
//! `carol-static-token` (`carol`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, ErrorData, Implementation, ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::{HttpGateway, servers_toml};

pub(super) const ISSUER: &str = "https://idp.test/realms/agents";
pub(super) const AUDIENCE: &str = "https://gateway.test/mcp";
const METADATA: &str = "https://gateway.test/.well-known/oauth-protected-resource";
pub(super) const UNKNOWN_RUN: &str = "code mode run is unavailable or expired.";

pub(super) fn keys() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../codemode-gateway/tests/fixtures/auth")
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs()
}

/// A JWT signed with `key` (a file under the fixtures) as `kid`, with these claims over valid defaults.
pub(super) fn jwt(key: &str, alg: Algorithm, kid: &str, claims: Value) -> String {
    let pem = std::fs::read(keys().join(key)).expect("test key");
    let encoding = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(&pem),
        _ => EncodingKey::from_rsa_pem(&pem),
    }
    .expect("test key parses");
    let mut all = json!({ "iss": ISSUER, "aud": AUDIENCE, "sub": "bob", "exp": now() + 3600, "iat": now() });
    for (k, v) in claims.as_object().expect("claims object") {
        all[k] = v.clone();
    }
    let mut header = Header::new(alg);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, &all, &encoding).expect("signs")
}

fn bob() -> String {
    jwt("rsa-issuer.pem", Algorithm::RS256, "rsa-1", json!({}))
}

/// A gateway process serving HTTP with `[auth]` (static tokens and JWTs), plus `auth_extra` lines in `[auth]` and
/// `tail` after it.
pub(super) struct AuthGateway {
    pub(super) url: String,
    base: String,
    _gateway: HttpGateway,
    files: PathBuf,
    _dir: tempfile::TempDir,
}

impl AuthGateway {
    pub(super) async fn start(auth_extra: &str, tail: &str) -> AuthGateway {
        super::tls();
        let dir = tempfile::tempdir().expect("temp dir");
        let files = dir.path().join("files");
        std::fs::create_dir(&files).expect("files dir");
        let files = files.canonicalize().expect("canonical files dir");
        let digest = |token: &str| hex::encode(sha2::Sha256::digest(token.as_bytes()));
        std::fs::write(
            dir.path().join("tokens.txt"),
            format!(
                "# principal  sha256 of the token\nalice sha256:{}\n\ncarol sha256:{}\n",
                digest("alice-static-token"),
                digest("carol-static-token")
            ),
        )
        .expect("tokens file");
        let config = dir.path().join("gateway.toml");
        let text = format!(
            "[limits]\ntimeoutMs = 20000\n\n[auth]\ntokens_file = \"tokens.txt\"\nissuers = [{ISSUER:?}]\n\
             audience = {AUDIENCE:?}\njwks_file = {jwks:?}\n{auth_extra}\n{tail}\n{servers}",
            jwks = keys().join("jwks.json").display().to_string(),
            servers = servers_toml(&files, ""),
        );
        std::fs::write(&config, text).expect("config file");
        let gateway = HttpGateway::start(&config).await;
        let (url, base) = (gateway.url.clone(), gateway.base().to_owned());
        AuthGateway { url, base, _gateway: gateway, files, _dir: dir }
    }

    /// A raw `initialize` POST with this `Authorization` header value (none for `None`).
    pub(super) async fn post(&self, authorization: Option<&str>) -> reqwest::Response {
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "raw", "version": "0" } }
        });
        let mut request = reqwest::Client::new()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.send().await.expect("the gateway answers")
    }

    pub(super) async fn bearer(&self, token: &str) -> reqwest::Response {
        self.post(Some(&format!("Bearer {token}"))).await
    }

    /// An MCP client session carrying `token`.
    pub(super) async fn client(&self, token: &str) -> RunningService<RoleClient, ClientConfig> {
        let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("auth-e2e", "0"));
        info.serve(transport(&self.url, token)).await.expect("MCP handshake with a bearer token")
    }
}

pub(super) fn transport(url: &str, token: &str) -> StreamableHttpClientTransport<reqwest::Client> {
    StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url).auth_header(token))
}

fn www_authenticate(response: &reqwest::Response) -> String {
    let value = response.headers().get("www-authenticate").expect("a WWW-Authenticate challenge");
    value.to_str().expect("ASCII").to_owned()
}

/// Asserts a 401 `invalid_token` answer whose description contains `why`.
async fn refused(response: reqwest::Response, why: &str) {
    assert_eq!(response.status(), 401);
    let challenge = www_authenticate(&response);
    assert!(challenge.starts_with("Bearer error=\"invalid_token\", error_description=\""), "{challenge}");
    assert!(challenge.ends_with(&format!("resource_metadata=\"{METADATA}\"")), "{challenge}");
    let body: Value = serde_json::from_str(&response.text().await.expect("body")).expect("JSON body");
    assert_eq!(body["error"], "invalid_token");
    let description = body["error_description"].as_str().expect("a description");
    assert!(description.contains(why), "{description:?} should say {why:?}");
}

pub(super) async fn call(client: &RunningService<RoleClient, ClientConfig>, tool: &str, args: Value) -> Value {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = args.as_object().cloned();
    let result = client.call_tool(params).await.expect("tools/call");
    result.structured_content.expect("a CodeModeResult")
}

pub(super) async fn exec(client: &RunningService<RoleClient, ClientConfig>, code: &str) -> Value {
    call(client, "exec", json!({ "title": "auth e2e", "code": code })).await
}

#[tokio::test]
async fn every_token_failure_is_a_401_with_the_resource_metadata_challenge() {
    let g = AuthGateway::start("", "").await;

    let none = g.post(None).await;
    assert_eq!(none.status(), 401);
    assert_eq!(www_authenticate(&none), format!("Bearer resource_metadata=\"{METADATA}\""));
    refused(g.post(Some("Basic YWxpY2U6eA==")).await, "is not `Bearer <token>`").await;

    let forged = jwt("rsa-other.pem", Algorithm::RS256, "rsa-1", json!({}));
    refused(g.bearer(&forged).await, "signature does not verify").await;
    let audience = jwt("rsa-issuer.pem", Algorithm::RS256, "rsa-1", json!({ "aud": "https://other.test/mcp" }));
    refused(g.bearer(&audience).await, "audience (aud) does not include this gateway").await;
    let issuer = jwt("rsa-issuer.pem", Algorithm::RS256, "rsa-1", json!({ "iss": "https://evil.test/" }));
    refused(g.bearer(&issuer).await, "issuer (iss) is not one this gateway trusts").await;
    // Past the 60 s leeway.
    let expired = jwt("rsa-issuer.pem", Algorithm::RS256, "rsa-1", json!({ "exp": now() - 3600 }));
    refused(g.bearer(&expired).await, "the token expired").await;
    let unknown_key = jwt("rsa-other.pem", Algorithm::RS256, "rsa-9", json!({}));
    refused(g.bearer(&unknown_key).await, "(kid \"rsa-9\") is not one of the issuer's keys").await;
    refused(g.bearer("not-a-token").await, "neither one of this gateway's static tokens nor a JWT").await;

    assert_eq!(g.bearer("alice-static-token").await.status(), 200, "a static token from the file");
    assert_eq!(g.bearer(&bob()).await.status(), 200, "an RS256 JWT");
    assert_eq!(g.bearer(&jwt("ec-issuer.pem", Algorithm::ES256, "ec-1", json!({}))).await.status(), 200, "ES256");
    assert_eq!(g.bearer(&jwt("ed-issuer.pem", Algorithm::EdDSA, "ed-1", json!({}))).await.status(), 200, "EdDSA");
}

#[tokio::test]
async fn the_protected_resource_metadata_is_served_without_a_token() {
    let g = AuthGateway::start("", "").await;
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let response = reqwest::get(format!("{}{path}", g.base)).await.expect("metadata answers");
        assert_eq!(response.status(), 200, "{path}");
        let document: Value = serde_json::from_str(&response.text().await.expect("body")).expect("JSON");
        assert_eq!(document["resource"], AUDIENCE, "{document}");
        assert_eq!(document["authorization_servers"], json!([ISSUER]), "{document}");
        assert_eq!(document["bearer_methods_supported"], json!(["header"]), "{document}");
    }
}

#[tokio::test]
async fn missing_scopes_are_a_403_naming_them() {
    let g = AuthGateway::start("required_scopes = [\"mcp:tools\"]", "").await;
    let without = g.bearer(&bob()).await;
    assert_eq!(without.status(), 403);
    let challenge = www_authenticate(&without);
    assert!(challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"mcp:tools\""), "{challenge}");
    let with = jwt("rsa-issuer.pem", Algorithm::RS256, "rsa-1", json!({ "scope": "openid mcp:tools" }));
    assert_eq!(g.bearer(&with).await.status(), 200);
    assert_eq!(g.bearer("alice-static-token").await.status(), 200, "a static token carries every scope");
}

#[tokio::test]
async fn a_run_belongs_to_its_principal_across_sessions_and_is_invisible_to_others() {
    let g = AuthGateway::start("", "").await;
    let alice = g.client("alice-static-token").await;
    let first =
        exec(&alice, "await store('note', 'from alice'); await yield_control('pause'); return await load('note');")
            .await;
    assert_eq!(first["status"], "waiting", "{first}");
    let run_id = first["runId"].as_str().expect("runId").to_owned();

    // Another principal: the run reads exactly as a run that never existed, and so does its store.
    let bob = g.client(&bob()).await;
    let made_up = call(&bob, "wait", json!({ "runId": "cm_00000000-0000-4000-8000-000000000000" })).await;
    assert_eq!(made_up["error"], UNKNOWN_RUN, "{made_up}");
    let foreign = call(&bob, "wait", json!({ "runId": run_id })).await;
    assert_eq!(
        (&foreign["status"], &foreign["code"], &foreign["error"]),
        (&made_up["status"], &made_up["code"], &made_up["error"])
    );
    assert_eq!(exec(&bob, "return await load('note');").await["value"], Value::Null, "bob's store is his own");
    // Bob cancelling a wait on it (the gateway's abort) cannot touch it either: the wait is refused before it
    // starts, and the run stays parked for alice.
    if let Ok(answer) =
        tokio::time::timeout(Duration::from_millis(200), call(&bob, "wait", json!({ "runId": run_id }))).await
    {
        assert_eq!(answer["error"], UNKNOWN_RUN, "{answer}");
    }
    drop(bob);

    // The same principal on a new session (a new client, as another replica would see it) reads its store and
    // resumes its run.
    let again = g.client("alice-static-token").await;
    assert_eq!(exec(&again, "return await load('note');").await["value"], "from alice");
    let done = call(&again, "wait", json!({ "runId": run_id })).await;
    assert_eq!((&done["status"], &done["value"]), (&json!("completed"), &json!("from alice")), "{done}");
    drop(alice);
}

#[tokio::test]
async fn a_principal_over_its_request_rate_gets_429_and_others_do_not() {
    // One request an hour: the second is refused, however slowly the test runs (a request comes back after an hour;
    // the refill itself is tested on a manual clock in `auth::limits`).
    let g = AuthGateway::start("requests_per_hour = 1", "").await;
    assert_eq!(g.bearer("alice-static-token").await.status(), 200);
    let limited = g.bearer("alice-static-token").await;
    assert_eq!(limited.status(), 429);
    let retry: u64 = limited.headers()["retry-after"].to_str().expect("ASCII").parse().expect("seconds");
    assert!((1..=3600).contains(&retry), "Retry-After {retry}");
    let body: Value = serde_json::from_str(&limited.text().await.expect("body")).expect("JSON");
    assert_eq!(body["error"], "rate_limited", "{body}");
    assert!(
        body["error_description"].as_str().is_some_and(|d| d.contains("over its rate of 1 requests per hour")),
        "{body}"
    );
    assert_eq!(g.bearer(&bob()).await.status(), 200, "bob has his own bucket");
}

/// A client that answers approval questions only when the test lets it, and says when it was asked.
#[derive(Clone)]
struct HeldApprover {
    asked: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

impl ClientHandler for HeldApprover {
    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.notify_one();
        self.release.notified().await;
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "decision": "approve" })))
    }

    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.elicitation = Some(ElicitationCapability::new());
        ClientConfig::new(caps, Implementation::new("held-approver", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

#[tokio::test]
async fn a_principal_at_its_concurrent_run_limit_is_refused_until_a_run_answers() {
    let g = AuthGateway::start("max_concurrent_runs = 1", "[policy]\nwrites = \"ask\"\n").await;
    let approver = HeldApprover { asked: Arc::default(), release: Arc::default() };
    let held = approver.clone().serve(transport(&g.url, "alice-static-token")).await.expect("handshake");
    let path = g.files.join("held.txt").display().to_string();
    let code = format!(r#"await MCP.fs.writeFile({{ path: {path:?}, content: "x" }}); return "written";"#);
    let mut params = CallToolRequestParams::new("exec");
    params.arguments = json!({ "title": "held write", "code": code }).as_object().cloned();
    let peer = held.peer().clone();
    let running = tokio::spawn(async move { peer.call_tool(params).await });
    // The gateway asks before the write: alice's one run is now in progress, waiting for the answer.
    approver.asked.notified().await;

    let second = g.client("alice-static-token").await;
    let refused = exec(&second, "return 1;").await;
    assert_eq!((&refused["status"], &refused["code"]), (&json!("failed"), &json!("runtime_unavailable")), "{refused}");
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("too many runs in progress")), "{refused}");
    let carol = g.client("carol-static-token").await;
    assert_eq!(exec(&carol, "return 2;").await["value"], 2, "the limit is alice's, not the gateway's");

    approver.release.notify_one();
    let done = running.await.expect("task").expect("tools/call").structured_content.expect("result");
    assert_eq!(done["value"], "written", "{done}");
    assert_eq!(exec(&second, "return 3;").await["value"], 3, "the run place came back when the run answered");
}
