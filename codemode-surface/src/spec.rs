//! The model-visible tool definitions when code mode is engaged: `exec`, `wait` and the direct-only tools.
//!
//! Not the input checks (see `input`) nor the payload check (see `payload`). Invariants: schemas use only flat
//! string enums (no `oneOf`/`anyOf`, which some providers reject); Tool Search controls and the cataloged tools
//! never appear; the description names only callable names and hints the catalog computed, never catalog ids.

use codemode_catalog::Catalog;
use codemode_config::Limits;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The code mode control tools the model sees.
pub const CONTROL_TOOLS: [&str; 2] = ["exec", "wait"];

/// The Tool Search controls that code mode supersedes: never visible while code mode is engaged.
pub const TOOL_SEARCH_CONTROLS: [&str; 4] = ["tool_search", "tool_describe", "tool_call", "tool_search_code"];

/// One tool definition as a provider receives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What the model reads about the tool.
    pub description: String,
    /// JSON Schema of the input object.
    pub parameters: Value,
}

/// The tools the model sees when code mode is engaged: `exec`, `wait`, then the catalog's direct-only tools in
/// catalog order (minus any that would shadow a control or a Tool Search control).
pub fn visible_tools(catalog: &Catalog, limits: &Limits) -> Vec<ToolSpec> {
    let mut index = catalog.quick_index().text;
    // MCP tools stay out of the quick index; name their servers so the model knows where to look.
    let servers: Vec<String> = catalog
        .mcp_servers()
        .iter()
        .map(|s| format!("MCP.{} ({} tools, {})", s.global_name, s.tools.len(), s.api_path()))
        .collect();
    if !servers.is_empty() {
        index =
            format!("{}\nMCP servers: {}. API.read the .d.ts before calling.", index.trim_end(), servers.join("; "));
    }
    let mut tools = vec![exec_tool(&index, limits), wait_tool()];
    tools.extend(catalog.direct_only().iter().filter(|d| !is_reserved_tool_name(&d.name)).map(|d| ToolSpec {
        name: d.name.clone(),
        description: d.description.clone(),
        parameters: d.parameters.clone(),
    }));
    tools
}

/// The names of the direct-only tools [`visible_tools`] shows, to approve in [`crate::check_payload`].
pub fn approved_direct(catalog: &Catalog) -> Vec<String> {
    catalog.direct_only().iter().filter(|d| !is_reserved_tool_name(&d.name)).map(|d| d.name.clone()).collect()
}

/// Whether a name belongs to a code mode or Tool Search control, so no other tool may take it on the surface.
pub fn is_reserved_tool_name(name: &str) -> bool {
    CONTROL_TOOLS.contains(&name) || TOOL_SEARCH_CONTROLS.contains(&name)
}

/// The `exec` tool with its description built from a quick index text and the effective limits.
pub fn exec_tool(quick_index: &str, limits: &Limits) -> ToolSpec {
    ToolSpec { name: "exec".into(), description: exec_description(quick_index, limits), parameters: exec_schema() }
}

/// The `wait` tool.
pub fn wait_tool() -> ToolSpec {
    ToolSpec { name: "wait".into(), description: WAIT_DESCRIPTION.into(), parameters: wait_schema() }
}

/// JSON Schema of the `exec` input.
pub fn exec_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": {
                "type": "string",
                "description": "The cell's purpose in 3-7 words, at most 120 characters; no secrets, no claims of success."
            },
            "code": {
                "type": "string",
                "description": "The JavaScript program (TypeScript annotations are stripped)."
            },
            "command": {
                "type": "string",
                "description": "Alias of code for hook policies; leave it out."
            },
            "restartSafe": {
                "type": "boolean",
                "description": "Leave it out. true only when the host asks to replay after a restart; never for mutations."
            },
            "awaitResults": {
                "type": "boolean",
                "description": "true when this program's results are required to finish the task: the call stays open \
                                until pending tools settle instead of returning waiting."
            },
            "language": {
                "type": "string",
                "enum": ["javascript", "typescript"],
                "description": "Defaults to javascript; TypeScript syntax is stripped either way."
            }
        },
        "required": ["title", "code"]
    })
}

/// JSON Schema of the `wait` input.
pub fn wait_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "runId": { "type": "string", "description": "The runId of the waiting result to resume." },
            "maxWaitMs": {
                "type": "integer",
                "minimum": 0,
                "description": "Leave it out. How long to wait for pending tools before returning waiting again, in ms; \
                                capped by the server's maximum."
            }
        },
        "required": ["runId"]
    })
}

/// What the model reads about `wait`.
pub const WAIT_DESCRIPTION: &str = "Resume a code mode run whose exec or wait result has status \"waiting\", using \
its top-level runId. While its tool calls are pending, one wait blocks until the run completes, fails, yields or \
prints, so do not call it in a loop. Returns the same result as exec: completed, failed or waiting again. Only for \
waiting results; a background process sessionId is not a runId.";

/// What the model reads about `exec`: how to write a cell, the effective limits, then the quick index.
///
/// Kept lean on purpose: the prose is about 1.6 KB so the quick index can name most of a large catalog within the
/// reference's 10,100-byte description.
pub fn exec_description(quick_index: &str, limits: &Limits) -> String {
    let mut out = String::with_capacity(EXEC_PROSE.len() + quick_index.len() + 200);
    out.push_str(EXEC_PROSE);
    out.push_str(&format!(
        "Limits: {} ms per call; tool replies share a {} inbox; output, value and error share {} across the cell and \
         its waits (larger results are truncated).\n\n",
        limits.timeout_ms,
        bytes(limits.inbox_bytes()),
        bytes(limits.max_output_bytes),
    ));
    out.push_str(quick_index.trim_end());
    out
}

const EXEC_PROSE: &str = "\
Run one JavaScript cell in a fresh sandbox. Variables do not carry over; store/load do.
- Top-level await and return: the returned value is the result. No import, require, files, network or shell.
- Tools are async globals taking one object: `const r = await some_tool({ q: \"x\" })`. Use Promise.all for \
independent calls. A failed call throws; catch it to recover (an unhandled rejection fails the cell).
- catalog.search(query, { limit }) returns callable handles; `await handle.describe()` gives the full schema.
- MCP.<server>.<tool>(input) calls MCP tools; API.list() lists the .d.ts files and (await API.read(path)).content \
gives exact types.
- text(v), json(v) and console.log add output; `await store(key, value)` and `await load(key)` keep small JSON \
across cells.
- attach(block) hands an MCP content block from a tool result (image, audio, resource_link) to the caller.
- setTimeout and clearTimeout work; `await yield_control(reason)` pauses and returns status \"waiting\".
- `-> ?` means unknown output: return that call's raw value and compose in a later cell; never guess its fields.
The result has status completed, waiting or failed; for waiting, call wait with its runId: one wait covers a tool \
call that runs for a minute.
";

/// A byte count the way a person reads it: `64 KiB`, `10 MiB`, or plain bytes.
fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}
