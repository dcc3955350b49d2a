//! The desk port ([`fronta_desk::DeskStore`]) on SQLite: tenants and their token hashes,
//! groups and members, ticket types, tickets with their per-tenant numbers and log, and
//! incidents.
//!
//! Every write is one job on the writer thread ([`crate::writer`]): a ticket write reads
//! the row, checks the result against [`fronta_desk::rules`], bumps the tenant's counter,
//! writes the row and its log line — all in the job's savepoint, so a refusal leaves no
//! trace and concurrent calls see each other (the least-busy count includes the
//! assignment committed just before). Reads use the read pool. Every statement is scoped
//! by the caller's tenant, so another tenant's id finds nothing, exactly like an unknown
//! one.
//!
//! Ticket events: `ticket_upsert`, `ticket_change` and `ticket_assign_least_busy` build a
//! `TicketEvent` when they created the ticket or changed something, and hand it to the
//! store's event sink (if one is installed) inside their job; the runs the sink answers
//! are inserted in that same job ([`announce`]). Unassigning the tickets of a deleted
//! member is not announced: it is a consequence of the deletion, which names no origin.
//!
//! Decisions made here (the port's contract is silent on them; the conformance suite pins
//! them): a change that changes nothing writes no log line; a least-busy assignment does
//! not count the ticket being assigned (re-running it keeps a stable assignee) and always
//! logs its reasoning; deleting a member (or its group) unassigns its open tickets with a
//! log line, while closed tickets keep who handled them; renaming a member or a group is
//! carried to their tickets; a `null` custom field value removes the field; resolving a
//! resolved incident changes nothing.
//!
//! Left out: custom field values are not checked against the ticket type's field
//! definitions (the port does not ask for it yet).

use std::collections::BTreeMap;

