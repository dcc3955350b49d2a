//! The [`RunStore`] port: everything the engine asks of storage, and nothing else.
//!
//! Stores (`fronta-store-sqlite`, `fronta-store-postgres`, and the memory store of
//! `fronta-sim`) implement it; the conformance suite in `fronta-store-tests` pins every
//! line of the contract below on every store. A behaviour that passes on one store and not on another is a bug.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::error::StoreError;
use crate::liveness::{ProcessFacts, ProcessId, ProcessList};
use crate::model::{NewRun, OwnerToken, Run, RunId, RunStatus};

/// The answer of every [`RunStore`] method: the value, or a [`StoreError`] saying why not.
pub type StoreResult<T> = std::result::Result<T, StoreError>;

/// What an enqueue did with one [`NewRun`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new row was inserted.
    Inserted(RunId),
    /// A non-terminal run with the same unique key exists; nothing was inserted.
    Existing(RunId),
}

impl Enqueued {
    /// The run's id, whether it was inserted now or already held the unique key.
    pub fn id(self) -> RunId {
        match self {
            Enqueued::Inserted(id) | Enqueued::Existing(id) => id,
        }
    }
}

/// One claim round.
#[derive(Debug, Clone)]
pub struct ClaimParams {
    /// At most this many runs (the worker's free slots).
    pub limit: usize,
    /// The lease of kinds without one of their own.
    pub default_lease: Duration,
    /// Per-kind leases (durable kinds).
    pub leases: HashMap<String, Duration>,
    /// A reclaim that would make `reclaims` exceed this fails the run instead.
    pub max_reclaims: u32,
    /// The claiming process in the registry ([`crate::liveness`]): written as the holder
    /// of every run claimed (`locked_proc`), so its runs can be taken over when it dies.
    pub holder: Option<ProcessId>,
}

impl ClaimParams {
    /// The lease a run of `kind` is claimed with: the kind's own lease from `leases` (a
    /// durable kind), else `default_lease`.
    pub fn lease_of(&self, kind: &str) -> Duration {
        self.leases.get(kind).copied().unwrap_or(self.default_lease)
    }
}

/// A run now owned by the claimer.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    /// The run as the claim left it: `status` running, `started_at` set, `reclaims` already
    /// counting this claim if it was a reclaim.
    pub run: Run,
    /// The fresh owner token of this claim: every later write about the run (heartbeat,
    /// checkpoint, finish) must carry it.
    pub owner: OwnerToken,
    /// The previous owner's lease had expired (`run.reclaims` already counts this one).
    pub reclaimed: bool,
}

/// What [`RunStore::run_enqueue_started`] did with its run.
#[derive(Debug, Clone)]
pub enum HandOff {
    /// Inserted already running and owned by the caller, who must start it (or give it
    /// back with `Release`): nothing else will.
    Started(Box<ClaimedRun>),
    /// Inserted pending (or an existing holder of its unique key answered), exactly as
    /// [`RunStore::run_enqueue_many`] would have: workers claim it as usual.
    Queued(Enqueued),
}

/// The result of one claim round.
#[derive(Debug, Clone, Default)]
pub struct ClaimBatch {
    /// Runs now owned by the claimer, at most `limit`, to be handed to their handlers.
    pub claimed: Vec<ClaimedRun>,
    /// Expired runs whose reclaim would have exceeded `max_reclaims`: now `failed`
    /// ("crash loop"). Their handlers never start.
    pub crash_looped: Vec<Run>,
    /// Expired runs whose cancel had been requested: now `cancelled`, never restarted.
    pub cancelled: Vec<RunId>,
}

/// Renew one lease (heartbeat).
#[derive(Debug, Clone, Copy)]
pub struct LeaseRenewal {
    /// The run whose lease is renewed.
    pub id: RunId,
    /// The owner token of the caller's claim; the renewal applies only while the row holds
    /// it.
    pub owner: OwnerToken,
    /// The new lease, counted from the store's now: `locked_until = now + lease`.
    pub lease: Duration,
}

/// The store's answer to one [`LeaseRenewal`] of a heartbeat round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReply {
    /// The run this answer is about.
    pub id: RunId,
    /// The row is no longer ours: the handler must be stopped and the run abandoned.
    pub lost: bool,
    /// Somebody asked to cancel this run.
    pub cancel_requested: bool,
}

