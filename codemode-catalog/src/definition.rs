//! A tool as the embedder defines it, before it becomes a catalog entry.

use serde::{Deserialize, Serialize};

/// Where a tool comes from; decides catalog order, shadowing and whether its output schema is trusted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolSource {
    /// A core tool of the host.
    #[default]
    Openclaw,
    /// A tool from a bundled plugin.
    BundledPlugin,
    /// A tool from an external plugin.
    ExternalPlugin,
    /// A tool from an MCP server; lives under `MCP.<server>` in the guest.
    Mcp,
    /// A tool the client supplied; shadows any other tool of the same name.
    Client,
}

/// A tool definition as the embedder supplies it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDefinition {
    /// The tool's name as its owner spells it.
    pub name: String,
    /// What the tool does.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the input object.
    #[serde(default = "empty_object_schema")]
    pub parameters: serde_json::Value,
    /// JSON Schema of the result, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// Where the tool comes from.
    #[serde(default)]
    pub source: ToolSource,
    /// The MCP server that owns the tool (`source == Mcp` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Whether the tool stays visible to the model next to exec and wait.
    #[serde(default)]
    pub direct_only: bool,
    /// Whether the tool may run in a `restartSafe` cell.
    #[serde(default)]
    pub replay_safe: bool,
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({ "type": "object" })
}
