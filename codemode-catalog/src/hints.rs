//! Compact TypeScript-style hints from JSON Schema, for the quick index and handle metadata.
//!
//! Not a type checker and not the `.d.ts` renderer (see `dts`): hints are deliberately lossy and bounded. The
//! invariant is that a hint marked complete describes every value the schema accepts; an incomplete output hint is
//! never shown, so the model is never invited to guess fields.

use serde_json::{Map, Value};

/// Bounds of one hint kind.
#[derive(Clone, Copy, Debug)]
pub struct HintLimits {
    /// Longest hint text, in characters.
    pub max_chars: usize,
    /// Deepest nesting rendered before `unknown`.
    pub max_depth: usize,
    /// Properties rendered per object.
    pub max_properties: usize,
    /// Whether numeric bounds are rendered as comments.
    pub numeric_comments: bool,
}

/// Input hints: 300 characters, depth 4, 16 properties, numeric bounds as comments.
pub const INPUT_LIMITS: HintLimits =
    HintLimits { max_chars: 300, max_depth: 4, max_properties: 16, numeric_comments: true };
/// Output hints: 800 characters, depth 6, 22 properties.
pub const OUTPUT_LIMITS: HintLimits =
    HintLimits { max_chars: 800, max_depth: 6, max_properties: 22, numeric_comments: false };

const MAX_UNION_MEMBERS: usize = 5;
const MAX_ENUM_VALUES: usize = 8;
const MAX_ENUM_CHARS: usize = 96;
const MAX_PROPERTY_NAME_CHARS: usize = 128;

/// Keywords whose meaning a compact hint cannot carry; their presence makes a hint incomplete.
const UNSUPPORTED: &[&str] = &[
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "allOf",
    "not",
    "patternProperties",
    "unevaluatedProperties",
    "dependentSchemas",
    "dependentRequired",
    "dependencies",
    "if",
    "then",
    "else",
    "prefixItems",
    "unevaluatedItems",
    "propertyNames",
];

struct Hint {
    text: String,
    complete: bool,
}

impl Hint {
    fn complete(text: impl Into<String>) -> Hint {
        Hint { text: text.into(), complete: true }
    }
    fn unknown() -> Hint {
        Hint { text: "unknown".into(), complete: false }
    }
}

/// The compact input hint of a tool; `unknown` when the schema cannot be summarized within bounds.
pub fn input_hint(schema: &Value) -> String {
    let Some(obj) = schema.as_object() else { return "unknown".into() };
    let hint = if obj.get("type").and_then(Value::as_str) == Some("object") {
        object_hint(obj, 0, &INPUT_LIMITS)
    } else {
        schema_hint(schema, 0, &INPUT_LIMITS)
    };
    if hint.text.chars().count() <= INPUT_LIMITS.max_chars { hint.text } else { "unknown".into() }
}

/// The compact output hint of a trusted tool, only when it is complete and within bounds.
pub fn output_hint(schema: &Value) -> Option<String> {
    let hint = schema_hint(schema, 0, &OUTPUT_LIMITS);
    (hint.complete && hint.text.chars().count() <= OUTPUT_LIMITS.max_chars).then_some(hint.text)
}

fn literal(value: &Value) -> Option<String> {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => serde_json::to_string(value).ok(),
        Value::Number(n) if n.as_f64().is_some_and(f64::is_finite) => Some(n.to_string()),
        _ => None,
    }
}

fn literal_union(values: &[Value]) -> Option<Hint> {
    if values.is_empty() || values.len() > MAX_ENUM_VALUES {
        return None;
    }
    let mut rendered: Vec<String> = Vec::with_capacity(values.len());
    for v in values {
        let text = literal(v)?;
        if !rendered.contains(&text) {
            rendered.push(text);
        }
    }
    let text = rendered.join(" | ");
    (text.chars().count() <= MAX_ENUM_CHARS).then(|| Hint::complete(text))
}

fn with_supported_shape(schema: &Map<String, Value>, mut hint: Hint) -> Hint {
    // Schemas have few keys: scanning them beats hashing sixteen keyword lookups.
    if schema.keys().any(|k| UNSUPPORTED.contains(&k.as_str())) {
        hint.complete = false;
    }
    hint
}

