//! The durable run engine: the run model, the [`RunStore`] port, the registry of kinds,
//! the worker pool with its heartbeater and completer, the dispatcher and the clock.
//!
//! This crate knows no SQL, no HTTP and no tickets. Stores implement [`RunStore`]
//! (see its `# Contract`): `fronta_store_sqlite` (embedded, one file, several processes
//! on one host) and `fronta_store_postgres` (several processes or machines). The
//! automation runtime registers its kinds and handlers here; so does an application that
//! embeds the engine.
//!
//! # The recipe: handler → register → enqueue from a command handler
//!
//! 1. **A handler** per kind: a [`JobHandler`] taking a typed payload ([`Job`]), or a
//!    [`Handler`] taking the JSON one. It must be idempotent: after a crash between its
//!    work and the finish being written, the run is claimed again and the handler runs
//!    again. It answers an [`Outcome`]: `Done`, `Retry { after, reason }` (spends an
//!    attempt), `Fail` (no retry), `Snooze` (later, no attempt spent) or `Suppress`; a
//!    panic is a `Fail`.
//! 2. **Register the kind** in a [`Registry`] with one of the two shapes:
//!    [`KindConfig::fire_and_forget`]`(timeout)` for short work under the worker's
//!    default lease (5 min), or [`KindConfig::durable`]`(lease, timeout)` for long work
//!    with a lease of its own that saves progress with `ctx.checkpointer.save(bytes)`
//!    (each save renews the lease) and resumes from `ctx.run.state`. The worker renews
//!    every lease it holds every third of the shortest lease ([`WorkerConfig`]); a
//!    lease or timeout under 1 ms is refused at registration (a units typo). The retry
//!    ladder is the kind's ([`KindConfig::with_ladder`]).
//! 3. **Enqueue from a command handler**, in the same transaction as the business
//!    write: [`Dispatcher::enqueue_job_tx`] (or [`Dispatcher::enqueue_tx`]) with the
//!    store's `AppTx` over the application's own transaction — the same call on both
//!    stores ([`AppTransaction`]). A rolled-back transaction enqueues nothing. Outside a
//!    transaction, [`Dispatcher::enqueue`] / [`Dispatcher::enqueue_job`]. An unknown
//!    kind, a negative `max_retries` or a payload that does not decode as the kind's type
//!    is refused at enqueue ([`EngineError`]).
//! 4. **Run workers**: [`Worker::new`]`(store, registry, config).run(shutdown)` in as many
//!    processes as you like; each claims due runs fairly between tenants, at most
//!    [`WorkerConfig::max_in_flight`] at once.
//!
//! A run keeps three budgets apart (see [`Run`]): `attempts` (handler failures and
//! timeouts, bounded by `max_retries`), `reclaims` (claims after a crashed owner's lease
//! expired, bounded by [`WorkerConfig::max_reclaims`] — a crash does not burn the retry
//! budget, a poison that kills its worker fails the run) and `parks` (claims by a worker
//! that does not know the kind). Every write about a claimed run carries its
//! [`OwnerToken`]: an owner whose lease was lost is refused ([`StoreError::LeaseLost`]).
//!
//! A handler runs outside any transaction: it may not begin one on fronta's store
//! ([`guard`]), and what it does with a pool of its own is its to keep short.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use fronta_engine::{
//!     AppTransaction, Dispatcher, EngineError, Job, KindConfig, Outcome, Registry,
//!     RunContext, RunStore, Worker, WorkerConfig,
//! };
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Import {
//!     batches: u32,
//! }
//!
//! impl Job for Import {
//!     const KIND: &'static str = "import:bulk";
//! }
//!
//! async fn import(job: Import, ctx: RunContext) -> Outcome {
//!     let first = ctx.run.state.as_deref().map_or(0, |state| state[0] as u32);
//!     for batch in first..job.batches {
//!         // … import the batch (idempotently) …
//!         if ctx.checkpointer.save(vec![(batch + 1) as u8]).await.is_err() {
//!             return Outcome::Fail("lease lost".into()); // another owner has it: stop
//!         }
//!     }
//!     Outcome::done()
//! }
//!
//! /// The command handler: `tx` is the store's `AppTx` over the application's own
//! /// transaction, which commits the business write and the run together.
//! async fn start_import(
//!     dispatcher: &Dispatcher,
//!     tx: &mut dyn AppTransaction,
//! ) -> Result<(), EngineError> {
//!     dispatcher.enqueue_job_tx(tx, &Import { batches: 20 }).await?;
//!     Ok(())
//! }
//!
//! async fn serve(store: Arc<dyn RunStore>) -> Result<(), EngineError> {
//!     let mut registry = Registry::new();
//!     registry.register_job(
//!         KindConfig::durable(Duration::from_secs(60), Duration::from_secs(3600)),
//!         import,
//!     )?;
//!     let worker = Worker::new(store, Arc::new(registry), WorkerConfig::default())?;
//!     worker.run(tokio_util::sync::CancellationToken::new()).await?;
//!     Ok(())
//! }
//! ```
//!
//! The life of a run:
//! `Dispatcher::enqueue` → `RunStore::run_enqueue_many` → a [`Worker`] claims it
//! (`run_claim`, fresh owner token, lease) → the handler runs outside any transaction
//! with a [`RunContext`] → the pure [`machine::decide`] turns its [`Outcome`] into a
//! [`FinishAction`] → the completer writes it, owner-checked (`run_finish_many`).
#![warn(missing_docs)]

pub mod audit;
pub mod clock;
pub mod dispatcher;
pub mod error;
pub mod guard;
pub mod handoff;
pub mod job;
pub mod liveness;
pub mod machine;
pub mod metrics;
pub mod model;
pub mod prefetch;
pub mod registry;
pub mod retention;
pub mod store;
pub mod worker;

pub use clock::{Clock, ManualClock, SystemClock};
pub use dispatcher::{Dispatcher, EnqueueRequest};
pub use error::{EngineError, LeaseLost, StoreError};
pub use job::{AppTransaction, BoxFuture, Job, JobHandler};
pub use liveness::{Liveness, LivenessConfig, ProcessFacts, ProcessId, ProcessList, ProcessRecord};
pub use machine::RetryLadder;
pub use metrics::WorkerMetrics;
pub use model::{NewRun, OwnerToken, Run, RunId, RunStatus, Trigger};
pub use registry::{Handler, KindConfig, Outcome, Registry, RunContext, Shape};
pub use store::{
    CancelReply, CheckpointParams, ClaimBatch, ClaimParams, ClaimedRun, Enqueued, Finish,
    FinishAction, FinishReply, HandOff, HeartbeatReply, LeaseRenewal, RetryReply, RunFilter,
    RunInsert, RunStats, RunStore, StatusCounts,
};
pub use worker::{KEYED_ENDS_BUFFER, KeyedEnd, LocalRuns, Worker, WorkerConfig, WorkerReport};
