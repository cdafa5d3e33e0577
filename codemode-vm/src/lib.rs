//! The VM executor's host side: model-written JavaScript runs on Boa inside a supervised worker process, never in the
//! host, and this crate is everything the host needs of it without compiling an engine.
//!
//! The [`pool`] starts, admits, feeds, times and kills workers; [`protocol`] is the framed channel between host and
//! worker (and the worker's environment); [`confine`] the confinement mode the host chooses and the report a worker
//! sends back. The worker itself (the engine, its natives, the `codemode-worker` binary) is the `codemode-worker`
//! crate. Source checks and the TypeScript transform run in the host before any worker is touched; they live in
//! `codemode-source`.

pub mod confine;
pub mod pool;
pub mod protocol;
