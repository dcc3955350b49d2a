//! [`ApiError`]: every answer that is not a success, mapped to a status and API.md's body
//! `{"error": {"code": "snake_case", "message": "…", …}}` in one place.
//!
//! Internals (storage errors, engine errors, bugs) go to the log with their detail and
//! reach the client only as a generic message. A `NotFound` is built from the *route's*
//! resource name, never from a store's message, so an id of another tenant answers
//! byte-identically to an id that never existed.
//!
//! A 503 ([`ApiError::Unavailable`]: the database did not answer) always carries
//! `Retry-After` (whole seconds) and `retryAfter` in its body: the value is the server's
//! `unavailable_retry_after`, which an error built deep in a route does not know, so the
//! answer is marked ([`UnavailableAnswer`]) and the router's layer
//! ([`add_retry_after`]) writes the final answer with the configured wait. Any other 503
//! without the header (readiness) gets the header from the same layer.
//!
//! Left out: what a route does to get here (each route picks the variant).

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fronta_automation::{ContractError, Problem};
use fronta_desk::DeskError;
use fronta_engine::{EngineError, StoreError};
use serde_json::{Map, Value, json};

/// Everything a route can answer besides success.
#[derive(Debug)]
pub enum ApiError {
    /// 401: no token, or not one we know (`code`: `unauthorized` or `invalid_signature`).
    Unauthorized { code: &'static str, message: String },
    /// 403 `forbidden`: the token's role does not allow the route; says the role needed.
    Forbidden {
        needed: fronta_desk::access::Role,
        role: fronta_desk::access::Role,
    },
    /// 404 for an unknown id — and for an id of another tenant, with the same body.
    NotFound(&'static str),
    /// 409 `automation_paused`.
    AutomationPaused,
    /// 409 with a code of its own (`conflict`, `run_not_failed`, `run_finished`, …).
    Conflict { code: &'static str, message: String },
    /// 409 `in_use`: a group, ticket type or status still used, with `usedBy`.
    InUse {
        message: String,
        used_by: Vec<fronta_desk::UsedBy>,
    },
    /// 400: the request itself is malformed (`invalid_json`, `invalid_request`, …).
    BadRequest { code: &'static str, message: String },
    /// 400 `missing_parameter` / `invalid_parameter`: the webhook contract is not met.
    Contract(ContractError),
    /// 413: the body is over the configured limit.
    PayloadTooLarge { limit: usize },
    /// 415: the body is not JSON.
    UnsupportedMediaType,
    /// 422 `invalid_automation`, listing every problem.
    InvalidAutomation(Vec<Problem>),
    /// 422 `invalid_setup` (`POST /api/apply`), listing every problem.
    InvalidSetup(Vec<Problem>),
    /// 429 with `Retry-After` (whole seconds, at least 1).
    RateLimited { retry_after: Duration },
    /// 503 `service_waiting` with `Retry-After`: a limit in front of a third-party
    /// service (a full cap, an open circuit) refused the call for now; it was not made.
    ServiceWaiting {
        retry_after: Duration,
        message: String,
    },
    /// 503: the database did not answer; the request may be repeated.
    Unavailable,
    /// 500: a bug or an unexpected storage error; the detail is in the log only.
    Internal,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code: "invalid_request",
            message: message.into(),
        }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::Unauthorized {
            code: "unauthorized",
            message: message.into(),
        }
    }

    pub fn signature(message: impl Into<String>) -> Self {
        ApiError::Unauthorized {
            code: "invalid_signature",
            message: message.into(),
        }
    }

    /// A desk or automation store error on a route whose resource is `what`: `NotFound`
    /// becomes this route's 404 (whatever the store called it), the rest map by kind.
    pub fn desk(error: DeskError, what: &'static str) -> Self {
        match error {
            DeskError::NotFound(_) => ApiError::NotFound(what),
            other => ApiError::from(other),
        }
    }

    /// A run store error on a route about the run `what`.
    pub fn store(error: StoreError, what: &'static str) -> Self {
        match error {
            StoreError::NotFound => ApiError::NotFound(what),
            other => ApiError::from(other),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::AutomationPaused | ApiError::Conflict { .. } | ApiError::InUse { .. } => {
                StatusCode::CONFLICT
            }
            ApiError::BadRequest { .. } | ApiError::Contract(_) => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::InvalidAutomation(_) | ApiError::InvalidSetup(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable | ApiError::ServiceWaiting { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `error` object of the body.
    pub fn body(&self) -> Value {
        let mut error = Map::new();
        let (code, message): (&str, String) = match self {
            ApiError::Unauthorized { code, message } => (code, message.clone()),
            ApiError::Forbidden { needed, role } => {
                error.insert("needed".into(), json!(needed));
                error.insert("role".into(), json!(role));
                (
                    "forbidden",
                    format!(
                        "this needs a token with the {needed} role; this token is a {role} token"
                    ),
                )
            }
            ApiError::NotFound(what) => ("not_found", format!("{what} not found")),
            ApiError::AutomationPaused => (
                "automation_paused",
                "the automation is paused: it starts no runs until it is resumed".into(),
            ),
            ApiError::Conflict { code, message } | ApiError::BadRequest { code, message } => {
                (code, message.clone())
            }
            ApiError::InUse { message, used_by } => {
                error.insert("usedBy".into(), json!(used_by));
                ("in_use", message.clone())
            }
            ApiError::Contract(contract) => {
                // `code`, `parameter`, `path` (and `expected`, `found`) as the contract
                // serializes them; the message is added below.
                if let Ok(Value::Object(fields)) = serde_json::to_value(contract) {
                    error.extend(fields);
                }
                (contract.code(), contract.to_string())
            }
            ApiError::PayloadTooLarge { limit } => {
                error.insert("limit".into(), json!(limit));
                (
                    "payload_too_large",
                    format!("the request body is over the limit of {limit} bytes"),
                )
            }
            ApiError::UnsupportedMediaType => (
                "unsupported_media_type",
                "the body must be JSON (Content-Type: application/json)".into(),
            ),
            ApiError::InvalidAutomation(problems) | ApiError::InvalidSetup(problems) => {
                error.insert("problems".into(), json!(problems));
                let (code, what) = match self {
                    ApiError::InvalidSetup(_) => ("invalid_setup", "setup"),
                    _ => ("invalid_automation", "automation"),
                };
                (
                    code,
                    format!(
                        "the {what} has {} problem{}",
                        problems.len(),
                        if problems.len() == 1 { "" } else { "s" }
                    ),
                )
            }
            ApiError::RateLimited { retry_after } => {
                error.insert("retryAfter".into(), json!(retry_after_secs(*retry_after)));
                ("rate_limited", "too many requests; slow down".into())
            }
            ApiError::ServiceWaiting {
                retry_after,
                message,
            } => {
                error.insert("retryAfter".into(), json!(retry_after_secs(*retry_after)));
                ("service_waiting", message.clone())
            }
            ApiError::Unavailable => (
                "unavailable",
                "the database is not answering; try again shortly".into(),
            ),
            ApiError::Internal => ("internal", "something went wrong on our side".into()),
        };
        error.insert("code".into(), json!(code));
        error.insert("message".into(), json!(message));
        json!({ "error": error })
    }
}

/// `Retry-After` in whole seconds, rounded up, never below 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// The mark of an [`ApiError::Unavailable`] answer, until [`add_retry_after`] replaces it
/// with [`unavailable_response`].
#[derive(Debug, Clone, Copy)]
pub struct UnavailableAnswer;

/// The 503 of an unanswering database: `Retry-After` and `retryAfter` both `wait` in
/// whole seconds (rounded up, at least 1).
pub fn unavailable_response(wait: Duration) -> Response {
    let seconds = retry_after_secs(wait);
    let mut body = ApiError::Unavailable.body();
    body["error"]["retryAfter"] = json!(seconds);
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// The router's layer: a marked 503 becomes [`unavailable_response`] with the server's
/// `unavailable_retry_after`; any other 503 without `Retry-After` gets the header.
pub async fn add_retry_after(
    axum::extract::State(app): axum::extract::State<crate::App>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = next.run(request).await;
    if response.status() != StatusCode::SERVICE_UNAVAILABLE
        || response.headers().contains_key(header::RETRY_AFTER)
    {
        return response;
    }
    let wait = app.config().unavailable_retry_after;
    if response.extensions().get::<UnavailableAnswer>().is_some() {
        return unavailable_response(wait);
    }
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after_secs(wait)),
    );
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, axum::Json(self.body())).into_response();
        if let ApiError::Unavailable = self {
            response.extensions_mut().insert(UnavailableAnswer);
        }
        if let ApiError::RateLimited { retry_after }
        | ApiError::ServiceWaiting { retry_after, .. } = self
        {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs(retry_after)),
            );
        }
        response
    }
}

impl From<DeskError> for ApiError {
    fn from(error: DeskError) -> Self {
        match error {
            // Callers that know their resource use `ApiError::desk`; this is the fallback.
            DeskError::NotFound(what) => ApiError::NotFound(what),
            DeskError::Conflict(message) => ApiError::Conflict {
                code: "conflict",
                message,
            },
            DeskError::Invalid(message) => ApiError::bad_request(message),
            DeskError::InUse { message, used_by } => ApiError::InUse { message, used_by },
            DeskError::Unavailable(message) => {
                tracing::warn!(error = %message, "desk storage unavailable");
                ApiError::Unavailable
            }
            DeskError::Internal(message) => {
                tracing::error!(error = %message, "desk storage error");
                ApiError::Internal
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound => ApiError::NotFound("run"),
            StoreError::Conflict(message) => ApiError::Conflict {
                code: "conflict",
                message,
            },
            StoreError::Unavailable(message) => {
                tracing::warn!(error = %message, "run storage unavailable");
                ApiError::Unavailable
            }
            other => {
                tracing::error!(error = %other, "run storage error");
                ApiError::Internal
            }
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::Store(store) => ApiError::from(store),
            // The server builds every enqueue itself: a refused one is our bug.
            other => {
                tracing::error!(error = %other, "enqueue refused");
                ApiError::Internal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one_second() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1, "zero becomes 1");
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1, "1 ms → 1 s");
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2, "whole seconds");
        assert_eq!(
            retry_after_secs(Duration::from_millis(2001)),
            3,
            "rounded up"
        );
    }

