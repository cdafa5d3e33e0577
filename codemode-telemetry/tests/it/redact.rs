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

/// `text` as written, JSON-escaped once and JSON-escaped twice.
fn spellings(text: &str) -> [String; 3] {
    let once = escaped(text);
    [text.to_owned(), escaped(&once), once]
}

/// Whether `piece` is made only of bytes the text around a value and the JSON framing hold as well (lowercase
/// letters, `"`, `\\` and ` ,:{}`): such a piece shows up without any secret, so only the whole spelling is judged.
fn could_come_from_around(piece: &str) -> bool {
    piece.bytes().all(|byte| byte.is_ascii_lowercase() || b" ,:{}\"\\".contains(&byte))
}

/// Asserts that `shown` holds no spelling of the secret part of `value` and no 12-byte piece of one that the text
/// around it could not have produced.
fn assert_hidden(shown: &str, value: &str) -> Result<(), TestCaseError> {
    for spelling in spellings(secret_part(value)) {
        prop_assert!(!shown.contains(&spelling), "{spelling:?} shown in {shown:?}");
        for piece in spelling.as_bytes().windows(12) {
            let piece = std::str::from_utf8(piece).unwrap();
            if !could_come_from_around(piece) {
                prop_assert!(!shown.contains(piece), "the piece {piece:?} of {spelling:?} shown in {shown:?}");
            }
        }
    }
    Ok(())
}

/// Redacts `before`, the secret or the token (`pick`), and `after` in every way the gateway shows text, and asserts
/// that the value stays hidden in each.
fn hidden_everywhere(
    secret: &str,
    token: &str,
    pick: bool,
    before: &str,
    after: &str,
    cap: usize,
) -> Result<(), TestCaseError> {
    let redactor = Redactor::new().secret(secret.to_owned());
    let value = if pick { secret.to_owned() } else { token.to_owned() };
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
    Ok(())
}

#[test]
fn a_secret_holding_what_surrounds_it_is_judged_by_its_own_bytes() {
    // `"""` before a secret holding `"""` shows `\\\"\\\"\\\"` twice escaped, which is no leak.
    let secret = "S3cr\"\"\"\u{1}A0AA\"A";
    hidden_everywhere(secret, "sk-proj-aAAa0Aaaa0a0AA0A000000aaaaAAA0AA0AaAaAaA", true, "\"\"\"", "", 8).unwrap();
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
        hidden_everywhere(&secret, &token, pick, &before, &after, cap)?;
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
