//! The secrets port ([`SecretStore`]) on SQLite: one row per (tenant, name) holding the
//! sealed value, its nonce and its key version. The store sees only ciphertext; sealing
//! and opening happen in the caller's cipher. Writes go through the writer thread like
//! every other write; `updated_at` is the store clock's now.

use async_trait::async_trait;
use fronta_automation::secrets::{SealedSecret, SecretInfo, SecretStore, StoredSecret};
use fronta_automation::store::{StoreResult, deleted, names};
use fronta_desk::TenantId;
use rusqlite::{Row, params};

use crate::SqliteStore;
use crate::desk::{instant, key, many, sql_err, tenant_exists, uuid_at};

fn info_of(row: &Row<'_>) -> rusqlite::Result<SecretInfo> {
    Ok(SecretInfo {
        name: row.get(0)?,
        key_version: row.get(1)?,
        updated_at: instant(row.get(2)?),
    })
}

#[async_trait]
impl SecretStore for SqliteStore {
    async fn secret_put(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: SealedSecret,
    ) -> StoreResult<SecretInfo> {
        let name = name.to_owned();
        self.desk_write(move |conn, now| {
            tenant_exists(conn, tenant)?;
            conn.prepare_cached(
                "INSERT INTO secrets (tenant, name, key_version, nonce, ciphertext, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT (tenant, name) DO UPDATE SET key_version = excluded.key_version, \
                 nonce = excluded.nonce, ciphertext = excluded.ciphertext, \
                 updated_at = excluded.updated_at \
                 RETURNING name, key_version, updated_at",
            )
            .and_then(|mut stmt| {
                stmt.query_row(
                    params![
                        key(&tenant.0),
                        name,
                        sealed.key_version,
                        sealed.nonce,
                        sealed.ciphertext,
                        now
                    ],
                    info_of,
                )
            })
            .map_err(sql_err)
        })
        .await
    }

    async fn secret_list(&self, tenant: TenantId) -> StoreResult<Vec<SecretInfo>> {
        self.desk_read(move |conn| {
            many(
                conn,
                "SELECT name, key_version, updated_at FROM secrets WHERE tenant = ?1 ORDER BY name",
                [key(&tenant.0)],
                info_of,
            )
        })
        .await
    }

    async fn secrets_get(
        &self,
        tenant: TenantId,
        names: &[String],
    ) -> StoreResult<Vec<(String, SealedSecret)>> {
        let names = names.to_vec();
        self.desk_read(move |conn| {
            let mut found = Vec::new();
            for name in names {
                let row = conn
                    .prepare_cached(
                        "SELECT key_version, nonce, ciphertext FROM secrets \
                         WHERE tenant = ?1 AND name = ?2",
                    )
                    .and_then(|mut stmt| {
                        rusqlite::OptionalExtension::optional(stmt.query_row(
                            params![key(&tenant.0), name],
                            |row| {
                                Ok(SealedSecret {
                                    key_version: row.get(0)?,
                                    nonce: row.get(1)?,
                                    ciphertext: row.get(2)?,
                                })
                            },
                        ))
                    })
                    .map_err(sql_err)?;
                if let Some(sealed) = row {
                    found.push((name, sealed));
                }
            }
            found.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(found)
        })
        .await
    }

    async fn secret_delete(&self, tenant: TenantId, name: &str) -> StoreResult<()> {
        let name = name.to_owned();
        self.desk_write(move |conn, _| {
            let rows = conn
                .prepare_cached("DELETE FROM secrets WHERE tenant = ?1 AND name = ?2")
                .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), name]))
                .map_err(sql_err)?;
            deleted(rows as u64, names::SECRET)
        })
        .await
    }

    async fn secrets_page(
        &self,
        after: Option<(TenantId, String)>,
        limit: u32,
    ) -> StoreResult<Vec<StoredSecret>> {
        let (tenant, name) = after.unwrap_or((TenantId(uuid::Uuid::nil()), String::new()));
        self.desk_read(move |conn| {
            many(
                conn,
                "SELECT tenant, name, key_version, nonce, ciphertext FROM secrets \
                 WHERE (tenant, name) > (?1, ?2) ORDER BY tenant, name LIMIT ?3",
                params![key(&tenant.0), name, limit],
                |row| {
                    Ok(StoredSecret {
                        tenant: TenantId(uuid_at(row, 0)?),
                        name: row.get(1)?,
                        sealed: SealedSecret {
                            key_version: row.get(2)?,
                            nonce: row.get(3)?,
                            ciphertext: row.get(4)?,
                        },
                    })
                },
            )
        })
        .await
    }

    async fn secret_reseal(
        &self,
        tenant: TenantId,
        name: &str,
        from: &SealedSecret,
        to: SealedSecret,
    ) -> StoreResult<bool> {
        let name = name.to_owned();
        let from = from.clone();
        self.desk_write(move |conn, _| {
            let rows = conn
                .prepare_cached(
                    "UPDATE secrets SET key_version = ?3, nonce = ?4, ciphertext = ?5 \
                     WHERE tenant = ?1 AND name = ?2 AND key_version = ?6 AND nonce = ?7 \
                     AND ciphertext = ?8",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        key(&tenant.0),
                        name,
                        to.key_version,
                        to.nonce,
                        to.ciphertext,
                        from.key_version,
                        from.nonce,
                        from.ciphertext,
                    ])
                })
                .map_err(sql_err)?;
            Ok(rows == 1)
        })
        .await
    }
}
