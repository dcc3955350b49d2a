//! `POST /webhook/{token}` (start a run from a sender's body) and `GET /webhook/{token}`
//! (the help: method, full URL, parameters, example body).
//!
//! The POST checks, in this order, each with its answer:
//! 1. the token names a webhook automation, else 404 (a token kept by an automation whose
//!    trigger is no longer a webhook is unknown too);
//! 2. rate limits per token (automation) and per tenant, else 429 + `Retry-After`;
//! 3. `Content-Type` is JSON, else 415; the body is within the limit, else 413;
//! 4. with a signing secret: Standard Webhooks signature and timestamp, else 401;
//! 5. the automation is enabled, else 409 `automation_paused`;
//! 6. the body is JSON (400 `invalid_json`) that meets the contract (400
//!    `missing_parameter` / `invalid_parameter`);
//! 7. enqueue (`executor::run_request`, trigger `webhook`) and answer 202 only after the
//!    store committed the run.
//!
//! The database: a store that does not answer makes 503 `unavailable` with `Retry-After`
//! (`crate::error`). Steps 1 and 7 each wait at most `webhook_store_deadline`, then answer
//! 503 too — a database that stops answering without closing its connections would
//! otherwise hold the request as long as TCP does. A 503 never means "not written": the
//! commit may land after the deadline (the client repeats with its `webhook-id` and gets
//! the same run). A 202 always means "committed".
//!
//! Authentication (4) comes before the paused check (5) so that an unsigned caller
//! learns nothing but "unsigned". A `webhook-id` (signed or not) makes the call
//! idempotent: the run is enqueued with unique key `webhook:<automation id>:<webhook-id>`,
//! so a repeat while the first run is live gets it from the enqueue, and a repeat after
//! it finished finds it with `RunStore::run_find_by_key` first. Both are in the database:
//! every process and every restart answers the first run, for as long as it is kept.
//!
//! The token is a secret: it is never logged (the trace layer redacts the path) and
//! rate-limit keys use the automation id instead.

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use fronta_automation::executor;
use fronta_automation::store::StoredAutomation;
use fronta_automation::{Trigger, WebhookParam, contract};
use fronta_engine::{Enqueued, RunId, RunStatus, Trigger as RunTrigger};
use serde_json::{Value, json};

use crate::app::App;
use crate::base_url::{base_url, webhook_url};
use crate::error::ApiError;
use crate::extract::{is_json, parse_json, read_body};
use crate::signature::{self, MAX_WEBHOOK_ID_LEN, SignedHeaders};

/// The webhook automation of `token`, with its parameters.
async fn find(app: &App, token: &str) -> Result<(StoredAutomation, Vec<WebhookParam>), ApiError> {
    let stored = app
        .automations()
        .automation_by_webhook_token(token)
        .await
        .map_err(|err| ApiError::desk(err, "webhook"))?
        .ok_or(ApiError::NotFound("webhook"))?;
    match &stored.automation.trigger {
        Trigger::Webhook { params } => {
            let params = params.clone();
            Ok((stored, params))
        }
        _ => Err(ApiError::NotFound("webhook")),
    }
}

fn rate_limit(app: &App, stored: &StoredAutomation) -> Result<(), ApiError> {
    let inner = app.inner();
    for (limiter, key) in [
        (&inner.webhook_per_token, stored.id.to_string()),
        (&inner.webhook_per_tenant, stored.tenant.to_string()),
    ] {
        if let Some(limiter) = limiter {
            limiter
                .check(&key)
                .map_err(|retry_after| ApiError::RateLimited { retry_after })?;
        }
    }
    Ok(())
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// `webhook-id`, when sent: 1–256 visible ASCII characters.
fn webhook_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("webhook-id") else {
        return Ok(None);
    };
    let id = value.to_str().unwrap_or_default().trim();
    if id.is_empty() || id.len() > MAX_WEBHOOK_ID_LEN || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::bad_request(format!(
            "webhook-id must be 1 to {MAX_WEBHOOK_ID_LEN} visible ASCII characters"
        )));
    }
    Ok(Some(id.to_owned()))
}

/// `work` against the database, or 503 once `webhook_store_deadline` has passed.
async fn within_deadline<T>(
    app: &App,
    what: &'static str,
    work: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let deadline = app.config().webhook_store_deadline;
    match tokio::time::timeout(deadline, work).await {
        Ok(answer) => answer,
        Err(_) => {
            tracing::warn!(
                ?deadline,
                step = what,
                "webhook: the database did not answer in time; answering 503"
            );
            Err(ApiError::Unavailable)
        }
    }
}

