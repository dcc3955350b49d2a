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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    name: String,
}

pub async fn tenant_create(
    _: AdminAuth,
    State(app): State<App>,
    JsonBody(body): JsonBody<NewTenant>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (tenant, token) = app.desk().tenant_create(&body.name).await?;
    tracing::info!(tenant = %tenant.id, "tenant created");
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "id": tenant.id.to_string(),
            "name": tenant.name,
            "token": token,
            "createdAt": tenant.created_at,
        })),
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
