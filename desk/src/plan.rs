//! The desk's writes as pure plans: what a store read → what to write, which log lines
//! to append and what to announce, or the domain error. Every message a person reads on a
//! ticket, every check of a request and every branch of a write is decided here, once;
//! the stores (SQLite, Postgres) read what a plan needs inside their transaction, call it
//! and write what it says. Nothing here touches storage, and nothing here knows SQL.
//!
//! The shape: a store reads (inside its transaction, with the row locks its database
//! wants) what a plan names as its input, calls the plan, and carries out the result —
//! a [`TicketPlan`] says which row to insert or update ([`RowWrite`]), the log line to
//! append, and what the write answers and announces ([`announcement`]). The store owns
//! SQL, locking and error mapping; the plan owns every message, check and branch. The
//! checks shared by every write (a text must not be blank, a name is 1–200 characters, a
//! name lookup that found a row means "taken") live at the top; the plans of each write
//! follow.
//!
//! Decisions made here where the port's contract is silent (the conformance suite pins
//! them on every store): a change that changes nothing writes no log line and announces
//! nothing; an upsert that attaches always logs the event, also when nothing changed; a
//! least-busy assignment does not count the ticket being assigned (re-running it keeps a
//! stable assignee) and always logs its reasoning; deleting a member (or its group)
//! unassigns its open tickets with a log line, while closed tickets keep who handled
//! them; a `null` custom field value removes the field.
//!
//! Custom fields are typed: a write's fields must be declared by the ticket's type with a
//! value of the declared type (a ticket without a type carries free fields); a change of
//! type drops the carried fields the new type does not take and says so on the log line.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::changes::{describe, diff, merge_fields, show, who};
use crate::model::{
    Assignee, FieldDef, Group, GroupId, Incident, IncidentId, IncidentStatus, Member, MemberId,
    Origin, Tenant, TenantId, TenantRetention, Ticket, TicketId, TicketLogEntry, TicketType,
    TicketTypeId,
};
use crate::rules::{self, Load};
use crate::store::names::{GROUP, MEMBER, TENANT, TICKET_TYPE};
use crate::store::{
    AssignTo, DeskError, DeskResult, IncidentReport, TicketChange, TicketEvent, TicketEventKind,
    TicketUpsert, TicketWrite, WhenFull,
};
use crate::store::{FieldChange, OnExisting};

/// `what` must not be empty or only white space (`Invalid`, naming `what`).
pub fn check_text(what: &str, text: &str) -> DeskResult<()> {
    if text.trim().is_empty() {
        Err(DeskError::Invalid(format!("{what} must not be empty")))
    } else {
        Ok(())
    }
}

/// A name of 1–[`rules::MAX_NAME_CHARS`] characters, not only white space (`Invalid`).
pub fn check_name(what: &str, name: &str) -> DeskResult<()> {
    rules::check_name(what, name).map_err(DeskError::Invalid)
}

/// Whether a lookup by name found a row: `NotFound` is "free", other errors pass through.
pub fn taken<T>(lookup: DeskResult<T>) -> DeskResult<bool> {
    match lookup {
        Ok(_) => Ok(true),
        Err(DeskError::NotFound(_)) => Ok(false),
        Err(err) => Err(err),
    }
}

fn invalid(message: String) -> DeskError {
    DeskError::Invalid(message)
}

// ---------------------------------------------------------------------------------------
// Tenants, groups, members
// ---------------------------------------------------------------------------------------

/// A new tenant called `name` and its first token, an admin token called `admin` (the row
/// and the secret, shown once; the store keeps only [`crate::token::hash`] of it).
pub fn tenant_new(
    name: &str,
    now: DateTime<Utc>,
) -> DeskResult<(Tenant, crate::access::ApiToken, String)> {
    check_name(TENANT, name)?;
    let tenant = Tenant {
        id: TenantId::new(),
        name: name.to_owned(),
        created_at: now,
    };
    let (first, raw) = crate::access::plan_first_token(tenant.id, now);
    Ok((tenant, first, raw))
}

/// A new group of `tenant` called `name`, checked; the store checks the name is free.
pub fn group_new(tenant: TenantId, name: &str) -> DeskResult<Group> {
    check_name(GROUP, name)?;
    let id = GroupId::new();
    fronta_engine::audit::created(&id);
    Ok(Group {
        id,
        tenant,
        name: name.to_owned(),
    })
}

/// Whether renaming `group` to `name` writes anything (`false`: the name is the same);
/// the store checks the new name is free before it writes, and carries the rename to the
/// tickets naming the group.
pub fn group_rename(group: &Group, name: &str) -> DeskResult<bool> {
    check_name(GROUP, name)?;
    Ok(group.name != name)
}

/// The refusal of a second group with `name` in a tenant.
pub fn group_name_taken(name: &str) -> DeskError {
    DeskError::Conflict(format!("group {name:?} already exists"))
}

/// The refusal of a second ticket type with `name` in a tenant.
pub fn type_name_taken(name: &str) -> DeskError {
    DeskError::Conflict(format!("ticket type {name:?} already exists"))
}

/// A member's email, when given, must not be blank.
pub fn check_email(email: Option<&str>) -> DeskResult<()> {
    match email {
        Some(email) => check_text("member email", email),
        None => Ok(()),
    }
}

/// A new member of `group`, checked.
pub fn member_add(
    group: GroupId,
    name: &str,
    email: Option<&str>,
    capacity: u32,
) -> DeskResult<Member> {
    check_name(MEMBER, name)?;
    check_email(email)?;
    let id = MemberId::new();
    fronta_engine::audit::created(&id);
    Ok(Member {
        id,
        group,
        name: name.to_owned(),
        email: email.map(str::to_owned),
        capacity,
        available: true,
    })
}

/// `old` with what a member update gives (`None` keeps a field), checked.
pub fn member_update(
    old: Member,
    name: Option<&str>,
    email: Option<Option<&str>>,
    capacity: Option<u32>,
) -> DeskResult<Member> {
    let mut new = old;
    if let Some(name) = name {
        check_name(MEMBER, name)?;
        new.name = name.to_owned();
    }
    if let Some(email) = email {
        check_email(email)?;
        new.email = email.map(str::to_owned);
    }
    if let Some(capacity) = capacity {
        new.capacity = capacity;
    }
    Ok(new)
}

// ---------------------------------------------------------------------------------------
// Ticket types
// ---------------------------------------------------------------------------------------

/// A new ticket type of `tenant`, checked ([`check_type_definition`]); the store checks
/// the name is free.
pub fn type_new(
    tenant: TenantId,
    name: &str,
    statuses: &[String],
    fields: &[FieldDef],
) -> DeskResult<TicketType> {
    check_type_definition(name, statuses, fields)?;
    let id = TicketTypeId::new();
    fronta_engine::audit::created(&id);
    Ok(TicketType {
        id,
        tenant,
        name: name.to_owned(),
        statuses: statuses.to_vec(),
        fields: fields.to_vec(),
    })
}

/// A ticket type's name, statuses and fields as a create or an update must give them:
/// names of 1–200 characters, no status and no field twice.
pub fn check_type_definition(
    name: &str,
    statuses: &[String],
    fields: &[FieldDef],
) -> DeskResult<()> {
    rules::check_type_definition(name, statuses, fields).map_err(invalid)
}

/// What a ticket type update does, once the store knows the old definition.
#[derive(Debug, Clone, PartialEq)]
pub enum TypeUpdate {
    /// The update gives what is there already: nothing to write.
    Unchanged(TicketType),
    /// Write `new`. `renamed` carries the new name to the tickets of the type; each of
    /// `removed` is a status the store must find held by no open ticket
    /// ([`removable`] otherwise) before it writes; a rename must find the new name
    /// free ([`type_name_taken`]).
    Write {
        new: TicketType,
        renamed: bool,
        removed: Vec<String>,
    },
}

/// The plan of `ticket_type_update`: `None` keeps a part; the result is checked as a
/// create is.
pub fn type_update(
    old: &TicketType,
    name: Option<&str>,
    statuses: Option<&[String]>,
    fields: Option<&[FieldDef]>,
) -> DeskResult<TypeUpdate> {
    let new = TicketType {
        id: old.id,
        tenant: old.tenant,
        name: name.map_or_else(|| old.name.clone(), str::to_owned),
        statuses: statuses.map_or_else(|| old.statuses.clone(), <[String]>::to_vec),
        fields: fields.map_or_else(|| old.fields.clone(), <[FieldDef]>::to_vec),
    };
    check_type_definition(&new.name, &new.statuses, &new.fields)?;
    if &new == old {
        return Ok(TypeUpdate::Unchanged(new));
    }
    let removed = old
        .statuses
        .iter()
        .filter(|status| !new.statuses.contains(status))
        .cloned()
        .collect();
    Ok(TypeUpdate::Write {
        renamed: new.name != old.name,
        new,
        removed,
    })
}

