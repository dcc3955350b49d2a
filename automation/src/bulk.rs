//! Bulk actions: retry or cancel every automation run of a tenant that matches a search
//! (the filters of `GET /api/runs`, [`crate::run_search`]), not one page of it.
//!
//! A bulk action is itself a durable engine run of kind [`BULK_KIND`], of the tenant that
//! asked: the request answers its id at once, a worker walks the matches page by page,
//! and its checkpoint is the progress (`GET /api/runs/bulk/{id}`). Cancelling it stops
//! it between two runs; what it did stays done.
//!
//! ```text
//!  POST /api/runs/bulk ─► run runs:bulk (queued) ─► worker:
//!     counting: pages of `batch` runs, newest first, before the job's own id
//!               (runs created after the request are not part of it) ── total
//!     acting:   the same walk again; each match decided (plan) and acted on,
//!               a checkpoint after each page ── acted / skipped / errors
//!     done:     the progress is the run's result
//! ```
//!
//! **Each run acted on once, across a crash.** The checkpoint follows each page, so a
//! crash replays at most the page in flight. What the replay meets is told apart by the
//! run itself ([`decide`]): a retry acts only on a failed or suppressed run that has not
//! changed since the bulk action was asked (a run this job retried has changed, even if
//! it failed again since), and a cancel only on a run that is neither finished nor
//! already asked to cancel. So a replayed page skips what it did before; its runs count
//! as skipped then, never acted on twice.
//!
//! **Memory** is one page of runs and the counters, whatever the number of matches
//! (`fronta bench bulk` measures it over a million).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fronta_desk::TicketId;
use fronta_engine::registry::StopReason;
use fronta_engine::store::{CancelReply, RetryReply};
use fronta_engine::{
    EngineError, KindConfig, Outcome, Registry, Run, RunContext, RunFilter, RunId, RunStore,
    StoreError,
};
use serde::{Deserialize, Serialize};

use crate::executor::AUTOMATION_KIND;
use crate::run_search::{RunSearch, SearchText};

/// The kind of a bulk action's run.
pub const BULK_KIND: &str = "runs:bulk";

/// Runs read per page (and per checkpoint) by default.
pub const DEFAULT_BULK_BATCH: usize = 200;

/// The longest one bulk action may take (a million matches take minutes).
pub const BULK_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// What a bulk action does to each match.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkAction {
    /// A failed or suppressed run is queued again from its checkpoint, on its own version
    /// (what `POST /api/runs/{id}/retry` does).
    Retry,
    /// A queued or scheduled run is cancelled at once; a running one is asked to stop.
    Cancel,
}

impl BulkAction {
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
        }
    }
}

/// The filter, as typed: the names and forms of `GET /api/runs`' query parameters
/// (`status` may list several, comma separated). The ticket is stored resolved to its id.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BulkFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
}

impl BulkFilter {
    /// The search it asks for, the ticket already resolved to an id (the request
    /// resolves a number with the desk before it stores the filter).
    pub fn search(&self) -> Result<RunSearch, String> {
        let mut search = RunSearch::parse(&SearchText {
            status: self.status.as_deref(),
            automation: self.automation.as_deref(),
            version: self.version.as_deref(),
            trigger: self.trigger.as_deref(),
            from: self.from.as_deref(),
            to: self.to.as_deref(),
            q: self.q.as_deref(),
        })?;
        if let Some(ticket) = self
            .ticket
            .as_deref()
            .filter(|text| !text.trim().is_empty())
        {
            search.ticket = Some(
                ticket
                    .trim()
                    .parse::<TicketId>()
                    .map_err(|_| format!("ticket must be a ticket id, got {ticket:?}"))?,
            );
        }
        Ok(search)
    }
}

/// A bulk action's payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BulkPayload {
    pub action: BulkAction,
    pub filter: BulkFilter,
    /// Who asked (`api`, `cli`), for the lines of the runs it acts on.
    pub by: String,
}

/// Where a bulk action is.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Counting the matches (the total of the progress bar).
    #[default]
    Counting,
    /// Acting on them.
    Acting,
    /// Every match was met.
    Done,
}

