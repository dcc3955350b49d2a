//! Dashboard widgets over the API against a real local service (wiremock), with the
//! store on a `ManualClock` the tests move: the cache answers while fresh without
//! calling out, a stale read calls once, a forced refresh calls whatever the age, a
//! failure keeps the old data and says so with the data's age, an open breaker makes a
//! forced refresh answer 503 `service_waiting`, secrets never reach an answer or the
//! database file, and bad definitions answer 400 naming the field.

mod support;

use std::time::Duration;

use axum::http::{Method, StatusCode};
use fronta_automation::service_limits::{LimitRules, LimitsConfig};
use fronta_automation::widget::WidgetLimits;
use fronta_engine::ManualClock;
use serde_json::{Value, json};
use support::{Harness, Reply, test_config};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const TTL: u64 = 60;

fn clocked() -> (Harness, ManualClock) {
    let clock = ManualClock::new(chrono::Utc::now());
    (
        Harness::with_limits(LimitsConfig::default(), clock.clone()),
        clock,
    )
}

fn counting(url: &str) -> Value {
    json!({"name": "Open invoices", "op": "http/request", "service": "billing",
           "input": {"url": url}, "path": "body.count", "ttlSec": TTL})
}

async fn answering(service: &MockServer, status: u16, body: Value) {
    service.reset().await;
    Mock::given(method("GET"))
        .and(path("/count"))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(service)
        .await;
}

async fn requests(service: &MockServer) -> usize {
    service
        .received_requests()
        .await
        .map_or(0, |seen| seen.len())
}

async fn create(harness: &Harness, token: &str, definition: Value) -> String {
    let reply = harness.post("/api/widgets", token, definition).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
    assert_eq!(reply.json["data"], Value::Null, "no call on create");
    reply.text("id")
}

async fn list(harness: &Harness, token: &str) -> Vec<Value> {
    let reply = harness.get("/api/widgets", token).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    reply.json["items"].as_array().cloned().unwrap_or_default()
}

async fn refresh(harness: &Harness, token: &str, id: &str) -> Reply {
    harness
        .post(&format!("/api/widgets/{id}/refresh"), token, json!({}))
        .await
}

#[tokio::test]
async fn a_fresh_cache_answers_without_calling_and_a_stale_one_calls_once() {
    let service = MockServer::start().await;
    answering(&service, 200, json!({"count": 12})).await;
    let (harness, clock) = clocked();
    let (_, token) = harness.tenant("Acme").await;
    let id = create(
        &harness,
        &token,
        counting(&format!("{}/count", service.uri())),
    )
    .await;

    let first = list(&harness, &token).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["id"], json!(id));
    assert_eq!(first[0]["data"], json!(12), "{}", first[0]);
    assert_eq!(first[0]["ageSec"], json!(0));
    assert_eq!(first[0]["stale"], json!(false));
    assert_eq!(first[0]["error"], Value::Null);
    assert!(first[0]["fetchedAt"].is_string());
    assert_eq!(requests(&service).await, 1, "the first read calls");

    clock.advance(Duration::from_secs(30));
    let second = list(&harness, &token).await;
    assert_eq!(second[0]["data"], json!(12));
    assert_eq!(
        second[0]["ageSec"],
        json!(30),
        "the age moves with the clock"
    );
    assert_eq!(second[0]["fetchedAt"], first[0]["fetchedAt"]);
    let one = harness.get(&format!("/api/widgets/{id}"), &token).await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.json);
    assert_eq!(one.json["data"], json!(12));
    assert_eq!(
        requests(&service).await,
        1,
        "reads within ttlSec are answered from the cache"
    );

    answering(&service, 200, json!({"count": 13})).await;
    clock.advance(Duration::from_secs(TTL - 30));
    let third = list(&harness, &token).await;
    assert_eq!(third[0]["data"], json!(13), "{}", third[0]);
    assert_eq!(third[0]["ageSec"], json!(0));
    assert_eq!(
        requests(&service).await,
        1,
        "once ttlSec passed, one new call"
    );
}

