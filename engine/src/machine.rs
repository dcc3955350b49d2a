//! The run state machine as pure functions: given what a run has spent and what its
//! handler answered, which [`FinishAction`] to write. No I/O here; the worker carries the
//! actions out and tests assert on them.
//!
//! ```text
//!  handler outcome            counters                       action
//!  Done(result)               -                              Complete
//!  Fail(reason)               -                              Fail
//!  Retry{after, reason}       attempts < max_retries         Retry{delay: after or ladder}
//!  Retry{..}                  attempts >= max_retries        Fail("gave up after …")
//!  Snooze(d)                  -                              Snooze{d}
//!  (no handler for kind)      parks + 1 < MAX_PARKS          Park{park_delay(parks)}
//!  (no handler for kind)      parks + 1 >= MAX_PARKS         Fail("no handler …")
//!  (stopped by cancel)        outcome other than Done        Cancel
//! ```

use std::time::Duration;

use crate::model::Run;
use crate::registry::Outcome;
use crate::store::FinishAction;

/// A run is failed on its fifth park: five deploy windows without a handler is no skew.
pub const MAX_PARKS: u32 = 5;

/// The delays between attempts: retry `n` (1-based) waits `delays[n - 1]`, and every
/// retry past the end waits the last delay. Never empty, so reading it never yields
/// "never".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryLadder {
    delays: Vec<Duration>,
}

impl Default for RetryLadder {
    /// Attempt 1 at once, then 30 s, 2 min, 10 min, 1 h (and 1 h after that).
    fn default() -> Self {
        Self {
            delays: vec![
                Duration::from_secs(30),
                Duration::from_secs(120),
                Duration::from_secs(600),
                Duration::from_secs(3600),
            ],
        }
    }
}

impl RetryLadder {
    /// A ladder of the given delays; `None` when empty.
    pub fn new(delays: Vec<Duration>) -> Option<Self> {
        (!delays.is_empty()).then_some(Self { delays })
    }

    /// The wait before retry number `retry` (1 = the first retry). `0` reads as the first
    /// step too (a zero must never turn into "never").
    pub fn delay_before_retry(&self, retry: u32) -> Duration {
        let index = (retry.max(1) - 1) as usize;
        let last = self.delays.len() - 1;
        self.delays[index.min(last)]
    }
}

/// What to write after a handler answered `outcome` for `run`.
pub fn decide(run: &Run, outcome: Outcome, ladder: &RetryLadder) -> FinishAction {
    match outcome {
        Outcome::Done(result) => FinishAction::Complete { result },
        Outcome::Fail(reason) => FinishAction::Fail { error: reason },
        Outcome::Snooze(delay) => FinishAction::Snooze { delay },
        Outcome::Suppress(reason) => FinishAction::Suppress { reason },
        Outcome::Retry { after, reason } => {
            if run.attempts >= run.max_retries {
                FinishAction::Fail {
                    error: format!(
                        "gave up after {} retries (max_retries {}): {reason}",
                        run.attempts, run.max_retries
                    ),
                }
            } else {
                let delay = after.unwrap_or_else(|| ladder.delay_before_retry(run.attempts + 1));
                FinishAction::Retry {
                    delay,
                    error: reason,
                }
            }
        }
    }
}

/// What to write for a run whose kind has no handler in this process.
pub fn decide_park(run: &Run, park_base: Duration) -> FinishAction {
    if run.parks + 1 >= MAX_PARKS {
        FinishAction::Fail {
            error: format!(
                "no handler for kind {:?}: parked {} times, giving up",
                run.kind,
                run.parks + 1
            ),
        }
    } else {
        FinishAction::Park {
            delay: park_delay(park_base, run.parks),
            error: format!("no handler for kind {:?} in this worker", run.kind),
        }
    }
}

/// Exponential park backoff: base, 2×, 4×, … (capped at one day).
pub fn park_delay(base: Duration, parks_so_far: u32) -> Duration {
    let factor = 1u32 << parks_so_far.min(16);
    base.saturating_mul(factor).min(Duration::from_secs(86_400))
}

