//! Every fronta port on Postgres, for several processes (or machines) sharing the work.
//!
//! - Claims take due runs with `FOR UPDATE SKIP LOCKED`, fair between tenants, walking
//!   the short `run_tenants` list and one index descent per tenant — never the queue
//!   ([`runs::CLAIM_FIRSTS`]). A round is usually one autocommitted statement: one round
//!   trip and one commit.
//! - Leases and due times are judged by the database's `now()`, one clock for every
//!   process; an injected [`Clock`] (tests) replaces it in every statement.
//! - Batched writes: enqueues, heartbeats and finishes are one statement per batch.
//! - Wake-ups: enqueues (and finishes that put runs back) `NOTIFY fronta_runs` in their
//!   transaction; a [`listener`] task hears other processes' notifications, and this
//!   process's own writes wake [`RunStore::enqueue_signal`] directly after commit.
//! - Migrations are embedded ([`schema`]) and run on connect under an advisory lock.
//! - [`AppTx`] enqueues runs inside the application's own transaction, on its own pool;
//!   [`PgTx`] does it on a connection of this store's pool.
//! - The desk port ([`desk`]: tenants, groups, tickets, incidents) and the automation
//!   port ([`automations`]: saved automations, webhook tokens, the loop guard) make each
//!   write one transaction; row locks (and, for the guard, an advisory lock) order the
//!   concurrent ones, where SQLite's single writer orders everything.
//! - Ticket events: a ticket write that changed something hands a `TicketEvent` to the
//!   sink installed with [`PgStore::set_ticket_event_sink`] and inserts the runs it
//!   answers in the write's transaction ([`desk`]).
//!
//! Left out on purpose: sqlx's compile-time checked macros (no database at build time),
//! an ORM, a group commit for enqueues (Postgres commits concurrently on its own), and
//! the scheduler's leader election (a later port).
#![warn(missing_docs)]

pub mod access;
pub mod app_tx;
pub mod automations;
pub mod desk;
pub mod enqueue_group;
pub mod leader;
pub mod listener;
pub mod mail_servers;
mod manual_retry;
pub mod mcp_servers;
pub mod poll;
pub mod processes;
pub mod runs;
pub mod schema;
pub mod secrets;
pub mod service_limits;
pub mod widgets;

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_automation::store::TicketEventSink;
use fronta_engine::liveness::{ProcessFacts, ProcessId, ProcessList};
use fronta_engine::store::{
    CancelReply, CheckpointParams, ClaimBatch, ClaimParams, Enqueued, Finish, FinishReply, HandOff,
    HeartbeatReply, LeaseRenewal, RetryReply, RunFilter, RunStats, RunStore, StoreResult,
};
use fronta_engine::{Clock, NewRun, Run, RunId, StoreError};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres};
use tokio::sync::Notify;

use crate::runs::Ctx;

pub use app_tx::AppTx;
/// The driver this store is built on: an application enqueueing inside its own
/// transaction ([`AppTx`]) keeps its pool with this version.
pub use sqlx;

/// The channel of enqueue wake-ups.
pub const CHANNEL: &str = "fronta_runs";

/// The channel a cancel requested for a running run is notified on, its payload the run
/// id (see [`listener`]).
pub const CANCEL_CHANNEL: &str = "fronta_cancels";

/// How many cancel notifications wait for a slow worker before the oldest are dropped
/// (the heartbeat still delivers them).
pub const CANCEL_FEED_BUFFER: usize = 256;

/// The session setting that names a store's connections as the sender of their
/// wake-ups (the payload `fronta_note_pending` notifies with).
pub const SENDER_SETTING: &str = "fronta.sender";

/// Session settings every connection of a store starts with (the `options` startup
/// parameter), whatever the server's defaults:
///
/// - `jit = off`: JIT compiles each execution of a statement whose estimated cost passes
///   `jit_above_cost`, and the claim's estimate grows with the backlog (the planner
///   guesses a `LIMIT` it cannot see at 10 % of the rows). With 1,000,000 runs queued in
///   one tenant and the table analyzed, a claim of one run took ~400 ms, nearly all of it
///   compiling, against 0.13 ms without. fronta's statements are short; none gains from
///   JIT.
pub const SESSION_SETTINGS: [(&str, &str); 1] = [("jit", "off")];

