//! A run's timeline: what happened to the run and what it did, in one list, oldest
//! first — `GET /api/runs/{id}`'s `timeline` and the dashboard's run page. A pure
//! function of the stored run and its record ([`of`]); nothing is stored twice.
//!
//! # Entries (`kind`)
//!
//! - `enqueued`, at the run's `createdAt`: its trigger and who started it — a webhook, a
//!   change of ticket TK-n by a person or by another automation's run (named by id), the
//!   scheduler for its tick, by hand through the API, a retry on the current version of
//!   an earlier run;
//! - `started`, at each attempt's start: `attempt n of m on worker W` (a run inside its
//!   first step, whose record is not saved yet: the row's `startedAt`, no worker);
//! - `step`, every line of the run's `steps` at its start: the steps, and the lines the
//!   run wrote about itself (`retried`, `reclaimed`, `parked`, `retried by hand`, `held`,
//!   `cancelled`, `suppressed`; see `docs/run-states.md`);
//! - `waiting`, now, for a pending run due later: until when, and why (a pause, a retry's
//!   backoff after the last error, a full cap);
//! - `cancel requested`, now, while the flag is set on a run not yet ended;
//! - `ended`, at the run's end: `completed`, `failed`, `cancelled` or `suppressed`, with
//!   the last error of a run that did not complete.
//!
//! Entries at the same instant keep this order.

use chrono::{DateTime, Utc};
use fronta_engine::{Run, RunStatus, Trigger};
use serde::Serialize;
use serde_json::Value;

use crate::executor::{AttemptStart, RunPayload, StepLog};

/// One entry of a run's timeline (see the module docs).
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub at: DateTime<Utc>,
    pub kind: &'static str,
    /// The step's status for `step` entries; the run's status for `ended`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The step's name and op for `step` entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    pub message: String,
}

impl Entry {
    fn of(at: DateTime<Utc>, kind: &'static str, message: String) -> Self {
        Entry {
            at,
            kind,
            status: None,
            name: None,
            op: None,
            message,
        }
    }
}

/// The timeline of `run` at `now`, from its payload (when it is an automation run), its
/// step log and its attempts' starts.
pub fn of(
    run: &Run,
    payload: Option<&RunPayload>,
    steps: &[StepLog],
    starts: &[AttemptStart],
    now: DateTime<Utc>,
) -> Vec<Entry> {
    let now = crate::dates::whole_millis(now);
    let mut entries = Vec::with_capacity(steps.len() + starts.len() + 3);
    entries.push(Entry::of(
        run.created_at,
        "enqueued",
        enqueued_by(run, payload),
    ));
    // A run inside its first step has not saved its record yet: its start is the row's.
    if starts.is_empty()
        && let Some(at) = run.started_at
    {
        entries.push(Entry::of(
            at,
            "started",
            format!(
                "attempt {} of {}",
                run.attempts.saturating_add(1),
                run.max_retries.saturating_add(1)
            ),
        ));
    }
    for start in starts {
        entries.push(Entry::of(
            start.at,
            "started",
            format!(
                "attempt {} of {} on worker {}",
                start.attempt, start.of, start.worker
            ),
        ));
    }
    for step in steps {
        entries.push(Entry {
            at: step.started_at,
            kind: "step",
            status: Some(step.status.clone()),
            name: Some(step.name.clone()),
            op: Some(step.op.clone()),
            message: step.message.clone(),
        });
    }
    // A stable sort: the steps and starts interleave by time, equal instants keep the
    // order above (enqueued, started, steps).
    entries.sort_by_key(|entry| entry.at);
    let pending = matches!(run.status, RunStatus::Scheduled | RunStatus::Queued);
    if pending && run.run_at > now {
        let why = match (&run.last_error, steps.last()) {
            (_, Some(last)) if last.status == "paused" => {
                format!("pausing at step {:?}", last.name)
            }
            (Some(error), _) if run.attempts > 0 => format!("the retry after: {error}"),
            (Some(error), _) => error.clone(),
            _ if run.trigger == Trigger::Schedule || run.trigger == Trigger::Poll => {
                "its time has not come".to_owned()
            }
            _ => "it was enqueued to run later".to_owned(),
        };
        entries.push(Entry::of(
            now,
            "waiting",
            format!(
                "due at {} ({why})",
                run.run_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ),
        ));
    }
    if run.cancel_requested && !run.status.is_terminal() {
        entries.push(Entry::of(
            now,
            "cancel requested",
            "a cancel was requested; the worker stops the run at its next step or heartbeat"
                .to_owned(),
        ));
    }
    if let Some(at) = run.finished_at()
        && run.status.is_terminal()
    {
        let message = match (run.status, &run.last_error) {
            (RunStatus::Completed, _) => format!("completed ({} steps logged)", steps.len()),
            (status, Some(error)) => format!("{status}: {error}"),
            (status, None) => status.to_string(),
        };
        entries.push(Entry {
            status: Some(run.status.to_string()),
            ..Entry::of(at, "ended", message)
        });
    }
    entries
}

