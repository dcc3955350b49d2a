//! Run search: which runs a filter asks for, the same for `GET /api/runs`, `fronta runs
//! list` and the dashboard's runs page — and what a run's record holds (its step log, its
//! attempts' starts and the ticket it worked on), read from the completed run's result or
//! else from its checkpoint.
//!
//! A search combines, all optional: statuses (any of), the automation, its version, the
//! trigger, a ticket the run touched (the event's ticket, or the ticket its steps wrote),
//! created from / to, and `q`, text in the run's last error or its step messages (case
//! folded). The store filters by tenant and, when one status is asked, by status; the rest
//! is [`RunSearch::matches`] over the store's pages, newest first, bounded by the caller's
//! scan limit (`runs_scan_max` on the server).

use chrono::{DateTime, Utc};
use fronta_desk::TicketId;
use fronta_engine::{Run, RunFilter, RunId, RunStatus, RunStore, StoreError, Trigger};

use crate::executor::{AttemptStart, ExecState, RunPayload, StepLog};
use crate::store::AutomationId;

/// What a run's record holds.
#[derive(Debug, Clone, Default)]
pub struct RunRecord {
    pub steps: Vec<StepLog>,
    pub starts: Vec<AttemptStart>,
    /// The ticket its steps worked on: (id, number).
    pub ticket: Option<(String, String)>,
}

/// The record of `run`: a completed run's result, else its checkpoint.
pub fn record_of(run: &Run) -> RunRecord {
    if let Some(result) = run.result.as_ref()
        && let Some(steps) = result.get("steps")
        && let Ok(steps) = serde_json::from_value::<Vec<StepLog>>(steps.clone())
    {
        let starts = result
            .get("starts")
            .and_then(|starts| serde_json::from_value(starts.clone()).ok())
            .unwrap_or_default();
        let ticket = result
            .get("ticket")
            .and_then(|ticket| serde_json::from_value(ticket.clone()).ok());
        return RunRecord {
            steps,
            starts,
            ticket,
        };
    }
    run.state
        .as_deref()
        .and_then(|bytes| ExecState::decode(bytes).ok())
        .map(|state| RunRecord {
            steps: state.steps,
            starts: state.starts,
            ticket: state.ticket,
        })
        .unwrap_or_default()
}

/// A search, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSearch {
    /// Any of these (empty: any status).
    pub statuses: Vec<RunStatus>,
    pub automation: Option<AutomationId>,
    pub version: Option<u32>,
    pub trigger: Option<Trigger>,
    pub ticket: Option<TicketId>,
    /// Created at or after.
    pub from: Option<DateTime<Utc>>,
    /// Created before (a date given as `to` includes that day).
    pub to: Option<DateTime<Utc>>,
    /// Case-folded text to find in the last error or a step's message.
    pub q: Option<String>,
}

/// A search as typed: each filter's text (`status` may list several, comma separated).
#[derive(Debug, Clone, Default)]
pub struct SearchText<'a> {
    pub status: Option<&'a str>,
    pub automation: Option<&'a str>,
    pub version: Option<&'a str>,
    pub trigger: Option<&'a str>,
    pub from: Option<&'a str>,
    pub to: Option<&'a str>,
    pub q: Option<&'a str>,
}

fn instant(name: &str, text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|at| at.with_timezone(&Utc))
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d")
                .map(|day| day.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc())
        })
        .map_err(|_| {
            format!(
                "{name} must be an RFC 3339 instant (2026-12-01T08:00:00Z) or a date \
                 (2026-12-01), got {text:?}"
            )
        })
}

