//! The RegExp half of the linear-time strings: a caching `exec` and a `[Symbol.split]` that searches forward.
//! Boa widens a Latin-1 input to UTF-16 on every exec, so a global match/replace/matchAll loop over a large
//! ASCII string is quadratic; the `exec` here hands Boa a UTF-16 copy made once per string. Boa's split tries a
//! sticky match at every position and each try scans to the next match; ours searches once per piece.
//! Invariant: both follow the ECMAScript steps, and the fast split path runs only when no step is observable.

use boa_engine::{
    Context, JsArgs, JsNativeError, JsObject, JsResult, JsString, JsSymbol, JsValue,
    builtins::regexp::RegExp,
    js_string,
    native_function::NativeFunction,
    object::JsObject as Object,
    property::PropertyKey,
    string::{JsStr, JsStrVariant},
};
use boa_gc::{Finalize, Trace};

use super::{array_of, define_method};

/// Strings shorter than this are widened by Boa itself at no noticeable cost; longer ones go through the cache.
const WIDEN_AT: usize = 1024;

/// The last large Latin-1 string handed to `exec` and its UTF-16 twin.
struct WideCache {
    latin1: JsString,
    wide: JsString,
}

#[derive(Trace, Finalize)]
struct Functions {
    /// Our `RegExp.prototype.exec`.
    exec: JsObject,
    /// Boa's `RegExp.prototype.exec`: `RegExpBuiltinExec` behind its brand check.
    builtin_exec: JsObject,
}

pub(super) fn install(context: &mut Context) -> JsResult<()> {
    let proto = context.intrinsics().constructors().regexp().prototype();
    let builtin_exec = proto
        .get(js_string!("exec"), context)?
        .as_callable()
        .ok_or_else(|| JsNativeError::typ().with_message("RegExp.prototype.exec is not a function"))?;
    let exec_fn = NativeFunction::from_copy_closure_with_captures(exec, builtin_exec.clone());
    let exec = define_method(&proto, js_string!("exec").into(), js_string!("exec"), 1, exec_fn, context)?;
    let split_fn = NativeFunction::from_copy_closure_with_captures(split, Functions { exec, builtin_exec });
    let key = PropertyKey::from(JsSymbol::split());
    define_method(&proto, key, js_string!("[Symbol.split]"), 2, split_fn, context)?;
    Ok(())
}

/// Returns `s` itself, or for a large Latin-1 string the same text stored as UTF-16, made once and cached.
fn widened(s: JsString, context: &mut Context) -> JsString {
    let JsStrVariant::Latin1(bytes) = s.as_str().variant() else {
        return s;
    };
    if bytes.len() < WIDEN_AT {
        return s;
    }
    if let Some(cache) = context.get_data::<WideCache>()
        && let JsStrVariant::Latin1(cached) = cache.latin1.as_str().variant()
        && std::ptr::eq(cached, bytes)
    {
        return cache.wide.clone();
    }
    let units: Vec<u16> = bytes.iter().copied().map(u16::from).collect();
    let wide = JsString::from(&units[..]);
    context.insert_data(WideCache { latin1: s, wide: wide.clone() });
    wide
}

/// `RegExp.prototype.exec(string)`: Boa's, fed a string it does not need to widen again.
fn exec(this: &JsValue, args: &[JsValue], builtin_exec: &JsObject, context: &mut Context) -> JsResult<JsValue> {
    // The brand check comes before `ToString(string)`; let the built-in throw its own error for it.
    if !this.as_object().is_some_and(|object| object.is::<RegExp>()) {
        return builtin_exec.call(this, args, context);
    }
    let s = args.get_or_undefined(0).to_string(context)?;
    let s = widened(s, context);
    builtin_exec.call(this, &[s.into()], context)
}

/// `SpeciesConstructor(O, %RegExp%)`.
fn species_constructor(object: &JsObject, context: &mut Context) -> JsResult<JsObject> {
    let default = context.intrinsics().constructors().regexp().constructor();
    let c = object.get(js_string!("constructor"), context)?;
    if c.is_undefined() {
        return Ok(default);
    }
    let Some(c) = c.as_object() else {
        return Err(JsNativeError::typ().with_message("property 'constructor' is not an object").into());
    };
    let s = c.get(JsSymbol::species(), context)?;
    if s.is_null_or_undefined() {
        return Ok(default);
    }
    match s.as_object() {
        Some(s) if s.is_constructor() => Ok(s),
        _ => Err(JsNativeError::typ().with_message("property 'constructor' is not a constructor").into()),
    }
}

