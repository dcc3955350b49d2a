//! `fronta bench bulk`: one bulk action over `--runs` matching runs, through a real
//! worker — its time and its memory.
//!
//! `--runs` automation runs of one tenant are enqueued due in a day (scheduled: nothing
//! runs them), untimed, and the database let settle (`ANALYZE` on Postgres); then a bulk cancel of every scheduled run of that tenant
//! (`fronta_automation::bulk`, kind `runs:bulk`) is enqueued and a worker of this process
//! that runs only that kind works on it. While it runs, the process' resident set is
//! read every 50 ms; its peak is reset before the bulk action starts (`/proc/self/clear_refs`),
//! so `peakGrowthMiB` is what the bulk action added to the process with the backlog
//! already written. Progress on stderr every second.
//!
//! Checked, or the bench fails: the bulk action completed, counted and acted on exactly
//! `--runs` matches, and the store counts `--runs` cancelled runs.
//!
//! A fresh SQLite file unless `--database` names another (it must hold no pending run).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use fronta_automation::bulk::{BULK_KIND, BulkAction, BulkFilter, BulkPayload, BulkProgress};
use fronta_automation::executor::AUTOMATION_KIND;
use fronta_engine::{
    Dispatcher, EnqueueRequest, Registry, RunStatus, RunStore, Worker, WorkerConfig,
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::DbArgs;

const TENANT: &str = "bench-bulk";

#[derive(Args, Debug, Clone)]
pub struct BulkBenchArgs {
    /// Matching runs the bulk action walks.
    #[arg(long, default_value_t = 1_000_000)]
    runs: u64,
    /// Runs per page of the walk (and per checkpoint).
    #[arg(long, default_value_t = fronta_automation::bulk::DEFAULT_BULK_BATCH)]
    batch: usize,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Figures {
    database: String,
    runs: u64,
    batch: usize,
    seconds: f64,
    matches_per_second: f64,
    rss_before_mib: f64,
    peak_rss_mib: f64,
    peak_growth_mib: f64,
    acted: u64,
    skipped: u64,
}

/// A line of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|line| line.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn fill(store: Arc<dyn RunStore>, runs: u64) -> anyhow::Result<()> {
    let dispatcher = Dispatcher::new(store, [AUTOMATION_KIND]);
    let mut written = 0u64;
    while written < runs {
        let n = 10_000.min(runs - written);
        let requests = (0..n)
            .map(|_| {
                EnqueueRequest::new(AUTOMATION_KIND, serde_json::json!({}), 0)
                    .tenant(TENANT)
                    .delay(Duration::from_secs(86_400))
            })
            .collect();
        dispatcher.enqueue_many(requests).await?;
        written += n;
        if written.is_multiple_of(100_000) || written == runs {
            eprintln!("bulk: enqueued {written}/{runs}");
        }
    }
    Ok(())
}

pub async fn run(db: &DbArgs, args: BulkBenchArgs) -> anyhow::Result<()> {
    if args.runs == 0 || args.batch == 0 {
        bail!("--runs and --batch must be at least 1");
    }
    let temp = tempfile::tempdir().context("creating a temporary folder for the bench database")?;
    let (_, opened, store) = crate::bench_backlog::fresh(db, &temp, "bench-bulk.db").await?;
    eprintln!(
        "bulk: {} scheduled runs, then one bulk cancel of them all…",
        args.runs
    );
    fill(store.clone(), args.runs).await?;
    // As a database in its steady state: table statistics (Postgres), untimed.
    crate::bench_backlog::settle(&opened).await;

    let mut registry = Registry::new();
    fronta_automation::bulk::register(
        &mut registry,
        store.clone(),
        Duration::from_secs(60),
        args.batch,
    )?;
    let registry = Arc::new(registry);
    let dispatcher = Dispatcher::from_registry(store.clone(), &registry);
    let payload = BulkPayload {
        action: BulkAction::Cancel,
        filter: BulkFilter {
            status: Some("scheduled".into()),
            ..BulkFilter::default()
        },
        by: "bench".into(),
    };

    let rss_before = status_kib("VmRSS:").unwrap_or(0);
    // Resets VmHWM to the current resident set (Linux): the peak below is the bulk's.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let peak = Arc::new(AtomicU64::new(rss_before));
    let stop = CancellationToken::new();
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                if let Some(rss) = status_kib("VmRSS:") {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(
        Worker::new(
            store.clone(),
            registry.clone(),
            WorkerConfig {
                name: "bench-bulk".into(),
                max_in_flight: 1,
                ..WorkerConfig::default()
            },
        )?
        .run(shutdown.clone()),
    );
    let start = Instant::now();
    let job = dispatcher
        .enqueue(EnqueueRequest::new(BULK_KIND, serde_json::to_value(&payload)?, 3).tenant(TENANT))
        .await?
        .id();
    let mut said = Instant::now();
    let run = loop {
        let run = store.run_get(job).await?.context("the bulk action's run")?;
        if run.status.is_terminal() {
            break run;
        }
        if said.elapsed() >= Duration::from_secs(1) {
            let progress = BulkProgress::of(&run);
            eprintln!(
                "bulk: {:?}, {} counted, {} acted on ({} s)",
                progress.phase,
                progress.total,
                progress.acted,
                start.elapsed().as_secs()
            );
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let seconds = start.elapsed().as_secs_f64();
    stop.cancel();
    let _ = sampler.await;
    shutdown.cancel();
    let _ = worker.await;
    let peak_kib = peak
        .load(Ordering::Relaxed)
        .max(status_kib("VmHWM:").unwrap_or(0));

    let progress = BulkProgress::of(&run);
    if run.status != RunStatus::Completed {
        bail!(
            "the bulk action ended {}: {}",
            run.status,
            run.last_error.unwrap_or_default()
        );
    }
    if progress.total != args.runs || progress.acted != args.runs {
        bail!(
            "correctness check failed: {} counted and {} acted on for {} runs",
            progress.total,
            progress.acted,
            args.runs
        );
    }
    let cancelled = store.run_stats().await?.count(RunStatus::Cancelled);
    if cancelled < args.runs {
        bail!(
            "correctness check failed: the store counts {cancelled} cancelled of {}",
            args.runs
        );
    }
    let figures = Figures {
        database: opened.describe(),
        runs: args.runs,
        batch: args.batch,
        seconds,
        matches_per_second: args.runs as f64 / seconds,
        rss_before_mib: mib(rss_before),
        peak_rss_mib: mib(peak_kib),
        peak_growth_mib: mib(peak_kib.saturating_sub(rss_before)),
        acted: progress.acted,
        skipped: progress.skipped,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!("database        {}", figures.database);
        println!(
            "matches         {} (pages of {})",
            figures.runs, figures.batch
        );
        println!(
            "took            {:.1} s ({:.0} matches/s, counted then cancelled)",
            figures.seconds, figures.matches_per_second
        );
        println!(
            "resident set    {:.1} MiB before, {:.1} MiB peak while it ran (+{:.1} MiB)",
            figures.rss_before_mib, figures.peak_rss_mib, figures.peak_growth_mib
        );
    }
    Ok(())
}
