//! The nesting-depth guard: one linear, non-recursive scan that runs before any parser sees the source.
//! It is a lexer approximation, not a parser: it skips strings, template text, comments and (heuristically)
//! regular-expression literals, and tracks `(`, `[`, `{` and `${` on an explicit stack.
//! Invariant: a source accepted here has at most [`MAX_NESTING`] open brackets, no run of more than
//! [`MAX_PREFIX_RUN`] prefix operators and at most [`MAX_CHAIN`] open right-recursive constructs (`=`, `?`, `:`,
//! `=>`, `**`, `<`, `if`/`else` chains), so oxc's recursive-descent parser needs well under 1 MB of stack.
//! Left-deep trees the parser builds without recursing (`a + b + c ...`) are bounded after parsing, in `modules.rs`.

/// The deepest bracket nesting accepted. Model-written code rarely exceeds 15; Boa aborts near 400.
pub const MAX_NESTING: usize = 128;

/// The longest run of prefix operators (`!`, `~`, `-`, `+`, `typeof`, `void`, `delete`, `await`, `new`, `...`)
/// accepted; each one is a level of recursion in both parsers.
pub const MAX_PREFIX_RUN: usize = 128;

/// The most right-recursive constructs open at once (summed over the open brackets). oxc needs about 0.5-1 KB
/// of stack for each; a 2 MB thread overflows near 2,000-4,000 of them.
pub const MAX_CHAIN: usize = 512;

/// Where and why the scan stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DepthViolation {
    /// Brackets nested deeper than [`MAX_NESTING`]; `offset` is the byte offset of the opening bracket.
    Nesting { offset: usize },
    /// More than [`MAX_PREFIX_RUN`] prefix operators in a row; `offset` is the byte offset of the last one.
    PrefixRun { offset: usize },
    /// More than [`MAX_CHAIN`] right-recursive constructs open at once; `offset` is the last one.
    Chain { offset: usize },
}

/// Per-bracket counters of right-recursive constructs, with their running sum.
struct Chains {
    frames: Vec<usize>,
    total: usize,
}

impl Chains {
    fn bump(&mut self, offset: usize) -> Result<(), DepthViolation> {
        if let Some(top) = self.frames.last_mut() {
            *top += 1;
        }
        self.total += 1;
        if self.total > MAX_CHAIN {
            return Err(DepthViolation::Chain { offset });
        }
        Ok(())
    }

    /// A statement or list element ended: what was open in this bracket is closed.
    fn reset(&mut self) {
        if let Some(top) = self.frames.last_mut() {
            self.total -= *top;
            *top = 0;
        }
    }

    fn open(&mut self) {
        self.frames.push(0);
    }

