//! Desk cases: the `DeskStore` port called directly, pinning every line of its
//! `# Contract` (see `fronta_desk::store`) — tenants and token lookup by hash, names and
//! their uniqueness, tenant isolation (another tenant's id answers exactly like an unknown
//! one, lists never show another tenant's rows), ticket numbers, upsert by external id,
//! statuses within the type, the `change` map, the ticket log, least-busy assignment
//! (alone and concurrent), incidents, and `ticket_list`'s filters and pages.
//!
//! It also pins what the contract leaves open, so every store decides alike: a change that
//! changes nothing logs nothing; a least-busy run does not count the ticket it assigns;
//! deleting a member unassigns its open tickets (closed ones keep who handled them);
//! renames reach the tickets; `null` removes a custom field; resolving twice is a no-op;
//! lists are ordered (tenants by creation, groups, members and types by name, tickets
//! newest number first, incidents newest first).
//!
//! Only ASCII names are compared for order, so a store's collation cannot matter. The
//! store's clock is its own here (no case moves time), so instants are compared only with
//! each other.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use fronta_desk::store::{
    FieldChange, IncidentReport, OnExisting, TicketChange, TicketFilter, TicketUpsert, TicketWrite,
};
use fronta_desk::{
    DeskError, DeskStore, FieldDef, FieldType, Group, GroupId, IncidentId, IncidentStatus, Keep,
    Member, MemberId, Origin, TenantId, TenantRetention, Ticket, TicketId, TicketLogEntry,
    TicketType, TicketTypeId,
};
use serde_json::{Value, json};

use crate::DeskStoreFactory;

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

/// The ticket type most cases use, and its statuses.
const ORDER: &str = "order";
const WAITING: &str = "waiting-to-pack";
const SHIPPED: &str = "shipped";
/// A second type whose statuses differ from [`ORDER`]'s.
const ERROR: &str = "error";
const NEW: &str = "new";
const FIXED: &str = "fixed";

/// A fresh store with two tenants: `acme` (most cases work in it) and `globex` (the other
/// tenant of the isolation cases).
struct Desk {
    store: Arc<dyn DeskStore>,
    acme: TenantId,
    globex: TenantId,
}

impl Desk {
    async fn open(factory: &dyn DeskStoreFactory) -> Self {
        let store = factory.open_desk().await;
        let (acme, _) = store
            .tenant_create("Acme")
            .await
            .expect("tenant Acme is created");
        let (globex, _) = store
            .tenant_create("Globex")
            .await
            .expect("tenant Globex is created");
        Self {
            store,
            acme: acme.id,
            globex: globex.id,
        }
    }

    async fn group(&self, tenant: TenantId, name: &str) -> Group {
        self.store
            .group_create(tenant, name)
            .await
            .unwrap_or_else(|err| panic!("group {name} is created: {err}"))
    }

    async fn member(&self, tenant: TenantId, group: GroupId, name: &str, capacity: u32) -> Member {
        self.store
            .member_add(tenant, group, name, None, capacity)
            .await
            .unwrap_or_else(|err| panic!("member {name} is added: {err}"))
    }

    /// A group with members of the given capacities, in that order.
    async fn team(&self, tenant: TenantId, name: &str, people: &[(&str, u32)]) -> Vec<Member> {
        let group = self.group(tenant, name).await;
        let mut members = Vec::new();
        for (person, capacity) in people {
            members.push(self.member(tenant, group.id, person, *capacity).await);
        }
        members
    }

    /// The [`ORDER`] type (statuses waiting-to-pack, shipped; field `amount`) and the
    /// [`ERROR`] type (statuses new, fixed).
    async fn types(&self, tenant: TenantId) -> (TicketType, TicketType) {
        let order = self
            .store
            .ticket_type_create(
                tenant,
                ORDER,
                &[WAITING.into(), SHIPPED.into()],
                &[
                    FieldDef {
                        name: "amount".into(),
                        field_type: FieldType::Number,
                    },
                    FieldDef {
                        name: "carrier".into(),
                        field_type: FieldType::String,
                    },
                    FieldDef {
                        name: "keep".into(),
                        field_type: FieldType::String,
                    },
                ],
            )
            .await
            .expect("type order is created");
        let error = self
            .store
            .ticket_type_create(tenant, ERROR, &[NEW.into(), FIXED.into()], &[])
            .await
            .expect("type error is created");
        (order, error)
    }

    async fn upsert(&self, tenant: TenantId, upsert: TicketUpsert) -> TicketWrite {
        let external_id = upsert.external_id.clone();
        self.store
            .ticket_upsert(tenant, upsert, Origin::Person)
            .await
            .unwrap_or_else(|err| panic!("upsert of {external_id} succeeds: {err}"))
    }

    /// A new untyped ticket with only an external id; its number is returned with it.
    async fn ticket(&self, tenant: TenantId, external_id: &str) -> Ticket {
        let write = self.upsert(tenant, upsert(external_id)).await;
        assert!(write.created, "{external_id} is a new ticket");
        write.ticket
    }

    async fn change(&self, tenant: TenantId, id: TicketId, change: TicketChange) -> TicketWrite {
        self.store
            .ticket_change(tenant, id, change, Origin::Person)
            .await
            .unwrap_or_else(|err| panic!("change of ticket {id} succeeds: {err}"))
    }

    async fn assign(&self, tenant: TenantId, id: TicketId, member: MemberId) -> TicketWrite {
        self.change(
            tenant,
            id,
            TicketChange {
                assignee: Some(Some(member)),
                ..TicketChange::default()
            },
        )
        .await
    }

    async fn close(&self, tenant: TenantId, id: TicketId) -> TicketWrite {
        self.change(
            tenant,
            id,
            TicketChange {
                closed: Some(true),
                ..TicketChange::default()
            },
        )
        .await
    }

    async fn least_busy(&self, tenant: TenantId, id: TicketId, group: &str) -> TicketWrite {
        self.store
            .ticket_assign_least_busy(tenant, id, group, automation("assign", "run-assign"))
            .await
            .unwrap_or_else(|err| panic!("least-busy assignment in {group} succeeds: {err}"))
    }

    async fn get(&self, tenant: TenantId, id: TicketId) -> Ticket {
        self.store
            .ticket_get(tenant, id)
            .await
            .unwrap_or_else(|err| panic!("ticket {id} reads: {err}"))
    }

    async fn log(&self, tenant: TenantId, id: TicketId) -> Vec<TicketLogEntry> {
        self.store
            .ticket_log(tenant, id)
            .await
            .unwrap_or_else(|err| panic!("log of ticket {id} reads: {err}"))
    }

    async fn list(&self, tenant: TenantId, filter: TicketFilter) -> Vec<i64> {
        self.store
            .ticket_list(tenant, filter.clone())
            .await
            .unwrap_or_else(|err| panic!("ticket_list {filter:?} succeeds: {err}"))
            .iter()
            .map(|ticket| ticket.number)
            .collect()
    }
}

/// An upsert naming only its external id.
fn upsert(external_id: &str) -> TicketUpsert {
    TicketUpsert {
        external_id: external_id.into(),
        ..TicketUpsert::default()
    }
}

/// An upsert of an [`ORDER`] waiting to be packed, tagged so.
fn order(external_id: &str) -> TicketUpsert {
    TicketUpsert {
        external_id: external_id.into(),
        title: Some(format!("Order {external_id}")),
        ticket_type: Some(ORDER.into()),
        status: Some(WAITING.into()),
        tags: vec![WAITING.into()],
        ..TicketUpsert::default()
    }
}

fn automation(automation_id: &str, run_id: &str) -> Origin {
    Origin::Automation {
        automation_id: automation_id.into(),
        run_id: run_id.into(),
        chain: vec![],
    }
}

fn report(cause: &str, title: &str) -> IncidentReport {
    IncidentReport {
        cause: cause.into(),
        title: title.into(),
        impact: "We lost no data.".into(),
        detail: json!({ "automation": "a-1", "run": "r-1", "message": "boom" }),
        ticket: None,
    }
}

/// `{from, to}` of one field of a change.
fn moved(from: Value, to: Value) -> FieldChange {
    FieldChange { from, to }
}

fn assignee_json(member: &Member) -> Value {
    json!({ "id": member.id.to_string(), "name": member.name })
}

fn expect_err<T: std::fmt::Debug>(result: Result<T, DeskError>, what: &str) -> DeskError {
    match result {
        Ok(value) => panic!("{what}: expected an error, got {value:?}"),
        Err(err) => err,
    }
}

