//! `GET /api/stream`: Server-Sent Events of one tenant — `run.queued`, `run.started`,
//! `run.completed`, `run.failed`, `run.cancelled`, `run.suppressed` (and
//! `run.scheduled`), `ticket.created`, `ticket.changed`, `incident.opened`, `incident.updated`, `incident.resolved` — as
//! `event: <name>` / `data: <json>` (a run as `GET /api/runs` lists it, a ticket without
//! its log, an incident as its tenant sees it), with a keep-alive comment when idle.
//!
//! The [`Hub`] keeps one `tokio::sync::broadcast` channel per tenant that has a stream
//! open. Two feeds fill it:
//! - **in-process publishes** where the server sees things happen: webhook and manual
//!   enqueues, retries and cancels, a person's ticket change (`PATCH /api/tickets/{id}`);
//! - **a light poll** of the tenant (every `stream_poll_interval`, 500 ms): its newest
//!   100 runs, newest 100 tickets and its incidents through the existing ports, compared
//!   with what the stream last said. That is how the in-process worker's progress
//!   (started, completed, tickets it wrote, incidents) reaches a stream — and the work of
//!   a separate `fronta worker` process or another `fronta serve`.
//!
//! Limits (documented in `docs/api-notes.md`): the poll sees states, not transitions — a
//! run that went queued → running → completed between two looks shows only
//! `run.completed`; a change to a ticket older than the newest 100 is streamed only when
//! made through this server's API; events reach a stream up to one poll interval late.
//! A reader too slow for 1,024 buffered events gets a `: lagged` comment and misses them.
//! The first look of a tenant's poll records what exists without emitting it: a stream
//! carries what happens after it opened (no replay, no `Last-Event-ID`).
//!
//! Decision: the stream is tenant-scoped; the admin token is refused (401) like on every
//! tenant route — an all-tenants stream would be a firehose with other tenants' data.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use chrono::{DateTime, Utc};
use fronta_desk::store::TicketFilter;
use fronta_desk::{Incident, IncidentId, IncidentStatus, TenantId, Ticket, TicketId};
use fronta_engine::{Run, RunFilter, RunId, RunStatus};
use futures_util::Stream;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::app::App;
use crate::auth::TokenAuth;
use crate::wire::{RunView, incident_view, ticket_view};
use fronta_desk::access::TokenId;

/// Events buffered per tenant for slow readers.
const CHANNEL_CAPACITY: usize = 1024;
/// How many of the newest runs and tickets, and of the incidents changed last, one poll
/// looks at.
const POLL_WINDOW: usize = 100;

/// One event of a stream.
#[derive(Debug, Clone)]
pub struct StreamEvent {
    pub name: String,
    pub data: Value,
}

/// The broadcast channels of the tenants with a stream open.
#[derive(Debug, Default)]
pub struct Hub {
    tenants: Mutex<HashMap<TenantId, Arc<Channel>>>,
    closed: AtomicBool,
}

#[derive(Debug)]
struct Channel {
    sender: broadcast::Sender<StreamEvent>,
    seen: Mutex<Seen>,
}

/// What the stream last said about each thing, so neither feed repeats the other. After
/// each poll it holds only what that poll's windows hold (the newest runs and tickets,
/// the incidents changed last), so it stays the size of the windows however long the stream
/// is open: a run or ticket that left the window is told again only if it changes.
#[derive(Debug, Default)]
struct Seen {
    runs: HashMap<RunId, RunStatus>,
    tickets: HashMap<TicketId, DateTime<Utc>>,
    incidents: HashMap<IncidentId, (IncidentStatus, u32, DateTime<Utc>)>,
}

impl Seen {
    /// Forget what the last poll's windows no longer hold.
    fn keep_only(
        &mut self,
        runs: &HashSet<RunId>,
        tickets: &HashSet<TicketId>,
        incidents: &HashSet<IncidentId>,
    ) {
        self.runs.retain(|id, _| runs.contains(id));
        self.tickets.retain(|id, _| tickets.contains(id));
        self.incidents.retain(|id, _| incidents.contains(id));
    }
}

fn run_event(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Scheduled => "run.scheduled",
        RunStatus::Queued => "run.queued",
        RunStatus::Running => "run.started",
        RunStatus::Completed => "run.completed",
        RunStatus::Failed => "run.failed",
        RunStatus::Cancelled => "run.cancelled",
        RunStatus::Suppressed => "run.suppressed",
    }
}

