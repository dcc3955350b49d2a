//! Per-tenant secrets over the API and through a run: `PUT/GET/DELETE /api/secrets`
//! never answer a value; an automation whose `http/request` step sends
//! `{{secrets.token}}` to a real local server (wiremock) publishes the answer, and the
//! value appears nowhere afterwards — not in the run JSON, its step log, the ticket,
//! the incident (tenant or admin view) or the secrets list — also when the other side
//! echoes it back.

mod support;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{ADMIN, Harness, webhook_path};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const SECRET: &str = "tok-9f8e7d6c5b4a";

fn items(reply: &support::Reply) -> Vec<Value> {
    reply.json["items"].as_array().cloned().unwrap_or_default()
}

async fn put_secret(harness: &Harness, token: &str, name: &str, value: &str) -> support::Reply {
    harness
        .call(
            Method::PUT,
            &format!("/api/secrets/{name}"),
            Some(token),
            Some(json!({"value": value})),
        )
        .await
}

#[tokio::test]
async fn secrets_are_stored_listed_without_values_and_deleted() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let put = put_secret(&harness, &token, "shop", SECRET).await;
    assert_eq!(put.status, StatusCode::NO_CONTENT, "stored: {}", put.json);
    assert!(put.bytes.is_empty(), "a 204 answers nothing");
    let list = harness.get("/api/secrets", &token).await;
    assert_eq!(list.status, StatusCode::OK, "listed");
    let listed = items(&list);
    assert_eq!(listed.len(), 1, "one secret");
    assert_eq!(listed[0]["name"], "shop", "by name");
    assert_eq!(listed[0]["keyVersion"], 1, "sealed with key version 1");
    assert!(listed[0]["updatedAt"].is_string(), "with its time");
    assert!(
        !String::from_utf8_lossy(&list.bytes).contains(SECRET),
        "the value is never answered"
    );
    let bad_name = put_secret(&harness, &token, "a.b", "x").await;
    assert_eq!(bad_name.status, StatusCode::BAD_REQUEST, "a dotted name");
    assert_eq!(bad_name.code(), "invalid_secret_name", "named as such");
    let empty = put_secret(&harness, &token, "shop", "").await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST, "an empty value");
    let deleted = harness
        .call(Method::DELETE, "/api/secrets/shop", Some(&token), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "deleted");
    let again = harness
        .call(Method::DELETE, "/api/secrets/shop", Some(&token), None)
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND, "gone");
    assert!(
        items(&harness.get("/api/secrets", &token).await).is_empty(),
        "none left"
    );
}

