//! The catalog's integration tests (one binary).