use async_trait::async_trait;
use fronta_automation::store::TicketEventSink;
use fronta_automation::ticket_events;
pub(crate) use fronta_desk::plan::check_name;
use fronta_desk::plan::{self, RowWrite, TicketPlan, TypeUpdate, UpsertTarget, taken};
use fronta_desk::store::{
    DeskResult, IncidentReport, TicketChange, TicketEvent, TicketFilter, TicketUpsert, TicketWrite,
};
use fronta_desk::token;
use fronta_desk::{
    Assignee, DeskError, DeskStore, FieldDef, Group, GroupId, Incident, IncidentId, IncidentStatus,
    Member, MemberId, Origin, Tenant, TenantId, Ticket, TicketId, TicketLogEntry, TicketType,
    TicketTypeId,
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
const MEMBER_COLUMNS: &str = "id, group_id, name, email, capacity";
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

// ---------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------

fn tenant_of(row: &Row<'_>) -> rusqlite::Result<Tenant> {
    Ok(Tenant {
        id: TenantId(uuid_at(row, 0)?),
        name: row.get(1)?,
        created_at: instant(row.get(2)?),
    })
}

fn group_of(row: &Row<'_>) -> rusqlite::Result<Group> {
    Ok(Group {
        id: GroupId(uuid_at(row, 0)?),
        tenant: TenantId(uuid_at(row, 1)?),
        name: row.get(2)?,
    })
}

fn member_of(row: &Row<'_>) -> rusqlite::Result<Member> {
    let capacity: i64 = row.get(4)?;
    Ok(Member {
        id: MemberId(uuid_at(row, 0)?),
        group: GroupId(uuid_at(row, 1)?),
        name: row.get(2)?,
        email: row.get(3)?,
        capacity: u32::try_from(capacity).unwrap_or(u32::MAX),
    })
}

fn type_of(row: &Row<'_>) -> rusqlite::Result<TicketType> {
    Ok(TicketType {
        id: TicketTypeId(uuid_at(row, 0)?),
        tenant: TenantId(uuid_at(row, 1)?),
        name: row.get(2)?,
        statuses: json_at(row, 3)?,
        fields: json_at(row, 4)?,
    })
}

fn ticket_of(row: &Row<'_>) -> rusqlite::Result<Ticket> {
    let assignee_id: Option<Vec<u8>> = row.get(9)?;
    let assignee_name: Option<String> = row.get(10)?;
    let assignee = match (assignee_id, assignee_name) {
        (Some(_), Some(name)) => Some(Assignee {
            id: MemberId(uuid_at(row, 9)?),
            name,
        }),
        _ => None,
    };
    Ok(Ticket {
        id: TicketId(uuid_at(row, 0)?),
        tenant: TenantId(uuid_at(row, 1)?),
        number: row.get(2)?,
        external_id: row.get(3)?,
        title: row.get(4)?,
        ticket_type: row.get(5)?,
        status: row.get(6)?,
        closed: row.get::<_, i64>(7)? != 0,
        tags: json_at(row, 8)?,
        assignee,
        group: row.get(11)?,
        fields: json_at(row, 12)?,
        created_at: instant(row.get(13)?),
        updated_at: instant(row.get(14)?),
    })
}

fn incident_of(row: &Row<'_>) -> rusqlite::Result<Incident> {
    let status: String = row.get(6)?;
    let count: i64 = row.get(7)?;
    Ok(Incident {
        id: IncidentId(uuid_at(row, 0)?),
        tenant: TenantId(uuid_at(row, 1)?),
        cause: row.get(2)?,
        title: row.get(3)?,
        impact: row.get(4)?,
        detail: json_at(row, 5)?,
        status: if status == "open" {
            IncidentStatus::Open
        } else {
            IncidentStatus::Resolved
        },
        count: u32::try_from(count).unwrap_or(u32::MAX),
        ticket: row
            .get::<_, Option<Vec<u8>>>(8)?
            .map(|_| uuid_at(row, 8))
            .transpose()?
            .map(TicketId),
        created_at: instant(row.get(9)?),
        updated_at: instant(row.get(10)?),
        resolved_at: row.get::<_, Option<i64>>(11)?.map(instant),
    })
}

// ---------------------------------------------------------------------------------------
// Lookups, usable on the writer's connection and on a read connection
// ---------------------------------------------------------------------------------------

pub(crate) fn tenant_exists(conn: &Connection, tenant: TenantId) -> DeskSql<()> {
    let found: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM desk_tenants WHERE id = ?1)")
        .and_then(|mut stmt| stmt.query_row([key(&tenant.0)], |row| row.get(0)))
        .map_err(sql_err)?;
    if found {
        Ok(())
    } else {
        Err(DeskError::NotFound(TENANT))
    }
}

/// One row of `sql` (which takes `values`), or `NotFound(what)`.
pub(crate) fn one<T>(
    conn: &Connection,
    sql: &str,
    values: impl rusqlite::Params,
    map: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    what: &'static str,
) -> DeskSql<T> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.query_row(values, map).optional())
        .map_err(sql_err)?
        .ok_or(DeskError::NotFound(what))
}

pub(crate) fn many<T>(
    conn: &Connection,
    sql: &str,
    values: impl rusqlite::Params,
    map: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> DeskSql<Vec<T>> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.query_map(values, map)?.collect())
        .map_err(sql_err)
}

fn group_get(conn: &Connection, tenant: TenantId, id: GroupId) -> DeskSql<Group> {
    one(
        conn,
        &format!("SELECT {GROUP_COLUMNS} FROM desk_groups WHERE tenant = ?1 AND id = ?2"),
        params![key(&tenant.0), key(&id.0)],
        group_of,
        GROUP,
    )
}

fn group_by_name(conn: &Connection, tenant: TenantId, name: &str) -> DeskSql<Group> {
    one(
        conn,
        &format!("SELECT {GROUP_COLUMNS} FROM desk_groups WHERE tenant = ?1 AND name = ?2"),
        params![key(&tenant.0), name],
        group_of,
        GROUP,
    )
}

