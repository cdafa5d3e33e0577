//! Workspace automation.
fn main() {}
