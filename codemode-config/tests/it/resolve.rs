//! Activation: shorthand and object forms, the four-level precedence, "auto" against compat tiers, the no-tools
//! rule, limits merging, and validation errors that name the key and the fix.

use codemode_config::{
    ConfigError, Limits, Resolution, RunFacts, Source, Why, resolve, resolve_with_fallbacks, validate,
};
use serde_json::{Value, json};

const MODEL: &str = "openai/gpt-5.6-luna";

fn facts(agent: Option<&str>, compat: Option<&str>) -> RunFacts {
    RunFacts {
        agent_id: agent.map(str::to_owned),
        model: MODEL.to_owned(),
        model_compat_code_mode: compat.map(str::to_owned),
        has_tools: true,
    }
}

fn engaged(config: Value, run: &RunFacts) -> bool {
    resolve(&config, run).expect("valid config").engaged
}

/// `tools.codeMode` shapes against the three compat tiers: (config value, engaged for preferred, capable, none).
#[test]
fn global_setting_against_compat_tiers() {
    let cases: &[(Value, [bool; 3])] = &[
        (json!(true), [true, true, true]),
        (json!(false), [false, false, false]),
        (json!("auto"), [true, false, false]),
        (json!({ "enabled": true }), [true, true, true]),
        (json!({ "enabled": false }), [false, false, false]),
        (json!({ "enabled": "auto" }), [true, false, false]),
        (json!({ "timeoutMs": 5000 }), [false, false, false]),
        (json!({}), [false, false, false]),
        (json!({ "enabled": null }), [false, false, false]),
        (Value::Null, [false, false, false]),
    ];
    for (setting, expected) in cases {
        for (compat, want) in [Some("preferred"), Some("capable"), None].into_iter().zip(expected) {
            let config = json!({ "tools": { "codeMode": setting } });
            assert_eq!(engaged(config, &facts(None, compat)), *want, "tools.codeMode = {setting}, compat {compat:?}");
        }
    }
    assert!(!engaged(json!({}), &facts(None, Some("preferred"))), "omitted config stays off");
    // The compat tier is matched exactly.
    assert!(!engaged(json!({ "tools": { "codeMode": "auto" } }), &facts(None, Some("Preferred"))));
}

fn layered(agent_model: Value, agent_tools: Value, defaults_model: Value, global: Value) -> Value {
    json!({
        "tools": { "codeMode": global },
        "agents": {
            "defaults": { "models": { MODEL: { "agentRuntime": { "id": "openclaw" }, "codeMode": defaults_model } } },
            "entries": { "research": {
                "tools": { "codeMode": agent_tools },
                "models": { MODEL: { "codeMode": agent_model } },
            } },
        },
    })
}

