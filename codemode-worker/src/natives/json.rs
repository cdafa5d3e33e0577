//! A native `JSON.parse` that builds JS values straight from the text's code units, installed per context.
//! Boa 0.22 parses the text twice (serde_json to validate, then its own script parser and bytecode compiler to
//! build the value), caps nesting at about 127 levels and rejects lone surrogates. Not a new JSON dialect: this
//! accepts exactly ECMA-404 text and builds what the spec's evaluation would (own data properties in text order,
//! duplicate keys last-wins at the first key's position, `__proto__` as a plain key). A reviver walks the result
//! on a heap stack (`InternalizeJSONProperty`), so it sees what the parser accepts at any depth. Host JSON values
//! (tool results) are built the same way by `from_serde`.

use std::collections::HashMap;

use boa_engine::{
    Context, JsArgs, JsNativeError, JsObject, JsResult, JsString, JsValue,
    builtins::object::OrdinaryObject,
    js_string,
    native_function::NativeFunction,
    object::builtins::JsArray,
    property::{PropertyDescriptor, PropertyKey},
    string::{JsStr, JsStrVariant},
};
use boa_gc::{Finalize, Trace};

/// Built-ins the reviver walk needs, captured when `JSON.parse` is installed, before guest code could replace them.
#[derive(Trace, Finalize)]
struct Revive {
    /// `Object.keys`: `EnumerableOwnProperties(O, key)`.
    object_keys: JsObject,
    /// `Array.isArray`: `IsArray`, which sees through proxies and throws on a revoked one.
    is_array: JsObject,
    /// `Reflect.deleteProperty`: `[[Delete]]`, whose `false` the walk ignores as the spec does.
    delete_property: JsObject,
}

/// Replaces `JSON.parse` of `context` with the native parser, revivers included.
///
/// # Errors
///
/// Fails only if a captured built-in cannot be read or `JSON.parse` redefined, which a fresh context never does.
pub(crate) fn install(context: &mut Context) -> JsResult<()> {
    let json = context.intrinsics().objects().json();
    let constructors = context.intrinsics().constructors();
    let (object, array) = (constructors.object().constructor(), constructors.array().constructor());
    let reflect = context.intrinsics().objects().reflect();
    let mut method = |target: &JsObject, name: &str| -> JsResult<JsObject> {
        target.get(JsString::from(name), context)?.as_callable().ok_or_else(|| {
            JsNativeError::typ().with_message(format!("{name} is not a function in a fresh context")).into()
        })
    };
    let revive = Revive {
        object_keys: method(&object, "keys")?,
        is_array: method(&array, "isArray")?,
        delete_property: method(&reflect, "deleteProperty")?,
    };
    let function = NativeFunction::from_copy_closure_with_captures(parse, revive);
    super::define_method(&json, js_string!("parse").into(), js_string!("parse"), 2, function, context)?;
    Ok(())
}

/// `JSON.parse(text, reviver)`.
fn parse(_: &JsValue, args: &[JsValue], revive: &Revive, context: &mut Context) -> JsResult<JsValue> {
    let text = args.get_or_undefined(0).to_string(context)?;
    let prototype = context.intrinsics().constructors().object().prototype();
    let value = match text.as_str().variant() {
        JsStrVariant::Latin1(units) => Parser::new(units, prototype.clone()).parse(context)?,
        JsStrVariant::Utf16(units) => Parser::new(units, prototype.clone()).parse(context)?,
    };
    let Some(reviver) = args.get_or_undefined(1).as_callable() else { return Ok(value) };
    let root = JsObject::new(context.root_shape(), prototype, OrdinaryObject).upcast();
    root.create_data_property_or_throw(js_string!(), value, context)?;
    internalize(root, &reviver, revive, context)
}

/// A holder being walked by [`internalize`]: the value under `name` in `holder`, and its keys still to revive.
struct Walk {
    holder: JsObject,
    name: JsString,
    value: JsValue,
    keys: Vec<JsString>,
    next: usize,
}

