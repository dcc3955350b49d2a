//! The automation port ([`AutomationStore`]) on SQLite: saved automations (their JSON
//! definition plus the columns the lookups need), their webhook tokens, and the loop
//! guard's per-(automation, ticket) counter.
//!
//! Every write is one job on the writer thread, like the desk's, so a name check and its
//! insert, or the guard's count and its insert, are one atomic step. Every statement but
//! the webhook token lookup is scoped by the caller's tenant, so another tenant's id finds
//! nothing, exactly like an unknown one.
//!
//! The rules are the plans in `fronta_automation::store` ([`Save`], [`set_enabled`],
//! [`GuardAdmission`], [`AutomationColumns`]): this file reads what they need, calls them
//! and writes what they answer. Decisions of storage made here (the conformance suite
//! pins them): the `enabled` column mirrors `automation.enabled`; the token stays in the
//! row whatever the trigger; `automation_by_webhook_token` finds paused automations too
//! (the caller decides what a paused one answers); `automation_list` is ordered by name;
//! the guard counts the runs admitted in `(now - window, now]` and later; deleting an
//! automation deletes its guard rows and its poll cursor.
//!
//! Rotations (`fronta_automation::rotation`) keep the old token or secret in
//! `automation_retired` with its expiry; every read of an automation carries its rows
//! (one subquery of `COLUMNS`); a rotation drops the automation's expired ones.
//!
//! Left out: validating the step tree (the caller runs `fronta_automation::validate`
//! before saving), hashing webhook tokens (the token is shown again in the webhook URL, so
//! it must be readable).

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use fronta_automation::Automation;
use fronta_automation::refs::{self, Kind, Ref, Target};
use fronta_automation::rotation::{self, Rotation};
use fronta_automation::setup::{SetupApplied, SetupFailure, SetupPlan, Write, Written};
use fronta_automation::store::{
    AutomationColumns, AutomationId, AutomationRow, AutomationStore, Current, Enable,
    GuardAdmission, InFlight, Listener, Save, StoreResult, StoredAutomation, mint_webhook_token,
    names, set_enabled, webhook_lookup,
};
use fronta_automation::versions::{self, Latest, Version, VersionWrite};
use fronta_desk::{DeskError, TenantId, TicketId, UsedBy};
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::SqliteStore;
use crate::desk::{
    DeskSql, group_insert, groups_of_tenant, instant, key, many, member_insert, member_rewrite,
    one, setup_available, sql_err, tenant_exists, to_json, type_insert, type_rewrite,
    types_of_tenant, uuid_at,
};

const COLUMNS: &str = "id, tenant, definition, enabled, webhook_token, signing_secret, \
     created_at, updated_at, current_version, in_flight, \
     (SELECT json_group_array(json_array(r.kind, r.value, r.expires_at)) \
      FROM automation_retired r WHERE r.automation = automations.id)";

/// A row of [`COLUMNS`] as a saved automation.
fn automation_of(row: &Row<'_>) -> rusqlite::Result<StoredAutomation> {
    let definition: String = row.get(2)?;
    let definition: Automation = serde_json::from_str(&definition)
        .map_err(|err| rusqlite::Error::FromSqlConversionFailure(2, Type::Text, Box::new(err)))?;
    Ok(StoredAutomation::from(AutomationColumns {
        id: AutomationId(uuid_at(row, 0)?),
        tenant: TenantId(uuid_at(row, 1)?),
        definition,
        enabled: row.get::<_, i64>(3)? != 0,
        webhook_token: row.get(4)?,
        signing_secret: row.get(5)?,
        retired: rotation::parse_retired(row.get::<_, Option<String>>(10)?.as_deref()),
        current_version: row.get(8)?,
        in_flight: InFlight::parse(&row.get::<_, String>(9)?),
        created_at: instant(row.get(6)?),
        updated_at: instant(row.get(7)?),
    }))
}

/// A row of `automation_versions` ([`VERSION_COLUMNS`]).
fn version_of(row: &Row<'_>) -> rusqlite::Result<Version> {
    let definition: String = row.get(1)?;
    let definition: Automation = serde_json::from_str(&definition)
        .map_err(|err| rusqlite::Error::FromSqlConversionFailure(1, Type::Text, Box::new(err)))?;
    Ok(Version::read(
        row.get(0)?,
        definition,
        row.get(2)?,
        instant(row.get(3)?),
        row.get(4)?,
        refs::parse(row.get::<_, Option<String>>(5)?.as_deref()),
    ))
}

