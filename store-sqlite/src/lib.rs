//! Every fronta port on embedded SQLite.
//!
//! - One writer path: a thread owns the write connection and group-commits every write
//!   ([`writer`]): concurrent enqueues, claims and finishes share one `BEGIN IMMEDIATE`
//!   transaction and one fsync, and each caller is answered only after the commit.
//! - Reads (`run_get`, `run_list`, `run_stats`, the desk's reads) use a small pool of
//!   read connections on blocking threads; WAL lets them run beside the writer.
//! - Pragmas on every connection: WAL, `synchronous` (FULL by default), `busy_timeout`,
//!   `foreign_keys`. Several processes may share one file; SQLite's lock orders their
//!   writers and `busy_timeout` makes them wait instead of failing.
//! - Migrations are embedded ([`schema`]) and run on open.
//! - The desk port ([`desk`]: tenants, groups, tickets, incidents) takes the same two
//!   paths: each of its writes is one job on the writer thread, so everything a ticket
//!   write does commits together; its reads use the read pool.
//! - Ticket events: a ticket write that changed something hands a `TicketEvent` to the
//!   event sink installed with [`SqliteStore::set_ticket_event_sink`], inside the write's
//!   job, and inserts the runs it answers in that same transaction ([`desk`]).
//! - The automation port ([`automations`]: saved automations, webhook tokens, the loop
//!   guard's counter) takes the same two paths.
//!
//! Left out on purpose: an ORM, async SQLite drivers (measured slower here: see
//! `ARCHITECTURE.md`), cross-process wake-ups (other processes' workers poll).
#![warn(missing_docs)]

pub mod access;
pub mod app_tx;
pub mod automations;
pub mod desk;
pub mod mail_servers;
pub mod mcp_servers;
pub mod poll;
pub mod processes;
pub mod runs;
pub mod schema;
pub mod secrets;
pub mod service_limits;
pub mod widgets;
pub mod writer;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fronta_automation::store::TicketEventSink;
use fronta_engine::liveness::{ProcessFacts, ProcessId, ProcessList};
use fronta_engine::store::{
    CancelReply, CheckpointParams, ClaimBatch, ClaimParams, Enqueued, Finish, FinishReply, HandOff,
    HeartbeatReply, LeaseRenewal, RetryReply, RunFilter, RunInsert, RunStats, RunStore,
    StoreResult,
};
use fronta_engine::{Clock, NewRun, Run, RunId, StoreError, SystemClock};
use rusqlite::{Connection, OpenFlags};
use tokio::sync::Notify;

use crate::writer::{WriterHandle, WriterState};

pub use app_tx::AppTx;
/// The SQLite driver this store is built on: an application enqueueing inside its own
/// transaction ([`AppTx`]) opens its connection with this version.
pub use rusqlite;

/// How hard SQLite syncs a commit to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// Every commit is on disk before it is acknowledged (the default).
    Full,
    /// WAL + NORMAL: a commit is acknowledged before it is durable (the WAL is synced only
    /// at checkpoints, every ~1,000 pages), so a power loss loses every commit since the
    /// last checkpoint — measured by `tests/power_loss.rs` (`RELIABILITY.md` §11); a
    /// process crash loses nothing.
    Normal,
}

impl std::str::FromStr for Synchronous {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "full" => Ok(Synchronous::Full),
            "normal" => Ok(Synchronous::Normal),
            other => Err(format!("synchronous must be full or normal, got {other:?}")),
        }
    }
}

/// Settings of a SQLite store. Every limit is named here.
#[derive(Debug, Clone)]
pub struct SqliteConfig {
    /// The database file, created (with its migrations) when missing; its `-wal` and `-shm`
    /// files sit beside it.
    pub path: PathBuf,
    /// How hard a commit is synced to disk ([`Synchronous::Full`] by default).
    pub synchronous: Synchronous,
    /// How long a write waits for another process's write lock before "busy".
    pub busy_timeout: Duration,
    /// Read connections in the pool.
    pub read_connections: usize,
    /// The most jobs one group commit carries.
    pub max_group: usize,
    /// The clock that judges leases and due times.
    pub clock: Arc<dyn Clock>,
}

