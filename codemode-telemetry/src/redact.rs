//! Redaction of text meant for people (activity previews, spans, logs, the source shown for a run): quoted literals
//! given to credential-like names (`"apiKey": "..."`, `password = '...'`), recognizable token shapes (provider API
//! keys, JWTs, bearer credentials, private key blocks), secrets the host registered and patterns it configured are
//! replaced by [`MASK`]; [`Redactor::preview`] and [`Redactor::text`] also cap what they return.
//!
//! It never changes what runs: only copies made for people pass through it. Invariant: masks are whole and stable,
//! so redacting a redacted text returns it unchanged (a match that touches an existing mask is left alone), and a
//! text cut to a cap never ends in the visible start of a secret or token. A registered secret is masked as written
//! and as JSON escapes it once and twice (previews are JSON, and their strings often hold JSON), since a secret
//! holding `"`, `\` or a control character is spelled differently there.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// What every redacted span becomes.
pub const MASK: &str = "[REDACTED]";

/// Secrets shorter than this are not registered: masking every `"a"` would hide the text, not the secret.
pub const MIN_SECRET_LEN: usize = 6;

/// Token shapes recognized without configuration, by name.
const TOKEN_SHAPES: &[(&str, &str)] = &[
    ("private key block", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----"),
    // Distinctive prefixes match inside a word too (`key=ghp_…`, `tokenghp_…`); the generic `sk-` and `sk_live_`
    // only at a word's start, so `task-list-…` stays.
    ("bearer credential", r"(?i:bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*"),
    ("JWT", r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"),
    ("Anthropic key", r"sk-ant-[A-Za-z0-9_-]{20,}"),
    ("OpenAI key", r"(?:sk-(?:proj|svcacct|admin)-|\bsk-)[A-Za-z0-9_-]{20,}"),
    ("GitHub token", r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
    ("AWS access key id", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
    ("Google API key", r"AIza[0-9A-Za-z_-]{35}"),
    ("Slack token", r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("Stripe key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
];

/// Word parts of a name that make its literal value a credential.
const CREDENTIAL_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "apikey",
    "api_key",
    "accesskey",
    "access_key",
    "privatekey",
    "private_key",
    "credential",
    "auth",
    "bearer",
    "cookie",
    "sessionkey",
    "session_key",
    "signature",
];

/// Whether a binding, property or key called `name` holds a credential when it is given a literal
/// (`API_TOKEN`, `apiKey`, `x-api-key`, `db_password`, `Authorization`).
pub fn is_credential_name(name: &str) -> bool {
    let lower: String = name.chars().filter(|c| *c != '-').flat_map(char::to_lowercase).collect();
    CREDENTIAL_WORDS.iter().any(|word| lower.contains(word) || lower.replace('_', "").contains(word))
}

/// Whether some part of `text` may be a credential-like name: whether `text`, lowercased and without `-` and `_`,
/// holds a credential word (spelled without `_`). `false` is exact: then no substring of `text` is a name that
/// [`is_credential_name`] accepts, since taking characters out of a text keeps each substring's remaining
/// characters together, and every credential word with a `_` is also listed without it.
pub fn may_name_credentials(text: &str) -> bool {
    let folded: String = if text.is_ascii() {
        text.bytes().filter(|b| *b != b'-' && *b != b'_').map(|b| char::from(b.to_ascii_lowercase())).collect()
    } else {
        text.chars().filter(|c| *c != '-' && *c != '_').flat_map(char::to_lowercase).collect()
    };
    CREDENTIAL_WORD.is_match(&folded)
}

/// A name, optionally quoted, then `:` or `=` and a quoted literal (a template literal only without `${`): the
/// shape of a credential given to a name in source text, JSON (also JSON escaped inside a JSON string), headers and
/// logs. Group 1 is the name, group 2 the literal with its quotes.
static ASSIGNED_LITERAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r#"(?:\\?["'`])?([A-Za-z_$][A-Za-z0-9_$\-]*)(?:\\?["'`])?\s*(?:=|:)\s*"#,
        r#"(\\"(?:[^"\\\n]|\\[^"\n])*\\"|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`$\\]*`)"#,
    ))
    .expect("the credential literal shape compiles")
});

/// Where a word that begins like a token shape reaches the end of a text that was cut: a provider key, a JWT or a
/// bearer credential whose rest was cut off.
static UNFINISHED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?:(?i:bearer)\s+|sk-(?:ant|proj|svcacct|admin)-|\bsk-|\b[sr]k_|gh[pousr]_|github_pat_|AKIA|ASIA|AIza|",
        r"xox[abposr]-|eyJ)[A-Za-z0-9._~+/=-]*$"
    ))
    .expect("the unfinished token shapes compile")
});

