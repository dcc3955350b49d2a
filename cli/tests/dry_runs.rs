//! Dry runs (`POST /api/automations/test`, `…/{id}/test`) as a user meets them, through
//! the real `fronta serve` binary on SQLite and on a fresh Postgres database: the seed's
//! firm and its automations, one real order, then tests of every kind — a webhook body,
//! a replayed run, a ticket for an event automation, an unsaved definition that assigns
//! least busy, a failing error path that would open an incident, a loop stopped at
//! MAX_ACTIONS, mocked and uncalled connector steps, and the refusals — each saying what
//! it *would* do. The whole database, every table and row, is the same after them as
//! before: a dry run writes nothing.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

const ADMIN: &str = "fa_dry_runs_admin";
const DEADLINE: Duration = Duration::from_secs(90);

type Server = support::ApiServer;
/// Every table's rows, each row as text, sorted.
type Snapshot = BTreeMap<String, Vec<String>>;

fn firm() -> Value {
    json!({
        "groups": [
            {"name": "warehouse", "members": [
                {"name": "Eva", "capacity": 5}, {"name": "Jan", "capacity": 5}, {"name": "Petr", "capacity": 5}]},
            {"name": "shipping", "members": [{"name": "Olga", "capacity": 4}, {"name": "Karel", "capacity": 4}]},
            {"name": "IT", "members": [
                {"name": "Ota", "capacity": 3}, {"name": "Radek", "capacity": 3}, {"name": "Vera", "capacity": 3}]}
        ],
        "ticketTypes": [
            {"name": "order", "statuses": ["waiting-to-pack", "shipped"]},
            {"name": "error", "statuses": ["new", "fixed"]}
        ],
        "automations": [
            {"name": "Orders from the web shop",
             "trigger": {"type": "webhook", "params": [
                {"name": "kind", "path": "kind", "type": "string", "required": true},
                {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
             "steps": [{"name": "ticket", "op": "ticket/upsert", "input": {
                "externalId": "order-{{orderId}}", "title": "Order {{orderId}}", "type": "order",
                "status": "waiting-to-pack", "tags": ["waiting-to-pack"]}}]},
            {"name": "Orders to the warehouse",
             "trigger": {"type": "event", "event": "ticket.created"},
             "steps": [{"name": "isOrder", "type": "condition", "match": "all",
                "rules": [{"field": "ticket.type", "operator": "eq", "value": "order"},
                          {"field": "ticket.tags", "operator": "contains", "value": "waiting-to-pack"}],
                "then": [{"name": "assign", "op": "ticket/assign-least-busy",
                          "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}]}]},
            {"name": "Errors from the document converter",
             "trigger": {"type": "webhook", "params": [
                {"name": "message", "path": "errors.0.message", "type": "string", "required": true}]},
             "steps": [
                {"name": "ticket", "op": "ticket/upsert", "input": {
                    "externalId": "error-{{message}}", "title": "{{message}}", "type": "error", "status": "new"}},
                {"name": "assign", "op": "ticket/assign-least-busy", "input": {"ticket": "{{ticket.id}}", "group": "IT"}},
                {"name": "alarm", "op": "incident/create", "input": {
                    "title": "The document converter fails", "impact": "Documents wait; nothing is lost.",
                    "ticket": "{{ticket.id}}"}}]}
        ]
    })
}

fn has(answer: &Value, wanted: &str) {
    let lines = support::step_lines(answer);
    assert!(
        lines.iter().any(|line| line.contains(wanted)),
        "a line says {wanted:?}: {lines:#?}"
    );
}

fn scenario(server: &Server, snapshot: &dyn Fn() -> Snapshot) {
    let token = server.tenant("Acme");
    let applied = server.ok("POST", "/api/apply", &token, Some(firm()));
    let ids: Vec<String> = applied["automations"]
        .as_array()
        .expect("automations applied")
        .iter()
        .map(|automation| automation["id"].as_str().expect("an id").to_owned())
        .collect();
    let (orders, route, errors) = (&ids[0], &ids[1], &ids[2]);
    let webhook = applied["automations"][0]["webhookUrl"]
        .as_str()
        .expect("a URL");
    let path = &webhook[webhook.find("/webhook/").expect("a webhook path")..];

    // One real order: TK-1, assigned in the warehouse by the event automation.
    let order = json!({"kind": "order.created", "data": {"order": {"id": "5001"}}});
    let (status, accepted) = support::call(&server.address, "POST", path, None, Some(&order));
    assert_eq!(status, 202, "the webhook takes the order: {accepted}");
    let first_run = accepted["runId"].as_str().expect("a run").to_owned();
    server.until(
        &token,
        "/api/runs?status=completed",
        "both runs completed",
        DEADLINE,
        |page| page["items"].as_array().is_some_and(|runs| runs.len() == 2),
    );
    let tickets = server.ok("GET", "/api/tickets", &token, None);
    let holder = tickets["items"][0]["assignee"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("TK-1 is assigned: {tickets}"))
        .to_owned();

    let before = snapshot();
    let test = |path: String, body: Value| server.ok("POST", &path, &token, Some(body));

    // A webhook body, through the contract, against the current version.
    let answer = test(
        format!("/api/automations/{orders}/test"),
        json!({"body": {"kind": "order.created", "data": {"order": {"id": "5002"}}}}),
    );
    assert_eq!(answer["status"], "completed", "{answer}");
    assert_eq!(
        answer["automation"]["version"], 1,
        "tested at the current version"
    );
    has(
        &answer,
        "ticket ok: would create ticket order-5002 as TK-2 (type order, status waiting-to-pack, tags [waiting-to-pack])",
    );
    assert_eq!(
        answer["input"]["orderId"], "5002",
        "the contract's parameters are the input"
    );
    let event = &answer["events"][0];
    assert_eq!(
        event["event"], "ticket.created",
        "the event it would announce: {answer}"
    );
    assert_eq!(
        event["wouldStart"][0]["name"], "Orders to the warehouse",
        "named, not run: {event}"
    );

    // A past run replayed: the same order attaches to TK-1 and changes nothing.
    let answer = test(
        format!("/api/automations/{orders}/test"),
        json!({"run": first_run}),
    );
    has(
        &answer,
        "would attach to ticket TK-1 (order-5001); nothing would change",
    );
    assert_eq!(
        answer["events"],
        json!([]),
        "an attach that changes nothing announces nothing"
    );

    // A ticket for the event automation: the condition's compared values, and least busy
    // keeps TK-1 where it is.
    let answer = test(
        format!("/api/automations/{route}/test"),
        json!({"ticket": "TK-1"}),
    );
    has(&answer, "isOrder met:");
    has(&answer, "ticket.type = \"order\", compared with \"order\"");
    has(
        &answer,
        &format!("TK-1 would stay with {holder}, still the least busy (warehouse: "),
    );

    // An unsaved definition: a new ticket and its least-busy assignment, reasoned.
    let answer = test(
        "/api/automations/test".to_owned(),
        json!({"automation": {"name": "Try", "trigger": {"type": "manual"}, "steps": [
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "order-6000", "type": "order"}},
            {"name": "assign", "op": "ticket/assign-least-busy", "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}},
            {"name": "wait", "op": "flow/pause", "input": {"seconds": 86400}},
            {"name": "ship", "op": "ticket/set-status", "input": {"ticket": "{{ticket.id}}", "status": "shipped"}}]}}),
    );
    assert_eq!(answer["status"], "completed", "{answer}");
    assert_eq!(
        answer["automation"]["id"],
        Value::Null,
        "an unsaved definition has no id"
    );
    has(
        &answer,
        "would create ticket order-6000 as TK-2 (type order)",
    );
    has(&answer, "would assign TK-2 to ");
    has(
        &answer,
        &format!(
            "(warehouse: Eva {} open of 5, Jan {} open of 5, Petr {} open of 5)",
            u8::from(holder == "Eva"),
            u8::from(holder == "Jan"),
            u8::from(holder == "Petr")
        ),
    );
    has(
        &answer,
        "wait ok: would pause 86400 s, then go on (a test does not wait)",
    );
    has(&answer, "ship ok: would change TK-2: status none → shipped");

    // The error path: a ticket for IT and the incident it would open.
    let answer = test(
        format!("/api/automations/{errors}/test"),
        json!({"body": {"errors": [{"message": "disk full"}]}}),
    );
    has(
        &answer,
        "would create ticket error-disk full as TK-2 (type error, status new)",
    );
    has(
        &answer,
        "would assign TK-2 to Ota (IT: Ota 0 open of 3, Radek 0 open of 3, Vera 0 open of 3)",
    );
    has(
        &answer,
        "alarm ok: would open an incident: \"The document converter fails\"",
    );

    // A failing tree ends with its failed line and the incident a run would open.
    let answer = test(
        "/api/automations/test".to_owned(),
        json!({"automation": {"name": "Broken", "trigger": {"type": "manual"}, "steps": [
            {"name": "assign", "op": "ticket/assign-least-busy", "input": {"ticket": "{{_body.ticket}}", "group": "warehouse"}}]},
            "body": {"ticket": "not-an-id"}}),
    );
    assert_eq!(answer["status"], "failed", "{answer}");
    has(
        &answer,
        "assign failed: input \"ticket\" is not a ticket id: \"not-an-id\"",
    );
    assert_eq!(
        answer["incident"]["title"], "The automation \"Broken\" did not finish; we lost no data.",
        "{answer}"
    );

    // A loop over a long list stops at MAX_ACTIONS and says so.
    let many: Vec<u32> = (0..1500).collect();
    let answer = test(
        "/api/automations/test".to_owned(),
        json!({"automation": {"name": "Loop", "trigger": {"type": "manual"}, "steps": [
            {"name": "each", "type": "forEach", "items": "{{_body.items}}", "as": "item", "steps": [
                {"name": "say", "op": "flow/log", "input": {"message": "item {{item}}"}}]}]},
            "body": {"items": many}}),
    );
    assert_eq!(answer["status"], "failed", "{}", answer["error"]);
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|error| error.contains("MAX_ACTIONS = 1000")),
        "{}",
        answer["error"]
    );

    // Connector steps: not called unless mocked, and the tree says what that cost.
    let call_then_log = json!({"name": "Call", "trigger": {"type": "manual"}, "steps": [
        {"name": "lookup", "op": "http/request", "service": "shop", "input": {"url": "https://shop.example/orders/{{_body.id}}"}},
        {"name": "say", "op": "flow/log", "input": {"message": "status {{lookup.status}}"}}]});
    let answer = test(
        "/api/automations/test".to_owned(),
        json!({"automation": call_then_log, "body": {"id": 7}}),
    );
    has(
        &answer,
        "lookup not called: not called: a test does not call http/request at shop with input {\"url\":\"https://shop.example/orders/7\"}",
    );
    has(
        &answer,
        "step \"lookup\" was not called in this test: give it a mock",
    );
    let answer = test(
        "/api/automations/test".to_owned(),
        json!({"automation": call_then_log, "body": {"id": 7}, "mocks": {"lookup": {"status": 200}}}),
    );
    assert_eq!(answer["status"], "completed", "{answer}");
    has(&answer, "say ok: status 200");

    // Refusals: the save's 422 at its paths, the webhook's 400, mocks named.
    let (status, refused) = server.call(
        "POST",
        "/api/automations/test",
        &token,
        Some(
            json!({"automation": {"name": "Bad", "trigger": {"type": "manual"}, "steps": [
            {"name": "a", "op": "ticket/assign-least-busy", "input": {"ticket": "x"}}]}}),
        ),
    );
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused.to_string().contains("steps[0].input"),
        "the problem keeps its path: {refused}"
    );
    let (status, refused) = server.call(
        "POST",
        &format!("/api/automations/{orders}/test"),
        &token,
        Some(json!({"body": {"kind": "x"}})),
    );
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["error"]["code"], "missing_parameter",
        "the webhook's own answer: {refused}"
    );
    let (status, refused) = server.call(
        "POST",
        "/api/automations/test",
        &token,
        Some(json!({"automation": call_then_log, "mocks": {"lookpu": {}, "say": {}}})),
    );
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("mocks.lookpu: no step is named \"lookpu\"")
            && message.contains("mocks.say: step \"say\" is a flow/log step"),
        "{message}"
    );

    let after = snapshot();
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the same tables"
    );
    for (table, rows) in &before {
        assert_eq!(
            rows, &after[table],
            "table {table} is unchanged by the dry runs"
        );
    }
}

/// Columns the server writes on its own while it runs, whatever a request does: the
/// process registry's beat (every second) and a token's last use (at most once a minute,
/// from a task of its own). Left out of the snapshots: they are no data a dry run could
/// write.
const BOOKKEEPING: [&str; 2] = ["beat_at", "last_used_at"];

/// Tables the worker keeps on its own: `run_tenants` lists the tenants that may have
/// pending runs, and the worker forgets a tenant whose queue ran dry when its tidy-up
/// comes due, which may fall inside the window. A run a dry run enqueued would show in
/// `runs` (and `run_counts`), which stay in the snapshots.
const WORKER_INDEXES: [&str; 1] = ["run_tenants"];

/// Every table of a SQLite file, read beside the running server.
fn sqlite_snapshot(file: &std::path::Path) -> Snapshot {
    let conn =
        rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("the database opens read-only");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut stmt| stmt.query_map([], |row| row.get(0))?.collect())
        .expect("the tables");
    tables
        .into_iter()
        .filter(|table| !WORKER_INDEXES.contains(&table.as_str()))
        .map(|table| {
            let mut stmt = conn
                .prepare(&format!("SELECT * FROM \"{table}\""))
                .expect("a table reads");
            let kept: Vec<usize> = stmt
                .column_names()
                .iter()
                .enumerate()
                .filter(|(_, name)| !BOOKKEEPING.contains(name))
                .map(|(at, _)| at)
                .collect();
            let mut rows: Vec<String> = stmt
                .query_map([], |row| {
                    kept.iter()
                        .map(|&at| row.get_ref(at).map(|value| format!("{value:?}")))
                        .collect::<Result<Vec<_>, _>>()
                        .map(|values| values.join(" | "))
                })
                .and_then(|rows| rows.collect())
                .expect("rows read");
            rows.sort();
            (table, rows)
        })
        .collect()
}

