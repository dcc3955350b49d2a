//! The tenant's automations: create, list, read, replace (`PUT`), delete, pause, resume,
//! and manual runs. Every save is validated (`validate::validate` with the tenant's
//! ticket types); a refused save answers 422 `invalid_automation` listing every problem
//! with its path, shape problems and meaning problems alike.
//!
//! Decisions where API.md is silent:
//! - The answer's read-only fields (`id`, `webhookUrl`, `signed`, `createdAt`,
//!   `updatedAt`) are stripped from a body before it is parsed, on `POST` and `PUT`, so a
//!   client may send back what it read.
//! - Signatures: `POST` takes `"signingSecret": "whsec_<base64>"` (16–128 key bytes), or
//!   `true` to have one generated — then the answer shows it, once. It cannot be changed
//!   later (the port has no way to yet): a `PUT` naming another secret is a 422, never
//!   silently ignored.
//! - Manual runs (`POST /api/automations/{id}/runs`, trigger `manual`): an optional JSON
//!   body becomes `_body`; for a webhook automation the body is also read through its
//!   contract, so templates see the same parameters as a webhook run (400 when it does
//!   not fit). A paused automation answers 409 `automation_paused`.
//!
//! Left out: versions of an automation, dry runs.

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use fronta_automation::executor;
use fronta_automation::store::{AutomationId, StoredAutomation};
use fronta_automation::validate::validate;
use fronta_automation::{Automation, Problem, Trigger, ValidationContext, contract};
use fronta_desk::TenantId;
use fronta_engine::Trigger as RunTrigger;
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::auth::TenantAuth;
use crate::base_url::base_url;
use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams, is_json, parse_json, read_body};
use crate::pagination::{Order, Page, PageParams, page_by_id};
use crate::routes::parse_id;
use crate::signature::{generate_secret, secret_key};
use crate::wire::{AUTOMATION_READ_ONLY, automation_view};

/// What a body asked about the signing secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SecretRequest {
    Absent,
    Given(String),
    Generate,
}

/// The tenant's ticket types, as validation needs them.
pub(crate) async fn validation_context(
    app: &App,
    tenant: TenantId,
) -> Result<ValidationContext, ApiError> {
    let types = app.desk().ticket_type_list(tenant).await?;
    Ok(ValidationContext::with_ticket_types(
        types.into_iter().map(|t| (t.name, t.statuses)),
    ))
}

/// Strip the read-only fields and take out `signingSecret`; problems are prefixed with
/// `prefix` (`automations[2]` in a setup).
pub(crate) fn split_body(
    body: Value,
    prefix: &str,
    problems: &mut Vec<Problem>,
) -> (Value, SecretRequest) {
    let Value::Object(mut map) = body else {
        return (body, SecretRequest::Absent);
    };
    for field in AUTOMATION_READ_ONLY {
        map.remove(field);
    }
    let path = join(prefix, "signingSecret");
    let secret = match map.remove("signingSecret") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => SecretRequest::Absent,
        Some(Value::Bool(true)) => SecretRequest::Generate,
        Some(Value::String(secret)) if secret_key(&secret).is_some() => {
            SecretRequest::Given(secret)
        }
        Some(_) => {
            problems.push(Problem::new(
                path,
                "signingSecret must be \"whsec_<base64 of 16 to 128 bytes>\", or true to have one generated",
            ));
            SecretRequest::Absent
        }
    };
    (Value::Object(map), secret)
}

/// `prefix.field`, or `field` at the root.
pub(crate) fn join(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_owned()
    } else if field.is_empty() {
        prefix.to_owned()
    } else {
        format!("{prefix}.{field}")
    }
}

/// Parse and validate; every problem is pushed with `prefix` in front of its path.
pub(crate) fn check(
    value: &Value,
    context: &ValidationContext,
    prefix: &str,
    problems: &mut Vec<Problem>,
) -> Option<Automation> {
    let prefixed = |problem: Problem| Problem::new(join(prefix, &problem.path), problem.message);
    match Automation::from_value(value) {
        Ok(automation) => {
            let found = validate(&automation, context);
            let valid = found.is_empty();
            problems.extend(found.into_iter().map(prefixed));
            valid.then_some(automation)
        }
        Err(found) => {
            problems.extend(found.into_iter().map(prefixed));
            None
        }
    }
}

/// The secret a save ends with: the one given, a new one, or none.
pub(crate) fn secret_for_create(request: &SecretRequest) -> Option<String> {
    match request {
        SecretRequest::Absent => None,
        SecretRequest::Given(secret) => Some(secret.clone()),
        SecretRequest::Generate => Some(generate_secret()),
    }
}

/// A problem when an update asks to change the secret of `stored`.
pub(crate) fn secret_change_problem(
    stored: &StoredAutomation,
    request: &SecretRequest,
    prefix: &str,
) -> Option<Problem> {
    let unchanged = match request {
        SecretRequest::Absent => true,
        SecretRequest::Given(secret) => stored.signing_secret.as_deref() == Some(secret.as_str()),
        SecretRequest::Generate => false,
    };
    (!unchanged).then(|| {
        Problem::new(
            join(prefix, "signingSecret"),
            "the signing secret is set when the automation is created and cannot be changed; \
             create a new automation for a new secret",
        )
    })
}

