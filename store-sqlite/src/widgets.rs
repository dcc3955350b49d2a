//! Dashboard widgets ([`WidgetStore`]) on SQLite: one row per widget holding the
//! definition as JSON, the cache and the refresh lease. Claims and settles are jobs on
//! the writer thread, so they are serialised against every other write of every process
//! on the file (SQLite has one writer): two claimers of a stale widget cannot both take
//! the lease. Freshness is the shared pure [`widget::is_fresh`].

use std::time::Duration;

use async_trait::async_trait;
use fronta_automation::store::StoreResult;
use fronta_automation::widget::{
    self, Claim, Fetched, Widget, WidgetCache, WidgetDef, WidgetStore, WidgetView,
};
use fronta_desk::{DeskError, TenantId};
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use crate::SqliteStore;
use crate::desk::{DeskSql, instant, key, many, sql_err, tenant_exists, to_json, uuid_at};

const WIDGET: &str = "widget";

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
        WidgetView {
            widget: self.widget,
            cache: self.cache,
            refreshing: self.lease_until.is_some_and(|until| until > now),
            now: instant(now),
        }
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

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
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
            if usize::try_from(count).unwrap_or(usize::MAX) >= max {
                return Err(DeskError::Conflict(format!(
                    "the tenant has {count} widgets, the most allowed is {max}"
                )));
            }
            let id = Uuid::new_v4();
            conn.prepare_cached(
                "INSERT INTO widgets (id, tenant, name, config, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![key(&id), key(&tenant.0), def.name, config, now])
            })
            .map_err(sql_err)?;
            Ok(Widget {
                id,
                def,
                created_at: instant(now),
                updated_at: instant(now),
            })
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
            let Some(stored) = get(conn, tenant, id)? else {
                return Err(DeskError::NotFound(WIDGET));
            };
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
                    stmt.execute(params![key(&tenant.0), key(&id), def.name, config, now])
                })
                .map_err(sql_err)?;
            Ok(Widget {
                id,
                def,
                created_at: stored.widget.created_at,
                updated_at: instant(now),
            })
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
            let deleted = conn
                .prepare_cached("DELETE FROM widgets WHERE tenant = ?1 AND id = ?2")
                .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), key(&id)]))
                .map_err(sql_err)?;
            if deleted == 0 {
                return Err(DeskError::NotFound(WIDGET));
            }
            Ok(())
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
            let Some(stored) = get(conn, tenant, id)? else {
                return Err(DeskError::NotFound(WIDGET));
            };
            let view = stored.view(now);
            if !force && widget::is_fresh(&view.cache, view.widget.def.ttl(), view.now) {
                return Ok(Claim::Fresh(view));
            }
            if view.refreshing {
                return Ok(Claim::Busy(view));
            }
            let token = Uuid::new_v4().to_string();
            conn.prepare_cached(
                "UPDATE widgets SET lease_token = ?3, lease_until = ?4 \
                 WHERE tenant = ?1 AND id = ?2",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key(&tenant.0),
                    key(&id),
                    token,
                    now.saturating_add(millis(lease))
                ])
            })
            .map_err(sql_err)?;
            Ok(Claim::Claimed {
                token,
                view: WidgetView {
                    refreshing: true,
                    ..view
                },
            })
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
        let data = match &outcome {
            Fetched::Data(data) => Some(to_json(data)?),
            _ => None,
        };
        self.desk_write(move |conn, now| {
            let run = |sql: &str, values: &[&dyn rusqlite::ToSql]| {
                conn.prepare_cached(sql)
                    .and_then(|mut stmt| stmt.execute(values))
                    .map_err(sql_err)
            };
            let (tenant_key, id_key) = (key(&tenant.0), key(&id));
            let changed = match &outcome {
                Fetched::Data(_) => run(
                    "UPDATE widgets SET data = ?4, fetched_at = ?5, checked_at = ?5, \
                     error = NULL, error_at = NULL, lease_token = NULL, lease_until = NULL \
                     WHERE tenant = ?1 AND id = ?2 AND lease_token = ?3",
                    params![tenant_key, id_key, token, data, now],
                )?,
                Fetched::Failed(message) => run(
                    "UPDATE widgets SET error = ?4, error_at = ?5, checked_at = ?5, \
                     lease_token = NULL, lease_until = NULL \
                     WHERE tenant = ?1 AND id = ?2 AND lease_token = ?3",
                    params![tenant_key, id_key, token, message, now],
                )?,
                Fetched::NotMade => run(
                    "UPDATE widgets SET lease_token = NULL, lease_until = NULL \
                     WHERE tenant = ?1 AND id = ?2 AND lease_token = ?3",
                    params![tenant_key, id_key, token],
                )?,
            };
            if changed == 0 {
                return Ok(None);
            }
            Ok(get(conn, tenant, id)?.map(|stored| stored.view(now)))
        })
        .await
    }
}
