//! The worker's local queue: runs claimed ahead of its free slots, so a slot that frees
//! starts its next run at once instead of after a claim round trip.
//!
//! # The contract
//!
//! - **Sized from what the worker measures** ([`Sizer`]): the target is what the slots
//!   finish in about two claim rounds — `slots × round ÷ handler`, doubled, rounded
//!   down — from moving averages of the claim round's time and of a handler's time
//!   (start to end, as the worker sees it). Fast handlers and slow rounds grow it; slow
//!   handlers shrink it to nothing (64 slots of 2-second handlers with 1 ms rounds: 0).
//!   It never exceeds [`crate::WorkerConfig::prefetch_max`]; `0` turns the queue off, and
//!   the worker claims exactly its free slots, as without one. Before the first handler
//!   has finished the target is 0.
//! - **Topped up in the background of the slots**: a round is made when a slot is free
//!   (the queue is empty then) or when the queue holds no more than half the target; it
//!   asks for the free slots plus the target less what the queue holds. While the round
//!   is out, slots that free are filled from the queue.
//! - **Never blocks a free slot**: a free slot takes the queue's first run before
//!   anything else happens; a slot never waits for a round while the queue holds a run.
//! - **Never strands a run**: a run that has waited in the queue longer than
//!   [`Sizer::hold`] (twenty rounds, at least [`MIN_HOLD`]) — every slot busy with
//!   handlers slower than the sizing expected — is handed back (`Release`: pending, due
//!   at once, no counter moves) so an idle process can take it, and the target is 0 until
//!   a handler of this worker finishes (no claiming back what was just handed back).
//! - **Each queued run is claimed like a running one**: its own owner token and its
//!   kind's lease; the heartbeat renews it with the running ones; a lease lost while it
//!   waits drops it from the queue (nothing is written); a cancel requested while it waits
//!   cancels it when it leaves the queue, without starting it.
//! - **Started in claim order**: the queue is first in, first out, and a claim round
//!   answers its runs in the order tenant fairness chose ([`crate::store`]), so the
//!   round-robin across tenants holds through the queue.
//! - **Graceful shutdown** hands every queued run back (`Release`, no counter moves).
//! - **After a crash** a queued run is a leased run like a running one: it is reclaimed
//!   when its lease expires and counts one reclaim (`reclaims += 1`), as the store cannot
//!   tell a run whose handler never started from one whose handler died; a run is failed
//!   as a crash loop only after `max_reclaims` such crashes, as always.
//!
//! Left out on purpose: sharing a queue between worker processes (each process keeps its
//! own; fairness across processes comes from the sizing and the hold), and a queue per
//! kind (the claim round already orders runs).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::ClaimedRun;

/// The shortest time a queued run may wait for a slot before it is handed back.
pub const MIN_HOLD: Duration = Duration::from_millis(20);

/// How many claim rounds' worth of time a queued run may wait before it is handed back.
pub const HOLD_ROUNDS: u32 = 20;

/// The default [`crate::WorkerConfig::prefetch_max`]: graphile-worker's own benchmark
/// keeps a local queue of 500; at 64 in flight the sizing asked for ~130–250 here.
pub const DEFAULT_PREFETCH_MAX: usize = 256;

/// The largest [`crate::WorkerConfig::prefetch_max`] a worker accepts.
pub const MAX_PREFETCH: usize = 10_000;

/// Weight of a new handler time in its moving average: one 2-second handler among
/// no-op ones drops the target to nothing at once; ~20 fast ones bring it back.
const HANDLER_WEIGHT: f64 = 0.1;

/// Weight of a new claim round's time in its moving average.
const ROUND_WEIGHT: f64 = 0.2;

/// The shortest handler time the sizing divides by (a no-op handler measures ~0).
const MIN_HANDLER_SECS: f64 = 1e-6;

