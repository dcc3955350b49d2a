//! The real [`Worker`] under a seeded world: crashes, storage faults, lost answers,
//! stalls past the lease and cancels, on tokio's paused clock.
//!
//! [`crate::simulation`] checks a store step by step against a model, with simulated
//! workers that use the engine's decision functions. This level runs the engine's own
//! `Worker` — its claim loop, heartbeater, completer batching, timeouts, stop signals
//! and `Checkpointer` — several at once against one store, and checks what the promises
//! of DESIGN.md §1 say must hold whatever happened:
//!
//! | invariant | how it is checked |
//! |---|---|
//! | every run ends (liveness) | after the chaos stops, every run is terminal within [`WorkerSimConfig::settle`] |
//! | fencing: a stale owner never writes | every heartbeat, checkpoint and finish the store accepts carries the owner of the run's newest claim (and a finish ends that ownership); committed checkpoints never go backwards; at most one terminal finish per run is applied |
//! | a checkpointed step is never executed again | no step of a run starts after a checkpoint past it was committed |
//! | a crash never spends an attempt | `attempts` ≤ the retry outcomes handlers returned for the run |
//! | every reclaim is counted | executions ≤ 1 + put-backs applied + `reclaims` |
//! | only a live owner's outcome lands | a completed run's result names an execution that returned `Done` |
//! | nothing runs after an acknowledged cancel | no execution starts after `run_request_cancel` answered `Cancelled` (then the run ends cancelled) or `Requested` (the running execution may still finish it) |
//!
//! # The world
//!
//! One [`SplitMix64`] per seed draws the plan: which runs are enqueued when (durable
//! runs of 1–4 checkpointed steps and fire-and-forget runs, some delayed), each
//! execution's step times (a few stall past the lease) and outcome (done, retry, fail,
//! snooze), when a worker crashes (its task is dropped: handlers, heartbeater and
//! completer die with it, the store keeps its leases) and comes back, when a storage
//! storm starts (calls fail, or apply and then lose their answer), when one worker is
//! cut off from the store for longer than a lease (the others take its runs over; its
//! late writes must be refused), which runs are cancelled, and which of the runs arriving
//! during the chaos come through a live worker's own dispatcher (handed to that worker
//! already claimed when it waits idle, so the checks cover hand-offs under the same
//! crashes, storms and cuts). Time is tokio's paused clock ([`PausedClock`]): a simulated minute takes
//! milliseconds, and the store judges leases by the same clock.
//!
//! # Replaying
//!
//! A failing seed is printed; `FRONTA_SIM_SEED=<n>` runs it alone. The plan is the
//! seed's; the interleaving inside one simulated instant is tokio's (its `select!`
//! draws from an unseeded generator and run ids are UUIDv7), so a replay follows the
//! same plan, not always the same interleaving. The first level keeps exact replay.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_engine::liveness::ProcessId;
use fronta_engine::store::{
    CancelReply, CheckpointParams, ClaimBatch, ClaimParams, ClaimedRun, Enqueued, Finish,
    FinishReply, HandOff, HeartbeatReply, LeaseRenewal, RetryReply, RunFilter, RunStats,
    StoreResult,
};
use fronta_engine::{
    Clock, Dispatcher, EnqueueRequest, Handler, KindConfig, NewRun, Outcome, OwnerToken, Registry,
    Run, RunContext, RunId, RunStatus, RunStore, StoreError, Worker, WorkerConfig,
};
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::rng::SplitMix64;

/// The sizes of one seed's world. Every limit of the simulation is here.
#[derive(Debug, Clone)]
pub struct WorkerSimConfig {
    /// Runs enqueued in all: a third up front, the rest during the chaos.
    pub runs: usize,
    /// Workers sharing the store.
    pub workers: usize,
    /// How long crashes, storms and cancels go on (simulated).
    pub chaos: Duration,
    /// After the chaos: how long every run gets to end (simulated).
    pub settle: Duration,
    /// The lease of both kinds.
    pub lease: Duration,
    /// Retries a run may spend.
    pub max_retries: i64,
    /// Reclaims before a run fails as a crash loop.
    pub max_reclaims: u32,
    /// Percent of store calls that fail during a storm (and outside one: a tenth).
    pub storm_fault_percent: u64,
}

impl Default for WorkerSimConfig {
    fn default() -> Self {
        Self {
            runs: 60,
            workers: 3,
            chaos: Duration::from_secs(40),
            settle: Duration::from_secs(30 * 60),
            lease: Duration::from_secs(2),
            max_retries: 3,
            max_reclaims: 50,
            storm_fault_percent: 40,
        }
    }
}

