//! Activation: whether code mode engages for one run, decided from a whole openclaw-style config.
//!
//! Not a config loader: it reads a `serde_json::Value` the caller already parsed. Invariants: the first explicit
//! setting in the seed's precedence order decides; `"auto"` engages only for a `compat.codeMode: "preferred"` model;
//! a run without tools never engages; model rows change activation only, never limits.

use std::fmt;

use serde_json::{Map, Value};

use crate::{ConfigError, Limits, Policy, limits::LIMIT_KEYS};

/// A `tools.codeMode` activation setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Activation {
    /// `false`: code mode stays off.
    Off,
    /// `true`: code mode engages for every tool-capable run.
    On,
    /// `"auto"`: code mode engages only when the model's catalog entry says `compat.codeMode: "preferred"`.
    Auto,
}

/// Where the deciding setting was found, in precedence order (first wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// `agents.entries.<agent>.models["provider/model"].codeMode`.
    AgentModel,
    /// `agents.entries.<agent>.tools.codeMode` (shorthand or `.enabled`).
    AgentTools,
    /// `agents.defaults.models["provider/model"].codeMode`.
    DefaultsModel,
    /// `tools.codeMode` (shorthand or `.enabled`).
    GlobalTools,
}

/// The facts about one run that activation depends on besides the config.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFacts {
    /// The agent the run belongs to; `None` skips the agent-level rows.
    pub agent_id: Option<String>,
    /// The run's model as `"provider/model"`, matched exactly against model rows.
    pub model: String,
    /// The model's `compat.codeMode` from its provider catalog (`"preferred"`, `"capable"`), if any.
    pub model_compat_code_mode: Option<String>,
    /// Whether the run has any tools at all (false for raw model calls and `disableTools`).
    pub has_tools: bool,
}

impl RunFacts {
    /// The facts of this run once it falls back to `model` (with that model's `compat.codeMode`): the same agent
    /// and tools, another model. Resolving them gives the fallback model's own activation (its per-model override,
    /// else the enclosing options, as for any model), with the same limits and policy as the primary's; the
    /// fallback is still the model that runs: activation never changes which model is selected.
    #[must_use]
    pub fn fallback(&self, model: impl Into<String>, compat_code_mode: Option<String>) -> RunFacts {
        RunFacts { model: model.into(), model_compat_code_mode: compat_code_mode, ..self.clone() }
    }
}

/// The activation of a run and of each of its fallback models in order (`"provider/model"` with its
/// `compat.codeMode`): the first [`Resolution`] is the primary model's, then one per fallback, each resolved as
/// [`resolve`] resolves its own model ([`RunFacts::fallback`]).
///
/// # Errors
///
/// The config is invalid ([`validate`]).
pub fn resolve_with_fallbacks(
    config: &Value,
    run: &RunFacts,
    fallbacks: &[(String, Option<String>)],
) -> Result<Vec<Resolution>, ConfigError> {
    let mut out = vec![resolve(config, run)?];
    for (model, compat) in fallbacks {
        out.push(resolve(config, &run.fallback(model.clone(), compat.clone()))?);
    }
    Ok(out)
}

/// Why a run engaged code mode or did not.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Why {
    /// The run has no tools (no tools, `disableTools`, or an empty allow list at `key`): code mode never engages.
    NoTools {
        /// The config key of the empty allow list, when that is the reason.
        key: Option<String>,
    },
    /// No setting anywhere: code mode is off by default.
    Unset,
    /// An explicit `true` or `false` at `key` decided.
    Explicit {
        /// Where the setting came from.
        source: Source,
        /// The exact config key.
        key: String,
        /// The value found there.
        enabled: bool,
    },
    /// `"auto"` at `key` decided; it engages only for a preferred model.
    Auto {
        /// Where the setting came from.
        source: Source,
        /// The exact config key.
        key: String,
        /// Whether the model's `compat.codeMode` is `"preferred"`.
        preferred: bool,
    },
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::NoTools { key: Some(key) } => write!(f, "the run has no tools ({key} is empty)"),
            Why::NoTools { key: None } => f.write_str("the run has no tools"),
            Why::Unset => f.write_str("tools.codeMode.enabled is not set anywhere; code mode is off by default"),
            Why::Explicit { key, enabled, .. } => write!(f, "{key} is {enabled}"),
            Why::Auto { key, preferred: true, .. } => {
                write!(f, "{key} is \"auto\" and the model's compat.codeMode is \"preferred\"")
            }
            Why::Auto { key, preferred: false, .. } => {
                write!(f, "{key} is \"auto\" and the model's compat.codeMode is not \"preferred\"")
            }
        }
    }
}

/// The outcome of [`resolve`]: whether code mode engages, the limits it would run with, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// Whether code mode owns the model's tool surface for this run.
    pub engaged: bool,
    /// The effective limits: `tools.codeMode` overlaid with `agents.entries.<agent>.tools.codeMode`.
    pub limits: Limits,
    /// The deciding rule, for diagnostics and `codeModeEngaged` metadata.
    pub why: Why,
    /// The tool policy: the agent's `tools.codeMode.policy` when set, else the global one (a whole table, not
    /// merged key by key); `None` allows every call.
    pub policy: Option<Policy>,
}

