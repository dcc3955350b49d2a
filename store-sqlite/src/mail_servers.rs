//! The mail servers port ([`MailServerStore`]) on SQLite: one row per (tenant, name)
//! holding the configuration as JSON. Writes go through the writer thread like every
//! other write; `updated_at` is the store clock's now.

use async_trait::async_trait;
use fronta_automation::mail::{MailServer, MailServerStore};
use fronta_automation::store::{StoreResult, deleted, names};
use fronta_desk::{DeskError, TenantId};
use rusqlite::{Row, params};

use crate::SqliteStore;
use crate::desk::{key, many, sql_err, tenant_exists};

fn server_of(row: &Row<'_>) -> rusqlite::Result<MailServer> {
    let config: String = row.get(0)?;
    serde_json::from_str(&config).map_err(|err| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(err))
    })
}

fn config_of(server: &MailServer) -> StoreResult<String> {
    serde_json::to_string(server)
        .map_err(|err| DeskError::Internal(format!("a mail server cannot be written: {err}")))
}

#[async_trait]
impl MailServerStore for SqliteStore {
    async fn mail_server_put(
        &self,
        tenant: TenantId,
        server: MailServer,
    ) -> StoreResult<MailServer> {
        let config = config_of(&server)?;
        self.desk_write(move |conn, now| {
            tenant_exists(conn, tenant)?;
            conn.prepare_cached(
                "INSERT INTO mail_servers (tenant, name, config, updated_at) \
                 VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (tenant, name) DO UPDATE SET config = excluded.config, \
                 updated_at = excluded.updated_at",
            )
            .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), server.name, config, now]))
            .map_err(sql_err)?;
            Ok(server)
        })
        .await
    }

    async fn mail_server_get(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> StoreResult<Option<MailServer>> {
        let name = name.to_owned();
        self.desk_read(move |conn| {
            let found = many(
                conn,
                "SELECT config FROM mail_servers WHERE tenant = ?1 AND name = ?2",
                params![key(&tenant.0), name],
                server_of,
            )?;
            Ok(found.into_iter().next())
        })
        .await
    }

    async fn mail_server_list(&self, tenant: TenantId) -> StoreResult<Vec<MailServer>> {
        self.desk_read(move |conn| {
            many(
                conn,
                "SELECT config FROM mail_servers WHERE tenant = ?1 ORDER BY name",
                [key(&tenant.0)],
                server_of,
            )
        })
        .await
    }

    async fn mail_server_delete(&self, tenant: TenantId, name: &str) -> StoreResult<()> {
        let name = name.to_owned();
        self.desk_write(move |conn, _| {
            let rows = conn
                .prepare_cached("DELETE FROM mail_servers WHERE tenant = ?1 AND name = ?2")
                .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), name]))
                .map_err(sql_err)?;
            deleted(rows as u64, names::MAIL_SERVER)
        })
        .await
    }
}
