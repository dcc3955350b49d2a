//! Worker-level cases: a real [`Worker`] driven against the store — draining, parking,
//! the retry ladder, snooze, panics, timeouts, two-phase cancel, durable resume after a
//! crash, fencing of a stalled worker, graceful shutdown and refused configuration.
//!
//! The store's clock is manual (due times and leases move only when a case moves it);
//! the worker's own timers (heartbeat, timeout, poll, grace) are tokio's real time, kept
//! short. "A crash" is a claim made through the port by nobody who will ever finish it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fronta_engine::registry::StopReason;
use fronta_engine::{
    CancelReply, CheckpointParams, ClaimParams, Dispatcher, EngineError, EnqueueRequest,
    FinishAction, FinishReply, KindConfig, LeaseLost, Outcome, Registry, RetryLadder, RunContext,
    RunId, RunStatus, RunStore, Worker, WorkerConfig, WorkerMetrics, WorkerReport,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::StoreFactory;
use crate::support::{Env, LEASE, PATIENCE, after, wait_for_status, wait_until};

/// A timeout no handler in these cases reaches unless it is meant to.
const LONG_TIMEOUT: Duration = Duration::from_secs(60);

fn config(name: &str) -> WorkerConfig {
    WorkerConfig {
        name: name.into(),
        max_in_flight: 4,
        poll_interval: Duration::from_millis(10),
        park_base: Duration::from_secs(1),
        shutdown_grace: Duration::from_secs(5),
        until_idle: true,
        ..WorkerConfig::default()
    }
}

fn dispatcher(env: &Env, kinds: &[&str]) -> Dispatcher {
    Dispatcher::new(env.store.clone(), kinds.iter().copied())
}

async fn enqueue(dispatcher: &Dispatcher, request: EnqueueRequest) -> RunId {
    dispatcher
        .enqueue(request)
        .await
        .expect("enqueue succeeds")
        .id()
}

fn register(
    registry: &mut Registry,
    kind: &str,
    config: KindConfig,
    handler: impl fronta_engine::Handler,
) {
    registry
        .register(kind, config, handler)
        .unwrap_or_else(|err| panic!("kind {kind} registers: {err}"));
}

/// Run a worker with `until_idle` to the end and hand back its report.
async fn run_until_idle(
    store: &Arc<dyn RunStore>,
    registry: Registry,
    config: WorkerConfig,
) -> WorkerReport {
    assert!(config.until_idle, "invariant: this helper runs until idle");
    let worker =
        Worker::new(store.clone(), Arc::new(registry), config).expect("the worker config is valid");
    tokio::time::timeout(PATIENCE, worker.run(CancellationToken::new()))
        .await
        .unwrap_or_else(|_| panic!("the worker did not go idle within {PATIENCE:?}"))
        .expect("the worker ran without error")
}

/// A worker running in its own task until told to stop, with its own dispatcher (whose
/// enqueues it may take by hand-off) and its metrics.
struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<Result<WorkerReport, EngineError>>,
    own: Dispatcher,
    metrics: Arc<WorkerMetrics>,
}