fn members_of(conn: &Connection, group: GroupId) -> DeskSql<Vec<Member>> {
    many(
        conn,
        &format!("SELECT {MEMBER_COLUMNS} FROM desk_members WHERE group_id = ?1 ORDER BY name, id"),
        [key(&group.0)],
        member_of,
    )
}

fn member_get(conn: &Connection, tenant: TenantId, id: MemberId) -> DeskSql<Member> {
    one(
        conn,
        &format!("SELECT {MEMBER_COLUMNS} FROM desk_members WHERE tenant = ?1 AND id = ?2"),
        params![key(&tenant.0), key(&id.0)],
        member_of,
        MEMBER,
    )
}

fn type_get(conn: &Connection, tenant: TenantId, id: TicketTypeId) -> DeskSql<TicketType> {
    one(
        conn,
        &format!("SELECT {TYPE_COLUMNS} FROM desk_ticket_types WHERE tenant = ?1 AND id = ?2"),
        params![key(&tenant.0), key(&id.0)],
        type_of,
        TICKET_TYPE,
    )
}

fn type_by_name(conn: &Connection, tenant: TenantId, name: &str) -> DeskSql<TicketType> {
    one(
        conn,
        &format!("SELECT {TYPE_COLUMNS} FROM desk_ticket_types WHERE tenant = ?1 AND name = ?2"),
        params![key(&tenant.0), name],
        type_of,
        TICKET_TYPE,
    )
}

fn ticket_get(conn: &Connection, tenant: TenantId, id: TicketId) -> DeskSql<Ticket> {
    one(
        conn,
        &format!("SELECT {TICKET_COLUMNS} FROM desk_tickets WHERE tenant = ?1 AND id = ?2"),
        params![key(&tenant.0), key(&id.0)],
        ticket_of,
        TICKET,
    )
}

fn ticket_by_external_id(
    conn: &Connection,
    tenant: TenantId,
    external_id: &str,
) -> DeskSql<Option<Ticket>> {
    conn.prepare_cached(&format!(
        "SELECT {TICKET_COLUMNS} FROM desk_tickets WHERE tenant = ?1 AND external_id = ?2"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(params![key(&tenant.0), external_id], ticket_of)
            .optional()
    })
    .map_err(sql_err)
}

fn incident_get(conn: &Connection, tenant: Option<TenantId>, id: IncidentId) -> DeskSql<Incident> {
    match tenant {
        Some(tenant) => one(
            conn,
            &format!("SELECT {INCIDENT_COLUMNS} FROM desk_incidents WHERE tenant = ?1 AND id = ?2"),
            params![key(&tenant.0), key(&id.0)],
            incident_of,
            INCIDENT,
        ),
        None => one(
            conn,
            &format!("SELECT {INCIDENT_COLUMNS} FROM desk_incidents WHERE id = ?1"),
            [key(&id.0)],
            incident_of,
            INCIDENT,
        ),
    }
}

// ---------------------------------------------------------------------------------------
// Tickets: the writes (each decided by a plan of `fronta_desk::plan`)
// ---------------------------------------------------------------------------------------

fn log_insert(conn: &Connection, ticket: TicketId, entry: &TicketLogEntry) -> DeskSql<()> {
    conn.prepare_cached(
        "INSERT INTO desk_ticket_log (ticket, at, kind, message, run_id) VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            key(&ticket.0),
            entry.at.timestamp_millis(),
            entry.kind,
            entry.message,
            entry.run_id
        ])
    })
    .map_err(sql_err)?;
    Ok(())
}

