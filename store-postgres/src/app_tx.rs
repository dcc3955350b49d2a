//! Runs enqueued inside the application's own sqlx transaction or connection ([`AppTx`],
//! the Postgres side of [`fronta_engine::AppTransaction`]).
//!
//! The application keeps its own pool (of the sqlx version this crate re-exports) on the
//! database fronta migrated; it inserts its rows and the runs on the same connection and
//! commits. The runs are written by the statement the store itself uses
//! (`runs::insert_many`, inside a savepoint so a failed insert leaves the
//! application's transaction usable), and the insert's `NOTIFY` is sent at the commit, so
//! listening workers in every process hear of them then; a rollback writes and sends
//! nothing.

use fronta_engine::{AppTransaction, BoxFuture, Enqueued, NewRun, StoreError};
use sqlx::PgConnection;

use crate::{PgStore, map_err};

/// The application's transaction (or connection) as a place to enqueue runs.
///
/// ```no_run
/// # async fn example(store: fronta_store_postgres::PgStore, app_pool: sqlx::PgPool, dispatcher: fronta_engine::Dispatcher) -> Result<(), Box<dyn std::error::Error>> {
/// use fronta_engine::EnqueueRequest;
/// use fronta_store_postgres::AppTx;
///
/// let mut tx = app_pool.begin().await?;
/// sqlx::query("INSERT INTO users (email) VALUES ($1)").bind("ada@example.com").execute(&mut *tx).await?;
/// let request = EnqueueRequest::new("welcome:send", serde_json::json!({"user": 1}), 3);
/// dispatcher.enqueue_tx(&mut AppTx::new(&store, &mut tx), request).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub struct AppTx<'a> {
    store: &'a PgStore,
    conn: &'a mut PgConnection,
}

impl<'a> AppTx<'a> {
    /// `conn`: a connection of the application's, to the database `store` uses, inside
    /// its transaction (a `sqlx::Transaction` derefs to it) — or outside one, where each
    /// call commits on its own. `store` lends its clock (a test's injected clock, else
    /// the database's).
    pub fn new(store: &'a PgStore, conn: &'a mut PgConnection) -> Self {
        Self { store, conn }
    }
}

impl AppTransaction for AppTx<'_> {
    fn run_insert_many(
        &mut self,
        runs: Vec<NewRun>,
    ) -> BoxFuture<'_, Result<Vec<Enqueued>, StoreError>> {
        Box::pin(async move {
            let mut savepoint = sqlx::Acquire::begin(&mut *self.conn)
                .await
                .map_err(map_err)?;
            let (answers, _) =
                crate::runs::insert_many(&mut savepoint, self.store.ctx(), &runs).await?;
            savepoint.commit().await.map_err(map_err)?;
            Ok(answers)
        })
    }
}
