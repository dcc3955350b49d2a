//! The desk port ([`fronta_desk::DeskStore`]) on SQLite: tenants and their token hashes,
//! groups and members, ticket types, tickets with their per-tenant numbers and log, and
//! incidents.
//!
//! Every rule of a write — its checks, its branches, the log lines a person reads, what it
//! announces — is a plan of [`fronta_desk::plan`]; this store reads what the plan needs,
//! calls it and writes what it says (`writes`), in the SQL of `rows`. Every write is one
//! job on the writer thread ([`crate::writer`]), so a ticket write's reads, its counter
//! bump, its row and its log line share the job's savepoint: a refusal leaves no trace and
//! concurrent calls see each other (the least-busy count includes the assignment committed
//! just before). Reads use the read pool. Every statement is scoped by the caller's
//! tenant, so another tenant's id finds nothing, exactly like an unknown one.
//!
//! Ticket events: the plan says whether a write announces (`plan::announcement`); the job
//! probes the tenant's listeners, hands the event to the store's event sink (if one is
//! installed) through [`fronta_automation::ticket_events`], and inserts the runs it answers
//! in that same job (`announce`). Unassigning the tickets of a deleted member is not
//! announced: it is a consequence of the deletion, which names no origin.
//!
//! What the plans decide where the port's contract is silent (the conformance suite pins
//! it) is written in `fronta_desk::plan`; what is this store's own: renaming a member or a
//! group is carried to their tickets in the same job, and resolving a resolved incident
//! changes nothing.

use std::collections::BTreeMap;

use async_trait::async_trait;
use fronta_automation::store::TicketEventSink;
use fronta_automation::ticket_events;
use fronta_desk::plan::{self, GroupPlan, RowWrite, TicketPlan, TypeUpdate, UpsertTarget, taken};
use fronta_desk::store::{
    AssignTo, Assignment, DeskResult, IncidentReport, TicketChange, TicketEvent, TicketFilter,
    TicketUpsert, TicketWrite,
};
use fronta_desk::token;
use fronta_desk::{
    Assignee, DeskError, DeskStore, FieldDef, Group, GroupId, Incident, IncidentId, IncidentStatus,
    Member, MemberId, Origin, Tenant, TenantId, TenantRetention, Ticket, TicketId, TicketLogEntry,
    TicketType, TicketTypeId,
};
use fronta_engine::StoreError;
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use crate::writer::WriterState;
use crate::{SqliteStore, runs};

use fronta_desk::store::names::{GROUP, INCIDENT, MEMBER, TENANT, TICKET, TICKET_TYPE};

const TENANT_COLUMNS: &str = "id, name, created_at";
const GROUP_COLUMNS: &str = "id, tenant, name";
const MEMBER_COLUMNS: &str = "id, group_id, name, email, capacity, available";
const TYPE_COLUMNS: &str = "id, tenant, name, statuses, fields";
const TICKET_COLUMNS: &str = "id, tenant, number, external_id, title, type_name, status, closed, \
    tags, assignee, assignee_name, group_name, fields, created_at, updated_at";
const INCIDENT_COLUMNS: &str = "id, tenant, cause, title, impact, detail, status, count, ticket, \
    created_at, updated_at, resolved_at";

pub(crate) type DeskSql<T> = Result<T, DeskError>;

/// The writer's and the pool's own failures, as desk errors.
pub(crate) fn from_store(err: StoreError) -> DeskError {
    fronta_automation::errors::desk_error(err)
}

/// A driver error as a desk error. Absent rows are handled where they can happen
/// (`optional()`), so a stray "no rows" here is a bug and reads as `Internal`.
pub(crate) fn sql_err(err: rusqlite::Error) -> DeskError {
    fronta_automation::errors::desk_error_of_driver(crate::map_err(err))
}

pub(crate) fn key(id: &Uuid) -> &[u8] {
    id.as_bytes().as_slice()
}

