//! What only the Postgres desk and automation ports promise, beyond the shared suites:
//! least busy reads one counter row per member by primary key (never the tickets); the
//! trigger-kept open counts equal a recount after every kind of ticket and member write;
//! concurrent changes of one ticket lose nothing (its row lock); the raw API token is
//! nowhere in the database; the guard prunes its rows and goes with its automation; a
//! panicking event sink fails only its write; the desk migrations upgrade a database
//! that holds runs without touching them.
//!
//! Every test makes its own database on the test server (see `support`).

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fronta_automation::Automation;
use fronta_automation::store::{AutomationStore, TicketEventSink};
use fronta_desk::store::{TicketChange, TicketEvent, TicketUpsert};
use fronta_desk::{DeskError, DeskStore, Origin, TenantId};
use fronta_engine::{Dispatcher, EnqueueRequest, RunStore};
use fronta_store_postgres::desk::LOCK_MEMBER_OPEN;
use fronta_store_postgres::schema;
use serde_json::Value;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use crate::support::TestDb;

fn upsert(external_id: &str) -> TicketUpsert {
    TicketUpsert {
        external_id: external_id.into(),
        ..TicketUpsert::default()
    }
}

/// Every node of an `EXPLAIN (FORMAT JSON)` plan, depth first.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut out = vec![plan];
    if let Some(children) = plan.get("Plans").and_then(Value::as_array) {
        for child in children {
            out.extend(nodes(child));
        }
    }
    out
}

