//! Logs never hold a webhook token nor an API token: the trace layer's span shows the path redacted, and
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

/// One test, one subscriber: both cases run under it, one after the other.
#[tokio::test]
async fn logs_never_hold_a_token() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    webhook_tokens(&captured).await;
    api_tokens(&captured).await;
}

async fn webhook_tokens(captured: &Captured) {
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

/// Nor an API token: one made, used, revoked and then tried again, wrong ones guessed,
/// an admin route tried with a tenant token — the failures are logged (with the address,
/// the route and the reason) and no log line, answer or audit entry holds a token.
async fn api_tokens(captured: &Captured) {
    use fronta_desk::access::{AccessStore, AuditFilter};
    let harness = Harness::new();
    let (_, admin) = harness.tenant("Acme").await;
    let made = harness
        .post(
            "/api/tokens",
            &admin,
            json!({"name": "wall", "role": "viewer"}),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.json);
    let wall = made.text("token");
    let mut answers = Vec::new();
    answers.push(harness.get("/api/me", &wall).await);
    answers.push(harness.get("/api/tokens", &admin).await);
    answers.push(
        harness
            .post("/api/groups", &wall, json!({"name": "x"}))
            .await,
    );
    answers.push(
        harness
            .call(
                Method::DELETE,
                &format!("/api/tokens/{}", made.text("id")),
                Some(&admin),
                None,
            )
            .await,
    );
    answers.push(harness.get("/api/me", &wall).await);
    answers.push(harness.get("/api/me", "ft_guessed_token_123").await);
    answers.push(harness.get("/api/admin/tenants", &admin).await);
    let text = String::from_utf8(captured.0.lock().map(|b| b.clone()).unwrap_or_default())
        .expect("utf-8 logs");
    assert!(
        text.contains("authentication failed"),
        "failed authentications are logged: {text}"
    );
    let entries = harness
        .store
        .audit_list(&AuditFilter {
            limit: 100,
            ..AuditFilter::default()
        })
        .await
        .expect("the audit log");
    assert!(
        entries.len() >= 2,
        "the token's creation and revocation are audited"
    );
    let audit = format!("{entries:?}");
    for secret in [wall.as_str(), admin.as_str(), "ft_guessed_token_123"] {
        assert!(!text.contains(secret), "a log line holds a token");
        assert!(!audit.contains(secret), "an audit entry holds a token");
        for answer in &answers[1..] {
            assert!(
                !String::from_utf8_lossy(&answer.bytes).contains(secret),
                "an answer holds a token: {}",
                answer.json
            );
        }
    }
}