/// A bulk action's progress: its checkpoint, and its result once done.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BulkProgress {
    pub phase: Phase,
    /// The next page starts before this run (`None`: at the job itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Runs read in this phase.
    pub scanned: u64,
    /// Matches found by the count.
    pub total: u64,
    /// Matches met while acting.
    pub matched: u64,
    /// Matches acted on (retried; cancelled or asked to stop).
    pub acted: u64,
    /// Matches left alone, with why in `skips`.
    pub skipped: u64,
    /// Matches whose action the store refused.
    pub errors: u64,
    /// Why matches were skipped: a reason and how many times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skips: Vec<(String, u64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl BulkProgress {
    /// The progress a run of [`BULK_KIND`] holds: its result when it completed, else its
    /// last checkpoint, else none yet.
    pub fn of(run: &Run) -> BulkProgress {
        run.result
            .as_ref()
            .and_then(|result| serde_json::from_value(result.clone()).ok())
            .or_else(|| {
                run.state
                    .as_deref()
                    .and_then(|bytes| serde_json::from_slice(bytes).ok())
            })
            .unwrap_or_default()
    }

    /// Matches met while acting, of those counted, as a whole percentage (0 while
    /// counting; 100 when done, even if runs changed between the count and the act).
    pub fn percent(&self) -> u64 {
        match self.phase {
            Phase::Counting => 0,
            Phase::Done => 100,
            Phase::Acting if self.total == 0 => 100,
            Phase::Acting => (self.matched * 100 / self.total).min(99),
        }
    }

    fn skip(&mut self, reason: String) {
        self.skipped += 1;
        match self.skips.iter_mut().find(|(known, _)| *known == reason) {
            Some((_, count)) => *count += 1,
            None => self.skips.push((reason, 1)),
        }
    }
}

/// What a bulk action does with one match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Act,
    Skip(String),
}

/// Whether `action`, asked at `asked_at`, acts on `run` (a match): see the module's
/// "each run acted on once".
pub fn decide(action: BulkAction, run: &Run, asked_at: DateTime<Utc>) -> Decision {
    match action {
        BulkAction::Retry if !run.status.is_retried_by_hand() => Decision::Skip(format!(
            "{}: only failed and suppressed runs are retried",
            run.status
        )),
        BulkAction::Retry if run.updated_at >= asked_at => {
            Decision::Skip("changed since the bulk retry was asked".into())
        }
        BulkAction::Cancel if run.status.is_terminal() => {
            Decision::Skip(format!("already {}", run.status))
        }
        BulkAction::Cancel if run.cancel_requested => {
            Decision::Skip("a cancel was already requested".into())
        }
        _ => Decision::Act,
    }
}

/// What one walk over a tenant's runs is: whose, from where, and for which action.
#[derive(Debug, Clone)]
pub struct Walk<'a> {
    pub tenant: &'a str,
    /// The walk reads runs created before this one (the bulk action's own run: what was
    /// created after the request is not part of it).
    pub start: RunId,
    /// When the action was asked ([`decide`]).
    pub asked_at: DateTime<Utc>,
    pub action: BulkAction,
    pub search: &'a RunSearch,
    /// Runs read per page.
    pub batch: usize,
}

/// One page of a walk: reads up to `batch` runs before the progress' cursor, and counts
/// or acts on the matches. Returns the progress after it (not yet saved) and whether the
/// walk is over.
pub async fn step(
    store: &dyn RunStore,
    walk: &Walk<'_>,
    mut progress: BulkProgress,
) -> Result<(BulkProgress, bool), StoreError> {
    let before = match progress.cursor.as_deref() {
        Some(cursor) => cursor.parse::<uuid::Uuid>().map(RunId).map_err(|_| {
            StoreError::Invalid(format!(
                "the checkpoint's cursor {cursor:?} is not a run id"
            ))
        })?,
        None => walk.start,
    };
    let page = store
        .run_list(RunFilter {
            status: walk.search.store_status(),
            kind: Some(AUTOMATION_KIND.into()),
            tenant: Some(walk.tenant.to_owned()),
            before: Some(before),
            limit: walk.batch,
        })
        .await?;
    let last_page = page.len() < walk.batch;
    let mut to_act = Vec::new();
    for run in &page {
        progress.scanned += 1;
        progress.cursor = Some(run.id.to_string());
        if !walk.search.matches(run) {
            continue;
        }
        match progress.phase {
            Phase::Counting => progress.total += 1,
            Phase::Acting => {
                progress.matched += 1;
                match decide(walk.action, run, walk.asked_at) {
                    Decision::Act => to_act.push(run),
                    Decision::Skip(reason) => progress.skip(reason),
                }
            }
            Phase::Done => {}
        }
    }
    // The page's actions in one call: one transaction and one commit for the page where
    // the store can, instead of one flush a run.
    let ids: Vec<RunId> = to_act.iter().map(|run| run.id).collect();
    let answers = act(store, walk.action, ids).await?;
    for (run, outcome) in to_act.iter().zip(answers) {
        match outcome {
            Ok(None) => progress.acted += 1,
            Ok(Some(reason)) => progress.skip(reason),
            Err(err) => {
                progress.errors += 1;
                progress.last_error = Some(format!("run {}: {err}", run.id));
            }
        }
    }
    if !last_page {
        return Ok((progress, false));
    }
    progress.cursor = None;
    progress.scanned = 0;
    Ok(match progress.phase {
        // The count is the total; a second walk acts.
        Phase::Counting => (
            BulkProgress {
                phase: Phase::Acting,
                ..progress
            },
            false,
        ),
        _ => (
            BulkProgress {
                phase: Phase::Done,
                ..progress
            },
            true,
        ),
    })
}