const VERSION_COLUMNS: &str = "version, definition, hash, created_at, created_by, refs";

/// Append the version `row` plans (nothing when its definition is the current one's).
fn write_version(
    conn: &Connection,
    tenant: TenantId,
    id: AutomationId,
    row: &AutomationRow,
    by: &str,
    now: i64,
) -> DeskSql<()> {
    let VersionWrite::New { version, hash } = &row.version else {
        return Ok(());
    };
    let definition = to_json(&versions::definition_of(&row.automation))?;
    conn.prepare_cached(
        "INSERT INTO automation_versions \
         (automation, version, tenant, definition, hash, created_at, created_by, refs) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            key(&id.0),
            version,
            key(&tenant.0),
            definition,
            hash,
            now,
            by,
            row.version_refs_json(),
        ])
    })
    .map_err(sql_err)?;
    Ok(())
}

fn get(conn: &Connection, tenant: TenantId, id: AutomationId) -> DeskSql<StoredAutomation> {
    one(
        conn,
        &format!("SELECT {COLUMNS} FROM automations WHERE tenant = ?1 AND id = ?2"),
        params![key(&tenant.0), key(&id.0)],
        automation_of,
        names::AUTOMATION,
    )
}

fn by_name(conn: &Connection, tenant: TenantId, name: &str) -> DeskSql<StoredAutomation> {
    one(
        conn,
        &format!("SELECT {COLUMNS} FROM automations WHERE tenant = ?1 AND name = ?2"),
        params![key(&tenant.0), name],
        automation_of,
        names::AUTOMATION,
    )
}

/// The tenant's automation called `name`, if any.
fn name_holder(conn: &Connection, tenant: TenantId, name: &str) -> DeskSql<Option<AutomationId>> {
    conn.prepare_cached("SELECT id FROM automations WHERE tenant = ?1 AND name = ?2")
        .and_then(|mut stmt| {
            stmt.query_row(params![key(&tenant.0), name], |row| uuid_at(row, 0))
                .optional()
        })
        .map_err(sql_err)
        .map(|found| found.map(AutomationId))
}

/// What an update of the tenant's automation `id` reads of its row (the token whatever
/// the trigger now is, the current version and its content); `NotFound` when the tenant
/// has no such automation.
fn current(conn: &Connection, tenant: TenantId, id: AutomationId) -> DeskSql<Current> {
    let stored = get(conn, tenant, id)?;
    // The columns a stored automation does not show: its token whatever the trigger now
    // is, and its refs (`None`: never bound).
    let (webhook_token, refs): (Option<String>, Option<String>) = one(
        conn,
        "SELECT webhook_token, refs FROM automations WHERE tenant = ?1 AND id = ?2",
        params![key(&tenant.0), key(&id.0)],
        |row| Ok((row.get(0)?, row.get(1)?)),
        names::AUTOMATION,
    )?;
    let refs = refs.map(|text| refs::parse(Some(&text)));
    Ok(Current {
        webhook_token,
        latest: Latest::of(
            stored.current_version,
            &stored.automation,
            refs.as_deref().unwrap_or_default(),
        ),
        in_flight: stored.in_flight,
        bound: refs.is_some(),
    })
}

/// Every automation of the tenant with its current refs, bound by name now where a save
/// never bound them (and written back, so it is done once): `(id, name, definition,
/// refs, was bound)`.
fn tenant_refs(
    conn: &Connection,
    tenant: TenantId,
) -> DeskSql<Vec<(AutomationId, Automation, Vec<Ref>)>> {
    let rows = many(
        conn,
        "SELECT id, definition, refs FROM automations WHERE tenant = ?1 ORDER BY name, id",
        [key(&tenant.0)],
        |row| {
            let definition: String = row.get(1)?;
            let definition: Automation = serde_json::from_str(&definition).map_err(|err| {
                rusqlite::Error::FromSqlConversionFailure(1, Type::Text, Box::new(err))
            })?;
            Ok((
                AutomationId(uuid_at(row, 0)?),
                definition,
                row.get::<_, Option<String>>(2)?,
            ))
        },
    )?;
    let mut desk = None;
    let mut all = Vec::with_capacity(rows.len());
    for (id, definition, text) in rows {
        let refs = match text {
            Some(text) => refs::parse(Some(&text)),
            None => {
                if desk.is_none() {
                    desk = Some((
                        groups_of_tenant(conn, tenant)?,
                        types_of_tenant(conn, tenant)?,
                    ));
                }
                let (groups, types) = desk.as_ref().expect("read above");
                let bound = refs::bind(&definition, groups, types);
                write_refs(conn, tenant, id, None, &bound)?;
                bound
            }
        };
        all.push((id, definition, refs));
    }
    Ok(all)
}

