//! The runs port in SQL: each function runs on the writer thread (writes) or a read
//! connection (reads) and takes `now` in milliseconds from the store's clock.

use std::time::Duration;

use fronta_engine::StoreError;
use fronta_engine::liveness::ProcessId;
use fronta_engine::model::{NewRun, OwnerToken, Run, RunId, RunStatus, Trigger};
use fronta_engine::store::{
    CancelReply, ClaimBatch, ClaimParams, ClaimedRun, Enqueued, Finish, FinishAction, FinishReply,
    HandOff, HeartbeatReply, LeaseRenewal, Prune, RetryReply, RunFilter, RunStats,
};
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use crate::map_err;
use crate::writer::WriterState;

/// The stored `status` of a pending run (scheduled or queued, told apart by `run_at`).
pub const PENDING: i64 = 0;
/// The stored `status` of a running run (it holds an owner token).
pub const RUNNING: i64 = 1;
/// The stored `status` of a completed run.
pub const COMPLETED: i64 = 2;
/// The stored `status` of a failed run.
pub const FAILED: i64 = 3;
/// The stored `status` of a cancelled run.
pub const CANCELLED: i64 = 4;
/// The stored `status` of a suppressed run.
pub const SUPPRESSED: i64 = 5;

const COLUMNS: &str = "id, tenant, kind, payload, state, trigger, unique_key, priority, status, \
    run_at, attempts, max_retries, reclaims, parks, locked_by, locked_until, heartbeat_at, \
    cancel_requested, created_at, updated_at, started_at, completed_at, failed_at, \
    cancelled_at, last_error, result";

type SqlResult<T> = Result<T, StoreError>;

/// `duration` in whole milliseconds, as the columns store times (saturating far below
/// `i64::MAX`, so adding it to now cannot overflow).
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}

fn at(now: i64, delay: Duration) -> i64 {
    now.saturating_add(millis(delay))
}

fn instant(ms: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn opt_instant(ms: Option<i64>) -> Option<chrono::DateTime<chrono::Utc>> {
    ms.map(instant)
}

fn uuid_of(bytes: Vec<u8>) -> rusqlite::Result<Uuid> {
    Uuid::from_slice(&bytes).map_err(|err| {
        rusqlite::Error::FromSqlConversionFailure(16, rusqlite::types::Type::Blob, Box::new(err))
    })
}

fn status_of(code: i64, run_at: i64, now: i64) -> RunStatus {
    match code {
        PENDING if run_at > now => RunStatus::Scheduled,
        PENDING => RunStatus::Queued,
        RUNNING => RunStatus::Running,
        COMPLETED => RunStatus::Completed,
        FAILED => RunStatus::Failed,
        SUPPRESSED => RunStatus::Suppressed,
        _ => RunStatus::Cancelled,
    }
}

fn count(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// A row of `COLUMNS` as a run, judged at `now`.
fn run_of(row: &Row<'_>, now: i64) -> rusqlite::Result<Run> {
    let payload: String = row.get(3)?;
    let trigger: String = row.get(5)?;
    let run_at: i64 = row.get(9)?;
    let result: Option<String> = row.get(25)?;
    Ok(Run {
        id: RunId(uuid_of(row.get(0)?)?),
        tenant: row.get(1)?,
        kind: row.get(2)?,
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        state: row.get(4)?,
        trigger: trigger.parse::<Trigger>().unwrap_or(Trigger::Api),
        unique_key: row.get(6)?,
        priority: row.get(7)?,
        status: status_of(row.get(8)?, run_at, now),
        run_at: instant(run_at),
        attempts: count(row.get(10)?),
        max_retries: count(row.get(11)?),
        reclaims: count(row.get(12)?),
        parks: count(row.get(13)?),
        locked_by: row
            .get::<_, Option<Vec<u8>>>(14)?
            .map(uuid_of)
            .transpose()?
            .map(OwnerToken),
        locked_until: opt_instant(row.get(15)?),
        heartbeat_at: opt_instant(row.get(16)?),
        cancel_requested: row.get::<_, i64>(17)? != 0,
        created_at: instant(row.get(18)?),
        updated_at: instant(row.get(19)?),
        started_at: opt_instant(row.get(20)?),
        completed_at: opt_instant(row.get(21)?),
        failed_at: opt_instant(row.get(22)?),
        cancelled_at: opt_instant(row.get(23)?),
        last_error: row.get(24)?,
        result: result.and_then(|text| serde_json::from_str(&text).ok()),
    })
}

fn note_tenant(conn: &Connection, tenant: &str) -> SqlResult<()> {
    conn.prepare_cached("INSERT OR IGNORE INTO run_tenants (tenant) VALUES (?1)")
        .and_then(|mut stmt| stmt.execute([tenant]))
        .map_err(map_err)?;
    Ok(())
}

/// Insert one run (inside the caller's transaction).
pub fn insert(
    state: &mut WriterState,
    conn: &Connection,
    run: &NewRun,
    now: i64,
) -> SqlResult<Enqueued> {
    let run_at = match (run.run_at, run.delay) {
        (Some(run_at), _) => run_at.timestamp_millis(),
        (None, Some(delay)) => at(now, delay),
        (None, None) => now,
    };
    let payload = serde_json::to_string(&run.payload)
        .map_err(|err| StoreError::Invalid(format!("payload is not serializable: {err}")))?;
    let inserted = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO runs (id, tenant, kind, payload, trigger, unique_key, priority, \
             status, run_at, max_retries, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10, ?10)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                run.id.0.as_bytes().as_slice(),
                run.tenant,
                run.kind,
                payload,
                run.trigger.as_str(),
                run.unique_key,
                run.priority,
                run_at,
                run.max_retries,
                now,
            ])
        })
        .map_err(map_err)?;
    if inserted == 1 {
        note_tenant(conn, &run.tenant)?;
        state.enqueued = true;
        return Ok(Enqueued::Inserted(run.id));
    }
    let Some(key) = &run.unique_key else {
        return Err(StoreError::Conflict(format!(
            "run id {} already exists",
            run.id
        )));
    };
    let existing: Vec<u8> = conn
        .prepare_cached(
            "SELECT id FROM runs WHERE tenant = ?1 AND unique_key = ?2 AND status IN (0, 1) \
             AND unique_key IS NOT NULL",
        )
        .and_then(|mut stmt| stmt.query_row([&run.tenant, key], |row| row.get(0)))
        .map_err(map_err)?;
    Ok(Enqueued::Existing(RunId(
        uuid_of(existing).map_err(map_err)?,
    )))
}

