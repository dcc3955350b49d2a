//! The secrets port ([`SecretStore`]) on Postgres, like SQLite's: one row per (tenant,
//! name) holding the sealed value, its nonce and its key version. The store sees only
//! ciphertext; `updated_at` is the store's now (the database clock unless a test injects
//! one).

use async_trait::async_trait;
use fronta_automation::secrets::{SealedSecret, SecretInfo, SecretStore, StoredSecret};
use fronta_automation::store::{StoreResult, deleted, names};
use fronta_desk::{DeskError, TenantId};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::PgStore;
use crate::desk::{Db, DeskSql, sql_err, tenant_exists};

/// A row's `key_version`.
fn key_version_of(row: &PgRow) -> DeskSql<u32> {
    let version: i32 = row.try_get("key_version").map_err(sql_err)?;
    u32::try_from(version)
        .map_err(|_| DeskError::Internal(format!("key version {version} out of range")))
}

fn info_of(row: &PgRow) -> DeskSql<SecretInfo> {
    Ok(SecretInfo {
        name: row.try_get("name").map_err(sql_err)?,
        key_version: key_version_of(row)?,
        updated_at: row.try_get("updated_at").map_err(sql_err)?,
    })
}

/// A sealed value from a row's `key_version`, `nonce` and `ciphertext`.
fn sealed_of(row: &PgRow) -> DeskSql<SealedSecret> {
    Ok(SealedSecret {
        key_version: key_version_of(row)?,
        nonce: row.try_get("nonce").map_err(sql_err)?,
        ciphertext: row.try_get("ciphertext").map_err(sql_err)?,
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
            .map(|row| Ok((row.try_get("name").map_err(sql_err)?, sealed_of(row)?)))
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

    async fn secrets_page(
        &self,
        after: Option<(TenantId, String)>,
        limit: u32,
    ) -> StoreResult<Vec<StoredSecret>> {
        let (tenant, name) = after.unwrap_or((TenantId(uuid::Uuid::nil()), String::new()));
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = sqlx::query(
            "SELECT tenant, name, key_version, nonce, ciphertext FROM secrets \
             WHERE (tenant, name) > ($1, $2) ORDER BY tenant, name LIMIT $3",
        )
        .bind(tenant.0)
        .bind(name)
        .bind(i64::from(limit))
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter()
            .map(|row| {
                Ok(StoredSecret {
                    tenant: TenantId(row.try_get("tenant").map_err(sql_err)?),
                    name: row.try_get("name").map_err(sql_err)?,
                    sealed: sealed_of(row)?,
                })
            })
            .collect()
    }

    async fn secret_reseal(
        &self,
        tenant: TenantId,
        name: &str,
        from: &SealedSecret,
        to: SealedSecret,
    ) -> StoreResult<bool> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let rows = sqlx::query(
            "UPDATE secrets SET key_version = $3, nonce = $4, ciphertext = $5 \
             WHERE tenant = $1 AND name = $2 AND key_version = $6 AND nonce = $7 \
             AND ciphertext = $8",
        )
        .bind(tenant.0)
        .bind(name)
        .bind(version_column(to.key_version)?)
        .bind(to.nonce)
        .bind(to.ciphertext)
        .bind(version_column(from.key_version)?)
        .bind(&from.nonce)
        .bind(&from.ciphertext)
        .execute(db.c())
        .await
        .map_err(sql_err)?
        .rows_affected();
        self.desk_commit(tx).await?;
        Ok(rows == 1)
    }
}
