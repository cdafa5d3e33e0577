//! Bridge requests from the guest, their settlements, and the journal of a run.
//!
//! Invariant: request ids are assigned in creation order inside the guest (which is single-threaded), so they are
//! deterministic; the journal records settlements in the order they were *delivered*, one round per quiescent
//! point. Replaying the rounds into a fresh engine running the same source reproduces the run exactly.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::call::{Args, BridgeCall, MalformedRequest, ToolArgsSeed};
use crate::code::BridgeErrorCode;

/// What a guest asks the host for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BridgeMethod {
    /// Call a catalog tool: `{tool, args}`.
    CallValue,
    /// Call an MCP tool or namespace method: `{server, tool, args}` or `{server, op, args}`.
    Namespace,
    /// `catalog.search`: `{query, limit}`.
    Search,
    /// A handle's `describe()`: `{tool}`.
    Describe,
    /// `API.read` / `API.list` of host-generated files: `{op, path}`.
    Api,
    /// A timer: `{ms}`.
    Sleep,
    /// `yield_control(reason)`: `{reason}`.
    Yield,
    /// `store(key, value)`: `{key, value}`.
    Store,
    /// `load(key)`: `{key}`.
    Load,
    /// `results.load(id)`: `{id}`.
    ResultLoad,
}

impl BridgeMethod {
    /// The wire spelling, e.g. `callValue`.
    pub fn as_str(self) -> &'static str {
        match self {
            BridgeMethod::CallValue => "callValue",
            BridgeMethod::Namespace => "namespace",
            BridgeMethod::Search => "search",
            BridgeMethod::Describe => "describe",
            BridgeMethod::Api => "api",
            BridgeMethod::Sleep => "sleep",
            BridgeMethod::Yield => "yield",
            BridgeMethod::Store => "store",
            BridgeMethod::Load => "load",
            BridgeMethod::ResultLoad => "resultLoad",
        }
    }

    /// Whether the request reaches an external tool (and so may have an effect).
    pub fn is_tool_call(self) -> bool {
        matches!(self, BridgeMethod::CallValue | BridgeMethod::Namespace)
    }
}

/// One request the guest made: its id and its typed call.
///
/// On the wire it is `{"id": 1, "method": "callValue", "args": {...}}`, the form untyped requests had; reading it
/// decodes `args` strictly (see [`BridgeCall::decode`]), so a malformed request fails to deserialize with a
/// message naming its id, method and field.
#[derive(Clone, Debug, PartialEq)]
pub struct BridgeRequest {
    /// Creation-order number inside the run, starting at 1.
    pub id: u32,
    /// What is asked, with its arguments.
    pub call: BridgeCall,
}

impl BridgeRequest {
    /// The method of the call.
    pub fn method(&self) -> BridgeMethod {
        self.call.method()
    }

    /// The digest replay compares a re-issued request against: SHA-256 of the method's wire name, a zero byte and
    /// the arguments' JSON (keys in the order the prelude builds them), cut to 64 bits.
    pub fn digest(&self) -> RequestDigest {
        struct Hash<'a>(&'a mut Sha256);
        impl std::io::Write for Hash<'_> {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.update(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut hasher = Sha256::new();
        hasher.update(self.method().as_str().as_bytes());
        hasher.update([0]);
        self.call.write_args(Hash(&mut hasher)).expect("bridge arguments always serialize");
        let bytes = hasher.finalize();
        RequestDigest(u64::from_be_bytes(bytes[..8].try_into().expect("a sha256 digest has 32 bytes")))
    }
}

impl Serialize for BridgeRequest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("BridgeRequest", 3)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("method", &self.method())?;
        st.serialize_field("args", &Args(&self.call))?;
        st.end()
    }
}

impl<'de> Deserialize<'de> for BridgeRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct("BridgeRequest", &["id", "method", "args"], RequestVisitor)
    }
}

/// A key of a request on the wire; other keys are skipped.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum RequestField {
    Id,
    Method,
    Args,
    #[serde(other)]
    Other,
}