/// Every table of a Postgres database.
async fn postgres_snapshot(url: &str) -> Snapshot {
    let pool = sqlx::PgPool::connect(url).await.expect("the test database");
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .expect("the tables");
    let mut snapshot = Snapshot::new();
    for (table,) in tables {
        if WORKER_INDEXES.contains(&table.as_str()) {
            continue;
        }
        let sql = if table == "run_counts" {
            // Its shards are per connection, and the retention service folds the shards
            // of connections that are gone into one: what it means is the sums.
            "SELECT json_build_array(kind, status, sum(runs), sum(attempts), sum(reclaims), \
             sum(parks))::text FROM run_counts GROUP BY kind, status HAVING sum(runs) <> 0"
                .to_owned()
        } else {
            format!(
                "SELECT (row_to_json(t)::jsonb - '{}')::text FROM \"{table}\" t",
                BOOKKEEPING.join("' - '")
            )
        };
        let mut rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_all(&pool)
            .await
            .expect("rows read");
        rows.sort();
        snapshot.insert(table, rows);
    }
    pool.close().await;
    snapshot
}

#[test]
fn a_dry_run_says_what_it_would_do_and_writes_nothing_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let database = dir.path().join("dry.db");
    let server = Server::start(&database.to_string_lossy(), ADMIN);
    scenario(&server, &|| sqlite_snapshot(&database));
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_says_what_it_would_do_and_writes_nothing_on_postgres() {
    let db = support::pg::TestDb::create().await;
    let url = db.url.clone();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let server = Server::start(&url, ADMIN);
        scenario(&server, &|| handle.block_on(postgres_snapshot(&url)));
        server.stop();
    })
    .await
    .expect("the scenario ran");
}