/// What a removal takes away, for [`removable`]'s message.
#[derive(Debug, Clone, Copy)]
pub enum Removed<'a> {
    Group(&'a Group),
    TicketType(&'a TicketType),
    /// One status of a ticket type.
    Status {
        ticket_type: &'a TicketType,
        status: &'a str,
    },
}

impl Removed<'_> {
    /// `group "support"`, `ticket type "order"`, `status "solving" of ticket type "it"`.
    pub fn describe(&self) -> String {
        match self {
            Removed::Group(group) => format!("group {:?}", group.name),
            Removed::TicketType(found) => format!("ticket type {:?}", found.name),
            Removed::Status {
                ticket_type,
                status,
            } => format!("status {status:?} of ticket type {:?}", ticket_type.name),
        }
    }
}

/// Whether `removed` may be removed: not while a current automation version names it
/// (`used_by`, from `fronta_automation::refs::users`) or `open` open tickets carry it —
/// then `InUse`, naming each automation with its steps and the count of tickets.
pub fn removable(
    removed: Removed<'_>,
    mut used_by: Vec<crate::UsedBy>,
    open: i64,
) -> DeskResult<()> {
    if used_by.is_empty() && open == 0 {
        return Ok(());
    }
    let mut parts = Vec::new();
    for user in &used_by {
        if let crate::UsedBy::Automation { name, steps, .. } = user {
            parts.push(format!("automation {name:?} (steps {})", steps.join(", ")));
        }
    }
    if open > 0 {
        parts.push(format!(
            "{open} open ticket{}",
            if open == 1 { "" } else { "s" }
        ));
        used_by.push(crate::UsedBy::Tickets { open });
    }
    Err(DeskError::InUse {
        message: format!(
            "{} cannot be removed: it is used by {}; change those first",
            removed.describe(),
            parts.join(", ")
        ),
        used_by,
    })
}

// ---------------------------------------------------------------------------------------
// Tickets
// ---------------------------------------------------------------------------------------

/// What to do with a ticket's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowWrite {
    /// Insert the planned ticket (a create).
    Insert,
    /// Write every mutable column of the planned ticket.
    Update,
    /// Leave the row as it is.
    Keep,
}

/// A ticket write, decided: the row to write, the log line to append, and what the
/// write answers (the ticket as it will be committed, `created`, the change).
#[derive(Debug, Clone, PartialEq)]
pub struct TicketPlan {
    pub row: RowWrite,
    /// Appended to the ticket's log in the same transaction.
    pub log: Option<TicketLogEntry>,
    pub write: TicketWrite,
    /// The members whose open-ticket count this write moves: a store that keeps the
    /// counts under a lock takes it for these before it writes the row.
    counts_moved: Vec<MemberId>,
    /// The member whose open count this write lowers (their ticket closed or went to
    /// somebody else): the runs waiting for room in their group are woken.
    room_made: Option<MemberId>,
}

impl TicketPlan {
    /// The members whose open-ticket count this write moves (the old and the new
    /// assignee, each once, when the assignee or `closed` changed); empty otherwise.
    pub fn counts_moved(&self) -> &[MemberId] {
        &self.counts_moved
    }

    /// The member this write makes room for (see the field): the store wakes the runs
    /// waiting on their group in the same transaction.
    pub fn room_made(&self) -> Option<MemberId> {
        self.room_made
    }

    /// What this write announces ([`announcement`]).
    pub fn announcement(&self) -> Option<TicketEventKind> {
        announcement(&self.write)
    }
}

/// The members whose open count a write from `before` to `after` moves.
fn counts_moved(before: &Ticket, after: &Ticket) -> Vec<MemberId> {
    if before.assignee == after.assignee && before.closed == after.closed {
        return Vec::new();
    }
    let mut moved: Vec<MemberId> = [&before.assignee, &after.assignee]
        .into_iter()
        .flatten()
        .map(|assignee| assignee.id)
        .collect();
    moved.dedup();
    moved
}

/// The member a write from `before` to `after` takes an open ticket from: the old
/// assignee of an open ticket that is now closed or assigned to somebody else.
fn room_made(before: &Ticket, after: &Ticket) -> Option<MemberId> {
    let old = before.assignee.as_ref().filter(|_| !before.closed)?;
    let still_holds = !after.closed && after.assignee.as_ref().is_some_and(|a| a.id == old.id);
    (!still_holds).then_some(old.id)
}

fn line(at: DateTime<Utc>, kind: &str, message: String, run_id: Option<String>) -> TicketLogEntry {
    TicketLogEntry {
        at,
        kind: kind.to_owned(),
        message,
        run_id,
    }
}

/// What a tenant's own retention is stored as: its JSON, or nothing when it says nothing
/// (the operator's everywhere).
pub fn retention_stored(retention: &TenantRetention) -> DeskResult<Option<serde_json::Value>> {
    if retention.is_empty() {
        return Ok(None);
    }
    serde_json::to_value(retention)
        .map(Some)
        .map_err(|err| DeskError::Internal(format!("a retention: {err}")))
}

/// The checks of an upsert that need no storage: a non-blank external id and title.
pub fn check_upsert(upsert: &TicketUpsert) -> DeskResult<()> {
    check_text("ticket external id", &upsert.external_id)?;
    if let Some(title) = &upsert.title {
        check_text("ticket title", title)?;
    }
    Ok(())
}

/// The name of the ticket type the result of a write must fit (its status and its custom
/// fields): the type the write sets, else the one the ticket has. The store reads it
/// (`None`: the result has no type) and hands it to the plan.
pub fn type_to_check<'a>(
    current: Option<&'a Ticket>,
    set_type: Option<&'a str>,
) -> Option<&'a str> {
    set_type.or_else(|| current.and_then(|ticket| ticket.ticket_type.as_deref()))
}

/// Fits the result of a write to its type. A status needs a type and must be one of the
/// type's statuses; every custom field the write gives (`given`, a `null` removes and is
/// not checked) must be declared by the type with a value of its type. A ticket without a
/// type carries free fields. When the write changes the type (`old_type` differs), the
/// fields the ticket carried that do not fit the new type are dropped and named in the
/// answer, `"amount" (not a field of …)`, for the log line. `ticket_type` is the type the
/// store read by [`type_to_check`] (`None`: no such type).
fn fit_ticket(
    ticket: &mut Ticket,
    old_type: Option<&str>,
    given: &BTreeMap<String, serde_json::Value>,
    ticket_type: Option<&TicketType>,
) -> DeskResult<Vec<String>> {
    let Some(type_name) = ticket.ticket_type.clone() else {
        if let Some(status) = &ticket.status {
            return Err(invalid(format!(
                "status {status:?} needs a ticket type: a ticket without a type has no statuses \
                 (set its type first)"
            )));
        }
        return Ok(Vec::new());
    };
    let given_values = given.iter().filter(|(_, value)| !value.is_null());
    let found = match ticket_type {
        Some(found) if found.name == type_name => found,
        // A ticket whose type is gone can still be changed while the change asks nothing
        // of the type.
        _ if ticket.status.is_none() && given_values.clone().next().is_none() => {
            return Ok(Vec::new());
        }
        _ => return Err(DeskError::NotFound(TICKET_TYPE)),
    };
    if let Some(status) = &ticket.status {
        rules::check_status(&found.name, &found.statuses, status).map_err(invalid)?;
    }
    for (name, value) in given_values {
        rules::check_field(found, name, value).map_err(invalid)?;
    }
    let mut dropped = Vec::new();
    if old_type != Some(type_name.as_str()) {
        ticket.fields.retain(|name, value| {
            if given.contains_key(name) {
                return true;
            }
            match rules::check_field(found, name, value) {
                Ok(()) => true,
                Err(why) => {
                    dropped.push(format!("{name:?} ({why})"));
                    false
                }
            }
        });
    }
    Ok(dropped)
}

/// The sentence a log line gets for the fields a type change dropped.
fn dropped_sentence(dropped: &[String]) -> String {
    if dropped.is_empty() {
        String::new()
    } else {
        format!("; the new type dropped fields {}", dropped.join(", "))
    }
}

