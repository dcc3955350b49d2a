//! The catalogue of action ops (API.md, "Built-in steps"): their names, the inputs each
//! takes (and which are required) and the outputs each publishes.
//!
//! The validator reads it to check inputs and template names; the executor will match on
//! [`Op`] to pick the implementation. What an op *does* lives elsewhere — this is only
//! the shape. An op that is not in the catalogue parses as [`Op::Unknown`], so the
//! validator can name it instead of the parser failing on it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An action's op, e.g. `ticket/upsert`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    TicketUpsert,
    TicketSetType,
    TicketAddTags,
    TicketSetStatus,
    TicketClose,
    TicketAssignLeastBusy,
    /// Assigns the ticket to a named member of a group (`desk::store::AssignTo::Member`).
    TicketAssign,
    /// Reads a ticket as it is now: the run's, or the one input `ticket` names.
    TicketGet,
    /// An internal note on a ticket's log, written by the automation.
    TicketComment,
    IncidentCreate,
    FlowPause,
    FlowLog,
    HttpRequest,
    McpCallTool,
    /// Sends a message through one of the tenant's mail servers over SMTP
    /// (`crate::mail`).
    MailSend,
    /// The `mail` poll's fetch (`crate::poll`): not a step users write, so not in
    /// [`Op::KNOWN`]; a connector serves it like the others.
    PollMail,
    /// Not in the catalogue; the validator reports it and the executor refuses it.
    Unknown(String),
}

impl Op {
    /// Every op of the catalogue, in the order of API.md's table.
    pub const KNOWN: [Op; 15] = [
        Op::TicketUpsert,
        Op::TicketSetType,
        Op::TicketAddTags,
        Op::TicketSetStatus,
        Op::TicketClose,
        Op::TicketAssignLeastBusy,
        Op::TicketAssign,
        Op::TicketGet,
        Op::TicketComment,
        Op::IncidentCreate,
        Op::FlowPause,
        Op::FlowLog,
        Op::HttpRequest,
        Op::McpCallTool,
        Op::MailSend,
    ];

