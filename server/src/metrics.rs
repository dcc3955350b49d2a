//! `GET /metrics`: the Prometheus text format (version 0.0.4), encoded by the
//! `prometheus-client` crate.
//!
//! Series:
//! - from the run store's `run_stats` (every tenant), gauges: `fronta_runs{status}`,
//!   `fronta_runs_by_kind{kind,status}`, `fronta_queue_depth` (runs due and not yet
//!   started), and `fronta_run_attempts`, `fronta_run_reclaims`, `fronta_run_parks`:
//!   retries, reclaims and parks summed over the runs in the store now. Those sums are
//!   gauges, not counters: a manual retry (`run_retry`) sets a run's counts back to 0, so
//!   a sum can go down;
//! - `fronta_webhook_request_duration_seconds` (histogram) and
//!   `fronta_webhook_requests_total{code}` (counter): `POST /webhook/{token}` answered
//!   by this process, by status code;
//! - `fronta_incidents_open` (gauge): open incidents of every tenant;
//! - `fronta_service_breakers{state}` (gauge: per-(tenant, service) breakers by state,
//!   `closed`, `open`, `half_open`) and `fronta_service_calls_in_flight` (gauge: calls
//!   holding a slot), from `ServiceLimits::service_totals`: counts over every tenant,
//!   because a series per tenant and service would be unbounded (a tenant's own
//!   breakers are in `GET /api/services`);
//! - when this process runs a worker (`App::observe_worker`): the histograms
//!   `fronta_worker_claim_duration_seconds`, `fronta_worker_complete_duration_seconds`
//!   and `fronta_run_start_delay_seconds`, and the counters `fronta_worker_handed_off_total`
//!   (runs started by hand-off at enqueue, without a claim),
//!   `fronta_worker_handlers_timed_out_total` and `fronta_worker_handlers_stuck_total`
//!   (handlers stopped at their timeout; of those, ones blocking their thread), read from the worker's own
//!   lock-free `fronta_engine::metrics` at each scrape;
//! - counters of this process's store, when it offers some (`App::observe_store`): on
//!   Postgres `fronta_pg_enqueue_groups_total`, `fronta_pg_enqueue_grouped_calls_total`
//!   and `fronta_pg_enqueue_groups_split_total` (group enqueue: commits written, calls
//!   they answered, groups written again call by call).
//!
//! Every series typed `counter` only ever goes up while the process runs (they are this
//! process's own counts, reset on restart); everything read from the database is a gauge.
//!
//! Decisions: the route needs no token (scrapers rarely carry one, and it shows counts,
//! never tenant data); put it behind the proxy's access rules if that matters. A fresh
//! `Registry` is built at each scrape: the database series are read then (one
//! `run_stats`, one incident list, one service total per scrape) and handed to it as a
//! collector, beside the process's own long-lived metrics. Left out: per-tenant labels
//! (their cardinality is unbounded), REST route latencies, the OpenMetrics format (the
//! 0.0.4 text is what every scraper reads). Kinds are few (the registry's), so a kind
//! label is safe.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fronta_automation::service_limits::ServiceTotals;
use fronta_engine::RunStatus;
use fronta_engine::metrics::{HistogramSnapshot, LATENCY_BUCKETS, WorkerMetrics};
use fronta_engine::store::RunStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet, prometheus_text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::app::App;
use crate::error::ApiError;

/// One counter of the store: its series name (ending in `_total`, as a counter's must;
/// one without gets the suffix), its help line, its value now (never less than before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreCounter {
    pub name: &'static str,
    pub help: &'static str,
    pub value: u64,
}

/// Reads the store's counters at each scrape.
#[derive(Clone)]
pub struct StoreCounters(Arc<dyn Fn() -> Vec<StoreCounter> + Send + Sync>);

impl StoreCounters {
    pub fn new(read: impl Fn() -> Vec<StoreCounter> + Send + Sync + 'static) -> Self {
        Self(Arc::new(read))
    }

    /// The counters now.
    pub fn read(&self) -> Vec<StoreCounter> {
        (self.0)()
    }
}

impl std::fmt::Debug for StoreCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StoreCounters").finish_non_exhaustive()
    }
}

/// The label set of the webhook counter: the answer's status code.
type CodeLabel = [(&'static str, u16); 1];

/// What this process measured of webhook requests.
#[derive(Debug)]
pub struct WebhookMetrics {
    requests: Family<CodeLabel, Counter>,
    latency: Histogram,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Histogram::new(LATENCY_BUCKETS),
        }
    }
}

impl WebhookMetrics {
    pub fn record(&self, elapsed: Duration, code: u16) {
        self.latency.observe(elapsed.as_secs_f64());
        self.requests.get_or_create(&[("code", code)]).inc();
    }

