//! The route table of API.md and the layers around it: the body limit (axum's
//! `DefaultBodyLimit`, so every body read stops at the configured size) and the trace
//! layer (one span per request, path redacted: webhook tokens never reach a log).
//!
//! Why not tower-http's `RequestBodyLimitLayer`: it answers an over-long
//! `Content-Length` itself, with a plain-text 413 outside the API's error shape.
//! `DefaultBodyLimit` only bounds the reads, and `crate::extract` turns both cases
//! (declared and streamed) into our JSON 413.
//!
//! Unknown routes answer 404 and wrong methods 405, both in the API's error shape. Every
//! 503 gets its `Retry-After` from a layer here (`crate::error::add_retry_after`).
//!
//! `GET /api/stream` is served by `crate::stream`, `GET /metrics` by `crate::metrics`
//! (its middleware times `POST /webhook/{token}`).
//!
//! The dashboard page (`GET /`, `/assets/…`) is not API: its routes come from the asset
//! table of `crate::dashboard`, merged here beside this table, under the same layers.

pub mod admin;
pub mod apply;
pub mod audit;
pub mod automations;
pub mod bulk;
pub mod desk;
pub mod dry_runs;
pub mod health;
pub mod mail_servers;
pub mod mcp_servers;
pub mod runs;
pub mod secrets;
pub mod services;
pub mod tokens;
pub mod webhook;
pub mod widgets;

use std::str::FromStr;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::app::App;
use crate::error::ApiError;

/// An id in a path, or the 404 of `what` (an id that cannot exist is unknown like any).
pub(crate) fn parse_id<T: FromStr>(text: &str, what: &'static str) -> Result<T, ApiError> {
    text.parse().map_err(|_| ApiError::NotFound(what))
}

/// The path as it may be logged: a webhook token is a secret.
pub fn redacted_path(path: &str) -> &str {
    if path.starts_with("/webhook/") {
        "/webhook/{token}"
    } else {
        path
    }
}

