//! The automation port ([`AutomationStore`]) on Postgres: saved automations (their JSON
//! definition plus the columns the lookups need), their webhook tokens, and the loop
//! guard's per-(automation, ticket) counter — the same behaviour as the SQLite store
//! (`fronta_store_sqlite::automations`), pinned by the same conformance suite, whose
//! module docs list the decisions the port leaves open.
//!
//! The rules are the plans in `fronta_automation::store` ([`Save`], [`set_enabled`],
//! [`GuardAdmission`], [`AutomationColumns`]): this file reads what they need, calls them
//! and writes what they answer.
//!
//! Every write is one transaction. A name check and its write race other writes of the
//! same name only in the unique index (`Conflict`, with the plan's message).
//! The guard's prune, count and insert run under a transaction-level advisory lock on
//! the (automation, ticket) pair ([`crate::schema::GUARD_LOCK_CLASS`]), so concurrent
//! admissions of one pair are counted one after another and admit exactly `max`; other
//! pairs never wait for it. Every statement but the webhook token lookup is scoped by the
//! caller's tenant, so another tenant's id finds nothing, exactly like an unknown one.
//!
//! Left out, as on SQLite: validating the step tree (the caller runs
//! `fronta_automation::validate` before saving), hashing webhook tokens (the token is
//! shown again in the webhook URL).
//!
//! Rotations (`fronta_automation::rotation`) keep the old token or secret in
//! `automation_retired` with its expiry; every read of an automation carries its rows
//! (one subquery of `columns!`); a rotation drops the automation's expired ones.

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use fronta_automation::Automation;
use fronta_automation::refs::{self, Kind, Ref, Target};
use fronta_automation::rotation::{self, Rotation};
use fronta_automation::setup::{SetupApplied, SetupFailure, SetupPlan, Write, Written};
use fronta_automation::store::{
    AutomationColumns, AutomationId, AutomationRow, AutomationStore, Current, Enable,
    GuardAdmission, InFlight, Listener, Save, StoreResult, StoredAutomation, mint_webhook_token,
    name_taken, name_taken_message, names, set_enabled, webhook_lookup,
};
use fronta_automation::versions::{self, Latest, Version, VersionWrite};
use fronta_desk::{DeskError, TenantId, TicketId, UsedBy};
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use uuid::Uuid;

use crate::PgStore;
use crate::desk::{
    Db, DeskSql, Lock, group_insert, groups_of_tenant, member_insert, member_rewrite,
    setup_available, sql_err, tenant_exists, type_insert, type_rewrite, types_of_tenant, unique_as,
};
use crate::schema::GUARD_LOCK_CLASS;

macro_rules! columns {
    () => {
        "id, tenant, definition, enabled, webhook_token, signing_secret, created_at, updated_at, \
         current_version, in_flight, \
         (SELECT coalesce(json_agg(json_build_array(r.kind, r.value, \
             (extract(epoch FROM r.expires_at) * 1000)::bigint)), '[]')::text \
          FROM automation_retired r WHERE r.automation = automations.id)"
    };
}

/// A row of [`columns!`] as a saved automation.
fn automation_of(row: &PgRow) -> DeskSql<StoredAutomation> {
    let read = || -> Result<AutomationColumns, sqlx::Error> {
        Ok(AutomationColumns {
            id: AutomationId(row.try_get(0)?),
            tenant: TenantId(row.try_get(1)?),
            definition: row.try_get::<Json<Automation>, _>(2)?.0,
            enabled: row.try_get(3)?,
            webhook_token: row.try_get(4)?,
            signing_secret: row.try_get(5)?,
            retired: rotation::parse_retired(row.try_get::<Option<&str>, _>(10)?),
            current_version: u32::try_from(row.try_get::<i32, _>(8)?).unwrap_or(1),
            in_flight: InFlight::parse(row.try_get::<&str, _>(9)?),
            created_at: row.try_get(6)?,
            updated_at: row.try_get(7)?,
        })
    };
    read()
        .map(StoredAutomation::from)
        .map_err(|err| DeskError::Internal(format!("cannot read an automation row: {err}")))
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
        .ok_or(DeskError::NotFound(names::AUTOMATION))
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
        .ok_or(DeskError::NotFound(names::AUTOMATION))
}