/// How many runs of `tenant` match `search` now, reading at most `scan_max` runs: the
/// count and whether it is exact (`false`: at least that many; the scan stopped).
pub async fn count(
    store: &dyn RunStore,
    tenant: &str,
    search: &RunSearch,
    scan_max: u64,
) -> Result<(u64, bool), StoreError> {
    let walk = Walk {
        tenant,
        start: RunId::new_v7(),
        asked_at: Utc::now(),
        action: BulkAction::Retry,
        search,
        batch: DEFAULT_BULK_BATCH.max(1000),
    };
    let mut progress = BulkProgress::default();
    let mut read = 0u64;
    loop {
        let before = progress.scanned;
        let (next, _) = step(store, &walk, progress).await?;
        if next.phase != Phase::Counting {
            return Ok((next.total, true));
        }
        read += next.scanned - before;
        if read >= scan_max {
            return Ok((next.total, false));
        }
        progress = next;
    }
}

/// Acts on the runs the plan chose, in order: for each, `None` when done, else why the
/// store said no (or its error). The outer error is the whole batch's.
async fn act(
    store: &dyn RunStore,
    action: BulkAction,
    ids: Vec<RunId>,
) -> Result<Vec<Result<Option<String>, StoreError>>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(match action {
        BulkAction::Retry => store
            .run_retry_many(ids)
            .await?
            .into_iter()
            .map(|reply| {
                reply.map(|reply| match reply {
                    RetryReply::Requeued => None,
                    RetryReply::NotFailed(status) => Some(format!(
                        "{status}: only failed and suppressed runs are retried"
                    )),
                })
            })
            .collect(),
        BulkAction::Cancel => store
            .run_request_cancel_many(ids)
            .await?
            .into_iter()
            .map(|reply| {
                reply.map(|reply| match reply {
                    CancelReply::Cancelled | CancelReply::Requested => None,
                    CancelReply::AlreadyFinished(status) => Some(format!("already {status}")),
                })
            })
            .collect(),
    })
}

/// The handler of [`BULK_KIND`]: walks page by page, saving the progress after each.
pub async fn execute(store: Arc<dyn RunStore>, batch: usize, ctx: RunContext) -> Outcome {
    let payload: BulkPayload = match serde_json::from_value(ctx.run.payload.clone()) {
        Ok(payload) => payload,
        Err(err) => return Outcome::Fail(format!("not a bulk action's payload: {err}")),
    };
    let search = match payload.filter.search() {
        Ok(search) => search,
        Err(err) => return Outcome::Fail(format!("the filter: {err}")),
    };
    let mut progress = BulkProgress::of(&ctx.run);
    if progress.phase == Phase::Done {
        return Outcome::Done(serde_json::to_value(&progress).ok());
    }
    tracing::info!(run = %ctx.run.id, action = payload.action.as_str(), phase = ?progress.phase,
        "bulk action: walking the matches");
    let walk = Walk {
        tenant: &ctx.run.tenant,
        start: ctx.run.id,
        asked_at: ctx.run.created_at,
        action: payload.action,
        search: &search,
        batch,
    };
    loop {
        if let Some(reason) = ctx.signal.reason() {
            return match reason {
                StopReason::Cancel => Outcome::Fail(format!(
                    "cancelled after {} of {} matches ({} acted on)",
                    progress.matched, progress.total, progress.acted
                )),
                StopReason::LeaseLost | StopReason::Shutdown => {
                    Outcome::Fail("stopped; resumes from its checkpoint".into())
                }
            };
        }
        let (next, finished) = match step(store.as_ref(), &walk, progress.clone()).await {
            Ok(stepped) => stepped,
            Err(err) => {
                return Outcome::Retry {
                    after: None,
                    reason: format!("reading runs: {err}"),
                };
            }
        };
        progress = next;
        let state = serde_json::to_vec(&progress).unwrap_or_default();
        if ctx.checkpointer.save(state).await.is_err() {
            return Outcome::Fail("lease lost".into());
        }
        if finished {
            tracing::info!(run = %ctx.run.id, action = payload.action.as_str(),
                matched = progress.matched, acted = progress.acted, skipped = progress.skipped,
                errors = progress.errors, "bulk action: done");
            return Outcome::Done(serde_json::to_value(&progress).ok());
        }
    }
}

