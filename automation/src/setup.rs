//! A whole setup at once (`POST /api/apply`, `fronta apply`): groups with members, ticket
//! types and automations, matched by name with what the tenant has.
//!
//! # Contract
//!
//! - [`plan`] decides, from what is wanted and what exists, what each item does:
//!   create what is missing, update what differs, keep what is the same. Nothing is
//!   deleted: what the setup does not name stays as it is.
//! - [`AutomationStore::setup_apply`](crate::store::AutomationStore::setup_apply) carries
//!   a plan out **in one transaction**: every write succeeds, or none is kept. A refusal
//!   names the item it stopped at ([`SetupFailure::at`], `ticketTypes[1]`), and the
//!   database is as it was before the call.
//! - Each write inside is the one the single-item route makes (a type update refuses
//!   removing a status open tickets hold; a create refuses a taken name), so a setup is
//!   checked by exactly the rules of the routes.
//! - Applying the same setup twice changes nothing the second time: every item is
//!   `Unchanged`.
//!
//! The order inside the transaction: ticket types, then groups and members, then
//! automations (they may name both).

use fronta_desk::plan as desk_plan;
use fronta_desk::{
    DeskError, FieldDef, Group, GroupId, Member, MemberId, TenantId, TicketType, TicketTypeId,
};

use crate::model::Automation;
use crate::store::{AutomationId, StoredAutomation};

/// What happened to an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Created,
    Updated,
    Unchanged,
}

impl Action {
    /// The word the answer carries.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Updated => "updated",
            Action::Unchanged => "unchanged",
        }
    }
}

/// A ticket type the setup names.
#[derive(Debug, Clone, PartialEq)]
pub struct WantedType {
    pub name: String,
    pub statuses: Vec<String>,
    pub fields: Vec<FieldDef>,
}

/// A member of a group the setup names; `email` and `capacity` change only when given.
#[derive(Debug, Clone, PartialEq)]
pub struct WantedMember {
    pub name: String,
    pub email: Option<String>,
    pub capacity: Option<u32>,
    /// Whether the member takes new work; `None` keeps it (a new member: available).
    pub available: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WantedGroup {
    pub name: String,
    pub members: Vec<WantedMember>,
}

/// An automation the setup names, checked; `signing_secret` is the one a create stores.
#[derive(Debug, Clone, PartialEq)]
pub struct WantedAutomation {
    pub automation: Automation,
    pub signing_secret: Option<String>,
}

/// What the tenant has, as read before planning.
#[derive(Debug, Clone, Copy)]
pub struct Existing<'a> {
    pub ticket_types: &'a [TicketType],
    /// Each group with its members.
    pub groups: &'a [(Group, Vec<Member>)],
    pub automations: &'a [StoredAutomation],
}

#[derive(Debug, Clone, PartialEq)]
pub enum TypeWrite {
    /// The new type, as `fronta_desk::plan::type_new` made it (its id included).
    Create(TicketType),
    Update {
        id: TicketTypeId,
        statuses: Vec<String>,
        fields: Vec<FieldDef>,
    },
    Keep(TicketType),
}

#[derive(Debug, Clone, PartialEq)]
pub enum GroupWrite {
    /// The new group, as `fronta_desk::plan::group_new` made it (its id included, so its
    /// members can be added by it).
    Create(Group),
    Keep(Group),
}

