//! Process liveness: which processes hold runs, which of them are dead, and the takeover
//! of a dead process's runs without waiting out their leases.
//!
//! Every process that executes runs registers itself in the store's process registry
//! ([`RunStore::process_register`]) with its [`ProcessFacts`] — the host it runs on, its
//! pid and its start time — and beats every [`LivenessConfig::beat`]. Its claims and
//! hand-offs name it as the holder of the runs they take (`locked_proc`). Each process
//! reads the registry at every beat and decides with the pure [`plan_takeover`]:
//!
//! - a process on this host (same host name, boot and pid namespace) whose pid is gone,
//!   or whose pid now belongs to a process with another start time, is dead at once
//!   (SQLite: every process is on one host, so this is the rule that applies);
//! - any other process is dead when its last beat is older than
//!   [`LivenessConfig::timeout`] (Postgres across hosts, or a frozen process).
//!
//! A dead process is taken over ([`RunStore::process_takeover`]): its running runs' leases
//! end now, so the next claim reclaims them — a fresh owner token, `reclaims + 1` — exactly
//! as for a lease that ran out. Fencing is unchanged: a process wrongly judged dead (a
//! frozen one that wakes) has its writes refused by the owner check, as it would after its
//! lease expired. A live process whose row was taken over re-registers at its next beat.
//!
//! Left out: the claim and fencing rules themselves (the store's contract), and what a
//! process does with the runs it reclaims (the worker).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::StoreError;
use crate::store::{RunStore, StoreResult};

/// The id of one process in the registry (fresh at each start).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcessId(pub Uuid);

impl ProcessId {
    /// A new random id (UUIDv4), as a process takes one when it starts.
    pub fn fresh() -> Self {
        ProcessId(Uuid::new_v4())
    }
}

impl fmt::Debug for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProcessId({})", self.0)
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What proves, on its own host, that a process is still the one that registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessFacts {
    /// The host name, boot id and pid namespace (`name/boot/pidns`): two processes with
    /// the same `host` see the same pids.
    pub host: String,
    /// Its process id on that host.
    pub pid: u32,
    /// The process's start time as its host tells it (Linux: clock ticks since boot,
    /// from `/proc/<pid>/stat`); empty where the host tells none (then only the beat
    /// counts).
    pub started: String,
}

impl ProcessFacts {
    /// This process's facts.
    pub fn of_this_process() -> Self {
        let pid = std::process::id();
        Self {
            host: this_host(),
            pid,
            started: start_time_of(pid).unwrap_or_default(),
        }
    }
}

/// One row of the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRecord {
    /// The process's id, fresh at each start.
    pub id: ProcessId,
    /// Its host, pid and start time as it registered them.
    pub facts: ProcessFacts,
    /// The last beat, by the store's clock.
    pub beat_at: DateTime<Utc>,
}

/// The registry as read at one instant of the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessList {
    /// The store's now when the registry was read: beats are judged against it.
    pub now: DateTime<Utc>,
    /// Every process in the registry at that instant (the reader's own row too).
    pub processes: Vec<ProcessRecord>,
}

/// What the judging process knows of its own host: its `host` and the start time of each
/// pid it looked up (`None`: no such process). `probed = false`: the host tells nothing
/// (no `/proc`), only beats count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostView {
    /// The judging process's own host (`name/boot/pidns`, as in [`ProcessFacts::host`]).
    pub host: String,
    /// Whether the host answered pid lookups; `false`: only beats count.
    pub probed: bool,
    /// The start time of each pid looked up on this host; `None`: no such process now.
    pub pids: HashMap<u32, Option<String>>,
}

impl HostView {
    /// Looks up, on this host (`me`: this process's facts, read once at its start),
    /// every pid of `processes` registered on this host. Pid lookups work here when
    /// this process's own start time could be read.
    pub fn probe(me: &ProcessFacts, processes: &[ProcessRecord]) -> Self {
        let host = me.host.clone();
        let probed = !me.started.is_empty();
        let pids = if probed {
            processes
                .iter()
                .filter(|record| record.facts.host == host)
                .map(|record| (record.facts.pid, start_time_of(record.facts.pid)))
                .collect()
        } else {
            HashMap::new()
        };
        Self { host, probed, pids }
    }
}

