//! The PostgreSQL run store: a [`FleetBackend`](codemode_snapshot::FleetBackend) that several gateway replicas share,
//! so any of them can resume any run. Checkpoints are rows (generation, lease holder and expiry, TTL, scope,
//! idempotency key); session values, result references and idempotency keys are rows too; `LISTEN/NOTIFY` wakes every
//! replica when a run changes.
//! With state keys ([`PgOptions::keys`]), every checkpoint and stored value is sealed before it is written, as the
//! directory backend seals its files, and nothing is read that does not open under one of the keys.
//!
//! It owns the schema: [`PgStore::connect`] creates and migrates it under an advisory lock, so replicas that start
//! together are safe. It does not run guest code and knows nothing of MCP. Invariants: a park is an `UPDATE ...
//! WHERE generation = expected AND lease_holder = me` (a stale writer changes nothing); a claim is one `UPDATE` that
//! only takes a run whose lease is free or expired, so at most one replica holds a run at a time.

mod schema;
mod url;

use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use codemode_snapshot::{
    Accepted, Checkpoint, Claim, FleetIdempotency, FleetResults, FleetRuns, FleetSessions, Keyring,
    MAX_RESULTS_PER_SESSION, RunChange, StoreError, seal,
};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_postgres::NoTls;

pub use schema::SCHEMA_VERSION;
pub use url::{PASSWORD_MASK, redact_url};

/// The channel replicas `NOTIFY` on when a run is parked again or gone: the payload is `<run id>:<generation>`.
pub const CHANNEL: &str = "codemode_runs";

/// Connections a store keeps open at most (plus one for `LISTEN`).
pub const DEFAULT_POOL_SIZE: usize = 16;

/// How a [`PgStore`] behaves.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// How long a claim lasts without renewal (ms): after a replica dies mid-resume, another may claim its run this
    /// long after its last renewal. The holder renews every third of it.
    pub lease_ms: u64,
    /// How long a parked run is kept (ms); `None` keeps `snapshotTtlSeconds`.
    pub ttl_ms: Option<u64>,
    /// Connections in the pool.
    pub pool_size: usize,
    /// The state keys that seal checkpoints, session values, saved results and recorded results at rest (the
    /// first seals; any opens what it sealed). `None` stores them as they are, and refuses sealed rows.
    pub keys: Option<Arc<Keyring>>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            lease_ms: codemode_snapshot::DEFAULT_LEASE_MS,
            ttl_ms: None,
            pool_size: DEFAULT_POOL_SIZE,
            keys: None,
        }
    }
}

