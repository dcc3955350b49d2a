//! What a working process (`fronta worker`, `fronta serve` with its worker, `fronta demo`)
//! runs beside its worker: the leader election on Postgres, and the scheduler of `poll`
//! and `schedule` automations, which ticks only while this process leads and plans the
//! next run of an automation whose run this process's worker ended, leading or not.
//!
//! Who leads: on Postgres, the holder of the advisory lock (`store-postgres/src/leader.rs`);
//! on SQLite, every working process on the file — a SQLite database is normally served by
//! one process, and if two share it, the scheduler's unique keys fold their ticks into one
//! pending run per automation.

use std::time::Duration;

use clap::Args;
use fronta_automation::scheduler::{Scheduler, SchedulerConfig};
use fronta_engine::{SystemClock, Worker};
use fronta_store_postgres::leader::{self, LeaderConfig};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{Store, duration};

/// The settings of leadership and scheduling.
#[derive(Args, Debug, Clone)]
pub(crate) struct LeadArgs {
    /// On Postgres: how often a follower tries to become the leader, and the leader
    /// checks its connection.
    #[arg(long, default_value = "1s", value_parser = duration::parse, help_heading = "Leadership and scheduling")]
    pub leader_retry: Duration,
    /// How often the scheduler looks at every poll and schedule automation. Their runs
    /// are enqueued ahead for their exact time, the next one as soon as the last ended;
    /// the tick is the fallback (a run ended by a process that went away).
    #[arg(long, env = "FRONTA_SCHEDULER_TICK", default_value = "30s", value_parser = duration::parse, help_heading = "Leadership and scheduling")]
    pub scheduler_tick: Duration,
}

impl Default for LeadArgs {
    fn default() -> Self {
        Self {
            leader_retry: Duration::from_secs(1),
            scheduler_tick: SchedulerConfig::default().tick,
        }
    }
}

/// The running election and scheduler; [`Leadership::stop`] waits for both.
pub(crate) struct Leadership {
    tasks: Vec<JoinHandle<()>>,
}

impl Leadership {
    /// Starts the election (Postgres) and the scheduler, until `shutdown`.
    pub(crate) fn start(
        store: &Store,
        database_url: Option<&str>,
        name: &str,
        worker: &Worker,
        args: &LeadArgs,
        nudge: Option<Arc<tokio::sync::Notify>>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Self> {
        if args.scheduler_tick < Duration::from_secs(1) {
            anyhow::bail!(
                "--scheduler-tick must be at least 1s, got {:?}",
                args.scheduler_tick
            );
        }
        let mut tasks = Vec::new();
        let (leading_tx, leading_rx) = watch::channel(false);
        match (store, database_url) {
            (Store::Postgres(_), Some(url)) => {
                let mut config = LeaderConfig::new(url, format!("{name}-leader"));
                config.retry_every = args.leader_retry;
                config.check_every = args.leader_retry;
                tasks.push(tokio::spawn(leader::run(
                    config,
                    shutdown.clone(),
                    leading_tx,
                    || async {},
                )));
            }
            _ => {
                tracing::info!("SQLite: this process schedules (no election on a file)");
                let _ = leading_tx.send(true);
                // Keep the sender alive with the process: a dropped sender ends the
                // scheduler.
                let stop = shutdown.clone();
                tasks.push(tokio::spawn(async move {
                    stop.cancelled().await;
                    drop(leading_tx);
                }));
            }
        }
        let (_, _, automations) = store.ports();
        let scheduler = Scheduler::new(
            automations,
            worker.dispatcher().clone(),
            Arc::new(SystemClock),
            SchedulerConfig {
                tick: args.scheduler_tick,
                nudge,
            },
        );
        // The next run of a timed automation is planned where its last one ended,
        // leading or not; the ticks of the leader are the fallback.
        tasks.push(tokio::spawn(
            scheduler
                .clone()
                .follow(worker.keyed_ends(), shutdown.clone()),
        ));
        tasks.push(tokio::spawn(scheduler.run(shutdown, leading_rx)));
        Ok(Self { tasks })
    }

    /// Waits for the tasks to end (after the shutdown token fired).
    pub(crate) async fn stop(self) {
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
