//! Retry from any step as a user meets it, through the real `fronta serve` and `fronta
//! runs retry` on SQLite and on a fresh Postgres database: a run fails at its last step
//! for want of a status; the type gets the status; the run is started again from that
//! step — the ticket is not created again, the steps before are reused, the log says from
//! where — and completes. From its start it runs every step again; a step the version
//! lacks is a 400 naming it; a run still waiting is a 409; a cancelled run starts again;
//! the command line does the same.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::json;

const ADMIN: &str = "fa_restart_admin";
const DEADLINE: Duration = Duration::from_secs(90);

type Server = support::ApiServer;

fn scenario(server: &Server, database: &str) {
    let token = server.tenant("Acme");
    let order = server.ok(
        "POST",
        "/api/ticket-types",
        &token,
        Some(json!({"name": "order", "statuses": ["new"]})),
    );
    let type_id = order["id"].as_str().expect("an id").to_owned();
    let saved = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(json!({"name": "Ship", "trigger": {"type": "manual"}, "steps": [
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "order-{{_body.id}}", "type": "order", "status": "new"}},
            {"name": "note", "op": "flow/log", "input": {"message": "working on {{ticket.number}}"}},
            {"name": "ship", "op": "ticket/set-status", "input": {"ticket": "{{ticket.id}}", "status": "{{_body.status}}"}}]})),
    );
    let id = saved["id"].as_str().expect("an id").to_owned();
    let started = server.ok(
        "POST",
        &format!("/api/automations/{id}/runs"),
        &token,
        Some(json!({"id": "7", "status": "shipped"})),
    );
    let failed = started["runId"].as_str().expect("a run").to_owned();
    let run = server.until(
        &token,
        &format!("/api/runs/{failed}"),
        "the run failed",
        DEADLINE,
        |run| run["status"] == "failed",
    );
    assert!(
        support::step_lines(&run)
            .last()
            .is_some_and(|line| line.starts_with("ship failed")),
        "{:#?}",
        support::step_lines(&run)
    );

    // The status the step needs, then the run again from that step.
    server.ok(
        "PATCH",
        &format!("/api/ticket-types/{type_id}"),
        &token,
        Some(json!({"statuses": ["new", "shipped"]})),
    );
    let (status, refused) = server.call(
        "POST",
        &format!("/api/runs/{failed}/retry"),
        &token,
        Some(json!({"fromStep": "shpi"})),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"shpi\"") && m.contains("ticket, note, ship")),
        "{refused}"
    );
    let again = server.ok(
        "POST",
        &format!("/api/runs/{failed}/retry"),
        &token,
        Some(json!({"fromStep": "ship"})),
    );
    assert_eq!(again["retryOf"], failed.as_str(), "{again}");
    assert_eq!(again["fromStep"], "ship", "{again}");
    let new = again["runId"].as_str().expect("a new run").to_owned();
    assert_ne!(new, failed, "a new run");
    let run = server.until(
        &token,
        &format!("/api/runs/{new}"),
        "the new run completed",
        DEADLINE,
        |run| run["status"] == "completed",
    );
    let said = support::step_lines(&run);
    assert!(
        said[0].starts_with(&format!(
            "ticket reused: reused from run {failed}: created ticket TK-1"
        )),
        "{said:#?}"
    );
    assert!(said[1].starts_with("note reused:"), "{said:#?}");
    assert!(
        said[2].contains("retried: started again by hand through the API from step \"ship\""),
        "{said:#?}"
    );
    assert!(said[3].starts_with("ship ok: TK-1 is shipped"), "{said:#?}");
    let old = server.ok("GET", &format!("/api/runs/{failed}"), &token, None);
    assert_eq!(old["status"], "failed", "the old run stays as it was");
    let tickets = server.ok("GET", "/api/tickets", &token, None);
    assert_eq!(
        tickets["items"].as_array().map(Vec::len),
        Some(1),
        "no second ticket: {tickets}"
    );
    let ticket = tickets["items"][0]["id"]
        .as_str()
        .expect("a ticket")
        .to_owned();
    let log = server.ok("GET", &format!("/api/tickets/{ticket}"), &token, None);
    let created = log["log"]
        .as_array()
        .expect("a log")
        .iter()
        .filter(|line| line["kind"] == "created")
        .count();
    assert_eq!(created, 1, "created once: {log}");

    // From its start: every step runs again (the upsert attaches).
    let again = server.ok(
        "POST",
        &format!("/api/runs/{new}/retry"),
        &token,
        Some(json!({"fromStart": true})),
    );
    let from_start = again["runId"].as_str().expect("a run").to_owned();
    let run = server.until(
        &token,
        &format!("/api/runs/{from_start}"),
        "completed from the start",
        DEADLINE,
        |run| run["status"] == "completed",
    );
    let said = support::step_lines(&run);
    assert!(
        said.iter().any(|line| line.contains("from the start")),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|line| line.starts_with("ticket ok: attached to ticket TK-1")),
        "{said:#?}"
    );

    // Still going: 409. Cancelled: starts again.
    let waits = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(json!({"name": "Waits", "trigger": {"type": "manual"},
            "steps": [{"name": "wait", "op": "flow/pause", "input": {"seconds": 3600}}]})),
    );
    let started = server.ok(
        "POST",
        &format!(
            "/api/automations/{}/runs",
            waits["id"].as_str().expect("an id")
        ),
        &token,
        Some(json!({})),
    );
    let asleep = started["runId"].as_str().expect("a run").to_owned();
    server.until(
        &token,
        &format!("/api/runs/{asleep}"),
        "asleep",
        DEADLINE,
        |run| run["status"] == "scheduled",
    );
    let (status, refused) = server.call(
        "POST",
        &format!("/api/runs/{asleep}/retry"),
        &token,
        Some(json!({"fromStart": true})),
    );
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "run_not_finished", "{refused}");
    server.ok("POST", &format!("/api/runs/{asleep}/cancel"), &token, None);
    let again = server.ok(
        "POST",
        &format!("/api/runs/{asleep}/retry"),
        &token,
        Some(json!({"fromStart": true})),
    );
    assert_eq!(
        again["retryOf"],
        asleep.as_str(),
        "a cancelled run starts again: {again}"
    );

    // The command line.
    let out = Command::new(support::FRONTA)
        .args([
            "--database",
            database,
            "runs",
            "retry",
            &failed,
            "--from-step",
            "note",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("fronta runs retry runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let from_cli = text
        .split(':')
        .next()
        .expect("the new run's id")
        .trim()
        .to_owned();
    let run = server.until(
        &token,
        &format!("/api/runs/{from_cli}"),
        "the CLI's run completed",
        DEADLINE,
        |run| run["status"] == "completed",
    );
    let said = support::step_lines(&run);
    assert!(
        said[0].starts_with("ticket reused:") && said[1].contains("from step \"note\""),
        "{said:#?}"
    );
}

#[test]
fn a_finished_run_starts_again_from_any_step_on_sqlite() {
    support::on_sqlite_with("restart.db", ADMIN, &[], scenario);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_starts_again_from_any_step_on_postgres() {
    support::on_postgres_with(ADMIN, &[], scenario).await;
}
