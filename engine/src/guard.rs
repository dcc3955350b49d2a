//! The handler's zone (seed 002: "the handler MUST NOT hold a transaction across slow
//! work"): the worker runs every handler inside a task-local scope naming its run, and
//! the stores' caller transactions that could be held across awaits ask
//! [`current_run`] and fail closed inside it.
//!
//! What is guarded, and what cannot be:
//! - `PgStore::begin` (a transaction on a pooled connection, held for as long as its
//!   owner keeps it, across any await) refuses inside a handler: the API gives a
//!   handler no long transaction on fronta's stores.
//! - `SqliteStore::transaction` takes a synchronous closure run on the writer thread: it
//!   cannot await, so it ends when the closure returns — short and bounded by
//!   construction, and allowed. (A closure that blocks inside holds every writer of the
//!   file; no guard can see that.)
//! - The store's own methods (enqueue, checkpoint, the desk's writes) are each one short
//!   transaction the store bounds itself: allowed.
//! - An application's own pool or connection (`fronta_store_postgres::AppTx`,
//!   `fronta_store_sqlite::AppTx`, or any other) is the application's: the engine cannot
//!   see its transactions. A handler that uses one must keep each transaction short
//!   and put no outside call (HTTP, SMTP, a sleep) inside it.
//! - The scope is the handler's task: a task the handler spawns itself
//!   (`tokio::spawn`) runs outside it.

use std::future::Future;

use crate::model::RunId;

tokio::task_local! {
    static IN_HANDLER: RunId;
}

/// The run whose handler is running on this task, if any: `Some` inside a handler (as
/// the worker runs it), `None` elsewhere.
pub fn current_run() -> Option<RunId> {
    IN_HANDLER.try_with(|run| *run).ok()
}

/// Runs `handler` inside run `run`'s zone (what the worker does with every handler).
pub fn in_handler<F: Future>(run: RunId, handler: F) -> impl Future<Output = F::Output> {
    IN_HANDLER.scope(run, handler)
}

/// The error a guarded call answers inside a handler: says which call, why, and what to
/// do instead.
pub fn refusal(run: RunId, call: &str) -> crate::StoreError {
    crate::StoreError::Invalid(format!(
        "{call} inside the handler of run {run}: a handler may not begin a transaction on \
         fronta's store (it would hold a connection and its locks across the handler's \
         slow work); write through the store's own methods, each one short transaction, or \
         checkpoint with ctx.checkpointer"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_zone_is_the_handlers_task_and_nothing_outside_it() {
        assert_eq!(current_run(), None, "outside a handler: no run");
        let run = RunId::new_v7();
        let seen = in_handler(run, async {
            tokio::task::yield_now().await;
            current_run()
        })
        .await;
        assert_eq!(seen, Some(run), "inside, across awaits: the handler's run");
        assert_eq!(current_run(), None, "after it: no run again");
        let spawned = in_handler(run, async { tokio::spawn(async { current_run() }).await })
            .await
            .expect("the spawned task ends");
        assert_eq!(
            spawned, None,
            "a task the handler spawns runs outside the zone"
        );
    }
}
