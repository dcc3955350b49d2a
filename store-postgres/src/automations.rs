//! The automation port ([`AutomationStore`]) on Postgres: saved automations (their JSON
//! definition plus the columns the lookups need), their webhook tokens, and the loop
//! guard's per-(automation, ticket) counter — the same behaviour as the SQLite store
//! (`fronta_store_sqlite::automations`), pinned by the same conformance suite, whose
//! module docs list the decisions the port leaves open.
//!
//! Every write is one transaction. A name check and its write race other writes of the
//! same name only in the unique index (`Conflict`, with the same message as the check).
//! The guard's prune, count and insert run under a transaction-level advisory lock on
//! the (automation, ticket) pair ([`crate::schema::GUARD_LOCK_CLASS`]), so concurrent
//! admissions of one pair are counted one after another and admit exactly `max`; other
//! pairs never wait for it. Every statement but the webhook token lookup is scoped by the
//! caller's tenant, so another tenant's id finds nothing, exactly like an unknown one.
//!
//! Left out, as on SQLite: validating the step tree (the caller runs
//! `fronta_automation::validate` before saving), hashing webhook tokens (the token is
//! shown again in the webhook URL), rotating tokens or signing secrets.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_automation::Automation;
use fronta_automation::model::Trigger;
use fronta_automation::store::{AutomationId, AutomationStore, StoreResult, StoredAutomation};
use fronta_desk::{DeskError, TenantId, TicketId, token};
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use uuid::Uuid;

use crate::PgStore;
use crate::desk::{Db, DeskSql, check_name, sql_err, tenant_exists, to_millis, unique_as};
use crate::runs::millis;
use crate::schema::GUARD_LOCK_CLASS;

/// The prefix of webhook tokens, so a leaked one is easy to recognise.
pub const WEBHOOK_TOKEN_PREFIX: &str = "wh_";

use fronta_desk::store::names::AUTOMATION;
const TICKET: &str = "ticket";

macro_rules! columns {
    () => {
        "id, tenant, definition, enabled, webhook_token, signing_secret, created_at, updated_at"
    };
}

/// A row of [`columns!`] as a saved automation.
fn automation_of(row: &PgRow) -> DeskSql<StoredAutomation> {
    let read = || -> Result<StoredAutomation, sqlx::Error> {
        let mut automation: Automation = row.try_get::<Json<Automation>, _>(2)?.0;
        automation.enabled = row.try_get(3)?;
        let token: Option<String> = row.try_get(4)?;
        let webhook_token = match automation.trigger {
            Trigger::Webhook { .. } => token,
            _ => None,
        };
        Ok(StoredAutomation {
            id: AutomationId(row.try_get(0)?),
            tenant: TenantId(row.try_get(1)?),
            automation,
            webhook_token,
            signing_secret: row.try_get(5)?,
            created_at: row.try_get(6)?,
            updated_at: row.try_get(7)?,
        })
    };
    read().map_err(|err| DeskError::Internal(format!("cannot read an automation row: {err}")))
}

/// The event an event trigger listens to; `None` for other triggers.
fn event_of(trigger: &Trigger) -> Option<&'static str> {
    match trigger {
        Trigger::Event { event } => Some(event.as_str()),
        _ => None,
    }
}

fn is_webhook(trigger: &Trigger) -> bool {
    matches!(trigger, Trigger::Webhook { .. })
}

fn name_taken(name: &str) -> String {
    format!("automation {name:?} already exists")
}

async fn get(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: AutomationId,
    for_update: bool,
) -> DeskSql<StoredAutomation> {
    let sql = if for_update {
        concat!(
            "SELECT ",
            columns!(),
            " FROM automations WHERE tenant = $1 AND id = $2 FOR UPDATE"
        )
    } else {
        concat!(
            "SELECT ",
            columns!(),
            " FROM automations WHERE tenant = $1 AND id = $2"
        )
    };
    let row = sqlx::query(sql)
        .bind(tenant.0)
        .bind(id.0)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
    row.as_ref()
        .map(automation_of)
        .transpose()?
        .ok_or(DeskError::NotFound(AUTOMATION))
}

async fn by_name(db: &mut Db<'_>, tenant: TenantId, name: &str) -> DeskSql<StoredAutomation> {
    let row = sqlx::query(concat!(
        "SELECT ",
        columns!(),
        " FROM automations WHERE tenant = $1 AND name = $2"
    ))
    .bind(tenant.0)
    .bind(name)
    .fetch_optional(db.c())
    .await
    .map_err(sql_err)?;
    row.as_ref()
        .map(automation_of)
        .transpose()?
        .ok_or(DeskError::NotFound(AUTOMATION))
}

/// `name` is free in the tenant, or taken by `except` itself.
async fn name_free(
    db: &mut Db<'_>,
    tenant: TenantId,
    name: &str,
    except: Option<AutomationId>,
) -> DeskSql<()> {
    let holder = match by_name(db, tenant, name).await {
        Ok(found) => Some(found.id),
        Err(DeskError::NotFound(_)) => None,
        Err(err) => return Err(err),
    };
    match holder {
        Some(holder) if Some(holder) != except => Err(DeskError::Conflict(name_taken(name))),
        _ => Ok(()),
    }
}

