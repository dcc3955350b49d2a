//! `POST /api/apply`: a whole setup at once — groups with members, ticket types,
//! automations — idempotent by names: what exists (same name) is updated, what is missing
//! is created, nothing is duplicated, and applying the same setup twice changes nothing
//! the second time.
//!
//! Everything is checked before anything is written: every automation is parsed and
//! validated against the tenant's ticket types *and* the setup's; a problem anywhere
//! answers 422 `invalid_setup` with every problem at its path (`automations[1].steps[0]…`).
//!
//! Decisions where API.md is silent:
//! - Nothing is deleted: groups, members, types and automations missing from the setup
//!   stay as they are.
//! - A member is matched by name within its group; `email` and `capacity` are updated
//!   when given (`capacity` defaults to the route's default for new members).
//! - An existing ticket type with other statuses or fields is updated to the setup's
//!   (`ticket_type_update`); automations are validated against the updated statuses.
//!   The store refuses removing a status open tickets still hold (422 `invalid_setup`
//!   naming it at `ticketTypes[i]`); types are written first, so such a refusal comes
//!   before groups and automations are touched.
//! - The writes are not one transaction (the ports have none across resources); after a
//!   failure midway, applying the same setup again finishes the job.
//!
//! - An automation's `enabled` changes only when the setup names it: a paused automation
//!   stays paused (its item says `"note": "kept paused"`), as with `PUT`.
//!
//! The answer lists what happened to each item: `created`, `updated` or `unchanged`;
//! an automation's item carries its `currentVersion`.

