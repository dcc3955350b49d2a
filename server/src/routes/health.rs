//! `GET /healthz` (the process answers) and `GET /readyz` (the run store answers, within
//! `ready_timeout`: a primary-key read of a run that does not exist — cheap on every
//! store, unlike counting runs).
//!
//! Left out: `/metrics` (another part of the server).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fronta_engine::RunId;
use serde_json::json;

use crate::app::App;

pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

pub async fn readyz(State(app): State<App>) -> Response {
    let probe = app.runs().run_get(RunId(uuid::Uuid::nil()));
    match tokio::time::timeout(app.config().ready_timeout, probe).await {
        Ok(Ok(_)) => Json(json!({"status": "ready"})).into_response(),
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
        Json(json!({"error": {"code": "unavailable", "message": "the database is not answering"}})),
    )
        .into_response()
}
