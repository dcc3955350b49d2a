//! The access port ([`fronta_desk::access::AccessStore`]) on SQLite: a tenant's named
//! tokens (hash, name, role, expiry, last use) in `desk_tenant_tokens`, the operator's
//! admin tokens in `admin_tokens`, and the audit log in `audit_log`.
//!
//! Audit entries are not written by the port's methods: every job of the writer inserts
//! the entry of the caller's scope in its own savepoint (`audit_insert`, called by
//! `crate::writer`), so an entry commits with its change or not at all. The rules (names,
//! expiry, the last admin token) are the plans of `fronta_desk::access`; this file reads
//! what they need and writes what they say.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_desk::access::{
    self, AccessStore, AdminToken, ApiToken, AuditFilter, AuditObject, NewToken, Principal, Role,
    TokenId,
};
use fronta_desk::store::DeskResult;
use fronta_desk::{DeskError, TenantId, token};
use fronta_engine::audit::AuditEntry;
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use crate::SqliteStore;
use crate::desk::{DeskSql, from_store, instant, key, many, sql_err, uuid_at};

const TOKEN_COLUMNS: &str =
    "k.id, k.tenant, k.name, k.role, k.created_at, k.expires_at, k.last_used_at";
const ADMIN_COLUMNS: &str = "id, name, created_at, last_used_at";
const AUDIT_COLUMNS: &str = "id, at, tenant, actor_kind, actor_id, actor_name, actor_role, client, \
    method, route, object_kind, object_id, summary";

/// Insert an audit entry (in the caller's transaction).
pub(crate) fn audit_insert(conn: &Connection, entry: &AuditEntry) -> rusqlite::Result<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO audit_log ({AUDIT_COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
    ))?
    .execute(params![
        key(&entry.id),
        entry.at.timestamp_millis(),
        entry.tenant.as_ref().map(key),
        entry.actor_kind,
        entry.actor_id.as_ref().map(key),
        entry.actor_name,
        entry.actor_role,
        entry.client,
        entry.method,
        entry.route,
        entry.object_kind,
        entry.object_id,
        entry.summary,
    ])?;
    Ok(())
}

fn role_at(row: &Row<'_>, idx: usize) -> rusqlite::Result<Role> {
    let text: String = row.get(idx)?;
    Role::parse(&text).map_err(|err| {
        rusqlite::Error::FromSqlConversionFailure(
            idx,
            rusqlite::types::Type::Text,
            Box::new(std::io::Error::other(err.to_string())),
        )
    })
}

fn opt_instant(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<DateTime<Utc>>> {
    Ok(row.get::<_, Option<i64>>(idx)?.map(instant))
}

fn token_of(row: &Row<'_>) -> rusqlite::Result<ApiToken> {
    Ok(ApiToken {
        id: TokenId(uuid_at(row, 0)?),
        tenant: TenantId(uuid_at(row, 1)?),
        name: row.get(2)?,
        role: role_at(row, 3)?,
        created_at: instant(row.get(4)?),
        expires_at: opt_instant(row, 5)?,
        last_used_at: opt_instant(row, 6)?,
    })
}

fn admin_of(row: &Row<'_>) -> rusqlite::Result<AdminToken> {
    Ok(AdminToken {
        id: TokenId(uuid_at(row, 0)?),
        name: row.get(1)?,
        created_at: instant(row.get(2)?),
        last_used_at: opt_instant(row, 3)?,
    })
}

fn opt_uuid(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Uuid>> {
    match row.get::<_, Option<Vec<u8>>>(idx)? {
        None => Ok(None),
        Some(_) => uuid_at(row, idx).map(Some),
    }
}

fn entry_of(row: &Row<'_>) -> rusqlite::Result<AuditEntry> {
    Ok(AuditEntry {
        id: uuid_at(row, 0)?,
        at: instant(row.get(1)?),
        tenant: opt_uuid(row, 2)?,
        actor_kind: row.get(3)?,
        actor_id: opt_uuid(row, 4)?,
        actor_name: row.get(5)?,
        actor_role: row.get(6)?,
        client: row.get(7)?,
        method: row.get(8)?,
        route: row.get(9)?,
        object_kind: row.get(10)?,
        object_id: row.get(11)?,
        summary: row.get(12)?,
    })
}

fn tenant_tokens(conn: &Connection, tenant: TenantId) -> DeskSql<Vec<ApiToken>> {
    many(
        conn,
        &format!(
            "SELECT {TOKEN_COLUMNS} FROM desk_tenant_tokens k WHERE k.tenant = ?1 \
             ORDER BY k.created_at, k.id"
        ),
        [key(&tenant.0)],
        token_of,
    )
}

fn name_used(conn: &Connection, sql: &str, values: impl rusqlite::Params) -> DeskSql<bool> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.exists(values))
        .map_err(sql_err)
}