/// Writes the refs (and, after a rename, the definition) of the tenant's automation `id`.
fn write_refs(
    conn: &Connection,
    tenant: TenantId,
    id: AutomationId,
    definition: Option<&Automation>,
    refs: &[Ref],
) -> DeskSql<()> {
    let definition = definition.map(to_json).transpose()?;
    let refs = to_json(&refs.to_vec())?;
    conn.prepare_cached(
        "UPDATE automations SET refs = ?3, definition = coalesce(?4, definition) \
         WHERE tenant = ?1 AND id = ?2",
    )
    .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), key(&id.0), refs, definition]))
    .map_err(sql_err)?;
    Ok(())
}

/// Carries the rename of the group or ticket type `id` to `new_name` into the current
/// definitions that name it ([`refs::rename`]); called inside the rename's job, before
/// the name changes (names not yet bound are bound by the old name).
pub(crate) fn carry_rename(
    conn: &Connection,
    tenant: TenantId,
    kind: Kind,
    id: uuid::Uuid,
    new_name: &str,
) -> DeskSql<()> {
    for (automation, definition, current) in tenant_refs(conn, tenant)? {
        if let Some((renamed, refs)) = refs::rename(&definition, &current, kind, id, new_name) {
            write_refs(conn, tenant, automation, Some(&renamed), &refs)?;
        }
    }
    Ok(())
}

/// The automations whose current version uses `target` ([`refs::users`]).
pub(crate) fn users_of(
    conn: &Connection,
    tenant: TenantId,
    target: Target<'_>,
) -> DeskSql<Vec<UsedBy>> {
    let all: Vec<(String, String, Vec<Ref>)> = tenant_refs(conn, tenant)?
        .into_iter()
        .map(|(id, definition, refs)| (id.to_string(), definition.name, refs))
        .collect();
    Ok(refs::users(&all, target))
}

/// The stored token of the tenant's automation `id`, whatever its trigger now is;
/// `NotFound` when the tenant has no such automation.
pub(crate) fn stored_token(
    conn: &Connection,
    tenant: TenantId,
    id: AutomationId,
) -> DeskSql<Option<String>> {
    one(
        conn,
        "SELECT webhook_token FROM automations WHERE tenant = ?1 AND id = ?2",
        params![key(&tenant.0), key(&id.0)],
        |row| row.get(0),
        names::AUTOMATION,
    )
}

/// Write `row` over the tenant's automation `id`, with `updated_at = now`, and read the
/// row back.
fn write_row(
    conn: &Connection,
    tenant: TenantId,
    id: AutomationId,
    row: &AutomationRow,
    now: i64,
) -> DeskSql<StoredAutomation> {
    let definition = to_json(&row.automation)?;
    conn.prepare_cached(&format!(
        "UPDATE automations SET name = ?1, definition = ?2, enabled = ?3, trigger_kind = ?4, \
         event = ?5, webhook_token = ?6, updated_at = ?7, current_version = ?10, \
         in_flight = ?11, refs = coalesce(?12, refs) WHERE tenant = ?8 AND id = ?9 \
         RETURNING {COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                row.name(),
                definition,
                row.enabled(),
                row.trigger_kind(),
                row.event(),
                row.webhook_token,
                now,
                key(&tenant.0),
                key(&id.0),
                row.version.current(),
                row.in_flight.as_str(),
                row.refs_json(),
            ],
            automation_of,
        )
        .optional()
    })
    .map_err(sql_err)?
    .ok_or(DeskError::NotFound(names::AUTOMATION))
}

