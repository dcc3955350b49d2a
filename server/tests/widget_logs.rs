//! Logs never hold a widget's secret: the value is revealed into the call's input only,
//! and the answer (which echoes it here) and the failure message are scrubbed before
//! anything is logged. A test binary of its own, like `logs.rs`: `tracing` caches
//! per-callsite interest globally, so a thread-local subscriber is only reliable when no
//! other test runs beside it.

mod support;

use std::sync::{Arc, Mutex};

use axum::http::{Method, StatusCode};
use serde_json::json;
use support::Harness;
use wiremock::matchers::{header, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn logs_never_hold_a_widgets_secret() {
    const VALUE: &str = "widget-s3cr3t-in-logs";
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let service = MockServer::start().await;
    Mock::given(method("GET"))
        .and(header("x-api-key", VALUE))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"echo": VALUE})))
        .up_to_n_times(1)
        .mount(&service)
        .await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(400).set_body_string(format!("bad key {VALUE}")))
        .mount(&service)
        .await;
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let put = harness
        .call(
            Method::PUT,
            "/api/secrets/key",
            Some(&token),
            Some(json!({"value": VALUE})),
        )
        .await;
    assert_eq!(put.status, StatusCode::NO_CONTENT, "{}", put.json);
    let created = harness
        .post(
            "/api/widgets",
            &token,
            json!({"name": "Echo", "op": "http/request",
                   "input": {"url": format!("{}/echo?key={{{{secrets.key}}}}", service.uri()),
                             "headers": {"X-Api-Key": "{{secrets.key}}"}},
                   "ttlSec": 60}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json);
    let id = created.text("id");
    let read = harness.get(&format!("/api/widgets/{id}"), &token).await;
    assert_eq!(
        read.json["data"]["body"]["echo"],
        json!("[secret key]"),
        "{}",
        read.json
    );
    let failed = harness
        .post(&format!("/api/widgets/{id}/refresh"), &token, json!({}))
        .await;
    assert!(failed.json["error"].is_string(), "{}", failed.json);

    let logs = String::from_utf8_lossy(&captured.0.lock().expect("the log")).into_owned();
    assert!(
        logs.contains("widget refresh: calling out") && logs.contains("widget refresh failed"),
        "the capture works: {logs}"
    );
    assert!(!logs.contains(VALUE), "a secret in the logs:\n{logs}");
}
