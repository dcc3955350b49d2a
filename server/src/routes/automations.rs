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
//!   `true` to have one generated — then the answer shows it, once. A `PUT` naming another
//!   secret is a 422, never silently ignored: a secret changes by
//!   `POST …/rotate-signing-secret {"overlapSec", "signingSecret"?}` (the old one keeps
//!   verifying for the overlap; the new one is shown once).
//! - `POST …/rotate-webhook {"graceSec"}` gives a new webhook URL; the old one keeps
//!   working for the grace (0 to 7 days, default 0) and is listed in `previousWebhooks`
//!   until then (`fronta_automation::rotation`). A non-webhook automation is a 409.
//! - Manual runs (`POST /api/automations/{id}/runs`, trigger `manual`): an optional JSON
//!   body becomes `_body`; for a webhook automation the body is also read through its
//!   contract, so templates see the same parameters as a webhook run (400 when it does
//!   not fit). A paused automation answers 409 `automation_paused`.
//!
//! - `enabled` changes only by pause/resume or an explicit `enabled` in the body: a `PUT`
//!   without it keeps the automation paused or running as it is.
//! - Pause takes an optional body `{"inFlight": "finish" | "hold"}` (default `finish`):
//!   runs in flight finish on their version, or wait at their next step until resumed.
//!   A pause never fails a run.
//!
//! Versions (see `fronta_automation::versions`): `GET …/versions` (newest first, paged by
//! `?limit=&cursor=`), `GET …/versions/{n}` (with its definition),
//! `GET …/versions/{n}/diff?against={m}` (from `m` to `n`; `against` defaults to
//! `n - 1`), `POST …/rollback {"version": n}` (a new version with `n`'s definition,
//! validated against today's ticket types like any save; 422 when it no longer fits).
//! Unknown versions answer 404 `not_found`; a deleted automation's history too.
//!
//! Dry runs are `crate::routes::dry_runs`.

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use fronta_automation::executor;
use fronta_automation::refs;
use fronta_automation::rotation;
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
use crate::wire::{AUTOMATION_READ_ONLY, automation_view, version_view};
use fronta_automation::store::InFlight;
use fronta_automation::versions;
use serde::Deserialize;

/// What a body asked about the signing secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SecretRequest {
    Absent,
    Given(String),
    Generate,
}

