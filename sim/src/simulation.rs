//! A deterministic simulation of the run engine's world against one [`RunStore`].
//!
//! One seeded [`SplitMix64`] chooses every step: the world enqueues runs (plain, delayed,
//! with unique keys, with priorities, over several tenants), asks for cancels and manual
//! retries, and moves the [`ManualClock`] (a little, or past a lease); simulated workers
//! claim, heartbeat, checkpoint and finish their runs with each handler outcome (done,
//! retry, fail, snooze, park, and a put-back on shutdown), crash (their memory is gone,
//! their leases are left to expire), or stall and wake later to write with tokens that
//! may have gone stale. Workers decide their finishes with the engine's own
//! [`machine`] functions, as the real worker does.
//!
//! A reference model of every run — written from the `RunStore` `# Contract`, not from
//! any store — predicts the answer of every owner-checked write, cancel, retry and
//! enqueue exactly, and bounds what a claim may answer (only due or expired runs, fair
//! between tenants, in priority order, nothing left behind below the limit). After every
//! step it compares every row of the store with the model, and checks:
//!
//! - every write carrying a stale owner token is refused (and every current one accepted);
//! - at most one worker holds a run under a lease it believes live, at every instant;
//! - a run completes at most once; a completed or cancelled run never changes again;
//! - `attempts` moves only on retries, `reclaims` only on reclaims, `parks` only on parks,
//!   and none goes past its budget (`max_retries`, `max_reclaims`, [`MAX_PARKS`]);
//! - once a cancel is acknowledged as `Cancelled`, no claim hands the run out again.
//!
//! At the end every worker crashes, a fresh worker drains with the clock moving, and
//! every run must reach a terminal status within a bounded number of rounds (no run is
//! lost).
//!
//! A seed is replayed with `FRONTA_SIM_SEED=<seed>` (see [`SeedPlan::from_env`]); a
//! failure prints the exact command. The same seed gives the same steps on every store
//! and every machine: the only randomness outside the seed is the stores' owner tokens,
//! which the simulation compares only for equality.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use fronta_engine::machine::{self, MAX_PARKS};
use fronta_engine::{
    CancelReply, CheckpointParams, ClaimParams, Clock, Enqueued, Finish, FinishAction, FinishReply,
    LeaseRenewal, ManualClock, NewRun, OwnerToken, RetryLadder, RetryReply, Run, RunFilter, RunId,
    RunStatus, RunStore, StoreError, Trigger,
};
use uuid::Uuid;

use crate::rng::SplitMix64;

/// The environment variable that replays one seed.
pub const SEED_VAR: &str = "FRONTA_SIM_SEED";
/// The environment variable that sets how many seeds a run covers.
pub const SEEDS_VAR: &str = "FRONTA_SIM_SEEDS";
/// The environment variable that sets the first seed of a run (default 0).
pub const BASE_VAR: &str = "FRONTA_SIM_SEED_BASE";

/// The kind with the default lease.
pub const KIND_PLAIN: &str = "sim-plain";
/// The kind with a lease of its own.
pub const KIND_DURABLE: &str = "sim-durable";

/// The shape of one simulated world. [`SimConfig::default`] is what the test suites run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Simulated worker processes.
    pub workers: usize,
    /// Steps before the final drain.
    pub steps: usize,
    /// The tenants runs are spread over.
    pub tenants: Vec<String>,
    /// The unique keys runs may carry (a quarter of them carry one).
    pub unique_keys: Vec<String>,
    /// Enqueues stop adding runs past this many.
    pub max_runs: usize,
    /// The lease of [`KIND_PLAIN`].
    pub lease: Duration,
    /// The lease of [`KIND_DURABLE`].
    pub durable_lease: Duration,
    /// `max_reclaims` of every claim.
    pub max_reclaims: u32,
    /// The largest `max_retries` a run is enqueued with.
    pub max_retries: u32,
    /// The most runs one claim asks for.
    pub claim_limit: usize,
    /// The final drain gives up (and the seed fails) after this many claim rounds.
    pub drain_rounds: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            workers: 3,
            steps: 160,
            tenants: ["t-a", "t-b", "t-c"].map(String::from).to_vec(),
            unique_keys: ["key-1", "key-2"].map(String::from).to_vec(),
            max_runs: 40,
            lease: Duration::from_secs(30),
            durable_lease: Duration::from_secs(120),
            max_reclaims: 2,
            max_retries: 3,
            claim_limit: 4,
            drain_rounds: 2_000,
        }
    }
}

/// Which seeds one test run covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedPlan {
    pub first: u64,
    pub count: u64,
    /// One seed named by [`SEED_VAR`]: its steps are printed as they run.
    pub replay: bool,
}

impl SeedPlan {
    /// `FRONTA_SIM_SEED=<n>` replays seed n alone; otherwise `FRONTA_SIM_SEEDS=<count>`
    /// (default `default_count`) seeds from `FRONTA_SIM_SEED_BASE` (default 0). A value
    /// that is not a number is an error naming the variable.
    pub fn from_env(default_count: u64) -> Result<Self, String> {
        let read = |name: &str| -> Result<Option<u64>, String> {
            match std::env::var(name) {
                Ok(text) => text
                    .trim()
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|err| format!("{name}={text:?} is not a whole number: {err}")),
                Err(_) => Ok(None),
            }
        };
        if let Some(seed) = read(SEED_VAR)? {
            return Ok(Self {
                first: seed,
                count: 1,
                replay: true,
            });
        }
        Ok(Self {
            first: read(BASE_VAR)?.unwrap_or(0),
            count: read(SEEDS_VAR)?.unwrap_or(default_count),
            replay: false,
        })
    }

    pub fn seeds(&self) -> impl Iterator<Item = u64> + use<> {
        let first = self.first;
        (0..self.count).map(move |offset| first.wrapping_add(offset))
    }
}