/// Settings of a Postgres store. Every limit is named here.
#[derive(Clone)]
pub struct PgConfig {
    /// `postgres://user[:password]@host[:port]/database[?options]`.
    pub url: String,
    /// Connections in the pool (the listener has one more of its own).
    pub max_connections: u32,
    /// How long a call waits for a free connection before `Unavailable`.
    pub acquire_timeout: Duration,
    /// `None` (production): leases and due times follow the database's `now()`.
    /// `Some` (tests): every statement uses this clock's instant instead.
    pub clock: Option<Arc<dyn Clock>>,
    /// LISTEN for other processes' enqueues (`false`: this process polls for them).
    pub listen: bool,
    /// The least time between two tidies of the tenant list (forgetting tenants with no
    /// pending run) by this process, unless a claim round met at least
    /// [`TIDY_EMPTY_TENANTS`] empty tenants: a tenant drained and fed again at once is
    /// then not deleted and re-listed for every run (`Duration::ZERO`: tidy whenever a
    /// round finds an empty tenant).
    pub tenant_tidy_every: Duration,
    /// Group enqueue ([`enqueue_group`]): concurrent enqueues of this process share one
    /// statement and one commit.
    pub enqueue_groups: enqueue_group::GroupConfig,
    /// Whether a worker's claim round carries the finishes waiting to be written, in one
    /// transaction with the claim ([`RunStore::run_finish_and_claim`]). Off by default:
    /// with the worker's local queue a round already takes ~100–250 runs and a finish
    /// batch ~250, so the commit saved is under 1 % of the commits, while the round's
    /// claim then waits behind the finish statement; the drain measured 20–30 % slower
    /// with it (ARCHITECTURE.md, "The worker's local queue").
    pub finish_rides_claim: bool,
}

/// Empty tenants a claim round may meet before it tidies the tenant list at once,
/// whatever [`PgConfig::tenant_tidy_every`] says: each costs every round an index probe.
pub const TIDY_EMPTY_TENANTS: usize = 32;

impl PgConfig {
    /// The settings for the database at `url`: a pool of 10 connections, a 10 s acquire
    /// timeout, the database's clock, LISTEN on, tenant tidies at most every second, the
    /// default enqueue groups, finishes not riding claims.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            clock: None,
            listen: true,
            tenant_tidy_every: Duration::from_secs(1),
            enqueue_groups: enqueue_group::GroupConfig::default(),
            finish_rides_claim: false,
        }
    }
}

impl std::fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &redact(&self.url))
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("clock", &self.clock)
            .field("listen", &self.listen)
            .field("tenant_tidy_every", &self.tenant_tidy_every)
            .field("enqueue_groups", &self.enqueue_groups)
            .finish()
    }
}

/// The URL without its password, for logs and errors.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => format!(
                "{}{}:***{}",
                &url[..scheme_end + 3],
                &rest[..colon],
                &rest[at..]
            ),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Map a driver error to a domain kind: connection trouble, timeouts, lock conflicts and
/// serialization failures are `Unavailable` (the call may be repeated), integrity
/// violations `Conflict`, bad data `Invalid`, everything else `Internal`.
pub(crate) fn map_err(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|code| code.into_owned()).unwrap_or_default();
            let class = code.get(..2).unwrap_or("");
            match (class, code.as_str()) {
                (_, "40001" | "40P01" | "55P03" | "57014" | "25006") => {
                    StoreError::Unavailable(err.to_string())
                }
                ("08" | "53" | "57", _) => StoreError::Unavailable(err.to_string()),
                ("23", _) => StoreError::Conflict(err.to_string()),
                ("22", _) => StoreError::Invalid(err.to_string()),
                _ => StoreError::Internal(err.to_string()),
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => StoreError::Unavailable(err.to_string()),
        sqlx::Error::Configuration(_) => StoreError::Invalid(err.to_string()),
        sqlx::Error::RowNotFound => StoreError::NotFound,
        _ => StoreError::Internal(err.to_string()),
    }
}