/// Where an upsert lands: the ticket with its external id, or a new one with the number
/// the store reserved (under its create lock) and a fresh id.
#[derive(Debug, Clone, PartialEq)]
pub enum UpsertTarget {
    Existing(Box<Ticket>),
    New { tenant: TenantId, number: i64 },
}

impl UpsertTarget {
    /// The name of the type whose statuses the upsert's result must fit
    /// ([`type_to_check`]): the store reads it before it calls [`upsert`].
    pub fn type_to_check<'a>(&'a self, upsert: &'a TicketUpsert) -> Option<&'a str> {
        match self {
            UpsertTarget::Existing(found) => type_to_check(
                Some(found.as_ref()),
                upsert
                    .ticket_type
                    .as_deref()
                    .filter(|_| upsert.on_existing.ticket_type),
            ),
            UpsertTarget::New { .. } => type_to_check(None, upsert.ticket_type.as_deref()),
        }
    }
}

/// `ticket` with the values of `upsert` that `on` lets apply (tags added, fields merged).
fn apply_upsert(ticket: &mut Ticket, upsert: &TicketUpsert, on: OnExisting) {
    if let Some(title) = upsert.title.as_ref().filter(|_| on.title) {
        ticket.title = title.clone();
    }
    if upsert.ticket_type.is_some() && on.ticket_type {
        ticket.ticket_type = upsert.ticket_type.clone();
    }
    if upsert.status.is_some() && on.status {
        ticket.status = upsert.status.clone();
    }
    if upsert.group.is_some() && on.group {
        ticket.group = upsert.group.clone();
    }
    if on.tags {
        ticket.tags = rules::merge_tags(&ticket.tags, &upsert.tags);
    }
    if on.fields {
        merge_fields(&mut ticket.fields, &upsert.fields);
    }
}

/// The sentence an attach's log line gets for the values `on_existing` kept: `; kept
/// status shipped (the event said waiting-to-pack) — onExisting applies nothing to an
/// existing ticket`. `kept` is the change the values not applied would have made.
fn kept_sentence(kept: &BTreeMap<String, FieldChange>, on: OnExisting) -> String {
    if kept.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = kept
        .iter()
        .map(|(name, FieldChange { from, to })| {
            format!("{name} {} (the event said {})", show(from), show(to))
        })
        .collect();
    let applies = match on.names() {
        names if names.is_empty() => "applies nothing to an existing ticket".to_owned(),
        names => format!("applies only {} to an existing ticket", names.join(", ")),
    };
    format!("; kept {} — onExisting {applies}", parts.join(", "))
}

/// The plan of `ticket_upsert`. The store has checked [`check_upsert`], that the tenant
/// and the type and group the upsert names exist, found the target, and read the type of
/// [`type_to_check`].
pub fn upsert(
    target: UpsertTarget,
    upsert: TicketUpsert,
    ticket_type: Option<&TicketType>,
    origin: &Origin,
    now: DateTime<Utc>,
) -> DeskResult<TicketPlan> {
    let (by, run_id) = who(origin);
    let old = match target {
        UpsertTarget::New { tenant, number } => {
            return create(tenant, number, upsert, ticket_type, &by, run_id, now);
        }
        UpsertTarget::Existing(old) => *old,
    };
    let on = upsert.on_existing;
    let mut new = old.clone();
    apply_upsert(&mut new, &upsert, on);
    // What the values `on` does not let apply would have changed, for the log line.
    let mut everything = new.clone();
    apply_upsert(&mut everything, &upsert, OnExisting::ALL);
    let kept = diff(&new, &everything);
    let no_fields = BTreeMap::new();
    let given = if on.fields {
        &upsert.fields
    } else {
        &no_fields
    };
    let dropped = fit_ticket(&mut new, old.ticket_type.as_deref(), given, ticket_type)?;
    let change = diff(&old, &new);
    let row = if change.is_empty() {
        RowWrite::Keep
    } else {
        new.updated_at = now;
        RowWrite::Update
    };
    let event = upsert
        .note
        .unwrap_or_else(|| format!("event for external id {}", upsert.external_id));
    let outcome = if change.is_empty() {
        "nothing changed".to_owned()
    } else {
        describe(&change)
    };
    let message = format!(
        "{event}: attached to {} by {by}; {outcome}{}{}",
        new.human_id(),
        dropped_sentence(&dropped),
        kept_sentence(&kept, on)
    );
    let moved = counts_moved(&old, &new);
    let room = room_made(&old, &new);
    Ok(TicketPlan {
        row,
        log: Some(line(now, "event", message, run_id)),
        write: TicketWrite {
            ticket: new,
            created: false,
            change,
        },
        counts_moved: moved,
        room_made: room,
    })
}

fn create(
    tenant: TenantId,
    number: i64,
    upsert: TicketUpsert,
    ticket_type: Option<&TicketType>,
    by: &str,
    run_id: Option<String>,
    now: DateTime<Utc>,
) -> DeskResult<TicketPlan> {
    let mut fields = BTreeMap::new();
    merge_fields(&mut fields, &upsert.fields);
    let mut ticket = Ticket {
        id: TicketId::new(),
        tenant,
        number,
        title: upsert.title.unwrap_or_else(|| upsert.external_id.clone()),
        external_id: Some(upsert.external_id),
        ticket_type: upsert.ticket_type,
        status: upsert.status,
        closed: false,
        tags: rules::merge_tags(&[], &upsert.tags),
        assignee: None,
        group: upsert.group,
        fields,
        created_at: now,
        updated_at: now,
    };
    fit_ticket(&mut ticket, None, &upsert.fields, ticket_type)?;
    let mut parts = vec![format!("title {}", ticket.title)];
    if let Some(external_id) = &ticket.external_id {
        parts.push(format!("external id {external_id}"));
    }
    parts.extend(carried(&ticket));
    let mut message = format!(
        "{} created by {by}: {}",
        ticket.human_id(),
        parts.join("; ")
    );
    if let Some(note) = &upsert.note {
        message.push_str(&format!(" (event: {note})"));
    }
    Ok(TicketPlan {
        row: RowWrite::Insert,
        log: Some(line(now, "created", message, run_id)),
        write: TicketWrite {
            ticket,
            created: true,
            change: BTreeMap::new(),
        },
        counts_moved: Vec::new(),
        room_made: None,
    })
}

/// What a new ticket carries, as its creation's log line names it: `type order`, `status
/// new`, `group warehouse`, `tags [a, b]`, `fields {…}` (those it has).
pub fn carried(ticket: &Ticket) -> Vec<String> {
    let mut parts = Vec::new();
    for (name, value) in [
        ("type", &ticket.ticket_type),
        ("status", &ticket.status),
        ("group", &ticket.group),
    ] {
        if let Some(value) = value {
            parts.push(format!("{name} {value}"));
        }
    }
    if !ticket.tags.is_empty() {
        parts.push(format!("tags [{}]", ticket.tags.join(", ")));
    }
    if !ticket.fields.is_empty() {
        let fields: serde_json::Map<String, serde_json::Value> = ticket
            .fields
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        parts.push(format!("fields {}", serde_json::Value::Object(fields)));
    }
    parts
}

/// The checks of a change that need no storage: a title, when given, is not blank.
pub fn check_change(change: &TicketChange) -> DeskResult<()> {
    match &change.title {
        Some(title) => check_text("ticket title", title),
        None => Ok(()),
    }
}

