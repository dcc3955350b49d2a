//! Capacity as a cap, end to end through the API and a real worker: a run that finds
//! every member full waits at its step (no attempt spent, "waiting for room" on the run
//! and the ticket) and is woken by the close of a ticket of the group; `whenFull: fail`
//! fails naming the group; `assignAnyway` assigns past capacity and says so; a member
//! marked away by `PATCH` gets no new work; `ticket/assign` assigns by name, and names
//! outside the group or unknown `whenFull` values are refused on save.

mod support;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{Harness, webhook_path};

/// A tenant with the group `warehouse` and its members (name, capacity); the token
/// and the group's id.
async fn desk(harness: &Harness, members: &[(&str, u32)]) -> (String, String) {
    let (_, token) = harness.tenant("Acme").await;
    let group = harness
        .post("/api/groups", &token, json!({"name": "warehouse"}))
        .await;
    assert_eq!(group.status, StatusCode::CREATED, "{}", group.json);
    let group = group.text("id");
    for (name, capacity) in members {
        let added = harness
            .post(
                &format!("/api/groups/{group}/members"),
                &token,
                json!({"name": name, "capacity": capacity}),
            )
            .await;
        assert_eq!(added.status, StatusCode::CREATED, "{}", added.json);
        assert_eq!(added.json["available"], true, "available by default");
    }
    (token, group)
}

/// A webhook automation that makes a ticket per order and assigns it with `assign`.
async fn orders(harness: &Harness, token: &str, assign: Value) -> Value {
    harness
        .automation(
            token,
            json!({
                "name": "Orders",
                "trigger": {"type": "webhook", "params": [
                    {"name": "orderId", "path": "order", "type": "string", "required": true}]},
                "steps": [
                    {"name": "ticket", "op": "ticket/upsert",
                     "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}"}},
                    assign
                ]
            }),
        )
        .await
}

async fn order(harness: &Harness, automation: &Value, id: &str) -> String {
    let accepted = harness
        .webhook(
            &webhook_path(automation),
            &json!({"order": id}).to_string(),
            &[],
        )
        .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.json);
    accepted.text("runId")
}

async fn run(harness: &Harness, token: &str, id: &str) -> Value {
    let reply = harness.get(&format!("/api/runs/{id}"), token).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    reply.json
}

fn last_step(run: &Value) -> Value {
    run["steps"]
        .as_array()
        .and_then(|steps| steps.last())
        .cloned()
        .unwrap_or_else(|| panic!("no step in {run}"))
}

/// The ticket of an order, with its log.
async fn ticket(harness: &Harness, token: &str, order: &str) -> Value {
    let list = harness.get("/api/tickets", token).await;
    let id = list.json["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|ticket| ticket["externalId"] == format!("order-{order}"))
        })
        .and_then(|ticket| ticket["id"].as_str())
        .unwrap_or_else(|| panic!("no ticket of order {order}: {}", list.json))
        .to_owned();
    harness.get(&format!("/api/tickets/{id}"), token).await.json
}

fn logged(ticket: &Value, text: &str) -> usize {
    ticket["log"].as_array().map_or(0, |log| {
        log.iter()
            .filter(|line| line["message"].as_str().is_some_and(|m| m.contains(text)))
            .count()
    })
}

