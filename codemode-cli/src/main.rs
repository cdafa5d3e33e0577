//! The `codemode` binary: `run` a program, `wait` on a suspended run, print the `surface`, or serve the MCP
//! gateway (`mcp`).
//!
//! It re-executes itself as the worker process (`codemode __worker`), so one binary is the whole product. Exit code
//! 0 means the run completed (or is waiting), 1 that it failed, 2 a usage or set-up error.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use codemode::{CodeMode, CodeModeResult, ExecOptions, Limits, RunScope};
use codemode_cli::host;
use codemode_gateway::{GatewayBuilder, Listen};
use codemode_telemetry::otlp::{ExportConfig, Telemetry};

#[global_allocator]
static ALLOCATOR: codemode::worker::CountingAlloc = codemode::worker::CountingAlloc;

/// The hidden subcommand the binary runs as when it is its own worker.
const WORKER_MARKER: &str = codemode_gateway::WORKER_ARG;

#[derive(Parser)]
#[command(name = "codemode", version, about = "Code mode for LLM agents: run model-written JavaScript against tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct Common {
    /// Folder the embedded read/list tools may read (paths are jailed to it).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// A JSON file of extra tools: {"tools": [{"name", "description", "parameters", "stub"?, ...}]}.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Keep suspended runs and the session store in this folder, so `codemode wait` can resume them.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Wall-clock budget of the call in milliseconds (100..=60000).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// The session id runs and store/load are scoped to.
    #[arg(long, default_value = "cli")]
    session: String,
    /// How workers confine themselves: required (default), best-effort (run without what the kernel lacks) or off.
    #[arg(long, value_name = "MODE", default_value = "required", value_parser = codemode_gateway::parse_confinement)]
    confinement: codemode::Confinement,
    /// Print what the program's nested calls did (ids, tool, timing, status, effect, redacted previews, replayed
    /// calls marked) under `activity` in the result.
    #[arg(long)]
    activity: bool,
}

