//! The worker pool: claims its free slots plus a local queue sized from what it measures
//! ([`crate::prefetch`]; `prefetch_max` 0 claims only free slots) and starts each run at
//! once, filling slots from the queue while the next round is out — again once half
//! the slots are free (or `claim_gather` has passed) while the last claim came back full,
//! or when the queue is down to half its target, else on a wake-up (an enqueue or a
//! put-back) or the poll; a heartbeater
//! renews every active and queued lease in one write per round and delivers cancel flags; a
//! completer writes finished runs in batches (held open up to `completer_linger` under
//! load) and tells [`Worker::keyed_ends`] listeners of keyed runs it wrote terminal.
//! Handlers run outside any transaction.
//!
//! What a worker does with a claimed run:
//! - kind unknown here → parked ([`machine::decide_park`]), handler never starts;
//! - handler answers → [`machine::decide`] → the completer writes it;
//! - handler panics → `Fail` (a bug does not go away in a minute), the worker lives on;
//! - handler exceeds the kind's timeout → `Retry` (spends an attempt), whether or not
//!   it heeds its stop signal: each handler runs in a task of its own under a
//!   supervisor (the task the worker's slot counts), and at the timeout the supervisor
//!   aborts the handler's task and ends at once, so the slot is free and the ladder
//!   decides. A handler that blocks its thread cannot be aborted until it yields; its
//!   slot is freed all the same, and after [`STUCK_GRACE`] it is logged and counted as
//!   stuck ([`WorkerReport::stuck`], `fronta_worker_handlers_stuck_total`) — its thread
//!   stays lost until it returns, and whatever it then answers is ignored;
//! - heartbeat or checkpoint finds the lease lost → the handler is stopped and the run
//!   abandoned: nothing more is written about it;
//! - cancel requested → the handler's signal fires; what it answers becomes `Cancel`
//!   (or `Complete` when it had finished);
//! - shutdown → no more claims; queued runs are given back at once, running ones get
//!   `shutdown_grace` to finish, then are stopped and given back (`Release`,
//!   owner-checked, no counter spent).
//!
//! While it waits idle after a claim that came back short, the worker's intake is open:
//! its own dispatcher's enqueues are handed to it already claimed, one commit instead of
//! two ([`crate::handoff`]). Any wake-up closes the intake before the next claim.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::dispatcher::Dispatcher;
use crate::error::{EngineError, StoreError};
use crate::handoff::Intake;
use crate::machine::{self, RetryLadder};
use crate::metrics::WorkerMetrics;
use crate::model::{OwnerToken, Run, RunId, RunStatus};
use crate::prefetch::{self, LocalQueue, Queued, Sizer};
use crate::registry::{
    Checkpointer, MIN_DURATION, Outcome, Registry, RunContext, StopReason, StopSignal,
};
use crate::store::{
    ClaimBatch, ClaimParams, ClaimedRun, Finish, FinishAction, FinishReply, LeaseRenewal, RunStore,
};

/// A worker's settings. Every limit is named here.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// A name for log lines.
    /// Default `"worker"`.
    pub name: String,
    /// Runs executing at once in this worker.
    /// Default 4; at least 1.
    pub max_in_flight: usize,
    /// The lease of fire-and-forget kinds (durable kinds bring their own).
    /// Default 5 min; at least 1 ms. A run whose worker stops heartbeating is reclaimed
    /// once it ends.
    pub default_lease: Duration,
    /// Time between heartbeat rounds; `None` = a third of the shortest lease.
    /// Default `None`.
    pub heartbeat_every: Option<Duration>,
    /// How often to look for due runs when no enqueue signal arrives (other processes,
    /// delayed runs coming due).
    /// Default 500 ms; at least 1 ms.
    pub poll_interval: Duration,
    /// A reclaim beyond this many fails the run as a crash loop.
    /// Default 5.
    pub max_reclaims: u32,
    /// The first park's delay; each later park doubles it.
    /// Default 30 s (then 1 min, 2 min, …, at most a day; the fifth park fails the run).
    pub park_base: Duration,
    /// On shutdown, how long running handlers may take to finish.
    /// Default 10 s.
    pub shutdown_grace: Duration,
    /// Exit once nothing is queued, running or due.
    /// Default `false`: run until shut down.
    pub until_idle: bool,
    /// The most finishes written in one batch.
    /// Default 1000; at least 1.
    pub completer_batch: usize,
    /// Under load, how long the completer may hold a batch open for more finishes
    /// before writing it: when its previous batch had at least [`LINGER_AFTER`] runs,
    /// the next waits up to this long (or until `completer_batch` is reached), so one
    /// statement and one commit carry more runs. A lone finish on a quiet worker is
    /// written at once. `Duration::ZERO`: never wait.
    /// Default [`DEFAULT_COMPLETER_LINGER`] (5 ms); at most [`MAX_COMPLETER_LINGER`]
    /// (1 s).
    pub completer_linger: Duration,
    /// After a claim round that came back full (the queue may hold more), how long the
    /// next round may wait for half the slots to be free: one round then claims many
    /// runs instead of one per finished run. Claimed runs still start at once, and a
    /// worker whose last claim came back short (a quiet queue) never waits.
    /// `Duration::ZERO`: claim as soon as one slot frees.
    /// Default [`DEFAULT_CLAIM_GATHER`] (2 ms); at most [`MAX_CLAIM_GATHER`] (1 s).
    pub claim_gather: Duration,
    /// While the worker waits idle after a short claim, its own dispatcher's single
    /// enqueues are handed to it already claimed: one commit from enqueue to start
    /// instead of two ([`crate::handoff`]). `false`: every enqueue is an ordinary one and
    /// every run starts by a claim (to measure the difference, or to keep every start on
    /// the claim path).
    /// Default `true`.
    pub hand_off: bool,
    /// The most runs the worker claims ahead of its free slots into its local queue
    /// ([`crate::prefetch`]): the queue holds about what the slots finish in one or two
    /// claim rounds, measured, and nothing when handlers are slow. 0: no local queue,
    /// each round claims the free slots only.
    /// Default [`crate::prefetch::DEFAULT_PREFETCH_MAX`] (256); at most
    /// [`crate::prefetch::MAX_PREFETCH`] (10,000).
    pub prefetch_max: usize,
    /// This process in the registry ([`crate::liveness`]): the holder its claims and
    /// hand-offs write, so the runs can be taken over when it dies. `None`: no holder.
    pub holder: Option<crate::liveness::ProcessId>,
}

/// The previous batch size from which the completer lingers (see
/// [`WorkerConfig::completer_linger`]): finishes that met in one batch arrive faster
/// than a write takes; a lone one means a quiet worker.
pub const LINGER_AFTER: usize = 2;

/// The default [`WorkerConfig::completer_linger`]. On the bench's Postgres drain (2
/// processes, 64 in flight each) 5 ms took batches from ~70 to ~350 finishes and the
/// drain from ~23,400 to ~29,000 runs/s; a lone finish is never held.
pub const DEFAULT_COMPLETER_LINGER: Duration = Duration::from_millis(5);

