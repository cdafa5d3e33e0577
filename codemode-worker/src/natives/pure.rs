//! Pure callbacks, evaluated without calling them. Model code sorts, maps and filters tool results with one-line
//! functions, `(a, b) => b.score - a.score || a.id - b.id`, `r => r.name`, and in Boa each call from a native
//! built-in into such a function costs about 250 ns, most of a 10,000-record sort or map. When a callback's source
//! is a single expression over property reads of its parameters, literals and operators, the built-in reads those
//! properties once per element and evaluates the expression natively, with Boa's own operators.
//!
//! Why nothing observable changes: the calls are the built-in's own business, so a callback whose calls have no
//! effects may be skipped as long as every answer is the one it would have given. The expression reads only its
//! parameters (no free names, no `this`), so its value depends on the elements alone. The reads are taken only
//! where a `[[Get]]` runs no code: ordinary objects and arrays, found as data properties along a prototype chain
//! without proxies, and the operators are applied only to primitives, where they run no code either. Anything else
//! (an accessor, a proxy, an object operand, an operator that throws) gives up before any effect, and the built-in
//! starts over with real calls, which then do whatever they do.

use std::{
    cell::{Cell, RefCell},
    cmp::Ordering,
    collections::HashMap,
    rc::Rc,
};

use boa_engine::{Context, JsObject, JsResult, JsString, JsValue, JsVariant, js_string, property::PropertyKey};
use oxc_allocator::Allocator;
use oxc_ast::ast::{
    ArrowFunctionExpression, BinaryOperator, BindingPattern, Expression, FormalParameters, Function, LogicalOperator,
    Statement, UnaryOperator,
};
use oxc_parser::Parser;
use oxc_span::SourceType;

/// Shorter arrays call the callback: compiling its source costs about as much as 100 calls.
pub(crate) const MIN_ITEMS: usize = 64;

/// Expressions larger than this are left to real calls; callbacks worth compiling are one line.
const MAX_NODES: usize = 64;

/// How many sources the per-thread cache keeps before it starts over.
const CACHE_ENTRIES: usize = 256;

/// Compiled callbacks (or `None`, not pure) by arity and source text, so a callback created in a loop compiles once.
type Cache = HashMap<(usize, String), Option<Rc<Pure>>>;

thread_local! {
    static NATIVE_CALLS: Cell<usize> = const { Cell::new(0) };
    static COMPILED: RefCell<Cache> = RefCell::new(HashMap::new());
}

/// How many built-in calls the engines of this thread answered from a pure callback without calling it: a
/// statistic, which the tests use to prove that the native path was taken.
#[cfg(feature = "engine-api")]
pub fn pure_calls() -> usize {
    NATIVE_CALLS.get()
}

/// Counts one call answered natively.
pub(crate) fn count_native() {
    NATIVE_CALLS.set(NATIVE_CALLS.get() + 1);
}

/// The built-ins a pure callback may use, captured when the context was built, before guest code ran.
#[derive(Clone, boa_gc::Trace, boa_gc::Finalize)]
pub(crate) struct Originals {
    /// `Function.prototype.toString`, which for an ordinary function returns its source text and runs no code.
    pub(crate) function_to_string: JsObject,
    /// `String.prototype.localeCompare`; `a.localeCompare(b)` is evaluated natively only while it is installed.
    pub(crate) locale_compare: JsObject,
}

impl Originals {
    /// Captures the built-ins from a fresh context.
    ///
    /// # Errors
    ///
    /// Fails only if a prototype lacks them, which a fresh context never does.
    pub(crate) fn capture(context: &mut Context) -> JsResult<Self> {
        let constructors = context.intrinsics().constructors();
        let (function_proto, string_proto) = (constructors.function().prototype(), constructors.string().prototype());
        Ok(Self {
            function_to_string: super::builtin(&function_proto, "toString", context)?,
            locale_compare: super::builtin(&string_proto, "localeCompare", context)?,
        })
    }
}

/// A callback compiled from its source: the property paths it reads and the expression over them.
pub(crate) struct Pure {
    paths: Vec<Vec<PropertyKey>>,
    expr: Expr,
    /// A one-parameter callback that returns a read as it is (`r => r.meta`) may read objects; operators may not.
    objects_allowed: bool,
    /// Whether the expression calls `localeCompare`, which must still be the built-in when the call starts.
    uses_locale_compare: bool,
}

/// Which argument of the callback.
#[derive(Clone, Copy)]
enum Side {
    X,
    Y,
}