fn calling_automation(url: &str) -> Value {
    json!({
        "name": "Orders to the shop",
        "trigger": {"type": "webhook", "params": [
            {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
        "steps": [
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}"}},
            {"name": "call", "op": "http/request", "service": "shop",
             "input": {"method": "POST", "url": url,
                       "headers": {"Authorization": "Bearer {{secrets.token}}"},
                       "query": {"key": "{{secrets.token}}"},
                       "body": {"order": "{{orderId}}"}}},
            {"name": "note", "op": "flow/log", "input": {"message": "shop said {{call.body.state}}"}}
        ]
    })
}

/// Everything a tenant or an admin can read about the run, as one text.
async fn everything_visible(harness: &Harness, token: &str, run: &str) -> String {
    let mut seen = String::new();
    for (path, who) in [
        (format!("/api/runs/{run}"), token),
        ("/api/runs".to_owned(), token),
        ("/api/tickets".to_owned(), token),
        ("/api/incidents".to_owned(), token),
        ("/api/secrets".to_owned(), token),
        ("/api/admin/incidents".to_owned(), ADMIN),
    ] {
        let reply = harness.get(&path, who).await;
        seen.push_str(&String::from_utf8_lossy(&reply.bytes));
        if path == "/api/tickets" {
            for ticket in items(&reply) {
                let id = ticket["id"].as_str().unwrap_or_default();
                let full = harness.get(&format!("/api/tickets/{id}"), token).await;
                seen.push_str(&String::from_utf8_lossy(&full.bytes));
            }
        }
    }
    let stored = harness.runs_raw().await;
    seen.push_str(&stored);
    seen
}

#[tokio::test]
async fn a_secret_reaches_the_other_service_and_nothing_else() {
    let shop = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/orders"))
        .and(header("authorization", format!("Bearer {SECRET}").as_str()))
        .respond_with(
            ResponseTemplate::new(201)
                .set_body_json(json!({"state": "accepted", "echo": format!("Bearer {SECRET}")})),
        )
        .expect(1)
        .mount(&shop)
        .await;
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    put_secret(&harness, &token, "token", SECRET).await;
    let automation = harness
        .automation(
            &token,
            calling_automation(&format!("{}/orders", shop.uri())),
        )
        .await;
    let accepted = harness
        .webhook(
            &webhook_path(&automation),
            r#"{"data": {"order": {"id": "7"}}}"#,
            &[],
        )
        .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.json);
    let run = accepted.text("runId");
    harness.drain().await;

    let shown = harness.get(&format!("/api/runs/{run}"), &token).await;
    assert_eq!(
        shown.json["status"], "completed",
        "the run finished: {}",
        shown.json
    );
    let steps = shown.json["steps"].as_array().cloned().unwrap_or_default();
    let call = steps
        .iter()
        .find(|step| step["name"] == "call")
        .expect("the call's log line");
    assert_eq!(call["outputs"]["status"], 201, "the status is published");
    assert_eq!(
        call["outputs"]["body"]["state"], "accepted",
        "the parsed body is published"
    );
    assert_eq!(
        call["outputs"]["body"]["echo"], "Bearer [secret token]",
        "an echoed secret is scrubbed before it is kept"
    );
    let note = steps
        .iter()
        .find(|step| step["name"] == "note")
        .expect("the note");
    assert_eq!(
        note["message"], "shop said accepted",
        "a later step reads the output"
    );
    let seen = everything_visible(&harness, &token, &run).await;
    assert!(!seen.contains(SECRET), "the secret appears nowhere: {seen}");
}

#[tokio::test]
async fn a_failing_call_opens_an_incident_without_the_secret() {
    let shop = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(403).set_body_string(format!("token {SECRET} is not allowed")),
        )
        .mount(&shop)
        .await;
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    put_secret(&harness, &token, "token", SECRET).await;
    let automation = harness
        .automation(
            &token,
            calling_automation(&format!("{}/orders", shop.uri())),
        )
        .await;
    let run = harness
        .webhook(
            &webhook_path(&automation),
            r#"{"data": {"order": {"id": "8"}}}"#,
            &[],
        )
        .await
        .text("runId");
    harness.drain().await;
    let shown = harness.get(&format!("/api/runs/{run}"), &token).await;
    assert_eq!(
        shown.json["status"], "failed",
        "a 403 ends the run: {}",
        shown.json
    );
    let incidents = items(&harness.get("/api/admin/incidents", ADMIN).await);
    assert_eq!(incidents.len(), 1, "one incident");
    let detail = incidents[0]["detail"].to_string();
    assert!(
        detail.contains("403"),
        "the detail tells what happened: {detail}"
    );
    assert!(
        detail.contains("[secret token]"),
        "with the secret's name in its place: {detail}"
    );
    let seen = everything_visible(&harness, &token, &run).await;
    assert!(!seen.contains(SECRET), "the secret appears nowhere: {seen}");
}

#[tokio::test]
async fn a_missing_secret_ends_the_run_with_a_clear_message() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let automation = harness
        .automation(&token, calling_automation("http://127.0.0.1:9/orders"))
        .await;
    let run = harness
        .webhook(
            &webhook_path(&automation),
            r#"{"data": {"order": {"id": "9"}}}"#,
            &[],
        )
        .await
        .text("runId");
    harness.drain().await;
    let shown = harness.get(&format!("/api/runs/{run}"), &token).await;
    assert_eq!(shown.json["status"], "failed", "{}", shown.json);
    assert!(
        shown.json["lastError"]
            .as_str()
            .unwrap_or_default()
            .contains("secret \"token\" is not set"),
        "the message names the secret: {}",
        shown.json
    );
}