/// What one seed did, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerSimReport {
    pub runs: u64,
    pub executions: u64,
    pub crashes: u64,
    pub storms: u64,
    /// Times one worker was cut off from the store.
    pub cuts: u64,
    /// Store calls failed on purpose (before or after applying).
    pub faults: u64,
    pub reclaims: u64,
    pub cancels: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Runs a worker's own dispatcher handed to it at enqueue (already claimed).
    pub hand_offs: u64,
    /// Invariant checks that held.
    pub checks: u64,
}

impl WorkerSimReport {
    pub fn add(&mut self, other: &WorkerSimReport) {
        self.runs += other.runs;
        self.executions += other.executions;
        self.crashes += other.crashes;
        self.storms += other.storms;
        self.cuts += other.cuts;
        self.faults += other.faults;
        self.reclaims += other.reclaims;
        self.cancels += other.cancels;
        self.completed += other.completed;
        self.failed += other.failed;
        self.cancelled += other.cancelled;
        self.hand_offs += other.hand_offs;
        self.checks += other.checks;
    }
}

/// The time of tokio's (paused) clock as wall time: `base` plus the tokio time since
/// the clock was made. Make it inside the runtime that runs the simulation.
#[derive(Debug, Clone, Copy)]
pub struct PausedClock {
    base: DateTime<Utc>,
    start: tokio::time::Instant,
}

impl PausedClock {
    pub fn new(base: DateTime<Utc>) -> Self {
        Self {
            base,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for PausedClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = tokio::time::Instant::now().duration_since(self.start);
        self.base + chrono::Duration::from_std(elapsed).unwrap_or(chrono::Duration::MAX)
    }
}

/// Everything that happened, in one order (`seq`).
#[derive(Default)]
struct Ledger {
    seq: u64,
    /// Per run: the index into `plans`.
    index: HashMap<RunId, usize>,
    /// Executions per run: (seq started, outcome returned on purpose).
    executions: HashMap<RunId, Vec<Execution>>,
    /// (step, seq) of every step start.
    step_starts: HashMap<RunId, Vec<(u8, u64)>>,
    /// (state, seq) of every checkpoint the store committed.
    checkpoints: HashMap<RunId, Vec<(u8, u64)>>,
    /// Terminal finishes the store applied.
    terminal_finishes: HashMap<RunId, Vec<RunStatus>>,
    /// Finishes the store applied that put the run back (retry, snooze, release, park).
    put_backs: HashMap<RunId, u64>,
    /// The owner of each run's newest claim, until a finish ends that ownership.
    owners: HashMap<RunId, OwnerToken>,
    /// Until when that owner's lease runs, by its last accepted claim, heartbeat or
    /// checkpoint.
    leases: HashMap<RunId, tokio::time::Instant>,
    /// Writes the store accepted from somebody other than that owner.
    stale_writes: HashMap<RunId, Vec<String>>,
    /// Seq of a cancel answered `Cancelled`.
    cancelled_at: HashMap<RunId, u64>,
    /// Seq of a cancel answered `Requested` (the run was running).
    cancel_requested_at: HashMap<RunId, u64>,
    faults: u64,
    hand_offs: u64,
}

#[derive(Debug, Clone)]
struct Execution {
    started: u64,
    returned: Option<&'static str>,
}

impl Ledger {
    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Notes `what` when the store accepted it from an owner that is not the newest;
    /// a renewing write (`lease`) extends the owner's lease.
    fn accepted(&mut self, id: RunId, owner: OwnerToken, what: &str, lease: Option<Duration>) {
        if self.owners.get(&id) != Some(&owner) {
            let seq = self.next();
            self.stale_writes
                .entry(id)
                .or_default()
                .push(format!("{what} (#{seq})"));
        } else if let Some(lease) = lease {
            self.leases.insert(id, tokio::time::Instant::now() + lease);
        }
    }

    /// A hand-off: a new run, already claimed by the worker it is handed to.
    fn handed(&mut self, claimed: &ClaimedRun, lease: Duration) {
        self.owners.insert(claimed.run.id, claimed.owner);
        self.leases
            .insert(claimed.run.id, tokio::time::Instant::now() + lease);
        self.hand_offs += 1;
    }

