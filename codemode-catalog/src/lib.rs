//! Effective tools to catalog entries: ordering, one winner per name, callable names, compact hints, the quick
//! index, search ranking and `.d.ts` declarations.
//!
//! The catalog is built once per run from tool definitions and is immutable afterwards. Invariant: catalog ids
//! (`<source>:<server>:<name>`) stay inside this crate; no output, handle or message carries one.

mod definition;
pub mod dts;
mod error;
pub mod globals;
pub mod hints;
pub mod index;
pub mod names;
pub mod search;
mod validate;

use std::collections::HashMap;

use codemode_config::{Decision, Policy};
use indexmap::IndexMap;
use indexmap::map::Entry;
use serde::Serialize;
use serde_json::{Value, json};

pub use definition::{ExecutionMode, ToolDefinition, ToolSource};
pub use error::CatalogError;
pub use index::QuickIndex;
pub use validate::ContractError;

use validate::LazyValidator;

/// Tool Search control tools: they must not recurse through the catalog.
pub const TOOL_SEARCH_CONTROLS: &[&str] = &["tool_search", "tool_describe", "tool_call", "tool_search_code"];
/// Names inside an `MCP.<server>` namespace that tools cannot take.
const MCP_SERVER_MEMBERS: &[&str] = &["$api", "resources", "prompts"];
/// What the search index reads for an MCP entry's schema: nothing.
static NO_SCHEMA: Value = Value::Null;
/// Longest description a handle carries; `describe()` has the full text.
const MAX_HANDLE_DESCRIPTION_CHARS: usize = 1_024;

/// Policy and limits the catalog is built with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogOptions {
    /// Tool names that must not exist in the run (for MCP tools also `<server>.<name>`).
    pub denied: Vec<String>,
    /// Results `search` returns without a limit.
    pub search_default_limit: u32,
    /// Largest limit `search` accepts.
    pub max_search_limit: u32,
    /// Extra globals no tool may shadow (for example namespace globals added by the embedder).
    pub reserved_extra: Vec<String>,
    /// The tool policy each entry's [`CatalogEntry::decision`] is resolved from once, at build; `None` allows every
    /// call (and costs nothing per call).
    pub policy: Option<codemode_config::Policy>,
}

impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            denied: Vec::new(),
            search_default_limit: 8,
            max_search_limit: 50,
            reserved_extra: Vec::new(),
            policy: None,
        }
    }
}

impl CatalogOptions {
    /// Options carrying the search limits of a run's `Limits`.
    pub fn from_limits(limits: &codemode_config::Limits) -> CatalogOptions {
        CatalogOptions {
            search_default_limit: limits.search_default_limit,
            max_search_limit: limits.max_search_limit,
            ..CatalogOptions::default()
        }
    }
}

/// One cataloged tool with its final guest name and hints.
#[derive(Clone, Debug)]
pub struct CatalogEntry {
    /// The guest global (`web_search`), or `MCP.<server>.<tool>` for MCP entries.
    pub callable_name: String,
    /// The definition as supplied.
    pub definition: ToolDefinition,
    /// Compact input hint; `unknown` for untrusted sources.
    pub input_hint: String,
    /// Compact output hint, only for trusted sources with a complete hint.
    pub output_hint: Option<String>,
    /// What the tool policy says about calls of this tool (`allow` without a policy).
    pub decision: Decision,
    input_validator: LazyValidator,
    output_validator: LazyValidator,
}

impl CatalogEntry {
    /// The digest of the tool's contract with a program: its callable name, its server and own name, and its input
    /// schema. A parked run that called the tool resumes under a rebuilt catalog only while this is unchanged.
    pub fn contract_digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for part in [&self.callable_name, self.definition.server.as_deref().unwrap_or_default(), &self.definition.name]
        {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        hasher.update(serde_json::to_vec(&self.definition.parameters).expect("a JSON value serializes"));
        hex::encode(&hasher.finalize()[..8])
    }
}

/// The metadata a guest handle carries and `toJSON` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandleMeta {
    /// The name to call.
    pub callable_name: String,
    /// The tool's own name.
    pub tool_name: String,
    /// The tool's label, or its name when it has none.
    pub label: String,
    /// The description, bounded.
    pub description: String,
    /// `openclaw`, `client` or `mcp`.
    pub source: String,
    /// Compact input hint.
    pub input: String,
    /// Compact output hint, when trusted and complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The declaration file of an MCP tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_path: Option<String>,
}

