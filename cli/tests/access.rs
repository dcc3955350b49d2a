//! Named tokens with roles, revocation, the operator's admin tokens, the audit log and
//! the failed-authentication limit, as a user meets them: through the real `fronta
//! serve` binary and the `fronta admin-token` command, on SQLite and on a fresh Postgres
//! database, over real HTTP.
//!
//! 1. The tenant's first token is an `admin` token called `admin`; it makes a `viewer`
//!    and an `editor` token; bad input names its field (400/409).
//! 2. Each role does what the route table says and gets 403 `forbidden` naming the role
//!    it needs otherwise.
//! 3. Revoking a token: its open `/api/stream` ends, its next request is 401; the last
//!    admin token cannot be revoked.
//! 4. `fronta admin-token new|list|revoke` on the database: the new token opens the admin
//!    routes of the running server at once, and is refused once revoked.
//! 5. The audit log: each of those writes — and a person's manual run, cancel and retry —
//!    left one entry (who, from where, what); the CLI's are the operator's; no entry holds
//!    a token.
//! 6. Guessing is slow: past the burst of failed authentications the address gets 429
//!    with `Retry-After`, even with a good token.
//!
//! 7. Every writing route of the route table, called once through the binary, leaves
//!    exactly one entry (the in-process walk of `server/tests/audit.rs` on the stores'
//!    commit paths of Postgres too).
//!
//! Every wait is for a state, bounded by a generous deadline.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ADMIN: &str = "fa_access_admin_token";
const DEADLINE: Duration = Duration::from_secs(60);

type Server = support::ApiServer;

fn error_message(reply: &Value) -> String {
    reply["error"]["message"].as_str().unwrap_or("").to_owned()
}

/// Opens `/api/stream` with `token` on a thread of its own; the receiver gets the instant
/// the stream ended (or a note that it never opened).
fn open_stream(address: &str, token: &str) -> std::sync::mpsc::Receiver<Result<Instant, String>> {
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let (ended_tx, ended_rx) = std::sync::mpsc::channel();
    let (address, token) = (address.to_owned(), token.to_owned());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let client = support::http_client(0, Duration::from_secs(120));
            let response = client
                .get(format!("http://{address}/api/stream"))
                .bearer_auth(&token)
                .send()
                .await;
            let mut response = match response {
                Ok(response) if response.status() == 200 => response,
                other => {
                    let _ = opened_tx.send(Err(format!("the stream did not open: {other:?}")));
                    return;
                }
            };
            let _ = opened_tx.send(Ok(()));
            while let Ok(Some(_)) = response.chunk().await {}
            let _ = ended_tx.send(Ok(Instant::now()));
        });
    });
    opened_rx
        .recv_timeout(DEADLINE)
        .expect("the stream answered")
        .expect("the stream opened");
    ended_rx
}

/// A manual automation whose run waits a minute (a cancel finds it still going).
fn waiting_automation() -> Value {
    json!({"name": "Waits", "trigger": {"type": "manual"},
           "steps": [{"name": "wait", "op": "flow/pause", "input": {"seconds": 60}}]})
}

