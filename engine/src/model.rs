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
    /// A new id from the current time and random bits (UUIDv7): later ids sort after
    /// earlier ones.
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
    /// A new random token (UUIDv4), as a claim takes one.
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
    /// An inbound webhook call (an automation's webhook trigger).
    Webhook,
    /// A ticket event or an error event of another run (an automation's event trigger).
    Event,
    /// A poll that found something new (a mail or connector poll).
    Poll,
    /// A schedule's fire instant (a timed automation).
    Schedule,
    /// A person started it by hand (an automation's "run now" in the dashboard or the API).
    Manual,
    /// An application or API call with no other trigger: the default of
    /// [`crate::EnqueueRequest::new`].
    Api,
}

impl Trigger {
    /// Every trigger, in declaration order.
    pub const ALL: [Trigger; 6] = [
        Trigger::Webhook,
        Trigger::Event,
        Trigger::Poll,
        Trigger::Schedule,
        Trigger::Manual,
        Trigger::Api,
    ];

    /// The trigger's stored and serialized name (`"webhook"`, `"api"`, …); [`FromStr`]
    /// reads it back.
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
    /// Terminal: its handler answered [`crate::Outcome::Done`]; the result is in
    /// [`Run::result`].
    Completed,
    /// Terminal: the handler failed it, its retries were spent, it panicked, it
    /// crash-looped (`max_reclaims`) or it parked five times; the reason is in
    /// [`Run::last_error`]. A manual retry ([`crate::RunStore::run_retry`]) starts it again
    /// from its checkpoint.
    Failed,
    /// Terminal: cancelled on request, at once when it was pending, or when its handler
    /// stopped on the signal.
    Cancelled,
    /// Not run, on purpose: a guard of its kind stopped it before it did anything (the
    /// automation loop guard). Terminal, no attempt spent; a retry by hand starts it.
    Suppressed,
}

impl RunStatus {
    /// Every status, in the order of a run's life.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Scheduled,
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Suppressed,
    ];

    /// The status's name as the API and the dashboard show it (`"queued"`, `"failed"`, …);
    /// [`FromStr`] reads it back.
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

    /// Whether the run has ended (completed, failed, cancelled or suppressed): nothing
    /// changes it any more except a manual retry of a failed or suppressed run.
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
    /// The run's id (a UUIDv7).
    pub id: RunId,
    /// The tenant it belongs to ([`DEFAULT_TENANT`] when enqueued without one): claims are
    /// fair between tenants, unique keys are per tenant.
    pub tenant: String,
    /// The registered kind whose handler runs it.
    pub kind: String,
    /// The input given at enqueue, unchanged across attempts.
    pub payload: serde_json::Value,
    /// The last checkpoint a durable handler saved; `None` before the first one.
    #[serde(skip)]
    pub state: Option<Vec<u8>>,
    /// What started it.
    pub trigger: Trigger,
    /// The unique key given at enqueue: while this run is pending or running, an enqueue of
    /// the same key in the same tenant answers this run instead of inserting another.
    pub unique_key: Option<String>,
    /// Higher runs are claimed first among the due runs of a tenant; 0 by default.
    pub priority: i16,
    /// Where it is in its life, judged against the store's now when read (scheduled vs
    /// queued).
    pub status: RunStatus,
    /// When it is (or was last) due: set at enqueue, and again by each put-back (retry,
    /// snooze, park, release) and by a manual retry.
    pub run_at: DateTime<Utc>,
    /// Logical retries spent (bumped only by a retry outcome).
    pub attempts: u32,
    /// Retries allowed after the first attempt: a `Retry` answer with `attempts` already at
    /// this fails the run instead.
    pub max_retries: u32,
    /// Crash reclaims: claims of this run after an earlier owner's lease expired.
    pub reclaims: u32,
    /// Parks: times a worker had no handler for the kind.
    pub parks: u32,
    /// The owner token of the claim holding it: `Some` exactly while it is running. Not
    /// serialized.
    #[serde(skip)]
    pub locked_by: Option<OwnerToken>,
    /// While running, when its lease ends: after this instant any claim may take it over (a
    /// reclaim).
    pub locked_until: Option<DateTime<Utc>>,
    /// The last time its owner renewed the lease (claim, heartbeat or checkpoint).
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// A cancel was requested while it ran; its worker delivers it to the handler, and it
    /// wins over putting the run back.
    pub cancel_requested: bool,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When its row was last written.
    pub updated_at: DateTime<Utc>,
    /// When it was first claimed; `None` until then (kept across retries and reclaims).
    pub started_at: Option<DateTime<Utc>>,
    /// When it completed; `None` unless completed.
    pub completed_at: Option<DateTime<Utc>>,
    /// When it failed or was suppressed; cleared by a manual retry.
    pub failed_at: Option<DateTime<Utc>>,
    /// When it was cancelled; `None` unless cancelled.
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Why the last attempt did not complete (a retry's, park's or failure's reason, or a
    /// suppression's); cleared when it completes.
    pub last_error: Option<String>,
    /// What its handler answered with [`crate::Outcome::Done`], once completed.
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
    /// The id it will have (chosen by the dispatcher, a UUIDv7); an `Existing` answer names
    /// another run's instead.
    pub id: RunId,
    /// The tenant it belongs to (validated: 1 to [`crate::dispatcher::MAX_KEY_LEN`] bytes).
    pub tenant: String,
    /// A kind the dispatcher knows.
    pub kind: String,
    /// The handler's input, already checked by the kind's payload check.
    pub payload: serde_json::Value,
    /// What started it.
    pub trigger: Trigger,
    /// At most one pending or running run of the tenant holds this key; see
    /// [`Run::unique_key`].
    pub unique_key: Option<String>,
    /// Higher is claimed first among a tenant's due runs.
    pub priority: i16,
    /// `None` = due at once (the store's now); `Some(delay)` = now + delay by the store's clock.
    pub delay: Option<std::time::Duration>,
    /// An absolute due time; wins over `delay` when both are given.
    pub run_at: Option<DateTime<Utc>>,
    /// Retries allowed after the first attempt.
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
