//! The tenant's runs: list (`GET /api/runs`, also `/api/dashboard/runs`), read with the
//! step log, cancel (two-phase) and retry (a failed or suppressed run, from its checkpoint).
//!
//! A run belongs to the tenant whose id is its `tenant`; any other run answers the same
//! 404 as an unknown id.
//!
//! Listing: newest first, `?status=&automation=&version=&trigger=&ticket=&from=&to=&q=`
//! (`fronta_automation::run_search`; `status` may list several, comma separated; `ticket`
//! is `TK-12`, `12` or an id; `from`/`to` RFC 3339 instants or dates; any other parameter
//! is a 400 naming it). The store filters by tenant and one status; the rest is filtered
//! here, reading the store page by page behind the cursor. To keep one request bounded, at most
//! `runs_scan_max` runs are read: a page may then hold fewer items than `limit` and still
//! carry a `nextCursor` — follow it until it is `null`.
//!
//! Answers: cancel → 200 `{"runId", "cancel": "cancelled"|"requested", "status"}`, 409
//! `run_finished` when it had already ended; retry → 202 `{"runId", "status": "queued"}`,
//! 409 `run_not_failed` unless it failed, 409 `conflict` when another live run holds its
//! unique key. A retry continues on the run's own version (its checkpoint fits only that
//! tree); `{"version": "current"}` starts the run's input anew on the current version as
//! a new run (202 with the new `runId`, `retryOf` and `automationVersion`).
//! `{"fromStep": "<name>"}` starts a finished run (completed, failed, cancelled or
//! suppressed) again as a new run on its own version from that step, the steps before it
//! reused; `{"fromStart": true}` from its start (`fronta_automation::restart`): 400 for a
//! step the version does not have, 409 `run_not_finished` for a run still going.

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use fronta_automation::executor::{AUTOMATION_KIND, AUTOMATION_MAX_RETRIES, RunPayload};
use fronta_automation::restart::{Refused, restart_request};
use fronta_automation::run_search::{self, RunSearch, SearchText};
use fronta_desk::TenantId;
use fronta_engine::store::{CancelReply, RetryReply};
use fronta_engine::{EnqueueRequest, Run, RunId, RunStatus};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::App;
use crate::auth::TenantAuth;
use crate::error::ApiError;
use crate::extract::QueryParams;
use crate::pagination::{Page, PageParams};
use crate::routes::automations::optional_body;
use crate::wire::RunView;

/// `GET /api/runs`'s query: the search (`fronta_automation::run_search`) and the page.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunQuery {
    /// Any of these statuses, comma-separated: `scheduled`, `queued`, `running`,
    /// `completed`, `failed`, `cancelled`, `suppressed`.
    status: Option<String>,
    /// An automation's id.
    automation: Option<String>,
    /// A version number of the automation named.
    version: Option<String>,
    /// The trigger: `webhook`, `event`, `poll`, `schedule`, `manual`, `api`.
    trigger: Option<String>,
    /// A ticket (`TK-12`, `12` or its id): the runs that touched it.
    ticket: Option<String>,
    /// Runs made at or after: a date or an RFC 3339 instant.
    from: Option<String>,
    /// Runs made before: a date or an RFC 3339 instant.
    to: Option<String>,
    /// Text in a run's last error or its step messages (case folded).
    q: Option<String>,
    /// Runs on the page.
    #[schemars(range(min = 1))]
    limit: Option<usize>,
    /// The `nextCursor` of the page before.
    cursor: Option<String>,
}

impl crate::extract::QueryKeys for RunQuery {
    const KEYS: &'static [&'static str] = &[
        "status",
        "automation",
        "version",
        "trigger",
        "ticket",
        "from",
        "to",
        "q",
        "limit",
        "cursor",
    ];
}

pub async fn list(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    QueryParams(query): QueryParams<RunQuery>,
) -> Result<Json<Page<RunView>>, ApiError> {
    let page = PageParams {
        limit: query.limit,
        cursor: query.cursor.clone(),
    };
    let size = page.size(app.config())?;
    let mut search = RunSearch::parse(&SearchText {
        status: query.status.as_deref(),
        automation: query.automation.as_deref(),
        version: query.version.as_deref(),
        trigger: query.trigger.as_deref(),
        from: query.from.as_deref(),
        to: query.to.as_deref(),
        q: query.q.as_deref(),
    })
    .map_err(ApiError::bad_request)?;
    search.ticket = ticket_filter(&app, tenant.id, query.ticket.as_deref()).await?;
    let found = run_search::search(
        app.runs(),
        Some(tenant.id.to_string()),
        // The automation runs: a bulk action (`runs:bulk`) is read at its own route.
        Some(AUTOMATION_KIND.into()),
        &search,
        page.cursor_id()?.map(RunId),
        size,
        app.config().runs_scan_max,
    )
    .await?;
    Ok(Json(page_of(
        found.runs,
        found.next.map(|id| id.to_string()),
    )))
}

