//! Typed jobs and enqueues inside an application's own transaction: the two things an
//! application embedding the engine writes against (seed 002's recipe — a handler, its
//! registration, an enqueue from a command handler in the same transaction as the
//! business write).
//!
//! - [`Job`]: a payload type with its kind's name. [`Registry::register_job`] registers a
//!   [`JobHandler`] that receives the decoded value, and adds a payload check so the
//!   dispatcher refuses at enqueue what would not decode at run time. A payload that no
//!   longer decodes when the run starts (written by an older version of the type) fails
//!   the run with the serde message, without a retry: a bug does not go away in a minute.
//! - [`AppTransaction`]: the application's own open transaction, on either store, seen as
//!   a place to insert runs. Each store crate wraps its driver's transaction in a type of
//!   its own that implements it (`fronta_store_postgres::AppTx` over a `&mut
//!   PgConnection` from the application's sqlx pool, `fronta_store_sqlite::AppTx` over
//!   the application's rusqlite transaction on the same file); [`Dispatcher::enqueue_tx`]
//!   and [`Dispatcher::enqueue_job_tx`] take any of them, so a command handler written
//!   against `&mut dyn AppTransaction` moves between stores unchanged.
//!
//! Left out: the JSON form stays what the automation runtime uses ([`crate::Handler`] with
//! `serde_json::Value` payloads); a typed kind and a JSON kind live side by side in one
//! registry.

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::dispatcher::{Dispatcher, EnqueueRequest};
use crate::error::{EngineError, StoreError};
use crate::model::NewRun;
use crate::registry::{Handler, KindConfig, Outcome, Registry, RunContext};
use crate::store::Enqueued;

/// A typed payload and the kind it runs as.
///
/// ```
/// use fronta_engine::Job;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct WelcomeMail {
///     user_id: i64,
/// }
///
/// impl Job for WelcomeMail {
///     const KIND: &'static str = "welcome:send";
/// }
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The kind's name, as registered and stored on each run.
    const KIND: &'static str;
    /// Retries after the first attempt, for enqueues that do not say.
    const MAX_RETRIES: u32 = 3;
}

/// A typed kind's code: gets the decoded payload beside the [`RunContext`].
#[async_trait]
pub trait JobHandler<J: Job>: Send + Sync + 'static {
    /// Run one attempt; see [`Handler::handle`] for what the answers mean.
    async fn handle(&self, job: J, ctx: RunContext) -> Outcome;
}

#[async_trait]
impl<J, F, Fut> JobHandler<J> for F
where
    J: Job,
    F: Fn(J, RunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    async fn handle(&self, job: J, ctx: RunContext) -> Outcome {
        (self)(job, ctx).await
    }
}

/// The [`Handler`] a typed kind is registered as: decodes, then calls the typed handler.
struct Typed<J, H> {
    handler: H,
    _job: std::marker::PhantomData<fn() -> J>,
}

#[async_trait]
impl<J: Job, H: JobHandler<J>> Handler for Typed<J, H> {
    async fn handle(&self, ctx: RunContext) -> Outcome {
        match decode::<J>(&ctx.run.payload) {
            Ok(job) => self.handler.handle(job, ctx).await,
            Err(err) => Outcome::Fail(err.to_string()),
        }
    }
}

/// Decodes a stored payload as `J`; the error names the kind and carries serde's message.
pub fn decode<J: Job>(payload: &serde_json::Value) -> Result<J, EngineError> {
    J::deserialize(payload).map_err(|err| EngineError::Payload {
        kind: J::KIND.to_owned(),
        reason: format!("does not decode: {err}"),
    })
}

/// Encodes `job` as the JSON payload it is stored as.
pub fn encode<J: Job>(job: &J) -> Result<serde_json::Value, EngineError> {
    serde_json::to_value(job).map_err(|err| EngineError::Payload {
        kind: J::KIND.to_owned(),
        reason: format!("does not encode: {err}"),
    })
}

