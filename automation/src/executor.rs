//! The durable executor: an automation run is a durable engine run that walks the step
//! tree, checkpointing its cursor, context and step log after every action, so a retry
//! or a crash reclaim resumes at the step that failed and never repeats a finished one.
//! (After the tree's last action the run's completion, which carries the step log, is
//! that checkpoint; `flow/log`, which touches nothing outside the run, is not followed
//! by one.)
//!
//! Also here: ticket events (the store hands each `ticket.created`/`ticket.changed`
//! event and its listening automations to [`event_sink`] inside the write's transaction,
//! so their runs commit with the change; loop guard 1 there, loop guard 2 when a run
//! starts), and the failure path (an incident whose `title` and
//! `impact` a customer can read, and whose `detail` only admins see), which then
//! announces the error events `run.failed` and `incident.opened` to the tenant's error
//! workflows before the run ends failed (see [`crate::error_events`]: at-least-once under
//! unique keys, owed in the checkpoint while the store does not answer).
//!
//! Connector steps (`http/request`, `mcp/call-tool`) go through the [`Connector`] port the
//! runtime is handed (none: a fatal "not available" error). Their `{{secrets.<name>}}`
//! are revealed just before the call and layered over the context for that one render;
//! what the connector answers is scrubbed of those values before it is published, logged
//! or checkpointed, so a secret never enters the run's context, step log or incidents.
//! A connector that answers "not now" ([`ConnectorFailure::not_now`]: a full
//! per-(tenant, service) cap or an open breaker, see [`crate::service_limits`]) made no call: the
//! run is snoozed at that step (logged `waiting`), spending no attempt. A built-in
//! assignment that finds no room in its group waits the same way
//! ([`steps::perform_or_wait`]): snoozed at most [`steps::ROOM_RECHECK`], and made due at
//! once by the ticket write that makes room.
//!
//! A `poll` automation's run starts with the poll itself, an implicit step named `poll`
//! (see [`crate::poll`]: what it fetches, how new items are told from old ones and when
//! the automation's cursor moves); a poll that finds nothing new ends the run there.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fronta_desk::store::{IncidentReport, TicketEvent};
use fronta_desk::{
    DeskError, DeskStore, ORIGIN_CHAIN_KEPT, Origin, OriginLink, TenantId, TicketLogEntry,
};
use fronta_engine::{
    Dispatcher, EngineError, EnqueueRequest, KindConfig, NewRun, Outcome, Registry, RunContext,
    Trigger as RunTrigger,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::condition;
use crate::connector::{self, Connector, ConnectorCall, ConnectorFailure};
use crate::context::Context;
use crate::error_events::{self, IncidentBrief, Notice};
use crate::model::{ActionStep, Automation, PollSettings, PollSource, Step, Trigger};
use crate::poll::{self, Advance, Batch, POLL_STEP, PendingCursor, PollCursors, PollLimits};
use crate::secrets::{self, Revealed, SecretVault, WithSecrets};
use crate::steps::{self, StepEnv, StepError, ticket_json};
use crate::store::{
    AutomationId, AutomationStore, GuardAdmission, Listener, StoredAutomation, TicketEventSink,
};
use crate::template;
use crate::validate::MAX_ACTIONS;

/// The engine kind of automation runs (durable).
pub const AUTOMATION_KIND: &str = "automation";
/// Retries of an automation run after its first attempt: with the default ladder that
/// is attempts at once, after 30 s, 2 min, 10 min and 1 h.
pub const AUTOMATION_MAX_RETRIES: i64 = 4;
/// Loop guard: at most this many runs of one automation over one ticket …
pub const GUARD_MAX_RUNS: u32 = 5;
/// … within this window.
pub const GUARD_WINDOW: Duration = Duration::from_secs(60);

/// What an automation run is started with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPayload {
    pub automation_id: AutomationId,
    pub tenant: TenantId,
    /// The context the tree starts from: trigger parameters and `_body`, or `ticket` and
    /// `change` for events.
    pub context: Map<String, Value>,
    /// For event-triggered runs: the ticket whose change started it (the loop guard
    /// counts runs per automation and ticket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<fronta_desk::TicketId>,
    /// The automation's version the run is pinned to, fixed at enqueue: the executor
    /// walks that version's tree, whatever was saved since (runs enqueued before versions
    /// existed ran version 1).
    #[serde(default = "crate::versions::first_version")]
    pub automation_version: u32,
    /// A run started by "retry on the current version": the run whose input it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// For event-triggered runs: the automation run whose change started this one.
    /// `None` when a person or an API client made the change: only runs with a cause
    /// are links of a chain the loop guard counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caused_by: Option<CausedBy>,
    /// A finished run started again by hand from its start or a step
    /// (`crate::restart`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<crate::restart::Restart>,
    /// A run started by an error event (`run.failed`, `incident.opened`;
    /// [`crate::error_events`]): its own failure announces no error event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_event: Option<crate::model::EventKind>,
}

/// The automation run whose ticket change started an event run, and the runs whose
/// changes led to that one (oldest first, at most `ORIGIN_CHAIN_KEPT`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CausedBy {
    pub automation_id: String,
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<OriginLink>,
}

impl CausedBy {
    /// The chain a change made by a run with this cause carries on: the earlier links
    /// and this cause, the oldest dropped beyond `ORIGIN_CHAIN_KEPT`.
    pub fn onward(cause: Option<&CausedBy>) -> Vec<OriginLink> {
        let Some(cause) = cause else {
            return Vec::new();
        };
        let mut chain = cause.chain.clone();
        chain.push(OriginLink {
            automation_id: cause.automation_id.clone(),
            run_id: cause.run_id.clone(),
        });
        let extra = chain.len().saturating_sub(ORIGIN_CHAIN_KEPT);
        chain.drain(..extra);
        chain
    }
}

/// How often a run held by a paused automation (`inFlight: hold`) looks again whether it
/// was resumed: it is snoozed this long each time, spending no attempt.
pub const HOLD_RECHECK: Duration = Duration::from_secs(2);

/// Where a block of steps is: the path of (step index, branch) from the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Branch {
    Then,
    Else,
    Body,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Loop {
    pub items: Vec<Value>,
    pub position: usize,
    pub variable: String,
    /// What the loop variable's name held before the loop (restored after it).
    pub shadowed: Option<Value>,
}

/// One level of the cursor: a block and the index of its next step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    pub block: Vec<(usize, Branch)>,
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub each: Option<Loop>,
}

/// One line of a run's step log (API.md's `steps`).
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepLog {
    pub name: String,
    pub op: String,
    /// `ok`, `failed`, `met`, `not met`, `looping`, `paused`.
    pub status: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Value>,
}

impl StepLog {
    /// A line of no duration at `at`: what the run itself did or met (a lifecycle line, a
    /// failure no step wrote, a hold).
    pub(crate) fn instant(
        name: impl Into<String>,
        op: impl Into<String>,
        status: &str,
        message: String,
        at: DateTime<Utc>,
    ) -> Self {
        StepLog {
            name: name.into(),
            op: op.into(),
            status: status.into(),
            started_at: at,
            finished_at: at,
            message,
            outputs: None,
        }
    }
}

/// The checkpoint of an automation run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecState {
    pub stack: Vec<Frame>,
    pub context: Context,
    /// Executed steps so far, loop passes included (capped by `MAX_ACTIONS`).
    pub executed: usize,
    pub steps: Vec<StepLog>,
    /// The last ticket a step touched: `(id, "TK-n")`.
    pub ticket: Option<(String, String)>,
    /// A long `flow/pause` sleeps until then.
    pub pause_until: Option<DateTime<Utc>>,
    /// A poll run: the cursor move its poll owes (see [`crate::poll`]); `None` before the
    /// poll ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<PendingCursor>,
    /// The run's counters when this checkpoint's attempt began, to say on the log what
    /// happened between two attempts ([`ExecState::note_lifecycle`]).
    #[serde(default)]
    pub seen: Seen,
    /// When the loop guard admitted this run as a link of a chain (`None`: not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarded_at: Option<DateTime<Utc>>,
    /// Whether a step wrote a ticket ([`Op::changes_tickets`]): a counted run that
    /// ends without has its admission taken back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changed_tickets: bool,
    /// Where and when each attempt began (the newest [`STARTS_KEPT`]), for the run's
    /// timeline ([`crate::timeline`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub starts: Vec<AttemptStart>,
    /// A failed run whose error events could not be announced yet
    /// ([`crate::error_events`]): it announces them on resume, then ends failed with
    /// `reason`, without running its step again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owed: Option<Owed>,
}

/// The announcement a failed run still owes, and the reason it ends with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Owed {
    pub notice: Notice,
    pub reason: String,
}

/// How many attempt starts a run's record keeps (the oldest go first).
pub const STARTS_KEPT: usize = 50;

/// One attempt's start: when, which (1-based, of how many), on which worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptStart {
    pub at: DateTime<Utc>,
    pub attempt: u32,
    pub of: u32,
    pub worker: String,
}

/// The run's counters an attempt began with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    pub attempts: u32,
    pub reclaims: u32,
    pub parks: u32,
}

impl Seen {
    /// The counters of `run` as it is now.
    pub fn of(run: &fronta_engine::Run) -> Self {
        Self {
            attempts: run.attempts,
            reclaims: run.reclaims,
            parks: run.parks,
        }
    }
}

/// The `op` of the step log's lifecycle lines (`retried`, `reclaimed`, `parked`,
/// `retried by hand`): what happened to the run between two attempts.
pub const LIFECYCLE_OP: &str = "run/lifecycle";

/// The `op` of the line a run the loop guard suppressed ends with.
pub const GUARD_OP: &str = "run/loop-guard";

impl ExecState {
    pub(crate) fn new(context: Context) -> Self {
        Self {
            stack: vec![Frame {
                block: Vec::new(),
                index: 0,
                each: None,
            }],
            context,
            executed: 0,
            steps: Vec::new(),
            ticket: None,
            pause_until: None,
            poll: None,
            seen: Seen::default(),
            guarded_at: None,
            changed_tickets: false,
            starts: Vec::new(),
            owed: None,
        }
    }

