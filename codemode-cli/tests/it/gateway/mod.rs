//! Gateway tests with real parts: the npm MCP servers pinned in `mcp-servers/`, real processes, rmcp's client.
//!
//! Nothing is mocked and nothing is skipped: without `mcp-servers/node_modules` every test fails and says how to
//! install it.

mod approvals;
mod auth;
mod console;
mod e2e;
mod fleet;
mod lines;
mod otel;
mod protocol;
mod relay;
mod secrets;
mod shares;

use std::path::{Path, PathBuf};
use std::time::Duration;

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
    codemode_gateway::install_tls_provider();
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

/// A `codemode mcp --config <config> --http 127.0.0.1:0` process and the URL it serves, killed when dropped.
pub struct HttpGateway {
    pub process: tokio::process::Child,
    /// The Streamable HTTP endpoint, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// The approval console's base URL, `http://127.0.0.1:<port>`, when the config has `[console]`.
    pub console: Option<String>,
}

impl HttpGateway {
    /// Starts the gateway and reads the URL it prints once it listens; its stderr is drained (and echoed to the
    /// test's output) from then on, so upstream logs cannot block it. Installs the TLS provider this process's HTTP
    /// clients need.
    pub async fn start(config: &Path) -> HttpGateway {
        HttpGateway::start_with(config, &[]).await
    }

    /// [`HttpGateway::start`] with more command-line arguments after `--http`.
    pub async fn start_with(config: &Path, args: &[&str]) -> HttpGateway {
        HttpGateway::start_with_env(config, args, &[]).await
    }

    /// [`HttpGateway::start_with`] with these environment variables set.
    pub async fn start_with_env(config: &Path, args: &[&str], env: &[(&str, &str)]) -> HttpGateway {
        use tokio::io::AsyncBufReadExt;
        tls();
        let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
            .envs(env.iter().copied())
            .arg("mcp")
            .arg("--config")
            .arg(config)
            .arg("--http")
            .arg("127.0.0.1:0")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the codemode binary starts");
        let stderr = process.stderr.take().expect("piped stderr");
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let wants_console = std::fs::read_to_string(config).is_ok_and(|text| text.contains("[console]"));
        let (url, console) = tokio::time::timeout(Duration::from_secs(60), async {
            let (mut url, mut console) = (None, None);
            while let Some(line) = lines.next_line().await.expect("read stderr") {
                if let Some(found) = line.split("serving Streamable HTTP at ").nth(1) {
                    url = Some(found.trim().to_owned());
                } else if let Some(found) = line.split("approval console at ").nth(1) {
                    console = Some(found.trim().trim_end_matches('/').to_owned());
                } else {
                    eprintln!("gateway: {line}");
                }
                if url.is_some() && (console.is_some() || !wants_console) {
                    return (url.unwrap_or_default(), console);
                }
            }
            panic!("the gateway exited without serving HTTP");
        })
        .await
        .expect("the gateway listens within a minute");
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("gateway: {line}");
            }
        });
        HttpGateway { process, url, console }
    }

    /// The gateway's pid.
    pub fn pid(&self) -> u32 {
        self.process.id().expect("the gateway runs")
    }

    /// The URL without its `/mcp` path: where the well-known documents are.
    pub fn base(&self) -> &str {
        self.url.trim_end_matches("/mcp")
    }
}
