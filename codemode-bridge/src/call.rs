//! The typed arguments of each bridge method, and their strict decoding from the JSON the guest's prelude sends.
//!
//! Not the request envelope (id, wire form, digest: `request.rs`). Invariant: decoding accepts exactly the shapes
//! the prelude builds and refuses anything else with a [`MalformedRequest`] naming the method and the field; and
//! serializing a decoded call gives back the same JSON, keys in the same order, so the journal digest of a request
//! is what it was when requests were untyped.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::request::BridgeMethod;

/// A request the guest made, with its typed arguments.
#[derive(Clone, Debug, PartialEq)]
pub enum BridgeCall {
    /// Call a catalog tool.
    CallValue(CallValueArgs),
    /// Call an MCP tool or run an MCP namespace operation.
    Namespace(NamespaceArgs),
    /// `catalog.search(query, {limit})` or `catalog.all()`.
    Search(SearchArgs),
    /// A handle's `describe()` or `catalog.describe(name)`.
    Describe(DescribeArgs),
    /// `API.list`, `API.read` or an MCP server's `api()` file, served by the host.
    Api(ApiArgs),
    /// A timer.
    Sleep(SleepArgs),
    /// `yield_control(reason)`.
    Yield(YieldArgs),
    /// `store(key, value)`.
    Store(StoreArgs),
    /// `load(key)`.
    Load(LoadArgs),
    /// `results.load(id)`.
    ResultLoad(ResultLoadArgs),
}

/// `{tool, args}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallValueArgs {
    /// The tool's callable name.
    pub tool: String,
    /// The guest's arguments; `None` when it passed a value JSON drops (a function, a symbol), which the host reads
    /// as no arguments, as the prelude reads `undefined`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// What a namespace request names: an MCP tool or a namespace operation.
#[derive(Clone, Debug, PartialEq)]
pub enum NamespaceTarget {
    /// `MCP.<server>.<tool>(args)`: the tool's own name on its server.
    Tool(String),
    /// `MCP.<server>.resources.list(args)` and the like: the operation, e.g. `resources.list`.
    Op(String),
}

/// `{server, tool, args}` or `{server, op, args}`.
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceArgs {
    /// The MCP server's own name.
    pub server: String,
    /// The tool or operation.
    pub target: NamespaceTarget,
    /// The guest's arguments; `None` as in [`CallValueArgs::args`].
    pub args: Option<Value>,
}

/// `{query, limit}` or `{all: true}`.
#[derive(Clone, Debug, PartialEq)]
pub enum SearchArgs {
    /// `catalog.search(query, {limit})`.
    Query {
        /// The query text.
        query: String,
        /// The guest's `limit` as given, validated by the catalog; `None` when it gave none (`null`, or a value JSON
        /// drops).
        limit: Option<Value>,
    },
    /// `catalog.all()`.
    All,
}

/// `{tool}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DescribeArgs {
    /// The callable name to describe.
    pub tool: String,
}

/// `{op: "list", path}`, `{op: "read", path}` or `{op: "mcpApi", server, tool, schema}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum ApiArgs {
    /// `API.list(prefix)`: the host's files under `path`.
    List {
        /// The prefix.
        path: String,
    },
    /// `API.read(path)`.
    Read {
        /// The file's path.
        path: String,
    },
    /// `MCP.<server>.$api(tool?, {schema})`: the server's API header, narrowed to `tool` when given.
    McpApi {
        /// The MCP server's own name.
        server: String,
        /// The tool the guest asked about, or `None` for the whole server.
        tool: Option<String>,
        /// Whether the header carries the input JSON Schema.
        schema: bool,
    },
}

/// `{ms}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SleepArgs {
    /// The delay in milliseconds (the prelude sends `0` for a delay that is not a positive number below 2^63).
    pub ms: u64,
}

/// `{reason}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct YieldArgs {
    /// The reason the guest gave, `None` for none.
    pub reason: Option<String>,
}

