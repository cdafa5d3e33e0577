//! codemode-surface (placeholder header, replaced as the crate is built).
