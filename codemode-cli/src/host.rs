//! The CLI's tool host: the embedded read-only `read` and `list` tools over a root folder, plus stubbed tools from
//! a `--catalog` file so programs can be dry-run without side effects.
//!
//! Invariant: every path the guest passes is resolved inside the root (after following symlinks); nothing outside
//! it is read or listed, and no tool of this host writes anything.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use async_trait::async_trait;
use codemode::ToolDefinition;
use codemode::bridge::{CallContext, ToolError, ToolHost};
use codemode_config::EffectClass;
use serde::Deserialize;
use serde_json::{Value, json};

/// Lines `read` returns when no `limit` is given.
const DEFAULT_READ_LINES: u64 = 2_000;
/// Entries `list` returns at most.
const MAX_LIST_ENTRIES: usize = 1_000;

/// What a stubbed tool answers.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stub {
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    echo: bool,
}

#[derive(Deserialize)]
struct CatalogFile {
    tools: Vec<CatalogTool>,
}

#[derive(Deserialize)]
struct CatalogTool {
    #[serde(flatten)]
    definition: ToolDefinition,
    #[serde(default)]
    stub: Option<Stub>,
}

/// The embedded tools and those of the catalog file, each with its stub (embedded tools have none).
pub fn tools(catalog: Option<&Path>) -> anyhow::Result<Vec<(ToolDefinition, Option<Stub>)>> {
    let mut tools = vec![(read_tool(), None), (list_tool(), None)];
    if let Some(path) = catalog {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading the catalog {}", path.display()))?;
        let file: CatalogFile = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a tool catalog: expected {{\"tools\": [{{\"name\", \"description\", \"parameters\", \
                 \"stub\"?}}]}}",
                path.display()
            )
        })?;
        for tool in file.tools {
            tools.push((tool.definition, tool.stub));
        }
    }
    Ok(tools)
}

fn read_tool() -> ToolDefinition {
    ToolDefinition::new(
        "read",
        "Read a UTF-8 text file under the root folder, by lines.",
        json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "File path, relative to the root folder" },
                "offset": { "type": "integer", "minimum": 0, "description": "First line to return (0-based)" },
                "limit": { "type": "integer", "minimum": 1, "description": "Most lines to return (default 2000)" }
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    )
    .output_schema(json!({
        "type": "object",
        "properties": {
            "path": { "type": "string" },
            "content": { "type": "string" },
            "offset": { "type": "integer" },
            "lines": { "type": "integer" },
            "totalLines": { "type": "integer" }
        },
        "required": ["path", "content", "offset", "lines", "totalLines"]
    }))
    .replay_safe(true)
    .effect(EffectClass::Read)
}

fn list_tool() -> ToolDefinition {
    ToolDefinition::new(
        "list",
        "List the entries of a folder under the root folder.",
        json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "Folder path, relative to the root folder (default .)" }
            },
            "additionalProperties": false
        }),
    )
    .output_schema(json!({
        "type": "object",
        "properties": {
            "path": { "type": "string" },
            "entries": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": { "type": "string" },
                        "type": { "type": "string", "enum": ["file", "dir", "other"] },
                        "size": { "type": "integer" }
                    },
                    "required": ["name", "type", "size"]
                }
            },
            "truncated": { "type": "boolean" }
        },
        "required": ["path", "entries", "truncated"]
    }))
    .replay_safe(true)
    .effect(EffectClass::Read)
}

/// The CLI's `ToolHost`.
pub struct CliHost {
    root: PathBuf,
    stubs: HashMap<String, Stub>,
}

impl CliHost {
    /// A host reading under `root`, answering the catalog's stubbed tools.
    pub fn new(root: &Path, tools: &[(ToolDefinition, Option<Stub>)]) -> anyhow::Result<CliHost> {
        let root =
            root.canonicalize().with_context(|| format!("the root folder {} is not readable", root.display()))?;
        let stubs = tools.iter().filter_map(|(d, s)| s.clone().map(|s| (d.name.clone(), s))).collect();
        Ok(CliHost { root, stubs })
    }

    /// Resolves a guest path inside the root, or says why not.
    fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        let relative = path.trim_start_matches('/');
        let joined = self.root.join(if relative.is_empty() { "." } else { relative });
        let resolved = joined
            .canonicalize()
            .map_err(|_| ToolError::new(format!("\"{path}\" does not exist under the root folder")))?;
        if !resolved.starts_with(&self.root) {
            return Err(ToolError::with_code(
                "invalid_input",
                format!("\"{path}\" is outside the root folder; use paths relative to it"),
            ));
        }
        Ok(resolved)
    }

    fn display(&self, resolved: &Path) -> String {
        let relative = resolved.strip_prefix(&self.root).unwrap_or(resolved);
        if relative.as_os_str().is_empty() { ".".into() } else { relative.display().to_string() }
    }

    fn read(&self, args: &Value) -> Result<Value, ToolError> {
        let path = args.get("path").and_then(Value::as_str).unwrap_or_default();
        let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0);
        let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(DEFAULT_READ_LINES);
        let resolved = self.resolve(path)?;
        if !resolved.is_file() {
            return Err(ToolError::new(format!("\"{path}\" is not a file; use list() for folders")));
        }
        let bytes = std::fs::read(&resolved).map_err(|e| ToolError::new(format!("cannot read \"{path}\": {e}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| ToolError::new(format!("\"{path}\" is not UTF-8 text; read only text files")))?;
        let total = text.lines().count() as u64;
        let selected: Vec<&str> = text.lines().skip(offset as usize).take(limit as usize).collect();
        Ok(json!({
            "path": self.display(&resolved),
            "content": selected.join("\n"),
            "offset": offset,
            "lines": selected.len(),
            "totalLines": total,
        }))
    }

    fn list(&self, args: &Value) -> Result<Value, ToolError> {
        let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
        let resolved = self.resolve(path)?;
        let entries = std::fs::read_dir(&resolved)
            .map_err(|e| ToolError::new(format!("cannot list \"{path}\": {e}; is it a folder?")))?;
        let mut out: Vec<Value> = Vec::new();
        let mut names: Vec<(String, &'static str, u64)> = entries
            .filter_map(Result::ok)
            .map(|entry| {
                let meta = entry.metadata().ok();
                let kind = match &meta {
                    Some(m) if m.is_dir() => "dir",
                    Some(m) if m.is_file() => "file",
                    _ => "other",
                };
                (entry.file_name().to_string_lossy().into_owned(), kind, meta.map(|m| m.len()).unwrap_or(0))
            })
            .collect();
        names.sort();
        let truncated = names.len() > MAX_LIST_ENTRIES;
        for (name, kind, size) in names.into_iter().take(MAX_LIST_ENTRIES) {
            out.push(json!({ "name": name, "type": kind, "size": size }));
        }
        Ok(json!({ "path": self.display(&resolved), "entries": out, "truncated": truncated }))
    }
}

#[async_trait]
impl ToolHost for CliHost {
    async fn call_tool(&self, tool: &str, args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        if let Some(stub) = self.stubs.get(tool) {
            if let Some(message) = &stub.error {
                return Err(ToolError::new(message.clone()));
            }
            if stub.echo {
                return Ok(json!({ "tool": tool, "args": args }));
            }
            return Ok(stub.result.clone().unwrap_or(Value::Null));
        }
        match tool {
            "read" => self.read(&args),
            "list" => self.list(&args),
            _ => Err(ToolError::new(format!(
                "tool \"{tool}\" has no implementation in the codemode CLI; give it a stub in the --catalog file"
            ))),
        }
    }
}
