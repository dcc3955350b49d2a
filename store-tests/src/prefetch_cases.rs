//! The worker's local queue ([`fronta_engine::prefetch`]) against the store: a stuck
//! worker hands its queued runs back to an idle one, tenants keep taking turns through
//! the queue, a shutdown gives queued runs back spending nothing, a crash leaves them to
//! be reclaimed with one reclaim each, and a cancel reaches a queued run without it ever
//! starting.
//!
//! The queue is sized from what the worker measures: the claim round's time against the
//! handlers'. So that every store gives the same sizing, the cases claim through
//! [`SlowClaims`], which makes each claim round take [`ROUND`] — far longer than the
//! no-op handlers — and the worker measures a full queue (`prefetch_max`) after a few
//! training runs. The cases still wait for the state they need (the queue holding runs),
//! never for time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_engine::store::{Prune, StoreResult};
use fronta_engine::{
    CancelReply, CheckpointParams, ClaimBatch, ClaimParams, Dispatcher, EngineError,
    EnqueueRequest, Enqueued, Finish, FinishReply, HandOff, HeartbeatReply, KindConfig,
    LeaseRenewal, LocalRuns, NewRun, Outcome, Registry, RetryReply, Run, RunContext, RunFilter,
    RunId, RunStats, RunStatus, RunStore, Worker, WorkerConfig, WorkerReport,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::StoreFactory;
use crate::support::{Env, PATIENCE, wait_for_status, wait_until};

/// How long each claim round takes through [`SlowClaims`].
const ROUND: Duration = Duration::from_millis(40);

/// The local queue's bound in these cases.
const PREFETCH: usize = 6;

/// A timeout no handler reaches unless it is meant to.
const LONG_TIMEOUT: Duration = Duration::from_secs(60);

/// A store whose claim rounds take [`ROUND`] longer; everything else as the store does.
struct SlowClaims(Arc<dyn RunStore>);

#[async_trait]
impl RunStore for SlowClaims {
    async fn run_enqueue_many(&self, runs: Vec<NewRun>) -> StoreResult<Vec<Enqueued>> {
        self.0.run_enqueue_many(runs).await
    }
    async fn run_enqueue_started(
        &self,
        run: NewRun,
        lease: Duration,
        holder: Option<fronta_engine::ProcessId>,
    ) -> StoreResult<HandOff> {
        self.0.run_enqueue_started(run, lease, holder).await
    }
    async fn run_claim(&self, params: ClaimParams) -> StoreResult<ClaimBatch> {
        tokio::time::sleep(ROUND).await;
        self.0.run_claim(params).await
    }
    async fn run_heartbeat_many(
        &self,
        leases: Vec<LeaseRenewal>,
    ) -> StoreResult<Vec<HeartbeatReply>> {
        self.0.run_heartbeat_many(leases).await
    }
    async fn run_checkpoint(&self, params: CheckpointParams) -> StoreResult<()> {
        self.0.run_checkpoint(params).await
    }
    async fn run_finish_many(&self, finishes: Vec<Finish>) -> StoreResult<Vec<FinishReply>> {
        self.0.run_finish_many(finishes).await
    }
    async fn run_request_cancel(&self, id: RunId) -> StoreResult<CancelReply> {
        self.0.run_request_cancel(id).await
    }
    async fn run_retry(&self, id: RunId) -> StoreResult<RetryReply> {
        self.0.run_retry(id).await
    }
    fn cancel_requests(&self) -> Option<tokio::sync::broadcast::Receiver<RunId>> {
        self.0.cancel_requests()
    }
    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        self.0.run_get(id).await
    }
    async fn run_find_by_key(&self, tenant: &str, key: &str) -> StoreResult<Option<Run>> {
        self.0.run_find_by_key(tenant, key).await
    }
    async fn run_list(&self, filter: RunFilter) -> StoreResult<Vec<Run>> {
        self.0.run_list(filter).await
    }
    async fn run_prune(&self, prune: &Prune) -> StoreResult<u64> {
        self.0.run_prune(prune).await
    }
    async fn oldest_finished(&self) -> StoreResult<Option<DateTime<Utc>>> {
        self.0.oldest_finished().await
    }
    async fn run_stats(&self) -> StoreResult<RunStats> {
        self.0.run_stats().await
    }
    async fn run_busy(&self) -> StoreResult<bool> {
        self.0.run_busy().await
    }
    async fn store_ready(&self) -> StoreResult<()> {
        self.0.store_ready().await
    }
    fn enqueue_signal(&self) -> Arc<Notify> {
        self.0.enqueue_signal()
    }
}

