//! Per-tenant secrets: `PUT /api/secrets/{name}` seals and stores a value (204),
//! `GET /api/secrets` lists names with `updatedAt` and `keyVersion`, `DELETE
//! /api/secrets/{name}` removes one (204). A value is never answered and never logged:
//! the body is read into the cipher and dropped.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use fronta_automation::secrets::{self, SecretInfo};
use serde::Deserialize;

use crate::app::App;
use crate::auth::TenantAuth;
use crate::error::ApiError;
use crate::extract::JsonBody;

#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretBody {
    value: String,
}

/// A secret as listed: never its value.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretView {
    pub name: String,
    pub key_version: u32,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

fn view(info: &SecretInfo) -> SecretView {
    SecretView {
        name: info.name.clone(),
        key_version: info.key_version,
        updated_at: info.updated_at,
    }
}

fn name_of(name: &str) -> Result<(), ApiError> {
    secrets::check_name(name).map_err(|message| ApiError::BadRequest {
        code: "invalid_secret_name",
        message,
    })
}

pub async fn secret_put(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<SecretBody>,
) -> Result<StatusCode, ApiError> {
    name_of(&name)?;
    secrets::check_value(&body.value).map_err(|message| ApiError::BadRequest {
        code: "invalid_secret_value",
        message,
    })?;
    let Some(cipher) = app.secret_cipher() else {
        tracing::warn!(tenant = %tenant.id, name, "secret refused: no secret key is configured");
        return Err(ApiError::Conflict {
            code: "secrets_not_configured",
            message: secrets::SecretError::NoKey.to_string(),
        });
    };
    let sealed = cipher.seal(tenant.id, &name, &body.value).map_err(|err| {
        tracing::error!(tenant = %tenant.id, name, error = %err, "a secret could not be sealed");
        ApiError::Internal
    })?;
    drop(body);
    let info = app
        .secrets()
        .secret_put(tenant.id, &name, sealed)
        .await
        .map_err(|err| ApiError::desk(err, "secret"))?;
    tracing::info!(tenant = %tenant.id, name, key_version = info.key_version, "secret stored");
    Ok(StatusCode::NO_CONTENT)
}

pub async fn secret_list(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
) -> Result<Json<crate::pagination::Page<SecretView>>, ApiError> {
    let list = app
        .secrets()
        .secret_list(tenant.id)
        .await
        .map_err(|err| ApiError::desk(err, "secret"))?;
    // A tenant has few secrets: one page, in the list shape of every other route.
    Ok(Json(crate::pagination::Page {
        items: list.iter().map(view).collect(),
        next_cursor: None,
    }))
}

pub async fn secret_delete(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if secrets::check_name(&name).is_err() {
        return Err(ApiError::NotFound("secret"));
    }
    app.secrets()
        .secret_delete(tenant.id, &name)
        .await
        .map_err(|err| ApiError::desk(err, "secret"))?;
    tracing::info!(tenant = %tenant.id, name, "secret deleted");
    Ok(StatusCode::NO_CONTENT)
}
