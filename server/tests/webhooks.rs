//! `POST /webhook/{token}` and `GET /webhook/{token}` through the router: every status
//! API.md names (202, 400 missing/invalid, 404, 409, 413 with and without
//! `Content-Length`, 415, 429 with `Retry-After`), Standard Webhooks signatures (valid,
//! bit-flipped, stale, unsigned, repeated id — also after the first run finished), the
//! help with the full URL, and a webhook → worker → ticket round trip in-process.
//! (That logs never hold the token is `tests/logs.rs`.)

mod support;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode, header};
use fronta_engine::{RunId, RunStatus, Trigger};
use fronta_server::signature::{generate_secret, sign};
use fronta_server::{RateLimit, ServerConfig};
use serde_json::{Value, json};
use support::{
    ADMIN, Harness, order_body, order_type, orders_automation, test_config, webhook_path,
};

/// A tenant with the `order` type and the orders automation; its token and webhook path.
async fn orders(harness: &Harness) -> (String, String, Value) {
    let (_, token) = harness.tenant("Acme").await;
    let reply = harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "type: {}", reply.json);
    let automation = harness.automation(&token, orders_automation()).await;
    (token, webhook_path(&automation), automation)
}

#[tokio::test]
async fn webhook_answers_202_with_the_id_of_a_committed_queued_run() {
    let harness = Harness::new();
    let (_, path, automation) = orders(&harness).await;
    let reply = harness.webhook(&path, &order_body("5001"), &[]).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "202: {}", reply.json);
    assert_eq!(
        reply.json["status"], "queued",
        "status queued: {}",
        reply.json
    );
    let id: RunId = reply.text("runId").parse().expect("a run id");
    let run = harness
        .runs()
        .run_get(id)
        .await
        .expect("a read")
        .expect("the run is committed before the answer");
    assert_eq!(run.trigger, Trigger::Webhook, "trigger webhook");
    assert_eq!(run.status, RunStatus::Queued, "queued");
    assert_eq!(
        run.payload["automationId"], automation["id"],
        "the run is the automation's"
    );
    assert_eq!(
        run.payload["context"]["orderId"], "5001",
        "the contract's parameters are in the context"
    );
}

#[tokio::test]
async fn missing_parameter_answers_400_naming_parameter_and_path() {
    let harness = Harness::new();
    let (_, path, _) = orders(&harness).await;
    let reply = harness
        .webhook(&path, &json!({"kind": "order.created"}).to_string(), &[])
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "400: {}", reply.json);
    assert_eq!(reply.code(), "missing_parameter", "code: {}", reply.json);
    assert_eq!(reply.json["error"]["parameter"], "orderId", "the parameter");
    assert_eq!(reply.json["error"]["path"], "data.order.id", "its path");
    assert!(
        reply.json["error"]["message"].is_string(),
        "a message: {}",
        reply.json
    );
}

#[tokio::test]
async fn wrong_parameter_type_answers_400_invalid_parameter() {
    let harness = Harness::new();
    let (_, path, _) = orders(&harness).await;
    let body = json!({"kind": "order.created", "data": {"order": {"id": 5001}}}).to_string();
    let reply = harness.webhook(&path, &body, &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "400: {}", reply.json);
    assert_eq!(reply.code(), "invalid_parameter", "code: {}", reply.json);
    assert_eq!(
        reply.json["error"]["parameter"], "orderId",
        "names the parameter"
    );
    assert_eq!(
        reply.json["error"]["expected"], "string",
        "what was expected"
    );
    assert_eq!(reply.json["error"]["found"], "number", "what was found");
}

#[tokio::test]
async fn invalid_json_answers_400() {
    let harness = Harness::new();
    let (_, path, _) = orders(&harness).await;
    let reply = harness.webhook(&path, "{\"kind\": ", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "400: {}", reply.json);
    assert_eq!(reply.code(), "invalid_json", "code: {}", reply.json);
}

