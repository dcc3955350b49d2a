//! The worker's two batching waits, seen through a store that records every claim round
//! and finish batch, on tokio's paused clock (no wall time is measured):
//!
//! - the completer's linger ([`WorkerConfig::completer_linger`]): under load (finishes
//!   arriving faster than a write takes), a batch is held open up to the linger, so the
//!   same runs are written in fewer, larger batches — every run still written exactly
//!   once, none over `completer_batch`; a lone finish on a quiet worker is written at once,
//!   however long the linger;
//! - the claim gather ([`WorkerConfig::claim_gather`]): with a backlog, the next round
//!   waits for half the slots to free, so the same runs are claimed in fewer, larger
//!   rounds; a run enqueued at a quiet worker starts at once, however long the gather;
//! - the local queue ([`WorkerConfig::prefetch_max`]): with a backlog, rounds claim ahead
//!   of the free slots, so the same runs are claimed in fewer rounds than without one.
//!
//! The linger and gather cases run without a local queue (it would hide the gather).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fronta_engine::store::{ClaimBatch, ClaimParams, Finish, FinishReply, StoreResult};
use fronta_engine::{
    Dispatcher, EnqueueRequest, Handler, KindConfig, ManualClock, Outcome, Registry, RunContext,
    RunStatus, RunStore, Worker, WorkerConfig,
};
use fronta_sim::hooked::{Hooked, Hooks};
use fronta_sim::memory::MemoryStore;
use tokio_util::sync::CancellationToken;

/// Records the size of every finish batch and every claim round.
#[derive(Default)]
struct Recording {
    batches: Mutex<Vec<usize>>,
    claims: Mutex<Vec<usize>>,
}

impl Recording {
    fn sizes(&self) -> Vec<usize> {
        self.batches.lock().expect("batches").clone()
    }

    /// The runs each claim round answered.
    fn rounds(&self) -> Vec<usize> {
        self.claims.lock().expect("claims").clone()
    }
}

#[async_trait]
impl Hooks for Recording {
    async fn claim(&self, store: &MemoryStore, params: ClaimParams) -> StoreResult<ClaimBatch> {
        let batch = store.run_claim(params).await?;
        self.claims
            .lock()
            .expect("claims")
            .push(batch.claimed.len());
        // A round takes a while, as on a real database.
        tokio::time::sleep(Duration::from_micros(300)).await;
        Ok(batch)
    }
    async fn finish(
        &self,
        store: &MemoryStore,
        finishes: Vec<Finish>,
    ) -> StoreResult<Vec<FinishReply>> {
        self.batches.lock().expect("batches").push(finishes.len());
        // A write takes a while, as on a real database: finishes pile up meanwhile.
        tokio::time::sleep(Duration::from_micros(300)).await;
        store.run_finish_many(finishes).await
    }
}

type Store = Hooked<Recording>;

/// Sleeps 1 to 7 ms (by the payload's `n`), so finishes trickle in rather than arrive
/// all at one instant.
struct Staggered;

#[async_trait]
impl Handler for Staggered {
    async fn handle(&self, ctx: RunContext) -> Outcome {
        let n = ctx.run.payload["n"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(1 + n % 7)).await;
        Outcome::Done(None)
    }
}

fn setup() -> (Arc<Store>, Arc<Registry>, Dispatcher) {
    let clock = ManualClock::at_fixed_start();
    let store = Arc::new(Hooked {
        store: MemoryStore::new(Arc::new(clock)),
        hooks: Recording::default(),
    });
    let mut registry = Registry::new();
    registry
        .register(
            "staggered",
            KindConfig::fire_and_forget(Duration::from_secs(60)),
            Staggered,
        )
        .expect("the kind registers");
    let registry = Arc::new(registry);
    let dispatcher = Dispatcher::from_registry(store.clone(), &registry);
    (store, registry, dispatcher)
}

/// The two waits of a worker, and its local queue.
#[derive(Clone, Copy)]
struct Waits {
    linger: Duration,
    gather: Duration,
    prefetch_max: usize,
}

const NONE: Waits = Waits {
    linger: Duration::ZERO,
    gather: Duration::ZERO,
    prefetch_max: 0,
};

fn config(waits: Waits, until_idle: bool) -> WorkerConfig {
    WorkerConfig {
        name: "batching".into(),
        max_in_flight: 64,
        poll_interval: Duration::from_millis(5),
        until_idle,
        completer_batch: 200,
        completer_linger: waits.linger,
        claim_gather: waits.gather,
        prefetch_max: waits.prefetch_max,
        ..WorkerConfig::default()
    }
}

