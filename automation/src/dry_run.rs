//! Dry runs: an automation walked on a sample input, writing nothing.
//!
//! # Contract
//!
//! - The tree is walked by the executor's own `walk` — conditions with their compared
//!   values, loop passes, rendered templates, `MAX_ACTIONS` — over a
//!   [`fronta_desk::overlay::Overlay`]: every built-in step computes what it *would* do
//!   with the desk's own plans on the tenant's current data ("would create ticket
//!   order-5001 as TK-8 (type order, tags [waiting-to-pack])", "would assign TK-3 to Eva
//!   (warehouse: Eva 0 open of 5, Jan 1 open of 5)"), and its line says that.
//! - Nothing is written: no run, ticket, log line, incident, checkpoint, cursor, guard
//!   row. The loop guard is not consulted (no run exists to count), a pause is said and
//!   not waited, a paused automation is tested like an enabled one.
//! - Connector steps are not called unless the request says `live`: a step with a mock
//!   (`mocks.<step>`, an object) publishes the mock as its outputs; one without is logged
//!   `not called`, with the input it would have sent, and the tree goes on without its
//!   outputs (a later template that needs them fails, naming them). A live test calls
//!   through the same connectors, caps and breaker as a run.
//! - The events the writes would announce are listed with the automations they would
//!   start (named, not run) and those that would not (a change by an automation never
//!   starts that automation again).
//! - A tree that fails ends with its `failed` line and the incident a run would open; a
//!   retryable failure says that a run would retry. The walk is bounded by `time_limit`:
//!   past it the test stops and says so.
//!
//! ```text
//!  sample input ──► context ──► walk (Walker: no checkpointer, Dry) ──► steps
//!                                  │ built-in step ──► Overlay (plans, keeps Woulds)
//!                                  │ connector step ─► mock │ "not called" │ live call
//!                                  ▼
//!                      answer: status, steps, writes, events → listeners, incident
//! ```

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use fronta_desk::overlay::{Overlay, Would};
use fronta_desk::{DeskError, DeskStore, Origin, TenantId, Ticket};
use fronta_engine::registry::StopSignal;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::connector::Connector;
use crate::context::Context;
use crate::executor::{
    AUTOMATION_MAX_RETRIES, DEFAULT_STORAGE_WAIT, ExecState, Failure, Runtime, StepLog, Walker,
    failure_incident,
};
use crate::model::{ActionStep, Step};
use crate::poll::{POLL_STEP, PollLimits};
use crate::secrets::SecretVault;
use crate::steps::{StepDone, ticket_json};
use crate::store::{AutomationStore, StoredAutomation};
use crate::template;

/// The status of a connector step's line when the test did not call it.
pub const NOT_CALLED: &str = "not called";
/// The run id steps see in a dry run (`{{…}}` never shows one; incidents name it).
pub const DRY_RUN_ID: &str = "dry-run";
/// The default of how long a dry run may take (`--test-time-limit`,
/// `FRONTA_TEST_TIME_LIMIT`): long enough for live calls under their own timeouts.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(30);
/// The longest input a `not called` line shows of what would have been sent.
const SHOWN_INPUT_MAX: usize = 300;

/// What stands in for the outside during a walk.
pub struct Dry {
    pub overlay: Arc<Overlay>,
    /// Outputs of connector steps, by step name.
    pub mocks: Map<String, Value>,
    /// Connector steps are called for real.
    pub live: bool,
}

impl Dry {
    /// A mocked connector step's answer, if the request gave one.
    pub(crate) fn stand_in(&self, action: &ActionStep, _context: &Context) -> Option<StepDone> {
        let Some(Value::Object(outputs)) = self.mocks.get(&action.name) else {
            return None;
        };
        Some(StepDone {
            outputs: outputs.clone(),
            message: format!(
                "not called: {} answered with the mock given for {:?}",
                action.op.as_str(),
                action.name
            ),
            ..StepDone::default()
        })
    }

    /// A done step's line: what its writes would do, or what it said itself.
    pub(crate) fn said(&self, message: String) -> String {
        let writes = self.overlay.step_writes();
        if writes.is_empty() {
            message
        } else {
            writes.join("; ")
        }
    }
}

