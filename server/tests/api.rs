//! The REST API through the router: health, auth (401s, admin vs tenant), CRUD of every
//! resource, automation validation (422 listing every problem), tickets with their log
//! and a person's change, incidents with and without `detail`, runs (list filters, step
//! log, cancel, retry), pagination, and `POST /api/apply` idempotent by names. Tenant
//! isolation, route by route, is the matrix of `server/tests/isolation.rs`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::http::{Method, StatusCode};
use fronta_desk::store::{IncidentReport, TicketUpsert};
use fronta_desk::{Origin, TenantId};
use fronta_engine::store::{
    CancelReply, CheckpointParams, ClaimBatch, ClaimParams, Enqueued, Finish, FinishReply,
    HeartbeatReply, LeaseRenewal, RetryReply, RunFilter, RunStats, StoreResult,
};
use fronta_engine::{Dispatcher, NewRun, Run, RunId, RunStore, StoreError};
use serde_json::{Value, json};
use support::{
    ADMIN, Harness, failing_automation, order_body, order_type, orders_automation, test_config,
    webhook_path,
};
use tokio::sync::Notify;

async fn ticket(harness: &Harness, tenant: TenantId, external_id: &str) -> String {
    let write = harness
        .desk()
        .ticket_upsert(
            tenant,
            TicketUpsert {
                external_id: external_id.into(),
                title: Some(format!("Ticket {external_id}")),
                ticket_type: Some("order".into()),
                status: Some("waiting-to-pack".into()),
                tags: vec!["new".into()],
                ..TicketUpsert::default()
            },
            Origin::Person,
        )
        .await
        .expect("a ticket");
    write.ticket.id.to_string()
}

async fn incident(harness: &Harness, tenant: TenantId, cause: &str) -> String {
    let (incident, _) = harness
        .desk()
        .incident_report(
            tenant,
            IncidentReport {
                cause: cause.into(),
                title: "The automation did not finish; we lost no data.".into(),
                impact: "Nothing was lost.".into(),
                detail: json!({"run": "secret-run-id", "failedStep": "assign"}),
                ticket: None,
            },
        )
        .await
        .expect("an incident");
    incident.id.to_string()
}

fn items(reply: &support::Reply) -> Vec<Value> {
    reply.json["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a page: {} {}", reply.status, reply.json))
        .clone()
}

#[tokio::test]
async fn health_answers_200_and_readiness_follows_the_run_store() {
    let harness = Harness::new();
    let health = harness.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(health.status, StatusCode::OK, "healthz");
    let ready = harness.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(ready.status, StatusCode::OK, "readyz with a working store");

    let broken: Arc<dyn RunStore> = Arc::new(Broken { stall: false });
    let app = fronta_server::App::new(
        test_config(),
        fronta_server::Ports {
            runs: broken.clone(),
            desk: Arc::new(harness.store.clone()),
            access: Arc::new(harness.store.clone()),
            automations: Arc::new(harness.store.clone()),
            secrets: Arc::new(harness.store.clone()),
            secret_cipher: None,
            limits: Arc::new(harness.store.clone()),
            mcp_servers: Arc::new(harness.store.clone()),
            mail_servers: Arc::new(harness.store.clone()),
            hosts: Arc::new(fronta_connectors::AddressPolicy::default()),
            widgets: Arc::new(harness.store.clone()),
            connectors: None,
        },
        Dispatcher::from_registry(broken, &harness.registry),
    )
    .expect("an app");
    let response = tower::ServiceExt::oneshot(
        fronta_server::router(app),
        axum::http::Request::get("/readyz")
            .body(axum::body::Body::empty())
            .expect("a request"),
    )
    .await
    .expect("an answer");
    assert_eq!(
        response.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "503 when the run store does not answer"
    );
    assert!(
        response.headers().get("retry-after").is_some(),
        "readiness's 503 says when to come back too"
    );
}

/// The app of `harness` with a run store that is gone (`stall`: never answers).
fn with_broken_runs(
    harness: &Harness,
    config: fronta_server::ServerConfig,
    stall: bool,
) -> axum::Router {
    let broken: Arc<dyn RunStore> = Arc::new(Broken { stall });
    let app = fronta_server::App::new(
        config,
        fronta_server::Ports {
            runs: broken.clone(),
            desk: Arc::new(harness.store.clone()),
            access: Arc::new(harness.store.clone()),
            automations: Arc::new(harness.store.clone()),
            secrets: Arc::new(harness.store.clone()),
            secret_cipher: None,
            limits: Arc::new(harness.store.clone()),
            mcp_servers: Arc::new(harness.store.clone()),
            mail_servers: Arc::new(harness.store.clone()),
            hosts: Arc::new(fronta_connectors::AddressPolicy::default()),
            widgets: Arc::new(harness.store.clone()),
            connectors: None,
        },
        Dispatcher::from_registry(broken, &harness.registry),
    )
    .expect("an app");
    fronta_server::router(app)
}

#[tokio::test]
async fn a_database_outage_answers_webhooks_503_with_retry_after_never_202() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let reply = harness
        .post("/api/ticket-types", &token, support::order_type())
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "type: {}", reply.json);
    let path = support::webhook_path(
        &harness
            .automation(&token, support::orders_automation())
            .await,
    );
    let config = fronta_server::ServerConfig {
        unavailable_retry_after: Duration::from_millis(6500),
        webhook_store_deadline: Duration::from_millis(200),
        ..test_config()
    };
    for (stall, case) in [(false, "refused"), (true, "stalled")] {
        let router = with_broken_runs(&harness, config.clone(), stall);
        let request = axum::http::Request::post(path.as_str())
            .header("content-type", "application/json")
            .body(axum::body::Body::from(support::order_body("7001")))
            .expect("a request");
        // A guard, not a timing check: a stalled store must not hold the request forever.
        let response = tokio::time::timeout(
            Duration::from_secs(30),
            tower::ServiceExt::oneshot(router, request),
        )
        .await
        .unwrap_or_else(|_| panic!("{case}: the webhook answered"))
        .expect("an answer");
        assert_eq!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{case}: 503, never 202 without a commit"
        );
        assert_eq!(
            response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok()),
            Some("7"),
            "{case}: Retry-After is the configured wait, rounded up"
        );
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("a body");
        let body: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(body["error"]["code"], "unavailable", "{case}: {body}");
        assert_eq!(body["error"]["retryAfter"], 7, "{case}: {body}");
        assert!(body["error"]["message"].is_string(), "{case}: {body}");
    }
    assert_eq!(
        harness.runs().run_stats().await.expect("stats").queued,
        0,
        "nothing was enqueued anywhere"
    );
}

/// A run store whose database is gone: every call fails as unavailable, or (`stall`)
/// never answers, as over a partition.
struct Broken {
    stall: bool,
}

