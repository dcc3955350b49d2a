//! The schema, as numbered migrations embedded in the binary. A migration never changes
//! once released; a new one is appended. `migrate` applies what is missing, each in its
//! own `BEGIN IMMEDIATE`, so several processes starting at once agree.

use rusqlite::Connection;

/// `(version, name, sql)`, in order.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[(1, "runs", RUNS_V1)];

/// The runs table. `status`: 0 pending, 1 running, 2 completed, 3 failed, 4 cancelled.
/// Instants are milliseconds since the Unix epoch (UTC).
const RUNS_V1: &str = r#"
CREATE TABLE runs (
    seq              INTEGER PRIMARY KEY,
    id               BLOB    NOT NULL UNIQUE,
    tenant           TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    state            BLOB,
    trigger          TEXT    NOT NULL,
    unique_key       TEXT,
    priority         INTEGER NOT NULL DEFAULT 0,
    status           INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_retries      INTEGER NOT NULL,
    reclaims         INTEGER NOT NULL DEFAULT 0,
    parks            INTEGER NOT NULL DEFAULT 0,
    locked_by        BLOB,
    locked_until     INTEGER,
    heartbeat_at     INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    started_at       INTEGER,
    completed_at     INTEGER,
    failed_at        INTEGER,
    cancelled_at     INTEGER,
    last_error       TEXT,
    result           TEXT
);
-- Due runs per tenant, in claim order: the fair claim probes it once per tenant.
CREATE INDEX runs_pending ON runs (tenant, priority DESC, run_at) WHERE status = 0;
-- Running runs by lease end: expired leases are found without a scan.
CREATE INDEX runs_running ON runs (locked_until) WHERE status = 1;
-- One non-terminal run per unique key within a tenant.
CREATE UNIQUE INDEX runs_unique_key ON runs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND status IN (0, 1);
-- Tenants that may have pending runs: the claim walks this short list, not the queue.
CREATE TABLE run_tenants (tenant TEXT PRIMARY KEY) WITHOUT ROWID;
"#;

/// Apply the migrations this database lacks. Returns the versions applied now.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<Vec<i64>> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )?;
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let present: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?1)",
            [version],
            |row| row.get(0),
        )?;
        if !present {
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
                rusqlite::params![version, name, chrono::Utc::now().timestamp_millis()],
            )?;
            applied.push(*version);
        }
        tx.commit()?;
    }
    Ok(applied)
}
