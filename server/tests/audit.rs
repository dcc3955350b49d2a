//! The audit log, generated from the route table: every method that writes (`POST`,
//! `PUT`, `PATCH`, `DELETE` on a route that needs a token) is called once the way a
//! person would, and must leave exactly one audit entry naming its route, its method, the
//! token that called it and the object; the dry runs, which write nothing, are listed with
//! their reason and must leave none. A writing route of the table that this walk does not
//! call fails the test, so a new route cannot go unaudited. No entry may contain a
//! secret's value or a token.

mod support;

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use fronta_desk::access::{AccessStore, AuditFilter};
use fronta_engine::audit::AuditEntry;
use fronta_server::openapi::Caller;
use serde_json::{Value, json};
use support::{
    ADMIN, Harness, Reply, failing_automation, order_body, order_type, orders_automation,
    webhook_path,
};

/// Routes that take a write method but write nothing, with the reason.
const WRITE_NOTHING: [(&str, &str, &str); 3] = [
    (
        "POST",
        "/api/automations/test",
        "a dry run of an unsaved definition",
    ),
    (
        "POST",
        "/api/automations/validate",
        "checks a definition, saves nothing",
    ),
    (
        "POST",
        "/api/automations/{id}/test",
        "a dry run of a saved automation",
    ),
];

const SECRET_VALUE: &str = "s3cr3t-value-that-must-never-show";

struct Walk<'h> {
    harness: &'h Harness,
    covered: BTreeSet<(String, String)>,
    entries: usize,
}

impl<'h> Walk<'h> {
    async fn all(&self) -> Vec<AuditEntry> {
        self.harness
            .store
            .audit_list(&AuditFilter {
                limit: 10_000,
                ..AuditFilter::default()
            })
            .await
            .expect("the audit log is read")
    }

    /// Call `method path` (route `route`) as `token` (whose entries name `actor`); it
    /// must succeed and leave one entry about an object of `kind`.
    async fn write(
        &mut self,
        (method, route, path): (Method, &str, &str),
        token: &str,
        actor: &str,
        kind: &str,
        body: Option<Value>,
    ) -> Reply {
        let reply = self
            .harness
            .call(method.clone(), path, Some(token), body)
            .await;
        assert!(
            reply.status.is_success(),
            "{method} {path}: {} {}",
            reply.status,
            reply.json
        );
        let all = self.all().await;
        assert_eq!(
            all.len(),
            self.entries + 1,
            "{method} {route} leaves exactly one audit entry: {:#?}",
            &all[..all.len().min(3)]
        );
        self.entries = all.len();
        let entry = &all[0];
        assert_eq!(
            (entry.method.as_str(), entry.route.as_str()),
            (method.as_str(), route),
            "the newest entry is this call's"
        );
        assert_eq!(entry.actor_name, actor, "{method} {route}: who");
        assert_eq!(entry.object_kind, kind, "{method} {route}: what");
        assert!(
            entry.object_id.is_some(),
            "{method} {route}: the entry names the object's id: {entry:?}"
        );
        self.covered.insert((method.to_string(), route.to_owned()));
        reply
    }

    async fn writes_nothing(
        &mut self,
        method: Method,
        route: &str,
        path: &str,
        token: &str,
        body: Value,
    ) {
        let reply = self
            .harness
            .call(method.clone(), path, Some(token), Some(body))
            .await;
        assert!(reply.status.is_success(), "{method} {path}: {}", reply.json);
        assert_eq!(
            self.all().await.len(),
            self.entries,
            "{method} {route} writes no entry"
        );
        self.covered.insert((method.to_string(), route.to_owned()));
    }
}

