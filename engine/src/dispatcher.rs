//! The dispatcher: validates an enqueue (known kind, `max_retries` not negative, a JSON
//! object or other value as payload) and hands it to the store — in its own transaction
//! ([`Dispatcher::enqueue`]) or inside the caller's ([`Dispatcher::enqueue_in`]).
//!
//! A worker's own dispatcher ([`crate::Worker::dispatcher`]) also carries the worker's
//! intake: a single enqueue while that worker waits idle is inserted already claimed and
//! handed to it ([`crate::handoff`]), so the run starts after one commit, not two.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::EngineError;
use crate::handoff::Intake;
use crate::model::{DEFAULT_TENANT, NewRun, RunId, Trigger};
use crate::registry::{PayloadCheck, Registry};
use crate::store::{Enqueued, Finish, FinishAction, HandOff, RunInsert, RunStore};

/// The longest accepted unique key or tenant name, in bytes.
pub const MAX_KEY_LEN: usize = 512;

/// One enqueue.
#[derive(Debug, Clone)]
pub struct EnqueueRequest {
    /// The kind to run: it must be known to the dispatcher (registered), else
    /// [`EngineError::UnknownKind`].
    pub kind: String,
    /// The handler's input ([`crate::Run::payload`]); a kind with a payload check (a typed
    /// kind) refuses one that does not pass with [`EngineError::Payload`], before anything
    /// is written.
    pub payload: serde_json::Value,
    /// Retries allowed after the first attempt; negative is refused.
    pub max_retries: i64,
    /// The tenant the run belongs to, 1 to [`MAX_KEY_LEN`] bytes; `None`:
    /// [`crate::model::DEFAULT_TENANT`] (`"default"`).
    pub tenant: Option<String>,
    /// What started the run; [`Trigger::Api`] unless set.
    pub trigger: Trigger,
    /// At most one pending or running run of the tenant holds this key (1 to
    /// [`MAX_KEY_LEN`] bytes): an enqueue while one does answers [`Enqueued::Existing`] and
    /// inserts nothing. `None`: no deduplication.
    pub unique_key: Option<String>,
    /// Higher is claimed first among the tenant's due runs; 0 unless set.
    pub priority: i16,
    /// Due this long after the store's now at insert; `None`: due at once (unless `run_at`
    /// is set).
    pub delay: Option<Duration>,
    /// Due at this instant; wins over `delay`.
    pub run_at: Option<DateTime<Utc>>,
}

impl EnqueueRequest {
    /// A request to run `kind` with `payload`, allowing `max_retries` retries after the
    /// first attempt (negative is refused at enqueue): default tenant, trigger
    /// [`Trigger::Api`], no unique key, priority 0, due at once. The other methods set the
    /// rest.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use fronta_engine::{EnqueueRequest, Trigger};
    ///
    /// let request = EnqueueRequest::new("welcome:send", serde_json::json!({ "user": 42 }), 3)
    ///     .tenant("acme")
    ///     .unique_key("welcome:42")
    ///     .delay(Duration::from_secs(60))
    ///     .priority(10);
    /// assert_eq!(request.trigger, Trigger::Api);
    /// ```
    pub fn new(kind: impl Into<String>, payload: serde_json::Value, max_retries: i64) -> Self {
        Self {
            kind: kind.into(),
            payload,
            max_retries,
            tenant: None,
            trigger: Trigger::Api,
            unique_key: None,
            priority: 0,
            delay: None,
            run_at: None,
        }
    }

    /// Enqueue for `tenant` (1 to [`MAX_KEY_LEN`] bytes) instead of the default tenant.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Deduplicate by `key` (1 to [`MAX_KEY_LEN`] bytes): while a pending or running run of
    /// the tenant holds it, the enqueue answers that run ([`Enqueued::Existing`]) and
    /// inserts nothing. A finished run frees its key.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// Due `delay` after the store's now when it is inserted (by the store's clock, not the
    /// caller's).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Due at this instant (wins over a delay): for a time that is known exactly, such
    /// as a schedule's fire instant, whatever the store's clock says when it inserts.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Record what started the run (default [`Trigger::Api`]).
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.trigger = trigger;
        self
    }

    /// Claim it before the tenant's due runs of lower priority (default 0; higher first).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }
}

