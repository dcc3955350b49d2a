//! Kinds and their handlers: what a handler gets ([`RunContext`]) and what it answers
//! ([`Outcome`]). Registration is where a kind's shape, lease, timeout and retry ladder
//! are decided; nonsense (a lease under a millisecond, an empty ladder) is refused here.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::dispatcher::Dispatcher;
use crate::error::{EngineError, LeaseLost, StoreError};
use crate::machine::RetryLadder;
use crate::model::{OwnerToken, Run};
use crate::store::{CheckpointParams, RunStore};

/// The shortest lease or timeout accepted: anything shorter is a units typo.
pub const MIN_DURATION: Duration = Duration::from_millis(1);

/// The two shapes of work, differing only in registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Short, idempotent work; the worker's default lease; no checkpoint.
    FireAndForget {
        /// How long one attempt's handler may run before it is stopped and the run
        /// retried by the ladder.
        timeout: Duration,
    },
    /// Long work with its own lease that checkpoints and resumes from `run.state`.
    Durable {
        /// How long a claim holds the run without a heartbeat or checkpoint; after a
        /// crash the run is reclaimed once it ends. A worker heartbeats every third of
        /// its shortest lease by default ([`crate::WorkerConfig::heartbeat_every`]).
        lease: Duration,
        /// How long one attempt's handler may run, checkpoints or not, before it is
        /// stopped and the run retried by the ladder.
        timeout: Duration,
    },
}

/// Checks a payload at enqueue; `Err` carries a one-line reason.
pub type PayloadCheck = Arc<dyn Fn(&serde_json::Value) -> Result<(), String> + Send + Sync>;

/// A kind's settings.
#[derive(Clone)]
pub struct KindConfig {
    /// Fire-and-forget or durable, with the kind's timeout and (durable) lease.
    pub shape: Shape,
    /// The delays between retries when the handler answers [`Outcome::Retry`] without its
    /// own delay; [`RetryLadder::default`] unless [`KindConfig::with_ladder`] replaced it.
    pub ladder: RetryLadder,
    /// Refuses a malformed payload at enqueue, before anything is written.
    pub payload_check: Option<PayloadCheck>,
}

impl std::fmt::Debug for KindConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindConfig")
            .field("shape", &self.shape)
            .field("ladder", &self.ladder)
            .field("payload_check", &self.payload_check.is_some())
            .finish()
    }
}

impl KindConfig {
    /// A fire-and-forget kind: short, idempotent work claimed with the worker's
    /// [`crate::WorkerConfig::default_lease`] (5 min by default), no checkpoints; its
    /// handler is stopped after `timeout` and the run retried by the ladder. The default
    /// [`RetryLadder`], no payload check.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use fronta_engine::KindConfig;
    ///
    /// let config = KindConfig::fire_and_forget(Duration::from_secs(30));
    /// assert_eq!(config.lease(), None);
    /// assert_eq!(config.timeout(), Duration::from_secs(30));
    /// ```
    pub fn fire_and_forget(timeout: Duration) -> Self {
        Self {
            shape: Shape::FireAndForget { timeout },
            ladder: RetryLadder::default(),
            payload_check: None,
        }
    }

    /// A durable kind: long work claimed with its own `lease` (heartbeats renew it, and a
    /// crash makes the run reclaimable once it ends) that saves checkpoints through
    /// [`RunContext::checkpointer`] and resumes from [`Run::state`]; its handler is stopped
    /// after `timeout` (the whole attempt, however often it checkpoints) and the run
    /// retried by the ladder. The default [`RetryLadder`], no payload check.
    /// [`Registry::register`] refuses a lease or timeout under 1 ms.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use fronta_engine::{KindConfig, RetryLadder};
    ///
    /// let config = KindConfig::durable(Duration::from_secs(60), Duration::from_secs(3600))
    ///     .with_ladder(RetryLadder::new(vec![Duration::from_secs(5)]).expect("not empty"));
    /// assert_eq!(config.lease(), Some(Duration::from_secs(60)));
    /// ```
    pub fn durable(lease: Duration, timeout: Duration) -> Self {
        Self {
            shape: Shape::Durable { lease, timeout },
            ladder: RetryLadder::default(),
            payload_check: None,
        }
    }

