//! Retry from any step: a finished run (completed, failed, cancelled or suppressed)
//! started again by hand, as a new run on its own version, from its start or from a named
//! step with the context as it was before that step.
//!
//! The new run carries [`Restart`] in its payload. When it first runs, the executor reads
//! the old run's step log and walks the tree from the start without doing anything: every
//! action before the named step is *reused* — its logged outputs published as if it had
//! run, its line `reused` — conditions and loops are evaluated again on that context,
//! and the walk stops at the first time it meets the named step. From there the run goes
//! on as any run, checkpointing as it goes. A step the old run did not finish cannot be
//! reused, and a named step the walk never reaches (another branch) fails the new run
//! with a line that says so.
//!
//! ```text
//!  POST /api/runs/{id}/retry {"fromStep": "c"} ─► new run (retryOf, restart) ─► executor:
//!     a ok ──► reused (outputs of the old a)        ┐
//!     b met ─► evaluated again                      ├ no side effect, no checkpoint
//!     c ◄──── stop: "retried from step c of run …"  ┘
//!     c, d … run as usual
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use fronta_engine::{EnqueueRequest, Run};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::executor::{AUTOMATION_KIND, AUTOMATION_MAX_RETRIES, RunPayload, StepLog};
use crate::model::Step;

/// Where a run started again by hand begins (in its payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restart {
    /// The run it starts again.
    pub run: String,
    /// The step it starts from (`None`: the start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_step: Option<String>,
}

/// The status of a reused step's line.
pub const REUSED: &str = "reused";

/// Every step name of `steps`, depth first.
pub fn step_names(steps: &[Step]) -> Vec<String> {
    let mut names = Vec::new();
    for step in steps {
        names.push(step.name().to_owned());
        match step {
            Step::Condition(condition) => {
                names.extend(step_names(&condition.then_steps));
                names.extend(step_names(&condition.else_steps));
            }
            Step::ForEach(each) => names.extend(step_names(&each.steps)),
            Step::Action(_) => {}
        }
    }
    names
}

/// Why a run is not started again.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// It is still going.
    NotFinished(fronta_engine::RunStatus),
    /// Its version has no such step (the message names its steps).
    NoSuchStep(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NotFinished(status) => write!(
                f,
                "the run is {status}: only a finished run (completed, failed, cancelled or \
                 suppressed) is started again from a step or its start"
            ),
            Refused::NoSuchStep(message) => f.write_str(message),
        }
    }
}

/// The enqueue of `run` (whose payload is `payload`) started again on its own version,
/// whose tree is `tree`, from `from_step` (`None`: its start); or why not.
pub fn restart_request(
    run: &Run,
    mut payload: RunPayload,
    tree: &[Step],
    from_step: Option<&str>,
) -> Result<EnqueueRequest, Refused> {
    if !run.status.is_terminal() {
        return Err(Refused::NotFinished(run.status));
    }
    if let Some(step) = from_step {
        let names = step_names(tree);
        if !names.iter().any(|name| name == step) {
            return Err(Refused::NoSuchStep(format!(
                "version {} of the automation has no step {step:?} (its steps: {})",
                payload.automation_version,
                names.join(", ")
            )));
        }
    }
    payload.retry_of = Some(run.id.to_string());
    // Started by a person: no longer a link of any chain.
    payload.caused_by = None;
    payload.restart = Some(Restart {
        run: run.id.to_string(),
        from_step: from_step.map(str::to_owned),
    });
    Ok(EnqueueRequest::new(
        AUTOMATION_KIND,
        serde_json::to_value(&payload).unwrap_or(Value::Null),
        AUTOMATION_MAX_RETRIES,
    )
    .tenant(run.tenant.clone())
    .trigger(run.trigger))
}

/// The old run's finished steps, reused by name in the order they ran, until the walk
/// reaches `stop_at`.
pub struct Replay {
    lines: Mutex<HashMap<String, VecDeque<StepLog>>>,
    pub stop_at: String,
    pub from_run: String,
    reached: AtomicBool,
}

impl Replay {
    /// The lines of the old run `from_run` that can be reused: those of steps that
    /// finished (`ok`, `paused`, or reused themselves).
    pub fn new(old: Vec<StepLog>, stop_at: &str, from_run: &str) -> Self {
        let mut lines: HashMap<String, VecDeque<StepLog>> = HashMap::new();
        for line in old {
            if matches!(line.status.as_str(), "ok" | "paused" | REUSED) {
                lines.entry(line.name.clone()).or_default().push_back(line);
            }
        }
        Replay {
            lines: Mutex::new(lines),
            stop_at: stop_at.to_owned(),
            from_run: from_run.to_owned(),
            reached: AtomicBool::new(false),
        }
    }

    /// The next finished line of step `name`, if the old run has one left.
    pub(crate) fn take(&self, name: &str) -> Option<StepLog> {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_mut(name)
            .and_then(VecDeque::pop_front)
    }

    pub(crate) fn reach(&self) {
        self.reached.store(true, Ordering::SeqCst);
    }

    /// Whether the walk stopped at the step.
    pub fn reached(&self) -> bool {
        self.reached.load(Ordering::SeqCst)
    }
}
