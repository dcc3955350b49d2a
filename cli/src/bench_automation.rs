//! `fronta bench automation`: the seed's order scenario at volume on a fresh SQLite
//! database. Orders arrive by webhook (contract, durable enqueue) from concurrent callers;
//! each becomes an `order` ticket whose creation routes it, through the event sink and a
//! routing run, to an automation that assigns it to the least busy warehouse member.
//! Prints orders/s and automation runs/s (two per order: the webhook run and the
//! event-triggered one), and checks that every ticket exists and is assigned.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use fronta_automation::executor::{self, Runtime};
use fronta_automation::store::AutomationStore;
use fronta_automation::{Automation, Trigger, contract};
use fronta_desk::DeskStore;
use fronta_desk::store::TicketFilter;
use fronta_engine::{
    Dispatcher, Registry, RunFilter, RunStatus, RunStore, SystemClock, Trigger as RunTrigger,
    Worker, WorkerConfig,
};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::DbArgs;

#[derive(Args, Debug, Clone)]
pub struct AutomationBenchArgs {
    /// Orders sent to the webhook.
    #[arg(long, default_value_t = 5_000)]
    orders: u64,
    /// Concurrent webhook callers.
    #[arg(long, default_value_t = 32)]
    callers: u64,
    /// Runs in flight in the worker.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(db: &DbArgs, args: AutomationBenchArgs) -> anyhow::Result<()> {
    if args.orders == 0 || args.callers == 0 || args.in_flight == 0 {
        bail!("--orders, --callers and --in-flight must be at least 1");
    }
    let temp = tempfile::tempdir()?;
    let path = match &db.database {
        Some(path) => std::path::PathBuf::from(path),
        None => temp.path().join("bench-automation.db"),
    };
    let mut config = SqliteConfig::new(&path);
    config.synchronous = db.synchronous;
    let store = SqliteStore::open(config)?;
    let runs: Arc<dyn RunStore> = Arc::new(store.clone());
    let desk: Arc<dyn DeskStore> = Arc::new(store.clone());
    let automations: Arc<dyn AutomationStore> = Arc::new(store.clone());
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
    let mut registry = Registry::new();
    executor::register(&mut registry, runtime, Duration::from_secs(300))?;
    let registry = Arc::new(registry);
    let dispatcher = Dispatcher::from_registry(runs.clone(), &registry);
    store.set_ticket_event_sink(executor::event_sink(dispatcher.clone()));

