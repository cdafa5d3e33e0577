//! The TypeScript path: strips types with oxc's transformer (no downleveling: the engine runs modern
//! JavaScript) and prints JavaScript with a source map, which becomes the [`LineMap`] back to the user's text.
//! It runs only when the program contains TypeScript-only syntax; JavaScript never pays for it.
//! Invariant: the output keeps top-level `await` and `return` (it is still a function body, not a module).

use std::path::{Path, PathBuf};

use oxc_allocator::Allocator;
use oxc_ast::ast::Program;
use oxc_codegen::{Codegen, CodegenOptions, CommentOptions};
use oxc_diagnostics::OxcDiagnostic;
use oxc_semantic::SemanticBuilder;
use oxc_transformer::{TransformOptions, Transformer};

use super::{LineMap, Mapping, SOURCE_NAME};

/// The stripped JavaScript and how its positions map back.
pub(crate) struct Stripped {
    pub js: String,
    pub line_map: LineMap,
}

/// Strips the types from `program` (parsed from the user's source) and prints it.
///
/// # Errors
///
/// The transform's first error diagnostic, with spans in the user's source.
pub(crate) fn strip<'a>(allocator: &'a Allocator, program: &mut Program<'a>) -> Result<Stripped, OxcDiagnostic> {
    // Enum members are evaluated here so that the transform can turn enums into runtime objects.
    let scoping = SemanticBuilder::new().with_enum_eval(true).build(program).semantic.into_scoping();
    let options = TransformOptions::default();
    let transformed = Transformer::new(allocator, Path::new("user.ts"), &options).build_with_scoping(scoping, program);
    if let Some(error) = transformed.diagnostics.errors().next() {
        return Err(error.clone());
    }
    let codegen = Codegen::new()
        .with_options(CodegenOptions {
            // Comments are dropped: the program only runs, and a comment cannot change what it does.
            comments: CommentOptions::disabled(),
            source_map_path: Some(PathBuf::from(SOURCE_NAME)),
            ..CodegenOptions::default()
        })
        .build(program);
    let mut mappings: Vec<Mapping> = codegen
        .map
        .map(|map| {
            map.get_tokens()
                .map(|t| Mapping {
                    generated: (t.get_dst_line() + 1, t.get_dst_col() + 1),
                    original: (t.get_src_line() + 1, t.get_src_col() + 1),
                })
                .collect()
        })
        .unwrap_or_default();
    mappings.sort_by_key(|m| m.generated);
    mappings.dedup_by_key(|m| m.generated);
    Ok(Stripped { js: codegen.code, line_map: LineMap { mappings } })
}
