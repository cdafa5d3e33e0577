//! Redaction of a program's source for people (the source shown or logged for a run): string literals given to
//! credential-like names (`const API_TOKEN = "..."`, `{ password: "..." }`, `cfg.secret = "..."`) are masked on the
//! syntax tree, then the whole text passes through the host's [`Redactor`] (token shapes, registered secrets,
//! configured patterns).
//!
//! Computations stay readable (`const API_TOKEN = computeToken();` is kept); only literal text is masked, with the
//! quotes kept, so redacting twice gives the same text. The original source is still what runs: this makes a copy.

use oxc_allocator::Allocator;
use oxc_ast::ast::{AssignmentExpression, Expression, ObjectProperty, VariableDeclarator};
use oxc_ast_visit::{Visit, walk};
use oxc_parser::{ParseOptions, Parser};
use oxc_span::{SourceType, Span};

pub use codemode_telemetry::redact::is_credential_name;
use codemode_telemetry::redact::may_name_credentials;
use codemode_telemetry::{MASK, Redactor};

/// `source` as people may see it: credential literals masked on the tree, then `redactor` over the whole text.
/// A source that does not parse gets the text redaction only.
pub fn redact_source(source: &str, redactor: &Redactor) -> String {
    if !may_name_credentials(source) && !escapes_may_spell_names(source) {
        // No name in the tree can be credential-like: the text redaction is all there is to do.
        return redactor.redact(source).into_owned();
    }
    let allocator = Allocator::default();
    let options = ParseOptions { allow_return_outside_function: true, ..ParseOptions::default() };
    let parsed = Parser::new(&allocator, source, SourceType::ts().with_module(true)).with_options(options).parse();
    let mut spans = Vec::new();
    if !parsed.panicked {
        let mut finder = Finder { spans: &mut spans };
        finder.visit_program(&parsed.program);
    }
    spans.sort_unstable_by_key(|s| s.start);
    let mut masked = String::with_capacity(source.len());
    let mut at = 0usize;
    for span in spans {
        let (start, end) = (span.start as usize, span.end as usize);
        if start < at || end > source.len() || end < start + 2 {
            continue;
        }
        // Keep the quotes (or backticks) around the literal; mask what is between them.
        masked.push_str(&source[at..=start]);
        masked.push_str(MASK);
        at = end - 1;
    }
    masked.push_str(&source[at..]);
    redactor.redact(&masked).into_owned()
}

/// Whether `source` has an escape that can spell a name's letters in the tree without them being in the text: a
/// `\u` or `\x` escape, or a line continuation inside a string (a backslash before a line break, U+2028 and U+2029
/// included, whose UTF-8 starts with 0xE2; a module is strict, so there are no octal escapes).
fn escapes_may_spell_names(source: &str) -> bool {
    source.as_bytes().windows(2).any(|pair| pair[0] == b'\\' && matches!(pair[1], b'u' | b'x' | b'\n' | b'\r' | 0xE2))
}

/// Collects the spans of literals given to credential-like names.
struct Finder<'s> {
    spans: &'s mut Vec<Span>,
}

impl Finder<'_> {
    fn literal(&mut self, name: Option<&str>, value: Option<&Expression<'_>>) {
        let (Some(name), Some(value)) = (name, value) else { return };
        if !is_credential_name(name) {
            return;
        }
        match value.without_parentheses() {
            Expression::StringLiteral(lit) if lit.value.as_str() != MASK => self.spans.push(lit.span),
            Expression::TemplateLiteral(t) if t.expressions.is_empty() => {
                let text = t.quasis.first().map(|q| q.value.raw.as_str()).unwrap_or("");
                if text != MASK && !text.is_empty() {
                    self.spans.push(t.span);
                }
            }
            _ => {}
        }
    }
}

impl<'a> Visit<'a> for Finder<'_> {
    fn visit_variable_declarator(&mut self, it: &VariableDeclarator<'a>) {
        let name = it.id.get_identifier_name();
        self.literal(name.as_ref().map(|n| n.as_str()), it.init.as_ref());
        walk::walk_variable_declarator(self, it);
    }

    fn visit_object_property(&mut self, it: &ObjectProperty<'a>) {
        let name = it.key.static_name();
        self.literal(name.as_deref(), Some(&it.value));
        walk::walk_object_property(self, it);
    }

    fn visit_assignment_expression(&mut self, it: &AssignmentExpression<'a>) {
        self.literal(it.left.get_identifier_name(), Some(&it.right));
        walk::walk_assignment_expression(self, it);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(source: &str) -> String {
        redact_source(source, &Redactor::new())
    }

    #[test]
    fn credential_literals_are_masked_and_computations_kept() {
        let source = "const API_TOKEN = \"abc123\";\nconst token2 = computeToken();\n\
                      const cfg = { password: 'pw', user: 'ann' };\ncfg.clientSecret = `s3`;\nlet n = 'plain';";
        let out = redact(source);
        assert_eq!(
            out,
            "const API_TOKEN = \"[REDACTED]\";\nconst token2 = computeToken();\n\
             const cfg = { password: '[REDACTED]', user: 'ann' };\ncfg.clientSecret = `[REDACTED]`;\nlet n = 'plain';"
        );
        assert_eq!(redact(&out), out, "stable");
    }

    #[test]
    fn token_shapes_anywhere_in_the_text_are_masked() {
        let out = redact("await fetchIt({ q: 'x', h: 'Bearer abcdefghijkl123' }) // sk-abcdefghijklmnopqrstuvwx");
        assert!(!out.contains("abcdefghijkl123") && !out.contains("sk-abc"), "{out}");
    }

    #[test]
    fn names_spelled_with_escapes_are_found_and_sources_without_credential_words_kept() {
        let out = redact("const \\u0074oken = 'abc123';\nconst o = { 'p\\x61ssword': \"pw\" };");
        assert!(!out.contains("abc123") && !out.contains("\"pw\""), "{out}");
        let plain = "const rows = await list({ path: 'src' }); return rows.map((r) => r.name);";
        assert_eq!(redact(plain), plain);
    }

    #[test]
    fn a_source_that_does_not_parse_still_gets_the_text_redaction() {
        let out = redact("const x = ( ghp_abcdefghijklmnopqrstuvwxyz0123456789");
        assert!(out.contains(MASK), "{out}");
    }

    #[test]
    fn names_are_matched_by_their_words() {
        for name in ["API_TOKEN", "apiKey", "x-api-key", "db_password", "Authorization", "GITHUB_PAT_SECRET"] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in ["user", "count", "title", "path"] {
            assert!(!is_credential_name(name), "{name}");
        }
    }
}
