//! The ticket and incident writes of the Postgres desk store: each reads what its plan
//! needs (`fronta_desk::plan`) under the locks the parent module's docs order, calls the
//! plan, and writes the row, the log line and the runs its event triggers in one
//! transaction.

use super::*;

// ---------------------------------------------------------------------------------------
// Tickets: the writes (each decided by a plan of `fronta_desk::plan`)
// ---------------------------------------------------------------------------------------

pub(crate) async fn log_insert(
    db: &mut Db<'_>,
    ticket: TicketId,
    entry: &TicketLogEntry,
) -> DeskSql<()> {
    sqlx::query(
        "INSERT INTO desk_ticket_log (ticket, at, kind, message, run_id) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(ticket.0)
    .bind(to_millis(entry.at))
    .bind(&entry.kind)
    .bind(&entry.message)
    .bind(&entry.run_id)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(())
}

/// Write every mutable column of `ticket`. A write that moves the assignee or `closed`
/// must hold the open counts it moves ([`lock_member_open`]) before it calls this: the
/// triggers change them.
pub(crate) async fn ticket_update(db: &mut Db<'_>, ticket: &Ticket) -> DeskSql<()> {
    let (assignee_id, assignee_name) = match &ticket.assignee {
        Some(assignee) => (Some(assignee.id.0), Some(assignee.name.as_str())),
        None => (None, None),
    };
    sqlx::query(
        "UPDATE desk_tickets SET title = $1, type_name = $2, status = $3, closed = $4, tags = $5, \
         assignee = $6, assignee_name = $7, group_name = $8, fields = $9, updated_at = $10 \
         WHERE id = $11",
    )
    .bind(&ticket.title)
    .bind(&ticket.ticket_type)
    .bind(&ticket.status)
    .bind(ticket.closed)
    .bind(Json(&ticket.tags))
    .bind(assignee_id)
    .bind(assignee_name)
    .bind(&ticket.group)
    .bind(Json(&ticket.fields))
    .bind(ticket.updated_at)
    .bind(ticket.id.0)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(())
}

/// Insert `ticket` and move its tenant's counter to its number, in one statement; the
/// caller holds the counter's lock ([`lock_counter`]), which gave the number.
pub(crate) async fn ticket_insert(db: &mut Db<'_>, ticket: &Ticket) -> DeskSql<()> {
    sqlx::query(
        "WITH bumped AS (
            UPDATE desk_ticket_counters SET last_number = $3 WHERE tenant = $2
        )
        INSERT INTO desk_tickets (id, tenant, number, external_id, title, type_name, status,
                                  closed, tags, group_name, fields, created_at, updated_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, false, $8, $9, $10, $11, $11)",
    )
    .bind(ticket.id.0)
    .bind(ticket.tenant.0)
    .bind(ticket.number)
    .bind(&ticket.external_id)
    .bind(&ticket.title)
    .bind(&ticket.ticket_type)
    .bind(&ticket.status)
    .bind(Json(&ticket.tags))
    .bind(&ticket.group)
    .bind(Json(&ticket.fields))
    .bind(ticket.created_at)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(())
}

/// Whether a write has already locked the open counts its plan moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counts {
    Locked,
    ToLock,
}

/// Carry out `plan`: lock the open counts it moves (unless held), write its row, then its
/// log line; answer what the write did.
pub(crate) async fn ticket_apply(
    db: &mut Db<'_>,
    plan: TicketPlan,
    counts: Counts,
) -> DeskSql<TicketWrite> {
    if counts == Counts::ToLock && plan.row == RowWrite::Update {
        let moved: Vec<Uuid> = plan.counts_moved().iter().map(|member| member.0).collect();
        lock_member_open(db, &moved).await?;
    }
    let ticket = &plan.write.ticket;
    match plan.row {
        RowWrite::Insert => ticket_insert(db, ticket).await?,
        RowWrite::Update => ticket_update(db, ticket).await?,
        RowWrite::Keep => {}
    }
    if let Some(entry) = &plan.log {
        log_insert(db, ticket.id, entry).await?;
    }
    Ok(plan.write)
}

