//! The schema, as numbered migrations embedded in the binary, and `migrate`, which applies
//! the missing ones. A migration never changes once released; a new one is appended.
//!
//! Each migration runs in its own transaction that first takes a transaction-level
//! advisory lock ([`MIGRATION_LOCK`]), so several processes starting at once agree: the
//! first applies, the others wait, then find it recorded in `schema_migrations` and skip
//! it. Left out: down-migrations and a CLI (`fronta migrate` calls [`migrate`]).

use sqlx::PgPool;

/// The advisory lock (single `bigint` key space) that orders migrating processes:
/// "fronta" in ASCII, then 1.
pub const MIGRATION_LOCK: i64 = 0x6672_6F6E_7461_0001;

/// The advisory lock class (two-`int4` key space) of the per-tenant locks that keep
/// `run_tenants` truthful; the second key is `hashtext(tenant)`. See [`RUNS_V1`].
pub const TENANT_LOCK_CLASS: i32 = 0x6672_6F6E;

/// `(version, name, sql)`, in order.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[(1, "runs", RUNS_V1)];

/// The runs table, its indexes, the tenants with possible pending work, and the one
/// function that records pending work.
///
/// `status`: 0 pending, 1 running, 2 completed, 3 failed, 4 cancelled (as on SQLite).
/// Instants are `timestamptz` kept to the millisecond. `max_retries` is a `bigint` so any
/// `u32` fits; the counters are `integer`.
///
/// `run_tenants` lists every tenant that may have pending runs, so a claim walks tenants
/// instead of the queue. The invariant "a tenant with a pending run has a row" must hold
/// while writers run concurrently:
/// - whoever makes runs pending (enqueue, a finish that puts runs back) calls
///   `fronta_note_pending(tenants)` in the same transaction: it takes a *shared*
///   transaction-level advisory lock per tenant, then inserts the missing rows, then
///   notifies `fronta_runs`;
/// - a claim forgets a tenant only after taking the *exclusive* lock with
///   `pg_try_advisory_xact_lock` (never waiting) and then, in a later statement (a
///   fresh snapshot), finding no pending run of it.
///
/// So a forget never overlaps an uncommitted enqueue of the same tenant, and an enqueue
/// that waited for a forget re-inserts the row after it.
pub const RUNS_V1: &str = r#"
CREATE TABLE runs (
    id               uuid        PRIMARY KEY,
    tenant           text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    state            bytea,
    trigger          text        NOT NULL,
    unique_key       text,
    priority         smallint    NOT NULL DEFAULT 0,
    status           smallint    NOT NULL CHECK (status BETWEEN 0 AND 4),
    run_at           timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    max_retries      bigint      NOT NULL,
    reclaims         integer     NOT NULL DEFAULT 0,
    parks            integer     NOT NULL DEFAULT 0,
    locked_by        uuid,
    locked_until     timestamptz,
    heartbeat_at     timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    started_at       timestamptz,
    completed_at     timestamptz,
    failed_at        timestamptz,
    cancelled_at     timestamptz,
    last_error       text,
    result           jsonb
);
-- Due runs per tenant, in claim order: the fair claim probes it once per tenant.
CREATE INDEX runs_pending ON runs (tenant, priority DESC, run_at) WHERE status = 0;
-- Running runs by lease end: expired leases are found without a scan.
CREATE INDEX runs_running ON runs (locked_until) WHERE status = 1;
-- One non-terminal run per unique key within a tenant (the enqueue's ON CONFLICT arbiter).
CREATE UNIQUE INDEX runs_unique_key ON runs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND status IN (0, 1);
-- Tenants that may have pending runs: the claim walks this short list, not the queue.
CREATE TABLE run_tenants (tenant text PRIMARY KEY);

-- Record that `tenants` have pending runs (see the lock protocol in schema.rs) and wake
-- listeners. Returns how many distinct tenants it noted; 0 does nothing at all.
CREATE FUNCTION fronta_note_pending(tenants text[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    noted text[];
BEGIN
    SELECT coalesce(array_agg(DISTINCT t ORDER BY t), '{}') INTO noted FROM unnest(tenants) AS t;
    IF cardinality(noted) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1718775662, hashtext(t)) FROM unnest(noted) AS t;
    INSERT INTO run_tenants (tenant) SELECT t FROM unnest(noted) AS t ON CONFLICT DO NOTHING;
    PERFORM pg_notify('fronta_runs', '');
    RETURN cardinality(noted);
END
$$;
"#;

/// Apply the migrations this database lacks. Returns the versions applied now.
pub async fn migrate(pool: &PgPool) -> Result<Vec<i64>, sqlx::Error> {
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version    bigint      PRIMARY KEY,
                name       text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .execute(&mut *tx)
        .await?;
        let present: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)",
        )
        .bind(version)
        .fetch_one(&mut *tx)
        .await?;
        if !present {
            sqlx::raw_sql(*sql).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)")
                .bind(version)
                .bind(*name)
                .execute(&mut *tx)
                .await?;
            applied.push(*version);
        }
        tx.commit().await?;
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenant_lock_class_in_the_sql_matches_the_constant() {
        assert!(
            RUNS_V1.contains(&format!(
                "pg_advisory_xact_lock_shared({TENANT_LOCK_CLASS},"
            )),
            "fronta_note_pending must lock the class the claim's forget uses"
        );
    }

    #[test]
    fn migrations_are_numbered_in_order_from_one() {
        for (index, (version, _, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(
                *version,
                index as i64 + 1,
                "migration {index} is numbered in order"
            );
        }
    }
}