/// `RegExpExec(R, S)`.
fn regexp_exec(
    r: &JsObject,
    s: &JsString,
    builtin_exec: &JsObject,
    context: &mut Context,
) -> JsResult<Option<JsObject>> {
    let exec = r.get(js_string!("exec"), context)?;
    if let Some(exec) = exec.as_callable() {
        let result = exec.call(&r.clone().into(), &[s.clone().into()], context)?;
        if !result.is_object() && !result.is_null() {
            return Err(JsNativeError::typ().with_message("regexp exec returned neither object nor null").into());
        }
        return Ok(result.as_object());
    }
    if !r.is::<RegExp>() {
        return Err(JsNativeError::typ().with_message("RegExpExec called with invalid value").into());
    }
    Ok(builtin_exec.call(&r.clone().into(), &[s.clone().into()], context)?.as_object())
}

/// `AdvanceStringIndex(S, index, unicode)`.
fn advance(s: JsStr<'_>, index: usize, unicode: bool) -> usize {
    if !unicode || index + 1 >= s.len() {
        return index + 1;
    }
    let lead = s.get(index).is_some_and(|unit| (0xD800..0xDC00).contains(&unit));
    let trail = s.get(index + 1).is_some_and(|unit| (0xDC00..0xE000).contains(&unit));
    if lead && trail { index + 2 } else { index + 1 }
}

/// `ToLength(? Get(O, key))`, clamped to a string index.
fn get_length(object: &JsObject, key: JsString, context: &mut Context) -> JsResult<usize> {
    let value = object.get(key, context)?.to_length(context)?;
    Ok(usize::try_from(value).unwrap_or(usize::MAX))
}

/// Whether `RegExp.prototype` still has its own data property `key` holding `expected` (or any data value).
fn own_data_property(object: &JsObject, key: PropertyKey, expected: Option<&JsObject>) -> bool {
    let Some(descriptor) = object.borrow().properties().get(&key) else {
        return false;
    };
    if !descriptor.is_data_descriptor() {
        return false;
    }
    match expected {
        Some(expected) => descriptor.value().and_then(JsValue::as_object).is_some_and(|v| Object::equals(&v, expected)),
        None => true,
    }
}

/// Collects the pieces of a split, stopping at `lim`.
struct Pieces {
    values: Vec<JsValue>,
    lim: usize,
}

impl Pieces {
    /// Appends one piece; returns true when the limit is reached.
    fn push(&mut self, value: JsValue) -> bool {
        self.values.push(value);
        self.values.len() == self.lim
    }

