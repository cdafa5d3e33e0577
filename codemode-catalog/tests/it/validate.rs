//! Input and output contracts: the messages the guest sees.

use codemode_catalog::ToolSource;
use serde_json::json;

use crate::{build, tool};

fn contract_catalog() -> codemode_catalog::Catalog {
    let mut t = tool("git_show", ToolSource::Openclaw);
    t.parameters = json!({
        "type": "object",
        "properties": {"ref": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
        "required": ["ref"],
        "additionalProperties": false
    });
    t.output_schema = Some(json!({
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": false
    }));
    let mut client = t.clone();
    client.name = "client_tool".into();
    client.source = ToolSource::Client;
    let mut broken = tool("broken", ToolSource::Openclaw);
    broken.parameters = json!({"type": "object", "properties": {"a": {"type": 12}}});
    build(vec![t, client, broken])
}

#[test]
fn input_contract_messages() {
    let catalog = contract_catalog();
    let entry = catalog.by_callable("git_show").unwrap();
    assert!(catalog.validate_input(entry, &json!({"ref": "main"})).is_ok());
    let cases =
        [json!({}), json!({"ref": 1}), json!({"ref": "x", "limit": 0}), json!({"ref": "x", "extra": true}), json!([])];
    let mut report = String::new();
    for args in cases {
        let err = catalog.validate_input(entry, &args).unwrap_err();
        assert_eq!(err.code, "input_contract");
        report.push_str(&format!("{args} => {}\n", err.message));
    }
    insta::assert_snapshot!("input_contract", report);
    let err = catalog.validate_input(entry, &json!({})).unwrap_err();
    assert_eq!(
        err.message,
        "Invalid arguments for tool \"git_show\": ref: must have required property 'ref'. Expected input: { ref: string; limit?: number /* integer, >= 1, <= 10 */ }."
    );
}

#[test]
fn output_contract_only_for_trusted_sources() {
    let catalog = contract_catalog();
    let trusted = catalog.by_callable("git_show").unwrap();
    assert!(catalog.validate_output(trusted, &json!({"ok": true})).is_ok());
    let err = catalog.validate_output(trusted, &json!({"ok": "secret-value"})).unwrap_err();
    assert_eq!(err.code, "output_contract");
    assert!(!err.message.contains("secret-value"), "the value is never printed: {}", err.message);
    assert_eq!(
        err.message,
        "Invalid result from tool \"git_show\": ok: must be boolean. The result does not match its declared output."
    );
    let client = catalog.by_callable("client_tool").unwrap();
    assert!(catalog.validate_output(client, &json!({"ok": "anything"})).is_ok());
}

#[test]
fn invalid_schema_is_an_invalid_contract() {
    let catalog = contract_catalog();
    let entry = catalog.by_callable("broken").unwrap();
    let err = catalog.validate_input(entry, &json!({"a": 1})).unwrap_err();
    assert_eq!(err.code, "invalid_contract");
}
