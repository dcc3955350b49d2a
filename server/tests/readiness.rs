//! `GET /readyz` follows the SQLite writer, not only the read pool: a write that panics
//! fails alone (the next write is written and readiness stays 200), while a writer that
//! has stopped makes readiness 503 and every write through the API 503 `unavailable`.

mod support;

use axum::http::{Method, StatusCode};
use fronta_engine::StoreError;
use serde_json::json;
use support::{ADMIN, Harness, order_body, order_type, orders_automation, webhook_path};

#[tokio::test]
async fn a_panicking_write_fails_alone_and_readiness_stays_200() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let reply = harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "type: {}", reply.json);
    let path = webhook_path(&harness.automation(&token, orders_automation()).await);

    let planted = harness
        .store
        .transaction(|_| -> Result<(), StoreError> { panic!("planted panic in a write") })
        .await;
    assert!(
        matches!(&planted, Err(StoreError::Internal(message)) if message.contains("panicked")),
        "the planted write answers that it panicked: {planted:?}"
    );

    let reply = harness.webhook(&path, &order_body("9001"), &[]).await;
    assert_eq!(
        reply.status,
        StatusCode::ACCEPTED,
        "the next write (a webhook's enqueue) is written: {}",
        reply.json
    );
    let reply = harness
        .post("/api/admin/tenants", ADMIN, json!({"name": "Globex"}))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::CREATED,
        "a desk write after the panic: {}",
        reply.json
    );
    let ready = harness.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(
        ready.status,
        StatusCode::OK,
        "readiness after a panicking write: {}",
        ready.json
    );
}

#[tokio::test]
async fn a_stopped_writer_makes_readiness_503_and_writes_unavailable() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let reply = harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "type: {}", reply.json);
    let path = webhook_path(&harness.automation(&token, orders_automation()).await);
    let ready = harness.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(ready.status, StatusCode::OK, "ready before the stop");

    harness.store.stop_writer().await;

    let ready = harness.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(
        ready.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "readiness proves the write path, which is gone: {}",
        ready.json
    );
    assert!(
        ready.headers.get("retry-after").is_some(),
        "the 503 says when to come back"
    );
    let reply = harness.webhook(&path, &order_body("9002"), &[]).await;
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "a webhook is never accepted without its write: {}",
        reply.json
    );
    let reply = harness
        .post("/api/admin/tenants", ADMIN, json!({"name": "Globex"}))
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "a desk write answers unavailable: {}",
        reply.json
    );
    let health = harness.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(
        health.status,
        StatusCode::OK,
        "the process itself still answers"
    );
}
