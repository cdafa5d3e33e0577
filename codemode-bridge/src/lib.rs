//! codemode-bridge (placeholder header, replaced as the crate is built).