/// Write every mutable column of `ticket`.
fn ticket_update(conn: &Connection, ticket: &Ticket) -> DeskSql<()> {
    let tags = to_json(&ticket.tags)?;
    let fields = to_json(&ticket.fields)?;
    let (assignee_id, assignee_name) = match &ticket.assignee {
        Some(assignee) => (
            Some(assignee.id.0.as_bytes().to_vec()),
            Some(&assignee.name),
        ),
        None => (None, None),
    };
    conn.prepare_cached(
        "UPDATE desk_tickets SET title = ?1, type_name = ?2, status = ?3, closed = ?4, tags = ?5, \
         assignee = ?6, assignee_name = ?7, group_name = ?8, fields = ?9, updated_at = ?10 \
         WHERE id = ?11",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            ticket.title,
            ticket.ticket_type,
            ticket.status,
            ticket.closed,
            tags,
            assignee_id,
            assignee_name,
            ticket.group,
            fields,
            ticket.updated_at.timestamp_millis(),
            key(&ticket.id.0),
        ])
    })
    .map_err(sql_err)?;
    Ok(())
}

fn ticket_insert(conn: &Connection, ticket: &Ticket) -> DeskSql<()> {
    let (tags, fields) = (to_json(&ticket.tags)?, to_json(&ticket.fields)?);
    conn.prepare_cached(
        "INSERT INTO desk_tickets (id, tenant, number, external_id, title, type_name, status, \
         closed, tags, group_name, fields, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10, ?11, ?11)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            key(&ticket.id.0),
            key(&ticket.tenant.0),
            ticket.number,
            ticket.external_id,
            ticket.title,
            ticket.ticket_type,
            ticket.status,
            tags,
            ticket.group,
            fields,
            ticket.created_at.timestamp_millis(),
        ])
    })
    .map_err(sql_err)?;
    Ok(())
}

/// Carry out `plan`: its row, then its log line; answer what the write did.
fn ticket_apply(conn: &Connection, plan: TicketPlan) -> DeskSql<TicketWrite> {
    let ticket = &plan.write.ticket;
    match plan.row {
        RowWrite::Insert => ticket_insert(conn, ticket)?,
        RowWrite::Update => ticket_update(conn, ticket)?,
        RowWrite::Keep => {}
    }
    if let Some(entry) = &plan.log {
        log_insert(conn, ticket.id, entry)?;
    }
    Ok(plan.write)
}

/// The tenant's next ticket number (its counter row, created at the first ticket). A
/// write that fails after it rolls the counter back with its savepoint.
fn next_number(conn: &Connection, tenant: TenantId) -> DeskSql<i64> {
    conn.prepare_cached(
        "INSERT INTO desk_ticket_counters (tenant, last_number) VALUES (?1, 1) \
         ON CONFLICT (tenant) DO UPDATE SET last_number = last_number + 1 RETURNING last_number",
    )
    .and_then(|mut stmt| stmt.query_row([key(&tenant.0)], |row| row.get(0)))
    .map_err(sql_err)
}

/// The type and group a write names must exist in the tenant (`NotFound`).
fn check_references(
    conn: &Connection,
    tenant: TenantId,
    ticket_type: Option<&str>,
    group: Option<&str>,
) -> DeskSql<()> {
    if let Some(name) = ticket_type {
        type_by_name(conn, tenant, name)?;
    }
    if let Some(name) = group {
        group_by_name(conn, tenant, name)?;
    }
    Ok(())
}

/// The type [`plan::type_to_check`] names, if there is one.
fn type_for_check(
    conn: &Connection,
    tenant: TenantId,
    name: Option<&str>,
) -> DeskSql<Option<TicketType>> {
    name.map(|name| type_by_name(conn, tenant, name))
        .transpose()
        .or_else(|err| match err {
            DeskError::NotFound(_) => Ok(None),
            err => Err(err),
        })
}

fn ticket_upsert(
    conn: &Connection,
    tenant: TenantId,
    upsert: TicketUpsert,
    origin: &Origin,
    now: i64,
) -> DeskSql<TicketWrite> {
    plan::check_upsert(&upsert)?;
    tenant_exists(conn, tenant)?;
    check_references(
        conn,
        tenant,
        upsert.ticket_type.as_deref(),
        upsert.group.as_deref(),
    )?;
    let target = match ticket_by_external_id(conn, tenant, &upsert.external_id)? {
        Some(found) => UpsertTarget::Existing(Box::new(found)),
        None => UpsertTarget::New {
            tenant,
            number: next_number(conn, tenant)?,
        },
    };
    let current = match &target {
        UpsertTarget::Existing(found) => Some(found.as_ref()),
        UpsertTarget::New { .. } => None,
    };
    let checked = plan::type_to_check(
        current,
        upsert.status.as_deref(),
        upsert.ticket_type.as_deref(),
    );
    let ticket_type = type_for_check(conn, tenant, checked)?;
    let plan = plan::upsert(target, upsert, ticket_type.as_ref(), origin, instant(now))?;
    ticket_apply(conn, plan)
}

