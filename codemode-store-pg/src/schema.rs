//! The store's schema and its migrations, applied by the program itself at connect time.
//!
//! Invariant: migrations run in one transaction that first takes a transaction-level advisory lock, so replicas
//! starting together apply each migration exactly once (the others wait, then find it applied); a database whose
//! schema is newer than this build is refused rather than misread.

use codemode_snapshot::StoreError;

use crate::db;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = 1;

/// The advisory-lock key of migrations: `codemode` in ASCII.
const MIGRATION_LOCK: i64 = 0x636f_6465_6d6f_6465;

/// Each migration, in order; migration `i` brings the schema to version `i + 1`.
const MIGRATIONS: [&str; 1] = [r"
CREATE TABLE codemode_runs (
    run_id          TEXT PRIMARY KEY,
    scope           TEXT NOT NULL,
    generation      BIGINT NOT NULL,
    checkpoint      BYTEA NOT NULL,
    lease_holder    TEXT,
    lease_until     BIGINT,
    expires_at      BIGINT NOT NULL,
    idempotency_key TEXT
);
CREATE INDEX codemode_runs_scope ON codemode_runs (scope);
CREATE INDEX codemode_runs_expires_at ON codemode_runs (expires_at);

CREATE TABLE codemode_sessions (
    session TEXT NOT NULL,
    key     TEXT NOT NULL,
    value   TEXT NOT NULL,
    seq     BIGSERIAL,
    PRIMARY KEY (session, key)
);

CREATE TABLE codemode_results (
    session TEXT NOT NULL,
    id      TEXT NOT NULL,
    value   TEXT NOT NULL,
    bytes   BIGINT NOT NULL,
    seq     BIGSERIAL,
    PRIMARY KEY (session, id)
);

CREATE TABLE codemode_idempotency (
    scope      TEXT NOT NULL,
    key        TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    result     TEXT,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX codemode_idempotency_expires_at ON codemode_idempotency (expires_at);

-- Every replica LISTENs on codemode_runs: a run parked again carries its new generation, a run gone carries 0.
-- A claim or a lease renewal changes no generation and notifies no one.
CREATE FUNCTION codemode_runs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('codemode_runs', OLD.run_id || ':0');
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' OR OLD.generation IS DISTINCT FROM NEW.generation THEN
        PERFORM pg_notify('codemode_runs', NEW.run_id || ':' || NEW.generation);
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER codemode_runs_changed AFTER INSERT OR UPDATE OR DELETE ON codemode_runs
    FOR EACH ROW EXECUTE FUNCTION codemode_runs_notify();
"];

/// Creates or migrates the schema to [`SCHEMA_VERSION`].
pub(crate) async fn migrate(client: &mut tokio_postgres::Client) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db("starting the schema migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(db("locking the schema"))?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS codemode_schema (version INT NOT NULL)")
        .await
        .map_err(db("creating the schema table"))?;
    let row = tx
        .query_one("SELECT coalesce(max(version), 0) FROM codemode_schema", &[])
        .await
        .map_err(db("reading the schema version"))?;
    let current: i32 = row.get(0);
    if current > SCHEMA_VERSION {
        return Err(StoreError::Backend(format!(
            "the database's codemode schema is version {current}, newer than this build's {SCHEMA_VERSION}; upgrade \
             codemode on this replica"
        )));
    }
    for (version, sql) in (1..).zip(MIGRATIONS.iter()).skip(usize::try_from(current).unwrap_or(0)) {
        tx.batch_execute(sql).await.map_err(db("migrating the schema"))?;
        tx.execute("INSERT INTO codemode_schema (version) VALUES ($1)", &[&version])
            .await
            .map_err(db("recording the schema version"))?;
    }
    tx.commit().await.map_err(db("committing the schema migration"))
}
