//! Wire types: how domain values look in API.md's JSON (camelCase, ids as strings, RFC
//! 3339 UTC times). Only this crate has them; the domain crates know no HTTP.
//!
//! Decisions where API.md is silent:
//! - A ticket carries its `log` when read alone (`GET`/`PATCH /api/tickets/{id}`), not
//!   in lists; a run carries its `steps` when read alone, not in lists.
//! - A tenant sees an incident's `id`, `title`, `impact`, `status`, `count`, `ticket` and
//!   times — never `detail` nor `cause` (the cause names automation and step ids).
//! - An automation is its definition plus `id`, `webhookUrl` (webhook triggers),
//!   `signed` (whether webhooks must be signed), `currentVersion`, `inFlight` (while
//!   paused) and times; the token and the signing secret are never shown after creation
//!   (or rotation). After a rotation, `previousWebhooks` (`url`, `expiresAt`) lists the
//!   old URLs still in their grace period and `previousSigningSecrets` (`expiresAt`
//!   only) the old secrets still verifying; absent when there are none.
//!
//! Left out: request bodies (next to the routes that read them).

use chrono::{DateTime, Utc};
use fronta_automation::executor::{AttemptStart, RunPayload, StepLog};
use fronta_automation::rotation::{RetiredKind, still_valid};
use fronta_automation::store::StoredAutomation;
use fronta_desk::{
    FieldDef, Group, Incident, IncidentStatus, Member, Tenant, Ticket, TicketLogEntry, TicketType,
};
use fronta_engine::{Run, RunStatus};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use crate::base_url::webhook_url;

/// A run (API.md "A run").
#[derive(schemars::JsonSchema, Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub id: String,
    pub automation_id: Option<String>,
    pub kind: String,
    pub trigger: &'static str,
    pub status: RunStatus,
    pub attempts: u32,
    pub max_retries: u32,
    pub reclaims: u32,
    pub parks: u32,
    pub run_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub cancel_requested: bool,
    /// The automation's version the run is pinned to (automation runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub automation_version: Option<u32>,
    /// A run started by a retry on the current version: the run whose input it took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepLog>>,
    /// What the run started from (one run's view only): the trigger's parameters and
    /// `_body`, or `ticket` and `change` for events. Secrets never enter it: steps reveal
    /// them at call time only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Map<String, serde_json::Value>>,
    /// One run's view only: what happened to the run and what it did, oldest first
    /// (`fronta_automation::timeline`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Vec<fronta_automation::timeline::Entry>>,
}

/// The automation a run belongs to, read from its payload.
pub fn run_automation_id(run: &Run) -> Option<String> {
    serde_json::from_value::<RunPayload>(run.payload.clone())
        .ok()
        .map(|payload| payload.automation_id.to_string())
}

/// The step log of a run: the completed run's result holds it; a run still going (or
/// failed) has it in its checkpoint.
pub fn run_steps(run: &Run) -> Vec<StepLog> {
    fronta_automation::run_search::record_of(run).steps
}

/// The step log and the attempts' starts of a run
/// (`fronta_automation::run_search::record_of`).
pub fn run_record(run: &Run) -> (Vec<StepLog>, Vec<AttemptStart>) {
    let record = fronta_automation::run_search::record_of(run);
    (record.steps, record.starts)
}

impl RunView {
    pub fn of(run: &Run, with_steps: bool) -> Self {
        let payload = serde_json::from_value::<RunPayload>(run.payload.clone()).ok();
        let record = with_steps.then(|| run_record(run));
        Self {
            id: run.id.to_string(),
            automation_id: run_automation_id(run),
            kind: run.kind.clone(),
            trigger: run.trigger.as_str(),
            status: run.status,
            attempts: run.attempts,
            max_retries: run.max_retries,
            reclaims: run.reclaims,
            parks: run.parks,
            run_at: run.run_at,
            created_at: run.created_at,
            started_at: run.started_at,
            finished_at: run.finished_at(),
            last_error: run.last_error.clone(),
            cancel_requested: run.cancel_requested,
            automation_version: payload.as_ref().map(|payload| payload.automation_version),
            retry_of: payload
                .as_ref()
                .and_then(|payload| payload.retry_of.clone()),
            steps: record.as_ref().map(|(steps, _)| steps.clone()),
            timeline: record.as_ref().map(|(steps, starts)| {
                fronta_automation::timeline::of(run, payload.as_ref(), steps, starts, Utc::now())
            }),
            input: payload
                .filter(|_| with_steps)
                .map(|payload| payload.context),
        }
    }
}

