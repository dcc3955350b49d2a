//! The writes of groups, members and ticket types on SQLite, each callable inside any
//! writer job: a route's own (one write), or a whole setup's
//! ([`fronta_automation::setup`], one job for all of it).

use fronta_automation::refs::{Kind, Target};

use super::*;
use crate::automations::{carry_rename, users_of};

/// Creates `group` (planned by `plan::group_new`); a taken name is refused.
pub(crate) fn group_insert(
    conn: &Connection,
    tenant: TenantId,
    group: Group,
    now: i64,
) -> DeskSql<Group> {
    tenant_exists(conn, tenant)?;
    if taken(group_by_name(conn, tenant, &group.name))? {
        return Err(plan::group_name_taken(&group.name));
    }
    conn.prepare_cached(
        "INSERT INTO desk_groups (id, tenant, name, created_at) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut stmt| stmt.execute(params![key(&group.id.0), key(&tenant.0), group.name, now]))
    .map_err(sql_err)?;
    Ok(group)
}

/// Adds a member to `group` (planned by `plan::member_add`).
pub(crate) fn member_insert(
    conn: &Connection,
    tenant: TenantId,
    group: GroupId,
    name: &str,
    email: Option<&str>,
    capacity: u32,
    now: i64,
) -> DeskSql<Member> {
    group_get(conn, tenant, group)?;
    let member = plan::member_add(group, name, email, capacity)?;
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
}

/// Updates the member as `plan::member_update` says; a rename is carried to the tickets
/// assigned to them.
pub(crate) fn member_rewrite(
    conn: &Connection,
    tenant: TenantId,
    member: MemberId,
    name: Option<&str>,
    email: Option<Option<&str>>,
    capacity: Option<u32>,
) -> DeskSql<Member> {
    let updated = plan::member_update(member_get(conn, tenant, member)?, name, email, capacity)?;
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
    .and_then(|mut stmt| stmt.execute(params![updated.name, key(&tenant.0), key(&member.0)]))
    .map_err(sql_err)?;
    Ok(updated)
}

/// Inserts `ticket_type` (planned by `plan::type_new`) for `tenant`.
pub(crate) fn type_insert(
    conn: &Connection,
    tenant: TenantId,
    ticket_type: TicketType,
    now: i64,
) -> DeskSql<TicketType> {
    let (statuses_json, fields_json) = (
        to_json(&ticket_type.statuses)?,
        to_json(&ticket_type.fields)?,
    );
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
}

/// Updates the type `id` as `plan::type_update` says: a rename is carried to its tickets;
/// removing a status open tickets hold is refused.
pub(crate) fn type_rewrite(
    conn: &Connection,
    tenant: TenantId,
    id: TicketTypeId,
    name: Option<&str>,
    statuses: Option<&[String]>,
    fields: Option<&[FieldDef]>,
) -> DeskSql<TicketType> {
    let old = type_get(conn, tenant, id)?;
    let update = plan::type_update(&old, name, statuses, fields)?;
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
    if !removed.is_empty() {
        let others = types_of_tenant(conn, tenant)?;
        for status in &removed {
            let open: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM desk_tickets \
                     WHERE tenant = ?1 AND type_name = ?2 AND status = ?3 AND closed = 0",
                )
                .and_then(|mut stmt| {
                    stmt.query_row(params![key(&tenant.0), old.name, status], |row| row.get(0))
                })
                .map_err(sql_err)?;
            plan::removable(
                plan::Removed::Status {
                    ticket_type: &old,
                    status,
                },
                users_of(conn, tenant, Target::status(&old, status, &others))?,
                open,
            )?;
        }
    }
    if renamed {
        carry_rename(conn, tenant, Kind::TicketType, id.0, &new.name)?;
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
}

/// Deletes the ticket type `id`, unless a current automation version or an open ticket
/// uses it (`InUse`); closed tickets keep its name.
pub(crate) fn type_remove(conn: &Connection, tenant: TenantId, id: TicketTypeId) -> DeskSql<()> {
    let found = type_get(conn, tenant, id)?;
    let open: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM desk_tickets WHERE tenant = ?1 AND type_name = ?2 AND closed = 0",
        )
        .and_then(|mut stmt| stmt.query_row(params![key(&tenant.0), found.name], |row| row.get(0)))
        .map_err(sql_err)?;
    plan::removable(
        plan::Removed::TicketType(&found),
        users_of(conn, tenant, Target::TicketType(id.0))?,
        open,
    )?;
    conn.prepare_cached("DELETE FROM desk_ticket_types WHERE tenant = ?1 AND id = ?2")
        .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), key(&id.0)]))
        .map_err(sql_err)?;
    Ok(())
}

/// Refuses deleting the group `group` while a current automation version or an open
/// ticket uses it (`InUse`).
pub(crate) fn group_removable(conn: &Connection, tenant: TenantId, group: &Group) -> DeskSql<()> {
    let open: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM desk_tickets WHERE tenant = ?1 AND group_name = ?2 AND closed = 0",
        )
        .and_then(|mut stmt| stmt.query_row(params![key(&tenant.0), group.name], |row| row.get(0)))
        .map_err(sql_err)?;
    plan::removable(
        plan::Removed::Group(group),
        users_of(conn, tenant, Target::Group(group.id.0))?,
        open,
    )
}

/// A setup's `available` for a member it wrote (`None`: as it is). Making one available
/// wakes the runs waiting on their group ([`member_available`]); the setup's job raises
/// no in-process wake-up, so workers find them due at their next poll.
pub(crate) fn setup_available(
    conn: &Connection,
    tenant: TenantId,
    member: Member,
    available: Option<bool>,
    now: i64,
) -> DeskSql<Member> {
    match available {
        Some(available) if available != member.available => {
            let mut state = WriterState::default();
            member_available(&mut state, conn, tenant, member.id, available, now)
        }
        _ => Ok(member),
    }
}