/// Lock the tenant's ticket counter (made with the tenant; made here if missing), which
/// orders the tenant's ticket creates, and answer the last number it gave.
pub(crate) async fn lock_counter(db: &mut Db<'_>, tenant: TenantId) -> DeskSql<i64> {
    for _ in 0..2 {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT last_number FROM desk_ticket_counters WHERE tenant = $1 FOR UPDATE",
        )
        .bind(tenant.0)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        if let Some(last) = found {
            return Ok(last);
        }
        sqlx::query(
            "INSERT INTO desk_ticket_counters (tenant, last_number) VALUES ($1, 0) \
             ON CONFLICT (tenant) DO NOTHING",
        )
        .bind(tenant.0)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    }
    Err(DeskError::Internal(format!(
        "invariant: tenant {tenant} has a ticket counter once one is inserted"
    )))
}

/// The type and group a write names must exist in the tenant; both are locked
/// `FOR SHARE` (a rename or delete of them waits for this write).
pub(crate) async fn check_references(
    db: &mut Db<'_>,
    tenant: TenantId,
    ticket_type: Option<&str>,
    group: Option<&str>,
) -> DeskSql<()> {
    if let Some(name) = ticket_type {
        type_by_name(db, tenant, name, Lock::Share).await?;
    }
    if let Some(name) = group {
        group_by_name(db, tenant, name, Lock::Share).await?;
    }
    Ok(())
}

/// The type [`plan::type_to_check`] names, if there is one, `FOR SHARE`: an update
/// removing a status waits for this write, or this write for it (and then sees the
/// status gone).
pub(crate) async fn type_for_check(
    db: &mut Db<'_>,
    tenant: TenantId,
    name: Option<&str>,
) -> DeskSql<Option<TicketType>> {
    let Some(name) = name else {
        return Ok(None);
    };
    match type_by_name(db, tenant, name, Lock::Share).await {
        Ok(found) => Ok(Some(found)),
        Err(DeskError::NotFound(_)) => Ok(None),
        Err(err) => Err(err),
    }
}

pub(crate) async fn ticket_upsert(
    db: &mut Db<'_>,
    tenant: TenantId,
    upsert: TicketUpsert,
    origin: &Origin,
) -> DeskSql<TicketWrite> {
    plan::check_upsert(&upsert)?;
    tenant_exists(db, tenant).await?;
    check_references(
        db,
        tenant,
        upsert.ticket_type.as_deref(),
        upsert.group.as_deref(),
    )
    .await?;
    let target = match ticket_by_external_id(db, tenant, &upsert.external_id, Lock::Update).await? {
        Some(found) => UpsertTarget::Existing(Box::new(found)),
        None => {
            // Not there yet: take the tenant's create lock, then look again — a create of
            // the same external id that committed while this one waited is found now.
            let last = lock_counter(db, tenant).await?;
            match ticket_by_external_id(db, tenant, &upsert.external_id, Lock::Update).await? {
                Some(found) => UpsertTarget::Existing(Box::new(found)),
                None => UpsertTarget::New {
                    tenant,
                    number: last + 1,
                },
            }
        }
    };
    let checked = target.type_to_check(&upsert);
    let ticket_type = type_for_check(db, tenant, checked).await?;
    let now = db.now().await?;
    let plan = plan::upsert(target, upsert, ticket_type.as_ref(), origin, now)?;
    ticket_apply(db, plan, Counts::ToLock).await
}

pub(crate) async fn ticket_change(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: TicketId,
    change: TicketChange,
    origin: &Origin,
) -> DeskSql<TicketWrite> {
    let old = ticket_get(db, tenant, id, Lock::Update).await?;
    plan::check_change(&change)?;
    check_references(
        db,
        tenant,
        change.ticket_type.as_deref(),
        change.group.as_ref().and_then(Option::as_deref),
    )
    .await?;
    let assignee = match change.assignee {
        Some(Some(member)) => Some(member_get(db, tenant, member, Lock::Share).await?),
        _ => None,
    };
    let checked = plan::type_to_check(Some(&old), change.ticket_type.as_deref());
    let ticket_type = type_for_check(db, tenant, checked).await?;
    let now = db.now().await?;
    let plan = plan::change(
        old,
        change,
        assignee.as_ref(),
        ticket_type.as_ref(),
        origin,
        now,
    )?;
    let room = plan.room_made();
    let write = ticket_apply(db, plan, Counts::ToLock).await?;
    wake_waiters(db, room).await?;
    Ok(write)
}

