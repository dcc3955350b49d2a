//! References by id: the groups, ticket types and statuses an automation names.
//!
//! A definition names things as people write them (`"group": "support"`,
//! `ticket.type eq "it-problem"`). When a version is saved, every such literal name is
//! bound to the id of what it names ([`bind`]); the version keeps those [`Ref`]s beside
//! its definition. From then on the id is what counts:
//!
//! - Renaming a group or a ticket type rewrites the names in the current definitions that
//!   are bound to it ([`rename`]): the automation keeps working, and what users read shows
//!   the current name. No version is made — the definition means the same thing.
//! - A run of an older version reads that version's names through its refs
//!   ([`resolve`]): it finds the group by id under whatever name it has now.
//! - A group, ticket type or status that a current version names cannot be removed
//!   ([`users`]; the stores answer `DeskError::InUse`).
//! - The content hash of a version is taken over the definition with every bound name
//!   replaced by its id ([`canonical`]), so saving back a definition that only shows a
//!   newer name makes no new version.
//!
//! A status is named within its ticket type: its ref carries the type's id when the step
//! says which type (`ticket/upsert` with a literal `type`), and is bound by name alone
//! otherwise. Names that are templates (`{{_body.group}}`) are not references: they are
//! looked up when the step runs. A name that matches nothing when saved stays unbound and
//! is looked up by name at run time, as before.
//!
//! What is a reference (the sites): the `type`, `status` and `group` inputs of the ticket
//! ops, and the literal `value` of a condition rule over `ticket.type`, `ticket.status`
//! or `ticket.group` with `eq` or `neq`.

use std::collections::BTreeMap;

use fronta_desk::{Group, TicketType, UsedBy};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::catalogue::Op;
use crate::model::{Automation, Operator, Step};
use crate::template;

/// What a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    Group,
    TicketType,
    Status,
}

impl Kind {
    /// The word messages use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Group => "group",
            Kind::TicketType => "ticket type",
            Kind::Status => "status",
        }
    }
}

/// One bound (or unbound) name of a saved version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ref {
    /// Where in the definition: `steps[1].then[0].input.group`.
    pub path: String,
    /// The step that names it.
    pub step: String,
    pub kind: Kind,
    /// The name when the version was saved.
    pub name: String,
    /// The group's or ticket type's id; for a status, its ticket type's id when known.
    /// `None`: the name matched nothing when saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Uuid>,
}

/// A site of the definition: where a name is, as found by the walk.
struct Site<'a> {
    path: String,
    step: &'a str,
    kind: Kind,
    /// For a status: the literal type the same step names, if any.
    ticket_type: Option<String>,
}

