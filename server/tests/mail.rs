//! Mail servers over the API (`/api/mail-servers`) and `mail/send` through a real run: the
//! router, the SQLite store, the worker and the executor, sending to a real SMTP server
//! (aiosmtpd, `connectors/tests/smtp_server/`) on 127.0.0.1, which the harness's
//! allow-list lets through. A saved server with a private host the allow-list does not
//! name, or a literal password, is refused on save; a literal `to` that is not an address
//! is refused with the automation, and a widget cannot be a `mail/send`. A run's message
//! arrives with the rendered subject and body and its step log says what went to whom; a
//! refused recipient (5xx) fails the run at once; a temporary refusal (4xx) is counted by
//! the service's breaker, retried with the ladder and goes through; a templated `to` that
//! renders to no address fails the run, naming it.

#[path = "../../connectors/tests/smtp_server/mod.rs"]
mod smtp_server;
mod support;

use std::time::Duration;

use axum::http::{Method, StatusCode};
use fronta_automation::service_limits::LimitsConfig;
use fronta_engine::ManualClock;
use serde_json::{Value, json};
use smtp_server::{Options, SmtpServer, header};
use support::{Harness, webhook_path};

/// A mail server on the test SMTP server: plain text, no login.
fn relay(port: u16) -> Value {
    json!({"name": "desk", "host": "127.0.0.1", "port": port, "security": "none",
           "from": "Service desk <desk@firm.example>"})
}

/// An automation that mails the customer of an order: `to` and the texts are templates.
fn mailing() -> Value {
    json!({
        "name": "Tell the customer",
        "trigger": {"type": "webhook", "params": [
            {"name": "orderId", "path": "order.id", "type": "string", "required": true},
            {"name": "email", "path": "order.email", "type": "string", "required": true}]},
        "steps": [
            {"name": "tell", "op": "mail/send", "service": "mail",
             "input": {"server": "desk", "to": "{{email}}", "cc": "orders@firm.example",
                       "subject": "Order {{orderId}} shipped",
                       "text": "Hello,\nyour order {{orderId}} is on its way.",
                       "html": "<p>Your order <b>{{orderId}}</b> is on its way.</p>"}},
            {"name": "note", "op": "flow/log", "input": {"message": "mailed {{tell.messageId}}"}}
        ]
    })
}

async fn order(harness: &Harness, automation: &Value, id: &str, email: &str) -> String {
    let accepted = harness
        .webhook(
            &webhook_path(automation),
            &json!({"order": {"id": id, "email": email}}).to_string(),
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

fn step(run: &Value, name: &str) -> Value {
    run["steps"]
        .as_array()
        .and_then(|steps| steps.iter().rev().find(|step| step["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no step {name} in {run}"))
}

#[tokio::test]
async fn mail_servers_are_created_read_replaced_and_deleted_and_bad_ones_refused() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let server = json!({"name": "desk", "host": "smtp.firm.example", "security": "starttls",
        "user": "desk@firm.example", "password": "{{secrets.smtp_password}}",
        "from": "Service desk <desk@firm.example>"});
    let created = harness
        .post("/api/mail-servers", &token, server.clone())
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json);
    assert_eq!(created.json["port"], 587, "the STARTTLS port by default");
    assert_eq!(
        created.json["password"], "{{secrets.smtp_password}}",
        "the reference is kept, never a value"
    );
    let again = harness.post("/api/mail-servers", &token, server).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "the name is taken");
    assert_eq!(again.code(), "mail_server_exists");

    let private = harness
        .post(
            "/api/mail-servers",
            &token,
            json!({"name": "inside", "host": "10.0.0.5", "from": "desk@firm.example"}),
        )
        .await;
    assert_eq!(private.status, StatusCode::BAD_REQUEST, "{}", private.json);
    assert_eq!(private.code(), "invalid_mail_server");
    let message = private.json["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("host: the address 10.0.0.5 is a private address")
            && message.contains("FRONTA_HTTP_ALLOW"),
        "a private host without the allow-list is refused on save: {message}"
    );
    let named = harness
        .post(
            "/api/mail-servers",
            &token,
            json!({"name": "inside", "host": "localhost", "from": "desk@firm.example"}),
        )
        .await;
    assert_eq!(named.status, StatusCode::BAD_REQUEST, "{}", named.json);
    let literal = harness
        .post(
            "/api/mail-servers",
            &token,
            json!({"name": "leaky", "host": "smtp.firm.example", "user": "desk",
                   "password": "hunter2", "from": "not an address"}),
        )
        .await;
    assert_eq!(literal.status, StatusCode::BAD_REQUEST, "{}", literal.json);
    let message = literal.json["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("password must be a secret reference")
            && message.contains("from: \"not an address\" is not an e-mail address")
            && !message.contains("hunter2"),
        "every problem named, the password never echoed: {message}"
    );
    // 127.0.0.1 is on the harness's allow-list: a relay there may be saved.
    let allowed = harness
        .post(
            "/api/mail-servers",
            &token,
            json!({"name": "relay", "host": "127.0.0.1", "port": 2525, "security": "none",
                   "from": "desk@firm.example"}),
        )
        .await;
    assert_eq!(allowed.status, StatusCode::CREATED, "{}", allowed.json);

    let replaced = harness
        .call(
            Method::PUT,
            "/api/mail-servers/desk",
            Some(&token),
            Some(
                json!({"host": "smtp2.firm.example", "user": "desk@firm.example",
                        "password": "{{secrets.smtp_password}}", "from": "desk@firm.example"}),
            ),
        )
        .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.json);
    let read = harness.get("/api/mail-servers/desk", &token).await;
    assert_eq!(read.json["host"], "smtp2.firm.example", "replaced whole");
    assert_eq!(read.json["security"], "tls", "TLS by default");
    assert_eq!(read.json["port"], 465, "and its port");
    let list = harness.get("/api/mail-servers", &token).await;
    let names: Vec<&str> = list.json["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, ["desk", "relay"], "by name: {}", list.json);
    let deleted = harness
        .call(Method::DELETE, "/api/mail-servers/desk", Some(&token), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = harness.get("/api/mail-servers/desk", &token).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);

    let widget = harness
        .post(
            "/api/widgets",
            &token,
            json!({"name": "Mail", "op": "mail/send",
                   "input": {"server": "relay", "to": "a@b.example", "subject": "s", "text": "t"},
                   "ttlSec": 60}),
        )
        .await;
    assert_eq!(widget.status, StatusCode::BAD_REQUEST, "{}", widget.json);
    assert_eq!(widget.code(), "invalid_widget");
    assert!(
        widget.json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("would send a message at every refresh")),
        "a widget never sends mail: {}",
        widget.json
    );
}