#[tokio::test]
async fn unknown_token_answers_404_for_post_and_get() {
    let harness = Harness::new();
    orders(&harness).await;
    let post = harness
        .webhook("/webhook/wh_nope", &order_body("1"), &[])
        .await;
    assert_eq!(
        post.status,
        StatusCode::NOT_FOUND,
        "POST 404: {}",
        post.json
    );
    assert_eq!(post.code(), "not_found", "code");
    let get = harness
        .call(Method::GET, "/webhook/wh_nope", None, None)
        .await;
    assert_eq!(get.status, StatusCode::NOT_FOUND, "GET 404");
    assert_eq!(get.bytes, post.bytes, "the same 404 body");
}

#[tokio::test]
async fn a_token_whose_automation_left_the_webhook_trigger_is_unknown() {
    let harness = Harness::new();
    let (token, path, automation) = orders(&harness).await;
    let manual = json!({"name": "Orders from the web shop", "trigger": {"type": "manual"},
                        "steps": [{"name": "note", "op": "flow/log", "input": {"message": "by hand"}}]});
    let id = automation["id"].as_str().expect("an id");
    let reply = harness
        .call(
            Method::PUT,
            &format!("/api/automations/{id}"),
            Some(&token),
            Some(manual),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "updated: {}", reply.json);
    assert!(reply.json.get("webhookUrl").is_none(), "no webhook URL now");
    let post = harness.webhook(&path, &order_body("1"), &[]).await;
    assert_eq!(post.status, StatusCode::NOT_FOUND, "404: {}", post.json);
}

#[tokio::test]
async fn paused_automation_answers_409_and_resumed_accepts_again() {
    let harness = Harness::new();
    let (token, path, automation) = orders(&harness).await;
    let id = automation["id"].as_str().expect("an id");
    let paused = harness
        .post(&format!("/api/automations/{id}/pause"), &token, json!({}))
        .await;
    assert_eq!(paused.status, StatusCode::OK, "paused: {}", paused.json);
    assert_eq!(paused.json["enabled"], false, "enabled false");
    let reply = harness.webhook(&path, &order_body("1"), &[]).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "409: {}", reply.json);
    assert_eq!(reply.code(), "automation_paused", "code");
    harness
        .post(&format!("/api/automations/{id}/resume"), &token, json!({}))
        .await;
    let again = harness.webhook(&path, &order_body("1"), &[]).await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "accepted after resume");
}

#[tokio::test]
async fn non_json_content_type_answers_415() {
    let harness = Harness::new();
    let (_, path, _) = orders(&harness).await;
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut builder = Request::builder().method(Method::POST).uri(&path);
        if let Some(content_type) = content_type {
            builder = builder.header(header::CONTENT_TYPE, content_type);
        }
        let reply = harness
            .send(
                builder
                    .body(Body::from(order_body("1")))
                    .expect("a request"),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "415 for {content_type:?}: {}",
            reply.json
        );
        assert_eq!(reply.code(), "unsupported_media_type", "code");
    }
}

fn small_limit() -> ServerConfig {
    ServerConfig {
        body_limit: 1024,
        ..test_config()
    }
}

fn big_body() -> String {
    json!({"kind": "order.created", "data": {"order": {"id": "1"}}, "pad": "x".repeat(4096)})
        .to_string()
}

#[tokio::test]
async fn body_over_the_limit_with_content_length_answers_413() {
    let harness = Harness::with_config(small_limit());
    let (_, path, _) = orders(&harness).await;
    let body = big_body();
    let request = Request::builder()
        .method(Method::POST)
        .uri(&path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, body.len())
        .body(Body::from(body))
        .expect("a request");
    let reply = harness.send(request).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "413: {}",
        reply.json
    );
    assert_eq!(reply.code(), "payload_too_large", "code");
    assert_eq!(reply.json["error"]["limit"], 1024, "the limit is named");
}

