//! `fronta demo --engine`: the engine's promises alone (no server, no automations), shown
//! on a fresh embedded SQLite database. Each check prints what it did, its result and its
//! time; the exit code is non-zero if any check failed. The main demo is `crate::demo`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fronta_engine::{
    Dispatcher, EnqueueRequest, KindConfig, Outcome, Registry, RunContext, RunStatus, RunStore,
    Worker, WorkerConfig, store::CancelReply,
};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Checks {
    passed: usize,
    failed: usize,
}

impl Checks {
    fn record(&mut self, name: &str, started: Instant, result: anyhow::Result<String>) {
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        match result {
            Ok(detail) => {
                self.passed += 1;
                println!("  ok    {name:<58} {ms:>8.1} ms  {detail}");
            }
            Err(err) => {
                self.failed += 1;
                println!("  FAIL  {name:<58} {ms:>8.1} ms  {err:#}");
            }
        }
    }
}

const STEPS: u64 = 5;

fn registry(ran: Arc<AtomicU64>) -> anyhow::Result<Registry> {
    let mut registry = Registry::new();
    registry.register(
        "noop",
        KindConfig::fire_and_forget(Duration::from_secs(30)),
        move |_ctx: RunContext| {
            ran.fetch_add(1, Ordering::Relaxed);
            async { Outcome::done() }
        },
    )?;
    // Five steps, a checkpoint after each; waits forever at step 3 on its first claim,
    // so the demo can "crash" the worker there.
    registry.register(
        "import",
        KindConfig::durable(Duration::from_millis(600), Duration::from_secs(60)),
        |ctx: RunContext| async move {
            let from = ctx
                .run
                .state
                .as_deref()
                .and_then(|bytes| std::str::from_utf8(bytes).ok()?.parse::<u64>().ok())
                .unwrap_or(0);
            for step in from..STEPS {
                if step == 3 && ctx.run.reclaims == 0 {
                    ctx.signal.stopped().await;
                    return Outcome::Fail("stopped".into());
                }
                if ctx
                    .checkpointer
                    .save((step + 1).to_string().into_bytes())
                    .await
                    .is_err()
                {
                    return Outcome::Fail("lease lost".into());
                }
            }
            Outcome::Done(Some(json!({ "steps": STEPS, "resumedFrom": from })))
        },
    )?;
    registry.register(
        "flaky",
        KindConfig::fire_and_forget(Duration::from_secs(5)),
        |ctx: RunContext| async move {
            if ctx.run.attempts == 0 {
                Outcome::Retry {
                    after: Some(Duration::from_millis(200)),
                    reason: "the other service answered 503".into(),
                }
            } else {
                Outcome::done()
            }
        },
    )?;
    registry.register(
        "long",
        KindConfig::durable(Duration::from_secs(3), Duration::from_secs(60)),
        |ctx: RunContext| async move {
            ctx.signal.stopped().await;
            Outcome::Fail("stopped".into())
        },
    )?;
    Ok(registry)
}

fn worker_config(name: &str, in_flight: usize) -> WorkerConfig {
    WorkerConfig {
        name: name.into(),
        max_in_flight: in_flight,
        default_lease: Duration::from_secs(3),
        poll_interval: Duration::from_millis(20),
        shutdown_grace: Duration::from_millis(200),
        ..WorkerConfig::default()
    }
}

