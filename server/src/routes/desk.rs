//! The tenant's desk: groups and their members, ticket types, tickets (list, read with
//! log, a person's change) and incidents (list, read, resolve — never `detail`).
//!
//! Every route is scoped by the caller's tenant; an id that does not parse, does not
//! exist, or belongs to another tenant answers the same 404.
//!
//! Decisions where API.md is silent:
//! - a member's `capacity` defaults to [`DEFAULT_MEMBER_CAPACITY`], `available` to true;
//!   a `PATCH` of `available` alone changes nothing else, and making a member available
//!   (or raising their capacity) wakes the runs waiting for room in their group;
//! - a member is addressed under its group: a member of another group answers 404;
//! - `PATCH /api/tickets/{id}` takes `title`, `type`, `status`, `closed`, `tags`
//!   (replaces all), `addTags`, `assignee` (member id, `{"id": …}` or `null`), `group`
//!   (name or `null`) and `fields`; an unknown field is a 400. An assignee or group the
//!   tenant does not have is a 400 (the ticket exists, the reference is wrong).
//! - `PATCH /api/ticket-types/{id}` takes `name`, `statuses` (replaces all) and `fields`
//!   (replaces all); what is absent is kept. Removing a status an open ticket of the type
//!   still holds is refused naming it; a rename carries to the tickets' `type`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use fronta_desk::store::{TicketChange, TicketFilter};
use fronta_desk::{
    DeskError, FieldDef, GroupId, IncidentId, MemberId, Origin, TicketId, TicketTypeId,
};
use fronta_engine::audit;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::app::App;
use crate::auth::TenantAuth;
use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams};
use crate::pagination::{Order, Page, PageParams, page_by_id};
use crate::routes::parse_id;
use crate::wire::{group_view, incident_view, member_view, ticket_type_view, ticket_view};

/// A member's capacity when a request does not give one.
pub const DEFAULT_MEMBER_CAPACITY: u32 = 10;

/// `Some(None)` for an explicit `null`, `None` when the field is absent.
pub(crate) fn nullable<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

// ---- groups ----

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupBody {
    #[schemars(length(min = 1, max = 200), regex(pattern = r"\S"))]
    name: String,
}

pub async fn group_create(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    JsonBody(body): JsonBody<GroupBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    audit::detail(format!("{:?}", body.name));
    let group = app.desk().group_create(tenant.id, &body.name).await?;
    Ok((StatusCode::CREATED, Json(group_view(&group))))
}

pub async fn groups(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    QueryParams(page): QueryParams<PageParams>,
) -> Result<Json<Page<Value>>, ApiError> {
    let groups = app.desk().group_list(tenant.id).await?;
    Ok(Json(page_by_id(
        groups,
        |group| group.id.0,
        Order::OldestFirst,
        &page,
        app.config(),
        |group| group_view(&group),
    )?))
}

pub async fn group(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: GroupId = parse_id(&id, "group")?;
    let group = app
        .desk()
        .group_get(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, "group"))?;
    Ok(Json(group_view(&group)))
}

pub async fn group_rename(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<GroupBody>,
) -> Result<Json<Value>, ApiError> {
    let id: GroupId = parse_id(&id, "group")?;
    audit::detail(format!("to {:?}", body.name));
    let group = app
        .desk()
        .group_rename(tenant.id, id, &body.name)
        .await
        .map_err(|err| ApiError::desk(err, "group"))?;
    Ok(Json(group_view(&group)))
}

