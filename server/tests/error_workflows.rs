//! Error workflows end to end (`fronta_automation::error_events`): the router, the SQLite
//! store, the worker and the executor. An automation whose step fails starts the tenant's
//! `run.failed` automation once, whose context holds the failed automation's name and
//! version, the failed step, the tenant-facing words and the ticket — never the admin
//! detail; an `incident.opened` automation runs once per incident (a repeat of an open
//! incident counts it, a new one after a resolve starts it again); an error workflow that
//! fails starts neither itself nor another error workflow (two failing ones run once
//! each); another tenant's error workflows never hear of it. Saving checks the event's
//! context; a dry run starts from a sample context.

mod support;

use axum::http::StatusCode;
use serde_json::{Value, json};
use support::{Harness, webhook_path};

/// A webhook automation that upserts an order's ticket and then sets the status it was
/// sent: a status the type does not have fails the run (fatally) at step `status`.
fn orders() -> Value {
    json!({
        "name": "Orders",
        "trigger": {"type": "webhook", "params": [
            {"name": "orderId", "path": "orderId", "type": "string", "required": true},
            {"name": "newStatus", "path": "status", "type": "string", "required": true}]},
        "steps": [
            {"name": "ticket", "op": "ticket/upsert",
             "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
                       "type": "order", "status": "waiting-to-pack"}},
            {"name": "status", "op": "ticket/set-status",
             "input": {"ticket": "{{ticket.id}}", "status": "{{newStatus}}"}}
        ]
    })
}

/// An automation on `event` that logs what it was told.
fn listener(name: &str, event: &str, message: &str) -> Value {
    json!({
        "name": name,
        "trigger": {"type": "event", "event": event},
        "steps": [{"name": "say", "op": "flow/log", "input": {"message": message}}]
    })
}

/// A `run.failed` automation that fails itself: the status it sets is no status.
fn failing_listener(name: &str) -> Value {
    json!({
        "name": name,
        "trigger": {"type": "event", "event": "run.failed"},
        "steps": [{"name": "again", "op": "ticket/set-status",
                   "input": {"ticket": "{{ticket.id}}", "status": "{{step.key}}"}}]
    })
}

/// A tenant with the `order` type and the orders automation: its token and the
/// automation's JSON answer.
async fn shop(harness: &Harness, name: &str) -> (String, Value) {
    let (_, token) = harness.tenant(name).await;
    let typed = harness
        .post("/api/ticket-types", &token, support::order_type())
        .await;
    assert_eq!(typed.status, StatusCode::CREATED, "type: {}", typed.json);
    let orders = harness.automation(&token, orders()).await;
    (token, orders)
}

/// Send an order whose status is `status` (`vanished`: the run fails).
async fn order(harness: &Harness, orders: &Value, id: &str, status: &str) {
    let body = json!({"orderId": id, "status": status}).to_string();
    let reply = harness.webhook(&webhook_path(orders), &body, &[]).await;
    assert_eq!(
        reply.status,
        StatusCode::ACCEPTED,
        "webhook: {}",
        reply.json
    );
}

/// Every run of `automation` (its JSON answer), as `GET /api/runs/{id}` shows it.
async fn runs_of(harness: &Harness, token: &str, automation: &Value) -> Vec<Value> {
    let id = automation["id"].as_str().expect("an automation id");
    let page = harness
        .get(&format!("/api/runs?automation={id}&limit=100"), token)
        .await;
    assert_eq!(page.status, StatusCode::OK, "runs: {}", page.json);
    let mut runs = Vec::new();
    for item in page.json["items"].as_array().expect("a page") {
        let run = item["id"].as_str().expect("a run id");
        runs.push(harness.get(&format!("/api/runs/{run}"), token).await.json);
    }
    runs
}

/// The only run of `automation`, or a panic showing them all.
async fn only_run(harness: &Harness, token: &str, automation: &Value) -> Value {
    let runs = runs_of(harness, token, automation).await;
    assert_eq!(
        runs.len(),
        1,
        "one run of {}: {runs:#?}",
        automation["name"]
    );
    runs.into_iter().next().expect("a run")
}

