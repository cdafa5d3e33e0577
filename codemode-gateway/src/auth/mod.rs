//! Who is calling the HTTP gateway: bearer tokens checked as an OAuth 2.1 resource server (the MCP authorization
//! spec), static tokens from a file, and the limits each authenticated principal gets.
//!
//! `jwt` checks access tokens against issuers, an audience and a JWK Set; `limits` counts each principal's
//! requests and runs; `sessions` holds each principal's MCP sessions (a bounded number, closed when idle); `http`
//! puts all of it in front of the Streamable HTTP transport. This module owns the [`Authenticator`] (token →
//! [`Principal`]) and the static token file. Invariant: a token is looked at here and
//! nowhere else; the request that reaches the MCP handler carries the principal and no longer carries the token.

pub mod http;
pub mod jwt;
pub mod limits;
pub mod sessions;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use codemode::store::Clock;
use sha2::{Digest, Sha256};

use crate::Error;
use crate::config::AuthSettings;

/// The response body type of the MCP transport and of the auth front.
pub type Body = http_body_util::combinators::BoxBody<hyper::body::Bytes, std::convert::Infallible>;

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Principal {
    /// The name people read: the static token's principal, or the token's `sub` (`<iss>#<sub>` when qualified).
    pub name: String,
    /// The owner key runs, `store`/`load` values and result references are kept under: `token:<name>` or
    /// `jwt:<name>`, so a static principal and a JWT subject of the same name are never one owner.
    pub key: String,
}

impl Principal {
    fn new(kind: &str, name: String) -> Principal {
        Principal { key: format!("{kind}:{name}"), name }
    }
}

/// Why a request was not let through; each becomes an HTTP error with the MCP authorization spec's headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// No `Authorization: Bearer` header (401, no error code, as RFC 6750 says).
    Missing,
    /// A token that is not valid here (401 `invalid_token`), with what is wrong with it.
    InvalidToken(String),
    /// A valid token without the scopes `required_scopes` names (403 `insufficient_scope`).
    InsufficientScope {
        /// The scopes the token must carry, space-separated.
        required: String,
    },
}

impl Rejection {
    /// The `error_description` a client is shown.
    pub fn description(&self) -> String {
        match self {
            Rejection::Missing => {
                "this gateway needs an access token: send `Authorization: Bearer <token>` (see the resource metadata \
                 for where to get one)"
                    .into()
            }
            Rejection::InvalidToken(why) => why.clone(),
            Rejection::InsufficientScope { required } => {
                format!("the access token lacks a required scope; request a token with scope \"{required}\"")
            }
        }
    }
}

/// Checks bearer tokens: the static ones by the SHA-256 of the token, JWTs by [`jwt::JwtVerifier`].
pub struct Authenticator {
    /// SHA-256 of a static token → its principal.
    static_tokens: HashMap<[u8; 32], String>,
    jwt: Option<jwt::JwtVerifier>,
    required_scopes: Vec<String>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("static_tokens", &self.static_tokens.len())
            .field("jwt", &self.jwt.is_some())
            .finish()
    }
}

impl Authenticator {
    /// Reads the token file and the JWK Set (a `jwks_url` is fetched now; if the fetch fails the gateway still
    /// starts, says so on stderr, and fetches again on the first token).
    ///
    /// # Errors
    ///
    /// [`Error::Auth`]: an unreadable token file or a line of it that is wrong (with its number), an unreadable or
    /// malformed `jwks_file`.
    pub async fn new(settings: &AuthSettings, clock: Arc<dyn Clock>) -> Result<Authenticator, Error> {
        let static_tokens = match &settings.tokens_file {
            Some(file) => read_tokens_file(file)?,
            None => HashMap::new(),
        };
        let jwt = match &settings.jwt {
            Some(jwt) => Some(jwt::JwtVerifier::new(jwt, clock).await?),
            None => None,
        };
        Ok(Authenticator { static_tokens, jwt, required_scopes: settings.required_scopes.clone() })
    }

    /// The principal a bearer token stands for.
    ///
    /// # Errors
    ///
    /// [`Rejection::InvalidToken`] naming what is wrong, or [`Rejection::InsufficientScope`].
    pub async fn authenticate(&self, token: &str) -> Result<Principal, Rejection> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(name) = self.static_tokens.get(&digest) {
            return Ok(Principal::new("token", name.clone()));
        }
        let Some(jwt) = &self.jwt else {
            return Err(Rejection::InvalidToken("the token is not one of this gateway's tokens".into()));
        };
        if token.split('.').count() != 3 {
            let what = if self.static_tokens.is_empty() {
                "not a JWT"
            } else {
                "neither one of this gateway's static tokens nor a JWT"
            };
            return Err(Rejection::InvalidToken(format!("the token is {what}")));
        }
        let verified = jwt.verify(token).await.map_err(Rejection::InvalidToken)?;
        let missing: Vec<&str> = self
            .required_scopes
            .iter()
            .filter(|s| !verified.scopes.iter().any(|have| have == *s))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(Rejection::InsufficientScope { required: self.required_scopes.join(" ") });
        }
        Ok(Principal::new("jwt", verified.principal))
    }
}

