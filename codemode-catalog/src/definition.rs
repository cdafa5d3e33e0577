//! A tool as the embedder defines it, before it becomes a catalog entry.
//!
//! Plain serde data: no naming, ordering or policy happens here; `Catalog::build` decides all of that. The struct is
//! `#[non_exhaustive]`: code outside this crate builds one with [`ToolDefinition::new`] and the setters (or
//! deserializes it), so a field added later breaks no embedder.

use codemode_config::EffectClass;
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
///
/// ```
/// use codemode_catalog::{ToolDefinition, ToolSource};
///
/// let search = ToolDefinition::new("search", "Searches the docs", serde_json::json!({ "type": "object" }))
///     .source(ToolSource::Mcp)
///     .server("docs")
///     .replay_safe(true);
/// assert_eq!(search.server.as_deref(), Some("docs"));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
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
    /// The host namespace the tool is an operation of (not for MCP tools): the guest calls it as
    /// `namespaces.<namespace>.<name>`, or `nodes.<name>` and `skills.<name>` for those two namespaces, and the
    /// tool host receives the name `<namespace>.<name>` ([`ToolDefinition::host_name`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Whether the tool stays visible to the model next to exec and wait.
    #[serde(default)]
    pub direct_only: bool,
    /// Whether the tool may run in a `restartSafe` cell.
    #[serde(default)]
    pub replay_safe: bool,
    /// How its calls are scheduled among the other calls of the run's catalog.
    #[serde(default, skip_serializing_if = "ExecutionMode::is_parallel")]
    pub execution_mode: ExecutionMode,
    /// The effect class the host configured; when unset it is derived ([`ToolDefinition::effect_class`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<EffectClass>,
    /// MCP's `annotations.readOnlyHint`: the server says the tool does not modify its environment.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only_hint: bool,
}

/// How a tool's nested calls are scheduled (the seed's `executionMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum ExecutionMode {
    /// Calls may overlap with other parallel-capable calls.
    #[default]
    Parallel,
    /// A call waits for every earlier catalog call to finish and holds back later calls until its own result is in.
    Sequential,
}

impl ExecutionMode {
    fn is_parallel(&self) -> bool {
        *self == ExecutionMode::Parallel
    }
}

impl ToolDefinition {
    /// A tool with its name, description and input schema (JSON Schema of the arguments object); every other
    /// field takes the value a JSON definition that omits it gets: no label, no output schema, source
    /// [`ToolSource::Openclaw`], no server, not direct-only, not replay-safe, parallel, no configured effect class and no read-only hint (so `write`).
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: serde_json::Value) -> Self {
        ToolDefinition {
            name: name.into(),
            label: None,
            description: description.into(),
            parameters,
            output_schema: None,
            source: ToolSource::default(),
            server: None,
            namespace: None,
            direct_only: false,
            replay_safe: false,
            execution_mode: ExecutionMode::Parallel,
            effect: None,
            read_only_hint: false,
        }
    }

    /// Sets the human-readable title shown on handles as `label`.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets the JSON Schema of the tool's result.
    #[must_use]
    pub fn output_schema(mut self, schema: serde_json::Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Sets where the tool comes from.
    #[must_use]
    pub fn source(mut self, source: ToolSource) -> Self {
        self.source = source;
        self
    }

    /// Sets the MCP server that owns the tool (for [`ToolSource::Mcp`]).
    #[must_use]
    pub fn server(mut self, server: impl Into<String>) -> Self {
        self.server = Some(server.into());
        self
    }

    /// Makes the tool an operation of the host namespace `namespace` (see [`ToolDefinition::namespace`]).
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The name the tool host receives for a call: `<namespace>.<name>` for a namespace operation, else the name.
    pub fn host_name(&self) -> std::borrow::Cow<'_, str> {
        match &self.namespace {
            Some(namespace) if self.source != ToolSource::Mcp => format!("{namespace}.{}", self.name).into(),
            _ => self.name.as_str().into(),
        }
    }

    /// Sets whether the tool stays visible to the model next to exec and wait.
    #[must_use]
    pub fn direct_only(mut self, yes: bool) -> Self {
        self.direct_only = yes;
        self
    }

    /// Sets whether the tool may run in a `restartSafe` cell.
    #[must_use]
    pub fn replay_safe(mut self, yes: bool) -> Self {
        self.replay_safe = yes;
        self
    }

    /// Sets the tool's effect class, overriding what its annotations say.
    #[must_use]
    pub fn effect(mut self, class: EffectClass) -> Self {
        self.effect = Some(class);
        self
    }

    /// Sets MCP's `readOnlyHint`.
    #[must_use]
    pub fn read_only_hint(mut self, yes: bool) -> Self {
        self.read_only_hint = yes;
        self
    }

    /// The tool's effect class: as configured, else `read` when MCP says `readOnlyHint: true` or for `skills.list`
    /// and `skills.read` (the seed's read-only discovery), else `write`.
    pub fn effect_class(&self) -> EffectClass {
        let discovery = self.namespace.as_deref() == Some("skills") && matches!(self.name.as_str(), "list" | "read");
        self.effect.unwrap_or(if self.read_only_hint || discovery { EffectClass::Read } else { EffectClass::Write })
    }

    /// Sets how the tool's calls are scheduled.
    #[must_use]
    pub fn execution_mode(mut self, mode: ExecutionMode) -> Self {
        self.execution_mode = mode;
        self
    }
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({ "type": "object" })
}