/// Who ran what: the tenant of every start, in order, and how often each run started.
#[derive(Default)]
struct Starts {
    order: Mutex<Vec<(RunId, String)>>,
}

impl Starts {
    fn record(&self, ctx: &RunContext) {
        self.order
            .lock()
            .expect("starts lock")
            .push((ctx.run.id, ctx.run.tenant.clone()));
    }

    fn order(&self) -> Vec<(RunId, String)> {
        self.order.lock().expect("starts lock").clone()
    }

    fn count(&self, id: RunId) -> usize {
        self.order().iter().filter(|(run, _)| *run == id).count()
    }
}

/// A `stuck` run's handler: it says it started, then holds its slot until released.
#[derive(Clone, Default)]
struct Gate {
    started: Arc<Notify>,
    release: Arc<Notify>,
    held: Arc<AtomicBool>,
}

/// A registry with `noop` (counted in `starts`, yields once) and `stuck` (held by `gate`;
/// with `gate` `None` it completes at once, as a second process's handler would).
fn registry(starts: &Arc<Starts>, gate: Option<Gate>) -> Registry {
    let mut registry = Registry::new();
    let noop_starts = starts.clone();
    registry
        .register(
            "noop",
            KindConfig::fire_and_forget(LONG_TIMEOUT),
            move |ctx: RunContext| {
                let starts = noop_starts.clone();
                async move {
                    starts.record(&ctx);
                    tokio::task::yield_now().await;
                    Outcome::done()
                }
            },
        )
        .expect("noop registers");
    let stuck_starts = starts.clone();
    registry
        .register(
            "stuck",
            KindConfig::fire_and_forget(LONG_TIMEOUT),
            move |ctx: RunContext| {
                let starts = stuck_starts.clone();
                let gate = gate.clone();
                async move {
                    starts.record(&ctx);
                    if let Some(gate) = gate {
                        gate.held.store(true, Ordering::SeqCst);
                        gate.started.notify_one();
                        gate.release.notified().await;
                        gate.held.store(false, Ordering::SeqCst);
                    }
                    Outcome::done()
                }
            },
        )
        .expect("stuck registers");
    registry
}

fn config(name: &str) -> WorkerConfig {
    WorkerConfig {
        name: name.into(),
        max_in_flight: 1,
        prefetch_max: PREFETCH,
        poll_interval: Duration::from_millis(10),
        heartbeat_every: Some(Duration::from_millis(50)),
        shutdown_grace: Duration::from_millis(200),
        until_idle: false,
        ..WorkerConfig::default()
    }
}

/// A worker running in its own task on `store`.
struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<Result<WorkerReport, EngineError>>,
    local: LocalRuns,
}

impl Running {
    fn spawn(store: Arc<dyn RunStore>, registry: Registry, config: WorkerConfig) -> Self {
        let worker =
            Worker::new(store, Arc::new(registry), config).expect("the worker config is valid");
        let local = worker.local_runs();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(worker.run(shutdown.clone()));
        Self {
            shutdown,
            task,
            local,
        }
    }

    async fn stop(self) -> WorkerReport {
        self.shutdown.cancel();
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .unwrap_or_else(|_| panic!("the worker did not stop within {PATIENCE:?}"))
            .expect("the worker task did not panic")
            .expect("the worker ran without error")
    }
}

fn noop(tenant: &str) -> EnqueueRequest {
    EnqueueRequest::new("noop", serde_json::json!({}), 3).tenant(tenant)
}

async fn enqueue_all(dispatcher: &Dispatcher, requests: Vec<EnqueueRequest>) -> Vec<RunId> {
    dispatcher
        .enqueue_many(requests)
        .await
        .expect("enqueue succeeds")
        .into_iter()
        .map(Enqueued::id)
        .collect()
}

/// Runs `noop` runs through the worker until it has measured its handlers and rounds.
async fn train(env: &Env, dispatcher: &Dispatcher) {
    let ids = enqueue_all(dispatcher, (0..20).map(|_| noop("training")).collect()).await;
    for id in ids {
        wait_for_status(&env.store, id, RunStatus::Completed).await;
    }
}