impl Broken {
    async fn gone<T>(&self) -> StoreResult<T> {
        if self.stall {
            std::future::pending::<()>().await;
        }
        Err(StoreError::Unavailable("connection refused".into()))
    }
}

#[async_trait]
impl RunStore for Broken {
    async fn run_enqueue_many(&self, _: Vec<NewRun>) -> StoreResult<Vec<Enqueued>> {
        self.gone().await
    }
    async fn run_claim(&self, _: ClaimParams) -> StoreResult<ClaimBatch> {
        self.gone().await
    }
    async fn run_heartbeat_many(&self, _: Vec<LeaseRenewal>) -> StoreResult<Vec<HeartbeatReply>> {
        self.gone().await
    }
    async fn run_checkpoint(&self, _: CheckpointParams) -> StoreResult<()> {
        self.gone().await
    }
    async fn run_finish_many(&self, _: Vec<Finish>) -> StoreResult<Vec<FinishReply>> {
        self.gone().await
    }
    async fn run_request_cancel(&self, _: RunId) -> StoreResult<CancelReply> {
        self.gone().await
    }
    async fn run_retry(&self, _: RunId) -> StoreResult<RetryReply> {
        self.gone().await
    }
    async fn run_get(&self, _: RunId) -> StoreResult<Option<Run>> {
        self.gone().await
    }
    async fn run_find_by_key(&self, _: &str, _: &str) -> StoreResult<Option<Run>> {
        self.gone().await
    }
    async fn run_list(&self, _: RunFilter) -> StoreResult<Vec<Run>> {
        self.gone().await
    }
    async fn run_prune(&self, _: &fronta_engine::store::Prune) -> StoreResult<u64> {
        self.gone().await
    }
    async fn run_stats(&self) -> StoreResult<RunStats> {
        self.gone().await
    }
    async fn run_busy(&self) -> StoreResult<bool> {
        self.gone().await
    }
    async fn store_ready(&self) -> StoreResult<()> {
        self.gone().await
    }
    fn enqueue_signal(&self) -> Arc<Notify> {
        Arc::new(Notify::new())
    }
}

#[tokio::test]
async fn missing_or_wrong_tokens_answer_401_in_the_error_shape() {
    let harness = Harness::new();
    let (_, tenant_token) = harness.tenant("Acme").await;
    let cases: [(&str, &str, Option<&str>); 6] = [
        ("no token", "/api/groups", None),
        ("unknown tenant token", "/api/groups", Some("ft_nope")),
        ("admin token on a tenant route", "/api/groups", Some(ADMIN)),
        ("no token on admin", "/api/admin/tenants", None),
        (
            "tenant token on admin",
            "/api/admin/tenants",
            Some(tenant_token.as_str()),
        ),
        (
            "wrong admin token",
            "/api/admin/incidents",
            Some("fa_guess"),
        ),
    ];
    for (case, path, token) in cases {
        let reply = harness.call(Method::GET, path, token, None).await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{case}: {}",
            reply.json
        );
        assert_eq!(reply.code(), "unauthorized", "{case}: code");
        assert!(
            reply.json["error"]["message"].is_string(),
            "{case}: a message"
        );
    }
    let request = axum::http::Request::get("/api/groups")
        .header("authorization", format!("Basic {tenant_token}"))
        .body(axum::body::Body::empty())
        .expect("a request");
    let reply = harness.send(request).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "another scheme");
    let ok = harness.get("/api/groups", &tenant_token).await;
    assert_eq!(ok.status, StatusCode::OK, "the tenant's own token works");
}

#[tokio::test]
async fn tenant_api_is_rate_limited_per_tenant() {
    let harness = Harness::with_config(fronta_server::ServerConfig {
        api_rate_per_tenant: Some(fronta_server::RateLimit::new(0.01, 2)),
        ..test_config()
    });
    let (_, token) = harness.tenant("Acme").await;
    let (_, other) = harness.tenant("Other").await;
    for n in 0..2 {
        assert_eq!(
            harness.get("/api/groups", &token).await.status,
            StatusCode::OK,
            "within the burst: {n}"
        );
    }
    let limited = harness.get("/api/groups", &token).await;
    assert_eq!(
        limited.status,
        StatusCode::TOO_MANY_REQUESTS,
        "429: {}",
        limited.json
    );
    assert!(
        limited
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|secs| secs >= 1),
        "Retry-After ≥ 1"
    );
    assert_eq!(
        harness.get("/api/groups", &other).await.status,
        StatusCode::OK,
        "another tenant is not limited"
    );
}