/// A row of `automation_versions` (`version, definition, hash, created_at, created_by`).
fn version_of(row: &PgRow) -> DeskSql<Version> {
    let read = || -> Result<Version, sqlx::Error> {
        Ok(Version::read(
            u32::try_from(row.try_get::<i32, _>(0)?).unwrap_or(1),
            row.try_get::<Json<Automation>, _>(1)?.0,
            row.try_get(2)?,
            row.try_get(3)?,
            row.try_get(4)?,
            row.try_get::<Json<Vec<Ref>>, _>(5)?.0,
        ))
    };
    read().map_err(|err| DeskError::Internal(format!("cannot read an automation version: {err}")))
}

/// A version number as the `integer` column keeps it.
fn column(version: u32) -> i32 {
    i32::try_from(version).unwrap_or(i32::MAX)
}

/// Append the version `row` plans (nothing when its definition is the current one's).
async fn write_version(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: AutomationId,
    row: &AutomationRow,
    by: &str,
) -> DeskSql<()> {
    let VersionWrite::New { version, hash } = &row.version else {
        return Ok(());
    };
    let now = db.now().await?;
    sqlx::query(
        "INSERT INTO automation_versions \
         (automation, version, tenant, definition, hash, created_at, created_by, refs) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(id.0)
    .bind(column(*version))
    .bind(tenant.0)
    .bind(Json(versions::definition_of(&row.automation)))
    .bind(hash)
    .bind(now)
    .bind(by)
    .bind(Json(row.refs.as_deref().unwrap_or_default()))
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(())
}

/// What an update of the tenant's automation `id` reads of its row, locked (the token
/// whatever the trigger now is, the current version and its content); `NotFound` when
/// the tenant has no such automation.
async fn current(db: &mut Db<'_>, tenant: TenantId, id: AutomationId) -> DeskSql<Current> {
    // The row locked, with the columns a stored automation does not show: its token
    // whatever the trigger now is, and its refs (`None`: never bound).
    let found: Option<TokenAndRefs> = sqlx::query_as(
        "SELECT webhook_token, refs FROM automations WHERE tenant = $1 AND id = $2 FOR UPDATE",
    )
    .bind(tenant.0)
    .bind(id.0)
    .fetch_optional(db.c())
    .await
    .map_err(sql_err)?;
    let (webhook_token, refs) = found.ok_or(DeskError::NotFound(names::AUTOMATION))?;
    let stored = get(db, tenant, id, false).await?;
    Ok(Current {
        webhook_token,
        latest: Latest::of(
            stored.current_version,
            &stored.automation,
            refs.as_ref()
                .map(|refs| refs.0.as_slice())
                .unwrap_or_default(),
        ),
        in_flight: stored.in_flight,
        bound: refs.is_some(),
    })
}

/// The `webhook_token` and `refs` columns of a row.
type TokenAndRefs = (Option<String>, Option<Json<Vec<Ref>>>);

/// A row of `id, definition, refs`.
type RefsRow = (Uuid, Json<Automation>, Option<Json<Vec<Ref>>>);

/// Every automation of the tenant with its current refs (rows locked), bound by name now
/// where a save never bound them (and written back, so it is done once).
async fn tenant_refs(
    db: &mut Db<'_>,
    tenant: TenantId,
) -> DeskSql<Vec<(AutomationId, Automation, Vec<Ref>)>> {
    let rows: Vec<RefsRow> = sqlx::query_as(
        "SELECT id, definition, refs FROM automations WHERE tenant = $1 ORDER BY name, id \
         FOR UPDATE",
    )
    .bind(tenant.0)
    .fetch_all(db.c())
    .await
    .map_err(sql_err)?;
    let mut desk = None;
    let mut all = Vec::with_capacity(rows.len());
    for (id, definition, refs) in rows {
        let id = AutomationId(id);
        let refs = match refs {
            Some(refs) => refs.0,
            None => {
                if desk.is_none() {
                    desk = Some((
                        groups_of_tenant(db, tenant, Lock::None).await?,
                        types_of_tenant(db, tenant, Lock::None).await?,
                    ));
                }
                let (groups, types) = desk.as_ref().expect("read above");
                let bound = refs::bind(&definition.0, groups, types);
                write_refs(db, tenant, id, None, &bound).await?;
                bound
            }
        };
        all.push((id, definition.0, refs));
    }
    Ok(all)
}

/// Writes the refs (and, after a rename, the definition) of the tenant's automation `id`.
async fn write_refs(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: AutomationId,
    definition: Option<&Automation>,
    refs: &[Ref],
) -> DeskSql<()> {
    sqlx::query(
        "UPDATE automations SET refs = $3, definition = coalesce($4, definition) \
         WHERE tenant = $1 AND id = $2",
    )
    .bind(tenant.0)
    .bind(id.0)
    .bind(Json(refs))
    .bind(definition.map(Json))
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(())
}

/// Carries the rename of the group or ticket type `id` to `new_name` into the current
/// definitions that name it ([`refs::rename`]); called inside the rename's transaction,
/// before the name changes (names not yet bound are bound by the old name).
pub(crate) async fn carry_rename(
    db: &mut Db<'_>,
    tenant: TenantId,
    kind: Kind,
    id: Uuid,
    new_name: &str,
) -> DeskSql<()> {
    for (automation, definition, current) in tenant_refs(db, tenant).await? {
        if let Some((renamed, refs)) = refs::rename(&definition, &current, kind, id, new_name) {
            write_refs(db, tenant, automation, Some(&renamed), &refs).await?;
        }
    }
    Ok(())
}

/// The automations whose current version uses `target` ([`refs::users`]).
pub(crate) async fn users_of(
    db: &mut Db<'_>,
    tenant: TenantId,
    target: Target<'_>,
) -> DeskSql<Vec<UsedBy>> {
    let all: Vec<(String, String, Vec<Ref>)> = tenant_refs(db, tenant)
        .await?
        .into_iter()
        .map(|(id, definition, refs)| (id.to_string(), definition.name, refs))
        .collect();
    Ok(refs::users(&all, target))
}

/// The tenant's automation called `name`, if any.
async fn name_holder(
    db: &mut Db<'_>,
    tenant: TenantId,
    name: &str,
) -> DeskSql<Option<AutomationId>> {
    let found: Option<Uuid> =
        sqlx::query_scalar("SELECT id FROM automations WHERE tenant = $1 AND name = $2")
            .bind(tenant.0)
            .bind(name)
            .fetch_optional(db.c())
            .await
            .map_err(sql_err)?;
    Ok(found.map(AutomationId))
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
    found.ok_or(DeskError::NotFound(names::AUTOMATION))
}

/// A rotation of the tenant's automation `id` in the caller's transaction: read it
/// locked, plan with `plan` at the store's now, drop its expired retired values, keep
/// the old one the plan retires, and write the new value in `column` (`webhook_token` or
/// `signing_secret`).
async fn rotate(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: AutomationId,
    column: &'static str,
    plan: impl FnOnce(&StoredAutomation, DateTime<Utc>) -> DeskSql<Rotation>,
) -> DeskSql<StoredAutomation> {
    let stored = get(db, tenant, id, true).await?;
    let now = db.now().await?;
    let rotation = plan(&stored, now)?;
    sqlx::query("DELETE FROM automation_retired WHERE automation = $1 AND expires_at <= $2")
        .bind(id.0)
        .bind(rotation.drop_before)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    if let Some(retired) = &rotation.retire {
        sqlx::query(
            "INSERT INTO automation_retired (automation, tenant, kind, value, expires_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (automation, kind, value) \
             DO UPDATE SET expires_at = greatest(automation_retired.expires_at, \
             excluded.expires_at)",
        )
        .bind(id.0)
        .bind(tenant.0)
        .bind(retired.kind.as_str())
        .bind(&retired.value)
        .bind(retired.expires_at)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    }
    let written = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE automations SET {column} = $3, updated_at = $4 WHERE tenant = $1 AND id = $2 \
         RETURNING {}",
        columns!()
    )))
    .bind(tenant.0)
    .bind(id.0)
    .bind(&rotation.new_value)
    .bind(now)
    .fetch_optional(db.c())
    .await
    .map_err(sql_err)?;
    written
        .as_ref()
        .map(automation_of)
        .transpose()?
        .ok_or(DeskError::NotFound(names::AUTOMATION))
}

