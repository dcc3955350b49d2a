//! What only the SQLite desk promises, beyond the shared desk suite: the raw API token is
//! nowhere in the database file, the ticket filters and the least-busy count walk their
//! indexes (no scan of the tenant's tickets, no sort), and the desk migration upgrades a
//! database that holds runs without touching them.

use std::sync::Arc;

use fronta_desk::{DeskStore, Origin};
use fronta_engine::{Dispatcher, EnqueueRequest, RunStore};
use fronta_store_sqlite::{SqliteConfig, SqliteStore, schema};

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

#[tokio::test]
async fn raw_tenant_token_is_nowhere_in_the_database_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("desk.db");
    let store = SqliteStore::open(SqliteConfig::new(&path)).expect("open store");
    let (tenant, token) = store.tenant_create("Acme").await.expect("tenant");
    let secret = &token[fronta_desk::token::TENANT_TOKEN_PREFIX.len()..];
    assert_eq!(
        store
            .tenant_by_token(&token)
            .await
            .expect("lookup")
            .map(|found| found.id),
        Some(tenant.id),
        "the token still finds its tenant"
    );
    let mut files = 0;
    for entry in std::fs::read_dir(dir.path()).expect("list the directory") {
        let file = entry.expect("directory entry").path();
        let bytes = std::fs::read(&file).expect("read a database file");
        files += 1;
        assert!(
            !bytes
                .windows(secret.len())
                .any(|window| window == secret.as_bytes()),
            "the raw token is not in {}",
            file.display()
        );
    }
    assert!(files >= 2, "the database and its WAL were searched");
    let conn = rusqlite::Connection::open(&path).expect("open");
    let hash: String = conn
        .query_row("SELECT hash FROM desk_tenant_tokens", [], |row| row.get(0))
        .expect("the token row");
    assert_eq!(
        hash,
        fronta_desk::token::hash(&token),
        "the stored form is the token's SHA-256"
    );
}

#[test]
fn ticket_filters_and_the_open_count_walk_their_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("desk.db");
    let _store = SqliteStore::open(SqliteConfig::new(&path)).expect("open store");
    let conn = rusqlite::Connection::open(&path).expect("open");
    let select = "SELECT id FROM desk_tickets WHERE tenant = x'00'";
    let newest_first = "ORDER BY number DESC LIMIT 100";
    for (filter, index) in [
        ("", "desk_tickets_number"),
        ("AND status = 's'", "desk_tickets_status"),
        ("AND type_name = 'order'", "desk_tickets_type"),
        ("AND closed = 0", "desk_tickets_closed"),
        ("AND assignee = x'01'", "desk_tickets_assignee"),
        ("AND number < 50", "desk_tickets_number"),
    ] {
        let sql = format!("{select} {filter} {newest_first}");
        let plan = plan(&conn, &sql);
        assert!(plan.contains(index), "{filter:?} uses {index}: {plan}");
        assert!(
            !plan.contains("TEMP B-TREE"),
            "{filter:?} reads newest first without sorting: {plan}"
        );
    }
    let open = plan(
        &conn,
        "SELECT open FROM desk_member_open WHERE member = x'01'",
    );
    assert!(
        open.contains("PRIMARY KEY") && !open.contains("SCAN"),
        "least-busy reads one kept count per member, never counts tickets: {open}"
    );
    let by_external_id = plan(
        &conn,
        "SELECT id FROM desk_tickets WHERE tenant = x'00' AND external_id = 'order-1'",
    );
    assert!(
        by_external_id.contains("desk_tickets_external_id"),
        "an upsert finds its ticket by the external id index: {by_external_id}"
    );
}