/// `InternalizeJSONProperty(root, "", reviver)` with its recursion on a heap stack, so a reviver walks text nested
/// as deep as the parser accepts. The reviver gets `(key, value)` with the holder as `this`, as in ECMAScript 2024
/// and Node 20 (no source-text context argument).
fn internalize(root: JsObject, reviver: &JsObject, revive: &Revive, context: &mut Context) -> JsResult<JsValue> {
    let value = root.get(js_string!(), context)?;
    let mut stack = vec![walk(root, js_string!(), value, revive, context)?];
    loop {
        let top = stack.last_mut().expect("the walk ends when the root is revived");
        if let Some(key) = top.keys.get(top.next).cloned() {
            top.next += 1;
            let object = top.value.as_object().expect("only objects have keys to walk");
            let value = object.get(key.clone(), context)?;
            if value.is_object() {
                stack.push(walk(object, key, value, revive, context)?);
                continue;
            }
            let revived = reviver.call(&object.clone().into(), &[key.clone().into(), value], context)?;
            store(&object, key, revived, revive, context)?;
            continue;
        }
        let done = stack.pop().expect("the stack is not empty");
        let revived = reviver.call(&done.holder.clone().into(), &[done.name.clone().into(), done.value], context)?;
        let Some(parent) = stack.last() else { return Ok(revived) };
        let object = parent.value.as_object().expect("only objects have keys to walk");
        store(&object, done.name, revived, revive, context)?;
    }
}

/// Step 2 of `InternalizeJSONProperty` for `value` (read from `holder[name]`): the keys to revive, an array's
/// indices up to its length as read now, or an object's enumerable own string keys.
fn walk(holder: JsObject, name: JsString, value: JsValue, revive: &Revive, context: &mut Context) -> JsResult<Walk> {
    let mut keys = Vec::new();
    if let Some(object) = value.as_object() {
        if revive.is_array.call(&JsValue::undefined(), std::slice::from_ref(&value), context)?.to_boolean() {
            let length = object.get(js_string!("length"), context)?.to_length(context)?;
            keys = (0..length).map(|i| JsString::from(i.to_string())).collect();
        } else {
            let names = revive.object_keys.call(&JsValue::undefined(), std::slice::from_ref(&value), context)?;
            let names = names.as_object().expect("Object.keys returns an array");
            let length = names.get(js_string!("length"), context)?.to_length(context)?;
            for i in 0..length {
                keys.push(names.get(i, context)?.to_string(context)?);
            }
        }
    }
    Ok(Walk { holder, name, value, keys, next: 0 })
}

/// Step 2's end for one key: `undefined` deletes it, anything else is defined as a data property (a `false` from
/// either is ignored).
fn store(object: &JsObject, key: JsString, revived: JsValue, revive: &Revive, context: &mut Context) -> JsResult<()> {
    if revived.is_undefined() {
        revive.delete_property.call(&JsValue::undefined(), &[object.clone().into(), key.into()], context)?;
    } else {
        object.create_data_property(key, revived, context)?;
    }
    Ok(())
}

/// The JS value of a host JSON value (a tool result, a settlement), built as `JSON.parse` of its text would be:
/// objects on shared shapes, so a 10,000-record result gets the inline-cache hits that object literals get (Boa's
/// `JsValue::from_json` gives every object its own shape, and a comparator sort over such records took 53 ms
/// instead of 33), one string per repeated member name, ASCII strings as Latin-1.
pub(crate) fn from_serde(value: &serde_json::Value, context: &mut Context) -> JsValue {
    let prototype = context.intrinsics().constructors().object().prototype();
    let mut keys = HashMap::new();
    build(value, &prototype, &mut keys, context)
}

