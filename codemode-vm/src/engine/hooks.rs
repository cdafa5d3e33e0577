//! Determinism and lockdown hooks of a guest context: the virtual clock, UTC, no string compilation, a seeded
//! `Math.random`.
//!
//! Invariant: nothing the guest can observe depends on the real time, the host's time zone or real randomness; all
//! of it comes from the run's journal (start clock, round clocks, seed), so replay sees the same values.

use std::cell::Cell;

use boa_engine::context::time::JsInstant;
use boa_engine::context::{Clock, HostHooks};
use boa_engine::native_function::NativeFunction;
use boa_engine::realm::Realm;
use boa_engine::{Context, JsNativeError, JsResult, JsString, JsValue, js_string};

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

/// Host hooks of a guest context.
pub struct GuestHooks;

impl HostHooks for GuestHooks {
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