async fn count(conn: &mut PgConnection, sql: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .fetch_one(conn)
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_busy_reads_one_counter_row_per_member_by_primary_key() {
    let db = TestDb::create().await;
    let _store = db.store(None).await;
    let mut conn = db.connection().await;
    // A desk of 20,000 members' counts: a scan would show in the plan.
    sqlx::raw_sql(
        "INSERT INTO desk_member_open (member, open) \
         SELECT gen_random_uuid(), n % 7 FROM generate_series(1, 20000) AS n; \
         ANALYZE desk_member_open",
    )
    .execute(&mut conn)
    .await
    .expect("fill the counts");
    let members: Vec<Uuid> =
        sqlx::query_scalar("SELECT member FROM desk_member_open ORDER BY open, member LIMIT 3")
            .fetch_all(&mut conn)
            .await
            .expect("three members");
    for mode in ["force_custom_plan", "force_generic_plan"] {
        sqlx::raw_sql(AssertSqlSafe(format!("SET plan_cache_mode = {mode}")))
            .execute(&mut conn)
            .await
            .expect("plan cache mode");
        let explained: Value = sqlx::query_scalar(AssertSqlSafe(format!(
            "EXPLAIN (FORMAT JSON) {LOCK_MEMBER_OPEN}"
        )))
        .bind(&members)
        .fetch_one(&mut conn)
        .await
        .expect("explain the least-busy read");
        let root = &explained[0]["Plan"];
        let all = nodes(root);
        let relations: Vec<&str> = all
            .iter()
            .filter_map(|node| node.get("Relation Name").and_then(Value::as_str))
            .collect();
        assert_eq!(
            relations,
            ["desk_member_open"],
            "{mode}: the read touches the counts only, never the tickets: {explained:#}"
        );
        // An index scan of the key, or a bitmap scan driven by it: never a scan.
        assert!(
            all.iter().all(|node| node["Node Type"] != "Seq Scan"),
            "{mode}: no sequential scan of the counts: {explained:#}"
        );
        let indexes: Vec<&str> = all
            .iter()
            .filter_map(|node| node.get("Index Name").and_then(Value::as_str))
            .collect();
        assert_eq!(
            indexes,
            ["desk_member_open_pkey"],
            "{mode}: the counts are probed by primary key: {explained:#}"
        );
    }
    let rows: Vec<(Uuid, i64)> = sqlx::query_as(LOCK_MEMBER_OPEN)
        .bind(&members)
        .fetch_all(&mut conn)
        .await
        .expect("the statement runs");
    assert_eq!(rows.len(), 3, "one row per member");
}

/// The trigger-kept counts against `SELECT count(*)` of open assigned tickets, for every
/// member that still exists.
async fn assert_counts_match(conn: &mut PgConnection, when: &str) {
    let kept: HashMap<Uuid, i64> = sqlx::query_as::<_, (Uuid, i64)>(
        "SELECT o.member, o.open FROM desk_member_open o JOIN desk_members m ON m.id = o.member",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("read the counts")
    .into_iter()
    .collect();
    let recounted: HashMap<Uuid, i64> = sqlx::query_as::<_, (Uuid, i64)>(
        "SELECT m.id, count(t.id) FROM desk_members m \
         LEFT JOIN desk_tickets t ON t.assignee = m.id AND NOT t.closed GROUP BY m.id",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("recount")
    .into_iter()
    .collect();
    assert_eq!(kept, recounted, "{when}: the kept counts equal a recount");
    let negative = count(conn, "SELECT count(*) FROM desk_member_open WHERE open < 0").await;
    assert_eq!(negative, 0, "{when}: no count goes below zero");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_open_counts_equal_a_recount_after_every_kind_of_write() {
    let db = TestDb::create().await;
    let store = db.store(None).await;
    let mut conn = db.connection().await;
    let (tenant, _) = store.tenant_create("Acme").await.expect("tenant");
    let tenant = tenant.id;
    let warehouse = store
        .group_create(tenant, "warehouse")
        .await
        .expect("group");
    let shipping = store.group_create(tenant, "shipping").await.expect("group");
    let mut people = Vec::new();
    for (group, name) in [
        (warehouse.id, "Eva"),
        (warehouse.id, "Jan"),
        (shipping.id, "Olga"),
    ] {
        people.push(
            store
                .member_add(tenant, group, name, None, 3)
                .await
                .expect("member"),
        );
    }
    assert_counts_match(&mut conn, "members added").await;
    let mut tickets = Vec::new();
    for index in 0..6 {
        let ticket = store
            .ticket_upsert(tenant, upsert(&format!("t-{index}")), Origin::Person)
            .await
            .expect("ticket")
            .ticket;
        store
            .ticket_assign_least_busy(tenant, ticket.id, "warehouse", Origin::Person)
            .await
            .expect("least busy");
        tickets.push(ticket.id);
    }
    assert_counts_match(&mut conn, "least busy").await;
    let change =
        |closed: Option<bool>, assignee: Option<Option<fronta_desk::MemberId>>| TicketChange {
            closed,
            assignee,
            ..TicketChange::default()
        };
    for (ticket, change) in [
        (tickets[0], change(Some(true), None)),
        (tickets[1], change(None, Some(Some(people[2].id)))),
        (tickets[2], change(None, Some(None))),
        (tickets[0], change(Some(false), Some(Some(people[2].id)))),
        (tickets[3], change(Some(true), Some(Some(people[1].id)))),
    ] {
        store
            .ticket_change(tenant, ticket, change, Origin::Person)
            .await
            .expect("change");
    }
    assert_counts_match(&mut conn, "closes, reopens and moves").await;
    store
        .member_delete(tenant, people[0].id)
        .await
        .expect("member delete");
    assert_counts_match(&mut conn, "member delete").await;
    store
        .ticket_assign_least_busy(tenant, tickets[4], "shipping", Origin::Person)
        .await
        .expect("least busy across groups");
    // A group open tickets carry is kept (409 in_use): they leave the group first, and
    // keep their assignees for the delete to unassign.
    for ticket in &tickets {
        store
            .ticket_change(
                tenant,
                *ticket,
                TicketChange {
                    group: Some(None),
                    ..TicketChange::default()
                },
                Origin::Person,
            )
            .await
            .expect("out of the group");
    }
    assert_counts_match(&mut conn, "out of the group").await;
    store
        .group_delete(tenant, warehouse.id)
        .await
        .expect("group delete");
    assert_counts_match(&mut conn, "group delete").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_changes_of_one_ticket_lose_nothing() {
    let db = TestDb::create().await;
    let store = db.store(None).await;
    let (tenant, _) = store.tenant_create("Acme").await.expect("tenant");
    let ticket = store
        .ticket_upsert(tenant.id, upsert("t-1"), Origin::Person)
        .await
        .expect("ticket")
        .ticket;
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..8 {
        let store = store.clone();
        tasks.spawn(async move {
            store
                .ticket_change(
                    tenant.id,
                    ticket.id,
                    TicketChange {
                        add_tags: vec![format!("tag-{index}")],
                        ..TicketChange::default()
                    },
                    Origin::Person,
                )
                .await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined
            .expect("the change task finishes")
            .expect("each change succeeds");
    }
    let after = store.ticket_get(tenant.id, ticket.id).await.expect("read");
    assert_eq!(
        after.tags.len(),
        8,
        "every change's tag is kept: {:?}",
        after.tags
    );
    assert_eq!(
        store
            .ticket_log(tenant.id, ticket.id)
            .await
            .expect("log")
            .len(),
        9,
        "the creation and eight changes are logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_tenant_token_is_nowhere_in_the_database() {
    let db = TestDb::create().await;
    let store = db.store(None).await;
    let (tenant, token) = store.tenant_create("Acme").await.expect("tenant");
    let mut conn = db.connection().await;
    let hashes: Vec<String> = sqlx::query_scalar("SELECT hash FROM desk_tenant_tokens")
        .fetch_all(&mut conn)
        .await
        .expect("read the token table");
    assert_eq!(
        hashes,
        vec![fronta_desk::token::hash(&token)],
        "only the hash is kept"
    );
    let secret = &token[fronta_desk::token::TENANT_TOKEN_PREFIX.len()..];
    let found: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT row_to_json(t)::text AS row FROM desk_tenants t \
         UNION ALL SELECT row_to_json(k)::text FROM desk_tenant_tokens k) AS rows \
         WHERE strpos(row, $1) > 0",
    )
    .bind(secret)
    .fetch_one(&mut conn)
    .await
    .expect("search the rows");
    assert_eq!(found, 0, "no row holds the raw token");
    assert_eq!(
        store
            .tenant_by_token(&token)
            .await
            .expect("lookup")
            .map(|found| found.id),
        Some(tenant.id),
        "the token still finds its tenant"
    );
}

fn manual(name: &str) -> Automation {
    Automation::from_json(&format!(
        r#"{{"name": "{name}", "trigger": {{"type": "manual"}}}}"#
    ))
    .expect("the test automation parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_prunes_the_rows_that_left_the_window_and_goes_with_its_automation() {
    let db = TestDb::create().await;
    let store = db.store(None).await;
    let (tenant, _) = store.tenant_create("Acme").await.expect("tenant");
    let ticket = store
        .ticket_upsert(tenant.id, upsert("t-1"), Origin::Person)
        .await
        .expect("ticket")
        .ticket;
    let automation = store
        .automation_create(
            tenant.id,
            manual("loop"),
            None,
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("automation");
    let start = chrono::Utc::now();
    let window = Duration::from_secs(60);
    for second in 0..5 {
        let now = fronta_engine::clock::add(start, Duration::from_secs(second));
        assert!(
            store
                .guard_admit(tenant.id, automation.id, ticket.id, now, window, 5)
                .await
                .expect("guard_admit"),
            "admitted"
        );
    }
    let later = fronta_engine::clock::add(start, Duration::from_secs(3600));
    assert!(
        store
            .guard_admit(tenant.id, automation.id, ticket.id, later, window, 5)
            .await
            .expect("guard_admit"),
        "an hour later the run is admitted"
    );
    let mut conn = db.connection().await;
    assert_eq!(
        count(&mut conn, "SELECT count(*) FROM automation_guard").await,
        1,
        "the five old rows were pruned; only the new one is left"
    );
    store
        .automation_delete(tenant.id, automation.id)
        .await
        .expect("delete");
    assert_eq!(
        count(&mut conn, "SELECT count(*) FROM automation_guard").await,
        0,
        "deleting the automation deletes its guard rows"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_sink_fails_only_its_write() {
    let db = TestDb::create().await;
    let store = db.store(None).await;
    let sink: TicketEventSink = Arc::new(
        |event: &TicketEvent, _: &[fronta_automation::store::Listener]| {
            if event.ticket.external_id.as_deref() == Some("boom") {
                panic!("the sink refuses ticket boom");
            }
            Vec::new()
        },
    );
    store.set_ticket_event_sink(sink);
    let (tenant, _) = store.tenant_create("Acme").await.expect("tenant");
    let listener = Automation::from_json(
        r#"{"name": "on create", "trigger": {"type": "event", "event": "ticket.created"}}"#,
    )
    .expect("parses");
    store
        .automation_create(
            tenant.id,
            listener,
            None,
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("a listener, so the sink is called");
    let refused = store
        .ticket_upsert(tenant.id, upsert("boom"), Origin::Person)
        .await;
    assert!(
        matches!(&refused, Err(DeskError::Internal(message)) if message.contains("panicked")),
        "the write fails with the sink's panic: {refused:?}"
    );
    let write = store
        .ticket_upsert(tenant.id, upsert("fine"), Origin::Person)
        .await
        .expect("the store still takes writes");
    assert_eq!(
        write.ticket.number, 1,
        "the failed write spent no ticket number"
    );
    let clone = store.clone();
    let shared = clone
        .ticket_upsert(tenant.id, upsert("boom"), Origin::Person)
        .await;
    assert!(
        shared.is_err(),
        "a clone of the store shares the installed sink: {shared:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desk_migrations_upgrade_a_database_that_holds_runs() {
    let db = TestDb::create().await;
    let mut conn = db.connection().await;
    // A database as the runs-only release left it.
    let (version, name, runs_v1) = schema::MIGRATIONS[0];
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE schema_migrations (version bigint PRIMARY KEY, name text NOT NULL, \
         applied_at timestamptz NOT NULL DEFAULT now()); {runs_v1}"
    )))
    .execute(&mut conn)
    .await
    .expect("the runs schema");
    sqlx::query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)")
        .bind(version)
        .bind(name)
        .execute(&mut conn)
        .await
        .expect("record it");
    let store = db.store(None).await;
    let dispatcher = Dispatcher::new(Arc::new(store.clone()), ["job"]);
    let run = dispatcher
        .enqueue(EnqueueRequest::new("job", serde_json::json!({"n": 1}), 0))
        .await
        .expect("enqueue")
        .id();
    drop(store);
    let upgraded = db.store(None).await;
    assert_eq!(
        upgraded
            .run_get(run)
            .await
            .expect("run_get")
            .map(|run| run.payload),
        Some(serde_json::json!({"n": 1})),
        "the run is untouched by the upgrade"
    );
    let (tenant, _) = upgraded
        .tenant_create("Acme")
        .await
        .expect("the desk works");
    assert_ne!(tenant.id, TenantId(Uuid::nil()), "a tenant was made");
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM schema_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .expect("versions");
    assert_eq!(
        versions,
        fronta_store_postgres::schema::MIGRATIONS
            .iter()
            .map(|(version, _, _)| *version)
            .collect::<Vec<i64>>(),
        "every migration was applied"
    );
}