/// Reads a static token file: one `PRINCIPAL sha256:HEX` line per token (HEX being the SHA-256 of the token, 64 hex
/// digits); blank lines and lines starting with `#` are skipped.
///
/// # Errors
///
/// [`Error::Auth`] naming the file and the line for an unreadable file, a line of another shape, a digest that is
/// not 64 hex digits, or a digest listed twice.
pub fn read_tokens_file(file: &Path) -> Result<HashMap<[u8; 32], String>, Error> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::Auth(format!("cannot read [auth] tokens_file {}: {e}", file.display())))?;
    parse_tokens(&text).map_err(|(line, problem)| {
        Error::Auth(format!(
            "[auth] tokens_file {} line {line}: {problem} (fix: write `PRINCIPAL sha256:HEX`, HEX being the 64 hex \
             digits of the token's SHA-256, e.g. from `printf %s \"$TOKEN\" | sha256sum`)",
            file.display()
        ))
    })
}

/// The token lines of a token file by digest, or the first bad line's number and what is wrong with it.
pub fn parse_tokens(text: &str) -> Result<HashMap<[u8; 32], String>, (usize, String)> {
    let mut tokens = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [principal, digest] = fields[..] else {
            return Err((number, format!("has {} fields, not 2", fields.len())));
        };
        let Some(hex_digest) = digest.strip_prefix("sha256:") else {
            return Err((number, format!("the digest {digest:?} does not start with `sha256:`")));
        };
        let bytes: [u8; 32] = hex::decode(hex_digest)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| (number, format!("`sha256:{hex_digest}` is not 64 hex digits")))?;
        if let Some(other) = tokens.insert(bytes, principal.to_owned()) {
            return Err((number, format!("repeats the digest of principal {other:?}; each token is listed once")));
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "sha256:2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90";

    #[test]
    fn token_lines_comments_and_blank_lines() {
        let text = format!("# static tokens\n\nalice {ALICE}\n  bob   sha256:{}  \n", "ab".repeat(32));
        let tokens = parse_tokens(&text).expect("valid");
        assert_eq!(tokens.len(), 2);
        let alice: [u8; 32] = Sha256::digest(b"alice").into();
        assert_eq!(tokens[&alice], "alice");
    }

    #[test]
    fn bad_token_lines_name_their_number() {
        assert_eq!(parse_tokens("\nalice\n"), Err((2, "has 1 fields, not 2".into())));
        assert_eq!(parse_tokens("a b c\n").unwrap_err().0, 1);
        let e = parse_tokens("# x\nalice md5:abc\n").unwrap_err();
        assert_eq!(e, (2, "the digest \"md5:abc\" does not start with `sha256:`".into()));
        assert_eq!(parse_tokens("alice sha256:abcd\n").unwrap_err(), (1, "`sha256:abcd` is not 64 hex digits".into()));
        let twice = format!("alice {ALICE}\nbob {ALICE}\n");
        assert_eq!(parse_tokens(&twice).unwrap_err().0, 2);
    }

    #[tokio::test]
    async fn a_static_token_is_its_principal_and_anything_else_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("tokens.txt");
        std::fs::write(&file, format!("alice {ALICE}\n")).expect("write");
        let settings = AuthSettings {
            tokens_file: Some(file.clone()),
            jwt: None,
            resource: None,
            required_scopes: Vec::new(),
            max_concurrent_runs: None,
            requests_per_minute: None,
            requests_per_hour: None,
            shares: crate::config::PrincipalShares::default(),
        };
        let auth = Authenticator::new(&settings, Arc::new(codemode::store::SystemClock)).await.expect("auth");
        let alice = auth.authenticate("alice").await.expect("alice's token");
        assert_eq!((alice.name.as_str(), alice.key.as_str()), ("alice", "token:alice"));
        assert_eq!(
            auth.authenticate("mallory").await,
            Err(Rejection::InvalidToken("the token is not one of this gateway's tokens".into()))
        );
        std::fs::write(&file, "alice sha256:xyz\n").expect("write");
        let e = Authenticator::new(&settings, Arc::new(codemode::store::SystemClock)).await.unwrap_err();
        assert!(e.to_string().contains("tokens.txt line 1: `sha256:xyz` is not 64 hex digits"), "{e}");
    }
}