fn assert_invalid<T: std::fmt::Debug>(result: Result<T, DeskError>, what: &str) -> String {
    match expect_err(result, what) {
        DeskError::Invalid(message) => message,
        other => panic!("{what}: expected Invalid, got {other:?}"),
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
// Tenants and tokens
// ---------------------------------------------------------------------------------------

/// `tenant_create` returns the tenant and a prefixed token, different per tenant;
/// `tenant_by_token` finds the tenant by that token only: a wrong token, the token's hash
/// (what the store keeps) and a token with one character changed find nothing.
pub async fn tenant_token_is_found_by_its_hash_only(factory: &dyn DeskStoreFactory) {
    let store = factory.open_desk().await;
    let (acme, acme_token) = store.tenant_create("Acme").await.expect("Acme is created");
    let (globex, globex_token) = store
        .tenant_create("Globex")
        .await
        .expect("Globex is created");
    assert_eq!(acme.name, "Acme", "the tenant keeps its name");
    assert_ne!(acme.id, globex.id, "two tenants, two ids");
    assert!(
        acme_token.starts_with(fronta_desk::token::TENANT_TOKEN_PREFIX),
        "a tenant token carries the tenant prefix: {acme_token}"
    );
    assert_ne!(acme_token, globex_token, "every tenant gets its own token");

    let found = |token: String| {
        let store = store.clone();
        async move {
            store
                .tenant_by_token(&token)
                .await
                .expect("tenant_by_token succeeds")
        }
    };
    assert_eq!(
        found(acme_token.clone()).await,
        Some(acme.clone()),
        "Acme's token finds Acme as created"
    );
    assert_eq!(
        found(globex_token.clone()).await,
        Some(globex.clone()),
        "Globex's token finds Globex"
    );
    assert_eq!(
        found("ft_not-a-token".into()).await,
        None,
        "a wrong token finds nothing"
    );
    assert_eq!(
        found(String::new()).await,
        None,
        "an empty token finds nothing"
    );
    assert_eq!(
        found(fronta_desk::token::hash(&acme_token)).await,
        None,
        "the stored hash is not a token: presenting it finds nothing"
    );
    let mut altered = acme_token.clone();
    let last = altered.pop().expect("a token is not empty");
    altered.push(if last == '0' { '1' } else { '0' });
    assert_eq!(
        found(altered).await,
        None,
        "a token with one character changed finds nothing"
    );
}

/// `tenant_list` shows every tenant, in creation order.
pub async fn tenant_list_shows_every_tenant_in_creation_order(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let (initech, _) = desk
        .store
        .tenant_create("Initech")
        .await
        .expect("Initech is created");
    let tenants = desk
        .store
        .tenant_list()
        .await
        .expect("tenant_list succeeds");
    let ids: Vec<TenantId> = tenants.iter().map(|tenant| tenant.id).collect();
    assert_eq!(
        ids,
        vec![desk.acme, desk.globex, initech.id],
        "every tenant, oldest first: {tenants:?}"
    );
    assert_eq!(
        tenants[2], initech,
        "a listed tenant reads as it was created"
    );
}

// ---------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------

/// Names of tenants, groups, members, ticket types, statuses and fields are 1 to 200
/// characters (characters, not bytes), not only white space; anything else is `Invalid`
/// and writes nothing — on create, rename and update alike.
pub async fn names_must_be_one_to_two_hundred_characters(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let longest = "é".repeat(200);
    let too_long = "x".repeat(201);
    let bad = ["", "   ", too_long.as_str()];

    for name in bad {
        assert_invalid(desk.store.tenant_create(name).await, "a bad tenant name");
        assert_invalid(
            desk.store.group_create(desk.acme, name).await,
            "a bad group name",
        );
        assert_invalid(
            desk.store
                .ticket_type_create(desk.acme, name, &[], &[])
                .await,
            "a bad ticket type name",
        );
        assert_invalid(
            desk.store
                .ticket_type_create(desk.acme, "with-bad-status", &[name.into()], &[])
                .await,
            "a bad status name",
        );
        assert_invalid(
            desk.store
                .ticket_type_create(
                    desk.acme,
                    "with-bad-field",
                    &[],
                    &[FieldDef {
                        name: name.into(),
                        field_type: FieldType::String,
                    }],
                )
                .await,
            "a bad field name",
        );
    }
    let group = desk.group(desk.acme, "warehouse").await;
    let eva = desk.member(desk.acme, group.id, "Eva", 5).await;
    for name in bad {
        assert_invalid(
            desk.store
                .member_add(desk.acme, group.id, name, None, 5)
                .await,
            "a bad member name",
        );
        assert_invalid(
            desk.store.group_rename(desk.acme, group.id, name).await,
            "a rename to a bad group name",
        );
        assert_invalid(
            desk.store
                .member_update(desk.acme, eva.id, Some(name), None, None)
                .await,
            "an update to a bad member name",
        );
    }
    assert_eq!(
        desk.store
            .group_get(desk.acme, group.id)
            .await
            .expect("group reads")
            .name,
        "warehouse",
        "a refused rename leaves the name"
    );
    assert_eq!(
        desk.store
            .member_list(desk.acme, group.id)
            .await
            .expect("members read"),
        vec![eva.clone()],
        "refused member writes add or change nobody"
    );
    assert_eq!(
        desk.store
            .group_list(desk.acme)
            .await
            .expect("groups read")
            .len(),
        1,
        "refused group creates wrote nothing"
    );
    assert!(
        desk.store
            .ticket_type_list(desk.acme)
            .await
            .expect("types read")
            .is_empty(),
        "refused type creates wrote nothing"
    );
    assert_eq!(
        desk.store.tenant_list().await.expect("tenants read").len(),
        2,
        "refused tenant creates wrote nothing"
    );

    let tenant = desk
        .store
        .tenant_create(&longest)
        .await
        .expect("a 200-character tenant name is fine")
        .0;
    assert_eq!(tenant.name, longest, "the long name is kept whole");
    let group = desk
        .store
        .group_create(desk.acme, &longest)
        .await
        .expect("a 200-character group name is fine");
    assert_eq!(group.name, longest, "the long group name is kept whole");
    desk.store
        .member_add(desk.acme, group.id, &longest, None, 1)
        .await
        .expect("a 200-character member name is fine");
    desk.store
        .ticket_type_create(
            desk.acme,
            &longest,
            std::slice::from_ref(&longest),
            &[FieldDef {
                name: longest.clone(),
                field_type: FieldType::Date,
            }],
        )
        .await
        .expect("200-character type, status and field names are fine");
}

/// A group name and a ticket type name are unique within a tenant (`Conflict`, also for a
/// rename onto a taken name), and free in another tenant; renaming a group to its own name
/// is fine.
pub async fn group_and_ticket_type_names_are_unique_within_a_tenant(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    let warehouse = desk.group(desk.acme, "warehouse").await;
    let shipping = desk.group(desk.acme, "shipping").await;
    assert_conflict(
        desk.store.group_create(desk.acme, "warehouse").await,
        "a second group warehouse in Acme",
    );
    assert_conflict(
        desk.store
            .group_rename(desk.acme, shipping.id, "warehouse")
            .await,
        "renaming shipping onto warehouse",
    );
    let same = desk
        .store
        .group_rename(desk.acme, warehouse.id, "warehouse")
        .await
        .expect("renaming a group to its own name is fine");
    assert_eq!(same, warehouse, "nothing changes");
    desk.group(desk.globex, "warehouse").await;

    desk.types(desk.acme).await;
    assert_conflict(
        desk.store
            .ticket_type_create(desk.acme, ORDER, &[], &[])
            .await,
        "a second type order in Acme",
    );
    desk.types(desk.globex).await;
    assert_eq!(
        desk.store
            .group_list(desk.acme)
            .await
            .expect("groups read")
            .len(),
        2,
        "the refused group writes left Acme's two groups"
    );
}

/// Writes for a tenant that does not exist are `NotFound`; reads of it find nothing.
pub async fn writes_for_an_unknown_tenant_are_not_found(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let nobody = TenantId::new();
    assert_not_found(
        desk.store.group_create(nobody, "warehouse").await,
        "a group of an unknown tenant",
    );
    assert_not_found(
        desk.store.ticket_type_create(nobody, ORDER, &[], &[]).await,
        "a type of an unknown tenant",
    );
    assert_not_found(
        desk.store
            .ticket_upsert(nobody, upsert("x-1"), Origin::Person)
            .await,
        "a ticket of an unknown tenant",
    );
    assert_not_found(
        desk.store.incident_report(nobody, report("c", "t")).await,
        "an incident of an unknown tenant",
    );
    assert!(
        desk.store
            .group_list(nobody)
            .await
            .expect("group_list succeeds")
            .is_empty(),
        "an unknown tenant has no groups"
    );
    assert!(
        desk.store
            .ticket_list(nobody, TicketFilter::default())
            .await
            .expect("ticket_list succeeds")
            .is_empty(),
        "an unknown tenant has no tickets"
    );
}

// ---------------------------------------------------------------------------------------
// Groups, members, ticket types
// ---------------------------------------------------------------------------------------

/// A group reads back by id and by name, lists by name, renames and deletes; a deleted
/// group is `NotFound` like one that never existed.
pub async fn groups_are_created_read_listed_renamed_and_deleted(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let warehouse = desk.group(desk.acme, "warehouse").await;
    let it = desk.group(desk.acme, "it").await;
    assert_eq!(
        (warehouse.tenant, warehouse.name.as_str()),
        (desk.acme, "warehouse"),
        "a group belongs to its tenant and keeps its name"
    );
    assert_eq!(
        desk.store.group_get(desk.acme, warehouse.id).await,
        Ok(warehouse.clone()),
        "a group reads back by id"
    );
    assert_eq!(
        desk.store.group_by_name(desk.acme, "it").await,
        Ok(it.clone()),
        "a group reads back by name"
    );
    assert_eq!(
        desk.store.group_list(desk.acme).await,
        Ok(vec![it.clone(), warehouse.clone()]),
        "groups list by name"
    );
    let renamed = desk
        .store
        .group_rename(desk.acme, warehouse.id, "sklad")
        .await
        .expect("rename succeeds");
    assert_eq!(
        (renamed.id, renamed.name.as_str()),
        (warehouse.id, "sklad"),
        "a rename keeps the id"
    );
    assert_eq!(
        desk.store.group_by_name(desk.acme, "sklad").await,
        Ok(renamed.clone()),
        "the new name finds the group"
    );
    let unknown_name = expect_err(
        desk.store.group_by_name(desk.acme, "never").await,
        "a name that never existed",
    );
    assert_eq!(
        desk.store.group_by_name(desk.acme, "warehouse").await,
        Err(unknown_name.clone()),
        "the old name finds nothing"
    );

    desk.store
        .group_delete(desk.acme, it.id)
        .await
        .expect("delete succeeds");
    let unknown = expect_err(
        desk.store.group_get(desk.acme, GroupId::new()).await,
        "an unknown group",
    );
    assert!(
        matches!(unknown, DeskError::NotFound(_)),
        "an unknown group is NotFound: {unknown:?}"
    );
    assert_eq!(
        desk.store.group_get(desk.acme, it.id).await,
        Err(unknown.clone()),
        "a deleted group reads like one that never existed"
    );
    assert_eq!(
        desk.store.group_delete(desk.acme, it.id).await,
        Err(unknown),
        "deleting it again is NotFound"
    );
    assert_eq!(
        desk.store.group_list(desk.acme).await,
        Ok(vec![renamed]),
        "the deleted group is gone from the list"
    );
}

/// Members are added with name, email and capacity, listed by name, updated field by field
/// (`Some(None)` clears the email) and deleted.
pub async fn members_are_added_listed_updated_and_deleted(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let group = desk.group(desk.acme, "warehouse").await;
    let petr = desk
        .store
        .member_add(desk.acme, group.id, "Petr", Some("petr@acme.test"), 3)
        .await
        .expect("Petr is added");
    let eva = desk.member(desk.acme, group.id, "Eva", 5).await;
    let idle = desk.member(desk.acme, group.id, "Idle", 0).await;
    assert_eq!(
        (
            petr.group,
            petr.name.as_str(),
            petr.email.as_deref(),
            petr.capacity
        ),
        (group.id, "Petr", Some("petr@acme.test"), 3),
        "a member keeps what it was given"
    );
    assert_eq!(idle.capacity, 0, "a capacity of zero is allowed");
    assert_eq!(
        desk.store.member_list(desk.acme, group.id).await,
        Ok(vec![eva.clone(), idle.clone(), petr.clone()]),
        "members list by name"
    );
    assert_invalid(
        desk.store
            .member_add(desk.acme, group.id, "Blank", Some("  "), 1)
            .await,
        "a blank email",
    );

    let updated = desk
        .store
        .member_update(desk.acme, petr.id, None, None, Some(7))
        .await
        .expect("capacity update succeeds");
    assert_eq!(
        (
            updated.name.as_str(),
            updated.email.as_deref(),
            updated.capacity
        ),
        ("Petr", Some("petr@acme.test"), 7),
        "only the capacity changed"
    );
    let updated = desk
        .store
        .member_update(desk.acme, petr.id, Some("Pavel"), Some(None), None)
        .await
        .expect("name and email update succeeds");
    assert_eq!(
        (
            updated.name.as_str(),
            updated.email.as_deref(),
            updated.capacity
        ),
        ("Pavel", None, 7),
        "the name changed and Some(None) cleared the email"
    );
    let updated = desk
        .store
        .member_update(
            desk.acme,
            petr.id,
            None,
            Some(Some("pavel@acme.test")),
            None,
        )
        .await
        .expect("email update succeeds");
    assert_eq!(
        updated.email.as_deref(),
        Some("pavel@acme.test"),
        "Some(Some(email)) sets the email"
    );
    assert_eq!(
        desk.store.member_list(desk.acme, group.id).await,
        Ok(vec![eva.clone(), idle.clone(), updated.clone()]),
        "the list shows the update"
    );

    desk.store
        .member_delete(desk.acme, idle.id)
        .await
        .expect("delete succeeds");
    let unknown = expect_err(
        desk.store.member_delete(desk.acme, MemberId::new()).await,
        "an unknown member",
    );
    assert!(
        matches!(unknown, DeskError::NotFound(_)),
        "an unknown member is NotFound: {unknown:?}"
    );
    assert_eq!(
        desk.store.member_delete(desk.acme, idle.id).await,
        Err(unknown.clone()),
        "a deleted member is NotFound like an unknown one"
    );
    assert_eq!(
        desk.store
            .member_update(desk.acme, idle.id, None, None, Some(1))
            .await,
        Err(unknown),
        "a deleted member cannot be updated"
    );
    assert_eq!(
        desk.store.member_list(desk.acme, group.id).await,
        Ok(vec![eva, updated]),
        "the deleted member is gone from the list"
    );
}

/// A ticket type keeps its statuses and fields in order; it reads back by id and by name
/// and lists by name; a status or field listed twice is `Invalid`.
pub async fn ticket_types_keep_their_statuses_and_fields(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let (order, error) = desk.types(desk.acme).await;
    assert_eq!(
        (
            order.tenant,
            order.name.as_str(),
            order.statuses.clone(),
            order.fields.clone()
        ),
        (
            desk.acme,
            ORDER,
            vec![WAITING.to_string(), SHIPPED.to_string()],
            vec![
                FieldDef {
                    name: "amount".into(),
                    field_type: FieldType::Number
                },
                FieldDef {
                    name: "carrier".into(),
                    field_type: FieldType::String
                },
                FieldDef {
                    name: "keep".into(),
                    field_type: FieldType::String
                },
            ]
        ),
        "a type keeps its statuses and fields in order"
    );
    assert_eq!(
        desk.store.ticket_type_get(desk.acme, order.id).await,
        Ok(order.clone()),
        "a type reads back by id"
    );
    assert_eq!(
        desk.store.ticket_type_by_name(desk.acme, ERROR).await,
        Ok(error.clone()),
        "a type reads back by name"
    );
    assert_eq!(
        desk.store.ticket_type_list(desk.acme).await,
        Ok(vec![error, order]),
        "types list by name"
    );
    let message = assert_invalid(
        desk.store
            .ticket_type_create(desk.acme, "twice", &[NEW.into(), NEW.into()], &[])
            .await,
        "a status listed twice",
    );
    assert!(
        message.contains(NEW),
        "the message names the status: {message}"
    );
    assert_invalid(
        desk.store
            .ticket_type_create(
                desk.acme,
                "twice",
                &[],
                &[
                    FieldDef {
                        name: "amount".into(),
                        field_type: FieldType::Number,
                    },
                    FieldDef {
                        name: "amount".into(),
                        field_type: FieldType::String,
                    },
                ],
            )
            .await,
        "a field listed twice",
    );
    let untyped = desk
        .store
        .ticket_type_create(desk.acme, "note", &[], &[])
        .await
        .expect("a type without statuses or fields is fine");
    assert!(
        untyped.statuses.is_empty() && untyped.fields.is_empty(),
        "no statuses, no fields"
    );
}

// ---------------------------------------------------------------------------------------
// Tenant isolation
// ---------------------------------------------------------------------------------------

/// Every method that takes an id (or a name) answers another tenant's one exactly like
/// one that never existed — the same `NotFound`, compared for equality — and leaves the
/// other tenant's row untouched.
pub async fn another_tenants_ids_answer_exactly_like_unknown_ids(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let (acme, globex) = (desk.acme, desk.globex);
    let store = &desk.store;
    // Globex's rows, with names Acme does not have.
    let their_group = desk.group(globex, "globex-team").await;
    let their_member = desk.member(globex, their_group.id, "Hank", 5).await;
    let their_type = store
        .ticket_type_create(globex, "globex-type", &[NEW.into()], &[])
        .await
        .expect("Globex's type");
    let their_ticket = desk.ticket(globex, "g-1").await;
    let (their_incident, _) = store
        .incident_report(globex, report("globex-cause", "Globex"))
        .await
        .expect("Globex's incident");
    // Acme's own, to point at Globex's from.
    let our_group = desk.group(acme, "warehouse").await;
    desk.member(acme, our_group.id, "Eva", 5).await;
    let our_ticket = desk.ticket(acme, "a-1").await;

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
        store.group_get(acme, their_group.id).await,
        store.group_get(acme, GroupId::new()).await,
        "group_get"
    );
    same!(
        store.group_by_name(acme, "globex-team").await,
        store.group_by_name(acme, "never").await,
        "group_by_name"
    );
    same!(
        store.group_rename(acme, their_group.id, "x").await,
        store.group_rename(acme, GroupId::new(), "x").await,
        "group_rename"
    );
    same!(
        store.group_delete(acme, their_group.id).await,
        store.group_delete(acme, GroupId::new()).await,
        "group_delete"
    );
    same!(
        store
            .member_add(acme, their_group.id, "Mallory", None, 5)
            .await,
        store
            .member_add(acme, GroupId::new(), "Mallory", None, 5)
            .await,
        "member_add"
    );
    same!(
        store.member_list(acme, their_group.id).await,
        store.member_list(acme, GroupId::new()).await,
        "member_list"
    );
    same!(
        store
            .member_update(acme, their_member.id, Some("x"), None, None)
            .await,
        store
            .member_update(acme, MemberId::new(), Some("x"), None, None)
            .await,
        "member_update"
    );
    same!(
        store.member_delete(acme, their_member.id).await,
        store.member_delete(acme, MemberId::new()).await,
        "member_delete"
    );
    same!(
        store.ticket_type_get(acme, their_type.id).await,
        store.ticket_type_get(acme, TicketTypeId::new()).await,
        "ticket_type_get"
    );
    same!(
        store.ticket_type_by_name(acme, "globex-type").await,
        store.ticket_type_by_name(acme, "never").await,
        "ticket_type_by_name"
    );
    same!(
        store.ticket_get(acme, their_ticket.id).await,
        store.ticket_get(acme, TicketId::new()).await,
        "ticket_get"
    );
    same!(
        store.ticket_log(acme, their_ticket.id).await,
        store.ticket_log(acme, TicketId::new()).await,
        "ticket_log"
    );
    let entry = TicketLogEntry {
        at: chrono::Utc::now(),
        kind: "note".into(),
        message: "hello".into(),
        run_id: None,
    };
    same!(
        store
            .ticket_log_append(acme, their_ticket.id, entry.clone())
            .await,
        store
            .ticket_log_append(acme, TicketId::new(), entry.clone())
            .await,
        "ticket_log_append"
    );
    let retitle = TicketChange {
        title: Some("mine now".into()),
        ..TicketChange::default()
    };
    same!(
        store
            .ticket_change(acme, their_ticket.id, retitle.clone(), Origin::Person)
            .await,
        store
            .ticket_change(acme, TicketId::new(), retitle.clone(), Origin::Person)
            .await,
        "ticket_change"
    );
    same!(
        store
            .ticket_assign_least_busy(acme, their_ticket.id, "warehouse", Origin::Person)
            .await,
        store
            .ticket_assign_least_busy(acme, TicketId::new(), "warehouse", Origin::Person)
            .await,
        "ticket_assign_least_busy of another tenant's ticket"
    );
    same!(
        store
            .ticket_assign_least_busy(acme, our_ticket.id, "globex-team", Origin::Person)
            .await,
        store
            .ticket_assign_least_busy(acme, our_ticket.id, "never", Origin::Person)
            .await,
        "ticket_assign_least_busy into another tenant's group"
    );
    let to = |member: MemberId| TicketChange {
        assignee: Some(Some(member)),
        ..TicketChange::default()
    };
    same!(
        store
            .ticket_change(acme, our_ticket.id, to(their_member.id), Origin::Person)
            .await,
        store
            .ticket_change(acme, our_ticket.id, to(MemberId::new()), Origin::Person)
            .await,
        "ticket_change to another tenant's member"
    );
    let typed = |name: &str| TicketChange {
        ticket_type: Some(name.into()),
        ..TicketChange::default()
    };
    same!(
        store
            .ticket_change(acme, our_ticket.id, typed("globex-type"), Origin::Person)
            .await,
        store
            .ticket_change(acme, our_ticket.id, typed("never"), Origin::Person)
            .await,
        "ticket_change to another tenant's type"
    );
    let grouped = |name: &str| TicketChange {
        group: Some(Some(name.into())),
        ..TicketChange::default()
    };
    same!(
        store
            .ticket_change(acme, our_ticket.id, grouped("globex-team"), Origin::Person)
            .await,
        store
            .ticket_change(acme, our_ticket.id, grouped("never"), Origin::Person)
            .await,
        "ticket_change to another tenant's group"
    );
    let upsert_typed = |name: &str| TicketUpsert {
        ticket_type: Some(name.into()),
        ..upsert("a-2")
    };
    same!(
        store
            .ticket_upsert(acme, upsert_typed("globex-type"), Origin::Person)
            .await,
        store
            .ticket_upsert(acme, upsert_typed("never"), Origin::Person)
            .await,
        "ticket_upsert with another tenant's type"
    );
    let upsert_grouped = |name: &str| TicketUpsert {
        group: Some(name.into()),
        ..upsert("a-2")
    };
    same!(
        store
            .ticket_upsert(acme, upsert_grouped("globex-team"), Origin::Person)
            .await,
        store
            .ticket_upsert(acme, upsert_grouped("never"), Origin::Person)
            .await,
        "ticket_upsert with another tenant's group"
    );
    let about = |ticket: TicketId| IncidentReport {
        ticket: Some(ticket),
        ..report("acme-cause", "Acme")
    };
    same!(
        store.incident_report(acme, about(their_ticket.id)).await,
        store.incident_report(acme, about(TicketId::new())).await,
        "incident_report about another tenant's ticket"
    );
    same!(
        store.incident_get(Some(acme), their_incident.id).await,
        store.incident_get(Some(acme), IncidentId::new()).await,
        "incident_get"
    );
    same!(
        store.incident_resolve(acme, their_incident.id).await,
        store.incident_resolve(acme, IncidentId::new()).await,
        "incident_resolve"
    );

    // Globex's rows are as they were.
    assert_eq!(
        store.group_get(globex, their_group.id).await,
        Ok(their_group.clone()),
        "Globex's group is untouched"
    );
    assert_eq!(
        store.member_list(globex, their_group.id).await,
        Ok(vec![their_member]),
        "Globex's members are untouched"
    );
    assert_eq!(
        store.ticket_get(globex, their_ticket.id).await,
        Ok(their_ticket.clone()),
        "Globex's ticket is untouched"
    );
    assert_eq!(
        desk.log(globex, their_ticket.id).await.len(),
        1,
        "Globex's ticket log has only its creation"
    );
    assert_eq!(
        store.incident_get(Some(globex), their_incident.id).await,
        Ok(their_incident),
        "Globex's incident is still open, untouched"
    );
    assert_eq!(
        desk.get(acme, our_ticket.id).await,
        our_ticket,
        "Acme's ticket took none of Globex's member, type or group"
    );
    assert_eq!(
        desk.list(acme, TicketFilter::default()).await,
        vec![1],
        "Acme has only its one ticket: no upsert a-2 was created"
    );
}

/// No list shows another tenant's rows: groups, types, tickets (with or without filters
/// that would match them) and incidents.
pub async fn lists_never_show_another_tenants_rows(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let (acme, globex) = (desk.acme, desk.globex);
    let ours = desk.team(acme, "warehouse", &[("Eva", 5)]).await;
    let theirs = desk.team(globex, "warehouse", &[("Hank", 5)]).await;
    desk.types(acme).await;
    desk.types(globex).await;
    let our_ticket = desk.upsert(acme, order("o-1")).await.ticket;
    let their_ticket = desk.upsert(globex, order("o-1")).await.ticket;
    desk.assign(acme, our_ticket.id, ours[0].id).await;
    desk.assign(globex, their_ticket.id, theirs[0].id).await;
    desk.store
        .incident_report(acme, report("same", "Acme's"))
        .await
        .expect("Acme's incident");
    desk.store
        .incident_report(globex, report("same", "Globex's"))
        .await
        .expect("Globex's incident");

    let groups = desk.store.group_list(acme).await.expect("groups read");
    assert!(
        groups.len() == 1 && groups.iter().all(|group| group.tenant == acme),
        "Acme sees only its group: {groups:?}"
    );
    let types = desk.store.ticket_type_list(acme).await.expect("types read");
    assert!(
        types.len() == 2 && types.iter().all(|ticket_type| ticket_type.tenant == acme),
        "Acme sees only its types: {types:?}"
    );
    let tickets = desk
        .store
        .ticket_list(acme, TicketFilter::default())
        .await
        .expect("tickets read");
    assert_eq!(
        tickets.iter().map(|ticket| ticket.id).collect::<Vec<_>>(),
        vec![our_ticket.id],
        "Acme sees only its ticket"
    );
    for filter in [
        TicketFilter {
            status: Some(WAITING.into()),
            ..TicketFilter::default()
        },
        TicketFilter {
            tag: Some(WAITING.into()),
            ..TicketFilter::default()
        },
        TicketFilter {
            closed: Some(false),
            ..TicketFilter::default()
        },
        TicketFilter {
            ticket_type: Some(ORDER.into()),
            ..TicketFilter::default()
        },
    ] {
        assert_eq!(
            desk.list(acme, filter.clone()).await,
            vec![1],
            "a filter matching both tenants' tickets shows only Acme's: {filter:?}"
        );
    }
    assert!(
        desk.list(
            acme,
            TicketFilter {
                assignee: Some(theirs[0].id),
                ..TicketFilter::default()
            }
        )
        .await
        .is_empty(),
        "filtering by Globex's member finds nothing in Acme"
    );
    let incidents = desk
        .store
        .incident_list(Some(acme))
        .await
        .expect("incidents read");
    assert!(
        incidents.len() == 1 && incidents[0].tenant == acme && incidents[0].title == "Acme's",
        "Acme sees only its incident: {incidents:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Tickets
// ---------------------------------------------------------------------------------------

/// Ticket numbers are 1, 2, 3 … per tenant (`TK-1` …), each tenant counting on its own.
pub async fn ticket_numbers_count_from_one_per_tenant_independently(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    let a1 = desk.ticket(desk.acme, "a-1").await;
    let a2 = desk.ticket(desk.acme, "a-2").await;
    let g1 = desk.ticket(desk.globex, "g-1").await;
    let a3 = desk.ticket(desk.acme, "a-3").await;
    let g2 = desk.ticket(desk.globex, "g-2").await;
    assert_eq!(
        (a1.number, a2.number, a3.number),
        (1, 2, 3),
        "Acme counts 1, 2, 3"
    );
    assert_eq!(
        (g1.number, g2.number),
        (1, 2),
        "Globex counts from 1 on its own"
    );
    assert_eq!(
        (a3.human_id(), g2.human_id()),
        ("TK-3".to_string(), "TK-2".to_string()),
        "human ids"
    );
    assert_eq!(
        desk.get(desk.acme, a2.id).await.number,
        2,
        "the number reads back"
    );
}

/// A first upsert creates the ticket with what it names: external id, title, type,
/// status, tags, fields (a `null` field is left out), group; not closed, nobody assigned,
/// `created: true`, an empty change; it reads back equal. Without a title the external
/// id is the title.
pub async fn upsert_creates_a_ticket_with_what_it_names(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    desk.group(desk.acme, "warehouse").await;
    let mut fields = BTreeMap::new();
    fields.insert("amount".to_string(), json!(1250));
    fields.insert("note".to_string(), Value::Null);
    let write = desk
        .store
        .ticket_upsert(
            desk.acme,
            TicketUpsert {
                group: Some("warehouse".into()),
                fields,
                note: Some("order.created from the web shop".into()),
                tags: vec![WAITING.into(), "eu".into()],
                ..order("order-5001")
            },
            automation("shop", "run-1"),
        )
        .await
        .expect("upsert succeeds");
    assert!(write.created, "a new external id creates");
    assert!(write.change.is_empty(), "a create has an empty change map");
    let ticket = &write.ticket;
    assert_eq!(ticket.tenant, desk.acme, "the ticket is Acme's");
    assert_eq!(ticket.number, 1, "the first ticket is TK-1");
    assert_eq!(
        ticket.external_id.as_deref(),
        Some("order-5001"),
        "external id"
    );
    assert_eq!(ticket.title, "Order order-5001", "title");
    assert_eq!(ticket.ticket_type.as_deref(), Some(ORDER), "type");
    assert_eq!(ticket.status.as_deref(), Some(WAITING), "status");
    assert_eq!(ticket.tags, vec![WAITING, "eu"], "tags in order");
    assert_eq!(ticket.group.as_deref(), Some("warehouse"), "group");
    assert_eq!(
        ticket.fields,
        BTreeMap::from([("amount".to_string(), json!(1250))]),
        "fields, without the null one"
    );
    assert!(!ticket.closed, "a new ticket is open");
    assert_eq!(ticket.assignee, None, "nobody is assigned yet");
    assert_eq!(
        ticket.created_at, ticket.updated_at,
        "a new ticket was updated when it was created"
    );
    assert_eq!(
        desk.get(desk.acme, ticket.id).await,
        write.ticket,
        "the ticket reads back as the write answered"
    );

    let bare = desk.ticket(desk.acme, "mail-77").await;
    assert_eq!(
        bare.title, "mail-77",
        "without a title the external id is the title"
    );
    assert_eq!(
        (bare.ticket_type, bare.status, bare.tags, bare.group),
        (None, None, Vec::<String>::new(), None),
        "a bare ticket has no type, status, tags or group"
    );
    assert_invalid(
        desk.store
            .ticket_upsert(desk.acme, upsert("  "), Origin::Person)
            .await,
        "a blank external id",
    );
    assert_invalid(
        desk.store
            .ticket_upsert(
                desk.acme,
                TicketUpsert {
                    title: Some(" ".into()),
                    ..upsert("x-1")
                },
                Origin::Person,
            )
            .await,
        "a blank title",
    );
    assert_not_found(
        desk.store
            .ticket_upsert(
                desk.acme,
                TicketUpsert {
                    ticket_type: Some("never".into()),
                    ..upsert("x-1")
                },
                Origin::Person,
            )
            .await,
        "an unknown type",
    );
    assert_not_found(
        desk.store
            .ticket_upsert(
                desk.acme,
                TicketUpsert {
                    group: Some("never".into()),
                    ..upsert("x-1")
                },
                Origin::Person,
            )
            .await,
        "an unknown group",
    );
}

/// An upsert whose external id exists attaches: `created: false`, the same ticket, only
/// the fields it names change (tags are added, never removed; an absent title stays),
/// the change map says what changed, and the event is logged — also when nothing changed.
pub async fn upsert_with_a_known_external_id_attaches_instead_of_creating(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    let first = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                tags: vec![WAITING.into(), "eu".into()],
                fields: BTreeMap::from([("amount".to_string(), json!(10))]),
                ..order("order-5001")
            },
        )
        .await;
    let second = desk
        .store
        .ticket_upsert(
            desk.acme,
            TicketUpsert {
                tags: vec!["vip".into(), "eu".into()],
                note: Some("order.paid".into()),
                ..upsert("order-5001")
            },
            automation("shop", "run-2"),
        )
        .await
        .expect("the second upsert succeeds");
    assert!(!second.created, "a known external id attaches");
    assert_eq!(
        (second.ticket.id, second.ticket.number),
        (first.ticket.id, 1),
        "the same ticket, TK-1"
    );
    assert_eq!(
        second.ticket.title, first.ticket.title,
        "a title not named stays"
    );
    assert_eq!(
        second.ticket.status.as_deref(),
        Some(WAITING),
        "a status not named stays"
    );
    assert_eq!(
        second.ticket.tags,
        vec![WAITING, "eu", "vip"],
        "tags are added, none removed, each once"
    );
    assert_eq!(
        second.ticket.fields, first.ticket.fields,
        "fields not named stay"
    );
    assert_eq!(
        second.change,
        BTreeMap::from([(
            "tags".to_string(),
            moved(json!([WAITING, "eu"]), json!([WAITING, "eu", "vip"]))
        )]),
        "the change map holds the tags only"
    );
    let log = desk.log(desk.acme, first.ticket.id).await;
    assert_eq!(log.len(), 2, "creation and the event: {log:?}");
    assert_eq!(log[1].kind, "event", "an attach logs an event: {log:?}");
    assert!(
        log[1].message.contains("order.paid"),
        "the event line carries the note: {log:?}"
    );
    assert_eq!(
        log[1].run_id.as_deref(),
        Some("run-2"),
        "the event line carries the run"
    );

    let third = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                tags: vec!["eu".into()],
                status: Some(SHIPPED.into()),
                title: Some("Order 5001 (paid)".into()),
                ..upsert("order-5001")
            },
        )
        .await;
    assert!(!third.created, "still attaching");
    assert_eq!(
        third.change.keys().collect::<Vec<_>>(),
        vec!["status", "title"],
        "named fields that differ are changed: {:?}",
        third.change
    );
    assert_eq!(
        third.ticket.tags,
        vec![WAITING, "eu", "vip"],
        "tags already there change nothing"
    );

    let repeat = desk.upsert(desk.acme, upsert("order-5001")).await;
    assert!(
        !repeat.created && repeat.change.is_empty(),
        "an upsert naming nothing new changes nothing"
    );
    assert_eq!(repeat.ticket, third.ticket, "the ticket is as it was");
    assert_eq!(
        desk.log(desk.acme, first.ticket.id).await.len(),
        4,
        "every attach logs its event, even one that changed nothing"
    );
    assert_eq!(
        desk.list(desk.acme, TicketFilter::default()).await,
        vec![1],
        "one ticket in all"
    );
}

