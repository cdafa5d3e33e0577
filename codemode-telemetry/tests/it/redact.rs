//! Properties of the redactor over generated text: wherever a registered secret or a token shape sits, and wherever
//! a preview is cut, neither it nor any 12-character piece of it is shown, as written or JSON-escaped (a secret may
//! hold `"`, `\` and control characters); redacting twice changes nothing; a text the redactor does not search for
//! credential literals holds no credential-like name.

use codemode_telemetry::redact::{is_credential_name, may_name_credentials};
use codemode_telemetry::{MASK, Redactor};
use proptest::prelude::*;
use serde_json::json;

/// Token shapes of the kinds the redactor knows, with a generated body.
fn token() -> impl Strategy<Value = String> {
    (0..8usize, "[A-Za-z0-9]{40}").prop_map(|(kind, body)| match kind {
        0 => format!("sk-proj-{body}"),
        1 => format!("ghp_{body}"),
        2 => format!("AKIA{}", body[..16].to_uppercase()),
        3 => format!("eyJ{}.eyJ{}.{}", &body[..10], &body[10..20], &body[20..]),
        4 => format!("xoxb-{body}"),
        5 => format!("Bearer {body}"),
        6 => format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----"),
        _ => format!("sk-ant-{body}"),
    })
}

/// The part of `value` that must never be shown: the token's body (a `Bearer` keyword or key-block frame alone is
/// not secret).
fn secret_part(value: &str) -> &str {
    if value.starts_with("-----") {
        return value.lines().nth(1).unwrap_or(value);
    }
    value.strip_prefix("Bearer ").unwrap_or(value)
}

/// `text` as it is spelled inside a JSON string.
fn escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap();
    quoted[1..quoted.len() - 1].to_owned()
}

fn assert_hidden(shown: &str, value: &str) -> Result<(), TestCaseError> {
    let secret = secret_part(value);
    let once = escaped(secret);
    for spelling in [secret.to_owned(), escaped(&once), once] {
        prop_assert!(!shown.contains(&spelling), "{spelling:?} shown in {shown:?}");
        for piece in spelling.as_bytes().windows(12) {
            let piece = std::str::from_utf8(piece).unwrap();
            prop_assert!(!shown.contains(piece), "the piece {piece:?} of {spelling:?} shown in {shown:?}");
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn secrets_and_tokens_never_show_wherever_they_sit_and_wherever_the_cut_falls(
        // Letters, digits, and what JSON escapes: `"`, `\`, and control characters (short and `\u00XX` forms).
        secret in "S3cr[A-Za-z0-9\"\\\\\t\n\u{1}\u{1f}]{10,30}",
        token in token(),
        pick in any::<bool>(),
        before in "[a-z ,:{}\"]{0,120}",
        after in "[a-z ,:{}\"]{0,40}",
        cap in 8usize..200,
    ) {
        let redactor = Redactor::new().secret(secret.clone());
        let value = if pick { secret.clone() } else { token.clone() };
        let text = format!("{before}{value}{after}");
        let whole = redactor.redact(&text);
        assert_hidden(&whole, &value)?;
        prop_assert_eq!(redactor.redact(&whole), whole.clone(), "stable");
        assert_hidden(&redactor.text(&text, cap), &value)?;
        assert_hidden(&redactor.redact_cut(&text[..text.len() - after.len() - value.len() / 2]), &value)?;
        let preview = redactor.preview(&json!({ "before": before, "v": value, "n": [1, 2] }), cap);
        assert_hidden(&preview, &value)?;
        prop_assert!(preview.len() <= cap + '…'.len_utf8());
        // JSON inside a JSON string (an MCP text content holding JSON): the secret is escaped twice.
        let nested = json!({ "text": json!({ "before": before, "v": value }).to_string() });
        assert_hidden(&redactor.preview(&nested, cap), &value)?;
        assert_hidden(&redactor.preview(&nested, 4096), &value)?;
    }

    #[test]
    fn credential_literals_are_masked_whole_and_stably(
        name in "(api_?key|password|clientSecret|x-auth-token|AWS_SECRET)",
        value in "[A-Za-z0-9]{12,30}",
        quote in prop::sample::select(vec!['"', '\'', '`']),
        sep in prop::sample::select(vec![":", "=", " = ", ": "]),
    ) {
        let redactor = Redactor::new();
        let text = format!("{{{name}{sep}{quote}{value}{quote}, other: 'kept'}}");
        let shown = redactor.redact(&text);
        prop_assert!(!shown.contains(&value), "{shown}");
        prop_assert!(shown.contains(&format!("{quote}{MASK}{quote}")), "{shown}");
        prop_assert!(shown.contains("'kept'"));
        prop_assert_eq!(redactor.redact(&shown), shown.clone());
    }

    #[test]
    fn a_text_without_a_credential_word_holds_no_credential_name(
        text in "[a-zA-Z_\\-KÅ]{0,24}|(tok|en|pass|word|api|key|AUTH|se_cret|cook|ie|-|_){1,6}",
    ) {
        // The search for credential literals is skipped on such a text: it must find nothing there.
        if !may_name_credentials(&text) {
            for start in 0..text.len() {
                for end in start + 1..=text.len() {
                    if let Some(name) = text.get(start..end) {
                        prop_assert!(!is_credential_name(name), "{name} in {text}");
                    }
                }
            }
        }
    }
}
