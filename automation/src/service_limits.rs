//! Per-(tenant, service) limits on connector calls: a cap on concurrent calls and a
//! circuit breaker. Both live in the database (the [`ServiceLimits`] port), so they hold
//! across every process sharing it; [`LimitedConnector`] wraps any [`Connector`] with
//! them. A call that meets a full cap or an open circuit is not made: the connector
//! answers "not now, try after" ([`ConnectorFailure::not_now`]) and the executor snoozes
//! the run, which spends no attempt and leaves the cursor on the step.
//!
//! # The breaker
//!
//! ```text
//!            retryable failure (count < N)        success / non-probe result
//!              ┌──────────┐                          ┌──────────┐
//!              ▼          │                          ▼          │
//!          ┌────────┐─────┘  N-th consecutive    ┌────────┐─────┘
//!   ──────▶│ closed │───── retryable failure ───▶│  open  │ (calls snoozed until
//!          └────────┘                            └────────┘  retry_at = opened_at
//!              ▲                                   ▲    │     + cool-down)
//!              │ probe succeeds                    │    │ an acquire at or after retry_at:
//!              │                   probe fails     │    │ this caller is the one probe
//!          ┌───────────┐───── (retryable) ─────────┘    │
//!          │ half_open │◀───────────────────────────────┘
//!          └───────────┘  (while the probe is in flight, other calls are snoozed;
//!                          a probe ending in a fatal error lets the next call probe)
//! ```
//!
//! Decisions:
//! - Only a **retryable** failure (the [`crate::retry`] table: connection errors, 5xx,
//!   429, …) counts toward opening. A fatal one (a 4xx, bad input, a refused address) is
//!   the caller's fault, not the service's: it neither counts nor resets the run.
//! - Results of calls admitted before the breaker opened, arriving while it is open or
//!   half-open, change nothing: only the probe decides.
//! - The cap is kept as **leases**, a row per in-flight call with an expiry, not as a
//!   counter: a process that crashes mid-call cannot decrement a counter, but its rows
//!   expire ([`LimitRules::slot_lease`]) and the slots free themselves. A probe whose
//!   slot expired is forgotten, so the next call probes.
//! - Time is the store's clock (moved by tests), like every other port.
//! - A call without a `service` is limited under its op's name (`http/request`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_desk::{DeskError, TenantId};

use crate::connector::{Connector, ConnectorCall, ConnectorFailure, ConnectorReply};
use crate::retry::Cause;
use crate::store::StoreResult;

/// Default cap on concurrent calls per (tenant, service) (`FRONTA_SERVICE_MAX_CONCURRENT`).
pub const DEFAULT_MAX_CONCURRENT: u32 = 8;
/// Default run of consecutive retryable failures that opens a breaker (`FRONTA_BREAKER_FAILURES`).
pub const DEFAULT_BREAKER_FAILURES: u32 = 5;
/// Default cool-down of an open breaker (`FRONTA_BREAKER_COOLDOWN`).
pub const DEFAULT_BREAKER_COOLDOWN: Duration = Duration::from_secs(30);
/// Default lease of one in-flight slot (`FRONTA_SERVICE_SLOT_LEASE`): longer than any
/// connector call may take, so only a crashed process's slot ever expires.
pub const DEFAULT_SLOT_LEASE: Duration = Duration::from_secs(600);
/// Default snooze of a run that met a full cap or a busy probe (`FRONTA_SERVICE_FULL_DELAY`).
pub const DEFAULT_FULL_DELAY: Duration = Duration::from_secs(2);
/// Default upper bound of the random jitter added to every limit snooze
/// (`FRONTA_SERVICE_JITTER`), so snoozed runs do not come back all at once.
pub const DEFAULT_JITTER: Duration = Duration::from_secs(1);

/// A breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub const ALL: [BreakerState; 3] = [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
    ];

    /// The stored and answered spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == text)
    }

    /// A stored state read back; a spelling no version wrote is `Internal`.
    pub fn from_column(text: &str) -> StoreResult<Self> {
        Self::parse(text)
            .ok_or_else(|| DeskError::Internal(format!("unknown breaker state {text:?}")))
    }
}

