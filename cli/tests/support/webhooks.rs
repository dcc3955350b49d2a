//! Webhook load against a real `fronta serve`, and its checker, shared by the harnesses
//! that take the database away under load (`outage.rs`: a fault proxy; `partition.rs`: a
//! network partition — both on Postgres; `disk_full.rs`: a full disk under SQLite): starting the server with its stderr kept in a
//! file, a tenant with an automation that only logs, an open-loop load on kept-alive
//! connections that records every answer, and the checks every such harness makes of
//! those answers, of the rows, and of the server's end. What is cut, when, and which
//! figures a harness prints stay in the harness.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fronta_engine::{Run, RunStatus, RunStore};
use serde_json::json;

pub const ADMIN_TOKEN: &str = "fa_webhook_load_admin_token";

/// One answer (or failure) seen by the load.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When the request was sent, from the start of the load.
    pub sent: Duration,
    pub elapsed: Duration,
    /// 0 when the request got no answer (connection error).
    pub status: u16,
    pub run_id: Option<String>,
    pub retry_after: Option<String>,
    pub code: Option<String>,
    pub body_retry_after: Option<u64>,
    pub error: Option<String>,
}

/// A `fronta serve` child and where it listens; its stderr is copied to `stderr`.
pub struct Server {
    pub child: Child,
    pub address: SocketAddr,
    pub stderr: PathBuf,
}

impl Drop for Server {
    /// A test that panicked never stopped its server: it ends with the test.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Server {
    /// Fails unless the process still runs after `what` (the harness's fault).
    pub fn assert_running(&mut self, what: &str) {
        assert!(
            self.child.try_wait().expect("wait").is_none(),
            "fronta serve is still running after {what} (log: {})",
            self.stderr.display()
        );
    }

    /// SIGTERM: the process exits 0 within 30 s with no panic in its log; answers the log.
    pub async fn stop(&mut self) -> String {
        super::signal(self.child.id(), "TERM");
        let exit_deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > exit_deadline {
                let _ = self.child.kill();
                panic!(
                    "fronta serve did not stop within 30 s of SIGTERM (log: {})",
                    self.stderr.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let log = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(
            status.success(),
            "fronta serve exits 0 on SIGTERM: {status:?}\n{log}"
        );
        assert!(!log.contains("panicked"), "no panic in the server:\n{log}");
        log
    }
}

/// `fronta serve` from `command` (the binary with `--database` given, perhaps behind a
/// wrapper such as `ip netns exec`), listening on `listen` (`host:0`), with its worker
/// (`lease`), the webhook deadline at 3 s, no rate limits; stderr goes to
/// `dir/serve.stderr`.
pub fn serve(mut command: Command, listen: &str, lease: &str, dir: &Path) -> Server {
    let stderr_path = dir.join("serve.stderr");
    let mut child = command
        .args([
            "serve",
            "--listen",
            listen,
            "--concurrency",
            "16",
            "--lease",
            lease,
            "--poll",
            "200ms",
            "--webhook-rate",
            "off",
            "--tenant-webhook-rate",
            "off",
            "--api-rate",
            "off",
        ])
        .env("FRONTA_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("FRONTA_PG_ACQUIRE_TIMEOUT", "2s")
        .env("FRONTA_WEBHOOK_STORE_DEADLINE", "3s")
        .env("FRONTA_UNAVAILABLE_RETRY_AFTER", "2s")
        .env("FRONTA_STORAGE_WAIT", "1s")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fronta serve");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut file = std::fs::File::create(&stderr_path).expect("the stderr file");
    let address = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| {
                panic!(
                    "fronta serve printed its address before it ended (log: {})",
                    stderr_path.display()
                )
            })
            .expect("a line");
        let _ = writeln!(file, "{line}");
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .parse::<SocketAddr>()
                .expect("an address");
        }
    };
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = writeln!(file, "{line}");
        }
    });
    Server {
        child,
        address,
        stderr: stderr_path,
    }
}

