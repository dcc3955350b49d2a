//! Error workflows: the events `run.failed` and `incident.opened`, which start the
//! tenant's automations listening to them (n8n's error workflows, Inngest's `onFailure`).
//!
//! # Contract
//!
//! - **Who announces.** The executor, at the one place a run's failure is decided and
//!   reported (`Runtime::report`: a fatal step error, the last retry spent, a panic, a
//!   missing automation or version): `run.failed` for the run, and `incident.opened` for
//!   the incident the failure opened. The `incident/create` step announces
//!   `incident.opened` for the incident it reported. Failures decided without the
//!   executor (a crash loop past `max_reclaims`, a kind timeout, parks exhausted) open no
//!   incident today and announce nothing either.
//! - **Who hears.** The enabled automations of the *same tenant* whose trigger is
//!   `{"type": "event", "event": "run.failed"}` (or `incident.opened`), probed through
//!   `AutomationStore::automations_for_event` — one index probe; nobody listening costs
//!   nothing and writes no line.
//! - **What they get** (their run's context; never the incident's admin `detail`, the
//!   run's input, its other steps or its counters):
//!   - `run.failed`: `automation` (`id`, `name`, `version` of the run that failed),
//!     `run` (`id`), `step` (`key`, `op`: the step that failed; `run`/`run` when no step
//!     did), `message` and `impact` (the tenant-facing words of the failure, the same as
//!     its incident's `title` and `impact`), `incident` (`id`, `title`, `impact`,
//!     `status`, `count`, `opened`: the incident the failure opened or counted) and
//!     `ticket` (the ticket the run was working on, as it is now) when there is one.
//!   - `incident.opened`: `incident` (`id`, `title`, `impact`, `status`, `count`,
//!     `ticket`, `createdAt`), `automation` and `run` (whose run opened it) and `ticket`
//!     (the incident's ticket, as it is now) when there is one.
//! - **Loop guards** (DESIGN §4.7, extended to error events):
//!   1. the automation whose run failed (or opened the incident) is never started by it —
//!      an automation on `run.failed` never hears its own failures;
//!   2. nor is any automation whose run led to that run (the origin chain its payload
//!      carries, `CausedBy`): "A's failure started B; B's change started C; C's failure
//!      does not start A or B again";
//!   3. a run that an error event started does not announce its own failure, nor the
//!      incident its failure opens: an error workflow that fails opens (or counts) its
//!      incident and stops there. Two error workflows that both fail therefore run once
//!      each per failure of the first automation, never back and forth. (An explicit
//!      `incident/create` in an error workflow is announced, under guards 1 and 2 and
//!      the per-incident key below.)
//!   4. a started run carries the ticket and the cause, so guard 2 of §4.7 (5 runs of an
//!      automation per ticket per minute) counts it like an event run.
//!
//!   Each listener left out gets its reason on the announcing run's log line.
//! - **Once, durably.** Each run is enqueued with a unique key — `run.failed:<run>:<n>:
//!   <listener>` (`n`: how many times the run was retried by hand before this failure)
//!   and `incident.opened:<incident>:<listener>` — and a key already used is looked up
//!   first (`RunStore::run_find_by_key`, which finds finished runs too): announcing again
//!   (after a crash, a reclaim, a repeated `incident/create`) starts nothing twice. A
//!   failure that only counted an open incident announces no `incident.opened`
//!   ([`Notice::events`]). The announcement is written before the failed run's
//!   end: when the store does not answer, the failed run is snoozed with the
//!   announcement owed in its checkpoint (`ExecState::owed`) and announces again on
//!   resume, without running its step again; only then does it end `failed`. An
//!   `incident/create` whose announcement could not be written fails retryably (the
//!   retry counts the incident again and announces under the same keys). At-least-once
//!   with keys, not one transaction: the failure's incident and the end of the run are
//!   written by other transactions (the incident by the desk, the end by the worker's
//!   completer), so there is no single write to join.
//!
//! ```text
//!  step fails ─► failed line saved ─► incident reported ─► announce ─► Fail
//!                                                             │ store down
//!                                                             ▼
//!                                        owed in checkpoint, Snooze ─► resume: announce ─► Fail
//! ```

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use fronta_desk::{DeskError, DeskStore, Incident, TenantId, TicketId};
use fronta_engine::{Dispatcher, EnqueueRequest, Enqueued, Trigger as RunTrigger};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::executor::{AUTOMATION_KIND, AUTOMATION_MAX_RETRIES, CausedBy, RunPayload};
use crate::model::EventKind;
use crate::steps::ticket_json;
use crate::store::{AutomationId, AutomationStore, StoredAutomation};

