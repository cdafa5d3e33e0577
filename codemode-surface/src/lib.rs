//! What the model sees when code mode is engaged: the visible tool list (`exec`, `wait`, direct-only tools), the
//! exec/wait input schemas and descriptions with the quick index and the effective limits, the exec/wait input
//! contract, and the fail-closed check of the final provider payload.
//!
//! Not activation (codemode-config decides whether to engage) nor execution. Invariant: an engaged surface never
//! exposes a cataloged tool or a Tool Search control.

mod error;
mod input;
mod payload;
mod spec;

pub use error::{InputError, SurfaceError};
pub use input::{
    ExecInput, Language, MAX_TITLE_CHARS, WaitInput, parse_exec_input, parse_rewritten_exec_input, parse_wait_input,
};
pub use payload::check_payload;
pub use spec::{
    CONTROL_TOOLS, TOOL_SEARCH_CONTROLS, ToolSpec, WAIT_DESCRIPTION, approved_direct, exec_description, exec_schema,
    exec_tool, is_reserved_tool_name, visible_tools, wait_schema, wait_tool,
};