fn ticket_change(
    conn: &Connection,
    tenant: TenantId,
    id: TicketId,
    change: TicketChange,
    origin: &Origin,
    now: i64,
) -> DeskSql<TicketWrite> {
    let old = ticket_get(conn, tenant, id)?;
    plan::check_change(&change)?;
    check_references(
        conn,
        tenant,
        change.ticket_type.as_deref(),
        change.group.as_ref().and_then(Option::as_deref),
    )?;
    let assignee = match change.assignee {
        Some(Some(member)) => Some(member_get(conn, tenant, member)?),
        _ => None,
    };
    let checked = plan::type_to_check(
        Some(&old),
        change.status.as_deref(),
        change.ticket_type.as_deref(),
    );
    let ticket_type = type_for_check(conn, tenant, checked)?;
    let plan = plan::change(
        old,
        change,
        assignee.as_ref(),
        ticket_type.as_ref(),
        origin,
        instant(now),
    )?;
    ticket_apply(conn, plan)
}

fn ticket_assign_least_busy(
    conn: &Connection,
    tenant: TenantId,
    id: TicketId,
    group_name: &str,
    origin: &Origin,
    now: i64,
) -> DeskSql<TicketWrite> {
    let old = ticket_get(conn, tenant, id)?;
    let group = group_by_name(conn, tenant, group_name)?;
    let members = members_of(conn, group.id)?;
    let mut open = BTreeMap::new();
    for member in &members {
        let count: Option<i64> = conn
            .prepare_cached("SELECT open FROM desk_member_open WHERE member = ?1")
            .and_then(|mut stmt| {
                stmt.query_row(params![key(&member.id.0)], |row| row.get(0))
                    .optional()
            })
            .map_err(sql_err)?;
        open.insert(member.id, count.unwrap_or(0));
    }
    let plan = plan::assign_least_busy(old, &group, &members, &open, origin, instant(now))?;
    ticket_apply(conn, plan)
}

/// Unassign the open tickets of `member`, who is being deleted
/// ([`plan::unassign_for_deleted`]).
fn unassign_open_tickets(
    conn: &Connection,
    tenant: TenantId,
    member: &Member,
    now: i64,
) -> DeskSql<()> {
    let tickets = many(
        conn,
        &format!(
            "SELECT {TICKET_COLUMNS} FROM desk_tickets \
             WHERE tenant = ?1 AND assignee = ?2 AND closed = 0 ORDER BY number"
        ),
        params![key(&tenant.0), key(&member.id.0)],
        ticket_of,
    )?;
    for old in tickets {
        ticket_apply(conn, plan::unassign_for_deleted(old, member, instant(now)))?;
    }
    Ok(())
}

