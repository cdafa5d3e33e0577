//! Bridge requests from the guest, their settlements, and the journal of a run.
//!
//! Invariant: request ids are assigned in creation order inside the guest (which is single-threaded), so they are
//! deterministic; the journal records settlements in the order they were *delivered*, one round per quiescent
//! point. Replaying the rounds into a fresh engine running the same source reproduces the run exactly.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::call::{Args, BridgeCall};
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
        #[derive(Deserialize)]
        struct Wire {
            id: u32,
            method: BridgeMethod,
            args: serde_json::Value,
        }
        let Wire { id, method, args } = Wire::deserialize(d)?;
        let call = BridgeCall::decode(method, args)
            .map_err(|e| <D::Error as serde::de::Error>::custom(format_args!("bridge request {id}: {e}")))?;
        Ok(BridgeRequest { id, call })
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settlement {
    /// The request id.
    pub id: u32,
    /// Its outcome.
    #[serde(flatten)]
    pub value: SettlementValue,
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