pub(crate) async fn ticket_assign(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: TicketId,
    group_name: &str,
    to: &AssignTo,
    origin: &Origin,
) -> DeskSql<Assignment> {
    let old = ticket_get(db, tenant, id, Lock::Update).await?;
    let group = group_by_name(db, tenant, group_name, Lock::Share).await?;
    let members = members_of(db, group.id, Lock::Share).await?;
    if members.is_empty() {
        return Err(plan::group_has_no_members(&group, &old));
    }
    // Lock the counts of every member this write can move — the group's and the
    // ticket's current assignee — then read the loads under that lock: an assignment on
    // this group that committed before is counted, and none can commit until this one
    // does (so no two assignments take the same last place of a member's capacity).
    let mut locked: Vec<Uuid> = members.iter().map(|member| member.id.0).collect();
    if let Some(assignee) = &old.assignee {
        locked.push(assignee.id.0);
    }
    let open: BTreeMap<MemberId, i64> = lock_member_open(db, &locked)
        .await?
        .into_iter()
        .map(|(member, count)| (MemberId(member), count))
        .collect();
    let already_waiting = match plan::waiting_run(origin) {
        Some(run) => sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM desk_group_waiters WHERE run_id = $1 AND group_id = $2)",
        )
        .bind(run)
        .bind(group.id.0)
        .fetch_one(db.c())
        .await
        .map_err(sql_err)?,
        None => false,
    };
    let now = db.now().await?;
    let planned = plan::assign_in_group(
        old,
        &group,
        &members,
        &open,
        to,
        already_waiting,
        origin,
        now,
    )?;
    match planned {
        GroupPlan::Write { plan, stop_waiting } => {
            if let Some(run) = stop_waiting {
                sqlx::query("DELETE FROM desk_group_waiters WHERE run_id = $1")
                    .bind(run)
                    .execute(db.c())
                    .await
                    .map_err(sql_err)?;
            }
            let room = plan.room_made();
            let write = ticket_apply(db, plan, Counts::Locked).await?;
            wake_waiters(db, room).await?;
            Ok(Assignment::Assigned(write))
        }
        GroupPlan::Wait {
            run,
            log,
            message,
            ticket,
        } => {
            sqlx::query(
                "INSERT INTO desk_group_waiters (run_id, tenant, group_id, since) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (run_id) DO UPDATE SET group_id = excluded.group_id, \
                 since = excluded.since WHERE desk_group_waiters.group_id <> excluded.group_id",
            )
            .bind(run)
            .bind(tenant.0)
            .bind(group.id.0)
            .bind(now)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
            if let Some(entry) = &log {
                log_insert(db, ticket.id, entry).await?;
            }
            Ok(Assignment::Waiting { ticket, message })
        }
    }
}

/// Wake the runs waiting for room in the group of `member` (a write made room there):
/// the pending ones become due now — the statement notifies `fronta_runs`, heard after
/// the commit — and the rows of runs that no longer run or wait are forgotten. Found by
/// the group's index.
pub(crate) async fn wake_waiters(db: &mut Db<'_>, member: Option<MemberId>) -> DeskSql<()> {
    let Some(member) = member else {
        return Ok(());
    };
    let group: Option<Uuid> = sqlx::query_scalar("SELECT group_id FROM desk_members WHERE id = $1")
        .bind(member.0)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
    match group {
        Some(group) => wake_group(db, group).await,
        None => Ok(()),
    }
}

/// [`wake_waiters`] for a group by its id.
pub(crate) async fn wake_group(db: &mut Db<'_>, group: Uuid) -> DeskSql<()> {
    let now = db.now().await?;
    sqlx::query(
        "WITH gone AS (
            DELETE FROM desk_group_waiters w WHERE w.group_id = $1 AND NOT EXISTS
                (SELECT 1 FROM runs r WHERE r.id = w.run_id AND r.status IN (0, 1))
        ),
        woken AS (
            UPDATE runs SET run_at = $2 WHERE status = 0 AND run_at > $2 AND id IN
                (SELECT run_id FROM desk_group_waiters WHERE group_id = $1)
            RETURNING id
        )
        SELECT pg_notify('fronta_runs', '') FROM (SELECT 1 FROM woken LIMIT 1) AS any_woken",
    )
    .bind(group)
    .bind(now)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(())
}