/// What one seed did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Steps taken, the drain's included.
    pub steps: u64,
    /// Individual checks that held (answers, rows compared, invariants).
    pub checks: u64,
    /// Runs enqueued.
    pub runs: u64,
    pub claims: u64,
    pub reclaims: u64,
    pub stale_writes_refused: u64,
    pub crashes: u64,
    pub cancels: u64,
    /// FNV-1a over every step's description: equal for two runs of a seed exactly when
    /// they took the same steps and got the same answers.
    pub fingerprint: u64,
}

impl SeedReport {
    fn add(&mut self, other: &SeedReport) {
        self.steps += other.steps;
        self.checks += other.checks;
        self.runs += other.runs;
        self.claims += other.claims;
        self.reclaims += other.reclaims;
        self.stale_writes_refused += other.stale_writes_refused;
        self.crashes += other.crashes;
        self.cancels += other.cancels;
        self.fingerprint ^= other.fingerprint;
    }
}

/// A seed that broke an invariant: where, what, and the steps that led there.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub step: u64,
    pub message: String,
    /// The last steps before the failure, oldest first.
    pub trace: Vec<String>,
}

impl Failure {
    /// The report a test prints: the failure, its last steps, and the replay command.
    pub fn report(&self, replay_command: &str) -> String {
        let mut text = format!(
            "simulation seed {} failed at step {}: {}\nlast steps:\n",
            self.seed, self.step, self.message
        );
        for line in &self.trace {
            let _ = writeln!(text, "  {line}");
        }
        let _ = write!(
            text,
            "replay this seed alone: {SEED_VAR}={} {replay_command}",
            self.seed
        );
        text
    }
}

/// The sum of a run of seeds, for the test's closing line and `RELIABILITY.md`.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub seeds: u64,
    pub total: SeedReport,
    pub elapsed: Duration,
}

impl Summary {
    pub fn line(&self, label: &str) -> String {
        let seconds = self.elapsed.as_secs_f64().max(1e-9);
        format!(
            "{label}: {} seeds, {} steps, {} checks, {} runs, {} claims, {} reclaims, {} stale \
             writes refused, {} crashes, {} cancels in {:.2} s ({:.0} seeds/s, {:.0} steps/s)",
            self.seeds,
            self.total.steps,
            self.total.checks,
            self.total.runs,
            self.total.claims,
            self.total.reclaims,
            self.total.stale_writes_refused,
            self.total.crashes,
            self.total.cancels,
            self.elapsed.as_secs_f64(),
            self.seeds as f64 / seconds,
            self.total.steps as f64 / seconds,
        )
    }
}

/// Run every seed of `plan`, each on a fresh store from `open`; panic on the first
/// failure with its report and `replay_command` (the `cargo test …` that reruns this
/// test). Returns the summary, which the caller prints.
pub async fn run_plan<F, Fut>(
    plan: &SeedPlan,
    config: &SimConfig,
    replay_command: &str,
    mut open: F,
) -> Summary
where
    F: FnMut(ManualClock) -> Fut,
    Fut: std::future::Future<Output = Arc<dyn RunStore>>,
{
    let started = Instant::now();
    let mut summary = Summary::default();
    for seed in plan.seeds() {
        let clock = ManualClock::at_fixed_start();
        let store = open(clock.clone()).await;
        match simulate(store.as_ref(), &clock, seed, config, plan.replay).await {
            Ok(report) => {
                summary.seeds += 1;
                summary.total.add(&report);
            }
            Err(failure) => panic!("{}", failure.report(replay_command)),
        }
    }
    summary.elapsed = started.elapsed();
    summary
}

/// Run one seed against `store`, whose clock must be `clock`. `verbose` prints every step.
pub async fn simulate(
    store: &dyn RunStore,
    clock: &ManualClock,
    seed: u64,
    config: &SimConfig,
    verbose: bool,
) -> Result<SeedReport, Failure> {
    let mut sim = Sim::new(store, clock, seed, config, verbose);
    let result = sim.run().await;
    match result {
        Ok(()) => Ok(sim.report),
        Err(message) => Err(Failure {
            seed,
            step: sim.report.steps,
            message,
            trace: sim.trace.clone(),
        }),
    }
}

type Check = Result<(), String>;

macro_rules! ensure {
    ($sim:expr, $cond:expr, $($message:tt)+) => {{
        if !$cond {
            return Err(format!($($message)+));
        }
        $sim.report.checks += 1;
    }};
}

/// A run as the contract says it must be.
#[derive(Debug, Clone)]
struct ModelRun {
    id: RunId,
    tenant: String,
    kind: String,
    unique_key: Option<String>,
    priority: i16,
    max_retries: u32,
    /// Pending runs are `Queued` here; read at a time they are scheduled or queued.
    status: RunStatus,
    run_at: DateTime<Utc>,
    owner: Option<OwnerToken>,
    locked_until: Option<DateTime<Utc>>,
    cancel_requested: bool,
    attempts: u32,
    reclaims: u32,
    parks: u32,
    state: Option<Vec<u8>>,
    updated_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    /// Finishes that wrote `completed` (must stay at most one).
    completions: u32,
    /// `request_cancel` answered `Cancelled`: the run must never be handed out again.
    cancel_acknowledged: bool,
}

impl ModelRun {
    fn pending(&self) -> bool {
        self.status == RunStatus::Queued
    }

    fn read_status(&self, now: DateTime<Utc>) -> RunStatus {
        if self.pending() && self.run_at > now {
            RunStatus::Scheduled
        } else {
            self.status
        }
    }

    fn due(&self, now: DateTime<Utc>) -> bool {
        self.pending() && self.run_at <= now
    }

    fn expired(&self, now: DateTime<Utc>) -> bool {
        self.status == RunStatus::Running && self.locked_until.is_some_and(|until| until < now)
    }

    fn owned_by(&self, owner: OwnerToken) -> bool {
        self.status == RunStatus::Running && self.owner == Some(owner)
    }
}

/// One claim a simulated worker holds, as it believes it to be.
#[derive(Debug, Clone)]
struct Held {
    run: Run,
    owner: OwnerToken,
    lease: Duration,
    /// Until when this worker believes the lease is its own.
    believed_until: DateTime<Utc>,
    /// A heartbeat told it the run's cancel was requested.
    cancel_seen: bool,
}