pub(crate) fn uuid_at(row: &Row<'_>, idx: usize) -> rusqlite::Result<Uuid> {
    let bytes: Vec<u8> = row.get(idx)?;
    Uuid::from_slice(&bytes)
        .map_err(|err| rusqlite::Error::FromSqlConversionFailure(idx, Type::Blob, Box::new(err)))
}

fn json_at<T: serde::de::DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text)
        .map_err(|err| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(err)))
}

pub(crate) fn instant(ms: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> DeskSql<String> {
    serde_json::to_string(value)
        .map_err(|err| DeskError::Internal(format!("cannot serialize to JSON: {err}")))
}

mod admin;
mod rows;
mod writes;

pub(crate) use admin::*;
pub(crate) use rows::*;
pub(crate) use writes::*;

// ---------------------------------------------------------------------------------------
// The port
// ---------------------------------------------------------------------------------------

impl SqliteStore {
    /// One desk write: a job on the writer thread; an `Err` rolls back all it wrote.
    pub(crate) async fn desk_write<T, F>(&self, op: F) -> DeskResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, i64) -> DeskSql<T> + Send + 'static,
    {
        let clock = self.inner.config.clock.clone();
        self.inner
            .writer
            .write_with(
                move |_, conn| op(conn, clock.now().timestamp_millis()),
                from_store,
            )
            .await
    }

    /// One ticket write: a job on the writer thread like [`desk_write`](Self::desk_write)
    /// that also announces what it did ([`announce`]): the event sink's runs are inserted
    /// in the same job, so they commit with the write or not at all.
    async fn ticket_write<F>(&self, origin: Origin, op: F) -> DeskResult<TicketWrite>
    where
        F: FnOnce(&mut WriterState, &Connection, &Origin, i64) -> DeskSql<TicketWrite>
            + Send
            + 'static,
    {
        let clock = self.inner.config.clock.clone();
        let sink = self.ticket_event_sink();
        self.inner
            .writer
            .write_with(
                move |state, conn| {
                    let now = clock.now().timestamp_millis();
                    let write = op(state, conn, &origin, now)?;
                    if let Some(sink) = sink {
                        announce(state, conn, &sink, &write, origin, now)?;
                    }
                    Ok(write)
                },
                from_store,
            )
            .await
    }

    /// One desk read, on a pooled read connection.
    pub(crate) async fn desk_read<T, F>(&self, op: F) -> DeskResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DeskSql<T> + Send + 'static,
    {
        self.read_with(move |conn, _| op(conn), from_store).await
    }
}

