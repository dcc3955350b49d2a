//! Admin routes (the admin token only): tenants — created with a token shown once — and
//! incidents of every tenant *with* their `detail`.
//!
//! Left out: tenant deletion and token rotation (no port for them yet).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use fronta_desk::IncidentId;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::App;
use crate::auth::AdminAuth;
use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams};
use crate::pagination::{Order, Page, PageParams, page_by_id};
use crate::routes::parse_id;
use crate::wire::{admin_incident_view, tenant_view};

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    #[schemars(length(min = 1, max = 200), regex(pattern = r"\S"))]
    name: String,
}

pub async fn tenant_create(
    _: AdminAuth,
    State(app): State<App>,
    JsonBody(body): JsonBody<NewTenant>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    fronta_engine::audit::detail(format!("{:?}", body.name));
    let (tenant, token) = app.desk().tenant_create(&body.name).await?;
    tracing::info!(tenant = %tenant.id, "tenant created");
    Ok((
        StatusCode::CREATED,
        Json(crate::wire::tenant_answer(&tenant, Some(token))),
    ))
}

pub async fn tenants(
    _: AdminAuth,
    State(app): State<App>,
    QueryParams(page): QueryParams<PageParams>,
) -> Result<Json<Page<Value>>, ApiError> {
    let tenants = app.desk().tenant_list().await?;
    let page = page_by_id(
        tenants,
        |tenant| tenant.id.0,
        Order::OldestFirst,
        &page,
        app.config(),
        |tenant| tenant_view(&tenant),
    )?;
    Ok(Json(page))
}

pub async fn incidents(
    _: AdminAuth,
    State(app): State<App>,
    QueryParams(page): QueryParams<PageParams>,
) -> Result<Json<Page<Value>>, ApiError> {
    let incidents = app.desk().incident_list(None).await?;
    let page = page_by_id(
        incidents,
        |incident| incident.id.0,
        Order::NewestFirst,
        &page,
        app.config(),
        |incident| admin_incident_view(&incident),
    )?;
    Ok(Json(page))
}

pub async fn incident(
    _: AdminAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: IncidentId = parse_id(&id, "incident")?;
    let incident = app
        .desk()
        .incident_get(None, id)
        .await
        .map_err(|err| ApiError::desk(err, "incident"))?;
    Ok(Json(admin_incident_view(&incident)))
}

/// A retention as the API reads and writes it, per status: seconds (a number), `"off"`
/// (kept forever), or — on the way in — a duration such as `"7d"`; `null` in `own`: the
/// operator's.
fn keep_view(keep: Option<std::time::Duration>) -> Value {
    keep.map_or_else(|| json!("off"), |kept| json!(kept.as_secs()))
}

fn own_view(keep: Option<fronta_desk::Keep>) -> Value {
    match keep {
        None => Value::Null,
        Some(fronta_desk::Keep::Forever) => json!("off"),
        Some(fronta_desk::Keep::Secs(secs)) => json!(secs),
    }
}

fn retention_view(
    tenant: fronta_desk::TenantId,
    own: &fronta_desk::TenantRetention,
    operator: &fronta_engine::retention::Retention,
) -> Value {
    let effective = fronta_automation::retention::narrowed(operator, own).unwrap_or(*operator);
    let view = |retention: &fronta_engine::retention::Retention| {
        json!({
            "completed": keep_view(retention.completed),
            "cancelled": keep_view(retention.cancelled),
            "failed": keep_view(retention.failed),
        })
    };
    json!({
        "tenant": tenant.to_string(),
        "own": {
            "completed": own_view(own.completed),
            "cancelled": own_view(own.cancelled),
            "failed": own_view(own.failed),
        },
        "effective": view(&effective),
        "operator": view(operator),
    })
}