/// One level of `from_serde`. It recurses like Boa's `from_json` did: host values come from serde_json, whose
/// parser stops at 128 levels.
fn build<'v>(
    value: &'v serde_json::Value,
    prototype: &JsObject,
    keys: &mut HashMap<&'v str, PropertyKey>,
    context: &mut Context,
) -> JsValue {
    use serde_json::Value;
    match value {
        Value::Null => JsValue::null(),
        Value::Bool(b) => JsValue::new(*b),
        Value::Number(number) => match number.as_i64().and_then(|i| i32::try_from(i).ok()) {
            Some(i) => JsValue::new(i),
            None => JsValue::new(number.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(string) => JsString::from(string.as_str()).into(),
        Value::Array(items) => {
            let items: Vec<JsValue> = items.iter().map(|item| build(item, prototype, keys, context)).collect();
            JsArray::from_iter(items, context).into()
        }
        Value::Object(members) => {
            let object = JsObject::new(context.root_shape(), prototype.clone(), OrdinaryObject).upcast();
            for (name, member) in members {
                let key = keys.entry(name.as_str()).or_insert_with(|| PropertyKey::from(JsString::from(name.as_str())));
                let key = key.clone();
                let member = build(member, prototype, keys, context);
                let property =
                    PropertyDescriptor::builder().value(member).writable(true).enumerable(true).configurable(true);
                object.insert_property(key, property);
            }
            object.into()
        }
    }
}

/// A code unit of the source text: Latin-1 bytes or UTF-16 units. JSON's syntax is ASCII; anything wider only
/// appears inside strings.
trait Unit: Copy + Eq + Into<u32> {
    /// The string made of exactly these units.
    fn string(units: &[Self]) -> JsString;
}

impl Unit for u8 {
    fn string(units: &[u8]) -> JsString {
        JsString::from(JsStr::latin1(units))
    }
}

impl Unit for u16 {
    fn string(units: &[u16]) -> JsString {
        utf16_string(units)
    }
}

/// The string of `units`, stored as Latin-1 when every unit fits: Boa's `JSON.stringify` returns UTF-16 even for
/// ASCII text, and a UTF-16 piece widens every string concatenated with it (twice the bytes to copy on each `+=`).
fn utf16_string(units: &[u16]) -> JsString {
    if units.iter().all(|&unit| unit <= 0xff) {
        let narrow: Vec<u8> = units.iter().map(|&unit| unit as u8).collect();
        JsString::from(JsStr::latin1(&narrow))
    } else {
        JsString::from(units)
    }
}

/// One open container while parsing; the parser keeps its own stack, so nesting depth costs heap, not stack.
enum Open {
    Array(Vec<JsValue>),
    /// An object and the key whose value is being parsed.
    Object(JsObject, PropertyKey),
}

/// Keys seen recently, so the 10,000 records of a tool result share one string per key name.
const KEY_CACHE_SLOTS: usize = 256;
const KEY_CACHE_MAX_LEN: usize = 32;

/// The text, the cursor and per-parse caches; `parse` keeps the open containers in a `Vec`, never on the stack.
struct Parser<'a, T: Unit> {
    text: &'a [T],
    at: usize,
    prototype: JsObject,
    keys: Vec<Option<(&'a [T], PropertyKey)>>,
    /// Scratch for strings with escapes and for numbers that need the full float parser.
    units: Vec<u16>,
    digits: String,
}

impl<'a, T: Unit> Parser<'a, T> {
    fn new(text: &'a [T], prototype: JsObject) -> Self {
        Self { text, at: 0, prototype, keys: vec![None; KEY_CACHE_SLOTS], units: Vec::new(), digits: String::new() }
    }

    fn peek(&self) -> Option<u32> {
        self.text.get(self.at).map(|&unit| unit.into())
    }

    fn skip_whitespace(&mut self) {
        while let Some(0x20 | 0x09 | 0x0a | 0x0d) = self.peek() {
            self.at += 1;
        }
    }

    /// A SyntaxError naming the offending character, or the end of input.
    fn error(&self) -> boa_engine::JsError {
        let message = match self.peek() {
            None => "Unexpected end of JSON input".to_owned(),
            Some(unit) => {
                let shown = char::from_u32(unit).map_or_else(|| format!("\\u{unit:04x}"), String::from);
                format!("Unexpected token '{shown}' in JSON at position {}", self.at)
            }
        };
        JsNativeError::syntax().with_message(message).into()
    }

    fn expect(&mut self, unit: u8) -> JsResult<()> {
        if self.peek() == Some(u32::from(unit)) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error())
        }
    }

    fn parse(mut self, context: &mut Context) -> JsResult<JsValue> {
        let mut stack: Vec<Open> = Vec::new();
        loop {
            // Parse one value; an opening bracket pushes a container and starts over on its first element.
            self.skip_whitespace();
            let mut value = match self.peek() {
                Some(0x7b) => {
                    self.at += 1;
                    self.skip_whitespace();
                    let object = self.object(context);
                    if self.peek() == Some(0x7d) {
                        self.at += 1;
                        object.into()
                    } else {
                        let key = self.key()?;
                        stack.push(Open::Object(object, key));
                        continue;
                    }
                }
                Some(0x5b) => {
                    self.at += 1;
                    self.skip_whitespace();
                    if self.peek() == Some(0x5d) {
                        self.at += 1;
                        JsArray::from_iter([], context).into()
                    } else {
                        stack.push(Open::Array(Vec::new()));
                        continue;
                    }
                }
                Some(0x22) => self.string()?.into(),
                Some(0x74) => self.literal(b"true", JsValue::new(true))?,
                Some(0x66) => self.literal(b"false", JsValue::new(false))?,
                Some(0x6e) => self.literal(b"null", JsValue::null())?,
                Some(0x2d | 0x30..=0x39) => self.number()?,
                _ => return Err(self.error()),
            };
            // Hand the finished value to its container, closing every container that ends here.
            loop {
                self.skip_whitespace();
                match stack.last_mut() {
                    None => {
                        return if self.at == self.text.len() { Ok(value) } else { Err(self.error()) };
                    }
                    Some(Open::Array(items)) => {
                        items.push(value);
                        match self.peek() {
                            Some(0x2c) => {
                                self.at += 1;
                                break;
                            }
                            Some(0x5d) => {
                                self.at += 1;
                                let Some(Open::Array(items)) = stack.pop() else { return Err(self.error()) };
                                value = JsArray::from_iter(items, context).into();
                            }
                            _ => return Err(self.error()),
                        }
                    }
                    Some(Open::Object(object, key)) => {
                        // CreateDataProperty on an ordinary extensible object: a duplicate key replaces the
                        // value and keeps its first position, `__proto__` is an own property like any other.
                        let property = PropertyDescriptor::builder()
                            .value(value)
                            .writable(true)
                            .enumerable(true)
                            .configurable(true);
                        object.insert_property(key.clone(), property);
                        match self.peek() {
                            Some(0x2c) => {
                                self.at += 1;
                                self.skip_whitespace();
                                *key = self.key()?;
                                break;
                            }
                            Some(0x7d) => {
                                self.at += 1;
                                let Some(Open::Object(object, _)) = stack.pop() else { return Err(self.error()) };
                                value = object.into();
                            }
                            _ => return Err(self.error()),
                        }
                    }
                }
            }
        }
    }

    /// An empty ordinary object on `Object.prototype`, sharing shapes with every object built the same way.
    fn object(&self, context: &Context) -> JsObject {
        JsObject::new(context.root_shape(), self.prototype.clone(), OrdinaryObject).upcast()
    }

    /// A member name and the colon after it.
    fn key(&mut self) -> JsResult<PropertyKey> {
        if self.peek() != Some(0x22) {
            return Err(self.error());
        }
        let start = self.at + 1;
        let key = match self.simple_string_end(start) {
            Some(end) if end - start <= KEY_CACHE_MAX_LEN => {
                self.at = end + 1;
                let text = self.text;
                self.cached_key(&text[start..end])
            }
            _ => PropertyKey::from(self.string()?),
        };
        self.skip_whitespace();
        self.expect(b':')?;
        Ok(key)
    }

    fn cached_key(&mut self, units: &'a [T]) -> PropertyKey {
        let slot = &mut self.keys[slot_of(units)];
        if let Some((cached, key)) = slot
            && *cached == units
        {
            return key.clone();
        }
        let key = PropertyKey::from(T::string(units));
        *slot = Some((units, key.clone()));
        key
    }

    /// Where the string starting at `start` (after its quote) ends, if it has no escapes and no control characters.
    fn simple_string_end(&self, start: usize) -> Option<usize> {
        for (offset, &unit) in self.text.get(start..)?.iter().enumerate() {
            match unit.into() {
                0x22 => return Some(start + offset),
                0x5c | 0x00..=0x1f => return None,
                _ => {}
            }
        }
        None
    }

    /// A string literal, the cursor on its opening quote.
    fn string(&mut self) -> JsResult<JsString> {
        let start = self.at + 1;
        if let Some(end) = self.simple_string_end(start) {
            self.at = end + 1;
            return Ok(T::string(&self.text[start..end]));
        }
        self.at = start;
        let mut units = std::mem::take(&mut self.units);
        units.clear();
        let result = self.escaped_string(&mut units);
        let string = result.map(|()| utf16_string(&units));
        self.units = units;
        string
    }

    fn escaped_string(&mut self, units: &mut Vec<u16>) -> JsResult<()> {
        loop {
            let Some(unit) = self.peek() else { return Err(self.error()) };
            match unit {
                0x22 => {
                    self.at += 1;
                    return Ok(());
                }
                0x00..=0x1f => return Err(self.error()),
                0x5c => {
                    self.at += 1;
                    let escaped = match self.peek() {
                        Some(0x22) => 0x22,
                        Some(0x5c) => 0x5c,
                        Some(0x2f) => 0x2f,
                        Some(0x62) => 0x08,
                        Some(0x66) => 0x0c,
                        Some(0x6e) => 0x0a,
                        Some(0x72) => 0x0d,
                        Some(0x74) => 0x09,
                        Some(0x75) => {
                            // `\uXXXX` is one code unit: a lone surrogate stays as it is, a pair forms itself.
                            let mut value = 0u16;
                            for _ in 0..4 {
                                self.at += 1;
                                let digit = self.peek().and_then(|d| char::from_u32(d)?.to_digit(16));
                                let Some(digit) = digit else { return Err(self.error()) };
                                value = value * 16 + digit as u16;
                            }
                            value
                        }
                        _ => return Err(self.error()),
                    };
                    units.push(escaped);
                    self.at += 1;
                }
                _ => {
                    // Code units of a UTF-16 text are at most 0xffff, so the narrowing cannot lose anything.
                    units.push(unit as u16);
                    self.at += 1;
                }
            }
        }
    }

    /// `true`, `false` or `null`, spelled exactly.
    fn literal(&mut self, word: &[u8], value: JsValue) -> JsResult<JsValue> {
        for &expected in word {
            if self.peek() != Some(u32::from(expected)) {
                return Err(self.error());
            }
            self.at += 1;
        }
        Ok(value)
    }

    /// A number: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, as the nearest double.
    fn number(&mut self) -> JsResult<JsValue> {
        let start = self.at;
        let negative = self.peek() == Some(0x2d);
        if negative {
            self.at += 1;
        }
        let int_start = self.at;
        match self.peek() {
            Some(0x30) => self.at += 1,
            Some(0x31..=0x39) => self.digits_run(),
            _ => return Err(self.error()),
        }
        let int_end = self.at;
        let mut integral = true;
        if self.peek() == Some(0x2e) {
            integral = false;
            self.at += 1;
            if !matches!(self.peek(), Some(0x30..=0x39)) {
                return Err(self.error());
            }
            self.digits_run();
        }
        if let Some(0x65 | 0x45) = self.peek() {
            integral = false;
            self.at += 1;
            if let Some(0x2b | 0x2d) = self.peek() {
                self.at += 1;
            }
            if !matches!(self.peek(), Some(0x30..=0x39)) {
                return Err(self.error());
            }
            self.digits_run();
        }
        // Up to nine digits always fit an i32; -0 must stay a double.
        if integral && int_end - int_start <= 9 {
            let magnitude =
                self.text[int_start..int_end].iter().fold(0i32, |acc, &d| acc * 10 + (d.into() - 0x30) as i32);
            return Ok(match (negative, magnitude) {
                (true, 0) => JsValue::new(-0.0),
                (true, m) => JsValue::new(-m),
                (false, m) => JsValue::new(m),
            });
        }
        self.digits.clear();
        self.digits.extend(self.text[start..self.at].iter().filter_map(|&unit| char::from_u32(unit.into())));
        // The grammar above admits only what Rust's float syntax accepts, so parsing cannot fail.
        let value: f64 = self.digits.parse().map_err(|_| self.error())?;
        // `1.0` and `1e3` are integers too; keeping them as such keeps arrays of them in Boa's compact storage.
        let small_integer = value.fract() == 0.0 && value.abs() <= f64::from(i32::MAX) && value != 0.0;
        Ok(if small_integer { JsValue::new(value as i32) } else { JsValue::new(value) })
    }

    fn digits_run(&mut self) {
        while let Some(0x30..=0x39) = self.peek() {
            self.at += 1;
        }
    }
}