/// The tenant's ticket types, groups and members, as validation needs them.
pub(crate) async fn validation_context(
    app: &App,
    tenant: TenantId,
) -> Result<ValidationContext, ApiError> {
    let types = app.desk().ticket_type_list(tenant).await?;
    let mut context = app
        .config()
        .validation(types.into_iter().map(|t| (t.name, t.statuses)).collect());
    for group in app.desk().group_list(tenant).await? {
        let members = app.desk().member_list(tenant, group.id).await?;
        context.groups.insert(
            group.name,
            members.into_iter().map(|member| member.name).collect(),
        );
    }
    Ok(context)
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

/// A save of `existing` whose body (`value`) has no `enabled` keeps the state it has:
/// only pause, resume or an explicit `enabled` change it.
pub(crate) fn keep_enabled(
    value: &Value,
    automation: &mut Automation,
    existing: &StoredAutomation,
) {
    if value.get("enabled").is_none() {
        automation.enabled = existing.automation.enabled;
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
            "a save cannot change the signing secret; rotate it with \
             POST /api/automations/{id}/rotate-signing-secret",
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
    fronta_engine::audit::detail(format!("{:?}", automation.name));
    let secret_value = secret_for_create(&secret);
    let stored = app
        .automations()
        .automation_create(
            tenant.id,
            automation,
            secret_value.clone(),
            &versions::author(),
        )
        .await?;
    app.schedule_now(&stored.automation);
    let mut view = automation_view(&stored, &base_url(app.config(), &headers));
    if secret == SecretRequest::Generate
        && let (Value::Object(map), Some(secret)) = (&mut view, secret_value)
    {
        map.insert("signingSecret".into(), json!(secret));
    }
    with_warnings(&mut view, &stored);
    Ok((StatusCode::CREATED, Json(view)))
}

/// A save's answer carries `warnings` beside the saved automation: what was accepted
/// but may not do what it reads as (`fronta_automation::validate::warnings`).
fn with_warnings(view: &mut Value, stored: &StoredAutomation) {
    if let Value::Object(map) = view {
        map.insert(
            "warnings".into(),
            json!(fronta_automation::validate::warnings(&stored.automation)),
        );
    }
}

/// `POST /api/automations/validate`: the checks of a save, nothing written. Always 200
/// for a JSON body: `{"valid", "problems": [{path, message}], "warnings": [...]}` — the
/// problems a save would answer 422 with, at their paths (an editor shows them as the
/// definition is typed), and the warnings a save would answer beside the automation. A
/// valid schedule also gets `schedule: {describe, next: [5 instants]}`: how the cron
/// reads and when it fires next.
pub async fn validate_only(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let mut problems = Vec::new();
    let (value, _secret) = split_body(body, "", &mut problems);
    let context = validation_context(&app, tenant.id).await?;
    let automation = check(&value, &context, "", &mut problems);
    let warnings = automation
        .as_ref()
        .map(fronta_automation::validate::warnings)
        .unwrap_or_default();
    let mut answer = json!({
        "valid": problems.is_empty(),
        "problems": problems,
        "warnings": warnings,
    });
    if let Some(Automation {
        trigger: Trigger::Schedule { cron, timezone },
        ..
    }) = &automation
        && let Ok(schedule) =
            fronta_automation::schedule::CronSchedule::parse(cron, timezone.as_deref())
    {
        answer["schedule"] = json!({
            "describe": schedule.describe(),
            "next": schedule
                .next_ticks(chrono::Utc::now(), NEXT_TICKS_SHOWN)
                .iter()
                .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                .collect::<Vec<_>>(),
        });
    }
    Ok(Json(answer))
}

/// `GET /api/catalogue`: the ops with their inputs and outputs, and the vocabulary of
/// triggers and conditions (`fronta_automation::catalogue::as_json`) — what the editor's
/// form offers. The same for every tenant; a token is still needed, like every `/api/`.
pub async fn catalogue(TenantAuth(_tenant): TenantAuth) -> Json<Value> {
    Json(fronta_automation::catalogue::as_json())
}

/// How many coming ticks of a schedule the validate call shows.
pub const NEXT_TICKS_SHOWN: usize = 5;

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

pub(crate) async fn get_stored(
    app: &App,
    tenant: TenantId,
    id: &str,
) -> Result<StoredAutomation, ApiError> {
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
    let mut automation = match automation {
        Some(automation) if problems.is_empty() => automation,
        _ => return Err(ApiError::InvalidAutomation(problems)),
    };
    keep_enabled(&value, &mut automation, &existing);
    fronta_engine::audit::detail(format!("{:?}", automation.name));
    let stored = app
        .automations()
        .automation_update(tenant.id, existing.id, automation, &versions::author())
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    app.schedule_now(&stored.automation);
    let mut view = automation_view(&stored, &base_url(app.config(), &headers));
    with_warnings(&mut view, &stored);
    Ok(Json(view))
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
    in_flight: InFlight,
) -> Result<Json<Value>, ApiError> {
    let id: AutomationId = parse_id(id, "automation")?;
    let stored = app
        .automations()
        .automation_set_enabled(tenant, id, enabled, in_flight)
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    // A resume plans the next tick now; a pause cancels the pending one now.
    app.schedule_now(&stored.automation);
    tracing::info!(automation = %stored.id, enabled, in_flight = stored.in_flight.as_str(), "automation switched");
    Ok(Json(automation_view(
        &stored,
        &base_url(app.config(), headers),
    )))
}

/// The optional body of a pause.
#[derive(schemars::JsonSchema, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PauseBody {
    #[serde(default)]
    in_flight: InFlight,
}

pub async fn pause(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let body: PauseBody = optional_body(request, &app).await?.unwrap_or_default();
    set_enabled(&app, tenant.id, &id, &headers, false, body.in_flight).await
}

/// An optional JSON body: none (empty) is `None`; a body must be JSON of type `T` (400
/// naming what does not fit).
pub(crate) async fn optional_body<T: serde::de::DeserializeOwned + schemars::JsonSchema>(
    request: Request,
    app: &App,
) -> Result<Option<T>, ApiError> {
    let json_declared = is_json(request.headers());
    let bytes = read_body(request, app.config().body_limit).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    if !json_declared {
        return Err(ApiError::UnsupportedMediaType);
    }
    crate::extract::object_body(&bytes, |err| {
        ApiError::bad_request(format!("the body does not fit: {err}"))
    })
    .map(Some)
}

/// A version number in a path: 1 or more.
fn version_number(text: &str) -> Result<u32, ApiError> {
    text.parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| ApiError::bad_request(format!("{text:?} is not a version number (1, 2, …)")))
}