/// The tenant `id`, or the 404 of an unknown one.
async fn tenant_of(app: &App, id: &str) -> Result<fronta_desk::TenantId, ApiError> {
    let id: fronta_desk::TenantId = parse_id(id, "tenant")?;
    let tenants = app.desk().tenant_list().await?;
    tenants
        .iter()
        .any(|tenant| tenant.id == id)
        .then_some(id)
        .ok_or(ApiError::NotFound("tenant"))
}

/// `GET /api/admin/tenants/{id}/retention`: the tenant's own retention, what applies, and
/// the operator's maximum.
pub async fn retention(
    _: AdminAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant_of(&app, &id).await?;
    let own = app
        .desk()
        .tenant_retentions()
        .await?
        .into_iter()
        .find_map(|(found, own)| (found == tenant).then_some(own))
        .unwrap_or_default();
    Ok(Json(retention_view(tenant, &own, &app.config().retention)))
}

/// One status of a `PUT …/retention` body.
fn keep_of(what: &str, value: &Value) -> Result<Option<fronta_desk::Keep>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) if matches!(text.trim(), "off" | "forever") => {
            Ok(Some(fronta_desk::Keep::Forever))
        }
        Value::String(text) => humantime::parse_duration(text.trim())
            .map(|kept| Some(fronta_desk::Keep::Secs(kept.as_secs())))
            .map_err(|err| {
                format!("{what}: {text:?} is not a duration ({err}; try 7d, 36h, or off)")
            }),
        Value::Number(number) => number
            .as_u64()
            .map(|secs| Some(fronta_desk::Keep::Secs(secs)))
            .ok_or_else(|| format!("{what}: {number} is not a whole number of seconds")),
        other => Err(format!(
            "{what}: a number of seconds, a duration (\"7d\"), \"off\" or null, not {other}"
        )),
    }
}

/// The body of `PUT /api/admin/tenants/{id}/retention`: each of seconds (an integer), a
/// duration (`"7d"`), `"off"` or null.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionBody {
    #[serde(default)]
    #[schemars(with = "Option<RetentionKeep>")]
    completed: Option<Value>,
    #[serde(default)]
    #[schemars(with = "Option<RetentionKeep>")]
    cancelled: Option<Value>,
    #[serde(default)]
    #[schemars(with = "Option<RetentionKeep>")]
    failed: Option<Value>,
}

/// How long one status is kept: seconds, or a duration (`"7d"`) or `"off"`.
#[derive(schemars::JsonSchema)]
#[schemars(untagged)]
#[allow(dead_code)] // only its schema is used: `keep_of` reads the value
enum RetentionKeep {
    Seconds(u64),
    Text(String),
}

/// `PUT /api/admin/tenants/{id}/retention` `{"completed", "cancelled", "failed"}`: each
/// seconds, a duration (`"7d"`), `"off"` (forever) or null (the operator's); never longer
/// than the operator keeps that status (400 naming the bound). All null: the operator's.
pub async fn retention_set(
    _: AdminAuth,
    State(app): State<App>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RetentionBody>,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant_of(&app, &id).await?;
    let field = |name: &str| {
        let value = match name {
            "completed" => &body.completed,
            "cancelled" => &body.cancelled,
            _ => &body.failed,
        };
        keep_of(name, value.as_ref().unwrap_or(&Value::Null))
    };
    let own = fronta_desk::TenantRetention {
        completed: field("completed").map_err(ApiError::bad_request)?,
        cancelled: field("cancelled").map_err(ApiError::bad_request)?,
        failed: field("failed").map_err(ApiError::bad_request)?,
    };
    let operator = app.config().retention;
    fronta_automation::retention::narrowed(&operator, &own).map_err(ApiError::bad_request)?;
    app.desk()
        .tenant_retention_set(tenant, own)
        .await
        .map_err(|err| ApiError::desk(err, "tenant"))?;
    tracing::info!(%tenant, ?own, "a tenant's own retention");
    Ok(Json(retention_view(tenant, &own, &operator)))
}