/// The longest [`WorkerConfig::completer_linger`] a worker accepts.
pub const MAX_COMPLETER_LINGER: Duration = Duration::from_secs(1);

/// The default [`WorkerConfig::claim_gather`]. On the bench's Postgres drain (no-op runs,
/// 64 in flight) rounds went from ~40 runs to ~60 and the drain from ~29,000 to
/// ~33,000–37,000 runs/s in one process.
pub const DEFAULT_CLAIM_GATHER: Duration = Duration::from_millis(2);

/// The longest [`WorkerConfig::claim_gather`] a worker accepts.
pub const MAX_CLAIM_GATHER: Duration = Duration::from_secs(1);

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            name: "worker".into(),
            max_in_flight: 4,
            default_lease: Duration::from_secs(300),
            heartbeat_every: None,
            poll_interval: Duration::from_millis(500),
            max_reclaims: 5,
            park_base: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            until_idle: false,
            completer_batch: 1000,
            completer_linger: DEFAULT_COMPLETER_LINGER,
            claim_gather: DEFAULT_CLAIM_GATHER,
            hand_off: true,
            prefetch_max: prefetch::DEFAULT_PREFETCH_MAX,
            holder: None,
        }
    }
}

impl WorkerConfig {
    /// Refuse settings that make no sense, naming the first one ([`EngineError::Config`]):
    /// `max_in_flight` or `completer_batch` of 0, a lease, heartbeat or poll interval under
    /// 1 ms, `claim_gather` above [`MAX_CLAIM_GATHER`], `completer_linger` above
    /// [`MAX_COMPLETER_LINGER`], `prefetch_max` above [`crate::prefetch::MAX_PREFETCH`].
    pub fn validate(&self) -> Result<(), EngineError> {
        let problem = if self.max_in_flight == 0 {
            Some("max_in_flight must be at least 1".to_string())
        } else if self.default_lease < MIN_DURATION {
            Some(format!(
                "default lease {:?} is under 1 ms (a units typo?)",
                self.default_lease
            ))
        } else if self
            .heartbeat_every
            .is_some_and(|every| every < MIN_DURATION)
        {
            Some("heartbeat interval is under 1 ms".to_string())
        } else if self.poll_interval < MIN_DURATION {
            Some("poll interval is under 1 ms".to_string())
        } else if self.completer_batch == 0 {
            Some("completer batch must be at least 1".to_string())
        } else if self.claim_gather > MAX_CLAIM_GATHER {
            Some(format!(
                "claim gather {:?} is above {MAX_CLAIM_GATHER:?}: free slots would wait too long for work",
                self.claim_gather
            ))
        } else if self.prefetch_max > prefetch::MAX_PREFETCH {
            Some(format!(
                "prefetch max {} is above {}: a process would hold runs others could start",
                self.prefetch_max,
                prefetch::MAX_PREFETCH
            ))
        } else if self.completer_linger > MAX_COMPLETER_LINGER {
            Some(format!(
                "completer linger {:?} is above {MAX_COMPLETER_LINGER:?}: finished runs would wait too long to be written",
                self.completer_linger
            ))
        } else {
            None
        };
        problem.map_or(Ok(()), |problem| Err(EngineError::Config(problem)))
    }
}

/// What a worker did, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerReport {
    /// Runs claimed (hand-offs included), reclaims included.
    pub claimed: u64,
    /// Of `claimed`, runs taken over after an earlier owner's lease expired.
    pub reclaimed: u64,
    /// Runs written completed.
    pub completed: u64,
    /// Runs written failed (crash loops included).
    pub failed: u64,
    /// Runs put back for another attempt (`Retry`, an attempt spent).
    pub retried: u64,
    /// Runs put back without spending an attempt (`Snooze`).
    pub snoozed: u64,
    /// Runs put back because this worker has no handler for their kind (`Park`).
    pub parked: u64,
    /// Runs written cancelled (a requested cancel observed, or winning over a put-back).
    pub cancelled: u64,
    /// Runs written suppressed (a guard stopped them).
    pub suppressed: u64,
    /// Runs given back unfinished (`Release`: shutdown, or a local queue's hold ran out).
    pub released: u64,
    /// Runs whose lease was lost (another owner took them): nothing more was written about
    /// them.
    pub abandoned: u64,
    /// Expired runs this worker's claims failed as crash loops (over `max_reclaims`); also
    /// counted in `failed`.
    pub crash_looped: u64,
    /// Of `claimed`, the runs this worker's dispatcher handed to it at enqueue.
    pub handed_off: u64,
    /// Handlers stopped at their kind's timeout (each also counted in `retried` or
    /// `failed`, as the ladder decided).
    pub timed_out: u64,
    /// Of `timed_out`, handlers still not ended [`STUCK_GRACE`] after their abort: they
    /// block their thread (a blocking call inside an async handler).
    pub stuck: u64,
}

/// How long a timed-out handler's task may take to end after its abort before it is
/// logged and counted as stuck ([`WorkerReport::stuck`]). An async handler ends at its
/// next await, at once; one still running after this blocks its thread.
pub const STUCK_GRACE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    reclaimed: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    snoozed: AtomicU64,
    parked: AtomicU64,
    cancelled: AtomicU64,
    suppressed: AtomicU64,
    released: AtomicU64,
    abandoned: AtomicU64,
    crash_looped: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    /// The counts so far; hand-offs are counted once, in the worker's metrics.
    fn report(&self, metrics: &WorkerMetrics) -> WorkerReport {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        WorkerReport {
            claimed: get(&self.claimed),
            reclaimed: get(&self.reclaimed),
            completed: get(&self.completed),
            failed: get(&self.failed),
            retried: get(&self.retried),
            snoozed: get(&self.snoozed),
            parked: get(&self.parked),
            cancelled: get(&self.cancelled),
            suppressed: get(&self.suppressed),
            released: get(&self.released),
            abandoned: get(&self.abandoned),
            crash_looped: get(&self.crash_looped),
            handed_off: metrics.handed_off(),
            timed_out: metrics.timed_out(),
            stuck: metrics.stuck(),
        }
    }
}

struct Active {
    run: Arc<Run>,
    owner: OwnerToken,
    lease: Duration,
    signal: StopSignal,
    abort: AbortHandle,
    /// When its handler started (the local queue's sizing measures handlers; tokio's
    /// clock, as the worker's timers).
    started: tokio::time::Instant,
}

type ActiveMap = Arc<Mutex<HashMap<RunId, Active>>>;

/// The local queue, shared by the loop, the heartbeater and [`LocalRuns`].
type QueueRef = Arc<Mutex<LocalQueue>>;

enum Ended {
    Answered(Outcome),
    TimedOut(Duration),
}