impl Running {
    fn spawn(store: &Arc<dyn RunStore>, registry: Registry, config: WorkerConfig) -> Self {
        let worker = Worker::new(store.clone(), Arc::new(registry), config)
            .expect("the worker config is valid");
        let own = worker.dispatcher().clone();
        let metrics = worker.metrics();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(worker.run(shutdown.clone()));
        Self {
            shutdown,
            task,
            own,
            metrics,
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

/// Sets its flag when dropped: tells a case that a handler's future ended, whether it
/// returned or was aborted.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------

/// A worker with several slots drains 500 runs: every run completed, every handler called
/// exactly once, never more handlers at once than `max_in_flight`.
pub async fn worker_drains_many_runs_each_exactly_once(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let total = 500;
    let max_in_flight = 8;
    let dispatcher = dispatcher(&env, &["noop"]);
    let ids: Vec<RunId> = dispatcher
        .enqueue_many(
            (0..total)
                .map(|index| {
                    EnqueueRequest::new("noop", serde_json::json!({ "index": index }), 0)
                        .tenant(format!("tenant-{}", index % 5))
                })
                .collect(),
        )
        .await
        .expect("enqueue succeeds")
        .into_iter()
        .map(|enqueued| enqueued.id())
        .collect();

    let ledger = Arc::new(SlotLedger::default());
    let report = run_until_idle(
        &env.store,
        ledger.registry(Duration::ZERO),
        WorkerConfig {
            max_in_flight,
            ..config("drainer")
        },
    )
    .await;

    assert_eq!(
        report.completed, total as u64,
        "the worker reports every run completed: {report:?}"
    );
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(
        (stats.completed, stats.total()),
        (total as u64, total as u64),
        "every run is stored as completed: {stats:?}"
    );
    let calls = ledger.calls();
    assert_eq!(calls.len(), total, "every run's handler was called");
    for id in &ids {
        assert_eq!(calls.get(id), Some(&1), "run {id} was handled exactly once");
    }
    let most_in_flight = ledger.most_in_flight.load(Ordering::SeqCst);
    assert!(
        most_in_flight <= max_in_flight,
        "never more than {max_in_flight} handlers at once, saw {most_in_flight}"
    );
}

/// A run of a kind this worker has no handler for is parked with a doubling delay
/// (`parks += 1`, `attempts` untouched) and fails on its fifth visit.
pub async fn worker_parks_an_unknown_kind_then_fails_it_on_the_fifth_time(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let id = enqueue(
        &dispatcher(&env, &["ghost"]),
        EnqueueRequest::new("ghost", serde_json::json!({}), 3),
    )
    .await;
    let park_base = Duration::from_secs(1);
    let registry = || {
        let mut registry = Registry::new();
        register(
            &mut registry,
            "noop",
            KindConfig::fire_and_forget(LONG_TIMEOUT),
            |_ctx: RunContext| async { Outcome::done() },
        );
        registry
    };

    for parks in 1..=4u32 {
        let report = run_until_idle(
            &env.store,
            registry(),
            WorkerConfig {
                park_base,
                ..config("no-ghosts-here")
            },
        )
        .await;
        assert_eq!(report.parked, 1, "visit {parks}: parked once: {report:?}");
        let run = env.get(id).await;
        assert_eq!(run.status, RunStatus::Scheduled, "visit {parks}: waiting");
        assert_eq!(run.parks, parks, "visit {parks}: parks counted");
        assert_eq!(run.attempts, 0, "visit {parks}: a park spends no attempt");
        let delay = park_base * 2u32.pow(parks - 1);
        assert_eq!(
            run.run_at,
            after(env.now(), delay),
            "visit {parks}: parked for {delay:?} (doubling from park_base)"
        );
        let error = run.last_error.clone().unwrap_or_default();
        assert!(
            error.contains("no handler"),
            "visit {parks}: last_error says why: {error:?}"
        );
        env.advance(delay);
    }

    let report = run_until_idle(
        &env.store,
        registry(),
        WorkerConfig {
            park_base,
            ..config("no-ghosts-here")
        },
    )
    .await;
    assert_eq!(
        report.failed, 1,
        "the fifth visit fails the run: {report:?}"
    );
    let run = env.get(id).await;
    assert_eq!(run.status, RunStatus::Failed, "failed after five visits");
    assert_eq!(
        (run.parks, run.attempts),
        (4, 0),
        "four parks counted, no attempt spent"
    );
    let error = run.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("no handler"),
        "last_error says there was no handler: {error:?}"
    );
}

fn always_retry(after: Option<Duration>) -> impl fronta_engine::Handler {
    move |_ctx: RunContext| async move {
        Outcome::Retry {
            after,
            reason: "upstream flaky".into(),
        }
    }
}

/// `Retry { after: None }` spends an attempt and waits the default ladder's step:
/// 30 s before the first retry, 2 min before the second.
pub async fn retry_without_a_delay_follows_the_default_ladder(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let id = enqueue(
        &dispatcher(&env, &["flaky"]),
        EnqueueRequest::new("flaky", serde_json::json!({}), 3),
    )
    .await;
    let registry = || {
        let mut registry = Registry::new();
        register(
            &mut registry,
            "flaky",
            KindConfig::fire_and_forget(LONG_TIMEOUT),
            always_retry(None),
        );
        registry
    };

    let report = run_until_idle(&env.store, registry(), config("retrier")).await;
    assert_eq!(report.retried, 1, "one retry: {report:?}");
    let run = env.get(id).await;
    assert_eq!(run.attempts, 1, "an attempt is spent");
    assert_eq!(run.status, RunStatus::Scheduled, "waiting for its retry");
    assert_eq!(
        run.run_at,
        after(env.now(), Duration::from_secs(30)),
        "first retry after 30 s"
    );
    assert_eq!(
        run.last_error.as_deref(),
        Some("upstream flaky"),
        "last_error is the reason"
    );

    env.advance(Duration::from_secs(30));
    run_until_idle(&env.store, registry(), config("retrier")).await;
    let run = env.get(id).await;
    assert_eq!(run.attempts, 2, "a second attempt is spent");
    assert_eq!(
        run.run_at,
        after(env.now(), Duration::from_secs(120)),
        "second retry after 2 min"
    );
    assert_eq!(run.reclaims, 0, "retries are not reclaims");
}

/// A kind's own ladder (`KindConfig::with_ladder`) replaces the default, and past its
/// last step every retry waits the last step.
pub async fn per_kind_ladder_replaces_the_default(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let id = enqueue(
        &dispatcher(&env, &["laddered"]),
        EnqueueRequest::new("laddered", serde_json::json!({}), 5),
    )
    .await;
    let ladder = RetryLadder::new(vec![Duration::from_secs(7), Duration::from_secs(9)])
        .expect("a non-empty ladder");
    let registry = || {
        let mut registry = Registry::new();
        register(
            &mut registry,
            "laddered",
            KindConfig::fire_and_forget(LONG_TIMEOUT).with_ladder(ladder.clone()),
            always_retry(None),
        );
        registry
    };
    for (attempts, delay) in [(1u32, 7u64), (2, 9), (3, 9)] {
        run_until_idle(&env.store, registry(), config("laddered")).await;
        let run = env.get(id).await;
        assert_eq!(run.attempts, attempts, "attempt {attempts} spent");
        assert_eq!(
            run.run_at,
            after(env.now(), Duration::from_secs(delay)),
            "retry {attempts} waits {delay} s by the kind's ladder"
        );
        env.advance(Duration::from_secs(delay));
    }
}

/// `Retry { after: Some(d) }` (a Retry-After) waits `d`, not the ladder.
pub async fn retry_after_is_honoured(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let id = enqueue(
        &dispatcher(&env, &["rate-limited"]),
        EnqueueRequest::new("rate-limited", serde_json::json!({}), 3),
    )
    .await;
    let mut registry = Registry::new();
    register(
        &mut registry,
        "rate-limited",
        KindConfig::fire_and_forget(LONG_TIMEOUT),
        always_retry(Some(Duration::from_secs(42))),
    );
    run_until_idle(&env.store, registry, config("polite")).await;
    let run = env.get(id).await;
    assert_eq!(run.attempts, 1, "a Retry-After still spends an attempt");
    assert_eq!(
        run.run_at,
        after(env.now(), Duration::from_secs(42)),
        "due after the Retry-After delay, not the ladder's 30 s"
    );
}

/// A retry with no retries left fails the run: `max_retries 0` at once, `max_retries 1`
/// on the second retry.
pub async fn retry_with_no_retries_left_fails_the_run(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let dispatcher = dispatcher(&env, &["flaky"]);
    let once = enqueue(
        &dispatcher,
        EnqueueRequest::new("flaky", serde_json::json!({}), 0),
    )
    .await;
    let twice = enqueue(
        &dispatcher,
        EnqueueRequest::new("flaky", serde_json::json!({}), 1),
    )
    .await;
    let registry = || {
        let mut registry = Registry::new();
        register(
            &mut registry,
            "flaky",
            KindConfig::fire_and_forget(LONG_TIMEOUT),
            always_retry(None),
        );
        registry
    };

    run_until_idle(&env.store, registry(), config("strict")).await;
    let run = env.get(once).await;
    assert_eq!(
        run.status,
        RunStatus::Failed,
        "max_retries 0 fails on the first retry"
    );
    assert_eq!(
        run.attempts, 0,
        "no attempt was spent on a retry never made"
    );
    let error = run.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("gave up") && error.contains("upstream flaky"),
        "last_error says it gave up and why: {error:?}"
    );
    let run = env.get(twice).await;
    assert_eq!(
        (run.status, run.attempts),
        (RunStatus::Scheduled, 1),
        "max_retries 1 retries once"
    );

    env.advance(Duration::from_secs(30));
    run_until_idle(&env.store, registry(), config("strict")).await;
    let run = env.get(twice).await;
    assert_eq!(
        run.status,
        RunStatus::Failed,
        "the second retry of max_retries 1 fails"
    );
    assert_eq!(run.attempts, 1, "one attempt spent");
    assert!(run.failed_at.is_some(), "failed_at is set");
}

/// `Snooze(d)` puts the run back for `d` without spending an attempt; it runs again
/// afterwards.
pub async fn snooze_reschedules_without_spending_an_attempt(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let id = enqueue(
        &dispatcher(&env, &["sleepy"]),
        EnqueueRequest::new("sleepy", serde_json::json!({}), 0),
    )
    .await;
    let calls = Arc::new(AtomicUsize::new(0));
    let registry = || {
        let calls = calls.clone();
        let mut registry = Registry::new();
        register(
            &mut registry,
            "sleepy",
            KindConfig::fire_and_forget(LONG_TIMEOUT),
            move |_ctx: RunContext| {
                let calls = calls.clone();
                async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        Outcome::Snooze(Duration::from_secs(90))
                    } else {
                        Outcome::Done(Some(serde_json::json!("woke up")))
                    }
                }
            },
        );
        registry
    };

    let report = run_until_idle(&env.store, registry(), config("snoozer")).await;
    assert_eq!(report.snoozed, 1, "one snooze: {report:?}");
    let run = env.get(id).await;
    assert_eq!(run.status, RunStatus::Scheduled, "snoozed");
    assert_eq!(
        run.run_at,
        after(env.now(), Duration::from_secs(90)),
        "due after the snooze"
    );
    assert_eq!(
        (run.attempts, run.reclaims, run.parks),
        (0, 0, 0),
        "a snooze spends nothing"
    );

    run_until_idle(&env.store, registry(), config("snoozer")).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "not run again before the snooze is over"
    );
    env.advance(Duration::from_secs(90));
    run_until_idle(&env.store, registry(), config("snoozer")).await;
    let run = env.get(id).await;
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "completed after the snooze, though max_retries is 0"
    );
    assert_eq!(run.attempts, 0, "still no attempt spent");
    assert_eq!(
        run.result,
        Some(serde_json::json!("woke up")),
        "result stored"
    );
}

