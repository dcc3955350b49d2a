//! The durable run engine: the run model, the [`RunStore`] port, the registry of kinds,
//! the worker pool with its heartbeater and completer, the dispatcher and the clock.
//!
//! This crate knows no SQL, no HTTP and no tickets. Stores implement [`RunStore`]
//! (see its `# Contract`); the automation runtime registers kinds and handlers.
//!
//! The life of a run:
//! `Dispatcher::enqueue` → `RunStore::run_enqueue_many` → a [`Worker`] claims it
//! (`run_claim`, fresh owner token, lease) → the handler runs outside any transaction
//! with a [`RunContext`] → the pure [`machine::decide`] turns its [`Outcome`] into a
//! [`FinishAction`] → the completer writes it, owner-checked (`run_finish_many`).

pub mod clock;
pub mod dispatcher;
pub mod error;
pub mod handoff;
pub mod job;
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
