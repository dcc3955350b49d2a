//! `fronta serve`: the HTTP server (webhooks, the REST API of `API.md` and the dashboard
//! page at `/`) and, unless
//! `--no-worker`, a worker in the same process running the automation executor (and the
//! built-in kinds), with the ticket event sink installed so ticket writes start their
//! automations in the same transaction.
//!
//! The admin token: `FRONTA_ADMIN_TOKEN` when set (only its hash is kept in memory);
//! otherwise one is generated on the first start, printed once on stdout, and only its
//! SHA-256 hash is written to a small file — `<database>.admin-token` next to a SQLite
//! database, `./fronta-admin-token` for Postgres, or `--admin-token-file`. Later starts
//! read the hash from that file. (A file rather than a settings table: the stores have
//! no settings table, and a file is easy to rotate — delete it and restart.)
//!
//! SIGINT/SIGTERM: the server stops accepting and finishes the requests in flight; the
//! worker stops claiming and gives its runs `--shutdown-grace`, then back to the queue.
//!
//! With a worker, the process also runs the scheduler of poll and schedule automations
//! (on Postgres only while it wins the leader election; see `crate::background`).
//!
//! Left out: TLS (put a proxy in front).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use fronta_engine::{Liveness, LivenessConfig, ProcessId, Worker, WorkerConfig};
use fronta_server::{App, Listener, Ports, RateLimit, ServerConfig};
use tokio_util::sync::CancellationToken;

use crate::connector_settings::{ConnectorArgs, Secret};
use crate::leadership::{LeadArgs, Leadership};
use crate::{DbArgs, Store, duration, kinds, open_store, wait_for_signal};