/// A hand-off (`run_enqueue_started`, inside the writer's transaction): insert `run`
/// already running — a fresh owner token, `lease`, `heartbeat_at = started_at = run_at =
/// now` — when that overtakes nothing: it is due at once, no pending run of its tenant at
/// its priority or above is due, and its unique key is free (`INSERT OR IGNORE` skips the
/// row). Otherwise [`insert`] enqueues it as usual. A started run raises no `enqueued`
/// flag: nobody needs waking. The probe at its own priority stops at the first entry of
/// `runs_pending` not yet due; higher priorities are read whole (normally few).
pub fn hand_off(
    state: &mut WriterState,
    conn: &Connection,
    run: &NewRun,
    lease: Duration,
    holder: Option<ProcessId>,
    now: i64,
) -> SqlResult<HandOff> {
    let due_now = run.due_at_once();
    let overtakes: bool = due_now
        && conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE tenant = ?1 AND status = 0 \
                                AND priority = ?2 AND run_at <= ?3) \
                     OR EXISTS (SELECT 1 FROM runs WHERE tenant = ?1 AND status = 0 \
                                AND priority > ?2 AND run_at <= ?3)",
            )
            .and_then(|mut stmt| {
                stmt.query_row(params![run.tenant, run.priority, now], |row| row.get(0))
            })
            .map_err(map_err)?;
    if !due_now || overtakes {
        return insert(state, conn, run, now).map(HandOff::Queued);
    }
    let payload = serde_json::to_string(&run.payload)
        .map_err(|err| StoreError::Invalid(format!("payload is not serializable: {err}")))?;
    let owner = OwnerToken::fresh();
    let started = conn
        .prepare_cached(&format!(
            "INSERT OR IGNORE INTO runs (id, tenant, kind, payload, trigger, unique_key, \
             priority, status, run_at, max_retries, locked_by, locked_until, heartbeat_at, \
             started_at, created_at, updated_at, locked_proc) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8, ?9, ?10, ?11, ?8, ?8, ?8, ?8, ?12) \
             RETURNING {COLUMNS}"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    run.id.0.as_bytes().as_slice(),
                    run.tenant,
                    run.kind,
                    payload,
                    run.trigger.as_str(),
                    run.unique_key,
                    run.priority,
                    now,
                    run.max_retries,
                    owner.0.as_bytes().as_slice(),
                    at(now, lease),
                    holder_bytes(&holder),
                ],
                |row| run_of(row, now),
            )
            .optional()
        })
        .map_err(map_err)?;
    match started {
        Some(run) => Ok(HandOff::Started(Box::new(ClaimedRun {
            run,
            owner,
            reclaimed: false,
        }))),
        // Its key is held (or its id exists): `insert` answers that as usual.
        None => insert(state, conn, run, now).map(HandOff::Queued),
    }
}

