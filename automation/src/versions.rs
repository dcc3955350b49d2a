//! Automation versions: every save of a changed definition is an immutable version, and
//! every run is pinned to the version it was enqueued on, so a resumed, retried,
//! reclaimed or snoozed run finishes the tree it started with (DESIGN §1, promise
//! "versions that every run is pinned to").
//!
//! # Contract
//!
//! - A version is the whole definition **except `enabled`** (pausing is not an edit): its
//!   name, trigger and steps, with a content hash ([`content_hash`], SHA-256 of the
//!   canonical JSON, keys sorted) and when and by whom it was saved.
//! - Numbers are per automation, 1, 2, 3, … and never reused: a save writes
//!   `latest + 1`. A save whose hash equals the current version's writes none
//!   ([`plan`]); a rollback to `n` is a save of `n`'s definition, so it is a new number
//!   unless `n` is already the current content.
//! - The current version is the newest; `StoredAutomation::current_version` names it.
//! - Deleting an automation keeps its versions (the runs that reference them stay
//!   readable); the API answers 404 for the automation and its history.
//! - [`diff`] compares two definitions structurally: the trigger field by field, steps
//!   by name (names are unique in a tree, `validate`), each change at a path such as
//!   `trigger.params[0].path`, `steps.s2` (added, removed, moved) or
//!   `steps.s2.input.message` (changed).
//!
//! The stores keep the rows and call [`plan`] inside the save's transaction.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::model::{Automation, Step};
use crate::refs::Ref;

/// The number of the version every automation and every run had before versions
/// existed (the migration's).
pub const FIRST_VERSION: u32 = 1;

/// The default `serde` value of a run's version: runs enqueued before versions existed
/// ran the automation's only version.
pub fn first_version() -> u32 {
    FIRST_VERSION
}

/// Who saved a version when no audit scope names the actor: `"tenant"` (versions saved
/// before tokens had names read so too).
pub const BY_TENANT: &str = "tenant";

/// Who saves a version now: the name of the token (or `fronta <command>`) the current
/// audit scope names (`fronta_engine::audit`), else [`BY_TENANT`].
pub fn author() -> String {
    fronta_engine::audit::actor_name().unwrap_or_else(|| BY_TENANT.to_owned())
}

/// One saved version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    pub version: u32,
    /// The definition as saved (`enabled` is not part of it and reads `true`).
    pub definition: Automation,
    pub hash: String,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    /// What its names were bound to when saved ([`crate::refs`]).
    #[serde(default)]
    pub refs: Vec<Ref>,
}

impl Version {
    /// A version as a store reads it back: `enabled` normalised, and the hash computed
    /// when the row has none (versions made by the migration).
    pub fn read(
        version: u32,
        definition: Automation,
        hash: String,
        created_at: DateTime<Utc>,
        created_by: String,
        refs: Vec<Ref>,
    ) -> Self {
        let definition = definition_of(&definition);
        let hash = if hash.is_empty() {
            bound_hash(&definition, &refs)
        } else {
            hash
        };
        Version {
            version,
            definition,
            hash,
            created_at,
            created_by,
            refs,
        }
    }
}

/// The definition a version keeps: `enabled` normalised away.
pub fn definition_of(automation: &Automation) -> Automation {
    let mut definition = automation.clone();
    definition.enabled = true;
    definition
}

/// The content hash of a definition: `sha256:<hex>` of its canonical JSON (keys sorted,
/// `enabled` left out).
pub fn content_hash(automation: &Automation) -> String {
    let mut value = serde_json::to_value(definition_of(automation)).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.remove("enabled");
    }
    let digest = Sha256::digest(value.to_string().as_bytes());
    let mut hex = String::with_capacity(7 + digest.len() * 2);
    hex.push_str("sha256:");
    for byte in digest {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// The hash of a definition whose names are bound by `refs`: taken over
/// [`crate::refs::canonical`], so a renamed group or type is the same version.
pub fn bound_hash(automation: &Automation, refs: &[Ref]) -> String {
    content_hash(&crate::refs::canonical(automation, refs))
}

/// The newest version a store holds for an automation: its number and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latest {
    pub version: u32,
    pub hash: String,
}

impl Latest {
    /// The current version of an automation whose stored definition is `definition`
    /// with `refs`: its hash computed from the content itself (the row's copy may
    /// predate hashes, and a rename rewrites its names).
    pub fn of(version: u32, definition: &Automation, refs: &[Ref]) -> Self {
        Latest {
            version,
            hash: bound_hash(definition, refs),
        }
    }
}

/// What a save writes into the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionWrite {
    /// The definition is the current version's: no new version; the automation stays on
    /// this number.
    Unchanged(u32),
    /// A new version with this number and hash.
    New { version: u32, hash: String },
}

