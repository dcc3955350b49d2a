//! Executor traces as snapshots: the step log a person reads on a run's page — each
//! step's name, op, status and message, condition lines with what was compared — for a
//! few automations run end to end on SQLite. A change in what the executor does or says
//! shows up as a snapshot diff.

use std::sync::Arc;
use std::time::Duration;

use fronta_automation::executor::{self, Runtime};
use fronta_automation::store::AutomationStore;
use fronta_automation::{Automation, Trigger, contract};
use fronta_desk::DeskStore;
use fronta_engine::{
    Dispatcher, Registry, RunStore, SystemClock, Trigger as RunTrigger, Worker, WorkerConfig,
};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Run `automation` once on `body` in a fresh desk and render its step log.
async fn trace(automation: Value, body: Value) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(SqliteConfig::new(dir.path().join("t.db"))).expect("store");
    let runs: Arc<dyn RunStore> = Arc::new(store.clone());
    let desk: Arc<dyn DeskStore> = Arc::new(store.clone());
    let automations: Arc<dyn AutomationStore> = Arc::new(store.clone());
    let mut registry = Registry::new();
    let runtime = Arc::new(Runtime {
        desk: desk.clone(),
        automations: automations.clone(),
        clock: Arc::new(SystemClock),
        connectors: None,
        secrets: None,
        storage_wait: executor::DEFAULT_STORAGE_WAIT,
        cursors: Some(Arc::new(store.clone())),
        poll: Default::default(),
        max_pause: fronta_automation::steps::MAX_PAUSE,
    });
    executor::register(&mut registry, runtime, Duration::from_secs(30)).expect("kinds");
    let registry = Arc::new(registry);
    let dispatcher = Dispatcher::from_registry(runs.clone(), &registry);
    store.set_ticket_event_sink(executor::event_sink(dispatcher.clone()));
    let (tenant, _) = desk.tenant_create("Acme").await.expect("tenant");
    let it = desk.group_create(tenant.id, "IT").await.expect("group");
    desk.member_add(tenant.id, it.id, "Ota", None, 3)
        .await
        .expect("member");
    desk.ticket_type_create(
        tenant.id,
        "order",
        &["new".into(), "paid".into(), "shipped".into()],
        &[],
    )
    .await
    .expect("type");
    let automation = Automation::from_value(&automation).expect("parses");
    let stored = automations
        .automation_create(
            tenant.id,
            automation,
            None,
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("saved");
    let context = match &stored.automation.trigger {
        Trigger::Webhook { params } => contract::extract(params, &body).expect("fits"),
        _ => serde_json::Map::new(),
    };
    let id = dispatcher
        .enqueue(executor::run_request(&stored, RunTrigger::Webhook, context))
        .await
        .expect("enqueue")
        .id();
    let config = WorkerConfig {
        until_idle: true,
        poll_interval: Duration::from_millis(10),
        ..WorkerConfig::default()
    };
    Worker::new(runs.clone(), registry, config)
        .expect("worker")
        .run(CancellationToken::new())
        .await
        .expect("ran");
    let run = runs.run_get(id).await.expect("get").expect("run");
    let steps = match (&run.result, &run.state) {
        (Some(result), _) => result["steps"].clone(),
        (None, Some(state)) => {
            serde_json::from_slice::<Value>(state).expect("state")["steps"].clone()
        }
        (None, None) => Value::Null,
    };
    let mut out = format!(
        "run: {}{}\n",
        run.status,
        run.last_error
            .map(|e| format!(" — {e}"))
            .unwrap_or_default()
    );
    for step in steps.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "- {} [{}] {}\n",
            step["name"].as_str().unwrap_or("?"),
            step["op"].as_str().unwrap_or("?"),
            step["status"].as_str().unwrap_or("?"),
        ));
        for line in step["message"].as_str().unwrap_or("").lines() {
            out.push_str(&format!("    {line}\n"));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_flows_through_conditions_a_loop_and_ticket_steps() {
    let trace = trace(
        json!({
            "name": "Paid orders",
            "trigger": {"type": "webhook", "params": [
                {"name": "orderId", "path": "order.id", "type": "string", "required": true},
                {"name": "amount", "path": "order.amount", "type": "number"},
                {"name": "paidAt", "path": "order.paidAt", "type": "date"},
                {"name": "note", "path": "order.note", "type": "string"}
            ]},
            "steps": [
                {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "o-{{orderId}}", "title": "Order {{orderId}}", "type": "order", "status": "new"}},
                {"name": "big", "type": "condition", "match": "all", "rules": [
                    {"field": "amount", "operator": "gt", "value": 1000},
                    {"field": "paidAt", "operator": "gt", "value": "2026-01-01T00:00:00Z"},
                    {"field": "note", "operator": "isNotEmpty"}
                 ],
                 "then": [{"name": "vip", "op": "ticket/add-tags", "input": {"ticket": "{{ticket.id}}", "tags": ["vip"]}}],
                 "else": [{"name": "plain", "op": "flow/log", "input": {"message": "not a big paid order with a note"}}]},
                {"name": "paid", "type": "condition", "fieldId": "paidAt", "operator": "isNotEmpty",
                 "then": [{"name": "status", "op": "ticket/set-status", "input": {"ticket": "{{ticket.id}}", "status": "paid"}}]},
                {"name": "lines", "type": "forEach", "items": "{{_body.order.lines}}", "as": "line", "steps": [
                    {"name": "each", "op": "flow/log", "input": {"message": "line {{line.sku}} × {{line.qty}}"}}
                ]},
                {"name": "assign", "op": "ticket/assign-least-busy", "input": {"ticket": "{{ticket.id}}", "group": "IT"}}
            ]
        }),
        json!({"order": {"id": "5001", "amount": 1500, "paidAt": "2026-09-07T10:00:00Z",
                         "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}]}}),
    )
    .await;
    insta::assert_snapshot!("order_flow", trace);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_step_stops_the_run_and_says_why() {
    let trace = trace(
        json!({
            "name": "Bad status",
            "trigger": {"type": "webhook", "params": [{"name": "orderId", "path": "id", "type": "string", "required": true}]},
            "steps": [
                {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "o-{{orderId}}", "type": "order", "status": "new"}},
                {"name": "lost", "op": "ticket/set-status", "input": {"ticket": "{{ticket.id}}", "status": "lost"}},
                {"name": "never", "op": "flow/log", "input": {"message": "not reached"}}
            ]
        }),
        json!({"id": "77"}),
    )
    .await;
    insta::assert_snapshot!("fatal_step", trace);
}
