//! [`MemoryStore`]: the [`RunStore`] port kept in memory, one mutex around every row.
//!
//! It exists so that the simulation can run thousands of seeds a second against a store
//! that keeps the port's `# Contract` line by line — it passes the same conformance suite
//! as the SQLite and Postgres stores (`sim/tests/conformance.rs`). It is not a product
//! store: nothing survives the process, there is no index (every call walks the rows),
//! and `run_busy` is as costly as `run_stats`.
//!
//! Every call takes the mutex once and does all its work under it, so each call is one
//! atomic step, like one transaction of a real store; a call that fails (a duplicate run
//! id in an enqueue) checks everything before it writes anything.
//!
//! Determinism: rows are kept in insertion order (`seq`), tenants in name order, and the
//! only randomness is the owner token of a claim (never compared but for equality), so
//! the same calls at the same clock readings give the same answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_engine::clock::add;
use fronta_engine::liveness::{ProcessFacts, ProcessId, ProcessList, ProcessRecord};
use fronta_engine::store::StoreResult;
use fronta_engine::{
    CancelReply, CheckpointParams, ClaimBatch, ClaimParams, ClaimedRun, Clock, Enqueued, Finish,
    FinishAction, FinishReply, HandOff, HeartbeatReply, LeaseRenewal, NewRun, OwnerToken,
    RetryReply, Run, RunFilter, RunId, RunStats, RunStatus, RunStore, StoreError,
};
use tokio::sync::Notify;

/// A deliberate departure from the contract, for the simulation's own tests: each one is
/// a bug a real store could have, and the simulation must catch every one of them (see
/// `sim/tests/simulation.rs`). A store opened with [`MemoryStore::new`] has none.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// Finishes do not check the owner token (no fencing).
    FinishIgnoresOwner,
    /// A reclaim forgets to count itself in `reclaims`.
    ReclaimNotCounted,
    /// A claim takes running runs whose lease has not expired yet.
    ClaimStealsLiveLeases,
    /// A put-back finish ignores a requested cancel.
    PutBackIgnoresCancel,
}

/// The run port in memory. See the module docs for what it is for.
pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    rows: Mutex<Rows>,
    signal: Arc<Notify>,
    defect: Option<Defect>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.clock)
            .field("defect", &self.defect)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Rows {
    /// Every run by insertion order; a pending run is stored as `Queued` and read as
    /// `Scheduled` or `Queued` by the clock.
    runs: BTreeMap<u64, Run>,
    by_id: HashMap<RunId, u64>,
    next_seq: u64,
    /// The last tenant served first in a claim round: the next round starts after it.
    tenant_cursor: Option<String>,
    /// The process holding each run its last claim or hand-off named (`locked_proc`).
    holders: HashMap<RunId, ProcessId>,
    /// The process registry.
    processes: BTreeMap<ProcessId, ProcessRecord>,
}

/// `at` to the millisecond, as every store keeps time.
fn millis(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.timestamp_millis()).unwrap_or_default()
}

fn later(now: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    millis(add(now, by))
}

fn is_pending(run: &Run) -> bool {
    matches!(run.status, RunStatus::Queued | RunStatus::Scheduled)
}

fn non_terminal(run: &Run) -> bool {
    !run.status.is_terminal()
}

/// A stored run as a reader sees it at `now`.
fn read(run: &Run, now: DateTime<Utc>) -> Run {
    let mut run = run.clone();
    if is_pending(&run) {
        run.status = if run.run_at > now {
            RunStatus::Scheduled
        } else {
            RunStatus::Queued
        };
    }
    run
}

impl MemoryStore {
    /// An empty store judging time by `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            rows: Mutex::new(Rows::default()),
            signal: Arc::new(Notify::new()),
            defect: None,
        }
    }

    /// An empty store with one deliberate bug (the simulation's self-tests).
    #[doc(hidden)]
    pub fn with_defect(clock: Arc<dyn Clock>, defect: Defect) -> Self {
        Self {
            defect: Some(defect),
            ..Self::new(clock)
        }
    }

    fn now(&self) -> DateTime<Utc> {
        millis(self.clock.now())
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, Rows>> {
        self.rows
            .lock()
            .map_err(|_| StoreError::Internal("the memory store's lock was poisoned".into()))
    }

    fn has(&self, defect: Defect) -> bool {
        self.defect == Some(defect)
    }
}

