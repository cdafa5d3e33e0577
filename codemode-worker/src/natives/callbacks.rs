//! `Array.prototype.{map, filter, find, findIndex, some, every}` with a native path for pure callbacks
//! (`r => r.name`, `r => r.score > 50 && r.active`, see [`crate::pure`]), installed per context. Everything else
//! goes to Boa's built-in, captured when the context was built, with the same `this` and arguments.
//!
//! The native path is taken only where the built-in's own steps have no effects either: `this` is an array whose
//! elements `0..length` are all own data properties (so HasProperty and Get run no code and no index is a hole),
//! and for `map` and `filter`, ArraySpeciesCreate would find `%Array%` (no own `constructor`, the prototype's is
//! `%Array%` as a data property, and `%Array%[@@species]` is still the built-in getter). The result is then a
//! fresh array of the callback's answers, as the built-in would build it.

use std::rc::Rc;

use boa_engine::{
    Context, JsObject, JsResult, JsString, JsSymbol, JsValue, native_function::NativeFunction,
    object::builtins::JsArray, property::PropertyKey,
};
use boa_gc::{Finalize, Trace};

use super::{
    builtin, define_method,
    pure::{self, Originals, Pure},
};

/// Which method, and so how the answers become a result.
#[derive(Clone, Copy)]
enum Method {
    Map,
    Filter,
    Find,
    FindIndex,
    Some,
    Every,
}

const METHODS: [(&str, Method); 6] = [
    ("map", Method::Map),
    ("filter", Method::Filter),
    ("find", Method::Find),
    ("findIndex", Method::FindIndex),
    ("some", Method::Some),
    ("every", Method::Every),
];

/// What a method needs besides its arguments, captured before guest code runs.
#[derive(Clone, Trace, Finalize)]
struct Captures {
    #[unsafe_ignore_trace]
    method: Method,
    /// Boa's own method, for everything the native path does not take.
    builtin: JsObject,
    originals: Originals,
    array: JsObject,
    array_proto: JsObject,
    /// The built-in getter of `%Array%[@@species]`.
    species_getter: JsObject,
}

/// Installs the methods on `Array.prototype`.
///
/// # Errors
///
/// Fails only if a built-in cannot be read or redefined, which a fresh context never does.
pub(crate) fn install(originals: &Originals, context: &mut Context) -> JsResult<()> {
    let array = context.intrinsics().constructors().array().constructor();
    let array_proto = context.intrinsics().constructors().array().prototype();
    let species_getter = species_getter(&array).ok_or_else(|| {
        boa_engine::JsNativeError::typ().with_message("the built-in Array[@@species] getter is missing")
    })?;
    for (name, method) in METHODS {
        let captures = Captures {
            method,
            builtin: builtin(&array_proto, name, context)?,
            originals: originals.clone(),
            array: array.clone(),
            array_proto: array_proto.clone(),
            species_getter: species_getter.clone(),
        };
        let key = JsString::from(name);
        let function = NativeFunction::from_copy_closure_with_captures(call, captures);
        define_method(&array_proto, key.clone().into(), key, 1, function, context)?;
    }
    Ok(())
}

fn call(this: &JsValue, args: &[JsValue], captures: &Captures, context: &mut Context) -> JsResult<JsValue> {
    match native(this, args, captures, context) {
        Some(result) => Ok(result),
        None => captures.builtin.call(this, args, context),
    }
}

