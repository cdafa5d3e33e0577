//! JWT access tokens: the signature against the issuer's JWK Set, `iss` among the configured issuers, `aud`
//! holding this gateway's audience (RFC 8707), `exp`/`nbf` on the gateway's clock with the configured leeway.
//!
//! The JWK Set comes from a file or a URL and is cached; a token naming a key id the cache lacks makes it read the
//! set again, at most once per [`REFRESH_INTERVAL_MS`], so keys the issuer rotates in are picked up and a stream of
//! made-up key ids cannot turn into a stream of fetches. Invariant: only keys from the configured set verify a
//! token; the token's own `jwk`/`jku` headers are never used, HMAC keys and `none` are never accepted.

use std::str::FromStr as _;
use std::sync::Arc;

use codemode::store::Clock;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::Error;
use crate::config::{JwksSource, JwtSettings};

/// The shortest time between two reads of the JWK Set caused by unknown key ids.
pub const REFRESH_INTERVAL_MS: u64 = 30_000;

/// What a verified token says about its bearer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// `sub`, or `<iss>#<sub>` when subjects are qualified.
    pub principal: String,
    /// The token's scopes (`scope`, space-separated, or `scp`, a list or a string).
    pub scopes: Vec<String>,
}

struct Key {
    kid: Option<String>,
    /// The key's `alg`, when the set names one: the only algorithm it verifies.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

struct Cache {
    keys: Vec<Arc<Key>>,
    /// When the set was last read (or a read was tried), on the gateway's clock.
    read_at_ms: Option<u64>,
}

/// Verifies JWT access tokens.
pub struct JwtVerifier {
    settings: JwtSettings,
    algorithms: Vec<Algorithm>,
    clock: Arc<dyn Clock>,
    http: Option<reqwest::Client>,
    cache: tokio::sync::Mutex<Cache>,
}

impl JwtVerifier {
    /// Reads the JWK Set: a file must read and parse now; a URL that cannot be fetched now is reported on stderr
    /// and fetched again when the first token arrives.
    ///
    /// # Errors
    ///
    /// [`Error::Auth`] for a `jwks_file` that cannot be read or is not a JWK Set, or an HTTP client that cannot be
    /// built.
    pub async fn new(settings: &JwtSettings, clock: Arc<dyn Clock>) -> Result<JwtVerifier, Error> {
        let algorithms = settings
            .algorithms
            .iter()
            .map(|a| Algorithm::from_str(a).map_err(|e| Error::Auth(format!("[auth] algorithms: {a}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let http = match &settings.jwks {
            JwksSource::Url(_) => {
                crate::install_tls_provider();
                Some(
                    reqwest::Client::builder()
                        .timeout(std::time::Duration::from_secs(10))
                        .build()
                        .map_err(|e| Error::Auth(format!("cannot build the JWKS HTTP client: {e}")))?,
                )
            }
            JwksSource::File(_) => None,
        };
        let verifier = JwtVerifier {
            settings: settings.clone(),
            algorithms,
            clock,
            http,
            cache: tokio::sync::Mutex::new(Cache { keys: Vec::new(), read_at_ms: None }),
        };
        let mut cache = verifier.cache.lock().await;
        match verifier.read_set().await {
            Ok(keys) => cache.keys = keys,
            Err(e) if matches!(settings.jwks, JwksSource::File(_)) => return Err(Error::Auth(e)),
            Err(e) => eprintln!("codemode gateway: {e}; it is fetched again when the first token arrives"),
        }
        cache.read_at_ms = Some(verifier.clock.now_ms());
        drop(cache);
        Ok(verifier)
    }

    /// Checks a token and returns its principal and scopes.
    ///
    /// # Errors
    ///
    /// What is wrong with the token, in words a client can act on.
    pub async fn verify(&self, token: &str) -> Result<Verified, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("the token is not a valid JWT: {e}"))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(format!(
                "the token is signed with {:?}, which this gateway does not accept (accepted: {})",
                header.alg,
                self.settings.algorithms.join(", ")
            ));
        }
        let keys = self.keys_for(header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&self.settings.issuers);
        validation.set_audience(&[&self.settings.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        // Time is checked below, on the gateway's clock.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        let mut last = None;
        for key in keys {
            match jsonwebtoken::decode::<Value>(token, &key.key, &validation) {
                Ok(data) => return self.claims(&data.claims),
                Err(e) => last = Some(e),
            }
        }
        Err(match last.map(jsonwebtoken::errors::Error::into_kind) {
            Some(jsonwebtoken::errors::ErrorKind::InvalidSignature) | None => {
                "the token's signature does not verify with the issuer's keys".into()
            }
            Some(jsonwebtoken::errors::ErrorKind::InvalidIssuer) => {
                format!(
                    "the token's issuer (iss) is not one this gateway trusts ({})",
                    self.settings.issuers.join(", ")
                )
            }
            Some(jsonwebtoken::errors::ErrorKind::InvalidAudience) => format!(
                "the token's audience (aud) does not include this gateway, {:?}: request the token with \
                 resource={:?}",
                self.settings.audience, self.settings.audience
            ),
            Some(jsonwebtoken::errors::ErrorKind::MissingRequiredClaim(claim)) => {
                format!("the token has no `{claim}` claim")
            }
            Some(other) => format!("the token is not valid: {other:?}"),
        })
    }

    /// The time checks and the principal, on claims whose signature, issuer and audience were verified.
    fn claims(&self, claims: &Value) -> Result<Verified, String> {
        let now = self.clock.now_ms() / 1000;
        let leeway = self.settings.leeway_seconds;
        let time = |name: &str| -> Result<Option<u64>, String> {
            match claims.get(name) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
                    .map(Some)
                    .ok_or_else(|| format!("the token's `{name}` is not a number of seconds")),
            }
        };
        let exp = time("exp")?.ok_or("the token has no `exp` claim")?;
        if now > exp.saturating_add(leeway) {
            return Err(format!("the token expired (exp {exp}, now {now}): get a new one"));
        }
        if let Some(nbf) = time("nbf")?
            && now.saturating_add(leeway) < nbf
        {
            return Err(format!("the token is not valid yet (nbf {nbf}, now {now})"));
        }
        let sub = claims.get("sub").and_then(Value::as_str).filter(|s| !s.is_empty());
        let sub = sub.ok_or("the token's `sub` claim is empty or not a string")?;
        let principal = if self.settings.qualify_subject {
            let iss = claims.get("iss").and_then(Value::as_str).unwrap_or_default();
            format!("{iss}#{sub}")
        } else {
            sub.to_owned()
        };
        let mut scopes: Vec<String> = Vec::new();
        if let Some(scope) = claims.get("scope").and_then(Value::as_str) {
            scopes.extend(scope.split_whitespace().map(str::to_owned));
        }
        match claims.get("scp") {
            Some(Value::String(s)) => scopes.extend(s.split_whitespace().map(str::to_owned)),
            Some(Value::Array(items)) => scopes.extend(items.iter().filter_map(Value::as_str).map(str::to_owned)),
            _ => {}
        }
        Ok(Verified { principal, scopes })
    }

    /// The keys that may have signed a token with `kid` and `alg`, reading the set again when `kid` is unknown and
    /// the last read is older than [`REFRESH_INTERVAL_MS`].
    async fn keys_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<Vec<Arc<Key>>, String> {
        let mut cache = self.cache.lock().await;
        let matching = |keys: &[Arc<Key>]| -> Vec<Arc<Key>> {
            keys.iter()
                .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
                .filter(|k| k.alg.is_none_or(|a| a == alg))
                .cloned()
                .collect()
        };
        let found = matching(&cache.keys);
        if !found.is_empty() {
            return Ok(found);
        }
        let now = self.clock.now_ms();
        let stale = cache.read_at_ms.is_none_or(|at| now.saturating_sub(at) >= REFRESH_INTERVAL_MS);
        if stale {
            cache.read_at_ms = Some(now);
            match self.read_set().await {
                Ok(keys) => cache.keys = keys,
                Err(e) => return Err(format!("the issuer's keys cannot be read right now ({e}); retry later")),
            }
            let found = matching(&cache.keys);
            if !found.is_empty() {
                return Ok(found);
            }
        }
        Err(match kid {
            Some(kid) => format!("the token's signing key (kid {kid:?}) is not one of the issuer's keys"),
            None => format!("no key of the issuer verifies {alg:?} tokens"),
        })
    }

    /// Reads and parses the JWK Set; keys this gateway cannot use (HMAC secrets, unknown types) are left out.
    async fn read_set(&self) -> Result<Vec<Arc<Key>>, String> {
        let (text, from) = match &self.settings.jwks {
            JwksSource::File(file) => (
                std::fs::read_to_string(file)
                    .map_err(|e| format!("cannot read [auth] jwks_file {}: {e}", file.display()))?,
                file.display().to_string(),
            ),
            JwksSource::Url(url) => {
                let client = self.http.as_ref().expect("a URL source has a client");
                let response = client.get(url).send().await.map_err(|e| format!("cannot fetch {url}: {e}"))?;
                if !response.status().is_success() {
                    return Err(format!("{url} answered {}", response.status()));
                }
                (response.text().await.map_err(|e| format!("cannot read {url}: {e}"))?, url.clone())
            }
        };
        keys_of(&text).map_err(|e| format!("{from} is not a JWK Set: {e}"))
    }
}

/// The usable keys of a JWK Set's JSON.
fn keys_of(text: &str) -> Result<Vec<Arc<Key>>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Some(Value::Array(items)) = value.get("keys") else {
        return Err("it has no `keys` list".into());
    };
    let mut keys = Vec::new();
    // One key the crate cannot read (another key type, another curve) does not cost the others.
    for item in items {
        let Ok(jwk) = serde_json::from_value::<Jwk>(item.clone()) else { continue };
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_)) {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(&jwk) else { continue };
        // An encryption key, or one whose `alg` is no signature algorithm, never verifies a token.
        if matches!(jwk.common.public_key_use, Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)) {
            continue;
        }
        let alg = match jwk.common.key_algorithm {
            None => None,
            Some(a) => match Algorithm::from_str(&a.to_string()) {
                Ok(alg) => Some(alg),
                Err(_) => continue,
            },
        };
        keys.push(Arc::new(Key { kid: jwk.common.key_id.clone(), alg, key }));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use codemode::store::ManualClock;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    use super::*;