use std::collections::{HashMap, HashSet};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use fronta_automation::store::StoredAutomation;
use fronta_automation::{Automation, Problem, ValidationContext};
use fronta_desk::{DeskError, Group, TenantId};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::App;
use crate::auth::TenantAuth;
use crate::base_url::{base_url, webhook_url};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::routes::automations::{
    SecretRequest, check, keep_enabled, secret_change_problem, secret_for_create, split_body,
};
use crate::routes::desk::{DEFAULT_MEMBER_CAPACITY, NewTicketType};
use fronta_automation::versions::BY_TENANT;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Setup {
    #[serde(default)]
    groups: Vec<SetupGroup>,
    #[serde(default)]
    ticket_types: Vec<NewTicketType>,
    #[serde(default)]
    automations: Vec<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupGroup {
    name: String,
    #[serde(default)]
    members: Vec<SetupMember>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupMember {
    name: String,
    email: Option<String>,
    capacity: Option<u32>,
}

/// One automation of the setup, checked and ready to write.
struct Planned {
    automation: Automation,
    secret: SecretRequest,
    existing: Option<StoredAutomation>,
}

fn duplicates<'a>(names: impl Iterator<Item = &'a str>, list: &str, problems: &mut Vec<Problem>) {
    let mut seen = HashSet::new();
    for (index, name) in names.enumerate() {
        if !seen.insert(name) {
            problems.push(Problem::new(
                format!("{list}[{index}].name"),
                format!("\"{name}\" appears twice in {list}"),
            ));
        }
    }
}

pub async fn apply(
    TenantAuth(tenant): TenantAuth,
    State(app): State<App>,
    headers: HeaderMap,
    JsonBody(setup): JsonBody<Setup>,
) -> Result<Json<Value>, ApiError> {
    let desk = app.desk();
    let mut problems = Vec::new();
    duplicates(
        setup.groups.iter().map(|g| g.name.as_str()),
        "groups",
        &mut problems,
    );
    duplicates(
        setup.ticket_types.iter().map(|t| t.name.as_str()),
        "ticketTypes",
        &mut problems,
    );

    // Ticket types: the tenant's, then the setup's (new ones, or identical to what exists).
    let existing_types = desk.ticket_type_list(tenant.id).await?;
    let mut statuses: HashMap<String, Vec<String>> = existing_types
        .iter()
        .map(|t| (t.name.clone(), t.statuses.clone()))
        .collect();
    for wanted in &setup.ticket_types {
        statuses.insert(wanted.name.clone(), wanted.statuses.clone());
    }
    let context = ValidationContext {
        ticket_types: statuses,
    };

    // Automations: checked, and matched by name with what exists.
    let existing_automations = app.automations().automation_list(tenant.id).await?;
    let mut planned = Vec::with_capacity(setup.automations.len());
    let mut names = HashSet::new();
    for (index, body) in setup.automations.into_iter().enumerate() {
        let prefix = format!("automations[{index}]");
        let (value, secret) = split_body(body, &prefix, &mut problems);
        let Some(mut automation) = check(&value, &context, &prefix, &mut problems) else {
            continue;
        };
        if !names.insert(automation.name.clone()) {
            problems.push(Problem::new(
                format!("{prefix}.name"),
                format!("\"{}\" appears twice in automations", automation.name),
            ));
            continue;
        }
        let existing = existing_automations
            .iter()
            .find(|stored| stored.automation.name == automation.name)
            .cloned();
        if let Some(stored) = &existing {
            problems.extend(secret_change_problem(stored, &secret, &prefix));
            keep_enabled(&value, &mut automation, stored);
        }
        planned.push(Planned {
            automation,
            secret,
            existing,
        });
    }
    if !problems.is_empty() {
        return Err(ApiError::InvalidSetup(problems));
    }

    // Write: types (an update the store refuses stops here, before anything else),
    // groups and members, then automations (they may name both).
    let mut types = Vec::new();
    for (index, wanted) in setup.ticket_types.iter().enumerate() {
        let (id, action) = match existing_types.iter().find(|t| t.name == wanted.name) {
            Some(found) if found.statuses == wanted.statuses && found.fields == wanted.fields => {
                (found.id, "unchanged")
            }
            Some(found) => {
                let updated = desk
                    .ticket_type_update(
                        tenant.id,
                        found.id,
                        None,
                        Some(&wanted.statuses),
                        Some(&wanted.fields),
                    )
                    .await
                    .map_err(|err| match err {
                        DeskError::Invalid(message) => ApiError::InvalidSetup(vec![Problem::new(
                            format!("ticketTypes[{index}]"),
                            message,
                        )]),
                        other => ApiError::desk(other, "ticket type"),
                    })?;
                (updated.id, "updated")
            }
            None => {
                let created = desk
                    .ticket_type_create(tenant.id, &wanted.name, &wanted.statuses, &wanted.fields)
                    .await?;
                (created.id, "created")
            }
        };
        types.push(json!({"id": id.to_string(), "name": wanted.name, "action": action}));
    }
    let mut groups = Vec::new();
    let existing_groups = desk.group_list(tenant.id).await?;
    for wanted in &setup.groups {
        groups.push(apply_group(&app, tenant.id, &existing_groups, wanted).await?);
    }
    let base = base_url(app.config(), &headers);
    let mut automations = Vec::new();
    for plan in planned {
        let name = plan.automation.name.clone();
        let mut generated = None;
        let (stored, action) = match plan.existing {
            Some(stored) if stored.automation == plan.automation => (stored, "unchanged"),
            Some(stored) => {
                let updated = app
                    .automations()
                    .automation_update(tenant.id, stored.id, plan.automation, BY_TENANT)
                    .await
                    .map_err(|err| ApiError::desk(err, "automation"))?;
                (updated, "updated")
            }
            None => {
                let secret = secret_for_create(&plan.secret);
                if plan.secret == SecretRequest::Generate {
                    generated = secret.clone();
                }
                let created = app
                    .automations()
                    .automation_create(tenant.id, plan.automation, secret, BY_TENANT)
                    .await?;
                (created, "created")
            }
        };
        let mut item = json!({"id": stored.id.to_string(), "name": name, "action": action});
        if let (Value::Object(map), Some(token)) = (&mut item, &stored.webhook_token)
            && fronta_automation::executor::is_webhook(&stored.automation)
        {
            map.insert("webhookUrl".into(), json!(webhook_url(&base, token)));
        }
        if let (Value::Object(map), Some(secret)) = (&mut item, generated) {
            map.insert("signingSecret".into(), json!(secret));
        }
        if let Value::Object(map) = &mut item {
            map.insert("currentVersion".into(), json!(stored.current_version));
            if action != "created" && !stored.automation.enabled {
                map.insert("enabled".into(), json!(false));
                map.insert("note".into(), json!("kept paused"));
            }
        }
        automations.push(item);
    }
    Ok(Json(json!({
        "groups": groups,
        "ticketTypes": types,
        "automations": automations,
    })))
}

async fn apply_group(
    app: &App,
    tenant: TenantId,
    existing: &[Group],
    wanted: &SetupGroup,
) -> Result<Value, ApiError> {
    let desk = app.desk();
    let (group, action) = match existing.iter().find(|g| g.name == wanted.name) {
        Some(group) => (group.clone(), "unchanged"),
        None => (desk.group_create(tenant, &wanted.name).await?, "created"),
    };
    let current = desk
        .member_list(tenant, group.id)
        .await
        .map_err(|err| ApiError::desk(err, "group"))?;
    let mut members = Vec::new();
    for person in &wanted.members {
        let (id, action) = match current.iter().find(|m| m.name == person.name) {
            Some(member) => {
                let email = person
                    .email
                    .as_deref()
                    .filter(|e| member.email.as_deref() != Some(e));
                let capacity = person.capacity.filter(|c| *c != member.capacity);
                if email.is_none() && capacity.is_none() {
                    (member.id, "unchanged")
                } else {
                    desk.member_update(tenant, member.id, None, email.map(Some), capacity)
                        .await
                        .map_err(|err| ApiError::desk(err, "member"))?;
                    (member.id, "updated")
                }
            }
            None => {
                let added = desk
                    .member_add(
                        tenant,
                        group.id,
                        &person.name,
                        person.email.as_deref(),
                        person.capacity.unwrap_or(DEFAULT_MEMBER_CAPACITY),
                    )
                    .await
                    .map_err(|err| ApiError::desk(err, "group"))?;
                (added.id, "created")
            }
        };
        members.push(json!({"id": id.to_string(), "name": person.name, "action": action}));
    }
    Ok(json!({
        "id": group.id.to_string(),
        "name": group.name,
        "action": action,
        "members": members,
    }))
}
