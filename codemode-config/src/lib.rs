//! The `tools.codeMode` contract: whether code mode engages for a run, the limits a run obeys, and the tool policy
//! (allow, ask or deny per call).
//!
//! This crate is pure data and resolution rules; it starts nothing and reads no files. Every limit is clamped to the
//! reference's range, so a `Limits` value is always safe to hand to the executor.

mod error;
mod limits;
mod policy;
mod resolve;

pub use error::ConfigError;
pub use limits::{LIMIT_KEYS, Limits};
pub use policy::{Decision, EffectClass, Fallback, POLICY_KEYS, Policy, PolicyRule, glob_match};
pub use resolve::{Resolution, RunFacts, Source, Why, resolve, resolve_with_fallbacks, validate};
