//! Validation on save: [`validate`] lists **every** problem of an automation that parsed,
//! each with its path, so a user fixes everything in one round.
//!
//! What it checks: ops against the catalogue and their inputs (required, unknown, the
//! shape of literal values); conditions (at least one rule, known operators, a value
//! exactly when the operator takes one, fields that name something); template names
//! (`{{name}}` must be something the run could hold at that step); the step cap
//! [`MAX_STEPS`] over the whole tree; literal ticket types and statuses against
//! [`ValidationContext`]; duplicate step names; poll intervals; webhook parameter names
//! and paths; cron field counts.
//!
//! What a name may be, at a given step: a trigger parameter, `_body` (webhook and
//! manual triggers), `ticket`/`change` (event triggers), `secrets.<name>`, the variable
//! of an enclosing `forEach`, an earlier step's output as `<step>.<key>`, or an earlier
//! step's output key bare. Anything below those is not checked (`_body.anything`,
//! `ticket.anything`, `call.body.anything` are fine): the shape of outside data is not
//! known on save. "Earlier" is document order, branches included — a step in a `then`
//! branch may not have run, but it could have, and that is enough.
//!
//! Cron expressions and time-zone names are parsed as the scheduler will
//! (`crate::schedule::CronSchedule`). Not checked here: groups and services (not in the
//! context yet).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::catalogue::{Op, known_names};
use crate::context::BODY_KEY;
use crate::contract::path_problem;
use crate::model::{
    ActionStep, Automation, ConditionStep, ForEachStep, Mailbox, Match, Operator, PollSettings,
    PollSource, Rule, Step, Trigger, WebhookParam, count_steps, json_kind,
};
use crate::poll::{POLL_OUTPUTS, POLL_STEP};
use crate::problem::{Problem, field_path, index_path};
use crate::schedule::CronSchedule;
use crate::template::{self, Segment};

/// At most this many steps in a tree (every node once: actions, conditions, loops and
/// all inside them), checked on save.
pub const MAX_STEPS: usize = 50;
/// At most this many executed steps in one run, loop passes included — the executor's
/// cap at run time.
pub const MAX_ACTIONS: usize = 1000;
/// The shortest poll interval: shorter is not polling but an attack on the service.
pub const MIN_POLL_INTERVAL_SEC: u64 = 10;

/// The shortest time between two ticks of a schedule by default: a cron that fires more
/// often (with seconds) is refused on save, like a poll under [`MIN_POLL_INTERVAL_SEC`].
pub const MIN_SCHEDULE_INTERVAL_SEC: u64 = 10;

/// What validation needs to know about the tenant, and the operator's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationContext {
    /// Ticket type name → its statuses.
    pub ticket_types: HashMap<String, Vec<String>>,
    /// The shortest time between two ticks of a schedule (`--min-schedule-interval`,
    /// [`MIN_SCHEDULE_INTERVAL_SEC`] by default).
    pub min_schedule_interval: std::time::Duration,
    /// The longest `flow/pause` (`--max-pause`, [`crate::steps::MAX_PAUSE`] by default).
    pub max_pause: std::time::Duration,
    /// Group name → its members' names, for `ticket/assign` with a literal group and
    /// member; a group not listed is not judged (it may be made before the run).
    pub groups: HashMap<String, Vec<String>>,
}

impl Default for ValidationContext {
    fn default() -> Self {
        ValidationContext {
            ticket_types: HashMap::new(),
            min_schedule_interval: std::time::Duration::from_secs(MIN_SCHEDULE_INTERVAL_SEC),
            max_pause: crate::steps::MAX_PAUSE,
            groups: HashMap::new(),
        }
    }
}

impl ValidationContext {
    /// A context with the given ticket types and their statuses.
    pub fn with_ticket_types<I, T, S>(types: I) -> ValidationContext
    where
        I: IntoIterator<Item = (T, Vec<S>)>,
        T: Into<String>,
        S: Into<String>,
    {
        ValidationContext {
            ticket_types: types
                .into_iter()
                .map(|(name, statuses)| {
                    (name.into(), statuses.into_iter().map(Into::into).collect())
                })
                .collect(),
            ..ValidationContext::default()
        }
    }
}

/// Every problem of the automation, in document order; empty when it may be saved.
pub fn validate(automation: &Automation, context: &ValidationContext) -> Vec<Problem> {
    let mut validator = Validator::new(automation, context);
    if automation.name.trim().is_empty() {
        validator.report("name", "the automation needs a name");
    }
    validator.trigger(&automation.trigger);
    let count = count_steps(&automation.steps);
    if count > MAX_STEPS {
        validator.report(
            "steps",
            format!(
                "the automation has {count} steps; at most {MAX_STEPS} are allowed (every step \
                 counts once: actions, conditions, loops and everything inside them)"
            ),
        );
    }
    validator.steps(&automation.steps, "steps");
    validator.problems
}

/// The problems of a lone connector call, as a dashboard widget makes one: the op must
/// be a connector (`http/request`, `mcp/call-tool`), its inputs are checked exactly as a
/// connector step's (required and unknown inputs, literal values), and templates may
/// name only `{{secrets.<name>}}`. Paths are `op`, `service`, `input.<key>`….
pub fn connector_call(action: &ActionStep) -> Vec<Problem> {
    let empty = Automation {
        name: String::new(),
        enabled: true,
        trigger: Trigger::Manual,
        steps: Vec::new(),
    };
    let context = ValidationContext::default();
    let mut validator = Validator::new(&empty, &context);
    validator.body_available = false;
    validator.lone_call = true;
    if action.op.is_known() && !action.op.is_connector() {
        validator.report(
            "op",
            format!(
                "a widget calls a connector: op must be http/request or mcp/call-tool, found {}",
                action.op
            ),
        );
        return validator.problems;
    }
    if action.op == Op::MailSend {
        validator.report(
            "op",
            "a widget reads data: mail/send would send a message at every refresh; op must be \
             http/request or mcp/call-tool",
        );
        return validator.problems;
    }
    validator.action(action, "");
    validator.problems
}

const OPERATOR_NAMES: &str =
    "eq, neq, gt, gte, lt, lte, contains, notContains, isEmpty, isNotEmpty";
const HTTP_METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
/// The ticket an event trigger carries (API.md), for suggestions.
const TICKET_FIELDS: [&str; 11] = [
    "id",
    "number",
    "externalId",
    "title",
    "type",
    "status",
    "closed",
    "tags",
    "assignee",
    "group",
    "fields",
];
const RESERVED_PARAM_NAMES: [&str; 2] = [BODY_KEY, "secrets"];

struct Validator<'a> {
    /// `_poll` or `_schedule`: what the scheduler puts in a timed run's context.
    timed_root: Option<&'static str>,
    /// A poll automation: its implicit first step publishes `poll.*`.
    poll: bool,
    context: &'a ValidationContext,
    problems: Vec<Problem>,
    params: Vec<&'a str>,
    body_available: bool,
    /// An event trigger: the roots its context starts with (`ticket`, `change`; for the
    /// error events `automation`, `run`, `step`, …); empty for other triggers.
    event_roots: &'static [&'static str],
    /// Every step name in the tree, to tell "comes later" from "does not exist".
    all_steps: HashSet<&'a str>,
    /// Steps before the current one, in document order.
    earlier: Vec<&'a Step>,
    /// Variables of the enclosing loops, innermost last.
    loop_variables: Vec<&'a str>,
    /// Step name → path of its first use.
    seen: HashMap<&'a str, String>,
    /// Whether `{{secrets.<name>}}` may be used here: only in a connector step's input,
    /// which is rendered at call time and never logged. Anywhere else (conditions,
    /// `forEach` items, built-in steps) the value would reach the step log or a ticket.
    secrets_allowed: bool,
    /// A lone connector call (a dashboard widget): nothing but `{{secrets.<name>}}` can
    /// be named, there is no trigger, step or loop to provide anything else.
    lone_call: bool,
}

impl<'a> Validator<'a> {
    fn new(automation: &'a Automation, context: &'a ValidationContext) -> Self {
        let params = match &automation.trigger {
            Trigger::Webhook { params } => params.iter().map(|p| p.name.as_str()).collect(),
            _ => Vec::new(),
        };
        let mut all_steps = HashSet::new();
        collect_names(&automation.steps, &mut all_steps);
        Validator {
            context,
            problems: Vec::new(),
            params,
            body_available: matches!(
                automation.trigger,
                Trigger::Webhook { .. } | Trigger::Manual
            ),
            event_roots: match automation.trigger {
                Trigger::Event { event } => event.context_roots(),
                _ => &[],
            },
            poll: matches!(automation.trigger, Trigger::Poll { .. }),
            timed_root: match automation.trigger {
                Trigger::Poll { .. } => Some("_poll"),
                Trigger::Schedule { .. } => Some("_schedule"),
                _ => None,
            },
            all_steps,
            earlier: Vec::new(),
            loop_variables: Vec::new(),
            seen: HashMap::new(),
            secrets_allowed: false,
            lone_call: false,
        }
    }