/// `{key, value}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoreArgs {
    /// The key.
    pub key: String,
    /// The value; `None` when the guest stored a value JSON drops (`undefined`, a function), which is stored as
    /// `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// `{key}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoadArgs {
    /// The key.
    pub key: String,
}

/// `{id}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResultLoadArgs {
    /// The saved result's id.
    pub id: String,
}

/// A request whose arguments are not the shape its method takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed `{}` request: {problem}", method.as_str())]
pub struct MalformedRequest {
    /// The request's method.
    pub method: BridgeMethod,
    /// What is wrong, naming the field.
    pub problem: String,
}

impl BridgeCall {
    /// The method this call is.
    pub fn method(&self) -> BridgeMethod {
        match self {
            BridgeCall::CallValue(_) => BridgeMethod::CallValue,
            BridgeCall::Namespace(_) => BridgeMethod::Namespace,
            BridgeCall::Search(_) => BridgeMethod::Search,
            BridgeCall::Describe(_) => BridgeMethod::Describe,
            BridgeCall::Api(_) => BridgeMethod::Api,
            BridgeCall::Sleep(_) => BridgeMethod::Sleep,
            BridgeCall::Yield(_) => BridgeMethod::Yield,
            BridgeCall::Store(_) => BridgeMethod::Store,
            BridgeCall::Load(_) => BridgeMethod::Load,
            BridgeCall::ResultLoad(_) => BridgeMethod::ResultLoad,
        }
    }

    /// Decodes `args`, the JSON the prelude sent for `method`.
    ///
    /// # Errors
    ///
    /// [`MalformedRequest`] when `args` is not an object, lacks a field, has a field of the wrong type or one the
    /// method does not take.
    pub fn decode(method: BridgeMethod, args: Value) -> Result<BridgeCall, MalformedRequest> {
        let Value::Object(map) = args else {
            return Err(MalformedRequest {
                method,
                problem: format!("arguments must be an object, not {}", kind(&args)),
            });
        };
        let mut f = Fields { method, map };
        let call = match method {
            BridgeMethod::CallValue => {
                BridgeCall::CallValue(CallValueArgs { tool: f.string("tool")?, args: f.optional("args") })
            }
            BridgeMethod::Namespace => {
                let server = f.string("server")?;
                let target = match (f.map.contains_key("tool"), f.map.contains_key("op")) {
                    (true, false) => NamespaceTarget::Tool(f.string("tool")?),
                    (false, true) => NamespaceTarget::Op(f.string("op")?),
                    (true, true) => return Err(f.problem("fields `tool` and `op` exclude each other")),
                    (false, false) => return Err(f.problem("field `tool` or `op` is missing")),
                };
                BridgeCall::Namespace(NamespaceArgs { server, target, args: f.optional("args") })
            }
            BridgeMethod::Search => match f.map.get("all") {
                Some(Value::Bool(true)) => {
                    f.map.remove("all");
                    BridgeCall::Search(SearchArgs::All)
                }
                Some(other) => return Err(f.problem(format!("field `all` must be `true`, not {}", kind(other)))),
                None => {
                    let query = f.string("query")?;
                    let limit = f.optional("limit").filter(|v| !v.is_null());
                    BridgeCall::Search(SearchArgs::Query { query, limit })
                }
            },
            BridgeMethod::Describe => BridgeCall::Describe(DescribeArgs { tool: f.string("tool")? }),
            BridgeMethod::Api => {
                let op = f.string("op")?;
                BridgeCall::Api(match op.as_str() {
                    "list" => ApiArgs::List { path: f.string("path")? },
                    "read" => ApiArgs::Read { path: f.string("path")? },
                    "mcpApi" => ApiArgs::McpApi {
                        server: f.string("server")?,
                        tool: f.nullable_string("tool")?,
                        schema: f.boolean("schema")?,
                    },
                    _ => {
                        return Err(
                            f.problem(format!("field `op` must be \"list\", \"read\" or \"mcpApi\", not {op:?}"))
                        );
                    }
                })
            }
            BridgeMethod::Sleep => BridgeCall::Sleep(SleepArgs { ms: f.millis("ms")? }),
            BridgeMethod::Yield => BridgeCall::Yield(YieldArgs { reason: f.nullable_string("reason")? }),
            BridgeMethod::Store => BridgeCall::Store(StoreArgs { key: f.string("key")?, value: f.optional("value") }),
            BridgeMethod::Load => BridgeCall::Load(LoadArgs { key: f.string("key")? }),
            BridgeMethod::ResultLoad => BridgeCall::ResultLoad(ResultLoadArgs { id: f.string("id")? }),
        };
        f.finish()?;
        Ok(call)
    }