fn tokens_and_roles(server: &Server, database: &str) -> Vec<String> {
    let admin = server.tenant("Acme");
    let mut secrets = vec![admin.clone()];
    let me = server.ok("GET", "/api/me", &admin, None);
    assert_eq!(
        (me["token"]["name"].as_str(), me["token"]["role"].as_str()),
        (Some("admin"), Some("admin")),
        "the first token: {me}"
    );

    // 1. Tokens, and bad input naming its field.
    let make = |name: &str, role: &str| {
        server.ok(
            "POST",
            "/api/tokens",
            &admin,
            Some(json!({"name": name, "role": role})),
        )
    };
    let wall = make("wall", "viewer");
    let ops = make("ops", "editor");
    let (wall_secret, ops_secret) = (
        wall["token"].as_str().expect("a secret").to_owned(),
        ops["token"].as_str().expect("a secret").to_owned(),
    );
    secrets.extend([wall_secret.clone(), ops_secret.clone()]);
    let listed = server.ok("GET", "/api/tokens", &admin, None);
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(3),
        "{listed}"
    );
    assert!(
        !listed.to_string().contains(&wall_secret[3..]),
        "a list never shows a secret"
    );
    for (body, status, field) in [
        (json!({"name": "x", "role": "owner"}), 400, "role"),
        (
            json!({"name": "x", "role": "viewer", "expiresAt": "2020-01-01T00:00:00Z"}),
            400,
            "expiresAt",
        ),
        (json!({"name": "wall", "role": "viewer"}), 409, "name"),
    ] {
        let (got, reply) = server.call("POST", "/api/tokens", &admin, Some(body.clone()));
        assert_eq!(got, status, "{body}: {reply}");
        assert!(
            error_message(&reply).starts_with(&format!("{field}:")),
            "{body}: the error names {field}: {reply}"
        );
    }

    // 2. Roles.
    server.ok("GET", "/api/tickets", &wall_secret, None);
    let (status, reply) = server.call(
        "POST",
        "/api/groups",
        &wall_secret,
        Some(json!({"name": "packers"})),
    );
    assert_eq!(
        (
            status,
            reply["error"]["code"].as_str(),
            reply["error"]["needed"].as_str()
        ),
        (403, Some("forbidden"), Some("editor")),
        "a viewer writes nothing: {reply}"
    );
    let group = server.ok(
        "POST",
        "/api/groups",
        &ops_secret,
        Some(json!({"name": "packers"})),
    );
    let (status, reply) = server.call("GET", "/api/tokens", &ops_secret, None);
    assert_eq!(
        (status, reply["error"]["needed"].as_str()),
        (403, Some("admin")),
        "tokens are the admin's: {reply}"
    );

    // 3. Revocation: the open stream ends, the next request is 401.
    let ended = open_stream(&server.address, &wall_secret);
    let revoked_at = Instant::now();
    let (status, _) = server.call(
        "DELETE",
        &format!("/api/tokens/{}", wall["id"].as_str().unwrap_or_default()),
        &admin,
        None,
    );
    assert_eq!(status, 204, "revoked");
    let (status, _) = server.call("GET", "/api/me", &wall_secret, None);
    assert_eq!(status, 401, "a revoked token opens nothing");
    let ended_at = ended
        .recv_timeout(DEADLINE)
        .expect("the revoked token's stream ended")
        .expect("an end");
    println!(
        "{database}: the revoked token's stream ended {:?} after the revocation",
        ended_at.saturating_duration_since(revoked_at)
    );
    let (status, reply) = server.call(
        "DELETE",
        &format!(
            "/api/tokens/{}",
            me["token"]["id"].as_str().unwrap_or_default()
        ),
        &admin,
        None,
    );
    assert_eq!(status, 409, "the last admin token stays: {reply}");

    // 4. The operator's admin tokens, on the database, taken by the running server.
    let made = support::fronta(database)
        .args(["admin-token", "new", "night operator"])
        .output()
        .expect("fronta admin-token new runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let operator = String::from_utf8_lossy(&made.stdout).trim().to_owned();
    assert!(operator.starts_with("fa_"), "an admin token: {operator:?}");
    secrets.push(operator.clone());
    server.ok("GET", "/api/admin/tenants", &operator, None);
    let list = support::fronta(database)
        .args(["admin-token", "list"])
        .output()
        .expect("fronta admin-token list runs");
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(
        list.contains("night operator") && !list.contains(&operator),
        "{list}"
    );
    let revoke = support::fronta(database)
        .args(["admin-token", "revoke", "night operator"])
        .output()
        .expect("fronta admin-token revoke runs");
    assert!(
        revoke.status.success(),
        "{}",
        String::from_utf8_lossy(&revoke.stderr)
    );
    let (status, _) = server.call("GET", "/api/admin/tenants", &operator, None);
    assert_eq!(status, 401, "a revoked admin token is refused at once");

    // 5. A person's runs: a manual run, its cancel, a retry — each audited.
    let automation = server.ok(
        "POST",
        "/api/automations",
        &ops_secret,
        Some(json!({
            "name": "Close by reference",
            "trigger": {"type": "webhook", "params": [
                {"name": "ref", "path": "ref", "type": "string", "required": true}]},
            "steps": [{"name": "close", "op": "ticket/close", "input": {"ticket": "{{ref}}"}}]
        })),
    );
    let id = automation["id"].as_str().expect("an id").to_owned();
    let run = server.ok(
        "POST",
        &format!("/api/automations/{id}/runs"),
        &ops_secret,
        Some(json!({"ref": "no-such-ticket"})),
    )["runId"]
        .as_str()
        .expect("a run")
        .to_owned();
    server.until(
        &ops_secret,
        &format!("/api/runs/{run}"),
        "failed",
        DEADLINE,
        |run| run["status"] == "failed",
    );
    server.ok(
        "POST",
        &format!("/api/runs/{run}/retry"),
        &ops_secret,
        Some(json!({})),
    );
    // The cancel finds a run still going: one that waits a minute.
    let waits = server.ok(
        "POST",
        "/api/automations",
        &ops_secret,
        Some(waiting_automation()),
    );
    let waiting = server.ok(
        "POST",
        &format!(
            "/api/automations/{}/runs",
            waits["id"].as_str().unwrap_or_default()
        ),
        &ops_secret,
        Some(json!({})),
    )["runId"]
        .as_str()
        .expect("a run")
        .to_owned();
    server.ok(
        "POST",
        &format!("/api/runs/{waiting}/cancel"),
        &ops_secret,
        None,
    );

    let audit = server.ok("GET", "/api/audit?limit=100", &admin, None);
    let entries = audit["items"].as_array().expect("entries").clone();
    let line = |entry: &Value| {
        format!(
            "{} {} by {} ({}) from {}",
            entry["method"].as_str().unwrap_or(""),
            entry["route"].as_str().unwrap_or(""),
            entry["actor"]["name"].as_str().unwrap_or(""),
            entry["actor"]["role"].as_str().unwrap_or(""),
            entry["client"].as_str().unwrap_or("-"),
        )
    };
    let lines: Vec<String> = entries.iter().map(line).collect();
    for expected in [
        "POST /api/admin/tenants by configured admin token (operator) from 127.0.0.1",
        "POST /api/tokens by admin (admin) from 127.0.0.1",
        "DELETE /api/tokens/{id} by admin (admin) from 127.0.0.1",
        "POST /api/groups by ops (editor) from 127.0.0.1",
        "POST /api/automations by ops (editor) from 127.0.0.1",
        "POST /api/automations/{id}/runs by ops (editor) from 127.0.0.1",
        "POST /api/runs/{id}/retry by ops (editor) from 127.0.0.1",
        "POST /api/runs/{id}/cancel by ops (editor) from 127.0.0.1",
    ] {
        assert!(
            lines.iter().any(|line| line == expected),
            "{database}: no audit entry {expected:?} in {lines:#?}"
        );
    }
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.starts_with("POST /api/tokens "))
            .count(),
        2,
        "one entry per token made, none for the refused ones: {lines:#?}"
    );
    let group_id = group["id"].as_str().unwrap_or_default();
    let by_object = server.ok(
        "GET",
        &format!("/api/audit?object={group_id}"),
        &admin,
        None,
    );
    assert_eq!(
        by_object["items"].as_array().map(Vec::len),
        Some(1),
        "{by_object}"
    );
    let by_actor = server.ok("GET", "/api/audit?actor=ops", &admin, None);
    assert!(
        by_actor["items"].as_array().is_some_and(
            |items| items.len() >= 5 && items.iter().all(|e| e["actor"]["name"] == "ops")
        ),
        "{by_actor}"
    );
    let operators = server.ok("GET", "/api/admin/audit?object=admin-token", ADMIN, None);
    let cli: Vec<String> = operators["items"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|entry| {
            format!(
                "{} {} ({})",
                entry["route"].as_str().unwrap_or(""),
                entry["actor"]["kind"].as_str().unwrap_or(""),
                entry["summary"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        cli,
        vec![
            "fronta admin-token revoke cli (Revoke an admin token: \"night operator\")",
            "fronta admin-token new cli (Make an admin token: \"night operator\")",
        ],
        "the CLI's writes are in the operator's log"
    );
    let everything = server
        .ok("GET", "/api/admin/audit?limit=500", ADMIN, None)
        .to_string();
    for secret in &secrets {
        assert!(
            !everything.contains(secret.as_str()),
            "an audit entry holds a token"
        );
    }
    secrets
}

/// 6. Past the burst, every request from the address is 429, whatever token it carries.
fn guessing_is_slow(server: &Server, good: &str) {
    let mut refused = None;
    for attempt in 1..=40 {
        let (status, _) = server.call("GET", "/api/me", &format!("ft_guess{attempt:04}"), None);
        if status == 429 {
            refused = Some(attempt);
            break;
        }
        assert_eq!(status, 401, "a wrong token");
    }
    let refused = refused.expect("429 within 40 failed authentications");
    let (status, reply) = server.call("GET", "/api/me", good, None);
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (429, Some("rate_limited")),
        "the address waits, even with a good token: {reply}"
    );
    assert!(
        reply["error"]["retryAfter"]
            .as_u64()
            .is_some_and(|secs| secs >= 1),
        "{reply}"
    );
    println!("the address got 429 at failed authentication {refused}");
}

fn scenario(server: &Server, database: &str) {
    let secrets = tokens_and_roles(server, database);
    guessing_is_slow(server, &secrets[0]);
}

#[test]
fn tokens_roles_audit_through_fronta_serve_on_sqlite() {
    support::on_sqlite_with("access.db", ADMIN, &[], scenario);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_roles_audit_through_fronta_serve_on_postgres() {
    support::on_postgres_with(ADMIN, &[], scenario).await;
}

/// Every writing route of the route table, called once through the real binary as a
/// person would: each leaves exactly one audit entry with its route and method, read back
/// through `GET /api/admin/audit` (the route-by-route walk of `server/tests/audit.rs`
/// runs in process on SQLite; this one proves the Postgres store's commit paths too).
fn every_write_is_audited(server: &Server, _database: &str) {
    let seen = std::cell::Cell::new(0usize);
    let covered = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let write = |token: &str, method: &str, route: &str, path: &str, body: Option<Value>| {
        let (status, reply) = server.call(method, path, token, body);
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {reply}"
        );
        let log = server.ok("GET", "/api/admin/audit?limit=500", ADMIN, None);
        let items = log["items"].as_array().expect("entries");
        assert_eq!(
            items.len(),
            seen.get() + 1,
            "{method} {route} leaves one entry: {}",
            items[0]
        );
        assert_eq!(
            (items[0]["method"].as_str(), items[0]["route"].as_str()),
            (Some(method), Some(route)),
            "the newest entry is this call's"
        );
        assert!(
            items[0]["object"]["id"].is_string(),
            "names its object: {}",
            items[0]
        );
        seen.set(seen.get() + 1);
        covered
            .borrow_mut()
            .insert((method.to_owned(), route.to_owned()));
        reply
    };
    let tenant = write(
        ADMIN,
        "POST",
        "/api/admin/tenants",
        "/api/admin/tenants",
        Some(json!({"name": "Walk"})),
    );
    let (tenant_id, t) = (
        tenant["id"].as_str().expect("an id").to_owned(),
        tenant["token"].as_str().expect("a token").to_owned(),
    );
    let t = t.as_str();
    write(
        ADMIN,
        "PUT",
        "/api/admin/tenants/{id}/retention",
        &format!("/api/admin/tenants/{tenant_id}/retention"),
        Some(json!({"completed": "7d"})),
    );
    let token = write(
        t,
        "POST",
        "/api/tokens",
        "/api/tokens",
        Some(json!({"name": "spare", "role": "viewer"})),
    );
    write(
        t,
        "DELETE",
        "/api/tokens/{id}",
        &format!("/api/tokens/{}", token["id"].as_str().unwrap_or_default()),
        None,
    );
    write(
        t,
        "POST",
        "/api/ticket-types",
        "/api/ticket-types",
        Some(json!({"name": "order", "statuses": ["new", "shipped"]})),
    );
    let spare = write(
        t,
        "POST",
        "/api/ticket-types",
        "/api/ticket-types",
        Some(json!({"name": "spare", "statuses": ["x"]})),
    );
    let spare = format!(
        "/api/ticket-types/{}",
        spare["id"].as_str().unwrap_or_default()
    );
    write(
        t,
        "PATCH",
        "/api/ticket-types/{id}",
        &spare,
        Some(json!({"name": "spare parts"})),
    );
    write(t, "DELETE", "/api/ticket-types/{id}", &spare, None);
    let group = write(
        t,
        "POST",
        "/api/groups",
        "/api/groups",
        Some(json!({"name": "night"})),
    );
    let group = format!("/api/groups/{}", group["id"].as_str().unwrap_or_default());
    write(
        t,
        "PATCH",
        "/api/groups/{id}",
        &group,
        Some(json!({"name": "late"})),
    );
    let member = write(
        t,
        "POST",
        "/api/groups/{id}/members",
        &format!("{group}/members"),
        Some(json!({"name": "Eva"})),
    );
    let member = format!(
        "{group}/members/{}",
        member["id"].as_str().unwrap_or_default()
    );
    write(
        t,
        "PATCH",
        "/api/groups/{id}/members/{member_id}",
        &member,
        Some(json!({"capacity": 2})),
    );
    write(
        t,
        "DELETE",
        "/api/groups/{id}/members/{member_id}",
        &member,
        None,
    );
    write(t, "DELETE", "/api/groups/{id}", &group, None);
    write(
        t,
        "POST",
        "/api/apply",
        "/api/apply",
        Some(json!({"groups": [{"name": "warehouse"}]})),
    );
    write(
        t,
        "PUT",
        "/api/secrets/{name}",
        "/api/secrets/smtp",
        Some(json!({"value": "walk-secret-value"})),
    );
    write(
        t,
        "DELETE",
        "/api/secrets/{name}",
        "/api/secrets/smtp",
        None,
    );
    let mcp = json!({"transport": {"type": "http", "url": "https://mcp.example.com/mcp"}});
    write(
        t,
        "POST",
        "/api/mcp-servers",
        "/api/mcp-servers",
        Some(json!({"name": "crm", "transport": mcp["transport"]})),
    );
    write(
        t,
        "PUT",
        "/api/mcp-servers/{name}",
        "/api/mcp-servers/crm",
        Some(mcp),
    );
    write(
        t,
        "DELETE",
        "/api/mcp-servers/{name}",
        "/api/mcp-servers/crm",
        None,
    );
    let mail = json!({"host": "mail.example.com", "from": "desk@example.com"});
    write(
        t,
        "POST",
        "/api/mail-servers",
        "/api/mail-servers",
        Some(json!({"name": "relay", "host": "mail.example.com", "from": "desk@example.com"})),
    );
    write(
        t,
        "PUT",
        "/api/mail-servers/{name}",
        "/api/mail-servers/relay",
        Some(mail),
    );
    write(
        t,
        "DELETE",
        "/api/mail-servers/{name}",
        "/api/mail-servers/relay",
        None,
    );
    let widget = write(
        t,
        "POST",
        "/api/widgets",
        "/api/widgets",
        Some(json!({"name": "Count", "op": "http/request",
        "input": {"url": "https://api.example.com/count"}, "ttlSec": 3600})),
    );
    let widget = format!("/api/widgets/{}", widget["id"].as_str().unwrap_or_default());
    write(
        t,
        "PATCH",
        "/api/widgets/{id}",
        &widget,
        Some(json!({"name": "Open count"})),
    );
    write(t, "DELETE", "/api/widgets/{id}", &widget, None);
    let automation = write(
        t,
        "POST",
        "/api/automations",
        "/api/automations",
        Some(json!({
        "name": "Orders", "trigger": {"type": "webhook", "params": [
            {"name": "orderId", "path": "order.id", "type": "string", "required": true}]},
        "steps": [{"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "order-{{orderId}}",
            "title": "Order {{orderId}}", "type": "order", "status": "new"}}]})),
    );
    let id = automation["id"].as_str().expect("an id").to_owned();
    let at = |tail: &str| format!("/api/automations/{id}{tail}");
    let mut definition = server.ok("GET", &at(""), t, None);
    definition["name"] = json!("Orders (v2)");
    write(t, "PUT", "/api/automations/{id}", &at(""), Some(definition));
    write(
        t,
        "POST",
        "/api/automations/{id}/pause",
        &at("/pause"),
        Some(json!({})),
    );
    write(
        t,
        "POST",
        "/api/automations/{id}/resume",
        &at("/resume"),
        None,
    );
    write(
        t,
        "POST",
        "/api/automations/{id}/rollback",
        &at("/rollback"),
        Some(json!({"version": 1})),
    );
    write(
        t,
        "POST",
        "/api/automations/{id}/rotate-webhook",
        &at("/rotate-webhook"),
        Some(json!({"graceSec": 60})),
    );
    let run = write(
        t,
        "POST",
        "/api/automations/{id}/runs",
        &at("/runs"),
        Some(json!({"order": {"id": "7"}})),
    );
    let ticket = server.until(t, "/api/tickets", "a ticket", DEADLINE, |page| {
        page["items"]
            .as_array()
            .is_some_and(|items| !items.is_empty())
    })["items"][0]["id"]
        .as_str()
        .expect("a ticket id")
        .to_owned();
    write(
        t,
        "PATCH",
        "/api/tickets/{id}",
        &format!("/api/tickets/{ticket}"),
        Some(json!({"status": "shipped"})),
    );
    let _ = run;
    // A run that waits a minute: a cancel that finds it still going.
    let waits = write(
        t,
        "POST",
        "/api/automations",
        "/api/automations",
        Some(waiting_automation()),
    );
    let waiting = write(
        t,
        "POST",
        "/api/automations/{id}/runs",
        &format!(
            "/api/automations/{}/runs",
            waits["id"].as_str().unwrap_or_default()
        ),
        Some(json!({})),
    );
    let waiting = waiting["runId"].as_str().expect("a run").to_owned();
    write(
        t,
        "POST",
        "/api/runs/{id}/cancel",
        &format!("/api/runs/{waiting}/cancel"),
        None,
    );
    let failing = write(
        t,
        "POST",
        "/api/automations",
        "/api/automations",
        Some(json!({
        "name": "Fails", "trigger": {"type": "manual"},
        "steps": [{"name": "close", "op": "ticket/close", "input": {"ticket": "TK-999"}}]})),
    );
    let failed = write(
        t,
        "POST",
        "/api/automations/{id}/runs",
        &format!(
            "/api/automations/{}/runs",
            failing["id"].as_str().unwrap_or_default()
        ),
        Some(json!({})),
    );
    let failed = failed["runId"].as_str().expect("a run").to_owned();
    server.until(
        t,
        &format!("/api/runs/{failed}"),
        "failed",
        DEADLINE,
        |run| run["status"] == "failed",
    );
    let incident = server.until(t, "/api/incidents", "an incident", DEADLINE, |page| {
        page["items"]
            .as_array()
            .is_some_and(|items| !items.is_empty())
    })["items"][0]["id"]
        .as_str()
        .expect("an incident id")
        .to_owned();
    write(
        t,
        "POST",
        "/api/runs/{id}/retry",
        &format!("/api/runs/{failed}/retry"),
        Some(json!({})),
    );
    let bulk = write(
        t,
        "POST",
        "/api/runs/bulk",
        "/api/runs/bulk",
        Some(json!({"action": "cancel", "filter": {"status": "queued"}})),
    );
    // A bulk action may be done before its cancel arrives (the worker is quick): then the
    // cancel is refused (409) and leaves no entry; else it leaves one.
    let bulk_id = bulk["id"].as_str().unwrap_or_default().to_owned();
    let (status, reply) = server.call("POST", &format!("/api/runs/bulk/{bulk_id}/cancel"), t, None);
    let log = server.ok("GET", "/api/admin/audit?limit=500", ADMIN, None);
    let entries = log["items"].as_array().map(Vec::len).unwrap_or_default();
    if status == 409 {
        assert_eq!(reply["error"]["code"], "run_finished", "{reply}");
        assert_eq!(entries, seen.get(), "a refused cancel leaves no entry");
    } else {
        assert!((200..300).contains(&status), "{status} {reply}");
        assert_eq!(entries, seen.get() + 1, "a cancel leaves one entry");
        seen.set(seen.get() + 1);
    }
    covered
        .borrow_mut()
        .insert(("POST".to_owned(), "/api/runs/bulk/{id}/cancel".to_owned()));
    write(
        t,
        "POST",
        "/api/incidents/{id}/resolve",
        &format!("/api/incidents/{incident}/resolve"),
        None,
    );
    let signed = write(
        t,
        "POST",
        "/api/automations",
        "/api/automations",
        Some(json!({
        "name": "Signed", "signingSecret": true,
        "trigger": {"type": "webhook", "params": []}, "steps": []})),
    );
    write(
        t,
        "POST",
        "/api/automations/{id}/rotate-signing-secret",
        &format!(
            "/api/automations/{}/rotate-signing-secret",
            signed["id"].as_str().unwrap_or_default()
        ),
        Some(json!({})),
    );
    write(t, "DELETE", "/api/automations/{id}", &at(""), None);

    // Every writing route of the table but those that write nothing and the one whose
    // answer depends on the network.
    let left_out = [
        ("POST", "/api/automations/test"),
        ("POST", "/api/automations/validate"),
        ("POST", "/api/automations/{id}/test"),
        ("POST", "/api/widgets/{id}/refresh"),
    ];
    let missing: Vec<String> = fronta_server::routes::route_docs()
        .into_iter()
        .flat_map(|route| {
            route.ops.into_iter().filter_map(move |op| {
                let writes = op.method != "GET"
                    && op.caller(route.path) != fronta_server::openapi::Caller::Anyone;
                writes.then(|| (op.method.to_owned(), route.path.to_owned()))
            })
        })
        .filter(|key| !covered.borrow().contains(key))
        .filter(|(method, path)| !left_out.contains(&(method.as_str(), path.as_str())))
        .map(|(method, path)| format!("{method} {path}"))
        .collect();
    assert!(
        missing.is_empty(),
        "writing routes the binary walk does not call: {missing:?}"
    );
    let log = server
        .ok("GET", "/api/admin/audit?limit=500", ADMIN, None)
        .to_string();
    assert!(
        !log.contains("walk-secret-value"),
        "no secret's value in the log"
    );
    // A summary names what changed, as a person reads it.
    let log: Value = serde_json::from_str(&log).expect("the log is JSON");
    let summaries: Vec<String> = log["items"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|entry| {
            format!(
                "{} {} {}",
                entry["method"].as_str().unwrap_or(""),
                entry["route"].as_str().unwrap_or(""),
                entry["summary"].as_str().unwrap_or("")
            )
        })
        .collect();
    for (call, ending) in [
        ("POST /api/admin/tenants ", ": \"Walk\""),
        ("POST /api/groups ", ": \"night\""),
        ("PATCH /api/groups/{id} ", ": to \"late\""),
        ("POST /api/groups/{id}/members ", ": \"Eva\""),
        (
            "PATCH /api/groups/{id}/members/{member_id} ",
            ": changes capacity",
        ),
        ("PATCH /api/ticket-types/{id} ", ": changes name"),
        ("POST /api/automations ", ": \"Signed\""),
    ] {
        assert!(
            summaries
                .iter()
                .any(|line| line.starts_with(call) && line.ends_with(ending)),
            "no summary of {call}ending in {ending:?}: {summaries:#?}"
        );
    }
    println!("binary audit walk: {} writes, one entry each", seen.get());
}

const SECRET_KEY_FLAG: [&str; 2] = [
    "--secret-key",
    "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=",
];

#[test]
fn every_write_is_audited_through_fronta_serve_on_sqlite() {
    support::on_sqlite_with("walk.db", ADMIN, &SECRET_KEY_FLAG, every_write_is_audited);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_audited_through_fronta_serve_on_postgres() {
    support::on_postgres_with(ADMIN, &SECRET_KEY_FLAG, every_write_is_audited).await;
}