/// The PostgreSQL store.
pub struct PgStore {
    pool: Pool,
    options: PgOptions,
    changes: broadcast::Sender<RunChange>,
    listener: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("options", &self.options).finish_non_exhaustive()
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// A database error as the store reports it, naming what it was doing.
fn db(what: &str) -> impl FnOnce(tokio_postgres::Error) -> StoreError + '_ {
    move |e| {
        // `Error`'s Display is terse ("db error"); the source carries the server's message.
        let detail = e.as_db_error().map_or_else(|| e.to_string(), |d| format!("{}: {}", d.code().code(), d.message()));
        StoreError::Backend(format!("{what}: {detail}"))
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Backend(format!("no database connection: {e}"))
}

/// Milliseconds as the `BIGINT` columns hold them.
fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The one place checkpoints become bytes and back (with the run-id check every backend makes), sealed under the
/// run id when `keys` are set.
fn encode(keys: Option<&Keyring>, checkpoint: &Checkpoint) -> Vec<u8> {
    seal::seal(keys, &checkpoint.run_id, &checkpoint.to_stored()).into_owned()
}

fn decode(keys: Option<&Keyring>, run_id: &str, bytes: &[u8]) -> Result<Checkpoint, StoreError> {
    let bytes = seal::open(keys, run_id, bytes).map_err(|e| sealed(&format!("codemode_runs/{run_id}"), &e))?;
    let corrupt =
        |reason: String| StoreError::Backend(format!("run {run_id}: its stored checkpoint is corrupt: {reason}"));
    let checkpoint = Checkpoint::decode(&bytes).map_err(corrupt)?;
    if checkpoint.run_id != run_id {
        return Err(StoreError::ForeignCheckpoint { run_id: run_id.to_owned(), found: checkpoint.run_id });
    }
    Ok(checkpoint)
}

/// The prefix of a sealed value in a text column: the sealed bytes follow in base64.
const SEALED_TEXT: &str = "sealed:";

/// A row that does not open under the configured keys, named by `row` (`table/key`).
fn sealed(row: &str, error: &seal::SealError) -> StoreError {
    StoreError::Sealed { path: PathBuf::from(row), reason: error.to_string() }
}

/// A value as a text column keeps it: JSON text (not `jsonb`, which would reorder object keys), sealed under `name`
/// when `keys` are set.
fn to_text(keys: Option<&Keyring>, name: &str, value: &Value) -> String {
    let json = serde_json::to_string(value).expect("JSON values always serialize");
    match keys {
        Some(keys) => {
            let sealed = keys.seal(name, json.as_bytes());
            format!("{SEALED_TEXT}{}", base64::engine::general_purpose::STANDARD.encode(sealed))
        }
        None => json,
    }
}

/// The value [`to_text`] stored under `name` (`what` and `row` name it in errors).
fn from_text(keys: Option<&Keyring>, name: &str, what: &str, row: &str, text: &str) -> Result<Value, StoreError> {
    let opened;
    let json = match text.strip_prefix(SEALED_TEXT) {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| StoreError::Backend(format!("{what} is not valid sealed text: {e}")))?;
            opened = seal::open(keys, name, &bytes).map_err(|e| sealed(row, &e))?.into_owned();
            std::str::from_utf8(&opened).map_err(|e| StoreError::Backend(format!("{what} is not text: {e}")))?
        }
        None if keys.is_some() => return Err(sealed(row, &seal::SealError::Plain)),
        None => text,
    };
    serde_json::from_str(json).map_err(|e| StoreError::Backend(format!("{what} is not valid JSON: {e}")))
}

impl PgStore {
    /// Connects to `url` (`postgres://user@host:port/db`, or libpq's `key=value` form), creates or migrates the
    /// schema under an advisory lock and starts listening for run changes.
    ///
    /// Call it inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// `Backend` when the URL is malformed, the database cannot be reached, or its schema is newer than this build.
    pub async fn connect(url: &str, options: PgOptions) -> Result<PgStore, StoreError> {
        let config: tokio_postgres::Config =
            url.parse().map_err(|e| StoreError::Backend(format!("the store URL is not a PostgreSQL URL: {e}")))?;
        let manager =
            Manager::from_config(config.clone(), NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot build the connection pool: {e}")))?;
        {
            let mut client = pool.get().await.map_err(pool_error)?;
            schema::migrate(&mut client).await?;
        }
        let (changes, _) = broadcast::channel(1024);
        let (listening, ready) = tokio::sync::oneshot::channel();
        let listener = tokio::spawn(listen(config, changes.clone(), Some(listening)));
        // Wake-ups sent before the first LISTEN took effect would be lost: connect returns once it has.
        if ready.await.is_err() {
            listener.abort();
            return Err(StoreError::Backend("cannot LISTEN for run changes on a second connection".into()));
        }
        Ok(PgStore { pool, options, changes, listener })
    }

    /// The options in force.
    pub fn options(&self) -> &PgOptions {
        &self.options
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }

    /// Runs one statement and returns the rows it touched.
    async fn execute(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(sql).await.map_err(db(what))?;
        client.execute(&statement, params).await.map_err(db(what))
    }

    async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(sql).await.map_err(db(what))?;
        client.query(&statement, params).await.map_err(db(what))
    }

    fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(work);
        }
    }

    /// Deletes every row of every table (for tests and benchmarks that reuse one database).
    ///
    /// # Errors
    ///
    /// The database could not be reached.
    pub async fn truncate(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .batch_execute("TRUNCATE codemode_runs, codemode_sessions, codemode_results, codemode_idempotency")
            .await
            .map_err(db("truncating the store"))
    }
}