/// The prefix of generated admin tokens.
const ADMIN_TOKEN_PREFIX: &str = "fa_";

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Serve HTTP only; runs are executed by separate `fronta worker` processes.
    #[arg(long)]
    no_worker: bool,
    /// Runs executing at once in the in-process worker.
    #[arg(long, default_value_t = 4, help_heading = "Worker")]
    concurrency: usize,
    /// The lease of a claim (automation runs are durable and keep theirs).
    #[arg(long, default_value = "5m", value_parser = duration::parse, help_heading = "Worker")]
    lease: Duration,
    /// How often the worker looks for due runs besides wake-ups.
    #[arg(long, default_value = "500ms", value_parser = duration::parse, help_heading = "Worker")]
    poll: Duration,
    /// On SIGINT/SIGTERM, how long running handlers may take before they are stopped.
    #[arg(long, default_value = "10s", value_parser = duration::parse, help_heading = "Worker")]
    shutdown_grace: Duration,
    #[command(flatten)]
    batching: crate::BatchingArgs,
    /// The URL clients reach this server at, used in webhook URLs
    /// (default: the scheme and Host the client used).
    #[arg(long, env = "FRONTA_PUBLIC_URL")]
    public_url: Option<String>,
    /// Honour X-Forwarded-Proto / X-Forwarded-Host (only behind a proxy that sets them).
    #[arg(long)]
    trust_proxy_headers: bool,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = 1_048_576)]
    body_limit: usize,
    /// Webhook calls per webhook token: RATE/BURST (per second), or `off`. Default 50/100.
    #[arg(long, value_parser = parse_rate)]
    webhook_rate: Option<Limit>,
    /// Webhook calls per tenant: RATE/BURST, or `off`. Default 200/400.
    #[arg(long, value_parser = parse_rate)]
    tenant_webhook_rate: Option<Limit>,
    /// REST calls per tenant: RATE/BURST, or `off`. Default 50/100.
    #[arg(long, value_parser = parse_rate)]
    api_rate: Option<Limit>,
    /// Failed authentications per client address: RATE/BURST, or `off`. Past the burst
    /// the address gets 429 until the bucket refills. Default 0.5/20.
    #[arg(long, env = "FRONTA_AUTH_FAILURE_RATE", value_parser = parse_rate)]
    auth_failure_rate: Option<Limit>,
    /// The admin token (only its hash is kept in memory); unset: one is generated on the
    /// first start and its hash kept in --admin-token-file. Prefer the variable: a flag
    /// shows in `ps`.
    #[arg(long, env = "FRONTA_ADMIN_TOKEN", hide_env_values = true, value_name = "TOKEN", value_parser = crate::connector_settings::secret)]
    admin_token: Option<Secret>,
    /// Where the admin token's hash is kept when FRONTA_ADMIN_TOKEN is not set.
    #[arg(long)]
    admin_token_file: Option<PathBuf>,
    /// The shortest `ttlSec` a dashboard widget may have.
    #[arg(long, env = "FRONTA_WIDGET_MIN_TTL", default_value = "10s", value_parser = duration::parse, help_heading = "Dashboard widgets")]
    widget_min_ttl: Duration,
    /// The longest `ttlSec` a dashboard widget may have.
    #[arg(long, env = "FRONTA_WIDGET_MAX_TTL", default_value = "24h", value_parser = duration::parse, help_heading = "Dashboard widgets")]
    widget_max_ttl: Duration,
    /// The most dashboard widgets a tenant may have.
    #[arg(long, env = "FRONTA_WIDGET_MAX_PER_TENANT", default_value_t = fronta_automation::widget::DEFAULT_MAX_PER_TENANT, help_heading = "Dashboard widgets")]
    widget_max_per_tenant: usize,
    /// The largest data a widget keeps in its cache, in bytes of JSON.
    #[arg(long, env = "FRONTA_WIDGET_MAX_DATA_BYTES", default_value_t = fronta_automation::widget::DEFAULT_MAX_DATA_BYTES, help_heading = "Dashboard widgets")]
    widget_max_data_bytes: usize,
    /// A widget refresh's lease: a reader that died mid-call holds its widget this long.
    #[arg(long, env = "FRONTA_WIDGET_LEASE", default_value = "10m", value_parser = duration::parse, help_heading = "Dashboard widgets")]
    widget_lease: Duration,
    /// The `Retry-After` of a 503 (the database did not answer), in whole seconds.
    #[arg(long, env = "FRONTA_UNAVAILABLE_RETRY_AFTER", default_value = "5s", value_parser = duration::parse)]
    unavailable_retry_after: Duration,
    /// How long a webhook waits for the database (finding its automation, then the
    /// enqueue and its commit) before it answers 503.
    #[arg(long, env = "FRONTA_WEBHOOK_STORE_DEADLINE", default_value = "10s", value_parser = duration::parse)]
    webhook_store_deadline: Duration,
    /// The shortest time between two ticks of a schedule: a cron firing more often is
    /// refused on save.
    #[arg(long, env = "FRONTA_MIN_SCHEDULE_INTERVAL", default_value = "10s", value_parser = duration::parse)]
    min_schedule_interval: Duration,
    /// How long a dry run of an automation (the editor's Test, `POST
    /// /api/automations/test`) may take before it stops and answers what it did so far.
    #[arg(long, env = "FRONTA_TEST_TIME_LIMIT", default_value = "30s", value_parser = duration::parse)]
    test_time_limit: Duration,
    /// How often this process beats in the process registry and looks for dead
    /// processes whose runs it takes over (see `fronta_engine::liveness`).
    #[arg(long, env = "FRONTA_LIVENESS_BEAT", default_value = "1s", value_parser = duration::parse, help_heading = "Worker")]
    liveness_beat: Duration,
    /// A process whose last beat is older than this is dead and its runs are taken over
    /// (a process of this host whose pid is gone is dead at once). Longer than the beat.
    #[arg(long, env = "FRONTA_LIVENESS_TIMEOUT", default_value = "10s", value_parser = duration::parse, help_heading = "Worker")]
    liveness_timeout: Duration,
    #[command(flatten)]
    lead: LeadArgs,
    #[command(flatten)]
    outside: ConnectorArgs,
}

/// A rate limit from the command line: a bucket, or none.
#[derive(Debug, Clone, Copy)]
pub struct Limit(Option<RateLimit>);

fn parse_rate(text: &str) -> Result<Limit, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(Limit(None));
    }
    let (rate, burst) = text
        .split_once('/')
        .ok_or_else(|| format!("expected RATE/BURST (e.g. 50/100) or off, got {text:?}"))?;
    let per_second: f64 = rate
        .trim()
        .parse()
        .map_err(|_| format!("{rate:?} is not a number of requests per second"))?;
    let burst: u32 = burst
        .trim()
        .parse()
        .map_err(|_| format!("{burst:?} is not a whole number of requests"))?;
    if !(per_second.is_finite() && per_second > 0.0) || burst == 0 {
        return Err("the rate must be above 0 and the burst at least 1".into());
    }
    Ok(Limit(Some(RateLimit::new(per_second, burst))))
}

