//! Automation cases: the `AutomationStore` port called directly, pinning every line of its
//! `# Contract` (see `fronta_automation::store`) — create, read, list, update, delete;
//! names unique per tenant; tenant isolation (another tenant's id answers exactly like an
//! unknown one, lists never show another tenant's rows); webhook tokens (random, long,
//! found by `automation_by_webhook_token`, kept across updates, none for other triggers);
//! `automations_for_event` (enabled listeners of the event, oldest first); and
//! `guard_admit` (at most `max` in the window, atomic under concurrency, per automation and
//! ticket). Then the ticket event sink of the `DeskStore` contract: a create or a change
//! hands the sink one event inside the write's transaction, and the sink's runs commit
//! with the write or not at all.
//!
//! It also pins what the contract leaves open, so every store decides alike: the list is
//! ordered by name; a paused webhook automation is still found by its token; a token is
//! hidden (and finds nothing) while the trigger is not a webhook; "oldest first" is by
//! creation, not by the last update; `set_enabled` to the current value is a no-op; the
//! guard counts a refused admission as nothing; an event's `at` is the committed ticket's
//! `updated_at`.
//!
//! The guard is given `now` explicitly, so no case moves a store clock. Left out: the
//! executor's use of the events (routing, loop protection by origin), which is tested
//! where it lives.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use fronta_automation::Automation;
use fronta_automation::rotation::{self, RetiredKind};
use fronta_automation::store::{
    AutomationId, AutomationStore, Listener, StoredAutomation, TicketEventSink,
};
use fronta_desk::store::{TicketChange, TicketEvent, TicketEventKind, TicketFilter, TicketUpsert};
use fronta_desk::{DeskError, DeskStore, Origin, TenantId, Ticket, TicketId};
use fronta_engine::{Clock, ManualClock, NewRun, RunFilter, RunId, RunStatus, RunStore};
use serde_json::{Value, json};

use crate::AutomationStoreFactory;
// The capacity cases live in their own file and run in this suite.
pub use crate::room_cases::*;

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

const CREATED: &str = "ticket.created";
const CHANGED: &str = "ticket.changed";
/// The loop guard's limits (DESIGN §4.7): 5 runs of one automation over one ticket a
/// minute.
const GUARD_MAX: u32 = 5;
const GUARD_WINDOW: Duration = Duration::from_secs(60);

/// A fresh store with two tenants, `acme` (most cases work in it) and `globex` (the other
/// tenant of the isolation cases), each with one ticket for the guard.
struct Env {
    automations: Arc<dyn AutomationStore>,
    desk: Arc<dyn DeskStore>,
    acme: TenantId,
    globex: TenantId,
}

impl Env {
    async fn open(factory: &dyn AutomationStoreFactory) -> Self {
        let (automations, desk) = factory.open_automations().await;
        let (acme, _) = desk.tenant_create("Acme").await.expect("tenant Acme");
        let (globex, _) = desk.tenant_create("Globex").await.expect("tenant Globex");
        Self {
            automations,
            desk,
            acme: acme.id,
            globex: globex.id,
        }
    }

    /// As [`Env::open`], on a store whose clock is `clock`.
    async fn open_at(factory: &dyn AutomationStoreFactory, clock: ManualClock) -> Self {
        let (automations, desk) = factory.open_automations_at(clock).await;
        let (acme, _) = desk.tenant_create("Acme").await.expect("tenant Acme");
        let (globex, _) = desk.tenant_create("Globex").await.expect("tenant Globex");
        Self {
            automations,
            desk,
            acme: acme.id,
            globex: globex.id,
        }
    }

    async fn create(&self, tenant: TenantId, automation: Automation) -> StoredAutomation {
        let name = automation.name.clone();
        self.automations
            .automation_create(
                tenant,
                automation,
                None,
                fronta_automation::versions::BY_TENANT,
            )
            .await
            .unwrap_or_else(|err| panic!("automation {name} is created: {err}"))
    }

    async fn get(&self, tenant: TenantId, id: AutomationId) -> StoredAutomation {
        self.automations
            .automation_get(tenant, id)
            .await
            .unwrap_or_else(|err| panic!("automation {id} reads: {err}"))
    }

    async fn update(
        &self,
        tenant: TenantId,
        id: AutomationId,
        automation: Automation,
    ) -> StoredAutomation {
        self.automations
            .automation_update(
                tenant,
                id,
                automation,
                fronta_automation::versions::BY_TENANT,
            )
            .await
            .unwrap_or_else(|err| panic!("automation {id} is updated: {err}"))
    }

    async fn set_enabled(
        &self,
        tenant: TenantId,
        id: AutomationId,
        enabled: bool,
    ) -> StoredAutomation {
        self.automations
            .automation_set_enabled(
                tenant,
                id,
                enabled,
                fronta_automation::store::InFlight::Finish,
            )
            .await
            .unwrap_or_else(|err| panic!("automation {id} is set enabled={enabled}: {err}"))
    }

    async fn list(&self, tenant: TenantId) -> Vec<StoredAutomation> {
        self.automations
            .automation_list(tenant)
            .await
            .expect("automation_list succeeds")
    }

    async fn by_token(&self, token: &str) -> Option<StoredAutomation> {
        self.automations
            .automation_by_webhook_token(token)
            .await
            .expect("automation_by_webhook_token succeeds")
    }

    /// The names of the tenant's listeners of `event`, in the store's order.
    async fn listeners(&self, tenant: TenantId, event: &str) -> Vec<String> {
        self.automations
            .automations_for_event(tenant, event)
            .await
            .unwrap_or_else(|err| panic!("automations_for_event {event} succeeds: {err}"))
            .into_iter()
            .map(|stored| stored.automation.name)
            .collect()
    }

    async fn ticket(&self, tenant: TenantId, external_id: &str) -> Ticket {
        self.desk
            .ticket_upsert(tenant, upsert(external_id), Origin::Person)
            .await
            .unwrap_or_else(|err| panic!("ticket {external_id} is created: {err}"))
            .ticket
    }

    /// One admission of the guard with the default limits.
    async fn admit(&self, automation: AutomationId, ticket: TicketId, now: DateTime<Utc>) -> bool {
        self.automations
            .guard_admit(self.acme, automation, ticket, now, GUARD_WINDOW, GUARD_MAX)
            .await
            .unwrap_or_else(|err| panic!("guard_admit at {now} succeeds: {err}"))
    }
}

fn parse(value: Value) -> Automation {
    Automation::from_value(&value)
        .unwrap_or_else(|problems| panic!("the test automation parses: {problems:?}"))
}

fn steps(message: &str) -> Value {
    json!([{"name": "note", "op": "flow/log", "input": {"message": message}}])
}

fn webhook(name: &str) -> Automation {
    parse(json!({
        "name": name,
        "trigger": {"type": "webhook", "params": [
            {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}
        ]},
        "steps": steps("order {{orderId}}"),
    }))
}

fn listener(name: &str, event: &str) -> Automation {
    parse(json!({
        "name": name,
        "trigger": {"type": "event", "event": event},
        "steps": steps("ticket {{ticket.id}}"),
    }))
}

fn manual(name: &str) -> Automation {
    parse(json!({"name": name, "trigger": {"type": "manual"}, "steps": steps("by hand")}))
}

fn poll(name: &str) -> Automation {
    parse(json!({
        "name": name,
        "trigger": {"type": "poll", "source": "mail", "intervalSec": 60},
        "steps": steps("mail"),
    }))
}

fn schedule(name: &str) -> Automation {
    parse(json!({
        "name": name,
        "trigger": {"type": "schedule", "cron": "0 7 * * MON-FRI", "timezone": "Europe/Prague"},
        "steps": steps("morning"),
    }))
}

/// `automation` with one `flow/log` step logging `message`.
fn with_steps(mut automation: Automation, message: &str) -> Automation {
    automation.steps =
        parse(json!({"name": "x", "trigger": {"type": "manual"}, "steps": steps(message)})).steps;
    automation
}

/// `automation` with `enabled` set as given.
fn with_enabled(mut automation: Automation, enabled: bool) -> Automation {
    automation.enabled = enabled;
    automation
}

fn upsert(external_id: &str) -> TicketUpsert {
    TicketUpsert {
        external_id: external_id.into(),
        ..TicketUpsert::default()
    }
}

/// A fixed, readable instant for the guard (2030-01-01T12:00:00Z).
fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0)
        .single()
        .expect("invariant: a fixed, valid date")
}

fn at(offset: Duration) -> DateTime<Utc> {
    fronta_engine::clock::add(t0(), offset)
}

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

fn expect_err<T: std::fmt::Debug>(result: Result<T, DeskError>, what: &str) -> DeskError {
    match result {
        Ok(value) => panic!("{what}: expected an error, got {value:?}"),
        Err(err) => err,
    }
}

fn assert_not_found<T: std::fmt::Debug>(result: Result<T, DeskError>, what: &str) -> DeskError {
    let err = expect_err(result, what);
    assert!(
        matches!(err, DeskError::NotFound(_)),
        "{what}: expected NotFound, got {err:?}"
    );
    err
}

