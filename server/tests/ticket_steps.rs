//! The ticket steps of issue 23 end to end through the router, the SQLite store, the
//! worker and the executor: `ticket/get` reads the ticket as it is now (after a pause, a
//! person's change shows; by number or id; an unknown one fails the run naming it),
//! `ticket/comment` writes a note on the ticket's log naming the automation and its
//! version (and a dry run only says it would), and `ticket/upsert`'s `onExisting` — the
//! repeated order webhook that moved a shipped, closed ticket back to waiting-to-pack
//! now leaves it as it is, saying so on its log; `onExisting` names what applies, and an
//! unknown name is refused on save with a 422 at its path.
//!
//! Also here: the SLA recipe of `docs/recipes.md` on a moved clock, mailing a real SMTP
//! server (the same recipe runs on both stores in the runtime scenarios,
//! `an_sla_timer_fires_at_its_time_on_the_ticket_as_it_is_then`).

#[path = "../../connectors/tests/smtp_server/mod.rs"]
mod smtp_server;
mod support;

use std::time::Duration;

use axum::http::{Method, StatusCode};
use fronta_automation::service_limits::LimitsConfig;
use fronta_engine::ManualClock;
use serde_json::{Value, json};
use smtp_server::{Options, SmtpServer, header};
use support::{Harness, order_body, order_type, orders_automation, webhook_path};

/// The recipe as documented: the test reads the file the docs point to.
const SLA_RECIPE: &str = include_str!("../../docs/recipes/sla-breach.json");

async fn run(harness: &Harness, token: &str, id: &str) -> Value {
    let reply = harness.get(&format!("/api/runs/{id}"), token).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    reply.json
}

