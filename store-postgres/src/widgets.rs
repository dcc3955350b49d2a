//! Dashboard widgets ([`WidgetStore`]) on Postgres, like SQLite's: one row per widget
//! holding the definition as `jsonb`, the cache and the refresh lease. A claim locks the
//! widget's row (`SELECT … FOR UPDATE`) in its transaction, so of two processes claiming
//! a stale widget one waits for the other's lease and answers `Busy`. A create counts the
//! tenant's widgets under a per-tenant advisory lock ([`WIDGET_LOCK_CLASS`]), so racing
//! creates cannot pass the limit. The decisions are the plans in
//! `fronta_automation::widget` ([`widget::plan_create`], [`widget::plan_update`],
//! [`widget::plan_claim`], [`WidgetView::at`]): this file reads what they need and
//! writes what they answer.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_automation::store::{StoreResult, deleted, names};
use fronta_automation::widget::{
    self, Claim, Fetched, Widget, WidgetCache, WidgetDef, WidgetStore, WidgetView,
};
use fronta_desk::{DeskError, TenantId};
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use crate::PgStore;
use crate::desk::{Db, DeskSql, sql_err, tenant_exists};

/// The advisory lock class (two-`int4` key space) of a tenant's widget creates ("widg");
/// the second key is `hashtext(tenant)`.
pub const WIDGET_LOCK_CLASS: i32 = 0x7769_6467;

macro_rules! columns {
    () => {
        "id, config, created_at, updated_at, data, fetched_at, checked_at, error, error_at, lease_until"
    };
}

struct Stored {
    widget: Widget,
    cache: WidgetCache,
    lease_until: Option<DateTime<Utc>>,
}

impl Stored {
    fn view(self, now: DateTime<Utc>) -> WidgetView {
        WidgetView::at(self.widget, self.cache, self.lease_until, now)
    }
}

fn stored_of(row: &PgRow) -> DeskSql<Stored> {
    let config: serde_json::Value = row.try_get("config").map_err(sql_err)?;
    let def: WidgetDef = serde_json::from_value(config)
        .map_err(|err| DeskError::Internal(format!("a stored widget cannot be read: {err}")))?;
    Ok(Stored {
        widget: Widget {
            id: row.try_get("id").map_err(sql_err)?,
            def,
            created_at: row.try_get("created_at").map_err(sql_err)?,
            updated_at: row.try_get("updated_at").map_err(sql_err)?,
        },
        cache: WidgetCache {
            data: row.try_get("data").map_err(sql_err)?,
            fetched_at: row.try_get("fetched_at").map_err(sql_err)?,
            checked_at: row.try_get("checked_at").map_err(sql_err)?,
            error: row.try_get("error").map_err(sql_err)?,
            error_at: row.try_get("error_at").map_err(sql_err)?,
        },
        lease_until: row.try_get("lease_until").map_err(sql_err)?,
    })
}

async fn get(db: &mut Db<'_>, tenant: TenantId, id: Uuid, lock: bool) -> DeskSql<Option<Stored>> {
    let sql = if lock {
        concat!(
            "SELECT ",
            columns!(),
            " FROM widgets WHERE tenant = $1 AND id = $2 FOR UPDATE"
        )
    } else {
        concat!(
            "SELECT ",
            columns!(),
            " FROM widgets WHERE tenant = $1 AND id = $2"
        )
    };
    let row = sqlx::query(sql)
        .bind(tenant.0)
        .bind(id)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
    row.as_ref().map(stored_of).transpose()
}

fn config_of(def: &WidgetDef) -> DeskSql<serde_json::Value> {
    serde_json::to_value(def)
        .map_err(|err| DeskError::Internal(format!("a widget cannot be written: {err}")))
}