impl RunSearch {
    /// Parse `text`; the ticket is resolved by the caller (a number needs the desk).
    pub fn parse(text: &SearchText<'_>) -> Result<RunSearch, String> {
        let mut search = RunSearch::default();
        if let Some(statuses) = text.status.filter(|text| !text.trim().is_empty()) {
            for status in statuses.split(',') {
                let status: RunStatus = status.trim().parse()?;
                if !search.statuses.contains(&status) {
                    search.statuses.push(status);
                }
            }
        }
        if let Some(automation) = text.automation.filter(|text| !text.trim().is_empty()) {
            search.automation =
                Some(automation.trim().parse().map_err(|_| {
                    format!("automation must be an automation id, got {automation:?}")
                })?);
        }
        if let Some(version) = text.version.filter(|text| !text.trim().is_empty()) {
            search.version = Some(
                version
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|version| *version >= 1)
                    .ok_or_else(|| {
                        format!("version must be a version number (1, 2, …), got {version:?}")
                    })?,
            );
        }
        if let Some(trigger) = text.trigger.filter(|text| !text.trim().is_empty()) {
            search.trigger = Some(trigger.trim().parse()?);
        }
        if let Some(from) = text.from.filter(|text| !text.trim().is_empty()) {
            search.from = Some(instant("from", from)?);
        }
        if let Some(to) = text.to.filter(|text| !text.trim().is_empty()) {
            let at = instant("to", to)?;
            // A date names a whole day: `to=2026-12-01` includes it.
            let whole_day = DateTime::parse_from_rfc3339(to.trim()).is_err();
            search.to = Some(if whole_day {
                at + chrono::Duration::days(1)
            } else {
                at
            });
        }
        if let (Some(from), Some(to)) = (search.from, search.to)
            && from >= to
        {
            return Err(format!(
                "from ({}) must come before to ({})",
                from.to_rfc3339(),
                to.to_rfc3339()
            ));
        }
        search.q = text
            .q
            .map(str::trim)
            .filter(|q| !q.is_empty())
            .map(str::to_lowercase);
        Ok(search)
    }

    /// The one status the store can filter by (several, or none: `None`).
    pub fn store_status(&self) -> Option<RunStatus> {
        match self.statuses.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// Whether every filter is the store's own (tenant, one status): no run is read
    /// that the page does not show.
    pub fn store_only(&self) -> bool {
        self.statuses.len() <= 1
            && self.automation.is_none()
            && self.version.is_none()
            && self.trigger.is_none()
            && self.ticket.is_none()
            && self.from.is_none()
            && self.to.is_none()
            && self.q.is_none()
    }

    /// Whether `run` is one the search asks for.
    pub fn matches(&self, run: &Run) -> bool {
        if !self.statuses.is_empty() && !self.statuses.contains(&run.status) {
            return false;
        }
        if self.trigger.is_some_and(|trigger| run.trigger != trigger) {
            return false;
        }
        if self.from.is_some_and(|from| run.created_at < from)
            || self.to.is_some_and(|to| run.created_at >= to)
        {
            return false;
        }
        let payload =
            if self.automation.is_some() || self.version.is_some() || self.ticket.is_some() {
                match serde_json::from_value::<RunPayload>(run.payload.clone()) {
                    Ok(payload) => Some(payload),
                    Err(_) => return false,
                }
            } else {
                None
            };
        if let Some(payload) = &payload
            && (self
                .automation
                .is_some_and(|id| payload.automation_id != id)
                || self
                    .version
                    .is_some_and(|version| payload.automation_version != version))
        {
            return false;
        }
        let needs_record = self.ticket.is_some() || self.q.is_some();
        let record = needs_record.then(|| record_of(run));
        if let Some(ticket) = self.ticket {
            let by_event = payload.as_ref().and_then(|payload| payload.ticket) == Some(ticket);
            let by_steps = record
                .as_ref()
                .and_then(|record| record.ticket.as_ref())
                .is_some_and(|(id, _)| *id == ticket.to_string());
            if !by_event && !by_steps {
                return false;
            }
        }
        if let Some(q) = &self.q {
            let in_error = run
                .last_error
                .as_deref()
                .is_some_and(|error| error.to_lowercase().contains(q));
            let in_steps = record.as_ref().is_some_and(|record| {
                record
                    .steps
                    .iter()
                    .any(|step| step.message.to_lowercase().contains(q))
            });
            if !in_error && !in_steps {
                return false;
            }
        }
        true
    }
}

