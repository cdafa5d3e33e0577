//! The library half of the `codemode` binary: the pieces `main.rs` dispatches to, public so the integration tests
//! and benchmarks can drive them directly.
//!
//! It is not a stable API for other crates; embedders use the `codemode` facade.

pub mod gateway;
pub mod host;

/// OpenTelemetry export, from `codemode-telemetry`'s `otlp` feature.
pub use codemode_telemetry::otlp as telemetry;
