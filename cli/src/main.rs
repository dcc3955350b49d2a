//! The `fronta` binary: every command opens the database named by `--database`
//! (or `FRONTA_DATABASE_URL`; default `./fronta.db`) and runs migrations first.
//!
//! Commands: `migrate`, `enqueue`, `worker`, `serve`, `runs list|show|cancel|stats`, `demo`,
//! `bench`.
//! Errors are one line on stderr and a non-zero exit.

mod access;
mod api_client;
mod apply;
mod bench;
mod bench_automation;
mod bench_backlog;
mod bench_bulk;
mod bench_history;
mod bench_mixed;
mod bench_webhook;
mod connector_settings;
mod demo;
mod demo_engine;
mod duration;
mod kinds;
mod leadership;
mod secrets;
mod serve;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use fronta_engine::{
    Dispatcher, EnqueueRequest, Registry, RunFilter, RunStatus, RunStore, Worker, WorkerConfig,
    store::CancelReply,
};
use fronta_store_postgres::{PgConfig, PgStore};
use fronta_store_sqlite::{SqliteConfig, SqliteStore, Synchronous};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    name = "fronta",
    version,
    about = "A durable run engine and automation runtime for service desks"
)]
struct Cli {
    #[command(flatten)]
    db: DbArgs,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone)]
struct DbArgs {
    /// The database: a SQLite file path (or sqlite://PATH), or postgres://… Default ./fronta.db
    /// (the bench uses a fresh temporary one unless this is given).
    #[arg(
        long,
        global = true,
        env = "FRONTA_DATABASE_URL",
        help_heading = "Database"
    )]
    database: Option<String>,
    /// SQLite durability: full (every commit on disk before it is acknowledged) or normal
    /// (faster; a power loss loses the commits since the last WAL checkpoint).
    #[arg(long, global = true, default_value = "full", value_parser = parse_sync, help_heading = "Database")]
    synchronous: Synchronous,
    /// Postgres: how long a call waits for a pooled connection (connecting included)
    /// before it fails as unavailable (a webhook then answers 503).
    #[arg(long, global = true, env = "FRONTA_PG_ACQUIRE_TIMEOUT", default_value = "5s", value_parser = duration::parse, help_heading = "Database")]
    pg_acquire_timeout: Duration,
    /// Postgres: connections in this process's pool (the listener and the leader
    /// election have one more each).
    #[arg(
        long,
        global = true,
        env = "FRONTA_PG_MAX_CONNECTIONS",
        default_value_t = 10,
        help_heading = "Database"
    )]
    pg_max_connections: u32,
    /// Postgres: the least time between two tidies of the list of tenants with pending
    /// runs by this process (a round that meets many empty tenants tidies at once).
    #[arg(long, global = true, env = "FRONTA_PG_TENANT_TIDY", default_value = "1s", value_parser = duration::parse, help_heading = "Database")]
    pg_tenant_tidy: Duration,
    /// Postgres: enqueues of this process written at once; calls arriving while that
    /// many are being written wait and then share one statement and one commit (0: every
    /// enqueue is its own transaction).
    #[arg(
        long,
        global = true,
        env = "FRONTA_PG_ENQUEUE_WRITERS",
        default_value_t = 1,
        help_heading = "Database"
    )]
    pg_enqueue_writers: usize,
    /// Postgres: runs in one shared enqueue commit at most; a call of this many or more
    /// is written alone.
    #[arg(
        long,
        global = true,
        env = "FRONTA_PG_ENQUEUE_GROUP_MAX",
        default_value_t = 1000,
        help_heading = "Database"
    )]
    pg_enqueue_group_max: usize,
    /// Postgres: a worker's claim round carries its finished runs in one transaction
    /// (one commit for both) instead of leaving them to its completer. Off: measured
    /// slower with the local queue (ARCHITECTURE.md, "The worker's local queue").
    #[arg(
        long,
        global = true,
        env = "FRONTA_PG_FINISH_RIDES_CLAIM",
        default_value_t = false,
        action = clap::ArgAction::Set,
        help_heading = "Database"
    )]
    pg_finish_rides_claim: bool,
}