/// Set whether a member takes new work (their row locked); one available again wakes
/// their group.
pub(crate) async fn member_available(
    db: &mut Db<'_>,
    tenant: TenantId,
    member: MemberId,
    available: bool,
) -> DeskSql<Member> {
    let old = member_get(db, tenant, member, Lock::Update).await?;
    sqlx::query("UPDATE desk_members SET available = $1 WHERE id = $2")
        .bind(available)
        .bind(member.0)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    let new = Member {
        available,
        ..old.clone()
    };
    if plan::member_makes_room(&old, &new) {
        wake_group(db, new.group.0).await?;
    }
    Ok(new)
}

/// A setup's `available` for a member it wrote (`None`: as it is).
pub(crate) async fn setup_available(
    db: &mut Db<'_>,
    member: Member,
    available: Option<bool>,
) -> DeskSql<Member> {
    match available {
        Some(available) if available != member.available => {
            let tenant = member_tenant(db, member.id).await?;
            member_available(db, tenant, member.id, available).await
        }
        _ => Ok(member),
    }
}

/// The tenant of a member the caller just wrote.
async fn member_tenant(db: &mut Db<'_>, member: MemberId) -> DeskSql<TenantId> {
    let tenant: Uuid = sqlx::query_scalar("SELECT tenant FROM desk_members WHERE id = $1")
        .bind(member.0)
        .fetch_one(db.c())
        .await
        .map_err(sql_err)?;
    Ok(TenantId(tenant))
}

/// Unassign the open tickets of `members`, who are being deleted (their rows are locked)
/// ([`plan::unassign_for_deleted`]). Locks the tickets, then the members' open counts,
/// then writes them member by member (in the given order), ticket by ticket (by number).
pub(crate) async fn unassign_open_tickets(
    db: &mut Db<'_>,
    tenant: TenantId,
    members: &[Member],
) -> DeskSql<()> {
    if members.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = members.iter().map(|member| member.id.0).collect();
    let rows = sqlx::query(concat!(
        "SELECT ",
        ticket_columns!(),
        " FROM desk_tickets WHERE tenant = $1 AND assignee = ANY($2::uuid[]) AND NOT closed \
         ORDER BY number FOR UPDATE"
    ))
    .bind(tenant.0)
    .bind(&ids)
    .fetch_all(db.c())
    .await
    .map_err(sql_err)?;
    let tickets = rows.iter().map(ticket_of).collect::<DeskSql<Vec<_>>>()?;
    if tickets.is_empty() {
        return Ok(());
    }
    lock_member_open(db, &ids).await?;
    let now = db.now().await?;
    for member in members {
        for old in tickets.iter().filter(|ticket| {
            ticket
                .assignee
                .as_ref()
                .is_some_and(|assignee| assignee.id == member.id)
        }) {
            let plan = plan::unassign_for_deleted(old.clone(), member, now);
            ticket_apply(db, plan, Counts::Locked).await?;
        }
    }
    Ok(())
}

pub(crate) async fn ticket_list(
    db: &mut Db<'_>,
    tenant: TenantId,
    filter: &TicketFilter,
) -> DeskSql<Vec<Ticket>> {
    // Only fixed fragments go into the text; every value is a bind.
    let mut sql = String::from(concat!(
        "SELECT ",
        ticket_columns!(),
        " FROM desk_tickets WHERE tenant = $1"
    ));
    let mut next = 2;
    let mut param = |sql: &mut String, fragment: &str| {
        sql.push_str(&fragment.replace('?', &format!("${next}")));
        next += 1;
    };
    if filter.status.is_some() {
        param(&mut sql, " AND status = ?");
    }
    if filter.tag.is_some() {
        // A whole tag: a string element of the `tags` array.
        param(&mut sql, " AND tags @> jsonb_build_array(?::text)");
    }
    if filter.closed.is_some() {
        param(&mut sql, " AND closed = ?");
    }
    if filter.assignee.is_some() {
        param(&mut sql, " AND assignee = ?");
    }
    if filter.ticket_type.is_some() {
        param(&mut sql, " AND type_name = ?");
    }
    if filter.before_number.is_some() {
        param(&mut sql, " AND number < ?");
    }
    param(&mut sql, " ORDER BY number DESC LIMIT ?");
    let limit = filter.page();
    let mut query = sqlx::query(AssertSqlSafe(sql)).bind(tenant.0);
    if let Some(status) = &filter.status {
        query = query.bind(status.as_str());
    }
    if let Some(tag) = &filter.tag {
        query = query.bind(tag.as_str());
    }
    if let Some(closed) = filter.closed {
        query = query.bind(closed);
    }
    if let Some(assignee) = filter.assignee {
        query = query.bind(assignee.0);
    }
    if let Some(ticket_type) = &filter.ticket_type {
        query = query.bind(ticket_type.as_str());
    }
    if let Some(before) = filter.before_number {
        query = query.bind(before);
    }
    query = query.bind(i64::try_from(limit).unwrap_or(i64::MAX));
    let rows = query.fetch_all(db.c()).await.map_err(sql_err)?;
    rows.iter().map(ticket_of).collect()
}

