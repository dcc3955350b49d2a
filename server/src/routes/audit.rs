//! The audit log (`fronta_engine::audit`): `GET /api/audit` lists the tenant's entries for
//! its `admin` tokens, `GET /api/admin/audit` every entry (or one tenant's) for the
//! operator. Newest first, `?from=&to=&actor=&object=&limit=&cursor=`:
//! - `from` (at or after) and `to` (before): RFC 3339 instants or dates;
//! - `actor`: a token's id, or the name an entry shows (a token's name, `fronta <command>`);
//! - `object`: an object's id, a kind (`automation`), or both as `kind:id`;
//! - `tenant` (operator only): one tenant's entries.
//!
//! Entries are written by the stores with the change they describe; nothing here writes.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use fronta_desk::TenantId;
use fronta_desk::access::{AuditFilter, AuditObject};
use fronta_engine::audit::AuditEntry;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::app::App;
use crate::auth::{AdminAuth, TenantAuth};
use crate::error::ApiError;
use crate::extract::{QueryKeys, QueryParams};
use crate::pagination::{Page, PageParams};

/// A tenant's audit log's query.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct AuditQuery {
    /// Entries at or after: a date or an RFC 3339 instant.
    from: Option<String>,
    /// Entries before: a date or an RFC 3339 instant.
    to: Option<String>,
    /// A token's id or the actor's name as shown.
    actor: Option<String>,
    /// An object's id, a kind (`automation`), or `kind:id`.
    object: Option<String>,
    /// Entries on the page.
    #[schemars(range(min = 1))]
    limit: Option<usize>,
    /// The `nextCursor` of the page before.
    cursor: Option<String>,
}

impl QueryKeys for AuditQuery {
    const KEYS: &'static [&'static str] = &["from", "to", "actor", "object", "limit", "cursor"];
}

/// The operator's audit log's query: a tenant's, and `tenant` to narrow it to one. (Not
/// a flattened [`AuditQuery`]: a flattened query string reads every value as text.)
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct AdminAuditQuery {
    /// One tenant's entries (its id).
    tenant: Option<String>,
    /// Entries at or after: a date or an RFC 3339 instant.
    from: Option<String>,
    /// Entries before: a date or an RFC 3339 instant.
    to: Option<String>,
    /// A token's id or the actor's name as shown.
    actor: Option<String>,
    /// An object's id, a kind (`automation`), or `kind:id`.
    object: Option<String>,
    /// Entries on the page.
    #[schemars(range(min = 1))]
    limit: Option<usize>,
    /// The `nextCursor` of the page before.
    cursor: Option<String>,
}

impl QueryKeys for AdminAuditQuery {
    const KEYS: &'static [&'static str] =
        &["tenant", "from", "to", "actor", "object", "limit", "cursor"];
}

/// One entry as the API shows it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditView {
    pub id: String,
    pub at: DateTime<Utc>,
    /// The tenant the change belongs to; none: the operator's own.
    pub tenant: Option<String>,
    pub actor: AuditActor,
    /// The client's address as seen (after trusted proxies); none for the CLI.
    pub client: Option<String>,
    pub method: String,
    pub route: String,
    pub object: AuditObjectView,
    pub summary: String,
}

/// Who made a change.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct AuditActor {
    /// `token`, `admin` or `cli`.
    pub kind: String,
    pub id: Option<String>,
    pub name: String,
    pub role: Option<String>,
}

/// What a change was about.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct AuditObjectView {
    pub kind: String,
    pub id: Option<String>,
}

fn view(entry: AuditEntry) -> AuditView {
    AuditView {
        id: entry.id.to_string(),
        at: entry.at,
        tenant: entry.tenant.map(|tenant| tenant.to_string()),
        actor: AuditActor {
            kind: entry.actor_kind,
            id: entry.actor_id.map(|id| id.to_string()),
            name: entry.actor_name,
            role: entry.actor_role,
        },
        client: entry.client,
        method: entry.method,
        route: entry.route,
        object: AuditObjectView {
            kind: entry.object_kind,
            id: entry.object_id,
        },
        summary: entry.summary,
    }
}

fn instant(name: &str, text: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    text.filter(|text| !text.is_empty())
        .map(|text| {
            fronta_automation::dates::parse_instant(text).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{name}: {text:?} is not a date or an RFC 3339 instant"
                ))
            })
        })
        .transpose()
}

/// A cursor: the last entry's `at` (milliseconds) and id.
fn cursor(text: Option<&str>) -> Result<Option<(DateTime<Utc>, Uuid)>, ApiError> {
    let Some(text) = text.filter(|text| !text.is_empty()) else {
        return Ok(None);
    };
    let bad = || ApiError::BadRequest {
        code: "invalid_cursor",
        message: "the cursor is not one this list gave out".into(),
    };
    let (at, id) = text.split_once('_').ok_or_else(bad)?;
    let at = at
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .ok_or_else(bad)?;
    let id = Uuid::parse_str(id).map_err(|_| bad())?;
    Ok(Some((at, id)))
}

async fn list(
    app: &App,
    query: AuditQuery,
    tenant: Option<TenantId>,
) -> Result<Json<Page<AuditView>>, ApiError> {
    let size = PageParams {
        limit: query.limit,
        cursor: None,
    }
    .size(app.config())?;
    let filter = AuditFilter {
        tenant,
        from: instant("from", query.from.as_deref())?,
        to: instant("to", query.to.as_deref())?,
        actor: query.actor.filter(|actor| !actor.is_empty()),
        object: query
            .object
            .filter(|object| !object.is_empty())
            .map(|object| AuditObject::parse(&object)),
        before: cursor(query.cursor.as_deref())?,
        limit: size + 1,
    };
    let mut entries = app.access().audit_list(&filter).await?;
    let more = entries.len() > size;
    entries.truncate(size);
    let next_cursor = more
        .then(|| entries.last())
        .flatten()
        .map(|last| format!("{}_{}", last.at.timestamp_millis(), last.id));
    Ok(Json(Page {
        items: entries.into_iter().map(view).collect(),
        next_cursor,
    }))
}

pub async fn tenant_audit(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    QueryParams(query): QueryParams<AuditQuery>,
) -> Result<Json<Page<AuditView>>, ApiError> {
    list(&app, query, Some(tenant.id)).await
}

pub async fn admin_audit(
    _admin: AdminAuth,
    State(app): State<App>,
    QueryParams(query): QueryParams<AdminAuditQuery>,
) -> Result<Json<Page<AuditView>>, ApiError> {
    let tenant = query
        .tenant
        .as_deref()
        .filter(|tenant| !tenant.is_empty())
        .map(|tenant| {
            tenant.parse().map_err(|_| {
                ApiError::bad_request(format!("tenant: {tenant:?} is not a tenant id"))
            })
        })
        .transpose()?;
    let AdminAuditQuery {
        from,
        to,
        actor,
        object,
        limit,
        cursor,
        ..
    } = query;
    let query = AuditQuery {
        from,
        to,
        actor,
        object,
        limit,
        cursor,
    };
    list(&app, query, tenant).await
}
