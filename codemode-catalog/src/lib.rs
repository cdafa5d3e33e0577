//! Effective tools to catalog entries: ordering, one winner per name, callable names, compact hints, the quick
//! index, search ranking and `.d.ts` declarations.
//!
//! The catalog is built once per run from tool definitions and is immutable afterwards; catalog ids never leave it.

mod definition;

pub use definition::{ToolDefinition, ToolSource};