/// Reads a request. A tool call's arguments that follow its id and method (the order the prelude writes) are
/// decoded straight into their types; any other arguments are read as a JSON value and decoded after.
struct RequestVisitor;

impl<'de> serde::de::Visitor<'de> for RequestVisitor {
    type Value = BridgeRequest;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a bridge request: an object with `id`, `method` and `args`")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<BridgeRequest, A::Error> {
        use serde::de::Error as _;
        let malformed = |id: u32, e: MalformedRequest| A::Error::custom(format_args!("bridge request {id}: {e}"));
        let (mut id, mut method, mut call, mut args) = (None, None, None, None::<serde_json::Value>);
        while let Some(key) = map.next_key::<RequestField>()? {
            match key {
                RequestField::Id => once(&mut id, "id", map.next_value::<u32>()?)?,
                RequestField::Method => once(&mut method, "method", map.next_value::<BridgeMethod>()?)?,
                RequestField::Args if call.is_some() || args.is_some() => {
                    return Err(A::Error::duplicate_field("args"));
                }
                RequestField::Args => match (id, method) {
                    (Some(id), Some(method)) if method.is_tool_call() => {
                        call = Some(map.next_value_seed(ToolArgsSeed(method))?.map_err(|e| malformed(id, e))?);
                    }
                    _ => args = Some(map.next_value()?),
                },
                RequestField::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let id = id.ok_or_else(|| A::Error::missing_field("id"))?;
        let method = method.ok_or_else(|| A::Error::missing_field("method"))?;
        let call = match (call, args) {
            (Some(call), _) => call,
            (None, Some(args)) => BridgeCall::decode(method, args).map_err(|e| malformed(id, e))?,
            (None, None) => return Err(A::Error::missing_field("args")),
        };
        Ok(BridgeRequest { id, call })
    }
}

/// Puts `value` in `slot`, refusing a field the object already gave.
fn once<E: serde::de::Error, T>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), E> {
    match slot.replace(value) {
        Some(_) => Err(E::duplicate_field(name)),
        None => Ok(()),
    }
}

/// A short digest of a request's method and arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RequestDigest(pub u64);

/// The outcome of a request as the guest receives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum SettlementValue {
    /// The promise resolves with `value`.
    Ok {
        /// The JSON-safe result.
        value: serde_json::Value,
    },
    /// The promise rejects with an `Error` carrying `code` and `message`.
    Err {
        /// The error code the guest sees as `.code`, e.g. `tool_error`.
        code: BridgeErrorCode,
        /// The message the guest sees.
        message: String,
    },
}

impl SettlementValue {
    /// A failure with `code` and `message`.
    pub fn err(code: impl Into<BridgeErrorCode>, message: impl Into<String>) -> Self {
        SettlementValue::Err { code: code.into(), message: message.into() }
    }
}

/// A settled request, ready to be delivered to the guest.
///
/// On the wire its outcome's fields sit beside its id: `{"id": 1, "kind": "ok", "value": ...}` or
/// `{"id": 1, "kind": "err", "code": ..., "message": ...}`, read in any order, other keys skipped.
#[derive(Clone, Debug, PartialEq)]
pub struct Settlement {
    /// The request id.
    pub id: u32,
    /// Its outcome.
    pub value: SettlementValue,
}

impl Serialize for Settlement {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(match self.value {
            SettlementValue::Ok { .. } => 3,
            SettlementValue::Err { .. } => 4,
        }))?;
        map.serialize_entry("id", &self.id)?;
        match &self.value {
            SettlementValue::Ok { value } => {
                map.serialize_entry("kind", "ok")?;
                map.serialize_entry("value", value)?;
            }
            SettlementValue::Err { code, message } => {
                map.serialize_entry("kind", "err")?;
                map.serialize_entry("code", code)?;
                map.serialize_entry("message", message)?;
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Settlement {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SettlementVisitor)
    }
}

/// A key of a settlement on the wire.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum SettlementField {
    Id,
    Kind,
    Value,
    Code,
    Message,
    #[serde(other)]
    Other,
}

