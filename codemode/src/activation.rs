//! The provider payload for a run: code mode's surface when `tools.codeMode` engages, the tools unchanged when it
//! does not, and a failure (never a fallback to every tool) when it engages but the runtime cannot start.

use codemode_config::{RunFacts, resolve};
use codemode_surface::{ToolSpec, approved_direct, check_payload};
use serde_json::Value;

use crate::{CodeMode, Error, ToolDefinition};

/// The tools to send to the provider for one run.
///
/// `engine` is the started code mode engine, or the error that kept it from starting.
///
/// # Errors
///
/// A config validation error; [`Error::Runtime`]-class errors when code mode engages and `engine` is an error (the
/// run fails closed); a surface error when the final payload is not exactly exec, wait and approved direct tools.
pub fn model_tools(
    config: &Value,
    facts: &RunFacts,
    tools: &[ToolDefinition],
    engine: Result<&CodeMode, Error>,
) -> Result<Vec<ToolSpec>, Error> {
    let resolution = resolve(config, facts)?;
    if !resolution.engaged {
        return Ok(tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
            })
            .collect());
    }
    let engine = engine?;
    let surface = engine.surface();
    check_payload(&surface, &approved_direct(engine.catalog()))?;
    Ok(surface)
}
