//! The tool policy: whether a nested call is allowed, needs a person's approval, or is denied, resolved from
//! configuration (rules with `<server>.<tool>` globs, a default for writes, a default for everything) with the
//! tool's effect class (read or write) as the default when the configuration is silent.
//!
//! Pure data and resolution: it asks no one. Invariant: an empty policy allows everything, so a host that
//! configures nothing behaves as before.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ConfigError;

/// What a call may do without asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectClass {
    /// Reads only (configured so, MCP `readOnlyHint: true`, discovery, the embedded `read`/`list`).
    Read,
    /// Everything else.
    Write,
}

/// What happens to a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// It runs.
    #[default]
    Allow,
    /// A person approves or denies it first.
    Ask,
    /// It is refused in the guest with a catchable error; the program goes on.
    Deny,
}

impl Decision {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }

    fn parse(key: &str, value: &Value) -> Result<Self, ConfigError> {
        match value.as_str() {
            Some("allow") => Ok(Decision::Allow),
            Some("ask") => Ok(Decision::Ask),
            Some("deny") => Ok(Decision::Deny),
            _ => Err(ConfigError::InvalidPolicy {
                key: key.to_owned(),
                reason: format!("must be \"allow\", \"ask\" or \"deny\" (found {})", shorten(value)),
            }),
        }
    }
}

/// What `ask` becomes when nobody can be asked during the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// The call runs.
    Allow,
    /// The call is refused in the guest with a catchable error.
    #[default]
    Deny,
    /// The run parks with reason `approval` (its clock paused) until a `wait` carries the person's answer, given
    /// out of band (the gateway's console).
    Park,
}

impl Fallback {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Allow => "allow",
            Fallback::Deny => "deny",
            Fallback::Park => "park",
        }
    }

    fn parse(key: &str, value: &Value) -> Result<Self, ConfigError> {
        match value.as_str() {
            Some("allow") => Ok(Fallback::Allow),
            Some("deny") => Ok(Fallback::Deny),
            Some("park") => Ok(Fallback::Park),
            _ => Err(ConfigError::InvalidPolicy {
                key: key.to_owned(),
                reason: format!("must be \"allow\", \"deny\" or \"park\" (found {})", shorten(value)),
            }),
        }
    }
}

/// One rule: calls whose path matches `pattern` get `decision`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRule {
    /// A glob over `<server>.<tool>` (native tools: the tool name); `*` matches any run of characters, `?` one.
    #[serde(rename = "match")]
    pub pattern: String,
    /// What matching calls get.
    #[serde(rename = "policy")]
    pub decision: Decision,
}

/// The whole policy. Resolution: the first rule whose pattern matches the call's path decides; otherwise `writes`
/// decides for a write-class tool when set; otherwise `default`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// For calls no rule matches.
    #[serde(default)]
    pub default: Decision,
    /// For write-class calls no rule matches, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<Decision>,
    /// What `ask` becomes when nobody can be asked (`deny` unless configured).
    #[serde(default)]
    pub fallback: Fallback,
    /// Rules, first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<PolicyRule>,
}

/// The keys a policy table accepts.
pub const POLICY_KEYS: [&str; 4] = ["default", "writes", "fallback", "rules"];

impl Policy {
    /// A policy that allows everything (the default when nothing is configured).
    pub fn allow_all() -> Self {
        Policy::default()
    }

    /// Whether this policy can ever answer other than `allow` (a host skips asking about calls otherwise).
    pub fn is_allow_all(&self) -> bool {
        self.default == Decision::Allow
            && self.writes.is_none_or(|w| w == Decision::Allow)
            && self.rules.iter().all(|r| r.decision == Decision::Allow)
    }

    /// The decision for a call of the tool at `path` (`<server>.<tool>`, or a native tool's name) of `class`.
    pub fn decide(&self, path: &str, class: EffectClass) -> Decision {
        if let Some(rule) = self.rules.iter().find(|r| glob_match(&r.pattern, path)) {
            return rule.decision;
        }
        match (class, self.writes) {
            (EffectClass::Write, Some(writes)) => writes,
            _ => self.default,
        }
    }

    /// Which setting decides a call of the tool at `path` of `class`, in configuration words: `rule "fs.write_*"`,
    /// `writes = "deny"` or `default = "deny"` (for messages that tell the model why a call was refused).
    pub fn explain(&self, path: &str, class: EffectClass) -> String {
        if let Some(rule) = self.rules.iter().find(|r| glob_match(&r.pattern, path)) {
            return format!("rule \"{}\" (policy = \"{}\")", rule.pattern, rule.decision.as_str());
        }
        match (class, self.writes) {
            (EffectClass::Write, Some(writes)) => format!("writes = \"{}\"", writes.as_str()),
            _ => format!("default = \"{}\"", self.default.as_str()),
        }
    }