/// Issue 23: a repeated order webhook re-applied `status` and moved a shipped, closed
/// ticket back to waiting-to-pack. An upsert's `on_existing` says which of its values
/// apply to a ticket that exists already: with none, the shipped, closed ticket keeps its
/// status, title and tags, announces nothing, and its log says what was kept; with
/// `status` and `tags`, those apply and the title is kept. Never reopened either way.
pub async fn upsert_applies_to_an_existing_ticket_only_what_on_existing_names(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    let first = desk.upsert(desk.acme, order("order-7001")).await.ticket;
    let shipped = desk
        .change(
            desk.acme,
            first.id,
            TicketChange {
                status: Some(SHIPPED.into()),
                closed: Some(true),
                ..TicketChange::default()
            },
        )
        .await
        .ticket;
    let repeated = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                title: Some("Order 7001 (again)".into()),
                on_existing: OnExisting::ATTACH_ONLY,
                note: Some("order.created".into()),
                ..order("order-7001")
            },
        )
        .await;
    assert!(!repeated.created, "a known external id attaches");
    assert!(repeated.change.is_empty(), "{:?}", repeated.change);
    assert_eq!(repeated.ticket, shipped, "still shipped and closed");
    assert_eq!(desk.get(desk.acme, first.id).await, shipped, "as stored");
    let log = desk.log(desk.acme, first.id).await;
    let line = &log.last().expect("the event's line").message;
    assert!(
        line.starts_with("order.created: attached to TK-1 by a person; nothing changed; kept ")
            && line.contains(&format!("status {SHIPPED} (the event said {WAITING})"))
            && line.contains("title Order order-7001 (the event said Order 7001 (again))")
            && line.ends_with("— onExisting applies nothing to an existing ticket"),
        "{line}"
    );

    let on = OnExisting::ATTACH_ONLY
        .with("status")
        .and_then(|on| on.with("tags"))
        .expect("known names");
    let moved_on = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                title: Some("Order 7001 (again)".into()),
                tags: vec!["returned".into()],
                on_existing: on,
                ..order("order-7001")
            },
        )
        .await;
    assert_eq!(
        moved_on.change.keys().collect::<Vec<_>>(),
        vec!["status", "tags"],
        "what onExisting names applies: {:?}",
        moved_on.change
    );
    assert_eq!(moved_on.ticket.status.as_deref(), Some(WAITING));
    assert_eq!(moved_on.ticket.title, shipped.title, "the title is kept");
    assert!(moved_on.ticket.closed, "an upsert never reopens");
}