/// One checkpoint of a durable run ([`RunStore::run_checkpoint`]): the handler's saved
/// progress, written owner-checked.
#[derive(Debug, Clone)]
pub struct CheckpointParams {
    /// The run whose checkpoint is saved.
    pub id: RunId,
    /// The owner token of the caller's claim; nothing is written unless the row holds it.
    pub owner: OwnerToken,
    /// The handler's progress, opaque bytes: it replaces the previous checkpoint and is
    /// handed back in [`Run::state`] when the run resumes (after a retry, a reclaim or a
    /// manual retry).
    pub state: Vec<u8>,
    /// The lease is renewed by the same write.
    pub lease: Duration,
}

/// How a claimed run leaves the worker. Decided by [`crate::machine`], written by a store.
#[derive(Debug, Clone, PartialEq)]
pub enum FinishAction {
    /// → `completed`.
    Complete {
        /// The handler's result, stored on the run ([`Run::result`]).
        result: Option<serde_json::Value>,
    },
    /// → `failed`.
    Fail {
        /// Why, stored in [`Run::last_error`].
        error: String,
    },
    /// → pending at now + delay, `attempts += 1`.
    Retry {
        /// How long after the store's now the run is due again.
        delay: Duration,
        /// Why this attempt did not finish, stored in [`Run::last_error`].
        error: String,
    },
    /// → pending at now + delay; no counter moves.
    Snooze {
        /// How long after the store's now the run is due again.
        delay: Duration,
    },
    /// → pending at now + delay, `parks += 1` (no handler for the kind here).
    Park {
        /// How long after the store's now the run is due again
        /// ([`crate::machine::park_delay`]).
        delay: Duration,
        /// Which kind had no handler, stored in [`Run::last_error`].
        error: String,
    },
    /// → `cancelled` (the handler observed a requested cancel).
    Cancel,
    /// → `suppressed`, the reason in `last_error` (a guard stopped it on purpose).
    Suppress {
        /// Why the guard stopped it, stored in [`Run::last_error`].
        reason: String,
    },
    /// → pending and due at once; no counter moves (graceful shutdown gave it back).
    Release,
}

impl FinishAction {
    /// The action's name in lower case (`"complete"`, `"retry"`, …), for logs and metrics
    /// labels.
    pub fn name(&self) -> &'static str {
        match self {
            FinishAction::Complete { .. } => "complete",
            FinishAction::Fail { .. } => "fail",
            FinishAction::Retry { .. } => "retry",
            FinishAction::Snooze { .. } => "snooze",
            FinishAction::Park { .. } => "park",
            FinishAction::Cancel => "cancel",
            FinishAction::Suppress { .. } => "suppress",
            FinishAction::Release => "release",
        }
    }
}

/// One finished run for [`RunStore::run_finish_many`]: what to write, owner-checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    /// The run to finish.
    pub id: RunId,
    /// The owner token of the caller's claim; the finish is refused (lease lost) unless the
    /// row holds it.
    pub owner: OwnerToken,
    /// What to write (decided by [`crate::machine`]).
    pub action: FinishAction,
}

/// The store's answer to one [`Finish`], in the order of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReply {
    /// Written; the run's status is now this.
    Applied {
        /// The run written.
        id: RunId,
        /// Its status after the write.
        status: RunStatus,
    },
    /// Refused by fencing: nothing was written.
    LeaseLost {
        /// The run whose finish was refused.
        id: RunId,
    },
}

/// What [`RunStore::run_request_cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReply {
    /// It was pending: cancelled now.
    Cancelled,
    /// It is running: the flag is set; the worker will stop it.
    Requested,
    /// Already terminal: nothing changed.
    AlreadyFinished(RunStatus),
}

impl CancelReply {
    /// Whether the cancel changed the run (a person's request that did not leaves no
    /// audit entry, `crate::audit::unchanged`).
    pub fn changed(&self) -> bool {
        !matches!(self, CancelReply::AlreadyFinished(_))
    }
}

/// What a manual retry of a run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryReply {
    /// It was failed: it is queued again, due now, resuming from its checkpoint.
    Requeued,
    /// Only failed and suppressed runs are retried: nothing changed.
    NotFailed(RunStatus),
}