/// A pool of in-flight runs over one store. See the module docs.
pub struct Worker {
    store: Arc<dyn RunStore>,
    registry: Arc<Registry>,
    dispatcher: Dispatcher,
    config: WorkerConfig,
    counters: Arc<Counters>,
    metrics: Arc<WorkerMetrics>,
    intake: Arc<Intake>,
    /// Runs handed over by the intake; taken by [`Worker::run`].
    handed: Option<mpsc::UnboundedReceiver<ClaimedRun>>,
    /// The runs in flight here, by id (shared with [`LocalRuns`]).
    active: ActiveMap,
    /// Runs claimed ahead of the free slots (shared with [`LocalRuns`] and the heartbeater).
    queue: QueueRef,
    /// The local queue's sizing, fed by the loop.
    sizer: Mutex<Sizer>,
    /// Where the completer tells of keyed runs that reached their end ([`Worker::keyed_ends`]).
    ends: tokio::sync::broadcast::Sender<KeyedEnd>,
    /// `config.name`, shared with every run's context.
    name: Arc<str>,
}

/// How many ends of keyed runs wait for a slow listener of [`Worker::keyed_ends`] before
/// the oldest are dropped (the listener hears it lagged).
pub const KEYED_ENDS_BUFFER: usize = 1024;

/// A run enqueued with a unique key that the completer wrote terminal: the key is free
/// again, so whoever keeps a run ahead for it (the scheduler of timed automations) can
/// plan the next one at once instead of at its next look.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedEnd {
    /// The run that ended.
    pub id: RunId,
    /// Its tenant.
    pub tenant: String,
    /// Its kind.
    pub kind: String,
    /// The unique key it held, free again now.
    pub unique_key: String,
    /// The terminal status written.
    pub status: RunStatus,
}

/// The runs a worker has in flight in this process, for the code beside it: a cancel
/// requested through this process's API reaches its handler at once, instead of at the
/// next heartbeat (which is how every other process learns of it).
#[derive(Clone)]
pub struct LocalRuns {
    active: ActiveMap,
    queue: QueueRef,
}

impl std::fmt::Debug for LocalRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalRuns")
    }
}

impl LocalRuns {
    /// Fires the cancel signal of `run` when it is in flight here (after the store
    /// recorded the request); `false` when it is not. The handler's answer becomes the
    /// cancel, as when the heartbeat hears it. A run waiting in the local queue is
    /// marked: it leaves the queue cancelled, never started.
    pub fn cancel(&self, run: RunId) -> bool {
        match lock(&self.active).get(&run) {
            Some(entry) if !entry.signal.is_stopped() => {
                tracing::info!(run = %run, kind = %entry.run.kind, "cancel requested here; signalling the handler");
                entry.signal.stop(StopReason::Cancel);
                return true;
            }
            Some(_) => return false,
            None => {}
        }
        match lock_queue(&self.queue).get_mut(run) {
            Some(queued) if !queued.cancel => {
                tracing::info!(run = %run, kind = %queued.claimed.run.kind, "cancel requested here; the run leaves the local queue cancelled");
                queued.cancel = true;
                true
            }
            _ => false,
        }
    }

    /// How many runs wait in the worker's local queue now ([`crate::prefetch`]).
    pub fn queued(&self) -> usize {
        lock_queue(&self.queue).len()
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .finish()
    }
}

impl Worker {
    /// Refuses a configuration with a limit that makes no sense (see [`WorkerConfig::validate`]).
    pub fn new(
        store: Arc<dyn RunStore>,
        registry: Arc<Registry>,
        config: WorkerConfig,
    ) -> Result<Self, EngineError> {
        config.validate()?;
        let (intake, handed) = Intake::new(registry.leases(), config.default_lease, config.holder);
        let dispatcher =
            Dispatcher::from_registry(store.clone(), &registry).with_intake(intake.clone());
        let name = Arc::from(config.name.as_str());
        let sizer = Mutex::new(Sizer::new(config.prefetch_max, config.max_in_flight));
        Ok(Self {
            store,
            registry,
            dispatcher,
            config,
            counters: Arc::new(Counters::default()),
            metrics: Arc::new(WorkerMetrics::default()),
            intake,
            handed: Some(handed),
            active: Arc::new(Mutex::new(HashMap::new())),
            queue: Arc::new(Mutex::new(LocalQueue::default())),
            sizer,
            ends: tokio::sync::broadcast::channel(KEYED_ENDS_BUFFER).0,
            name,
        })
    }

    /// The ends of this worker's keyed runs from now on (completed, failed, cancelled or
    /// suppressed, once written). A listener that falls more than [`KEYED_ENDS_BUFFER`]
    /// behind loses the oldest and is told so.
    pub fn keyed_ends(&self) -> tokio::sync::broadcast::Receiver<KeyedEnd> {
        self.ends.subscribe()
    }

    /// The runs this worker has in flight, shared: take it before [`Worker::run`].
    pub fn local_runs(&self) -> LocalRuns {
        LocalRuns {
            active: self.active.clone(),
            queue: self.queue.clone(),
        }
    }

    /// This worker's dispatcher: its single enqueues are handed straight to the worker
    /// when it waits idle ([`crate::handoff`]); clones share that.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    /// The latencies this worker measures (claim rounds, completion batches, start
    /// delays), shared: take it before [`Worker::run`] consumes the worker.
    pub fn metrics(&self) -> Arc<WorkerMetrics> {
        self.metrics.clone()
    }

    fn heartbeat_every(&self) -> Duration {
        if let Some(every) = self.config.heartbeat_every {
            return every;
        }
        let shortest = self
            .registry
            .leases()
            .into_values()
            .chain([self.config.default_lease])
            .min()
            .unwrap_or(self.config.default_lease);
        (shortest / 3).max(MIN_DURATION)
    }

    fn claim_params(&self, limit: usize) -> ClaimParams {
        ClaimParams {
            limit,
            default_lease: self.config.default_lease,
            leases: self.registry.leases(),
            max_reclaims: self.config.max_reclaims,
            holder: self.config.holder,
        }
    }

