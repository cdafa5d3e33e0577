//! Determinism and lockdown hooks of a guest context: the virtual clock, UTC, no string compilation, a seeded
//! `Math.random`, and the tracker of promises rejected without a handler.
//!
//! Invariant: nothing the guest can observe depends on the real time, the host's time zone or real randomness; all
//! of it comes from the run's journal (start clock, round clocks, seed), so replay sees the same values.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use boa_engine::builtins::promise::OperationType;
use boa_engine::context::time::JsInstant;
use boa_engine::context::{Clock, HostHooks};
use boa_engine::native_function::NativeFunction;
use boa_engine::object::builtins::JsPromise;
use boa_engine::realm::Realm;
use boa_engine::{Context, JsNativeError, JsObject, JsResult, JsString, JsValue, js_string};

/// The clock the guest reads: set by the host at the start of a run and at every delivery round.
#[derive(Debug, Default)]
pub struct VirtualClock {
    epoch_ms: Cell<i64>,
}

impl VirtualClock {
    pub fn set(&self, epoch_ms: i64) {
        self.epoch_ms.set(epoch_ms);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> JsInstant {
        let ms = self.epoch_ms.get().max(0) as u64;
        JsInstant::new(ms / 1000, ((ms % 1000) * 1_000_000) as u32)
    }

    fn system_time_millis(&self) -> i64 {
        self.epoch_ms.get()
    }
}

/// The promises rejected while no handler was attached and not handled since, oldest first (the engine's
/// HostPromiseRejectionTracker). A handler attached later, even after the run parked and resumed, removes its
/// promise again.
#[derive(Clone, Default)]
pub struct Rejections(Rc<RefCell<Tracked>>);

/// Each unhandled promise with the order it was rejected in: a map, so that a flood of rejections handled in any
/// order costs constant time per operation.
#[derive(Default)]
struct Tracked {
    next: u64,
    promises: std::collections::HashMap<JsObject, u64>,
}

impl Rejections {
    /// The reason of the oldest rejection still unhandled, leaving out `except` (the program's own promise, whose
    /// rejection the cell reports as the program's error).
    pub fn first_unhandled(&self, except: Option<&JsPromise>) -> Option<JsValue> {
        let except: Option<JsObject> = except.map(|p| (**p).clone().upcast());
        let tracked = self.0.borrow();
        let mut left: Vec<(&JsObject, u64)> =
            tracked.promises.iter().filter(|(p, _)| Some(*p) != except.as_ref()).map(|(p, &n)| (p, n)).collect();
        left.sort_by_key(|&(_, n)| n);
        left.into_iter().find_map(|(p, _)| match JsPromise::from_object(p.clone()).ok()?.state() {
            boa_engine::builtins::promise::PromiseState::Rejected(reason) => Some(reason),
            _ => None,
        })
    }
}

/// Host hooks of a guest context.
pub struct GuestHooks;

impl HostHooks for GuestHooks {
    fn promise_rejection_tracker(
        &self,
        promise: &JsObject<boa_engine::builtins::promise::Promise>,
        operation: OperationType,
        context: &mut Context,
    ) {
        let Some(rejections) = context.get_data::<Rejections>() else { return };
        let promise = promise.clone().upcast();
        let mut tracked = rejections.0.borrow_mut();
        match operation {
            OperationType::Reject => {
                let order = tracked.next;
                tracked.next += 1;
                tracked.promises.insert(promise, order);
            }
            OperationType::Handle => {
                tracked.promises.remove(&promise);
            }
        }
    }

    fn ensure_can_compile_strings(
        &self,
        _realm: Realm,
        _parameters: &[JsString],
        _body: &JsString,
        _direct: bool,
        _context: &mut Context,
    ) -> JsResult<()> {
        Err(JsNativeError::eval()
            .with_message("code mode does not compile strings: eval and the Function constructors are disabled")
            .into())
    }

    fn local_timezone_offset_seconds(&self, _unix_time_seconds: i64) -> i32 {
        0
    }

    fn max_buffer_size(&self, _context: &mut Context) -> u64 {
        // ArrayBuffers are bounded well below the worker's memory limit, so a typed-array bomb fails as a catchable
        // RangeError instead of killing the worker.
        256 * 1024 * 1024
    }
}

/// The xorshift state behind `Math.random`.
struct Rng(Cell<u64>);

fn random(_: &JsValue, _: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let rng = context.get_data::<Rng>().expect("seed_math_random installs the generator");
    let mut x = rng.0.get();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng.0.set(x);
    Ok(JsValue::new((x >> 11) as f64 / (1u64 << 53) as f64))
}

/// Replaces `Math.random` with a seeded generator.
pub fn seed_math_random(context: &mut Context) -> JsResult<()> {
    context.insert_data(Rng(Cell::new(0x9E37_79B9_7F4A_7C15)));
    let math = context.global_object().get(js_string!("Math"), context)?;
    let math = math.as_object().expect("Math is an object");
    let function = NativeFunction::from_fn_ptr(random).to_js_function(context.realm());
    math.set(js_string!("random"), function, true, context)?;
    Ok(())
}

/// Seeds the generator for a run. The seed is scrambled (splitmix64) so that small seeds give well-mixed first
/// values, and never left at zero, where xorshift would stick.
pub fn reseed(context: &mut Context, seed: u64) {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    if let Some(rng) = context.get_data::<Rng>() {
        rng.0.set(if z == 0 { 0x9E37_79B9_7F4A_7C15 } else { z });
    }
}