/// Decides whether code mode engages for `run` under `config` (a whole openclaw-style config).
///
/// Precedence, first explicit setting wins: `agents.entries.<agent>.models["provider/model"].codeMode`,
/// `agents.entries.<agent>.tools.codeMode`, `agents.defaults.models["provider/model"].codeMode`, `tools.codeMode`,
/// then off. An object without `enabled` is not explicit. Limits come from the global and agent `tools.codeMode`
/// objects only. The whole config is validated first, so an invalid row fails every run, not just the runs it matches.
///
/// # Errors
///
/// [`ConfigError`] when any code mode setting is invalid: a wrong activation value, a non-boolean model
/// `codeMode`, a wildcard model row that sets `codeMode`, or a section of the wrong shape.
pub fn resolve(config: &Value, run: &RunFacts) -> Result<Resolution, ConfigError> {
    validate(config)?;
    let global_tools = config.get("tools");
    let agent = run.agent_id.as_deref().and_then(|id| Some((id, config.get("agents")?.get("entries")?.get(id)?)));
    let agent_tools = agent.and_then(|(_, entry)| entry.get("tools"));

    let limits =
        effective_limits(global_tools.and_then(|t| t.get("codeMode")), agent_tools.and_then(|t| t.get("codeMode")));
    let policy = match (agent, agent_tools.and_then(|t| t.get("codeMode")).and_then(|c| c.get("policy"))) {
        (Some((id, _)), Some(value)) => {
            Some(Policy::from_json(&format!("agents.entries.{id}.tools.codeMode.policy"), value)?)
        }
        _ => match global_tools.and_then(|t| t.get("codeMode")).and_then(|c| c.get("policy")) {
            Some(value) => Some(Policy::from_json("tools.codeMode.policy", value)?),
            None => None,
        },
    };

    if let Some(why) = no_tools(run, global_tools, agent_tools, agent.map(|(id, _)| id)) {
        return Ok(Resolution { engaged: false, limits, why, policy });
    }

    let preferred = run.model_compat_code_mode.as_deref() == Some("preferred");
    let decide = |source: Source, key: String, activation: Activation| -> Resolution {
        let (engaged, why) = match activation {
            Activation::On => (true, Why::Explicit { source, key, enabled: true }),
            Activation::Off => (false, Why::Explicit { source, key, enabled: false }),
            Activation::Auto => (preferred, Why::Auto { source, key, preferred }),
        };
        Resolution { engaged, limits: limits.clone(), why, policy: policy.clone() }
    };

    if let Some((id, entry)) = agent {
        let key = model_key(&format!("agents.entries.{id}.models"), &run.model);
        if let Some(enabled) = model_setting(entry.get("models"), &run.model, &key)? {
            return Ok(decide(Source::AgentModel, key, bool_activation(enabled)));
        }
        let key = format!("agents.entries.{id}.tools.codeMode");
        if let Some((key, activation)) = activation_at(agent_tools.and_then(|t| t.get("codeMode")), &key)? {
            return Ok(decide(Source::AgentTools, key, activation));
        }
    }
    let defaults_models = config.get("agents").and_then(|a| a.get("defaults")).and_then(|d| d.get("models"));
    let key = model_key("agents.defaults.models", &run.model);
    if let Some(enabled) = model_setting(defaults_models, &run.model, &key)? {
        return Ok(decide(Source::DefaultsModel, key, bool_activation(enabled)));
    }
    if let Some((key, activation)) = activation_at(global_tools.and_then(|t| t.get("codeMode")), "tools.codeMode")? {
        return Ok(decide(Source::GlobalTools, key, activation));
    }
    Ok(Resolution { engaged: false, limits, why: Why::Unset, policy })
}

/// Checks every code mode setting in `config`, including rows for other agents and models than the current run's.
///
/// # Errors
///
/// The first invalid setting found, as a [`ConfigError`] naming its key and the fix.
pub fn validate(config: &Value) -> Result<(), ConfigError> {
    let tools = object_at(config, "tools", "tools")?;
    if let Some(tools) = tools {
        activation_at(tools.get("codeMode"), "tools.codeMode")?;
        if let Some(policy) = tools.get("codeMode").and_then(|c| c.get("policy")) {
            Policy::from_json("tools.codeMode.policy", policy)?;
        }
    }
    let Some(agents) = object_at(config, "agents", "agents")? else { return Ok(()) };
    if let Some(defaults) = object_at_map(agents, "defaults", "agents.defaults")? {
        validate_models(defaults.get("models"), "agents.defaults.models")?;
    }
    if let Some(entries) = object_at_map(agents, "entries", "agents.entries")? {
        for (id, entry) in entries {
            let prefix = format!("agents.entries.{id}");
            let Some(entry) = entry.as_object() else {
                return Err(shape(&prefix, "an object", entry));
            };
            if let Some(tools) = object_at_map(entry, "tools", &format!("{prefix}.tools"))? {
                activation_at(tools.get("codeMode"), &format!("{prefix}.tools.codeMode"))?;
                if let Some(policy) = tools.get("codeMode").and_then(|c| c.get("policy")) {
                    Policy::from_json(&format!("{prefix}.tools.codeMode.policy"), policy)?;
                }
            }
            validate_models(entry.get("models"), &format!("{prefix}.models"))?;
        }
    }
    Ok(())
}

