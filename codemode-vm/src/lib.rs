//! The VM executor: model-written JavaScript runs on Boa inside a supervised worker process, never in the host.
//!
//! The host side ([`pool`]) starts, feeds, times and kills workers; the worker side ([`worker`], the engine and its
//! [`natives`]) builds a fresh locked-down context per cell and speaks the framed [`protocol`]. Source checks and
//! the TypeScript transform run in the host before any worker is touched; they live in `codemode-source`.
//! The engine is not public API: a host runs programs only through workers. The `engine-api` feature, which only
//! this crate's own tests and benches enable, exposes it for in-process testing.

#[cfg(feature = "engine-api")]
pub mod engine;
#[cfg(not(feature = "engine-api"))]
mod engine;
#[cfg(feature = "engine-api")]
pub mod natives;
#[cfg(not(feature = "engine-api"))]
mod natives;
pub mod pool;
pub mod protocol;
pub mod worker;
