//! The authentication front of the Streamable HTTP transport, as the MCP authorization spec has a resource server
//! behave: protected-resource metadata (RFC 9728) at `/.well-known/oauth-protected-resource`, `401` with a
//! `WWW-Authenticate: Bearer resource_metadata="…"` challenge for a missing or bad token, `403` for missing scopes,
//! `429` with `Retry-After` past the principal's request rate.
//!
//! A request that passes reaches the MCP transport with its [`Principal`] in its extensions and without its
//! `Authorization` header. An MCP session is bound to the principal that opened it: another principal's request
//! naming that session is answered as for an unknown session; a principal may have `max_sessions` open, and one
//! more is answered `429 too_many_sessions` ([`Sessions`]). Invariant: no request reaches the MCP transport without
//! a verified principal, nor names a session its principal did not open.

use std::sync::Arc;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::limits::PrincipalLimits;
use super::sessions::{Sessions, tracked};
use super::{Authenticator, Body, Principal, Rejection};

/// The well-known path of the protected-resource metadata (RFC 9728); the same document is also served under it
/// with the resource's path appended.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

const SESSION_HEADER: &str = "mcp-session-id";

/// The authentication front; one per gateway, shared by every connection.
pub struct AuthFront {
    auth: Arc<Authenticator>,
    limits: Arc<PrincipalLimits>,
    /// `[auth] resource`, else derived per request from its `Host` header.
    resource: Option<String>,
    issuers: Vec<String>,
    scopes: Vec<String>,
    /// The MCP sessions of each principal.
    sessions: Arc<Sessions>,
}

impl std::fmt::Debug for AuthFront {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthFront").field("resource", &self.resource).field("auth", &self.auth).finish()
    }
}

impl AuthFront {
    /// A front over `auth`, `limits` and `sessions`; `resource` and `issuers` go into the metadata document.
    pub fn new(
        auth: Arc<Authenticator>,
        limits: Arc<PrincipalLimits>,
        sessions: Arc<Sessions>,
        resource: Option<String>,
        issuers: Vec<String>,
        scopes: Vec<String>,
    ) -> AuthFront {
        AuthFront { auth, limits, resource, issuers, scopes, sessions }
    }

    /// The MCP sessions of every principal, whose rmcp manager the transport must use.
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Serves one request: the metadata document, a refusal, or `next` (the MCP transport) with the principal.
    pub async fn serve<B, F, Fut>(&self, mut request: Request<B>, next: F) -> Response<Body>
    where
        F: FnOnce(Request<B>) -> Fut,
        Fut: Future<Output = Response<Body>>,
    {
        let resource = self.resource_for(&request);
        if request.uri().path().starts_with(METADATA_PATH) {
            return self.metadata(request.method(), &resource);
        }
        let principal = match self.principal(&request).await {
            Ok(principal) => principal,
            Err(rejection) => return challenge(&rejection, &resource),
        };
        if let Err(limited) = self.limits.admit_request(&principal.key) {
            let description = format!(
                "principal {:?} is over its rate of {}; retry after {} s",
                principal.name, limited.rate, limited.retry_after_s
            );
            let mut response = json_response(
                StatusCode::TOO_MANY_REQUESTS,
                &json!({ "error": "rate_limited", "error_description": description }),
            );
            response.headers_mut().insert(hyper::header::RETRY_AFTER, HeaderValue::from(limited.retry_after_s));
            return response;
        }
        let session = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut busy = None;
        if let Some(session) = &session {
            // Every session was opened through this front: one it does not hold for this principal is another's,
            // or closed. Answered as rmcp answers a session it does not know: the session's existence is not
            // revealed.
            if self.sessions.owner(session).is_none_or(|owner| owner != principal.key) {
                return json_response(
                    StatusCode::NOT_FOUND,
                    &json!({ "error": "session_not_found", "error_description": "Session not found" }),
                );
            }
            // A `POST` keeps its session busy until its answer is sent; a `GET` stream does not.
            if request.method() == Method::POST {
                busy = self.sessions.begin(session);
            }
        }
        let deleting = request.method() == Method::DELETE;
        let (key, name) = (principal.key.clone(), principal.name.clone());
        // The token stops here: nothing behind this front (the MCP handler, upstream servers) ever sees it.
        request.headers_mut().remove(hyper::header::AUTHORIZATION);
        request.extensions_mut().insert(principal);
        let response = next(request).await;
        let opened = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        match (&session, opened) {
            (Some(session), _) if deleting && response.status().is_success() => self.sessions.closed(session),
            (None, Some(opened)) => match self.sessions.opened(&opened, &key).await {
                Ok(first) => busy = Some(first),
                Err(too_many) => {
                    let description = format!(
                        "principal {name:?} has {max} MCP sessions open, its share (max_sessions = {max}); close one \
                         (DELETE with its Mcp-Session-Id) or leave one idle for {idle} s (session_idle_seconds), \
                         then initialize again",
                        max = too_many.max,
                        idle = too_many.idle_seconds,
                    );
                    return json_response(
                        StatusCode::TOO_MANY_REQUESTS,
                        &json!({ "error": "too_many_sessions", "error_description": description }),
                    );
                }
            },
            _ => {}
        }
        match busy {
            Some(busy) => {
                let (parts, body) = response.into_parts();
                Response::from_parts(parts, tracked(body, busy))
            }
            None => response,
        }
    }

