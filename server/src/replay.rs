//! Remembered `webhook-id`s: a repeat of a webhook answers the first run's id.
//!
//! Two layers, because the run store's unique keys only cover runs that are not finished
//! (a terminal run frees its key, DESIGN §3.6):
//! 1. the enqueue carries `unique_key = "webhook:<automation id>:<webhook-id>"`: while
//!    the first run is pending or running, every process and every restart finds it
//!    (durable, in the same commit as the run);
//! 2. this cache remembers `key → run id` for `replay_window` after the enqueue, so a
//!    repeat that arrives after the first run *finished* still gets its id instead of a
//!    second run.
//!
//! The limit, written down: layer 2 lives in this process's memory. After a restart, or
//! on another server process, a repeat of a webhook whose first run already finished
//! starts a new run. Closing that needs the run store to find a run by unique key among
//! finished runs too (a port method such as `run_by_unique_key` with a retention) — a
//! store change, not a server one.
//!
//! Left out: signature checks (`signature`), the enqueue itself (`routes::webhook`).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use fronta_engine::RunId;
use tokio::time::Instant;

/// `key → run id`, forgotten after `window` or when `capacity` is reached (oldest first).
#[derive(Debug)]
pub struct ReplayCache {
    window: Duration,
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    runs: HashMap<String, (RunId, Instant)>,
    /// Insertion order, for expiry and the capacity cap.
    order: VecDeque<(String, Instant)>,
}

impl ReplayCache {
    pub fn new(window: Duration, capacity: usize) -> Self {
        Self {
            window,
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The run first enqueued for `key`, if remembered.
    pub fn get(&self, key: &str) -> Option<RunId> {
        let now = Instant::now();
        let inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        inner
            .runs
            .get(key)
            .filter(|(_, at)| now.saturating_duration_since(*at) < self.window)
            .map(|(id, _)| *id)
    }

    /// Remember `key → id` (the first answer wins: a later insert of a known key is kept
    /// out).
    pub fn remember(&self, key: &str, id: RunId) {
        if self.capacity == 0 {
            return;
        }
        let now = Instant::now();
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some((oldest, at)) = inner.order.front().cloned() {
            let expired = now.saturating_duration_since(at) >= self.window;
            if !expired && inner.runs.len() < self.capacity {
                break;
            }
            inner.order.pop_front();
            if inner.runs.get(&oldest).is_some_and(|(_, kept)| *kept == at) {
                inner.runs.remove(&oldest);
            }
        }
        if !inner.runs.contains_key(key) {
            inner.runs.insert(key.to_owned(), (id, now));
            inner.order.push_back((key.to_owned(), now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_key_is_remembered_for_the_window_then_forgotten() {
        let cache = ReplayCache::new(Duration::from_secs(60), 10);
        let first = RunId::new_v7();
        cache.remember("k", first);
        cache.remember("k", RunId::new_v7());
        assert_eq!(cache.get("k"), Some(first), "the first run wins");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(cache.get("k"), None, "forgotten after the window");
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_key_goes_first_at_capacity() {
        let cache = ReplayCache::new(Duration::from_secs(60), 2);
        let ids: Vec<RunId> = (0..3).map(|_| RunId::new_v7()).collect();
        cache.remember("a", ids[0]);
        cache.remember("b", ids[1]);
        cache.remember("c", ids[2]);
        assert_eq!(cache.get("a"), None, "the oldest was dropped");
        assert_eq!(cache.get("b"), Some(ids[1]), "b kept");
        assert_eq!(cache.get("c"), Some(ids[2]), "c kept");
    }
}