    /// Writes the call's arguments as JSON, in the order the prelude builds them.
    pub(crate) fn write_args<W: std::io::Write>(&self, writer: W) -> serde_json::Result<()> {
        serde_json::to_writer(writer, &Args(self))
    }
}

/// The arguments of a call, serializable: the wire's `args`.
pub(crate) struct Args<'a>(pub(crate) &'a BridgeCall);

impl Serialize for Args<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self.0 {
            BridgeCall::CallValue(a) => a.serialize(s),
            BridgeCall::Namespace(a) => {
                let mut map = s.serialize_map(None)?;
                map.serialize_entry("server", &a.server)?;
                match &a.target {
                    NamespaceTarget::Tool(tool) => map.serialize_entry("tool", tool)?,
                    NamespaceTarget::Op(op) => map.serialize_entry("op", op)?,
                }
                if let Some(args) = &a.args {
                    map.serialize_entry("args", args)?;
                }
                map.end()
            }
            BridgeCall::Search(SearchArgs::Query { query, limit }) => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("query", query)?;
                map.serialize_entry("limit", limit)?;
                map.end()
            }
            BridgeCall::Search(SearchArgs::All) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("all", &true)?;
                map.end()
            }
            BridgeCall::Describe(a) => a.serialize(s),
            BridgeCall::Api(a) => a.serialize(s),
            BridgeCall::Sleep(a) => a.serialize(s),
            BridgeCall::Yield(a) => a.serialize(s),
            BridgeCall::Store(a) => a.serialize(s),
            BridgeCall::Load(a) => a.serialize(s),
            BridgeCall::ResultLoad(a) => a.serialize(s),
        }
    }
}

/// The fields of one request's arguments, taken out one by one; what is left at the end is refused.
struct Fields {
    method: BridgeMethod,
    map: Map<String, Value>,
}

impl Fields {
    fn problem(&self, problem: impl Into<String>) -> MalformedRequest {
        MalformedRequest { method: self.method, problem: problem.into() }
    }

    fn required(&mut self, name: &str) -> Result<Value, MalformedRequest> {
        // `shift_remove` keeps the order of the rest, which only `finish` reads.
        self.map.shift_remove(name).ok_or_else(|| self.problem(format!("field `{name}` is missing")))
    }

    fn string(&mut self, name: &str) -> Result<String, MalformedRequest> {
        match self.required(name)? {
            Value::String(s) => Ok(s),
            other => Err(self.problem(format!("field `{name}` must be a string, not {}", kind(&other)))),
        }
    }

    fn nullable_string(&mut self, name: &str) -> Result<Option<String>, MalformedRequest> {
        match self.required(name)? {
            Value::String(s) => Ok(Some(s)),
            Value::Null => Ok(None),
            other => Err(self.problem(format!("field `{name}` must be a string or null, not {}", kind(&other)))),
        }
    }

    fn boolean(&mut self, name: &str) -> Result<bool, MalformedRequest> {
        match self.required(name)? {
            Value::Bool(b) => Ok(b),
            other => Err(self.problem(format!("field `{name}` must be a boolean, not {}", kind(&other)))),
        }
    }