/// The route table: every route of API.md this crate serves, each with its documentation.
/// The router and the OpenAPI document (`crate::openapi`) are both built from it, so a
/// route cannot be served without being documented.
fn table() -> Routes {
    use crate::openapi::{Op, PageOf, op};
    use crate::wire::{
        AdminIncidentView, GroupView, IncidentView, MemberView, RunAccepted, RunView, TenantView,
        TicketTypeView, TicketView,
    };
    use fronta_automation::dry_run::DryRunAnswer;
    use fronta_automation::mail::MailServer;
    use fronta_automation::mcp::McpServer;
    use serde_json::Value;
    /// An answer or body whose schema is not derived yet: any JSON object.
    type AnyObject = serde_json::Map<String, Value>;
    let (get_, post_, put_, patch_, delete_) = ("GET", "POST", "PUT", "PATCH", "DELETE");
    Routes::default()
        .add("/healthz", get(health::healthz), [op(get_, "Liveness").answers::<health::Health>(200)])
        .add(
            "/readyz",
            get(health::readyz),
            [op(
                get_,
                "Readiness: 200 when the database answers, else 503",
            )
            .answers::<health::Health>(200)],
        )
        .add(
            "/metrics",
            get(crate::metrics::metrics),
            [op(get_, "Prometheus metrics").text().empty(200)],
        )
        .add(
            "/webhook/{token}",
            get(webhook::help).post(webhook::receive),
            [
                op(get_, "How to call this webhook").answers::<AnyObject>(200),
                op(post_, "Start a run of the webhook's automation")
                    .body::<Value>()
                    .answers::<RunAccepted>(202),
            ],
        )
        .add(
            "/api/admin/tenants",
            get(admin::tenants).post(admin::tenant_create),
            [
                op(get_, "List tenants").query::<crate::pagination::PageParams>().answers::<PageOf<TenantView>>(200),
                op(post_, "Create a tenant (its token is shown once)")
                    .body::<admin::NewTenant>()
                    .answers::<TenantView>(201)
                    .creates("id"),
            ],
        )
        .add(
            "/api/admin/tenants/{id}/retention",
            get(admin::retention).put(admin::retention_set),
            [
                op(get_, "A tenant's own retention of finished runs, what applies, and the operator's maximum")
                    .answers::<AnyObject>(200),
                op(put_, "Set a tenant's own retention (never longer than the operator's)")
                    .body::<admin::RetentionBody>()
                    .answers::<AnyObject>(200),
            ],
        )
        .add(
            "/api/admin/incidents",
            get(admin::incidents),
            [op(get_, "Every tenant's incidents, with detail").query::<crate::pagination::PageParams>().answers::<PageOf<AdminIncidentView>>(200)],
        )
        .add(
            "/api/admin/incidents/{id}",
            get(admin::incident),
            [op(get_, "An incident with its detail").answers::<AdminIncidentView>(200)],
        )
        .add(
            "/api/admin/audit",
            get(audit::admin_audit),
            [op(get_, "The audit log of every tenant and the operator, newest first (?from=&to=&actor=&object=&tenant=)").query::<audit::AdminAuditQuery>()
                .answers::<PageOf<audit::AuditView>>(200)],
        )
        .add(
            "/api/me",
            get(tokens::me),
            [op(get_, "The calling token: its tenant, name, role and what the role may do")
                .viewer()
                .answers::<tokens::Me>(200)],
        )
        .add(
            "/api/tokens",
            get(tokens::list).post(tokens::create),
            [
                op(get_, "The tenant's API tokens (never their secrets)").query::<crate::pagination::PageParams>()
                    .tenant_admin()
                    .answers::<PageOf<tokens::TokenView>>(200),
                op(post_, "Make a named API token with a role (its secret is shown once)")
                    .tenant_admin()
                    .body::<tokens::NewTokenBody>()
                    .answers::<tokens::TokenCreated>(201)
                    .creates("id"),
            ],
        )
        .add(
            "/api/tokens/{id}",
            axum::routing::delete(tokens::revoke),
            [op(delete_, "Revoke a token at once (the tenant's last admin token is kept)")
                .tenant_admin()
                .empty(204)],
        )
        .add(
            "/api/audit",
            get(audit::tenant_audit),
            [op(get_, "The tenant's audit log, newest first (?from=&to=&actor=&object=)").query::<audit::AuditQuery>()
                .tenant_admin()
                .answers::<PageOf<audit::AuditView>>(200)],
        )
        .add(
            "/api/groups",
            get(desk::groups).post(desk::group_create),
            [
                op(get_, "List groups").query::<crate::pagination::PageParams>().viewer().answers::<PageOf<GroupView>>(200),
                op(post_, "Create a group").editor()
                    .body::<desk::GroupBody>()
                    .answers::<GroupView>(201)
                    .creates("id"),
            ],
        )
        .add(
            "/api/groups/{id}",
            get(desk::group)
                .patch(desk::group_rename)
                .delete(desk::group_delete),
            [
                op(get_, "A group").viewer().answers::<GroupView>(200),
                op(patch_, "Rename a group").editor()
                    .body::<desk::GroupBody>()
                    .answers::<GroupView>(200),
                op(delete_, "Delete a group").editor().empty(204),
            ],
        )
        .add(
            "/api/groups/{id}/members",
            get(desk::members).post(desk::member_add),
            [
                op(get_, "A group's members").query::<crate::pagination::PageParams>().viewer().answers::<PageOf<MemberView>>(200),
                op(post_, "Add a member").editor()
                    .body::<desk::NewMember>()
                    .answers::<MemberView>(201)
                    .creates("id"),
            ],
        )
        .add(
            "/api/groups/{id}/members/{member_id}",
            axum::routing::patch(desk::member_update).delete(desk::member_delete),
            [
                op(patch_, "Change a member").editor()
                    .body::<desk::MemberPatch>()
                    .answers::<MemberView>(200),
                op(delete_, "Remove a member").editor().empty(204),
            ],
        )
        .add(
            "/api/ticket-types",
            get(desk::ticket_types).post(desk::ticket_type_create),
            [
                op(get_, "List ticket types").query::<crate::pagination::PageParams>().viewer().answers::<PageOf<TicketTypeView>>(200),
                op(post_, "Create a ticket type").editor()
                    .body::<desk::NewTicketType>()
                    .answers::<TicketTypeView>(201)
                    .creates("id"),
            ],
        )
        .add(
            "/api/ticket-types/{id}",
            get(desk::ticket_type)
                .patch(desk::ticket_type_update)
                .delete(desk::ticket_type_delete),
            [
                op(get_, "A ticket type").viewer().answers::<TicketTypeView>(200),
                op(
                    patch_,
                    "Rename a ticket type or replace its statuses or fields",
                ).editor()
                .body::<desk::TicketTypePatch>()
                .answers::<TicketTypeView>(200),
                op(
                    delete_,
                    "Delete a ticket type no automation or open ticket uses",
                ).editor()
                .empty(204),
            ],
        )
        .add(
            "/api/automations",
            get(automations::list).post(automations::create),
            [
                op(get_, "List automations").query::<crate::pagination::PageParams>().viewer().answers::<PageOf<AnyObject>>(200),
                op(post_, "Create an automation").editor()
                    .body::<AnyObject>()
                    .answers::<AnyObject>(201)
                    .creates("id"),
            ],
        )
        .add(
            "/api/catalogue",
            get(automations::catalogue),
            [op(get_, "The step ops with their inputs and outputs, and the trigger and condition vocabulary").viewer()
                .answers::<AnyObject>(200)],
        )
        .add(
            "/api/automations/test",
            post(dry_runs::test_unsaved),
            [op(post_, "Dry-run an unsaved definition on a sample input: the step log a run would write, writing nothing").editor()
                .body::<dry_runs::TestBody>()
                .answers::<DryRunAnswer>(200)],
        )
        .add(
            "/api/automations/validate",
            post(automations::validate_only),
            [op(post_, "Check an automation without saving it: every problem at its path, and the warnings").editor()
                .body::<AnyObject>()
                .answers::<AnyObject>(200)],
        )
        .add(
            "/api/automations/{id}",
            get(automations::get)
                .put(automations::replace)
                .delete(automations::delete),
            [
                op(get_, "An automation").viewer().answers::<AnyObject>(200),
                op(put_, "Replace an automation").editor()
                    .body::<AnyObject>()
                    .answers::<AnyObject>(200),
                op(delete_, "Delete an automation").editor().empty(204),
            ],
        )
        .add(
            "/api/automations/{id}/test",
            post(dry_runs::test_saved),
            [op(post_, "Dry-run a saved automation (current version, or \"version\") on a sample input, writing nothing").editor()
                .body::<dry_runs::TestBody>()
                .answers::<DryRunAnswer>(200)],
        )
        .add(
            "/api/automations/{id}/pause",
            post(automations::pause),
            [op(post_, "Pause an automation (runs in flight finish, or are held)").editor()
                .optional_body::<automations::PauseBody>()
                .answers::<AnyObject>(200)],
        )
        .add(
            "/api/automations/{id}/versions",
            get(automations::versions_list),
            [op(get_, "An automation's versions, newest first").query::<crate::pagination::PageParams>().viewer().answers::<PageOf<AnyObject>>(200)],
        )
        .add(
            "/api/automations/{id}/versions/{version}",
            get(automations::version_get),
            [op(get_, "One version with its definition").viewer().answers::<AnyObject>(200)],
        )
        .add(
            "/api/automations/{id}/versions/{version}/diff",
            get(automations::version_diff),
            [op(get_, "What changed from ?against= (default: the version before)").query::<automations::DiffQuery>().viewer()
                .answers::<AnyObject>(200)],
        )
        .add(
            "/api/automations/{id}/rollback",
            post(automations::rollback),
            [op(post_, "A new version with an earlier version's definition").editor()
                .body::<automations::RollbackBody>()
                .answers::<AnyObject>(200)],
        )
        .add(
            "/api/automations/{id}/rotate-webhook",
            post(automations::rotate_webhook),
            [op(post_, "Rotate the webhook URL: a new one; the old one keeps working for graceSec seconds (default 0, at most 7 days)").editor()
                .optional_body::<automations::RotateWebhookBody>()
                .answers::<AnyObject>(200)],
        )
        .add(
            "/api/automations/{id}/rotate-signing-secret",
            post(automations::rotate_signing_secret),
            [op(post_, "Rotate the signing secret: a new one, shown once; the old one keeps verifying for overlapSec seconds (default 0, at most 7 days)").editor()
                .optional_body::<automations::RotateSigningSecretBody>()
                .answers::<AnyObject>(200)],
        )
        .add(
            "/api/automations/{id}/resume",
            post(automations::resume),
            [op(post_, "Resume an automation").editor().answers::<AnyObject>(200)],
        )
        .add(
            "/api/automations/{id}/runs",
            post(automations::start_run),
            [op(post_, "Start a manual run (the body is `_body`)").editor()
                .optional_body::<Value>()
                .answers::<RunAccepted>(202)
                .creates_under("runId", "/api/runs")],
        )
        .add(
            "/api/tickets",
            get(desk::tickets),
            [op(get_, "List tickets (?status=&tag=&closed=&assignee=&type=)").query::<desk::TicketQuery>().viewer().answers::<PageOf<TicketView>>(200)],
        )
        .add(
            "/api/tickets/{id}",
            get(desk::ticket).patch(desk::ticket_change),
            [
                op(get_, "A ticket with its log").viewer().answers::<TicketView>(200),
                op(patch_, "A person's change to a ticket").editor()
                    .body::<desk::TicketPatch>()
                    .answers::<TicketView>(200),
            ],
        )
        .add(
            "/api/runs",
            get(runs::list),
            [op(
                get_,
                "List runs, newest first (?status=&automation=&trigger=)",
            ).query::<runs::RunQuery>().viewer()
            .answers::<PageOf<RunView>>(200)],
        )
        .add(
            "/api/dashboard/runs",
            get(runs::list),
            [op(get_, "List runs (the dashboard's name)").query::<runs::RunQuery>().viewer().answers::<PageOf<RunView>>(200)],
        )
        .add(
            "/api/runs/bulk",
            post(bulk::start),
            [op(post_, "Retry or cancel every run matching a filter, as a bulk action of its own (\"preview\": true counts the matches)").editor()
                .body::<bulk::BulkBody>()
                .answers::<bulk::BulkStarted>(202)
                .also_answers::<bulk::BulkPreview>(200)
                .creates("id")],
        )
        .add(
            "/api/runs/bulk/{id}",
            get(bulk::get),
            [op(get_, "A bulk action's progress").viewer().answers::<bulk::BulkView>(200)],
        )
        .add(
            "/api/runs/bulk/{id}/cancel",
            post(bulk::cancel),
            [op(post_, "Stop a bulk action between two runs").editor().answers::<bulk::BulkCancelAnswer>(200)],
        )
        .add(
            "/api/runs/{id}",
            get(runs::get),
            [op(get_, "A run with its step log").viewer().answers::<RunView>(200)],
        )
        .add(
            "/api/runs/{id}/cancel",
            post(runs::cancel),
            [op(post_, "Cancel a run (two-phase)").editor().answers::<runs::CancelAnswer>(200)],
        )
        .add(
            "/api/runs/{id}/retry",
            post(runs::retry),
            [op(post_, "Retry a failed run from its checkpoint, on its own version; {\"version\": \"current\"} starts its input anew on the current version").editor()
                .optional_body::<runs::RetryBody>()
                .answers::<RunAccepted>(202)
                .creates_under("runId", "/api/runs")],
        )
        .add(
            "/api/incidents",
            get(desk::incidents),
            [op(get_, "List the tenant's incidents").query::<crate::pagination::PageParams>().viewer().answers::<PageOf<IncidentView>>(200)],
        )
        .add(
            "/api/incidents/{id}",
            get(desk::incident),
            [op(get_, "An incident").viewer().answers::<IncidentView>(200)],
        )
        .add(
            "/api/incidents/{id}/resolve",
            post(desk::incident_resolve),
            [op(post_, "Resolve an incident").editor().answers::<IncidentView>(200)],
        )
        .add(
            "/api/secrets",
            get(secrets::secret_list),
            [op(
                get_,
                "List the tenant's secrets: names, keyVersion, updatedAt; never values",
            ).viewer()
            .answers::<PageOf<secrets::SecretView>>(200)],
        )
        .add(
            "/api/services",
            get(services::service_list),
            [op(
                get_,
                "List the tenant's services: breaker state, failures, calls in flight, retryAt",
            ).viewer()
            .answers::<AnyObject>(200)],
        )
        .add(
            "/api/secrets/{name}",
            axum::routing::put(secrets::secret_put).delete(secrets::secret_delete),
            [
                op(
                    put_,
                    "Store or replace a secret (sealed at rest; never answered)",
                ).editor()
                .body::<secrets::SecretBody>()
                .empty(204),
                op(delete_, "Delete a secret").editor().empty(204),
            ],
        )
        .add(
            "/api/mcp-servers",
            get(mcp_servers::mcp_server_list).post(mcp_servers::mcp_server_create),
            [
                op(get_, "List the tenant's MCP servers").viewer().answers::<PageOf<McpServer>>(200),
                op(post_, "Add an MCP server (409 when the name is taken)").editor()
                    .body::<mcp_servers::McpServerBody>()
                    .answers::<McpServer>(201)
                    .creates("name"),
            ],
        )
        .add(
            "/api/mcp-servers/{name}",
            get(mcp_servers::mcp_server_get)
                .put(mcp_servers::mcp_server_put)
                .delete(mcp_servers::mcp_server_delete),
            [
                op(get_, "Read an MCP server").viewer().answers::<McpServer>(200),
                op(put_, "Create or replace an MCP server whole").editor()
                    .body::<mcp_servers::McpServerBody>()
                    .answers::<McpServer>(200),
                op(delete_, "Delete an MCP server").editor().empty(204),
            ],
        )
        .add(
            "/api/mail-servers",
            get(mail_servers::mail_server_list).post(mail_servers::mail_server_create),
            [
                op(get_, "List the tenant's mail servers").viewer().answers::<PageOf<MailServer>>(200),
                op(
                    post_,
                    "Add a mail server for mail/send (409 when the name is taken; 400 for a host the address guard refuses)",
                ).editor()
                .body::<mail_servers::MailServerBody>()
                .answers::<MailServer>(201)
                .creates("name"),
            ],
        )
        .add(
            "/api/mail-servers/{name}",
            get(mail_servers::mail_server_get)
                .put(mail_servers::mail_server_put)
                .delete(mail_servers::mail_server_delete),
            [
                op(get_, "Read a mail server").viewer().answers::<MailServer>(200),
                op(put_, "Create or replace a mail server whole").editor()
                    .body::<mail_servers::MailServerBody>()
                    .answers::<MailServer>(200),
                op(delete_, "Delete a mail server").editor().empty(204),
            ],
        )
        .add(
            "/api/widgets",
            get(widgets::widget_list).post(widgets::widget_create),
            [
                op(
                    get_,
                    "List the dashboard widgets with their data (stale ones are refreshed first)",
                ).viewer()
                .answers::<PageOf<AnyObject>>(200),
                op(post_, "Add a widget: a connector call whose data is cached ttlSec").editor()
                    .body::<AnyObject>()
                    .answers::<AnyObject>(201)
                    .creates("id"),
            ],
        )
        .add(
            "/api/widgets/{id}",
            get(widgets::widget_get)
                .patch(widgets::widget_patch)
                .delete(widgets::widget_delete),
            [
                op(get_, "A widget with its data (refreshed first when stale)").viewer()
                    .answers::<AnyObject>(200),
                op(patch_, "Change some fields of a widget (a new call empties its cache)").editor()
                    .body::<AnyObject>()
                    .answers::<AnyObject>(200),
                op(delete_, "Delete a widget and its cached data").editor().empty(204),
            ],
        )
        .add(
            "/api/widgets/{id}/refresh",
            post(widgets::widget_refresh),
            [op(
                post_,
                "Call the widget's connector now, whatever the cache's age (503 service_waiting when its cap or breaker refuses)",
            ).editor()
            .answers::<AnyObject>(200)],
        )
        .add(
            "/api/apply",
            post(apply::apply),
            [op(post_, "Apply a whole setup, idempotent by names").editor()
                .body::<apply::Setup>()
                .answers::<AnyObject>(200)],
        )
        .add(
            "/api/stream",
            get(crate::stream::stream),
            [op(get_, "Server-Sent Events: run.*, ticket.*, incident.*").viewer().events().empty(200)],
        )
        .add(
            "/api/openapi.json",
            get(crate::openapi::document),
            [Op::public(get_, "This OpenAPI document").answers::<AnyObject>(200)],
        )
}

