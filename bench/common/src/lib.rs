//! What every Rust peer program of the benchmarks shares.
//!
//! # Contract
//!
//! A peer program is called by the driver (`bench/run.py`) as
//! `PROGRAM --db URL --workload W [--key value]…` (see [`Args`]) and prints exactly one
//! JSON line on stdout (see [`report`]); progress and warnings go to stderr. Workloads:
//!
//! - `enqueue`: `--jobs` jobs from `--callers` callers, `--batch` jobs per call;
//! - `drain`: `--jobs` jobs enqueued first (batched, not timed), then drained with
//!   `--in-flight` jobs in flight in each of `--processes` processes, for at most
//!   `--cap-seconds`; the rate is over the jobs that ran;
//! - `latency`: an idle worker, `--jobs` jobs enqueued at `--rate` per second,
//!   enqueue→start p50/p95/p99;
//! - `http`: a tiny axum front (POST → enqueue → 202) and the paced load of
//!   [`paced_http`]: `--rate` requests/s for `--seconds`.
//!
//! Every job's payload is its index `0..jobs`. The [`Ledger`] counts how often each index
//! ran; after a drain the program reads which indices are still unfinished in the
//! database. The figure is valid only when no index ran twice and every index either ran
//! or is still unfinished (`duplicates == 0 && lost == 0`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The command line, `--key value` pairs.
#[derive(Debug, Clone)]
pub struct Args {
    pub db: String,
    pub workload: String,
    pub jobs: u32,
    pub callers: u32,
    pub batch: u32,
    pub in_flight: usize,
    pub processes: u32,
    pub cap_seconds: f64,
    pub rate: u64,
    pub seconds: f64,
    pub connections: u32,
    /// `full` or `normal` (SQLite only).
    pub synchronous: String,
    /// Set in a child process of a multi-process drain: where to write its ledger.
    pub child_out: Option<String>,
}

impl Args {
    pub fn parse() -> Args {
        let mut map = HashMap::new();
        let mut it = std::env::args().skip(1);
        while let Some(key) = it.next() {
            let Some(name) = key.strip_prefix("--") else {
                fail(&format!("unexpected argument {key:?}"));
            };
            let value = it
                .next()
                .unwrap_or_else(|| fail(&format!("--{name} needs a value")));
            map.insert(name.to_owned(), value);
        }
        fn get<T: std::str::FromStr>(map: &HashMap<String, String>, name: &str, default: T) -> T {
            match map.get(name) {
                None => default,
                Some(text) => text
                    .parse()
                    .unwrap_or_else(|_| fail(&format!("--{name}: cannot read {text:?}"))),
            }
        }
        let args = Args {
            db: map
                .get("db")
                .cloned()
                .unwrap_or_else(|| fail("--db is required")),
            workload: map
                .get("workload")
                .cloned()
                .unwrap_or_else(|| fail("--workload is required")),
            jobs: get(&map, "jobs", 10_000),
            callers: get(&map, "callers", 1),
            batch: get(&map, "batch", 1),
            in_flight: get(&map, "in-flight", 64),
            processes: get(&map, "processes", 1),
            cap_seconds: get(&map, "cap-seconds", 60.0),
            rate: get(&map, "rate", 100),
            seconds: get(&map, "seconds", 5.0),
            connections: get(&map, "connections", 4),
            synchronous: get(&map, "synchronous", "full".to_string()),
            child_out: map.get("child-out").cloned(),
        };
        if args.jobs == 0 || args.callers == 0 || args.batch == 0 || args.in_flight == 0 {
            fail("--jobs, --callers, --batch and --in-flight must be at least 1");
        }
        if args.processes == 0 || args.rate == 0 || args.connections == 0 {
            fail("--processes, --rate and --connections must be at least 1");
        }
        args
    }
}

pub fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(2)
}

/// How often each job index ran, plus the time of the first and last start.
#[derive(Debug)]
pub struct Ledger {
    counts: Vec<AtomicU8>,
    ran: AtomicU64,
    anchor: Instant,
    first_us: AtomicU64,
    last_us: AtomicU64,
    /// Enqueue time of each index (µs since `anchor`), for the latency workload.
    enqueued_us: Vec<AtomicU64>,
    waits_us: std::sync::Mutex<Vec<u64>>,
}