#[tokio::test]
async fn every_write_of_the_route_table_leaves_one_audit_entry_and_no_secret() {
    use Method as M;
    let harness = Harness::new();
    let mut walk = Walk {
        harness: &harness,
        covered: BTreeSet::new(),
        entries: 0,
    };
    let admin = "configured admin token";

    // The operator.
    let tenant = walk
        .write(
            (M::POST, "/api/admin/tenants", "/api/admin/tenants"),
            ADMIN,
            admin,
            "tenant",
            Some(json!({"name": "Acme"})),
        )
        .await;
    let (tenant_id, token) = (tenant.text("id"), tenant.text("token"));
    assert_eq!(
        walk.all().await[0].tenant.map(|t| t.to_string()),
        Some(tenant_id.clone()),
        "the tenant's creation is in its own log"
    );
    walk.write(
        (
            M::PUT,
            "/api/admin/tenants/{id}/retention",
            &format!("/api/admin/tenants/{tenant_id}/retention"),
        ),
        ADMIN,
        admin,
        "tenant",
        Some(json!({"completed": "7d"})),
    )
    .await;

    // Tokens: the first token is the tenant's admin token, called "admin".
    let me = harness.get("/api/me", &token).await;
    assert_eq!(me.json["token"]["name"], "admin", "{}", me.json);
    let ops = walk
        .write(
            (M::POST, "/api/tokens", "/api/tokens"),
            &token,
            "admin",
            "token",
            Some(json!({"name": "ops", "role": "editor"})),
        )
        .await;
    let ops_secret = ops.text("token");
    walk.write(
        (
            M::DELETE,
            "/api/tokens/{id}",
            &format!("/api/tokens/{}", ops.text("id")),
        ),
        &token,
        "admin",
        "token",
        None,
    )
    .await;
    assert_eq!(
        walk.all().await[0].summary,
        "Revoke a token at once: \"ops\", role editor",
        "the revocation names the token"
    );

    // Setup.
    let used_type = walk
        .write(
            (M::POST, "/api/ticket-types", "/api/ticket-types"),
            &token,
            "admin",
            "ticket-type",
            Some(order_type()),
        )
        .await
        .text("id");
    let spare_type = harness
        .post(
            "/api/ticket-types",
            &token,
            json!({"name": "Spare", "statuses": ["new", "done"]}),
        )
        .await;
    assert_eq!(
        spare_type.status,
        StatusCode::CREATED,
        "{}",
        spare_type.json
    );
    walk.entries += 1;
    let spare_type = spare_type.text("id");
    walk.write(
        (
            M::PATCH,
            "/api/ticket-types/{id}",
            &format!("/api/ticket-types/{spare_type}"),
        ),
        &token,
        "admin",
        "ticket-type",
        Some(json!({"name": "Spare parts"})),
    )
    .await;
    walk.write(
        (
            M::DELETE,
            "/api/ticket-types/{id}",
            &format!("/api/ticket-types/{spare_type}"),
        ),
        &token,
        "admin",
        "ticket-type",
        None,
    )
    .await;
    let group = walk
        .write(
            (M::POST, "/api/groups", "/api/groups"),
            &token,
            "admin",
            "group",
            Some(json!({"name": "night shift"})),
        )
        .await
        .text("id");
    walk.write(
        (
            M::PATCH,
            "/api/groups/{id}",
            &format!("/api/groups/{group}"),
        ),
        &token,
        "admin",
        "group",
        Some(json!({"name": "late shift"})),
    )
    .await;
    let member = walk
        .write(
            (
                M::POST,
                "/api/groups/{id}/members",
                &format!("/api/groups/{group}/members"),
            ),
            &token,
            "admin",
            "member",
            Some(json!({"name": "Eva"})),
        )
        .await
        .text("id");
    let member_path = format!("/api/groups/{group}/members/{member}");
    let member_route = "/api/groups/{id}/members/{member_id}";
    walk.write(
        (M::PATCH, member_route, &member_path),
        &token,
        "admin",
        "member",
        Some(json!({"capacity": 3})),
    )
    .await;
    walk.write(
        (M::DELETE, member_route, &member_path),
        &token,
        "admin",
        "member",
        None,
    )
    .await;
    walk.write(
        (
            M::DELETE,
            "/api/groups/{id}",
            &format!("/api/groups/{group}"),
        ),
        &token,
        "admin",
        "group",
        None,
    )
    .await;
    walk.write(
        (M::POST, "/api/apply", "/api/apply"),
        &token,
        "admin",
        "setup",
        Some(json!({"groups": [{"name": "warehouse", "members": [{"name": "Jan"}]}]})),
    )
    .await;
    walk.write(
        (M::PUT, "/api/secrets/{name}", "/api/secrets/smtp"),
        &token,
        "admin",
        "secret",
        Some(json!({"value": SECRET_VALUE})),
    )
    .await;
    let mcp_body = json!({"transport": {"type": "http", "url": "https://mcp.acme.test/mcp"}});
    let mut named = mcp_body.clone();
    named["name"] = json!("crm");
    walk.write(
        (M::POST, "/api/mcp-servers", "/api/mcp-servers"),
        &token,
        "admin",
        "mcp-server",
        Some(named),
    )
    .await;
    walk.write(
        (M::PUT, "/api/mcp-servers/{name}", "/api/mcp-servers/crm"),
        &token,
        "admin",
        "mcp-server",
        Some(mcp_body),
    )
    .await;
    walk.write(
        (M::DELETE, "/api/mcp-servers/{name}", "/api/mcp-servers/crm"),
        &token,
        "admin",
        "mcp-server",
        None,
    )
    .await;
    let mail_body = json!({"host": "smtp.acme.test", "security": "starttls", "user": "desk",
        "password": "{{secrets.smtp}}", "from": "desk@acme.test"});
    let mut named = mail_body.clone();
    named["name"] = json!("desk");
    walk.write(
        (M::POST, "/api/mail-servers", "/api/mail-servers"),
        &token,
        "admin",
        "mail-server",
        Some(named),
    )
    .await;
    walk.write(
        (M::PUT, "/api/mail-servers/{name}", "/api/mail-servers/desk"),
        &token,
        "admin",
        "mail-server",
        Some(mail_body),
    )
    .await;
    walk.write(
        (
            M::DELETE,
            "/api/mail-servers/{name}",
            "/api/mail-servers/desk",
        ),
        &token,
        "admin",
        "mail-server",
        None,
    )
    .await;
    walk.write(
        (M::DELETE, "/api/secrets/{name}", "/api/secrets/smtp"),
        &token,
        "admin",
        "secret",
        None,
    )
    .await;
    let widget = walk
        .write(
            (M::POST, "/api/widgets", "/api/widgets"),
            &token,
            "admin",
            "widget",
            Some(json!({"name": "Invoices", "op": "http/request",
                "input": {"url": "https://billing.acme.test/count"}, "ttlSec": 3600})),
        )
        .await
        .text("id");
    let widget_path = format!("/api/widgets/{widget}");
    walk.write(
        (M::PATCH, "/api/widgets/{id}", &widget_path),
        &token,
        "admin",
        "widget",
        Some(json!({"name": "Open invoices"})),
    )
    .await;
    walk.write(
        (
            M::POST,
            "/api/widgets/{id}/refresh",
            &format!("{widget_path}/refresh"),
        ),
        &token,
        "admin",
        "widget",
        None,
    )
    .await;
    walk.write(
        (M::DELETE, "/api/widgets/{id}", &widget_path),
        &token,
        "admin",
        "widget",
        None,
    )
    .await;

    // Automations and their runs.
    let automation = walk
        .write(
            (M::POST, "/api/automations", "/api/automations"),
            &token,
            "admin",
            "automation",
            Some(orders_automation()),
        )
        .await
        .json;
    let id = automation["id"].as_str().expect("an id").to_owned();
    let at = |tail: &str| format!("/api/automations/{id}{tail}");
    walk.write(
        (M::PUT, "/api/automations/{id}", &at("")),
        &token,
        "admin",
        "automation",
        Some(orders_automation()),
    )
    .await;
    let versions = harness.get(&at("/versions"), &token).await;
    assert_eq!(
        versions.json["items"][0]["createdBy"], "admin",
        "a version names the token that saved it: {}",
        versions.json
    );
    walk.write(
        (M::POST, "/api/automations/{id}/pause", &at("/pause")),
        &token,
        "admin",
        "automation",
        Some(json!({})),
    )
    .await;
    walk.write(
        (M::POST, "/api/automations/{id}/resume", &at("/resume")),
        &token,
        "admin",
        "automation",
        None,
    )
    .await;
    walk.write(
        (M::POST, "/api/automations/{id}/rollback", &at("/rollback")),
        &token,
        "admin",
        "automation",
        Some(json!({"version": 1})),
    )
    .await;
    walk.write(
        (
            M::POST,
            "/api/automations/{id}/rotate-webhook",
            &at("/rotate-webhook"),
        ),
        &token,
        "admin",
        "automation",
        Some(json!({"graceSec": 60})),
    )
    .await;
    let mut signed = orders_automation();
    signed["name"] = json!("Signed orders");
    signed["signingSecret"] = json!(true);
    let signed = walk
        .write(
            (M::POST, "/api/automations", "/api/automations"),
            &token,
            "admin",
            "automation",
            Some(signed),
        )
        .await
        .text("id");
    let rotated = walk
        .write(
            (
                M::POST,
                "/api/automations/{id}/rotate-signing-secret",
                &format!("/api/automations/{signed}/rotate-signing-secret"),
            ),
            &token,
            "admin",
            "automation",
            Some(json!({"overlapSec": 60})),
        )
        .await;
    let secret = rotated.text("signingSecret");
    assert!(
        !format!("{:?}", walk.all().await).contains(&secret),
        "no entry holds the new signing secret"
    );
    walk.writes_nothing(
        M::POST,
        "/api/automations/{id}/test",
        &at("/test"),
        &token,
        json!({"body": {"kind": "order.created", "data": {"order": {"id": "7"}}}}),
    )
    .await;
    walk.writes_nothing(
        M::POST,
        "/api/automations/test",
        "/api/automations/test",
        &token,
        json!({"automation": orders_automation(),
            "body": {"kind": "order.created", "data": {"order": {"id": "7"}}}}),
    )
    .await;
    walk.writes_nothing(
        M::POST,
        "/api/automations/validate",
        "/api/automations/validate",
        &token,
        orders_automation(),
    )
    .await;
    let manual = walk
        .write(
            (M::POST, "/api/automations/{id}/runs", &at("/runs")),
            &token,
            "admin",
            "automation",
            Some(json!({"kind": "order.created", "data": {"order": {"id": "9"}}})),
        )
        .await
        .text("runId");
    walk.write(
        (
            M::POST,
            "/api/runs/{id}/cancel",
            &format!("/api/runs/{manual}/cancel"),
        ),
        &token,
        "admin",
        "run",
        None,
    )
    .await;
    // A webhook is no person's change: it leaves no entry.
    let entries = walk.entries;
    harness
        .webhook(&webhook_path(&automation), &order_body("1"), &[])
        .await;
    let failing = harness.automation(&token, failing_automation()).await;
    walk.entries += 1;
    harness
        .webhook(
            &webhook_path(&failing),
            &json!({"ref": "nope"}).to_string(),
            &[],
        )
        .await;
    harness.drain().await;
    assert_eq!(
        walk.all().await.len(),
        entries + 1,
        "only the automation's creation was audited"
    );
    let ticket = harness.get("/api/tickets", &token).await.json["items"][0]["id"]
        .as_str()
        .expect("the webhook made a ticket")
        .to_owned();
    walk.write(
        (
            M::PATCH,
            "/api/tickets/{id}",
            &format!("/api/tickets/{ticket}"),
        ),
        &token,
        "admin",
        "ticket",
        Some(json!({"tags": ["checked"]})),
    )
    .await;
    let failed = harness.get("/api/runs?status=failed", &token).await.json["items"][0]["id"]
        .as_str()
        .expect("a failed run")
        .to_owned();
    walk.write(
        (
            M::POST,
            "/api/runs/{id}/retry",
            &format!("/api/runs/{failed}/retry"),
        ),
        &token,
        "admin",
        "run",
        Some(json!({})),
    )
    .await;
    let bulk = walk
        .write(
            (M::POST, "/api/runs/bulk", "/api/runs/bulk"),
            &token,
            "admin",
            "bulk-action",
            Some(json!({"action": "cancel", "filter": {"status": "queued"}})),
        )
        .await
        .text("id");
    walk.write(
        (
            M::POST,
            "/api/runs/bulk/{id}/cancel",
            &format!("/api/runs/bulk/{bulk}/cancel"),
        ),
        &token,
        "admin",
        "bulk-action",
        None,
    )
    .await;
    let incident = harness.get("/api/incidents", &token).await.json["items"][0]["id"]
        .as_str()
        .expect("the failure opened an incident")
        .to_owned();
    walk.write(
        (
            M::POST,
            "/api/incidents/{id}/resolve",
            &format!("/api/incidents/{incident}/resolve"),
        ),
        &token,
        "admin",
        "incident",
        None,
    )
    .await;
    walk.write(
        (M::DELETE, "/api/automations/{id}", &at("")),
        &token,
        "admin",
        "automation",
        None,
    )
    .await;
    let _ = used_type;

    // Every writing method of the table was called (or is listed as writing nothing).
    let table: BTreeSet<(String, String)> = fronta_server::routes::route_docs()
        .into_iter()
        .flat_map(|route| {
            route
                .ops
                .into_iter()
                .filter(move |op| op.caller(route.path) != Caller::Anyone && op.method != "GET")
                .map(move |op| (op.method.to_owned(), route.path.to_owned()))
        })
        .collect();
    let missing: Vec<_> = table.difference(&walk.covered).collect();
    assert!(
        missing.is_empty(),
        "writing routes this walk does not call, so nothing proves they are audited: {missing:?}"
    );
    for (method, path, reason) in WRITE_NOTHING {
        assert!(
            table.contains(&(method.to_owned(), path.to_owned())),
            "{method} {path} ({reason}) is no longer a route"
        );
    }

    // Nothing secret in any entry, and the tenant sees its own through the API.
    let all = walk.all().await;
    let text = format!("{all:?}");
    for secret in [SECRET_VALUE, token.as_str(), ops_secret.as_str(), ADMIN] {
        assert!(
            !text.contains(secret),
            "an audit entry holds a secret or a token"
        );
    }
    let listed = harness.get("/api/audit?limit=500", &token).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.json);
    let items = listed.json["items"].as_array().expect("items");
    assert_eq!(
        items.len(),
        all.len(),
        "the tenant sees every entry of its own (the operator's about it included)"
    );
    println!(
        "audit walk: {} writing methods called, {} entries, {} routes writing nothing",
        walk.covered.len() - WRITE_NOTHING.len(),
        all.len(),
        WRITE_NOTHING.len()
    );
}
