//! Per-(tenant, service) limits through the real executor and the SQLite store, with a
//! real local service (wiremock) and a moved clock: a service answering 503 opens its
//! breaker after the configured run of failures, later runs are snoozed (pending, no
//! attempt spent, the step logged as waiting, no request sent), the breaker shows in
//! `GET /api/services` and `/metrics`, and after the cool-down one probe closes it and
//! every run completes. With a cap of 1 and a call already in flight (another process's,
//! held through the port), a run is snoozed until the slot is free. The Postgres store is
//! held to the same port by the shared conformance cases.

mod support;

use std::time::Duration;

use axum::http::StatusCode;
use fronta_automation::service_limits::{
    Admission, CallResult, LimitRules, LimitsConfig, ServiceLimits,
};
use fronta_engine::ManualClock;
use serde_json::{Value, json};
use support::{Harness, webhook_path};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const COOLDOWN: Duration = Duration::from_secs(60);
const FULL_DELAY: Duration = Duration::from_secs(2);
const JITTER: Duration = Duration::from_secs(1);

fn limits(max_concurrent: u32) -> LimitsConfig {
    LimitsConfig {
        rules: LimitRules {
            max_concurrent,
            breaker_failures: 2,
            cooldown: COOLDOWN,
            ..LimitRules::default()
        },
        full_delay: FULL_DELAY,
        jitter: JITTER,
    }
}

fn calling(url: &str) -> Value {
    json!({
        "name": "Orders to the shop",
        "trigger": {"type": "webhook", "params": [
            {"name": "orderId", "path": "order", "type": "string", "required": true}]},
        "steps": [
            {"name": "call", "op": "http/request", "service": "shop",
             "input": {"method": "POST", "url": url, "body": {"order": "{{orderId}}"}}}
        ]
    })
}

