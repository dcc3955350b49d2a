//! The built-in steps that touch our own storage (tickets, incidents) and the flow steps:
//! each takes its rendered `input` and answers its outputs, or a [`StepError`] that says
//! whether it is worth retrying (DESIGN.md §4.5: the default is "no").

use std::collections::BTreeMap;
use std::time::Duration;

use fronta_desk::store::names;
use fronta_desk::store::{IncidentReport, TicketChange, TicketUpsert};
use fronta_desk::{DeskError, DeskStore, Origin, TenantId, Ticket, TicketId};
use serde_json::{Map, Value, json};

use crate::catalogue::Op;
use crate::retry::Cause;

/// Pauses up to this long happen inside the run; longer ones snooze it (no worker held).
pub const INLINE_PAUSE_LIMIT: Duration = Duration::from_secs(5);

/// The longest `flow/pause` by default: 366 days (`--max-pause`, `FRONTA_MAX_PAUSE`).
/// Checked on save for a literal and when the step runs for a templated value, so no
/// pause can overflow a clock.
pub const MAX_PAUSE: Duration = Duration::from_secs(366 * 24 * 3600);

/// The most `--max-pause` may be: ten times the default, far from any clock's end.
pub const MAX_PAUSE_CEILING: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

/// The pause a `flow/pause` input `seconds` asks for, or why it is refused: a number from
/// 0 to `max` (a string holding one, as a template renders it, too).
pub fn pause_of(seconds: Option<&Value>, max: Duration) -> Result<Duration, String> {
    let max = max.min(MAX_PAUSE_CEILING);
    let number = match seconds {
        Some(Value::Number(number)) => number.as_f64(),
        Some(Value::String(text)) => text.trim().parse::<f64>().ok(),
        _ => None,
    };
    match number {
        Some(value) if value.is_finite() && (0.0..=max.as_secs_f64()).contains(&value) => {
            Ok(Duration::from_secs_f64(value))
        }
        Some(value) => Err(format!(
            "input \"seconds\" is {value}, outside 0 … {} ({}; --max-pause, FRONTA_MAX_PAUSE)",
            max.as_secs(),
            days(max)
        )),
        None => Err(format!(
            "input \"seconds\" must be a number from 0 to {} ({}; --max-pause, \
             FRONTA_MAX_PAUSE), found {}",
            max.as_secs(),
            days(max),
            seconds.map_or_else(|| "nothing".to_owned(), Value::to_string)
        )),
    }
}

/// `max` for a person: "366 days", or seconds when it is not whole days.
fn days(max: Duration) -> String {
    let secs = max.as_secs();
    if secs == 86_400 {
        "1 day".to_owned()
    } else if secs.is_multiple_of(86_400) && secs > 0 {
        format!("{} days", secs / 86_400)
    } else {
        format!("{secs} s")
    }
}

/// Why a step did not succeed, as data: retry or not.
#[derive(Debug, Clone, PartialEq)]
pub struct StepError {
    pub retryable: bool,
    /// The other side's Retry-After, when it gave one.
    pub retry_after: Option<Duration>,
    pub message: String,
}

impl StepError {
    /// Not worth retrying: bad input, a missing thing, a refusal.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            retryable: false,
            retry_after: None,
            message: message.into(),
        }
    }

    /// Worth retrying: an outage that goes away.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            retry_after: None,
            message: message.into(),
        }
    }
}

/// Our storage, by the table of [`crate::retry`]: unavailable is retried; a missing
/// thing (group, ticket) or a refused write ends the run.
impl From<DeskError> for StepError {
    fn from(err: DeskError) -> Self {
        let cause = match &err {
            DeskError::Unavailable(_) => Cause::StorageUnavailable,
            DeskError::NotFound(_) => Cause::MissingGroup,
            DeskError::Invalid(_) | DeskError::Conflict(_) | DeskError::InUse { .. } => {
                Cause::BadInput
            }
            DeskError::Internal(_) => Cause::Bug,
        };
        cause.step_error(err.to_string(), None)
    }
}

/// A desk refusal as a step error that names what is missing: `NotFound` of a group or
/// ticket type the step named (`names`: what → the name the step used) says which one,
/// by the last name the automation knew it by.
fn naming(err: DeskError, names: &[(&'static str, Option<&str>)]) -> StepError {
    if let DeskError::NotFound(what) = &err
        && let Some((_, Some(name))) = names.iter().find(|(kind, _)| kind == what)
    {
        return Cause::MissingGroup.step_error(
            format!(
                "{what} {name:?} does not exist: it was deleted, or renamed in a way this \
                 automation could not follow (last known name {name:?})"
            ),
            None,
        );
    }
    StepError::from(err)
}

/// What a step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepDone {
    pub outputs: Map<String, Value>,
    /// One line for the step log.
    pub message: String,
    /// The ticket the step touched (for the ticket log and incidents).
    pub ticket: Option<Ticket>,
    /// `flow/pause` longer than [`INLINE_PAUSE_LIMIT`]: snooze the run this long.
    pub snooze: Option<Duration>,
}

/// The ticket as automations see it (API.md's ticket JSON without the log).
pub fn ticket_json(ticket: &Ticket) -> Value {
    json!({
        "id": ticket.id.to_string(),
        "number": ticket.human_id(),
        "externalId": ticket.external_id,
        "title": ticket.title,
        "type": ticket.ticket_type,
        "status": ticket.status,
        "closed": ticket.closed,
        "tags": ticket.tags,
        "assignee": ticket.assignee.as_ref().map(|a| json!({"id": a.id.to_string(), "name": a.name})),
        "group": ticket.group,
        "fields": ticket.fields,
    })
}

fn text(input: &Map<String, Value>, key: &str) -> Result<Option<String>, StepError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => Ok(Some(value.clone())),
        Some(Value::Number(value)) => Ok(Some(value.to_string())),
        Some(other) => Err(StepError::fatal(format!(
            "input {key:?} must be text, got {other}"
        ))),
    }
}