/// The method's result without calling the callback, or `None` before anything observable happened.
fn native(this: &JsValue, args: &[JsValue], captures: &Captures, context: &mut Context) -> Option<JsValue> {
    let callback = args.first()?.as_callable()?;
    let array = this.as_object()?;
    if !array.is_array() {
        return None;
    }
    // Cheapest refusals first: the length, the species, the callback (compiled once per source), then the items.
    let len = JsArray::from_object(array.clone()).ok()?.length(context).ok()?;
    if len < pure::MIN_ITEMS as u64 {
        return None;
    }
    if matches!(captures.method, Method::Map | Method::Filter) && !species_is_array(&array, captures) {
        return None;
    }
    let compiled = Pure::compile(&callback, 1, &captures.originals, context)?;
    let items = dense_items(&array, len)?;
    let keys = compiled.read_keys(&items, &captures.originals, context)?;
    let answers = Answers { compiled, keys };
    let result = match captures.method {
        Method::Map => {
            let mapped = (0..items.len()).map(|i| answers.value(i, context)).collect::<Option<Vec<_>>>()?;
            JsArray::from_iter(mapped, context).into()
        }
        Method::Filter => {
            let mut kept = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if answers.value(i, context)?.to_boolean() {
                    kept.push(item.clone());
                }
            }
            JsArray::from_iter(kept, context).into()
        }
        Method::Find => {
            answers.first_truthy(items.len(), context)?.map_or_else(JsValue::undefined, |i| items[i].clone())
        }
        Method::FindIndex => JsValue::new(answers.first_truthy(items.len(), context)?.map_or(-1.0, |i| i as f64)),
        Method::Some => JsValue::new(answers.first_truthy(items.len(), context)?.is_some()),
        Method::Every => {
            let mut all = true;
            for i in 0..items.len() {
                if !answers.value(i, context)?.to_boolean() {
                    all = false;
                    break;
                }
            }
            JsValue::new(all)
        }
    };
    pure::count_native();
    Some(result)
}

/// The compiled callback and the keys of every item.
struct Answers {
    compiled: Rc<Pure>,
    keys: Vec<JsValue>,
}

impl Answers {
    /// The callback's answer for item `i`; `None` gives up (the built-in then calls it for real).
    fn value(&self, i: usize, context: &mut Context) -> Option<JsValue> {
        let width = self.compiled.width();
        self.compiled.value(&self.keys[i * width..(i + 1) * width], &[], context).ok()
    }

    /// The first item whose answer is truthy, in index order, asking no further.
    fn first_truthy(&self, len: usize, context: &mut Context) -> Option<Option<usize>> {
        for i in 0..len {
            if self.value(i, context)?.to_boolean() {
                return Some(Some(i));
            }
        }
        Some(None)
    }
}

/// Every element of an array of length `len` when each index below it is an own data property; `None` for a hole
/// or an accessor. (Reading an array's length runs no code.)
fn dense_items(array: &JsObject, len: u64) -> Option<Vec<JsValue>> {
    let len = u32::try_from(len).ok()?;
    let object = array.borrow();
    let properties = object.properties();
    (0..len).map(|k| properties.get(&PropertyKey::from(k)).and_then(|descriptor| descriptor.value().cloned())).collect()
}

/// Whether ArraySpeciesCreate on `array` would create a plain array, found without running code.
fn species_is_array(array: &JsObject, captures: &Captures) -> bool {
    let constructor = PropertyKey::from(JsString::from("constructor"));
    if array.borrow().properties().get(&constructor).is_some() {
        return false;
    }
    if !array.prototype().is_some_and(|prototype| JsObject::equals(&prototype, &captures.array_proto)) {
        return false;
    }
    let inherited = captures.array_proto.borrow().properties().get(&constructor);
    let constructor_is_array = inherited
        .and_then(|descriptor| descriptor.value().and_then(JsValue::as_object))
        .is_some_and(|value| JsObject::equals(&value, &captures.array));
    let species_is_builtin =
        species_getter(&captures.array).is_some_and(|getter| JsObject::equals(&getter, &captures.species_getter));
    constructor_is_array && species_is_builtin
}

/// The getter of `Array[@@species]` when it is an accessor, read without running it.
fn species_getter(array: &JsObject) -> Option<JsObject> {
    let species = array.borrow().properties().get(&PropertyKey::from(JsSymbol::species()));
    species.and_then(|descriptor| descriptor.get().and_then(JsValue::as_object))
}
