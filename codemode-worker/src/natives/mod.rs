//! Native replacements for built-ins that model code leans on, installed into every context by [`install`]:
//! linear-time String and RegExp methods ([`strings`]), a native `JSON.parse` ([`json`]), comparator-safe sorts
//! ([`sort`]) and native evaluation of pure one-expression callbacks ([`callbacks`], [`pure`]).
//! They are not a new API: each follows the ECMAScript steps of the function it replaces and has the same name,
//! length and attributes, so guest code cannot tell them apart from the built-ins except by speed (and by not
//! crashing the worker on a comparator that is not a total order).

mod callbacks;
pub(crate) mod json;
pub(crate) mod pure;
mod sort;
mod strings;

use boa_engine::{
    Context, JsNativeError, JsObject, JsResult, JsString, native_function::NativeFunction,
    object::FunctionObjectBuilder, property::PropertyDescriptor, property::PropertyKey,
};

#[cfg(feature = "engine-api")]
pub use pure::pure_calls;

/// Installs every native replacement into `context`: the String and RegExp methods of [`strings`], `JSON.parse`,
/// `Array.prototype.{sort, toSorted}` and `%TypedArray%.prototype.{sort, toSorted}`, and
/// `Array.prototype.{map, filter, find, findIndex, some, every}`.
///
/// Call it once per context, after the realm is built and before guest code runs.
///
/// # Errors
///
/// Fails only if a prototype property cannot be redefined, which a fresh context never does.
pub fn install(context: &mut Context) -> JsResult<()> {
    strings::install(context)?;
    json::install(context)?;
    let originals = pure::Originals::capture(context)?;
    sort::install(&originals, context)?;
    callbacks::install(&originals, context)
}

/// Defines a builtin-shaped method: writable, configurable, not enumerable, not a constructor.
pub(crate) fn define_method(
    target: &JsObject,
    key: PropertyKey,
    name: JsString,
    length: usize,
    function: NativeFunction,
    context: &mut Context,
) -> JsResult<JsObject> {
    let function =
        FunctionObjectBuilder::new(context.realm(), function).name(name).length(length).constructor(false).build();
    target.define_property_or_throw(
        key,
        PropertyDescriptor::builder().value(function.clone()).writable(true).enumerable(false).configurable(true),
        context,
    )?;
    Ok(function.into())
}

/// The function at `object[name]`, read once while building a context.
pub(crate) fn builtin(object: &JsObject, name: &str, context: &mut Context) -> JsResult<JsObject> {
    object
        .get(JsString::from(name), context)?
        .as_callable()
        .ok_or_else(|| JsNativeError::typ().with_message(format!("the built-in {name} is missing")).into())
}
