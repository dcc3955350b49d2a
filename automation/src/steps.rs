//! The built-in steps that touch our own storage (tickets, incidents) and the flow steps:
//! each takes its rendered `input` and answers its outputs, or a [`StepError`] that says
//! whether it is worth retrying (DESIGN.md §4.5: the default is "no").

use std::collections::BTreeMap;
use std::time::Duration;

use fronta_desk::store::names;
use fronta_desk::store::{AssignTo, Assignment, WhenFull};
use fronta_desk::store::{IncidentReport, OnExisting, TicketChange, TicketUpsert};
use fronta_desk::{DeskError, DeskStore, Origin, TenantId, Ticket, TicketId, TicketLogEntry};
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

/// The longest note `ticket/comment` writes, in characters: a longer text is cut there
/// and the note and the step's line say so.
pub const MAX_NOTE_CHARS: usize = 10_000;

/// The kind of the ticket log line `ticket/comment` writes.
pub const NOTE_KIND: &str = "note";

/// `ticket/upsert`'s `onExisting`, read: which of its inputs apply when the external id
/// finds a ticket that exists already. Nothing (or `null`, or `[]`) is
/// [`OnExisting::ATTACH_ONLY`] — the event is attached and logged, the ticket keeps its
/// status, type, title, tags, fields and group; a list names the inputs that apply
/// (`["status", "tags"]`); `"all"` applies every input given (the behaviour before
/// `onExisting` existed). A problem is `(where, message)`: `""` for the value itself,
/// `"[1]"` for the second item of the list (the validator adds the input's path; a step
/// joins them into its error).
pub fn on_existing_of(value: Option<&Value>) -> Result<OnExisting, Vec<(String, String)>> {
    let choices = || {
        format!(
            "the inputs that can apply to an existing ticket: {}; or \"all\"",
            OnExisting::NAMES.join(", ")
        )
    };
    let items = match value {
        None | Some(Value::Null) => return Ok(OnExisting::ATTACH_ONLY),
        Some(Value::String(all)) if all == "all" => return Ok(OnExisting::ALL),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(vec![(
                String::new(),
                format!(
                    "onExisting must be a list of input names such as [\"status\", \"tags\"] \
                     or \"all\", found {other} ({})",
                    choices()
                ),
            )]);
        }
    };
    let mut on = OnExisting::ATTACH_ONLY;
    let mut problems = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let at = format!("[{index}]");
        let Some(name) = item.as_str() else {
            problems.push((at, format!("an input name must be text, found {item}")));
            continue;
        };
        if on.applies(name) {
            problems.push((at, format!("\"{name}\" is named twice")));
            continue;
        }
        match on.with(name) {
            Some(with) => on = with,
            None if name == "externalId" => problems.push((
                at,
                "\"externalId\" finds the existing ticket; it never changes".to_owned(),
            )),
            None => problems.push((
                at,
                format!("unknown input \"{name}\" in onExisting ({})", choices()),
            )),
        }
    }
    if problems.is_empty() {
        Ok(on)
    } else {
        Err(problems)
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

/// The ticket `ticket/get` and `ticket/comment` act on, as it is now: the one input
/// `ticket` names (its id, or its number: `TK-12`, `12`), else the run's
/// ([`StepEnv::run_ticket`]).
async fn the_ticket(input: &Map<String, Value>, env: &StepEnv<'_>) -> Result<Ticket, StepError> {
    if let Some(reference) = text(input, "ticket")? {
        return fronta_desk::store::find_ticket(env.desk, env.tenant, &reference)
            .await
            .map_err(|err| match err {
                DeskError::NotFound(_) => StepError::fatal(format!(
                    "input \"ticket\": there is no ticket {:?}",
                    reference.trim()
                )),
                DeskError::Invalid(message) => {
                    StepError::fatal(format!("input \"ticket\": {message}"))
                }
                other => StepError::from(other),
            });
    }
    let Some(id) = env.run_ticket else {
        return Err(StepError::fatal(
            "no ticket to act on: the run has none (no ticket event started it and no \
             earlier step wrote or read one); name one in input \"ticket\"",
        ));
    };
    env.desk
        .ticket_get(env.tenant, id)
        .await
        .map_err(|err| match err {
            DeskError::NotFound(_) => StepError::fatal(format!(
                "the run's ticket ({id}) no longer exists; name one in input \"ticket\""
            )),
            other => StepError::from(other),
        })
}

/// The run's ticket, for a step that names none: the last ticket a step of the run wrote
/// or read (`last`, the executor's record, an id), else the ticket of the event that
/// started the run (`event`), else the `ticket.id` its context starts with (error
/// workflows carry one).
pub fn run_ticket(
    last: Option<&str>,
    event: Option<TicketId>,
    context: &crate::context::Context,
) -> Option<TicketId> {
    last.and_then(|id| id.parse().ok()).or(event).or_else(|| {
        context
            .get("ticket")
            .and_then(|ticket| ticket.get("id"))
            .and_then(Value::as_str)
            .and_then(|id| id.parse().ok())
    })
}

/// What `ticket/get` says of the ticket it read: `TK-4 is open, unassigned, status new,
/// tags [vip]`.
fn described(ticket: &Ticket) -> String {
    let mut parts = vec![
        if ticket.closed { "closed" } else { "open" }.to_owned(),
        match &ticket.assignee {
            Some(assignee) => format!("assigned to {}", assignee.name),
            None => "unassigned".to_owned(),
        },
    ];
    if let Some(status) = &ticket.status {
        parts.push(format!("status {status}"));
    }
    parts.push(format!("tags [{}]", ticket.tags.join(", ")));
    format!("{} is {}", ticket.human_id(), parts.join(", "))
}

/// A note's text cut to [`MAX_NOTE_CHARS`], and whether it was.
fn note_text(text: &str) -> (String, bool) {
    match text.char_indices().nth(MAX_NOTE_CHARS) {
        None => (text.to_owned(), false),
        Some((end, _)) => (
            format!("{}… (cut at {MAX_NOTE_CHARS} characters)", &text[..end]),
            true,
        ),
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
    /// The version of the automation the run walks (a note says which wrote it).
    pub automation_version: u32,
    /// The run's ticket ([`run_ticket`]): what `ticket/get` and `ticket/comment` act on
    /// when their input names none.
    pub run_ticket: Option<TicketId>,
    /// Now, by the runtime's clock (the time of a note).
    pub now: chrono::DateTime<chrono::Utc>,
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

/// How long a run waiting for room in a group sleeps before it looks again by itself:
/// the safety net under the wake-up a ticket write of the group gives it (see
/// [`perform_or_wait`]).
pub const ROOM_RECHECK: Duration = Duration::from_secs(60);

/// What a built-in step did, or that it waits.
#[derive(Debug, Clone, PartialEq)]
pub enum Performed {
    Done(Box<StepDone>),
    /// Not done now, and no failure: the run waits at this step without spending an
    /// attempt — snoozed at most `wait` — and runs it again when woken.
    Wait {
        wait: Duration,
        message: String,
    },
}

/// Run one built-in op with its rendered input; the assignments may answer
/// [`Performed::Wait`].
///
/// Waiting for room (`ticket/assign-least-busy` with `whenFull: "wait"`, the default):
/// the desk store registers the run among the group's waiting runs in the same
/// transaction as the ticket's "waiting for room" line (`DeskStore::ticket_assign`);
/// the executor then snoozes the run at this step for [`ROOM_RECHECK`]. A ticket write
/// that makes room in the group (a close, a reassignment, a member available again or
/// given more capacity) sets the waiting runs due now in its own transaction, so the
/// wake-up is as durable as the write and costs one probe of the group's index. A run
/// woken that finds no room (another took it first) waits again, silently. The
/// registration commits just before the run's snooze does: a room made in between
/// finds the run still running and not yet due, and the recheck picks it up.
pub async fn perform_or_wait(
    op: &Op,
    input: Map<String, Value>,
    env: &StepEnv<'_>,
) -> Result<Performed, StepError> {
    match op {
        Op::TicketAssignLeastBusy | Op::TicketAssign => assign(op, &input, env).await,
        _ => perform(op, input, env)
            .await
            .map(|done| Performed::Done(Box::new(done))),
    }
}

/// The `whenFull` input of `ticket/assign-least-busy`: absent is `wait`; anything but
/// `wait`, `fail`, `assignAnyway` is refused, naming them.
pub fn when_full_of(value: Option<&Value>) -> Result<WhenFull, String> {
    match value {
        None | Some(Value::Null) => Ok(WhenFull::default()),
        Some(Value::String(text)) => WhenFull::parse(text).ok_or_else(|| {
            format!(
                "input \"whenFull\" is {text:?}; it must be one of {}",
                when_full_names()
            )
        }),
        Some(other) => Err(format!(
            "input \"whenFull\" must be one of {}, found {other}",
            when_full_names()
        )),
    }
}

fn when_full_names() -> String {
    WhenFull::ALL
        .iter()
        .map(|when| format!("\"{}\"", when.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `ticket/assign-least-busy` and `ticket/assign`.
async fn assign(
    op: &Op,
    input: &Map<String, Value>,
    env: &StepEnv<'_>,
) -> Result<Performed, StepError> {
    let group = required_text(input, "group")?;
    let to = match op {
        Op::TicketAssign => AssignTo::Member(required_text(input, "member")?),
        _ => AssignTo::LeastBusy(when_full_of(input.get("whenFull")).map_err(StepError::fatal)?),
    };
    let assignment = env
        .desk
        .ticket_assign(
            env.tenant,
            ticket_id(input)?,
            &group,
            to.clone(),
            env.origin.clone(),
        )
        .await
        .map_err(|err| naming(err, &[(names::GROUP, Some(&group))]))?;
    let ticket = match assignment {
        Assignment::Assigned(write) => write.ticket,
        Assignment::Waiting { message, .. } if env.dry => {
            return Ok(Performed::Done(Box::new(StepDone {
                message: format!("{message}: it would wait for room here (a test does not wait)"),
                ..StepDone::default()
            })));
        }
        Assignment::Waiting { message, .. } => {
            return Ok(Performed::Wait {
                wait: ROOM_RECHECK,
                message,
            });
        }
    };
    let assignee = ticket
        .assignee
        .clone()
        .ok_or_else(|| StepError::fatal(format!("{} was not assigned", ticket.human_id())))?;
    let how = match &to {
        AssignTo::Member(_) => "by name",
        AssignTo::LeastBusy(WhenFull::AssignAnyway) => "least busy, assigned anyway when full",
        AssignTo::LeastBusy(_) => "least busy",
    };
    let message = format!(
        "{} assigned to {} ({group}, {how})",
        ticket.human_id(),
        assignee.name
    );
    Ok(Performed::Done(Box::new(done(
        json!({"assignee": {"id": assignee.id.to_string(), "name": assignee.name}, "group": group}),
        message,
        ticket,
    ))))
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
                on_existing: on_existing_of(input.get("onExisting")).map_err(|problems| {
                    StepError::fatal(
                        problems
                            .into_iter()
                            .map(|(at, message)| format!("input \"onExisting{at}\": {message}"))
                            .collect::<Vec<_>>()
                            .join("; "),
                    )
                })?,
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
        Op::TicketAssignLeastBusy | Op::TicketAssign => match assign(op, &input, env).await? {
            Performed::Done(done) => Ok(*done),
            Performed::Wait { message, .. } => Ok(StepDone {
                message,
                ..StepDone::default()
            }),
        },
        Op::TicketGet => {
            let ticket = the_ticket(&input, env).await?;
            Ok(done(ticket_json(&ticket), described(&ticket), ticket))
        }
        Op::TicketComment => {
            let written = required_text(&input, "text")?;
            let ticket = the_ticket(&input, env).await?;
            let (text, cut) = note_text(written.trim());
            let entry = TicketLogEntry {
                at: env.now,
                kind: NOTE_KIND.into(),
                message: format!(
                    "Note by automation \"{}\" ({}): {text}",
                    env.automation_name,
                    match env.automation_version {
                        // A dry run of a definition not saved yet.
                        0 => "not saved yet".to_owned(),
                        version => format!("version {version}"),
                    }
                ),
                run_id: Some(env.run_id.clone()),
            };
            env.desk
                .ticket_log_append(env.tenant, ticket.id, entry)
                .await?;
            let mut message = format!("noted on {}", ticket.human_id());
            if cut {
                message.push_str(&format!(
                    " (the text was cut at {MAX_NOTE_CHARS} characters)"
                ));
            }
            Ok(done(json!({}), message, ticket))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;

    fn ticket() -> Ticket {
        let now = chrono::Utc::now();
        Ticket {
            id: TicketId::new(),
            tenant: TenantId::new(),
            number: 4,
            external_id: Some("order-4".into()),
            title: "Order 4".into(),
            ticket_type: Some("order".into()),
            status: Some("waiting-to-pack".into()),
            closed: false,
            tags: vec!["vip".into()],
            assignee: None,
            group: None,
            fields: BTreeMap::new(),
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn ticket_get_publishes_exactly_an_events_ticket() {
        let json = ticket_json(&ticket());
        let keys: Vec<&str> = json
            .as_object()
            .map(|map| map.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut outputs = Op::TicketGet.outputs().to_vec();
        outputs.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(
            keys, outputs,
            "the catalogue's outputs of ticket/get are the ticket's keys"
        );
    }

    #[test]
    fn on_existing_is_attach_only_unless_it_names_inputs() {
        assert_eq!(on_existing_of(None), Ok(OnExisting::ATTACH_ONLY));
        assert_eq!(
            on_existing_of(Some(&json!(null))),
            Ok(OnExisting::ATTACH_ONLY)
        );
        assert_eq!(
            on_existing_of(Some(&json!([]))),
            Ok(OnExisting::ATTACH_ONLY)
        );
        assert_eq!(on_existing_of(Some(&json!("all"))), Ok(OnExisting::ALL));
        let on = on_existing_of(Some(&json!(["status", "tags"]))).expect("known names");
        assert_eq!(on.names(), vec!["status", "tags"]);
    }

    #[test]
    fn on_existing_names_each_bad_item_where_it_is() {
        let problems = on_existing_of(Some(&json!(["tags", "stauts", "externalId", 3, "tags"])))
            .expect_err("bad items");
        let at: Vec<&str> = problems.iter().map(|(at, _)| at.as_str()).collect();
        assert_eq!(at, ["[1]", "[2]", "[3]", "[4]"], "{problems:?}");
        assert!(
            problems[0]
                .1
                .contains("unknown input \"stauts\" in onExisting")
                && problems[0]
                    .1
                    .contains("title, type, status, tags, fields, group"),
            "{problems:?}"
        );
        assert!(problems[1].1.contains("finds the existing ticket"));
        assert!(problems[2].1.contains("must be text, found 3"));
        assert!(problems[3].1.contains("named twice"));
        let whole = on_existing_of(Some(&json!("status"))).expect_err("a bare name");
        assert_eq!(whole[0].0, "", "the value itself");
        assert!(
            whole[0].1.contains("must be a list of input names"),
            "{whole:?}"
        );
    }

    #[test]
    fn the_runs_ticket_is_the_last_one_touched_then_the_events() {
        let (last, event, in_context) = (TicketId::new(), TicketId::new(), TicketId::new());
        let context = Context::for_event(json!({"id": in_context.to_string()}), json!({}));
        let last_text = last.to_string();
        assert_eq!(
            run_ticket(Some(&last_text), Some(event), &context),
            Some(last),
            "what a step wrote or read last"
        );
        assert_eq!(run_ticket(None, Some(event), &context), Some(event));
        assert_eq!(run_ticket(None, None, &context), Some(in_context));
        assert_eq!(run_ticket(None, None, &Context::new()), None, "none");
    }

    #[test]
    fn a_read_ticket_is_described_on_one_line() {
        let mut read = ticket();
        assert_eq!(
            described(&read),
            "TK-4 is open, unassigned, status waiting-to-pack, tags [vip]"
        );
        read.closed = true;
        read.assignee = Some(fronta_desk::Assignee {
            id: fronta_desk::MemberId::new(),
            name: "Eva".into(),
        });
        read.status = None;
        assert_eq!(
            described(&read),
            "TK-4 is closed, assigned to Eva, tags [vip]"
        );
    }

    #[test]
    fn a_long_note_is_cut_saying_so() {
        assert_eq!(note_text("short"), ("short".to_owned(), false));
        let long = "é".repeat(MAX_NOTE_CHARS + 5);
        let (cut, was_cut) = note_text(&long);
        assert!(was_cut);
        assert!(
            cut.starts_with(&"é".repeat(MAX_NOTE_CHARS))
                && cut.ends_with(&format!("… (cut at {MAX_NOTE_CHARS} characters)")),
            "cut on a character boundary"
        );
    }
}
