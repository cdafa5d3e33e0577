//! The errors of this crate, one enum per operation: a rejected exec/wait input, and a provider payload that breaks
//! the engaged surface.
//!
//! An `InputError` is the model's to fix (it becomes a failed result with `invalid_input`); a `SurfaceError` is the
//! host's (the run fails closed). Every message names the field or tool and the fix.

use codemode_bridge::ErrorCode;

/// An `exec` or `wait` input the contract rejects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The arguments are not a JSON object.
    #[error(
        "{tool} input must be a JSON object (found {found}); send an object such as {{\"title\": ..., \"code\": ...}}"
    )]
    NotAnObject {
        /// `exec` or `wait`.
        tool: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// `title` is absent or blank.
    #[error("title is required: add a nonblank title with the cell's purpose in 3-7 words (at most 120 characters)")]
    MissingTitle,
    /// `title` is longer than 120 characters.
    #[error("title has {chars} characters; shorten it to at most 120 (3-7 words describing the purpose)")]
    TitleTooLong {
        /// The title's length in characters.
        chars: usize,
    },
    /// A string field holds another type.
    #[error("{field} must be a string (found {found}); send it as a JSON string")]
    NotAString {
        /// The field name.
        field: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// Neither `code` nor `command` holds a program.
    #[error("code is required: put the JavaScript program in code (a non-empty string)")]
    MissingCode,
    /// `code` or `command` holds a non-string, which invalidates both aliases.
    #[error(
        "{field} must be a string (found {found}); an invalid alias invalidates both code and command, so send the \
         program once as a string in code"
    )]
    AliasNotAString {
        /// `code` or `command`.
        field: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// A rewrite blanked or retyped a populated `code` or `command`.
    #[error(
        "{field} was populated and a rewrite invalidated it, which invalidates both code and command; resend the \
         program in code"
    )]
    AliasInvalidated {
        /// `code` or `command`.
        field: &'static str,
    },
    /// `code` and `command` are both non-empty and differ.
    #[error("code and command are aliases but differ; send the program once in code and leave command out")]
    AliasMismatch,
    /// A boolean field holds another type.
    #[error("{field} must be true or false (found {found}); leave it out for an ordinary cell")]
    NotABoolean {
        /// `restartSafe` or `awaitResults`.
        field: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// `language` is not `"javascript"` or `"typescript"`.
    #[error("language must be \"javascript\" or \"typescript\" (found {found}); or leave it out")]
    InvalidLanguage {
        /// The value found, shortened.
        found: String,
    },
    /// The retired `typecheck` field was sent.
    #[error(
        "typecheck is not supported: remove it; tool arguments are checked when each call runs and API.read gives \
         tool types"
    )]
    Typecheck,
    /// `runId` is absent or blank.
    #[error("runId is required: pass the runId of the waiting result you want to resume")]
    MissingRunId,
    /// `maxWaitMs` of a `wait` is not a non-negative whole number.
    #[error(
        "maxWaitMs must be a whole number of milliseconds, 0 or more (found {found}); leave it out to wait up to the \
         configured maximum"
    )]
    BadWaitBudget {
        /// The value found, as JSON.
        found: String,
    },
}

impl InputError {
    /// The result code this rejection carries: always `invalid_input`.
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidInput
    }
}

/// A final provider payload that breaks the engaged code mode surface; the run must fail closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SurfaceError {
    /// `exec` or `wait` is missing.
    #[error("code mode is engaged but the tool list has no {name} tool; send the surface from visible_tools unchanged")]
    MissingControl {
        /// `exec` or `wait`.
        name: &'static str,
    },
    /// A tool name appears more than once.
    #[error("code mode is engaged but the tool list has {name} {count} times; send each tool once")]
    Duplicate {
        /// The repeated name.
        name: String,
        /// How many times it appears.
        count: usize,
    },
    /// `exec` is not the code mode exec (for example, the shell `exec` tool leaked through).
    #[error(
        "code mode is engaged but the exec tool does not take code; the shell exec belongs in the hidden catalog, \
         send the code mode exec from visible_tools"
    )]
    ForeignExec,
    /// A Tool Search control tool is visible.
    #[error("code mode is engaged but {name} is visible; tool search controls must be hidden while code mode runs")]
    ToolSearchControl {
        /// `tool_search`, `tool_describe`, `tool_call` or `tool_search_code`.
        name: String,
    },
    /// A tool that is neither a control tool nor an approved direct-only tool is visible.
    #[error(
        "code mode is engaged but {name} is visible and is not an approved direct-only tool; hide it in the catalog \
         or approve it as direct-only"
    )]
    Unapproved {
        /// The tool's name.
        name: String,
    },
}
