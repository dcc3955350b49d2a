//! `GET /metrics`: Prometheus text format (version 0.0.4), written by hand — a dozen
//! series do not need a metrics crate.
//!
//! Series:
//! - `fronta_runs{status}` (gauge): runs by status, from `RunStore::run_stats` (every
//!   tenant), and `fronta_run_attempts_total`, `fronta_run_reclaims_total`,
//!   `fronta_run_parks_total` (counters summed over the runs in the store);
//! - `fronta_webhook_request_duration_seconds` (histogram) and
//!   `fronta_webhook_requests_total{code}` (counter): `POST /webhook/{token}` answered
//!   by this process, by status code;
//! - `fronta_incidents_open` (gauge): open incidents of every tenant;
//! - `fronta_service_breakers{state}` (gauge: per-(tenant, service) breakers by state,
//!   `closed`, `open`, `half_open`) and `fronta_service_calls_in_flight` (gauge: calls
//!   holding a slot), from `ServiceLimits::service_totals`: counts over every tenant,
//!   because a series per tenant and service would be unbounded (a tenant's own
//!   breakers are in `GET /api/services`);
//! - `fronta_runs_by_kind{kind,status}` (gauge) and `fronta_queue_depth` (gauge: runs
//!   due and not yet started), from the same `run_stats`;
//! - when this process runs a worker (`App::observe_worker`): the histograms
//!   `fronta_worker_claim_duration_seconds`, `fronta_worker_complete_duration_seconds`
//!   and `fronta_run_start_delay_seconds`, and the counter `fronta_worker_handed_off_total`
//!   (runs started by hand-off at enqueue, without a claim) (`fronta_engine::metrics`);
//! - counters of this process's store, when it offers some (`App::observe_store`): on
//!   Postgres `fronta_pg_enqueue_groups_total`, `fronta_pg_enqueue_grouped_calls_total`
//!   and `fronta_pg_enqueue_groups_split_total` (group enqueue: commits written, calls
//!   they answered, groups written again call by call).
//!
//! Decisions: the route needs no token (scrapers rarely carry one, and it shows counts,
//! never tenant data); put it behind the proxy's access rules if that matters. The
//! webhook series are per process (in memory, reset on restart); runs and incidents come
//! from the database, so every process answers the same for them. Reading them costs
//! `run_stats` and one incident list per scrape. Left out: per-tenant labels (their
//! cardinality is unbounded), REST route latencies. Kinds are few (the registry's), so a
//! kind label is safe.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fronta_desk::IncidentStatus;
use fronta_engine::RunStatus;
use fronta_engine::metrics::Histogram;

use crate::app::App;
use crate::error::ApiError;

/// One counter of the store: its series name, its help line, its value now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreCounter {
    pub name: &'static str,
    pub help: &'static str,
    pub value: u64,
}

/// Reads the store's counters at each scrape.
#[derive(Clone)]
pub struct StoreCounters(std::sync::Arc<dyn Fn() -> Vec<StoreCounter> + Send + Sync>);

impl StoreCounters {
    pub fn new(read: impl Fn() -> Vec<StoreCounter> + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(read))
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

/// Write `counters` as Prometheus counters.
fn write_store_counters(out: &mut String, counters: &[StoreCounter]) {
    for counter in counters {
        header(out, counter.name, "counter", counter.help);
        let _ = writeln!(out, "{} {}", counter.name, counter.value);
    }
}

/// What this process measured of webhook requests.
#[derive(Debug, Default)]
pub struct WebhookMetrics {
    latency: Histogram,
    by_code: Mutex<BTreeMap<u16, u64>>,
}

impl WebhookMetrics {
    pub fn record(&self, elapsed: Duration, code: u16) {
        self.latency.record(elapsed);
        let mut by_code = self
            .by_code
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *by_code.entry(code).or_default() += 1;
    }

    fn write(&self, out: &mut String) {
        let by_code = self
            .by_code
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        header(
            out,
            "fronta_webhook_requests_total",
            "counter",
            "Webhook requests (POST /webhook/{token}) answered by this process, by status code.",
        );
        for (code, count) in by_code {
            let _ = writeln!(
                out,
                "fronta_webhook_requests_total{{code=\"{code}\"}} {count}"
            );
        }
        self.latency.write_prometheus(
            out,
            "fronta_webhook_request_duration_seconds",
            "Time to answer a webhook request (until the run is durably enqueued).",
        );
    }
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
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

/// `GET /metrics`.
pub async fn metrics(State(app): State<App>) -> Result<Response, ApiError> {
    let stats = app.runs().run_stats().await?;
    let incidents = app.desk().incident_list(None).await?;
    let open = incidents
        .iter()
        .filter(|incident| incident.status == IncidentStatus::Open)
        .count();
    let mut out = String::new();
    header(
        &mut out,
        "fronta_runs",
        "gauge",
        "Runs in the store by status.",
    );
    for status in RunStatus::ALL {
        let _ = writeln!(
            out,
            "fronta_runs{{status=\"{status}\"}} {}",
            stats.count(status)
        );
    }
    header(
        &mut out,
        "fronta_runs_by_kind",
        "gauge",
        "Runs in the store by kind and status.",
    );
    for (kind, counts) in &stats.by_kind {
        for status in RunStatus::ALL {
            let _ = writeln!(
                out,
                "fronta_runs_by_kind{{kind=\"{}\",status=\"{status}\"}} {}",
                label(kind),
                counts.count(status)
            );
        }
    }
    header(
        &mut out,
        "fronta_queue_depth",
        "gauge",
        "Runs due and waiting for a worker (queued), of every tenant.",
    );
    let _ = writeln!(out, "fronta_queue_depth {}", stats.queued);
    for (name, help, value) in [
        (
            "fronta_run_attempts_total",
            "Attempts of the runs in the store.",
            stats.attempts,
        ),
        (
            "fronta_run_reclaims_total",
            "Reclaims (lost leases) of the runs in the store.",
            stats.reclaims,
        ),
        (
            "fronta_run_parks_total",
            "Parks (crash-loop pauses) of the runs in the store.",
            stats.parks,
        ),
    ] {
        header(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
    app.inner().webhook_metrics.write(&mut out);
    if let Some(worker) = app.inner().worker_metrics.get() {
        worker.write_prometheus(&mut out);
    }
    if let Some(counters) = app.inner().store_counters.get() {
        write_store_counters(&mut out, &counters.read());
    }
    header(
        &mut out,
        "fronta_incidents_open",
        "gauge",
        "Open incidents of every tenant.",
    );
    let _ = writeln!(out, "fronta_incidents_open {open}");
    let services = app.limits().service_totals().await?;
    header(
        &mut out,
        "fronta_service_breakers",
        "gauge",
        "Per-(tenant, service) circuit breakers by state, every tenant.",
    );
    for (state, count) in &services.breakers {
        let _ = writeln!(
            out,
            "fronta_service_breakers{{state=\"{}\"}} {count}",
            state.as_str()
        );
    }
    header(
        &mut out,
        "fronta_service_calls_in_flight",
        "gauge",
        "Connector calls holding a per-(tenant, service) slot now, every tenant.",
    );
    let _ = writeln!(out, "fronta_service_calls_in_flight {}", services.in_flight);
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response())
}