/// Runs on Postgres. Cheap to clone; clones share the pool, the signal and the listener.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    clock: Option<Arc<dyn Clock>>,
    signal: Arc<Notify>,
    /// The tenant the last claim round of this process ended at.
    tenant_cursor: Mutex<Option<String>>,
    round_trips: AtomicU64,
    /// When this process last tidied the tenant list, and how often it may.
    last_tidy: Mutex<Option<std::time::Instant>>,
    tenant_tidy_every: Duration,
    listener: Option<tokio::task::AbortHandle>,
    /// Notifications the listener skipped because this process sent them.
    own_wakeups_skipped: Arc<AtomicU64>,
    /// Cancels requested for running runs, as the listener hears them.
    cancels: tokio::sync::broadcast::Sender<fronta_engine::RunId>,
    url: String,
    /// Called inside every ticket write that changed something (see [`desk`]).
    ticket_event_sink: fronta_automation::ticket_events::SinkSlot,
    /// Concurrent enqueues waiting to share a commit.
    groups: Arc<enqueue_group::Groups>,
    finish_rides_claim: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &redact(&self.inner.url))
            .finish()
    }
}

impl PgStore {
    /// Connect, migrate, and start listening for other processes' enqueues. Fails with
    /// `Unavailable` when the server cannot be reached, `Invalid` for a bad URL.
    pub async fn connect(config: PgConfig) -> Result<Self, StoreError> {
        if config.max_connections == 0 {
            return Err(StoreError::Invalid(
                "max_connections must be at least 1".into(),
            ));
        }
        if !(config.url.starts_with("postgres://") || config.url.starts_with("postgresql://")) {
            return Err(StoreError::Invalid(format!(
                "a Postgres URL starts with postgres:// or postgresql://, got {}",
                redact(&config.url)
            )));
        }
        let options = PgConnectOptions::from_str(&config.url).map_err(|err| {
            StoreError::Invalid(format!("bad Postgres URL {}: {err}", redact(&config.url)))
        })?;
        // Every connection of this store names it as the sender of its wake-ups
        // (`fronta_note_pending` sends this as the notification's payload), so the
        // listener can skip what this process's own writes sent: they woke its workers
        // already, after their commit.
        let sender = uuid::Uuid::new_v4().simple().to_string();
        let options = options
            .options([(SENDER_SETTING, sender.as_str())])
            .options(SESSION_SETTINGS);
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            // A ping before every acquire would double the round trips; a dead
            // connection fails its statement as `Unavailable` and is replaced.
            .test_before_acquire(false)
            // sqlx (0.9.1 on) opens its TCP sockets with `TCP_NODELAY`: a batch larger than
            // one segment is not held for the server's delayed acknowledgement.
            .connect_with(options.clone())
            .await
            .map_err(|err| {
                StoreError::Unavailable(format!(
                    "cannot connect to Postgres at {}: {err}",
                    redact(&config.url)
                ))
            })?;
        let applied = schema::migrate(&pool).await.map_err(map_err)?;
        if !applied.is_empty() {
            tracing::info!(url = %redact(&config.url), ?applied, "postgres: migrations applied");
        }
        let signal = Arc::new(Notify::new());
        let own_wakeups_skipped = Arc::new(AtomicU64::new(0));
        let cancels = tokio::sync::broadcast::channel(CANCEL_FEED_BUFFER).0;
        let listener = if config.listen {
            Some(
                listener::spawn(
                    options,
                    signal.clone(),
                    sender,
                    own_wakeups_skipped.clone(),
                    cancels.clone(),
                )
                .await?,
            )
        } else {
            None
        };
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                clock: config.clock,
                signal,
                tenant_cursor: Mutex::new(None),
                round_trips: AtomicU64::new(0),
                last_tidy: Mutex::new(None),
                tenant_tidy_every: config.tenant_tidy_every,
                finish_rides_claim: std::env::var("FRONTA_PG_FINISH_RIDES_CLAIM")
                    .is_ok_and(|v| v == "1"),
                listener,
                own_wakeups_skipped,
                cancels,
                url: config.url,
                ticket_event_sink: Default::default(),
                groups: Arc::new(enqueue_group::Groups::new(config.enqueue_groups)),
            }),
        })
    }

    /// The pool, for other ports on the same database.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// After a bulk load, do at once what the server does on its own within a minute or
    /// so: `ANALYZE runs` (autovacuum's analyze) and a `CHECKPOINT` (the one the load's
    /// WAL volume starts). The bench calls it before timing claims against a backlog, so
    /// they meet the steady state, not the load's aftermath. `CHECKPOINT` needs a
    /// superuser or the `pg_checkpoint` role.
    pub async fn settle(&self) -> Result<(), StoreError> {
        for statement in ["ANALYZE runs", "CHECKPOINT"] {
            sqlx::query(statement)
                .execute(&self.inner.pool)
                .await
                .map_err(map_err)?;
        }
        Ok(())
    }

    /// Statements (including `BEGIN`/`COMMIT`) this store has sent, for tests and metrics.
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips.load(Ordering::Relaxed)
    }

    /// What group enqueue did so far ([`enqueue_group`]).
    pub fn enqueue_group_stats(&self) -> enqueue_group::GroupStats {
        self.inner.groups.stats()
    }

    /// Enqueue `new_runs` in one transaction of their own (see `run_enqueue_many`).
    async fn enqueue_now(&self, new_runs: &[NewRun]) -> StoreResult<Vec<Enqueued>> {
        // Without unique keys the insert is one statement: atomic on its own. With keys,
        // a holder may have to be looked up (and a freed key retried) in the same
        // transaction.
        // A person's enqueue commits with its audit entry (`commit_tx`), so it takes a
        // transaction like a keyed one.
        let (answers, inserted) = if fronta_engine::audit::pending()
            || new_runs.iter().any(|run| run.unique_key.is_some())
        {
            let mut tx = self.begin_tx().await?;
            let written = runs::insert_many(&mut tx, self.ctx(), new_runs).await?;
            self.commit_tx(tx).await?;
            written
        } else {
            let mut conn = self.connection().await?;
            runs::insert_many(&mut conn, self.ctx(), new_runs).await?
        };
        if inserted {
            self.inner.signal.notify_waiters();
        }
        Ok(answers)
    }

    /// Notifications the listener heard from this process's own writes and skipped
    /// (they had woken its workers already), for tests and metrics.
    pub fn own_wakeups_skipped(&self) -> u64 {
        self.inner.own_wakeups_skipped.load(Ordering::Relaxed)
    }

    /// The injected clock's now; `None` when the database clock rules.
    pub fn now(&self) -> Option<DateTime<Utc>> {
        self.inner.clock.as_ref().map(|clock| clock.now())
    }

    /// Install the sink every ticket write that changed something calls, inside its
    /// transaction, when at least one enabled automation of the tenant listens to the
    /// event: the runs it answers are inserted in that transaction, so they commit with
    /// the write or not at all, and a failing insert fails the write. It replaces any sink
    /// installed before; clones of this store share it. The sink runs while the write
    /// holds its row locks, so it must be quick (no I/O); a panic in it fails that write
    /// only. It may see an event whose write then fails (a run it answered cannot be
    /// inserted, the commit fails): its only effect should be its answer.
    pub fn set_ticket_event_sink(&self, sink: TicketEventSink) {
        self.inner.ticket_event_sink.set(sink);
    }

    /// The installed ticket event sink, if any.
    pub(crate) fn ticket_event_sink(&self) -> Option<TicketEventSink> {
        self.inner.ticket_event_sink.get()
    }

    /// Wake this process's workers (after a commit that made runs pending).
    pub(crate) fn wake_workers(&self) {
        self.inner.signal.notify_waiters();
    }

    pub(crate) fn ctx(&self) -> Ctx<'_> {
        Ctx {
            now: self.now(),
            round_trips: &self.inner.round_trips,
        }
    }

    pub(crate) async fn connection(
        &self,
    ) -> Result<sqlx::pool::PoolConnection<Postgres>, StoreError> {
        self.inner.pool.acquire().await.map_err(map_err)
    }

    /// One claim round on `conn` from the tenant the last round of this process ended at
    /// (see [`runs::claim`]); moves that cursor.
    async fn claim_on(
        &self,
        conn: &mut PgConnection,
        params: &ClaimParams,
    ) -> StoreResult<ClaimBatch> {
        let cursor = self
            .inner
            .tenant_cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let (batch, ended_at) = runs::claim(
            conn,
            self.ctx(),
            params,
            cursor.as_deref(),
            runs::TidyGate {
                last: &self.inner.last_tidy,
                every: self.inner.tenant_tidy_every,
            },
        )
        .await?;
        if let Some(tenant) = ended_at {
            *self
                .inner
                .tenant_cursor
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tenant);
        }
        Ok(batch)
    }

    pub(crate) async fn begin_tx(
        &self,
    ) -> Result<sqlx::Transaction<'static, Postgres>, StoreError> {
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        self.inner.pool.begin().await.map_err(map_err)
    }

    /// Commit a write, with the audit entry of the caller's scope
    /// (`fronta_engine::audit`) inserted just before, when it has one still unwritten.
    pub(crate) async fn commit_tx(
        &self,
        mut tx: sqlx::Transaction<'static, Postgres>,
    ) -> Result<(), StoreError> {
        let scope = fronta_engine::audit::current();
        let entry = scope
            .as_ref()
            .and_then(|scope| scope.take_entry(self.now().unwrap_or_else(Utc::now)));
        if let Some(entry) = &entry {
            self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
            if let Err(err) = access::audit_insert(&mut tx, entry).await {
                scope.iter().for_each(|scope| scope.untake());
                return Err(map_err(err));
            }
        }
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let committed = tx.commit().await.map_err(map_err);
        if committed.is_err() && entry.is_some() {
            scope.iter().for_each(|scope| scope.untake());
        }
        committed
    }

    /// Begin a transaction for the caller's own statements and runs enqueued with
    /// [`PgTx::run_insert`]; they commit together or not at all. It holds a pooled
    /// connection (and, once it enqueued, a shared lock per tenant) until it ends: keep
    /// it short, never across slow work.
    ///
    /// Refused inside a run's handler ([`fronta_engine::guard`]): a handler gets no long
    /// transaction on the store.
    pub async fn begin(&self) -> Result<PgTx, StoreError> {
        if let Some(run) = fronta_engine::guard::current_run() {
            return Err(fronta_engine::guard::refusal(run, "PgStore::begin"));
        }
        Ok(PgTx {
            tx: self.begin_tx().await?,
            store: self.clone(),
            inserted: false,
        })
    }
}