fn union_hint(schema: &Map<String, Value>, depth: usize, limits: &HintLimits) -> Option<Hint> {
    let variants = match (schema.get("anyOf"), schema.get("oneOf")) {
        (None, None) => return None,
        (Some(_), Some(_)) => return Some(Hint::unknown()),
        (Some(v), None) | (None, Some(v)) => v,
    };
    let Some(variants) = variants.as_array().filter(|v| !v.is_empty() && v.len() <= MAX_ENUM_VALUES) else {
        return Some(Hint::unknown());
    };
    // A union next to a structural shape is an intersection, which a compact hint cannot show honestly.
    const STRUCTURAL: &[&str] = &["const", "enum", "type", "properties", "required", "additionalProperties", "items"];
    if schema.keys().any(|k| STRUCTURAL.contains(&k.as_str())) {
        return Some(Hint::unknown());
    }
    let consts: Option<Vec<Value>> = variants
        .iter()
        .map(|v| {
            let o = v.as_object()?;
            if o.keys().any(|k| UNSUPPORTED.contains(&k.as_str())) {
                return None;
            }
            o.get("const").cloned()
        })
        .collect();
    if let Some(union) = consts.as_deref().and_then(literal_union) {
        return Some(union);
    }
    if variants.len() > MAX_UNION_MEMBERS {
        return Some(Hint::unknown());
    }
    let mut parts: Vec<String> = Vec::with_capacity(variants.len());
    for v in variants {
        let h = schema_hint(v, depth + 1, limits);
        if !h.complete {
            return Some(Hint::unknown());
        }
        if !parts.contains(&h.text) {
            parts.push(h.text);
        }
    }
    Some(Hint::complete(parts.join(" | ")))
}

fn numeric_comment(schema: &Map<String, Value>, integer: bool) -> String {
    let mut notes: Vec<String> = Vec::new();
    if integer {
        notes.push("integer".into());
    }
    for (key, op) in [("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")] {
        if let Some(n) = schema.get(key).filter(|v| v.is_number()) {
            notes.push(format!("{op} {n}"));
        }
    }
    if notes.is_empty() { "number".into() } else { format!("number /* {} */", notes.join(", ")) }
}

fn schema_hint(schema: &Value, depth: usize, limits: &HintLimits) -> Hint {
    let Some(obj) = schema.as_object() else {
        // `true` accepts anything: that is exactly `unknown`.
        return if schema == &Value::Bool(true) { Hint::complete("unknown") } else { Hint::unknown() };
    };
    if obj.is_empty() || obj.keys().all(|k| is_annotation(k)) {
        return Hint::complete("unknown");
    }
    if depth >= limits.max_depth {
        return Hint::unknown();
    }
    if let Some(nullable) = obj.get("nullable") {
        let Some(nullable) = nullable.as_bool() else { return Hint::unknown() };
        let types: Option<Vec<String>> = match obj.get("type") {
            Some(Value::String(t)) => Some(vec![t.clone()]),
            Some(Value::Array(ts)) => ts.iter().map(|t| t.as_str().map(str::to_owned)).collect(),
            _ => None,
        };
        let Some(mut types) = types else { return Hint::unknown() };
        let mut clean = obj.clone();
        clean.remove("nullable");
        if nullable && !types.iter().any(|t| t == "null") {
            types.push("null".into());
        }
        clean.insert("type".into(), Value::from(types));
        return schema_hint(&Value::Object(clean), depth, limits);
    }
    let finish = |hint: Hint| with_supported_shape(obj, hint);
    if let Some(union) = union_hint(obj, depth, limits) {
        return finish(union);
    }
    if let Some(text) = obj.get("const").and_then(literal) {
        return finish(Hint::complete(text));
    }
    if let Some(union) = obj.get("enum").and_then(Value::as_array).and_then(|v| literal_union(v)) {
        return finish(union);
    }
    match obj.get("type") {
        Some(Value::Array(types)) => {
            if types.is_empty() || types.len() > MAX_UNION_MEMBERS {
                return Hint::unknown();
            }
            let mut parts: Vec<String> = Vec::with_capacity(types.len());
            for t in types {
                if !t.is_string() {
                    return Hint::unknown();
                }
                let mut single = obj.clone();
                single.insert("type".into(), t.clone());
                let h = schema_hint(&Value::Object(single), depth + 1, limits);
                if !h.complete {
                    return Hint::unknown();
                }
                if !parts.contains(&h.text) {
                    parts.push(h.text);
                }
            }
            finish(Hint::complete(parts.join(" | ")))
        }
        Some(Value::String(t)) => match t.as_str() {
            "integer" | "number" => {
                let text = if limits.numeric_comments { numeric_comment(obj, t == "integer") } else { "number".into() };
                finish(Hint::complete(text))
            }
            "array" => {
                let item = match obj.get("items") {
                    Some(items) => schema_hint(items, depth + 1, limits),
                    None => Hint::complete("unknown"),
                };
                let text = if item.text.contains(' ') && !item.text.starts_with('{') {
                    format!("Array<{}>", item.text)
                } else {
                    format!("{}[]", item.text)
                };
                finish(Hint { text, complete: item.complete })
            }
            "object" => finish(object_hint(obj, depth + 1, limits)),
            "string" | "boolean" | "null" => finish(Hint::complete(t.clone())),
            _ => Hint::unknown(),
        },
        _ => Hint::unknown(),
    }
}