pub(crate) async fn version_of(
    app: &App,
    stored: &StoredAutomation,
    number: u32,
) -> Result<versions::Version, ApiError> {
    let mut version = app
        .automations()
        .automation_version(stored.tenant, stored.id, number)
        .await
        .map_err(|err| ApiError::desk(err, "automation version"))?;
    let names = CurrentNames::read(app, stored.tenant).await?;
    names.apply(&mut version);
    Ok(version)
}

/// The tenant's groups and ticket types by id, to show a saved version under the names
/// what it names has now ([`fronta_automation::refs::resolve`]).
struct CurrentNames(std::collections::HashMap<(refs::Kind, uuid::Uuid), String>);

impl CurrentNames {
    async fn read(app: &App, tenant: fronta_desk::TenantId) -> Result<Self, ApiError> {
        let mut names = std::collections::HashMap::new();
        for group in app.desk().group_list(tenant).await? {
            names.insert((refs::Kind::Group, group.id.0), group.name);
        }
        for found in app.desk().ticket_type_list(tenant).await? {
            names.insert((refs::Kind::TicketType, found.id.0), found.name);
        }
        Ok(CurrentNames(names))
    }

    fn apply(&self, version: &mut versions::Version) {
        version.definition = refs::resolve(&version.definition, &version.refs, |kind, id| {
            self.0.get(&(kind, id)).cloned()
        });
    }
}

pub async fn versions_list(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
    QueryParams(page): QueryParams<PageParams>,
) -> Result<Json<Page<Value>>, ApiError> {
    let stored = get_stored(&app, tenant.id, &id).await?;
    let size = page.size(app.config())?;
    let before = match page.cursor.as_deref().filter(|cursor| !cursor.is_empty()) {
        None => None,
        Some(cursor) => Some(cursor.parse::<u32>().map_err(|_| ApiError::BadRequest {
            code: "invalid_cursor",
            message: "the cursor is not one this list gave out".into(),
        })?),
    };
    let limit = u32::try_from(size).unwrap_or(u32::MAX);
    let mut found = app
        .automations()
        .automation_versions(tenant.id, stored.id, before, limit.saturating_add(1))
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    let more = found.len() > size;
    found.truncate(size);
    let names = CurrentNames::read(&app, tenant.id).await?;
    for version in &mut found {
        names.apply(version);
    }
    let next_cursor = more
        .then(|| found.last().map(|last| last.version.to_string()))
        .flatten();
    Ok(Json(Page {
        items: found
            .iter()
            .map(|version| version_view(&stored, version, false))
            .collect(),
        next_cursor,
    }))
}

pub async fn version_get(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path((id, number)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let stored = get_stored(&app, tenant.id, &id).await?;
    let version = version_of(&app, &stored, version_number(&number)?).await?;
    Ok(Json(version_view(&stored, &version, true)))
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct DiffQuery {
    /// The version compared with (default: the one before).
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,8}$"))]
    against: Option<String>,
}

impl crate::extract::QueryKeys for DiffQuery {
    const KEYS: &'static [&'static str] = &["against"];
}

pub async fn version_diff(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path((id, number)): Path<(String, String)>,
    QueryParams(query): QueryParams<DiffQuery>,
) -> Result<Json<Value>, ApiError> {
    let stored = get_stored(&app, tenant.id, &id).await?;
    let number = version_number(&number)?;
    let against = match query.against.as_deref() {
        Some(text) => version_number(text)?,
        None if number > 1 => number - 1,
        None => {
            return Err(ApiError::bad_request(
                "version 1 has no version before it: name one with ?against=",
            ));
        }
    };
    let after = version_of(&app, &stored, number).await?;
    let before = version_of(&app, &stored, against).await?;
    let changes = versions::diff(&before.definition, &after.definition);
    Ok(Json(json!({
        "automationId": stored.id.to_string(),
        "version": number,
        "against": against,
        "changes": changes,
    })))
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    version: u32,
}