/// How big the local queue should be, from what the worker measures. Pure: the worker
/// feeds it durations and asks it for a target.
#[derive(Debug, Clone)]
pub struct Sizer {
    max: usize,
    slots: usize,
    handler_secs: Option<f64>,
    round_secs: Option<f64>,
    stalled: bool,
}

impl Sizer {
    /// A sizer for `slots` slots and a queue of at most `max` runs (0: no queue).
    pub fn new(max: usize, slots: usize) -> Self {
        Self {
            max,
            slots,
            handler_secs: None,
            round_secs: None,
            stalled: false,
        }
    }

    /// A handler ended after `took`: the slots are moving again.
    pub fn handler_ended(&mut self, took: Duration) {
        self.handler_secs = Some(average(self.handler_secs, took, HANDLER_WEIGHT));
        self.stalled = false;
    }

    /// A claim round took `took`.
    pub fn round_took(&mut self, took: Duration) {
        self.round_secs = Some(average(self.round_secs, took, ROUND_WEIGHT));
    }

    /// Queued runs waited past [`Sizer::hold`] and were handed back: queue nothing until a
    /// handler ends.
    pub fn stalled(&mut self) {
        self.stalled = true;
    }

    /// How many runs the queue should hold: what the slots finish in two claim rounds,
    /// at most the configured maximum; 0 when the queue is off, stalled, or nothing has
    /// been measured yet.
    pub fn target(&self) -> usize {
        if self.max == 0 || self.stalled {
            return 0;
        }
        let (Some(handler), Some(round)) = (self.handler_secs, self.round_secs) else {
            return 0;
        };
        let runs = 2.0 * self.slots as f64 * round / handler.max(MIN_HANDLER_SECS);
        if runs >= self.max as f64 {
            self.max
        } else {
            // Rounded down: a fraction of a run is no run (slow handlers get none).
            runs as usize
        }
    }

    /// How long a queued run may wait for a slot before it is handed back.
    pub fn hold(&self) -> Duration {
        let rounds = self.round_secs.map_or(Duration::ZERO, |secs| {
            Duration::from_secs_f64(secs) * HOLD_ROUNDS
        });
        rounds.max(MIN_HOLD)
    }
}

fn average(previous: Option<f64>, took: Duration, weight: f64) -> f64 {
    let now = took.as_secs_f64();
    match previous {
        Some(previous) => previous + weight * (now - previous),
        None => now,
    }
}

/// A run waiting in the local queue.
#[derive(Debug)]
pub(crate) struct Queued {
    pub claimed: ClaimedRun,
    /// The kind's lease, renewed by the heartbeat while the run waits.
    pub lease: Duration,
    /// When it entered the queue (tokio's clock: paused in tests, as the worker's timers).
    pub since: Instant,
    /// A cancel was requested while it waited: it leaves the queue cancelled.
    pub cancel: bool,
}

/// The local queue, first in first out. Shared by the worker loop (which fills and
/// empties it), the heartbeater (which renews it) and [`crate::worker::LocalRuns`].
#[derive(Debug, Default)]
pub(crate) struct LocalQueue {
    runs: VecDeque<Queued>,
}

impl LocalQueue {
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub fn push(&mut self, queued: Queued) {
        self.runs.push_back(queued);
    }

    pub fn pop(&mut self) -> Option<Queued> {
        self.runs.pop_front()
    }

    /// When the run that has waited longest entered the queue.
    pub fn oldest(&self) -> Option<Instant> {
        self.runs.front().map(|queued| queued.since)
    }

    /// The runs that have waited at least `hold`, oldest first (they are at the front:
    /// the queue is in arrival order).
    pub fn take_held(&mut self, hold: Duration) -> Vec<Queued> {
        let now = Instant::now();
        let mut held = Vec::new();
        while self
            .runs
            .front()
            .is_some_and(|queued| now.saturating_duration_since(queued.since) >= hold)
        {
            held.extend(self.runs.pop_front());
        }
        held
    }