#[async_trait]
impl WidgetStore for PgStore {
    async fn widget_create(
        &self,
        tenant: TenantId,
        def: WidgetDef,
        max: usize,
    ) -> StoreResult<Widget> {
        let config = config_of(&def)?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        tenant_exists(&mut db, tenant).await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2::text))")
            .bind(WIDGET_LOCK_CLASS)
            .bind(tenant.0.to_string())
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM widgets WHERE tenant = $1")
            .bind(tenant.0)
            .fetch_one(db.c())
            .await
            .map_err(sql_err)?;
        let now = db.now().await?;
        let count = u64::try_from(count).unwrap_or(u64::MAX);
        let widget = widget::plan_create(def, count, max, Uuid::new_v4(), now)?;
        sqlx::query(
            "INSERT INTO widgets (id, tenant, name, config, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $5)",
        )
        .bind(widget.id)
        .bind(tenant.0)
        .bind(&widget.def.name)
        .bind(config)
        .bind(now)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
        self.desk_commit(tx).await?;
        Ok(widget)
    }

    async fn widget_update(
        &self,
        tenant: TenantId,
        id: Uuid,
        def: WidgetDef,
        reset: bool,
    ) -> StoreResult<Widget> {
        let config = config_of(&def)?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let stored = get(&mut db, tenant, id, true).await?;
        let now = db.now().await?;
        let widget = widget::plan_update(stored.map(|stored| stored.widget), def, now)?;
        let sql = if reset {
            "UPDATE widgets SET name = $3, config = $4, updated_at = $5, data = NULL, \
             fetched_at = NULL, checked_at = NULL, error = NULL, error_at = NULL, \
             lease_token = NULL, lease_until = NULL WHERE tenant = $1 AND id = $2"
        } else {
            "UPDATE widgets SET name = $3, config = $4, updated_at = $5 \
             WHERE tenant = $1 AND id = $2"
        };
        sqlx::query(sql)
            .bind(tenant.0)
            .bind(id)
            .bind(&widget.def.name)
            .bind(config)
            .bind(now)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        self.desk_commit(tx).await?;
        Ok(widget)
    }

    async fn widget_get(&self, tenant: TenantId, id: Uuid) -> StoreResult<Option<WidgetView>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let now = db.now().await?;
        Ok(get(&mut db, tenant, id, false)
            .await?
            .map(|stored| stored.view(now)))
    }

    async fn widget_list(&self, tenant: TenantId) -> StoreResult<Vec<WidgetView>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let now = db.now().await?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM widgets WHERE tenant = $1 ORDER BY name, id"
        ))
        .bind(tenant.0)
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter()
            .map(|row| stored_of(row).map(|stored| stored.view(now)))
            .collect()
    }

    async fn widget_delete(&self, tenant: TenantId, id: Uuid) -> StoreResult<()> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let rows = sqlx::query("DELETE FROM widgets WHERE tenant = $1 AND id = $2")
            .bind(tenant.0)
            .bind(id)
            .execute(db.c())
            .await
            .map_err(sql_err)?
            .rows_affected();
        deleted(rows, names::WIDGET)?;
        self.desk_commit(tx).await
    }

    async fn widget_claim(
        &self,
        tenant: TenantId,
        id: Uuid,
        force: bool,
        lease: Duration,
    ) -> StoreResult<Claim> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let stored = get(&mut db, tenant, id, true).await?;
        // After the lock: a claimer that waited for another sees its lease.
        let now = db.now().await?;
        let stored = stored.map(|stored| stored.view(now));
        let plan = widget::plan_claim(stored, force, lease, Uuid::new_v4)?;
        let Some(lease) = plan.lease else {
            return Ok(plan.answer);
        };
        sqlx::query(
            "UPDATE widgets SET lease_token = $3, lease_until = $4 WHERE tenant = $1 AND id = $2",
        )
        .bind(tenant.0)
        .bind(id)
        .bind(lease.token)
        .bind(lease.until)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
        self.desk_commit(tx).await?;
        Ok(plan.answer)
    }

    async fn widget_settle(
        &self,
        tenant: TenantId,
        id: Uuid,
        token: &str,
        outcome: Fetched,
    ) -> StoreResult<Option<WidgetView>> {
        // A token that is not a UUID never held a lease here.
        let Ok(token) = Uuid::parse_str(token) else {
            return Ok(None);
        };
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let now = db.now().await?;
        // Read without a lock: while the token holds the lease nobody else writes the
        // cache, and a reset or a takeover meanwhile changes the token the update asks for.
        let Some(stored) = get(&mut db, tenant, id, false).await? else {
            return Ok(None);
        };
        let cache = stored.cache.settled(outcome, now);
        let changed = sqlx::query(
            "UPDATE widgets SET data = $4, fetched_at = $5, checked_at = $6, error = $7, \
             error_at = $8, lease_token = NULL, lease_until = NULL \
             WHERE tenant = $1 AND id = $2 AND lease_token = $3",
        )
        .bind(tenant.0)
        .bind(id)
        .bind(token)
        .bind(cache.data.clone())
        .bind(cache.fetched_at)
        .bind(cache.checked_at)
        .bind(cache.error.clone())
        .bind(cache.error_at)
        .execute(db.c())
        .await
        .map_err(sql_err)?
        .rows_affected();
        // The lease was lost (taken over after expiry, dropped by a reset).
        if changed == 0 {
            return Ok(None);
        }
        self.desk_commit(tx).await?;
        Ok(Some(WidgetView::at(stored.widget, cache, None, now)))
    }
}