    /// Hands this process's webhook series to `registry` (they share the counts).
    fn register(&self, registry: &mut Registry) {
        // `register` ends each help text with a full stop.
        registry.register(
            "fronta_webhook_requests",
            "Webhook requests (POST /webhook/{token}) answered by this process, by status code",
            self.requests.clone(),
        );
        registry.register(
            "fronta_webhook_request_duration_seconds",
            "Time this process took to answer a webhook request (POST /webhook/{token}), \
             whatever its status; a 202 is answered once its run is durably enqueued",
            self.latency.clone(),
        );
    }
}

/// The router's middleware: times `POST /webhook/{token}` and counts its status codes.
pub async fn measure_webhook(State(app): State<App>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST || !request.uri().path().starts_with("/webhook/") {
        return next.run(request).await;
    }
    let started = Instant::now();
    let response = next.run(request).await;
    app.inner()
        .webhook_metrics
        .record(started.elapsed(), response.status().as_u16());
    response
}

/// A gauge without labels.
fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> std::fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

/// A histogram of [`fronta_engine::metrics`] (cumulative buckets ending at `+Inf`), in
/// the per-bucket counts the encoder sums again.
fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    snapshot: &HistogramSnapshot,
) -> std::fmt::Result {
    let mut below = 0;
    let buckets: Vec<(f64, u64)> = snapshot
        .cumulative
        .iter()
        .map(|&(bound, cumulative)| {
            // The buckets and the count are read one after the other while workers
            // record: never let a bucket come out negative.
            let own = cumulative.saturating_sub(below);
            below = below.max(cumulative);
            (bound, own)
        })
        .collect();
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    metric.encode_histogram::<NoLabelSet>(snapshot.sum_seconds, snapshot.count, &buckets, None)
}

/// What the database says at this scrape: the runs, the open incidents, the services.
#[derive(Debug)]
struct Database {
    stats: RunStats,
    /// Seconds since the oldest finished run still kept ended (0: none is kept).
    oldest_finished_age: u64,
    incidents_open: u64,
    services: ServiceTotals,
}

impl Collector for Database {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let stats = &self.stats;
        let mut metric = encoder.encode_descriptor(
            "fronta_runs",
            "Runs in the store by status, every tenant.",
            None,
            MetricType::Gauge,
        )?;
        for status in RunStatus::ALL {
            let labels = [("status", status.as_str())];
            ConstGauge::new(stats.count(status)).encode(metric.encode_family(&labels)?)?;
        }
        let mut metric = encoder.encode_descriptor(
            "fronta_runs_by_kind",
            "Runs in the store by kind and status, every tenant.",
            None,
            MetricType::Gauge,
        )?;
        for (kind, counts) in &stats.by_kind {
            for status in RunStatus::ALL {
                let labels = [("kind", kind.as_str()), ("status", status.as_str())];
                ConstGauge::new(counts.count(status)).encode(metric.encode_family(&labels)?)?;
            }
        }
        gauge(
            &mut encoder,
            "fronta_queue_depth",
            "Runs due and waiting for a worker (status queued), every tenant.",
            stats.queued,
        )?;
        gauge(
            &mut encoder,
            "fronta_run_attempts",
            "Retries spent, summed over the runs in the store now; a manual retry sets a \
             run's count back to 0, so the sum can go down.",
            stats.attempts,
        )?;
        gauge(
            &mut encoder,
            "fronta_run_reclaims",
            "Reclaims (a lease expired and a claim took the run over), summed over the runs \
             in the store now; a manual retry sets a run's count back to 0.",
            stats.reclaims,
        )?;
        gauge(
            &mut encoder,
            "fronta_run_parks",
            "Parks (a worker had no handler for the run's kind and put it back for later), \
             summed over the runs in the store now; a manual retry sets a run's count back \
             to 0.",
            stats.parks,
        )?;
        gauge(
            &mut encoder,
            "fronta_oldest_finished_run_age_seconds",
            "Seconds since the oldest finished run still in the store ended (0: none is \
             kept); retention keeps it below the longest --retain-*.",
            self.oldest_finished_age,
        )?;
        gauge(
            &mut encoder,
            "fronta_incidents_open",
            "Open incidents, every tenant.",
            self.incidents_open,
        )?;
        let mut metric = encoder.encode_descriptor(
            "fronta_service_breakers",
            "Per-(tenant, service) circuit breakers by state, every tenant.",
            None,
            MetricType::Gauge,
        )?;
        for (state, count) in &self.services.breakers {
            let labels = [("state", state.as_str())];
            ConstGauge::new(*count).encode(metric.encode_family(&labels)?)?;
        }
        gauge(
            &mut encoder,
            "fronta_service_calls_in_flight",
            "Connector calls holding a per-(tenant, service) slot now, every tenant.",
            self.services.in_flight,
        )
    }
}

