//! The error codes a failed bridge request carries to the guest (`err.code`), and the effect status of a call.
//!
//! Not the codes of a whole cell's failure (that is `ErrorCode` in `result.rs`). Invariant: a code has one
//! spelling on the wire, the plain string, and a known string always reads back as its own variant, never as
//! [`BridgeErrorCode::Other`].

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The `code` of a failed bridge request, as the guest reads it from the rejected `Error`.
///
/// Serialized as the plain string (`"tool_error"`); a `ToolHost` may fail a call with a code of its own, which
/// travels as [`BridgeErrorCode::Other`]. Build one from a string with `From`, which maps the known spellings to
/// their variants.
#[derive(Clone, Debug, Eq)]
#[non_exhaustive]
pub enum BridgeErrorCode {
    /// The tool ran and failed, or its result was too large (`tool_error`).
    ToolError,
    /// The request itself was refused: unknown tool, policy, bad arguments, an over-large reply
    /// (`invalid_input`).
    InvalidInput,
    /// The call was in flight when the process running the run died (`interrupted`).
    Interrupted,
    /// The arguments did not satisfy the tool's input schema (`input_contract`).
    InputContract,
    /// The tool's result did not satisfy its output schema (`output_contract`).
    OutputContract,
    /// The tool's declared schema itself is unusable (`invalid_contract`).
    InvalidContract,
    /// The tool policy, or a person asked under it, refused the call before it reached the tool (`denied`).
    Denied,
    /// A code a `ToolHost` chose that is none of the above, kept as it was given.
    Other(String),
}

impl BridgeErrorCode {
    /// The wire spelling, e.g. `tool_error`.
    pub fn as_str(&self) -> &str {
        match self {
            BridgeErrorCode::ToolError => "tool_error",
            BridgeErrorCode::InvalidInput => "invalid_input",
            BridgeErrorCode::Interrupted => "interrupted",
            BridgeErrorCode::InputContract => "input_contract",
            BridgeErrorCode::OutputContract => "output_contract",
            BridgeErrorCode::InvalidContract => "invalid_contract",
            BridgeErrorCode::Denied => "denied",
            BridgeErrorCode::Other(code) => code,
        }
    }

    fn known(code: &str) -> Option<BridgeErrorCode> {
        Some(match code {
            "tool_error" => BridgeErrorCode::ToolError,
            "invalid_input" => BridgeErrorCode::InvalidInput,
            "interrupted" => BridgeErrorCode::Interrupted,
            "input_contract" => BridgeErrorCode::InputContract,
            "output_contract" => BridgeErrorCode::OutputContract,
            "invalid_contract" => BridgeErrorCode::InvalidContract,
            "denied" => BridgeErrorCode::Denied,
            _ => return None,
        })
    }
}

// Equality is by spelling, so an `Other` built by hand with a known spelling still equals its variant.
impl PartialEq for BridgeErrorCode {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl From<&str> for BridgeErrorCode {
    fn from(code: &str) -> Self {
        BridgeErrorCode::known(code).unwrap_or_else(|| BridgeErrorCode::Other(code.to_owned()))
    }
}

impl From<String> for BridgeErrorCode {
    fn from(code: String) -> Self {
        BridgeErrorCode::known(&code).unwrap_or(BridgeErrorCode::Other(code))
    }
}

impl fmt::Display for BridgeErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for BridgeErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for BridgeErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(BridgeErrorCode::from)
    }
}

/// Whether a tool call had its effect, as far as the host knows.
///
/// Recorded by the host for every nested write-class tool call (never by the guest), and summed up in the
/// [`EffectFacts`](crate::EffectFacts) of completed and failed results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EffectStatus {
    /// The call never reached the tool.
    NotStarted,
    /// The tool ran and returned.
    Completed,
    /// The tool ran and reported a failure.
    Failed,
    /// The call reached the tool and nobody knows whether it had its effect (it timed out, was aborted, or the
    /// process died mid-call).
    Uncertain,
}

impl EffectStatus {
    /// The wire spelling, e.g. `not_started`.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectStatus::NotStarted => "not_started",
            EffectStatus::Completed => "completed",
            EffectStatus::Failed => "failed",
            EffectStatus::Uncertain => "uncertain",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_as_plain_strings() {
        for spelling in [
            "tool_error",
            "invalid_input",
            "interrupted",
            "input_contract",
            "output_contract",
            "invalid_contract",
            "denied",
        ] {
            let code = BridgeErrorCode::from(spelling);
            assert!(!matches!(code, BridgeErrorCode::Other(_)), "{spelling} is a known code");
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{spelling}\""));
            assert_eq!(serde_json::from_str::<BridgeErrorCode>(&json).unwrap(), code);
        }
        let own: BridgeErrorCode = serde_json::from_str("\"rate_limited\"").unwrap();
        assert_eq!(own, BridgeErrorCode::Other("rate_limited".into()));
        assert_eq!(serde_json::to_string(&own).unwrap(), "\"rate_limited\"");
        assert_eq!(BridgeErrorCode::Other("tool_error".into()), BridgeErrorCode::ToolError);
    }

    #[test]
    fn effect_status_is_snake_case() {
        assert_eq!(serde_json::to_string(&EffectStatus::NotStarted).unwrap(), "\"not_started\"");
        assert_eq!(serde_json::from_str::<EffectStatus>("\"uncertain\"").unwrap(), EffectStatus::Uncertain);
    }
}
