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
//! - A member is matched by name within its group; `email`, `capacity` and `available`
//!   are updated when given (`capacity` defaults to the route's default for new members).
//! - An existing ticket type with other statuses or fields is updated to the setup's;
//!   automations are validated against the updated statuses. The store refuses removing
//!   a status open tickets still hold (422 `invalid_setup` naming it at `ticketTypes[i]`).
//! - All or nothing: what each item does is planned by `fronta_automation::setup::plan`,
//!   and the store writes the whole plan in one transaction
//!   (`AutomationStore::setup_apply`). A refusal of any item answers 422 at its path and
//!   leaves the tenant exactly as it was.
//! - An automation's `enabled` changes only when the setup names it: a paused automation
//!   stays paused (its item says `"note": "kept paused"`), as with `PUT`.
//!
//! The answer lists what happened to each item: `created`, `updated` or `unchanged`;
//! an automation's item carries its `currentVersion`.

use std::collections::{HashMap, HashSet};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use fronta_automation::Problem;
use fronta_automation::setup::{
    self, Action, Existing, SetupFailure, WantedAutomation, WantedGroup, WantedMember, WantedType,
};
use fronta_desk::DeskError;
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
use fronta_automation::versions;

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Setup {
    #[serde(default)]
    groups: Vec<SetupGroup>,
    #[serde(default)]
    ticket_types: Vec<NewTicketType>,
    #[serde(default)]
    automations: Vec<Value>,
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupGroup {
    name: String,
    #[serde(default)]
    members: Vec<SetupMember>,
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupMember {
    name: String,
    email: Option<String>,
    capacity: Option<u32>,
    available: Option<bool>,
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
    // A setup is the tenant's: its entry names the tenant (before the groups it makes).
    fronta_engine::audit::created(&tenant.id);
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
    let context = app.config().validation(statuses);

    // Automations: checked, and matched by name with what exists (for the secret and
    // the paused state they keep).
    let existing_automations = app.automations().automation_list(tenant.id).await?;
    let mut wanted_automations = Vec::with_capacity(setup.automations.len());
    let mut generated = Vec::with_capacity(setup.automations.len());
    let mut names = HashSet::new();
    for (index, body) in setup.automations.into_iter().enumerate() {
        let prefix = setup::path_of_automation(index);
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
        if let Some(stored) = existing_automations
            .iter()
            .find(|stored| stored.automation.name == automation.name)
        {
            problems.extend(secret_change_problem(stored, &secret, &prefix));
            keep_enabled(&value, &mut automation, stored);
        }
        generated.push(secret == SecretRequest::Generate);
        wanted_automations.push(WantedAutomation {
            automation,
            signing_secret: secret_for_create(&secret),
        });
    }
    if !problems.is_empty() {
        return Err(ApiError::InvalidSetup(problems));
    }

    // The groups the setup names, with their members, as they are now.
    let mut existing_groups = Vec::new();
    for group in desk.group_list(tenant.id).await? {
        if setup.groups.iter().any(|wanted| wanted.name == group.name) {
            let members = desk
                .member_list(tenant.id, group.id)
                .await
                .map_err(|err| ApiError::desk(err, "group"))?;
            existing_groups.push((group, members));
        }
    }
    let plan = setup::plan(
        tenant.id,
        setup
            .ticket_types
            .into_iter()
            .map(|wanted| WantedType {
                name: wanted.name,
                statuses: wanted.statuses,
                fields: wanted.fields,
            })
            .collect(),
        setup
            .groups
            .into_iter()
            .map(|group| WantedGroup {
                name: group.name,
                members: group
                    .members
                    .into_iter()
                    .map(|person| WantedMember {
                        name: person.name,
                        email: person.email,
                        capacity: person.capacity,
                        available: person.available,
                    })
                    .collect(),
            })
            .collect(),
        wanted_automations,
        Existing {
            ticket_types: &existing_types,
            groups: &existing_groups,
            automations: &existing_automations,
        },
        DEFAULT_MEMBER_CAPACITY,
    )
    .map_err(refusal)?;
    // Every write in one transaction: a refusal anywhere leaves the tenant as it was.
    let applied = app
        .automations()
        .setup_apply(tenant.id, plan, &versions::author())
        .await
        .map_err(refusal)?;

    let types: Vec<Value> = applied
        .ticket_types
        .iter()
        .map(|(found, action)| {
            json!({"id": found.id.to_string(), "name": found.name, "action": action.as_str()})
        })
        .collect();
    let groups: Vec<Value> = applied
        .groups
        .iter()
        .map(|group| {
            let members: Vec<Value> = group
                .members
                .iter()
                .map(|(id, name, action)| {
                    json!({"id": id.to_string(), "name": name, "action": action.as_str()})
                })
                .collect();
            json!({
                "id": group.group.id.to_string(),
                "name": group.group.name,
                "action": group.action.as_str(),
                "members": members,
            })
        })
        .collect();
    let base = base_url(app.config(), &headers);
    let mut automations = Vec::with_capacity(applied.automations.len());
    for ((stored, action), generated) in applied.automations.into_iter().zip(generated) {
        if action != Action::Unchanged {
            app.schedule_now(&stored.automation);
        }
        let mut item = serde_json::Map::new();
        item.insert("id".into(), json!(stored.id.to_string()));
        item.insert("name".into(), json!(stored.automation.name));
        item.insert("action".into(), json!(action.as_str()));
        if let Some(token) = &stored.webhook_token
            && fronta_automation::executor::is_webhook(&stored.automation)
        {
            item.insert("webhookUrl".into(), json!(webhook_url(&base, token)));
        }
        if action == Action::Created
            && generated
            && let Some(secret) = &stored.signing_secret
        {
            item.insert("signingSecret".into(), json!(secret));
        }
        item.insert("currentVersion".into(), json!(stored.current_version));
        if action != Action::Created && !stored.automation.enabled {
            item.insert("enabled".into(), json!(false));
            item.insert("note".into(), json!("kept paused"));
        }
        automations.push(Value::Object(item));
    }
    Ok(Json(json!({
        "groups": groups,
        "ticketTypes": types,
        "automations": automations,
    })))
}

/// A refused setup as the API answers it: a refusal of one item is a problem at its path
/// (422 `invalid_setup`), or 409 `in_use` whose message starts with the path (removing a
/// status something still uses); what no item is to blame for answers as any store error.
fn refusal(failure: SetupFailure) -> ApiError {
    match (failure.at, failure.error) {
        (Some(at), DeskError::Invalid(message) | DeskError::Conflict(message)) => {
            ApiError::InvalidSetup(vec![Problem::new(at, message)])
        }
        (Some(at), DeskError::InUse { message, used_by }) => ApiError::InUse {
            message: format!("{at}: {message}"),
            used_by,
        },
        (Some(at), DeskError::NotFound(what)) => ApiError::InvalidSetup(vec![Problem::new(
            at,
            format!("the {what} changed while the setup was applied; apply it again"),
        )]),
        (_, other) => ApiError::desk(other, "setup"),
    }
}