/// One MCP tool inside its server namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpTool {
    /// The tool's name on the server.
    pub name: String,
    /// The camelCase name under `MCP.<server>`.
    pub js_name: String,
}

/// One MCP server as the `MCP` namespace shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServer {
    /// The server's configured name.
    pub name: String,
    /// The camelCase property of `MCP`.
    pub global_name: String,
    /// Its visible tools, in definition order.
    pub tools: Vec<McpTool>,
    entries: Vec<usize>,
}

impl McpServer {
    /// The declaration file path, `mcp/<global>.d.ts`.
    pub fn api_path(&self) -> String {
        format!("mcp/{}.d.ts", self.global_name)
    }
}

/// A virtual file served by `API.list` / `API.read`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiFile {
    /// The path to pass to `API.read`.
    pub path: String,
    /// What the file declares.
    pub description: String,
}

/// A virtual file with its content, as a worker serves it to `API.read` without asking the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiFileContent {
    /// The path to pass to `API.read`.
    pub path: String,
    /// What the file declares.
    pub description: String,
    /// The declarations.
    pub content: String,
}

/// The run's tool catalog.
pub struct Catalog {
    entries: Vec<CatalogEntry>,
    by_callable: HashMap<String, usize>,
    direct_only: Vec<ToolDefinition>,
    mcp_servers: Vec<McpServer>,
    mcp_entries: Vec<CatalogEntry>,
    /// Host-only ids paired with the callable name that replaces them in messages, longest id first.
    redactions: Vec<(String, String)>,
    /// Built on the first search: many runs never search, and surface construction must stay cheap.
    search: std::sync::OnceLock<search::SearchIndex>,
    options: CatalogOptions,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("entries", &self.entries.len())
            .field("mcp_servers", &self.mcp_servers.len())
            .field("direct_only", &self.direct_only.len())
            .finish()
    }
}

fn catalog_id(def: &ToolDefinition) -> String {
    let owner = def.server.as_deref().or(def.namespace.as_deref()).unwrap_or("");
    format!("{}:{owner}:{}", def.source.as_str(), def.name)
}

/// The host namespaces that are guest globals of their own; every other one is a member of `namespaces`.
pub const GLOBAL_NAMESPACES: &[&str] = &["nodes", "skills"];

/// A definition the catalog places in a host namespace.
fn in_namespace(def: &ToolDefinition) -> bool {
    def.namespace.is_some() && def.source != ToolSource::Mcp
}

fn source_rank(source: ToolSource) -> u8 {
    match source {
        ToolSource::Openclaw => 0,
        ToolSource::BundledPlugin => 1,
        ToolSource::ExternalPlugin => 2,
        ToolSource::Mcp => 3,
        ToolSource::Client => 4,
    }
}

/// The path a policy rule matches for `def`: `<server>.<tool>` for MCP tools, `<namespace>.<operation>` for a
/// host namespace's operations, the tool's name otherwise.
pub fn policy_path(def: &ToolDefinition) -> String {
    match (&def.server, def.source) {
        (Some(server), ToolSource::Mcp) => format!("{server}.{}", def.name),
        _ => def.host_name().into_owned(),
    }
}

/// The note the exec description and the `.d.ts` files carry for a tool the policy gates.
pub fn policy_note(decision: Decision) -> Option<&'static str> {
    match decision {
        Decision::Allow => None,
        Decision::Ask => Some("needs approval: a person approves each call before it runs"),
        Decision::Deny => Some("denied by policy: every call fails with err.code \"denied\""),
    }
}

fn make_entry(callable_name: String, definition: ToolDefinition, policy: Option<&Policy>) -> CatalogEntry {
    let decision = policy.map_or(Decision::Allow, |p| p.decide(&policy_path(&definition), definition.effect_class()));
    let trusted = definition.source.is_trusted();
    let input_hint = if trusted { hints::input_hint(&definition.parameters) } else { "unknown".to_owned() };
    let output_hint = if trusted { definition.output_schema.as_ref().and_then(hints::output_hint) } else { None };
    CatalogEntry {
        callable_name,
        definition,
        input_hint,
        output_hint,
        decision,
        input_validator: LazyValidator::default(),
        output_validator: LazyValidator::default(),
    }
}

