//! A small token-bucket limiter keyed by a string (an automation id, a tenant id): the
//! 429s of API.md with a `Retry-After` that tells when the next request would pass.
//!
//! Why not `governor`/`tower_governor`: we need keys that are only known after a
//! database lookup (the webhook token's automation and tenant), a wait to put in
//! `Retry-After`, and our own 429 body; a bucket is twenty lines. Time is
//! `tokio::time::Instant`, so tests can pause it.
//!
//! Memory stays bounded: past `max_keys` buckets, those that have refilled completely
//! (an idle key, indistinguishable from a new one) are dropped.
//!
//! Left out: limits shared between processes (each process limits what it serves).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::RateLimit;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// Buckets of one limit, per key.
#[derive(Debug)]
pub struct Limiter {
    limit: RateLimit,
    max_keys: usize,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Limiter {
    pub fn new(limit: RateLimit, max_keys: usize) -> Self {
        Self {
            limit,
            max_keys: max_keys.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one token for `key`: `Ok` to go on, `Err(wait)` until the next token.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let burst = f64::from(self.limit.burst);
        let rate = self.limit.per_second;
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= self.max_keys && !buckets.contains_key(key) {
            buckets.retain(|_, bucket| refilled(bucket, now, rate, burst) < burst);
        }
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: burst,
            updated: now,
        });
        bucket.tokens = refilled(bucket, now, rate, burst);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }
}

impl Limiter {
    /// How long until `key` has a token, without taking one: `None` when it has one now.
    /// (The failed-authentication limit looks before it authenticates, and takes a token
    /// only for a failure.)
    pub fn wait(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        let burst = f64::from(self.limit.burst);
        let buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tokens = buckets.get(key).map_or(burst, |bucket| {
            refilled(bucket, now, self.limit.per_second, burst)
        });
        (tokens < 1.0).then(|| Duration::from_secs_f64((1.0 - tokens) / self.limit.per_second))
    }
}

fn refilled(bucket: &Bucket, now: Instant, rate: f64, burst: f64) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
    (bucket.tokens + elapsed * rate).min(burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_passes_then_waits_for_a_refill() {
        let limiter = Limiter::new(RateLimit::new(2.0, 3), 100);
        for n in 0..3 {
            assert_eq!(limiter.check("a"), Ok(()), "request {n} of the burst");
        }
        let wait = limiter
            .check("a")
            .expect_err("the fourth is over the burst");
        assert!(
            wait > Duration::from_millis(400) && wait <= Duration::from_millis(500),
            "one token at 2/s is 0.5 s away: {wait:?}"
        );
        assert_eq!(limiter.check("b"), Ok(()), "another key has its own bucket");
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(limiter.check("a"), Ok(()), "refilled after the wait");
    }

    #[tokio::test(start_paused = true)]
    async fn wait_looks_without_taking() {
        let limiter = Limiter::new(RateLimit::new(1.0, 2), 100);
        assert_eq!(limiter.wait("a"), None, "a new key has its burst");
        assert_eq!(limiter.wait("a"), None, "looking takes nothing");
        limiter.check("a").expect("a token of the burst");
        limiter.check("a").expect("a token of the burst");
        let wait = limiter.wait("a").expect("empty after the burst");
        assert!(
            wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(limiter.wait("a"), None, "refilled");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_keys_are_dropped_past_the_cap() {
        let limiter = Limiter::new(RateLimit::new(100.0, 1), 2);
        assert_eq!(limiter.check("a"), Ok(()), "a");
        assert_eq!(limiter.check("b"), Ok(()), "b");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(limiter.check("c"), Ok(()), "c");
        let kept = limiter
            .buckets
            .lock()
            .map(|b| b.len())
            .unwrap_or(usize::MAX);
        assert_eq!(kept, 1, "the refilled buckets of a and b were dropped");
    }
}