/// One (tenant, service)'s breaker as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breaker {
    pub state: BreakerState,
    /// Consecutive retryable failures while closed.
    pub failures: u32,
    pub opened_at: Option<DateTime<Utc>>,
    /// When an open breaker lets a probe through.
    pub retry_at: Option<DateTime<Utc>>,
}

impl Default for Breaker {
    fn default() -> Self {
        Self {
            state: BreakerState::Closed,
            failures: 0,
            opened_at: None,
            retry_at: None,
        }
    }
}

/// The limits a store applies (the configurable numbers; see the `DEFAULT_*` constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitRules {
    pub max_concurrent: u32,
    pub breaker_failures: u32,
    pub cooldown: Duration,
    pub slot_lease: Duration,
}

impl Default for LimitRules {
    fn default() -> Self {
        Self {
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            breaker_failures: DEFAULT_BREAKER_FAILURES,
            cooldown: DEFAULT_BREAKER_COOLDOWN,
            slot_lease: DEFAULT_SLOT_LEASE,
        }
    }
}

/// How a call ended, as the breaker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallResult {
    Success,
    /// A retryable failure: counts toward opening.
    RetryableFailure,
    /// A fatal failure (the caller's fault): counts neither way.
    FatalFailure,
}

impl CallResult {
    pub fn of(answer: &Result<ConnectorReply, ConnectorFailure>) -> Self {
        match answer {
            Ok(_) => CallResult::Success,
            Err(failure) if failure.cause.retryable() => CallResult::RetryableFailure,
            Err(_) => CallResult::FatalFailure,
        }
    }
}

/// What the breaker answers an acquirer (before the cap is looked at).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Go ahead; `probe` when this call decides a half-open breaker.
    Pass { probe: bool },
    /// Open and cooling down until this instant.
    Open { retry_at: DateTime<Utc> },
    /// Half-open with its probe in flight.
    ProbeBusy,
}

/// The breaker at an acquire: the gate and the breaker to store if the call goes ahead
/// (an open breaker whose cool-down is over turns half-open, this call its probe).
pub fn gate(breaker: &Breaker, probe_in_flight: bool, now: DateTime<Utc>) -> (Gate, Breaker) {
    match breaker.state {
        BreakerState::Closed => (Gate::Pass { probe: false }, breaker.clone()),
        BreakerState::Open => match breaker.retry_at {
            Some(retry_at) if now < retry_at => (Gate::Open { retry_at }, breaker.clone()),
            _ => (
                Gate::Pass { probe: true },
                Breaker {
                    state: BreakerState::HalfOpen,
                    ..breaker.clone()
                },
            ),
        },
        BreakerState::HalfOpen if probe_in_flight => (Gate::ProbeBusy, breaker.clone()),
        BreakerState::HalfOpen => (Gate::Pass { probe: true }, breaker.clone()),
    }
}

/// The breaker after a call ended (`probe`: this call was the half-open breaker's probe).
pub fn record(
    breaker: &Breaker,
    result: CallResult,
    probe: bool,
    rules: &LimitRules,
    now: DateTime<Utc>,
) -> Breaker {
    let open = || Breaker {
        state: BreakerState::Open,
        failures: breaker.failures,
        opened_at: Some(now),
        retry_at: Some(fronta_engine::clock::add(now, rules.cooldown)),
    };
    match (breaker.state, result) {
        (BreakerState::Closed, CallResult::Success) => Breaker::default(),
        (BreakerState::Closed, CallResult::RetryableFailure) => {
            let failures = breaker.failures.saturating_add(1);
            if failures >= rules.breaker_failures.max(1) {
                Breaker { failures, ..open() }
            } else {
                Breaker {
                    failures,
                    ..breaker.clone()
                }
            }
        }
        (BreakerState::HalfOpen, CallResult::Success) if probe => Breaker::default(),
        (BreakerState::HalfOpen, CallResult::RetryableFailure) if probe => open(),
        _ => breaker.clone(),
    }
}

