//! Capacity as a cap and availability (`DeskStore::ticket_assign`, the contract's
//! "Waking"): least busy gives no ticket past a member's capacity nor to a member who is
//! away, also under concurrent assignments; a run waiting for room is written once and
//! made due by the ticket write that makes room, or by a member coming back. Run by the
//! automation suite (they need the desk and the runs of one database).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fronta_desk::store::{AssignTo, Assignment, TicketChange, TicketUpsert, WhenFull};
use fronta_desk::{DeskError, DeskStore, GroupId, Member, Origin, TenantId, TicketId};
use fronta_engine::{NewRun, RunId, RunStore};
use serde_json::json;

use crate::AutomationStoreFactory;

struct Room {
    desk: Arc<dyn DeskStore>,
    runs: Arc<dyn RunStore>,
    acme: TenantId,
    group: GroupId,
}

impl Room {
    /// A store whose ticket event sink starts nothing, with tenant Acme and an empty
    /// group `warehouse`.
    async fn open(factory: &dyn AutomationStoreFactory) -> Self {
        let (desk, runs, _) = factory
            .open_with_sink(Arc::new(|_: &fronta_desk::store::TicketEvent, _: &[_]| {
                Vec::new()
            }))
            .await;
        let (acme, _) = desk.tenant_create("Acme").await.expect("tenant Acme");
        let group = desk
            .group_create(acme.id, "warehouse")
            .await
            .expect("group warehouse")
            .id;
        Self {
            desk,
            runs,
            acme: acme.id,
            group,
        }
    }

    async fn member(&self, name: &str, capacity: u32) -> Member {
        self.desk
            .member_add(self.acme, self.group, name, None, capacity)
            .await
            .expect("member added")
    }

    async fn ticket(&self, external_id: &str) -> TicketId {
        self.desk
            .ticket_upsert(
                self.acme,
                TicketUpsert {
                    external_id: external_id.into(),
                    title: Some(format!("Order {external_id}")),
                    ..TicketUpsert::default()
                },
                Origin::Person,
            )
            .await
            .expect("ticket created")
            .ticket
            .id
    }

    async fn assign(&self, ticket: TicketId, to: AssignTo, origin: Origin) -> Assignment {
        self.desk
            .ticket_assign(self.acme, ticket, "warehouse", to, origin)
            .await
            .expect("the assignment answers")
    }

    /// A pending run snoozed an hour ahead, as a run waiting for room is.
    async fn snoozed_run(&self) -> RunId {
        let id = RunId::new_v7();
        self.runs
            .run_enqueue_many(vec![NewRun {
                id,
                tenant: self.acme.to_string(),
                kind: "automation".into(),
                payload: json!({}),
                trigger: fronta_engine::Trigger::Event,
                unique_key: None,
                priority: 0,
                delay: Some(Duration::from_secs(3600)),
                run_at: None,
                max_retries: 3,
            }])
            .await
            .expect("run enqueued");
        id
    }

    async fn run_at(&self, id: RunId) -> DateTime<Utc> {
        self.runs
            .run_get(id)
            .await
            .expect("run_get answers")
            .expect("the run exists")
            .run_at
    }

    async fn open_counts(&self) -> Vec<(String, i64, u32)> {
        let counts = self
            .desk
            .member_open_counts(self.acme, self.group)
            .await
            .expect("counts");
        self.desk
            .member_list(self.acme, self.group)
            .await
            .expect("members")
            .into_iter()
            .map(|member| {
                let open = counts.get(&member.id).copied().unwrap_or(0);
                (member.name, open, member.capacity)
            })
            .collect()
    }
}

fn run_origin(run: RunId) -> Origin {
    Origin::Automation {
        automation_id: "a-room".into(),
        run_id: run.to_string(),
        chain: vec![],
    }
}

fn assignee(assignment: &Assignment) -> Option<String> {
    match assignment {
        Assignment::Assigned(write) => write.ticket.assignee.as_ref().map(|a| a.name.clone()),
        Assignment::Waiting { .. } => None,
    }
}

