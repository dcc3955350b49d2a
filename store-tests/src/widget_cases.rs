//! Dashboard widget cases: the `WidgetStore` port called directly, pinning its
//! `# Contract` (see `fronta_automation::widget`) — definitions created, listed, updated
//! (the cache kept or reset) and deleted, the per-tenant limit, the claim (fresh, busy,
//! claimed; forced), settling data, a failure and "not made", a lease taken over after it
//! expired (the late settle refused), exactly one of two racing claimers, and tenant
//! isolation. They run in the automation suite. Time is the store's [`ManualClock`],
//! moved, never slept.

use std::sync::Arc;
use std::time::Duration;

use fronta_automation::widget::{Claim, Fetched, WidgetDef, WidgetStore, WidgetView};
use fronta_desk::{DeskError, DeskStore, TenantId};
use fronta_engine::{Clock, ManualClock};
use serde_json::json;
use uuid::Uuid;

use crate::AutomationStoreFactory;

const LEASE: Duration = Duration::from_secs(60);

fn def(name: &str, ttl_sec: u64) -> WidgetDef {
    serde_json::from_value(json!({
        "name": name, "op": "http/request", "service": "billing",
        "input": {"url": "https://billing.test/count",
                  "headers": {"Authorization": "Bearer {{secrets.billing}}"}},
        "path": "body.count", "ttlSec": ttl_sec
    }))
    .expect("a widget definition")
}

async fn open(
    factory: &dyn AutomationStoreFactory,
) -> (
    Arc<dyn WidgetStore>,
    Arc<dyn DeskStore>,
    ManualClock,
    TenantId,
) {
    let clock = ManualClock::new(chrono::Utc::now());
    let (widgets, desk) = factory.open_widgets(clock.clone()).await;
    let (tenant, _) = desk.tenant_create("Acme").await.expect("tenant");
    (widgets, desk, clock, tenant.id)
}

async fn claim(store: &dyn WidgetStore, tenant: TenantId, id: Uuid, force: bool) -> Claim {
    store
        .widget_claim(tenant, id, force, LEASE)
        .await
        .expect("claim answers")
}

async fn claimed(store: &dyn WidgetStore, tenant: TenantId, id: Uuid, force: bool) -> String {
    match claim(store, tenant, id, force).await {
        Claim::Claimed { token, view } => {
            assert!(view.refreshing, "the claimer's view shows its own lease");
            token
        }
        other => panic!("expected the lease, got {other:?}"),
    }
}

async fn settle(
    store: &dyn WidgetStore,
    tenant: TenantId,
    id: Uuid,
    token: &str,
    outcome: Fetched,
) -> Option<WidgetView> {
    store
        .widget_settle(tenant, id, token, outcome)
        .await
        .expect("settle answers")
}

pub async fn widgets_are_created_listed_updated_and_deleted(factory: &dyn AutomationStoreFactory) {
    let (store, _desk, clock, acme) = open(factory).await;
    let b = store
        .widget_create(acme, def("B invoices", 60), 2)
        .await
        .expect("create");
    let a = store
        .widget_create(acme, def("A tickets", 60), 2)
        .await
        .expect("create");
    assert_ne!(a.id, b.id, "fresh ids");
    assert_eq!(a.def, def("A tickets", 60), "stored as given");
    let full = store.widget_create(acme, def("C", 60), 2).await;
    assert!(
        matches!(full, Err(DeskError::Conflict(_))),
        "the third widget meets the limit of 2: {full:?}"
    );
    let list = store.widget_list(acme).await.expect("list");
    let names: Vec<&str> = list.iter().map(|v| v.widget.def.name.as_str()).collect();
    assert_eq!(names, ["A tickets", "B invoices"], "ordered by name");
    let view = &list[0];
    assert_eq!(view.cache.data, None, "a new widget has no data");
    assert_eq!(view.cache.checked_at, None);
    assert!(!view.refreshing);
    assert_eq!(
        view.now,
        clock.now(),
        "ages are measured by the store's clock"
    );

    // Fill the cache, then update: a new ttl keeps it, a new call resets it.
    let token = claimed(store.as_ref(), acme, a.id, false).await;
    settle(store.as_ref(), acme, a.id, &token, Fetched::Data(json!(7)))
        .await
        .expect("settled");
    let renamed = WidgetDef {
        name: "A renamed".into(),
        ttl_sec: 120,
        ..def("A tickets", 60)
    };
    store
        .widget_update(acme, a.id, renamed.clone(), false)
        .await
        .expect("update");
    let kept = store
        .widget_get(acme, a.id)
        .await
        .expect("get")
        .expect("found");
    assert_eq!(kept.widget.def, renamed);
    assert_eq!(kept.cache.data, Some(json!(7)), "kept across a rename");
    let mut moved = renamed.clone();
    moved.path = Some("body.total".into());
    store
        .widget_update(acme, a.id, moved.clone(), true)
        .await
        .expect("update");
    let reset = store
        .widget_get(acme, a.id)
        .await
        .expect("get")
        .expect("found");
    assert_eq!(reset.widget.def, moved);
    assert_eq!(reset.cache.data, None, "a new call starts with no data");
    assert_eq!(reset.cache.checked_at, None);

    store.widget_delete(acme, a.id).await.expect("delete");
    assert_eq!(store.widget_get(acme, a.id).await.expect("get"), None);
    assert!(matches!(
        store.widget_delete(acme, a.id).await,
        Err(DeskError::NotFound(_))
    ));
    assert!(matches!(
        store.widget_update(acme, a.id, def("x", 60), false).await,
        Err(DeskError::NotFound(_))
    ));
    store
        .widget_create(acme, def("C", 60), 2)
        .await
        .expect("a deleted widget frees its place");
    assert!(matches!(
        store.widget_create(TenantId::new(), def("x", 60), 2).await,
        Err(DeskError::NotFound(_))
    ));
}