fn parse_sync(text: &str) -> Result<Synchronous, String> {
    text.parse()
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process: its size costs nothing"
)]
enum Command {
    /// Create or upgrade the database schema.
    Migrate,
    /// Enqueue runs of a kind.
    Enqueue(EnqueueArgs),
    /// Run a worker: claim and execute runs until Ctrl-C (or until idle).
    Worker(Box<WorkerArgs>),
    /// Serve webhooks and the REST API, with a worker in the same process (unless --no-worker).
    Serve(Box<serve::ServeArgs>),
    /// Look at and act on runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// The operator's named admin tokens on the database: new, list, revoke.
    #[command(subcommand)]
    AdminToken(access::AdminTokenCommand),
    /// Work on the stored secrets (on the database).
    #[command(subcommand)]
    Secrets(secrets::SecretsCommand),
    /// Send a whole setup (groups, ticket types, automations) to a running server.
    Apply(apply::ApplyArgs),
    /// Show the engine's promises on a fresh database, check by check.
    Demo(demo::DemoArgs),
    /// Measure enqueue and drain throughput and enqueue→start latency on a fresh database.
    Bench(bench::BenchArgs),
}

#[derive(Args, Debug)]
struct EnqueueArgs {
    /// The kind (built in: noop, sleep, probe; with FRONTA_TEST_KINDS=1 also steps, abort).
    kind: String,
    /// The payload, as JSON.
    #[arg(long, default_value = "{}")]
    payload: String,
    /// How many runs (all validated before any is written).
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Start no earlier than this long from now: seconds (`90`, `1.5`) or a duration
    /// (`500ms`, `5m`, `2h`, `1d`).
    #[arg(long, value_parser = duration::parse)]
    delay: Option<Duration>,
    /// Retries allowed after the first attempt.
    #[arg(long, default_value_t = 3, allow_negative_numbers = true)]
    max_retries: i64,
    /// At most one non-terminal run per key.
    #[arg(long)]
    unique_key: Option<String>,
    /// The tenant the runs belong to.
    #[arg(long)]
    tenant: Option<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i16,
}

/// The worker's two batching waits and its hand-off: the same flags on `worker`, `serve`
/// and `bench`.
#[derive(Args, Debug, Clone)]
pub(crate) struct BatchingArgs {
    /// Under load, how long finished runs may wait to be written together with more
    /// (a lone finish on a quiet worker is written at once). 0 never waits.
    #[arg(long, env = "FRONTA_COMPLETER_LINGER", default_value = "5ms", value_parser = duration::parse, help_heading = "Batching")]
    completer_linger: Duration,
    /// After a full claim round, how long the next may wait for half the slots to free
    /// (one round then claims many runs). 0 claims as soon as one slot frees.
    #[arg(long, env = "FRONTA_CLAIM_GATHER", default_value = "2ms", value_parser = duration::parse, help_heading = "Batching")]
    claim_gather: Duration,
    /// While the worker waits idle, start this process's own enqueues (webhooks, manual
    /// runs) by hand-off: inserted already claimed, one commit instead of two. false:
    /// every run starts by a claim.
    #[arg(long, env = "FRONTA_HAND_OFF", default_value_t = true, action = clap::ArgAction::Set, help_heading = "Batching")]
    hand_off: bool,
    /// The most runs a worker claims ahead of its free slots into its local queue, which
    /// holds about what the slots finish in a claim round or two (measured) and nothing
    /// when handlers are slow. 0: no local queue; each round claims the free slots only.
    #[arg(long, env = "FRONTA_PREFETCH_MAX", default_value_t = fronta_engine::prefetch::DEFAULT_PREFETCH_MAX, help_heading = "Batching")]
    prefetch_max: usize,
}

impl Default for BatchingArgs {
    fn default() -> Self {
        Self {
            completer_linger: fronta_engine::worker::DEFAULT_COMPLETER_LINGER,
            claim_gather: fronta_engine::worker::DEFAULT_CLAIM_GATHER,
            hand_off: true,
            prefetch_max: fronta_engine::prefetch::DEFAULT_PREFETCH_MAX,
        }
    }
}

impl BatchingArgs {
    /// `config` with these settings.
    pub(crate) fn apply(&self, config: WorkerConfig) -> WorkerConfig {
        WorkerConfig {
            completer_linger: self.completer_linger,
            claim_gather: self.claim_gather,
            hand_off: self.hand_off,
            prefetch_max: self.prefetch_max,
            ..config
        }
    }

    /// The same settings as flags of a `fronta worker` child process.
    pub(crate) fn as_flags(&self) -> [String; 8] {
        [
            "--completer-linger".into(),
            duration::format(self.completer_linger),
            "--claim-gather".into(),
            duration::format(self.claim_gather),
            "--hand-off".into(),
            self.hand_off.to_string(),
            "--prefetch-max".into(),
            self.prefetch_max.to_string(),
        ]
    }
}

