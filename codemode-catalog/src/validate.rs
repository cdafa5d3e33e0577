//! Argument and result validation against a tool's JSON Schemas, with AJV-style messages the guest can act on.
//!
//! Not a validator: the `jsonschema` crate does the validating; this module compiles lazily (once per entry) and
//! words the first few failures. Invariant: a message names fields and expectations, never the offending value
//! and never a catalog id.

use std::sync::{Arc, OnceLock};

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{ValidationError, Validator};
use serde_json::Value;

/// Failures reported per message.
const MAX_REPORTED: usize = 3;

/// A failed contract check, as the guest sees it on the thrown error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ContractError {
    /// `input_contract`, `output_contract` or `invalid_contract`.
    pub code: String,
    /// The guest-visible message.
    pub message: String,
}

impl ContractError {
    pub(crate) fn new(code: &str, message: String) -> ContractError {
        ContractError { code: code.to_owned(), message }
    }
}

/// A lazily compiled schema, shared between clones of an entry.
#[derive(Clone, Default)]
pub(crate) struct LazyValidator(Arc<OnceLock<Result<Compiled, String>>>);

/// A schema as checked: the two shapes most tools declare when they take anything are checked without the
/// validator.
enum Compiled {
    /// `true`, `{}` or only annotations: every value is valid.
    Any,
    /// `{"type": "object"}` with at most annotations and an empty `properties`: every object is valid.
    AnyObject,
    /// Anything else, compiled by `jsonschema`.
    Full(Box<Validator>),
}

/// Whether `key: value` is an annotation, well formed: a keyword that never makes a value invalid. `$schema` and
/// `$id` are left to the validator, which may refuse them.
fn is_annotation(key: &str, value: &Value) -> bool {
    match key {
        "$comment" | "title" | "description" => value.is_string(),
        "examples" => value.is_array(),
        "deprecated" => value.is_boolean(),
        "default" => true,
        _ => false,
    }
}

impl Compiled {
    fn of(schema: &Value) -> Result<Compiled, String> {
        let trivial = match schema {
            Value::Bool(true) => Some(Compiled::Any),
            Value::Object(map) => {
                let mut object = false;
                let only_annotations = map.iter().all(|(key, value)| match key.as_str() {
                    "type" if value == "object" => {
                        object = true;
                        true
                    }
                    "properties" => value.as_object().is_some_and(serde_json::Map::is_empty),
                    key => is_annotation(key, value),
                });
                // An empty `properties` constrains nothing with or without `type`.
                only_annotations.then_some(if object { Compiled::AnyObject } else { Compiled::Any })
            }
            _ => None,
        };
        match trivial {
            Some(compiled) => Ok(compiled),
            None => jsonschema::validator_for(schema).map(|v| Compiled::Full(Box::new(v))).map_err(|e| e.to_string()),
        }
    }
}

impl std::fmt::Debug for LazyValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() { "LazyValidator(compiled)" } else { "LazyValidator(pending)" })
    }
}

impl LazyValidator {
    /// Validates `value`; `Err(None)` when the schema itself does not compile.
    pub(crate) fn check(&self, schema: &Value, value: &Value) -> Result<(), Option<String>> {
        let compiled;
        let validator = match self.0.get_or_init(|| Compiled::of(schema)).as_ref().map_err(|_| None)? {
            Compiled::Any => return Ok(()),
            Compiled::AnyObject if value.is_object() => return Ok(()),
            // A refused call is worded by the validator, as any other.
            Compiled::AnyObject => {
                compiled = jsonschema::validator_for(schema).map_err(|_| None)?;
                &compiled
            }
            Compiled::Full(validator) => {
                if validator.is_valid(value) {
                    return Ok(());
                }
                &**validator
            }
        };
        let parts: Vec<String> = validator.iter_errors(value).take(MAX_REPORTED).map(|e| describe(&e)).collect();
        Err(Some(if parts.is_empty() { "must match the schema".into() } else { parts.join("; ") }))
    }
}