    /// Reads an op name; anything outside the catalogue is [`Op::Unknown`].
    pub fn parse(name: &str) -> Op {
        Op::KNOWN
            .iter()
            .find(|op| op.as_str() == name)
            .cloned()
            .unwrap_or_else(|| Op::Unknown(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        match self {
            Op::TicketUpsert => "ticket/upsert",
            Op::TicketSetType => "ticket/set-type",
            Op::TicketAddTags => "ticket/add-tags",
            Op::TicketSetStatus => "ticket/set-status",
            Op::TicketClose => "ticket/close",
            Op::TicketAssignLeastBusy => "ticket/assign-least-busy",
            Op::TicketAssign => "ticket/assign",
            Op::TicketGet => "ticket/get",
            Op::TicketComment => "ticket/comment",
            Op::IncidentCreate => "incident/create",
            Op::FlowPause => "flow/pause",
            Op::FlowLog => "flow/log",
            Op::HttpRequest => "http/request",
            Op::McpCallTool => "mcp/call-tool",
            Op::MailSend => "mail/send",
            Op::PollMail => "poll/mail",
            Op::Unknown(name) => name,
        }
    }

    pub fn is_known(&self) -> bool {
        !matches!(self, Op::Unknown(_))
    }

    /// Connector ops call a third-party service and name it in the step's `service`.
    pub fn is_connector(&self) -> bool {
        matches!(
            self,
            Op::HttpRequest | Op::McpCallTool | Op::MailSend | Op::PollMail
        )
    }

    /// Whether the op changes anything outside its run (tickets, incidents, another
    /// service, the run's own schedule). The executor checkpoints after such ops; one
    /// without (`flow/log`, the read of `ticket/get`) may simply run again after a crash.
    pub fn has_outside_effect(&self) -> bool {
        !matches!(self, Op::FlowLog | Op::TicketGet)
    }

    /// Whether the ticket the step wrote or read becomes the run's ticket: the one
    /// `ticket/get` and `ticket/comment` take when their input names none, and the one
    /// the run's end is noted on.
    pub fn takes_the_runs_ticket(&self) -> bool {
        self.changes_tickets() || matches!(self, Op::TicketGet | Op::TicketComment)
    }

    /// Whether the op writes tickets (and so may start the automations listening to
    /// their changes): a run that ran none changed nothing the loop guard counts.
    pub fn changes_tickets(&self) -> bool {
        matches!(
            self,
            Op::TicketUpsert
                | Op::TicketSetType
                | Op::TicketAddTags
                | Op::TicketSetStatus
                | Op::TicketClose
                | Op::TicketAssignLeastBusy
                | Op::TicketAssign
        )
    }

    /// Inputs the step must have.
    pub fn required_inputs(&self) -> &'static [&'static str] {
        match self {
            Op::TicketUpsert => &["externalId"],
            Op::TicketSetType => &["ticket", "type"],
            Op::TicketAddTags => &["ticket", "tags"],
            Op::TicketSetStatus => &["ticket", "status"],
            Op::TicketClose => &["ticket"],
            Op::TicketAssignLeastBusy => &["ticket", "group"],
            Op::TicketAssign => &["ticket", "group", "member"],
            Op::TicketGet => &[],
            Op::TicketComment => &["text"],
            Op::IncidentCreate => &["title", "impact"],
            Op::FlowPause => &["seconds"],
            Op::FlowLog => &["message"],
            Op::HttpRequest => &["url"],
            Op::McpCallTool => &["server", "tool"],
            Op::MailSend => &["server", "to", "subject"],
            Op::PollMail => &["host", "user", "password"],
            Op::Unknown(_) => &[],
        }
    }

    /// Inputs the step may have besides the required ones.
    pub fn optional_inputs(&self) -> &'static [&'static str] {
        match self {
            Op::TicketUpsert => &[
                "title",
                "type",
                "status",
                "tags",
                "fields",
                "group",
                "onExisting",
            ],
            Op::TicketGet | Op::TicketComment => &["ticket"],
            Op::IncidentCreate => &["ticket"],
            Op::TicketAssignLeastBusy => &["whenFull"],
            Op::HttpRequest => &["method", "headers", "query", "body", "timeoutSec"],
            Op::McpCallTool => &["arguments"],
            Op::MailSend => &["cc", "text", "html"],
            _ => &[],
        }
    }

    /// Whether `input` is an input this op takes (always true for an unknown op: its
    /// problem is the op, not the inputs).
    pub fn takes_input(&self, input: &str) -> bool {
        !self.is_known()
            || self.required_inputs().contains(&input)
            || self.optional_inputs().contains(&input)
    }

    /// Outputs the step publishes (as `<step>.<key>`, and as the bare key when free).
    pub fn outputs(&self) -> &'static [&'static str] {
        match self {
            Op::TicketUpsert => &["id", "number", "created"],
            Op::TicketSetType => &["type"],
            Op::TicketAddTags => &["tags"],
            Op::TicketSetStatus => &["status"],
            Op::TicketClose => &["closed"],
            Op::TicketAssignLeastBusy | Op::TicketAssign => &["assignee", "group"],
            // The ticket itself, as an event's `ticket` (`crate::steps::ticket_json`).
            Op::TicketGet => &TICKET_OUTPUTS,
            Op::TicketComment => &[],
            Op::IncidentCreate => &["id", "opened"],
            Op::FlowPause | Op::FlowLog => &[],
            Op::HttpRequest => &["status", "headers", "body"],
            Op::McpCallTool => &["content", "structured", "isError"],
            Op::MailSend => &["messageId", "reply", "from", "to", "cc", "subject"],
            Op::PollMail => &["items", "cursor", "left"],
            Op::Unknown(_) => &[],
        }
    }
}