impl VersionWrite {
    /// The automation's current version after the save.
    pub fn current(&self) -> u32 {
        match self {
            VersionWrite::Unchanged(version) | VersionWrite::New { version, .. } => *version,
        }
    }
}

/// The version a save of `automation` writes, given the newest one stored (`None` for a
/// create): a new number only when the content changed.
pub fn plan(latest: Option<&Latest>, automation: &Automation, refs: &[Ref]) -> VersionWrite {
    let hash = bound_hash(automation, refs);
    match latest {
        Some(latest) if latest.hash == hash => VersionWrite::Unchanged(latest.version),
        Some(latest) => VersionWrite::New {
            version: latest.version.saturating_add(1),
            hash,
        },
        None => VersionWrite::New {
            version: FIRST_VERSION,
            hash,
        },
    }
}

/// One difference between two definitions.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// Where: `name`, `trigger.…`, `steps.<step name>` or `steps.<step name>.<field>…`.
    pub path: String,
    /// `added`, `removed`, `changed` or `moved` (a step at another place in the tree).
    pub change: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// A step as the diff sees it: where it sits and its own fields (its nested blocks are
/// compared as steps of their own).
struct Placed {
    place: String,
    own: Value,
}

fn flatten(steps: &[Step], at: &str, into: &mut Vec<(String, Placed)>) {
    for (index, step) in steps.iter().enumerate() {
        let place = format!("{at}[{index}]");
        let mut own = serde_json::to_value(step).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut own {
            for nested in ["then", "else", "steps"] {
                map.remove(nested);
            }
        }
        into.push((
            step.name().to_owned(),
            Placed {
                place: place.clone(),
                own,
            },
        ));
        match step {
            Step::Condition(condition) => {
                flatten(&condition.then_steps, &format!("{place}.then"), into);
                flatten(&condition.else_steps, &format!("{place}.else"), into);
            }
            Step::ForEach(each) => flatten(&each.steps, &format!("{place}.steps"), into),
            Step::Action(_) => {}
        }
    }
}

/// The field-by-field differences of two JSON values under `path`.
fn values(path: &str, before: &Value, after: &Value, changes: &mut Vec<Change>) {
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
            for key in keys {
                let at = format!("{path}.{key}");
                match (old.get(key), new.get(key)) {
                    (Some(a), Some(b)) => values(&at, a, b, changes),
                    (Some(a), None) => changes.push(Change {
                        path: at,
                        change: "removed",
                        before: Some(a.clone()),
                        after: None,
                    }),
                    (None, Some(b)) => changes.push(Change {
                        path: at,
                        change: "added",
                        before: None,
                        after: Some(b.clone()),
                    }),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(old), Value::Array(new)) if old.len() == new.len() => {
            for (index, (a, b)) in old.iter().zip(new).enumerate() {
                values(&format!("{path}[{index}]"), a, b, changes);
            }
        }
        (a, b) if a != b => changes.push(Change {
            path: path.to_owned(),
            change: "changed",
            before: Some(a.clone()),
            after: Some(b.clone()),
        }),
        _ => {}
    }
}