/// What a store read for one acquire, inside its transaction (with the (tenant,
/// service)'s breaker locked or the writer held), after forgetting expired slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireRead {
    /// The stored breaker (a missing row is [`Breaker::default`], closed).
    pub breaker: Breaker,
    /// The stored probe's slot is still live.
    pub probe_in_flight: bool,
    /// Live slots of the (tenant, service).
    pub in_flight: u64,
}

/// What an acquire writes and answers, planned by [`plan_acquire`]; `I` is the store's
/// slot id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquirePlan<I> {
    /// The slot to insert and the breaker to store with it; `None`: nothing more to
    /// write (`Open`, `ProbeBusy` or `Full`).
    pub slot: Option<NewSlot<I>>,
    pub answer: Admission,
}

/// An admitted call's slot row and the breaker stored with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSlot<I> {
    pub id: I,
    pub lease_until: DateTime<Utc>,
    pub breaker: Breaker,
    /// The breaker's probe: this slot when the call probes.
    pub probe_slot: Option<I>,
}

/// One acquire (see [`ServiceLimits`]' contract): the breaker's [`gate`] first, then the
/// cap; a call that passes both gets a new slot (`id` makes its id) leased for
/// `rules.slot_lease` from `now`, recorded as the probe when the gate says it probes.
pub fn plan_acquire<I: Clone + ToString>(
    read: &AcquireRead,
    rules: &LimitRules,
    now: DateTime<Utc>,
    id: impl FnOnce() -> I,
) -> AcquirePlan<I> {
    let refuse = |answer| AcquirePlan { slot: None, answer };
    let (probe, breaker) = match gate(&read.breaker, read.probe_in_flight, now) {
        (Gate::Open { retry_at }, _) => return refuse(Admission::Open { retry_at }),
        (Gate::ProbeBusy, _) => return refuse(Admission::ProbeBusy),
        (Gate::Pass { probe }, next) => (probe, next),
    };
    if read.in_flight >= u64::from(rules.max_concurrent) {
        return refuse(Admission::Full);
    }
    let id = id();
    AcquirePlan {
        answer: Admission::Admitted(Slot {
            id: id.to_string(),
            probe,
        }),
        slot: Some(NewSlot {
            lease_until: fronta_engine::clock::add(now, rules.slot_lease),
            breaker,
            probe_slot: probe.then(|| id.clone()),
            id,
        }),
    }
}

/// What a release writes, planned by [`plan_release`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasePlan<I> {
    /// The breaker to store.
    pub breaker: Breaker,
    /// The probe to store with it: cleared when the released slot was it.
    pub probe_slot: Option<I>,
    pub answer: Released,
}

/// One release of `slot` (already deleted, or gone with its lease): [`record`] with
/// `probe` true only when `slot` is the stored probe (`probe_slot`), which it clears.
pub fn plan_release<I: PartialEq>(
    before: Breaker,
    probe_slot: Option<I>,
    slot: &I,
    result: CallResult,
    rules: &LimitRules,
    now: DateTime<Utc>,
) -> ReleasePlan<I> {
    let is_probe = probe_slot.as_ref() == Some(slot);
    let after = record(&before, result, is_probe, rules, now);
    ReleasePlan {
        breaker: after.clone(),
        probe_slot: if is_probe { None } else { probe_slot },
        answer: Released { before, after },
    }
}

/// An admitted call's slot; hand it back to [`ServiceLimits::service_release`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub id: String,
    /// This call is the half-open breaker's probe.
    pub probe: bool,
}

/// What an acquire answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Admitted(Slot),
    /// `max_concurrent` calls are in flight.
    Full,
    /// The breaker is open until `retry_at`.
    Open {
        retry_at: DateTime<Utc>,
    },
    /// The breaker is half-open and its probe is in flight.
    ProbeBusy,
}

/// A release's effect on the breaker (for the log line of a transition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub before: Breaker,
    pub after: Breaker,
}

/// One service of a tenant, as `GET /api/services` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStatus {
    pub service: String,
    pub breaker: Breaker,
    /// Calls in flight now (unexpired slots).
    pub in_flight: u32,
}