/// The context roots of a `run.failed` run.
pub const RUN_FAILED_ROOTS: &[&str] = &[
    "automation",
    "run",
    "step",
    "message",
    "impact",
    "incident",
    "ticket",
];
/// The context roots of an `incident.opened` run.
pub const INCIDENT_OPENED_ROOTS: &[&str] = &["incident", "automation", "run", "ticket"];
/// The `op` of the step-log line that says which error workflows an event started.
pub const ANNOUNCE_OP: &str = "run/error-workflows";

/// The run an error event is about: the run that failed, or whose run opened an incident.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    pub tenant: TenantId,
    pub automation_id: AutomationId,
    pub automation_name: String,
    pub version: u32,
    pub run_id: String,
    /// The run's own cause (its origin chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caused_by: Option<CausedBy>,
    /// The error event that started the run, if one did (loop guard 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<EventKind>,
}

/// What failed: the step and the tenant-facing words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedStep {
    /// The step's key (its `name`); `run` when no step failed.
    pub key: String,
    pub op: String,
    /// The tenant-facing message (the incident's title).
    pub message: String,
    /// The tenant-facing impact (the incident's impact).
    pub impact: String,
    /// How many times the run was retried by hand before this failure.
    pub generation: usize,
    /// The ticket the run was working on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<TicketId>,
}

/// The incident as a tenant sees it (never its `detail` or `cause`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IncidentBrief {
    pub id: String,
    pub title: String,
    pub impact: String,
    pub status: String,
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<TicketId>,
    pub created_at: DateTime<Utc>,
    /// Whether the report that announced it opened it (not counted it again).
    pub opened: bool,
}

impl IncidentBrief {
    pub fn of(incident: &Incident, opened: bool) -> Self {
        Self {
            id: incident.id.to_string(),
            title: incident.title.clone(),
            impact: incident.impact.clone(),
            status: serde_json::to_value(incident.status)
                .ok()
                .and_then(|status| status.as_str().map(str::to_owned))
                .unwrap_or_default(),
            count: incident.count,
            ticket: incident.ticket,
            created_at: incident.created_at,
            opened,
        }
    }
}

/// What is announced: `run.failed` when `failed` is there, `incident.opened` when
/// `incident` is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    pub source: Source,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<FailedStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incident: Option<IncidentBrief>,
    /// Whether the run's failure made this notice (loop guard 3 applies), rather than an
    /// `incident/create` step.
    pub by_failure: bool,
}

impl Notice {
    /// The events this notice announces, in order: `incident.opened` for a failure only
    /// when the failure opened the incident (a repeat that counted an open one starts
    /// nothing; the failure path announces again only a notice it owes, with the same
    /// `opened`); for an `incident/create` step whenever it reported one (its retry after
    /// an announcement that could not be written counts the incident instead of opening
    /// it; the per-incident key keeps it to one run).
    pub fn events(&self) -> Vec<EventKind> {
        let mut events = Vec::new();
        if self.failed.is_some() {
            events.push(EventKind::RunFailed);
        }
        if let Some(incident) = &self.incident
            && (incident.opened || !self.by_failure)
        {
            events.push(EventKind::IncidentOpened);
        }
        events
    }

    /// The ticket the started runs are about.
    fn ticket(&self, event: EventKind) -> Option<TicketId> {
        match event {
            EventKind::RunFailed => self.failed.as_ref().and_then(|failed| failed.ticket),
            _ => self.incident.as_ref().and_then(|incident| incident.ticket),
        }
    }
}

/// What happens to one listener of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Started (unless its key was used already).
    Start { id: AutomationId, version: u32 },
    /// Left out, and why (a loop guard).
    Skip { name: String, reason: String },
}