    /// Reads a policy table (`[policy]` in TOML, `"policy"` in JSON) at config key `key`.
    ///
    /// # Errors
    ///
    /// An unknown key, a decision that is not `allow`/`ask`/`deny`, a rule without `match` or `policy`, or an
    /// empty pattern; the error names the exact key.
    pub fn from_json(key: &str, value: &Value) -> Result<Self, ConfigError> {
        let Some(table) = value.as_object() else {
            return Err(ConfigError::InvalidPolicy {
                key: key.to_owned(),
                reason: format!("must be a table (found {})", shorten(value)),
            });
        };
        let mut policy = Policy::allow_all();
        for (name, value) in table {
            let here = format!("{key}.{name}");
            match name.as_str() {
                "default" => policy.default = Decision::parse(&here, value)?,
                "writes" => policy.writes = Some(Decision::parse(&here, value)?),
                "fallback" => policy.fallback = Fallback::parse(&here, value)?,
                "rules" => policy.rules = rules(&here, value)?,
                _ => {
                    return Err(ConfigError::InvalidPolicy {
                        key: here,
                        reason: format!("is not a policy key; use one of {}", POLICY_KEYS.join(", ")),
                    });
                }
            }
        }
        Ok(policy)
    }
}

fn rules(key: &str, value: &Value) -> Result<Vec<PolicyRule>, ConfigError> {
    let Some(items) = value.as_array() else {
        return Err(ConfigError::InvalidPolicy {
            key: key.to_owned(),
            reason: format!("must be a list of {{ match, policy }} tables (found {})", shorten(value)),
        });
    };
    let mut rules = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let here = format!("{key}[{i}]");
        let Some(table) = item.as_object() else {
            return Err(ConfigError::InvalidPolicy {
                key: here,
                reason: "must be a table with `match` and `policy`".into(),
            });
        };
        if let Some(extra) = table.keys().find(|k| *k != "match" && *k != "policy") {
            return Err(ConfigError::InvalidPolicy {
                key: format!("{here}.{extra}"),
                reason: "is not a rule key; a rule has `match` and `policy`".into(),
            });
        }
        let pattern = match table.get("match").and_then(Value::as_str) {
            Some(p) if !p.is_empty() => p.to_owned(),
            _ => {
                return Err(ConfigError::InvalidPolicy {
                    key: format!("{here}.match"),
                    reason: "must be a non-empty glob over <server>.<tool> (native tools: the tool name)".into(),
                });
            }
        };
        let Some(decision) = table.get("policy") else {
            return Err(ConfigError::InvalidPolicy {
                key: format!("{here}.policy"),
                reason: "is missing; set \"allow\", \"ask\" or \"deny\"".into(),
            });
        };
        rules.push(PolicyRule { pattern, decision: Decision::parse(&format!("{here}.policy"), decision)? });
    }
    Ok(rules)
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (dots included) and `?` one.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn shorten(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 40 { format!("{}...", &text[..text.floor_char_boundary(40)]) } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn globs_match_whole_paths() {
        assert!(glob_match("fs.write_*", "fs.write_file"));
        assert!(!glob_match("fs.write_*", "fs.read_file"));
        assert!(glob_match("*", "anything.at.all"));
        assert!(glob_match("fs.*", "fs.x"));
        assert!(!glob_match("fs.*", "fsx.y"));
        assert!(glob_match("?s.read*", "fs.read"));
        assert!(glob_match("send_email", "send_email"));
        assert!(!glob_match("send", "send_email"));
    }

    #[test]
    fn first_rule_then_writes_then_default() {
        let policy = Policy::from_json(
            "policy",
            &json!({
                "default": "allow", "writes": "ask", "fallback": "deny",
                "rules": [{ "match": "fs.write_*", "policy": "deny" }, { "match": "fs.*", "policy": "allow" }]
            }),
        )
        .expect("valid");
        assert_eq!(policy.decide("fs.write_file", EffectClass::Write), Decision::Deny);
        assert_eq!(policy.decide("fs.move_file", EffectClass::Write), Decision::Allow, "rule beats writes");
        assert_eq!(policy.decide("gh.create_issue", EffectClass::Write), Decision::Ask);
        assert_eq!(policy.decide("gh.get_issue", EffectClass::Read), Decision::Allow);
        assert_eq!(policy.fallback, Fallback::Deny);
        assert!(!policy.is_allow_all());
        assert_eq!(policy.explain("fs.write_file", EffectClass::Write), "rule \"fs.write_*\" (policy = \"deny\")");
        assert_eq!(policy.explain("gh.create_issue", EffectClass::Write), "writes = \"ask\"");
        assert_eq!(policy.explain("gh.get_issue", EffectClass::Read), "default = \"allow\"");
    }

    #[test]
    fn nothing_configured_allows_everything() {
        let policy = Policy::allow_all();
        assert!(policy.is_allow_all());
        assert_eq!(policy.decide("x.y", EffectClass::Write), Decision::Allow);
        assert_eq!(Policy::from_json("policy", &json!({})).expect("valid"), policy);
    }

    #[test]
    fn mistakes_name_their_key() {
        let cases = [
            (json!({ "default": "maybe" }), "policy.default"),
            (json!({ "rules": [{ "match": "a" }] }), "policy.rules[0].policy"),
            (json!({ "rules": [{ "policy": "deny" }] }), "policy.rules[0].match"),
            (json!({ "rules": [{ "match": "a", "policy": "deny", "why": 1 }] }), "policy.rules[0].why"),
            (json!({ "writez": "ask" }), "policy.writez"),
            (json!("deny"), "policy"),
        ];
        for (value, key) in cases {
            let error = Policy::from_json("policy", &value).expect_err("invalid").to_string();
            assert!(error.starts_with(key), "{error}");
        }
    }
}