enum Expr {
    /// The value at `paths[slot]` of the first or second argument.
    Read(Side, usize),
    Literal(JsValue),
    Unary(UnaryOperator, Box<Expr>),
    Binary(BinaryOperator, Box<Expr>, Box<Expr>),
    Logical(LogicalOperator, Box<Expr>, Box<Expr>),
    Conditional(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `s.localeCompare(t)` on two strings.
    LocaleCompare(Box<Expr>, Box<Expr>),
}

/// Something the native path does not handle; the built-in falls back to real calls.
pub(crate) struct GiveUp;

impl Pure {
    /// Compiles `function` when it is an ordinary function of `arity` parameters whose source is one pure
    /// expression; a comparator has two, a `map` or `filter` callback one.
    pub(crate) fn compile(
        function: &JsObject,
        arity: usize,
        originals: &Originals,
        context: &mut Context,
    ) -> Option<Rc<Self>> {
        if !function.is::<boa_engine::builtins::function::OrdinaryFunction>() {
            return None;
        }
        let source = originals.function_to_string.call(&function.clone().into(), &[], context).ok()?;
        let source = source.as_string()?.to_std_string().ok()?;
        let key = (arity, source);
        if let Some(known) = COMPILED.with_borrow(|cache| cache.get(&key).cloned()) {
            return known;
        }
        let compiled = compile_source(&key.1, arity).map(Rc::new);
        COMPILED.with_borrow_mut(|cache| {
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(key, compiled.clone());
        });
        compiled
    }

    /// Reads every path of every item; `None` if a read could run code or yields what the expression cannot take,
    /// or if the expression calls a `localeCompare` that is no longer the built-in. Nothing the expression reads
    /// can change while a built-in evaluates it, so this is checked once per call.
    pub(crate) fn read_keys(
        &self,
        items: &[JsValue],
        originals: &Originals,
        context: &Context,
    ) -> Option<Vec<JsValue>> {
        if self.uses_locale_compare && !locale_compare_is_original(originals, context) {
            return None;
        }
        let mut keys = Vec::with_capacity(items.len() * self.paths.len());
        for item in items {
            for path in &self.paths {
                keys.push(read_path(item, path, self.objects_allowed)?);
            }
        }
        Some(keys)
    }

    /// The callback's result for an item with keys `x` (and, for a comparator, a second item with keys `y`).
    pub(crate) fn value(&self, x: &[JsValue], y: &[JsValue], context: &mut Context) -> Result<JsValue, GiveUp> {
        Eval { x, y }.eval(&self.expr, context)
    }

    /// Whether the item with keys `x` goes after the one with keys `y`, as `comparefn(x, y) > 0` says.
    pub(crate) fn after(&self, x: &[JsValue], y: &[JsValue], context: &mut Context) -> Result<bool, GiveUp> {
        let result = self.value(x, y, context)?;
        let number = result.as_number().map_or_else(|| result.to_number(context).map_err(|_| GiveUp), Ok)?;
        Ok(number > 0.0)
    }

    /// How many keys each item has.
    pub(crate) fn width(&self) -> usize {
        self.paths.len()
    }
}

fn compile_source(source: &str, arity: usize) -> Option<Pure> {
    let allocator = Allocator::default();
    let text = format!("({source})");
    let parsed = Parser::new(&allocator, &text, SourceType::default()).parse_expression().ok()?;
    let (params, body) = match parsed.without_parentheses() {
        Expression::FunctionExpression(function) => function_parts(function)?,
        Expression::ArrowFunctionExpression(arrow) => arrow_parts(arrow)?,
        _ => return None,
    };
    if params.len() != arity {
        return None;
    }
    let mut compiler = Compiler { params, paths: Vec::new(), nodes: 0, uses_locale_compare: false };
    let expr = compiler.expr(body)?;
    let objects_allowed = arity == 1 && matches!(expr, Expr::Read(..));
    Some(Pure { paths: compiler.paths, expr, objects_allowed, uses_locale_compare: compiler.uses_locale_compare })
}

/// The parameter names and the returned expression of `function (a, b) { return <expr>; }`.
fn function_parts<'a, 'b>(function: &'b Function<'a>) -> Option<(Vec<&'b str>, &'b Expression<'a>)> {
    if function.generator || function.r#async {
        return None;
    }
    let params = plain_params(&function.params)?;
    let body = function.body.as_ref()?;
    if !body.directives.is_empty() {
        return None;
    }
    match body.statements.as_slice() {
        [Statement::ReturnStatement(ret)] => Some((params, ret.argument.as_ref()?)),
        _ => None,
    }
}