    /// A long pause is over: its line (the last `paused` one) takes its final status,
    /// `ok`, and its real end.
    fn pause_ended(&mut self, now: DateTime<Utc>) {
        if let Some(line) = self
            .steps
            .iter_mut()
            .rev()
            .find(|line| line.status == "paused")
        {
            line.status = "ok".into();
            line.finished_at = now;
            line.message.push_str(&format!(
                "; resumed at {}",
                now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ));
        }
    }

    /// At the start of an attempt: one line for each thing that happened to the run since
    /// the attempt that wrote this checkpoint — a retry (with the error it followed and
    /// which attempt this is), a reclaim (the previous worker's lease expired), a park, a
    /// retry by hand (the counters began again) — then remembers the counters. A new
    /// attempt (the first, or any of those) is noted in `starts` with `worker`; a run
    /// coming back from a snooze goes on in the same attempt.
    pub fn note_lifecycle(
        &mut self,
        run: &fronta_engine::Run,
        version: u32,
        worker: &str,
        now: DateTime<Utc>,
    ) {
        let fresh = self.starts.is_empty() && self.steps.is_empty() && self.seen == Seen::default();
        let now_seen = Seen::of(run);
        let before = self.seen;
        let ended = self.steps.last().map(|last| last.status.as_str());
        let suppressed = ended == Some("suppressed");
        let ended_failed = ended == Some("failed") || suppressed;
        let previous_worker = self.starts.last().map_or_else(
            || "a worker".to_owned(),
            |start| format!("worker {}", start.worker),
        );
        let after_error = run
            .last_error
            .as_deref()
            .map(|error| format!(" after: {error}"))
            .unwrap_or_default();
        let mut line = |status: &str, message: String| {
            self.steps
                .push(StepLog::instant("run", LIFECYCLE_OP, status, message, now));
        };
        // A failed run comes back only by hand, with its counters at 0 again: fewer
        // attempts than before, or (a first attempt that failed for good) as many, with
        // the failure still the last line and no reclaim in between.
        let by_hand = now_seen.attempts < before.attempts
            || (now_seen.attempts == before.attempts
                && now_seen.reclaims <= before.reclaims
                && ended_failed);
        if by_hand && suppressed {
            line(
                "retried by hand",
                format!(
                    "started by hand through the API after the loop guard suppressed it, on \
                     version {version}; the guard does not stop a run started by hand"
                ),
            );
        } else if by_hand {
            line(
                "retried by hand",
                format!(
                    "started again by hand through the API, from its checkpoint, on version \
                     {version}, with a fresh budget of {} retries",
                    run.max_retries
                ),
            );
        } else if now_seen.attempts > before.attempts {
            line(
                "retried",
                format!(
                    "attempt {} of {}{after_error}",
                    now_seen.attempts.saturating_add(1),
                    run.max_retries.saturating_add(1)
                ),
            );
        }
        if now_seen.reclaims > before.reclaims {
            line(
                "reclaimed",
                format!(
                    "the previous worker's lease expired ({previous_worker}: it stopped or lost \
                     the database); reclaim {} — the run goes on from its last checkpoint",
                    now_seen.reclaims
                ),
            );
        }
        if now_seen.parks > before.parks {
            line("parked", format!("park {}{after_error}", now_seen.parks));
        }
        if fresh || by_hand || now_seen != before {
            self.starts.push(AttemptStart {
                at: now,
                attempt: run.attempts.saturating_add(1),
                of: run.max_retries.saturating_add(1),
                worker: worker.to_owned(),
            });
            let extra = self.starts.len().saturating_sub(STARTS_KEPT);
            self.starts.drain(..extra);
        }
        self.seen = now_seen;
    }

    /// Decode a checkpoint.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|err| format!("the checkpoint cannot be read: {err}"))
    }

    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// The op (or the kind: `condition`, `forEach`) of the step called `name` in `tree`, for
/// the log line of a failure the step did not write itself; `run` when no step is named.
fn op_of<'a>(tree: &'a [Step], name: &str) -> &'a str {
    fn find<'a>(steps: &'a [Step], name: &str) -> Option<&'a str> {
        steps.iter().find_map(|step| match step {
            Step::Action(action) if action.name == name => Some(action.op.as_str()),
            Step::Condition(condition) if condition.name == name => Some("condition"),
            Step::ForEach(each) if each.name == name => Some("forEach"),
            Step::Condition(condition) => {
                find(&condition.then_steps, name).or_else(|| find(&condition.else_steps, name))
            }
            Step::ForEach(each) => find(&each.steps, name),
            Step::Action(_) => None,
        })
    }
    find(tree, name).unwrap_or("run")
}

/// Resolves when the run is cancelled; a shutdown or a lost lease does not abandon a call
/// (a shutdown lets it finish within its grace; a lost lease aborts the whole handler).
async fn cancelled(stop: &fronta_engine::registry::StopSignal) {
    stop.stopped().await;
    if stop.reason() != Some(fronta_engine::registry::StopReason::Cancel) {
        std::future::pending::<()>().await;
    }
}

/// The status of a step whose call was abandoned: `cancelled`, or `stopped` (a shutdown
/// or a lost lease: the run goes on elsewhere or later, from this step).
fn stopped_status(signal: &fronta_engine::registry::StopSignal) -> &'static str {
    match signal.reason() {
        Some(fronta_engine::registry::StopReason::Cancel) => "cancelled",
        _ => "stopped",
    }
}

/// Puts the cursor back on the step just taken, so a run failed there (and retried by
/// hand) runs that step again instead of skipping it.
fn back_up(state: &mut ExecState) {
    state.executed = state.executed.saturating_sub(1);
    if let Some(frame) = state.stack.last_mut() {
        frame.index = frame.index.saturating_sub(1);
    }
}

/// What a failed step's line says of what comes next: `attempts` retries were spent of
/// `max_retries` before this attempt.
fn retry_note(retryable: bool, attempts: u32, max_retries: u32) -> String {
    let attempt = attempts.saturating_add(1);
    let of = max_retries.saturating_add(1);
    match (retryable, attempts < max_retries) {
        (false, _) => "not retryable".to_owned(),
        (true, true) => format!("attempt {attempt} of {of}; will be retried"),
        (true, false) => format!("attempt {attempt} of {of}, the last; not retried"),
    }
}

/// The steps of the block at `path` (empty when the tree changed under a checkpoint).
fn block<'a>(steps: &'a [Step], path: &[(usize, Branch)]) -> Option<&'a [Step]> {
    let mut current = steps;
    for (index, branch) in path {
        current = match (current.get(*index)?, branch) {
            (Step::Condition(condition), Branch::Then) => &condition.then_steps,
            (Step::Condition(condition), Branch::Else) => &condition.else_steps,
            (Step::ForEach(each), Branch::Body) => &each.steps,
            _ => return None,
        };
    }
    Some(current)
}

/// Whether the cursor has nothing left to run: every frame at its block's end and no loop
/// with items left.
fn finished(tree: &[Step], stack: &[Frame]) -> bool {
    stack.iter().all(|frame| {
        let at_end = block(tree, &frame.block).is_none_or(|steps| frame.index >= steps.len());
        let loop_done = frame
            .each
            .as_ref()
            .is_none_or(|each| each.position + 1 >= each.items.len());
        at_end && loop_done
    })
}

/// The automation runtime: the stores the executor works on, and the clock long pauses
/// and the loop guard are judged by (the run store's, so tests can move it).
pub struct Runtime {
    pub desk: Arc<dyn DeskStore>,
    pub automations: Arc<dyn AutomationStore>,
    pub clock: Arc<dyn fronta_engine::Clock>,
    /// Calls third-party services; `None` answers connector steps "not available".
    pub connectors: Option<Arc<dyn Connector>>,
    /// Reveals `{{secrets.<name>}}` for connector steps; `None` makes a step that uses a
    /// secret fail with "no secret key is configured".
    pub secrets: Option<SecretVault>,
    /// How long a run is snoozed when our storage does not answer before the automation
    /// started anything (reading the automation, the loop guard): it spends no attempt,
    /// like a worker whose claim failed (default [`DEFAULT_STORAGE_WAIT`]).
    pub storage_wait: Duration,
    /// The cursors of poll automations; `None` makes a poll fail with "not available".
    pub cursors: Option<Arc<dyn PollCursors>>,
    /// The poll's limits.
    pub poll: PollLimits,
    /// The longest `flow/pause` a run may take, templated values included (default
    /// [`crate::steps::MAX_PAUSE`]); the validator holds literals to the same bound.
    pub max_pause: Duration,
}

/// How the poll step ended (see [`Runtime::poll_first`]).
enum PollStep {
    /// New items are published and the cursor moved: run the tree.
    Go,
    /// Nothing new: the run ends here.
    Ended,
    /// A limit in front of the source said "not now".
    Snooze(Duration),
}

/// The status of the step-log line of a run held by a paused automation.
pub const HELD_STATUS: &str = "held";

/// The default [`Runtime::storage_wait`].
pub const DEFAULT_STORAGE_WAIT: Duration = Duration::from_secs(2);

/// Why an action did not run to an answer.
enum ActionError {
    /// Its input could not be rendered (fatal, as before the step ran).
    Template(String),
    /// The step ran (or tried to) and failed.
    Step(StepError),
    /// The connector did not make the call now (a full cap, an open circuit): snooze
    /// the run this long; no attempt is spent and the cursor stays on the step.
    NotNow { wait: Duration, message: String },
    /// The run was cancelled while the call was in flight: the call was abandoned; it
    /// may have happened.
    Stopped { message: String },
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Runtime")
    }
}

/// Register the automation and routing kinds.
pub fn register(
    registry: &mut Registry,
    runtime: Arc<Runtime>,
    lease: Duration,
) -> Result<(), EngineError> {
    let executor = runtime.clone();
    registry.register(
        AUTOMATION_KIND,
        KindConfig::durable(lease, Duration::from_secs(3600)).with_payload_check(|payload| {
            serde_json::from_value::<RunPayload>(payload.clone())
                .map(|_| ())
                .map_err(|err| format!("not an automation run payload: {err}"))
        }),
        move |ctx: RunContext| {
            let runtime = executor.clone();
            async move { runtime.execute_guarded(ctx).await }
        },
    )?;
    Ok(())
}