/// Who or what enqueued the run, in words.
fn enqueued_by(run: &Run, payload: Option<&RunPayload>) -> String {
    let trigger = run.trigger.as_str();
    let Some(payload) = payload else {
        return format!("enqueued (trigger {trigger})");
    };
    if let Some(earlier) = &payload.retry_of {
        return format!(
            "enqueued by hand through the API: a retry of run {earlier} on version {}",
            payload.automation_version
        );
    }
    let version = payload.automation_version;
    match run.trigger {
        Trigger::Webhook => format!("enqueued by a webhook call, on version {version}"),
        Trigger::Event if payload.error_event.is_some() => {
            let event = payload
                .error_event
                .map_or("an error event", |event| event.as_str());
            match &payload.caused_by {
                Some(cause) => format!(
                    "enqueued by {event} of automation {} (run {}), on version {version}",
                    cause.automation_id, cause.run_id
                ),
                None => format!("enqueued by {event}, on version {version}"),
            }
        }
        Trigger::Event => {
            let ticket = payload
                .context
                .get("ticket")
                .and_then(|ticket| ticket.get("number"))
                .and_then(Value::as_str)
                .unwrap_or("a ticket");
            match &payload.caused_by {
                Some(cause) => format!(
                    "enqueued by a change of {ticket} made by automation {} (run {}), on version {version}",
                    cause.automation_id, cause.run_id
                ),
                None => format!(
                    "enqueued by a change of {ticket} made by a person or an API client, on version {version}"
                ),
            }
        }
        Trigger::Schedule => {
            let tick = payload
                .context
                .get("_schedule")
                .and_then(|schedule| schedule.get("scheduledFor"))
                .and_then(Value::as_str)
                .unwrap_or("its tick");
            format!("enqueued by the scheduler for {tick}, on version {version}")
        }
        Trigger::Poll => format!("enqueued by the scheduler to poll, on version {version}"),
        Trigger::Manual | Trigger::Api => {
            format!("enqueued by hand through the API, on version {version}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::CausedBy;
    use crate::store::AutomationId;
    use fronta_desk::TenantId;
    use fronta_engine::RunId;
    use serde_json::json;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("an instant")
            .with_timezone(&Utc)
    }

    fn run(status: RunStatus, trigger: Trigger) -> Run {
        Run {
            id: RunId::new_v7(),
            tenant: "t".into(),
            kind: "automation".into(),
            payload: json!({}),
            state: None,
            trigger,
            unique_key: None,
            priority: 0,
            status,
            run_at: at("2026-03-02T10:00:00Z"),
            attempts: 0,
            max_retries: 4,
            reclaims: 0,
            parks: 0,
            locked_by: None,
            locked_until: None,
            heartbeat_at: None,
            cancel_requested: false,
            created_at: at("2026-03-02T10:00:00Z"),
            updated_at: at("2026-03-02T10:00:00Z"),
            started_at: None,
            completed_at: None,
            failed_at: None,
            cancelled_at: None,
            last_error: None,
            result: None,
        }
    }

    fn payload(trigger_context: Value) -> RunPayload {
        RunPayload {
            automation_id: AutomationId::new(),
            tenant: TenantId::new(),
            context: trigger_context.as_object().cloned().unwrap_or_default(),
            ticket: None,
            automation_version: 2,
            retry_of: None,
            caused_by: None,
            restart: None,
            error_event: None,
        }
    }

    fn step(name: &str, status: &str, at_text: &str) -> StepLog {
        StepLog {
            name: name.into(),
            op: "flow/log".into(),
            status: status.into(),
            started_at: at(at_text),
            finished_at: at(at_text),
            message: format!("{name} said"),
            outputs: None,
        }
    }

    #[test]
    fn a_failed_run_reads_from_its_enqueue_through_its_attempts_to_its_end() {
        let mut failed = run(RunStatus::Failed, Trigger::Event);
        failed.failed_at = Some(at("2026-03-02T10:05:00Z"));
        failed.last_error = Some("step \"call\": 503".into());
        let mut payload = payload(json!({"ticket": {"number": "TK-7"}}));
        payload.caused_by = Some(CausedBy {
            automation_id: "a-1".into(),
            run_id: "r-1".into(),
            chain: vec![],
        });
        let starts = [
            AttemptStart {
                at: at("2026-03-02T10:00:01Z"),
                attempt: 1,
                of: 5,
                worker: "serve-1".into(),
            },
            AttemptStart {
                at: at("2026-03-02T10:04:00Z"),
                attempt: 2,
                of: 5,
                worker: "serve-2".into(),
            },
        ];
        let steps = [
            step("call", "failed", "2026-03-02T10:00:02Z"),
            step("run", "retried", "2026-03-02T10:04:00Z"),
            step("call", "failed", "2026-03-02T10:04:01Z"),
        ];
        let timeline = of(
            &failed,
            Some(&payload),
            &steps,
            &starts,
            at("2026-03-02T11:00:00Z"),
        );
        let kinds: Vec<&str> = timeline.iter().map(|entry| entry.kind).collect();
        assert_eq!(
            kinds,
            [
                "enqueued", "started", "step", "started", "step", "step", "ended"
            ]
        );
        assert_eq!(
            timeline[0].message,
            "enqueued by a change of TK-7 made by automation a-1 (run r-1), on version 2"
        );
        assert_eq!(timeline[3].message, "attempt 2 of 5 on worker serve-2");
        assert_eq!(timeline[6].status.as_deref(), Some("failed"));
        assert_eq!(timeline[6].message, "failed: step \"call\": 503");
    }

    #[test]
    fn a_pending_run_says_until_when_and_why_and_a_requested_cancel() {
        let mut waiting = run(RunStatus::Scheduled, Trigger::Webhook);
        waiting.run_at = at("2026-03-02T10:30:00Z");
        waiting.attempts = 1;
        waiting.last_error = Some("429 from shop".into());
        waiting.cancel_requested = true;
        let timeline = of(
            &waiting,
            Some(&payload(json!({}))),
            &[],
            &[],
            at("2026-03-02T10:10:00Z"),
        );
        let kinds: Vec<&str> = timeline.iter().map(|entry| entry.kind).collect();
        assert_eq!(kinds, ["enqueued", "waiting", "cancel requested"]);
        assert_eq!(
            timeline[1].message,
            "due at 2026-03-02T10:30:00.000Z (the retry after: 429 from shop)"
        );
        assert_eq!(
            timeline[0].message,
            "enqueued by a webhook call, on version 2"
        );
    }

    #[test]
    fn a_run_inside_its_first_step_has_the_rows_start() {
        let mut running = run(RunStatus::Running, Trigger::Manual);
        running.started_at = Some(at("2026-03-02T10:00:01Z"));
        let timeline = of(
            &running,
            Some(&payload(json!({}))),
            &[],
            &[],
            at("2026-03-02T10:00:02.123456Z"),
        );
        let entries: Vec<(&str, &str)> = timeline
            .iter()
            .map(|entry| (entry.kind, entry.message.as_str()))
            .collect();
        assert_eq!(
            entries,
            [
                ("enqueued", "enqueued by hand through the API, on version 2"),
                ("started", "attempt 1 of 5"),
            ]
        );
    }

    #[test]
    fn who_enqueued_it_is_said_for_every_trigger() {
        let scheduled = run(RunStatus::Queued, Trigger::Schedule);
        let tick = payload(json!({"_schedule": {"scheduledFor": "2026-03-02T10:00:00.000Z"}}));
        assert_eq!(
            enqueued_by(&scheduled, Some(&tick)),
            "enqueued by the scheduler for 2026-03-02T10:00:00.000Z, on version 2"
        );
        let by_person = payload(json!({"ticket": {"number": "TK-3"}}));
        assert!(
            enqueued_by(&run(RunStatus::Queued, Trigger::Event), Some(&by_person))
                .contains("TK-3 made by a person")
        );
        let mut retry = payload(json!({}));
        retry.retry_of = Some("r-9".into());
        assert!(
            enqueued_by(&run(RunStatus::Queued, Trigger::Manual), Some(&retry))
                .contains("a retry of run r-9 on version 2")
        );
        assert_eq!(
            enqueued_by(&run(RunStatus::Queued, Trigger::Api), None),
            "enqueued (trigger api)"
        );
    }
}
