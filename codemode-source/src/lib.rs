//! Source checks that run before any worker is touched: the nesting-depth guard, shell-command detection, the
//! oxc parse (syntax errors with the user's line and column), module-access rejection and the TypeScript strip.
//! It does not run, wrap or evaluate anything: [`prepare`] returns the function body the executor wraps.
//! Invariant: an accepted `js` parses as a module body with top-level `return` allowed and holds no `import` or
//! `export`, so wrapping it in `async () => {\n...\n}` can neither fail to parse nor escape the function.
//!
//! Decisions: input is parsed as TypeScript (a superset), so JavaScript and TypeScript need no flag; it is
//! strict (module) code. A top-level `export` keyword on a declaration is stripped in place (`export const x`
//! declares a local) and `export { ... }` is dropped, as are type-only imports and exports; `export default` and `export =` are rejected because a
//! function body has nowhere to export to. Type-only imports (`import type ...`) load nothing and are accepted.

mod depth;
mod modules;
mod redact;
mod shell;
mod typescript;

use std::borrow::Cow;

use oxc_allocator::Allocator;
use oxc_diagnostics::OxcDiagnostic;
use oxc_parser::{ParseOptions, Parser};
use oxc_span::{SourceType, Span};

pub use depth::{MAX_CHAIN, MAX_NESTING, MAX_PREFIX_RUN};
pub use modules::MAX_TREE_DEPTH;
pub use redact::{is_credential_name, redact_source};

/// The file name user code is reported under, in syntax errors and stack traces.
pub const SOURCE_NAME: &str = "codemode:user.js";

/// The message for any module access; the executor also uses it for `require`/`module`/`process` at runtime.
pub const MODULE_ACCESS_ERROR: &str = "code mode module access is disabled.";

/// A program ready to be wrapped in an async function and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedSource {
    /// The function body to wrap. For JavaScript it is the user's text (with any top-level `export` keyword
    /// blanked out, which keeps every position); for TypeScript it is oxc's output.
    pub js: String,
    /// Maps a position in `js` back to the user's source; the identity unless `transformed`.
    pub line_map: LineMap,
    /// Whether `js` was produced by the TypeScript transform.
    pub transformed: bool,
}

/// A line and column in a source, both 1-based. Columns count UTF-16 code units, as JavaScript engines and
/// source maps do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// 1-based line.
    pub line: u32,
    /// 1-based column in UTF-16 code units.
    pub column: u32,
}

/// Why a source was refused. Every one of these is a failed result with code `invalid_input`, phase `input`,
/// and no tool dispatched; `message` is the text the model sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct SourceError {
    /// What kind of check refused the source.
    pub kind: SourceErrorKind,
    /// The complete message for the model.
    pub message: String,
    /// Where in the user's source, when the check knows.
    pub position: Option<Position>,
}

/// The check that refused a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceErrorKind {
    /// Nested too deeply for the parsers (brackets, operator chains or the syntax tree).
    TooDeep,
    /// A shell command rather than JavaScript.
    Shell,
    /// A syntax error.
    Syntax,
    /// `import`, `import()`, `require(...)` or a re-export.
    ModuleAccess,
    /// An `export` that has no meaning in a function body (`export default`, `export =`).
    Export,
    /// The TypeScript transform failed.
    TypeScript,
}

/// Maps positions in generated JavaScript back to the user's source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineMap {
    /// Sorted by generated position; empty means identity.
    mappings: Vec<Mapping>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapping {
    generated: (u32, u32),
    original: (u32, u32),
}

impl LineMap {
    /// The map of an untransformed source: every position maps to itself.
    pub fn identity() -> Self {
        Self::default()
    }

    /// Whether this is the identity map.
    pub fn is_identity(&self) -> bool {
        self.mappings.is_empty()
    }

    /// The user's position for a 1-based `line` and `column` of the generated JavaScript (the body, without the
    /// executor's wrapper lines). Within a line the nearest mapped token at or before the column wins; a column
    /// before the first token of its line takes that first token; a line with no token takes the last token
    /// before it. `None` only for positions before the first token of a transformed program.
    pub fn original(&self, line: u32, column: u32) -> Option<Position> {
        if self.mappings.is_empty() {
            return Some(Position { line, column });
        }
        let at = self.mappings.partition_point(|m| m.generated <= (line, column));
        let found = match at.checked_sub(1).map(|i| self.mappings[i]) {
            Some(m) if m.generated.0 == line => m,
            before => match self.mappings.get(at) {
                Some(next) if next.generated.0 == line => *next,
                _ => before?,
            },
        };
        Some(Position { line: found.original.0, column: found.original.1 })
    }
}