/// The line of a connector step the test did not call: what it would have sent.
pub(crate) fn not_called(action: &ActionStep, context: &Context) -> String {
    let service = action
        .service
        .as_deref()
        .map(|service| format!(" at {service}"))
        .unwrap_or_default();
    let input = match template::render_map(&action.input, context) {
        Ok(input) => {
            let mut shown = Value::Object(input).to_string();
            if shown.len() > SHOWN_INPUT_MAX {
                let mut end = SHOWN_INPUT_MAX;
                while !shown.is_char_boundary(end) {
                    end -= 1;
                }
                shown.truncate(end);
                shown.push('…');
            }
            format!(" with input {shown}")
        }
        Err(_) => String::new(),
    };
    format!(
        "not called: a test does not call {}{service}{input}; its outputs are missing \
         (give \"mocks\": {{\"{}\": {{…}}}} or \"connectors\": \"live\")",
        action.op.as_str(),
        action.name
    )
}

/// What a dry run is asked.
pub struct DryRunRequest {
    /// The automation as it would run (an unsaved one has a fresh id).
    pub stored: StoredAutomation,
    /// The version it is tested at (`None`: an unsaved definition).
    pub version: Option<u32>,
    /// The run context, as the trigger would start it.
    pub context: Map<String, Value>,
    /// Items of a poll automation, as if polled.
    pub items: Option<Vec<Value>>,
    pub mocks: Map<String, Value>,
    pub live: bool,
}

/// Where a dry run reads and what bounds it.
pub struct DryRunner {
    pub desk: Arc<dyn DeskStore>,
    pub automations: Arc<dyn AutomationStore>,
    /// Called only for a live test.
    pub connectors: Option<Arc<dyn Connector>>,
    pub secrets: Option<SecretVault>,
    pub max_pause: Duration,
    pub time_limit: Duration,
}

/// The answer of a dry run (API: `POST /api/automations/test`).
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DryRunAnswer {
    pub dry_run: bool,
    pub automation: Value,
    /// `completed`, `failed`, `would retry`, `stopped` (the time limit).
    pub status: String,
    pub error: Option<String>,
    pub input: Map<String, Value>,
    pub steps: Vec<StepLog>,
    pub writes: Vec<WriteView>,
    pub events: Vec<EventView>,
    /// The incident a failed run would open.
    pub incident: Option<Value>,
    pub notes: Vec<String>,
}

/// One write it would make.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteView {
    pub summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

/// One event it would announce, and whom it would start.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub event: String,
    pub ticket: String,
    pub change: Value,
    pub would_start: Vec<Value>,
    pub not_started: Vec<Value>,
}