async fn panics(_ctx: RunContext) -> Outcome {
    panic!("kaboom: a bug in the handler")
}

/// A panicking handler fails its run ("panicked" in `last_error`, no retry) and the same
/// worker goes on to complete other runs.
pub async fn panicking_handler_fails_its_run_and_the_worker_goes_on(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let dispatcher = dispatcher(&env, &["buggy", "noop"]);
    let buggy = enqueue(
        &dispatcher,
        EnqueueRequest::new("buggy", serde_json::json!({}), 5),
    )
    .await;
    let mut others = Vec::new();
    for _ in 0..5 {
        others.push(
            enqueue(
                &dispatcher,
                EnqueueRequest::new("noop", serde_json::json!({}), 0),
            )
            .await,
        );
    }
    let mut registry = Registry::new();
    register(
        &mut registry,
        "buggy",
        KindConfig::fire_and_forget(LONG_TIMEOUT),
        panics,
    );
    register(
        &mut registry,
        "noop",
        KindConfig::fire_and_forget(LONG_TIMEOUT),
        |_ctx: RunContext| async { Outcome::done() },
    );
    let report = run_until_idle(
        &env.store,
        registry,
        WorkerConfig {
            max_in_flight: 1,
            ..config("survivor")
        },
    )
    .await;
    assert_eq!(
        (report.failed, report.completed),
        (1, 5),
        "one failed, the rest completed: {report:?}"
    );
    let run = env.get(buggy).await;
    assert_eq!(
        run.status,
        RunStatus::Failed,
        "a panic fails the run, retries or not"
    );
    assert_eq!(run.attempts, 0, "a panic is not retried");
    let error = run.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("panicked") && error.contains("kaboom"),
        "last_error says it panicked and how: {error:?}"
    );
    for id in others {
        assert_eq!(
            env.get(id).await.status,
            RunStatus::Completed,
            "run {id} completed by the same worker after the panic"
        );
    }
}

