//! `fronta serve` killed with SIGKILL under webhook load and restarted (issue 24 item 5;
//! `RELIABILITY.md` §12), on SQLite (a file) and on Postgres (a test database).
//!
//! One real `fronta serve` at a time on a fixed port, with its worker and the default
//! 5-minute lease of automation runs. An automation takes each webhook's order, calls a
//! slow local HTTP service (so runs are in flight for a while) and upserts the order's
//! ticket keyed by the order. Kept-alive connections post webhooks at a steady pace, each
//! with an order id of its own, and record every answer. The harness waits until the
//! server holds running runs, kills it with SIGKILL at a random moment and restarts it at
//! once, ≥ 20 times; then the load stops and every run must end. Before the next kill
//! the runs taken over have finished: a run in flight at more kills in a row than
//! `max_reclaims` is failed as a crash loop, by design.
//!
//! Checked:
//! - every 202's run id is a row, and every run ends `completed` (none failed, none left
//!   running or queued): no run waited out its 5-minute lease — the restarted process
//!   took the killed one's runs over at its start (same host: the pid is gone);
//! - no order has two runs and no order has two tickets; every completed run's order has
//!   exactly one ticket;
//! - every restart logged the takeover of the killed process.
//!
//! Reported, not asserted (the machine is shared): the time from each kill to the
//! restarted process's takeover log line (median and max), which includes the start of
//! the new process; and the runs taken over per kill.
//!
//! Quick tier by default (20 kills per store); `FRONTA_SERVE_KILL_FULL=1` makes 40.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use fronta_engine::{RunFilter, RunStatus, RunStore};
use serde_json::json;
use support::{Rng, all_runs, pg};

const FULL_ENV: &str = "FRONTA_SERVE_KILL_FULL";
const ADMIN_TOKEN: &str = "fa_serve_kill_admin_token";
/// How long the slow service takes to answer: the time a run is in flight.
const SERVICE_DELAY: Duration = Duration::from_millis(120);
/// Webhook connections and the pause between two posts on each.
const CONNECTIONS: usize = 4;
const POST_EVERY: Duration = Duration::from_millis(80);
/// A marker of the takeover log line of `fronta_engine::liveness`.
const TAKEOVER_LINE: &str = "took over a dead process";

fn kills() -> usize {
    if std::env::var(FULL_ENV).is_ok_and(|value| value == "1") {
        40
    } else {
        20
    }
}

/// A free local port (the servers of one test all listen on it, one after the other).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("its address")
        .port()
}

/// A local HTTP service that answers `{}` after [`SERVICE_DELAY`], one thread per
/// connection; its address.
fn slow_service() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the slow service");
    let address = listener.local_addr().expect("its address").to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut buffer = [0_u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                std::thread::sleep(SERVICE_DELAY);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                );
            });
        }
    });
    address
}

/// One `fronta serve` and the lines of its stderr, each with when it was read.
struct Server {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
}

/// Starts `fronta serve` on `database` at `port`; waits for its address line. Lines read
/// before it (the takeover of the first pass is logged before the address) stay queued.
fn start(database: &str, port: u16) -> (Server, Vec<(Instant, String)>) {
    for _ in 0..50 {
        let mut child = support::fronta(database)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--concurrency", "16", "--poll", "100ms"])
            .args([
                "--webhook-rate",
                "off",
                "--tenant-webhook-rate",
                "off",
                "--api-rate",
                "off",
            ])
            .env("FRONTA_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("FRONTA_HTTP_ALLOW", "127.0.0.1")
            // A killed process's service slots are held until their own lease ends (not
            // part of the takeover, RELIABILITY.md §12): enough of them for every kill.
            .env("FRONTA_SERVICE_MAX_CONCURRENT", "100000")
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fronta serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let mut before = Vec::new();
        let listening = loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok((at, line)) => {
                    let done = line.contains("listening on http://");
                    before.push((at, line));
                    if done {
                        break true;
                    }
                }
                Err(_) => break false,
            }
        };
        if listening {
            return (Server { child, lines: rx }, before);
        }
        // The port was not free yet, or the start failed: say why and try again.
        let _ = child.kill();
        let _ = child.wait();
        eprintln!("serve did not start, again: {before:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("fronta serve never started on port {port}");
}

/// A tenant, and an automation that calls the slow service and upserts the order's
/// ticket; the webhook's path.
fn setup(address: &str, service: &str) -> String {
    let (status, tenant) = support::call(
        address,
        "POST",
        "/api/admin/tenants",
        Some(ADMIN_TOKEN),
        Some(&json!({"name": "Kill Ltd"})),
    );
    assert_eq!(status, 201, "tenant: {tenant}");
    let token = tenant["token"].as_str().expect("a tenant token").to_owned();
    let (status, automation) = support::call(
        address,
        "POST",
        "/api/automations",
        Some(&token),
        Some(&json!({
            "name": "Orders",
            "trigger": {"type": "webhook", "params": [
                {"name": "orderId", "path": "order.id", "type": "string", "required": true}]},
            "steps": [
                {"name": "check", "op": "http/request",
                 "input": {"url": format!("http://{service}/orders/{{{{orderId}}}}"), "timeoutSec": 30}},
                {"name": "ticket", "op": "ticket/upsert",
                 "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}"}}
            ]
        })),
    );
    assert_eq!(status, 201, "automation: {automation}");
    let url = automation["webhookUrl"].as_str().expect("a webhook URL");
    url[url.find("/webhook/").expect("a webhook path")..].to_owned()
}

