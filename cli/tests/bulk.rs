//! Bulk actions as a user meets them, through the real `fronta serve` on SQLite and on a
//! fresh Postgres database: five orders fail at their last step for want of a status; the
//! type gets the status; "retry all failed" counts them first (a preview), then retries
//! every one as one bulk action whose progress ends at 5 of 5 — and the runs complete.
//! Three runs pausing for an hour are cancelled by "cancel all of that automation". A
//! filter that matches nothing acts on nothing and says 0; an unknown filter is a 400
//! naming it; another tenant's bulk action is a 404 and its bulk touches none of ours.

mod support;

use std::time::Duration;

use serde_json::{Value, json};

const ADMIN: &str = "fa_bulk_admin";
const DEADLINE: Duration = Duration::from_secs(90);

type Server = support::ApiServer;

fn start(server: &Server, token: &str, automation: &str, body: Value) -> String {
    let started = server.ok(
        "POST",
        &format!("/api/automations/{automation}/runs"),
        token,
        Some(body),
    );
    started["runId"].as_str().expect("a run").to_owned()
}

/// Starts a bulk action and waits for it to end; answers its last progress.
fn bulk(server: &Server, token: &str, body: Value) -> Value {
    let (status, started) = server.call("POST", "/api/runs/bulk", token, Some(body));
    assert_eq!(status, 202, "{started}");
    let id = started["id"]
        .as_str()
        .expect("a bulk action's id")
        .to_owned();
    server.until(
        token,
        &format!("/api/runs/bulk/{id}"),
        "the bulk action ended",
        DEADLINE,
        |job| job["status"] == "completed" || job["status"] == "failed",
    )
}

fn count(server: &Server, token: &str, query: &str) -> usize {
    server.ok("GET", &format!("/api/runs?{query}"), token, None)["items"]
        .as_array()
        .map_or(0, Vec::len)
}

