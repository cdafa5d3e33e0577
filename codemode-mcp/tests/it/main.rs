//! The MCP client side against real MCP servers: the npm servers pinned in `mcp-servers/`, started as processes.
//!
//! Nothing is mocked and nothing is skipped: without `mcp-servers/node_modules` every test fails and says how to
//! install it.

mod upstream;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use codemode_mcp::{ServerConfig, Startup, Transport};

/// The `mcp-servers/node_modules/@modelcontextprotocol` folder, or a panic that says how to install it.
pub fn mcp_packages() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mcp-servers/node_modules/@modelcontextprotocol");
    for pkg in ["server-everything", "server-filesystem"] {
        let entry = root.join(pkg).join("dist/index.js");
        assert!(
            entry.is_file(),
            "{} is missing: these tests run real npm MCP servers; run `npm ci --prefix mcp-servers` at the \
             repository root first",
            entry.display()
        );
    }
    root
}

/// A stdio server run by `node` with `args`.
pub fn node(args: Vec<String>) -> ServerConfig {
    ServerConfig {
        transport: Transport::Stdio { command: "node".into(), args, env: BTreeMap::new(), inherit_env: Vec::new() },
        startup: Startup::Eager,
        deny: Vec::new(),
        direct: Vec::new(),
    }
}

/// server-everything (as `everything`, changed by `everything`) and server-filesystem on a `files/` folder holding
/// `hello.txt` (as `fs`); the temp dir holds the folder.
pub fn servers(everything: impl FnOnce(&mut ServerConfig)) -> (tempfile::TempDir, BTreeMap<String, ServerConfig>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = dir.path().join("files");
    std::fs::create_dir(&files).expect("files dir");
    std::fs::write(files.join("hello.txt"), "hello from the filesystem server\n").expect("fixture file");
    // The filesystem server reports canonical paths; a symlinked temp dir would not match.
    let files = files.canonicalize().expect("canonical files dir");
    let pkgs = mcp_packages();
    let entry = |pkg: &str| pkgs.join(pkg).join("dist/index.js").display().to_string();
    let mut first = node(vec![entry("server-everything"), "stdio".into()]);
    everything(&mut first);
    let fs = node(vec![entry("server-filesystem"), files.display().to_string()]);
    (dir, BTreeMap::from([("everything".to_owned(), first), ("fs".to_owned(), fs)]))
}

/// Kills a process with SIGKILL.
pub fn kill(pid: u32) {
    let status = std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status().expect("run kill");
    assert!(status.success(), "kill -9 {pid} failed");
}

/// Whether a process is still alive (not yet reaped counts as gone once it is a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}