#[tokio::test]
async fn chunked_body_over_the_limit_without_content_length_answers_413() {
    let harness = Harness::with_config(small_limit());
    let (_, path, _) = orders(&harness).await;
    let chunks: Vec<Result<Bytes, std::io::Error>> = big_body()
        .into_bytes()
        .chunks(256)
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    let request = Request::builder()
        .method(Method::POST)
        .uri(&path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .expect("a request");
    assert!(
        request.headers().get(header::CONTENT_LENGTH).is_none(),
        "no Content-Length"
    );
    let reply = harness.send(request).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "413: {}",
        reply.json
    );
    assert_eq!(reply.code(), "payload_too_large", "code");
    let stats = harness.runs().run_stats().await.expect("stats");
    assert_eq!(stats.total(), 0, "nothing was enqueued");
}

#[tokio::test]
async fn rate_limit_per_token_answers_429_with_retry_after() {
    let harness = Harness::with_config(ServerConfig {
        webhook_rate_per_token: Some(RateLimit::new(0.01, 2)),
        ..test_config()
    });
    let (_, path, _) = orders(&harness).await;
    for n in 0..2 {
        let reply = harness
            .webhook(&path, &order_body(&n.to_string()), &[])
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "within the burst: {n}");
    }
    let reply = harness.webhook(&path, &order_body("3"), &[]).await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "429: {}",
        reply.json
    );
    assert_eq!(reply.code(), "rate_limited", "code");
    let retry_after: u64 = reply
        .headers
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!(retry_after >= 1, "Retry-After ≥ 1: {retry_after}");
}

#[tokio::test]
async fn rate_limit_per_tenant_covers_all_its_webhooks() {
    let harness = Harness::with_config(ServerConfig {
        webhook_rate_per_tenant: Some(RateLimit::new(0.01, 3)),
        ..test_config()
    });
    let (token, first, _) = orders(&harness).await;
    let mut other = orders_automation();
    other["name"] = json!("Second shop");
    let second = webhook_path(&harness.automation(&token, other).await);
    for (n, path) in [&first, &first, &second].into_iter().enumerate() {
        let reply = harness
            .webhook(path, &order_body(&n.to_string()), &[])
            .await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "within the tenant's burst: {n}"
        );
    }
    let reply = harness.webhook(&second, &order_body("9"), &[]).await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the tenant is over: {}",
        reply.json
    );
    assert!(
        reply.headers.contains_key(header::RETRY_AFTER),
        "Retry-After is sent"
    );
    // Another tenant is not affected.
    let (_, other_token) = harness.tenant("Other").await;
    harness
        .post("/api/ticket-types", &other_token, order_type())
        .await;
    let theirs = webhook_path(&harness.automation(&other_token, orders_automation()).await);
    let reply = harness.webhook(&theirs, &order_body("1"), &[]).await;
    assert_eq!(
        reply.status,
        StatusCode::ACCEPTED,
        "another tenant has its own bucket"
    );
}

/// A tenant whose orders automation requires signatures; the secret and webhook path.
async fn signed(harness: &Harness) -> (String, String) {
    let (_, token) = harness.tenant("Signed").await;
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    let secret = generate_secret();
    let mut definition = orders_automation();
    definition["signingSecret"] = json!(secret);
    let automation = harness.automation(&token, definition).await;
    assert_eq!(automation["signed"], true, "signed: {automation}");
    assert!(
        automation.get("signingSecret").is_none(),
        "a given secret is not echoed"
    );
    (secret, webhook_path(&automation))
}

pub fn signature_headers(
    secret: &str,
    id: &str,
    timestamp: i64,
    body: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        (
            "webhook-signature",
            sign(secret, id, timestamp, body.as_bytes()).expect("signs"),
        ),
    ]
}

#[tokio::test]
async fn valid_signature_is_accepted() {
    let harness = Harness::new();
    let (secret, path) = signed(&harness).await;
    let body = order_body("77");
    let now = chrono::Utc::now().timestamp();
    let reply = harness
        .webhook(
            &path,
            &body,
            &signature_headers(&secret, "msg_1", now, &body),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "202: {}", reply.json);
}