    fn report(&mut self, path: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(path, message));
    }

    fn trigger(&mut self, trigger: &Trigger) {
        match trigger {
            Trigger::Webhook { params } => self.webhook_params(params),
            Trigger::Poll {
                source,
                interval_sec,
                settings,
            } => {
                if let Some(seconds) = interval_sec
                    && *seconds < MIN_POLL_INTERVAL_SEC
                {
                    self.report(
                        "trigger.intervalSec",
                        format!(
                            "a poll interval of {seconds} s is below the minimum of \
                             {MIN_POLL_INTERVAL_SEC} s"
                        ),
                    );
                }
                self.poll_settings(*source, settings);
            }
            Trigger::Schedule { cron, timezone } => {
                let fields = cron.split_whitespace().count();
                if fields == 0 {
                    self.report("trigger.cron", "the cron expression is empty");
                } else if !(5..=7).contains(&fields) {
                    self.report(
                        "trigger.cron",
                        format!(
                            "cron \"{cron}\" has {fields} fields; it needs 5 (minute hour \
                             day-of-month month day-of-week), or 6–7 with seconds and year"
                        ),
                    );
                }
                if timezone
                    .as_deref()
                    .is_some_and(|zone| zone.trim().is_empty())
                {
                    self.report(
                        "trigger.timezone",
                        "the time zone is empty; leave it out for UTC",
                    );
                } else if let Err(problem) = CronSchedule::parse("* * * * *", timezone.as_deref()) {
                    self.report("trigger.timezone", problem);
                }
                if (5..=7).contains(&fields) {
                    let checked = CronSchedule::parse(cron, None).and_then(|schedule| {
                        schedule.check_fires(chrono::Utc::now(), self.context.min_schedule_interval)
                    });
                    if let Err(problem) = checked {
                        self.report("trigger.cron", problem);
                    }
                }
            }
            _ => {}
        }
    }

    /// What each source needs (see `crate::poll`).
    fn poll_settings(&mut self, source: PollSource, settings: &PollSettings) {
        let name = source.as_str();
        if let Some(service) = &settings.service
            && service.trim().is_empty()
        {
            self.report(
                "trigger.service",
                "the service is empty; leave it out or name it",
            );
        }
        match source {
            PollSource::Http | PollSource::Messages => {
                if settings.mailbox.is_some() {
                    self.report(
                        "trigger.mailbox",
                        format!("a mailbox is for mail polls, not {name} polls"),
                    );
                }
                match &settings.request {
                    None => self.report(
                        "trigger.request",
                        format!(
                            "missing field \"request\": a {name} poll needs the request to make \
                             (an http/request input: url, method, headers, query, body, timeoutSec)"
                        ),
                    ),
                    Some(request) => self.poll_request(request, settings.service.clone()),
                }
                for (key, value, example) in [
                    ("items", &settings.items, "body.items"),
                    ("cursor", &settings.cursor, "id"),
                ] {
                    let at = format!("trigger.{key}");
                    match value {
                        None => self.report(
                            &at,
                            format!(
                                "missing field \"{key}\": a {name} poll needs it (a dot path such as \"{example}\")"
                            ),
                        ),
                        // `body` alone is fine for items: the answer is the array.
                        Some(path) => {
                            if let Some(problem) = path_problem(path) {
                                self.report(&at, format!("{problem}: \"{path}\""));
                            }
                        }
                    }
                }
            }
            PollSource::Mail => {
                for (key, given) in [
                    ("request", settings.request.is_some()),
                    ("items", settings.items.is_some()),
                    ("cursor", settings.cursor.is_some()),
                ] {
                    if given {
                        self.report(
                            &format!("trigger.{key}"),
                            format!(
                                "\"{key}\" is for http and messages polls; a mail poll reads its mailbox \
                                 (new messages are found by their IMAP UID)"
                            ),
                        );
                    }
                }
                match &settings.mailbox {
                    None => self.report(
                        "trigger.mailbox",
                        "missing field \"mailbox\": a mail poll needs its IMAP mailbox \
                         (host, port, tls, user, password, folder)",
                    ),
                    Some(mailbox) => self.mailbox(mailbox),
                }
            }
        }
    }

    fn poll_request(&mut self, request: &Map<String, Value>, service: Option<String>) {
        let op = Op::HttpRequest;
        let at = |key: &str| field_path("trigger.request", key);
        for key in op.required_inputs() {
            if request.get(*key).is_none_or(Value::is_null) {
                self.report(
                    &at(key),
                    format!("missing field \"{key}\" (the address to poll)"),
                );
            }
        }
        for key in request.keys() {
            if !op.takes_input(key) {
                let takes: Vec<&str> = op
                    .required_inputs()
                    .iter()
                    .chain(op.optional_inputs())
                    .copied()
                    .collect();
                self.report(
                    &at(key),
                    format!(
                        "unknown field \"{key}\" of a poll request (its fields: {})",
                        takes.join(", ")
                    ),
                );
            }
        }
        // Rendered at poll time with `_poll` and the tenant's secrets only.
        self.secrets_allowed = true;
        for (key, value) in request {
            self.templates(value, &at(key));
        }
        self.secrets_allowed = false;
        let action = ActionStep {
            name: POLL_STEP.into(),
            op,
            service,
            input: request.clone(),
        };
        self.literal_inputs(&action, "trigger.request");
    }

    fn mailbox(&mut self, mailbox: &Mailbox) {
        let at = |key: &str| field_path("trigger.mailbox", key);
        if let Some(problem) = crate::mail::host_problem(&mailbox.host) {
            self.report(&at("host"), problem);
        }
        if mailbox.user.trim().is_empty() {
            self.report(&at("user"), "the user is empty");
        }
        if !crate::mail::is_secret_reference(&mailbox.password) {
            self.report(
                &at("password"),
                "the password must be a secret reference such as \"{{secrets.mail_password}}\" \
                 (store it with PUT /api/secrets/{name}); a literal password would be readable by \
                 everyone who can read the automation",
            );
        }
        if let Some(folder) = &mailbox.folder
            && folder.trim().is_empty()
        {
            self.report(&at("folder"), "the folder is empty; leave it out for INBOX");
        }
    }

    fn webhook_params(&mut self, params: &[WebhookParam]) {
        let mut first_use: HashMap<&str, usize> = HashMap::new();
        for (index, param) in params.iter().enumerate() {
            let path = index_path("trigger.params", index);
            let name = param.name.as_str();
            if name.trim().is_empty() {
                self.report(&field_path(&path, "name"), "a parameter needs a name");
            } else if RESERVED_PARAM_NAMES.contains(&name) {
                self.report(
                    &field_path(&path, "name"),
                    format!("\"{name}\" is reserved; choose another parameter name"),
                );
            } else if name.contains(['{', '}']) || name.trim() != name {
                self.report(
                    &field_path(&path, "name"),
                    format!("parameter name \"{name}\" cannot hold braces or surrounding spaces"),
                );
            } else if let Some(first) = first_use.get(name) {
                self.report(
                    &field_path(&path, "name"),
                    format!("parameter \"{name}\" is already declared at trigger.params[{first}]"),
                );
            } else {
                first_use.insert(name, index);
            }
            if let Some(problem) = path_problem(&param.path) {
                self.report(
                    &field_path(&path, "path"),
                    format!("{problem}: \"{}\"", param.path),
                );
            }
        }
    }

    fn steps(&mut self, steps: &'a [Step], path: &str) {
        for (index, step) in steps.iter().enumerate() {
            let step_path = index_path(path, index);
            self.step_name(step.name(), &step_path);
            match step {
                Step::Action(action) => self.action(action, &step_path),
                Step::Condition(condition) => self.condition(condition, &step_path),
                Step::ForEach(each) => self.for_each(each, &step_path),
            }
            self.earlier.push(step);
        }
    }

    fn step_name(&mut self, name: &'a str, path: &str) {
        let name_path = field_path(path, "name");
        if name.trim().is_empty() {
            self.report(&name_path, "a step needs a name");
            return;
        }
        if name.contains('.') || name.contains(['{', '}']) || name.trim() != name {
            self.report(
                &name_path,
                format!(
                    "step name \"{name}\" cannot hold dots, braces or surrounding spaces \
                     (outputs are published as <step>.<key>)"
                ),
            );
        }
        if self.poll && name == POLL_STEP {
            self.report(
                &name_path,
                format!(
                    "step name \"{POLL_STEP}\" is the poll's own step in a poll automation \
                     (its outputs: {}.items, .count, .cursor); choose another name",
                    POLL_STEP
                ),
            );
        }
        if let Some(first) = self.seen.get(name) {
            let message = format!("step name \"{name}\" is already used at {first}");
            self.report(&name_path, message);
        } else {
            self.seen.insert(name, path.to_owned());
        }
    }

    fn action(&mut self, action: &'a ActionStep, path: &str) {
        let op = &action.op;
        if let Op::Unknown(name) = op {
            self.report(
                &field_path(path, "op"),
                format!("unknown op \"{name}\" (ops: {})", known_names()),
            );
        }
        if action.service.is_some() && op.is_known() && !op.is_connector() {
            self.report(
                &field_path(path, "service"),
                format!(
                    "\"service\" is for connector steps (http/request, mcp/call-tool, mail/send), not {op}"
                ),
            );
        }
        let input_path = field_path(path, "input");
        if op.is_known() {
            let missing: Vec<&str> = op
                .required_inputs()
                .iter()
                .copied()
                .filter(|key| action.input.get(*key).is_none_or(Value::is_null))
                .collect();
            for key in &missing {
                self.report(
                    &field_path(&input_path, key),
                    format!(
                        "missing input \"{key}\" ({op} needs: {})",
                        op.required_inputs().join(", ")
                    ),
                );
            }
            for key in action.input.keys() {
                if !op.takes_input(key) {
                    let takes: Vec<&str> = op
                        .required_inputs()
                        .iter()
                        .chain(op.optional_inputs())
                        .copied()
                        .collect();
                    self.report(
                        &field_path(&input_path, key),
                        format!(
                            "unknown input \"{key}\" for {op} (its inputs: {})",
                            takes.join(", ")
                        ),
                    );
                }
            }
        }
        self.secrets_allowed = op.is_connector();
        for (key, value) in &action.input {
            self.templates(value, &field_path(&input_path, key));
        }
        self.secrets_allowed = false;
        self.literal_inputs(action, &input_path);
    }

    /// Checks the literal values an op can be sure of on save.
    fn literal_inputs(&mut self, action: &ActionStep, input_path: &str) {
        let input = &action.input;
        let at = |key: &str| field_path(input_path, key);
        match &action.op {
            Op::TicketUpsert => {
                let ticket_type = input.get("type").and_then(literal_string);
                if let Some(ticket_type) = ticket_type {
                    self.known_type(ticket_type, &at("type"));
                    if let Some(status) = input.get("status").and_then(literal_string) {
                        self.status_of_type(status, ticket_type, &at("status"));
                    }
                }
                self.string_or_template(input.get("type"), &at("type"));
                self.string_or_template(input.get("status"), &at("status"));
                self.tags(input.get("tags"), &at("tags"));
                self.object_or_template(input.get("fields"), &at("fields"), "fields");
                self.on_existing(input, &at("onExisting"));
            }
            Op::TicketGet | Op::TicketComment => {
                self.ticket_named(action, &at("ticket"));
                if action.op == Op::TicketComment {
                    match input.get("text") {
                        Some(Value::String(text)) if text.trim().is_empty() => {
                            self.report(&at("text"), "the note is empty: write its text")
                        }
                        value => self.string_or_template(value, &at("text")),
                    }
                }
            }
            Op::TicketSetType => {
                if let Some(ticket_type) = input.get("type").and_then(literal_string) {
                    self.known_type(ticket_type, &at("type"));
                }
                self.string_or_template(input.get("type"), &at("type"));
            }
            Op::TicketSetStatus => {
                if let Some(status) = input.get("status").and_then(literal_string) {
                    match self.type_of_ticket(input.get("ticket")) {
                        Some(ticket_type) => {
                            self.status_of_type(status, &ticket_type, &at("status"))
                        }
                        None => self.status_of_any_type(status, &at("status")),
                    }
                }
                self.string_or_template(input.get("status"), &at("status"));
            }
            Op::TicketAddTags => self.tags(input.get("tags"), &at("tags")),
            Op::TicketAssignLeastBusy => {
                let when_full = input.get("whenFull");
                let templated =
                    matches!(when_full, Some(Value::String(text)) if !template::is_literal(text));
                if !templated && let Err(why) = crate::steps::when_full_of(when_full) {
                    self.report(&at("whenFull"), why);
                }
            }
            Op::TicketAssign => {
                let group = input.get("group").and_then(literal_string);
                let member = input.get("member").and_then(literal_string);
                let stranger = match (group, member) {
                    (Some(group), Some(member)) => self
                        .context
                        .groups
                        .get(group)
                        .filter(|members| !members.iter().any(|name| name == member))
                        .map(|members| {
                            format!(
                                "\"{member}\" is not a member of group \"{group}\" (its members: {})",
                                if members.is_empty() {
                                    "none".to_owned()
                                } else {
                                    members.join(", ")
                                }
                            )
                        }),
                    _ => None,
                };
                if let Some(message) = stranger {
                    self.report(&at("member"), message);
                }
            }
            Op::FlowPause => {
                if let Some(seconds) = input.get("seconds") {
                    let templated = matches!(seconds, Value::String(text)
                        if template::single_name(text).is_some());
                    if !templated
                        && !seconds.is_null()
                        && let Err(why) =
                            crate::steps::pause_of(Some(seconds), self.context.max_pause)
                    {
                        self.report(
                            &at("seconds"),
                            format!("{why}; or one {{{{name}}}} to take it from the run"),
                        );
                    }
                }
            }
            Op::HttpRequest => {
                if let Some(method) = input.get("method").and_then(literal_string)
                    && !HTTP_METHODS.contains(&method.to_ascii_uppercase().as_str())
                {
                    self.report(
                        &at("method"),
                        format!(
                            "unknown HTTP method \"{method}\" (methods: {})",
                            HTTP_METHODS.join(", ")
                        ),
                    );
                }
                if let Some(url) = input.get("url").and_then(literal_string)
                    && !(url.starts_with("https://") || url.starts_with("http://"))
                {
                    self.report(
                        &at("url"),
                        format!("url \"{url}\" must start with https:// or http://"),
                    );
                }
                if let Some(timeout) = input.get("timeoutSec") {
                    let fine = match timeout {
                        Value::Number(number) => number.as_f64().is_some_and(|s| s > 0.0),
                        Value::String(text) => template::single_name(text).is_some(),
                        _ => false,
                    };
                    if !fine {
                        self.report(
                            &at("timeoutSec"),
                            format!("timeoutSec must be a positive number, found {timeout}"),
                        );
                    }
                }
                self.object_or_template(input.get("headers"), &at("headers"), "headers");
                self.object_or_template(input.get("query"), &at("query"), "query");
            }
            Op::McpCallTool => {
                self.object_or_template(input.get("arguments"), &at("arguments"), "arguments");
            }
            Op::MailSend => {
                for (key, message) in crate::mail::literal_problems(input) {
                    self.report(&at(&key), message);
                }
            }
            _ => {}
        }
    }

    /// `ticket/upsert`'s `onExisting` (`crate::steps::on_existing_of`): a literal list of
    /// the inputs that apply to an existing ticket, each one the step gives.
    fn on_existing(&mut self, input: &Map<String, Value>, path: &str) {
        let value = input.get("onExisting");
        if let Some(Value::String(text)) = value
            && !template::is_literal(text)
        {
            self.report(
                path,
                "onExisting cannot be a template: which inputs apply to an existing ticket is \
                 part of the automation; list them, such as [\"status\", \"tags\"], or \
                 write \"all\"",
            );
            return;
        }
        if let Err(problems) = crate::steps::on_existing_of(value) {
            for (at, message) in problems {
                self.report(&format!("{path}{at}"), message);
            }
        }
        let Some(Value::Array(items)) = value else {
            return;
        };
        for (index, item) in items.iter().enumerate() {
            if let Some(name) = item.as_str()
                && fronta_desk::store::OnExisting::NAMES.contains(&name)
                && input.get(name).is_none_or(Value::is_null)
            {
                self.report(
                    &index_path(path, index),
                    format!(
                        "onExisting names \"{name}\", which this step does not set; give \
                         input \"{name}\" or leave it out of onExisting"
                    ),
                );
            }
        }
    }

    /// The ticket of `ticket/get` and `ticket/comment`: a literal must name a ticket (a
    /// number, `TK-12`, or an id); without one, the run must have a ticket of its own at
    /// this step — a ticket event's, or one an earlier step wrote or read.
    fn ticket_named(&mut self, action: &ActionStep, path: &str) {
        match action.input.get("ticket") {
            None | Some(Value::Null) => {
                // What the run falls back on when no step wrote or read a ticket: the
                // `ticket.id` its context starts with (a ticket event's).
                let event = self.provides("ticket.id").is_ok();
                let earlier = self.earlier.iter().any(|step| {
                    matches!(step, Step::Action(earlier) if earlier.op.takes_the_runs_ticket())
                });
                if !event && !earlier {
                    self.report(
                        path,
                        format!(
                            "{} needs a ticket: this run has none of its own here (no ticket \
                             event starts it and no earlier step writes or reads one); name \
                             one in input \"ticket\": its id (\"{{{{<step>.id}}}}\" of a \
                             ticket/upsert step) or its number",
                            action.op
                        ),
                    );
                }
            }
            Some(Value::Number(number)) if number.as_u64().is_some() => {}
            Some(Value::String(text)) if !template::is_literal(text) => {}
            Some(Value::String(text)) if names_a_ticket(text) => {}
            Some(other) => self.report(
                path,
                format!(
                    "{other} names no ticket: a ticket is named by its number (\"TK-12\" or \
                     12) or its id"
                ),
            ),
        }
    }

    fn known_type(&mut self, ticket_type: &str, path: &str) {
        if !self.context.ticket_types.contains_key(ticket_type) {
            let message = format!(
                "unknown ticket type \"{ticket_type}\" ({})",
                self.type_list()
            );
            self.report(path, message);
        }
    }

    fn type_list(&self) -> String {
        let mut names: Vec<&str> = self
            .context
            .ticket_types
            .keys()
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        if names.is_empty() {
            "no ticket types exist yet".to_owned()
        } else {
            format!("types: {}", names.join(", "))
        }
    }

    fn status_of_type(&mut self, status: &str, ticket_type: &str, path: &str) {
        let Some(statuses) = self.context.ticket_types.get(ticket_type) else {
            return; // the unknown type is reported on its own
        };
        if !statuses.iter().any(|known| known == status) {
            self.report(
                path,
                format!(
                    "status \"{status}\" is not a status of ticket type \"{ticket_type}\" \
                     (its statuses: {})",
                    statuses.join(", ")
                ),
            );
        }
    }

    fn status_of_any_type(&mut self, status: &str, path: &str) {
        let known = self
            .context
            .ticket_types
            .values()
            .any(|statuses| statuses.iter().any(|s| s == status));
        if !known {
            let message = format!(
                "status \"{status}\" is not a status of any ticket type ({})",
                self.type_list()
            );
            self.report(path, message);
        }
    }

    /// The literal type of the ticket a `{{step.id}}` names, when that earlier step is a
    /// `ticket/upsert` with a literal type and no later `ticket/set-type` touches it.
    fn type_of_ticket(&self, ticket: Option<&Value>) -> Option<String> {
        let name = template::single_name(ticket?.as_str()?)?;
        let step_name = name.strip_suffix(".id")?;
        let mut found = None;
        for step in &self.earlier {
            let Step::Action(action) = step else { continue };
            let refers = action.name == step_name
                || action
                    .input
                    .get("ticket")
                    .and_then(Value::as_str)
                    .and_then(template::single_name)
                    == Some(name);
            if !refers {
                continue;
            }
            found = match action.op {
                Op::TicketUpsert | Op::TicketSetType => action
                    .input
                    .get("type")
                    .and_then(literal_string)
                    .map(str::to_owned),
                _ => found,
            };
        }
        found
    }

    fn string_or_template(&mut self, value: Option<&Value>, path: &str) {
        if let Some(value) = value
            && !value.is_string()
            && !value.is_null()
        {
            self.report(
                path,
                format!("must be a string, found {}", json_kind(value)),
            );
        }
    }

    fn tags(&mut self, value: Option<&Value>, path: &str) {
        match value {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) if template::single_name(text).is_some() => {}
            Some(Value::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    if !item.is_string() {
                        self.report(
                            &index_path(path, index),
                            format!("a tag must be a string, found {}", json_kind(item)),
                        );
                    }
                }
            }
            Some(other) => self.report(
                path,
                format!(
                    "tags must be an array of strings (or one {{{{name}}}}), found {}",
                    json_kind(other)
                ),
            ),
        }
    }

    fn object_or_template(&mut self, value: Option<&Value>, path: &str, what: &str) {
        match value {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(Value::String(text)) if template::single_name(text).is_some() => {}
            Some(other) => self.report(
                path,
                format!(
                    "{what} must be an object (or one {{{{name}}}}), found {}",
                    json_kind(other)
                ),
            ),
        }
    }

    fn condition(&mut self, condition: &'a ConditionStep, path: &str) {
        if condition.rules.is_empty() {
            self.report(
                &field_path(path, "rules"),
                "a condition needs at least one rule",
            );
        }
        let rules_path = field_path(path, "rules");
        for (index, rule) in condition.rules.iter().enumerate() {
            self.rule(rule, &index_path(&rules_path, index));
        }
        // Branches see the steps before the condition and each other in document order.
        self.steps(&condition.then_steps, &field_path(path, "then"));
        self.steps(&condition.else_steps, &field_path(path, "else"));
    }

    fn rule(&mut self, rule: &'a Rule, path: &str) {
        match &rule.operator {
            Operator::Unknown(name) => self.report(
                &field_path(path, "operator"),
                format!("unknown operator \"{name}\" (operators: {OPERATOR_NAMES})"),
            ),
            operator if operator.takes_value() && rule.value.is_none() => self.report(
                &field_path(path, "value"),
                format!("operator {operator} needs a \"value\" to compare with"),
            ),
            operator if !operator.takes_value() && rule.value.is_some() => self.report(
                &field_path(path, "value"),
                format!("operator {operator} takes no \"value\"; remove it"),
            ),
            _ => {}
        }
        if let Some(value) = &rule.value {
            self.templates(value, &field_path(path, "value"));
        }
        let (key, field) = match (&rule.field, &rule.field_id) {
            (Some(field), _) => ("field", field.as_str()),
            (None, Some(id)) => ("fieldId", id.as_str()),
            (None, None) => {
                self.report(path, "a rule needs \"field\" (or \"fieldId\")");
                return;
            }
        };
        if field.trim().is_empty() {
            self.report(&field_path(path, key), "the field is empty");
            return;
        }
        if let Some(step) = &rule.step {
            self.rule_step(step, field, &field_path(path, "step"));
        } else if let Err(reason) = self.provides(field) {
            self.report(
                &field_path(path, key),
                format!("\"{field}\" names nothing: {reason}"),
            );
        }
    }

    fn rule_step(&mut self, step_name: &str, field: &str, path: &str) {
        let Some(step) = self.earlier_step(step_name) else {
            let message = if self.all_steps.contains(step_name) {
                format!("step \"{step_name}\" does not run before this condition")
            } else {
                format!("there is no step \"{step_name}\"")
            };
            self.report(path, message);
            return;
        };
        let key = field.split('.').next().unwrap_or(field);
        if let Err(reason) = step_output(step, key) {
            self.report(path, reason);
        }
    }

    fn for_each(&mut self, each: &'a ForEachStep, path: &str) {
        let as_path = field_path(path, "as");
        let variable = each.variable.as_str();
        if variable.trim().is_empty() {
            self.report(&as_path, "a forEach needs a variable name in \"as\"");
        } else if variable.contains(['.', '{', '}']) || variable.trim() != variable {
            self.report(
                &as_path,
                format!("variable \"{variable}\" cannot hold dots, braces or surrounding spaces"),
            );
        }
        let items_path = field_path(path, "items");
        match &each.items {
            Value::String(text) if template::single_name(text).is_some() => {
                self.templates(&each.items, &items_path);
            }
            Value::Array(_) => self.templates(&each.items, &items_path),
            other => self.report(
                &items_path,
                format!(
                    "items must be an array or exactly one {{{{name}}}}, found {}",
                    match other {
                        Value::String(text) => format!("the text \"{text}\""),
                        other => json_kind(other).to_owned(),
                    }
                ),
            ),
        }
        self.loop_variables.push(variable);
        self.steps(&each.steps, &field_path(path, "steps"));
        self.loop_variables.pop();
    }

    /// Checks template syntax and names in every string of a value.
    fn templates(&mut self, value: &Value, path: &str) {
        match value {
            Value::String(text) => match template::parse(text) {
                Err(error) => self.report(path, error.to_string()),
                Ok(segments) => {
                    let mut checked: Vec<&str> = Vec::new();
                    for segment in segments {
                        let Segment::Name(name) = segment else {
                            continue;
                        };
                        if checked.contains(&name) {
                            continue;
                        }
                        checked.push(name);
                        if let Err(reason) = self.provides(name) {
                            self.report(path, format!("{{{{{name}}}}} names nothing: {reason}"));
                        }
                    }
                }
            },
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.templates(item, &index_path(path, index));
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    self.templates(item, &field_path(path, key));
                }
            }
            _ => {}
        }
    }

    fn earlier_step(&self, name: &str) -> Option<&'a Step> {
        self.earlier
            .iter()
            .rev()
            .find(|step| step.name() == name)
            .copied()
    }

    /// Whether something at this point of the tree could provide `name`; else why not.
    fn provides(&self, name: &str) -> Result<(), String> {
        let first = name.split('.').next().unwrap_or(name);
        let under = |root: &str| name == root || name.starts_with(&format!("{root}."));
        if self.loop_variables.iter().any(|variable| under(variable)) {
            return Ok(());
        }
        if first == BODY_KEY {
            return if self.body_available {
                Ok(())
            } else {
                Err("_body is only there for webhook and manual triggers".to_owned())
            };
        }
        if first == "secrets" {
            return if !self.secrets_allowed {
                Err("secrets can be used only in the input of a connector step (http/request, mcp/call-tool, mail/send): anywhere else their value would reach the run's log".to_owned())
            } else if name.len() > "secrets.".len() && !name["secrets.".len()..].contains('.') {
                Ok(())
            } else {
                Err("name the secret: {{secrets.<name>}}".to_owned())
            };
        }
        if self.lone_call {
            return Err(
                "a widget's input may use only {{secrets.<name>}} (there is no trigger or step to provide anything else)"
                    .to_owned(),
            );
        }
        if self.params.iter().any(|param| under(param)) {
            return Ok(());
        }
        if self.event_roots.contains(&first) {
            return Ok(());
        }
        if self.timed_root == Some(first) {
            return Ok(());
        }
        if self.poll {
            if first == POLL_STEP {
                let key = name.split('.').nth(1).unwrap_or("");
                return if POLL_OUTPUTS.contains(&key) {
                    Ok(())
                } else {
                    Err(format!(
                        "the poll step has no output \"{key}\" (its outputs: {})",
                        POLL_OUTPUTS.join(", ")
                    ))
                };
            }
            if POLL_OUTPUTS.contains(&first) {
                return Ok(());
            }
        }
        let mut step_reason = None;
        for step in self.earlier.iter().rev() {
            let Some(rest) = name
                .strip_prefix(step.name())
                .and_then(|rest| rest.strip_prefix('.'))
            else {
                continue;
            };
            let key = rest.split('.').next().unwrap_or(rest);
            match step_output(step, key) {
                Ok(()) => return Ok(()),
                Err(reason) => {
                    step_reason.get_or_insert(reason);
                }
            }
        }
        let bare = self.earlier.iter().any(|step| match step {
            Step::Action(action) => action.op.outputs().contains(&first),
            _ => false,
        });
        if bare {
            return Ok(());
        }
        if let Some(reason) = step_reason {
            return Err(reason);
        }
        if self.all_steps.contains(first) {
            return Err(format!("step \"{first}\" does not run before this one"));
        }
        if (first == "ticket" || first == "change") && self.event_roots.is_empty() {
            return Err(format!("\"{first}\" is only there for event triggers"));
        }
        let sources = if self.body_available {
            "no trigger parameter, earlier step output, loop variable or _body"
        } else if !self.event_roots.is_empty() {
            "no earlier step output, loop variable or event value"
        } else {
            "no earlier step output or loop variable"
        };
        let mut reason = format!("{sources} provides \"{first}\"");
        if !self.event_roots.is_empty() {
            reason.push_str(&format!(
                " (the event gives {})",
                self.event_roots.join(", ")
            ));
        }
        if let Some(suggestion) = self.suggest(first) {
            reason.push_str(&format!(" (did you mean \"{suggestion}\"?)"));
        }
        Err(reason)
    }

    /// A known name close to `name` (same letters in another case, or a typo or two).
    fn suggest(&self, name: &str) -> Option<String> {
        let mut candidates: Vec<&str> = Vec::new();
        candidates.extend(self.params.iter().copied());
        candidates.extend(self.loop_variables.iter().copied());
        for step in &self.earlier {
            candidates.push(step.name());
            if let Step::Action(action) = step {
                candidates.extend(action.op.outputs().iter().copied());
            }
        }
        if self.body_available {
            candidates.push(BODY_KEY);
        }
        candidates.extend(self.event_roots.iter().copied());
        if self.event_roots.contains(&"ticket") && TICKET_FIELDS.contains(&name) {
            return Some(format!("ticket.{name}"));
        }
        let lower = name.to_lowercase();
        candidates
            .iter()
            .find(|candidate| candidate.to_lowercase() == lower)
            .or_else(|| {
                candidates
                    .iter()
                    .filter(|candidate| name.len() >= 4 && candidate.len() >= 4)
                    .find(|candidate| edit_distance(&lower, &candidate.to_lowercase()) <= 2)
            })
            .map(|candidate| (*candidate).to_owned())
    }
}