/// Why a process is judged dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadBecause {
    /// On this host, its pid is gone.
    PidGone,
    /// On this host, its pid belongs to a process started at another time.
    PidReused,
    /// Its last beat is older than the timeout.
    Silent {
        /// How long ago its last beat was, by the store's clock.
        since: Duration,
    },
}

impl fmt::Display for DeadBecause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeadBecause::PidGone => write!(f, "its pid is gone"),
            DeadBecause::PidReused => write!(f, "its pid belongs to another process now"),
            DeadBecause::Silent { since } => write!(f, "no beat for {} ms", since.as_millis()),
        }
    }
}

/// One process to take over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    /// The dead process.
    pub id: ProcessId,
    /// Its pid, for the log.
    pub pid: u32,
    /// Why it is judged dead.
    pub because: DeadBecause,
}

/// The processes of `list` to take over, judged by `me` (never itself) with `timeout`
/// and what it knows of its host (see the module's rules).
pub fn plan_takeover(
    list: &ProcessList,
    me: ProcessId,
    timeout: Duration,
    local: &HostView,
) -> Vec<Takeover> {
    let mut dead = Vec::new();
    for record in &list.processes {
        if record.id == me {
            continue;
        }
        let on_this_host = local.probed && record.facts.host == local.host;
        let by_pid = if on_this_host && !record.facts.started.is_empty() {
            match local.pids.get(&record.facts.pid) {
                Some(None) => Some(DeadBecause::PidGone),
                Some(Some(started)) if *started != record.facts.started => {
                    Some(DeadBecause::PidReused)
                }
                _ => None,
            }
        } else {
            None
        };
        let silent = (list.now - record.beat_at)
            .to_std()
            .unwrap_or(Duration::ZERO);
        let because =
            by_pid.or_else(|| (silent > timeout).then_some(DeadBecause::Silent { since: silent }));
        if let Some(because) = because {
            dead.push(Takeover {
                id: record.id,
                pid: record.facts.pid,
                because,
            });
        }
    }
    dead
}

/// The liveness settings.
#[derive(Debug, Clone, Copy)]
pub struct LivenessConfig {
    /// How often this process beats and looks for dead processes.
    pub beat: Duration,
    /// A process whose last beat is older than this is dead (when its host cannot tell).
    pub timeout: Duration,
}

impl Default for LivenessConfig {
    fn default() -> Self {
        Self {
            beat: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
        }
    }
}

/// This process's liveness: registered in the store, beating and taking over.
pub struct Liveness {
    store: Arc<dyn RunStore>,
    id: ProcessId,
    facts: ProcessFacts,
    config: LivenessConfig,
}

impl Liveness {
    /// Registers this process as `id` (the holder its worker claims with) and makes a
    /// first takeover pass at once: a process restarted after a crash takes its
    /// predecessor's runs over before its worker's first claim needs them.
    pub async fn start(
        store: Arc<dyn RunStore>,
        id: ProcessId,
        config: LivenessConfig,
    ) -> StoreResult<Self> {
        if config.beat.is_zero() || config.timeout <= config.beat {
            return Err(StoreError::Invalid(format!(
                "liveness: the timeout ({:?}) must be longer than the beat ({:?}), which must not be zero",
                config.timeout, config.beat
            )));
        }
        let facts = ProcessFacts::of_this_process();
        store.process_register(id, &facts).await?;
        let liveness = Self {
            store,
            id,
            facts,
            config,
        };
        if let Err(err) = liveness.pass().await {
            tracing::warn!(error = %err, "liveness: the first takeover pass failed; the next beat tries again");
        }
        Ok(liveness)
    }