/// A caller's transaction. Its statements go through [`PgTx::connection`]; runs enqueued
/// with [`PgTx::run_insert`] commit with them. Dropped without [`PgTx::commit`], it
/// rolls back.
///
/// Why not the engine's [`fronta_engine::RunInsert`]: that trait is synchronous (SQLite's
/// writer thread calls it inline), and a Postgres statement has to be awaited. So a
/// caller prepares the run with `Dispatcher::prepare` (validation, defaults) and awaits
/// `tx.run_insert(&run)`; the semantics are those of `run_enqueue_many`.
pub struct PgTx {
    tx: sqlx::Transaction<'static, Postgres>,
    store: PgStore,
    inserted: bool,
}

impl std::fmt::Debug for PgTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTx")
            .field("inserted", &self.inserted)
            .finish()
    }
}

impl PgTx {
    /// The connection, for the caller's own statements in this transaction.
    pub fn connection(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// The injected clock's now; `None` when the database clock rules.
    pub fn now(&self) -> Option<DateTime<Utc>> {
        self.store.now()
    }

    /// Enqueue one run inside this transaction (see [`RunStore::run_enqueue_many`]).
    pub async fn run_insert(&mut self, run: &NewRun) -> Result<Enqueued, StoreError> {
        let mut answers = self.run_insert_many(std::slice::from_ref(run)).await?;
        answers
            .pop()
            .ok_or_else(|| StoreError::Internal("invariant: one answer per run".into()))
    }

    /// Enqueue runs inside this transaction, answered in input order. Runs inside a
    /// savepoint: an error (a duplicate id) undoes only this call and leaves the
    /// transaction usable.
    pub async fn run_insert_many(&mut self, runs: &[NewRun]) -> Result<Vec<Enqueued>, StoreError> {
        let store = self.store.clone();
        let trips = &store.inner.round_trips;
        trips.fetch_add(1, Ordering::Relaxed);
        let mut savepoint = sqlx::Acquire::begin(&mut self.tx).await.map_err(map_err)?;
        let (answers, inserted) = runs::insert_many(&mut savepoint, store.ctx(), runs).await?;
        trips.fetch_add(1, Ordering::Relaxed);
        savepoint.commit().await.map_err(map_err)?;
        self.inserted |= inserted;
        Ok(answers)
    }

    /// Commit; workers of this process are woken if runs were enqueued (other processes
    /// hear the `NOTIFY` sent with the commit).
    pub async fn commit(self) -> Result<(), StoreError> {
        let PgTx {
            tx,
            store,
            inserted,
        } = self;
        store.commit_tx(tx).await?;
        if inserted {
            store.inner.signal.notify_waiters();
        }
        Ok(())
    }

    /// Roll back everything written in this transaction.
    pub async fn rollback(self) -> Result<(), StoreError> {
        self.store.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        self.tx.rollback().await.map_err(map_err)
    }
}

impl enqueue_group::WriteGroup for PgStore {
    fn write(
        &self,
        runs: &[NewRun],
    ) -> impl std::future::Future<Output = StoreResult<Vec<Enqueued>>> + Send {
        self.enqueue_now(runs)
    }
}

#[async_trait]
impl RunStore for PgStore {
    async fn run_enqueue_many(&self, new_runs: Vec<NewRun>) -> StoreResult<Vec<Enqueued>> {
        if new_runs.is_empty() {
            return Ok(Vec::new());
        }
        // A person's enqueue is written on the caller's task, in its own transaction with
        // its audit entry; a group is written by another task.
        if self.inner.groups.takes(new_runs.len()) && !fronta_engine::audit::pending() {
            let groups = Arc::clone(&self.inner.groups);
            groups.enqueue(new_runs, self.clone()).await
        } else {
            self.enqueue_now(&new_runs).await
        }
    }

