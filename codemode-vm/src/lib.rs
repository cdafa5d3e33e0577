//! The executor: model-written JavaScript runs on Boa inside a supervised worker process, never in the host.
//!
//! The host side ([`pool`]) starts, feeds, times and kills workers; the worker side ([`worker`], [`engine`]) builds a
//! fresh locked-down context per cell and speaks the framed [`protocol`]. Source checks and the TypeScript transform
//! ([`source`]) run in the host before any worker is touched.

mod callbacks;
pub mod confine;
pub mod engine;
mod json;
pub mod pool;
pub mod protocol;
mod pure;
mod sort;
pub mod source;
pub mod strings;
pub mod worker;

pub use pure::pure_calls;
