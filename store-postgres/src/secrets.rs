//! The secrets port ([`SecretStore`]) on Postgres, like SQLite's: one row per (tenant,
//! name) holding the sealed value, its nonce and its key version. The store sees only
//! ciphertext; `updated_at` is the store's now (the database clock unless a test injects
//! one).

use async_trait::async_trait;
use fronta_automation::secrets::{SealedSecret, SecretInfo, SecretStore};
use fronta_automation::store::{StoreResult, deleted, names};
use fronta_desk::{DeskError, TenantId};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::PgStore;
use crate::desk::{Db, DeskSql, sql_err, tenant_exists};

fn info_of(row: &PgRow) -> DeskSql<SecretInfo> {
    let version: i32 = row.try_get("key_version").map_err(sql_err)?;
    Ok(SecretInfo {
        name: row.try_get("name").map_err(sql_err)?,
        key_version: u32::try_from(version)
            .map_err(|_| DeskError::Internal(format!("key version {version} out of range")))?,
        updated_at: row.try_get("updated_at").map_err(sql_err)?,
    })
}

fn version_column(version: u32) -> DeskSql<i32> {
    i32::try_from(version)
        .map_err(|_| DeskError::Invalid(format!("key version {version} is too large")))
}

#[async_trait]
impl SecretStore for PgStore {
    async fn secret_put(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: SealedSecret,
    ) -> StoreResult<SecretInfo> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        tenant_exists(&mut db, tenant).await?;
        let now = db.now().await?;
        let row = sqlx::query(
            "INSERT INTO secrets (tenant, name, key_version, nonce, ciphertext, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (tenant, name) DO UPDATE SET key_version = excluded.key_version, \
             nonce = excluded.nonce, ciphertext = excluded.ciphertext, \
             updated_at = excluded.updated_at \
             RETURNING name, key_version, updated_at",
        )
        .bind(tenant.0)
        .bind(name)
        .bind(version_column(sealed.key_version)?)
        .bind(sealed.nonce)
        .bind(sealed.ciphertext)
        .bind(now)
        .fetch_one(db.c())
        .await
        .map_err(sql_err)?;
        let info = info_of(&row)?;
        self.desk_commit(tx).await?;
        Ok(info)
    }

    async fn secret_list(&self, tenant: TenantId) -> StoreResult<Vec<SecretInfo>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = sqlx::query(
            "SELECT name, key_version, updated_at FROM secrets WHERE tenant = $1 ORDER BY name",
        )
        .bind(tenant.0)
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter().map(info_of).collect()
    }

    async fn secrets_get(
        &self,
        tenant: TenantId,
        names: &[String],
    ) -> StoreResult<Vec<(String, SealedSecret)>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = sqlx::query(
            "SELECT name, key_version, nonce, ciphertext FROM secrets \
             WHERE tenant = $1 AND name = ANY($2) ORDER BY name",
        )
        .bind(tenant.0)
        .bind(names)
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter()
            .map(|row| {
                let version: i32 = row.try_get("key_version").map_err(sql_err)?;
                Ok((
                    row.try_get("name").map_err(sql_err)?,
                    SealedSecret {
                        key_version: u32::try_from(version).map_err(|_| {
                            DeskError::Internal(format!("key version {version} out of range"))
                        })?,
                        nonce: row.try_get("nonce").map_err(sql_err)?,
                        ciphertext: row.try_get("ciphertext").map_err(sql_err)?,
                    },
                ))
            })
            .collect()
    }

    async fn secret_delete(&self, tenant: TenantId, name: &str) -> StoreResult<()> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let rows = sqlx::query("DELETE FROM secrets WHERE tenant = $1 AND name = $2")
            .bind(tenant.0)
            .bind(name)
            .execute(db.c())
            .await
            .map_err(sql_err)?
            .rows_affected();
        deleted(rows, names::SECRET)?;
        self.desk_commit(tx).await
    }
}
