//! `fronta bench claim` and `fronta bench rss`: the engine with a backlog.
//!
//! - **claim** — `--queued` no-op runs over `--tenants` tenants are enqueued (batched,
//!   untimed), the database is let settle (on Postgres `ANALYZE runs` and a
//!   `CHECKPOINT`, what the server does by itself within a minute or so of such a load,
//!   so the timed claims meet its steady state), then
//!   `--samples` claims of `--limit` runs each are timed one by one (the
//!   claimed runs are completed in batches between samples, untimed). Prints the claim
//!   call's p50/p99/mean in µs. The store's contract says a claim's cost does not grow
//!   with the number of queued runs: run it at 1,000 and at 1,000,000 and compare.
//! - **rss** — `--queued` no-op runs over `--tenants` tenants are enqueued, then a real
//!   `fronta worker` process (this binary) works on them for `--seconds` with
//!   `--concurrency` in flight; its resident set is read from `/proc/PID/status` every
//!   100 ms. Prints the peak (`VmHWM`) and how many runs it completed meanwhile.
//!
//! Both check what they did: claim refuses a run handed out twice; rss checks that
//! completed plus pending equals enqueued and nothing was reclaimed. Both use a fresh
//! SQLite file unless `--database` names another (it must hold no pending run).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use fronta_engine::store::{ClaimParams, Finish, FinishAction};
use fronta_engine::{Dispatcher, EnqueueRequest, KindConfig, Outcome, Registry, RunStore};

use crate::DbArgs;

#[derive(Args, Debug, Clone)]
pub struct ClaimBenchArgs {
    /// Runs queued before the claims are timed.
    #[arg(long, default_value_t = 100_000)]
    queued: u64,
    /// Tenants the queued runs are spread over (round robin).
    #[arg(long, default_value_t = 1)]
    tenants: u64,
    /// Timed claim calls.
    #[arg(long, default_value_t = 2_000)]
    samples: u64,
    /// Runs asked for per claim call.
    #[arg(long, default_value_t = 1)]
    limit: usize,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct RssBenchArgs {
    /// Runs queued before the worker starts.
    #[arg(long, default_value_t = 1_000_000)]
    queued: u64,
    /// Tenants the queued runs are spread over (round robin).
    #[arg(long, default_value_t = 1_000)]
    tenants: u64,
    /// How long the worker process works on the backlog.
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse)]
    seconds: Duration,
    /// Runs in flight in the worker process.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

/// A fresh database (a temporary SQLite file unless `--database` is given), checked empty.
pub(crate) async fn fresh(
    db: &DbArgs,
    temp: &tempfile::TempDir,
    name: &str,
) -> anyhow::Result<(DbArgs, crate::Store, Arc<dyn RunStore>)> {
    let db = match &db.database {
        Some(_) => db.clone(),
        None => DbArgs {
            database: Some(temp.path().join(name).display().to_string()),
            ..db.clone()
        },
    };
    let opened = crate::open_store(&db, "fronta-bench").await?;
    let store = opened.runs();
    let before = store.run_stats().await?;
    if before.queued + before.running + before.scheduled > 0 {
        bail!("the bench database already holds pending runs; give an empty one");
    }
    Ok((db, opened, store))
}

/// Lets the database settle after the backlog's writes ([`fronta_store_postgres::PgStore::settle`]:
/// `ANALYZE runs` and a `CHECKPOINT` on Postgres; SQLite checkpoints its WAL by itself
/// every 1,000 pages and plans without table statistics). A refusal (a role without the
/// right) is logged and the claims are timed anyway.
pub(crate) async fn settle(opened: &crate::Store) {
    if let crate::Store::Postgres(store) = opened {
        let start = Instant::now();
        match store.settle().await {
            Ok(()) => tracing::info!(
                seconds = start.elapsed().as_secs_f64(),
                "bench: backlog settled (ANALYZE runs, CHECKPOINT)"
            ),
            Err(err) => tracing::warn!(error = %err,
                "bench: could not settle the backlog; claims are timed as it is"),
        }
    }
}