/// A rotation of the tenant's automation `id` in one job: read it, plan with `plan` at
/// `now`, drop its expired retired values, keep the old one the plan retires, and write
/// the new value in `column` (`webhook_token` or `signing_secret`).
fn rotate(
    conn: &Connection,
    tenant: TenantId,
    id: AutomationId,
    now: i64,
    column: &str,
    plan: impl FnOnce(&StoredAutomation, DateTime<Utc>) -> DeskSql<Rotation>,
) -> DeskSql<StoredAutomation> {
    let stored = get(conn, tenant, id)?;
    let rotation = plan(&stored, instant(now))?;
    conn.prepare_cached(
        "DELETE FROM automation_retired WHERE automation = ?1 AND expires_at <= ?2",
    )
    .and_then(|mut stmt| stmt.execute(params![key(&id.0), rotation.drop_before.timestamp_millis()]))
    .map_err(sql_err)?;
    if let Some(retired) = &rotation.retire {
        conn.prepare_cached(
            "INSERT INTO automation_retired (automation, tenant, kind, value, expires_at) \
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (automation, kind, value) \
             DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                key(&id.0),
                key(&tenant.0),
                retired.kind.as_str(),
                retired.value,
                retired.expires_at.timestamp_millis(),
            ])
        })
        .map_err(sql_err)?;
    }
    conn.prepare_cached(&format!(
        "UPDATE automations SET {column} = ?3, updated_at = ?4 WHERE tenant = ?1 AND id = ?2 \
         RETURNING {COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![key(&tenant.0), key(&id.0), rotation.new_value, now],
            automation_of,
        )
        .optional()
    })
    .map_err(sql_err)?
    .ok_or(DeskError::NotFound(names::AUTOMATION))
}

/// Whether the tenant has a row with `id` in `table`.
fn exists(conn: &Connection, table: &str, tenant: TenantId, id: &uuid::Uuid) -> DeskSql<bool> {
    conn.prepare_cached(&format!(
        "SELECT EXISTS (SELECT 1 FROM {table} WHERE tenant = ?1 AND id = ?2)"
    ))
    .and_then(|mut stmt| stmt.query_row(params![key(&tenant.0), key(id)], |row| row.get(0)))
    .map_err(sql_err)
}

/// One admission of the loop guard, in one job: check its targets, prune this
/// (automation, ticket)'s rows that left the window, count the rest, and insert one more
/// when the plan admits it.
fn guard_admit(
    conn: &Connection,
    tenant: TenantId,
    automation: AutomationId,
    ticket: TicketId,
    guard: GuardAdmission,
) -> DeskSql<bool> {
    guard.targets(
        exists(conn, "automations", tenant, &automation.0)?,
        exists(conn, "desk_tickets", tenant, &ticket.0)?,
    )?;
    let (now, since) = (guard.now.timestamp_millis(), guard.since.timestamp_millis());
    conn.prepare_cached(
        "DELETE FROM automation_guard WHERE automation = ?1 AND ticket = ?2 AND at <= ?3",
    )
    .and_then(|mut stmt| stmt.execute(params![key(&automation.0), key(&ticket.0), since]))
    .map_err(sql_err)?;
    let admitted: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM automation_guard WHERE automation = ?1 AND ticket = ?2 \
             AND at > ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![key(&automation.0), key(&ticket.0), since], |row| {
                row.get(0)
            })
        })
        .map_err(sql_err)?;
    if !guard.admits(u64::try_from(admitted).unwrap_or(0)) {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT INTO automation_guard (tenant, automation, ticket, at) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            key(&tenant.0),
            key(&automation.0),
            key(&ticket.0),
            now
        ])
    })
    .map_err(sql_err)?;
    Ok(true)
}

/// `save` with its names bound to the tenant's groups and types as they are now.
fn bound(conn: &Connection, tenant: TenantId, save: Save) -> DeskSql<Save> {
    Ok(save.bind(
        &groups_of_tenant(conn, tenant)?,
        &types_of_tenant(conn, tenant)?,
    ))
}

