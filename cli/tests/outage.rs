//! Database outage under webhook load (issue 9 item 3; `RELIABILITY.md` §9).
//!
//! The real `fronta serve` (HTTP and its worker, one process) runs on a fresh Postgres
//! database reached through a [`FaultProxy`]. Kept-alive connections post webhooks at a
//! steady rate and record every answer (status, run id, `Retry-After`, when). After a warm
//! spell the proxy cuts the database off — `reset` (connections reset, new ones refused:
//! the database restarting) or `stall` (a blackhole: nothing forwarded, nothing closed) —
//! for a while, then gives it back; the load goes on, then stops.
//!
//! The checker reads Postgres directly (not through the proxy):
//!
//! - every 202's run id is a committed row (no 202 without its commit), and no run id was
//!   answered twice;
//! - every other answer is a 503 with `Retry-After` (whole seconds, ≥ 1) and the body
//!   `{"error": {"code": "unavailable", "retryAfter": n, …}}` — no other status, and no
//!   request left without an answer or with a broken connection;
//! - every run reaches `completed` (the automation only logs), with `attempts` 0 on every
//!   row and in `run_stats`: the outage spends no retry budget; `reclaims` are counted
//!   (leases that expired during the cut) and reported;
//! - the server process is still alive afterwards, its election has a leader again, and
//!   it stops cleanly on SIGTERM (no panic, no stuck task);
//! - reported, not asserted (the machine is shared): the pre-cut rate of 202s, how long
//!   503s took, and the time from the restore to the first second with ≥ 90 % of the
//!   pre-cut rate of 202s.
//!
//! Quick tier by default (100 webhooks/s, a 5 s cut, each mode); `FRONTA_CHAOS_FULL=1`
//! runs the numbers (200 webhooks/s, a 30 s cut). Rows committed although their
//! request answered 503 (the commit landed after the deadline) are allowed — a 503 says
//! "repeat", and a `webhook-id` makes the repeat find the first run — and counted.

mod support;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fronta_engine::{RunStatus, RunStore};
use fronta_sim::faults::{Cut, FaultProxy};
use serde_json::json;
use support::{all_runs, pg};

/// `FRONTA_CHAOS_FULL=1` selects the full tier (as for the other process harnesses).
const FULL_ENV: &str = "FRONTA_CHAOS_FULL";
const ADMIN_TOKEN: &str = "fa_outage_admin_token";

struct Plan {
    /// Webhooks per second offered, all connections together.
    rate: u64,
    connections: u64,
    warm: Duration,
    cut: Duration,
    after: Duration,
    /// The runs' lease: shorter than the cut, so leases expire during it.
    lease: &'static str,
    drain_timeout: Duration,
}

fn full() -> bool {
    std::env::var(FULL_ENV).is_ok_and(|value| value == "1")
}

fn plan() -> Plan {
    if full() {
        Plan {
            rate: 200,
            connections: 64,
            warm: Duration::from_secs(10),
            cut: Duration::from_secs(30),
            after: Duration::from_secs(20),
            lease: "5s",
            drain_timeout: Duration::from_secs(300),
        }
    } else {
        Plan {
            rate: 100,
            connections: 32,
            warm: Duration::from_secs(3),
            cut: Duration::from_secs(5),
            after: Duration::from_secs(6),
            lease: "3s",
            drain_timeout: Duration::from_secs(120),
        }
    }
}

/// One answer (or failure) seen by the load.
#[derive(Debug, Clone)]
struct Seen {
    /// When the request was sent, from the start of the load.
    sent: Duration,
    elapsed: Duration,
    /// 0 when the request got no answer (connection error).
    status: u16,
    run_id: Option<String>,
    retry_after: Option<String>,
    code: Option<String>,
    body_retry_after: Option<u64>,
    error: Option<String>,
}

/// `url` with its host and port replaced by `address`.
fn through(url: &str, address: SocketAddr) -> String {
    let scheme_end = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let user = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[..=at],
        None => "",
    };
    format!(
        "{}{user}{address}{}",
        &url[..scheme_end],
        &rest[authority_end..]
    )
}

/// The address of the Postgres server of the tests.
async fn upstream() -> SocketAddr {
    let options = sqlx::postgres::PgConnectOptions::from_str(&pg::base_url()).expect("a URL");
    let host = options.get_host().to_owned();
    let port = options.get_port();
    tokio::net::lookup_host((host.as_str(), port))
        .await
        .expect("resolve the Postgres host")
        .next()
        .expect("an address of the Postgres host")
}

struct Server {
    child: Child,
    address: SocketAddr,
    stderr: std::path::PathBuf,
}

