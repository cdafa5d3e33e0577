//! codemode-config (placeholder header, replaced as the crate is built).