/// Creates the automation `save` checked, version 1, in the caller's job.
fn insert(
    conn: &Connection,
    tenant: TenantId,
    save: Save,
    signing_secret: Option<String>,
    by: &str,
    now: i64,
) -> DeskSql<StoredAutomation> {
    tenant_exists(conn, tenant)?;
    let holder = name_holder(conn, tenant, save.name())?;
    let save = bound(conn, tenant, save)?;
    let row = save.create(holder, mint_webhook_token)?;
    let definition = to_json(&row.automation)?;
    let id = AutomationId::new();
    fronta_engine::audit::created(&id);
    write_version(conn, tenant, id, &row, by, now)?;
    conn.prepare_cached(&format!(
        "INSERT INTO automations (id, tenant, name, definition, enabled, trigger_kind, \
         event, webhook_token, signing_secret, created_at, updated_at, \
         current_version, in_flight, refs) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13) \
         RETURNING {COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                key(&id.0),
                key(&tenant.0),
                row.name(),
                definition,
                row.enabled(),
                row.trigger_kind(),
                row.event(),
                row.webhook_token,
                signing_secret,
                now,
                row.version.current(),
                row.in_flight.as_str(),
                row.version_refs_json(),
            ],
            automation_of,
        )
    })
    .map_err(sql_err)
}

/// Saves `save` over the automation `id`, a new version when the definition changed, in
/// the caller's job.
fn update(
    conn: &Connection,
    tenant: TenantId,
    id: AutomationId,
    save: Save,
    by: &str,
    now: i64,
) -> DeskSql<StoredAutomation> {
    let current = current(conn, tenant, id)?;
    let holder = name_holder(conn, tenant, save.name())?;
    let save = bound(conn, tenant, save)?;
    let row = save.update(id, current, holder, mint_webhook_token)?;
    write_version(conn, tenant, id, &row, by, now)?;
    write_row(conn, tenant, id, &row, now)
}

/// A whole setup in one job ([`fronta_automation::setup`]): each of the plan's writes
/// in order, by the writes the single routes make; an `Err` anywhere rolls back every
/// write before it.
fn setup_apply(
    conn: &Connection,
    tenant: TenantId,
    plan: SetupPlan,
    by: &str,
    now: i64,
) -> Result<SetupApplied, SetupFailure> {
    let mut written = Vec::new();
    for (at, write) in plan.writes() {
        let done = match write {
            Write::CreateType(new) => type_insert(conn, tenant, new, now).map(Written::Type),
            Write::UpdateType {
                id,
                statuses,
                fields,
            } => type_rewrite(conn, tenant, id, None, Some(&statuses), Some(&fields))
                .map(Written::Type),
            Write::CreateGroup(new) => group_insert(conn, tenant, new, now).map(Written::Group),
            Write::AddMember {
                group,
                name,
                email,
                capacity,
                available,
            } => member_insert(conn, tenant, group, &name, email.as_deref(), capacity, now)
                .and_then(|member| setup_available(conn, tenant, member, Some(available), now))
                .map(Written::Member),
            Write::UpdateMember {
                id,
                email,
                capacity,
                available,
            } => member_rewrite(conn, tenant, id, None, email.as_deref().map(Some), capacity)
                .and_then(|member| setup_available(conn, tenant, member, available, now))
                .map(Written::Member),
            Write::CreateAutomation(wanted) => Save::check(wanted.automation)
                .and_then(|save| insert(conn, tenant, save, wanted.signing_secret, by, now))
                .map(Written::Automation),
            Write::UpdateAutomation { id, automation } => Save::check(automation)
                .and_then(|save| update(conn, tenant, id, save, by, now))
                .map(Written::Automation),
        };
        written.push(done.map_err(SetupFailure::at(at))?);
    }
    Ok(plan.applied(written))
}

#[async_trait]
impl AutomationStore for SqliteStore {
    async fn automation_create(
        &self,
        tenant: TenantId,
        automation: Automation,
        signing_secret: Option<String>,
        by: &str,
    ) -> StoreResult<StoredAutomation> {
        let save = Save::check(automation)?;
        let by = by.to_owned();
        self.desk_write(move |conn, now| insert(conn, tenant, save, signing_secret, &by, now))
            .await
    }

    async fn setup_apply(
        &self,
        tenant: TenantId,
        plan: SetupPlan,
        by: &str,
    ) -> Result<SetupApplied, SetupFailure> {
        let by = by.to_owned();
        let clock = self.inner.config.clock.clone();
        self.inner
            .writer
            .write_with(
                move |_, conn| setup_apply(conn, tenant, plan, &by, clock.now().timestamp_millis()),
                |err| SetupFailure::from(crate::desk::from_store(err)),
            )
            .await
    }