/// Keeps a connection that `LISTEN`s on [`CHANNEL`] and forwards each notification; reconnects if it drops.
async fn listen(
    config: tokio_postgres::Config,
    changes: broadcast::Sender<RunChange>,
    mut listening: Option<tokio::sync::oneshot::Sender<()>>,
) {
    loop {
        let connected = config.connect(NoTls).await;
        if connected.is_err() && listening.is_some() {
            // The first attempt failed: `connect` reports it instead of retrying behind the caller's back.
            return;
        }
        if let Ok((client, mut connection)) = connected {
            let subscribe = async { client.batch_execute(&format!("LISTEN {CHANNEL}")).await.is_ok() };
            // The connection must be polled for the LISTEN to complete, so both run together.
            let driver = async {
                loop {
                    match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                        Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                            if let Some(change) = parse_change(n.payload()) {
                                let _ = changes.send(change);
                            }
                        }
                        Some(Ok(_)) => {}
                        Some(Err(_)) | None => return,
                    }
                }
            };
            tokio::pin!(driver);
            let ok = tokio::select! {
                ok = subscribe => ok,
                () = &mut driver => false,
            };
            if ok {
                if let Some(listening) = listening.take() {
                    let _ = listening.send(());
                }
                driver.await;
            } else if listening.is_some() {
                return;
            }
            drop(client);
        }
        // The database went away: try again soon (runs still resume; only wake-ups wait).
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

fn parse_change(payload: &str) -> Option<RunChange> {
    let (run_id, generation) = payload.rsplit_once(':')?;
    Some(RunChange { run_id: run_id.to_owned(), generation: generation.parse().ok()? })
}

#[async_trait]
impl FleetRuns for PgStore {
    fn lease_ms(&self) -> Option<u64> {
        Some(self.options.lease_ms)
    }

    fn ttl_ms(&self) -> Option<u64> {
        self.options.ttl_ms
    }

    async fn put(&self, checkpoint: &Checkpoint, expected: u32, holder: &str, scope: &str) -> Result<(), StoreError> {
        let run_id = checkpoint.run_id.as_str();
        let bytes = encode(self.options.keys.as_deref(), checkpoint);
        let generation = i64::from(checkpoint.generation);
        let expires_at = ms(checkpoint.expires_at_ms);
        let key = checkpoint.idempotency_key.as_deref();
        let written = if expected == 0 {
            self.execute(
                "parking a run",
                "INSERT INTO codemode_runs (run_id, scope, generation, checkpoint, expires_at, idempotency_key) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (run_id) DO NOTHING",
                &[&run_id, &scope, &generation, &bytes, &expires_at, &key],
            )
            .await?
        } else {
            self.execute(
                "parking a run",
                "UPDATE codemode_runs SET generation = $3, checkpoint = $4, expires_at = $5, scope = $6, \
                 lease_holder = NULL, lease_until = NULL WHERE run_id = $1 AND generation = $2 AND lease_holder = $7",
                &[&run_id, &i64::from(expected), &generation, &bytes, &expires_at, &scope, &holder],
            )
            .await?
        };
        if written == 1 {
            return Ok(());
        }
        let rows = self
            .query("reading a run's generation", "SELECT generation FROM codemode_runs WHERE run_id = $1", &[&run_id])
            .await?;
        let stored = rows.first().map_or(0, |r| u32::try_from(r.get::<_, i64>(0)).unwrap_or(0));
        Err(StoreError::Stale { run_id: run_id.to_owned(), expected, stored })
    }

    async fn save(&self, checkpoint: &Checkpoint, holder: &str) -> Result<(), StoreError> {
        let run_id = checkpoint.run_id.as_str();
        let bytes = encode(self.options.keys.as_deref(), checkpoint);
        let generation = i64::from(checkpoint.generation);
        let expires_at = ms(checkpoint.expires_at_ms);
        let written = self
            .execute(
                "recording a run",
                "UPDATE codemode_runs SET checkpoint = $3, expires_at = $4 WHERE run_id = $1 AND generation = $2 \
                 AND lease_holder = $5",
                &[&run_id, &generation, &bytes, &expires_at, &holder],
            )
            .await?;
        if written == 1 {
            return Ok(());
        }
        Err(StoreError::Stale { run_id: run_id.to_owned(), expected: checkpoint.generation, stored: 0 })
    }

