//! A tool as the embedder defines it, before it becomes a catalog entry.
//!
//! Plain serde data: no naming, ordering or policy happens here; `Catalog::build` decides all of that.

use serde::{Deserialize, Serialize};

impl ToolSource {
    /// The stable word used in host-only catalog ids.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolSource::Openclaw => "openclaw",
            ToolSource::BundledPlugin => "bundledPlugin",
            ToolSource::ExternalPlugin => "externalPlugin",
            ToolSource::Mcp => "mcp",
            ToolSource::Client => "client",
        }
    }

    /// Whether output schemas from this source are trusted enough for quick-index hints and output validation.
    pub fn is_trusted(self) -> bool {
        matches!(self, ToolSource::Openclaw | ToolSource::BundledPlugin | ToolSource::ExternalPlugin)
    }

    /// The `source` a guest handle shows: plugins present as `openclaw`, as the seed specifies.
    pub fn guest_label(self) -> &'static str {
        match self {
            ToolSource::Openclaw | ToolSource::BundledPlugin | ToolSource::ExternalPlugin => "openclaw",
            ToolSource::Mcp => "mcp",
            ToolSource::Client => "client",
        }
    }
}

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
    /// A human-readable title (MCP `title`), shown on handles as `label`.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "title")]
    pub label: Option<String>,
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