/// The stored token of the tenant's automation `id`, whatever its trigger now is, with
/// the row locked for the write that asks; `NotFound` when the tenant has no such
/// automation.
async fn stored_token(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: AutomationId,
) -> DeskSql<Option<String>> {
    let found: Option<Option<String>> = sqlx::query_scalar(
        "SELECT webhook_token FROM automations WHERE tenant = $1 AND id = $2 FOR UPDATE",
    )
    .bind(tenant.0)
    .bind(id.0)
    .fetch_optional(db.c())
    .await
    .map_err(sql_err)?;
    found.ok_or(DeskError::NotFound(AUTOMATION))
}

/// Write the definition and its mirror columns of the tenant's automation `id`, with
/// `updated_at = now`, and read the row back.
async fn write_definition(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: AutomationId,
    automation: &Automation,
    webhook_token: Option<&str>,
) -> DeskSql<StoredAutomation> {
    let now = db.now().await?;
    let row = sqlx::query(concat!(
        "UPDATE automations SET name = $1, definition = $2, enabled = $3, trigger_kind = $4, \
         event = $5, webhook_token = $6, updated_at = $7 WHERE tenant = $8 AND id = $9 \
         RETURNING ",
        columns!()
    ))
    .bind(&automation.name)
    .bind(Json(automation))
    .bind(automation.enabled)
    .bind(automation.trigger.kind())
    .bind(event_of(&automation.trigger))
    .bind(webhook_token)
    .bind(now)
    .bind(tenant.0)
    .bind(id.0)
    .fetch_optional(db.c())
    .await
    .map_err(unique_as(|| name_taken(&automation.name)))?;
    row.as_ref()
        .map(automation_of)
        .transpose()?
        .ok_or(DeskError::NotFound(AUTOMATION))
}

/// One admission of the loop guard, in one transaction: check the automation and the
/// ticket are the tenant's, take the pair's advisory lock, prune the pair's rows that
/// left the window `(since, now]`, and insert one more when fewer than `max` remain.
async fn guard_admit(
    db: &mut Db<'_>,
    tenant: TenantId,
    automation: AutomationId,
    ticket: TicketId,
    now: DateTime<Utc>,
    since: DateTime<Utc>,
    max: u32,
) -> DeskSql<bool> {
    let (automation_found, ticket_found): (bool, bool) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM automations WHERE tenant = $1 AND id = $2), \
                EXISTS (SELECT 1 FROM desk_tickets WHERE tenant = $1 AND id = $3)",
    )
    .bind(tenant.0)
    .bind(automation.0)
    .bind(ticket.0)
    .fetch_one(db.c())
    .await
    .map_err(sql_err)?;
    if !automation_found {
        return Err(DeskError::NotFound(AUTOMATION));
    }
    if !ticket_found {
        return Err(DeskError::NotFound(TICKET));
    }
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2::text || '/' || $3::text))")
        .bind(GUARD_LOCK_CLASS)
        .bind(automation.0)
        .bind(ticket.0)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    sqlx::query("DELETE FROM automation_guard WHERE automation = $1 AND ticket = $2 AND at <= $3")
        .bind(automation.0)
        .bind(ticket.0)
        .bind(since)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    let admitted = sqlx::query(
        "INSERT INTO automation_guard (tenant, automation, ticket, at)
         SELECT $1, $2, $3, $4
         WHERE (SELECT count(*) FROM automation_guard
                WHERE automation = $2 AND ticket = $3 AND at > $5) < $6",
    )
    .bind(tenant.0)
    .bind(automation.0)
    .bind(ticket.0)
    .bind(now)
    .bind(since)
    .bind(i64::from(max))
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(admitted.rows_affected() == 1)
}

#[async_trait]
impl AutomationStore for PgStore {
    async fn automation_create(
        &self,
        tenant: TenantId,
        automation: Automation,
        signing_secret: Option<String>,
    ) -> StoreResult<StoredAutomation> {
        check_name(AUTOMATION, &automation.name)?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        tenant_exists(&mut db, tenant).await?;
        name_free(&mut db, tenant, &automation.name, None).await?;
        let now = db.now().await?;
        let id = AutomationId::new();
        let webhook_token =
            is_webhook(&automation.trigger).then(|| token::generate(WEBHOOK_TOKEN_PREFIX));
        // The name check answers the usual case; a concurrent create of the same name is
        // caught by the unique index.
        let row = sqlx::query(concat!(
            "INSERT INTO automations (id, tenant, name, definition, enabled, trigger_kind, \
             event, webhook_token, signing_secret, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10) \
             ON CONFLICT (tenant, name) DO NOTHING RETURNING ",
            columns!()
        ))
        .bind(id.0)
        .bind(tenant.0)
        .bind(&automation.name)
        .bind(Json(&automation))
        .bind(automation.enabled)
        .bind(automation.trigger.kind())
        .bind(event_of(&automation.trigger))
        .bind(webhook_token)
        .bind(signing_secret)
        .bind(now)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        let Some(row) = row else {
            return Err(DeskError::Conflict(name_taken(&automation.name)));
        };
        let stored = automation_of(&row)?;
        self.desk_commit(tx).await?;
        Ok(stored)
    }

