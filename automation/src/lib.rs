//! The pure core of fronta's automation runtime: the automation model and its parser
//! ([`model`]), the step catalogue ([`catalogue`]), validation on save ([`validate`]),
//! the webhook contract ([`contract`]), `{{name}}` templates ([`template`]), the run
//! context ([`context`]) and conditions ([`condition`]).
//!
//! Also the ports the executor is handed: [`connector::Connector`] (third-party calls)
//! and [`secrets::SecretStore`] / [`secrets::SecretCipher`] (per-tenant secrets); [`widget`]
//! is dashboard widgets over connector data, with their [`widget::WidgetStore`] port;
//! [`mcp`] and [`mail`] are the per-tenant MCP and mail servers connector steps name, with
//! their ports, and [`mail`] the rules of `mail/send` (its input, addresses, the SMTP
//! failure classification).
//!
//! The rules of the stores' writes are here too, as pure plans beside their ports (read
//! → plan → write): automation saves and the loop guard in [`store`], widget create,
//! update, claim and settle in [`widget`], service limit acquire and release in
//! [`limits`], the poll cursor's compare-and-set in [`poll`]. Both databases call them
//! inside their transactions and keep only SQL, locking and row mapping.
//!
//! Deliberately left out: storage, HTTP (connectors implement the port elsewhere) and the
//! scheduler. Everything here is a function of its inputs — no clock, no I/O — so the
//! executor and the server can lean on it and tests need no setup.
//!
//! The flow these pieces serve: a webhook body goes through [`contract::extract`] into a
//! [`Context`]; the executor walks the [`Automation`]'s steps, renders each input with
//! [`template::render`], publishes outputs with [`Context::publish_outputs`] and
//! branches on [`condition::evaluate`], whose log lines go to the run's step log.
//!
//! ```
//! use fronta_automation::{Automation, Context, Step, Trigger, ValidationContext};
//! use fronta_automation::{condition, contract, template, validate::validate};
//! use serde_json::json;
//!
//! let automation = Automation::from_json(r#"{
//!   "name": "Orders", "trigger": {"type": "webhook", "params": [
//!     {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
//!   "steps": [
//!     {"name": "big", "type": "condition",
//!      "rules": [{"field": "_body.total", "operator": "gt", "value": 1000}],
//!      "then": [{"name": "note", "op": "flow/log", "input": {"message": "big order {{orderId}}"}}]}
//!   ]}"#).expect("parses");
//! assert!(validate(&automation, &ValidationContext::default()).is_empty(), "valid");
//!
//! let Trigger::Webhook { params } = &automation.trigger else { unreachable!() };
//! let body = json!({"data": {"order": {"id": "5001"}}, "total": "1500"});
//! let context = Context::from_params(contract::extract(params, &body).expect("fits"));
//!
//! let Step::Condition(big) = &automation.steps[0] else { unreachable!() };
//! let outcome = condition::evaluate(big, &context);
//! assert!(outcome.met, "1500 > 1000 as numbers");
//! assert_eq!(outcome.lines[0],
//!     "Condition: _body.total gt 1000: met | _body.total = \"1500\", compared with 1000 as numbers");
//!
//! let Step::Action(note) = &big.then_steps[0] else { unreachable!() };
//! let input = template::render_map(&note.input, &context).expect("renders");
//! assert_eq!(input["message"], json!("big order 5001"), "the template is filled");
//! ```

pub mod bulk;
pub mod catalogue;
pub mod condition;
pub mod connector;
pub mod context;
pub mod contract;
pub mod dates;
pub mod dry_run;
pub mod error_events;
pub mod errors;
pub mod executor;
pub mod mail;
pub mod mcp;
pub mod model;
pub mod poll;
pub mod problem;
pub mod refs;
pub mod restart;
pub mod retention;
pub mod retry;
pub mod rotation;
pub mod run_search;
pub mod schedule;
pub mod scheduler;
pub mod secrets;
pub mod service_limits;
pub mod setup;
pub mod steps;
pub mod store;
pub mod template;
pub mod ticket_events;
pub mod timeline;
pub mod validate;
pub mod versions;
pub mod widget;

pub use catalogue::Op;
pub use condition::{ConditionOutcome, RuleOutcome};
pub use context::{BODY_KEY, Context, Published};
pub use contract::ContractError;
pub use model::{
    ActionStep, Automation, ConditionStep, EventKind, ForEachStep, Mailbox, Match, Operator,
    ParamType, PollSettings, PollSource, Rule, Step, Trigger, WebhookParam,
};
pub use problem::{Problem, Problems};
pub use template::{Lookup, TemplateError};
pub use validate::{MAX_ACTIONS, MAX_STEPS, ValidationContext};