fn is_annotation(key: &str) -> bool {
    matches!(key, "description" | "title" | "default" | "examples" | "$schema" | "$id" | "$comment" | "deprecated")
}

fn property_key(key: &str) -> String {
    if crate::names::is_identifier(key) {
        key.to_owned()
    } else {
        serde_json::to_string(key).unwrap_or_else(|_| "\"?\"".into())
    }
}

fn object_hint(schema: &Map<String, Value>, depth: usize, limits: &HintLimits) -> Hint {
    let additional = schema.get("additionalProperties");
    let closed = additional == Some(&Value::Bool(false));
    let open_extra = matches!(additional, Some(Value::Bool(true)) | Some(Value::Object(_)));
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        let has_required = schema.get("required").and_then(Value::as_array).is_some_and(|r| !r.is_empty());
        return if closed && !has_required {
            Hint::complete("{}")
        } else if let Some(Value::Object(extra)) = additional
            && depth < limits.max_depth
        {
            // A map type: `Record<string, T>` is the honest compact spelling.
            let inner = schema_hint(&Value::Object(extra.clone()), depth + 1, limits);
            Hint { text: format!("Record<string, {}>", inner.text), complete: inner.complete && !has_required }
        } else {
            Hint { text: "{ ... }".into(), complete: false }
        };
    };
    let required_raw = schema.get("required").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let mut structurally_incomplete = required_raw.len() > limits.max_properties;
    let mut required: Vec<&str> = Vec::new();
    for r in required_raw.iter().take(limits.max_properties) {
        match r.as_str() {
            Some(k) if k.chars().count() <= MAX_PROPERTY_NAME_CHARS && props.contains_key(k) => {
                if !required.contains(&k) {
                    required.push(k);
                }
            }
            _ => structurally_incomplete = true,
        }
    }
    required.sort_unstable();
    let optional_room = limits.max_properties.saturating_sub(required.len());
    let mut optional: Vec<&str> = Vec::new();
    let mut optional_count = 0usize;
    for key in props.keys() {
        if required.contains(&key.as_str()) || required_raw.iter().any(|r| r.as_str() == Some(key)) {
            continue;
        }
        optional_count += 1;
        if key.chars().count() > MAX_PROPERTY_NAME_CHARS {
            structurally_incomplete = true;
            continue;
        }
        optional.push(key);
    }
    optional.sort_unstable();
    if optional.len() > optional_room {
        optional.truncate(optional_room);
    }
    structurally_incomplete |= optional_count > optional_room;
    let mut omitted = structurally_incomplete || open_extra;
    let mut complete = !structurally_incomplete && closed;
    let mut parts: Vec<String> = Vec::new();
    let mut len = 4; // "{ " + " }"
    for (key, is_required) in required.iter().map(|k| (*k, true)).chain(optional.iter().map(|k| (*k, false))) {
        let h = schema_hint(&props[key], depth, limits);
        complete &= h.complete;
        let part = format!("{}{}: {}", property_key(key), if is_required { "" } else { "?" }, h.text);
        let extra = part.chars().count() + if parts.is_empty() { 0 } else { 2 };
        if len + extra > limits.max_chars {
            omitted = true;
            complete = false;
            break;
        }
        len += extra;
        parts.push(part);
    }
    if parts.is_empty() {
        return if !omitted && required.is_empty() && optional.is_empty() {
            Hint { text: "{}".into(), complete }
        } else {
            Hint { text: "{ ... }".into(), complete: false }
        };
    }
    Hint { text: format!("{{ {}{} }}", parts.join("; "), if omitted { "; ..." } else { "" }), complete }
}