#[tokio::test]
async fn a_failed_run_starts_the_tenants_run_failed_automation_once_with_the_tenant_words() {
    let harness = Harness::new();
    let (token, orders_automation) = shop(&harness, "Acme").await;
    let tell = harness
        .automation(
            &token,
            listener(
                "Tell us",
                "run.failed",
                "{{automation.name}} v{{automation.version}} failed at {{step.key}} ({{step.op}}) on {{ticket.number}}: {{message}}",
            ),
        )
        .await;
    // Another tenant listens too: it hears nothing of Acme's failures.
    let (other_token, _) = shop(&harness, "Globex").await;
    let other_tell = harness
        .automation(
            &other_token,
            listener("Tell Globex", "run.failed", "{{message}}"),
        )
        .await;
    let other_watch = harness
        .automation(
            &other_token,
            listener("Watch Globex", "incident.opened", "{{incident.title}}"),
        )
        .await;

    order(&harness, &orders_automation, "5001", "vanished").await;
    harness.drain().await;

    let failed = only_run(&harness, &token, &orders_automation).await;
    assert_eq!(failed["status"], "failed", "the order run failed: {failed}");
    let lines = failed["steps"].as_array().expect("a step log");
    assert_eq!(
        lines.last().expect("a line")["status"],
        "failed",
        "the failure stays the last line: {lines:#?}"
    );
    let told = lines
        .iter()
        .find(|line| line["op"] == "run/error-workflows")
        .unwrap_or_else(|| panic!("a line says whom the failure started: {lines:#?}"));
    assert!(
        told["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("run.failed: started \"Tell us\" (run ")),
        "{told}"
    );

    let run = only_run(&harness, &token, &tell).await;
    assert_eq!(run["status"], "completed", "the error workflow ran: {run}");
    let input = &run["input"];
    assert_eq!(input["automation"]["name"], "Orders", "{input}");
    assert_eq!(input["automation"]["version"], 1, "{input}");
    assert_eq!(
        input["automation"]["id"], orders_automation["id"],
        "{input}"
    );
    assert_eq!(input["run"]["id"], failed["id"], "the failed run: {input}");
    assert_eq!(
        input["step"],
        json!({"key": "status", "op": "ticket/set-status"}),
        "the failed step"
    );
    let title = "The automation for ticket TK-1 did not finish; we lost no data.";
    assert_eq!(input["message"], title, "the tenant-facing words: {input}");
    assert_eq!(input["ticket"]["number"], "TK-1", "the ticket as it is now");
    assert_eq!(input["ticket"]["externalId"], "order-5001", "{input}");
    assert_eq!(input["incident"]["title"], title, "its incident: {input}");
    assert_eq!(input["incident"]["opened"], true, "{input}");
    // The admin detail never reaches a tenant's automation: not the full message (which
    // names the status sent), the input, the counters or the incident's detail.
    let text = input.to_string();
    for admin in [
        "vanished",
        "detail",
        "attempts",
        "maxRetries",
        "_body",
        "cause",
    ] {
        assert!(!text.contains(admin), "no {admin:?} in the context: {text}");
    }
    assert_eq!(
        run["steps"][0]["message"],
        format!("Orders v1 failed at status (ticket/set-status) on TK-1: {title}"),
        "templates read the context"
    );

    assert!(
        runs_of(&harness, &other_token, &other_tell)
            .await
            .is_empty()
            && runs_of(&harness, &other_token, &other_watch)
                .await
                .is_empty(),
        "another tenant's error workflows never hear of it"
    );
}

#[tokio::test]
async fn an_incident_opened_automation_runs_once_per_incident() {
    let harness = Harness::new();
    let (token, orders_automation) = shop(&harness, "Acme").await;
    let watch = harness
        .automation(
            &token,
            listener(
                "Watch",
                "incident.opened",
                "{{incident.title}} by {{automation.name}} ({{incident.status}}, seen {{incident.count}})",
            ),
        )
        .await;

    order(&harness, &orders_automation, "5001", "vanished").await;
    harness.drain().await;
    order(&harness, &orders_automation, "5002", "vanished").await;
    harness.drain().await;

    let incidents = harness.get("/api/incidents", &token).await.json;
    let incidents = incidents["items"]
        .as_array()
        .or_else(|| incidents.as_array())
        .cloned()
        .expect("a list");
    assert_eq!(
        incidents.len(),
        1,
        "one cause, one incident: {incidents:#?}"
    );
    assert_eq!(incidents[0]["count"], 2, "seen twice");
    let run = only_run(&harness, &token, &watch).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["input"]["incident"]["id"], incidents[0]["id"]);
    assert_eq!(run["input"]["incident"]["status"], "open");
    assert_eq!(run["input"]["automation"]["name"], "Orders");
    assert_eq!(
        run["input"]["ticket"]["number"], "TK-1",
        "the incident's ticket"
    );
    assert!(
        run["input"]["incident"].get("detail").is_none(),
        "no admin detail: {}",
        run["input"]
    );
    assert_eq!(
        run["steps"][0]["message"],
        "The automation for ticket TK-1 did not finish; we lost no data. by Orders (open, seen 1)"
    );

    // Resolved, the same failure opens a new incident: the automation runs again.
    let id = incidents[0]["id"].as_str().expect("an incident id");
    let resolved = harness
        .post(&format!("/api/incidents/{id}/resolve"), &token, json!({}))
        .await;
    assert_eq!(
        resolved.status,
        StatusCode::OK,
        "resolved: {}",
        resolved.json
    );
    order(&harness, &orders_automation, "5003", "vanished").await;
    harness.drain().await;
    let runs = runs_of(&harness, &token, &watch).await;
    assert_eq!(runs.len(), 2, "a new incident, a new run: {runs:#?}");
    assert_ne!(
        runs[0]["input"]["incident"]["id"], runs[1]["input"]["incident"]["id"],
        "one run per incident"
    );
}

