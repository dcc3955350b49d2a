//! Logs never hold a webhook token: the trace layer's span shows the path redacted, and
//! no event of a webhook call names the token. A test binary of its own: `tracing`
//! caches per-callsite interest globally, so a thread-local subscriber is only reliable
//! when no other test runs beside it.

mod support;

use std::sync::{Arc, Mutex};

use axum::http::{Method, StatusCode};
use fronta_server::signature::{generate_secret, sign};
use serde_json::json;
use support::{Harness, order_body, order_type, orders_automation, webhook_path};

/// A writer the test's subscriber logs into.
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
async fn logs_never_hold_the_webhook_token() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let harness = Harness::new();
    let (_, tenant) = harness.tenant("Signed").await;
    harness
        .post("/api/ticket-types", &tenant, order_type())
        .await;
    let secret = generate_secret();
    let mut definition = orders_automation();
    definition["signingSecret"] = json!(secret);
    let path = webhook_path(&harness.automation(&tenant, definition).await);
    let token = path.trim_start_matches("/webhook/").to_owned();
    harness.webhook(&path, &order_body("1"), &[]).await;
    let body = order_body("2");
    let now = chrono::Utc::now().timestamp();
    let signature = sign(&secret, "m", now, body.as_bytes()).expect("signs");
    let signed = harness
        .webhook(
            &path,
            &body,
            &[
                ("webhook-id", "m".to_owned()),
                ("webhook-timestamp", now.to_string()),
                ("webhook-signature", signature),
            ],
        )
        .await;
    assert_eq!(
        signed.status,
        StatusCode::ACCEPTED,
        "signed call accepted: {}",
        signed.json
    );
    harness.call(Method::GET, &path, None, None).await;
    let text = String::from_utf8(captured.0.lock().map(|b| b.clone()).unwrap_or_default())
        .expect("utf-8 logs");
    assert!(
        text.contains("/webhook/{token}"),
        "requests are traced: {text}"
    );
    assert!(
        !text.contains(&token),
        "the token never appears in the logs"
    );
}