#[tokio::test]
async fn admin_creates_tenants_whose_token_is_shown_once() {
    let harness = Harness::new();
    let created = harness
        .post("/api/admin/tenants", ADMIN, json!({"name": "Acme"}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "201: {}", created.json);
    assert_eq!(created.json["name"], "Acme", "name");
    let token = created.text("token");
    assert!(token.starts_with("ft_"), "a tenant token: {token}");
    let list = harness.get("/api/admin/tenants", ADMIN).await;
    assert_eq!(items(&list).len(), 1, "one tenant: {}", list.json);
    assert!(
        !list
            .bytes
            .windows(token.len())
            .any(|w| w == token.as_bytes()),
        "the list never shows the token"
    );
    assert_eq!(
        harness.get("/api/groups", &token).await.status,
        StatusCode::OK,
        "the token works"
    );
    let bad = harness
        .post(
            "/api/admin/tenants",
            ADMIN,
            json!({"name": "X", "plan": "gold"}),
        )
        .await;
    assert_eq!(
        bad.status,
        StatusCode::BAD_REQUEST,
        "unknown fields are refused: {}",
        bad.json
    );
}

#[tokio::test]
async fn groups_and_members_are_created_read_changed_and_deleted() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let group = harness
        .post("/api/groups", &token, json!({"name": "warehouse"}))
        .await;
    assert_eq!(group.status, StatusCode::CREATED, "201: {}", group.json);
    let id = group.text("id");
    let dup = harness
        .post("/api/groups", &token, json!({"name": "warehouse"}))
        .await;
    assert_eq!(
        dup.status,
        StatusCode::CONFLICT,
        "names are unique: {}",
        dup.json
    );

    let renamed = harness
        .call(
            Method::PATCH,
            &format!("/api/groups/{id}"),
            Some(&token),
            Some(json!({"name": "store"})),
        )
        .await;
    assert_eq!(renamed.json["name"], "store", "renamed: {}", renamed.json);
    assert_eq!(
        harness.get(&format!("/api/groups/{id}"), &token).await.json["name"],
        "store",
        "read back"
    );

    let members = format!("/api/groups/{id}/members");
    let eva = harness
        .post(
            &members,
            &token,
            json!({"name": "Eva", "email": "eva@acme.test", "capacity": 5}),
        )
        .await;
    assert_eq!(eva.status, StatusCode::CREATED, "member: {}", eva.json);
    assert_eq!(eva.json["capacity"], 5, "capacity");
    let jan = harness.post(&members, &token, json!({"name": "Jan"})).await;
    assert_eq!(jan.json["capacity"], 10, "the default capacity");
    let eva_id = eva.text("id");
    let changed = harness
        .call(
            Method::PATCH,
            &format!("{members}/{eva_id}"),
            Some(&token),
            Some(json!({"capacity": 7, "email": null})),
        )
        .await;
    assert_eq!(changed.status, StatusCode::OK, "changed: {}", changed.json);
    assert_eq!(changed.json["capacity"], 7, "capacity changed");
    assert_eq!(changed.json["email"], Value::Null, "email cleared");
    assert_eq!(
        items(&harness.get(&members, &token).await).len(),
        2,
        "two members"
    );
    let deleted = harness
        .call(
            Method::DELETE,
            &format!("{members}/{eva_id}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "member deleted");
    assert_eq!(
        items(&harness.get(&members, &token).await).len(),
        1,
        "one left"
    );

    let gone = harness
        .call(
            Method::DELETE,
            &format!("/api/groups/{id}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT, "group deleted");
    assert_eq!(
        harness
            .get(&format!("/api/groups/{id}"), &token)
            .await
            .status,
        StatusCode::NOT_FOUND,
        "gone"
    );
}

#[tokio::test]
async fn ticket_types_are_created_listed_and_read() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let created = harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "201: {}", created.json);
    assert_eq!(
        created.json["statuses"],
        json!(["waiting-to-pack", "shipped"]),
        "statuses"
    );
    assert_eq!(
        created.json["fields"],
        json!([{"name": "amount", "type": "number"}]),
        "fields"
    );
    let id = created.text("id");
    let read = harness
        .get(&format!("/api/ticket-types/{id}"), &token)
        .await;
    assert_eq!(read.json, created.json, "read back");
    assert_eq!(
        items(&harness.get("/api/ticket-types", &token).await).len(),
        1,
        "listed"
    );
}

#[tokio::test]
async fn ticket_types_are_patched_and_a_rename_reaches_their_tickets() {
    let harness = Harness::new();
    let (tenant, token) = harness.tenant("Acme").await;
    let created = harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    harness
        .post(
            "/api/ticket-types",
            &token,
            json!({"name": "error", "statuses": ["new"]}),
        )
        .await;
    let path = format!("/api/ticket-types/{}", created.text("id"));
    let ticket_id = ticket(&harness, tenant, "o-1").await;
    let patch = |body: Value| harness.call(Method::PATCH, &path, Some(&token), Some(body));

    let refused = patch(json!({"statuses": ["shipped"]})).await;
    assert_eq!(
        refused.status,
        StatusCode::CONFLICT,
        "409 in_use: {}",
        refused.json
    );
    assert_eq!(refused.code(), "in_use", "{}", refused.json);
    assert!(
        refused.json["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("waiting-to-pack")),
        "the refusal names the held status: {}",
        refused.json
    );
    let taken = patch(json!({"name": "error"})).await;
    assert_eq!(taken.status, StatusCode::CONFLICT, "409: {}", taken.json);
    let unknown = patch(json!({"colour": "red"})).await;
    assert_eq!(
        unknown.status,
        StatusCode::BAD_REQUEST,
        "an unknown field: {}",
        unknown.json
    );

    let renamed = patch(json!({"name": "purchase",
                               "statuses": ["waiting-to-pack", "shipped", "returned"]}))
    .await;
    assert_eq!(renamed.status, StatusCode::OK, "200: {}", renamed.json);
    assert_eq!(
        (
            &renamed.json["name"],
            &renamed.json["statuses"],
            &renamed.json["fields"]
        ),
        (
            &json!("purchase"),
            &json!(["waiting-to-pack", "shipped", "returned"]),
            &json!([{"name": "amount", "type": "number"}])
        ),
        "renamed, statuses replaced, fields kept: {}",
        renamed.json
    );
    assert_eq!(
        harness.get(&path, &token).await.json,
        renamed.json,
        "the change reads back"
    );
    let ticket = harness
        .get(&format!("/api/tickets/{ticket_id}"), &token)
        .await;
    assert_eq!(
        ticket.json["type"], "purchase",
        "the ticket carries the new name: {}",
        ticket.json
    );
}

#[tokio::test]
async fn automations_are_created_read_replaced_paused_and_deleted() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    let created = harness.automation(&token, orders_automation()).await;
    let id = created["id"].as_str().expect("an id").to_owned();
    assert!(
        created["webhookUrl"]
            .as_str()
            .is_some_and(|url| url.starts_with("http://fronta.test/webhook/")),
        "a full webhook URL: {created}"
    );
    assert_eq!(created["enabled"], true, "enabled by default");
    assert_eq!(created["signed"], false, "unsigned");

    assert_eq!(
        created["warnings"],
        json!([]),
        "a save says it has nothing to warn of"
    );

    let path = format!("/api/automations/{id}");
    let mut saved = created.clone();
    saved.as_object_mut().expect("an object").remove("warnings");
    assert_eq!(
        harness.get(&path, &token).await.json,
        saved,
        "read back: the saved automation, without the save's warnings"
    );
    assert_eq!(
        items(&harness.get("/api/automations", &token).await).len(),
        1,
        "listed"
    );

    // A PUT of what was read, changed: read-only fields are stripped.
    let mut changed = created.clone();
    changed["name"] = json!("Orders (v2)");
    let replaced = harness
        .call(Method::PUT, &path, Some(&token), Some(changed))
        .await;
    assert_eq!(
        replaced.status,
        StatusCode::OK,
        "replaced: {}",
        replaced.json
    );
    assert_eq!(replaced.json["name"], "Orders (v2)", "new name");
    assert_eq!(
        replaced.json["webhookUrl"], created["webhookUrl"],
        "the webhook token is kept across updates"
    );

    let mut secret = created.clone();
    secret["signingSecret"] = json!(true);
    let refused = harness
        .call(Method::PUT, &path, Some(&token), Some(secret))
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.json
    );
    assert_eq!(
        refused.json["error"]["problems"][0]["path"], "signingSecret",
        "a new secret on PUT is a problem, not ignored"
    );

    let paused = harness
        .post(&format!("{path}/pause"), &token, json!({}))
        .await;
    assert_eq!(paused.json["enabled"], false, "paused");
    let run = harness
        .post(&format!("{path}/runs"), &token, json!({}))
        .await;
    assert_eq!(
        run.status,
        StatusCode::CONFLICT,
        "no manual run while paused"
    );
    assert_eq!(run.code(), "automation_paused", "code");
    let resumed = harness
        .post(&format!("{path}/resume"), &token, json!({}))
        .await;
    assert_eq!(resumed.json["enabled"], true, "resumed");

    let deleted = harness
        .call(Method::DELETE, &path, Some(&token), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "deleted");
    assert_eq!(
        harness.get(&path, &token).await.status,
        StatusCode::NOT_FOUND,
        "gone"
    );
}

#[tokio::test]
async fn generated_signing_secret_is_shown_once() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    let mut definition = orders_automation();
    definition["signingSecret"] = json!(true);
    let created = harness.automation(&token, definition).await;
    let secret = created["signingSecret"].as_str().expect("the new secret");
    assert!(
        secret.starts_with("whsec_"),
        "Standard Webhooks form: {secret}"
    );
    assert_eq!(created["signed"], true, "signed");
    let id = created["id"].as_str().expect("an id");
    let read = harness.get(&format!("/api/automations/{id}"), &token).await;
    assert!(
        read.json.get("signingSecret").is_none(),
        "never shown again"
    );
}

