//! A desk that writes nothing: the store of a dry run.
//!
//! [`Overlay`] answers every read from the real store and every ticket write — upsert,
//! change, least-busy assignment — by the same plan the stores write by (`crate::plan`),
//! computed on the real store's data as the dry run has changed it so far. Nothing
//! reaches the real store: the planned tickets stay in the overlay (a later step of the
//! same dry run reads them back), and each write is kept as a [`Would`], the sentence a
//! person reads ("would create ticket order-5001 as TK-8 …") and the event it would
//! announce. An incident report is planned the same way (a repeat of an open incident
//! would be counted on it).
//!
//! What a dry run cannot change, the overlay refuses: tenants, groups, members and
//! ticket types are set up by people, never by a step (`Internal`, naming the call).
//!
//! Limits of the picture, said where they show: lists (`ticket_list`) answer the real
//! store's rows, without the overlay's planned tickets; the number a planned ticket gets
//! is the next one as read now (a concurrent create may take it first).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::changes::describe;
use crate::model::*;
use crate::plan::{self, GroupPlan, TicketPlan, UpsertTarget};
use crate::store::{
    AssignTo, Assignment, DeskResult, FieldChange, IncidentReport, TicketChange, TicketEvent,
    TicketFilter, TicketUpsert, TicketWrite,
};
use crate::{DeskError, DeskStore};

/// One write a dry run would have made.
#[derive(Debug, Clone, PartialEq)]
pub struct Would {
    /// What it would do, for a person: "would assign TK-3 to Eva (warehouse: …)".
    pub summary: String,
    /// The line it would append to the ticket's log (the plan's own line).
    pub log: Option<String>,
    /// The event it would announce (`ticket.created` / `ticket.changed`).
    pub event: Option<TicketEvent>,
}

#[derive(Default)]
struct State {
    /// Tickets as the dry run left them (created or changed).
    tickets: BTreeMap<TicketId, Ticket>,
    /// The number the next planned ticket gets.
    next_number: Option<i64>,
    /// Every write, in order.
    writes: Vec<Would>,
    /// Where the writes of the current step begin ([`Overlay::step_writes`]).
    step_start: usize,
    /// Incidents the dry run would open, by cause.
    incidents: BTreeMap<String, Incident>,
}

/// The store of a dry run (see the module docs).
pub struct Overlay {
    inner: Arc<dyn DeskStore>,
    state: Mutex<State>,
}

fn refused(call: &str) -> DeskError {
    DeskError::Internal(format!(
        "a dry run writes nothing, and no step calls {call}"
    ))
}

