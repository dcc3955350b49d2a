//! Retention: how long finished runs are kept, and the batches a pass deletes them in.
//!
//! Finished runs are deleted by status once they ended longer ago than that status keeps
//! them: completed and cancelled after 14 days, failed and suppressed after 90 days by
//! default (`None` keeps them forever). A run with a unique key stays at least
//! [`KEY_WINDOW`] after its end whatever its status keeps (a repeated `webhook-id` still
//! finds its first run). Besides, a pass never deletes the runs its caller names (an open
//! incident's) nor the newest run of a key with a kept prefix (a timed automation's
//! history). Each batch is one [`RunStore::run_prune`](crate::RunStore::run_prune): one
//! short transaction of at most `limit` runs.
//!
//! ```text
//!  pass ─► for each status kept finitely ─► batch ─► run_prune ─► deleted == limit? ─┐
//!                                             ▲                                       │
//!                                             └──────────── pause ◄───────────── yes ─┘
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::{RunId, RunStatus};
use crate::store::Prune;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Completed runs are kept this long by default (`--retain-completed`).
pub const DEFAULT_COMPLETED: Duration = Duration::from_secs(14 * 24 * 3600);
/// Cancelled runs (`--retain-cancelled`).
pub const DEFAULT_CANCELLED: Duration = Duration::from_secs(14 * 24 * 3600);
/// Failed and suppressed runs (`--retain-failed`).
pub const DEFAULT_FAILED: Duration = Duration::from_secs(90 * 24 * 3600);
/// A run with a unique key is kept at least this long after its end.
pub const KEY_WINDOW: Duration = DAY;

/// The statuses retention deletes, in the order a pass takes them.
pub const FINISHED: [RunStatus; 4] = [
    RunStatus::Completed,
    RunStatus::Cancelled,
    RunStatus::Failed,
    RunStatus::Suppressed,
];

/// How long each finished status is kept (`None`: forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// How long completed runs are kept after they ended ([`DEFAULT_COMPLETED`]: 14 days);
    /// `None`: forever.
    pub completed: Option<Duration>,
    /// How long cancelled runs are kept after they ended ([`DEFAULT_CANCELLED`]: 14 days);
    /// `None`: forever.
    pub cancelled: Option<Duration>,
    /// Failed and suppressed runs.
    pub failed: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            completed: Some(DEFAULT_COMPLETED),
            cancelled: Some(DEFAULT_CANCELLED),
            failed: Some(DEFAULT_FAILED),
        }
    }
}

impl Retention {
    /// How long runs of `status` are kept; `None` for forever and for statuses that are
    /// not finished (retention never deletes those).
    pub fn of(&self, status: RunStatus) -> Option<Duration> {
        match status {
            RunStatus::Completed => self.completed,
            RunStatus::Cancelled => self.cancelled,
            RunStatus::Failed | RunStatus::Suppressed => self.failed,
            _ => None,
        }
    }

    /// A tenant's own retention within this one, the operator's maximum: each status it
    /// names (`Some`: `None` for forever) replaces the operator's, and may not keep runs
    /// longer than the operator does (forever only when the operator keeps forever).
    pub fn narrowed(
        &self,
        completed: Option<Option<Duration>>,
        cancelled: Option<Option<Duration>>,
        failed: Option<Option<Duration>>,
    ) -> Result<Retention, String> {
        let within = |what: &str, operator: Option<Duration>, asked: Option<Option<Duration>>| {
            match (operator, asked) {
                (_, None) => Ok(operator),
                (None, Some(asked)) => Ok(asked),
                (Some(max), Some(Some(asked))) if asked <= max => Ok(Some(asked)),
                (Some(max), Some(asked)) => Err(format!(
                    "{what} runs may be kept at most {} s here (the operator's --retain-{what}), not {}",
                    max.as_secs(),
                    asked.map_or_else(
                        || "forever".to_owned(),
                        |asked| format!("{} s", asked.as_secs())
                    )
                )),
            }
        };
        let checked = |what, operator, asked: Option<Option<Duration>>| {
            if let Some(Some(asked)) = asked
                && asked.is_zero()
            {
                return Err(format!(
                    "{what} runs kept 0 s would be deleted as they end: give a duration, or off"
                ));
            }
            within(what, operator, asked)
        };
        Ok(Retention {
            completed: checked("completed", self.completed, completed)?,
            cancelled: checked("cancelled", self.cancelled, cancelled)?,
            failed: checked("failed", self.failed, failed)?,
        })
    }

    /// The first batch of each status a pass at `now` deletes: runs of `tenant` (every
    /// tenant: `None`) but `skip_tenants`, never one of `keep`, never the newest of a key
    /// prefixed by one of `keep_newest_of`, at most `limit` each.
    pub fn batches(
        &self,
        now: DateTime<Utc>,
        tenant: Option<&str>,
        skip_tenants: &[String],
        keep: &[RunId],
        keep_newest_of: &[String],
        limit: usize,
    ) -> Vec<Prune> {
        let before = |kept: Duration| {
            now.checked_sub_signed(
                chrono::Duration::from_std(kept).unwrap_or(chrono::Duration::MAX),
            )
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
        };
        FINISHED
            .iter()
            .filter_map(|status| {
                let kept = self.of(*status)?;
                Some(Prune {
                    status: *status,
                    tenant: tenant.map(str::to_owned),
                    skip_tenants: skip_tenants.to_vec(),
                    finished_before: before(kept),
                    keyed_finished_before: before(kept.max(KEY_WINDOW)),
                    keep: keep.to_vec(),
                    keep_newest_of: keep_newest_of.to_vec(),
                    limit,
                })
            })
            .collect()
    }
}

