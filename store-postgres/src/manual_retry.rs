//! Manual retry of a failed or suppressed run (`RunStore::run_retry`): back to pending, due now, with
//! its checkpoint and a fresh budget; the tenant is noted as having pending work (and
//! workers are notified) in the same statement.

use fronta_engine::store::RetryReply;
use fronta_engine::{RunId, StoreError};
use sqlx::PgConnection;

use crate::map_err;
use crate::runs::{Ctx, STATUS_OF, status_of};

const RETRY: &str = "WITH done AS (
        UPDATE runs SET status = 0,
            run_at = date_trunc('milliseconds', coalesce($1::timestamptz, now())),
            updated_at = date_trunc('milliseconds', coalesce($1::timestamptz, now())),
            failed_at = NULL, attempts = 0, reclaims = 0, parks = 0,
            locked_by = NULL, locked_until = NULL
        WHERE id = $2 AND status IN (3, 5)
        RETURNING tenant
    ), noted AS (
        SELECT fronta_note_pending(ARRAY(SELECT tenant FROM done)) AS tenants
    )
    SELECT count(*) FROM done CROSS JOIN noted";

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