/// Enqueues runs of the kinds it knows. Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    store: Arc<dyn RunStore>,
    kinds: Arc<HashMap<String, Option<PayloadCheck>>>,
    /// The intake of the worker this dispatcher hands idle-time enqueues to, if any.
    intake: Option<Arc<Intake>>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("kinds", &self.kinds.keys().collect::<Vec<_>>())
            .field("hands_off", &self.intake.is_some())
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher that accepts the kinds in `kinds`, without payload checks.
    pub fn new<'a>(store: Arc<dyn RunStore>, kinds: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            store,
            kinds: Arc::new(
                kinds
                    .into_iter()
                    .map(|kind| (kind.to_owned(), None))
                    .collect(),
            ),
            intake: None,
        }
    }

    /// A dispatcher that accepts the registry's kinds and applies their payload checks.
    pub fn from_registry(store: Arc<dyn RunStore>, registry: &Registry) -> Self {
        Self {
            store,
            kinds: Arc::new(registry.payload_checks()),
            intake: None,
        }
    }

    /// Whether a single due enqueue through this dispatcher would be handed to its worker
    /// now (the worker waits idle with a free slot); `false` for a dispatcher without a
    /// worker. For tests and diagnostics: the answer may change at once.
    pub fn hands_off_now(&self) -> bool {
        self.intake.as_ref().is_some_and(|intake| intake.is_open())
    }

    /// This dispatcher, handing single enqueues to the worker behind `intake` when it
    /// waits idle.
    pub(crate) fn with_intake(mut self, intake: Arc<Intake>) -> Self {
        self.intake = Some(intake);
        self
    }

    /// The store this dispatcher writes to.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.store
    }

    /// Validate and build the row, without writing it.
    pub fn prepare(&self, request: EnqueueRequest) -> Result<NewRun, EngineError> {
        let Some(check) = self.kinds.get(&request.kind) else {
            return Err(EngineError::UnknownKind { kind: request.kind });
        };
        if let Some(check) = check {
            check(&request.payload).map_err(|reason| EngineError::Payload {
                kind: request.kind.clone(),
                reason,
            })?;
        }
        let max_retries = u32::try_from(request.max_retries).map_err(|_| {
            if request.max_retries < 0 {
                EngineError::NegativeMaxRetries(request.max_retries)
            } else {
                EngineError::Invalid(format!("max_retries {} is too large", request.max_retries))
            }
        })?;
        let tenant = request.tenant.unwrap_or_else(|| DEFAULT_TENANT.to_owned());
        if tenant.trim().is_empty() || tenant.len() > MAX_KEY_LEN {
            return Err(EngineError::Invalid(format!(
                "a tenant must be 1 to {MAX_KEY_LEN} bytes of text"
            )));
        }
        if let Some(key) = &request.unique_key
            && (key.is_empty() || key.len() > MAX_KEY_LEN)
        {
            return Err(EngineError::Invalid(format!(
                "a unique key must be 1 to {MAX_KEY_LEN} bytes"
            )));
        }
        let id = RunId::new_v7();
        // A person's enqueue (a manual run, a bulk action) names the run it made.
        crate::audit::created(&id);
        Ok(NewRun {
            id,
            tenant,
            kind: request.kind,
            payload: request.payload,
            trigger: request.trigger,
            unique_key: request.unique_key,
            priority: request.priority,
            delay: request.delay,
            run_at: request.run_at,
            max_retries,
        })
    }

    /// Validate and enqueue in the store's own transaction.
    ///
    /// With an intake (a worker's own dispatcher), a run that is due at once is handed
    /// to the worker when it waits idle with a free slot: the store inserts it already
    /// claimed, or queues it when that would overtake a due run (see
    /// [`RunStore::run_enqueue_started`]).
    pub async fn enqueue(&self, request: EnqueueRequest) -> Result<Enqueued, EngineError> {
        let run = self.prepare(request)?;
        let due_now = run.due_at_once();
        if let Some(intake) = self.intake.as_ref().filter(|_| due_now)
            && let Some(reservation) = intake.reserve()
        {
            let lease = intake.lease_of(&run.kind);
            return match self
                .store
                .run_enqueue_started(run, lease, intake.holder())
                .await?
            {
                HandOff::Queued(answer) => Ok(answer),
                HandOff::Started(claimed) => {
                    let id = claimed.run.id;
                    tracing::debug!(run = %id, kind = %claimed.run.kind, "enqueued straight into the idle worker (hand-off)");
                    if let Err(claimed) = reservation.deliver(*claimed) {
                        tracing::info!(run = %id, "the worker stopped before its handed-over run started: the run goes back to the queue");
                        let released = self
                            .store
                            .run_finish_many(vec![Finish {
                                id,
                                owner: claimed.owner,
                                action: FinishAction::Release,
                            }])
                            .await;
                        // The run is stored either way: unreleased, it is reclaimed when
                        // its lease ends. The enqueue itself succeeded.
                        if let Err(err) = released {
                            tracing::warn!(run = %id, error = %err, "could not give a handed-over run back: it is reclaimed when its lease ends");
                        }
                    }
                    Ok(Enqueued::Inserted(id))
                }
            };
        }
        let mut answers = self.store.run_enqueue_many(vec![run]).await?;
        answers
            .pop()
            .ok_or_else(|| EngineError::Invalid("the store answered no enqueue".into()))
    }

    /// Validate and enqueue many in one transaction: all or none.
    pub async fn enqueue_many(
        &self,
        requests: Vec<EnqueueRequest>,
    ) -> Result<Vec<Enqueued>, EngineError> {
        let runs = requests
            .into_iter()
            .map(|request| self.prepare(request))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.store.run_enqueue_many(runs).await?)
    }

    /// Validate and enqueue inside the caller's transaction: the run commits with the
    /// caller's other writes or not at all.
    pub fn enqueue_in(
        &self,
        tx: &mut dyn RunInsert,
        request: EnqueueRequest,
    ) -> Result<Enqueued, EngineError> {
        let run = self.prepare(request)?;
        Ok(tx.run_insert(&run)?)
    }
}
