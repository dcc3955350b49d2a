//! `GET /api/stream` through the router: a tenant's stream tells a webhook's run from
//! `run.queued` to `run.completed` (the enqueue published in-process, the worker's
//! progress found by the poll) and the ticket it created; another tenant's stream hears
//! nothing of it; the admin token is refused; closing the hub ends open streams.

mod support;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use futures_util::StreamExt;
use serde_json::Value;
use support::{Harness, order_body, order_type, orders_automation, test_config, webhook_path};
use tower::ServiceExt;

/// An open event stream and what was read of it so far.
struct Events {
    body: axum::body::BodyDataStream,
    buffer: String,
}

impl Events {
    async fn open(harness: &Harness, token: &str) -> Events {
        let request = Request::builder()
            .method(Method::GET)
            .uri("/api/stream")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .expect("a request");
        let response = harness
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router never fails");
        assert_eq!(response.status(), StatusCode::OK, "the stream opens");
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|value| value.to_str().ok()),
            Some("text/event-stream"),
            "an SSE answer"
        );
        Events {
            body: response.into_body().into_data_stream(),
            buffer: String::new(),
        }
    }

    /// The next event (name, data), `None` when nothing came within `wait` or it ended.
    async fn next(&mut self, wait: Duration) -> Option<(String, Value)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let mut name = None;
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        name = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim());
                    }
                }
                if let Some(name) = name {
                    let data = serde_json::from_str(&data).expect("event data is JSON");
                    return Some((name, data));
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .ok()??;
            let bytes = chunk.expect("the stream reads");
            self.buffer
                .push_str(std::str::from_utf8(&bytes).expect("UTF-8"));
        }
    }
}

fn fast_poll() -> Harness {
    Harness::with_config(fronta_server::ServerConfig {
        stream_poll_interval: Duration::from_millis(30),
        ..test_config()
    })
}

#[tokio::test]
async fn a_tenants_stream_follows_a_webhook_run_to_completed_and_others_hear_nothing() {
    let harness = fast_poll();
    let (_, acme) = harness.tenant("Acme").await;
    let (_, globex) = harness.tenant("Globex").await;
    let reply = harness.post("/api/ticket-types", &acme, order_type()).await;
    assert_eq!(
        reply.status,
        StatusCode::CREATED,
        "order type: {}",
        reply.json
    );
    let automation = harness.automation(&acme, orders_automation()).await;

    let mut ours = Events::open(&harness, &acme).await;
    let mut theirs = Events::open(&harness, &globex).await;
    let reply = harness
        .webhook(&webhook_path(&automation), &order_body("5001"), &[])
        .await;
    assert_eq!(
        reply.status,
        StatusCode::ACCEPTED,
        "webhook: {}",
        reply.json
    );
    let run = reply.text("runId");

    let (name, data) = ours
        .next(Duration::from_secs(5))
        .await
        .expect("an event after the webhook");
    assert_eq!(name, "run.queued", "the enqueue is told first: {data}");
    assert_eq!(data["id"], run.as_str(), "about the webhook's run: {data}");

    harness.drain().await;
    let mut seen = vec![name];
    let mut ticket_created = false;
    while let Some((name, data)) = ours.next(Duration::from_secs(5)).await {
        if name == "ticket.created" {
            assert_eq!(
                data["externalId"], "order-5001",
                "the order's ticket: {data}"
            );
            ticket_created = true;
        }
        if data["id"] == run.as_str() {
            seen.push(name.clone());
            if name == "run.completed" {
                assert_eq!(data["status"], "completed", "the run as listed: {data}");
                break;
            }
        }
    }
    assert_eq!(
        seen.last().map(String::as_str),
        Some("run.completed"),
        "the run's events end completed: {seen:?}"
    );
    // The ticket may be told after the run; wait a little for it.
    while !ticket_created {
        let (name, data) = ours
            .next(Duration::from_secs(2))
            .await
            .expect("ticket.created arrives");
        ticket_created = name == "ticket.created" && data["externalId"] == "order-5001";
    }
    assert!(
        theirs.next(Duration::from_millis(300)).await.is_none(),
        "another tenant's stream hears nothing of it"
    );
}

#[tokio::test]
async fn the_admin_token_cannot_open_a_stream() {
    let harness = Harness::new();
    let reply = harness.get("/api/stream", support::ADMIN).await;
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "the stream is tenant-scoped: {}",
        reply.json
    );
}

#[tokio::test]
async fn closing_the_hub_ends_open_streams() {
    let harness = fast_poll();
    let (_, acme) = harness.tenant("Acme").await;
    let mut events = Events::open(&harness, &acme).await;
    harness.app.hub().close();
    let ended = tokio::time::timeout(Duration::from_secs(5), events.body.next())
        .await
        .expect("the stream ends within 5 s after the hub closed");
    assert!(ended.is_none(), "no more data after close: {ended:?}");
}

#[tokio::test]
async fn a_revoked_token_s_open_stream_ends_and_the_next_request_is_401() {
    let harness = fast_poll();
    let (_, admin) = harness.tenant("Acme").await;
    let wall = harness
        .post(
            "/api/tokens",
            &admin,
            serde_json::json!({"name": "wall", "role": "viewer"}),
        )
        .await;
    assert_eq!(wall.status, StatusCode::CREATED, "{}", wall.json);
    let mut events = Events::open(&harness, &wall.text("token")).await;
    let revoked = harness
        .call(
            Method::DELETE,
            &format!("/api/tokens/{}", wall.text("id")),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(revoked.status, StatusCode::NO_CONTENT, "{}", revoked.json);
    let start = tokio::time::Instant::now();
    // Read until the stream ends (keep-alive comments may come first).
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while events.body.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the revoked token's stream ended");
    println!(
        "stream of a revoked token ended {:?} after the revocation",
        start.elapsed()
    );
    let next = harness.get("/api/me", &wall.text("token")).await;
    assert_eq!(next.status, StatusCode::UNAUTHORIZED, "{}", next.json);
}