#[tokio::test]
async fn a_run_waits_for_room_and_the_close_of_a_ticket_in_the_group_wakes_it() {
    let harness = Harness::new();
    let (token, _) = desk(&harness, &[("Eva", 1)]).await;
    let automation = orders(
        &harness,
        &token,
        json!({"name": "assign", "op": "ticket/assign-least-busy",
               "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}),
    )
    .await;
    let first = order(&harness, &automation, "1").await;
    harness.drain().await;
    assert_eq!(run(&harness, &token, &first).await["status"], "completed");

    let second = order(&harness, &automation, "2").await;
    harness.drain().await;
    let shown = run(&harness, &token, &second).await;
    assert_eq!(shown["status"], "scheduled", "waiting, not failed: {shown}");
    assert_eq!(shown["attempts"], 0, "no attempt spent: {shown}");
    let step = last_step(&shown);
    assert_eq!(step["name"], "assign", "{shown}");
    assert_eq!(step["status"], "waiting", "{shown}");
    assert!(
        step["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("waiting for room in warehouse: 1 of 1 members full")),
        "the run says why: {shown}"
    );
    let waiting = ticket(&harness, &token, "2").await;
    assert_eq!(
        logged(
            &waiting,
            "waiting for room in warehouse: 1 of 1 members full"
        ),
        1,
        "the ticket says it too: {waiting}"
    );
    assert!(waiting["assignee"].is_null(), "nobody yet: {waiting}");

    // Eva closes her ticket: room, and the waiting run is due at once (its own
    // recheck is a minute away, so only the wake-up can make this drain run it).
    let held = ticket(&harness, &token, "1").await;
    let closed = harness
        .call(
            Method::PATCH,
            &format!("/api/tickets/{}", held["id"].as_str().expect("an id")),
            Some(&token),
            Some(json!({"closed": true})),
        )
        .await;
    assert_eq!(closed.status, StatusCode::OK, "{}", closed.json);
    harness.drain().await;
    let shown = run(&harness, &token, &second).await;
    assert_eq!(shown["status"], "completed", "woken and done: {shown}");
    assert_eq!(shown["attempts"], 0, "still no attempt spent: {shown}");
    let assigned = ticket(&harness, &token, "2").await;
    assert_eq!(assigned["assignee"]["name"], "Eva", "{assigned}");
}

#[tokio::test]
async fn when_full_fail_ends_the_run_naming_the_group_and_assign_anyway_says_so() {
    let harness = Harness::new();
    let (token, _) = desk(&harness, &[("Eva", 1)]).await;
    let failing = orders(
        &harness,
        &token,
        json!({"name": "assign", "op": "ticket/assign-least-busy",
               "input": {"ticket": "{{ticket.id}}", "group": "warehouse", "whenFull": "fail"}}),
    )
    .await;
    order(&harness, &failing, "1").await;
    harness.drain().await;
    let refused = order(&harness, &failing, "2").await;
    harness.drain().await;
    let shown = run(&harness, &token, &refused).await;
    assert_eq!(shown["status"], "failed", "a final error: {shown}");
    let step = last_step(&shown);
    assert!(
        step["message"].as_str().is_some_and(
            |m| m.contains("every member of group \"warehouse\" is full: 1 of 1 members full")
        ),
        "names the group and that every member is full: {shown}"
    );

    let anyway = harness
        .automation(
            &token,
            json!({
                "name": "Orders anyway",
                "trigger": {"type": "webhook", "params": [
                    {"name": "orderId", "path": "order", "type": "string", "required": true}]},
                "steps": [
                    {"name": "ticket", "op": "ticket/upsert",
                     "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}"}},
                    {"name": "assign", "op": "ticket/assign-least-busy",
                     "input": {"ticket": "{{ticket.id}}", "group": "warehouse",
                               "whenFull": "assignAnyway"}}
                ]
            }),
        )
        .await;
    let past = order(&harness, &anyway, "3").await;
    harness.drain().await;
    let shown = run(&harness, &token, &past).await;
    assert_eq!(shown["status"], "completed", "{shown}");
    let assigned = ticket(&harness, &token, "3").await;
    assert_eq!(assigned["assignee"]["name"], "Eva", "{assigned}");
    assert_eq!(
        logged(
            &assigned,
            "assigned anyway although every available member is full"
        ),
        1,
        "the ticket's log says it went past capacity: {assigned}"
    );
}

#[tokio::test]
async fn a_member_marked_away_gets_no_new_work_and_keeps_their_tickets() {
    let harness = Harness::new();
    let (token, group) = desk(&harness, &[("Eva", 5), ("Jan", 5)]).await;
    let automation = orders(
        &harness,
        &token,
        json!({"name": "assign", "op": "ticket/assign", "input":
               {"ticket": "{{ticket.id}}", "group": "warehouse", "member": "{{_body.to}}"}}),
    )
    .await;
    // By name: Eva takes order 1, Jan orders 5 and 6; then Eva goes away.
    for (id, to) in [("1", "Eva"), ("5", "Jan"), ("6", "Jan")] {
        let accepted = harness
            .webhook(
                &webhook_path(&automation),
                &json!({"order": id, "to": to}).to_string(),
                &[],
            )
            .await;
        assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.json);
    }
    harness.drain().await;
    let members = harness
        .get(&format!("/api/groups/{group}/members"), &token)
        .await;
    let eva = members.json["items"]
        .as_array()
        .and_then(|items| items.iter().find(|m| m["name"] == "Eva"))
        .and_then(|m| m["id"].as_str())
        .expect("Eva")
        .to_owned();
    let away = harness
        .call(
            Method::PATCH,
            &format!("/api/groups/{group}/members/{eva}"),
            Some(&token),
            Some(json!({"available": false})),
        )
        .await;
    assert_eq!(away.status, StatusCode::OK, "{}", away.json);
    assert_eq!(away.json["available"], false, "{}", away.json);
    assert_eq!(
        away.json["capacity"], 5,
        "nothing else changed: {}",
        away.json
    );

    let routed = harness
        .automation(
            &token,
            json!({
                "name": "Routed",
                "trigger": {"type": "webhook", "params": [
                    {"name": "orderId", "path": "order", "type": "string", "required": true}]},
                "steps": [
                    {"name": "ticket", "op": "ticket/upsert",
                     "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}"}},
                    {"name": "assign", "op": "ticket/assign-least-busy",
                     "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}
                ]
            }),
        )
        .await;
    order(&harness, &routed, "2").await;
    harness.drain().await;
    let second = ticket(&harness, &token, "2").await;
    assert_eq!(
        second["assignee"]["name"], "Jan",
        "Eva (1 open) is less busy than Jan (2 open), but away: {second}"
    );
    let first = ticket(&harness, &token, "1").await;
    assert_eq!(first["assignee"]["name"], "Eva", "she keeps hers: {first}");

    // By name, a person's decision, she may still get one; the log says she is away.
    let accepted = harness
        .webhook(
            &webhook_path(&automation),
            &json!({"order": "3", "to": "Eva"}).to_string(),
            &[],
        )
        .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.json);
    harness.drain().await;
    let third = ticket(&harness, &token, "3").await;
    assert_eq!(third["assignee"]["name"], "Eva", "{third}");
    assert_eq!(logged(&third, "although Eva is away"), 1, "{third}");

    // A templated name outside the group fails the run, naming it.
    let stranger = harness
        .webhook(
            &webhook_path(&automation),
            &json!({"order": "4", "to": "Petr"}).to_string(),
            &[],
        )
        .await;
    harness.drain().await;
    let shown = run(&harness, &token, &stranger.text("runId")).await;
    assert_eq!(shown["status"], "failed", "{shown}");
    assert!(
        last_step(&shown)["message"].as_str().is_some_and(|m| m
            .contains("\"Petr\" is not a member of group \"warehouse\" (its members: Eva, Jan)")),
        "{shown}"
    );
}

#[tokio::test]
async fn unknown_when_full_and_a_literal_stranger_are_refused_on_save() {
    let harness = Harness::new();
    let (token, _) = desk(&harness, &[("Eva", 5)]).await;
    let refused = harness
        .post(
            "/api/automations",
            &token,
            json!({
                "name": "Bad",
                "trigger": {"type": "event", "event": "ticket.created"},
                "steps": [
                    {"name": "assign", "op": "ticket/assign-least-busy",
                     "input": {"ticket": "{{ticket.id}}", "group": "warehouse", "whenFull": "queue"}},
                    {"name": "named", "op": "ticket/assign",
                     "input": {"ticket": "{{ticket.id}}", "group": "warehouse", "member": "Petr"}}
                ]
            }),
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.json
    );
    let problems: Vec<(String, String)> = refused.json["error"]["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|p| {
            (
                p["path"].as_str().unwrap_or_default().to_owned(),
                p["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        problems
            .iter()
            .any(|(path, message)| path == "steps[0].input.whenFull"
                && message.contains("\"wait\", \"fail\", \"assignAnyway\"")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|(path, message)| path == "steps[1].input.member"
                && message == "\"Petr\" is not a member of group \"warehouse\" (its members: Eva)"),
        "{problems:?}"
    );
}
