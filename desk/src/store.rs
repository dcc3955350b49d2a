//! The [`DeskStore`] port: what the desk asks of storage.

use std::collections::BTreeMap;

use async_trait::async_trait;
use thiserror::Error;

use crate::model::*;

/// What a desk store can answer besides success.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeskError {
    /// Unknown id — or an id of another tenant: the two are indistinguishable.
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid: {0}")]
    Invalid(String),
    /// A group, ticket type or status cannot be removed while something uses it:
    /// `message` says what, `used_by` lists each user.
    #[error("in use: {message}")]
    InUse {
        message: String,
        used_by: Vec<UsedBy>,
    },
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    #[error("storage error: {0}")]
    Internal(String),
}

pub type DeskResult<T> = Result<T, DeskError>;

/// What uses a group, ticket type or status that is to be removed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum UsedBy {
    /// An automation whose current version names it, with the steps that do.
    #[serde(rename_all = "camelCase")]
    Automation {
        id: String,
        name: String,
        steps: Vec<String>,
    },
    /// Open tickets that carry it.
    #[serde(rename_all = "camelCase")]
    Tickets { open: i64 },
}

/// Create a ticket, or attach to the existing one with the same external id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TicketUpsert {
    pub external_id: String,
    pub title: Option<String>,
    pub ticket_type: Option<String>,
    pub status: Option<String>,
    pub tags: Vec<String>,
    pub fields: BTreeMap<String, serde_json::Value>,
    pub group: Option<String>,
    /// A line for the ticket's log ("order.created from the web shop").
    pub note: Option<String>,
    /// Which of the values above apply when the external id finds an existing ticket
    /// (the port's default: all of them; `ticket/upsert` asks for
    /// [`OnExisting::ATTACH_ONLY`] unless its `onExisting` names more).
    pub on_existing: OnExisting,
}

/// Which values of an upsert apply to a ticket its external id finds already there
/// (`ticket/upsert`'s `onExisting`). A value not named leaves the ticket's own as it is,
/// and the event's log line names what was kept; one named applies as on any upsert
/// (tags are added, never removed; fields are merged). An upsert never reopens a closed
/// ticket, whatever it names: `closed` is not one of its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnExisting {
    pub title: bool,
    pub ticket_type: bool,
    pub status: bool,
    pub tags: bool,
    pub fields: bool,
    pub group: bool,
}

impl OnExisting {
    /// Attach the event only: an existing ticket keeps everything it has.
    pub const ATTACH_ONLY: OnExisting = OnExisting {
        title: false,
        ticket_type: false,
        status: false,
        tags: false,
        fields: false,
        group: false,
    };

    /// Every value the upsert carries applies.
    pub const ALL: OnExisting = OnExisting {
        title: true,
        ticket_type: true,
        status: true,
        tags: true,
        fields: true,
        group: true,
    };

    /// The values by name, as the ticket's JSON and `ticket/upsert`'s inputs call them.
    pub const NAMES: [&'static str; 6] = ["title", "type", "status", "tags", "fields", "group"];

    /// This set with the value called `name` added; `None` when no value is called so.
    pub fn with(mut self, name: &str) -> Option<OnExisting> {
        *self.flag(name)? = true;
        Some(self)
    }

    /// Whether the value called `name` applies (`false` for a name that is none).
    pub fn applies(&self, name: &str) -> bool {
        let mut copy = *self;
        copy.flag(name).is_some_and(|flag| *flag)
    }

    /// The names of the values that apply, in [`OnExisting::NAMES`] order.
    pub fn names(&self) -> Vec<&'static str> {
        Self::NAMES
            .into_iter()
            .filter(|name| self.applies(name))
            .collect()
    }

    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        match name {
            "title" => Some(&mut self.title),
            "type" => Some(&mut self.ticket_type),
            "status" => Some(&mut self.status),
            "tags" => Some(&mut self.tags),
            "fields" => Some(&mut self.fields),
            "group" => Some(&mut self.group),
            _ => None,
        }
    }
}

/// The port applies what it is given: every value (see [`TicketUpsert::on_existing`]).
impl Default for OnExisting {
    fn default() -> Self {
        OnExisting::ALL
    }
}

