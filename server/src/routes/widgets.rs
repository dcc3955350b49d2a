//! Dashboard widgets over connector data (`fronta_automation::widget`):
//! `POST /api/widgets` creates one (201), `GET /api/widgets` lists them with their data,
//! `GET/PATCH/DELETE /api/widgets/{id}` reads, changes part of, removes one, and
//! `POST /api/widgets/{id}/refresh` calls the connector now.
//!
//! Reading (the list or one widget) answers from the cache while it is fresh, without
//! calling out; a stale widget is refreshed first by the reader that claims it (a lease
//! in the widget's row: one call per widget at a time, across processes), while other
//! readers get the cached data marked `refreshing`. The list refreshes its stale widgets
//! concurrently. A failed call keeps the old data; the answer carries the error and the
//! data's age. A refresh refused by the service's cap or open breaker answers
//! 503 `service_waiting` with `Retry-After` (the call was not made; the cache is as it
//! was); a list or a read then answers the cache with that reason as `error`.
//!
//! Bad input answers 400 `invalid_widget`, every problem named by its field
//! (`ttlSec: ttlSec must be between 10 and 86400 seconds, found 5`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use fronta_automation::Problem;
use fronta_automation::widget::{Reading, WidgetDef, WidgetView};
use fronta_desk::DeskError;
use futures_util::future::join_all;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::app::App;
use crate::auth::TenantAuth;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::routes::parse_id;

const WHAT: &str = "widget";

fn invalid(problems: &[Problem]) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_widget",
        message: problems
            .iter()
            .map(Problem::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn checked(app: &App, value: &Value) -> Result<WidgetDef, ApiError> {
    let def = WidgetDef::from_json(value).map_err(|problems| invalid(&problems))?;
    let problems = def.problems(&app.config().widgets);
    if !problems.is_empty() {
        return Err(invalid(&problems));
    }
    Ok(def)
}

fn time(at: Option<chrono::DateTime<chrono::Utc>>) -> Value {
    at.map_or(Value::Null, |at| {
        json!(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    })
}

/// The JSON of a widget with its data (see docs/api-notes.md).
fn view(reading: &Reading) -> Value {
    let WidgetView {
        widget,
        cache,
        refreshing,
        ..
    } = &reading.view;
    let def = &widget.def;
    let error = match &reading.not_now {
        Some((_, message)) => Some(message.clone()),
        None => cache.error.clone(),
    };
    json!({
        "id": widget.id.to_string(),
        "name": def.name,
        "op": def.op,
        "service": def.service,
        "input": def.input,
        "path": def.path,
        "ttlSec": def.ttl_sec,
        "data": cache.data,
        "fetchedAt": time(cache.fetched_at),
        "ageSec": reading.view.age().map(|age| age.as_secs()),
        "stale": reading.view.stale(),
        "refreshing": refreshing,
        "checkedAt": time(cache.checked_at),
        "error": error,
        "errorAt": time(cache.error_at),
        "createdAt": time(Some(widget.created_at)),
        "updatedAt": time(Some(widget.updated_at)),
    })
}

fn unread(view: WidgetView) -> Reading {
    Reading {
        view,
        called: false,
        not_now: None,
    }
}

pub async fn widget_create(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    JsonBody(value): JsonBody<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let def = checked(&app, &value)?;
    fronta_engine::audit::detail(format!("{:?}", def.name));
    let max = app.config().widgets.max_per_tenant;
    let widget = app
        .widgets()
        .store
        .widget_create(tenant.id, def, max)
        .await
        .map_err(|err| match err {
            DeskError::Conflict(message) => ApiError::Conflict {
                code: "too_many_widgets",
                message: format!("{message} (FRONTA_WIDGET_MAX_PER_TENANT)"),
            },
            other => ApiError::desk(other, WHAT),
        })?;
    tracing::info!(tenant = %tenant.id, widget = %widget.id, name = %widget.def.name, op = %widget.def.op, ttl_sec = widget.def.ttl_sec, "widget created");
    let view = app
        .widgets()
        .store
        .widget_get(tenant.id, widget.id)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?
        .ok_or(ApiError::NotFound(WHAT))?;
    Ok((StatusCode::CREATED, Json(view_of(view))))
}

fn view_of(widget: WidgetView) -> Value {
    view(&unread(widget))
}

pub async fn widget_list(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
) -> Result<Json<Value>, ApiError> {
    let service = app.widgets();
    let list = service
        .store
        .widget_list(tenant.id)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    // Fresh widgets and those another reader is refreshing are answered as they are;
    // the stale ones are refreshed concurrently (each claimed first, so two readers of
    // the list never call for one widget twice).
    let readings = join_all(list.into_iter().map(|view| async move {
        if view.fresh() || view.refreshing {
            return Ok(unread(view));
        }
        let id = view.widget.id;
        match service.read(tenant.id, id, false).await {
            Ok(reading) => Ok(reading),
            // Deleted meanwhile: answered as it was read.
            Err(DeskError::NotFound(_)) => Ok(unread(view)),
            Err(err) => Err(err),
        }
    }))
    .await;
    let mut items = Vec::new();
    for reading in readings {
        let reading = reading.map_err(|err| ApiError::desk(err, WHAT))?;
        items.push(view(&reading));
    }
    Ok(Json(json!({"items": items, "nextCursor": null})))
}

pub async fn widget_get(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: Uuid = parse_id(&id, WHAT)?;
    let reading = app
        .widgets()
        .read(tenant.id, id, false)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    Ok(Json(view(&reading)))
}

pub async fn widget_refresh(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: Uuid = parse_id(&id, WHAT)?;
    let reading = app
        .widgets()
        .read(tenant.id, id, true)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    if let Some((wait, message)) = reading.not_now {
        return Err(ApiError::ServiceWaiting {
            retry_after: wait,
            message,
        });
    }
    Ok(Json(view(&reading)))
}

pub async fn widget_patch(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
    JsonBody(patch): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let id: Uuid = parse_id(&id, WHAT)?;
    let Value::Object(patch) = patch else {
        return Err(invalid(&[Problem::new(
            "",
            "a patch is a JSON object of the fields to change",
        )]));
    };
    let store = &app.widgets().store;
    let current = store
        .widget_get(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?
        .ok_or(ApiError::NotFound(WHAT))?;
    let mut merged = serde_json::to_value(&current.widget.def).map_err(|err| {
        tracing::error!(error = %err, "a stored widget cannot be written as JSON");
        ApiError::Internal
    })?;
    let changed: Vec<String> = patch.keys().cloned().collect();
    if let Value::Object(fields) = &mut merged {
        fields.extend(patch);
    }
    let def = checked(&app, &merged)?;
    fronta_engine::audit::detail(format!("{:?}, changes {}", def.name, changed.join(", ")));
    let reset = !current.widget.def.same_call(&def);
    let widget = store
        .widget_update(tenant.id, id, def, reset)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    tracing::info!(tenant = %tenant.id, widget = %widget.id, cache_reset = reset, "widget changed");
    let view = store
        .widget_get(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?
        .ok_or(ApiError::NotFound(WHAT))?;
    Ok(Json(view_of(view)))
}

pub async fn widget_delete(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: Uuid = parse_id(&id, WHAT)?;
    app.widgets()
        .store
        .widget_delete(tenant.id, id)
        .await
        .map_err(|err| ApiError::desk(err, WHAT))?;
    tracing::info!(tenant = %tenant.id, widget = %id, "widget deleted");
    Ok(StatusCode::NO_CONTENT)
}