#[derive(Args, Debug, Clone)]
pub(crate) struct WorkerArgs {
    /// Runs executing at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Exit 0 once nothing is queued, running or due.
    #[arg(long)]
    until_idle: bool,
    /// The lease of a claim (and of the durable `sleep` kind): 500ms, 30s, 5m…
    #[arg(long, default_value = "5m", value_parser = duration::parse)]
    lease: Duration,
    /// How often to look for due runs besides wake-ups.
    #[arg(long, default_value = "500ms", value_parser = duration::parse)]
    poll: Duration,
    /// A run reclaimed more often than this fails as a crash loop.
    #[arg(long, default_value_t = 5)]
    max_reclaims: u32,
    /// On Ctrl-C, how long running handlers may take before they are stopped.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    shutdown_grace: Duration,
    #[command(flatten)]
    batching: BatchingArgs,
    #[command(flatten)]
    lead: leadership::LeadArgs,
    /// One step of the built-in `sleep` kind (tests shorten it).
    #[arg(long, default_value = "1s", value_parser = duration::parse, hide = true)]
    sleep_step: Duration,
    #[command(flatten)]
    outside: connector_settings::ConnectorArgs,
}

#[derive(Subcommand, Debug)]
enum RunsCommand {
    /// Newest first, filtered as `GET /api/runs` filters (every filter combines).
    List(Box<ListArgs>),
    /// One run with every field.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Two-phase cancel: a pending run at once, a running one through its worker.
    Cancel { id: String },
    /// Start a run again: a failed or suppressed one from its checkpoint; with
    /// --from-step or --from-start any finished automation run, as a new run on its own
    /// version (the steps before --from-step reused, not run again).
    Retry {
        id: String,
        /// The step to start again from.
        #[arg(long, conflicts_with = "from_start")]
        from_step: Option<String>,
        /// Start again from the start, with the run's input.
        #[arg(long)]
        from_start: bool,
    },
    /// Counts per status, and total attempts, reclaims and parks.
    Stats {
        #[arg(long)]
        json: bool,
    },
}

/// `fronta runs list`: the search of `GET /api/runs` (`fronta_automation::run_search`).
#[derive(clap::Args, Debug)]
struct ListArgs {
    /// One status or several, comma separated (failed,suppressed).
    #[arg(long)]
    status: Option<String>,
    /// Only runs of this kind (automation, sleep, …).
    #[arg(long)]
    kind: Option<String>,
    /// Only this tenant's runs (its id).
    #[arg(long)]
    tenant: Option<String>,
    /// Only this automation's runs (its id).
    #[arg(long)]
    automation: Option<String>,
    /// Only runs pinned to this version of their automation.
    #[arg(long)]
    version: Option<String>,
    /// webhook, event, poll, schedule, manual or api.
    #[arg(long)]
    trigger: Option<String>,
    /// Runs that touched this ticket: TK-12, 12 or its id (needs --tenant).
    #[arg(long, requires = "tenant")]
    ticket: Option<String>,
    /// Created at or after (RFC 3339 instant or a date).
    #[arg(long)]
    since: Option<String>,
    /// Created before (RFC 3339 instant or a date).
    #[arg(long)]
    until: Option<String>,
    /// Text in the last error or a step's message (case folded).
    #[arg(long)]
    text: Option<String>,
    /// Runs shown at most.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Read at most this many runs to fill the page.
    #[arg(long, default_value_t = 100_000)]
    scan_max: usize,
    /// Every field of every run, as JSON.
    #[arg(long)]
    json: bool,
}