pub async fn widget_claim_serves_fresh_data_and_claims_when_stale_or_forced(
    factory: &dyn AutomationStoreFactory,
) {
    let (store, _desk, clock, acme) = open(factory).await;
    let widget = store
        .widget_create(acme, def("Invoices", 60), 10)
        .await
        .expect("create");
    let id = widget.id;

    // Never fetched: the first claimer gets the lease, a second one finds it busy.
    let token = claimed(store.as_ref(), acme, id, false).await;
    match claim(store.as_ref(), acme, id, false).await {
        Claim::Busy(view) => assert!(view.refreshing),
        other => panic!("a held lease is busy, got {other:?}"),
    }
    match claim(store.as_ref(), acme, id, true).await {
        Claim::Busy(_) => {}
        other => panic!("a forced claim does not break a held lease, got {other:?}"),
    }
    let first = clock.now();
    let view = settle(
        store.as_ref(),
        acme,
        id,
        &token,
        Fetched::Data(json!({"count": 3})),
    )
    .await
    .expect("the lease holder settles");
    assert_eq!(view.cache.data, Some(json!({"count": 3})));
    assert_eq!(view.cache.fetched_at, Some(first));
    assert_eq!(view.cache.checked_at, Some(first));
    assert!(!view.refreshing, "settling releases the lease");
    assert_eq!(
        settle(store.as_ref(), acme, id, &token, Fetched::Data(json!(0))).await,
        None,
        "a settled token holds nothing"
    );

    // Fresh until ttlSec has passed since the last attempt.
    clock.advance(Duration::from_secs(59));
    match claim(store.as_ref(), acme, id, false).await {
        Claim::Fresh(view) => {
            assert_eq!(view.cache.data, Some(json!({"count": 3})));
            assert_eq!(view.age(), Some(Duration::from_secs(59)));
        }
        other => panic!("fresh at 59 s of 60, got {other:?}"),
    }
    let forced = claimed(store.as_ref(), acme, id, true).await;
    settle(store.as_ref(), acme, id, &forced, Fetched::NotMade)
        .await
        .expect("not made releases");
    let after = store
        .widget_get(acme, id)
        .await
        .expect("get")
        .expect("found");
    assert_eq!(
        after.cache.checked_at,
        Some(first),
        "not made changes no cache field"
    );
    clock.advance(Duration::from_secs(1));
    let token = claimed(store.as_ref(), acme, id, false).await;

    // A failure keeps the data and counts as an attempt.
    let failed_at = clock.now();
    let view = settle(
        store.as_ref(),
        acme,
        id,
        &token,
        Fetched::Failed("billing answered 503".into()),
    )
    .await
    .expect("settled");
    assert_eq!(
        view.cache.data,
        Some(json!({"count": 3})),
        "the old data stays"
    );
    assert_eq!(view.cache.fetched_at, Some(first));
    assert_eq!(view.cache.error.as_deref(), Some("billing answered 503"));
    assert_eq!(view.cache.error_at, Some(failed_at));
    assert_eq!(view.cache.checked_at, Some(failed_at));
    assert!(view.stale(), "data older than ttlSec is stale");
    assert!(
        matches!(
            claim(store.as_ref(), acme, id, false).await,
            Claim::Fresh(_)
        ),
        "a failed attempt is not retried by readers before ttlSec"
    );
    clock.advance(Duration::from_secs(60));
    let token = claimed(store.as_ref(), acme, id, false).await;
    let view = settle(store.as_ref(), acme, id, &token, Fetched::Data(json!(4)))
        .await
        .expect("settled");
    assert_eq!(view.cache.error, None, "a success clears the error");
    assert_eq!(view.cache.error_at, None);
    assert_eq!(view.cache.data, Some(json!(4)));
}