/// `--retain-*`'s value: a duration, or `off` (keep forever).
pub fn parse_kept(
    text: &str,
    parse: impl Fn(&str) -> Result<Duration, String>,
) -> Result<Option<Duration>, String> {
    match text.trim() {
        "off" | "forever" => Ok(None),
        other => {
            let kept = parse(other)?;
            if kept.is_zero() {
                return Err(
                    "a retention of 0 would delete every run as it ends: give a duration, or off"
                        .into(),
                );
            }
            Ok(Some(kept))
        }
    }
}

/// Runs deleted by retention in this process, per status (for `/metrics`).
#[derive(Debug, Default)]
pub struct PruneCounters {
    deleted: [AtomicU64; 4],
    passes: AtomicU64,
}

impl PruneCounters {
    /// Count `deleted` runs of `status` (a finished status; any other is ignored).
    pub fn add(&self, status: RunStatus, deleted: u64) {
        if let Some(at) = FINISHED.iter().position(|finished| *finished == status) {
            self.deleted[at].fetch_add(deleted, Ordering::Relaxed);
        }
    }

    /// Count one finished retention pass.
    pub fn pass_done(&self) {
        self.passes.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs deleted of each finished status, in [`FINISHED`]'s order.
    pub fn deleted(&self) -> [(RunStatus, u64); 4] {
        std::array::from_fn(|at| (FINISHED[at], self.deleted[at].load(Ordering::Relaxed)))
    }

    /// Retention passes finished in this process.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_status_gets_its_cutoff_and_keyed_runs_the_key_window_at_least() {
        let now = DateTime::parse_from_rfc3339("2026-12-31T00:00:00Z")
            .expect("an instant")
            .with_timezone(&Utc);
        let retention = Retention {
            completed: Some(Duration::from_secs(3600)),
            cancelled: None,
            failed: Some(Duration::from_secs(30 * 24 * 3600)),
        };
        let batches = retention.batches(now, None, &[], &[], &["poll:".into()], 500);
        let statuses: Vec<RunStatus> = batches.iter().map(|batch| batch.status).collect();
        assert_eq!(
            statuses,
            [
                RunStatus::Completed,
                RunStatus::Failed,
                RunStatus::Suppressed
            ],
            "cancelled runs are kept forever"
        );
        let completed = &batches[0];
        assert_eq!(completed.finished_before, now - chrono::Duration::hours(1));
        assert_eq!(
            completed.keyed_finished_before,
            now - chrono::Duration::hours(24),
            "a keyed run stays a day"
        );
        assert_eq!(
            batches[1].keyed_finished_before, batches[1].finished_before,
            "30 days is past the key window"
        );
        assert_eq!(completed.limit, 500);
        assert_eq!(
            Retention::default().of(RunStatus::Suppressed),
            Some(DEFAULT_FAILED)
        );
        assert_eq!(
            Retention::default().of(RunStatus::Running),
            None,
            "never an unfinished status"
        );
    }

    #[test]
    fn a_tenant_keeps_runs_shorter_than_the_operator_never_longer() {
        let operator = Retention {
            cancelled: None,
            ..Retention::default()
        };
        let week = Duration::from_secs(7 * 24 * 3600);
        let narrowed = operator
            .narrowed(Some(Some(week)), Some(None), None)
            .expect("within");
        assert_eq!(narrowed.completed, Some(week), "shorter than 14 days");
        assert_eq!(
            narrowed.cancelled, None,
            "forever, as the operator keeps cancelled runs"
        );
        assert_eq!(
            narrowed.failed,
            Some(DEFAULT_FAILED),
            "not named: the operator's"
        );
        let err = operator
            .narrowed(Some(None), None, None)
            .expect_err("forever is longer");
        assert!(
            err.contains("completed runs may be kept at most 1209600 s") && err.contains("forever"),
            "{err}"
        );
        let err = operator
            .narrowed(None, None, Some(Some(DEFAULT_FAILED * 2)))
            .expect_err("longer");
        assert!(err.contains("--retain-failed"), "{err}");
        assert!(
            operator
                .narrowed(Some(Some(Duration::ZERO)), None, None)
                .is_err(),
            "never 0"
        );
    }

    #[test]
    fn a_retention_is_a_duration_or_off_never_zero() {
        let parse = |text: &str| match text {
            "14d" => Ok(Duration::from_secs(14 * 24 * 3600)),
            "0s" => Ok(Duration::ZERO),
            other => Err(format!("not a duration: {other}")),
        };
        assert_eq!(parse_kept("off", parse), Ok(None));
        assert_eq!(parse_kept("14d", parse), Ok(Some(DEFAULT_COMPLETED)));
        assert!(parse_kept("0s", parse).is_err_and(|err| err.contains("every run")));
        assert!(parse_kept("soon", parse).is_err());
    }
}
