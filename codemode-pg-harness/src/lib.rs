//! A throwaway PostgreSQL for the tests and benchmarks of the fleet store and the gateway: the server
//! `$CODEMODE_TEST_PG_URL` names, or else a cluster of this process's own (`initdb` into a temp folder, `pg_ctl start`
//! on a free loopback port with its socket in that folder), stopped and deleted when the process exits. Each caller
//! gets a fresh database; `run_row`, `expire_lease` and `expire_run` read and age the store's rows by SQL.
//!
//! Only ever a dev-dependency (`cargo xtask tidy` checks it), so no production build carries it: the cluster trusts
//! every local connection. As root, the server runs as the `postgres` user
//! (PostgreSQL refuses root), which owns the folder.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// Where the PostgreSQL 15 binaries are on these machines (Debian's layout); `$CODEMODE_PG_BIN` overrides it.
pub const DEFAULT_PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The server the harness uses: its admin URL (database `postgres`) and how to reach a database on it.
#[derive(Debug)]
pub struct Server {
    host: String,
    port: u16,
    user: String,
}

impl Server {
    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{}@{}:{}/{db}", self.user, self.host, self.port)
    }
}

/// The cluster this process started, stopped at exit.
struct Owned {
    dir: PathBuf,
    as_postgres: bool,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static OWNED: Mutex<Option<Owned>> = Mutex::new(None);
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// The harness's server: `$CODEMODE_TEST_PG_URL`'s, or one this process starts on first use.
///
/// # Errors
///
/// A message saying what failed (no binaries, `initdb` or `pg_ctl` failing, with their output).
pub fn server() -> Result<&'static Server, String> {
    SERVER.get_or_init(start).as_ref().map_err(Clone::clone)
}

/// A new, empty database on the harness's server, and its URL.
///
/// # Errors
///
/// The server could not be started or reached, or the database not created.
pub async fn fresh_database() -> Result<String, String> {
    let server = server()?;
    let name = format!("codemode_test_{}_{}_{}", std::process::id(), DATABASES.fetch_add(1, Ordering::SeqCst), nanos());
    let (client, connection) = tokio_postgres::connect(&server.url("postgres"), tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot reach the test PostgreSQL at {}: {e}", server.url("postgres")))?;
    let driver = tokio::spawn(connection);
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.map_err(|e| format!("CREATE DATABASE: {e}"))?;
    drop(client);
    let _ = driver.await;
    Ok(server.url(&name))
}

fn start() -> Result<Server, String> {
    if let Ok(url) = std::env::var("CODEMODE_TEST_PG_URL") {
        let config: tokio_postgres::Config =
            url.parse().map_err(|e| format!("$CODEMODE_TEST_PG_URL is not a PostgreSQL URL: {e}"))?;
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => return Err("$CODEMODE_TEST_PG_URL must name a TCP host".into()),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let user = config.get_user().unwrap_or("postgres").to_owned();
        return Ok(Server { host, port, user });
    }
    let bin = PathBuf::from(std::env::var("CODEMODE_PG_BIN").unwrap_or_else(|_| DEFAULT_PG_BIN.into()));
    let as_postgres = is_root();
    let dir = std::env::temp_dir().join(format!("codemode-pg-{}-{}", std::process::id(), nanos()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if as_postgres {
        run(Command::new("chown").arg("postgres:postgres").arg(&dir), "chown")?;
    }
    let data = dir.join("data");
    run(
        pg_command(as_postgres, &bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "-D"])
            .arg(&data),
        "initdb",
    )?;
    let port = free_port()?;
    let options = format!("-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off", dir.display());
    *OWNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Owned { dir: dir.clone(), as_postgres });
    // SAFETY: `stop_at_exit` is an `extern "C" fn()` that does not unwind (it catches nothing and calls nothing that
    // panics across the boundary: every error is ignored).
    unsafe {
        libc::atexit(stop_at_exit);
    }
    run(
        pg_command(as_postgres, &bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-o")
            .arg(options)
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "start"]),
        "pg_ctl start",
    )?;
    Ok(Server { host: "127.0.0.1".into(), port, user: "postgres".into() })
}