/// A change to a ticket; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TicketChange {
    pub title: Option<String>,
    pub ticket_type: Option<String>,
    pub status: Option<String>,
    pub closed: Option<bool>,
    pub add_tags: Vec<String>,
    /// Replace all tags (a person's edit).
    pub set_tags: Option<Vec<String>>,
    /// `Some(None)` unassigns.
    pub assignee: Option<Option<MemberId>>,
    pub group: Option<Option<String>>,
    pub fields: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TicketFilter {
    pub status: Option<String>,
    pub tag: Option<String>,
    pub closed: Option<bool>,
    pub assignee: Option<MemberId>,
    pub ticket_type: Option<String>,
    /// Tickets numbered below this one (pagination, newest first).
    pub before_number: Option<i64>,
    /// 0 = the store's default page.
    pub limit: usize,
}

impl TicketFilter {
    /// The page when `limit` is 0.
    pub const DEFAULT_PAGE: usize = 100;
    /// The largest page a store answers.
    pub const MAX_PAGE: usize = 1_000;

    /// How many tickets this filter asks for, after the default and the cap.
    pub fn page(&self) -> usize {
        match self.limit {
            0 => Self::DEFAULT_PAGE,
            n => n.min(Self::MAX_PAGE),
        }
    }
}

/// What `DeskError::NotFound` names: one spelling for every store, so an unknown id and
/// another tenant's id answer the same on SQLite and on Postgres.
pub mod names {
    pub const TENANT: &str = "tenant";
    pub const GROUP: &str = "group";
    pub const MEMBER: &str = "member";
    pub const TICKET_TYPE: &str = "ticket type";
    pub const TICKET: &str = "ticket";
    pub const INCIDENT: &str = "incident";
    pub const AUTOMATION: &str = "automation";
}

/// `from → to` of one field of a change.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FieldChange {
    pub from: serde_json::Value,
    pub to: serde_json::Value,
}

/// What a ticket write did.
#[derive(Debug, Clone, PartialEq)]
pub struct TicketWrite {
    pub ticket: Ticket,
    pub created: bool,
    /// The fields that changed (`status`, `tags`, `assignee`, …); empty for a create.
    pub change: BTreeMap<String, FieldChange>,
}

/// What a least-busy assignment does when no available member of the group has room
/// (every one at capacity or away): `Wait` (the default) registers the run as waiting for
/// room in the group and answers [`Assignment::Waiting`]; `Fail` refuses (`Invalid`,
/// naming the group and that every member is full); `AssignAnyway` gives the ticket to
/// the least busy available member regardless of capacity, and says so on the log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WhenFull {
    #[default]
    Wait,
    Fail,
    AssignAnyway,
}

impl WhenFull {
    pub const ALL: [WhenFull; 3] = [WhenFull::Wait, WhenFull::Fail, WhenFull::AssignAnyway];

    /// The name a step's `whenFull` input gives.
    pub fn as_str(self) -> &'static str {
        match self {
            WhenFull::Wait => "wait",
            WhenFull::Fail => "fail",
            WhenFull::AssignAnyway => "assignAnyway",
        }
    }

    /// Reads a `whenFull` input; `None` for anything else.
    pub fn parse(text: &str) -> Option<WhenFull> {
        WhenFull::ALL.into_iter().find(|when| when.as_str() == text)
    }
}

/// Whom an assignment within a group picks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssignTo {
    /// The least busy available member with room ([`crate::rules::least_busy`] over
    /// [`crate::rules::has_room`]); when nobody has room, what [`WhenFull`] says.
    LeastBusy(WhenFull),
    /// The member of the group with this name: a person's explicit decision, so it is
    /// made also when the member is away or at capacity (the log line says so).
    Member(String),
}

/// What an assignment within a group did.
#[derive(Debug, Clone, PartialEq)]
pub enum Assignment {
    Assigned(TicketWrite),
    /// Nobody had room and the caller waits ([`WhenFull::Wait`]): its run is registered
    /// as waiting for room in the group (woken when an open count of the group moves,
    /// see the contract); `message` is what the run's step log says ("waiting for room
    /// in warehouse: 3 of 3 members full (…)"). The ticket is unchanged.
    Waiting {
        ticket: Ticket,
        message: String,
    },
}