#[tokio::test]
async fn unsigned_bit_flipped_and_stale_requests_answer_401() {
    let harness = Harness::new();
    let (secret, path) = signed(&harness).await;
    let body = order_body("77");
    let now = chrono::Utc::now().timestamp();

    let unsigned = harness.webhook(&path, &body, &[]).await;
    assert_eq!(
        unsigned.status,
        StatusCode::UNAUTHORIZED,
        "unsigned: {}",
        unsigned.json
    );
    assert_eq!(unsigned.code(), "invalid_signature", "code");

    let mut flipped = signature_headers(&secret, "msg_2", now, &body);
    let signature = flipped[2].1.clone();
    let (prefix, encoded) = signature.split_at(3);
    let mut raw = base64_decode(encoded);
    raw[0] ^= 0x01;
    flipped[2].1 = format!("{prefix}{}", base64_encode(&raw));
    let reply = harness.webhook(&path, &body, &flipped).await;
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "a flipped bit: {}",
        reply.json
    );

    let tampered = order_body("78");
    let reply = harness
        .webhook(
            &path,
            &tampered,
            &signature_headers(&secret, "msg_3", now, &body),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "another body: {}",
        reply.json
    );

    let stale = now - 6 * 60;
    let reply = harness
        .webhook(
            &path,
            &body,
            &signature_headers(&secret, "msg_4", stale, &body),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "stale: {}",
        reply.json
    );
    let future = now + 6 * 60;
    let reply = harness
        .webhook(
            &path,
            &body,
            &signature_headers(&secret, "msg_5", future, &body),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "from the future: {}",
        reply.json
    );

    let stats = harness.runs().run_stats().await.expect("stats");
    assert_eq!(stats.total(), 0, "no refused request enqueued anything");
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn repeated_webhook_id_returns_the_first_run_also_after_it_finished() {
    let harness = Harness::new();
    let (secret, path) = signed(&harness).await;
    let body = order_body("88");
    let now = chrono::Utc::now().timestamp();
    let first = harness
        .webhook(
            &path,
            &body,
            &signature_headers(&secret, "msg_same", now, &body),
        )
        .await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "first: {}", first.json);
    let run_id = first.text("runId");

    // A retry by the sender: same id, re-signed with a later timestamp.
    let repeat = harness
        .webhook(
            &path,
            &body,
            &signature_headers(&secret, "msg_same", now + 5, &body),
        )
        .await;
    assert_eq!(
        repeat.status,
        StatusCode::ACCEPTED,
        "repeat: {}",
        repeat.json
    );
    assert_eq!(repeat.text("runId"), run_id, "the first run's id");
    assert_eq!(repeat.json["duplicate"], true, "marked as a repeat");

    harness.drain().await;
    let after = harness
        .webhook(
            &path,
            &body,
            &signature_headers(&secret, "msg_same", now + 10, &body),
        )
        .await;
    assert_eq!(after.status, StatusCode::ACCEPTED, "after: {}", after.json);
    assert_eq!(after.text("runId"), run_id, "still the first run's id");
    assert_eq!(after.json["status"], "completed", "and its status now");
    let stats = harness.runs().run_stats().await.expect("stats");
    assert_eq!(stats.total(), 1, "one run for one webhook id");

    let other = harness
        .webhook(
            &path,
            &body,
            &signature_headers(&secret, "msg_other", now, &body),
        )
        .await;
    assert_ne!(other.text("runId"), run_id, "another id is another run");
}