/// The parameter names and the expression of `(a, b) => <expr>` or `(a, b) => { return <expr>; }`.
fn arrow_parts<'a, 'b>(arrow: &'b ArrowFunctionExpression<'a>) -> Option<(Vec<&'b str>, &'b Expression<'a>)> {
    if arrow.r#async {
        return None;
    }
    let params = plain_params(&arrow.params)?;
    if let Some(expr) = arrow.body.as_expression() {
        return Some((params, expr));
    }
    let oxc_ast::ast::ArrowFunctionBody::FunctionBody(body) = &arrow.body else { return None };
    if !body.directives.is_empty() {
        return None;
    }
    match body.statements.as_slice() {
        [Statement::ReturnStatement(ret)] => Some((params, ret.argument.as_ref()?)),
        _ => None,
    }
}

/// One or two distinct plain parameters: no defaults, patterns or rest.
fn plain_params<'b>(params: &'b FormalParameters<'_>) -> Option<Vec<&'b str>> {
    if params.rest.is_some() || !(1..=2).contains(&params.items.len()) {
        return None;
    }
    let names: Vec<&'b str> = params
        .items
        .iter()
        .map(|param| match (&param.pattern, &param.initializer) {
            (BindingPattern::BindingIdentifier(id), None) => Some(id.name.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    (names.len() == 1 || names[0] != names[1]).then_some(names)
}

struct Compiler<'b> {
    params: Vec<&'b str>,
    paths: Vec<Vec<PropertyKey>>,
    nodes: usize,
    uses_locale_compare: bool,
}

impl Compiler<'_> {
    fn expr(&mut self, expr: &Expression<'_>) -> Option<Expr> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return None;
        }
        Some(match expr.without_parentheses() {
            Expression::NumericLiteral(n) => Expr::Literal(JsValue::new(n.value)),
            Expression::StringLiteral(s) if !s.lone_surrogates => {
                Expr::Literal(JsString::from(s.value.as_str().encode_utf16().collect::<Vec<_>>().as_slice()).into())
            }
            Expression::BooleanLiteral(b) => Expr::Literal(JsValue::new(b.value)),
            Expression::NullLiteral(_) => Expr::Literal(JsValue::null()),
            Expression::UnaryExpression(unary) => match unary.operator {
                UnaryOperator::UnaryNegation | UnaryOperator::UnaryPlus | UnaryOperator::LogicalNot => {
                    Expr::Unary(unary.operator, Box::new(self.expr(&unary.argument)?))
                }
                _ => return None,
            },
            Expression::BinaryExpression(binary) => match binary.operator {
                BinaryOperator::Addition
                | BinaryOperator::Subtraction
                | BinaryOperator::Multiplication
                | BinaryOperator::Division
                | BinaryOperator::Remainder
                | BinaryOperator::LessThan
                | BinaryOperator::LessEqualThan
                | BinaryOperator::GreaterThan
                | BinaryOperator::GreaterEqualThan
                | BinaryOperator::StrictEquality
                | BinaryOperator::StrictInequality
                | BinaryOperator::Equality
                | BinaryOperator::Inequality => Expr::Binary(
                    binary.operator,
                    Box::new(self.expr(&binary.left)?),
                    Box::new(self.expr(&binary.right)?),
                ),
                _ => return None,
            },
            Expression::LogicalExpression(logical) => Expr::Logical(
                logical.operator,
                Box::new(self.expr(&logical.left)?),
                Box::new(self.expr(&logical.right)?),
            ),
            Expression::ConditionalExpression(cond) => Expr::Conditional(
                Box::new(self.expr(&cond.test)?),
                Box::new(self.expr(&cond.consequent)?),
                Box::new(self.expr(&cond.alternate)?),
            ),
            Expression::CallExpression(call) => {
                let Expression::StaticMemberExpression(callee) = call.callee.without_parentheses() else {
                    return None;
                };
                if call.optional || callee.optional || callee.property.name != "localeCompare" {
                    return None;
                }
                let [argument] = call.arguments.as_slice() else { return None };
                let argument = argument.as_expression()?;
                self.uses_locale_compare = true;
                Expr::LocaleCompare(Box::new(self.expr(&callee.object)?), Box::new(self.expr(argument)?))
            }
            Expression::Identifier(_)
            | Expression::StaticMemberExpression(_)
            | Expression::ComputedMemberExpression(_) => {
                let (side, path) = self.path(expr)?;
                let slot = match self.paths.iter().position(|known| *known == path) {
                    Some(slot) => slot,
                    None => {
                        self.paths.push(path);
                        self.paths.len() - 1
                    }
                };
                Expr::Read(side, slot)
            }
            _ => return None,
        })
    }

    /// `a`, `a.p`, `a["p"]`, `a[0]`, `a.p.q`: a parameter and the property names read from it.
    fn path(&self, expr: &Expression<'_>) -> Option<(Side, Vec<PropertyKey>)> {
        match expr.without_parentheses() {
            Expression::Identifier(id) if id.name == self.params[0] => Some((Side::X, Vec::new())),
            Expression::Identifier(id) if self.params.get(1).is_some_and(|b| id.name == *b) => {
                Some((Side::Y, Vec::new()))
            }
            Expression::StaticMemberExpression(member) if !member.optional => {
                let (side, mut path) = self.path(&member.object)?;
                path.push(key(member.property.name.as_str()));
                Some((side, path))
            }
            Expression::ComputedMemberExpression(member) if !member.optional => {
                let (side, mut path) = self.path(&member.object)?;
                let name = match &member.expression {
                    Expression::StringLiteral(s) if !s.lone_surrogates => key(s.value.as_str()),
                    Expression::NumericLiteral(n) if n.value.fract() == 0.0 && (0.0..4e9).contains(&n.value) => {
                        key(&(n.value as u64).to_string())
                    }
                    _ => return None,
                };
                path.push(name);
                Some((side, path))
            }
            _ => None,
        }
    }
}