/// The plan of `ticket_change`. The store has checked [`check_change`] and that the type
/// and group the change names exist, read the ticket (`old`), the member the change
/// assigns (`assignee`: `Some` exactly when `change.assignee` is `Some(Some(_))`), and the
/// type of [`type_to_check`].
pub fn change(
    old: Ticket,
    change: TicketChange,
    assignee: Option<&Member>,
    ticket_type: Option<&TicketType>,
    origin: &Origin,
    now: DateTime<Utc>,
) -> DeskResult<TicketPlan> {
    check_change(&change)?;
    let mut new = old.clone();
    if let Some(title) = change.title {
        new.title = title;
    }
    if change.ticket_type.is_some() {
        new.ticket_type = change.ticket_type;
    }
    if change.status.is_some() {
        new.status = change.status;
    }
    if let Some(closed) = change.closed {
        new.closed = closed;
    }
    if let Some(tags) = &change.set_tags {
        new.tags = rules::merge_tags(&[], tags);
    }
    new.tags = rules::merge_tags(&new.tags, &change.add_tags);
    match change.assignee {
        Some(Some(wanted)) => {
            let member = assignee
                .filter(|member| member.id == wanted)
                .ok_or(DeskError::NotFound(MEMBER))?;
            new.assignee = Some(Assignee {
                id: member.id,
                name: member.name.clone(),
            });
        }
        Some(None) => new.assignee = None,
        None => {}
    }
    if let Some(group) = change.group {
        new.group = group;
    }
    merge_fields(&mut new.fields, &change.fields);
    let dropped = fit_ticket(
        &mut new,
        old.ticket_type.as_deref(),
        &change.fields,
        ticket_type,
    )?;
    let change = diff(&old, &new);
    if change.is_empty() {
        return Ok(TicketPlan {
            row: RowWrite::Keep,
            log: None,
            write: TicketWrite {
                ticket: old,
                created: false,
                change,
            },
            counts_moved: Vec::new(),
            room_made: None,
        });
    }
    new.updated_at = now;
    let (by, run_id) = who(origin);
    let message = format!(
        "{} changed by {by}: {}{}",
        new.human_id(),
        describe(&change),
        dropped_sentence(&dropped)
    );
    let moved = counts_moved(&old, &new);
    let room = room_made(&old, &new);
    Ok(TicketPlan {
        row: RowWrite::Update,
        log: Some(line(now, "changed", message, run_id)),
        write: TicketWrite {
            ticket: new,
            created: false,
            change,
        },
        counts_moved: moved,
        room_made: room,
    })
}

/// The refusal of a least-busy assignment to a group nobody is in.
pub fn group_has_no_members(group: &Group, ticket: &Ticket) -> DeskError {
    invalid(format!(
        "group {:?} has no members to assign {} to",
        group.name,
        ticket.human_id()
    ))
}

/// The loads least busy weighs for assigning `old`: each member's open count, less the
/// ticket itself where that member holds it (see [`assign_least_busy`]).
pub fn loads_for<'a>(
    old: &Ticket,
    members: &'a [Member],
    open: &BTreeMap<MemberId, i64>,
) -> Vec<Load<'a>> {
    members
        .iter()
        .map(|member| {
            let count = open.get(&member.id).copied().unwrap_or(0);
            let holds_this_one = !old.closed
                && old
                    .assignee
                    .as_ref()
                    .is_some_and(|assignee| assignee.id == member.id);
            let count = count - i64::from(holds_this_one);
            Load {
                member,
                open: u32::try_from(count.max(0)).unwrap_or(u32::MAX),
            }
        })
        .collect()
}

