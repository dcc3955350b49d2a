//! The automation as users write it (API.md, "An automation"): name, enabled, trigger
//! and step tree, with its parser [`Automation::from_json`].
//!
//! The parser checks *shape* — objects where objects belong, known fields only, the
//! legacy condition form turned into one rule — and lists every problem with its path.
//! *Meaning* (is the op in the catalogue, does a template name anything, is a status one
//! of the type's) is [`crate::validate`]'s: an unknown op or operator parses (as
//! [`Op::Unknown`], [`Operator::Unknown`]) so that the validator can name it.
//!
//! Unknown fields are errors, never ignored: the prototype once dropped a `phase` field
//! silently and nobody noticed (seed 000, "Three axes on a ticket"). The server strips
//! fields it adds itself (`id`, `webhookUrl`) before parsing a PUT.
//!
//! Serialization writes the canonical form: the legacy condition comes back out with
//! `rules`, defaults written out.

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::catalogue::Op;
use crate::problem::{Problem, Problems, field_path, index_path};

/// An automation: what starts it and the steps it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value")]
pub struct Automation {
    pub name: String,
    /// Defaults to `true` when absent.
    pub enabled: bool,
    pub trigger: Trigger,
    /// Defaults to no steps when absent.
    pub steps: Vec<Step>,
}

/// What starts a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Trigger {
    /// `POST /webhook/{token}`; each parameter is read from the body by its path.
    Webhook { params: Vec<WebhookParam> },
    /// An internal event; the context holds `ticket` and `change`.
    Event { event: EventKind },
    /// Polled by the scheduler every `intervalSec` (default per source, minimum 10).
    Poll {
        source: PollSource,
        #[serde(skip_serializing_if = "Option::is_none")]
        interval_sec: Option<u64>,
        /// Where and how to poll (see `crate::poll`).
        #[serde(flatten)]
        settings: Box<PollSettings>,
    },
    /// A cron expression, in `timezone` (default UTC).
    Schedule {
        cron: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
    },
    /// Started by a person or the API.
    Manual,
}

impl Trigger {
    /// The trigger's `type` as written in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Trigger::Webhook { .. } => "webhook",
            Trigger::Event { .. } => "event",
            Trigger::Poll { .. } => "poll",
            Trigger::Schedule { .. } => "schedule",
            Trigger::Manual => "manual",
        }
    }
}

/// One parameter of a webhook contract (API.md, DESIGN §4.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookParam {
    /// The name templates use: `{{docId}}`.
    pub name: String,
    /// A dot path into the body; numeric segments index arrays: `errors.0.message`.
    pub path: String,
    #[serde(rename = "type", default)]
    pub param_type: ParamType,
    #[serde(default)]
    pub required: bool,
}

/// The type a webhook parameter must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    #[default]
    String,
    Number,
    Boolean,
    /// An ISO-8601 / RFC 3339 string (see [`crate::dates::parse_instant`]).
    Date,
    Object,
    Array,
}

impl ParamType {
    pub const ALL: [ParamType; 6] = [
        ParamType::String,
        ParamType::Number,
        ParamType::Boolean,
        ParamType::Date,
        ParamType::Object,
        ParamType::Array,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
            ParamType::Date => "date",
            ParamType::Object => "object",
            ParamType::Array => "array",
        }
    }

    pub fn parse(name: &str) -> Option<ParamType> {
        ParamType::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// The internal events an automation can listen to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    #[serde(rename = "ticket.created")]
    TicketCreated,
    #[serde(rename = "ticket.changed")]
    TicketChanged,
    /// A run of another automation of the tenant failed (an error workflow; see
    /// [`crate::error_events`]).
    #[serde(rename = "run.failed")]
    RunFailed,
    /// An incident of the tenant was opened (see [`crate::error_events`]).
    #[serde(rename = "incident.opened")]
    IncidentOpened,
}

impl EventKind {
    /// Every event, in the order error messages and the catalogue name them.
    pub const ALL: [EventKind; 4] = [
        EventKind::TicketCreated,
        EventKind::TicketChanged,
        EventKind::RunFailed,
        EventKind::IncidentOpened,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::TicketCreated => "ticket.created",
            EventKind::TicketChanged => "ticket.changed",
            EventKind::RunFailed => "run.failed",
            EventKind::IncidentOpened => "incident.opened",
        }
    }

    pub fn parse(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// The names of every event, comma-separated (for error messages).
    pub fn names() -> String {
        EventKind::ALL.map(EventKind::as_str).join(", ")
    }

    /// The context roots a run started by this event begins with (what templates and
    /// conditions of its tree may read).
    pub fn context_roots(self) -> &'static [&'static str] {
        match self {
            EventKind::TicketCreated | EventKind::TicketChanged => &["ticket", "change"],
            EventKind::RunFailed => crate::error_events::RUN_FAILED_ROOTS,
            EventKind::IncidentOpened => crate::error_events::INCIDENT_OPENED_ROOTS,
        }
    }

    /// Whether this is an error event (`run.failed`, `incident.opened`), announced by the
    /// executor rather than by a ticket write.
    pub fn is_error_event(self) -> bool {
        matches!(self, EventKind::RunFailed | EventKind::IncidentOpened)
    }
}

/// What a poll trigger asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PollSource {
    Mail,
    Messages,
    Http,
}

