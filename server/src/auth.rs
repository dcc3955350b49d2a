//! Who is calling, and may they: one middleware ([`guard`]) in front of every route of
//! the route table, driven by the table itself (each method's caller and least role,
//! `crate::openapi::Op`), so no handler decides access on its own.
//!
//! ```text
//!  request ─► route matched ─► caller of the method?
//!     anyone ─────────────────────────────────────────────────────────► handler
//!     tenant / admin ─► client address over its failed-auth burst? ── yes ─► 429
//!                       │ no
//!                       ▼
//!                       Authorization: Bearer <token> found and live? ── no ─► 401
//!                       │ yes                         (the failure is counted)
//!                       ▼
//!                       tenant: role allows the method? ── no ─► 403 forbidden
//!                       │ yes           (tenant: one token of its API rate limit)
//!                       ▼
//!                       a write (POST/PUT/PATCH/DELETE)? ── yes ─► audit scope ─► handler
//!                       │ no
//!                       ▼
//!                       handler
//! ```
//!
//! - Tenant tokens are found by hash (`AccessStore::principal_by_token`), expired ones not
//!   at all; a revoked token is gone from the table, so the next request is 401.
//! - Admin tokens: the configured one (compared by SHA-256 hash in constant time: both
//!   sides are hashes of equal length, so neither the length nor the content of the secret
//!   shows in the timing), else the operator's named ones in the database
//!   (`fronta admin-token new|list|revoke`), found by hash.
//! - Failed authentications are counted per client address ([`client_address`]); past the
//!   burst of `ServerConfig::auth_failure_rate` the address answers 429 with `Retry-After`
//!   before any token is looked at, so guessing is slow. Each failure is logged with the
//!   address, the route and the reason — never the token.
//! - A write opens an audit scope (`fronta_engine::audit`) with the actor, the client
//!   address, the route, the object (its kind from the path, its id from the path or from
//!   what the store made) and the route's summary: the store writes the entry with the
//!   change, in its transaction.
//! - `lastUsedAt` of a token is written at most once a minute
//!   (`fronta_desk::access::touch_due`), from a task of its own, outside the audit scope.
//!
//! Left out: webhooks (their token is in the path, see `routes::webhook`); failed
//! authentications are counted per process.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::LazyLock;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fronta_desk::Tenant;
use fronta_desk::access::{Principal, Role, TokenId, touch_due};
use fronta_engine::audit::{self, Actor, Scope};

use crate::app::App;
use crate::error::ApiError;
use crate::openapi::Caller;

/// The calling tenant (a route of a tenant token).
#[derive(Debug, Clone)]
pub struct TenantAuth(pub Tenant);

/// The calling tenant token with its tenant (its id, name and role).
#[derive(Debug, Clone)]
pub struct TokenAuth(pub Principal);

/// The platform operator, with the admin token used.
#[derive(Debug, Clone)]
pub struct AdminAuth(pub AdminCaller);

/// Which admin token opened the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminCaller {
    /// `None`: the configured admin token (`--admin-token`, its file).
    pub id: Option<uuid::Uuid>,
    pub name: String,
}

/// The name the configured admin token goes by in the audit log.
pub const CONFIGURED_ADMIN: &str = "configured admin token";

/// What the route table says of one method of one route.
#[derive(Debug, Clone, Copy)]
struct Access {
    caller: Caller,
    role: Option<Role>,
    summary: &'static str,
}

/// `(path, method)` → its access, from the route table.
static TABLE: LazyLock<HashMap<(&'static str, &'static str), Access>> = LazyLock::new(|| {
    crate::routes::route_docs()
        .into_iter()
        .flat_map(|route| {
            route.ops.into_iter().map(move |op| {
                let access = Access {
                    caller: op.caller(route.path),
                    role: op.role,
                    summary: op.summary,
                };
                ((route.path, op.method), access)
            })
        })
        .collect()
});

fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    let value = headers
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

