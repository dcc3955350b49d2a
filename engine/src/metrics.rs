//! What a process measured of its own work, in the shape Prometheus reads: fixed-bucket
//! latency histograms that any thread records into without a lock.
//!
//! [`WorkerMetrics`] is what a [`crate::Worker`] measures — how long each claim round and
//! each completion batch took at the store, and how long a run waited between being due
//! and being started. The HTTP server reads their snapshots at each scrape and exposes
//! them at `GET /metrics` (its `metrics` module encodes them).
//!
//! Decisions: recording is a few relaxed atomic adds and the engine depends on no metrics
//! crate (the exposition is the server's); buckets are fixed per histogram
//! ([`LATENCY_BUCKETS`] fits everything here: 0.5 ms to 10 s); values are per process and
//! reset on restart (the run counts that every process shares come from the database,
//! not from here).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds, in seconds, of the latency histograms.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram over [`LATENCY_BUCKETS`]; recording is a few relaxed atomic adds.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations at or below each bound, not cumulative (summed when written).
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// A copy of a [`Histogram`] at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound in seconds, observations at or below it)`, cumulative, ending with
    /// the total at `+Inf` (`f64::INFINITY`).
    pub cumulative: Vec<(f64, u64)>,
    /// How many times were recorded.
    pub count: u64,
    /// The sum of the recorded times, in seconds.
    pub sum_seconds: f64,
}

impl HistogramSnapshot {
    /// The mean of the recorded times in milliseconds (0 when nothing was recorded).
    pub fn mean_ms(&self) -> f64 {
        self.sum_seconds * 1000.0 / self.count.max(1) as f64
    }
}

impl Histogram {
    /// Record one observation of `elapsed` (lock-free; callable from any thread).
    pub fn record(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Some(bucket) = LATENCY_BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// A copy of the counts now, buckets made cumulative as Prometheus reads them (each
    /// counter is read on its own: a record made meanwhile may show in one and not another).
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let mut cumulative: Vec<(f64, u64)> = LATENCY_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(bound, bucket)| {
                running += bucket.load(Ordering::Relaxed);
                (*bound, running)
            })
            .collect();
        let count = self.count.load(Ordering::Relaxed);
        cumulative.push((f64::INFINITY, count));
        HistogramSnapshot {
            cumulative,
            count,
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// What one worker measured (shared with whoever reports it: `Worker::metrics`).
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    /// One claim round at the store (`RunStore::run_claim`), whatever it found.
    pub claim: Histogram,
    /// One completion batch at the store (`RunStore::run_finish_many`).
    pub complete: Histogram,
    /// From a run being due (`run_at`) to its handler starting here; reclaims are left
    /// out (their wait is the dead owner's lease, not the queue's).
    pub start_delay: Histogram,
    /// Runs this worker's own dispatcher handed to it at enqueue, already claimed (one
    /// commit instead of two: [`crate::handoff`]); the rest of its runs came by claim.
    pub handed_off: AtomicU64,
    /// Handlers stopped at their kind's timeout, heeding their stop signal or not.
    pub timed_out: AtomicU64,
    /// Of those, handlers whose task had not ended [`crate::worker::STUCK_GRACE`] after
    /// its abort: they block their thread.
    pub stuck: AtomicU64,
}

impl WorkerMetrics {
    /// Hand-offs so far ([`WorkerMetrics::handed_off`]).
    pub fn handed_off(&self) -> u64 {
        self.handed_off.load(Ordering::Relaxed)
    }

    /// Handlers stopped at their timeout so far ([`WorkerMetrics::timed_out`]).
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// Handlers stuck past their abort so far ([`WorkerMetrics::stuck`]).
    pub fn stuck(&self) -> u64 {
        self.stuck.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_buckets_and_add_up() {
        let histogram = Histogram::default();
        histogram.record(Duration::from_micros(300));
        histogram.record(Duration::from_millis(3));
        histogram.record(Duration::from_secs(30));
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 3);
        assert_eq!(snapshot.cumulative[0], (0.0005, 1), "300 µs ≤ 0.5 ms");
        let at_5ms = snapshot.cumulative.iter().find(|(b, _)| *b == 0.005);
        assert_eq!(at_5ms, Some(&(0.005, 2)), "3 ms ≤ 5 ms, cumulative");
        let at_10s = snapshot.cumulative.iter().find(|(b, _)| *b == 10.0);
        assert_eq!(at_10s, Some(&(10.0, 2)), "30 s is above every bound");
        assert_eq!(snapshot.cumulative.last(), Some(&(f64::INFINITY, 3)));
        assert!((snapshot.sum_seconds - 30.0033).abs() < 1e-9);
    }
}