impl PollSource {
    pub fn as_str(self) -> &'static str {
        match self {
            PollSource::Mail => "mail",
            PollSource::Messages => "messages",
            PollSource::Http => "http",
        }
    }

    pub fn parse(name: &str) -> Option<PollSource> {
        [PollSource::Mail, PollSource::Messages, PollSource::Http]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// A poll trigger's source settings (`crate::poll` says what each means). The parser
/// checks their shape; which ones a source needs is the validator's.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PollSettings {
    /// `http`, `messages`: an `http/request` input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<Map<String, Value>>,
    /// `http`, `messages`: dot path to the array of items in the answer (`body.items`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<String>,
    /// `http`, `messages`: dot path, in an item, to the value that orders items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// The unit of per-(tenant, service) limits for the poll's calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// `mail`: the IMAP mailbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<Mailbox>,
}

/// An IMAP mailbox a `mail` poll reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mailbox {
    pub host: String,
    /// Default 993 with TLS, 143 without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Default `true` (implicit TLS); `false` is plain text (the validator allows it).
    pub tls: bool,
    pub user: String,
    /// A `{{secrets.<name>}}` reference (the validator refuses a literal password).
    pub password: String,
    /// Default `INBOX`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
}

impl Mailbox {
    pub const DEFAULT_FOLDER: &'static str = "INBOX";

    pub fn port(&self) -> u16 {
        self.port.unwrap_or(if self.tls { 993 } else { 143 })
    }

    pub fn folder(&self) -> &str {
        self.folder.as_deref().unwrap_or(Self::DEFAULT_FOLDER)
    }
}

const POLL_FIELDS: &[&str] = &[
    "type",
    "source",
    "intervalSec",
    "request",
    "items",
    "cursor",
    "service",
    "mailbox",
];
const MAILBOX_FIELDS: &[&str] = &["host", "port", "tls", "user", "password", "folder"];

/// A node of the step tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Action(ActionStep),
    Condition(ConditionStep),
    ForEach(ForEachStep),
}

impl Step {
    pub fn name(&self) -> &str {
        match self {
            Step::Action(step) => &step.name,
            Step::Condition(step) => &step.name,
            Step::ForEach(step) => &step.name,
        }
    }

    /// `action`, `condition` or `forEach`.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Action(_) => "action",
            Step::Condition(_) => "condition",
            Step::ForEach(_) => "forEach",
        }
    }
}

/// A step that runs an op from the catalogue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionStep {
    pub name: String,
    pub op: Op,
    /// The third-party service a connector step calls (for per-service limits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The op's inputs; string leaves may hold `{{templates}}`.
    pub input: Map<String, Value>,
}

/// A branch: `then` when the rules match, `else` otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionStep {
    pub name: String,
    /// `match` in JSON; defaults to `all`.
    pub match_kind: Match,
    pub rules: Vec<Rule>,
    /// `then` in JSON.
    pub then_steps: Vec<Step>,
    /// `else` in JSON.
    pub else_steps: Vec<Step>,
}

/// How a condition combines its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Match {
    /// Every rule is met ("and").
    #[default]
    All,
    /// At least one rule is met ("or").
    Any,
}

impl Match {
    pub fn as_str(self) -> &'static str {
        match self {
            Match::All => "all",
            Match::Any => "any",
        }
    }
}

/// One comparison of a condition.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// A name resolved like a template name (`ticket.type`, `status`, `call.body.id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// An exact context key, looked up first; accepted for `field` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_id: Option<String>,
    /// Read the field among this step's outputs (`<step>.<field>`) first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub operator: Operator,
    /// The value compared with; a string may be a template. Absent for `isEmpty` and
    /// `isNotEmpty`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

impl Rule {
    /// A rule over `field`, as most rules are written.
    pub fn new(field: impl Into<String>, operator: Operator, value: Option<Value>) -> Rule {
        Rule {
            field: Some(field.into()),
            field_id: None,
            step: None,
            operator,
            value,
        }
    }

    /// The name the rule reads: `field`, or `fieldId` when there is no `field`.
    pub fn field_name(&self) -> Option<&str> {
        self.field.as_deref().or(self.field_id.as_deref())
    }

    /// How the rule is shown in a log line: `second.status` for a rule with a step,
    /// else the field as written.
    pub fn label(&self) -> String {
        let name = self
            .field_id
            .as_deref()
            .or(self.field.as_deref())
            .unwrap_or("(no field)");
        match (&self.step, self.field_name()) {
            (Some(step), Some(field)) => format!("{step}.{field}"),
            _ => name.to_owned(),
        }
    }
}

/// A condition operator.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Operator {
    Eq,
    Neq,
    Gt,
    Gte,
    Lt,
    Lte,
    Contains,
    NotContains,
    IsEmpty,
    IsNotEmpty,
    /// Not an operator; the validator reports it and the rule is never met.
    Unknown(String),
}

impl Operator {
    pub const KNOWN: [Operator; 10] = [
        Operator::Eq,
        Operator::Neq,
        Operator::Gt,
        Operator::Gte,
        Operator::Lt,
        Operator::Lte,
        Operator::Contains,
        Operator::NotContains,
        Operator::IsEmpty,
        Operator::IsNotEmpty,
    ];