/// Whether an earlier step publishes output `key`; else why not.
fn step_output(step: &Step, key: &str) -> Result<(), String> {
    match step {
        Step::Action(action) if !action.op.is_known() => Ok(()), // its op is the problem
        Step::Action(action) if action.op.outputs().contains(&key) => Ok(()),
        Step::Action(action) if action.op.outputs().is_empty() => Err(format!(
            "step \"{}\" ({}) has no outputs",
            action.name, action.op
        )),
        Step::Action(action) => Err(format!(
            "step \"{}\" ({}) has no output \"{key}\" (its outputs: {})",
            action.name,
            action.op,
            action.op.outputs().join(", ")
        )),
        other => Err(format!(
            "step \"{}\" is a {} and has no outputs",
            other.name(),
            other.kind()
        )),
    }
}

fn collect_names<'a>(steps: &'a [Step], names: &mut HashSet<&'a str>) {
    for step in steps {
        names.insert(step.name());
        match step {
            Step::Action(_) => {}
            Step::Condition(condition) => {
                collect_names(&condition.then_steps, names);
                collect_names(&condition.else_steps, names);
            }
            Step::ForEach(each) => collect_names(&each.steps, names),
        }
    }
}

/// Whether literal text names a ticket as `fronta_desk::store::find_ticket` reads it: its
/// number (`TK-12`, `12`) or its id.
fn names_a_ticket(text: &str) -> bool {
    let text = text.trim();
    let digits = text
        .strip_prefix("TK-")
        .or_else(|| text.strip_prefix("tk-"))
        .unwrap_or(text);
    digits.parse::<i64>().is_ok() || text.parse::<fronta_desk::TicketId>().is_ok()
}