    /// Work until `shutdown` fires (or, with `until_idle`, until nothing is left to do).
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<WorkerReport, EngineError> {
        let name = self.config.name.clone();
        let mut handed = self
            .handed
            .take()
            .ok_or_else(|| EngineError::Config("a worker runs once".into()))?;
        tracing::info!(worker = %name, max_in_flight = self.config.max_in_flight,
            lease = ?self.config.default_lease, heartbeat = ?self.heartbeat_every(),
            kinds = ?self.registry.kinds().collect::<Vec<_>>(), "worker started");

        let active: ActiveMap = self.active.clone();
        let finisher = Arc::new(Finisher::new(self.config.completer_batch));
        let told = Arc::new(Told {
            counters: self.counters.clone(),
            metrics: self.metrics.clone(),
            ends: self.ends.clone(),
        });
        // Both helpers die with this future: a dropped worker must not keep renewing leases.
        let completer = AbortOnDrop::spawn(completer(
            self.store.clone(),
            finisher.clone(),
            self.config.completer_linger,
            told.clone(),
        ));
        // Cancels other processes requested, heard from the database at once (the
        // heartbeat delivers them too, later).
        let _cancels = self
            .store
            .cancel_requests()
            .map(|requests| AbortOnDrop::spawn(hear_cancels(requests, self.local_runs())));
        let heartbeat_stop = CancellationToken::new();
        let heartbeater = AbortOnDrop::spawn(heartbeater(
            self.store.clone(),
            self.local_runs(),
            self.counters.clone(),
            self.heartbeat_every(),
            heartbeat_stop.clone(),
        ));

        let mut tasks: JoinSet<Ended> = JoinSet::new();
        let mut task_runs: HashMap<tokio::task::Id, RunId> = HashMap::new();
        let enqueue_signal = self.store.enqueue_signal();
        let mut storage_backoff = Duration::from_millis(50);
        let store = self.store.clone();
        let carries = store.finishes_ride_claims();

        'work: loop {
            if shutdown.is_cancelled() {
                break;
            }
            while let Some(joined) = tasks.try_join_next_with_id() {
                self.reap(joined, &active, &mut task_runs, &finisher);
            }
            while let Ok(run) = handed.try_recv() {
                self.start_handed(run, &active, &mut tasks, &mut task_runs, &finisher);
            }
            self.hand_back_held(&finisher);
            self.start_queued(&active, &mut tasks, &mut task_runs, &finisher);
            // Register for the wake-up before claiming, so an enqueue between the claim
            // and the wait is not missed.
            let notified = enqueue_signal.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            // Slots reserved by a hand-off in flight are not free: its run will arrive.
            // A free slot means the local queue is empty (it was just drawn from).
            self.intake.close();
            let free = self.free_slots(&tasks);
            let queued = lock_queue(&self.queue).len();
            let target = self.sizer().target();
            let ask = if free > 0 || (target > 0 && queued * 2 <= target) {
                (free + target).saturating_sub(queued)
            } else {
                0
            };
            let mut claimed_now = 0;
            if ask > 0 {
                let round = tokio::time::Instant::now();
                // The round carries the finishes waiting to be written where the store
                // writes both in one transaction: one commit instead of a claim's and a
                // batch's.
                let carried = if carries {
                    finisher.take(self.config.completer_batch)
                } else {
                    Vec::new()
                };
                let finishes: Vec<Finish> =
                    carried.iter().map(|(finish, _)| finish.clone()).collect();
                let claim = store.run_finish_and_claim(finishes, self.claim_params(ask));
                tokio::pin!(claim);
                // While the round is out, slots that free take queued runs.
                let answered = loop {
                    tokio::select! {
                        biased;
                        answered = &mut claim => break answered,
                        Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                            self.reap(joined, &active, &mut task_runs, &finisher);
                            self.start_queued(&active, &mut tasks, &mut task_runs, &finisher);
                        }
                    }
                };
                let took = round.elapsed();
                self.metrics.claim.record(took);
                if !carried.is_empty() {
                    // A completion batch too, written in the round's time.
                    self.metrics.complete.record(took);
                }
                self.sizer().round_took(took);
                let claimed = match answered {
                    Ok((replies, claimed)) => {
                        told.written(&carried, replies);
                        finisher.done(carried.len());
                        claimed
                    }
                    Err(err) => {
                        // Nothing of it was written: the completer writes the finishes.
                        finisher.put_back(carried);
                        Err(err)
                    }
                };
                match claimed {
                    Ok(batch) => {
                        storage_backoff = Duration::from_millis(50);
                        claimed_now =
                            batch.claimed.len() + batch.crash_looped.len() + batch.cancelled.len();
                        self.take_batch(batch);
                        self.start_queued(&active, &mut tasks, &mut task_runs, &finisher);
                    }
                    Err(err) => {
                        tracing::warn!(worker = %name, error = %err, retry_in = ?storage_backoff, "claim failed");
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep(storage_backoff) => {}
                        }
                        storage_backoff = (storage_backoff * 2).min(Duration::from_secs(5));
                        continue;
                    }
                }
            }
            if claimed_now > 0 && claimed_now >= ask {
                // The queue may hold more: go round again as soon as a slot frees.
                if tasks.is_empty() {
                    // Nothing started (every run of the round was a crash loop or a
                    // cancel): no slot will free, look again now.
                    continue;
                }
                loop {
                    let held_until = self.held_until();
                    tokio::select! {
                        biased;
                        _ = shutdown.cancelled() => continue 'work,
                        Some(run) = handed.recv() => {
                            // A hand-off reserved before the intake closed: it has its slot.
                            self.start_handed(run, &active, &mut tasks, &mut task_runs, &finisher);
                            continue 'work;
                        }
                        Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                            self.reap(joined, &active, &mut task_runs, &finisher);
                            break;
                        }
                        _ = sleep_until_or_never(held_until) => self.hand_back_held(&finisher),
                    }
                }
                // Gather: let more slots free before the next round, so one round
                // claims many runs rather than one per finished run (each round is a
                // statement and a commit). A slot waits at most `claim_gather`. With a
                // local queue the slots are fed from it instead.
                let gather = self.config.claim_gather;
                let wanted = self.config.max_in_flight.div_ceil(2);
                if !gather.is_zero() && lock_queue(&self.queue).is_empty() {
                    let until = tokio::time::Instant::now() + gather;
                    while self.config.max_in_flight.saturating_sub(tasks.len()) < wanted {
                        match tokio::select! {
                            biased;
                            _ = shutdown.cancelled() => None,
                            joined = tokio::time::timeout_at(until, tasks.join_next_with_id()) => joined.ok().flatten(),
                        } {
                            Some(joined) => self.reap(joined, &active, &mut task_runs, &finisher),
                            None => break,
                        }
                    }
                }
                continue;
            }
            if self.config.until_idle
                && tasks.is_empty()
                && claimed_now == 0
                && lock_queue(&self.queue).is_empty()
            {
                finisher.flushed().await;
                match self.store.run_busy().await {
                    Ok(false) => {
                        tracing::info!(worker = %name, "nothing queued, running or due: exiting (--until-idle)");
                        break;
                    }
                    Ok(true) => {}
                    Err(err) => tracing::warn!(worker = %name, error = %err, "idle check failed"),
                }
            }
            // Wait for a reason to look again. A claim that came back short found no
            // more due runs: a handler finishing is then no reason to claim (the round
            // would come back empty — a round trip for nothing, in the way of the next
            // enqueue), only to start a queued run; a wake-up is (an enqueue or a
            // put-back, which every store signals after its commit), or the poll
            // (delayed runs coming due, expired leases, other processes without
            // notifications). With every slot busy and the queue full enough no claim was
            // made, and a slot freeing is the reason.
            //
            // After a short claim, with the local queue empty, the intake is open: an
            // enqueue of this process is handed over claimed, and the worker keeps
            // waiting (the queue is still empty as far as it knows). Leaving the wait
            // closes it.
            let queue_emptied = ask > 0;
            let poll = tokio::time::sleep(self.config.poll_interval);
            tokio::pin!(poll);
            loop {
                let free_after = self.config.max_in_flight.saturating_sub(tasks.len());
                let held_until = self.held_until();
                if queue_emptied && self.config.hand_off && held_until.is_none() {
                    self.intake.open(free_after);
                }
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break 'work,
                    Some(run) = handed.recv() => {
                        self.start_handed(run, &active, &mut tasks, &mut task_runs, &finisher);
                    }
                    Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                        self.reap(joined, &active, &mut task_runs, &finisher);
                        self.start_queued(&active, &mut tasks, &mut task_runs, &finisher);
                        let idle_check = self.config.until_idle && tasks.is_empty();
                        if !queue_emptied || idle_check {
                            break;
                        }
                    }
                    _ = &mut notified, if free_after > 0 => break,
                    _ = &mut poll, if free_after > 0 => break,
                    _ = sleep_until_or_never(held_until) => self.hand_back_held(&finisher),
                }
            }
        }

        // No more hand-offs: runs delivered but not started go back to the queue, and a
        // delivery from now on fails, so its dispatcher gives the run back itself.
        self.intake.close();
        handed.close();
        while let Ok(claimed) = handed.try_recv() {
            self.intake.taken();
            tracing::info!(worker = %name, run = %claimed.run.id, "stopping: a handed-over run goes back to the queue");
            self.give_back(claimed, false, &finisher);
        }
        let queued = lock_queue(&self.queue).drain();
        if !queued.is_empty() {
            tracing::info!(worker = %name, runs = queued.len(), "stopping: the local queue's runs go back to the queue");
        }
        for queued in queued {
            self.give_back(queued.claimed, queued.cancel, &finisher);
        }
        self.shut_down(&mut tasks, &active, &mut task_runs, &finisher)
            .await;
        heartbeat_stop.cancel();
        heartbeater.join().await;
        finisher.flushed().await;
        finisher.close();
        completer.join().await;
        let report = self.counters.report(&self.metrics);
        tracing::info!(worker = %name, ?report, "worker stopped");
        Ok(report)
    }

    async fn shut_down(
        &self,
        tasks: &mut JoinSet<Ended>,
        active: &ActiveMap,
        task_runs: &mut HashMap<tokio::task::Id, RunId>,
        finisher: &Finisher,
    ) {
        if tasks.is_empty() {
            return;
        }
        tracing::info!(worker = %self.config.name, running = tasks.len(), grace = ?self.config.shutdown_grace,
            "shutting down: no more claims, waiting for running handlers");
        let deadline = tokio::time::Instant::now() + self.config.shutdown_grace;
        while !tasks.is_empty() {
            match tokio::time::timeout_at(deadline, tasks.join_next_with_id()).await {
                Ok(Some(joined)) => self.reap(joined, active, task_runs, finisher),
                Ok(None) => break,
                Err(_) => break,
            }
        }
        if tasks.is_empty() {
            return;
        }
        let left: Vec<(StopSignal, AbortHandle)> = lock(active)
            .values()
            .map(|entry| (entry.signal.clone(), entry.abort.clone()))
            .collect();
        tracing::warn!(worker = %self.config.name, left = left.len(),
            "grace period over: stopping the remaining handlers and giving their runs back");
        for (signal, abort) in left {
            signal.stop(StopReason::Shutdown);
            abort.abort();
        }
        while let Some(joined) = tasks.join_next_with_id().await {
            self.reap(joined, active, task_runs, finisher);
        }
    }

    /// Slots free for a run now: neither running nor reserved by a hand-off in flight.
    fn free_slots(&self, tasks: &JoinSet<Ended>) -> usize {
        self.config
            .max_in_flight
            .saturating_sub(tasks.len() + self.intake.reserved())
    }

    fn sizer(&self) -> std::sync::MutexGuard<'_, Sizer> {
        self.sizer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a claim round's crash loops and cancels, and puts its runs at the end of
    /// the local queue in claim order ([`Worker::start_queued`] starts them).
    fn take_batch(&self, batch: ClaimBatch) {
        for run in &batch.crash_looped {
            Counters::bump(&self.counters.crash_looped, 1);
            Counters::bump(&self.counters.failed, 1);
            tracing::error!(run = %run.id, kind = %run.kind, tenant = %run.tenant, reclaims = run.reclaims,
                error = run.last_error.as_deref().unwrap_or(""), "run failed: crash loop");
        }
        for id in &batch.cancelled {
            Counters::bump(&self.counters.cancelled, 1);
            tracing::info!(run = %id, "run cancelled: its cancel was requested before its lease expired");
        }
        let since = tokio::time::Instant::now();
        let mut queue = lock_queue(&self.queue);
        for claimed in batch.claimed {
            // The lease the claim gave it (the kind's, else the worker's).
            let lease = self.intake.lease_of(&claimed.run.kind);
            queue.push(Queued {
                claimed,
                lease,
                since,
                cancel: false,
            });
        }
    }

    /// Starts queued runs, first claimed first, while slots are free; a run whose cancel
    /// was requested while it waited leaves cancelled, without a slot.
    fn start_queued(
        &self,
        active: &ActiveMap,
        tasks: &mut JoinSet<Ended>,
        task_runs: &mut HashMap<tokio::task::Id, RunId>,
        finisher: &Finisher,
    ) {
        loop {
            if self.free_slots(tasks) == 0 {
                return;
            }
            let Some(queued) = lock_queue(&self.queue).pop() else {
                return;
            };
            if queued.cancel {
                self.give_back(queued.claimed, queued.cancel, finisher);
                continue;
            }
            self.start_one(queued.claimed, active, tasks, task_runs, finisher);
        }
    }

    /// When the queue's oldest run will have waited its hold (`None`: the queue is empty).
    fn held_until(&self) -> Option<tokio::time::Instant> {
        let oldest = lock_queue(&self.queue).oldest()?;
        Some(oldest + self.sizer().hold())
    }

    /// Hands back the queued runs that waited past their hold: every slot is busy with
    /// handlers slower than the sizing expected, and another process may be idle.
    fn hand_back_held(&self, finisher: &Finisher) {
        let hold = self.sizer().hold();
        let held = lock_queue(&self.queue).take_held(hold);
        if held.is_empty() {
            return;
        }
        self.sizer().stalled();
        tracing::info!(worker = %self.config.name, runs = held.len(), ?hold,
            "local queue: runs waited past their hold with every slot busy; handing them back");
        for queued in held {
            self.give_back(queued.claimed, queued.cancel, finisher);
        }
    }

    /// Gives a claimed run back to the store, never started: pending and due at once with
    /// no counter moved (`Release`), or cancelled when `cancel` was requested meanwhile.
    fn give_back(&self, claimed: ClaimedRun, cancel: bool, finisher: &Finisher) {
        let ClaimedRun { run, owner, .. } = claimed;
        let action = if cancel {
            FinishAction::Cancel
        } else {
            FinishAction::Release
        };
        finisher.send(
            Finish {
                id: run.id,
                owner,
                action,
            },
            Arc::new(run),
        );
    }

    /// Start a run the intake delivered (see [`crate::handoff`]).
    fn start_handed(
        &self,
        claimed: ClaimedRun,
        active: &ActiveMap,
        tasks: &mut JoinSet<Ended>,
        task_runs: &mut HashMap<tokio::task::Id, RunId>,
        finisher: &Finisher,
    ) {
        self.intake.taken();
        self.metrics.handed_off.fetch_add(1, Ordering::Relaxed);
        self.start_one(claimed, active, tasks, task_runs, finisher);
    }

    fn start_one(
        &self,
        claimed: ClaimedRun,
        active: &ActiveMap,
        tasks: &mut JoinSet<Ended>,
        task_runs: &mut HashMap<tokio::task::Id, RunId>,
        finisher: &Finisher,
    ) {
        let ClaimedRun {
            run,
            owner,
            reclaimed,
        } = claimed;
        Counters::bump(&self.counters.claimed, 1);
        if !reclaimed {
            let waited = (chrono::Utc::now() - run.run_at)
                .to_std()
                .unwrap_or_default();
            self.metrics.start_delay.record(waited);
        }
        if reclaimed {
            Counters::bump(&self.counters.reclaimed, 1);
            tracing::warn!(run = %run.id, kind = %run.kind, reclaims = run.reclaims,
                "reclaimed a run whose lease expired (its worker died or stalled)");
        }
        let run = Arc::new(run);
        let Some(registered) = self.registry.get(&run.kind) else {
            let action = machine::decide_park(&run, self.config.park_base);
            tracing::warn!(run = %run.id, kind = %run.kind, parks = run.parks, action = action.name(),
                "no handler for this kind here: parking the run");
            finisher.send(
                Finish {
                    id: run.id,
                    owner,
                    action,
                },
                run,
            );
            return;
        };
        let lease = registered
            .config
            .lease()
            .unwrap_or(self.config.default_lease);
        let timeout = registered.config.timeout();
        let signal = StopSignal::new();
        let ctx = RunContext {
            run: run.clone(),
            signal: signal.clone(),
            checkpointer: Checkpointer::new(
                self.store.clone(),
                run.id,
                owner,
                lease,
                signal.clone(),
            ),
            dispatcher: self.dispatcher.clone(),
            worker: self.name.clone(),
        };
        let handler = registered.handler.clone();
        // Hold the map's lock across the spawn so the task cannot finish before it is listed.
        let mut map = lock(active);
        // This worker claimed back a run it was still executing: its lease expired
        // without the heartbeater learning it (the store was unreachable past the
        // lease). Two executions of one run must never overlap: stop the earlier one
        // before the new one starts (its writes are refused anyway, its token is
        // stale); `reap` ignores its end.
        if let Some(earlier) = map.remove(&run.id) {
            earlier.signal.stop(StopReason::LeaseLost);
            earlier.abort.abort();
            tracing::warn!(run = %run.id, kind = %run.kind,
                "claimed back a run this worker was still executing (its lease expired unnoticed): the earlier execution is stopped");
        }
        let abort = tasks.spawn(supervise(
            crate::guard::in_handler(run.id, async move { handler.handle(ctx).await }),
            timeout,
            self.metrics.clone(),
            run.clone(),
        ));
        task_runs.insert(abort.id(), run.id);
        map.insert(
            run.id,
            Active {
                run,
                owner,
                lease,
                signal,
                abort,
                started: tokio::time::Instant::now(),
            },
        );
    }

    fn reap(
        &self,
        joined: Result<(tokio::task::Id, Ended), JoinError>,
        active: &ActiveMap,
        task_runs: &mut HashMap<tokio::task::Id, RunId>,
        finisher: &Finisher,
    ) {
        let task_id = match &joined {
            Ok((id, _)) => *id,
            Err(err) => err.id(),
        };
        let Some(run_id) = task_runs.remove(&task_id) else {
            tracing::error!("invariant: a finished task with no run");
            return;
        };
        let entry = {
            let mut map = lock(active);
            match map.get(&run_id) {
                // A superseded execution (see `start_one`): the run's entry belongs to
                // the newer one, and nothing of the old one is written.
                Some(current) if current.abort.id() != task_id => {
                    tracing::debug!(run = %run_id, "a superseded execution ended; nothing written");
                    return;
                }
                _ => map.remove(&run_id),
            }
        };
        let Some(entry) = entry else {
            tracing::error!(run = %run_id, "invariant: a finished run missing from the active set");
            return;
        };
        let Active {
            run,
            owner,
            signal,
            started,
            ..
        } = entry;
        self.sizer().handler_ended(started.elapsed());
        // A reference, not a copy: this runs once per finished run.
        let default_ladder;
        let ladder = match self.registry.get(&run.kind) {
            Some(registered) => &registered.config.ladder,
            None => {
                default_ladder = RetryLadder::default();
                &default_ladder
            }
        };
        let outcome = match joined {
            Ok((_, Ended::Answered(outcome))) => Some(outcome),
            Ok((_, Ended::TimedOut(timeout))) => Some(Outcome::Retry {
                after: None,
                reason: format!("timed out after {timeout:?}"),
            }),
            Err(err) if err.is_panic() => {
                let message = panic_message(err.into_panic());
                tracing::error!(run = %run.id, kind = %run.kind, %message, "handler panicked");
                Some(Outcome::Fail(format!("handler panicked: {message}")))
            }
            Err(_) => None, // aborted: lease lost or shutdown
        };
        let action = match (signal.reason(), outcome) {
            (Some(StopReason::LeaseLost), _) => {
                Counters::bump(&self.counters.abandoned, 1);
                tracing::warn!(run = %run.id, kind = %run.kind, "lease lost: run abandoned, nothing more written");
                return;
            }
            (Some(StopReason::Shutdown), Some(Outcome::Done(result))) => {
                FinishAction::Complete { result }
            }
            (Some(StopReason::Shutdown), _) | (None, None) => FinishAction::Release,
            (Some(StopReason::Cancel), Some(outcome)) => machine::decide_cancelled(outcome),
            (Some(StopReason::Cancel), None) => FinishAction::Cancel,
            (None, Some(outcome)) => machine::decide(&run, outcome, ladder),
        };
        finisher.send(
            Finish {
                id: run.id,
                owner,
                action,
            },
            run,
        );
    }
}