#[tokio::test]
async fn desk_migration_upgrades_a_database_that_holds_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old.db");
    {
        // A database as the first release left it: migration 1 only.
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "CREATE TABLE schema_migrations (
                version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
        )
        .expect("migrations table");
        let (version, name, sql) = schema::MIGRATIONS[0];
        conn.execute_batch(sql).expect("migration 1");
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, 0)",
            rusqlite::params![version, name],
        )
        .expect("record migration 1");
    }
    let store = SqliteStore::open(SqliteConfig::new(&path)).expect("open and migrate");
    let dispatcher = Dispatcher::new(Arc::new(store.clone()), ["noop"]);
    let run = dispatcher
        .enqueue(EnqueueRequest::new("noop", serde_json::json!({}), 0))
        .await
        .expect("runs still work");
    assert!(
        store.run_get(run.id()).await.expect("get").is_some(),
        "the run reads back"
    );
    let (tenant, _) = store.tenant_create("Acme").await.expect("desk works");
    let ticket = store
        .ticket_upsert(
            tenant.id,
            fronta_desk::store::TicketUpsert {
                external_id: "x-1".into(),
                ..Default::default()
            },
            Origin::Person,
        )
        .await
        .expect("a ticket is created");
    assert_eq!(ticket.ticket.number, 1, "the first ticket is TK-1");
    let conn = rusqlite::Connection::open(&path).expect("open");
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM schema_migrations ORDER BY version")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(
        versions,
        fronta_store_sqlite::schema::MIGRATIONS
            .iter()
            .map(|(version, _, _)| *version)
            .collect::<Vec<i64>>(),
        "every migration was applied on open"
    );
}

/// A database as it was before automation versions and references (migrations 1–10),
/// holding an automation that names a group: opened, the automation is version 1 with
/// its hash, saving it unchanged makes no version, a rename of the group reaches its
/// definition (bound by name on the way), and the group cannot be deleted while the
/// automation names it.
#[tokio::test]
async fn an_automation_saved_before_versions_is_version_1_and_follows_renames() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("before-versions.db");
    let (tenant, group, automation) = (
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7(),
    );
    let definition = serde_json::json!({
        "name": "Route", "enabled": true, "trigger": {"type": "manual"},
        "steps": [{"name": "assign", "op": "ticket/assign-least-busy",
                   "input": {"ticket": "{{_body.ticket}}", "group": "support"}}]
    });
    {
        let mut conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "CREATE TABLE schema_migrations (
                version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
        )
        .expect("migrations table");
        let tx = conn.transaction().expect("tx");
        for (version, name, sql) in schema::MIGRATIONS.iter().filter(|(v, _, _)| *v <= 10) {
            tx.execute_batch(sql).expect("an old migration");
            tx.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, 0)",
                rusqlite::params![version, name],
            )
            .expect("recorded");
        }
        tx.execute(
            "INSERT INTO desk_tenants (id, name, created_at) VALUES (?1, 'Acme', 0)",
            [tenant.as_bytes().as_slice()],
        )
        .expect("tenant");
        tx.execute(
            "INSERT INTO desk_groups (id, tenant, name, created_at) VALUES (?1, ?2, 'support', 0)",
            [group.as_bytes().as_slice(), tenant.as_bytes().as_slice()],
        )
        .expect("group");
        tx.execute(
            "INSERT INTO automations (id, tenant, name, definition, enabled, trigger_kind, \
             created_at, updated_at) VALUES (?1, ?2, 'Route', ?3, 1, 'manual', 0, 0)",
            rusqlite::params![
                automation.as_bytes().as_slice(),
                tenant.as_bytes().as_slice(),
                definition.to_string()
            ],
        )
        .expect("automation");
        tx.commit().expect("commit");
    }
    let store = SqliteStore::open(SqliteConfig::new(&path)).expect("open and migrate");
    fronta_store_tests::automation_cases::an_automation_saved_before_versions_is_version_1_and_follows_renames(
        &store,
        &store,
        fronta_desk::TenantId(tenant),
        fronta_automation::store::AutomationId(automation),
        fronta_desk::GroupId(group),
    )
    .await;
}
