//! Per-tenant MCP servers, the ones `mcp/call-tool` steps name by `server`:
//! `POST /api/mcp-servers` creates one (201; 409 when the name is taken), `GET
//! /api/mcp-servers` lists them, `GET/PUT/DELETE /api/mcp-servers/{name}` reads, creates
//! or replaces whole, removes. Header values may hold `{{secrets.<name>}}` references,
//! never values; they are answered as stored.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use fronta_automation::mcp::{self, McpServer, McpTransport};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::App;
use crate::auth::TenantAuth;
use crate::error::ApiError;
use crate::extract::JsonBody;

const WHAT: &str = "MCP server";

/// The body of `POST` (name required) and `PUT` (name optional; if given, the path's).
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerBody {
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]{1,64}$"))]
    name: Option<String>,
    transport: McpTransport,
    timeout_sec: Option<u64>,
}

fn view(server: &McpServer) -> Value {
    serde_json::to_value(server).unwrap_or(Value::Null)
}

fn checked(name: String, body: McpServerBody) -> Result<McpServer, ApiError> {
    let server = McpServer {
        name,
        transport: body.transport,
        timeout_sec: body.timeout_sec.unwrap_or(mcp::DEFAULT_TIMEOUT_SEC),
    };
    let problems = server.problems();
    if !problems.is_empty() {
        return Err(ApiError::BadRequest {
            code: "invalid_mcp_server",
            message: problems.join("; "),
        });
    }
    Ok(server)
}

pub async fn mcp_server_create(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    JsonBody(mut body): JsonBody<McpServerBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Some(name) = body.name.take() else {
        return Err(ApiError::BadRequest {
            code: "invalid_mcp_server",
            message: "\"name\" is required".to_owned(),
        });
    };
    fronta_engine::audit::created(&name);
    let server = checked(name, body)?;
    let existing = app
        .mcp_servers()
        .mcp_server_get(tenant.id, &server.name)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    if existing.is_some() {
        return Err(ApiError::Conflict {
            code: "mcp_server_exists",
            message: format!(
                "an MCP server named {:?} exists: PUT /api/mcp-servers/{} replaces it",
                server.name, server.name
            ),
        });
    }
    let stored = app
        .mcp_servers()
        .mcp_server_put(tenant.id, server)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    tracing::info!(tenant = %tenant.id, name = %stored.name, "MCP server created");
    Ok((StatusCode::CREATED, Json(view(&stored))))
}

pub async fn mcp_server_put(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(name): Path<String>,
    JsonBody(mut body): JsonBody<McpServerBody>,
) -> Result<Json<Value>, ApiError> {
    if let Some(given) = body.name.take()
        && given != name
    {
        return Err(ApiError::BadRequest {
            code: "invalid_mcp_server",
            message: format!("\"name\" {given:?} differs from the path's {name:?}"),
        });
    }
    let server = checked(name, body)?;
    let stored = app
        .mcp_servers()
        .mcp_server_put(tenant.id, server)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    tracing::info!(tenant = %tenant.id, name = %stored.name, "MCP server stored");
    Ok(Json(view(&stored)))
}

pub async fn mcp_server_list(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
) -> Result<Json<Value>, ApiError> {
    let list = app
        .mcp_servers()
        .mcp_server_list(tenant.id)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    // A tenant has few servers: one page, in the list shape of every other route.
    Ok(Json(
        json!({"items": list.iter().map(view).collect::<Vec<_>>(), "nextCursor": null}),
    ))
}

pub async fn mcp_server_get(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if mcp::check_name(&name).is_err() {
        return Err(ApiError::NotFound(WHAT));
    }
    let server = app
        .mcp_servers()
        .mcp_server_get(tenant.id, &name)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?
        .ok_or(ApiError::NotFound(WHAT))?;
    Ok(Json(view(&server)))
}

pub async fn mcp_server_delete(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if mcp::check_name(&name).is_err() {
        return Err(ApiError::NotFound(WHAT));
    }
    app.mcp_servers()
        .mcp_server_delete(tenant.id, &name)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    tracing::info!(tenant = %tenant.id, name, "MCP server deleted");
    Ok(StatusCode::NO_CONTENT)
}
