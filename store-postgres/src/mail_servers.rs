//! The mail servers port ([`MailServerStore`]) on Postgres, like SQLite's: one row per
//! (tenant, name) holding the configuration as `jsonb`; `updated_at` is the store's now.

use async_trait::async_trait;
use fronta_automation::mail::{MailServer, MailServerStore};
use fronta_automation::store::{StoreResult, deleted, names};
use fronta_desk::{DeskError, TenantId};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::PgStore;
use crate::desk::{Db, DeskSql, sql_err, tenant_exists};

fn server_of(row: &PgRow) -> DeskSql<MailServer> {
    let config: serde_json::Value = row.try_get("config").map_err(sql_err)?;
    serde_json::from_value(config)
        .map_err(|err| DeskError::Internal(format!("a stored mail server cannot be read: {err}")))
}

#[async_trait]
impl MailServerStore for PgStore {
    async fn mail_server_put(
        &self,
        tenant: TenantId,
        server: MailServer,
    ) -> StoreResult<MailServer> {
        let config = serde_json::to_value(&server).map_err(|err| {
            DeskError::Internal(format!("a mail server cannot be written: {err}"))
        })?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        tenant_exists(&mut db, tenant).await?;
        let now = db.now().await?;
        sqlx::query(
            "INSERT INTO mail_servers (tenant, name, config, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant, name) DO UPDATE SET config = excluded.config, \
             updated_at = excluded.updated_at",
        )
        .bind(tenant.0)
        .bind(&server.name)
        .bind(config)
        .bind(now)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
        self.desk_commit(tx).await?;
        Ok(server)
    }

    async fn mail_server_get(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> StoreResult<Option<MailServer>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let row = sqlx::query("SELECT config FROM mail_servers WHERE tenant = $1 AND name = $2")
            .bind(tenant.0)
            .bind(name)
            .fetch_optional(db.c())
            .await
            .map_err(sql_err)?;
        row.as_ref().map(server_of).transpose()
    }

    async fn mail_server_list(&self, tenant: TenantId) -> StoreResult<Vec<MailServer>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = sqlx::query("SELECT config FROM mail_servers WHERE tenant = $1 ORDER BY name")
            .bind(tenant.0)
            .fetch_all(db.c())
            .await
            .map_err(sql_err)?;
        rows.iter().map(server_of).collect()
    }

    async fn mail_server_delete(&self, tenant: TenantId, name: &str) -> StoreResult<()> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let rows = sqlx::query("DELETE FROM mail_servers WHERE tenant = $1 AND name = $2")
            .bind(tenant.0)
            .bind(name)
            .execute(db.c())
            .await
            .map_err(sql_err)?
            .rows_affected();
        deleted(rows, names::MAIL_SERVER)?;
        self.desk_commit(tx).await
    }
}