impl RetryReply {
    /// Whether the retry changed the run (see [`CancelReply::changed`]).
    pub fn changed(&self) -> bool {
        *self == RetryReply::Requeued
    }
}

/// Which runs [`RunStore::run_list`] answers, newest first: every given condition must
/// hold. The default lists the newest [`RunFilter::DEFAULT_PAGE`] runs of every tenant.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only runs in this status (`Scheduled` and `Queued` are told apart by `run_at`
    /// against the store's now); `None`: any status.
    pub status: Option<RunStatus>,
    /// Only runs of this kind; `None`: any kind.
    pub kind: Option<String>,
    /// Only runs of this tenant; `None`: every tenant's.
    pub tenant: Option<String>,
    /// Only runs created before this one (pagination cursor, newest first).
    pub before: Option<RunId>,
    /// 0 = the store's default page (100).
    pub limit: usize,
}

impl RunFilter {
    /// The page when `limit` is 0.
    pub const DEFAULT_PAGE: usize = 100;
    /// The largest page a store answers.
    pub const MAX_PAGE: usize = 10_000;

    /// How many runs this filter asks for, after the default and the cap.
    pub fn page(&self) -> usize {
        match self.limit {
            0 => Self::DEFAULT_PAGE,
            n => n.min(Self::MAX_PAGE),
        }
    }
}

/// One batch of [`RunStore::run_prune`].
#[derive(Debug, Clone, PartialEq)]
pub struct Prune {
    /// Completed, failed, cancelled or suppressed.
    pub status: RunStatus,
    /// Only this tenant's runs (`None`: every tenant's) …
    pub tenant: Option<String>,
    /// … but none of these tenants' (they have their own retention).
    pub skip_tenants: Vec<String>,
    /// Ended before this instant.
    pub finished_before: DateTime<Utc>,
    /// A run with a unique key: ended before this instant as well.
    pub keyed_finished_before: DateTime<Utc>,
    /// Never these runs.
    pub keep: Vec<RunId>,
    /// Never the newest run of a unique key with one of these prefixes.
    pub keep_newest_of: Vec<String>,
    /// The most runs this batch deletes (one short transaction).
    pub limit: usize,
}

impl Prune {
    /// Whether this batch may delete `run` (`newest_of_its_key`: no later run has its
    /// unique key) — the rule the stores' deletes encode, as the memory store applies it.
    pub fn allows(&self, run: &Run, newest_of_its_key: bool) -> bool {
        if run.status != self.status || !self.status.is_terminal() {
            return false;
        }
        let Some(ended) = run.finished_at() else {
            return false;
        };
        if ended >= self.finished_before {
            return false;
        }
        if self
            .tenant
            .as_ref()
            .is_some_and(|tenant| *tenant != run.tenant)
            || self.skip_tenants.contains(&run.tenant)
            || self.keep.contains(&run.id)
        {
            return false;
        }
        match &run.unique_key {
            None => true,
            Some(key) => {
                ended < self.keyed_finished_before
                    && !(newest_of_its_key
                        && self
                            .keep_newest_of
                            .iter()
                            .any(|prefix| key.starts_with(prefix.as_str())))
            }
        }
    }
}

/// Runs by status, with the counters summed over them, in all and per kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStats {
    /// Pending runs not yet due (`run_at` after the store's now).
    pub scheduled: u64,
    /// Pending runs that are due: waiting for a worker.
    pub queued: u64,
    /// Runs claimed by a worker (including those whose lease expired and wait to be
    /// reclaimed).
    pub running: u64,
    /// Completed runs the store still keeps (retention deletes old ones).
    pub completed: u64,
    /// Failed runs the store still keeps.
    pub failed: u64,
    /// Cancelled runs the store still keeps.
    pub cancelled: u64,
    /// Suppressed runs the store still keeps.
    pub suppressed: u64,
    /// Retries spent ([`Run::attempts`]), summed over the live runs and the finished ones
    /// kept.
    pub attempts: u64,
    /// Crash reclaims ([`Run::reclaims`]), summed as `attempts` is.
    pub reclaims: u64,
    /// Parks ([`Run::parks`]), summed as `attempts` is.
    pub parks: u64,
    /// The same status counts for each kind that has runs in the store.
    pub by_kind: std::collections::BTreeMap<String, StatusCounts>,
}