    fn millis(&mut self, name: &str) -> Result<u64, MalformedRequest> {
        let value = self.required(name)?;
        value.as_u64().ok_or_else(|| {
            self.problem(format!("field `{name}` must be a whole number of milliseconds from 0 to 2^64-1, not {value}"))
        })
    }

    /// A field the prelude leaves out when the guest's value is one JSON drops.
    fn optional(&mut self, name: &str) -> Option<Value> {
        self.map.shift_remove(name)
    }

    fn finish(self) -> Result<(), MalformedRequest> {
        match self.map.keys().next() {
            Some(extra) => Err(self.problem(format!("field `{extra}` is not one it takes"))),
            None => Ok(()),
        }
    }
}

/// Reads the arguments of a `callValue` or `namespace` request from the wire into their types, without building a
/// JSON object of them first: the same checks as [`BridgeCall::decode`], in its order and with its messages.
pub(crate) struct ToolArgsSeed(pub(crate) BridgeMethod);

impl<'de> serde::de::DeserializeSeed<'de> for ToolArgsSeed {
    type Value = Result<BridgeCall, MalformedRequest>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl ToolArgsSeed {
    fn not_an_object(&self, kind: &str) -> Result<BridgeCall, MalformedRequest> {
        Err(MalformedRequest { method: self.0, problem: format!("arguments must be an object, not {kind}") })
    }
}

impl<'de> serde::de::Visitor<'de> for ToolArgsSeed {
    type Value = Result<BridgeCall, MalformedRequest>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the arguments of a `{}` request", self.0.as_str())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // The fields it takes, by the slot they go to; a repeated key keeps its last value, as a JSON object does.
        let names: &[&str] = match self.0 {
            BridgeMethod::Namespace => &["server", "tool", "op", "args"],
            _ => &["tool", "args"],
        };
        let mut slots: [Option<Value>; 4] = Default::default();
        let mut extra: Option<String> = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match names.iter().position(|n| *n == key) {
                Some(slot) => slots[slot] = Some(map.next_value()?),
                None => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    extra.get_or_insert_with(|| key.into_owned());
                }
            }
        }
        let mut f = Slots { method: self.0, names, slots };
        let call = match self.0 {
            BridgeMethod::Namespace => f.namespace(),
            _ => f.call_value(),
        };
        Ok(match (call, extra) {
            (Ok(_), Some(extra)) => Err(f.problem(format!("field `{extra}` is not one it takes"))),
            (call, _) => call,
        })
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(self.not_an_object("an array"))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(self.not_an_object("null"))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(self.not_an_object("a boolean"))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(self.not_an_object("a number"))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(self.not_an_object("a number"))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(self.not_an_object("a number"))
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(self.not_an_object("a string"))
    }
}

/// The fields [`ToolArgsSeed`] read, by slot.
struct Slots<'a> {
    method: BridgeMethod,
    names: &'a [&'a str],
    slots: [Option<Value>; 4],
}

impl Slots<'_> {
    fn problem(&self, problem: impl Into<String>) -> MalformedRequest {
        MalformedRequest { method: self.method, problem: problem.into() }
    }

    fn slot(&self, name: &str) -> usize {
        self.names.iter().position(|n| *n == name).expect("a field the method takes")
    }

    fn has(&self, name: &str) -> bool {
        self.slots[self.slot(name)].is_some()
    }

    fn take(&mut self, name: &str) -> Option<Value> {
        self.slots[self.slot(name)].take()
    }

    /// `{tool, args}`, checked as [`BridgeCall::decode`] checks it.
    fn call_value(&mut self) -> Result<BridgeCall, MalformedRequest> {
        let tool = self.string("tool")?;
        Ok(BridgeCall::CallValue(CallValueArgs { tool, args: self.take("args") }))
    }

    /// `{server, tool, args}` or `{server, op, args}`, checked as [`BridgeCall::decode`] checks it.
    fn namespace(&mut self) -> Result<BridgeCall, MalformedRequest> {
        let server = self.string("server")?;
        let target = match (self.has("tool"), self.has("op")) {
            (true, false) => NamespaceTarget::Tool(self.string("tool")?),
            (false, true) => NamespaceTarget::Op(self.string("op")?),
            (true, true) => return Err(self.problem("fields `tool` and `op` exclude each other")),
            (false, false) => return Err(self.problem("field `tool` or `op` is missing")),
        };
        Ok(BridgeCall::Namespace(NamespaceArgs { server, target, args: self.take("args") }))
    }

    fn string(&mut self, name: &str) -> Result<String, MalformedRequest> {
        match self.take(name) {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(self.problem(format!("field `{name}` must be a string, not {}", kind(&other)))),
            None => Err(self.problem(format!("field `{name}` is missing"))),
        }
    }
}