    async fn run_enqueue_started(
        &self,
        run: NewRun,
        lease: Duration,
        holder: Option<ProcessId>,
    ) -> StoreResult<HandOff> {
        if run.due_at_once() && !fronta_engine::audit::pending() {
            let mut conn = self.connection().await?;
            if let Some(claimed) =
                runs::hand_off(&mut conn, self.ctx(), &run, lease, holder).await?
            {
                return Ok(HandOff::Started(Box::new(claimed)));
            }
        }
        let mut answers = self.run_enqueue_many(vec![run]).await?;
        let answer = answers
            .pop()
            .ok_or_else(|| StoreError::Internal("invariant: one answer per run".into()))?;
        Ok(HandOff::Queued(answer))
    }

    async fn run_claim(&self, params: ClaimParams) -> StoreResult<ClaimBatch> {
        if params.limit == 0 {
            return Ok(ClaimBatch::default());
        }
        let mut conn = self.connection().await?;
        self.claim_on(&mut conn, &params).await
    }

    /// The finishes and the claim round in one transaction on one connection: one
    /// commit for both. The claim's levels then commit together too; each later level
    /// still sees the runs the earlier ones took as `running` (its own writes).
    async fn run_finish_and_claim(
        &self,
        finishes: Vec<Finish>,
        params: ClaimParams,
    ) -> StoreResult<(Vec<FinishReply>, StoreResult<ClaimBatch>)> {
        if finishes.is_empty() {
            return Ok((Vec::new(), self.run_claim(params).await));
        }
        let mut tx = self.begin_tx().await?;
        let (replies, put_back) = runs::finish(&mut tx, self.ctx(), &finishes).await?;
        let batch = self.claim_on(&mut tx, &params).await?;
        self.commit_tx(tx).await?;
        if put_back {
            self.inner.signal.notify_waiters();
        }
        Ok((replies, Ok(batch)))
    }

