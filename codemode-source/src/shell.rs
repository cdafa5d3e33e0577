//! Shell-command detection: recognizes payloads such as `ls -la`, `git status` or `FOO=1 npm test` that a model
//! sent to `exec` instead of JavaScript, following the reference's `isShellLikeCodeModeSource` rules.
//! It never guesses at JavaScript expressions: a source is flagged only when its first command is recognizable
//! and the rest looks like shell (flags, paths, redirections, `;`/`&&`/`|`), and a name the program itself
//! declares with hoisting (`var ls`, `function ls() {}`) is exempt. Every check here runs in linear time.

/// The first part of the message for rejected shell input; the facade reports it as `invalid_input`.
pub(crate) const SHELL_SOURCE_ERROR: &str = "code-mode exec runs JavaScript, not shell commands. Call an enabled \
async tool global from JavaScript (for example `const files = await list({ path: \".\" }); return files;`); use \
catalog.search(query) when the quick index omits it. Do not retry the same shell command as code.";

/// The verdict of the text-only part of the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Certainly a shell command.
    Shell,
    /// Not a shell command (or not one this check can recognize without guessing).
    NotShell,
    /// A shell command unless the source parses as JavaScript; the rest is decided by [`Pending::decide`].
    Pending(Pending),
}

/// What is left to decide once the parser has run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The command word (`ls`, `custom-tool`), absent when the source starts with an executable path.
    command: Option<String>,
    /// Whether the command word is a known shell command.
    known: bool,
    /// Whether the text after the command starts with `;`, a line break, `&`, `&&`, `|` or `||`.
    separator_follows: bool,
    /// Whether the text after the command looks like shell arguments (flags, paths, a redirection).
    arguments_follow: bool,
}

impl Pending {
    /// Finishes the check. `parses` says whether the program parsed; `hoisted(name)` whether the program
    /// declares `name` with a hoisted binding (`var`, a top-level function).
    pub(crate) fn decide(&self, parses: bool, hoisted: impl Fn(&str) -> bool) -> bool {
        if !parses {
            return true;
        }
        if let Some(name) = &self.command
            && hoisted(name)
        {
            return false;
        }
        if self.separator_follows {
            return self.known;
        }
        self.command.is_some() && self.arguments_follow
    }
}

/// Known shell commands; the first word of a payload is compared against these.
const COMMANDS: &[&str] = &[
    "alias",
    "apt",
    "apt-get",
    "awk",
    "bash",
    "bg",
    "brew",
    "builtin",
    "bun",
    "cargo",
    "cat",
    "cd",
    "chmod",
    "chown",
    "cmd",
    "command",
    "cp",
    "curl",
    "cut",
    "date",
    "declare",
    "df",
    "diff",
    "dir",
    "docker",
    "dotnet",
    "du",
    "echo",
    "env",
    "exec",
    "exit",
    "export",
    "fg",
    "file",
    "find",
    "getopts",
    "git",
    "go",
    "gradle",
    "grep",
    "gzip",
    "hash",
    "head",
    "help",
    "hostname",
    "id",
    "java",
    "javac",
    "jobs",
    "jq",
    "kill",
    "killall",
    "kubectl",
    "less",
    "ln",
    "local",
    "logout",
    "ls",
    "make",
    "mkdir",
    "more",
    "mvn",
    "mv",
    "node",
    "npm",
    "npx",
    "perl",
    "php",
    "pip",
    "pip3",
    "pkill",
    "pnpm",
    "poetry",
    "popd",
    "powershell",
    "printf",
    "ps",
    "pushd",
    "pwd",
    "pwsh",
    "pytest",
    "python",
    "python3",
    "read",
    "readonly",
    "rg",
    "rm",
    "rmdir",
    "rsync",
    "ruby",
    "rustc",
    "rustup",
    "scp",
    "sed",
    "set",
    "sh",
    "shift",
    "sleep",
    "sort",
    "source",
    "ssh",
    "stat",
    "sudo",
    "swift",
    "systemctl",
    "tail",
    "tar",
    "tee",
    "test",
    "touch",
    "trap",
    "tree",
    "type",
    "ulimit",
    "umask",
    "uname",
    "uniq",
    "unset",
    "unzip",
    "uv",
    "uvx",
    "vitest",
    "wait",
    "wc",
    "wget",
    "which",
    "whoami",
    "xargs",
    "yarn",
    "zip",
    "zsh",
];