/// A tenant and an automation that only logs; the webhook's path.
pub fn setup(address: SocketAddr) -> String {
    let address = address.to_string();
    let (status, tenant) = super::call(
        &address,
        "POST",
        "/api/admin/tenants",
        Some(ADMIN_TOKEN),
        Some(&json!({"name": "Webhook Load Ltd"})),
    );
    assert_eq!(status, 201, "tenant: {tenant}");
    let token = tenant["token"].as_str().expect("a tenant token").to_owned();
    let (status, automation) = super::call(
        &address,
        "POST",
        "/api/automations",
        Some(&token),
        Some(&json!({
            "name": "Orders",
            "trigger": {"type": "webhook", "params": [
                {"name": "orderId", "path": "order.id", "type": "string", "required": true}]},
            "steps": [{"name": "note", "op": "flow/log", "input": {"message": "order {{orderId}}"}}]
        })),
    );
    assert_eq!(status, 201, "automation: {automation}");
    let url = automation["webhookUrl"]
        .as_str()
        .expect("a webhook URL")
        .to_owned();
    url[url.find("/webhook/").expect("a webhook path")..].to_owned()
}

/// One webhook on `client`'s kept-alive connection: status, `Retry-After`, JSON body and
/// the time from sending to the last byte of the answer.
async fn post(
    client: &reqwest::Client,
    url: &str,
    body: String,
) -> Result<(u16, Option<String>, serde_json::Value, Duration), reqwest::Error> {
    let sent = Instant::now();
    let response = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let bytes = response.bytes().await?;
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    Ok((status, retry_after, json, sent.elapsed()))
}

/// One connection's share of the load until `stop`: open-loop slots at `per_second`; a
/// slot missed while a request was out is skipped (the offered rate stays the same, no
/// burst of catch-up requests after the outage).
async fn connection(
    address: SocketAddr,
    path: Arc<String>,
    per_second: f64,
    offset: Duration,
    started: Instant,
    stop: Duration,
) -> (Vec<Seen>, u64) {
    let period = Duration::from_secs_f64(1.0 / per_second);
    let mut seen = Vec::new();
    let mut skipped = 0u64;
    // One kept-alive connection; a new one is opened when the server or the network
    // closed it.
    let client = super::http_client(1, Duration::from_secs(60));
    let url = format!("http://{address}{path}");
    let mut slot = offset;
    let mut number = 0u64;
    loop {
        let now = started.elapsed();
        if slot >= stop {
            break;
        }
        if slot > now {
            tokio::time::sleep(slot - now).await;
        } else if now - slot > period {
            let missed = ((now - slot).as_secs_f64() / period.as_secs_f64()) as u64;
            skipped += missed;
            slot += period * missed as u32;
            continue;
        }
        slot += period;
        number += 1;
        let sent = started.elapsed();
        let body = json!({"order": {"id": format!("{offset:?}-{number}")}}).to_string();
        match post(&client, &url, body).await {
            Ok((status, retry_after, json, elapsed)) => {
                seen.push(Seen {
                    sent,
                    elapsed,
                    status,
                    run_id: json["runId"].as_str().map(str::to_owned),
                    retry_after,
                    code: json["error"]["code"].as_str().map(str::to_owned),
                    body_retry_after: json["error"]["retryAfter"].as_u64(),
                    error: None,
                });
            }
            Err(err) if err.is_timeout() => {
                seen.push(failure(sent, "no answer within 60 s".into()));
            }
            Err(err) => seen.push(failure(sent, format!("{err:?}"))),
        }
    }
    (seen, skipped)
}

fn failure(sent: Duration, error: String) -> Seen {
    Seen {
        sent,
        elapsed: Duration::ZERO,
        status: 0,
        run_id: None,
        retry_after: None,
        code: None,
        body_retry_after: None,
        error: Some(error),
    }
}

/// A webhook load in progress: `rate` webhooks per second over `connections` kept-alive
/// connections until `stop` after its start.
pub struct Load {
    tasks: tokio::task::JoinSet<(Vec<Seen>, u64)>,
    started: Instant,
}

impl Load {
    pub fn start(
        address: SocketAddr,
        path: &str,
        rate: u64,
        connections: u64,
        stop: Duration,
    ) -> Load {
        let started = Instant::now();
        let path = Arc::new(path.to_owned());
        let per_connection = rate as f64 / connections as f64;
        let mut tasks = tokio::task::JoinSet::new();
        for index in 0..connections {
            let offset = Duration::from_secs_f64(index as f64 / rate as f64);
            tasks.spawn(connection(
                address,
                path.clone(),
                per_connection,
                offset,
                started,
                stop,
            ));
        }
        Load { tasks, started }
    }

