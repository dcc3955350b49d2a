//! The process registry on Postgres (`processes`, migration 22): register, beat, list,
//! deregister, and the takeover of a dead process's running runs (their leases end now,
//! so the next claim, in any process, reclaims them with a fresh owner token). Every
//! instant is the database's clock (or the injected one of tests), shared by all
//! processes. The rules that judge a process dead are `fronta_engine::liveness`'s.

use fronta_engine::liveness::{ProcessFacts, ProcessId, ProcessList, ProcessRecord};
use fronta_engine::store::StoreResult as SqlResult;
use sqlx::{PgConnection, Row};

use crate::map_err;
use crate::runs::Ctx;

const NOW: &str = "date_trunc('milliseconds', coalesce($1::timestamptz, now()))";

pub(crate) async fn register(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    id: ProcessId,
    facts: &ProcessFacts,
) -> SqlResult<()> {
    ctx.trip();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO processes (id, host, pid, started, beat_at, registered_at) \
         VALUES ($2, $3, $4, $5, {NOW}, {NOW}) \
         ON CONFLICT (id) DO UPDATE SET host = $3, pid = $4, started = $5, beat_at = {NOW}"
    )))
    .bind(ctx.now)
    .bind(id.0)
    .bind(facts.host.as_str())
    .bind(i64::from(facts.pid))
    .bind(facts.started.as_str())
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(())
}

pub(crate) async fn beat(conn: &mut PgConnection, ctx: Ctx<'_>, id: ProcessId) -> SqlResult<bool> {
    ctx.trip();
    let done = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE processes SET beat_at = {NOW} WHERE id = $2"
    )))
    .bind(ctx.now)
    .bind(id.0)
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn deregister(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    id: ProcessId,
) -> SqlResult<()> {
    ctx.trip();
    sqlx::query("DELETE FROM processes WHERE id = $1")
        .bind(id.0)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

pub(crate) async fn list(conn: &mut PgConnection, ctx: Ctx<'_>) -> SqlResult<ProcessList> {
    ctx.trip();
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT id, host, pid, started, beat_at, {NOW} FROM processes \
         UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, {NOW} \
         ORDER BY 1 NULLS LAST"
    )))
    .bind(ctx.now)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_err)?;
    let mut list = ProcessList {
        now: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
        processes: Vec::with_capacity(rows.len()),
    };
    for row in rows {
        list.now = row.try_get(5).map_err(map_err)?;
        let Some(id) = row.try_get::<Option<uuid::Uuid>, _>(0).map_err(map_err)? else {
            continue;
        };
        let pid: i64 = row.try_get(2).map_err(map_err)?;
        list.processes.push(ProcessRecord {
            id: ProcessId(id),
            facts: ProcessFacts {
                host: row.try_get(1).map_err(map_err)?,
                pid: u32::try_from(pid).unwrap_or(0),
                started: row.try_get(3).map_err(map_err)?,
            },
            beat_at: row.try_get(4).map_err(map_err)?,
        });
    }
    Ok(list)
}

/// End the leases of `dead`'s running runs (just before now) and delete its row, in one
/// statement (one transaction); answers how many runs were released.
pub(crate) async fn takeover(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    dead: ProcessId,
) -> SqlResult<u64> {
    ctx.trip();
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH gone AS (DELETE FROM processes WHERE id = $2), \
         released AS (UPDATE runs SET locked_until = {NOW} - interval '1 millisecond' \
             WHERE locked_proc = $2 AND status = 1 AND locked_until >= {NOW} RETURNING 1) \
         SELECT count(*) FROM released"
    )))
    .bind(ctx.now)
    .bind(dead.0)
    .fetch_one(&mut *conn)
    .await
    .map_err(map_err)?;
    let released: i64 = row.try_get(0).map_err(map_err)?;
    Ok(u64::try_from(released).unwrap_or(0))
}