/// A search's `ticket` (`TK-12`, `12` or an id) as the tenant's ticket id; nothing given
/// is no filter, an unknown ticket the 404 of a ticket.
pub(crate) async fn ticket_filter(
    app: &App,
    tenant: TenantId,
    text: Option<&str>,
) -> Result<Option<fronta_desk::TicketId>, ApiError> {
    let Some(text) = text.filter(|text| !text.trim().is_empty()) else {
        return Ok(None);
    };
    fronta_desk::store::find_ticket(app.desk(), tenant, text)
        .await
        .map(|ticket| Some(ticket.id))
        .map_err(|err| ApiError::desk(err, "ticket"))
}

fn page_of(runs: Vec<Run>, next_cursor: Option<String>) -> Page<RunView> {
    Page {
        items: runs.iter().map(|run| RunView::of(run, false)).collect(),
        next_cursor,
    }
}

/// The tenant's run `id`, or the 404 of an unknown id.
async fn tenant_run(app: &App, tenant: TenantId, id: &str) -> Result<Run, ApiError> {
    tenant_run_of(app, tenant, id, None, "run").await
}

/// The tenant's run `id` (of `kind`, when given), or the 404 of an unknown `what`.
pub(crate) async fn tenant_run_of(
    app: &App,
    tenant: TenantId,
    id: &str,
    kind: Option<&str>,
    what: &'static str,
) -> Result<Run, ApiError> {
    let id: RunId = id.parse().map_err(|_| ApiError::NotFound(what))?;
    app.runs()
        .run_get(id)
        .await
        .map_err(|err| ApiError::store(err, what))?
        .filter(|run| run.tenant == tenant.to_string())
        .filter(|run| kind.is_none_or(|kind| run.kind == kind))
        .ok_or(ApiError::NotFound(what))
}

/// Asks the store to cancel the tenant's `run` (`what` names it in a refusal): a waiting
/// run is cancelled at once, a running one is asked to stop (its handler in this process
/// hears it now, elsewhere at the next heartbeat); 409 `run_finished` once it ended.
/// Answers what was done and the status after it; the stream is told.
pub(crate) async fn cancel_run(
    app: &App,
    tenant: TenantId,
    run: &Run,
    what: &str,
) -> Result<(&'static str, RunStatus), ApiError> {
    let reply = app
        .runs()
        .run_request_cancel(run.id)
        .await
        .map_err(|err| ApiError::store(err, "run"))?;
    let done = match reply {
        CancelReply::Cancelled => ("cancelled", RunStatus::Cancelled),
        CancelReply::Requested => {
            app.cancel_here(run.id);
            ("requested", run.status)
        }
        CancelReply::AlreadyFinished(status) => {
            return Err(ApiError::Conflict {
                code: "run_finished",
                message: format!("the {what} is already {status}: nothing to cancel"),
            });
        }
    };
    tracing::info!(run = %run.id, cancel = done.0, "cancel requested through the API");
    app.hub().run_changed(app, tenant, run.id).await;
    Ok(done)
}

pub async fn get(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<RunView>, ApiError> {
    let run = tenant_run(&app, tenant.id, &id).await?;
    Ok(Json(RunView::of(&run, true)))
}

pub async fn cancel(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<CancelAnswer>, ApiError> {
    let run = tenant_run(&app, tenant.id, &id).await?;
    let (cancel, status) = cancel_run(&app, tenant.id, &run, "run").await?;
    Ok(Json(CancelAnswer {
        run_id: run.id.to_string(),
        cancel,
        status,
    }))
}

/// The answer of `POST /api/runs/{id}/cancel`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelAnswer {
    pub run_id: String,
    /// `cancelled` (it had not started) or `requested` (its worker is asked to stop).
    #[schemars(with = "CancelKind")]
    pub cancel: &'static str,
    pub status: RunStatus,
}

/// What a cancel did (only its schema is used: the answers write `&'static str`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum CancelKind {
    Cancelled,
    Requested,
}

/// The optional body of a retry.
#[derive(schemars::JsonSchema, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct RetryBody {
    #[serde(default)]
    version: RetryVersion,
    /// Start a finished run again from this step, on its own version
    /// (`fronta_automation::restart`).
    from_step: Option<String>,
    /// Start a finished run again from its start, on its own version.
    #[serde(default)]
    from_start: bool,
}

/// Which version a retry runs: the run's own (from its checkpoint), or the automation's
/// current one (its input anew, as a new run).
#[derive(schemars::JsonSchema, Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetryVersion {
    #[default]
    Own,
    Current,
}