    /// Replace the default retry ladder for this kind.
    pub fn with_ladder(mut self, ladder: RetryLadder) -> Self {
        self.ladder = ladder;
        self
    }

    /// Refuse payloads that `check` rejects, at enqueue.
    pub fn with_payload_check(
        mut self,
        check: impl Fn(&serde_json::Value) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.payload_check = Some(Arc::new(check));
        self
    }

    /// How long one attempt's handler may run before it is stopped and the run retried.
    pub fn timeout(&self) -> Duration {
        match self.shape {
            Shape::FireAndForget { timeout } | Shape::Durable { timeout, .. } => timeout,
        }
    }

    /// The kind's own lease, if it has one.
    pub fn lease(&self) -> Option<Duration> {
        match self.shape {
            Shape::FireAndForget { .. } => None,
            Shape::Durable { lease, .. } => Some(lease),
        }
    }

    fn validate(&self, kind: &str) -> Result<(), EngineError> {
        if self.timeout() < MIN_DURATION {
            return Err(EngineError::Config(format!(
                "kind {kind:?}: timeout {:?} is under 1 ms (a units typo?)",
                self.timeout()
            )));
        }
        if let Some(lease) = self.lease()
            && lease < MIN_DURATION
        {
            return Err(EngineError::Config(format!(
                "kind {kind:?}: lease {lease:?} is under 1 ms (a units typo?)"
            )));
        }
        Ok(())
    }
}

/// What a handler answers.
///
/// The worker turns it into what is written ([`crate::machine::decide`]). When the
/// handler was stopped by a requested cancel, anything but `Done` is written
/// `cancelled`; and a cancel flag the row holds when the finish is written turns `Retry`
/// and `Snooze` into `cancelled` as well.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Finished; the optional result is stored on the run.
    /// The run becomes `completed` ([`Run::result`]); an earlier attempt's error is cleared.
    Done(Option<serde_json::Value>),
    /// Try again: after the given delay (e.g. a Retry-After), else by the kind's ladder.
    /// Spends an attempt; over `max_retries` the run fails.
    Retry {
        /// Wait this long before the next attempt (a Retry-After); `None`: the kind's
        /// ladder decides.
        after: Option<Duration>,
        /// Why this attempt did not finish, stored in [`Run::last_error`].
        reason: String,
    },
    /// Give up now.
    /// The run becomes `failed` with this reason in [`Run::last_error`], whatever retries
    /// are left: for errors that a retry will not mend. A person may retry it by hand.
    Fail(String),
    /// Come back later without spending an attempt (long waits, full caps).
    /// The run is pending again, due after the duration (by the store's clock), its
    /// checkpoint kept; no counter moves, so a run may snooze without end.
    Snooze(Duration),
    /// Not run, on purpose, for this reason (a guard stopped it before it did
    /// anything): terminal `suppressed`; a retry by hand starts it.
    Suppress(String),
}

impl Outcome {
    /// `Done` without a result: the usual answer of a handler that finished.
    pub fn done() -> Self {
        Outcome::Done(None)
    }
}

/// A kind's code.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Run one attempt of `ctx.run` and answer what became of it. Called outside any
    /// transaction, in a task of its own; it should watch `ctx.signal` (cancel, lease lost,
    /// shutdown) and return soon after it fires. A panic fails the run; running past the
    /// kind's timeout aborts the task and retries the run.
    async fn handle(&self, ctx: RunContext) -> Outcome;
}

#[async_trait]
impl<F, Fut> Handler for F
where
    F: Fn(RunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    async fn handle(&self, ctx: RunContext) -> Outcome {
        (self)(ctx).await
    }
}

/// Why a handler's signal fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StopReason {
    /// Somebody asked to cancel the run.
    Cancel = 1,
    /// Another owner holds the run now: stop, write nothing.
    LeaseLost = 2,
    /// The worker is shutting down: stop, the run will be given back.
    Shutdown = 3,
}