    pub fn parse(name: &str) -> Operator {
        Operator::KNOWN
            .iter()
            .find(|op| op.as_str() == name)
            .cloned()
            .unwrap_or_else(|| Operator::Unknown(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        match self {
            Operator::Eq => "eq",
            Operator::Neq => "neq",
            Operator::Gt => "gt",
            Operator::Gte => "gte",
            Operator::Lt => "lt",
            Operator::Lte => "lte",
            Operator::Contains => "contains",
            Operator::NotContains => "notContains",
            Operator::IsEmpty => "isEmpty",
            Operator::IsNotEmpty => "isNotEmpty",
            Operator::Unknown(name) => name,
        }
    }

    /// Whether the operator compares with a `value` (all but `isEmpty`/`isNotEmpty`).
    pub fn takes_value(&self) -> bool {
        !matches!(self, Operator::IsEmpty | Operator::IsNotEmpty)
    }

    /// `gt gte lt lte`: false whenever a side is empty or missing.
    pub fn is_ordered(&self) -> bool {
        matches!(
            self,
            Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte
        )
    }
}

impl std::fmt::Display for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Operator {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A loop: `steps` run once per element of `items`, with the element bound to `as`.
#[derive(Debug, Clone, PartialEq)]
pub struct ForEachStep {
    pub name: String,
    /// An array, or (usually) a template that is exactly one `{{name}}`.
    pub items: Value,
    /// `as` in JSON: the name each element is bound to inside the loop.
    pub variable: String,
    pub steps: Vec<Step>,
}

impl Serialize for Step {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Step::Action(step) => step.serialize(serializer),
            Step::Condition(step) => step.serialize(serializer),
            Step::ForEach(step) => step.serialize(serializer),
        }
    }
}

impl Serialize for ConditionStep {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(6))?;
        map.serialize_entry("name", &self.name)?;
        map.serialize_entry("type", "condition")?;
        map.serialize_entry("match", &self.match_kind)?;
        map.serialize_entry("rules", &self.rules)?;
        map.serialize_entry("then", &self.then_steps)?;
        map.serialize_entry("else", &self.else_steps)?;
        map.end()
    }
}

impl Serialize for ForEachStep {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry("name", &self.name)?;
        map.serialize_entry("type", "forEach")?;
        map.serialize_entry("items", &self.items)?;
        map.serialize_entry("as", &self.variable)?;
        map.serialize_entry("steps", &self.steps)?;
        map.end()
    }
}

impl Automation {
    /// Parses an automation from JSON text, listing every problem of shape.
    pub fn from_json(json: &str) -> Result<Automation, Vec<Problem>> {
        let value: Value = serde_json::from_str(json)
            .map_err(|error| vec![Problem::new("", format!("not valid JSON: {error}"))])?;
        Automation::from_value(&value)
    }

    /// Parses an automation from a JSON value, listing every problem of shape.
    pub fn from_value(value: &Value) -> Result<Automation, Vec<Problem>> {
        let mut parser = Parser::default();
        let automation = parser.automation(value);
        match automation {
            Some(automation) if parser.problems.is_empty() => Ok(automation),
            _ => Err(parser.problems),
        }
    }

    /// Steps in the whole tree: actions, conditions and loops, with everything in their
    /// branches and bodies (what [`crate::MAX_STEPS`] caps).
    pub fn step_count(&self) -> usize {
        count_steps(&self.steps)
    }
}

/// Steps in a tree, counting every node once (a loop body counts once, not per pass).
pub fn count_steps(steps: &[Step]) -> usize {
    steps
        .iter()
        .map(|step| {
            1 + match step {
                Step::Action(_) => 0,
                Step::Condition(condition) => {
                    count_steps(&condition.then_steps) + count_steps(&condition.else_steps)
                }
                Step::ForEach(each) => count_steps(&each.steps),
            }
        })
        .sum()
}

impl std::str::FromStr for Automation {
    type Err = Problems;

    fn from_str(json: &str) -> Result<Self, Self::Err> {
        Automation::from_json(json).map_err(Problems)
    }
}

impl TryFrom<Value> for Automation {
    type Error = Problems;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        Automation::from_value(&value).map_err(Problems)
    }
}

/// `string`, `number`, … — a JSON value's kind, for messages.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

const AUTOMATION_FIELDS: &[&str] = &["name", "enabled", "trigger", "steps"];
const ACTION_FIELDS: &[&str] = &["name", "op", "service", "input"];
const CONDITION_FIELDS: &[&str] = &["name", "type", "match", "rules", "then", "else"];
const LEGACY_RULE_FIELDS: &[&str] = &["field", "fieldId", "step", "operator", "value"];
const RULE_FIELDS: &[&str] = &["field", "fieldId", "step", "operator", "value"];
const FOR_EACH_FIELDS: &[&str] = &["name", "type", "items", "as", "steps"];
const PARAM_FIELDS: &[&str] = &["name", "path", "type", "required"];

/// Collects problems while it walks the JSON; never stops at the first.
#[derive(Default)]
struct Parser {
    problems: Vec<Problem>,
}