/// Which of `listeners` of `event` the notice starts, and why the others not (the loop
/// guards of the module docs).
pub fn decide(notice: &Notice, event: EventKind, listeners: &[StoredAutomation]) -> Vec<Decision> {
    let source = &notice.source;
    let chain: HashSet<String> = CausedBy::onward(source.caused_by.as_ref())
        .into_iter()
        .map(|link| link.automation_id)
        .collect();
    listeners
        .iter()
        .map(|listener| {
            let name = listener.automation.name.clone();
            if notice.by_failure && let Some(started_by) = source.started_by {
                return Decision::Skip {
                    name,
                    reason: format!(
                        "the failed run was itself started by {}: an error workflow's failure starts no error workflow (its incident says it)",
                        started_by.as_str()
                    ),
                };
            }
            if listener.id == source.automation_id {
                return Decision::Skip {
                    name,
                    reason: match event {
                        EventKind::RunFailed => "its own failure never starts it".to_owned(),
                        _ => "an incident its own run opened never starts it".to_owned(),
                    },
                };
            }
            if chain.contains(&listener.id.to_string()) {
                return Decision::Skip {
                    name,
                    reason: "its run led to this one (loop guard: an automation is not started again by what it caused)".to_owned(),
                };
            }
            Decision::Start {
                id: listener.id,
                version: listener.current_version,
            }
        })
        .collect()
}

/// The unique key of `event`'s run of `listener` for `notice`.
pub fn unique_key(notice: &Notice, event: EventKind, listener: AutomationId) -> String {
    match (event, &notice.failed, &notice.incident) {
        (EventKind::RunFailed, Some(failed), _) => format!(
            "run.failed:{}:{}:{listener}",
            notice.source.run_id, failed.generation
        ),
        (_, _, Some(incident)) => format!("incident.opened:{}:{listener}", incident.id),
        _ => format!("{}:{}:{listener}", event.as_str(), notice.source.run_id),
    }
}

/// The context a run of `event` for `notice` starts with; `ticket` is the ticket as it
/// is now (already turned into the event context's `ticket`).
pub fn context_of(notice: &Notice, event: EventKind, ticket: Option<Value>) -> Map<String, Value> {
    let source = &notice.source;
    let mut context = Map::new();
    context.insert(
        "automation".into(),
        json!({"id": source.automation_id.to_string(), "name": source.automation_name, "version": source.version}),
    );
    context.insert("run".into(), json!({"id": source.run_id}));
    let incident = |with_ticket: bool| {
        notice.incident.as_ref().map(|incident| {
            let mut view = json!({
                "id": incident.id, "title": incident.title, "impact": incident.impact,
                "status": incident.status, "count": incident.count, "opened": incident.opened,
            });
            if with_ticket {
                view["ticket"] = json!(incident.ticket.map(|ticket| ticket.to_string()));
                view["createdAt"] = json!(incident.created_at);
            }
            view
        })
    };
    match event {
        EventKind::RunFailed => {
            if let Some(failed) = &notice.failed {
                context.insert("step".into(), json!({"key": failed.key, "op": failed.op}));
                context.insert("message".into(), json!(failed.message));
                context.insert("impact".into(), json!(failed.impact));
            }
            if let Some(view) = incident(false) {
                context.insert("incident".into(), view);
            }
        }
        _ => {
            if let Some(view) = incident(true) {
                context.insert("incident".into(), view);
            }
        }
    }
    if let Some(ticket) = ticket {
        context.insert("ticket".into(), ticket);
    }
    context
}

/// The enqueue of `event`'s run of the listener `id` (pinned to `version`).
pub fn request(
    notice: &Notice,
    event: EventKind,
    id: AutomationId,
    version: u32,
    context: Map<String, Value>,
) -> EnqueueRequest {
    let source = &notice.source;
    let payload = RunPayload {
        automation_id: id,
        tenant: source.tenant,
        context,
        ticket: notice.ticket(event),
        automation_version: version,
        retry_of: None,
        caused_by: Some(CausedBy {
            automation_id: source.automation_id.to_string(),
            run_id: source.run_id.clone(),
            chain: CausedBy::onward(source.caused_by.as_ref()),
        }),
        restart: None,
        error_event: Some(event),
    };
    EnqueueRequest::new(
        AUTOMATION_KIND,
        serde_json::to_value(payload).unwrap_or(Value::Null),
        AUTOMATION_MAX_RETRIES,
    )
    .tenant(source.tenant.to_string())
    .trigger(RunTrigger::Event)
    .unique_key(unique_key(notice, event, id))
}