/// The arguments of `codemode mcp`.
#[derive(Clone, Debug, clap::Args)]
struct GatewayArgs {
    /// The gateway config: codemode TOML, or a desktop client's `{"mcpServers": {...}}` JSON.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Serve Streamable HTTP on this address (e.g. 127.0.0.1:8931) instead of stdio. An address other than
    /// loopback needs `[auth]` in the config.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Keep suspended runs in this directory (overrides the config's `state_dir`).
    #[arg(long, value_name = "DIR", conflicts_with = "store")]
    state_dir: Option<PathBuf>,
    /// Keep suspended runs, session values and result references in this PostgreSQL database, shared by every
    /// replica started with it (overrides the config's `[store] url`).
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// How workers confine themselves: required (default), best-effort or off (overrides the config's
    /// `confinement`).
    #[arg(long, value_name = "MODE", value_parser = codemode_gateway::parse_confinement)]
    confinement: Option<codemode::Confinement>,
    /// The session id of the stdio client (runs and store/load are scoped to it), so that a gateway started again
    /// with the same id and state can resume the runs an earlier one parked; derived from the config file's path
    /// when absent.
    #[arg(long, value_name = "ID", conflicts_with = "http")]
    session: Option<String>,
    /// Keep nothing on disk: runs and store/load values in memory only, a fresh session id per process (a stdio
    /// gateway otherwise keeps them in `$XDG_STATE_HOME/codemode`, else `~/.local/state/codemode`).
    #[arg(long, conflicts_with_all = ["state_dir", "store"])]
    no_state: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run one program and print its CodeModeResult as JSON.
    Run {
        /// A file with the program, or `-` for stdin.
        file: Option<PathBuf>,
        /// The program text.
        #[arg(long)]
        code: Option<String>,
        /// A title for the cell.
        #[arg(long, default_value = "codemode run")]
        title: String,
        #[command(flatten)]
        common: Common,
    },
    /// Resume a waiting run by its runId.
    Wait {
        /// The runId printed by `run`.
        run_id: String,
        #[command(flatten)]
        common: Common,
    },
    /// Print the tool definitions the model sees, as a JSON array.
    Surface {
        /// Extra tools, as for `run`.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// A JSON file with `tools.codeMode` limits (`{"timeoutMs": ...}` or `{"tools": {"codeMode": {...}}}`).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Serve the code-mode MCP gateway over stdio.
    Mcp(GatewayArgs),
    #[command(name = WORKER_MARKER, hide = true)]
    Worker,
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some(WORKER_MARKER) {
        codemode::worker::run_worker();
    }
    let cli = Cli::parse();
    // Export is set up before the runtime starts and flushed after it stopped: the exporter's HTTP client blocks.
    let configured = match &cli.command {
        Command::Mcp(args) => codemode_gateway::configured_otlp_endpoint(&args.config),
        _ => None,
    };
    let telemetry = match Telemetry::install(&ExportConfig::from_env(configured.as_deref())) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("codemode: {e}");
            std::process::exit(2)
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("the tokio runtime starts");
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("codemode: {e:#}");
            2
        }
    };
    // Tasks still holding spans (upstream connections closing) end with the runtime, before the last export.
    drop(runtime);
    telemetry.shutdown();
    std::process::exit(code)
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Run { file, code, title, common } => {
            let code = match (code, file) {
                (Some(code), _) => code,
                (None, Some(path)) if path.as_os_str() == "-" => {
                    std::io::read_to_string(std::io::stdin()).context("reading the program from stdin")?
                }
                (None, Some(path)) => std::fs::read_to_string(&path)
                    .with_context(|| format!("reading the program from {}", path.display()))?,
                (None, None) => anyhow::bail!("give a program: a FILE, `-` for stdin, or --code CODE"),
            };
            let engine = engine(&common)?;
            let input = serde_json::json!({ "title": title, "code": code });
            Ok(print(engine.exec_with(input, scope(&common), &options(&common)).await))
        }
        Command::Wait { run_id, common } => {
            let engine = engine(&common)?;
            let input = serde_json::json!({ "runId": run_id });
            Ok(print(engine.wait_with(input, scope(&common), &options(&common)).await))
        }
        Command::Surface { catalog, config } => {
            let limits = match config {
                Some(path) => load_limits(&path)?,
                None => Limits::default(),
            };
            let tools = host::tools(catalog.as_deref())?;
            let surface = codemode::surface_of(tools.into_iter().map(|(definition, _)| definition).collect(), &limits)?;
            println!("{}", serde_json::to_string_pretty(&surface)?);
            Ok(0)
        }
        Command::Mcp(args) => {
            let mut gateway = GatewayBuilder::load(&args.config)?;
            if let Some(dir) = args.state_dir {
                gateway = gateway.state_dir(dir);
            }
            if let Some(url) = args.store {
                gateway = gateway.store(url);
            }
            if let Some(confinement) = args.confinement {
                gateway = gateway.confinement(confinement);
            }
            let listen = match args.http {
                Some(addr) => Listen::Http(addr),
                None if args.no_state => {
                    gateway = gateway.in_memory();
                    Listen::Stdio { session: args.session }
                }
                // The embedded default of one person's stdio gateway: its runs and store/load values outlive the
                // process, under a session id stable for its config file.
                None => {
                    if !gateway.persists()
                        && let Some(dir) = codemode_gateway::default_state_dir()
                    {
                        gateway = gateway.state_dir(dir);
                    }
                    Listen::Stdio {
                        session: Some(args.session.unwrap_or_else(|| codemode_gateway::config_session(&args.config))),
                    }
                }
            };
            gateway.serve(listen).await?;
            Ok(0)
        }
        Command::Worker => unreachable!("handled before argument parsing"),
    }
}

fn options(common: &Common) -> ExecOptions {
    ExecOptions::default().activity_in_result(common.activity)
}

fn scope(common: &Common) -> RunScope {
    RunScope { session_id: Some(common.session.clone()), ..RunScope::default() }
}

fn engine(common: &Common) -> anyhow::Result<CodeMode> {
    let mut limits = Limits::default();
    if let Some(ms) = common.timeout_ms {
        limits.timeout_ms = ms.clamp(100, 60_000);
    }
    let tools = host::tools(common.catalog.as_deref())?;
    let cli_host = host::CliHost::new(&common.root, &tools)?;
    let engine = CodeMode::builder()
        .limits(limits)
        .tools(tools.into_iter().map(|(definition, _)| definition).collect())
        .host(Arc::new(cli_host))
        .state_dir(common.state.clone())
        .worker(codemode::WorkerCommand::current_exe(&[WORKER_MARKER])?)
        .warm_workers(1)
        .confinement(common.confinement)
        .build()?;
    Ok(engine)
}

fn load_limits(path: &std::path::Path) -> anyhow::Result<Limits> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    let object = value.pointer("/tools/codeMode").cloned().unwrap_or(value);
    Ok(Limits::from_json(&object))
}

fn print(result: CodeModeResult) -> i32 {
    use std::io::Write as _;
    // A closed pipe (`codemode run ... | head`) is the reader's choice, not an error worth a panic.
    let _ = writeln!(std::io::stdout(), "{}", serde_json::to_string(&result).expect("results always serialize"));
    match result {
        CodeModeResult::Failed(_) => 1,
        _ => 0,
    }
}