    async fn automation_get(
        &self,
        tenant: TenantId,
        id: AutomationId,
    ) -> StoreResult<StoredAutomation> {
        let mut conn = self.desk_connection().await?;
        get(&mut Db::new(&mut conn, self), tenant, id, false).await
    }

    async fn automation_by_name(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> StoreResult<StoredAutomation> {
        let mut conn = self.desk_connection().await?;
        by_name(&mut Db::new(&mut conn, self), tenant, name).await
    }

    async fn automation_list(&self, tenant: TenantId) -> StoreResult<Vec<StoredAutomation>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM automations WHERE tenant = $1 ORDER BY name, id"
        ))
        .bind(tenant.0)
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter().map(automation_of).collect()
    }

    async fn automation_update(
        &self,
        tenant: TenantId,
        id: AutomationId,
        automation: Automation,
    ) -> StoreResult<StoredAutomation> {
        check_name(AUTOMATION, &automation.name)?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let token = stored_token(&mut db, tenant, id).await?;
        name_free(&mut db, tenant, &automation.name, Some(id)).await?;
        // The token outlives a trigger that changes away: back to a webhook, the
        // automation answers at the URL it had.
        let token = match token {
            None if is_webhook(&automation.trigger) => Some(token::generate(WEBHOOK_TOKEN_PREFIX)),
            kept => kept,
        };
        let stored = write_definition(&mut db, tenant, id, &automation, token.as_deref()).await?;
        self.desk_commit(tx).await?;
        Ok(stored)
    }

    async fn automation_set_enabled(
        &self,
        tenant: TenantId,
        id: AutomationId,
        enabled: bool,
    ) -> StoreResult<StoredAutomation> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let stored = get(&mut db, tenant, id, true).await?;
        if stored.automation.enabled == enabled {
            return Ok(stored);
        }
        let token = stored_token(&mut db, tenant, id).await?;
        let mut automation = stored.automation;
        automation.enabled = enabled;
        let stored = write_definition(&mut db, tenant, id, &automation, token.as_deref()).await?;
        self.desk_commit(tx).await?;
        Ok(stored)
    }

    async fn automation_delete(&self, tenant: TenantId, id: AutomationId) -> StoreResult<()> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        stored_token(&mut db, tenant, id).await?;
        // The guard's rows go with it (`ON DELETE CASCADE`).
        sqlx::query("DELETE FROM automations WHERE tenant = $1 AND id = $2")
            .bind(tenant.0)
            .bind(id.0)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        self.desk_commit(tx).await
    }

    async fn automation_by_webhook_token(
        &self,
        token: &str,
    ) -> StoreResult<Option<StoredAutomation>> {
        if token.is_empty() {
            return Ok(None);
        }
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let row = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM automations WHERE webhook_token = $1 AND trigger_kind = 'webhook'"
        ))
        .bind(token)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        row.as_ref().map(automation_of).transpose()
    }

    async fn automations_for_event(
        &self,
        tenant: TenantId,
        event: &str,
    ) -> StoreResult<Vec<StoredAutomation>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM automations WHERE tenant = $1 AND event = $2 AND enabled \
             ORDER BY created_at, id"
        ))
        .bind(tenant.0)
        .bind(event)
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter().map(automation_of).collect()
    }

    async fn automations_timed(&self) -> StoreResult<Vec<StoredAutomation>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM automations WHERE trigger_kind IN ('poll', 'schedule') \
             ORDER BY created_at, id"
        ))
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter().map(automation_of).collect()
    }

    async fn guard_admit(
        &self,
        tenant: TenantId,
        automation: AutomationId,
        ticket: TicketId,
        now: DateTime<Utc>,
        window: std::time::Duration,
        max: u32,
    ) -> StoreResult<bool> {
        // Whole milliseconds, as on SQLite: the window is `(now - window, now]`.
        let now = to_millis(now);
        let since = chrono::TimeDelta::try_milliseconds(millis(window))
            .and_then(|window| now.checked_sub_signed(window))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut tx = self.desk_begin().await?;
        let admitted = guard_admit(
            &mut Db::new(&mut tx, self),
            tenant,
            automation,
            ticket,
            now,
            since,
            max,
        )
        .await?;
        self.desk_commit(tx).await?;
        Ok(admitted)
    }
}

/// The ids of the tenant's enabled automations listening to `event`, oldest first: what
/// a ticket write hands its event sink (one probe of `automations_event`), inside the
/// write's transaction.
pub(crate) async fn listeners(
    db: &mut Db<'_>,
    tenant: TenantId,
    event: &str,
) -> DeskSql<Vec<AutomationId>> {
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM automations WHERE tenant = $1 AND event = $2 AND enabled \
         ORDER BY created_at, id",
    )
    .bind(tenant.0)
    .bind(event)
    .fetch_all(db.c())
    .await
    .map_err(sql_err)?;
    Ok(ids.into_iter().map(AutomationId).collect())
}