/// Write `row` over the tenant's automation `id`, with `updated_at = now`, and read the
/// row back.
async fn write_row(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: AutomationId,
    row: &AutomationRow,
) -> DeskSql<StoredAutomation> {
    let now = db.now().await?;
    let written = sqlx::query(concat!(
        "UPDATE automations SET name = $1, definition = $2, enabled = $3, trigger_kind = $4, \
         event = $5, webhook_token = $6, updated_at = $7, current_version = $10, \
         in_flight = $11, refs = coalesce($12, refs) WHERE tenant = $8 AND id = $9 RETURNING ",
        columns!()
    ))
    .bind(row.name())
    .bind(Json(&row.automation))
    .bind(row.enabled())
    .bind(row.trigger_kind())
    .bind(row.event())
    .bind(row.webhook_token.as_deref())
    .bind(now)
    .bind(tenant.0)
    .bind(id.0)
    .bind(column(row.version.current()))
    .bind(row.in_flight.as_str())
    .bind(row.refs.as_ref().map(Json))
    .fetch_optional(db.c())
    .await
    .map_err(unique_as(|| name_taken_message(row.name())))?;
    written
        .as_ref()
        .map(automation_of)
        .transpose()?
        .ok_or(DeskError::NotFound(names::AUTOMATION))
}