impl SqliteConfig {
    /// The settings for the database at `path`: `synchronous` FULL, `busy_timeout` 5 s, 4
    /// read connections, groups of at most 512 jobs, the wall clock.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            read_connections: 4,
            max_group: 512,
            clock: Arc::new(SystemClock),
        }
    }
}

/// Map a driver error to a domain kind.
pub(crate) fn map_err(err: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match &err {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                StoreError::Unavailable(format!("database busy: {err}"))
            }
            ErrorCode::ConstraintViolation => StoreError::Conflict(err.to_string()),
            ErrorCode::CannotOpen | ErrorCode::DiskFull | ErrorCode::SystemIoFailure => {
                StoreError::Unavailable(err.to_string())
            }
            _ => StoreError::Internal(err.to_string()),
        },
        rusqlite::Error::QueryReturnedNoRows => StoreError::NotFound,
        _ => StoreError::Internal(err.to_string()),
    }
}

fn open_connection(config: &SqliteConfig, read_only: bool) -> Result<Connection, StoreError> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(&config.path, flags).map_err(|err| {
        StoreError::Unavailable(format!(
            "cannot open SQLite database {}: {err}",
            config.path.display()
        ))
    })?;
    conn.busy_timeout(config.busy_timeout).map_err(map_err)?;
    let synchronous = match config.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    let mut pragmas = format!(
        "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY; \
         PRAGMA cache_size = -16000;"
    );
    if !read_only {
        // Before WAL: switching the journal writes the file's header, after which a new
        // database can no longer choose its vacuum.
        runs::choose_vacuum(&conn, &config.path)?;
        pragmas.insert_str(0, "PRAGMA journal_mode = WAL; ");
    }
    conn.execute_batch(&pragmas).map_err(map_err)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// Runs on SQLite. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: SqliteConfig,
    writer: WriterHandle,
    readers: Mutex<Vec<Connection>>,
    signal: Arc<Notify>,
    /// Called inside every ticket write that changed something (see [`desk`]).
    ticket_event_sink: fronta_automation::ticket_events::SinkSlot,
    /// Cancels requested through this store of runs in flight: a worker of this process
    /// hears them at once (`RunStore::cancel_requests`) instead of at its next heartbeat,
    /// whoever asked (the API, a bulk cancel, the CLI in-process). Other processes on the
    /// same file still hear them at their heartbeat.
    cancels: tokio::sync::broadcast::Sender<RunId>,
}

/// How many cancel requests the in-process feed keeps for a slow listener; one that falls
/// further behind hears the rest at its heartbeat.
pub const CANCEL_FEED_BUFFER: usize = 256;

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.config.path)
            .finish()
    }
}