    /// A claim of a run whose owner's lease still runs is a steal.
    fn claimed(&mut self, batch: &ClaimBatch, leases: &ClaimParams) {
        let now = tokio::time::Instant::now();
        for claimed in &batch.claimed {
            let id = claimed.run.id;
            if self.owners.contains_key(&id)
                && let Some(until) = self.leases.get(&id).copied()
                && until > now
            {
                let seq = self.next();
                self.stale_writes.entry(id).or_default().push(format!(
                    "a claim while the previous owner's lease ran {:?} more (#{seq})",
                    until.duration_since(now)
                ));
            }
            let lease = leases
                .leases
                .get(&claimed.run.kind)
                .copied()
                .unwrap_or(leases.default_lease);
            self.owners.insert(id, claimed.owner);
            self.leases.insert(id, now + lease);
        }
    }
}

type Shared = Arc<Mutex<Ledger>>;

fn lock(ledger: &Shared) -> std::sync::MutexGuard<'_, Ledger> {
    ledger
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The storage weather all workers share: the percent of calls that fail now, and the
/// generator that draws which.
struct Weather {
    percent: Mutex<u64>,
    rng: Mutex<SplitMix64>,
}

impl Weather {
    fn set(&self, percent: u64) {
        *self
            .percent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = percent;
    }
}

/// One worker's way to the real store: fails calls during storms and while the worker
/// is cut off (some after applying them, so the answer is lost), and records what the
/// store accepted.
struct Faulty {
    inner: Arc<dyn RunStore>,
    ledger: Shared,
    weather: Arc<Weather>,
    /// While set and in the future, every call of this worker fails (a network cut
    /// between one process and the database; the others go on).
    cut_until: Mutex<Option<tokio::time::Instant>>,
}

enum Fault {
    None,
    Before,
    After,
}

impl Faulty {
    fn draw(&self) -> Fault {
        let cut = self
            .cut_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|until| tokio::time::Instant::now() < until);
        let percent = if cut {
            100
        } else {
            *self
                .weather
                .percent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let mut rng = self
            .weather
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if percent == 0 || !rng.chance(percent) {
            return Fault::None;
        }
        lock(&self.ledger).faults += 1;
        if rng.chance(50) {
            Fault::Before
        } else {
            Fault::After
        }
    }

    async fn renew(&self, renewals: Vec<LeaseRenewal>) -> StoreResult<Vec<HeartbeatReply>> {
        let owners: HashMap<RunId, (OwnerToken, Duration)> = renewals
            .iter()
            .map(|renewal| (renewal.id, (renewal.owner, renewal.lease)))
            .collect();
        let replies = self.inner.run_heartbeat_many(renewals).await?;
        let mut ledger = lock(&self.ledger);
        for reply in replies.iter().filter(|reply| !reply.lost) {
            if let Some((owner, lease)) = owners.get(&reply.id) {
                ledger.accepted(reply.id, *owner, "a heartbeat", Some(*lease));
            }
        }
        Ok(replies)
    }

