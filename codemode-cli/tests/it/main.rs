//! The codemode-cli integration test binary: one binary, one module per area.

mod activity;
mod gateway;
mod host;