// ---------------------------------------------------------------------------------------
// Incidents
// ---------------------------------------------------------------------------------------

/// How often a report retries when the open incident of its cause appears or is resolved
/// between its two statements.
pub(crate) const MAX_REPORT_ROUNDS: usize = 4;

pub(crate) async fn incident_report(
    db: &mut Db<'_>,
    tenant: TenantId,
    report: IncidentReport,
) -> DeskSql<(Incident, bool)> {
    plan::check_report(&report)?;
    tenant_exists(db, tenant).await?;
    if let Some(ticket) = report.ticket {
        ticket_get(db, tenant, ticket, Lock::None).await?;
    }
    let now = db.now().await?;
    for _ in 0..MAX_REPORT_ROUNDS {
        let repeated = sqlx::query(concat!(
            "UPDATE desk_incidents SET count = count + 1, updated_at = $1 \
             WHERE tenant = $2 AND cause = $3 AND status = 'open' RETURNING ",
            incident_columns!()
        ))
        .bind(now)
        .bind(tenant.0)
        .bind(&report.cause)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        if let Some(row) = repeated {
            return Ok((incident_of(&row)?, false));
        }
        // None open: open one, unless a concurrent report just did (the partial unique
        // index is the arbiter; then the next round counts the repeat).
        let incident = plan::incident_open(tenant, report.clone(), now);
        let opened = sqlx::query(concat!(
            "INSERT INTO desk_incidents (id, tenant, cause, title, impact, detail, status, \
             count, ticket, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'open', 1, $7, $8, $8) \
             ON CONFLICT (tenant, cause) WHERE status = 'open' DO NOTHING RETURNING ",
            incident_columns!()
        ))
        .bind(incident.id.0)
        .bind(tenant.0)
        .bind(&incident.cause)
        .bind(&incident.title)
        .bind(&incident.impact)
        .bind(&incident.detail)
        .bind(incident.ticket.map(|ticket| ticket.0))
        .bind(now)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?;
        if let Some(row) = opened {
            return Ok((incident_of(&row)?, true));
        }
    }
    Err(plan::incident_kept_changing(&report.cause))
}

// ---------------------------------------------------------------------------------------
// Ticket events
// ---------------------------------------------------------------------------------------

/// Hand what `write` did to `sink` and insert the runs it answers, inside the write's
/// transaction ([`plan::announcement`] decides whether it announces; [`ticket_events`]
/// calls the sink and names runs that cannot be inserted); an event no enabled automation
/// of the tenant listens to reaches no sink. A failure fails the whole write. Answers
/// whether a run was inserted (workers are woken after the commit).
pub(crate) async fn announce(
    db: &mut Db<'_>,
    sink: &TicketEventSink,
    write: &TicketWrite,
    origin: Origin,
) -> DeskSql<bool> {
    let Some(kind) = plan::announcement(write) else {
        return Ok(false);
    };
    // Only events somebody listens to reach the sink: one index probe.
    let listeners = crate::automations::listeners(db, write.ticket.tenant, kind.as_str()).await?;
    if listeners.is_empty() {
        return Ok(false);
    }
    let event = TicketEvent::of(write, kind, origin);
    let new_runs = ticket_events::runs_of(sink, &event, &listeners)?;
    if new_runs.is_empty() {
        return Ok(false);
    }
    let store = db.store;
    let (_, inserted) = runs::insert_many(&mut *db.conn, store.ctx(), &new_runs)
        .await
        .map_err(|err| ticket_events::not_inserted(&event, &new_runs, from_store(err)))?;
    Ok(inserted)
}