fn scenario(server: &Server, _database: &str) {
    let token = server.tenant("Acme");
    let other = server.tenant("Other");
    let order = server.ok(
        "POST",
        "/api/ticket-types",
        &token,
        Some(json!({"name": "order", "statuses": ["new"]})),
    );
    let type_id = order["id"].as_str().expect("an id").to_owned();
    let ship = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(json!({"name": "Ship", "trigger": {"type": "manual"}, "steps": [
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "order-{{_body.id}}", "type": "order", "status": "new"}},
            {"name": "ship", "op": "ticket/set-status", "input": {"ticket": "{{ticket.id}}", "status": "{{_body.status}}"}}]})),
    );
    let ship = ship["id"].as_str().expect("an id").to_owned();
    let failed: Vec<String> = (1..=5)
        .map(|n| {
            start(
                server,
                &token,
                &ship,
                json!({"id": n.to_string(), "status": "shipped"}),
            )
        })
        .collect();
    for run in &failed {
        server.until(
            &token,
            &format!("/api/runs/{run}"),
            "the order failed",
            DEADLINE,
            |run| run["status"] == "failed",
        );
    }

    // Bad input: an unknown filter, an unknown action.
    let (status, refused) = server.call(
        "POST",
        "/api/runs/bulk",
        &token,
        Some(json!({"action": "retry", "filter": {"stauts": "failed"}})),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("stauts")),
        "{refused}"
    );
    let (status, refused) = server.call(
        "POST",
        "/api/runs/bulk",
        &token,
        Some(json!({"action": "delete", "filter": {}})),
    );
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = server.call(
        "POST",
        "/api/runs/bulk",
        &token,
        Some(json!({"action": "retry", "filter": {"status": "failde"}})),
    );
    assert_eq!(status, 400, "{refused}");

    // Another tenant's "retry everything" touches none of ours.
    let theirs = bulk(
        server,
        &other,
        json!({"action": "retry", "filter": {"status": "failed"}}),
    );
    assert_eq!(theirs["status"], "completed", "{theirs}");
    assert_eq!(
        (&theirs["total"], &theirs["acted"]),
        (&json!(0), &json!(0)),
        "{theirs}"
    );
    let (status, _) = server.call(
        "GET",
        &format!("/api/runs/bulk/{}", theirs["id"].as_str().expect("an id")),
        &token,
        None,
    );
    assert_eq!(status, 404, "another tenant's bulk action is unknown here");
    assert_eq!(count(server, &token, "status=failed"), 5);

    // A filter that matches nothing acts on nothing and says 0.
    let preview = server.ok(
        "POST",
        "/api/runs/bulk",
        &token,
        Some(json!({"action": "retry", "filter": {"status": "failed", "q": "no such words"}, "preview": true})),
    );
    assert_eq!(
        (&preview["matching"], &preview["exact"]),
        (&json!(0), &json!(true)),
        "{preview}"
    );
    let nothing = bulk(
        server,
        &token,
        json!({"action": "retry", "filter": {"status": "failed", "q": "no such words"}}),
    );
    assert_eq!(
        (&nothing["status"], &nothing["total"], &nothing["acted"]),
        (&json!("completed"), &json!(0), &json!(0)),
        "{nothing}"
    );
    assert_eq!(count(server, &token, "status=failed"), 5, "nothing retried");

    // The status the step needs; then every failed run of Ship, after a preview.
    server.ok(
        "PATCH",
        &format!("/api/ticket-types/{type_id}"),
        &token,
        Some(json!({"statuses": ["new", "shipped"]})),
    );
    let filter = json!({"status": "failed", "automation": ship});
    let preview = server.ok(
        "POST",
        "/api/runs/bulk",
        &token,
        Some(json!({"action": "retry", "filter": filter, "preview": true})),
    );
    assert_eq!(preview["matching"], 5, "{preview}");
    assert_eq!(
        count(server, &token, "status=failed"),
        5,
        "a preview acts on nothing"
    );
    let done = bulk(server, &token, json!({"action": "retry", "filter": filter}));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        (
            &done["phase"],
            &done["total"],
            &done["matched"],
            &done["acted"],
            &done["skipped"]
        ),
        (&json!("done"), &json!(5), &json!(5), &json!(5), &json!(0)),
        "{done}"
    );
    assert_eq!(done["percent"], 100, "{done}");
    for run in &failed {
        server.until(
            &token,
            &format!("/api/runs/{run}"),
            "the retried order completed",
            DEADLINE,
            |run| run["status"] == "completed",
        );
    }
    // Again: nothing is failed any more.
    let again = bulk(server, &token, json!({"action": "retry", "filter": filter}));
    assert_eq!(
        (&again["total"], &again["acted"]),
        (&json!(0), &json!(0)),
        "{again}"
    );
    let (status, refused) = server.call(
        "POST",
        &format!(
            "/api/runs/bulk/{}/cancel",
            again["id"].as_str().expect("an id")
        ),
        &token,
        None,
    );
    assert_eq!(status, 409, "a finished bulk action: {refused}");

    // Cancel all runs of an automation: the ones waiting are cancelled, the finished
    // ones of another automation untouched.
    let waits = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(json!({"name": "Waits", "trigger": {"type": "manual"},
            "steps": [{"name": "wait", "op": "flow/pause", "input": {"seconds": 3600}}]})),
    );
    let waits = waits["id"].as_str().expect("an id").to_owned();
    let asleep: Vec<String> = (0..3)
        .map(|_| start(server, &token, &waits, json!({})))
        .collect();
    for run in &asleep {
        server.until(
            &token,
            &format!("/api/runs/{run}"),
            "asleep",
            DEADLINE,
            |run| run["status"] == "scheduled",
        );
    }
    let cancelled = bulk(
        server,
        &token,
        json!({"action": "cancel", "filter": {"automation": waits}}),
    );
    assert_eq!(
        (
            &cancelled["total"],
            &cancelled["acted"],
            &cancelled["skipped"]
        ),
        (&json!(3), &json!(3), &json!(0)),
        "{cancelled}"
    );
    for run in &asleep {
        let run = server.ok("GET", &format!("/api/runs/{run}"), &token, None);
        assert_eq!(run["status"], "cancelled", "{run}");
    }
    let everything = bulk(server, &token, json!({"action": "cancel", "filter": {}}));
    assert_eq!(
        (&everything["acted"], &everything["skipped"]),
        (&json!(0), &json!(everything["total"])),
        "every run is finished: each is skipped, saying why: {everything}"
    );
    assert!(
        everything["skips"].as_array().is_some_and(|skips| skips
            .iter()
            .any(|skip| skip["reason"] == "already completed")),
        "{everything}"
    );
    assert_eq!(
        count(
            server,
            &token,
            &format!("status=completed&automation={ship}")
        ),
        5
    );
}

#[test]
fn every_matching_run_is_retried_or_cancelled_as_one_bulk_action_on_sqlite() {
    support::on_sqlite_with("bulk.db", ADMIN, &[], scenario);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_matching_run_is_retried_or_cancelled_as_one_bulk_action_on_postgres() {
    support::on_postgres_with(ADMIN, &[], scenario).await;
}