/// Runs one handler in a task of its own and answers how it ended: what it answered, or
/// [`Ended::TimedOut`] at `timeout`. The supervisor is the task the worker's slot counts;
/// the handler's task is aborted when the supervisor ends or is aborted itself (lease
/// lost, shutdown), so the handler never outlives its slot — except one that blocks its
/// thread, which no abort reaches until it yields: the supervisor ends at the timeout all
/// the same (the slot is free), and a watcher logs and counts it as stuck if it has not
/// ended [`STUCK_GRACE`] later. A handler's panic is the supervisor's panic (the worker
/// fails the run with its message).
async fn supervise(
    handler: impl std::future::Future<Output = Outcome> + Send + 'static,
    timeout: Duration,
    metrics: Arc<WorkerMetrics>,
    run: Arc<Run>,
) -> Ended {
    let mut handle = tokio::spawn(handler);
    let _abort_on_drop = AbortGuard(handle.abort_handle());
    match tokio::time::timeout(timeout, &mut handle).await {
        Ok(Ok(outcome)) => Ended::Answered(outcome),
        Ok(Err(err)) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        // Cancelled: only this supervisor aborts the task, and not before this point.
        Ok(Err(_)) => Ended::TimedOut(timeout),
        Err(_) => {
            metrics.timed_out.fetch_add(1, Ordering::Relaxed);
            handle.abort();
            tokio::spawn(watch_aborted(handle, metrics, run, timeout));
            Ended::TimedOut(timeout)
        }
    }
}