/// Registers [`BULK_KIND`]: durable with `lease`, pages of `batch` runs (at least 1).
pub fn register(
    registry: &mut Registry,
    store: Arc<dyn RunStore>,
    lease: Duration,
    batch: usize,
) -> Result<(), EngineError> {
    let batch = batch.clamp(1, RunFilter::MAX_PAGE);
    registry.register(
        BULK_KIND,
        KindConfig::durable(lease, BULK_TIMEOUT).with_payload_check(|payload| {
            let payload: BulkPayload = serde_json::from_value(payload.clone())
                .map_err(|err| format!("not a bulk action's payload: {err}"))?;
            payload.filter.search().map(|_| ())
        }),
        move |ctx: RunContext| execute(store.clone(), batch, ctx),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fronta_engine::{RunStatus, Trigger};

    fn run(status: RunStatus, updated: i64, cancel_requested: bool) -> Run {
        let at = DateTime::from_timestamp(updated, 0).expect("an instant");
        Run {
            id: RunId::new_v7(),
            tenant: "t".into(),
            kind: AUTOMATION_KIND.into(),
            payload: serde_json::json!({}),
            state: None,
            trigger: Trigger::Webhook,
            unique_key: None,
            priority: 0,
            status,
            run_at: at,
            attempts: 0,
            max_retries: 0,
            reclaims: 0,
            parks: 0,
            locked_by: None,
            locked_until: None,
            heartbeat_at: None,
            cancel_requested,
            created_at: at,
            updated_at: at,
            started_at: None,
            completed_at: None,
            failed_at: None,
            cancelled_at: None,
            last_error: None,
            result: None,
        }
    }

    #[test]
    fn a_retry_acts_once_on_a_failed_run_unchanged_since_it_was_asked() {
        let asked = DateTime::from_timestamp(1_000, 0).expect("an instant");
        assert_eq!(
            decide(
                BulkAction::Retry,
                &run(RunStatus::Failed, 999, false),
                asked
            ),
            Decision::Act
        );
        assert_eq!(
            decide(
                BulkAction::Retry,
                &run(RunStatus::Suppressed, 10, false),
                asked
            ),
            Decision::Act
        );
        let again = decide(
            BulkAction::Retry,
            &run(RunStatus::Failed, 1_001, false),
            asked,
        );
        assert_eq!(
            again,
            Decision::Skip("changed since the bulk retry was asked".into()),
            "retried by this job (then failed again): not a second time"
        );
        let Decision::Skip(reason) = decide(
            BulkAction::Retry,
            &run(RunStatus::Queued, 999, false),
            asked,
        ) else {
            panic!("a queued run is not retried");
        };
        assert!(reason.starts_with("queued:"), "{reason}");
    }

    #[test]
    fn a_cancel_acts_once_on_a_run_still_going() {
        let asked = DateTime::from_timestamp(1_000, 0).expect("an instant");
        for status in [RunStatus::Queued, RunStatus::Scheduled, RunStatus::Running] {
            assert_eq!(
                decide(BulkAction::Cancel, &run(status, 2_000, false), asked),
                Decision::Act,
                "{status}"
            );
        }
        assert_eq!(
            decide(
                BulkAction::Cancel,
                &run(RunStatus::Running, 2_000, true),
                asked
            ),
            Decision::Skip("a cancel was already requested".into())
        );
        assert_eq!(
            decide(
                BulkAction::Cancel,
                &run(RunStatus::Completed, 2, false),
                asked
            ),
            Decision::Skip("already completed".into())
        );
    }

    #[test]
    fn progress_reads_as_a_percentage_and_counts_skips_by_reason() {
        let mut progress = BulkProgress {
            phase: Phase::Acting,
            total: 8,
            matched: 2,
            ..BulkProgress::default()
        };
        assert_eq!(progress.percent(), 25);
        progress.matched = 9;
        assert_eq!(progress.percent(), 99, "runs changed since the count");
        progress.skip("already completed".into());
        progress.skip("already completed".into());
        progress.skip("already failed".into());
        assert_eq!(progress.skipped, 3);
        assert_eq!(
            progress.skips,
            vec![
                ("already completed".to_owned(), 2),
                ("already failed".to_owned(), 1)
            ]
        );
        progress.phase = Phase::Done;
        assert_eq!(progress.percent(), 100);
    }

    #[test]
    fn a_filter_names_what_it_does_not_understand() {
        let payload: Result<BulkPayload, _> = serde_json::from_value(serde_json::json!({
            "action": "retry", "filter": {"stauts": "failed"}, "by": "api"
        }));
        let err = payload.expect_err("an unknown filter").to_string();
        assert!(err.contains("stauts"), "{err}");
        let filter = BulkFilter {
            status: Some("failde".into()),
            ..BulkFilter::default()
        };
        assert!(filter.search().expect_err("refused").contains("failde"));
        let filter = BulkFilter {
            ticket: Some("TK-1".into()),
            ..BulkFilter::default()
        };
        assert!(filter.search().expect_err("refused").contains("ticket id"));
    }
}