    fn finishes_ride_claims(&self) -> bool {
        self.inner.finish_rides_claim
    }

    async fn run_heartbeat_many(
        &self,
        leases: Vec<LeaseRenewal>,
    ) -> StoreResult<Vec<HeartbeatReply>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.connection().await?;
        runs::heartbeat(&mut conn, self.ctx(), &leases).await
    }

    async fn run_checkpoint(&self, params: CheckpointParams) -> StoreResult<()> {
        let mut conn = self.connection().await?;
        runs::checkpoint(
            &mut conn,
            self.ctx(),
            params.id,
            params.owner,
            &params.state,
            params.lease,
        )
        .await
    }

    async fn run_finish_many(&self, finishes: Vec<Finish>) -> StoreResult<Vec<FinishReply>> {
        if finishes.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.connection().await?;
        let (replies, put_back) = runs::finish(&mut conn, self.ctx(), &finishes).await?;
        if put_back {
            self.inner.signal.notify_waiters();
        }
        Ok(replies)
    }

    async fn run_request_cancel(&self, id: RunId) -> StoreResult<CancelReply> {
        if fronta_engine::audit::pending() {
            // A person's cancel commits with its audit entry.
            let mut tx = self.begin_tx().await?;
            let reply = runs::request_cancel(&mut tx, self.ctx(), id).await?;
            if reply == CancelReply::Requested {
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(CANCEL_CHANNEL)
                    .bind(id.0.to_string())
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
            }
            if reply.changed() {
                self.commit_tx(tx).await?;
            } else {
                // Nothing was cancelled: nothing to commit, no audit entry.
                self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
                tx.rollback().await.map_err(map_err)?;
            }
            return Ok(reply);
        }
        let mut conn = self.connection().await?;
        let reply = runs::request_cancel(&mut conn, self.ctx(), id).await?;
        if reply == CancelReply::Requested {
            // The worker running it, in whichever process, hears it now rather than at
            // its next heartbeat (which still delivers it if this is lost).
            if let Err(err) = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CANCEL_CHANNEL)
                .bind(id.0.to_string())
                .execute(&mut *conn)
                .await
            {
                tracing::warn!(run = %id, error = %err, "postgres: could not notify the cancel; the heartbeat delivers it");
            }
        }
        Ok(reply)
    }

    fn cancel_requests(&self) -> Option<tokio::sync::broadcast::Receiver<RunId>> {
        self.inner
            .listener
            .is_some()
            .then(|| self.inner.cancels.subscribe())
    }

    /// One transaction of two statements: a bulk action's page pays one commit and a
    /// couple of round trips, not one of each a run.
    async fn run_request_cancel_many(
        &self,
        ids: Vec<RunId>,
    ) -> StoreResult<Vec<StoreResult<CancelReply>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_tx().await?;
        let replies = runs::request_cancel_many(&mut tx, self.ctx(), &ids).await?;
        let requested: Vec<String> = ids
            .iter()
            .zip(&replies)
            .filter(|(_, reply)| matches!(reply, Ok(CancelReply::Requested)))
            .map(|(id, _)| id.0.to_string())
            .collect();
        if !requested.is_empty() {
            // Delivered at commit: the workers running them hear them now.
            sqlx::query("SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id")
                .bind(CANCEL_CHANNEL)
                .bind(&requested)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        self.commit_tx(tx).await?;
        Ok(replies)
    }

    /// One transaction: one statement for the page, or (a unique key held by another
    /// live run) one savepoint a run, so that run fails alone.
    async fn run_retry_many(&self, ids: Vec<RunId>) -> StoreResult<Vec<StoreResult<RetryReply>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_tx().await?;
        let replies = manual_retry::retry_many(&mut tx, self.ctx(), &ids).await?;
        self.commit_tx(tx).await?;
        if replies
            .iter()
            .any(|reply| matches!(reply, Ok(RetryReply::Requeued)))
        {
            self.inner.signal.notify_waiters();
        }
        Ok(replies)
    }

    async fn run_retry(&self, id: RunId) -> StoreResult<RetryReply> {
        if fronta_engine::audit::pending() {
            // A person's retry commits with its audit entry.
            let mut tx = self.begin_tx().await?;
            let reply = manual_retry::retry(&mut tx, self.ctx(), id).await?;
            if reply.changed() {
                self.commit_tx(tx).await?;
                self.inner.signal.notify_waiters();
            } else {
                // Nothing was retried: nothing to commit, no audit entry.
                self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
                tx.rollback().await.map_err(map_err)?;
            }
            return Ok(reply);
        }
        let mut conn = self.connection().await?;
        let reply = manual_retry::retry(&mut conn, self.ctx(), id).await?;
        if reply == RetryReply::Requeued {
            self.inner.signal.notify_waiters();
        }
        Ok(reply)
    }

    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        let mut conn = self.connection().await?;
        runs::get(&mut conn, self.ctx(), id).await
    }

    async fn run_find_by_key(&self, tenant: &str, key: &str) -> StoreResult<Option<Run>> {
        let mut conn = self.connection().await?;
        runs::find_by_key(&mut conn, self.ctx(), tenant, key).await
    }

    async fn run_list(&self, filter: RunFilter) -> StoreResult<Vec<Run>> {
        let mut conn = self.connection().await?;
        runs::list(&mut conn, self.ctx(), &filter).await
    }

    async fn run_prune(&self, prune: &fronta_engine::store::Prune) -> StoreResult<u64> {
        let mut conn = self.connection().await?;
        runs::prune(&mut conn, self.ctx(), prune).await
    }

    async fn oldest_finished(&self) -> StoreResult<Option<chrono::DateTime<chrono::Utc>>> {
        let mut conn = self.connection().await?;
        runs::oldest_finished(&mut conn, self.ctx()).await
    }

    async fn run_stats(&self) -> StoreResult<RunStats> {
        let mut conn = self.connection().await?;
        runs::stats(&mut conn, self.ctx()).await
    }

    async fn compact_counts(&self) -> StoreResult<u64> {
        let mut conn = self.connection().await?;
        runs::compact_counts(&mut conn, self.ctx()).await
    }

    async fn run_busy(&self) -> StoreResult<bool> {
        let mut conn = self.connection().await?;
        runs::busy(&mut conn, self.ctx()).await
    }

    /// One statement on a pooled connection: the server answers, and it takes writes (a
    /// standby in recovery, or a session forced read-only, does not).
    async fn store_ready(&self) -> StoreResult<()> {
        let mut conn = self.connection().await?;
        let read_only: bool = sqlx::query_scalar(
            "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::boolean",
        )
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
        if read_only {
            return Err(StoreError::Unavailable(
                "the database is read-only (a standby in recovery, or a read-only session)".into(),
            ));
        }
        Ok(())
    }

    async fn process_register(&self, id: ProcessId, facts: &ProcessFacts) -> StoreResult<()> {
        let mut conn = self.connection().await?;
        processes::register(&mut conn, self.ctx(), id, facts).await
    }

    async fn process_beat(&self, id: ProcessId) -> StoreResult<bool> {
        let mut conn = self.connection().await?;
        processes::beat(&mut conn, self.ctx(), id).await
    }

    async fn process_list(&self) -> StoreResult<ProcessList> {
        let mut conn = self.connection().await?;
        processes::list(&mut conn, self.ctx()).await
    }

    /// Released runs wake this process's workers; the others claim them at their next
    /// poll (no enqueue notification: nothing was enqueued).
    async fn process_takeover(&self, dead: ProcessId) -> StoreResult<u64> {
        let mut conn = self.connection().await?;
        let released = processes::takeover(&mut conn, self.ctx(), dead).await?;
        if released > 0 {
            self.inner.signal.notify_waiters();
        }
        Ok(released)
    }

    async fn process_deregister(&self, id: ProcessId) -> StoreResult<()> {
        let mut conn = self.connection().await?;
        processes::deregister(&mut conn, self.ctx(), id).await
    }

    fn enqueue_signal(&self) -> Arc<Notify> {
        self.inner.signal.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("postgres://fronta:s3cret@db:5432/fronta?sslmode=require"),
            "postgres://fronta:***@db:5432/fronta?sslmode=require",
            "the password is hidden"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1/postgres"),
            "postgres://postgres@127.0.0.1/postgres",
            "a URL without a password is unchanged"
        );
        assert_eq!(redact("not a url"), "not a url", "no scheme: unchanged");
    }

    #[test]
    fn config_debug_never_prints_the_password() {
        let config = PgConfig::new("postgres://u:hunter2@h/db");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "password leaked: {shown}");
    }
}