/// The worker of this process, read at the scrape.
#[derive(Debug)]
struct Worker(Arc<WorkerMetrics>);

impl Collector for Worker {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let worker = &self.0;
        histogram(
            &mut encoder,
            "fronta_worker_claim_duration_seconds",
            "Time of one claim round at the store, by this process's worker.",
            &worker.claim.snapshot(),
        )?;
        histogram(
            &mut encoder,
            "fronta_worker_complete_duration_seconds",
            "Time to write one batch of finished runs, by this process's worker.",
            &worker.complete.snapshot(),
        )?;
        histogram(
            &mut encoder,
            "fronta_run_start_delay_seconds",
            "From a run being due to its start in this process (reclaims left out).",
            &worker.start_delay.snapshot(),
        )?;
        // The encoder adds `_total` to a counter's name.
        let metric = encoder.encode_descriptor(
            "fronta_worker_handed_off",
            "Runs enqueued in this process while its worker waited idle and started by \
             hand-off, already claimed, without a claim round.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(worker.handed_off()).encode(metric)?;
        let metric = encoder.encode_descriptor(
            "fronta_worker_handlers_timed_out",
            "Handlers this process's worker stopped at their kind's timeout (the run went \
             to its retry ladder).",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(worker.timed_out()).encode(metric)?;
        let metric = encoder.encode_descriptor(
            "fronta_worker_handlers_stuck",
            "Of the timed-out handlers, those still running after their abort: they block \
             their thread.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(worker.stuck()).encode(metric)
    }
}

/// The store's own counters, read at the scrape.
#[derive(Debug)]
struct Store(Vec<StoreCounter>);

impl Collector for Store {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for counter in &self.0 {
            // The encoder adds `_total` to a counter's name: give it the rest.
            let name = counter.name.strip_suffix("_total").unwrap_or(counter.name);
            let metric =
                encoder.encode_descriptor(name, counter.help, None, MetricType::Counter)?;
            ConstCounter::new(counter.value).encode(metric)?;
        }
        Ok(())
    }
}

/// What retention deleted in this process.
#[derive(Debug)]
struct Pruned(std::sync::Arc<fronta_engine::retention::PruneCounters>);

impl Collector for Pruned {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut family = encoder.encode_descriptor(
            "fronta_runs_deleted",
            "Finished runs deleted by retention in this process, by status",
            None,
            MetricType::Counter,
        )?;
        for (status, deleted) in self.0.deleted() {
            let labels = [("status", status.as_str())];
            ConstCounter::new(deleted).encode(family.encode_family(&labels)?)?;
        }
        let passes = encoder.encode_descriptor(
            "fronta_retention_passes",
            "Retention passes this process finished",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(self.0.passes()).encode(passes)
    }
}

/// Every series of this process, as Prometheus text.
fn exposition(app: &App, database: Database) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(database));
    app.inner().webhook_metrics.register(&mut registry);
    if let Some(worker) = app.inner().worker_metrics.get() {
        registry.register_collector(Box::new(Worker(worker.clone())));
    }
    if let Some(counters) = app.inner().store_counters.get() {
        registry.register_collector(Box::new(Store(counters.read())));
    }
    if let Some(pruned) = app.inner().pruned.get() {
        registry.register_collector(Box::new(Pruned(pruned.clone())));
    }
    let mut out = String::new();
    prometheus_text::encode(&mut out, &registry)?;
    Ok(out)
}

