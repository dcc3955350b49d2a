//! The one writer path: a thread that owns the write connection and group-commits.
//!
//! Every write (enqueue, claim, heartbeat, checkpoint, finish, a caller's transaction, a
//! desk write) is a job sent to this thread. The thread takes every job waiting, runs them
//! in one `BEGIN IMMEDIATE` transaction, each inside its own savepoint (a failing job rolls
//! back alone), commits once, and only then answers each caller. So concurrent callers
//! share one fsync, and nobody hears "done" before the commit is durable.
//!
//! A job that panics fails alone: the unwind is caught around it, its savepoint is rolled
//! back, its caller hears `StoreError::Internal` ("the write panicked: …"), and the thread
//! goes on with the next job. Every caller is answered, never left waiting: a write sent
//! to a thread that has ended answers `Unavailable`, and [`WriterHandle::is_running`]
//! tells whether the thread is still there.
//!
//! A full disk or an I/O error: a group whose `BEGIN`, savepoint or `COMMIT` fails with
//! one (or that SQLite rolled back by itself) leaves [`WriterState::storage_failure`] set,
//! and every caller of that group hears `Unavailable`. An empty transaction needs no space,
//! so readiness does not ask one: [`probe`] (what `store_ready` runs) answers the failure
//! while it is set after rewriting one page, and the failure clears when a group that
//! wrote something (a row, or that page) commits.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};

use fronta_engine::{Clock, StoreError, audit};
use rusqlite::Connection;
use tokio::sync::{Notify, oneshot};

use crate::map_err;

/// State the writer keeps between transactions.
#[derive(Debug, Default)]
pub struct WriterState {
    /// The tenant the last fair claim round ended at; the next round starts after it.
    pub tenant_cursor: Option<String>,
    /// Set by a job that inserted runs: workers are woken after the commit.
    pub enqueued: bool,
    /// The storage failure (a full disk, an I/O error) of the last group that could not
    /// be written, until a group that wrote something commits.
    pub storage_failure: Option<StoreError>,
    /// Set by [`probe`] when it rewrote a page: its commit proves a write, as a row does.
    probe_wrote: bool,
}

/// Whether a driver error says the storage itself failed (a full disk, an I/O error, the
/// file cannot be opened), as opposed to a statement's own fault.
fn storage_fault(err: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode;
    matches!(
        err,
        rusqlite::Error::SqliteFailure(failure, _) if matches!(
            failure.code,
            ErrorCode::DiskFull | ErrorCode::SystemIoFailure | ErrorCode::CannotOpen
        )
    )
}

/// The readiness probe's job. While a storage failure is set it rewrites one page (the
/// header's `user_version`, to the value it has: nothing changes but the page is written
/// at commit), so the group's commit proves that a write fits again; otherwise it writes
/// nothing (the empty transaction proves the thread and the write lock).
pub fn probe(state: &mut WriterState, conn: &Connection) -> Result<(), StoreError> {
    if state.storage_failure.is_none() {
        return Ok(());
    }
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(map_err)?;
    conn.execute_batch(&format!("PRAGMA user_version = {version}"))
        .map_err(map_err)?;
    state.probe_wrote = true;
    Ok(())
}

/// One caller's write on the writer thread: the work and the way back to its caller.
///
/// The two halves are apart so that a job whose work panics can still be answered: the
/// unwind is caught around [`Job::run`] and the job, reply channel and all, is still
/// there for [`Job::answer`].
trait Job: Send {
    /// Runs the work inside the group transaction; `true` = keep its writes. Called at
    /// most once.
    fn run(&mut self, state: &mut WriterState, conn: &Connection) -> bool;

    /// Answers the caller once the group's fate is known: `None` = committed (the
    /// work's own result goes back), `Some(error)` = this error instead.
    fn answer(self: Box<Self>, failure: Option<StoreError>);
}

/// The [`Job`] of [`WriterHandle::write_with`].
struct Pending<T, E, F> {
    op: Option<F>,
    result: Option<Result<T, E>>,
    reply: oneshot::Sender<Result<T, E>>,
    from_store: fn(StoreError) -> E,
    /// The caller's audit scope (`fronta_engine::audit`), current on this thread while the
    /// job runs; its entry, if still unwritten, is inserted in the job's savepoint.
    audit: Option<(Arc<audit::Scope>, Arc<dyn Clock>)>,
}

