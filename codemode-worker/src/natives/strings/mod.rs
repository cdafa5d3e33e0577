//! Linear-time replacements for the String built-ins model code leans on, installed into every context.
//! Boa 0.22 restarts its substring scan at index 0 on every `StringIndexOf`, and widens a Latin-1 input on every
//! `RegExp` exec, so `split`, `replaceAll` and global regex loops are quadratic. This module is not a new API:
//! each replacement follows the ECMAScript steps of the function it replaces (coercion order, `Symbol.*`
//! dispatch, errors), only the search underneath is linear.

mod builder;
mod regexp;
mod search;

use boa_engine::{
    Context, JsArgs, JsNativeError, JsObject, JsResult, JsString, JsSymbol, JsValue,
    builtins::regexp::RegExp,
    js_string,
    native_function::{NativeFunction, NativeFunctionPointer},
    object::builtins::JsArray,
    string::JsStr,
    value::IntegerOrInfinity,
};

use self::{builder::StrBuf, search::Searcher};
use super::define_method;

/// Replaces the quadratic or panicking String and RegExp built-ins of `context` with linear-time, panic-free ones:
/// `String.prototype.{repeat, split, replace, replaceAll, indexOf, lastIndexOf, includes, startsWith, endsWith}`,
/// `RegExp.prototype.exec` and `RegExp.prototype[Symbol.split]`.
pub(super) fn install(context: &mut Context) -> JsResult<()> {
    let string_proto = context.intrinsics().constructors().string().prototype();
    // `Reflect.get` as the realm was built, for `GetV` on primitive separators (a guest may replace the property).
    let reflect_get = context
        .intrinsics()
        .objects()
        .reflect()
        .get(js_string!("get"), context)?
        .as_callable()
        .ok_or_else(|| JsNativeError::typ().with_message("Reflect.get is not a function"))?;
    let dispatching: [(&str, usize, DispatchingFn); 3] =
        [("split", 2, split), ("replace", 2, replace), ("replaceAll", 2, replace_all)];
    for (name, length, function) in dispatching {
        let key = JsString::from(name);
        let function = NativeFunction::from_copy_closure_with_captures(function, reflect_get.clone());
        define_method(&string_proto, key.clone().into(), key, length, function, context)?;
    }
    let methods: [(&str, usize, NativeFunctionPointer); 6] = [
        ("repeat", 1, repeat),
        ("indexOf", 1, index_of),
        ("lastIndexOf", 1, last_index_of),
        ("includes", 1, includes),
        ("startsWith", 1, starts_with),
        ("endsWith", 1, ends_with),
    ];
    for (name, length, function) in methods {
        let key = JsString::from(name);
        define_method(&string_proto, key.clone().into(), key, length, NativeFunction::from_fn_ptr(function), context)?;
    }
    regexp::install(context)
}

/// `String.prototype.repeat`, building the result in one buffer: Boa's collects `count` slices first (24 bytes per
/// repetition, so `'x'.repeat(5e6)` needed 120 MB).
fn repeat(this: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let this = this.require_object_coercible()?;
    let string = this.to_string(context)?;
    let count = args.first().cloned().unwrap_or_default().to_integer_or_infinity(context)?;
    let count = match count {
        boa_engine::value::IntegerOrInfinity::Integer(i) if i >= 0 => i as u64,
        boa_engine::value::IntegerOrInfinity::PositiveInfinity => {
            return Err(boa_engine::JsNativeError::range()
                .with_message("String.prototype.repeat: count must be less than infinity")
                .into());
        }
        _ => {
            return Err(boa_engine::JsNativeError::range()
                .with_message("String.prototype.repeat: count must be non-negative")
                .into());
        }
    };
    if count == 0 || string.is_empty() {
        return Ok(JsString::default().into());
    }
    let total = count.checked_mul(string.len() as u64).filter(|t| *t <= u64::from(u32::MAX));
    let Some(total) = total else {
        return Err(boa_engine::JsNativeError::range()
            .with_message(
                "repeat count must be a positive finite number that doesn't overflow the maximum string length (2^32 - 1)",
            )
            .into());
    };
    let unit = string.to_vec();
    let mut out: Vec<u16> = Vec::with_capacity(total as usize);
    for _ in 0..count {
        out.extend_from_slice(&unit);
    }
    Ok(JsString::from(out.as_slice()).into())
}

