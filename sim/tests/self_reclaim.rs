//! Worker behaviours seen through a store with hooks:
//!
//! - an idle worker claims once per wake-up, not once more after every run it finishes
//!   (a claim that came back short found no more due runs);
//! - a worker that claims back a run it is still executing never runs the two
//!   executions side by side.
//!
//! How it happens: the store stops answering heartbeats (an outage) for longer than the
//! lease, so the lease expires while the handler goes on; the worker's next claim round
//! finds the expired run and reclaims it — into the same worker. The earlier execution
//! must be stopped before the new one starts, and its end must write nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fronta_engine::store::{ClaimBatch, ClaimParams, HeartbeatReply, LeaseRenewal, StoreResult};
use fronta_engine::{
    Dispatcher, EnqueueRequest, Handler, KindConfig, ManualClock, Outcome, Registry, RunContext,
    RunStatus, RunStore, StoreError, Worker, WorkerConfig,
};
use fronta_sim::hooked::{Hooked, Hooks};
use fronta_sim::memory::MemoryStore;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Heartbeats fail while `outage` is set; claim rounds are counted.
#[derive(Default)]
struct Outage {
    outage: AtomicBool,
    claims: AtomicUsize,
}

#[async_trait]
impl Hooks for Outage {
    async fn claim(&self, store: &MemoryStore, params: ClaimParams) -> StoreResult<ClaimBatch> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        store.run_claim(params).await
    }
    async fn heartbeat(
        &self,
        store: &MemoryStore,
        renewals: Vec<LeaseRenewal>,
    ) -> StoreResult<Vec<HeartbeatReply>> {
        if self.outage.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("heartbeats are cut".into()));
        }
        store.run_heartbeat_many(renewals).await
    }
}

/// Counts executions and how many are live; each waits for `release` (or its
/// stop signal).
#[derive(Default)]
struct Probe {
    started: AtomicUsize,
    live: AtomicUsize,
    release: Notify,
    first_started: Notify,
}

struct Live<'a>(&'a Probe);

impl Drop for Live<'_> {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Slow(Arc<Probe>);

#[async_trait]
impl Handler for Slow {
    async fn handle(&self, ctx: RunContext) -> Outcome {
        let probe = &self.0;
        probe.live.fetch_add(1, Ordering::SeqCst);
        let _live = Live(probe);
        if probe.started.fetch_add(1, Ordering::SeqCst) == 0 {
            probe.first_started.notify_one();
        }
        tokio::select! {
            _ = probe.release.notified() => Outcome::Done(None),
            _ = ctx.signal.stopped() => Outcome::Done(None),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_claimed_back_by_its_own_worker_never_runs_twice_at_once() {
    let clock = ManualClock::at_fixed_start();
    let store = Arc::new(Hooked {
        store: MemoryStore::new(Arc::new(clock.clone())),
        hooks: Outage::default(),
    });
    let probe = Arc::new(Probe::default());
    let mut registry = Registry::new();
    registry
        .register(
            "slow",
            KindConfig::durable(Duration::from_secs(2), Duration::from_secs(600)),
            Slow(probe.clone()),
        )
        .expect("the kind registers");
    let registry = Arc::new(registry);
    let dispatcher = Dispatcher::from_registry(store.clone(), &registry);
    let id = dispatcher
        .enqueue(EnqueueRequest::new("slow", serde_json::json!({}), 3))
        .await
        .expect("enqueued")
        .id();

    let worker = Worker::new(
        store.clone(),
        registry,
        WorkerConfig {
            name: "self-reclaim".into(),
            max_in_flight: 2,
            poll_interval: Duration::from_millis(10),
            heartbeat_every: Some(Duration::from_millis(10)),
            ..WorkerConfig::default()
        },
    )
    .expect("a worker");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));

    tokio::time::timeout(Duration::from_secs(10), probe.first_started.notified())
        .await
        .expect("the first execution started");
    // The outage: heartbeats fail, and the lease runs out on the store's clock.
    store.hooks.outage.store(true, Ordering::SeqCst);
    clock.advance(Duration::from_secs(3));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while probe.started.load(Ordering::SeqCst) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker claimed the expired run back within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.hooks.outage.store(false, Ordering::SeqCst);
    // Give a superseded execution every chance to be seen running beside the new one.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        probe.live.load(Ordering::SeqCst),
        1,
        "only the new execution is live"
    );
    probe.release.notify_waiters();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let run = store.run_get(id).await.expect("read").expect("the run");
        if run.status == RunStatus::Completed {
            assert_eq!(run.reclaims, 1, "one reclaim counted");
            assert_eq!(run.attempts, 0, "no attempt spent");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new execution completed the run: {run:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    running
        .await
        .expect("the worker task")
        .expect("the worker ends cleanly");
    assert_eq!(probe.started.load(Ordering::SeqCst), 2, "two executions");
}

struct Quick;

#[async_trait]
impl Handler for Quick {
    async fn handle(&self, _ctx: RunContext) -> Outcome {
        Outcome::Done(None)
    }
}

/// One run at a time into an idle worker whose poll never fires: each enqueue's wake-up
/// is one claim round, and finishing the run is none (it would find nothing: the claim
/// that took the run came back short).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_claims_once_per_wake_up_not_after_every_run() {
    let clock = ManualClock::at_fixed_start();
    let store = Arc::new(Hooked {
        store: MemoryStore::new(Arc::new(clock.clone())),
        hooks: Outage::default(),
    });
    let mut registry = Registry::new();
    registry
        .register(
            "quick",
            KindConfig::fire_and_forget(Duration::from_secs(60)),
            Quick,
        )
        .expect("the kind registers");
    let registry = Arc::new(registry);
    let dispatcher = Dispatcher::from_registry(store.clone(), &registry);
    let worker = Worker::new(
        store.clone(),
        registry,
        WorkerConfig {
            name: "idle".into(),
            max_in_flight: 4,
            poll_interval: Duration::from_secs(3600),
            ..WorkerConfig::default()
        },
    )
    .expect("a worker");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    // The first round, at start, finds the queue empty.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while store.hooks.claims.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker's first claim"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    const RUNS: usize = 20;
    for round in 0..RUNS {
        let id = dispatcher
            .enqueue(EnqueueRequest::new("quick", serde_json::json!({}), 0))
            .await
            .expect("enqueued")
            .id();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let run = store.run_get(id).await.expect("read").expect("the run");
            if run.status == RunStatus::Completed {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run {round} completed without a poll: {run:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // Let a claim that would follow the last run's end happen before counting.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let claims = store.hooks.claims.load(Ordering::SeqCst);
    assert_eq!(
        claims,
        1 + RUNS,
        "one claim at start and one per enqueue's wake-up; none after a run ends"
    );
    shutdown.cancel();
    let report = running
        .await
        .expect("the worker task")
        .expect("the worker ends cleanly");
    assert_eq!(
        report.completed, RUNS as u64,
        "every run completed: {report:?}"
    );
}