/// Any credential word without `_`, for [`may_name_credentials`].
static CREDENTIAL_WORD: LazyLock<Regex> = LazyLock::new(|| {
    let mut words: Vec<String> = CREDENTIAL_WORDS.iter().map(|w| w.replace('_', "")).collect();
    words.sort();
    words.dedup();
    Regex::new(&words.join("|")).expect("the credential words compile")
});

static BUILTIN: LazyLock<Regex> = LazyLock::new(|| {
    let alternation: Vec<String> = TOKEN_SHAPES.iter().map(|(_, shape)| format!("(?:{shape})")).collect();
    Regex::new(&alternation.join("|")).expect("the built-in token shapes compile")
});

/// A value's compact JSON text, capped as [`Redactor::preview`] caps it but not yet redacted: what a host keeps
/// when a preview may never be read, to pay for the redaction only when it is ([`Redactor::render`]).
///
/// Invariant: it holds the value's secrets in the clear, so it is never shown, stored or logged as it is; its
/// `Debug` prints only its length.
#[derive(Clone, PartialEq, Eq)]
pub struct Captured {
    /// The first `2 * max + 64` bytes of the JSON text at most, cut on a character boundary.
    text: String,
    /// Whether `text` is the whole JSON text.
    whole: bool,
    /// The preview's cap.
    max: usize,
}

impl Captured {
    /// Serializes `value` as compact JSON, stopping after `2 * max + 64` bytes.
    pub fn new(value: &serde_json::Value, max: usize) -> Self {
        struct Capped(Vec<u8>, usize);
        impl std::io::Write for Capped {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                let room = self.1.saturating_sub(self.0.len());
                self.0.extend_from_slice(&bytes[..bytes.len().min(room)]);
                if bytes.len() > room { Err(std::io::Error::other("preview cap")) } else { Ok(bytes.len()) }
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut capped = Capped(Vec::new(), max.saturating_mul(2).saturating_add(64));
        let whole = serde_json::to_writer(&mut capped, value).is_ok();
        let text = match String::from_utf8(capped.0) {
            Ok(text) => text,
            Err(cut) => String::from_utf8_lossy(cut.as_bytes()).into_owned(),
        };
        Self { text, whole, max }
    }
}

impl std::fmt::Debug for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Captured({} bytes, not redacted)", self.text.len())
    }
}

/// A configured pattern that is not a valid regular expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("redaction pattern {pattern:?} is not a valid regular expression: {reason}")]
pub struct PatternError {
    /// The pattern as configured.
    pub pattern: String,
    /// The regex crate's explanation.
    pub reason: String,
}

/// Masks token shapes, registered secrets and configured patterns.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    /// Every registered secret, plus its JSON-escaped spellings (one and two levels) where escaping changes it,
    /// longest first. The spellings are computed once here, so a secret without `"`, `\` or control characters
    /// costs one search per text, as before.
    secrets: Vec<String>,
    patterns: Vec<Regex>,
}

impl Redactor {
    /// A redactor with the built-in token shapes only.
    pub fn new() -> Self {
        Redactor::default()
    }

