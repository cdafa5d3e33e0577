//! The `tools.codeMode` contract: whether code mode engages for a run, and the limits a run obeys.
//!
//! This crate is pure data and resolution rules; it starts nothing and reads no files. Every limit is clamped to the
//! reference's range, so a `Limits` value is always safe to hand to the executor.

mod error;
mod limits;
mod resolve;

pub use error::ConfigError;
pub use limits::{LIMIT_KEYS, Limits};
pub use resolve::{Resolution, RunFacts, Source, Why, resolve, validate};
