//! Callable-name normalization and allocation for guest globals, and camelCase names for the `MCP` namespace.
//!
//! Not a policy module: it never decides which tools exist, only what they are called. Invariant: every
//! allocated name is a valid JavaScript identifier, unique, never reserved, and depends only on the set of
//! (tool name, catalog id) pairs, not on their order.

use std::collections::HashSet;

use sha2::{Digest, Sha256};

use crate::CatalogError;
use crate::globals::{GUEST_GLOBALS, RESERVED_UNINSTALLED, STANDARD_GLOBALS, is_guest_or_standard};

/// Reserved words: every keyword token plus the strict-mode future reserved words (and `let`/`arguments`,
/// which strict code cannot bind either).
pub const RESERVED_WORDS: &[&str] = &[
    "break",
    "case",
    "catch",
    "continue",
    "debugger",
    "default",
    "do",
    "else",
    "finally",
    "for",
    "function",
    "if",
    "return",
    "switch",
    "throw",
    "try",
    "var",
    "const",
    "while",
    "with",
    "new",
    "this",
    "super",
    "class",
    "extends",
    "export",
    "import",
    "null",
    "true",
    "false",
    "in",
    "instanceof",
    "typeof",
    "void",
    "delete",
    "await",
    "enum",
    "implements",
    "interface",
    "package",
    "private",
    "protected",
    "public",
    "static",
    "yield",
    "let",
    "arguments",
];

/// Globals a tool may never shadow, from [`crate::globals`]: the guest globals the prelude installs, the
/// ECMAScript built-ins, and the reserved names nothing installs.
pub fn reserved_globals() -> impl Iterator<Item = &'static str> {
    GUEST_GLOBALS.iter().chain(STANDARD_GLOBALS).chain(RESERVED_UNINSTALLED).copied()
}

/// Whether `name` is a global a tool may never shadow (see [`reserved_globals`]).
pub fn is_reserved_global(name: &str) -> bool {
    is_guest_or_standard(name) || RESERVED_UNINSTALLED.contains(&name)
}

/// Whether `name` is a reserved word or a reserved global (extra names included).
pub fn is_reserved(name: &str, extra: &[String]) -> bool {
    RESERVED_WORDS.contains(&name) || is_reserved_global(name) || extra.iter().any(|e| e == name)
}

/// Whether `name` is a JavaScript identifier in the ASCII subset we emit.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// The base callable name: invalid characters become `_`; a bad start or a host-private prefix gets `tool_`.
pub fn base_name(name: &str) -> String {
    let mut base: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '$' { c } else { '_' }).collect();
    let bad_start = !base.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '$');
    if bad_start || base.starts_with("__openclaw") || base.starts_with("__codemode") {
        base.insert_str(0, "tool_");
    }
    base
}

/// One tool asking for a callable name.
pub struct NameRequest<'a> {
    /// The tool's own name.
    pub name: &'a str,
    /// The host-only catalog id; only its hash can reach a name.
    pub id: &'a str,
}

/// Allocates callable names; the result is indexed like `requests`.
///
/// # Errors
///
/// [`CatalogError::NameAllocation`] when no suffix length up to the full hash gives a free name.
pub fn allocate(requests: &[NameRequest<'_>], extra_reserved: &[String]) -> Result<Vec<String>, CatalogError> {
    struct Pending {
        index: usize,
        base: String,
        exact: bool,
    }
    let mut pending: Vec<Pending> = requests
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let base = base_name(r.name);
            let exact = base == r.name && !is_reserved(&base, extra_reserved);
            Pending { index, base, exact }
        })
        .collect();
    // Exact safe names claim their spelling first, so a normalized neighbour never steals it; then base and id
    // order make the outcome independent of input order.
    pending.sort_by(|a, b| {
        b.exact
            .cmp(&a.exact)
            .then_with(|| a.base.cmp(&b.base))
            .then_with(|| requests[a.index].id.cmp(requests[b.index].id))
    });
    let mut used: HashSet<String> = HashSet::with_capacity(requests.len());
    let mut out = vec![String::new(); requests.len()];
    for p in pending {
        let name = if !is_reserved(&p.base, extra_reserved) && !used.contains(&p.base) {
            p.base
        } else {
            let digest = hex::encode(Sha256::digest(requests[p.index].id.as_bytes()));
            let mut found = None;
            for len in (8..=64).step_by(2) {
                let candidate = format!("{}_{}", p.base, &digest[..len]);
                if !used.contains(&candidate) && !is_reserved(&candidate, extra_reserved) {
                    found = Some(candidate);
                    break;
                }
            }
            found.ok_or(CatalogError::NameAllocation)?
        };
        used.insert(name.clone());
        out[p.index] = name;
    }
    Ok(out)
}

/// A camelCase identifier for the `MCP` namespace: `chrome-devtools` → `chromeDevtools`, `create_issue` →
/// `createIssue`, `API-get-user` → `apiGetUser`.
pub fn camel_case(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let words = raw.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty());
    for (i, word) in words.enumerate() {
        if i == 0 {
            // An all-caps first word (`API`, `URL`) reads as one lowercase word; otherwise only its first letter
            // is lowered so `getUser` stays `getUser`.
            if word.chars().all(|c| !c.is_ascii_lowercase()) {
                out.push_str(&word.to_ascii_lowercase());
            } else {
                let mut chars = word.chars();
                if let Some(c) = chars.next() {
                    out.push(c.to_ascii_lowercase());
                    out.push_str(chars.as_str());
                }
            }
        } else {
            let mut chars = word.chars();
            if let Some(c) = chars.next() {
                out.push(c.to_ascii_uppercase());
                out.push_str(chars.as_str());
            }
        }
    }
    if out.is_empty() {
        out.push_str("tool");
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// Allocates namespace identifiers in input order: camelCase, then `name2`, `name3`, … on a collision with an
/// earlier name or a reserved one.
pub fn allocate_namespace(raws: &[&str], reserved: &[&str]) -> Vec<String> {
    let mut used: HashSet<String> = HashSet::with_capacity(raws.len());
    raws.iter()
        .map(|raw| {
            let base = camel_case(raw);
            let taken = |n: &str, used: &HashSet<String>| {
                used.contains(n) || reserved.contains(&n) || RESERVED_WORDS.contains(&n)
            };
            let mut name = base.clone();
            let mut n = 2u32;
            while taken(&name, &used) {
                name = format!("{base}{n}");
                n += 1;
            }
            used.insert(name.clone());
            name
        })
        .collect()
}

/// Orders two names as the reference's `a.localeCompare(b)` does (ICU's root collation) for the characters names
/// and declaration paths hold: letters compare case-insensitively first (`delete_file` before `JSON_parse`), after
/// digits, after the symbols `_ - . / $` in that order; on a tie lower case goes before upper case; other
/// characters come after letters by code point.
pub fn locale_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn primary(c: char) -> u32 {
        match c {
            '_' => 1,
            '-' => 2,
            '.' => 3,
            '/' => 4,
            '$' => 5,
            '0'..='9' => 10 + (c as u32 - '0' as u32),
            'a'..='z' => 20 + (c as u32 - 'a' as u32),
            'A'..='Z' => 20 + (c as u32 - 'A' as u32),
            _ => 0x100 + c as u32,
        }
    }
    a.chars()
        .map(primary)
        .cmp(b.chars().map(primary))
        .then_with(|| a.chars().map(|c| c.is_ascii_uppercase()).cmp(b.chars().map(|c| c.is_ascii_uppercase())))
        .then_with(|| a.cmp(b))
}