/// An automation with two problems: an unknown op (`steps[0]`) and a status its ticket
/// type does not have (`steps[1]`).
fn broken_automation() -> Value {
    json!({
        "name": "Broken",
        "trigger": {"type": "webhook", "params": [
            {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
        "steps": [
            {"name": "a", "op": "ticket/teleport", "input": {}},
            {"name": "b", "op": "ticket/upsert",
             "input": {"externalId": "{{orderId}}", "type": "order", "status": "lost"}}
        ]
    })
}

#[tokio::test]
async fn invalid_automation_answers_422_listing_every_problem() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    let reply = harness
        .post("/api/automations", &token, broken_automation())
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "422: {}",
        reply.json
    );
    assert_eq!(reply.code(), "invalid_automation", "code");
    let problems = reply.json["error"]["problems"]
        .as_array()
        .expect("problems");
    let paths: Vec<&str> = problems.iter().filter_map(|p| p["path"].as_str()).collect();
    assert!(
        paths.iter().any(|p| p.starts_with("steps[0]")),
        "the unknown op: {paths:?}"
    );
    assert!(
        paths.iter().any(|p| p.starts_with("steps[1]")),
        "the status not in the type: {paths:?}"
    );
    assert!(
        problems.iter().all(|p| p["message"].is_string()),
        "each with a message"
    );

    let shape = harness
        .post(
            "/api/automations",
            &token,
            json!({"name": 5, "trigger": {"type": "manual"}, "phase": 1}),
        )
        .await;
    assert_eq!(
        shape.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "shape problems too"
    );
    assert!(
        shape.json["error"]["problems"]
            .as_array()
            .is_some_and(|p| p.len() >= 2),
        "both problems: {}",
        shape.json
    );
}

#[tokio::test]
async fn tickets_are_listed_with_filters_read_with_their_log_and_changed_by_a_person() {
    let harness = Harness::new();
    let (tenant, token) = harness.tenant("Acme").await;
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    let group = harness
        .post("/api/groups", &token, json!({"name": "warehouse"}))
        .await;
    let eva = harness
        .post(
            &format!("/api/groups/{}/members", group.text("id")),
            &token,
            json!({"name": "Eva"}),
        )
        .await;
    let first = ticket(&harness, tenant, "order-1").await;
    ticket(&harness, tenant, "order-2").await;

    let changed = harness
        .call(
            Method::PATCH,
            &format!("/api/tickets/{first}"),
            Some(&token),
            Some(json!({"status": "shipped", "tags": ["vip"], "assignee": eva.text("id"), "closed": true})),
        )
        .await;
    assert_eq!(changed.status, StatusCode::OK, "changed: {}", changed.json);
    assert_eq!(changed.json["status"], "shipped", "status");
    assert_eq!(changed.json["tags"], json!(["vip"]), "tags replaced");
    assert_eq!(changed.json["closed"], true, "closed");
    assert_eq!(changed.json["assignee"]["name"], "Eva", "assignee");
    assert!(
        changed.json["log"]
            .as_array()
            .is_some_and(|log| log.len() >= 2),
        "the change is logged: {}",
        changed.json
    );

    let by = |query: &str| {
        let harness = &harness;
        let token = token.clone();
        let query = query.to_owned();
        async move { items(&harness.get(&format!("/api/tickets?{query}"), &token).await).len() }
    };
    assert_eq!(by("").await, 2, "all");
    assert_eq!(by("status=shipped").await, 1, "status");
    assert_eq!(by("tag=vip").await, 1, "tag");
    assert_eq!(by("closed=false").await, 1, "closed");
    assert_eq!(
        by(&format!("assignee={}", eva.text("id"))).await,
        1,
        "assignee"
    );
    assert_eq!(by("type=order").await, 2, "type");

    let bad_status = harness
        .call(
            Method::PATCH,
            &format!("/api/tickets/{first}"),
            Some(&token),
            Some(json!({"status": "teleported"})),
        )
        .await;
    assert_eq!(
        bad_status.status,
        StatusCode::BAD_REQUEST,
        "a status outside the type: {}",
        bad_status.json
    );
    let unknown_field = harness
        .call(
            Method::PATCH,
            &format!("/api/tickets/{first}"),
            Some(&token),
            Some(json!({"phase": "done"})),
        )
        .await;
    assert_eq!(
        unknown_field.status,
        StatusCode::BAD_REQUEST,
        "unknown fields are errors"
    );
    for (fields, says) in [
        (
            json!({"amount": "lots"}),
            "expects a number, found a string",
        ),
        (
            json!({"colour": "red"}),
            "\"colour\" is not a field of ticket type \"order\"",
        ),
    ] {
        let refused = harness
            .call(
                Method::PATCH,
                &format!("/api/tickets/{first}"),
                Some(&token),
                Some(json!({"fields": fields})),
            )
            .await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "custom fields are typed: {}",
            refused.json
        );
        let message = refused.json["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains(says),
            "the error says {says:?}: {}",
            refused.json
        );
    }
    let typed = harness
        .call(
            Method::PATCH,
            &format!("/api/tickets/{first}"),
            Some(&token),
            Some(json!({"fields": {"amount": 1250}})),
        )
        .await;
    assert_eq!(
        typed.status,
        StatusCode::OK,
        "a number fits: {}",
        typed.json
    );
    assert_eq!(
        typed.json["fields"]["amount"], 1250,
        "stored: {}",
        typed.json
    );
}

#[tokio::test]
async fn a_persons_ticket_change_starts_the_automations_listening_to_it() {
    let harness = Harness::new();
    let (tenant, token) = harness.tenant("Acme").await;
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    harness
        .automation(
            &token,
            json!({"name": "On change", "trigger": {"type": "event", "event": "ticket.changed"},
                   "steps": [{"name": "note", "op": "flow/log", "input": {"message": "changed {{ticket.number}}"}}]}),
        )
        .await;
    let id = ticket(&harness, tenant, "order-1").await;
    harness
        .call(
            Method::PATCH,
            &format!("/api/tickets/{id}"),
            Some(&token),
            Some(json!({"status": "shipped"})),
        )
        .await;
    let runs = harness.get("/api/runs?trigger=event", &token).await;
    assert_eq!(
        items(&runs).len(),
        1,
        "ticket.changed started a run: {}",
        runs.json
    );
}