/// A holder as the bytes `locked_proc` keeps (borrowed: no allocation per run).
fn holder_bytes(holder: &Option<ProcessId>) -> Option<&[u8]> {
    holder.as_ref().map(|id| id.0.as_bytes().as_slice())
}

/// One claim round: expired leases first, then due runs, fair between tenants.
pub fn claim(
    state: &mut WriterState,
    conn: &Connection,
    params: &ClaimParams,
    now: i64,
) -> SqlResult<ClaimBatch> {
    let mut batch = ClaimBatch::default();
    if params.limit == 0 {
        return Ok(batch);
    }
    // 1. Expired leases: reclaims (or crash loops, or requested cancels).
    let expired: Vec<(i64, i64, i64, String)> = conn
        .prepare_cached(
            "SELECT seq, reclaims, cancel_requested, kind FROM runs INDEXED BY runs_running \
             WHERE status = 1 AND locked_until < ?1 ORDER BY locked_until LIMIT ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![now, params.limit as i64], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })?
            .collect()
        })
        .map_err(map_err)?;
    for (seq, reclaims, cancel_requested, kind) in expired {
        if cancel_requested != 0 {
            let id: Vec<u8> = conn
                .prepare_cached(
                    "UPDATE runs SET status = 4, cancelled_at = ?1, updated_at = ?1, locked_by = NULL, \
                     locked_until = NULL WHERE seq = ?2 RETURNING id",
                )
                .and_then(|mut stmt| stmt.query_row(params![now, seq], |row| row.get(0)))
                .map_err(map_err)?;
            batch.cancelled.push(RunId(uuid_of(id).map_err(map_err)?));
        } else if reclaims + 1 > i64::from(params.max_reclaims) {
            let run = conn
                .prepare_cached(&format!(
                    "UPDATE runs SET status = 3, failed_at = ?1, updated_at = ?1, locked_by = NULL, \
                     locked_until = NULL, reclaims = reclaims + 1, \
                     last_error = 'crash loop: the lease expired ' || (reclaims + 1) || \
                     ' times (max_reclaims ' || ?2 || '); the handler was not started again' \
                     WHERE seq = ?3 RETURNING {COLUMNS}"
                ))
                .and_then(|mut stmt| {
                    stmt.query_row(params![now, params.max_reclaims, seq], |row| run_of(row, now))
                })
                .map_err(map_err)?;
            batch.crash_looped.push(run);
        } else {
            let claimed = take(conn, seq, &kind, params, now, true)?;
            batch.claimed.push(claimed);
        }
    }
    // 2. Due runs, round-robin over tenants.
    let mut remaining = params.limit.saturating_sub(batch.claimed.len());
    if remaining == 0 {
        return Ok(batch);
    }
    let take_sql = take_due_sql(params);
    let holder = holder_bytes(&params.holder);
    let tenants = tenants_in_turn(conn, state.tenant_cursor.as_deref())?;
    let mut active: Vec<String> = Vec::new();
    let mut last_served: Option<String> = None;
    // Level 1: one run from each tenant.
    for tenant in tenants {
        if remaining == 0 {
            break;
        }
        let taken = take_due(conn, &take_sql, &tenant, holder, now, 1)?;
        if taken.is_empty() {
            forget_tenant_if_empty(conn, &tenant)?;
        } else {
            remaining -= taken.len();
            batch.claimed.extend(taken);
            last_served = Some(tenant.clone());
            active.push(tenant);
        }
    }
    // Later levels: the same number more from each tenant that still has work.
    while remaining > 0 && !active.is_empty() {
        let each = (remaining / active.len()).max(1);
        let mut still_active = Vec::with_capacity(active.len());
        for tenant in active {
            if remaining == 0 {
                break;
            }
            let want = each.min(remaining);
            let taken = take_due(conn, &take_sql, &tenant, holder, now, want)?;
            remaining -= taken.len();
            let exhausted = taken.len() < want;
            batch.claimed.extend(taken);
            if !exhausted {
                still_active.push(tenant);
            }
        }
        active = still_active;
    }
    if last_served.is_some() {
        state.tenant_cursor = last_served;
    }
    Ok(batch)
}

/// `CASE kind WHEN 'a' THEN 1000 … ELSE default END`: each kind's lease in milliseconds.
fn lease_case(params: &ClaimParams) -> String {
    let mut kinds: Vec<(&String, &Duration)> = params.leases.iter().collect();
    if kinds.is_empty() {
        return millis(params.default_lease).to_string();
    }
    kinds.sort();
    let mut sql = String::from("CASE kind");
    for (kind, lease) in kinds {
        sql.push_str(&format!(
            " WHEN '{}' THEN {}",
            kind.replace('\'', "''"),
            millis(*lease)
        ));
    }
    sql.push_str(&format!(" ELSE {} END", millis(params.default_lease)));
    sql
}

