//! Guest-side JavaScript that every fresh realm runs: the prelude and the extras.
//!
//! Parsing and compiling the 14 KB prelude took about 3 ms of a 3.5 ms context build (PERFORMANCE-NOTES.md,
//! "Fresh contexts"). With the `patched-boa` feature each thread therefore parses and compiles each script once, in
//! a scratch context of its own whose realm no guest ever enters, and every context then runs that compiled code in
//! its own new realm through `Script::with_realm` (the patched Boa in `vendor/boa_engine`). Running compiled code
//! creates every function, object and environment in the realm it runs in, so each cell's guest API is as fresh as
//! if its source had been parsed there: nothing one cell does to its globals or to the prelude's objects is visible
//! to the next. What is shared is immutable: bytecode, its string and number constants, and nested function code;
//! `with_realm` empties the inline caches on every bind, so no cache entry crosses from one cell to the next.
//!
//! The scripts declare no global lexical bindings (each is one parenthesised function expression), which is what
//! makes their code independent of the realm they were compiled in; `with_realm` refuses any other script.
//!
//! Without the feature (crates.io's Boa, which has no `with_realm`), every context parses and compiles the scripts
//! itself.

use boa_engine::{Context, JsResult, JsValue};

/// Whether this build shares compiled scripts between realms (the `patched-boa` feature).
pub const SHARED_SCRIPTS: bool = cfg!(feature = "patched-boa");

/// A guest script every fresh realm runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shared {
    /// `prelude.js`: evaluates to the prelude's function.
    Prelude,
    /// `extras.js`: evaluates to the extras' factory.
    Extras,
}

impl Shared {
    fn source(self) -> &'static str {
        match self {
            Shared::Prelude => include_str!("prelude.js"),
            Shared::Extras => include_str!("extras.js"),
        }
    }
}

/// Evaluates `script` in `context`'s current realm: with `patched-boa`, its code compiled once on this thread;
/// without, parsed and compiled in `context`.
///
/// # Errors
///
/// When the script throws (ours never do) or `context`'s instruction budget runs out.
pub fn evaluate(script: Shared, context: &mut Context) -> JsResult<JsValue> {
    #[cfg(feature = "patched-boa")]
    {
        compiled::evaluate(script, context)
    }
    #[cfg(not(feature = "patched-boa"))]
    {
        boa_engine::Script::parse(boa_engine::Source::from_bytes(script.source()), None, context)?.evaluate(context)
    }
}

/// The compiled scripts of each engine thread, run in other realms through the patched Boa's `Script::with_realm`.
#[cfg(feature = "patched-boa")]
mod compiled {
    use std::cell::RefCell;
    use std::rc::Rc;

    use boa_engine::context::ContextBuilder;
    use boa_engine::{Context, JsResult, JsValue, Script, Source};

    use super::Shared;

    /// This thread's compiled scripts. Leaked on purpose: the engine thread lives as long as its worker, and a `Gc`
    /// must not be dropped by a thread-local destructor that may run after the thread's collector is gone.
    struct Compiled {
        scratch: Option<Context>,
        scripts: [Option<Script>; 2],
    }

    thread_local! {
        static COMPILED: &'static RefCell<Compiled> =
            Box::leak(Box::new(RefCell::new(Compiled { scratch: None, scripts: [None, None] })));
    }

    fn index(script: Shared) -> usize {
        match script {
            Shared::Prelude => 0,
            Shared::Extras => 1,
        }
    }

    /// Evaluates `script` in `context`'s current realm, compiling it on this thread's first use.
    pub(super) fn evaluate(script: Shared, context: &mut Context) -> JsResult<JsValue> {
        let compiled = COMPILED.with(|cell| compile_once(script, cell));
        compiled?.with_realm(context.realm().clone())?.evaluate(context)
    }

    fn compile_once(script: Shared, cell: &RefCell<Compiled>) -> JsResult<Script> {
        let mut compiled = cell.borrow_mut();
        if let Some(script) = &compiled.scripts[index(script)] {
            return Ok(script.clone());
        }
        let Compiled { scratch, scripts } = &mut *compiled;
        // The scratch context only parses and compiles; its realm's global scope stays empty, so the code resolves
        // every global name at run time, in whichever realm runs it.
        let scratch = match scratch {
            Some(scratch) => scratch,
            None => scratch
                .insert(ContextBuilder::new().module_loader(Rc::new(boa_engine::module::IdleModuleLoader)).build()?),
        };
        let parsed = Script::parse(Source::from_bytes(script.source()), None, scratch)?;
        parsed.codeblock(scratch)?;
        scripts[index(script)] = Some(parsed.clone());
        Ok(parsed)
    }
}