/// Open an incident, or count a repeat of an open one with the same cause.
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentReport {
    pub cause: String,
    pub title: String,
    pub impact: String,
    pub detail: serde_json::Value,
    pub ticket: Option<TicketId>,
}

/// Desk storage, scoped by tenant.
///
/// # Contract
///
/// - Every method but the tenant ones takes the caller's tenant, and an id of another
///   tenant answers exactly as an id that never existed (`NotFound`).
/// - Names (tenant, group, member, type) are 1–200 characters; a group name and a ticket
///   type name are unique within a tenant (`Conflict`).
/// - Tenant API tokens are stored hashed; `tenant_by_token` finds by the hash.
/// - Tickets: numbers are 1, 2, … per tenant, never reused; `external_id` is unique per
///   tenant; a `status` must be one of the ticket type's statuses (`Invalid`, naming the
///   allowed ones) and a ticket with a status has a type; tags are a set in first-seen
///   order; every create and change appends a log line saying what changed and who did it.
/// - `ticket_upsert` with an existing external id changes nothing but the fields it
///   names that its `on_existing` lets apply (tags are added, never removed; `closed`
///   never changes) and logs the event, naming what it kept; `created` tells which.
/// - `ticket_assign_least_busy` picks by [`crate::rules::least_busy`] over the group's
///   members and their open tickets, in one atomic step (two concurrent calls count each
///   other's assignment).
/// - `ticket_assign` decides by [`crate::plan::assign_in_group`] under the same lock:
///   least busy picks only among available members below their capacity, so concurrent
///   assignments never take a member past capacity; when nobody has room it does what
///   its [`WhenFull`] says. `Wait` needs an automation origin: its run is written to the
///   group's waiting runs with one ticket log line (not repeated while it waits), and
///   the answer is [`Assignment::Waiting`]; the run's next assignment that goes through
///   (or fails) removes it. Capacity 0 is "takes no new work".
/// - Waking: a ticket write that moves an open count (a close, a reopen, a reassignment)
///   and `member_set_available(…, true)` make the pending runs waiting on the groups of
///   the members it moved due now (`run_at` = now), in the same transaction, and forget
///   waiting runs that are no longer pending or running. Found through the group, never
///   by walking the waiting runs of other groups.
/// - `member_set_available` sets whether a member takes new work; their open tickets
///   stay theirs.
/// - `ticket_type_update` changes only what it is given (`None` keeps it) and checks the
///   new definition as a create does; the name stays unique in the tenant (`Conflict`); a
///   status that an open ticket of the type or a current automation version uses cannot
///   be removed (`InUse`, naming each user); a rename carries to the `type` of every
///   ticket of the type and to the current definitions of the automations that name it
///   (by id), in the same transaction (no log line, no event, no new version: nothing
///   changed meaning). Closed tickets may keep a status the type no longer lists.
/// - `group_rename` carries the same way; `group_delete` and `ticket_type_delete` are
///   refused (`InUse`) while a current automation version or an open ticket uses the
///   group or type; closed tickets keep its name.
/// - Incidents: while an incident with the same `cause` is open in the tenant, a report
///   bumps its `count` (and `updated_at`) instead of opening another.
/// - Stores may be given an event sink: then every ticket write that changed something
///   (a create is `ticket.created`; a change, an upsert that attached and changed
///   something, a least-busy assignment that moved the assignee are `ticket.changed`)
///   hands it a [`TicketEvent`] — the ticket as committed, the write's `change` and
///   `Origin` — inside the write's transaction, and inserts the runs it answers in that
///   same transaction: they commit together or not at all, and a run that cannot be
///   inserted fails the write. A write that changed nothing (or was refused) announces
///   nothing.
#[async_trait]
pub trait DeskStore: Send + Sync + 'static {
    /// A new tenant and its API token (shown once; only its hash is kept).
    async fn tenant_create(&self, name: &str) -> DeskResult<(Tenant, String)>;
    async fn tenant_by_token(&self, token: &str) -> DeskResult<Option<Tenant>>;
    async fn tenant_list(&self) -> DeskResult<Vec<Tenant>>;
    /// Set a tenant's own retention of finished runs (an empty one: the operator's).
    async fn tenant_retention_set(
        &self,
        tenant: TenantId,
        retention: TenantRetention,
    ) -> DeskResult<()>;
    /// The tenants with a retention of their own, and theirs.
    async fn tenant_retentions(&self) -> DeskResult<Vec<(TenantId, TenantRetention)>>;

    async fn group_create(&self, tenant: TenantId, name: &str) -> DeskResult<Group>;
    async fn group_list(&self, tenant: TenantId) -> DeskResult<Vec<Group>>;
    async fn group_get(&self, tenant: TenantId, id: GroupId) -> DeskResult<Group>;
    async fn group_by_name(&self, tenant: TenantId, name: &str) -> DeskResult<Group>;
    async fn group_rename(&self, tenant: TenantId, id: GroupId, name: &str) -> DeskResult<Group>;
    /// Deletes the group and its members; their tickets keep their history.
    async fn group_delete(&self, tenant: TenantId, id: GroupId) -> DeskResult<()>;

    async fn member_add(
        &self,
        tenant: TenantId,
        group: GroupId,
        name: &str,
        email: Option<&str>,
        capacity: u32,
    ) -> DeskResult<Member>;
    async fn member_list(&self, tenant: TenantId, group: GroupId) -> DeskResult<Vec<Member>>;
    async fn member_update(
        &self,
        tenant: TenantId,
        member: MemberId,
        name: Option<&str>,
        email: Option<Option<&str>>,
        capacity: Option<u32>,
    ) -> DeskResult<Member>;
    async fn member_delete(&self, tenant: TenantId, member: MemberId) -> DeskResult<()>;
    /// Whether the member takes new work (see the contract: making one available wakes
    /// the runs waiting for room in their group).
    async fn member_set_available(
        &self,
        tenant: TenantId,
        member: MemberId,
        available: bool,
    ) -> DeskResult<Member>;

    async fn ticket_type_create(
        &self,
        tenant: TenantId,
        name: &str,
        statuses: &[String],
        fields: &[FieldDef],
    ) -> DeskResult<TicketType>;
    async fn ticket_type_list(&self, tenant: TenantId) -> DeskResult<Vec<TicketType>>;
    async fn ticket_type_get(&self, tenant: TenantId, id: TicketTypeId) -> DeskResult<TicketType>;
    async fn ticket_type_by_name(&self, tenant: TenantId, name: &str) -> DeskResult<TicketType>;
    /// Rename a type or replace its statuses or fields; see the contract.
    async fn ticket_type_update(
        &self,
        tenant: TenantId,
        id: TicketTypeId,
        name: Option<&str>,
        statuses: Option<&[String]>,
        fields: Option<&[FieldDef]>,
    ) -> DeskResult<TicketType>;
    /// Delete a type nothing uses; see the contract.
    async fn ticket_type_delete(&self, tenant: TenantId, id: TicketTypeId) -> DeskResult<()>;

    async fn ticket_upsert(
        &self,
        tenant: TenantId,
        upsert: TicketUpsert,
        origin: Origin,
    ) -> DeskResult<TicketWrite>;
    async fn ticket_change(
        &self,
        tenant: TenantId,
        id: TicketId,
        change: TicketChange,
        origin: Origin,
    ) -> DeskResult<TicketWrite>;
    /// Assign within a group (see the contract).
    async fn ticket_assign(
        &self,
        tenant: TenantId,
        id: TicketId,
        group: &str,
        to: AssignTo,
        origin: Origin,
    ) -> DeskResult<Assignment>;
    /// Least busy, assigning anyway when every available member is full.
    async fn ticket_assign_least_busy(
        &self,
        tenant: TenantId,
        id: TicketId,
        group: &str,
        origin: Origin,
    ) -> DeskResult<TicketWrite> {
        let to = AssignTo::LeastBusy(WhenFull::AssignAnyway);
        match self.ticket_assign(tenant, id, group, to, origin).await? {
            Assignment::Assigned(write) => Ok(write),
            Assignment::Waiting { .. } => Err(DeskError::Internal(
                "invariant: an assignment that assigns anyway never waits".into(),
            )),
        }
    }
    async fn ticket_get(&self, tenant: TenantId, id: TicketId) -> DeskResult<Ticket>;
    /// The tenant's ticket with this external id, if there is one (a read: no lock).
    async fn ticket_by_external_id(
        &self,
        tenant: TenantId,
        external_id: &str,
    ) -> DeskResult<Option<Ticket>>;
    /// The open-ticket count of each member of the group, as least busy reads it (a
    /// member without open tickets may be absent: 0). An unknown group is `NotFound`.
    async fn member_open_counts(
        &self,
        tenant: TenantId,
        group: GroupId,
    ) -> DeskResult<BTreeMap<MemberId, i64>>;
    async fn ticket_log(&self, tenant: TenantId, id: TicketId) -> DeskResult<Vec<TicketLogEntry>>;
    async fn ticket_log_append(
        &self,
        tenant: TenantId,
        id: TicketId,
        entry: TicketLogEntry,
    ) -> DeskResult<()>;
    async fn ticket_list(&self, tenant: TenantId, filter: TicketFilter) -> DeskResult<Vec<Ticket>>;

    async fn incident_report(
        &self,
        tenant: TenantId,
        report: IncidentReport,
    ) -> DeskResult<(Incident, bool)>;
    async fn incident_list(&self, tenant: Option<TenantId>) -> DeskResult<Vec<Incident>>;
    /// The tenant's incidents most recently changed first (opened, counted again,
    /// resolved), at most `limit`: what a live view reads each time, not the history.
    async fn incident_recent(&self, tenant: TenantId, limit: usize) -> DeskResult<Vec<Incident>>;
    /// The open incidents of every tenant, newest first: what `/metrics` counts and
    /// retention keeps the runs of. It walks the open ones only (at most one per cause
    /// and tenant), never the resolved history.
    async fn incident_open_all(&self) -> DeskResult<Vec<Incident>>;
    async fn incident_get(&self, tenant: Option<TenantId>, id: IncidentId) -> DeskResult<Incident>;
    async fn incident_resolve(&self, tenant: TenantId, id: IncidentId) -> DeskResult<Incident>;
}

