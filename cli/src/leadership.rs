//! What a working process (`fronta worker`, `fronta serve` with its worker, `fronta demo`)
//! runs beside its worker: the leader election on Postgres, the scheduler of `poll`
//! and `schedule` automations, which ticks only while this process leads and plans the
//! next run of an automation whose run this process's worker ended, leading or not, and
//! the retention of finished runs (`fronta_automation::retention`), only while leading.
//!
//! Who leads: on Postgres, the holder of the advisory lock (`store-postgres/src/leader.rs`);
//! on SQLite, every working process on the file — a SQLite database is normally served by
//! one process, and if two share it, the scheduler's unique keys fold their ticks into one
//! pending run per automation.

use std::time::Duration;

use clap::Args;
use fronta_automation::retention::{RetentionConfig, RetentionService};
use fronta_automation::scheduler::{Scheduler, SchedulerConfig};
use fronta_engine::retention::{PruneCounters, Retention};
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
    /// Completed runs are deleted this long after they ended (`off`: kept forever).
    #[arg(long, env = "FRONTA_RETAIN_COMPLETED", default_value = "14d", value_parser = kept, help_heading = RETENTION)]
    pub retain_completed: Kept,
    /// Cancelled runs are deleted this long after they ended (`off`: kept forever).
    #[arg(long, env = "FRONTA_RETAIN_CANCELLED", default_value = "14d", value_parser = kept, help_heading = RETENTION)]
    pub retain_cancelled: Kept,
    /// Failed and suppressed runs are deleted this long after they ended (`off`: kept
    /// forever).
    #[arg(long, env = "FRONTA_RETAIN_FAILED", default_value = "90d", value_parser = kept, help_heading = RETENTION)]
    pub retain_failed: Kept,
    /// Time between two retention passes.
    #[arg(long, env = "FRONTA_RETENTION_EVERY", default_value = "1m", value_parser = duration::parse, help_heading = RETENTION)]
    pub retention_every: Duration,
    /// Runs one retention delete takes at most (one short transaction).
    #[arg(long, env = "FRONTA_RETENTION_BATCH", default_value_t = 1000, help_heading = RETENTION)]
    pub retention_batch: usize,
    /// Pause between two deletes of a pass.
    #[arg(long, env = "FRONTA_RETENTION_PAUSE", default_value = "50ms", value_parser = duration::parse, help_heading = RETENTION)]
    pub retention_pause: Duration,
    /// Audit entries are deleted this long after they were written.
    #[arg(long, env = "FRONTA_AUDIT_RETENTION", default_value = "365d", value_parser = duration::parse, help_heading = RETENTION)]
    pub audit_retention: Duration,
}

const RETENTION: &str = "Retention of finished runs";

/// A `--retain-*` value: how long, or forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kept(pub Option<Duration>);

fn kept(text: &str) -> Result<Kept, String> {
    fronta_engine::retention::parse_kept(text, duration::parse).map(Kept)
}

impl LeadArgs {
    /// The retention these flags set.
    pub(crate) fn retention(&self) -> Retention {
        Retention {
            completed: self.retain_completed.0,
            cancelled: self.retain_cancelled.0,
            failed: self.retain_failed.0,
        }
    }
}

impl Default for LeadArgs {
    fn default() -> Self {
        Self {
            leader_retry: Duration::from_secs(1),
            scheduler_tick: SchedulerConfig::default().tick,
            retain_completed: Kept(Retention::default().completed),
            retain_cancelled: Kept(Retention::default().cancelled),
            retain_failed: Kept(Retention::default().failed),
            retention_every: RetentionConfig::default().every,
            retention_batch: RetentionConfig::default().batch,
            retention_pause: RetentionConfig::default().pause,
            audit_retention: fronta_desk::access::DEFAULT_AUDIT_RETENTION,
        }
    }
}

/// The running election, scheduler and retention; [`Leadership::stop`] waits for them.
pub(crate) struct Leadership {
    tasks: Vec<JoinHandle<()>>,
    /// What retention deleted in this process (for `/metrics`).
    pub(crate) pruned: Arc<PruneCounters>,
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
        if args.retention_batch == 0 {
            anyhow::bail!("--retention-batch must be at least 1");
        }
        let (runs, desk, automations) = store.ports();
        let pruned = Arc::new(PruneCounters::default());
        let retention = RetentionService {
            runs,
            desk,
            clock: Arc::new(SystemClock),
            policy: args.retention(),
            config: RetentionConfig {
                every: args.retention_every,
                batch: args.retention_batch,
                pause: args.retention_pause,
            },
            counters: pruned.clone(),
            audit: Some((store.access(), args.audit_retention)),
            retired: Some(automations.clone()),
        };
        tracing::info!(policy = ?retention.policy, config = ?retention.config, "retention of finished runs");
        tasks.push(tokio::spawn(
            retention.run(shutdown.clone(), leading_rx.clone()),
        ));
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
        Ok(Self { tasks, pruned })
    }

    /// Waits for the tasks to end (after the shutdown token fired).
    pub(crate) async fn stop(self) {
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