/// The signal a handler watches, with the reason it fired. The first reason sticks.
#[derive(Debug, Clone, Default)]
pub struct StopSignal {
    token: CancellationToken,
    reason: Arc<AtomicU8>,
}

impl StopSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fire the signal for `reason`; a later call keeps the first reason.
    pub fn stop(&self, reason: StopReason) {
        let _ = self
            .reason
            .compare_exchange(0, reason as u8, Ordering::SeqCst, Ordering::SeqCst);
        self.token.cancel();
    }

    /// Why the signal fired; `None` while it has not.
    pub fn reason(&self) -> Option<StopReason> {
        match self.reason.load(Ordering::SeqCst) {
            1 => Some(StopReason::Cancel),
            2 => Some(StopReason::LeaseLost),
            3 => Some(StopReason::Shutdown),
            _ => None,
        }
    }

    /// Whether the signal has fired: the handler should stop.
    pub fn is_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves when the handler should stop.
    pub async fn stopped(&self) {
        self.token.cancelled().await
    }
}

/// Saves a durable handler's progress, owner-checked.
#[derive(Clone)]
pub struct Checkpointer {
    store: Arc<dyn RunStore>,
    run: crate::model::RunId,
    owner: OwnerToken,
    lease: Duration,
    signal: StopSignal,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("run", &self.run)
            .finish()
    }
}

impl Checkpointer {
    /// The checkpointer of run `run` claimed with `owner`: each save renews the lease by
    /// `lease` and refuses once `signal` says the lease is lost. The worker makes one per
    /// claimed run; a test or an application that runs a handler itself makes its own.
    pub fn new(
        store: Arc<dyn RunStore>,
        run: crate::model::RunId,
        owner: OwnerToken,
        lease: Duration,
        signal: StopSignal,
    ) -> Self {
        Self {
            store,
            run,
            owner,
            lease,
            signal,
        }
    }

    /// Store `state` as the run's checkpoint and renew its lease. `Err(LeaseLost)` when
    /// another owner holds the run: the handler must stop (its signal fires too).
    /// A storage outage is retried a few times, then also reported as `LeaseLost`: the
    /// run is abandoned and resumes from its previous checkpoint after the lease.
    pub async fn save(&self, state: Vec<u8>) -> Result<(), LeaseLost> {
        let mut delay = Duration::from_millis(50);
        for _ in 0..5 {
            let params = CheckpointParams {
                id: self.run,
                owner: self.owner,
                state: state.clone(),
                lease: self.lease,
            };
            match self.store.run_checkpoint(params).await {
                Ok(()) => return Ok(()),
                Err(StoreError::Unavailable(message)) => {
                    tracing::warn!(run = %self.run, %message, "checkpoint: storage unavailable, trying again");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(err) => {
                    tracing::warn!(run = %self.run, error = %err, "checkpoint refused; abandoning the run");
                    self.signal.stop(StopReason::LeaseLost);
                    return Err(LeaseLost);
                }
            }
        }
        tracing::warn!(run = %self.run, "checkpoint: storage still unavailable; abandoning the run");
        self.signal.stop(StopReason::LeaseLost);
        Err(LeaseLost)
    }
}

/// Everything a handler gets.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The run as claimed (read-only): payload, last checkpoint, counters.
    pub run: Arc<Run>,
    /// Fires on cancel, lease loss or shutdown; see [`StopSignal::reason`].
    pub signal: StopSignal,
    /// Saves the run's progress (durable kinds) and renews its lease.
    pub checkpointer: Checkpointer,
    /// Enqueue follow-up runs.
    pub dispatcher: Dispatcher,
    /// The name of the worker running it ([`crate::WorkerConfig::name`]), for the run's
    /// own record of where each attempt ran.
    pub worker: Arc<str>,
}

/// A registered kind.
#[derive(Clone)]
pub struct Registered {
    /// The kind's settings as registered.
    pub config: KindConfig,
    /// The kind's code.
    pub handler: Arc<dyn Handler>,
}