    /// Registers a secret the host knows (an upstream token, a password): every occurrence is masked, as written
    /// and in its JSON-escaped spellings (`Zq9"Kp\w7` also as `Zq9\"Kp\\w7` and `Zq9\\\"Kp\\\\w7`). Secrets
    /// shorter than [`MIN_SECRET_LEN`] are ignored.
    #[must_use]
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        let secret = secret.into();
        if secret.len() < MIN_SECRET_LEN {
            return self;
        }
        let once = json_escaped(&secret);
        let twice = json_escaped(&once);
        for spelling in [secret, once, twice] {
            if !self.secrets.contains(&spelling) {
                self.secrets.push(spelling);
            }
        }
        // Longest first, so a secret that contains another is masked whole.
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        self
    }

    /// Adds a configured pattern (a `regex` crate regular expression); every match is masked.
    ///
    /// # Errors
    ///
    /// The pattern does not compile.
    pub fn pattern(mut self, pattern: &str) -> Result<Self, PatternError> {
        let regex =
            Regex::new(pattern).map_err(|e| PatternError { pattern: pattern.to_owned(), reason: e.to_string() })?;
        self.patterns.push(regex);
        Ok(self)
    }

    /// `text` with every token shape, registered secret and configured pattern masked; borrowed when nothing
    /// matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let masks: Vec<(usize, usize)> = text.match_indices(MASK).map(|(at, m)| (at, at + m.len())).collect();
        let mut spans: Vec<(usize, usize)> = BUILTIN.find_iter(text).map(|m| (m.start(), m.end())).collect();
        for secret in &self.secrets {
            spans.extend(text.match_indices(secret.as_str()).map(|(at, s)| (at, at + s.len())));
        }
        for pattern in &self.patterns {
            spans.extend(pattern.find_iter(text).filter(|m| !m.is_empty()).map(|m| (m.start(), m.end())));
        }
        // A literal given to another name may hold JSON with a credential inside (`"body":"{\"apiKey\":..}"`),
        // so the search goes on inside it. A text without a credential word has no such name to find.
        let mut at = if may_name_credentials(text) { 0 } else { text.len() };
        while let Some(found) = ASSIGNED_LITERAL.captures_at(text, at) {
            let (Some(name), Some(literal)) = (found.get(1), found.get(2)) else { break };
            let quote = if literal.as_str().starts_with('\\') { 2 } else { 1 };
            // The quotes stay; what is between them is masked, unless it is empty.
            if is_credential_name(name.as_str()) && literal.len() > 2 * quote {
                spans.push((literal.start() + quote, literal.end() - quote));
                at = literal.end();
            } else {
                at = literal.start() + quote;
            }
        }
        // A match that touches an existing mask is left alone, so that redacting twice changes nothing.
        spans.retain(|&(start, end)| !masks.iter().any(|&(ms, me)| start < me && ms < end));
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        spans.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end) in spans {
            if end <= at {
                continue;
            }
            out.push_str(&text[at..start.max(at)]);
            if start >= at {
                out.push_str(MASK);
            }
            at = end;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }

    /// `text` redacted and cut to `max` bytes on a character boundary (a cut text ends with `…`). The cut never
    /// leaves the visible start of a secret or token: see [`Redactor::redact_cut`].
    pub fn text(&self, text: &str, max: usize) -> String {
        if text.len() <= max {
            return self.redact(text).into_owned();
        }
        // Redacting a little more than is kept lets a match that straddles the cut be masked whole.
        let window = utf8_prefix(text, max.saturating_mul(2).saturating_add(64));
        let redacted =
            if window.len() < text.len() { self.redact_cut(window) } else { self.redact(window).into_owned() };
        cut(redacted, max)
    }

    /// `value` as compact JSON text, redacted and cut to `max` bytes (a cut preview ends with `…`): the preview of
    /// a tool's arguments or result. At most `2 * max + 64` bytes are ever serialized.
    pub fn preview(&self, value: &serde_json::Value, max: usize) -> String {
        self.render(&Captured::new(value, max))
    }

    /// The preview of a captured value: exactly what [`Redactor::preview`] returns for the value and `max` it was
    /// captured with.
    pub fn render(&self, captured: &Captured) -> String {
        let redacted =
            if captured.whole { self.redact(&captured.text).into_owned() } else { self.redact_cut(&captured.text) };
        cut(redacted, captured.max)
    }

    /// Redacts `text`, the beginning of a longer text that was cut off: besides [`Redactor::redact`], the end is
    /// masked from where a secret or token may have begun and been cut (an unfinished private key block, a word
    /// that begins like a provider key, a JWT or a bearer credential, or the first characters of a registered
    /// secret), since what was cut cannot be matched whole.
    pub fn redact_cut(&self, text: &str) -> String {
        let mut end = text.len();
        if let Some(found) = UNFINISHED.find(text) {
            end = found.start();
        }
        // A private key block that begins and does not end.
        if let Some(begin) = text.rfind("-----BEGIN ")
            && !text[begin..].contains("-----END ")
        {
            end = end.min(begin);
        }
        for secret in &self.secrets {
            // The longest tail of `text` that is a start of the secret.
            let longest = (1..secret.len().min(text.len() + 1))
                .rev()
                .filter(|n| secret.is_char_boundary(*n))
                .find(|n| text.ends_with(&secret[..*n]));
            if let Some(n) = longest {
                end = end.min(text.len() - n);
            }
        }
        let mut out = self.redact(&text[..end]).into_owned();
        if end < text.len() {
            out.push_str(MASK);
        }
        out
    }

    /// Whether `text` holds anything this redactor masks.
    pub fn finds_anything(&self, text: &str) -> bool {
        matches!(self.redact(text), Cow::Owned(_))
    }
}