pub async fn run(db: &DbArgs, args: ServeArgs) -> anyhow::Result<()> {
    let name = format!("fronta-serve-{}", std::process::id());
    let opened = open_store(db, &name).await?;
    let admin_token_hash = admin_token_hash(&args, &opened)?;
    let defaults = ServerConfig::default();
    let limit = |given: Option<Limit>, default| given.map_or(default, |Limit(limit)| limit);
    let config = ServerConfig {
        admin_token_hash: Some(admin_token_hash),
        public_base_url: args.public_url.clone(),
        trust_proxy_headers: args.trust_proxy_headers,
        body_limit: args.body_limit,
        webhook_rate_per_token: limit(args.webhook_rate, defaults.webhook_rate_per_token),
        webhook_rate_per_tenant: limit(args.tenant_webhook_rate, defaults.webhook_rate_per_tenant),
        api_rate_per_tenant: limit(args.api_rate, defaults.api_rate_per_tenant),
        auth_failure_rate: limit(args.auth_failure_rate, defaults.auth_failure_rate),
        widgets: fronta_automation::widget::WidgetLimits {
            min_ttl: args.widget_min_ttl,
            max_ttl: args.widget_max_ttl,
            max_per_tenant: args.widget_max_per_tenant,
            max_data_bytes: args.widget_max_data_bytes,
            lease: args.widget_lease,
        },
        unavailable_retry_after: args.unavailable_retry_after,
        webhook_store_deadline: args.webhook_store_deadline,
        min_schedule_interval: args.min_schedule_interval,
        max_pause: args.outside.max_pause,
        test_time_limit: args.test_time_limit,
        retention: args.lead.retention(),
        ..defaults
    };
    tracing::info!(widgets = ?config.widgets, "dashboard widget limits");
    let worker_config = args.batching.apply(WorkerConfig {
        name: format!("serve-{}", std::process::id()),
        max_in_flight: args.concurrency,
        default_lease: args.lease,
        poll_interval: args.poll,
        shutdown_grace: args.shutdown_grace,
        // The process that holds the runs this worker claims (see the liveness below).
        holder: (!args.no_worker).then(ProcessId::fresh),
        ..WorkerConfig::default()
    });
    let holder = worker_config.holder;
    let (app, worker) = server_parts(&opened, config, worker_config, &args.outside)?;
    let worker = if args.no_worker { None } else { Some(worker) };
    // Registered before the worker claims anything; the first pass takes over the runs
    // of dead processes (a predecessor killed on this host: at once).
    let liveness = match holder {
        Some(id) => Some(
            Liveness::start(
                opened.runs(),
                id,
                LivenessConfig {
                    beat: args.liveness_beat,
                    timeout: args.liveness_timeout,
                },
            )
            .await
            .context("registering this process (liveness)")?,
        ),
        None => None,
    };
    // The API wakes this process's scheduler when it saves a timed automation.
    let nudge = std::sync::Arc::new(tokio::sync::Notify::new());
    if let Some(worker) = &worker {
        app.observe_worker(worker.metrics());
        app.wake_scheduler_with(nudge.clone());
        app.run_here(worker.local_runs());
    }
    if let Some(counters) = opened.counters() {
        app.observe_store(counters);
    }

    // Signals are heard from here on, before the address is printed.
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    let signalled = wait_for_signal();
    tokio::spawn(async move {
        signalled.await;
        tracing::info!("signal received: shutting down");
        on_signal.cancel();
    });
    let listener = Listener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let address = listener.local_addr()?;
    eprintln!(
        "fronta serve: listening on http://{address} ({}, {})",
        opened.describe(),
        if worker.is_some() {
            "with a worker"
        } else {
            "no worker"
        }
    );
    eprintln!("fronta serve: dashboard at http://{address}/ (sign in with a tenant token)");

    // The scheduler runs where runs are executed (not in `--no-worker` processes).
    let background = match &worker {
        Some(worker) => Some(Leadership::start(
            &opened,
            db.database.as_deref(),
            &name,
            worker,
            &args.lead,
            Some(nudge.clone()),
            shutdown.clone(),
        )?),
        None => None,
    };
    if let Some(background) = &background {
        app.observe_retention(background.pruned.clone());
    }
    let worker = worker.map(|worker| tokio::spawn(worker.run(shutdown.clone())));
    // Beats on through the shutdown grace (a crash during it is still taken over), and
    // leaves the registry once the worker gave its runs back.
    let liveness_stop = CancellationToken::new();
    let liveness = liveness.map(|liveness| tokio::spawn(liveness.run(liveness_stop.clone())));
    let served = fronta_server::serve(listener, app, shutdown.clone().cancelled_owned()).await;
    // A server that stopped on its own (an error) takes the worker down with it.
    shutdown.cancel();
    if let Some(background) = background {
        background.stop().await;
    }
    if let Some(worker) = worker {
        let report = worker.await.context("the worker task")??;
        eprintln!(
            "worker done: {} claimed ({} of them handed over at enqueue), {} completed, {} failed, {} released, {} timed out, {} stuck",
            report.claimed,
            report.handed_off,
            report.completed,
            report.failed,
            report.released,
            report.timed_out,
            report.stuck
        );
    }
    liveness_stop.cancel();
    if let Some(liveness) = liveness {
        liveness.await.context("the liveness task")?;
    }
    served.context("serving HTTP")?;
    eprintln!("fronta serve: stopped");
    Ok(())
}