/// A trained one-slot worker whose slot is held by a `stuck` run while its local queue
/// holds some of `queued` `noop` runs enqueued behind it. Answers the worker, the gate,
/// the stuck run and the noops.
async fn stuck_with_a_full_queue(
    env: &Env,
    store: &Arc<dyn RunStore>,
    starts: &Arc<Starts>,
    queued: usize,
) -> (Running, Gate, RunId, Vec<RunId>) {
    let dispatcher = Dispatcher::new(store.clone(), ["noop", "stuck"]);
    let gate = Gate::default();
    let worker = Running::spawn(
        store.clone(),
        registry(starts, Some(gate.clone())),
        config("holder"),
    );
    train(env, &dispatcher).await;
    // One batch, one commit, one tenant: the stuck run (higher priority) first in claim
    // order, the noops behind it.
    let mut requests = vec![
        EnqueueRequest::new("stuck", serde_json::json!({}), 3)
            .tenant("acme")
            .priority(10),
    ];
    requests.extend((0..queued).map(|_| noop("acme")));
    let ids = enqueue_all(&dispatcher, requests).await;
    tokio::time::timeout(PATIENCE, gate.started.notified())
        .await
        .expect("the stuck run started");
    let local = worker.local.clone();
    wait_until("the worker's local queue to hold runs", || {
        let local = local.clone();
        async move { local.queued() > 0 }
    })
    .await;
    (worker, gate, ids[0], ids[1..].to_vec())
}

// ---------------------------------------------------------------------------------------

/// Two processes on one store; one holds a full local queue behind a handler that does
/// not end. Its queued runs are handed back once they waited their hold, and the idle
/// process runs every one of them while the stuck handler still holds its slot.
pub async fn a_stuck_worker_hands_its_queued_runs_to_an_idle_one(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let store: Arc<dyn RunStore> = Arc::new(SlowClaims(env.store.clone()));
    let starts = Arc::new(Starts::default());
    let (holder, gate, stuck, noops) = stuck_with_a_full_queue(&env, &store, &starts, 4).await;
    let queued_at_start = holder.local.queued();
    let idle = Running::spawn(store.clone(), registry(&starts, None), config("idle"));
    for id in &noops {
        wait_for_status(&env.store, *id, RunStatus::Completed).await;
    }
    assert!(
        gate.held.load(Ordering::SeqCst),
        "every queued run completed while the stuck handler still held its slot"
    );
    assert_eq!(holder.local.queued(), 0, "the holder's queue is empty");
    gate.release.notify_one();
    wait_for_status(&env.store, stuck, RunStatus::Completed).await;
    let holder_report = holder.stop().await;
    let idle_report = idle.stop().await;
    assert!(
        holder_report.released >= queued_at_start as u64,
        "the holder handed back the {queued_at_start} runs it queued: {holder_report:?}"
    );
    assert!(
        idle_report.completed >= queued_at_start as u64,
        "the idle process ran them: {idle_report:?}"
    );
    for id in noops.iter().chain([&stuck]) {
        assert_eq!(starts.count(*id), 1, "run {id} started exactly once");
        let run = env.get(*id).await;
        assert_eq!(
            (run.attempts, run.reclaims, run.parks),
            (0, 0, 0),
            "handing back spends nothing"
        );
    }
}

/// Tenants take turns through the local queue: runs of a tenant enqueued while another
/// tenant's long backlog streams through a one-slot worker start within a bound set by
/// the queue and the slots, not after the backlog.
pub async fn tenants_take_turns_through_the_local_queue(factory: &dyn StoreFactory) {
    const BACKLOG: usize = 80;
    const SMALL: usize = 5;
    let env = Env::open(factory).await;
    let store: Arc<dyn RunStore> = Arc::new(SlowClaims(env.store.clone()));
    let starts = Arc::new(Starts::default());
    let dispatcher = Dispatcher::new(store.clone(), ["noop", "stuck"]);
    let worker = Running::spawn(store.clone(), registry(&starts, None), config("turns"));
    train(&env, &dispatcher).await;
    let trained = starts.order().len();
    let backlog = enqueue_all(&dispatcher, (0..BACKLOG).map(|_| noop("big")).collect()).await;
    wait_until("the backlog to be under way", || {
        let starts = starts.clone();
        async move { starts.order().len() >= trained + 10 }
    })
    .await;
    let before = starts.order().len();
    let small = enqueue_all(&dispatcher, (0..SMALL).map(|_| noop("small")).collect()).await;
    for id in backlog.iter().chain(&small) {
        wait_for_status(&env.store, *id, RunStatus::Completed).await;
    }
    worker.stop().await;
    let order = starts.order();
    let last_small = order
        .iter()
        .rposition(|(_, tenant)| tenant == "small")
        .expect("the small tenant's runs started");
    // Ahead of the small tenant's runs at most: the queue and a round in flight (each at
    // most the free slot plus the queue's bound), the slot itself, then rounds in which
    // the two tenants alternate.
    let bound = before + 2 * (PREFETCH + 1) + 1 + 2 * SMALL;
    assert!(
        last_small < bound,
        "the small tenant's last run started {} starts after it was enqueued (bound {}); the backlog had {} runs",
        last_small - before,
        bound - before,
        BACKLOG
    );
    assert!(
        last_small < trained + BACKLOG,
        "the small tenant did not wait for the whole backlog"
    );
}