/// One admission of the loop guard, in one transaction: check the automation and the
/// ticket are the tenant's, take the pair's advisory lock, prune the pair's rows that
/// left the window and count the rest (one statement), and insert one more when the plan
/// admits it.
async fn guard_admit(
    db: &mut Db<'_>,
    tenant: TenantId,
    automation: AutomationId,
    ticket: TicketId,
    guard: GuardAdmission,
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
    guard.targets(automation_found, ticket_found)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2::text || '/' || $3::text))")
        .bind(GUARD_LOCK_CLASS)
        .bind(automation.0)
        .bind(ticket.0)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    // The count does not see the pruned rows go (one snapshot), but they are all at or
    // before `since`, which it does not count.
    let admitted: i64 = sqlx::query_scalar(
        "WITH pruned AS (DELETE FROM automation_guard \
                         WHERE automation = $1 AND ticket = $2 AND at <= $3) \
         SELECT count(*) FROM automation_guard WHERE automation = $1 AND ticket = $2 AND at > $3",
    )
    .bind(automation.0)
    .bind(ticket.0)
    .bind(guard.since)
    .fetch_one(db.c())
    .await
    .map_err(sql_err)?;
    if !guard.admits(u64::try_from(admitted).unwrap_or(0)) {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO automation_guard (tenant, automation, ticket, at) VALUES ($1, $2, $3, $4)",
    )
    .bind(tenant.0)
    .bind(automation.0)
    .bind(ticket.0)
    .bind(guard.now)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(true)
}

