//! The provider payload for a run: code mode's surface when `tools.codeMode` engages, the tools unchanged when it
//! does not, and a failure (never a fallback to every tool) when it engages but the runtime cannot start.

use codemode_config::{RunFacts, resolve};
use codemode_surface::{ToolSpec, approved_direct, check_payload};
use serde_json::Value;

use crate::{CodeMode, Error, ToolDefinition};

/// The tools to send to the provider for one run, and whether code mode owns them.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ModelTools {
    /// The provider payload: exec, wait and the approved direct-only tools when code mode engaged, the tools
    /// unchanged otherwise.
    pub tools: Vec<ToolSpec>,
    /// The seed's `codeModeEngaged`: true only when code mode owns the model tool surface of this run. The reliable
    /// engagement signal for run metadata; do not infer it from config or tool names (the shell tool is also
    /// named `exec`, and `"auto"` engages per model).
    pub code_mode_engaged: bool,
}

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
) -> Result<ModelTools, Error> {
    let resolution = resolve(config, facts)?;
    if !resolution.engaged {
        let tools = tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
            })
            .collect();
        return Ok(ModelTools { tools, code_mode_engaged: false });
    }
    let engine = engine?;
    let surface = engine.surface();
    check_payload(&surface, &approved_direct(&engine.catalog()))?;
    Ok(ModelTools { tools: surface, code_mode_engaged: true })
}
