//! Manual retry of a failed or suppressed run (`RunStore::run_retry`): back to pending, due now, with
//! its checkpoint and a fresh budget; the tenant is noted as having pending work (and
//! workers are notified) in the same statement.

use std::collections::HashSet;

use fronta_engine::store::{RetryReply, StoreResult};
use fronta_engine::{RunId, StoreError};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::map_err;
use crate::runs::{Ctx, STATUS_OF, status_of, statuses_of};

/// The update of a retry: back to pending, due now, a fresh budget, the checkpoint kept.
macro_rules! retry_set {
    () => {
        "UPDATE runs SET status = 0,
            run_at = date_trunc('milliseconds', coalesce($1::timestamptz, now())),
            updated_at = date_trunc('milliseconds', coalesce($1::timestamptz, now())),
            failed_at = NULL, attempts = 0, reclaims = 0, parks = 0,
            locked_by = NULL, locked_until = NULL"
    };
}

const RETRY: &str = concat!(
    "WITH done AS (",
    retry_set!(),
    " WHERE id = $2 AND status IN (3, 5)
        RETURNING tenant
    ), noted AS (
        SELECT fronta_note_pending(ARRAY(SELECT tenant FROM done)) AS tenants
    )
    SELECT count(*) FROM done CROSS JOIN noted"
);

pub(crate) async fn retry(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    id: RunId,
) -> Result<RetryReply, StoreError> {
    ctx.trip();
    let requeued: i64 = sqlx::query_scalar(RETRY)
        .bind(ctx.now)
        .bind(id.0)
        .fetch_one(&mut *conn)
        .await
        .map_err(|err| match map_err(err) {
            StoreError::Conflict(_) => StoreError::Conflict(
                "another pending or running run holds this run's unique key".into(),
            ),
            other => other,
        })?;
    if requeued == 1 {
        return Ok(RetryReply::Requeued);
    }
    ctx.trip();
    let found: Option<(i16, bool)> = sqlx::query_as(STATUS_OF)
        .bind(ctx.now)
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    match found {
        Some((status, later)) => Ok(RetryReply::NotFailed(status_of(status, later))),
        None => Err(StoreError::NotFound),
    }
}

/// [`RETRY`] of many runs in one statement: the ids it requeued.
const RETRY_MANY: &str = concat!(
    "WITH done AS (",
    retry_set!(),
    " WHERE id = ANY($2::uuid[]) AND status IN (3, 5)
        RETURNING id, tenant
    ), noted AS (
        SELECT fronta_note_pending(ARRAY(SELECT DISTINCT tenant FROM done)) AS tenants
    )
    SELECT id FROM done CROSS JOIN noted"
);

/// `RunStore::run_retry_many` on `conn` (the caller's transaction): one statement in a
/// savepoint; when a run's unique key is held by another live run the statement fails
/// as a whole, and the runs are then retried one by one, each in its own savepoint, so
/// only that run fails (`Conflict`).
pub(crate) async fn retry_many(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    ids: &[RunId],
) -> Result<Vec<StoreResult<RetryReply>>, StoreError> {
    let keys: Vec<Uuid> = ids.iter().map(|id| id.0).collect();
    let mut together = conn.begin().await.map_err(map_err)?;
    ctx.trip();
    let requeued = sqlx::query_scalar::<_, Uuid>(RETRY_MANY)
        .bind(ctx.now)
        .bind(&keys)
        .fetch_all(&mut *together)
        .await
        .map_err(map_err);
    let requeued: HashSet<Uuid> = match requeued {
        Ok(requeued) => {
            together.commit().await.map_err(map_err)?;
            requeued.into_iter().collect()
        }
        Err(StoreError::Conflict(_)) => {
            together.rollback().await.map_err(map_err)?;
            let mut replies = Vec::with_capacity(ids.len());
            for id in ids {
                let mut alone = conn.begin().await.map_err(map_err)?;
                let reply = retry(&mut alone, ctx, *id).await;
                match &reply {
                    Err(StoreError::Conflict(_)) => alone.rollback().await.map_err(map_err)?,
                    Err(err) if *err != StoreError::NotFound => return Err(err.clone()),
                    _ => alone.commit().await.map_err(map_err)?,
                }
                replies.push(reply);
            }
            return Ok(replies);
        }
        Err(err) => return Err(err),
    };
    let missing: Vec<Uuid> = keys
        .iter()
        .filter(|key| !requeued.contains(key))
        .copied()
        .collect();
    let found = statuses_of(conn, ctx, &missing).await?;
    Ok(keys
        .iter()
        .map(|key| {
            if requeued.contains(key) {
                Ok(RetryReply::Requeued)
            } else {
                match found.get(key) {
                    Some((status, later)) => Ok(RetryReply::NotFailed(status_of(*status, *later))),
                    None => Err(StoreError::NotFound),
                }
            }
        })
        .collect())
}