/// Aborts a task when dropped (the supervisor's hold on its handler's task).
struct AbortGuard(AbortHandle);

impl Drop for AbortGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits [`STUCK_GRACE`] for a timed-out handler's aborted task to end; one that has not
/// is blocking its thread: logged and counted, then awaited for as long as it takes so
/// its end is logged too.
async fn watch_aborted(
    mut handle: tokio::task::JoinHandle<Outcome>,
    metrics: Arc<WorkerMetrics>,
    run: Arc<Run>,
    timeout: Duration,
) {
    if tokio::time::timeout(STUCK_GRACE, &mut handle).await.is_ok() {
        return;
    }
    metrics.stuck.fetch_add(1, Ordering::Relaxed);
    tracing::error!(run = %run.id, kind = %run.kind, ?timeout, grace = ?STUCK_GRACE,
        "handler stuck: still running after its timeout and its abort; it blocks its thread (a blocking call in an async handler?). Its slot is free and the run went back to its ladder; the thread stays taken until it returns");
    let _ = handle.await;
    tracing::warn!(run = %run.id, kind = %run.kind, "a stuck handler returned at last; its answer is ignored");
}

/// A spawned task that is aborted when its owner is dropped.
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl AbortOnDrop {
    fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Self(Some(tokio::spawn(task)))
    }

    async fn join(mut self) {
        if let Some(handle) = self.0.take() {
            let _ = handle.await;
        }
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(handle) = &self.0 {
            handle.abort();
        }
    }
}

