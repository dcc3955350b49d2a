//! `GET /metrics` through the router: every line of the exposition is a comment of the
//! Prometheus text format or a `name{labels} value` sample with a number, every sample
//! belongs to a typed family, counters end in `_total`, and the series move after a
//! webhook (its count by status code, its latency histogram, the queued run) and after
//! an incident opens. Sums over the runs table are gauges: they go down after a manual
//! retry.

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

/// The type of each family (`# TYPE name kind`), by name.
fn types(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect()
}

async fn scrape_text(harness: &Harness) -> String {
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
    String::from_utf8(reply.bytes.to_vec()).expect("UTF-8")
}

async fn scrape(harness: &Harness) -> HashMap<String, f64> {
    parse(&scrape_text(harness).await)
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
        drained.get("fronta_worker_handed_off_total"),
        Some(&0.0),
        "the hand-off counter is told, and the drain claimed its run: the webhook's \
         enqueue was not this worker's own"
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

#[tokio::test]
async fn every_sample_has_a_typed_family_and_every_counter_ends_in_total() {
    let harness = Harness::new();
    let (_, acme) = harness.tenant("Acme").await;
    let reply = harness.post("/api/ticket-types", &acme, order_type()).await;
    assert_eq!(reply.status, StatusCode::CREATED, "type: {}", reply.json);
    let path = webhook_path(&harness.automation(&acme, orders_automation()).await);
    let reply = harness.webhook(&path, &order_body("5101"), &[]).await;
    assert_eq!(
        reply.status,
        StatusCode::ACCEPTED,
        "webhook: {}",
        reply.json
    );
    harness.drain().await;
    let text = scrape_text(&harness).await;
    let types = types(&text);
    for (name, kind) in &types {
        assert_eq!(
            kind == "counter",
            name.ends_with("_total"),
            "a family is a counter exactly when its name ends in _total: {name} is {kind}"
        );
    }
    for series in parse(&text).keys() {
        let name = &series[..series.find('{').unwrap_or(series.len())];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|family| types.get(*family).map(String::as_str) == Some("histogram"))
            })
            .unwrap_or(name);
        assert!(
            types.contains_key(family),
            "the sample {series} belongs to a typed family"
        );
    }
    for (name, kind) in [
        ("fronta_runs", "gauge"),
        ("fronta_run_attempts", "gauge"),
        ("fronta_run_reclaims", "gauge"),
        ("fronta_run_parks", "gauge"),
        ("fronta_webhook_requests_total", "counter"),
        ("fronta_webhook_request_duration_seconds", "histogram"),
        ("fronta_worker_handed_off_total", "counter"),
        ("fronta_worker_claim_duration_seconds", "histogram"),
    ] {
        assert_eq!(
            types.get(name).map(String::as_str),
            Some(kind),
            "{name} is a {kind}: {text}"
        );
    }
    for gone in [
        "fronta_run_attempts_total",
        "fronta_run_reclaims_total",
        "fronta_run_parks_total",
    ] {
        assert!(
            !types.contains_key(gone),
            "{gone} was a counter that could go down; its sum is a gauge now"
        );
    }
}

#[tokio::test]
async fn run_counter_sums_are_gauges_that_go_down_after_a_manual_retry() {
    use fronta_engine::store::{ClaimParams, Finish, FinishAction, RetryReply};
    use fronta_engine::{Dispatcher, EnqueueRequest, RunStore};

    let harness = Harness::new();
    let runs: std::sync::Arc<dyn RunStore> = std::sync::Arc::new(harness.store.clone());
    let dispatcher = Dispatcher::new(runs.clone(), ["probe"]);
    let id = dispatcher
        .enqueue(EnqueueRequest::new("probe", serde_json::json!({}), 3))
        .await
        .expect("an enqueue")
        .id();
    let params = ClaimParams {
        limit: 1,
        default_lease: std::time::Duration::from_secs(60),
        leases: HashMap::new(),
        max_reclaims: 3,
        holder: None,
    };
    let finish = |owner, action| Finish { id, owner, action };
    for action in [
        FinishAction::Retry {
            delay: std::time::Duration::ZERO,
            error: "first try failed".into(),
        },
        FinishAction::Fail {
            error: "second try failed".into(),
        },
    ] {
        let batch = runs.run_claim(params.clone()).await.expect("a claim");
        let owner = batch
            .claimed
            .first()
            .unwrap_or_else(|| panic!("the run is claimed: {batch:?}"))
            .owner;
        runs.run_finish_many(vec![finish(owner, action)])
            .await
            .expect("a finish");
    }
    assert_eq!(
        sample(&scrape(&harness).await, "fronta_run_attempts"),
        1.0,
        "one retry spent"
    );
    assert_eq!(
        runs.run_retry(id).await.expect("a manual retry"),
        RetryReply::Requeued,
        "the failed run is requeued"
    );
    let text = scrape_text(&harness).await;
    assert_eq!(
        sample(&parse(&text), "fronta_run_attempts"),
        0.0,
        "the manual retry set the run's count back: the sum went down"
    );
    assert_eq!(
        types(&text).get("fronta_run_attempts").map(String::as_str),
        Some("gauge"),
        "so it is a gauge, never a counter"
    );
}