fn ticket_list(conn: &Connection, tenant: TenantId, filter: &TicketFilter) -> DeskSql<Vec<Ticket>> {
    use rusqlite::types::Value as SqlValue;
    let mut sql = format!("SELECT {TICKET_COLUMNS} FROM desk_tickets WHERE tenant = ?");
    let mut values: Vec<SqlValue> = vec![SqlValue::Blob(key(&tenant.0).to_vec())];
    if let Some(status) = &filter.status {
        sql.push_str(" AND status = ?");
        values.push(status.clone().into());
    }
    if let Some(tag) = &filter.tag {
        sql.push_str(
            " AND EXISTS (SELECT 1 FROM json_each(desk_tickets.tags) WHERE json_each.value = ?)",
        );
        values.push(tag.clone().into());
    }
    if let Some(closed) = filter.closed {
        sql.push_str(" AND closed = ?");
        values.push(i64::from(closed).into());
    }
    if let Some(assignee) = filter.assignee {
        sql.push_str(" AND assignee = ?");
        values.push(SqlValue::Blob(key(&assignee.0).to_vec()));
    }
    if let Some(ticket_type) = &filter.ticket_type {
        sql.push_str(" AND type_name = ?");
        values.push(ticket_type.clone().into());
    }
    if let Some(before) = filter.before_number {
        sql.push_str(" AND number < ?");
        values.push(before.into());
    }
    let limit = filter.page();
    sql.push_str(" ORDER BY number DESC LIMIT ?");
    values.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
    many(conn, &sql, rusqlite::params_from_iter(values), ticket_of)
}

// ---------------------------------------------------------------------------------------
// Incidents
// ---------------------------------------------------------------------------------------

fn incident_report(
    conn: &Connection,
    tenant: TenantId,
    report: IncidentReport,
    now: i64,
) -> DeskSql<(Incident, bool)> {
    plan::check_report(&report)?;
    tenant_exists(conn, tenant)?;
    if let Some(ticket) = report.ticket {
        ticket_get(conn, tenant, ticket)?;
    }
    let repeated = conn
        .prepare_cached(&format!(
            "UPDATE desk_incidents SET count = count + 1, updated_at = ?1 \
             WHERE tenant = ?2 AND cause = ?3 AND status = 'open' RETURNING {INCIDENT_COLUMNS}"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(params![now, key(&tenant.0), report.cause], incident_of)
                .optional()
        })
        .map_err(sql_err)?;
    if let Some(incident) = repeated {
        return Ok((incident, false));
    }
    let incident = plan::incident_open(tenant, report, instant(now));
    let detail = to_json(&incident.detail)?;
    conn.prepare_cached(
        "INSERT INTO desk_incidents (id, tenant, cause, title, impact, detail, status, count, \
         ticket, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'open', 1, ?7, ?8, ?8)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            key(&incident.id.0),
            key(&tenant.0),
            incident.cause,
            incident.title,
            incident.impact,
            detail,
            incident.ticket.map(|ticket| ticket.0.as_bytes().to_vec()),
            now,
        ])
    })
    .map_err(sql_err)?;
    Ok((incident, true))
}

// ---------------------------------------------------------------------------------------
// Ticket events
// ---------------------------------------------------------------------------------------

