//! When `poll` and `schedule` automations run — the pure half of the scheduler
//! (`crate::scheduler` does the reading and writing).
//!
//! # The model
//!
//! Each timed automation has **at most one pending run**, enqueued ahead of time for its
//! next tick with the unique key [`run_key`] (`poll:<id>` or `schedule:<id>`). The engine
//! starts that run at its `run_at` like any delayed run, so ticks are on time whatever the
//! scheduler's own tick is. After the run finished (whatever its end), the scheduler's
//! next tick enqueues the one after it. No state is kept besides the runs: the newest
//! run with the key (`RunStore::run_find_by_key`, finished runs included) is the
//! automation's history.
//!
//! # Contract of [`plan`]
//!
//! Given the automation (trigger, enabled, `updated_at`), its newest keyed run (or none)
//! and now:
//! - **paused**: a pending tick is cancelled; nothing else.
//! - **a pending tick older than the automation's last change** (`created_at <
//!   updated_at`: the cron, the interval or the time zone may have changed): cancelled;
//!   the scheduler then plans again from the cancelled run.
//! - **a live run** (pending or running): nothing — one at a time.
//! - **poll**, none yet: now. After a run: `anchor + interval`, where `anchor` is the
//!   run's `run_at` (when it last ran) but never later than now; a due time in the past
//!   means now.
//! - **schedule**, none yet: the cron's first tick after now. After a run: the first tick
//!   after `anchor`. **Missed ticks** (the tick is already past) run **once**, now, never
//!   one run per missed tick; the run's context says how many were missed
//!   (`_schedule.missedTicks`) and how many of them came while the previous run was
//!   still running (`_schedule.missedWhileRunning`: a run longer than the period). The
//!   rest came after it ended while no run was planned for them: real downtime, the only
//!   case the scheduler warns of.
//!
//! # When the plan is made
//!
//! The scheduler plans an automation when its run ended (the worker that wrote the end
//! tells it, [`fronta_engine::Worker::keyed_ends`]), when the automation was saved,
//! paused or resumed in this process, and at every scheduler tick as a fallback. The
//! next run is therefore pending, due at its exact instant, from the moment the previous
//! one ended: it starts on time whatever the scheduler's tick is.
//!
//! Intervals: `intervalSec`, else the source's default ([`default_interval`]); the
//! validator refuses less than `MIN_POLL_INTERVAL_SEC`. Cron: 5 fields (6–7 with seconds
//! and year), in the trigger's IANA time zone (default UTC), so "07:00 on weekdays"
//! follows daylight-saving time.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use fronta_engine::{Run, RunId, RunStatus};
use serde_json::{Map, Value, json};

use crate::model::{PollSource, Trigger};
use crate::store::AutomationId;

/// How many consecutive ticks [`CronSchedule::check_fires`] measures the gaps of.
pub const GAPS_CHECKED: usize = 64;

/// Missed ticks are counted up to this many (the count is for the log and the context;
/// the run happens once either way).
pub const MAX_MISSED_COUNTED: u32 = 10_000;

/// The poll period of a source when `intervalSec` is not given (DESIGN.md §4.1).
pub fn default_interval(source: PollSource) -> Duration {
    match source {
        PollSource::Mail => Duration::from_secs(60),
        PollSource::Messages => Duration::from_secs(30),
        PollSource::Http => Duration::from_secs(60),
    }
}

/// The unique key of an automation's timed runs.
pub fn run_key(trigger: &Trigger, automation: AutomationId) -> Option<String> {
    match trigger {
        Trigger::Poll { .. } => Some(format!("poll:{automation}")),
        Trigger::Schedule { .. } => Some(format!("schedule:{automation}")),
        _ => None,
    }
}

/// The automation whose timed runs carry `key` ([`run_key`]'s inverse); `None` for any
/// other key.
pub fn automation_of_key(key: &str) -> Option<AutomationId> {
    let id = key
        .strip_prefix("poll:")
        .or_else(|| key.strip_prefix("schedule:"))?;
    id.parse().ok()
}

/// A parsed cron expression with its zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    cron: Cron,
    zone: Tz,
}

