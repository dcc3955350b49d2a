//! The run context: everything templates and conditions can read during one run —
//! trigger parameters, `_body`, `ticket`/`change` for event triggers, loop variables,
//! and step outputs.
//!
//! [`Context::publish_outputs`] is the ONE place step outputs enter the context (seed
//! 000, "Step outputs"): always as `<step>.<key>`, the bare `<key>` only while the
//! context does not hold it yet. So an MCP tool that returns `status` never overwrites
//! the trigger's `status`, and a condition over a step's output names the step.
//!
//! The context is plain data (serde, keys sorted) because the executor checkpoints it
//! with the cursor after every action. Secrets do not belong here — they would be
//! written into the checkpoint; layer them with a [`Lookup`] at render time instead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::template::{self, Lookup};

/// The key under which the whole webhook body is kept.
pub const BODY_KEY: &str = "_body";

/// Names to JSON values for one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Context {
    values: BTreeMap<String, Value>,
}

/// What [`Context::publish_outputs`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    /// `<step>.<key>` for every output (always written, replacing an earlier pass).
    pub qualified: Vec<String>,
    /// Bare keys written because the context did not hold them yet.
    pub bare: Vec<String>,
    /// Bare keys not written because the context already held them (the executor may
    /// log them; the value stays reachable as `<step>.<key>`).
    pub bare_taken: Vec<String>,
}

impl Context {
    pub fn new() -> Context {
        Context::default()
    }

    /// A context from a webhook's extracted parameters (they include `_body`).
    pub fn from_params(params: Map<String, Value>) -> Context {
        Context {
            values: params.into_iter().collect(),
        }
    }

    /// A context for an event trigger: the ticket as committed and the change
    /// (`{"<field>": {"from": …, "to": …}}`).
    pub fn for_event(ticket: Value, change: Value) -> Context {
        let mut context = Context::new();
        context.insert("ticket", ticket);
        context.insert("change", change);
        context
    }

    /// The value under exactly this key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// Sets a key, returning what it held: trigger values and loop variables (the
    /// executor binds `as` per pass and restores the previous value after the loop).
    /// Step outputs go through [`Context::publish_outputs`] instead.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> Option<Value> {
        self.values.insert(key.into(), value)
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.values.remove(key)
    }

    /// Resolves a template name (`ticket.tags.0`, `call.body.id`): see
    /// [`template::resolve`].
    pub fn resolve(&self, name: &str) -> Option<&Value> {
        template::resolve(self, name)
    }

    /// Publishes a step's outputs: `<step>.<key>` always, the bare `<key>` only if the
    /// context does not hold it yet.
    pub fn publish_outputs(&mut self, step: &str, outputs: Map<String, Value>) -> Published {
        let mut published = Published::default();
        for (key, value) in outputs {
            let qualified = format!("{step}.{key}");
            if self.values.contains_key(&key) {
                published.bare_taken.push(key);
            } else {
                self.values.insert(key.clone(), value.clone());
                published.bare.push(key);
            }
            self.values.insert(qualified.clone(), value);
            published.qualified.push(qualified);
        }
        published
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.values.iter()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl Lookup for Context {
    fn lookup(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outputs(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("outputs are an object, got {other}"),
        }
    }

    #[test]
    fn tool_status_output_never_overwrites_the_trigger_status() {
        let mut context = Context::from_params(outputs(json!({"status": "new", "_body": {}})));
        let published =
            context.publish_outputs("tool", outputs(json!({"status": "done", "content": []})));
        assert_eq!(
            context.get("status"),
            Some(&json!("new")),
            "the trigger's bare status is kept"
        );
        assert_eq!(
            context.get("tool.status"),
            Some(&json!("done")),
            "the tool's status is under tool.status"
        );
        assert_eq!(
            published.bare_taken,
            vec!["status"],
            "the skipped bare key is reported"
        );
        assert_eq!(
            published.bare,
            vec!["content"],
            "a free bare key is published"
        );
    }

    #[test]
    fn first_publisher_keeps_the_bare_name_later_ones_only_qualified() {
        let mut context = Context::new();
        context.publish_outputs("first", outputs(json!({"status": 200})));
        context.publish_outputs("second", outputs(json!({"status": 404})));
        assert_eq!(
            context.get("status"),
            Some(&json!(200)),
            "bare belongs to the first"
        );
        assert_eq!(
            context.get("second.status"),
            Some(&json!(404)),
            "the second is reachable by name"
        );
        assert_eq!(
            context.resolve("second.status"),
            Some(&json!(404)),
            "templates resolve the qualified key"
        );
    }

    #[test]
    fn qualified_outputs_are_replaced_on_every_pass() {
        let mut context = Context::new();
        context.publish_outputs("tag", outputs(json!({"tags": ["a"]})));
        context.publish_outputs("tag", outputs(json!({"tags": ["a", "b"]})));
        assert_eq!(
            context.get("tag.tags"),
            Some(&json!(["a", "b"])),
            "a loop's later pass replaces step.key"
        );
        assert_eq!(
            context.get("tags"),
            Some(&json!(["a"])),
            "the bare key stays the first pass's"
        );
    }

    #[test]
    fn context_round_trips_through_serde_for_checkpoints() {
        let mut context = Context::for_event(json!({"id": "t1", "tags": []}), json!({}));
        context.publish_outputs(
            "assign",
            outputs(json!({"assignee": {"id": "m1", "name": "Eva"}})),
        );
        let saved = serde_json::to_string(&context).expect("a context serializes");
        let restored: Context = serde_json::from_str(&saved).expect("and deserializes");
        assert_eq!(
            restored, context,
            "the checkpoint restores the same context"
        );
        assert!(
            saved.starts_with("{\"assign.assignee\":"),
            "it is a plain JSON object with sorted keys: {saved}"
        );
    }

    #[test]
    fn insert_returns_the_previous_value_for_loop_restore() {
        let mut context = Context::new();
        assert_eq!(context.insert("line", json!(1)), None, "nothing before");
        assert_eq!(
            context.insert("line", json!(2)),
            Some(json!(1)),
            "the previous pass's value is returned"
        );
        assert_eq!(
            context.remove("line"),
            Some(json!(2)),
            "removed after the loop"
        );
        assert!(context.is_empty(), "nothing left");
    }
}
