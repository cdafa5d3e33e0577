//! The dependency checks of `cargo xtask tidy`: every dependency a workspace crate declares must be named in its
//! Rust code, so CI needs nothing but cargo (no `cargo machete`), and ARCHITECTURE.md's "may depend on" column must
//! name exactly each crate's normal dependencies inside the workspace.
//!
//! A text check, not a resolver: a dependency counts as used when a line of code (comment lines do not count) in
//! the crate's `src`, `tests`, `benches`, `examples` or `build.rs` says `name::`, `use name` or `extern crate name`,
//! with `name` the crate name (`-` becomes `_`, a rename wins). A crate lists deliberate exceptions in its
//! `Cargo.toml` under `[package.metadata.cargo-machete] ignored = [...]`, the key `cargo machete` reads too.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;

/// Appends a problem for each crate whose row in ARCHITECTURE.md's crate table does not list exactly its normal
/// workspace dependencies (`codemode-x` written `x`, the facade `the facade`, none `nothing internal`).
pub fn check_architecture_table(
    root: &Path,
    packages: &[serde_json::Value],
    problems: &mut Vec<String>,
) -> anyhow::Result<()> {
    let path = root.join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let members: BTreeSet<&str> =
        packages.iter().filter_map(|p| p["name"].as_str()).filter(|name| *name != crate::HACK).collect();
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        if name == crate::HACK {
            continue;
        }
        let actual: BTreeSet<&str> = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .filter(|d| members.contains(d))
            .collect();
        let row = text.lines().find_map(|line| line.strip_prefix(&format!("| `{name}` | ")));
        let Some(column) = row.and_then(|rest| rest.split(" | ").nth(2)) else {
            problems.push(format!("ARCHITECTURE.md: add a row for `{name}` to the crate table"));
            continue;
        };
        let listed: BTreeSet<String> = column
            .split(", ")
            .filter(|d| *d != "nothing internal" && *d != "-")
            .map(|d| if d == "the facade" { "codemode".to_owned() } else { format!("codemode-{d}") })
            .collect();
        let actual: BTreeSet<String> = actual.into_iter().map(str::to_owned).collect();
        if listed != actual {
            problems.push(format!(
                "ARCHITECTURE.md: the \"may depend on\" column of `{name}` says {listed:?}, its Cargo.toml says \
                 {actual:?}"
            ));
        }
    }
    Ok(())
}

/// Appends a problem for each declared dependency of `package` (one `cargo metadata` package) that its code never
/// names.
pub fn check_unused(package: &serde_json::Value, dir: &Path, problems: &mut Vec<String>) -> anyhow::Result<()> {
    let name = package["name"].as_str().unwrap_or_default();
    let ignored: Vec<&str> = package["metadata"]["cargo-machete"]["ignored"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .collect();
    let mut code = String::new();
    for sub in ["src", "tests", "benches", "examples"] {
        read_code(&dir.join(sub), &mut code)?;
    }
    read_code(&dir.join("build.rs"), &mut code)?;
    let mut seen = Vec::new();
    for dep in package["dependencies"].as_array().into_iter().flatten() {
        let declared = dep["name"].as_str().unwrap_or_default();
        // A crate's dev-dependency on itself (to enable a feature for its own tests) is not a dependency.
        // The hakari crate is there for its features, not its code.
        if declared == name || declared == crate::HACK || ignored.contains(&declared) || seen.contains(&declared) {
            continue;
        }
        seen.push(declared);
        let krate = dep["rename"].as_str().unwrap_or(declared).replace('-', "_");
        if !mentions(&code, &krate) {
            problems.push(format!(
                "{name} declares `{declared}` but its code never names `{krate}`: remove the dependency, or list it \
                 under [package.metadata.cargo-machete] ignored in {name}/Cargo.toml with a comment saying why"
            ));
        }
    }
    Ok(())
}

/// Appends the code lines (comment lines dropped) of every `.rs` file at or under `path`.
fn read_code(path: &Path, out: &mut String) -> anyhow::Result<()> {
    if path.is_dir() {
        for entry in std::fs::read_dir(path)? {
            read_code(&entry?.path(), out)?;
        }
    } else if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
        let text = std::fs::read_to_string(path)?;
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(())
}

/// Whether `code` names the crate `krate` as a path (`krate::`), an import (`use krate`) or `extern crate krate`,
/// with `krate` a whole identifier in each.
fn mentions(code: &str, krate: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(at) = code[from..].find(krate) {
        let start = from + at;
        let end = start + krate.len();
        from = end;
        let before = &code[..start];
        let after = &code[end..];
        if before.ends_with(is_ident) || after.starts_with(is_ident) {
            continue;
        }
        // `other::krate::` is a module of another crate; `::krate::` and `krate::` name the crate.
        let qualified = before.strip_suffix("::").is_some_and(|rest| rest.ends_with(is_ident));
        let before = before.trim_end_matches([' ', '\t']);
        let after_keyword = |keyword: &str| before.strip_suffix(keyword).is_some_and(|rest| !rest.ends_with(is_ident));
        if (after.starts_with("::") && !qualified) || after_keyword("use") || after_keyword("extern crate") {
            return true;
        }
    }
    false
}

/// Appends a problem for each registry package an example's lock file (`examples/*/Cargo.lock`) pins at a version the
/// workspace's `Cargo.lock` does not: with the same versions (and the hakari crate patched in, see `scripts/test.sh`),
/// an example's build reuses every third-party crate the tests' build compiled. The workspace's patched crates (the
/// vendored Boa) count at their version: an example without the patch pins crates.io's release of it.
pub fn check_example_locks(root: &Path, problems: &mut Vec<String>) -> anyhow::Result<()> {
    let pinned = |path: &Path, registry_only: bool| -> anyhow::Result<BTreeSet<(String, String)>> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let lock: toml::Table = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let packages = lock.get("package").and_then(toml::Value::as_array).map(Vec::as_slice).unwrap_or_default();
        Ok(packages
            .iter()
            .filter(|p| !registry_only || p.get("source").is_some())
            .filter_map(|p| Some((p.get("name")?.as_str()?.to_owned(), p.get("version")?.as_str()?.to_owned())))
            .collect())
    };
    let workspace = pinned(&root.join("Cargo.lock"), false)?;
    for entry in std::fs::read_dir(root.join("examples"))? {
        let lock = entry?.path().join("Cargo.lock");
        if !lock.is_file() {
            continue;
        }
        for (name, version) in pinned(&lock, true)?.difference(&workspace) {
            problems.push(format!(
                "{}: {name} {version} is not the workspace's version: copy Cargo.lock over it, then run \
                 `cargo metadata` in the example with the hakari crate patched in (see scripts/test.sh)",
                lock.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::mentions;

    #[test]
    fn names_a_crate_only_as_a_whole_path_import_or_extern() {
        assert!(mentions("let x = serde_json::to_string(&v);", "serde_json"));
        assert!(mentions("use thiserror::Error;", "thiserror"));
        assert!(mentions("#[derive(thiserror::Error)]", "thiserror"));
        assert!(mentions("use memchr;", "memchr"));
        assert!(mentions("extern crate libc;", "libc"));
        assert!(mentions("#[tokio::test]", "tokio"));
        assert!(!mentions("let x = serde_json::to_string(&v);", "serde"));
        assert!(!mentions("let hex = 1; hex + 1", "hex"));
        assert!(!mentions("let x = my_hex::f();", "hex"));
        assert!(!mentions("let x = other::hex::f();", "hex"));
        assert!(!mentions("let reuse hex", "hex"));
        assert!(mentions("let x = ::hex::encode(b);", "hex"));
    }
}