/// Walks every site of `automation`, handing each its literal name to look at or change.
fn walk(steps: &mut [Step], prefix: &str, visit: &mut dyn FnMut(Site<'_>, &mut Value)) {
    for (index, step) in steps.iter_mut().enumerate() {
        let path = format!("{prefix}[{index}]");
        match step {
            Step::Action(action) => {
                let names: &[(&str, Kind)] = match action.op {
                    Op::TicketUpsert => &[
                        ("type", Kind::TicketType),
                        ("status", Kind::Status),
                        ("group", Kind::Group),
                    ],
                    Op::TicketSetType => &[("type", Kind::TicketType)],
                    Op::TicketSetStatus => &[("status", Kind::Status)],
                    Op::TicketAssignLeastBusy | Op::TicketAssign => &[("group", Kind::Group)],
                    _ => &[],
                };
                let ticket_type = match action.op {
                    Op::TicketUpsert => action
                        .input
                        .get("type")
                        .and_then(literal)
                        .map(str::to_owned),
                    _ => None,
                };
                let step_name = action.name.clone();
                for (key, kind) in names {
                    if let Some(value) = action.input.get_mut(*key)
                        && literal(value).is_some()
                    {
                        visit(
                            Site {
                                path: format!("{path}.input.{key}"),
                                step: &step_name,
                                kind: *kind,
                                ticket_type: ticket_type.clone().filter(|_| *kind == Kind::Status),
                            },
                            value,
                        );
                    }
                }
            }
            Step::Condition(condition) => {
                let step_name = condition.name.clone();
                for (rule_index, rule) in condition.rules.iter_mut().enumerate() {
                    let kind = match rule.field.as_deref().or(rule.field_id.as_deref()) {
                        Some("ticket.type") => Kind::TicketType,
                        Some("ticket.status") => Kind::Status,
                        Some("ticket.group") => Kind::Group,
                        _ => continue,
                    };
                    if rule.step.is_some() || !matches!(rule.operator, Operator::Eq | Operator::Neq)
                    {
                        continue;
                    }
                    if let Some(value) = rule.value.as_mut()
                        && literal(value).is_some()
                    {
                        visit(
                            Site {
                                path: format!("{path}.rules[{rule_index}].value"),
                                step: &step_name,
                                kind,
                                ticket_type: None,
                            },
                            value,
                        );
                    }
                }
                walk(&mut condition.then_steps, &format!("{path}.then"), visit);
                walk(&mut condition.else_steps, &format!("{path}.else"), visit);
            }
            Step::ForEach(each) => walk(&mut each.steps, &format!("{path}.steps"), visit),
        }
    }
}

fn literal(value: &Value) -> Option<&str> {
    value.as_str().filter(|text| template::is_literal(text))
}

/// Binds every name of `automation` to what it names among the tenant's `groups` and
/// `types` (by name, as they are now).
pub fn bind(automation: &Automation, groups: &[Group], types: &[TicketType]) -> Vec<Ref> {
    let mut steps = automation.steps.clone();
    let mut refs = Vec::new();
    walk(&mut steps, "steps", &mut |site, value| {
        let name = literal(value).unwrap_or_default().to_owned();
        let id = match site.kind {
            Kind::Group => groups.iter().find(|g| g.name == name).map(|g| g.id.0),
            Kind::TicketType => types.iter().find(|t| t.name == name).map(|t| t.id.0),
            Kind::Status => match &site.ticket_type {
                Some(type_name) => types
                    .iter()
                    .find(|t| &t.name == type_name && t.statuses.contains(&name))
                    .map(|t| t.id.0),
                None => None,
            },
        };
        refs.push(Ref {
            path: site.path,
            step: site.step.to_owned(),
            kind: site.kind,
            name,
            id,
        });
    });
    refs
}

/// The definition with the names at `refs` set by `name_of` (`None` keeps the name):
/// the one walk behind [`rename`], [`resolve`] and [`canonical`].
fn rewrite(
    automation: &Automation,
    refs: &[Ref],
    mut name_of: impl FnMut(&Ref) -> Option<String>,
) -> Automation {
    let by_path: BTreeMap<&str, &Ref> = refs.iter().map(|r| (r.path.as_str(), r)).collect();
    let mut rewritten = automation.clone();
    walk(&mut rewritten.steps, "steps", &mut |site, value| {
        if let Some(found) = by_path.get(site.path.as_str())
            && found.kind == site.kind
            && let Some(name) = name_of(found)
        {
            *value = Value::String(name);
        }
    });
    rewritten
}

/// After the group or ticket type `id` was renamed to `new_name`: the current definition
/// showing the new name, and its refs, or `None` when it does not name it.
pub fn rename(
    automation: &Automation,
    refs: &[Ref],
    kind: Kind,
    id: Uuid,
    new_name: &str,
) -> Option<(Automation, Vec<Ref>)> {
    let hit = |r: &Ref| r.kind == kind && r.id == Some(id);
    if !refs.iter().any(hit) {
        return None;
    }
    let renamed = rewrite(automation, refs, |r| hit(r).then(|| new_name.to_owned()));
    let refs = refs
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if hit(&r) {
                r.name = new_name.to_owned();
            }
            r
        })
        .collect();
    Some((renamed, refs))
}

/// An older version's definition with the current names of what its refs are bound to
/// (`current` answers the name an id has now, `None` when it is gone: the saved name
/// stays, and the step that uses it fails naming it).
pub fn resolve(
    automation: &Automation,
    refs: &[Ref],
    current: impl Fn(Kind, Uuid) -> Option<String>,
) -> Automation {
    rewrite(automation, refs, |r| match (r.kind, r.id) {
        (Kind::Group | Kind::TicketType, Some(id)) => current(r.kind, id),
        _ => None,
    })
}

