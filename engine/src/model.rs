//! The run model: what a run is, its status, and what an enqueue writes.
//!
//! Status has one source of truth: the stored `status` column holds
//! `pending | running | completed | failed | cancelled`; `scheduled` and `queued` are the
//! two faces of `pending`, told apart by `run_at` against the store's clock when a run is
//! read. See `docs/run-states.md` for the state machine.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A run's id: a UUIDv7, so ids sort by creation time.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub Uuid);

impl RunId {
    pub fn new_v7() -> Self {
        RunId(Uuid::now_v7())
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RunId({})", self.0)
    }
}

impl FromStr for RunId {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(text.trim())
            .map(RunId)
            .map_err(|err| format!("{text:?} is not a run id (a UUID): {err}"))
    }
}

/// The owner token of one claim: random and unguessable, new for every claim. Every
/// write about a claimed run carries it, and the store refuses the write when the row
/// holds another token (fencing).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerToken(pub Uuid);

impl OwnerToken {
    pub fn fresh() -> Self {
        OwnerToken(Uuid::new_v4())
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only a prefix: enough to tell owners apart in a log, too little to forge one.
        let text = self.0.simple().to_string();
        write!(f, "OwnerToken({}…)", &text[..8])
    }
}

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    Webhook,
    Event,
    Poll,
    Schedule,
    Manual,
    Api,
}

impl Trigger {
    pub const ALL: [Trigger; 6] = [
        Trigger::Webhook,
        Trigger::Event,
        Trigger::Poll,
        Trigger::Schedule,
        Trigger::Manual,
        Trigger::Api,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Webhook => "webhook",
            Trigger::Event => "event",
            Trigger::Poll => "poll",
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Api => "api",
        }
    }
}

impl FromStr for Trigger {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Trigger::ALL
            .into_iter()
            .find(|trigger| trigger.as_str() == text)
            .ok_or_else(|| {
                format!("unknown trigger {text:?} (webhook, event, poll, schedule, manual, api)")
            })
    }
}

/// Where a run is in its life. `Scheduled` and `Queued` are both "pending" in storage.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Pending, `run_at` in the future.
    Scheduled,
    /// Pending and due: a worker may claim it.
    Queued,
    /// Claimed by a worker (its lease may have expired; then it is reclaimable).
    Running,
    Completed,
    Failed,
    Cancelled,
    /// Not run, on purpose: a guard of its kind stopped it before it did anything (the
    /// automation loop guard). Terminal, no attempt spent; a retry by hand starts it.
    Suppressed,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Scheduled,
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Suppressed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Scheduled => "scheduled",
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Suppressed => "suppressed",
        }
    }

    /// Whether a manual retry starts a run in this status: a failed one (from its
    /// checkpoint) or a suppressed one (the guard does not stop a run started by hand).
    pub fn is_retried_by_hand(self) -> bool {
        matches!(self, RunStatus::Failed | RunStatus::Suppressed)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled | RunStatus::Suppressed
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| {
                format!(
                    "unknown status {text:?} (scheduled, queued, running, completed, failed, cancelled, suppressed)"
                )
            })
    }
}

/// A run as stored. Handlers get it read-only (behind an `Arc`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    pub id: RunId,
    pub tenant: String,
    pub kind: String,
    pub payload: serde_json::Value,
    /// The last checkpoint a durable handler saved; `None` before the first one.
    #[serde(skip)]
    pub state: Option<Vec<u8>>,
    pub trigger: Trigger,
    pub unique_key: Option<String>,
    pub priority: i16,
    pub status: RunStatus,
    pub run_at: DateTime<Utc>,
    /// Logical retries spent (bumped only by a retry outcome).
    pub attempts: u32,
    pub max_retries: u32,
    /// Crash reclaims: claims of this run after an earlier owner's lease expired.
    pub reclaims: u32,
    /// Parks: times a worker had no handler for the kind.
    pub parks: u32,
    #[serde(skip)]
    pub locked_by: Option<OwnerToken>,
    pub locked_until: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub cancel_requested: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub failed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub result: Option<serde_json::Value>,
}

impl Run {
    /// When the run reached its terminal status, if it has.
    pub fn finished_at(&self) -> Option<DateTime<Utc>> {
        self.completed_at.or(self.failed_at).or(self.cancelled_at)
    }
}

/// A run about to be inserted: built and validated by the [`crate::Dispatcher`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub id: RunId,
    pub tenant: String,
    pub kind: String,
    pub payload: serde_json::Value,
    pub trigger: Trigger,
    pub unique_key: Option<String>,
    pub priority: i16,
    /// `None` = due at once (the store's now); `Some(delay)` = now + delay by the store's clock.
    pub delay: Option<std::time::Duration>,
    /// An absolute due time; wins over `delay` when both are given.
    pub run_at: Option<DateTime<Utc>>,
    pub max_retries: u32,
}

impl NewRun {
    /// Due the moment it is stored: no `run_at` and no delay (or a zero one). Only such a
    /// run may be handed off at enqueue.
    pub fn due_at_once(&self) -> bool {
        self.run_at.is_none() && self.delay.is_none_or(|delay| delay.is_zero())
    }
}

/// The tenant of runs enqueued without one (CLI, tests, platform maintenance).
pub const DEFAULT_TENANT: &str = "default";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_triggers_round_trip_through_text() {
        for status in RunStatus::ALL {
            assert_eq!(status.as_str().parse::<RunStatus>(), Ok(status), "{status}");
        }
        for trigger in Trigger::ALL {
            assert_eq!(
                trigger.as_str().parse::<Trigger>(),
                Ok(trigger),
                "{trigger:?}"
            );
        }
        assert!(
            "done".parse::<RunStatus>().is_err(),
            "an unknown status is an error"
        );
    }

    #[test]
    fn run_ids_parse_and_print_alike() {
        let id = RunId::new_v7();
        assert_eq!(
            id.to_string().parse::<RunId>(),
            Ok(id),
            "display then parse"
        );
        let err = "nope".parse::<RunId>().expect_err("not a uuid");
        assert!(err.contains("not a run id"), "clear message: {err}");
    }

    #[test]
    fn owner_tokens_are_fresh_per_claim_and_not_printed_whole() {
        let (a, b) = (OwnerToken::fresh(), OwnerToken::fresh());
        assert_ne!(a, b, "two claims never share a token");
        let shown = format!("{a:?}");
        assert!(
            !shown.contains(&a.0.simple().to_string()),
            "debug output must not reveal the whole token: {shown}"
        );
    }
}