/// JavaScript keywords and reserved words (and TypeScript's contextual ones) that can start a statement.
const KEYWORDS: &[&str] = &[
    "abstract",
    "as",
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "declare",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "implements",
    "import",
    "in",
    "instanceof",
    "interface",
    "let",
    "namespace",
    "new",
    "null",
    "of",
    "private",
    "protected",
    "public",
    "return",
    "satisfies",
    "static",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "type",
    "typeof",
    "undefined",
    "using",
    "var",
    "void",
    "while",
    "with",
    "yield",
];

/// Globals a guest program may start with: the language's and the code-mode prelude's.
const GLOBALS: &[&str] = &[
    "API",
    "MCP",
    "AggregateError",
    "Array",
    "ArrayBuffer",
    "BigInt",
    "BigInt64Array",
    "BigUint64Array",
    "Boolean",
    "DataView",
    "Date",
    "Error",
    "EvalError",
    "Float32Array",
    "Float64Array",
    "Function",
    "Infinity",
    "Int16Array",
    "Int32Array",
    "Int8Array",
    "Intl",
    "Iterator",
    "JSON",
    "Map",
    "Math",
    "NaN",
    "Number",
    "Object",
    "Promise",
    "Proxy",
    "RangeError",
    "ReferenceError",
    "Reflect",
    "RegExp",
    "Set",
    "String",
    "Symbol",
    "SyntaxError",
    "TextDecoder",
    "TextEncoder",
    "TypeError",
    "URIError",
    "Uint16Array",
    "Uint32Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "WeakMap",
    "WeakSet",
    "atob",
    "btoa",
    "catalog",
    "clearTimeout",
    "console",
    "decodeURI",
    "decodeURIComponent",
    "encodeURI",
    "encodeURIComponent",
    "eval",
    "globalThis",
    "isFinite",
    "isNaN",
    "json",
    "load",
    "nodes",
    "parseFloat",
    "parseInt",
    "results",
    "setTimeout",
    "skills",
    "store",
    "structuredClone",
    "text",
    "yield_control",
];

fn is_js_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The text-only part of the check.
pub(crate) fn classify(source: &str) -> Verdict {
    let trimmed = source.trim_matches(is_js_space);
    if trimmed.starts_with("#!") {
        return Verdict::Shell;
    }
    let uncommented = strip_leading_comments(trimmed);
    if uncommented.is_empty() || is_javascript_export(uncommented) {
        return Verdict::NotShell;
    }
    if is_shell_control(uncommented) {
        return Verdict::Shell;
    }
    let command_source = strip_env_assignments(uncommented);

    let known = known_command(command_source);
    let word = shell_identifier(command_source);
    let (command, command_len) = match (known, word) {
        (Some((name, len)), _) => (Some(name), len),
        (None, Some(name)) if !KEYWORDS.contains(&name) && !GLOBALS.contains(&name) => (Some(name), name.len()),
        _ => (None, 0),
    };
    if command.is_none() && !is_executable_path(command_source) {
        return Verdict::NotShell;
    }
    let tail = &command_source[command_len..];
    let remainder = tail.trim_start_matches(is_js_space);
    if command.is_some() && remainder.is_empty() {
        return if known.is_some() { Verdict::Shell } else { Verdict::NotShell };
    }
    let separator_follows = {
        let t = tail.trim_start_matches([' ', '\t']);
        t.starts_with([';', '\r', '\n', '&', '|'])
    };
    let arguments_follow = is_shell_argument(remainder)
        || (known.is_some() && is_redirection(remainder))
        || (command == Some("jq") && remainder.starts_with('.'));
    Verdict::Pending(Pending {
        command: command.map(str::to_owned),
        known: known.is_some(),
        separator_follows,
        arguments_follow,
    })
}

