//! `fronta bench webhook`: the webhook ingestion path over real HTTP. The real server
//! (the router of `fronta serve`) runs in this process with no worker, on a fresh SQLite
//! file or on the empty Postgres database `--database postgres://…` names; a tenant and
//! a webhook automation are made through the API; then kept-alive HTTP/1.1 connections
//! on loopback post webhooks, each connection a reqwest client whose pool holds one
//! connection (`ApiClient::connection`):
//!
//! 1. **paced** — `--rate` requests/s (default 1,000) for `--seconds` from
//!    `--paced-connections` connections; the latency of each 202, from the request handed
//!    to the client to the last byte of its answer read (p50/p95/p99/max). The schedule is open-loop per
//!    connection: a request late on its slot goes at once, and the late ones are counted.
//! 2. **throughput** — `--connections` connections as fast as they can for `--requests`;
//!    requests/s and p99.
//!
//! Afterwards every 202's `runId` is read back from the store (`run_get`) and the queued
//! runs are counted: both must equal the 202s, or the bench fails. Rate limits are off
//! (they are per process and would only measure themselves). Progress on stderr, figures
//! on stdout (`--json` for a machine).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use fronta_engine::{RunId, RunStore, WorkerConfig};
use fronta_server::{Listener, ServerConfig};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api_client::{Answer, ApiClient};
use crate::{DbArgs, Store, is_postgres, open_store, serve};

/// The target the paced phase is judged against.
const TARGET_P99_MS: f64 = 3.0;
/// The target the throughput phase is judged against.
const TARGET_PER_SECOND: f64 = 10_000.0;

#[derive(Args, Debug, Clone)]
pub struct WebhookBenchArgs {
    /// Length of the paced phase, in seconds.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Arrival rate of the paced phase, requests per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Connections of the paced phase.
    #[arg(long, default_value_t = 4)]
    paced_connections: u64,
    /// Requests of the throughput phase.
    #[arg(long, default_value_t = 50_000)]
    requests: u64,
    /// Connections of the throughput phase.
    #[arg(long, default_value_t = 32)]
    connections: u64,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

/// What one connection saw: the latency of each 202, the run ids, other answers.
#[derive(Debug, Default)]
struct Seen {
    latencies: Vec<Duration>,
    run_ids: Vec<String>,
    refused: Vec<String>,
    late: u64,
}

impl Seen {
    fn merge(&mut self, other: Seen) {
        self.latencies.extend(other.latencies);
        self.run_ids.extend(other.run_ids);
        self.refused.extend(other.refused);
        self.late += other.late;
    }

