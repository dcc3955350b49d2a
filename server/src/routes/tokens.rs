//! A tenant's named API tokens (`fronta_desk::access`): `POST /api/tokens` makes one and
//! answers its secret once, `GET /api/tokens` lists them (never a secret), `DELETE
//! /api/tokens/{id}` revokes one at once (the last admin token is kept: 409), and `GET
//! /api/me` tells a token who it is and what its role may do (the dashboard shows only
//! that). Tokens and revocations are for the tenant's `admin` tokens; `/api/me` for all.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use fronta_desk::access::{ApiToken, NewToken, Role, TokenId};
use serde::{Deserialize, Serialize};

use crate::app::App;
use crate::auth::{TenantAuth, TokenAuth};
use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams};
use crate::pagination::{Order, Page, PageParams, page_by_id};
use crate::routes::parse_id;

/// `POST /api/tokens`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewTokenBody {
    /// Unique in the tenant.
    pub name: String,
    /// `admin`, `editor` or `viewer`.
    #[schemars(with = "Role")]
    pub role: String,
    /// RFC 3339, in the future; none: the token does not expire.
    #[serde(default)]
    #[schemars(with = "Option<DateTime<Utc>>")]
    pub expires_at: Option<String>,
}

/// A token as listed: never its secret.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// What `POST /api/tokens` answers: the token with its secret, shown this once.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenCreated {
    pub id: String,
    pub name: String,
    pub role: Role,
    /// The secret: shown once, kept nowhere but as a hash.
    pub token: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// `GET /api/me`: the calling token, its tenant and what its role may do.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Me {
    pub tenant: MeTenant,
    pub token: TokenView,
    /// The roles this token's role includes (`viewer` ⊂ `editor` ⊂ `admin`).
    pub may: Vec<Role>,
}

/// The tenant of `GET /api/me`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct MeTenant {
    pub id: String,
    pub name: String,
}

fn view(token: &ApiToken) -> TokenView {
    TokenView {
        id: token.id.to_string(),
        name: token.name.clone(),
        role: token.role,
        created_at: token.created_at,
        expires_at: token.expires_at,
        last_used_at: token.last_used_at,
    }
}

fn expiry(text: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    text.map(|text| {
        DateTime::parse_from_rfc3339(text)
            .map(|at| at.with_timezone(&Utc))
            .map_err(|_| {
                ApiError::bad_request(format!(
                    "expiresAt: {text:?} is not an RFC 3339 time (2027-01-31T12:00:00Z)"
                ))
            })
    })
    .transpose()
}

pub async fn create(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    JsonBody(body): JsonBody<NewTokenBody>,
) -> Result<(StatusCode, Json<TokenCreated>), ApiError> {
    let role = Role::parse(&body.role)?;
    let new = NewToken {
        name: body.name,
        role,
        expires_at: expiry(body.expires_at.as_deref())?,
    };
    if let Some(scope) = fronta_engine::audit::current() {
        scope.detail(format!("{:?}, role {role}", new.name));
    }
    let (row, secret) = app.access().token_create(tenant.id, new).await?;
    Ok((
        StatusCode::CREATED,
        Json(TokenCreated {
            id: row.id.to_string(),
            name: row.name,
            role: row.role,
            token: secret,
            created_at: row.created_at,
            expires_at: row.expires_at,
        }),
    ))
}

pub async fn list(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    QueryParams(page): QueryParams<PageParams>,
) -> Result<Json<Page<TokenView>>, ApiError> {
    let tokens = app.access().token_list(tenant.id).await?;
    Ok(Json(page_by_id(
        tokens,
        |token| token.id.0,
        Order::OldestFirst,
        &page,
        app.config(),
        |token| view(&token),
    )?))
}

pub async fn revoke(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: TokenId = parse_id(&id, "token")?;
    // The entry names the token revoked (its name is read before the revocation commits).
    if let (Some(scope), Ok(token)) = (
        fronta_engine::audit::current(),
        app.access().token_get(tenant.id, id).await,
    ) {
        scope.detail(format!("{:?}, role {}", token.name, token.role));
    }
    let revoked = app
        .access()
        .token_revoke(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, "token"))?;
    tracing::info!(tenant = %tenant.id, token = %revoked.id, name = revoked.name, "token revoked");
    Ok(StatusCode::NO_CONTENT)
}

pub async fn me(TokenAuth(principal): TokenAuth) -> Json<Me> {
    let role = principal.token.role;
    Json(Me {
        tenant: MeTenant {
            id: principal.tenant.id.to_string(),
            name: principal.tenant.name.clone(),
        },
        token: view(&principal.token),
        may: Role::ALL.into_iter().filter(|r| role.allows(*r)).collect(),
    })
}
