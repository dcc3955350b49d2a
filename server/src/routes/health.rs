//! `GET /healthz` (the process answers) and `GET /readyz` (the run store can take writes
//! and answer reads, within `ready_timeout`: `RunStore::store_ready`, which proves the
//! write path — on SQLite a job through the writer thread, so a writer that has ended
//! makes the server not ready — and costs no scan on any store).
//!
//! Left out: `/metrics` (another part of the server).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::app::App;

/// The answer of both probes: `ok` (alive) or `ready`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Health {
    pub status: &'static str,
}

pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

pub async fn readyz(State(app): State<App>) -> Response {
    let probe = app.runs().store_ready();
    match tokio::time::timeout(app.config().ready_timeout, probe).await {
        Ok(Ok(())) => Json(Health { status: "ready" }).into_response(),
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "readiness: the run store did not answer");
            not_ready()
        }
        Err(_) => {
            tracing::warn!(timeout = ?app.config().ready_timeout, "readiness: the run store timed out");
            not_ready()
        }
    }
}

fn not_ready() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"error": {"code": "unavailable", "message": "the store cannot serve writes and reads right now (see the server log)"}})),
    )
        .into_response()
}