/// What kind of JSON value `value` is, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sha2::{Digest, Sha256};

    use super::*;
    use crate::request::{BridgeRequest, RequestDigest};

    /// The digest as it was computed when `args` was an untyped JSON value.
    fn untyped_digest(method: BridgeMethod, args: &Value) -> RequestDigest {
        let mut hasher = Sha256::new();
        hasher.update(method.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(serde_json::to_vec(args).unwrap());
        RequestDigest(u64::from_be_bytes(hasher.finalize()[..8].try_into().unwrap()))
    }

    /// Every shape the prelude builds, with the keys in the prelude's order.
    fn prelude_shapes() -> Vec<(BridgeMethod, Value)> {
        use BridgeMethod::*;
        vec![
            (CallValue, json!({"tool": "get_weather", "args": {"city": "Oslo", "days": [1, 2.5, null]}})),
            (CallValue, json!({"tool": "get_weather", "args": {}})),
            (CallValue, json!({"tool": "get_weather", "args": 7})),
            (CallValue, json!({"tool": "get_weather"})),
            (Namespace, json!({"server": "docs", "tool": "fetch", "args": {"url": "x"}})),
            (Namespace, json!({"server": "docs", "op": "resources.list", "args": {}})),
            (Search, json!({"query": "weather", "limit": null})),
            (Search, json!({"query": "weather", "limit": 3})),
            (Search, json!({"query": "weather", "limit": "many"})),
            (Search, json!({"all": true})),
            (Describe, json!({"tool": "get_weather"})),
            (Api, json!({"op": "list", "path": ""})),
            (Api, json!({"op": "read", "path": "tools/a.d.ts"})),
            (Api, json!({"op": "mcpApi", "server": "docs", "tool": null, "schema": false})),
            (Api, json!({"op": "mcpApi", "server": "docs", "tool": "fetch", "schema": true})),
            (Sleep, json!({"ms": 0})),
            (Sleep, json!({"ms": 9_007_199_254_740_993_u64})),
            (Yield, json!({"reason": null})),
            (Yield, json!({"reason": "waiting for approval"})),
            (Store, json!({"key": "k", "value": {"b": 1, "a": [true]}})),
            (Store, json!({"key": "k", "value": null})),
            (Store, json!({"key": "k"})),
            (Load, json!({"key": "k"})),
            (ResultLoad, json!({"id": "r1"})),
        ]
    }

    #[test]
    fn prelude_shapes_round_trip_with_their_untyped_digest() {
        for (id, (method, args)) in prelude_shapes().into_iter().enumerate() {
            let wire = json!({"id": id + 1, "method": method, "args": args});
            let request: BridgeRequest = serde_json::from_value(wire.clone()).unwrap();
            assert_eq!(request.method(), method);
            assert_eq!(serde_json::to_value(&request).unwrap(), wire, "{method:?} re-serializes as it came");
            assert_eq!(serde_json::to_string(&request).unwrap(), wire.to_string(), "keys keep their order");
            assert_eq!(request.digest(), untyped_digest(method, &args), "{wire}");
        }
    }

    #[test]
    fn decoded_fields_are_typed() {
        let call = |method, args| BridgeCall::decode(method, args).unwrap();
        assert_eq!(
            call(BridgeMethod::Namespace, json!({"server": "docs", "op": "prompts.get", "args": {"name": "a"}})),
            BridgeCall::Namespace(NamespaceArgs {
                server: "docs".into(),
                target: NamespaceTarget::Op("prompts.get".into()),
                args: Some(json!({"name": "a"})),
            })
        );
        assert_eq!(
            call(BridgeMethod::Search, json!({"query": "q", "limit": null})),
            BridgeCall::Search(SearchArgs::Query { query: "q".into(), limit: None })
        );
        assert_eq!(call(BridgeMethod::Sleep, json!({"ms": 40})), BridgeCall::Sleep(SleepArgs { ms: 40 }));
        assert_eq!(
            call(BridgeMethod::Store, json!({"key": "k"})),
            BridgeCall::Store(StoreArgs { key: "k".into(), value: None })
        );
    }

    #[test]
    fn malformed_requests_are_refused_naming_method_and_field() {
        use BridgeMethod::*;
        let table: &[(BridgeMethod, Value, &str)] = &[
            (
                CallValue,
                json!(["get_weather"]),
                "malformed `callValue` request: arguments must be an object, not an array",
            ),
            (CallValue, json!({"args": {}}), "malformed `callValue` request: field `tool` is missing"),
            (
                CallValue,
                json!({"tool": 3, "args": {}}),
                "malformed `callValue` request: field `tool` must be a string, not a number",
            ),
            (
                CallValue,
                json!({"tool": "t", "args": {}, "server": "s"}),
                "malformed `callValue` request: field `server` is not one it takes",
            ),
            (Namespace, json!({"tool": "t", "args": {}}), "malformed `namespace` request: field `server` is missing"),
            (
                Namespace,
                json!({"server": "s", "args": {}}),
                "malformed `namespace` request: field `tool` or `op` is missing",
            ),
            (
                Namespace,
                json!({"server": "s", "tool": "t", "op": "o"}),
                "malformed `namespace` request: fields `tool` and `op` exclude each other",
            ),
            (
                Namespace,
                json!({"server": "s", "op": null}),
                "malformed `namespace` request: field `op` must be a string, not null",
            ),
            (Search, json!({"limit": 3}), "malformed `search` request: field `query` is missing"),
            (Search, json!({"all": false}), "malformed `search` request: field `all` must be `true`, not a boolean"),
            (
                Search,
                json!({"all": true, "query": "q"}),
                "malformed `search` request: field `query` is not one it takes",
            ),
            (Describe, json!({}), "malformed `describe` request: field `tool` is missing"),
            (Api, json!({"path": "a"}), "malformed `api` request: field `op` is missing"),
            (
                Api,
                json!({"op": "write", "path": "a"}),
                "malformed `api` request: field `op` must be \"list\", \"read\" or \"mcpApi\", not \"write\"",
            ),
            (Api, json!({"op": "read"}), "malformed `api` request: field `path` is missing"),
            (
                Api,
                json!({"op": "mcpApi", "server": "s", "tool": 1, "schema": false}),
                "malformed `api` request: field `tool` must be a string or null, not a number",
            ),
            (
                Api,
                json!({"op": "mcpApi", "server": "s", "tool": null, "schema": "yes"}),
                "malformed `api` request: field `schema` must be a boolean, not a string",
            ),
            (Sleep, json!({}), "malformed `sleep` request: field `ms` is missing"),
            (
                Sleep,
                json!({"ms": -1}),
                "malformed `sleep` request: field `ms` must be a whole number of milliseconds from 0 to 2^64-1, not -1",
            ),
            (
                Sleep,
                json!({"ms": 1.5}),
                "malformed `sleep` request: field `ms` must be a whole number of milliseconds from 0 to 2^64-1, not 1.5",
            ),
            (
                Sleep,
                json!({"ms": 1e300}),
                "malformed `sleep` request: field `ms` must be a whole number of milliseconds from 0 to 2^64-1, not 1e+300",
            ),
            (
                Sleep,
                json!({"ms": "5"}),
                "malformed `sleep` request: field `ms` must be a whole number of milliseconds from 0 to 2^64-1, not \"5\"",
            ),
            (Yield, json!({}), "malformed `yield` request: field `reason` is missing"),
            (
                Yield,
                json!({"reason": false}),
                "malformed `yield` request: field `reason` must be a string or null, not a boolean",
            ),
            (Store, json!({"value": 1}), "malformed `store` request: field `key` is missing"),
            (Load, json!({"key": ["k"]}), "malformed `load` request: field `key` must be a string, not an array"),
            (ResultLoad, json!({"id": 5}), "malformed `resultLoad` request: field `id` must be a string, not a number"),
            (ResultLoad, Value::Null, "malformed `resultLoad` request: arguments must be an object, not null"),
        ];
        for (method, args, expected) in table {
            let error = BridgeCall::decode(*method, args.clone()).expect_err(expected);
            assert_eq!(error.to_string(), *expected);
            // On the wire, a tool call's arguments are read straight into their types: the same message.
            let wire = json!({"id": 7, "method": method, "args": args}).to_string();
            let error = serde_json::from_str::<BridgeRequest>(&wire).expect_err(expected).to_string();
            assert_eq!(error, format!("bridge request 7: {expected} at line 1 column {}", wire.len()), "{wire}");
        }
    }

    #[test]
    fn tool_calls_read_from_the_wire_as_decode_reads_them() {
        let cases = [
            json!({"tool": "t", "args": {"a": [1, {"b": null}]}}),
            json!({"args": 3, "tool": "t"}),
            json!({"tool": "t", "tool": "u"}),
            json!({"server": "s", "op": "resources.list"}),
            json!({"args": {}, "server": "s", "tool": "t"}),
            json!({"server": "s", "tool": "t", "extra": 1, "other": 2}),
            json!("not an object"),
            json!(true),
            json!(1.5),
        ];
        for method in [BridgeMethod::CallValue, BridgeMethod::Namespace] {
            for args in &cases {
                let wire = json!({"id": 2, "method": method, "args": args}).to_string();
                let read = serde_json::from_str::<BridgeRequest>(&wire).map(|r| r.call).map_err(|e| e.to_string());
                let decoded = BridgeCall::decode(method, args.clone())
                    .map_err(|e| format!("bridge request 2: {e} at line 1 column {}", wire.len()));
                assert_eq!(read, decoded, "{wire}");
            }
        }
        // Arguments before the method are read as a value and decoded after, to the same call.
        let late = r#"{"args": {"tool": "t", "args": {}}, "id": 1, "method": "callValue"}"#;
        let request = serde_json::from_str::<BridgeRequest>(late).unwrap();
        assert_eq!(
            request.call,
            BridgeCall::decode(BridgeMethod::CallValue, json!({"tool": "t", "args": {}})).unwrap()
        );
        let twice = r#"{"id": 1, "method": "callValue", "args": {"tool": "t"}, "args": {"tool": "u"}}"#;
        assert!(
            serde_json::from_str::<BridgeRequest>(twice).unwrap_err().to_string().contains("duplicate field `args`")
        );
    }

    #[test]
    fn a_malformed_request_on_the_wire_fails_to_deserialize_naming_its_id() {
        let wire = json!({"id": 4, "method": "sleep", "args": {"ms": "soon"}});
        let error = serde_json::from_value::<BridgeRequest>(wire).unwrap_err().to_string();
        assert_eq!(
            error,
            "bridge request 4: malformed `sleep` request: field `ms` must be a whole number of milliseconds from 0 to \
             2^64-1, not \"soon\""
        );
        let unknown = json!({"id": 1, "method": "exec", "args": {}});
        assert!(
            serde_json::from_value::<BridgeRequest>(unknown)
                .unwrap_err()
                .to_string()
                .contains("unknown variant `exec`")
        );
    }
}