/// Runs by status (one kind's share of [`RunStats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusCounts {
    /// Pending runs of the kind not yet due.
    pub scheduled: u64,
    /// Pending runs of the kind that are due.
    pub queued: u64,
    /// Runs of the kind claimed by a worker.
    pub running: u64,
    /// Completed runs of the kind still kept.
    pub completed: u64,
    /// Failed runs of the kind still kept.
    pub failed: u64,
    /// Cancelled runs of the kind still kept.
    pub cancelled: u64,
    /// Suppressed runs of the kind still kept.
    pub suppressed: u64,
}

impl StatusCounts {
    /// The number of runs in `status`.
    pub fn count(&self, status: RunStatus) -> u64 {
        match status {
            RunStatus::Scheduled => self.scheduled,
            RunStatus::Queued => self.queued,
            RunStatus::Running => self.running,
            RunStatus::Completed => self.completed,
            RunStatus::Failed => self.failed,
            RunStatus::Cancelled => self.cancelled,
            RunStatus::Suppressed => self.suppressed,
        }
    }

    fn slot(&mut self, status: RunStatus) -> &mut u64 {
        match status {
            RunStatus::Scheduled => &mut self.scheduled,
            RunStatus::Queued => &mut self.queued,
            RunStatus::Running => &mut self.running,
            RunStatus::Completed => &mut self.completed,
            RunStatus::Failed => &mut self.failed,
            RunStatus::Cancelled => &mut self.cancelled,
            RunStatus::Suppressed => &mut self.suppressed,
        }
    }
}

impl RunStats {
    /// Every run counted, whatever its status.
    pub fn total(&self) -> u64 {
        self.scheduled
            + self.queued
            + self.running
            + self.completed
            + self.failed
            + self.cancelled
            + self.suppressed
    }

    /// The number of runs in `status`, over every kind.
    pub fn count(&self, status: RunStatus) -> u64 {
        match status {
            RunStatus::Scheduled => self.scheduled,
            RunStatus::Queued => self.queued,
            RunStatus::Running => self.running,
            RunStatus::Completed => self.completed,
            RunStatus::Failed => self.failed,
            RunStatus::Cancelled => self.cancelled,
            RunStatus::Suppressed => self.suppressed,
        }
    }

    /// Folds one group of a store's `GROUP BY kind, status` count into the totals and the
    /// kind's counts (both stores build their answer with it).
    pub fn add(&mut self, kind: &str, status: RunStatus, runs: u64, counters: [u64; 3]) {
        let [attempts, reclaims, parks] = counters;
        let total = match status {
            RunStatus::Scheduled => &mut self.scheduled,
            RunStatus::Queued => &mut self.queued,
            RunStatus::Running => &mut self.running,
            RunStatus::Completed => &mut self.completed,
            RunStatus::Failed => &mut self.failed,
            RunStatus::Cancelled => &mut self.cancelled,
            RunStatus::Suppressed => &mut self.suppressed,
        };
        *total += runs;
        self.attempts += attempts;
        self.reclaims += reclaims;
        self.parks += parks;
        match self.by_kind.get_mut(kind) {
            Some(counts) => *counts.slot(status) += runs,
            None => {
                let mut counts = StatusCounts::default();
                *counts.slot(status) = runs;
                self.by_kind.insert(kind.to_owned(), counts);
            }
        }
    }
}

