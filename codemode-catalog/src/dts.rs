//! TypeScript-style declaration files for `API.read`: `results.d.ts`, `tools/<callable>.d.ts`, `mcp/index.d.ts`
//! and `mcp/<server>.d.ts`.
//!
//! Not a compiler-grade schema translation: unsupported keywords degrade to `unknown`. Invariant: every file is
//! bounded (32,768 characters, depth 12, 256 properties per object, 4,096 schema nodes), so a hostile schema
//! cannot make a file unbounded.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::names::is_identifier;

/// Largest declaration file, in characters.
pub const MAX_DTS_CHARS: usize = 32_768;
const MAX_DEPTH: usize = 12;
const MAX_PROPERTIES: usize = 256;
const MAX_NODES: usize = 4_096;
const MAX_DOC_CHARS: usize = 400;

/// Renders schemas to TypeScript types within a shared node budget.
pub struct TypeRenderer {
    nodes: usize,
}

impl Default for TypeRenderer {
    fn default() -> Self {
        TypeRenderer::new()
    }
}

impl TypeRenderer {
    /// A renderer with a fresh node budget.
    pub fn new() -> TypeRenderer {
        TypeRenderer { nodes: 0 }
    }

    /// The TypeScript type of `schema`, indented for a block at `indent` levels.
    pub fn render(&mut self, schema: &Value, depth: usize, indent: usize) -> String {
        self.nodes += 1;
        if self.nodes > MAX_NODES || depth > MAX_DEPTH {
            return "unknown".into();
        }
        let Some(obj) = schema.as_object() else {
            return if schema == &Value::Bool(false) { "never".into() } else { "unknown".into() };
        };
        if let Some(v) = obj.get("const") {
            return literal(v).unwrap_or_else(|| "unknown".into());
        }
        if let Some(values) = obj.get("enum").and_then(Value::as_array) {
            let parts: Vec<String> =
                values.iter().take(64).map(|v| literal(v).unwrap_or_else(|| "unknown".into())).collect();
            return if parts.is_empty() { "never".into() } else { parts.join(" | ") };
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(variants) = obj.get(key).and_then(Value::as_array) {
                let parts: Vec<String> = variants.iter().take(16).map(|v| self.render(v, depth + 1, indent)).collect();
                return wrap_union(parts);
            }
        }
        if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
            let parts: Vec<String> = all.iter().take(16).map(|v| self.render(v, depth + 1, indent)).collect();
            return if parts.is_empty() { "unknown".into() } else { parts.join(" & ") };
        }
        let nullable = obj.get("nullable") == Some(&Value::Bool(true));
        let rendered = match obj.get("type") {
            Some(Value::Array(types)) => {
                let parts: Vec<String> = types
                    .iter()
                    .take(8)
                    .map(|t| {
                        let mut single = obj.clone();
                        single.insert("type".into(), t.clone());
                        self.render(&Value::Object(single), depth + 1, indent)
                    })
                    .collect();
                wrap_union(parts)
            }
            Some(Value::String(t)) => self.render_type(t, obj, depth, indent),
            _ if obj.contains_key("properties") => self.render_object(obj, depth, indent),
            _ => "unknown".into(),
        };
        if nullable { format!("{rendered} | null") } else { rendered }
    }

    fn render_type(&mut self, t: &str, obj: &Map<String, Value>, depth: usize, indent: usize) -> String {
        match t {
            "string" | "boolean" | "null" => t.into(),
            "integer" | "number" => "number".into(),
            "array" => {
                let item = obj.get("items").map_or_else(|| "unknown".into(), |i| self.render(i, depth + 1, indent));
                if item.contains(' ') && !item.starts_with('{') {
                    format!("Array<{item}>")
                } else {
                    format!("{item}[]")
                }
            }
            "object" => self.render_object(obj, depth, indent),
            _ => "unknown".into(),
        }
    }

    fn render_object(&mut self, obj: &Map<String, Value>, depth: usize, indent: usize) -> String {
        let Some(props) = obj.get("properties").and_then(Value::as_object).filter(|p| !p.is_empty()) else {
            return match obj.get("additionalProperties") {
                Some(Value::Bool(false)) => "{}".into(),
                Some(extra @ Value::Object(_)) => format!("Record<string, {}>", self.render(extra, depth + 1, indent)),
                _ => "Record<string, unknown>".into(),
            };
        };
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let pad = "  ".repeat(indent + 1);
        let mut out = String::from("{\n");
        for (i, (key, prop)) in props.iter().enumerate() {
            if i >= MAX_PROPERTIES {
                let _ = writeln!(out, "{pad}// {} more properties omitted", props.len() - MAX_PROPERTIES);
                break;
            }
            if let Some(doc) = prop.get("description").and_then(Value::as_str) {
                let _ = writeln!(out, "{pad}/** {} */", doc_text(doc));
            }
            let name = if is_identifier(key) { key.clone() } else { serde_json::to_string(key).unwrap_or_default() };
            let optional = if required.contains(&key.as_str()) { "" } else { "?" };
            let ty = self.render(prop, depth + 1, indent + 1);
            let _ = writeln!(out, "{pad}{name}{optional}: {ty};");
        }
        if obj.get("additionalProperties").is_some_and(|a| a != &Value::Bool(false)) {
            let _ = writeln!(out, "{pad}[key: string]: unknown;");
        }
        out.push_str(&"  ".repeat(indent));
        out.push('}');
        out
    }
}