/// The client's address as this server sees it: the last `X-Forwarded-For` hop when proxy
/// headers are trusted (`--trust-proxy-headers`: the address our proxy saw), else the
/// peer of the connection; `None` when neither is known (in-process tests).
pub fn client_address(app: &App, request: &Request) -> Option<String> {
    if app.config().trust_proxy_headers
        && let Some(forwarded) = request
            .headers()
            .get("x-forwarded-for")
            .and_then(|value| value.to_str().ok())
        && let Some(last) = forwarded
            .rsplit(',')
            .map(str::trim)
            .find(|hop| !hop.is_empty())
    {
        return Some(last.to_owned());
    }
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip().to_string())
}

fn is_write(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// The middleware of every route of the table (see the module's diagram).
pub async fn guard(State(app): State<App>, request: Request, next: Next) -> Response {
    // `MatchedPath` is an `Arc<str>`: its clone allocates nothing (a webhook pays one
    // table lookup here, no more).
    let Some(matched) = request.extensions().get::<MatchedPath>().cloned() else {
        return next.run(request).await;
    };
    let path = matched.as_str();
    let method = if request.method() == Method::HEAD {
        "GET"
    } else {
        request.method().as_str()
    };
    let Some(access) = TABLE.get(&(path, method)).copied() else {
        return next.run(request).await;
    };
    if access.caller == Caller::Anyone {
        return next.run(request).await;
    }
    let client = client_address(&app, &request);
    let (mut parts, body) = request.into_parts();
    let actor = match authenticate(&app, &mut parts, access, client.as_deref(), path).await {
        Ok(actor) => actor,
        Err(err) => return err.into_response(),
    };
    let write = is_write(&parts.method);
    let object = if write {
        let params = RawPathParams::from_request_parts(&mut parts, &app)
            .await
            .map(|params| {
                params
                    .iter()
                    .map(|(name, value)| (name.to_owned(), value.to_owned()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        Some(object_of(path, &params))
    } else {
        None
    };
    let request = Request::from_parts(parts, body);
    let Some((kind, id)) = object else {
        return next.run(request).await;
    };
    let scope = Scope::new(
        request.method().as_str(),
        path,
        &kind,
        id.clone(),
        audit_summary(access.summary),
        client,
    );
    let (actor, tenant) = actor;
    let tenant = tenant.or_else(|| {
        (kind == "tenant")
            .then(|| id.as_deref().and_then(|id| id.parse().ok()))
            .flatten()
    });
    scope.set_actor(actor, tenant);
    audit::scoped(scope, next.run(request)).await
}

/// Authenticate `parts` for `access`: the actor and its tenant, with the principal put in
/// the request's extensions for the extractors; or the answer.
async fn authenticate(
    app: &App,
    parts: &mut Parts,
    access: Access,
    client: Option<&str>,
    path: &str,
) -> Result<(Actor, Option<uuid::Uuid>), ApiError> {
    let key = client.unwrap_or("unknown");
    let failures = app.inner().auth_failures.as_ref();
    if let Some(wait) = failures.and_then(|limiter| limiter.wait(key)) {
        tracing::warn!(
            client = key,
            route = path,
            "authentication refused: too many failures from this address"
        );
        return Err(ApiError::RateLimited { retry_after: wait });
    }
    let found = match access.caller {
        Caller::Admin => admin(app, parts).await,
        _ => tenant(app, parts).await,
    };
    let (actor, tenant) = match found {
        Ok(found) => found,
        Err(err) => {
            if let ApiError::Unauthorized { message, .. } = &err {
                tracing::warn!(client = key, route = path, reason = %message, "authentication failed");
                if let Some(limiter) = failures {
                    // An empty bucket answers the next request from here 429.
                    let _ = limiter.check(key);
                }
            }
            return Err(err);
        }
    };
    if let Some(principal) = parts.extensions.get::<Principal>() {
        let needed = access.role.unwrap_or(Role::Admin);
        let role = principal.token.role;
        if !role.allows(needed) {
            return Err(ApiError::Forbidden { needed, role });
        }
        if let Some(limiter) = &app.inner().api_per_tenant {
            limiter
                .check(&principal.tenant.id.to_string())
                .map_err(|retry_after| ApiError::RateLimited { retry_after })?;
        }
    }
    Ok((actor, tenant))
}

async fn tenant(app: &App, parts: &mut Parts) -> Result<(Actor, Option<uuid::Uuid>), ApiError> {
    let token = bearer(&parts.headers)?;
    let principal = app
        .access()
        .principal_by_token(token)
        .await?
        .ok_or_else(|| ApiError::unauthorized("unknown, expired or revoked token"))?;
    touch_later(app, principal.token.id, principal.token.last_used_at);
    let actor = Actor::Token {
        id: principal.token.id.0,
        name: principal.token.name.clone(),
        role: principal.token.role.as_str().to_owned(),
    };
    let tenant = Some(principal.tenant.id.0);
    parts.extensions.insert(principal);
    Ok((actor, tenant))
}

async fn admin(app: &App, parts: &mut Parts) -> Result<(Actor, Option<uuid::Uuid>), ApiError> {
    let token = bearer(&parts.headers)?;
    let presented = fronta_desk::token::hash(token);
    let caller = match &app.config().admin_token_hash {
        Some(expected)
            if constant_time_eq(
                presented.as_bytes(),
                expected.to_ascii_lowercase().as_bytes(),
            ) =>
        {
            AdminCaller {
                id: None,
                name: CONFIGURED_ADMIN.into(),
            }
        }
        _ => {
            let row = app
                .access()
                .admin_token_by_token(token)
                .await?
                .ok_or_else(|| ApiError::unauthorized("this route needs an admin token"))?;
            touch_later(app, row.id, row.last_used_at);
            AdminCaller {
                id: Some(row.id.0),
                name: row.name,
            }
        }
    };
    let actor = Actor::Admin {
        id: caller.id,
        name: caller.name.clone(),
    };
    parts.extensions.insert(caller);
    Ok((actor, None))
}

/// Record a use of token `id` when its last one written is old enough
/// ([`touch_due`]), from a task of its own: outside the request's audit scope, and not in
/// its way.
fn touch_later(app: &App, id: TokenId, last: Option<chrono::DateTime<chrono::Utc>>) {
    let now = app.inner().clock.now();
    if !touch_due(last, now) {
        return;
    }
    let access = app.inner().ports.access.clone();
    tokio::spawn(async move {
        if let Err(err) = access.token_touch(id, now).await {
            tracing::debug!(error = %err, "could not record a token's last use");
        }
    });
}

/// The object a write on `path` is about: its kind, from the path's last collection, and
/// its id, from the path (`None`: the write makes it, and the store names it).
///
/// `/api/groups/{id}` → group `{id}`; `/api/automations/{id}/pause` → automation `{id}`;
/// `/api/groups/{id}/members` → member (made); `/api/groups` → group (made).
pub fn object_of(path: &str, params: &[(String, String)]) -> (String, Option<String>) {
    let segments: Vec<&str> = path
        .trim_start_matches('/')
        .split('/')
        .filter(|segment| !matches!(*segment, "api" | "admin"))
        .collect();
    let param = |segment: &str| -> Option<String> {
        let name = segment.strip_prefix('{')?.strip_suffix('}')?;
        params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    let is_param = |segment: &str| segment.starts_with('{');
    let n = segments.len();
    let (collection, id) = match segments.as_slice() {
        [.., collection, last] if is_param(last) => (*collection, param(last)),
        // A collection under an object (`/groups/{id}/members`) makes one of its own.
        [.., prev, last] if is_param(prev) && SUB_COLLECTIONS.contains(last) => (*last, None),
        // An action on an object (`/automations/{id}/pause`).
        [.., collection, prev, _] if is_param(prev) => (*collection, param(prev)),
        _ if n > 0 => (segments[n - 1], None),
        _ => ("api", None),
    };
    (singular(collection), id)
}

/// What an audit entry says a route did: the route's description up to its first note,
/// a parenthesis, a `;` or a `:` ("Cancel a run (two-phase)" → "Cancel a run"; "Add a
/// widget: a connector call whose data is cached ttlSec" → "Add a widget").
fn audit_summary(summary: &str) -> &str {
    let end = [" (", ";", ": "]
        .iter()
        .filter_map(|mark| summary.find(mark))
        .min()
        .unwrap_or(summary.len());
    summary[..end].trim_end()
}

/// Collections nested under an object whose `POST` makes an object of their own.
const SUB_COLLECTIONS: [&str; 1] = ["members"];

fn singular(collection: &str) -> String {
    match collection {
        "apply" => "setup".into(),
        "bulk" => "bulk-action".into(),
        other => other.strip_suffix('s').unwrap_or(other).to_owned(),
    }
}

impl FromRequestParts<App> for TenantAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _app: &App) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .map(|principal| TenantAuth(principal.tenant.clone()))
            .ok_or_else(unguarded)
    }
}

impl FromRequestParts<App> for TokenAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _app: &App) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .map(TokenAuth)
            .ok_or_else(unguarded)
    }
}