/// A string without templates.
fn literal_string(value: &Value) -> Option<&str> {
    value.as_str().filter(|text| template::is_literal(text))
}

/// Levenshtein distance, for suggestions only (short names).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            let insertion = current[j] + 1;
            let deletion = previous[j + 1] + 1;
            current.push(substitution.min(insertion).min(deletion));
        }
        previous = current;
    }
    previous[b.len()]
}

/// What a save answers beside the saved automation, not as an error: a template that
/// reads an optional webhook parameter outside a condition that checks it (when the
/// parameter is not sent it is `null`: text renders it as nothing, an input gets
/// `null`). A condition checks a parameter for its `then` branch when one of its rules
/// (all of them, for `match: any`) reads it with an operator other than `isEmpty` or
/// `neq`. Conditions themselves may read it freely: that is the check.
pub fn warnings(automation: &Automation) -> Vec<Problem> {
    let Trigger::Webhook { params, .. } = &automation.trigger else {
        return Vec::new();
    };
    let optional: Vec<&str> = params
        .iter()
        .filter(|param| !param.required)
        .map(|param| param.name.as_str())
        .collect();
    let mut found = Vec::new();
    if !optional.is_empty() {
        optional_reads(&automation.steps, "steps", &optional, &[], &mut found);
    }
    found
}