pub async fn rollback(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RollbackBody>,
) -> Result<Json<Value>, ApiError> {
    let stored = get_stored(&app, tenant.id, &id).await?;
    let target = version_of(&app, &stored, version_number(&body.version.to_string())?).await?;
    let mut automation = target.definition;
    automation.enabled = stored.automation.enabled;
    let context = validation_context(&app, tenant.id).await?;
    let problems = validate(&automation, &context);
    if !problems.is_empty() {
        return Err(ApiError::InvalidAutomation(problems));
    }
    let saved = app
        .automations()
        .automation_update(tenant.id, stored.id, automation, &versions::author())
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    app.schedule_now(&saved.automation);
    tracing::info!(automation = %saved.id, to = body.version, current = saved.current_version, "automation rolled back");
    Ok(Json(automation_view(
        &saved,
        &base_url(app.config(), &headers),
    )))
}

pub async fn resume(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    set_enabled(&app, tenant.id, &id, &headers, true, InFlight::Finish).await
}

/// The optional body of `POST /api/automations/{id}/rotate-webhook`: how long the old
/// URL keeps working (seconds, 0 to 7 days; default 0: it stops at once).
#[derive(schemars::JsonSchema, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RotateWebhookBody {
    #[serde(default)]
    grace_sec: Option<i64>,
}

/// `POST /api/automations/{id}/rotate-webhook`: a new webhook URL; the old one answers
/// for `graceSec` more seconds and is listed in `previousWebhooks` until then.
pub async fn rotate_webhook(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let body: RotateWebhookBody = optional_body(request, &app).await?.unwrap_or_default();
    let grace = rotation::check_grace("graceSec", body.grace_sec)?;
    let id: AutomationId = parse_id(&id, "automation")?;
    let stored = app
        .automations()
        .automation_rotate_webhook(tenant.id, id, grace)
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    tracing::info!(automation = %stored.id, grace_sec = grace.num_seconds(), "webhook URL rotated");
    Ok(Json(automation_view(
        &stored,
        &base_url(app.config(), &headers),
    )))
}

/// The optional body of `POST /api/automations/{id}/rotate-signing-secret`: how long the
/// old secret keeps verifying (seconds, 0 to 7 days; default 0), and the new secret
/// (`whsec_<base64>`; default: one is generated).
#[derive(schemars::JsonSchema, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RotateSigningSecretBody {
    #[serde(default)]
    overlap_sec: Option<i64>,
    #[serde(default)]
    signing_secret: Option<String>,
}

/// `POST /api/automations/{id}/rotate-signing-secret`: a new signing secret, shown once
/// in the answer (`signingSecret`); the old one verifies for `overlapSec` more seconds.
pub async fn rotate_signing_secret(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let body: RotateSigningSecretBody = optional_body(request, &app).await?.unwrap_or_default();
    let overlap = rotation::check_grace("overlapSec", body.overlap_sec)?;
    let secret = match body.signing_secret {
        Some(secret) if secret_key(&secret).is_some() => secret,
        Some(_) => {
            return Err(ApiError::bad_request(
                "signingSecret must be \"whsec_<base64 of 16 to 128 bytes>\", or absent to have one generated",
            ));
        }
        None => generate_secret(),
    };
    let id: AutomationId = parse_id(&id, "automation")?;
    let stored = app
        .automations()
        .automation_rotate_signing_secret(tenant.id, id, overlap, secret.clone())
        .await
        .map_err(|err| ApiError::desk(err, "automation"))?;
    tracing::info!(automation = %stored.id, overlap_sec = overlap.num_seconds(), "signing secret rotated");
    let mut view = automation_view(&stored, &base_url(app.config(), &headers));
    if let Value::Object(map) = &mut view {
        map.insert("signingSecret".into(), json!(secret));
    }
    Ok(Json(view))
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