impl<T, E, F> Job for Pending<T, E, F>
where
    T: Send,
    E: Send,
    F: FnOnce(&mut WriterState, &Connection) -> Result<T, E> + Send,
{
    fn run(&mut self, state: &mut WriterState, conn: &Connection) -> bool {
        let Some(op) = self.op.take() else {
            return false;
        };
        // Only a caller's job carries a scope: the worker's claims and finishes pay nothing.
        let _scope = self
            .audit
            .as_ref()
            .map(|(scope, _)| audit::on_thread(Some(scope.clone())));
        let mut result = op(state, conn);
        if result.is_ok()
            && let Some((scope, clock)) = &self.audit
            && let Some(entry) = scope.take_entry(clock.now())
            && let Err(err) = crate::access::audit_insert(conn, &entry)
        {
            scope.untake();
            result = Err((self.from_store)(map_err(err)));
        }
        let keep = result.is_ok();
        self.result = Some(result);
        keep
    }

    fn answer(self: Box<Self>, failure: Option<StoreError>) {
        if failure.is_some()
            && let Some((scope, _)) = &self.audit
        {
            // The group rolled back: the entry it held was not written.
            scope.untake();
        }
        let answer = match (failure, self.result) {
            (None, Some(result)) => result,
            (Some(err), _) => Err((self.from_store)(err)),
            (None, None) => Err((self.from_store)(StoreError::Internal(
                "invariant: the SQLite writer answered a write it never ran".into(),
            ))),
        };
        // A caller that stopped waiting needs no answer.
        let _ = self.reply.send(answer);
    }
}

/// What the writer thread is sent.
enum Command {
    Job(Box<dyn Job>),
    /// Finish the group being gathered, answer every later job `Unavailable`, end the
    /// thread, then signal here.
    Stop(oneshot::Sender<()>),
}

/// Counters of the writer, for metrics and tests.
#[derive(Debug, Default)]
pub struct WriterCounters {
    /// Jobs handed to the writer.
    pub jobs_sent: AtomicU64,
    /// Group transactions committed.
    pub commits: AtomicU64,
    /// Jobs carried by those commits.
    pub jobs_committed: AtomicU64,
    /// Jobs whose work panicked (each rolled back and answered `Internal`).
    pub jobs_panicked: AtomicU64,
}

/// A snapshot of [`WriterCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    /// Jobs handed to the writer thread.
    pub jobs_sent: u64,
    /// Group transactions committed.
    pub commits: u64,
    /// Jobs carried by those commits (`jobs_committed / commits`: the mean group).
    pub jobs_committed: u64,
    /// Jobs whose work panicked (each rolled back and answered `Internal`).
    pub jobs_panicked: u64,
}

impl WriterCounters {
    /// The counters now.
    pub fn snapshot(&self) -> WriterStats {
        WriterStats {
            jobs_sent: self.jobs_sent.load(Ordering::SeqCst),
            commits: self.commits.load(Ordering::SeqCst),
            jobs_committed: self.jobs_committed.load(Ordering::SeqCst),
            jobs_panicked: self.jobs_panicked.load(Ordering::SeqCst),
        }
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the SQLite writer has stopped".into())
}

/// The caller's side.
#[derive(Clone)]
pub struct WriterHandle {
    commands: Sender<Command>,
    /// `false` once the writer thread has ended, however it ended.
    running: Arc<AtomicBool>,
    /// The writer's counters, shared with its thread.
    pub counters: Arc<WriterCounters>,
    /// The store's clock: the time of the audit entries written with jobs.
    clock: Arc<dyn Clock>,
}

impl WriterHandle {
    /// Run `op` in the next group transaction; answer once it committed.
    pub async fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut WriterState, &Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.write_with(op, std::convert::identity).await
    }

    /// [`write`](Self::write) for a port with an error type of its own (the desk's): an
    /// `Err` from `op` rolls back this job's writes exactly as a `StoreError` does, and the
    /// writer's own failures reach the caller through `from_store`: `Unavailable` when
    /// the writer has stopped or the transaction could not begin, the commit's error when
    /// it failed, `Internal` ("the write panicked: …") when `op` panicked — its writes
    /// are rolled back and the writer goes on with the next job.
    pub async fn write_with<T, E, F>(&self, op: F, from_store: fn(StoreError) -> E) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&mut WriterState, &Connection) -> Result<T, E> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job = Pending {
            op: Some(op),
            result: None,
            reply,
            from_store,
            audit: audit::current().map(|scope| (scope, self.clock.clone())),
        };
        self.commands
            .send(Command::Job(Box::new(job)))
            .map_err(|_| from_store(stopped()))?;
        self.counters.jobs_sent.fetch_add(1, Ordering::SeqCst);
        // The sender is dropped unanswered only when the thread ended with the job still
        // queued (stopped, or died outside any job).
        rx.await.map_err(|_| {
            from_store(StoreError::Unavailable(
                "the SQLite writer stopped before answering this write".into(),
            ))
        })?
    }

    /// Whether the writer thread is still there to take writes.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Stop the writer thread: the group it is writing commits as usual, every write
    /// sent after this call answers `Unavailable`. Returns once the thread has ended.
    pub async fn stop(&self) {
        let (ack, done) = oneshot::channel();
        if self.commands.send(Command::Stop(ack)).is_ok() {
            // An error means the thread ended without acknowledging: ended all the same.
            let _ = done.await;
        }
    }
}

