//! Dry runs (`fronta_automation::dry_run`): `POST /api/automations/test` tests an unsaved
//! definition (`"automation": {…}` in the body, beside the input), `POST
//! /api/automations/{id}/test` a saved one at its current version or `"version": n`.
//!
//! The input, at most one of:
//! - `"body": {…}` — a webhook trigger reads it through its contract (the webhook's own
//!   400s); a manual trigger gets it as `_body`, as a manual run does; an error event
//!   trigger (`run.failed`, `incident.opened`) starts from it as its sample context;
//! - `"ticket": "TK-12"` (or `12`, or its id) — an event trigger's ticket as it is now,
//!   with `"change": {"<field>": {"from", "to"}}` if given (else none);
//! - `"run": "<id>"` — a past run's input replayed, any trigger;
//! - `"items": […]` — a poll trigger's items, as if polled;
//! - nothing — manual and schedule triggers (a schedule sees its next tick as
//!   `_schedule.scheduledFor`); a webhook reads `{}` through its contract; an error event
//!   trigger starts from an example of what the event gives
//!   (`error_events::sample_context`).
//!
//! Besides: `"mocks": {"<connector step>": {outputs}}` (a mock of a step that is not a
//! connector step of the tree is refused by name) and `"connectors": "mock"` (default:
//! connector steps are not called) or `"live"`.
//!
//! Answers: 200 with the dry run (`status` `completed`, `failed`, `would retry` or
//! `stopped`, the step log, the writes, the events and whom they would start, the
//! incident a failed run would open); 422 `invalid_automation` with every problem at its
//! path (the definition's own paths, as a save answers them); 400 for an input that does not fit; 404 for an unknown
//! automation, version, ticket or run. The API's per-tenant rate limit applies, as to
//! every route; the walk is bounded by `--test-time-limit`.

use axum::Json;
use axum::extract::{Path, State};
use fronta_automation::dry_run::{self, DryRunAnswer, DryRunRequest};
use fronta_automation::error_events;
use fronta_automation::executor::{AUTOMATION_KIND, RunPayload};
use fronta_automation::store::StoredAutomation;
use fronta_automation::{BODY_KEY, Trigger, contract};
use fronta_desk::TenantId;
use fronta_engine::RunId;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::auth::TenantAuth;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::routes::automations::{check, get_stored, split_body, validation_context, version_of};

/// The body of a test, either route.
#[derive(schemars::JsonSchema, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TestBody {
    /// The unsaved definition (`POST /api/automations/test` only).
    automation: Option<Value>,
    /// The saved version to test (`POST /api/automations/{id}/test` only).
    version: Option<u32>,
    body: Option<Value>,
    ticket: Option<Value>,
    change: Option<Map<String, Value>>,
    run: Option<String>,
    items: Option<Vec<Value>>,
    #[serde(default)]
    mocks: Map<String, Value>,
    connectors: Option<String>,
}

fn test_body(body: Value) -> Result<TestBody, ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of a test is an object: {\"body\" | \"ticket\" | \"run\" | \"items\", \"mocks\", \"connectors\"}",
        ));
    }
    serde_json::from_value(body)
        .map_err(|err| ApiError::bad_request(format!("the test does not fit: {err}")))
}

/// `POST /api/automations/test`: an unsaved definition.
pub async fn test_unsaved(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<DryRunAnswer>, ApiError> {
    let mut test = test_body(body)?;
    if test.version.is_some() {
        return Err(ApiError::bad_request(
            "\"version\" names a saved version: test it with POST /api/automations/{id}/test",
        ));
    }
    let Some(definition) = test.automation.take() else {
        return Err(ApiError::bad_request(
            "\"automation\" is required: the definition to test, as it would be saved",
        ));
    };
    let mut problems = Vec::new();
    // The paths are the definition's own, as a save answers them.
    let (value, _secret) = split_body(definition, "", &mut problems);
    let context = validation_context(&app, tenant.id).await?;
    let automation = check(&value, &context, "", &mut problems);
    let automation = match automation {
        Some(automation) if problems.is_empty() => automation,
        _ => return Err(ApiError::InvalidAutomation(problems)),
    };
    let stored = dry_run::unsaved(tenant.id, automation);
    run(&app, tenant.id, stored, None, test).await
}

/// `POST /api/automations/{id}/test`: a saved automation, current or `version`.
pub async fn test_saved(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<DryRunAnswer>, ApiError> {
    let test = test_body(body)?;
    if test.automation.is_some() {
        return Err(ApiError::bad_request(
            "\"automation\" is an unsaved definition: test it with POST /api/automations/test",
        ));
    }
    let mut stored = get_stored(&app, tenant.id, &id).await?;
    let number = test.version.unwrap_or(stored.current_version);
    if number != stored.current_version {
        if number == 0 {
            return Err(ApiError::bad_request("\"version\" counts from 1"));
        }
        let version = version_of(&app, &stored, number).await?;
        let enabled = stored.automation.enabled;
        stored.automation = version.definition;
        stored.automation.enabled = enabled;
    }
    run(&app, tenant.id, stored, Some(number), test).await
}

async fn run(
    app: &App,
    tenant: TenantId,
    stored: StoredAutomation,
    version: Option<u32>,
    test: TestBody,
) -> Result<Json<DryRunAnswer>, ApiError> {
    let live = match test.connectors.as_deref() {
        None | Some("mock") => false,
        Some("live") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "\"connectors\" is \"mock\" (the default: connector steps are not called) or \"live\", not {other:?}"
            )));
        }
    };
    let unknown = dry_run::unknown_mocks(&stored.automation.steps, &test.mocks);
    if !unknown.is_empty() {
        return Err(ApiError::bad_request(format!(
            "mocks refused: {}",
            unknown.join("; ")
        )));
    }
    let (context, items) = input(app, tenant, &stored, &test).await?;
    let request = DryRunRequest {
        stored,
        version,
        context,
        items,
        mocks: test.mocks,
        live,
    };
    Ok(Json(app.dry_runner().run(request).await?))
}

