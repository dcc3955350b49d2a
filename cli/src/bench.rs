//! `fronta bench`: enqueue N no-op runs from C concurrent callers, drain them with W in
//! flight, then measure enqueue→start latency at a paced rate with an idle worker.
//! Prints progress on stderr while it runs and the figures on stdout (`--json` for a
//! machine). Every run is counted: a lost or duplicated run makes the bench fail.
//!
//! By default it uses a fresh database in a temporary folder; `--database` names another.
//!
//! The benchmark driver (`bench/run.py`) runs one phase per fresh database: `--batch`
//! sets the runs per enqueue call, `--no-drain` stops after the enqueue, `--drain-cap`
//! bounds the drain (the rate is then over the runs that ran, and the check is that every
//! run either completed exactly once or is still pending). The check, in every case: no
//! run was reclaimed (a run started twice is a reclaim), the completed runs equal the
//! handler calls (in this process) or the claims (worker processes), and completed plus
//! pending equals enqueued. `claim` and `rss` measure with a backlog (`bench_backlog`),
//! `history` with a history of finished runs (`bench_history`), `mixed` with short and
//! long runs arriving together into worker processes (`bench_mixed`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use fronta_engine::{
    Dispatcher, EnqueueRequest, KindConfig, Outcome, Registry, RunContext, RunStore, Worker,
    WorkerConfig,
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::DbArgs;

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// Another workload than the engine's no-op runs.
    #[command(subcommand)]
    pub workload: Option<Workload>,
    /// Runs to enqueue and drain.
    #[arg(long, default_value_t = 100_000)]
    runs: u64,
    /// Runs in flight in the draining worker.
    #[arg(long, default_value_t = 512)]
    in_flight: usize,
    /// Concurrent enqueue callers.
    #[arg(long, default_value_t = 32)]
    callers: u64,
    /// Runs per enqueue call (1 = one run per call; more = `enqueue_many`).
    #[arg(long, default_value_t = 1)]
    batch: u64,
    /// Stop after the enqueue phase (no drain, no latency phase).
    #[arg(long)]
    no_drain: bool,
    /// The longest the drain may take (`30s`, `2m`); the rate is over the runs that ran
    /// within it.
    #[arg(long, value_parser = crate::duration::parse)]
    drain_cap: Option<Duration>,
    /// Drain with this many `fronta worker` child processes instead of a worker in this
    /// process (0 = in this process).
    #[arg(long, default_value_t = 0)]
    processes: usize,
    /// Runs in the latency phase (0 = skip it).
    #[arg(long, default_value_t = 2_000)]
    latency_runs: u64,
    /// Arrival rate in the latency phase, runs per second.
    #[arg(long, default_value_t = 1_000)]
    latency_rate: u64,
    /// The draining worker's batching waits; worker processes get the same.
    #[command(flatten)]
    batching: crate::BatchingArgs,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum Workload {
    /// The order scenario: webhook → ticket → event → least-busy assignment.
    Automation(crate::bench_automation::AutomationBenchArgs),
    /// Webhook ingestion over real HTTP: paced latency and throughput, no worker.
    Webhook(crate::bench_webhook::WebhookBenchArgs),
    /// Claim cost with a backlog of 1,000 … 1,000,000 queued runs.
    Claim(crate::bench_backlog::ClaimBenchArgs),
    /// Peak RSS of a `fronta worker` process over a backlog spread across tenants.
    Rss(crate::bench_backlog::RssBenchArgs),
    /// One bulk action (`POST /api/runs/bulk`'s run) over many matching runs: time, memory.
    Bulk(crate::bench_bulk::BulkBenchArgs),
    /// Claim, webhook, /metrics and list reads against 1 k … 10 M finished runs.
    History(crate::bench_history::HistoryBenchArgs),
    /// Short and long runs arriving at a steady rate into worker processes: throughput
    /// and the start delay of each.
    Mixed(crate::bench_mixed::MixedBenchArgs),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Figures {
    database: String,
    synchronous: String,
    runs: u64,
    callers: u64,
    batch: u64,
    in_flight: usize,
    processes: usize,
    enqueue_seconds: f64,
    enqueue_per_second: f64,
    drain_seconds: f64,
    drained_per_second: f64,
    /// Runs that ran in the drain (all of them unless `--drain-cap` stopped it).
    drained: u64,
    drain_capped: bool,
    /// CPU time (user + system) of this process and its waited children during the drain.
    drain_cpu_seconds: f64,
    drain_cpu_micros_per_run: f64,
    /// The drain's parts (an in-process drain only; 0 with `--processes`): the worker's
    /// claim rounds and completion batches, how many and their mean time at the store, so
    /// a slow drain says whether it waited on claims, on completions or on neither.
    drain_claim_rounds: u64,
    drain_claim_mean_ms: f64,
    drain_complete_batches: u64,
    drain_complete_mean_ms: f64,
    latency_runs: u64,
    latency_rate: u64,
    latency_p50_ms: f64,
    latency_p95_ms: f64,
    latency_p99_ms: f64,
    latency_max_ms: f64,
    /// The latency phase's parts: the mean enqueue call (to its commit) and the worker's
    /// claim rounds (how many, and their mean at the store), so a slow start says where
    /// its time went.
    latency_enqueue_mean_ms: f64,
    /// The median enqueue call: the mean carries the rare slow commit.
    latency_enqueue_p50_ms: f64,
    latency_claim_rounds: u64,
    latency_claim_mean_ms: f64,
    /// Latency runs the worker got by hand-off at enqueue (one commit), not by a claim.
    latency_handed_off: u64,
    /// The exactly-once check passed (the command fails otherwise).
    ok: bool,
    completed: u64,
    reclaims: u64,
}

/// CPU seconds (user + system) of this process plus its waited-for children, from
/// `/proc/self/stat` (clock ticks of 10 ms); 0 where there is no `/proc`.
pub(crate) fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The fields after the command name (which is in parentheses and may hold spaces).
    let Some(rest) = stat.rfind(')').map(|at| &stat[at + 2..]) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime, stime, cutime, cstime are fields 14–17 of the line, 11–14 after the name.
    let ticks: u64 = (11..=14)
        .filter_map(|k| fields.get(k).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    ticks as f64 / 100.0
}

fn progress(label: &'static str, total: u64, done: Arc<AtomicU64>, stop: CancellationToken) {
    tokio::spawn(async move {
        let start = Instant::now();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            let n = done.load(Ordering::Relaxed);
            let rate = n as f64 / start.elapsed().as_secs_f64();
            eprintln!("{label}: {n}/{total} ({rate:.0}/s)");
        }
    });
}