/// `text` as it appears inside a JSON string: what `serde_json` (and `JSON.stringify`) writes between the quotes.
fn json_escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).expect("a string always serializes");
    quoted[1..quoted.len() - 1].to_owned()
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn utf8_prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to `max` bytes on a character boundary, with `…` when cut.
pub fn cut(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut out = utf8_prefix(&text, max).to_owned();
    out.push('…');
    out
}

/// The names of the built-in token shapes, for documentation and tests.
pub fn token_shapes() -> impl Iterator<Item = &'static str> {
    TOKEN_SHAPES.iter().map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_shapes_are_masked_and_text_around_them_kept() {
        let r = Redactor::new();
        let cases = [
            "key sk-proj-abcdefghijklmnopqrstuvwxyz0123 end",
            "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz end",
            "Authorization: Bearer abcdefghijklmnop.qrstuv end",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789 end",
            "AKIAIOSFODNN7EXAMPLE end",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY----- end",
        ];
        for case in cases {
            let out = r.redact(case);
            assert!(out.contains(MASK) && out.ends_with(" end"), "{case:?} -> {out:?}");
            assert_eq!(r.redact(&out), out, "stable: {case:?}");
        }
        assert_eq!(r.redact("const maxTokens = 100; // a token budget"), "const maxTokens = 100; // a token budget");
    }

    #[test]
    fn secrets_and_patterns_are_masked_whole() {
        let r = Redactor::new().secret("hunter2-password").secret("hunter2").pattern(r"acct-\d{6}").expect("valid");
        assert_eq!(r.redact("pw=hunter2-password id=acct-123456"), "pw=[REDACTED] id=[REDACTED]");
        assert_eq!(r.redact("short: abc"), "short: abc");
        assert!(Redactor::new().pattern("(").is_err());
        let twice = r.redact("hunter2 and [REDACTED]");
        assert_eq!(twice, "[REDACTED] and [REDACTED]");
        assert_eq!(r.redact(&twice), twice);
    }

    #[test]
    fn literals_given_to_credential_names_are_masked_in_any_text() {
        let r = Redactor::new();
        assert_eq!(r.redact(r#"{"apiKey":"abc123","user":"ann"}"#), r#"{"apiKey":"[REDACTED]","user":"ann"}"#);
        assert_eq!(r.redact("password = 'pw1', token: `t2`"), "password = '[REDACTED]', token: `[REDACTED]`");
        // JSON escaped inside a JSON string (an MCP text content holding JSON).
        assert_eq!(
            r.redact(r#"{"text":"{\"client_secret\":\"s3\",\"n\":1}"}"#),
            r#"{"text":"{\"client_secret\":\"[REDACTED]\",\"n\":1}"}"#
        );
        // Computations, numbers, empty literals and other names stay.
        for kept in ["const API_TOKEN = computeToken();", "maxTokens = 100", "token: ''", "{\"title\":\"x\"}"] {
            assert_eq!(r.redact(kept), kept);
        }
        let once = r.redact(r#"{"apiKey":"abc123"}"#).into_owned();
        assert_eq!(r.redact(&once), once, "stable");
    }

    #[test]
    fn a_cut_text_never_ends_in_the_start_of_a_secret_or_token() {
        let r = Redactor::new().secret("hunter2-password");
        for (text, shown) in [
            ("pw hunter2-pa", "pw [REDACTED]"),
            ("key sk-proj-abcdef", "key [REDACTED]"),
            ("a -----BEGIN RSA PRIVATE KEY-----\nMIIE", "a [REDACTED]"),
            ("Authorization: Bearer abc", "Authorization: [REDACTED]"),
            ("plain words", "plain words"),
        ] {
            assert_eq!(r.redact_cut(text), shown, "{text:?}");
        }
        let value = serde_json::json!({ "pad": "x".repeat(40), "key": "ghp_abcdefghijklmnopqrstuvwxyz0123456789" });
        let preview = r.preview(&value, 60);
        assert!(!preview.contains("ghp_"), "{preview}");
        assert!(preview.ends_with('…') && preview.len() <= 60 + '…'.len_utf8(), "{preview}");
        assert_eq!(
            r.text(&format!("{} hunter2-password", "y".repeat(30)), 41),
            format!("{} [REDACTED]", "y".repeat(30))
        );
    }

    #[test]
    fn a_captured_value_renders_as_its_preview_and_never_shows_its_text() {
        let r = Redactor::new().secret("hunter2-password");
        let long = serde_json::json!({ "pad": "é".repeat(200), "key": "ghp_abcdefghijklmnopqrstuvwxyz0123456789" });
        let short = serde_json::json!({ "password": "hunter2-password", "n": 1 });
        for (value, max) in [(&long, 60), (&long, 1000), (&short, 256), (&short, 10)] {
            let captured = Captured::new(value, max);
            assert_eq!(r.render(&captured), r.preview(value, max), "{value} at {max}");
            assert!(!format!("{captured:?}").contains("hunter2"), "{captured:?}");
        }
    }

    #[test]
    fn a_secret_is_masked_in_its_json_escaped_spellings_too() {
        let secret = "Zq9\"Kp\\w7\tmx";
        let r = Redactor::new().secret(secret);
        // As written, escaped once (a preview's JSON string), and twice (JSON inside a JSON string).
        let value = serde_json::json!({ "a": secret, "b": serde_json::json!({ "c": secret }).to_string() });
        let preview = r.preview(&value, 1000);
        assert_eq!(preview, r#"{"a":"[REDACTED]","b":"{\"c\":\"[REDACTED]\"}"}"#);
        assert_eq!(r.redact(&format!("raw {secret} end")), "raw [REDACTED] end");
        assert_eq!(r.redact(&preview), preview, "stable");
        // A preview cut inside the escaped spelling shows none of it.
        let cut = r.preview(&serde_json::json!({ "pad": "p".repeat(20), "a": secret }), 36);
        assert!(!cut.contains("Zq9"), "{cut}");
        // A secret JSON leaves alone is kept once.
        assert_eq!(Redactor::new().secret("plain-secret").secrets, ["plain-secret"]);
    }

    #[test]
    fn a_pattern_that_matches_the_mask_does_not_nest() {
        let r = Redactor::new().pattern("REDACTED|secret").expect("valid");
        let once = r.redact("a secret");
        assert_eq!(once, "a [REDACTED]");
        assert_eq!(r.redact(&once), once);
    }
}