/// The callable paths of host namespace operations, with their catalog ids: `nodes.<op>` and `skills.<op>`, else
/// `namespaces.<namespace>.<op>`; namespaces in first-seen order, names camelCase as MCP's are.
fn namespace_paths(defs: Vec<ToolDefinition>) -> Vec<(String, String, ToolDefinition)> {
    let mut spaces: IndexMap<String, Vec<ToolDefinition>> = IndexMap::new();
    for def in defs {
        spaces.entry(def.namespace.clone().unwrap_or_default()).or_default().push(def);
    }
    let members: Vec<&str> =
        spaces.keys().map(String::as_str).filter(|name| !GLOBAL_NAMESPACES.contains(name)).collect();
    let mut members = names::allocate_namespace(&members, &[]).into_iter();
    let mut out = Vec::new();
    for (name, ops) in spaces {
        let prefix = if GLOBAL_NAMESPACES.contains(&name.as_str()) {
            name
        } else {
            format!("namespaces.{}", members.next().unwrap_or_default())
        };
        let op_names: Vec<&str> = ops.iter().map(|d| d.name.as_str()).collect();
        let js_names = names::allocate_namespace(&op_names, &[]);
        out.extend(ops.into_iter().zip(js_names).map(|(def, js)| (format!("{prefix}.{js}"), catalog_id(&def), def)));
    }
    out
}

