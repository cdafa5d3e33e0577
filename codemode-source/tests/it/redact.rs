//! Property: no registered secret and no token shape survives the redaction of a source, wherever a generated
//! program puts it (a credential literal, a template, a tool argument, an output call, a comment).

use codemode_source::redact_source;
use codemode_telemetry::{MASK, Redactor};
use proptest::prelude::*;

/// Token shapes of the kinds the redactor knows, with a generated body.
fn token() -> impl Strategy<Value = String> {
    let body = "[A-Za-z0-9]{40}";
    (0..6usize, body).prop_map(|(kind, body)| match kind {
        0 => format!("sk-proj-{body}"),
        1 => format!("ghp_{body}"),
        2 => format!("AKIA{}", body[..16].to_uppercase()),
        3 => format!("eyJ{}.eyJ{}.{}", &body[..10], &body[10..20], &body[20..]),
        4 => format!("xoxb-{body}"),
        _ => format!("sk-ant-{body}"),
    })
}

/// A program that embeds `value` at `place`.
fn program(place: usize, value: &str) -> String {
    match place {
        0 => format!("const API_TOKEN = \"{value}\";\nreturn await call({{ auth: API_TOKEN }});"),
        1 => format!("const url = `https://example.test/?key={value}`;\nreturn url.length;"),
        2 => format!("return await http_get({{ headers: {{ 'x-note': \"{value}\" }} }});"),
        3 => format!("text(\"{value}\");\nreturn 1;"),
        4 => format!("// remember {value}\nreturn 2;"),
        _ => format!("const cfg = {{}};\ncfg.password = '{value}';\nreturn cfg;"),
    }
}

proptest! {
    #[test]
    fn no_secret_or_token_survives(secret in "[A-Za-z0-9]{8,24}", token in token(), place in 0..6usize, pick in any::<bool>()) {
        let redactor = Redactor::new().secret(secret.clone());
        let value = if pick { secret.clone() } else { token.clone() };
        let source = program(place, &value);
        let out = redact_source(&source, &redactor);
        prop_assert!(!out.contains(&value), "{value} survived in {out}");
        prop_assert!(out.contains(MASK));
        prop_assert_eq!(redact_source(&out, &redactor), out.clone(), "stable");
    }
}
