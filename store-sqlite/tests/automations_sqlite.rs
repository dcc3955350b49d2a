//! What only the SQLite automation store promises, beyond the shared automation suite:
//! the event query, the token lookup and the loop guard's count walk their indexes, the
//! guard prunes what left its window, and a panicking event sink fails its own write
//! without stopping the writer thread.

use std::sync::Arc;
use std::time::Duration;

use fronta_automation::Automation;
use fronta_automation::store::{AutomationStore, TicketEventSink};
use fronta_desk::store::{TicketEvent, TicketUpsert};
use fronta_desk::{DeskError, DeskStore, Origin};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};

fn plan(conn: &rusqlite::Connection, sql: &str) -> String {
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .expect("explain prepares");
    let rows: Vec<String> = stmt
        .query_map([], |row| row.get::<_, String>(3))
        .expect("explain runs")
        .collect::<Result<_, _>>()
        .expect("explain rows");
    rows.join(" | ")
}

fn upsert(external_id: &str) -> TicketUpsert {
    TicketUpsert {
        external_id: external_id.into(),
        ..TicketUpsert::default()
    }
}

#[test]
fn event_query_token_lookup_and_guard_count_walk_their_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("automations.db");
    let _store = SqliteStore::open(SqliteConfig::new(&path)).expect("open store");
    let conn = rusqlite::Connection::open(&path).expect("open");
    let listeners = plan(
        &conn,
        "SELECT id FROM automations WHERE tenant = x'00' AND event = 'ticket.changed' \
         AND enabled = 1 ORDER BY created_at, id",
    );
    assert!(
        listeners.contains("automations_event") && !listeners.contains("TEMP B-TREE"),
        "the event query walks automations_event in order, without a sort: {listeners}"
    );
    let token = plan(
        &conn,
        "SELECT id FROM automations WHERE webhook_token = 'wh_x' AND trigger_kind = 'webhook'",
    );
    assert!(
        token.contains("automations_webhook_token"),
        "the token lookup uses its unique index: {token}"
    );
    let count = plan(
        &conn,
        "SELECT count(*) FROM automation_guard WHERE automation = x'01' AND ticket = x'02' \
         AND at > 5",
    );
    assert!(
        count.contains("automation_guard_window"),
        "the guard's count is a range of its index: {count}"
    );
}

#[tokio::test]
async fn guard_prunes_the_rows_that_left_the_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("guard.db");
    let store = SqliteStore::open(SqliteConfig::new(&path)).expect("open store");
    let (tenant, _) = store.tenant_create("Acme").await.expect("tenant");
    let ticket = store
        .ticket_upsert(tenant.id, upsert("t-1"), Origin::Person)
        .await
        .expect("ticket")
        .ticket;
    let automation = store
        .automation_create(
            tenant.id,
            Automation::from_json(r#"{"name": "loop", "trigger": {"type": "manual"}}"#)
                .expect("parses"),
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
    let conn = rusqlite::Connection::open(&path).expect("open");
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM automation_guard", [], |row| {
            row.get(0)
        })
        .expect("count");
    assert_eq!(
        rows, 1,
        "the five old rows were pruned; only the new one is left"
    );

    store
        .automation_delete(tenant.id, automation.id)
        .await
        .expect("delete");
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM automation_guard", [], |row| {
            row.get(0)
        })
        .expect("count");
    assert_eq!(rows, 0, "deleting the automation deletes its guard rows");
}

#[tokio::test]
async fn panicking_sink_fails_its_write_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(SqliteConfig::new(dir.path().join("sink.db"))).expect("open");
    let sink: TicketEventSink = Arc::new(|event: &TicketEvent, _listeners: &[_]| {
        if event.ticket.external_id.as_deref() == Some("boom") {
            panic!("the sink refuses ticket boom");
        }
        Vec::new()
    });
    store.set_ticket_event_sink(sink);
    let (tenant, _) = store.tenant_create("Acme").await.expect("tenant");
    // The sink hears only events somebody listens to.
    let listener = fronta_automation::Automation::from_value(&serde_json::json!({
        "name": "listener", "trigger": {"type": "event", "event": "ticket.created"},
        "steps": [{"name": "note", "op": "flow/log", "input": {"message": "seen"}}]
    }))
    .expect("listener parses");
    store
        .automation_create(
            tenant.id,
            listener,
            None,
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("listener saved");
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
        .expect("the writer still takes writes");
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