/// One statement claims up to `?3` due runs of tenant `?1`: each gets its own random
/// owner token (`randomblob(16)`, from SQLite's OS-seeded generator) and its kind's lease.
fn take_due_sql(params: &ClaimParams) -> String {
    format!(
        "UPDATE runs SET status = 1, locked_by = randomblob(16), locked_until = ?2 + {lease}, \
         locked_proc = ?4, heartbeat_at = ?2, started_at = coalesce(started_at, ?2), updated_at = ?2 \
         WHERE seq IN (SELECT seq FROM runs INDEXED BY runs_pending \
           WHERE tenant = ?1 AND status = 0 AND run_at <= ?2 \
           ORDER BY priority DESC, run_at LIMIT ?3) \
         RETURNING {COLUMNS}",
        lease = lease_case(params)
    )
}

fn take_due(
    conn: &Connection,
    sql: &str,
    tenant: &str,
    holder: Option<&[u8]>,
    now: i64,
    limit: usize,
) -> SqlResult<Vec<ClaimedRun>> {
    let mut stmt = conn.prepare_cached(sql).map_err(map_err)?;
    let runs: Vec<Run> = stmt
        .query_map(params![tenant, now, limit as i64, holder], |row| {
            run_of(row, now)
        })
        .and_then(Iterator::collect)
        .map_err(map_err)?;
    runs.into_iter()
        .map(|run| {
            let owner = run.locked_by.ok_or_else(|| {
                StoreError::Internal("invariant: a claimed run has an owner token".into())
            })?;
            Ok(ClaimedRun {
                run,
                owner,
                reclaimed: false,
            })
        })
        .collect()
}

/// Tenants with possible work, starting after `cursor` and wrapping around.
fn tenants_in_turn(conn: &Connection, cursor: Option<&str>) -> SqlResult<Vec<String>> {
    let cursor = cursor.unwrap_or("");
    let mut stmt = conn
        .prepare_cached(
            "SELECT tenant FROM (SELECT tenant, 0 AS turn FROM run_tenants WHERE tenant > ?1 \
             UNION ALL SELECT tenant, 1 AS turn FROM run_tenants WHERE tenant <= ?1) \
             ORDER BY turn, tenant",
        )
        .map_err(map_err)?;
    let rows = stmt
        .query_map([cursor], |row| row.get(0))
        .and_then(Iterator::collect)
        .map_err(map_err)?;
    Ok(rows)
}

fn forget_tenant_if_empty(conn: &Connection, tenant: &str) -> SqlResult<()> {
    conn.prepare_cached(
        "DELETE FROM run_tenants WHERE tenant = ?1 AND NOT EXISTS \
         (SELECT 1 FROM runs INDEXED BY runs_pending WHERE tenant = ?1 AND status = 0)",
    )
    .and_then(|mut stmt| stmt.execute([tenant]))
    .map_err(map_err)?;
    Ok(())
}

fn take(
    conn: &Connection,
    seq: i64,
    kind: &str,
    params: &ClaimParams,
    now: i64,
    reclaim: bool,
) -> SqlResult<ClaimedRun> {
    let owner = OwnerToken::fresh();
    let locked_until = at(now, params.lease_of(kind));
    let run = conn
        .prepare_cached(&format!(
            "UPDATE runs SET status = 1, locked_by = ?1, locked_until = ?2, heartbeat_at = ?3, \
             started_at = coalesce(started_at, ?3), updated_at = ?3, reclaims = reclaims + ?4, \
             locked_proc = ?6 WHERE seq = ?5 RETURNING {COLUMNS}"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    owner.0.as_bytes().as_slice(),
                    locked_until,
                    now,
                    i64::from(reclaim),
                    seq,
                    holder_bytes(&params.holder),
                ],
                |row| run_of(row, now),
            )
        })
        .map_err(map_err)?;
    Ok(ClaimedRun {
        run,
        owner,
        reclaimed: reclaim,
    })
}

/// `RunStore::run_heartbeat_many`: renew each lease its owner still holds, answering lost
/// or the run's `cancel_requested` for each, in order.
pub fn heartbeat(
    conn: &Connection,
    leases: &[LeaseRenewal],
    now: i64,
) -> SqlResult<Vec<HeartbeatReply>> {
    let mut stmt = conn
        .prepare_cached(
            "UPDATE runs SET locked_until = ?1, heartbeat_at = ?2, updated_at = ?2 \
             WHERE id = ?3 AND status = 1 AND locked_by = ?4 RETURNING cancel_requested",
        )
        .map_err(map_err)?;
    let mut replies = Vec::with_capacity(leases.len());
    for lease in leases {
        let cancel: Option<i64> = stmt
            .query_row(
                params![
                    at(now, lease.lease),
                    now,
                    lease.id.0.as_bytes().as_slice(),
                    lease.owner.0.as_bytes().as_slice()
                ],
                |row| row.get(0),
            )
            .optional()
            .map_err(map_err)?;
        replies.push(HeartbeatReply {
            id: lease.id,
            lost: cancel.is_none(),
            cancel_requested: cancel.unwrap_or(0) != 0,
        });
    }
    Ok(replies)
}