impl DryRunner {
    /// Walk `request`'s automation on its input; see the module's contract.
    pub async fn run(&self, request: DryRunRequest) -> Result<DryRunAnswer, DeskError> {
        let overlay = Arc::new(Overlay::new(self.desk.clone()));
        let runtime = Runtime {
            desk: overlay.clone(),
            automations: self.automations.clone(),
            clock: Arc::new(fronta_engine::SystemClock),
            connectors: if request.live {
                self.connectors.clone()
            } else {
                None
            },
            secrets: self.secrets.clone(),
            storage_wait: DEFAULT_STORAGE_WAIT,
            cursors: None,
            poll: PollLimits::default(),
            max_pause: self.max_pause,
        };
        let dry = Dry {
            overlay: overlay.clone(),
            mocks: request.mocks.clone(),
            live: request.live,
        };
        let stored = &request.stored;
        let payload = crate::executor::RunPayload {
            automation_id: stored.id,
            tenant: stored.tenant,
            context: request.context.clone(),
            ticket: None,
            automation_version: request.version.unwrap_or(0),
            retry_of: None,
            caused_by: None,
            restart: None,
            error_event: None,
        };
        let mut state = ExecState::new(Context::from_params(request.context.clone()));
        let mut notes = Vec::new();
        if let Some(items) = &request.items {
            let mut outputs = Map::new();
            outputs.insert("items".into(), Value::Array(items.clone()));
            outputs.insert("count".into(), json!(items.len()));
            state.context.publish_outputs(POLL_STEP, outputs.clone());
            state.steps.push(StepLog::instant(
                POLL_STEP,
                "poll",
                "ok",
                format!(
                    "{} items given to the test, as if polled (nothing fetched; the cursor stays)",
                    items.len()
                ),
                Utc::now(),
            ));
        }
        if !stored.automation.enabled {
            notes
                .push("the automation is paused: a real trigger would not start it now".to_owned());
        }
        let walker = Walker {
            run_id: DRY_RUN_ID.to_owned(),
            attempts: 0,
            max_retries: AUTOMATION_MAX_RETRIES as u32,
            signal: StopSignal::new(),
            checkpointer: None,
            dry: Some(&dry),
            replay: None,
            dispatcher: None,
        };
        let walked = tokio::time::timeout(
            self.time_limit,
            runtime.walk(&walker, &payload, stored, &mut state),
        )
        .await;
        let (status, error) = match walked {
            Ok(Ok(_)) => ("completed", None),
            Ok(Err(Failure::Fatal { step, message })) => {
                if state
                    .steps
                    .last()
                    .is_none_or(|last| last.name != step || last.status != "failed")
                {
                    let name = if step.is_empty() {
                        "run"
                    } else {
                        step.as_str()
                    };
                    state.steps.push(StepLog::instant(
                        name,
                        "run",
                        "failed",
                        message.clone(),
                        Utc::now(),
                    ));
                }
                ("failed", Some(format!("step {step:?}: {message}")))
            }
            Ok(Err(Failure::Retry { step, message, .. })) => (
                "would retry",
                Some(format!(
                    "step {step:?}: {message} (a run would be retried; a test stops here)"
                )),
            ),
            Err(_) => {
                let message = format!(
                    "the test's time limit ({} s; --test-time-limit, FRONTA_TEST_TIME_LIMIT) \
                     was reached: nothing after this line ran",
                    self.time_limit.as_secs()
                );
                state.steps.push(StepLog::instant(
                    "run",
                    "run",
                    "stopped",
                    message.clone(),
                    Utc::now(),
                ));
                ("stopped", Some(message))
            }
        };
        hint_missing_outputs(&mut state.steps);
        let incident = (status == "failed").then(|| {
            let ticket = state.ticket.as_ref().map(|(_, number)| number.as_str());
            let (title, impact) = failure_incident(&stored.automation.name, ticket);
            json!({
                "title": title,
                "impact": impact,
                "summary": "a run failing here would open this incident (or count it again on an open one of the same cause)",
            })
        });
        let writes = overlay.writes();
        let events = self.events(stored, &writes).await?;
        Ok(DryRunAnswer {
            dry_run: true,
            automation: json!({
                "id": request.version.map(|_| stored.id.to_string()),
                "name": stored.automation.name,
                "version": request.version,
                "trigger": stored.automation.trigger.kind(),
            }),
            status: status.to_owned(),
            error,
            input: request.context,
            steps: state.steps,
            writes: writes
                .iter()
                .map(|would| WriteView {
                    summary: would.summary.clone(),
                    log: would.log.clone(),
                })
                .collect(),
            events,
            incident,
            notes,
        })
    }

    /// The events `writes` would announce, each with the automations it would start.
    async fn events(
        &self,
        stored: &StoredAutomation,
        writes: &[Would],
    ) -> Result<Vec<EventView>, DeskError> {
        let mut events = Vec::new();
        for event in writes.iter().filter_map(|would| would.event.as_ref()) {
            let listeners = self
                .automations
                .automations_for_event(stored.tenant, event.kind.as_str())
                .await?;
            let (mut would_start, mut not_started) = (Vec::new(), Vec::new());
            for listener in listeners {
                let named =
                    json!({"id": listener.id.to_string(), "name": listener.automation.name});
                let by_itself = matches!(&event.origin, Origin::Automation { automation_id, .. }
                    if *automation_id == listener.id.to_string());
                if by_itself {
                    let mut named = named;
                    named["why"] =
                        json!("a change made by this automation does not start it again");
                    not_started.push(named);
                } else {
                    would_start.push(named);
                }
            }
            events.push(EventView {
                event: event.kind.as_str().to_owned(),
                ticket: event.ticket.human_id(),
                change: serde_json::to_value(&event.change).unwrap_or(Value::Null),
                would_start,
                not_started,
            });
        }
        Ok(events)
    }
}