/// Checks a program and makes it ready to run.
///
/// The pipeline, cheapest first: shell commands (text only), nesting depth (before any parser, so nothing can
/// overflow a stack), the oxc parse, module access and `export`, then the TypeScript strip when the program has
/// TypeScript-only syntax. JavaScript input pays one parse and one walk and comes back unchanged.
///
/// ```
/// use codemode_source::prepare;
///
/// let js = prepare("const n: number = await count(); return n + 1;").unwrap();
/// assert!(js.transformed);
/// assert!(prepare("ls -la").unwrap_err().message.contains("not shell commands"));
/// ```
///
/// # Errors
///
/// A [`SourceError`] whose message tells the model what to fix.
pub fn prepare(code: &str) -> Result<PreparedSource, SourceError> {
    // The text-only shell check is linear and recurses nowhere, so it may run before the depth guard; that
    // way `A=x A=x ... ls -1` is reported as the shell command it is.
    let shell = match shell::classify(code) {
        shell::Verdict::Shell => return Err(shell_error()),
        shell::Verdict::NotShell => None,
        shell::Verdict::Pending(pending) => Some(pending),
    };
    if let Err(violation) = depth::check(code) {
        // A recognizable command with shell arguments that only a successful parse could clear cannot get
        // one: it stays shell (`A=x A=x ... ls -1`). Anything else is simply too deep.
        let shell_anyway = shell.as_ref().is_some_and(|pending| pending.decide(true, |_| false));
        return Err(if shell_anyway { shell_error() } else { too_deep(code, violation) });
    }

    let allocator = Allocator::default();
    let parsed = parse(&allocator, code);
    let first_error = parsed.diagnostics.errors().next().cloned();
    if let Some(pending) = &shell {
        let program = &parsed.program;
        let parses = first_error.is_none() && !parsed.panicked;
        if pending.decide(parses, |name| modules::hoists(program, name)) {
            return Err(shell_error());
        }
    }
    if let Some(error) = first_error {
        return Err(syntax_error(code, &error));
    }
    if parsed.panicked {
        return Err(SourceError {
            kind: SourceErrorKind::Syntax,
            message: format!(
                "SyntaxError at {SOURCE_NAME}: the source could not be parsed. No tools were dispatched; correct \
                 the JavaScript source and submit it again."
            ),
            position: None,
        });
    }

    let analysis = modules::analyze(&parsed.program);
    if let Some(span) = analysis.too_deep {
        return Err(SourceError {
            kind: SourceErrorKind::TooDeep,
            message: format!(
                "source nests too deeply at {}: the syntax tree is deeper than {MAX_TREE_DEPTH} levels (for \
                 example a very long chain of `+` or `.`). No tools were dispatched; split the expression with \
                 intermediate variables and submit it again.",
                location(code, span.start as usize)
            ),
            position: Some(position_of(code, span.start as usize)),
        });
    }
    if let Some(span) = analysis.module_access {
        return Err(SourceError {
            kind: SourceErrorKind::ModuleAccess,
            message: MODULE_ACCESS_ERROR.to_owned(),
            position: Some(position_of(code, span.start as usize)),
        });
    }
    if let Some(span) = analysis.unsupported_export {
        return Err(SourceError {
            kind: SourceErrorKind::Export,
            message: format!(
                "unsupported export at {}: code mode runs the program as the body of an async function, so \
                 `export default` and `export =` have nothing to export to. No tools were dispatched; hand the \
                 value back with `return value;` instead.",
                location(code, span.start as usize)
            ),
            position: Some(position_of(code, span.start as usize)),
        });
    }

    let source: Cow<'_, str> =
        if analysis.blanks.is_empty() { Cow::Borrowed(code) } else { Cow::Owned(blank(code, &analysis.blanks)) };
    if !analysis.typescript {
        return Ok(PreparedSource { js: source.into_owned(), line_map: LineMap::identity(), transformed: false });
    }

    // The blanked text has the same length and line structure, so spans and diagnostics stay in user terms.
    // An empty allocator costs nothing until the re-parse uses it.
    let blanked_allocator = Allocator::default();
    let mut program = if analysis.blanks.is_empty() {
        parsed.program
    } else {
        let reparsed = parse(&blanked_allocator, blanked_allocator.alloc_str(&source));
        if let Some(error) = reparsed.diagnostics.errors().next() {
            return Err(syntax_error(code, error));
        }
        reparsed.program
    };
    let allocator = if analysis.blanks.is_empty() { &allocator } else { &blanked_allocator };
    // The transform asserts its own invariants with panics; a hostile source must not take the host down with
    // it, so a panic becomes a refusal like any other transform failure.
    let stripped =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| typescript::strip(allocator, &mut program)))
            .unwrap_or_else(|_| Err(OxcDiagnostic::error("the TypeScript transform failed on this source")));
    let stripped = stripped.map_err(|error| {
        let (message, position) = diagnostic_text(code, &error);
        SourceError {
            kind: SourceErrorKind::TypeScript,
            message: format!(
                "TypeScript error at {}: {message}. No tools were dispatched; correct the source and submit it \
                 again.",
                position.map_or_else(|| SOURCE_NAME.to_owned(), |p| format!("{SOURCE_NAME}:{}:{}", p.line, p.column))
            ),
            position,
        }
    })?;
    if let Some(span) = modules::first_module_declaration(&program) {
        // The transform may add an import for a runtime helper; the engine has no module loader.
        return Err(SourceError {
            kind: SourceErrorKind::TypeScript,
            message: format!(
                "TypeScript error at {}: this construct needs a module import after transformation, which code \
                 mode cannot load. No tools were dispatched; rewrite it in plain JavaScript and submit it again.",
                location(code, span.start as usize)
            ),
            position: Some(position_of(code, span.start as usize)),
        });
    }
    Ok(PreparedSource { js: stripped.js, line_map: stripped.line_map, transformed: true })
}