/// The key cache slot of `units`: FNV-1a over the code units.
fn slot_of<T: Unit>(units: &[T]) -> usize {
    let mut hash: u32 = 0x811c_9dc5;
    for &unit in units {
        hash = (hash ^ unit.into()).wrapping_mul(0x0100_0193);
    }
    (hash as usize) % KEY_CACHE_SLOTS
}

#[cfg(test)]
mod tests {
    use boa_engine::{Context, JsString, JsValue, js_string};

    /// Parses `text` with the installed `JSON.parse` of a fresh context.
    fn parse(text: JsString) -> (JsValue, Context) {
        let mut context = Context::default();
        crate::natives::install(&mut context).expect("install succeeds on a fresh context");
        let json = context.intrinsics().objects().json();
        let parse = json.get(js_string!("parse"), &mut context).expect("JSON.parse exists");
        let parse = parse.as_callable().expect("JSON.parse is callable");
        let value = parse.call(&JsValue::undefined(), &[text.into()], &mut context).expect("the text is valid JSON");
        (value, context)
    }

    #[test]
    fn host_values_build_what_json_parse_builds() {
        // Prints own keys in order with their attributes, prototypes and values, so a difference in any shows.
        const DUMP: &str = r#"(function dump(v) {
            if (v === null || typeof v !== "object") return typeof v + ":" + (Object.is(v, -0) ? "-0" : String(v));
            var proto = Object.getPrototypeOf(v) === (Array.isArray(v) ? Array.prototype : Object.prototype);
            return (Array.isArray(v) ? "[" : "{") + proto + Reflect.ownKeys(v).map(function (k) {
                var d = Object.getOwnPropertyDescriptor(v, k);
                return k + (d.writable ? "w" : "") + (d.enumerable ? "e" : "") + (d.configurable ? "c" : "") + "=" +
                    ("value" in d ? dump(d.value) : "accessor");
            }).join(",") + "}";
        })"#;
        let texts = [
            r#"[{"id":1,"name":"a","tags":["x"]},{"id":2,"name":"b","tags":[]},{"tags":[null],"id":3}]"#,
            r#"{"__proto__":{"polluted":1},"constructor":2,"b":1,"2":2,"a":3,"1":4,"a":5,"4294967295":6}"#,
            r#"[0,1,-1,2147483647,2147483648,-2147483649,9007199254740993,18446744073709551615,1.5,1e300,1.0]"#,
            r#"{"s":"\u00e9\u20ac\ud83d\ude00","e":"","n":null,"t":true,"f":false,"deep":[[[{"x":[]}]]]}"#,
        ];
        let mut context = Context::builder().instructions_remaining(1 << 30).build().expect("a context builds");
        crate::natives::install(&mut context).expect("install succeeds on a fresh context");
        let dump = context.eval(boa_engine::Source::from_bytes(DUMP)).expect("the dump function compiles");
        let dump = dump.as_callable().expect("a function");
        let json = context.intrinsics().objects().json();
        let parse = json.get(js_string!("parse"), &mut context).expect("JSON.parse exists");
        let parse = parse.as_callable().expect("JSON.parse is callable");
        for text in texts {
            let host: serde_json::Value = serde_json::from_str(text).expect("valid JSON");
            let built = super::from_serde(&host, &mut context);
            let parsed = parse.call(&JsValue::undefined(), &[JsString::from(text).into()], &mut context);
            let parsed = parsed.expect("valid JSON");
            let mut show = |value: JsValue| {
                let shown = dump.call(&JsValue::undefined(), &[value], &mut context).expect("dump runs");
                shown.to_string(&mut context).expect("a string").to_std_string_escaped()
            };
            assert_eq!(show(built), show(parsed), "{text}");
        }
    }

    #[test]
    fn ascii_strings_of_a_utf16_text_stay_latin1() {
        // `JSON.stringify` returns UTF-16 storage even for ASCII text; what is parsed back must not inherit it.
        let text: Vec<u16> = r#"{"plain":"some text 1","escaped":"\u0041\n"}"#.encode_utf16().collect();
        let text = JsString::from(&text[..]);
        assert!(!text.as_str().is_latin1(), "the input is stored as UTF-16");
        let (value, mut context) = parse(text);
        let object = value.as_object().expect("an object");
        for key in ["plain", "escaped"] {
            let string = object.get(JsString::from(key), &mut context).expect("a property");
            let string = string.as_string().expect("a string");
            assert!(string.as_str().is_latin1(), "{key} is stored as Latin-1");
        }
    }
}