impl SqliteStore {
    /// Open (creating if needed) and migrate.
    pub fn open(config: SqliteConfig) -> Result<Self, StoreError> {
        if config.read_connections == 0 || config.max_group == 0 {
            return Err(StoreError::Invalid(
                "read_connections and max_group must be at least 1".into(),
            ));
        }
        let mut conn = open_connection(&config, false)?;
        let applied = schema::migrate(&mut conn).map_err(map_err)?;
        if !applied.is_empty() {
            tracing::info!(path = %config.path.display(), ?applied, "sqlite: migrations applied");
        }
        let signal = Arc::new(Notify::new());
        let writer = writer::spawn(conn, config.max_group, signal.clone(), config.clock.clone())?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                writer,
                readers: Mutex::new(Vec::new()),
                signal,
                ticket_event_sink: Default::default(),
                cancels: tokio::sync::broadcast::channel(CANCEL_FEED_BUFFER).0,
            }),
        })
    }

    /// The settings this store was opened with.
    pub fn config(&self) -> &SqliteConfig {
        &self.inner.config
    }

    /// How many jobs the writer got and how many commits carried them.
    pub fn writer_stats(&self) -> writer::WriterStats {
        self.inner.writer.counters.snapshot()
    }

    /// Whether the writer thread is still there to take writes (a panicking write does
    /// not end it; only [`stop_writer`](Self::stop_writer) or a fault outside any write
    /// does). [`RunStore::store_ready`] proves the same through a write.
    pub fn writer_running(&self) -> bool {
        self.inner.writer.is_running()
    }

    /// Stop the writer thread for good, as a fault would: every write from now on answers
    /// `Unavailable` and readiness fails. For tests of that state only; nothing restarts
    /// the writer short of opening the store again.
    #[doc(hidden)]
    pub async fn stop_writer(&self) {
        self.inner.writer.stop().await;
    }

    /// Install the sink every ticket write that changed something calls, inside its
    /// transaction, on the writer thread: the runs it answers commit with the write or not
    /// at all, and a failing insert fails the write. It replaces any sink installed
    /// before; clones of this store share it. The sink holds the database's write lock
    /// while it runs, so it must be quick (no I/O); a panic in it fails that write only.
    /// It may see an event whose write then fails (a run it answered cannot be inserted,
    /// the commit fails): its only effect should be its answer.
    pub fn set_ticket_event_sink(&self, sink: TicketEventSink) {
        self.inner.ticket_event_sink.set(sink);
    }

    /// The installed ticket event sink, if any.
    pub(crate) fn ticket_event_sink(&self) -> Option<TicketEventSink> {
        self.inner.ticket_event_sink.get()
    }

    fn now(&self) -> i64 {
        self.inner.config.clock.now().timestamp_millis()
    }

    /// A read-write connection of the application's own to this store's file, with the
    /// store's pragmas (WAL, `synchronous`, `busy_timeout`, foreign keys): for its own
    /// tables and for enqueues inside its transactions ([`AppTx`]). Keep its
    /// transactions short: while one is open, every other writer of the file waits.
    pub fn open_app_connection(&self) -> Result<Connection, StoreError> {
        open_connection(&self.inner.config, false)
    }

    /// Wake this process's workers to look for runs now: after the commit of an
    /// application's transaction that enqueued runs through [`AppTx`]. Without it they
    /// find them at their next poll.
    pub fn wake_workers(&self) {
        self.inner.signal.notify_waiters();
    }

    /// Run `op` inside the next group transaction on the writer thread: everything it
    /// writes (its own statements and runs enqueued through [`SqliteTx`]) commits together
    /// or not at all. An `Err` from `op` rolls back only this call's writes.
    /// `op` must be quick: it holds the database's write lock.
    pub async fn transaction<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteTx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let clock = self.inner.config.clock.clone();
        self.inner
            .writer
            .write(move |state, conn| {
                let mut tx = SqliteTx {
                    conn,
                    state,
                    now: clock.now().timestamp_millis(),
                };
                op(&mut tx)
            })
            .await
    }

    async fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut WriterState, &Connection, i64) -> Result<T, StoreError> + Send + 'static,
    {
        let clock = self.inner.config.clock.clone();
        self.inner
            .writer
            .write(move |state, conn| op(state, conn, clock.now().timestamp_millis()))
            .await
    }

    async fn read<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
    {
        self.read_with(op, std::convert::identity).await
    }

    /// [`read`](Self::read) for a port with an error type of its own: the pool's own
    /// failures (cannot open, task failed) reach the caller through `from_store`.
    async fn read_with<T, E, F>(&self, op: F, from_store: fn(StoreError) -> E) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&Connection, i64) -> Result<T, E> + Send + 'static,
    {
        let inner = self.inner.clone();
        let now = self.now();
        tokio::task::spawn_blocking(move || {
            let pooled = inner
                .readers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop();
            let conn = match pooled {
                Some(conn) => conn,
                None => open_connection(&inner.config, true).map_err(from_store)?,
            };
            let result = op(&conn, now);
            let mut readers = inner
                .readers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if readers.len() < inner.config.read_connections {
                readers.push(conn);
            }
            result
        })
        .await
        .map_err(|err| from_store(StoreError::Internal(format!("read task failed: {err}"))))?
    }
}

/// A caller's transaction on the writer thread. Implements [`RunInsert`], so
/// `Dispatcher::enqueue_in(&mut tx, …)` enqueues inside it.
pub struct SqliteTx<'a> {
    conn: &'a Connection,
    state: &'a mut WriterState,
    now: i64,
}