impl Overlay {
    pub fn new(inner: Arc<dyn DeskStore>) -> Self {
        Overlay {
            inner,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every write the dry run would have made, in order.
    pub fn writes(&self) -> Vec<Would> {
        self.state().writes.clone()
    }

    /// The summaries of the writes since the last call (one step's), oldest first.
    pub fn step_writes(&self) -> Vec<String> {
        let mut state = self.state();
        let start = state.step_start.min(state.writes.len());
        state.step_start = state.writes.len();
        state.writes[start..]
            .iter()
            .map(|would| would.summary.clone())
            .collect()
    }

    fn now() -> DateTime<Utc> {
        Utc::now()
    }

    /// The ticket as the dry run sees it: planned, else stored.
    async fn ticket(&self, tenant: TenantId, id: TicketId) -> DeskResult<Ticket> {
        let planned = self.state().tickets.get(&id).cloned();
        if let Some(ticket) = planned
            && ticket.tenant == tenant
        {
            return Ok(ticket);
        }
        self.inner.ticket_get(tenant, id).await
    }

    /// The type `name` names, or `None` when there is none (as the stores read it for
    /// [`plan::type_to_check`]).
    async fn type_for_check(
        &self,
        tenant: TenantId,
        name: Option<&str>,
    ) -> DeskResult<Option<TicketType>> {
        match name {
            None => Ok(None),
            Some(name) => match self.inner.ticket_type_by_name(tenant, name).await {
                Ok(found) => Ok(Some(found)),
                Err(DeskError::NotFound(_)) => Ok(None),
                Err(err) => Err(err),
            },
        }
    }

    /// The type and group a write names must exist (`NotFound`), as the stores check.
    async fn check_references(
        &self,
        tenant: TenantId,
        ticket_type: Option<&str>,
        group: Option<&str>,
    ) -> DeskResult<()> {
        if let Some(name) = ticket_type {
            self.inner.ticket_type_by_name(tenant, name).await?;
        }
        if let Some(name) = group {
            self.inner.group_by_name(tenant, name).await?;
        }
        Ok(())
    }

    /// The number a new ticket would get: the next after the newest stored one, then
    /// one more for each ticket the dry run planned.
    async fn next_number(&self, tenant: TenantId) -> DeskResult<i64> {
        {
            let mut state = self.state();
            if let Some(next) = state.next_number {
                state.next_number = Some(next + 1);
                return Ok(next);
            }
        }
        let newest = self
            .inner
            .ticket_list(
                tenant,
                TicketFilter {
                    limit: 1,
                    ..TicketFilter::default()
                },
            )
            .await?;
        let next = newest.first().map_or(1, |ticket| ticket.number + 1);
        self.state().next_number = Some(next + 1);
        Ok(next)
    }

    /// Keep what `plan` would write and answer what the write would answer.
    fn keep(&self, plan: TicketPlan, summary: String, origin: Origin) -> TicketWrite {
        let event = plan
            .announcement()
            .map(|kind| TicketEvent::of(&plan.write, kind, origin));
        let mut state = self.state();
        state
            .tickets
            .insert(plan.write.ticket.id, plan.write.ticket.clone());
        state.writes.push(Would {
            summary,
            log: plan.log.map(|line| line.message),
            event,
        });
        plan.write
    }

    /// The open counts of a group's members as the dry run has moved them: the stored
    /// counts, less the planned tickets' stored assignments, plus their planned ones.
    async fn open_counts(
        &self,
        tenant: TenantId,
        group: GroupId,
    ) -> DeskResult<BTreeMap<MemberId, i64>> {
        let mut open = self.inner.member_open_counts(tenant, group).await?;
        let planned: Vec<Ticket> = self.state().tickets.values().cloned().collect();
        for ticket in planned {
            let stored = match self.inner.ticket_get(tenant, ticket.id).await {
                Ok(stored) => Some(stored),
                Err(DeskError::NotFound(_)) => None,
                Err(err) => return Err(err),
            };
            let holder = |t: &Ticket| t.assignee.as_ref().filter(|_| !t.closed).map(|a| a.id);
            if let Some(member) = stored.as_ref().and_then(holder) {
                *open.entry(member).or_insert(0) -= 1;
            }
            if let Some(member) = holder(&ticket) {
                *open.entry(member).or_insert(0) += 1;
            }
        }
        Ok(open)
    }
}

/// " (type order, status new, tags [a, b])" of a planned ticket ([`plan::carried`]).
fn what_it_carries(ticket: &Ticket) -> String {
    let parts = plan::carried(ticket);
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

fn change_summary(ticket: &Ticket, change: &BTreeMap<String, FieldChange>) -> String {
    if change.is_empty() {
        format!("nothing would change on {}", ticket.human_id())
    } else {
        format!("would change {}: {}", ticket.human_id(), describe(change))
    }
}

#[async_trait]
impl DeskStore for Overlay {
    async fn tenant_create(&self, _name: &str) -> DeskResult<(Tenant, String)> {
        Err(refused("tenant_create"))
    }
    async fn tenant_by_token(&self, token: &str) -> DeskResult<Option<Tenant>> {
        self.inner.tenant_by_token(token).await
    }
    async fn tenant_list(&self) -> DeskResult<Vec<Tenant>> {
        self.inner.tenant_list().await
    }
    async fn tenant_retention_set(
        &self,
        _tenant: TenantId,
        _retention: TenantRetention,
    ) -> DeskResult<()> {
        Err(refused("tenant_retention_set"))
    }
    async fn tenant_retentions(&self) -> DeskResult<Vec<(TenantId, TenantRetention)>> {
        self.inner.tenant_retentions().await
    }

    async fn group_create(&self, _tenant: TenantId, _name: &str) -> DeskResult<Group> {
        Err(refused("group_create"))
    }
    async fn group_list(&self, tenant: TenantId) -> DeskResult<Vec<Group>> {
        self.inner.group_list(tenant).await
    }
    async fn group_get(&self, tenant: TenantId, id: GroupId) -> DeskResult<Group> {
        self.inner.group_get(tenant, id).await
    }
    async fn group_by_name(&self, tenant: TenantId, name: &str) -> DeskResult<Group> {
        self.inner.group_by_name(tenant, name).await
    }
    async fn group_rename(
        &self,
        _tenant: TenantId,
        _id: GroupId,
        _name: &str,
    ) -> DeskResult<Group> {
        Err(refused("group_rename"))
    }
    async fn group_delete(&self, _tenant: TenantId, _id: GroupId) -> DeskResult<()> {
        Err(refused("group_delete"))
    }

    async fn member_add(
        &self,
        _tenant: TenantId,
        _group: GroupId,
        _name: &str,
        _email: Option<&str>,
        _capacity: u32,
    ) -> DeskResult<Member> {
        Err(refused("member_add"))
    }
    async fn member_list(&self, tenant: TenantId, group: GroupId) -> DeskResult<Vec<Member>> {
        self.inner.member_list(tenant, group).await
    }
    async fn member_update(
        &self,
        _tenant: TenantId,
        _member: MemberId,
        _name: Option<&str>,
        _email: Option<Option<&str>>,
        _capacity: Option<u32>,
    ) -> DeskResult<Member> {
        Err(refused("member_update"))
    }
    async fn member_delete(&self, _tenant: TenantId, _member: MemberId) -> DeskResult<()> {
        Err(refused("member_delete"))
    }
    async fn member_set_available(
        &self,
        _tenant: TenantId,
        _member: MemberId,
        _available: bool,
    ) -> DeskResult<Member> {
        Err(refused("member_set_available"))
    }

    async fn ticket_type_create(
        &self,
        _tenant: TenantId,
        _name: &str,
        _statuses: &[String],
        _fields: &[FieldDef],
    ) -> DeskResult<TicketType> {
        Err(refused("ticket_type_create"))
    }
    async fn ticket_type_list(&self, tenant: TenantId) -> DeskResult<Vec<TicketType>> {
        self.inner.ticket_type_list(tenant).await
    }
    async fn ticket_type_get(&self, tenant: TenantId, id: TicketTypeId) -> DeskResult<TicketType> {
        self.inner.ticket_type_get(tenant, id).await
    }
    async fn ticket_type_by_name(&self, tenant: TenantId, name: &str) -> DeskResult<TicketType> {
        self.inner.ticket_type_by_name(tenant, name).await
    }
    async fn ticket_type_update(
        &self,
        _tenant: TenantId,
        _id: TicketTypeId,
        _name: Option<&str>,
        _statuses: Option<&[String]>,
        _fields: Option<&[FieldDef]>,
    ) -> DeskResult<TicketType> {
        Err(refused("ticket_type_update"))
    }
    async fn ticket_type_delete(&self, _tenant: TenantId, _id: TicketTypeId) -> DeskResult<()> {
        Err(refused("ticket_type_delete"))
    }

    async fn ticket_upsert(
        &self,
        tenant: TenantId,
        upsert: TicketUpsert,
        origin: Origin,
    ) -> DeskResult<TicketWrite> {
        plan::check_upsert(&upsert)?;
        self.check_references(
            tenant,
            upsert.ticket_type.as_deref(),
            upsert.group.as_deref(),
        )
        .await?;
        let found = self
            .ticket_by_external_id(tenant, &upsert.external_id)
            .await?;
        let target = match found {
            Some(ticket) => UpsertTarget::Existing(Box::new(ticket)),
            None => UpsertTarget::New {
                tenant,
                number: self.next_number(tenant).await?,
            },
        };
        let checked = target.type_to_check(&upsert).map(str::to_owned);
        let ticket_type = self.type_for_check(tenant, checked.as_deref()).await?;
        let external_id = upsert.external_id.clone();
        let plan = plan::upsert(target, upsert, ticket_type.as_ref(), &origin, Self::now())?;
        let ticket = &plan.write.ticket;
        let summary = if plan.write.created {
            format!(
                "would create ticket {external_id} as {}{}",
                ticket.human_id(),
                what_it_carries(ticket)
            )
        } else if plan.write.change.is_empty() {
            format!(
                "would attach to ticket {} ({external_id}); nothing would change",
                ticket.human_id()
            )
        } else {
            format!(
                "would attach to ticket {} ({external_id}) and change {}",
                ticket.human_id(),
                describe(&plan.write.change)
            )
        };
        Ok(self.keep(plan, summary, origin))
    }

    async fn ticket_change(
        &self,
        tenant: TenantId,
        id: TicketId,
        change: TicketChange,
        origin: Origin,
    ) -> DeskResult<TicketWrite> {
        let old = self.ticket(tenant, id).await?;
        plan::check_change(&change)?;
        self.check_references(
            tenant,
            change.ticket_type.as_deref(),
            change.group.as_ref().and_then(Option::as_deref),
        )
        .await?;
        if matches!(change.assignee, Some(Some(_))) {
            return Err(refused("ticket_change with an assignee"));
        }
        let checked =
            plan::type_to_check(Some(&old), change.ticket_type.as_deref()).map(str::to_owned);
        let ticket_type = self.type_for_check(tenant, checked.as_deref()).await?;
        let plan = plan::change(
            old,
            change,
            None,
            ticket_type.as_ref(),
            &origin,
            Self::now(),
        )?;
        let summary = change_summary(&plan.write.ticket, &plan.write.change);
        Ok(self.keep(plan, summary, origin))
    }

    async fn ticket_assign(
        &self,
        tenant: TenantId,
        id: TicketId,
        group: &str,
        to: AssignTo,
        origin: Origin,
    ) -> DeskResult<Assignment> {
        let old = self.ticket(tenant, id).await?;
        let group = self.inner.group_by_name(tenant, group).await?;
        let members = self.inner.member_list(tenant, group.id).await?;
        let open = self.open_counts(tenant, group.id).await?;
        let reasoning = plan::reasoning(&plan::loads_for(&old, &members, &open));
        let planned = plan::assign_in_group(
            old,
            &group,
            &members,
            &open,
            &to,
            false,
            &origin,
            Self::now(),
        )?;
        let plan = match planned {
            GroupPlan::Write { plan, .. } => plan,
            GroupPlan::Wait {
                message, ticket, ..
            } => {
                // The step says that a dry run does not wait.
                return Ok(Assignment::Waiting { ticket, message });
            }
        };
        let ticket = &plan.write.ticket;
        let name = ticket
            .assignee
            .as_ref()
            .map_or_else(String::new, |assignee| assignee.name.clone());
        let how = match &to {
            AssignTo::LeastBusy(_) => "the least busy",
            AssignTo::Member(_) => "as named",
        };
        let summary = if plan.write.change.is_empty() {
            format!(
                "{} would stay with {name}, still {how} ({}: {reasoning})",
                ticket.human_id(),
                group.name
            )
        } else {
            format!(
                "would assign {} to {name} ({}: {reasoning})",
                ticket.human_id(),
                group.name
            )
        };
        Ok(Assignment::Assigned(self.keep(plan, summary, origin)))
    }

    async fn ticket_get(&self, tenant: TenantId, id: TicketId) -> DeskResult<Ticket> {
        self.ticket(tenant, id).await
    }

    async fn ticket_by_external_id(
        &self,
        tenant: TenantId,
        external_id: &str,
    ) -> DeskResult<Option<Ticket>> {
        let planned = self
            .state()
            .tickets
            .values()
            .find(|ticket| {
                ticket.tenant == tenant && ticket.external_id.as_deref() == Some(external_id)
            })
            .cloned();
        match planned {
            Some(ticket) => Ok(Some(ticket)),
            None => self.inner.ticket_by_external_id(tenant, external_id).await,
        }
    }

    async fn member_open_counts(
        &self,
        tenant: TenantId,
        group: GroupId,
    ) -> DeskResult<BTreeMap<MemberId, i64>> {
        self.open_counts(tenant, group).await
    }

    async fn ticket_log(&self, tenant: TenantId, id: TicketId) -> DeskResult<Vec<TicketLogEntry>> {
        match self.inner.ticket_log(tenant, id).await {
            Err(DeskError::NotFound(_)) if self.state().tickets.contains_key(&id) => Ok(Vec::new()),
            other => other,
        }
    }

    async fn ticket_log_append(
        &self,
        tenant: TenantId,
        id: TicketId,
        entry: TicketLogEntry,
    ) -> DeskResult<()> {
        plan::check_log_line(&entry)?;
        let ticket = self.ticket(tenant, id).await?;
        self.state().writes.push(Would {
            summary: format!(
                "would add to {}'s log: {}",
                ticket.human_id(),
                entry.message
            ),
            log: Some(entry.message),
            event: None,
        });
        Ok(())
    }

    async fn ticket_list(&self, tenant: TenantId, filter: TicketFilter) -> DeskResult<Vec<Ticket>> {
        self.inner.ticket_list(tenant, filter).await
    }

    async fn incident_report(
        &self,
        tenant: TenantId,
        report: IncidentReport,
    ) -> DeskResult<(Incident, bool)> {
        plan::check_report(&report)?;
        {
            let mut state = self.state();
            if let Some(planned) = state.incidents.get_mut(&report.cause) {
                planned.count += 1;
                let planned = planned.clone();
                state.writes.push(Would {
                    summary: format!(
                        "would count the incident \"{}\" again (seen {} times)",
                        planned.title, planned.count
                    ),
                    log: None,
                    event: None,
                });
                return Ok((planned, false));
            }
        }
        let open = self
            .inner
            .incident_list(Some(tenant))
            .await?
            .into_iter()
            .find(|incident| {
                incident.status == IncidentStatus::Open && incident.cause == report.cause
            });
        let (incident, opened, summary) = match open {
            Some(mut incident) => {
                incident.count += 1;
                let summary = format!(
                    "would count the open incident \"{}\" again (seen {} times)",
                    incident.title, incident.count
                );
                (incident, false, summary)
            }
            None => {
                let incident = plan::incident_open(tenant, report, Self::now());
                let summary = format!("would open an incident: \"{}\"", incident.title);
                (incident, true, summary)
            }
        };
        let mut state = self.state();
        state
            .incidents
            .insert(incident.cause.clone(), incident.clone());
        state.writes.push(Would {
            summary,
            log: None,
            event: None,
        });
        Ok((incident, opened))
    }

    async fn incident_list(&self, tenant: Option<TenantId>) -> DeskResult<Vec<Incident>> {
        self.inner.incident_list(tenant).await
    }
    async fn incident_recent(&self, tenant: TenantId, limit: usize) -> DeskResult<Vec<Incident>> {
        self.inner.incident_recent(tenant, limit).await
    }
    async fn incident_open_all(&self) -> DeskResult<Vec<Incident>> {
        self.inner.incident_open_all().await
    }
    async fn incident_get(&self, tenant: Option<TenantId>, id: IncidentId) -> DeskResult<Incident> {
        self.inner.incident_get(tenant, id).await
    }
    async fn incident_resolve(&self, _tenant: TenantId, _id: IncidentId) -> DeskResult<Incident> {
        Err(refused("incident_resolve"))
    }
}