/// Concurrent upserts of one external id create exactly one ticket; the others attach to
/// it, and each is logged.
pub async fn concurrent_upserts_of_one_external_id_create_one_ticket(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..8 {
        let store = desk.store.clone();
        let tenant = desk.acme;
        tasks.spawn(async move {
            store
                .ticket_upsert(
                    tenant,
                    TicketUpsert {
                        tags: vec![format!("tag-{index}")],
                        ..upsert("same-order")
                    },
                    Origin::Person,
                )
                .await
        });
    }
    let mut writes = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        writes.push(
            joined
                .expect("the upsert task finishes")
                .expect("each upsert succeeds"),
        );
    }
    assert_eq!(
        writes.iter().filter(|write| write.created).count(),
        1,
        "exactly one upsert created the ticket"
    );
    let ids: HashSet<TicketId> = writes.iter().map(|write| write.ticket.id).collect();
    assert_eq!(ids.len(), 1, "every upsert answered the same ticket");
    let ticket = desk.get(desk.acme, writes[0].ticket.id).await;
    assert_eq!(ticket.number, 1, "TK-1, no number spent twice");
    assert_eq!(
        ticket.tags.len(),
        8,
        "every upsert's tag was added: {:?}",
        ticket.tags
    );
    assert_eq!(
        desk.log(desk.acme, ticket.id).await.len(),
        8,
        "one creation line and seven event lines"
    );
}

/// A status that is not one of the type's statuses is `Invalid`, and the message names
/// the allowed ones — on create, on attach and on change.
pub async fn status_outside_the_type_is_refused_naming_the_allowed_ones(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    let check = |message: String, what: &str| {
        assert!(
            message.contains(WAITING) && message.contains(SHIPPED),
            "{what}: the message names the allowed statuses: {message}"
        );
    };
    let message = assert_invalid(
        desk.store
            .ticket_upsert(
                desk.acme,
                TicketUpsert {
                    status: Some("lost".into()),
                    ..order("o-1")
                },
                Origin::Person,
            )
            .await,
        "create with a foreign status",
    );
    check(message, "create");
    let ticket = desk.upsert(desk.acme, order("o-1")).await.ticket;
    let message = assert_invalid(
        desk.store
            .ticket_upsert(
                desk.acme,
                TicketUpsert {
                    status: Some("lost".into()),
                    ..upsert("o-1")
                },
                Origin::Person,
            )
            .await,
        "attach with a foreign status",
    );
    check(message, "attach");
    let message = assert_invalid(
        desk.store
            .ticket_change(
                desk.acme,
                ticket.id,
                TicketChange {
                    status: Some("lost".into()),
                    ..TicketChange::default()
                },
                Origin::Person,
            )
            .await,
        "change to a foreign status",
    );
    check(message, "change");
    assert_eq!(
        desk.get(desk.acme, ticket.id).await.status.as_deref(),
        Some(WAITING),
        "the status is unchanged"
    );
    let shipped = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                status: Some(SHIPPED.into()),
                ..TicketChange::default()
            },
        )
        .await;
    assert_eq!(
        shipped.ticket.status.as_deref(),
        Some(SHIPPED),
        "a status of the type is taken"
    );
}

/// A ticket without a type has no statuses: a status on an untyped create or change is
/// `Invalid`.
pub async fn status_on_a_ticket_without_a_type_is_refused(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    assert_invalid(
        desk.store
            .ticket_upsert(
                desk.acme,
                TicketUpsert {
                    status: Some(WAITING.into()),
                    ..upsert("x-1")
                },
                Origin::Person,
            )
            .await,
        "a create with a status and no type",
    );
    let ticket = desk.ticket(desk.acme, "x-1").await;
    assert_invalid(
        desk.store
            .ticket_change(
                desk.acme,
                ticket.id,
                TicketChange {
                    status: Some(WAITING.into()),
                    ..TicketChange::default()
                },
                Origin::Person,
            )
            .await,
        "a status on an untyped ticket",
    );
    assert_eq!(
        desk.get(desk.acme, ticket.id).await,
        ticket,
        "the untyped ticket is unchanged"
    );
    let typed = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                ticket_type: Some(ORDER.into()),
                status: Some(WAITING.into()),
                ..TicketChange::default()
            },
        )
        .await;
    assert_eq!(
        (
            typed.ticket.ticket_type.as_deref(),
            typed.ticket.status.as_deref()
        ),
        (Some(ORDER), Some(WAITING)),
        "type and status in one change are fine"
    );
}

/// Changing the type checks the ticket's status against the new type: a status the new
/// type lacks is `Invalid` (naming the new type's statuses) unless the same change sets one
/// of them.
pub async fn changing_the_type_rechecks_the_current_status(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    let ticket = desk.upsert(desk.acme, order("o-1")).await.ticket;
    let message = assert_invalid(
        desk.store
            .ticket_change(
                desk.acme,
                ticket.id,
                TicketChange {
                    ticket_type: Some(ERROR.into()),
                    ..TicketChange::default()
                },
                Origin::Person,
            )
            .await,
        "a type whose statuses lack the current one",
    );
    assert!(
        message.contains(NEW) && message.contains(FIXED),
        "the message names the new type's statuses: {message}"
    );
    let write = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                ticket_type: Some(ERROR.into()),
                status: Some(FIXED.into()),
                ..TicketChange::default()
            },
        )
        .await;
    assert_eq!(
        write.change,
        BTreeMap::from([
            ("status".to_string(), moved(json!(WAITING), json!(FIXED))),
            ("type".to_string(), moved(json!(ORDER), json!(ERROR))),
        ]),
        "type and status changed together"
    );
}

