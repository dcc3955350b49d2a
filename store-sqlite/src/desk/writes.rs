//! The ticket and incident writes of the SQLite desk store: each runs as one job on the
//! writer thread, reads what its plan needs (`fronta_desk::plan`), calls the plan, and
//! writes the row, the log line and the runs its event triggers in the job's savepoint.

use super::*;

// ---------------------------------------------------------------------------------------
// Tickets: the writes (each decided by a plan of `fronta_desk::plan`)
// ---------------------------------------------------------------------------------------

pub(crate) fn log_insert(
    conn: &Connection,
    ticket: TicketId,
    entry: &TicketLogEntry,
) -> DeskSql<()> {
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
pub(crate) fn ticket_update(conn: &Connection, ticket: &Ticket) -> DeskSql<()> {
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

pub(crate) fn ticket_insert(conn: &Connection, ticket: &Ticket) -> DeskSql<()> {
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
pub(crate) fn ticket_apply(conn: &Connection, plan: TicketPlan) -> DeskSql<TicketWrite> {
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
pub(crate) fn next_number(conn: &Connection, tenant: TenantId) -> DeskSql<i64> {
    conn.prepare_cached(
        "INSERT INTO desk_ticket_counters (tenant, last_number) VALUES (?1, 1) \
         ON CONFLICT (tenant) DO UPDATE SET last_number = last_number + 1 RETURNING last_number",
    )
    .and_then(|mut stmt| stmt.query_row([key(&tenant.0)], |row| row.get(0)))
    .map_err(sql_err)
}

/// The type and group a write names must exist in the tenant (`NotFound`).
pub(crate) fn check_references(
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
pub(crate) fn type_for_check(
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

pub(crate) fn ticket_upsert(
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
    let checked = target.type_to_check(&upsert);
    let ticket_type = type_for_check(conn, tenant, checked)?;
    let plan = plan::upsert(target, upsert, ticket_type.as_ref(), origin, instant(now))?;
    ticket_apply(conn, plan)
}

pub(crate) fn ticket_change(
    state: &mut WriterState,
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
    let checked = plan::type_to_check(Some(&old), change.ticket_type.as_deref());
    let ticket_type = type_for_check(conn, tenant, checked)?;
    let plan = plan::change(
        old,
        change,
        assignee.as_ref(),
        ticket_type.as_ref(),
        origin,
        instant(now),
    )?;
    let room = plan.room_made();
    let write = ticket_apply(conn, plan)?;
    wake_waiters(state, conn, room, now)?;
    Ok(write)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn ticket_assign(
    state: &mut WriterState,
    conn: &Connection,
    tenant: TenantId,
    id: TicketId,
    group_name: &str,
    to: &AssignTo,
    origin: &Origin,
    now: i64,
) -> DeskSql<Assignment> {
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
    let already_waiting = match plan::waiting_run(origin) {
        Some(run) => conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM desk_group_waiters WHERE run_id = ?1 AND group_id = ?2)",
            )
            .and_then(|mut stmt| {
                stmt.query_row(params![key(&run), key(&group.id.0)], |row| row.get(0))
            })
            .map_err(sql_err)?,
        None => false,
    };
    let planned = plan::assign_in_group(
        old,
        &group,
        &members,
        &open,
        to,
        already_waiting,
        origin,
        instant(now),
    )?;
    match planned {
        GroupPlan::Write { plan, stop_waiting } => {
            if let Some(run) = stop_waiting {
                conn.prepare_cached("DELETE FROM desk_group_waiters WHERE run_id = ?1")
                    .and_then(|mut stmt| stmt.execute([key(&run)]))
                    .map_err(sql_err)?;
            }
            let room = plan.room_made();
            let write = ticket_apply(conn, plan)?;
            wake_waiters(state, conn, room, now)?;
            Ok(Assignment::Assigned(write))
        }
        GroupPlan::Wait {
            run,
            log,
            message,
            ticket,
        } => {
            conn.prepare_cached(
                "INSERT INTO desk_group_waiters (run_id, tenant, group_id, since) \
                 VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (run_id) DO UPDATE SET group_id = excluded.group_id, \
                 since = excluded.since WHERE group_id <> excluded.group_id",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![key(&run), key(&tenant.0), key(&group.id.0), now])
            })
            .map_err(sql_err)?;
            if let Some(entry) = &log {
                log_insert(conn, ticket.id, entry)?;
            }
            Ok(Assignment::Waiting { ticket, message })
        }
    }
}

/// Wake the runs waiting for room in the group of `member` (a write made room there):
/// the pending ones become due now (workers are woken after the commit), and the rows
/// of runs that no longer run or wait are forgotten. Found by the group's index.
pub(crate) fn wake_waiters(
    state: &mut WriterState,
    conn: &Connection,
    member: Option<MemberId>,
    now: i64,
) -> DeskSql<()> {
    let Some(member) = member else {
        return Ok(());
    };
    let group: Option<Vec<u8>> = conn
        .prepare_cached("SELECT group_id FROM desk_members WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([key(&member.0)], |row| row.get(0))
                .optional()
        })
        .map_err(sql_err)?;
    match group {
        Some(group) => wake_group(state, conn, &group, now),
        None => Ok(()),
    }
}

/// [`wake_waiters`] for a group by its key.
pub(crate) fn wake_group(
    state: &mut WriterState,
    conn: &Connection,
    group: &[u8],
    now: i64,
) -> DeskSql<()> {
    conn.prepare_cached(
        "DELETE FROM desk_group_waiters WHERE group_id = ?1 AND NOT EXISTS \
         (SELECT 1 FROM runs WHERE runs.id = desk_group_waiters.run_id AND runs.status IN (0, 1))",
    )
    .and_then(|mut stmt| stmt.execute([group]))
    .map_err(sql_err)?;
    let woken = conn
        .prepare_cached(
            "UPDATE runs SET run_at = ?2 WHERE status = 0 AND run_at > ?2 AND id IN \
             (SELECT run_id FROM desk_group_waiters WHERE group_id = ?1)",
        )
        .and_then(|mut stmt| stmt.execute(params![group, now]))
        .map_err(sql_err)?;
    if woken > 0 {
        state.enqueued = true;
    }
    Ok(())
}

/// Set whether a member takes new work; one available again wakes their group.
pub(crate) fn member_available(
    state: &mut WriterState,
    conn: &Connection,
    tenant: TenantId,
    member: MemberId,
    available: bool,
    now: i64,
) -> DeskSql<Member> {
    let old = member_get(conn, tenant, member)?;
    conn.prepare_cached("UPDATE desk_members SET available = ?1 WHERE id = ?2")
        .and_then(|mut stmt| stmt.execute(params![available, key(&member.0)]))
        .map_err(sql_err)?;
    let new = Member {
        available,
        ..old.clone()
    };
    if plan::member_makes_room(&old, &new) {
        wake_group(state, conn, key(&new.group.0), now)?;
    }
    Ok(new)
}

/// Unassign the open tickets of `member`, who is being deleted
/// ([`plan::unassign_for_deleted`]).
pub(crate) fn unassign_open_tickets(
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

pub(crate) fn ticket_list(
    conn: &Connection,
    tenant: TenantId,
    filter: &TicketFilter,
) -> DeskSql<Vec<Ticket>> {
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

pub(crate) fn incident_report(
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
pub(crate) fn announce(
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