fn assert_conflict<T: std::fmt::Debug>(result: Result<T, DeskError>, what: &str) {
    let err = expect_err(result, what);
    assert!(
        matches!(err, DeskError::Conflict(_)),
        "{what}: expected Conflict, got {err:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Saved automations
// ---------------------------------------------------------------------------------------

/// An automation reads back by id and by name exactly as created (with its signing
/// secret), lists, updates (same id and `created_at`, the new definition and name, the
/// secret kept) and deletes; a deleted one is `NotFound` everywhere, like one that never
/// existed. An automation of an unknown tenant is `NotFound`.
pub async fn automations_are_created_read_listed_updated_and_deleted(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let store = &env.automations;
    let created = store
        .automation_create(
            env.acme,
            webhook("orders"),
            Some("whsec_secret".into()),
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("the automation is created");
    assert_eq!(created.tenant, env.acme, "it belongs to the tenant");
    assert_eq!(
        created.automation,
        webhook("orders"),
        "the definition is kept whole"
    );
    assert_eq!(
        created.signing_secret.as_deref(),
        Some("whsec_secret"),
        "the signing secret is kept"
    );
    assert_eq!(
        created.created_at, created.updated_at,
        "a new automation was last updated when it was created"
    );
    assert_eq!(
        env.get(env.acme, created.id).await,
        created,
        "get answers the automation as created"
    );
    assert_eq!(
        store
            .automation_by_name(env.acme, "orders")
            .await
            .expect("by name reads"),
        created,
        "by name answers the same"
    );
    assert_eq!(
        env.list(env.acme).await,
        vec![created.clone()],
        "the list shows it"
    );

    let changed = with_steps(manual("orders by hand"), "changed");
    let updated = env.update(env.acme, created.id, changed.clone()).await;
    assert_eq!(updated.id, created.id, "an update keeps the id");
    assert_eq!(updated.automation, changed, "the definition is replaced");
    assert_eq!(
        updated.created_at, created.created_at,
        "an update keeps created_at"
    );
    assert!(
        updated.updated_at >= created.updated_at,
        "updated_at does not go back: {} then {}",
        created.updated_at,
        updated.updated_at
    );
    assert_eq!(
        updated.signing_secret, created.signing_secret,
        "an update keeps the signing secret"
    );
    assert_eq!(
        env.get(env.acme, created.id).await,
        updated,
        "get shows the update"
    );
    assert_not_found(
        store.automation_by_name(env.acme, "orders").await,
        "the old name after a rename",
    );
    assert_eq!(
        store
            .automation_by_name(env.acme, "orders by hand")
            .await
            .expect("the new name reads"),
        updated,
        "the new name finds it"
    );

    store
        .automation_delete(env.acme, created.id)
        .await
        .expect("the automation is deleted");
    assert_not_found(
        store.automation_get(env.acme, created.id).await,
        "get after delete",
    );
    assert_not_found(
        store.automation_by_name(env.acme, "orders by hand").await,
        "by name after delete",
    );
    assert!(
        env.list(env.acme).await.is_empty(),
        "the list is empty after delete"
    );
    assert_not_found(
        store.automation_delete(env.acme, created.id).await,
        "a second delete",
    );
    assert_not_found(
        store
            .automation_update(
                env.acme,
                created.id,
                manual("again"),
                fronta_automation::versions::BY_TENANT,
            )
            .await,
        "an update after delete",
    );
    assert_not_found(
        store
            .automation_set_enabled(
                env.acme,
                created.id,
                false,
                fronta_automation::store::InFlight::Finish,
            )
            .await,
        "set_enabled after delete",
    );
    assert_not_found(
        store
            .automation_create(
                TenantId::new(),
                manual("nobody's"),
                None,
                fronta_automation::versions::BY_TENANT,
            )
            .await,
        "an automation of an unknown tenant",
    );
}

/// A name is unique within a tenant (`Conflict` on create and on an update onto a taken
/// name, which changes nothing), free in another tenant, kept by an update of its own
/// automation, and free again once its automation is deleted. An empty name is `Invalid`.
pub async fn automation_names_are_unique_within_a_tenant(factory: &dyn AutomationStoreFactory) {
    let env = Env::open(factory).await;
    let store = &env.automations;
    let first = env.create(env.acme, manual("first")).await;
    let second = env.create(env.acme, manual("second")).await;
    assert_conflict(
        store
            .automation_create(
                env.acme,
                webhook("first"),
                None,
                fronta_automation::versions::BY_TENANT,
            )
            .await,
        "a second automation named first",
    );
    assert_conflict(
        store
            .automation_update(
                env.acme,
                second.id,
                manual("first"),
                fronta_automation::versions::BY_TENANT,
            )
            .await,
        "renaming second onto first",
    );
    assert_eq!(
        env.get(env.acme, second.id).await,
        second,
        "the refused update changed nothing"
    );
    env.update(env.acme, first.id, webhook("first")).await;
    env.create(env.globex, manual("first")).await;
    assert_eq!(
        env.list(env.acme).await.len(),
        2,
        "refused writes added nothing to Acme"
    );

    store
        .automation_delete(env.acme, first.id)
        .await
        .expect("first is deleted");
    env.create(env.acme, manual("first")).await;

    let err = expect_err(
        store
            .automation_create(
                env.acme,
                manual("   "),
                None,
                fronta_automation::versions::BY_TENANT,
            )
            .await,
        "an automation without a name",
    );
    assert!(
        matches!(err, DeskError::Invalid(_)),
        "a blank name is Invalid, got {err:?}"
    );
}

/// A save checks the name before it reads anything: a blank name is `Invalid` also for an
/// unknown tenant or an unknown id; a taken name's `Conflict` quotes it, alike for a
/// create and an update, on every store.
pub async fn automation_save_checks_the_name_first_and_quotes_a_taken_one(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let store = &env.automations;
    let blank = || manual("   ");
    for (result, what) in [
        (
            store
                .automation_create(
                    TenantId::new(),
                    blank(),
                    None,
                    fronta_automation::versions::BY_TENANT,
                )
                .await,
            "a blank name for an unknown tenant",
        ),
        (
            store
                .automation_update(
                    env.acme,
                    AutomationId::new(),
                    blank(),
                    fronta_automation::versions::BY_TENANT,
                )
                .await,
            "a blank name for an unknown id",
        ),
    ] {
        let err = expect_err(result, what);
        assert!(
            matches!(err, DeskError::Invalid(_)),
            "{what}: Invalid before any lookup, got {err:?}"
        );
    }
    env.create(env.acme, manual("Orders")).await;
    let other = env.create(env.acme, manual("Refunds")).await;
    let taken = DeskError::Conflict("automation \"Orders\" already exists".into());
    assert_eq!(
        store
            .automation_create(
                env.acme,
                webhook("Orders"),
                None,
                fronta_automation::versions::BY_TENANT
            )
            .await,
        Err(taken.clone()),
        "a create onto a taken name"
    );
    assert_eq!(
        store
            .automation_update(
                env.acme,
                other.id,
                manual("Orders"),
                fronta_automation::versions::BY_TENANT
            )
            .await,
        Err(taken),
        "an update onto a taken name"
    );
}

/// `automation_list` is ordered by name, whatever the creation order.
pub async fn automation_list_is_ordered_by_name(factory: &dyn AutomationStoreFactory) {
    let env = Env::open(factory).await;
    for name in ["zulu", "alpha", "mike"] {
        env.create(env.acme, manual(name)).await;
    }
    let names: Vec<String> = env
        .list(env.acme)
        .await
        .into_iter()
        .map(|stored| stored.automation.name)
        .collect();
    assert_eq!(
        names,
        ["alpha", "mike", "zulu"],
        "the list is ordered by name"
    );
}

// ---------------------------------------------------------------------------------------
// Tenant isolation
// ---------------------------------------------------------------------------------------

/// Every tenant-scoped method given another tenant's automation (or, for the guard, its
/// ticket) answers exactly what it answers for an id that never existed, and changes
/// nothing of the other tenant's.
pub async fn another_tenants_automation_answers_exactly_like_an_unknown_one(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let store = &env.automations;
    let (acme, globex) = (env.acme, env.globex);
    let theirs = env.create(globex, webhook("theirs")).await;
    let their_ticket = env.ticket(globex, "g-1").await;
    let ours = env.create(acme, manual("ours")).await;
    let our_ticket = env.ticket(acme, "a-1").await;

    macro_rules! same {
        ($theirs:expr, $unknown:expr, $what:literal) => {{
            let unknown = assert_not_found($unknown, concat!($what, " (unknown)"));
            let theirs = expect_err($theirs, concat!($what, " (another tenant's)"));
            assert_eq!(
                theirs, unknown,
                concat!($what, ": another tenant's answers exactly like unknown")
            );
        }};
    }

    same!(
        store.automation_get(acme, theirs.id).await,
        store.automation_get(acme, AutomationId::new()).await,
        "automation_get"
    );
    same!(
        store.automation_by_name(acme, "theirs").await,
        store.automation_by_name(acme, "never").await,
        "automation_by_name"
    );
    same!(
        store
            .automation_update(
                acme,
                theirs.id,
                manual("stolen"),
                fronta_automation::versions::BY_TENANT
            )
            .await,
        store
            .automation_update(
                acme,
                AutomationId::new(),
                manual("stolen"),
                fronta_automation::versions::BY_TENANT
            )
            .await,
        "automation_update"
    );
    same!(
        store
            .automation_set_enabled(
                acme,
                theirs.id,
                false,
                fronta_automation::store::InFlight::Finish
            )
            .await,
        store
            .automation_set_enabled(
                acme,
                AutomationId::new(),
                false,
                fronta_automation::store::InFlight::Finish
            )
            .await,
        "automation_set_enabled"
    );
    same!(
        store.automation_delete(acme, theirs.id).await,
        store.automation_delete(acme, AutomationId::new()).await,
        "automation_delete"
    );
    same!(
        store
            .guard_admit(
                acme,
                theirs.id,
                our_ticket.id,
                t0(),
                GUARD_WINDOW,
                GUARD_MAX
            )
            .await,
        store
            .guard_admit(
                acme,
                AutomationId::new(),
                our_ticket.id,
                t0(),
                GUARD_WINDOW,
                GUARD_MAX
            )
            .await,
        "guard_admit with another tenant's automation"
    );
    same!(
        store
            .guard_admit(
                acme,
                ours.id,
                their_ticket.id,
                t0(),
                GUARD_WINDOW,
                GUARD_MAX
            )
            .await,
        store
            .guard_admit(
                acme,
                ours.id,
                TicketId::new(),
                t0(),
                GUARD_WINDOW,
                GUARD_MAX
            )
            .await,
        "guard_admit with another tenant's ticket"
    );
    assert_eq!(
        env.get(globex, theirs.id).await,
        theirs,
        "Globex's automation is untouched by Acme's attempts"
    );
}

/// Lists and event queries show only the caller's tenant's automations, also when both
/// tenants use the same names; an unknown tenant has none.
pub async fn lists_never_show_another_tenants_automations(factory: &dyn AutomationStoreFactory) {
    let env = Env::open(factory).await;
    for tenant in [env.acme, env.globex] {
        env.create(tenant, listener("on-create", CREATED)).await;
        env.create(tenant, listener("on-change", CHANGED)).await;
        env.create(tenant, webhook("orders")).await;
    }
    for (tenant, who) in [(env.acme, "Acme"), (env.globex, "Globex")] {
        let listed = env.list(tenant).await;
        assert_eq!(
            listed.len(),
            3,
            "{who} lists its three automations: {listed:?}"
        );
        assert!(
            listed.iter().all(|stored| stored.tenant == tenant),
            "{who}'s list holds only its own: {listed:?}"
        );
        for event in [CREATED, CHANGED] {
            let found = env
                .automations
                .automations_for_event(tenant, event)
                .await
                .expect("automations_for_event succeeds");
            assert_eq!(
                found.len(),
                1,
                "{who} has one listener of {event}: {found:?}"
            );
            assert_eq!(
                found[0].tenant, tenant,
                "{who}'s listener of {event} is its own"
            );
        }
    }
    assert!(
        env.list(TenantId::new()).await.is_empty(),
        "an unknown tenant lists nothing"
    );
    assert!(
        env.listeners(TenantId::new(), CREATED).await.is_empty(),
        "an unknown tenant has no listeners"
    );
}

// ---------------------------------------------------------------------------------------
// Webhook tokens
// ---------------------------------------------------------------------------------------

/// A webhook automation gets a token at creation: long, different for each automation,
/// and the only way `automation_by_webhook_token` finds it (from any tenant, also while
/// paused). Manual, event, poll and schedule triggers have none. A wrong, empty or
/// one-character-off token finds nothing.
pub async fn webhook_automation_gets_a_random_unguessable_token_and_others_none(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let orders = env.create(env.acme, webhook("orders")).await;
    let returns = env.create(env.acme, webhook("returns")).await;
    let theirs = env.create(env.globex, webhook("orders")).await;
    let token = orders
        .webhook_token
        .clone()
        .expect("a webhook automation has a token");
    let other = returns
        .webhook_token
        .clone()
        .expect("every webhook automation has a token");
    assert_ne!(token, other, "two webhook automations, two tokens");
    assert!(
        token.len() >= 32,
        "a token is long enough not to be guessed: {} characters",
        token.len()
    );
    for quiet in [
        manual("by hand"),
        listener("on-create", CREATED),
        poll("mail"),
        schedule("mornings"),
    ] {
        let stored = env.create(env.acme, quiet).await;
        assert_eq!(
            stored.webhook_token,
            None,
            "a {} trigger has no token",
            stored.automation.trigger.kind()
        );
        assert_eq!(
            env.get(env.acme, stored.id).await.webhook_token,
            None,
            "nor does it read back with one"
        );
    }

    assert_eq!(
        env.by_token(&token).await,
        Some(orders.clone()),
        "the token finds its automation"
    );
    assert_eq!(
        env.by_token(&other).await,
        Some(returns),
        "each token finds its own"
    );
    assert_eq!(
        env.by_token(theirs.webhook_token.as_deref().expect("Globex's token"))
            .await,
        Some(theirs.clone()),
        "the token lookup is the one not scoped by tenant"
    );
    assert_eq!(
        env.get(env.acme, orders.id).await.webhook_token,
        Some(token.clone()),
        "get shows the token"
    );
    assert_eq!(
        env.by_token("wh_not-a-token").await,
        None,
        "a wrong token finds nothing"
    );
    assert_eq!(env.by_token("").await, None, "an empty token finds nothing");
    let mut altered = token.clone();
    let last = altered.pop().expect("a token is not empty");
    altered.push(if last == '0' { '1' } else { '0' });
    assert_eq!(
        env.by_token(&altered).await,
        None,
        "a token one character off finds nothing"
    );

    let paused = env.set_enabled(env.acme, orders.id, false).await;
    assert_eq!(
        env.by_token(&token).await,
        Some(paused),
        "a paused webhook automation is still found (the caller decides what it answers)"
    );
}

/// The token survives updates, pausing, and a trigger that changes away (while it is not
/// a webhook the automation shows no token and the token finds nothing) and back (the
/// same token again). An automation that becomes a webhook gets a token then, kept after.
/// A rotation gives a new token; the old one still finds the automation (with the new
/// token and the old one listed with its expiry) until the grace ends, then nothing — on
/// the store's clock. A grace of 0 stops the old token at once; a manual automation has
/// no URL to rotate; another tenant's automation answers like an unknown one; a delete
/// takes the old tokens with it.
pub async fn a_rotated_webhook_token_answers_for_its_grace_then_finds_nothing(
    factory: &dyn AutomationStoreFactory,
) {
    let start = Utc
        .with_ymd_and_hms(2026, 3, 1, 12, 0, 0)
        .single()
        .expect("a time");
    let clock = ManualClock::new(start);
    let env = Env::open_at(factory, clock.clone()).await;
    let orders = env.create(env.acme, webhook("orders")).await;
    let first = orders.webhook_token.clone().expect("a token");

    let rotated = env
        .automations
        .automation_rotate_webhook(env.acme, orders.id, chrono::TimeDelta::seconds(2))
        .await
        .expect("rotated");
    let second = rotated.webhook_token.clone().expect("a new token");
    assert_ne!(second, first, "a new token");
    let listed: Vec<_> = rotation::still_valid(&rotated, RetiredKind::Webhook, start).collect();
    assert_eq!(listed.len(), 1, "the old token is listed");
    assert_eq!(listed[0].value, first, "the old token");
    assert_eq!(
        listed[0].expires_at,
        start + chrono::TimeDelta::seconds(2),
        "until now + grace"
    );
    assert_eq!(
        env.get(env.acme, orders.id).await.retired,
        rotated.retired,
        "a read shows the same"
    );
    for token in [&first, &second] {
        let found = env.by_token(token).await.expect("found in the grace");
        assert_eq!(found.id, orders.id, "the same automation");
        assert_eq!(
            found.webhook_token.as_deref(),
            Some(second.as_str()),
            "answering its current token"
        );
    }

    clock.advance(Duration::from_secs(2));
    assert_eq!(env.by_token(&first).await, None, "the grace is over");
    assert_eq!(
        env.by_token(&second).await.map(|found| found.id),
        Some(orders.id),
        "the new token stays"
    );

    let third = env
        .automations
        .automation_rotate_webhook(env.acme, orders.id, chrono::TimeDelta::zero())
        .await
        .expect("rotated at once");
    assert!(
        third.retired.is_empty(),
        "grace 0 keeps nothing, and the expired row is gone"
    );
    assert_eq!(
        env.by_token(&second).await,
        None,
        "grace 0: the old token stops at once"
    );
    let third_token = third.webhook_token.clone().expect("a token");
    assert!(
        env.by_token(&third_token).await.is_some(),
        "the newest works"
    );

    let hand = env.create(env.acme, manual("hand")).await;
    let refused = env
        .automations
        .automation_rotate_webhook(env.acme, hand.id, chrono::TimeDelta::zero())
        .await
        .expect_err("a manual automation has no URL");
    assert!(matches!(refused, DeskError::Conflict(_)), "{refused:?}");
    assert_eq!(
        env.automations
            .automation_rotate_webhook(env.globex, orders.id, chrono::TimeDelta::zero())
            .await,
        Err(DeskError::NotFound("automation")),
        "another tenant's automation answers like an unknown one"
    );

    let kept = env
        .automations
        .automation_rotate_webhook(env.acme, orders.id, chrono::TimeDelta::days(7))
        .await
        .expect("rotated for a week");
    assert!(env.by_token(&third_token).await.is_some(), "in its week");
    assert_eq!(
        env.automations
            .retired_purge(clock.now(), 100)
            .await
            .expect("a purge"),
        0,
        "the retention keeps a token in its grace"
    );
    clock.advance(Duration::from_secs(8 * 24 * 3600));
    assert_eq!(
        env.automations
            .retired_purge(clock.now(), 100)
            .await
            .expect("a purge"),
        1,
        "and deletes it once the grace is over"
    );
    assert!(
        env.get(env.acme, orders.id).await.retired.is_empty(),
        "its row is gone"
    );
    assert_eq!(env.by_token(&third_token).await, None, "past its week");
    env.automations
        .automation_delete(env.acme, orders.id)
        .await
        .expect("deleted");
    assert_eq!(
        env.by_token(&third_token).await,
        None,
        "gone with its automation"
    );
    let newest = kept.webhook_token.expect("a token");
    assert_eq!(env.by_token(&newest).await, None, "and its current token");
}

/// A signing secret rotation keeps the old secret with its overlap's end; both are the
/// ones [`rotation::signing_secrets`] verifies with until then, only the new after. An
/// unsigned automation has no secret to rotate, and a refused rotation changes nothing.
pub async fn a_rotated_signing_secret_is_kept_for_its_overlap_and_refusals_change_nothing(
    factory: &dyn AutomationStoreFactory,
) {
    let start = Utc
        .with_ymd_and_hms(2026, 3, 1, 12, 0, 0)
        .single()
        .expect("a time");
    let clock = ManualClock::new(start);
    let env = Env::open_at(factory, clock.clone()).await;
    let signed = env
        .automations
        .automation_create(
            env.acme,
            webhook("signed"),
            Some("whsec_old".into()),
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("created");
    let rotated = env
        .automations
        .automation_rotate_signing_secret(
            env.acme,
            signed.id,
            chrono::TimeDelta::seconds(60),
            "whsec_new".into(),
        )
        .await
        .expect("rotated");
    assert_eq!(rotated.signing_secret.as_deref(), Some("whsec_new"));
    assert_eq!(
        rotated.webhook_token, signed.webhook_token,
        "the URL is untouched"
    );
    let found = env
        .by_token(signed.webhook_token.as_deref().expect("a token"))
        .await
        .expect("found by its token");
    assert_eq!(
        rotation::signing_secrets(&found, clock.now()),
        ["whsec_new", "whsec_old"],
        "both verify in the overlap"
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        rotation::signing_secrets(&env.get(env.acme, signed.id).await, clock.now()),
        ["whsec_new"],
        "only the new one after it"
    );

    let again = env
        .automations
        .automation_rotate_signing_secret(
            env.acme,
            signed.id,
            chrono::TimeDelta::zero(),
            "whsec_new".into(),
        )
        .await
        .expect_err("the same secret again");
    assert!(matches!(again, DeskError::Invalid(_)), "{again:?}");
    let plain = env.create(env.acme, webhook("plain")).await;
    let refused = env
        .automations
        .automation_rotate_signing_secret(
            env.acme,
            plain.id,
            chrono::TimeDelta::zero(),
            "whsec_x".into(),
        )
        .await
        .expect_err("nothing to rotate");
    assert!(matches!(refused, DeskError::Conflict(_)), "{refused:?}");
    assert_eq!(
        env.get(env.acme, plain.id).await.signing_secret,
        None,
        "still unsigned"
    );
}

pub async fn webhook_token_is_kept_across_updates_also_when_the_trigger_changes_away_and_back(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let orders = env.create(env.acme, webhook("orders")).await;
    let token = orders
        .webhook_token
        .clone()
        .expect("a webhook automation has a token");

    let updated = env
        .update(env.acme, orders.id, with_steps(webhook("orders"), "v2"))
        .await;
    assert_eq!(
        updated.webhook_token.as_deref(),
        Some(token.as_str()),
        "an update of the steps keeps the token"
    );
    let paused = env.set_enabled(env.acme, orders.id, false).await;
    assert_eq!(
        paused.webhook_token.as_deref(),
        Some(token.as_str()),
        "pausing keeps the token"
    );

    let away = env.update(env.acme, orders.id, manual("orders")).await;
    assert_eq!(away.webhook_token, None, "a manual trigger shows no token");
    assert_eq!(
        env.get(env.acme, orders.id).await.webhook_token,
        None,
        "nor does it read back with one"
    );
    assert_eq!(
        env.by_token(&token).await,
        None,
        "the token finds nothing while the trigger is manual"
    );

    let back = env.update(env.acme, orders.id, webhook("orders")).await;
    assert_eq!(
        back.webhook_token.as_deref(),
        Some(token.as_str()),
        "back to a webhook, the same token"
    );
    assert_eq!(
        env.by_token(&token).await.map(|stored| stored.id),
        Some(orders.id),
        "and the token finds it again"
    );

    let by_hand = env.create(env.acme, manual("by hand")).await;
    let became = env.update(env.acme, by_hand.id, webhook("by hand")).await;
    let new_token = became
        .webhook_token
        .clone()
        .expect("an automation that becomes a webhook gets a token");
    assert_ne!(new_token, token, "its own token");
    let again = env.update(env.acme, by_hand.id, webhook("by hand")).await;
    assert_eq!(again.webhook_token, Some(new_token), "and keeps it");
}

// ---------------------------------------------------------------------------------------
// Event listeners
// ---------------------------------------------------------------------------------------

/// `automations_for_event` answers the tenant's enabled automations listening to that
/// event, oldest (by creation) first — not by name, not by the last update; nothing for an
/// event nobody listens to. A trigger changed to the event joins at its creation's place;
/// one changed away leaves.
pub async fn automations_for_event_answers_the_enabled_listeners_oldest_first(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let zulu = env.create(env.acme, listener("zulu", CHANGED)).await;
    env.create(env.acme, listener("alpha", CREATED)).await;
    let mike = env.create(env.acme, manual("mike")).await;
    env.create(env.acme, webhook("echo")).await;
    env.create(env.acme, with_enabled(listener("bravo", CHANGED), false))
        .await;
    env.create(env.acme, listener("yankee", CHANGED)).await;
    env.create(env.globex, listener("other", CHANGED)).await;

    assert_eq!(
        env.listeners(env.acme, CHANGED).await,
        ["zulu", "yankee"],
        "enabled listeners of ticket.changed, oldest first"
    );
    assert_eq!(
        env.listeners(env.acme, CREATED).await,
        ["alpha"],
        "the listener of ticket.created"
    );
    assert!(
        env.listeners(env.acme, "ticket.closed").await.is_empty(),
        "nobody listens to an unknown event"
    );

    env.update(env.acme, mike.id, listener("mike", CHANGED))
        .await;
    assert_eq!(
        env.listeners(env.acme, CHANGED).await,
        ["zulu", "mike", "yankee"],
        "a trigger changed to the event joins in creation order"
    );
    env.update(env.acme, zulu.id, manual("zulu")).await;
    assert_eq!(
        env.listeners(env.acme, CHANGED).await,
        ["mike", "yankee"],
        "a trigger changed away leaves"
    );
}

/// `automation_set_enabled(false)` pauses: `get` and the list show `enabled: false` and
/// the event query leaves it out; doing it again changes nothing; enabling brings it back.
/// An update whose definition says `enabled: false` pauses it too.
pub async fn disabling_an_automation_removes_it_from_its_event_and_get_shows_it(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let stored = env.create(env.acme, listener("route", CHANGED)).await;
    assert!(
        stored.automation.enabled,
        "an automation is enabled by default"
    );
    assert_eq!(
        env.listeners(env.acme, CHANGED).await,
        ["route"],
        "it listens"
    );

    let paused = env.set_enabled(env.acme, stored.id, false).await;
    assert!(
        !paused.automation.enabled,
        "set_enabled answers the paused automation"
    );
    assert!(
        !env.get(env.acme, stored.id).await.automation.enabled,
        "get shows enabled: false"
    );
    assert!(
        !env.list(env.acme).await[0].automation.enabled,
        "the list shows enabled: false"
    );
    assert!(
        env.listeners(env.acme, CHANGED).await.is_empty(),
        "a paused automation does not listen"
    );
    let again = env.set_enabled(env.acme, stored.id, false).await;
    assert_eq!(again, paused, "pausing a paused automation changes nothing");

    let resumed = env.set_enabled(env.acme, stored.id, true).await;
    assert!(resumed.automation.enabled, "enabled again");
    assert_eq!(
        resumed.automation,
        listener("route", CHANGED),
        "only enabled changed in the definition"
    );
    assert_eq!(
        env.listeners(env.acme, CHANGED).await,
        ["route"],
        "it listens again"
    );

    env.update(
        env.acme,
        stored.id,
        with_enabled(listener("route", CHANGED), false),
    )
    .await;
    assert!(
        !env.get(env.acme, stored.id).await.automation.enabled,
        "an update can pause"
    );
    assert!(
        env.listeners(env.acme, CHANGED).await.is_empty(),
        "and the paused automation does not listen"
    );
}

// ---------------------------------------------------------------------------------------
// The loop guard
// ---------------------------------------------------------------------------------------

/// Five runs of one automation over one ticket within a minute are admitted, the sixth
/// (and any later one inside the minute) is refused, and a refusal counts nothing: a
/// minute after the first run one more is admitted (four left in the window), then the
/// window is full again.
pub async fn guard_admits_five_runs_a_minute_and_refuses_the_sixth(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let automation = env.create(env.acme, listener("loop", CHANGED)).await.id;
    let ticket = env.ticket(env.acme, "t-1").await.id;
    for second in 0..5 {
        assert!(
            env.admit(automation, ticket, at(secs(second))).await,
            "run {} at +{second}s is admitted",
            second + 1
        );
    }
    assert!(
        !env.admit(automation, ticket, at(secs(10))).await,
        "the sixth run within the minute is refused"
    );
    assert!(
        !env.admit(automation, ticket, at(secs(59))).await,
        "still refused at +59s"
    );
    assert!(
        env.admit(automation, ticket, at(secs(60) + Duration::from_millis(1)))
            .await,
        "once the first run left the window one more is admitted (refusals counted nothing)"
    );
    assert!(
        !env.admit(
            automation,
            ticket,
            at(secs(60) + Duration::from_millis(500))
        )
        .await,
        "and the window is full again"
    );
}

/// After a whole window without runs the guard admits `max` again; other limits are
/// honoured as given.
pub async fn guard_admits_again_once_the_window_has_passed(factory: &dyn AutomationStoreFactory) {
    let env = Env::open(factory).await;
    let automation = env.create(env.acme, listener("loop", CHANGED)).await.id;
    let ticket = env.ticket(env.acme, "t-1").await.id;
    for _ in 0..GUARD_MAX {
        assert!(
            env.admit(automation, ticket, t0()).await,
            "the first five at t0 are admitted"
        );
    }
    assert!(
        !env.admit(automation, ticket, t0()).await,
        "the sixth at t0 is refused"
    );
    let later = at(secs(61));
    for run in 1..=GUARD_MAX {
        assert!(
            env.admit(automation, ticket, later).await,
            "run {run} a window later is admitted"
        );
    }
    assert!(
        !env.admit(automation, ticket, later).await,
        "and the sixth then is refused"
    );

    let other = env.ticket(env.acme, "t-2").await.id;
    let admit = |now| {
        env.automations
            .guard_admit(env.acme, automation, other, now, secs(10), 2)
    };
    assert!(
        admit(t0()).await.expect("guard_admit succeeds"),
        "1 of 2 in 10 s"
    );
    assert!(
        admit(at(secs(1))).await.expect("guard_admit succeeds"),
        "2 of 2 in 10 s"
    );
    assert!(
        !admit(at(secs(9))).await.expect("guard_admit succeeds"),
        "a third within 10 s is refused"
    );
    assert!(
        admit(at(secs(11))).await.expect("guard_admit succeeds"),
        "after 10 s one is admitted again"
    );
}

/// The guard counts per (automation, ticket): a full window for one pair leaves another
/// ticket of the same automation and another automation over the same ticket free.
pub async fn guard_counts_each_automation_and_ticket_separately(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let first = env.create(env.acme, listener("first", CHANGED)).await.id;
    let second = env.create(env.acme, listener("second", CHANGED)).await.id;
    let one = env.ticket(env.acme, "t-1").await.id;
    let two = env.ticket(env.acme, "t-2").await.id;
    for _ in 0..GUARD_MAX {
        assert!(
            env.admit(first, one, t0()).await,
            "first over t-1 is admitted up to the limit"
        );
    }
    assert!(
        !env.admit(first, one, t0()).await,
        "first over t-1 is then refused"
    );
    assert!(
        env.admit(first, two, t0()).await,
        "first over t-2 has its own count"
    );
    assert!(
        env.admit(second, one, t0()).await,
        "second over t-1 has its own count"
    );
}

/// Ten concurrent admissions of one (automation, ticket) at one instant admit exactly
/// five: the count and the insert are one atomic step.
pub async fn concurrent_guard_admissions_admit_exactly_the_limit(
    factory: &dyn AutomationStoreFactory,
) {
    let env = Env::open(factory).await;
    let automation = env.create(env.acme, listener("loop", CHANGED)).await.id;
    let ticket = env.ticket(env.acme, "t-1").await.id;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let store = env.automations.clone();
        let tenant = env.acme;
        tasks.spawn(async move {
            store
                .guard_admit(tenant, automation, ticket, t0(), GUARD_WINDOW, GUARD_MAX)
                .await
        });
    }
    let mut admitted = 0;
    while let Some(joined) = tasks.join_next().await {
        if joined
            .expect("the guard task finishes")
            .expect("guard_admit succeeds")
        {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, GUARD_MAX,
        "exactly the limit is admitted among ten concurrent calls"
    );
    assert!(
        !env.admit(automation, ticket, t0()).await,
        "and the window is full"
    );
}

// ---------------------------------------------------------------------------------------
// The ticket event sink
// ---------------------------------------------------------------------------------------

/// The run kind the test sink answers.
const ROUTE: &str = "automation-route";

/// A sink that records every event it is handed and answers one run per event. While
/// `duplicate` is set it answers a run whose id is the first run's, so the insert fails.
#[derive(Clone, Default)]
struct Recorder {
    events: Arc<Mutex<Vec<TicketEvent>>>,
    listeners: Arc<Mutex<Vec<Vec<AutomationId>>>>,
    runs: Arc<Mutex<Vec<RunId>>>,
    duplicate: Arc<AtomicBool>,
}

impl Recorder {
    fn sink(&self) -> TicketEventSink {
        let recorder = self.clone();
        Arc::new(move |event: &TicketEvent, listeners: &[Listener]| {
            recorder
                .listeners
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(listeners.iter().map(|listener| listener.id).collect());
            let mut runs = recorder
                .runs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let id = match runs.first() {
                Some(first) if recorder.duplicate.load(Ordering::SeqCst) => *first,
                _ => RunId::new_v7(),
            };
            runs.push(id);
            recorder
                .events
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(event.clone());
            vec![NewRun {
                id,
                tenant: event.tenant.to_string(),
                kind: ROUTE.into(),
                payload: json!({ "event": event.id, "kind": event.kind.as_str() }),
                trigger: fronta_engine::Trigger::Event,
                unique_key: None,
                priority: 0,
                delay: None,
                run_at: None,
                max_retries: 3,
            }]
        })
    }

    fn listeners(&self) -> Vec<Vec<AutomationId>> {
        self.listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn events(&self) -> Vec<TicketEvent> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn last_run(&self) -> RunId {
        *self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last()
            .expect("the sink answered a run")
    }
}

/// A store with the recorder's sink installed and one tenant with an `order` type and
/// two enabled automations listening, one to `ticket.created`, one to `ticket.changed`.
struct SinkEnv {
    desk: Arc<dyn DeskStore>,
    runs: Arc<dyn RunStore>,
    automations: Arc<dyn AutomationStore>,
    recorder: Recorder,
    acme: TenantId,
    on_created: AutomationId,
    on_changed: AutomationId,
}

const ORDER: &str = "order";
const WAITING: &str = "waiting-to-pack";
const SHIPPED: &str = "shipped";

impl SinkEnv {
    async fn open(factory: &dyn AutomationStoreFactory) -> Self {
        let recorder = Recorder::default();
        let (desk, runs, automations) = factory.open_with_sink(recorder.sink()).await;
        let (acme, _) = desk.tenant_create("Acme").await.expect("tenant Acme");
        desk.ticket_type_create(acme.id, ORDER, &[WAITING.into(), SHIPPED.into()], &[])
            .await
            .expect("type order");
        let on_created = automations
            .automation_create(
                acme.id,
                listener("on created", "ticket.created"),
                None,
                fronta_automation::versions::BY_TENANT,
            )
            .await
            .expect("created listener")
            .id;
        let on_changed = automations
            .automation_create(
                acme.id,
                listener("on changed", "ticket.changed"),
                None,
                fronta_automation::versions::BY_TENANT,
            )
            .await
            .expect("changed listener")
            .id;
        Self {
            desk,
            runs,
            automations,
            recorder,
            acme: acme.id,
            on_created,
            on_changed,
        }
    }

    fn order(&self, external_id: &str) -> TicketUpsert {
        TicketUpsert {
            external_id: external_id.into(),
            title: Some(format!("Order {external_id}")),
            ticket_type: Some(ORDER.into()),
            status: Some(WAITING.into()),
            ..TicketUpsert::default()
        }
    }

    async fn run_ids(&self) -> Vec<RunId> {
        let mut ids: Vec<RunId> = self
            .runs
            .run_list(RunFilter::default())
            .await
            .expect("run_list succeeds")
            .into_iter()
            .map(|run| run.id)
            .collect();
        ids.sort();
        ids
    }
}

fn automation_origin() -> Origin {
    Origin::Automation {
        automation_id: "a-route".into(),
        run_id: "r-1".into(),
        chain: vec![],
    }
}

fn assert_v7(event: &TicketEvent) {
    let id = uuid::Uuid::parse_str(&event.id)
        .unwrap_or_else(|err| panic!("the event id {} is a UUID: {err}", event.id));
    assert_eq!(
        id.get_version_num(),
        7,
        "the event id is a UUIDv7: {}",
        event.id
    );
}

/// A create hands the sink one `ticket.created` event — the ticket as committed, an empty
/// change, the write's origin, a UUIDv7 id, `at` = the ticket's `updated_at` — and the run
/// the sink answered is in the run store, queued, as soon as the write returns.
pub async fn ticket_create_emits_one_created_event_and_its_run_commits_with_it(
    factory: &dyn AutomationStoreFactory,
) {
    let env = SinkEnv::open(factory).await;
    let write = env
        .desk
        .ticket_upsert(env.acme, env.order("o-1"), automation_origin())
        .await
        .expect("the create succeeds");
    assert!(write.created, "a new ticket");
    let events = env.recorder.events();
    assert_eq!(events.len(), 1, "one event for one create: {events:?}");
    let event = &events[0];
    assert_eq!(
        event.kind,
        TicketEventKind::Created,
        "a create is ticket.created"
    );
    assert_eq!(event.tenant, env.acme, "the event carries the tenant");
    assert_eq!(
        event.ticket, write.ticket,
        "the event carries the ticket as committed"
    );
    assert_eq!(
        env.desk
            .ticket_get(env.acme, write.ticket.id)
            .await
            .expect("the ticket reads"),
        event.ticket,
        "which is what a read shows"
    );
    assert!(
        event.change.is_empty(),
        "a create has no change map: {:?}",
        event.change
    );
    assert_eq!(
        event.origin,
        automation_origin(),
        "the event carries the write's origin"
    );
    assert_eq!(
        event.at, write.ticket.updated_at,
        "the event happened when the ticket was written"
    );
    assert_v7(event);

    let run = env
        .runs
        .run_get(env.recorder.last_run())
        .await
        .expect("run_get succeeds")
        .expect("the sink's run committed with the ticket");
    assert_eq!(
        (run.tenant.as_str(), run.kind.as_str(), run.status),
        (env.acme.to_string().as_str(), ROUTE, RunStatus::Queued),
        "the run is queued as the sink answered it"
    );
    assert_eq!(
        run.payload["event"],
        json!(event.id),
        "the run carries what the sink put in"
    );
}

/// A change, an upsert that attaches and changes something, and a least-busy assignment
/// that moves the assignee each hand the sink one `ticket.changed` event with the change
/// map the write answered and the write's origin; every event has its own id.
pub async fn ticket_changes_emit_changed_events_with_the_change_and_the_origin(
    factory: &dyn AutomationStoreFactory,
) {
    let env = SinkEnv::open(factory).await;
    let ticket = env
        .desk
        .ticket_upsert(env.acme, env.order("o-1"), Origin::Person)
        .await
        .expect("the create succeeds")
        .ticket;

    let changed = env
        .desk
        .ticket_change(
            env.acme,
            ticket.id,
            TicketChange {
                status: Some(SHIPPED.into()),
                add_tags: vec!["shipped".into()],
                ..TicketChange::default()
            },
            automation_origin(),
        )
        .await
        .expect("the change succeeds");
    let attached = env
        .desk
        .ticket_upsert(
            env.acme,
            TicketUpsert {
                tags: vec!["priority".into()],
                ..upsert("o-1")
            },
            Origin::Person,
        )
        .await
        .expect("the attaching upsert succeeds");
    assert!(!attached.created, "the upsert attached");
    let group = env
        .desk
        .group_create(env.acme, "warehouse")
        .await
        .expect("group");
    env.desk
        .member_add(env.acme, group.id, "Eva", None, 5)
        .await
        .expect("member");
    let assigned = env
        .desk
        .ticket_assign_least_busy(env.acme, ticket.id, "warehouse", automation_origin())
        .await
        .expect("the assignment succeeds");

    let events = env.recorder.events();
    assert_eq!(events.len(), 4, "a create and three changes: {events:?}");
    for (event, write, origin, what) in [
        (&events[1], &changed, automation_origin(), "the change"),
        (
            &events[2],
            &attached,
            Origin::Person,
            "the attaching upsert",
        ),
        (&events[3], &assigned, automation_origin(), "the assignment"),
    ] {
        assert_eq!(
            event.kind,
            TicketEventKind::Changed,
            "{what} is ticket.changed"
        );
        assert!(!write.change.is_empty(), "{what} changed something");
        assert_eq!(
            event.change, write.change,
            "{what}: the event carries the write's change map"
        );
        assert_eq!(
            event.ticket, write.ticket,
            "{what}: the event carries the ticket as committed"
        );
        assert_eq!(
            event.origin, origin,
            "{what}: the event carries the write's origin"
        );
        assert_eq!(
            event.at, write.ticket.updated_at,
            "{what}: at is when the ticket was written"
        );
        assert_v7(event);
    }
    assert_eq!(
        events[1]
            .change
            .get("status")
            .map(|change| (&change.from, &change.to)),
        Some((&json!(WAITING), &json!(SHIPPED))),
        "the status change is in the map: {:?}",
        events[1].change
    );
    let ids: std::collections::HashSet<&str> =
        events.iter().map(|event| event.id.as_str()).collect();
    assert_eq!(ids.len(), events.len(), "every event has its own id");
    assert_eq!(env.run_ids().await.len(), 4, "one run per event committed");
}

/// A change that changes nothing, an upsert that attaches without changing anything, and
/// a least-busy assignment that keeps the assignee announce nothing and insert no run.
pub async fn ticket_write_that_changes_nothing_emits_nothing(factory: &dyn AutomationStoreFactory) {
    let env = SinkEnv::open(factory).await;
    let ticket = env
        .desk
        .ticket_upsert(env.acme, env.order("o-1"), Origin::Person)
        .await
        .expect("the create succeeds")
        .ticket;
    let group = env
        .desk
        .group_create(env.acme, "warehouse")
        .await
        .expect("group");
    env.desk
        .member_add(env.acme, group.id, "Eva", None, 5)
        .await
        .expect("member");
    env.desk
        .ticket_assign_least_busy(env.acme, ticket.id, "warehouse", Origin::Person)
        .await
        .expect("the first assignment succeeds");
    let before = env.recorder.events().len();
    let runs_before = env.run_ids().await;
    assert_eq!(
        before, 2,
        "the create and the first assignment announced themselves"
    );

    let same = env
        .desk
        .ticket_change(
            env.acme,
            ticket.id,
            TicketChange {
                status: Some(WAITING.into()),
                ..TicketChange::default()
            },
            Origin::Person,
        )
        .await
        .expect("the no-op change succeeds");
    assert!(same.change.is_empty(), "the change changed nothing");
    let attached = env
        .desk
        .ticket_upsert(env.acme, env.order("o-1"), Origin::Person)
        .await
        .expect("the no-op upsert succeeds");
    assert!(
        !attached.created && attached.change.is_empty(),
        "the upsert attached and changed nothing"
    );
    let kept = env
        .desk
        .ticket_assign_least_busy(env.acme, ticket.id, "warehouse", Origin::Person)
        .await
        .expect("the second assignment succeeds");
    assert!(kept.change.is_empty(), "the assignee stayed");

    assert_eq!(
        env.recorder.events().len(),
        before,
        "writes that changed nothing announced nothing"
    );
    assert_eq!(env.run_ids().await, runs_before, "and inserted no run");
}

/// A refused write — a create or a change to a status outside the type — announces
/// nothing and inserts no run.
pub async fn refused_ticket_write_emits_nothing_and_inserts_no_run(
    factory: &dyn AutomationStoreFactory,
) {
    let env = SinkEnv::open(factory).await;
    let refused_create = env
        .desk
        .ticket_upsert(
            env.acme,
            TicketUpsert {
                status: Some("lost".into()),
                ..env.order("o-1")
            },
            Origin::Person,
        )
        .await;
    assert!(
        matches!(refused_create, Err(DeskError::Invalid(_))),
        "a status outside the type is refused on create: {refused_create:?}"
    );
    assert!(
        env.recorder.events().is_empty(),
        "a refused create announces nothing"
    );
    assert!(env.run_ids().await.is_empty(), "and inserts no run");

    let ticket = env
        .desk
        .ticket_upsert(env.acme, env.order("o-2"), Origin::Person)
        .await
        .expect("a valid create succeeds")
        .ticket;
    let runs_before = env.run_ids().await;
    let refused_change = env
        .desk
        .ticket_change(
            env.acme,
            ticket.id,
            TicketChange {
                status: Some("lost".into()),
                title: Some("renamed".into()),
                ..TicketChange::default()
            },
            Origin::Person,
        )
        .await;
    assert!(
        matches!(refused_change, Err(DeskError::Invalid(_))),
        "a status outside the type is refused on change: {refused_change:?}"
    );
    assert_eq!(
        env.recorder.events().len(),
        1,
        "only the valid create announced itself"
    );
    assert_eq!(
        env.run_ids().await,
        runs_before,
        "the refused change inserted no run"
    );
}

/// When the sink's run cannot be inserted (its id is taken), the ticket write fails and
/// leaves nothing: a failed create leaves no ticket (nor spends its number), a failed
/// change leaves the ticket and its log as they were, and no run is added.
pub async fn failing_run_insert_fails_the_ticket_write_and_leaves_no_trace(
    factory: &dyn AutomationStoreFactory,
) {
    let env = SinkEnv::open(factory).await;
    let first = env
        .desk
        .ticket_upsert(env.acme, env.order("o-1"), Origin::Person)
        .await
        .expect("the first create succeeds")
        .ticket;
    let runs_before = env.run_ids().await;
    assert_eq!(runs_before.len(), 1, "the first create inserted its run");
    let log_before = env
        .desk
        .ticket_log(env.acme, first.id)
        .await
        .expect("the log reads");

    env.recorder.duplicate.store(true, Ordering::SeqCst);
    let failed_change = env
        .desk
        .ticket_change(
            env.acme,
            first.id,
            TicketChange {
                status: Some(SHIPPED.into()),
                ..TicketChange::default()
            },
            Origin::Person,
        )
        .await;
    assert!(
        failed_change.is_err(),
        "the change fails with its run: {failed_change:?}"
    );
    assert_eq!(
        env.desk
            .ticket_get(env.acme, first.id)
            .await
            .expect("the ticket reads"),
        first,
        "the ticket is unchanged"
    );
    assert_eq!(
        env.desk
            .ticket_log(env.acme, first.id)
            .await
            .expect("the log reads"),
        log_before,
        "the log is unchanged"
    );
    let failed_create = env
        .desk
        .ticket_upsert(env.acme, env.order("o-2"), Origin::Person)
        .await;
    assert!(
        failed_create.is_err(),
        "the create fails with its run: {failed_create:?}"
    );
    let tickets = env
        .desk
        .ticket_list(env.acme, TicketFilter::default())
        .await
        .expect("ticket_list succeeds");
    assert_eq!(
        tickets.iter().map(|ticket| ticket.id).collect::<Vec<_>>(),
        vec![first.id],
        "the failed create left no ticket"
    );
    assert_eq!(env.run_ids().await, runs_before, "no run was added");

    env.recorder.duplicate.store(false, Ordering::SeqCst);
    let next = env
        .desk
        .ticket_upsert(env.acme, env.order("o-2"), Origin::Person)
        .await
        .expect("with an insertable run the create succeeds");
    assert_eq!(next.ticket.number, 2, "the failed create spent no number");
}

/// A run inserted by a ticket event wakes the run store's enqueue signal, like any
/// enqueue, so waiting workers claim it at once.
pub async fn runs_of_ticket_events_wake_the_enqueue_signal(factory: &dyn AutomationStoreFactory) {
    let env = SinkEnv::open(factory).await;
    let signal = env.runs.enqueue_signal();
    let notified = signal.notified();
    let mut notified = std::pin::pin!(notified);
    notified.as_mut().enable();
    env.desk
        .ticket_upsert(env.acme, env.order("o-1"), Origin::Person)
        .await
        .expect("the create succeeds");
    tokio::time::timeout(Duration::from_secs(30), notified)
        .await
        .expect("the enqueue signal fires after a ticket write that inserted a run");
}

/// The sink gets, with each event, exactly the tenant's enabled automations that listen
/// to it: `ticket.created` → the created listener, `ticket.changed` → the changed one.
pub async fn the_sink_gets_the_automations_listening_to_the_event(
    factory: &dyn AutomationStoreFactory,
) {
    let env = SinkEnv::open(factory).await;
    let write = env
        .desk
        .ticket_upsert(env.acme, env.order("L-1"), Origin::Person)
        .await
        .expect("create");
    env.desk
        .ticket_change(
            env.acme,
            write.ticket.id,
            TicketChange {
                status: Some(SHIPPED.into()),
                ..TicketChange::default()
            },
            Origin::Person,
        )
        .await
        .expect("change");
    assert_eq!(
        env.recorder.listeners(),
        vec![vec![env.on_created], vec![env.on_changed]],
        "each event reaches the sink with its own listeners"
    );
}

/// An event no enabled automation listens to never reaches the sink and starts nothing:
/// disabling the only `ticket.changed` listener silences changes.
pub async fn an_event_nobody_listens_to_reaches_no_sink(factory: &dyn AutomationStoreFactory) {
    let env = SinkEnv::open(factory).await;
    let write = env
        .desk
        .ticket_upsert(env.acme, env.order("L-2"), Origin::Person)
        .await
        .expect("create");
    env.automations
        .automation_set_enabled(
            env.acme,
            env.on_changed,
            false,
            fronta_automation::store::InFlight::Finish,
        )
        .await
        .expect("disable the changed listener");
    let runs_before = env.run_ids().await;
    env.desk
        .ticket_change(
            env.acme,
            write.ticket.id,
            TicketChange {
                status: Some(SHIPPED.into()),
                ..TicketChange::default()
            },
            Origin::Person,
        )
        .await
        .expect("change");
    let kinds: Vec<TicketEventKind> = env
        .recorder
        .events()
        .iter()
        .map(|event| event.kind)
        .collect();
    assert_eq!(
        kinds,
        vec![TicketEventKind::Created],
        "only the create (which has a listener) reached the sink"
    );
    assert_eq!(
        env.run_ids().await,
        runs_before,
        "the unheard change started no run"
    );
}

// ---------------------------------------------------------------------------------------
// Secrets (the `SecretStore` port)
// ---------------------------------------------------------------------------------------

fn sealed(version: u32, fill: u8) -> fronta_automation::secrets::SealedSecret {
    fronta_automation::secrets::SealedSecret {
        key_version: version,
        nonce: vec![fill; 24],
        // Zero bytes and high bytes: the store keeps bytes, not text.
        ciphertext: vec![0, fill, 255, 0, 1],
    }
}

/// Put creates or replaces, list shows names and versions only (by name), get answers
/// the bytes as given for the names that exist, delete removes (and says when nothing).
/// A toy cipher for the re-seal cases: "sealing" stores the value's bytes behind the
/// version; it opens only the versions it is given. Enough to see which key a value is on.
struct VersionCipher {
    current: u32,
    known: Vec<u32>,
}

impl fronta_automation::secrets::SecretCipher for VersionCipher {
    fn seal(
        &self,
        _tenant: TenantId,
        name: &str,
        value: &str,
    ) -> Result<fronta_automation::secrets::SealedSecret, fronta_automation::secrets::SecretError>
    {
        Ok(fronta_automation::secrets::SealedSecret {
            key_version: self.current,
            nonce: name.as_bytes().to_vec(),
            ciphertext: format!("{}:{value}", self.current).into_bytes(),
        })
    }

    fn open(
        &self,
        _tenant: TenantId,
        _name: &str,
        sealed: &fronta_automation::secrets::SealedSecret,
    ) -> Result<String, fronta_automation::secrets::SecretError> {
        if !self.known.contains(&sealed.key_version) {
            return Err(fronta_automation::secrets::SecretError::UnknownKeyVersion(
                sealed.key_version,
            ));
        }
        let text = String::from_utf8(sealed.ciphertext.clone()).unwrap_or_default();
        let (_, value) = text.split_once(':').unwrap_or(("", ""));
        Ok(value.to_owned())
    }

    fn current_version(&self) -> u32 {
        self.current
    }
}

/// `secrets_page` walks every tenant's secrets in `(tenant, name)` order; `secret_reseal`
/// replaces a value only while it is still the one read; [`reseal_all`] re-seals every
/// value on an older key in batches, counts, keeps what it cannot open and, run again,
/// finds everything current — after which the old key is not needed to open anything.
///
/// [`reseal_all`]: fronta_automation::secrets::reseal_all
pub async fn secrets_are_resealed_with_the_current_key_in_batches_and_again_changes_nothing(
    factory: &dyn AutomationStoreFactory,
) {
    use fronta_automation::secrets::{SecretCipher, reseal_all};
    let (secrets, desk) = factory.open_secrets().await;
    let old = VersionCipher {
        current: 1,
        known: vec![1],
    };
    let mut tenants = Vec::new();
    for name in ["Acme", "Globex", "Initech"] {
        tenants.push(desk.tenant_create(name).await.expect("tenant").0.id);
    }
    for (at, tenant) in tenants.iter().enumerate() {
        for name in ["a", "b", "c"] {
            let sealed = old
                .seal(*tenant, name, &format!("value-{at}-{name}"))
                .expect("sealed");
            secrets
                .secret_put(*tenant, name, sealed)
                .await
                .expect("put");
        }
    }
    let mut walked = Vec::new();
    let mut after = None;
    loop {
        let page = secrets
            .secrets_page(after.clone(), 4)
            .await
            .expect("a page");
        assert!(page.len() <= 4, "at most the limit");
        let Some(last) = page.last() else { break };
        after = Some((last.tenant, last.name.clone()));
        walked.extend(page.into_iter().map(|s| (s.tenant, s.name)));
    }
    let mut expected: Vec<(TenantId, String)> = tenants
        .iter()
        .flat_map(|t| ["a", "b", "c"].map(|n| (*t, n.to_owned())))
        .collect();
    expected.sort();
    assert_eq!(
        walked, expected,
        "every secret once, in (tenant, name) order"
    );

    // A value replaced after the walk read it is kept.
    let read = secrets
        .secrets_get(tenants[0], &["a".to_owned()])
        .await
        .expect("get")
        .remove(0)
        .1;
    let newer = VersionCipher {
        current: 2,
        known: vec![1, 2],
    };
    secrets
        .secret_put(
            tenants[0],
            "a",
            newer
                .seal(tenants[0], "a", "written-meanwhile")
                .expect("sealed"),
        )
        .await
        .expect("put");
    let stale = secrets
        .secret_reseal(
            tenants[0],
            "a",
            &read,
            newer.seal(tenants[0], "a", "stale").expect("sealed"),
        )
        .await
        .expect("reseal answers");
    assert!(!stale, "a value written meanwhile is not replaced");

    // An unknown version is kept and reported.
    secrets
        .secret_put(tenants[1], "lost", sealed(9, 1))
        .await
        .expect("put");
    let mut batches = 0;
    let count = reseal_all(secrets.as_ref(), &newer, 4, |_| batches += 1)
        .await
        .expect("resealed");
    assert_eq!(count.seen, 10, "nine plus the lost one");
    assert_eq!(
        count.resealed, 8,
        "all on version 1 but the one written meanwhile"
    );
    assert_eq!(
        count.current, 1,
        "the one written meanwhile is on version 2"
    );
    assert_eq!(count.failed.len(), 1, "the lost one");
    assert_eq!(count.failed[0].1, "lost");
    assert_eq!(batches, 3, "ten secrets in batches of four");

    let again = reseal_all(secrets.as_ref(), &newer, 4, |_| {})
        .await
        .expect("again");
    assert_eq!(
        (again.resealed, again.current),
        (0, 9),
        "nothing more to do"
    );

    let only_new = VersionCipher {
        current: 2,
        known: vec![2],
    };
    for (at, tenant) in tenants.iter().enumerate() {
        let names = ["a", "b", "c"].map(str::to_owned).to_vec();
        for (name, sealed) in secrets.secrets_get(*tenant, &names).await.expect("get") {
            assert_eq!(sealed.key_version, 2, "{name} is on version 2");
            let value = only_new
                .open(*tenant, &name, &sealed)
                .expect("opens without the old key");
            if at == 0 && name == "a" {
                assert_eq!(value, "written-meanwhile");
            } else {
                assert_eq!(value, format!("value-{at}-{name}"), "the same value");
            }
        }
    }
}

pub async fn secrets_are_put_listed_read_replaced_and_deleted(
    factory: &dyn AutomationStoreFactory,
) {
    let (secrets, desk) = factory.open_secrets().await;
    let (acme, _) = desk.tenant_create("Acme").await.expect("tenant");
    let acme = acme.id;
    let first = secrets
        .secret_put(acme, "shop", sealed(1, 7))
        .await
        .expect("put creates");
    assert_eq!(
        (first.name.as_str(), first.key_version),
        ("shop", 1),
        "the info of the new secret"
    );
    secrets
        .secret_put(acme, "crm", sealed(1, 8))
        .await
        .expect("a second secret");
    let names: Vec<(String, u32)> = secrets
        .secret_list(acme)
        .await
        .expect("list")
        .into_iter()
        .map(|info| (info.name, info.key_version))
        .collect();
    assert_eq!(
        names,
        vec![("crm".into(), 1), ("shop".into(), 1)],
        "ordered by name"
    );

    let replaced = secrets
        .secret_put(acme, "shop", sealed(2, 9))
        .await
        .expect("put replaces");
    assert_eq!(replaced.key_version, 2, "the new key version");
    assert!(
        replaced.updated_at >= first.updated_at,
        "updated_at moves forward"
    );
    let got = secrets
        .secrets_get(acme, &["shop".into(), "missing".into(), "crm".into()])
        .await
        .expect("get");
    assert_eq!(
        got,
        vec![
            ("crm".to_string(), sealed(1, 8)),
            ("shop".to_string(), sealed(2, 9))
        ],
        "the existing ones, by name, bytes exactly as given; a missing name is absent"
    );

    secrets.secret_delete(acme, "shop").await.expect("delete");
    assert!(
        secrets
            .secrets_get(acme, &["shop".into()])
            .await
            .expect("get")
            .is_empty(),
        "deleted"
    );
    assert_not_found(
        secrets.secret_delete(acme, "shop").await,
        "deleting it again",
    );
}

/// Another tenant's secret answers exactly like a missing one; a write for an unknown
/// tenant is `NotFound`.
pub async fn another_tenants_secret_answers_exactly_like_a_missing_one(
    factory: &dyn AutomationStoreFactory,
) {
    let (secrets, desk) = factory.open_secrets().await;
    let (acme, _) = desk.tenant_create("Acme").await.expect("tenant");
    let (globex, _) = desk.tenant_create("Globex").await.expect("tenant");
    secrets
        .secret_put(globex.id, "token", sealed(1, 3))
        .await
        .expect("Globex's secret");
    assert!(
        secrets.secret_list(acme.id).await.expect("list").is_empty(),
        "Acme sees none"
    );
    assert!(
        secrets
            .secrets_get(acme.id, &["token".into()])
            .await
            .expect("get")
            .is_empty(),
        "Acme cannot read Globex's"
    );
    let theirs = expect_err(
        secrets.secret_delete(acme.id, "token").await,
        "their delete",
    );
    let unknown = expect_err(
        secrets.secret_delete(acme.id, "never").await,
        "unknown delete",
    );
    assert_eq!(
        theirs, unknown,
        "another tenant's answers exactly like a missing one"
    );
    assert_eq!(
        secrets
            .secrets_get(globex.id, &["token".into()])
            .await
            .expect("get")
            .len(),
        1,
        "Globex's secret is untouched"
    );
    assert_not_found(
        secrets
            .secret_put(TenantId::new(), "token", sealed(1, 1))
            .await,
        "a put for an unknown tenant",
    );
}

// The service limits cases live in their own module and run in this suite.
pub use crate::limits_cases::*;
pub use crate::mail_cases::*;
pub use crate::poll_cases::*;
pub use crate::widget_cases::*;
fn mcp_server(name: &str, url: &str) -> fronta_automation::mcp::McpServer {
    fronta_automation::mcp::McpServer {
        name: name.to_owned(),
        transport: fronta_automation::mcp::McpTransport::Http {
            url: url.to_owned(),
            headers: [(
                "Authorization".to_owned(),
                "Bearer {{secrets.crm_token}}".to_owned(),
            )]
            .into_iter()
            .collect(),
        },
        timeout_sec: 12,
    }
}

/// Put creates or replaces whole, get answers it exactly as given, list orders by name,
/// delete removes (and says when nothing).
pub async fn mcp_servers_are_put_listed_read_replaced_and_deleted(
    factory: &dyn AutomationStoreFactory,
) {
    let (servers, desk) = factory.open_mcp_servers().await;
    let (acme, _) = desk.tenant_create("Acme").await.expect("tenant");
    let acme = acme.id;
    let crm = mcp_server("crm", "https://mcp.crm.test/mcp");
    assert_eq!(
        servers
            .mcp_server_put(acme, crm.clone())
            .await
            .expect("put"),
        crm,
        "put answers the server"
    );
    let local = fronta_automation::mcp::McpServer {
        name: "billing".into(),
        transport: fronta_automation::mcp::McpTransport::Stdio {
            command: "billing-mcp".into(),
            args: vec!["--quiet".into()],
        },
        timeout_sec: 5,
    };
    servers
        .mcp_server_put(acme, local.clone())
        .await
        .expect("a second server");
    assert_eq!(
        servers.mcp_server_get(acme, "crm").await.expect("get"),
        Some(crm.clone()),
        "exactly as given"
    );
    assert_eq!(
        servers.mcp_server_list(acme).await.expect("list"),
        vec![local.clone(), crm],
        "ordered by name"
    );
    let replaced = mcp_server("crm", "https://other.crm.test/mcp");
    servers
        .mcp_server_put(acme, replaced.clone())
        .await
        .expect("put replaces");
    assert_eq!(
        servers.mcp_server_get(acme, "crm").await.expect("get"),
        Some(replaced),
        "replaced whole"
    );
    servers
        .mcp_server_delete(acme, "crm")
        .await
        .expect("delete");
    assert_eq!(
        servers.mcp_server_get(acme, "crm").await.expect("get"),
        None,
        "deleted"
    );
    assert_not_found(
        servers.mcp_server_delete(acme, "crm").await,
        "deleting it again",
    );
    assert_eq!(
        servers.mcp_server_list(acme).await.expect("list"),
        vec![local],
        "the other one stays"
    );
}

/// Another tenant's MCP server answers exactly like a missing one; a write for an
/// unknown tenant is `NotFound`.
pub async fn another_tenants_mcp_server_answers_exactly_like_a_missing_one(
    factory: &dyn AutomationStoreFactory,
) {
    let (servers, desk) = factory.open_mcp_servers().await;
    let (acme, _) = desk.tenant_create("Acme").await.expect("tenant");
    let (globex, _) = desk.tenant_create("Globex").await.expect("tenant");
    servers
        .mcp_server_put(globex.id, mcp_server("crm", "https://mcp.crm.test/mcp"))
        .await
        .expect("Globex's server");
    assert!(
        servers
            .mcp_server_list(acme.id)
            .await
            .expect("list")
            .is_empty(),
        "Acme sees none"
    );
    assert_eq!(
        servers.mcp_server_get(acme.id, "crm").await.expect("get"),
        None,
        "Acme cannot read it"
    );
    assert_not_found(
        servers.mcp_server_delete(acme.id, "crm").await,
        "Acme cannot delete it",
    );
    assert!(
        servers
            .mcp_server_get(globex.id, "crm")
            .await
            .expect("get")
            .is_some(),
        "Globex still has it"
    );
    assert_not_found(
        servers
            .mcp_server_put(
                fronta_desk::TenantId::new(),
                mcp_server("crm", "https://mcp.crm.test/mcp"),
            )
            .await
            .map(|_| ()),
        "a write for an unknown tenant",
    );
}

/// What a tenant has that a setup can touch, for comparing before and after.
async fn setup_snapshot(env: &Env, tenant: TenantId) -> Value {
    let types = env.desk.ticket_type_list(tenant).await.expect("types");
    let mut groups = Vec::new();
    for group in env.desk.group_list(tenant).await.expect("groups") {
        let members = env
            .desk
            .member_list(tenant, group.id)
            .await
            .expect("members");
        groups.push(json!({"group": group, "members": members}));
    }
    let mut automations = Vec::new();
    for stored in env.automations.automation_list(tenant).await.expect("list") {
        let versions = env
            .automations
            .automation_versions(tenant, stored.id, None, 100)
            .await
            .expect("versions");
        automations.push(json!({
            "id": stored.id.to_string(),
            "definition": stored.automation,
            "currentVersion": stored.current_version,
            "versions": versions.len(),
        }));
    }
    json!({"types": types, "groups": groups, "automations": automations})
}

/// `setup_apply` writes a whole setup in one transaction: a refusal of any item — the
/// last automation, or a type update a held status blocks — names that item and leaves
/// the tenant exactly as it was (types, groups, members, automations and their versions);
/// a plan that is sound is written whole and answers what each item did.
pub async fn a_setup_is_written_whole_or_not_at_all(factory: &dyn AutomationStoreFactory) {
    use fronta_automation::setup::{
        Action, AutomationWrite, GroupPlan, GroupWrite, MemberWrite, SetupPlan, TypeWrite,
        WantedAutomation,
    };
    let env = Env::open(factory).await;
    let order = env
        .desk
        .ticket_type_create(
            env.acme,
            "order",
            &["waiting".to_string(), "shipped".to_string()],
            &[],
        )
        .await
        .expect("type order");
    env.desk
        .ticket_upsert(
            env.acme,
            TicketUpsert {
                external_id: "o-1".into(),
                ticket_type: Some("order".into()),
                status: Some("shipped".into()),
                ..TicketUpsert::default()
            },
            Origin::Person,
        )
        .await
        .expect("an open ticket holds shipped");
    let existing = env.create(env.acme, manual("Existing")).await;
    let edited = parse(json!({"name": "Existing", "trigger": {"type": "manual"},
                              "steps": steps("edited")}));
    let writes = |last: AutomationWrite, types: Vec<TypeWrite>| SetupPlan {
        ticket_types: types,
        groups: vec![GroupPlan {
            group: GroupWrite::Create(
                fronta_desk::plan::group_new(env.acme, "warehouse").expect("a group"),
            ),
            members: vec![MemberWrite::Add {
                name: "Eva".into(),
                email: None,
                capacity: 5,
                available: true,
            }],
        }],
        automations: vec![
            AutomationWrite::Update {
                id: existing.id,
                automation: edited.clone(),
            },
            AutomationWrite::Create(WantedAutomation {
                automation: manual("Fresh"),
                signing_secret: None,
            }),
            last,
        ],
    };
    let new_type = || {
        TypeWrite::Create(
            fronta_desk::plan::type_new(env.acme, "return", &["new".to_string()], &[])
                .expect("a type"),
        )
    };
    let before = setup_snapshot(&env, env.acme).await;

    // The last automation's name is taken (by the one created two items before).
    let refused = env
        .automations
        .setup_apply(
            env.acme,
            writes(
                AutomationWrite::Create(WantedAutomation {
                    automation: manual("Fresh"),
                    signing_secret: None,
                }),
                vec![new_type()],
            ),
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect_err("a taken name refuses the setup");
    assert_eq!(
        refused.at.as_deref(),
        Some("automations[2]"),
        "names the item: {refused:?}"
    );
    assert!(
        matches!(refused.error, DeskError::Conflict(_)),
        "{refused:?}"
    );
    assert_eq!(
        setup_snapshot(&env, env.acme).await,
        before,
        "nothing of the refused setup was kept"
    );

    // A type update removing a status an open ticket holds, after a type create.
    let refused = env
        .automations
        .setup_apply(
            env.acme,
            writes(
                AutomationWrite::Create(WantedAutomation {
                    automation: manual("Third"),
                    signing_secret: None,
                }),
                vec![
                    new_type(),
                    TypeWrite::Update {
                        id: order.id,
                        statuses: vec!["waiting".into()],
                        fields: vec![],
                    },
                ],
            ),
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect_err("a held status refuses the setup");
    assert_eq!(refused.at.as_deref(), Some("ticketTypes[1]"), "{refused:?}");
    assert!(
        matches!(&refused.error, DeskError::InUse { message, .. } if message.contains("shipped")),
        "says which status: {refused:?}"
    );
    assert_eq!(
        setup_snapshot(&env, env.acme).await,
        before,
        "the type created first was rolled back"
    );

    // Sound: written whole.
    let applied = env
        .automations
        .setup_apply(
            env.acme,
            writes(
                AutomationWrite::Create(WantedAutomation {
                    automation: manual("Third"),
                    signing_secret: None,
                }),
                vec![new_type(), TypeWrite::Keep(order.clone())],
            ),
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("a sound setup is written");
    let actions: Vec<Action> = applied
        .automations
        .iter()
        .map(|(_, action)| *action)
        .collect();
    assert_eq!(
        actions,
        vec![Action::Updated, Action::Created, Action::Created],
        "what each automation did"
    );
    assert_eq!(
        applied.automations[0].0.current_version, 2,
        "the edit is a new version"
    );
    assert_eq!(
        applied.groups[0].members[0].2,
        Action::Created,
        "the member was added"
    );
    let after = setup_snapshot(&env, env.acme).await;
    assert_eq!(after["types"].as_array().map(Vec::len), Some(2), "{after}");
    assert_eq!(after["groups"][0]["members"][0]["name"], "Eva", "{after}");
    assert_eq!(
        after["automations"].as_array().map(Vec::len),
        Some(3),
        "{after}"
    );
}

/// Names in a definition are bound to ids when saved: renaming a group or a ticket type
/// rewrites the current definitions that name it (no new version: saving it back makes
/// none), older versions keep their refs, and a group, a ticket type or a status that a
/// current version names cannot be removed (`InUse`, naming the automation and its steps)
/// until no automation names it.
pub async fn renames_keep_automations_working_and_what_they_use_stays(
    factory: &dyn AutomationStoreFactory,
) {
    use fronta_desk::UsedBy;
    let env = Env::open(factory).await;
    let group = env
        .desk
        .group_create(env.acme, "support")
        .await
        .expect("group");
    let it = env
        .desk
        .ticket_type_create(
            env.acme,
            "it-problem",
            &["new".to_string(), "solving".to_string()],
            &[],
        )
        .await
        .expect("type");
    let route = env
        .create(
            env.acme,
            parse(json!({
                "name": "Route", "trigger": {"type": "event", "event": CREATED},
                "steps": [{"name": "c", "type": "condition",
                           "rules": [{"field": "ticket.type", "operator": "eq", "value": "it-problem"}],
                           "then": [
                               {"name": "assign", "op": "ticket/assign-least-busy",
                                "input": {"ticket": "{{ticket.id}}", "group": "support"}},
                               {"name": "status", "op": "ticket/set-status",
                                "input": {"ticket": "{{ticket.id}}", "status": "solving"}}]}]
            })),
        )
        .await;
    let first = env
        .automations
        .automation_version(env.acme, route.id, 1)
        .await
        .expect("version 1");
    assert!(
        first
            .refs
            .iter()
            .any(|r| r.id == Some(group.id.0) && r.name == "support"),
        "the group is bound by id: {:?}",
        first.refs
    );
    env.desk
        .ticket_type_update(env.acme, it.id, Some("itp"), None, None)
        .await
        .expect("type renamed");
    env.desk
        .group_rename(env.acme, group.id, "helpdesk")
        .await
        .expect("group renamed");
    let renamed = env.get(env.acme, route.id).await;
    let text = serde_json::to_string(&renamed.automation).expect("serializes");
    assert!(
        text.contains("\"itp\"") && text.contains("\"helpdesk\""),
        "the current definition shows the new names: {text}"
    );
    assert!(
        !text.contains("it-problem") && !text.contains("\"support\""),
        "and not the old ones: {text}"
    );
    assert_eq!(renamed.current_version, 1, "a rename makes no version");
    let saved_back = env
        .update(env.acme, route.id, renamed.automation.clone())
        .await;
    assert_eq!(
        saved_back.current_version, 1,
        "saving back what a rename shows makes no version"
    );

    let in_use = |result: Result<(), DeskError>, what: &str| match result {
        Err(DeskError::InUse { message, used_by }) => {
            assert!(message.contains("Route"), "{what}: names it: {message}");
            used_by
        }
        other => panic!("{what}: expected InUse, got {other:?}"),
    };
    let by_group = in_use(
        env.desk.group_delete(env.acme, group.id).await,
        "deleting the group",
    );
    assert_eq!(
        by_group,
        vec![UsedBy::Automation {
            id: route.id.to_string(),
            name: "Route".into(),
            steps: vec!["assign".into()],
        }],
        "the automation and its step"
    );
    let by_status = in_use(
        env.desk
            .ticket_type_update(env.acme, it.id, None, Some(&["new".to_string()]), None)
            .await
            .map(|_| ()),
        "removing the status",
    );
    assert!(
        matches!(&by_status[0], UsedBy::Automation { steps, .. } if steps == &vec!["status".to_string()]),
        "{by_status:?}"
    );
    in_use(
        env.desk.ticket_type_delete(env.acme, it.id).await,
        "deleting the type",
    );
    assert!(
        env.desk.ticket_type_get(env.acme, it.id).await.is_ok()
            && env.desk.group_get(env.acme, group.id).await.is_ok(),
        "refused removals removed nothing"
    );

    env.automations
        .automation_delete(env.acme, route.id)
        .await
        .expect("automation deleted");
    env.desk
        .ticket_type_delete(env.acme, it.id)
        .await
        .expect("nothing uses the type now");
    env.desk
        .group_delete(env.acme, group.id)
        .await
        .expect("nothing uses the group now");
    assert!(
        env.desk.ticket_type_get(env.acme, it.id).await.is_err(),
        "the type is gone"
    );
}

/// What a store opened on a database saved before automation versions and references
/// must show of the automation `id` of `tenant`, which names the group `group`
/// ("support") in a `ticket/assign-least-busy` step: version 1 with its hash, no version
/// for an unchanged save, a rename of the group carried to its definition, and the group
/// kept while it names it. Called by each store's migration test after it built the old
/// database by hand.
pub async fn an_automation_saved_before_versions_is_version_1_and_follows_renames(
    automations: &dyn AutomationStore,
    desk: &dyn DeskStore,
    tenant: TenantId,
    id: AutomationId,
    group: fronta_desk::GroupId,
) {
    let stored = automations.automation_get(tenant, id).await.expect("reads");
    assert_eq!(stored.current_version, 1, "an old automation is version 1");
    let first = automations
        .automation_version(tenant, id, 1)
        .await
        .expect("version 1 exists");
    assert!(
        first.hash.starts_with("sha256:"),
        "with its hash: {}",
        first.hash
    );
    let saved = automations
        .automation_update(
            tenant,
            id,
            stored.automation.clone(),
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("saved unchanged");
    assert_eq!(
        saved.current_version, 1,
        "saving it unchanged makes no version"
    );
    desk.group_rename(tenant, group, "helpdesk")
        .await
        .expect("renamed");
    let after = automations.automation_get(tenant, id).await.expect("reads");
    assert!(
        serde_json::to_string(&after.automation)
            .expect("json")
            .contains("\"helpdesk\""),
        "the rename reached the old automation: {:?}",
        after.automation
    );
    assert!(
        matches!(
            desk.group_delete(tenant, group).await,
            Err(DeskError::InUse { .. })
        ),
        "the group it names is kept"
    );
}