pub async fn retry(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
    request: Request,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let run = tenant_run(&app, tenant.id, &id).await?;
    let body: RetryBody = optional_body(request, &app).await?.unwrap_or_default();
    if body.from_step.is_some() || body.from_start {
        return restart(&app, tenant.id, &run, body).await;
    }
    if body.version == RetryVersion::Current {
        return retry_on_current(&app, tenant.id, &run).await;
    }
    let reply = app
        .runs()
        .run_retry(run.id)
        .await
        .map_err(|err| ApiError::store(err, "run"))?;
    match reply {
        RetryReply::Requeued => {
            tracing::info!(run = %run.id, status = %run.status, "run retried through the API");
            app.hub().run_changed(&app, tenant.id, run.id).await;
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"runId": run.id.to_string(), "status": "queued"})),
            ))
        }
        RetryReply::NotFailed(status) => Err(not_failed(status)),
    }
}

fn not_failed(status: RunStatus) -> ApiError {
    ApiError::Conflict {
        code: "run_not_failed",
        message: format!("only failed and suppressed runs are retried; this one is {status}"),
    }
}

/// A failed automation run's input, started anew on the automation's current version: a
/// new run (same trigger) that names the old one in `retryOf`. Never a checkpoint into
/// another tree. A paused automation starts nothing (409 `automation_paused`).
/// A finished run started again on its own version, from a step or its start, as a new
/// run (`fronta_automation::restart`).
async fn restart(
    app: &App,
    tenant: TenantId,
    run: &Run,
    body: RetryBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if body.from_step.is_some() && body.from_start {
        return Err(ApiError::bad_request(
            "give \"fromStep\" or \"fromStart\", not both",
        ));
    }
    if body.version == RetryVersion::Current {
        if body.from_start {
            return retry_on_current(app, tenant, run).await;
        }
        return Err(ApiError::bad_request(
            "\"fromStep\" starts the run again on its own version (the context before a step \
             is that version's); {\"version\": \"current\"} starts its input anew",
        ));
    }
    let payload: RunPayload = serde_json::from_value(run.payload.clone())
        .map_err(|_| ApiError::bad_request("only automation runs have steps to start from"))?;
    let version = app
        .automations()
        .automation_version(tenant, payload.automation_id, payload.automation_version)
        .await
        .map_err(|err| ApiError::desk(err, "automation version"))?;
    let automation_version = payload.automation_version;
    let request = restart_request(
        run,
        payload,
        &version.definition.steps,
        body.from_step.as_deref(),
    )
    .map_err(|refused| match refused {
        Refused::NotFinished(_) => ApiError::Conflict {
            code: "run_not_finished",
            message: refused.to_string(),
        },
        Refused::NoSuchStep(message) => ApiError::bad_request(message),
    })?;
    let enqueued = app.inner().dispatcher.enqueue(request).await?;
    tracing::info!(run = %run.id, new_run = %enqueued.id(), from_step = ?body.from_step,
        "finished run started again by hand");
    app.hub().run_changed(app, tenant, enqueued.id()).await;
    let mut answer = json!({
        "runId": enqueued.id().to_string(),
        "status": "queued",
        "retryOf": run.id.to_string(),
        "automationVersion": automation_version,
    });
    match &body.from_step {
        Some(step) => answer["fromStep"] = json!(step),
        None => answer["fromStart"] = json!(true),
    }
    Ok((StatusCode::ACCEPTED, Json(answer)))
}

async fn retry_on_current(
    app: &App,
    tenant: TenantId,
    run: &Run,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if !run.status.is_retried_by_hand() {
        return Err(not_failed(run.status));
    }
    let mut payload: RunPayload = serde_json::from_value(run.payload.clone()).map_err(|_| {
        ApiError::bad_request("only automation runs can be retried on the current version")
    })?;
    let stored = app
        .automations()
        .automation_get(tenant, payload.automation_id)
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    if !stored.automation.enabled {
        return Err(ApiError::AutomationPaused);
    }
    payload.automation_version = stored.current_version;
    payload.retry_of = Some(run.id.to_string());
    // Started by a person: no longer a link of the chain that may have suppressed it.
    payload.caused_by = None;
    let request = EnqueueRequest::new(
        AUTOMATION_KIND,
        serde_json::to_value(&payload).unwrap_or(Value::Null),
        AUTOMATION_MAX_RETRIES,
    )
    .tenant(tenant.to_string())
    .trigger(run.trigger);
    let enqueued = app.inner().dispatcher.enqueue(request).await?;
    tracing::info!(run = %run.id, new_run = %enqueued.id(), version = stored.current_version,
        "failed run's input started anew on the current version");
    app.hub().run_changed(app, tenant, enqueued.id()).await;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "runId": enqueued.id().to_string(),
            "status": "queued",
            "retryOf": run.id.to_string(),
            "automationVersion": stored.current_version,
        })),
    ))
}