#[async_trait]
impl AccessStore for SqliteStore {
    async fn principal_by_token(&self, raw: &str) -> DeskResult<Option<Principal>> {
        let hash = token::hash(raw);
        self.read_with(
            move |conn, now| {
                conn.prepare_cached(&format!(
                    "SELECT {TOKEN_COLUMNS}, t.id, t.name, t.created_at FROM desk_tenant_tokens k \
                     JOIN desk_tenants t ON t.id = k.tenant \
                     WHERE k.hash = ?1 AND (k.expires_at IS NULL OR k.expires_at > ?2)"
                ))
                .and_then(|mut stmt| {
                    stmt.query_row(params![hash, now], |row| {
                        let token = token_of(row)?;
                        let tenant = fronta_desk::Tenant {
                            id: TenantId(uuid_at(row, 7)?),
                            name: row.get(8)?,
                            created_at: instant(row.get(9)?),
                        };
                        Ok(Principal { tenant, token })
                    })
                    .optional()
                })
                .map_err(sql_err)
            },
            from_store,
        )
        .await
    }

    async fn token_create(
        &self,
        tenant: TenantId,
        new: NewToken,
    ) -> DeskResult<(ApiToken, String)> {
        self.desk_write(move |conn, now| {
            let (row, raw) = access::plan_token(tenant, new, instant(now))?;
            conn.prepare_cached("SELECT 1 FROM desk_tenants WHERE id = ?1")
                .and_then(|mut stmt| stmt.exists([key(&tenant.0)]))
                .map_err(sql_err)?
                .then_some(())
                .ok_or(DeskError::NotFound("tenant"))?;
            if name_used(
                conn,
                "SELECT 1 FROM desk_tenant_tokens WHERE tenant = ?1 AND name = ?2",
                params![key(&tenant.0), row.name],
            )? {
                return Err(access::name_taken(&row.name));
            }
            conn.prepare_cached(
                "INSERT INTO desk_tenant_tokens (hash, tenant, created_at, id, name, role, expires_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    token::hash(&raw),
                    key(&tenant.0),
                    now,
                    key(&row.id.0),
                    row.name,
                    row.role.as_str(),
                    row.expires_at.map(|at| at.timestamp_millis()),
                ])
            })
            .map_err(sql_err)?;
            fronta_engine::audit::created(&row.id);
            Ok((row, raw))
        })
        .await
    }

    async fn token_list(&self, tenant: TenantId) -> DeskResult<Vec<ApiToken>> {
        self.desk_read(move |conn| tenant_tokens(conn, tenant))
            .await
    }

    async fn token_get(&self, tenant: TenantId, id: TokenId) -> DeskResult<ApiToken> {
        self.desk_read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {TOKEN_COLUMNS} FROM desk_tenant_tokens k WHERE k.tenant = ?1 AND k.id = ?2"
            ))
            .and_then(|mut stmt| {
                stmt.query_row([key(&tenant.0), key(&id.0)], token_of)
                    .optional()
            })
            .map_err(sql_err)?
            .ok_or(DeskError::NotFound("token"))
        })
        .await
    }

    async fn token_revoke(&self, tenant: TenantId, id: TokenId) -> DeskResult<ApiToken> {
        self.desk_write(move |conn, now| {
            let tokens = tenant_tokens(conn, tenant)?;
            access::plan_revoke(&tokens, id, instant(now))?;
            conn.prepare_cached("DELETE FROM desk_tenant_tokens WHERE tenant = ?1 AND id = ?2")
                .and_then(|mut stmt| stmt.execute([key(&tenant.0), key(&id.0)]))
                .map_err(sql_err)?;
            tokens
                .into_iter()
                .find(|token| token.id == id)
                .ok_or(DeskError::NotFound("token"))
        })
        .await
    }

    async fn token_touch(&self, id: TokenId, at: DateTime<Utc>) -> DeskResult<()> {
        self.desk_write(move |conn, _| {
            for table in ["desk_tenant_tokens", "admin_tokens"] {
                conn.prepare_cached(&format!(
                    "UPDATE {table} SET last_used_at = ?2 WHERE id = ?1"
                ))
                .and_then(|mut stmt| stmt.execute(params![key(&id.0), at.timestamp_millis()]))
                .map_err(sql_err)?;
            }
            Ok(())
        })
        .await
    }

    async fn admin_token_create(&self, name: &str) -> DeskResult<(AdminToken, String)> {
        let name = name.to_owned();
        self.desk_write(move |conn, now| {
            let (row, raw) = access::plan_admin_token(&name, instant(now))?;
            if name_used(
                conn,
                "SELECT 1 FROM admin_tokens WHERE name = ?1",
                [&row.name],
            )? {
                return Err(access::name_taken(&row.name));
            }
            conn.prepare_cached(
                "INSERT INTO admin_tokens (id, name, hash, created_at) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![key(&row.id.0), row.name, token::hash(&raw), now])
            })
            .map_err(sql_err)?;
            fronta_engine::audit::created(&row.id);
            Ok((row, raw))
        })
        .await
    }

    async fn admin_token_list(&self) -> DeskResult<Vec<AdminToken>> {
        self.desk_read(|conn| {
            many(
                conn,
                &format!("SELECT {ADMIN_COLUMNS} FROM admin_tokens ORDER BY created_at, id"),
                [],
                admin_of,
            )
        })
        .await
    }

    async fn admin_token_revoke(&self, id_or_name: &str) -> DeskResult<AdminToken> {
        let wanted = id_or_name.to_owned();
        self.desk_write(move |conn, _| {
            let id = Uuid::parse_str(&wanted).ok();
            let found = conn
                .prepare_cached(&format!(
                    "SELECT {ADMIN_COLUMNS} FROM admin_tokens WHERE name = ?1 OR id = ?2"
                ))
                .and_then(|mut stmt| {
                    stmt.query_row(params![wanted, id.as_ref().map(key)], admin_of)
                        .optional()
                })
                .map_err(sql_err)?
                .ok_or(DeskError::NotFound("admin token"))?;
            conn.prepare_cached("DELETE FROM admin_tokens WHERE id = ?1")
                .and_then(|mut stmt| stmt.execute([key(&found.id.0)]))
                .map_err(sql_err)?;
            Ok(found)
        })
        .await
    }

    async fn admin_token_by_token(&self, raw: &str) -> DeskResult<Option<AdminToken>> {
        let hash = token::hash(raw);
        self.desk_read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {ADMIN_COLUMNS} FROM admin_tokens WHERE hash = ?1"
            ))
            .and_then(|mut stmt| stmt.query_row([hash], admin_of).optional())
            .map_err(sql_err)
        })
        .await
    }

    async fn audit_list(&self, filter: &AuditFilter) -> DeskResult<Vec<AuditEntry>> {
        let filter = filter.clone();
        self.desk_read(move |conn| {
            let mut sql = format!("SELECT {AUDIT_COLUMNS} FROM audit_log WHERE 1 = 1");
            let mut values: Vec<rusqlite::types::Value> = Vec::new();
            let mut push = |sql: &mut String, clause: &str, value: rusqlite::types::Value| {
                values.push(value);
                sql.push_str(&clause.replace('?', &format!("?{}", values.len())));
            };
            use rusqlite::types::Value as V;
            if let Some(tenant) = filter.tenant {
                push(
                    &mut sql,
                    " AND tenant = ?",
                    V::Blob(tenant.0.as_bytes().to_vec()),
                );
            }
            if let Some(from) = filter.from {
                push(
                    &mut sql,
                    " AND at >= ?",
                    V::Integer(from.timestamp_millis()),
                );
            }
            if let Some(to) = filter.to {
                push(&mut sql, " AND at < ?", V::Integer(to.timestamp_millis()));
            }
            if let Some(actor) = &filter.actor {
                match Uuid::parse_str(actor) {
                    Ok(id) => push(
                        &mut sql,
                        " AND actor_id = ?",
                        V::Blob(id.as_bytes().to_vec()),
                    ),
                    Err(_) => push(&mut sql, " AND actor_name = ?", V::Text(actor.clone())),
                }
            }
            match &filter.object {
                None => {}
                Some(AuditObject::Kind(kind)) => {
                    push(&mut sql, " AND object_kind = ?", V::Text(kind.clone()));
                }
                Some(AuditObject::Id(id)) => {
                    push(&mut sql, " AND object_id = ?", V::Text(id.clone()))
                }
                Some(AuditObject::KindId(kind, id)) => {
                    push(&mut sql, " AND object_kind = ?", V::Text(kind.clone()));
                    push(&mut sql, " AND object_id = ?", V::Text(id.clone()));
                }
            }
            if let Some((at, id)) = filter.before {
                push(&mut sql, " AND (at < ?", V::Integer(at.timestamp_millis()));
                push(&mut sql, " OR (at = ?", V::Integer(at.timestamp_millis()));
                push(&mut sql, " AND id < ?))", V::Blob(id.as_bytes().to_vec()));
            }
            push(
                &mut sql,
                " ORDER BY at DESC, id DESC LIMIT ?",
                V::Integer(i64::try_from(filter.limit).unwrap_or(i64::MAX)),
            );
            many(conn, &sql, rusqlite::params_from_iter(values), entry_of)
        })
        .await
    }

    async fn audit_purge(&self, before: DateTime<Utc>, limit: usize) -> DeskResult<u64> {
        self.desk_write(move |conn, _| {
            crate::desk::purge_batch(
                conn,
                "DELETE FROM audit_log WHERE id IN \
                 (SELECT id FROM audit_log WHERE at < ?1 ORDER BY at LIMIT ?2)",
                before,
                limit,
            )
        })
        .await
    }
}