/// One page of a search: the runs, newest first, and where the next page starts
/// (`None`: nothing follows).
#[derive(Debug, Clone, Default)]
pub struct Found {
    pub runs: Vec<Run>,
    pub next: Option<RunId>,
}

/// A page of up to `size` runs of `tenant` (every tenant: `None`) matching `search`,
/// created before `before`, newest first. At most `scan_max` runs are read: a page may
/// then hold fewer than `size` and still have a `next` — follow it until it is `None`.
pub async fn search(
    store: &dyn RunStore,
    tenant: Option<String>,
    kind: Option<String>,
    search: &RunSearch,
    before: Option<RunId>,
    size: usize,
    scan_max: usize,
) -> Result<Found, StoreError> {
    let batch = if search.store_only() {
        size + 1
    } else {
        (size + 1).max(100)
    };
    let mut cursor = before;
    let mut runs: Vec<Run> = Vec::with_capacity(size);
    let mut scanned = 0usize;
    loop {
        let page = store
            .run_list(RunFilter {
                status: search.store_status(),
                kind: kind.clone(),
                tenant: tenant.clone(),
                before: cursor,
                limit: batch,
            })
            .await?;
        let exhausted = page.len() < batch;
        for run in page {
            scanned += 1;
            cursor = Some(run.id);
            if search.matches(&run) {
                if runs.len() == size {
                    // One more matches: the page is full and there is a next one.
                    let next = runs.last().map(|run| run.id);
                    return Ok(Found { runs, next });
                }
                runs.push(run);
            }
            if scanned >= scan_max {
                return Ok(Found { runs, next: cursor });
            }
        }
        if exhausted {
            return Ok(Found { runs, next: None });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_parses_each_filter_and_names_what_does_not_fit() {
        let search = RunSearch::parse(&SearchText {
            status: Some("failed, suppressed,failed"),
            version: Some("2"),
            trigger: Some("webhook"),
            from: Some("2026-12-01"),
            to: Some("2026-12-02T08:00:00Z"),
            q: Some("  Disk FULL "),
            ..SearchText::default()
        })
        .expect("a search");
        assert_eq!(
            search.statuses,
            vec![RunStatus::Failed, RunStatus::Suppressed],
            "several statuses, once each"
        );
        assert_eq!(search.version, Some(2));
        let day = RunSearch::parse(&SearchText {
            to: Some("2026-12-01"),
            ..SearchText::default()
        })
        .expect("a search");
        assert_eq!(
            day.to.map(|to| to.to_rfc3339()),
            Some("2026-12-02T00:00:00+00:00".to_owned()),
            "a date includes its day"
        );
        assert_eq!(
            search.q.as_deref(),
            Some("disk full"),
            "q is trimmed and case folded"
        );
        assert_eq!(
            search.store_status(),
            None,
            "two statuses are filtered here"
        );
        assert!(!search.store_only());
        for (text, wanted) in [
            (
                SearchText {
                    status: Some("failde"),
                    ..SearchText::default()
                },
                "failde",
            ),
            (
                SearchText {
                    version: Some("0"),
                    ..SearchText::default()
                },
                "version must be",
            ),
            (
                SearchText {
                    from: Some("yesterday"),
                    ..SearchText::default()
                },
                "from must be",
            ),
            (
                SearchText {
                    from: Some("2026-12-02"),
                    to: Some("2026-12-01"),
                    ..SearchText::default()
                },
                "must come before",
            ),
            (
                SearchText {
                    automation: Some("x"),
                    ..SearchText::default()
                },
                "automation must be",
            ),
        ] {
            let err = RunSearch::parse(&text).expect_err("refused");
            assert!(err.contains(wanted), "{err:?} names {wanted:?}");
        }
        let one = RunSearch::parse(&SearchText {
            status: Some("failed"),
            ..SearchText::default()
        })
        .expect("a search");
        assert!(
            one.store_only() && one.store_status() == Some(RunStatus::Failed),
            "one status is the store's"
        );
    }
}
