//! Placeholder until the gateway benchmark lands.
fn main() {}
