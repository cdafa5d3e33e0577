//! The exec and wait input contract of seed 000, case by case; every rejection names the field and the fix.

use codemode_bridge::ErrorCode;
use codemode_surface::{
    ExecInput, InputError, Language, parse_exec_input, parse_rewritten_exec_input, parse_wait_input,
};
use serde_json::{Value, json};

fn ok(input: Value) -> ExecInput {
    parse_exec_input(&input).unwrap_or_else(|e| panic!("{input} should pass: {e}"))
}

/// Asserts a rejection whose message contains each fragment (the field and the fix).
fn rejected(input: Value, fragments: &[&str]) -> InputError {
    let error = parse_exec_input(&input).expect_err(&input.to_string());
    let message = error.to_string();
    for fragment in fragments {
        assert!(message.contains(fragment), "{input}: {message:?} should contain {fragment:?}");
    }
    assert_eq!(error.code(), ErrorCode::InvalidInput);
    assert!(message.chars().next().is_some_and(|c| !c.is_uppercase()), "lowercase message: {message:?}");
    assert!(!message.ends_with('.'), "no final period: {message:?}");
    error
}

#[test]
fn minimal_input_gets_defaults() {
    let input = ok(json!({ "title": "  Inspect the graph ", "code": "return 1" }));
    assert_eq!(
        input,
        ExecInput {
            title: "Inspect the graph".into(),
            code: "return 1".into(),
            restart_safe: false,
            await_results: false,
            language: Language::JavaScript,
        }
    );
}

#[test]
fn all_fields() {
    let input = ok(json!({
        "title": "t", "code": "let x: number = 1", "restartSafe": true, "awaitResults": true, "language": "typescript",
        "toolKind": "code_mode_exec",
    }));
    assert!(input.restart_safe && input.await_results);
    assert_eq!(input.language, Language::TypeScript);
    assert_eq!(ok(json!({ "title": "t", "code": "1", "language": "javascript" })).language, Language::JavaScript);
    let nulls = ok(json!({ "title": "t", "code": "1", "restartSafe": null, "awaitResults": null, "language": null }));
    assert!(!nulls.restart_safe && !nulls.await_results);
}

#[test]
fn title_rules() {
    rejected(json!({ "code": "1" }), &["title is required", "3-7 words"]);
    rejected(json!({ "title": "   ", "code": "1" }), &["title is required", "nonblank"]);
    rejected(json!({ "title": null, "code": "1" }), &["title is required"]);
    rejected(json!({ "title": 5, "code": "1" }), &["title must be a string", "found a number"]);
    let at_limit = "é".repeat(120);
    assert_eq!(ok(json!({ "title": at_limit, "code": "1" })).title.chars().count(), 120);
    let error =
        rejected(json!({ "title": "a".repeat(121), "code": "1" }), &["title has 121 characters", "at most 120"]);
    assert_eq!(error, InputError::TitleTooLong { chars: 121 });
}

#[test]
fn code_and_command_aliases() {
    assert_eq!(ok(json!({ "title": "t", "command": "return 2" })).code, "return 2");
    assert_eq!(ok(json!({ "title": "t", "code": "return 1", "command": "return 1" })).code, "return 1");
    // A blank alias is absent, on either side.
    assert_eq!(ok(json!({ "title": "t", "code": "return 1", "command": "  " })).code, "return 1");
    assert_eq!(ok(json!({ "title": "t", "code": "", "command": "return 2" })).code, "return 2");
    assert_eq!(ok(json!({ "title": "t", "code": null, "command": "return 2" })).code, "return 2");
    rejected(json!({ "title": "t" }), &["code is required", "non-empty string"]);
    rejected(json!({ "title": "t", "code": "", "command": " " }), &["code is required"]);
    rejected(json!({ "title": "t", "code": " \n " }), &["code is required"]);
    // A non-string alias invalidates both, even when the other holds a program.
    rejected(
        json!({ "title": "t", "code": "return 1", "command": 7 }),
        &["command must be a string", "both code and command"],
    );
    rejected(
        json!({ "title": "t", "code": ["return 1"], "command": "return 1" }),
        &["code must be a string", "found an array"],
    );
    rejected(
        json!({ "title": "t", "code": "return 1", "command": "return 2" }),
        &["code and command", "differ", "leave command out"],
    );
}