/// A handler running past its kind's timeout is stopped and retried: an attempt spent,
/// "timed out" in `last_error`.
pub async fn handler_past_its_timeout_is_retried(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let id = enqueue(
        &dispatcher(&env, &["slow"]),
        EnqueueRequest::new("slow", serde_json::json!({}), 3),
    )
    .await;
    let mut registry = Registry::new();
    register(
        &mut registry,
        "slow",
        KindConfig::fire_and_forget(Duration::from_millis(200)),
        |_ctx: RunContext| async {
            tokio::time::sleep(LONG_TIMEOUT).await;
            Outcome::done()
        },
    );
    let report = run_until_idle(&env.store, registry, config("impatient")).await;
    assert_eq!(
        report.retried, 1,
        "the timed-out run is retried: {report:?}"
    );
    let run = env.get(id).await;
    assert_eq!(run.status, RunStatus::Scheduled, "waiting for its retry");
    assert_eq!(run.attempts, 1, "a timeout spends an attempt");
    let error = run.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("timed out"),
        "last_error says it timed out: {error:?}"
    );
}

/// Two-phase cancel: a cancel request on a running run answers `Requested`; the
/// heartbeat delivers it, the handler's signal fires (reason `Cancel`), and the run ends
/// `cancelled` with `cancelled_at`.
pub async fn cancel_reaches_a_running_handler_through_the_heartbeat(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let id = enqueue(
        &dispatcher(&env, &["patient"]),
        EnqueueRequest::new("patient", serde_json::json!({}), 3),
    )
    .await;
    let started = Arc::new(Notify::new());
    let reason: Arc<Mutex<Option<StopReason>>> = Arc::default();
    let mut registry = Registry::new();
    {
        let (started, reason) = (started.clone(), reason.clone());
        register(
            &mut registry,
            "patient",
            // A 300 ms lease: the heartbeat comes every 100 ms.
            KindConfig::durable(Duration::from_millis(300), LONG_TIMEOUT),
            move |ctx: RunContext| {
                let (started, reason) = (started.clone(), reason.clone());
                async move {
                    started.notify_one();
                    ctx.signal.stopped().await;
                    *reason.lock().expect("reason lock") = ctx.signal.reason();
                    Outcome::Fail("stopped before finishing".into())
                }
            },
        );
    }
    let worker = Running::spawn(
        &env.store,
        registry,
        WorkerConfig {
            until_idle: false,
            ..config("cancellable")
        },
    );
    tokio::time::timeout(PATIENCE, started.notified())
        .await
        .expect("the handler started");
    assert_eq!(
        env.store
            .run_request_cancel(id)
            .await
            .expect("cancel succeeds"),
        CancelReply::Requested,
        "a running run's cancel is requested"
    );
    let run = wait_for_status(&env.store, id, RunStatus::Cancelled).await;
    assert_eq!(run.cancelled_at, Some(env.now()), "cancelled_at is written");
    assert_eq!(
        *reason.lock().expect("reason lock"),
        Some(StopReason::Cancel),
        "the handler's signal fired for the cancel"
    );
    let report = worker.stop().await;
    assert_eq!(
        report.cancelled, 1,
        "the worker counts the cancel: {report:?}"
    );
    assert_eq!(
        report.failed, 0,
        "a cancelled run is not a failure: {report:?}"
    );
}

/// Durable resume: a worker dies after checkpointing step 2; once its lease has run
/// out a real worker reclaims the run, the handler sees state 2 and finishes from there
/// (`reclaims` 1, `attempts` 0).
pub async fn durable_handler_resumes_from_its_checkpoint_after_a_crash(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let lease = Duration::from_secs(1);
    let id = enqueue(
        &dispatcher(&env, &["import"]),
        EnqueueRequest::new("import", serde_json::json!({ "steps": 4 }), 3),
    )
    .await;

    // The worker that will die: claims, checkpoints step 2, never finishes.
    let dead = env
        .claim(ClaimParams {
            limit: 1,
            default_lease: LEASE,
            leases: HashMap::from([("import".to_owned(), lease)]),
            max_reclaims: 5,
            holder: None,
        })
        .await;
    assert_eq!(dead.claimed.len(), 1, "the doomed worker claims the run");
    env.store
        .run_checkpoint(CheckpointParams {
            id,
            owner: dead.claimed[0].owner,
            state: vec![2],
            lease,
        })
        .await
        .expect("the doomed worker checkpoints step 2");
    env.advance(lease * 2);

    let resumed_from: Arc<Mutex<Vec<u8>>> = Arc::default();
    let steps_done: Arc<Mutex<Vec<u8>>> = Arc::default();
    let mut registry = Registry::new();
    {
        let (resumed_from, steps_done) = (resumed_from.clone(), steps_done.clone());
        register(
            &mut registry,
            "import",
            KindConfig::durable(lease, LONG_TIMEOUT),
            move |ctx: RunContext| {
                let (resumed_from, steps_done) = (resumed_from.clone(), steps_done.clone());
                async move {
                    let start = ctx
                        .run
                        .state
                        .as_deref()
                        .and_then(|state| state.first().copied())
                        .unwrap_or(0);
                    resumed_from.lock().expect("lock").push(start);
                    for step in start + 1..=4 {
                        if ctx.checkpointer.save(vec![step]).await.is_err() {
                            return Outcome::Fail("lease lost".into());
                        }
                        steps_done.lock().expect("lock").push(step);
                    }
                    Outcome::Done(Some(serde_json::json!({ "resumed_from": start })))
                }
            },
        );
    }
    let report = run_until_idle(&env.store, registry, config("survivor")).await;
    assert_eq!(
        report.reclaimed, 1,
        "the worker reclaimed the run: {report:?}"
    );
    assert_eq!(
        *resumed_from.lock().expect("lock"),
        vec![2],
        "the handler ran once and saw the last checkpoint"
    );
    assert_eq!(
        *steps_done.lock().expect("lock"),
        vec![3, 4],
        "it did only the steps after the checkpoint"
    );
    let run = env.get(id).await;
    assert_eq!(run.status, RunStatus::Completed, "the run completed");
    assert_eq!(
        (run.reclaims, run.attempts),
        (1, 0),
        "one reclaim, no attempt spent"
    );
    assert_eq!(run.state, Some(vec![4]), "the last checkpoint is stored");
    assert_eq!(
        run.result,
        Some(serde_json::json!({ "resumed_from": 2 })),
        "the result tells where it resumed"
    );
}