fn nanos() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn pg_command(as_postgres: bool, program: &Path) -> Command {
    if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let output = command.output().map_err(|e| format!("cannot run {what}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| format!("no free port: {e}"))
}

extern "C" fn stop_at_exit() {
    let owned = OWNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(Owned { dir, as_postgres }) = owned {
        let bin = PathBuf::from(std::env::var("CODEMODE_PG_BIN").unwrap_or_else(|_| DEFAULT_PG_BIN.into()));
        let _ = pg_command(as_postgres, &bin.join("pg_ctl"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// What the store holds about one run, read straight from its row (for tests that watch a fleet from outside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRow {
    /// The replica holding the run's claim, if any.
    pub lease_holder: Option<String>,
    /// When the run expires (epoch ms).
    pub expires_at_ms: i64,
    /// Its generation.
    pub generation: i64,
}

/// The row of `run_id` in the store at `url`, `None` when there is none.
///
/// # Errors
///
/// The database could not be reached or queried.
pub async fn run_row(url: &str, run_id: &str) -> Result<Option<RunRow>, String> {
    let (client, connection) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| format!("cannot reach {url}: {e}"))?;
    let driver = tokio::spawn(connection);
    let rows = client
        .query("SELECT lease_holder, expires_at, generation FROM codemode_runs WHERE run_id = $1", &[&run_id])
        .await
        .map_err(|e| format!("reading run {run_id}: {e}"))?;
    drop(client);
    let _ = driver.await;
    Ok(rows.first().map(|r| RunRow { lease_holder: r.get(0), expires_at_ms: r.get(1), generation: r.get(2) }))
}

/// Runs one statement on the store at `url` and returns the rows it changed.
async fn change(url: &str, what: &str, sql: &str, run_id: &str) -> Result<u64, String> {
    let (client, connection) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| format!("cannot reach {url}: {e}"))?;
    let driver = tokio::spawn(connection);
    let changed = client.execute(sql, &[&run_id]).await.map_err(|e| format!("{what} {run_id}: {e}"))?;
    drop(client);
    let _ = driver.await;
    Ok(changed)
}

/// Ends the lease on `run_id` now, as if its holder had stopped renewing it longer than the lease ago (a test's way
/// to reach "the lease expired" without waiting for it); `false` when no replica held the run.
///
/// # Errors
///
/// The database could not be reached or written.
pub async fn expire_lease(url: &str, run_id: &str) -> Result<bool, String> {
    let sql = "UPDATE codemode_runs SET lease_until = 0 WHERE run_id = $1 AND lease_holder IS NOT NULL";
    change(url, "expiring the lease of run", sql, run_id).await.map(|n| n == 1)
}

/// Moves `run_id`'s expiry to the epoch, as if its TTL had run out (the next claim or sweep on any replica deletes
/// it); `false` when there is no such run.
///
/// # Errors
///
/// The database could not be reached or written.
pub async fn expire_run(url: &str, run_id: &str) -> Result<bool, String> {
    let sql = "UPDATE codemode_runs SET expires_at = 0 WHERE run_id = $1";
    change(url, "expiring run", sql, run_id).await.map(|n| n == 1)
}

/// The first column of what `sql` returns on the store at `url`, as text (for tests that check what the store keeps
/// and under which key).
///
/// # Errors
///
/// The database could not be reached, or the query failed or returned something other than text.
pub async fn column(url: &str, sql: &str) -> Result<Vec<String>, String> {
    let (client, connection) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| format!("cannot reach {url}: {e}"))?;
    let driver = tokio::spawn(connection);
    let rows = client.query(sql, &[]).await.map_err(|e| format!("{sql}: {e}"))?;
    drop(client);
    let _ = driver.await;
    rows.iter().map(|r| r.try_get::<_, String>(0).map_err(|e| format!("{sql}: {e}"))).collect()
}