fn key(name: &str) -> PropertyKey {
    PropertyKey::from(JsString::from(name.encode_utf16().collect::<Vec<_>>().as_slice()))
}

/// `item` followed along `path` by `[[Get]]`s that run no code; the end must be a primitive unless
/// `objects_allowed`.
fn read_path(item: &JsValue, path: &[PropertyKey], objects_allowed: bool) -> Option<JsValue> {
    let mut value = item.clone();
    for key in path {
        value = match value.variant() {
            JsVariant::Object(object) => read_data_property(&object, key)?,
            // A string's own `length`; other reads of primitives go through their prototypes, left to real calls.
            JsVariant::String(s) if *key == PropertyKey::from(js_string!("length")) => JsValue::new(s.len()),
            _ => return None,
        };
    }
    (objects_allowed || !value.is_object()).then_some(value)
}

/// OrdinaryGet where every object on the way is ordinary (or an array) and the property found is a data property.
fn read_data_property(object: &JsObject, key: &PropertyKey) -> Option<JsValue> {
    let mut current = object.clone();
    loop {
        if !(current.is_ordinary() || current.is_array()) {
            return None;
        }
        // An array's `length` is not in its property map; it is left to real calls.
        if current.is_array() && *key == PropertyKey::from(js_string!("length")) {
            return None;
        }
        if let Some(descriptor) = current.borrow().properties().get(key) {
            return descriptor.value().cloned();
        }
        match current.prototype() {
            Some(prototype) => current = prototype,
            None => return Some(JsValue::undefined()),
        }
    }
}

/// One evaluation: the keys of both items.
struct Eval<'k> {
    x: &'k [JsValue],
    y: &'k [JsValue],
}

impl Eval<'_> {
    fn eval(&self, expr: &Expr, context: &mut Context) -> Result<JsValue, GiveUp> {
        Ok(match expr {
            Expr::Read(Side::X, slot) => self.x[*slot].clone(),
            Expr::Read(Side::Y, slot) => self.y[*slot].clone(),
            Expr::Literal(value) => value.clone(),
            Expr::Unary(op, argument) => {
                let value = self.eval(argument, context)?;
                match op {
                    UnaryOperator::UnaryNegation => value.neg(context).map_err(|_| GiveUp)?,
                    UnaryOperator::UnaryPlus => JsValue::new(value.to_number(context).map_err(|_| GiveUp)?),
                    _ => JsValue::new(!value.to_boolean()),
                }
            }
            Expr::Binary(op, left, right) => {
                let (x, y) = (self.eval(left, context)?, self.eval(right, context)?);
                binary(*op, &x, &y, context).map_err(|_| GiveUp)?
            }
            Expr::Logical(op, left, right) => {
                let x = self.eval(left, context)?;
                let short = match op {
                    LogicalOperator::Or => x.to_boolean(),
                    LogicalOperator::And => !x.to_boolean(),
                    LogicalOperator::Coalesce => !x.is_null_or_undefined(),
                };
                if short { x } else { self.eval(right, context)? }
            }
            Expr::Conditional(test, yes, no) => {
                if self.eval(test, context)?.to_boolean() {
                    self.eval(yes, context)?
                } else {
                    self.eval(no, context)?
                }
            }
            Expr::LocaleCompare(this, that) => {
                let (this, that) = (self.eval(this, context)?, self.eval(that, context)?);
                let (Some(s), Some(t)) = (this.as_string(), that.as_string()) else { return Err(GiveUp) };
                // Boa's `localeCompare` without Intl compares code units.
                JsValue::new(match s.cmp(&t) {
                    Ordering::Less => -1,
                    Ordering::Equal => 0,
                    Ordering::Greater => 1,
                })
            }
        })
    }
}