/// Totals over every tenant, for `/metrics` (no per-tenant series).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceTotals {
    /// Breakers by state (every state present, zero when none).
    pub breakers: Vec<(BreakerState, u64)>,
    /// Calls in flight now, every tenant and service.
    pub in_flight: u64,
}

impl ServiceTotals {
    /// The totals from the stored breakers counted by state (a state no breaker is in
    /// counts zero; every state is present, in [`BreakerState::ALL`] order) and the live
    /// slots.
    pub fn from_counts(
        counts: impl IntoIterator<Item = (BreakerState, u64)>,
        in_flight: u64,
    ) -> Self {
        let mut breakers: Vec<(BreakerState, u64)> =
            BreakerState::ALL.iter().map(|state| (*state, 0)).collect();
        for (state, count) in counts {
            if let Some(entry) = breakers.iter_mut().find(|(s, _)| *s == state) {
                entry.1 += count;
            }
        }
        Self {
            breakers,
            in_flight,
        }
    }
}

/// Per-(tenant, service) concurrency slots and breakers, shared by every process on one
/// database.
///
/// # Contract
///
/// - `service_acquire` is atomic per (tenant, service): it first forgets slots whose
///   lease has expired (and a probe whose slot is gone), then asks [`gate`] with the
///   stored breaker (a missing row is a closed breaker), then counts the live slots.
///   `Gate::Open`/`Gate::ProbeBusy` answer `Open`/`ProbeBusy`; `rules.max_concurrent`
///   live slots answer `Full`; otherwise it stores the gate's breaker, records the probe
///   when there is one, inserts a slot leased for `rules.slot_lease` from the store's
///   now and answers `Admitted`. Two acquirers racing for the last slot: exactly one is
///   admitted, in one process or across processes.
/// - `service_release` deletes the slot (already gone after its lease expired: not an
///   error), applies [`record`] with `probe` true only when the slot is the stored probe,
///   clears the probe, stores the breaker and answers it before and after.
/// - Tenants are isolated: one tenant's slots and breakers never limit, or show to,
///   another; `service_list` answers the tenant's services by name, with breaker state
///   as stored and in-flight counts of live slots.
/// - `service_totals` counts breakers by state and live slots over every tenant.
/// - Storage errors are `DeskError::Unavailable`; nothing is half written.
#[async_trait]
pub trait ServiceLimits: Send + Sync + 'static {
    async fn service_acquire(
        &self,
        tenant: TenantId,
        service: &str,
        rules: &LimitRules,
    ) -> StoreResult<Admission>;

    async fn service_release(
        &self,
        tenant: TenantId,
        service: &str,
        slot: &Slot,
        result: CallResult,
        rules: &LimitRules,
    ) -> StoreResult<Released>;

    async fn service_list(&self, tenant: TenantId) -> StoreResult<Vec<ServiceStatus>>;

    async fn service_totals(&self) -> StoreResult<ServiceTotals>;
}

/// The wrapper's configuration: the store's rules and the snooze delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitsConfig {
    pub rules: LimitRules,
    /// Snooze of a run that met a full cap or a busy probe.
    pub full_delay: Duration,
    /// Upper bound of the random jitter added to every limit snooze.
    pub jitter: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            rules: LimitRules::default(),
            full_delay: DEFAULT_FULL_DELAY,
            jitter: DEFAULT_JITTER,
        }
    }
}

/// A [`Connector`] behind per-(tenant, service) limits: acquire a slot (which checks the
/// breaker), call, record the result, release. A full cap, an open breaker or a busy
/// probe answers [`ConnectorFailure::not_now`]; a store that does not answer the acquire
/// is a retryable [`Cause::StorageUnavailable`]; a release that fails is logged and the
/// call's answer stands (the slot frees itself when its lease expires, as it does when
/// the run is stopped mid-call and this future is dropped).
pub struct LimitedConnector {
    inner: Arc<dyn Connector>,
    limits: Arc<dyn ServiceLimits>,
    config: LimitsConfig,
    /// The store's clock: an open breaker's snooze lasts until its `retry_at` by it.
    clock: Arc<dyn fronta_engine::Clock>,
}

