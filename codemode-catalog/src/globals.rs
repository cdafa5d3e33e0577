//! The one list of guest globals: the names a guest's global scope holds besides the ECMAScript built-ins.
//!
//! Not the installer: codemode-worker's prelude defines these names, and a worker test checks that it defines exactly
//! these. Invariant: the catalog's reserved names ([`crate::names`]) and the shell-command check (codemode-source)
//! are derived from the lists here, so a global added to the prelude without a line here fails that test.

/// Every global the code-mode prelude installs, besides the ECMAScript built-ins and the run's tool functions.
pub const GUEST_GLOBALS: &[&str] = &[
    // The guest API (prelude.js).
    "API",
    "MCP",
    "attach",
    "catalog",
    "clearTimeout",
    "console",
    "json",
    "load",
    "namespaces",
    "results",
    "setTimeout",
    "store",
    "text",
    "yield_control",
    // Web platform pieces, compiled on first use (extras.js).
    "DOMException",
    "TextDecoder",
    "TextEncoder",
    "atob",
    "btoa",
    "structuredClone",
];

/// The ECMAScript built-ins a context may hold (Annex B and `Intl` included), whether or not this engine
/// version installs each one; the prelude deletes `WeakRef` and `FinalizationRegistry`, and they stay listed so
/// no tool takes their names either.
pub const STANDARD_GLOBALS: &[&str] = &[
    "AggregateError",
    "Array",
    "ArrayBuffer",
    "Atomics",
    "BigInt",
    "BigInt64Array",
    "BigUint64Array",
    "Boolean",
    "DataView",
    "Date",
    "Error",
    "EvalError",
    "FinalizationRegistry",
    "Float16Array",
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
    "SharedArrayBuffer",
    "String",
    "Symbol",
    "SyntaxError",
    "Temporal",
    "TypeError",
    // Not ECMAScript: Boa 0.22 also exposes %TypedArray% under this name.
    "TypedArray",
    "URIError",
    "Uint16Array",
    "Uint32Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "WeakMap",
    "WeakRef",
    "WeakSet",
    "decodeURI",
    "decodeURIComponent",
    "encodeURI",
    "encodeURIComponent",
    "escape",
    "eval",
    "globalThis",
    "isFinite",
    "isNaN",
    "parseFloat",
    "parseInt",
    "undefined",
    "unescape",
];

/// Names no tool may take although nothing here installs them: the reference implementation's host globals (so
/// a tool keeps one callable name under both) and web platform globals model code may expect.
pub const RESERVED_UNINSTALLED: &[&str] =
    &["ALL_TOOLS", "agents", "log", "nodes", "phase", "skills", "tools", "queueMicrotask", "WebAssembly"];

/// Whether `name` is a global of a guest program: a guest global or a standard built-in.
pub fn is_guest_or_standard(name: &str) -> bool {
    GUEST_GLOBALS.contains(&name) || STANDARD_GLOBALS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_disjoint_and_without_duplicates() {
        let all: Vec<&str> =
            GUEST_GLOBALS.iter().chain(STANDARD_GLOBALS).chain(RESERVED_UNINSTALLED).copied().collect();
        let unique: std::collections::HashSet<&str> = all.iter().copied().collect();
        assert_eq!(unique.len(), all.len(), "a name is listed twice");
    }

    /// Regression: `DOMException` is installed by the prelude and was missing from the reserved names.
    #[test]
    fn dom_exception_is_a_guest_global_and_reserved() {
        assert!(GUEST_GLOBALS.contains(&"DOMException"));
        assert!(crate::names::is_reserved("DOMException", &[]));
    }
}
