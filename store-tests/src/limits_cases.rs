//! Service limits cases: the `ServiceLimits` port called directly, pinning its
//! `# Contract` (see `fronta_automation::service_limits`) — the cap (up to `max_concurrent`
//! slots, freed by a release or by the lease's expiry, exactly one of two racing
//! acquirers for the last slot), the breaker's path through the store (a run of
//! retryable failures opens it, an open one answers `Open` until `retry_at`, then one
//! probe passes while the others are `ProbeBusy`, the probe's result closes or re-opens
//! it; fatal failures count neither way), tenant isolation and the totals. They run in
//! the automation suite. Time is the store's [`ManualClock`], moved, never slept.

use std::sync::Arc;
use std::time::Duration;

use fronta_automation::service_limits::{
    Admission, BreakerState, CallResult, LimitRules, ServiceLimits, Slot,
};
use fronta_desk::{DeskStore, TenantId};
use fronta_engine::ManualClock;

use crate::AutomationStoreFactory;

fn rules(max: u32) -> LimitRules {
    LimitRules {
        max_concurrent: max,
        breaker_failures: 3,
        cooldown: Duration::from_secs(30),
        slot_lease: Duration::from_secs(60),
    }
}

async fn open(
    factory: &dyn AutomationStoreFactory,
) -> (
    Arc<dyn ServiceLimits>,
    Arc<dyn DeskStore>,
    ManualClock,
    TenantId,
) {
    let clock = ManualClock::new(chrono::Utc::now());
    let (limits, desk) = factory.open_limits(clock.clone()).await;
    let (tenant, _) = desk.tenant_create("Acme").await.expect("tenant");
    (limits, desk, clock, tenant.id)
}

async fn admitted(
    limits: &dyn ServiceLimits,
    tenant: TenantId,
    service: &str,
    rules: &LimitRules,
) -> Slot {
    match limits
        .service_acquire(tenant, service, rules)
        .await
        .expect("acquire answers")
    {
        Admission::Admitted(slot) => slot,
        other => panic!("expected a slot for {service:?}, got {other:?}"),
    }
}

async fn acquire(
    limits: &dyn ServiceLimits,
    tenant: TenantId,
    service: &str,
    rules: &LimitRules,
) -> Admission {
    limits
        .service_acquire(tenant, service, rules)
        .await
        .expect("acquire answers")
}

async fn release(
    limits: &dyn ServiceLimits,
    tenant: TenantId,
    service: &str,
    slot: &Slot,
    result: CallResult,
    rules: &LimitRules,
) -> BreakerState {
    limits
        .service_release(tenant, service, slot, result, rules)
        .await
        .expect("release answers")
        .after
        .state
}

async fn in_flight(limits: &dyn ServiceLimits, tenant: TenantId, service: &str) -> u32 {
    limits
        .service_list(tenant)
        .await
        .expect("list")
        .into_iter()
        .find(|status| status.service == service)
        .map_or(0, |status| status.in_flight)
}

pub async fn limits_cap_admits_up_to_the_limit_and_a_release_frees_a_slot(
    factory: &dyn AutomationStoreFactory,
) {
    let (limits, _desk, _clock, acme) = open(factory).await;
    let rules = rules(2);
    let first = admitted(limits.as_ref(), acme, "shop", &rules).await;
    let _second = admitted(limits.as_ref(), acme, "shop", &rules).await;
    assert_eq!(in_flight(limits.as_ref(), acme, "shop").await, 2);
    assert_eq!(
        acquire(limits.as_ref(), acme, "shop", &rules).await,
        Admission::Full,
        "the third call meets the cap"
    );
    admitted(limits.as_ref(), acme, "crm", &rules).await;
    release(
        limits.as_ref(),
        acme,
        "shop",
        &first,
        CallResult::Success,
        &rules,
    )
    .await;
    assert_eq!(in_flight(limits.as_ref(), acme, "shop").await, 1);
    admitted(limits.as_ref(), acme, "shop", &rules).await;
}