/// A ticket as a person names it: its number (`TK-12`, `12`) or its id. An unknown one
/// (or another tenant's) is `NotFound`; text that is neither is `Invalid`.
pub async fn find_ticket(
    desk: &dyn DeskStore,
    tenant: TenantId,
    reference: &str,
) -> DeskResult<Ticket> {
    let text = reference.trim();
    let digits = text
        .strip_prefix("TK-")
        .or_else(|| text.strip_prefix("tk-"))
        .unwrap_or(text);
    if let Ok(number) = digits.parse::<i64>() {
        let found = desk
            .ticket_list(
                tenant,
                TicketFilter {
                    before_number: Some(number.saturating_add(1)),
                    limit: 1,
                    ..TicketFilter::default()
                },
            )
            .await?;
        return found
            .into_iter()
            .find(|ticket| ticket.number == number)
            .ok_or(DeskError::NotFound(names::TICKET));
    }
    let id: TicketId = text.parse().map_err(|_| {
        DeskError::Invalid(format!(
            "a ticket is named by its number (\"TK-12\" or 12) or its id, got {text:?}"
        ))
    })?;
    desk.ticket_get(tenant, id).await
}

/// What a ticket write announces: `ticket.created` or `ticket.changed`, with the ticket as
/// committed, what changed, and who changed it. Stores hand it to their event sink inside
/// the write's transaction, so the runs it triggers commit with the change or not at all.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TicketEvent {
    /// A UUIDv7, unique per event: follow-up work dedupes by it.
    pub id: String,
    pub tenant: TenantId,
    pub kind: TicketEventKind,
    pub ticket: Ticket,
    pub change: BTreeMap<String, FieldChange>,
    pub origin: Origin,
    pub at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TicketEventKind {
    #[serde(rename = "ticket.created")]
    Created,
    #[serde(rename = "ticket.changed")]
    Changed,
}

impl TicketEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TicketEventKind::Created => "ticket.created",
            TicketEventKind::Changed => "ticket.changed",
        }
    }
}
