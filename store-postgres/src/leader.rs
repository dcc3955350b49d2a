//! One leader per database: whoever holds a session-level advisory lock on a dedicated
//! connection. The leader runs maintenance (and, later, the scheduler); everybody else
//! retries the lock every `retry_every`. When the leader's process dies or its
//! connection drops, Postgres releases the lock with the session, and another process
//! takes it at its next try — leadership moves without any timeout of ours.
//!
//! Who leads is visible in the database itself: the lock in `pg_locks`, its session's
//! `application_name` in `pg_stat_activity` (see [`current_leader`]).
//!
//! Left out: fencing of the leader's own writes. A leader that lost its connection
//! learns it at its next check (`check_every`) and stops; maintenance must therefore be
//! idempotent and safe to run twice.

use std::future::Future;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The advisory lock key: "fronta" in ASCII.
pub const LEADER_LOCK_KEY: i64 = 0x66_72_6f_6e_74_61;

/// Settings of the leader election ([`run`]). Every limit is named here.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// The database URL (its own connection, outside the pool).
    pub url: String,
    /// This process's name, set as the session's `application_name`.
    pub name: String,
    /// How often a follower tries to take the lock.
    pub retry_every: Duration,
    /// How often the leader checks its connection and runs a maintenance tick.
    pub check_every: Duration,
    /// How long connecting, taking the lock and the leader's check may take before the
    /// connection counts as lost. Without it a database that stops answering without
    /// closing the connection (a partition) would hold the election for as long as TCP
    /// retransmits, the leader still believing it leads.
    pub io_timeout: Duration,
}

impl LeaderConfig {
    /// The settings for electing among the processes on the database at `url`, this one
    /// called `name`: a follower retries every second, the leader checks every second,
    /// connecting and each check may take 5 s.
    pub fn new(url: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            name: name.into(),
            retry_every: Duration::from_secs(1),
            check_every: Duration::from_secs(1),
            io_timeout: Duration::from_secs(5),
        }
    }
}

async fn connect(config: &LeaderConfig) -> Result<PgConnection, sqlx::Error> {
    let options: sqlx::postgres::PgConnectOptions = config.url.parse()?;
    within(
        config,
        PgConnection::connect_with(&options.application_name(&config.name)),
    )
    .await
}

/// `work`, or an I/O timeout error after `io_timeout`.
async fn within<T>(
    config: &LeaderConfig,
    work: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    match tokio::time::timeout(config.io_timeout, work).await {
        Ok(answer) => answer,
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {:?}", config.io_timeout),
        ))),
    }
}

/// Run the election until `shutdown`. `leading` tells the world whether this process
/// leads; `tick` runs every `check_every` while it does.
pub async fn run<F, Fut>(
    config: LeaderConfig,
    shutdown: CancellationToken,
    leading: watch::Sender<bool>,
    mut tick: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    'connect: while !shutdown.is_cancelled() {
        let mut conn = match connect(&config).await {
            Ok(conn) => conn,
            Err(err) => {
                tracing::warn!(name = %config.name, error = %err, "leader election: cannot connect; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => break 'connect,
                    _ = tokio::time::sleep(config.retry_every) => continue 'connect,
                }
            }
        };
        let mut leader = false;
        loop {
            if !leader {
                let locked = within(
                    &config,
                    sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
                        .bind(LEADER_LOCK_KEY)
                        .fetch_one(&mut conn),
                )
                .await;
                match locked {
                    Ok(true) => {
                        leader = true;
                        tracing::info!(name = %config.name, "became the leader of this database");
                        leading.send_replace(true);
                    }
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(name = %config.name, error = %err, "leader election: lost the connection; reconnecting");
                        continue 'connect;
                    }
                }
            }
            let wait = if leader {
                config.check_every
            } else {
                config.retry_every
            };
            tokio::select! {
                _ = shutdown.cancelled() => {
                    if leader {
                        let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                            .bind(LEADER_LOCK_KEY)
                            .execute(&mut conn)
                            .await;
                        leading.send_replace(false);
                        tracing::info!(name = %config.name, "stepped down as leader (shutdown)");
                    }
                    break 'connect;
                }
                _ = tokio::time::sleep(wait) => {}
            }
            if leader {
                if let Err(err) = within(&config, conn.ping()).await {
                    leading.send_replace(false);
                    tracing::warn!(name = %config.name, error = %err,
                        "lost leadership: the connection holding the lock is gone; reconnecting");
                    continue 'connect;
                }
                tick().await;
            }
        }
    }
    leading.send_replace(false);
}

/// The `application_name` of the session holding the leader lock, if any.
pub async fn current_leader(pool: &sqlx::PgPool) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar::<_, String>(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND ((l.classid::bigint << 32) | l.objid::bigint) = $1",
    )
    .bind(LEADER_LOCK_KEY)
    .fetch_optional(pool)
    .await
}