    /// Appends the match's captures (elements 1..length of `z`); returns true when the limit is reached.
    fn push_captures(&mut self, z: &JsObject, context: &mut Context) -> JsResult<bool> {
        let captures = get_length(z, js_string!("length"), context)?.saturating_sub(1);
        for i in 1..=captures {
            if self.push(z.get(i, context)?) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// `RegExp.prototype[Symbol.split](string, limit)`.
fn split(this: &JsValue, args: &[JsValue], functions: &Functions, context: &mut Context) -> JsResult<JsValue> {
    let Some(rx) = this.as_object() else {
        return Err(JsNativeError::typ()
            .with_message("RegExp.prototype.split method called on incompatible value")
            .into());
    };
    let s = args.get_or_undefined(0).to_string(context)?;
    let c = species_constructor(&rx, context)?;
    let flags = rx.get(js_string!("flags"), context)?.to_string(context)?;
    let unicode = flags.contains(b'u') || flags.contains(b'v');
    let new_flags = if flags.contains(b'y') { flags.clone() } else { js_string!(&flags, &js_string!("y")) };
    let splitter = c.construct(&[this.clone(), new_flags.into()], Some(&c), context)?;
    let limit = args.get_or_undefined(1);
    let lim = if limit.is_undefined() { u32::MAX } else { limit.to_u32(context)? } as usize;
    if lim == 0 {
        return Ok(array_of([], context));
    }
    let size = s.len();
    if size == 0 {
        if regexp_exec(&splitter, &s, &functions.builtin_exec, context)?.is_some() {
            return Ok(array_of([], context));
        }
        return Ok(array_of([s.into()], context));
    }
    let mut pieces = Pieces { values: Vec::new(), lim };
    let p = if is_pristine(&c, &flags, functions, context) {
        split_forward(&s, &splitter, &flags, unicode, &mut pieces, functions, context)?
    } else {
        split_sticky(&s, &splitter, unicode, &mut pieces, functions, context)?
    };
    if let Some(p) = p {
        pieces.values.push(s.slice(p, size).into());
    }
    Ok(array_of(pieces.values, context))
}

/// True when the splitter is a plain `%RegExp%` whose `exec` is ours, so nothing the spec's per-position loop
/// does can be observed and a forward search gives the same pieces.
fn is_pristine(c: &JsObject, flags: &JsString, functions: &Functions, context: &mut Context) -> bool {
    let regexp = context.intrinsics().constructors().regexp();
    let proto = regexp.prototype();
    Object::equals(c, &regexp.constructor())
        && own_data_property(&proto, js_string!("exec").into(), Some(&functions.exec))
        && own_data_property(&proto, JsSymbol::r#match().into(), None)
        && flags.iter().all(|unit| b"dgimsuvy".iter().any(|&flag| u16::from(flag) == unit))
}

/// The spec's loop: a sticky match attempt at every position. Returns the start of the tail, or `None` when
/// the limit was reached.
fn split_sticky(
    s: &JsString,
    splitter: &JsObject,
    unicode: bool,
    pieces: &mut Pieces,
    functions: &Functions,
    context: &mut Context,
) -> JsResult<Option<usize>> {
    let size = s.len();
    let (mut p, mut q) = (0, 0);
    while q < size {
        splitter.set(js_string!("lastIndex"), q, true, context)?;
        let Some(z) = regexp_exec(splitter, s, &functions.builtin_exec, context)? else {
            q = advance(s.as_str(), q, unicode);
            continue;
        };
        let e = get_length(splitter, js_string!("lastIndex"), context)?.min(size);
        if e == p {
            q = advance(s.as_str(), q, unicode);
            continue;
        }
        if pieces.push(s.slice(p, q).into()) {
            return Ok(None);
        }
        p = e;
        if pieces.push_captures(&z, context)? {
            return Ok(None);
        }
        q = p;
    }
    Ok(Some(p))
}

/// The same pieces as [`split_sticky`], found by one global search per piece: the leftmost match at or after
/// `q` is the first position where the sticky attempt would succeed.
fn split_forward(
    s: &JsString,
    splitter: &JsObject,
    flags: &JsString,
    unicode: bool,
    pieces: &mut Pieces,
    functions: &Functions,
    context: &mut Context,
) -> JsResult<Option<usize>> {
    let searcher_flags: String = flags
        .iter()
        .filter(|&unit| unit != u16::from(b'y') && unit != u16::from(b'g'))
        .filter_map(|unit| char::from_u32(u32::from(unit)))
        .chain(['g'])
        .collect();
    let regexp = context.intrinsics().constructors().regexp().constructor();
    let searcher =
        regexp.construct(&[splitter.clone().into(), JsString::from(searcher_flags).into()], Some(&regexp), context)?;
    let size = s.len();
    let (mut p, mut q) = (0, 0);
    while q < size {
        searcher.set(js_string!("lastIndex"), q, true, context)?;
        let z = functions.exec.call(&searcher.clone().into(), &[s.clone().into()], context)?;
        let Some(z) = z.as_object() else {
            break;
        };
        let index = get_length(&z, js_string!("index"), context)?;
        if index >= size {
            break;
        }
        let e = get_length(&searcher, js_string!("lastIndex"), context)?.min(size);
        if e == p {
            q = advance(s.as_str(), index, unicode);
            continue;
        }
        if pieces.push(s.slice(p, index).into()) {
            return Ok(None);
        }
        p = e;
        if pieces.push_captures(&z, context)? {
            return Ok(None);
        }
        q = p;
    }
    Ok(Some(p))
}