pub async fn limits_two_concurrent_acquirers_for_the_last_slot_admit_exactly_one(
    factory: &dyn AutomationStoreFactory,
) {
    let (limits, _desk, _clock, acme) = open(factory).await;
    let rules = rules(1);
    for round in 0..5 {
        let (a, b) = tokio::join!(
            {
                let limits = limits.clone();
                async move { acquire(limits.as_ref(), acme, "shop", &rules).await }
            },
            {
                let limits = limits.clone();
                async move { acquire(limits.as_ref(), acme, "shop", &rules).await }
            }
        );
        let slots: Vec<Slot> = [a, b]
            .into_iter()
            .filter_map(|admission| match admission {
                Admission::Admitted(slot) => Some(slot),
                Admission::Full => None,
                other => panic!("round {round}: unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            slots.len(),
            1,
            "round {round}: exactly one racer gets the slot"
        );
        release(
            limits.as_ref(),
            acme,
            "shop",
            &slots[0],
            CallResult::Success,
            &rules,
        )
        .await;
    }
}

pub async fn limits_expired_slot_frees_itself(factory: &dyn AutomationStoreFactory) {
    let (limits, _desk, clock, acme) = open(factory).await;
    let rules = rules(1);
    let crashed = admitted(limits.as_ref(), acme, "shop", &rules).await;
    assert_eq!(
        acquire(limits.as_ref(), acme, "shop", &rules).await,
        Admission::Full
    );
    clock.advance(rules.slot_lease + Duration::from_millis(1));
    assert_eq!(
        in_flight(limits.as_ref(), acme, "shop").await,
        0,
        "an expired slot is not in flight"
    );
    let fresh = admitted(limits.as_ref(), acme, "shop", &rules).await;
    // The crashed call's late release is no error and frees nothing else.
    release(
        limits.as_ref(),
        acme,
        "shop",
        &crashed,
        CallResult::Success,
        &rules,
    )
    .await;
    assert_eq!(in_flight(limits.as_ref(), acme, "shop").await, 1);
    release(
        limits.as_ref(),
        acme,
        "shop",
        &fresh,
        CallResult::Success,
        &rules,
    )
    .await;
}

pub async fn limits_breaker_opens_snoozes_probes_once_and_closes(
    factory: &dyn AutomationStoreFactory,
) {
    let (limits, _desk, clock, acme) = open(factory).await;
    let rules = rules(4);
    for n in 1..=3 {
        let slot = admitted(limits.as_ref(), acme, "shop", &rules).await;
        let state = release(
            limits.as_ref(),
            acme,
            "shop",
            &slot,
            CallResult::RetryableFailure,
            &rules,
        )
        .await;
        let expected = if n < 3 {
            BreakerState::Closed
        } else {
            BreakerState::Open
        };
        assert_eq!(state, expected, "after {n} retryable failures");
    }
    let listed = limits.service_list(acme).await.expect("list");
    assert_eq!(listed.len(), 1);
    let retry_at = listed[0]
        .breaker
        .retry_at
        .expect("an open breaker has retry_at");
    assert_eq!(listed[0].breaker.state, BreakerState::Open);
    assert_eq!(listed[0].breaker.failures, 3);
    assert_eq!(
        acquire(limits.as_ref(), acme, "shop", &rules).await,
        Admission::Open { retry_at },
        "open during the cool-down"
    );
    clock.advance(rules.cooldown);
    let probe = admitted(limits.as_ref(), acme, "shop", &rules).await;
    assert!(probe.probe, "the first call after the cool-down probes");
    assert_eq!(
        acquire(limits.as_ref(), acme, "shop", &rules).await,
        Admission::ProbeBusy,
        "one probe at a time"
    );
    let state = release(
        limits.as_ref(),
        acme,
        "shop",
        &probe,
        CallResult::Success,
        &rules,
    )
    .await;
    assert_eq!(state, BreakerState::Closed, "a successful probe closes it");
    let next = admitted(limits.as_ref(), acme, "shop", &rules).await;
    assert!(!next.probe);
    let listed = limits.service_list(acme).await.expect("list");
    assert_eq!(
        (listed[0].breaker.state, listed[0].breaker.failures),
        (BreakerState::Closed, 0)
    );
}

pub async fn limits_failed_probe_reopens_and_fatal_failures_do_not_count(
    factory: &dyn AutomationStoreFactory,
) {
    let (limits, _desk, clock, acme) = open(factory).await;
    let rules = rules(4);
    for _ in 0..5 {
        let slot = admitted(limits.as_ref(), acme, "shop", &rules).await;
        let state = release(
            limits.as_ref(),
            acme,
            "shop",
            &slot,
            CallResult::FatalFailure,
            &rules,
        )
        .await;
        assert_eq!(state, BreakerState::Closed, "fatal failures never open it");
    }
    for _ in 0..3 {
        let slot = admitted(limits.as_ref(), acme, "shop", &rules).await;
        release(
            limits.as_ref(),
            acme,
            "shop",
            &slot,
            CallResult::RetryableFailure,
            &rules,
        )
        .await;
    }
    clock.advance(rules.cooldown);
    let probe = admitted(limits.as_ref(), acme, "shop", &rules).await;
    assert!(probe.probe);
    let state = release(
        limits.as_ref(),
        acme,
        "shop",
        &probe,
        CallResult::RetryableFailure,
        &rules,
    )
    .await;
    assert_eq!(state, BreakerState::Open, "a failed probe re-opens it");
    match acquire(limits.as_ref(), acme, "shop", &rules).await {
        Admission::Open { retry_at } => assert_eq!(
            retry_at,
            fronta_engine::clock::add(fronta_engine::Clock::now(&clock), rules.cooldown),
            "a new cool-down from the failed probe"
        ),
        other => panic!("expected open, got {other:?}"),
    }
    // A probe whose slot expired (its process crashed) is forgotten: the next call probes.
    clock.advance(rules.cooldown);
    let lost = admitted(limits.as_ref(), acme, "shop", &rules).await;
    assert!(lost.probe);
    clock.advance(rules.slot_lease + Duration::from_millis(1));
    let probe = admitted(limits.as_ref(), acme, "shop", &rules).await;
    assert!(probe.probe, "the lost probe's slot expired: a new probe");
}

pub async fn limits_are_isolated_per_tenant_and_totals_count_by_state(
    factory: &dyn AutomationStoreFactory,
) {
    let (limits, desk, _clock, acme) = open(factory).await;
    let (globex, _) = desk.tenant_create("Globex").await.expect("tenant");
    let globex = globex.id;
    let rules = rules(1);
    for _ in 0..3 {
        let slot = admitted(limits.as_ref(), acme, "shop", &rules).await;
        release(
            limits.as_ref(),
            acme,
            "shop",
            &slot,
            CallResult::RetryableFailure,
            &rules,
        )
        .await;
    }
    let _busy = admitted(limits.as_ref(), acme, "crm", &rules).await;
    assert!(matches!(
        acquire(limits.as_ref(), acme, "shop", &rules).await,
        Admission::Open { .. }
    ));
    // Another tenant's open breaker and full cap on the same names limit nothing here.
    let globex_shop = admitted(limits.as_ref(), globex, "shop", &rules).await;
    assert!(!globex_shop.probe);
    let _globex_crm = admitted(limits.as_ref(), globex, "crm", &rules).await;
    let names: Vec<(String, BreakerState, u32)> = limits
        .service_list(globex)
        .await
        .expect("list")
        .into_iter()
        .map(|status| (status.service, status.breaker.state, status.in_flight))
        .collect();
    assert_eq!(
        names,
        vec![
            ("crm".into(), BreakerState::Closed, 1),
            ("shop".into(), BreakerState::Closed, 1)
        ],
        "only globex's own services, by name"
    );
    let totals = limits.service_totals().await.expect("totals");
    assert_eq!(
        totals.breakers,
        vec![
            (BreakerState::Closed, 3),
            (BreakerState::Open, 1),
            (BreakerState::HalfOpen, 0)
        ]
    );
    assert_eq!(totals.in_flight, 3);
}
