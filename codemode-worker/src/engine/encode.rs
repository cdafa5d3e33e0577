//! The encoder every value takes to leave the guest: tool arguments, `json()`/`text()` output and the final value.
//!
//! It has `JSON.stringify` semantics (`toJSON`, `undefined`/functions/symbols dropped in objects and `null` in
//! arrays, non-finite numbers to `null`, wrapper objects unwrapped) and builds the host's JSON value directly,
//! with no JSON text in between. Where `JSON.stringify` would throw, only the offending part is marked: a cycle
//! becomes `"[Circular]"`, a BigInt its decimal string, a value nested deeper than [`MAX_DEPTH`] `"[MaxDepth]"`, a
//! throwing getter, `toJSON` or proxy trap `"[Unserializable: …]"`, a promise a hint to await it. Lone surrogates
//! become U+FFFD, so the host never receives text it cannot parse.
//!
//! Invariant: the only error that escapes is an uncatchable engine error (the instruction budget, the recursion
//! limit) or, for a request, a string over [`STRING_CAP`]; guest exceptions never do.

use boa_engine::property::PropertyKey;
use boa_engine::{Context, JsBigInt, JsError, JsObject, JsString, JsValue, JsVariant, js_string};
use serde_json::{Map, Number, Value};

/// Deepest object nesting encoded; deeper values become `"[MaxDepth]"`.
pub const MAX_DEPTH: usize = 100;
/// Longest string, in UTF-16 code units, that crosses the bridge whole.
pub const STRING_CAP: usize = 1_000_000;
/// Most parts (values, items, properties) one encoded value may have.
pub const MAX_NODES: usize = 4_000_000;

const CIRCULAR: &str = "[Circular]";
const MAX_DEPTH_MARK: &str = "[MaxDepth]";
const UNAWAITED: &str = "[Unawaited Promise: await it before returning]";

/// Why a value could not be encoded at all.
#[derive(Debug)]
pub enum EncodeError {
    /// A request's arguments hold a string of this many code units, over [`STRING_CAP`].
    TooLong(usize),
    /// The value has more than [`MAX_NODES`] parts.
    TooLarge,
    /// An uncatchable engine error: the cell ends.
    Engine(JsError),
}

impl EncodeError {
    /// A message a model can act on, for the errors a guest can cause.
    pub fn message(&self) -> String {
        match self {
            EncodeError::TooLong(length) => format!(
                "code mode request arguments contain a string of {length} characters; the limit is {STRING_CAP} \
                 characters per string. Pass smaller arguments."
            ),
            EncodeError::TooLarge => format!(
                "code mode value has more than {MAX_NODES} parts (values, array items, properties) and cannot \
                 cross the bridge. Pass or return less data."
            ),
            EncodeError::Engine(e) => e.to_string(),
        }
    }
}

/// Intrinsics the encoder needs, captured when the context is built, before any guest code could replace them.
#[derive(Clone)]
pub struct Intrinsics {
    object_keys: JsObject,
    is_array: JsObject,
    error_prototype: JsObject,
    promise_prototype: JsObject,
}

impl Intrinsics {
    /// Captures the intrinsics of a fresh context.
    pub fn capture(context: &mut Context) -> Intrinsics {
        let constructors = context.intrinsics().constructors();
        let object = constructors.object().constructor();
        let array = constructors.array().constructor();
        let error_prototype = constructors.error().prototype();
        let promise_prototype = constructors.promise().prototype();
        let method = |object: &JsObject, name: &str, context: &mut Context| {
            object
                .get(JsString::from(name), context)
                .ok()
                .and_then(|v| v.as_object())
                .expect("a fresh context has its standard built-ins")
        };
        Intrinsics {
            object_keys: method(&object, "keys", context),
            is_array: method(&array, "isArray", context),
            error_prototype,
            promise_prototype,
        }
    }
}

/// Encodes `value`; `None` for a value JSON drops (`undefined`, a function, a symbol). A request (`for_request`)
/// fails on an over-long string where any other value keeps its prefix.
pub fn encode(
    value: &JsValue,
    for_request: bool,
    intrinsics: &Intrinsics,
    context: &mut Context,
) -> Result<Option<Value>, EncodeError> {
    let mut encoder = Encoder { context, intrinsics, for_request, path: Vec::new(), nodes: MAX_NODES };
    match encoder.value(value.clone(), Key::Name(&js_string!()), 0) {
        Ok(value) => Ok(value),
        Err(Fault::Fatal(e)) => Err(e),
        // Only a value whose very shape cannot be read (a proxy whose traps throw) gets here.
        Err(Fault::Thrown(e)) => Ok(Some(Value::String(unserializable(&e, encoder.context)))),
    }
}

enum Fault {
    /// The guest threw: the part being encoded is marked, its parent goes on.
    Thrown(JsError),
    /// Encoding stops.
    Fatal(EncodeError),
}

impl From<JsError> for Fault {
    fn from(error: JsError) -> Self {
        if error.as_engine().is_some() { Fault::Fatal(EncodeError::Engine(error)) } else { Fault::Thrown(error) }
    }
}