#[tokio::test]
async fn incidents_hide_detail_from_the_tenant_and_show_it_to_the_admin() {
    let harness = Harness::new();
    let (tenant, token) = harness.tenant("Acme").await;
    let id = incident(&harness, tenant, "automation:x:step:assign").await;
    let list = harness.get("/api/incidents", &token).await;
    assert_eq!(items(&list).len(), 1, "listed: {}", list.json);
    let read = harness.get(&format!("/api/incidents/{id}"), &token).await;
    assert_eq!(read.status, StatusCode::OK, "read: {}", read.json);
    for field in ["title", "impact", "status", "count"] {
        assert!(
            read.json.get(field).is_some(),
            "{field} is shown: {}",
            read.json
        );
    }
    for hidden in ["detail", "cause"] {
        assert!(read.json.get(hidden).is_none(), "{hidden} is hidden");
        assert!(
            items(&list)[0].get(hidden).is_none(),
            "{hidden} is hidden in lists"
        );
    }
    assert!(
        !read.bytes.windows(13).any(|w| w == b"secret-run-id"),
        "nothing of the detail leaks"
    );

    let admin = harness
        .get(&format!("/api/admin/incidents/{id}"), ADMIN)
        .await;
    assert_eq!(
        admin.json["detail"]["failedStep"], "assign",
        "the admin sees detail"
    );
    assert_eq!(
        items(&harness.get("/api/admin/incidents", ADMIN).await)[0]["detail"]["run"],
        "secret-run-id",
        "also in the admin list"
    );

    let resolved = harness
        .post(&format!("/api/incidents/{id}/resolve"), &token, json!({}))
        .await;
    assert_eq!(
        resolved.status,
        StatusCode::OK,
        "resolved: {}",
        resolved.json
    );
    assert_eq!(resolved.json["status"], "resolved", "status resolved");
    assert!(resolved.json.get("detail").is_none(), "still no detail");
}

#[tokio::test]
async fn runs_are_listed_read_with_steps_cancelled_and_retried() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let failing = harness.automation(&token, failing_automation()).await;
    let failing_id = failing["id"].as_str().expect("an id").to_owned();
    let path = webhook_path(&failing);
    let first = harness
        .webhook(&path, &json!({"ref": "not-a-ticket"}).to_string(), &[])
        .await
        .text("runId");
    harness.drain().await;

    let run = harness.get(&format!("/api/runs/{first}"), &token).await;
    assert_eq!(run.status, StatusCode::OK, "read: {}", run.json);
    assert_eq!(run.json["status"], "failed", "failed: {}", run.json);
    assert_eq!(
        run.json["automationId"],
        failing_id.as_str(),
        "automationId"
    );
    assert!(run.json["lastError"].is_string(), "lastError");
    for field in [
        "id",
        "kind",
        "trigger",
        "attempts",
        "maxRetries",
        "reclaims",
        "parks",
        "runAt",
        "createdAt",
        "startedAt",
        "finishedAt",
        "steps",
    ] {
        assert!(run.json.get(field).is_some(), "{field}: {}", run.json);
    }
    assert_eq!(
        items(&harness.get("/api/incidents", &token).await).len(),
        1,
        "the failure opened an incident"
    );

    let retried = harness
        .post(&format!("/api/runs/{first}/retry"), &token, json!({}))
        .await;
    assert_eq!(
        retried.status,
        StatusCode::ACCEPTED,
        "retry: {}",
        retried.json
    );
    assert_eq!(retried.json["status"], "queued", "queued again");
    let again = harness
        .post(&format!("/api/runs/{first}/retry"), &token, json!({}))
        .await;
    assert_eq!(
        again.status,
        StatusCode::CONFLICT,
        "only failed runs: {}",
        again.json
    );
    assert_eq!(again.code(), "run_not_failed", "code");

    let cancelled = harness
        .post(&format!("/api/runs/{first}/cancel"), &token, json!({}))
        .await;
    assert_eq!(
        cancelled.status,
        StatusCode::OK,
        "cancel: {}",
        cancelled.json
    );
    assert_eq!(
        cancelled.json["cancel"], "cancelled",
        "a queued run is cancelled at once"
    );
    let twice = harness
        .post(&format!("/api/runs/{first}/cancel"), &token, json!({}))
        .await;
    assert_eq!(
        twice.status,
        StatusCode::CONFLICT,
        "already finished: {}",
        twice.json
    );
    assert_eq!(twice.code(), "run_finished", "code");

    // Filters: status, automation, trigger.
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    let orders = harness.automation(&token, orders_automation()).await;
    let orders_id = orders["id"].as_str().expect("an id").to_owned();
    harness
        .webhook(&webhook_path(&orders), &order_body("1"), &[])
        .await;
    let manual = harness
        .post(
            &format!("/api/automations/{orders_id}/runs"),
            &token,
            json!({"kind": "k", "data": {"order": {"id": "2"}}}),
        )
        .await;
    assert_eq!(
        manual.status,
        StatusCode::ACCEPTED,
        "manual run: {}",
        manual.json
    );
    let count = |query: &str| {
        let harness = &harness;
        let token = token.clone();
        let query = query.to_owned();
        async move { items(&harness.get(&format!("/api/runs?{query}"), &token).await).len() }
    };
    assert_eq!(count("").await, 3, "all runs");
    assert_eq!(count("status=cancelled").await, 1, "by status");
    assert_eq!(count("status=queued").await, 2, "queued");
    assert_eq!(
        count(&format!("automation={orders_id}")).await,
        2,
        "by automation"
    );
    assert_eq!(count("trigger=manual").await, 1, "by trigger");
    assert_eq!(
        count(&format!("trigger=webhook&automation={failing_id}")).await,
        1,
        "both"
    );
    let newest = harness.get("/api/runs", &token).await;
    assert_eq!(
        items(&newest)[0]["id"],
        manual.json["runId"],
        "newest first"
    );
    let bad = harness.get("/api/runs?status=done", &token).await;
    assert_eq!(
        bad.status,
        StatusCode::BAD_REQUEST,
        "an unknown status: {}",
        bad.json
    );
}