fn step(run: &Value, name: &str) -> Value {
    run["steps"]
        .as_array()
        .and_then(|steps| steps.iter().rev().find(|step| step["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no step {name} in {run}"))
}

/// The tenant's tickets, newest first.
async fn tickets(harness: &Harness, token: &str) -> Vec<Value> {
    let reply = harness.get("/api/tickets", token).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    reply.json["items"].as_array().cloned().unwrap_or_default()
}

async fn ticket(harness: &Harness, token: &str, id: &str) -> Value {
    let reply = harness.get(&format!("/api/tickets/{id}"), token).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    reply.json
}

async fn patch_ticket(harness: &Harness, token: &str, id: &str, change: Value) -> Value {
    let reply = harness
        .call(
            Method::PATCH,
            &format!("/api/tickets/{id}"),
            Some(token),
            Some(change),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    reply.json
}

/// A tenant with the `order` type and the orders automation of API.md; its token and
/// the automation.
async fn shop(harness: &Harness) -> (String, Value) {
    let (_, token) = harness.tenant("Acme").await;
    let typed = harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    assert_eq!(typed.status, StatusCode::CREATED, "{}", typed.json);
    let orders = harness.automation(&token, orders_automation()).await;
    (token, orders)
}

async fn order(harness: &Harness, orders: &Value, id: &str) -> String {
    let accepted = harness
        .webhook(&webhook_path(orders), &order_body(id), &[])
        .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.json);
    accepted.text("runId")
}

#[tokio::test]
async fn ticket_get_reads_the_ticket_as_it_is_now_after_a_pause() {
    let clock = ManualClock::new(chrono::Utc::now());
    let harness = Harness::with_limits(LimitsConfig::default(), clock.clone());
    let (token, orders) = shop(&harness).await;
    let pausing = harness
        .automation(
            &token,
            json!({"name": "Later", "trigger": {"type": "event", "event": "ticket.created"},
                   "steps": [
                       {"name": "wait", "op": "flow/pause", "input": {"seconds": 60}},
                       {"name": "now", "op": "ticket/get"},
                       {"name": "say", "op": "flow/log",
                        "input": {"message": "{{ticket.status}} then, {{now.status}} now (closed: {{now.closed}})"}}]}),
        )
        .await;
    order(&harness, &orders, "5001").await;
    harness.drain().await;
    let id = tickets(&harness, &token).await[0]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    patch_ticket(
        &harness,
        &token,
        &id,
        json!({"status": "shipped", "closed": true}),
    )
    .await;
    let later = harness.get("/api/runs?status=scheduled", &token).await;
    let paused = later.json["items"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the paused run: {}", later.json))
        .to_owned();
    clock.advance(Duration::from_secs(61));
    harness.drain().await;
    let shown = run(&harness, &token, &paused).await;
    assert_eq!(shown["status"], "completed", "{shown}");
    let now = step(&shown, "now");
    assert_eq!(now["status"], "ok", "{now}");
    assert_eq!(
        now["message"],
        "TK-1 is closed, unassigned, status shipped, tags [waiting-to-pack]"
    );
    let mut expected = ticket(&harness, &token, &id).await;
    let object = expected.as_object_mut().expect("a ticket");
    for gone in ["log", "createdAt", "updatedAt"] {
        object.remove(gone);
    }
    assert_eq!(
        now["outputs"], expected,
        "the outputs are the ticket as the API shows it, as an event's ticket"
    );
    assert_eq!(
        step(&shown, "say")["message"],
        "waiting-to-pack then, shipped now (closed: true)",
        "the event's snapshot stays; the step reads the present"
    );

    // A dry run reads the ticket the same way and writes nothing.
    let tested = harness
        .post(
            &format!(
                "/api/automations/{}/test",
                pausing["id"].as_str().expect("an id")
            ),
            &token,
            json!({"ticket": "TK-1"}),
        )
        .await;
    assert_eq!(tested.status, StatusCode::OK, "{}", tested.json);
    assert_eq!(tested.json["status"], "completed", "{}", tested.json);
    assert_eq!(
        step(&tested.json, "now")["message"],
        "TK-1 is closed, unassigned, status shipped, tags [waiting-to-pack]"
    );
    assert_eq!(tested.json["writes"], json!([]), "{}", tested.json);
}

#[tokio::test]
async fn ticket_get_takes_a_number_or_an_id_and_an_unknown_one_fails_the_run() {
    let harness = Harness::new();
    let (token, orders) = shop(&harness).await;
    order(&harness, &orders, "5001").await;
    harness.drain().await;
    let id = tickets(&harness, &token).await[0]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let reader = harness
        .automation(
            &token,
            json!({"name": "Read", "trigger": {"type": "manual"},
                   "steps": [
                       {"name": "byNumber", "op": "ticket/get", "input": {"ticket": "{{_body.number}}"}},
                       {"name": "byId", "op": "ticket/get", "input": {"ticket": "{{_body.id}}"}}]}),
        )
        .await;
    let path = format!(
        "/api/automations/{}/runs",
        reader["id"].as_str().expect("an id")
    );
    let fine = harness
        .post(&path, &token, json!({"number": "TK-1", "id": id}))
        .await;
    assert_eq!(fine.status, StatusCode::ACCEPTED, "{}", fine.json);
    let unknown = harness
        .post(&path, &token, json!({"number": "TK-99", "id": id}))
        .await;
    harness.drain().await;
    let shown = run(&harness, &token, &fine.text("runId")).await;
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(step(&shown, "byNumber")["outputs"]["id"], json!(id));
    assert_eq!(step(&shown, "byId")["outputs"]["number"], "TK-1");
    let failed = run(&harness, &token, &unknown.text("runId")).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(
        failed["attempts"], 0,
        "a missing ticket is not retried: {failed}"
    );
    assert!(
        failed["lastError"]
            .as_str()
            .is_some_and(|error| error.contains("input \"ticket\": there is no ticket \"TK-99\"")),
        "{failed}"
    );
}

#[tokio::test]
async fn ticket_comment_notes_the_automation_and_its_version_and_a_dry_run_writes_none() {
    let harness = Harness::new();
    let (token, _) = shop(&harness).await;
    let definition = |text: &str| {
        json!({"name": "Noted orders",
               "trigger": {"type": "webhook", "params": [
                   {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
               "steps": [
                   {"name": "ticket", "op": "ticket/upsert",
                    "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}"}},
                   {"name": "note", "op": "ticket/comment", "input": {"text": text}}]})
    };
    let noted = harness
        .automation(&token, definition("Order {{orderId}} came in"))
        .await;
    let first = harness
        .webhook(&webhook_path(&noted), &order_body("5001"), &[])
        .await;
    harness.drain().await;
    let id = noted["id"].as_str().expect("an id").to_owned();
    let replaced = harness
        .call(
            Method::PUT,
            &format!("/api/automations/{id}"),
            Some(&token),
            Some(definition("Order {{orderId}} came in again")),
        )
        .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.json);
    harness
        .webhook(&webhook_path(&noted), &order_body("5001"), &[])
        .await;
    harness.drain().await;

    let shown = run(&harness, &token, &first.text("runId")).await;
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(step(&shown, "note")["message"], "noted on TK-1");
    let ticket_id = tickets(&harness, &token).await[0]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let log = ticket(&harness, &token, &ticket_id).await["log"].clone();
    let notes: Vec<&Value> = log
        .as_array()
        .expect("a log")
        .iter()
        .filter(|line| line["kind"] == "note")
        .collect();
    assert_eq!(notes.len(), 2, "{log}");
    assert_eq!(
        notes[0]["message"],
        "Note by automation \"Noted orders\" (version 1): Order 5001 came in"
    );
    assert_eq!(notes[0]["runId"], json!(first.text("runId")));
    assert_eq!(
        notes[1]["message"],
        "Note by automation \"Noted orders\" (version 2): Order 5001 came in again",
        "each note says which version wrote it"
    );

    // A dry run says what it would note and writes nothing.
    let tested = harness
        .post(
            &format!("/api/automations/{id}/test"),
            &token,
            json!({"body": {"data": {"order": {"id": "5001"}}}}),
        )
        .await;
    assert_eq!(tested.status, StatusCode::OK, "{}", tested.json);
    assert_eq!(tested.json["status"], "completed", "{}", tested.json);
    let would = step(&tested.json, "note");
    assert!(
        would["message"]
            .as_str()
            .is_some_and(|message| message.starts_with(
                "would add to TK-1's log: Note by automation \"Noted orders\" (version 2): Order \
             5001 came in again"
            )),
        "{would}"
    );
    let after = ticket(&harness, &token, &ticket_id).await["log"].clone();
    assert_eq!(after, log, "the dry run wrote nothing");
}

/// The bug: a repeated order webhook re-applied `status` through `ticket/upsert`,
/// and a shipped, closed ticket went back to waiting-to-pack while staying closed.
#[tokio::test]
async fn a_repeated_order_webhook_leaves_a_shipped_closed_ticket_as_it_is() {
    let harness = Harness::new();
    let (token, orders) = shop(&harness).await;
    order(&harness, &orders, "5001").await;
    harness.drain().await;
    let id = tickets(&harness, &token).await[0]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let shipped = patch_ticket(
        &harness,
        &token,
        &id,
        json!({"status": "shipped", "closed": true}),
    )
    .await;
    let repeated = order(&harness, &orders, "5001").await;
    harness.drain().await;
    let shown = run(&harness, &token, &repeated).await;
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(step(&shown, "ticket")["outputs"]["created"], false);
    let now = ticket(&harness, &token, &id).await;
    assert_eq!(now["status"], "shipped", "the status stays: {now}");
    assert_eq!(now["closed"], true, "still closed: {now}");
    assert_eq!(
        now["updatedAt"], shipped["updatedAt"],
        "nothing was written"
    );
    let line = now["log"]
        .as_array()
        .and_then(|log| log.iter().rev().find(|line| line["kind"] == "event"))
        .cloned()
        .unwrap_or_else(|| panic!("the event's line: {now}"));
    let message = line["message"].as_str().unwrap_or("");
    assert!(
        message.contains("attached to TK-1")
            && message
                .contains("nothing changed; kept status shipped (the event said waiting-to-pack)")
            && message.ends_with("— onExisting applies nothing to an existing ticket"),
        "the ticket's log says what the event would have changed: {message}"
    );

    // What onExisting names applies: here the tags, never the status.
    let mut tagging = orders_automation();
    tagging["name"] = json!("Orders, tagged");
    tagging["steps"][0]["input"]["tags"] = json!(["repeated"]);
    tagging["steps"][0]["input"]["onExisting"] = json!(["tags"]);
    let tagging = harness.automation(&token, tagging).await;
    order(&harness, &tagging, "5001").await;
    harness.drain().await;
    let now = ticket(&harness, &token, &id).await;
    assert_eq!(now["tags"], json!(["waiting-to-pack", "repeated"]), "{now}");
    assert_eq!(
        (&now["status"], &now["closed"]),
        (&json!("shipped"), &json!(true))
    );
}

#[tokio::test]
async fn an_unknown_on_existing_name_is_refused_on_save_at_its_path() {
    let harness = Harness::new();
    let (token, _) = shop(&harness).await;
    let mut definition = orders_automation();
    definition["name"] = json!("Orders again");
    definition["steps"][0]["input"]["onExisting"] = json!(["tags", "stauts"]);
    let refused = harness.post("/api/automations", &token, definition).await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.json
    );
    assert_eq!(refused.code(), "invalid_automation");
    let problems = refused.json["error"]["problems"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(problems.len(), 1, "{}", refused.json);
    assert_eq!(problems[0]["path"], "steps[0].input.onExisting[1]");
    assert!(
        problems[0]["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("unknown input \"stauts\" in onExisting")),
        "{}",
        refused.json
    );
}

/// The recipe of `docs/recipes.md`: a ticket nobody took within 4 hours is tagged,
/// given to the lead and mailed about — at its time on a moved clock, through a real
/// SMTP server. The run is due exactly 4 h after the ticket was created; a second
/// before, nothing; at its time, the worker's next look for due runs takes it.
#[tokio::test]
async fn the_sla_recipe_mails_the_leads_when_the_clock_reaches_its_time() {
    let Some(smtp) = SmtpServer::start(Options::default()) else {
        return;
    };
    let start = chrono::DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z")
        .expect("an instant")
        .with_timezone(&chrono::Utc);
    let clock = ManualClock::new(start);
    let harness = Harness::with_limits(LimitsConfig::default(), clock.clone());
    let (token, orders) = shop(&harness).await;
    let server = harness
        .post(
            "/api/mail-servers",
            &token,
            json!({"name": "desk", "host": "127.0.0.1", "port": smtp.port, "security": "none",
                   "from": "Service desk <desk@firm.example>"}),
        )
        .await;
    assert_eq!(server.status, StatusCode::CREATED, "{}", server.json);
    let leads = harness
        .post("/api/groups", &token, json!({"name": "leads"}))
        .await;
    let lena = harness
        .post(
            &format!("/api/groups/{}/members", leads.text("id")),
            &token,
            json!({"name": "Lena", "capacity": 100}),
        )
        .await;
    assert_eq!(lena.status, StatusCode::CREATED, "{}", lena.json);
    let recipe: Value = serde_json::from_str(SLA_RECIPE).expect("the recipe is JSON");
    harness.automation(&token, recipe).await;

    order(&harness, &orders, "5001").await;
    harness.drain().await;
    let paused = harness.get("/api/runs?status=scheduled", &token).await;
    let items = paused.json["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "the SLA run sleeps: {}", paused.json);
    let due = start + chrono::Duration::hours(4);
    let run_at: chrono::DateTime<chrono::Utc> = items[0]["runAt"]
        .as_str()
        .and_then(|at| at.parse().ok())
        .unwrap_or_else(|| panic!("runAt: {}", paused.json));
    assert_eq!(run_at, due, "due exactly 4 h after the ticket was created");
    let sla_run = items[0]["id"].as_str().expect("an id").to_owned();

    clock.set(due - chrono::Duration::seconds(1));
    harness.drain().await;
    assert_eq!(run(&harness, &token, &sla_run).await["status"], "scheduled");
    assert!(smtp.messages().is_empty(), "not a second early");

    clock.set(due);
    harness.drain().await;
    let shown = run(&harness, &token, &sla_run).await;
    assert_eq!(shown["status"], "completed", "{shown}");
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["rcptTos"], json!(["leads@firm.example"]));
    assert_eq!(
        header(&messages[0], "Subject").as_deref(),
        Some("SLA breach: TK-1 Order 5001")
    );
    assert!(
        messages[0]["data"].as_str().is_some_and(|data| data
            .contains("TK-1 (Order 5001) waited 4 hours with nobody on it. It is now with Lena.")),
        "{messages:?}"
    );
    let id = tickets(&harness, &token).await[0]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let now = ticket(&harness, &token, &id).await;
    assert_eq!(
        now["tags"],
        json!(["waiting-to-pack", "sla-breach"]),
        "{now}"
    );
    assert_eq!(now["assignee"]["name"], "Lena", "{now}");
    assert!(
        now["log"]
            .as_array()
            .is_some_and(|log| log.iter().any(|line| line["kind"] == "note"
                && line["message"]
                    .as_str()
                    .is_some_and(|m| m.ends_with("given to Lena, the leads were told.")))),
        "{now}"
    );
}