impl Parser {
    fn report(&mut self, path: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(path, message));
    }

    fn object<'v>(
        &mut self,
        value: &'v Value,
        path: &str,
        what: &str,
    ) -> Option<&'v Map<String, Value>> {
        match value {
            Value::Object(map) => Some(map),
            other => {
                self.report(
                    path,
                    format!("{what} must be an object, found {}", json_kind(other)),
                );
                None
            }
        }
    }

    fn unknown_fields(
        &mut self,
        map: &Map<String, Value>,
        allowed: &[&str],
        what: &str,
        path: &str,
    ) {
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                self.report(
                    &field_path(path, key),
                    format!(
                        "unknown field \"{key}\" in {what} (its fields are: {})",
                        allowed.join(", ")
                    ),
                );
            }
        }
    }

    fn required_string(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<String> {
        match map.get(key) {
            None | Some(Value::Null) => {
                self.report(&field_path(path, key), format!("missing field \"{key}\""));
                None
            }
            Some(value) => self.string(value, key, path),
        }
    }

    /// Absent and `null` are both "not given".
    fn optional_string(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<String> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(value) => self.string(value, key, path),
        }
    }

    fn string(&mut self, value: &Value, key: &str, path: &str) -> Option<String> {
        match value {
            Value::String(text) => Some(text.clone()),
            other => {
                self.report(
                    &field_path(path, key),
                    format!("\"{key}\" must be a string, found {}", json_kind(other)),
                );
                None
            }
        }
    }

    fn optional_bool(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        default: bool,
    ) -> bool {
        match map.get(key) {
            None | Some(Value::Null) => default,
            Some(Value::Bool(flag)) => *flag,
            Some(other) => {
                self.report(
                    &field_path(path, key),
                    format!(
                        "\"{key}\" must be true or false, found {}",
                        json_kind(other)
                    ),
                );
                default
            }
        }
    }

    fn automation(&mut self, value: &Value) -> Option<Automation> {
        let map = self.object(value, "", "an automation")?;
        self.unknown_fields(map, AUTOMATION_FIELDS, "an automation", "");
        let name = self.required_string(map, "name", "");
        let enabled = self.optional_bool(map, "enabled", "", true);
        let trigger = match map.get("trigger") {
            None | Some(Value::Null) => {
                self.report("trigger", "missing field \"trigger\"");
                None
            }
            Some(trigger) => self.trigger(trigger, "trigger"),
        };
        let steps = self.steps(map, "steps", "");
        Some(Automation {
            name: name?,
            enabled,
            trigger: trigger?,
            steps,
        })
    }

    fn trigger(&mut self, value: &Value, path: &str) -> Option<Trigger> {
        let map = self.object(value, path, "a trigger")?;
        let kind = self.required_string(map, "type", path)?;
        let what = format!("a {kind} trigger");
        match kind.as_str() {
            "webhook" => {
                self.unknown_fields(map, &["type", "params"], &what, path);
                let params_path = field_path(path, "params");
                let params = match map.get("params") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(items)) => items
                        .iter()
                        .enumerate()
                        .filter_map(|(index, item)| {
                            self.webhook_param(item, &index_path(&params_path, index))
                        })
                        .collect(),
                    Some(other) => {
                        self.report(
                            &params_path,
                            format!("\"params\" must be an array, found {}", json_kind(other)),
                        );
                        Vec::new()
                    }
                };
                Some(Trigger::Webhook { params })
            }
            "event" => {
                self.unknown_fields(map, &["type", "event"], &what, path);
                let event = self.required_string(map, "event", path)?;
                match EventKind::parse(&event) {
                    Some(event) => Some(Trigger::Event { event }),
                    None => {
                        self.report(
                            &field_path(path, "event"),
                            format!("unknown event \"{event}\" (events: {})", EventKind::names()),
                        );
                        None
                    }
                }
            }
            "poll" => {
                self.unknown_fields(map, POLL_FIELDS, &what, path);
                let settings = Box::new(self.poll_settings(map, path));
                let interval_sec = match map.get("intervalSec") {
                    None | Some(Value::Null) => None,
                    Some(value) => match value.as_u64() {
                        Some(seconds) => Some(seconds),
                        None => {
                            self.report(
                                &field_path(path, "intervalSec"),
                                format!(
                                    "\"intervalSec\" must be a whole number of seconds, found {value}"
                                ),
                            );
                            None
                        }
                    },
                };
                let source = self.required_string(map, "source", path)?;
                match PollSource::parse(&source) {
                    Some(source) => Some(Trigger::Poll {
                        source,
                        interval_sec,
                        settings,
                    }),
                    None => {
                        self.report(
                            &field_path(path, "source"),
                            format!(
                                "unknown poll source \"{source}\" (sources: mail, messages, http)"
                            ),
                        );
                        None
                    }
                }
            }
            "schedule" => {
                self.unknown_fields(map, &["type", "cron", "timezone"], &what, path);
                let cron = self.required_string(map, "cron", path);
                let timezone = self.optional_string(map, "timezone", path);
                Some(Trigger::Schedule {
                    cron: cron?,
                    timezone,
                })
            }
            "manual" => {
                self.unknown_fields(map, &["type"], &what, path);
                Some(Trigger::Manual)
            }
            other => {
                self.report(
                    &field_path(path, "type"),
                    format!(
                        "unknown trigger type \"{other}\" (types: webhook, event, poll, schedule, manual)"
                    ),
                );
                None
            }
        }
    }

    fn poll_settings(&mut self, map: &Map<String, Value>, path: &str) -> PollSettings {
        let request = match map.get("request") {
            None | Some(Value::Null) => None,
            Some(Value::Object(request)) => Some(request.clone()),
            Some(other) => {
                self.report(
                    &field_path(path, "request"),
                    format!(
                        "\"request\" must be an object (an http/request input), found {}",
                        json_kind(other)
                    ),
                );
                None
            }
        };
        let mailbox = match map.get("mailbox") {
            None | Some(Value::Null) => None,
            Some(value) => self.mailbox(value, &field_path(path, "mailbox")),
        };
        PollSettings {
            request,
            items: self.optional_string(map, "items", path),
            cursor: self.optional_string(map, "cursor", path),
            service: self.optional_string(map, "service", path),
            mailbox,
        }
    }

    fn mailbox(&mut self, value: &Value, path: &str) -> Option<Mailbox> {
        let map = self.object(value, path, "a mailbox")?;
        self.unknown_fields(map, MAILBOX_FIELDS, "a mailbox", path);
        let host = self.required_string(map, "host", path);
        let user = self.required_string(map, "user", path);
        let password = self.required_string(map, "password", path);
        let tls = self.optional_bool(map, "tls", path, true);
        let folder = self.optional_string(map, "folder", path);
        let port = match map.get("port") {
            None | Some(Value::Null) => None,
            Some(value) => match value.as_u64().and_then(|port| u16::try_from(port).ok()) {
                Some(port) if port > 0 => Some(port),
                _ => {
                    self.report(
                        &field_path(path, "port"),
                        format!("\"port\" must be a port number from 1 to 65535, found {value}"),
                    );
                    None
                }
            },
        };
        Some(Mailbox {
            host: host?,
            port,
            tls,
            user: user?,
            password: password?,
            folder,
        })
    }

    fn webhook_param(&mut self, value: &Value, path: &str) -> Option<WebhookParam> {
        let map = self.object(value, path, "a webhook parameter")?;
        self.unknown_fields(map, PARAM_FIELDS, "a webhook parameter", path);
        let name = self.required_string(map, "name", path);
        let param_path = self.required_string(map, "path", path);
        let param_type = match self.optional_string(map, "type", path) {
            None => Some(ParamType::default()),
            Some(kind) => {
                let parsed = ParamType::parse(&kind);
                if parsed.is_none() {
                    self.report(
                        &field_path(path, "type"),
                        format!(
                            "unknown parameter type \"{kind}\" (types: string, number, boolean, date, object, array)"
                        ),
                    );
                }
                parsed
            }
        };
        let required = self.optional_bool(map, "required", path, false);
        Some(WebhookParam {
            name: name?,
            path: param_path?,
            param_type: param_type?,
            required,
        })
    }

    fn steps(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Vec<Step> {
        let steps_path = field_path(path, key);
        match map.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(index, item)| self.step(item, &index_path(&steps_path, index)))
                .collect(),
            Some(other) => {
                self.report(
                    &steps_path,
                    format!(
                        "\"{key}\" must be an array of steps, found {}",
                        json_kind(other)
                    ),
                );
                Vec::new()
            }
        }
    }

    fn step(&mut self, value: &Value, path: &str) -> Option<Step> {
        let map = self.object(value, path, "a step")?;
        match map.get("type") {
            Some(Value::String(kind)) if kind == "condition" => self.condition(map, path),
            Some(Value::String(kind)) if kind == "forEach" => self.for_each(map, path),
            Some(Value::String(kind)) => {
                self.report(
                    &field_path(path, "type"),
                    format!(
                        "unknown step type \"{kind}\": an action has \"op\" and no type; \
                         the other types are \"condition\" and \"forEach\""
                    ),
                );
                None
            }
            Some(other) => {
                self.report(
                    &field_path(path, "type"),
                    format!("\"type\" must be a string, found {}", json_kind(other)),
                );
                None
            }
            None if map.contains_key("op") => self.action(map, path),
            // The legacy condition sometimes came without a type: its operator says what it is.
            None if map.contains_key("rules") || map.contains_key("operator") => {
                self.condition(map, path)
            }
            None => {
                self.report(
                    path,
                    "a step needs \"op\" (an action) or \"type\" (\"condition\" or \"forEach\")",
                );
                None
            }
        }
    }

    fn action(&mut self, map: &Map<String, Value>, path: &str) -> Option<Step> {
        self.unknown_fields(map, ACTION_FIELDS, "an action step", path);
        let name = self.required_string(map, "name", path);
        let op = self.required_string(map, "op", path);
        let service = self.optional_string(map, "service", path);
        let input = match map.get("input") {
            None | Some(Value::Null) => Some(Map::new()),
            Some(Value::Object(input)) => Some(input.clone()),
            Some(other) => {
                self.report(
                    &field_path(path, "input"),
                    format!("\"input\" must be an object, found {}", json_kind(other)),
                );
                None
            }
        };
        Some(Step::Action(ActionStep {
            name: name?,
            op: Op::parse(&op?),
            service,
            input: input?,
        }))
    }

    fn condition(&mut self, map: &Map<String, Value>, path: &str) -> Option<Step> {
        let legacy: Vec<&str> = LEGACY_RULE_FIELDS
            .iter()
            .copied()
            .filter(|key| map.contains_key(*key))
            .collect();
        let has_rules = map.contains_key("rules");
        let mut allowed: Vec<&str> = CONDITION_FIELDS.to_vec();
        if !has_rules {
            allowed.extend_from_slice(LEGACY_RULE_FIELDS);
        }
        self.unknown_fields(map, &allowed, "a condition step", path);
        if has_rules && !legacy.is_empty() {
            // Reported above as unknown fields; say why once more in plain words.
            self.report(
                path,
                format!(
                    "a condition has either \"rules\" or the legacy fields ({}) on the step, not both",
                    legacy.join(", ")
                ),
            );
        }
        let name = self.required_string(map, "name", path);
        let match_kind = match map.get("match") {
            None | Some(Value::Null) => Some(Match::All),
            Some(Value::String(kind)) if kind == "all" => Some(Match::All),
            Some(Value::String(kind)) if kind == "any" => Some(Match::Any),
            Some(other) => {
                self.report(
                    &field_path(path, "match"),
                    format!("\"match\" must be \"all\" or \"any\", found {other}"),
                );
                None
            }
        };
        let rules = if has_rules {
            let rules_path = field_path(path, "rules");
            match map.get("rules") {
                Some(Value::Array(items)) => items
                    .iter()
                    .enumerate()
                    .filter_map(|(index, item)| {
                        let rule_path = index_path(&rules_path, index);
                        let rule = self.object(item, &rule_path, "a rule")?;
                        self.unknown_fields(rule, RULE_FIELDS, "a rule", &rule_path);
                        self.rule(rule, &rule_path)
                    })
                    .collect(),
                Some(Value::Null) | None => Vec::new(),
                Some(other) => {
                    self.report(
                        &rules_path,
                        format!("\"rules\" must be an array, found {}", json_kind(other)),
                    );
                    Vec::new()
                }
            }
        } else if legacy.is_empty() {
            Vec::new()
        } else {
            // The legacy form: one rule written on the step itself, meaning `all`.
            self.rule(map, path).into_iter().collect()
        };
        let then_steps = self.steps(map, "then", path);
        let else_steps = self.steps(map, "else", path);
        Some(Step::Condition(ConditionStep {
            name: name?,
            match_kind: match_kind?,
            rules,
            then_steps,
            else_steps,
        }))
    }

    fn rule(&mut self, map: &Map<String, Value>, path: &str) -> Option<Rule> {
        let field = self.optional_string(map, "field", path);
        let field_id = self.optional_string(map, "fieldId", path);
        let step = self.optional_string(map, "step", path);
        let operator = self.required_string(map, "operator", path);
        let value = map.get("value").cloned();
        Some(Rule {
            field,
            field_id,
            step,
            operator: Operator::parse(&operator?),
            value,
        })
    }

    fn for_each(&mut self, map: &Map<String, Value>, path: &str) -> Option<Step> {
        self.unknown_fields(map, FOR_EACH_FIELDS, "a forEach step", path);
        let name = self.required_string(map, "name", path);
        let items = match map.get("items") {
            None => {
                self.report(&field_path(path, "items"), "missing field \"items\"");
                None
            }
            Some(items) => Some(items.clone()),
        };
        let variable = self.required_string(map, "as", path);
        let steps = self.steps(map, "steps", path);
        Some(Step::ForEach(ForEachStep {
            name: name?,
            items: items?,
            variable: variable?,
            steps,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// API.md's example automation, copied verbatim.
    const API_EXAMPLE: &str = r#"{
  "name": "Orders from the web shop",
  "enabled": true,
  "trigger": {
    "type": "webhook",
    "params": [
      {"name": "kind", "path": "kind", "type": "string", "required": true},
      {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}
    ]
  },
  "steps": [
    {"name": "ticket", "op": "ticket/upsert",
     "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
               "type": "order", "status": "waiting-to-pack", "tags": ["waiting-to-pack"]}}
  ]
}"#;

    fn parse(value: Value) -> Automation {
        Automation::from_value(&value).expect("the automation parses")
    }

    fn problems(value: Value) -> Vec<String> {
        Automation::from_value(&value)
            .expect_err("the automation must not parse")
            .iter()
            .map(Problem::to_string)
            .collect()
    }

    #[test]
    fn api_example_automation_parses() {
        let automation = Automation::from_json(API_EXAMPLE).expect("API.md's example parses");
        assert_eq!(automation.name, "Orders from the web shop", "name");
        assert!(automation.enabled, "enabled");
        let Trigger::Webhook { params } = &automation.trigger else {
            panic!("the trigger is a webhook, found {:?}", automation.trigger);
        };
        assert_eq!(
            params[1],
            WebhookParam {
                name: "orderId".into(),
                path: "data.order.id".into(),
                param_type: ParamType::String,
                required: true,
            },
            "the second parameter maps a nested path"
        );
        let Step::Action(step) = &automation.steps[0] else {
            panic!("the step is an action");
        };
        assert_eq!(step.op, Op::TicketUpsert, "the op is in the catalogue");
        assert_eq!(
            step.input.get("externalId"),
            Some(&json!("order-{{orderId}}")),
            "inputs are kept as written, templates unrendered"
        );
    }

    #[test]
    fn api_step_examples_parse() {
        let automation = parse(json!({
            "name": "steps", "trigger": {"type": "event", "event": "ticket.changed"},
            "steps": [
                {"name": "assign", "op": "ticket/assign-least-busy", "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}},
                {"name": "isOrder", "type": "condition", "match": "all",
                 "rules": [{"field": "ticket.type", "operator": "eq", "value": "order"},
                           {"field": "ticket.tags", "operator": "contains", "value": "waiting-to-pack"}],
                 "then": [], "else": []},
                {"name": "eachLine", "type": "forEach", "items": "{{_body.lines}}", "as": "line", "steps": []},
                {"name": "wait", "op": "flow/pause", "input": {"seconds": 259200}},
                {"name": "note", "op": "flow/log", "input": {"message": "got {{orderId}}"}},
                {"name": "call", "op": "http/request", "service": "idoklad",
                 "input": {"method": "POST", "url": "https://example.test", "headers": {}, "body": {}, "timeoutSec": 10}},
                {"name": "tool", "op": "mcp/call-tool", "service": "crm",
                 "input": {"server": "crm", "tool": "lookup_customer", "arguments": {}}}
            ]
        }));
        let kinds: Vec<&str> = automation.steps.iter().map(Step::kind).collect();
        assert_eq!(
            kinds,
            vec![
                "action",
                "condition",
                "forEach",
                "action",
                "action",
                "action",
                "action"
            ],
            "every example step of API.md parses to its kind"
        );
        assert_eq!(
            automation.trigger,
            Trigger::Event {
                event: EventKind::TicketChanged
            },
            "the event trigger"
        );
    }

    #[test]
    fn legacy_condition_reads_as_match_all_with_one_rule() {
        let automation = parse(json!({
            "name": "legacy", "trigger": {"type": "manual"},
            "steps": [{"name": "check", "type": "condition",
                       "fieldId": "f_result", "operator": "eq", "value": "Missing information",
                       "then": [{"name": "note", "op": "flow/log", "input": {"message": "missing"}}]}]
        }));
        let Step::Condition(condition) = &automation.steps[0] else {
            panic!("the step is a condition");
        };
        assert_eq!(condition.match_kind, Match::All, "legacy means match all");
        assert_eq!(
            condition.rules,
            vec![Rule {
                field: None,
                field_id: Some("f_result".into()),
                step: None,
                operator: Operator::Eq,
                value: Some(json!("Missing information")),
            }],
            "the legacy fields become one rule"
        );
        assert_eq!(condition.then_steps.len(), 1, "the branch is kept");
    }

    #[test]
    fn legacy_condition_without_type_is_still_a_condition() {
        let automation = parse(json!({
            "name": "legacy", "trigger": {"type": "manual"},
            "steps": [{"name": "check", "fieldId": "amount", "operator": "gt", "value": 5}]
        }));
        assert_eq!(
            automation.steps[0].kind(),
            "condition",
            "an operator on a step without op or type makes it a legacy condition"
        );
    }

    #[test]
    fn legacy_condition_serializes_in_the_canonical_form() {
        let automation = parse(json!({
            "name": "legacy", "trigger": {"type": "manual"},
            "steps": [{"name": "check", "type": "condition", "fieldId": "x", "operator": "isEmpty"}]
        }));
        let written = serde_json::to_value(&automation).expect("an automation serializes");
        assert_eq!(
            written["steps"][0],
            json!({"name": "check", "type": "condition", "match": "all",
                   "rules": [{"fieldId": "x", "operator": "isEmpty"}], "then": [], "else": []}),
            "the legacy form is written back with rules"
        );
    }

    #[test]
    fn serialized_automation_parses_back_to_itself() {
        let automation = Automation::from_json(API_EXAMPLE).expect("parses");
        let written = serde_json::to_string(&automation).expect("serializes");
        let again = Automation::from_json(&written).expect("the written form parses");
        assert_eq!(again, automation, "parse ∘ serialize is the identity");
    }

    #[test]
    fn every_trigger_type_round_trips() {
        for trigger in [
            json!({"type": "webhook", "params": []}),
            json!({"type": "event", "event": "ticket.created"}),
            json!({"type": "poll", "source": "mail", "intervalSec": 60}),
            json!({"type": "poll", "source": "http"}),
            json!({"type": "poll", "source": "http", "intervalSec": 30, "service": "shop",
                   "request": {"url": "https://shop.test/orders", "query": {"after": "{{_poll.cursor}}"}},
                   "items": "body.items", "cursor": "id"}),
            json!({"type": "poll", "source": "mail", "mailbox": {"host": "imap.firm.test", "port": 143,
                   "tls": false, "user": "desk", "password": "{{secrets.mail}}", "folder": "Support"}}),
            json!({"type": "poll", "source": "mail", "mailbox": {"host": "imap.firm.test", "tls": true,
                   "user": "desk", "password": "{{secrets.mail}}"}}),
            json!({"type": "schedule", "cron": "0 7 * * MON-FRI", "timezone": "Europe/Prague"}),
            json!({"type": "manual"}),
        ] {
            let automation = parse(json!({"name": "t", "trigger": trigger.clone(), "steps": []}));
            let written = serde_json::to_value(&automation.trigger).expect("serializes");
            assert_eq!(written, trigger, "the trigger is written as read");
        }
    }

    #[test]
    fn poll_settings_of_the_wrong_shape_are_named() {
        let found = problems(json!({
            "name": "x",
            "trigger": {"type": "poll", "source": "mail", "request": "GET /", "items": 3,
                        "mailbox": {"host": "imap.firm.test", "port": 70000, "user": "u",
                                    "password": "{{secrets.p}}", "tls": "yes", "box": "INBOX"}},
        }));
        assert_eq!(
            found,
            vec![
                "trigger.request: \"request\" must be an object (an http/request input), found string",
                "trigger.mailbox.box: unknown field \"box\" in a mailbox (its fields are: host, port, tls, user, password, folder)",
                "trigger.mailbox.tls: \"tls\" must be true or false, found string",
                "trigger.mailbox.port: \"port\" must be a port number from 1 to 65535, found 70000",
                "trigger.items: \"items\" must be a string, found number",
            ]
        );
    }

    #[test]
    fn unknown_field_in_a_step_is_an_error_naming_it() {
        let found = problems(json!({
            "name": "x", "trigger": {"type": "manual"},
            "steps": [{"name": "t", "op": "ticket/upsert", "phase": "packing", "input": {"externalId": "1"}}]
        }));
        assert_eq!(
            found,
            vec![
                "steps[0].phase: unknown field \"phase\" in an action step (its fields are: name, op, service, input)"
            ],
            "the unknown field is named with its path"
        );
    }

    #[test]
    fn unknown_fields_everywhere_are_all_listed() {
        let found = problems(json!({
            "name": "x", "colour": "red",
            "trigger": {"type": "webhook", "params": [{"name": "a", "path": "a", "optional": true}], "secret": 1},
            "steps": [
                {"name": "c", "type": "condition", "rules": [{"field": "a", "operator": "eq", "value": 1, "negate": true}], "otherwise": []},
                {"name": "l", "type": "forEach", "items": [], "as": "x", "steps": [], "parallel": true}
            ]
        }));
        assert_eq!(
            found.len(),
            6,
            "each unknown field is one problem: {found:#?}"
        );
        for fragment in [
            "colour",
            "secret",
            "optional",
            "negate",
            "otherwise",
            "parallel",
        ] {
            assert!(
                found.iter().any(|p| p.contains(&format!("\"{fragment}\""))),
                "{fragment} is named in {found:#?}"
            );
        }
    }

    #[test]
    fn rules_and_legacy_fields_together_are_refused() {
        let found = problems(json!({
            "name": "x", "trigger": {"type": "manual"},
            "steps": [{"name": "c", "type": "condition", "fieldId": "a", "operator": "eq",
                       "rules": [{"field": "a", "operator": "eq", "value": 1}]}]
        }));
        assert!(
            found
                .iter()
                .any(|p| p.contains("either \"rules\" or the legacy fields")),
            "mixing both forms is explained: {found:#?}"
        );
    }

    #[test]
    fn shape_problems_carry_paths() {
        let found = problems(json!({
            "name": 3, "enabled": "yes",
            "trigger": {"type": "poll", "source": "fax", "intervalSec": -5},
            "steps": [{"name": "a"}, {"name": "b", "type": "loop"}, "c",
                      {"name": "d", "op": "flow/log", "input": "hello"},
                      {"name": "e", "type": "condition", "match": "some", "rules": [{"field": "a"}]}]
        }));
        assert_eq!(
            found,
            vec![
                "name: \"name\" must be a string, found number",
                "enabled: \"enabled\" must be true or false, found string",
                "trigger.intervalSec: \"intervalSec\" must be a whole number of seconds, found -5",
                "trigger.source: unknown poll source \"fax\" (sources: mail, messages, http)",
                "steps[0]: a step needs \"op\" (an action) or \"type\" (\"condition\" or \"forEach\")",
                "steps[1].type: unknown step type \"loop\": an action has \"op\" and no type; the other types are \"condition\" and \"forEach\"",
                "steps[2]: a step must be an object, found string",
                "steps[3].input: \"input\" must be an object, found string",
                "steps[4].match: \"match\" must be \"all\" or \"any\", found \"some\"",
                "steps[4].rules[0].operator: missing field \"operator\"",
            ],
            "every shape problem, in document order"
        );
    }

    #[test]
    fn invalid_json_is_one_problem() {
        let found = Automation::from_json("{").expect_err("not JSON");
        assert_eq!(found.len(), 1, "one problem");
        assert!(
            found[0].message.starts_with("not valid JSON"),
            "says it is not JSON: {}",
            found[0]
        );
    }

    #[test]
    fn defaults_fill_enabled_steps_match_and_param_type() {
        let automation = parse(json!({
            "name": "d", "trigger": {"type": "webhook", "params": [{"name": "a", "path": "a"}]}
        }));
        assert!(automation.enabled, "enabled defaults to true");
        assert!(automation.steps.is_empty(), "steps default to none");
        assert_eq!(
            automation.trigger,
            Trigger::Webhook {
                params: vec![WebhookParam {
                    name: "a".into(),
                    path: "a".into(),
                    param_type: ParamType::String,
                    required: false
                }]
            },
            "a parameter defaults to an optional string"
        );
    }

    #[test]
    fn unknown_op_and_operator_parse_for_the_validator_to_name() {
        let automation = parse(json!({
            "name": "u", "trigger": {"type": "manual"},
            "steps": [{"name": "a", "op": "ticket/next-phase"},
                      {"name": "c", "type": "condition", "rules": [{"field": "x", "operator": "matches", "value": "y"}]}]
        }));
        let Step::Action(action) = &automation.steps[0] else {
            panic!("an action")
        };
        assert_eq!(
            action.op,
            Op::Unknown("ticket/next-phase".into()),
            "the unknown op is kept"
        );
        let Step::Condition(condition) = &automation.steps[1] else {
            panic!("a condition")
        };
        assert_eq!(
            condition.rules[0].operator,
            Operator::Unknown("matches".into()),
            "the unknown operator is kept"
        );
    }

    #[test]
    fn deserialize_goes_through_the_parser() {
        let error = serde_json::from_value::<Automation>(
            json!({"name": "x", "trigger": {"type": "manual"}, "extra": 1}),
        )
        .expect_err("an unknown field fails serde too");
        assert!(
            error.to_string().contains("unknown field \"extra\""),
            "serde's error carries the problem: {error}"
        );
    }

    #[test]
    fn step_count_counts_branches_and_loop_bodies_once() {
        let automation = parse(json!({
            "name": "n", "trigger": {"type": "manual"},
            "steps": [
                {"name": "a", "op": "flow/log", "input": {"message": "m"}},
                {"name": "loop", "type": "forEach", "items": [1, 2, 3], "as": "i", "steps": [
                    {"name": "b", "op": "flow/log", "input": {"message": "m"}},
                    {"name": "c", "type": "condition", "rules": [], "then": [
                        {"name": "d", "op": "flow/log", "input": {"message": "m"}}
                    ], "else": [
                        {"name": "e", "op": "flow/log", "input": {"message": "m"}}
                    ]}
                ]}
            ]
        }));
        assert_eq!(automation.step_count(), 6, "a, loop, b, c, d, e: six nodes");
    }
}