#[tokio::test]
async fn manual_runs_take_an_optional_json_body() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let created = harness
        .automation(
            &token,
            json!({"name": "By hand", "trigger": {"type": "manual"},
                   "steps": [{"name": "note", "op": "flow/log", "input": {"message": "hello"}}]}),
        )
        .await;
    let path = format!(
        "/api/automations/{}/runs",
        created["id"].as_str().expect("an id")
    );
    let without = harness.call(Method::POST, &path, Some(&token), None).await;
    assert_eq!(
        without.status,
        StatusCode::ACCEPTED,
        "no body: {}",
        without.json
    );
    let with = harness
        .post(&path, &token, json!({"note": "from the API"}))
        .await;
    assert_eq!(with.status, StatusCode::ACCEPTED, "a body: {}", with.json);
    let run: RunId = with.text("runId").parse().expect("a run id");
    let stored = harness
        .runs()
        .run_get(run)
        .await
        .expect("read")
        .expect("a run");
    assert_eq!(
        stored.payload["context"]["_body"],
        json!({"note": "from the API"}),
        "the body is _body"
    );
    let shown = harness.get(&format!("/api/runs/{run}"), &token).await;
    assert_eq!(
        shown.json["input"]["_body"],
        json!({"note": "from the API"}),
        "the run shows what it started from: {}",
        shown.json
    );
    let listed = harness.get("/api/runs", &token).await;
    assert!(
        items(&listed).iter().all(|run| run.get("input").is_none()),
        "lists stay small: {}",
        listed.json
    );
    assert_eq!(
        stored.trigger,
        fronta_engine::Trigger::Manual,
        "trigger manual"
    );
    harness.drain().await;
    let read = harness.get(&format!("/api/runs/{run}"), &token).await;
    assert_eq!(read.json["status"], "completed", "it ran: {}", read.json);
    assert_eq!(read.json["steps"][0]["op"], "flow/log", "with its step log");
}

/// Walk a list page by page; every item's id, in order.
async fn walk(harness: &Harness, token: &str, path: &str, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let separator = if path.contains('?') { '&' } else { '?' };
        let mut url = format!("{path}{separator}limit={limit}");
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let page = harness.get(&url, token).await;
        assert_eq!(page.status, StatusCode::OK, "{url}: {}", page.json);
        let items = items(&page);
        assert!(items.len() <= limit, "{url}: at most {limit}");
        ids.extend(
            items
                .iter()
                .map(|item| item["id"].as_str().unwrap_or_default().to_owned()),
        );
        match page.json["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return ids,
        }
    }
    panic!("{path}: the pages never ended");
}

#[tokio::test]
async fn lists_are_paginated_with_a_next_cursor_until_null() {
    let harness = Harness::new();
    let (tenant, token) = harness.tenant("Acme").await;
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    let orders = harness.automation(&token, orders_automation()).await;
    let path = webhook_path(&orders);
    for n in 0..5 {
        harness
            .post("/api/groups", &token, json!({"name": format!("g{n}")}))
            .await;
        ticket(&harness, tenant, &format!("order-{n}")).await;
        harness
            .webhook(&path, &order_body(&n.to_string()), &[])
            .await;
    }

    let groups = walk(&harness, &token, "/api/groups", 2).await;
    assert_eq!(groups.len(), 5, "every group once: {groups:?}");
    let all = items(&harness.get("/api/groups?limit=100", &token).await);
    let names: Vec<&str> = all.iter().filter_map(|g| g["name"].as_str()).collect();
    assert_eq!(names, ["g0", "g1", "g2", "g3", "g4"], "oldest first");

    let tickets = walk(&harness, &token, "/api/tickets", 2).await;
    assert_eq!(tickets.len(), 5, "every ticket once");
    let runs = walk(&harness, &token, "/api/runs", 2).await;
    assert_eq!(runs.len(), 5, "every run once");
    let mut sorted = runs.clone();
    sorted.sort();
    sorted.reverse();
    assert_eq!(runs, sorted, "runs newest first across pages");
    let filtered = walk(&harness, &token, "/api/runs?trigger=webhook", 2).await;
    assert_eq!(filtered, runs, "filtered pages walk the same runs");

    let last = harness.get("/api/groups?limit=5", &token).await;
    assert_eq!(
        last.json["nextCursor"],
        Value::Null,
        "null when nothing follows"
    );
    let bad = harness.get("/api/groups?cursor=garbage", &token).await;
    assert_eq!(
        bad.status,
        StatusCode::BAD_REQUEST,
        "a cursor we never gave"
    );
    assert_eq!(bad.code(), "invalid_cursor", "code");
    let zero = harness.get("/api/groups?limit=0", &token).await;
    assert_eq!(zero.status, StatusCode::BAD_REQUEST, "limit 0");
}

#[tokio::test]
async fn filtered_run_pages_read_a_bounded_number_of_runs_and_the_cursor_reaches_every_match() {
    let harness = Harness::with_config(fronta_server::ServerConfig {
        page_default: 2,
        page_max: 3,
        runs_scan_max: 3,
        ..test_config()
    });
    let (_, token) = harness.tenant("Acme").await;
    let wanted = harness
        .automation(
            &token,
            json!({"name": "Wanted", "trigger": {"type": "manual"}, "steps": []}),
        )
        .await;
    let noise = harness
        .automation(
            &token,
            json!({"name": "Noise", "trigger": {"type": "manual"}, "steps": []}),
        )
        .await;
    let start = |automation: &Value| {
        format!(
            "/api/automations/{}/runs",
            automation["id"].as_str().unwrap_or_default()
        )
    };
    let oldest = harness
        .post(&start(&wanted), &token, json!({}))
        .await
        .text("runId");
    for _ in 0..5 {
        harness.post(&start(&noise), &token, json!({})).await;
    }
    let first = harness
        .get(
            &format!(
                "/api/runs?automation={}",
                wanted["id"].as_str().unwrap_or_default()
            ),
            &token,
        )
        .await;
    assert!(
        items(&first).is_empty(),
        "the first 3 runs read hold no match: {}",
        first.json
    );
    assert!(
        first.json["nextCursor"].is_string(),
        "but the list goes on: {}",
        first.json
    );
    let found = walk(
        &harness,
        &token,
        &format!(
            "/api/runs?automation={}",
            wanted["id"].as_str().unwrap_or_default()
        ),
        2,
    )
    .await;
    assert_eq!(found, vec![oldest], "the cursor reaches the one match");
}

fn setup() -> Value {
    json!({
        "groups": [{"name": "warehouse", "members": [{"name": "Eva", "capacity": 5}, {"name": "Jan"}]}],
        "ticketTypes": [order_type()],
        "automations": [orders_automation()]
    })
}