/// Least busy gives nobody more than their capacity (0 takes nothing) and nothing to a
/// member who is away; the one away keeps their open ticket; with nobody left with room,
/// `fail` refuses naming the group and `assignAnyway` gives it past capacity to an
/// available member.
pub async fn least_busy_respects_capacity_and_availability(factory: &dyn AutomationStoreFactory) {
    let room = Room::open(factory).await;
    let eva = room.member("Eva", 2).await;
    let jan = room.member("Jan", 5).await;
    room.member("Zero", 0).await;
    let held = room.ticket("held").await;
    let named = room
        .assign(held, AssignTo::Member("Jan".into()), Origin::Person)
        .await;
    assert_eq!(assignee(&named).as_deref(), Some("Jan"), "assigned by name");
    let away = room
        .desk
        .member_set_available(room.acme, jan.id, false)
        .await
        .expect("Jan is away");
    assert!(!away.available, "the answer says so");
    let listed = room
        .desk
        .member_list(room.acme, room.group)
        .await
        .expect("members");
    assert!(
        listed.iter().any(|m| m.name == "Jan" && !m.available)
            && listed.iter().any(|m| m.name == "Eva" && m.available),
        "availability is stored, available by default: {listed:?}"
    );
    for n in 0..2 {
        let ticket = room.ticket(&format!("o-{n}")).await;
        let done = room
            .assign(ticket, AssignTo::LeastBusy(WhenFull::Fail), Origin::Person)
            .await;
        assert_eq!(
            assignee(&done).as_deref(),
            Some("Eva"),
            "only Eva is available with room"
        );
    }
    let third = room.ticket("o-3").await;
    let refused = room
        .desk
        .ticket_assign(
            room.acme,
            third,
            "warehouse",
            AssignTo::LeastBusy(WhenFull::Fail),
            Origin::Person,
        )
        .await
        .expect_err("nobody has room");
    assert!(
        matches!(&refused, DeskError::Invalid(message)
            if message.contains("every member of group \"warehouse\" is full or away")
                && message.contains("2 of 3 members full, 1 away")),
        "names the group and that its members are full: {refused:?}"
    );
    let jans = room
        .desk
        .ticket_get(room.acme, held)
        .await
        .expect("Jan's ticket");
    assert_eq!(
        jans.assignee.map(|a| a.id),
        Some(jan.id),
        "a member away keeps their open tickets"
    );
    let anyway = room
        .assign(
            third,
            AssignTo::LeastBusy(WhenFull::AssignAnyway),
            Origin::Person,
        )
        .await;
    assert_eq!(
        assignee(&anyway).as_deref(),
        Some("Eva"),
        "past capacity, but never to Jan (away) nor Zero (capacity 0 takes no work)"
    );
    let log = room.desk.ticket_log(room.acme, third).await.expect("log");
    assert!(
        log.iter()
            .any(|line| line.message.contains("assigned anyway")),
        "the ticket's log says it went past capacity: {log:?}"
    );
    let counts = room.open_counts().await;
    assert!(
        counts.contains(&("Eva".into(), 3, eva.capacity)),
        "{counts:?}"
    );
}