pub async fn receive(
    State(app): State<App>,
    Path(token): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let (stored, params) = within_deadline(&app, "find", find(&app, &token)).await?;
    rate_limit(&app, &stored)?;
    if !is_json(request.headers()) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let headers = request.headers().clone();
    let body = read_body(request, app.config().body_limit).await?;
    if stored.signing_secret.is_some() {
        let signed = SignedHeaders {
            id: header(&headers, "webhook-id"),
            timestamp: header(&headers, "webhook-timestamp"),
            signature: header(&headers, "webhook-signature"),
        };
        let now = app.inner().clock.now();
        // The current secret and, after a rotation, the old ones still in their overlap.
        let secrets = fronta_automation::rotation::signing_secrets(&stored, now);
        signature::verify_any(
            &secrets,
            signed,
            &body,
            now,
            app.config().signature_tolerance,
        )
        .map_err(|err| {
            tracing::info!(automation = %stored.id, reason = %err, "webhook signature refused");
            ApiError::signature(err.to_string())
        })?;
    }
    let webhook_id = webhook_id(&headers)?;
    if !stored.automation.enabled {
        return Err(ApiError::AutomationPaused);
    }
    let value: Value = parse_json(&body)?;
    let context = contract::extract(&params, &value).map_err(ApiError::Contract)?;

    let key = webhook_id.map(|id| format!("webhook:{}:{id}", stored.id));
    let enqueued = within_deadline(&app, "enqueue", enqueue(&app, &stored, key, context)).await?;
    match enqueued {
        Answer::Repeated(first, status) => Ok(repeated(first, status)),
        Answer::Inserted(id) => {
            tracing::debug!(automation = %stored.id, run = %id, "webhook run enqueued");
            // Committed: the answer is 202 whatever the stream's read of the run does,
            // and it may not hold the answer longer than the deadline either.
            let deadline = app.config().webhook_store_deadline;
            let streamed = app.hub().run_changed(&app, stored.tenant, id);
            if tokio::time::timeout(deadline, streamed).await.is_err() {
                tracing::warn!(run = %id, "webhook: the stream's read of the run timed out; answering 202 (committed)");
            }
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"runId": id.to_string(), "status": "queued"})),
            )
                .into_response())
        }
    }
}

/// What the enqueue of a webhook run came to.
enum Answer {
    /// A new run, committed.
    Inserted(RunId),
    /// The `webhook-id` was seen: the first run and its status now.
    Repeated(RunId, RunStatus),
}

/// Find a repeat by its key, else enqueue (committed when this answers).
async fn enqueue(
    app: &App,
    stored: &StoredAutomation,
    key: Option<String>,
    context: serde_json::Map<String, Value>,
) -> Result<Answer, ApiError> {
    // A repeat of a run that already finished: its key is free again, so only the
    // lookup (which sees finished runs) finds it. A repeat of a live run is also caught
    // by the enqueue's unique key, which closes the race between two repeats.
    if let Some(key) = &key
        && let Some(first) = app
            .runs()
            .run_find_by_key(&stored.tenant.to_string(), key)
            .await?
    {
        tracing::info!(automation = %stored.id, run = %first.id, "repeated webhook-id: answering the first run");
        return Ok(Answer::Repeated(first.id, first.status));
    }
    let mut enqueue = executor::run_request(stored, RunTrigger::Webhook, context);
    if let Some(key) = &key {
        enqueue = enqueue.unique_key(key.clone());
    }
    match app.inner().dispatcher.enqueue(enqueue).await? {
        Enqueued::Inserted(id) => Ok(Answer::Inserted(id)),
        Enqueued::Existing(id) => {
            let status = match app.runs().run_get(id).await {
                Ok(Some(run)) => run.status,
                // Unreadable just now: its id is still the answer.
                _ => RunStatus::Queued,
            };
            Ok(Answer::Repeated(id, status))
        }
    }
}

/// The answer to a repeated `webhook-id`: the first run's id and its status now.
fn repeated(first: RunId, status: RunStatus) -> Response {
    (
        StatusCode::ACCEPTED,
        Json(json!({"runId": first.to_string(), "status": status.as_str(), "duplicate": true})),
    )
        .into_response()
}

pub async fn help(
    State(app): State<App>,
    Path(token): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let (stored, params) = find(&app, &token).await?;
    let url = webhook_url(&base_url(app.config(), &headers), &token);
    let mut help = contract::help(&url, &params);
    if let Value::Object(map) = &mut help {
        map.insert("enabled".into(), json!(stored.automation.enabled));
        if stored.signing_secret.is_some() {
            map.insert(
                "signature".into(),
                json!({
                    "scheme": "Standard Webhooks (HMAC-SHA256 over id.timestamp.body)",
                    "headers": ["webhook-id", "webhook-timestamp", "webhook-signature"],
                    "toleranceSec": app.config().signature_tolerance.as_secs(),
                }),
            );
        }
    }
    Ok(Json(help))
}