/// `RunStore::run_checkpoint`: store `state` and renew the lease, owner-checked;
/// `Err(LeaseLost)` when the row is not running under `owner`.
pub fn checkpoint(
    conn: &Connection,
    id: RunId,
    owner: OwnerToken,
    state: &[u8],
    lease: Duration,
    now: i64,
) -> SqlResult<()> {
    let changed = conn
        .prepare_cached(
            "UPDATE runs SET state = ?1, locked_until = ?2, heartbeat_at = ?3, updated_at = ?3 \
             WHERE id = ?4 AND status = 1 AND locked_by = ?5",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                state,
                at(now, lease),
                now,
                id.0.as_bytes().as_slice(),
                owner.0.as_bytes().as_slice()
            ])
        })
        .map_err(map_err)?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::LeaseLost)
    }
}

/// `RunStore::run_finish_many`: write each finish, owner-checked (a requested cancel wins
/// over a put-back), answering each in order.
pub fn finish(
    state: &mut WriterState,
    conn: &Connection,
    finishes: &[Finish],
    now: i64,
) -> SqlResult<Vec<FinishReply>> {
    let mut replies = Vec::with_capacity(finishes.len());
    for finish in finishes {
        let id = finish.id.0.as_bytes().as_slice();
        let owner = finish.owner.0.as_bytes().as_slice();
        // Back-to-pending actions turn into a cancel when one was requested.
        const BACK: &str = "status = CASE cancel_requested WHEN 0 THEN 0 ELSE 4 END, \
            cancelled_at = CASE cancel_requested WHEN 0 THEN NULL ELSE ?1 END, \
            locked_by = NULL, locked_until = NULL, updated_at = ?1";
        const OWNED: &str =
            "WHERE id = ?2 AND status = 1 AND locked_by = ?3 RETURNING status, tenant, run_at";
        let (sql, extra): (String, Vec<rusqlite::types::Value>) = match &finish.action {
            FinishAction::Complete { result } => (
                format!(
                    "UPDATE runs SET status = 2, completed_at = ?1, updated_at = ?1, locked_by = NULL, \
                         locked_until = NULL, result = ?4, last_error = NULL {OWNED}"
                ),
                vec![result.as_ref().map(|value| value.to_string()).into()],
            ),
            FinishAction::Fail { error } => (
                format!(
                    "UPDATE runs SET status = 3, failed_at = ?1, updated_at = ?1, locked_by = NULL, \
                         locked_until = NULL, last_error = ?4 {OWNED}"
                ),
                vec![error.clone().into()],
            ),
            FinishAction::Retry { delay, error } => (
                format!(
                    "UPDATE runs SET {BACK}, run_at = ?4, attempts = attempts + 1 - cancel_requested, last_error = ?5 {OWNED}"
                ),
                vec![at(now, *delay).into(), error.clone().into()],
            ),
            FinishAction::Snooze { delay } => (
                format!("UPDATE runs SET {BACK}, run_at = ?4 {OWNED}"),
                vec![at(now, *delay).into()],
            ),
            FinishAction::Park { delay, error } => (
                format!(
                    "UPDATE runs SET {BACK}, run_at = ?4, parks = parks + 1 - cancel_requested, last_error = ?5 {OWNED}"
                ),
                vec![at(now, *delay).into(), error.clone().into()],
            ),
            FinishAction::Release => (
                format!("UPDATE runs SET {BACK}, run_at = ?1 {OWNED}"),
                vec![],
            ),
            FinishAction::Cancel => (
                format!(
                    "UPDATE runs SET status = 4, cancelled_at = ?1, updated_at = ?1, locked_by = NULL, \
                         locked_until = NULL {OWNED}"
                ),
                vec![],
            ),
            FinishAction::Suppress { reason } => (
                format!(
                    "UPDATE runs SET status = 5, failed_at = ?1, updated_at = ?1, locked_by = NULL, \
                         locked_until = NULL, last_error = ?4 {OWNED}"
                ),
                vec![reason.clone().into()],
            ),
        };
        let mut values: Vec<rusqlite::types::Value> =
            vec![now.into(), id.to_vec().into(), owner.to_vec().into()];
        values.extend(extra);
        let row: Option<(i64, String, i64)> = conn
            .prepare_cached(&sql)
            .and_then(|mut stmt| {
                stmt.query_row(rusqlite::params_from_iter(values), |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()
            })
            .map_err(map_err)?;
        replies.push(match row {
            Some((status, tenant, run_at)) => {
                if status == PENDING {
                    note_tenant(conn, &tenant)?;
                    state.enqueued = true;
                }
                FinishReply::Applied {
                    id: finish.id,
                    status: status_of(status, run_at, now),
                }
            }
            None => FinishReply::LeaseLost { id: finish.id },
        });
    }
    Ok(replies)
}

/// `RunStore::run_request_cancel`: a pending run is cancelled, a running one flagged, a
/// finished one left alone; `Err(NotFound)` for an unknown id.
pub fn request_cancel(conn: &Connection, id: RunId, now: i64) -> SqlResult<CancelReply> {
    let key = id.0.as_bytes().as_slice();
    let found: Option<(i64, i64)> = conn
        .prepare_cached("SELECT status, run_at FROM runs WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([key], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(map_err)?;
    let Some((status, run_at)) = found else {
        return Err(StoreError::NotFound);
    };
    match status {
        PENDING => {
            conn.prepare_cached(
                "UPDATE runs SET status = 4, cancelled_at = ?1, updated_at = ?1 WHERE id = ?2 AND status = 0",
            )
            .and_then(|mut stmt| stmt.execute(params![now, key]))
            .map_err(map_err)?;
            Ok(CancelReply::Cancelled)
        }
        RUNNING => {
            conn.prepare_cached(
                "UPDATE runs SET cancel_requested = 1, updated_at = ?1 WHERE id = ?2 AND status = 1",
            )
            .and_then(|mut stmt| stmt.execute(params![now, key]))
            .map_err(map_err)?;
            Ok(CancelReply::Requested)
        }
        other => Ok(CancelReply::AlreadyFinished(status_of(other, run_at, now))),
    }
}

/// `RunStore::run_get`: the run `id`, its status judged against `now`; `None` when there is
/// none.
pub fn get(conn: &Connection, id: RunId, now: i64) -> SqlResult<Option<Run>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"))
        .and_then(|mut stmt| {
            stmt.query_row([id.0.as_bytes().as_slice()], |row| run_of(row, now))
                .optional()
        })
        .map_err(map_err)
}

/// The newest run of `tenant` with unique key `key`, of any status (ids are UUIDv7 blobs,
/// so the largest id is the newest); walks `runs_key_history`.
pub fn find_by_key(conn: &Connection, tenant: &str, key: &str, now: i64) -> SqlResult<Option<Run>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM runs WHERE tenant = ?1 AND unique_key = ?2 \
         ORDER BY id DESC LIMIT 1"
    ))
    .and_then(|mut stmt| {
        stmt.query_row([tenant, key], |row| run_of(row, now))
            .optional()
    })
    .map_err(map_err)
}

