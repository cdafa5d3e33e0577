//! The worker process of the VM executor: the Boa engine, its natives and the worker's `main`, which confines the
//! process and serves cells over `codemode-vm`'s framed protocol. The binary is `codemode-worker`; a host binary can
//! also be its own worker by calling [`worker::run_worker`] first thing in `main`.
//!
//! The worker ([`worker`], [`confine`], the engine and its natives) builds a fresh locked-down context per cell. The
//! engine is not public API: a host runs programs only through workers. The `engine-api` feature, which only this
//! crate's own tests and benches enable, exposes it for in-process testing.

pub mod confine;
#[cfg(feature = "engine-api")]
pub mod engine;
#[cfg(not(feature = "engine-api"))]
mod engine;
#[cfg(feature = "engine-api")]
pub mod natives;
#[cfg(not(feature = "engine-api"))]
mod natives;
pub mod worker;