impl SqliteTx<'_> {
    /// The connection, for the caller's own statements in this transaction.
    pub fn connection(&self) -> &Connection {
        self.conn
    }

    /// The store clock's now, in milliseconds since the epoch.
    pub fn now_millis(&self) -> i64 {
        self.now
    }
}

impl RunInsert for SqliteTx<'_> {
    fn run_insert(&mut self, run: &NewRun) -> Result<Enqueued, StoreError> {
        runs::insert(self.state, self.conn, run, self.now)
    }
}

#[async_trait]
impl RunStore for SqliteStore {
    async fn run_enqueue_many(&self, new_runs: Vec<NewRun>) -> StoreResult<Vec<Enqueued>> {
        self.write(move |state, conn, now| {
            new_runs
                .iter()
                .map(|run| runs::insert(state, conn, run, now))
                .collect()
        })
        .await
    }

    async fn run_enqueue_started(
        &self,
        run: NewRun,
        lease: Duration,
        holder: Option<ProcessId>,
    ) -> StoreResult<HandOff> {
        self.write(move |state, conn, now| runs::hand_off(state, conn, &run, lease, holder, now))
            .await
    }

    async fn run_claim(&self, params: ClaimParams) -> StoreResult<ClaimBatch> {
        self.write(move |state, conn, now| runs::claim(state, conn, &params, now))
            .await
    }

    /// One writer job: the finishes, then the claim, in one savepoint of one group
    /// transaction — one commit and one fsync for both (a claim that fails rolls the
    /// finishes back with it).
    async fn run_finish_and_claim(
        &self,
        finishes: Vec<Finish>,
        params: ClaimParams,
    ) -> StoreResult<(Vec<FinishReply>, StoreResult<ClaimBatch>)> {
        self.write(move |state, conn, now| {
            let replies = runs::finish(state, conn, &finishes, now)?;
            let batch = runs::claim(state, conn, &params, now)?;
            Ok((replies, Ok(batch)))
        })
        .await
    }

    fn finishes_ride_claims(&self) -> bool {
        true
    }

    async fn run_heartbeat_many(
        &self,
        leases: Vec<LeaseRenewal>,
    ) -> StoreResult<Vec<HeartbeatReply>> {
        self.write(move |_, conn, now| runs::heartbeat(conn, &leases, now))
            .await
    }

    async fn run_checkpoint(&self, params: CheckpointParams) -> StoreResult<()> {
        self.write(move |_, conn, now| {
            runs::checkpoint(
                conn,
                params.id,
                params.owner,
                &params.state,
                params.lease,
                now,
            )
        })
        .await
    }

    async fn run_finish_many(&self, finishes: Vec<Finish>) -> StoreResult<Vec<FinishReply>> {
        self.write(move |state, conn, now| runs::finish(state, conn, &finishes, now))
            .await
    }

    async fn run_request_cancel(&self, id: RunId) -> StoreResult<CancelReply> {
        self.run_request_cancel_many(vec![id])
            .await?
            .pop()
            .unwrap_or(Err(StoreError::NotFound))
    }

    fn cancel_requests(&self) -> Option<tokio::sync::broadcast::Receiver<RunId>> {
        Some(self.inner.cancels.subscribe())
    }

    async fn run_request_cancel_many(
        &self,
        ids: Vec<RunId>,
    ) -> StoreResult<Vec<StoreResult<CancelReply>>> {
        let asked = ids.clone();
        let replies = self
            .write(move |_, conn, now| {
                let replies = ids
                    .iter()
                    .map(|id| runs::request_cancel(conn, *id, now))
                    .collect::<Vec<_>>();
                if !replies
                    .iter()
                    .any(|reply| reply.as_ref().is_ok_and(CancelReply::changed))
                {
                    // Nothing was cancelled: a person's request leaves no audit entry.
                    fronta_engine::audit::unchanged();
                }
                Ok(replies)
            })
            .await?;
        for (id, reply) in asked.iter().zip(&replies) {
            if matches!(reply, Ok(CancelReply::Requested)) {
                // No listener (no worker here) is not an error: the heartbeat delivers it.
                let _ = self.inner.cancels.send(*id);
            }
        }
        Ok(replies)
    }