fn required_text(input: &Map<String, Value>, key: &str) -> Result<String, StepError> {
    match text(input, key)? {
        Some(value) if !value.trim().is_empty() => Ok(value),
        _ => Err(StepError::fatal(format!("input {key:?} is required"))),
    }
}

fn strings(input: &Map<String, Value>, key: &str) -> Result<Vec<String>, StepError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(value) => Ok(value.clone()),
                Value::Number(value) => Ok(value.to_string()),
                other => Err(StepError::fatal(format!(
                    "input {key:?} must hold text, got {other}"
                ))),
            })
            .collect(),
        Some(Value::String(one)) => Ok(vec![one.clone()]),
        Some(other) => Err(StepError::fatal(format!(
            "input {key:?} must be a list of text, got {other}"
        ))),
    }
}

fn ticket_id(input: &Map<String, Value>) -> Result<TicketId, StepError> {
    let value = required_text(input, "ticket")?;
    value
        .parse()
        .map_err(|_| StepError::fatal(format!("input \"ticket\" is not a ticket id: {value:?}")))
}

/// Everything a step needs besides its input.
pub struct StepEnv<'a> {
    pub desk: &'a dyn DeskStore,
    pub tenant: TenantId,
    pub origin: Origin,
    /// Identifies the incident cause of `incident/create` (automation id).
    pub automation_id: String,
    pub automation_name: String,
    pub run_id: String,
    pub step_name: String,
    /// The run's stop signal: a connector call still in flight when the run is cancelled
    /// is abandoned.
    pub stop: fronta_engine::registry::StopSignal,
    /// The longest `flow/pause` ([`Runtime::max_pause`](crate::executor::Runtime)).
    pub max_pause: Duration,
    /// A dry run (`crate::dry_run`): a pause is said, not waited.
    pub dry: bool,
}