/// `save` with its names bound to the tenant's groups and types as they are now, read
/// `FOR SHARE` so a rename or a removal of them waits for this save, or it for them.
async fn bound(db: &mut Db<'_>, tenant: TenantId, save: Save) -> DeskSql<Save> {
    let groups = groups_of_tenant(db, tenant, Lock::Share).await?;
    let types = types_of_tenant(db, tenant, Lock::Share).await?;
    Ok(save.bind(&groups, &types))
}

/// Creates the automation `save` checked, version 1, in the caller's transaction.
async fn insert(
    db: &mut Db<'_>,
    tenant: TenantId,
    save: Save,
    signing_secret: Option<String>,
    by: &str,
) -> DeskSql<StoredAutomation> {
    tenant_exists(db, tenant).await?;
    let holder = name_holder(db, tenant, save.name()).await?;
    let save = bound(db, tenant, save).await?;
    let row = save.create(holder, mint_webhook_token)?;
    let now = db.now().await?;
    let id = AutomationId::new();
    fronta_engine::audit::created(&id);
    // The name check answers the usual case; a concurrent create of the same name is
    // caught by the unique index.
    let inserted = sqlx::query(concat!(
        "INSERT INTO automations (id, tenant, name, definition, enabled, trigger_kind, \
         event, webhook_token, signing_secret, created_at, updated_at, current_version, \
         in_flight, refs) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12, $13) \
         ON CONFLICT (tenant, name) DO NOTHING RETURNING ",
        columns!()
    ))
    .bind(id.0)
    .bind(tenant.0)
    .bind(row.name())
    .bind(Json(&row.automation))
    .bind(row.enabled())
    .bind(row.trigger_kind())
    .bind(row.event())
    .bind(row.webhook_token.as_deref())
    .bind(signing_secret)
    .bind(now)
    .bind(column(row.version.current()))
    .bind(row.in_flight.as_str())
    .bind(Json(row.refs.as_deref().unwrap_or_default()))
    .fetch_optional(db.c())
    .await
    .map_err(sql_err)?;
    let Some(inserted) = inserted else {
        return Err(name_taken(row.name()));
    };
    let stored = automation_of(&inserted)?;
    write_version(db, tenant, id, &row, by).await?;
    Ok(stored)
}

/// Saves `save` over the automation `id`, a new version when the definition changed, in
/// the caller's transaction.
async fn update(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: AutomationId,
    save: Save,
    by: &str,
) -> DeskSql<StoredAutomation> {
    let current = current(db, tenant, id).await?;
    let holder = name_holder(db, tenant, save.name()).await?;
    let save = bound(db, tenant, save).await?;
    let row = save.update(id, current, holder, mint_webhook_token)?;
    write_version(db, tenant, id, &row, by).await?;
    let stored = write_row(db, tenant, id, &row).await?;
    Ok(stored)
}

/// A whole setup in the caller's transaction ([`fronta_automation::setup`]): each of the
/// plan's writes in order, by the writes the single routes make; an `Err` anywhere, and
/// the caller rolls back every write before it.
async fn setup_apply(
    db: &mut Db<'_>,
    tenant: TenantId,
    plan: SetupPlan,
    by: &str,
) -> Result<SetupApplied, SetupFailure> {
    let mut written = Vec::new();
    for (at, write) in plan.writes() {
        let done = match write {
            Write::CreateType(new) => type_insert(db, tenant, new).await.map(Written::Type),
            Write::UpdateType {
                id,
                statuses,
                fields,
            } => type_rewrite(db, tenant, id, None, Some(&statuses), Some(&fields))
                .await
                .map(Written::Type),
            Write::CreateGroup(new) => group_insert(db, tenant, new).await.map(Written::Group),
            Write::AddMember {
                group,
                name,
                email,
                capacity,
                available,
            } => match member_insert(db, tenant, group, &name, email.as_deref(), capacity).await {
                Ok(member) => setup_available(db, member, Some(available))
                    .await
                    .map(Written::Member),
                Err(err) => Err(err),
            },
            Write::UpdateMember {
                id,
                email,
                capacity,
                available,
            } => match member_rewrite(db, tenant, id, None, email.as_deref().map(Some), capacity)
                .await
            {
                Ok(member) => setup_available(db, member, available)
                    .await
                    .map(Written::Member),
                Err(err) => Err(err),
            },
            Write::CreateAutomation(wanted) => match Save::check(wanted.automation) {
                Ok(save) => insert(db, tenant, save, wanted.signing_secret, by)
                    .await
                    .map(Written::Automation),
                Err(err) => Err(err),
            },
            Write::UpdateAutomation { id, automation } => match Save::check(automation) {
                Ok(save) => update(db, tenant, id, save, by)
                    .await
                    .map(Written::Automation),
                Err(err) => Err(err),
            },
        };
        written.push(done.map_err(SetupFailure::at(at))?);
    }
    Ok(plan.applied(written))
}

