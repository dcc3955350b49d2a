//! The route table of API.md and the layers around it: the body limit (axum's
//! `DefaultBodyLimit`, so every body read stops at the configured size) and the trace
//! layer (one span per request, path redacted: webhook tokens never reach a log).
//!
//! Why not tower-http's `RequestBodyLimitLayer`: it answers an over-long
//! `Content-Length` itself, with a plain-text 413 outside the API's error shape.
//! `DefaultBodyLimit` only bounds the reads, and `crate::extract` turns both cases
//! (declared and streamed) into our JSON 413.
//!
//! Unknown routes answer 404 and wrong methods 405, both in the API's error shape.
//!
//! Left out: `GET /api/stream` (SSE) and `GET /metrics` — other parts of the server.

pub mod admin;
pub mod apply;
pub mod automations;
pub mod desk;
pub mod health;
pub mod runs;
pub mod webhook;

use std::str::FromStr;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::app::App;
use crate::error::ApiError;

/// An id in a path, or the 404 of `what` (an id that cannot exist is unknown like any).
pub(crate) fn parse_id<T: FromStr>(text: &str, what: &'static str) -> Result<T, ApiError> {
    text.parse().map_err(|_| ApiError::NotFound(what))
}

/// The path as it may be logged: a webhook token is a secret.
pub fn redacted_path(path: &str) -> &str {
    if path.starts_with("/webhook/") {
        "/webhook/{token}"
    } else {
        path
    }
}

/// Every route of API.md this crate serves, with its layers.
pub fn router(app: App) -> Router {
    let body_limit = app.config().body_limit;
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route(
            "/webhook/{token}",
            get(webhook::help).post(webhook::receive),
        )
        .route(
            "/api/admin/tenants",
            get(admin::tenants).post(admin::tenant_create),
        )
        .route("/api/admin/incidents", get(admin::incidents))
        .route("/api/admin/incidents/{id}", get(admin::incident))
        .route("/api/groups", get(desk::groups).post(desk::group_create))
        .route(
            "/api/groups/{id}",
            get(desk::group)
                .patch(desk::group_rename)
                .delete(desk::group_delete),
        )
        .route(
            "/api/groups/{id}/members",
            get(desk::members).post(desk::member_add),
        )
        .route(
            "/api/groups/{id}/members/{member_id}",
            axum::routing::patch(desk::member_update).delete(desk::member_delete),
        )
        .route(
            "/api/ticket-types",
            get(desk::ticket_types).post(desk::ticket_type_create),
        )
        .route("/api/ticket-types/{id}", get(desk::ticket_type))
        .route(
            "/api/automations",
            get(automations::list).post(automations::create),
        )
        .route(
            "/api/automations/{id}",
            get(automations::get)
                .put(automations::replace)
                .delete(automations::delete),
        )
        .route("/api/automations/{id}/pause", post(automations::pause))
        .route("/api/automations/{id}/resume", post(automations::resume))
        .route("/api/automations/{id}/runs", post(automations::start_run))
        .route("/api/tickets", get(desk::tickets))
        .route(
            "/api/tickets/{id}",
            get(desk::ticket).patch(desk::ticket_change),
        )
        .route("/api/runs", get(runs::list))
        .route("/api/dashboard/runs", get(runs::list))
        .route("/api/runs/{id}", get(runs::get))
        .route("/api/runs/{id}/cancel", post(runs::cancel))
        .route("/api/runs/{id}/retry", post(runs::retry))
        .route("/api/incidents", get(desk::incidents))
        .route("/api/incidents/{id}", get(desk::incident))
        .route("/api/incidents/{id}/resolve", post(desk::incident_resolve))
        .route("/api/apply", post(apply::apply))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request<axum::body::Body>| {
                    tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %redacted_path(request.uri().path()),
                    )
                })
                .on_response(DefaultOnResponse::new().level(Level::DEBUG)),
        )
        .with_state(app)
}

async fn no_route() -> Response {
    ApiError::NotFound("route").into_response()
}

async fn wrong_method() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(serde_json::json!({"error": {
            "code": "method_not_allowed",
            "message": "this route does not take that method",
        }})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_paths_are_redacted_for_logs() {
        assert_eq!(
            redacted_path("/webhook/wh_secret123"),
            "/webhook/{token}",
            "the token is hidden"
        );
        assert_eq!(
            redacted_path("/api/runs"),
            "/api/runs",
            "other paths are kept"
        );
    }
}
