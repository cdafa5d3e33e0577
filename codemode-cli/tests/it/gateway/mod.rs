//! Gateway tests with real parts: the npm MCP servers pinned in `mcp-servers/`, real processes, rmcp's client.
//!
//! Nothing is mocked and nothing is skipped: without `mcp-servers/node_modules` every test fails and says how to
//! install it.

mod approvals;
mod auth;
mod e2e;
mod fleet;
mod lines;
mod otel;
mod relay;
mod upstream;

use std::path::{Path, PathBuf};

/// The `mcp-servers/node_modules/@modelcontextprotocol` folder, or a panic that says how to install it.
pub fn mcp_packages() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mcp-servers/node_modules/@modelcontextprotocol");
    for pkg in ["server-everything", "server-filesystem"] {
        let entry = root.join(pkg).join("dist/index.js");
        assert!(
            entry.is_file(),
            "{} is missing: the gateway tests wrap real npm MCP servers; run `npm ci --prefix mcp-servers` at the \
             repository root first",
            entry.display()
        );
    }
    root
}

/// The TOML `[servers.*]` tables for server-everything (as `everything`) and server-filesystem on `fs_root` (as
/// `fs`), with extra lines appended to the `everything` table.
pub fn servers_toml(fs_root: &Path, everything_extra: &str) -> String {
    let pkgs = mcp_packages();
    let everything = pkgs.join("server-everything/dist/index.js");
    let filesystem = pkgs.join("server-filesystem/dist/index.js");
    format!(
        "[servers.everything]\ncommand = \"node\"\nargs = [{everything:?}, \"stdio\"]\n{everything_extra}\n\n\
         [servers.fs]\ncommand = \"node\"\nargs = [{filesystem:?}, {root:?}]\n",
        everything = everything.display().to_string(),
        filesystem = filesystem.display().to_string(),
        root = fs_root.display().to_string(),
    )
}

/// A temp dir holding `gateway.toml` (limits + both servers) and a `files/` root with `hello.txt` for the
/// filesystem server.
pub fn fixture(limits: &str, everything_extra: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = dir.path().join("files");
    std::fs::create_dir(&files).expect("files dir");
    std::fs::write(files.join("hello.txt"), "hello from the filesystem server\n").expect("fixture file");
    // The filesystem server reports canonical paths; a symlinked temp dir would not match.
    let files = files.canonicalize().expect("canonical files dir");
    let text = format!("[limits]\n{limits}\n\n{}", servers_toml(&files, everything_extra));
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, text).expect("config file");
    (dir, config)
}

/// Installs the TLS provider this process's reqwest clients (rmcp's HTTP client transport) need.
pub fn tls() {
    codemode_cli::gateway::install_tls_provider();
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
