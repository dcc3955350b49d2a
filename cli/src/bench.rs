//! `fronta bench`: enqueue N no-op runs from C concurrent callers, drain them with W in
//! flight, then measure enqueue→start latency at a paced rate with an idle worker.
//! Prints progress on stderr while it runs and the figures on stdout (`--json` for a
//! machine). Every run is counted: a lost or duplicated run makes the bench fail.
//!
//! By default it uses a fresh database in a temporary folder; `--database` names another.

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
    /// Concurrent enqueue callers (each enqueues one run per call).
    #[arg(long, default_value_t = 32)]
    callers: u64,
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
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Figures {
    database: String,
    synchronous: String,
    runs: u64,
    callers: u64,
    in_flight: usize,
    enqueue_seconds: f64,
    enqueue_per_second: f64,
    drain_seconds: f64,
    drained_per_second: f64,
    latency_runs: u64,
    latency_rate: u64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    latency_max_ms: f64,
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
    let exe = std::env::current_exe().context("finding the fronta binary")?;
    let database = db.database.clone().unwrap_or_default();
    let mut children = Vec::new();
    for _ in 0..args.processes {
        let child = tokio::process::Command::new(&exe)
            .args(["--database", &database, "--synchronous"])
            .arg(format!("{:?}", db.synchronous).to_lowercase())
            .args(["worker", "--until-idle", "--poll", "5ms", "--concurrency"])
            .arg(args.in_flight.to_string())
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
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let mut claimed = 0u64;
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
        None => {}
    }
    if args.runs == 0 || args.callers == 0 || args.in_flight == 0 {
        bail!("--runs, --callers and --in-flight must be at least 1");
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

    // 1. Enqueue from C callers, one run per call.
    eprintln!("enqueue: {} runs from {} callers…", args.runs, args.callers);
    let enqueued = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    progress("enqueue", args.runs, enqueued.clone(), stop.clone());
    let start = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..args.callers {
        let share = args.runs / args.callers + u64::from(caller < args.runs % args.callers);
        let dispatcher = dispatcher.clone();
        let enqueued = enqueued.clone();
        callers.spawn(async move {
            for _ in 0..share {
                dispatcher
                    .enqueue(EnqueueRequest::new("noop", serde_json::json!({}), 0))
                    .await?;
                enqueued.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = callers.join_next().await {
        done??;
    }
    let enqueue_seconds = start.elapsed().as_secs_f64();
    stop.cancel();

    // 2. Drain with W in flight.
    eprintln!(
        "drain: {} runs with {} in flight…",
        args.runs, args.in_flight
    );
    let stop = CancellationToken::new();
    progress("drain", args.runs, drained.clone(), stop.clone());
    let start = Instant::now();
    if args.processes == 0 {
        let config = WorkerConfig {
            name: "bench-drain".into(),
            max_in_flight: args.in_flight,
            poll_interval: Duration::from_millis(5),
            until_idle: true,
            ..WorkerConfig::default()
        };
        Worker::new(store.clone(), registry.clone(), config)?
            .run(CancellationToken::new())
            .await?;
    } else {
        let claimed = drain_in_processes(&db, &args, store.clone(), drained.clone()).await?;
        // Each run claimed exactly once across every process: no duplicate, no loss.
        drained.store(claimed, Ordering::Relaxed);
    }
    let drain_seconds = start.elapsed().as_secs_f64();
    stop.cancel();
    let ran = drained.load(Ordering::Relaxed);
    let stats = store.run_stats().await?;
    if ran != args.runs || stats.completed != args.runs {
        bail!(
            "correctness check failed: {} runs ran (claims in worker processes) and {} completed for {} enqueued",
            ran,
            stats.completed,
            args.runs
        );
    }

    // 3. Latency at a paced rate with an idle worker.
    let (p50, p99, max) = if args.latency_runs > 0 {
        eprintln!(
            "latency: {} runs at {}/s…",
            args.latency_runs, args.latency_rate
        );
        let shutdown = CancellationToken::new();
        let config = WorkerConfig {
            name: "bench-latency".into(),
            max_in_flight: args.in_flight,
            poll_interval: Duration::from_millis(50),
            ..WorkerConfig::default()
        };
        let worker = tokio::spawn(
            Worker::new(store.clone(), registry.clone(), config)?.run(shutdown.clone()),
        );
        let gap = Duration::from_secs_f64(1.0 / args.latency_rate as f64);
        let mut next = tokio::time::Instant::now();
        for _ in 0..args.latency_runs {
            tokio::time::sleep_until(next).await;
            next += gap;
            let t = anchor.elapsed().as_micros() as u64;
            dispatcher
                .enqueue(EnqueueRequest::new(
                    "latency",
                    serde_json::json!({ "t": t }),
                    0,
                ))
                .await?;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while (latencies.lock().map(|all| all.len()).unwrap_or(0) as u64) < args.latency_runs {
            if Instant::now() > deadline {
                bail!("latency phase: not every run started within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        worker.await??;
        let mut all = latencies.lock().map(|all| all.clone()).unwrap_or_default();
        all.sort_unstable();
        let pick = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
        (pick(0.50), pick(0.99), pick(1.0))
    } else {
        (0.0, 0.0, 0.0)
    };

    let figures = Figures {
        database: db.database.clone().unwrap_or_default(),
        synchronous: format!("{:?}", db.synchronous).to_lowercase(),
        runs: args.runs,
        callers: args.callers,
        in_flight: args.in_flight,
        enqueue_seconds,
        enqueue_per_second: args.runs as f64 / enqueue_seconds,
        drain_seconds,
        drained_per_second: args.runs as f64 / drain_seconds,
        latency_runs: args.latency_runs,
        latency_rate: args.latency_rate,
        latency_p50_ms: p50,
        latency_p99_ms: p99,
        latency_max_ms: max,
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
            "  enqueue  {:>9.0} runs/s   ({} runs, {} callers, one run per call, {:.2} s)",
            figures.enqueue_per_second, figures.runs, figures.callers, figures.enqueue_seconds
        );
        println!(
            "  drain    {:>9.0} runs/s   ({} runs, {} in flight, {:.2} s)",
            figures.drained_per_second, figures.runs, figures.in_flight, figures.drain_seconds
        );
        if args.latency_runs > 0 {
            println!(
                "  enqueue→start  p50 {:.3} ms   p99 {:.3} ms   max {:.3} ms   ({} runs at {}/s)",
                p50, p99, max, args.latency_runs, args.latency_rate
            );
        }
        println!(
            "  check    every run ran exactly once ({} handler calls, {} completed)",
            ran, stats.completed
        );
    }
    drop(temp);
    Ok(())
}