#[tokio::test]
async fn the_cache_is_kept_in_the_database_and_a_fresh_read_makes_no_call() {
    let service = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/count"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"count": 5})))
        .expect(1)
        .mount(&service)
        .await;
    let (harness, clock) = clocked();
    let (tenant, token) = harness.tenant("Acme").await;
    let id = create(
        &harness,
        &token,
        counting(&format!("{}/count", service.uri())),
    )
    .await;
    for _ in 0..3 {
        let reply = harness.get(&format!("/api/widgets/{id}"), &token).await;
        assert_eq!(reply.json["data"], json!(5), "{}", reply.json);
        clock.advance(Duration::from_secs(10));
    }
    // The cache is in the database: another store on the same file (another process)
    // reads the same data.
    let other = fronta_store_sqlite::SqliteStore::open(fronta_store_sqlite::SqliteConfig::new(
        harness.dir.path().join("server-test.db"),
    ))
    .expect("a second store on the file");
    let view = fronta_automation::widget::WidgetStore::widget_get(
        &other,
        tenant,
        id.parse().expect("a widget id"),
    )
    .await
    .expect("read")
    .expect("found");
    assert_eq!(view.cache.data, Some(json!(5)));
    service.verify().await;
}

#[tokio::test]
async fn a_forced_refresh_calls_out_while_the_cache_is_fresh() {
    let service = MockServer::start().await;
    answering(&service, 200, json!({"count": 1})).await;
    let (harness, clock) = clocked();
    let (_, token) = harness.tenant("Acme").await;
    let id = create(
        &harness,
        &token,
        counting(&format!("{}/count", service.uri())),
    )
    .await;
    let _ = list(&harness, &token).await;
    clock.advance(Duration::from_secs(5));
    answering(&service, 200, json!({"count": 2})).await;

    let reply = refresh(&harness, &token, &id).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(reply.json["data"], json!(2));
    assert_eq!(reply.json["ageSec"], json!(0), "the age starts again");
    assert_eq!(requests(&service).await, 1, "the refresh called");
    let after = list(&harness, &token).await;
    assert_eq!(after[0]["data"], json!(2));
    assert_eq!(requests(&service).await, 1, "and the list reads its cache");
}

#[tokio::test]
async fn a_failed_call_keeps_the_old_data_and_reports_the_error_and_age() {
    let service = MockServer::start().await;
    answering(&service, 200, json!({"count": 7})).await;
    let (harness, clock) = clocked();
    let (_, token) = harness.tenant("Acme").await;
    let id = create(
        &harness,
        &token,
        counting(&format!("{}/count", service.uri())),
    )
    .await;
    let _ = list(&harness, &token).await;

    answering(&service, 500, json!({"oops": true})).await;
    clock.advance(Duration::from_secs(TTL));
    let failed = harness.get(&format!("/api/widgets/{id}"), &token).await;
    assert_eq!(failed.status, StatusCode::OK, "{}", failed.json);
    assert_eq!(failed.json["data"], json!(7), "the old data stays");
    assert_eq!(failed.json["ageSec"], json!(TTL), "its age is honest");
    assert_eq!(failed.json["stale"], json!(true));
    let error = failed.json["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("500"),
        "the error says what happened: {error}"
    );
    assert!(failed.json["errorAt"].is_string());
    assert_eq!(requests(&service).await, 1);

    // Readers do not hammer a failing service: the next call is after ttlSec again.
    clock.advance(Duration::from_secs(10));
    let again = list(&harness, &token).await;
    assert_eq!(again[0]["error"], failed.json["error"]);
    assert_eq!(again[0]["ageSec"], json!(TTL + 10));
    assert_eq!(requests(&service).await, 1, "no call before ttlSec");

    // A path that finds nothing is an error too, and the data is kept.
    answering(&service, 200, json!({"total": 9})).await;
    let reply = refresh(&harness, &token, &id).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(reply.json["data"], json!(7));
    let error = reply.json["error"].as_str().unwrap_or_default();
    assert!(error.contains("\"body.count\" finds nothing"), "{error}");

    // A success clears the error.
    answering(&service, 200, json!({"count": 8})).await;
    let reply = refresh(&harness, &token, &id).await;
    assert_eq!(reply.json["data"], json!(8));
    assert_eq!(reply.json["error"], Value::Null);
}

#[tokio::test]
async fn an_open_breaker_makes_a_forced_refresh_answer_503_and_no_call() {
    let service = MockServer::start().await;
    answering(&service, 503, json!({})).await;
    let clock = ManualClock::new(chrono::Utc::now());
    let limits = LimitsConfig {
        rules: LimitRules {
            breaker_failures: 1,
            cooldown: Duration::from_secs(120),
            ..LimitRules::default()
        },
        ..LimitsConfig::default()
    };
    let harness = Harness::with_limits(limits, clock.clone());
    let (_, token) = harness.tenant("Acme").await;
    let id = create(
        &harness,
        &token,
        counting(&format!("{}/count", service.uri())),
    )
    .await;
    let first = list(&harness, &token).await;
    assert!(
        first[0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("503"),
        "{}",
        first[0]
    );
    assert_eq!(requests(&service).await, 1, "one failure opens the breaker");

    let reply = refresh(&harness, &token, &id).await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.json
    );
    assert_eq!(reply.code(), "service_waiting");
    assert_eq!(
        reply.headers["retry-after"].to_str().unwrap_or_default(),
        reply.json["error"]["retryAfter"].to_string()
    );
    assert!(
        reply.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("circuit open"),
        "{}",
        reply.json
    );
    assert_eq!(requests(&service).await, 1, "the call was not made");

    // After the cool-down the breaker lets one probe through, and it closes.
    answering(&service, 200, json!({"count": 4})).await;
    clock.advance(Duration::from_secs(120));
    let reply = refresh(&harness, &token, &id).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(reply.json["data"], json!(4));
}

