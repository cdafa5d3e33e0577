//! The exec and wait input contracts (seed 000): what a model-written tool call must contain.
//!
//! Not the source checks (syntax, module access, shell-like input): those belong to the VM. Invariant: anything
//! ambiguous fails closed with an `invalid_input` error that names the field and the fix; a rejected input never
//! runs.

use serde_json::{Map, Value};

use crate::InputError;

/// Longest accepted `title`, in characters.
pub const MAX_TITLE_CHARS: usize = 120;

/// The source language the model declared. TypeScript syntax is stripped whatever it says, since models write
/// annotations anyway; the field is kept for hooks and telemetry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Language {
    /// `"javascript"` (the default).
    #[default]
    JavaScript,
    /// `"typescript"`.
    TypeScript,
}

impl Language {
    /// The wire spelling: `"javascript"` or `"typescript"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
        }
    }
}

/// A validated `exec` input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecInput {
    /// The cell's purpose, trimmed; nonblank and at most [`MAX_TITLE_CHARS`] characters.
    pub title: String,
    /// The program: `code`, or its `command` alias; never blank.
    pub code: String,
    /// Whether the cell may be replayed after a restart (only replay-safe tools, no store/load).
    pub restart_safe: bool,
    /// Whether the caller keeps the call open until pending tool results settle instead of getting `waiting`.
    pub await_results: bool,
    /// The declared language.
    pub language: Language,
}

/// A validated `wait` input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitInput {
    /// The `runId` of a `waiting` result, trimmed.
    pub run_id: String,
    /// How long this wait may hold a run whose tool calls are still pending (`maxWaitMs`), when given; the engine
    /// bounds it by its `[limits] maxWaitMs`. `0` returns at the ordinary park time.
    pub max_wait_ms: Option<u64>,
}

/// Validates a model's `exec` arguments.
///
/// `code` and `command` are aliases: a blank one counts as absent, a non-string one invalidates both, and when both
/// are non-empty they must be equal. Unknown fields are ignored (hooks may add their own), except the retired
/// `typecheck`.
///
/// # Errors
///
/// [`InputError`] (always `invalid_input`) naming the offending field and how to fix it.
pub fn parse_exec_input(input: &Value) -> Result<ExecInput, InputError> {
    let object = input.as_object().ok_or(InputError::NotAnObject { tool: "exec", found: kind(input) })?;
    let fields = ExecFields::of(object);
    if fields.typecheck {
        return Err(InputError::Typecheck);
    }
    let title = parse_title(fields.title)?;
    let code = parse_code(&fields)?;
    Ok(ExecInput {
        title,
        code,
        restart_safe: boolean(fields.restart_safe, "restartSafe")?,
        await_results: boolean(fields.await_results, "awaitResults")?,
        language: parse_language(fields.language)?,
    })
}

/// The fields of an `exec` input that the surface reads, gathered in one pass over the object (each lookup by key
/// would hash the key; the object has a handful of entries).
#[derive(Default)]
struct ExecFields<'a> {
    typecheck: bool,
    title: Option<&'a Value>,
    code: Option<&'a Value>,
    command: Option<&'a Value>,
    restart_safe: Option<&'a Value>,
    await_results: Option<&'a Value>,
    language: Option<&'a Value>,
}

impl<'a> ExecFields<'a> {
    fn of(object: &'a Map<String, Value>) -> ExecFields<'a> {
        let mut fields = ExecFields::default();
        for (key, value) in object {
            match key.as_str() {
                "typecheck" => fields.typecheck = true,
                "title" => fields.title = Some(value),
                "code" => fields.code = Some(value),
                "command" => fields.command = Some(value),
                "restartSafe" => fields.restart_safe = Some(value),
                "awaitResults" => fields.await_results = Some(value),
                "language" => fields.language = Some(value),
                _ => {}
            }
        }
        fields
    }
}

/// Validates exec arguments after a hook or trusted policy rewrote them.
///
/// On top of [`parse_exec_input`] on `rewritten`: if `original` had a populated `code` or `command` that the rewrite
/// blanked or made a non-string, both aliases are invalid and the call fails closed, instead of silently running the
/// other alias.
///
/// # Errors
///
/// [`InputError::AliasInvalidated`] for an invalidated alias, otherwise as [`parse_exec_input`].
pub fn parse_rewritten_exec_input(original: &Value, rewritten: &Value) -> Result<ExecInput, InputError> {
    for field in ["code", "command"] {
        let was_populated = original.get(field).and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty());
        let now_populated = rewritten.get(field).and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty());
        if was_populated && !now_populated {
            return Err(InputError::AliasInvalidated { field });
        }
    }
    parse_exec_input(rewritten)
}

/// Validates a model's `wait` arguments.
///
/// # Errors
///
/// [`InputError`] when the input is not an object or `runId` is missing, not a string, or blank.
pub fn parse_wait_input(input: &Value) -> Result<WaitInput, InputError> {
    let object = input.as_object().ok_or(InputError::NotAnObject { tool: "wait", found: kind(input) })?;
    let run_id = match object.get("runId") {
        None | Some(Value::Null) => return Err(InputError::MissingRunId),
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        Some(Value::String(_)) => return Err(InputError::MissingRunId),
        Some(other) => return Err(InputError::NotAString { field: "runId", found: kind(other) }),
    };
    let max_wait_ms = match object.get("maxWaitMs") {
        None | Some(Value::Null) => None,
        Some(value) => Some(value.as_u64().ok_or_else(|| InputError::BadWaitBudget { found: value.to_string() })?),
    };
    Ok(WaitInput { run_id, max_wait_ms })
}

fn parse_title(title: Option<&Value>) -> Result<String, InputError> {
    match title {
        None | Some(Value::Null) => Err(InputError::MissingTitle),
        Some(Value::String(s)) => {
            let trimmed = s.trim();
            if trimmed.is_empty() {
                return Err(InputError::MissingTitle);
            }
            let chars = trimmed.chars().count();
            if chars > MAX_TITLE_CHARS {
                return Err(InputError::TitleTooLong { chars });
            }
            Ok(trimmed.to_owned())
        }
        Some(other) => Err(InputError::NotAString { field: "title", found: kind(other) }),
    }
}

/// One alias: `Ok(None)` when absent or blank, `Err` when populated with a non-string.
fn alias<'a>(value: Option<&'a Value>, field: &'static str) -> Result<Option<&'a str>, InputError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(InputError::AliasNotAString { field, found: kind(other) }),
    }
}

fn parse_code(fields: &ExecFields<'_>) -> Result<String, InputError> {
    let code = alias(fields.code, "code")?;
    let command = alias(fields.command, "command")?;
    match (code, command) {
        (Some(code), Some(command)) if code != command => Err(InputError::AliasMismatch),
        (Some(code), _) | (None, Some(code)) => Ok(code.to_owned()),
        (None, None) => Err(InputError::MissingCode),
    }
}

fn boolean(value: Option<&Value>, field: &'static str) -> Result<bool, InputError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(InputError::NotABoolean { field, found: kind(other) }),
    }
}

fn parse_language(language: Option<&Value>) -> Result<Language, InputError> {
    match language {
        None | Some(Value::Null) => Ok(Language::JavaScript),
        Some(Value::String(s)) if s == "javascript" => Ok(Language::JavaScript),
        Some(Value::String(s)) if s == "typescript" => Ok(Language::TypeScript),
        Some(other) => Err(InputError::InvalidLanguage { found: short(other) }),
    }
}

/// The JSON type of a value, for messages that must not echo model input at length.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value rendered for a message, at most about 40 bytes.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 40 {
        return text;
    }
    let mut end = 40;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}