struct Encoder<'a> {
    context: &'a mut Context,
    intrinsics: &'a Intrinsics,
    for_request: bool,
    /// Objects being encoded, outermost first: meeting one again is a cycle.
    path: Vec<JsObject>,
    /// Parts this value may still have.
    nodes: usize,
}

impl Encoder<'_> {
    /// A child of an object or array: whatever the guest throws while it is encoded marks the child alone.
    fn child(&mut self, value: JsValue, key: Key<'_>, depth: usize) -> Result<Option<Value>, EncodeError> {
        match self.value(value, key, depth) {
            Ok(value) => Ok(value),
            Err(Fault::Fatal(e)) => Err(e),
            Err(Fault::Thrown(e)) => Ok(Some(Value::String(unserializable(&e, self.context)))),
        }
    }

    fn value(&mut self, mut value: JsValue, key: Key<'_>, depth: usize) -> Result<Option<Value>, Fault> {
        self.nodes = self.nodes.checked_sub(1).ok_or(Fault::Fatal(EncodeError::TooLarge))?;
        if value.is_object() || value.is_bigint() {
            let to_json = value.to_object(self.context)?.get(js_string!("toJSON"), self.context)?;
            if let Some(to_json) = to_json.as_callable() {
                value = to_json.call(&value, &[key.to_js().into()], self.context)?;
            }
        }
        let object = match value.variant() {
            JsVariant::Null => return Ok(Some(Value::Null)),
            JsVariant::Undefined | JsVariant::Symbol(_) => return Ok(None),
            JsVariant::Boolean(b) => return Ok(Some(Value::Bool(b))),
            JsVariant::Integer32(n) => return Ok(Some(Value::from(n))),
            JsVariant::Float64(n) => return Ok(Some(number(n))),
            JsVariant::String(s) => return self.string(&s).map(Some),
            JsVariant::BigInt(n) => return Ok(Some(Value::String(n.to_string()))),
            JsVariant::Object(object) => object,
        };
        if object.is_callable() {
            return Ok(None);
        }
        if self.inherits(&object, &self.intrinsics.promise_prototype) {
            return Ok(Some(Value::String(UNAWAITED.into())));
        }
        if let Some(primitive) = self.unwrap(&object)? {
            return self.value(primitive, Key::Name(&js_string!()), MAX_DEPTH);
        }
        if depth >= MAX_DEPTH {
            return Ok(Some(Value::String(MAX_DEPTH_MARK.into())));
        }
        if self.path.iter().any(|seen| JsObject::equals(seen, &object)) {
            return Ok(Some(Value::String(CIRCULAR.into())));
        }
        self.path.push(object.clone());
        let encoded = self.object(&object, depth);
        self.path.pop();
        encoded.map(Some)
    }

    fn string(&mut self, s: &JsString) -> Result<Value, Fault> {
        if s.len() <= STRING_CAP {
            return Ok(Value::String(s.to_std_string_lossy()));
        }
        if self.for_request {
            return Err(Fault::Fatal(EncodeError::TooLong(s.len())));
        }
        let mut prefix = s.get(..STRING_CAP).expect("the string is longer than the cap").to_std_string_lossy();
        prefix.push('…');
        Ok(Value::String(prefix))
    }

    /// The primitive a wrapper object stands for, as `JSON.stringify` reads it: a `Number` object (one with
    /// [[NumberData]]) through `ToNumber` and a `String` object through `ToString`, so `Symbol.toPrimitive`,
    /// `valueOf` and `toString` run in the spec's order; a `Boolean` or `BigInt` object by its slot, running
    /// nothing. An object that merely inherits from `Number.prototype` has no slot and is an ordinary object.
    fn unwrap(&mut self, object: &JsObject) -> Result<Option<JsValue>, Fault> {
        if object.is::<f64>() {
            return Ok(Some(JsValue::from(object.clone()).to_number(self.context)?.into()));
        }
        if object.is::<JsString>() {
            return Ok(Some(JsValue::from(object.clone()).to_string(self.context)?.into()));
        }
        if let Some(b) = object.downcast_ref::<bool>() {
            return Ok(Some((*b).into()));
        }
        if let Some(n) = object.downcast_ref::<JsBigInt>() {
            return Ok(Some(n.clone().into()));
        }
        Ok(None)
    }

    fn object(&mut self, object: &JsObject, depth: usize) -> Result<Value, Fault> {
        let is_array = object.is_array()
            || (!object.is::<boa_engine::builtins::object::OrdinaryObject>()
                && self
                    .intrinsics
                    .is_array
                    .call(&JsValue::undefined(), &[object.clone().into()], self.context)?
                    .to_boolean());
        if is_array {
            let length = object.get(js_string!("length"), self.context)?.to_length(self.context)?;
            if length > self.nodes as u64 {
                return Err(Fault::Fatal(EncodeError::TooLarge));
            }
            let mut items = Vec::with_capacity(length.min(1 << 16) as usize);
            for index in 0..length {
                let item = match object.get(index, self.context) {
                    Ok(item) => self.child(item, Key::Index(index), depth + 1).map_err(Fault::Fatal)?,
                    Err(e) => Some(Value::String(unserializable(&Fault::from(e).into_thrown()?, self.context))),
                };
                items.push(item.unwrap_or(Value::Null));
            }
            return Ok(Value::Array(items));
        }
        let mut out = Map::new();
        if self.inherits(object, &self.intrinsics.error_prototype) {
            for name in ["name", "message", "code"] {
                let field = object.get(JsString::from(name), self.context)?;
                if name == "code" && field.is_undefined() {
                    continue;
                }
                let key = JsString::from(name);
                if let Some(field) = self.child(field, Key::Name(&key), depth + 1).map_err(Fault::Fatal)? {
                    out.insert(name.to_owned(), field);
                }
            }
        }
        for key in self.enumerable_keys(object)? {
            let name = key_string(&key);
            let item = match object.get(key, self.context) {
                Ok(item) => self.child(item, Key::Name(&name), depth + 1).map_err(Fault::Fatal)?,
                Err(e) => Some(Value::String(unserializable(&Fault::from(e).into_thrown()?, self.context))),
            };
            if let Some(item) = item {
                out.insert(name.to_std_string_lossy(), item);
            }
        }
        Ok(Value::Object(out))
    }

    /// `Object.keys(object)`: read from the property map for ordinary objects, through the captured built-in
    /// otherwise (proxies, exotic objects).
    fn enumerable_keys(&mut self, object: &JsObject) -> Result<Vec<PropertyKey>, Fault> {
        let ordinary = object.is::<boa_engine::builtins::object::OrdinaryObject>()
            || object.is::<boa_engine::builtins::error::Error>();
        if ordinary {
            let mut keys = Vec::new();
            for key in object.own_property_keys(self.context)? {
                if matches!(key, PropertyKey::Symbol(_)) {
                    continue;
                }
                let enumerable = object.borrow().properties().get(&key).and_then(|d| d.enumerable()) == Some(true);
                if enumerable {
                    keys.push(key);
                }
            }
            return Ok(keys);
        }
        let keys = self.intrinsics.object_keys.call(&JsValue::undefined(), &[object.clone().into()], self.context)?;
        let keys = keys.as_object().expect("Object.keys returns an array");
        let length = keys.get(js_string!("length"), self.context)?.to_length(self.context)?;
        let mut out = Vec::with_capacity(length as usize);
        for index in 0..length {
            let key = keys.get(index, self.context)?;
            out.push(key.to_property_key(self.context)?);
        }
        Ok(out)
    }

    /// Whether `prototype` is on `object`'s prototype chain (without running proxy traps).
    fn inherits(&self, object: &JsObject, prototype: &JsObject) -> bool {
        let mut current = object.prototype();
        for _ in 0..10_000 {
            match current {
                Some(p) if JsObject::equals(&p, prototype) => return true,
                Some(p) => current = p.prototype(),
                None => return false,
            }
        }
        false
    }
}

