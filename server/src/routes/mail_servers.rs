//! Per-tenant mail servers, the ones `mail/send` steps name by `server`:
//! `POST /api/mail-servers` creates one (201; 409 when the name is taken), `GET
//! /api/mail-servers` lists them, `GET/PUT/DELETE /api/mail-servers/{name}` reads, creates
//! or replaces whole, removes. `security` defaults to `tls` and `port` to the security's
//! port; the password is a `{{secrets.<name>}}` reference, answered as stored. What is
//! wrong with a server (`MailServer::problems`, the host judged by the connectors' address
//! policy) is a 400 naming every problem.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use fronta_automation::mail::{MailSecurity, MailServer};
use fronta_automation::mcp;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::App;
use crate::auth::TenantAuth;
use crate::error::ApiError;
use crate::extract::JsonBody;

const WHAT: &str = "mail server";

/// The body of `POST` (name required) and `PUT` (name optional; if given, the path's).
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MailServerBody {
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]{1,64}$"))]
    name: Option<String>,
    host: String,
    port: Option<u16>,
    security: Option<MailSecurity>,
    user: Option<String>,
    password: Option<String>,
    from: String,
}

fn view(server: &MailServer) -> Value {
    serde_json::to_value(server).unwrap_or(Value::Null)
}

fn checked(app: &App, name: String, body: MailServerBody) -> Result<MailServer, ApiError> {
    let security = body.security.unwrap_or(MailSecurity::DEFAULT);
    let server = MailServer {
        name,
        host: body.host,
        port: body.port.unwrap_or(security.default_port()),
        security,
        user: body.user,
        password: body.password,
        from: body.from,
    };
    let problems = server.problems(app.hosts());
    if !problems.is_empty() {
        return Err(ApiError::BadRequest {
            code: "invalid_mail_server",
            message: problems.join("; "),
        });
    }
    Ok(server)
}

pub async fn mail_server_create(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    JsonBody(mut body): JsonBody<MailServerBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Some(name) = body.name.take() else {
        return Err(ApiError::BadRequest {
            code: "invalid_mail_server",
            message: "\"name\" is required".to_owned(),
        });
    };
    fronta_engine::audit::created(&name);
    let server = checked(&app, name, body)?;
    let existing = app
        .mail_servers()
        .mail_server_get(tenant.id, &server.name)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    if existing.is_some() {
        return Err(ApiError::Conflict {
            code: "mail_server_exists",
            message: format!(
                "a mail server named {:?} exists: PUT /api/mail-servers/{} replaces it",
                server.name, server.name
            ),
        });
    }
    let stored = app
        .mail_servers()
        .mail_server_put(tenant.id, server)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    tracing::info!(tenant = %tenant.id, name = %stored.name, "mail server created");
    Ok((StatusCode::CREATED, Json(view(&stored))))
}

pub async fn mail_server_put(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(name): Path<String>,
    JsonBody(mut body): JsonBody<MailServerBody>,
) -> Result<Json<Value>, ApiError> {
    if let Some(given) = body.name.take()
        && given != name
    {
        return Err(ApiError::BadRequest {
            code: "invalid_mail_server",
            message: format!("\"name\" {given:?} differs from the path's {name:?}"),
        });
    }
    let server = checked(&app, name, body)?;
    let stored = app
        .mail_servers()
        .mail_server_put(tenant.id, server)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    tracing::info!(tenant = %tenant.id, name = %stored.name, "mail server stored");
    Ok(Json(view(&stored)))
}

pub async fn mail_server_list(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
) -> Result<Json<Value>, ApiError> {
    let list = app
        .mail_servers()
        .mail_server_list(tenant.id)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    // A tenant has few servers: one page, in the list shape of every other route.
    Ok(Json(
        json!({"items": list.iter().map(view).collect::<Vec<_>>(), "nextCursor": null}),
    ))
}

pub async fn mail_server_get(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if mcp::check_name(&name).is_err() {
        return Err(ApiError::NotFound(WHAT));
    }
    let server = app
        .mail_servers()
        .mail_server_get(tenant.id, &name)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?
        .ok_or(ApiError::NotFound(WHAT))?;
    Ok(Json(view(&server)))
}

pub async fn mail_server_delete(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if mcp::check_name(&name).is_err() {
        return Err(ApiError::NotFound(WHAT));
    }
    app.mail_servers()
        .mail_server_delete(tenant.id, &name)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    tracing::info!(tenant = %tenant.id, name, "mail server deleted");
    Ok(StatusCode::NO_CONTENT)
}
