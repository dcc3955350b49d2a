//! Rows and lookups of the SQLite desk store: each table's row as the desk's type, and
//! the lookups by id and by name, usable on the writer's connection and on a read
//! connection alike.

use super::*;

// ---------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------

pub(crate) fn tenant_of(row: &Row<'_>) -> rusqlite::Result<Tenant> {
    Ok(Tenant {
        id: TenantId(uuid_at(row, 0)?),
        name: row.get(1)?,
        created_at: instant(row.get(2)?),
    })
}

pub(crate) fn group_of(row: &Row<'_>) -> rusqlite::Result<Group> {
    Ok(Group {
        id: GroupId(uuid_at(row, 0)?),
        tenant: TenantId(uuid_at(row, 1)?),
        name: row.get(2)?,
    })
}

pub(crate) fn member_of(row: &Row<'_>) -> rusqlite::Result<Member> {
    let capacity: i64 = row.get(4)?;
    Ok(Member {
        id: MemberId(uuid_at(row, 0)?),
        group: GroupId(uuid_at(row, 1)?),
        name: row.get(2)?,
        email: row.get(3)?,
        capacity: u32::try_from(capacity).unwrap_or(u32::MAX),
        available: row.get(5)?,
    })
}

pub(crate) fn type_of(row: &Row<'_>) -> rusqlite::Result<TicketType> {
    Ok(TicketType {
        id: TicketTypeId(uuid_at(row, 0)?),
        tenant: TenantId(uuid_at(row, 1)?),
        name: row.get(2)?,
        statuses: json_at(row, 3)?,
        fields: json_at(row, 4)?,
    })
}

pub(crate) fn ticket_of(row: &Row<'_>) -> rusqlite::Result<Ticket> {
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

pub(crate) fn incident_of(row: &Row<'_>) -> rusqlite::Result<Incident> {
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

/// One batch of a retention purge: `sql` deletes at most `?2` rows older than `?1`
/// (milliseconds); the rows deleted.
pub(crate) fn purge_batch(
    conn: &Connection,
    sql: &str,
    before: chrono::DateTime<chrono::Utc>,
    limit: usize,
) -> DeskSql<u64> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| {
            stmt.execute(params![
                before.timestamp_millis(),
                i64::try_from(limit).unwrap_or(i64::MAX)
            ])
        })
        .map(|gone| gone as u64)
        .map_err(sql_err)
}

/// The tenant's groups, by name.
pub(crate) fn groups_of_tenant(conn: &Connection, tenant: TenantId) -> DeskSql<Vec<Group>> {
    many(
        conn,
        &format!("SELECT {GROUP_COLUMNS} FROM desk_groups WHERE tenant = ?1 ORDER BY name, id"),
        [key(&tenant.0)],
        group_of,
    )
}

/// The tenant's ticket types, by name.
pub(crate) fn types_of_tenant(conn: &Connection, tenant: TenantId) -> DeskSql<Vec<TicketType>> {
    many(
        conn,
        &format!(
            "SELECT {TYPE_COLUMNS} FROM desk_ticket_types WHERE tenant = ?1 ORDER BY name, id"
        ),
        [key(&tenant.0)],
        type_of,
    )
}

pub(crate) fn group_get(conn: &Connection, tenant: TenantId, id: GroupId) -> DeskSql<Group> {
    one(
        conn,
        &format!("SELECT {GROUP_COLUMNS} FROM desk_groups WHERE tenant = ?1 AND id = ?2"),
        params![key(&tenant.0), key(&id.0)],
        group_of,
        GROUP,
    )
}

pub(crate) fn group_by_name(conn: &Connection, tenant: TenantId, name: &str) -> DeskSql<Group> {
    one(
        conn,
        &format!("SELECT {GROUP_COLUMNS} FROM desk_groups WHERE tenant = ?1 AND name = ?2"),
        params![key(&tenant.0), name],
        group_of,
        GROUP,
    )
}

pub(crate) fn members_of(conn: &Connection, group: GroupId) -> DeskSql<Vec<Member>> {
    many(
        conn,
        &format!("SELECT {MEMBER_COLUMNS} FROM desk_members WHERE group_id = ?1 ORDER BY name, id"),
        [key(&group.0)],
        member_of,
    )
}

pub(crate) fn member_get(conn: &Connection, tenant: TenantId, id: MemberId) -> DeskSql<Member> {
    one(
        conn,
        &format!("SELECT {MEMBER_COLUMNS} FROM desk_members WHERE tenant = ?1 AND id = ?2"),
        params![key(&tenant.0), key(&id.0)],
        member_of,
        MEMBER,
    )
}

pub(crate) fn type_get(
    conn: &Connection,
    tenant: TenantId,
    id: TicketTypeId,
) -> DeskSql<TicketType> {
    one(
        conn,
        &format!("SELECT {TYPE_COLUMNS} FROM desk_ticket_types WHERE tenant = ?1 AND id = ?2"),
        params![key(&tenant.0), key(&id.0)],
        type_of,
        TICKET_TYPE,
    )
}

pub(crate) fn type_by_name(conn: &Connection, tenant: TenantId, name: &str) -> DeskSql<TicketType> {
    one(
        conn,
        &format!("SELECT {TYPE_COLUMNS} FROM desk_ticket_types WHERE tenant = ?1 AND name = ?2"),
        params![key(&tenant.0), name],
        type_of,
        TICKET_TYPE,
    )
}

pub(crate) fn ticket_get(conn: &Connection, tenant: TenantId, id: TicketId) -> DeskSql<Ticket> {
    one(
        conn,
        &format!("SELECT {TICKET_COLUMNS} FROM desk_tickets WHERE tenant = ?1 AND id = ?2"),
        params![key(&tenant.0), key(&id.0)],
        ticket_of,
        TICKET,
    )
}

pub(crate) fn ticket_by_external_id(
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

pub(crate) fn incident_get(
    conn: &Connection,
    tenant: Option<TenantId>,
    id: IncidentId,
) -> DeskSql<Incident> {
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