/// The loads as a log line reads them: `Eva 0 open of 5, Jan 1 open of 5 (away)`.
pub fn reasoning(loads: &[Load<'_>]) -> String {
    loads
        .iter()
        .map(|load| {
            format!(
                "{} {} open of {}{}",
                load.member.name,
                load.open,
                load.member.capacity,
                if load.member.available { "" } else { " (away)" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How full a group is, as a person reads it: `3 of 3 members full`, `2 of 3 members
/// full, 1 away` (a member away is not counted full).
pub fn room_summary(loads: &[Load<'_>]) -> String {
    let away = loads.iter().filter(|load| !load.member.available).count();
    let full = loads
        .iter()
        .filter(|load| load.member.available && !rules::has_room(load))
        .count();
    let mut text = format!("{full} of {} members full", loads.len());
    if away > 0 {
        text.push_str(&format!(", {away} away"));
    }
    text
}

/// The run a waiting assignment registers: the automation run of `origin` (a person's
/// assignment has none, so it cannot wait).
pub fn waiting_run(origin: &Origin) -> Option<uuid::Uuid> {
    match origin {
        Origin::Automation { run_id, .. } => run_id.parse().ok(),
        Origin::Person => None,
    }
}

/// What an assignment within a group does ([`assign_in_group`]).
#[derive(Debug, Clone, PartialEq)]
pub enum GroupPlan {
    /// Write this plan; `stop_waiting` is the run whose waiting row the store deletes
    /// (the caller's run, when it is one: its wait, if any, is over).
    Write {
        plan: TicketPlan,
        stop_waiting: Option<uuid::Uuid>,
    },
    /// Nobody has room and the run waits: the store writes `run` to the group's waiting
    /// runs (keeping `since` when it is there already) and appends `log` when it is
    /// `Some` (the first time this run waits on the group), then answers
    /// `Assignment::Waiting` with `message`.
    Wait {
        run: uuid::Uuid,
        log: Option<TicketLogEntry>,
        message: String,
        ticket: Ticket,
    },
}

/// The plan of `ticket_assign`: `members` are the group's, `open` their open ticket
/// counts as the store read them under its lock (a member without a count has none),
/// `already_waiting` whether the caller's run ([`waiting_run`]) is among the group's
/// waiting runs. The ticket being assigned does not count against anybody: re-running
/// the step keeps the same assignee instead of moving the ticket back and forth. The
/// reasoning is always logged, also when the assignee stays.
///
/// Least busy picks among the available members below their capacity
/// ([`rules::has_room`]); when there is none, [`WhenFull`] decides: wait (an automation's
/// run only; a person's assignment cannot wait and is refused as by `Fail`), fail
/// (`Invalid`: "every member of group … is full"), or assign anyway to the least busy
/// available member whose capacity is not 0 (none: `Invalid`). A named member is assigned whatever
/// their room or availability — a person decided — and the log line says when they are
/// away or full; a name outside the group is `Invalid`, naming it and the members.
#[allow(clippy::too_many_arguments)]
pub fn assign_in_group(
    old: Ticket,
    group: &Group,
    members: &[Member],
    open: &BTreeMap<MemberId, i64>,
    to: &AssignTo,
    already_waiting: bool,
    origin: &Origin,
    now: DateTime<Utc>,
) -> DeskResult<GroupPlan> {
    if members.is_empty() {
        return Err(group_has_no_members(group, &old));
    }
    let loads = loads_for(&old, members, open);
    let reasoning = reasoning(&loads);
    let stop_waiting = waiting_run(origin);
    let write = |plan| GroupPlan::Write { plan, stop_waiting };
    let when_full = match to {
        AssignTo::Member(name) => {
            let Some(load) = loads.iter().find(|load| &load.member.name == name) else {
                let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
                return Err(invalid(format!(
                    "{name:?} is not a member of group {:?} (its members: {})",
                    group.name,
                    names.join(", ")
                )));
            };
            let why = if !load.member.available {
                format!("named, although {} is away ({reasoning})", load.member.name)
            } else if !rules::has_room(load) {
                format!(
                    "named, although {} is at capacity ({reasoning})",
                    load.member.name
                )
            } else {
                format!("named ({reasoning})")
            };
            return Ok(write(assigned(old, group, load.member, &why, origin, now)));
        }
        AssignTo::LeastBusy(when_full) => *when_full,
    };
    let with_room: Vec<Load<'_>> = loads
        .iter()
        .filter(|load| load.member.available && rules::has_room(load))
        .cloned()
        .collect();
    if let Some(chosen) = rules::least_busy(&with_room) {
        let why = format!("least busy in group {} ({reasoning})", group.name);
        return Ok(write(assigned(old, group, chosen, &why, origin, now)));
    }
    let summary = room_summary(&loads);
    let full_or_away = if loads.iter().all(|load| load.member.available) {
        "full"
    } else {
        "full or away"
    };
    match (when_full, waiting_run(origin)) {
        (WhenFull::AssignAnyway, _) => {
            // Capacity 0 is "takes no new work": not even past capacity.
            let available: Vec<Load<'_>> = loads
                .iter()
                .filter(|load| load.member.available && load.member.capacity > 0)
                .cloned()
                .collect();
            let Some(chosen) = rules::least_busy(&available) else {
                return Err(invalid(format!(
                    "nobody in group {:?} is available to assign {} to ({reasoning})",
                    group.name,
                    old.human_id()
                )));
            };
            let why = format!(
                "least busy in group {}, assigned anyway although every available member is full ({reasoning})",
                group.name
            );
            Ok(write(assigned(old, group, chosen, &why, origin, now)))
        }
        (WhenFull::Wait, Some(run)) => {
            let message = format!(
                "waiting for room in {}: {summary} ({reasoning})",
                group.name
            );
            let (by, run_id) = who(origin);
            let log = (!already_waiting).then(|| {
                line(
                    now,
                    "note",
                    format!(
                        "{} {message}; {by} is woken when a ticket of the group closes or moves",
                        old.human_id()
                    ),
                    run_id,
                )
            });
            Ok(GroupPlan::Wait {
                run,
                log,
                message,
                ticket: old,
            })
        }
        (WhenFull::Fail | WhenFull::Wait, _) => Err(invalid(format!(
            "every member of group {:?} is {full_or_away}: {summary} ({reasoning}); {} is \
             not assigned",
            group.name,
            old.human_id()
        ))),
    }
}

/// `old` given to `chosen` of `group`, `why` saying how it was chosen; a note when the
/// assignee stays.
fn assigned(
    old: Ticket,
    group: &Group,
    chosen: &Member,
    why: &str,
    origin: &Origin,
    now: DateTime<Utc>,
) -> TicketPlan {
    let mut new = old.clone();
    new.assignee = Some(Assignee {
        id: chosen.id,
        name: chosen.name.clone(),
    });
    new.group = Some(group.name.clone());
    let change = diff(&old, &new);
    let (by, run_id) = who(origin);
    if change.is_empty() {
        let why = why
            .strip_prefix("least busy")
            .map_or_else(|| why.to_owned(), |rest| format!("the least busy{rest}"));
        let message = format!(
            "{} stays with {}, still {why}; checked by {by}",
            old.human_id(),
            chosen.name,
        );
        return TicketPlan {
            row: RowWrite::Keep,
            log: Some(line(now, "note", message, run_id)),
            write: TicketWrite {
                ticket: old,
                created: false,
                change,
            },
            counts_moved: Vec::new(),
            room_made: None,
        };
    }
    new.updated_at = now;
    let message = format!(
        "{} assigned to {} by {by}: {why}; {}",
        new.human_id(),
        chosen.name,
        describe(&change)
    );
    let moved = counts_moved(&old, &new);
    let room = room_made(&old, &new);
    TicketPlan {
        row: RowWrite::Update,
        log: Some(line(now, "changed", message, run_id)),
        write: TicketWrite {
            ticket: new,
            created: false,
            change,
        },
        counts_moved: moved,
        room_made: room,
    }
}

/// The plan of the least-busy assignment that assigns anyway when everybody is full
/// (`ticket_assign_least_busy`); see [`assign_in_group`].
pub fn assign_least_busy(
    old: Ticket,
    group: &Group,
    members: &[Member],
    open: &BTreeMap<MemberId, i64>,
    origin: &Origin,
    now: DateTime<Utc>,
) -> DeskResult<TicketPlan> {
    let to = AssignTo::LeastBusy(WhenFull::AssignAnyway);
    match assign_in_group(old, group, members, open, &to, false, origin, now)? {
        GroupPlan::Write { plan, .. } => Ok(plan),
        GroupPlan::Wait { .. } => Err(DeskError::Internal(
            "invariant: an assignment that assigns anyway never waits".into(),
        )),
    }
}

/// Whether a member's change may make room in their group (available again, or a
/// larger capacity): then the runs waiting on the group are woken.
pub fn member_makes_room(old: &Member, new: &Member) -> bool {
    new.available && (!old.available || new.capacity > old.capacity)
}

/// The plan for an open ticket of `member`, who is being deleted: unassigned, with a log
/// line naming why (no origin: it is a consequence of the deletion). Closed tickets keep
/// who handled them — the store reads only open ones.
pub fn unassign_for_deleted(old: Ticket, member: &Member, now: DateTime<Utc>) -> TicketPlan {
    let mut new = old.clone();
    new.assignee = None;
    new.updated_at = now;
    let change = diff(&old, &new);
    let message = format!(
        "{} unassigned because member {} was deleted: {}",
        new.human_id(),
        member.name,
        describe(&change)
    );
    let moved = counts_moved(&old, &new);
    let room = room_made(&old, &new);
    TicketPlan {
        row: RowWrite::Update,
        log: Some(line(now, "changed", message, None)),
        write: TicketWrite {
            ticket: new,
            created: false,
            change,
        },
        counts_moved: moved,
        room_made: room,
    }
}

/// A line a caller appends to a ticket's log must have a kind and a message.
pub fn check_log_line(entry: &TicketLogEntry) -> DeskResult<()> {
    check_text("log line kind", &entry.kind)?;
    check_text("log line message", &entry.message)
}

// ---------------------------------------------------------------------------------------
// Ticket events
// ---------------------------------------------------------------------------------------

/// What a ticket write announces: a create is `ticket.created`, a write that changed
/// something `ticket.changed`, a write that changed nothing nothing.
pub fn announcement(write: &TicketWrite) -> Option<TicketEventKind> {
    if write.created {
        Some(TicketEventKind::Created)
    } else if !write.change.is_empty() {
        Some(TicketEventKind::Changed)
    } else {
        None
    }
}

impl TicketEvent {
    /// The event of `write` (of `kind`, from [`announcement`]), stamped with the
    /// ticket's `updated_at` — the write's now.
    pub fn of(write: &TicketWrite, kind: TicketEventKind, origin: Origin) -> Self {
        TicketEvent {
            id: uuid::Uuid::now_v7().to_string(),
            tenant: write.ticket.tenant,
            kind,
            ticket: write.ticket.clone(),
            change: write.change.clone(),
            origin,
            at: write.ticket.updated_at,
        }
    }
}

impl DeskError {
    /// The same kind of error with `context` in front of its message (an `Internal`
    /// stays `Internal`, a `NotFound` becomes `Internal`: the context names what was
    /// being done, so the bare "not found" would mislead).
    pub fn within(self, context: &str) -> DeskError {
        match self {
            DeskError::Conflict(message) => DeskError::Conflict(format!("{context}: {message}")),
            DeskError::Invalid(message) => DeskError::Invalid(format!("{context}: {message}")),
            DeskError::Unavailable(message) => {
                DeskError::Unavailable(format!("{context}: {message}"))
            }
            other => DeskError::Internal(format!("{context}: {other}")),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Incidents
// ---------------------------------------------------------------------------------------

/// The checks of a report that need no storage: a non-blank cause and title.
pub fn check_report(report: &IncidentReport) -> DeskResult<()> {
    check_text("incident cause", &report.cause)?;
    check_text("incident title", &report.title)
}

/// The incident a report opens when none of its cause is open in the tenant (while one
/// is, the store counts the repeat on it instead).
pub fn incident_open(tenant: TenantId, report: IncidentReport, now: DateTime<Utc>) -> Incident {
    Incident {
        id: IncidentId::new(),
        tenant,
        cause: report.cause,
        title: report.title,
        impact: report.impact,
        detail: report.detail,
        status: IncidentStatus::Open,
        count: 1,
        ticket: report.ticket,
        created_at: now,
        updated_at: now,
        resolved_at: None,
    }
}

/// The answer when the open incident of `cause` kept appearing and disappearing between
/// a store's statements for longer than it retries.
pub fn incident_kept_changing(cause: &str) -> DeskError {
    DeskError::Unavailable(format!(
        "the open incident of cause {cause:?} kept changing during the report; try again"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use chrono::TimeZone;

    use crate::model::{FieldType, GroupId};
    use crate::rules::tests::member;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 2, 9, 30, 0)
            .single()
            .expect("a valid instant")
    }

    fn order_type(tenant: TenantId) -> TicketType {
        TicketType {
            id: TicketTypeId::new(),
            tenant,
            name: "order".into(),
            statuses: vec!["waiting-to-pack".into(), "shipped".into()],
            fields: vec![],
        }
    }

    fn run() -> Origin {
        Origin::Automation {
            automation_id: "a1".into(),
            run_id: "r1".into(),
            chain: vec![],
        }
    }

    fn order_upsert() -> TicketUpsert {
        TicketUpsert {
            external_id: "order-5001".into(),
            title: Some("Order 5001".into()),
            ticket_type: Some("order".into()),
            status: Some("waiting-to-pack".into()),
            tags: vec!["waiting-to-pack".into(), "waiting-to-pack".into()],
            note: Some("order.created".into()),
            ..TicketUpsert::default()
        }
    }

    fn created(tenant: TenantId) -> Ticket {
        let kind = order_type(tenant);
        upsert(
            UpsertTarget::New { tenant, number: 5 },
            order_upsert(),
            Some(&kind),
            &run(),
            now(),
        )
        .expect("a valid create")
        .write
        .ticket
    }

    fn typed(tenant: TenantId, name: &str, fields: &[(&str, FieldType)]) -> TicketType {
        TicketType {
            id: TicketTypeId::new(),
            tenant,
            name: name.into(),
            statuses: vec!["waiting-to-pack".into(), "shipped".into()],
            fields: fields
                .iter()
                .map(|(name, field_type)| FieldDef {
                    name: (*name).into(),
                    field_type: *field_type,
                })
                .collect(),
        }
    }

    fn fields(pairs: &[(&str, serde_json::Value)]) -> BTreeMap<String, serde_json::Value> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect()
    }

    fn invalid_message(result: DeskResult<TicketPlan>) -> String {
        match result {
            Err(DeskError::Invalid(message)) => message,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_field_of_the_wrong_type_or_undeclared_is_refused_naming_it() {
        use serde_json::json;
        let tenant = TenantId::new();
        let kind = typed(
            tenant,
            "order",
            &[("amount", FieldType::Number), ("due", FieldType::Date)],
        );
        let ticket = created(tenant);
        let wrong = TicketChange {
            fields: fields(&[("amount", json!("lots"))]),
            ..TicketChange::default()
        };
        let message = invalid_message(change(
            ticket.clone(),
            wrong,
            None,
            Some(&kind),
            &Origin::Person,
            now(),
        ));
        assert!(
            message.contains("\"amount\"")
                && message.contains("expects a number")
                && message.contains("found a string"),
            "names the field, the expected and the found type: {message}"
        );
        let undeclared = TicketChange {
            fields: fields(&[("colour", json!("red"))]),
            ..TicketChange::default()
        };
        let message = invalid_message(change(
            ticket.clone(),
            undeclared,
            None,
            Some(&kind),
            &Origin::Person,
            now(),
        ));
        assert!(
            message.contains("\"colour\" is not a field") && message.contains("amount, due"),
            "names the field and the declared ones: {message}"
        );
        let not_a_date = TicketChange {
            fields: fields(&[("due", json!("next week"))]),
            ..TicketChange::default()
        };
        let message = invalid_message(change(
            ticket.clone(),
            not_a_date,
            None,
            Some(&kind),
            &Origin::Person,
            now(),
        ));
        assert!(message.contains("not a date"), "says why: {message}");
        let fine = TicketChange {
            fields: fields(&[("amount", json!(12.5)), ("due", json!("2026-12-24"))]),
            ..TicketChange::default()
        };
        let plan = change(ticket, fine, None, Some(&kind), &Origin::Person, now())
            .expect("values of the declared types are taken");
        assert_eq!(plan.write.ticket.fields["amount"], json!(12.5), "stored");
    }

    #[test]
    fn an_upsert_checks_its_fields_against_the_type_it_creates_with() {
        use serde_json::json;
        let tenant = TenantId::new();
        let kind = typed(tenant, "order", &[("amount", FieldType::Number)]);
        let mut bad = order_upsert();
        bad.status = None;
        bad.fields = fields(&[("amount", json!(true))]);
        let message = invalid_message(upsert(
            UpsertTarget::New { tenant, number: 1 },
            bad,
            Some(&kind),
            &run(),
            now(),
        ));
        assert!(message.contains("found a boolean"), "{message}");
    }

    #[test]
    fn a_ticket_without_a_type_carries_free_fields() {
        use serde_json::json;
        let tenant = TenantId::new();
        let free = TicketUpsert {
            external_id: "mail-1".into(),
            fields: fields(&[("anything", json!([1, 2]))]),
            ..TicketUpsert::default()
        };
        let plan = upsert(
            UpsertTarget::New { tenant, number: 1 },
            free,
            None,
            &run(),
            now(),
        )
        .expect("no type, no definitions to check against");
        assert_eq!(plan.write.ticket.fields["anything"], json!([1, 2]));
    }

    #[test]
    fn a_type_change_keeps_the_fields_that_fit_and_logs_the_dropped_ones() {
        use serde_json::json;
        let tenant = TenantId::new();
        let order = typed(
            tenant,
            "order",
            &[("amount", FieldType::Number), ("note", FieldType::String)],
        );
        let mut first = order_upsert();
        first.status = None;
        first.fields = fields(&[("amount", json!(3)), ("note", json!("fragile"))]);
        let ticket = upsert(
            UpsertTarget::New { tenant, number: 1 },
            first,
            Some(&order),
            &run(),
            now(),
        )
        .expect("fields fit")
        .write
        .ticket;
        let complaint = typed(
            tenant,
            "complaint",
            &[("note", FieldType::String), ("amount", FieldType::String)],
        );
        let set_type = TicketChange {
            ticket_type: Some("complaint".into()),
            ..TicketChange::default()
        };
        let plan = change(ticket, set_type, None, Some(&complaint), &run(), now())
            .expect("a type change drops what does not fit, it does not refuse");
        assert_eq!(
            plan.write.ticket.fields,
            fields(&[("note", json!("fragile"))]),
            "the fitting field kept, the number dropped"
        );
        let log = plan.log.expect("a change logs").message;
        assert!(
            log.contains("the new type dropped fields \"amount\"")
                && log.contains("expects a string"),
            "the log says what was dropped and why: {log}"
        );
    }

    #[test]
    fn an_upsert_of_a_new_external_id_inserts_numbered_and_logs_what_it_set() {
        let tenant = TenantId::new();
        let kind = order_type(tenant);
        let plan = upsert(
            UpsertTarget::New { tenant, number: 5 },
            order_upsert(),
            Some(&kind),
            &run(),
            now(),
        )
        .expect("a valid create");
        assert_eq!(plan.row, RowWrite::Insert, "a create inserts");
        assert!(plan.write.created, "answers created");
        assert_eq!(plan.write.ticket.tags, vec!["waiting-to-pack"], "tags once");
        assert_eq!(
            plan.announcement(),
            Some(TicketEventKind::Created),
            "announced"
        );
        let log = plan.log.expect("a create logs");
        assert_eq!(log.kind, "created", "kind of the line");
        assert_eq!(
            log.message,
            "TK-5 created by automation a1 (run r1): title Order 5001; external id order-5001; \
             type order; status waiting-to-pack; tags [waiting-to-pack] (event: order.created)",
            "the line says who and what"
        );
        assert_eq!(
            log.run_id.as_deref(),
            Some("r1"),
            "the line carries the run"
        );
    }

    #[test]
    fn an_upsert_that_changes_nothing_keeps_the_row_logs_the_event_and_announces_nothing() {
        let tenant = TenantId::new();
        let kind = order_type(tenant);
        let existing = created(tenant);
        let plan = upsert(
            UpsertTarget::Existing(Box::new(existing.clone())),
            order_upsert(),
            Some(&kind),
            &Origin::Person,
            now(),
        )
        .expect("a valid attach");
        assert_eq!(plan.row, RowWrite::Keep, "nothing to write");
        assert_eq!(plan.write.ticket, existing, "the ticket as it was");
        assert_eq!(plan.announcement(), None, "no change, no event");
        assert_eq!(
            plan.log.map(|log| log.message),
            Some("order.created: attached to TK-5 by a person; nothing changed".into()),
            "the event is still on the ticket's log"
        );
    }

    /// Issue 23: a repeated order webhook must not move a shipped, closed ticket back to
    /// waiting-to-pack. Attached with `ATTACH_ONLY`, nothing the event carries changes it,
    /// and the event's line names what was kept.
    #[test]
    fn an_attach_only_upsert_keeps_a_closed_tickets_status_and_names_what_it_kept() {
        let tenant = TenantId::new();
        let kind = order_type(tenant);
        let mut shipped = created(tenant);
        shipped.status = Some("shipped".into());
        shipped.closed = true;
        let plan = upsert(
            UpsertTarget::Existing(Box::new(shipped.clone())),
            TicketUpsert {
                title: Some("Order 5001 again".into()),
                tags: vec!["repeated".into()],
                on_existing: OnExisting::ATTACH_ONLY,
                ..order_upsert()
            },
            Some(&kind),
            &Origin::Person,
            now(),
        )
        .expect("a valid attach");
        assert_eq!(plan.row, RowWrite::Keep, "nothing to write");
        assert_eq!(plan.write.ticket, shipped, "still shipped, still closed");
        assert_eq!(plan.announcement(), None, "no change, no event");
        assert_eq!(
            plan.log.map(|log| log.message),
            Some(
                "order.created: attached to TK-5 by a person; nothing changed; kept status \
                 shipped (the event said waiting-to-pack), tags [waiting-to-pack] (the event \
                 said [waiting-to-pack, repeated]), title Order 5001 (the event said Order \
                 5001 again) — onExisting applies nothing to an existing ticket"
                    .into()
            ),
            "the line says what the event would have changed"
        );
    }

    #[test]
    fn an_upsert_applies_to_an_existing_ticket_only_what_on_existing_names() {
        let tenant = TenantId::new();
        let kind = order_type(tenant);
        let existing = created(tenant);
        let plan = upsert(
            UpsertTarget::Existing(Box::new(existing.clone())),
            TicketUpsert {
                status: Some("shipped".into()),
                tags: vec!["shipped".into()],
                title: Some("Order 5001 (shipped)".into()),
                on_existing: OnExisting::ATTACH_ONLY
                    .with("status")
                    .and_then(|on| on.with("tags"))
                    .expect("known names"),
                ..order_upsert()
            },
            Some(&kind),
            &Origin::Person,
            now(),
        )
        .expect("a valid attach");
        assert_eq!(
            plan.write.change.keys().collect::<Vec<_>>(),
            vec!["status", "tags"],
            "status and tags applied, the title kept"
        );
        assert_eq!(plan.write.ticket.title, existing.title);
        let message = plan.log.map(|log| log.message).unwrap_or_default();
        assert!(
            message.contains("status waiting-to-pack → shipped")
                && message.ends_with(
                    "kept title Order 5001 (the event said Order 5001 (shipped)) — onExisting \
                     applies only status, tags to an existing ticket"
                ),
            "{message}"
        );
    }

    #[test]
    fn on_existing_knows_the_values_by_their_json_names() {
        assert_eq!(
            OnExisting::default(),
            OnExisting::ALL,
            "the port applies all"
        );
        assert_eq!(OnExisting::ALL.names(), OnExisting::NAMES.to_vec());
        assert!(OnExisting::ATTACH_ONLY.names().is_empty());
        let on = OnExisting::ATTACH_ONLY
            .with("type")
            .expect("type is a value");
        assert!(on.ticket_type && on.applies("type") && !on.applies("status"));
        assert_eq!(
            OnExisting::ATTACH_ONLY.with("closed"),
            None,
            "closed is not"
        );
        assert_eq!(OnExisting::ATTACH_ONLY.with("externalId"), None);
    }

    /// An attach that keeps the ticket's type checks the kept type's statuses, not the
    /// event's type.
    #[test]
    fn the_type_to_check_of_an_attach_is_the_one_it_keeps() {
        let tenant = TenantId::new();
        let existing = created(tenant);
        let kept = TicketUpsert {
            ticket_type: Some("error".into()),
            on_existing: OnExisting::ATTACH_ONLY,
            ..order_upsert()
        };
        let target = UpsertTarget::Existing(Box::new(existing));
        assert_eq!(target.type_to_check(&kept), Some("order"));
        let moved = TicketUpsert {
            on_existing: OnExisting::ALL,
            ..kept.clone()
        };
        assert_eq!(target.type_to_check(&moved), Some("error"));
    }

    #[test]
    fn a_status_outside_the_type_or_without_a_type_is_refused() {
        let tenant = TenantId::new();
        let kind = order_type(tenant);
        let mut lost = order_upsert();
        lost.status = Some("lost".into());
        let err = upsert(
            UpsertTarget::New { tenant, number: 1 },
            lost,
            Some(&kind),
            &Origin::Person,
            now(),
        )
        .expect_err("not a status of order");
        assert!(
            matches!(&err, DeskError::Invalid(message) if message.contains("allowed: waiting-to-pack, shipped")),
            "names the allowed statuses: {err:?}"
        );
        let mut untyped = order_upsert();
        untyped.ticket_type = None;
        let err = upsert(
            UpsertTarget::New { tenant, number: 1 },
            untyped,
            None,
            &Origin::Person,
            now(),
        )
        .expect_err("a status needs a type");
        assert!(
            matches!(&err, DeskError::Invalid(message) if message.contains("needs a ticket type")),
            "says why: {err:?}"
        );
    }

    #[test]
    fn the_type_to_check_is_the_one_the_result_carries() {
        let tenant = TenantId::new();
        let ticket = created(tenant);
        assert_eq!(
            type_to_check(Some(&ticket), None),
            Some("order"),
            "the ticket's own type"
        );
        assert_eq!(
            type_to_check(Some(&ticket), Some("return")),
            Some("return"),
            "the type the write sets"
        );
        assert_eq!(type_to_check(None, None), None, "no type, no check");
    }

    #[test]
    fn a_change_that_changes_nothing_writes_and_logs_nothing() {
        let tenant = TenantId::new();
        let ticket = created(tenant);
        let plan = change(
            ticket.clone(),
            TicketChange {
                closed: Some(false),
                ..TicketChange::default()
            },
            None,
            Some(&order_type(tenant)),
            &Origin::Person,
            now(),
        )
        .expect("a valid change");
        assert_eq!(plan.row, RowWrite::Keep, "nothing to write");
        assert_eq!(plan.log, None, "no line");
        assert!(plan.counts_moved().is_empty(), "no count moves");
    }

    #[test]
    fn closing_an_assigned_ticket_moves_its_assignees_count_and_says_so() {
        let tenant = TenantId::new();
        let eva = member("Eva", 5);
        let mut ticket = created(tenant);
        ticket.assignee = Some(Assignee {
            id: eva.id,
            name: eva.name.clone(),
        });
        let plan = change(
            ticket,
            TicketChange {
                closed: Some(true),
                ..TicketChange::default()
            },
            None,
            Some(&order_type(tenant)),
            &Origin::Person,
            now(),
        )
        .expect("a valid change");
        assert_eq!(plan.row, RowWrite::Update, "written");
        assert_eq!(plan.counts_moved(), vec![eva.id], "Eva's open count moves");
        assert_eq!(
            plan.log.map(|log| log.message),
            Some("TK-5 changed by a person: closed false → true".into()),
            "the line says what changed"
        );
        assert_eq!(
            plan.write.ticket.updated_at,
            now(),
            "stamped with the write's now"
        );
    }

    #[test]
    fn least_busy_does_not_count_the_ticket_against_its_assignee_and_logs_its_reasoning() {
        let tenant = TenantId::new();
        let group = Group {
            id: GroupId::new(),
            tenant,
            name: "warehouse".into(),
        };
        let (eva, jan) = (member("Eva", 5), member("Jan", 5));
        let mut ticket = created(tenant);
        ticket.group = Some("warehouse".into());
        ticket.assignee = Some(Assignee {
            id: eva.id,
            name: eva.name.clone(),
        });
        // Eva holds this ticket and one other; Jan holds one: without this ticket, a tie
        // broken by name, so Eva keeps it.
        let open = BTreeMap::from([(eva.id, 2), (jan.id, 1)]);
        let plan = assign_least_busy(
            ticket,
            &group,
            &[eva.clone(), jan.clone()],
            &open,
            &run(),
            now(),
        )
        .expect("a group with members");
        assert_eq!(plan.row, RowWrite::Keep, "the assignee stays");
        let log = plan.log.expect("the reasoning is always logged");
        assert_eq!(log.kind, "note", "a note, not a change");
        assert_eq!(
            log.message,
            "TK-5 stays with Eva, still the least busy in group warehouse (Eva 1 open of 5, \
             Jan 1 open of 5); checked by automation a1 (run r1)",
            "the counts it judged by"
        );
        let err = assign_least_busy(created(tenant), &group, &[], &open, &run(), now())
            .expect_err("nobody to assign to");
        assert!(
            matches!(&err, DeskError::Invalid(message) if message.contains("has no members")),
            "says the group is empty: {err:?}"
        );
    }

    fn warehouse(tenant: TenantId) -> Group {
        Group {
            id: GroupId::new(),
            tenant,
            name: "warehouse".into(),
        }
    }

    fn waiting_origin() -> (Origin, uuid::Uuid) {
        let run = uuid::Uuid::now_v7();
        (
            Origin::Automation {
                automation_id: "a1".into(),
                run_id: run.to_string(),
                chain: vec![],
            },
            run,
        )
    }

    fn assignee_of(planned: &GroupPlan) -> Option<String> {
        match planned {
            GroupPlan::Write { plan, .. } => plan
                .write
                .ticket
                .assignee
                .as_ref()
                .map(|assignee| assignee.name.clone()),
            GroupPlan::Wait { .. } => None,
        }
    }

    #[test]
    fn least_busy_skips_members_at_capacity_and_members_away() {
        let tenant = TenantId::new();
        let group = warehouse(tenant);
        let eva = member("Eva", 1);
        let mut jan = member("Jan", 5);
        jan.available = false;
        let zero = member("Zero", 0);
        let petr = member("Petr", 3);
        // Zero and Jan carry the fewest, but Zero takes nothing and Jan is away; Eva is
        // at capacity: Petr, the busiest, is the only one with room.
        let open = BTreeMap::from([(eva.id, 1), (jan.id, 0), (petr.id, 2)]);
        let members = [eva, jan, zero, petr];
        let planned = assign_in_group(
            created(tenant),
            &group,
            &members,
            &open,
            &AssignTo::LeastBusy(WhenFull::Wait),
            false,
            &run(),
            now(),
        )
        .expect("Petr has room");
        assert_eq!(
            assignee_of(&planned).as_deref(),
            Some("Petr"),
            "{planned:?}"
        );
        let GroupPlan::Write { plan, .. } = planned else {
            unreachable!("checked above")
        };
        let line = plan.log.expect("logged").message;
        assert!(
            line.contains("Jan 0 open of 5 (away)") && line.contains("Zero 0 open of 0"),
            "the line shows who was skipped and why: {line}"
        );
    }

    #[test]
    fn when_everybody_is_full_the_run_waits_fails_or_assigns_anyway_as_asked() {
        let tenant = TenantId::new();
        let group = warehouse(tenant);
        let (eva, jan) = (member("Eva", 2), member("Jan", 1));
        let mut ida = member("Ida", 9);
        ida.available = false;
        let open = BTreeMap::from([(eva.id, 2), (jan.id, 1)]);
        let members = [eva.clone(), jan, ida];
        let (origin, run_id) = waiting_origin();
        let decide = |to: WhenFull, waiting: bool, origin: &Origin| {
            assign_in_group(
                created(tenant),
                &group,
                &members,
                &open,
                &AssignTo::LeastBusy(to),
                waiting,
                origin,
                now(),
            )
        };
        let Ok(GroupPlan::Wait {
            run, log, message, ..
        }) = decide(WhenFull::Wait, false, &origin)
        else {
            panic!("nobody has room: the run waits")
        };
        assert_eq!(run, run_id, "the caller's run is the one that waits");
        assert!(
            message.starts_with("waiting for room in warehouse: 2 of 3 members full, 1 away ("),
            "{message}"
        );
        assert!(
            log.is_some_and(|line| line.message.contains("waiting for room in warehouse")),
            "the ticket's log says it once"
        );
        let Ok(GroupPlan::Wait { log, .. }) = decide(WhenFull::Wait, true, &origin) else {
            panic!("still no room")
        };
        assert!(log.is_none(), "no second line while the run waits");
        let person = decide(WhenFull::Wait, false, &Origin::Person).expect_err("nothing to wake");
        assert!(
            matches!(&person, DeskError::Invalid(m) if m.contains("every member of group \"warehouse\" is full or away")),
            "{person:?}"
        );
        let failed = decide(WhenFull::Fail, false, &origin).expect_err("fail when full");
        assert!(
            matches!(&failed, DeskError::Invalid(m) if m.contains("group \"warehouse\"") && m.contains("2 of 3 members full")),
            "names the group and that its members are full: {failed:?}"
        );
        let anyway = decide(WhenFull::AssignAnyway, false, &origin).expect("assigned anyway");
        assert_eq!(
            assignee_of(&anyway).as_deref(),
            Some("Jan"),
            "the least busy available member, past capacity; never Ida, who is away"
        );
        let GroupPlan::Write { plan, stop_waiting } = anyway else {
            unreachable!("checked above")
        };
        assert_eq!(
            stop_waiting,
            Some(run_id),
            "an assignment ends the run's wait"
        );
        assert!(
            plan.log
                .is_some_and(|line| line.message.contains("assigned anyway")),
            "the log says it went past capacity"
        );
    }

    #[test]
    fn a_named_member_is_assigned_even_when_away_or_full_and_a_stranger_is_refused() {
        let tenant = TenantId::new();
        let group = warehouse(tenant);
        let mut eva = member("Eva", 1);
        eva.available = false;
        let open = BTreeMap::from([(eva.id, 1)]);
        let members = [eva.clone(), member("Jan", 5)];
        let named = |name: &str| {
            assign_in_group(
                created(tenant),
                &group,
                &members,
                &open,
                &AssignTo::Member(name.into()),
                false,
                &run(),
                now(),
            )
        };
        let planned = named("Eva").expect("a person's decision");
        assert_eq!(assignee_of(&planned).as_deref(), Some("Eva"));
        let GroupPlan::Write { plan, .. } = planned else {
            unreachable!("checked above")
        };
        assert!(
            plan.log
                .is_some_and(|line| line.message.contains("although Eva is away")),
            "the log says she is away"
        );
        let err = named("Petr").expect_err("not in the group");
        assert!(
            matches!(&err, DeskError::Invalid(m)
                if m == "\"Petr\" is not a member of group \"warehouse\" (its members: Eva, Jan)"),
            "{err:?}"
        );
    }

    #[test]
    fn room_is_made_by_a_close_or_a_reassignment_not_by_other_changes() {
        let tenant = TenantId::new();
        let eva = member("Eva", 5);
        let mut ticket = created(tenant);
        ticket.assignee = Some(Assignee {
            id: eva.id,
            name: eva.name.clone(),
        });
        let close = change(
            ticket.clone(),
            TicketChange {
                closed: Some(true),
                ..TicketChange::default()
            },
            None,
            Some(&order_type(tenant)),
            &Origin::Person,
            now(),
        )
        .expect("a valid change");
        assert_eq!(close.room_made(), Some(eva.id), "a close frees Eva's place");
        let tag = change(
            ticket,
            TicketChange {
                add_tags: vec!["vip".into()],
                ..TicketChange::default()
            },
            None,
            Some(&order_type(tenant)),
            &Origin::Person,
            now(),
        )
        .expect("a valid change");
        assert_eq!(tag.room_made(), None, "a tag frees nothing");
        let (old, new) = (member("Jan", 1), member("Jan", 3));
        assert!(member_makes_room(&old, &new), "more capacity");
        let away = Member {
            available: false,
            ..new.clone()
        };
        assert!(member_makes_room(&away, &new), "back from away");
        assert!(!member_makes_room(&new, &away), "going away makes none");
    }

    #[test]
    fn a_type_update_names_what_it_removes_and_whether_it_renames() {
        let tenant = TenantId::new();
        let old = order_type(tenant);
        assert!(
            matches!(
                type_update(&old, None, None, None),
                Ok(TypeUpdate::Unchanged(_))
            ),
            "nothing given, nothing to write"
        );
        let statuses = vec!["waiting-to-pack".to_string()];
        match type_update(&old, Some("parcel"), Some(&statuses), None) {
            Ok(TypeUpdate::Write {
                new,
                renamed,
                removed,
            }) => {
                assert_eq!(new.name, "parcel", "the new name");
                assert!(renamed, "a rename");
                assert_eq!(removed, vec!["shipped"], "the status it removes");
            }
            other => panic!("expected a write, got {other:?}"),
        }
        let twice = vec!["a".to_string(), "a".to_string()];
        assert!(
            matches!(
                type_update(&old, None, Some(&twice), None),
                Err(DeskError::Invalid(_))
            ),
            "checked as a create is"
        );
    }

    #[test]
    fn deleting_a_member_unassigns_their_open_ticket_with_a_line_naming_them() {
        let tenant = TenantId::new();
        let eva = member("Eva", 5);
        let mut ticket = created(tenant);
        ticket.assignee = Some(Assignee {
            id: eva.id,
            name: eva.name.clone(),
        });
        let plan = unassign_for_deleted(ticket, &eva, now());
        assert_eq!(plan.write.ticket.assignee, None, "unassigned");
        assert_eq!(plan.counts_moved(), vec![eva.id], "Eva's count moves");
        let log = plan.log.expect("a line");
        assert_eq!(
            log.message, "TK-5 unassigned because member Eva was deleted: assignee Eva → none",
            "names who and why"
        );
        assert_eq!(log.run_id, None, "no run did it");
    }

    #[test]
    fn blank_text_is_refused_naming_what_it_is() {
        let err = check_text("ticket title", "  ").expect_err("blank");
        assert_eq!(
            err,
            DeskError::Invalid("ticket title must not be empty".into()),
            "names the field"
        );
        assert!(
            check_text("ticket title", "x").is_ok(),
            "any other text is fine"
        );
    }

    #[test]
    fn a_lookup_that_found_nothing_means_the_name_is_free() {
        assert_eq!(taken(Ok(1)), Ok(true), "found: taken");
        assert_eq!(
            taken::<()>(Err(DeskError::NotFound("group"))),
            Ok(false),
            "not found: free"
        );
        assert_eq!(
            taken::<()>(Err(DeskError::Unavailable("down".into()))),
            Err(DeskError::Unavailable("down".into())),
            "other errors pass through"
        );
    }
}