/// A stalled worker whose run was taken over is fenced: its next checkpoint answers
/// `LeaseLost`, and it writes nothing more about the run (the new owner keeps it).
pub async fn fenced_worker_abandons_its_run_and_writes_nothing(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let lease = Duration::from_secs(1);
    let id = enqueue(
        &dispatcher(&env, &["stalls"]),
        EnqueueRequest::new("stalls", serde_json::json!({}), 3),
    )
    .await;
    let started = Arc::new(Notify::new());
    let go_on = Arc::new(Notify::new());
    let saved: Arc<Mutex<Option<Result<(), LeaseLost>>>> = Arc::default();
    let mut registry = Registry::new();
    {
        let (started, go_on, saved) = (started.clone(), go_on.clone(), saved.clone());
        register(
            &mut registry,
            "stalls",
            KindConfig::durable(lease, LONG_TIMEOUT),
            move |ctx: RunContext| {
                let (started, go_on, saved) = (started.clone(), go_on.clone(), saved.clone());
                async move {
                    started.notify_one();
                    go_on.notified().await;
                    let answer = ctx.checkpointer.save(b"too late".to_vec()).await;
                    *saved.lock().expect("lock") = Some(answer);
                    Outcome::Done(Some(serde_json::json!("must not be written")))
                }
            },
        );
    }
    // One slot (so the stalled worker claims nothing more) and no heartbeat to speak of
    // (so it cannot renew the lease it is about to lose).
    let worker = Running::spawn(
        &env.store,
        registry,
        WorkerConfig {
            max_in_flight: 1,
            heartbeat_every: Some(Duration::from_secs(3600)),
            until_idle: false,
            ..config("stalled")
        },
    );
    tokio::time::timeout(PATIENCE, started.notified())
        .await
        .expect("the handler started");

    env.advance(lease * 2);
    let takeover = env
        .claim(ClaimParams {
            limit: 1,
            default_lease: LEASE,
            leases: HashMap::from([("stalls".to_owned(), lease)]),
            max_reclaims: 5,
            holder: None,
        })
        .await;
    assert_eq!(
        takeover.claimed.len(),
        1,
        "another claimer takes the run over"
    );
    assert!(takeover.claimed[0].reclaimed, "the takeover is a reclaim");
    let new_owner = takeover.claimed[0].owner;
    let taken = env.get(id).await;

    go_on.notify_one();
    wait_until("the stalled handler's checkpoint answer", || {
        let saved = saved.clone();
        async move { saved.lock().expect("lock").is_some() }
    })
    .await;
    assert_eq!(
        *saved.lock().expect("lock"),
        Some(Err(LeaseLost)),
        "the stalled worker's checkpoint is lease lost"
    );
    let report = worker.stop().await;
    assert_eq!(
        report.abandoned, 1,
        "the worker abandoned the run: {report:?}"
    );
    assert_eq!(report.completed, 0, "it wrote no completion: {report:?}");
    assert_eq!(
        env.get(id).await,
        taken,
        "the stalled worker wrote nothing: the row is as the takeover left it"
    );
    assert_eq!(
        env.finish(id, new_owner, FinishAction::Complete { result: None })
            .await,
        FinishReply::Applied {
            id,
            status: RunStatus::Completed
        },
        "the new owner still owns the run and completes it"
    );
}