/// A ticket's assignee.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AssigneeView {
    pub id: String,
    pub name: String,
}

/// A ticket (API.md "A ticket"): what steps see (`fronta_automation::steps::ticket_json`)
/// plus its times, and its log when read alone.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TicketView {
    pub id: String,
    /// `TK-<number>`.
    pub number: String,
    pub external_id: Option<String>,
    pub title: String,
    #[serde(rename = "type")]
    pub ticket_type: Option<String>,
    pub status: Option<String>,
    pub closed: bool,
    pub tags: Vec<String>,
    pub assignee: Option<AssigneeView>,
    pub group: Option<String>,
    pub fields: std::collections::BTreeMap<String, Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<Vec<TicketLogEntry>>,
}

/// A ticket (API.md "A ticket"), with its log when given.
pub fn ticket_view(ticket: &Ticket, log: Option<&[TicketLogEntry]>) -> Value {
    to_json(&TicketView {
        id: ticket.id.to_string(),
        number: ticket.human_id(),
        external_id: ticket.external_id.clone(),
        title: ticket.title.clone(),
        ticket_type: ticket.ticket_type.clone(),
        status: ticket.status.clone(),
        closed: ticket.closed,
        tags: ticket.tags.clone(),
        assignee: ticket.assignee.as_ref().map(|a| AssigneeView {
            id: a.id.to_string(),
            name: a.name.clone(),
        }),
        group: ticket.group.clone(),
        fields: ticket.fields.clone(),
        created_at: ticket.created_at,
        updated_at: ticket.updated_at,
        log: log.map(<[TicketLogEntry]>::to_vec),
    })
}

/// A view as JSON (every view serializes: strings, numbers, maps of JSON).
fn to_json<T: Serialize>(view: &T) -> Value {
    serde_json::to_value(view).unwrap_or(Value::Null)
}

/// An incident as its tenant sees it: never `detail`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentView {
    pub id: String,
    pub title: String,
    pub impact: String,
    pub status: IncidentStatus,
    pub count: u32,
    /// The ticket's id.
    pub ticket: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
}

impl IncidentView {
    fn of(incident: &Incident) -> Self {
        IncidentView {
            id: incident.id.to_string(),
            title: incident.title.clone(),
            impact: incident.impact.clone(),
            status: incident.status,
            count: incident.count,
            ticket: incident.ticket.map(|id| id.to_string()),
            created_at: incident.created_at,
            updated_at: incident.updated_at,
            resolved_at: incident.resolved_at,
        }
    }
}

/// An incident as the platform admin sees it: with tenant, cause and `detail`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdminIncidentView {
    #[serde(flatten)]
    pub incident: IncidentView,
    pub tenant: String,
    pub cause: String,
    pub detail: Value,
}

/// An incident as its tenant sees it: never `detail`.
pub fn incident_view(incident: &Incident) -> Value {
    to_json(&IncidentView::of(incident))
}

/// An incident as the platform admin sees it: with tenant, cause and `detail`.
pub fn admin_incident_view(incident: &Incident) -> Value {
    to_json(&AdminIncidentView {
        incident: IncidentView::of(incident),
        tenant: incident.tenant.to_string(),
        cause: incident.cause.clone(),
        detail: incident.detail.clone(),
    })
}

/// A tenant; its token only in the answer of its creation.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantView {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub created_at: DateTime<Utc>,
}

pub fn tenant_view(tenant: &Tenant) -> Value {
    tenant_answer(tenant, None)
}