impl CronSchedule {
    /// Parses `cron` in `timezone` (an IANA name; `None` is UTC), or says what is wrong.
    pub fn parse(cron: &str, timezone: Option<&str>) -> Result<Self, String> {
        let zone = match timezone {
            None => Tz::UTC,
            Some(name) => Tz::from_str(name.trim()).map_err(|_| {
                format!("unknown time zone \"{name}\" (use an IANA name such as Europe/Prague)")
            })?,
        };
        let parsed =
            Cron::from_str(cron).map_err(|err| format!("cron \"{cron}\" is not valid: {err}"))?;
        Ok(Self { cron: parsed, zone })
    }

    /// The first tick strictly after `after`, or `None` when there is none (a pattern
    /// that never matches, such as the 31st of February).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.zone);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|next| next.with_timezone(&Utc))
    }

    /// Whether the pattern is one a schedule may have: it fires at all after `from`, and
    /// no two of its next [`GAPS_CHECKED`] ticks are closer than `min_gap`. Else what is
    /// wrong, naming the limit.
    pub fn check_fires(&self, from: DateTime<Utc>, min_gap: Duration) -> Result<(), String> {
        let ticks = self.next_ticks(from, GAPS_CHECKED + 1);
        if ticks.is_empty() {
            return Err(format!(
                "cron never fires ({}): no date matches it",
                self.describe()
            ));
        }
        for pair in ticks.windows(2) {
            let gap = (pair[1] - pair[0]).to_std().unwrap_or_default();
            if gap < min_gap {
                return Err(format!(
                    "cron fires {} s apart ({}); a schedule runs at most every {} s \
                     (MIN_SCHEDULE_INTERVAL)",
                    gap.as_secs(),
                    self.describe(),
                    min_gap.as_secs()
                ));
            }
        }
        Ok(())
    }

    /// The next `count` ticks after `after` (fewer when the pattern ends).
    pub fn next_ticks(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut ticks = Vec::with_capacity(count);
        let mut at = after;
        while ticks.len() < count {
            match self.next_after(at) {
                Some(next) => {
                    ticks.push(next);
                    at = next;
                }
                None => break,
            }
        }
        ticks
    }

    /// A person's reading of the pattern ("At 07:00 on Monday through Friday").
    pub fn describe(&self) -> String {
        self.cron.describe()
    }
}

/// How an automation is timed, from its trigger.
#[derive(Debug, Clone)]
pub enum Timing {
    Poll { source: PollSource, every: Duration },
    Cron(Box<CronSchedule>),
}

impl Timing {
    /// `None` for triggers the scheduler does not time; `Err` for a cron or zone that does
    /// not parse (the validator refuses those on save; an older saved one is reported).
    pub fn of(trigger: &Trigger) -> Result<Option<Self>, String> {
        Ok(match trigger {
            Trigger::Poll {
                source,
                interval_sec,
                ..
            } => Some(Timing::Poll {
                source: *source,
                every: interval_sec
                    .map(Duration::from_secs)
                    .unwrap_or_else(|| default_interval(*source)),
            }),
            Trigger::Schedule { cron, timezone } => Some(Timing::Cron(Box::new(
                CronSchedule::parse(cron, timezone.as_deref())?,
            ))),
            _ => None,
        })
    }
}

/// What the scheduler knows of an automation when it plans.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub timing: &'a Timing,
    pub enabled: bool,
    pub updated_at: DateTime<Utc>,
}

