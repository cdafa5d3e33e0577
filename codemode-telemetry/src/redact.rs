//! Redaction of text meant for people (activity previews, spans, logs, the source shown for a run): recognizable
//! token shapes (provider API keys, JWTs, bearer credentials, private key blocks), secrets the host registered and
//! patterns it configured are replaced by [`MASK`].
//!
//! It never changes what runs: only copies made for people pass through it. Invariant: masks are whole and stable,
//! so redacting a redacted text returns it unchanged (a match that touches an existing mask is left alone).

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
    ("bearer credential", r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*"),
    ("JWT", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"),
    ("Anthropic key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("OpenAI key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
    ("AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("Stripe key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
];

static BUILTIN: LazyLock<Regex> = LazyLock::new(|| {
    let alternation: Vec<String> = TOKEN_SHAPES.iter().map(|(_, shape)| format!("(?:{shape})")).collect();
    Regex::new(&alternation.join("|")).expect("the built-in token shapes compile")
});

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
    secrets: Vec<String>,
    patterns: Vec<Regex>,
}

impl Redactor {
    /// A redactor with the built-in token shapes only.
    pub fn new() -> Self {
        Redactor::default()
    }

    /// Registers a secret the host knows (an upstream token, a password): every occurrence is masked. Secrets
    /// shorter than [`MIN_SECRET_LEN`] are ignored.
    #[must_use]
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        let secret = secret.into();
        if secret.len() >= MIN_SECRET_LEN && !self.secrets.contains(&secret) {
            self.secrets.push(secret);
            // Longest first, so a secret that contains another is masked whole.
            self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
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

    /// Whether `text` holds anything this redactor masks.
    pub fn finds_anything(&self, text: &str) -> bool {
        matches!(self.redact(text), Cow::Owned(_))
    }
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
    fn a_pattern_that_matches_the_mask_does_not_nest() {
        let r = Redactor::new().pattern("REDACTED|secret").expect("valid");
        let once = r.redact("a secret");
        assert_eq!(once, "a [REDACTED]");
        assert_eq!(r.redact(&once), once);
    }
}