/// Removes leading `//`, `/* */` and `#` comments and the whitespace after each.
fn strip_leading_comments(mut s: &str) -> &str {
    loop {
        let rest = if let Some(r) = s.strip_prefix("//") {
            after_line(r)
        } else if let Some(r) = s.strip_prefix("/*") {
            r.find("*/").map(|end| &r[end + 2..])
        } else if let Some(r) = s.strip_prefix('#') {
            after_line(r)
        } else {
            None
        };
        let Some(rest) = rest else { return s };
        s = rest.trim_start_matches([' ', '\t', '\r', '\n']);
    }
}

/// The text after the line a comment sits on; `None` when the line ends in a lone `\r`, which (as in the
/// reference) stops the stripping.
fn after_line(s: &str) -> Option<&str> {
    match s.find(['\r', '\n']) {
        Some(i) if s[i..].starts_with("\r\n") => Some(&s[i + 2..]),
        Some(i) if s.as_bytes()[i] == b'\n' => Some(&s[i + 1..]),
        Some(_) => None,
        None => Some(""),
    }
}

/// `export` followed by something only a module can say (`export const`, `export default`, `export {`...).
fn is_javascript_export(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("export") else { return false };
    let after = rest.trim_start_matches(is_js_space);
    if after.len() == rest.len() {
        return false;
    }
    if after.starts_with(['=', '{', '*']) {
        return true;
    }
    const WORDS: &[&str] = &[
        "abstract",
        "as",
        "async",
        "class",
        "const",
        "declare",
        "default",
        "enum",
        "function",
        "import",
        "interface",
        "let",
        "namespace",
        "type",
        "var",
    ];
    WORDS.iter().any(|w| after.strip_prefix(w).is_some_and(|r| !r.as_bytes().first().copied().is_some_and(is_word)))
}

/// `if [ ...`, `while test ...`, `for x in ...`, `for ((...)); do`, `case x in`, `function f {`.
fn is_shell_control(s: &str) -> bool {
    fn blanks(s: &str) -> Option<&str> {
        let r = s.trim_start_matches([' ', '\t']);
        (r.len() < s.len()).then_some(r)
    }
    fn ident_with_dash(s: &str) -> Option<(&str, &str)> {
        let b = s.as_bytes();
        if !b.first().is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') {
            return None;
        }
        let end = b.iter().position(|c| !(is_word(*c) || *c == b'-')).unwrap_or(b.len());
        Some((&s[..end], &s[end..]))
    }
    for kw in ["if", "elif", "while", "until"] {
        if let Some(r) = s.strip_prefix(kw).and_then(blanks) {
            if let Some(after) = r.strip_prefix("[[").or_else(|| r.strip_prefix('['))
                && (after.is_empty() || after.starts_with([' ', '\t']))
            {
                return true;
            }
            if r.strip_prefix("test").is_some_and(|a| !a.as_bytes().first().copied().is_some_and(is_word)) {
                return true;
            }
            if let Some((_, after)) = ident_with_dash(r)
                && after.starts_with([' ', '\t', ';'])
            {
                return true;
            }
        }
    }
    if let Some(r) = s.strip_prefix("for").and_then(blanks) {
        let b = r.as_bytes();
        if b.first().is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') {
            let end = b.iter().position(|c| !is_word(*c)).unwrap_or(b.len());
            if let Some(a) = blanks(&r[end..])
                && a.strip_prefix("in").is_some_and(|x| !x.as_bytes().first().copied().is_some_and(is_word))
            {
                return true;
            }
        }
        if let Some(inner) = r.strip_prefix("((") {
            let line = &inner[..inner.find(['\r', '\n']).unwrap_or(inner.len())];
            for (close, _) in line.rmatch_indices("))") {
                let a = line[close + 2..].trim_start_matches([' ', '\t']);
                if let Some(a) = a.strip_prefix(';') {
                    let a = a.trim_start_matches([' ', '\t']);
                    if a.strip_prefix("do").is_some_and(|x| !x.as_bytes().first().copied().is_some_and(is_word)) {
                        return true;
                    }
                }
            }
        }
    }
    if let Some(r) = s.strip_prefix("case").and_then(blanks) {
        let end = r.find(is_js_space).unwrap_or(r.len());
        if end > 0
            && let Some(a) = blanks(&r[end..])
            && a.strip_prefix("in").is_some_and(|x| !x.as_bytes().first().copied().is_some_and(is_word))
        {
            return true;
        }
    }
    if let Some(r) = s.strip_prefix("function").and_then(blanks)
        && let Some((_, after)) = ident_with_dash(r)
        && after.trim_start_matches([' ', '\t']).starts_with('{')
    {
        return true;
    }
    false
}