/// The router under construction and the documentation of its routes.
#[derive(Default)]
struct Routes {
    router: Router<App>,
    docs: Vec<crate::openapi::RouteDoc>,
}

impl Routes {
    fn add<const N: usize>(
        mut self,
        path: &'static str,
        methods: axum::routing::MethodRouter<App>,
        ops: [crate::openapi::Op; N],
    ) -> Self {
        self.router = self.router.route(path, methods);
        self.docs.push(crate::openapi::RouteDoc {
            path,
            ops: ops.into(),
        });
        self
    }
}

/// Every route of the router with its documentation, in table order.
pub fn route_docs() -> Vec<crate::openapi::RouteDoc> {
    table().docs
}

/// Every route of API.md this crate serves and the dashboard page, with their layers.
pub fn router(app: App) -> Router {
    let body_limit = app.config().body_limit;
    table()
        .router
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::auth::guard,
        ))
        .merge(crate::dashboard::routes())
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::error::add_retry_after,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::metrics::measure_webhook,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request<axum::body::Body>| {
                    tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %redacted_path(request.uri().path()),
                    )
                })
                .on_response(DefaultOnResponse::new().level(Level::DEBUG)),
        )
        .with_state(app)
}

async fn no_route() -> Response {
    ApiError::NotFound("route").into_response()
}

async fn wrong_method() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(serde_json::json!({"error": {
            "code": "method_not_allowed",
            "message": "this route does not take that method",
        }})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_paths_are_redacted_for_logs() {
        assert_eq!(
            redacted_path("/webhook/wh_secret123"),
            "/webhook/{token}",
            "the token is hidden"
        );
        assert_eq!(
            redacted_path("/api/runs"),
            "/api/runs",
            "other paths are kept"
        );
    }
}