fn path_of(error: &ValidationError<'_>) -> String {
    error
        .instance_path()
        .iter()
        .map(|s| match s {
            LocationSegment::Property(p) => p.to_string(),
            LocationSegment::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

fn type_name(kind: &TypeKind) -> String {
    match kind {
        TypeKind::Single(t) => t.to_string(),
        TypeKind::Multiple(set) => set.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(","),
    }
}

/// One failure as `path: message`, in the wording models know from AJV.
fn describe(error: &ValidationError<'_>) -> String {
    let path = path_of(error);
    let (path, message) = match error.kind() {
        ValidationErrorKind::Required { property } => {
            let key = property.as_str().map_or_else(|| property.to_string(), str::to_owned);
            (join(&path, &key), format!("must have required property '{key}'"))
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let first = unexpected.first().cloned().unwrap_or_default();
            (join(&path, &first), "must NOT have additional properties".to_owned())
        }
        ValidationErrorKind::Type { kind } => (path, format!("must be {}", type_name(kind))),
        ValidationErrorKind::Enum { options } => {
            (path, format!("must be equal to one of the allowed values {options}"))
        }
        ValidationErrorKind::Constant { expected_value } => {
            (path, format!("must be equal to constant {expected_value}"))
        }
        ValidationErrorKind::Minimum { limit } => (path, format!("must be >= {limit}")),
        ValidationErrorKind::Maximum { limit } => (path, format!("must be <= {limit}")),
        ValidationErrorKind::ExclusiveMinimum { limit } => (path, format!("must be > {limit}")),
        ValidationErrorKind::ExclusiveMaximum { limit } => (path, format!("must be < {limit}")),
        ValidationErrorKind::MinLength { limit } => (path, format!("must NOT have fewer than {limit} characters")),
        ValidationErrorKind::MaxLength { limit } => (path, format!("must NOT have more than {limit} characters")),
        ValidationErrorKind::MinItems { limit } => (path, format!("must NOT have fewer than {limit} items")),
        ValidationErrorKind::MaxItems { limit } => (path, format!("must NOT have more than {limit} items")),
        ValidationErrorKind::Pattern { pattern } => (path, format!("must match pattern \"{pattern}\"")),
        ValidationErrorKind::Format { format } => (path, format!("must match format \"{format}\"")),
        ValidationErrorKind::AnyOf { .. } => (path, "must match a schema in anyOf".to_owned()),
        ValidationErrorKind::OneOfNotValid { .. } | ValidationErrorKind::OneOfMultipleValid { .. } => {
            (path, "must match exactly one schema in oneOf".to_owned())
        }
        ValidationErrorKind::UniqueItems => (path, "must NOT have duplicate items".to_owned()),
        ValidationErrorKind::FalseSchema => (path, "must NOT be present".to_owned()),
        other => (path, format!("must satisfy {}", other.keyword())),
    };
    let path = if path.is_empty() { "input" } else { &path };
    format!("{path}: {message}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Compiled, LazyValidator};

    #[test]
    fn trivial_schemas_are_checked_without_the_validator_and_refuse_as_it_does() {
        assert!(matches!(Compiled::of(&json!({})), Ok(Compiled::Any)));
        assert!(matches!(Compiled::of(&json!(true)), Ok(Compiled::Any)));
        let object = json!({ "type": "object", "properties": {}, "description": "anything" });
        assert!(matches!(Compiled::of(&object), Ok(Compiled::AnyObject)));
        for constrained in [
            json!({ "type": "object", "required": ["a"] }),
            json!({ "type": "object", "properties": { "a": { "type": "string" } } }),
            json!({ "type": "object", "title": 5 }),
            json!({ "type": "objekt" }),
        ] {
            assert!(!matches!(Compiled::of(&constrained), Ok(Compiled::Any | Compiled::AnyObject)), "{constrained}");
        }
        let lazy = LazyValidator::default();
        assert_eq!(lazy.check(&object, &json!({ "x": 1 })), Ok(()));
        let worded = lazy.check(&object, &json!(5)).expect_err("a number is not an object");
        // `minProperties` is not an annotation: this schema goes to the validator.
        let full = json!({ "type": "object", "minProperties": 0 });
        assert_eq!(worded, LazyValidator::default().check(&full, &json!(5)).expect_err("the validator refuses it"));
    }
}