    async fn principal<B>(&self, request: &Request<B>) -> Result<Principal, Rejection> {
        let Some(header) = request.headers().get(hyper::header::AUTHORIZATION) else {
            return Err(Rejection::Missing);
        };
        let value =
            header.to_str().map_err(|_| Rejection::InvalidToken("the Authorization header is not ASCII".into()))?;
        let token = match value.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => token.trim(),
            _ => {
                return Err(Rejection::InvalidToken("the Authorization header is not `Bearer <token>`".into()));
            }
        };
        self.auth.authenticate(token).await
    }

    /// The resource identifier: `[auth] resource`, else `http://<Host>/mcp`.
    fn resource_for<B>(&self, request: &Request<B>) -> String {
        if let Some(resource) = &self.resource {
            return resource.clone();
        }
        let host = request
            .headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_graphic()))
            .unwrap_or("localhost");
        format!("http://{host}/mcp")
    }

    fn metadata(&self, method: &Method, resource: &str) -> Response<Body> {
        if method != Method::GET && method != Method::HEAD {
            return json_response(
                StatusCode::METHOD_NOT_ALLOWED,
                &json!({ "error": "invalid_request", "error_description": "the metadata document is read with GET" }),
            );
        }
        let mut document = json!({
            "resource": resource,
            "authorization_servers": self.issuers,
            "bearer_methods_supported": ["header"],
            "resource_name": "codemode gateway",
        });
        if !self.scopes.is_empty() {
            document["scopes_supported"] = json!(self.scopes);
        }
        let mut response = json_response(StatusCode::OK, &document);
        response.headers_mut().insert("access-control-allow-origin", HeaderValue::from_static("*"));
        response
    }
}

/// The metadata URL of a resource: its origin followed by [`METADATA_PATH`].
pub fn metadata_url(resource: &str) -> String {
    let origin_end = resource
        .find("://")
        .map(|scheme| resource[scheme + 3..].find('/').map_or(resource.len(), |slash| scheme + 3 + slash))
        .unwrap_or(resource.len());
    format!("{}{METADATA_PATH}", &resource[..origin_end])
}

/// The 401/403 answer to a refused request, with the `WWW-Authenticate` challenge of RFC 6750 and RFC 9728.
fn challenge(rejection: &Rejection, resource: &str) -> Response<Body> {
    let metadata = metadata_url(resource);
    let description = rejection.description();
    let (status, header, body) = match rejection {
        Rejection::Missing => (
            StatusCode::UNAUTHORIZED,
            format!("Bearer resource_metadata=\"{metadata}\""),
            json!({ "error": "invalid_request", "error_description": description }),
        ),
        Rejection::InvalidToken(_) => (
            StatusCode::UNAUTHORIZED,
            format!(
                "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{metadata}\"",
                quotable(&description)
            ),
            json!({ "error": "invalid_token", "error_description": description }),
        ),
        Rejection::InsufficientScope { required } => (
            StatusCode::FORBIDDEN,
            format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\", error_description=\"{}\", \
                 resource_metadata=\"{metadata}\"",
                quotable(required),
                quotable(&description)
            ),
            json!({ "error": "insufficient_scope", "error_description": description }),
        ),
    };
    let mut response = json_response(status, &body);
    if let Ok(value) = HeaderValue::from_str(&header) {
        response.headers_mut().insert(WWW_AUTHENTICATE, value);
    }
    response
}

/// `text` with only the characters RFC 6750 allows inside a quoted `error_description` (printable ASCII without
/// `"` and `\`).
fn quotable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            c if c == ' ' || c.is_ascii_graphic() => c,
            _ => '?',
        })
        .collect()
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert(hyper::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn the_metadata_url_is_the_resource_origin_and_the_well_known_path() {
        assert_eq!(
            metadata_url("https://gw.example.com/mcp"),
            "https://gw.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(metadata_url("http://127.0.0.1:8931"), "http://127.0.0.1:8931/.well-known/oauth-protected-resource");
    }

    #[test]
    fn descriptions_are_made_quotable() {
        assert_eq!(quotable("kid \"a\\b\" é"), "kid 'a/b' ?");
    }

    #[tokio::test]
    async fn the_token_stops_at_the_front_and_only_the_principal_goes_on() {
        use sha2::Digest as _;
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("tokens.txt");
        let digest = hex::encode(sha2::Sha256::digest(b"alice-token"));
        std::fs::write(&file, format!("alice sha256:{digest}\n")).expect("tokens file");
        let settings = crate::config::AuthSettings {
            tokens_file: Some(file),
            jwt: None,
            resource: None,
            required_scopes: Vec::new(),
            max_concurrent_runs: None,
            requests_per_minute: None,
            requests_per_hour: None,
            shares: crate::config::PrincipalShares::default(),
        };
        let clock = Arc::new(codemode::store::ManualClock::new(0));
        let auth = Arc::new(Authenticator::new(&settings, clock.clone()).await.expect("authenticator"));
        let limits = Arc::new(PrincipalLimits::new(None, None, clock));
        let sessions = crate::auth::sessions::Sessions::new(4, std::time::Duration::from_secs(60));
        let front = AuthFront::new(auth, limits, sessions, Some("https://gw.test/mcp".into()), Vec::new(), Vec::new());
        let request = Request::builder()
            .method(Method::POST)
            .uri("/mcp")
            .header("authorization", "Bearer alice-token")
            .header("x-request-id", "kept")
            .body(())
            .expect("request");
        let seen = Arc::new(Mutex::new(None));
        let behind = seen.clone();
        let response = front
            .serve(request, |r| async move {
                *behind.lock().expect("lock") = Some((r.headers().clone(), r.extensions().get::<Principal>().cloned()));
                json_response(StatusCode::OK, &json!({}))
            })
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let (headers, principal) = seen.lock().expect("lock").take().expect("the request went on");
        assert!(headers.get("authorization").is_none(), "the token never reaches the MCP handler: {headers:?}");
        assert_eq!(headers["x-request-id"], "kept");
        assert_eq!(principal.map(|p| p.key), Some("token:alice".to_owned()));
    }
}
