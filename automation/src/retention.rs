//! The retention service: deletes finished runs past their retention
//! ([`fronta_engine::retention`]) in bounded batches with a pause between them, while this
//! process leads (the elected leader on Postgres; the working process on SQLite).
//!
//! What a pass keeps besides what the policy keeps: the run an open incident refers to
//! (its `detail.run`: the admin still reads its step log), and the newest run of every
//! `poll:` and `schedule:` key (the scheduler finds a timed automation's last run by it).
//! A pass that meets an unavailable database logs it and tries again at the next pass.

use std::sync::Arc;
use std::time::Duration;

use crate::store::AutomationStore;
use fronta_desk::access::{AUDIT_PURGE_BATCH, AccessStore};
use fronta_desk::{DeskStore, Keep, TenantRetention};
use fronta_engine::retention::{PruneCounters, Retention};
use fronta_engine::{Clock, RunId, RunStore};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The unique-key prefixes of timed automations' runs (`crate::schedule`): their newest
/// run is never deleted.
pub const TIMED_KEY_PREFIXES: [&str; 2] = ["poll:", "schedule:"];

/// Pages one step of giving freed space back returns at most (4 MiB of 4 KiB pages: a
/// few milliseconds of the writer).
pub const RECLAIM_PAGES: u32 = 1024;

/// `retention` (a tenant's own) within `operator`'s ([`Retention::narrowed`]).
pub fn narrowed(operator: &Retention, retention: &TenantRetention) -> Result<Retention, String> {
    let kept = |keep: Option<Keep>| {
        keep.map(|keep| match keep {
            Keep::Forever => None,
            Keep::Secs(secs) => Some(Duration::from_secs(secs)),
        })
    };
    operator.narrowed(
        kept(retention.completed),
        kept(retention.cancelled),
        kept(retention.failed),
    )
}

/// How a pass is paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Time between two passes (`--retention-every`).
    pub every: Duration,
    /// Runs one delete takes at most (`--retention-batch`).
    pub batch: usize,
    /// Pause between two deletes of a pass (`--retention-pause`): the writers go first.
    pub pause: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            every: Duration::from_secs(60),
            batch: 1000,
            pause: Duration::from_millis(50),
        }
    }
}

/// The service; [`RetentionService::run`] until the shutdown.
pub struct RetentionService {
    pub runs: Arc<dyn RunStore>,
    pub desk: Arc<dyn DeskStore>,
    pub clock: Arc<dyn Clock>,
    pub policy: Retention,
    pub config: RetentionConfig,
    pub counters: Arc<PruneCounters>,
    /// The audit log and how long its entries are kept (`--audit-retention`); `None`:
    /// audit entries are not deleted by this service.
    pub audit: Option<(Arc<dyn AccessStore>, Duration)>,
    /// Where rotated webhook tokens and signing secrets are kept: those past their grace
    /// (they stopped working then) are deleted; `None`: left to the next rotation.
    pub retired: Option<Arc<dyn AutomationStore>>,
}

