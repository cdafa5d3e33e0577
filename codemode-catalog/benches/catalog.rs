//! Criterion benchmarks of catalog construction and search (placeholder while the catalog is written).
fn main() {}