/// The `kind` of a settlement.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum SettlementKind {
    Ok,
    Err,
}

struct SettlementVisitor;

impl<'de> serde::de::Visitor<'de> for SettlementVisitor {
    type Value = Settlement;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a settlement: an object with `id`, `kind` and its outcome's fields")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Settlement, A::Error> {
        use serde::de::Error as _;
        let (mut id, mut kind, mut value, mut code, mut message) = (None, None, None, None, None);
        while let Some(key) = map.next_key::<SettlementField>()? {
            match key {
                SettlementField::Id => once(&mut id, "id", map.next_value::<u32>()?)?,
                SettlementField::Kind => once(&mut kind, "kind", map.next_value::<SettlementKind>()?)?,
                SettlementField::Value => once(&mut value, "value", map.next_value::<serde_json::Value>()?)?,
                SettlementField::Code => once(&mut code, "code", map.next_value::<BridgeErrorCode>()?)?,
                SettlementField::Message => once(&mut message, "message", map.next_value::<String>()?)?,
                SettlementField::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let id = id.ok_or_else(|| A::Error::missing_field("id"))?;
        let value = match kind.ok_or_else(|| A::Error::missing_field("kind"))? {
            SettlementKind::Ok => SettlementValue::Ok { value: value.ok_or_else(|| A::Error::missing_field("value"))? },
            SettlementKind::Err => SettlementValue::Err {
                code: code.ok_or_else(|| A::Error::missing_field("code"))?,
                message: message.ok_or_else(|| A::Error::missing_field("message"))?,
            },
        };
        Ok(Settlement { id, value })
    }
}

/// Settlements delivered together at one quiescent point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// The virtual clock (epoch milliseconds) the guest sees from this delivery on.
    pub clock_ms: i64,
    /// What was delivered, in delivery order.
    pub settlements: Vec<Settlement>,
}

/// The replayable history of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Journal {
    /// Seed of the run's `Math.random`.
    pub seed: u64,
    /// The virtual clock when the run started.
    pub start_clock_ms: i64,
    /// Digests of every request issued so far, in creation order (index = id - 1).
    pub requests: Vec<RequestDigest>,
    /// Delivery rounds, in order.
    pub rounds: Vec<Round>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The derived form settlements had, with the outcome flattened beside the id.
    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Flattened {
        id: u32,
        #[serde(flatten)]
        value: SettlementValue,
    }

    #[test]
    fn settlements_keep_the_flattened_wire_form() {
        let settlements = [
            Settlement { id: 1, value: SettlementValue::Ok { value: json!({"ok": true, "n": [1, null]}) } },
            Settlement { id: 2, value: SettlementValue::Ok { value: serde_json::Value::Null } },
            Settlement { id: 3, value: SettlementValue::err(BridgeErrorCode::ToolError, "it broke") },
        ];
        for settlement in settlements {
            let line = serde_json::to_string(&settlement).unwrap();
            let flattened = Flattened { id: settlement.id, value: settlement.value.clone() };
            assert_eq!(line, serde_json::to_string(&flattened).unwrap());
            assert_eq!(serde_json::from_str::<Settlement>(&line).unwrap(), settlement, "{line}");
            assert_eq!(serde_json::from_value::<Settlement>(json!(flattened)).unwrap(), settlement, "{line}");
        }
        let reordered = r#"{"message": "m", "extra": [1], "code": "tool_error", "kind": "err", "id": 9}"#;
        assert_eq!(
            serde_json::from_str::<Settlement>(reordered).unwrap(),
            Settlement { id: 9, value: SettlementValue::err(BridgeErrorCode::ToolError, "m") }
        );
        let missing = serde_json::from_str::<Settlement>(r#"{"id": 1, "kind": "ok"}"#).unwrap_err();
        assert!(missing.to_string().contains("missing field `value`"), "{missing}");
        let twice = serde_json::from_str::<Settlement>(r#"{"id": 1, "id": 2, "kind": "ok", "value": 1}"#).unwrap_err();
        assert!(twice.to_string().contains("duplicate field `id`"), "{twice}");
    }
}