#[tokio::test]
async fn a_literal_to_that_is_not_an_address_is_refused_with_the_automation() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let mut automation = mailing();
    automation["steps"][0]["input"]["to"] = json!("eva at shop.example");
    let refused = harness.post("/api/automations", &token, automation).await;
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
    assert!(
        problems
            .iter()
            .any(|problem| problem["path"] == "steps[0].input.to"
                && problem["message"].as_str().is_some_and(
                    |m| m.contains("\"eva at shop.example\" is not an e-mail address")
                )),
        "{}",
        refused.json
    );
}

#[tokio::test]
async fn a_run_sends_the_rendered_message_and_its_log_says_to_whom() {
    let Some(smtp) = SmtpServer::start(Options::default()) else {
        return;
    };
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let server = harness
        .post("/api/mail-servers", &token, relay(smtp.port))
        .await;
    assert_eq!(server.status, StatusCode::CREATED, "{}", server.json);
    let automation = harness.automation(&token, mailing()).await;
    let id = order(
        &harness,
        &automation,
        "5001",
        "Eva Novak <eva@shop.example>",
    )
    .await;
    harness.drain().await;

    let shown = run(&harness, &token, &id).await;
    assert_eq!(shown["status"], "completed", "{shown}");
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1, "one message arrived: {messages:?}");
    let message = &messages[0];
    assert_eq!(
        message["rcptTos"],
        json!(["eva@shop.example", "orders@firm.example"])
    );
    assert_eq!(
        header(message, "Subject").as_deref(),
        Some("Order 5001 shipped"),
        "the subject rendered"
    );
    let data = message["data"].as_str().unwrap_or("");
    assert!(
        data.contains("Hello,\r\nyour order 5001 is on its way.")
            && data.contains("<p>Your order <b>5001</b> is on its way.</p>"),
        "both bodies rendered: {data}"
    );
    let tell = step(&shown, "tell");
    assert_eq!(tell["status"], "ok", "{tell}");
    assert_eq!(tell["op"], "mail/send");
    assert_eq!(
        tell["message"],
        format!(
            "sent \"Order 5001 shipped\" from desk@firm.example to eva@shop.example (cc \
             orders@firm.example) through mail server \"desk\" (127.0.0.1:{}): 250 2.0.0 Ok: \
             queued as 1",
            smtp.port
        ),
        "{tell}"
    );
    let message_id = tell["outputs"]["messageId"].as_str().expect("messageId");
    assert_eq!(
        header(message, "Message-ID"),
        Some(format!("<{message_id}>")),
        "the id published is the one sent"
    );
    assert!(
        message_id.starts_with(&id),
        "the id names the run: {message_id}"
    );
    assert_eq!(tell["outputs"]["reply"], "250 2.0.0 Ok: queued as 1");
    assert_eq!(tell["outputs"]["to"], json!(["eva@shop.example"]));
    assert_eq!(
        step(&shown, "note")["message"],
        format!("mailed {message_id}"),
        "a later step reads the outputs"
    );
}