impl RetentionService {
    /// Passes every `config.every` while `leading` says this process leads.
    pub async fn run(self, stop: CancellationToken, mut leading: watch::Receiver<bool>) {
        loop {
            if *leading.borrow() {
                match self.pass(&stop).await {
                    Ok(0) => tracing::debug!("retention: nothing to delete"),
                    Ok(deleted) => tracing::info!(deleted, "retention: finished runs deleted"),
                    Err(err) => {
                        tracing::warn!(error = %err, "retention: the pass stopped; the next one goes on")
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                changed = leading.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(self.config.every) => {}
            }
        }
    }

    /// One pass: every status's batches until a batch comes back short. Answers the runs
    /// it deleted.
    pub async fn pass(&self, stop: &CancellationToken) -> Result<u64, String> {
        self.audit_pass(stop).await?;
        self.retired_pass(stop).await?;
        let keep = self.kept_by_incidents().await?;
        let prefixes: Vec<String> = TIMED_KEY_PREFIXES.iter().map(|p| (*p).to_owned()).collect();
        let own = self
            .desk
            .tenant_retentions()
            .await
            .map_err(|err| format!("reading the tenants' own retention: {err}"))?;
        let now = self.clock.now();
        let limit = self.config.batch.max(1);
        let skip: Vec<String> = own.iter().map(|(tenant, _)| tenant.to_string()).collect();
        let mut batches = self
            .policy
            .batches(now, None, &skip, &keep, &prefixes, limit);
        for (tenant, retention) in &own {
            // A tenant's own retention as saved; one the operator's maximum no longer
            // admits (the flags changed) falls back to the operator's.
            let policy = narrowed(&self.policy, retention).unwrap_or_else(|err| {
                tracing::warn!(%tenant, error = %err,
                    "retention: the tenant's own no longer fits; the operator's applies");
                self.policy
            });
            let tenant = tenant.to_string();
            batches.extend(policy.batches(now, Some(&tenant), &[], &keep, &prefixes, limit));
        }
        let mut total = 0;
        for batch in batches {
            loop {
                if stop.is_cancelled() {
                    return Ok(total);
                }
                let deleted = self
                    .runs
                    .run_prune(&batch)
                    .await
                    .map_err(|err| format!("deleting {} runs: {err}", batch.status))?;
                self.counters.add(batch.status, deleted);
                total += deleted;
                if (deleted as usize) < batch.limit {
                    break;
                }
                tokio::time::sleep(self.config.pause).await;
            }
        }
        if total > 0 {
            self.reclaim(stop).await?;
        }
        self.runs
            .compact_counts()
            .await
            .map_err(|err| format!("folding the run counts: {err}"))?;
        self.counters.pass_done();
        Ok(total)
    }

    /// Deletes audit entries older than their retention, a batch at a time; how many.
    pub async fn audit_pass(&self, stop: &CancellationToken) -> Result<u64, String> {
        let Some((access, kept)) = &self.audit else {
            return Ok(0);
        };
        let before =
            self.clock.now() - chrono::Duration::from_std(*kept).unwrap_or(chrono::Duration::MAX);
        self.in_batches(
            stop,
            AUDIT_PURGE_BATCH,
            "audit entries past their retention",
            || access.audit_purge(before, AUDIT_PURGE_BATCH),
        )
        .await
    }

    /// Deletes rotated webhook tokens and signing secrets past their grace; how many.
    pub async fn retired_pass(&self, stop: &CancellationToken) -> Result<u64, String> {
        let Some(automations) = &self.retired else {
            return Ok(0);
        };
        let now = self.clock.now();
        let limit = self.config.batch.max(1);
        self.in_batches(
            stop,
            limit,
            "rotated webhook tokens and signing secrets past their grace",
            || automations.retired_purge(now, limit),
        )
        .await
    }

    /// Calls `delete` (at most `limit` rows each) until a call deletes fewer, pausing
    /// between two, or the stop; how many rows went in all (`what`: for the log line).
    async fn in_batches<F, Fut>(
        &self,
        stop: &CancellationToken,
        limit: usize,
        what: &str,
        delete: F,
    ) -> Result<u64, String>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<u64, fronta_desk::DeskError>>,
    {
        let mut total = 0;
        while !stop.is_cancelled() {
            let deleted = delete()
                .await
                .map_err(|err| format!("deleting {what}: {err}"))?;
            total += deleted;
            if (deleted as usize) < limit {
                break;
            }
            tokio::time::sleep(self.config.pause).await;
        }
        if total > 0 {
            tracing::info!(deleted = total, "retention: {what} deleted");
        }
        Ok(total)
    }

    /// Gives the pages the deletes freed back to the file system, a short step at a time
    /// (SQLite with incremental vacuum; other stores have nothing to do).
    async fn reclaim(&self, stop: &CancellationToken) -> Result<(), String> {
        loop {
            let left = self
                .runs
                .reclaim_space(RECLAIM_PAGES)
                .await
                .map_err(|err| format!("returning freed space: {err}"))?;
            if left == 0 || stop.is_cancelled() {
                return Ok(());
            }
            tokio::time::sleep(self.config.pause).await;
        }
    }

    /// The runs open incidents refer to.
    async fn kept_by_incidents(&self) -> Result<Vec<RunId>, String> {
        let incidents = self
            .desk
            .incident_open_all()
            .await
            .map_err(|err| format!("reading the open incidents: {err}"))?;
        Ok(incidents
            .iter()
            .filter_map(|incident| incident.detail.get("run")?.as_str()?.parse().ok())
            .collect())
    }
}