/// One post's answer: the order, the status (0: no answer) and the run id of a 202.
#[derive(Debug, Clone)]
struct Post {
    order: String,
    status: u16,
    run_id: Option<String>,
}

/// Posts webhooks on one kept-alive connection until `stop`.
async fn load(url: String, connection: usize, stop: Arc<AtomicBool>) -> Vec<Post> {
    let client = support::http_client(1, Duration::from_secs(10));
    let mut posts = Vec::new();
    let mut number = 0_u64;
    while !stop.load(Ordering::Relaxed) {
        number += 1;
        let order = format!("ord-{connection}-{number}");
        let body = json!({"order": {"id": order}}).to_string();
        let answer = client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await;
        let post = match answer {
            Ok(response) => {
                let status = response.status().as_u16();
                let json: serde_json::Value = response.json().await.unwrap_or_default();
                Post {
                    order,
                    status,
                    run_id: json["runId"].as_str().map(str::to_owned),
                }
            }
            Err(_) => Post {
                order,
                status: 0,
                run_id: None,
            },
        };
        posts.push(post);
        tokio::time::sleep(POST_EVERY).await;
    }
    posts
}

/// The order id a run's payload carries (`ord-…`), if any.
fn order_of(payload: &serde_json::Value) -> Option<String> {
    let text = payload.to_string();
    let at = text.find("ord-")?;
    let rest = &text[at..];
    let end = rest.find('"').unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `key=value` of a log line.
fn field(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
}

/// Reads the takeover line for `pid` from `lines` (waiting up to a minute): when it was
/// read and how many runs it released.
fn takeover_of(
    pid: u32,
    before: &[(Instant, String)],
    lines: &mpsc::Receiver<(Instant, String)>,
) -> Option<(Instant, u64)> {
    let matches = |line: &str| {
        let line = strip_ansi(line);
        (line.contains(TAKEOVER_LINE) && field(&line, "pid") == Some(u64::from(pid)))
            .then(|| field(&line, "runs").unwrap_or(0))
    };
    for (at, line) in before {
        if let Some(runs) = matches(line) {
            return Some((*at, runs));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let (at, line) = lines.recv_timeout(left).ok()?;
        if let Some(runs) = matches(&line) {
            return Some((at, runs));
        }
    }
    None
}

/// Tickets per external id, read from the database.
type TicketCounts = BTreeMap<String, i64>;

async fn kill_and_restart(
    database: &str,
    store: Arc<dyn RunStore>,
    tickets: impl AsyncFn() -> TicketCounts,
    label: &str,
) {
    let kills = kills();
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let service = slow_service();
    let (mut server, _) = start(database, port);
    let path = setup(&address, &service);
    let url = format!("http://{address}{path}");

    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = (0..CONNECTIONS)
        .map(|connection| tokio::spawn(load(url.clone(), connection, stop.clone())))
        .collect();

    let seed = std::env::var("FRONTA_SERVE_KILL_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()) ^ 0x5eed);
    eprintln!("{label}: seed {seed} (FRONTA_SERVE_KILL_SEED), {kills} kills");
    let mut rng = Rng(seed);
    let mut to_takeover: Vec<Duration> = Vec::new();
    let mut taken_runs: Vec<u64> = Vec::new();
    let mut held_at_kill: Vec<u64> = Vec::new();
    for round in 0..kills {
        // A random moment, once the server holds running runs.
        tokio::time::sleep(Duration::from_millis(rng.between(150, 600))).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let running = loop {
            let running = store
                .run_stats()
                .await
                .map(|stats| stats.running)
                .unwrap_or(0);
            if running > 0 || Instant::now() > deadline {
                break running;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let pid = server.child.id();
        let killed = Instant::now();
        support::signal(pid, "KILL");
        let _ = server.child.wait();
        held_at_kill.push(running);
        let (next, before) = start(database, port);
        server = next;
        let (at, runs) = takeover_of(pid, &before, &server.lines).unwrap_or_else(|| {
            panic!("{label}: round {round}: the restarted server logged no takeover of pid {pid}")
        });
        to_takeover.push(at.saturating_duration_since(killed));
        taken_runs.push(runs);
        // The runs taken over finish before the next kill: a run in flight at more
        // kills in a row than `max_reclaims` (5) is failed as a crash loop, by design.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let running = store
                .run_list(RunFilter {
                    status: Some(RunStatus::Running),
                    limit: RunFilter::MAX_PAGE,
                    ..RunFilter::default()
                })
                .await
                .unwrap_or_default();
            if running.iter().all(|run| run.reclaims == 0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{label}: round {round}: runs taken over still running after a minute"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut posts = Vec::new();
    for load in loads {
        posts.extend(load.await.expect("a load task"));
    }

    // Every run ends, none waiting out a lease.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stats = store.run_stats().await.expect("stats");
        if stats.running + stats.queued + stats.scheduled == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{label}: runs still open two minutes after the load: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let runs = all_runs(store.as_ref()).await;
    let by_id: HashMap<String, &fronta_engine::Run> =
        runs.iter().map(|run| (run.id.to_string(), run)).collect();
    let accepted: Vec<&Post> = posts.iter().filter(|post| post.status == 202).collect();
    let unanswered = posts.iter().filter(|post| post.status == 0).count();
    let other: Vec<&Post> = posts
        .iter()
        .filter(|post| post.status != 202 && post.status != 0)
        .collect();
    assert!(
        other.is_empty(),
        "{label}: answers other than 202 or none: {other:?}"
    );
    for post in &accepted {
        let id = post.run_id.as_deref().expect("a 202 names its run");
        let run = by_id
            .get(id)
            .unwrap_or_else(|| panic!("{label}: the 202 for {} has no run {id}", post.order));
        assert_eq!(
            order_of(&run.payload).as_deref(),
            Some(post.order.as_str()),
            "{label}: run {id} carries its order"
        );
    }
    let mut runs_per_order: HashMap<String, usize> = HashMap::new();
    for run in &runs {
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "{label}: every run completes: {run:?}"
        );
        let order = order_of(&run.payload).expect("every run carries an order");
        *runs_per_order.entry(order).or_default() += 1;
    }
    let twice: Vec<_> = runs_per_order.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{label}: orders with two runs: {twice:?}");
    let tickets = tickets().await;
    for order in runs_per_order.keys() {
        assert_eq!(
            tickets.get(&format!("order-{order}")).copied(),
            Some(1),
            "{label}: the order {order} has exactly one ticket"
        );
    }
    assert!(
        tickets.values().all(|n| *n == 1),
        "{label}: no order has two tickets"
    );
    assert!(
        tickets.len() == runs_per_order.len(),
        "{label}: a ticket for every order with a run and no other ({} tickets, {} orders)",
        tickets.len(),
        runs_per_order.len()
    );
    let reclaims: u64 = runs.iter().map(|run| u64::from(run.reclaims)).sum();
    let attempts: u64 = runs.iter().map(|run| u64::from(run.attempts)).sum();

    support::signal(server.child.id(), "TERM");
    let status = server.child.wait().expect("wait for the last server");
    assert!(
        status.success(),
        "{label}: the last server stops cleanly: {status:?}"
    );

    let mut sorted = to_takeover.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    let max = sorted[sorted.len() - 1];
    eprintln!(
        "{label}: {kills} kills; {} webhooks, {} answered 202, {} unanswered (in flight at a kill or sent while down); {} runs, all completed once; {} tickets; reclaims {reclaims}, attempts {attempts}",
        posts.len(),
        accepted.len(),
        unanswered,
        runs.len(),
        tickets.len()
    );
    eprintln!(
        "{label}: kill → takeover by the restarted process: median {} ms, max {} ms; running runs at the kills {:?}; runs taken over {:?}",
        median.as_millis(),
        max.as_millis(),
        held_at_kill,
        taken_runs
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_serve_killed_under_webhook_load_loses_nothing_and_is_taken_over_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("kill.db");
    let database = db.to_str().expect("a UTF-8 path").to_owned();
    let store: Arc<dyn RunStore> = Arc::new(
        fronta_store_sqlite::SqliteStore::open(fronta_store_sqlite::SqliteConfig::new(&db))
            .expect("open the database"),
    );
    let tickets = async || {
        let conn = rusqlite::Connection::open(&db).expect("open for tickets");
        let mut stmt = conn
            .prepare(
                "SELECT external_id, count(*) FROM desk_tickets \
                 WHERE external_id IS NOT NULL GROUP BY external_id",
            )
            .expect("prepare");
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("tickets")
            .map(|row| row.expect("a row"))
            .collect::<TicketCounts>()
    };
    kill_and_restart(&database, store, tickets, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_serve_killed_under_webhook_load_loses_nothing_and_is_taken_over_at_once() {
    let db = pg::TestDb::create().await;
    let store: Arc<dyn RunStore> = Arc::new(db.store(None).await);
    let tickets = async || {
        let mut conn = db.connection().await;
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT external_id, count(*) FROM desk_tickets \
             WHERE external_id IS NOT NULL GROUP BY external_id",
        )
        .fetch_all(&mut conn)
        .await
        .expect("tickets");
        rows.into_iter().collect::<TicketCounts>()
    };
    kill_and_restart(&db.url, store, tickets, "postgres").await;
}
