//! Who is calling: `Authorization: Bearer <token>`.
//!
//! - [`TenantAuth`]: a tenant token, found by its hash through
//!   `DeskStore::tenant_by_token`; it also takes one token of the tenant's API rate limit.
//! - [`AdminAuth`]: the admin token, compared by SHA-256 hash with the configured hash in
//!   constant time (both sides are hashes of equal length, so neither the length nor the
//!   content of the secret shows in the timing).
//!
//! A missing header, another scheme, an unknown token, or the wrong kind of token for
//! the route all answer 401 `unauthorized`. Left out: webhooks (their token is in the
//! path, see `routes::webhook`).

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use fronta_desk::Tenant;

use crate::app::App;
use crate::error::ApiError;

/// The calling tenant.
#[derive(Debug, Clone)]
pub struct TenantAuth(pub Tenant);

/// The platform admin.
#[derive(Debug, Clone, Copy)]
pub struct AdminAuth;

fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <token>"))?;
    let text = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("the Authorization header is not text"))?;
    let (scheme, token) = text
        .split_once(' ')
        .ok_or_else(|| ApiError::unauthorized("expected Authorization: Bearer <token>"))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(ApiError::unauthorized(
            "expected Authorization: Bearer <token>",
        ));
    }
    Ok(token.trim())
}

impl FromRequestParts<App> for TenantAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Self::Rejection> {
        let token = bearer(parts)?;
        let tenant = app
            .desk()
            .tenant_by_token(token)
            .await?
            .ok_or_else(|| ApiError::unauthorized("unknown token"))?;
        if let Some(limiter) = &app.inner().api_per_tenant {
            limiter
                .check(&tenant.id.to_string())
                .map_err(|retry_after| ApiError::RateLimited { retry_after })?;
        }
        Ok(TenantAuth(tenant))
    }
}

impl FromRequestParts<App> for AdminAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Self::Rejection> {
        let token = bearer(parts)?;
        let Some(expected) = &app.config().admin_token_hash else {
            return Err(ApiError::unauthorized("no admin token is configured"));
        };
        let presented = fronta_desk::token::hash(token);
        if constant_time_eq(
            presented.as_bytes(),
            expected.to_ascii_lowercase().as_bytes(),
        ) {
            Ok(AdminAuth)
        } else {
            Err(ApiError::unauthorized("this route needs the admin token"))
        }
    }
}

/// Equal in time that does not depend on where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_inputs() {
        assert!(constant_time_eq(b"abc", b"abc"), "equal");
        assert!(!constant_time_eq(b"abc", b"abd"), "last byte differs");
        assert!(!constant_time_eq(b"abc", b"abcd"), "lengths differ");
    }
}