#[tokio::test]
async fn secrets_reach_only_the_call_and_never_an_answer_or_the_database() {
    const VALUE: &str = "billing-s3cr3t-value";
    let service = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/count"))
        .and(header("authorization", format!("Bearer {VALUE}").as_str()))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"count": 3, "echo": format!("you sent {VALUE}")})),
        )
        .mount(&service)
        .await;
    let (harness, _clock) = clocked();
    let (_, token) = harness.tenant("Acme").await;
    let put = harness
        .call(
            Method::PUT,
            "/api/secrets/billing",
            Some(&token),
            Some(json!({"value": VALUE})),
        )
        .await;
    assert_eq!(put.status, StatusCode::NO_CONTENT, "{}", put.json);
    let id = create(
        &harness,
        &token,
        json!({"name": "Invoices", "op": "http/request",
               "input": {"url": format!("{}/count", service.uri()),
                         "headers": {"Authorization": "Bearer {{secrets.billing}}"}},
               "path": "body", "ttlSec": TTL}),
    )
    .await;
    let items = list(&harness, &token).await;
    assert_eq!(
        items[0]["data"]["count"],
        json!(3),
        "the secret opened the door"
    );
    assert_eq!(
        items[0]["data"]["echo"],
        json!("you sent [secret billing]"),
        "an echoed secret is scrubbed"
    );
    let mut answers = vec![
        harness.get("/api/widgets", &token).await,
        harness.get(&format!("/api/widgets/{id}"), &token).await,
        refresh(&harness, &token, &id).await,
    ];
    // A failure echoing the secret is scrubbed too.
    service.reset().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(404).set_body_string(format!("no {VALUE}")))
        .mount(&service)
        .await;
    answers.push(refresh(&harness, &token, &id).await);
    for answer in &answers {
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.json);
        let text = String::from_utf8_lossy(&answer.bytes);
        assert!(!text.contains(VALUE), "a secret in an answer: {text}");
        assert!(
            text.contains("{{secrets.billing}}"),
            "the reference is shown"
        );
    }
    // Nothing the store wrote holds the value (the database file and its WAL).
    for entry in std::fs::read_dir(harness.dir.path()).expect("the database dir") {
        let bytes = std::fs::read(entry.expect("an entry").path()).expect("a file");
        let found = bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes());
        assert!(!found, "the secret's value is in the database files");
    }
}

#[tokio::test]
async fn bad_definitions_answer_400_naming_the_field() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let good = counting("https://billing.test/count");
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"ttlSec": 1}),
            "ttlSec: ttlSec must be between 10 and 86400 seconds, found 1",
        ),
        (
            json!({"ttlSec": "60"}),
            "ttlSec: must be a whole number of seconds",
        ),
        (
            json!({"op": "ticket/close"}),
            "op: a widget calls a connector",
        ),
        (json!({"op": "nope"}), "op: unknown op \"nope\""),
        (
            json!({"input": {"url": "https://x.test/{{ticket.id}}"}}),
            "input.url: {{ticket.id}} names nothing: a widget's input may use only {{secrets.<name>}}",
        ),
        (json!({"input": {}}), "input.url: missing input \"url\""),
        (
            json!({"input": {"url": "https://x.test", "method": "FETCH"}}),
            "input.method: unknown HTTP method",
        ),
        (
            json!({"path": "body..count"}),
            "path: path \"body..count\": the path has an empty segment",
        ),
        (json!({"name": ""}), "name: a widget needs a name"),
        (json!({"colour": "red"}), "colour: unknown field"),
        (
            json!({"service": "has space"}),
            "service: service \"has space\"",
        ),
    ];
    for (change, expected) in cases {
        let mut body = good.clone();
        if let (Value::Object(body), Value::Object(change)) = (&mut body, change) {
            body.extend(change);
        }
        let reply = harness.post("/api/widgets", &token, body.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{body}: {}",
            reply.json
        );
        assert_eq!(reply.code(), "invalid_widget");
        let message = reply.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{body}: {message}");
    }
    let missing = harness
        .post("/api/widgets", &token, json!({"name": "x"}))
        .await;
    let message = missing.json["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("op: required") && message.contains("ttlSec: required"),
        "{message}"
    );

    let id = create(&harness, &token, good).await;
    let patch = harness
        .call(
            Method::PATCH,
            &format!("/api/widgets/{id}"),
            Some(&token),
            Some(json!({"ttlSec": 999_999})),
        )
        .await;
    assert_eq!(patch.status, StatusCode::BAD_REQUEST, "{}", patch.json);
    assert!(
        patch.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("ttlSec:")
    );
    for bad in ["not-a-uuid", "00000000-0000-0000-0000-000000000000"] {
        let reply = harness.get(&format!("/api/widgets/{bad}"), &token).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{bad}");
    }
}

