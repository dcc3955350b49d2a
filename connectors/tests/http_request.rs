//! `http/request` against a real local HTTP server (wiremock on 127.0.0.1, allow-listed
//! explicitly): the request built from the input, the outputs, and every row of the
//! classification table of DESIGN.md §4.5 — what is retried, what ends the run, and
//! the other side's Retry-After.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use fronta_automation::Op;
use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::retry::Cause;
use fronta_automation::secrets::Revealed;
use fronta_connectors::ssrf::NameLookup;
use fronta_connectors::{AddressPolicy, AllowList, HttpConnector, HttpLimits};
use fronta_desk::TenantId;
use serde_json::{Value, json};
use wiremock::matchers::{body_json, header, header_exists, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A resolver that never answers: connecting can only time out (before sending).
struct NeverAnswers;

#[async_trait]
impl NameLookup for NeverAnswers {
    async fn lookup(&self, _host: &str) -> std::io::Result<Vec<IpAddr>> {
        std::future::pending().await
    }
}

fn limits() -> HttpLimits {
    HttpLimits {
        max_response_bytes: 1024,
        connect_timeout: Duration::from_millis(300),
        max_redirects: 2,
        ..HttpLimits::default()
    }
}

fn connector() -> HttpConnector {
    HttpConnector::new(
        AddressPolicy::new(AllowList::parse("127.0.0.1").expect("allow")),
        limits(),
    )
    .expect("a connector")
}

async fn call_with(
    connector: &HttpConnector,
    input: Value,
    secrets: &Revealed,
) -> Result<ConnectorReply, ConnectorFailure> {
    let Value::Object(input) = input else {
        panic!("an object")
    };
    connector
        .call(ConnectorCall {
            op: &Op::HttpRequest,
            tenant: TenantId::new(),
            service: Some("shop"),
            input,
            secrets,
            run_id: "run",
            step_name: "call",
        })
        .await
}

async fn call(input: Value) -> Result<ConnectorReply, ConnectorFailure> {
    call_with(&connector(), input, &Revealed::default()).await
}

async fn failure(input: Value) -> ConnectorFailure {
    match call(input).await {
        Ok(reply) => panic!("expected a failure, got {reply:?}"),
        Err(failure) => failure,
    }
}

#[tokio::test]
async fn the_request_is_built_from_the_input_and_the_answer_published() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/orders"))
        .and(query_param("page", "2"))
        .and(query_param("tag", "a"))
        .and(header("x-api-key", "k-1"))
        .and(header("content-type", "application/json"))
        .and(body_json(json!({"id": 5001, "lines": ["A-1"]})))
        .respond_with(
            ResponseTemplate::new(201)
                .insert_header("x-request-id", "r-9")
                .set_body_json(json!({"created": true, "id": "o-1"})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let reply = call(json!({
        "method": "post", "url": format!("{}/orders", server.uri()),
        "query": {"page": 2, "tag": ["a"]}, "headers": {"X-Api-Key": "k-1"},
        "body": {"id": 5001, "lines": ["A-1"]}, "timeoutSec": 5
    }))
    .await
    .expect("201 is a success");
    assert_eq!(reply.outputs["status"], json!(201), "the status");
    assert_eq!(
        reply.outputs["body"],
        json!({"created": true, "id": "o-1"}),
        "JSON is parsed"
    );
    assert_eq!(
        reply.outputs["headers"]["x-request-id"],
        json!("r-9"),
        "headers by lower-case name"
    );
    assert!(
        reply.message.contains("201"),
        "the step log line: {}",
        reply.message
    );
}

#[tokio::test]
async fn a_text_answer_is_published_as_text() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("plain words"))
        .mount(&server)
        .await;
    let reply = call(json!({"url": server.uri()})).await.expect("200");
    assert_eq!(
        reply.outputs["body"],
        json!("plain words"),
        "text stays text"
    );
}