/// `RunStore::run_list`, newest first. A tenant's list walks `runs_by_tenant`, or
/// `runs_finished_by_tenant` for one finished status (migration 16): its cost follows
/// the page, not the other tenants' history.
pub fn list(conn: &Connection, filter: &RunFilter, now: i64) -> SqlResult<Vec<Run>> {
    let mut sql = format!("SELECT {COLUMNS} FROM runs WHERE 1 = 1");
    let mut values: Vec<rusqlite::types::Value> = Vec::new();
    if let Some(status) = filter.status {
        let (code, due) = match status {
            RunStatus::Scheduled => (PENDING, Some(" AND run_at > ?")),
            RunStatus::Queued => (PENDING, Some(" AND run_at <= ?")),
            RunStatus::Running => (RUNNING, None),
            RunStatus::Completed => (COMPLETED, None),
            RunStatus::Failed => (FAILED, None),
            RunStatus::Cancelled => (CANCELLED, None),
            RunStatus::Suppressed => (SUPPRESSED, None),
        };
        sql.push_str(" AND status = ?");
        values.push(code.into());
        if code >= COMPLETED {
            // Implies the partial index `runs_finished_by_tenant` to the planner.
            sql.push_str(" AND status >= 2");
        }
        if let Some(due) = due {
            sql.push_str(due);
            values.push(now.into());
        }
    }
    if let Some(kind) = &filter.kind {
        sql.push_str(" AND kind = ?");
        values.push(kind.clone().into());
    }
    if let Some(tenant) = &filter.tenant {
        sql.push_str(" AND tenant = ?");
        values.push(tenant.clone().into());
    }
    if let Some(before) = filter.before {
        sql.push_str(" AND id < ?");
        values.push(before.0.as_bytes().to_vec().into());
    }
    let limit = filter.page();
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    values.push((limit as i64).into());
    let mut stmt = conn.prepare_cached(&sql).map_err(map_err)?;
    let runs = stmt
        .query_map(rusqlite::params_from_iter(values), |row| run_of(row, now))
        .and_then(Iterator::collect)
        .map_err(map_err)?;
    Ok(runs)
}