pub async fn group_delete(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: GroupId = parse_id(&id, "group")?;
    app.desk()
        .group_delete(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, "group"))?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- members ----

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewMember {
    #[schemars(length(min = 1, max = 200), regex(pattern = r"\S"))]
    name: String,
    email: Option<String>,
    capacity: Option<u32>,
    available: Option<bool>,
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberPatch {
    name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    email: Option<Option<String>>,
    capacity: Option<u32>,
    available: Option<bool>,
}

pub async fn member_add(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(group): Path<String>,
    JsonBody(body): JsonBody<NewMember>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let group: GroupId = parse_id(&group, "group")?;
    audit::detail(format!("{:?}", body.name));
    let member = app
        .desk()
        .member_add(
            tenant.id,
            group,
            &body.name,
            body.email.as_deref(),
            body.capacity.unwrap_or(DEFAULT_MEMBER_CAPACITY),
        )
        .await
        .map_err(|err| ApiError::desk(err, "group"))?;
    let member = match body.available {
        Some(false) => app
            .desk()
            .member_set_available(tenant.id, member.id, false)
            .await
            .map_err(|err| ApiError::desk(err, "member"))?,
        _ => member,
    };
    Ok((StatusCode::CREATED, Json(member_view(&member))))
}

pub async fn members(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(group): Path<String>,
    QueryParams(page): QueryParams<PageParams>,
) -> Result<Json<Page<Value>>, ApiError> {
    let group: GroupId = parse_id(&group, "group")?;
    let members = app
        .desk()
        .member_list(tenant.id, group)
        .await
        .map_err(|err| ApiError::desk(err, "group"))?;
    Ok(Json(page_by_id(
        members,
        |member| member.id.0,
        Order::OldestFirst,
        &page,
        app.config(),
        |member| member_view(&member),
    )?))
}

/// The member `member` of the tenant's group `group`, or the route's 404.
async fn member_in_group(
    app: &App,
    tenant: fronta_desk::TenantId,
    group: &str,
    member: &str,
) -> Result<MemberId, ApiError> {
    let group: GroupId = parse_id(group, "member")?;
    let member: MemberId = parse_id(member, "member")?;
    let members = app
        .desk()
        .member_list(tenant, group)
        .await
        .map_err(|err| ApiError::desk(err, "member"))?;
    members
        .iter()
        .any(|m| m.id == member)
        .then_some(member)
        .ok_or(ApiError::NotFound("member"))
}

pub async fn member_update(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path((group, member)): Path<(String, String)>,
    JsonBody(body): JsonBody<MemberPatch>,
) -> Result<Json<Value>, ApiError> {
    let member = member_in_group(&app, tenant.id, &group, &member).await?;
    audit::changes(&[
        ("name", body.name.is_some()),
        ("email", body.email.is_some()),
        ("capacity", body.capacity.is_some()),
        ("available", body.available.is_some()),
    ]);
    let mut updated = app
        .desk()
        .member_update(
            tenant.id,
            member,
            body.name.as_deref(),
            body.email.as_ref().map(|email| email.as_deref()),
            body.capacity,
        )
        .await
        .map_err(|err| ApiError::desk(err, "member"))?;
    if let Some(available) = body.available {
        updated = app
            .desk()
            .member_set_available(tenant.id, member, available)
            .await
            .map_err(|err| ApiError::desk(err, "member"))?;
    }
    Ok(Json(member_view(&updated)))
}

pub async fn member_delete(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path((group, member)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let member = member_in_group(&app, tenant.id, &group, &member).await?;
    app.desk()
        .member_delete(tenant.id, member)
        .await
        .map_err(|err| ApiError::desk(err, "member"))?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- ticket types ----

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTicketType {
    #[schemars(length(min = 1, max = 200), regex(pattern = r"\S"))]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) statuses: Vec<String>,
    #[serde(default)]
    pub(crate) fields: Vec<FieldDef>,
}

pub async fn ticket_type_create(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    JsonBody(body): JsonBody<NewTicketType>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    audit::detail(format!("{:?}", body.name));
    let created = app
        .desk()
        .ticket_type_create(tenant.id, &body.name, &body.statuses, &body.fields)
        .await?;
    Ok((StatusCode::CREATED, Json(ticket_type_view(&created))))
}

pub async fn ticket_types(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    QueryParams(page): QueryParams<PageParams>,
) -> Result<Json<Page<Value>>, ApiError> {
    let types = app.desk().ticket_type_list(tenant.id).await?;
    Ok(Json(page_by_id(
        types,
        |t| t.id.0,
        Order::OldestFirst,
        &page,
        app.config(),
        |t| ticket_type_view(&t),
    )?))
}

pub async fn ticket_type(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: TicketTypeId = parse_id(&id, "ticket type")?;
    let found = app
        .desk()
        .ticket_type_get(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, "ticket type"))?;
    Ok(Json(ticket_type_view(&found)))
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketTypePatch {
    name: Option<String>,
    statuses: Option<Vec<String>>,
    fields: Option<Vec<FieldDef>>,
}

pub async fn ticket_type_update(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<TicketTypePatch>,
) -> Result<Json<Value>, ApiError> {
    let id: TicketTypeId = parse_id(&id, "ticket type")?;
    audit::changes(&[
        ("name", body.name.is_some()),
        ("statuses", body.statuses.is_some()),
        ("fields", body.fields.is_some()),
    ]);
    let updated = app
        .desk()
        .ticket_type_update(
            tenant.id,
            id,
            body.name.as_deref(),
            body.statuses.as_deref(),
            body.fields.as_deref(),
        )
        .await
        .map_err(|err| ApiError::desk(err, "ticket type"))?;
    Ok(Json(ticket_type_view(&updated)))
}

/// `DELETE /api/ticket-types/{id}`: 204, or 409 `in_use` while a current automation
/// version or an open ticket uses the type or one of its statuses.
pub async fn ticket_type_delete(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: TicketTypeId = parse_id(&id, "ticket type")?;
    app.desk()
        .ticket_type_delete(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, "ticket type"))?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- tickets ----

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct TicketQuery {
    /// Tickets in this status.
    status: Option<String>,
    /// Tickets with this tag.
    tag: Option<String>,
    /// Closed tickets (`true`) or open ones (`false`).
    closed: Option<bool>,
    /// Tickets assigned to this member (its id).
    assignee: Option<String>,
    /// Tickets of this ticket type (its name).
    #[serde(rename = "type")]
    ticket_type: Option<String>,
    /// Tickets on the page.
    #[schemars(range(min = 1))]
    limit: Option<usize>,
    /// The `nextCursor` of the page before.
    cursor: Option<String>,
}

impl crate::extract::QueryKeys for TicketQuery {
    const KEYS: &'static [&'static str] = &[
        "status", "tag", "closed", "assignee", "type", "limit", "cursor",
    ];
}

pub async fn tickets(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    QueryParams(query): QueryParams<TicketQuery>,
) -> Result<Json<Page<Value>>, ApiError> {
    let page = PageParams {
        limit: query.limit,
        cursor: query.cursor.clone(),
    };
    let size = page.size(app.config())?;
    let before_number = page
        .cursor
        .as_deref()
        .filter(|cursor| !cursor.is_empty())
        .map(|cursor| {
            cursor.parse::<i64>().map_err(|_| ApiError::BadRequest {
                code: "invalid_cursor",
                message: "the cursor is not one this list gave out".into(),
            })
        })
        .transpose()?;
    let assignee = query
        .assignee
        .as_deref()
        .map(|id| {
            id.parse::<MemberId>()
                .map_err(|_| ApiError::bad_request("assignee must be a member id"))
        })
        .transpose()?;
    let filter = TicketFilter {
        status: query.status,
        tag: query.tag,
        closed: query.closed,
        assignee,
        ticket_type: query.ticket_type,
        before_number,
        limit: size + 1,
    };
    let mut found = app.desk().ticket_list(tenant.id, filter).await?;
    let more = found.len() > size;
    found.truncate(size);
    let next_cursor = more
        .then(|| found.last().map(|ticket| ticket.number.to_string()))
        .flatten();
    Ok(Json(Page {
        items: found
            .iter()
            .map(|ticket| ticket_view(ticket, None))
            .collect(),
        next_cursor,
    }))
}

async fn ticket_with_log(
    app: &App,
    tenant: fronta_desk::TenantId,
    id: TicketId,
) -> Result<Value, ApiError> {
    let found = app
        .desk()
        .ticket_get(tenant, id)
        .await
        .map_err(|err| ApiError::desk(err, "ticket"))?;
    let log = app
        .desk()
        .ticket_log(tenant, id)
        .await
        .map_err(|err| ApiError::desk(err, "ticket"))?;
    Ok(ticket_view(&found, Some(&log)))
}

pub async fn ticket(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: TicketId = parse_id(&id, "ticket")?;
    Ok(Json(ticket_with_log(&app, tenant.id, id).await?))
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TicketPatch {
    title: Option<String>,
    #[serde(rename = "type")]
    ticket_type: Option<String>,
    status: Option<String>,
    closed: Option<bool>,
    tags: Option<Vec<String>>,
    #[serde(default)]
    add_tags: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    assignee: Option<Option<Value>>,
    #[serde(default, deserialize_with = "nullable")]
    group: Option<Option<String>>,
    #[serde(default)]
    fields: BTreeMap<String, Value>,
}

fn assignee_id(value: &Value) -> Result<MemberId, ApiError> {
    let text = match value {
        Value::String(id) => Some(id.as_str()),
        Value::Object(map) => map.get("id").and_then(Value::as_str),
        _ => None,
    };
    text.and_then(|id| id.parse().ok())
        .ok_or_else(|| ApiError::bad_request("assignee must be a member id, {\"id\": …} or null"))
}

pub async fn ticket_change(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<TicketPatch>,
) -> Result<Json<Value>, ApiError> {
    let id: TicketId = parse_id(&id, "ticket")?;
    // The ticket first, so that a 404 is about it and not about what the change names.
    app.desk()
        .ticket_get(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, "ticket"))?;
    audit::changes(&[
        ("title", body.title.is_some()),
        ("type", body.ticket_type.is_some()),
        ("status", body.status.is_some()),
        ("closed", body.closed.is_some()),
        ("tags", body.tags.is_some() || !body.add_tags.is_empty()),
        ("assignee", body.assignee.is_some()),
        ("group", body.group.is_some()),
        ("fields", !body.fields.is_empty()),
    ]);
    let assignee = match &body.assignee {
        None => None,
        Some(None) => Some(None),
        Some(Some(value)) => Some(Some(assignee_id(value)?)),
    };
    let change = TicketChange {
        title: body.title,
        ticket_type: body.ticket_type,
        status: body.status,
        closed: body.closed,
        add_tags: body.add_tags,
        set_tags: body.tags,
        assignee,
        group: body.group,
        fields: body.fields,
    };
    match app
        .desk()
        .ticket_change(tenant.id, id, change, Origin::Person)
        .await
    {
        Ok(written) => app.hub().ticket_changed(tenant.id, &written.ticket),
        // The ticket exists (read above): what is missing is something the change names.
        Err(DeskError::NotFound(what)) => {
            return Err(ApiError::bad_request(format!(
                "the change names a {what} this tenant does not have"
            )));
        }
        Err(err) => return Err(err.into()),
    }
    Ok(Json(ticket_with_log(&app, tenant.id, id).await?))
}

// ---- incidents ----

pub async fn incidents(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    QueryParams(page): QueryParams<PageParams>,
) -> Result<Json<Page<Value>>, ApiError> {
    let incidents = app.desk().incident_list(Some(tenant.id)).await?;
    Ok(Json(page_by_id(
        incidents,
        |incident| incident.id.0,
        Order::NewestFirst,
        &page,
        app.config(),
        |incident| incident_view(&incident),
    )?))
}

pub async fn incident(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: IncidentId = parse_id(&id, "incident")?;
    let found = app
        .desk()
        .incident_get(Some(tenant.id), id)
        .await
        .map_err(|err| ApiError::desk(err, "incident"))?;
    Ok(Json(incident_view(&found)))
}

pub async fn incident_resolve(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: IncidentId = parse_id(&id, "incident")?;
    let resolved = app
        .desk()
        .incident_resolve(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, "incident"))?;
    Ok(Json(incident_view(&resolved)))
}
