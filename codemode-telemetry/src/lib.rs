//! codemode-telemetry (placeholder header, replaced as the crate is built).