/// `RunStore::run_stats`: the finished runs from `run_counts` (kept by triggers,
/// migration 16), the live ones counted through their partial indexes — its cost follows
/// the kinds and the live runs, never the history.
pub fn stats(conn: &Connection, now: i64) -> SqlResult<RunStats> {
    let mut stats = RunStats::default();
    let mut stmt = conn
        .prepare_cached(
            "SELECT kind, status, 0, runs, attempts, reclaims, parks FROM run_counts \
               WHERE runs <> 0 \
             UNION ALL SELECT kind, status, run_at > ?1 AS later, count(*), sum(attempts), \
               sum(reclaims), sum(parks) FROM runs INDEXED BY runs_pending WHERE status = 0 \
               GROUP BY kind, later \
             UNION ALL SELECT kind, status, 0, count(*), sum(attempts), sum(reclaims), \
               sum(parks) FROM runs INDEXED BY runs_running WHERE status = 1 GROUP BY kind",
        )
        .map_err(map_err)?;
    let rows: Vec<(String, i64, bool, i64, i64, i64, i64)> = stmt
        .query_map([now], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
            ))
        })
        .and_then(Iterator::collect)
        .map_err(map_err)?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    for (kind, code, later, n, attempts, reclaims, parks) in rows {
        // `status_of` compares run_at with now; `later` already did.
        let status = status_of(code, i64::from(later), 0);
        stats.add(
            &kind,
            status,
            count(n),
            [count(attempts), count(reclaims), count(parks)],
        );
    }
    Ok(stats)
}

/// The end of a finished run, as the retention index `runs_finished` (migration 13) reads it.
const ENDED: &str = "coalesce(r.completed_at, r.failed_at, r.cancelled_at)";

/// `RunStore::run_prune`: one bounded delete inside the writer's transaction, the status
/// checked by the delete itself.
pub fn prune(conn: &Connection, prune: &Prune) -> SqlResult<u64> {
    use rusqlite::types::Value as Sql;
    let code = match prune.status {
        RunStatus::Completed => COMPLETED,
        RunStatus::Failed => FAILED,
        RunStatus::Cancelled => CANCELLED,
        RunStatus::Suppressed => SUPPRESSED,
        _ => return Ok(0),
    };
    let mut sql = format!(
        "DELETE FROM runs WHERE status = ?1 AND seq IN (\
           SELECT r.seq FROM runs r WHERE r.status = ?1 AND r.status >= 2 AND {ENDED} < ?2 \
             AND (r.unique_key IS NULL OR {ENDED} < ?3)"
    );
    let mut values: Vec<Sql> = vec![
        Sql::Integer(code),
        Sql::Integer(prune.finished_before.timestamp_millis()),
        Sql::Integer(prune.keyed_finished_before.timestamp_millis()),
    ];
    let mut bind = |sql: &mut String, fragment: &str, value: Sql| {
        values.push(value);
        sql.push_str(&fragment.replace('?', &format!("?{}", values.len())));
    };
    if let Some(tenant) = &prune.tenant {
        bind(&mut sql, " AND r.tenant = ?", Sql::Text(tenant.clone()));
    }
    for tenant in &prune.skip_tenants {
        bind(&mut sql, " AND r.tenant <> ?", Sql::Text(tenant.clone()));
    }
    for id in &prune.keep {
        bind(
            &mut sql,
            " AND r.id <> ?",
            Sql::Blob(id.0.as_bytes().to_vec()),
        );
    }
    for prefix in &prune.keep_newest_of {
        bind(
            &mut sql,
            " AND NOT (r.unique_key IS NOT NULL AND substr(r.unique_key, 1, length(?)) = ?",
            Sql::Text(prefix.clone()),
        );
        sql.push_str(
            " AND NOT EXISTS (SELECT 1 FROM runs n WHERE n.tenant = r.tenant \
               AND n.unique_key = r.unique_key AND n.seq > r.seq))",
        );
    }
    bind(
        &mut sql,
        &format!(" ORDER BY {ENDED} LIMIT ?)"),
        Sql::Integer(i64::try_from(prune.limit).unwrap_or(i64::MAX)),
    );
    let deleted = conn
        .execute(&sql, rusqlite::params_from_iter(values))
        .map_err(map_err)?;
    Ok(deleted as u64)
}

