//! apalis 1.0 + apalis-postgres 1.0 under the benchmark workloads (see `bench-common`).
//!
//! Postgres keeps `synchronous_commit` as the server has it; the program refuses to run
//! unless it is `on`. The worker fetches `--in-flight` jobs per poll
//! (`Config::batch_size`) and runs at most `--in-flight` at once (`concurrency`). With
//! `--processes P` the parent enqueues, then starts P copies of itself that drain
//! (each stops once no job is unfinished); each child writes its ledger to a file and the
//! parent merges them.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_postgres::{Config, PostgresStorage};
use bench_common::{Args, Ledger, fail, report};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

static LEDGER: OnceLock<Ledger> = OnceLock::new();

async fn noop(index: u32) -> Result<(), BoxDynError> {
    if let Some(ledger) = LEDGER.get() {
        ledger.ran(index);
    }
    Ok(())
}

async fn open(args: &Args, connections: u32) -> PgPool {
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .connect(&args.db)
        .await
        .unwrap_or_else(|e| fail(&format!("connecting to {}: {e}", args.db)));
    if args.child_out.is_none() {
        PostgresStorage::setup(&pool)
            .await
            .unwrap_or_else(|e| fail(&format!("setup: {e}")));
    }
    let commit: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&pool)
        .await
        .unwrap_or_else(|e| fail(&e.to_string()));
    if commit != "on" {
        fail(&format!(
            "synchronous_commit is {commit}, the benchmarks want on"
        ));
    }
    pool
}

fn storage(pool: &PgPool, batch: usize) -> PostgresStorage<u32> {
    PostgresStorage::<u32>::new(pool)
        .with_config(Config::default().queue("bench").batch_size(batch))
}

async fn push_many(storage: &mut PostgresStorage<u32>, indices: Vec<u32>) -> Result<(), String> {
    if indices.len() == 1 {
        storage.push(indices[0]).await.map_err(|e| format!("{e:?}"))
    } else {
        storage
            .push_bulk(indices)
            .await
            .map_err(|e| format!("{e:?}"))
    }
}

async fn unfinished(pool: &PgPool) -> Vec<u32> {
    let rows: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT job FROM apalis.jobs WHERE status <> 'Done'")
            .fetch_all(pool)
            .await
            .unwrap_or_else(|e| fail(&format!("reading unfinished jobs: {e}")));
    rows.iter()
        .map(|job| {
            serde_json::from_slice(job).unwrap_or_else(|e| fail(&format!("a job payload: {e}")))
        })
        .collect()
}

async fn count_jobs(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM apalis.jobs")
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| fail(&e.to_string()))
}

/// What ends a worker: this process's ledger reaching a count, or (children of a
/// multi-process drain) the database holding no unfinished job.
#[derive(Clone)]
enum Until {
    Ran(u64),
    NothingLeft(PgPool),
}