#[test]
fn precedence_first_explicit_setting_wins() {
    let n = Value::Null;
    // (agent model, agent tools, defaults model, global, engaged, deciding source)
    let cases: Vec<(Value, Value, Value, Value, bool, Option<Source>)> = vec![
        (json!(false), json!(true), json!(true), json!(true), false, Some(Source::AgentModel)),
        (json!(true), json!(false), json!(false), json!(false), true, Some(Source::AgentModel)),
        (n.clone(), json!(false), json!(true), json!(true), false, Some(Source::AgentTools)),
        (n.clone(), json!({ "enabled": true }), json!(false), json!(false), true, Some(Source::AgentTools)),
        (n.clone(), json!("auto"), json!(true), json!(true), false, Some(Source::AgentTools)),
        (n.clone(), json!({ "timeoutMs": 1 }), json!(true), json!(false), true, Some(Source::DefaultsModel)),
        (n.clone(), n.clone(), json!(false), json!(true), false, Some(Source::DefaultsModel)),
        (n.clone(), n.clone(), json!(true), json!(false), true, Some(Source::DefaultsModel)),
        (n.clone(), n.clone(), n.clone(), json!(true), true, Some(Source::GlobalTools)),
        (n.clone(), n.clone(), n.clone(), json!({ "enabled": "auto" }), false, Some(Source::GlobalTools)),
        (n.clone(), n.clone(), n.clone(), n.clone(), false, None),
    ];
    for (agent_model, agent_tools, defaults_model, global, want, source) in cases {
        let config = layered(agent_model, agent_tools, defaults_model, global);
        let resolution = resolve(&config, &facts(Some("research"), Some("capable"))).expect("valid config");
        assert_eq!(resolution.engaged, want, "{config}");
        let got = match resolution.why {
            Why::Explicit { source, .. } | Why::Auto { source, .. } => Some(source),
            Why::Unset => None,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(got, source, "{config}");
    }
}

#[test]
fn the_seed_example_enables_the_model_except_on_research() {
    let config = json!({
        "tools": { "codeMode": "auto" },
        "agents": {
            "defaults": { "models": { MODEL: { "agentRuntime": { "id": "openclaw" }, "codeMode": true } } },
            "entries": { "research": { "models": { MODEL: { "codeMode": false } } } },
        },
    });
    assert!(engaged(config.clone(), &facts(None, None)));
    assert!(engaged(config.clone(), &facts(Some("main"), None)));
    assert!(!engaged(config.clone(), &facts(Some("research"), Some("preferred"))));
    // Another model falls through to "auto".
    let other = RunFacts { model: "anthropic/claude".into(), ..facts(None, Some("preferred")) };
    assert!(engaged(config.clone(), &other));
    let other = RunFacts { model: "anthropic/claude".into(), ..facts(None, Some("capable")) };
    assert!(!engaged(config, &other));
}

#[test]
fn agent_rows_apply_only_to_their_agent() {
    let config = json!({ "agents": { "entries": { "research": { "tools": { "codeMode": true } } } } });
    assert!(engaged(config.clone(), &facts(Some("research"), None)));
    assert!(!engaged(config.clone(), &facts(Some("writer"), None)));
    assert!(!engaged(config, &facts(None, None)));
}

#[test]
fn why_explains_the_decision() {
    let config = json!({ "tools": { "codeMode": { "enabled": "auto" } } });
    let resolution = resolve(&config, &facts(None, Some("capable"))).expect("valid config");
    assert_eq!(
        resolution.why.to_string(),
        "tools.codeMode.enabled is \"auto\" and the model's compat.codeMode is not \"preferred\""
    );
    let config = layered(json!(true), Value::Null, Value::Null, Value::Null);
    let resolution = resolve(&config, &facts(Some("research"), None)).expect("valid config");
    assert_eq!(resolution.why.to_string(), format!("agents.entries.research.models[\"{MODEL}\"].codeMode is true"));
    let resolution = resolve(&json!({}), &facts(None, None)).expect("valid config");
    assert_eq!(resolution.why, Why::Unset);
}

#[test]
fn runs_without_tools_never_engage() {
    let on = json!({ "tools": { "codeMode": true } });
    let no_tools = RunFacts { has_tools: false, ..facts(None, Some("preferred")) };
    let resolution = resolve(&on, &no_tools).expect("valid config");
    assert!(!resolution.engaged);
    assert_eq!(resolution.why, Why::NoTools { key: None });

    let empty_allow = json!({ "tools": { "codeMode": true, "allow": [] } });
    let resolution = resolve(&empty_allow, &facts(None, None)).expect("valid config");
    assert!(!resolution.engaged);
    assert_eq!(resolution.why.to_string(), "the run has no tools (tools.allow is empty)");

    // An agent's allow list replaces the global one, in both directions.
    let config = json!({
        "tools": { "codeMode": true, "allow": ["read"] },
        "agents": { "entries": { "quiet": { "tools": { "allow": [] } }, "busy": { "tools": { "allow": ["x"] } } } },
    });
    assert!(!engaged(config.clone(), &facts(Some("quiet"), None)));
    assert!(engaged(config.clone(), &facts(Some("busy"), None)));
    let config = json!({
        "tools": { "codeMode": true, "allow": [] },
        "agents": { "entries": { "busy": { "tools": { "allow": ["x"] } } } },
    });
    assert!(engaged(config, &facts(Some("busy"), None)));
    // A model override cannot switch tools on either.
    let config = layered(json!(true), Value::Null, Value::Null, Value::Null);
    let no_tools = RunFacts { has_tools: false, ..facts(Some("research"), None) };
    assert!(!engaged(config, &no_tools));
}

#[test]
fn limits_come_from_global_and_agent_options_only() {
    let config = json!({
        "tools": { "codeMode": { "enabled": true, "timeoutMs": 5000, "maxOutputBytes": 2048 } },
        "agents": {
            "defaults": { "models": { MODEL: { "codeMode": true, "timeoutMs": 100 } } },
            "entries": { "research": {
                "tools": { "codeMode": { "timeoutMs": 20_000, "maxSearchLimit": 4 } },
                "models": { MODEL: { "codeMode": true, "maxOutputBytes": 1 } },
            } },
        },
    });
    let resolution = resolve(&config, &facts(Some("research"), None)).expect("valid config");
    let want = Limits {
        timeout_ms: 20_000,
        max_output_bytes: 2048,
        max_search_limit: 4,
        search_default_limit: 4,
        ..Limits::default()
    };
    assert_eq!(resolution.limits, want);
    // Limits are computed even when code mode stays off.
    let resolution = resolve(&config, &RunFacts { has_tools: false, ..facts(None, None) }).expect("valid config");
    assert_eq!(resolution.limits, Limits { timeout_ms: 5000, max_output_bytes: 2048, ..Limits::default() });
    let Resolution { engaged, .. } = resolution;
    assert!(!engaged);
}

/// A config that must fail, with the key the message must name and a fragment of the fix.
fn rejects(config: Value, key: &str, fix: &str) {
    let error = validate(&config).expect_err(&config.to_string());
    let message = error.to_string();
    assert!(message.contains(key), "{message:?} should name {key}");
    assert!(message.contains(fix), "{message:?} should say {fix:?}");
    assert_eq!(message, message.to_lowercase().chars().take(1).collect::<String>() + &message[1..]);
    assert_eq!(resolve(&config, &facts(Some("research"), None)).expect_err("same error"), error);
}

#[test]
fn invalid_settings_name_the_key_and_the_fix() {
    rejects(json!({ "tools": { "codeMode": "on" } }), "tools.codeMode must be true, false or \"auto\"", "found \"on\"");
    rejects(json!({ "tools": { "codeMode": 1 } }), "tools.codeMode", "use one of those");
    rejects(json!({ "tools": { "codeMode": { "enabled": "yes" } } }), "tools.codeMode.enabled", "\"auto\"");
    rejects(json!({ "tools": { "codeMode": [] } }), "tools.codeMode", "found []");
    rejects(json!({ "tools": "all" }), "tools must be an object", "fix its type");
    rejects(
        json!({ "agents": { "entries": { "ops": { "tools": { "codeMode": "always" } } } } }),
        "agents.entries.ops.tools.codeMode",
        "remove it to inherit",
    );
    rejects(
        json!({ "agents": { "defaults": { "models": { MODEL: { "codeMode": "auto" } } } } }),
        &format!("agents.defaults.models[\"{MODEL}\"].codeMode accepts only true or false"),
        "put \"auto\" on tools.codeMode",
    );
    rejects(
        json!({ "agents": { "entries": { "ops": { "models": { MODEL: { "codeMode": 1 } } } } } }),
        &format!("agents.entries.ops.models[\"{MODEL}\"].codeMode"),
        "accepts only true or false",
    );
    for wildcard in ["*", "openai/*", "openai/gpt-*"] {
        rejects(
            json!({ "agents": { "defaults": { "models": { wildcard: { "codeMode": true } } } } }),
            &format!("agents.defaults.models[\"{wildcard}\"].codeMode"),
            "exact \"provider/model\" row",
        );
        rejects(
            json!({ "agents": { "entries": { "ops": { "models": { wildcard: { "codeMode": false } } } } } }),
            &format!("agents.entries.ops.models[\"{wildcard}\"].codeMode"),
            "wildcard model row",
        );
    }
    rejects(json!({ "agents": { "defaults": { "models": [] } } }), "agents.defaults.models must be an object", "[]");
    rejects(json!({ "agents": { "entries": { "ops": 3 } } }), "agents.entries.ops must be an object", "found 3");
}

#[test]
fn wildcard_rows_may_configure_other_things() {
    let config = json!({
        "tools": { "codeMode": true },
        "agents": { "defaults": { "models": {
            "openai/*": { "agentRuntime": { "id": "openclaw" } },
            "*": { "codeMode": null },
        } } },
    });
    assert!(engaged(config, &facts(None, None)));
}

#[test]
fn long_values_are_shortened_in_messages() {
    let long = "x".repeat(500);
    let error = validate(&json!({ "tools": { "codeMode": long } })).expect_err("invalid");
    assert!(error.to_string().len() < 200, "{error}");
    assert!(matches!(error, ConfigError::InvalidActivation { .. }));
}

#[test]
fn the_policy_comes_from_the_agent_or_else_the_global_code_mode_object() {
    use codemode_config::{Decision, EffectClass};
    let config = json!({
        "tools": { "codeMode": { "enabled": true, "policy": { "writes": "ask" } } },
        "agents": { "entries": {
            "strict": { "tools": { "codeMode": { "policy": { "default": "deny" } } } },
            "plain": { "tools": { "codeMode": { "timeoutMs": 5000 } } }
        } }
    });
    let policy_of = |agent: Option<&str>| resolve(&config, &facts(agent, None)).expect("valid").policy;
    let global = policy_of(None).expect("the global policy");
    assert_eq!(global.decide("fs.write", EffectClass::Write), Decision::Ask);
    assert_eq!(global.decide("fs.read", EffectClass::Read), Decision::Allow);
    assert_eq!(policy_of(Some("plain")), Some(global), "an agent without a policy gets the global one");
    let strict = policy_of(Some("strict")).expect("the agent's policy");
    assert_eq!(strict.writes, None, "the agent's table replaces the global one whole");
    assert_eq!(strict.decide("fs.read", EffectClass::Read), Decision::Deny);
    assert_eq!(resolve(&json!({}), &facts(None, None)).expect("valid").policy, None);
    // Checked for every agent, even one the run is not for.
    let bad =
        json!({ "agents": { "entries": { "x": { "tools": { "codeMode": { "policy": { "writes": "maybe" } } } } } } });
    let error = validate(&bad).expect_err("invalid").to_string();
    assert!(error.starts_with("agents.entries.x.tools.codeMode.policy.writes"), "{error}");
}

/// Seed 001: overrides affect the selected model on future runs, including fallback models, and preserve the
/// fallback-model selection and the limits of the enclosing options.
#[test]
fn a_fallback_model_resolves_its_own_override_with_the_primary_s_limits() {
    const FALLBACK: &str = "anthropic/claude-opus-5";
    let config = json!({
        "tools": { "codeMode": { "enabled": "auto", "timeoutMs": 7000 } },
        "agents": { "entries": { "research": { "models": {
            MODEL: { "codeMode": false },
            FALLBACK: { "codeMode": true },
        } } } },
    });
    let run = facts(Some("research"), Some("preferred"));
    let third = ("google/gemini-4".to_owned(), Some("preferred".to_owned()));
    let fourth = ("google/gemini-4-mini".to_owned(), Some("capable".to_owned()));
    let chain = resolve_with_fallbacks(&config, &run, &[(FALLBACK.to_owned(), None), third, fourth]).unwrap();
    let engaged: Vec<bool> = chain.iter().map(|r| r.engaged).collect();
    // The primary's false, the fallback's own true, then "auto" against each fallback's compat tier.
    assert_eq!(engaged, [false, true, true, false]);
    assert!(
        matches!(&chain[1].why, Why::Explicit { source: Source::AgentModel, key, enabled: true } if key.contains(FALLBACK)),
        "{:?}",
        chain[1].why
    );
    assert!(chain.iter().all(|r| r.limits.timeout_ms == 7000), "limits come from the enclosing options");
    let fallback = run.fallback(FALLBACK, None);
    assert_eq!(
        (fallback.model.as_str(), fallback.agent_id.as_deref(), fallback.has_tools),
        (FALLBACK, Some("research"), true)
    );
    assert_eq!(resolve(&config, &fallback).unwrap(), chain[1]);
}