/// Run one built-in op with its rendered input.
pub async fn perform(
    op: &Op,
    input: Map<String, Value>,
    env: &StepEnv<'_>,
) -> Result<StepDone, StepError> {
    match op {
        Op::TicketUpsert => {
            let upsert = TicketUpsert {
                external_id: required_text(&input, "externalId")?,
                title: text(&input, "title")?,
                ticket_type: text(&input, "type")?,
                status: text(&input, "status")?,
                tags: strings(&input, "tags")?,
                fields: match input.get("fields") {
                    None | Some(Value::Null) => BTreeMap::new(),
                    Some(Value::Object(fields)) => fields.clone().into_iter().collect(),
                    Some(other) => {
                        return Err(StepError::fatal(format!(
                            "input \"fields\" must be an object, got {other}"
                        )));
                    }
                },
                group: text(&input, "group")?,
                note: Some(format!("from automation \"{}\"", env.automation_name)),
            };
            let (group, ticket_type) = (upsert.group.clone(), upsert.ticket_type.clone());
            let write = env
                .desk
                .ticket_upsert(env.tenant, upsert, env.origin.clone())
                .await
                .map_err(|err| {
                    naming(
                        err,
                        &[
                            (names::GROUP, group.as_deref()),
                            (names::TICKET_TYPE, ticket_type.as_deref()),
                        ],
                    )
                })?;
            let ticket = write.ticket;
            let message = if write.created {
                format!("created ticket {}", ticket.human_id())
            } else {
                format!("attached to ticket {}", ticket.human_id())
            };
            Ok(StepDone {
                outputs: map(
                    json!({"id": ticket.id.to_string(), "number": ticket.human_id(), "created": write.created}),
                ),
                message,
                ticket: Some(ticket),
                snooze: None,
            })
        }
        Op::TicketSetType => {
            let ticket_type = required_text(&input, "type")?;
            let change = TicketChange {
                ticket_type: Some(ticket_type.clone()),
                ..TicketChange::default()
            };
            let ticket = env
                .desk
                .ticket_change(env.tenant, ticket_id(&input)?, change, env.origin.clone())
                .await
                .map_err(|err| naming(err, &[(names::TICKET_TYPE, Some(&ticket_type))]))?
                .ticket;
            Ok(done(
                json!({"type": ticket_type}),
                format!("{} is of type {ticket_type}", ticket.human_id()),
                ticket,
            ))
        }
        Op::TicketAddTags => {
            let tags = strings(&input, "tags")?;
            let change = TicketChange {
                add_tags: tags.clone(),
                ..TicketChange::default()
            };
            let ticket = change_ticket(env, ticket_id(&input)?, change).await?;
            let message = format!("{} tagged {}", ticket.human_id(), tags.join(", "));
            Ok(done(json!({"tags": ticket.tags}), message, ticket))
        }
        Op::TicketSetStatus => {
            let status = required_text(&input, "status")?;
            let change = TicketChange {
                status: Some(status.clone()),
                ..TicketChange::default()
            };
            let ticket = change_ticket(env, ticket_id(&input)?, change).await?;
            Ok(done(
                json!({"status": status}),
                format!("{} is {status}", ticket.human_id()),
                ticket,
            ))
        }
        Op::TicketClose => {
            let change = TicketChange {
                closed: Some(true),
                ..TicketChange::default()
            };
            let ticket = change_ticket(env, ticket_id(&input)?, change).await?;
            Ok(done(
                json!({"closed": true}),
                format!("{} closed", ticket.human_id()),
                ticket,
            ))
        }
        Op::TicketAssignLeastBusy => {
            let group = required_text(&input, "group")?;
            let write = env
                .desk
                .ticket_assign_least_busy(
                    env.tenant,
                    ticket_id(&input)?,
                    &group,
                    env.origin.clone(),
                )
                .await
                .map_err(|err| naming(err, &[(names::GROUP, Some(&group))]))?;
            let ticket = write.ticket;
            let assignee = ticket.assignee.clone().ok_or_else(|| {
                StepError::fatal(format!("{} was not assigned", ticket.human_id()))
            })?;
            let message = format!(
                "{} assigned to {} ({group})",
                ticket.human_id(),
                assignee.name
            );
            Ok(done(
                json!({"assignee": {"id": assignee.id.to_string(), "name": assignee.name}, "group": group}),
                message,
                ticket,
            ))
        }
        Op::IncidentCreate => {
            let title = required_text(&input, "title")?;
            let impact = text(&input, "impact")?.unwrap_or_default();
            let ticket = match text(&input, "ticket")? {
                Some(id) => Some(id.parse::<TicketId>().map_err(|_| {
                    StepError::fatal(format!("input \"ticket\" is not a ticket id: {id:?}"))
                })?),
                None => None,
            };
            let report = IncidentReport {
                cause: format!("automation:{}:step:{}", env.automation_id, env.step_name),
                title,
                impact,
                detail: json!({
                    "automation": {"id": env.automation_id, "name": env.automation_name},
                    "run": env.run_id,
                    "step": env.step_name,
                    "openedBy": "incident/create",
                }),
                ticket,
            };
            let (incident, opened) = env.desk.incident_report(env.tenant, report).await?;
            let message = if opened {
                "opened an incident".to_string()
            } else {
                format!(
                    "the incident was open already: now seen {} times",
                    incident.count
                )
            };
            Ok(StepDone {
                outputs: map(json!({"id": incident.id.to_string(), "opened": opened})),
                message,
                ticket: None,
                snooze: None,
            })
        }
        Op::FlowLog => {
            let message = text(&input, "message")?.unwrap_or_default();
            Ok(StepDone {
                message,
                ..StepDone::default()
            })
        }
        Op::FlowPause => {
            let pause = pause_of(input.get("seconds"), env.max_pause).map_err(StepError::fatal)?;
            let seconds = pause.as_secs_f64();
            if env.dry {
                Ok(StepDone {
                    message: format!("would pause {seconds} s, then go on (a test does not wait)"),
                    ..StepDone::default()
                })
            } else if pause <= INLINE_PAUSE_LIMIT {
                tokio::time::sleep(pause).await;
                Ok(StepDone {
                    message: format!("paused {seconds} s"),
                    ..StepDone::default()
                })
            } else {
                Ok(StepDone {
                    message: format!(
                        "pausing {seconds} s: the run sleeps without holding a worker"
                    ),
                    snooze: Some(pause),
                    ..StepDone::default()
                })
            }
        }
        Op::HttpRequest | Op::McpCallTool | Op::MailSend | Op::PollMail => {
            Err(StepError::fatal(format!(
                "{} is not available in this build: connector steps are not installed",
                op.as_str()
            )))
        }
        Op::Unknown(name) => Err(StepError::fatal(format!("unknown op {name:?}"))),
    }
}

async fn change_ticket(
    env: &StepEnv<'_>,
    id: TicketId,
    change: TicketChange,
) -> Result<Ticket, StepError> {
    Ok(env
        .desk
        .ticket_change(env.tenant, id, change, env.origin.clone())
        .await?
        .ticket)
}

fn map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn done(outputs: Value, message: String, ticket: Ticket) -> StepDone {
    StepDone {
        outputs: map(outputs),
        message,
        ticket: Some(ticket),
        snooze: None,
    }
}