    async fn run_retry_many(&self, ids: Vec<RunId>) -> StoreResult<Vec<StoreResult<RetryReply>>> {
        self.write(move |state, conn, now| {
            Ok(ids
                .iter()
                .map(|id| runs::retry(state, conn, *id, now))
                .collect::<Vec<_>>())
        })
        .await
    }

    async fn run_retry(&self, id: RunId) -> StoreResult<RetryReply> {
        self.write(move |state, conn, now| {
            let reply = runs::retry(state, conn, id, now);
            if !reply.as_ref().is_ok_and(RetryReply::changed) {
                // Nothing was retried: a person's request leaves no audit entry.
                fronta_engine::audit::unchanged();
            }
            reply
        })
        .await
    }

    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        self.read(move |conn, now| runs::get(conn, id, now)).await
    }

    async fn run_find_by_key(&self, tenant: &str, key: &str) -> StoreResult<Option<Run>> {
        let (tenant, key) = (tenant.to_owned(), key.to_owned());
        self.read(move |conn, now| runs::find_by_key(conn, &tenant, &key, now))
            .await
    }

    async fn run_list(&self, filter: RunFilter) -> StoreResult<Vec<Run>> {
        self.read(move |conn, now| runs::list(conn, &filter, now))
            .await
    }

    async fn run_prune(&self, prune: &fronta_engine::store::Prune) -> StoreResult<u64> {
        let prune = prune.clone();
        self.write(move |_, conn, _| runs::prune(conn, &prune))
            .await
    }

    async fn reclaim_space(&self, pages: u32) -> StoreResult<u64> {
        self.write(move |_, conn, _| runs::reclaim_space(conn, pages))
            .await
    }

    async fn oldest_finished(&self) -> StoreResult<Option<chrono::DateTime<chrono::Utc>>> {
        self.read(|conn, _| runs::oldest_finished(conn)).await
    }

    async fn run_stats(&self) -> StoreResult<RunStats> {
        self.read(runs::stats).await
    }

    async fn run_busy(&self) -> StoreResult<bool> {
        self.read(runs::busy).await
    }

    /// A job through the writer ([`writer::probe`]: a `BEGIN IMMEDIATE` and a commit that
    /// writes no row, proving the thread is there and the write lock can be had — or,
    /// while the last group failed on a full disk or an I/O error, that failure unless a
    /// one-page write commits again), then a primary-key read of a run that does not
    /// exist through the read pool.
    async fn store_ready(&self) -> StoreResult<()> {
        self.write(|state, conn, _| writer::probe(state, conn))
            .await?;
        self.read(|conn, now| runs::get(conn, RunId(uuid::Uuid::nil()), now).map(|_| ()))
            .await
    }

    async fn process_register(&self, id: ProcessId, facts: &ProcessFacts) -> StoreResult<()> {
        let facts = facts.clone();
        self.write(move |_, conn, now| processes::register(conn, id, &facts, now))
            .await
    }

    async fn process_beat(&self, id: ProcessId) -> StoreResult<bool> {
        self.write(move |_, conn, now| processes::beat(conn, id, now))
            .await
    }

    async fn process_list(&self) -> StoreResult<ProcessList> {
        self.read(|conn, now| {
            Ok(ProcessList {
                now: chrono::DateTime::from_timestamp_millis(now).unwrap_or_default(),
                processes: processes::list(conn)?,
            })
        })
        .await
    }

    async fn process_takeover(&self, dead: ProcessId) -> StoreResult<u64> {
        self.write(move |state, conn, now| processes::takeover(state, conn, dead, now))
            .await
    }

    async fn process_deregister(&self, id: ProcessId) -> StoreResult<()> {
        self.write(move |_, conn, _| processes::deregister(conn, id))
            .await
    }

    fn enqueue_signal(&self) -> Arc<Notify> {
        self.inner.signal.clone()
    }
}