/// A tenant with its token (`POST /api/admin/tenants`).
pub fn tenant_answer(tenant: &Tenant, token: Option<String>) -> Value {
    to_json(&TenantView {
        id: tenant.id.to_string(),
        name: tenant.name.clone(),
        token,
        created_at: tenant.created_at,
    })
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GroupView {
    pub id: String,
    pub name: String,
}

pub fn group_view(group: &Group) -> Value {
    to_json(&GroupView {
        id: group.id.to_string(),
        name: group.name.clone(),
    })
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    pub id: String,
    pub group_id: String,
    pub name: String,
    pub email: Option<String>,
    pub capacity: u32,
    pub available: bool,
}

pub fn member_view(member: &Member) -> Value {
    to_json(&MemberView {
        id: member.id.to_string(),
        group_id: member.group.to_string(),
        name: member.name.clone(),
        email: member.email.clone(),
        capacity: member.capacity,
        available: member.available,
    })
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TicketTypeView {
    pub id: String,
    pub name: String,
    pub statuses: Vec<String>,
    pub fields: Vec<FieldDef>,
}

pub fn ticket_type_view(ticket_type: &TicketType) -> Value {
    to_json(&TicketTypeView {
        id: ticket_type.id.to_string(),
        name: ticket_type.name.clone(),
        statuses: ticket_type.statuses.clone(),
        fields: ticket_type.fields.clone(),
    })
}

/// A run accepted (`202`): its id and status; `duplicate` when an idempotency key
/// named a run already started.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAccepted {
    pub run_id: String,
    pub status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
}

/// An automation: its definition plus what the server adds (see the module docs).
pub fn automation_view(stored: &StoredAutomation, base: &str) -> Value {
    let mut view = serde_json::to_value(&stored.automation).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut view {
        map.insert("id".into(), json!(stored.id.to_string()));
        if let Some(token) = &stored.webhook_token
            && fronta_automation::executor::is_webhook(&stored.automation)
        {
            map.insert("webhookUrl".into(), json!(webhook_url(base, token)));
        }
        map.insert("signed".into(), json!(stored.signing_secret.is_some()));
        let now = Utc::now();
        if fronta_automation::executor::is_webhook(&stored.automation) {
            let previous: Vec<Value> = still_valid(stored, RetiredKind::Webhook, now)
                .map(|old| json!({"url": webhook_url(base, &old.value), "expiresAt": old.expires_at}))
                .collect();
            if !previous.is_empty() {
                map.insert("previousWebhooks".into(), Value::Array(previous));
            }
        }
        let previous: Vec<Value> = still_valid(stored, RetiredKind::SigningSecret, now)
            .map(|old| json!({"expiresAt": old.expires_at}))
            .collect();
        if !previous.is_empty() {
            map.insert("previousSigningSecrets".into(), Value::Array(previous));
        }
        map.insert("currentVersion".into(), json!(stored.current_version));
        if !stored.automation.enabled {
            map.insert("inFlight".into(), json!(stored.in_flight.as_str()));
        }
        map.insert("createdAt".into(), json!(stored.created_at));
        map.insert("updatedAt".into(), json!(stored.updated_at));
    }
    view
}

/// The fields of an automation's answer that a client may send back but that are not
/// part of the definition: stripped before a PUT body is parsed.
pub const AUTOMATION_READ_ONLY: [&str; 10] = [
    "id",
    "webhookUrl",
    "previousWebhooks",
    "signed",
    "previousSigningSecrets",
    "currentVersion",
    "inFlight",
    "createdAt",
    "updatedAt",
    "warnings",
];

/// A version of an automation (`GET /api/automations/{id}/versions…`): its number, hash,
/// when and by whom, and — read alone — the definition.
pub fn version_view(
    automation: &StoredAutomation,
    version: &fronta_automation::versions::Version,
    with_definition: bool,
) -> Value {
    let mut view = json!({
        "automationId": automation.id.to_string(),
        "version": version.version,
        "hash": version.hash,
        "current": version.version == automation.current_version,
        "createdAt": version.created_at,
        "createdBy": version.created_by,
    });
    if with_definition && let Value::Object(map) = &mut view {
        let mut definition = serde_json::to_value(&version.definition).unwrap_or(Value::Null);
        if let Value::Object(definition) = &mut definition {
            definition.remove("enabled");
        }
        map.insert("definition".into(), definition);
    }
    view
}