#[tokio::test]
async fn the_operators_limits_bound_ttl_and_count() {
    let config = fronta_server::ServerConfig {
        widgets: WidgetLimits {
            min_ttl: Duration::from_secs(120),
            max_per_tenant: 1,
            ..WidgetLimits::default()
        },
        ..test_config()
    };
    let harness = Harness::with_config(config);
    let (_, token) = harness.tenant("Acme").await;
    let short = harness
        .post(
            "/api/widgets",
            &token,
            counting("https://billing.test/count"),
        )
        .await;
    assert_eq!(short.status, StatusCode::BAD_REQUEST, "{}", short.json);
    assert!(
        short.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("between 120 and")
    );
    let mut fine = counting("https://billing.test/count");
    fine["ttlSec"] = json!(120);
    create(&harness, &token, fine.clone()).await;
    let second = harness.post("/api/widgets", &token, fine).await;
    assert_eq!(second.status, StatusCode::CONFLICT, "{}", second.json);
    assert_eq!(second.code(), "too_many_widgets");
}

#[tokio::test]
async fn changing_the_call_empties_the_cache_and_a_rename_keeps_it() {
    let service = MockServer::start().await;
    answering(&service, 200, json!({"count": 12, "total": 99})).await;
    let (harness, _clock) = clocked();
    let (_, token) = harness.tenant("Acme").await;
    let id = create(
        &harness,
        &token,
        counting(&format!("{}/count", service.uri())),
    )
    .await;
    let _ = list(&harness, &token).await;
    let patch = |body: Value| {
        let harness = &harness;
        let token = token.clone();
        let id = id.clone();
        async move {
            let reply = harness
                .call(
                    Method::PATCH,
                    &format!("/api/widgets/{id}"),
                    Some(&token),
                    Some(body),
                )
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
            reply
        }
    };
    let renamed = patch(json!({"name": "Invoices open", "ttlSec": 120})).await;
    assert_eq!(renamed.json["name"], json!("Invoices open"));
    assert_eq!(renamed.json["ttlSec"], json!(120));
    assert_eq!(renamed.json["data"], json!(12), "a rename keeps the data");
    let moved = patch(json!({"path": "body.total"})).await;
    assert_eq!(moved.json["data"], Value::Null, "a new call starts empty");
    let items = list(&harness, &token).await;
    assert_eq!(items[0]["data"], json!(99));
    assert_eq!(requests(&service).await, 2);
    let removed = patch(json!({"service": null})).await;
    assert_eq!(removed.json["service"], Value::Null);

    let deleted = harness
        .call(
            Method::DELETE,
            &format!("/api/widgets/{id}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert!(list(&harness, &token).await.is_empty());
}

#[tokio::test]
async fn concurrent_readers_of_a_stale_widget_make_one_call() {
    let service = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/count"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"count": 1}))
                .set_delay(Duration::from_millis(300)),
        )
        .mount(&service)
        .await;
    let (harness, _clock) = clocked();
    let (_, token) = harness.tenant("Acme").await;
    let id = create(
        &harness,
        &token,
        counting(&format!("{}/count", service.uri())),
    )
    .await;
    let path = format!("/api/widgets/{id}");
    let (a, b, c) = tokio::join!(
        harness.get(&path, &token),
        harness.get(&path, &token),
        list(&harness, &token)
    );
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(b.status, StatusCode::OK);
    assert_eq!(c.len(), 1);
    // Whatever the order, one reader claimed the widget: the others found it busy
    // (answered `refreshing`) or fresh.
    assert_eq!(requests(&service).await, 1, "one call for three readers");
}