/// The run context the test starts with, from its one input and the trigger.
async fn input(
    app: &App,
    tenant: TenantId,
    stored: &StoredAutomation,
    test: &TestBody,
) -> Result<(Map<String, Value>, Option<Vec<Value>>), ApiError> {
    let given: Vec<&str> = [
        ("body", test.body.is_some()),
        ("ticket", test.ticket.is_some()),
        ("run", test.run.is_some()),
        ("items", test.items.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, given)| given.then_some(name))
    .collect();
    if given.len() > 1 {
        return Err(ApiError::bad_request(format!(
            "a test takes one input, got {}",
            given.join(" and ")
        )));
    }
    if test.change.is_some() && test.ticket.is_none() {
        return Err(ApiError::bad_request(
            "\"change\" goes with \"ticket\": the change of that ticket an event would carry",
        ));
    }
    let trigger = &stored.automation.trigger;
    let kind = trigger.kind();
    let wrong = |input: &str, takes: &str| {
        ApiError::bad_request(format!(
            "{input:?} is not an input of this automation's trigger ({kind}); it takes {takes}"
        ))
    };
    let takes = match trigger {
        Trigger::Webhook { .. } | Trigger::Manual => "\"body\" or \"run\"",
        Trigger::Event { event } if event.is_error_event() => {
            "\"body\" (a sample context), nothing (an example context) or \"run\""
        }
        Trigger::Event { .. } => "\"ticket\" (with \"change\") or \"run\"",
        Trigger::Poll { .. } => "\"items\" or \"run\"",
        Trigger::Schedule { .. } => "nothing, or \"run\"",
    };
    if let Some(id) = &test.run {
        return Ok((replayed(app, tenant, id).await?, None));
    }
    if let Some(reference) = &test.ticket {
        if !matches!(trigger, Trigger::Event { event } if !event.is_error_event()) {
            return Err(wrong("ticket", takes));
        }
        let ticket = dry_run::find_ticket(app.desk(), tenant, reference)
            .await
            .map_err(|err| ApiError::desk(err, "ticket"))?;
        return Ok((dry_run::event_context(&ticket, test.change.clone()), None));
    }
    if let Some(items) = &test.items {
        if !matches!(trigger, Trigger::Poll { .. }) {
            return Err(wrong("items", takes));
        }
        return Ok((Map::new(), Some(items.clone())));
    }
    match trigger {
        Trigger::Webhook { params } => {
            let body = test.body.clone().unwrap_or_else(|| json!({}));
            Ok((
                contract::extract(params, &body).map_err(ApiError::Contract)?,
                None,
            ))
        }
        Trigger::Manual => Ok((
            test.body
                .clone()
                .map(|body| Map::from_iter([(BODY_KEY.to_owned(), body)]))
                .unwrap_or_default(),
            None,
        )),
        // An error event's test starts from the sample context it is given, or an
        // example of what the event gives (`error_events::sample_context`).
        Trigger::Event { event } if event.is_error_event() => match &test.body {
            None => Ok((error_events::sample_context(*event), None)),
            Some(Value::Object(context)) => Ok((context.clone(), None)),
            Some(other) => Err(ApiError::bad_request(format!(
                "the sample context of a {} test must be an object, got {other}",
                event.as_str()
            ))),
        },
        _ if test.body.is_some() => Err(wrong("body", takes)),
        Trigger::Event { .. } => Err(ApiError::bad_request(format!(
            "an event trigger's test needs a ticket: it takes {takes}"
        ))),
        Trigger::Poll { .. } => Err(ApiError::bad_request(format!(
            "a poll trigger's test needs the items it would poll: it takes {takes}"
        ))),
        Trigger::Schedule { .. } => {
            use fronta_automation::schedule::{Timing, run_context};
            let timing = Timing::of(trigger).map_err(ApiError::bad_request)?;
            let now = chrono::Utc::now();
            let next = match &timing {
                Some(Timing::Cron(schedule)) => schedule.next_ticks(now, 1).first().copied(),
                _ => None,
            };
            let context = timing
                .map(|timing| run_context(&timing, next.unwrap_or(now), 0, 0))
                .unwrap_or_default();
            Ok((context, None))
        }
    }
}

/// The input of the tenant's past automation run `id`.
async fn replayed(app: &App, tenant: TenantId, id: &str) -> Result<Map<String, Value>, ApiError> {
    let run_id: RunId = id.parse().map_err(|_| ApiError::NotFound("run"))?;
    let run = app
        .runs()
        .run_get(run_id)
        .await
        .map_err(|err| ApiError::store(err, "run"))?
        .filter(|run| run.tenant == tenant.to_string())
        .ok_or(ApiError::NotFound("run"))?;
    if run.kind != AUTOMATION_KIND {
        return Err(ApiError::bad_request(format!(
            "run {id} is a {} run, not an automation run: it has no input to replay",
            run.kind
        )));
    }
    let payload: RunPayload = serde_json::from_value(run.payload)
        .map_err(|err| ApiError::bad_request(format!("run {id}'s input cannot be read: {err}")))?;
    Ok(payload.context)
}