impl Rows {
    fn get_mut(&mut self, id: RunId) -> Option<&mut Run> {
        let seq = *self.by_id.get(&id)?;
        self.runs.get_mut(&seq)
    }

    fn key_holder(&self, tenant: &str, key: &str, except: Option<RunId>) -> Option<RunId> {
        self.runs
            .values()
            .find(|run| {
                non_terminal(run)
                    && run.tenant == tenant
                    && run.unique_key.as_deref() == Some(key)
                    && Some(run.id) != except
            })
            .map(|run| run.id)
    }

    fn insert(&mut self, new: NewRun, now: DateTime<Utc>) {
        let run_at = match (new.run_at, new.delay) {
            (Some(at), _) => millis(at),
            (None, Some(delay)) => later(now, delay),
            (None, None) => now,
        };
        let run = Run {
            id: new.id,
            tenant: new.tenant,
            kind: new.kind,
            payload: new.payload,
            state: None,
            trigger: new.trigger,
            unique_key: new.unique_key,
            priority: new.priority,
            status: RunStatus::Queued,
            run_at,
            attempts: 0,
            max_retries: new.max_retries,
            reclaims: 0,
            parks: 0,
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
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_id.insert(run.id, seq);
        self.runs.insert(seq, run);
    }

    /// Hand run `seq` to a new owner.
    fn take(
        &mut self,
        seq: u64,
        params: &ClaimParams,
        now: DateTime<Utc>,
        reclaim: bool,
    ) -> Option<ClaimedRun> {
        let run = self.runs.get_mut(&seq)?;
        let owner = OwnerToken::fresh();
        run.status = RunStatus::Running;
        run.locked_by = Some(owner);
        run.locked_until = Some(later(now, params.lease_of(&run.kind)));
        run.heartbeat_at = Some(now);
        run.started_at.get_or_insert(now);
        run.updated_at = now;
        if reclaim {
            run.reclaims += 1;
        }
        match params.holder {
            Some(holder) => self.holders.insert(run.id, holder),
            None => self.holders.remove(&run.id),
        };
        Some(ClaimedRun {
            run: run.clone(),
            owner,
            reclaimed: reclaim,
        })
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn run_enqueue_many(&self, runs: Vec<NewRun>) -> StoreResult<Vec<Enqueued>> {
        let now = self.now();
        let inserted_any;
        let answers = {
            let mut rows = self.lock()?;
            // Check every run before writing any: all or nothing.
            let mut answers = Vec::with_capacity(runs.len());
            let mut batch_keys: HashMap<(String, String), RunId> = HashMap::new();
            let mut batch_ids: HashMap<RunId, ()> = HashMap::new();
            let mut to_insert = Vec::new();
            for run in runs {
                if rows.by_id.contains_key(&run.id) || batch_ids.contains_key(&run.id) {
                    return Err(StoreError::Conflict(format!(
                        "run id {} already exists",
                        run.id
                    )));
                }
                if let Some(key) = &run.unique_key {
                    let holder = rows
                        .key_holder(&run.tenant, key, None)
                        .or_else(|| batch_keys.get(&(run.tenant.clone(), key.clone())).copied());
                    if let Some(holder) = holder {
                        answers.push(Enqueued::Existing(holder));
                        continue;
                    }
                    batch_keys.insert((run.tenant.clone(), key.clone()), run.id);
                }
                batch_ids.insert(run.id, ());
                answers.push(Enqueued::Inserted(run.id));
                to_insert.push(run);
            }
            inserted_any = !to_insert.is_empty();
            for run in to_insert {
                rows.insert(run, now);
            }
            answers
        };
        if inserted_any {
            self.signal.notify_waiters();
        }
        Ok(answers)
    }

    async fn run_enqueue_started(
        &self,
        run: NewRun,
        lease: Duration,
        holder: Option<ProcessId>,
    ) -> StoreResult<HandOff> {
        let now = self.now();
        let due_now = run.due_at_once();
        if due_now {
            let mut rows = self.lock()?;
            let overtakes = rows.runs.values().any(|other| {
                is_pending(other)
                    && other.tenant == run.tenant
                    && other.priority >= run.priority
                    && other.run_at <= now
            });
            let key_held = run
                .unique_key
                .as_deref()
                .is_some_and(|key| rows.key_holder(&run.tenant, key, None).is_some());
            if !overtakes && !key_held && !rows.by_id.contains_key(&run.id) {
                let seq = rows.next_seq;
                rows.insert(run, now);
                let params = ClaimParams {
                    limit: 1,
                    default_lease: lease,
                    leases: HashMap::new(),
                    max_reclaims: 0,
                    holder,
                };
                let claimed = rows.take(seq, &params, now, false).ok_or_else(|| {
                    StoreError::Internal("invariant: the inserted run is there".into())
                })?;
                return Ok(HandOff::Started(Box::new(claimed)));
            }
        }
        // Anything else is an ordinary enqueue (a duplicate id fails there, as usual).
        let mut answers = self.run_enqueue_many(vec![run]).await?;
        let answer = answers
            .pop()
            .ok_or_else(|| StoreError::Internal("invariant: one answer per run".into()))?;
        Ok(HandOff::Queued(answer))
    }

    async fn run_claim(&self, params: ClaimParams) -> StoreResult<ClaimBatch> {
        let now = self.now();
        let mut batch = ClaimBatch::default();
        if params.limit == 0 {
            return Ok(batch);
        }
        let mut rows = self.lock()?;
        // 1. Expired leases, the longest expired first: reclaims, crash loops, cancels.
        let mut expired: Vec<(DateTime<Utc>, u64)> = rows
            .runs
            .iter()
            .filter(|(_, run)| {
                run.status == RunStatus::Running
                    && run
                        .locked_until
                        .is_some_and(|until| until < now || self.has(Defect::ClaimStealsLiveLeases))
            })
            .map(|(seq, run)| (run.locked_until.unwrap_or(now), *seq))
            .collect();
        expired.sort();
        expired.truncate(params.limit);
        for (_, seq) in expired {
            let Some(run) = rows.runs.get_mut(&seq) else {
                continue;
            };
            if run.cancel_requested {
                run.status = RunStatus::Cancelled;
                run.cancelled_at = Some(now);
                run.updated_at = now;
                run.locked_by = None;
                run.locked_until = None;
                batch.cancelled.push(run.id);
            } else if run.reclaims + 1 > params.max_reclaims {
                run.reclaims += 1;
                run.status = RunStatus::Failed;
                run.failed_at = Some(now);
                run.updated_at = now;
                run.locked_by = None;
                run.locked_until = None;
                run.last_error = Some(format!(
                    "crash loop: the lease expired {} times (max_reclaims {}); the handler \
                     was not started again",
                    run.reclaims, params.max_reclaims
                ));
                batch.crash_looped.push(run.clone());
            } else {
                let counted = !self.has(Defect::ReclaimNotCounted);
                if let Some(mut claimed) = rows.take(seq, &params, now, counted) {
                    claimed.reclaimed = true;
                    batch.claimed.push(claimed);
                }
            }
        }
        // 2. Due runs, one per tenant per level, tenants in turn after the cursor.
        let mut remaining = params.limit.saturating_sub(batch.claimed.len());
        if remaining == 0 {
            return Ok(batch);
        }
        let mut due: BTreeMap<String, Vec<(i16, DateTime<Utc>, u64)>> = BTreeMap::new();
        for (seq, run) in &rows.runs {
            if is_pending(run) && run.run_at <= now {
                due.entry(run.tenant.clone())
                    .or_default()
                    .push((run.priority, run.run_at, *seq));
            }
        }
        let mut queues: Vec<(String, std::vec::IntoIter<u64>)> = Vec::new();
        let cursor = rows.tenant_cursor.clone().unwrap_or_default();
        let (after, before): (Vec<_>, Vec<_>) = due
            .into_iter()
            .partition(|(tenant, _)| tenant.as_str() > cursor.as_str());
        for (tenant, mut runs) in after.into_iter().chain(before) {
            // Higher priority first, then the earliest due, then the oldest.
            runs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            let seqs: Vec<u64> = runs.into_iter().map(|(_, _, seq)| seq).collect();
            queues.push((tenant, seqs.into_iter()));
        }
        let mut first_level = true;
        let mut last_served = None;
        while remaining > 0 && !queues.is_empty() {
            let mut still = Vec::with_capacity(queues.len());
            for (tenant, mut seqs) in queues {
                if remaining == 0 {
                    break;
                }
                if let Some(seq) = seqs.next() {
                    if let Some(claimed) = rows.take(seq, &params, now, false) {
                        batch.claimed.push(claimed);
                        remaining -= 1;
                    }
                    if first_level {
                        last_served = Some(tenant.clone());
                    }
                    still.push((tenant, seqs));
                }
            }
            queues = still;
            first_level = false;
        }
        if last_served.is_some() {
            rows.tenant_cursor = last_served;
        }
        Ok(batch)
    }

    async fn run_heartbeat_many(
        &self,
        leases: Vec<LeaseRenewal>,
    ) -> StoreResult<Vec<HeartbeatReply>> {
        let now = self.now();
        let mut rows = self.lock()?;
        Ok(leases
            .into_iter()
            .map(|lease| match rows.get_mut(lease.id) {
                Some(run)
                    if run.status == RunStatus::Running && run.locked_by == Some(lease.owner) =>
                {
                    run.locked_until = Some(later(now, lease.lease));
                    run.heartbeat_at = Some(now);
                    run.updated_at = now;
                    HeartbeatReply {
                        id: lease.id,
                        lost: false,
                        cancel_requested: run.cancel_requested,
                    }
                }
                _ => HeartbeatReply {
                    id: lease.id,
                    lost: true,
                    cancel_requested: false,
                },
            })
            .collect())
    }

    async fn run_checkpoint(&self, params: CheckpointParams) -> StoreResult<()> {
        let now = self.now();
        let mut rows = self.lock()?;
        match rows.get_mut(params.id) {
            Some(run)
                if run.status == RunStatus::Running && run.locked_by == Some(params.owner) =>
            {
                run.state = Some(params.state);
                run.locked_until = Some(later(now, params.lease));
                run.heartbeat_at = Some(now);
                run.updated_at = now;
                Ok(())
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    async fn run_finish_many(&self, finishes: Vec<Finish>) -> StoreResult<Vec<FinishReply>> {
        let now = self.now();
        let mut requeued = false;
        let replies = {
            let mut rows = self.lock()?;
            let fencing = !self.has(Defect::FinishIgnoresOwner);
            let cancel_wins = !self.has(Defect::PutBackIgnoresCancel);
            let mut replies = Vec::with_capacity(finishes.len());
            for finish in finishes {
                let Some(run) = rows.get_mut(finish.id) else {
                    replies.push(FinishReply::LeaseLost { id: finish.id });
                    continue;
                };
                let owned = run.status == RunStatus::Running
                    && (run.locked_by == Some(finish.owner) || !fencing);
                if !owned {
                    replies.push(FinishReply::LeaseLost { id: finish.id });
                    continue;
                }
                run.locked_by = None;
                run.locked_until = None;
                run.updated_at = now;
                let cancelled = run.cancel_requested && cancel_wins;
                // Back to pending at `at`, or cancelled when a cancel was requested.
                let mut put_back = |run: &mut Run, at: DateTime<Utc>| {
                    run.run_at = at;
                    if cancelled {
                        run.status = RunStatus::Cancelled;
                        run.cancelled_at = Some(now);
                    } else {
                        run.status = RunStatus::Queued;
                        requeued = true;
                    }
                };
                match finish.action {
                    FinishAction::Complete { result } => {
                        run.status = RunStatus::Completed;
                        run.completed_at = Some(now);
                        run.result = result;
                        run.last_error = None;
                    }
                    FinishAction::Fail { error } => {
                        run.status = RunStatus::Failed;
                        run.failed_at = Some(now);
                        run.last_error = Some(error);
                    }
                    FinishAction::Retry { delay, error } => {
                        put_back(run, later(now, delay));
                        if !cancelled {
                            run.attempts += 1;
                        }
                        run.last_error = Some(error);
                    }
                    FinishAction::Snooze { delay } => put_back(run, later(now, delay)),
                    FinishAction::Park { delay, error } => {
                        put_back(run, later(now, delay));
                        if !cancelled {
                            run.parks += 1;
                        }
                        run.last_error = Some(error);
                    }
                    FinishAction::Release => put_back(run, now),
                    FinishAction::Cancel => {
                        run.status = RunStatus::Cancelled;
                        run.cancelled_at = Some(now);
                    }
                    FinishAction::Suppress { reason } => {
                        run.status = RunStatus::Suppressed;
                        run.failed_at = Some(now);
                        run.last_error = Some(reason);
                    }
                }
                replies.push(FinishReply::Applied {
                    id: finish.id,
                    status: read(run, now).status,
                });
            }
            replies
        };
        if requeued {
            self.signal.notify_waiters();
        }
        Ok(replies)
    }

    async fn run_request_cancel(&self, id: RunId) -> StoreResult<CancelReply> {
        let now = self.now();
        let mut rows = self.lock()?;
        let run = rows.get_mut(id).ok_or(StoreError::NotFound)?;
        if is_pending(run) {
            run.status = RunStatus::Cancelled;
            run.cancelled_at = Some(now);
            run.updated_at = now;
            Ok(CancelReply::Cancelled)
        } else if run.status == RunStatus::Running {
            run.cancel_requested = true;
            run.updated_at = now;
            Ok(CancelReply::Requested)
        } else {
            Ok(CancelReply::AlreadyFinished(run.status))
        }
    }

    async fn run_retry(&self, id: RunId) -> StoreResult<RetryReply> {
        let now = self.now();
        {
            let mut rows = self.lock()?;
            let seq = *rows.by_id.get(&id).ok_or(StoreError::NotFound)?;
            let run = rows.runs.get(&seq).ok_or(StoreError::NotFound)?;
            if !run.status.is_retried_by_hand() {
                return Ok(RetryReply::NotFailed(read(run, now).status));
            }
            if let Some(key) = run.unique_key.clone() {
                let tenant = run.tenant.clone();
                if rows.key_holder(&tenant, &key, Some(id)).is_some() {
                    return Err(StoreError::Conflict(format!(
                        "another pending or running run holds the unique key {key:?}"
                    )));
                }
            }
            let run = rows.get_mut(id).ok_or(StoreError::NotFound)?;
            run.status = RunStatus::Queued;
            run.run_at = now;
            run.updated_at = now;
            run.failed_at = None;
            run.attempts = 0;
            run.reclaims = 0;
            run.parks = 0;
            run.locked_by = None;
            run.locked_until = None;
        }
        self.signal.notify_waiters();
        Ok(RetryReply::Requeued)
    }

    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        let now = self.now();
        let rows = self.lock()?;
        Ok(rows
            .by_id
            .get(&id)
            .and_then(|seq| rows.runs.get(seq))
            .map(|run| read(run, now)))
    }

    async fn run_find_by_key(&self, tenant: &str, key: &str) -> StoreResult<Option<Run>> {
        let now = self.now();
        let rows = self.lock()?;
        // Newest first: the highest insertion sequence with the key (a scan: this store
        // holds what one test or simulation makes).
        Ok(rows
            .runs
            .values()
            .rev()
            .find(|run| run.tenant == tenant && run.unique_key.as_deref() == Some(key))
            .map(|run| read(run, now)))
    }

    async fn run_list(&self, filter: RunFilter) -> StoreResult<Vec<Run>> {
        let now = self.now();
        let rows = self.lock()?;
        let mut runs: Vec<Run> = rows
            .runs
            .values()
            .map(|run| read(run, now))
            .filter(|run| filter.status.is_none_or(|status| run.status == status))
            .filter(|run| filter.kind.as_ref().is_none_or(|kind| &run.kind == kind))
            .filter(|run| {
                filter
                    .tenant
                    .as_ref()
                    .is_none_or(|tenant| &run.tenant == tenant)
            })
            .filter(|run| filter.before.is_none_or(|before| run.id < before))
            .collect();
        runs.sort_by_key(|run| std::cmp::Reverse(run.id));
        runs.truncate(filter.page());
        Ok(runs)
    }

    async fn oldest_finished(&self) -> StoreResult<Option<DateTime<Utc>>> {
        let rows = self.lock()?;
        Ok(rows.runs.values().filter_map(Run::finished_at).min())
    }

    async fn run_prune(&self, prune: &fronta_engine::store::Prune) -> StoreResult<u64> {
        let mut rows = self.lock()?;
        let mut newest: HashMap<(String, String), u64> = HashMap::new();
        for (seq, run) in &rows.runs {
            if let Some(key) = &run.unique_key {
                newest.insert((run.tenant.clone(), key.clone()), *seq);
            }
        }
        let mut doomed: Vec<(DateTime<Utc>, u64)> = rows
            .runs
            .iter()
            .filter(|(seq, run)| {
                let newest_of_its_key = run.unique_key.as_ref().is_some_and(|key| {
                    newest.get(&(run.tenant.clone(), key.clone())) == Some(*seq)
                });
                prune.allows(run, newest_of_its_key)
            })
            .filter_map(|(seq, run)| run.finished_at().map(|ended| (ended, *seq)))
            .collect();
        doomed.sort();
        doomed.truncate(prune.limit);
        for (_, seq) in &doomed {
            if let Some(run) = rows.runs.remove(seq) {
                rows.by_id.remove(&run.id);
            }
        }
        Ok(doomed.len() as u64)
    }

    async fn run_stats(&self) -> StoreResult<RunStats> {
        let now = self.now();
        let rows = self.lock()?;
        let mut stats = RunStats::default();
        for run in rows.runs.values() {
            stats.add(
                &run.kind,
                read(run, now).status,
                1,
                [
                    u64::from(run.attempts),
                    u64::from(run.reclaims),
                    u64::from(run.parks),
                ],
            );
        }
        Ok(stats)
    }

    async fn run_busy(&self) -> StoreResult<bool> {
        let now = self.now();
        let rows = self.lock()?;
        Ok(rows
            .runs
            .values()
            .any(|run| run.status == RunStatus::Running || (is_pending(run) && run.run_at <= now)))
    }

    /// Ready while its rows can be reached (the lock is not poisoned).
    async fn store_ready(&self) -> StoreResult<()> {
        self.lock().map(|_| ())
    }

    async fn process_register(&self, id: ProcessId, facts: &ProcessFacts) -> StoreResult<()> {
        let now = self.now();
        let record = ProcessRecord {
            id,
            facts: facts.clone(),
            beat_at: now,
        };
        self.lock()?.processes.insert(id, record);
        Ok(())
    }

    async fn process_beat(&self, id: ProcessId) -> StoreResult<bool> {
        let now = self.now();
        Ok(match self.lock()?.processes.get_mut(&id) {
            Some(record) => {
                record.beat_at = now;
                true
            }
            None => false,
        })
    }

    async fn process_list(&self) -> StoreResult<ProcessList> {
        let now = self.now();
        Ok(ProcessList {
            now,
            processes: self.lock()?.processes.values().cloned().collect(),
        })
    }

    async fn process_takeover(&self, dead: ProcessId) -> StoreResult<u64> {
        let now = self.now();
        let ended = now - chrono::Duration::milliseconds(1);
        let released = {
            let mut rows = self.lock()?;
            rows.processes.remove(&dead);
            let Rows { runs, holders, .. } = &mut *rows;
            let mut released = 0;
            for run in runs.values_mut() {
                if run.status == RunStatus::Running
                    && holders.get(&run.id) == Some(&dead)
                    && run.locked_until.is_some_and(|until| until >= now)
                {
                    run.locked_until = Some(ended);
                    released += 1;
                }
            }
            released
        };
        if released > 0 {
            self.signal.notify_waiters();
        }
        Ok(released)
    }

    async fn process_deregister(&self, id: ProcessId) -> StoreResult<()> {
        self.lock()?.processes.remove(&id);
        Ok(())
    }

    fn enqueue_signal(&self) -> Arc<Notify> {
        self.signal.clone()
    }
}