/// Clears the running flag when the writer thread ends, however it ends, and says so
/// when it ends by a panic outside any job (a job's own panic is caught).
struct RunningFlag(Arc<AtomicBool>);

impl Drop for RunningFlag {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
        if std::thread::panicking() {
            tracing::error!(
                "sqlite writer: the thread panicked; every write now answers Unavailable"
            );
        }
    }
}

/// Start the writer thread over `conn`; the error is the OS refusing a thread.
pub fn spawn(
    conn: Connection,
    max_group: usize,
    signal: Arc<Notify>,
    clock: Arc<dyn Clock>,
) -> Result<WriterHandle, StoreError> {
    let (commands, rx) = std::sync::mpsc::channel::<Command>();
    let counters = Arc::new(WriterCounters::default());
    let running = Arc::new(AtomicBool::new(true));
    let thread_counters = counters.clone();
    let flag = RunningFlag(running.clone());
    std::thread::Builder::new()
        .name("fronta-sqlite-writer".into())
        .spawn(move || {
            let acks = {
                let _flag = flag;
                run(conn, rx, max_group, &signal, &thread_counters)
            };
            for ack in acks {
                let _ = ack.send(());
            }
        })
        .map_err(|err| {
            StoreError::Unavailable(format!("cannot start the SQLite writer thread: {err}"))
        })?;
    Ok(WriterHandle {
        commands,
        running,
        counters,
        clock,
    })
}

