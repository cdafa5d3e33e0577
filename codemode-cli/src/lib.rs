//! The library half of the `codemode` binary: the embedded read-only tools `run` and `wait` offer (`host`), public so
//! the integration tests can drive them directly. The gateway is the `codemode-gateway` crate.
//!
//! It is not a stable API for other crates; embedders use the `codemode` facade or `codemode-gateway`.

pub mod host;