async fn answering(status: u16, retry_after: Option<String>) -> ConnectorFailure {
    let server = MockServer::start().await;
    let mut response = ResponseTemplate::new(status).set_body_string("the other side's words");
    if let Some(after) = retry_after {
        response = response.insert_header("retry-after", after.as_str());
    }
    Mock::given(method("GET"))
        .respond_with(response)
        .mount(&server)
        .await;
    failure(json!({"url": server.uri()})).await
}

#[tokio::test]
async fn server_errors_are_retried() {
    for status in [500, 502, 503, 504] {
        let failure = answering(status, None).await;
        assert_eq!(failure.cause, Cause::HttpStatus(status), "{status}");
        assert!(failure.cause.retryable(), "{status} is retried");
        assert!(
            failure.message.contains("the other side's words"),
            "the body's start is in the message"
        );
    }
}

#[tokio::test]
async fn retry_after_in_seconds_is_honoured() {
    let failure = answering(503, Some("7".into())).await;
    assert!(failure.cause.retryable(), "503 is retried");
    assert_eq!(
        failure.retry_after,
        Some(Duration::from_secs(7)),
        "Retry-After: 7"
    );
    assert_eq!(
        failure.into_step_error().retry_after,
        Some(Duration::from_secs(7)),
        "the step waits that long"
    );
}

#[tokio::test]
async fn too_many_requests_with_an_http_date_is_retried_after_that_date() {
    let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
    let failure = answering(429, Some(at)).await;
    assert_eq!(failure.cause, Cause::HttpStatus(429), "429");
    assert!(failure.cause.retryable(), "429 is retried");
    let after = failure.retry_after.expect("the date is read");
    assert!(
        after > Duration::from_secs(60) && after <= Duration::from_secs(120),
        "about two minutes from now, got {after:?}"
    );
}

#[tokio::test]
async fn a_retry_after_longer_than_the_limit_is_cut() {
    let failure = answering(429, Some("999999".into())).await;
    assert_eq!(
        failure.retry_after,
        Some(limits().max_retry_after),
        "cut to max_retry_after"
    );
}

#[tokio::test]
async fn client_errors_end_the_run() {
    for status in [400, 401, 403, 404, 409, 422] {
        let failure = answering(status, Some("5".into())).await;
        assert_eq!(failure.cause, Cause::HttpStatus(status), "{status}");
        assert!(!failure.cause.retryable(), "{status} is not retried");
        assert_eq!(
            failure.into_step_error().retry_after,
            None,
            "{status}: a final error waits for nothing"
        );
    }
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    let failure = failure(json!({"url": format!("http://127.0.0.1:{port}/")})).await;
    assert_eq!(
        failure.cause,
        Cause::Connection,
        "nothing listens: {}",
        failure.message
    );
    assert!(failure.cause.retryable(), "a connection error is retried");
}

#[tokio::test]
async fn a_timeout_while_connecting_is_retried() {
    let connector = HttpConnector::with_lookup(
        AddressPolicy::new(AllowList::parse("slow.test").expect("allow")),
        limits(),
        Arc::new(NeverAnswers),
    )
    .expect("a connector");
    let failure = call_with(
        &connector,
        json!({"url": "http://slow.test/"}),
        &Revealed::default(),
    )
    .await
    .expect_err("the lookup never answers");
    assert_eq!(
        failure.cause,
        Cause::TimeoutBeforeSend,
        "{}",
        failure.message
    );
    assert!(failure.cause.retryable(), "nothing was sent: retried");
    assert!(
        failure.message.contains("not sent"),
        "the message says so: {}",
        failure.message
    );
}

#[tokio::test]
async fn a_timeout_after_sending_ends_the_run_and_says_why() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let failure =
        failure(json!({"method": "POST", "url": server.uri(), "body": "x", "timeoutSec": 0.3}))
            .await;
    assert_eq!(
        failure.cause,
        Cause::TimeoutAfterSend,
        "{}",
        failure.message
    );
    assert!(
        !failure.cause.retryable(),
        "it may have happened: not retried"
    );
    assert!(
        failure.message.contains("may have reached"),
        "the message explains: {}",
        failure.message
    );
}