impl Ledger {
    pub fn new(jobs: u32) -> Ledger {
        Ledger {
            counts: (0..jobs).map(|_| AtomicU8::new(0)).collect(),
            ran: AtomicU64::new(0),
            anchor: Instant::now(),
            first_us: AtomicU64::new(u64::MAX),
            last_us: AtomicU64::new(0),
            enqueued_us: (0..jobs).map(|_| AtomicU64::new(0)).collect(),
            waits_us: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.anchor.elapsed().as_micros() as u64
    }

    /// A job handler calls this first.
    pub fn ran(&self, index: u32) {
        let now = self.now_us();
        if let Some(count) = self.counts.get(index as usize) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        let enqueued = self
            .enqueued_us
            .get(index as usize)
            .map(|t| t.load(Ordering::Relaxed))
            .unwrap_or(0);
        if enqueued > 0
            && let Ok(mut waits) = self.waits_us.lock()
        {
            waits.push(now.saturating_sub(enqueued));
        }
        self.first_us.fetch_min(now, Ordering::Relaxed);
        self.last_us.fetch_max(now, Ordering::Relaxed);
        self.ran.fetch_add(1, Ordering::Relaxed);
    }

    pub fn mark_enqueued(&self, index: u32) {
        if let Some(t) = self.enqueued_us.get(index as usize) {
            t.store(self.now_us().max(1), Ordering::Relaxed);
        }
    }

    pub fn ran_total(&self) -> u64 {
        self.ran.load(Ordering::Relaxed)
    }

    /// Waits until `target` handler calls happened or `cap` passed; answers whether the
    /// target was reached.
    pub async fn wait_for(&self, target: u64, cap: Duration) -> bool {
        let deadline = Instant::now() + cap;
        while self.ran_total() < target {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        true
    }

    /// Seconds from the first start to the last start.
    pub fn active_seconds(&self) -> f64 {
        let first = self.first_us.load(Ordering::Relaxed);
        let last = self.last_us.load(Ordering::Relaxed);
        if first == u64::MAX || last <= first {
            return 0.0;
        }
        (last - first) as f64 / 1e6
    }

    pub fn counts(&self) -> Vec<u8> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    pub fn waits_ms(&self) -> Vec<f64> {
        let mut waits = self.waits_us.lock().map(|w| w.clone()).unwrap_or_default();
        waits.sort_unstable();
        waits.into_iter().map(|us| us as f64 / 1000.0).collect()
    }

    /// Writes the counts of a child process (one byte per index) to `path`.
    pub fn write_child(&self, path: &str, started_us_unix: u64) {
        let mut bytes = self.counts();
        // The window of this child, in unix µs, after the counts.
        let first = self.first_us.load(Ordering::Relaxed);
        let last = self.last_us.load(Ordering::Relaxed);
        let base = started_us_unix;
        let (first, last) = if first == u64::MAX {
            (0, 0)
        } else {
            (base + first, base + last)
        };
        bytes.extend_from_slice(&first.to_le_bytes());
        bytes.extend_from_slice(&last.to_le_bytes());
        if let Err(err) = std::fs::write(path, bytes) {
            fail(&format!("writing {path}: {err}"));
        }
    }
}

pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Merges the counts of children (files written by [`Ledger::write_child`]); answers the
/// summed counts and the window (first start, last start) across them in seconds.
pub fn merge_children(paths: &[String], jobs: u32) -> (Vec<u8>, f64) {
    let mut counts = vec![0u8; jobs as usize];
    let mut first = u64::MAX;
    let mut last = 0u64;
    for path in paths {
        let bytes = std::fs::read(path).unwrap_or_else(|err| fail(&format!("{path}: {err}")));
        if bytes.len() != jobs as usize + 16 {
            fail(&format!("{path}: {} bytes for {jobs} jobs", bytes.len()));
        }
        for (total, c) in counts.iter_mut().zip(&bytes[..jobs as usize]) {
            *total = total.saturating_add(*c);
        }
        let f = u64::from_le_bytes(
            bytes[jobs as usize..jobs as usize + 8]
                .try_into()
                .unwrap_or([0; 8]),
        );
        let l = u64::from_le_bytes(bytes[jobs as usize + 8..].try_into().unwrap_or([0; 8]));
        if f > 0 {
            first = first.min(f);
            last = last.max(l);
        }
    }
    let window = if first == u64::MAX || last <= first {
        0.0
    } else {
        (last - first) as f64 / 1e6
    };
    (counts, window)
}

/// The exactly-once check: `counts` per index, `unfinished` = indices still not done in
/// the database. Answers (ran, duplicates, lost).
pub fn check(counts: &[u8], unfinished: &[u32]) -> (u64, u64, u64) {
    let mut still = vec![false; counts.len()];
    for &i in unfinished {
        if let Some(s) = still.get_mut(i as usize) {
            *s = true;
        }
    }
    let mut ran = 0;
    let mut duplicates = 0;
    let mut lost = 0;
    for (c, s) in counts.iter().zip(&still) {
        if *c > 0 {
            ran += 1;
        }
        if *c > 1 {
            duplicates += 1;
        }
        if *c == 0 && !*s {
            lost += 1;
        }
    }
    (ran, duplicates, lost)
}

/// The value at quantile `q` of sorted `values` (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

pub fn percentiles(sorted: &[f64]) -> Value {
    json!({
        "p50Ms": quantile(sorted, 0.50),
        "p95Ms": quantile(sorted, 0.95),
        "p99Ms": quantile(sorted, 0.99),
        "maxMs": quantile(sorted, 1.0),
    })
}

/// Prints the one JSON line the driver reads.
pub fn report(peer: &str, args: &Args, mut figures: Value) {
    if let Some(map) = figures.as_object_mut() {
        map.insert("peer".into(), json!(peer));
        map.insert("workload".into(), json!(args.workload));
        map.insert("jobs".into(), json!(args.jobs));
    }
    println!("{figures}");
}

/// Runs the enqueue workload: `callers` tasks share `jobs`, each call enqueues `batch`
/// indices through `enqueue` (which answers once the jobs are committed).
pub async fn enqueue_workload<F, Fut>(args: &Args, enqueue: F) -> Value
where
    F: Fn(Vec<u32>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..args.callers {
        let enqueue = enqueue.clone();
        let (jobs, callers, batch) = (args.jobs, args.callers, args.batch);
        tasks.spawn(async move {
            let mut mine: Vec<u32> = (0..jobs).filter(|i| i % callers == caller).collect();
            while !mine.is_empty() {
                let rest = mine.split_off(mine.len().min(batch as usize));
                enqueue(mine).await?;
                mine = rest;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(err)) => fail(&format!("enqueue: {err}")),
            Err(err) => fail(&format!("enqueue task: {err}")),
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    json!({
        "seconds": seconds,
        "perSecond": args.jobs as f64 / seconds,
        "callers": args.callers,
        "batch": args.batch,
    })
}

/// Paced enqueues for the latency workload: `jobs` at `rate` per second, one at a time
/// through `enqueue`, each marked in `ledger` just before its call.
pub async fn paced_enqueue<F, Fut>(args: &Args, ledger: &Ledger, enqueue: F)
where
    F: Fn(u32) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let gap = Duration::from_secs_f64(1.0 / args.rate as f64);
    let mut next = tokio::time::Instant::now();
    for i in 0..args.jobs {
        tokio::time::sleep_until(next).await;
        next += gap;
        ledger.mark_enqueued(i);
        if let Err(err) = enqueue(i).await {
            fail(&format!("enqueue: {err}"));
        }
    }
}

/// Open-loop paced HTTP/1.1 POSTs to `address` (path `/hook`): `rate` requests/s for
/// `seconds`, spread over `connections` kept-alive connections. Answers the latency of
/// each 202 (ms, sorted), the count of other answers, and the late sends.
pub async fn paced_http(
    address: SocketAddr,
    rate: u64,
    seconds: f64,
    connections: u32,
) -> (Vec<f64>, u64, u64) {
    let total = (rate as f64 * seconds).round() as u64;
    let per_connection_gap = Duration::from_secs_f64(connections as f64 / rate as f64);
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let share = total / connections as u64 + u64::from((c as u64) < total % connections as u64);
        let offset = Duration::from_secs_f64(c as f64 / rate as f64);
        tasks.spawn(async move {
            let mut stream = TcpStream::connect(address)
                .await
                .unwrap_or_else(|err| fail(&format!("connecting to {address}: {err}")));
            let _ = stream.set_nodelay(true);
            let mut latencies = Vec::with_capacity(share as usize);
            let mut refused = 0u64;
            let mut late = 0u64;
            let mut buffer = vec![0u8; 4096];
            for k in 0..share {
                let slot = start + offset + per_connection_gap * k as u32;
                if tokio::time::Instant::now() > slot + Duration::from_millis(1) {
                    late += 1;
                }
                tokio::time::sleep_until(slot).await;
                let body = format!(r#"{{"n":{}}}"#, c as u64 * 1_000_000 + k);
                let request = format!(
                    "POST /hook HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let sent = Instant::now();
                if let Err(err) = stream.write_all(request.as_bytes()).await {
                    fail(&format!("sending: {err}"));
                }
                let status = read_answer(&mut stream, &mut buffer).await;
                if status == 202 {
                    latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
                } else {
                    refused += 1;
                }
            }
            (latencies, refused, late)
        });
    }
    let mut all = Vec::new();
    let (mut refused, mut late) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        let (l, r, t) = done.unwrap_or_else(|err| fail(&format!("load task: {err}")));
        all.extend(l);
        refused += r;
        late += t;
    }
    all.sort_by(f64::total_cmp);
    (all, refused, late)
}

/// Reads one HTTP/1.1 answer (headers + `content-length` body); answers its status.
async fn read_answer(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> u16 {
    let mut filled = 0usize;
    loop {
        if filled == buffer.len() {
            buffer.resize(buffer.len() * 2, 0);
        }
        let n = stream
            .read(&mut buffer[filled..])
            .await
            .unwrap_or_else(|err| fail(&format!("reading: {err}")));
        if n == 0 {
            fail("the server closed the connection");
        }
        filled += n;
        let Some(end) = buffer[..filled].windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if filled < end + 4 + length {
            continue;
        }
        return head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
    }
}

/// The resident set of this process now and at its peak, in KiB (`/proc/self/status`).
pub fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
