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
    server.ok(
        "POST",
        &format!("/api/runs/{run}/cancel"),
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