/// Strips leading `NAME=value` assignments (`FOO=1 BAR="a b" npm test` becomes `npm test`).
///
/// A value is a run of double-quoted strings (with backslash escapes), single-quoted strings, backslash escapes
/// and plain characters (anything but whitespace, `;`, `&` and `|`; an unmatched quote is a plain character).
/// The assignment ends with blanks, or one line break with blanks around it, before the next word. The table is
/// filled from the end so that the whole strip is linear even for long chains of assignments and quotes.
fn strip_env_assignments(source: &str) -> &str {
    let bytes = source.as_bytes();
    let Some(first) = assignment_name(bytes, 0) else { return source };
    let n = bytes.len();
    // For each index: the index where the command starts if a value (or a quoted run) beginning there succeeds.
    let mut value = vec![0usize; n + 2];
    let mut dq = vec![0usize; n + 2];
    let mut sq = vec![0usize; n + 2];
    let mut blanks_end = 0usize;
    let mut newline_end = 0usize;
    let chars: Vec<(usize, char)> = source.char_indices().filter(|(i, _)| *i >= first).collect();
    for (k, &(i, c)) in chars.iter().enumerate().rev() {
        let next_index = chars.get(k + 1).map_or(n, |(j, _)| *j);
        let blank = c == ' ' || c == '\t';
        let whitespace = is_js_space(c);
        let separator = if blank {
            if blanks_end != 0 { blanks_end } else { newline_end }
        } else if c == '\n' {
            blanks_end
        } else if c == '\r' && bytes.get(i + 1) == Some(&b'\n') {
            newline_end
        } else {
            0
        };
        if !blank {
            blanks_end = if whitespace { 0 } else { i };
            newline_end = separator;
        }
        let escaped =
            c == '\\' && chars.get(k + 1).is_some_and(|(_, e)| !matches!(e, '\r' | '\n' | '\u{2028}' | '\u{2029}'));
        let after_escape = chars.get(k + 2).map_or(n, |(j, _)| *j);
        let escaped_dq = if escaped { dq[after_escape] } else { 0 };
        dq[i] = or(escaped_dq, if c == '"' { value[next_index] } else { dq[next_index] });
        sq[i] = if c == '\'' { value[next_index] } else { sq[next_index] };
        value[i] = [
            if c == '"' { dq[next_index] } else { 0 },
            if c == '\'' { sq[next_index] } else { 0 },
            if escaped { value[after_escape] } else { 0 },
            if !whitespace && !matches!(c, ';' | '&' | '|') { value[next_index] } else { 0 },
            separator,
        ]
        .into_iter()
        .find(|v| *v != 0)
        .unwrap_or(0);
    }
    let mut start = 0usize;
    let mut value_start = first;
    loop {
        let end = value[value_start];
        if end == 0 {
            break;
        }
        start = end;
        match assignment_name(bytes, end) {
            Some(next) => value_start = next,
            None => break,
        }
    }
    &source[start..]
}

fn or(a: usize, b: usize) -> usize {
    if a != 0 { a } else { b }
}