/// The ticket as automations see it, key by key: an event's `ticket` and the outputs of
/// `ticket/get` (`crate::steps::ticket_json` writes them).
pub const TICKET_OUTPUTS: [&str; 11] = [
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

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Op {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Op {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(Op::parse(&name))
    }
}

/// The catalogue as the editor reads it (`GET /api/catalogue`): every op with its
/// inputs (required first) and outputs, and the vocabulary of triggers and conditions —
/// so a form offers exactly what a save accepts.
pub fn as_json() -> serde_json::Value {
    use crate::model::{EventKind, Match, Operator, ParamType, PollSource};
    let ops: Vec<serde_json::Value> = Op::KNOWN
        .iter()
        .map(|op| {
            serde_json::json!({
                "op": op.as_str(),
                "required": op.required_inputs(),
                "optional": op.optional_inputs(),
                "outputs": op.outputs(),
                "connector": op.is_connector(),
            })
        })
        .collect();
    let operators: Vec<serde_json::Value> = Operator::KNOWN
        .iter()
        .map(|operator| serde_json::json!({"operator": operator.as_str(), "takesValue": operator.takes_value()}))
        .collect();
    serde_json::json!({
        "ops": ops,
        "triggers": ["webhook", "event", "poll", "schedule", "manual"],
        "events": EventKind::ALL.map(EventKind::as_str),
        "paramTypes": ParamType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
        "pollSources": [PollSource::Http.as_str(), PollSource::Messages.as_str(), PollSource::Mail.as_str()],
        "operators": operators,
        "matches": [Match::All.as_str(), Match::Any.as_str()],
    })
}

/// The catalogue's op names joined for messages: `ticket/upsert, ticket/set-type, …`.
pub(crate) fn known_names() -> String {
    Op::KNOWN
        .iter()
        .map(Op::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_op_parses_back_from_its_name() {
        for op in Op::KNOWN {
            assert_eq!(Op::parse(op.as_str()), op, "{op} must round-trip");
        }
    }

    #[test]
    fn an_op_outside_the_catalogue_is_unknown_and_keeps_its_name() {
        let op = Op::parse("ticket/next-phase");
        assert_eq!(
            op,
            Op::Unknown("ticket/next-phase".into()),
            "unknown ops are kept"
        );
        assert!(!op.is_known(), "an unknown op is not known");
        assert_eq!(
            op.as_str(),
            "ticket/next-phase",
            "the name is kept as written"
        );
    }

    #[test]
    fn upsert_requires_external_id_and_publishes_id_number_created() {
        assert_eq!(
            Op::TicketUpsert.required_inputs(),
            &["externalId"],
            "API.md: externalId is required"
        );
        assert_eq!(
            Op::TicketUpsert.outputs(),
            &["id", "number", "created"],
            "API.md's outputs of ticket/upsert"
        );
        assert!(
            !Op::TicketUpsert.takes_input("phase"),
            "a phase is not an input"
        );
    }

    #[test]
    fn the_editors_catalogue_lists_every_op_with_its_inputs() {
        let catalogue = as_json();
        let ops = catalogue["ops"].as_array().expect("ops");
        assert_eq!(ops.len(), Op::KNOWN.len(), "every op of the catalogue");
        let upsert = ops
            .iter()
            .find(|op| op["op"] == "ticket/upsert")
            .expect("upsert");
        assert_eq!(
            upsert["required"],
            serde_json::json!(["externalId"]),
            "required inputs"
        );
        assert!(
            upsert["optional"]
                .as_array()
                .is_some_and(|o| o.contains(&serde_json::json!("tags"))),
            "optional inputs"
        );
        let empty = catalogue["operators"]
            .as_array()
            .expect("operators")
            .iter()
            .find(|o| o["operator"] == "isEmpty")
            .expect("isEmpty");
        assert_eq!(empty["takesValue"], false, "isEmpty takes no value");
    }

    #[test]
    fn http_mcp_and_mail_are_the_connectors() {
        let connectors: Vec<&str> = Op::KNOWN
            .iter()
            .filter(|op| op.is_connector())
            .map(Op::as_str)
            .collect();
        assert_eq!(
            connectors,
            vec!["http/request", "mcp/call-tool", "mail/send"],
            "the connector ops"
        );
    }
}