#[tokio::test]
async fn a_refused_recipient_fails_the_run_at_once() {
    let Some(smtp) = SmtpServer::start(Options {
        rules: json!({"gone@shop.example": {"reply": "550 5.1.1 <gone@shop.example>: no such user"}}),
        ..Options::default()
    }) else {
        return;
    };
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    harness
        .post("/api/mail-servers", &token, relay(smtp.port))
        .await;
    let automation = harness.automation(&token, mailing()).await;
    let id = order(&harness, &automation, "5002", "gone@shop.example").await;
    harness.drain().await;
    let shown = run(&harness, &token, &id).await;
    assert_eq!(shown["status"], "failed", "a 5xx is final: {shown}");
    assert_eq!(shown["attempts"], 0, "not retried: {shown}");
    let error = shown["lastError"].as_str().unwrap_or("");
    assert!(
        error.contains("RCPT TO <gone@shop.example>: 550 5.1.1")
            && error.contains("permanent refusal"),
        "{error}"
    );
    assert!(smtp.messages().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_temporary_refusal_is_retried_with_the_ladder_and_goes_through() {
    let Some(smtp) = SmtpServer::start(Options {
        rules: json!({"busy@shop.example": {"reply": "451 4.3.0 mailbox busy", "times": 1}}),
        ..Options::default()
    }) else {
        return;
    };
    let clock = ManualClock::new(chrono::Utc::now());
    let harness = Harness::with_limits(LimitsConfig::default(), clock.clone());
    let (_, token) = harness.tenant("Acme").await;
    harness
        .post("/api/mail-servers", &token, relay(smtp.port))
        .await;
    let automation = harness.automation(&token, mailing()).await;
    let id = order(&harness, &automation, "5003", "busy@shop.example").await;
    harness.drain().await;
    let shown = run(&harness, &token, &id).await;
    assert_eq!(
        shown["status"], "scheduled",
        "a 4xx is retried later: {shown}"
    );
    assert_eq!(shown["attempts"], 1, "one attempt spent: {shown}");
    assert!(
        shown["lastError"]
            .as_str()
            .is_some_and(|error| error.contains("451 4.3.0 mailbox busy")),
        "{shown}"
    );
    assert!(smtp.messages().is_empty(), "nothing was taken yet");
    // The call went through the per-(tenant, service) cap and breaker: a retryable
    // failure is counted against the step's service.
    let services = harness.get("/api/services", &token).await;
    let mail = services.json["items"]
        .as_array()
        .and_then(|items| items.iter().find(|item| item["service"] == "mail"))
        .cloned()
        .unwrap_or_else(|| panic!("the mail service is limited: {}", services.json));
    assert_eq!(mail["failures"], 1, "{mail}");
    assert_eq!(
        mail["breaker"], "closed",
        "one failure does not open it: {mail}"
    );

    // The ladder's second rung is 30 s away.
    clock.advance(Duration::from_secs(31));
    harness.drain().await;
    let shown = run(&harness, &token, &id).await;
    assert_eq!(
        shown["status"], "completed",
        "the retry went through: {shown}"
    );
    assert_eq!(smtp.messages().len(), 1, "exactly one message arrived");
    let services = harness.get("/api/services", &token).await;
    assert_eq!(
        services.json["items"][0]["failures"], 0,
        "a success resets the run of failures: {}",
        services.json
    );
}

#[tokio::test]
async fn a_templated_to_that_is_no_address_fails_the_run_naming_it() {
    let Some(smtp) = SmtpServer::start(Options::default()) else {
        return;
    };
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    harness
        .post("/api/mail-servers", &token, relay(smtp.port))
        .await;
    let automation = harness.automation(&token, mailing()).await;
    let id = order(&harness, &automation, "5004", "call me maybe").await;
    harness.drain().await;
    let shown = run(&harness, &token, &id).await;
    assert_eq!(shown["status"], "failed", "bad input is final: {shown}");
    assert_eq!(shown["attempts"], 0, "{shown}");
    let error = shown["lastError"].as_str().unwrap_or("");
    assert!(
        error.contains("input \"to\": \"call me maybe\" is not an e-mail address"),
        "{error}"
    );
    assert!(smtp.messages().is_empty());
}