#[tokio::test]
async fn an_error_workflow_that_fails_starts_neither_itself_nor_another() {
    let harness = Harness::new();
    let (token, orders_automation) = shop(&harness, "Acme").await;
    let first = harness.automation(&token, failing_listener("First")).await;
    let second = harness.automation(&token, failing_listener("Second")).await;

    order(&harness, &orders_automation, "5001", "vanished").await;
    harness.drain().await;

    for automation in [&first, &second] {
        let run = only_run(&harness, &token, automation).await;
        assert_eq!(run["status"], "failed", "it failed too: {run}");
        let lines = run["steps"].as_array().expect("a step log");
        let told = lines
            .iter()
            .find(|line| line["op"] == "run/error-workflows")
            .unwrap_or_else(|| panic!("its failure says why it started nobody: {lines:#?}"));
        let message = told["message"].as_str().expect("a message");
        assert!(
            message.contains("not \"First\": the failed run was itself started by run.failed")
                && message
                    .contains("not \"Second\": the failed run was itself started by run.failed"),
            "{message}"
        );
        assert!(!message.contains("started \""), "nobody started: {message}");
    }
    // Their own failures are still visible: each opened its incident.
    let incidents = harness.get("/api/incidents", &token).await.json;
    let incidents = incidents["items"]
        .as_array()
        .or_else(|| incidents.as_array())
        .cloned()
        .expect("a list");
    assert_eq!(
        incidents.len(),
        3,
        "Orders, First and Second: {incidents:#?}"
    );
}

#[tokio::test]
async fn saving_checks_the_events_context_and_a_dry_run_starts_from_a_sample() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let unknown = harness
        .post(
            "/api/automations",
            &token,
            listener("Crash", "run.crashed", "x"),
        )
        .await;
    assert_eq!(
        unknown.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        unknown.json
    );
    assert!(
        unknown.json.to_string().contains(
            "unknown event \\\"run.crashed\\\" (events: ticket.created, ticket.changed, run.failed, incident.opened)"
        ),
        "names the events: {}",
        unknown.json
    );
    let change = harness
        .post(
            "/api/automations",
            &token,
            listener("Changed", "run.failed", "{{change.status}}"),
        )
        .await;
    assert_eq!(
        change.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        change.json
    );
    assert!(
        change
            .json
            .to_string()
            .contains("the event gives automation, run, step, message"),
        "says what run.failed gives: {}",
        change.json
    );
    let step_in_ticket_event = harness
        .post(
            "/api/automations",
            &token,
            listener("Ticket", "ticket.created", "{{step.key}}"),
        )
        .await;
    assert_eq!(
        step_in_ticket_event.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "a ticket event has no step: {}",
        step_in_ticket_event.json
    );

    let definition = listener(
        "Tell us",
        "run.failed",
        "{{automation.name}} failed at {{step.key}}: {{message}}",
    );
    let example = harness
        .post(
            "/api/automations/test",
            &token,
            json!({"automation": definition}),
        )
        .await;
    assert_eq!(example.status, StatusCode::OK, "{}", example.json);
    assert_eq!(example.json["status"], "completed", "{}", example.json);
    assert_eq!(
        example.json["steps"][0]["message"],
        "Example automation failed at notify: The automation \"Example automation\" did not finish; we lost no data.",
        "an example context: {}",
        example.json
    );
    let sample = harness
        .post(
            "/api/automations/test",
            &token,
            json!({"automation": definition, "body": {
                "automation": {"name": "Orders", "version": 2},
                "step": {"key": "status", "op": "ticket/set-status"},
                "message": "It broke."}}),
        )
        .await;
    assert_eq!(sample.status, StatusCode::OK, "{}", sample.json);
    assert_eq!(
        sample.json["steps"][0]["message"], "Orders failed at status: It broke.",
        "the sample given: {}",
        sample.json
    );
    let ticket = harness
        .post(
            "/api/automations/test",
            &token,
            json!({"automation": definition, "ticket": "TK-1"}),
        )
        .await;
    assert_eq!(
        ticket.status,
        StatusCode::BAD_REQUEST,
        "a run.failed test takes no ticket: {}",
        ticket.json
    );
}