/// A run that finds no room is written as waiting once (one ticket log line however
/// often it looks), and the close of a ticket in the group makes it due at once; its
/// next look assigns.
pub async fn a_run_waiting_for_room_is_woken_by_a_close_in_the_group(
    factory: &dyn AutomationStoreFactory,
) {
    let room = Room::open(factory).await;
    room.member("Eva", 1).await;
    let first = room.ticket("first").await;
    room.assign(first, AssignTo::LeastBusy(WhenFull::Wait), Origin::Person)
        .await;
    let second = room.ticket("second").await;
    let run = room.snoozed_run().await;
    for _ in 0..2 {
        let waiting = room
            .assign(second, AssignTo::LeastBusy(WhenFull::Wait), run_origin(run))
            .await;
        let Assignment::Waiting { message, ticket } = waiting else {
            panic!("Eva is full: the run waits, got {waiting:?}")
        };
        assert!(
            message.starts_with("waiting for room in warehouse: 1 of 1 members full ("),
            "{message}"
        );
        assert!(ticket.assignee.is_none(), "the ticket is unchanged");
    }
    let log = room.desk.ticket_log(room.acme, second).await.expect("log");
    let said = log
        .iter()
        .filter(|line| line.message.contains("waiting for room in warehouse"))
        .count();
    assert_eq!(said, 1, "one line however often it looks: {log:?}");
    let snoozed = room.run_at(run).await;
    room.desk
        .ticket_change(
            room.acme,
            first,
            TicketChange {
                add_tags: vec!["checked".into()],
                ..TicketChange::default()
            },
            Origin::Person,
        )
        .await
        .expect("a tag");
    assert_eq!(
        room.run_at(run).await,
        snoozed,
        "a change that makes no room wakes nobody"
    );
    room.desk
        .ticket_change(
            room.acme,
            first,
            TicketChange {
                closed: Some(true),
                ..TicketChange::default()
            },
            Origin::Person,
        )
        .await
        .expect("the close");
    let woken = room.run_at(run).await;
    assert!(
        woken < snoozed - chrono::Duration::minutes(30),
        "the close made the waiting run due now: {woken} (was {snoozed})"
    );
    let assigned = room
        .assign(second, AssignTo::LeastBusy(WhenFull::Wait), run_origin(run))
        .await;
    assert_eq!(assignee(&assigned).as_deref(), Some("Eva"), "room now");
}

/// A member back from away (or given more capacity) wakes the runs waiting on the group.
pub async fn a_member_back_from_away_wakes_the_waiting_runs(factory: &dyn AutomationStoreFactory) {
    let room = Room::open(factory).await;
    let eva = room.member("Eva", 3).await;
    room.desk
        .member_set_available(room.acme, eva.id, false)
        .await
        .expect("Eva away");
    let ticket = room.ticket("t").await;
    let run = room.snoozed_run().await;
    let waiting = room
        .assign(ticket, AssignTo::LeastBusy(WhenFull::Wait), run_origin(run))
        .await;
    assert!(
        matches!(&waiting, Assignment::Waiting { message, .. }
            if message.starts_with("waiting for room in warehouse: 0 of 1 members full, 1 away")),
        "{waiting:?}"
    );
    let snoozed = room.run_at(run).await;
    room.desk
        .member_set_available(room.acme, eva.id, true)
        .await
        .expect("Eva back");
    assert!(
        room.run_at(run).await < snoozed - chrono::Duration::minutes(30),
        "Eva's return made the run due now"
    );
}

/// Many assignments into one group at once never take a member past capacity: exactly
/// the group's total capacity is assigned, the rest refused as full.
pub async fn concurrent_assignments_never_exceed_capacity(factory: &dyn AutomationStoreFactory) {
    let room = Arc::new(Room::open(factory).await);
    for (name, capacity) in [("Eva", 2), ("Jan", 3), ("Ida", 1)] {
        room.member(name, capacity).await;
    }
    let mut tickets = Vec::new();
    for n in 0..16 {
        tickets.push(room.ticket(&format!("race-{n}")).await);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for ticket in tickets {
        let room = room.clone();
        tasks.spawn(async move {
            room.desk
                .ticket_assign(
                    room.acme,
                    ticket,
                    "warehouse",
                    AssignTo::LeastBusy(WhenFull::Fail),
                    Origin::Person,
                )
                .await
        });
    }
    let (mut assigned, mut full) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("the task ran") {
            Ok(Assignment::Assigned(_)) => assigned += 1,
            Err(DeskError::Invalid(message)) if message.contains("is full") => full += 1,
            other => panic!("unexpected answer: {other:?}"),
        }
    }
    let counts = room.open_counts().await;
    for (name, open, capacity) in &counts {
        assert!(
            *open <= i64::from(*capacity),
            "{name} holds {open} of {capacity}: {counts:?}"
        );
    }
    let total: i64 = counts.iter().map(|(_, open, _)| open).sum();
    assert_eq!(total, assigned, "every assignment counted once");
    assert_eq!(assigned, 6, "the group's whole capacity and no more");
    assert!(full >= 1, "the rest were refused as full");
}