/// A failed line whose message names an output of a step this test did not call says
/// so: the template failed because of the test, not the tree.
fn hint_missing_outputs(steps: &mut [StepLog]) {
    let skipped: Vec<String> = steps
        .iter()
        .filter(|line| line.status == NOT_CALLED)
        .map(|line| line.name.clone())
        .collect();
    for line in steps.iter_mut().filter(|line| line.status == "failed") {
        if let Some(name) = skipped.iter().find(|name| {
            line.message.contains(&format!("\"{name}."))
                || line.message.contains(&format!("{{{{{name}."))
        }) {
            line.message.push_str(&format!(
                " — step {name:?} was not called in this test: give it a mock (\"mocks\": {{\"{name}\": {{…}}}}) or test with \"connectors\": \"live\""
            ));
        }
    }
}

/// A ticket as a test names it: `"TK-12"`, `"12"`, `12` (its number) or its id.
pub async fn find_ticket(
    desk: &dyn DeskStore,
    tenant: TenantId,
    reference: &Value,
) -> Result<Ticket, DeskError> {
    match reference {
        Value::String(text) => fronta_desk::store::find_ticket(desk, tenant, text).await,
        Value::Number(number) => {
            fronta_desk::store::find_ticket(desk, tenant, &number.to_string()).await
        }
        other => Err(DeskError::Invalid(format!(
            "\"ticket\" must be a ticket's number (\"TK-12\" or 12) or id, got {other}"
        ))),
    }
}

/// The context an event run over `ticket` starts with: the ticket as read and the
/// change (`{"<field>": {"from", "to"}}`, empty when the test gives none).
pub fn event_context(ticket: &Ticket, change: Option<Map<String, Value>>) -> Map<String, Value> {
    let mut context = Map::new();
    context.insert("ticket".into(), ticket_json(ticket));
    context.insert("change".into(), Value::Object(change.unwrap_or_default()));
    context
}

/// The mocks of `mocks` that name no connector step of `steps` (anywhere in the tree),
/// each with why: a test refuses them by name.
pub fn unknown_mocks(steps: &[Step], mocks: &Map<String, Value>) -> Vec<String> {
    fn find<'a>(steps: &'a [Step], name: &str) -> Option<&'a Step> {
        steps.iter().find_map(|step| {
            if step.name() == name {
                return Some(step);
            }
            match step {
                Step::Condition(condition) => {
                    find(&condition.then_steps, name).or_else(|| find(&condition.else_steps, name))
                }
                Step::ForEach(each) => find(&each.steps, name),
                Step::Action(_) => None,
            }
        })
    }
    let mut problems = Vec::new();
    for (name, outputs) in mocks {
        match find(steps, name) {
            None => problems.push(format!("mocks.{name}: no step is named {name:?}")),
            Some(Step::Action(action)) if action.op.is_connector() => {
                if !outputs.is_object() {
                    problems.push(format!(
                        "mocks.{name}: the outputs of a mock must be an object, got {outputs}"
                    ));
                }
            }
            Some(step) => problems.push(format!(
                "mocks.{name}: step {name:?} is a {} step, not a connector step; only \
                 connector steps (http/request, mcp/call-tool) are mocked",
                match step {
                    Step::Action(action) => action.op.as_str().to_owned(),
                    other => other.kind().to_owned(),
                }
            )),
        }
    }
    problems
}

/// A tenant's unsaved automation as a dry run walks it: a fresh id, no token.
pub fn unsaved(tenant: TenantId, automation: crate::model::Automation) -> StoredAutomation {
    let now = Utc::now();
    StoredAutomation {
        id: crate::store::AutomationId::new(),
        tenant,
        automation,
        webhook_token: None,
        signing_secret: None,
        retired: Vec::new(),
        current_version: 0,
        in_flight: Default::default(),
        created_at: now,
        updated_at: now,
    }
}