/// Hand what `write` did to `sink` and insert the runs it answers, inside the write's job
/// ([`plan::announcement`] decides whether it announces; [`ticket_events`] calls the sink
/// and names a run that cannot be inserted). A failure fails the whole write, which the
/// writer then rolls back.
fn announce(
    state: &mut WriterState,
    conn: &Connection,
    sink: &TicketEventSink,
    write: &TicketWrite,
    origin: Origin,
    now: i64,
) -> DeskSql<()> {
    let Some(kind) = plan::announcement(write) else {
        return Ok(());
    };
    // Only events somebody listens to reach the sink: one index probe.
    let listeners = crate::automations::listeners(conn, &write.ticket.tenant, kind.as_str())?;
    if listeners.is_empty() {
        return Ok(());
    }
    let event = TicketEvent::of(write, kind, origin);
    let new_runs = ticket_events::runs_of(sink, &event, &listeners)?;
    for run in &new_runs {
        // `insert` raises the writer's `enqueued` flag: workers wake after the commit.
        runs::insert(state, conn, run, now).map_err(|err| {
            ticket_events::not_inserted(&event, std::slice::from_ref(run), from_store(err))
        })?;
    }
    Ok(())
}

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
        F: FnOnce(&Connection, &Origin, i64) -> DeskSql<TicketWrite> + Send + 'static,
    {
        let clock = self.inner.config.clock.clone();
        let sink = self.ticket_event_sink();
        self.inner
            .writer
            .write_with(
                move |state, conn| {
                    let now = clock.now().timestamp_millis();
                    let write = op(conn, &origin, now)?;
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
        check_name(TENANT, name)?;
        let name = name.to_owned();
        self.desk_write(move |conn, now| {
            let (tenant, raw) = plan::tenant_new(&name, instant(now))?;
            conn.prepare_cached(
                "INSERT INTO desk_tenants (id, name, created_at) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut stmt| stmt.execute(params![key(&tenant.id.0), tenant.name, now]))
            .map_err(sql_err)?;
            conn.prepare_cached(
                "INSERT INTO desk_tenant_tokens (hash, tenant, created_at) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut stmt| stmt.execute(params![token::hash(&raw), key(&tenant.id.0), now]))
            .map_err(sql_err)?;
            Ok((tenant, raw))
        })
        .await
    }

    async fn tenant_by_token(&self, token: &str) -> DeskResult<Option<Tenant>> {
        let hash = token::hash(token);
        self.desk_read(move |conn| {
            conn.prepare_cached(
                "SELECT t.id, t.name, t.created_at FROM desk_tenant_tokens k \
                 JOIN desk_tenants t ON t.id = k.tenant WHERE k.hash = ?1",
            )
            .and_then(|mut stmt| stmt.query_row([hash], tenant_of).optional())
            .map_err(sql_err)
        })
        .await
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

    async fn group_create(&self, tenant: TenantId, name: &str) -> DeskResult<Group> {
        let group = plan::group_new(tenant, name)?;
        self.desk_write(move |conn, now| {
            tenant_exists(conn, tenant)?;
            if taken(group_by_name(conn, tenant, &group.name))? {
                return Err(plan::group_name_taken(&group.name));
            }
            conn.prepare_cached(
                "INSERT INTO desk_groups (id, tenant, name, created_at) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![key(&group.id.0), key(&tenant.0), group.name, now])
            })
            .map_err(sql_err)?;
            Ok(group)
        })
        .await
    }

    async fn group_list(&self, tenant: TenantId) -> DeskResult<Vec<Group>> {
        self.desk_read(move |conn| {
            many(
                conn,
                &format!(
                    "SELECT {GROUP_COLUMNS} FROM desk_groups WHERE tenant = ?1 ORDER BY name, id"
                ),
                [key(&tenant.0)],
                group_of,
            )
        })
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
            group_get(conn, tenant, group)?;
            let member = plan::member_add(group, &name, email.as_deref(), capacity)?;
            conn.prepare_cached(
                "INSERT INTO desk_members (id, tenant, group_id, name, email, capacity, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key(&member.id.0),
                    key(&tenant.0),
                    key(&group.0),
                    member.name,
                    member.email,
                    member.capacity,
                    now,
                ])
            })
            .map_err(sql_err)?;
            Ok(member)
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
        self.desk_write(move |conn, _| {
            let updated = plan::member_update(
                member_get(conn, tenant, member)?,
                name.as_deref(),
                email.as_ref().map(Option::as_deref),
                capacity,
            )?;
            conn.prepare_cached(
                "UPDATE desk_members SET name = ?1, email = ?2, capacity = ?3 WHERE id = ?4",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    updated.name,
                    updated.email,
                    updated.capacity,
                    key(&member.0)
                ])
            })
            .map_err(sql_err)?;
            // Tickets show their assignee's name: a rename is carried to them.
            conn.prepare_cached(
                "UPDATE desk_tickets SET assignee_name = ?1 WHERE tenant = ?2 AND assignee = ?3",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![updated.name, key(&tenant.0), key(&member.0)])
            })
            .map_err(sql_err)?;
            Ok(updated)
        })
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
        plan::check_type_definition(name, statuses, fields)?;
        let ticket_type = TicketType {
            id: TicketTypeId::new(),
            tenant,
            name: name.to_owned(),
            statuses: statuses.to_vec(),
            fields: fields.to_vec(),
        };
        let (statuses_json, fields_json) = (
            to_json(&ticket_type.statuses)?,
            to_json(&ticket_type.fields)?,
        );
        self.desk_write(move |conn, now| {
            tenant_exists(conn, tenant)?;
            if taken(type_by_name(conn, tenant, &ticket_type.name))? {
                return Err(plan::type_name_taken(&ticket_type.name));
            }
            conn.prepare_cached(
                "INSERT INTO desk_ticket_types (id, tenant, name, statuses, fields, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key(&ticket_type.id.0),
                    key(&tenant.0),
                    ticket_type.name,
                    statuses_json,
                    fields_json,
                    now,
                ])
            })
            .map_err(sql_err)?;
            Ok(ticket_type)
        })
        .await
    }

    async fn ticket_type_list(&self, tenant: TenantId) -> DeskResult<Vec<TicketType>> {
        self.desk_read(move |conn| {
            many(
                conn,
                &format!(
                    "SELECT {TYPE_COLUMNS} FROM desk_ticket_types WHERE tenant = ?1 \
                     ORDER BY name, id"
                ),
                [key(&tenant.0)],
                type_of,
            )
        })
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
            let old = type_get(conn, tenant, id)?;
            let update = plan::type_update(
                &old,
                name.as_deref(),
                statuses.as_deref(),
                fields.as_deref(),
            )?;
            let (new, renamed, removed) = match update {
                TypeUpdate::Unchanged(same) => return Ok(same),
                TypeUpdate::Write {
                    new,
                    renamed,
                    removed,
                } => (new, renamed, removed),
            };
            if renamed && taken(type_by_name(conn, tenant, &new.name))? {
                return Err(plan::type_name_taken(&new.name));
            }
            for removed in &removed {
                let held: i64 = conn
                    .prepare_cached(
                        "SELECT count(*) FROM desk_tickets \
                         WHERE tenant = ?1 AND type_name = ?2 AND status = ?3 AND closed = 0",
                    )
                    .and_then(|mut stmt| {
                        stmt.query_row(params![key(&tenant.0), old.name, removed], |row| row.get(0))
                    })
                    .map_err(sql_err)?;
                if held > 0 {
                    return Err(plan::status_still_held(&old.name, removed, held));
                }
            }
            let (statuses_json, fields_json) = (to_json(&new.statuses)?, to_json(&new.fields)?);
            conn.prepare_cached(
                "UPDATE desk_ticket_types SET name = ?3, statuses = ?4, fields = ?5 \
                 WHERE tenant = ?1 AND id = ?2",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key(&tenant.0),
                    key(&id.0),
                    new.name,
                    statuses_json,
                    fields_json,
                ])
            })
            .map_err(sql_err)?;
            if renamed {
                conn.prepare_cached(
                    "UPDATE desk_tickets SET type_name = ?3 WHERE tenant = ?1 AND type_name = ?2",
                )
                .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), old.name, new.name]))
                .map_err(sql_err)?;
            }
            Ok(new)
        })
        .await
    }

    async fn ticket_upsert(
        &self,
        tenant: TenantId,
        upsert: TicketUpsert,
        origin: Origin,
    ) -> DeskResult<TicketWrite> {
        self.ticket_write(origin, move |conn, origin, now| {
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
        self.ticket_write(origin, move |conn, origin, now| {
            ticket_change(conn, tenant, id, change, origin, now)
        })
        .await
    }

    async fn ticket_assign_least_busy(
        &self,
        tenant: TenantId,
        id: TicketId,
        group: &str,
        origin: Origin,
    ) -> DeskResult<TicketWrite> {
        let group = group.to_owned();
        self.ticket_write(origin, move |conn, origin, now| {
            ticket_assign_least_busy(conn, tenant, id, &group, origin, now)
        })
        .await
    }

    async fn ticket_get(&self, tenant: TenantId, id: TicketId) -> DeskResult<Ticket> {
        self.desk_read(move |conn| ticket_get(conn, tenant, id))
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