fn wrap_union(parts: Vec<String>) -> String {
    let mut unique: Vec<String> = Vec::with_capacity(parts.len());
    for p in parts {
        if !unique.contains(&p) {
            unique.push(p);
        }
    }
    if unique.is_empty() { "unknown".into() } else { unique.join(" | ") }
}

fn literal(value: &Value) -> Option<String> {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => serde_json::to_string(value).ok(),
        _ => None,
    }
}

/// A description made safe for a one-line JSDoc comment and bounded.
pub fn doc_text(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ").replace("*/", "*\\/");
    if flat.chars().count() > MAX_DOC_CHARS {
        let cut: String = flat.chars().take(MAX_DOC_CHARS).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// Cuts a finished file to the character bound, closing with a marker so a reader knows it is partial.
pub fn bound(mut text: String) -> String {
    if text.chars().count() <= MAX_DTS_CHARS {
        return text;
    }
    let marker = "\n// declaration truncated at 32768 characters\n";
    let keep = MAX_DTS_CHARS - marker.chars().count();
    let cut = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    text.truncate(cut);
    text.push_str(marker);
    text
}

/// `tools/<callable>.d.ts`: one global async function, or one function of a host namespace.
pub fn tool_file(callable: &str, description: &str, parameters: &Value, output: Option<&Value>) -> String {
    let mut r = TypeRenderer::new();
    let input = r.render(parameters, 0, 0);
    let output = output.map_or_else(|| "unknown".into(), |o| r.render(o, 0, 0));
    let mut out = String::new();
    // A host namespace's operation (`namespaces.docs.search`) is a function inside its namespace.
    let (space, function, indent) = match callable.rsplit_once('.') {
        Some((space, function)) => (Some(space), function, "  "),
        None => (None, callable, ""),
    };
    if let Some(space) = space {
        let _ = writeln!(out, "declare namespace {space} {{");
    }
    if !description.trim().is_empty() {
        let _ = writeln!(out, "{indent}/** {} */", doc_text(description));
    }
    let (input, output) = match space {
        Some(_) => (input.replace('\n', "\n  "), output.replace('\n', "\n  ")),
        None => (input, output),
    };
    let declare = if space.is_some() { "" } else { "declare " };
    let _ = writeln!(out, "{indent}{declare}function {function}(input: {input}): Promise<{output}>;");
    if space.is_some() {
        out.push_str("}\n");
    }
    bound(out)
}

/// The path of the results and session-store declarations.
pub const RESULTS_PATH: &str = "results.d.ts";
/// What `API.list()` says `results.d.ts` declares.
pub const RESULTS_DESCRIPTION: &str = "Saved results of earlier cells and small JSON values kept in this session.";
/// `results.d.ts`: `results.load`, `store` and `load`, as the prelude installs them.
pub const RESULTS_FILE: &str = "/** Results an earlier cell's oversized value was saved under (its `reference.id`). */
declare const results: {
  /** Read a saved result: a detached JSON copy. Rejects when it expired or was evicted. */
  load(id: string): Promise<unknown>;
};
/** Keep a small JSON value across cells of this session (not in restartSafe cells). */
declare function store(key: string, value: unknown): Promise<void>;
/** Read a value kept with store, or null when there is none (not in restartSafe cells). */
declare function load(key: string): Promise<unknown>;
";

/// Shared MCP result types, declared once per server file.
pub const MCP_TYPES: &str =
    "type McpToolResult = { content: unknown[]; structuredContent?: unknown; isError?: boolean };
type McpResourcesListResult = { resources: unknown[]; nextCursor?: string };
type McpResourcesReadResult = { contents: unknown[] };
type McpPromptsListResult = { prompts: unknown[]; nextCursor?: string };
type McpPromptsGetResult = { messages: unknown[]; description?: string };
/** `server` is the name under MCP; `tools` the tools declared; `schema` the input JSON Schema (by tool when not narrowed). */
type McpApiHeader = { server: string; tools: string[]; declaration: string; schema?: unknown };
";

/// One MCP tool as a server file renders it.
pub struct McpToolDecl<'a> {
    /// The camelCase name under `MCP.<server>`.
    pub js_name: &'a str,
    /// The tool's description.
    pub description: &'a str,
    /// The input schema.
    pub parameters: &'a Value,
    /// What the tool policy says, when it gates the tool.
    pub note: Option<&'a str>,
}

/// `mcp/<server>.d.ts`.
pub fn mcp_server_file(server_global: &str, raw_server: &str, tools: &[McpToolDecl<'_>]) -> String {
    let mut r = TypeRenderer::new();
    let mut out = String::from(MCP_TYPES);
    let _ = writeln!(out, "\n/** MCP server \"{}\": {} tools. */", doc_text(raw_server), tools.len());
    let _ = writeln!(out, "declare namespace MCP.{server_global} {{");
    out.push_str("  /** Return this API header, or one tool's; with { schema: true } also the input JSON Schema. */\n");
    out.push_str("  function $api(toolName?: string, options?: { schema?: boolean }): Promise<McpApiHeader>;\n");
    for tool in tools {
        out.push('\n');
        match (tool.note, tool.description.trim().is_empty()) {
            (Some(note), true) => {
                let _ = writeln!(out, "  /** ({note}) */");
            }
            (Some(note), false) => {
                let _ = writeln!(out, "  /** ({note}) {} */", doc_text(tool.description));
            }
            (None, false) => {
                let _ = writeln!(out, "  /** {} */", doc_text(tool.description));
            }
            (None, true) => {}
        }
        let input = r.render(tool.parameters, 0, 1);
        let _ = writeln!(out, "  function {}(input: {input}): Promise<McpToolResult>;", tool.js_name);
    }
    out.push_str("\n  namespace resources {\n");
    out.push_str("    function list(input?: { cursor?: string }): Promise<McpResourcesListResult>;\n");
    out.push_str("    function read(input: { uri: string }): Promise<McpResourcesReadResult>;\n  }\n");
    out.push_str("  namespace prompts {\n");
    out.push_str("    function list(input?: { cursor?: string }): Promise<McpPromptsListResult>;\n");
    out.push_str(
        "    function get(input: { name: string; arguments?: Record<string, string> }): Promise<McpPromptsGetResult>;\n  }\n",
    );
    out.push_str("}\n");
    bound(out)
}

/// `mcp/index.d.ts`: the servers and their tools, names only.
pub fn mcp_index_file(servers: &[(&str, Vec<&str>)]) -> String {
    let mut out = String::from("// MCP servers visible in this run. Read mcp/<server>.d.ts for tool signatures.\n");
    for (server, tools) in servers {
        let _ = writeln!(out, "// MCP.{server} (mcp/{server}.d.ts), {} tools: {}", tools.len(), tools.join(", "));
    }
    let names: Vec<String> = servers.iter().map(|(s, _)| format!("{s:?}")).collect();
    let union = if names.is_empty() { "never".to_owned() } else { names.join(" | ") };
    let _ = writeln!(out, "type McpServerName = {union};");
    bound(out)
}