fn lock(active: &ActiveMap) -> std::sync::MutexGuard<'_, HashMap<RunId, Active>> {
    active
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock_queue(queue: &QueueRef) -> std::sync::MutexGuard<'_, LocalQueue> {
    queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sleeps until `until`, or forever when there is nothing to wait for.
async fn sleep_until_or_never(until: Option<tokio::time::Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// A finished run waiting to be written, with the run it is about.
type Finished = (Finish, Arc<Run>);

/// Finished runs waiting to be written: the worker adds them ([`Finisher::send`]); the
/// completer takes them in batches, and a claim round takes what waits to write it in
/// its own transaction ([`RunStore::run_finish_and_claim`]).
///
/// A send is a push under a short lock. It wakes the completer only when the list was
/// empty (the completer may be idle) or reaches a whole batch (a lingering completer
/// may write now): under load a hundred finishes cost the completer one or two wake-ups,
/// not a hundred.
struct Finisher {
    waiting: Mutex<Vec<Finished>>,
    /// Sent and not yet written (or given up on), wherever they are.
    pending: AtomicUsize,
    arrived: tokio::sync::Notify,
    closed: std::sync::atomic::AtomicBool,
    max_batch: usize,
}

impl Finisher {
    fn new(max_batch: usize) -> Self {
        Self {
            waiting: Mutex::new(Vec::new()),
            pending: AtomicUsize::new(0),
            arrived: tokio::sync::Notify::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
            max_batch,
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Vec<Finished>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn send(&self, finish: Finish, run: Arc<Run>) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        let waiting = {
            let mut list = self.waiting();
            list.push((finish, run));
            list.len()
        };
        if waiting == 1 || waiting == self.max_batch {
            self.arrived.notify_one();
        }
    }

    /// Up to `at_most` of the waiting finishes, oldest first.
    fn take(&self, at_most: usize) -> Vec<Finished> {
        let mut list = self.waiting();
        let n = list.len().min(at_most);
        list.drain(..n).collect()
    }

    /// Finishes taken but not written (a claim that carried them failed): first in line
    /// again, for the completer.
    fn put_back(&self, mut finishes: Vec<Finished>) {
        if finishes.is_empty() {
            return;
        }
        {
            let mut list = self.waiting();
            finishes.append(&mut list);
            *list = finishes;
        }
        self.arrived.notify_one();
    }

    /// `n` taken finishes are written or given up on.
    fn done(&self, n: usize) {
        self.pending.fetch_sub(n, Ordering::SeqCst);
    }

    /// No more sends: the completer writes what waits and ends.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.arrived.notify_one();
    }

    /// Wait until every finish sent so far is written (or given up on).
    async fn flushed(&self) {
        while self.pending.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Whom a writer of finishes tells what it wrote: the counters, the metrics, and the
/// listeners of keyed ends.
struct Told {
    counters: Arc<Counters>,
    metrics: Arc<WorkerMetrics>,
    ends: tokio::sync::broadcast::Sender<KeyedEnd>,
}

impl Told {
    /// Counts and logs what the store answered for `batch`, and tells of keyed ends.
    fn written(&self, batch: &[Finished], replies: Vec<FinishReply>) {
        let by_id: HashMap<RunId, &Finished> =
            batch.iter().map(|entry| (entry.0.id, entry)).collect();
        for reply in replies {
            if let FinishReply::Applied { id, status } = &reply
                && status.is_terminal()
                && self.ends.receiver_count() > 0
                && let Some((_, run)) = by_id.get(id)
                && let Some(key) = &run.unique_key
            {
                // No listener, or one that went away: nothing to tell.
                let _ = self.ends.send(KeyedEnd {
                    id: *id,
                    tenant: run.tenant.clone(),
                    kind: run.kind.clone(),
                    unique_key: key.clone(),
                    status: *status,
                });
            }
            record(&self.counters, reply, &by_id);
        }
    }
}

/// Writes finishes in batches: whatever arrived while the previous batch was written
/// goes together, so the batch grows with load and one commit carries many runs. After
/// a batch of several, the next is held open up to `linger` for more (a lone finish is
/// written at once). Ends once the finisher is closed and nothing waits.
async fn completer(
    store: Arc<dyn RunStore>,
    finisher: Arc<Finisher>,
    linger: Duration,
    told: Arc<Told>,
) {
    let max_batch = finisher.max_batch;
    let mut previous = 0;
    loop {
        let mut batch = finisher.take(max_batch);
        if batch.is_empty() {
            if finisher.closed.load(Ordering::SeqCst) {
                return;
            }
            // A send since the take left a permit: no finish is missed.
            finisher.arrived.notified().await;
            continue;
        }
        if previous >= LINGER_AFTER && !linger.is_zero() && batch.len() < max_batch {
            let until = tokio::time::Instant::now() + linger;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => break,
                    _ = finisher.arrived.notified() => {
                        if batch.len() + finisher.waiting().len() >= max_batch
                            || finisher.closed.load(Ordering::SeqCst)
                        {
                            break;
                        }
                    }
                }
            }
            batch.extend(finisher.take(max_batch - batch.len()));
        }
        previous = batch.len();
        let mut delay = Duration::from_millis(20);
        let mut tries = 0;
        let replies = loop {
            tries += 1;
            // The store takes the finishes by value; the batch keeps them for a retry.
            let finishes: Vec<Finish> = batch.iter().map(|(finish, _)| finish.clone()).collect();
            let write = Instant::now();
            let written = store.run_finish_many(finishes).await;
            told.metrics.complete.record(write.elapsed());
            match written {
                Ok(replies) => break Some(replies),
                Err(StoreError::Unavailable(message)) if tries < 30 => {
                    tracing::warn!(batch = batch.len(), %message, retry_in = ?delay, "completer: storage unavailable, trying again");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                Err(err) => {
                    tracing::error!(batch = batch.len(), error = %err,
                        "completer: could not write finished runs; their leases will expire and they will be reclaimed");
                    break None;
                }
            }
        };
        if let Some(replies) = replies {
            told.written(&batch, replies);
        }
        finisher.done(batch.len());
    }
}

fn record(counters: &Counters, reply: FinishReply, by_id: &HashMap<RunId, &(Finish, Arc<Run>)>) {
    match reply {
        FinishReply::LeaseLost { id } => {
            Counters::bump(&counters.abandoned, 1);
            tracing::warn!(run = %id, "finish refused: lease lost (another owner took the run); nothing written");
        }
        FinishReply::Applied { id, status } => {
            let Some((finish, run)) = by_id.get(&id) else {
                return;
            };
            match (&finish.action, status) {
                (_, RunStatus::Cancelled) => {
                    Counters::bump(&counters.cancelled, 1);
                    tracing::info!(run = %id, kind = %run.kind, "run cancelled");
                }
                (FinishAction::Complete { .. }, _) => {
                    Counters::bump(&counters.completed, 1);
                    tracing::debug!(run = %id, kind = %run.kind, "run completed");
                }
                (FinishAction::Fail { error }, _) => {
                    Counters::bump(&counters.failed, 1);
                    tracing::error!(run = %id, kind = %run.kind, tenant = %run.tenant,
                        attempts = run.attempts, reclaims = run.reclaims, parks = run.parks,
                        %error, "run failed");
                }
                (FinishAction::Retry { delay, error }, _) => {
                    Counters::bump(&counters.retried, 1);
                    tracing::info!(run = %id, kind = %run.kind, attempt = run.attempts + 1,
                        retry_in = ?delay, %error, "run will be retried");
                }
                (FinishAction::Snooze { delay }, _) => {
                    Counters::bump(&counters.snoozed, 1);
                    tracing::debug!(run = %id, kind = %run.kind, until_in = ?delay, "run snoozed");
                }
                (FinishAction::Park { delay, .. }, _) => {
                    Counters::bump(&counters.parked, 1);
                    tracing::info!(run = %id, kind = %run.kind, parks = run.parks + 1, retry_in = ?delay, "run parked");
                }
                (FinishAction::Release, _) => {
                    Counters::bump(&counters.released, 1);
                    tracing::info!(run = %id, kind = %run.kind, "run given back on shutdown");
                }
                (FinishAction::Cancel, _) => {
                    Counters::bump(&counters.cancelled, 1);
                }
                (FinishAction::Suppress { reason }, _) => {
                    Counters::bump(&counters.suppressed, 1);
                    tracing::warn!(run = %id, kind = %run.kind, tenant = %run.tenant, %reason, "run suppressed");
                }
            }
        }
    }
}

/// Signals the handler of every run in flight here whose cancel the store's feed names;
/// runs elsewhere are not ours to stop. A lagging feed loses the oldest (the heartbeat
/// delivers them).
async fn hear_cancels(mut requests: tokio::sync::broadcast::Receiver<RunId>, runs: LocalRuns) {
    loop {
        match requests.recv().await {
            Ok(id) => {
                runs.cancel(id);
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(lost)) => {
                tracing::warn!(
                    lost,
                    "cancel feed: fell behind; the heartbeat delivers the lost cancels"
                );
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Renews every active and queued lease in one write per round and delivers cancel
/// flags. A queued run whose lease is lost leaves the queue (nothing is written); one
/// whose cancel was requested leaves it cancelled when it is next taken.
async fn heartbeater(
    store: Arc<dyn RunStore>,
    runs: LocalRuns,
    counters: Arc<Counters>,
    every: Duration,
    stop: CancellationToken,
) {
    let LocalRuns { active, queue } = runs;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let mut renewals: Vec<LeaseRenewal> = lock(&active)
            .iter()
            .filter(|(_, entry)| !entry.signal.is_stopped())
            .map(|(id, entry)| LeaseRenewal {
                id: *id,
                owner: entry.owner,
                lease: entry.lease,
            })
            .collect();
        renewals.extend(lock_queue(&queue).iter().map(|queued| LeaseRenewal {
            id: queued.claimed.run.id,
            owner: queued.claimed.owner,
            lease: queued.lease,
        }));
        if renewals.is_empty() {
            continue;
        }
        let replies = match store.run_heartbeat_many(renewals).await {
            Ok(replies) => replies,
            Err(err) => {
                tracing::warn!(error = %err, "heartbeat failed; leases not renewed this round");
                continue;
            }
        };
        let map = lock(&active);
        let mut waiting = lock_queue(&queue);
        for reply in replies {
            // A run both running and queued here is one claimed back while its earlier
            // execution went on unnoticed: the reply goes to the running one, which
            // starting the queued one stops anyway.
            if let Some(entry) = map.get(&reply.id) {
                if reply.lost {
                    tracing::warn!(run = %reply.id, kind = %entry.run.kind, "heartbeat: lease lost; stopping the handler");
                    entry.signal.stop(StopReason::LeaseLost);
                    entry.abort.abort();
                } else if reply.cancel_requested && !entry.signal.is_stopped() {
                    tracing::info!(run = %reply.id, kind = %entry.run.kind, "heartbeat: cancel requested; signalling the handler");
                    entry.signal.stop(StopReason::Cancel);
                }
            } else if reply.lost {
                if let Some(queued) = waiting.remove(reply.id) {
                    Counters::bump(&counters.abandoned, 1);
                    tracing::warn!(run = %reply.id, kind = %queued.claimed.run.kind,
                        "heartbeat: lease lost while the run waited in the local queue; dropped, nothing written");
                }
            } else if reply.cancel_requested
                && let Some(queued) = waiting.get_mut(reply.id)
                && !queued.cancel
            {
                tracing::info!(run = %reply.id, kind = %queued.claimed.run.kind,
                    "heartbeat: cancel requested; the run leaves the local queue cancelled");
                queued.cancel = true;
            }
        }
    }
}
