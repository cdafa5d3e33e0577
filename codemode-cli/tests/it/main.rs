//! The codemode-cli integration test binary: one binary, one module per area.

mod gateway;
mod host;