    let (tenant, _) = desk.tenant_create("Bench Ltd").await?;
    let warehouse = desk.group_create(tenant.id, "warehouse").await?;
    for person in ["Eva", "Jan", "Petr"] {
        desk.member_add(tenant.id, warehouse.id, person, None, 1_000_000)
            .await?;
    }
    desk.ticket_type_create(
        tenant.id,
        "order",
        &["waiting-to-pack".to_string(), "shipped".to_string()],
        &[],
    )
    .await?;
    let orders = automations
        .automation_create(
            tenant.id,
            Automation::from_value(&json!({
                "name": "Orders", "trigger": {"type": "webhook", "params": [
                    {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
                "steps": [{"name": "ticket", "op": "ticket/upsert", "input": {
                    "externalId": "order-{{orderId}}", "title": "Order {{orderId}}", "type": "order",
                    "status": "waiting-to-pack", "tags": ["waiting-to-pack"]}}]
            }))
            .map_err(|problems| anyhow::anyhow!("bench automation: {problems:?}"))?,
            None,
            fronta_automation::versions::BY_TENANT,
        )
        .await?;
    automations
        .automation_create(
            tenant.id,
            Automation::from_value(&json!({
                "name": "Route", "trigger": {"type": "event", "event": "ticket.created"},
                "steps": [{"name": "isOrder", "type": "condition", "rules": [
                    {"field": "ticket.type", "operator": "eq", "value": "order"}],
                    "then": [{"name": "assign", "op": "ticket/assign-least-busy",
                              "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}]}]
            }))
            .map_err(|problems| anyhow::anyhow!("bench automation: {problems:?}"))?,
            None,
            fronta_automation::versions::BY_TENANT,
        )
        .await?;
    let Trigger::Webhook { params } = orders.automation.trigger.clone() else {
        bail!("invariant: the orders automation is a webhook");
    };

    // Webhooks: contract + durable enqueue, from concurrent callers, with a worker running.
    eprintln!(
        "automation bench: {} orders from {} callers, {} in flight…",
        args.orders, args.callers, args.in_flight
    );
    let shutdown = CancellationToken::new();
    let config = WorkerConfig {
        name: "bench-automation".into(),
        max_in_flight: args.in_flight,
        poll_interval: Duration::from_millis(5),
        ..WorkerConfig::default()
    };
    let start = Instant::now();
    let worker =
        tokio::spawn(Worker::new(runs.clone(), registry.clone(), config)?.run(shutdown.clone()));
    let sent = Arc::new(AtomicU64::new(0));
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..args.callers {
        let share = args.orders / args.callers + u64::from(caller < args.orders % args.callers);
        let (dispatcher, orders, params, sent) = (
            dispatcher.clone(),
            orders.clone(),
            params.clone(),
            sent.clone(),
        );
        callers.spawn(async move {
            for _ in 0..share {
                let n = sent.fetch_add(1, Ordering::Relaxed);
                let body = json!({"kind": "order.created", "data": {"order": {"id": format!("{}", 100_000 + n)}}});
                let context = contract::extract(&params, &body).map_err(|err| anyhow::anyhow!("{err:?}"))?;
                dispatcher.enqueue(executor::run_request(&orders, RunTrigger::Webhook, context)).await?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = callers.join_next().await {
        done??;
    }
    let accepted = start.elapsed();
    // Wait until every order is a ticket with an assignee.
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last_report = Instant::now();
    loop {
        let stats = runs.run_stats().await?;
        let pending = stats.queued + stats.running + stats.scheduled;
        // The webhook run and the assignment run its ticket.created started (nobody
        // listens to the assignment's ticket.changed, so it starts nothing).
        let expected = args.orders * 2;
        if pending == 0 && stats.total() >= expected {
            break;
        }
        if stats.failed > 0 {
            bail!("{} runs failed", stats.failed);
        }
        if Instant::now() > deadline {
            bail!("not finished after 10 minutes: {stats:?}");
        }
        if last_report.elapsed() > Duration::from_secs(1) {
            eprintln!("  {} of {} runs completed", stats.completed, expected);
            last_report = Instant::now();
        }
        // Counting scans the runs table: look rarely, so the bench measures the work.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = start.elapsed();
    shutdown.cancel();
    worker.await??;

    let automation_runs = runs
        .run_list(RunFilter {
            kind: Some(executor::AUTOMATION_KIND.into()),
            status: Some(RunStatus::Completed),
            limit: 10_000,
            ..RunFilter::default()
        })
        .await?
        .len() as u64;
    let stats = runs.run_stats().await?;
    let mut assigned = 0u64;
    let mut tickets = 0u64;
    let mut before = None;
    loop {
        let page = desk
            .ticket_list(
                tenant.id,
                TicketFilter {
                    before_number: before,
                    limit: 1000,
                    ..TicketFilter::default()
                },
            )
            .await?;
        let Some(last) = page.last() else { break };
        before = Some(last.number);
        tickets += page.len() as u64;
        assigned += page
            .iter()
            .filter(|ticket| ticket.assignee.is_some())
            .count() as u64;
    }
    if tickets != args.orders || assigned != args.orders || stats.completed != args.orders * 2 {
        bail!(
            "check failed: {tickets} tickets, {assigned} assigned, {} runs completed for {} orders",
            stats.completed,
            args.orders
        );
    }
    let seconds = elapsed.as_secs_f64();
    let figures = json!({
        "orders": args.orders,
        "callers": args.callers,
        "inFlight": args.in_flight,
        "synchronous": format!("{:?}", db.synchronous).to_lowercase(),
        "acceptedPerSecond": args.orders as f64 / accepted.as_secs_f64(),
        "seconds": seconds,
        "ordersPerSecond": args.orders as f64 / seconds,
        "automationRunsPerSecond": (args.orders * 2) as f64 / seconds,
        "engineRunsPerSecond": stats.completed as f64 / seconds,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!(
            "fronta bench automation — SQLite synchronous={}",
            figures["synchronous"].as_str().unwrap_or("")
        );
        println!(
            "  webhooks accepted   {:>8.0} /s",
            figures["acceptedPerSecond"].as_f64().unwrap_or(0.0)
        );
        println!(
            "  orders done         {:>8.0} /s   ({} orders in {:.2} s: ticket created, routed, assigned)",
            figures["ordersPerSecond"].as_f64().unwrap_or(0.0),
            args.orders,
            seconds
        );
        println!(
            "  automation runs     {:>8.0} /s   (webhook run + event run per order)",
            figures["automationRunsPerSecond"].as_f64().unwrap_or(0.0)
        );
        println!(
            "  check    {tickets} tickets, all assigned; {automation_runs} automation runs listed completed (list capped at 10,000)"
        );
    }
    drop(temp);
    let _ = path;
    Ok(())
}