async fn answering(shop: &MockServer, status: u16) {
    shop.reset().await;
    Mock::given(method("POST"))
        .and(path("/orders"))
        .respond_with(ResponseTemplate::new(status).set_body_json(json!({"ok": status < 300})))
        .mount(shop)
        .await;
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

fn call_step(run: &Value) -> Value {
    run["steps"]
        .as_array()
        .and_then(|steps| steps.iter().rev().find(|step| step["name"] == "call"))
        .cloned()
        .unwrap_or_else(|| panic!("no call step in {run}"))
}

async fn requests(shop: &MockServer) -> usize {
    shop.received_requests().await.map_or(0, |seen| seen.len())
}

async fn metrics(harness: &Harness) -> String {
    let reply = harness
        .call(axum::http::Method::GET, "/metrics", None, None)
        .await;
    String::from_utf8_lossy(&reply.bytes).into_owned()
}

#[tokio::test]
async fn a_failing_service_opens_its_breaker_snoozes_later_runs_and_a_probe_closes_it() {
    let shop = MockServer::start().await;
    answering(&shop, 503).await;
    let clock = ManualClock::new(chrono::Utc::now());
    let harness = Harness::with_limits(limits(8), clock.clone());
    let (_, token) = harness.tenant("Acme").await;
    let automation = harness
        .automation(&token, calling(&format!("{}/orders", shop.uri())))
        .await;

    // Two retryable failures in a row open the breaker (each spends an attempt).
    let first = order(&harness, &automation, "1").await;
    harness.drain().await;
    let second = order(&harness, &automation, "2").await;
    harness.drain().await;
    assert_eq!(requests(&shop).await, 2, "both calls were made");
    for id in [&first, &second] {
        let shown = run(&harness, &token, id).await;
        assert_eq!(shown["status"], "scheduled", "retried later: {shown}");
        assert_eq!(shown["attempts"], 1, "one attempt spent: {shown}");
    }
    let services = harness.get("/api/services", &token).await;
    assert_eq!(services.status, StatusCode::OK, "{}", services.json);
    let shop_view = &services.json["items"][0];
    assert_eq!(shop_view["service"], "shop", "{}", services.json);
    assert_eq!(shop_view["breaker"], "open", "{}", services.json);
    assert_eq!(shop_view["failures"], 2);
    assert_eq!(shop_view["inFlight"], 0);
    assert!(shop_view["retryAt"].is_string(), "{}", services.json);
    let seen = metrics(&harness).await;
    assert!(
        seen.contains("fronta_service_breakers{state=\"open\"} 1"),
        "{seen}"
    );

    // A new run meets the open circuit: snoozed, not failed, no attempt, no request.
    let third = order(&harness, &automation, "3").await;
    harness.drain().await;
    let shown = run(&harness, &token, &third).await;
    assert_eq!(shown["status"], "scheduled", "snoozed: {shown}");
    assert_eq!(shown["attempts"], 0, "no attempt spent: {shown}");
    let step = call_step(&shown);
    assert_eq!(step["status"], "waiting", "{shown}");
    assert!(
        step["message"]
            .as_str()
            .is_some_and(|message| message.contains("circuit open")),
        "{shown}"
    );
    assert_eq!(requests(&shop).await, 2, "no request while open");

    // The earlier runs' retries fall inside the cool-down: snoozed, attempts unchanged.
    answering(&shop, 200).await;
    clock.advance(Duration::from_secs(30));
    harness.drain().await;
    assert_eq!(requests(&shop).await, 0, "still no request while open");
    for id in [&first, &second] {
        let shown = run(&harness, &token, id).await;
        assert_eq!(shown["status"], "scheduled", "{shown}");
        assert_eq!(shown["attempts"], 1, "attempts unchanged: {shown}");
    }

    // After the cool-down one probe goes through and closes the breaker; the runs that
    // met the probe in flight come back after the short delay.
    clock.advance(COOLDOWN - Duration::from_secs(30) + JITTER);
    for _ in 0..10 {
        harness.drain().await;
        let mut done = true;
        for id in [&first, &second, &third] {
            done &= run(&harness, &token, id).await["status"] == "completed";
        }
        if done {
            break;
        }
        clock.advance(FULL_DELAY + JITTER);
    }
    for id in [&first, &second, &third] {
        let shown = run(&harness, &token, id).await;
        assert_eq!(shown["status"], "completed", "{shown}");
        assert_eq!(call_step(&shown)["status"], "ok", "{shown}");
    }
    assert_eq!(run(&harness, &token, &third).await["attempts"], 0);
    assert_eq!(requests(&shop).await, 3, "one call per run once closed");
    let services = harness.get("/api/services", &token).await;
    assert_eq!(services.json["items"][0]["breaker"], "closed");
    assert_eq!(services.json["items"][0]["failures"], 0);
    let seen = metrics(&harness).await;
    assert!(
        seen.contains("fronta_service_breakers{state=\"closed\"} 1")
            && seen.contains("fronta_service_breakers{state=\"open\"} 0"),
        "{seen}"
    );
}

#[tokio::test]
async fn with_a_cap_of_one_a_second_call_in_flight_is_snoozed_until_the_slot_is_free() {
    let shop = MockServer::start().await;
    answering(&shop, 200).await;
    let clock = ManualClock::new(chrono::Utc::now());
    let config = limits(1);
    let harness = Harness::with_limits(config, clock.clone());
    let (tenant, token) = harness.tenant("Acme").await;
    let automation = harness
        .automation(&token, calling(&format!("{}/orders", shop.uri())))
        .await;
    // Another process's call to the same service holds the only slot.
    let Admission::Admitted(held) = harness
        .store
        .service_acquire(tenant, "shop", &config.rules)
        .await
        .expect("acquire")
    else {
        panic!("the first call gets the slot")
    };
    let id = order(&harness, &automation, "1").await;
    harness.drain().await;
    let shown = run(&harness, &token, &id).await;
    assert_eq!(shown["status"], "scheduled", "snoozed: {shown}");
    assert_eq!(shown["attempts"], 0, "no attempt spent: {shown}");
    assert_eq!(call_step(&shown)["status"], "waiting", "{shown}");
    assert_eq!(requests(&shop).await, 0, "no request past the cap");
    let services = harness.get("/api/services", &token).await;
    assert_eq!(
        services.json["items"][0]["inFlight"], 1,
        "{}",
        services.json
    );
    assert!(
        metrics(&harness)
            .await
            .contains("fronta_service_calls_in_flight 1")
    );

    harness
        .store
        .service_release(tenant, "shop", &held, CallResult::Success, &config.rules)
        .await
        .expect("release");
    clock.advance(FULL_DELAY + JITTER);
    harness.drain().await;
    let shown = run(&harness, &token, &id).await;
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["attempts"], 0, "{shown}");
    let steps = shown["steps"].as_array().cloned().unwrap_or_default();
    let statuses: Vec<&str> = steps
        .iter()
        .map(|step| step["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        statuses,
        vec!["waiting", "ok"],
        "the wait stays in the log, then the call: {shown}"
    );
    assert_eq!(requests(&shop).await, 1);
    assert!(
        metrics(&harness)
            .await
            .contains("fronta_service_calls_in_flight 0")
    );
}