/// A String method that dispatches on its argument's `Symbol.split`/`Symbol.replace`, given the realm's `Reflect.get`.
type DispatchingFn = fn(&JsValue, &[JsValue], &JsObject, &mut Context) -> JsResult<JsValue>;

/// `GetMethod(V, P)` for any `V` that is neither `undefined` nor `null`: a primitive's method is looked up on its
/// wrapper's prototype chain with the primitive as receiver (`GetV`), so a getter installed on, say,
/// `String.prototype[Symbol.split]` runs, as the spec and Node have it.
fn get_method_v(
    value: &JsValue,
    key: JsSymbol,
    reflect_get: &JsObject,
    context: &mut Context,
) -> JsResult<Option<JsObject>> {
    if let Some(object) = value.as_object() {
        return get_method(&object, key, context);
    }
    let wrapper = value.to_object(context)?;
    let found = reflect_get.call(&JsValue::undefined(), &[wrapper.into(), key.into(), value.clone()], context)?;
    callable_or_none(found)
}

/// `GetMethod(V, P)` for an object `V`.
fn get_method(object: &JsObject, key: JsSymbol, context: &mut Context) -> JsResult<Option<JsObject>> {
    callable_or_none(object.get(key, context)?)
}

/// The end of `GetMethod`: `None` for `undefined` or `null`, the function, or a `TypeError`.
fn callable_or_none(value: JsValue) -> JsResult<Option<JsObject>> {
    if value.is_null_or_undefined() {
        return Ok(None);
    }
    match value.as_callable() {
        Some(function) => Ok(Some(function)),
        None => {
            Err(JsNativeError::typ().with_message("value returned for property of object is not a function").into())
        }
    }
}