/// What to write when a handler stopped because its cancel was requested.
pub fn decide_cancelled(outcome: Outcome) -> FinishAction {
    match outcome {
        // It finished before it noticed: the work happened, say so.
        Outcome::Done(result) => FinishAction::Complete { result },
        _ => FinishAction::Cancel,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RunId, RunStatus, Trigger};
    use chrono::Utc;

    fn run(attempts: u32, max_retries: u32, parks: u32) -> Run {
        let now = Utc::now();
        Run {
            id: RunId::new_v7(),
            tenant: "t".into(),
            kind: "k".into(),
            payload: serde_json::json!({}),
            state: None,
            trigger: Trigger::Api,
            unique_key: None,
            priority: 0,
            status: RunStatus::Running,
            run_at: now,
            attempts,
            max_retries,
            reclaims: 0,
            parks,
            locked_by: None,
            locked_until: None,
            heartbeat_at: None,
            cancel_requested: false,
            created_at: now,
            updated_at: now,
            started_at: None,
            completed_at: None,
            failed_at: None,
            cancelled_at: None,
            last_error: None,
            result: None,
        }
    }

    fn retry() -> Outcome {
        Outcome::Retry {
            after: None,
            reason: "flaky".into(),
        }
    }

    #[test]
    fn the_default_ladder_is_30s_2m_10m_1h_and_stays_at_1h() {
        let ladder = RetryLadder::default();
        let minutes: Vec<u64> = (1..=6)
            .map(|n| ladder.delay_before_retry(n).as_secs())
            .collect();
        assert_eq!(
            minutes,
            vec![30, 120, 600, 3600, 3600, 3600],
            "ladder steps"
        );
        assert_eq!(
            ladder.delay_before_retry(0),
            Duration::from_secs(30),
            "a zero index reads the first step, never 'never'"
        );
    }

    #[test]
    fn an_empty_ladder_cannot_be_built() {
        assert!(RetryLadder::new(vec![]).is_none(), "empty ladder refused");
    }

    #[test]
    fn retry_walks_the_ladder_then_fails_when_retries_are_spent() {
        let ladder = RetryLadder::default();
        assert_eq!(
            decide(&run(0, 3, 0), retry(), &ladder),
            FinishAction::Retry {
                delay: Duration::from_secs(30),
                error: "flaky".into()
            },
            "first retry waits 30 s"
        );
        assert_eq!(
            decide(&run(2, 3, 0), retry(), &ladder),
            FinishAction::Retry {
                delay: Duration::from_secs(600),
                error: "flaky".into()
            },
            "third retry waits 10 min"
        );
        match decide(&run(3, 3, 0), retry(), &ladder) {
            FinishAction::Fail { error } => assert!(error.contains("gave up after 3"), "{error}"),
            other => panic!("retries spent must fail, got {other:?}"),
        }
        assert!(
            matches!(
                decide(&run(0, 0, 0), retry(), &ladder),
                FinishAction::Fail { .. }
            ),
            "max_retries 0 runs once"
        );
    }

    #[test]
    fn retry_after_wins_over_the_ladder() {
        let outcome = Outcome::Retry {
            after: Some(Duration::from_secs(7)),
            reason: "429".into(),
        };
        assert_eq!(
            decide(&run(0, 5, 0), outcome, &RetryLadder::default()),
            FinishAction::Retry {
                delay: Duration::from_secs(7),
                error: "429".into()
            }
        );
    }

    #[test]
    fn a_per_kind_ladder_replaces_the_default() {
        let ladder = RetryLadder::new(vec![Duration::from_millis(10)]).expect("non-empty");
        assert_eq!(
            decide(&run(4, 9, 0), retry(), &ladder),
            FinishAction::Retry {
                delay: Duration::from_millis(10),
                error: "flaky".into()
            }
        );
    }

    #[test]
    fn parks_back_off_exponentially_and_fail_on_the_fifth() {
        let base = Duration::from_secs(10);
        for (parks, expected) in [(0u32, 10u64), (1, 20), (2, 40), (3, 80)] {
            match decide_park(&run(0, 0, parks), base) {
                FinishAction::Park { delay, .. } => {
                    assert_eq!(delay.as_secs(), expected, "park {parks}")
                }
                other => panic!("park {parks} should park, got {other:?}"),
            }
        }
        assert!(
            matches!(decide_park(&run(0, 0, 4), base), FinishAction::Fail { .. }),
            "the fifth park fails the run"
        );
    }

    #[test]
    fn a_cancelled_handler_is_cancelled_unless_it_finished() {
        assert_eq!(
            decide_cancelled(Outcome::Fail("stopped".into())),
            FinishAction::Cancel
        );
        assert_eq!(
            decide_cancelled(Outcome::done()),
            FinishAction::Complete { result: None }
        );
    }
}
