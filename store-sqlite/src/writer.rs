//! The one writer path: a thread that owns the write connection and group-commits.
//!
//! Every write (enqueue, claim, heartbeat, checkpoint, finish, a caller's transaction, a
//! desk write) is a job sent to this thread. The thread takes every job waiting, runs them
//! in one `BEGIN IMMEDIATE` transaction, each inside its own savepoint (a failing job rolls
//! back alone), commits once, and only then answers each caller. So concurrent callers
//! share one fsync, and nobody hears "done" before the commit is durable.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};

use fronta_engine::StoreError;
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
}

/// The answer to deliver once the commit is known: `None` = committed.
type Reply = Box<dyn FnOnce(Option<StoreError>) + Send>;
/// A job: runs on the writer thread inside the group transaction; `true` = keep its writes.
pub type Job = Box<dyn FnOnce(&mut WriterState, &Connection) -> (bool, Reply) + Send>;

/// Counters of the writer, for metrics and tests.
#[derive(Debug, Default)]
pub struct WriterCounters {
    /// Jobs handed to the writer.
    pub jobs_sent: AtomicU64,
    /// Group transactions committed.
    pub commits: AtomicU64,
    /// Jobs carried by those commits.
    pub jobs_committed: AtomicU64,
}

/// A snapshot of [`WriterCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    pub jobs_sent: u64,
    pub commits: u64,
    pub jobs_committed: u64,
}

impl WriterCounters {
    pub fn snapshot(&self) -> WriterStats {
        WriterStats {
            jobs_sent: self.jobs_sent.load(Ordering::SeqCst),
            commits: self.commits.load(Ordering::SeqCst),
            jobs_committed: self.jobs_committed.load(Ordering::SeqCst),
        }
    }
}

/// The caller's side.
#[derive(Clone)]
pub struct WriterHandle {
    jobs: Sender<Job>,
    pub counters: Arc<WriterCounters>,
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
    /// writer's own failures (stopped, commit failed) reach the caller through
    /// `from_store`.
    pub async fn write_with<T, E, F>(&self, op: F, from_store: fn(StoreError) -> E) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&mut WriterState, &Connection) -> Result<T, E> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |state, conn| {
            let result = op(state, conn);
            let keep = result.is_ok();
            let reply: Reply = Box::new(move |commit_error| {
                let _ = tx.send(match commit_error {
                    None => result,
                    Some(err) => Err(from_store(err)),
                });
            });
            (keep, reply)
        });
        self.jobs.send(job).map_err(|_| {
            from_store(StoreError::Unavailable(
                "the SQLite writer has stopped".into(),
            ))
        })?;
        self.counters.jobs_sent.fetch_add(1, Ordering::SeqCst);
        rx.await.map_err(|_| {
            from_store(StoreError::Unavailable(
                "the SQLite writer dropped a job".into(),
            ))
        })?
    }
}

/// Start the writer thread over `conn`.
pub fn spawn(conn: Connection, max_group: usize, signal: Arc<Notify>) -> WriterHandle {
    let (jobs, rx) = std::sync::mpsc::channel::<Job>();
    let counters = Arc::new(WriterCounters::default());
    let thread_counters = counters.clone();
    std::thread::Builder::new()
        .name("fronta-sqlite-writer".into())
        .spawn(move || run(conn, rx, max_group, signal, thread_counters))
        .expect("invariant: the OS can start a thread at start-up");
    WriterHandle { jobs, counters }
}

fn run(
    conn: Connection,
    rx: Receiver<Job>,
    max_group: usize,
    signal: Arc<Notify>,
    counters: Arc<WriterCounters>,
) {
    let mut state = WriterState::default();
    let mut group: Vec<Job> = Vec::with_capacity(max_group);
    let mut replies: Vec<Reply> = Vec::with_capacity(max_group);
    while let Ok(first) = rx.recv() {
        group.push(first);
        while group.len() < max_group {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        if let Err(err) = conn.execute_batch("BEGIN IMMEDIATE") {
            let err = map_err(err);
            tracing::warn!(error = %err, jobs = group.len(), "sqlite writer: cannot begin");
            for job in group.drain(..) {
                // Never run a job outside a transaction: answer with the error.
                drop(job);
            }
            // The callers' oneshots were dropped with the jobs: they see Unavailable.
            continue;
        }
        state.enqueued = false;
        for job in group.drain(..) {
            if let Err(err) = conn
                .prepare_cached("SAVEPOINT job")
                .and_then(|mut stmt| stmt.execute([]))
            {
                let err = map_err(err);
                replies.push(Box::new(move |_| drop(err)));
                continue;
            }
            let (keep, reply) = job(&mut state, &conn);
            let end = if keep {
                conn.prepare_cached("RELEASE job")
                    .and_then(|mut stmt| stmt.execute([]))
                    .map(|_| ())
            } else {
                conn.execute_batch("ROLLBACK TO job; RELEASE job")
            };
            if let Err(err) = end {
                tracing::error!(error = %map_err(err), "sqlite writer: savepoint end failed");
            }
            replies.push(reply);
        }
        let commit_error = conn.execute_batch("COMMIT").err().map(map_err);
        if let Some(err) = &commit_error {
            tracing::warn!(error = %err, jobs = replies.len(), "sqlite writer: commit failed, rolling back the group");
            let _ = conn.execute_batch("ROLLBACK");
            state.enqueued = false;
        } else {
            counters.commits.fetch_add(1, Ordering::SeqCst);
            counters
                .jobs_committed
                .fetch_add(replies.len() as u64, Ordering::SeqCst);
        }
        for reply in replies.drain(..) {
            reply(commit_error.clone());
        }
        if state.enqueued {
            signal.notify_waiters();
        }
    }
    tracing::debug!("sqlite writer stopped");
}