#[tokio::test]
async fn a_fresh_process_answers_the_first_run_while_live_and_after_it_finished() {
    // A repeat reaching another server process (or this one after a restart) finds the
    // first run in the store: by the enqueue's unique key while it is queued, by
    // `run_find_by_key` after it finished. Nothing is remembered in memory.
    let harness = Harness::new();
    let (secret, path) = signed(&harness).await;
    let body = order_body("89");
    let now = chrono::Utc::now().timestamp();
    let first = harness
        .webhook(
            &path,
            &body,
            &signature_headers(&secret, "msg_k", now, &body),
        )
        .await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "first: {}", first.json);

    let live = fresh_process_webhook(&harness, &path, &secret, "msg_k", now + 1, &body).await;
    assert_eq!(
        live["runId"], first.json["runId"],
        "the queued first run: {live}"
    );
    assert_eq!(live["status"], "queued", "still queued: {live}");

    harness.drain().await;
    let finished = fresh_process_webhook(&harness, &path, &secret, "msg_k", now + 2, &body).await;
    assert_eq!(
        finished["runId"], first.json["runId"],
        "the finished first run: {finished}"
    );
    assert_eq!(finished["status"], "completed", "and its status now");
    assert_eq!(finished["duplicate"], true, "marked as a repeat");
    let stats = harness.runs().run_stats().await.expect("stats");
    assert_eq!(stats.total(), 1, "one run for one webhook id");
}

/// A signed webhook through a new `App` on the same store (another process).
async fn fresh_process_webhook(
    harness: &Harness,
    path: &str,
    secret: &str,
    id: &str,
    timestamp: i64,
    body: &str,
) -> Value {
    let fresh = fronta_server::router(
        fronta_server::App::new(
            test_config(),
            harness_ports(harness),
            fronta_engine::Dispatcher::from_registry(
                Arc::new(harness.store.clone()),
                &harness.registry,
            ),
        )
        .expect("an app"),
    );
    let request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json");
    let request = signature_headers(secret, id, timestamp, body)
        .into_iter()
        .fold(request, |builder, (name, value)| {
            builder.header(name, value)
        })
        .body(Body::from(body.to_owned()))
        .expect("a request");
    let response = tower::ServiceExt::oneshot(fresh, request)
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::ACCEPTED, "accepted");
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a body");
    serde_json::from_slice(&bytes).expect("json")
}

fn harness_ports(harness: &Harness) -> fronta_server::Ports {
    fronta_server::Ports {
        runs: Arc::new(harness.store.clone()),
        desk: Arc::new(harness.store.clone()),
        access: Arc::new(harness.store.clone()),
        automations: Arc::new(harness.store.clone()),
        secrets: Arc::new(harness.store.clone()),
        secret_cipher: None,
        limits: Arc::new(harness.store.clone()),
        mcp_servers: Arc::new(harness.store.clone()),
        mail_servers: Arc::new(harness.store.clone()),
        hosts: Arc::new(fronta_connectors::AddressPolicy::default()),
        widgets: Arc::new(harness.store.clone()),
        connectors: None,
    }
}

#[tokio::test]
async fn get_help_shows_the_full_url_parameters_and_an_example_body() {
    let harness = Harness::new();
    let (_, path, automation) = orders(&harness).await;
    let request = Request::builder()
        .uri(&path)
        .header(header::HOST, "desk.example.com:8443")
        .body(Body::empty())
        .expect("a request");
    let reply = harness.send(request).await;
    assert_eq!(reply.status, StatusCode::OK, "200: {}", reply.json);
    assert_eq!(reply.json["method"], "POST", "method");
    assert_eq!(
        reply.json["url"],
        format!("http://desk.example.com:8443{path}"),
        "the URL as the client reached us"
    );
    assert_eq!(
        reply.json["parameters"][1],
        json!({"name": "orderId", "path": "data.order.id", "type": "string", "required": true}),
        "parameters with paths"
    );
    assert_eq!(
        reply.json["exampleBody"],
        json!({"kind": "kind", "data": {"order": {"id": "orderId"}}}),
        "an example body"
    );
    assert_eq!(
        automation["webhookUrl"],
        format!("http://fronta.test{path}"),
        "the automation's webhookUrl is built the same way"
    );
}

