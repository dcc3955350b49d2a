//! The cursors of poll automations ([`PollCursors`]) on SQLite: a row per automation
//! (migration 10, `poll_cursors`). The compare-and-set is one job on the writer thread,
//! so it is atomic against every other write of every process on the file; the decision
//! is the shared pure [`poll::decide`].

use async_trait::async_trait;
use fronta_automation::poll::{self, Advance, PollCursors, StoredCursor};
use fronta_automation::store::{AutomationId, StoreResult};
use fronta_desk::{DeskError, TenantId};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::SqliteStore;
use crate::automations::stored_token;
use crate::desk::{DeskSql, instant, key, sql_err};

fn read(conn: &Connection, automation: AutomationId) -> DeskSql<Option<StoredCursor>> {
    let row = conn
        .prepare_cached("SELECT value, run, updated_at FROM poll_cursors WHERE automation = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([key(&automation.0)], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            })
            .optional()
        })
        .map_err(sql_err)?;
    row.map(|(value, run, updated_at)| {
        let value: Value = serde_json::from_str(&value)
            .map_err(|err| DeskError::Internal(format!("a stored poll cursor: {err}")))?;
        Ok(StoredCursor {
            value,
            run,
            updated_at: instant(updated_at),
        })
    })
    .transpose()
}

#[async_trait]
impl PollCursors for SqliteStore {
    async fn poll_cursor_get(
        &self,
        tenant: TenantId,
        automation: AutomationId,
    ) -> StoreResult<Option<StoredCursor>> {
        self.desk_read(move |conn| {
            stored_token(conn, tenant, automation)?;
            read(conn, automation)
        })
        .await
    }

    async fn poll_cursor_advance(
        &self,
        tenant: TenantId,
        automation: AutomationId,
        from: Option<&Value>,
        to: &Value,
        run: &str,
    ) -> StoreResult<Advance> {
        let (from, to, run) = (from.cloned(), to.clone(), run.to_owned());
        self.desk_write(move |conn, now| {
            stored_token(conn, tenant, automation)?;
            let current = read(conn, automation)?.map(|cursor| cursor.value);
            let answer = poll::decide(current.as_ref(), from.as_ref(), &to);
            if answer == Advance::Advanced {
                conn.prepare_cached(
                    "INSERT INTO poll_cursors (automation, tenant, value, run, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (automation) DO UPDATE SET \
                     value = excluded.value, run = excluded.run, updated_at = excluded.updated_at",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        key(&automation.0),
                        key(&tenant.0),
                        to.to_string(),
                        run,
                        now
                    ])
                })
                .map_err(sql_err)?;
            }
            Ok(answer)
        })
        .await
    }
}