/// Drains `runs` runs with the given waits; answers the store that saw it.
async fn drain(runs: u64, waits: Waits) -> Arc<Store> {
    let (store, registry, dispatcher) = setup();
    let requests = (0..runs)
        .map(|n| EnqueueRequest::new("staggered", serde_json::json!({ "n": n }), 0))
        .collect();
    dispatcher.enqueue_many(requests).await.expect("enqueued");
    let report = Worker::new(store.clone(), registry, config(waits, true))
        .expect("a worker")
        .run(CancellationToken::new())
        .await
        .expect("the worker ends cleanly");
    assert_eq!(report.completed, runs, "every run completed: {report:?}");
    let stats = store.run_stats().await.expect("stats");
    assert_eq!(stats.completed, runs, "every run completed in the store");
    let sizes = store.hooks.sizes();
    assert_eq!(
        sizes.iter().sum::<usize>() as u64,
        runs,
        "every run written exactly once across the batches: {sizes:?}"
    );
    assert!(
        sizes.iter().all(|size| *size <= 200),
        "no batch over completer_batch: {sizes:?}"
    );
    assert_eq!(
        store.hooks.rounds().iter().sum::<usize>() as u64,
        runs,
        "every run claimed exactly once"
    );
    store
}

#[tokio::test(start_paused = true)]
async fn under_load_finishes_are_written_in_fewer_larger_batches() {
    let eager = drain(3_000, NONE).await.hooks.sizes();
    let lingering = drain(
        3_000,
        Waits {
            linger: Duration::from_millis(5),
            ..NONE
        },
    )
    .await
    .hooks
    .sizes();
    assert!(
        lingering.len() * 3 <= eager.len(),
        "a 5 ms linger writes the same 3,000 runs in at most a third of the batches: {} with it, {} without",
        lingering.len(),
        eager.len()
    );
}

#[tokio::test(start_paused = true)]
async fn a_lone_finish_on_a_quiet_worker_is_written_at_once() {
    let (store, registry, dispatcher) = setup();
    let linger = Duration::from_secs(1);
    let waits = Waits {
        linger,
        gather: linger,
        prefetch_max: 256,
    };
    let worker = Worker::new(store.clone(), registry, config(waits, false)).expect("a worker");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    // Runs one at a time: each written long before the linger would end.
    for n in 0..40u64 {
        let id = dispatcher
            .enqueue(EnqueueRequest::new(
                "staggered",
                serde_json::json!({ "n": n }),
                0,
            ))
            .await
            .expect("enqueued")
            .id();
        let enqueued = tokio::time::Instant::now();
        loop {
            let run = store.run_get(id).await.expect("read").expect("the run");
            if run.status == RunStatus::Completed {
                break;
            }
            assert!(
                enqueued.elapsed() < linger / 4,
                "run {n} written without waiting for the {linger:?} linger: {run:?}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    shutdown.cancel();
    running
        .await
        .expect("the worker task")
        .expect("the worker ends cleanly");
    assert_eq!(store.hooks.sizes(), vec![1; 40], "one batch of one per run");
}

#[tokio::test(start_paused = true)]
async fn with_a_backlog_runs_are_claimed_in_fewer_larger_rounds() {
    let eager = drain(3_000, NONE).await.hooks.rounds();
    let gathering = drain(
        3_000,
        Waits {
            gather: Duration::from_millis(2),
            ..NONE
        },
    )
    .await
    .hooks
    .rounds();
    assert!(
        gathering.len() * 2 <= eager.len(),
        "a 2 ms gather claims the same 3,000 runs in at most half the rounds: {} with it, {} without",
        gathering.len(),
        eager.len()
    );
}

#[tokio::test(start_paused = true)]
async fn with_a_backlog_a_local_queue_claims_the_same_runs_in_fewer_rounds() {
    let eager = drain(3_000, NONE).await.hooks.rounds();
    let queued = drain(
        3_000,
        Waits {
            prefetch_max: 256,
            ..NONE
        },
    )
    .await
    .hooks
    .rounds();
    assert!(
        queued.len() * 2 <= eager.len(),
        "a local queue claims the same 3,000 runs in at most half the rounds: {} with it, {} without",
        queued.len(),
        eager.len()
    );
}
