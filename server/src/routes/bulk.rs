//! Bulk actions on runs (`fronta_automation::bulk`): retry or cancel every run of the
//! tenant matching a filter, as a durable run of its own.
//!
//! - `POST /api/runs/bulk {"action": "retry"|"cancel", "filter": {…}}` → 202
//!   `{"id", "status": "queued", "action", "filter"}` at once; the filter takes the names of
//!   `GET /api/runs`' query (`status`, `automation`, `version`, `trigger`, `ticket`, `from`,
//!   `to`, `q`), an unknown one is a 400 naming it. With `"preview": true` nothing is
//!   started: 200 `{"action", "filter", "matching", "exact"}` — how many runs match now,
//!   reading at most `bulk_preview_max` runs (`exact: false`: at least that many).
//! - `GET /api/runs/bulk/{id}` → its progress ([`BulkView`]).
//! - `POST /api/runs/bulk/{id}/cancel` → stops it between two runs; what it did stays.
//!
//! Another tenant's bulk action, or a run that is not one, answers the 404 of an unknown id.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fronta_automation::bulk::{
    BULK_KIND, BulkAction, BulkFilter, BulkPayload, BulkProgress, Phase, count,
};
use fronta_desk::TenantId;
use fronta_engine::{EnqueueRequest, Run, RunStatus, Trigger};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::app::App;
use crate::auth::TenantAuth;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::routes::runs::{cancel_run, tenant_run_of, ticket_filter};

/// The body of `POST /api/runs/bulk`.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BulkBody {
    action: BulkAction,
    #[serde(default)]
    filter: BulkFilter,
    /// Count the matches, start nothing.
    #[serde(default)]
    preview: bool,
}

/// A bulk action as `GET /api/runs/bulk/{id}` shows it.
#[derive(schemars::JsonSchema, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BulkView {
    id: String,
    action: BulkAction,
    filter: BulkFilter,
    /// The status of its run: queued, running, completed, cancelled, failed.
    status: RunStatus,
    phase: Phase,
    /// Matches found by its count.
    total: u64,
    /// Matches met while acting, and what became of them.
    matched: u64,
    acted: u64,
    skipped: u64,
    errors: u64,
    skips: Vec<Value>,
    percent: u64,
    last_error: Option<String>,
    created_at: chrono::DateTime<chrono::Utc>,
    finished_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl BulkView {
    fn of(run: &Run, payload: BulkPayload) -> BulkView {
        let progress = BulkProgress::of(run);
        BulkView {
            id: run.id.to_string(),
            action: payload.action,
            filter: payload.filter,
            status: run.status,
            phase: progress.phase,
            total: progress.total,
            matched: progress.matched,
            acted: progress.acted,
            skipped: progress.skipped,
            errors: progress.errors,
            skips: progress
                .skips
                .iter()
                .map(|(reason, count)| json!({"reason": reason, "count": count}))
                .collect(),
            percent: progress.percent(),
            last_error: progress.last_error.or_else(|| run.last_error.clone()),
            created_at: run.created_at,
            finished_at: run.finished_at(),
        }
    }
}

pub async fn start(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    JsonBody(body): JsonBody<BulkBody>,
) -> Result<Response, ApiError> {
    let mut filter = body.filter;
    // A ticket is stored by its id: `TK-12` names another ticket once numbers move on.
    filter.ticket = ticket_filter(&app, tenant.id, filter.ticket.as_deref())
        .await?
        .map(|ticket| ticket.to_string());
    let search = filter
        .search()
        .map_err(|err| ApiError::bad_request(format!("filter: {err}")))?;
    if body.preview {
        let (matching, exact) = count(
            app.runs(),
            &tenant.id.to_string(),
            &search,
            app.config().bulk_preview_max,
        )
        .await?;
        return Ok(Json(BulkPreview {
            action: body.action,
            filter,
            matching,
            exact,
        })
        .into_response());
    }
    let payload = BulkPayload {
        action: body.action,
        filter: filter.clone(),
        by: "api".into(),
    };
    let request = EnqueueRequest::new(
        BULK_KIND,
        serde_json::to_value(&payload).unwrap_or(Value::Null),
        // A store that fails while it walks is retried; the walk resumes from its page.
        3,
    )
    .tenant(tenant.id.to_string())
    .trigger(Trigger::Api);
    let enqueued = app.inner().dispatcher.enqueue(request).await?;
    tracing::info!(run = %enqueued.id(), action = body.action.as_str(), tenant = %tenant.id,
        "bulk action started through the API");
    Ok((
        StatusCode::ACCEPTED,
        Json(BulkStarted {
            id: enqueued.id().to_string(),
            status: RunStatus::Queued,
            action: body.action,
            filter,
        }),
    )
        .into_response())
}

/// The answer of a preview (`"preview": true`, 200): how many runs match.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BulkPreview {
    pub action: BulkAction,
    pub filter: BulkFilter,
    /// Matches counted, at most `bulk_preview_max` runs read.
    pub matching: u64,
    /// `false`: the count stopped at the bound (at least `matching`).
    pub exact: bool,
}

/// The answer of a bulk action started (202).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BulkStarted {
    pub id: String,
    pub status: RunStatus,
    pub action: BulkAction,
    pub filter: BulkFilter,
}

/// The tenant's bulk action `id`, or the 404 of an unknown id.
async fn tenant_bulk(
    app: &App,
    tenant: TenantId,
    id: &str,
) -> Result<(Run, BulkPayload), ApiError> {
    let run = tenant_run_of(app, tenant, id, Some(BULK_KIND), "bulk action").await?;
    let payload = serde_json::from_value(run.payload.clone()).map_err(|err| {
        tracing::error!(run = %run.id, error = %err, "a bulk action's payload does not read");
        ApiError::Internal
    })?;
    Ok((run, payload))
}

pub async fn get(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<BulkView>, ApiError> {
    let (run, payload) = tenant_bulk(&app, tenant.id, &id).await?;
    Ok(Json(BulkView::of(&run, payload)))
}

pub async fn cancel(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<BulkCancelAnswer>, ApiError> {
    let (run, _) = tenant_bulk(&app, tenant.id, &id).await?;
    let (cancel, _) = cancel_run(&app, tenant.id, &run, "bulk action").await?;
    Ok(Json(BulkCancelAnswer {
        id: run.id.to_string(),
        cancel,
    }))
}

/// The answer of `POST /api/runs/bulk/{id}/cancel`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BulkCancelAnswer {
    pub id: String,
    #[schemars(with = "crate::routes::runs::CancelKind")]
    pub cancel: &'static str,
}