#[tokio::test]
async fn apply_is_idempotent_by_names() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let first = harness.post("/api/apply", &token, setup()).await;
    assert_eq!(first.status, StatusCode::OK, "applied: {}", first.json);
    assert_eq!(
        first.json["groups"][0]["action"], "created",
        "group created"
    );
    assert_eq!(
        first.json["ticketTypes"][0]["action"], "created",
        "type created"
    );
    assert_eq!(
        first.json["automations"][0]["action"], "created",
        "automation created"
    );
    assert!(
        first.json["automations"][0]["webhookUrl"].is_string(),
        "the webhook URL: {}",
        first.json
    );

    let second = harness.post("/api/apply", &token, setup()).await;
    assert_eq!(
        second.status,
        StatusCode::OK,
        "applied again: {}",
        second.json
    );
    assert_eq!(second.json["groups"][0]["action"], "unchanged", "group");
    assert_eq!(
        second.json["groups"][0]["members"][0]["action"], "unchanged",
        "member"
    );
    assert_eq!(
        second.json["automations"][0]["action"], "unchanged",
        "automation"
    );
    assert_eq!(
        second.json["automations"][0]["id"], first.json["automations"][0]["id"],
        "the same automation"
    );

    let mut changed = setup();
    changed["groups"][0]["members"][0]["capacity"] = json!(8);
    changed["automations"][0]["steps"][0]["input"]["title"] = json!("Web order {{orderId}}");
    let third = harness.post("/api/apply", &token, changed).await;
    assert_eq!(
        third.json["groups"][0]["members"][0]["action"], "updated",
        "member updated"
    );
    assert_eq!(
        third.json["automations"][0]["action"], "updated",
        "automation updated"
    );

    assert_eq!(
        items(&harness.get("/api/groups", &token).await).len(),
        1,
        "one group"
    );
    let group = third.json["groups"][0]["id"].as_str().expect("an id");
    let members = items(
        &harness
            .get(&format!("/api/groups/{group}/members"), &token)
            .await,
    );
    assert_eq!(members.len(), 2, "two members, not four");
    assert_eq!(members[0]["capacity"], 8, "capacity updated");
    assert_eq!(
        items(&harness.get("/api/ticket-types", &token).await).len(),
        1,
        "one type"
    );
    assert_eq!(
        items(&harness.get("/api/automations", &token).await).len(),
        1,
        "one automation"
    );
}

#[tokio::test]
async fn apply_checks_everything_before_writing_anything() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let mut broken = setup();
    broken["automations"]
        .as_array_mut()
        .expect("a list")
        .push(json!({"name": "Bad", "trigger": {"type": "manual"},
                      "steps": [{"name": "x", "op": "no/such-op", "input": {}}]}));
    let reply = harness.post("/api/apply", &token, broken).await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "422: {}",
        reply.json
    );
    assert_eq!(reply.code(), "invalid_setup", "code");
    assert!(
        reply.json["error"]["problems"][0]["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("automations[1]")),
        "the problem's path names the automation: {}",
        reply.json
    );
    assert!(
        items(&harness.get("/api/groups", &token).await).is_empty(),
        "nothing written"
    );

    harness.post("/api/apply", &token, setup()).await;
    let mut other_type = setup();
    other_type["ticketTypes"][0]["statuses"] = json!(["new"]);
    let reply = harness.post("/api/apply", &token, other_type).await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "a changed type its automation's status is not in: {}",
        reply.json
    );
    assert!(
        reply.json["error"]["problems"][0]["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("automations[0]")),
        "the automation is checked against the changed type: {}",
        reply.json
    );
}

/// Everything of a tenant an apply can touch, as the API shows it.
async fn tenant_state(harness: &Harness, token: &str) -> Vec<Value> {
    let mut all = Vec::new();
    for path in ["/api/ticket-types", "/api/groups", "/api/automations"] {
        all.push(harness.get(path, token).await.json);
    }
    for group in items(&harness.get("/api/groups", token).await) {
        let id = group["id"].as_str().unwrap_or_default().to_owned();
        all.push(
            harness
                .get(&format!("/api/groups/{id}/members"), token)
                .await
                .json,
        );
    }
    for automation in items(&harness.get("/api/automations", token).await) {
        let id = automation["id"].as_str().unwrap_or_default().to_owned();
        all.push(
            harness
                .get(&format!("/api/automations/{id}/versions"), token)
                .await
                .json,
        );
    }
    all
}

#[tokio::test]
async fn a_refused_apply_leaves_the_tenant_exactly_as_it_was() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    harness.post("/api/apply", &token, setup()).await;
    let before = tenant_state(&harness, &token).await;
    // Everything before the last member is sound and would be written first: a new type,
    // a changed automation, a new group; the member's blank name is refused by the store.
    let mut mixed = setup();
    mixed["ticketTypes"]
        .as_array_mut()
        .expect("a list")
        .push(json!({"name": "return", "statuses": ["new"]}));
    mixed["groups"]
        .as_array_mut()
        .expect("a list")
        .push(json!({"name": "returns", "members": [{"name": "Petr"}, {"name": "  "}]}));
    mixed["automations"][0]["steps"][0]["input"]["title"] = json!("Changed {{orderId}}");
    let reply = harness.post("/api/apply", &token, mixed).await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "refused: {}",
        reply.json
    );
    assert_eq!(
        reply.json["error"]["problems"][0]["path"], "groups[1].members[1]",
        "the problem names the member: {}",
        reply.json
    );
    assert_eq!(
        tenant_state(&harness, &token).await,
        before,
        "no type, group, member or automation version of the refused setup is kept"
    );
}

#[tokio::test]
async fn apply_updates_an_existing_ticket_type_unless_open_tickets_hold_a_removed_status() {
    let harness = Harness::new();
    let (tenant, token) = harness.tenant("Acme").await;
    harness.post("/api/apply", &token, setup()).await;
    let mut more = setup();
    more["ticketTypes"][0]["statuses"] = json!(["waiting-to-pack", "shipped", "returned"]);
    let reply = harness.post("/api/apply", &token, more).await;
    assert_eq!(reply.status, StatusCode::OK, "applied: {}", reply.json);
    assert_eq!(
        reply.json["ticketTypes"][0]["action"], "updated",
        "the type is updated: {}",
        reply.json
    );
    let types = items(&harness.get("/api/ticket-types", &token).await);
    assert_eq!(
        types[0]["statuses"],
        json!(["waiting-to-pack", "shipped", "returned"]),
        "the statuses are the setup's"
    );

    ticket(&harness, tenant, "o-1").await;
    let mut fewer = setup();
    fewer["ticketTypes"][0]["statuses"] = json!(["waiting-to-pack"]);
    let reply = harness.post("/api/apply", &token, fewer).await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "removing unheld statuses: {}",
        reply.json
    );
    let mut held = setup();
    held["ticketTypes"][0]["statuses"] = json!(["shipped"]);
    held["automations"] = json!([]);
    let reply = harness.post("/api/apply", &token, held).await;
    assert_eq!(
        reply.status,
        StatusCode::CONFLICT,
        "a status an open ticket and an automation use: {}",
        reply.json
    );
    assert_eq!(reply.code(), "in_use", "{}", reply.json);
    assert!(
        reply.json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("ticketTypes[0]: ")),
        "the refusal is at the type: {}",
        reply.json
    );
    assert_eq!(
        reply.json["error"]["usedBy"][1],
        json!({"kind": "tickets", "open": 1}),
        "counts the open ticket: {}",
        reply.json
    );
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_answer_in_the_error_shape() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let missing = harness.get("/api/nothing-here", &token).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "404");
    assert_eq!(missing.code(), "not_found", "code");
    let wrong = harness
        .call(Method::DELETE, "/api/tickets", Some(&token), None)
        .await;
    assert_eq!(wrong.status, StatusCode::METHOD_NOT_ALLOWED, "405");
    assert_eq!(wrong.code(), "method_not_allowed", "code");
    let not_json = axum::http::Request::post("/api/groups")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "text/plain")
        .body(axum::body::Body::from("name=x"))
        .expect("a request");
    assert_eq!(
        harness.send(not_json).await.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "REST bodies must be JSON too"
    );
}