    async fn automation_get(
        &self,
        tenant: TenantId,
        id: AutomationId,
    ) -> StoreResult<StoredAutomation> {
        self.desk_read(move |conn| get(conn, tenant, id)).await
    }

    async fn automation_by_name(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> StoreResult<StoredAutomation> {
        let name = name.to_owned();
        self.desk_read(move |conn| by_name(conn, tenant, &name))
            .await
    }

    async fn automation_list(&self, tenant: TenantId) -> StoreResult<Vec<StoredAutomation>> {
        self.desk_read(move |conn| {
            many(
                conn,
                &format!("SELECT {COLUMNS} FROM automations WHERE tenant = ?1 ORDER BY name, id"),
                [key(&tenant.0)],
                automation_of,
            )
        })
        .await
    }

    async fn automation_update(
        &self,
        tenant: TenantId,
        id: AutomationId,
        automation: Automation,
        by: &str,
    ) -> StoreResult<StoredAutomation> {
        let save = Save::check(automation)?;
        let by = by.to_owned();
        self.desk_write(move |conn, now| update(conn, tenant, id, save, &by, now))
            .await
    }

    async fn automation_set_enabled(
        &self,
        tenant: TenantId,
        id: AutomationId,
        enabled: bool,
        in_flight: InFlight,
    ) -> StoreResult<StoredAutomation> {
        self.desk_write(move |conn, now| {
            let stored = get(conn, tenant, id)?;
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
                webhook_token: stored_token(conn, tenant, id)?,
                version: VersionWrite::Unchanged(version),
                in_flight,
                refs: None,
            };
            write_row(conn, tenant, id, &row, now)
        })
        .await
    }

    async fn automation_versions(
        &self,
        tenant: TenantId,
        id: AutomationId,
        before: Option<u32>,
        limit: u32,
    ) -> StoreResult<Vec<Version>> {
        self.desk_read(move |conn| {
            stored_token(conn, tenant, id)?;
            many(
                conn,
                &format!(
                    "SELECT {VERSION_COLUMNS} FROM automation_versions \
                     WHERE automation = ?1 AND tenant = ?2 AND version < ?3 \
                     ORDER BY version DESC LIMIT ?4"
                ),
                params![
                    key(&id.0),
                    key(&tenant.0),
                    before.map_or(i64::MAX, i64::from),
                    limit
                ],
                version_of,
            )
        })
        .await
    }

    async fn automation_version(
        &self,
        tenant: TenantId,
        id: AutomationId,
        version: u32,
    ) -> StoreResult<Version> {
        self.desk_read(move |conn| {
            one(
                conn,
                &format!(
                    "SELECT {VERSION_COLUMNS} FROM automation_versions \
                     WHERE automation = ?1 AND tenant = ?2 AND version = ?3"
                ),
                params![key(&id.0), key(&tenant.0), version],
                version_of,
                names::VERSION,
            )
        })
        .await
    }