    fn close(&mut self) {
        if self.frames.len() > 1
            && let Some(top) = self.frames.pop()
        {
            self.total -= top;
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    Paren,
    Bracket,
    Brace,
    /// `${` inside a template literal: the matching `}` resumes the template text.
    TemplateExpr,
}

/// What the previous significant token was, to tell a regular expression from a division.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// Start of input, an operator or an opening bracket: a `/` here starts a regular expression.
    Operator,
    /// An identifier, literal or closing bracket: a `/` here divides.
    Operand,
    /// A keyword after which an expression starts (`return /x/`).
    ExprKeyword,
}

/// Scans `source` and reports the first place that nests too deeply.
pub(crate) fn check(source: &str) -> Result<(), DepthViolation> {
    let bytes = source.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut prev = Prev::Operator;
    let mut prefix_run = 0usize;
    let mut chains = Chains { frames: vec![0], total: 0 };
    // The previous significant token was a `)` or `else` (so an `if` here nests), or ended a line after an operand.
    let mut prev_close_or_else = false;
    let mut newline_after_operand = false;
    let mut i = 0usize;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b' ' | b'\t' | 0x0b | 0x0c => {
                i += 1;
                continue;
            }
            b'\n' | b'\r' => {
                newline_after_operand |= prev == Prev::Operand;
                i += 1;
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = skip_line(bytes, i + 2);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = skip_block_comment(bytes, i + 2);
                continue;
            }
            _ => {}
        }
        let at_newline = std::mem::take(&mut newline_after_operand);
        let after_close_or_else = std::mem::take(&mut prev_close_or_else);
        match b {
            b'/' if prev != Prev::Operand => {
                i = skip_regex(bytes, i + 1);
                prev = Prev::Operand;
                prefix_run = 0;
                continue;
            }
            b'\'' | b'"' => {
                i = skip_string(bytes, i + 1, b);
                prev = Prev::Operand;
                prefix_run = 0;
                continue;
            }
            b'`' => {
                match skip_template(bytes, i + 1) {
                    TemplateEnd::Closed(next) => {
                        i = next;
                        prev = Prev::Operand;
                    }
                    TemplateEnd::Expr(next) => {
                        push(&mut stack, Frame::TemplateExpr, i)?;
                        chains.open();
                        i = next;
                        prev = Prev::Operator;
                    }
                }
                prefix_run = 0;
                continue;
            }
            b'(' | b'[' | b'{' => {
                let frame = match b {
                    b'(' => Frame::Paren,
                    b'[' => Frame::Bracket,
                    _ => Frame::Brace,
                };
                push(&mut stack, frame, i)?;
                chains.open();
                prev = Prev::Operator;
                prefix_run = 0;
                i += 1;
                continue;
            }
            b')' | b']' => {
                stack.pop();
                chains.close();
                prev_close_or_else = b == b')';
                prev = Prev::Operand;
                prefix_run = 0;
                i += 1;
                continue;
            }
            b'}' => {
                chains.close();
                if stack.pop() == Some(Frame::TemplateExpr) {
                    // Back inside the template text that `${` interrupted.
                    match skip_template(bytes, i + 1) {
                        TemplateEnd::Closed(next) => {
                            i = next;
                            prev = Prev::Operand;
                        }
                        TemplateEnd::Expr(next) => {
                            push(&mut stack, Frame::TemplateExpr, i)?;
                            chains.open();
                            i = next;
                            prev = Prev::Operator;
                        }
                    }
                } else {
                    // A block end and an object-literal end look alike; treating `/` after `}` as a regex is the
                    // common case (`} /re/.test(x)` is rarer than `}\n/re/`), and either way the scan stays linear.
                    prev = Prev::Operator;
                    i += 1;
                }
                prefix_run = 0;
                continue;
            }
            _ => {}
        }
        if is_ident_start(b) {
            let start = i;
            while i < bytes.len() && is_ident_part(bytes[i]) {
                i += 1;
            }
            let word = &source[start..i];
            let statement_start = prev == Prev::Operator && at_statement_boundary(bytes, start);
            if (statement_start || at_newline) && is_statement_keyword(word) {
                chains.reset();
            } else if at_newline && !is_binary_keyword(word) && !matches!(word, "if" | "else") {
                // A new line that starts with an identifier after an operand is a new statement (ASI).
                chains.reset();
            }
            if word == "else" || (word == "if" && after_close_or_else) {
                chains.bump(start)?;
            }
            prev_close_or_else = word == "else";
            if is_prefix_keyword(word) {
                prefix_run += 1;
                if prefix_run > MAX_PREFIX_RUN {
                    return Err(DepthViolation::PrefixRun { offset: start });
                }
            } else {
                prefix_run = 0;
            }
            prev = if is_expression_keyword(word) { Prev::ExprKeyword } else { Prev::Operand };
            continue;
        }
        if b.is_ascii_digit() || (b == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            while i < bytes.len() && (is_ident_part(bytes[i]) || bytes[i] == b'.') {
                i += 1;
            }
            prev = Prev::Operand;
            prefix_run = 0;
            continue;
        }
        // Punctuation. `++`/`--` after an operand are postfix; everything else leaves an expression open.
        let two = bytes.get(i..i + 2);
        if matches!(two, Some(b"++" | b"--")) && prev == Prev::Operand {
            i += 2;
            continue;
        }
        match b {
            b';' | b',' => chains.reset(),
            b'?' if !matches!(bytes.get(i + 1), Some(b'.' | b'?')) || prev == Prev::Operator => chains.bump(i)?,
            b':' => chains.bump(i)?,
            b'<' if prev == Prev::Operand => chains.bump(i)?,
            b'=' => {
                let before = i.checked_sub(1).map(|j| bytes[j]);
                let after = bytes.get(i + 1).copied();
                // Assignments (also `+=`, `??=`...) and arrows nest to the right; comparisons do not.
                if after == Some(b'>') || (!matches!(before, Some(b'=' | b'!' | b'<' | b'>')) && after != Some(b'=')) {
                    chains.bump(i)?;
                }
            }
            b'*' if bytes.get(i + 1) == Some(&b'*') => chains.bump(i)?,
            _ => {}
        }
        if matches!(b, b'!' | b'~' | b'+' | b'-') || bytes.get(i..i + 3) == Some(b"...") {
            prefix_run += 1;
            if prefix_run > MAX_PREFIX_RUN {
                return Err(DepthViolation::PrefixRun { offset: i });
            }
            i += if bytes.get(i..i + 3) == Some(b"...") { 3 } else { 1 };
        } else {
            prefix_run = 0;
            i += 1;
        }
        prev = Prev::Operator;
    }
    Ok(())
}