pub async fn create(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let mut problems = Vec::new();
    let (value, secret) = split_body(body, "", &mut problems);
    let context = validation_context(&app, tenant.id).await?;
    let automation = check(&value, &context, "", &mut problems);
    let automation = match automation {
        Some(automation) if problems.is_empty() => automation,
        _ => return Err(ApiError::InvalidAutomation(problems)),
    };
    let secret_value = secret_for_create(&secret);
    let stored = app
        .automations()
        .automation_create(tenant.id, automation, secret_value.clone())
        .await?;
    let mut view = automation_view(&stored, &base_url(app.config(), &headers));
    if secret == SecretRequest::Generate
        && let (Value::Object(map), Some(secret)) = (&mut view, secret_value)
    {
        map.insert("signingSecret".into(), json!(secret));
    }
    Ok((StatusCode::CREATED, Json(view)))
}

pub async fn list(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    QueryParams(page): QueryParams<PageParams>,
) -> Result<Json<Page<Value>>, ApiError> {
    let base = base_url(app.config(), &headers);
    let automations = app.automations().automation_list(tenant.id).await?;
    Ok(Json(page_by_id(
        automations,
        |stored| stored.id.0,
        Order::OldestFirst,
        &page,
        app.config(),
        |stored| automation_view(&stored, &base),
    )?))
}

async fn get_stored(app: &App, tenant: TenantId, id: &str) -> Result<StoredAutomation, ApiError> {
    let id: AutomationId = parse_id(id, "automation")?;
    app.automations()
        .automation_get(tenant, id)
        .await
        .map_err(|err| ApiError::desk(err, "automation"))
}

pub async fn get(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let stored = get_stored(&app, tenant.id, &id).await?;
    Ok(Json(automation_view(
        &stored,
        &base_url(app.config(), &headers),
    )))
}

pub async fn replace(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let existing = get_stored(&app, tenant.id, &id).await?;
    let mut problems = Vec::new();
    let (value, secret) = split_body(body, "", &mut problems);
    problems.extend(secret_change_problem(&existing, &secret, ""));
    let context = validation_context(&app, tenant.id).await?;
    let automation = check(&value, &context, "", &mut problems);
    let automation = match automation {
        Some(automation) if problems.is_empty() => automation,
        _ => return Err(ApiError::InvalidAutomation(problems)),
    };
    let stored = app
        .automations()
        .automation_update(tenant.id, existing.id, automation)
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    Ok(Json(automation_view(
        &stored,
        &base_url(app.config(), &headers),
    )))
}

pub async fn delete(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: AutomationId = parse_id(&id, "automation")?;
    app.automations()
        .automation_delete(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_enabled(
    app: &App,
    tenant: TenantId,
    id: &str,
    headers: &HeaderMap,
    enabled: bool,
) -> Result<Json<Value>, ApiError> {
    let id: AutomationId = parse_id(id, "automation")?;
    let stored = app
        .automations()
        .automation_set_enabled(tenant, id, enabled)
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    tracing::info!(automation = %stored.id, enabled, "automation switched");
    Ok(Json(automation_view(
        &stored,
        &base_url(app.config(), headers),
    )))
}

pub async fn pause(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    set_enabled(&app, tenant.id, &id, &headers, false).await
}

pub async fn resume(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    set_enabled(&app, tenant.id, &id, &headers, true).await
}

pub async fn start_run(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
    request: Request,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let stored = get_stored(&app, tenant.id, &id).await?;
    let json_declared = is_json(request.headers());
    let bytes = read_body(request, app.config().body_limit).await?;
    let body: Option<Value> = if bytes.iter().all(u8::is_ascii_whitespace) {
        None
    } else if !json_declared {
        return Err(ApiError::UnsupportedMediaType);
    } else {
        Some(parse_json(&bytes)?)
    };
    if !stored.automation.enabled {
        return Err(ApiError::AutomationPaused);
    }
    let context = match (&stored.automation.trigger, body) {
        (Trigger::Webhook { params }, body) => {
            contract::extract(params, &body.unwrap_or_else(|| json!({})))
                .map_err(ApiError::Contract)?
        }
        (_, Some(body)) => Map::from_iter([(fronta_automation::BODY_KEY.to_owned(), body)]),
        (_, None) => Map::new(),
    };
    let enqueued = app
        .inner()
        .dispatcher
        .enqueue(executor::run_request(&stored, RunTrigger::Manual, context))
        .await?;
    app.hub().run_changed(&app, tenant.id, enqueued.id()).await;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"runId": enqueued.id().to_string(), "status": "queued"})),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_fields_are_stripped_and_the_secret_taken_out() {
        let mut problems = Vec::new();
        let (value, secret) = split_body(
            json!({"id": "x", "webhookUrl": "u", "signed": false, "createdAt": "t",
                   "updatedAt": "t", "name": "n", "signingSecret": true}),
            "",
            &mut problems,
        );
        assert_eq!(value, json!({"name": "n"}), "only the definition is left");
        assert_eq!(
            secret,
            SecretRequest::Generate,
            "true asks for a new secret"
        );
        assert!(problems.is_empty(), "no problems: {problems:?}");
        split_body(
            json!({"signingSecret": "plain"}),
            "automations[1]",
            &mut problems,
        );
        assert_eq!(
            problems.first().map(|p| p.path.as_str()),
            Some("automations[1].signingSecret"),
            "a bad secret is a problem at its path"
        );
    }
}