#[async_trait]
impl AutomationStore for PgStore {
    async fn automation_create(
        &self,
        tenant: TenantId,
        automation: Automation,
        signing_secret: Option<String>,
        by: &str,
    ) -> StoreResult<StoredAutomation> {
        let save = Save::check(automation)?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let done = insert(&mut db, tenant, save, signing_secret, by).await?;
        self.desk_commit(tx).await?;
        Ok(done)
    }

    async fn setup_apply(
        &self,
        tenant: TenantId,
        plan: SetupPlan,
        by: &str,
    ) -> Result<SetupApplied, SetupFailure> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let applied = setup_apply(&mut db, tenant, plan, by).await?;
        self.desk_commit(tx).await?;
        Ok(applied)
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
        by: &str,
    ) -> StoreResult<StoredAutomation> {
        let save = Save::check(automation)?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let done = update(&mut db, tenant, id, save, by).await?;
        self.desk_commit(tx).await?;
        Ok(done)
    }

    async fn automation_set_enabled(
        &self,
        tenant: TenantId,
        id: AutomationId,
        enabled: bool,
        in_flight: InFlight,
    ) -> StoreResult<StoredAutomation> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let stored = get(&mut db, tenant, id, true).await?;
        let version = stored.current_version;
        let (automation, in_flight) = match set_enabled(stored, enabled, in_flight) {
            Enable::Unchanged(stored) => return Ok(stored),
            Enable::Write {
                automation,
                in_flight,
            } => (automation, in_flight),
        };
        let row = AutomationRow {
            automation,
            webhook_token: stored_token(&mut db, tenant, id).await?,
            version: VersionWrite::Unchanged(version),
            refs: None,
            in_flight,
        };
        let stored = write_row(&mut db, tenant, id, &row).await?;
        self.desk_commit(tx).await?;
        Ok(stored)
    }

    async fn automation_versions(
        &self,
        tenant: TenantId,
        id: AutomationId,
        before: Option<u32>,
        limit: u32,
    ) -> StoreResult<Vec<Version>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        get(&mut db, tenant, id, false).await?;
        let rows = sqlx::query(
            "SELECT version, definition, hash, created_at, created_by, refs FROM automation_versions \
             WHERE automation = $1 AND tenant = $2 AND version < $3 ORDER BY version DESC LIMIT $4",
        )
        .bind(id.0)
        .bind(tenant.0)
        .bind(before.map_or(i32::MAX, column))
        .bind(i64::from(limit))
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter().map(version_of).collect()
    }

    async fn automation_version(
        &self,
        tenant: TenantId,
        id: AutomationId,
        version: u32,
    ) -> StoreResult<Version> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let row = sqlx::query(
            "SELECT version, definition, hash, created_at, created_by, refs FROM automation_versions \
             WHERE automation = $1 AND tenant = $2 AND version = $3",
        )
        .bind(id.0)
        .bind(tenant.0)
        .bind(column(version))
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        row.as_ref()
            .map(version_of)
            .transpose()?
            .ok_or(DeskError::NotFound(names::VERSION))
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
        let Some(token) = webhook_lookup(token) else {
            return Ok(None);
        };
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
        if let Some(row) = row {
            return automation_of(&row).map(Some);
        }
        // An old token, kept by a rotation: found while its grace lasts.
        let row = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM automations WHERE trigger_kind = 'webhook' AND id = \
             (SELECT automation FROM automation_retired \
              WHERE value = $1 AND kind = 'webhook' LIMIT 1)"
        ))
        .bind(token)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        let Some(stored) = row.as_ref().map(automation_of).transpose()? else {
            return Ok(None);
        };
        let now = db.now().await?;
        Ok(rotation::answers_token(&stored, token, now).then_some(stored))
    }

    async fn retired_purge(&self, before: DateTime<Utc>, limit: usize) -> StoreResult<u64> {
        self.purge_batch(
            "DELETE FROM automation_retired WHERE (automation, kind, value) IN \
             (SELECT automation, kind, value FROM automation_retired \
              WHERE expires_at <= $1 LIMIT $2)",
            before,
            limit,
        )
        .await
    }

    async fn automation_rotate_webhook(
        &self,
        tenant: TenantId,
        id: AutomationId,
        grace: TimeDelta,
    ) -> StoreResult<StoredAutomation> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let stored = rotate(&mut db, tenant, id, "webhook_token", |stored, now| {
            rotation::rotate_webhook(stored, now, grace, mint_webhook_token)
        })
        .await?;
        self.desk_commit(tx).await?;
        Ok(stored)
    }

    async fn automation_rotate_signing_secret(
        &self,
        tenant: TenantId,
        id: AutomationId,
        overlap: TimeDelta,
        secret: String,
    ) -> StoreResult<StoredAutomation> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let stored = rotate(&mut db, tenant, id, "signing_secret", |stored, now| {
            rotation::rotate_signing_secret(stored, now, overlap, secret)
        })
        .await?;
        self.desk_commit(tx).await?;
        Ok(stored)
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
        let guard = GuardAdmission::new(now, window, max);
        let mut tx = self.desk_begin().await?;
        let admitted = guard_admit(
            &mut Db::new(&mut tx, self),
            tenant,
            automation,
            ticket,
            guard,
        )
        .await?;
        self.desk_commit(tx).await?;
        Ok(admitted)
    }

    async fn guard_withdraw(
        &self,
        tenant: TenantId,
        automation: AutomationId,
        ticket: TicketId,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        sqlx::query(
            "DELETE FROM automation_guard WHERE seq = (SELECT seq FROM automation_guard \
             WHERE automation = $1 AND ticket = $2 AND at = $3 AND tenant = $4 LIMIT 1)",
        )
        .bind(automation.0)
        .bind(ticket.0)
        .bind(GuardAdmission::instant(at))
        .bind(tenant.0)
        .execute(self.pool())
        .await
        .map_err(sql_err)?;
        Ok(())
    }
}

/// The tenant's enabled automations listening to `event`, oldest first, each with its
/// current version: what a ticket write hands its event sink (one probe of
/// `automations_event`), inside the write's transaction.
pub(crate) async fn listeners(
    db: &mut Db<'_>,
    tenant: TenantId,
    event: &str,
) -> DeskSql<Vec<Listener>> {
    let rows: Vec<(Uuid, i32)> = sqlx::query_as(
        "SELECT id, current_version FROM automations WHERE tenant = $1 AND event = $2 \
         AND enabled ORDER BY created_at, id",
    )
    .bind(tenant.0)
    .bind(event)
    .fetch_all(db.c())
    .await
    .map_err(sql_err)?;
    Ok(rows
        .into_iter()
        .map(|(id, version)| Listener {
            id: AutomationId(id),
            version: u32::try_from(version).unwrap_or(1),
        })
        .collect())
}