/// Overlays the agent's `tools.codeMode` limit keys on the global ones, then clamps the result.
fn effective_limits(global: Option<&Value>, agent: Option<&Value>) -> Limits {
    let mut merged = Map::new();
    for layer in [global, agent].into_iter().flatten() {
        for key in LIMIT_KEYS {
            if let Some(value) = layer.get(key).filter(|v| !v.is_null()) {
                merged.insert(key.to_owned(), value.clone());
            }
        }
    }
    Limits::from_json(&Value::Object(merged))
}

/// The no-tools rule: the run says it has none, or the effective `tools.allow` list is empty.
fn no_tools(run: &RunFacts, global: Option<&Value>, agent: Option<&Value>, agent_id: Option<&str>) -> Option<Why> {
    if !run.has_tools {
        return Some(Why::NoTools { key: None });
    }
    // The agent's allow list replaces the global one when present.
    let (allow, key) = match agent.and_then(|t| t.get("allow")).filter(|v| !v.is_null()) {
        Some(allow) => (Some(allow), format!("agents.entries.{}.tools.allow", agent_id.unwrap_or_default())),
        None => (global.and_then(|t| t.get("allow")), "tools.allow".to_owned()),
    };
    allow.and_then(Value::as_array).filter(|list| list.is_empty()).map(|_| Why::NoTools { key: Some(key) })
}

/// Reads an activation setting (`true`, `false`, `"auto"`, or an object with `enabled`); `None` when not explicit.
fn activation_at(value: Option<&Value>, key: &str) -> Result<Option<(String, Activation)>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    if let Value::Object(object) = value {
        let key = format!("{key}.enabled");
        return match object.get("enabled") {
            None | Some(Value::Null) => Ok(None),
            Some(enabled) => scalar_activation(enabled, &key).map(|a| Some((key, a))),
        };
    }
    if value.is_null() {
        return Ok(None);
    }
    scalar_activation(value, key).map(|a| Some((key.to_owned(), a)))
}

fn scalar_activation(value: &Value, key: &str) -> Result<Activation, ConfigError> {
    match value {
        Value::Bool(enabled) => Ok(bool_activation(*enabled)),
        Value::String(s) if s == "auto" => Ok(Activation::Auto),
        other => Err(ConfigError::InvalidActivation { key: key.to_owned(), found: render(other) }),
    }
}

fn bool_activation(enabled: bool) -> Activation {
    if enabled { Activation::On } else { Activation::Off }
}

/// The run model's row `codeMode` in a models map; rows were validated by [`validate`].
fn model_setting(models: Option<&Value>, model: &str, key: &str) -> Result<Option<bool>, ConfigError> {
    match models.and_then(|m| m.get(model)).and_then(|row| row.get("codeMode")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(enabled)) => Ok(Some(*enabled)),
        Some(other) => Err(ConfigError::ModelCodeModeNotBoolean { key: key.to_owned(), found: render(other) }),
    }
}

fn validate_models(models: Option<&Value>, prefix: &str) -> Result<(), ConfigError> {
    let Some(models) = models.filter(|m| !m.is_null()) else { return Ok(()) };
    let Some(rows) = models.as_object() else {
        return Err(shape(prefix, "an object keyed by \"provider/model\"", models));
    };
    for (model, row) in rows {
        let key = model_key(prefix, model);
        let Some(code_mode) = row.get("codeMode").filter(|v| !v.is_null()) else { continue };
        if model.contains('*') {
            return Err(ConfigError::WildcardModelCodeMode { key });
        }
        if !code_mode.is_boolean() {
            return Err(ConfigError::ModelCodeModeNotBoolean { key, found: render(code_mode) });
        }
    }
    Ok(())
}

fn model_key(prefix: &str, model: &str) -> String {
    format!("{prefix}[{}].codeMode", Value::String(model.to_owned()))
}

fn object_at<'a>(parent: &'a Value, field: &str, key: &str) -> Result<Option<&'a Map<String, Value>>, ConfigError> {
    match parent.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(shape(key, "an object", other)),
    }
}

fn object_at_map<'a>(
    parent: &'a Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, ConfigError> {
    match parent.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(shape(key, "an object", other)),
    }
}

fn shape(key: &str, expected: &'static str, found: &Value) -> ConfigError {
    ConfigError::InvalidShape { key: key.to_owned(), expected, found: render(found) }
}

/// A short rendering of a config value for an error message.
fn render(value: &Value) -> String {
    const MAX: usize = 60;
    let text = value.to_string();
    if text.len() <= MAX {
        return text;
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}