    async fn get(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        let rows =
            self.query("reading a run", "SELECT checkpoint FROM codemode_runs WHERE run_id = $1", &[&run_id]).await?;
        rows.first().map(|r| decode(self.options.keys.as_deref(), run_id, r.get::<_, &[u8]>(0))).transpose()
    }

    async fn claim(&self, run_id: &str, holder: &str, now_ms: u64) -> Result<Claim, StoreError> {
        let now = ms(now_ms);
        let until = ms(now_ms.saturating_add(self.options.lease_ms));
        let rows = self
            .query(
                "claiming a run",
                "UPDATE codemode_runs SET lease_holder = $2, lease_until = $4 WHERE run_id = $1 AND expires_at > $3 \
                 AND (lease_holder IS NULL OR lease_until <= $3) RETURNING checkpoint",
                &[&run_id, &holder, &now, &until],
            )
            .await?;
        if let Some(row) = rows.first() {
            return match decode(self.options.keys.as_deref(), run_id, row.get::<_, &[u8]>(0)) {
                Ok(checkpoint) => Ok(Claim::Claimed(Box::new(checkpoint))),
                // Not openable here (no key, another key, a tampered or corrupt row): the lease goes back at once,
                // so a replica that can open the run is not kept waiting for it to expire. A failed release leaves
                // the lease to expire.
                Err(e) => {
                    let _ = self.release(run_id, holder).await;
                    Err(StoreError::unreadable(run_id, &e))
                }
            };
        }
        let rows = self
            .query(
                "reading a run's lease",
                "SELECT lease_holder, lease_until, expires_at FROM codemode_runs WHERE run_id = $1",
                &[&run_id],
            )
            .await?;
        let Some(row) = rows.first() else { return Ok(Claim::Missing) };
        let (lease_holder, lease_until, expires_at): (Option<String>, Option<i64>, i64) =
            (row.get(0), row.get(1), row.get(2));
        if expires_at <= now {
            self.execute(
                "deleting an expired run",
                "DELETE FROM codemode_runs WHERE run_id = $1 AND expires_at <= $2",
                &[&run_id, &now],
            )
            .await?;
            return Ok(Claim::Missing);
        }
        Ok(Claim::Held {
            holder: lease_holder.unwrap_or_default(),
            until_ms: lease_until.and_then(|u| u64::try_from(u).ok()).unwrap_or(0),
        })
    }

    async fn renew(&self, run_id: &str, holder: &str, now_ms: u64) -> Result<bool, StoreError> {
        let until = ms(now_ms.saturating_add(self.options.lease_ms));
        let renewed = self
            .execute(
                "renewing a lease",
                "UPDATE codemode_runs SET lease_until = $3 WHERE run_id = $1 AND lease_holder = $2",
                &[&run_id, &holder, &until],
            )
            .await?;
        Ok(renewed == 1)
    }

    async fn release(&self, run_id: &str, holder: &str) -> Result<(), StoreError> {
        self.execute(
            "releasing a run",
            "UPDATE codemode_runs SET lease_holder = NULL, lease_until = NULL WHERE run_id = $1 AND lease_holder = $2",
            &[&run_id, &holder],
        )
        .await
        .map(drop)
    }

    async fn finish(&self, run_id: &str, holder: &str) -> Result<bool, StoreError> {
        let deleted = self
            .execute(
                "finishing a run",
                "DELETE FROM codemode_runs WHERE run_id = $1 AND lease_holder = $2",
                &[&run_id, &holder],
            )
            .await?;
        Ok(deleted == 1)
    }

    fn finish_detached(&self, run_id: String, holder: String) {
        let pool = self.pool.clone();
        self.spawn(async move {
            // A failed delete leaves the run to its TTL; its lease ends with this holder's renewals.
            if let Ok(client) = pool.get().await {
                let _ = client
                    .execute("DELETE FROM codemode_runs WHERE run_id = $1 AND lease_holder = $2", &[&run_id, &holder])
                    .await;
            }
        });
    }