    fn record(&mut self, answer: &Answer) {
        let run_id = answer.json()["runId"].as_str().map(str::to_owned);
        match (answer.status, run_id) {
            (202, Some(run_id)) => {
                self.latencies.push(answer.elapsed);
                self.run_ids.push(run_id);
            }
            (status, _) if self.refused.len() < 5 => self.refused.push(format!(
                "{status}: {}",
                String::from_utf8_lossy(&answer.body)
            )),
            _ => self.refused.push(String::new()),
        }
    }
}

/// p50/p95/p99/max in milliseconds of `latencies` (sorted here).
fn percentiles(latencies: &mut [Duration]) -> Value {
    latencies.sort_unstable();
    let at = |p: f64| {
        if latencies.is_empty() {
            return 0.0;
        }
        let index = ((p * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[index].as_secs_f64() * 1000.0
    };
    json!({"p50Ms": at(0.50), "p95Ms": at(0.95), "p99Ms": at(0.99), "maxMs": at(1.0)})
}

fn body(n: u64) -> Vec<u8> {
    format!(r#"{{"kind":"order.created","data":{{"order":{{"id":"{n}"}}}}}}"#).into_bytes()
}

pub async fn run(db: &DbArgs, args: WebhookBenchArgs) -> anyhow::Result<()> {
    if args.seconds == 0
        || args.rate == 0
        || args.paced_connections == 0
        || args.requests == 0
        || args.connections == 0
    {
        bail!(
            "--seconds, --rate, --paced-connections, --requests and --connections must be at least 1"
        );
    }
    let temp = tempfile::tempdir()?;
    let store = match db.database.as_deref() {
        None => {
            let path = temp.path().join("bench-webhook.db");
            let mut sqlite = SqliteConfig::new(&path);
            sqlite.synchronous = db.synchronous;
            Store::Sqlite(
                SqliteStore::open(sqlite).with_context(|| format!("opening {}", path.display()))?,
            )
        }
        Some(url) if is_postgres(url) => open_store(db, "fronta-bench-webhook").await?,
        Some(url) => bail!(
            "bench webhook uses a fresh SQLite file of its own, or an empty Postgres database \
             (--database postgres://…); {url:?} is neither: leave out --database for SQLite"
        ),
    };
    // The check counts every run in the store as this bench's.
    let runs = store.runs();
    // Ingestion only: the worker is never started, every accepted run stays queued.
    let server = BenchServer::start(&store, "bench-webhook").await?;
    let database = match store {
        Store::Sqlite(_) => Database::Sqlite {
            synchronous: format!("{:?}", db.synchronous).to_lowercase(),
        },
        Store::Postgres(_) => Database::Postgres,
    };
    let result = measure(server.address, &server.admin, runs, &database, &args).await;
    server.stop().await?;
    drop(temp);
    result
}

/// The real server of a bench, in this process, on a free loopback port, over an empty
/// store: an admin token of its own, no rate limits, no worker (what the bench enqueues
/// stays queued unless the bench claims it).
pub(crate) struct BenchServer {
    pub admin: String,
    pub address: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl BenchServer {
    /// Starts it, once the store holds no run (every run counts as the bench's).
    pub(crate) async fn start(store: &Store, name: &str) -> anyhow::Result<BenchServer> {
        let before = store.runs().run_stats().await?;
        if before.total() > 0 {
            bail!(
                "{name} needs an empty database: this one holds {} runs",
                before.total()
            );
        }
        let admin = fronta_desk::token::generate("fa_");
        let config = ServerConfig {
            admin_token_hash: Some(fronta_desk::token::hash(&admin)),
            webhook_rate_per_token: None,
            webhook_rate_per_tenant: None,
            api_rate_per_tenant: None,
            ..ServerConfig::default()
        };
        let worker_config = WorkerConfig {
            name: name.into(),
            ..WorkerConfig::default()
        };
        let (app, _worker) = serve::server_parts(
            store,
            config,
            worker_config,
            &crate::connector_settings::ConnectorArgs::from_environment()?,
        )?;
        let listener = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let address = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(fronta_server::serve(
            listener,
            app,
            shutdown.clone().cancelled_owned(),
        ));
        Ok(BenchServer {
            admin,
            address,
            shutdown,
            task,
        })
    }

    /// Stops it and waits until it has.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.task
            .await
            .context("the server task")?
            .context("serving HTTP")
    }
}

/// The store the bench ingests into, as its figures name it.
enum Database {
    Sqlite { synchronous: String },
    Postgres,
}

impl std::fmt::Display for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite { synchronous } => write!(f, "SQLite synchronous={synchronous}"),
            Database::Postgres => f.write_str("Postgres (synchronous_commit as the server has it)"),
        }
    }
}

async fn measure(
    address: SocketAddr,
    admin: &str,
    runs: Arc<dyn RunStore>,
    database: &Database,
    args: &WebhookBenchArgs,
) -> anyhow::Result<()> {
    let client = ApiClient::at(address)?;
    let webhook = setup(&client, admin).await?;
    eprintln!("webhook bench: server on http://{address}, {database}, no worker");

    // 1. Paced.
    eprintln!(
        "paced: {} req/s for {} s from {} connections…",
        args.rate, args.seconds, args.paced_connections
    );
    let sequence = Arc::new(AtomicU64::new(0));
    let interval = Duration::from_secs_f64(args.paced_connections as f64 / args.rate as f64);
    let per_connection = args.rate * args.seconds / args.paced_connections;
    let mut tasks = tokio::task::JoinSet::new();
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    for connection in 0..args.paced_connections {
        let (webhook, sequence) = (webhook.clone(), sequence.clone());
        let http = client.connection()?;
        // Spread the connections' slots across the interval.
        let offset = interval.mul_f64(connection as f64 / args.paced_connections as f64);
        tasks.spawn(async move {
            // Connect before the first slot, as the throughput phase does.
            opened(&http).await?;
            let mut seen = Seen::default();
            for i in 0..per_connection {
                let slot = start + offset + interval.mul_f64(i as f64);
                let now = tokio::time::Instant::now();
                if now > slot + Duration::from_millis(1) {
                    seen.late += 1;
                } else {
                    tokio::time::sleep_until(slot).await;
                }
                let n = sequence.fetch_add(1, Ordering::Relaxed);
                let answer = http.send("POST", &webhook, None, Some(body(n))).await?;
                seen.record(&answer);
            }
            Ok::<_, anyhow::Error>(seen)
        });
    }
    let paced_started = Instant::now();
    let mut paced = Seen::default();
    while let Some(done) = tasks.join_next().await {
        paced.merge(done??);
    }
    let paced_seconds = paced_started.elapsed().as_secs_f64();
    let paced_sent = paced.latencies.len() + paced.refused.len();
    let paced_figures = percentiles(&mut paced.latencies);
    eprintln!(
        "paced: {paced_sent} requests in {paced_seconds:.2} s, p99 {:.2} ms",
        paced_figures["p99Ms"].as_f64().unwrap_or(0.0)
    );

    // 2. Throughput.
    eprintln!(
        "throughput: {} requests from {} connections…",
        args.requests, args.connections
    );
    let taken = Arc::new(AtomicU64::new(0));
    let stop_progress = CancellationToken::new();
    {
        let (taken, stop, total) = (taken.clone(), stop_progress.clone(), args.requests);
        tokio::spawn(async move {
            let start = Instant::now();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                let n = taken.load(Ordering::Relaxed).min(total);
                eprintln!(
                    "throughput: {n}/{total} ({:.0}/s)",
                    n as f64 / start.elapsed().as_secs_f64()
                );
            }
        });
    }
    // Each connection is opened before the clock starts.
    let mut connections = Vec::new();
    for _ in 0..args.connections {
        let http = client.connection()?;
        opened(&http).await?;
        connections.push(http);
    }
    let mut tasks = tokio::task::JoinSet::new();
    let throughput_started = Instant::now();
    for http in connections {
        let (webhook, sequence, taken, total) = (
            webhook.clone(),
            sequence.clone(),
            taken.clone(),
            args.requests,
        );
        tasks.spawn(async move {
            let mut seen = Seen::default();
            while taken.fetch_add(1, Ordering::Relaxed) < total {
                let n = sequence.fetch_add(1, Ordering::Relaxed);
                let answer = http.send("POST", &webhook, None, Some(body(n))).await?;
                seen.record(&answer);
            }
            Ok::<_, anyhow::Error>(seen)
        });
    }
    let mut throughput = Seen::default();
    while let Some(done) = tasks.join_next().await {
        throughput.merge(done??);
    }
    let throughput_seconds = throughput_started.elapsed().as_secs_f64();
    stop_progress.cancel();
    let per_second = args.requests as f64 / throughput_seconds;
    let throughput_figures = percentiles(&mut throughput.latencies);

