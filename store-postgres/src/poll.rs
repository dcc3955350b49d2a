//! The cursors of poll automations ([`PollCursors`]) on Postgres, like SQLite's: a row
//! per automation (migration 10, `poll_cursors`, deleted with the automation by
//! `ON DELETE CASCADE`). The compare-and-set runs in one transaction that first locks the
//! automation's row (`FOR NO KEY UPDATE`), so every process's movers of one cursor
//! queue there — also for the first move, when no cursor row exists to lock yet. The
//! decision is the shared pure [`poll::decide`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_automation::poll::{self, Advance, PollCursors, StoredCursor};
use fronta_automation::store::{AutomationId, StoreResult};
use fronta_desk::store::names::AUTOMATION;
use fronta_desk::{DeskError, TenantId};
use serde_json::Value;
use sqlx::Row;

use crate::PgStore;
use crate::desk::{Db, DeskSql, sql_err};

async fn automation_exists(
    db: &mut Db<'_>,
    tenant: TenantId,
    automation: AutomationId,
    lock: bool,
) -> DeskSql<()> {
    let sql = if lock {
        "SELECT 1 FROM automations WHERE tenant = $1 AND id = $2 FOR NO KEY UPDATE"
    } else {
        "SELECT 1 FROM automations WHERE tenant = $1 AND id = $2"
    };
    let found: Option<i32> = sqlx::query_scalar(sql)
        .bind(tenant.0)
        .bind(automation.0)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
    found.map(|_| ()).ok_or(DeskError::NotFound(AUTOMATION))
}

async fn read(db: &mut Db<'_>, automation: AutomationId) -> DeskSql<Option<StoredCursor>> {
    let row = sqlx::query("SELECT value, run, updated_at FROM poll_cursors WHERE automation = $1")
        .bind(automation.0)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
    let Some(row) = row else { return Ok(None) };
    let value: String = row.try_get("value").map_err(sql_err)?;
    let run: String = row.try_get("run").map_err(sql_err)?;
    let updated_at: DateTime<Utc> = row.try_get("updated_at").map_err(sql_err)?;
    let value: Value = serde_json::from_str(&value)
        .map_err(|err| DeskError::Internal(format!("a stored poll cursor: {err}")))?;
    Ok(Some(StoredCursor {
        value,
        run,
        updated_at,
    }))
}

#[async_trait]
impl PollCursors for PgStore {
    async fn poll_cursor_get(
        &self,
        tenant: TenantId,
        automation: AutomationId,
    ) -> StoreResult<Option<StoredCursor>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        automation_exists(&mut db, tenant, automation, false).await?;
        read(&mut db, automation).await
    }

    async fn poll_cursor_advance(
        &self,
        tenant: TenantId,
        automation: AutomationId,
        from: Option<&Value>,
        to: &Value,
        run: &str,
    ) -> StoreResult<Advance> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        automation_exists(&mut db, tenant, automation, true).await?;
        let current = read(&mut db, automation).await?.map(|cursor| cursor.value);
        let answer = poll::decide(current.as_ref(), from, to);
        if answer == Advance::Advanced {
            let now = db.now().await?;
            sqlx::query(
                "INSERT INTO poll_cursors (automation, tenant, value, run, updated_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (automation) DO UPDATE SET \
                 value = excluded.value, run = excluded.run, updated_at = excluded.updated_at",
            )
            .bind(automation.0)
            .bind(tenant.0)
            .bind(to.to_string())
            .bind(run)
            .bind(now)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        }
        self.desk_commit(tx).await?;
        Ok(answer)
    }
}