/// Drain with `--processes` child workers; answers the runs they claimed, summed from
/// their reports. Progress comes from the database's counts.
async fn drain_in_processes(
    db: &DbArgs,
    args: &BenchArgs,
    store: Arc<dyn RunStore>,
    progress_count: Arc<AtomicU64>,
) -> anyhow::Result<u64> {
    let cap = args.drain_cap;
    let exe = std::env::current_exe().context("finding the fronta binary")?;
    let database = db.database.clone().unwrap_or_default();
    let mut children = Vec::new();
    for _ in 0..args.processes {
        let child = tokio::process::Command::new(&exe)
            .args(["--database", &database, "--synchronous"])
            .arg(format!("{:?}", db.synchronous).to_lowercase())
            .args(["worker", "--until-idle", "--poll", "5ms", "--concurrency"])
            .arg(args.in_flight.to_string())
            .args(args.batching.as_flags())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a worker process")?;
        children.push(child);
    }
    let watching = tokio::spawn(async move {
        loop {
            if let Ok(stats) = store.run_stats().await {
                progress_count.store(stats.completed, Ordering::Relaxed);
            }
            // `run_stats` groups the whole table: asked every 2 s, it stays off the
            // drain's path (every 500 ms it took ~12 % of a core of Postgres at 100,000
            // runs, the drain's own CPU).
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
    let mut claimed = 0u64;
    if let Some(cap) = cap {
        // At the cap, ask every worker to stop (SIGTERM: in-flight runs finish first).
        let ids: Vec<u32> = children.iter().filter_map(|c| c.id()).collect();
        tokio::spawn(async move {
            tokio::time::sleep(cap).await;
            for id in ids {
                tracing::info!(pid = id, "bench: drain cap reached, stopping a worker");
                let _ = tokio::process::Command::new("kill")
                    .args(["-TERM", &id.to_string()])
                    .status()
                    .await;
            }
        });
    }
    for child in children {
        let output = child.wait_with_output().await?;
        let text = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            bail!("a worker process failed: {text}");
        }
        let report = text
            .lines()
            .find_map(|line| line.strip_prefix("worker done: "))
            .context("a worker process printed no report")?;
        claimed += report
            .split(' ')
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .context("a worker report without a claimed count")?;
    }
    watching.abort();
    Ok(claimed)
}

pub async fn run(db: &DbArgs, args: BenchArgs) -> anyhow::Result<()> {
    match args.workload {
        Some(Workload::Automation(automation)) => {
            return crate::bench_automation::run(db, automation).await;
        }
        Some(Workload::Webhook(webhook)) => return crate::bench_webhook::run(db, webhook).await,
        Some(Workload::Claim(claim)) => return crate::bench_backlog::claim(db, claim).await,
        Some(Workload::Rss(rss)) => return crate::bench_backlog::rss(db, rss).await,
        Some(Workload::Bulk(bulk)) => return crate::bench_bulk::run(db, bulk).await,
        Some(Workload::History(history)) => return crate::bench_history::run(db, history).await,
        Some(Workload::Mixed(mixed)) => return crate::bench_mixed::run(db, mixed).await,
        None => {}
    }
    if args.runs == 0 || args.callers == 0 || args.in_flight == 0 || args.batch == 0 {
        bail!("--runs, --callers, --batch and --in-flight must be at least 1");
    }
    if args.latency_runs > 0 && args.latency_rate == 0 {
        bail!("--latency-rate must be at least 1");
    }
    let temp = tempfile::tempdir().context("creating a temporary folder for the bench database")?;
    let db = match &db.database {
        Some(_) => db.clone(),
        None => DbArgs {
            database: Some(temp.path().join("bench.db").display().to_string()),
            ..db.clone()
        },
    };
    let store = crate::open_store(&db, "fronta-bench").await?.runs();
    let before = store.run_stats().await?;
    if before.queued + before.running + before.scheduled > 0 {
        bail!("the bench database already holds pending runs; give an empty one");
    }

    let drained = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let anchor = Instant::now();
    let mut registry = Registry::new();
    let counter = drained.clone();
    registry.register(
        "noop",
        KindConfig::fire_and_forget(Duration::from_secs(30)),
        move |_ctx: RunContext| {
            counter.fetch_add(1, Ordering::Relaxed);
            async { Outcome::done() }
        },
    )?;
    let recorded = latencies.clone();
    registry.register(
        "latency",
        KindConfig::fire_and_forget(Duration::from_secs(30)),
        move |ctx: RunContext| {
            let started = anchor.elapsed().as_micros() as u64;
            let enqueued = ctx
                .run
                .payload
                .get("t")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(started);
            if let Ok(mut all) = recorded.lock() {
                all.push(started.saturating_sub(enqueued));
            }
            async { Outcome::done() }
        },
    )?;
    let registry = Arc::new(registry);
    let dispatcher = Dispatcher::from_registry(store.clone(), &registry);

    // 1. Enqueue from C callers, `--batch` runs per call.
    eprintln!(
        "enqueue: {} runs from {} callers, {} per call…",
        args.runs, args.callers, args.batch
    );
    let enqueued = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    progress("enqueue", args.runs, enqueued.clone(), stop.clone());
    let start = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..args.callers {
        let share = args.runs / args.callers + u64::from(caller < args.runs % args.callers);
        let dispatcher = dispatcher.clone();
        let enqueued = enqueued.clone();
        let batch = args.batch;
        callers.spawn(async move {
            let mut left = share;
            while left > 0 {
                let n = batch.min(left);
                if n == 1 {
                    dispatcher
                        .enqueue(EnqueueRequest::new("noop", serde_json::json!({}), 0))
                        .await?;
                } else {
                    let requests = (0..n)
                        .map(|_| EnqueueRequest::new("noop", serde_json::json!({}), 0))
                        .collect();
                    dispatcher.enqueue_many(requests).await?;
                }
                left -= n;
                enqueued.fetch_add(n, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = callers.join_next().await {
        done??;
    }
    let enqueue_seconds = start.elapsed().as_secs_f64();
    stop.cancel();
    if args.no_drain {
        let stats = store.run_stats().await?;
        if stats.queued != args.runs {
            bail!(
                "correctness check failed: {} runs queued for {} enqueued",
                stats.queued,
                args.runs
            );
        }
        return print_enqueue_only(&db, &args, enqueue_seconds, stats.queued);
    }

    // 2. Drain with W in flight.
    eprintln!(
        "drain: {} runs with {} in flight…",
        args.runs, args.in_flight
    );
    let stop = CancellationToken::new();
    progress("drain", args.runs, drained.clone(), stop.clone());
    let start = Instant::now();
    let cpu_before = cpu_seconds();
    let mut drain_parts = (0, 0.0, 0, 0.0);
    if args.processes == 0 {
        let config = args.batching.apply(WorkerConfig {
            name: "bench-drain".into(),
            max_in_flight: args.in_flight,
            poll_interval: Duration::from_millis(5),
            until_idle: true,
            ..WorkerConfig::default()
        });
        let shutdown = CancellationToken::new();
        if let Some(cap) = args.drain_cap {
            let at_cap = shutdown.clone();
            tokio::spawn(async move {
                tokio::time::sleep(cap).await;
                tracing::info!("bench: drain cap reached, stopping the worker");
                at_cap.cancel();
            });
        }
        let worker = Worker::new(store.clone(), registry.clone(), config)?;
        let metrics = worker.metrics();
        worker.run(shutdown).await?;
        let (claims, completes) = (metrics.claim.snapshot(), metrics.complete.snapshot());
        drain_parts = (
            claims.count,
            claims.mean_ms(),
            completes.count,
            completes.mean_ms(),
        );
    } else {
        let claimed = drain_in_processes(&db, &args, store.clone(), drained.clone()).await?;
        // Each run claimed exactly once across every process: no duplicate, no loss.
        drained.store(claimed, Ordering::Relaxed);
    }
    let drain_seconds = start.elapsed().as_secs_f64();
    let drain_cpu = cpu_seconds() - cpu_before;
    stop.cancel();
    let ran = drained.load(Ordering::Relaxed);
    let stats = store.run_stats().await?;
    let pending = stats.queued + stats.scheduled + stats.running;
    let capped = stats.completed < args.runs;
    if capped && args.drain_cap.is_none() {
        bail!(
            "correctness check failed: {} completed for {} enqueued",
            stats.completed,
            args.runs
        );
    }
    if ran != stats.completed
        || stats.completed + pending != args.runs
        || stats.reclaims > 0
        || stats.failed + stats.cancelled > 0
    {
        bail!(
            "correctness check failed: {} runs ran (claims in worker processes), {} completed, {} pending, {} reclaimed, {} failed or cancelled, for {} enqueued",
            ran,
            stats.completed,
            pending,
            stats.reclaims,
            stats.failed + stats.cancelled,
            args.runs
        );
    }

    // 3. Latency at a paced rate with an idle worker.
    let mut latency_parts = (0.0, 0, 0.0, 0, 0.0);
    let (p50, p95, p99, max) = if args.latency_runs > 0 {
        eprintln!(
            "latency: {} runs at {}/s…",
            args.latency_runs, args.latency_rate
        );
        let shutdown = CancellationToken::new();
        let config = args.batching.apply(WorkerConfig {
            name: "bench-latency".into(),
            max_in_flight: args.in_flight,
            poll_interval: Duration::from_millis(50),
            ..WorkerConfig::default()
        });
        let worker = Worker::new(store.clone(), registry.clone(), config)?;
        let worker_metrics = worker.metrics();
        // The worker's own dispatcher, as in `fronta serve`: an enqueue while the worker
        // waits idle is handed to it already claimed (one commit instead of two).
        let dispatcher = worker.dispatcher().clone();
        let worker = tokio::spawn(worker.run(shutdown.clone()));
        let mut enqueue_time = Duration::ZERO;
        let mut enqueue_calls = Vec::with_capacity(args.latency_runs as usize);
        let gap = Duration::from_secs_f64(1.0 / args.latency_rate as f64);
        let mut next = tokio::time::Instant::now();
        for _ in 0..args.latency_runs {
            tokio::time::sleep_until(next).await;
            next += gap;
            let t = anchor.elapsed().as_micros() as u64;
            let called = Instant::now();
            dispatcher
                .enqueue(EnqueueRequest::new(
                    "latency",
                    serde_json::json!({ "t": t }),
                    0,
                ))
                .await?;
            let took = called.elapsed();
            enqueue_time += took;
            enqueue_calls.push(took);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while (latencies.lock().map(|all| all.len()).unwrap_or(0) as u64) < args.latency_runs {
            if Instant::now() > deadline {
                bail!("latency phase: not every run started within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        let report = worker.await??;
        let claims = worker_metrics.claim.snapshot();
        latency_parts = (
            enqueue_time.as_secs_f64() * 1000.0 / args.latency_runs as f64,
            claims.count,
            claims.mean_ms(),
            report.handed_off,
            median(&mut enqueue_calls).as_secs_f64() * 1000.0,
        );
        let mut all = latencies.lock().map(|all| all.clone()).unwrap_or_default();
        all.sort_unstable();
        let pick = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
        (pick(0.50), pick(0.95), pick(0.99), pick(1.0))
    } else {
        (0.0, 0.0, 0.0, 0.0)
    };

    let figures = Figures {
        database: db.database.clone().unwrap_or_default(),
        synchronous: format!("{:?}", db.synchronous).to_lowercase(),
        runs: args.runs,
        callers: args.callers,
        batch: args.batch,
        in_flight: args.in_flight,
        processes: args.processes,
        enqueue_seconds,
        enqueue_per_second: args.runs as f64 / enqueue_seconds,
        drain_seconds,
        drained_per_second: stats.completed as f64 / drain_seconds,
        drained: stats.completed,
        drain_capped: capped,
        drain_cpu_seconds: drain_cpu,
        drain_cpu_micros_per_run: drain_cpu * 1e6 / stats.completed.max(1) as f64,
        drain_claim_rounds: drain_parts.0,
        drain_claim_mean_ms: drain_parts.1,
        drain_complete_batches: drain_parts.2,
        drain_complete_mean_ms: drain_parts.3,
        latency_runs: args.latency_runs,
        latency_rate: args.latency_rate,
        latency_p50_ms: p50,
        latency_p95_ms: p95,
        latency_p99_ms: p99,
        latency_max_ms: max,
        latency_enqueue_mean_ms: latency_parts.0,
        latency_enqueue_p50_ms: latency_parts.4,
        latency_claim_rounds: latency_parts.1,
        latency_claim_mean_ms: latency_parts.2,
        latency_handed_off: latency_parts.3,
        ok: true,
        completed: stats.completed,
        reclaims: stats.reclaims,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        if figures.database.starts_with("postgres") {
            println!("fronta bench — Postgres (synchronous_commit as the server has it)");
        } else {
            println!("fronta bench — SQLite synchronous={}", figures.synchronous);
        }
        println!(
            "  enqueue  {:>9.0} runs/s   ({} runs, {} callers, {} per call, {:.2} s)",
            figures.enqueue_per_second,
            figures.runs,
            figures.callers,
            figures.batch,
            figures.enqueue_seconds
        );
        println!(
            "  drain    {:>9.0} runs/s   ({} of {} runs{}, {} in flight, {:.2} s, {:.1} µs CPU per run)",
            figures.drained_per_second,
            figures.drained,
            figures.runs,
            if capped { ", stopped at the cap" } else { "" },
            figures.in_flight,
            figures.drain_seconds,
            figures.drain_cpu_micros_per_run
        );
        if figures.drain_claim_rounds > 0 {
            println!(
                "           {} claim rounds of {:.3} ms mean, {} completion batches of {:.3} ms mean",
                figures.drain_claim_rounds,
                figures.drain_claim_mean_ms,
                figures.drain_complete_batches,
                figures.drain_complete_mean_ms
            );
        }
        if args.latency_runs > 0 {
            println!(
                "  enqueue→start  p50 {:.3} ms   p95 {:.3} ms   p99 {:.3} ms   max {:.3} ms   ({} runs at {}/s)",
                p50, p95, p99, max, args.latency_runs, args.latency_rate
            );
            println!(
                "                 of which: enqueue call {:.3} ms (mean), {:.3} ms (p50); {} handed over at enqueue; {} claim rounds of {:.3} ms (mean)",
                latency_parts.0, latency_parts.4, latency_parts.3, latency_parts.1, latency_parts.2
            );
        }
        println!(
            "  check    every run ran exactly once or is still pending ({} handler calls, {} completed, {} pending, 0 reclaimed)",
            ran, stats.completed, pending
        );
    }
    drop(temp);
    Ok(())
}

/// The report of an enqueue-only bench (`--no-drain`).
fn print_enqueue_only(
    db: &DbArgs,
    args: &BenchArgs,
    enqueue_seconds: f64,
    queued: u64,
) -> anyhow::Result<()> {
    let per_second = args.runs as f64 / enqueue_seconds;
    if args.json {
        let figures = serde_json::json!({
            "database": db.database.clone().unwrap_or_default(),
            "synchronous": format!("{:?}", db.synchronous).to_lowercase(),
            "runs": args.runs,
            "callers": args.callers,
            "batch": args.batch,
            "enqueueSeconds": enqueue_seconds,
            "enqueuePerSecond": per_second,
            "queued": queued,
            "ok": true,
        });
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!(
            "fronta bench — enqueue only, SQLite synchronous={} (Postgres: as the server has it)",
            format!("{:?}", db.synchronous).to_lowercase()
        );
        println!(
            "  enqueue  {per_second:>9.0} runs/s   ({} runs, {} callers, {} per call, {enqueue_seconds:.2} s)",
            args.runs, args.callers, args.batch
        );
        println!("  check    {queued} runs queued for {} enqueued", args.runs);
    }
    Ok(())
}

/// The median of `times` (zero when empty); sorts them.
fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}
