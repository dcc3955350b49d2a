//! `GET /api/services`: the caller's services as the per-(tenant, service) limits see
//! them — each with its breaker's state (`closed`, `open`, `half_open`), its run of
//! retryable failures, its calls in flight and, while open, when it lets a probe
//! through (`retryAt`). A service appears once a connector step has called it.

use axum::Json;
use axum::extract::State;
use fronta_automation::service_limits::ServiceStatus;
use serde_json::{Value, json};

use crate::app::App;
use crate::auth::TenantAuth;
use crate::error::ApiError;

fn view(status: &ServiceStatus) -> Value {
    json!({
        "service": status.service,
        "breaker": status.breaker.state.as_str(),
        "failures": status.breaker.failures,
        "inFlight": status.in_flight,
        "openedAt": status.breaker.opened_at,
        "retryAt": status.breaker.retry_at,
    })
}

pub async fn service_list(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
) -> Result<Json<Value>, ApiError> {
    let list = app
        .limits()
        .service_list(tenant.id)
        .await
        .map_err(|err| ApiError::desk(err, "service"))?;
    // A tenant calls few services: one page, in the list shape of every other route.
    Ok(Json(
        json!({"items": list.iter().map(view).collect::<Vec<_>>(), "nextCursor": null}),
    ))
}