/// The definition as the content hash sees it: every bound group and ticket type name
/// replaced by its id (`#<uuid>`), so a rename does not change what a version is.
pub fn canonical(automation: &Automation, refs: &[Ref]) -> Automation {
    rewrite(automation, refs, |r| match (r.kind, r.id) {
        (Kind::Group | Kind::TicketType, Some(id)) => Some(format!("#{id}")),
        _ => None,
    })
}

/// What is to be removed, for [`users`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    Group(Uuid),
    /// A ticket type, with every status of it.
    TicketType(Uuid),
    /// One status of a ticket type (its id and its name), and whether another type of
    /// the tenant also has a status of that name (then a ref by name alone is not
    /// counted: it still names something).
    Status {
        ticket_type: Uuid,
        name: &'a str,
        elsewhere: bool,
    },
}

impl<'a> Target<'a> {
    /// The status `name` of `ticket_type`, with whether another of the tenant's `types`
    /// has a status of that name too.
    pub fn status(ticket_type: &TicketType, name: &'a str, types: &[TicketType]) -> Self {
        Target::Status {
            ticket_type: ticket_type.id.0,
            name,
            elsewhere: types.iter().any(|other| {
                other.id != ticket_type.id && other.statuses.iter().any(|s| s == name)
            }),
        }
    }
}

/// The automations (`(id, name, refs of the current version)`) that use `target`, each
/// with the steps that name it, in the order given.
pub fn users(automations: &[(String, String, Vec<Ref>)], target: Target<'_>) -> Vec<UsedBy> {
    let mut used = Vec::new();
    for (id, name, refs) in automations {
        let mut steps: Vec<String> = Vec::new();
        for r in refs {
            let uses = match target {
                Target::Group(group) => r.kind == Kind::Group && r.id == Some(group),
                Target::TicketType(ticket_type) => {
                    matches!(r.kind, Kind::TicketType | Kind::Status) && r.id == Some(ticket_type)
                }
                Target::Status {
                    ticket_type,
                    name: status,
                    elsewhere,
                } => {
                    r.kind == Kind::Status
                        && r.name == status
                        && (r.id == Some(ticket_type) || (r.id.is_none() && !elsewhere))
                }
            };
            if uses && !steps.contains(&r.step) {
                steps.push(r.step.clone());
            }
        }
        if !steps.is_empty() {
            used.push(UsedBy::Automation {
                id: id.clone(),
                name: name.clone(),
                steps,
            });
        }
    }
    used
}