/// Announce `notice` to the tenant's listeners: `Ok(None)` when nobody listens,
/// `Ok(Some(line))` saying what was started and what was left out, `Err` when the store
/// did not answer (the caller announces again later; keys fold what was written).
pub async fn announce(
    dispatcher: &Dispatcher,
    automations: &dyn AutomationStore,
    desk: &dyn DeskStore,
    notice: &Notice,
) -> Result<Option<String>, String> {
    let tenant = notice.source.tenant;
    let mut parts = Vec::new();
    for event in notice.events() {
        let listeners = automations
            .automations_for_event(tenant, event.as_str())
            .await
            .map_err(|err| format!("the listeners of {} cannot be read: {err}", event.as_str()))?;
        if listeners.is_empty() {
            continue;
        }
        let names: std::collections::HashMap<AutomationId, String> = listeners
            .iter()
            .map(|listener| (listener.id, listener.automation.name.clone()))
            .collect();
        let mut ticket = None;
        let mut said = Vec::new();
        for decision in decide(notice, event, &listeners) {
            match decision {
                Decision::Skip { name, reason } => {
                    said.push(format!("not \"{name}\": {reason}"));
                }
                Decision::Start { id, version } => {
                    let name = &names[&id];
                    let key = unique_key(notice, event, id);
                    let found = dispatcher
                        .store()
                        .run_find_by_key(&tenant.to_string(), &key)
                        .await
                        .map_err(|err| format!("run {key} cannot be looked up: {err}"))?;
                    if let Some(run) = found {
                        said.push(format!("\"{name}\" was started already (run {})", run.id));
                        continue;
                    }
                    if ticket.is_none() {
                        ticket = Some(ticket_now(desk, tenant, notice.ticket(event)).await?);
                    }
                    let context = context_of(notice, event, ticket.clone().flatten());
                    let enqueued = dispatcher
                        .enqueue(request(notice, event, id, version, context))
                        .await
                        .map_err(|err| format!("\"{name}\" cannot be started: {err}"))?;
                    said.push(match enqueued {
                        Enqueued::Inserted(run) => format!("started \"{name}\" (run {run})"),
                        Enqueued::Existing(run) => {
                            format!("\"{name}\" was started already (run {run})")
                        }
                    });
                }
            }
        }
        parts.push(format!("{}: {}", event.as_str(), said.join("; ")));
    }
    Ok((!parts.is_empty()).then(|| parts.join(". ")))
}

/// The ticket `id` as the event context shows it, as it is now (`None`: no ticket, or
/// it is gone).
async fn ticket_now(
    desk: &dyn DeskStore,
    tenant: TenantId,
    id: Option<TicketId>,
) -> Result<Option<Value>, String> {
    let Some(id) = id else { return Ok(None) };
    match desk.ticket_get(tenant, id).await {
        Ok(ticket) => Ok(Some(ticket_json(&ticket))),
        Err(DeskError::NotFound(_)) => Ok(None),
        Err(err) => Err(format!("the ticket cannot be read: {err}")),
    }
}

/// A sample context of `event` for a dry run that was given none: what a run would
/// start with, with example values.
pub fn sample_context(event: EventKind) -> Map<String, Value> {
    let now = Utc::now();
    let notice = Notice {
        source: Source {
            tenant: TenantId(uuid::Uuid::nil()),
            automation_id: AutomationId(uuid::Uuid::nil()),
            automation_name: "Example automation".into(),
            version: 1,
            run_id: "00000000-0000-0000-0000-000000000000".into(),
            caused_by: None,
            started_by: None,
        },
        failed: Some(FailedStep {
            key: "notify".into(),
            op: "http/request".into(),
            message: "The automation \"Example automation\" did not finish; we lost no data."
                .into(),
            impact: "Everything received is kept; the rest of the automation did not run.".into(),
            generation: 0,
            ticket: None,
        }),
        incident: Some(IncidentBrief {
            id: "00000000-0000-0000-0000-000000000000".into(),
            title: "The automation \"Example automation\" did not finish; we lost no data.".into(),
            impact: "Everything received is kept; the rest of the automation did not run.".into(),
            status: "open".into(),
            count: 1,
            ticket: None,
            created_at: now,
            opened: true,
        }),
        by_failure: true,
    };
    context_of(&notice, event, None)
}

