//! Integration tests of codemode-telemetry: the redaction properties every record for people relies on.

mod redact;