    fn unavailable<T>(what: &str) -> StoreResult<T> {
        Err(StoreError::Unavailable(format!(
            "simulated storage fault: {what}"
        )))
    }
}

#[async_trait]
impl RunStore for Faulty {
    async fn run_enqueue_many(&self, runs: Vec<NewRun>) -> StoreResult<Vec<Enqueued>> {
        self.inner.run_enqueue_many(runs).await
    }
    /// A hand-off fails only before it applies: after, the answer would carry the only
    /// copy of a new run's id, and the world (which enqueues again through the plain
    /// dispatcher on an error) would lose track of it. Lost answers that leave a run
    /// leased to nobody are drawn for claims.
    async fn run_enqueue_started(
        &self,
        run: NewRun,
        lease: Duration,
        holder: Option<ProcessId>,
    ) -> StoreResult<HandOff> {
        if !matches!(self.draw(), Fault::None) {
            return Self::unavailable("hand-off");
        }
        let answer = self.inner.run_enqueue_started(run, lease, holder).await?;
        if let HandOff::Started(claimed) = &answer {
            lock(&self.ledger).handed(claimed, lease);
        }
        Ok(answer)
    }
    async fn run_claim(&self, params: ClaimParams) -> StoreResult<ClaimBatch> {
        match self.draw() {
            Fault::Before => Self::unavailable("claim"),
            // A claim whose answer is lost leaves runs leased to nobody alive: they come
            // back after the lease, as reclaims.
            Fault::After => {
                let batch = self.inner.run_claim(params.clone()).await?;
                lock(&self.ledger).claimed(&batch, &params);
                Self::unavailable("claim answer")
            }
            Fault::None => {
                let batch = self.inner.run_claim(params.clone()).await?;
                lock(&self.ledger).claimed(&batch, &params);
                Ok(batch)
            }
        }
    }
    async fn run_heartbeat_many(
        &self,
        renewals: Vec<LeaseRenewal>,
    ) -> StoreResult<Vec<HeartbeatReply>> {
        match self.draw() {
            Fault::Before => Self::unavailable("heartbeat"),
            Fault::After => {
                self.renew(renewals).await?;
                Self::unavailable("heartbeat answer")
            }
            Fault::None => self.renew(renewals).await,
        }
    }
    async fn run_checkpoint(&self, params: CheckpointParams) -> StoreResult<()> {
        let fault = self.draw();
        if matches!(fault, Fault::Before) {
            return Self::unavailable("checkpoint");
        }
        let id = params.id;
        let owner = params.owner;
        let lease = params.lease;
        let state = params.state.first().copied().unwrap_or(0);
        let written = self.inner.run_checkpoint(params).await;
        if written.is_ok() {
            let mut ledger = lock(&self.ledger);
            ledger.accepted(id, owner, &format!("checkpoint {state}"), Some(lease));
            let seq = ledger.next();
            ledger.checkpoints.entry(id).or_default().push((state, seq));
        }
        match fault {
            Fault::After => Self::unavailable("checkpoint answer"),
            _ => written,
        }
    }
    async fn run_finish_many(&self, finishes: Vec<Finish>) -> StoreResult<Vec<FinishReply>> {
        let fault = self.draw();
        if matches!(fault, Fault::Before) {
            return Self::unavailable("finish");
        }
        let owners: Vec<(RunId, OwnerToken)> = finishes
            .iter()
            .map(|finish| (finish.id, finish.owner))
            .collect();
        let replies = self.inner.run_finish_many(finishes).await?;
        {
            let mut ledger = lock(&self.ledger);
            for (reply, (id, owner)) in replies.iter().zip(&owners) {
                if let FinishReply::Applied { id: applied, .. } = reply {
                    if applied != id {
                        let seq = ledger.next();
                        ledger
                            .stale_writes
                            .entry(*id)
                            .or_default()
                            .push(format!("finish answers out of order (#{seq})"));
                    }
                    ledger.accepted(*id, *owner, "a finish", None);
                    ledger.owners.remove(id);
                    ledger.leases.remove(id);
                }
            }
            for reply in &replies {
                if let FinishReply::Applied { id, status } = reply {
                    if status.is_terminal() {
                        ledger
                            .terminal_finishes
                            .entry(*id)
                            .or_default()
                            .push(*status);
                    } else {
                        *ledger.put_backs.entry(*id).or_default() += 1;
                    }
                }
            }
        }
        match fault {
            Fault::After => Self::unavailable("finish answer"),
            _ => Ok(replies),
        }
    }
    async fn run_request_cancel(&self, id: RunId) -> StoreResult<CancelReply> {
        self.inner.run_request_cancel(id).await
    }
    async fn run_retry(&self, id: RunId) -> StoreResult<RetryReply> {
        self.inner.run_retry(id).await
    }
    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        self.inner.run_get(id).await
    }
    async fn run_find_by_key(&self, tenant: &str, key: &str) -> StoreResult<Option<Run>> {
        self.inner.run_find_by_key(tenant, key).await
    }
    async fn run_list(&self, filter: RunFilter) -> StoreResult<Vec<Run>> {
        self.inner.run_list(filter).await
    }
    async fn reclaim_space(&self, pages: u32) -> StoreResult<u64> {
        self.inner.reclaim_space(pages).await
    }
    async fn oldest_finished(&self) -> StoreResult<Option<chrono::DateTime<chrono::Utc>>> {
        self.inner.oldest_finished().await
    }
    async fn run_prune(&self, prune: &fronta_engine::store::Prune) -> StoreResult<u64> {
        self.inner.run_prune(prune).await
    }
    async fn run_stats(&self) -> StoreResult<RunStats> {
        self.inner.run_stats().await
    }
    async fn run_busy(&self) -> StoreResult<bool> {
        match self.draw() {
            Fault::None => self.inner.run_busy().await,
            _ => Self::unavailable("busy check"),
        }
    }
    /// Passed on without a fault: no worker asks it, and drawing would move the seed's
    /// sequence of faults.
    async fn store_ready(&self) -> StoreResult<()> {
        self.inner.store_ready().await
    }
    fn enqueue_signal(&self) -> Arc<Notify> {
        self.inner.enqueue_signal()
    }
}

/// The handler of both kinds: runs the planned steps from the last checkpoint,
/// checkpointing after each, then answers the planned outcome.
struct Planned {
    seed: u64,
    ledger: Shared,
    lease: Duration,
}