/// Enqueues `queued` no-op runs over `tenants` tenants in batches of 10,000.
async fn fill(store: Arc<dyn RunStore>, queued: u64, tenants: u64) -> anyhow::Result<()> {
    if queued == 0 || tenants == 0 {
        bail!("--queued and --tenants must be at least 1");
    }
    let mut registry = Registry::new();
    registry.register(
        "noop",
        KindConfig::fire_and_forget(Duration::from_secs(30)),
        |_ctx| async { Outcome::done() },
    )?;
    let dispatcher = Dispatcher::from_registry(store, &registry);
    let start = Instant::now();
    let mut written = 0u64;
    while written < queued {
        let n = 10_000.min(queued - written);
        let requests = (written..written + n)
            .map(|i| {
                let mut request = EnqueueRequest::new("noop", serde_json::json!({}), 0);
                request.tenant = Some(format!("bench-{}", i % tenants));
                request
            })
            .collect();
        dispatcher.enqueue_many(requests).await?;
        written += n;
        if written.is_multiple_of(100_000) {
            eprintln!("enqueued {written}/{queued}");
        }
    }
    tracing::info!(
        queued,
        tenants,
        seconds = start.elapsed().as_secs_f64(),
        "bench: backlog enqueued"
    );
    Ok(())
}

pub async fn claim(db: &DbArgs, args: ClaimBenchArgs) -> anyhow::Result<()> {
    if args.samples == 0 || args.limit == 0 {
        bail!("--samples and --limit must be at least 1");
    }
    if args.samples * args.limit as u64 > args.queued {
        bail!("--samples × --limit must not exceed --queued");
    }
    let temp = tempfile::tempdir().context("creating a temporary folder for the bench database")?;
    let (db, opened, store) = fresh(db, &temp, "bench-claim.db").await?;
    eprintln!(
        "claim: {} runs over {} tenants, then {} claims of {}…",
        args.queued, args.tenants, args.samples, args.limit
    );
    fill(store.clone(), args.queued, args.tenants).await?;
    settle(&opened).await;
    let params = ClaimParams {
        limit: args.limit,
        default_lease: Duration::from_secs(300),
        leases: Default::default(),
        max_reclaims: 5,
        holder: None,
    };
    let mut seen = HashSet::new();
    let mut owned = Vec::new();
    let mut micros = Vec::with_capacity(args.samples as usize);
    for _ in 0..args.samples {
        let start = Instant::now();
        let batch = store.run_claim(params.clone()).await?;
        micros.push(start.elapsed().as_secs_f64() * 1e6);
        for claimed in batch.claimed {
            if !seen.insert(claimed.run.id) {
                bail!(
                    "correctness check failed: run {} was claimed twice",
                    claimed.run.id
                );
            }
            owned.push(Finish {
                id: claimed.run.id,
                owner: claimed.owner,
                action: FinishAction::Complete { result: None },
            });
        }
        if owned.len() >= 100 {
            store.run_finish_many(std::mem::take(&mut owned)).await?;
        }
    }
    if !owned.is_empty() {
        store.run_finish_many(owned).await?;
    }
    let expected = args.samples * args.limit as u64;
    if seen.len() as u64 != expected {
        bail!(
            "claim: {} runs claimed for {} asked (the backlog should have had enough)",
            seen.len(),
            expected
        );
    }
    let stats = store.run_stats().await?;
    if stats.completed != expected || stats.queued != args.queued - expected {
        bail!(
            "correctness check failed: {} completed and {} queued after {} claims from {}",
            stats.completed,
            stats.queued,
            expected,
            args.queued
        );
    }
    let mean = micros.iter().sum::<f64>() / micros.len() as f64;
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q).round() as usize];
    let figures = serde_json::json!({
        "database": if db.database.as_deref().is_some_and(crate::is_postgres) { "postgres" } else { "sqlite" },
        "synchronous": format!("{:?}", db.synchronous).to_lowercase(),
        "queued": args.queued,
        "tenants": args.tenants,
        "samples": args.samples,
        "limit": args.limit,
        "claimP50Micros": at(0.5),
        "claimP99Micros": at(0.99),
        "claimMeanMicros": mean,
        "ok": true,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!(
            "fronta bench claim — {} queued over {} tenants, {} claims of {} run(s)",
            args.queued, args.tenants, args.samples, args.limit
        );
        println!(
            "  claim    p50 {:.0} µs   p99 {:.0} µs   mean {:.0} µs",
            at(0.5),
            at(0.99),
            mean
        );
        println!("  check    {expected} runs claimed once each and completed");
    }
    drop(temp);
    Ok(())
}