    fn delete_detached(&self, run_id: String) {
        let pool = self.pool.clone();
        self.spawn(async move {
            if let Ok(client) = pool.get().await {
                let _ = client.execute("DELETE FROM codemode_runs WHERE run_id = $1", &[&run_id]).await;
            }
        });
    }

    async fn delete(&self, run_id: &str) -> Result<bool, StoreError> {
        let deleted = self.execute("deleting a run", "DELETE FROM codemode_runs WHERE run_id = $1", &[&run_id]).await?;
        Ok(deleted == 1)
    }

    async fn list(&self, scope: Option<&str>) -> Result<Vec<String>, StoreError> {
        let rows = match scope {
            Some(scope) => {
                self.query(
                    "listing runs",
                    "SELECT run_id FROM codemode_runs WHERE scope = $1 ORDER BY run_id",
                    &[&scope],
                )
                .await?
            }
            None => self.query("listing runs", "SELECT run_id FROM codemode_runs ORDER BY run_id", &[]).await?,
        };
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn sweep(&self, now_ms: u64) -> Result<Vec<String>, StoreError> {
        let now = ms(now_ms);
        // A run being resumed is not swept: its holder parks it again (with a new TTL) or finishes it.
        let rows = self
            .query(
                "sweeping expired runs",
                "DELETE FROM codemode_runs WHERE expires_at <= $1 AND (lease_holder IS NULL OR lease_until <= $1) \
                 RETURNING run_id",
                &[&now],
            )
            .await?;
        self.execute(
            "sweeping expired idempotency keys",
            "DELETE FROM codemode_idempotency WHERE expires_at <= $1",
            &[&now],
        )
        .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn subscribe(&self) -> broadcast::Receiver<RunChange> {
        self.changes.subscribe()
    }
}

#[async_trait]
impl FleetSessions for PgStore {
    async fn session_get(&self, session: &str, key: &str) -> Result<Option<Value>, StoreError> {
        let rows = self
            .query(
                "loading a session value",
                "SELECT value FROM codemode_sessions WHERE session = $1 AND key = $2",
                &[&session, &key],
            )
            .await?;
        let (name, row) = (format!("{session}/{key}"), format!("codemode_sessions/{session}/{key}"));
        let keys = self.options.keys.as_deref();
        rows.first().map(|r| from_text(keys, &name, "a stored session value", &row, r.get::<_, &str>(0))).transpose()
    }

    async fn session_put(&self, session: &str, key: &str, value: &Value, max_keys: usize) -> Result<(), StoreError> {
        let text = to_text(self.options.keys.as_deref(), &format!("{session}/{key}"), value);
        let max = i64::try_from(max_keys).unwrap_or(i64::MAX);
        let written = self
            .execute(
                "storing a session value",
                "INSERT INTO codemode_sessions (session, key, value) SELECT $1, $2, $3 \
                 WHERE EXISTS (SELECT 1 FROM codemode_sessions WHERE session = $1 AND key = $2) \
                 OR (SELECT count(*) FROM codemode_sessions WHERE session = $1) < $4 \
                 ON CONFLICT (session, key) DO UPDATE SET value = EXCLUDED.value",
                &[&session, &key, &text, &max],
            )
            .await?;
        if written == 0 {
            return Err(StoreError::TooManyKeys { max: max_keys });
        }
        Ok(())
    }

    async fn session_remove(&self, session: &str, key: &str) -> Result<bool, StoreError> {
        let removed = self
            .execute(
                "removing a session value",
                "DELETE FROM codemode_sessions WHERE session = $1 AND key = $2",
                &[&session, &key],
            )
            .await?;
        Ok(removed == 1)
    }

    async fn session_keys(&self, session: &str) -> Result<Vec<String>, StoreError> {
        let rows = self
            .query(
                "listing session keys",
                "SELECT key FROM codemode_sessions WHERE session = $1 ORDER BY seq",
                &[&session],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn session_clear(&self, session: &str) -> Result<(), StoreError> {
        self.execute("clearing a session", "DELETE FROM codemode_sessions WHERE session = $1", &[&session])
            .await
            .map(drop)
    }
}

#[async_trait]
impl FleetResults for PgStore {
    async fn result_put(&self, session: &str, id: &str, value: &Value, max_bytes: usize) -> Result<(), StoreError> {
        let text = to_text(self.options.keys.as_deref(), &format!("{session}/{id}"), value);
        let bytes = i64::try_from(text.len()).unwrap_or(i64::MAX);
        self.execute(
            "saving a result",
            "INSERT INTO codemode_results (session, id, value, bytes) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (session, id) DO UPDATE SET value = EXCLUDED.value, bytes = EXCLUDED.bytes",
            &[&session, &id, &text, &bytes],
        )
        .await?;
        let max_bytes = i64::try_from(max_bytes).unwrap_or(i64::MAX);
        let max_entries = i64::try_from(MAX_RESULTS_PER_SESSION).unwrap_or(i64::MAX);
        // The oldest values go first, past the count or the bytes the session may keep.
        self.execute(
            "evicting old results",
            "DELETE FROM codemode_results WHERE session = $1 AND seq IN (SELECT seq FROM (SELECT seq, \
             sum(bytes) OVER (ORDER BY seq DESC) AS total, row_number() OVER (ORDER BY seq DESC) AS n \
             FROM codemode_results WHERE session = $1) t WHERE t.total > $2::bigint OR t.n > $3::bigint)",
            &[&session, &max_bytes, &max_entries],
        )
        .await
        .map(drop)
    }

    async fn result_get(&self, session: &str, id: &str) -> Result<Option<Value>, StoreError> {
        let rows = self
            .query(
                "loading a result",
                "SELECT value FROM codemode_results WHERE session = $1 AND id = $2",
                &[&session, &id],
            )
            .await?;
        let (name, row) = (format!("{session}/{id}"), format!("codemode_results/{session}/{id}"));
        let keys = self.options.keys.as_deref();
        rows.first().map(|r| from_text(keys, &name, "a saved result", &row, r.get::<_, &str>(0))).transpose()
    }
}

#[async_trait]
impl FleetIdempotency for PgStore {
    async fn idempotency_accept(
        &self,
        scope: &str,
        key: &str,
        run_id: &str,
        expires_at_ms: u64,
    ) -> Result<Accepted, StoreError> {
        let expires_at = ms(expires_at_ms);
        let inserted = self
            .execute(
                "accepting an idempotency key",
                "INSERT INTO codemode_idempotency (scope, key, run_id, expires_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (scope, key) DO NOTHING",
                &[&scope, &key, &run_id, &expires_at],
            )
            .await?;
        if inserted == 1 {
            return Ok(Accepted::New);
        }
        let rows = self
            .query(
                "reading an idempotency key",
                "SELECT run_id, result FROM codemode_idempotency WHERE scope = $1 AND key = $2",
                &[&scope, &key],
            )
            .await?;
        let Some(row) = rows.first() else {
            // Swept between the insert and the read: the key is free again.
            return Box::pin(self.idempotency_accept(scope, key, run_id, expires_at_ms)).await;
        };
        let result: Option<&str> = row.get(1);
        Ok(Accepted::Existing {
            run_id: row.get(0),
            result: result
                .map(|r| {
                    let (name, row) = (format!("{scope}/{key}"), format!("codemode_idempotency/{scope}/{key}"));
                    from_text(self.options.keys.as_deref(), &name, "a recorded result", &row, r)
                })
                .transpose()?,
        })
    }

    async fn idempotency_finish(&self, scope: &str, key: &str, result: &Value) -> Result<(), StoreError> {
        let text = to_text(self.options.keys.as_deref(), &format!("{scope}/{key}"), result);
        self.execute(
            "recording a result",
            "UPDATE codemode_idempotency SET result = $3 WHERE scope = $1 AND key = $2",
            &[&scope, &key, &text],
        )
        .await
        .map(drop)
    }
}
