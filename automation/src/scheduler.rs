//! The scheduler: keeps one pending run ahead for every `poll` and `schedule`
//! automation, as `crate::schedule` plans it.
//!
//! A [`Scheduler::tick`] reads the timed automations (`AutomationStore::automations_timed`,
//! every tenant), and for each its newest keyed run (`RunStore::run_find_by_key`), plans,
//! and writes: an enqueue with the automation's unique key (so two ticks racing — two
//! processes, a slow tick — still leave one pending run) or a cancel of a stale pending
//! tick. An automation whose cron no longer parses is reported in the log and skipped;
//! one automation's storage error does not stop the others.
//!
//! [`Scheduler::run`] ticks every [`SchedulerConfig::tick`] (30 s by default) while this
//! process leads: on Postgres only the elected leader schedules (the binary feeds the
//! election's `watch` here); on SQLite the binary leads alone. [`Scheduler::follow`]
//! plans an automation's next run the moment its worker wrote the end of the last one,
//! in every working process: the tick is the fallback, not the clock of the schedule.
//!
//! Every decision leaves a log line: enqueued (with the tick; ticks missed while the
//! previous run still ran, or — a warning — while no run was planned for them),
//! cancelled (with the reason), skipped (with the problem).

use std::sync::Arc;
use std::time::Duration;

use fronta_desk::{DeskError, TenantId};
use fronta_engine::{Clock, Dispatcher, Enqueued, KeyedEnd, RunStore, Trigger as RunTrigger};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::executor::run_request;
use crate::schedule::{self, LastRun, Plan, Subject, Timing};
use crate::store::{AutomationStore, StoredAutomation};

/// The scheduler's limits.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// How often the timed automations are looked at. Ticks are enqueued ahead, so this
    /// bounds how late the *next* run is planned after one finished, not how late a
    /// planned one starts.
    pub tick: Duration,
    /// Wakes the scheduler before its tick: the API of this process notifies it when it
    /// saved or resumed a timed automation, so a poll runs at once and a schedule's
    /// first run is enqueued at once (other processes' saves wait for the tick).
    pub nudge: Option<Arc<tokio::sync::Notify>>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(30),
            nudge: None,
        }
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Timed automations looked at.
    pub automations: usize,
    pub enqueued: usize,
    pub cancelled: usize,
    /// Automations skipped for a problem (a cron that no longer parses, a storage error).
    pub skipped: usize,
}

/// See the module docs.
#[derive(Clone)]
pub struct Scheduler {
    automations: Arc<dyn AutomationStore>,
    runs: Arc<dyn RunStore>,
    dispatcher: Dispatcher,
    clock: Arc<dyn Clock>,
    config: SchedulerConfig,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .finish()
    }
}

impl Scheduler {
    /// `dispatcher` must know the automation kind; `clock` is the one the run store
    /// judges time by (plans compare with the runs' `run_at`).
    pub fn new(
        automations: Arc<dyn AutomationStore>,
        dispatcher: Dispatcher,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
    ) -> Self {
        Self {
            automations,
            runs: dispatcher.store().clone(),
            dispatcher,
            clock,
            config,
        }
    }

    /// Look at every timed automation once.
    pub async fn tick(&self) -> TickReport {
        let mut report = TickReport::default();
        let timed = match self.automations.automations_timed().await {
            Ok(timed) => timed,
            Err(err) => {
                tracing::warn!(error = %err, "scheduler: could not read the timed automations; next tick tries again");
                return report;
            }
        };
        report.automations = timed.len();
        for stored in &timed {
            match self.one(stored).await {
                Ok(Some(Done::Enqueued)) => report.enqueued += 1,
                Ok(Some(Done::Cancelled)) => report.cancelled += 1,
                Ok(None) => {}
                Err(problem) => {
                    report.skipped += 1;
                    tracing::warn!(automation = %stored.id, tenant = %stored.tenant, %problem,
                        "scheduler: automation skipped this tick");
                }
            }
        }
        if report.enqueued + report.cancelled + report.skipped > 0 {
            tracing::info!(
                automations = report.automations,
                enqueued = report.enqueued,
                cancelled = report.cancelled,
                skipped = report.skipped,
                "scheduler tick"
            );
        }
        report
    }