fn push(stack: &mut Vec<Frame>, frame: Frame, offset: usize) -> Result<(), DepthViolation> {
    if stack.len() >= MAX_NESTING {
        return Err(DepthViolation::Nesting { offset });
    }
    stack.push(frame);
    Ok(())
}

fn is_ident_start(b: u8) -> bool {
    // Non-ASCII bytes are treated as identifier characters: UTF-8 continuation bytes never collide with ASCII
    // punctuation, and unicode escapes in identifiers need no special care for depth counting.
    b.is_ascii_alphabetic() || b == b'_' || b == b'$' || b == b'\\' || b >= 0x80
}

fn is_ident_part(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit()
}

/// Whether the token at `start` follows `;`, `{`, `}` or the start of input (ignoring blanks and comments is
/// not needed: this is only used to recognize statement keywords, and a miss merely skips a reset).
fn at_statement_boundary(bytes: &[u8], start: usize) -> bool {
    let before = bytes[..start].iter().rposition(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    before.is_none_or(|j| matches!(bytes[j], b';' | b'{' | b'}'))
}

fn is_statement_keyword(word: &str) -> bool {
    matches!(
        word,
        "const"
            | "let"
            | "var"
            | "return"
            | "throw"
            | "for"
            | "while"
            | "do"
            | "switch"
            | "try"
            | "function"
            | "class"
            | "break"
            | "continue"
            | "interface"
            | "type"
            | "enum"
    )
}

fn is_binary_keyword(word: &str) -> bool {
    matches!(word, "in" | "instanceof" | "of" | "as" | "satisfies" | "extends" | "keyof")
}

fn is_prefix_keyword(word: &str) -> bool {
    matches!(word, "typeof" | "void" | "delete" | "await" | "new" | "yield")
}

fn is_expression_keyword(word: &str) -> bool {
    matches!(
        word,
        "return"
            | "typeof"
            | "void"
            | "delete"
            | "await"
            | "new"
            | "yield"
            | "case"
            | "do"
            | "else"
            | "in"
            | "of"
            | "instanceof"
            | "throw"
            | "extends"
    )
}

fn skip_line(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
        i += 1;
    }
    i
}

fn skip_block_comment(bytes: &[u8], mut i: usize) -> usize {
    while i + 1 < bytes.len() {
        if bytes[i] == b'*' && bytes[i + 1] == b'/' {
            return i + 2;
        }
        i += 1;
    }
    bytes.len()
}

/// Skips a quoted string. Strings end at their quote or at an unescaped line break (where the parser will
/// report the error), so a misread quote can hide at most the rest of one line.
fn skip_string(bytes: &[u8], mut i: usize, quote: u8) -> usize {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' | b'\r' => return i,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Skips a regular-expression body and its flags. A regex cannot span lines, so a `/` misread as a regex
/// hides at most the rest of one line.
fn skip_regex(bytes: &[u8], mut i: usize) -> usize {
    let mut in_class = false;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' | b'\r' => return i,
            b'[' => {
                in_class = true;
                i += 1;
            }
            b']' => {
                in_class = false;
                i += 1;
            }
            b'/' if !in_class => {
                i += 1;
                while i < bytes.len() && is_ident_part(bytes[i]) {
                    i += 1;
                }
                return i;
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

enum TemplateEnd {
    /// The closing backtick; the index after it.
    Closed(usize),
    /// A `${`; the index after it.
    Expr(usize),
}

fn skip_template(bytes: &[u8], mut i: usize) -> TemplateEnd {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'`' => return TemplateEnd::Closed(i + 1),
            b'$' if bytes.get(i + 1) == Some(&b'{') => return TemplateEnd::Expr(i + 2),
            _ => i += 1,
        }
    }
    TemplateEnd::Closed(bytes.len())
}