    /// Every queued run, oldest first, leaving the queue empty.
    pub fn drain(&mut self) -> Vec<Queued> {
        self.runs.drain(..).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Queued> {
        self.runs.iter()
    }

    pub fn get_mut(&mut self, id: crate::model::RunId) -> Option<&mut Queued> {
        self.runs
            .iter_mut()
            .find(|queued| queued.claimed.run.id == id)
    }

    /// Drops the run `id` (its lease was lost): nothing is written about it.
    pub fn remove(&mut self, id: crate::model::RunId) -> Option<Queued> {
        let at = self
            .runs
            .iter()
            .position(|queued| queued.claimed.run.id == id)?;
        self.runs.remove(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_queued_before_anything_is_measured() {
        let mut sizer = Sizer::new(256, 8);
        assert_eq!(sizer.target(), 0);
        sizer.round_took(MS);
        assert_eq!(sizer.target(), 0, "no handler has ended yet");
        sizer.handler_ended(Duration::from_micros(100));
        assert!(sizer.target() > 0);
    }

    #[test]
    fn the_target_is_what_the_slots_finish_in_two_rounds() {
        let mut sizer = Sizer::new(1000, 4);
        sizer.round_took(2 * MS);
        sizer.handler_ended(Duration::from_micros(500));
        // 4 slots each finish 4 runs in one 2 ms round; two rounds: 32.
        assert_eq!(sizer.target(), 32);
    }

    #[test]
    fn fast_handlers_are_capped_at_the_maximum_and_zero_turns_the_queue_off() {
        let mut capped = Sizer::new(256, 64);
        capped.round_took(MS);
        capped.handler_ended(Duration::ZERO);
        assert_eq!(capped.target(), 256);

        let mut off = Sizer::new(0, 64);
        off.round_took(MS);
        off.handler_ended(Duration::ZERO);
        assert_eq!(off.target(), 0);
    }

    #[test]
    fn slow_handlers_shrink_the_queue_to_nothing() {
        let mut sizer = Sizer::new(256, 64);
        sizer.round_took(MS);
        sizer.handler_ended(Duration::from_secs(2));
        assert_eq!(sizer.target(), 0, "64 × 1 ms ÷ 2 s × 2 is under one run");
    }

    #[test]
    fn one_slow_handler_among_fast_ones_drops_the_target_and_fast_ones_bring_it_back() {
        let mut sizer = Sizer::new(256, 1);
        sizer.round_took(MS);
        for _ in 0..50 {
            sizer.handler_ended(Duration::from_micros(10));
        }
        let before = sizer.target();
        assert!(before >= 100, "fast handlers fill the queue: {before}");
        sizer.handler_ended(Duration::from_secs(2));
        assert_eq!(sizer.target(), 0);
        for _ in 0..200 {
            sizer.handler_ended(Duration::from_micros(10));
        }
        assert!(sizer.target() > 0, "the average recovered");
    }

    #[test]
    fn a_stall_queues_nothing_until_a_handler_ends() {
        let mut sizer = Sizer::new(256, 1);
        sizer.round_took(MS);
        sizer.handler_ended(Duration::from_micros(10));
        assert!(sizer.target() > 0);
        sizer.stalled();
        assert_eq!(sizer.target(), 0);
        sizer.round_took(MS);
        assert_eq!(sizer.target(), 0, "a round is no sign the slots move");
        sizer.handler_ended(Duration::from_micros(10));
        assert!(sizer.target() > 0);
    }

    #[test]
    fn the_hold_is_twenty_rounds_and_never_under_its_floor() {
        let mut sizer = Sizer::new(256, 1);
        assert_eq!(sizer.hold(), MIN_HOLD);
        sizer.round_took(MS);
        assert_eq!(sizer.hold(), MIN_HOLD, "20 × 1 ms is the floor");
        let mut slow = Sizer::new(256, 1);
        slow.round_took(10 * MS);
        assert_eq!(slow.hold(), 200 * MS);
    }
}
