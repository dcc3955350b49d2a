//! Wake-ups from other processes: a task that `LISTEN`s on [`crate::CHANNEL`] on a
//! connection of its own and calls `notify_waiters()` on the store's enqueue signal for
//! every notification.
//!
//! Notifications sent while the connection is down are lost (Postgres does not queue
//! them for a listener that is not there); after every reconnect the task wakes the
//! waiters once, and the workers' polling covers the rest.
//!
//! The same connection listens on [`crate::CANCEL_CHANNEL`]: a cancel requested for a
//! running run (by any process) names the run, and the listener passes it to this
//! store's cancel feed (`RunStore::cancel_requests`), so the worker running it signals
//! its handler at once instead of at its next heartbeat. A cancel sent while the
//! connection was down is still delivered by the heartbeat.
//!
//! A notification's payload names its sender (the store's [`crate::SENDER_SETTING`]);
//! this process's own are skipped: its writes woke its workers already, after their
//! commit, and a second wake-up would send an idle worker into an empty claim round
//! just as the next run arrives (measured: 2.7 claim rounds per run at 200 runs/s).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fronta_engine::StoreError;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::Notify;

use fronta_engine::RunId;
use tokio::sync::broadcast;

use crate::{CANCEL_CHANNEL, CHANNEL, map_err};

/// The first wait before reconnecting after an error; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Open a listening connection and `LISTEN`.
async fn open(options: &PgConnectOptions) -> Result<PgListener, sqlx::Error> {
    // A pool of one, never expired: the listener takes its connection from it and, after
    // a lost connection, a new one (re-issuing LISTEN itself).
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_with(options.clone())
        .await?;
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen_all([CHANNEL, CANCEL_CHANNEL]).await?;
    Ok(listener)
}

/// Listen now (so an enqueue of another process after this returns is heard), then keep
/// listening in a task until the returned handle aborts it.
pub(crate) async fn spawn(
    options: PgConnectOptions,
    signal: Arc<Notify>,
    own_sender: String,
    skipped: Arc<AtomicU64>,
    cancels: broadcast::Sender<RunId>,
) -> Result<tokio::task::AbortHandle, StoreError> {
    let listener = open(&options).await.map_err(map_err)?;
    let task = tokio::spawn(run(options, signal, listener, own_sender, skipped, cancels));
    Ok(task.abort_handle())
}

async fn run(
    options: PgConnectOptions,
    signal: Arc<Notify>,
    mut listener: PgListener,
    own_sender: String,
    skipped: Arc<AtomicU64>,
    cancels: broadcast::Sender<RunId>,
) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) if notification.channel() == CANCEL_CHANNEL => {
                match notification.payload().parse::<uuid::Uuid>() {
                    // Nobody listening (no worker in this process): nothing to tell.
                    Ok(id) => drop(cancels.send(RunId(id))),
                    Err(_) => tracing::warn!(
                        payload = notification.payload(),
                        "postgres listener: a cancel notification without a run id"
                    ),
                }
            }
            Ok(Some(notification)) if notification.payload() == own_sender => {
                skipped.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Some(_)) => signal.notify_waiters(),
            Ok(None) => {
                // The connection dropped and was re-established: what was sent meanwhile
                // is lost, so let the workers look.
                tracing::info!("postgres listener: reconnected");
                signal.notify_waiters();
            }
            Err(err) => {
                tracing::warn!(error = %err, "postgres listener: connection failed; reconnecting");
                let mut backoff = FIRST_BACKOFF;
                listener = loop {
                    tokio::time::sleep(backoff).await;
                    match open(&options).await {
                        Ok(listener) => break listener,
                        Err(err) => {
                            backoff = (backoff * 2).min(MAX_BACKOFF);
                            tracing::warn!(error = %err, retry_in = ?backoff,
                                "postgres listener: cannot reconnect");
                        }
                    }
                };
                tracing::info!("postgres listener: listening again");
                signal.notify_waiters();
            }
        }
    }
}