/// A live test calls the service through the same connectors as a run; a call that
/// outlasts the test's time limit (`FRONTA_TEST_TIME_LIMIT=2s`) stops the test, which
/// answers what it did so far. A saved automation is tested at an older version too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_test_calls_the_service_and_stops_at_the_time_limit() {
    use std::process::{Command, Stdio};
    let service = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path("/count"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(json!({"count": 3})))
        .mount(&service)
        .await;
    wiremock::Mock::given(wiremock::matchers::path("/slow"))
        .respond_with(
            wiremock::ResponseTemplate::new(200)
                .set_delay(Duration::from_secs(30))
                .set_body_json(json!({"count": 0})),
        )
        .mount(&service)
        .await;
    let base = service.uri();
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().expect("tempdir");
        let database = dir.path().join("live.db");
        let mut child = Command::new(support::FRONTA)
            .arg("--database")
            .arg(&database)
            .args(["serve", "--listen", "127.0.0.1:0", "--poll", "20ms"])
            .env("RUST_LOG", "warn")
            .env("FRONTA_ADMIN_TOKEN", ADMIN)
            .env("FRONTA_HTTP_ALLOW", "127.0.0.1")
            .env("FRONTA_TEST_TIME_LIMIT", "2s")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("fronta serve starts");
        let address = support::listening_address(&mut child);
        let server = Server::of(child, address, ADMIN);
        let token = server.tenant("Live");
        let call = |path: &str| {
            json!({"name": "Count", "trigger": {"type": "manual"}, "steps": [
                {"name": "lookup", "op": "http/request", "service": "counter",
                 "input": {"url": format!("{base}{path}"), "timeoutSec": 60}},
                {"name": "say", "op": "flow/log", "input": {"message": "{{lookup.body.count}} open"}}]})
        };
        let answer = server.ok(
            "POST",
            "/api/automations/test",
            &token,
            Some(json!({"automation": call("/count"), "connectors": "live"})),
        );
        assert_eq!(answer["status"], "completed", "{answer}");
        has(&answer, "say ok: 3 open");

        let answer = server.ok(
            "POST",
            "/api/automations/test",
            &token,
            Some(json!({"automation": call("/slow"), "connectors": "live"})),
        );
        assert_eq!(answer["status"], "stopped", "{answer}");
        has(&answer, "run stopped: the test's time limit (2 s; --test-time-limit, FRONTA_TEST_TIME_LIMIT) was reached");

        // A saved automation at an older version: v1 logs "one", v2 "two".
        let saved = server.ok(
            "POST",
            "/api/automations",
            &token,
            Some(json!({"name": "Say", "trigger": {"type": "manual"},
                        "steps": [{"name": "say", "op": "flow/log", "input": {"message": "one"}}]})),
        );
        let id = saved["id"].as_str().expect("an id");
        server.ok(
            "PUT",
            &format!("/api/automations/{id}"),
            &token,
            Some(json!({"name": "Say", "trigger": {"type": "manual"},
                        "steps": [{"name": "say", "op": "flow/log", "input": {"message": "two"}}]})),
        );
        let current = server.ok("POST", &format!("/api/automations/{id}/test"), &token, Some(json!({})));
        assert_eq!(current["automation"]["version"], 2, "{current}");
        has(&current, "say ok: two");
        let older = server.ok("POST", &format!("/api/automations/{id}/test"), &token, Some(json!({"version": 1})));
        assert_eq!(older["automation"]["version"], 1, "{older}");
        has(&older, "say ok: one");
        let (status, missing) = server.call("POST", &format!("/api/automations/{id}/test"), &token, Some(json!({"version": 7})));
        assert_eq!(status, 404, "{missing}");
        server.stop();
    })
    .await
    .expect("the live tests ran");
}