/// The thread's loop: gather a group, write it, repeat until every handle is gone or a
/// stop arrives. Returns the stops to acknowledge (after the running flag is cleared).
fn run(
    conn: Connection,
    rx: Receiver<Command>,
    max_group: usize,
    signal: &Notify,
    counters: &WriterCounters,
) -> Vec<oneshot::Sender<()>> {
    let mut state = WriterState::default();
    let mut group: Vec<Box<dyn Job>> = Vec::with_capacity(max_group);
    let mut acks = Vec::new();
    while acks.is_empty() {
        let Ok(first) = rx.recv() else {
            break;
        };
        match first {
            Command::Job(job) => group.push(job),
            Command::Stop(ack) => acks.push(ack),
        }
        while acks.is_empty() && group.len() < max_group {
            match rx.try_recv() {
                Ok(Command::Job(job)) => group.push(job),
                Ok(Command::Stop(ack)) => acks.push(ack),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        if !group.is_empty() {
            write_group(&conn, &mut group, &mut state, counters);
            if state.enqueued {
                signal.notify_waiters();
            }
        }
    }
    // Stopped: whatever is queued behind the stop is answered, not run.
    for command in rx.try_iter() {
        match command {
            Command::Job(job) => job.answer(Some(stopped())),
            Command::Stop(ack) => acks.push(ack),
        }
    }
    tracing::debug!("sqlite writer stopped");
    acks
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// One group transaction: every job in its own savepoint, one commit, then the answers.
fn write_group(
    conn: &Connection,
    group: &mut Vec<Box<dyn Job>>,
    state: &mut WriterState,
    counters: &WriterCounters,
) {
    state.enqueued = false;
    state.probe_wrote = false;
    if let Err(err) = conn.execute_batch("BEGIN IMMEDIATE") {
        let fault = storage_fault(&err);
        let err = map_err(err);
        if fault {
            state.storage_failure = Some(err.clone());
        }
        tracing::warn!(error = %err, jobs = group.len(), "sqlite writer: cannot begin");
        // Never run a job outside a transaction: answer with the error.
        for job in group.drain(..) {
            job.answer(Some(err.clone()));
        }
        return;
    }
    let changes_before = conn.total_changes();
    let mut ran: Vec<(Box<dyn Job>, Option<StoreError>)> = Vec::with_capacity(group.len());
    // Set when a savepoint could not be closed: what the transaction holds is unknown,
    // so none of it is committed.
    let mut broken: Option<StoreError> = None;
    for mut job in group.drain(..) {
        if broken.is_some() {
            // The transaction is gone: nothing more runs in it.
            ran.push((job, None));
            continue;
        }
        if let Err(err) = conn
            .prepare_cached("SAVEPOINT job")
            .and_then(|mut stmt| stmt.execute([]))
        {
            ran.push((job, Some(map_err(err))));
            continue;
        }
        // The job's state is not used again after a panic (only its reply channel is),
        // and the savepoint undoes what it wrote.
        let (keep, failure) = match std::panic::catch_unwind(AssertUnwindSafe(|| {
            job.run(state, conn)
        })) {
            Ok(keep) => (keep, None),
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                tracing::error!(panic = %message, "sqlite writer: a write panicked; its writes are rolled back");
                counters.jobs_panicked.fetch_add(1, Ordering::SeqCst);
                (
                    false,
                    Some(StoreError::Internal(format!(
                        "the write panicked: {message}"
                    ))),
                )
            }
        };
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back by itself (it does so on some full
            // disk and I/O errors inside a statement): every job of the group is undone.
            let err = StoreError::Unavailable(
                "SQLite rolled the write transaction back (a full disk or an I/O error)".into(),
            );
            tracing::error!(error = %err, "sqlite writer: the group is lost");
            state.storage_failure = Some(err.clone());
            broken.get_or_insert(err);
            ran.push((job, failure));
            continue;
        }
        let end = if keep {
            conn.prepare_cached("RELEASE job")
                .and_then(|mut stmt| stmt.execute([]))
                .map(|_| ())
        } else {
            conn.execute_batch("ROLLBACK TO job; RELEASE job")
        };
        if let Err(err) = end {
            let fault = storage_fault(&err);
            let err = map_err(err);
            if fault {
                state.storage_failure = Some(err.clone());
            }
            tracing::error!(error = %err, "sqlite writer: savepoint end failed, rolling back the group");
            broken.get_or_insert(err);
        }
        ran.push((job, failure));
    }
    let commit_error = match broken {
        Some(err) => Some(err),
        None => conn.execute_batch("COMMIT").err().map(|err| {
            let fault = storage_fault(&err);
            let err = map_err(err);
            if fault {
                state.storage_failure = Some(err.clone());
            }
            err
        }),
    };
    if let Some(err) = &commit_error {
        tracing::warn!(error = %err, jobs = ran.len(), "sqlite writer: commit failed, rolling back the group");
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        state.enqueued = false;
        state.probe_wrote = false;
        for (job, _) in ran {
            job.answer(Some(err.clone()));
        }
        return;
    }
    if (state.probe_wrote || conn.total_changes() > changes_before)
        && let Some(cleared) = state.storage_failure.take()
    {
        tracing::warn!(was = %cleared, "sqlite writer: writes commit again");
    }
    counters.commits.fetch_add(1, Ordering::SeqCst);
    counters
        .jobs_committed
        .fetch_add(ran.len() as u64, Ordering::SeqCst);
    for (job, failure) in ran {
        job.answer(failure);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    use super::*;

    /// A writer over an in-memory database with one table `t(x)`.
    fn writer() -> WriterHandle {
        let conn = Connection::open_in_memory().expect("an in-memory database");
        conn.execute_batch("CREATE TABLE t (x INTEGER NOT NULL)")
            .expect("the table");
        spawn(
            conn,
            64,
            Arc::new(Notify::new()),
            Arc::new(fronta_engine::SystemClock),
        )
        .expect("the writer thread starts")
    }

    fn insert(x: i64) -> impl FnOnce(&mut WriterState, &Connection) -> Result<(), StoreError> {
        move |_, conn| {
            conn.execute("INSERT INTO t (x) VALUES (?1)", [x])
                .map(|_| ())
                .map_err(map_err)
        }
    }

    async fn rows(writer: &WriterHandle) -> Vec<i64> {
        writer
            .write(|_, conn| {
                let mut stmt = conn
                    .prepare("SELECT x FROM t ORDER BY x")
                    .map_err(map_err)?;
                let rows = stmt
                    .query_map([], |row| row.get(0))
                    .map_err(map_err)?
                    .collect::<Result<Vec<i64>, _>>()
                    .map_err(map_err)?;
                Ok(rows)
            })
            .await
            .expect("the rows read back")
    }

    /// Holds the writer thread inside a job until the returned sender is used (or
    /// dropped), so that the jobs sent meanwhile are written as one group.
    async fn hold(
        writer: &WriterHandle,
    ) -> (
        std::sync::mpsc::Sender<()>,
        tokio::task::JoinHandle<Result<(), StoreError>>,
    ) {
        let (inside_tx, inside_rx) = oneshot::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let held = tokio::spawn({
            let writer = writer.clone();
            async move {
                writer
                    .write(move |_, _| {
                        let _ = inside_tx.send(());
                        let _ = release_rx.recv_timeout(Duration::from_secs(30));
                        Ok(())
                    })
                    .await
            }
        });
        tokio::time::timeout(Duration::from_secs(30), inside_rx)
            .await
            .expect("the writer takes the holding job within 30 s")
            .expect("the holding job started");
        (release_tx, held)
    }

    /// Waits until `jobs` jobs were sent in all, or panics after a generous deadline.
    async fn sent(writer: &WriterHandle, jobs: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while writer.counters.snapshot().jobs_sent < jobs {
            assert!(Instant::now() < deadline, "{jobs} jobs sent within 30 s");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_panicking_job_fails_alone_and_its_group_commits_without_it() {
        let writer = writer();
        let (release, held) = hold(&writer).await;
        let before = writer.counters.snapshot();
        let first = tokio::spawn({
            let writer = writer.clone();
            async move { writer.write(insert(1)).await }
        });
        let panicking = tokio::spawn({
            let writer = writer.clone();
            async move {
                writer
                    .write(|state, conn| -> Result<(), StoreError> {
                        insert(2)(state, conn)?;
                        panic!("planted panic")
                    })
                    .await
            }
        });
        let last = tokio::spawn({
            let writer = writer.clone();
            async move { writer.write(insert(3)).await }
        });
        sent(&writer, before.jobs_sent + 3).await;
        release.send(()).expect("release the writer");
        held.await
            .expect("the holding task")
            .expect("the holding job");

        let failed = panicking.await.expect("the panicking caller's task");
        match failed {
            Err(StoreError::Internal(message)) => assert!(
                message.contains("the write panicked") && message.contains("planted panic"),
                "the error names the panic: {message}"
            ),
            other => panic!("the panicking job's caller hears Internal, got {other:?}"),
        }
        first
            .await
            .expect("task")
            .expect("the job before the panic is written");
        last.await
            .expect("task")
            .expect("the job after the panic is written");
        let after = writer.counters.snapshot();
        assert_eq!(
            after.commits - before.commits,
            2,
            "the holding job commits, then the three jobs that waited share one commit: \
             {after:?}"
        );
        assert_eq!(
            after.jobs_panicked - before.jobs_panicked,
            1,
            "one panic counted"
        );
        assert!(writer.is_running(), "the thread goes on after a panic");
        writer
            .write(insert(4))
            .await
            .expect("a later write is written");
        assert_eq!(
            rows(&writer).await,
            vec![1, 3, 4],
            "the panicking job's row was rolled back, every other row kept"
        );
    }

    #[tokio::test]
    async fn a_job_queued_behind_a_stop_is_answered_unavailable_and_never_run() {
        let writer = writer();
        let (release, held) = hold(&writer).await;
        let (ack, stopped) = oneshot::channel();
        assert!(
            writer.commands.send(Command::Stop(ack)).is_ok(),
            "the stop is queued behind the holding job"
        );
        let ran = Arc::new(AtomicBool::new(false));
        let queued = tokio::spawn({
            let writer = writer.clone();
            let ran = ran.clone();
            async move {
                writer
                    .write(move |_, _| {
                        ran.store(true, Ordering::SeqCst);
                        Ok(())
                    })
                    .await
            }
        });
        // The holding job and the queued one.
        sent(&writer, 2).await;
        release.send(()).expect("release the writer");
        held.await
            .expect("the holding task")
            .expect("the group being written when the stop came commits");
        stopped.await.expect("the thread acknowledges the stop");
        assert!(
            matches!(queued.await.expect("task"), Err(StoreError::Unavailable(_))),
            "a job behind the stop is answered Unavailable"
        );
        assert!(!ran.load(Ordering::SeqCst), "and never run");
        assert!(!writer.is_running(), "the handle knows the thread ended");
        assert!(
            matches!(
                writer.write(insert(1)).await,
                Err(StoreError::Unavailable(_))
            ),
            "a write sent after the end is Unavailable"
        );
        writer.stop().await;
    }
}