/// `GET /metrics`.
pub async fn metrics(State(app): State<App>) -> Result<Response, ApiError> {
    let stats = app.runs().run_stats().await?;
    let incidents_open = app.desk().incident_open_all().await?.len() as u64;
    let services = app.limits().service_totals().await?;
    let oldest_finished_age = app.runs().oldest_finished().await?.map_or(0, |ended| {
        (app.inner().clock.now() - ended).num_seconds().max(0) as u64
    });
    let database = Database {
        stats,
        oldest_finished_age,
        incidents_open,
        services,
    };
    let out = exposition(&app, database).map_err(|err| {
        tracing::error!(error = %err, "metrics: the exposition could not be encoded");
        ApiError::Internal
    })?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)],
        out,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    fn encode(collector: impl Collector) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(collector));
        let mut out = String::new();
        prometheus_text::encode(&mut out, &registry).expect("the text encodes");
        out
    }

    #[test]
    fn the_worker_s_histograms_keep_their_buckets_and_the_hand_offs_are_a_counter() {
        let worker = Arc::new(WorkerMetrics::default());
        worker.claim.record(Duration::from_millis(2));
        worker.claim.record(Duration::from_secs(30));
        worker.handed_off.fetch_add(3, Ordering::Relaxed);
        worker.timed_out.fetch_add(2, Ordering::Relaxed);
        worker.stuck.fetch_add(1, Ordering::Relaxed);
        let out = encode(Worker(worker));
        for line in [
            "# TYPE fronta_worker_claim_duration_seconds histogram\n",
            "fronta_worker_claim_duration_seconds_bucket{le=\"0.001\"} 0\n",
            "fronta_worker_claim_duration_seconds_bucket{le=\"0.0025\"} 1\n",
            "fronta_worker_claim_duration_seconds_bucket{le=\"10\"} 1\n",
            "fronta_worker_claim_duration_seconds_bucket{le=\"+Inf\"} 2\n",
            "fronta_worker_claim_duration_seconds_count 2\n",
            "fronta_worker_claim_duration_seconds_sum 30.002\n",
            "fronta_run_start_delay_seconds_count 0\n",
            "# TYPE fronta_worker_handed_off_total counter\n",
            "fronta_worker_handed_off_total 3\n",
            "fronta_worker_handlers_timed_out_total 2\n",
            "fronta_worker_handlers_stuck_total 1\n",
        ] {
            assert!(out.contains(line), "{line:?} in:\n{out}");
        }
        assert_eq!(
            out.matches("fronta_worker_claim_duration_seconds_bucket{le=\"+Inf\"}")
                .count(),
            1,
            "one +Inf bucket (the snapshot's own is not doubled):\n{out}"
        );
    }

    #[test]
    fn a_store_counter_keeps_its_name_and_one_without_the_suffix_gets_it() {
        let out = encode(Store(vec![
            StoreCounter {
                name: "fronta_pg_enqueue_groups_total",
                help: "Enqueue commits.",
                value: 7,
            },
            StoreCounter {
                name: "fronta_pg_other",
                help: "Something counted.",
                value: 1,
            },
        ]));
        for line in [
            "# HELP fronta_pg_enqueue_groups_total Enqueue commits.\n",
            "# TYPE fronta_pg_enqueue_groups_total counter\n",
            "fronta_pg_enqueue_groups_total 7\n",
            "# TYPE fronta_pg_other_total counter\n",
            "fronta_pg_other_total 1\n",
        ] {
            assert!(out.contains(line), "{line:?} in:\n{out}");
        }
    }

    #[test]
    fn run_sums_are_gauges_and_kind_labels_are_escaped() {
        let mut stats = RunStats::default();
        stats.add("we\"ird", RunStatus::Failed, 2, [5, 1, 4]);
        let out = encode(Database {
            stats,
            oldest_finished_age: 0,
            incidents_open: 0,
            services: ServiceTotals::default(),
        });
        for line in [
            "fronta_runs{status=\"failed\"} 2\n",
            "fronta_runs_by_kind{kind=\"we\\\"ird\",status=\"failed\"} 2\n",
            "# TYPE fronta_run_attempts gauge\n",
            "fronta_run_attempts 5\n",
            "# TYPE fronta_run_reclaims gauge\n",
            "fronta_run_reclaims 1\n",
            "# TYPE fronta_run_parks gauge\n",
            "fronta_run_parks 4\n",
        ] {
            assert!(out.contains(line), "{line:?} in:\n{out}");
        }
        assert!(
            !out.contains("_total"),
            "nothing read from the database is a counter:\n{out}"
        );
    }

    #[test]
    fn webhook_requests_count_by_code_and_time_every_answer() {
        let metrics = WebhookMetrics::default();
        metrics.record(Duration::from_millis(3), 202);
        metrics.record(Duration::from_millis(4), 202);
        metrics.record(Duration::from_millis(1), 400);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        prometheus_text::encode(&mut out, &registry).expect("the text encodes");
        for line in [
            "# TYPE fronta_webhook_requests_total counter\n",
            "fronta_webhook_requests_total{code=\"202\"} 2\n",
            "fronta_webhook_requests_total{code=\"400\"} 1\n",
            "# TYPE fronta_webhook_request_duration_seconds histogram\n",
            "fronta_webhook_request_duration_seconds_count 3\n",
            "fronta_webhook_request_duration_seconds_bucket{le=\"+Inf\"} 3\n",
        ] {
            assert!(out.contains(line), "{line:?} in:\n{out}");
        }
        assert!(
            !out.contains(".."),
            "one full stop ends each help text:\n{out}"
        );
    }
}