/// Logs go to stderr; `RUST_LOG` overrides the default level (`default`).
fn init_logs(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The database a command works on.
#[derive(Clone)]
pub(crate) enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl Store {
    pub(crate) fn runs(&self) -> Arc<dyn RunStore> {
        match self {
            Store::Sqlite(store) => Arc::new(store.clone()),
            Store::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// The store's own counters for `GET /metrics`: group enqueue on Postgres.
    pub(crate) fn counters(&self) -> Option<fronta_server::metrics::StoreCounters> {
        use fronta_server::metrics::StoreCounter;
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres(store) => {
                let store = store.clone();
                Some(fronta_server::metrics::StoreCounters::new(move || {
                    let stats = store.enqueue_group_stats();
                    vec![
                        StoreCounter {
                            name: "fronta_pg_enqueue_groups_total",
                            help: "Enqueue commits written by group enqueue (a lone call is a group of one).",
                            value: stats.groups,
                        },
                        StoreCounter {
                            name: "fronta_pg_enqueue_grouped_calls_total",
                            help: "Enqueue calls answered through group enqueue.",
                            value: stats.calls,
                        },
                        StoreCounter {
                            name: "fronta_pg_enqueue_groups_split_total",
                            help: "Groups that failed and were written again call by call.",
                            value: stats.split,
                        },
                    ]
                }))
            }
        }
    }

    /// The three ports on this database.
    pub(crate) fn ports(
        &self,
    ) -> (
        Arc<dyn RunStore>,
        Arc<dyn fronta_desk::DeskStore>,
        Arc<dyn fronta_automation::store::AutomationStore>,
    ) {
        match self {
            Store::Sqlite(store) => (
                Arc::new(store.clone()),
                Arc::new(store.clone()),
                Arc::new(store.clone()),
            ),
            Store::Postgres(store) => (
                Arc::new(store.clone()),
                Arc::new(store.clone()),
                Arc::new(store.clone()),
            ),
        }
    }

    /// The MCP servers port on this database.
    pub(crate) fn mcp_servers(&self) -> Arc<dyn fronta_automation::mcp::McpServerStore> {
        match self {
            Store::Sqlite(store) => Arc::new(store.clone()),
            Store::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// The mail servers port on this database.
    pub(crate) fn mail_servers(&self) -> Arc<dyn fronta_automation::mail::MailServerStore> {
        match self {
            Store::Sqlite(store) => Arc::new(store.clone()),
            Store::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// Tokens, admin tokens and the audit log on this database.
    pub(crate) fn access(&self) -> Arc<dyn fronta_desk::access::AccessStore> {
        match self {
            Store::Sqlite(store) => Arc::new(store.clone()),
            Store::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// The secrets port on this database.
    pub(crate) fn secrets(&self) -> Arc<dyn fronta_automation::secrets::SecretStore> {
        match self {
            Store::Sqlite(store) => Arc::new(store.clone()),
            Store::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// The dashboard widgets port on this database.
    pub(crate) fn widgets(&self) -> Arc<dyn fronta_automation::widget::WidgetStore> {
        match self {
            Store::Sqlite(store) => Arc::new(store.clone()),
            Store::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// The cursors of poll automations on this database.
    pub(crate) fn poll_cursors(&self) -> Arc<dyn fronta_automation::poll::PollCursors> {
        match self {
            Store::Sqlite(store) => Arc::new(store.clone()),
            Store::Postgres(store) => Arc::new(store.clone()),
        }
    }

    pub(crate) fn limits(&self) -> Arc<dyn fronta_automation::service_limits::ServiceLimits> {
        match self {
            Store::Sqlite(store) => Arc::new(store.clone()),
            Store::Postgres(store) => Arc::new(store.clone()),
        }
    }

    pub(crate) fn set_ticket_event_sink(&self, sink: fronta_automation::store::TicketEventSink) {
        match self {
            Store::Sqlite(store) => store.set_ticket_event_sink(sink),
            Store::Postgres(store) => store.set_ticket_event_sink(sink),
        }
    }

    fn describe(&self) -> String {
        match self {
            Store::Sqlite(store) => format!("SQLite {}", store.config().path.display()),
            Store::Postgres(_) => "Postgres".to_string(),
        }
    }
}

pub(crate) fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Open the store named by `--database` (migrations run on open). `name` is the
/// connection's `application_name` on Postgres.
pub(crate) async fn open_store(db: &DbArgs, name: &str) -> anyhow::Result<Store> {
    let url = db.database.as_deref().unwrap_or("fronta.db");
    if is_postgres(url) {
        let mut config = PgConfig::new(with_application_name(url, name));
        if db.pg_acquire_timeout.is_zero() {
            bail!("--pg-acquire-timeout (FRONTA_PG_ACQUIRE_TIMEOUT) must be above 0");
        }
        config.acquire_timeout = db.pg_acquire_timeout;
        if db.pg_max_connections == 0 {
            bail!("--pg-max-connections (FRONTA_PG_MAX_CONNECTIONS) must be at least 1");
        }
        config.max_connections = db.pg_max_connections;
        config.tenant_tidy_every = db.pg_tenant_tidy;
        config.finish_rides_claim = db.pg_finish_rides_claim;
        if db.pg_enqueue_group_max == 0 {
            bail!("--pg-enqueue-group-max (FRONTA_PG_ENQUEUE_GROUP_MAX) must be at least 1");
        }
        config.enqueue_groups = fronta_store_postgres::enqueue_group::GroupConfig {
            writers: db.pg_enqueue_writers,
            max_runs: db.pg_enqueue_group_max,
        };
        let store = PgStore::connect(config)
            .await
            .map_err(|err| anyhow::anyhow!("connecting to Postgres: {err}"))?;
        return Ok(Store::Postgres(store));
    }
    let path = sqlite_path(url)?;
    let mut config = SqliteConfig::new(path);
    config.synchronous = db.synchronous;
    let store = SqliteStore::open(config).with_context(|| format!("opening database {url}"))?;
    Ok(Store::Sqlite(store))
}

/// `url` with `application_name=name` unless it names one already: an operator (and the
/// tests) can tell each process's connections apart in `pg_stat_activity`.
pub(crate) fn with_application_name(url: &str, name: &str) -> String {
    if url.contains("application_name=") {
        return url.to_owned();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}application_name={name}")
}

fn sqlite_path(url: &str) -> anyhow::Result<PathBuf> {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    if path.is_empty() {
        bail!("--database is empty");
    }
    Ok(PathBuf::from(path))
}

/// What every process that runs work registers: the built-in kinds and the automation
/// executor with the connectors and secrets of `outside`; the ticket event sink is
/// installed on `store`, so ticket writes made here (by automation steps or people) start
/// the automations listening to them.
pub(crate) fn runtime_registry(
    store: &Store,
    settings: &kinds::BuiltinSettings,
    lease: Duration,
    outside: &connector_settings::ConnectorSetup,
) -> anyhow::Result<(Arc<Registry>, Dispatcher)> {
    let (runs, desk, automations) = store.ports();
    let mut registry = Registry::new();
    kinds::register(&mut registry, settings)?;
    let vault = fronta_automation::secrets::SecretVault {
        store: store.secrets(),
        cipher: outside.cipher.clone(),
    };
    let runtime = Arc::new(fronta_automation::executor::Runtime {
        desk,
        automations,
        clock: Arc::new(fronta_engine::SystemClock),
        connectors: Some(limited_connectors(store, outside)?),
        secrets: Some(vault),
        storage_wait: outside.storage_wait,
        cursors: Some(store.poll_cursors()),
        poll: outside.poll,
        max_pause: outside.max_pause,
    });
    fronta_automation::executor::register(&mut registry, runtime, lease)?;
    fronta_automation::bulk::register(&mut registry, runs.clone(), lease, outside.bulk_batch)?;
    let registry = Arc::new(registry);
    let dispatcher = Dispatcher::from_registry(runs, &registry);
    store.set_ticket_event_sink(fronta_automation::executor::event_sink(dispatcher.clone()));
    Ok((registry, dispatcher))
}

/// The connectors of this process behind the per-(tenant, service) cap and breaker:
/// every connector call, a step's or a dashboard widget's, goes through them.
pub(crate) fn limited_connectors(
    store: &Store,
    outside: &connector_settings::ConnectorSetup,
) -> anyhow::Result<Arc<dyn fronta_automation::connector::Connector>> {
    let vault = fronta_automation::secrets::SecretVault {
        store: store.secrets(),
        cipher: outside.cipher.clone(),
    };
    Ok(Arc::new(
        fronta_automation::service_limits::LimitedConnector::new(
            outside.connectors(store.mcp_servers(), store.mail_servers(), vault)?,
            store.limits(),
            outside.limits,
            Arc::new(fronta_engine::SystemClock),
        ),
    ))
}

/// The built-in kinds with the settings of a worker that was given no flags: what
/// `enqueue` validates against.
fn default_registry() -> anyhow::Result<Registry> {
    let mut registry = Registry::new();
    kinds::register(
        &mut registry,
        &kinds::BuiltinSettings {
            sleep_lease: Duration::from_secs(300),
            sleep_step: Duration::from_secs(1),
        },
    )?;
    Ok(registry)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The demo and the bench print their own report; their logs stay at warnings.
    let default_level = match cli.command {
        Command::Demo(_) | Command::Bench(_) => "warn",
        _ => "info",
    };
    init_logs(cli.log_format, default_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    };
    // A stuck handler (one blocking its thread past its timeout, counted by the worker)
    // would hold a plain drop of the runtime forever: the process waits this long at
    // most, then exits leaving it behind.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_TIMEOUT);
    code
}

/// How long the process waits at exit for tasks still running (a stuck handler's
/// thread), after everything it owns has stopped.
const RUNTIME_SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Migrate => {
            let store = open_store(&cli.db, "fronta-migrate").await?;
            println!("database ({}) is up to date", store.describe());
            Ok(())
        }
        Command::Enqueue(args) => enqueue(&cli.db, args).await,
        Command::Worker(args) => worker(&cli.db, *args).await,
        Command::Serve(args) => serve::run(&cli.db, *args).await,
        Command::Runs(command) => match runs_scope(&command) {
            Some(scope) => fronta_engine::audit::scoped(scope, runs(&cli.db, command)).await,
            None => runs(&cli.db, command).await,
        },
        Command::AdminToken(command) => access::admin_token(&cli.db, command).await,
        Command::Secrets(command) => secrets::run(&cli.db, command).await,
        Command::Bench(args) => bench::run(&cli.db, args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Apply(args) => apply::run(args).await,
    }
}

async fn enqueue(db: &DbArgs, args: EnqueueArgs) -> anyhow::Result<()> {
    let payload: serde_json::Value = serde_json::from_str(&args.payload)
        .map_err(|err| anyhow::anyhow!("--payload is not valid JSON: {err}"))?;
    if args.count == 0 {
        bail!("--count must be at least 1");
    }
    let store = open_store(db, "fronta-enqueue").await?.runs();
    let registry = default_registry()?;
    let dispatcher = Dispatcher::from_registry(store, &registry);
    let request = EnqueueRequest {
        kind: args.kind,
        payload,
        max_retries: args.max_retries,
        tenant: args.tenant,
        trigger: fronta_engine::Trigger::Manual,
        unique_key: args.unique_key,
        priority: args.priority,
        delay: args.delay,
        run_at: None,
    };
    // Validate once up front: a bad request writes nothing.
    dispatcher.prepare(request.clone())?;
    const CHUNK: u64 = 10_000;
    let mut written = 0u64;
    let mut last: Option<fronta_engine::Enqueued> = None;
    while written < args.count {
        let n = CHUNK.min(args.count - written);
        let answers = dispatcher
            .enqueue_many((0..n).map(|_| request.clone()).collect())
            .await?;
        last = answers.last().copied();
        written += n;
        if args.count > CHUNK {
            eprintln!("enqueued {written}/{}", args.count);
        }
    }
    match (args.count, last) {
        (1, Some(fronta_engine::Enqueued::Inserted(id))) => println!("{id}"),
        (1, Some(fronta_engine::Enqueued::Existing(id))) => {
            println!("{id}");
            eprintln!("a run with this unique key is already pending or running: {id}");
        }
        _ => println!("enqueued {written} runs"),
    }
    Ok(())
}

async fn worker(db: &DbArgs, args: WorkerArgs) -> anyhow::Result<()> {
    let name = format!("fronta-worker-{}", std::process::id());
    let opened = open_store(db, &name).await?;
    let store = opened.runs();
    let settings = kinds::BuiltinSettings {
        sleep_lease: args.lease,
        sleep_step: args.sleep_step,
    };
    let outside = args.outside.setup()?;
    let (registry, _) = runtime_registry(&opened, &settings, args.lease, &outside)?;
    let config = args.batching.apply(WorkerConfig {
        name: format!("worker-{}", std::process::id()),
        max_in_flight: args.concurrency,
        default_lease: args.lease,
        poll_interval: args.poll,
        max_reclaims: args.max_reclaims,
        shutdown_grace: args.shutdown_grace,
        until_idle: args.until_idle,
        ..WorkerConfig::default()
    });
    let worker = Worker::new(store, registry, config)?;
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    let signalled = wait_for_signal();
    tokio::spawn(async move {
        signalled.await;
        tracing::info!("signal received: shutting down");
        on_signal.cancel();
    });
    // On Postgres, one process per database leads and schedules.
    let background = leadership::Leadership::start(
        &opened,
        db.database.as_deref(),
        &name,
        &worker,
        &args.lead,
        None,
        shutdown.clone(),
    )?;
    let report = worker.run(shutdown.clone()).await?;
    shutdown.cancel();
    background.stop().await;
    // The bench reads the first number of this line: keep `claimed` first.
    eprintln!(
        "worker done: {} claimed, {} completed, {} failed, {} retried, {} cancelled, {} reclaimed, {} timed out, {} stuck",
        report.claimed,
        report.completed,
        report.failed,
        report.retried,
        report.cancelled,
        report.reclaimed,
        report.timed_out,
        report.stuck
    );
    Ok(())
}

/// SIGINT or SIGTERM. The handlers are registered when this is called, not when the
/// future is first polled: a signal that arrives in between (a test or a supervisor that
/// stops the process right after it said it is up) is still seen, instead of ending the
/// process by the signal's default action.
fn wait_for_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let interrupt = signal(SignalKind::interrupt());
        async move {
            match (term, interrupt) {
                (Ok(mut term), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                (Ok(mut term), Err(_)) => {
                    let _ = term.recv().await;
                }
                (Err(_), Ok(mut interrupt)) => {
                    let _ = interrupt.recv().await;
                }
                (Err(_), Err(_)) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn parse_id(text: &str) -> anyhow::Result<fronta_engine::RunId> {
    text.parse().map_err(|err: String| anyhow::anyhow!(err))
}

pub(crate) fn when(at: Option<chrono::DateTime<chrono::Utc>>) -> String {
    at.map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| "-".into())
}

/// The audit scope of a `fronta runs` command that changes a run (cancel, retry).
fn runs_scope(command: &RunsCommand) -> Option<std::sync::Arc<fronta_engine::audit::Scope>> {
    match command {
        RunsCommand::Cancel { id } => Some(access::cli_scope(
            "runs cancel",
            "run",
            Some(id.clone()),
            "Cancel a run (two-phase)",
        )),
        RunsCommand::Retry { id, .. } => Some(access::cli_scope(
            "runs retry",
            "run",
            Some(id.clone()),
            "Retry a run",
        )),
        _ => None,
    }
}

/// Say the run's tenant to the current audit scope (a CLI command on a run).
fn audit_tenant_of(run: &fronta_engine::Run) {
    if let (Some(scope), Ok(tenant)) = (
        fronta_engine::audit::current(),
        uuid::Uuid::parse_str(&run.tenant),
    ) {
        scope.set_tenant(tenant);
    }
}

async fn runs(db: &DbArgs, command: RunsCommand) -> anyhow::Result<()> {
    let opened = open_store(db, "fronta-runs").await?;
    let store = opened.runs();
    match command {
        RunsCommand::List(args) => {
            let ListArgs {
                status,
                kind,
                tenant,
                automation,
                version,
                trigger,
                ticket,
                since,
                until,
                text,
                limit,
                scan_max,
                json,
            } = *args;
            use fronta_automation::run_search::{self, RunSearch, SearchText};
            let mut search = RunSearch::parse(&SearchText {
                status: status.as_deref(),
                automation: automation.as_deref(),
                version: version.as_deref(),
                trigger: trigger.as_deref(),
                from: since.as_deref(),
                to: until.as_deref(),
                q: text.as_deref(),
            })
            .map_err(|err| anyhow::anyhow!(err))?;
            if let (Some(ticket), Some(tenant)) = (&ticket, &tenant) {
                let tenant: fronta_desk::TenantId = tenant
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--tenant must be a tenant id, got {tenant:?}"))?;
                let (_, desk, _) = opened.ports();
                let found = fronta_desk::store::find_ticket(desk.as_ref(), tenant, ticket)
                    .await
                    .map_err(|err| anyhow::anyhow!("--ticket {ticket}: {err}"))?;
                search.ticket = Some(found.id);
            }
            if limit == 0 {
                bail!("--limit must be at least 1");
            }
            let found = run_search::search(
                store.as_ref(),
                tenant,
                kind,
                &search,
                None,
                limit.min(RunFilter::MAX_PAGE),
                scan_max.max(1),
            )
            .await?;
            if found.next.is_some() && found.runs.len() < limit {
                eprintln!(
                    "note: read {scan_max} runs (--scan-max) and found {} matching; older runs were not read",
                    found.runs.len()
                );
            }
            let runs = found.runs;
            if json {
                println!("{}", serde_json::to_string_pretty(&runs)?);
            } else {
                println!(
                    "{:<36}  {:<10}  {:<10}  {:>8}  {:>8}  {:>5}  created",
                    "id", "kind", "status", "attempts", "reclaims", "parks"
                );
                for run in &runs {
                    println!(
                        "{:<36}  {:<10}  {:<10}  {:>8}  {:>8}  {:>5}  {}",
                        run.id,
                        run.kind,
                        run.status,
                        run.attempts,
                        run.reclaims,
                        run.parks,
                        when(Some(run.created_at))
                    );
                }
            }
        }
        RunsCommand::Show { id, json } => {
            let id = parse_id(&id)?;
            let Some(run) = store.run_get(id).await? else {
                bail!("no run with id {id}");
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&run)?);
            } else {
                println!("id:               {}", run.id);
                println!("kind:             {}", run.kind);
                println!("tenant:           {}", run.tenant);
                println!("status:           {}", run.status);
                println!("trigger:          {}", run.trigger.as_str());
                println!("payload:          {}", run.payload);
                println!(
                    "attempts:         {} of {} retries",
                    run.attempts, run.max_retries
                );
                println!("reclaims:         {}", run.reclaims);
                println!("parks:            {}", run.parks);
                println!("run at:           {}", when(Some(run.run_at)));
                println!("created:          {}", when(Some(run.created_at)));
                println!("started:          {}", when(run.started_at));
                println!("finished:         {}", when(run.finished_at()));
                println!("locked until:     {}", when(run.locked_until));
                println!("cancel requested: {}", run.cancel_requested);
                println!(
                    "checkpoint:       {}",
                    run.state
                        .as_ref()
                        .map_or("-".into(), |state| String::from_utf8_lossy(state)
                            .into_owned())
                );
                println!(
                    "last error:       {}",
                    run.last_error.as_deref().unwrap_or("-")
                );
                println!(
                    "result:           {}",
                    run.result.as_ref().map_or("-".into(), ToString::to_string)
                );
            }
        }
        RunsCommand::Retry {
            id,
            from_step,
            from_start,
        } => {
            let id = parse_id(&id)?;
            let Some(run) = store.run_get(id).await? else {
                bail!("no run with id {id}");
            };
            audit_tenant_of(&run);
            if from_step.is_none() && !from_start {
                match store.run_retry(id).await {
                    Ok(fronta_engine::RetryReply::Requeued) => {
                        println!("{id} is queued again, from its checkpoint")
                    }
                    Ok(fronta_engine::RetryReply::NotFailed(status)) => bail!(
                        "{id} is {status}: only a failed or suppressed run is retried from its \
                         checkpoint (--from-step or --from-start start any finished run again)"
                    ),
                    Err(err) => return Err(err.into()),
                }
                return Ok(());
            }
            let payload: fronta_automation::executor::RunPayload =
                serde_json::from_value(run.payload.clone()).map_err(|_| {
                    anyhow::anyhow!("{id} is not an automation run: it has no steps")
                })?;
            let (_, _, automations) = opened.ports();
            let version = automations
                .automation_version(
                    payload.tenant,
                    payload.automation_id,
                    payload.automation_version,
                )
                .await
                .map_err(|err| {
                    anyhow::anyhow!(
                        "version {} of its automation: {err}",
                        payload.automation_version
                    )
                })?;
            let request = fronta_automation::restart::restart_request(
                &run,
                payload,
                &version.definition.steps,
                from_step.as_deref(),
            )
            .map_err(|refused| anyhow::anyhow!("{id}: {refused}"))?;
            let dispatcher = Dispatcher::new(
                store.clone(),
                [fronta_automation::executor::AUTOMATION_KIND],
            );
            let new = dispatcher.enqueue(request).await?.id();
            match &from_step {
                Some(step) => println!("{new}: {id} started again from step {step:?}"),
                None => println!("{new}: {id} started again from its start"),
            }
        }
        RunsCommand::Cancel { id } => {
            let id = parse_id(&id)?;
            if let Some(run) = store.run_get(id).await? {
                audit_tenant_of(&run);
            }
            match store.run_request_cancel(id).await {
                Ok(CancelReply::Cancelled) => println!("cancelled {id}"),
                Ok(CancelReply::Requested) => {
                    println!("cancel requested for {id}: its worker will stop it")
                }
                Ok(CancelReply::AlreadyFinished(status)) => {
                    println!("{id} is already {status}: nothing to cancel")
                }
                Err(fronta_engine::StoreError::NotFound) => bail!("no run with id {id}"),
                Err(err) => return Err(err.into()),
            }
        }
        RunsCommand::Stats { json } => {
            let stats = store.run_stats().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                for status in RunStatus::ALL {
                    println!("{:<10} {}", status.as_str(), stats.count(status));
                }
                println!("{:<10} {}", "attempts", stats.attempts);
                println!("{:<10} {}", "reclaims", stats.reclaims);
                println!("{:<10} {}", "parks", stats.parks);
            }
        }
    }
    Ok(())
}
