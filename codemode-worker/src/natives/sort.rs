//! Native, comparator-safe `sort`/`toSorted` for arrays and typed arrays, installed per context.
//! Boa 0.22 sorts with Rust's `sort_by`, which panics (ending the worker) when a comparator is not a total order
//! (`() => Math.random() - 0.5`, NaN results, objects whose `toString` changes). Here user code never decides an
//! order that Rust's sort relies on: a comparator drives our own stable merge sort, which terminates for any
//! answers, and the default orders sort precomputed keys under a total order. Not a new API: the observable steps
//! (argument checks, ToObject, length, HasProperty/Get, Set/DeletePropertyOrThrow) follow the spec's
//! `SortIndexedProperties` in order; only the sequence of comparator calls is ours, as the spec allows. A comparator
//! that is one pure expression (`crate::pure`) is not called at all: the same merge sort asks it natively.

use std::cmp::Ordering;

use boa_engine::{
    Context, JsArgs, JsNativeError, JsObject, JsResult, JsString, JsValue, JsVariant, js_string,
    native_function::NativeFunction,
    object::builtins::{JsArray, JsTypedArray},
};
use boa_gc::{Finalize, Trace};

use super::{
    builtin, define_method,
    pure::{self, Originals, Pure},
};

/// Installs the sorts on `Array.prototype` and `%TypedArray%.prototype`.
///
/// # Errors
///
/// Fails only if a prototype property cannot be read or redefined, which a fresh context never does.
pub(crate) fn install(originals: &Originals, context: &mut Context) -> JsResult<()> {
    let array_proto = context.intrinsics().constructors().array().prototype();
    let methods: [(&str, ArrayMethod); 2] = [("sort", array_sort), ("toSorted", array_to_sorted)];
    for (name, function) in methods {
        let key = JsString::from(name);
        let function = NativeFunction::from_copy_closure_with_captures(function, originals.clone());
        define_method(&array_proto, key.clone().into(), key, 1, function, context)?;
    }
    let typed_proto = context.intrinsics().constructors().typed_array().prototype();
    let originals = TypedBuiltins {
        at: builtin(&typed_proto, "at", context)?,
        to_reversed: builtin(&typed_proto, "toReversed", context)?,
    };
    let typed: [(&str, TypedMethod); 2] = [("sort", typed_sort), ("toSorted", typed_to_sorted)];
    for (name, function) in typed {
        let key = JsString::from(name);
        let function = NativeFunction::from_copy_closure_with_captures(function, originals.clone());
        define_method(&typed_proto, key.clone().into(), key, 1, function, context)?;
    }
    Ok(())
}

type ArrayMethod = fn(&JsValue, &[JsValue], &Originals, &mut Context) -> JsResult<JsValue>;

type TypedMethod = fn(&JsValue, &[JsValue], &TypedBuiltins, &mut Context) -> JsResult<JsValue>;

/// The typed-array built-ins the sorts lean on, captured before guest code runs: `at` validates a typed array
/// (ValidateTypedArray, in O(1)) and `toReversed` creates a same-type copy, neither running user code.
#[derive(Clone, Trace, Finalize)]
struct TypedBuiltins {
    at: JsObject,
    to_reversed: JsObject,
}

/// Step 1 of every sort: the comparator is a function or undefined.
fn comparator(value: &JsValue, method: &str) -> JsResult<Option<JsObject>> {
    if value.is_undefined() {
        return Ok(None);
    }
    value.as_callable().map(Some).ok_or_else(|| {
        JsNativeError::typ()
            .with_message(format!("{method}: The comparison function must be either a function or undefined"))
            .into()
    })
}

/// `Array.prototype.sort(comparefn)`.
fn array_sort(this: &JsValue, args: &[JsValue], originals: &Originals, context: &mut Context) -> JsResult<JsValue> {
    let comparefn = comparator(args.get_or_undefined(0), "Array.prototype.sort")?;
    let object = this.to_object(context)?;
    let len = object.get(js_string!("length"), context)?.to_length(context)?;
    let mut items = Vec::new();
    for k in 0..len {
        if object.has_property(k, context)? {
            items.push(object.get(k, context)?);
        }
    }
    let sorted = sort_array_items(items, comparefn.as_ref(), originals, context)?;
    let count = sorted.len() as u64;
    for (j, item) in sorted.into_iter().enumerate() {
        object.set(j, item, true, context)?;
    }
    // The holes skipped above stay holes, at the end.
    for j in count..len {
        object.delete_property_or_throw(j, context)?;
    }
    Ok(object.into())
}