    async fn automation_delete(&self, tenant: TenantId, id: AutomationId) -> StoreResult<()> {
        self.desk_write(move |conn, _| {
            stored_token(conn, tenant, id)?;
            conn.prepare_cached("DELETE FROM automation_guard WHERE automation = ?1")
                .and_then(|mut stmt| stmt.execute([key(&id.0)]))
                .map_err(sql_err)?;
            conn.prepare_cached("DELETE FROM poll_cursors WHERE automation = ?1")
                .and_then(|mut stmt| stmt.execute([key(&id.0)]))
                .map_err(sql_err)?;
            conn.prepare_cached("DELETE FROM automations WHERE tenant = ?1 AND id = ?2")
                .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), key(&id.0)]))
                .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn automation_by_webhook_token(
        &self,
        token: &str,
    ) -> StoreResult<Option<StoredAutomation>> {
        let Some(token) = webhook_lookup(token).map(str::to_owned) else {
            return Ok(None);
        };
        let now = self.inner.config.clock.now();
        self.desk_read(move |conn| {
            let current = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM automations \
                     WHERE webhook_token = ?1 AND trigger_kind = 'webhook'"
                ))
                .and_then(|mut stmt| stmt.query_row([&token], automation_of).optional())
                .map_err(sql_err)?;
            if current.is_some() {
                return Ok(current);
            }
            // An old token, kept by a rotation: found while its grace lasts.
            let retired = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM automations WHERE trigger_kind = 'webhook' AND id = \
                     (SELECT automation FROM automation_retired \
                      WHERE value = ?1 AND kind = 'webhook' LIMIT 1)"
                ))
                .and_then(|mut stmt| stmt.query_row([&token], automation_of).optional())
                .map_err(sql_err)?;
            Ok(retired.filter(|stored| rotation::answers_token(stored, &token, now)))
        })
        .await
    }

    async fn retired_purge(&self, before: DateTime<Utc>, limit: usize) -> StoreResult<u64> {
        self.desk_write(move |conn, _| {
            crate::desk::purge_batch(
                conn,
                "DELETE FROM automation_retired WHERE rowid IN \
                 (SELECT rowid FROM automation_retired WHERE expires_at <= ?1 LIMIT ?2)",
                before,
                limit,
            )
        })
        .await
    }

    async fn automation_rotate_webhook(
        &self,
        tenant: TenantId,
        id: AutomationId,
        grace: TimeDelta,
    ) -> StoreResult<StoredAutomation> {
        self.desk_write(move |conn, now| {
            rotate(conn, tenant, id, now, "webhook_token", |stored, now| {
                rotation::rotate_webhook(stored, now, grace, mint_webhook_token)
            })
        })
        .await
    }

    async fn automation_rotate_signing_secret(
        &self,
        tenant: TenantId,
        id: AutomationId,
        overlap: TimeDelta,
        secret: String,
    ) -> StoreResult<StoredAutomation> {
        self.desk_write(move |conn, now| {
            rotate(conn, tenant, id, now, "signing_secret", |stored, now| {
                rotation::rotate_signing_secret(stored, now, overlap, secret)
            })
        })
        .await
    }

    async fn automations_for_event(
        &self,
        tenant: TenantId,
        event: &str,
    ) -> StoreResult<Vec<StoredAutomation>> {
        let event = event.to_owned();
        self.desk_read(move |conn| {
            many(
                conn,
                &format!(
                    "SELECT {COLUMNS} FROM automations \
                     WHERE tenant = ?1 AND event = ?2 AND enabled = 1 ORDER BY created_at, id"
                ),
                params![key(&tenant.0), event],
                automation_of,
            )
        })
        .await
    }

    async fn automations_timed(&self) -> StoreResult<Vec<StoredAutomation>> {
        self.desk_read(move |conn| {
            many(
                conn,
                &format!(
                    "SELECT {COLUMNS} FROM automations \
                     WHERE trigger_kind IN ('poll', 'schedule') ORDER BY created_at, id"
                ),
                [],
                automation_of,
            )
        })
        .await
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
        self.desk_write(move |conn, _| guard_admit(conn, tenant, automation, ticket, guard))
            .await
    }

    async fn guard_withdraw(
        &self,
        tenant: TenantId,
        automation: AutomationId,
        ticket: TicketId,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        let at = GuardAdmission::instant(at).timestamp_millis();
        self.desk_write(move |conn, _| {
            conn.prepare_cached(
                "DELETE FROM automation_guard WHERE seq = (SELECT seq FROM automation_guard \
                 WHERE automation = ?1 AND ticket = ?2 AND at = ?3 AND tenant = ?4 LIMIT 1)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key(&automation.0),
                    key(&ticket.0),
                    at,
                    key(&tenant.0)
                ])
            })
            .map(|_| ())
            .map_err(sql_err)
        })
        .await
    }
}

/// The tenant's enabled automations listening to `event`, oldest first, each with its
/// current version: what a ticket write hands its event sink (one probe of
/// `automations_event`).
pub(crate) fn listeners(
    conn: &Connection,
    tenant: &TenantId,
    event: &str,
) -> DeskSql<Vec<Listener>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, current_version FROM automations INDEXED BY automations_event \
             WHERE tenant = ?1 AND event = ?2 AND enabled = 1 ORDER BY created_at, id",
        )
        .map_err(sql_err)?;
    let rows = stmt
        .query_map(params![key(&tenant.0), event], |row| {
            Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, u32>(1)?))
        })
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(sql_err)?;
    rows.into_iter()
        .map(|(bytes, version)| {
            uuid::Uuid::from_slice(&bytes)
                .map(|id| Listener {
                    id: AutomationId(id),
                    version,
                })
                .map_err(|err| {
                    DeskError::Internal(format!("a stored automation id is not a UUID: {err}"))
                })
        })
        .collect()
}
