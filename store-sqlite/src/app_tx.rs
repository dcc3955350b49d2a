//! Runs enqueued inside the application's own rusqlite transaction on the store's file
//! ([`AppTx`], the SQLite side of [`fronta_engine::AppTransaction`]).
//!
//! Why this is sound beside the writer thread: SQLite itself orders writers of one file
//! (WAL, `BEGIN IMMEDIATE`, `busy_timeout`), which is what already lets several fronta
//! processes share a file. The application's connection is one more writer: while its
//! transaction is open, the store's writer waits for the lock (up to its
//! `busy_timeout`), so the application's transactions must be short, as every writer's
//! must. The run rows are written by the same statement the store's writer uses
//! ([`crate::runs::insert`]), so the runs are the store's own in every respect.
//!
//! What it cannot do: wake this process's workers at the commit, which is the
//! application's (call [`crate::SqliteStore::wake_workers`] after it; else workers find
//! the runs at their next poll).

use fronta_engine::{AppTransaction, BoxFuture, Enqueued, NewRun, StoreError};
use rusqlite::Connection;

use crate::SqliteStore;
use crate::writer::WriterState;

/// The application's transaction on the store's file, as a place to enqueue runs.
///
/// ```no_run
/// # async fn example(store: fronta_store_sqlite::SqliteStore, dispatcher: fronta_engine::Dispatcher) -> Result<(), Box<dyn std::error::Error>> {
/// use fronta_engine::EnqueueRequest;
/// use fronta_store_sqlite::AppTx;
///
/// let mut conn = store.open_app_connection()?;
/// let tx = conn.transaction()?;
/// tx.execute("INSERT INTO users (email) VALUES (?1)", ["ada@example.com"])?;
/// let request = EnqueueRequest::new("welcome:send", serde_json::json!({"user": 1}), 3);
/// dispatcher.enqueue_tx(&mut AppTx::new(&store, &tx), request).await?;
/// tx.commit()?;
/// store.wake_workers();
/// # Ok(()) }
/// ```
pub struct AppTx<'a> {
    conn: &'a Connection,
    now: i64,
}

impl<'a> AppTx<'a> {
    /// `conn`: the application's connection to `store`'s file, inside its transaction (a
    /// `rusqlite::Transaction` derefs to it). Outside a transaction, each run is its own
    /// commit. The store's clock stamps the runs.
    pub fn new(store: &SqliteStore, conn: &'a Connection) -> Self {
        Self {
            conn,
            now: store.now(),
        }
    }
}

impl AppTransaction for AppTx<'_> {
    /// Inserts at once, on the caller's thread, before the future is returned: the
    /// future holds only the answer.
    fn run_insert_many(
        &mut self,
        runs: Vec<NewRun>,
    ) -> BoxFuture<'_, Result<Vec<Enqueued>, StoreError>> {
        let mut state = WriterState::default();
        let answers = runs
            .iter()
            .map(|run| crate::runs::insert(&mut state, self.conn, run, self.now))
            .collect();
        Box::pin(std::future::ready(answers))
    }
}