/// The event sink stores call inside a ticket write: one automation run per listening
/// automation, committed with the change. A change made by automation X never starts X
/// (the origin travels with the change); that decision is logged. `dispatcher` must know
/// [`AUTOMATION_KIND`].
pub fn event_sink(dispatcher: Dispatcher) -> TicketEventSink {
    Arc::new(move |event: &TicketEvent, listeners: &[Listener]| {
        let mut context = Map::new();
        context.insert("ticket".into(), ticket_json(&event.ticket));
        context.insert(
            "change".into(),
            serde_json::to_value(&event.change).unwrap_or(Value::Null),
        );
        let mut runs = Vec::with_capacity(listeners.len());
        for listener in listeners {
            let automation = &listener.id;
            if let Origin::Automation { automation_id, .. } = &event.origin
                && *automation_id == automation.to_string()
            {
                tracing::info!(event = %event.id, automation = %automation, ticket = %event.ticket.human_id(),
                    "loop guard: a change made by this automation does not start it again");
                continue;
            }
            let payload = RunPayload {
                automation_id: *automation,
                tenant: event.tenant,
                context: context.clone(),
                ticket: Some(event.ticket.id),
                automation_version: listener.version,
                retry_of: None,
                caused_by: match &event.origin {
                    Origin::Automation {
                        automation_id,
                        run_id,
                        chain,
                    } => Some(CausedBy {
                        automation_id: automation_id.clone(),
                        run_id: run_id.clone(),
                        chain: chain.clone(),
                    }),
                    Origin::Person => None,
                },
                restart: None,
                error_event: None,
            };
            let request = EnqueueRequest::new(
                AUTOMATION_KIND,
                serde_json::to_value(payload).unwrap_or(Value::Null),
                AUTOMATION_MAX_RETRIES,
            )
            .tenant(event.tenant.to_string())
            .trigger(RunTrigger::Event)
            .unique_key(format!("event:{}:{automation}", event.id));
            match dispatcher.prepare(request) {
                Ok(run) => runs.push(run),
                Err(err) => {
                    tracing::error!(event = %event.id, automation = %automation, error = %err, "cannot start an automation for a ticket event")
                }
            }
        }
        runs
    })
}

/// The enqueue of a run of `stored` with `context`.
pub fn run_request(
    stored: &StoredAutomation,
    trigger: RunTrigger,
    context: Map<String, Value>,
) -> EnqueueRequest {
    let payload = RunPayload {
        automation_id: stored.id,
        tenant: stored.tenant,
        context,
        ticket: None,
        automation_version: stored.current_version,
        retry_of: None,
        caused_by: None,
        restart: None,
        error_event: None,
    };
    EnqueueRequest::new(
        AUTOMATION_KIND,
        serde_json::to_value(payload).unwrap_or(Value::Null),
        AUTOMATION_MAX_RETRIES,
    )
    .tenant(stored.tenant.to_string())
    .trigger(trigger)
}

/// Prepare (validate, without writing) a run of `stored`.
pub fn prepare_run(
    dispatcher: &Dispatcher,
    stored: &StoredAutomation,
    trigger: RunTrigger,
    context: Map<String, Value>,
) -> Result<NewRun, EngineError> {
    dispatcher.prepare(run_request(stored, trigger, context))
}

pub(crate) enum Failure {
    /// Ends the run now, with an incident.
    Fatal { step: String, message: String },
    /// Try again (the checkpoint holds the step that failed).
    Retry {
        step: String,
        message: String,
        after: Option<Duration>,
    },
}

/// The run a walk belongs to, as the walk needs it: its id and counters for the log
/// lines, its stop signal, where its checkpoints go, and — for a dry run — what stands
/// in for the outside (`crate::dry_run`).
pub(crate) struct Walker<'a> {
    pub run_id: String,
    pub attempts: u32,
    pub max_retries: u32,
    pub signal: fronta_engine::registry::StopSignal,
    /// `None`: nothing is kept (a dry run).
    pub checkpointer: Option<&'a fronta_engine::registry::Checkpointer>,
    pub dry: Option<&'a crate::dry_run::Dry>,
    /// A restart's walk to its step: finished steps reused, nothing done
    /// (`crate::restart`).
    pub replay: Option<&'a crate::restart::Replay>,
    /// Where an `incident/create` step's `incident.opened` runs are enqueued (`None`: a
    /// dry run, which starts nothing).
    pub dispatcher: Option<&'a Dispatcher>,
}

impl<'a> Walker<'a> {
    /// The walker of a claimed run.
    fn of(ctx: &'a RunContext) -> Self {
        Walker {
            run_id: ctx.run.id.to_string(),
            attempts: ctx.run.attempts,
            max_retries: ctx.run.max_retries,
            signal: ctx.signal.clone(),
            checkpointer: Some(&ctx.checkpointer),
            dry: None,
            replay: None,
            dispatcher: Some(&ctx.dispatcher),
        }
    }

    /// Checkpoint `state` (a dry run keeps nothing and always succeeds); `Err` means
    /// the lease is lost.
    async fn save(&self, state: &ExecState) -> Result<(), fronta_engine::LeaseLost> {
        match self.checkpointer {
            Some(checkpointer) => checkpointer.save(state.encode()).await,
            None => Ok(()),
        }
    }
}

impl Runtime {
    /// Our storage did not answer before the automation did anything: snooze (no attempt
    /// spent, nothing written by the run yet), as a worker whose claim failed waits.
    /// Steps that meet an unavailable store are retried instead (DESIGN §4.5): they are
    /// part of the automation's work.
    fn storage_down(&self, ctx: &RunContext, message: &str) -> Outcome {
        tracing::warn!(run = %ctx.run.id, wait = ?self.storage_wait, error = %message,
            "storage unavailable before the automation started: run snoozed, no attempt spent");
        Outcome::Snooze(self.storage_wait)
    }

    /// `stored` with the definition of `version`, the one the run is pinned to (no read
    /// when it is the current one: renames keep the current definition's names
    /// current); `enabled`, the name's row and the rest stay the stored automation's. An
    /// older version reads the groups and ticket types it names by id, under the names
    /// they have now ([`crate::refs::resolve`]); one that is gone keeps its saved name,
    /// and the step that needs it fails naming it.
    async fn pinned(
        &self,
        mut stored: StoredAutomation,
        version: u32,
    ) -> Result<StoredAutomation, DeskError> {
        if version != stored.current_version {
            let pinned = self
                .automations
                .automation_version(stored.tenant, stored.id, version)
                .await?;
            let mut names = std::collections::HashMap::new();
            for r in &pinned.refs {
                let Some(id) = r.id else { continue };
                let name = match r.kind {
                    crate::refs::Kind::Group => self
                        .desk
                        .group_get(stored.tenant, fronta_desk::GroupId(id))
                        .await
                        .map(|group| group.name),
                    crate::refs::Kind::TicketType => self
                        .desk
                        .ticket_type_get(stored.tenant, fronta_desk::TicketTypeId(id))
                        .await
                        .map(|found| found.name),
                    crate::refs::Kind::Status => continue,
                };
                match name {
                    Ok(name) => {
                        names.insert((r.kind, id), name);
                    }
                    Err(DeskError::NotFound(_)) => {}
                    Err(err) => return Err(err),
                }
            }
            let enabled = stored.automation.enabled;
            stored.automation =
                crate::refs::resolve(&pinned.definition, &pinned.refs, |kind, id| {
                    names.get(&(kind, id)).cloned()
                });
            stored.automation.enabled = enabled;
        }
        Ok(stored)
    }

    /// A run of an automation paused with `inFlight: hold`: snoozed for [`HOLD_RECHECK`]
    /// (no attempt spent) with one "held" line on its step log, however often it looks.
    async fn hold(&self, ctx: &RunContext, stored: &StoredAutomation) -> Outcome {
        let mut state = match ctx.run.state.as_deref() {
            Some(bytes) => match ExecState::decode(bytes) {
                Ok(state) => state,
                Err(message) => return Outcome::Fail(message),
            },
            None => ExecState::new(Context::from_params(Map::new())),
        };
        if ctx.run.state.is_some()
            && state
                .steps
                .last()
                .is_none_or(|last| last.status != HELD_STATUS)
        {
            state.steps.push(StepLog::instant(
                HELD_STATUS,
                "automation/pause",
                HELD_STATUS,
                format!(
                    "held: automation \"{}\" is paused with inFlight hold; the run goes on at its next step when it is resumed",
                    stored.automation.name
                ),
                Utc::now(),
            ));
            let _ = ctx.checkpointer.save(state.encode()).await;
        }
        tracing::info!(run = %ctx.run.id, automation = %stored.id, "automation paused with its runs held: run snoozed, no attempt spent");
        Outcome::Snooze(HOLD_RECHECK)
    }

    /// Whether `stored` was paused with `inFlight: hold` since the run began (a failed
    /// read is no: the run goes on, as it would have without the pause).
    async fn held_now(&self, stored: &StoredAutomation) -> bool {
        self.automations
            .automation_get(stored.tenant, stored.id)
            .await
            .is_ok_and(|now| now.holds_runs())
    }