/// `Array.prototype.toSorted(comparefn)`.
fn array_to_sorted(
    this: &JsValue,
    args: &[JsValue],
    originals: &Originals,
    context: &mut Context,
) -> JsResult<JsValue> {
    let comparefn = comparator(args.get_or_undefined(0), "Array.prototype.toSorted")?;
    let object = this.to_object(context)?;
    let len = object.get(js_string!("length"), context)?.to_length(context)?;
    if len > u64::from(u32::MAX) {
        return Err(JsNativeError::range().with_message("Array.prototype.toSorted: invalid array length").into());
    }
    let mut items = Vec::new();
    for k in 0..len {
        items.push(object.get(k, context)?);
    }
    let sorted = sort_array_items(items, comparefn.as_ref(), originals, context)?;
    Ok(JsArray::from_iter(sorted, context).into())
}

/// Sorts as `SortCompare` orders: undefined last without reaching the comparator, the rest by the comparator or,
/// without one, by their strings.
fn sort_array_items(
    items: Vec<JsValue>,
    comparefn: Option<&JsObject>,
    originals: &Originals,
    context: &mut Context,
) -> JsResult<Vec<JsValue>> {
    let total = items.len();
    let mut defined: Vec<JsValue> = items.into_iter().filter(|item| !item.is_undefined()).collect();
    let undefined_count = total - defined.len();
    match comparefn {
        Some(comparefn) => match sort_by_pure_comparator(&defined, comparefn, originals, context) {
            Some(sorted) => defined = sorted,
            None => defined = merge_sort(defined, |x, y| call_comparator(comparefn, x, y, context))?,
        },
        None => {
            // Each string once: the spec calls ToString per comparison, but how often an order is asked for is
            // up to the implementation, and one key per item keeps the order total even if `toString` is not.
            let mut keyed = Vec::with_capacity(defined.len());
            for item in defined {
                keyed.push((item.to_string(context)?, item));
            }
            keyed.sort_by(|(x, _), (y, _)| x.cmp(y));
            defined = keyed.into_iter().map(|(_, item)| item).collect();
        }
    }
    defined.extend(std::iter::repeat_n(JsValue::undefined(), undefined_count));
    Ok(defined)
}

/// Sorts `items` as the comparator would, without calling it, when it is pure (see [`pure`]); `None` when it is
/// not, or when an item or an answer is beyond the fast path, before anything observable happened.
fn sort_by_pure_comparator(
    items: &[JsValue],
    comparefn: &JsObject,
    originals: &Originals,
    context: &mut Context,
) -> Option<Vec<JsValue>> {
    if items.len() < pure::MIN_ITEMS {
        return None;
    }
    let pure = Pure::compile(comparefn, 2, originals, context)?;
    let keys = pure.read_keys(items, originals, context)?;
    let width = pure.width();
    let keys_of = |i: u32| &keys[i as usize * width..(i as usize + 1) * width];
    let order: Vec<u32> = (0..u32::try_from(items.len()).ok()?).collect();
    let order = merge_sort(order, |&x, &y| pure.after(keys_of(x), keys_of(y), context)).ok()?;
    pure::count_native();
    Some(order.into_iter().map(|i| items[i as usize].clone()).collect())
}

/// Whether `comparefn(x, y)` says `x` goes after `y`: ToNumber of its result is above zero (NaN is not).
fn call_comparator(comparefn: &JsObject, x: &JsValue, y: &JsValue, context: &mut Context) -> JsResult<bool> {
    let result = comparefn.call(&JsValue::undefined(), &[x.clone(), y.clone()], context)?;
    let number = match result.variant() {
        JsVariant::Integer32(i) => f64::from(i),
        JsVariant::Float64(f) => f,
        _ => result.to_number(context)?,
    };
    Ok(number > 0.0)
}

/// A stable merge sort (binary-insertion-sorted runs of 32, then bottom-up merges) in which an item of the right
/// run goes first only when `after(left, right)` holds. It terminates after O(n log n) questions whatever the
/// answers, and returns a permutation of `items`; the first error stops it and is returned.
fn merge_sort<T: Clone, E>(mut items: Vec<T>, mut after: impl FnMut(&T, &T) -> Result<bool, E>) -> Result<Vec<T>, E> {
    const RUN: usize = 32;
    let n = items.len();
    for lo in (0..n).step_by(RUN) {
        let hi = (lo + RUN).min(n);
        // Binary insertion: each item goes after every earlier item it does not go before, so equal items keep
        // their order, and the questions per item stay at log2 of the run.
        for i in lo + 1..hi {
            let (mut low, mut high) = (lo, i);
            while low < high {
                let middle = low + (high - low) / 2;
                if after(&items[middle], &items[i])? {
                    high = middle;
                } else {
                    low = middle + 1;
                }
            }
            items[low..=i].rotate_right(1);
        }
    }
    let mut width = RUN;
    let mut scratch: Vec<T> = Vec::with_capacity(n);
    while width < n {
        scratch.clear();
        for lo in (0..n).step_by(2 * width) {
            let mid = (lo + width).min(n);
            let hi = (lo + 2 * width).min(n);
            // Runs already in order (sorted or nearly sorted input) cost one question instead of a merge.
            if mid == hi || !after(&items[mid - 1], &items[mid])? {
                scratch.extend_from_slice(&items[lo..hi]);
                continue;
            }
            let (mut i, mut j) = (lo, mid);
            while i < mid && j < hi {
                if after(&items[i], &items[j])? {
                    scratch.push(items[j].clone());
                    j += 1;
                } else {
                    scratch.push(items[i].clone());
                    i += 1;
                }
            }
            scratch.extend_from_slice(&items[i..mid]);
            scratch.extend_from_slice(&items[j..hi]);
        }
        std::mem::swap(&mut items, &mut scratch);
        width *= 2;
    }
    Ok(items)
}

