//! The desk's pure rules, shared by every store: who is least busy, whether a status
//! belongs to a type, whether a custom field fits it, how tags merge, what a name may be.

use crate::model::{FieldType, Member, TicketType};

/// The longest name of a tenant, group, member, type or status, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// A name is 1 to [`MAX_NAME_CHARS`] characters, not only white space.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err(format!("{what} name must not be empty"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "{what} name is longer than {MAX_NAME_CHARS} characters"
        ));
    }
    Ok(())
}

/// A ticket type's definition is sound: a valid name, statuses and field names each a
/// valid name and listed once.
pub fn check_type_definition(
    name: &str,
    statuses: &[String],
    fields: &[crate::model::FieldDef],
) -> Result<(), String> {
    check_name("ticket type", name)?;
    for (idx, status) in statuses.iter().enumerate() {
        check_name("status", status)?;
        if statuses[..idx].contains(status) {
            return Err(format!(
                "status {status:?} is listed twice in ticket type {name:?}"
            ));
        }
    }
    for (idx, field) in fields.iter().enumerate() {
        check_name("field", &field.name)?;
        if fields[..idx].iter().any(|seen| seen.name == field.name) {
            return Err(format!(
                "field {:?} is listed twice in ticket type {name:?}",
                field.name
            ));
        }
    }
    Ok(())
}

/// A member with their current load, for [`least_busy`].
#[derive(Debug, Clone)]
pub struct Load<'a> {
    pub member: &'a Member,
    /// Open (not closed) tickets assigned to this member.
    pub open: u32,
}

/// The member who should get the next ticket: fewest open tickets; on a tie the lowest
/// open/capacity ratio (a zero capacity counts as full); then a stable order (name, then
/// id) so the same state always picks the same person. `None` for an empty group.
pub fn least_busy<'a>(loads: &[Load<'a>]) -> Option<&'a Member> {
    loads
        .iter()
        .min_by(|a, b| {
            a.open
                .cmp(&b.open)
                .then_with(|| ratio(a).total_cmp(&ratio(b)))
                .then_with(|| a.member.name.cmp(&b.member.name))
                .then_with(|| a.member.id.cmp(&b.member.id))
        })
        .map(|load| load.member)
}

/// Whether a member may take one more ticket: fewer open tickets than their capacity
/// (capacity 0 takes none). Availability is judged apart (`Member::available`).
pub fn has_room(load: &Load<'_>) -> bool {
    load.open < load.member.capacity
}

fn ratio(load: &Load<'_>) -> f64 {
    if load.member.capacity == 0 {
        f64::INFINITY
    } else {
        f64::from(load.open) / f64::from(load.member.capacity)
    }
}

/// Existing tags plus new ones, each once, in first-seen order; blank tags dropped.
pub fn merge_tags(existing: &[String], added: &[String]) -> Vec<String> {
    let mut all: Vec<String> = Vec::with_capacity(existing.len() + added.len());
    for tag in existing.iter().chain(added) {
        let tag = tag.trim();
        if !tag.is_empty() && !all.iter().any(|seen| seen == tag) {
            all.push(tag.to_owned());
        }
    }
    all
}

/// `Ok` when `status` is one of `statuses`, else a message naming the allowed ones.
pub fn check_status(type_name: &str, statuses: &[String], status: &str) -> Result<(), String> {
    if statuses.iter().any(|allowed| allowed == status) {
        Ok(())
    } else {
        Err(format!(
            "status {status:?} is not a status of ticket type {type_name:?} (allowed: {})",
            statuses.join(", ")
        ))
    }
}

/// The JSON kind of a value, as a field's error names it: `string`, `number`, …
pub fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Whether `value` is a value of a field of `field_type`: a JSON string, number or
/// boolean; a date is a string holding a calendar date (`2026-12-03`) or an RFC 3339
/// instant (`2026-12-03T10:00:00Z`).
pub fn fits_field_type(field_type: FieldType, value: &serde_json::Value) -> bool {
    match (field_type, value) {
        (FieldType::String, serde_json::Value::String(_))
        | (FieldType::Number, serde_json::Value::Number(_))
        | (FieldType::Boolean, serde_json::Value::Bool(_)) => true,
        (FieldType::Date, serde_json::Value::String(text)) => {
            chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok()
                || chrono::DateTime::parse_from_rfc3339(text).is_ok()
        }
        _ => false,
    }
}