    // 3. The check: every 202's run is in the store, and nothing else is queued.
    eprintln!("check: reading every accepted run back…");
    let check_started = Instant::now();
    let mut accepted: Vec<String> = paced.run_ids;
    accepted.extend(throughput.run_ids);
    let refused: Vec<String> = paced
        .refused
        .into_iter()
        .chain(throughput.refused)
        .collect();
    let distinct = accepted.iter().collect::<HashSet<_>>().len();
    let missing = count_missing(runs.clone(), &accepted).await?;
    let stats = runs.run_stats().await?;
    let check_seconds = check_started.elapsed().as_secs_f64();
    let accepted_count = accepted.len() as u64;
    let check_ok = refused.is_empty()
        && missing == 0
        && distinct == accepted.len()
        && stats.queued == accepted_count
        && stats.total() == accepted_count;
    let check = format!(
        "{accepted_count} answered 202, {distinct} distinct runIds, {} found by run_get, {} runs queued in the store ({} in all), {} other answers",
        accepted_count - missing,
        stats.queued,
        stats.total(),
        refused.len()
    );

    let paced_p99 = paced_figures["p99Ms"].as_f64().unwrap_or(f64::MAX);
    let throughput_p99 = throughput_figures["p99Ms"].as_f64().unwrap_or(f64::MAX);
    let figures = json!({
        "database": match database { Database::Sqlite { .. } => "sqlite", Database::Postgres => "postgres" },
        "synchronous": match database { Database::Sqlite { synchronous } => Value::from(synchronous.as_str()), Database::Postgres => Value::Null },
        "paced": {
            "rate": args.rate,
            "seconds": args.seconds,
            "connections": args.paced_connections,
            "requests": paced_sent,
            "late": paced.late,
            "elapsedSeconds": paced_seconds,
            "latency": paced_figures,
            "targetP99Ms": TARGET_P99_MS,
            "meetsTarget": paced_p99 <= TARGET_P99_MS,
        },
        "throughput": {
            "connections": args.connections,
            "requests": args.requests,
            "seconds": throughput_seconds,
            "perSecond": per_second,
            "latency": throughput_figures,
            "targetPerSecond": TARGET_PER_SECOND,
            "meetsTarget": per_second >= TARGET_PER_SECOND,
        },
        "check": {"ok": check_ok, "text": check, "seconds": check_seconds},
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        let verdict = |ok: bool| if ok { "meets" } else { "MISSES" };
        let ms = |value: &Value, key: &str| value[key].as_f64().unwrap_or(0.0);
        println!(
            "fronta bench webhook — real HTTP/1.1 keep-alive on loopback, {database}, no worker"
        );
        println!(
            "  paced        {} req/s × {} s, {} connections: p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  max {:.2} ms   ({} target p99 ≤ {TARGET_P99_MS} ms; {} sends late)",
            args.rate,
            args.seconds,
            args.paced_connections,
            ms(&paced_figures, "p50Ms"),
            ms(&paced_figures, "p95Ms"),
            paced_p99,
            ms(&paced_figures, "maxMs"),
            verdict(paced_p99 <= TARGET_P99_MS),
            paced.late,
        );
        println!(
            "  throughput   {} connections: {per_second:>8.0} req/s   p50 {:.2} ms  p99 {throughput_p99:.2} ms  max {:.2} ms   ({} target ≥ {TARGET_PER_SECOND:.0} req/s; {} requests in {throughput_seconds:.2} s)",
            args.connections,
            ms(&throughput_figures, "p50Ms"),
            ms(&throughput_figures, "maxMs"),
            verdict(per_second >= TARGET_PER_SECOND),
            args.requests,
        );
        println!(
            "  check        {} {check}",
            if check_ok { "ok  " } else { "FAIL" }
        );
    }
    if !check_ok {
        let first = refused.iter().find(|text| !text.is_empty());
        bail!(
            "check failed: {check}{}",
            first.map_or(String::new(), |text| format!("; first other answer {text}"))
        );
    }
    Ok(())
}

/// `http` with its connection open: one `GET /healthz` on it.
async fn opened(http: &ApiClient) -> anyhow::Result<()> {
    let health = http.call("GET", "/healthz", None, None).await?;
    if health.status != 200 {
        bail!("GET /healthz answered {}", health.status);
    }
    Ok(())
}

/// A tenant and a webhook automation through the API; answers the webhook's path.
async fn setup(client: &ApiClient, admin: &str) -> anyhow::Result<String> {
    let tenant = client
        .call(
            "POST",
            "/api/admin/tenants",
            Some(admin),
            Some(&json!({"name": "Bench Ltd"})),
        )
        .await?;
    if tenant.status != 201 {
        bail!(
            "creating the tenant: {}",
            String::from_utf8_lossy(&tenant.body)
        );
    }
    let token = tenant.json()["token"]
        .as_str()
        .context("no tenant token")?
        .to_owned();
    orders_webhook(client, &token).await
}

/// Creates the benches' webhook automation (an order's `kind` and `data.order.id`, one
/// `flow/log` step) for the tenant of `token`; answers its webhook path.
pub(crate) async fn orders_webhook(client: &ApiClient, token: &str) -> anyhow::Result<String> {
    let automation = client
        .call(
            "POST",
            "/api/automations",
            Some(token),
            Some(&json!({
                "name": "Orders",
                "trigger": {"type": "webhook", "params": [
                    {"name": "kind", "path": "kind", "type": "string", "required": true},
                    {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
                "steps": [{"name": "note", "op": "flow/log", "input": {"message": "order {{orderId}}"}}]
            })),
        )
        .await?;
    if automation.status != 201 {
        bail!(
            "creating the automation: {}",
            String::from_utf8_lossy(&automation.body)
        );
    }
    let url = automation.json()["webhookUrl"]
        .as_str()
        .context("no webhookUrl")?
        .to_owned();
    let start = url.find("/webhook/").context("a webhook URL")?;
    Ok(url[start..].to_owned())
}

/// How many of `ids` `run_get` does not find (8 readers at once).
async fn count_missing(runs: Arc<dyn RunStore>, ids: &[String]) -> anyhow::Result<u64> {
    let ids: Vec<RunId> = ids
        .iter()
        .map(|id| {
            id.parse::<RunId>()
                .map_err(|err| anyhow::anyhow!("runId {id:?}: {err}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let ids = Arc::new(ids);
    let readers = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for reader in 0..readers {
        let (runs, ids) = (runs.clone(), ids.clone());
        tasks.spawn(async move {
            let mut missing = 0u64;
            for id in ids.iter().skip(reader).step_by(readers) {
                if runs.run_get(*id).await?.is_none() {
                    missing += 1;
                }
            }
            Ok::<_, anyhow::Error>(missing)
        });
    }
    let mut missing = 0;
    while let Some(done) = tasks.join_next().await {
        missing += done??;
    }
    Ok(missing)
}