    /// [`Self::execute`], with a panic anywhere in it (a bug) turned into what any other
    /// failure gives: a `failed` line ending the step log as last checkpointed, an
    /// incident whose admin detail carries the panic message, and the run failed.
    async fn execute_guarded(&self, ctx: RunContext) -> Outcome {
        use futures_util::FutureExt;
        let outcome = std::panic::AssertUnwindSafe(self.execute(ctx.clone()))
            .catch_unwind()
            .await;
        let panic = match outcome {
            Ok(outcome) => return outcome,
            Err(panic) => panic,
        };
        let message = match panic.downcast_ref::<&str>() {
            Some(text) => (*text).to_owned(),
            None => panic
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "a panic without a message".to_owned()),
        };
        let message = format!("the automation's handler panicked (a bug of fronta): {message}");
        tracing::error!(run = %ctx.run.id, %message, "automation handler panicked");
        let Ok(payload) = serde_json::from_value::<RunPayload>(ctx.run.payload.clone()) else {
            return Outcome::Fail(message);
        };
        // The log as the last checkpoint of this attempt left it.
        let saved = ctx
            .dispatcher
            .store()
            .run_get(ctx.run.id)
            .await
            .ok()
            .flatten();
        let mut state = saved
            .and_then(|run| run.state)
            .or_else(|| ctx.run.state.clone())
            .and_then(|bytes| ExecState::decode(&bytes).ok())
            .unwrap_or_else(|| ExecState::new(Context::from_params(Map::new())));
        state.steps.push(StepLog::instant(
            "run",
            "run",
            "failed",
            message.clone(),
            Utc::now(),
        ));
        let _ = ctx.checkpointer.save(state.encode()).await;
        let stored = self
            .automations
            .automation_get(payload.tenant, payload.automation_id)
            .await
            .ok();
        let notice = self
            .report(
                &ctx,
                &payload,
                stored.as_ref(),
                Some(&state),
                "run",
                &message,
            )
            .await;
        self.end_failed(
            &ctx,
            Some(state),
            notice,
            Outcome::Fail(message.clone()),
            message,
        )
        .await
    }

    async fn execute(&self, ctx: RunContext) -> Outcome {
        let payload: RunPayload = match serde_json::from_value(ctx.run.payload.clone()) {
            Ok(payload) => payload,
            Err(err) => return Outcome::Fail(format!("not an automation run payload: {err}")),
        };
        // A failed run that still owes its error events: nothing else runs.
        if let Some(mut state) = ctx
            .run
            .state
            .as_deref()
            .and_then(|bytes| ExecState::decode(bytes).ok())
            && let Some(owed) = state.owed.take()
        {
            return self.pay_owed(&ctx, state, owed).await;
        }
        let stored = match self
            .automations
            .automation_get(payload.tenant, payload.automation_id)
            .await
        {
            Ok(stored) => stored,
            Err(DeskError::Unavailable(message)) => return self.storage_down(&ctx, &message),
            Err(err) => {
                let message = format!("the automation is missing: {err}");
                let notice = self.report(&ctx, &payload, None, None, "", &message).await;
                return self
                    .end_failed(&ctx, None, notice, Outcome::Fail(message.clone()), message)
                    .await;
            }
        };
        // A pause never fails a run: in flight, it finishes on its version, or waits at
        // its next step while the automation holds its runs.
        if stored.holds_runs() {
            return self.hold(&ctx, &stored).await;
        }
        let stored = match self.pinned(stored, payload.automation_version).await {
            Ok(stored) => stored,
            Err(DeskError::Unavailable(message)) => return self.storage_down(&ctx, &message),
            Err(err) => {
                let message = format!(
                    "version {} of the automation cannot be read: {err}",
                    payload.automation_version
                );
                let notice = self.report(&ctx, &payload, None, None, "", &message).await;
                return self
                    .end_failed(&ctx, None, notice, Outcome::Fail(message.clone()), message)
                    .await;
            }
        };
        // The loop guard counts links of a chain: runs started by a change an automation
        // made. A person's or an API client's change starts a run it never counts.
        let mut guarded_at = None;
        if ctx.run.state.is_none()
            && let Some(ticket) = payload.ticket
            && payload.caused_by.is_some()
        {
            let now = GuardAdmission::instant(self.clock.now());
            guarded_at = Some(now);
            match self
                .automations
                .guard_admit(
                    payload.tenant,
                    stored.id,
                    ticket,
                    now,
                    GUARD_WINDOW,
                    GUARD_MAX_RUNS,
                )
                .await
            {
                Ok(true) => {}
                Ok(false) => return self.suppress(&ctx, &payload, &stored, ticket).await,
                Err(DeskError::Unavailable(message)) => return self.storage_down(&ctx, &message),
                Err(err) => return Outcome::Fail(format!("loop guard: {err}")),
            }
        }
        let mut state = match ctx.run.state.as_deref() {
            Some(bytes) => match ExecState::decode(bytes) {
                Ok(state) => state,
                Err(message) => return Outcome::Fail(message),
            },
            None => {
                let mut state = ExecState::new(Context::from_params(payload.context.clone()));
                state.guarded_at = guarded_at;
                state
            }
        };
        state.note_lifecycle(
            &ctx.run,
            payload.automation_version,
            &ctx.worker,
            Utc::now(),
        );
        if let Some(until) = state.pause_until {
            let now = self.clock.now();
            if until > now {
                return Outcome::Snooze((until - now).to_std().unwrap_or_default());
            }
            state.pause_until = None;
            state.pause_ended(Utc::now());
        }
        if ctx.run.state.is_none()
            && let Some(restart) = &payload.restart
            && let Err(failure) = self
                .restart(&ctx, &payload, &stored, restart, &mut state)
                .await
        {
            return self.failed(&ctx, &payload, &stored, state, failure).await;
        }
        let walked = match &stored.automation.trigger {
            Trigger::Poll {
                source, settings, ..
            } => match self
                .poll_first(&ctx, &payload, &stored, *source, settings, &mut state)
                .await
            {
                Ok(PollStep::Go) => {
                    self.walk(&Walker::of(&ctx), &payload, &stored, &mut state)
                        .await
                }
                Ok(PollStep::Ended) => Ok(None),
                Ok(PollStep::Snooze(wait)) => Ok(Some(wait)),
                Err(failure) => Err(failure),
            },
            _ => {
                self.walk(&Walker::of(&ctx), &payload, &stored, &mut state)
                    .await
            }
        };
        if matches!(walked, Ok(None) | Err(Failure::Fatal { .. })) {
            self.guard_withdraw_unchanged(&ctx, &payload, &stored, &state)
                .await;
        }
        match walked {
            Ok(None) => {
                self.ticket_note(
                    &payload,
                    &ctx,
                    &state,
                    format!(
                        "Automation \"{}\" finished ({} steps).",
                        stored.automation.name,
                        state.steps.len()
                    ),
                )
                .await;
                Outcome::Done(Some(
                    json!({ "steps": state.steps, "context": state.context, "starts": state.starts, "ticket": state.ticket }),
                ))
            }
            Ok(Some(snooze)) => Outcome::Snooze(snooze),
            Err(failure @ Failure::Fatal { .. }) => {
                self.failed(&ctx, &payload, &stored, state, failure).await
            }
            Err(Failure::Retry {
                step,
                message,
                after,
            }) => {
                let reason = format!("step {step:?}: {message}");
                if ctx.run.attempts >= ctx.run.max_retries {
                    let final_message =
                        format!("{message} (gave up after {} retries)", ctx.run.attempts);
                    let notice = self
                        .report(
                            &ctx,
                            &payload,
                            Some(&stored),
                            Some(&state),
                            &step,
                            &final_message,
                        )
                        .await;
                    let outcome = Outcome::Retry {
                        after,
                        reason: reason.clone(),
                    };
                    return self
                        .end_failed(&ctx, Some(state), notice, outcome, reason)
                        .await;
                }
                Outcome::Retry { after, reason }
            }
        }
    }

    /// A run that cannot succeed: the failing step ends its log (a step error wrote its
    /// line already) and the log is saved with the failure, not left at the last
    /// checkpoint; then the incident. (A retryable failure reaching here fails too.)
    async fn failed(
        &self,
        ctx: &RunContext,
        payload: &RunPayload,
        stored: &StoredAutomation,
        mut state: ExecState,
        failure: Failure,
    ) -> Outcome {
        let (Failure::Fatal { step, message } | Failure::Retry { step, message, .. }) = failure;
        if state
            .steps
            .last()
            .is_none_or(|last| last.name != step || last.status != "failed")
        {
            state.steps.push(StepLog::instant(
                if step.is_empty() {
                    "run"
                } else {
                    step.as_str()
                },
                op_of(&stored.automation.steps, &step),
                "failed",
                message.clone(),
                Utc::now(),
            ));
        }
        let _ = ctx.checkpointer.save(state.encode()).await;
        let notice = self
            .report(ctx, payload, Some(stored), Some(&state), &step, &message)
            .await;
        let reason = format!("step {step:?}: {message}");
        self.end_failed(
            ctx,
            Some(state),
            notice,
            Outcome::Fail(reason.clone()),
            reason,
        )
        .await
    }

    /// The end of a failed run, once its failure is reported: announce its error events
    /// ([`crate::error_events`]) and end with `outcome`; the announcement's line goes on
    /// the step log just before the `failed` line (which stays last: a retry by hand is
    /// told by it). When the store does not answer, the run is snoozed with the
    /// announcement owed in its checkpoint instead ([`ExecState::owed`]); a run without a
    /// checkpoint to keep it (its automation is gone) only logs the loss.
    async fn end_failed(
        &self,
        ctx: &RunContext,
        state: Option<ExecState>,
        notice: Notice,
        outcome: Outcome,
        reason: String,
    ) -> Outcome {
        let announced = error_events::announce(
            &ctx.dispatcher,
            self.automations.as_ref(),
            self.desk.as_ref(),
            &notice,
        )
        .await;
        let Some(mut state) = state else {
            if let Err(err) = announced {
                tracing::error!(run = %ctx.run.id, error = %err, "the error workflows of a failed run could not be started");
            }
            return outcome;
        };
        match announced {
            Ok(None) => outcome,
            Ok(Some(line)) => {
                let at = state
                    .steps
                    .iter()
                    .rposition(|line| line.status == "failed")
                    .unwrap_or(state.steps.len());
                state.steps.insert(
                    at,
                    StepLog::instant("run", error_events::ANNOUNCE_OP, "ok", line, Utc::now()),
                );
                let _ = ctx.checkpointer.save(state.encode()).await;
                outcome
            }
            Err(err) => {
                tracing::warn!(run = %ctx.run.id, error = %err, wait = ?self.storage_wait,
                    "the failure could not be announced to the error workflows: run snoozed, announced again on resume");
                state.steps.push(StepLog::instant(
                    "run",
                    error_events::ANNOUNCE_OP,
                    "waiting",
                    format!(
                        "the run failed, but its error workflows could not be started yet ({err}); tried again in {} ms, then the run ends failed",
                        self.storage_wait.as_millis()
                    ),
                    Utc::now(),
                ));
                state.owed = Some(Owed { notice, reason });
                if ctx.checkpointer.save(state.encode()).await.is_err() {
                    return outcome;
                }
                Outcome::Snooze(self.storage_wait)
            }
        }
    }

    /// A failed run back from the snooze of [`Self::end_failed`]: announce what it owes,
    /// then end failed (or wait again).
    async fn pay_owed(&self, ctx: &RunContext, mut state: ExecState, owed: Owed) -> Outcome {
        state
            .steps
            .retain(|line| !(line.op == error_events::ANNOUNCE_OP && line.status == "waiting"));
        let reason = owed.reason.clone();
        self.end_failed(
            ctx,
            Some(state),
            owed.notice,
            Outcome::Fail(reason.clone()),
            reason,
        )
        .await
    }

    /// A restart's first attempt (`crate::restart`): from a step, the walk to it over the
    /// old run's finished steps (reused, nothing done); then the line that says from where.
    async fn restart(
        &self,
        ctx: &RunContext,
        payload: &RunPayload,
        stored: &StoredAutomation,
        restart: &crate::restart::Restart,
        state: &mut ExecState,
    ) -> Result<(), Failure> {
        let version = payload.automation_version;
        let message = match &restart.from_step {
            None => format!(
                "started again by hand through the API from the start, with run {}'s input, on version {version}",
                restart.run
            ),
            Some(step) => {
                let old = match restart.run.parse() {
                    Ok(id) => ctx.dispatcher.store().run_get(id).await.ok().flatten(),
                    Err(_) => None,
                };
                let Some(old) = old else {
                    return Err(Failure::Fatal {
                        step: String::new(),
                        message: format!(
                            "run {} is gone (deleted by retention?): its steps cannot be reused",
                            restart.run
                        ),
                    });
                };
                let replay = crate::restart::Replay::new(
                    crate::run_search::record_of(&old).steps,
                    step,
                    &restart.run,
                );
                let walker = Walker {
                    replay: Some(&replay),
                    ..Walker::of(ctx)
                };
                self.walk(&walker, payload, stored, state).await?;
                if !replay.reached() {
                    return Err(Failure::Fatal {
                        step: step.clone(),
                        message: format!(
                            "step {step:?} was not reached with run {}'s input and outputs (a condition took another branch): start again from a step the run reaches",
                            restart.run
                        ),
                    });
                }
                format!(
                    "started again by hand through the API from step {step:?} of run {} on version {version}: the steps before it are reused, not run again",
                    restart.run
                )
            }
        };
        state.steps.push(StepLog::instant(
            "run",
            LIFECYCLE_OP,
            "retried",
            message,
            Utc::now(),
        ));
        Ok(())
    }

    /// The loop guard refused this run: it ends `suppressed`, its step log and the
    /// ticket's log saying why and through which chain of automation runs; a retry by
    /// hand starts it (its checkpoint skips the guard).
    async fn suppress(
        &self,
        ctx: &RunContext,
        payload: &RunPayload,
        stored: &StoredAutomation,
        ticket: fronta_desk::TicketId,
    ) -> Outcome {
        let chain = self.chain_text(payload, stored).await;
        let message = format!(
            "Loop guard: automation \"{}\" ran {GUARD_MAX_RUNS} times over this ticket in the \
             last minute, each time started by another automation's change; this run was not \
             started. Chain: {chain}. Retry the run to start it by hand.",
            stored.automation.name
        );
        tracing::warn!(run = %ctx.run.id, automation = %stored.id, ticket = %ticket, "{message}");
        let entry = TicketLogEntry {
            at: self.clock.now(),
            kind: "guard".into(),
            message: message.clone(),
            run_id: Some(ctx.run.id.to_string()),
        };
        if let Err(err) = self
            .desk
            .ticket_log_append(payload.tenant, ticket, entry)
            .await
        {
            tracing::warn!(run = %ctx.run.id, error = %err, "could not log the loop guard on the ticket");
        }
        let mut state = ExecState::new(Context::from_params(payload.context.clone()));
        state.seen = Seen::of(&ctx.run);
        state.steps.push(StepLog::instant(
            "run",
            GUARD_OP,
            "suppressed",
            message.clone(),
            Utc::now(),
        ));
        if let Err(err) = ctx.checkpointer.save(state.encode()).await {
            tracing::warn!(run = %ctx.run.id, error = %err, "could not save the suppressed run's log");
        }
        Outcome::Suppress(message)
    }

    /// The chain of automation runs that led to this run, oldest first, by name:
    /// `"Ship" (run 01…) → "Unship" (run 01…) → this run`.
    async fn chain_text(&self, payload: &RunPayload, stored: &StoredAutomation) -> String {
        let links = CausedBy::onward(payload.caused_by.as_ref());
        let mut names: std::collections::HashMap<String, String> = Default::default();
        names.insert(stored.id.to_string(), stored.automation.name.clone());
        let mut parts = Vec::with_capacity(links.len() + 1);
        for link in &links {
            if !names.contains_key(&link.automation_id) {
                let name = match link.automation_id.parse() {
                    Ok(id) => match self.automations.automation_get(payload.tenant, id).await {
                        Ok(found) => found.automation.name,
                        Err(_) => "a deleted automation".to_owned(),
                    },
                    Err(_) => link.automation_id.clone(),
                };
                names.insert(link.automation_id.clone(), name);
            }
            parts.push(format!(
                "\"{}\" (run {})",
                names[&link.automation_id], link.run_id
            ));
        }
        parts.push("this run".to_owned());
        parts.join(" → ")
    }

    /// A run the loop guard counted that ends having written no ticket does not extend
    /// a chain: its admission is taken back (and the log says so).
    async fn guard_withdraw_unchanged(
        &self,
        ctx: &RunContext,
        payload: &RunPayload,
        stored: &StoredAutomation,
        state: &ExecState,
    ) {
        let (Some(at), Some(ticket)) = (state.guarded_at, payload.ticket) else {
            return;
        };
        if state.changed_tickets {
            return;
        }
        match self
            .automations
            .guard_withdraw(payload.tenant, stored.id, ticket, at)
            .await
        {
            Ok(()) => tracing::debug!(run = %ctx.run.id, automation = %stored.id, ticket = %ticket,
                "loop guard: the run changed no ticket; it does not count toward the cap"),
            Err(err) => tracing::warn!(run = %ctx.run.id, error = %err,
                "loop guard: could not take back the admission of a run that changed nothing"),
        }
    }

    /// Walk from the cursor. `Ok(Some(d))` = snooze for `d`; `Ok(None)` = finished.
    pub(crate) async fn walk(
        &self,
        walker: &Walker<'_>,
        payload: &RunPayload,
        stored: &StoredAutomation,
        state: &mut ExecState,
    ) -> Result<Option<Duration>, Failure> {
        let tree = &stored.automation.steps;
        loop {
            if walker.signal.is_stopped() {
                // A cancel between two steps ends the log with its line (a shutdown or a
                // lost lease gives the run back: it goes on from here, nothing to say).
                if walker.signal.reason() == Some(fronta_engine::registry::StopReason::Cancel) {
                    state.steps.push(StepLog::instant(
                        "run",
                        LIFECYCLE_OP,
                        "cancelled",
                        "cancelled between two steps: nothing after this line ran".into(),
                        Utc::now(),
                    ));
                    let _ = walker.save(state).await;
                }
                return Err(Failure::Retry {
                    step: String::new(),
                    message: "stopped".into(),
                    after: None,
                });
            }
            let Some(frame) = state.stack.last_mut() else {
                return Ok(None);
            };
            let Some(steps) = block(tree, &frame.block) else {
                return Err(Failure::Fatal { step: String::new(), message: "the automation changed under a running run: its checkpoint no longer fits the tree".into() });
            };
            if frame.index >= steps.len() {
                // The block ended: next loop pass, or back to the parent.
                if let Some(each) = frame.each.as_mut()
                    && each.position + 1 < each.items.len()
                {
                    each.position += 1;
                    let (variable, item) =
                        (each.variable.clone(), each.items[each.position].clone());
                    frame.index = 0;
                    state.context.insert(variable, item);
                    continue;
                }
                if let Some(frame) = state.stack.pop()
                    && let Some(each) = frame.each
                {
                    match each.shadowed {
                        Some(value) => state.context.insert(each.variable, value),
                        None => state.context.remove(&each.variable),
                    };
                }
                continue;
            }
            if let Some(replay) = walker.replay
                && steps[frame.index].name() == replay.stop_at
            {
                // The restart's step: the cursor is on it, the context as before it.
                replay.reach();
                return Ok(Some(Duration::ZERO));
            }
            state.executed += 1;
            let step = &steps[frame.index];
            let step_index = frame.index;
            let block_path = frame.block.clone();
            frame.index += 1;
            if state.executed > MAX_ACTIONS {
                back_up(state);
                return Err(Failure::Fatal {
                    step: step.name().to_owned(),
                    message: format!(
                        "the run reached MAX_ACTIONS = {MAX_ACTIONS} executed steps (loop passes included) and was stopped; nothing after step {:?} ran",
                        step.name()
                    ),
                });
            }
            let started = Utc::now();
            match step {
                Step::Condition(condition) => {
                    let outcome = condition::evaluate(condition, &state.context);
                    let branch = if outcome.met {
                        Branch::Then
                    } else {
                        Branch::Else
                    };
                    state.steps.push(StepLog {
                        name: condition.name.clone(),
                        op: "condition".into(),
                        status: if outcome.met { "met" } else { "not met" }.into(),
                        started_at: started,
                        finished_at: Utc::now(),
                        message: outcome.lines.join("\n"),
                        outputs: None,
                    });
                    let mut path = block_path;
                    path.push((step_index, branch));
                    state.stack.push(Frame {
                        block: path,
                        index: 0,
                        each: None,
                    });
                }
                Step::ForEach(each) => {
                    let items = match template::render(&each.items, &state.context) {
                        Ok(Value::Array(items)) => items,
                        Ok(other) => {
                            back_up(state);
                            return Err(Failure::Fatal {
                                step: each.name.clone(),
                                message: format!("items must be a list, got {other}"),
                            });
                        }
                        Err(err) => {
                            back_up(state);
                            return Err(Failure::Fatal {
                                step: each.name.clone(),
                                message: err.to_string(),
                            });
                        }
                    };
                    state.steps.push(StepLog {
                        name: each.name.clone(),
                        op: "forEach".into(),
                        status: "looping".into(),
                        started_at: started,
                        finished_at: Utc::now(),
                        message: format!("{} items as {:?}", items.len(), each.variable),
                        outputs: None,
                    });
                    if let Some(first) = items.first().cloned() {
                        let shadowed = state.context.insert(each.variable.clone(), first);
                        let mut path = block_path;
                        path.push((step_index, Branch::Body));
                        state.stack.push(Frame {
                            block: path,
                            index: 0,
                            each: Some(Loop {
                                items,
                                position: 0,
                                variable: each.variable.clone(),
                                shadowed,
                            }),
                        });
                    }
                }
                Step::Action(action) => {
                    let env = StepEnv {
                        desk: self.desk.as_ref(),
                        tenant: payload.tenant,
                        origin: Origin::Automation {
                            automation_id: stored.id.to_string(),
                            run_id: walker.run_id.to_string(),
                            chain: CausedBy::onward(payload.caused_by.as_ref()),
                        },
                        automation_id: stored.id.to_string(),
                        automation_name: stored.automation.name.clone(),
                        automation_version: payload.automation_version,
                        run_ticket: steps::run_ticket(
                            state.ticket.as_ref().map(|(id, _)| id.as_str()),
                            payload.ticket,
                            &state.context,
                        ),
                        now: self.clock.now(),
                        run_id: walker.run_id.to_string(),
                        step_name: action.name.clone(),
                        stop: walker.signal.clone(),
                        max_pause: self.max_pause,
                        dry: walker.dry.is_some(),
                    };
                    if let Some(replay) = walker.replay {
                        let Some(old) = replay.take(&action.name) else {
                            return Err(Failure::Fatal {
                                step: action.name.clone(),
                                message: format!(
                                    "step {:?} did not finish in run {}: it cannot be reused; start again from it or an earlier step",
                                    action.name, replay.from_run
                                ),
                            });
                        };
                        if let Some(Value::Object(outputs)) = &old.outputs {
                            state.context.publish_outputs(&action.name, outputs.clone());
                        }
                        state.steps.push(StepLog {
                            name: action.name.clone(),
                            op: action.op.as_str().into(),
                            status: crate::restart::REUSED.into(),
                            started_at: started,
                            finished_at: Utc::now(),
                            message: format!(
                                "reused from run {}: {}",
                                replay.from_run, old.message
                            ),
                            outputs: old.outputs.clone(),
                        });
                        continue;
                    }
                    let acted = match walker.dry {
                        Some(dry) if action.op.is_connector() && !dry.live => {
                            match dry.stand_in(action, &state.context) {
                                Some(done) => Ok(done),
                                None => {
                                    // Not called and not mocked: the tree goes on without
                                    // its outputs, and its line says so.
                                    state.steps.push(StepLog {
                                        name: action.name.clone(),
                                        op: action.op.as_str().into(),
                                        status: crate::dry_run::NOT_CALLED.into(),
                                        started_at: started,
                                        finished_at: Utc::now(),
                                        message: crate::dry_run::not_called(action, &state.context),
                                        outputs: None,
                                    });
                                    continue;
                                }
                            }
                        }
                        _ => self.act(action, &state.context, &env).await,
                    };
                    let result = match acted {
                        Ok(done) => Ok(done),
                        Err(ActionError::Template(message)) => {
                            back_up(state);
                            return Err(Failure::Fatal {
                                step: action.name.clone(),
                                message,
                            });
                        }
                        Err(ActionError::Step(err)) => Err(err),
                        Err(ActionError::Stopped { message }) => {
                            back_up(state);
                            state.steps.push(StepLog {
                                name: action.name.clone(),
                                op: action.op.as_str().into(),
                                status: stopped_status(&walker.signal).into(),
                                started_at: started,
                                finished_at: Utc::now(),
                                message: message.clone(),
                                outputs: None,
                            });
                            tracing::info!(run = %walker.run_id, step = %action.name, %message, "connector call abandoned");
                            let _ = walker.save(state).await;
                            return Err(Failure::Retry {
                                step: action.name.clone(),
                                message,
                                after: None,
                            });
                        }
                        Err(ActionError::NotNow { wait, message }) => {
                            // Back up so the snoozed run resumes at this step.
                            state.executed -= 1;
                            if let Some(frame) = state.stack.last_mut() {
                                frame.index -= 1;
                            }
                            // One "waiting" line per step, however often it waits.
                            if state.steps.last().is_some_and(|last| {
                                last.name == action.name && last.status == "waiting"
                            }) {
                                state.steps.pop();
                            }
                            state.steps.push(StepLog {
                                name: action.name.clone(),
                                op: action.op.as_str().into(),
                                status: "waiting".into(),
                                started_at: started,
                                finished_at: Utc::now(),
                                message: message.clone(),
                                outputs: None,
                            });
                            tracing::info!(run = %walker.run_id, step = %action.name, ?wait, %message, "step not run now: run snoozed");
                            let _ = walker.save(state).await;
                            return Ok(Some(wait));
                        }
                    };
                    let result = match (result, walker.dispatcher) {
                        (Ok(done), Some(dispatcher)) if action.op == crate::Op::IncidentCreate => {
                            self.announce_created(dispatcher, payload, stored, walker, done)
                                .await
                        }
                        (result, _) => result,
                    };
                    match result {
                        Ok(done) => {
                            let published = state
                                .context
                                .publish_outputs(&action.name, done.outputs.clone());
                            let mut message = match walker.dry {
                                Some(dry) => dry.said(done.message),
                                None => done.message,
                            };
                            if !published.bare_taken.is_empty() {
                                message.push_str(&format!(
                                    " (kept the earlier {} ; this step's are under {}.*)",
                                    published.bare_taken.join(", "),
                                    action.name
                                ));
                            }
                            if let Some(ticket) = &done.ticket {
                                state.ticket = Some((ticket.id.to_string(), ticket.human_id()));
                            }
                            state.changed_tickets |= action.op.changes_tickets();
                            tracing::debug!(run = %walker.run_id, step = %action.name, op = action.op.as_str(), %message, "step done");
                            state.steps.push(StepLog {
                                name: action.name.clone(),
                                op: action.op.as_str().into(),
                                status: if done.snooze.is_some() {
                                    "paused"
                                } else {
                                    "ok"
                                }
                                .into(),
                                started_at: started,
                                finished_at: Utc::now(),
                                message,
                                outputs: (!done.outputs.is_empty())
                                    .then_some(Value::Object(done.outputs)),
                            });
                            if let Some(snooze) = done.snooze {
                                state.pause_until =
                                    Some(fronta_engine::clock::add(self.clock.now(), snooze));
                            }
                            // The side effect is done: record it before anything else can fail.
                            // After the tree's last step the completion is that record (it
                            // carries the step log), so no separate checkpoint is written;
                            // `flow/log` changes nothing outside the run, so repeating it
                            // after a crash repeats a log line only: no checkpoint either.
                            let last = done.snooze.is_none() && finished(tree, &state.stack);
                            let outside_effect = action.op.has_outside_effect();
                            if !last && outside_effect && walker.save(state).await.is_err() {
                                return Err(Failure::Retry {
                                    step: action.name.clone(),
                                    message: "lease lost".into(),
                                    after: None,
                                });
                            }
                            if let Some(snooze) = done.snooze {
                                return Ok(Some(snooze));
                            }
                            // A pause that holds runs in flight stops this one at its next
                            // step (the step just done is checkpointed).
                            if !last
                                && outside_effect
                                && walker.dry.is_none()
                                && self.held_now(stored).await
                            {
                                return Ok(Some(Duration::ZERO));
                            }
                        }
                        Err(StepError {
                            retryable,
                            retry_after,
                            message,
                        }) => {
                            // Back up so a retry or a reclaim resumes at this step.
                            state.executed -= 1;
                            if let Some(frame) = state.stack.last_mut() {
                                frame.index -= 1;
                            }
                            state.steps.push(StepLog {
                                name: action.name.clone(),
                                op: action.op.as_str().into(),
                                status: "failed".into(),
                                started_at: started,
                                finished_at: Utc::now(),
                                message: format!(
                                    "{message} ({})",
                                    retry_note(retryable, walker.attempts, walker.max_retries)
                                ),
                                outputs: None,
                            });
                            let _ = walker.save(state).await;
                            return Err(if retryable {
                                Failure::Retry {
                                    step: action.name.clone(),
                                    message,
                                    after: retry_after,
                                }
                            } else {
                                Failure::Fatal {
                                    step: action.name.clone(),
                                    message,
                                }
                            });
                        }
                    }
                }
            }
        }
    }

    /// The poll, before the tree (see [`crate::poll`], "When the cursor moves"): apply a
    /// checkpointed move the run still owes, or fetch, publish, checkpoint, then move.
    async fn poll_first(
        &self,
        ctx: &RunContext,
        payload: &RunPayload,
        stored: &StoredAutomation,
        source: PollSource,
        settings: &PollSettings,
        state: &mut ExecState,
    ) -> Result<PollStep, Failure> {
        let fatal = |message: String| Failure::Fatal {
            step: POLL_STEP.into(),
            message,
        };
        let Some(cursors) = &self.cursors else {
            return Err(fatal(
                "polling is not available in this process: no cursor store is installed".into(),
            ));
        };
        let storage = |err: DeskError| match err {
            DeskError::Unavailable(message) => Failure::Retry {
                step: POLL_STEP.into(),
                message: format!("the poll cursor could not be read or written: {message}"),
                after: None,
            },
            other => Failure::Fatal {
                step: POLL_STEP.into(),
                message: format!("the poll cursor: {other}"),
            },
        };
        let run_id = ctx.run.id.to_string();
        // A move of the cursor by another run sends this one back to fetch: bounded.
        for _ in 0..3 {
            if let Some(pending) = &mut state.poll {
                if pending.applied {
                    return Ok(PollStep::Go);
                }
                let answer = cursors
                    .poll_cursor_advance(
                        payload.tenant,
                        stored.id,
                        pending.from.as_ref(),
                        &pending.to,
                        &run_id,
                    )
                    .await
                    .map_err(storage)?;
                match answer {
                    Advance::Advanced | Advance::AlreadyThere => {
                        tracing::info!(run = %ctx.run.id, automation = %stored.id, ?answer,
                            from = ?pending.from, to = %pending.to, "poll: cursor moved");
                        pending.applied = true;
                        return Ok(PollStep::Go);
                    }
                    Advance::Conflict { current } => {
                        tracing::warn!(run = %ctx.run.id, automation = %stored.id, from = ?pending.from,
                            ?current, "poll: another run moved the cursor first; this poll's items are dropped and it polls again");
                        *state = ExecState::new(Context::from_params(payload.context.clone()));
                        continue;
                    }
                }
            }
            let from = cursors
                .poll_cursor_get(payload.tenant, stored.id)
                .await
                .map_err(storage)?
                .map(|cursor| cursor.value);
            let started = Utc::now();
            let op = poll::step_op(source);
            let fetched = match source {
                PollSource::Http | PollSource::Messages => {
                    self.poll_http(ctx, payload, stored, settings, state, from.as_ref())
                        .await
                }
                PollSource::Mail => {
                    self.poll_mail(ctx, payload, stored, settings, state, from.as_ref())
                        .await
                }
            };
            let batch = match fetched {
                Ok(batch) => batch,
                Err(ActionError::Stopped { message }) => {
                    state.steps.push(StepLog {
                        name: POLL_STEP.into(),
                        op: op.into(),
                        status: stopped_status(&ctx.signal).into(),
                        started_at: started,
                        finished_at: Utc::now(),
                        message: message.clone(),
                        outputs: None,
                    });
                    let _ = ctx.checkpointer.save(state.encode()).await;
                    return Err(Failure::Retry {
                        step: POLL_STEP.into(),
                        message,
                        after: None,
                    });
                }
                Err(ActionError::NotNow { wait, message }) => {
                    if state
                        .steps
                        .last()
                        .is_some_and(|last| last.name == POLL_STEP && last.status == "waiting")
                    {
                        state.steps.pop();
                    }
                    state.steps.push(StepLog {
                        name: POLL_STEP.into(),
                        op: op.into(),
                        status: "waiting".into(),
                        started_at: started,
                        finished_at: Utc::now(),
                        message: message.clone(),
                        outputs: None,
                    });
                    tracing::info!(run = %ctx.run.id, ?wait, %message, "poll not made now: run snoozed");
                    let _ = ctx.checkpointer.save(state.encode()).await;
                    return Ok(PollStep::Snooze(wait));
                }
                Err(error) => {
                    let (retryable, retry_after, message) = match error {
                        ActionError::Template(message) => (false, None, message),
                        ActionError::Step(StepError {
                            retryable,
                            retry_after,
                            message,
                        }) => (retryable, retry_after, message),
                        ActionError::NotNow { .. } | ActionError::Stopped { .. } => {
                            unreachable!("handled above")
                        }
                    };
                    state.steps.push(StepLog {
                        name: POLL_STEP.into(),
                        op: op.into(),
                        status: "failed".into(),
                        started_at: started,
                        finished_at: Utc::now(),
                        message: format!(
                            "{message} ({})",
                            retry_note(retryable, ctx.run.attempts, ctx.run.max_retries)
                        ),
                        outputs: None,
                    });
                    let _ = ctx.checkpointer.save(state.encode()).await;
                    return Err(if retryable {
                        Failure::Retry {
                            step: POLL_STEP.into(),
                            message,
                            after: retry_after,
                        }
                    } else {
                        fatal(message)
                    });
                }
            };
            let moved = batch.cursor.is_some() && batch.cursor != from;
            let mut message = if batch.items.is_empty() {
                "no new items".to_string()
            } else {
                format!("{} new items", batch.items.len())
            };
            if batch.left > 0 {
                message.push_str(&format!(
                    "; {} more wait for the next poll (at most {} a poll: FRONTA_POLL_MAX_ITEMS)",
                    batch.left, self.poll.max_items
                ));
            }
            match (&from, &batch.cursor) {
                (_, None) => message.push_str("; no cursor yet"),
                (Some(from), Some(to)) if moved => {
                    message.push_str(&format!("; cursor {from} → {to}"))
                }
                (None, Some(to)) => message.push_str(&format!("; cursor → {to}")),
                (_, Some(to)) => message.push_str(&format!("; cursor stays {to}")),
            }
            tracing::info!(run = %ctx.run.id, automation = %stored.id, source = source.as_str(),
                items = batch.items.len(), left = batch.left, %message, "poll done");
            let outputs = batch.outputs();
            state.context.publish_outputs(POLL_STEP, outputs.clone());
            state.steps.push(StepLog {
                name: POLL_STEP.into(),
                op: op.into(),
                status: "ok".into(),
                started_at: started,
                finished_at: Utc::now(),
                message,
                outputs: (!batch.items.is_empty()).then_some(Value::Object(outputs)),
            });
            let Some(to) = batch.cursor.clone() else {
                return Ok(PollStep::Ended);
            };
            if batch.items.is_empty() {
                // Nothing to lose: move the cursor (a mailbox's first look) without a
                // checkpoint and end.
                if moved {
                    let answer = cursors
                        .poll_cursor_advance(payload.tenant, stored.id, from.as_ref(), &to, &run_id)
                        .await
                        .map_err(storage)?;
                    tracing::info!(run = %ctx.run.id, automation = %stored.id, ?answer, %to,
                        "poll: nothing new; cursor moved");
                }
                return Ok(PollStep::Ended);
            }
            state.poll = Some(PendingCursor {
                from,
                to,
                applied: false,
            });
            // The items and the move they owe are durable before the cursor moves.
            if ctx.checkpointer.save(state.encode()).await.is_err() {
                return Err(Failure::Retry {
                    step: POLL_STEP.into(),
                    message: "lease lost".into(),
                    after: None,
                });
            }
        }
        Err(Failure::Retry {
            step: POLL_STEP.into(),
            message: "the cursor kept moving under this poll (other runs of the automation)".into(),
            after: None,
        })
    }

    fn poll_env<'e>(
        &'e self,
        ctx: &RunContext,
        payload: &RunPayload,
        stored: &StoredAutomation,
    ) -> StepEnv<'e> {
        StepEnv {
            desk: self.desk.as_ref(),
            tenant: payload.tenant,
            origin: Origin::Automation {
                automation_id: stored.id.to_string(),
                run_id: ctx.run.id.to_string(),
                chain: CausedBy::onward(payload.caused_by.as_ref()),
            },
            automation_id: stored.id.to_string(),
            automation_name: stored.automation.name.clone(),
            automation_version: payload.automation_version,
            run_ticket: None,
            now: self.clock.now(),
            run_id: ctx.run.id.to_string(),
            step_name: POLL_STEP.into(),
            stop: ctx.signal.clone(),
            max_pause: self.max_pause,
            dry: false,
        }
    }

    /// `http` and `messages`: the request through the `http/request` connector, then the
    /// new items of its answer.
    async fn poll_http(
        &self,
        ctx: &RunContext,
        payload: &RunPayload,
        stored: &StoredAutomation,
        settings: &PollSettings,
        state: &ExecState,
        from: Option<&Value>,
    ) -> Result<Batch, ActionError> {
        let (Some(request), Some(items), Some(cursor)) =
            (&settings.request, &settings.items, &settings.cursor)
        else {
            return Err(ActionError::Template(
                "trigger: an http poll needs request, items and cursor (saved before they were required?)".into(),
            ));
        };
        let action = ActionStep {
            name: POLL_STEP.into(),
            op: crate::Op::HttpRequest,
            service: settings.service.clone(),
            input: request.clone(),
        };
        // The request may name the stored cursor as `{{_poll.cursor}}`.
        let mut context = state.context.clone();
        let mut timed = match context.get("_poll") {
            Some(Value::Object(timed)) => timed.clone(),
            _ => Map::new(),
        };
        timed.insert("cursor".into(), from.cloned().unwrap_or(Value::Null));
        context.insert("_poll", Value::Object(timed));
        let env = self.poll_env(ctx, payload, stored);
        let done = self.act(&action, &context, &env).await?;
        poll::select_new(&Value::Object(done.outputs), items, cursor, from, self.poll)
            .map_err(|err| ActionError::Step(StepError::fatal(err.0)))
    }

    /// `mail`: the connector's `poll/mail` finds the new messages by UID.
    async fn poll_mail(
        &self,
        ctx: &RunContext,
        payload: &RunPayload,
        stored: &StoredAutomation,
        settings: &PollSettings,
        state: &ExecState,
        from: Option<&Value>,
    ) -> Result<Batch, ActionError> {
        let Some(mailbox) = &settings.mailbox else {
            return Err(ActionError::Template(
                "trigger.mailbox: a mail poll needs its mailbox".into(),
            ));
        };
        let mut input = match serde_json::to_value(mailbox) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        input.insert("port".into(), json!(mailbox.port()));
        input.insert("folder".into(), json!(mailbox.folder()));
        let action = ActionStep {
            name: POLL_STEP.into(),
            op: crate::Op::PollMail,
            service: settings.service.clone(),
            input,
        };
        // Added after rendering: values, never templates.
        let mut extra = Map::new();
        extra.insert("cursor".into(), from.cloned().unwrap_or(Value::Null));
        extra.insert(
            "since".into(),
            json!(
                stored
                    .updated_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        );
        extra.insert("maxItems".into(), json!(self.poll.max_items));
        let env = self.poll_env(ctx, payload, stored);
        let done = self.act_with(&action, &state.context, &env, extra).await?;
        let items = match done.outputs.get("items") {
            Some(Value::Array(items)) => items.clone(),
            _ => {
                return Err(ActionError::Step(StepError::fatal(
                    "poll/mail answered no items list".to_string(),
                )));
            }
        };
        Ok(Batch {
            items,
            cursor: done.outputs.get("cursor").filter(|c| !c.is_null()).cloned(),
            left: done
                .outputs
                .get("left")
                .and_then(Value::as_u64)
                .and_then(|left| usize::try_from(left).ok())
                .unwrap_or(0),
        })
    }

    /// Run one action: render its input (with its secrets, for a connector step), then
    /// the built-in op or the connector call; a connector's answer comes back scrubbed.
    async fn act(
        &self,
        action: &ActionStep,
        context: &Context,
        env: &StepEnv<'_>,
    ) -> Result<steps::StepDone, ActionError> {
        self.act_with(action, context, env, Map::new()).await
    }

    /// [`Self::act`], with `extra` added to a connector's input after rendering.
    async fn act_with(
        &self,
        action: &ActionStep,
        context: &Context,
        env: &StepEnv<'_>,
        extra: Map<String, Value>,
    ) -> Result<steps::StepDone, ActionError> {
        let template_error = |err: template::TemplateError| ActionError::Template(err.to_string());
        if !action.op.is_connector() {
            let input = template::render_map(&action.input, context).map_err(template_error)?;
            return match steps::perform_or_wait(&action.op, input, env).await {
                Ok(steps::Performed::Done(done)) => Ok(*done),
                Ok(steps::Performed::Wait { wait, message }) => {
                    Err(ActionError::NotNow { wait, message })
                }
                Err(err) => Err(ActionError::Step(err)),
            };
        }
        let names = secrets::names_in(&action.input);
        let revealed = match (&self.secrets, names.is_empty()) {
            (_, true) => Revealed::default(),
            (Some(vault), false) => vault
                .reveal(env.tenant, &names)
                .await
                .map_err(ActionError::Step)?,
            (None, false) => return Err(ActionError::Step(secrets::no_key(&names[0]))),
        };
        let scope = WithSecrets {
            context,
            revealed: &revealed,
        };
        let mut input = template::render_map(&action.input, &scope).map_err(template_error)?;
        input.extend(extra);
        let reply = match &self.connectors {
            None => Err(connector::not_installed(&action.op)),
            Some(connectors) => {
                let call = connectors.call(ConnectorCall {
                    op: &action.op,
                    tenant: env.tenant,
                    service: action.service.as_deref(),
                    input,
                    secrets: &revealed,
                    run_id: &env.run_id,
                    step_name: &action.name,
                });
                tokio::select! {
                    reply = call => reply,
                    () = cancelled(&env.stop) => {
                        return Err(ActionError::Stopped {
                            message: format!(
                                "{} abandoned: the run was cancelled while the call was in flight; the request may have been sent, so it may have happened{}",
                                action.op.as_str(),
                                action.service.as_deref().map(|service| format!(" at {service}")).unwrap_or_default()
                            ),
                        });
                    }
                }
            }
        };
        match reply {
            Ok(reply) => {
                let outputs = match revealed.scrub_value(Value::Object(reply.outputs)) {
                    Value::Object(outputs) => outputs,
                    _ => Map::new(),
                };
                Ok(steps::StepDone {
                    outputs,
                    message: revealed.scrub(&reply.message),
                    ticket: None,
                    snooze: None,
                })
            }
            Err(ConnectorFailure {
                not_now: Some(wait),
                message,
                ..
            }) => Err(ActionError::NotNow {
                wait,
                message: revealed.scrub(&message),
            }),
            Err(failure) => Err(ActionError::Step(
                ConnectorFailure {
                    message: revealed.scrub(&failure.message),
                    ..failure
                }
                .into_step_error(),
            )),
        }
    }

    /// After `incident/create`: announce `incident.opened` for the incident it reported
    /// (opened now or counted: the per-incident key starts one run per listener, see
    /// [`crate::error_events`]); its line says whom it started. When the store does not
    /// answer, the step fails retryably (the retry counts the incident again and
    /// announces under the same keys).
    async fn announce_created(
        &self,
        dispatcher: &Dispatcher,
        payload: &RunPayload,
        stored: &StoredAutomation,
        walker: &Walker<'_>,
        mut done: steps::StepDone,
    ) -> Result<steps::StepDone, steps::StepError> {
        let Some(id) = done
            .outputs
            .get("id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse::<uuid::Uuid>().ok())
        else {
            return Ok(done);
        };
        let opened = done
            .outputs
            .get("opened")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let incident = self
            .desk
            .incident_get(Some(payload.tenant), fronta_desk::IncidentId(id))
            .await
            .map_err(|err| {
                steps::StepError::retryable(format!(
                    "the incident was reported, but it cannot be read back to start the automations on incident.opened: {err}"
                ))
            })?;
        let notice = Notice {
            source: error_events::Source {
                tenant: payload.tenant,
                automation_id: stored.id,
                automation_name: stored.automation.name.clone(),
                version: payload.automation_version,
                run_id: walker.run_id.clone(),
                caused_by: payload.caused_by.clone(),
                started_by: payload.error_event,
            },
            failed: None,
            incident: Some(IncidentBrief::of(&incident, opened)),
            by_failure: false,
        };
        match error_events::announce(
            dispatcher,
            self.automations.as_ref(),
            self.desk.as_ref(),
            &notice,
        )
        .await
        {
            Ok(None) => Ok(done),
            Ok(Some(line)) => {
                done.message.push_str(&format!("; {line}"));
                Ok(done)
            }
            Err(err) => Err(steps::StepError::retryable(format!(
                "the incident was reported, but the automations on incident.opened could not be started: {err}"
            ))),
        }
    }

    async fn ticket_note(
        &self,
        payload: &RunPayload,
        ctx: &RunContext,
        state: &ExecState,
        message: String,
    ) {
        let Some((id, _)) = &state.ticket else { return };
        let Ok(id) = id.parse() else { return };
        let entry = TicketLogEntry {
            at: Utc::now(),
            kind: "run".into(),
            message,
            run_id: Some(ctx.run.id.to_string()),
        };
        if let Err(err) = self.desk.ticket_log_append(payload.tenant, id, entry).await {
            tracing::warn!(run = %ctx.run.id, error = %err, "could not write the run's result to the ticket log");
        }
    }

    /// A run that can no longer succeed: log it, tell the ticket, open (or count) an
    /// incident. Answers what its error events announce ([`crate::error_events`]).
    async fn report(
        &self,
        ctx: &RunContext,
        payload: &RunPayload,
        stored: Option<&StoredAutomation>,
        state: Option<&ExecState>,
        step: &str,
        message: &str,
    ) -> Notice {
        let name = stored
            .map(|stored| stored.automation.name.clone())
            .unwrap_or_else(|| "(deleted automation)".into());
        tracing::error!(run = %ctx.run.id, automation = %payload.automation_id, tenant = %payload.tenant, step, message, "automation run failed");
        let ticket = state.and_then(|state| state.ticket.clone());
        let (title, impact) =
            failure_incident(&name, ticket.as_ref().map(|(_, number)| number.as_str()));
        let report = IncidentReport {
            cause: format!("automation:{}:step:{step}", payload.automation_id),
            title,
            impact,
            detail: json!({
                "automation": {"id": payload.automation_id.to_string(), "name": name},
                "run": ctx.run.id.to_string(),
                "attempts": ctx.run.attempts,
                "maxRetries": ctx.run.max_retries,
                "reclaims": ctx.run.reclaims,
                "failedStep": step,
                "message": message,
                "steps": state.map(|state| state.steps.clone()).unwrap_or_default(),
                "input": payload.context,
            }),
            ticket: ticket.as_ref().and_then(|(id, _)| id.parse().ok()),
        };
        let failed = error_events::FailedStep {
            key: if step.is_empty() { "run" } else { step }.to_owned(),
            op: stored
                .map_or("run", |stored| op_of(&stored.automation.steps, step))
                .to_owned(),
            message: report.title.clone(),
            impact: report.impact.clone(),
            generation: state.map_or(0, |state| {
                state
                    .steps
                    .iter()
                    .filter(|line| line.op == LIFECYCLE_OP && line.status == "retried by hand")
                    .count()
            }),
            ticket: report.ticket,
        };
        let incident = match self.desk.incident_report(payload.tenant, report).await {
            Ok((incident, opened)) => {
                tracing::info!(run = %ctx.run.id, incident = %incident.id, opened, count = incident.count, "incident reported");
                Some(IncidentBrief::of(&incident, opened))
            }
            Err(err) => {
                tracing::error!(run = %ctx.run.id, error = %err, "could not open an incident for a failed run");
                None
            }
        };
        let notice = Notice {
            source: error_events::Source {
                tenant: payload.tenant,
                automation_id: payload.automation_id,
                automation_name: name.clone(),
                version: payload.automation_version,
                run_id: ctx.run.id.to_string(),
                caused_by: payload.caused_by.clone(),
                started_by: payload.error_event,
            },
            failed: Some(failed),
            incident,
            by_failure: true,
        };
        if let Some(state) = state {
            self.ticket_note(
                payload,
                ctx,
                state,
                format!("Automation \"{name}\" did not finish: {message}"),
            )
            .await;
        }
        notice
    }
}

/// The title and impact of the incident a failed run of automation `name` opens — words a
/// customer reads — over the ticket it was working on, if any.
pub(crate) fn failure_incident(name: &str, ticket: Option<&str>) -> (String, String) {
    match ticket {
        Some(number) => (
            format!("The automation for ticket {number} did not finish; we lost no data."),
            format!(
                "\"{name}\" stopped before it finished ticket {number}. The ticket and everything received are kept; the rest of the automation did not run."
            ),
        ),
        None => (
            format!("The automation \"{name}\" did not finish; we lost no data."),
            "Everything received is kept; the rest of the automation did not run.".to_string(),
        ),
    }
}

/// Whether `automation` listens to webhooks (for the server).
pub fn is_webhook(automation: &Automation) -> bool {
    matches!(automation.trigger, Trigger::Webhook { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_steps_line_says_which_attempt_and_never_promises_a_retry_on_the_last() {
        assert_eq!(retry_note(true, 0, 4), "attempt 1 of 5; will be retried");
        assert_eq!(
            retry_note(true, 4, 4),
            "attempt 5 of 5, the last; not retried"
        );
        assert_eq!(retry_note(false, 0, 4), "not retryable");
    }
}