/// `String.prototype.localeCompare` is still the built-in, as a data property (reading it runs no code).
fn locale_compare_is_original(originals: &Originals, context: &Context) -> bool {
    let prototype = context.intrinsics().constructors().string().prototype();
    let installed = prototype.borrow().properties().get(&PropertyKey::from(js_string!("localeCompare")));
    installed
        .and_then(|descriptor| descriptor.value().cloned())
        .and_then(|value| value.as_object())
        .is_some_and(|function| JsObject::equals(&function, &originals.locale_compare))
}

/// A binary operator on two primitives, by Boa's own implementation (the interpreter's).
fn binary(op: BinaryOperator, x: &JsValue, y: &JsValue, context: &mut Context) -> boa_engine::JsResult<JsValue> {
    if let (Some(a), Some(b)) = (x.as_number(), y.as_number()) {
        match op {
            BinaryOperator::Subtraction => return Ok(JsValue::new(a - b)),
            BinaryOperator::LessThan => return Ok(JsValue::new(a < b)),
            BinaryOperator::GreaterThan => return Ok(JsValue::new(a > b)),
            _ => {}
        }
    }
    Ok(match op {
        BinaryOperator::Addition => x.add(y, context)?,
        BinaryOperator::Subtraction => x.sub(y, context)?,
        BinaryOperator::Multiplication => x.mul(y, context)?,
        BinaryOperator::Division => x.div(y, context)?,
        BinaryOperator::Remainder => x.rem(y, context)?,
        BinaryOperator::LessThan => JsValue::new(x.lt(y, context)?),
        BinaryOperator::LessEqualThan => JsValue::new(x.le(y, context)?),
        BinaryOperator::GreaterThan => JsValue::new(x.gt(y, context)?),
        BinaryOperator::GreaterEqualThan => JsValue::new(x.ge(y, context)?),
        BinaryOperator::StrictEquality => JsValue::new(x.strict_equals(y)),
        BinaryOperator::StrictInequality => JsValue::new(!x.strict_equals(y)),
        BinaryOperator::Equality => JsValue::new(x.equals(y, context)?),
        _ => JsValue::new(!x.equals(y, context)?),
    })
}

#[cfg(test)]
mod tests {
    use super::compile_source;

    #[test]
    fn compiles_one_parameter_callbacks() {
        for source in ["r => r.name", "function (r) { return r.score > 50 && r.active; }", "(r) => r.meta"] {
            assert!(compile_source(source, 1).is_some(), "{source}");
        }
        for source in ["(r, i) => r.x + i", "r => seen.add(r)", "r => r.name.toUpperCase()"] {
            assert!(compile_source(source, 1).is_none(), "{source}");
        }
        assert!(compile_source("r => r.meta", 1).is_some_and(|pure| pure.objects_allowed));
        assert!(compile_source("r => r.meta.rank + 1", 1).is_some_and(|pure| !pure.objects_allowed));
    }

    #[test]
    fn compiles_one_expression_comparators_only() {
        for source in [
            "function (a, b) { return b.score - a.score || a.id - b.id; }",
            "(a, b) => a - b",
            "(x, y) => { return x.name.localeCompare(y.name); }",
            "function byKey(a, b) { return a[\"k\"] < b[\"k\"] ? -1 : a[\"k\"] > b[\"k\"] ? 1 : 0; }",
            "(a, b) => b[1] - a[1]",
            "(a, b) => a.meta.rank - b.meta.rank",
        ] {
            assert!(compile_source(source, 2).is_some(), "{source}");
        }
        for source in [
            "(a, b) => f(a) - f(b)",
            "(a, b) => a.x - b.x - offset",
            "function (a, b) { calls++; return a - b; }",
            "(a, a2 = 1) => a - a2",
            "({ x }, { y }) => x - y",
            "(a, b) => this.k",
            "async (a, b) => a - b",
            "function* (a, b) { return a - b; }",
            "(a, b) => a.x = b.x",
            "(a, b) => a[b] - b[a]",
            "(a, b) => Math.random() - 0.5",
            "(a, b) => a?.x - b?.x",
            "compare(a, b) { return a - b; }",
            "function (a, b) { 'use strict'; return a - b; }",
            "(a) => a.x",
        ] {
            assert!(compile_source(source, 2).is_none(), "{source}");
        }
    }
}