#[tokio::test]
async fn get_help_uses_the_configured_base_url_or_trusted_proxy_headers() {
    let configured = Harness::with_config(ServerConfig {
        public_base_url: Some("https://hooks.example.com".into()),
        ..test_config()
    });
    let (_, path, _) = orders(&configured).await;
    let reply = configured.call(Method::GET, &path, None, None).await;
    assert_eq!(
        reply.json["url"],
        format!("https://hooks.example.com{path}"),
        "configured base URL"
    );

    let proxied = Harness::with_config(ServerConfig {
        trust_proxy_headers: true,
        ..test_config()
    });
    let (_, path, _) = orders(&proxied).await;
    let request = Request::builder()
        .uri(&path)
        .header(header::HOST, "10.0.0.7:8080")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "desk.example.com")
        .body(Body::empty())
        .expect("a request");
    let reply = proxied.send(request).await;
    assert_eq!(
        reply.json["url"],
        format!("https://desk.example.com{path}"),
        "trusted proxy headers"
    );
}

#[tokio::test]
async fn webhook_to_worker_to_ticket_end_to_end() {
    let harness = Harness::new();
    let (token, path, _) = orders(&harness).await;
    let group = harness
        .post("/api/groups", &token, json!({"name": "warehouse"}))
        .await;
    let group_id = group.text("id");
    harness
        .post(
            &format!("/api/groups/{group_id}/members"),
            &token,
            json!({"name": "Eva", "email": "eva@acme.test", "capacity": 5}),
        )
        .await;
    harness
        .automation(
            &token,
            json!({
                "name": "Route orders",
                "trigger": {"type": "event", "event": "ticket.created"},
                "steps": [{"name": "isOrder", "type": "condition",
                           "rules": [{"field": "ticket.type", "operator": "eq", "value": "order"}],
                           "then": [{"name": "assign", "op": "ticket/assign-least-busy",
                                     "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}]}]
            }),
        )
        .await;

    let accepted = harness.webhook(&path, &order_body("5001"), &[]).await;
    assert_eq!(
        accepted.status,
        StatusCode::ACCEPTED,
        "202: {}",
        accepted.json
    );
    let run_id = accepted.text("runId");
    harness.drain().await;

    let run = harness.get(&format!("/api/runs/{run_id}"), &token).await;
    assert_eq!(run.status, StatusCode::OK, "the run: {}", run.json);
    assert_eq!(run.json["status"], "completed", "completed: {}", run.json);
    assert_eq!(run.json["trigger"], "webhook", "trigger");
    assert_eq!(
        run.json["steps"][0]["name"], "ticket",
        "the step log: {}",
        run.json
    );
    assert_eq!(run.json["steps"][0]["status"], "ok", "the step succeeded");
    assert!(run.json["finishedAt"].is_string(), "finishedAt");

    let tickets = harness.get("/api/tickets?type=order", &token).await;
    assert_eq!(
        tickets.json["items"].as_array().map(Vec::len),
        Some(1),
        "one ticket: {}",
        tickets.json
    );
    let ticket = &tickets.json["items"][0];
    assert_eq!(ticket["number"], "TK-1", "human id");
    assert_eq!(ticket["externalId"], "order-5001", "external id");
    assert_eq!(ticket["status"], "waiting-to-pack", "status");
    assert_eq!(
        ticket["assignee"]["name"], "Eva",
        "assigned by the event automation"
    );
    let id = ticket["id"].as_str().expect("an id");
    let full = harness.get(&format!("/api/tickets/{id}"), &token).await;
    let log = full.json["log"].as_array().expect("a log");
    assert!(
        log.iter().any(|line| line["runId"] == run_id.as_str()),
        "the log names the run: {}",
        full.json
    );

    let runs = harness
        .get("/api/dashboard/runs?trigger=event", &token)
        .await;
    assert_eq!(
        runs.json["items"].as_array().map(Vec::len),
        Some(1),
        "the event run is listed: {}",
        runs.json
    );
    assert!(
        runs.json["items"][0].get("steps").is_none(),
        "lists leave out the step log"
    );
    let _ = ADMIN;
}