    const NOW_S: u64 = 1_800_000_000;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/auth")
    }

    fn settings(jwks: JwksSource) -> JwtSettings {
        JwtSettings {
            issuers: vec!["https://idp.test/".into()],
            audience: "https://gateway.test/mcp".into(),
            jwks,
            algorithms: vec!["RS256".into(), "ES256".into(), "EdDSA".into()],
            leeway_seconds: 60,
            qualify_subject: false,
        }
    }

    fn token(key: &str, kid: &str, claims: Value) -> String {
        let pem = std::fs::read(fixtures().join(key)).expect("test key");
        let mut all = json!({ "iss": "https://idp.test/", "aud": "https://gateway.test/mcp", "sub": "alice", "exp": NOW_S + 600 });
        for (k, v) in claims.as_object().expect("object") {
            all[k] = v.clone();
        }
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, &all, &EncodingKey::from_rsa_pem(&pem).expect("key")).expect("signs")
    }

    async fn verifier(jwks: JwksSource, clock: Arc<ManualClock>) -> JwtVerifier {
        JwtVerifier::new(&settings(jwks), clock).await.expect("verifier")
    }

    #[tokio::test]
    async fn time_claims_are_checked_on_the_gateway_clock_with_the_leeway() {
        let clock = Arc::new(ManualClock::new(NOW_S * 1000));
        let v = verifier(JwksSource::File(fixtures().join("jwks.json")), clock.clone()).await;
        let t = token("rsa-issuer.pem", "rsa-1", json!({ "exp": NOW_S - 60, "scope": "a b", "scp": ["c"] }));
        let ok = v.verify(&t).await.expect("within the leeway");
        assert_eq!(ok, Verified { principal: "alice".into(), scopes: vec!["a".into(), "b".into(), "c".into()] });
        clock.advance(1000);
        let e = v.verify(&t).await.unwrap_err();
        assert!(e.starts_with("the token expired"), "{e}");
        let early = token("rsa-issuer.pem", "rsa-1", json!({ "nbf": NOW_S + 120 }));
        assert!(v.verify(&early).await.unwrap_err().starts_with("the token is not valid yet"));
        clock.advance(60_000);
        v.verify(&early).await.expect("nbf within the leeway");
        let no_sub = token("rsa-issuer.pem", "rsa-1", json!({ "sub": "" }));
        assert!(v.verify(&no_sub).await.unwrap_err().contains("`sub`"));
    }

    #[tokio::test]
    async fn hmac_tokens_and_embedded_keys_are_never_trusted() {
        let clock = Arc::new(ManualClock::new(NOW_S * 1000));
        let v = verifier(JwksSource::File(fixtures().join("jwks.json")), clock).await;
        let claims =
            json!({ "iss": "https://idp.test/", "aud": "https://gateway.test/mcp", "sub": "x", "exp": NOW_S + 60 });
        let hmac = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(b"k").expect("key"),
        )
        .expect("signs");
        assert!(v.verify(&hmac).await.unwrap_err().contains("HS256, which this gateway does not accept"));
        // A token carrying its own public key in `jwk`, signed by that key: the embedded key is ignored.
        let pem = std::fs::read(fixtures().join("rsa-other.pem")).expect("key");
        let key = EncodingKey::from_rsa_pem(&pem).expect("key");
        let mut header = Header::new(Algorithm::RS256);
        header.jwk = Some(Jwk::from_encoding_key(&key, Algorithm::RS256).expect("jwk"));
        let forged = jsonwebtoken::encode(&header, &claims, &key).expect("signs");
        assert_eq!(
            v.verify(&forged).await.unwrap_err(),
            "the token's signature does not verify with the issuer's keys"
        );
    }

    #[tokio::test]
    async fn a_subject_is_qualified_by_its_issuer_when_asked() {
        let clock = Arc::new(ManualClock::new(NOW_S * 1000));
        let mut s = settings(JwksSource::File(fixtures().join("jwks.json")));
        s.qualify_subject = true;
        let v = JwtVerifier::new(&s, clock).await.expect("verifier");
        let t = token("rsa-issuer.pem", "rsa-1", json!({}));
        assert_eq!(v.verify(&t).await.expect("valid").principal, "https://idp.test/#alice");
    }

    /// A JWK Set served over HTTP on loopback; the test swaps its content and counts the fetches.
    struct JwksServer {
        url: String,
        body: Arc<Mutex<String>>,
        fetches: Arc<AtomicUsize>,
    }

    async fn jwks_server(initial: &str) -> JwksServer {
        let body = Arc::new(Mutex::new(std::fs::read_to_string(fixtures().join(initial)).expect("jwks")));
        let fetches = Arc::new(AtomicUsize::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/certs", listener.local_addr().expect("addr"));
        let (served, counted) = (body.clone(), fetches.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (served, counted) = (served.clone(), counted.clone());
                let handler = hyper::service::service_fn(move |_request: hyper::Request<hyper::body::Incoming>| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let text = served.lock().expect("body").clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                            hyper::body::Bytes::from(text),
                        )))
                    }
                });
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, handler).await;
                });
            }
        });
        JwksServer { url, body, fetches }
    }

    #[tokio::test]
    async fn a_key_rotated_in_is_fetched_on_its_first_token_at_most_once_per_interval() {
        let server = jwks_server("jwks.json").await;
        let clock = Arc::new(ManualClock::new(NOW_S * 1000));
        let v = verifier(JwksSource::Url(server.url.clone()), clock.clone()).await;
        assert_eq!(server.fetches.load(Ordering::SeqCst), 1, "fetched at start");
        v.verify(&token("rsa-issuer.pem", "rsa-1", json!({}))).await.expect("a known key, from the cache");
        assert_eq!(server.fetches.load(Ordering::SeqCst), 1);

        // The issuer rotates a key in; the first token naming it, 30 s after the last read, makes one fetch.
        *server.body.lock().expect("body") =
            std::fs::read_to_string(fixtures().join("jwks-rotated.json")).expect("jwks");
        let rotated = token("rsa-other.pem", "rsa-2", json!({}));
        let e = v.verify(&rotated).await.unwrap_err();
        assert!(e.contains("(kid \"rsa-2\") is not one of the issuer's keys"), "{e}");
        assert_eq!(server.fetches.load(Ordering::SeqCst), 1, "too soon after the last read: no fetch");
        clock.advance(REFRESH_INTERVAL_MS);
        v.verify(&rotated).await.expect("the rotated key was fetched");
        assert_eq!(server.fetches.load(Ordering::SeqCst), 2);

        // Made-up key ids cannot turn into a stream of fetches.
        for kid in ["x1", "x2", "x3"] {
            assert!(v.verify(&token("rsa-other.pem", kid, json!({}))).await.is_err());
        }
        assert_eq!(server.fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_unreachable_key_set_url_is_fetched_again_on_the_first_token() {
        let clock = Arc::new(ManualClock::new(NOW_S * 1000));
        // Port 9 (discard) on loopback: nothing listens there.
        let v = verifier(JwksSource::Url("http://127.0.0.1:9/certs".into()), clock.clone()).await;
        clock.advance(REFRESH_INTERVAL_MS);
        let e = v.verify(&token("rsa-issuer.pem", "rsa-1", json!({}))).await.unwrap_err();
        assert!(e.starts_with("the issuer's keys cannot be read right now"), "{e}");
    }
}