/// The refs column as stored (`[]` when absent or unreadable).
pub fn parse(text: Option<&str>) -> Vec<Ref> {
    text.and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fronta_desk::{GroupId, TenantId, TicketTypeId};
    use serde_json::json;

    fn automation(value: Value) -> Automation {
        Automation::from_value(&value).expect("parses")
    }

    fn desk() -> (Vec<Group>, Vec<TicketType>) {
        let tenant = TenantId::new();
        let groups = vec![Group {
            id: GroupId::new(),
            tenant,
            name: "support".into(),
        }];
        let types = vec![TicketType {
            id: TicketTypeId::new(),
            tenant,
            name: "it-problem".into(),
            statuses: vec!["new".into(), "solving".into()],
            fields: vec![],
        }];
        (groups, types)
    }

    fn routing() -> Automation {
        automation(json!({
            "name": "Route", "trigger": {"type": "event", "event": "ticket.created"},
            "steps": [
                {"name": "c", "type": "condition",
                 "rules": [{"field": "ticket.type", "operator": "eq", "value": "it-problem"}],
                 "then": [
                    {"name": "assign", "op": "ticket/assign-least-busy",
                     "input": {"ticket": "{{ticket.id}}", "group": "support"}},
                    {"name": "status", "op": "ticket/set-status",
                     "input": {"ticket": "{{ticket.id}}", "status": "solving"}}
                 ]},
                {"name": "make", "op": "ticket/upsert",
                 "input": {"externalId": "x", "type": "it-problem", "status": "new",
                           "group": "{{_body.group}}"}}
            ]
        }))
    }

    #[test]
    fn every_literal_name_is_bound_and_templates_are_not_references() {
        let (groups, types) = desk();
        let refs = bind(&routing(), &groups, &types);
        let seen: Vec<(&str, Kind, &str, Option<Uuid>)> = refs
            .iter()
            .map(|r| (r.path.as_str(), r.kind, r.name.as_str(), r.id))
            .collect();
        assert_eq!(
            seen,
            vec![
                (
                    "steps[0].rules[0].value",
                    Kind::TicketType,
                    "it-problem",
                    Some(types[0].id.0)
                ),
                (
                    "steps[0].then[0].input.group",
                    Kind::Group,
                    "support",
                    Some(groups[0].id.0)
                ),
                (
                    "steps[0].then[1].input.status",
                    Kind::Status,
                    "solving",
                    None
                ),
                (
                    "steps[1].input.type",
                    Kind::TicketType,
                    "it-problem",
                    Some(types[0].id.0)
                ),
                (
                    "steps[1].input.status",
                    Kind::Status,
                    "new",
                    Some(types[0].id.0)
                ),
            ]
        );
    }

    #[test]
    fn a_rename_rewrites_the_bound_names_only() {
        let (groups, types) = desk();
        let original = routing();
        let refs = bind(&original, &groups, &types);
        let (renamed, new_refs) = rename(&original, &refs, Kind::TicketType, types[0].id.0, "itp")
            .expect("it names the type");
        let text = serde_json::to_string(&renamed).expect("serializes");
        assert!(!text.contains("it-problem"), "{text}");
        assert_eq!(text.matches("\"itp\"").count(), 2, "{text}");
        assert!(
            text.contains("\"support\""),
            "the group is untouched: {text}"
        );
        assert!(new_refs.iter().any(|r| r.name == "itp"), "refs follow");
        assert_eq!(
            rename(&original, &refs, Kind::Group, Uuid::now_v7(), "x"),
            None,
            "an id it does not name"
        );
        assert_eq!(
            canonical(&renamed, &new_refs),
            canonical(&original, &refs),
            "a rename does not change what the version is"
        );
    }

    #[test]
    fn an_old_version_reads_current_names_and_keeps_a_missing_ones_name() {
        let (groups, types) = desk();
        let original = routing();
        let refs = bind(&original, &groups, &types);
        let group = groups[0].id.0;
        let resolved = resolve(&original, &refs, |kind, id| {
            (kind == Kind::Group && id == group).then(|| "helpdesk".to_owned())
        });
        let text = serde_json::to_string(&resolved).expect("serializes");
        assert!(text.contains("\"helpdesk\""), "{text}");
        assert!(
            text.contains("\"it-problem\""),
            "a gone type keeps its name: {text}"
        );
    }

    #[test]
    fn users_name_each_automation_and_its_steps() {
        let (groups, types) = desk();
        let refs = bind(&routing(), &groups, &types);
        let all = vec![("a1".to_owned(), "Route".to_owned(), refs)];
        assert_eq!(
            users(&all, Target::Group(groups[0].id.0)),
            vec![UsedBy::Automation {
                id: "a1".into(),
                name: "Route".into(),
                steps: vec!["assign".into()],
            }]
        );
        assert_eq!(
            users(&all, Target::TicketType(types[0].id.0)),
            vec![UsedBy::Automation {
                id: "a1".into(),
                name: "Route".into(),
                steps: vec!["c".into(), "make".into()],
            }]
        );
        let status = |name, elsewhere| Target::Status {
            ticket_type: types[0].id.0,
            name,
            elsewhere,
        };
        assert_eq!(
            users(&all, status("solving", false)).len(),
            1,
            "a status named without a type"
        );
        assert!(
            users(&all, status("solving", true)).is_empty(),
            "another type still has it"
        );
        assert_eq!(
            users(&all, status("new", true)).len(),
            1,
            "bound to the type"
        );
    }
}