    /// This process's id in the registry.
    pub fn id(&self) -> ProcessId {
        self.id
    }

    /// Reads the registry, judges it and takes the dead processes over; answers what it
    /// took over, with the runs released for each.
    pub async fn pass(&self) -> StoreResult<Vec<(Takeover, u64)>> {
        let list = self.store.process_list().await?;
        let local = HostView::probe(&self.facts, &list.processes);
        let mut done = Vec::new();
        for takeover in plan_takeover(&list, self.id, self.config.timeout, &local) {
            let released = self.store.process_takeover(takeover.id).await?;
            tracing::warn!(
                process = %takeover.id,
                pid = takeover.pid,
                runs = released,
                "liveness: took over a dead process ({}): {released} runs released to be reclaimed",
                takeover.because
            );
            done.push((takeover, released));
        }
        Ok(done)
    }

    /// Beats and passes every beat until `shutdown`, then leaves the registry (a clean
    /// stop: the worker gave its runs back).
    pub async fn run(self, shutdown: CancellationToken) {
        let mut ticks = tokio::time::interval(self.config.beat);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = ticks.tick() => {}
            }
            match self.store.process_beat(self.id).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(process = %self.id, "liveness: this process was taken over (judged dead); registering again");
                    if let Err(err) = self.store.process_register(self.id, &self.facts).await {
                        tracing::warn!(error = %err, "liveness: could not register again");
                    }
                }
                Err(err) => tracing::warn!(error = %err, "liveness: the beat failed"),
            }
            if let Err(err) = self.pass().await {
                tracing::warn!(error = %err, "liveness: the takeover pass failed");
            }
        }
        if let Err(err) = self.store.process_deregister(self.id).await {
            tracing::warn!(error = %err, "liveness: could not leave the registry");
        }
    }
}

/// `hostname/boot id/pid namespace`, from what the host tells (parts it does not tell
/// are empty).
fn this_host() -> String {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|text| text.trim().to_owned())
            .unwrap_or_default()
    };
    let name = read("/proc/sys/kernel/hostname");
    let boot = read("/proc/sys/kernel/random/boot_id");
    let pidns = std::fs::read_link("/proc/self/ns/pid")
        .map(|link| link.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{name}/{boot}/{pidns}")
}

