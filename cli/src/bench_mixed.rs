//! `fronta bench mixed`: short and long runs arriving together at a steady rate into
//! worker processes that are already running — the throughput, and how long short runs
//! wait to start while long ones hold slots.
//!
//! `--processes` `fronta worker` child processes (`--in-flight` slots each) are started
//! and awaited (each says "worker started" in its log; then half a second more, as the
//! peer programs wait) before the first arrival. Then this
//! process enqueues `--rate` runs per second for `--seconds`, one run per call, each call
//! made at its scheduled time whether or not the earlier ones have returned (an open
//! arrival process: a slow commit does not delay the next arrival). Every `--long-every`th
//! run (index `k·long_every − 1`, deterministic) sleeps `--long-ms`; the others sleep 0.
//!
//! The runs are of the built-in `probe` kind, which appends `start`/`end` lines with
//! wall-clock nanoseconds to the file named by `FRONTA_PROBE_LOG`, from whichever process
//! runs them. A run's **start delay** is its `start` line minus the moment its enqueue
//! call was made (so it includes the enqueue's own commit — the same point the graphile-worker
//! peer measures from, and it cannot come out negative when a worker starts a run before
//! the enqueue's answer is back). **Throughput** is the runs enqueued over the wall time
//! from the first arrival to the last `end` line: the arrival window plus the drain.
//!
//! Checked, or the bench fails: every enqueued run has exactly one `start` and one `end`
//! line and no other run appears; the store counts them all completed with no reclaim,
//! failure or cancel; the worker processes' claims add up to the runs enqueued.
//!
//! The workers run with the bench's batching flags (`--completer-linger`, `--claim-gather`,
//! `--hand-off`, `--prefetch-max`): `--prefetch-max 0` measures them without a local
//! queue, the comparison the issue asks for (short runs must not wait behind long ones).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use fronta_engine::{Dispatcher, EnqueueRequest};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::DbArgs;

#[derive(Args, Debug, Clone)]
pub struct MixedBenchArgs {
    /// Arrivals per second (one run per enqueue call).
    #[arg(long, default_value_t = 200)]
    rate: u64,
    /// How long runs arrive, in whole seconds.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// One run in this many is long (the last of every group of this many).
    #[arg(long, default_value_t = 20)]
    long_every: u64,
    /// How long a long run sleeps, in milliseconds (short runs sleep 0).
    #[arg(long, default_value_t = 2_000)]
    long_ms: u64,
    /// `fronta worker` child processes.
    #[arg(long, default_value_t = 2)]
    processes: usize,
    /// Runs in flight in each worker process.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// After the last arrival, the longest the runs may take to finish (`30s`, `2m`);
    /// the bench fails past it.
    #[arg(long, default_value = "60s", value_parser = crate::duration::parse)]
    drain_cap: Duration,
    /// The worker processes' batching waits.
    #[command(flatten)]
    batching: crate::BatchingArgs,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

/// Start delays of one class of runs, in milliseconds.
#[derive(Debug, Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Delays {
    runs: u64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Figures {
    database: String,
    processes: usize,
    in_flight: usize,
    rate: u64,
    seconds: u64,
    long_every: u64,
    long_ms: u64,
    runs: u64,
    /// From the first arrival to the last: close to `seconds` when the pacing held.
    arrival_seconds: f64,
    /// The latest an enqueue call was made after its scheduled time.
    arrival_lag_max_ms: f64,
    /// From the first arrival to the last run's end.
    wall_seconds: f64,
    runs_per_second: f64,
    /// Where a start delay is measured from.
    start_delay_from: &'static str,
    short: Delays,
    long: Delays,
    enqueue_p50_ms: f64,
    enqueue_p99_ms: f64,
    /// Runs started by each worker process (short, long), in the order they were spawned.
    started_by_process: Vec<(u64, u64)>,
    ok: bool,
    completed: u64,
    claimed: u64,
    reclaims: u64,
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or(0)
}

/// One enqueued run: when its call was made and when it returned (unix nanos).
struct Arrival {
    index: u64,
    id: String,
    made: u128,
    returned: u128,
    lag: Duration,
}

/// A worker child process: its pid, a signal when it logged "worker started", and its
/// `claimed` count once it exits.
struct Child {
    pid: u32,
    started: tokio::sync::oneshot::Receiver<()>,
    done: tokio::task::JoinHandle<anyhow::Result<u64>>,
}

fn spawn_worker(db: &DbArgs, args: &MixedBenchArgs, probe_log: &str) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding the fronta binary")?;
    let mut child = tokio::process::Command::new(&exe)
        .args(["--database", db.database.as_deref().unwrap_or_default()])
        .arg("--synchronous")
        .arg(format!("{:?}", db.synchronous).to_lowercase())
        .args(["worker", "--poll", "5ms", "--concurrency"])
        .arg(args.in_flight.to_string())
        .args(args.batching.as_flags())
        // Warnings, and the worker's own "worker started" line: the sign it is claiming.
        .env("RUST_LOG", "warn,fronta_engine::worker=info")
        .env(crate::kinds::PROBE_LOG_ENV, probe_log)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting a worker process")?;
    let pid = child.id().context("a worker process without an id")?;
    let stderr = child.stderr.take().context("a worker's stderr")?;
    let (tell, started) = tokio::sync::oneshot::channel();
    let done = tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut tell = Some(tell);
        let mut claimed = None;
        let mut tail = Vec::new();
        while let Some(line) = lines.next_line().await? {
            if line.contains("worker started")
                && let Some(tell) = tell.take()
            {
                let _ = tell.send(());
            }
            if let Some(report) = line.strip_prefix("worker done: ") {
                claimed = report.split(' ').next().and_then(|n| n.parse::<u64>().ok());
            }
            tail.push(line);
        }
        let status = child.wait().await?;
        if !status.success() {
            bail!("worker process {pid} failed: {}", tail.join("\n"));
        }
        claimed.with_context(|| format!("worker process {pid} printed no report"))
    });
    Ok(Child { pid, started, done })
}