#[tokio::test]
async fn renames_keep_automations_working_and_removing_what_they_use_answers_in_use() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let kind = harness
        .post(
            "/api/ticket-types",
            &token,
            json!({"name": "it-problem", "statuses": ["new", "solving"]}),
        )
        .await;
    let group = harness
        .post("/api/groups", &token, json!({"name": "support"}))
        .await;
    let route = harness
        .automation(
            &token,
            json!({"name": "Route", "trigger": {"type": "event", "event": "ticket.created"},
                   "steps": [{"name": "c", "type": "condition",
                              "rules": [{"field": "ticket.type", "operator": "eq", "value": "it-problem"}],
                              "then": [
                                  {"name": "assign", "op": "ticket/assign-least-busy",
                                   "input": {"ticket": "{{ticket.id}}", "group": "support"}},
                                  {"name": "status", "op": "ticket/set-status",
                                   "input": {"ticket": "{{ticket.id}}", "status": "solving"}}]}]}),
        )
        .await;
    let (type_path, group_path) = (
        format!("/api/ticket-types/{}", kind.text("id")),
        format!("/api/groups/{}", group.text("id")),
    );
    let automation_path = format!(
        "/api/automations/{}",
        route["id"].as_str().unwrap_or_default()
    );
    for (path, body) in [
        (&type_path, json!({"name": "itp"})),
        (&group_path, json!({"name": "helpdesk"})),
    ] {
        let renamed = harness
            .call(Method::PATCH, path, Some(&token), Some(body))
            .await;
        assert_eq!(renamed.status, StatusCode::OK, "renamed: {}", renamed.json);
    }
    let shown = harness.get(&automation_path, &token).await.json;
    let text = shown["steps"].to_string();
    assert!(
        text.contains("\"itp\"") && text.contains("\"helpdesk\"") && !text.contains("it-problem"),
        "the automation shows the current names: {text}"
    );
    assert_eq!(shown["currentVersion"], 1, "a rename is no new version");
    let saved = harness
        .call(
            Method::PUT,
            &automation_path,
            Some(&token),
            Some(shown.clone()),
        )
        .await;
    assert_eq!(saved.status, StatusCode::OK, "saved back: {}", saved.json);
    assert_eq!(
        saved.json["currentVersion"], 1,
        "saving it back changes nothing"
    );

    let refused = harness
        .call(Method::DELETE, &group_path, Some(&token), None)
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.json);
    assert_eq!(refused.code(), "in_use", "{}", refused.json);
    assert_eq!(
        refused.json["error"]["usedBy"],
        json!([{"kind": "automation", "id": route["id"], "name": "Route", "steps": ["assign"]}]),
        "names the automation and its step"
    );
    let refused = harness
        .call(
            Method::PATCH,
            &type_path,
            Some(&token),
            Some(json!({"statuses": ["new"]})),
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.json);
    assert_eq!(
        refused.json["error"]["usedBy"][0]["steps"],
        json!(["status"])
    );
    let refused = harness
        .call(Method::DELETE, &type_path, Some(&token), None)
        .await;
    assert_eq!(refused.code(), "in_use", "{}", refused.json);

    let deleted = harness
        .call(Method::DELETE, &automation_path, Some(&token), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.json);
    for path in [&type_path, &group_path] {
        let gone = harness.call(Method::DELETE, path, Some(&token), None).await;
        assert_eq!(gone.status, StatusCode::NO_CONTENT, "{path}: {}", gone.json);
        assert_eq!(
            harness.get(path, &token).await.status,
            StatusCode::NOT_FOUND,
            "{path} is gone"
        );
    }
}

/// `POST /api/automations/validate` answers what a save would, at the same paths, and
/// writes nothing: the problems of a broken definition (200, `valid: false`), the warnings
/// of a valid one.
#[tokio::test]
async fn validate_checks_a_definition_without_saving_it() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    let broken = broken_automation();
    let checked = harness
        .post("/api/automations/validate", &token, broken.clone())
        .await;
    assert_eq!(checked.status, StatusCode::OK, "{}", checked.json);
    assert_eq!(checked.json["valid"], false);
    let saved = harness.post("/api/automations", &token, broken).await;
    assert_eq!(
        checked.json["problems"], saved.json["error"]["problems"],
        "the same problems as a save, at the same paths"
    );
    let fine = harness
        .post(
            "/api/automations/validate",
            &token,
            json!({"name": "Optional", "trigger": {"type": "webhook", "params": [
                    {"name": "first", "path": "items.0.sku", "type": "string"}]},
                   "steps": [{"name": "say", "op": "flow/log", "input": {"message": "{{first}}"}}]}),
        )
        .await;
    assert_eq!(fine.status, StatusCode::OK, "{}", fine.json);
    assert_eq!(fine.json["valid"], true);
    assert_eq!(fine.json["problems"], json!([]));
    assert_eq!(fine.json["warnings"][0]["path"], "steps[0].input.message");
    let timed = harness
        .post(
            "/api/automations/validate",
            &token,
            json!({"name": "Mornings", "trigger": {"type": "schedule", "cron": "0 7 * * MON-FRI",
                    "timezone": "Europe/Prague"},
                   "steps": [{"name": "say", "op": "flow/log", "input": {"message": "morning"}}]}),
        )
        .await;
    assert_eq!(timed.json["valid"], true, "{}", timed.json);
    let next = timed.json["schedule"]["next"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(next.len(), 5, "the next five fire times: {}", timed.json);
    assert!(
        next.windows(2)
            .all(|pair| pair[0].as_str() < pair[1].as_str()),
        "in order: {next:?}"
    );
    assert!(
        timed.json["schedule"]["describe"]
            .as_str()
            .is_some_and(|text| text.contains("07:00")),
        "{}",
        timed.json
    );
    assert_eq!(
        items(&harness.get("/api/automations", &token).await).len(),
        0,
        "nothing was saved"
    );
}