/// What to do for one automation now.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Nothing to do; the reason, for the log.
    Nothing(&'static str),
    /// Cancel this pending run (paused, or planned before the automation changed).
    Cancel { run: RunId, reason: &'static str },
    /// Enqueue the next run, due at `at` (now or later).
    Enqueue {
        at: DateTime<Utc>,
        /// Ticks that passed without a run (cron only), counted up to
        /// [`MAX_MISSED_COUNTED`].
        missed: u32,
        /// Of `missed`, those that came while the previous run was still running.
        while_running: u32,
        /// The tick this run stands for (cron: the last missed tick when any were missed).
        tick: DateTime<Utc>,
    },
}

/// What [`plan`] reads of the newest keyed run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastRun {
    pub id: RunId,
    pub status: RunStatus,
    pub run_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    /// When it reached its end (`None` while pending or running).
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<&Run> for LastRun {
    fn from(run: &Run) -> Self {
        Self {
            id: run.id,
            status: run.status,
            run_at: run.run_at,
            created_at: run.created_at,
            finished_at: run.finished_at(),
        }
    }
}

fn is_pending(status: RunStatus) -> bool {
    matches!(status, RunStatus::Scheduled | RunStatus::Queued)
}

/// See the module's contract.
pub fn plan(subject: Subject<'_>, newest: Option<LastRun>, now: DateTime<Utc>) -> Plan {
    if let Some(run) = newest
        && is_pending(run.status)
    {
        if !subject.enabled {
            return Plan::Cancel {
                run: run.id,
                reason: "the automation is paused",
            };
        }
        if run.created_at < subject.updated_at {
            return Plan::Cancel {
                run: run.id,
                reason: "the automation changed after this tick was planned",
            };
        }
    }
    if !subject.enabled {
        return Plan::Nothing("paused");
    }
    if newest.is_some_and(|run| !run.status.is_terminal()) {
        return Plan::Nothing("its run is pending or running");
    }
    let anchor = newest.map(|run| run.run_at.min(now));
    match subject.timing {
        Timing::Poll { every, .. } => {
            let due = match anchor {
                None => now,
                Some(anchor) => anchor + chrono::Duration::from_std(*every).unwrap_or_default(),
            };
            let at = due.max(now);
            Plan::Enqueue {
                at,
                missed: 0,
                while_running: 0,
                tick: at,
            }
        }
        Timing::Cron(schedule) => {
            let Some(next) = schedule.next_after(anchor.unwrap_or(now)) else {
                return Plan::Nothing("the cron expression has no further tick");
            };
            if next > now {
                return Plan::Enqueue {
                    at: next,
                    missed: 0,
                    while_running: 0,
                    tick: next,
                };
            }
            // Missed ticks: count them (bounded), run once now. Those up to the end of
            // the last run came while it ran.
            let ended = newest.and_then(|run| run.finished_at);
            let (mut missed, mut while_running, mut last) = (0, 0, next);
            let mut tick = Some(next);
            while missed < MAX_MISSED_COUNTED {
                match tick {
                    Some(at) if at <= now => {
                        missed += 1;
                        if ended.is_some_and(|ended| at <= ended) {
                            while_running += 1;
                        }
                        last = at;
                        tick = schedule.next_after(at);
                    }
                    _ => break,
                }
            }
            Plan::Enqueue {
                at: now,
                missed,
                while_running,
                tick: last,
            }
        }
    }
}

/// The run context of a timed run: `_poll` or `_schedule` with what the tree may want.
pub fn run_context(
    timing: &Timing,
    tick: DateTime<Utc>,
    missed: u32,
    while_running: u32,
) -> Map<String, Value> {
    let mut context = Map::new();
    let at = tick.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    match timing {
        Timing::Poll { source, every } => {
            context.insert(
                "_poll".into(),
                json!({"source": source.as_str(), "intervalSec": every.as_secs(), "tick": at}),
            );
        }
        Timing::Cron(_) => {
            context.insert(
                "_schedule".into(),
                json!({"scheduledFor": at, "missedTicks": missed, "missedWhileRunning": while_running}),
            );
        }
    }
    context
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("an RFC 3339 instant")
            .with_timezone(&Utc)
    }

    fn run(status: RunStatus, run_at: DateTime<Utc>, created_at: DateTime<Utc>) -> LastRun {
        LastRun {
            id: RunId::new_v7(),
            status,
            run_at,
            created_at,
            finished_at: status.is_terminal().then_some(run_at),
        }
    }

    fn poll(every: u64) -> Timing {
        Timing::Poll {
            source: PollSource::Http,
            every: Duration::from_secs(every),
        }
    }

    fn cron(expr: &str, zone: Option<&str>) -> Timing {
        Timing::Cron(Box::new(
            CronSchedule::parse(expr, zone).expect("a valid cron"),
        ))
    }

    fn subject(timing: &Timing) -> Subject<'_> {
        Subject {
            timing,
            enabled: true,
            updated_at: at("2026-01-01T00:00:00Z"),
        }
    }

    #[test]
    fn a_new_poll_runs_now_then_one_interval_after_its_last_run() {
        let timing = poll(60);
        let now = at("2026-03-02T10:00:00Z");
        assert_eq!(
            plan(subject(&timing), None, now),
            Plan::Enqueue {
                at: now,
                missed: 0,
                while_running: 0,
                tick: now
            }
        );
        let last = run(RunStatus::Completed, at("2026-03-02T09:59:30Z"), now);
        let next = at("2026-03-02T10:00:30Z");
        assert_eq!(
            plan(subject(&timing), Some(last), now),
            Plan::Enqueue {
                at: next,
                missed: 0,
                while_running: 0,
                tick: next
            },
            "enqueued ahead, due 60 s after the last run"
        );
        let long_ago = run(RunStatus::Failed, at("2026-03-01T00:00:00Z"), now);
        assert_eq!(
            plan(subject(&timing), Some(long_ago), now),
            Plan::Enqueue {
                at: now,
                missed: 0,
                while_running: 0,
                tick: now
            },
            "overdue means now, once"
        );
    }

    #[test]
    fn one_run_at_a_time() {
        let timing = poll(60);
        let now = at("2026-03-02T10:00:00Z");
        for status in [RunStatus::Scheduled, RunStatus::Queued, RunStatus::Running] {
            let live = run(status, now, at("2026-03-02T09:00:00Z"));
            assert_eq!(
                plan(subject(&timing), Some(live), now),
                Plan::Nothing("its run is pending or running"),
                "{status}"
            );
        }
    }

    #[test]
    fn a_paused_automation_loses_its_pending_tick_but_not_its_running_one() {
        let timing = poll(60);
        let now = at("2026-03-02T10:00:00Z");
        let paused = Subject {
            enabled: false,
            ..subject(&timing)
        };
        let pending = run(RunStatus::Scheduled, at("2026-03-02T10:01:00Z"), now);
        assert_eq!(
            plan(paused, Some(pending), now),
            Plan::Cancel {
                run: pending.id,
                reason: "the automation is paused"
            }
        );
        let running = run(RunStatus::Running, now, now);
        assert_eq!(plan(paused, Some(running), now), Plan::Nothing("paused"));
        assert_eq!(plan(paused, None, now), Plan::Nothing("paused"));
    }

    #[test]
    fn a_change_after_the_tick_was_planned_replans_it() {
        let timing = cron("0 7 * * *", None);
        let now = at("2026-03-02T10:00:00Z");
        let planned = run(
            RunStatus::Scheduled,
            at("2026-03-03T07:00:00Z"),
            at("2026-03-02T09:00:00Z"),
        );
        let changed = Subject {
            updated_at: at("2026-03-02T09:30:00Z"),
            ..subject(&timing)
        };
        assert_eq!(
            plan(changed, Some(planned), now),
            Plan::Cancel {
                run: planned.id,
                reason: "the automation changed after this tick was planned"
            }
        );
        let mut cancelled = planned;
        cancelled.status = RunStatus::Cancelled;
        let next = at("2026-03-03T07:00:00Z");
        assert_eq!(
            plan(changed, Some(cancelled), now),
            Plan::Enqueue {
                at: next,
                missed: 0,
                while_running: 0,
                tick: next
            },
            "planned again from now, not from the cancelled run's future time"
        );
    }

    #[test]
    fn cron_ticks_follow_the_time_zone_across_daylight_saving() {
        let timing = cron("0 7 * * MON-FRI", Some("Europe/Prague"));
        // Friday 27 March 2026, 08:00 UTC (09:00 in Prague, winter time): the next
        // weekday 07:00 in Prague is Monday 30 March, after the switch to summer time
        // (UTC+2): 05:00 UTC.
        let now = at("2026-03-27T08:00:00Z");
        let next = at("2026-03-30T05:00:00Z");
        assert_eq!(
            plan(subject(&timing), None, now),
            Plan::Enqueue {
                at: next,
                missed: 0,
                while_running: 0,
                tick: next
            }
        );
        // A week earlier, winter time: 07:00 in Prague is 06:00 UTC.
        let winter = at("2026-03-20T05:00:00Z");
        let next = Utc.with_ymd_and_hms(2026, 3, 20, 6, 0, 0).single();
        assert_eq!(
            plan(subject(&timing), None, winter),
            Plan::Enqueue {
                at: next.expect("an instant"),
                missed: 0,
                while_running: 0,
                tick: next.expect("an instant")
            }
        );
    }

    #[test]
    fn missed_ticks_after_downtime_run_once_and_are_counted() {
        let timing = cron("*/15 * * * *", None);
        // The last run was at 10:00; everything was down until 11:07: the ticks at
        // 10:15, 10:30, 10:45 and 11:00 were missed.
        let last = run(
            RunStatus::Completed,
            at("2026-03-02T10:00:00Z"),
            at("2026-03-02T09:45:00Z"),
        );
        let now = at("2026-03-02T11:07:00Z");
        assert_eq!(
            plan(subject(&timing), Some(last), now),
            Plan::Enqueue {
                at: now,
                missed: 4,
                while_running: 0,
                tick: at("2026-03-02T11:00:00Z")
            }
        );
        // After that catch-up run (run_at 11:07), the next tick is 11:15, ahead.
        let caught_up = run(RunStatus::Completed, now, now);
        let next = at("2026-03-02T11:15:00Z");
        assert_eq!(
            plan(subject(&timing), Some(caught_up), now),
            Plan::Enqueue {
                at: next,
                missed: 0,
                while_running: 0,
                tick: next
            }
        );
    }

    #[test]
    fn ticks_that_came_while_the_last_run_ran_are_told_apart_from_downtime() {
        let timing = cron("*/15 * * * *", None);
        // The 10:00 run ran until 10:40: the ticks at 10:15 and 10:30 came while it ran.
        let mut long = run(
            RunStatus::Completed,
            at("2026-03-02T10:00:00Z"),
            at("2026-03-02T09:45:00Z"),
        );
        long.finished_at = Some(at("2026-03-02T10:40:00Z"));
        let ended = at("2026-03-02T10:40:00Z");
        assert_eq!(
            plan(subject(&timing), Some(long), ended),
            Plan::Enqueue {
                at: ended,
                missed: 2,
                while_running: 2,
                tick: at("2026-03-02T10:30:00Z")
            },
            "planned the moment it ended: nothing was missed while nothing ran"
        );
        // Had everything gone down at 10:40 until 11:07, 10:45 and 11:00 were missed
        // while nothing ran.
        let now = at("2026-03-02T11:07:00Z");
        assert_eq!(
            plan(subject(&timing), Some(long), now),
            Plan::Enqueue {
                at: now,
                missed: 4,
                while_running: 2,
                tick: at("2026-03-02T11:00:00Z")
            }
        );
    }

    #[test]
    fn the_missed_count_is_bounded() {
        let timing = cron("* * * * *", None);
        let last = run(
            RunStatus::Completed,
            at("2025-01-01T00:00:00Z"),
            at("2025-01-01T00:00:00Z"),
        );
        let now = at("2026-01-01T00:00:30Z");
        match plan(subject(&timing), Some(last), now) {
            Plan::Enqueue { at, missed, .. } => {
                assert_eq!(at, now, "once, now");
                assert_eq!(missed, MAX_MISSED_COUNTED, "counted up to the bound");
            }
            other => panic!("expected an enqueue, got {other:?}"),
        }
    }

    #[test]
    fn a_timed_run_key_names_its_automation_and_no_other_key_does() {
        let id = AutomationId::new();
        let schedule = Trigger::Schedule {
            cron: "0 7 * * *".into(),
            timezone: None,
        };
        let key = run_key(&schedule, id).expect("a timed trigger has a key");
        assert_eq!(automation_of_key(&key), Some(id), "{key}");
        assert_eq!(automation_of_key(&format!("poll:{id}")), Some(id));
        assert_eq!(run_key(&Trigger::Manual, id), None);
        for other in ["order-42", "schedule:not-an-id", "poll:", "webhook:{id}"] {
            assert_eq!(automation_of_key(other), None, "{other}");
        }
    }

    #[test]
    fn bad_crons_and_zones_say_what_is_wrong() {
        let err = CronSchedule::parse("61 * * * *", None).expect_err("minute 61");
        assert!(err.contains("61 * * * *"), "{err}");
        let err = CronSchedule::parse("0 7 * * *", Some("Mars/Olympus")).expect_err("zone");
        assert!(err.contains("Mars/Olympus"), "{err}");
        assert!(CronSchedule::parse("0 7 * * MON-FRI", Some("Europe/Prague")).is_ok());
    }

    #[test]
    fn the_context_names_the_tick() {
        let tick = at("2026-03-02T11:00:00Z");
        let context = run_context(&cron("0 * * * *", None), tick, 3, 1);
        assert_eq!(
            Value::Object(context),
            json!({"_schedule": {"scheduledFor": "2026-03-02T11:00:00.000Z", "missedTicks": 3, "missedWhileRunning": 1}})
        );
        let context = run_context(&poll(30), tick, 0, 0);
        assert_eq!(context["_poll"]["source"], "http");
        assert_eq!(context["_poll"]["intervalSec"], 30);
    }
}
