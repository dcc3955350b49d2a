//! Dashboard widgets ([`WidgetStore`]) on SQLite: one row per widget holding the
//! definition as JSON, the cache and the refresh lease. Claims and settles are jobs on
//! the writer thread, so they are serialised against every other write of every process
//! on the file (SQLite has one writer): two claimers of a stale widget cannot both take
//! the lease. The decisions are the plans in `fronta_automation::widget`
//! ([`widget::plan_create`], [`widget::plan_update`], [`widget::plan_claim`],
//! [`WidgetView::at`]): this file reads what they need and writes what they answer.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_automation::store::{StoreResult, deleted, names};
use fronta_automation::widget::{
    self, Claim, Fetched, Widget, WidgetCache, WidgetDef, WidgetStore, WidgetView,
};
use fronta_desk::TenantId;
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use crate::SqliteStore;
use crate::desk::{DeskSql, instant, key, many, sql_err, tenant_exists, to_json, uuid_at};

const COLUMNS: &str = "id, config, created_at, updated_at, data, fetched_at, checked_at, \
                       error, error_at, lease_until";

/// A row before `now` is known (`lease_until` decides `refreshing`).
struct Stored {
    widget: Widget,
    cache: WidgetCache,
    lease_until: Option<i64>,
}

impl Stored {
    fn view(self, now: i64) -> WidgetView {
        WidgetView::at(
            self.widget,
            self.cache,
            self.lease_until.map(instant),
            instant(now),
        )
    }
}

fn conversion(idx: usize, err: serde_json::Error) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(err))
}

fn stored_of(row: &Row<'_>) -> rusqlite::Result<Stored> {
    let config: String = row.get(1)?;
    let def: WidgetDef = serde_json::from_str(&config).map_err(|err| conversion(1, err))?;
    let data: Option<String> = row.get(4)?;
    let data = data
        .map(|text| serde_json::from_str(&text).map_err(|err| conversion(4, err)))
        .transpose()?;
    Ok(Stored {
        widget: Widget {
            id: uuid_at(row, 0)?,
            def,
            created_at: instant(row.get(2)?),
            updated_at: instant(row.get(3)?),
        },
        cache: WidgetCache {
            data,
            fetched_at: row.get::<_, Option<i64>>(5)?.map(instant),
            checked_at: row.get::<_, Option<i64>>(6)?.map(instant),
            error: row.get(7)?,
            error_at: row.get::<_, Option<i64>>(8)?.map(instant),
        },
        lease_until: row.get(9)?,
    })
}

fn get(conn: &Connection, tenant: TenantId, id: Uuid) -> DeskSql<Option<Stored>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM widgets WHERE tenant = ?1 AND id = ?2"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(params![key(&tenant.0), key(&id)], stored_of)
            .optional()
    })
    .map_err(sql_err)
}