    async fn one(&self, stored: &StoredAutomation) -> Result<Option<Done>, String> {
        let trigger = &stored.automation.trigger;
        let Some(timing) = Timing::of(trigger)? else {
            return Ok(None);
        };
        let Some(key) = schedule::run_key(trigger, stored.id) else {
            return Ok(None);
        };
        let tenant = stored.tenant.to_string();
        let subject = Subject {
            timing: &timing,
            enabled: stored.automation.enabled,
            updated_at: stored.updated_at,
        };
        let mut cancelled = false;
        // At most two rounds: a cancel of a stale tick, then the plan from it.
        for _ in 0..2 {
            let newest = self
                .runs
                .run_find_by_key(&tenant, &key)
                .await
                .map_err(|err| format!("reading its newest run: {err}"))?;
            let now = self.clock.now();
            match schedule::plan(subject, newest.as_ref().map(LastRun::from), now) {
                Plan::Nothing(_) => break,
                Plan::Cancel { run, reason } => {
                    let reply = self
                        .runs
                        .run_request_cancel(run)
                        .await
                        .map_err(|err| format!("cancelling its pending run {run}: {err}"))?;
                    tracing::info!(automation = %stored.id, %run, reason, ?reply,
                        "scheduler: pending tick cancelled");
                    cancelled = true;
                }
                Plan::Enqueue {
                    at,
                    missed,
                    while_running,
                    tick,
                } => {
                    let context = schedule::run_context(&timing, tick, missed, while_running);
                    let trigger_kind = match timing {
                        Timing::Poll { .. } => RunTrigger::Poll,
                        Timing::Cron(_) => RunTrigger::Schedule,
                    };
                    let mut request =
                        run_request(stored, trigger_kind, context).unique_key(key.clone());
                    // Ahead: due at the exact instant; else at once (and may be handed
                    // to this process's idle worker).
                    if at > now {
                        request = request.run_at(at);
                    }
                    let enqueued = self
                        .dispatcher
                        .enqueue(request)
                        .await
                        .map_err(|err| format!("enqueuing its next run: {err}"))?;
                    if let Enqueued::Existing(id) = enqueued {
                        tracing::debug!(automation = %stored.id, run = %id,
                            "scheduler: another tick already enqueued this run");
                        return Ok(None);
                    }
                    let run = enqueued.id();
                    let down = missed - while_running;
                    if down > 0 {
                        tracing::warn!(automation = %stored.id, %run, missed = down, last_missed = %tick,
                            "scheduler: {down} tick(s) were missed while no run was planned for them (the scheduler was down); running once now");
                    } else if while_running > 0 {
                        tracing::info!(automation = %stored.id, %run, missed = while_running, last_missed = %tick,
                            "scheduler: {while_running} tick(s) came while the previous run was still running; running once now");
                    } else {
                        tracing::info!(automation = %stored.id, %run, at = %at,
                            trigger = trigger.kind(), "scheduler: next run enqueued");
                    }
                    return Ok(Some(Done::Enqueued));
                }
            }
        }
        Ok(cancelled.then_some(Done::Cancelled))
    }

    /// Plan the next run of every timed automation whose run this process's worker ended,
    /// the moment the end is written, until `shutdown` — whether this process leads or
    /// not (the automation's unique key keeps one pending run whoever plans it). Ends
    /// of other keyed runs are ignored; a listener that lagged says so and leaves the
    /// lost ones to the next tick.
    pub async fn follow(
        self,
        mut ends: broadcast::Receiver<KeyedEnd>,
        shutdown: CancellationToken,
    ) {
        loop {
            let end = tokio::select! {
                _ = shutdown.cancelled() => break,
                end = ends.recv() => end,
            };
            match end {
                Ok(end) => {
                    let Some(id) = schedule::automation_of_key(&end.unique_key) else {
                        continue;
                    };
                    let Ok(tenant) = end.tenant.parse::<TenantId>() else {
                        continue;
                    };
                    match self.automations.automation_get(tenant, id).await {
                        Ok(stored) => match self.one(&stored).await {
                            Ok(_) => {}
                            Err(problem) => tracing::warn!(automation = %id, %tenant, %problem,
                                "scheduler: could not plan the run after the one that ended; the next tick tries again"),
                        },
                        Err(DeskError::NotFound(_)) => {}
                        Err(err) => tracing::warn!(automation = %id, %tenant, error = %err,
                            "scheduler: could not read the automation whose run ended; the next tick tries again"),
                    }
                }
                Err(broadcast::error::RecvError::Lagged(lost)) => tracing::warn!(
                    lost,
                    "scheduler: missed the ends of {lost} keyed runs; the next tick plans their automations"
                ),
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    }

    /// Tick every `config.tick` while `leading` says this process leads, until
    /// `shutdown`.
    pub async fn run(self, shutdown: CancellationToken, mut leading: watch::Receiver<bool>) {
        tracing::info!(tick = ?self.config.tick, "scheduler started");
        loop {
            if *leading.borrow_and_update() {
                self.tick().await;
                let nudged = async {
                    match &self.config.nudge {
                        Some(nudge) => nudge.notified().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(self.config.tick) => {}
                    () = nudged => tracing::debug!("scheduler: nudged by a save"),
                    changed = leading.changed() => if changed.is_err() { break },
                }
            } else {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    changed = leading.changed() => if changed.is_err() { break },
                }
            }
        }
        tracing::info!("scheduler stopped");
    }
}

enum Done {
    Enqueued,
    Cancelled,
}