impl Registry {
    /// Register the typed kind `J::KIND` with `handler`. The kind's payload check (set
    /// here, replacing any in `config`) decodes the payload as `J`, so the dispatcher
    /// refuses at enqueue what would not decode when the run starts.
    pub fn register_job<J: Job>(
        &mut self,
        config: KindConfig,
        handler: impl JobHandler<J>,
    ) -> Result<(), EngineError> {
        let config = config.with_payload_check(|payload| {
            decode::<J>(payload).map(|_| ()).map_err(|err| match err {
                EngineError::Payload { reason, .. } => reason,
                other => other.to_string(),
            })
        });
        self.register(
            J::KIND,
            config,
            Typed {
                handler,
                _job: std::marker::PhantomData,
            },
        )
    }
}

impl EnqueueRequest {
    /// An enqueue of `job` as its kind, with the kind's default `max_retries`.
    pub fn job<J: Job>(job: &J) -> Result<Self, EngineError> {
        Ok(Self::new(J::KIND, encode(job)?, i64::from(J::MAX_RETRIES)))
    }
}

/// A boxed future that may move between threads, borrowing for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The application's own open transaction, seen as a place to insert runs: they commit
/// with the application's writes or not at all. Implemented by each store crate's
/// `AppTx` (see the module docs); the application commits or rolls back its
/// transaction itself, as it always does.
///
/// # Contract
/// `run_insert_many` has the semantics of [`crate::RunStore::run_enqueue_many`] (an
/// existing unique key answers [`Enqueued::Existing`]) and writes nothing outside the
/// transaction. The future it returns borrows only what it needs to send the statement,
/// so it is `Send` even when the transaction type is not (a rusqlite transaction does its
/// work before the future is returned).
pub trait AppTransaction {
    /// Insert `runs`, answered in input order.
    fn run_insert_many(
        &mut self,
        runs: Vec<NewRun>,
    ) -> BoxFuture<'_, Result<Vec<Enqueued>, StoreError>>;
}

impl Dispatcher {
    /// Validate `request` and insert its run inside the application's transaction `tx`.
    /// Nothing is written if the transaction rolls back. Workers hear of the run when
    /// they next poll, or at once where the store's wake-up reaches them (see the store's
    /// `AppTx`).
    ///
    /// Not an `async fn`: the returned future holds what the store's insert holds, never
    /// `tx` itself, so it is `Send` on every store (and an axum handler may await it).
    pub fn enqueue_tx<'a>(
        &self,
        tx: &'a mut dyn AppTransaction,
        request: EnqueueRequest,
    ) -> BoxFuture<'a, Result<Enqueued, EngineError>> {
        let run = match self.prepare(request) {
            Ok(run) => run,
            Err(err) => return Box::pin(std::future::ready(Err(err))),
        };
        let insert = tx.run_insert_many(vec![run]);
        Box::pin(async move {
            insert.await?.pop().ok_or_else(|| {
                EngineError::Store(StoreError::Internal("invariant: one answer per run".into()))
            })
        })
    }

    /// Enqueue the typed `job` inside the application's transaction `tx`; see
    /// [`Dispatcher::enqueue_tx`].
    pub fn enqueue_job_tx<'a, J: Job>(
        &self,
        tx: &'a mut dyn AppTransaction,
        job: &J,
    ) -> BoxFuture<'a, Result<Enqueued, EngineError>> {
        match EnqueueRequest::job(job) {
            Ok(request) => self.enqueue_tx(tx, request),
            Err(err) => Box::pin(std::future::ready(Err(err))),
        }
    }

    /// Enqueue the typed `job` in the store's own transaction; see [`Dispatcher::enqueue`].
    pub async fn enqueue_job<J: Job>(&self, job: &J) -> Result<Enqueued, EngineError> {
        self.enqueue(EnqueueRequest::job(job)?).await
    }
}