#[derive(Debug, Default)]
struct SimWorker {
    held: Vec<Held>,
    /// Stalled: takes no step until woken (a long pause, a stop-the-world).
    stalled: bool,
}

/// What a handler answered, before the machine turns it into a finish.
#[derive(Debug, Clone, Copy)]
enum HandlerEnd {
    Done,
    Retry {
        after: Option<u64>,
    },
    Fail,
    Snooze {
        seconds: u64,
    },
    /// No handler for the kind in this worker.
    Park,
    /// Graceful shutdown gives the run back.
    Release,
}

struct Sim<'a> {
    store: &'a dyn RunStore,
    clock: &'a ManualClock,
    config: &'a SimConfig,
    rng: SplitMix64,
    seed: u64,
    verbose: bool,
    model: BTreeMap<RunId, ModelRun>,
    /// Insertion order, for picking runs by index.
    order: Vec<RunId>,
    workers: Vec<SimWorker>,
    ladder: RetryLadder,
    next_id: u64,
    report: SeedReport,
    trace: Vec<String>,
}

/// Steps kept for a failure's report.
const TRACE_LEN: usize = 40;

fn millis(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.timestamp_millis()).unwrap_or_default()
}

fn later(now: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    millis(fronta_engine::clock::add(now, by))
}

fn short(id: RunId) -> String {
    let text = id.0.simple().to_string();
    text[text.len() - 6..].to_owned()
}

fn unexpected(what: &str, err: StoreError) -> String {
    format!("{what} failed with a store error: {err}")
}