/// What changed from `before` to `after` (see the module docs): the name, the trigger
/// field by field, then steps by name — removed, added, moved, and their fields changed.
pub fn diff(before: &Automation, after: &Automation) -> Vec<Change> {
    let mut changes = Vec::new();
    if before.name != after.name {
        changes.push(Change {
            path: "name".into(),
            change: "changed",
            before: Some(Value::String(before.name.clone())),
            after: Some(Value::String(after.name.clone())),
        });
    }
    let trigger = |automation: &Automation| {
        serde_json::to_value(&automation.trigger).unwrap_or(Value::Object(Map::new()))
    };
    values("trigger", &trigger(before), &trigger(after), &mut changes);
    let (mut old, mut new) = (Vec::new(), Vec::new());
    flatten(&before.steps, "steps", &mut old);
    flatten(&after.steps, "steps", &mut new);
    for (name, placed) in &old {
        if !new.iter().any(|(other, _)| other == name) {
            changes.push(Change {
                path: format!("steps.{name}"),
                change: "removed",
                before: Some(Value::String(placed.place.clone())),
                after: None,
            });
        }
    }
    for (name, placed) in &new {
        let Some((_, was)) = old.iter().find(|(other, _)| other == name) else {
            changes.push(Change {
                path: format!("steps.{name}"),
                change: "added",
                before: None,
                after: Some(Value::String(placed.place.clone())),
            });
            continue;
        };
        if was.place != placed.place {
            changes.push(Change {
                path: format!("steps.{name}"),
                change: "moved",
                before: Some(Value::String(was.place.clone())),
                after: Some(Value::String(placed.place.clone())),
            });
        }
        values(
            &format!("steps.{name}"),
            &was.own,
            &placed.own,
            &mut changes,
        );
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn automation(steps: Value) -> Automation {
        Automation::from_value(&json!({
            "name": "Orders",
            "trigger": {"type": "manual"},
            "steps": steps,
        }))
        .unwrap_or_else(|problems| panic!("the test automation parses: {problems:?}"))
    }

    fn log(name: &str, message: &str) -> Value {
        json!({"name": name, "op": "flow/log", "input": {"message": message}})
    }

    #[test]
    fn the_hash_ignores_enabled_and_key_order_but_not_content() {
        let one = automation(json!([log("s1", "one")]));
        let mut paused = one.clone();
        paused.enabled = false;
        assert_eq!(
            content_hash(&one),
            content_hash(&paused),
            "pausing is no edit"
        );
        assert!(content_hash(&one).starts_with("sha256:"), "named algorithm");
        assert_eq!(content_hash(&one).len(), 7 + 64, "a full SHA-256");
        let other = automation(json!([log("s1", "two")]));
        assert_ne!(content_hash(&one), content_hash(&other), "content counts");
    }

    #[test]
    fn a_save_writes_a_new_number_only_when_the_content_changed() {
        let one = automation(json!([log("s1", "one")]));
        assert_eq!(
            plan(None, &one, &[]),
            VersionWrite::New {
                version: 1,
                hash: content_hash(&one)
            },
            "a create is version 1"
        );
        let latest = Latest {
            version: 4,
            hash: content_hash(&one),
        };
        assert_eq!(
            plan(Some(&latest), &one, &[]),
            VersionWrite::Unchanged(4),
            "same"
        );
        let two = automation(json!([log("s1", "two")]));
        let written = plan(Some(&latest), &two, &[]);
        assert_eq!(written.current(), 5, "the next number");
        assert!(matches!(written, VersionWrite::New { .. }), "{written:?}");
    }

    #[test]
    fn the_diff_names_steps_added_removed_moved_and_changed_by_path() {
        let before = automation(json!([
            log("s1", "one (v1)"),
            {"name": "p", "op": "flow/pause", "input": {"seconds": 20}},
            log("s2", "two"),
            log("s3", "three"),
        ]));
        let after = automation(json!([
            log("n0", "new"),
            log("s3", "three (v2)"),
            log("s1", "one (v2)"),
        ]));
        let changes = diff(&before, &after);
        let find = |path: &str, change: &str| {
            changes
                .iter()
                .find(|c| c.path == path && c.change == change)
                .unwrap_or_else(|| panic!("{change} at {path} in {changes:#?}"))
        };
        assert_eq!(find("steps.p", "removed").before, Some(json!("steps[1]")));
        find("steps.s2", "removed");
        assert_eq!(find("steps.n0", "added").after, Some(json!("steps[0]")));
        let moved = find("steps.s1", "moved");
        assert_eq!(
            (moved.before.clone(), moved.after.clone()),
            (Some(json!("steps[0]")), Some(json!("steps[2]"))),
            "s1 went from first to last"
        );
        let changed = find("steps.s1.input.message", "changed");
        assert_eq!(changed.before, Some(json!("one (v1)")));
        assert_eq!(changed.after, Some(json!("one (v2)")));
        assert!(
            !changes.iter().any(|c| c.path.starts_with("trigger")),
            "the trigger did not change: {changes:#?}"
        );
        assert!(diff(&before, &before).is_empty(), "no change, no lines");
    }

    #[test]
    fn the_diff_walks_into_the_trigger_and_nested_blocks() {
        let before = Automation::from_value(&json!({
            "name": "Hook",
            "trigger": {"type": "webhook", "params": [{"name": "sku", "path": "items.0.sku"}]},
            "steps": [{"name": "c", "type": "condition", "rules": [{"field": "sku", "operator": "eq", "value": "A"}],
                       "then": [log("inner", "x")]}],
        }))
        .expect("parses");
        let after = Automation::from_value(&json!({
            "name": "Hook",
            "trigger": {"type": "webhook", "params": [{"name": "sku", "path": "items.1.sku"}]},
            "steps": [{"name": "c", "type": "condition", "rules": [{"field": "sku", "operator": "eq", "value": "A"}],
                       "else": [log("inner", "x")]}],
        }))
        .expect("parses");
        let changes = diff(&before, &after);
        assert!(
            changes
                .iter()
                .any(|c| c.path == "trigger.params[0].path" && c.change == "changed"),
            "{changes:#?}"
        );
        assert!(
            changes.iter().any(|c| c.path == "steps.inner"
                && c.change == "moved"
                && c.after == Some(json!("steps[0].else[0]"))),
            "{changes:#?}"
        );
    }
}