/// ValidateTypedArray and TypedArrayLength: the typed array behind `this` and its length.
fn typed_array(this: &JsValue, builtins: &TypedBuiltins, context: &mut Context) -> JsResult<(JsObject, u64)> {
    builtins.at.call(this, &[], context)?;
    let object = this.as_object().ok_or_else(|| JsNativeError::typ().with_message("not a typed array"))?;
    let len = JsTypedArray::from_object(object.clone())?.length(context)?;
    Ok((object, len as u64))
}

/// Reads `len` items of a typed array and sorts them: by the comparator, or numerically (NaN last, -0 before +0).
fn sort_typed_items(
    object: &JsObject,
    len: u64,
    comparefn: Option<&JsObject>,
    context: &mut Context,
) -> JsResult<Vec<JsValue>> {
    let mut items = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    for k in 0..len {
        items.push(object.get(k, context)?);
    }
    if let Some(comparefn) = comparefn {
        return merge_sort(items, |x, y| call_comparator(comparefn, x, y, context));
    }
    items.sort_by(compare_typed_elements);
    Ok(items)
}

/// The default order of typed-array elements, total over every pair: BigInts by value, numbers numerically
/// with -0 before +0 and NaN last (elements of one typed array are all BigInts or all numbers).
fn compare_typed_elements(x: &JsValue, y: &JsValue) -> Ordering {
    if let (Some(x), Some(y)) = (x.as_bigint(), y.as_bigint()) {
        return x.cmp(&y);
    }
    let (x, y) = (x.as_number().unwrap_or(f64::NAN), y.as_number().unwrap_or(f64::NAN));
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => {
            x.partial_cmp(&y).unwrap_or(Ordering::Equal).then(y.is_sign_negative().cmp(&x.is_sign_negative()))
        }
    }
}

/// `%TypedArray%.prototype.sort(comparefn)`.
fn typed_sort(this: &JsValue, args: &[JsValue], builtins: &TypedBuiltins, context: &mut Context) -> JsResult<JsValue> {
    let comparefn = comparator(args.get_or_undefined(0), "%TypedArray%.prototype.sort")?;
    let (object, len) = typed_array(this, builtins, context)?;
    let sorted = sort_typed_items(&object, len, comparefn.as_ref(), context)?;
    // A comparator may have shrunk or detached the buffer; writes past its end are ignored, as the spec says.
    for (j, item) in sorted.into_iter().enumerate() {
        object.set(j, item, true, context)?;
    }
    Ok(object.into())
}

/// `%TypedArray%.prototype.toSorted(comparefn)`.
fn typed_to_sorted(
    this: &JsValue,
    args: &[JsValue],
    builtins: &TypedBuiltins,
    context: &mut Context,
) -> JsResult<JsValue> {
    let comparefn = comparator(args.get_or_undefined(0), "%TypedArray%.prototype.toSorted")?;
    let (object, len) = typed_array(this, builtins, context)?;
    // TypedArrayCreateSameType(O, len): `toReversed` builds exactly that copy; every element is overwritten below.
    let copy = builtins.to_reversed.call(this, &[], context)?;
    let copy = copy.as_object().ok_or_else(|| JsNativeError::typ().with_message("toReversed returned no array"))?;
    let sorted = sort_typed_items(&object, len, comparefn.as_ref(), context)?;
    for (j, item) in sorted.into_iter().enumerate() {
        copy.set(j, item, true, context)?;
    }
    Ok(copy.into())
}

#[cfg(test)]
mod tests {
    use super::merge_sort;

    #[test]
    fn merge_sort_is_stable_and_survives_any_answers() {
        let items: Vec<(u8, usize)> = (0..100).map(|i| ((i * 7 % 5) as u8, i)).collect();
        let sorted = merge_sort(items.clone(), |x, y| Ok::<_, ()>(x.0 > y.0)).unwrap();
        let mut expected = items.clone();
        expected.sort_by_key(|item| item.0);
        assert_eq!(sorted, expected);
        let mut flip = false;
        let chaos = merge_sort(items.clone(), |_, _| {
            flip = !flip;
            Ok::<_, ()>(flip)
        })
        .unwrap();
        let mut chaos_ids: Vec<usize> = chaos.iter().map(|item| item.1).collect();
        chaos_ids.sort_unstable();
        assert_eq!(chaos_ids, (0..100).collect::<Vec<_>>());
        assert_eq!(merge_sort(items, |_, _| Err("stop")), Err("stop"));
    }
}