    #[test]
    fn not_found_names_the_route_resource_not_the_store_message() {
        let error = ApiError::desk(DeskError::NotFound("member"), "group");
        assert_eq!(
            error.body(),
            json!({"error": {"code": "not_found", "message": "group not found"}}),
            "the route decides what was not found"
        );
    }

    #[test]
    fn contract_errors_carry_parameter_and_path() {
        let error = ApiError::Contract(ContractError::MissingParameter {
            parameter: "docId".into(),
            path: "document.id".into(),
        });
        let body = error.body();
        assert_eq!(body["error"]["code"], "missing_parameter", "code");
        assert_eq!(body["error"]["parameter"], "docId", "parameter");
        assert_eq!(body["error"]["path"], "document.id", "path");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("docId")),
            "a message naming it: {body}"
        );
    }

    #[test]
    fn an_unavailable_answer_says_when_to_come_back() {
        let response = unavailable_response(Duration::from_millis(2500));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "503");
        assert_eq!(
            response.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from(3u64)),
            "Retry-After in whole seconds, rounded up"
        );
        let marked = ApiError::Unavailable.into_response();
        assert!(
            marked.extensions().get::<UnavailableAnswer>().is_some(),
            "marked for the router's layer"
        );
        let body = ApiError::Unavailable.body();
        assert_eq!(body["error"]["code"], "unavailable", "code: {body}");
    }

    #[test]
    fn internal_errors_never_reach_the_client() {
        let error = ApiError::from(DeskError::Internal("disk I/O error at /var/db".into()));
        let text = error.body().to_string();
        assert!(!text.contains("/var/db"), "no internals: {text}");
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR, "500");
    }
}