impl GroupWrite {
    pub fn group(&self) -> &Group {
        match self {
            GroupWrite::Create(group) | GroupWrite::Keep(group) => group,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum MemberWrite {
    Add {
        name: String,
        email: Option<String>,
        capacity: u32,
        available: bool,
    },
    /// Only what differs: `None` keeps the current value.
    Update {
        id: MemberId,
        email: Option<String>,
        capacity: Option<u32>,
        available: Option<bool>,
    },
    Keep(Member),
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupPlan {
    pub group: GroupWrite,
    pub members: Vec<MemberWrite>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AutomationWrite {
    Create(WantedAutomation),
    Update {
        id: AutomationId,
        automation: Automation,
    },
    Keep(Box<StoredAutomation>),
}

/// Every write of a setup, in the order they are made.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SetupPlan {
    pub ticket_types: Vec<TypeWrite>,
    pub groups: Vec<GroupPlan>,
    pub automations: Vec<AutomationWrite>,
}

/// What a carried-out plan answers, item by item in the plan's order.
#[derive(Debug, Clone, PartialEq)]
pub struct SetupApplied {
    pub ticket_types: Vec<(TicketType, Action)>,
    pub groups: Vec<AppliedGroup>,
    pub automations: Vec<(StoredAutomation, Action)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AppliedGroup {
    pub group: Group,
    pub action: Action,
    pub members: Vec<(MemberId, String, Action)>,
}

/// A refused setup: the item it stopped at (`ticketTypes[1]`, `groups[0].members[2]`,
/// `automations[3]`; `None` when no item is to blame, such as storage down) and why.
/// Nothing of the setup was written.
#[derive(Debug, Clone, PartialEq)]
pub struct SetupFailure {
    pub at: Option<String>,
    pub error: DeskError,
}

impl SetupFailure {
    /// The failure of the item at `at`.
    pub fn at(at: impl Into<String>) -> impl FnOnce(DeskError) -> SetupFailure {
        let at = at.into();
        move |error| SetupFailure {
            at: Some(at),
            error,
        }
    }
}

impl From<DeskError> for SetupFailure {
    fn from(error: DeskError) -> Self {
        SetupFailure { at: None, error }
    }
}

/// The path of the `index`th ticket type, group, member or automation in a setup.
pub fn path_of_type(index: usize) -> String {
    format!("ticketTypes[{index}]")
}

pub fn path_of_group(index: usize) -> String {
    format!("groups[{index}]")
}

pub fn path_of_member(group: usize, index: usize) -> String {
    format!("groups[{group}].members[{index}]")
}

pub fn path_of_automation(index: usize) -> String {
    format!("automations[{index}]")
}

/// The plan of a setup for `tenant`: each wanted item matched by name with what exists;
/// new types and groups are made (and checked) here, ids included. A new member without
/// a capacity gets `default_capacity`. A new type or group whose definition is refused
/// fails the plan at its path.
pub fn plan(
    tenant: TenantId,
    ticket_types: Vec<WantedType>,
    groups: Vec<WantedGroup>,
    automations: Vec<WantedAutomation>,
    existing: Existing<'_>,
    default_capacity: u32,
) -> Result<SetupPlan, SetupFailure> {
    let mut planned_types = Vec::with_capacity(ticket_types.len());
    for (index, wanted) in ticket_types.into_iter().enumerate() {
        let found = existing.ticket_types.iter().find(|t| t.name == wanted.name);
        planned_types.push(match found {
            Some(found) if found.statuses == wanted.statuses && found.fields == wanted.fields => {
                TypeWrite::Keep(found.clone())
            }
            Some(found) => TypeWrite::Update {
                id: found.id,
                statuses: wanted.statuses,
                fields: wanted.fields,
            },
            None => TypeWrite::Create(
                desk_plan::type_new(tenant, &wanted.name, &wanted.statuses, &wanted.fields)
                    .map_err(SetupFailure::at(path_of_type(index)))?,
            ),
        });
    }
    let mut planned_groups = Vec::with_capacity(groups.len());
    for (index, wanted) in groups.into_iter().enumerate() {
        let found = existing.groups.iter().find(|(g, _)| g.name == wanted.name);
        let current: &[Member] = found.map_or(&[], |(_, members)| members.as_slice());
        let members = wanted
            .members
            .into_iter()
            .map(|person| member_write(person, current, default_capacity))
            .collect();
        planned_groups.push(GroupPlan {
            group: match found {
                Some((group, _)) => GroupWrite::Keep(group.clone()),
                None => GroupWrite::Create(
                    desk_plan::group_new(tenant, &wanted.name)
                        .map_err(SetupFailure::at(path_of_group(index)))?,
                ),
            },
            members,
        });
    }
    let automations = automations
        .into_iter()
        .map(|wanted| {
            match existing
                .automations
                .iter()
                .find(|stored| stored.automation.name == wanted.automation.name)
            {
                Some(stored) if stored.automation == wanted.automation => {
                    AutomationWrite::Keep(Box::new(stored.clone()))
                }
                Some(stored) => AutomationWrite::Update {
                    id: stored.id,
                    automation: wanted.automation,
                },
                None => AutomationWrite::Create(wanted),
            }
        })
        .collect();
    Ok(SetupPlan {
        ticket_types: planned_types,
        groups: planned_groups,
        automations,
    })
}

/// One write of a setup, as a store carries it out: each is the write a single route
/// makes (`Keep` items are not writes).
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    CreateType(TicketType),
    UpdateType {
        id: TicketTypeId,
        statuses: Vec<String>,
        fields: Vec<FieldDef>,
    },
    CreateGroup(Group),
    AddMember {
        group: GroupId,
        name: String,
        email: Option<String>,
        capacity: u32,
        available: bool,
    },
    /// `email`, `capacity`, `available`: `None` keeps the current value.
    UpdateMember {
        id: MemberId,
        email: Option<String>,
        capacity: Option<u32>,
        available: Option<bool>,
    },
    CreateAutomation(WantedAutomation),
    UpdateAutomation {
        id: AutomationId,
        automation: Automation,
    },
}

/// What a [`Write`] gave back.
#[derive(Debug, Clone, PartialEq)]
pub enum Written {
    Type(TicketType),
    Group(Group),
    Member(Member),
    Automation(StoredAutomation),
}

impl SetupPlan {
    /// Every write of the plan, in order, each with the path of its item: the one list a
    /// store walks inside its transaction.
    pub fn writes(&self) -> Vec<(String, Write)> {
        let mut writes = Vec::new();
        for (index, write) in self.ticket_types.iter().enumerate() {
            let write = match write {
                TypeWrite::Keep(_) => continue,
                TypeWrite::Create(new) => Write::CreateType(new.clone()),
                TypeWrite::Update {
                    id,
                    statuses,
                    fields,
                } => Write::UpdateType {
                    id: *id,
                    statuses: statuses.clone(),
                    fields: fields.clone(),
                },
            };
            writes.push((path_of_type(index), write));
        }
        for (index, group) in self.groups.iter().enumerate() {
            if let GroupWrite::Create(new) = &group.group {
                writes.push((path_of_group(index), Write::CreateGroup(new.clone())));
            }
            for (member_index, member) in group.members.iter().enumerate() {
                let write = match member {
                    MemberWrite::Keep(_) => continue,
                    MemberWrite::Add {
                        name,
                        email,
                        capacity,
                        available,
                    } => Write::AddMember {
                        group: group.group.group().id,
                        name: name.clone(),
                        email: email.clone(),
                        capacity: *capacity,
                        available: *available,
                    },
                    MemberWrite::Update {
                        id,
                        email,
                        capacity,
                        available,
                    } => Write::UpdateMember {
                        id: *id,
                        email: email.clone(),
                        capacity: *capacity,
                        available: *available,
                    },
                };
                writes.push((path_of_member(index, member_index), write));
            }
        }
        for (index, write) in self.automations.iter().enumerate() {
            let write = match write {
                AutomationWrite::Keep(_) => continue,
                AutomationWrite::Create(wanted) => Write::CreateAutomation(wanted.clone()),
                AutomationWrite::Update { id, automation } => Write::UpdateAutomation {
                    id: *id,
                    automation: automation.clone(),
                },
            };
            writes.push((path_of_automation(index), write));
        }
        writes
    }

    /// The answer of the carried-out plan: `written` holds what each of [`Self::writes`]
    /// gave, in order.
    pub fn applied(self, written: Vec<Written>) -> SetupApplied {
        let mut written = written.into_iter();
        let mut next = || written.next();
        let mut applied = SetupApplied {
            ticket_types: Vec::with_capacity(self.ticket_types.len()),
            groups: Vec::with_capacity(self.groups.len()),
            automations: Vec::with_capacity(self.automations.len()),
        };
        for write in self.ticket_types {
            applied.ticket_types.push(match write {
                TypeWrite::Keep(found) => (found, Action::Unchanged),
                TypeWrite::Create(new) => match next() {
                    Some(Written::Type(found)) => (found, Action::Created),
                    _ => (new, Action::Created),
                },
                TypeWrite::Update { .. } => match next() {
                    Some(Written::Type(found)) => (found, Action::Updated),
                    other => unreachable_written("a ticket type", other),
                },
            });
        }
        for plan in self.groups {
            let (group, action) = match plan.group {
                GroupWrite::Keep(group) => (group, Action::Unchanged),
                GroupWrite::Create(new) => match next() {
                    Some(Written::Group(found)) => (found, Action::Created),
                    _ => (new, Action::Created),
                },
            };
            let members = plan
                .members
                .into_iter()
                .map(|member| {
                    let action = match member {
                        MemberWrite::Keep(found) => {
                            return (found.id, found.name, Action::Unchanged);
                        }
                        MemberWrite::Add { .. } => Action::Created,
                        MemberWrite::Update { .. } => Action::Updated,
                    };
                    match next() {
                        Some(Written::Member(found)) => (found.id, found.name, action),
                        other => unreachable_written("a member", other),
                    }
                })
                .collect();
            applied.groups.push(AppliedGroup {
                group,
                action,
                members,
            });
        }
        for write in self.automations {
            let action = match write {
                AutomationWrite::Keep(stored) => {
                    applied.automations.push((*stored, Action::Unchanged));
                    continue;
                }
                AutomationWrite::Create(_) => Action::Created,
                AutomationWrite::Update { .. } => Action::Updated,
            };
            match next() {
                Some(Written::Automation(stored)) => applied.automations.push((stored, action)),
                other => unreachable_written("an automation", other),
            }
        }
        applied
    }
}

/// A store answered a write with the wrong kind of row: a bug in the store's walk.
fn unreachable_written(what: &str, got: Option<Written>) -> ! {
    panic!(
        "the setup's write of {what} answered {got:?}: the store must answer each write in order"
    )
}

fn member_write(person: WantedMember, current: &[Member], default_capacity: u32) -> MemberWrite {
    let Some(member) = current.iter().find(|m| m.name == person.name) else {
        return MemberWrite::Add {
            capacity: person.capacity.unwrap_or(default_capacity),
            available: person.available.unwrap_or(true),
            name: person.name,
            email: person.email,
        };
    };
    let email = person.email.filter(|e| member.email.as_deref() != Some(e));
    let capacity = person.capacity.filter(|c| *c != member.capacity);
    let available = person.available.filter(|a| *a != member.available);
    if email.is_none() && capacity.is_none() && available.is_none() {
        MemberWrite::Keep(member.clone())
    } else {
        MemberWrite::Update {
            id: member.id,
            email,
            capacity,
            available,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fronta_desk::FieldType;

    fn member(group: GroupId, name: &str, capacity: u32) -> Member {
        Member {
            id: MemberId::new(),
            group,
            name: name.into(),
            email: None,
            capacity,
            available: true,
        }
    }

    #[test]
    fn what_exists_and_is_the_same_is_kept_what_differs_updated_what_is_missing_created() {
        let tenant = TenantId::new();
        let order = TicketType {
            id: TicketTypeId::new(),
            tenant,
            name: "order".into(),
            statuses: vec!["new".into()],
            fields: vec![],
        };
        let error = TicketType {
            name: "error".into(),
            id: TicketTypeId::new(),
            ..order.clone()
        };
        let warehouse = Group {
            id: GroupId::new(),
            tenant,
            name: "warehouse".into(),
        };
        let eva = member(warehouse.id, "Eva", 5);
        let jan = member(warehouse.id, "Jan", 5);
        let groups = vec![(warehouse.clone(), vec![eva.clone(), jan.clone()])];
        let existing = Existing {
            ticket_types: &[order.clone(), error.clone()],
            groups: &groups,
            automations: &[],
        };
        let wanted_types = vec![
            WantedType {
                name: "order".into(),
                statuses: vec!["new".into()],
                fields: vec![],
            },
            WantedType {
                name: "error".into(),
                statuses: vec!["new".into(), "fixed".into()],
                fields: vec![FieldDef {
                    name: "code".into(),
                    field_type: FieldType::String,
                }],
            },
            WantedType {
                name: "return".into(),
                statuses: vec![],
                fields: vec![],
            },
        ];
        let wanted_groups = vec![
            WantedGroup {
                name: "warehouse".into(),
                members: vec![
                    WantedMember {
                        name: "Eva".into(),
                        email: None,
                        capacity: Some(5),
                        available: None,
                    },
                    WantedMember {
                        name: "Jan".into(),
                        email: Some("jan@acme.test".into()),
                        capacity: Some(5),
                        available: None,
                    },
                    WantedMember {
                        name: "Petr".into(),
                        email: None,
                        capacity: None,
                        available: None,
                    },
                ],
            },
            WantedGroup {
                name: "IT".into(),
                members: vec![],
            },
        ];
        let plan =
            plan(tenant, wanted_types, wanted_groups, vec![], existing, 10).expect("a sound setup");
        assert_eq!(plan.ticket_types[0], TypeWrite::Keep(order), "same: kept");
        assert!(
            matches!(&plan.ticket_types[1], TypeWrite::Update { id, statuses, .. }
                if *id == error.id && statuses.len() == 2),
            "differs: updated by id: {:?}",
            plan.ticket_types[1]
        );
        assert!(
            matches!(&plan.ticket_types[2], TypeWrite::Create(t) if t.name == "return" && t.tenant == tenant),
            "missing: created"
        );
        assert_eq!(plan.groups[0].group, GroupWrite::Keep(warehouse));
        assert_eq!(plan.groups[0].members[0], MemberWrite::Keep(eva));
        assert_eq!(
            plan.groups[0].members[1],
            MemberWrite::Update {
                id: jan.id,
                email: Some("jan@acme.test".into()),
                capacity: None,
                available: None,
            },
            "only what differs"
        );
        assert_eq!(
            plan.groups[0].members[2],
            MemberWrite::Add {
                name: "Petr".into(),
                email: None,
                capacity: 10,
                available: true,
            },
            "a new member gets the default capacity"
        );
        assert!(
            matches!(&plan.groups[1].group, GroupWrite::Create(g) if g.name == "IT"),
            "a new group"
        );
        let paths: Vec<String> = plan.writes().into_iter().map(|(at, _)| at).collect();
        assert_eq!(
            paths,
            [
                "ticketTypes[1]",
                "ticketTypes[2]",
                "groups[0].members[1]",
                "groups[0].members[2]",
                "groups[1]"
            ],
            "keeps are not writes; each write names its item"
        );
        let it = plan.groups[1].group.group().id;
        assert!(
            plan.writes()
                .iter()
                .all(|(_, write)| !matches!(write, Write::AddMember { group, .. } if *group == it)),
            "IT has no members to add"
        );
    }

    #[test]
    fn a_new_group_with_a_blank_name_fails_the_plan_at_its_path() {
        let tenant = TenantId::new();
        let existing = Existing {
            ticket_types: &[],
            groups: &[],
            automations: &[],
        };
        let refused = plan(
            tenant,
            vec![],
            vec![WantedGroup {
                name: "  ".into(),
                members: vec![],
            }],
            vec![],
            existing,
            10,
        )
        .expect_err("a blank name");
        assert_eq!(refused.at.as_deref(), Some("groups[0]"));
    }
}