#[cfg(test)]
mod tests {
    use fronta_desk::OriginLink;

    use super::*;
    use crate::model::Automation;

    fn listener(name: &str, id: AutomationId) -> StoredAutomation {
        let automation = Automation::from_value(&json!({
            "name": name, "trigger": {"type": "event", "event": "run.failed"},
            "steps": [{"name": "say", "op": "flow/log", "input": {"message": "x"}}]
        }))
        .expect("a listener");
        let now = Utc::now();
        StoredAutomation {
            id,
            tenant: TenantId(uuid::Uuid::nil()),
            automation,
            webhook_token: None,
            signing_secret: None,
            retired: Vec::new(),
            current_version: 2,
            in_flight: crate::store::InFlight::Finish,
            created_at: now,
            updated_at: now,
        }
    }

    fn notice(source: AutomationId) -> Notice {
        Notice {
            source: Source {
                tenant: TenantId(uuid::Uuid::nil()),
                automation_id: source,
                automation_name: "Orders".into(),
                version: 3,
                run_id: "run-1".into(),
                caused_by: None,
                started_by: None,
            },
            failed: Some(FailedStep {
                key: "status".into(),
                op: "ticket/set-status".into(),
                message: "The automation for ticket TK-4 did not finish; we lost no data.".into(),
                impact: "\"Orders\" stopped before it finished ticket TK-4.".into(),
                generation: 0,
                ticket: Some(TicketId(uuid::Uuid::nil())),
            }),
            incident: None,
            by_failure: true,
        }
    }

    #[test]
    fn an_automation_never_hears_its_own_failure_nor_one_its_runs_led_to() {
        let (me, other, earlier) = (
            AutomationId::new(),
            AutomationId::new(),
            AutomationId::new(),
        );
        let mut notice = notice(me);
        notice.source.caused_by = Some(CausedBy {
            automation_id: earlier.to_string(),
            run_id: "run-0".into(),
            chain: vec![],
        });
        let listeners = [
            listener("Me", me),
            listener("Other", other),
            listener("Earlier", earlier),
        ];
        let decisions = decide(&notice, EventKind::RunFailed, &listeners);
        assert!(
            matches!(&decisions[0], Decision::Skip { name, reason } if name == "Me" && reason.contains("own failure")),
            "itself: {decisions:?}"
        );
        assert_eq!(
            decisions[1],
            Decision::Start {
                id: other,
                version: listeners[1].current_version
            },
            "another automation starts"
        );
        assert!(
            matches!(&decisions[2], Decision::Skip { reason, .. } if reason.contains("led to")),
            "an automation of the chain: {decisions:?}"
        );
    }

    #[test]
    fn a_failed_error_workflow_starts_no_error_workflow_but_an_explicit_incident_is_told() {
        let (me, other) = (AutomationId::new(), AutomationId::new());
        let mut failed = notice(me);
        failed.source.started_by = Some(EventKind::RunFailed);
        let listeners = [listener("Other", other)];
        assert!(
            matches!(&decide(&failed, EventKind::RunFailed, &listeners)[0],
                Decision::Skip { reason, .. } if reason.contains("itself started by run.failed")),
            "loop guard 3"
        );
        let mut created = failed.clone();
        created.by_failure = false;
        assert!(
            matches!(
                decide(&created, EventKind::IncidentOpened, &listeners)[0],
                Decision::Start { .. }
            ),
            "an incident/create step in an error workflow is announced"
        );
    }

    #[test]
    fn keys_tell_one_failure_of_a_run_and_one_incident_apart() {
        let listener = AutomationId(uuid::Uuid::nil());
        let mut notice = notice(AutomationId::new());
        assert_eq!(
            unique_key(&notice, EventKind::RunFailed, listener),
            format!("run.failed:run-1:0:{listener}")
        );
        notice.failed.as_mut().expect("failed").generation = 1;
        assert_eq!(
            unique_key(&notice, EventKind::RunFailed, listener),
            format!("run.failed:run-1:1:{listener}"),
            "a failure after a retry by hand is another failure"
        );
        notice.incident = Some(IncidentBrief {
            id: "inc-9".into(),
            title: "t".into(),
            impact: "i".into(),
            status: "open".into(),
            count: 2,
            ticket: None,
            created_at: Utc::now(),
            opened: false,
        });
        assert_eq!(
            unique_key(&notice, EventKind::IncidentOpened, listener),
            format!("incident.opened:inc-9:{listener}"),
            "one run per incident, whatever run counted it"
        );
    }