impl Channel {
    fn send(&self, name: &str, data: Value) {
        // No receiver left is not an error: the poll notices and ends.
        let _ = self.sender.send(StreamEvent {
            name: name.to_owned(),
            data,
        });
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        // A panic while holding the lock left only a cache behind: keep using it.
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Emit `run.<status>` unless the stream said so already (`emit` false: only record).
    fn run(&self, run: &Run, emit: bool) {
        let previous = self.seen().runs.insert(run.id, run.status);
        if emit && previous != Some(run.status) {
            self.send(run_event(run.status), json_of(&RunView::of(run, false)));
        }
    }

    fn ticket(&self, ticket: &Ticket, emit: bool) {
        let previous = self.seen().tickets.insert(ticket.id, ticket.updated_at);
        if !emit || previous == Some(ticket.updated_at) {
            return;
        }
        let name = if previous.is_none() && ticket.created_at == ticket.updated_at {
            "ticket.created"
        } else {
            "ticket.changed"
        };
        self.send(name, ticket_view(ticket, None));
    }

    fn incident(&self, incident: &Incident, emit: bool) {
        let now = (incident.status, incident.count, incident.updated_at);
        let previous = self.seen().incidents.insert(incident.id, now);
        if !emit || previous == Some(now) {
            return;
        }
        let name = match (previous, incident.status) {
            (_, IncidentStatus::Resolved) => "incident.resolved",
            (None, IncidentStatus::Open) => "incident.opened",
            (Some(_), IncidentStatus::Open) => "incident.updated",
        };
        self.send(name, incident_view(incident));
    }
}

fn json_of(view: &RunView) -> Value {
    serde_json::to_value(view).unwrap_or(Value::Null)
}

impl Hub {
    fn channel(&self, tenant: TenantId) -> Option<Arc<Channel>> {
        self.lock().get(&tenant).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TenantId, Arc<Channel>>> {
        self.tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends every stream (their responses finish) and every poll; called on shutdown so
    /// that open streams do not hold the graceful shutdown forever.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.lock().clear();
    }

    /// A receiver of `tenant`'s events. The first stream of a tenant records what exists
    /// (without emitting it) before it returns, then starts the tenant's poll.
    async fn subscribe(&self, app: &App, tenant: TenantId) -> broadcast::Receiver<StreamEvent> {
        let (receiver, new_channel) = {
            let mut tenants = self.lock();
            if self.closed.load(Ordering::SeqCst) {
                // A closed hub: a receiver whose sender is gone ends the stream at once.
                return broadcast::channel(1).1;
            }
            match tenants.get(&tenant) {
                Some(channel) => (channel.sender.subscribe(), None),
                None => {
                    let (sender, receiver) = broadcast::channel(CHANNEL_CAPACITY);
                    let channel = Arc::new(Channel {
                        sender,
                        seen: Mutex::new(Seen::default()),
                    });
                    tenants.insert(tenant, channel.clone());
                    (receiver, Some(channel))
                }
            }
        };
        if let Some(channel) = new_channel {
            look(app, tenant, &channel, false).await;
            tokio::spawn(poll(app.clone(), tenant, channel));
        }
        receiver
    }

    /// Tell `tenant`'s streams about run `id` (after an enqueue, retry or cancel here).
    pub(crate) async fn run_changed(&self, app: &App, tenant: TenantId, id: RunId) {
        let Some(channel) = self.channel(tenant) else {
            return;
        };
        match app.runs().run_get(id).await {
            Ok(Some(run)) if run.kind == STREAMED_KIND => channel.run(&run, true),
            Ok(Some(_)) => {}
            Ok(None) => {}
            Err(err) => tracing::debug!(run = %id, error = %err, "stream: run not read"),
        }
    }

    /// Tell `tenant`'s streams about a ticket written here.
    pub(crate) fn ticket_changed(&self, tenant: TenantId, ticket: &Ticket) {
        if let Some(channel) = self.channel(tenant) {
            channel.ticket(ticket, true);
        }
    }
}

/// The tenant's poll: every `stream_poll_interval` while anyone listens.
async fn poll(app: App, tenant: TenantId, channel: Arc<Channel>) {
    let mut every = tokio::time::interval(app.config().stream_poll_interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        let hub = &app.inner().hub;
        if hub.closed.load(Ordering::SeqCst) {
            return;
        }
        {
            let mut tenants = hub.lock();
            if channel.sender.receiver_count() == 0 {
                if tenants
                    .get(&tenant)
                    .is_some_and(|current| Arc::ptr_eq(current, &channel))
                {
                    tenants.remove(&tenant);
                }
                return;
            }
        }
        look(&app, tenant, &channel, true).await;
    }
}

/// The runs a stream tells of: the automation runs (a bulk action is followed at its own
/// route).
const STREAMED_KIND: &str = fronta_automation::executor::AUTOMATION_KIND;

/// One look at the tenant's newest runs, tickets and incidents; what they no longer
/// hold is forgotten (a failed read keeps what was seen).
async fn look(app: &App, tenant: TenantId, channel: &Channel, emit: bool) {
    let filter = RunFilter {
        tenant: Some(tenant.to_string()),
        kind: Some(STREAMED_KIND.into()),
        limit: POLL_WINDOW,
        ..RunFilter::default()
    };
    let mut complete = true;
    let mut runs_seen = HashSet::new();
    match app.runs().run_list(filter).await {
        // Oldest first, so a stream tells them in the order they happened.
        Ok(runs) => runs.iter().rev().for_each(|run| {
            runs_seen.insert(run.id);
            channel.run(run, emit);
        }),
        Err(err) => {
            complete = false;
            tracing::debug!(error = %err, "stream poll: runs not listed");
        }
    }
    let filter = TicketFilter {
        limit: POLL_WINDOW,
        ..TicketFilter::default()
    };
    let mut tickets_seen = HashSet::new();
    match app.desk().ticket_list(tenant, filter).await {
        Ok(tickets) => tickets.iter().rev().for_each(|ticket| {
            tickets_seen.insert(ticket.id);
            channel.ticket(ticket, emit);
        }),
        Err(err) => {
            complete = false;
            tracing::debug!(error = %err, "stream poll: tickets not listed");
        }
    }
    let mut incidents_seen = HashSet::new();
    match app.desk().incident_recent(tenant, POLL_WINDOW).await {
        Ok(incidents) => incidents.iter().rev().for_each(|incident| {
            incidents_seen.insert(incident.id);
            channel.incident(incident, emit);
        }),
        Err(err) => {
            complete = false;
            tracing::debug!(error = %err, "stream poll: incidents not listed");
        }
    }
    if complete {
        channel
            .seen()
            .keep_only(&runs_seen, &tickets_seen, &incidents_seen);
    }
}

/// `GET /api/stream`.
pub async fn stream(
    TokenAuth(principal): TokenAuth,
    State(app): State<App>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let tenant = principal.tenant.id;
    let receiver = app.inner().hub.subscribe(&app, tenant).await;
    let mut check = tokio::time::interval(app.config().stream_token_check);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let open = Open {
        receiver,
        check,
        app: app.clone(),
        token: principal.token.id,
        tenant,
    };
    let events = futures_util::stream::unfold(open, |mut open| async move {
        loop {
            tokio::select! {
                received = open.receiver.recv() => {
                    let event = match received {
                        Ok(event) => Event::default()
                            .event(event.name)
                            .data(event.data.to_string()),
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            Event::default().comment(format!("lagged: {missed} events missed"))
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    };
                    return Some((Ok(event), open));
                }
                _ = open.check.tick() => {
                    if !open.token_is_live().await {
                        tracing::info!(tenant = %open.tenant, token = %open.token, "stream closed: its token was revoked or expired");
                        return None;
                    }
                }
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(app.config().stream_keep_alive))
}

/// An open stream: its events, and the look at its token that ends it once the token is
/// revoked or expired (the next request with it would be 401; the stream ends as soon).
struct Open {
    receiver: broadcast::Receiver<StreamEvent>,
    check: tokio::time::Interval,
    app: App,
    token: TokenId,
    tenant: TenantId,
}

impl Open {
    /// `false` once the token is gone or expired; a store that does not answer keeps the
    /// stream open (a revocation is not missed: the next look asks again).
    async fn token_is_live(&self) -> bool {
        match self.app.access().token_get(self.tenant, self.token).await {
            Ok(token) => token.is_live(self.app.inner().clock.now()),
            Err(fronta_desk::DeskError::NotFound(_)) => false,
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_windows_no_longer_hold_is_forgotten() {
        let mut seen = Seen::default();
        let ids: Vec<RunId> = (0..1000).map(|_| RunId::new_v7()).collect();
        for id in &ids {
            seen.runs.insert(*id, RunStatus::Completed);
        }
        let window: HashSet<RunId> = ids[900..].iter().copied().collect();
        seen.keep_only(&window, &HashSet::new(), &HashSet::new());
        assert_eq!(
            seen.runs.len(),
            100,
            "the size of the window, not of the history"
        );
        assert!(
            ids[900..].iter().all(|id| seen.runs.contains_key(id)),
            "the window is kept"
        );
    }
}