/// Runs a worker until `until` or `cap`; answers whether `until` was reached.
async fn work_until(pool: &PgPool, in_flight: usize, until: Until, cap: Duration) -> bool {
    let backend = storage(pool, in_flight);
    let worker = WorkerBuilder::new(format!("bench-{}", std::process::id()))
        .backend(backend)
        .concurrency(in_flight)
        .build(noop);
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = reached.clone();
    let signal = async move {
        let ledger = LEDGER.get().unwrap_or_else(|| fail("no ledger"));
        let done = match until {
            Until::Ran(target) => ledger.wait_for(target, cap).await,
            Until::NothingLeft(pool) => {
                let deadline = Instant::now() + cap;
                loop {
                    let left: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM apalis.jobs WHERE status <> 'Done'",
                    )
                    .fetch_one(&pool)
                    .await
                    .unwrap_or(1);
                    if left == 0 {
                        break true;
                    }
                    if Instant::now() >= deadline {
                        break false;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        };
        flag.store(done, Ordering::Relaxed);
        Ok::<(), std::io::Error>(())
    };
    match tokio::time::timeout(cap + Duration::from_secs(30), worker.run_until(signal)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => fail(&format!("worker: {err}")),
        Err(_) => eprintln!("warning: the worker did not stop within 30 s of its signal"),
    }
    reached.load(Ordering::Relaxed)
}

async fn drain_in_processes(args: &Args, pool: &PgPool) -> (Vec<u8>, f64, bool) {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&e.to_string()));
    let folder = std::env::temp_dir().join(format!("bench-apalis-pg-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap_or_else(|e| fail(&e.to_string()));
    let mut children = Vec::new();
    let mut outs = Vec::new();
    for k in 0..args.processes {
        let out = folder.join(format!("child-{k}.bin")).display().to_string();
        let child = tokio::process::Command::new(&exe)
            .args([
                "--db",
                &args.db,
                "--workload",
                "drain",
                "--jobs",
                &args.jobs.to_string(),
            ])
            .args([
                "--in-flight",
                &args.in_flight.to_string(),
                "--cap-seconds",
                &args.cap_seconds.to_string(),
            ])
            .args(["--child-out", &out])
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| fail(&format!("starting a worker process: {e}")));
        children.push(child);
        outs.push(out);
    }
    let mut finished = true;
    for mut child in children {
        let status = child.wait().await.unwrap_or_else(|e| fail(&e.to_string()));
        finished &= status.success();
    }
    let (counts, window) = bench_common::merge_children(&outs, args.jobs);
    let _ = std::fs::remove_dir_all(&folder);
    let _ = pool;
    (counts, window, finished)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    LEDGER.get_or_init(|| Ledger::new(args.jobs));
    let ledger = LEDGER.get().unwrap_or_else(|| fail("no ledger"));
    let connections = (args.callers + 2).clamp(4, 40);
    let pool = open(&args, connections).await;
    if let Some(out) = &args.child_out {
        let started = bench_common::unix_us() - ledger.now_us();
        let finished = work_until(
            &pool,
            args.in_flight,
            Until::NothingLeft(pool.clone()),
            Duration::from_secs_f64(args.cap_seconds),
        )
        .await;
        ledger.write_child(out, started);
        std::process::exit(if finished { 0 } else { 3 });
    }
    let figures = match args.workload.as_str() {
        "enqueue" => {
            let backend = storage(&pool, 1);
            let mut figures = bench_common::enqueue_workload(&args, move |indices| {
                let mut backend = backend.clone();
                async move { push_many(&mut backend, indices).await }
            })
            .await;
            let rows = count_jobs(&pool).await;
            figures["ok"] = json!(rows == args.jobs as i64);
            figures["check"] = json!(format!("{rows} rows for {} enqueued", args.jobs));
            figures
        }
        "drain" => {
            let mut backend = storage(&pool, 1);
            let all: Vec<u32> = (0..args.jobs).collect();
            for chunk in all.chunks(1000) {
                push_many(&mut backend, chunk.to_vec())
                    .await
                    .unwrap_or_else(|e| fail(&e));
            }
            eprintln!(
                "drain: {} jobs enqueued; draining with {} in flight × {} processes…",
                args.jobs, args.in_flight, args.processes
            );
            let start = Instant::now();
            let (counts, window, finished) = if args.processes == 1 {
                let finished = work_until(
                    &pool,
                    args.in_flight,
                    Until::Ran(args.jobs as u64),
                    Duration::from_secs_f64(args.cap_seconds),
                )
                .await;
                (
                    ledger.counts(),
                    start.elapsed().as_secs_f64().min(args.cap_seconds),
                    finished,
                )
            } else {
                drain_in_processes(&args, &pool).await
            };
            let still = unfinished(&pool).await;
            let (ran, duplicates, lost) = bench_common::check(&counts, &still);
            let seconds = if window > 0.0 {
                window
            } else {
                start.elapsed().as_secs_f64()
            };
            json!({
                "inFlight": args.in_flight,
                "processes": args.processes,
                "ran": ran,
                "seconds": seconds,
                "perSecond": ran as f64 / seconds,
                "capped": !finished,
                "duplicates": duplicates,
                "lost": lost,
                "unfinished": still.len(),
                "ok": duplicates == 0 && lost == 0,
            })
        }
        "latency" => {
            let pool2 = pool.clone();
            let jobs = args.jobs as u64;
            let cap = Duration::from_secs_f64(args.jobs as f64 / args.rate as f64 + 30.0);
            let worker =
                tokio::spawn(async move { work_until(&pool2, 64, Until::Ran(jobs), cap).await });
            tokio::time::sleep(Duration::from_millis(500)).await;
            let backend = storage(&pool, 1);
            bench_common::paced_enqueue(&args, ledger, |i| {
                let mut backend = backend.clone();
                async move { push_many(&mut backend, vec![i]).await }
            })
            .await;
            let finished = worker.await.unwrap_or(false);
            let waits = ledger.waits_ms();
            let still = unfinished(&pool).await;
            let (ran, duplicates, lost) = bench_common::check(&ledger.counts(), &still);
            let mut figures = bench_common::percentiles(&waits);
            figures["rate"] = json!(args.rate);
            figures["ran"] = json!(ran);
            figures["duplicates"] = json!(duplicates);
            figures["lost"] = json!(lost);
            figures["ok"] = json!(finished && duplicates == 0 && lost == 0);
            figures
        }
        "http" => {
            let counter = std::sync::Arc::new(AtomicU32::new(0));
            let backend = storage(&pool, 1);
            let app = axum::Router::new().route(
                "/hook",
                axum::routing::post(move |_body: axum::body::Bytes| {
                    let mut backend = backend.clone();
                    let index = counter.fetch_add(1, Ordering::Relaxed);
                    async move {
                        match backend.push(index).await {
                            Ok(()) => (
                                axum::http::StatusCode::ACCEPTED,
                                format!("{{\"id\":{index}}}"),
                            ),
                            Err(e) => (
                                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                                format!("{e:?}"),
                            ),
                        }
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .unwrap_or_else(|e| fail(&e.to_string()));
            let address: SocketAddr = listener
                .local_addr()
                .unwrap_or_else(|e| fail(&e.to_string()));
            tokio::spawn(async move { axum::serve(listener, app).await });
            let (latencies, refused, late) =
                bench_common::paced_http(address, args.rate, args.seconds, args.connections).await;
            let rows = count_jobs(&pool).await;
            let mut figures = bench_common::percentiles(&latencies);
            figures["rate"] = json!(args.rate);
            figures["accepted"] = json!(latencies.len());
            figures["refused"] = json!(refused);
            figures["late"] = json!(late);
            figures["ok"] = json!(refused == 0 && rows as usize == latencies.len());
            figures["check"] = json!(format!("{rows} rows for {} accepted", latencies.len()));
            figures
        }
        other => fail(&format!(
            "--workload: enqueue, drain, latency or http, not {other:?}"
        )),
    };
    let (_, peak) = bench_common::rss_kib();
    let mut figures = figures;
    figures["peakRssKiB"] = json!(peak);
    report("apalis-postgres", &args, figures);
    pool.close().await;
}
