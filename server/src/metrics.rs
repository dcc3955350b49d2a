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
//! - `fronta_incidents_open` (gauge): open incidents of every tenant.
//!
//! Decisions: the route needs no token (scrapers rarely carry one, and it shows counts,
//! never tenant data); put it behind the proxy's access rules if that matters. The
//! webhook series are per process (in memory, reset on restart); runs and incidents come
//! from the database, so every process answers the same for them. Reading them costs
//! `run_stats` and one incident list per scrape. Left out: per-tenant labels (their
//! cardinality is unbounded), REST route latencies.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fronta_desk::IncidentStatus;

use crate::app::App;
use crate::error::ApiError;

/// Upper bounds (seconds) of the webhook latency buckets.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// What this process measured of webhook requests.
#[derive(Debug, Default)]
pub struct WebhookMetrics {
    /// Requests at or below each bound of [`BUCKETS`] (cumulative when written).
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// The sum of latencies, in nanoseconds.
    sum_nanos: AtomicU64,
    by_code: Mutex<BTreeMap<u16, u64>>,
}

impl WebhookMetrics {
    pub fn record(&self, seconds: f64, code: u16) {
        if let Some(bucket) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = (seconds * 1e9).clamp(0.0, u64::MAX as f64) as u64;
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
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
        header(
            out,
            "fronta_webhook_request_duration_seconds",
            "histogram",
            "Time to answer a webhook request (until the run is durably enqueued).",
        );
        let mut cumulative = 0;
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "fronta_webhook_request_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "fronta_webhook_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(out, "fronta_webhook_request_duration_seconds_sum {sum}");
        let _ = writeln!(out, "fronta_webhook_request_duration_seconds_count {count}");
    }
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
        .record(started.elapsed().as_secs_f64(), response.status().as_u16());
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
    for (status, count) in [
        ("scheduled", stats.scheduled),
        ("queued", stats.queued),
        ("running", stats.running),
        ("completed", stats.completed),
        ("failed", stats.failed),
        ("cancelled", stats.cancelled),
    ] {
        let _ = writeln!(out, "fronta_runs{{status=\"{status}\"}} {count}");
    }
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
    header(
        &mut out,
        "fronta_incidents_open",
        "gauge",
        "Open incidents of every tenant.",
    );
    let _ = writeln!(out, "fronta_incidents_open {open}");
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