/// Kinds this process can run.
#[derive(Clone, Default)]
pub struct Registry {
    kinds: HashMap<String, Registered>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("kinds", &self.kinds.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `kind`. Refuses an empty name, a duplicate, or a lease/timeout under 1 ms.
    ///
    /// A handler is any `Fn(RunContext) -> impl Future<Output = Outcome>` (or a type
    /// implementing [`Handler`]).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use fronta_engine::{KindConfig, Outcome, Registry, RunContext};
    ///
    /// let mut registry = Registry::new();
    /// let config = KindConfig::fire_and_forget(Duration::from_secs(30));
    /// registry.register("welcome:send", config, |ctx: RunContext| async move {
    ///     match ctx.run.payload.get("user") {
    ///         Some(_user) => Outcome::done(),
    ///         None => Outcome::Fail("the payload names no user".into()),
    ///     }
    /// })?;
    /// assert!(registry.contains("welcome:send"));
    /// # Ok::<(), fronta_engine::EngineError>(())
    /// ```
    pub fn register(
        &mut self,
        kind: &str,
        config: KindConfig,
        handler: impl Handler,
    ) -> Result<(), EngineError> {
        if kind.trim().is_empty() {
            return Err(EngineError::Config("a kind needs a name".into()));
        }
        if self.kinds.contains_key(kind) {
            return Err(EngineError::Config(format!(
                "kind {kind:?} is registered twice"
            )));
        }
        config.validate(kind)?;
        self.kinds.insert(
            kind.to_owned(),
            Registered {
                config,
                handler: Arc::new(handler),
            },
        );
        Ok(())
    }

    /// The kind's settings and handler, if it is registered.
    pub fn get(&self, kind: &str) -> Option<&Registered> {
        self.kinds.get(kind)
    }

    /// Whether `kind` is registered.
    pub fn contains(&self, kind: &str) -> bool {
        self.kinds.contains_key(kind)
    }

    /// The names of the registered kinds, in no particular order.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.kinds.keys().map(String::as_str)
    }

    /// The payload checks of every kind (`None` where a kind has none).
    pub fn payload_checks(&self) -> HashMap<String, Option<PayloadCheck>> {
        self.kinds
            .iter()
            .map(|(kind, registered)| (kind.clone(), registered.config.payload_check.clone()))
            .collect()
    }

    /// Per-kind leases of the durable kinds.
    pub fn leases(&self) -> HashMap<String, Duration> {
        self.kinds
            .iter()
            .filter_map(|(kind, registered)| {
                registered.config.lease().map(|lease| (kind.clone(), lease))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn noop(_ctx: RunContext) -> Outcome {
        Outcome::done()
    }

    #[test]
    fn a_lease_or_timeout_under_a_millisecond_is_refused() {
        let mut registry = Registry::new();
        let err = registry
            .register(
                "tiny-lease",
                KindConfig::durable(Duration::from_micros(500), Duration::from_secs(1)),
                noop,
            )
            .expect_err("a 0.5 ms lease is a units typo");
        assert!(err.to_string().contains("under 1 ms"), "{err}");
        let err = registry
            .register(
                "tiny-timeout",
                KindConfig::fire_and_forget(Duration::ZERO),
                noop,
            )
            .expect_err("a zero timeout is refused");
        assert!(err.to_string().contains("timeout"), "{err}");
        assert!(
            !registry.contains("tiny-lease"),
            "a refused kind is not registered"
        );
    }

    #[test]
    fn a_kind_cannot_be_registered_twice() {
        let mut registry = Registry::new();
        registry
            .register(
                "a",
                KindConfig::fire_and_forget(Duration::from_secs(1)),
                noop,
            )
            .expect("first registration");
        assert!(
            registry
                .register(
                    "a",
                    KindConfig::fire_and_forget(Duration::from_secs(1)),
                    noop
                )
                .is_err(),
            "second registration of the same kind is refused"
        );
    }

    #[test]
    fn the_first_stop_reason_sticks() {
        let signal = StopSignal::new();
        assert_eq!(signal.reason(), None, "not stopped yet");
        signal.stop(StopReason::Cancel);
        signal.stop(StopReason::LeaseLost);
        assert!(signal.is_stopped());
        assert_eq!(
            signal.reason(),
            Some(StopReason::Cancel),
            "first reason wins"
        );
    }
}