/// The start time of `pid` on this host (field 22 of `/proc/<pid>/stat`), `None` when
/// there is no such process (or no `/proc`).
fn start_time_of(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    start_time_in_stat(&stat)
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line; the command name (field 2) may
/// hold spaces and parentheses, so the fields are counted after its last `)`.
fn start_time_in_stat(stat: &str) -> Option<String> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name come field 3 (state) onwards: starttime is the 20th of them.
    after.split_whitespace().nth(19).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        pid: u32,
        started: &str,
        host: &str,
        beat_ago_ms: i64,
        now: DateTime<Utc>,
    ) -> ProcessRecord {
        ProcessRecord {
            id: ProcessId::fresh(),
            facts: ProcessFacts {
                host: host.into(),
                pid,
                started: started.into(),
            },
            beat_at: now - chrono::Duration::milliseconds(beat_ago_ms),
        }
    }

    fn view(pids: &[(u32, Option<&str>)]) -> HostView {
        HostView {
            host: "here".into(),
            probed: true,
            pids: pids
                .iter()
                .map(|(pid, started)| (*pid, started.map(str::to_owned)))
                .collect(),
        }
    }

    const TIMEOUT: Duration = Duration::from_secs(10);

    #[test]
    fn a_process_of_this_host_whose_pid_is_gone_is_dead_at_once_whatever_its_beat() {
        let now = Utc::now();
        let gone = record(41, "900", "here", 0, now);
        let list = ProcessList {
            now,
            processes: vec![gone.clone()],
        };
        let plan = plan_takeover(&list, ProcessId::fresh(), TIMEOUT, &view(&[(41, None)]));
        assert_eq!(
            plan.len(),
            1,
            "the process whose pid is gone is taken over: {plan:?}"
        );
        assert_eq!(plan[0].id, gone.id, "the right process");
        assert_eq!(
            plan[0].because,
            DeadBecause::PidGone,
            "because its pid is gone"
        );
    }

    #[test]
    fn a_pid_reused_by_a_process_started_at_another_time_proves_the_registered_one_dead() {
        let now = Utc::now();
        let list = ProcessList {
            now,
            processes: vec![record(41, "900", "here", 0, now)],
        };
        let plan = plan_takeover(
            &list,
            ProcessId::fresh(),
            TIMEOUT,
            &view(&[(41, Some("1200"))]),
        );
        assert_eq!(
            plan.iter().map(|t| t.because.clone()).collect::<Vec<_>>(),
            vec![DeadBecause::PidReused],
            "a reused pid is not the registered process"
        );
    }

    #[test]
    fn a_live_process_of_this_host_that_beats_is_left_alone() {
        let now = Utc::now();
        let list = ProcessList {
            now,
            processes: vec![record(41, "900", "here", 500, now)],
        };
        let plan = plan_takeover(
            &list,
            ProcessId::fresh(),
            TIMEOUT,
            &view(&[(41, Some("900"))]),
        );
        assert!(plan.is_empty(), "alive and beating: {plan:?}");
    }

    #[test]
    fn a_process_of_another_host_is_judged_by_its_beat_alone() {
        let now = Utc::now();
        let fresh = record(41, "900", "there", 9_000, now);
        let stale = record(42, "900", "there", 10_500, now);
        let list = ProcessList {
            now,
            processes: vec![fresh, stale.clone()],
        };
        // The same pids are gone here, which says nothing of another host.
        let plan = plan_takeover(
            &list,
            ProcessId::fresh(),
            TIMEOUT,
            &view(&[(41, None), (42, None)]),
        );
        assert_eq!(plan.len(), 1, "only the silent one: {plan:?}");
        assert_eq!(plan[0].id, stale.id, "the one silent past the timeout");
        assert!(
            matches!(plan[0].because, DeadBecause::Silent { .. }),
            "dead because silent: {plan:?}"
        );
    }

    #[test]
    fn a_frozen_process_of_this_host_is_dead_once_silent_past_the_timeout() {
        let now = Utc::now();
        let list = ProcessList {
            now,
            processes: vec![record(41, "900", "here", 11_000, now)],
        };
        let plan = plan_takeover(
            &list,
            ProcessId::fresh(),
            TIMEOUT,
            &view(&[(41, Some("900"))]),
        );
        assert_eq!(
            plan.len(),
            1,
            "its pid lives but it stopped beating: {plan:?}"
        );
    }

    #[test]
    fn a_process_never_takes_itself_over_and_an_unprobed_host_counts_beats_only() {
        let now = Utc::now();
        let me = record(41, "900", "here", 60_000, now);
        let other = record(42, "900", "here", 0, now);
        let list = ProcessList {
            now,
            processes: vec![me.clone(), other],
        };
        let unprobed = HostView {
            host: "here".into(),
            probed: false,
            pids: HashMap::new(),
        };
        let plan = plan_takeover(&list, me.id, TIMEOUT, &unprobed);
        assert!(
            plan.is_empty(),
            "not itself, and no pid proof without a probe: {plan:?}"
        );
    }

    #[test]
    fn the_start_time_is_field_22_even_when_the_name_holds_spaces_and_parentheses() {
        let stat =
            "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(
            start_time_in_stat(stat),
            Some("987654".into()),
            "field 22 after the name"
        );
    }

    #[test]
    fn this_process_is_found_alive_on_its_own_host() {
        let facts = ProcessFacts::of_this_process();
        if facts.started.is_empty() {
            return; // no /proc here: only beats count, nothing to probe
        }
        assert_eq!(
            start_time_of(facts.pid),
            Some(facts.started.clone()),
            "this process's start time reads back the same"
        );
    }
}
