//! No build step: cargo reads a crate's build-dependencies only when it has a build script, and the generated
//! `[build-dependencies]` unify the features of what build scripts and proc macros use.
fn main() {}