/// Storage of runs.
///
/// # Contract
///
/// Time: every instant a store writes or compares (`run_at`, `locked_until`, due-ness,
/// lease expiry) comes from the store's clock — the database's own clock where it has
/// one that all processes share, an injected [`crate::Clock`] in tests. Delays in
/// parameters are relative to that clock. Times are kept to the millisecond.
///
/// Enqueue (`run_enqueue_many`):
/// - inserts every run in one transaction, all or nothing, and answers in input order;
/// - a run with a `unique_key` held by a non-terminal run (pending or running) of the same
///   tenant is not inserted: the answer is `Existing(id of that run)`; a terminal run frees
///   its key; keys of different tenants never collide;
/// - a new run has status pending, `attempts = reclaims = parks = 0`, due at `run_at`,
///   else now + `delay`, else now;
/// - wakes this store's enqueue signal ([`RunStore::enqueue_signal`]) after commit.
///
/// Claim (`run_claim`):
/// - takes at most `limit` runs among those due (pending with `run_at <= now`) and those
///   running with an expired lease (`locked_until < now`), oldest first by priority
///   (higher first) then `run_at`;
/// - fairness: it takes at most one run of a tenant before it takes a second run of any
///   tenant; its cost does not grow with the number of queued runs;
/// - every claimed run gets a fresh [`OwnerToken`], `status = running`,
///   `locked_until = now + lease of its kind`, `heartbeat_at = now`, and `started_at` if
///   it had none;
/// - an expired run is a reclaim: `reclaims += 1`, `attempts` untouched; when that would
///   exceed `max_reclaims` the run becomes `failed` (error "crash loop: …") and is
///   returned in `crash_looped`; when its cancel was requested it becomes `cancelled`
///   and is returned in `cancelled`; neither is handed to a handler;
/// - two concurrent claims (any processes) never return the same run.
///
/// Owner-checked writes (`run_heartbeat_many`, `run_checkpoint`, `run_finish_many`):
/// - apply only while the row is `running` and holds the caller's owner token; otherwise
///   they write nothing and answer lease lost (per run for the batched ones). A lease
///   that expired but was not yet reclaimed still belongs to its owner;
/// - heartbeat sets `locked_until = now + lease`, `heartbeat_at = now`, and answers the
///   run's `cancel_requested`; checkpoint stores the state and renews the lease the same way;
/// - finish clears the owner token and writes the action: `Complete` → completed with
///   `completed_at` and result, `last_error` cleared (an error of an earlier attempt is
///   history, not the state of a completed run); `Fail` → failed with `failed_at` and `last_error`;
///   `Retry` → pending at now + delay, `attempts += 1`, `last_error`; `Snooze` → pending
///   at now + delay; `Park` → pending at now + delay, `parks += 1`, `last_error`;
///   `Cancel` → cancelled with `cancelled_at`; `Suppress` → suppressed with `failed_at`
///   (its end; a manual retry clears it) and the reason in `last_error`; `Release` →
///   pending, due now;
/// - a cancel request wins over putting the run back: when the row has
///   `cancel_requested`, `Retry`, `Snooze`, `Park` and `Release` write `cancelled`
///   instead, and spend no counter. `Complete`, `Fail` and `Suppress` are written as they
///   are (they tell what happened);
/// - a terminal run is never changed by a finish (a late completion never overwrites a
///   cancel): the owner token was cleared, so the write is lease lost.
///
/// Hand-off (`run_enqueue_started`): one run, for a worker of this process that has a
/// free slot and found nothing due at its last claim (the dispatcher asks only then):
/// - the run is inserted *running* in one transaction, as if enqueued and claimed at the
///   same instant: a fresh owner token, `locked_until = now + lease`, `heartbeat_at =
///   started_at = now`, counters 0 — one commit where enqueue then claim take two — and
///   no enqueue signal is woken (nobody else has anything to claim);
/// - only when that overtakes nothing the contract orders: the run has no `delay` and no
///   `run_at`, no pending run of its tenant at its priority is due, and no other run holds
///   its unique key. Otherwise it is enqueued exactly as `run_enqueue_many` does it and
///   answered `Queued`;
/// - a store may always answer `Queued` (the default implementation does): the hand-off
///   is a shortcut, never a promise.
///
/// The hand-off records `holder` as the run's holder, as a claim does.
///
/// Process registry (`process_*`, [`crate::liveness`]):
/// - `process_register` writes (or rewrites) a process's row: its facts, `beat_at = now`;
///   `process_beat` sets `beat_at = now` and answers `false` (writing nothing) when the
///   row is gone (the process was taken over); `process_deregister` deletes the row;
///   `process_list` answers every row with the store's now;
/// - claims and hand-offs write their `holder` on the runs they take (`None`: no
///   holder); a reclaim writes the new holder;
/// - `process_takeover(dead)`, in one transaction: every *running* run held by `dead`
///   gets a lease that ended now (`locked_until` just before now), so the next claim
///   reclaims it exactly as an expired lease — a fresh owner token, `reclaims + 1`, the
///   old owner's writes refused from then on; until then the old owner token still
///   holds (the contract of an expired lease). Runs of other holders and finished or
///   pending runs are untouched; the row of `dead` is deleted; answers how many runs it
///   released (0 for an unknown process) and wakes the enqueue signal;
/// - a store without a registry answers `Invalid` (the default methods).
///
/// Cancel (`run_request_cancel`): pending → `cancelled` at once; running → the
/// `cancel_requested` flag (kept across reclaims), status unchanged; terminal → nothing;
/// unknown id → `NotFound`.
///
/// Manual retry (`run_retry`): a failed or suppressed run goes back to pending, due now,
/// keeping its checkpoint (`state`), its payload and its `last_error`, with a fresh budget
/// (`attempts`, `reclaims`, `parks` back to 0, `failed_at` cleared); any other status →
/// `NotFailed(status)`, nothing changed; unknown id → `NotFound`; when another
/// non-terminal run of the tenant holds its unique key → `Conflict`, nothing changed.
///
/// Prune (`run_prune`, retention — [`crate::retention`]): deletes at most `limit` runs of
/// the one finished `status` it names (completed, failed, cancelled or suppressed; a
/// status that is not finished deletes nothing), oldest end first, whose end is before
/// `finished_before` — and, for a run with a unique key, before `keyed_finished_before`
/// too — of `tenant` (all tenants: `None`) but none of `skip_tenants`; never a run in
/// `keep`, and never the newest run of a unique key that starts with one of
/// `keep_newest_of`. The status is checked by the delete itself: a run that is not
/// finished is never deleted, whatever it was when the caller looked. One short
/// transaction; answers how many went.
///
/// Reads (`run_get`, `run_list`, `run_stats`) see committed data only; `run_list` is
/// newest first; `scheduled` vs `queued` is judged against the store's now.
///
/// Flat reads: none of these grows with the finished history. `run_stats` counts the
/// finished runs from counters the writes keep in the same transaction (whatever path
/// makes the write: a finish, a cancel, a retry or restart that takes a run out of a
/// finished status, a delete), and the live runs through their own indexes; after any
/// sequence of writes it answers what a count of every row would. `run_list` of one
/// tenant walks an index that starts with the tenant.
///
/// Errors: a busy or unreachable database is `Unavailable` (the call may be repeated);
/// no call leaves a half-written change behind.
#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Insert `runs` in one transaction, all or nothing, and answer each in input order:
    /// `Inserted`, or `Existing` when a live run of its tenant holds its unique key (see
    /// Enqueue in the contract).
    async fn run_enqueue_many(&self, runs: Vec<NewRun>) -> StoreResult<Vec<Enqueued>>;

    /// Enqueue one run and, when it would overtake nothing, hand it straight to the
    /// caller already claimed with `lease` (see Hand-off above). The default enqueues it.
    async fn run_enqueue_started(
        &self,
        run: NewRun,
        lease: Duration,
        holder: Option<ProcessId>,
    ) -> StoreResult<HandOff> {
        let _ = (lease, holder);
        let mut answers = self.run_enqueue_many(vec![run]).await?;
        let answer = answers
            .pop()
            .ok_or_else(|| StoreError::Internal("the store answered no enqueue".into()))?;
        Ok(HandOff::Queued(answer))
    }

    /// Make one claim round: take up to `params.limit` due or expired runs, fairly between
    /// tenants, each with a fresh owner token and lease; fail crash loops and finish
    /// requested cancels of expired runs on the way (see Claim in the contract).
    async fn run_claim(&self, params: ClaimParams) -> StoreResult<ClaimBatch>;

    /// Write `finishes` ([`RunStore::run_finish_many`]) and make a claim round
    /// ([`RunStore::run_claim`]) in one call: a worker's claim round carries the finishes
    /// waiting to be written. A store that can writes both in one transaction (one
    /// commit; the finishes first, so a run they put back due now may be claimed by the
    /// round). The outer error: no finish was written (the claim was not made, or was
    /// rolled back with them); the inner one: the finishes were written and answered, the
    /// claim failed. The default makes the two calls one after the other (and
    /// [`RunStore::finishes_ride_claims`] says `false`: a worker then leaves its finishes
    /// to its completer, which writes them beside the claim instead of before it).
    async fn run_finish_and_claim(
        &self,
        finishes: Vec<Finish>,
        params: ClaimParams,
    ) -> StoreResult<(Vec<FinishReply>, StoreResult<ClaimBatch>)> {
        let replies = if finishes.is_empty() {
            Vec::new()
        } else {
            self.run_finish_many(finishes).await?
        };
        Ok((replies, self.run_claim(params).await))
    }

    /// Whether [`RunStore::run_finish_and_claim`] writes both in one transaction, so a
    /// worker's claim round should carry the finishes waiting to be written.
    fn finishes_ride_claims(&self) -> bool {
        false
    }

    /// Renew each lease in `leases` that its owner still holds, in one write where the
    /// store can, and answer each in order: whether it was lost and whether a cancel was
    /// requested.
    async fn run_heartbeat_many(
        &self,
        leases: Vec<LeaseRenewal>,
    ) -> StoreResult<Vec<HeartbeatReply>>;

    /// `Err(StoreError::LeaseLost)` when fenced.
    async fn run_checkpoint(&self, params: CheckpointParams) -> StoreResult<()>;

    /// Write each of `finishes`, owner-checked, and answer each in order: `Applied` with
    /// the status now stored (`cancelled` when a requested cancel won over a put-back), or
    /// `LeaseLost` when the row no longer holds the owner token.
    async fn run_finish_many(&self, finishes: Vec<Finish>) -> StoreResult<Vec<FinishReply>>;

    /// Ask to cancel run `id`: a pending run is cancelled at once, a running one gets the
    /// flag its worker delivers to the handler, a finished one is left alone.
    /// `Err(NotFound)` for an unknown id.
    async fn run_request_cancel(&self, id: RunId) -> StoreResult<CancelReply>;

    /// Start a failed or suppressed run again by hand: pending, due now, from its
    /// checkpoint, with its counters back to 0 (see Manual retry in the contract).
    async fn run_retry(&self, id: RunId) -> StoreResult<RetryReply>;

    /// [`RunStore::run_request_cancel`] of each of `ids`, answered in order, in one
    /// transaction where the store can (one commit for many: a bulk action's page). The
    /// outer error is the batch's (nothing of it was written); an inner one is that run's
    /// (an unknown id: `NotFound`).
    async fn run_request_cancel_many(
        &self,
        ids: Vec<RunId>,
    ) -> StoreResult<Vec<StoreResult<CancelReply>>> {
        let mut replies = Vec::with_capacity(ids.len());
        for id in ids {
            replies.push(self.run_request_cancel(id).await);
        }
        Ok(replies)
    }

    /// [`RunStore::run_retry`] of each of `ids`, as [`RunStore::run_request_cancel_many`]
    /// does: in order, one transaction where the store can; a run whose unique key another
    /// live run holds is that run's `Conflict`, the others are retried.
    async fn run_retry_many(&self, ids: Vec<RunId>) -> StoreResult<Vec<StoreResult<RetryReply>>> {
        let mut replies = Vec::with_capacity(ids.len());
        for id in ids {
            replies.push(self.run_retry(id).await);
        }
        Ok(replies)
    }
    /// Cancels requested for running runs, by any process, as the database tells them
    /// (Postgres: a notification): a worker signals its handler at once instead of at
    /// its next heartbeat. `None` when the store has no such feed (the heartbeat
    /// delivers every cancel either way). A lagging listener loses the oldest.
    fn cancel_requests(&self) -> Option<tokio::sync::broadcast::Receiver<RunId>> {
        None
    }

    /// The run `id` as stored now, or `None` when there is no such run (never was, or
    /// retention deleted it).
    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>>;

    /// The newest run of `tenant` enqueued with unique key `key`, whatever its status:
    /// also after it finished, for as long as the store keeps the run (a finished run
    /// frees its key for new enqueues, but stays findable here). `None` when there is
    /// none. One index probe (migration 5 on both stores).
    async fn run_find_by_key(&self, tenant: &str, key: &str) -> StoreResult<Option<Run>>;

    /// One page of runs matching `filter`, newest first; page on with
    /// [`RunFilter::before`].
    async fn run_list(&self, filter: RunFilter) -> StoreResult<Vec<Run>>;
    /// Delete one bounded batch of finished runs; see the contract.
    async fn run_prune(&self, prune: &Prune) -> StoreResult<u64>;

    /// Give up to `pages` pages that deletes freed back to the file system, in one short
    /// write; answers how many pages are still free to give (0: done). A store whose
    /// database does this itself (Postgres's autovacuum) answers 0 and does nothing.
    async fn reclaim_space(&self, _pages: u32) -> StoreResult<u64> {
        Ok(0)
    }

    /// When the oldest finished run still kept ended (`None`: none is kept). Retention
    /// reports it; its cost is an index probe per finished status, not a scan.
    async fn oldest_finished(&self) -> StoreResult<Option<DateTime<Utc>>> {
        Ok(None)
    }

    /// Runs by status, the counters summed, in all and per kind. Its cost follows the
    /// kinds and the live (pending and running) runs, never the history: the finished
    /// runs are counted by the writes themselves (see the contract).
    async fn run_stats(&self) -> StoreResult<RunStats>;

    /// Tidy what keeps `run_stats` flat (a store that counts finished runs in shards per
    /// connection folds the shards of closed connections); answers how many rows it
    /// folded. Retention calls it after each pass; the counts read the same before and
    /// after.
    async fn compact_counts(&self) -> StoreResult<u64> {
        Ok(0)
    }

    /// Whether any run is running or due (pending with `run_at <= now`): what a worker
    /// asks before it goes idle. Its cost follows the pending and running runs, not the
    /// history.
    async fn run_busy(&self) -> StoreResult<bool>;

    /// Whether this store can take writes and answer reads now: what `/readyz` asks at
    /// every probe, so it must be cheap (no scan, no row written, nothing changed).
    /// `Ok(())` proves the whole write path where the store has one of its own (the
    /// SQLite writer thread takes a job and commits, writing no row) and that reads are
    /// answered; otherwise the error a write would get now — `Unavailable` when the
    /// database, or the store's writer, is gone (a writer that ended never comes back, so
    /// readiness fails until the process restarts), or when the last write failed on a
    /// full disk or an I/O error and a write still does not commit (SQLite: the probe then
    /// rewrites one page, as no-row transactions need no space).
    async fn store_ready(&self) -> StoreResult<()>;

    /// Register (or register again) process `id` with `facts`; see the contract.
    async fn process_register(&self, id: ProcessId, facts: &ProcessFacts) -> StoreResult<()> {
        let _ = (id, facts);
        Err(no_registry())
    }

    /// Renew `id`'s beat; `false` when its row is gone (it was taken over).
    async fn process_beat(&self, id: ProcessId) -> StoreResult<bool> {
        let _ = id;
        Err(no_registry())
    }

    /// Every registered process, with the store's now.
    async fn process_list(&self) -> StoreResult<ProcessList> {
        Err(no_registry())
    }

    /// End the leases of the running runs `dead` holds and delete its row; answers how
    /// many runs were released.
    async fn process_takeover(&self, dead: ProcessId) -> StoreResult<u64> {
        let _ = dead;
        Err(no_registry())
    }

    /// Leave the registry (a clean stop).
    async fn process_deregister(&self, id: ProcessId) -> StoreResult<()> {
        let _ = id;
        Err(no_registry())
    }

    /// Notified after runs were enqueued (in this process; stores that can hear other
    /// processes, like Postgres with LISTEN, notify for those too). Workers wait on it and
    /// poll as a fallback.
    fn enqueue_signal(&self) -> Arc<Notify>;
}

/// The answer of a store without a process registry.
fn no_registry() -> StoreError {
    StoreError::Invalid("this store keeps no process registry".into())
}

/// Insert runs inside a transaction the caller already holds, so a business write and the
/// runs it triggers commit together or not at all. Implemented by each store's
/// transaction handle; used through [`crate::Dispatcher::enqueue_in`].
pub trait RunInsert {
    /// Insert one run in the caller's transaction, with the same rules as
    /// [`RunStore::run_enqueue_many`] (a held unique key answers `Existing`); it commits or
    /// rolls back with that transaction.
    fn run_insert(&mut self, run: &NewRun) -> StoreResult<Enqueued>;
}