#[tokio::test]
async fn an_answer_over_the_size_limit_ends_the_run() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("x".repeat(4096)))
        .mount(&server)
        .await;
    let failure = failure(json!({"url": server.uri()})).await;
    assert_eq!(failure.cause, Cause::BadAnswer, "{}", failure.message);
    assert!(!failure.cause.retryable(), "too large is final");
    assert!(
        failure.message.contains("1024 bytes"),
        "the limit is named: {}",
        failure.message
    );
}

#[tokio::test]
async fn too_many_redirects_end_the_run() {
    let server = MockServer::start().await;
    Mock::given(path("/loop"))
        .respond_with(ResponseTemplate::new(302).insert_header("location", "/loop"))
        .mount(&server)
        .await;
    let failure = failure(json!({"url": format!("{}/loop", server.uri())})).await;
    assert_eq!(failure.cause, Cause::BadAnswer, "{}", failure.message);
    assert!(
        failure.message.contains("more than 2 redirects"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn see_other_after_a_post_continues_as_a_get_without_the_body() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/create"))
        .respond_with(ResponseTemplate::new(303).insert_header("location", "/result"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/result"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"done": true})))
        .expect(1)
        .mount(&server)
        .await;
    let reply = call(
        json!({"method": "POST", "url": format!("{}/create", server.uri()), "body": {"a": 1}}),
    )
    .await
    .expect("followed as GET");
    assert_eq!(
        reply.outputs["body"],
        json!({"done": true}),
        "the GET's answer"
    );
}

#[tokio::test]
async fn credentials_and_secrets_do_not_follow_a_redirect_to_another_origin() {
    let first = MockServer::start().await;
    let second = MockServer::start().await;
    Mock::given(path("/start"))
        .respond_with(
            ResponseTemplate::new(307)
                .insert_header("location", format!("{}/landed", second.uri()).as_str()),
        )
        .mount(&first)
        .await;
    for leaked in ["authorization", "x-api-key"] {
        Mock::given(header_exists(leaked))
            .respond_with(ResponseTemplate::new(418).set_body_string(format!("{leaked} leaked")))
            .with_priority(1)
            .mount(&second)
            .await;
    }
    Mock::given(path("/landed"))
        .and(header("x-trace", "t-1"))
        .respond_with(ResponseTemplate::new(200).set_body_string("clean"))
        .mount(&second)
        .await;
    let secrets = Revealed::new(
        [("key".to_string(), "k-secret".to_string())]
            .into_iter()
            .collect(),
    );
    let reply = call_with(
        &connector(),
        json!({"url": format!("{}/start", first.uri()),
               "headers": {"Authorization": "Bearer t", "X-Api-Key": "k-secret", "X-Trace": "t-1"}}),
        &secrets,
    )
    .await
    .expect("the redirect is followed");
    assert_eq!(
        reply.outputs["body"],
        json!("clean"),
        "no credential reached the other origin, other headers did"
    );
}

#[tokio::test]
async fn bad_input_ends_the_run_before_anything_is_sent() {
    let cases = [
        (
            json!({"url": "http://127.0.0.1:9/", "method": "BREW"}),
            "method",
        ),
        (json!({"url": "not a url"}), "not a URL"),
        (
            json!({"url": "http://127.0.0.1:9/", "headers": {"bad header": "x"}}),
            "header name",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "headers": {"Host": "evil.test"}}),
            "set by the client",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "headers": "x"}),
            "must be an object",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "query": {"a": {"b": 1}}}),
            "query",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "timeoutSec": 0}),
            "timeoutSec",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "timeoutSec": 100000}),
            "FRONTA_HTTP_MAX_TIMEOUT",
        ),
        (json!({"url": 5}), "url"),
    ];
    for (input, says) in cases {
        let failure = failure(input.clone()).await;
        assert_eq!(
            failure.cause,
            Cause::BadInput,
            "{input}: {}",
            failure.message
        );
        assert!(
            failure.message.contains(says),
            "{input}: the message names {says:?}: {}",
            failure.message
        );
    }
}