    #[test]
    fn the_failure_context_holds_the_tenant_words_and_no_admin_detail() {
        let context = context_of(
            &notice(AutomationId(uuid::Uuid::nil())),
            EventKind::RunFailed,
            Some(json!({"number": "TK-4"})),
        );
        assert_eq!(context["automation"]["name"], "Orders");
        assert_eq!(context["automation"]["version"], 3);
        assert_eq!(context["run"]["id"], "run-1");
        assert_eq!(
            context["step"],
            json!({"key": "status", "op": "ticket/set-status"})
        );
        assert_eq!(
            context["message"],
            "The automation for ticket TK-4 did not finish; we lost no data."
        );
        assert_eq!(context["ticket"]["number"], "TK-4");
        let keys: Vec<&String> = context.keys().collect();
        for root in &keys {
            assert!(
                RUN_FAILED_ROOTS.contains(&root.as_str()),
                "{root} is a declared root"
            );
        }
        let text = Value::Object(context.clone()).to_string();
        for admin in ["detail", "input", "attempts", "cause"] {
            assert!(!text.contains(admin), "no {admin} in {text}");
        }
    }

    #[test]
    fn a_failure_announces_incident_opened_only_when_it_opened_the_incident() {
        let mut notice = notice(AutomationId::new());
        assert_eq!(
            notice.events(),
            vec![EventKind::RunFailed],
            "no incident, no incident.opened"
        );
        let brief = |opened| IncidentBrief {
            id: "inc-1".into(),
            title: "t".into(),
            impact: "i".into(),
            status: "open".into(),
            count: if opened { 1 } else { 2 },
            ticket: None,
            created_at: Utc::now(),
            opened,
        };
        notice.incident = Some(brief(true));
        assert_eq!(
            notice.events(),
            vec![EventKind::RunFailed, EventKind::IncidentOpened]
        );
        notice.incident = Some(brief(false));
        assert_eq!(
            notice.events(),
            vec![EventKind::RunFailed],
            "a repeat counts it only"
        );
        let created = Notice {
            failed: None,
            by_failure: false,
            ..notice
        };
        assert_eq!(
            created.events(),
            vec![EventKind::IncidentOpened],
            "an incident/create step announces (the key keeps it to one run)"
        );
    }

    #[test]
    fn samples_only_hold_the_roots_validation_allows() {
        for event in [EventKind::RunFailed, EventKind::IncidentOpened] {
            let sample = sample_context(event);
            for root in sample.keys() {
                assert!(
                    event.context_roots().contains(&root.as_str()),
                    "{} sample root {root}",
                    event.as_str()
                );
            }
        }
        assert_eq!(
            sample_context(EventKind::IncidentOpened)["incident"]["status"],
            "open"
        );
    }

    #[test]
    fn a_caused_chain_is_carried_on_and_the_chain_of_the_source_is_excluded() {
        let me = AutomationId::new();
        let mut notice = notice(me);
        let far = AutomationId::new();
        notice.source.caused_by = Some(CausedBy {
            automation_id: AutomationId::new().to_string(),
            run_id: "r2".into(),
            chain: vec![OriginLink {
                automation_id: far.to_string(),
                run_id: "r1".into(),
            }],
        });
        let request = request(
            &notice,
            EventKind::RunFailed,
            AutomationId::new(),
            1,
            Map::new(),
        );
        let payload: RunPayload =
            serde_json::from_value(request.payload.clone()).expect("a payload");
        let cause = payload.caused_by.expect("a cause");
        assert_eq!(
            cause.automation_id,
            me.to_string(),
            "the failed automation caused it"
        );
        assert_eq!(
            cause.chain.len(),
            2,
            "the earlier links carried on: {:?}",
            cause.chain
        );
        assert_eq!(payload.error_event, Some(EventKind::RunFailed));
        assert!(
            matches!(
                &decide(&notice, EventKind::RunFailed, &[listener("Far", far)])[0],
                Decision::Skip { .. }
            ),
            "a link deep in the chain is left out too"
        );
    }
}