/// The `q` quantile of sorted values (nearest rank), 0 when empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn delays(mut values: Vec<f64>) -> Delays {
    values.sort_by(f64::total_cmp);
    Delays {
        runs: values.len() as u64,
        p50_ms: quantile(&values, 0.50),
        p95_ms: quantile(&values, 0.95),
        p99_ms: quantile(&values, 0.99),
        max_ms: quantile(&values, 1.0),
    }
}

/// A run's lines in the probe log: `start` times (with the pid) and `end` times.
#[derive(Default)]
struct ProbeLines {
    starts: Vec<(u128, u32)>,
    ends: Vec<u128>,
}

fn read_probe_log(path: &std::path::Path) -> anyhow::Result<HashMap<String, ProbeLines>> {
    let text = std::fs::read_to_string(path).context("reading the probe log")?;
    let mut runs: HashMap<String, ProbeLines> = HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [event, run, pid, nanos] = parts[..] else {
            bail!("a broken probe line: {line:?}");
        };
        let nanos: u128 = nanos.parse().context("a probe line's time")?;
        let entry = runs.entry(run.to_owned()).or_default();
        match event {
            "start" => entry
                .starts
                .push((nanos, pid.parse().context("a probe line's pid")?)),
            "end" => entry.ends.push(nanos),
            other => bail!("an unknown probe event {other:?}"),
        }
    }
    Ok(runs)
}

