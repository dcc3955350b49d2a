//! `GET /metrics` through the router: every line of the exposition is a comment of the
//! Prometheus text format or a `name{labels} value` sample with a number, and the
//! series move after a webhook (its count by status code, its latency histogram, the
//! queued run) and after an incident opens.

mod support;

use std::collections::HashMap;

use axum::http::{Method, StatusCode, header};
use support::{Harness, order_body, order_type, orders_automation, webhook_path};

/// The samples of an exposition, by `name{labels}`; panics on a malformed line.
fn parse(text: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.split_whitespace();
            let keyword = words.next().unwrap_or_default();
            assert!(
                matches!(keyword, "HELP" | "TYPE"),
                "a comment is HELP or TYPE: {line:?}"
            );
            assert!(
                words.next().is_some(),
                "the comment names a metric: {line:?}"
            );
            if keyword == "TYPE" {
                let kind = words.next().unwrap_or_default();
                assert!(
                    matches!(kind, "counter" | "gauge" | "histogram"),
                    "a known type: {line:?}"
                );
            }
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("a sample is `series value`: {line:?}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "a metric name: {line:?}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "labels are closed: {line:?}");
            for label in series[name_end + 1..series.len() - 1].split(',') {
                let (key, quoted) = label
                    .split_once('=')
                    .unwrap_or_else(|| panic!("a label is key=\"value\": {line:?}"));
                assert!(
                    !key.is_empty() && quoted.starts_with('"') && quoted.ends_with('"'),
                    "a quoted label value: {line:?}"
                );
            }
        }
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("a numeric value: {line:?}"));
        samples.insert(series.to_owned(), value);
    }
    samples
}

async fn scrape(harness: &Harness) -> HashMap<String, f64> {
    let reply = harness.call(Method::GET, "/metrics", None, None).await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "metrics answer without a token"
    );
    let content_type = reply
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "the Prometheus text format: {content_type}"
    );
    parse(std::str::from_utf8(&reply.bytes).expect("UTF-8"))
}

fn sample(samples: &HashMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn the_exposition_parses_and_moves_after_a_webhook() {
    let harness = Harness::new();
    let before = scrape(&harness).await;
    assert_eq!(
        sample(&before, "fronta_runs{status=\"queued\"}"),
        0.0,
        "nothing queued yet"
    );
    assert_eq!(
        sample(&before, "fronta_webhook_request_duration_seconds_count"),
        0.0,
        "no webhook yet"
    );
    assert!(
        before.contains_key("fronta_incidents_open"),
        "open incidents are always told: {before:?}"
    );

    let (_, acme) = harness.tenant("Acme").await;
    let reply = harness.post("/api/ticket-types", &acme, order_type()).await;
    assert_eq!(
        reply.status,
        StatusCode::CREATED,
        "order type: {}",
        reply.json
    );
    let automation = harness.automation(&acme, orders_automation()).await;
    let path = webhook_path(&automation);
    let reply = harness.webhook(&path, &order_body("5001"), &[]).await;
    assert_eq!(
        reply.status,
        StatusCode::ACCEPTED,
        "webhook: {}",
        reply.json
    );
    let reply = harness.webhook(&path, "{}", &[]).await;
    assert_eq!(
        reply.status,
        StatusCode::BAD_REQUEST,
        "a body without the contract"
    );

    let after = scrape(&harness).await;
    assert_eq!(
        sample(&after, "fronta_webhook_requests_total{code=\"202\"}"),
        1.0,
        "one 202: {after:?}"
    );
    assert_eq!(
        sample(&after, "fronta_webhook_requests_total{code=\"400\"}"),
        1.0,
        "one 400: {after:?}"
    );
    assert_eq!(
        sample(&after, "fronta_webhook_request_duration_seconds_count"),
        2.0,
        "two timed requests"
    );
    assert_eq!(
        sample(
            &after,
            "fronta_webhook_request_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        2.0,
        "the +Inf bucket holds every request"
    );
    assert!(
        sample(&after, "fronta_webhook_request_duration_seconds_sum") > 0.0,
        "latencies add up"
    );
    assert_eq!(
        sample(&after, "fronta_runs{status=\"queued\"}"),
        1.0,
        "the webhook's run is queued"
    );

    harness.drain().await;
    let drained = scrape(&harness).await;
    assert_eq!(
        sample(&drained, "fronta_runs{status=\"completed\"}"),
        1.0,
        "the run completed: {drained:?}"
    );
    assert_eq!(
        sample(&drained, "fronta_runs{status=\"queued\"}"),
        0.0,
        "nothing left queued"
    );
    assert_eq!(
        sample(
            &drained,
            "fronta_runs_by_kind{kind=\"automation\",status=\"completed\"}"
        ),
        1.0,
        "the run counted under its kind: {drained:?}"
    );
    assert_eq!(
        sample(&drained, "fronta_queue_depth"),
        0.0,
        "the queue is empty"
    );
    assert!(
        !after.contains_key("fronta_worker_claim_duration_seconds_count"),
        "no worker in this process yet, so no worker series: {after:?}"
    );
    for histogram in [
        "fronta_worker_claim_duration_seconds",
        "fronta_worker_complete_duration_seconds",
        "fronta_run_start_delay_seconds",
    ] {
        let count = sample(&drained, &format!("{histogram}_count"));
        assert!(count >= 1.0, "{histogram} measured the drain: {drained:?}");
        assert_eq!(
            sample(&drained, &format!("{histogram}_bucket{{le=\"+Inf\"}}")),
            count,
            "{histogram}: the +Inf bucket holds every observation"
        );
    }
    assert_eq!(
        sample(&drained, "fronta_worker_handed_off_total"),
        0.0,
        "the drain claimed its run: the webhook's enqueue was not this worker's own"
    );
    assert_eq!(
        sample(&drained, "fronta_run_start_delay_seconds_count"),
        1.0,
        "one run started"
    );
}

#[tokio::test]
async fn the_store_s_own_counters_are_read_at_each_scrape() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use fronta_server::metrics::{StoreCounter, StoreCounters};

    let harness = Harness::new();
    let before = scrape(&harness).await;
    assert!(
        !before.contains_key("fronta_pg_enqueue_groups_total"),
        "a store that offers no counters shows none"
    );
    let groups = Arc::new(AtomicU64::new(3));
    let read = groups.clone();
    harness.app.observe_store(StoreCounters::new(move || {
        vec![StoreCounter {
            name: "fronta_pg_enqueue_groups_total",
            help: "Enqueue commits.",
            value: read.load(Ordering::Relaxed),
        }]
    }));
    assert_eq!(
        sample(&scrape(&harness).await, "fronta_pg_enqueue_groups_total"),
        3.0
    );
    groups.store(5, Ordering::Relaxed);
    assert_eq!(
        sample(&scrape(&harness).await, "fronta_pg_enqueue_groups_total"),
        5.0,
        "read again at the next scrape"
    );
}