/// `IsRegExp(argument)`.
fn is_reg_exp(value: &JsValue, context: &mut Context) -> JsResult<Option<JsObject>> {
    let Some(object) = value.as_object() else {
        return Ok(None);
    };
    let matcher = object.get(JsSymbol::r#match(), context)?;
    if !matcher.is_undefined() {
        return Ok(matcher.to_boolean().then_some(object));
    }
    Ok(object.is::<RegExp>().then_some(object))
}

/// The code units of `s` from `from` to `to`, both clamped to its length.
fn part(s: JsStr<'_>, from: usize, to: usize) -> JsStr<'_> {
    let to = to.min(s.len());
    s.get(from.min(to)..to).unwrap_or(JsStr::latin1(&[]))
}

fn clamp(position: IntegerOrInfinity, len: usize) -> usize {
    position.clamp_finite(0, len as i64) as usize
}

fn array_of(values: impl IntoIterator<Item = JsValue>, context: &mut Context) -> JsValue {
    JsArray::from_iter(values, context).into()
}

/// `String.prototype.split(separator, limit)`.
fn split(this: &JsValue, args: &[JsValue], reflect_get: &JsObject, context: &mut Context) -> JsResult<JsValue> {
    let o = this.require_object_coercible()?;
    let (separator, limit) = (args.get_or_undefined(0), args.get_or_undefined(1));
    if !separator.is_null_or_undefined()
        && let Some(splitter) = get_method_v(separator, JsSymbol::split(), reflect_get, context)?
    {
        return splitter.call(separator, &[o.clone(), limit.clone()], context);
    }
    let s = o.to_string(context)?;
    let lim = if limit.is_undefined() { u32::MAX } else { limit.to_u32(context)? } as usize;
    let r = separator.to_string(context)?;
    if lim == 0 {
        return Ok(array_of([], context));
    }
    if separator.is_undefined() {
        return Ok(array_of([s.into()], context));
    }
    if r.is_empty() {
        let head = s.as_str();
        let units = head.iter().take(lim).map(|unit| JsString::from(&[unit][..]).into());
        let units: Vec<JsValue> = units.collect();
        return Ok(array_of(units, context));
    }
    if s.is_empty() {
        return Ok(array_of([s.into()], context));
    }
    let searcher = Searcher::new(s.as_str(), r.as_str());
    let mut substrings = Vec::new();
    let mut i = 0;
    while let Some(j) = searcher.find(i) {
        substrings.push(s.slice(i, j).into());
        if substrings.len() == lim {
            return Ok(array_of(substrings, context));
        }
        i = j + searcher.needle_len();
    }
    substrings.push(s.slice(i, s.len()).into());
    Ok(array_of(substrings, context))
}

/// The replacement side of `replace`/`replaceAll` with a string pattern: a function or a template string.
enum Replacement {
    Function(JsObject),
    Template(JsString),
}

impl Replacement {
    fn new(value: &JsValue, context: &mut Context) -> JsResult<Self> {
        match value.as_callable() {
            Some(function) => Ok(Self::Function(function)),
            None => Ok(Self::Template(value.to_string(context)?)),
        }
    }

    /// Appends the replacement of the match of `search` at `position` in `s` to `out`.
    fn push(
        &self,
        out: &mut StrBuf,
        search: &JsString,
        s: &JsString,
        position: usize,
        context: &mut Context,
    ) -> JsResult<()> {
        match self {
            Self::Function(function) => {
                let args = [search.clone().into(), position.into(), s.clone().into()];
                let value = function.call(&JsValue::undefined(), &args, context)?.to_string(context)?;
                out.push(value.as_str());
            }
            Self::Template(template) => substitute(out, search, s, position, template),
        }
        Ok(())
    }
}

/// `GetSubstitution` without captures: `$$`, `$&`, `` $` `` and `$'` expand, every other `$` stays literal.
fn substitute(out: &mut StrBuf, matched: &JsString, s: &JsString, position: usize, template: &JsString) {
    let template = template.as_str();
    let (s, len) = (s.as_str(), template.len());
    let mut literal_from = 0;
    let mut i = 0;
    while i + 1 < len {
        if template.get(i) != Some(u16::from(b'$')) {
            i += 1;
            continue;
        }
        let expansion = match template.get(i + 1).and_then(|unit| u8::try_from(unit).ok()) {
            Some(b'$') => Some(None),
            Some(b'&') => Some(Some(matched.as_str())),
            Some(b'`') => Some(Some(part(s, 0, position))),
            Some(b'\'') => Some(Some(part(s, position + matched.len(), s.len()))),
            _ => None,
        };
        match expansion {
            Some(expansion) => {
                // `$$` keeps the first `$` of the pair as its literal expansion.
                let keep = usize::from(expansion.is_none());
                out.push(part(template, literal_from, i + keep));
                if let Some(expansion) = expansion {
                    out.push(expansion);
                }
                i += 2;
                literal_from = i;
            }
            None => i += 1,
        }
    }
    out.push(part(template, literal_from, len));
}

/// `String.prototype.replace(searchValue, replaceValue)`.
fn replace(this: &JsValue, args: &[JsValue], reflect_get: &JsObject, context: &mut Context) -> JsResult<JsValue> {
    let o = this.require_object_coercible()?;
    let (search_value, replace_value) = (args.get_or_undefined(0), args.get_or_undefined(1));
    if !search_value.is_null_or_undefined()
        && let Some(replacer) = get_method_v(search_value, JsSymbol::replace(), reflect_get, context)?
    {
        return replacer.call(search_value, &[o.clone(), replace_value.clone()], context);
    }
    let s = o.to_string(context)?;
    let search = search_value.to_string(context)?;
    let replacement = Replacement::new(replace_value, context)?;
    let Some(position) = Searcher::new(s.as_str(), search.as_str()).find(0) else {
        return Ok(s.into());
    };
    let mut out = StrBuf::with_capacity(s.len());
    out.push(part(s.as_str(), 0, position));
    replacement.push(&mut out, &search, &s, position, context)?;
    out.push(part(s.as_str(), position + search.len(), s.len()));
    Ok(out.build().into())
}

/// `String.prototype.replaceAll(searchValue, replaceValue)`.
fn replace_all(this: &JsValue, args: &[JsValue], reflect_get: &JsObject, context: &mut Context) -> JsResult<JsValue> {
    let o = this.require_object_coercible()?;
    let (search_value, replace_value) = (args.get_or_undefined(0), args.get_or_undefined(1));
    if !search_value.is_null_or_undefined() {
        if let Some(regexp) = is_reg_exp(search_value, context)? {
            let flags = regexp.get(js_string!("flags"), context)?;
            flags.require_object_coercible()?;
            if !flags.to_string(context)?.contains(b'g') {
                return Err(JsNativeError::typ()
                    .with_message("String.prototype.replaceAll called with a non-global RegExp argument")
                    .into());
            }
        }
        if let Some(replacer) = get_method_v(search_value, JsSymbol::replace(), reflect_get, context)? {
            return replacer.call(search_value, &[o.clone(), replace_value.clone()], context);
        }
    }
    let s = o.to_string(context)?;
    let search = search_value.to_string(context)?;
    let replacement = Replacement::new(replace_value, context)?;
    let searcher = Searcher::new(s.as_str(), search.as_str());
    let advance_by = search.len().max(1);
    let mut positions = Vec::new();
    let mut next = searcher.find(0);
    while let Some(position) = next {
        positions.push(position);
        next = searcher.find(position + advance_by);
    }
    let mut out = StrBuf::with_capacity(s.len());
    let mut end_of_last_match = 0;
    for position in positions {
        out.push(part(s.as_str(), end_of_last_match, position));
        replacement.push(&mut out, &search, &s, position, context)?;
        end_of_last_match = position + search.len();
    }
    if end_of_last_match < s.len() {
        out.push(part(s.as_str(), end_of_last_match, s.len()));
    }
    Ok(out.build().into())
}

/// `String.prototype.indexOf(searchString, position)`.
fn index_of(this: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let o = this.require_object_coercible()?;
    let s = o.to_string(context)?;
    let search = args.get_or_undefined(0).to_string(context)?;
    let start = clamp(args.get_or_undefined(1).to_integer_or_infinity(context)?, s.len());
    let found = Searcher::new(s.as_str(), search.as_str()).find(start);
    Ok(found.map_or(-1, |i| i as i64).into())
}

/// `String.prototype.lastIndexOf(searchString, position)`.
fn last_index_of(this: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let o = this.require_object_coercible()?;
    let s = o.to_string(context)?;
    let search = args.get_or_undefined(0).to_string(context)?;
    let num_pos = args.get_or_undefined(1).to_number(context)?;
    let start =
        if num_pos.is_nan() { s.len() } else { clamp(JsValue::new(num_pos).to_integer_or_infinity(context)?, s.len()) };
    if search.is_empty() {
        return Ok(start.into());
    }
    let found = Searcher::new(s.as_str(), search.as_str()).rfind(start);
    Ok(found.map_or(-1, |i| i as i64).into())
}

/// Steps 1-5 shared by `includes`, `startsWith` and `endsWith`: the string, and a search string that must not
/// be a regular expression.
fn string_and_search(
    this: &JsValue,
    search: &JsValue,
    method: &str,
    context: &mut Context,
) -> JsResult<(JsString, JsString)> {
    let o = this.require_object_coercible()?;
    let s = o.to_string(context)?;
    if is_reg_exp(search, context)?.is_some() {
        return Err(JsNativeError::typ()
            .with_message(format!("First argument to String.prototype.{method} must not be a regular expression"))
            .into());
    }
    Ok((s, search.to_string(context)?))
}

/// `String.prototype.includes(searchString, position)`.
fn includes(this: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let (s, search) = string_and_search(this, args.get_or_undefined(0), "includes", context)?;
    let start = clamp(args.get_or_undefined(1).to_integer_or_infinity(context)?, s.len());
    Ok(Searcher::new(s.as_str(), search.as_str()).find(start).is_some().into())
}

/// `String.prototype.startsWith(searchString, position)`.
fn starts_with(this: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let (s, search) = string_and_search(this, args.get_or_undefined(0), "startsWith", context)?;
    let start = clamp(args.get_or_undefined(1).to_integer_or_infinity(context)?, s.len());
    let end = start + search.len();
    Ok((end <= s.len() && s.as_str().get(start..end) == Some(search.as_str())).into())
}

/// `String.prototype.endsWith(searchString, endPosition)`.
fn ends_with(this: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let (s, search) = string_and_search(this, args.get_or_undefined(0), "endsWith", context)?;
    let end_position = args.get_or_undefined(1);
    let end = if end_position.is_undefined() {
        s.len()
    } else {
        clamp(end_position.to_integer_or_infinity(context)?, s.len())
    };
    let Some(start) = end.checked_sub(search.len()) else {
        return Ok(false.into());
    };
    Ok((s.as_str().get(start..end) == Some(search.as_str())).into())
}