#[async_trait]
impl WidgetStore for SqliteStore {
    async fn widget_create(
        &self,
        tenant: TenantId,
        def: WidgetDef,
        max: usize,
    ) -> StoreResult<Widget> {
        let config = to_json(&def)?;
        self.desk_write(move |conn, now| {
            tenant_exists(conn, tenant)?;
            let count: i64 = conn
                .prepare_cached("SELECT count(*) FROM widgets WHERE tenant = ?1")
                .and_then(|mut stmt| stmt.query_row([key(&tenant.0)], |row| row.get(0)))
                .map_err(sql_err)?;
            let count = u64::try_from(count).unwrap_or(u64::MAX);
            let widget = widget::plan_create(def, count, max, Uuid::new_v4(), instant(now))?;
            conn.prepare_cached(
                "INSERT INTO widgets (id, tenant, name, config, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key(&widget.id),
                    key(&tenant.0),
                    widget.def.name,
                    config,
                    now
                ])
            })
            .map_err(sql_err)?;
            Ok(widget)
        })
        .await
    }

    async fn widget_update(
        &self,
        tenant: TenantId,
        id: Uuid,
        def: WidgetDef,
        reset: bool,
    ) -> StoreResult<Widget> {
        let config = to_json(&def)?;
        self.desk_write(move |conn, now| {
            let stored = get(conn, tenant, id)?.map(|stored| stored.widget);
            let widget = widget::plan_update(stored, def, instant(now))?;
            let sql = if reset {
                "UPDATE widgets SET name = ?3, config = ?4, updated_at = ?5, data = NULL, \
                 fetched_at = NULL, checked_at = NULL, error = NULL, error_at = NULL, \
                 lease_token = NULL, lease_until = NULL WHERE tenant = ?1 AND id = ?2"
            } else {
                "UPDATE widgets SET name = ?3, config = ?4, updated_at = ?5 \
                 WHERE tenant = ?1 AND id = ?2"
            };
            conn.prepare_cached(sql)
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        key(&tenant.0),
                        key(&id),
                        widget.def.name,
                        config,
                        now
                    ])
                })
                .map_err(sql_err)?;
            Ok(widget)
        })
        .await
    }

    async fn widget_get(&self, tenant: TenantId, id: Uuid) -> StoreResult<Option<WidgetView>> {
        let now = self.config().clock.now().timestamp_millis();
        self.desk_read(move |conn| Ok(get(conn, tenant, id)?.map(|stored| stored.view(now))))
            .await
    }

    async fn widget_list(&self, tenant: TenantId) -> StoreResult<Vec<WidgetView>> {
        let now = self.config().clock.now().timestamp_millis();
        self.desk_read(move |conn| {
            let rows = many(
                conn,
                &format!("SELECT {COLUMNS} FROM widgets WHERE tenant = ?1 ORDER BY name, id"),
                [key(&tenant.0)],
                stored_of,
            )?;
            Ok(rows.into_iter().map(|stored| stored.view(now)).collect())
        })
        .await
    }

    async fn widget_delete(&self, tenant: TenantId, id: Uuid) -> StoreResult<()> {
        self.desk_write(move |conn, _| {
            let rows = conn
                .prepare_cached("DELETE FROM widgets WHERE tenant = ?1 AND id = ?2")
                .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), key(&id)]))
                .map_err(sql_err)?;
            deleted(rows as u64, names::WIDGET)
        })
        .await
    }

    async fn widget_claim(
        &self,
        tenant: TenantId,
        id: Uuid,
        force: bool,
        lease: Duration,
    ) -> StoreResult<Claim> {
        self.desk_write(move |conn, now| {
            let stored = get(conn, tenant, id)?.map(|stored| stored.view(now));
            let new_token = || Uuid::new_v4().to_string();
            let plan = widget::plan_claim(stored, force, lease, new_token)?;
            let Some(lease) = plan.lease else {
                return Ok(plan.answer);
            };
            conn.prepare_cached(
                "UPDATE widgets SET lease_token = ?3, lease_until = ?4 \
                 WHERE tenant = ?1 AND id = ?2",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key(&tenant.0),
                    key(&id),
                    lease.token,
                    lease.until.timestamp_millis()
                ])
            })
            .map_err(sql_err)?;
            Ok(plan.answer)
        })
        .await
    }

    async fn widget_settle(
        &self,
        tenant: TenantId,
        id: Uuid,
        token: &str,
        outcome: Fetched,
    ) -> StoreResult<Option<WidgetView>> {
        let token = token.to_owned();
        self.desk_write(move |conn, now| {
            let Some(stored) = get(conn, tenant, id)? else {
                return Ok(None);
            };
            let cache = stored.cache.settled(outcome, instant(now));
            let data = cache.data.as_ref().map(to_json).transpose()?;
            let at = |instant: Option<DateTime<Utc>>| instant.map(|at| at.timestamp_millis());
            let changed = conn
                .prepare_cached(
                    "UPDATE widgets SET data = ?4, fetched_at = ?5, checked_at = ?6, \
                     error = ?7, error_at = ?8, lease_token = NULL, lease_until = NULL \
                     WHERE tenant = ?1 AND id = ?2 AND lease_token = ?3",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        key(&tenant.0),
                        key(&id),
                        token,
                        data,
                        at(cache.fetched_at),
                        at(cache.checked_at),
                        cache.error,
                        at(cache.error_at),
                    ])
                })
                .map_err(sql_err)?;
            // The lease was lost (taken over after expiry, dropped by a reset).
            if changed == 0 {
                return Ok(None);
            }
            Ok(Some(WidgetView::at(
                stored.widget,
                cache,
                None,
                instant(now),
            )))
        })
        .await
    }
}
