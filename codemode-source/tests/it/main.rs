//! Integration tests of the source checks: fixtures with snapshotted outcomes, the reference's shell cases, the
//! nesting guards and the TypeScript strip, all through [`codemode_source::prepare`]; and the property that the
//! redacted copy of a source holds no registered secret or token shape.

mod redact;
mod source;