pub async fn widget_expired_lease_is_taken_over_and_the_late_answer_refused(
    factory: &dyn AutomationStoreFactory,
) {
    let (store, _desk, clock, acme) = open(factory).await;
    let id = store
        .widget_create(acme, def("Invoices", 60), 10)
        .await
        .expect("create")
        .id;
    let stuck = claimed(store.as_ref(), acme, id, false).await;
    clock.advance(LEASE);
    let fresh = claimed(store.as_ref(), acme, id, false).await;
    assert_ne!(stuck, fresh);
    assert_eq!(
        settle(
            store.as_ref(),
            acme,
            id,
            &stuck,
            Fetched::Data(json!("late"))
        )
        .await,
        None,
        "the expired holder's answer is refused"
    );
    let view = settle(
        store.as_ref(),
        acme,
        id,
        &fresh,
        Fetched::Data(json!("new")),
    )
    .await
    .expect("the new holder settles");
    assert_eq!(view.cache.data, Some(json!("new")));

    // A reset (a new call) drops a held lease too.
    clock.advance(Duration::from_secs(60));
    let held = claimed(store.as_ref(), acme, id, false).await;
    let mut moved = def("Invoices", 60);
    moved.path = Some("body".into());
    store
        .widget_update(acme, id, moved, true)
        .await
        .expect("update");
    assert_eq!(
        settle(
            store.as_ref(),
            acme,
            id,
            &held,
            Fetched::Data(json!("old call"))
        )
        .await,
        None,
        "the answer of the old call is refused"
    );
    let view = store
        .widget_get(acme, id)
        .await
        .expect("get")
        .expect("found");
    assert_eq!(view.cache.data, None);
    assert!(!view.refreshing);
}

pub async fn widget_two_concurrent_claimers_get_exactly_one_lease(
    factory: &dyn AutomationStoreFactory,
) {
    let (store, _desk, clock, acme) = open(factory).await;
    let id = store
        .widget_create(acme, def("Invoices", 60), 10)
        .await
        .expect("create")
        .id;
    for round in 0..5 {
        let (a, b) = tokio::join!(
            {
                let store = store.clone();
                async move { claim(store.as_ref(), acme, id, false).await }
            },
            {
                let store = store.clone();
                async move { claim(store.as_ref(), acme, id, false).await }
            }
        );
        let tokens: Vec<&String> = [&a, &b]
            .into_iter()
            .filter_map(|claim| match claim {
                Claim::Claimed { token, .. } => Some(token),
                _ => None,
            })
            .collect();
        assert_eq!(tokens.len(), 1, "round {round}: {a:?} / {b:?}");
        assert!(
            [&a, &b].iter().any(|claim| matches!(claim, Claim::Busy(_))),
            "round {round}: the other is busy"
        );
        settle(
            store.as_ref(),
            acme,
            id,
            tokens[0],
            Fetched::Data(json!(round)),
        )
        .await
        .expect("settled");
        clock.advance(Duration::from_secs(60));
    }
}

pub async fn another_tenants_widget_answers_exactly_like_a_missing_one(
    factory: &dyn AutomationStoreFactory,
) {
    let (store, desk, _clock, acme) = open(factory).await;
    let (globex, _) = desk.tenant_create("Globex").await.expect("tenant");
    let globex = globex.id;
    let id = store
        .widget_create(acme, def("Invoices", 60), 10)
        .await
        .expect("create")
        .id;
    let token = claimed(store.as_ref(), acme, id, false).await;
    assert_eq!(store.widget_get(globex, id).await.expect("get"), None);
    assert!(store.widget_list(globex).await.expect("list").is_empty());
    assert!(matches!(
        store.widget_claim(globex, id, true, LEASE).await,
        Err(DeskError::NotFound(_))
    ));
    assert_eq!(
        settle(
            store.as_ref(),
            globex,
            id,
            &token,
            Fetched::Data(json!("x"))
        )
        .await,
        None,
        "another tenant cannot settle even with the token"
    );
    assert!(matches!(
        store.widget_update(globex, id, def("x", 60), true).await,
        Err(DeskError::NotFound(_))
    ));
    assert!(matches!(
        store.widget_delete(globex, id).await,
        Err(DeskError::NotFound(_))
    ));
    let unknown = Uuid::new_v4();
    assert!(matches!(
        store.widget_claim(acme, unknown, false, LEASE).await,
        Err(DeskError::NotFound(_))
    ));
    // Globex's own limit counts only its widgets.
    store
        .widget_create(globex, def("Mine", 60), 1)
        .await
        .expect("globex has none yet");
    let view = store
        .widget_get(acme, id)
        .await
        .expect("get")
        .expect("acme's");
    assert!(view.refreshing, "acme's lease is untouched");
}