/// The server's [`App`] on `store` and a worker (started or not by the caller) running
/// the automation executor and the built-in kinds, with the ticket event sink installed.
pub(crate) fn server_parts(
    store: &Store,
    config: ServerConfig,
    worker_config: WorkerConfig,
    outside: &ConnectorArgs,
) -> anyhow::Result<(App, Worker)> {
    let (runs, desk, automations) = store.ports();
    let settings = kinds::BuiltinSettings {
        sleep_lease: worker_config.default_lease,
        sleep_step: Duration::from_secs(1),
    };
    let outside = outside.setup()?;
    // A widget's refresh lease must outlive its call, or a second reader could call too.
    if config.widgets.lease <= outside.longest_call() {
        bail!(
            "FRONTA_WIDGET_LEASE ({:?}) must be longer than the longest HTTP call \
             (FRONTA_HTTP_CONNECT_TIMEOUT + FRONTA_HTTP_MAX_TIMEOUT = {:?})",
            config.widgets.lease,
            outside.longest_call()
        );
    }
    let (registry, _) =
        crate::runtime_registry(store, &settings, worker_config.default_lease, &outside)?;
    // The API enqueues through the worker's own dispatcher: a webhook or a manual run that
    // arrives while the worker waits idle is handed to it already claimed (one commit).
    // With `--no-worker` the worker never runs, its intake never opens, and every enqueue
    // is an ordinary one.
    let worker = Worker::new(runs.clone(), registry, worker_config)?;
    let dispatcher = worker.dispatcher().clone();
    let app = App::new(
        config,
        Ports {
            runs: runs.clone(),
            desk,
            access: store.access(),
            automations,
            secrets: store.secrets(),
            secret_cipher: outside.cipher.clone(),
            limits: store.limits(),
            mcp_servers: store.mcp_servers(),
            mail_servers: store.mail_servers(),
            hosts: std::sync::Arc::new(outside.address_policy()),
            widgets: store.widgets(),
            connectors: Some(crate::limited_connectors(store, &outside)?),
        },
        dispatcher,
    )
    .map_err(|problem| anyhow::anyhow!("server configuration: {problem}"))?;
    Ok((app, worker))
}

/// The hash of the admin token: from `FRONTA_ADMIN_TOKEN`, else from the token file,
/// else a new token (printed once) whose hash is written to the file.
fn admin_token_hash(args: &ServeArgs, store: &Store) -> anyhow::Result<String> {
    if let Some(token) = &args.admin_token
        && !token.expose().trim().is_empty()
    {
        return Ok(fronta_desk::token::hash(token.expose().trim()));
    }
    let path = args
        .admin_token_file
        .clone()
        .unwrap_or_else(|| default_token_file(store));
    if let Some(hash) = read_hash(&path)? {
        return Ok(hash);
    }
    let token = fronta_desk::token::generate(ADMIN_TOKEN_PREFIX);
    let hash = fronta_desk::token::hash(&token);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(&path) {
        Ok(mut file) => {
            writeln!(file, "{hash}")
                .with_context(|| format!("writing the admin token hash to {}", path.display()))?;
        }
        // Another process started at the same moment and wrote its own: use that one.
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            return read_hash(&path)?
                .with_context(|| format!("{} appeared but is empty", path.display()));
        }
        Err(err) => {
            return Err(err)
                .with_context(|| format!("creating the admin token file {}", path.display()));
        }
    }
    println!("admin token (shown once; only its hash is kept): {token}");
    eprintln!(
        "fronta serve: the admin token's hash is in {}; delete it and restart for a new token",
        path.display()
    );
    Ok(hash)
}

fn default_token_file(store: &Store) -> PathBuf {
    match store {
        Store::Sqlite(store) => {
            let mut path = store.config().path.clone().into_os_string();
            path.push(".admin-token");
            PathBuf::from(path)
        }
        Store::Postgres(_) => PathBuf::from("fronta-admin-token"),
    }
}

/// The hash in `path`, `None` when there is no such file.
fn read_hash(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let hash = text.trim().to_ascii_lowercase();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!(
                    "{} does not hold an admin token hash (64 hex digits); delete it to get a new token",
                    path.display()
                );
            }
            Ok(Some(hash))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("reading {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_as_rate_slash_burst_or_off() {
        let Limit(limit) = parse_rate("50/100").expect("parses");
        assert_eq!(limit, Some(RateLimit::new(50.0, 100)), "a bucket");
        let Limit(off) = parse_rate("off").expect("parses");
        assert_eq!(off, None, "no limit");
        assert!(parse_rate("50").is_err(), "no burst");
        assert!(parse_rate("0/10").is_err(), "a zero rate");
        assert!(parse_rate("5/0").is_err(), "a zero burst");
    }
}