/// Custom fields are typed on every ticket write: a value of another type or a field the
/// type does not declare is `Invalid`, naming the field, the expected and the found type,
/// and nothing is written; changing the type keeps the fields that fit the new one and
/// logs the ones dropped.
pub async fn custom_fields_must_fit_the_ticket_type(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    let mut bad = order("o-1");
    bad.fields = BTreeMap::from([("amount".to_string(), json!("lots"))]);
    let message = assert_invalid(
        desk.store
            .ticket_upsert(desk.acme, bad, Origin::Person)
            .await,
        "an upsert with a string in a number field",
    );
    assert!(
        message.contains("\"amount\"")
            && message.contains("expects a number")
            && message.contains("found a string"),
        "names the field and both types: {message}"
    );
    let first = desk.upsert(desk.acme, order("o-1")).await;
    assert!(
        first.created && first.ticket.number == 1,
        "the refused create wrote no ticket and took no number: {:?}",
        first.ticket
    );
    let ticket = first.ticket;
    let message = assert_invalid(
        desk.store
            .ticket_change(
                desk.acme,
                ticket.id,
                TicketChange {
                    fields: BTreeMap::from([("colour".to_string(), json!("red"))]),
                    ..TicketChange::default()
                },
                Origin::Person,
            )
            .await,
        "a change with an undeclared field",
    );
    assert!(
        message.contains("\"colour\" is not a field of ticket type \"order\""),
        "names the field and the type: {message}"
    );
    let write = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                fields: BTreeMap::from([("amount".to_string(), json!(40))]),
                ..TicketChange::default()
            },
        )
        .await;
    assert_eq!(
        write.ticket.fields["amount"],
        json!(40),
        "a number is taken"
    );
    let write = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                ticket_type: Some(ERROR.into()),
                status: Some(FIXED.into()),
                ..TicketChange::default()
            },
        )
        .await;
    assert!(
        write.ticket.fields.is_empty(),
        "type error declares no amount: {:?}",
        write.ticket.fields
    );
    let log = desk
        .store
        .ticket_log(desk.acme, ticket.id)
        .await
        .expect("the log reads");
    let last = log.last().expect("the change logged a line");
    assert!(
        last.message
            .contains("the new type dropped fields \"amount\""),
        "the log line names the dropped field: {}",
        last.message
    );
}

/// `ticket_type_update` changes what it is given and keeps the rest; it checks the new
/// definition like a create; an unknown id or one of another tenant is `NotFound`.
pub async fn ticket_type_update_changes_only_what_it_is_given(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let (order_type, _) = desk.types(desk.acme).await;
    let statuses = vec![
        WAITING.to_string(),
        SHIPPED.to_string(),
        "returned".to_string(),
    ];
    let updated = desk
        .store
        .ticket_type_update(desk.acme, order_type.id, None, Some(&statuses), None)
        .await
        .expect("a status is added");
    assert_eq!(
        (
            updated.name.as_str(),
            updated.statuses.clone(),
            updated.fields.clone()
        ),
        (ORDER, statuses.clone(), order_type.fields.clone()),
        "the statuses are replaced, name and fields kept"
    );
    let fields = vec![FieldDef {
        name: "weight".into(),
        field_type: FieldType::Number,
    }];
    let updated = desk
        .store
        .ticket_type_update(desk.acme, order_type.id, None, None, Some(&fields))
        .await
        .expect("the fields are replaced");
    assert_eq!(
        (updated.statuses.clone(), updated.fields.clone()),
        (statuses, fields),
        "the fields are replaced, the statuses kept"
    );
    assert_eq!(
        desk.store.ticket_type_get(desk.acme, order_type.id).await,
        Ok(updated.clone()),
        "the update reads back"
    );
    assert_eq!(
        desk.store
            .ticket_type_update(desk.acme, order_type.id, Some(ORDER), None, None)
            .await,
        Ok(updated),
        "an update to what is there already changes nothing and succeeds"
    );
    assert_invalid(
        desk.store
            .ticket_type_update(
                desk.acme,
                order_type.id,
                None,
                Some(&[NEW.into(), NEW.into()]),
                None,
            )
            .await,
        "a status listed twice",
    );
    assert_invalid(
        desk.store
            .ticket_type_update(desk.acme, order_type.id, Some(""), None, None)
            .await,
        "an empty name",
    );
    assert_not_found(
        desk.store
            .ticket_type_update(desk.globex, order_type.id, Some("mine"), None, None)
            .await,
        "a type of another tenant",
    );
    assert_not_found(
        desk.store
            .ticket_type_update(desk.acme, TicketTypeId::new(), Some("ghost"), None, None)
            .await,
        "an unknown type",
    );
}

/// A rename may not take the name of another type of the tenant (`Conflict`); another
/// tenant's names do not count.
pub async fn ticket_type_update_keeps_names_unique_within_a_tenant(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let (order_type, _) = desk.types(desk.acme).await;
    desk.types(desk.globex).await;
    assert_conflict(
        desk.store
            .ticket_type_update(desk.acme, order_type.id, Some(ERROR), None, None)
            .await,
        "a rename onto the name of another type",
    );
    assert_eq!(
        desk.store
            .ticket_type_by_name(desk.acme, ORDER)
            .await
            .map(|found| found.id),
        Ok(order_type.id),
        "the refused rename changed nothing"
    );
    let renamed = desk
        .store
        .ticket_type_update(desk.acme, order_type.id, Some("purchase"), None, None)
        .await
        .expect("a free name is taken");
    assert_eq!(renamed.name, "purchase", "the type is renamed");
    assert!(
        desk.store
            .ticket_type_by_name(desk.globex, ORDER)
            .await
            .is_ok(),
        "the other tenant's type of the old name is untouched"
    );
}

/// A status that an open ticket of the type holds cannot be removed (`InUse`, naming it
/// and counting the tickets); once the ticket is closed, it can.
pub async fn ticket_type_update_keeps_statuses_open_tickets_hold(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let (order_type, error) = desk.types(desk.acme).await;
    let ticket = desk.upsert(desk.acme, order("o-1")).await.ticket;
    let refused = desk
        .store
        .ticket_type_update(
            desk.acme,
            order_type.id,
            None,
            Some(&[SHIPPED.into()]),
            None,
        )
        .await;
    let message = match refused {
        Err(DeskError::InUse { message, used_by }) => {
            assert_eq!(
                used_by,
                vec![fronta_desk::UsedBy::Tickets { open: 1 }],
                "counts the open ticket"
            );
            message
        }
        other => panic!("removing the status an open ticket holds: {other:?}"),
    };
    assert!(
        message.contains(WAITING),
        "the message names the held status: {message}"
    );
    assert_eq!(
        desk.store.ticket_type_get(desk.acme, order_type.id).await,
        Ok(order_type.clone()),
        "the refused update changed nothing"
    );
    desk.store
        .ticket_type_update(desk.acme, error.id, None, Some(&[FIXED.into()]), None)
        .await
        .expect("another type's status no ticket holds is removed");
    desk.change(
        desk.acme,
        ticket.id,
        TicketChange {
            closed: Some(true),
            ..TicketChange::default()
        },
    )
    .await;
    let updated = desk
        .store
        .ticket_type_update(
            desk.acme,
            order_type.id,
            None,
            Some(&[SHIPPED.into()]),
            None,
        )
        .await
        .expect("a status only closed tickets hold is removed");
    assert_eq!(
        updated.statuses,
        vec![SHIPPED.to_string()],
        "the status is gone from the type"
    );
    assert_eq!(
        desk.store
            .ticket_get(desk.acme, ticket.id)
            .await
            .map(|ticket| ticket.status),
        Ok(Some(WAITING.to_string())),
        "the closed ticket keeps its status"
    );
}

/// A rename carries to the `type` of every ticket of the type, and statuses are then
/// checked against the renamed type.
pub async fn ticket_type_rename_carries_to_its_tickets(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let (order_type, _) = desk.types(desk.acme).await;
    desk.types(desk.globex).await;
    let first = desk.upsert(desk.acme, order("o-1")).await.ticket;
    let second = desk.upsert(desk.acme, order("o-2")).await.ticket;
    let theirs = desk.upsert(desk.globex, order("o-1")).await.ticket;
    desk.store
        .ticket_type_update(desk.acme, order_type.id, Some("purchase"), None, None)
        .await
        .expect("the type is renamed");
    for ticket in [&first, &second] {
        assert_eq!(
            desk.store
                .ticket_get(desk.acme, ticket.id)
                .await
                .map(|ticket| ticket.ticket_type),
            Ok(Some("purchase".to_string())),
            "ticket {} carries the new name",
            ticket.number
        );
    }
    let by_type = |name: &str| TicketFilter {
        ticket_type: Some(name.to_string()),
        ..TicketFilter::default()
    };
    assert_eq!(
        desk.list(desk.acme, by_type("purchase")).await.len(),
        2,
        "both tickets list under the new name"
    );
    assert_eq!(
        desk.list(desk.acme, by_type(ORDER)).await.len(),
        0,
        "none under the old name"
    );
    assert_eq!(
        desk.store
            .ticket_get(desk.globex, theirs.id)
            .await
            .map(|ticket| ticket.ticket_type),
        Ok(Some(ORDER.to_string())),
        "the other tenant's ticket keeps its type"
    );
    let write = desk
        .change(
            desk.acme,
            first.id,
            TicketChange {
                status: Some(SHIPPED.into()),
                ..TicketChange::default()
            },
        )
        .await;
    assert_eq!(
        write.ticket.status.as_deref(),
        Some(SHIPPED),
        "a status of the renamed type is accepted on its ticket"
    );
}

/// A refused ticket write leaves no trace: no number spent, no row changed, no log line.
pub async fn refused_ticket_write_leaves_no_trace(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    desk.group(desk.acme, "empty").await;
    let first = desk.upsert(desk.acme, order("o-1")).await.ticket;
    assert_invalid(
        desk.store
            .ticket_upsert(
                desk.acme,
                TicketUpsert {
                    status: Some("lost".into()),
                    ..order("o-2")
                },
                Origin::Person,
            )
            .await,
        "a refused create",
    );
    assert_invalid(
        desk.store
            .ticket_change(
                desk.acme,
                first.id,
                TicketChange {
                    title: Some("renamed".into()),
                    closed: Some(true),
                    add_tags: vec!["x".into()],
                    status: Some("lost".into()),
                    ..TicketChange::default()
                },
                Origin::Person,
            )
            .await,
        "a refused change",
    );
    expect_err(
        desk.store
            .ticket_assign_least_busy(desk.acme, first.id, "empty", Origin::Person)
            .await,
        "a refused assignment",
    );
    assert_eq!(
        desk.get(desk.acme, first.id).await,
        first,
        "the ticket is exactly as before"
    );
    assert_eq!(
        desk.log(desk.acme, first.id).await.len(),
        1,
        "no log line for refused writes"
    );
    let second = desk.upsert(desk.acme, order("o-2")).await.ticket;
    assert_eq!(second.number, 2, "the refused create spent no number");
}

/// `ticket_change` answers a `change` map of exactly the fields that changed, each
/// `{from, to}` as in the ticket's JSON: `title`, `type`, `status`, `closed`, `tags`
/// (whole lists), `assignee` (`{id, name}` or null), `group`, and `fields` (only the custom
/// fields that changed; `null` = absent, and a `null` value removes a field). The ticket
/// reads back as answered, with a later `updated_at`.
pub async fn ticket_change_reports_each_changed_field_from_and_to(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    let eva = desk
        .team(desk.acme, "warehouse", &[("Eva", 5)])
        .await
        .remove(0);
    desk.group(desk.acme, "shipping").await;
    let ticket = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                fields: BTreeMap::from([
                    ("amount".to_string(), json!(10)),
                    ("keep".to_string(), json!("same")),
                ]),
                group: Some("warehouse".into()),
                ..order("o-1")
            },
        )
        .await
        .ticket;
    let write = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                title: Some("Packed order".into()),
                status: Some(SHIPPED.into()),
                closed: Some(true),
                add_tags: vec!["eu".into()],
                assignee: Some(Some(eva.id)),
                group: Some(Some("shipping".into())),
                fields: BTreeMap::from([
                    ("amount".to_string(), json!(12)),
                    ("carrier".to_string(), json!("PPL")),
                    ("keep".to_string(), json!("same")),
                ]),
                ..TicketChange::default()
            },
        )
        .await;
    let expected = BTreeMap::from([
        (
            "title".to_string(),
            moved(json!("Order o-1"), json!("Packed order")),
        ),
        ("status".to_string(), moved(json!(WAITING), json!(SHIPPED))),
        ("closed".to_string(), moved(json!(false), json!(true))),
        (
            "tags".to_string(),
            moved(json!([WAITING]), json!([WAITING, "eu"])),
        ),
        (
            "assignee".to_string(),
            moved(Value::Null, assignee_json(&eva)),
        ),
        (
            "group".to_string(),
            moved(json!("warehouse"), json!("shipping")),
        ),
        (
            "fields".to_string(),
            moved(
                json!({ "amount": 10, "carrier": null }),
                json!({ "amount": 12, "carrier": "PPL" }),
            ),
        ),
    ]);
    assert_eq!(write.change, expected, "every changed field, from and to");
    assert!(!write.created, "a change never creates");
    assert_eq!(
        desk.get(desk.acme, ticket.id).await,
        write.ticket,
        "the ticket reads back as answered"
    );
    assert!(
        write.ticket.updated_at >= ticket.updated_at,
        "updated_at moves forward"
    );
    assert_eq!(
        write
            .ticket
            .assignee
            .as_ref()
            .map(|assignee| (assignee.id, assignee.name.as_str())),
        Some((eva.id, "Eva")),
        "the assignee is Eva, with her name"
    );

    let back = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                closed: Some(false),
                assignee: Some(None),
                group: Some(None),
                fields: BTreeMap::from([("carrier".to_string(), Value::Null)]),
                ..TicketChange::default()
            },
        )
        .await;
    assert_eq!(
        back.change,
        BTreeMap::from([
            ("closed".to_string(), moved(json!(true), json!(false))),
            (
                "assignee".to_string(),
                moved(assignee_json(&eva), Value::Null)
            ),
            ("group".to_string(), moved(json!("shipping"), Value::Null)),
            (
                "fields".to_string(),
                moved(json!({ "carrier": "PPL" }), json!({ "carrier": null }))
            ),
        ]),
        "reopen, unassign, ungroup, remove a field"
    );
    assert_eq!(
        back.ticket.fields,
        BTreeMap::from([
            ("amount".to_string(), json!(12)),
            ("keep".to_string(), json!("same")),
        ]),
        "a null value removed the field"
    );
}