impl FromRequestParts<App> for AdminAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _app: &App) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<AdminCaller>()
            .cloned()
            .map(AdminAuth)
            .ok_or_else(unguarded)
    }
}

/// A handler asked for a caller its route's table entry does not authenticate: a bug of
/// the table, answered 401 so nothing leaks (and logged).
fn unguarded() -> ApiError {
    tracing::error!("a handler needs a caller the route table does not authenticate");
    ApiError::unauthorized("this route needs a token")
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

    #[test]
    fn audit_summaries_leave_the_notes_out() {
        assert_eq!(audit_summary("Cancel a run (two-phase)"), "Cancel a run");
        assert_eq!(
            audit_summary("Make a named API token with a role (its secret is shown once)"),
            "Make a named API token with a role"
        );
        assert_eq!(audit_summary("Rename a group"), "Rename a group");
        assert_eq!(
            audit_summary("Add a widget: a connector call whose data is cached ttlSec"),
            "Add a widget"
        );
        assert_eq!(
            audit_summary("Retry a failed run from its checkpoint; {\"version\": …} starts anew"),
            "Retry a failed run from its checkpoint"
        );
    }

    #[test]
    fn the_object_of_a_write_comes_from_its_path() {
        let id = |value: &str| vec![("id".to_owned(), value.to_owned())];
        let cases = [
            ("/api/groups", vec![], ("group", None)),
            ("/api/groups/{id}", id("g1"), ("group", Some("g1"))),
            ("/api/groups/{id}/members", id("g1"), ("member", None)),
            (
                "/api/groups/{id}/members/{member_id}",
                vec![
                    ("id".to_owned(), "g1".to_owned()),
                    ("member_id".to_owned(), "m1".to_owned()),
                ],
                ("member", Some("m1")),
            ),
            (
                "/api/automations/{id}/pause",
                id("a1"),
                ("automation", Some("a1")),
            ),
            (
                "/api/automations/{id}/runs",
                id("a1"),
                ("automation", Some("a1")),
            ),
            ("/api/runs/bulk", vec![], ("bulk-action", None)),
            (
                "/api/runs/bulk/{id}/cancel",
                id("b1"),
                ("bulk-action", Some("b1")),
            ),
            (
                "/api/admin/tenants/{id}/retention",
                id("t1"),
                ("tenant", Some("t1")),
            ),
            (
                "/api/ticket-types/{id}",
                id("y1"),
                ("ticket-type", Some("y1")),
            ),
            ("/api/apply", vec![], ("setup", None)),
            ("/api/tokens/{id}", id("k1"), ("token", Some("k1"))),
        ];
        for (path, params, (kind, object)) in cases {
            let (got_kind, got_id) = object_of(path, &params);
            assert_eq!(
                (got_kind.as_str(), got_id.as_deref()),
                (kind, object),
                "{path}"
            );
        }
    }
}