fn bounded(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

impl Catalog {
    /// Builds the catalog: filters denied, control and direct-only tools, picks one winner per exact name
    /// (client tools shadow), allocates callable and namespace names and computes hints.
    ///
    /// # Errors
    ///
    /// [`CatalogError::NameAllocation`] when no unique callable name can be found.
    pub fn build(defs: Vec<ToolDefinition>, options: CatalogOptions) -> Result<Catalog, CatalogError> {
        let mut defs = defs;
        // Stable: within a source, definition order decides.
        defs.sort_by_key(|d| source_rank(d.source));
        let denied = |d: &ToolDefinition| {
            options.denied.iter().any(|n| {
                (n == &d.name && !in_namespace(d))
                    || d.server
                        .as_deref()
                        .or(d.namespace.as_deref())
                        .is_some_and(|s| n.strip_prefix(s).and_then(|r| r.strip_prefix('.')) == Some(&d.name))
            })
        };
        let mut direct_only = Vec::new();
        // The winners by exact name, in the order each name first appeared.
        let mut native: IndexMap<String, ToolDefinition> = IndexMap::new();
        let mut mcp: Vec<ToolDefinition> = Vec::new();
        let mut mcp_seen: std::collections::HashSet<(String, String)> = std::collections::HashSet::new();
        let mut spaces: IndexMap<(String, String), ToolDefinition> = IndexMap::new();
        for def in defs {
            if denied(&def) || TOOL_SEARCH_CONTROLS.contains(&def.name.as_str()) {
                continue;
            }
            if def.direct_only {
                direct_only.push(def);
                continue;
            }
            if def.source == ToolSource::Mcp {
                let key = (def.server.clone().unwrap_or_default(), def.name.clone());
                if mcp_seen.insert(key) {
                    mcp.push(def);
                }
                continue;
            }
            if in_namespace(&def) {
                let key = (def.namespace.clone().unwrap_or_default(), def.name.clone());
                if let Entry::Vacant(slot) = spaces.entry(key) {
                    slot.insert(def);
                }
                continue;
            }
            match native.entry(def.name.clone()) {
                // A client tool shadows whatever came before it (in its place); otherwise the first one wins.
                Entry::Occupied(mut winner) if def.source == ToolSource::Client => {
                    winner.insert(def);
                }
                Entry::Occupied(_) => {}
                Entry::Vacant(slot) => {
                    slot.insert(def);
                }
            }
        }
        // Direct-only tools stay model-visible; a cataloged tool of the same name would be a second route to it.
        native.retain(|name, _| !direct_only.iter().any(|x: &ToolDefinition| &x.name == name));
        let native: Vec<ToolDefinition> = native.into_values().collect();

        let ids: Vec<String> = native.iter().map(catalog_id).collect();
        let requests: Vec<names::NameRequest<'_>> =
            native.iter().zip(&ids).map(|(d, id)| names::NameRequest { name: &d.name, id }).collect();
        let mut reserved_extra = options.reserved_extra.clone();
        reserved_extra.extend(["MCP".to_owned()]);
        let callable = names::allocate(&requests, &reserved_extra)?;
        let mut paired: Vec<(String, String, ToolDefinition)> =
            callable.into_iter().zip(ids).zip(native).map(|((c, id), d)| (c, id, d)).collect();
        paired.extend(namespace_paths(spaces.into_values().collect()));
        paired.sort_by(|a, b| names::locale_cmp(&a.0, &b.0));
        let mut redactions = Vec::with_capacity(paired.len() + mcp.len());
        let mut entries = Vec::with_capacity(paired.len());
        for (callable, id, def) in paired {
            redactions.push((id, callable.clone()));
            entries.push(make_entry(callable, def, options.policy.as_ref()));
        }
        let by_callable = entries.iter().enumerate().map(|(i, e)| (e.callable_name.clone(), i)).collect();

        // MCP: servers in first-seen order, camelCase globals; tools camelCase within their server.
        let mut server_names: Vec<String> = Vec::new();
        for d in &mcp {
            let s = d.server.clone().unwrap_or_default();
            if !server_names.contains(&s) {
                server_names.push(s);
            }
        }
        let server_refs: Vec<&str> = server_names.iter().map(String::as_str).collect();
        let globals = names::allocate_namespace(&server_refs, &[]);
        let mut mcp_servers = Vec::with_capacity(server_names.len());
        let mut mcp_entries = Vec::with_capacity(mcp.len());
        let mut mcp_defs: Vec<Option<ToolDefinition>> = mcp.into_iter().map(Some).collect();
        for (raw, global) in server_names.iter().zip(globals) {
            let members: Vec<usize> = (0..mcp_defs.len())
                .filter(|&i| mcp_defs[i].as_ref().is_some_and(|d| d.server.as_deref().unwrap_or("") == raw))
                .collect();
            let tool_names: Vec<&str> =
                members.iter().filter_map(|&i| mcp_defs[i].as_ref().map(|d| d.name.as_str())).collect();
            let js_names = names::allocate_namespace(&tool_names, MCP_SERVER_MEMBERS);
            let mut server =
                McpServer { name: raw.clone(), global_name: global, tools: Vec::new(), entries: Vec::new() };
            for (i, js) in members.into_iter().zip(js_names) {
                let Some(def) = mcp_defs[i].take() else { continue };
                let path = format!("MCP.{}.{}", server.global_name, js);
                redactions.push((catalog_id(&def), path.clone()));
                server.tools.push(McpTool { name: def.name.clone(), js_name: js });
                server.entries.push(mcp_entries.len());
                mcp_entries.push(make_entry(path, def, options.policy.as_ref()));
            }
            mcp_servers.push(server);
        }
        redactions.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));

        let search = std::sync::OnceLock::new();
        Ok(Catalog { entries, by_callable, direct_only, mcp_servers, mcp_entries, redactions, search, options })
    }

    /// Callable (non-MCP, non-direct-only) entries, host namespace operations among them, sorted by callable name
    /// as `localeCompare` sorts.
    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }

    /// The entry a guest global resolves to.
    pub fn by_callable(&self, callable: &str) -> Option<&CatalogEntry> {
        self.by_callable.get(callable).map(|&i| &self.entries[i])
    }

    /// The position in [`entries`](Self::entries) of the entry with `callable` as its callable name: a task that
    /// outlives the borrow of the catalog keeps it instead of looking the name up again.
    pub fn position(&self, callable: &str) -> Option<usize> {
        self.by_callable.get(callable).copied()
    }

    /// Tools that stay visible to the model next to exec and wait.
    pub fn direct_only(&self) -> &[ToolDefinition] {
        &self.direct_only
    }

    /// The `MCP` namespace: servers with their global and tool names.
    pub fn mcp_servers(&self) -> &[McpServer] {
        &self.mcp_servers
    }

    /// Every MCP entry, in server order.
    pub fn mcp_entries(&self) -> &[CatalogEntry] {
        &self.mcp_entries
    }

    /// The entry behind `MCP.<server_global>.<tool_js>`.
    pub fn mcp_tool(&self, server_global: &str, tool_js: &str) -> Option<&CatalogEntry> {
        let server = self.mcp_servers.iter().find(|s| s.global_name == server_global)?;
        let at = server.tools.iter().position(|t| t.js_name == tool_js)?;
        self.mcp_entries.get(server.entries[at])
    }

    /// The quick index for the exec description, within [`index::DEFAULT_BUDGET`] characters.
    pub fn quick_index(&self) -> QuickIndex {
        self.quick_index_with_budget(index::DEFAULT_BUDGET)
    }

    fn index_items(&self) -> Vec<index::IndexItem<'_>> {
        self.entries
            .iter()
            .map(|e| index::IndexItem {
                name: &e.callable_name,
                input: &e.input_hint,
                output: e.output_hint.as_deref(),
                note: policy_note(e.decision),
            })
            .collect()
    }

    /// The quick index within `budget` characters.
    pub fn quick_index_with_budget(&self, budget: usize) -> QuickIndex {
        index::build(&self.index_items(), budget)
    }

    /// The reference's quick index (greedy hinted lines in 8,000 characters), kept to measure ours against.
    pub fn reference_quick_index(&self) -> QuickIndex {
        index::reference(&self.index_items(), index::REFERENCE_BUDGET)
    }

    fn resolve_limit(&self, limit: Option<&Value>) -> Result<usize, CatalogError> {
        let max = self.options.max_search_limit.max(1);
        let n = match limit {
            None | Some(Value::Null) => return Ok(self.options.search_default_limit.clamp(1, max) as usize),
            Some(Value::Number(n)) => match (n.as_u64(), n.as_f64()) {
                (Some(u), _) if u >= 1 => u,
                (None, Some(f)) if f.is_finite() && f >= 1.0 && f.fract() == 0.0 => {
                    if f > f64::from(max) {
                        return Err(CatalogError::LimitTooLarge { max });
                    }
                    f as u64
                }
                _ => return Err(CatalogError::InvalidLimit),
            },
            Some(_) => return Err(CatalogError::InvalidLimit),
        };
        if n > u64::from(max) {
            return Err(CatalogError::LimitTooLarge { max });
        }
        Ok(n as usize)
    }

    /// `catalog.search(query, { limit })`: an exact (then case-insensitive) name match alone, else BM25 ranking,
    /// over native and MCP entries together (an MCP entry matches by its `MCP.<server>.<tool>` path or tool name).
    ///
    /// # Errors
    ///
    /// [`CatalogError::InvalidLimit`] when `limit` is not a positive integer, [`CatalogError::LimitTooLarge`]
    /// when it exceeds the maximum.
    pub fn search(&self, query: &str, limit: Option<&Value>) -> Result<Vec<HandleMeta>, CatalogError> {
        let limit = self.resolve_limit(limit)?;
        let q = query.trim();
        if q.is_empty() {
            return Ok(Vec::new());
        }
        let searched = || self.entries.iter().chain(&self.mcp_entries);
        let exact = self
            .by_callable(q)
            .or_else(|| searched().find(|e| e.callable_name == q || e.definition.name == q))
            .or_else(|| {
                searched()
                    .find(|e| e.callable_name.eq_ignore_ascii_case(q) || e.definition.name.eq_ignore_ascii_case(q))
            });
        if let Some(entry) = exact {
            return Ok(vec![self.handle(entry)]);
        }
        let names: Vec<&str> = searched().map(|e| e.callable_name.as_str()).collect();
        Ok(self
            .search_index()
            .rank(q, &names)
            .into_iter()
            .take(limit)
            .map(|i| self.handle(self.searched_entry(i)))
            .collect())
    }

    /// The entry behind a search document: native entries first, then MCP entries.
    fn searched_entry(&self, doc: usize) -> &CatalogEntry {
        match doc.checked_sub(self.entries.len()) {
            Some(mcp) => &self.mcp_entries[mcp],
            None => &self.entries[doc],
        }
    }

    /// The search index over native then MCP entries, built on first use. MCP schemas are untrusted and stay out
    /// of it; their names, labels and descriptions are indexed.
    pub fn search_index(&self) -> &search::SearchIndex {
        self.search.get_or_init(|| {
            search::SearchIndex::build(self.entries.iter().chain(&self.mcp_entries).map(|e| search::DocText {
                names: [e.callable_name.as_str(), e.definition.name.as_str()],
                label: e.definition.label.as_deref(),
                description: &e.definition.description,
                parameters: if e.definition.source == ToolSource::Mcp { &NO_SCHEMA } else { &e.definition.parameters },
            }))
        })
    }

    /// `catalog.all()`: every callable handle, by callable name (MCP excluded).
    pub fn all(&self) -> Vec<HandleMeta> {
        self.entries.iter().map(|e| self.handle(e)).collect()
    }

    /// The bounded metadata of one entry.
    pub fn handle(&self, entry: &CatalogEntry) -> HandleMeta {
        let def = &entry.definition;
        let api_path = (def.source == ToolSource::Mcp)
            .then(|| self.mcp_servers.iter().find(|s| Some(s.name.as_str()) == def.server.as_deref()))
            .flatten()
            .map(McpServer::api_path);
        HandleMeta {
            callable_name: entry.callable_name.clone(),
            tool_name: def.name.clone(),
            label: def.label.clone().unwrap_or_else(|| def.name.clone()),
            description: bounded(&def.description, MAX_HANDLE_DESCRIPTION_CHARS),
            source: def.source.guest_label().to_owned(),
            input: entry.input_hint.clone(),
            output: entry.output_hint.clone(),
            api_path,
        }
    }

    /// `handle.describe()`: full metadata with the input schema and, for trusted tools, the output schema; for an
    /// MCP handle (`MCP.<server>.<tool>`), its server's API header narrowed to the tool, with its input schema.
    pub fn describe(&self, callable: &str) -> Option<Value> {
        if let Some((global, tool)) = callable.strip_prefix("MCP.").and_then(|path| path.split_once('.')) {
            let server = self.mcp_servers.iter().find(|s| s.global_name == global)?;
            return self.mcp_api(&server.name, Some(tool), true).ok();
        }
        let entry = self.by_callable(callable)?;
        let def = &entry.definition;
        let mut out = json!({
            "callableName": entry.callable_name,
            "name": def.name,
            "description": def.description,
            "label": def.label.as_deref().unwrap_or(&def.name),
            "source": def.source.guest_label(),
            "input": entry.input_hint,
            "parameters": def.parameters,
        });
        if let Some(obj) = out.as_object_mut() {
            if let Some(output) = &entry.output_hint {
                obj.insert("output".into(), json!(output));
            }
            if def.source.is_trusted()
                && let Some(schema) = &def.output_schema
            {
                obj.insert("outputSchema".into(), schema.clone());
            }
        }
        Some(out)
    }

    /// Checks arguments against the entry's input schema (and that a trusted output schema compiles) before the
    /// tool is dispatched.
    ///
    /// # Errors
    ///
    /// `input_contract` naming the failing fields and the expected input; `invalid_contract` when a schema does
    /// not compile.
    pub fn validate_input(&self, entry: &CatalogEntry, args: &Value) -> Result<(), ContractError> {
        let def = &entry.definition;
        let name = &entry.callable_name;
        if def.source.is_trusted()
            && let Some(schema) = &def.output_schema
            && let Err(None) = entry.output_validator.check(schema, &Value::Null)
        {
            return Err(ContractError::new(
                "invalid_contract",
                format!("Tool \"{name}\" declares an invalid output schema; it cannot be called."),
            ));
        }
        match entry.input_validator.check(&def.parameters, args) {
            Ok(()) => Ok(()),
            Err(None) => Err(ContractError::new(
                "invalid_contract",
                format!("Tool \"{name}\" declares an invalid input schema; it cannot be called."),
            )),
            Err(Some(details)) => Err(ContractError::new(
                "input_contract",
                format!(
                    "Invalid arguments for tool \"{name}\": {details}. Expected input: {}.",
                    hints::input_hint(&def.parameters)
                ),
            )),
        }
    }

    /// Checks a result against a trusted output schema; untrusted or undeclared outputs always pass.
    ///
    /// # Errors
    ///
    /// `output_contract` naming the failing fields (never the value); `invalid_contract` for a broken schema.
    pub fn validate_output(&self, entry: &CatalogEntry, value: &Value) -> Result<(), ContractError> {
        let def = &entry.definition;
        let Some(schema) = def.output_schema.as_ref().filter(|_| def.source.is_trusted()) else { return Ok(()) };
        let name = &entry.callable_name;
        match entry.output_validator.check(schema, value) {
            Ok(()) => Ok(()),
            Err(None) => Err(ContractError::new(
                "invalid_contract",
                format!("Tool \"{name}\" declares an invalid output schema; its result cannot be checked."),
            )),
            Err(Some(details)) => Err(ContractError::new(
                "output_contract",
                format!(
                    "Invalid result from tool \"{name}\": {details}. The result does not match its declared output."
                ),
            )),
        }
    }

    fn api_files(&self) -> Vec<ApiFile> {
        let mut files = vec![ApiFile { path: dts::RESULTS_PATH.into(), description: dts::RESULTS_DESCRIPTION.into() }];
        files.extend(self.entries.iter().map(|e| ApiFile {
            path: format!("tools/{}.d.ts", e.callable_name),
            description: format!("declaration of the {} global", e.callable_name),
        }));
        if !self.mcp_servers.is_empty() {
            files.push(ApiFile { path: "mcp/index.d.ts".into(), description: "the MCP servers of this run".into() });
            for s in &self.mcp_servers {
                files.push(ApiFile {
                    path: s.api_path(),
                    description: format!("MCP.{} ({} tools)", s.global_name, s.tools.len()),
                });
            }
        }
        files
    }

    /// Every declaration file with its content, in `API.list()` order: what a worker serves without a request.
    pub fn api_files_with_content(&self) -> Vec<ApiFileContent> {
        self.api_files()
            .into_iter()
            .filter_map(|f| {
                let content = self.api_read(&f.path).ok()?;
                Some(ApiFileContent { path: f.path, description: f.description, content })
            })
            .collect()
    }

    /// `API.list(prefix)`: virtual declaration files whose path starts with `prefix`.
    ///
    /// # Errors
    ///
    /// [`CatalogError::InvalidApiPath`] when the prefix has `.` or `..` segments.
    pub fn api_list(&self, prefix: &str) -> Result<Vec<ApiFile>, CatalogError> {
        check_segments(prefix)?;
        let prefix = prefix.trim_start_matches('/');
        Ok(self.api_files().into_iter().filter(|f| f.path.starts_with(prefix)).collect())
    }

    /// `API.read(path)`: one declaration file, generated on demand.
    ///
    /// # Errors
    ///
    /// [`CatalogError::InvalidApiPath`] for `.`/`..` segments, [`CatalogError::UnknownApiPath`] otherwise.
    pub fn api_read(&self, path: &str) -> Result<String, CatalogError> {
        check_segments(path)?;
        let unknown = || CatalogError::UnknownApiPath { path: path.to_owned() };
        if path == dts::RESULTS_PATH {
            return Ok(dts::RESULTS_FILE.to_owned());
        }
        if let Some(name) = path.strip_prefix("tools/").and_then(|p| p.strip_suffix(".d.ts")) {
            let entry = self.by_callable(name).ok_or_else(unknown)?;
            let def = &entry.definition;
            let output = def.output_schema.as_ref().filter(|_| def.source.is_trusted());
            let description = match policy_note(entry.decision) {
                Some(note) => format!("({note}) {}", def.description),
                None => def.description.clone(),
            };
            return Ok(dts::tool_file(&entry.callable_name, &description, &def.parameters, output));
        }
        if path == "mcp/index.d.ts" && !self.mcp_servers.is_empty() {
            let servers: Vec<(&str, Vec<&str>)> = self
                .mcp_servers
                .iter()
                .map(|s| (s.global_name.as_str(), s.tools.iter().map(|t| t.js_name.as_str()).collect()))
                .collect();
            return Ok(dts::mcp_index_file(&servers));
        }
        if let Some(global) = path.strip_prefix("mcp/").and_then(|p| p.strip_suffix(".d.ts")) {
            let server = self.mcp_servers.iter().find(|s| s.global_name == global).ok_or_else(unknown)?;
            return Ok(dts::mcp_server_file(&server.global_name, &server.name, &self.mcp_decls(server, None)));
        }
        Err(unknown())
    }

    fn mcp_decls<'a>(&'a self, server: &'a McpServer, only: Option<&str>) -> Vec<dts::McpToolDecl<'a>> {
        server
            .tools
            .iter()
            .zip(&server.entries)
            .filter(|(t, _)| only.is_none_or(|js| t.js_name == js))
            .map(|(t, &i)| dts::McpToolDecl {
                js_name: &t.js_name,
                description: &self.mcp_entries[i].definition.description,
                parameters: &self.mcp_entries[i].definition.parameters,
                note: policy_note(self.mcp_entries[i].decision),
            })
            .collect()
    }

    /// `MCP.<server>.$api(toolName?, { schema? })`: the server's `McpApiHeader` (`{ server, tools, declaration,
    /// schema? }`), narrowed to one tool (by its name under `MCP.<server>` or its own name) when `tool` is given.
    /// `schema` adds the tool's input JSON Schema, or for the whole server an object of schemas by tool.
    /// `server` is the server's own name, as the bridge carries it.
    ///
    /// # Errors
    ///
    /// [`CatalogError::UnknownMcpTool`] when the server or the tool is not in this run.
    pub fn mcp_api(&self, server: &str, tool: Option<&str>, schema: bool) -> Result<Value, CatalogError> {
        let unknown = |tool: &str| CatalogError::UnknownMcpTool { server: server.to_owned(), tool: tool.to_owned() };
        let ns = self.mcp_servers.iter().find(|s| s.name == server).ok_or_else(|| unknown(""))?;
        let only = match tool {
            None => None,
            Some(t) => {
                let found = ns.tools.iter().find(|x| x.js_name == t).or_else(|| ns.tools.iter().find(|x| x.name == t));
                Some(found.ok_or_else(|| unknown(t))?.js_name.as_str())
            }
        };
        let decls = self.mcp_decls(ns, only);
        let mut header = json!({
            "server": ns.global_name,
            "tools": decls.iter().map(|d| d.js_name).collect::<Vec<_>>(),
            "declaration": dts::mcp_server_file(&ns.global_name, &ns.name, &decls),
        });
        if schema && let Some(obj) = header.as_object_mut() {
            let value = match (only, decls.as_slice()) {
                (Some(_), [one]) => one.parameters.clone(),
                _ => Value::Object(decls.iter().map(|d| (d.js_name.to_owned(), d.parameters.clone())).collect()),
            };
            obj.insert("schema".into(), value);
        }
        Ok(header)
    }

    /// Catalog entries per source kind (callable and MCP).
    pub fn source_counts(&self) -> codemode_telemetry::SourceCounts {
        let mut counts = codemode_telemetry::SourceCounts::default();
        for e in self.entries.iter().chain(&self.mcp_entries) {
            match e.definition.source {
                ToolSource::Mcp => counts.mcp += 1,
                ToolSource::Client => counts.client += 1,
                _ => counts.openclaw += 1,
            }
        }
        counts
    }

    /// Entries in the hidden catalog: callable plus MCP (direct-only tools are not cataloged).
    pub fn len(&self) -> usize {
        self.entries.len() + self.mcp_entries.len()
    }

    /// Whether the catalog has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces every catalog id in `message` with the callable name (or MCP path), longest id first.
    pub fn redact(&self, message: &str) -> String {
        let mut out = message.to_owned();
        for (id, name) in &self.redactions {
            if out.contains(id.as_str()) {
                out = out.replace(id.as_str(), name);
            }
        }
        out
    }

    /// The options the catalog was built with.
    pub fn options(&self) -> &CatalogOptions {
        &self.options
    }
}

fn check_segments(path: &str) -> Result<(), CatalogError> {
    if path.split(['/', '\\']).any(|s| s == "." || s == "..") {
        return Err(CatalogError::InvalidApiPath { path: path.to_owned() });
    }
    Ok(())
}