/// A graceful shutdown gives every run of the local queue back, as it does the running
/// one: pending, due at once, no counter spent, owned by nobody.
pub async fn shutdown_gives_queued_runs_back_without_spending_counters(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let store: Arc<dyn RunStore> = Arc::new(SlowClaims(env.store.clone()));
    let starts = Arc::new(Starts::default());
    let (holder, _gate, stuck, noops) = stuck_with_a_full_queue(&env, &store, &starts, 4).await;
    let report = holder.stop().await;
    assert!(
        report.released >= 2,
        "the running run and the queued ones were given back: {report:?}"
    );
    for id in noops.iter().chain([&stuck]) {
        let run = env.get(*id).await;
        assert_eq!(run.status, RunStatus::Queued, "run {id} is queued again");
        assert_eq!(
            (run.attempts, run.reclaims, run.parks),
            (0, 0, 0),
            "a shutdown spends nothing"
        );
        assert_eq!(run.locked_by, None, "nobody owns run {id}");
        if *id != stuck {
            assert_eq!(starts.count(*id), 0, "queued run {id} never started");
        }
    }
}

/// A worker that dies with runs in its local queue leaves them leased like running ones:
/// when the lease runs out the next worker reclaims each, counting one reclaim and no
/// attempt, and runs it once.
pub async fn queued_runs_of_a_dead_worker_are_reclaimed_counting_one_reclaim(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let store: Arc<dyn RunStore> = Arc::new(SlowClaims(env.store.clone()));
    let starts = Arc::new(Starts::default());
    let (holder, _gate, stuck, noops) = stuck_with_a_full_queue(&env, &store, &starts, 4).await;
    let queued: Vec<RunId> = {
        let mut queued = Vec::new();
        for id in &noops {
            if env.get(*id).await.status == RunStatus::Running {
                queued.push(*id);
            }
        }
        queued
    };
    assert!(
        !queued.is_empty(),
        "some noops wait in the dead worker's queue"
    );
    holder.task.abort();
    let _ = holder.task.await;
    env.advance(WorkerConfig::default().default_lease + Duration::from_secs(1));
    let next = Running::spawn(env.store.clone(), registry(&starts, None), config("next"));
    for id in noops.iter().chain([&stuck]) {
        wait_for_status(&env.store, *id, RunStatus::Completed).await;
    }
    let report = next.stop().await;
    assert!(
        report.reclaimed > queued.len() as u64,
        "the stuck run and every queued one were reclaimed: {report:?}"
    );
    for id in &queued {
        let run = env.get(*id).await;
        assert_eq!(
            (run.reclaims, run.attempts),
            (1, 0),
            "a queued run of a dead worker counts one reclaim and no attempt"
        );
        assert_eq!(
            starts.count(*id),
            1,
            "queued run {id} ran once, after the crash"
        );
    }
}

/// A cancel requested for a run waiting in a local queue cancels it without it ever
/// starting, while the slot ahead of it is still held.
pub async fn a_cancel_reaches_a_queued_run_before_it_starts(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let store: Arc<dyn RunStore> = Arc::new(SlowClaims(env.store.clone()));
    let starts = Arc::new(Starts::default());
    let (holder, gate, stuck, noops) = stuck_with_a_full_queue(&env, &store, &starts, 4).await;
    let mut target = None;
    for id in &noops {
        if env.get(*id).await.status == RunStatus::Running {
            target = Some(*id);
            break;
        }
    }
    let target = target.expect("a noop waits in the local queue");
    assert_eq!(
        env.store.run_request_cancel(target).await.expect("cancel"),
        CancelReply::Requested,
        "a queued run is claimed: its cancel is requested"
    );
    let cancelled = wait_for_status(&env.store, target, RunStatus::Cancelled).await;
    assert_eq!(cancelled.attempts, 0);
    assert_eq!(starts.count(target), 0, "the cancelled run never started");
    gate.release.notify_one();
    for id in noops.iter().filter(|id| **id != target).chain([&stuck]) {
        wait_for_status(&env.store, *id, RunStatus::Completed).await;
    }
    let report = holder.stop().await;
    assert!(report.cancelled >= 1, "{report:?}");
    let counted: HashMap<RunId, usize> =
        starts
            .order()
            .into_iter()
            .fold(HashMap::new(), |mut counts, (id, _)| {
                *counts.entry(id).or_default() += 1;
                counts
            });
    assert!(
        counted.values().all(|count| *count == 1),
        "no run started twice: {counted:?}"
    );
}
