//! Time as an input. Stores judge leases and due times by a [`Clock`]; tests pass a
//! [`ManualClock`] and move it instead of sleeping. Timers inside the worker (heartbeat
//! rounds, handler timeouts) use tokio's time, which tests pause with `start_paused`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};

/// The source of "now" for everything that is stored.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current instant (kept to the millisecond by the stores).
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to. Cheap to clone; clones share the time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    millis: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            millis: Arc::new(AtomicI64::new(start.timestamp_millis())),
        }
    }

    /// A clock at a fixed, readable instant (2030-01-01T00:00:00Z).
    pub fn at_fixed_start() -> Self {
        let start = Utc
            .with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
            .single()
            .expect("invariant: a fixed, valid date");
        Self::new(start)
    }

    /// Move the clock forward by `by` (saturating; clones move too).
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.millis.fetch_add(by, Ordering::SeqCst);
    }

    /// Put the clock at `to` (backwards too; clones follow).
    pub fn set(&self, to: DateTime<Utc>) {
        self.millis.store(to.timestamp_millis(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        let millis = self.millis.load(Ordering::SeqCst);
        DateTime::from_timestamp_millis(millis).unwrap_or_default()
    }
}

/// `now + by`, saturating instead of overflowing (a delay can never mean "never").
pub fn add(now: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    let by = chrono::Duration::from_std(by).unwrap_or(chrono::Duration::days(365 * 100));
    now.checked_add_signed(by)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::at_fixed_start();
        let before = clock.now();
        assert_eq!(
            clock.now(),
            before,
            "a manual clock must not move by itself"
        );
        clock.advance(Duration::from_millis(1500));
        assert_eq!(
            (clock.now() - before).num_milliseconds(),
            1500,
            "advance moves the clock by exactly the given time"
        );
    }

    #[test]
    fn adding_a_huge_delay_saturates() {
        let now = Utc::now();
        assert!(
            add(now, Duration::MAX) > now,
            "a huge delay stays in the future"
        );
    }
}