impl LimitedConnector {
    pub fn new(
        inner: Arc<dyn Connector>,
        limits: Arc<dyn ServiceLimits>,
        config: LimitsConfig,
        clock: Arc<dyn fronta_engine::Clock>,
    ) -> Self {
        Self {
            inner,
            limits,
            config,
            clock,
        }
    }

    fn jitter(&self) -> Duration {
        let bound = u64::try_from(self.config.jitter.as_millis()).unwrap_or(u64::MAX);
        if bound == 0 {
            return Duration::ZERO;
        }
        // Spreads snoozes apart, nothing more: without randomness there is no jitter.
        let random = getrandom::u64().unwrap_or(0);
        Duration::from_millis(random % bound)
    }
}

#[async_trait]
impl Connector for LimitedConnector {
    async fn call(&self, call: ConnectorCall<'_>) -> Result<ConnectorReply, ConnectorFailure> {
        let tenant = call.tenant;
        let service = call
            .service
            .map(str::to_owned)
            .unwrap_or_else(|| call.op.as_str().to_owned());
        let rules = self.config.rules;
        let admission = self
            .limits
            .service_acquire(tenant, &service, &rules)
            .await
            .map_err(|err| {
                tracing::warn!(%tenant, service, error = %err, "service limits: the store did not answer the acquire");
                ConnectorFailure::new(
                    Cause::StorageUnavailable,
                    format!("service {service:?}: limits could not be read: {err}"),
                )
            })?;
        let slot = match admission {
            Admission::Admitted(slot) => slot,
            Admission::Full => {
                let wait = self.config.full_delay + self.jitter();
                tracing::info!(%tenant, service, run = call.run_id, max = rules.max_concurrent, ?wait, "service limits: cap full, run snoozed");
                return Err(ConnectorFailure::not_now(
                    wait,
                    format!(
                        "service {service:?} is at its cap of {} calls in flight: waiting",
                        rules.max_concurrent
                    ),
                ));
            }
            Admission::ProbeBusy => {
                let wait = self.config.full_delay + self.jitter();
                tracing::info!(%tenant, service, run = call.run_id, ?wait, "service limits: breaker half-open with its probe in flight, run snoozed");
                return Err(ConnectorFailure::not_now(
                    wait,
                    format!("service {service:?} is being probed after an outage: waiting"),
                ));
            }
            Admission::Open { retry_at } => {
                let left = (retry_at - self.clock.now()).to_std().unwrap_or_default();
                let wait = left + self.jitter();
                tracing::info!(%tenant, service, run = call.run_id, %retry_at, ?wait, "service limits: breaker open, run snoozed");
                return Err(ConnectorFailure::not_now(
                    wait,
                    format!(
                        "service {service:?} is failing (circuit open until {retry_at}): waiting"
                    ),
                ));
            }
        };
        if slot.probe {
            tracing::info!(%tenant, service, run = call.run_id, "service limits: breaker half-open, this call probes");
        }
        let answer = self.inner.call(call).await;
        let result = CallResult::of(&answer);
        match self
            .limits
            .service_release(tenant, &service, &slot, result, &rules)
            .await
        {
            Ok(Released { before, after }) if before.state != after.state => {
                tracing::warn!(%tenant, service, from = before.state.as_str(), to = after.state.as_str(), failures = after.failures, retry_at = ?after.retry_at, "service limits: breaker changed state");
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%tenant, service, error = %err, "service limits: the result could not be recorded; the slot frees itself when its lease expires");
            }
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).expect("a valid instant")
    }

    fn rules() -> LimitRules {
        LimitRules {
            breaker_failures: 3,
            cooldown: Duration::from_secs(30),
            ..LimitRules::default()
        }
    }

    #[test]
    fn closed_counts_retryable_failures_and_opens_on_the_nth() {
        let mut breaker = Breaker::default();
        for n in 1..3 {
            breaker = record(
                &breaker,
                CallResult::RetryableFailure,
                false,
                &rules(),
                at(n),
            );
            assert_eq!(breaker.state, BreakerState::Closed);
            assert_eq!(breaker.failures, n as u32);
        }
        let opened = record(
            &breaker,
            CallResult::RetryableFailure,
            false,
            &rules(),
            at(5),
        );
        assert_eq!(opened.state, BreakerState::Open);
        assert_eq!(opened.opened_at, Some(at(5)));
        assert_eq!(opened.retry_at, Some(at(35)));
    }

    #[test]
    fn success_resets_the_run_and_fatal_failures_count_neither_way() {
        let two = Breaker {
            failures: 2,
            ..Breaker::default()
        };
        assert_eq!(
            record(&two, CallResult::FatalFailure, false, &rules(), at(1)),
            two
        );
        assert_eq!(
            record(&two, CallResult::Success, false, &rules(), at(1)),
            Breaker::default()
        );
    }

    #[test]
    fn open_snoozes_until_retry_at_then_lets_exactly_one_probe_through() {
        let open = record(
            &Breaker {
                failures: 2,
                ..Breaker::default()
            },
            CallResult::RetryableFailure,
            false,
            &rules(),
            at(0),
        );
        assert_eq!(
            gate(&open, false, at(29)).0,
            Gate::Open { retry_at: at(30) }
        );
        let (passed, half) = gate(&open, false, at(30));
        assert_eq!(passed, Gate::Pass { probe: true });
        assert_eq!(half.state, BreakerState::HalfOpen);
        assert_eq!(gate(&half, true, at(31)).0, Gate::ProbeBusy);
        assert_eq!(gate(&half, false, at(31)).0, Gate::Pass { probe: true });
        assert_eq!(
            gate(&Breaker::default(), false, at(0)).0,
            Gate::Pass { probe: false }
        );
    }

    #[test]
    fn probe_success_closes_and_probe_failure_reopens_for_a_new_cool_down() {
        let half = Breaker {
            state: BreakerState::HalfOpen,
            failures: 3,
            opened_at: Some(at(0)),
            retry_at: Some(at(30)),
        };
        assert_eq!(
            record(&half, CallResult::Success, true, &rules(), at(40)),
            Breaker::default()
        );
        let reopened = record(&half, CallResult::RetryableFailure, true, &rules(), at(40));
        assert_eq!(reopened.state, BreakerState::Open);
        assert_eq!(reopened.opened_at, Some(at(40)));
        assert_eq!(reopened.retry_at, Some(at(70)));
        // A fatal probe tells nothing about the service: still half-open.
        assert_eq!(
            record(&half, CallResult::FatalFailure, true, &rules(), at(40)),
            half
        );
    }

    #[test]
    fn late_results_of_calls_that_are_not_the_probe_change_nothing() {
        let open = Breaker {
            state: BreakerState::Open,
            failures: 3,
            opened_at: Some(at(0)),
            retry_at: Some(at(30)),
        };
        let half = Breaker {
            state: BreakerState::HalfOpen,
            ..open.clone()
        };
        for result in [
            CallResult::Success,
            CallResult::RetryableFailure,
            CallResult::FatalFailure,
        ] {
            assert_eq!(record(&open, result, false, &rules(), at(5)), open);
            assert_eq!(record(&half, result, false, &rules(), at(35)), half);
        }
    }

    #[test]
    fn states_spell_and_parse_back() {
        for state in BreakerState::ALL {
            assert_eq!(BreakerState::parse(state.as_str()), Some(state));
        }
        assert_eq!(BreakerState::parse("ajar"), None);
    }

    fn read(breaker: Breaker, probe_in_flight: bool, in_flight: u64) -> AcquireRead {
        AcquireRead {
            breaker,
            probe_in_flight,
            in_flight,
        }
    }

    fn refused(answer: Admission) -> AcquirePlan<u32> {
        AcquirePlan { slot: None, answer }
    }

    fn open_until(seconds: i64) -> Breaker {
        Breaker {
            state: BreakerState::Open,
            failures: 3,
            opened_at: Some(at(seconds - 30)),
            retry_at: Some(at(seconds)),
        }
    }

    #[test]
    fn an_acquire_asks_the_breaker_before_the_cap() {
        let rules = LimitRules {
            max_concurrent: 2,
            ..rules()
        };
        let never = || -> u32 { panic!("no slot for a refused acquire") };
        assert_eq!(
            plan_acquire(&read(open_until(30), false, 0), &rules, at(10), never),
            refused(Admission::Open { retry_at: at(30) }),
            "open and cooling down, whatever the cap"
        );
        let half = Breaker {
            state: BreakerState::HalfOpen,
            ..open_until(30)
        };
        assert_eq!(
            plan_acquire(&read(half, true, 0), &rules, at(40), never),
            refused(Admission::ProbeBusy),
            "the probe is in flight"
        );
        assert_eq!(
            plan_acquire(&read(Breaker::default(), false, 2), &rules, at(0), never),
            refused(Admission::Full),
            "two live slots of two"
        );
    }

    #[test]
    fn an_admitted_call_gets_a_leased_slot_and_a_probe_is_recorded() {
        let plan = plan_acquire(&read(Breaker::default(), false, 1), &rules(), at(0), || 7);
        assert_eq!(
            plan,
            AcquirePlan {
                slot: Some(NewSlot {
                    id: 7,
                    lease_until: at(600),
                    breaker: Breaker::default(),
                    probe_slot: None,
                }),
                answer: Admission::Admitted(Slot {
                    id: "7".into(),
                    probe: false
                }),
            },
            "a closed breaker: a plain slot, leased for slot_lease"
        );
        let AcquirePlan {
            slot:
                Some(NewSlot {
                    breaker,
                    probe_slot,
                    ..
                }),
            answer,
        } = plan_acquire(&read(open_until(30), false, 0), &rules(), at(30), || 8)
        else {
            panic!("the cool-down is over: one probe passes")
        };
        assert_eq!(breaker.state, BreakerState::HalfOpen, "half-open now");
        assert_eq!(probe_slot, Some(8), "this slot is the probe");
        assert_eq!(
            answer,
            Admission::Admitted(Slot {
                id: "8".into(),
                probe: true
            }),
            "the caller knows it probes"
        );
    }

    #[test]
    fn a_release_counts_as_the_probe_only_for_the_probes_slot_and_clears_it() {
        let half = Breaker {
            state: BreakerState::HalfOpen,
            ..open_until(30)
        };
        let probe = plan_release(
            half.clone(),
            Some(8),
            &8,
            CallResult::Success,
            &rules(),
            at(40),
        );
        assert_eq!(probe.breaker, Breaker::default(), "the probe closed it");
        assert_eq!(probe.probe_slot, None, "the probe is cleared");
        assert_eq!(
            probe.answer,
            Released {
                before: half.clone(),
                after: Breaker::default()
            },
            "before and after, for the log line"
        );
        let other = plan_release(
            half.clone(),
            Some(8),
            &9,
            CallResult::Success,
            &rules(),
            at(40),
        );
        assert_eq!(other.breaker, half, "a late call changes nothing");
        assert_eq!(other.probe_slot, Some(8), "the probe stays recorded");
    }

    #[test]
    fn totals_name_every_state_and_stored_states_read_back() {
        let totals = ServiceTotals::from_counts([(BreakerState::Open, 2)], 5);
        assert_eq!(
            totals,
            ServiceTotals {
                breakers: vec![
                    (BreakerState::Closed, 0),
                    (BreakerState::Open, 2),
                    (BreakerState::HalfOpen, 0)
                ],
                in_flight: 5
            },
            "every state present, zero when none"
        );
        assert_eq!(
            BreakerState::from_column("half_open"),
            Ok(BreakerState::HalfOpen),
            "a stored spelling"
        );
        assert_eq!(
            BreakerState::from_column("ajar"),
            Err(DeskError::Internal("unknown breaker state \"ajar\"".into())),
            "an unknown one"
        );
    }
}