async fn wait_for(
    store: &Arc<dyn RunStore>,
    id: fronta_engine::RunId,
    what: &str,
    done: impl Fn(&fronta_engine::Run) -> bool,
) -> anyhow::Result<fronta_engine::Run> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let run = store.run_get(id).await?.context("the run vanished")?;
        if done(&run) {
            return Ok(run);
        }
        if Instant::now() > deadline {
            bail!("{what}: still {} after 20 s", run.status);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn run(dir: Option<std::path::PathBuf>, runs: u64) -> anyhow::Result<()> {
    let args = EngineArgs { dir, runs };
    let temp = tempfile::tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("demo.db");
    if path.exists() {
        bail!("{} exists already; give an empty --dir", path.display());
    }
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(SqliteConfig::new(&path))?);
    let ran = Arc::new(AtomicU64::new(0));
    let registry = Arc::new(registry(ran.clone())?);
    let dispatcher = Dispatcher::from_registry(store.clone(), &registry);
    println!(
        "fronta demo — durable runs on embedded SQLite ({}, synchronous=FULL)\n",
        path.display()
    );
    let mut checks = Checks {
        passed: 0,
        failed: 0,
    };

    // 1. Enqueue from 32 concurrent callers: group commit.
    let started = Instant::now();
    let result = async {
        let mut callers = tokio::task::JoinSet::new();
        for caller in 0..32u64 {
            let dispatcher = dispatcher.clone();
            let share = args.runs / 32 + u64::from(caller < args.runs % 32);
            callers.spawn(async move {
                for _ in 0..share {
                    dispatcher
                        .enqueue(EnqueueRequest::new("noop", json!({}), 0))
                        .await?;
                }
                Ok::<_, anyhow::Error>(())
            });
        }
        while let Some(done) = callers.join_next().await {
            done??;
        }
        let rate = args.runs as f64 / started.elapsed().as_secs_f64();
        Ok(format!(
            "{} runs, each acknowledged after its commit ({rate:.0}/s)",
            args.runs
        ))
    }
    .await;
    checks.record("enqueue from 32 concurrent callers", started, result);

    // 2. Drain them.
    let started = Instant::now();
    let result = async {
        let config = WorkerConfig {
            until_idle: true,
            ..worker_config("demo-drain", 512)
        };
        Worker::new(store.clone(), registry.clone(), config)?
            .run(CancellationToken::new())
            .await?;
        let stats = store.run_stats().await?;
        let calls = ran.load(Ordering::Relaxed);
        if calls != args.runs || stats.completed != args.runs {
            bail!(
                "{calls} handler calls, {} completed, for {} runs",
                stats.completed,
                args.runs
            );
        }
        let rate = args.runs as f64 / started.elapsed().as_secs_f64();
        Ok(format!(
            "every run ran exactly once ({rate:.0}/s, 512 in flight)"
        ))
    }
    .await;
    checks.record("drain with a worker pool", started, result);

    // 3. A worker dies mid-run; another resumes from the checkpoint.
    let started = Instant::now();
    let result = async {
        let id = dispatcher
            .enqueue(EnqueueRequest::new("import", json!({}), 3))
            .await?
            .id();
        let first = tokio::spawn(
            Worker::new(
                store.clone(),
                registry.clone(),
                worker_config("demo-doomed", 4),
            )?
            .run(CancellationToken::new()),
        );
        wait_for(&store, id, "checkpoint 3", |run| {
            run.state.as_deref() == Some(b"3")
        })
        .await?;
        first.abort(); // the process "dies": no shutdown, no release, its lease just runs out
        let _ = first.await;
        let shutdown = CancellationToken::new();
        let second = tokio::spawn(
            Worker::new(
                store.clone(),
                registry.clone(),
                worker_config("demo-heir", 4),
            )?
            .run(shutdown.clone()),
        );
        let run = wait_for(&store, id, "resume", |run| run.status.is_terminal()).await?;
        shutdown.cancel();
        second.await??;
        if run.status != RunStatus::Completed || run.reclaims != 1 || run.attempts != 0 {
            bail!(
                "status {} reclaims {} attempts {}",
                run.status,
                run.reclaims,
                run.attempts
            );
        }
        let from = run
            .result
            .as_ref()
            .and_then(|result| result["resumedFrom"].as_u64());
        if from != Some(3) {
            bail!("resumed from {from:?}, not from the checkpoint 3");
        }
        Ok("resumed at step 4 of 5 after the lease expired; reclaims 1, attempts 0".to_string())
    }
    .await;
    checks.record(
        "a crashed worker's durable run resumes from its checkpoint",
        started,
        result,
    );

    // 4. A retryable failure is retried after its Retry-After.
    let started = Instant::now();
    let shutdown = CancellationToken::new();
    let background = tokio::spawn(
        Worker::new(
            store.clone(),
            registry.clone(),
            worker_config("demo-worker", 8),
        )?
        .run(shutdown.clone()),
    );
    let result = async {
        let id = dispatcher
            .enqueue(EnqueueRequest::new("flaky", json!({}), 2))
            .await?
            .id();
        let run = wait_for(&store, id, "retry", |run| run.status.is_terminal()).await?;
        if run.status != RunStatus::Completed || run.attempts != 1 {
            bail!("status {} after {} attempts", run.status, run.attempts);
        }
        Ok(format!(
            "503 → retried after Retry-After 200 ms → completed; attempts 1 of {}",
            run.max_retries
        ))
    }
    .await;
    checks.record(
        "retry honours Retry-After and counts the attempt",
        started,
        result,
    );

    // 5. Two-phase cancel of a running run.
    let started = Instant::now();
    let result = async {
        let id = dispatcher
            .enqueue(EnqueueRequest::new("long", json!({}), 0))
            .await?
            .id();
        wait_for(&store, id, "start", |run| run.status == RunStatus::Running).await?;
        let reply = store.run_request_cancel(id).await?;
        if reply != CancelReply::Requested {
            bail!("cancel answered {reply:?}");
        }
        let run = wait_for(&store, id, "cancel", |run| run.status.is_terminal()).await?;
        if run.status != RunStatus::Cancelled {
            bail!("ended {}", run.status);
        }
        Ok("flag → heartbeat → handler stopped → cancelled".to_string())
    }
    .await;
    checks.record("cancel a running run (two-phase)", started, result);

    // 6. Unique keys and refused input.
    let started = Instant::now();
    let result = async {
        let request = EnqueueRequest::new("noop", json!({}), 0)
            .unique_key("order-5001")
            .delay(Duration::from_secs(60));
        let first = dispatcher.enqueue(request.clone()).await?;
        let second = dispatcher.enqueue(request).await?;
        if first.id() != second.id() {
            bail!("two runs for one unique key");
        }
        let unknown = dispatcher
            .enqueue(EnqueueRequest::new("no-such-kind", json!({}), 0))
            .await;
        let negative = dispatcher
            .enqueue(EnqueueRequest::new("noop", json!({}), -1))
            .await;
        if unknown.is_ok() || negative.is_ok() {
            bail!("an unknown kind or a negative max_retries was accepted");
        }
        Ok("same key → same run; unknown kind and max_retries -1 refused".to_string())
    }
    .await;
    checks.record("unique keys and refused enqueues", started, result);

    shutdown.cancel();
    background.await??;
    let stats = store.run_stats().await?;
    println!(
        "\n{} checks passed, {} failed. Runs: {} completed, {} cancelled, {} scheduled; reclaims {}, attempts {}.",
        checks.passed,
        checks.failed,
        stats.completed,
        stats.cancelled,
        stats.scheduled,
        stats.reclaims,
        stats.attempts
    );
    if args.dir.is_some() {
        println!(
            "The database stays at {}: try `fronta --database {} runs stats`.",
            path.display(),
            path.display()
        );
    }
    drop(temp);
    if checks.failed > 0 {
        bail!("{} demo checks failed", checks.failed);
    }
    Ok(())
}

/// What the engine checks are given.
struct EngineArgs {
    dir: Option<std::path::PathBuf>,
    runs: u64,
}