    /// Time since the load started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Sleeps until `at` after the start (at once if that has passed).
    pub async fn until(&self, at: Duration) {
        tokio::time::sleep(at.saturating_sub(self.started.elapsed())).await;
    }

    /// Every answer once the load has stopped, the slots skipped while requests were out,
    /// and when (from the start) the last connection finished.
    pub async fn finish(mut self) -> (Vec<Seen>, u64, Duration) {
        let mut seen = Vec::new();
        let mut skipped = 0;
        while let Some(done) = self.tasks.join_next().await {
            let (part, missed) = done.expect("a load task");
            seen.extend(part);
            skipped += missed;
        }
        (seen, skipped, self.started.elapsed())
    }
}

/// Every run once none is open (polled), and how long that took; panics after `within`.
pub async fn drain(store: &dyn RunStore, within: Duration, log: &Path) -> (Vec<Run>, Duration) {
    let started = Instant::now();
    loop {
        let runs = super::all_runs(store).await;
        let open = runs.iter().filter(|run| !run.status.is_terminal()).count();
        if open == 0 {
            return (runs, started.elapsed());
        }
        assert!(
            started.elapsed() < within,
            "{open} runs still open {within:?} after the load; server log: {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What [`check_answers`] found.
pub struct Answers {
    pub statuses: HashMap<u16, u64>,
    /// When each 202 was sent, in the order seen.
    pub accepted_at: Vec<Duration>,
    /// The 503s' latencies, sorted.
    pub unavailable_latencies: Vec<Duration>,
    /// When each 503 was sent.
    pub unavailable_at: Vec<Duration>,
    /// Rows committed although their request did not get a 202 (the commit landed after
    /// the deadline): allowed, a 503 says "repeat".
    pub rows_without_202: usize,
}

/// The checks of the answers against the committed `runs`:
/// - every answer is a 202 or a 503 (no other status, no broken connection);
/// - every 202's run id is a committed row, and no run id was answered twice;
/// - every 503 has `Retry-After` (whole seconds, ≥ 1) and the body
///   `{"error": {"code": "unavailable", "retryAfter": n}}` with the same n.
pub fn check_answers(seen: &[Seen], runs: &[Run], log: &Path) -> Answers {
    let by_id: HashSet<String> = runs.iter().map(|run| run.id.to_string()).collect();
    let mut statuses: HashMap<u16, u64> = HashMap::new();
    for answer in seen {
        *statuses.entry(answer.status).or_default() += 1;
    }
    let others: Vec<&Seen> = seen
        .iter()
        .filter(|answer| answer.status != 202 && answer.status != 503)
        .collect();
    assert!(
        others.is_empty(),
        "only 202 and 503 are expected; {} others, e.g. {:?} (errors {:?}; server log: {})",
        others.len(),
        others.iter().take(5).collect::<Vec<_>>(),
        others
            .iter()
            .filter_map(|answer| answer.error.as_deref())
            .take(5)
            .collect::<Vec<_>>(),
        log.display()
    );
    let mut accepted_ids = HashSet::new();
    let mut accepted_at = Vec::new();
    for answer in seen.iter().filter(|answer| answer.status == 202) {
        let id = answer.run_id.clone().expect("a 202 carries a runId");
        assert!(
            by_id.contains(&id),
            "a 202 answered run {id} (sent at {:?}) that has no committed row",
            answer.sent
        );
        assert!(accepted_ids.insert(id.clone()), "run {id} answered twice");
        accepted_at.push(answer.sent);
    }
    let mut unavailable_latencies = Vec::new();
    let mut unavailable_at = Vec::new();
    for answer in seen.iter().filter(|answer| answer.status == 503) {
        let header = answer
            .retry_after
            .as_deref()
            .unwrap_or_else(|| panic!("a 503 without Retry-After: {answer:?}"));
        let seconds: u64 = header
            .parse()
            .unwrap_or_else(|_| panic!("Retry-After is not whole seconds: {answer:?}"));
        assert!(seconds >= 1, "Retry-After ≥ 1 s: {answer:?}");
        assert_eq!(
            answer.code.as_deref(),
            Some("unavailable"),
            "the 503's body: {answer:?}"
        );
        assert_eq!(
            answer.body_retry_after,
            Some(seconds),
            "retryAfter in the body matches the header: {answer:?}"
        );
        unavailable_latencies.push(answer.elapsed);
        unavailable_at.push(answer.sent);
    }
    unavailable_latencies.sort();
    Answers {
        statuses,
        accepted_at,
        unavailable_latencies,
        unavailable_at,
        rows_without_202: runs.len() - accepted_ids.len(),
    }
}

/// Every run completed with no attempt spent (the rows and `run_stats` agree): an
/// outage of the database is not the handler's failure. Answers the reclaims (leases
/// that expired while the database was away).
pub async fn check_runs(runs: &[Run], store: &dyn RunStore) -> u64 {
    let not_completed: Vec<_> = runs
        .iter()
        .filter(|run| run.status != RunStatus::Completed)
        .map(|run| (run.id, run.status, run.last_error.clone()))
        .collect();
    assert!(
        not_completed.is_empty(),
        "every run completes: {} did not, e.g. {:?}",
        not_completed.len(),
        not_completed.iter().take(5).collect::<Vec<_>>()
    );
    let spent: Vec<_> = runs
        .iter()
        .filter(|run| run.attempts != 0)
        .map(|run| (run.id, run.attempts, run.last_error.clone()))
        .collect();
    assert!(
        spent.is_empty(),
        "the outage spends no attempt: {} runs did, e.g. {:?}",
        spent.len(),
        spent.iter().take(5).collect::<Vec<_>>()
    );
    let stats = store.run_stats().await.expect("run stats");
    assert_eq!(stats.attempts, 0, "run_stats counts no attempt: {stats:?}");
    let reclaims: u64 = runs.iter().map(|run| u64::from(run.reclaims)).sum();
    assert_eq!(
        stats.reclaims, reclaims,
        "run_stats counts the rows' reclaims"
    );
    reclaims
}

/// The server survived, leads its database again (read through `pool`), and exits 0 on
/// SIGTERM with no panic in its log. Answers the leader's name and which of the
/// process's paths met the outage (its warnings, counted).
pub async fn check_server_end(server: &mut Server, pool: &sqlx::PgPool) -> (String, String) {
    server.assert_running("the outage");
    let leader_deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        let leader = fronta_store_postgres::leader::current_leader(pool)
            .await
            .expect("read the leader");
        if leader.is_some() || Instant::now() > leader_deadline {
            break leader;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        leader
            .as_deref()
            .is_some_and(|name| name.starts_with("fronta-serve-")),
        "the server leads its database again after the outage: {leader:?}"
    );
    let log = server.stop().await;
    let paths: Vec<String> = [
        ("claim failed", "claims failed"),
        ("heartbeat failed", "heartbeat rounds failed"),
        ("completer: storage unavailable", "finish batches retried"),
        ("no attempt spent", "automation runs snoozed"),
        ("did not answer in time", "webhook deadlines"),
        ("lease lost", "lease-lost notices"),
        ("lost leadership", "leadership losses"),
        ("leader election: ", "election retries"),
    ]
    .iter()
    .map(|(needle, what)| format!("{} {what}", log.matches(needle).count()))
    .collect();
    (leader.unwrap_or_default(), paths.join(", "))
}

/// Seconds from `restore` to the start of the first 1 s window whose 202s reach 90 % of
/// `rate` (stepping by 100 ms); `None` if none does before the load ended.
pub fn recovery(accepted: &[Duration], restore: Duration, end: Duration, rate: f64) -> Option<f64> {
    let mut start = restore;
    while start + Duration::from_secs(1) <= end {
        let in_window = accepted
            .iter()
            .filter(|sent| **sent >= start && **sent < start + Duration::from_secs(1))
            .count();
        if in_window as f64 >= 0.9 * rate {
            return Some((start - restore).as_secs_f64());
        }
        start += Duration::from_millis(100);
    }
    None
}

/// The rate of 202s before `cut` (from 1 s in, or half the time to the cut).
pub fn rate_before(accepted: &[Duration], cut: Duration) -> f64 {
    let from = Duration::from_secs(1).min(cut / 2);
    let before = accepted
        .iter()
        .filter(|sent| **sent >= from && **sent < cut)
        .count() as f64;
    before / (cut - from).as_secs_f64()
}

/// The `q` quantile of sorted durations, in milliseconds (0 when there are none).
pub fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}
