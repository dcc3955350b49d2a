//! How a ticket change is described, the same on every store: the `change` map of a
//! write (keyed like the ticket's JSON), its one-line form for the ticket's log, who made
//! it, and how custom fields merge. Stores call these; nothing here touches storage.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::{Assignee, Origin, Ticket};
use crate::store::FieldChange;

/// Who made a change, for the log line, and the run id the line carries.
pub fn who(origin: &Origin) -> (String, Option<String>) {
    match origin {
        Origin::Person => ("a person".to_owned(), None),
        Origin::Automation {
            automation_id,
            run_id,
            ..
        } => (
            format!("automation {automation_id} (run {run_id})"),
            Some(run_id.clone()),
        ),
    }
}

/// Custom field values merged in: a `null` value removes the field.
pub fn merge_fields(fields: &mut BTreeMap<String, Value>, changes: &BTreeMap<String, Value>) {
    for (name, value) in changes {
        if value.is_null() {
            fields.remove(name);
        } else {
            fields.insert(name.clone(), value.clone());
        }
    }
}

pub fn assignee_json(assignee: &Option<Assignee>) -> Value {
    match assignee {
        Some(assignee) => {
            serde_json::json!({ "id": assignee.id.to_string(), "name": assignee.name })
        }
        None => Value::Null,
    }
}

pub fn opt_text(text: &Option<String>) -> Value {
    text.as_ref()
        .map_or(Value::Null, |text| Value::String(text.clone()))
}

/// What differs between `old` and `new`, keyed like the ticket's JSON (`title`, `type`,
/// `status`, `closed`, `tags`, `assignee`, `group`, `fields`). For `fields`, `from` and
/// `to` hold only the fields that changed (`null` = absent).
pub fn diff(old: &Ticket, new: &Ticket) -> BTreeMap<String, FieldChange> {
    let mut change = BTreeMap::new();
    let mut note = |name: &str, from: Value, to: Value| {
        if from != to {
            change.insert(name.to_owned(), FieldChange { from, to });
        }
    };
    note(
        "title",
        Value::String(old.title.clone()),
        Value::String(new.title.clone()),
    );
    note(
        "type",
        opt_text(&old.ticket_type),
        opt_text(&new.ticket_type),
    );
    note("status", opt_text(&old.status), opt_text(&new.status));
    note("closed", Value::Bool(old.closed), Value::Bool(new.closed));
    note(
        "tags",
        Value::from(old.tags.clone()),
        Value::from(new.tags.clone()),
    );
    note(
        "assignee",
        assignee_json(&old.assignee),
        assignee_json(&new.assignee),
    );
    note("group", opt_text(&old.group), opt_text(&new.group));
    let mut from = serde_json::Map::new();
    let mut to = serde_json::Map::new();
    for name in old.fields.keys().chain(new.fields.keys()) {
        let (before, after) = (old.fields.get(name), new.fields.get(name));
        if before != after && !from.contains_key(name) {
            from.insert(name.clone(), before.cloned().unwrap_or(Value::Null));
            to.insert(name.clone(), after.cloned().unwrap_or(Value::Null));
        }
    }
    if !from.is_empty() {
        change.insert(
            "fields".to_owned(),
            FieldChange {
                from: Value::Object(from),
                to: Value::Object(to),
            },
        );
    }
    change
}

/// A value as a person reads it in the log.
pub fn show(value: &Value) -> String {
    match value {
        Value::Null => "none".to_owned(),
        Value::String(text) => text.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(show).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => match map.get("name") {
            Some(Value::String(name)) if map.contains_key("id") => name.clone(),
            _ => value.to_string(),
        },
        other => other.to_string(),
    }
}

/// `status waiting-to-pack → shipped; tags [a] → [a, b]`.
pub fn describe(change: &BTreeMap<String, FieldChange>) -> String {
    change
        .iter()
        .map(|(name, FieldChange { from, to })| format!("{name} {} → {}", show(from), show(to)))
        .collect::<Vec<_>>()
        .join("; ")
}
