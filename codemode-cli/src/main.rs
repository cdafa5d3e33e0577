//! The codemode binary.
fn main() {}