#[test]
fn a_rewrite_that_invalidates_a_populated_alias_fails_closed() {
    let original = json!({ "title": "t", "code": "return 1", "command": "return 1" });
    for rewritten in [
        json!({ "title": "t", "code": "return 1", "command": "" }),
        json!({ "title": "t", "code": "", "command": "return 1" }),
        json!({ "title": "t", "code": false, "command": "return 1" }),
        json!({ "title": "t", "command": "return 1" }),
    ] {
        let error = parse_rewritten_exec_input(&original, &rewritten).expect_err(&rewritten.to_string());
        assert!(matches!(error, InputError::AliasInvalidated { .. }), "{error}");
        assert!(error.to_string().contains("invalidates both code and command"), "{error}");
    }
    // A rewrite that keeps both populated (and equal) passes; so does one of an originally blank alias.
    let rewritten = json!({ "title": "t", "code": "return 3", "command": "return 3" });
    assert_eq!(parse_rewritten_exec_input(&original, &rewritten).expect("valid").code, "return 3");
    let original = json!({ "title": "t", "code": "return 1", "command": "" });
    let rewritten = json!({ "title": "t", "code": "return 1" });
    assert_eq!(parse_rewritten_exec_input(&original, &rewritten).expect("valid").code, "return 1");
}

#[test]
fn booleans_language_and_typecheck() {
    rejected(
        json!({ "title": "t", "code": "1", "restartSafe": "true" }),
        &["restartSafe must be true or false", "leave it out"],
    );
    rejected(json!({ "title": "t", "code": "1", "awaitResults": 1 }), &["awaitResults must be true or false"]);
    rejected(json!({ "title": "t", "code": "1", "language": "python" }), &["language must be", "\"python\""]);
    rejected(json!({ "title": "t", "code": "1", "language": "TypeScript" }), &["language must be"]);
    rejected(json!({ "title": "t", "code": "1", "typecheck": true }), &["typecheck is not supported", "remove it"]);
    rejected(json!({ "title": "t", "code": "1", "typecheck": false }), &["typecheck"]);
    rejected(json!("return 1"), &["exec input must be a JSON object", "found a string"]);
    rejected(json!(null), &["exec input must be a JSON object"]);
}

#[test]
fn wait_input() {
    assert_eq!(parse_wait_input(&json!({ "runId": " run_1 " })).expect("valid").run_id, "run_1");
    for (input, fragment) in [
        (json!({}), "runId is required"),
        (json!({ "runId": "" }), "runId is required"),
        (json!({ "runId": 3 }), "runId must be a string"),
        (json!([]), "wait input must be a JSON object"),
    ] {
        let error = parse_wait_input(&input).expect_err(&input.to_string());
        assert!(error.to_string().contains(fragment), "{input}: {error}");
    }
}

fn field() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(Value::from),
        "[ a-z\\n]{0,8}".prop_map(Value::String),
        "x{118,123}".prop_map(Value::String),
        Just(json!("javascript")),
        Just(json!("typescript")),
        Just(json!([])),
    ]
}

proptest::proptest! {
    /// Whatever the model sends, an accepted input satisfies the contract and never runs blank code.
    #[test]
    fn accepted_inputs_satisfy_the_contract(
        title in field(), code in field(), command in field(), restart in field(), language in field(),
    ) {
        let input = json!({ "title": title, "code": code, "command": command, "restartSafe": restart, "language": language });
        if let Ok(parsed) = parse_exec_input(&input) {
            proptest::prop_assert!(!parsed.title.trim().is_empty() && parsed.title.chars().count() <= 120);
            proptest::prop_assert!(!parsed.code.trim().is_empty());
            let code = input["code"].as_str().filter(|s| !s.trim().is_empty());
            let command = input["command"].as_str().filter(|s| !s.trim().is_empty());
            proptest::prop_assert!(code.or(command) == Some(parsed.code.as_str()));
            proptest::prop_assert!(code.is_none() || command.is_none() || code == command);
        }
    }
}
