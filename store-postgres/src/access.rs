//! The access port ([`fronta_desk::access::AccessStore`]) on Postgres: a tenant's named
//! tokens in `desk_tenant_tokens`, the operator's admin tokens in `admin_tokens`, the audit
//! log in `audit_log` — the same tables and plans as SQLite's `access`.
//!
//! Audit entries are not written by the port's methods: every write transaction commits
//! through `PgStore::commit_tx`, which inserts the entry of the caller's scope
//! (`fronta_engine::audit`) just before `COMMIT` (`audit_insert`). A revocation locks
//! the tenant's tokens (`FOR UPDATE`), so two revocations at once cannot both pass the
//! last-admin check.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_desk::access::{
    self, AccessStore, AdminToken, ApiToken, AuditFilter, AuditObject, NewToken, Principal, Role,
    TokenId,
};
use fronta_desk::store::DeskResult;
use fronta_desk::{DeskError, Tenant, TenantId, token};
use fronta_engine::audit::AuditEntry;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, QueryBuilder, Row};
use uuid::Uuid;

use crate::PgStore;
use crate::desk::{Db, sql_err, unique_as};

const TOKEN_COLUMNS: &str =
    "k.id, k.tenant, k.name, k.role, k.created_at, k.expires_at, k.last_used_at";
const ADMIN_COLUMNS: &str = "id, name, created_at, last_used_at";
const AUDIT_COLUMNS: &str = "id, at, tenant, actor_kind, actor_id, actor_name, actor_role, client, \
    method, route, object_kind, object_id, summary";

/// Insert an audit entry (in the caller's transaction).
pub(crate) async fn audit_insert(
    conn: &mut PgConnection,
    entry: &AuditEntry,
) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO audit_log ({AUDIT_COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
    )))
    .bind(entry.id)
    .bind(entry.at)
    .bind(entry.tenant)
    .bind(&entry.actor_kind)
    .bind(entry.actor_id)
    .bind(&entry.actor_name)
    .bind(&entry.actor_role)
    .bind(&entry.client)
    .bind(&entry.method)
    .bind(&entry.route)
    .bind(&entry.object_kind)
    .bind(&entry.object_id)
    .bind(&entry.summary)
    .execute(conn)
    .await
    .map(|_| ())
}

fn decode(err: sqlx::Error) -> DeskError {
    DeskError::Internal(format!("cannot read a token or audit row: {err}"))
}

fn token_of(row: &PgRow) -> DeskResult<ApiToken> {
    let role: String = row.try_get(3).map_err(decode)?;
    Ok(ApiToken {
        id: TokenId(row.try_get(0).map_err(decode)?),
        tenant: TenantId(row.try_get(1).map_err(decode)?),
        name: row.try_get(2).map_err(decode)?,
        role: Role::parse(&role)?,
        created_at: row.try_get(4).map_err(decode)?,
        expires_at: row.try_get(5).map_err(decode)?,
        last_used_at: row.try_get(6).map_err(decode)?,
    })
}

fn admin_of(row: &PgRow) -> DeskResult<AdminToken> {
    Ok(AdminToken {
        id: TokenId(row.try_get(0).map_err(decode)?),
        name: row.try_get(1).map_err(decode)?,
        created_at: row.try_get(2).map_err(decode)?,
        last_used_at: row.try_get(3).map_err(decode)?,
    })
}

fn entry_of(row: &PgRow) -> DeskResult<AuditEntry> {
    let read = || -> Result<AuditEntry, sqlx::Error> {
        Ok(AuditEntry {
            id: row.try_get(0)?,
            at: row.try_get(1)?,
            tenant: row.try_get(2)?,
            actor_kind: row.try_get(3)?,
            actor_id: row.try_get(4)?,
            actor_name: row.try_get(5)?,
            actor_role: row.try_get(6)?,
            client: row.try_get(7)?,
            method: row.try_get(8)?,
            route: row.try_get(9)?,
            object_kind: row.try_get(10)?,
            object_id: row.try_get(11)?,
            summary: row.try_get(12)?,
        })
    };
    read().map_err(decode)
}