fn field_type_name(field_type: FieldType) -> &'static str {
    match field_type {
        FieldType::String => "string",
        FieldType::Number => "number",
        FieldType::Boolean => "boolean",
        FieldType::Date => "date",
    }
}

/// `Ok` when the custom field `name` with `value` fits the ticket type: the type declares
/// the field, and the value is of its type. Else the message names the field, the type,
/// the expected and the found kind (or the fields the type has).
pub fn check_field(
    ticket_type: &TicketType,
    name: &str,
    value: &serde_json::Value,
) -> Result<(), String> {
    let Some(def) = ticket_type.fields.iter().find(|def| def.name == name) else {
        let declared: Vec<&str> = ticket_type
            .fields
            .iter()
            .map(|def| def.name.as_str())
            .collect();
        let declared = if declared.is_empty() {
            "it declares no fields".to_owned()
        } else {
            format!("its fields: {}", declared.join(", "))
        };
        return Err(format!(
            "field {name:?} is not a field of ticket type {:?} ({declared})",
            ticket_type.name
        ));
    };
    if fits_field_type(def.field_type, value) {
        return Ok(());
    }
    let expected = field_type_name(def.field_type);
    let found = json_kind(value);
    let hint = if def.field_type == FieldType::Date && found == "string" {
        " that is not a date (YYYY-MM-DD or RFC 3339)"
    } else {
        ""
    };
    Err(format!(
        "field {name:?} of ticket type {:?} expects a {expected}, found a {found}{hint}: {value}",
        ticket_type.name
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{GroupId, MemberId};

    /// A member of a fresh group (the plans' tests use it too).
    pub(crate) fn member(name: &str, capacity: u32) -> Member {
        Member {
            id: MemberId::new(),
            group: GroupId::new(),
            name: name.into(),
            email: None,
            capacity,
            available: true,
        }
    }

    #[test]
    fn fewest_open_tickets_wins() {
        let (eva, jan) = (member("Eva", 5), member("Jan", 5));
        let loads = [
            Load {
                member: &eva,
                open: 2,
            },
            Load {
                member: &jan,
                open: 1,
            },
        ];
        assert_eq!(
            least_busy(&loads).map(|m| &m.name),
            Some(&jan.name),
            "Jan has fewer open tickets"
        );
    }

    #[test]
    fn a_tie_goes_to_the_lowest_open_to_capacity_ratio() {
        let (small, big) = (member("Anna", 2), member("Zdenek", 10));
        let loads = [
            Load {
                member: &small,
                open: 1,
            },
            Load {
                member: &big,
                open: 1,
            },
        ];
        assert_eq!(
            least_busy(&loads).map(|m| &m.name),
            Some(&big.name),
            "1/10 beats 1/2 although Anna sorts first"
        );
    }

    #[test]
    fn a_full_tie_is_broken_by_a_stable_order() {
        let (a, b) = (member("Bara", 3), member("Adam", 3));
        let forward = [
            Load {
                member: &a,
                open: 0,
            },
            Load {
                member: &b,
                open: 0,
            },
        ];
        let backward = [
            Load {
                member: &b,
                open: 0,
            },
            Load {
                member: &a,
                open: 0,
            },
        ];
        assert_eq!(
            least_busy(&forward).map(|m| &m.name),
            Some(&b.name),
            "Adam by name"
        );
        assert_eq!(
            least_busy(&backward).map(|m| &m.name),
            Some(&b.name),
            "whatever the input order"
        );
        assert!(least_busy(&[]).is_none(), "an empty group has nobody");
    }

    #[test]
    fn tags_merge_keeping_existing_ones_once() {
        let merged = merge_tags(
            &["vip".into(), "waiting-to-pack".into()],
            &["waiting-to-pack".into(), " ".into(), "eu".into()],
        );
        assert_eq!(
            merged,
            vec!["vip", "waiting-to-pack", "eu"],
            "existing kept, duplicates and blanks dropped"
        );
    }

    #[test]
    fn a_status_outside_the_type_is_refused_with_the_allowed_ones() {
        let statuses = vec!["waiting-to-pack".to_string(), "shipped".to_string()];
        assert!(
            check_status("order", &statuses, "shipped").is_ok(),
            "a status of the type"
        );
        let err = check_status("order", &statuses, "lost").expect_err("not a status of order");
        assert!(
            err.contains("waiting-to-pack, shipped"),
            "names the allowed statuses: {err}"
        );
    }
}