impl Planned {
    /// One step's time: short, or now and then past the lease (a stall the heartbeats
    /// must cover, or that a storm turns into a lost lease).
    fn step_time(&self, rng: &mut SplitMix64) -> Duration {
        if rng.chance(12) {
            self.lease + Duration::from_millis(rng.below(3 * millis(self.lease)))
        } else {
            Duration::from_millis(20 + rng.below(300))
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl Handler for Planned {
    async fn handle(&self, ctx: RunContext) -> Outcome {
        let run = ctx.run.clone();
        let index = run.payload["index"].as_u64().unwrap_or(0);
        let steps = u8::try_from(run.payload["steps"].as_u64().unwrap_or(0)).unwrap_or(0);
        let (execution, started) = {
            let mut ledger = lock(&self.ledger);
            let started = ledger.next();
            let executions = ledger.executions.entry(run.id).or_default();
            executions.push(Execution {
                started,
                returned: None,
            });
            (executions.len() - 1, started)
        };
        let mut rng = SplitMix64::new(
            self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (execution as u64) << 48,
        );
        let mut state = run
            .state
            .as_ref()
            .and_then(|state| state.first().copied())
            .unwrap_or(0);
        // Stopped (cancel, lost lease, shutdown): a retry that is not counted as one, so
        // an attempt spent on it would show. (`Done` would be honoured on a cancel or a
        // shutdown: the work finished before the handler noticed.)
        let stopped = Outcome::Retry {
            after: None,
            reason: "stopped".into(),
        };
        while state < steps {
            {
                let mut ledger = lock(&self.ledger);
                let seq = ledger.next();
                ledger
                    .step_starts
                    .entry(run.id)
                    .or_default()
                    .push((state, seq));
            }
            tokio::select! {
                _ = tokio::time::sleep(self.step_time(&mut rng)) => {}
                _ = ctx.signal.stopped() => return stopped,
            }
            if ctx.checkpointer.save(vec![state + 1]).await.is_err() {
                return stopped;
            }
            state += 1;
        }
        if steps == 0 {
            tokio::select! {
                _ = tokio::time::sleep(self.step_time(&mut rng)) => {}
                _ = ctx.signal.stopped() => return stopped,
            }
        }
        let (name, outcome) = match rng.below(100) {
            0..=74 => (
                "done",
                Outcome::Done(Some(json!({"execution": execution, "started": started}))),
            ),
            75..=87 => (
                "retry",
                Outcome::Retry {
                    after: Some(Duration::from_millis(rng.below(2_000))),
                    reason: "planned retry".into(),
                },
            ),
            88..=92 => ("fail", Outcome::Fail("planned failure".into())),
            _ => (
                "snooze",
                Outcome::Snooze(Duration::from_millis(1 + rng.below(3_000))),
            ),
        };
        if let Some(entry) = lock(&self.ledger)
            .executions
            .get_mut(&run.id)
            .and_then(|executions| executions.get_mut(execution))
        {
            entry.returned = Some(name);
        }
        outcome
    }
}

/// A started worker: its task, its way to the store, and its own dispatcher (whose
/// enqueues it may take by hand-off).
struct Live {
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    faulty: Arc<Faulty>,
    own: Dispatcher,
}

/// One worker slot: its worker while it has one.
struct Slot {
    task: Option<Live>,
}

impl Slot {
    fn alive(&self) -> bool {
        self.task
            .as_ref()
            .is_some_and(|live| !live.task.is_finished())
    }
}

/// What every worker of a seed shares.
struct World {
    store: Arc<dyn RunStore>,
    ledger: Shared,
    weather: Arc<Weather>,
    registry: Arc<Registry>,
    config: WorkerSimConfig,
    started: usize,
}

impl World {
    /// A new worker (a new process: a new worker and its own dispatcher).
    fn start_worker(&mut self) -> Result<Live, String> {
        self.started += 1;
        let faulty = Arc::new(Faulty {
            inner: self.store.clone(),
            ledger: self.ledger.clone(),
            weather: self.weather.clone(),
            cut_until: Mutex::new(None),
        });
        let worker = Worker::new(
            faulty.clone(),
            self.registry.clone(),
            WorkerConfig {
                name: format!("sim-{}", self.started),
                max_in_flight: 4,
                default_lease: self.config.lease,
                heartbeat_every: None,
                poll_interval: Duration::from_millis(100),
                max_reclaims: self.config.max_reclaims,
                park_base: Duration::from_secs(1),
                shutdown_grace: Duration::from_millis(500),
                until_idle: false,
                completer_batch: 8,
                // Lingers after a batch of several: the simulation walks that path too.
                completer_linger: Duration::from_millis(20),
                claim_gather: Duration::from_millis(20),
                hand_off: true,
                // A small local queue: the simulation crashes and cuts workers holding one.
                prefetch_max: 16,
                holder: None,
            },
        )
        .map_err(|err| format!("a worker: {err}"))?;
        let own = worker.dispatcher().clone();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            // A worker that ends on its own (an error) is restarted by the controller.
            let _ = worker.run(token).await;
        });
        Ok(Live {
            shutdown,
            task,
            faulty,
            own,
        })
    }
}

/// Runs one seed against `store` (whose clock must be a [`PausedClock`] of the running
/// runtime, which must have tokio's time paused). `Err` names the first broken
/// invariant, with the counts so far.
pub async fn simulate_workers(
    seed: u64,
    store: Arc<dyn RunStore>,
    config: &WorkerSimConfig,
) -> Result<WorkerSimReport, String> {
    let ledger: Shared = Arc::new(Mutex::new(Ledger::default()));
    let weather = Arc::new(Weather {
        percent: Mutex::new(config.storm_fault_percent / 10),
        rng: Mutex::new(SplitMix64::new(seed ^ 0xFA17)),
    });
    let mut registry = Registry::new();
    for (kind, kind_config) in [
        (
            "durable",
            KindConfig::durable(config.lease, Duration::from_secs(600)),
        ),
        (
            "quick",
            KindConfig::fire_and_forget(Duration::from_secs(600)),
        ),
    ] {
        registry
            .register(
                kind,
                kind_config,
                Planned {
                    seed,
                    ledger: ledger.clone(),
                    lease: config.lease,
                },
            )
            .map_err(|err| format!("registering {kind}: {err}"))?;
    }
    let registry = Arc::new(registry);
    let dispatcher = Dispatcher::from_registry(store.clone(), &registry);
    let mut world = World {
        store: store.clone(),
        ledger: ledger.clone(),
        weather: weather.clone(),
        registry,
        config: config.clone(),
        started: 0,
    };
    let mut rng = SplitMix64::new(seed);
    let mut report = WorkerSimReport::default();
    let mut ids: Vec<RunId> = Vec::new();

    let enqueue = |rng: &mut SplitMix64, index: usize| {
        let durable = rng.chance(60);
        let steps = if durable { 1 + rng.below(4) } else { 0 };
        let mut request = EnqueueRequest::new(
            if durable { "durable" } else { "quick" },
            json!({"index": index, "steps": steps}),
            config.max_retries,
        )
        .tenant(format!("t{}", rng.below(3)));
        if rng.chance(20) {
            request = request.delay(Duration::from_millis(rng.below(10_000)));
        }
        request
    };
    let mut next_index = 0;
    let up_front = config.runs / 3;
    while next_index < up_front {
        let request = enqueue(&mut rng, next_index);
        let id = dispatcher
            .enqueue(request)
            .await
            .map_err(|err| format!("enqueue: {err}"))?
            .id();
        lock(&ledger).index.insert(id, next_index);
        ids.push(id);
        next_index += 1;
    }

    let mut slots: Vec<Slot> = Vec::new();
    for _ in 0..config.workers {
        slots.push(Slot {
            task: Some(world.start_worker()?),
        });
    }

    // The chaos: one event at a time, at drawn intervals.
    let chaos_end = tokio::time::Instant::now() + config.chaos;
    let mut storm_until: Option<tokio::time::Instant> = None;
    while tokio::time::Instant::now() < chaos_end {
        tokio::time::sleep(Duration::from_millis(50 + rng.below(800))).await;
        let now = tokio::time::Instant::now();
        if storm_until.is_some_and(|until| now >= until) {
            storm_until = None;
            weather.set(config.storm_fault_percent / 10);
        }
        match rng.below(100) {
            // A crash: the worker's task is dropped mid-flight; the store keeps its
            // leases until they expire.
            0..=19 => {
                let slot = rng.index(slots.len());
                if let Some(live) = slots[slot].task.take() {
                    live.task.abort();
                    let _ = live.task.await;
                    report.crashes += 1;
                }
            }
            // A crashed worker comes back (a new process: a new worker).
            20..=44 => {
                if let Some(slot) = slots.iter_mut().find(|slot| slot.task.is_none()) {
                    slot.task = Some(world.start_worker()?);
                }
            }
            // A storage storm: every worker's calls fail now and then.
            45..=52 => {
                if storm_until.is_none() {
                    report.storms += 1;
                    storm_until = Some(
                        now + Duration::from_millis(500 + rng.below(4 * millis(config.lease))),
                    );
                    weather.set(config.storm_fault_percent);
                }
            }
            // One worker is cut off from the store for longer than a lease: the others
            // take its runs over, and when it comes back its writes must be refused.
            53..=62 => {
                let slot = rng.index(slots.len());
                if let Some(Live { faulty, .. }) = &slots[slot].task {
                    report.cuts += 1;
                    let until = now
                        + config.lease
                        + Duration::from_millis(rng.below(3 * millis(config.lease)));
                    *faulty
                        .cut_until
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(until);
                }
            }
            // A cancel of a run chosen at random.
            63..=70 => {
                // Half of them aim at a run some worker holds now (a cancel racing its
                // end), the rest at any run.
                let held: Vec<RunId> = {
                    let ledger = lock(&ledger);
                    let mut held: Vec<(usize, RunId)> = ledger
                        .owners
                        .keys()
                        .filter_map(|id| ledger.index.get(id).map(|index| (*index, *id)))
                        .collect();
                    held.sort();
                    held.into_iter().map(|(_, id)| id).collect()
                };
                let pool = if !held.is_empty() && rng.chance(50) {
                    &held
                } else {
                    &ids
                };
                if !pool.is_empty() {
                    let id = pool[rng.index(pool.len())];
                    let answer = store
                        .run_request_cancel(id)
                        .await
                        .map_err(|err| format!("cancel {id}: {err}"))?;
                    report.cancels += 1;
                    let mut ledger = lock(&ledger);
                    let seq = ledger.next();
                    match answer {
                        CancelReply::Cancelled => {
                            ledger.cancelled_at.insert(id, seq);
                        }
                        CancelReply::Requested => {
                            ledger.cancel_requested_at.entry(id).or_insert(seq);
                        }
                        CancelReply::AlreadyFinished(_) => {}
                    }
                }
            }
            // More runs arrive, a few at a time.
            _ => {
                for _ in 0..1 + rng.below(3) {
                    if next_index >= config.runs {
                        break;
                    }
                    let request = enqueue(&mut rng, next_index);
                    // Half of them arrive in a live worker's process, through its own
                    // dispatcher (a hand-off when that worker waits idle); one that
                    // fails there is enqueued again through the plain dispatcher.
                    let live: Vec<&Dispatcher> = slots
                        .iter()
                        .filter(|slot| slot.alive())
                        .filter_map(|slot| slot.task.as_ref().map(|live| &live.own))
                        .collect();
                    let own = (!live.is_empty() && rng.chance(50))
                        .then(|| live[rng.index(live.len())].clone());
                    let through_own = match own {
                        Some(own) => own.enqueue(request.clone()).await.ok(),
                        None => None,
                    };
                    let answer = match through_own {
                        Some(answer) => answer,
                        None => dispatcher
                            .enqueue(request)
                            .await
                            .map_err(|err| format!("enqueue: {err}"))?,
                    };
                    let id = answer.id();
                    lock(&ledger).index.insert(id, next_index);
                    ids.push(id);
                    next_index += 1;
                }
            }
        }
    }
    // The rest of the runs, then calm: no faults, no cuts, every worker up.
    while next_index < config.runs {
        let request = enqueue(&mut rng, next_index);
        let id = dispatcher
            .enqueue(request)
            .await
            .map_err(|err| format!("enqueue: {err}"))?
            .id();
        lock(&ledger).index.insert(id, next_index);
        ids.push(id);
        next_index += 1;
    }
    weather.set(0);
    for slot in &mut slots {
        if let Some(Live { faulty, .. }) = &slot.task {
            *faulty
                .cut_until
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
        if !slot.alive() {
            slot.task = Some(world.start_worker()?);
        }
    }

    // Liveness: every run ends.
    let settle_end = tokio::time::Instant::now() + config.settle;
    let mut runs: Vec<Run>;
    loop {
        runs = Vec::with_capacity(ids.len());
        for id in &ids {
            runs.push(
                store
                    .run_get(*id)
                    .await
                    .map_err(|err| format!("reading {id}: {err}"))?
                    .ok_or_else(|| format!("run {id} is gone"))?,
            );
        }
        if runs.iter().all(|run| run.status.is_terminal()) {
            break;
        }
        if tokio::time::Instant::now() >= settle_end {
            let open: Vec<String> = runs
                .iter()
                .filter(|run| !run.status.is_terminal())
                .map(|run| format!("{} {:?} run_at {}", run.id, run.status, run.run_at))
                .collect();
            return Err(format!(
                "liveness: {} runs still open {:?} after the chaos and {:?} of calm: {}",
                open.len(),
                config.chaos,
                config.settle,
                open.join("; ")
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for slot in &mut slots {
        if let Some(live) = slot.task.take() {
            live.shutdown.cancel();
            let _ = live.task.await;
        }
    }

    let ledger = lock(&ledger);
    report.runs = ids.len() as u64;
    report.faults = ledger.faults;
    report.hand_offs = ledger.hand_offs;
    report.executions = ledger
        .executions
        .values()
        .map(|list| list.len() as u64)
        .sum();
    for run in &runs {
        report.reclaims += u64::from(run.reclaims);
        match run.status {
            RunStatus::Completed => report.completed += 1,
            RunStatus::Failed => report.failed += 1,
            RunStatus::Cancelled => report.cancelled += 1,
            _ => {}
        }
        check_run(run, &ledger, config, &mut report.checks)
            .map_err(|broken| format!("run {} ({:?}): {broken}", run.id, run.status))?;
    }
    Ok(report)
}

/// The invariants of one ended run (see the module's table).
fn check_run(
    run: &Run,
    ledger: &Ledger,
    config: &WorkerSimConfig,
    checks: &mut u64,
) -> Result<(), String> {
    let executions = ledger
        .executions
        .get(&run.id)
        .map(Vec::as_slice)
        .unwrap_or(&[]);

    // Fencing: every accepted write came from the newest claim's owner.
    if let Some(stale) = ledger.stale_writes.get(&run.id) {
        let shown: Vec<&str> = stale.iter().take(3).map(String::as_str).collect();
        return Err(format!(
            "the store accepted {} writes from an owner that was not the newest claim's: {}{}",
            stale.len(),
            shown.join(", "),
            if stale.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        ));
    }
    *checks += 1;

    // Fencing: committed checkpoints never go backwards.
    let checkpoints = ledger
        .checkpoints
        .get(&run.id)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for pair in checkpoints.windows(2) {
        if pair[1].0 < pair[0].0 {
            return Err(format!(
                "a checkpoint went backwards: state {} committed after state {} (a stale owner wrote)",
                pair[1].0, pair[0].0
            ));
        }
    }
    *checks += 1;

    // Fencing: one terminal finish at most, and it is the run's status.
    let terminal = ledger
        .terminal_finishes
        .get(&run.id)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if terminal.len() > 1 {
        return Err(format!(
            "{} terminal finishes were applied: {terminal:?}",
            terminal.len()
        ));
    }
    if let Some(status) = terminal.first()
        && *status != run.status
    {
        return Err(format!("the applied terminal finish was {status:?}"));
    }
    *checks += 1;

    // A step behind a committed checkpoint never runs again.
    let steps = ledger
        .step_starts
        .get(&run.id)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for &(step, started) in steps {
        if let Some(&(state, committed)) = checkpoints
            .iter()
            .find(|&&(state, committed)| state > step && committed < started)
        {
            return Err(format!(
                "step {step} started (#{started}) after checkpoint {state} was committed (#{committed})"
            ));
        }
    }
    *checks += 1;

    // A crash never spends an attempt: every attempt is a retry a handler returned.
    let retries = executions
        .iter()
        .filter(|execution| execution.returned == Some("retry"))
        .count();
    if run.attempts as usize > retries {
        return Err(format!(
            "{} attempts spent, but handlers returned only {retries} retries",
            run.attempts
        ));
    }
    if i64::from(run.attempts) > config.max_retries + 1 {
        return Err(format!("{} attempts, over the budget", run.attempts));
    }
    *checks += 1;

    // Every execution began with a claim the store counted: the first, one after a
    // put-back, or a reclaim (a claim whose answer was lost runs nothing).
    let put_backs = ledger.put_backs.get(&run.id).copied().unwrap_or(0);
    let claims = 1 + put_backs + u64::from(run.reclaims);
    if executions.len() as u64 > claims {
        return Err(format!(
            "{} executions, but only {claims} claims counted (1 + {put_backs} put-backs + {} reclaims)",
            executions.len(),
            run.reclaims
        ));
    }
    *checks += 1;

    // Only a live owner's outcome lands.
    if run.status == RunStatus::Completed {
        let execution = run
            .result
            .as_ref()
            .and_then(|result| result["execution"].as_u64())
            .ok_or_else(|| {
                format!(
                    "completed with result {:?}: a stopped execution's outcome landed",
                    run.result
                )
            })?;
        let returned = executions
            .get(execution as usize)
            .and_then(|execution| execution.returned);
        if returned != Some("done") {
            return Err(format!(
                "completed by execution {execution}, which returned {returned:?}"
            ));
        }
    }
    *checks += 1;

    // Nothing runs after an acknowledged cancel.
    if let Some(&cancelled) = ledger.cancelled_at.get(&run.id) {
        if let Some(late) = executions
            .iter()
            .find(|execution| execution.started > cancelled)
        {
            return Err(format!(
                "an execution started (#{}) after the cancel was acknowledged (#{cancelled})",
                late.started
            ));
        }
        if run.status != RunStatus::Cancelled {
            return Err("a cancel was acknowledged, but the run did not end cancelled".into());
        }
    }
    // A requested cancel lets the running execution finish, but nothing starts again.
    if let Some(&requested) = ledger.cancel_requested_at.get(&run.id)
        && let Some(late) = executions
            .iter()
            .find(|execution| execution.started > requested)
    {
        return Err(format!(
            "an execution started (#{}) after its cancel was requested (#{requested})",
            late.started
        ));
    }
    *checks += 1;
    Ok(())
}