/// A change that changes nothing answers an empty change map and the ticket as it was,
/// and logs nothing.
pub async fn change_that_changes_nothing_logs_nothing(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    let ticket = desk.upsert(desk.acme, order("o-1")).await.ticket;
    for change in [
        TicketChange::default(),
        TicketChange {
            status: Some(WAITING.into()),
            closed: Some(false),
            add_tags: vec![WAITING.into()],
            title: Some(ticket.title.clone()),
            ticket_type: Some(ORDER.into()),
            assignee: Some(None),
            group: Some(None),
            ..TicketChange::default()
        },
    ] {
        let write = desk.change(desk.acme, ticket.id, change.clone()).await;
        assert!(
            write.change.is_empty(),
            "nothing changed: {:?} for {change:?}",
            write.change
        );
        assert_eq!(
            write.ticket, ticket,
            "the ticket as it was, same updated_at"
        );
    }
    assert_eq!(
        desk.log(desk.acme, ticket.id).await.len(),
        1,
        "only the creation is logged"
    );
}

/// Tags are a set in first-seen order: blanks dropped, repeats kept once, trimmed;
/// `add_tags` keeps the existing ones; `set_tags` replaces them (then `add_tags` adds).
pub async fn tags_are_a_set_in_first_seen_order(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let ticket = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                tags: vec![" b".into(), "a".into(), "b".into(), "".into(), "a".into()],
                ..upsert("t-1")
            },
        )
        .await
        .ticket;
    assert_eq!(ticket.tags, vec!["b", "a"], "a set in first-seen order");
    let added = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                add_tags: vec!["c".into(), "a".into()],
                ..TicketChange::default()
            },
        )
        .await;
    assert_eq!(
        added.ticket.tags,
        vec!["b", "a", "c"],
        "added, existing kept"
    );
    let set = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                set_tags: Some(vec!["z".into(), "z".into(), "y".into()]),
                ..TicketChange::default()
            },
        )
        .await;
    assert_eq!(set.ticket.tags, vec!["z", "y"], "replaced, as a set");
    let both = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                set_tags: Some(vec!["x".into()]),
                add_tags: vec!["y".into()],
                ..TicketChange::default()
            },
        )
        .await;
    assert_eq!(both.ticket.tags, vec!["x", "y"], "set, then added");
    let cleared = desk
        .change(
            desk.acme,
            ticket.id,
            TicketChange {
                set_tags: Some(Vec::new()),
                ..TicketChange::default()
            },
        )
        .await;
    assert!(cleared.ticket.tags.is_empty(), "set_tags of nothing clears");
    assert_eq!(
        cleared.change.get("tags"),
        Some(&moved(json!(["x", "y"]), json!([]))),
        "the change map shows the cleared tags"
    );
}

/// Every ticket write appends one log line, oldest first, saying what changed and who: a
/// create (`created`), an attach (`event`), a change and a least-busy assignment
/// (`changed`). A person's line names "person" and has no run; an automation's names the
/// automation and carries its run id.
pub async fn every_ticket_write_logs_what_changed_and_who(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    desk.team(desk.acme, "warehouse", &[("Eva", 5)]).await;
    let ticket = desk
        .store
        .ticket_upsert(desk.acme, order("o-1"), automation("shop", "run-1"))
        .await
        .expect("create")
        .ticket;
    desk.store
        .ticket_upsert(
            desk.acme,
            TicketUpsert {
                note: Some("order.paid".into()),
                ..upsert("o-1")
            },
            automation("shop", "run-2"),
        )
        .await
        .expect("attach");
    desk.store
        .ticket_change(
            desk.acme,
            ticket.id,
            TicketChange {
                status: Some(SHIPPED.into()),
                ..TicketChange::default()
            },
            Origin::Person,
        )
        .await
        .expect("a person's change");
    desk.store
        .ticket_assign_least_busy(
            desk.acme,
            ticket.id,
            "warehouse",
            automation("router", "run-3"),
        )
        .await
        .expect("assignment");
    let log = desk.log(desk.acme, ticket.id).await;
    let kinds: Vec<&str> = log.iter().map(|entry| entry.kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec!["created", "event", "changed", "changed"],
        "one line per write, oldest first: {log:?}"
    );
    let runs: Vec<Option<&str>> = log.iter().map(|entry| entry.run_id.as_deref()).collect();
    assert_eq!(
        runs,
        vec![Some("run-1"), Some("run-2"), None, Some("run-3")],
        "automation lines carry their run, a person's none"
    );
    let says = |index: usize, words: &[&str]| {
        for word in words {
            assert!(
                log[index].message.contains(word),
                "line {index} mentions {word:?}: {:?}",
                log[index].message
            );
        }
    };
    says(0, &["shop", "run-1", "Order o-1"]);
    says(1, &["shop", "run-2", "order.paid"]);
    says(2, &["person", WAITING, SHIPPED]);
    says(3, &["router", "run-3", "Eva", "warehouse"]);
    assert!(
        log.windows(2).all(|pair| pair[0].at <= pair[1].at),
        "lines are in time order: {log:?}"
    );
}

/// `ticket_log_append` adds the entry as given, after the existing lines.
pub async fn ticket_log_append_adds_the_entry_as_given(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let ticket = desk.ticket(desk.acme, "x-1").await;
    let at = chrono::DateTime::from_timestamp_millis(1_790_000_000_123).expect("a valid instant");
    let entry = TicketLogEntry {
        at,
        kind: "run".into(),
        message: "automation shop finished: 3 steps".into(),
        run_id: Some("run-9".into()),
    };
    desk.store
        .ticket_log_append(desk.acme, ticket.id, entry.clone())
        .await
        .expect("append succeeds");
    let guard = TicketLogEntry {
        kind: "guard".into(),
        message: "loop guard: 5 runs a minute".into(),
        run_id: None,
        ..entry.clone()
    };
    desk.store
        .ticket_log_append(desk.acme, ticket.id, guard.clone())
        .await
        .expect("append succeeds");
    let log = desk.log(desk.acme, ticket.id).await;
    assert_eq!(log.len(), 3, "creation plus two appended lines: {log:?}");
    assert_eq!(log[1], entry, "the first appended line reads back as given");
    assert_eq!(log[2], guard, "the second appended line follows it");
    assert_eq!(
        desk.get(desk.acme, ticket.id).await,
        ticket,
        "appending to the log does not change the ticket"
    );
}

// ---------------------------------------------------------------------------------------
// Least busy
// ---------------------------------------------------------------------------------------

/// The member with the fewest open tickets gets the ticket — before any ratio: 1 open of
/// capacity 2 beats 2 open of capacity 100 (among members with room: capacity is a cap,
/// see `room_cases`). The ticket gets the group's name too.
pub async fn least_busy_assigns_to_the_member_with_fewest_open_tickets(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    let team = desk
        .team(desk.acme, "warehouse", &[("Eva", 100), ("Jan", 2)])
        .await;
    let (eva, jan) = (&team[0], &team[1]);
    for index in 0..2 {
        let ticket = desk.ticket(desk.acme, &format!("eva-{index}")).await;
        desk.assign(desk.acme, ticket.id, eva.id).await;
    }
    let ticket = desk.ticket(desk.acme, "jan-0").await;
    desk.assign(desk.acme, ticket.id, jan.id).await;

    let next = desk.ticket(desk.acme, "next").await;
    let write = desk.least_busy(desk.acme, next.id, "warehouse").await;
    assert_eq!(
        write.ticket.assignee.as_ref().map(|assignee| assignee.id),
        Some(jan.id),
        "Jan has 1 open ticket, Eva 2"
    );
    assert_eq!(
        write.ticket.group.as_deref(),
        Some("warehouse"),
        "the ticket is in the group it was assigned from"
    );
    assert_eq!(
        write.change,
        BTreeMap::from([
            (
                "assignee".to_string(),
                moved(Value::Null, assignee_json(jan))
            ),
            ("group".to_string(), moved(Value::Null, json!("warehouse"))),
        ]),
        "the change map shows the assignee and the group"
    );
    assert_eq!(
        desk.get(desk.acme, next.id).await,
        write.ticket,
        "the assignment is stored"
    );
}

/// Closed tickets do not count: a member whose tickets are all closed is the least busy.
/// The incidents changed last come first, at most `limit`, the tenant's own only: a
/// repeat of an old open incident brings it to the front.
pub async fn recent_incidents_are_the_ones_changed_last(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let report_of = |cause: &str| desk.store.incident_report(desk.acme, report(cause, cause));
    let (first, _) = report_of("first").await.expect("opened");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    report_of("second").await.expect("opened");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    report_of("third").await.expect("opened");
    desk.store
        .incident_report(desk.globex, report("theirs", "theirs"))
        .await
        .expect("opened");
    let titles = |incidents: Vec<fronta_desk::Incident>| {
        incidents
            .into_iter()
            .map(|incident| incident.title)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        titles(
            desk.store
                .incident_recent(desk.acme, 2)
                .await
                .expect("read")
        ),
        ["third", "second"],
        "the two changed last"
    );
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (again, opened) = report_of("first").await.expect("counted");
    assert!(
        !opened && again.id == first.id,
        "a repeat of the open incident"
    );
    assert_eq!(
        titles(
            desk.store
                .incident_recent(desk.acme, 2)
                .await
                .expect("read")
        ),
        ["first", "third"],
        "the repeat brings it to the front"
    );
    assert_eq!(
        desk.store
            .incident_recent(desk.acme, 10)
            .await
            .expect("read")
            .len(),
        3,
        "the tenant's own only"
    );
}

/// A tenant's own retention is kept as set, listed with its tenant only, cleared by an
/// empty one; an unknown tenant is `NotFound`.
pub async fn a_tenants_own_retention_is_kept_and_cleared(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    assert_eq!(
        desk.store.tenant_retentions().await.expect("read"),
        Vec::new(),
        "none yet"
    );
    let own = TenantRetention {
        completed: Some(Keep::Secs(3600)),
        cancelled: None,
        failed: Some(Keep::Forever),
    };
    desk.store
        .tenant_retention_set(desk.acme, own)
        .await
        .expect("set");
    assert_eq!(
        desk.store.tenant_retentions().await.expect("read"),
        vec![(desk.acme, own)],
        "Acme's, as set; Globex has none"
    );
    desk.store
        .tenant_retention_set(desk.acme, TenantRetention::default())
        .await
        .expect("cleared");
    assert_eq!(
        desk.store.tenant_retentions().await.expect("read"),
        Vec::new(),
        "cleared"
    );
    assert_not_found(
        desk.store.tenant_retention_set(TenantId::new(), own).await,
        "an unknown tenant",
    );
}

/// The reads a dry run plans its writes on: the ticket of an external id (only in its
/// own tenant) and the open counts least busy reads (closed tickets leave them).
pub async fn a_dry_run_reads_what_the_writes_read(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let team = desk
        .team(
            desk.acme,
            "warehouse",
            &[("Eva", 5), ("Jan", 5), ("Petr", 5)],
        )
        .await;
    let group = desk
        .store
        .group_by_name(desk.acme, "warehouse")
        .await
        .expect("the group reads");
    let first = desk.ticket(desk.acme, "order-1").await;
    let second = desk.ticket(desk.acme, "order-2").await;
    desk.assign(desk.acme, first.id, team[0].id).await;
    desk.assign(desk.acme, second.id, team[0].id).await;
    let third = desk.ticket(desk.acme, "order-3").await;
    desk.assign(desk.acme, third.id, team[1].id).await;
    desk.close(desk.acme, third.id).await;

    let found = desk
        .store
        .ticket_by_external_id(desk.acme, "order-2")
        .await
        .expect("the read answers");
    assert_eq!(
        found.map(|t| t.id),
        Some(second.id),
        "order-2 is found by its external id"
    );
    let missing = desk
        .store
        .ticket_by_external_id(desk.globex, "order-2")
        .await
        .expect("the read answers");
    assert_eq!(missing, None, "another tenant's external id is not found");
    assert_eq!(
        desk.store
            .ticket_by_external_id(desk.acme, "order-9")
            .await
            .expect("the read answers"),
        None,
        "an external id nobody used"
    );

    let counts = desk
        .store
        .member_open_counts(desk.acme, group.id)
        .await
        .expect("the counts read");
    let count = |member: &Member| counts.get(&member.id).copied().unwrap_or(0);
    assert_eq!(
        (count(&team[0]), count(&team[1]), count(&team[2])),
        (2, 0, 0),
        "Eva holds 2 open tickets, Jan's one is closed, Petr has none: {counts:?}"
    );
    assert_not_found(
        desk.store.member_open_counts(desk.globex, group.id).await,
        "another tenant's group",
    );
}