impl<'a> Sim<'a> {
    fn new(
        store: &'a dyn RunStore,
        clock: &'a ManualClock,
        seed: u64,
        config: &'a SimConfig,
        verbose: bool,
    ) -> Self {
        Self {
            store,
            clock,
            config,
            rng: SplitMix64::new(seed),
            seed,
            verbose,
            model: BTreeMap::new(),
            order: Vec::new(),
            workers: (0..config.workers).map(|_| SimWorker::default()).collect(),
            ladder: RetryLadder::default(),
            next_id: 0,
            report: SeedReport {
                fingerprint: 0xcbf2_9ce4_8422_2325,
                ..SeedReport::default()
            },
            trace: Vec::new(),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        millis(self.clock.now())
    }

    fn note(&mut self, line: String) {
        for byte in line.bytes().chain([b'\n']) {
            self.report.fingerprint ^= u64::from(byte);
            self.report.fingerprint = self.report.fingerprint.wrapping_mul(0x0100_0000_01b3);
        }
        if self.verbose {
            eprintln!("[seed {} step {}] {line}", self.seed, self.report.steps);
        }
        if self.trace.len() == TRACE_LEN {
            self.trace.remove(0);
        }
        self.trace
            .push(format!("step {}: {line}", self.report.steps));
    }

    fn params(&self, limit: usize) -> ClaimParams {
        ClaimParams {
            limit,
            default_lease: self.config.lease,
            leases: HashMap::from([(KIND_DURABLE.to_owned(), self.config.durable_lease)]),
            max_reclaims: self.config.max_reclaims,
            holder: None,
        }
    }

    async fn run(&mut self) -> Check {
        for _ in 0..self.config.steps {
            self.report.steps += 1;
            self.step().await?;
            self.check_all().await?;
        }
        self.drain().await
    }

    /// One step of the world or of one worker, chosen by the seed.
    async fn step(&mut self) -> Check {
        let worker = self.rng.index(self.workers.len());
        let roll = self.rng.below(100);
        if self.workers[worker].stalled {
            // A stalled worker takes no step of its own; sometimes it wakes.
            if roll < 25 {
                self.workers[worker].stalled = false;
                self.note(format!(
                    "worker {worker} wakes holding {} claims",
                    self.workers[worker].held.len()
                ));
                return Ok(());
            }
            return self.world_step().await;
        }
        match roll {
            0..=17 => self.world_step().await,
            18..=37 => self.claim(worker).await,
            38..=47 => self.heartbeat(worker).await,
            48..=55 => self.checkpoint(worker).await,
            56..=83 => self.finish_one(worker).await,
            84..=87 => {
                self.report.crashes += 1;
                let held = std::mem::take(&mut self.workers[worker].held);
                self.note(format!(
                    "worker {worker} crashes, dropping {} claims",
                    held.len()
                ));
                Ok(())
            }
            88..=90 => {
                self.workers[worker].stalled = true;
                self.note(format!("worker {worker} stalls"));
                Ok(())
            }
            _ => self.advance_step(),
        }
    }

    async fn world_step(&mut self) -> Check {
        match self.rng.below(100) {
            0..=49 => self.enqueue().await,
            50..=69 => self.cancel().await,
            70..=79 => self.manual_retry().await,
            _ => self.advance_step(),
        }
    }

    fn advance_step(&mut self) -> Check {
        let by = if self.rng.chance(30) {
            // Past the longest lease: every unrenewed claim expires.
            self.config.durable_lease + Duration::from_millis(1 + self.rng.below(5_000))
        } else {
            Duration::from_millis(1 + self.rng.below(10_000))
        };
        self.clock.advance(by);
        self.note(format!("clock +{} ms", by.as_millis()));
        Ok(())
    }

    fn fresh_id(&mut self) -> RunId {
        self.next_id += 1;
        // Ids sort by creation like UUIDv7s do; the seed keeps them apart across seeds.
        RunId(Uuid::from_u64_pair(self.seed, self.next_id))
    }

    async fn enqueue(&mut self) -> Check {
        if self.model.len() >= self.config.max_runs {
            return Ok(());
        }
        let count = 1 + self.rng.below(3) as usize;
        let now = self.now();
        let mut runs = Vec::with_capacity(count);
        for _ in 0..count {
            let tenant = self.rng.pick(&self.config.tenants).clone();
            let unique_key = self
                .rng
                .chance(25)
                .then(|| self.rng.pick(&self.config.unique_keys).clone());
            let delay = self
                .rng
                .chance(30)
                .then(|| Duration::from_millis(self.rng.below(60_000)));
            let kind = if self.rng.chance(30) {
                KIND_DURABLE
            } else {
                KIND_PLAIN
            };
            let id = self.fresh_id();
            runs.push(NewRun {
                id,
                tenant,
                kind: kind.to_owned(),
                payload: serde_json::json!({ "n": self.next_id }),
                trigger: Trigger::Api,
                unique_key,
                priority: *self.rng.pick(&[0, 0, 0, 5]),
                delay,
                run_at: None,
                max_retries: self.rng.below(u64::from(self.config.max_retries) + 1) as u32,
            });
        }
        // The model's answer first: keys held by non-terminal runs, or earlier in the batch.
        let mut expected = Vec::with_capacity(runs.len());
        let mut batch_keys: HashMap<(String, String), RunId> = HashMap::new();
        for run in &runs {
            let holder = run.unique_key.as_ref().and_then(|key| {
                self.model
                    .values()
                    .find(|held| {
                        !held.status.is_terminal()
                            && held.tenant == run.tenant
                            && held.unique_key.as_ref() == Some(key)
                    })
                    .map(|held| held.id)
                    .or_else(|| batch_keys.get(&(run.tenant.clone(), key.clone())).copied())
            });
            match holder {
                Some(holder) => expected.push(Enqueued::Existing(holder)),
                None => {
                    if let Some(key) = &run.unique_key {
                        batch_keys.insert((run.tenant.clone(), key.clone()), run.id);
                    }
                    expected.push(Enqueued::Inserted(run.id));
                }
            }
        }
        self.note(format!(
            "enqueue {}",
            runs.iter()
                .map(|run| format!(
                    "{}[{} {} key={:?} delay={:?} prio={} retries={}]",
                    short(run.id),
                    run.tenant,
                    run.kind,
                    run.unique_key,
                    run.delay.map(|d| d.as_millis()),
                    run.priority,
                    run.max_retries
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let answers = self
            .store
            .run_enqueue_many(runs.clone())
            .await
            .map_err(|err| unexpected("run_enqueue_many", err))?;
        ensure!(
            self,
            answers == expected,
            "enqueue answered {answers:?}, the contract says {expected:?}"
        );
        for (run, answer) in runs.into_iter().zip(answers) {
            if let Enqueued::Inserted(id) = answer {
                self.report.runs += 1;
                let run_at = match run.delay {
                    Some(delay) => later(now, delay),
                    None => now,
                };
                self.order.push(id);
                self.model.insert(
                    id,
                    ModelRun {
                        id,
                        tenant: run.tenant,
                        kind: run.kind,
                        unique_key: run.unique_key,
                        priority: run.priority,
                        max_retries: run.max_retries,
                        status: RunStatus::Queued,
                        run_at,
                        owner: None,
                        locked_until: None,
                        cancel_requested: false,
                        attempts: 0,
                        reclaims: 0,
                        parks: 0,
                        state: None,
                        updated_at: now,
                        started_at: None,
                        completions: 0,
                        cancel_acknowledged: false,
                    },
                );
            }
        }
        Ok(())
    }

    fn pick_run(&mut self) -> Option<RunId> {
        (!self.order.is_empty()).then(|| self.order[self.rng.index(self.order.len())])
    }

    async fn cancel(&mut self) -> Check {
        let Some(id) = self.pick_run() else {
            return Ok(());
        };
        self.report.cancels += 1;
        let now = self.now();
        let reply = self
            .store
            .run_request_cancel(id)
            .await
            .map_err(|err| unexpected("run_request_cancel", err))?;
        self.note(format!("cancel {} -> {reply:?}", short(id)));
        let run = self.model_mut(id)?;
        let expected = if run.pending() {
            run.status = RunStatus::Cancelled;
            run.updated_at = now;
            run.cancel_acknowledged = true;
            CancelReply::Cancelled
        } else if run.status == RunStatus::Running {
            run.cancel_requested = true;
            run.updated_at = now;
            CancelReply::Requested
        } else {
            CancelReply::AlreadyFinished(run.status)
        };
        ensure!(
            self,
            reply == expected,
            "cancel of {id} answered {reply:?}, the contract says {expected:?}"
        );
        Ok(())
    }

    async fn manual_retry(&mut self) -> Check {
        let failed: Vec<RunId> = self
            .order
            .iter()
            .copied()
            .filter(|id| self.model[id].status == RunStatus::Failed)
            .collect();
        // Sometimes a run that is not failed, to check it is refused.
        let id = if failed.is_empty() || self.rng.chance(20) {
            match self.pick_run() {
                Some(id) => id,
                None => return Ok(()),
            }
        } else {
            *self.rng.pick(&failed)
        };
        let now = self.now();
        let reply = self.store.run_retry(id).await;
        self.note(format!("manual retry {} -> {reply:?}", short(id)));
        let run = &self.model[&id];
        if run.status != RunStatus::Failed {
            let expected = RetryReply::NotFailed(run.read_status(now));
            ensure!(
                self,
                reply.as_ref() == Ok(&expected),
                "manual retry of {id} answered {reply:?}, the contract says {expected:?}"
            );
            return Ok(());
        }
        let key_held = run.unique_key.as_ref().is_some_and(|key| {
            self.model.values().any(|other| {
                other.id != id
                    && !other.status.is_terminal()
                    && other.tenant == run.tenant
                    && other.unique_key.as_ref() == Some(key)
            })
        });
        if key_held {
            ensure!(
                self,
                matches!(reply, Err(StoreError::Conflict(_))),
                "manual retry of {id} whose unique key is held answered {reply:?}, the contract \
                 says Conflict"
            );
            return Ok(());
        }
        ensure!(
            self,
            reply == Ok(RetryReply::Requeued),
            "manual retry of failed run {id} answered {reply:?}, the contract says Requeued"
        );
        let run = self.model_mut(id)?;
        run.status = RunStatus::Queued;
        run.run_at = now;
        run.updated_at = now;
        run.attempts = 0;
        run.reclaims = 0;
        run.parks = 0;
        run.owner = None;
        run.locked_until = None;
        Ok(())
    }

    fn model_mut(&mut self, id: RunId) -> Result<&mut ModelRun, String> {
        self.model
            .get_mut(&id)
            .ok_or_else(|| format!("run {id} is not in the model"))
    }

    async fn claim(&mut self, worker: usize) -> Check {
        let limit = 1 + self.rng.index(self.config.claim_limit);
        let now = self.now();
        let params = self.params(limit);
        let batch = self
            .store
            .run_claim(params.clone())
            .await
            .map_err(|err| unexpected("run_claim", err))?;
        self.report.claims += 1;
        self.note(format!(
            "worker {worker} claims (limit {limit}) -> claimed [{}] crash-looped [{}] cancelled [{}]",
            batch
                .claimed
                .iter()
                .map(|c| format!(
                    "{}{}",
                    short(c.run.id),
                    if c.reclaimed { "(reclaim)" } else { "" }
                ))
                .collect::<Vec<_>>()
                .join(" "),
            batch
                .crash_looped
                .iter()
                .map(|r| short(r.id))
                .collect::<Vec<_>>()
                .join(" "),
            batch
                .cancelled
                .iter()
                .map(|id| short(*id))
                .collect::<Vec<_>>()
                .join(" "),
        ));

        // What the claim may take, judged on the model before it.
        let expired: Vec<RunId> = self
            .model
            .values()
            .filter(|run| run.expired(now))
            .map(|run| run.id)
            .collect();
        let due: Vec<RunId> = self
            .model
            .values()
            .filter(|run| run.due(now))
            .map(|run| run.id)
            .collect();
        let mut seen = BTreeSet::new();
        ensure!(
            self,
            batch.claimed.len() <= limit,
            "a claim with limit {limit} took {}",
            batch.claimed.len()
        );
        let mut fresh_per_tenant: BTreeMap<String, usize> = BTreeMap::new();
        let mut fresh: Vec<RunId> = Vec::new();
        for claimed in &batch.claimed {
            let id = claimed.run.id;
            ensure!(self, seen.insert(id), "one claim handed out run {id} twice");
            let run = self
                .model
                .get(&id)
                .ok_or_else(|| format!("claim handed out unknown run {id}"))?;
            ensure!(
                self,
                !run.cancel_acknowledged,
                "claim handed out run {id} after its cancel was acknowledged"
            );
            // At most one live owner: nobody may believe this lease is theirs now.
            let believers = self
                .workers
                .iter()
                .flat_map(|w| &w.held)
                .filter(|held| held.run.id == id && held.believed_until >= now)
                .count();
            ensure!(
                self,
                believers == 0,
                "claim handed out run {id} while a worker still holds it under a live lease \
                 (status {:?}, locked until {:?}, now {now})",
                run.status,
                run.locked_until
            );
            if claimed.reclaimed {
                ensure!(
                    self,
                    run.expired(now) && !run.cancel_requested,
                    "claim reclaimed run {id} that is not expired without a cancel (status \
                     {:?}, locked until {:?}, now {now}, cancel {})",
                    run.status,
                    run.locked_until,
                    run.cancel_requested
                );
                ensure!(
                    self,
                    run.reclaims < self.config.max_reclaims,
                    "claim reclaimed run {id} past max_reclaims ({} reclaims)",
                    run.reclaims
                );
                self.report.reclaims += 1;
            } else {
                ensure!(
                    self,
                    run.due(now),
                    "claim took run {id} that is not due (status {:?}, run_at {}, now {now})",
                    run.status,
                    run.run_at
                );
                *fresh_per_tenant.entry(run.tenant.clone()).or_default() += 1;
                fresh.push(id);
            }
        }
        for run in &batch.crash_looped {
            let model = &self.model[&run.id];
            ensure!(
                self,
                model.expired(now)
                    && !model.cancel_requested
                    && model.reclaims + 1 > self.config.max_reclaims,
                "claim failed run {} as a crash loop but it was not an expired run out of \
                 reclaims ({model:?})",
                run.id
            );
            ensure!(
                self,
                seen.insert(run.id),
                "run {} answered twice by one claim",
                run.id
            );
        }
        for id in &batch.cancelled {
            let model = &self.model[id];
            ensure!(
                self,
                model.expired(now) && model.cancel_requested,
                "claim cancelled run {id} that was not expired with a requested cancel"
            );
            ensure!(
                self,
                seen.insert(*id),
                "run {id} answered twice by one claim"
            );
        }
        // Expired runs are handled first, up to the limit.
        let handled_expired = batch.claimed.iter().filter(|c| c.reclaimed).count()
            + batch.crash_looped.len()
            + batch.cancelled.len();
        ensure!(
            self,
            handled_expired == expired.len().min(limit),
            "claim handled {handled_expired} expired runs of {} with limit {limit}",
            expired.len()
        );
        // Below the limit nothing due is left behind.
        if batch.claimed.len() < limit {
            for id in &due {
                ensure!(
                    self,
                    seen.contains(id),
                    "claim took {} of limit {limit} but left due run {id} behind",
                    batch.claimed.len()
                );
            }
        }
        // Fairness: a second run of a tenant only once every tenant with due runs has one.
        if fresh_per_tenant.values().any(|&n| n >= 2) {
            for id in &due {
                let tenant = &self.model[id].tenant;
                ensure!(
                    self,
                    fresh_per_tenant.contains_key(tenant),
                    "claim gave a tenant a second run while tenant {tenant} with due runs got none"
                );
            }
        }
        // Within a tenant: higher priority first, then the earliest due.
        for taken in &fresh {
            let taken = &self.model[taken];
            for left in due.iter().filter(|id| !seen.contains(*id)) {
                let left = &self.model[left];
                if left.tenant != taken.tenant {
                    continue;
                }
                let before = left.priority > taken.priority
                    || (left.priority == taken.priority && left.run_at < taken.run_at);
                ensure!(
                    self,
                    !before,
                    "claim took run {} (priority {}, due {}) before run {} (priority {}, due {})",
                    taken.id,
                    taken.priority,
                    taken.run_at,
                    left.id,
                    left.priority,
                    left.run_at
                );
            }
        }

        // Apply to the model and hand the claims to the worker.
        for claimed in &batch.claimed {
            let lease = params.lease_of(&claimed.run.kind);
            let run = self.model_mut(claimed.run.id)?;
            run.status = RunStatus::Running;
            run.owner = Some(claimed.owner);
            run.locked_until = Some(later(now, lease));
            run.updated_at = now;
            run.started_at.get_or_insert(now);
            if claimed.reclaimed {
                run.reclaims += 1;
            }
            let believed_until = later(now, lease);
            self.workers[worker].held.push(Held {
                run: claimed.run.clone(),
                owner: claimed.owner,
                lease,
                believed_until,
                cancel_seen: false,
            });
        }
        for failed in &batch.crash_looped {
            let run = self.model_mut(failed.id)?;
            run.status = RunStatus::Failed;
            run.reclaims += 1;
            run.owner = None;
            run.locked_until = None;
            run.updated_at = now;
        }
        for id in &batch.cancelled {
            let run = self.model_mut(*id)?;
            run.status = RunStatus::Cancelled;
            run.owner = None;
            run.locked_until = None;
            run.updated_at = now;
        }
        Ok(())
    }

    async fn heartbeat(&mut self, worker: usize) -> Check {
        if self.workers[worker].held.is_empty() {
            return Ok(());
        }
        let now = self.now();
        let leases: Vec<LeaseRenewal> = self.workers[worker]
            .held
            .iter()
            .map(|held| LeaseRenewal {
                id: held.run.id,
                owner: held.owner,
                lease: held.lease,
            })
            .collect();
        let replies = self
            .store
            .run_heartbeat_many(leases.clone())
            .await
            .map_err(|err| unexpected("run_heartbeat_many", err))?;
        self.note(format!(
            "worker {worker} heartbeats [{}]",
            replies
                .iter()
                .map(|r| format!(
                    "{}{}",
                    short(r.id),
                    if r.lost {
                        " lost"
                    } else if r.cancel_requested {
                        " cancel"
                    } else {
                        ""
                    }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        ensure!(
            self,
            replies.len() == leases.len(),
            "heartbeat of {} leases answered {}",
            leases.len(),
            replies.len()
        );
        let mut keep = Vec::new();
        let held = std::mem::take(&mut self.workers[worker].held);
        for ((mut held, lease), reply) in held.into_iter().zip(&leases).zip(&replies) {
            ensure!(
                self,
                reply.id == lease.id,
                "heartbeat replies out of order: {} for {}",
                reply.id,
                lease.id
            );
            let run = self.model_mut(lease.id)?;
            let owned = run.owned_by(lease.owner);
            if owned {
                run.locked_until = Some(later(now, lease.lease));
                run.updated_at = now;
                let cancel = run.cancel_requested;
                ensure!(
                    self,
                    !reply.lost && reply.cancel_requested == cancel,
                    "heartbeat of {} by its owner answered {reply:?}, the contract says held \
                     with cancel_requested {cancel}",
                    lease.id
                );
                held.believed_until = later(now, lease.lease);
                held.cancel_seen |= cancel;
                keep.push(held);
            } else {
                ensure!(
                    self,
                    reply.lost,
                    "heartbeat of {} with a stale owner token was accepted",
                    lease.id
                );
                self.report.stale_writes_refused += 1;
            }
        }
        self.workers[worker].held = keep;
        Ok(())
    }

    async fn checkpoint(&mut self, worker: usize) -> Check {
        if self.workers[worker].held.is_empty() {
            return Ok(());
        }
        let index = self.rng.index(self.workers[worker].held.len());
        let held = self.workers[worker].held[index].clone();
        let now = self.now();
        let state = self.rng.next_u64().to_le_bytes().to_vec();
        let result = self
            .store
            .run_checkpoint(CheckpointParams {
                id: held.run.id,
                owner: held.owner,
                state: state.clone(),
                lease: held.lease,
            })
            .await;
        self.note(format!(
            "worker {worker} checkpoints {} -> {result:?}",
            short(held.run.id)
        ));
        let run = self.model_mut(held.run.id)?;
        if run.owned_by(held.owner) {
            run.state = Some(state);
            run.locked_until = Some(later(now, held.lease));
            run.updated_at = now;
            ensure!(
                self,
                result.is_ok(),
                "checkpoint of {} by its owner answered {result:?}",
                held.run.id
            );
            self.workers[worker].held[index].believed_until = later(now, held.lease);
        } else {
            ensure!(
                self,
                result == Err(StoreError::LeaseLost),
                "checkpoint of {} with a stale owner token answered {result:?}, the contract \
                 says lease lost",
                held.run.id
            );
            self.report.stale_writes_refused += 1;
            self.workers[worker].held.remove(index);
        }
        Ok(())
    }

    fn handler_end(&mut self) -> HandlerEnd {
        match self.rng.below(100) {
            0..=34 => HandlerEnd::Done,
            35..=59 => HandlerEnd::Retry {
                after: self.rng.chance(50).then(|| self.rng.below(20_000)),
            },
            60..=69 => HandlerEnd::Fail,
            70..=84 => HandlerEnd::Snooze {
                seconds: self.rng.below(30),
            },
            85..=94 => HandlerEnd::Park,
            _ => HandlerEnd::Release,
        }
    }

    /// What the real worker writes for `end`: the engine's own decision functions.
    fn decide(&self, held: &Held, end: HandlerEnd) -> FinishAction {
        use fronta_engine::Outcome;
        let outcome = match end {
            HandlerEnd::Done => Outcome::Done(Some(serde_json::json!({ "ok": true }))),
            HandlerEnd::Retry { after } => Outcome::Retry {
                after: after.map(Duration::from_millis),
                reason: "simulated failure".into(),
            },
            HandlerEnd::Fail => Outcome::Fail("simulated fatal error".into()),
            HandlerEnd::Snooze { seconds } => Outcome::Snooze(Duration::from_secs(seconds)),
            HandlerEnd::Park => return machine::decide_park(&held.run, Duration::from_secs(5)),
            HandlerEnd::Release => return FinishAction::Release,
        };
        if held.cancel_seen {
            machine::decide_cancelled(outcome)
        } else {
            machine::decide(&held.run, outcome, &self.ladder)
        }
    }

    async fn finish_one(&mut self, worker: usize) -> Check {
        if self.workers[worker].held.is_empty() {
            return Ok(());
        }
        let index = self.rng.index(self.workers[worker].held.len());
        let held = self.workers[worker].held.remove(index);
        let end = self.handler_end();
        let action = self.decide(&held, end);
        self.finish(Some(worker), held, action).await
    }

    /// Write one finish and check it against the model.
    async fn finish(&mut self, worker: Option<usize>, held: Held, action: FinishAction) -> Check {
        let now = self.now();
        let id = held.run.id;
        let mut replies = self
            .store
            .run_finish_many(vec![Finish {
                id,
                owner: held.owner,
                action: action.clone(),
            }])
            .await
            .map_err(|err| unexpected("run_finish_many", err))?;
        let who = worker.map_or("the drain".to_owned(), |w| format!("worker {w}"));
        self.note(format!(
            "{who} finishes {} with {} -> {replies:?}",
            short(id),
            action.name()
        ));
        ensure!(self, replies.len() == 1, "one finish answered {replies:?}");
        let reply = replies.remove(0);
        let run = self.model_mut(id)?;
        if !run.owned_by(held.owner) {
            ensure!(
                self,
                reply == FinishReply::LeaseLost { id },
                "finish ({}) of {id} with a stale owner token answered {reply:?}, the contract \
                 says lease lost",
                action.name()
            );
            self.report.stale_writes_refused += 1;
            return Ok(());
        }
        run.owner = None;
        run.locked_until = None;
        run.updated_at = now;
        let cancel = run.cancel_requested;
        let put_back = |run: &mut ModelRun, at: DateTime<Utc>| {
            run.run_at = at;
            run.status = if cancel {
                RunStatus::Cancelled
            } else {
                RunStatus::Queued
            };
        };
        match &action {
            FinishAction::Complete { .. } => {
                run.status = RunStatus::Completed;
                run.completions += 1;
            }
            FinishAction::Fail { .. } => run.status = RunStatus::Failed,
            FinishAction::Retry { delay, .. } => {
                put_back(run, later(now, *delay));
                if !cancel {
                    run.attempts += 1;
                }
            }
            FinishAction::Snooze { delay } => put_back(run, later(now, *delay)),
            FinishAction::Park { delay, .. } => {
                put_back(run, later(now, *delay));
                if !cancel {
                    run.parks += 1;
                }
            }
            FinishAction::Release => put_back(run, now),
            FinishAction::Cancel => run.status = RunStatus::Cancelled,
            FinishAction::Suppress { .. } => run.status = RunStatus::Suppressed,
        }
        let expected = FinishReply::Applied {
            id,
            status: run.read_status(now),
        };
        ensure!(
            self,
            reply == expected,
            "finish ({}) of {id} by its owner answered {reply:?}, the contract says {expected:?}",
            action.name()
        );
        Ok(())
    }

    /// Every row of the store against the model, and the invariants on the model.
    async fn check_all(&mut self) -> Check {
        let now = self.now();
        let rows = self
            .store
            .run_list(RunFilter {
                limit: RunFilter::MAX_PAGE,
                ..RunFilter::default()
            })
            .await
            .map_err(|err| unexpected("run_list", err))?;
        ensure!(
            self,
            rows.len() == self.model.len(),
            "the store lists {} runs, the model has {}",
            rows.len(),
            self.model.len()
        );
        for row in &rows {
            let model = self
                .model
                .get(&row.id)
                .ok_or_else(|| format!("the store lists run {} the model never saw", row.id))?;
            let status = model.read_status(now);
            let running = model.status == RunStatus::Running;
            let same = row.status == status
                && row.attempts == model.attempts
                && row.reclaims == model.reclaims
                && row.parks == model.parks
                && row.cancel_requested == model.cancel_requested
                && row.locked_by == model.owner
                && (!running || row.locked_until == model.locked_until)
                && (!model.pending() || row.run_at == model.run_at)
                && row.state == model.state
                && row.updated_at == model.updated_at
                && row.started_at == model.started_at
                && row.tenant == model.tenant
                && row.kind == model.kind
                && row.unique_key == model.unique_key
                && row.priority == model.priority
                && row.max_retries == model.max_retries;
            ensure!(
                self,
                same,
                "run {} differs from the contract's model\n  store: status {:?} attempts {} \
                 reclaims {} parks {} cancel {} owner {:?} locked_until {:?} run_at {} state \
                 {:?} updated {} started {:?}\n  model: status {:?} attempts {} reclaims {} \
                 parks {} cancel {} owner {:?} locked_until {:?} run_at {} state {:?} updated \
                 {} started {:?}",
                row.id,
                row.status,
                row.attempts,
                row.reclaims,
                row.parks,
                row.cancel_requested,
                row.locked_by,
                row.locked_until,
                row.run_at,
                row.state,
                row.updated_at,
                row.started_at,
                status,
                model.attempts,
                model.reclaims,
                model.parks,
                model.cancel_requested,
                model.owner,
                model.locked_until,
                model.run_at,
                model.state,
                model.updated_at,
                model.started_at,
            );
            let stamped = match row.status {
                RunStatus::Completed => row.completed_at.is_some(),
                RunStatus::Failed => row.failed_at.is_some(),
                RunStatus::Cancelled => row.cancelled_at.is_some(),
                _ => true,
            };
            ensure!(
                self,
                stamped,
                "run {} is {} without the time it became so",
                row.id,
                row.status
            );
            // Budgets.
            ensure!(
                self,
                model.attempts <= model.max_retries,
                "run {} spent {} attempts of {}",
                row.id,
                model.attempts,
                model.max_retries
            );
            ensure!(
                self,
                model.reclaims <= self.config.max_reclaims + 1,
                "run {} has {} reclaims, past max_reclaims {} and the failing one",
                row.id,
                model.reclaims,
                self.config.max_reclaims
            );
            ensure!(
                self,
                model.parks < MAX_PARKS,
                "run {} parked {} times (a run fails on its park number {MAX_PARKS})",
                row.id,
                model.parks
            );
            ensure!(
                self,
                model.completions <= 1,
                "run {} completed {} times",
                row.id,
                model.completions
            );
        }
        // At most one worker believes it holds each run under a live lease.
        let mut believers: BTreeMap<RunId, usize> = BTreeMap::new();
        for held in self.workers.iter().flat_map(|w| &w.held) {
            if held.believed_until >= now {
                *believers.entry(held.run.id).or_default() += 1;
            }
        }
        for (id, count) in believers {
            ensure!(
                self,
                count <= 1,
                "{count} workers hold run {id} under a lease they believe live"
            );
        }
        Ok(())
    }

    /// Every worker dies; a fresh one drains until every run is terminal.
    async fn drain(&mut self) -> Check {
        // Stalled workers wake first and write with whatever tokens they hold.
        for worker in 0..self.workers.len() {
            if self.workers[worker].stalled && !self.workers[worker].held.is_empty() {
                self.workers[worker].stalled = false;
                self.report.steps += 1;
                self.note(format!("worker {worker} wakes for the end"));
                self.heartbeat(worker).await?;
                self.check_all().await?;
            }
        }
        for worker in &mut self.workers {
            worker.held.clear();
        }
        self.note("every worker is gone; a fresh worker drains".into());
        for _ in 0..self.config.drain_rounds {
            if self.model.values().all(|run| run.status.is_terminal()) {
                return Ok(());
            }
            self.report.steps += 1;
            let now = self.now();
            let params = self.params(8);
            let batch = self
                .store
                .run_claim(params.clone())
                .await
                .map_err(|err| unexpected("run_claim", err))?;
            self.note(format!(
                "drain claims {} (+{} crash loops, +{} cancels)",
                batch.claimed.len(),
                batch.crash_looped.len(),
                batch.cancelled.len()
            ));
            let nothing = batch.claimed.is_empty();
            for failed in &batch.crash_looped {
                let run = self.model.get_mut(&failed.id).ok_or("drain: unknown run")?;
                ensure!(
                    self,
                    run.expired(now),
                    "drain: crash loop of a run that was not expired"
                );
                run.status = RunStatus::Failed;
                run.reclaims += 1;
                run.owner = None;
                run.locked_until = None;
                run.updated_at = now;
            }
            for id in &batch.cancelled {
                let run = self.model.get_mut(id).ok_or("drain: unknown run")?;
                ensure!(
                    self,
                    run.expired(now) && run.cancel_requested,
                    "drain: claim cancelled a run that was not expired with a cancel"
                );
                run.status = RunStatus::Cancelled;
                run.owner = None;
                run.locked_until = None;
                run.updated_at = now;
            }
            let mut held_now = Vec::new();
            for claimed in batch.claimed {
                let lease = params.lease_of(&claimed.run.kind);
                let run = self
                    .model
                    .get_mut(&claimed.run.id)
                    .ok_or("drain: unknown run")?;
                ensure!(
                    self,
                    run.due(now) || run.expired(now),
                    "drain: claim took run {} that was neither due nor expired",
                    run.id
                );
                ensure!(
                    self,
                    !run.cancel_acknowledged,
                    "drain: claim handed out run {} after its cancel was acknowledged",
                    run.id
                );
                run.status = RunStatus::Running;
                run.owner = Some(claimed.owner);
                run.locked_until = Some(later(now, lease));
                run.updated_at = now;
                run.started_at.get_or_insert(now);
                if claimed.reclaimed {
                    run.reclaims += 1;
                    self.report.reclaims += 1;
                }
                let cancel_seen = claimed.run.cancel_requested;
                held_now.push(Held {
                    run: claimed.run,
                    owner: claimed.owner,
                    lease,
                    believed_until: later(now, lease),
                    cancel_seen,
                });
            }
            self.check_all().await?;
            for held in held_now {
                // The drain's handlers end: done, failed, or retried (no snooze, no park,
                // so the drain ends).
                let end = match self.rng.below(10) {
                    0..=5 => HandlerEnd::Done,
                    6 => HandlerEnd::Fail,
                    _ => HandlerEnd::Retry { after: None },
                };
                let action = self.decide(&held, end);
                self.finish(None, held, action).await?;
            }
            self.check_all().await?;
            if nothing {
                // Nothing due: move the clock to the next due time or lease expiry.
                let next = self
                    .model
                    .values()
                    .filter_map(|run| match run.status {
                        RunStatus::Queued => Some(run.run_at),
                        RunStatus::Running => run
                            .locked_until
                            .map(|at| later(at, Duration::from_millis(1))),
                        _ => None,
                    })
                    .min();
                let step = match next {
                    Some(at) if at > now => (at - now).to_std().unwrap_or(Duration::from_millis(1)),
                    _ => Duration::from_millis(1),
                };
                self.clock.advance(step);
                self.note(format!("drain: clock +{} ms", step.as_millis()));
            }
        }
        let left: Vec<String> = self
            .model
            .values()
            .filter(|run| !run.status.is_terminal())
            .map(|run| format!("{} ({:?})", run.id, run.status))
            .collect();
        ensure!(
            self,
            left.is_empty(),
            "runs lost: after {} drain rounds these never finished: {}",
            self.config.drain_rounds,
            left.join(", ")
        );
        Ok(())
    }
}