/// `VmRSS` and `VmHWM` of process `pid` in KiB (`None` once it is gone).
fn rss_of(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

pub async fn rss(db: &DbArgs, args: RssBenchArgs) -> anyhow::Result<()> {
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let temp = tempfile::tempdir().context("creating a temporary folder for the bench database")?;
    let (db, _opened, store) = fresh(db, &temp, "bench-rss.db").await?;
    eprintln!("rss: {} runs over {} tenants…", args.queued, args.tenants);
    fill(store.clone(), args.queued, args.tenants).await?;
    let exe = std::env::current_exe().context("finding the fronta binary")?;
    let database = db.database.clone().unwrap_or_default();
    let child = tokio::process::Command::new(&exe)
        .args(["--database", &database, "--synchronous"])
        .arg(format!("{:?}", db.synchronous).to_lowercase())
        .args(["worker", "--poll", "5ms", "--concurrency"])
        .arg(args.concurrency.to_string())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the worker process")?;
    let pid = child.id().context("the worker process has no id")?;
    eprintln!(
        "rss: worker process {pid} works for {:.0} s…",
        args.seconds.as_secs_f64()
    );
    let deadline = Instant::now() + args.seconds;
    let mut peak_rss = 0u64;
    let mut peak_hwm = 0u64;
    while Instant::now() < deadline {
        match rss_of(pid) {
            Some((rss, hwm)) => {
                peak_rss = peak_rss.max(rss);
                peak_hwm = peak_hwm.max(hwm);
            }
            None => bail!("the worker process exited early"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some((rss, hwm)) = rss_of(pid) {
        peak_rss = peak_rss.max(rss);
        peak_hwm = peak_hwm.max(hwm);
    }
    tracing::info!(pid, "bench: rss window over, stopping the worker");
    let _ = tokio::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await;
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .context("the worker process did not stop within 60 s of SIGTERM")??;
    if !output.status.success() {
        bail!(
            "the worker process failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stats = store.run_stats().await?;
    let pending = stats.queued + stats.scheduled + stats.running;
    if stats.completed + pending != args.queued || stats.reclaims > 0 {
        bail!(
            "correctness check failed: {} completed + {} pending for {} enqueued, {} reclaimed",
            stats.completed,
            pending,
            args.queued,
            stats.reclaims
        );
    }
    let figures = serde_json::json!({
        "database": if crate::is_postgres(&database) { "postgres" } else { "sqlite" },
        "synchronous": format!("{:?}", db.synchronous).to_lowercase(),
        "queued": args.queued,
        "tenants": args.tenants,
        "seconds": args.seconds.as_secs_f64(),
        "concurrency": args.concurrency,
        "peakRssKiB": peak_hwm.max(peak_rss),
        "peakRssMiB": peak_hwm.max(peak_rss) as f64 / 1024.0,
        "completedMeanwhile": stats.completed,
        "ok": true,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!(
            "fronta bench rss — a `fronta worker` process over {} queued runs of {} tenants, {} in flight, {:.0} s",
            args.queued,
            args.tenants,
            args.concurrency,
            args.seconds.as_secs_f64()
        );
        println!(
            "  peak RSS {:.1} MiB   ({} runs completed meanwhile)",
            peak_hwm.max(peak_rss) as f64 / 1024.0,
            stats.completed
        );
        println!(
            "  check    completed + pending = {} enqueued, 0 reclaimed",
            args.queued
        );
    }
    drop(temp);
    Ok(())
}