/// A new database returns the pages deletes free to the file system step by step
/// (`auto_vacuum = INCREMENTAL`, settable only before the first table); one created
/// before keeps reusing them inside the file, and the log says how to change that.
pub fn choose_vacuum(conn: &Connection, path: &std::path::Path) -> SqlResult<()> {
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
        .map_err(map_err)?;
    if tables == 0 {
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")
            .map_err(map_err)?;
        return Ok(());
    }
    let mode: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
        .map_err(map_err)?;
    if mode != 2 {
        tracing::info!(path = %path.display(),
            "sqlite: this database was created without incremental vacuum: the space deleted runs free \
             is reused inside the file but not given back; `VACUUM` it once while fronta is stopped \
             after `PRAGMA auto_vacuum = INCREMENTAL` to change that");
    }
    Ok(())
}

/// `RunStore::reclaim_space`: one `incremental_vacuum` step of at most `pages` pages
/// (nothing on a database without incremental vacuum); the free pages left.
pub fn reclaim_space(conn: &Connection, pages: u32) -> SqlResult<u64> {
    let mode: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
        .map_err(map_err)?;
    if mode != 2 {
        return Ok(0);
    }
    // The pragma answers a row per step: read them all so the whole step runs.
    conn.prepare(&format!("PRAGMA incremental_vacuum({})", pages.max(1)))
        .and_then(|mut stmt| {
            let mut rows = stmt.query([])?;
            while rows.next()?.is_some() {}
            Ok(())
        })
        .map_err(map_err)?;
    let left: i64 = conn
        .query_row("PRAGMA freelist_count", [], |row| row.get(0))
        .map_err(map_err)?;
    Ok(left.max(0) as u64)
}

/// `RunStore::oldest_finished`: one probe of `runs_finished` per finished status.
pub fn oldest_finished(conn: &Connection) -> SqlResult<Option<chrono::DateTime<chrono::Utc>>> {
    let oldest: Option<i64> = conn
        .prepare_cached(
            "SELECT min(ended) FROM (\
               SELECT min(coalesce(completed_at, failed_at, cancelled_at)) AS ended FROM runs WHERE status = 2 AND status >= 2 \
               UNION ALL SELECT min(coalesce(completed_at, failed_at, cancelled_at)) FROM runs WHERE status = 3 AND status >= 2 \
               UNION ALL SELECT min(coalesce(completed_at, failed_at, cancelled_at)) FROM runs WHERE status = 4 AND status >= 2 \
               UNION ALL SELECT min(coalesce(completed_at, failed_at, cancelled_at)) FROM runs WHERE status = 5 AND status >= 2)",
        )
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
        .map_err(map_err)?;
    Ok(oldest.map(instant))
}

/// `RunStore::run_retry`: a failed or suppressed run back to pending, due now, counters
/// reset, checkpoint kept; `Err(Conflict)` when another live run of the tenant holds its
/// unique key.
pub fn retry(
    state: &mut WriterState,
    conn: &Connection,
    id: RunId,
    now: i64,
) -> SqlResult<RetryReply> {
    let key = id.0.as_bytes().as_slice();
    let found: Option<(i64, i64, String, Option<String>)> = conn
        .prepare_cached("SELECT status, run_at, tenant, unique_key FROM runs WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([key], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .optional()
        })
        .map_err(map_err)?;
    let Some((status, run_at, tenant, unique_key)) = found else {
        return Err(StoreError::NotFound);
    };
    let found = status_of(status, run_at, now);
    if !found.is_retried_by_hand() {
        return Ok(RetryReply::NotFailed(found));
    }
    let changed = conn
        .prepare_cached(
            "UPDATE runs SET status = 0, run_at = ?1, updated_at = ?1, failed_at = NULL, \
             attempts = 0, reclaims = 0, parks = 0, locked_by = NULL, locked_until = NULL \
             WHERE id = ?2 AND status IN (3, 5)",
        )
        .and_then(|mut stmt| stmt.execute(params![now, key]));
    match changed {
        Ok(_) => {}
        Err(err) => {
            let err = map_err(err);
            return Err(match (err, unique_key) {
                (StoreError::Conflict(_), Some(key)) => StoreError::Conflict(format!(
                    "another pending or running run holds the unique key {key:?}"
                )),
                (err, _) => err,
            });
        }
    }
    note_tenant(conn, &tenant)?;
    state.enqueued = true;
    Ok(RetryReply::Requeued)
}

/// `RunStore::run_busy`: whether any run is running or due at `now`, through the partial
/// indexes of the live runs.
pub fn busy(conn: &Connection, now: i64) -> SqlResult<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs INDEXED BY runs_running WHERE status = 1) \
             OR EXISTS (SELECT 1 FROM runs INDEXED BY runs_pending WHERE status = 0 AND run_at <= ?1)",
    )
    .and_then(|mut stmt| stmt.query_row([now], |row| row.get(0)))
    .map_err(map_err)
}