/// A worker whose heartbeat finds the lease lost stops that handler and abandons the
/// run: nothing of its outcome is written.
pub async fn heartbeat_that_finds_the_lease_lost_abandons_the_run(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let lease = Duration::from_secs(1);
    let id = enqueue(
        &dispatcher(&env, &["blocks"]),
        EnqueueRequest::new("blocks", serde_json::json!({}), 3),
    )
    .await;
    let started = Arc::new(Notify::new());
    let ended = Arc::new(AtomicBool::new(false));
    let mut registry = Registry::new();
    {
        let (started, ended) = (started.clone(), ended.clone());
        register(
            &mut registry,
            "blocks",
            KindConfig::durable(lease, LONG_TIMEOUT),
            move |ctx: RunContext| {
                let (started, ended) = (started.clone(), ended.clone());
                async move {
                    let _ended = DropFlag(ended);
                    started.notify_one();
                    ctx.signal.stopped().await;
                    Outcome::Done(Some(serde_json::json!("must not be written")))
                }
            },
        );
    }
    let worker = Running::spawn(
        &env.store,
        registry,
        WorkerConfig {
            max_in_flight: 1,
            heartbeat_every: Some(Duration::from_millis(50)),
            until_idle: false,
            ..config("outrun")
        },
    );
    tokio::time::timeout(PATIENCE, started.notified())
        .await
        .expect("the handler started");

    // The worker keeps renewing; move the clock past the lease until a takeover wins
    // the race against its heartbeat.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let new_owner = loop {
        env.advance(lease * 2);
        let batch = env
            .claim(ClaimParams {
                limit: 1,
                default_lease: LEASE,
                leases: HashMap::from([("blocks".to_owned(), lease)]),
                max_reclaims: 1000,
                holder: None,
            })
            .await;
        if let Some(claimed) = batch.claimed.first() {
            break claimed.owner;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no takeover within {PATIENCE:?}"
        );
        tokio::task::yield_now().await;
    };
    let taken = env.get(id).await;

    wait_until("the outrun handler to be stopped", || {
        let ended = ended.clone();
        async move { ended.load(Ordering::SeqCst) }
    })
    .await;
    let report = worker.stop().await;
    assert_eq!(
        report.abandoned, 1,
        "the worker abandoned the run: {report:?}"
    );
    assert_eq!(report.completed, 0, "it wrote no completion: {report:?}");
    assert_eq!(
        env.get(id).await,
        taken,
        "the outrun worker wrote nothing after the takeover"
    );
    assert_eq!(
        env.finish(id, new_owner, FinishAction::Complete { result: None })
            .await,
        FinishReply::Applied {
            id,
            status: RunStatus::Completed
        },
        "the new owner completes the run"
    );
}

/// Graceful shutdown: a handler that ignores its signal is stopped after
/// `shutdown_grace`, and its run is given back — queued, due now, nothing spent.
pub async fn shutdown_gives_running_runs_back_without_spending_counters(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let id = enqueue(
        &dispatcher(&env, &["stubborn"]),
        EnqueueRequest::new("stubborn", serde_json::json!({}), 3),
    )
    .await;
    let started = Arc::new(Notify::new());
    let mut registry = Registry::new();
    {
        let started = started.clone();
        register(
            &mut registry,
            "stubborn",
            KindConfig::fire_and_forget(LONG_TIMEOUT),
            move |_ctx: RunContext| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    tokio::time::sleep(LONG_TIMEOUT).await;
                    Outcome::done()
                }
            },
        );
    }
    let worker = Running::spawn(
        &env.store,
        registry,
        WorkerConfig {
            shutdown_grace: Duration::from_millis(200),
            until_idle: false,
            ..config("leaving")
        },
    );
    tokio::time::timeout(PATIENCE, started.notified())
        .await
        .expect("the handler started");
    assert_eq!(
        env.get(id).await.status,
        RunStatus::Running,
        "the run is running before shutdown"
    );
    let report = worker.stop().await;
    assert_eq!(report.released, 1, "the run was given back: {report:?}");
    let run = env.get(id).await;
    assert_eq!(run.status, RunStatus::Queued, "given back as queued");
    assert_eq!(run.run_at, env.now(), "due at once");
    assert_eq!(
        (run.attempts, run.reclaims, run.parks),
        (0, 0, 0),
        "a shutdown spends nothing"
    );
    assert_eq!(run.locked_by, None, "nobody owns it");
    let claimed = env.claim_one().await;
    assert!(
        claimed.run.id == id && !claimed.reclaimed,
        "the next worker claims it at once, as a claim, not a reclaim"
    );
}

/// A worker configuration with a lease under a millisecond (a units typo) is refused.
pub async fn worker_refuses_a_lease_under_a_millisecond(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    for lease in [Duration::ZERO, Duration::from_micros(500)] {
        let refused = Worker::new(
            env.store.clone(),
            Arc::new(Registry::new()),
            WorkerConfig {
                default_lease: lease,
                ..WorkerConfig::default()
            },
        );
        match refused {
            Err(EngineError::Config(message)) => assert!(
                message.contains("under 1 ms"),
                "the error names the problem: {message}"
            ),
            Err(other) => panic!("a {lease:?} lease is a configuration error, got {other:?}"),
            Ok(_) => panic!("a worker with a {lease:?} lease must be refused"),
        }
    }
    assert!(
        Worker::new(
            env.store.clone(),
            Arc::new(Registry::new()),
            WorkerConfig {
                default_lease: Duration::from_millis(1),
                ..WorkerConfig::default()
            },
        )
        .is_ok(),
        "a 1 ms lease is accepted"
    );
}

/// A worker dropped mid-run (its process "dies" without shutting down) stops renewing
/// its leases at once: nothing it spawned keeps the run alive, so another worker can
/// reclaim it when the lease runs out.
pub async fn dropped_worker_stops_renewing_its_leases(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let lease = Duration::from_millis(300);
    let id = enqueue(
        &dispatcher(&env, &["forever"]),
        EnqueueRequest::new("forever", serde_json::json!({}), 3),
    )
    .await;
    let started = Arc::new(Notify::new());
    let mut registry = Registry::new();
    {
        let started = started.clone();
        register(
            &mut registry,
            "forever",
            KindConfig::durable(lease, LONG_TIMEOUT),
            move |_ctx: RunContext| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    std::future::pending::<()>().await;
                    Outcome::done()
                }
            },
        );
    }
    let worker = Running::spawn(
        &env.store,
        registry,
        WorkerConfig {
            until_idle: false,
            ..config("doomed")
        },
    );
    tokio::time::timeout(PATIENCE, started.notified())
        .await
        .expect("the handler started");
    worker.task.abort();
    let _ = worker.task.await;
    let at_death = env.get(id).await;
    // Several heartbeat rounds (every 100 ms) would pass here if anything still ran.
    env.advance(Duration::from_millis(50));
    tokio::time::sleep(lease * 2).await;
    let later = env.get(id).await;
    assert_eq!(
        later.heartbeat_at, at_death.heartbeat_at,
        "no heartbeat after the worker was dropped"
    );
    assert_eq!(
        later.locked_until, at_death.locked_until,
        "the lease was not renewed after the worker was dropped"
    );
}

