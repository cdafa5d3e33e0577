//! The one error type of this crate: an invalid code mode setting, named by its exact config key.
//!
//! Not used for limits: a bad limit falls back to its default or is clamped, as the reference does. Every message
//! names the key and says how to fix it.

/// An invalid code mode setting in the config.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A tool policy setting that cannot be used.
    #[error("{key} {reason}")]
    InvalidPolicy {
        /// The exact config key, e.g. `policy.rules[0].match`.
        key: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// An activation setting that is not `true`, `false` or `"auto"`.
    #[error("{key} must be true, false or \"auto\" (found {found}); use one of those, or remove it to inherit")]
    InvalidActivation {
        /// The exact config key, e.g. `tools.codeMode.enabled`.
        key: String,
        /// The offending value, shortened.
        found: String,
    },
    /// A model row whose `codeMode` is not a boolean.
    #[error(
        "{key} accepts only true or false (found {found}); put \"auto\" on tools.codeMode or \
         agents.entries.<agent>.tools.codeMode instead"
    )]
    ModelCodeModeNotBoolean {
        /// The exact config key, e.g. `agents.defaults.models["openai/gpt-5"].codeMode`.
        key: String,
        /// The offending value, shortened.
        found: String,
    },
    /// A wildcard model row (`"*"`, `"provider/*"`) that sets `codeMode`.
    #[error(
        "{key} is set on a wildcard model row, which cannot set codeMode; move it to an exact \"provider/model\" row \
         or set tools.codeMode instead"
    )]
    WildcardModelCodeMode {
        /// The exact config key of the wildcard row's `codeMode`.
        key: String,
    },
    /// A config section of the wrong JSON type.
    #[error("{key} must be {expected} (found {found}); fix its type or remove it")]
    InvalidShape {
        /// The exact config key.
        key: String,
        /// What the key must hold.
        expected: &'static str,
        /// The offending value, shortened.
        found: String,
    },
}
