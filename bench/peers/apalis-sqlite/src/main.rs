//! apalis 1.0 + apalis-sqlite 1.0 under the benchmark workloads (see `bench-common`).
//!
//! Fairness: `SqliteStorage::setup` sets `synchronous = OFF` on the connection it runs
//! on, so setup runs on a throw-away pool; the pool the benchmark uses sets WAL and
//! `--synchronous` on every connection through its connect options, and each connection
//! is checked before the clock starts. The worker fetches `--in-flight` jobs per poll
//! (`Config::batch_size`) and runs at most `--in-flight` at once (`concurrency`).

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_sqlite::{Config, SqliteStorage};
use bench_common::{Args, Ledger, fail, report};
use serde_json::json;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

static LEDGER: OnceLock<Ledger> = OnceLock::new();

async fn noop(index: u32) -> Result<(), BoxDynError> {
    if let Some(ledger) = LEDGER.get() {
        ledger.ran(index);
    }
    Ok(())
}

fn path_of(db: &str) -> &str {
    db.strip_prefix("sqlite://").unwrap_or(db)
}

async fn open(args: &Args, connections: u32) -> SqlitePool {
    let path = path_of(&args.db);
    // Setup (migrations) on its own pool: it turns synchronous off on its connection.
    let setup = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::from_str(path)
                .unwrap_or_else(|e| fail(&e.to_string()))
                .create_if_missing(true),
        )
        .await
        .unwrap_or_else(|e| fail(&format!("opening {path}: {e}")));
    SqliteStorage::setup(&setup)
        .await
        .unwrap_or_else(|e| fail(&format!("setup: {e}")));
    setup.close().await;
    let (synchronous, expected) = match args.synchronous.as_str() {
        "full" => (SqliteSynchronous::Full, 2i64),
        "normal" => (SqliteSynchronous::Normal, 1),
        other => fail(&format!("--synchronous: full or normal, not {other:?}")),
    };
    let options = SqliteConnectOptions::from_str(path)
        .unwrap_or_else(|e| fail(&e.to_string()))
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(Duration::from_secs(30));
    let pool = SqlitePoolOptions::new()
        .max_connections(connections)
        .min_connections(connections)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| fail(&format!("opening {path}: {e}")));
    // Check every connection of the pool.
    let mut held = Vec::new();
    for _ in 0..connections {
        let mut conn = pool
            .acquire()
            .await
            .unwrap_or_else(|e| fail(&e.to_string()));
        let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .unwrap_or_else(|e| fail(&e.to_string()));
        if level != expected {
            fail(&format!(
                "a pooled connection has synchronous={level}, wanted {expected}"
            ));
        }
        held.push(conn);
    }
    drop(held);
    pool
}

fn storage(pool: &SqlitePool, batch: usize) -> SqliteStorage<u32> {
    SqliteStorage::<u32>::new(pool).with_config(Config::default().queue("bench").batch_size(batch))
}

async fn push_many(storage: &mut SqliteStorage<u32>, indices: Vec<u32>) -> Result<(), String> {
    if indices.len() == 1 {
        storage.push(indices[0]).await.map_err(|e| format!("{e:?}"))
    } else {
        storage
            .push_bulk(indices)
            .await
            .map_err(|e| format!("{e:?}"))
    }
}

async fn unfinished(pool: &SqlitePool) -> Vec<u32> {
    let rows: Vec<Vec<u8>> = sqlx::query_scalar("SELECT job FROM Jobs WHERE status != 'Done'")
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| fail(&format!("reading unfinished jobs: {e}")));
    rows.iter()
        .map(|job| {
            serde_json::from_slice(job).unwrap_or_else(|e| fail(&format!("a job payload: {e}")))
        })
        .collect()
}

async fn count_jobs(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM Jobs")
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| fail(&e.to_string()))
}

/// Runs a worker until the ledger saw `target` starts or `cap` passed; answers whether
/// the target was reached.
async fn work_until(pool: &SqlitePool, in_flight: usize, target: u64, cap: Duration) -> bool {
    let backend = storage(pool, in_flight);
    let worker = WorkerBuilder::new(format!("bench-{}", std::process::id()))
        .backend(backend)
        .concurrency(in_flight)
        .build(noop);
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = reached.clone();
    let signal = async move {
        let ledger = LEDGER.get().unwrap_or_else(|| fail("no ledger"));
        flag.store(ledger.wait_for(target, cap).await, Ordering::Relaxed);
        Ok::<(), std::io::Error>(())
    };
    match tokio::time::timeout(cap + Duration::from_secs(30), worker.run_until(signal)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => fail(&format!("worker: {err}")),
        Err(_) => eprintln!("warning: the worker did not stop within 30 s of its signal"),
    }
    reached.load(Ordering::Relaxed)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if args.processes != 1 {
        fail("--processes: apalis-sqlite runs in one process");
    }
    LEDGER.get_or_init(|| Ledger::new(args.jobs));
    let ledger = LEDGER.get().unwrap_or_else(|| fail("no ledger"));
    let connections = (args.callers + 2).clamp(4, 40);
    let pool = open(&args, connections).await;
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
                "drain: {} jobs enqueued; draining with {} in flight…",
                args.jobs, args.in_flight
            );
            let start = Instant::now();
            let finished = work_until(
                &pool,
                args.in_flight,
                args.jobs as u64,
                Duration::from_secs_f64(args.cap_seconds),
            )
            .await;
            let wall = start.elapsed().as_secs_f64().min(args.cap_seconds);
            let still = unfinished(&pool).await;
            let (ran, duplicates, lost) = bench_common::check(&ledger.counts(), &still);
            json!({
                "inFlight": args.in_flight,
                "processes": 1,
                "ran": ran,
                "seconds": wall,
                "perSecond": ran as f64 / wall,
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
            let worker = tokio::spawn(async move { work_until(&pool2, 64, jobs, cap).await });
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
    figures["synchronous"] = json!(args.synchronous);
    figures["peakRssKiB"] = json!(peak);
    report("apalis-sqlite", &args, figures);
    pool.close().await;
}