/// If `NAME=` starts at `at`, the index just after the `=`.
fn assignment_name(bytes: &[u8], at: usize) -> Option<usize> {
    let first = *bytes.get(at)?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    let mut i = at + 1;
    while i < bytes.len() && is_word(bytes[i]) {
        i += 1;
    }
    (bytes.get(i) == Some(&b'=')).then_some(i + 1)
}

/// Whether the byte after a command word ends it (end of input, whitespace, `;`, `&`, `|`, `<`, `>`).
fn ends_word(rest: &str) -> bool {
    rest.is_empty() || rest.starts_with(is_js_space) || rest.starts_with([';', '&', '|', '<', '>'])
}

/// A known command, optionally as `/bin/x`, `/usr/bin/x` or `/usr/local/bin/x`: its name and the length consumed.
fn known_command(s: &str) -> Option<(&str, usize)> {
    let prefix = ["/usr/local/bin/", "/usr/bin/", "/bin/"].into_iter().find(|p| s.starts_with(p)).unwrap_or("");
    let rest = &s[prefix.len()..];
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')).unwrap_or(rest.len());
    let name = &rest[..end];
    if !COMMANDS.contains(&name) || !ends_word(&rest[end..]) {
        return None;
    }
    Some((name, prefix.len() + name.len()))
}

/// An identifier-like first word (`custom-tool`, `some_cli`) followed by the end of the word.
fn shell_identifier(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    if !b.first().is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') {
        return None;
    }
    let end = b.iter().position(|c| !(is_word(*c) || *c == b'-')).unwrap_or(b.len());
    ends_word(&s[end..]).then(|| &s[..end])
}

/// Whether `s` starts with a relative, home, absolute or drive path.
fn path_prefix_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let sep = |i: usize| b.get(i).is_some_and(|c| *c == b'/' || *c == b'\\');
    if b.first() == Some(&b'/') {
        Some(1)
    } else if b.first() == Some(&b'~') && sep(1) {
        Some(2)
    } else if s.starts_with("..") && sep(2) {
        Some(3)
    } else if b.first() == Some(&b'.') && sep(1) {
        Some(2)
    } else if b.first().is_some_and(u8::is_ascii_alphabetic) && b.get(1) == Some(&b':') && sep(2) {
        Some(3)
    } else {
        None
    }
}

/// A path to an executable (`./gradlew`, `/opt/bin/tool`, `C:\run.cmd`) ending at a blank, `;`, `&`, `|` or the end.
fn is_executable_path(s: &str) -> bool {
    let Some(p) = path_prefix_len(s) else { return false };
    let rest = &s[p..];
    let end = rest.find(|c: char| is_js_space(c) || matches!(c, ';' | '|' | '&' | '(' | ')')).unwrap_or(rest.len());
    if end == 0 {
        return false;
    }
    let after = &rest[end..];
    after.is_empty() || after.starts_with([' ', '\t', '\r', '\n', ';', '&', '|'])
}

/// A flag (`-la`, `--color=never`) or a path argument.
fn is_shell_argument(s: &str) -> bool {
    let dashes = s.bytes().take_while(|b| *b == b'-').count();
    if (1..=2).contains(&dashes) {
        let rest = &s[dashes..];
        let b = rest.as_bytes();
        if b.first().is_some_and(u8::is_ascii_alphanumeric) {
            let end = b.iter().position(|c| !(is_word(*c) || *c == b'-')).unwrap_or(b.len());
            let after = &rest[end..];
            if after.is_empty() || after.starts_with([' ', '\t', '=', ';', '&', '|']) {
                return true;
            }
        }
    }
    path_prefix_len(s).is_some_and(|p| s[p..].chars().next().is_some_and(|c| !is_js_space(c)))
}

/// A redirection: `>`, `>>`, `<`, `<<` with an optional file descriptor, or `&>`/`&>>`.
fn is_redirection(s: &str) -> bool {
    let r = s.trim_start_matches(|c: char| c.is_ascii_digit());
    r.starts_with('>') || r.starts_with('<') || s.starts_with("&>")
}