pub async fn closed_tickets_do_not_count_towards_least_busy(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let team = desk
        .team(desk.acme, "warehouse", &[("Eva", 5), ("Jan", 5)])
        .await;
    let (eva, jan) = (&team[0], &team[1]);
    for index in 0..3 {
        let ticket = desk.ticket(desk.acme, &format!("eva-{index}")).await;
        desk.assign(desk.acme, ticket.id, eva.id).await;
        desk.close(desk.acme, ticket.id).await;
    }
    let ticket = desk.ticket(desk.acme, "jan-0").await;
    desk.assign(desk.acme, ticket.id, jan.id).await;
    let next = desk.ticket(desk.acme, "next").await;
    let write = desk.least_busy(desk.acme, next.id, "warehouse").await;
    assert_eq!(
        write.ticket.assignee.map(|assignee| assignee.id),
        Some(eva.id),
        "Eva's three tickets are closed: 0 open against Jan's 1"
    );
}

/// On a tie in open tickets the lowest open/capacity ratio wins, whatever the names.
pub async fn least_busy_tie_goes_to_the_lowest_open_to_capacity_ratio(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    let team = desk
        .team(desk.acme, "it", &[("Anna", 2), ("Zdenek", 10)])
        .await;
    for (index, member) in team.iter().enumerate() {
        let ticket = desk.ticket(desk.acme, &format!("t-{index}")).await;
        desk.assign(desk.acme, ticket.id, member.id).await;
    }
    let next = desk.ticket(desk.acme, "next").await;
    let write = desk.least_busy(desk.acme, next.id, "it").await;
    assert_eq!(
        write.ticket.assignee.map(|assignee| assignee.name),
        Some("Zdenek".to_string()),
        "1 of 10 beats 1 of 2, although Anna sorts first"
    );
}

/// The seed's scenario: warehouse (3), shipping (2) and IT (3); two orders go to the
/// warehouse, each to a different person (the second because the first already has
/// one); an error ticket goes to IT and opens an incident about it.
pub async fn warehouse_of_three_gets_two_orders_to_two_different_people(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    let warehouse = desk
        .team(
            desk.acme,
            "warehouse",
            &[("Eva", 5), ("Jan", 5), ("Petr", 5)],
        )
        .await;
    desk.team(desk.acme, "shipping", &[("Olga", 5), ("Karel", 5)])
        .await;
    let it = desk
        .team(desk.acme, "it", &[("Alena", 3), ("Boris", 3), ("Cyril", 3)])
        .await;
    let router = automation("route-orders", "run-route");
    let mut assignees = Vec::new();
    for order_id in ["5001", "5002"] {
        let ticket = desk
            .store
            .ticket_upsert(
                desk.acme,
                order(&format!("order-{order_id}")),
                automation("shop", "run-shop"),
            )
            .await
            .expect("the order ticket is created")
            .ticket;
        let write = desk
            .store
            .ticket_assign_least_busy(desk.acme, ticket.id, "warehouse", router.clone())
            .await
            .expect("the order is assigned");
        let assignee = write.ticket.assignee.expect("somebody got the order");
        assert!(
            warehouse.iter().any(|member| member.id == assignee.id),
            "order {order_id} went to the warehouse: {assignee:?}"
        );
        assignees.push(assignee.id);
    }
    assert_ne!(
        assignees[0], assignees[1],
        "the second order goes to another person"
    );

    let error = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                title: Some("Could not read the amount".into()),
                ticket_type: Some(ERROR.into()),
                status: Some(NEW.into()),
                ..upsert("doc-D-99")
            },
        )
        .await
        .ticket;
    let write = desk.least_busy(desk.acme, error.id, "it").await;
    assert!(
        it.iter()
            .any(|member| Some(member.id) == write.ticket.assignee.as_ref().map(|a| a.id)),
        "IT got the error ticket: {:?}",
        write.ticket.assignee
    );
    let (incident, opened) = desk
        .store
        .incident_report(
            desk.acme,
            IncidentReport {
                ticket: Some(error.id),
                ..report("converter:OCR_FAIL", "The document TK-3 was not read")
            },
        )
        .await
        .expect("the incident opens");
    assert!(opened, "a first incident of its cause opens");
    assert_eq!(incident.ticket, Some(error.id), "about the error ticket");
}