/// One warning for each optional parameter not in `checked` that a template of `value`
/// (at `at`) reads.
fn warn_reads(
    at: String,
    value: &Value,
    optional: &[&str],
    checked: &[&str],
    found: &mut Vec<Problem>,
) {
    for name in template::names_in(value) {
        for param in optional {
            if reads(&name, param) && !checked.contains(param) {
                found.push(Problem::new(
                    at.clone(),
                    format!(
                        "reads the optional parameter \"{param}\" outside a condition that \
                         checks it: when it is not sent it is null (text shows nothing)"
                    ),
                ));
            }
        }
    }
}

/// Whether template `name` reads parameter `param` (`first`, `first.sku`).
fn reads(name: &str, param: &str) -> bool {
    name == param
        || name
            .strip_prefix(param)
            .is_some_and(|rest| rest.starts_with('.'))
}

fn optional_reads(
    steps: &[Step],
    path: &str,
    optional: &[&str],
    checked: &[&str],
    found: &mut Vec<Problem>,
) {
    for (index, step) in steps.iter().enumerate() {
        let here = format!("{path}[{index}]");
        match step {
            Step::Action(action) => {
                for (key, value) in &action.input {
                    warn_reads(
                        format!("{here}.input.{key}"),
                        value,
                        optional,
                        checked,
                        found,
                    );
                }
            }
            Step::ForEach(each) => {
                warn_reads(
                    format!("{here}.items"),
                    &each.items,
                    optional,
                    checked,
                    found,
                );
                optional_reads(
                    &each.steps,
                    &format!("{here}.steps"),
                    optional,
                    checked,
                    found,
                );
            }
            Step::Condition(condition) => {
                let checks = |rule: &Rule, param: &str| {
                    rule.field
                        .as_deref()
                        .or(rule.field_id.as_deref())
                        .is_some_and(|field| reads(field, param))
                        && !matches!(rule.operator, Operator::IsEmpty | Operator::Neq)
                };
                let mut inside: Vec<&str> = checked.to_vec();
                for param in optional {
                    let guarded = match condition.match_kind {
                        Match::All => condition.rules.iter().any(|rule| checks(rule, param)),
                        Match::Any => {
                            !condition.rules.is_empty()
                                && condition.rules.iter().all(|rule| checks(rule, param))
                        }
                    };
                    if guarded && !inside.contains(param) {
                        inside.push(param);
                    }
                }
                optional_reads(
                    &condition.then_steps,
                    &format!("{here}.then"),
                    optional,
                    &inside,
                    found,
                );
                optional_reads(
                    &condition.else_steps,
                    &format!("{here}.else"),
                    optional,
                    checked,
                    found,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn types() -> ValidationContext {
        ValidationContext::with_ticket_types([
            ("order", vec!["waiting-to-pack", "shipped"]),
            ("error", vec!["new", "solved"]),
        ])
    }

    fn problems_of(value: Value) -> Vec<String> {
        let automation = Automation::from_value(&value).expect("the test automation parses");
        validate(&automation, &types())
            .iter()
            .map(Problem::to_string)
            .collect()
    }

    #[test]
    fn an_error_event_automation_reads_its_own_roots_and_no_others() {
        let listener = |event: &str, message: &str| {
            json!({"name": "l", "trigger": {"type": "event", "event": event},
                   "steps": [{"name": "say", "op": "flow/log", "input": {"message": message}}]})
        };
        assert_eq!(
            problems_of(listener(
                "run.failed",
                "{{automation.name}} v{{automation.version}} {{run.id}} {{step.key}} {{step.op}} {{message}} {{impact}} {{incident.id}} {{ticket.number}}"
            )),
            Vec::<String>::new(),
            "run.failed gives these"
        );
        assert_eq!(
            problems_of(listener(
                "incident.opened",
                "{{incident.title}} {{automation.name}} {{run.id}} {{ticket.number}}"
            )),
            Vec::<String>::new(),
            "incident.opened gives these"
        );
        let change = problems_of(listener("run.failed", "{{change.status}}"));
        assert!(
            change.len() == 1 && change[0].contains("provides \"change\" (the event gives automation, run, step, message, impact, incident, ticket)"),
            "a ticket event's root is not there: {change:?}"
        );
        let step = problems_of(listener("incident.opened", "{{step.key}}"));
        assert_eq!(step.len(), 1, "incident.opened has no step: {step:?}");
        let ticket_event = problems_of(listener("ticket.changed", "{{automation.name}}"));
        assert_eq!(
            ticket_event.len(),
            1,
            "a ticket event has no automation: {ticket_event:?}"
        );
    }

    #[test]
    fn an_optional_parameter_read_outside_a_check_is_a_warning_not_a_problem() {
        let value = json!({"name": "w", "trigger": {"type": "webhook", "params": [
            {"name": "order", "path": "id", "type": "string", "required": true},
            {"name": "first", "path": "items.0.sku", "type": "string"}]},
        "steps": [
            {"name": "say", "op": "flow/log", "input": {"message": "order {{order}}, first {{first}}"}},
            {"name": "has", "type": "condition",
             "rules": [{"field": "first", "operator": "isNotEmpty"}],
             "then": [{"name": "sku", "op": "flow/log", "input": {"message": "{{first}}"}}],
             "else": [{"name": "none", "op": "flow/log", "input": {"message": "no {{first}}"}}]},
            {"name": "either", "type": "condition", "match": "any",
             "rules": [{"field": "first", "operator": "isNotEmpty"},
                       {"field": "order", "operator": "eq", "value": "1"}],
             "then": [{"name": "maybe", "op": "flow/log", "input": {"message": "{{first}}"}}]}
        ]});
        assert_eq!(problems_of(value.clone()), Vec::<String>::new(), "saved");
        let automation = Automation::from_value(&value).expect("parses");
        let warned: Vec<String> = warnings(&automation)
            .iter()
            .map(Problem::to_string)
            .collect();
        let read = "reads the optional parameter \"first\" outside a condition that checks it: \
                    when it is not sent it is null (text shows nothing)";
        assert_eq!(
            warned,
            [
                format!("steps[0].input.message: {read}"),
                format!("steps[1].else[0].input.message: {read}"),
                format!("steps[2].then[0].input.message: {read}"),
            ],
            "the checked branch is quiet; the else branch and an `any` that may pass without it are not"
        );
        let manual = Automation::from_value(&json!({"name": "m", "trigger": {"type": "manual"},
            "steps": [{"name": "say", "op": "flow/log", "input": {"message": "{{_body.x}}"}}]}))
        .expect("parses");
        assert!(
            warnings(&manual).is_empty(),
            "only webhook parameters are optional"
        );
    }

    #[test]
    fn a_pause_is_bounded_by_max_pause_on_save() {
        let problems = problems_of(
            json!({"name": "p", "trigger": {"type": "manual"}, "steps": [
            {"name": "huge", "op": "flow/pause", "input": {"seconds": 1e30}},
            {"name": "year", "op": "flow/pause", "input": {"seconds": 31_622_400}},
            {"name": "late", "op": "flow/pause", "input": {"seconds": "{{_body.wait}}"}}]}),
        );
        assert_eq!(
            problems,
            vec![
                "steps[0].input.seconds: input \"seconds\" is 1000000000000000000000000000000, \
                 outside 0 … 31622400 (366 days; --max-pause, FRONTA_MAX_PAUSE); or one {{name}} \
                 to take it from the run"
            ],
            "366 days is the longest; a template is checked when the step runs"
        );
        let automation =
            Automation::from_value(&json!({"name": "p", "trigger": {"type": "manual"},
            "steps": [{"name": "day", "op": "flow/pause", "input": {"seconds": 86_401}}]}))
            .expect("parses");
        let shorter = ValidationContext {
            max_pause: std::time::Duration::from_secs(86_400),
            ..types()
        };
        let problems: Vec<String> = validate(&automation, &shorter)
            .iter()
            .map(Problem::to_string)
            .collect();
        assert_eq!(
            problems,
            [
                "steps[0].input.seconds: input \"seconds\" is 86401, outside 0 … 86400 (1 day; \
              --max-pause, FRONTA_MAX_PAUSE); or one {{name}} to take it from the run"
            ],
            "the bound is the server's setting"
        );
    }

    fn webhook(steps: Value) -> Value {
        json!({
            "name": "w",
            "trigger": {"type": "webhook", "params": [
                {"name": "orderId", "path": "data.order.id", "type": "string", "required": true},
                {"name": "status", "path": "status"}
            ]},
            "steps": steps
        })
    }

    fn log(name: &str, message: &str) -> Value {
        json!({"name": name, "op": "flow/log", "input": {"message": message}})
    }

    #[test]
    fn api_example_is_valid() {
        let found = problems_of(json!({
          "name": "Orders from the web shop", "enabled": true,
          "trigger": {"type": "webhook", "params": [
              {"name": "kind", "path": "kind", "type": "string", "required": true},
              {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
          "steps": [{"name": "ticket", "op": "ticket/upsert",
             "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
                       "type": "order", "status": "waiting-to-pack", "tags": ["waiting-to-pack"]}}]
        }));
        assert!(
            found.is_empty(),
            "API.md's example has no problems: {found:#?}"
        );
    }

    #[test]
    fn names_of_params_body_outputs_secrets_and_loop_variables_resolve() {
        let found = problems_of(webhook(json!([
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "o-{{orderId}}", "title": "{{_body.anything.0}}"}},
            {"name": "call", "op": "http/request", "service": "shop",
             "input": {"url": "https://shop.test/{{ticket.number}}", "headers": {"Authorization": "Bearer {{secrets.shop}}"}}},
            log("bare", "{{id}} {{created}} {{call.body.lines.0}} {{status}}"),
            {"name": "each", "type": "forEach", "items": "{{call.body.lines}}", "as": "line", "steps": [
                log("inLoop", "{{line.sku}} {{line}}")
            ]}
        ])));
        assert!(found.is_empty(), "every name is provided: {found:#?}");
    }

    #[test]
    fn timed_triggers_are_checked_as_the_scheduler_reads_them() {
        let timed = |trigger: Value, message: &str| {
            problems_of(json!({"name": "t", "trigger": trigger, "steps": [log("note", message)]}))
        };
        assert!(
            timed(
                json!({"type": "schedule", "cron": "0 7 * * MON-FRI", "timezone": "Europe/Prague"}),
                "{{_schedule.scheduledFor}} {{_schedule.missedTicks}}"
            )
            .is_empty(),
            "a valid schedule provides _schedule"
        );
        assert!(
            timed(
                http_poll(),
                "{{_poll.tick}} {{poll.count}} {{poll.items}} {{count}}"
            )
            .is_empty(),
            "a poll provides _poll and its step's outputs"
        );
        let never = timed(json!({"type": "schedule", "cron": "0 0 30 2 *"}), "x");
        assert!(
            never.len() == 1 && never[0].contains("never fires"),
            "the 30th of February: {never:#?}"
        );
        let often = timed(json!({"type": "schedule", "cron": "*/5 * * * * *"}), "x");
        assert!(
            often.len() == 1
                && often[0].contains("5 s apart")
                && often[0].contains("MIN_SCHEDULE_INTERVAL"),
            "every 5 s is under the limit: {often:#?}"
        );
        assert!(
            timed(json!({"type": "schedule", "cron": "*/15 * * * * *"}), "x").is_empty(),
            "every 15 s is allowed"
        );
        let found = timed(json!({"type": "schedule", "cron": "61 * * * *"}), "x");
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].starts_with("trigger.cron: cron \"61 * * * *\" is not valid"),
            "{found:#?}"
        );
        let found = timed(
            json!({"type": "schedule", "cron": "0 7 * * *", "timezone": "Mars/Olympus"}),
            "x",
        );
        assert_eq!(
            found,
            vec![
                "trigger.timezone: unknown time zone \"Mars/Olympus\" (use an IANA name such as Europe/Prague)"
            ]
        );
        let mut fast = mail_poll();
        fast["intervalSec"] = json!(5);
        let found = timed(fast, "x");
        assert_eq!(
            found,
            vec!["trigger.intervalSec: a poll interval of 5 s is below the minimum of 10 s"]
        );
        let found = timed(mail_poll(), "{{_schedule.x}}");
        assert_eq!(found.len(), 1, "a poll has no _schedule: {found:#?}");
    }

    fn http_poll() -> Value {
        json!({"type": "poll", "source": "http",
               "request": {"url": "https://shop.test/orders?after={{_poll.cursor}}",
                           "headers": {"Authorization": "Bearer {{secrets.shop}}"}},
               "items": "body.items", "cursor": "id"})
    }

    fn mail_poll() -> Value {
        json!({"type": "poll", "source": "mail",
               "mailbox": {"host": "imap.firm.test", "user": "desk", "password": "{{secrets.mail}}"}})
    }

    #[test]
    fn poll_sources_name_each_missing_or_misplaced_setting() {
        let of = |trigger: Value| {
            problems_of(json!({"name": "t", "trigger": trigger, "steps": [log("note", "x")]}))
        };
        assert!(of(http_poll()).is_empty(), "{:#?}", of(http_poll()));
        assert!(of(mail_poll()).is_empty(), "{:#?}", of(mail_poll()));
        let mut messages = http_poll();
        messages["source"] = json!("messages");
        assert!(of(messages).is_empty(), "messages has the http shape");

        assert_eq!(
            of(json!({"type": "poll", "source": "http"})),
            vec![
                "trigger.request: missing field \"request\": a http poll needs the request to make (an http/request input: url, method, headers, query, body, timeoutSec)",
                "trigger.items: missing field \"items\": a http poll needs it (a dot path such as \"body.items\")",
                "trigger.cursor: missing field \"cursor\": a http poll needs it (a dot path such as \"id\")",
            ]
        );
        let mut bad = http_poll();
        bad["request"] = json!({"url": "ftp://shop.test", "verb": "GET", "method": "FETCH"});
        bad["items"] = json!("body..items");
        bad["mailbox"] = mail_poll()["mailbox"].clone();
        let found = of(bad);
        for expected in [
            "trigger.mailbox: a mailbox is for mail polls, not http polls",
            "trigger.request.verb: unknown field \"verb\" of a poll request",
            "trigger.request.method: unknown HTTP method \"FETCH\"",
            "trigger.request.url: url \"ftp://shop.test\" must start with https:// or http://",
            "trigger.items: the path has an empty segment",
        ] {
            assert!(
                found.iter().any(|problem| problem.starts_with(expected)),
                "{expected:?} in {found:#?}"
            );
        }
        let mut secret_elsewhere = http_poll();
        secret_elsewhere["request"]["url"] = json!("https://shop.test/{{orderId}}");
        let found = of(secret_elsewhere);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].starts_with("trigger.request.url: {{orderId}} names nothing"),
            "{found:#?}"
        );

        let mut literal = mail_poll();
        literal["mailbox"]["password"] = json!("hunter2");
        literal["mailbox"]["host"] = json!("imaps://imap.firm.test");
        literal["items"] = json!("x");
        let found = of(literal);
        assert!(
            found.iter().any(|p| p
                .starts_with("trigger.mailbox.password: the password must be a secret reference")),
            "{found:#?}"
        );
        assert!(
            found.iter().any(|p| p.starts_with(
                "trigger.mailbox.host: host \"imaps://imap.firm.test\" must be a bare name"
            )),
            "{found:#?}"
        );
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("trigger.items: \"items\" is for http and messages polls")),
            "{found:#?}"
        );
        assert_eq!(
            of(json!({"type": "poll", "source": "mail"})),
            vec![
                "trigger.mailbox: missing field \"mailbox\": a mail poll needs its IMAP mailbox (host, port, tls, user, password, folder)"
            ]
        );
    }

    #[test]
    fn a_poll_automation_cannot_name_a_step_poll_and_poll_outputs_are_known() {
        let found = problems_of(json!({"name": "t", "trigger": http_poll(),
            "steps": [log("poll", "x"), log("after", "{{poll.itemz}}")]}));
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("steps[0].name: step name \"poll\" is the poll's own step")),
            "{found:#?}"
        );
        assert!(
            found.iter().any(|p| p.contains(
                "the poll step has no output \"itemz\" (its outputs: items, count, cursor)"
            )),
            "{found:#?}"
        );
        let elsewhere = problems_of(json!({"name": "t", "trigger": {"type": "manual"},
            "steps": [log("poll", "x")]}));
        assert!(
            elsewhere.is_empty(),
            "only poll automations reserve the name: {elsewhere:#?}"
        );
    }

    #[test]
    fn secrets_are_refused_outside_connector_inputs() {
        let found = problems_of(webhook(json!([
            log("leak", "token {{secrets.shop}}"),
            {"name": "check", "type": "condition",
             "rules": [{"field": "secrets.shop", "operator": "isNotEmpty"}], "then": []},
            {"name": "call", "op": "http/request", "input": {"url": "https://shop.test/{{secrets.a.b}}"}}
        ])));
        let outside = "secrets can be used only in the input of a connector step (http/request, mcp/call-tool, mail/send): anywhere else their value would reach the run's log";
        assert_eq!(
            found,
            vec![
                format!("steps[0].input.message: {{{{secrets.shop}}}} names nothing: {outside}"),
                format!("steps[1].rules[0].field: \"secrets.shop\" names nothing: {outside}"),
                "steps[2].input.url: {{secrets.a.b}} names nothing: name the secret: {{secrets.<name>}}".to_owned(),
            ],
            "a secret only in a connector's input, and named by one word"
        );
    }

    #[test]
    fn mail_send_literal_addresses_are_checked_on_save_and_templates_at_run_time() {
        let found = problems_of(webhook(json!([
            {"name": "tell", "op": "mail/send", "service": "smtp",
             "input": {"server": "desk", "to": "not-an-address", "cc": ["it@firm.example", "{{orderId}}"],
                       "subject": "Order {{orderId}}", "text": "Hi {{secrets.signature}}"}},
            {"name": "again", "op": "mail/send",
             "input": {"server": "desk", "to": "{{_body.customer.email}}", "subject": "s", "html": "<p>{{tell.messageId}}</p>"}},
            {"name": "bare", "op": "mail/send", "input": {"server": "desk", "subject": "s", "bcc": "x@y.example"}}
        ])));
        assert_eq!(
            found,
            vec![
                "steps[0].input.to: \"not-an-address\" is not an e-mail address: no '@' (expected name@example.com or \"Name <name@example.com>\")".to_owned(),
                "steps[2].input.to: missing input \"to\" (mail/send needs: server, to, subject)".to_owned(),
                "steps[2].input.bcc: unknown input \"bcc\" for mail/send (its inputs: server, to, subject, cc, text, html)".to_owned(),
                "steps[2].input.text: mail/send needs a body: input \"text\", \"html\" or both".to_owned(),
            ],
            "a literal bad address is refused on save, a templated one waits for the run, \
             secrets are allowed in a connector's input and outputs are known"
        );
        let widget = ActionStep {
            name: "w".into(),
            op: Op::MailSend,
            service: None,
            input: json!({"server": "desk", "to": "a@b.example", "subject": "s", "text": "t"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        };
        let refused = connector_call(&widget);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0]
                .message
                .contains("would send a message at every refresh"),
            "{refused:?}"
        );
    }

    #[test]
    fn event_triggers_provide_ticket_and_change_but_no_body() {
        let found = problems_of(json!({
            "name": "e", "trigger": {"type": "event", "event": "ticket.changed"},
            "steps": [
                {"name": "assign", "op": "ticket/assign-least-busy", "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}},
                log("note", "{{change.status.to}} {{_body.x}}")
            ]
        }));
        assert_eq!(
            found,
            vec![
                "steps[1].input.message: {{_body.x}} names nothing: _body is only there for webhook and manual triggers"
            ],
            "ticket and change resolve, _body does not"
        );
    }

    #[test]
    fn step_tree_of_four_with_a_loop_is_within_the_cap() {
        let found = problems_of(webhook(json!([
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "x"}},
            {"name": "each", "type": "forEach", "items": "{{_body.lines}}", "as": "line", "steps": [
                log("a", "{{line}}"), log("b", "{{line}}")
            ]}
        ])));
        assert!(
            found.is_empty(),
            "4 steps, though a loop over 26 items executes 52: {found:#?}"
        );
    }

    #[test]
    fn more_than_fifty_steps_over_the_whole_tree_is_refused() {
        let inner: Vec<Value> = (0..50).map(|i| log(&format!("s{i}"), "m")).collect();
        let found = problems_of(webhook(json!([
            {"name": "each", "type": "forEach", "items": [1], "as": "i", "steps": inner}
        ])));
        assert_eq!(
            found,
            vec![
                "steps: the automation has 51 steps; at most 50 are allowed (every step counts once: actions, conditions, loops and everything inside them)"
            ],
            "50 logs inside a loop plus the loop is 51"
        );
    }

    #[test]
    fn when_full_and_a_named_member_are_checked_on_save_where_literal() {
        let mut context = types();
        context
            .groups
            .insert("warehouse".into(), vec!["Eva".into(), "Jan".into()]);
        let automation = Automation::from_value(&json!({
            "name": "a", "trigger": {"type": "event", "event": "ticket.created"},
            "steps": [
                {"name": "a1", "op": "ticket/assign-least-busy",
                 "input": {"ticket": "{{ticket.id}}", "group": "warehouse", "whenFull": "queue"}},
                {"name": "a2", "op": "ticket/assign-least-busy",
                 "input": {"ticket": "{{ticket.id}}", "group": "warehouse", "whenFull": "{{ticket.title}}"}},
                {"name": "a3", "op": "ticket/assign",
                 "input": {"ticket": "{{ticket.id}}", "group": "warehouse", "member": "Petr"}},
                {"name": "a4", "op": "ticket/assign",
                 "input": {"ticket": "{{ticket.id}}", "group": "warehouse", "member": "Jan"}},
                {"name": "a5", "op": "ticket/assign",
                 "input": {"ticket": "{{ticket.id}}", "group": "elsewhere", "member": "Petr"}},
                {"name": "a6", "op": "ticket/assign",
                 "input": {"ticket": "{{ticket.id}}", "group": "warehouse", "member": "{{ticket.title}}"}}
            ]
        }))
        .expect("the test automation parses");
        let problems: Vec<String> = validate(&automation, &context)
            .iter()
            .map(Problem::to_string)
            .collect();
        assert_eq!(
            problems,
            vec![
                "steps[0].input.whenFull: input \"whenFull\" is \"queue\"; it must be one of \"wait\", \"fail\", \"assignAnyway\"",
                "steps[2].input.member: \"Petr\" is not a member of group \"warehouse\" (its members: Eva, Jan)",
            ],
            "templated values and groups not known on save are left to run time"
        );
    }

    #[test]
    fn a_template_naming_a_later_step_says_so() {
        let found = problems_of(webhook(json!([
            log("first", "{{second.status}}"),
            {"name": "second", "op": "ticket/set-status", "input": {"ticket": "t", "status": "shipped"}}
        ])));
        assert_eq!(
            found,
            vec![
                "steps[0].input.message: {{second.status}} names nothing: step \"second\" does not run before this one"
            ],
            "later steps are not yet there"
        );
    }

    #[test]
    fn a_template_naming_a_missing_output_lists_the_outputs() {
        let found = problems_of(webhook(json!([
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "x"}},
            log("note", "{{ticket.ids}}")
        ])));
        assert_eq!(
            found,
            vec![
                "steps[1].input.message: {{ticket.ids}} names nothing: step \"ticket\" (ticket/upsert) has no output \"ids\" (its outputs: id, number, created)"
            ],
            "the step's outputs are listed"
        );
    }

    #[test]
    fn typo_gets_a_suggestion() {
        let found = problems_of(webhook(json!([log("note", "{{orderid}} {{ordrId}}")])));
        assert_eq!(
            found,
            vec![
                "steps[0].input.message: {{orderid}} names nothing: no trigger parameter, earlier step output, loop variable or _body provides \"orderid\" (did you mean \"orderId\"?)",
                "steps[0].input.message: {{ordrId}} names nothing: no trigger parameter, earlier step output, loop variable or _body provides \"ordrId\" (did you mean \"orderId\"?)",
            ],
            "case and a typo are both suggested"
        );
    }

    #[test]
    fn loop_variable_is_only_visible_inside_the_loop() {
        let found = problems_of(webhook(json!([
            {"name": "each", "type": "forEach", "items": [1, 2], "as": "line", "steps": [log("in", "{{line}}")]},
            log("out", "{{line}}")
        ])));
        assert_eq!(
            found.len(),
            1,
            "only the use after the loop fails: {found:#?}"
        );
        assert!(
            found[0].starts_with("steps[1].input.message: {{line}} names nothing"),
            "{found:#?}"
        );
    }

    #[test]
    fn set_status_is_checked_against_the_upserted_type() {
        let found = problems_of(webhook(json!([
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "x", "type": "order"}},
            {"name": "s1", "op": "ticket/set-status", "input": {"ticket": "{{ticket.id}}", "status": "new"}},
            {"name": "s2", "op": "ticket/set-status", "input": {"ticket": "{{_body.ticket}}", "status": "new"}},
            {"name": "s3", "op": "ticket/set-status", "input": {"ticket": "{{_body.ticket}}", "status": "lost"}}
        ])));
        assert_eq!(
            found,
            vec![
                "steps[1].input.status: status \"new\" is not a status of ticket type \"order\" (its statuses: waiting-to-pack, shipped)",
                "steps[3].input.status: status \"lost\" is not a status of any ticket type (types: error, order)",
            ],
            "the upserted type decides when known; any type otherwise"
        );
    }

    #[test]
    fn templated_statuses_and_types_are_left_to_run_time() {
        let found = problems_of(webhook(json!([
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "x", "type": "{{_body.type}}", "status": "{{status}}"}},
            {"name": "s", "op": "ticket/set-status", "input": {"ticket": "{{ticket.id}}", "status": "{{status}}"}}
        ])));
        assert!(found.is_empty(), "templates are not literals: {found:#?}");
    }

    #[test]
    fn condition_rules_are_checked() {
        let found = problems_of(webhook(json!([
            {"name": "tool", "op": "mcp/call-tool", "service": "crm", "input": {"server": "crm", "tool": "t"}},
            {"name": "c", "type": "condition", "match": "any", "rules": [
                {"field": "status", "operator": "eq", "value": "x"},
                {"field": "status", "step": "tool", "operator": "eq", "value": "x"},
                {"field": "content", "step": "tool", "operator": "isNotEmpty"},
                {"field": "result", "operator": "isEmpty", "value": ""},
                {"field": "status", "operator": "gt"},
                {"fieldId": "x", "operator": "like", "value": 1},
                {"operator": "isEmpty"},
                {"field": "content", "step": "later", "operator": "isEmpty"},
                {"field": "content", "step": "nope", "operator": "isEmpty"}
            ]},
            {"name": "later", "op": "flow/log", "input": {"message": "m"}}
        ])));
        insta::assert_snapshot!(found.join("\n"), @r#"
        steps[1].rules[1].step: step "tool" (mcp/call-tool) has no output "status" (its outputs: content, structured, isError)
        steps[1].rules[3].value: operator isEmpty takes no "value"; remove it
        steps[1].rules[3].field: "result" names nothing: no trigger parameter, earlier step output, loop variable or _body provides "result"
        steps[1].rules[4].value: operator gt needs a "value" to compare with
        steps[1].rules[5].operator: unknown operator "like" (operators: eq, neq, gt, gte, lt, lte, contains, notContains, isEmpty, isNotEmpty)
        steps[1].rules[5].fieldId: "x" names nothing: no trigger parameter, earlier step output, loop variable or _body provides "x"
        steps[1].rules[6]: a rule needs "field" (or "fieldId")
        steps[1].rules[7].step: step "later" does not run before this condition
        steps[1].rules[8].step: there is no step "nope"
        "#);
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("orderid", "orderId"), 1, "one substitution");
        assert_eq!(edit_distance("ordrId", "orderId"), 1, "one insertion");
        assert_eq!(edit_distance("", "abc"), 3, "all insertions");
    }
}
