//! The tenant isolation matrix: every route of the route table
//! (`fronta_server::routes::route_docs`, the list the router is built from) has an entry
//! here saying how its ids are filled with another tenant's objects, or why it has none.
//! A route added to the table without an entry fails this test, and so does an entry
//! left behind by a removed route.
//!
//! For every route with ids, each method is called by an intruder tenant three times: with
//! the owner tenant's ids, with ids that never existed, and with ids that cannot parse.
//! The three answers must be byte-identical (and 404 for tenant routes), no answer to the
//! intruder may contain any of the owner's ids, and a snapshot of both tenants' data
//! (every list and object through the API, and the run counters through the store port)
//! must be the same after the call as before it. Routes that reference objects in their
//! body (a member to assign) are also called with the owner's object in the body.

mod support;

use std::collections::BTreeMap;

use axum::http::{Method, StatusCode};
use fronta_desk::store::{IncidentReport, TicketUpsert};
use fronta_desk::{Origin, TenantId};
use serde_json::{Value, json};
use support::{ADMIN, Harness, Reply, order_body, order_type, orders_automation, webhook_path};

/// How a route is checked.
#[derive(Debug, Clone)]
enum Entry {
    /// Call it with ids: each `{param}` of the path is filled with the object named
    /// (`group`, `member`, `type`, `automation`, `ticket`, `run`, `incident`; the owner's,
    /// or the intruder's own with an `own:` prefix); strings `"@object"` in `body` are
    /// filled the same way. The intruder's answer must be `status` for the owner's ids,
    /// for unknown ids and for malformed ids (in the path) alike, byte for byte.
    Ids {
        fill: &'static [(&'static str, &'static str)],
        body: Option<Value>,
        status: StatusCode,
    },
    /// A list of the caller's own objects: called by the intruder, it answers 200 and
    /// shows none of the owner's ids.
    List,
    /// No object id in the path or the body: the reason.
    NoIds(&'static str),
}

use Entry::{Ids, List, NoIds};

const NOT_FOUND: StatusCode = StatusCode::NOT_FOUND;

/// The matrix: one line per method and path of the route table.
fn matrix() -> Vec<(&'static str, &'static str, Vec<Entry>)> {
    let ids = |fill, body: Option<Value>| Ids {
        fill,
        body,
        status: NOT_FOUND,
    };
    vec![
        ("GET", "/healthz", vec![NoIds("liveness: no data")]),
        ("GET", "/readyz", vec![NoIds("readiness: no data")]),
        (
            "GET",
            "/metrics",
            vec![NoIds("process-wide counters, no object of any tenant")],
        ),
        (
            "GET",
            "/webhook/{token}",
            vec![NoIds(
                "the webhook token is the credential, not an object id: whoever holds it may \
                 read its help (server/tests/webhooks.rs pins unknown tokens)",
            )],
        ),
        (
            "POST",
            "/webhook/{token}",
            vec![NoIds(
                "the webhook token is the credential, not an object id: whoever holds it may \
                 post (server/tests/webhooks.rs pins unknown tokens)",
            )],
        ),
        (
            "GET",
            "/api/admin/tenants",
            vec![NoIds("the admin's list of every tenant")],
        ),
        (
            "POST",
            "/api/admin/tenants",
            vec![NoIds("creates a tenant (admin)")],
        ),
        (
            "GET",
            "/api/admin/tenants/{id}/retention",
            vec![Ids {
                fill: &[("id", "tenant")],
                body: None,
                status: StatusCode::UNAUTHORIZED,
            }],
        ),
        (
            "PUT",
            "/api/admin/tenants/{id}/retention",
            vec![Ids {
                fill: &[("id", "tenant")],
                body: Some(json!({"completed": "1h"})),
                status: StatusCode::UNAUTHORIZED,
            }],
        ),
        (
            "GET",
            "/api/admin/incidents",
            vec![NoIds("the admin's list of every incident")],
        ),
        (
            "GET",
            "/api/admin/incidents/{id}",
            vec![Ids {
                fill: &[("id", "incident")],
                body: None,
                status: StatusCode::UNAUTHORIZED,
            }],
        ),
        ("GET", "/api/groups", vec![List]),
        ("GET", "/api/secrets", vec![List]),
        ("GET", "/api/services", vec![List]),
        (
            "DELETE",
            "/api/secrets/{name}",
            vec![ids(&[("name", "secret")], None)],
        ),
        (
            // Names are per tenant: a valid PUT with the owner's name writes the caller's
            // own secret (server/tests/secrets.rs); here a refused PUT must read the same
            // whoever's name it carries, and change nothing.
            "PUT",
            "/api/secrets/{name}",
            vec![Ids {
                fill: &[("name", "secret")],
                body: Some(json!({"value": 42})),
                status: StatusCode::BAD_REQUEST,
            }],
        ),
        ("GET", "/api/mcp-servers", vec![List]),
        (
            "POST",
            "/api/mcp-servers",
            vec![NoIds(
                "creates an MCP server in the caller's tenant, by name",
            )],
        ),
        (
            "GET",
            "/api/mcp-servers/{name}",
            vec![ids(&[("name", "mcp")], None)],
        ),
        (
            "DELETE",
            "/api/mcp-servers/{name}",
            vec![ids(&[("name", "mcp")], None)],
        ),
        (
            // Names are per tenant: a valid PUT with the owner's name writes the caller's
            // own server; here a refused PUT must read the same whoever's name it
            // carries, and change nothing.
            "PUT",
            "/api/mcp-servers/{name}",
            vec![Ids {
                fill: &[("name", "mcp")],
                body: Some(json!({"transport": 42})),
                status: StatusCode::BAD_REQUEST,
            }],
        ),
        ("GET", "/api/mail-servers", vec![List]),
        (
            "POST",
            "/api/mail-servers",
            vec![NoIds(
                "creates a mail server in the caller's tenant, by name",
            )],
        ),
        (
            "GET",
            "/api/mail-servers/{name}",
            vec![ids(&[("name", "mail")], None)],
        ),
        (
            "DELETE",
            "/api/mail-servers/{name}",
            vec![ids(&[("name", "mail")], None)],
        ),
        (
            // Names are per tenant: a valid PUT with the owner's name writes the caller's
            // own server; here a refused PUT must read the same whoever's name it
            // carries, and change nothing.
            "PUT",
            "/api/mail-servers/{name}",
            vec![Ids {
                fill: &[("name", "mail")],
                body: Some(json!({"host": 42})),
                status: StatusCode::BAD_REQUEST,
            }],
        ),
        ("GET", "/api/widgets", vec![List]),
        (
            "POST",
            "/api/widgets",
            vec![NoIds("creates a widget in the caller's tenant")],
        ),
        (
            "GET",
            "/api/widgets/{id}",
            vec![ids(&[("id", "widget")], None)],
        ),
        (
            "PATCH",
            "/api/widgets/{id}",
            vec![ids(
                &[("id", "widget")],
                Some(json!({"name": "taken over"})),
            )],
        ),
        (
            "DELETE",
            "/api/widgets/{id}",
            vec![ids(&[("id", "widget")], None)],
        ),
        (
            "POST",
            "/api/widgets/{id}/refresh",
            vec![ids(&[("id", "widget")], None)],
        ),
        (
            "POST",
            "/api/groups",
            vec![NoIds("creates a group in the caller's tenant, by name")],
        ),
        (
            "GET",
            "/api/groups/{id}",
            vec![ids(&[("id", "group")], None)],
        ),
        (
            "PATCH",
            "/api/groups/{id}",
            vec![ids(&[("id", "group")], Some(json!({"name": "taken over"})))],
        ),
        (
            "DELETE",
            "/api/groups/{id}",
            vec![ids(&[("id", "group")], None)],
        ),
        (
            "GET",
            "/api/groups/{id}/members",
            vec![ids(&[("id", "group")], None)],
        ),
        (
            "POST",
            "/api/groups/{id}/members",
            vec![ids(&[("id", "group")], Some(json!({"name": "Mallory"})))],
        ),
        (
            "PATCH",
            "/api/groups/{id}/members/{member_id}",
            vec![
                ids(
                    &[("id", "group"), ("member_id", "member")],
                    Some(json!({"name": "Mallory"})),
                ),
                ids(
                    &[("id", "own:group"), ("member_id", "member")],
                    Some(json!({"name": "Mallory"})),
                ),
            ],
        ),
        (
            "DELETE",
            "/api/groups/{id}/members/{member_id}",
            vec![
                ids(&[("id", "group"), ("member_id", "member")], None),
                ids(&[("id", "own:group"), ("member_id", "member")], None),
            ],
        ),
        ("GET", "/api/ticket-types", vec![List]),
        (
            "POST",
            "/api/ticket-types",
            vec![NoIds(
                "creates a ticket type in the caller's tenant, by name",
            )],
        ),
        (
            "GET",
            "/api/ticket-types/{id}",
            vec![ids(&[("id", "type")], None)],
        ),
        (
            "PATCH",
            "/api/ticket-types/{id}",
            vec![ids(&[("id", "type")], Some(json!({"name": "taken over"})))],
        ),
        (
            "DELETE",
            "/api/ticket-types/{id}",
            vec![ids(&[("id", "type")], None)],
        ),
        ("GET", "/api/automations", vec![List]),
        (
            "POST",
            "/api/automations",
            vec![NoIds(
                "creates an automation in the caller's tenant; steps name groups and types by \
                 name, resolved in the caller's tenant when they run",
            )],
        ),
        (
            "GET",
            "/api/catalogue",
            vec![NoIds(
                "the catalogue of ops: the same for every tenant, no tenant's data",
            )],
        ),
        (
            "POST",
            "/api/automations/test",
            vec![NoIds(
                "dry-runs a definition over the caller's own tenant: its reads are scoped to it \
                 and it writes nothing",
            )],
        ),
        (
            "POST",
            "/api/automations/{id}/test",
            vec![ids(&[("id", "automation")], Some(json!({})))],
        ),
        (
            "POST",
            "/api/automations/validate",
            vec![NoIds(
                "checks a definition against the caller's own ticket types; writes nothing and \
                 names no object by id",
            )],
        ),
        (
            "GET",
            "/api/automations/{id}",
            vec![ids(&[("id", "automation")], None)],
        ),
        (
            "PUT",
            "/api/automations/{id}",
            vec![ids(&[("id", "automation")], Some(orders_automation()))],
        ),
        (
            "DELETE",
            "/api/automations/{id}",
            vec![ids(&[("id", "automation")], None)],
        ),
        (
            "POST",
            "/api/automations/{id}/pause",
            vec![ids(&[("id", "automation")], Some(json!({})))],
        ),
        (
            "POST",
            "/api/automations/{id}/resume",
            vec![ids(&[("id", "automation")], Some(json!({})))],
        ),
        (
            "GET",
            "/api/automations/{id}/versions",
            vec![ids(&[("id", "automation")], None)],
        ),
        (
            "GET",
            "/api/automations/{id}/versions/{version}",
            vec![ids(&[("id", "automation"), ("version", "version")], None)],
        ),
        (
            "GET",
            "/api/automations/{id}/versions/{version}/diff",
            vec![ids(&[("id", "automation"), ("version", "version")], None)],
        ),
        (
            "POST",
            "/api/automations/{id}/rollback",
            vec![ids(&[("id", "automation")], Some(json!({"version": 1})))],
        ),
        (
            "POST",
            "/api/automations/{id}/rotate-webhook",
            vec![ids(&[("id", "automation")], Some(json!({"graceSec": 60})))],
        ),
        (
            "POST",
            "/api/automations/{id}/rotate-signing-secret",
            vec![ids(
                &[("id", "automation")],
                Some(json!({"overlapSec": 60})),
            )],
        ),
        (
            "POST",
            "/api/automations/{id}/runs",
            vec![ids(&[("id", "automation")], Some(json!({"orderId": "9"})))],
        ),
        (
            "GET",
            "/api/admin/audit",
            vec![NoIds(
                "the operator's view of every tenant: an admin token only (tenant tokens get \
                 401, see the role matrix below)",
            )],
        ),
        ("GET", "/api/me", vec![NoIds("the calling token itself")]),
        ("GET", "/api/tokens", vec![List]),
        (
            "POST",
            "/api/tokens",
            vec![NoIds("makes a token in the caller's tenant, by name")],
        ),
        (
            "DELETE",
            "/api/tokens/{id}",
            vec![ids(&[("id", "token")], None)],
        ),
        ("GET", "/api/audit", vec![List]),
        ("GET", "/api/tickets", vec![List]),
        (
            "GET",
            "/api/tickets/{id}",
            vec![ids(&[("id", "ticket")], None)],
        ),
        (
            "PATCH",
            "/api/tickets/{id}",
            vec![
                ids(&[("id", "ticket")], Some(json!({"status": "shipped"}))),
                // The intruder's own ticket, assigned to the owner's member.
                Ids {
                    fill: &[("id", "own:ticket")],
                    body: Some(json!({"assignee": "@member"})),
                    status: StatusCode::BAD_REQUEST,
                },
            ],
        ),
        ("GET", "/api/runs", vec![List]),
        ("GET", "/api/dashboard/runs", vec![List]),
        ("GET", "/api/runs/{id}", vec![ids(&[("id", "run")], None)]),
        (
            "POST",
            "/api/runs/{id}/cancel",
            vec![ids(&[("id", "run")], Some(json!({})))],
        ),
        (
            "POST",
            "/api/runs/{id}/retry",
            vec![ids(&[("id", "run")], Some(json!({})))],
        ),
        (
            "POST",
            "/api/runs/bulk",
            // The filter's only object id is a ticket (an automation id matches none of
            // the caller's runs, by the walk's tenant: store-tests' bulk cases).
            vec![ids(
                &[],
                Some(json!({"action": "retry", "filter": {"ticket": "@ticket"}})),
            )],
        ),
        (
            "GET",
            "/api/runs/bulk/{id}",
            vec![ids(&[("id", "bulk")], None)],
        ),
        (
            "POST",
            "/api/runs/bulk/{id}/cancel",
            vec![ids(&[("id", "bulk")], Some(json!({})))],
        ),
        ("GET", "/api/incidents", vec![List]),
        (
            "GET",
            "/api/incidents/{id}",
            vec![ids(&[("id", "incident")], None)],
        ),
        (
            "POST",
            "/api/incidents/{id}/resolve",
            vec![ids(&[("id", "incident")], Some(json!({})))],
        ),
        (
            "POST",
            "/api/apply",
            vec![NoIds(
                "applies a setup in the caller's tenant, idempotent by names, never by ids",
            )],
        ),
        (
            "GET",
            "/api/stream",
            vec![NoIds(
                "a per-tenant event hub keyed by the caller's token (server/tests/stream.rs \
                 pins that one tenant never sees another's events)",
            )],
        ),
        (
            "GET",
            "/api/openapi.json",
            vec![NoIds("the public API document")],
        ),
    ]
}

async fn ticket(harness: &Harness, tenant: TenantId, external_id: &str) -> String {
    harness
        .desk()
        .ticket_upsert(
            tenant,
            TicketUpsert {
                external_id: external_id.into(),
                title: Some(format!("Ticket {external_id}")),
                ticket_type: Some("order".into()),
                status: Some("waiting-to-pack".into()),
                ..TicketUpsert::default()
            },
            Origin::Person,
        )
        .await
        .expect("a ticket")
        .ticket
        .id
        .to_string()
}

async fn incident(harness: &Harness, tenant: TenantId) -> String {
    let (incident, _) = harness
        .desk()
        .incident_report(
            tenant,
            IncidentReport {
                cause: "isolation".into(),
                title: "An incident of the owner".into(),
                impact: "None.".into(),
                detail: json!({}),
                ticket: None,
            },
        )
        .await
        .expect("an incident");
    incident.id.to_string()
}

/// One tenant's objects, by name.
/// A secret of the tenant named `name`; its name (unique to the tenant) is its id.
async fn secret(harness: &Harness, token: &str, name: &str) -> String {
    let secret = format!("token-{}", name.to_lowercase());
    let reply = harness
        .call(
            Method::PUT,
            &format!("/api/secrets/{secret}"),
            Some(token),
            Some(json!({"value": format!("s3cret of {name}")})),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::NO_CONTENT,
        "secret of {name}: {}",
        reply.json
    );
    secret
}

/// A service the tenant named `name` has called (one failed call through the limits
/// port, so its breaker row exists); its name (unique to the tenant) is its id.
async fn service(harness: &Harness, tenant: TenantId, name: &str) -> String {
    use fronta_automation::service_limits::{Admission, CallResult, LimitRules, ServiceLimits};
    let service = format!("service-of-{}", name.to_lowercase());
    let rules = LimitRules::default();
    let Admission::Admitted(slot) = harness
        .store
        .service_acquire(tenant, &service, &rules)
        .await
        .expect("acquire")
    else {
        panic!("a fresh service admits a call")
    };
    harness
        .store
        .service_release(
            tenant,
            &service,
            &slot,
            CallResult::RetryableFailure,
            &rules,
        )
        .await
        .expect("release");
    service
}

/// An MCP server of the tenant named `name`; its name (unique to the tenant) is its id.
async fn mcp_server(harness: &Harness, token: &str, name: &str) -> String {
    let server = format!("crm-{}", name.to_lowercase());
    let reply = harness
        .call(
            Method::PUT,
            &format!("/api/mcp-servers/{server}"),
            Some(token),
            Some(json!({"transport": {"type": "http",
                "url": format!("https://mcp.{}.test/mcp", name.to_lowercase())}})),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "MCP server of {name}: {}",
        reply.json
    );
    server
}

/// A mail server of the tenant named `name`; its name (unique to the tenant) is its id.
async fn mail_server(harness: &Harness, token: &str, name: &str) -> String {
    let server = format!("desk-{}", name.to_lowercase());
    let reply = harness
        .call(
            Method::PUT,
            &format!("/api/mail-servers/{server}"),
            Some(token),
            Some(json!({"host": format!("smtp.{}.test", name.to_lowercase()),
                "security": "starttls", "user": "desk", "password": "{{secrets.smtp}}",
                "from": format!("desk@{}.test", name.to_lowercase())})),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "mail server of {name}: {}",
        reply.json
    );
    server
}

/// A widget of the tenant whose cache is filled and fresh for a day, so reading it
/// (the snapshot, the intruder's own list) never calls out; its id.
async fn widget(harness: &Harness, tenant: TenantId, token: &str, name: &str) -> String {
    use fronta_automation::widget::{Claim, Fetched, WidgetStore};
    let reply = harness
        .post(
            "/api/widgets",
            token,
            json!({"name": format!("Invoices of {name}"), "op": "http/request",
                   "input": {"url": format!("https://billing.{}.test/count", name.to_lowercase())},
                   "ttlSec": 86_400}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::CREATED,
        "widget of {name}: {}",
        reply.json
    );
    let id = reply.text("id");
    let uuid = id.parse().expect("a widget id");
    let Claim::Claimed { token: lease, .. } = harness
        .store
        .widget_claim(tenant, uuid, true, std::time::Duration::from_secs(60))
        .await
        .expect("claim")
    else {
        panic!("a new widget is claimed")
    };
    harness
        .store
        .widget_settle(tenant, uuid, &lease, Fetched::Data(json!({"count": 3})))
        .await
        .expect("settle")
        .expect("the lease holds");
    id
}

async fn objects(harness: &Harness, name: &str) -> (String, BTreeMap<&'static str, String>) {
    let (tenant, token) = harness.tenant(name).await;
    let created = |reply: Reply, what: &str| {
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "{what} of {name}: {}",
            reply.json
        );
        reply.text("id")
    };
    let ticket_type = created(
        harness
            .post("/api/ticket-types", &token, order_type())
            .await,
        "ticket type",
    );
    let group = created(
        harness
            .post("/api/groups", &token, json!({"name": "warehouse"}))
            .await,
        "group",
    );
    let member = created(
        harness
            .post(
                &format!("/api/groups/{group}/members"),
                &token,
                json!({"name": "Eva"}),
            )
            .await,
        "member",
    );
    let automation = harness.automation(&token, orders_automation()).await;
    let run = harness
        .webhook(&webhook_path(&automation), &order_body("1"), &[])
        .await
        .text("runId");
    let bulk = harness
        .post(
            "/api/runs/bulk",
            &token,
            json!({"action": "retry", "filter": {"status": "failed"}}),
        )
        .await;
    assert_eq!(bulk.status, StatusCode::ACCEPTED, "{}", bulk.json);
    let spare = harness
        .post(
            "/api/tokens",
            &token,
            json!({"name": "spare", "role": "viewer"}),
        )
        .await;
    assert_eq!(spare.status, StatusCode::CREATED, "{}", spare.json);
    let objects = BTreeMap::from([
        ("bulk", bulk.text("id")),
        ("token", spare.text("id")),
        ("group", group),
        ("member", member),
        ("type", ticket_type),
        (
            "automation",
            automation["id"].as_str().unwrap_or_default().to_owned(),
        ),
        ("ticket", ticket(harness, tenant, "order-1").await),
        ("run", run),
        ("incident", incident(harness, tenant).await),
        ("secret", secret(harness, &token, name).await),
        ("service", service(harness, tenant, name).await),
        ("mcp", mcp_server(harness, &token, name).await),
        ("mail", mail_server(harness, &token, name).await),
        ("widget", widget(harness, tenant, &token, name).await),
        ("tenant", tenant.to_string()),
        // Every automation has a version 1: what makes a version path another tenant's
        // is its automation id.
        ("version", "1".to_owned()),
    ]);
    (token, objects)
}

/// Everything both tenants can see, through the API and the run port.
async fn snapshot(harness: &Harness, tenants: &[(&str, &BTreeMap<&str, String>)]) -> Vec<String> {
    let mut seen = Vec::new();
    for (token, objects) in tenants {
        let mut paths: Vec<String> = [
            "/api/groups",
            "/api/ticket-types",
            "/api/automations",
            "/api/tickets",
            "/api/runs",
            "/api/incidents",
            "/api/secrets",
            "/api/services",
            "/api/mcp-servers",
            "/api/mail-servers",
            "/api/audit",
        ]
        .map(String::from)
        .to_vec();
        paths.push(format!("/api/groups/{}", objects["group"]));
        paths.push(format!("/api/groups/{}/members", objects["group"]));
        paths.push(format!("/api/ticket-types/{}", objects["type"]));
        paths.push(format!("/api/automations/{}", objects["automation"]));
        paths.push(format!("/api/tickets/{}", objects["ticket"]));
        paths.push(format!("/api/runs/{}", objects["run"]));
        paths.push(format!("/api/runs/bulk/{}", objects["bulk"]));
        paths.push(format!("/api/incidents/{}", objects["incident"]));
        paths.push(format!("/api/mcp-servers/{}", objects["mcp"]));
        paths.push(format!("/api/mail-servers/{}", objects["mail"]));
        // Widgets through the port, not the API: an answer carries the data's age, which
        // moves with the wall clock between two snapshots.
        {
            use fronta_automation::widget::WidgetStore;
            let tenant: TenantId = objects["tenant"].parse().expect("a tenant id");
            for view in harness.store.widget_list(tenant).await.expect("widgets") {
                seen.push(format!(
                    "widget {:?} {:?} {}",
                    view.widget, view.cache, view.refreshing
                ));
            }
            // Tokens through the port without their last use (written by any request).
            use fronta_desk::access::AccessStore;
            for token in harness.store.token_list(tenant).await.expect("tokens") {
                seen.push(format!(
                    "token {} {} {} {:?}",
                    token.id, token.name, token.role, token.expires_at
                ));
            }
        }
        for path in paths {
            let reply = harness.get(&path, token).await;
            seen.push(format!(
                "{path} {} {}",
                reply.status,
                String::from_utf8_lossy(&reply.bytes)
            ));
        }
    }
    let stats = harness
        .runs()
        .run_stats()
        .await
        .expect("run stats are read");
    seen.push(format!("run stats {stats:?}"));
    let tenants = harness.get("/api/admin/tenants", ADMIN).await;
    seen.push(format!(
        "tenants {}",
        String::from_utf8_lossy(&tenants.bytes)
    ));
    seen
}

fn fill(template: &str, fill: &[(&str, &str)], pick: &dyn Fn(&str) -> String) -> String {
    let mut path = template.to_owned();
    for (param, object) in fill {
        path = path.replace(&format!("{{{param}}}"), &pick(object));
    }
    path
}

fn fill_body(body: &Value, pick: &dyn Fn(&str) -> String) -> Value {
    match body {
        Value::String(text) => match text.strip_prefix('@') {
            Some(object) => Value::String(pick(object)),
            None => body.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_body(v, pick)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_body(v, pick)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[tokio::test]
async fn every_route_keeps_tenants_apart() {
    let harness = Harness::new();
    let (owner_token, theirs) = objects(&harness, "Owner").await;
    let (intruder, mine) = objects(&harness, "Intruder").await;

    // The matrix covers the route table exactly.
    let table: Vec<(String, String)> = fronta_server::routes::route_docs()
        .into_iter()
        .flat_map(|route| {
            route
                .ops
                .into_iter()
                .map(move |op| (op.method.to_owned(), route.path.to_owned()))
        })
        .collect();
    let matrix = matrix();
    let missing: Vec<String> = table
        .iter()
        .filter(|(method, path)| !matrix.iter().any(|(m, p, _)| m == method && p == path))
        .map(|(method, path)| format!("{method} {path}"))
        .collect();
    assert!(
        missing.is_empty(),
        "routes without an entry in the tenant isolation matrix (server/tests/isolation.rs): \
         {missing:?} — say how their ids are filled with another tenant's objects, or why they \
         have none"
    );
    let stale: Vec<String> = matrix
        .iter()
        .filter(|(m, p, _)| !table.iter().any(|(method, path)| m == method && p == path))
        .map(|(m, p, _)| format!("{m} {p}"))
        .collect();
    assert!(stale.is_empty(), "matrix entries of no route: {stale:?}");

    let before = snapshot(&harness, &[(&owner_token, &theirs), (&intruder, &mine)]).await;
    // Ids only: a version number is the same for both tenants.
    let foreign_ids: Vec<&String> = theirs
        .iter()
        .filter(|(object, _)| **object != "version")
        .map(|(_, id)| id)
        .collect();
    let mut calls = 0;
    for (method, template, entries) in &matrix {
        let method: Method = method.parse().expect("a method");
        for entry in entries {
            match entry {
                NoIds(reason) => {
                    assert!(
                        !template.contains('{') || template.starts_with("/webhook/"),
                        "{method} {template} has ids in its path, so it needs an Ids entry, \
                         not NoIds({reason:?})"
                    );
                }
                List => {
                    let reply = harness
                        .call(method.clone(), template, Some(&intruder), None)
                        .await;
                    calls += 1;
                    assert_eq!(
                        reply.status,
                        StatusCode::OK,
                        "{method} {template}: {}",
                        reply.json
                    );
                    let text = String::from_utf8_lossy(&reply.bytes);
                    for id in &foreign_ids {
                        assert!(
                            !text.contains(id.as_str()),
                            "{method} {template} shows the owner's id {id} to the intruder"
                        );
                    }
                }
                Ids {
                    fill: f,
                    body,
                    status,
                } => {
                    let pick_foreign = |object: &str| match object.strip_prefix("own:") {
                        Some(own) => mine[own].clone(),
                        None => theirs[object].clone(),
                    };
                    let pick_unknown = |object: &str| match object.strip_prefix("own:") {
                        Some(own) => mine[own].clone(),
                        None => uuid::Uuid::now_v7().to_string(),
                    };
                    let pick_garbage = |object: &str| match object.strip_prefix("own:") {
                        Some(own) => mine[own].clone(),
                        None => "not-an-id".to_owned(),
                    };
                    let mut answers = Vec::new();
                    // A malformed id in a body is a shape error of its own (pinned by the
                    // API tests); in the path it must read like any unknown id.
                    for (label, pick, body_pick) in [
                        (
                            "the owner's ids",
                            &pick_foreign as &dyn Fn(&str) -> String,
                            &pick_foreign as &dyn Fn(&str) -> String,
                        ),
                        ("unknown ids", &pick_unknown, &pick_unknown),
                        ("malformed ids", &pick_garbage, &pick_unknown),
                    ] {
                        let path = fill(template, f, pick);
                        let body = body.as_ref().map(|body| fill_body(body, body_pick));
                        let reply = harness
                            .call(method.clone(), &path, Some(&intruder), body)
                            .await;
                        calls += 1;
                        assert_eq!(
                            reply.status, *status,
                            "{method} {template} with {label} ({path}): {}",
                            reply.json
                        );
                        let text = String::from_utf8_lossy(&reply.bytes).into_owned();
                        for id in &foreign_ids {
                            assert!(
                                !text.contains(id.as_str()),
                                "{method} {template}: the answer to the intruder names the \
                                 owner's id {id}: {text}"
                            );
                        }
                        answers.push((label, path, reply.bytes));
                    }
                    for (label, path, bytes) in &answers[1..] {
                        assert_eq!(
                            &answers[0].2, bytes,
                            "{method} {template}: the answer with the owner's ids ({}) differs \
                             from the one with {label} ({path})",
                            answers[0].1
                        );
                    }
                    let after =
                        snapshot(&harness, &[(&owner_token, &theirs), (&intruder, &mine)]).await;
                    for (was, is) in before.iter().zip(&after) {
                        assert_eq!(
                            was, is,
                            "{method} {template} by the intruder changed what the tenants see"
                        );
                    }
                    assert_eq!(before.len(), after.len(), "the snapshot has the same parts");
                }
            }
        }
    }
    println!(
        "tenant isolation matrix: {} routes of the table, {calls} intruder calls, snapshot \
         unchanged after each",
        table.len()
    );
}

/// The role axis: every method of every route of the table, called with a token of each
/// role of the owner tenant (and the admin token), answers as the table's entry says — a
/// role below the route's least role gets 403 `forbidden` naming the role needed and
/// changes nothing; that role and those above it are let through (their answer is the
/// handler's, never 401 or 403); tenant routes refuse the admin token and admin routes
/// every tenant token (401). A tenant route without a role entry fails the test. The
/// tenant axis is the matrix above (the intruder calls with its `admin` token).
#[tokio::test]
async fn every_route_answers_each_role_as_the_table_says() {
    use fronta_desk::access::Role;
    use fronta_server::openapi::Caller;

    let harness = Harness::new();
    let (admin_token, objects) = objects(&harness, "Owner").await;
    let mut tokens = BTreeMap::new();
    for role in Role::ALL {
        let reply = harness
            .post(
                "/api/tokens",
                &admin_token,
                json!({"name": format!("{role} token"), "role": role}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
        tokens.insert(role, reply.text("token"));
    }
    let matrix = matrix();
    let pick = |object: &str| objects[object.trim_start_matches("own:")].clone();
    // Each method with its path filled with the owner's objects and a body that parses.
    let mut calls = Vec::new();
    let mut without_role = Vec::new();
    for route in fronta_server::routes::route_docs() {
        for op in &route.ops {
            let entry = matrix
                .iter()
                .find(|(m, p, _)| *m == op.method && *p == route.path)
                .and_then(|(_, _, entries)| {
                    entries.iter().find_map(|entry| match entry {
                        Ids { fill: f, body, .. } => Some((*f, body.clone())),
                        _ => None,
                    })
                });
            let (f, body) = entry.unwrap_or((&[], None));
            let path = fill(route.path, f, &pick);
            let method: Method = op.method.parse().expect("a method");
            let body = body
                .map(|body| fill_body(&body, &pick))
                .or_else(|| (method != Method::GET && method != Method::DELETE).then(|| json!({})));
            let caller = op.caller(route.path);
            if caller == Caller::Tenant && op.role.is_none() {
                without_role.push(format!("{} {}", op.method, route.path));
            }
            calls.push((method, route.path, path, body, caller, op.role));
        }
    }
    assert!(
        without_role.is_empty(),
        "tenant routes without a role in the route table (.viewer(), .editor(), \
         .tenant_admin()): {without_role:?}"
    );

    // Pass 1: every refusal, with what both tenants see unchanged across it.
    let before = snapshot(&harness, &[(&admin_token, &objects)]).await;
    let mut refused = 0;
    for (method, template, path, body, caller, role) in &calls {
        match caller {
            Caller::Anyone => {}
            Caller::Admin => {
                for (role, token) in &tokens {
                    let reply = harness
                        .call(method.clone(), path, Some(token), body.clone())
                        .await;
                    refused += 1;
                    assert_eq!(
                        reply.status,
                        StatusCode::UNAUTHORIZED,
                        "{method} {template} with a {role} tenant token: {}",
                        reply.json
                    );
                }
            }
            Caller::Tenant => {
                let needed = role.expect("checked above");
                let reply = harness
                    .call(method.clone(), path, Some(ADMIN), body.clone())
                    .await;
                refused += 1;
                assert_eq!(
                    reply.status,
                    StatusCode::UNAUTHORIZED,
                    "{method} {template} with the admin token: {}",
                    reply.json
                );
                for role in Role::ALL.into_iter().filter(|role| !role.allows(needed)) {
                    let reply = harness
                        .call(method.clone(), path, Some(&tokens[&role]), body.clone())
                        .await;
                    refused += 1;
                    assert_eq!(
                        (reply.status, reply.code()),
                        (StatusCode::FORBIDDEN, "forbidden"),
                        "{method} {template} with a {role} token: {}",
                        reply.json
                    );
                    assert_eq!(
                        reply.json["error"]["needed"],
                        json!(needed),
                        "{method} {template}: the 403 names the role needed"
                    );
                }
            }
        }
    }
    let after = snapshot(&harness, &[(&admin_token, &objects)]).await;
    assert_eq!(before, after, "a refused call changed what the tenant sees");

    // Pass 2: the least role each route names, and every role above it for reads, are
    // let through (writes run once, with the least role: they change the objects).
    let mut let_through = 0;
    for (method, template, path, body, caller, role) in &calls {
        if *caller != Caller::Tenant {
            continue;
        }
        let needed = role.expect("checked above");
        let roles: Vec<Role> = if *method == Method::GET {
            Role::ALL.into_iter().filter(|r| r.allows(needed)).collect()
        } else {
            vec![needed]
        };
        for role in roles {
            let (status, json) = if *template == "/api/stream" {
                // An open stream never ends: its status only.
                (stream_status(&harness, &tokens[&role]).await, Value::Null)
            } else {
                let reply = harness
                    .call(method.clone(), path, Some(&tokens[&role]), body.clone())
                    .await;
                (reply.status, reply.json)
            };
            let_through += 1;
            assert!(
                status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN,
                "{method} {template} with a {role} token (the table says {needed}): {status} {json}"
            );
        }
    }
    println!(
        "role matrix: {} methods, {refused} refusals (403/401), {let_through} calls let through",
        calls.len()
    );
}

/// The status `GET /api/stream` answers `token`, without reading the endless body.
async fn stream_status(harness: &Harness, token: &str) -> StatusCode {
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .uri("/api/stream")
        .header("authorization", format!("Bearer {token}"))
        .body(axum::body::Body::empty())
        .expect("a request");
    harness
        .router
        .clone()
        .oneshot(request)
        .await
        .expect("the router never fails")
        .status()
}