/// An enqueue through a worker's own dispatcher while that worker waits idle is handed to
/// it already claimed (one commit, no claim round): each such run runs exactly once and
/// is counted as `handed_off`. Once the worker stops, its dispatcher enqueues as usual.
pub async fn idle_worker_takes_its_own_enqueues_by_hand_off(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let ledger = Arc::new(SlotLedger::default());
    let config = WorkerConfig {
        // No poll in this case: only enqueues wake the worker.
        poll_interval: Duration::from_secs(600),
        until_idle: false,
        ..config("hand-off")
    };
    let worker = Running::spawn(&env.store, ledger.registry(Duration::ZERO), config);
    let own = worker.own.clone();

    // The first run may come by hand-off or by claim; once it is completed the worker
    // waits idle, its intake open (a completion wakes nobody).
    let first = enqueue(&own, EnqueueRequest::new("noop", serde_json::json!({}), 0)).await;
    wait_for_status(&env.store, first, RunStatus::Completed).await;
    let mut ids = vec![first];
    ids.extend(enqueue_one_by_one(&env, &own, 5, true).await);
    let report = worker.stop().await;
    assert!(
        report.handed_off >= 5,
        "the runs enqueued while the worker waited idle were handed over: {report:?}"
    );
    assert!(!own.hands_off_now(), "a stopped worker's intake is closed");
    assert_eq!(report.claimed, 6, "every run was started once: {report:?}");
    assert_eq!(report.completed, 6, "{report:?}");
    let calls = ledger.calls();
    for id in &ids {
        assert_eq!(
            calls.get(id),
            Some(&1),
            "run {id} ran exactly once: {calls:?}"
        );
    }

    // The worker is gone: its dispatcher queues like any other.
    let after_stop = enqueue(&own, EnqueueRequest::new("noop", serde_json::json!({}), 0)).await;
    assert_eq!(
        env.store
            .run_get(after_stop)
            .await
            .expect("run_get succeeds")
            .expect("the run exists")
            .status,
        RunStatus::Queued,
        "a stopped worker takes no hand-off"
    );
}

/// Enqueue `count` runs of `noop` through `own`, each once the one before completed and,
/// with `hand_off`, the worker waits idle again with its intake open (a completed run's
/// status is written before the worker is back in its wait: on a busy machine an enqueue
/// in between is claimed, not handed over); answers their ids.
async fn enqueue_one_by_one(
    env: &Env,
    own: &Dispatcher,
    count: usize,
    hand_off: bool,
) -> Vec<RunId> {
    let mut ids = Vec::with_capacity(count);
    for index in 0..count {
        if hand_off {
            wait_until("the worker to wait idle with its intake open", || async {
                own.hands_off_now()
            })
            .await;
        }
        let id = enqueue(
            own,
            EnqueueRequest::new("noop", serde_json::json!({ "index": index }), 0),
        )
        .await;
        wait_for_status(&env.store, id, RunStatus::Completed).await;
        ids.push(id);
    }
    ids
}

/// With `hand_off: false` the worker never opens its intake: its own dispatcher's
/// enqueues are ordinary ones, and every run starts by a claim.
pub async fn worker_without_hand_off_claims_every_run(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let ledger = Arc::new(SlotLedger::default());
    let config = WorkerConfig {
        hand_off: false,
        until_idle: false,
        ..config("claims-only")
    };
    let worker = Running::spawn(&env.store, ledger.registry(Duration::ZERO), config);
    let metrics = worker.metrics.clone();
    assert!(!worker.own.hands_off_now(), "its intake never opens");
    let ids = enqueue_one_by_one(&env, &worker.own, 5, false).await;
    let report = worker.stop().await;
    assert_eq!(
        (report.claimed, report.handed_off, metrics.handed_off()),
        (5, 0, 0),
        "every run started by a claim: {report:?}"
    );
    let calls = ledger.calls();
    for id in &ids {
        assert_eq!(calls.get(id), Some(&1), "run {id} ran exactly once");
    }
}

/// Counts one worker's handler calls per run and the most handlers it ran at once.
#[derive(Default)]
struct SlotLedger {
    calls: Mutex<HashMap<RunId, usize>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

impl SlotLedger {
    /// A registry whose `noop` handler holds its slot for `hold` (zero: it yields once),
    /// counted in this ledger.
    fn registry(self: &Arc<Self>, hold: Duration) -> Registry {
        let mut registry = Registry::new();
        let ledger = self.clone();
        register(
            &mut registry,
            "noop",
            KindConfig::fire_and_forget(LONG_TIMEOUT),
            move |ctx: RunContext| {
                let ledger = ledger.clone();
                async move {
                    let now = ledger.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    ledger.most_in_flight.fetch_max(now, Ordering::SeqCst);
                    if hold.is_zero() {
                        tokio::task::yield_now().await;
                    } else {
                        tokio::time::sleep(hold).await;
                    }
                    *ledger
                        .calls
                        .lock()
                        .expect("calls lock")
                        .entry(ctx.run.id)
                        .or_default() += 1;
                    ledger.in_flight.fetch_sub(1, Ordering::SeqCst);
                    Outcome::done()
                }
            },
        );
        registry
    }