#[async_trait]
impl DeskStore for SqliteStore {
    async fn tenant_create(&self, name: &str) -> DeskResult<(Tenant, String)> {
        let name = name.to_owned();
        self.desk_write(move |conn, now| {
            let (tenant, first, raw) = plan::tenant_new(&name, instant(now))?;
            conn.prepare_cached(
                "INSERT INTO desk_tenants (id, name, created_at) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut stmt| stmt.execute(params![key(&tenant.id.0), tenant.name, now]))
            .map_err(sql_err)?;
            conn.prepare_cached(
                "INSERT INTO desk_tenant_tokens (hash, tenant, created_at, id, name, role) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    token::hash(&raw),
                    key(&tenant.id.0),
                    now,
                    key(&first.id.0),
                    first.name,
                    first.role.as_str()
                ])
            })
            .map_err(sql_err)?;
            fronta_engine::audit::created(&tenant.id);
            if let Some(scope) = fronta_engine::audit::current() {
                scope.set_tenant(tenant.id.0);
            }
            Ok((tenant, raw))
        })
        .await
    }

    async fn tenant_by_token(&self, token: &str) -> DeskResult<Option<Tenant>> {
        // The live token's principal (`access`): one lookup, one expiry rule.
        let principal = fronta_desk::access::AccessStore::principal_by_token(self, token).await?;
        Ok(principal.map(|principal| principal.tenant))
    }

    async fn tenant_list(&self) -> DeskResult<Vec<Tenant>> {
        self.desk_read(|conn| {
            many(
                conn,
                &format!("SELECT {TENANT_COLUMNS} FROM desk_tenants ORDER BY created_at, id"),
                [],
                tenant_of,
            )
        })
        .await
    }

    async fn tenant_retention_set(
        &self,
        tenant: TenantId,
        retention: TenantRetention,
    ) -> DeskResult<()> {
        let text = plan::retention_stored(&retention)?.map(|value| value.to_string());
        self.desk_write(move |conn, _| {
            let changed = conn
                .prepare_cached("UPDATE desk_tenants SET retention = ?1 WHERE id = ?2")
                .and_then(|mut stmt| stmt.execute(params![text, key(&tenant.0)]))
                .map_err(sql_err)?;
            if changed == 0 {
                return Err(DeskError::NotFound(TENANT));
            }
            Ok(())
        })
        .await
    }

    async fn tenant_retentions(&self) -> DeskResult<Vec<(TenantId, TenantRetention)>> {
        self.desk_read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT id, retention FROM desk_tenants WHERE retention IS NOT NULL \
                     ORDER BY created_at, id",
                )
                .map_err(sql_err)?;
            let rows = stmt
                .query_map([], |row| {
                    Ok((TenantId(uuid_at(row, 0)?), row.get::<_, String>(1)?))
                })
                .map_err(sql_err)?;
            let mut found = Vec::new();
            for row in rows {
                let (tenant, text) = row.map_err(sql_err)?;
                let retention = serde_json::from_str(&text).map_err(|err| {
                    DeskError::Internal(format!(
                        "tenant {tenant}'s retention cannot be read: {err}"
                    ))
                })?;
                found.push((tenant, retention));
            }
            Ok(found)
        })
        .await
    }

    async fn group_create(&self, tenant: TenantId, name: &str) -> DeskResult<Group> {
        let group = plan::group_new(tenant, name)?;
        self.desk_write(move |conn, now| group_insert(conn, tenant, group, now))
            .await
    }

    async fn group_list(&self, tenant: TenantId) -> DeskResult<Vec<Group>> {
        self.desk_read(move |conn| groups_of_tenant(conn, tenant))
            .await
    }

    async fn group_get(&self, tenant: TenantId, id: GroupId) -> DeskResult<Group> {
        self.desk_read(move |conn| group_get(conn, tenant, id))
            .await
    }

    async fn group_by_name(&self, tenant: TenantId, name: &str) -> DeskResult<Group> {
        let name = name.to_owned();
        self.desk_read(move |conn| group_by_name(conn, tenant, &name))
            .await
    }

    async fn group_rename(&self, tenant: TenantId, id: GroupId, name: &str) -> DeskResult<Group> {
        let name = name.to_owned();
        self.desk_write(move |conn, _| {
            let mut group = group_get(conn, tenant, id)?;
            if !plan::group_rename(&group, &name)? {
                return Ok(group);
            }
            if taken(group_by_name(conn, tenant, &name))? {
                return Err(plan::group_name_taken(&name));
            }
            crate::automations::carry_rename(
                conn,
                tenant,
                fronta_automation::refs::Kind::Group,
                id.0,
                &name,
            )?;
            conn.prepare_cached("UPDATE desk_groups SET name = ?1 WHERE id = ?2")
                .and_then(|mut stmt| stmt.execute(params![name, key(&id.0)]))
                .map_err(sql_err)?;
            // Tickets name their group: the rename is carried to them.
            conn.prepare_cached(
                "UPDATE desk_tickets SET group_name = ?1 WHERE tenant = ?2 AND group_name = ?3",
            )
            .and_then(|mut stmt| stmt.execute(params![name, key(&tenant.0), group.name]))
            .map_err(sql_err)?;
            group.name = name;
            Ok(group)
        })
        .await
    }

    async fn group_delete(&self, tenant: TenantId, id: GroupId) -> DeskResult<()> {
        self.desk_write(move |conn, now| {
            let group = group_get(conn, tenant, id)?;
            group_removable(conn, tenant, &group)?;
            for member in members_of(conn, group.id)? {
                unassign_open_tickets(conn, tenant, &member, now)?;
            }
            conn.prepare_cached("DELETE FROM desk_members WHERE group_id = ?1")
                .and_then(|mut stmt| stmt.execute([key(&id.0)]))
                .map_err(sql_err)?;
            conn.prepare_cached("DELETE FROM desk_groups WHERE id = ?1")
                .and_then(|mut stmt| stmt.execute([key(&id.0)]))
                .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn member_add(
        &self,
        tenant: TenantId,
        group: GroupId,
        name: &str,
        email: Option<&str>,
        capacity: u32,
    ) -> DeskResult<Member> {
        let name = name.to_owned();
        let email = email.map(str::to_owned);
        self.desk_write(move |conn, now| {
            member_insert(conn, tenant, group, &name, email.as_deref(), capacity, now)
        })
        .await
    }

    async fn member_list(&self, tenant: TenantId, group: GroupId) -> DeskResult<Vec<Member>> {
        self.desk_read(move |conn| {
            group_get(conn, tenant, group)?;
            members_of(conn, group)
        })
        .await
    }

    async fn member_update(
        &self,
        tenant: TenantId,
        member: MemberId,
        name: Option<&str>,
        email: Option<Option<&str>>,
        capacity: Option<u32>,
    ) -> DeskResult<Member> {
        let name = name.map(str::to_owned);
        let email = email.map(|email| email.map(str::to_owned));
        let clock = self.inner.config.clock.clone();
        self.inner
            .writer
            .write_with(
                move |state, conn| {
                    let old = member_get(conn, tenant, member)?;
                    let new = member_rewrite(
                        conn,
                        tenant,
                        member,
                        name.as_deref(),
                        email.as_ref().map(Option::as_deref),
                        capacity,
                    )?;
                    if plan::member_makes_room(&old, &new) {
                        let now = clock.now().timestamp_millis();
                        wake_group(state, conn, key(&new.group.0), now)?;
                    }
                    Ok(new)
                },
                from_store,
            )
            .await
    }

    async fn member_set_available(
        &self,
        tenant: TenantId,
        member: MemberId,
        available: bool,
    ) -> DeskResult<Member> {
        let clock = self.inner.config.clock.clone();
        self.inner
            .writer
            .write_with(
                move |state, conn| {
                    let now = clock.now().timestamp_millis();
                    member_available(state, conn, tenant, member, available, now)
                },
                from_store,
            )
            .await
    }

    async fn member_delete(&self, tenant: TenantId, member: MemberId) -> DeskResult<()> {
        self.desk_write(move |conn, now| {
            let member = member_get(conn, tenant, member)?;
            unassign_open_tickets(conn, tenant, &member, now)?;
            conn.prepare_cached("DELETE FROM desk_members WHERE id = ?1")
                .and_then(|mut stmt| stmt.execute([key(&member.id.0)]))
                .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn ticket_type_create(
        &self,
        tenant: TenantId,
        name: &str,
        statuses: &[String],
        fields: &[FieldDef],
    ) -> DeskResult<TicketType> {
        let ticket_type = plan::type_new(tenant, name, statuses, fields)?;
        self.desk_write(move |conn, now| type_insert(conn, tenant, ticket_type, now))
            .await
    }

    async fn ticket_type_list(&self, tenant: TenantId) -> DeskResult<Vec<TicketType>> {
        self.desk_read(move |conn| types_of_tenant(conn, tenant))
            .await
    }

    async fn ticket_type_get(&self, tenant: TenantId, id: TicketTypeId) -> DeskResult<TicketType> {
        self.desk_read(move |conn| type_get(conn, tenant, id)).await
    }

    async fn ticket_type_by_name(&self, tenant: TenantId, name: &str) -> DeskResult<TicketType> {
        let name = name.to_owned();
        self.desk_read(move |conn| type_by_name(conn, tenant, &name))
            .await
    }

    async fn ticket_type_update(
        &self,
        tenant: TenantId,
        id: TicketTypeId,
        name: Option<&str>,
        statuses: Option<&[String]>,
        fields: Option<&[FieldDef]>,
    ) -> DeskResult<TicketType> {
        let name = name.map(str::to_owned);
        let statuses = statuses.map(<[String]>::to_vec);
        let fields = fields.map(<[FieldDef]>::to_vec);
        self.desk_write(move |conn, _now| {
            type_rewrite(
                conn,
                tenant,
                id,
                name.as_deref(),
                statuses.as_deref(),
                fields.as_deref(),
            )
        })
        .await
    }

    async fn ticket_type_delete(&self, tenant: TenantId, id: TicketTypeId) -> DeskResult<()> {
        self.desk_write(move |conn, _| type_remove(conn, tenant, id))
            .await
    }

    async fn ticket_upsert(
        &self,
        tenant: TenantId,
        upsert: TicketUpsert,
        origin: Origin,
    ) -> DeskResult<TicketWrite> {
        self.ticket_write(origin, move |_, conn, origin, now| {
            ticket_upsert(conn, tenant, upsert, origin, now)
        })
        .await
    }

    async fn ticket_change(
        &self,
        tenant: TenantId,
        id: TicketId,
        change: TicketChange,
        origin: Origin,
    ) -> DeskResult<TicketWrite> {
        self.ticket_write(origin, move |state, conn, origin, now| {
            ticket_change(state, conn, tenant, id, change, origin, now)
        })
        .await
    }

    async fn ticket_assign(
        &self,
        tenant: TenantId,
        id: TicketId,
        group: &str,
        to: AssignTo,
        origin: Origin,
    ) -> DeskResult<Assignment> {
        let group = group.to_owned();
        let clock = self.inner.config.clock.clone();
        let sink = self.ticket_event_sink();
        self.inner
            .writer
            .write_with(
                move |state, conn| {
                    let now = clock.now().timestamp_millis();
                    let assignment =
                        ticket_assign(state, conn, tenant, id, &group, &to, &origin, now)?;
                    if let (Some(sink), Assignment::Assigned(write)) = (sink, &assignment) {
                        announce(state, conn, &sink, write, origin, now)?;
                    }
                    Ok(assignment)
                },
                from_store,
            )
            .await
    }

    async fn ticket_get(&self, tenant: TenantId, id: TicketId) -> DeskResult<Ticket> {
        self.desk_read(move |conn| ticket_get(conn, tenant, id))
            .await
    }

    async fn ticket_by_external_id(
        &self,
        tenant: TenantId,
        external_id: &str,
    ) -> DeskResult<Option<Ticket>> {
        let external_id = external_id.to_owned();
        self.desk_read(move |conn| ticket_by_external_id(conn, tenant, &external_id))
            .await
    }

    async fn member_open_counts(
        &self,
        tenant: TenantId,
        group: GroupId,
    ) -> DeskResult<BTreeMap<MemberId, i64>> {
        self.desk_read(move |conn| {
            group_get(conn, tenant, group)?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT m.id, o.open FROM desk_members m \
                     JOIN desk_member_open o ON o.member = m.id WHERE m.group_id = ?1",
                )
                .map_err(sql_err)?;
            let rows = stmt
                .query_map([key(&group.0)], |row| {
                    Ok((MemberId(uuid_at(row, 0)?), row.get::<_, i64>(1)?))
                })
                .map_err(sql_err)?;
            rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()
                .map_err(sql_err)
        })
        .await
    }

    async fn ticket_log(&self, tenant: TenantId, id: TicketId) -> DeskResult<Vec<TicketLogEntry>> {
        self.desk_read(move |conn| {
            ticket_get(conn, tenant, id)?;
            many(
                conn,
                "SELECT at, kind, message, run_id FROM desk_ticket_log WHERE ticket = ?1 ORDER BY seq",
                [key(&id.0)],
                |row| {
                    Ok(TicketLogEntry {
                        at: instant(row.get(0)?),
                        kind: row.get(1)?,
                        message: row.get(2)?,
                        run_id: row.get(3)?,
                    })
                },
            )
        })
        .await
    }

    async fn ticket_log_append(
        &self,
        tenant: TenantId,
        id: TicketId,
        entry: TicketLogEntry,
    ) -> DeskResult<()> {
        plan::check_log_line(&entry)?;
        self.desk_write(move |conn, _| {
            ticket_get(conn, tenant, id)?;
            log_insert(conn, id, &entry)
        })
        .await
    }

    async fn ticket_list(&self, tenant: TenantId, filter: TicketFilter) -> DeskResult<Vec<Ticket>> {
        self.desk_read(move |conn| ticket_list(conn, tenant, &filter))
            .await
    }

    async fn incident_report(
        &self,
        tenant: TenantId,
        report: IncidentReport,
    ) -> DeskResult<(Incident, bool)> {
        self.desk_write(move |conn, now| incident_report(conn, tenant, report, now))
            .await
    }

    async fn incident_open_all(&self) -> DeskResult<Vec<Incident>> {
        self.desk_read(move |conn| {
            many(
                conn,
                &format!(
                    "SELECT {INCIDENT_COLUMNS} FROM desk_incidents INDEXED BY desk_incidents_open_cause \
                     WHERE status = 'open' ORDER BY created_at DESC, id DESC"
                ),
                [],
                incident_of,
            )
        })
        .await
    }

    async fn incident_recent(&self, tenant: TenantId, limit: usize) -> DeskResult<Vec<Incident>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.desk_read(move |conn| {
            many(
                conn,
                &format!(
                    "SELECT {INCIDENT_COLUMNS} FROM desk_incidents WHERE tenant = ?1 \
                     ORDER BY updated_at DESC, id DESC LIMIT ?2"
                ),
                params![key(&tenant.0), limit],
                incident_of,
            )
        })
        .await
    }

    async fn incident_list(&self, tenant: Option<TenantId>) -> DeskResult<Vec<Incident>> {
        self.desk_read(move |conn| match tenant {
            Some(tenant) => many(
                conn,
                &format!(
                    "SELECT {INCIDENT_COLUMNS} FROM desk_incidents WHERE tenant = ?1 \
                     ORDER BY created_at DESC, id DESC"
                ),
                [key(&tenant.0)],
                incident_of,
            ),
            None => many(
                conn,
                &format!(
                    "SELECT {INCIDENT_COLUMNS} FROM desk_incidents ORDER BY created_at DESC, id DESC"
                ),
                [],
                incident_of,
            ),
        })
        .await
    }

    async fn incident_get(&self, tenant: Option<TenantId>, id: IncidentId) -> DeskResult<Incident> {
        self.desk_read(move |conn| incident_get(conn, tenant, id))
            .await
    }

    async fn incident_resolve(&self, tenant: TenantId, id: IncidentId) -> DeskResult<Incident> {
        self.desk_write(move |conn, now| {
            let incident = incident_get(conn, Some(tenant), id)?;
            if incident.status == IncidentStatus::Resolved {
                return Ok(incident);
            }
            conn.prepare_cached(&format!(
                "UPDATE desk_incidents SET status = 'resolved', resolved_at = ?1, updated_at = ?1 \
                 WHERE id = ?2 RETURNING {INCIDENT_COLUMNS}"
            ))
            .and_then(|mut stmt| stmt.query_row(params![now, key(&id.0)], incident_of))
            .map_err(sql_err)
        })
        .await
    }
}
