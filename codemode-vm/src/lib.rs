//! codemode-vm (placeholder header, replaced as the crate is built).
