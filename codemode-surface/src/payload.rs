//! The fail-closed check of the final provider payload once code mode is engaged.
//!
//! Not a filter: it never repairs a payload, it rejects it. Invariant: an accepted payload holds exactly one code
//! mode `exec` (one that takes `code`), exactly one `wait`, and otherwise only approved direct-only tools.

use std::collections::HashMap;

use crate::{SurfaceError, ToolSpec, spec::TOOL_SEARCH_CONTROLS};

/// Checks the tool list about to be sent to the provider for an engaged run.
///
/// # Errors
///
/// [`SurfaceError`] for a duplicate name, a visible Tool Search control, a tool that is not an approved direct-only
/// tool, a missing `exec` or `wait`, or an `exec` that is not the code mode one. The caller must fail the run.
pub fn check_payload(tools: &[ToolSpec], approved_direct: &[String]) -> Result<(), SurfaceError> {
    let mut counts: HashMap<&str, usize> = HashMap::with_capacity(tools.len());
    for tool in tools {
        *counts.entry(tool.name.as_str()).or_default() += 1;
    }
    for tool in tools {
        let name = tool.name.as_str();
        let count = counts[name];
        if count > 1 {
            return Err(SurfaceError::Duplicate { name: name.to_owned(), count });
        }
        if TOOL_SEARCH_CONTROLS.contains(&name) {
            return Err(SurfaceError::ToolSearchControl { name: name.to_owned() });
        }
        match name {
            "exec" if tool.parameters.pointer("/properties/code").is_none() => return Err(SurfaceError::ForeignExec),
            "exec" | "wait" => {}
            _ if approved_direct.iter().any(|a| a == name) => {}
            _ => return Err(SurfaceError::Unapproved { name: name.to_owned() }),
        }
    }
    for name in ["exec", "wait"] {
        if !counts.contains_key(name) {
            return Err(SurfaceError::MissingControl { name });
        }
    }
    Ok(())
}