impl Fault {
    /// The guest's exception, or the fatal error to pass on.
    fn into_thrown(self) -> Result<JsError, Fault> {
        match self {
            Fault::Thrown(e) => Ok(e),
            fatal => Err(fatal),
        }
    }
}

/// The key a value sits under, as `toJSON` receives it; an array index becomes a string only when asked.
#[derive(Clone, Copy)]
enum Key<'a> {
    Name(&'a JsString),
    Index(u64),
}

impl Key<'_> {
    fn to_js(self) -> JsString {
        match self {
            Key::Name(name) => name.clone(),
            Key::Index(index) => JsString::from(index.to_string()),
        }
    }
}

fn key_string(key: &PropertyKey) -> JsString {
    match key {
        PropertyKey::String(s) => s.clone(),
        PropertyKey::Index(i) => JsString::from(i.get().to_string()),
        PropertyKey::Symbol(_) => js_string!(),
    }
}

/// A JSON number for a finite double, `null` otherwise. Integral values within `i64` stay integers (`-0` becomes
/// `0`), as a JSON parser reads `JSON.stringify`'s digits.
fn number(n: f64) -> Value {
    if !n.is_finite() {
        return Value::Null;
    }
    if n.fract() == 0.0 && n.abs() < 9_223_372_036_854_775_808.0 {
        return Value::from(n as i64);
    }
    Number::from_f64(n).map_or(Value::Null, Value::Number)
}

/// `"[Unserializable: <message>]"` for what the guest threw.
fn unserializable(error: &JsError, context: &mut Context) -> String {
    format!("[Unserializable: {}]", describe_thrown(error, context))
}

/// The message of a thrown value: its `message` when that is a string, else its string form.
pub fn describe_thrown(error: &JsError, context: &mut Context) -> String {
    let Ok(thrown) = error.clone().into_opaque(context) else { return "unknown error".into() };
    if let Some(object) = thrown.as_object()
        && let Ok(message) = object.get(js_string!("message"), context)
        && let Some(message) = message.as_string()
    {
        return message.to_std_string_lossy();
    }
    match thrown.to_string(context) {
        Ok(s) => s.to_std_string_lossy(),
        Err(_) => "unknown error".into(),
    }
}