fn parse<'a>(allocator: &'a Allocator, code: &'a str) -> oxc_parser::ParserReturn<'a> {
    // TypeScript is a superset, and a module allows top-level `await`; `return` is allowed because the
    // program is a function body.
    Parser::new(allocator, code, SourceType::ts().with_module(true))
        .with_options(ParseOptions { allow_return_outside_function: true, ..ParseOptions::default() })
        .parse()
}

fn shell_error() -> SourceError {
    SourceError { kind: SourceErrorKind::Shell, message: shell::SHELL_SOURCE_ERROR.to_owned(), position: None }
}

fn too_deep(code: &str, violation: depth::DepthViolation) -> SourceError {
    let (offset, what) = match violation {
        depth::DepthViolation::Nesting { offset } => {
            (offset, format!("more than {MAX_NESTING} nested brackets (`(`, `[`, `{{` or `${{`)"))
        }
        depth::DepthViolation::PrefixRun { offset } => {
            (offset, format!("more than {MAX_PREFIX_RUN} prefix operators in a row"))
        }
        depth::DepthViolation::Chain { offset } => (
            offset,
            format!(
                "more than {MAX_CHAIN} nested assignments, conditionals, arrows, type arguments or `else if` \
                 branches"
            ),
        ),
    };
    SourceError {
        kind: SourceErrorKind::TooDeep,
        message: format!(
            "source nests too deeply at {}: {what}. No tools were dispatched; flatten the code with intermediate \
             variables and submit it again.",
            location(code, offset)
        ),
        position: Some(position_of(code, offset)),
    }
}

fn syntax_error(code: &str, error: &OxcDiagnostic) -> SourceError {
    let (message, position) = diagnostic_text(code, error);
    let at = position.map_or_else(|| SOURCE_NAME.to_owned(), |p| format!("{SOURCE_NAME}:{}:{}", p.line, p.column));
    SourceError {
        kind: SourceErrorKind::Syntax,
        message: format!(
            "SyntaxError at {at}: {message}. No tools were dispatched; correct the JavaScript source and submit it \
             again."
        ),
        position,
    }
}

/// The diagnostic's message (without a final period) and the position of its primary label.
fn diagnostic_text(code: &str, error: &OxcDiagnostic) -> (String, Option<Position>) {
    let label = error.labels.iter().find(|l| l.primary()).or_else(|| error.labels.first());
    let position = label.map(|l| position_of(code, l.offset() as usize));
    let mut message = error.message.trim_end_matches('.').to_owned();
    if let Some(help) = &error.help {
        message.push_str(" (");
        message.push_str(help.trim_end_matches('.'));
        message.push(')');
    }
    (message, position)
}

fn location(code: &str, offset: usize) -> String {
    let p = position_of(code, offset);
    format!("{SOURCE_NAME}:{}:{}", p.line, p.column)
}

/// The 1-based line and UTF-16 column of a byte offset. Lines end at `\n`, `\r\n`, `\r`, U+2028 and U+2029,
/// as in JavaScript.
fn position_of(code: &str, offset: usize) -> Position {
    let mut line = 1u32;
    let mut column = 1u32;
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if i >= offset {
            break;
        }
        match c {
            '\r' => {
                if chars.peek().is_some_and(|(j, n)| *n == '\n' && *j < offset) {
                    chars.next();
                }
                line += 1;
                column = 1;
            }
            '\n' | '\u{2028}' | '\u{2029}' => {
                line += 1;
                column = 1;
            }
            c => column += c.len_utf16() as u32,
        }
    }
    Position { line, column }
}

/// Replaces the bytes of each span with spaces, keeping line breaks, so that every position is unchanged.
fn blank(code: &str, spans: &[Span]) -> String {
    let mut out = String::with_capacity(code.len());
    let mut spans = spans.to_vec();
    spans.sort_by_key(|s| s.start);
    let mut next = 0usize;
    for span in spans {
        let (start, end) = (span.start as usize, span.end as usize);
        if start < next || end > code.len() {
            continue;
        }
        out.push_str(&code[next..start]);
        for c in code[start..end].chars() {
            if matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}') {
                out.push(c);
            } else {
                out.extend(std::iter::repeat_n(' ', c.len_utf8()));
            }
        }
        next = end;
    }
    out.push_str(&code[next..]);
    out
}