async fn tenant_tokens(db: &mut Db<'_>, tenant: TenantId, lock: bool) -> DeskResult<Vec<ApiToken>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {TOKEN_COLUMNS} FROM desk_tenant_tokens k WHERE k.tenant = $1 \
         ORDER BY k.created_at, k.id{}",
        if lock { " FOR UPDATE" } else { "" }
    )))
    .bind(tenant.0)
    .fetch_all(db.c())
    .await
    .map_err(sql_err)?;
    rows.iter().map(token_of).collect()
}

#[async_trait]
impl AccessStore for PgStore {
    async fn principal_by_token(&self, raw: &str) -> DeskResult<Option<Principal>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS}, t.id, t.name, t.created_at FROM desk_tenant_tokens k \
             JOIN desk_tenants t ON t.id = k.tenant \
             WHERE k.hash = $1 \
               AND (k.expires_at IS NULL OR k.expires_at > coalesce($2::timestamptz, now()))"
        )))
        .bind(token::hash(raw))
        .bind(self.now())
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        let Some(row) = row else { return Ok(None) };
        let token = token_of(&row)?;
        let tenant = Tenant {
            id: TenantId(row.try_get(7).map_err(decode)?),
            name: row.try_get(8).map_err(decode)?,
            created_at: row.try_get(9).map_err(decode)?,
        };
        Ok(Some(Principal { tenant, token }))
    }

    async fn token_create(
        &self,
        tenant: TenantId,
        new: NewToken,
    ) -> DeskResult<(ApiToken, String)> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let now = db.now().await?;
        let (row, raw) = access::plan_token(tenant, new, now)?;
        let name = row.name.clone();
        let inserted = sqlx::query(
            "INSERT INTO desk_tenant_tokens (hash, tenant, created_at, id, name, role, expires_at) \
             SELECT $1, id, $3, $4, $5, $6, $7 FROM desk_tenants WHERE id = $2",
        )
        .bind(token::hash(&raw))
        .bind(tenant.0)
        .bind(now)
        .bind(row.id.0)
        .bind(&row.name)
        .bind(row.role.as_str())
        .bind(row.expires_at)
        .execute(db.c())
        .await
        .map_err(unique_as(|| access::taken_message(&name)))?;
        if inserted.rows_affected() == 0 {
            return Err(DeskError::NotFound("tenant"));
        }
        fronta_engine::audit::created(&row.id);
        self.desk_commit(tx).await?;
        Ok((row, raw))
    }

    async fn token_list(&self, tenant: TenantId) -> DeskResult<Vec<ApiToken>> {
        let mut conn = self.desk_connection().await?;
        tenant_tokens(&mut Db::new(&mut conn, self), tenant, false).await
    }

    async fn token_get(&self, tenant: TenantId, id: TokenId) -> DeskResult<ApiToken> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS} FROM desk_tenant_tokens k WHERE k.tenant = $1 AND k.id = $2"
        )))
        .bind(tenant.0)
        .bind(id.0)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        row.as_ref()
            .map(token_of)
            .transpose()?
            .ok_or(DeskError::NotFound("token"))
    }

    async fn token_revoke(&self, tenant: TenantId, id: TokenId) -> DeskResult<ApiToken> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let tokens = tenant_tokens(&mut db, tenant, true).await?;
        let now = db.now().await?;
        access::plan_revoke(&tokens, id, now)?;
        sqlx::query("DELETE FROM desk_tenant_tokens WHERE tenant = $1 AND id = $2")
            .bind(tenant.0)
            .bind(id.0)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        self.desk_commit(tx).await?;
        tokens
            .into_iter()
            .find(|token| token.id == id)
            .ok_or(DeskError::NotFound("token"))
    }

    async fn token_touch(&self, id: TokenId, at: DateTime<Utc>) -> DeskResult<()> {
        let mut conn = self.desk_connection().await?;
        // One statement for both tables: ids are unique across them.
        sqlx::query(
            "WITH tenant AS (UPDATE desk_tenant_tokens SET last_used_at = $2 WHERE id = $1) \
             UPDATE admin_tokens SET last_used_at = $2 WHERE id = $1",
        )
        .bind(id.0)
        .bind(at)
        .execute(Db::new(&mut conn, self).c())
        .await
        .map_err(sql_err)?;
        Ok(())
    }

    async fn admin_token_create(&self, name: &str) -> DeskResult<(AdminToken, String)> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let now = db.now().await?;
        let (row, raw) = access::plan_admin_token(name, now)?;
        let taken = row.name.clone();
        sqlx::query(
            "INSERT INTO admin_tokens (id, name, hash, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(row.id.0)
        .bind(&row.name)
        .bind(token::hash(&raw))
        .bind(now)
        .execute(db.c())
        .await
        .map_err(unique_as(|| access::taken_message(&taken)))?;
        fronta_engine::audit::created(&row.id);
        self.desk_commit(tx).await?;
        Ok((row, raw))
    }

    async fn admin_token_list(&self) -> DeskResult<Vec<AdminToken>> {
        let mut conn = self.desk_connection().await?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {ADMIN_COLUMNS} FROM admin_tokens ORDER BY created_at, id"
        )))
        .fetch_all(Db::new(&mut conn, self).c())
        .await
        .map_err(sql_err)?;
        rows.iter().map(admin_of).collect()
    }

    async fn admin_token_revoke(&self, id_or_name: &str) -> DeskResult<AdminToken> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM admin_tokens WHERE name = $1 OR id = $2 RETURNING {ADMIN_COLUMNS}"
        )))
        .bind(id_or_name)
        .bind(Uuid::parse_str(id_or_name).ok())
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        let found = row
            .as_ref()
            .map(admin_of)
            .transpose()?
            .ok_or(DeskError::NotFound("admin token"))?;
        self.desk_commit(tx).await?;
        Ok(found)
    }

    async fn admin_token_by_token(&self, raw: &str) -> DeskResult<Option<AdminToken>> {
        let mut conn = self.desk_connection().await?;
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {ADMIN_COLUMNS} FROM admin_tokens WHERE hash = $1"
        )))
        .bind(token::hash(raw))
        .fetch_optional(Db::new(&mut conn, self).c())
        .await
        .map_err(sql_err)?;
        row.as_ref().map(admin_of).transpose()
    }

    async fn audit_list(&self, filter: &AuditFilter) -> DeskResult<Vec<AuditEntry>> {
        let mut query =
            QueryBuilder::new(format!("SELECT {AUDIT_COLUMNS} FROM audit_log WHERE true"));
        if let Some(tenant) = filter.tenant {
            query.push(" AND tenant = ").push_bind(tenant.0);
        }
        if let Some(from) = filter.from {
            query.push(" AND at >= ").push_bind(from);
        }
        if let Some(to) = filter.to {
            query.push(" AND at < ").push_bind(to);
        }
        if let Some(actor) = &filter.actor {
            match Uuid::parse_str(actor) {
                Ok(id) => query.push(" AND actor_id = ").push_bind(id),
                Err(_) => query.push(" AND actor_name = ").push_bind(actor.clone()),
            };
        }
        match &filter.object {
            None => {}
            Some(AuditObject::Kind(kind)) => {
                query.push(" AND object_kind = ").push_bind(kind.clone());
            }
            Some(AuditObject::Id(id)) => {
                query.push(" AND object_id = ").push_bind(id.clone());
            }
            Some(AuditObject::KindId(kind, id)) => {
                query.push(" AND object_kind = ").push_bind(kind.clone());
                query.push(" AND object_id = ").push_bind(id.clone());
            }
        }
        if let Some((at, id)) = filter.before {
            query
                .push(" AND (at, id) < (")
                .push_bind(at)
                .push(", ")
                .push_bind(id)
                .push(")");
        }
        query
            .push(" ORDER BY at DESC, id DESC LIMIT ")
            .push_bind(i64::try_from(filter.limit).unwrap_or(i64::MAX));
        let mut conn = self.desk_connection().await?;
        let rows = query
            .build()
            .fetch_all(Db::new(&mut conn, self).c())
            .await
            .map_err(sql_err)?;
        rows.iter().map(entry_of).collect()
    }

    async fn audit_purge(&self, before: DateTime<Utc>, limit: usize) -> DeskResult<u64> {
        self.purge_batch(
            "DELETE FROM audit_log WHERE id IN \
             (SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)",
            before,
            limit,
        )
        .await
    }
}
