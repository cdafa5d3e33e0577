//! `Script::with_realm`, the patched Boa's one addition the worker builds on (`vendor/boa_engine/PATCH.md`): code
//! compiled once runs in each realm it is bound to as if parsed there, the guard refuses code whose compilation
//! depended on its realm, and binding leaves no inline cache entry behind. Only in builds with the patched Boa.
#![cfg(feature = "patched-boa")]

use boa_engine::{Context, JsValue, Script, Source};

/// A context with Boa's `fuzz` budget (the workspace builds Boa with it) set high enough for these probes.
fn context() -> Context {
    Context::builder().instructions_remaining(1 << 30).build().expect("a context builds")
}

fn compiled(source: &str, scratch: &mut Context) -> Script {
    let script = Script::parse(Source::from_bytes(source), None, scratch).expect("the script parses");
    script.codeblock(scratch).expect("the script compiles");
    script
}

fn eval(source: &str, context: &mut Context) -> JsValue {
    context.eval(Source::from_bytes(source)).expect("the probe runs")
}

#[test]
fn compiled_code_creates_its_objects_in_the_realm_it_is_bound_to() {
    let mut scratch = context();
    let script = compiled(
        "(function () { Array.prototype.marked = true; return Object.getPrototypeOf([]) === Array.prototype; })()",
        &mut scratch,
    );
    let mut first = context();
    let bound = script.with_realm(first.realm().clone()).expect("the script binds");
    assert_eq!(bound.evaluate(&mut first).expect("it runs"), JsValue::from(true));
    assert_eq!(eval("[].marked", &mut first), JsValue::from(true));
    let mut second = context();
    assert_eq!(eval("[].marked", &mut second), JsValue::undefined(), "a later realm sees nothing of the first");
    assert_eq!(eval("[].marked", &mut scratch), JsValue::undefined(), "nor does the realm it was compiled in");
}

#[test]
fn a_script_that_declares_global_lexical_bindings_is_refused_after_it_was_compiled() {
    for source in ["let x = 1; x", "const y = 2;", "class Z {}"] {
        let mut scratch = context();
        let script = compiled(source, &mut scratch);
        let other = context();
        let error = script.with_realm(other.realm().clone()).expect_err(source).to_string();
        assert!(error.contains("is bound to its realm"), "{source}: {error}");
    }
}

#[test]
fn a_script_compiled_against_a_global_scope_with_lexical_bindings_is_refused() {
    let mut scratch = context();
    eval("const hidden = 1;", &mut scratch);
    let script = compiled("(function () { return hidden; })", &mut scratch);
    let other = context();
    let error = script.with_realm(other.realm().clone()).expect_err("refused").to_string();
    assert!(error.contains("is bound to its realm"), "{error}");
}

#[test]
fn a_script_not_yet_compiled_is_refused() {
    let mut scratch = context();
    let script = Script::parse(Source::from_bytes("(function () {})"), None, &mut scratch).expect("parses");
    let other = context();
    let error = script.with_realm(other.realm().clone()).expect_err("refused").to_string();
    assert!(error.contains("compile the script"), "{error}");
}

/// One property read site, bound into more realms than its polymorphic cache has entries (4), each realm with
/// objects of its own shapes: every realm reads its own values, in realms bound while earlier ones are still alive.
#[test]
fn a_property_site_reads_each_realms_own_objects() {
    let mut scratch = context();
    let script = compiled("(function () { return (o) => o.value; })()", &mut scratch);
    let mut realms: Vec<(Context, JsValue)> = Vec::new();
    for n in 0..8 {
        let mut context = context();
        let read = script.with_realm(context.realm().clone()).expect("binds").evaluate(&mut context).expect("runs");
        realms.push((context, read));
        let (context, read) = realms.last_mut().expect("just pushed");
        let object = eval(&format!("({{ pad{n}: 0, value: {n} }})"), context);
        let read = read.as_callable().expect("a function").clone();
        let value = read.call(&JsValue::undefined(), &[object], context).expect("reads");
        assert_eq!(value, JsValue::from(n));
    }
}