/// Six concurrent least-busy assignments over a group of three with equal capacity spread
/// two, two and two: each one counts the assignments committed before it.
pub async fn concurrent_least_busy_assignments_spread_evenly(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let team = desk
        .team(
            desk.acme,
            "warehouse",
            &[("Eva", 5), ("Jan", 5), ("Petr", 5)],
        )
        .await;
    let mut tickets = Vec::new();
    for index in 0..6 {
        tickets.push(desk.ticket(desk.acme, &format!("order-{index}")).await.id);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for ticket in tickets {
        let store = desk.store.clone();
        let tenant = desk.acme;
        tasks.spawn(async move {
            store
                .ticket_assign_least_busy(tenant, ticket, "warehouse", Origin::Person)
                .await
        });
    }
    let mut per_member: HashMap<MemberId, usize> = HashMap::new();
    while let Some(joined) = tasks.join_next().await {
        let write = joined
            .expect("the assignment task finishes")
            .expect("each assignment succeeds");
        let assignee = write.ticket.assignee.expect("somebody was assigned");
        *per_member.entry(assignee.id).or_default() += 1;
    }
    for member in &team {
        assert_eq!(
            per_member.get(&member.id).copied(),
            Some(2),
            "{} got two of six: {per_member:?}",
            member.name
        );
        assert_eq!(
            desk.list(
                desk.acme,
                TicketFilter {
                    assignee: Some(member.id),
                    ..TicketFilter::default()
                }
            )
            .await
            .len(),
            2,
            "{} has two tickets in the store",
            member.name
        );
    }
}

/// Least-busy into a group that does not exist is `NotFound`; into a group without
/// members it is `Invalid`; into an unknown ticket `NotFound`.
pub async fn least_busy_in_an_unknown_or_empty_group_is_refused(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.group(desk.acme, "empty").await;
    let ticket = desk.ticket(desk.acme, "x-1").await;
    assert_not_found(
        desk.store
            .ticket_assign_least_busy(desk.acme, ticket.id, "never", Origin::Person)
            .await,
        "an unknown group",
    );
    assert_invalid(
        desk.store
            .ticket_assign_least_busy(desk.acme, ticket.id, "empty", Origin::Person)
            .await,
        "a group without members",
    );
    assert_not_found(
        desk.store
            .ticket_assign_least_busy(desk.acme, TicketId::new(), "empty", Origin::Person)
            .await,
        "an unknown ticket",
    );
    assert_eq!(
        desk.get(desk.acme, ticket.id).await,
        ticket,
        "the ticket is unchanged"
    );
}

/// Running least-busy again on an assigned ticket does not count the ticket against its
/// own assignee: it stays (an empty change) and the log says why.
pub async fn least_busy_again_keeps_the_assignee_and_logs_why(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    desk.team(desk.acme, "warehouse", &[("Eva", 5), ("Jan", 5)])
        .await;
    let ticket = desk.ticket(desk.acme, "x-1").await;
    let first = desk.least_busy(desk.acme, ticket.id, "warehouse").await;
    let again = desk.least_busy(desk.acme, ticket.id, "warehouse").await;
    assert_eq!(
        again.ticket, first.ticket,
        "the ticket stays with {:?}",
        first.ticket.assignee
    );
    assert!(
        again.change.is_empty(),
        "nothing changed: {:?}",
        again.change
    );
    let log = desk.log(desk.acme, ticket.id).await;
    assert_eq!(
        log.len(),
        3,
        "creation, assignment, and the kept assignment"
    );
    let name = first.ticket.assignee.map(|assignee| assignee.name);
    assert!(
        name.as_deref()
            .is_some_and(|name| log[2].message.contains(name)),
        "the last line names the assignee who stays: {:?}",
        log[2].message
    );
}

/// Deleting a member unassigns its open tickets, each with a log line; its closed tickets
/// keep who handled them.
pub async fn deleting_a_member_unassigns_its_open_tickets_and_keeps_closed_ones(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    let eva = desk
        .team(desk.acme, "warehouse", &[("Eva", 5)])
        .await
        .remove(0);
    let open = desk.ticket(desk.acme, "open").await;
    let done = desk.ticket(desk.acme, "done").await;
    desk.assign(desk.acme, open.id, eva.id).await;
    desk.assign(desk.acme, done.id, eva.id).await;
    desk.close(desk.acme, done.id).await;
    desk.store
        .member_delete(desk.acme, eva.id)
        .await
        .expect("delete succeeds");
    assert_eq!(
        desk.get(desk.acme, open.id).await.assignee,
        None,
        "the open ticket is unassigned"
    );
    let log = desk.log(desk.acme, open.id).await;
    assert_eq!(log.len(), 3, "created, assigned, unassigned: {log:?}");
    assert!(
        log[2].message.contains("Eva"),
        "the unassignment line names the member: {:?}",
        log[2].message
    );
    assert_eq!(
        desk.get(desk.acme, done.id)
            .await
            .assignee
            .map(|assignee| (assignee.id, assignee.name)),
        Some((eva.id, "Eva".to_string())),
        "the closed ticket keeps who handled it"
    );
    assert_eq!(
        desk.log(desk.acme, done.id).await.len(),
        3,
        "the closed ticket's log is as it was"
    );
}

/// Deleting a group that open tickets carry is refused (`InUse`, with their count);
/// once they are closed, it deletes its members (their ids answer `NotFound`) and its
/// closed tickets keep their history, their group name and who handled them.
pub async fn deleting_a_group_removes_its_members_and_keeps_its_tickets(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    let team = desk
        .team(desk.acme, "warehouse", &[("Eva", 5), ("Jan", 5)])
        .await;
    let group = desk
        .store
        .group_by_name(desk.acme, "warehouse")
        .await
        .expect("the group reads");
    let ticket = desk.ticket(desk.acme, "x-1").await;
    desk.least_busy(desk.acme, ticket.id, "warehouse").await;
    match desk.store.group_delete(desk.acme, group.id).await {
        Err(DeskError::InUse { message, used_by }) => {
            assert_eq!(
                used_by,
                vec![fronta_desk::UsedBy::Tickets { open: 1 }],
                "the open ticket is counted"
            );
            assert!(
                message.contains("group \"warehouse\"") && message.contains("1 open ticket"),
                "says what and why: {message}"
            );
        }
        other => panic!("a group an open ticket carries is kept: {other:?}"),
    }
    let assignee = desk.get(desk.acme, ticket.id).await.assignee;
    desk.change(
        desk.acme,
        ticket.id,
        TicketChange {
            closed: Some(true),
            ..TicketChange::default()
        },
    )
    .await;
    desk.store
        .group_delete(desk.acme, group.id)
        .await
        .expect("with its tickets closed, the delete succeeds");
    for member in &team {
        assert_not_found(
            desk.store
                .member_update(desk.acme, member.id, None, None, Some(1))
                .await,
            "a member of a deleted group",
        );
    }
    assert_not_found(
        desk.store.member_list(desk.acme, group.id).await,
        "members of a deleted group",
    );
    let after = desk.get(desk.acme, ticket.id).await;
    assert_eq!(
        after.assignee, assignee,
        "the closed ticket keeps who handled it"
    );
    assert_eq!(
        after.group.as_deref(),
        Some("warehouse"),
        "the ticket keeps its group's name as history"
    );
    assert_eq!(
        desk.log(desk.acme, ticket.id).await.len(),
        3,
        "created, assigned, closed"
    );
    desk.group(desk.acme, "warehouse").await;
}

/// Renaming a member or a group shows on their tickets.
pub async fn renaming_a_member_or_a_group_shows_on_their_tickets(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let eva = desk
        .team(desk.acme, "warehouse", &[("Eva", 5)])
        .await
        .remove(0);
    let ticket = desk.ticket(desk.acme, "x-1").await;
    desk.least_busy(desk.acme, ticket.id, "warehouse").await;
    desk.store
        .member_update(desk.acme, eva.id, Some("Eva Novak"), None, None)
        .await
        .expect("rename succeeds");
    desk.store
        .group_rename(desk.acme, eva.group, "sklad")
        .await
        .expect("rename succeeds");
    let after = desk.get(desk.acme, ticket.id).await;
    assert_eq!(
        after.assignee.map(|assignee| (assignee.id, assignee.name)),
        Some((eva.id, "Eva Novak".to_string())),
        "the ticket shows the new member name"
    );
    assert_eq!(
        after.group.as_deref(),
        Some("sklad"),
        "the ticket shows the new group name"
    );
}

// ---------------------------------------------------------------------------------------
// Incidents
// ---------------------------------------------------------------------------------------

/// A first report opens an incident with its tenant face (title, impact), its admin
/// detail, its ticket, count 1; it reads back for the tenant and for the admin.
pub async fn incident_report_opens_one_with_its_faces(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let ticket = desk.ticket(desk.acme, "x-1").await;
    let (incident, opened) = desk
        .store
        .incident_report(
            desk.acme,
            IncidentReport {
                ticket: Some(ticket.id),
                ..report(
                    "http:idoklad:401",
                    "The automation for ticket TK-1 did not finish",
                )
            },
        )
        .await
        .expect("report succeeds");
    assert!(opened, "the first report opens an incident");
    assert_eq!(incident.tenant, desk.acme, "the incident is the tenant's");
    assert_eq!(
        (
            incident.cause.as_str(),
            incident.title.as_str(),
            incident.impact.as_str()
        ),
        (
            "http:idoklad:401",
            "The automation for ticket TK-1 did not finish",
            "We lost no data."
        ),
        "cause, title, impact"
    );
    assert_eq!(
        incident.detail,
        json!({ "automation": "a-1", "run": "r-1", "message": "boom" }),
        "the admin detail"
    );
    assert_eq!(
        (
            incident.status,
            incident.count,
            incident.ticket,
            incident.resolved_at
        ),
        (IncidentStatus::Open, 1, Some(ticket.id), None),
        "open, once, about the ticket"
    );
    assert_eq!(
        incident.created_at, incident.updated_at,
        "new: updated when created"
    );
    assert_eq!(
        desk.store.incident_get(Some(desk.acme), incident.id).await,
        Ok(incident.clone()),
        "the tenant reads it back"
    );
    assert_eq!(
        desk.store.incident_get(None, incident.id).await,
        Ok(incident.clone()),
        "the admin reads it back"
    );
    assert_invalid(
        desk.store
            .incident_report(desk.acme, report(" ", "t"))
            .await,
        "a blank cause",
    );
}

/// While an incident with the same cause is open, a report bumps its count and
/// `updated_at` and answers `false`; the first title stays. Another cause opens another.
pub async fn same_cause_while_open_bumps_the_count_instead_of_opening_another(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    let (first, opened) = desk
        .store
        .incident_report(desk.acme, report("cause-a", "First"))
        .await
        .expect("report succeeds");
    assert!(opened, "the first report opens");
    let (again, opened) = desk
        .store
        .incident_report(desk.acme, report("cause-a", "Second"))
        .await
        .expect("report succeeds");
    assert!(!opened, "a repeat while open does not open another");
    assert_eq!(again.id, first.id, "the same incident");
    assert_eq!(again.count, 2, "the count is bumped");
    assert_eq!(again.title, "First", "the first title stays");
    assert!(
        again.updated_at >= first.updated_at && again.created_at == first.created_at,
        "updated_at moves, created_at stays"
    );
    let (third, _) = desk
        .store
        .incident_report(desk.acme, report("cause-a", "Third"))
        .await
        .expect("report succeeds");
    assert_eq!(third.count, 3, "every repeat counts");
    let (other, opened) = desk
        .store
        .incident_report(desk.acme, report("cause-b", "Other"))
        .await
        .expect("report succeeds");
    assert!(
        opened && other.id != first.id,
        "another cause opens another"
    );
    let listed: Vec<(IncidentId, u32)> = desk
        .store
        .incident_list(Some(desk.acme))
        .await
        .expect("list succeeds")
        .iter()
        .map(|incident| (incident.id, incident.count))
        .collect();
    assert_eq!(
        listed,
        vec![(other.id, 1), (first.id, 3)],
        "two incidents, newest first"
    );
}

/// Resolving sets `resolved` and `resolved_at`; resolving again changes nothing; after
/// that the same cause opens a new incident, and the resolved one stays as it was;
/// `incident_open_all` answers the open ones of every tenant only.
pub async fn after_resolve_the_same_cause_opens_a_new_incident(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    let (first, _) = desk
        .store
        .incident_report(desk.acme, report("cause-a", "First"))
        .await
        .expect("report succeeds");
    desk.store
        .incident_report(desk.acme, report("cause-a", "First"))
        .await
        .expect("repeat succeeds");
    let resolved = desk
        .store
        .incident_resolve(desk.acme, first.id)
        .await
        .expect("resolve succeeds");
    assert_eq!(
        (resolved.id, resolved.status, resolved.count),
        (first.id, IncidentStatus::Resolved, 2),
        "resolved, count kept"
    );
    let resolved_at = resolved
        .resolved_at
        .expect("a resolved incident has resolved_at");
    assert!(resolved_at >= first.created_at, "resolved after it opened");
    assert_eq!(
        desk.store.incident_resolve(desk.acme, first.id).await,
        Ok(resolved.clone()),
        "resolving again changes nothing"
    );
    let (next, opened) = desk
        .store
        .incident_report(desk.acme, report("cause-a", "Again"))
        .await
        .expect("report succeeds");
    assert!(opened, "after resolve the same cause opens a new incident");
    assert_ne!(next.id, first.id, "a new incident");
    assert_eq!(
        (next.status, next.count, next.title.as_str()),
        (IncidentStatus::Open, 1, "Again"),
        "the new one is open, counted once"
    );
    let (other, _) = desk
        .store
        .incident_report(desk.globex, report("cause-b", "Elsewhere"))
        .await
        .expect("report succeeds");
    let mut open: Vec<_> = desk
        .store
        .incident_open_all()
        .await
        .expect("open incidents")
        .iter()
        .map(|incident| (incident.id, incident.status))
        .collect();
    open.sort_by_key(|(id, _)| id.0);
    let mut wanted = vec![
        (other.id, IncidentStatus::Open),
        (next.id, IncidentStatus::Open),
    ];
    wanted.sort_by_key(|(id, _)| id.0);
    assert_eq!(
        open, wanted,
        "the open incidents of every tenant, never the resolved one"
    );
    assert_eq!(
        desk.store.incident_get(Some(desk.acme), first.id).await,
        Ok(resolved),
        "the resolved one stays as it was"
    );
}

/// Incidents belong to their tenant: the same cause in two tenants opens two, a repeat
/// bumps only its own tenant's, a tenant lists only its own; `incident_list(None)` and
/// `incident_get(None, …)` are the admin view of all.
pub async fn incidents_are_scoped_to_their_tenant_and_the_admin_sees_all(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    let (ours, opened_ours) = desk
        .store
        .incident_report(desk.acme, report("same", "Acme"))
        .await
        .expect("Acme's report");
    let (theirs, opened_theirs) = desk
        .store
        .incident_report(desk.globex, report("same", "Globex"))
        .await
        .expect("Globex's report");
    assert!(
        opened_ours && opened_theirs && ours.id != theirs.id,
        "the same cause opens one incident per tenant"
    );
    let (bumped, _) = desk
        .store
        .incident_report(desk.globex, report("same", "Globex"))
        .await
        .expect("Globex's repeat");
    assert_eq!(
        (bumped.id, bumped.count),
        (theirs.id, 2),
        "Globex's repeat bumps Globex's"
    );
    assert_eq!(
        desk.store
            .incident_get(Some(desk.acme), ours.id)
            .await
            .map(|incident| incident.count),
        Ok(1),
        "Acme's is untouched"
    );
    let acme_ids: Vec<IncidentId> = desk
        .store
        .incident_list(Some(desk.acme))
        .await
        .expect("Acme's list")
        .iter()
        .map(|incident| incident.id)
        .collect();
    assert_eq!(acme_ids, vec![ours.id], "Acme lists only its own");
    let all: HashSet<IncidentId> = desk
        .store
        .incident_list(None)
        .await
        .expect("the admin list")
        .iter()
        .map(|incident| incident.id)
        .collect();
    assert_eq!(
        all,
        HashSet::from([ours.id, theirs.id]),
        "the admin sees every tenant's"
    );
    assert_eq!(
        desk.store
            .incident_get(None, theirs.id)
            .await
            .map(|incident| incident.tenant),
        Ok(desk.globex),
        "the admin reads any tenant's incident"
    );
    assert_not_found(
        desk.store.incident_get(None, IncidentId::new()).await,
        "an unknown incident for the admin",
    );
}

// ---------------------------------------------------------------------------------------
// Listing tickets
// ---------------------------------------------------------------------------------------

/// `ticket_list` filters by status, tag (a whole tag, not a substring), closed, assignee
/// and type, alone or together, newest number first.
pub async fn ticket_list_filters_by_status_tag_closed_assignee_and_type(
    factory: &dyn DeskStoreFactory,
) {
    let desk = Desk::open(factory).await;
    desk.types(desk.acme).await;
    let team = desk
        .team(desk.acme, "warehouse", &[("Eva", 5), ("Jan", 5)])
        .await;
    let (eva, jan) = (&team[0], &team[1]);
    // 1: order waiting, [waiting, eu], Eva
    let t1 = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                tags: vec![WAITING.into(), "eu".into()],
                ..order("o-1")
            },
        )
        .await
        .ticket;
    desk.assign(desk.acme, t1.id, eva.id).await;
    // 2: order shipped, [eu, vip], closed
    let t2 = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                status: Some(SHIPPED.into()),
                tags: vec!["eu".into(), "vip".into()],
                ..order("o-2")
            },
        )
        .await
        .ticket;
    desk.close(desk.acme, t2.id).await;
    // 3: error new, [vip], Jan
    let t3 = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                ticket_type: Some(ERROR.into()),
                status: Some(NEW.into()),
                tags: vec!["vip".into()],
                ..upsert("e-1")
            },
        )
        .await
        .ticket;
    desk.assign(desk.acme, t3.id, jan.id).await;
    // 4: untyped, no tags
    desk.ticket(desk.acme, "x-1").await;
    // 5: order waiting, [us], Eva
    let t5 = desk
        .upsert(
            desk.acme,
            TicketUpsert {
                tags: vec!["us".into()],
                ..order("o-3")
            },
        )
        .await
        .ticket;
    desk.assign(desk.acme, t5.id, eva.id).await;

    let cases: Vec<(TicketFilter, Vec<i64>, &str)> = vec![
        (TicketFilter::default(), vec![5, 4, 3, 2, 1], "no filter"),
        (
            TicketFilter {
                status: Some(WAITING.into()),
                ..TicketFilter::default()
            },
            vec![5, 1],
            "status",
        ),
        (
            TicketFilter {
                tag: Some("vip".into()),
                ..TicketFilter::default()
            },
            vec![3, 2],
            "tag",
        ),
        (
            TicketFilter {
                tag: Some("vi".into()),
                ..TicketFilter::default()
            },
            vec![],
            "a tag matches whole, never a part",
        ),
        (
            TicketFilter {
                closed: Some(true),
                ..TicketFilter::default()
            },
            vec![2],
            "closed",
        ),
        (
            TicketFilter {
                closed: Some(false),
                ..TicketFilter::default()
            },
            vec![5, 4, 3, 1],
            "open",
        ),
        (
            TicketFilter {
                assignee: Some(eva.id),
                ..TicketFilter::default()
            },
            vec![5, 1],
            "assignee",
        ),
        (
            TicketFilter {
                ticket_type: Some(ERROR.into()),
                ..TicketFilter::default()
            },
            vec![3],
            "type",
        ),
        (
            TicketFilter {
                ticket_type: Some(ORDER.into()),
                tag: Some("eu".into()),
                ..TicketFilter::default()
            },
            vec![2, 1],
            "type and tag",
        ),
        (
            TicketFilter {
                ticket_type: Some(ORDER.into()),
                tag: Some("eu".into()),
                closed: Some(false),
                assignee: Some(eva.id),
                status: Some(WAITING.into()),
                ..TicketFilter::default()
            },
            vec![1],
            "every filter at once",
        ),
        (
            TicketFilter {
                assignee: Some(MemberId::new()),
                ..TicketFilter::default()
            },
            vec![],
            "an unknown assignee",
        ),
    ];
    for (filter, expected, label) in cases {
        assert_eq!(
            desk.list(desk.acme, filter.clone()).await,
            expected,
            "{label}: {filter:?}"
        );
    }
    let tickets = desk
        .store
        .ticket_list(
            desk.acme,
            TicketFilter {
                ticket_type: Some(ERROR.into()),
                ..TicketFilter::default()
            },
        )
        .await
        .expect("list succeeds");
    assert_eq!(
        tickets,
        vec![desk.get(desk.acme, t3.id).await],
        "a listed ticket reads as ticket_get does"
    );
}

/// `ticket_list` pages newest first: `limit` caps a page (0 = the store's default page,
/// at least 100) and `before_number` continues below a number.
pub async fn ticket_list_is_newest_first_and_pages_by_number(factory: &dyn DeskStoreFactory) {
    let desk = Desk::open(factory).await;
    for index in 1..=5 {
        desk.ticket(desk.acme, &format!("t-{index}")).await;
    }
    let page = |before_number: Option<i64>, limit: usize| TicketFilter {
        before_number,
        limit,
        ..TicketFilter::default()
    };
    assert_eq!(
        desk.list(desk.acme, page(None, 2)).await,
        vec![5, 4],
        "the first page"
    );
    assert_eq!(
        desk.list(desk.acme, page(Some(4), 2)).await,
        vec![3, 2],
        "the second page, below 4"
    );
    assert_eq!(
        desk.list(desk.acme, page(Some(2), 2)).await,
        vec![1],
        "the last page"
    );
    assert!(
        desk.list(desk.acme, page(Some(1), 2)).await.is_empty(),
        "nothing below 1"
    );
    assert_eq!(
        desk.list(desk.acme, page(None, 0)).await,
        vec![5, 4, 3, 2, 1],
        "limit 0 is the default page"
    );
    assert_eq!(
        desk.list(desk.acme, page(Some(100), 3)).await,
        vec![5, 4, 3],
        "a cursor above every number starts at the newest"
    );
}