    fn calls(&self) -> HashMap<RunId, usize> {
        self.calls.lock().expect("calls lock").clone()
    }
}

/// Many callers enqueue at once through one worker's own dispatcher while a second
/// worker claims from the same store: hand-offs race claims, wake-ups and each other.
/// Whatever the interleaving, every run runs exactly once, on one worker, and the
/// handing worker never runs more handlers at once than its `max_in_flight` (a hand-off
/// reserves a free slot, and a claim never takes a reserved one).
pub async fn hand_offs_racing_claims_keep_the_slots_and_run_each_once(factory: &dyn StoreFactory) {
    const CALLERS: usize = 8;
    const PER_CALLER: usize = 20;
    const SLOTS: usize = 2;
    const MAX_ROUNDS: usize = 10;
    const WANTED_HAND_OFFS: u64 = 10;
    let env = Env::open(factory).await;
    let hold = Duration::from_millis(1);
    let (handing, claiming) = (
        Arc::new(SlotLedger::default()),
        Arc::new(SlotLedger::default()),
    );
    let worker_config = |name: &str| WorkerConfig {
        max_in_flight: SLOTS,
        until_idle: false,
        ..config(name)
    };
    // The handing worker claims only when woken (no 10 ms poll): between rounds it
    // waits idle, its intake open, so every round starts with hand-offs racing claims
    // however slow the machine is.
    let worker = Running::spawn(
        &env.store,
        handing.registry(hold),
        WorkerConfig {
            poll_interval: Duration::from_secs(600),
            ..worker_config("handing")
        },
    );
    let (own, metrics) = (worker.own.clone(), worker.metrics.clone());
    let other = Running::spawn(
        &env.store,
        claiming.registry(hold),
        worker_config("claiming"),
    );

    // One run first, so the burst meets a worker that has claimed and waits idle.
    let first = enqueue(&own, EnqueueRequest::new("noop", serde_json::json!({}), 0)).await;
    wait_for_status(&env.store, first, RunStatus::Completed).await;
    let mut ids = vec![first];
    // Bursts until some hand-offs raced the claims (most rounds have dozens; on a loaded
    // machine the callers keep the workers claiming, and a round has a few, at its
    // start), so the checks below always test a real race. Each round starts once the
    // last one's runs are done: both workers idle.
    for round in 0..MAX_ROUNDS {
        if round > 0 && metrics.handed_off() >= WANTED_HAND_OFFS {
            break;
        }
        let done = ids.len() as u64;
        wait_until("the last round's runs completed", || async {
            env.store
                .run_stats()
                .await
                .expect("run_stats succeeds")
                .completed
                == done
        })
        .await;
        let callers: Vec<JoinHandle<Vec<RunId>>> = (0..CALLERS)
            .map(|caller| {
                let own = own.clone();
                tokio::spawn(async move {
                    let mut ids = Vec::with_capacity(PER_CALLER);
                    for index in 0..PER_CALLER {
                        let request = EnqueueRequest::new(
                            "noop",
                            serde_json::json!({ "round": round, "caller": caller, "index": index }),
                            0,
                        )
                        .tenant(format!("tenant-{}", (caller + index) % 3));
                        ids.push(enqueue(&own, request).await);
                        // Staggered gaps: arrivals slower than both workers drain, so
                        // the handing worker keeps going idle, but overlapping across
                        // callers.
                        let gap = 4 + (caller + index) % 5;
                        tokio::time::sleep(Duration::from_millis(gap as u64)).await;
                    }
                    ids
                })
            })
            .collect();
        for caller in callers {
            ids.extend(caller.await.expect("a caller did not panic"));
        }
    }
    let total = ids.len();
    wait_until("every run completed", || async {
        env.store
            .run_stats()
            .await
            .expect("run_stats succeeds")
            .completed
            == total as u64
    })
    .await;
    let handing_report = worker.stop().await;
    let claiming_report = other.stop().await;

    let (by_handing, by_claiming) = (handing.calls(), claiming.calls());
    for id in &ids {
        let runs =
            by_handing.get(id).copied().unwrap_or(0) + by_claiming.get(id).copied().unwrap_or(0);
        assert_eq!(runs, 1, "run {id} ran exactly once across both workers");
    }
    assert_eq!(
        by_handing.len() + by_claiming.len(),
        total,
        "no handler ran a run that was not enqueued"
    );
    assert_eq!(
        handing_report.claimed + claiming_report.claimed,
        total as u64,
        "every run was started once: {handing_report:?} {claiming_report:?}"
    );
    assert!(
        handing_report.handed_off > 0,
        "the race had hand-offs in it (else it tests nothing): {handing_report:?}"
    );
    assert_eq!(
        metrics.handed_off(),
        handing_report.handed_off,
        "the metrics count every hand-off the report does"
    );
    for (name, ledger) in [("handing", &handing), ("claiming", &claiming)] {
        let most = ledger.most_in_flight.load(Ordering::SeqCst);
        assert!(
            most <= SLOTS,
            "the {name} worker ran {most} handlers at once with {SLOTS} slots"
        );
    }
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(
        (stats.completed, stats.total(), stats.reclaims),
        (total as u64, total as u64, 0),
        "every run is stored completed, none reclaimed: {stats:?}"
    );
    eprintln!(
        "hand-off race: {total} runs, {} handed over, {} claimed by the handing worker, {} by the other",
        handing_report.handed_off,
        handing_report.claimed - handing_report.handed_off,
        claiming_report.claimed
    );
}