/// `fronta serve` on `url` with its worker; stderr is copied to a file.
fn serve(url: &str, lease: &str, dir: &std::path::Path) -> Server {
    let stderr_path = dir.join("serve.stderr");
    let mut child = support::fronta(url)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
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
            .expect("fronta serve printed its address before it ended")
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
fn setup(address: SocketAddr) -> String {
    let address = address.to_string();
    let (status, tenant) = support::call(
        &address,
        "POST",
        "/api/admin/tenants",
        Some(ADMIN_TOKEN),
        Some(&json!({"name": "Outage Ltd"})),
    );
    assert_eq!(status, 201, "tenant: {tenant}");
    let token = tenant["token"].as_str().expect("a tenant token").to_owned();
    let (status, automation) = support::call(
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
async fn load(
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
    let client = support::http_client(1, Duration::from_secs(60));
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

/// Seconds from `restore` to the start of the first 1 s window whose 202s reach 90 % of
/// `rate` (stepping by 100 ms); `None` if none does before the load ended.
fn recovery(accepted: &[Duration], restore: Duration, end: Duration, rate: f64) -> Option<f64> {
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

async fn outage(how: Cut) {
    let plan = plan();
    let db = pg::TestDb::create().await;
    let proxy = FaultProxy::start(upstream().await)
        .await
        .expect("start the fault proxy");
    let proxied = through(&db.url, proxy.local_addr());
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut server = serve(&proxied, plan.lease, dir.path());
    let path = Arc::new(setup(server.address));
    // The checker's own store: straight to Postgres, no listener.
    let mut direct_config = db.config(None);
    direct_config.listen = false;
    let direct = fronta_store_postgres::PgStore::connect(direct_config)
        .await
        .expect("a direct store");

    let started = Instant::now();
    let cut_at = plan.warm;
    let restore_at = plan.warm + plan.cut;
    let stop = restore_at + plan.after;
    let per_connection = plan.rate as f64 / plan.connections as f64;
    let mut loads = tokio::task::JoinSet::new();
    for index in 0..plan.connections {
        let offset = Duration::from_secs_f64(index as f64 / plan.rate as f64);
        loads.spawn(load(
            server.address,
            path.clone(),
            per_connection,
            offset,
            started,
            stop,
        ));
    }
    tokio::time::sleep(cut_at.saturating_sub(started.elapsed())).await;
    let cut_real = started.elapsed();
    proxy.cut(how).await;
    eprintln!("outage ({how:?}): cut at {:.1} s", cut_real.as_secs_f64());
    tokio::time::sleep(restore_at.saturating_sub(started.elapsed())).await;
    proxy.restore().await.expect("restore the proxy");
    let restore_real = started.elapsed();
    eprintln!(
        "outage ({how:?}): restored at {:.1} s",
        restore_real.as_secs_f64()
    );
    let mut seen: Vec<Seen> = Vec::new();
    let mut skipped = 0;
    while let Some(done) = loads.join_next().await {
        let (part, missed) = done.expect("a load task");
        seen.extend(part);
        skipped += missed;
    }
    let load_end = started.elapsed();

    // Every run reaches a terminal status.
    let drain_started = Instant::now();
    let runs = loop {
        let runs = all_runs(&direct).await;
        let open = runs.iter().filter(|run| !run.status.is_terminal()).count();
        if open == 0 {
            break runs;
        }
        assert!(
            drain_started.elapsed() < plan.drain_timeout,
            "{open} runs still open {:?} after the load; server log: {}",
            plan.drain_timeout,
            server.stderr.display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let drain = drain_started.elapsed();

    // The checks.
    let by_id: HashMap<String, &fronta_engine::Run> =
        runs.iter().map(|run| (run.id.to_string(), run)).collect();
    let mut statuses: HashMap<u16, u64> = HashMap::new();
    for answer in &seen {
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
        server.stderr.display()
    );
    let mut accepted_ids = HashSet::new();
    let mut accepted_at = Vec::new();
    for answer in seen.iter().filter(|answer| answer.status == 202) {
        let id = answer.run_id.clone().expect("a 202 carries a runId");
        assert!(
            by_id.contains_key(&id),
            "a 202 answered run {id} (sent at {:?}) that has no committed row",
            answer.sent
        );
        assert!(accepted_ids.insert(id.clone()), "run {id} answered twice");
        accepted_at.push(answer.sent);
    }
    let unavailable: Vec<&Seen> = seen.iter().filter(|answer| answer.status == 503).collect();
    for answer in &unavailable {
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
    }
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
    let stats = direct.run_stats().await.expect("run stats");
    assert_eq!(stats.attempts, 0, "run_stats counts no attempt: {stats:?}");
    let reclaims: u64 = runs.iter().map(|run| u64::from(run.reclaims)).sum();
    assert_eq!(
        stats.reclaims, reclaims,
        "run_stats counts the rows' reclaims"
    );
    let unanswered_rows = runs.len() - accepted_ids.len();

    // The process survived, leads again, and stops cleanly.
    assert!(
        server.child.try_wait().expect("wait").is_none(),
        "fronta serve is still running after the outage (log: {})",
        server.stderr.display()
    );
    let leader_deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        let leader = fronta_store_postgres::leader::current_leader(direct.pool())
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
    support::signal(server.child.id(), "TERM");
    let exit_deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = server.child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > exit_deadline {
            let _ = server.child.kill();
            panic!(
                "fronta serve did not stop within 30 s of SIGTERM (log: {})",
                server.stderr.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = std::fs::read_to_string(&server.stderr).unwrap_or_default();
    assert!(
        status.success(),
        "fronta serve exits 0 on SIGTERM: {status:?}\n{log}"
    );
    assert!(!log.contains("panicked"), "no panic in the server:\n{log}");
    // Which of the process's paths met the outage (its warnings, counted).
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

    // Figures.
    let warm_from = Duration::from_secs(1).min(cut_real / 2);
    let before = accepted_at
        .iter()
        .filter(|sent| **sent >= warm_from && **sent < cut_real)
        .count() as f64;
    let pre_rate = before / (cut_real - warm_from).as_secs_f64();
    let back = recovery(&accepted_at, restore_real, load_end, pre_rate);
    let mut latencies: Vec<Duration> = unavailable.iter().map(|answer| answer.elapsed).collect();
    latencies.sort();
    let quantile = |sorted: &[Duration], q: f64| {
        sorted
            .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let mut accepted_latencies: Vec<Duration> = seen
        .iter()
        .filter(|answer| answer.status == 202 && answer.sent < cut_real)
        .map(|answer| answer.elapsed)
        .collect();
    accepted_latencies.sort();
    let during = seen
        .iter()
        .filter(|answer| answer.sent >= cut_real && answer.sent < restore_real)
        .count();
    let after_restore_503 = unavailable
        .iter()
        .filter(|answer| answer.sent >= restore_real)
        .count();
    let proxy_stats = proxy.stats();
    eprintln!(
        "outage ({how:?}): {} requests ({} 202, {} 503; {} sent during the {:.0} s cut, {} 503s sent after the restore; {} slots skipped while requests were out); \
         pre-cut {:.0} 202/s (of {} offered; 202 latency p50 {:.0} ms, p99 {:.0} ms); 503 latency p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; \
         throughput back to ≥ 90 % {} after the restore; \
         {} runs, all completed, attempts 0, {} reclaims, {} rows committed without a 202; drained in {:.1} s; \
         proxy: {} connections, {} reset, {} held; leader again: {}; server log: {}",
        seen.len(),
        statuses.get(&202).copied().unwrap_or(0),
        statuses.get(&503).copied().unwrap_or(0),
        during,
        (restore_real - cut_real).as_secs_f64(),
        after_restore_503,
        skipped,
        pre_rate,
        plan.rate,
        quantile(&accepted_latencies, 0.5),
        quantile(&accepted_latencies, 0.99),
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.99),
        quantile(&latencies, 1.0),
        back.map_or("never (within the load)".to_owned(), |s| format!(
            "{s:.1} s"
        )),
        runs.len(),
        reclaims,
        unanswered_rows,
        drain.as_secs_f64(),
        proxy_stats.accepted,
        proxy_stats.reset,
        proxy_stats.held,
        leader.unwrap_or_default(),
        paths.join(", "),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reset_under_webhook_load_answers_503_with_retry_after_and_loses_nothing() {
    outage(Cut::Reset).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stall_under_webhook_load_answers_503_with_retry_after_and_loses_nothing() {
    outage(Cut::Stall).await;
}

#[test]
fn through_replaces_only_host_and_port() {
    let address: SocketAddr = "127.0.0.1:6000".parse().expect("address");
    assert_eq!(
        through("postgres://u:p@db.example:5432/x?sslmode=disable", address),
        "postgres://u:p@127.0.0.1:6000/x?sslmode=disable"
    );
    assert_eq!(
        through("postgres://127.0.0.1/x", address),
        "postgres://127.0.0.1:6000/x"
    );
}

#[test]
fn recovery_finds_the_first_full_second() {
    let restore = Duration::from_secs(10);
    // 10/s before, nothing for 2 s after the restore, then 10/s again.
    let accepted: Vec<Duration> = (0..100)
        .map(|i| Duration::from_millis(i * 100))
        .chain((0..50).map(|i| Duration::from_millis(12_000 + i * 100)))
        .collect();
    let back = recovery(&accepted, restore, Duration::from_secs(17), 10.0).expect("back");
    assert!((back - 2.0).abs() < 0.11, "about 2 s: {back}");
    assert_eq!(
        recovery(&accepted, restore, Duration::from_secs(17), 100.0),
        None,
        "never at a rate it never had"
    );
}