pub async fn run(db: &DbArgs, args: MixedBenchArgs) -> anyhow::Result<()> {
    if args.rate == 0 || args.seconds == 0 || args.long_every == 0 {
        bail!("--rate, --seconds and --long-every must be at least 1");
    }
    if args.processes == 0 || args.in_flight == 0 {
        bail!("--processes and --in-flight must be at least 1");
    }
    let temp = tempfile::tempdir().context("creating a temporary folder for the bench")?;
    let (db, _opened, store) = crate::bench_backlog::fresh(db, &temp, "bench-mixed.db").await?;
    let probe_log = temp.path().join("probes.log");
    let total = args.rate * args.seconds;
    let long_runs = total / args.long_every;

    eprintln!(
        "mixed: starting {} worker processes of {} in flight…",
        args.processes, args.in_flight
    );
    let mut children = Vec::new();
    for _ in 0..args.processes {
        children.push(spawn_worker(&db, &args, &probe_log.display().to_string())?);
    }
    for child in &mut children {
        tokio::time::timeout(Duration::from_secs(30), &mut child.started)
            .await
            .context("a worker process did not start within 30 s")?
            .with_context(|| format!("worker process {} exited before it started", child.pid))?;
    }
    // As the peer programs do: half a second for the workers' connections and listeners.
    tokio::time::sleep(Duration::from_millis(500)).await;

    eprintln!(
        "mixed: {total} runs at {}/s for {} s, {long_runs} of them sleeping {} ms…",
        args.rate, args.seconds, args.long_ms
    );
    let dispatcher = Dispatcher::new(store.clone(), ["probe"]);
    let enqueued = Arc::new(AtomicU64::new(0));
    let reporting = {
        let (store, enqueued) = (store.clone(), enqueued.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let completed = store.run_stats().await.map(|s| s.completed).unwrap_or(0);
                eprintln!(
                    "mixed: {}/{total} enqueued, {completed} completed",
                    enqueued.load(Ordering::Relaxed)
                );
            }
        })
    };
    let gap = Duration::from_secs_f64(1.0 / args.rate as f64);
    let first = tokio::time::Instant::now();
    let first_made = unix_nanos();
    let mut calls = tokio::task::JoinSet::new();
    for index in 0..total {
        let due = first + gap.mul_f64(index as f64);
        tokio::time::sleep_until(due).await;
        let lag = tokio::time::Instant::now().saturating_duration_since(due);
        let long = index % args.long_every == args.long_every - 1;
        let ms = if long { args.long_ms } else { 0 };
        let request = EnqueueRequest::new("probe", serde_json::json!({ "ms": ms, "i": index }), 0);
        let (dispatcher, enqueued) = (dispatcher.clone(), enqueued.clone());
        calls.spawn(async move {
            let made = unix_nanos();
            let id = dispatcher.enqueue(request).await?.id().to_string();
            let returned = unix_nanos();
            enqueued.fetch_add(1, Ordering::Relaxed);
            Ok::<_, anyhow::Error>(Arrival {
                index,
                id,
                made,
                returned,
                lag,
            })
        });
    }
    let mut arrivals = Vec::with_capacity(total as usize);
    while let Some(call) = calls.join_next().await {
        arrivals.push(call??);
    }
    let last_made = arrivals.iter().map(|a| a.made).max().unwrap_or(first_made);

    // Every run finished, or the cap.
    let deadline = Instant::now() + args.drain_cap;
    let stats = loop {
        let stats = store.run_stats().await?;
        if stats.completed + stats.failed + stats.cancelled >= total {
            break stats;
        }
        if Instant::now() > deadline {
            bail!(
                "mixed: {} of {total} runs completed {:.0} s after the last arrival (--drain-cap)",
                stats.completed,
                args.drain_cap.as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    reporting.abort();
    for child in &children {
        let _ = tokio::process::Command::new("kill")
            .args(["-TERM", &child.pid.to_string()])
            .status()
            .await;
    }
    let pids: Vec<u32> = children.iter().map(|c| c.pid).collect();
    let mut claimed = 0u64;
    for child in children {
        claimed += tokio::time::timeout(Duration::from_secs(60), child.done)
            .await
            .context("a worker process did not stop within 60 s of SIGTERM")???;
    }

    // The exactly-once check, from the probe log and the store.
    let lines = read_probe_log(&probe_log)?;
    let pending = stats.queued + stats.scheduled + stats.running;
    if stats.completed != total
        || pending > 0
        || stats.reclaims > 0
        || stats.failed + stats.cancelled > 0
        || claimed != total
        || lines.len() as u64 != total
    {
        bail!(
            "correctness check failed: {} completed, {pending} pending, {} reclaimed, {} failed or cancelled, {claimed} claimed by the workers, {} runs in the probe log, for {total} enqueued",
            stats.completed,
            stats.reclaims,
            stats.failed + stats.cancelled,
            lines.len()
        );
    }
    let mut short = Vec::new();
    let mut long = Vec::new();
    let mut by_process: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut last_end = 0u128;
    for arrival in &arrivals {
        let Some(run) = lines.get(&arrival.id) else {
            bail!("correctness check failed: run {} never started", arrival.id);
        };
        let ([(start, pid)], [end]) = (&run.starts[..], &run.ends[..]) else {
            bail!(
                "correctness check failed: run {} started {} times and ended {} times",
                arrival.id,
                run.starts.len(),
                run.ends.len()
            );
        };
        last_end = last_end.max(*end);
        let delay = start.saturating_sub(arrival.made) as f64 / 1e6;
        let counts = by_process.entry(*pid).or_default();
        if arrival.index % args.long_every == args.long_every - 1 {
            long.push(delay);
            counts.1 += 1;
        } else {
            short.push(delay);
            counts.0 += 1;
        }
    }
    let mut enqueue_ms: Vec<f64> = arrivals
        .iter()
        .map(|a| a.returned.saturating_sub(a.made) as f64 / 1e6)
        .collect();
    enqueue_ms.sort_by(f64::total_cmp);
    let wall_seconds = last_end.saturating_sub(first_made) as f64 / 1e9;
    let figures = Figures {
        database: if crate::is_postgres(db.database.as_deref().unwrap_or_default()) {
            "postgres".into()
        } else {
            format!("sqlite {:?}", db.synchronous).to_lowercase()
        },
        processes: args.processes,
        in_flight: args.in_flight,
        rate: args.rate,
        seconds: args.seconds,
        long_every: args.long_every,
        long_ms: args.long_ms,
        runs: total,
        arrival_seconds: last_made.saturating_sub(first_made) as f64 / 1e9,
        arrival_lag_max_ms: arrivals
            .iter()
            .map(|a| a.lag.as_secs_f64() * 1000.0)
            .fold(0.0, f64::max),
        wall_seconds,
        runs_per_second: total as f64 / wall_seconds.max(1e-9),
        start_delay_from: "enqueue call made",
        short: delays(short),
        long: delays(long),
        enqueue_p50_ms: quantile(&enqueue_ms, 0.50),
        enqueue_p99_ms: quantile(&enqueue_ms, 0.99),
        started_by_process: pids
            .iter()
            .map(|pid| by_process.get(pid).copied().unwrap_or_default())
            .collect(),
        ok: true,
        completed: stats.completed,
        claimed,
        reclaims: stats.reclaims,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!(
            "fronta bench mixed — {}, {} processes × {} in flight",
            figures.database, figures.processes, figures.in_flight
        );
        println!(
            "  arrivals   {} runs at {}/s for {:.2} s (latest call {:.1} ms behind schedule), 1 in {} sleeping {} ms",
            total,
            args.rate,
            figures.arrival_seconds,
            figures.arrival_lag_max_ms,
            args.long_every,
            args.long_ms
        );
        println!(
            "  throughput {:.0} runs/s ({:.2} s from the first arrival to the last end)",
            figures.runs_per_second, figures.wall_seconds
        );
        for (label, d) in [("short", &figures.short), ("long", &figures.long)] {
            println!(
                "  start delay, {label:<5} p50 {:.2} ms   p95 {:.2} ms   p99 {:.2} ms   max {:.2} ms   ({} runs)",
                d.p50_ms, d.p95_ms, d.p99_ms, d.max_ms, d.runs
            );
        }
        println!(
            "  enqueue call p50 {:.2} ms, p99 {:.2} ms (start delays count from the call)",
            figures.enqueue_p50_ms, figures.enqueue_p99_ms
        );
        println!(
            "  check      every run started and ended once ({} completed, {claimed} claimed, 0 reclaimed); started by process (short, long): {:?}",
            stats.completed, figures.started_by_process
        );
    }
    drop(temp);
    Ok(())
}
