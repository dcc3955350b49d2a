//! The [`AutomationStore`] port: saved automations of a tenant, their webhook tokens, and
//! the loop guard's per-ticket counter. Stores implement it beside `RunStore` and
//! `DeskStore`; errors reuse the desk's kinds ([`DeskError`]).
//!
//! Also the plans of its writes, pure functions both stores call inside their
//! transaction (read → plan → write): an automation save ([`Save`]: the name rule, the
//! "name taken" refusal, the webhook token minted once and kept across updates), a pause
//! or resume ([`set_enabled`]), the loop guard's admission ([`GuardAdmission`]), how a
//! stored row reads back ([`AutomationColumns`]) and the `NotFound` of a delete that
//! found nothing ([`deleted`]). The stores keep the SQL, the locking and the row mapping.

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use fronta_desk::{DeskError, TenantId, TicketId};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{Automation, Trigger};
use crate::refs::Ref;
use crate::versions::{Latest, Version, VersionWrite};

pub type StoreResult<T> = Result<T, DeskError>;

/// An automation's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AutomationId(pub Uuid);

impl AutomationId {
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }
}

impl Default for AutomationId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for AutomationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for AutomationId {
    type Err = uuid::Error;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(text).map(Self)
    }
}

/// An automation as saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAutomation {
    pub id: AutomationId,
    pub tenant: TenantId,
    /// The definition; `automation.enabled == false` means paused.
    pub automation: Automation,
    /// The secret in the webhook URL (webhook triggers only). Never logged.
    #[serde(skip)]
    pub webhook_token: Option<String>,
    /// Standard Webhooks signing secret, when the tenant asked for signatures.
    #[serde(skip)]
    pub signing_secret: Option<String>,
    /// Old webhook tokens and signing secrets kept after a rotation, with their expiry
    /// ([`crate::rotation`]); an expired one may still be listed until a store drops it.
    #[serde(skip)]
    pub retired: Vec<crate::rotation::Retired>,
    /// The newest version (see [`crate::versions`]): what new runs are pinned to.
    pub current_version: u32,
    /// While paused: what runs already in flight do ([`InFlight`]).
    pub in_flight: InFlight,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What a pause does to the runs already in flight: they `finish` on their version (the
/// default), or are `hold`-ed at their next step — snoozed, no attempt spent — until the
/// automation is resumed. A pause never fails a run.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InFlight {
    #[default]
    Finish,
    Hold,
}

impl InFlight {
    /// The stored spelling (`finish`, `hold`).
    pub fn as_str(self) -> &'static str {
        match self {
            InFlight::Finish => "finish",
            InFlight::Hold => "hold",
        }
    }

    /// The stored spelling read back; anything else is `finish` (never holds by mistake).
    pub fn parse(text: &str) -> Self {
        if text == "hold" {
            InFlight::Hold
        } else {
            InFlight::Finish
        }
    }
}

impl StoredAutomation {
    /// Whether runs in flight wait at their next step: paused with `inFlight: hold`.
    pub fn holds_runs(&self) -> bool {
        !self.automation.enabled && self.in_flight == InFlight::Hold
    }
}

/// Saved automations.
///
/// # Contract
///
/// - Every method but `automation_by_webhook_token` is scoped by tenant; another
///   tenant's id answers exactly like an unknown one (`NotFound`).
/// - Names are unique within a tenant (`Conflict`).
/// - A webhook automation gets a random, unguessable token at creation (kept across
///   updates, also when the trigger changes away and back); other triggers have none.
/// - `automations_for_event` answers the tenant's **enabled** automations whose trigger is
///   the event `event` (`ticket.created` / `ticket.changed`), oldest first.
/// - Every create, and every update that changes the definition (`enabled` aside),
///   writes a new version in the same transaction, planned by [`crate::versions::plan`]
///   ([`Save::create`], [`Save::update`]); `current_version` names the newest. Deleting
///   an automation keeps its versions.
/// - `guard_admit` atomically counts one run of `automation` over `ticket` at `now` and
///   answers `false` (counting nothing) when `max` runs were admitted in the `window`
///   before `now`: the loop guard's "at most 5 runs a minute".
#[async_trait]
pub trait AutomationStore: Send + Sync + 'static {
    async fn automation_create(
        &self,
        tenant: TenantId,
        automation: Automation,
        signing_secret: Option<String>,
        by: &str,
    ) -> StoreResult<StoredAutomation>;
    /// Carries out a setup's plan in one transaction ([`crate::setup`]): every write,
    /// or — on the first refusal, named by its item — none.
    async fn setup_apply(
        &self,
        tenant: TenantId,
        plan: crate::setup::SetupPlan,
        by: &str,
    ) -> Result<crate::setup::SetupApplied, crate::setup::SetupFailure>;
    async fn automation_get(
        &self,
        tenant: TenantId,
        id: AutomationId,
    ) -> StoreResult<StoredAutomation>;
    async fn automation_by_name(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> StoreResult<StoredAutomation>;
    async fn automation_list(&self, tenant: TenantId) -> StoreResult<Vec<StoredAutomation>>;
    async fn automation_update(
        &self,
        tenant: TenantId,
        id: AutomationId,
        automation: Automation,
        by: &str,
    ) -> StoreResult<StoredAutomation>;
    /// Pause (`enabled` false, with what runs in flight do) or resume (`in_flight` is
    /// then `Finish`).
    async fn automation_set_enabled(
        &self,
        tenant: TenantId,
        id: AutomationId,
        enabled: bool,
        in_flight: InFlight,
    ) -> StoreResult<StoredAutomation>;
    /// The automation's versions, newest first: at most `limit`, below `before` when
    /// given. `NotFound` when the tenant has no such automation.
    async fn automation_versions(
        &self,
        tenant: TenantId,
        id: AutomationId,
        before: Option<u32>,
        limit: u32,
    ) -> StoreResult<Vec<Version>>;
    /// One version; found also after the automation was deleted (its runs stay
    /// readable). `NotFound("automation version")` when there is no such version.
    async fn automation_version(
        &self,
        tenant: TenantId,
        id: AutomationId,
        version: u32,
    ) -> StoreResult<Version>;
    async fn automation_delete(&self, tenant: TenantId, id: AutomationId) -> StoreResult<()>;
    /// The webhook automation whose current token is `token`, or whose retired one is
    /// `token` and still in its grace period at the store's now
    /// ([`crate::rotation::answers_token`]).
    async fn automation_by_webhook_token(
        &self,
        token: &str,
    ) -> StoreResult<Option<StoredAutomation>>;
    /// A new webhook token for the tenant's automation `id`; the old one stays valid for
    /// `grace` ([`crate::rotation::rotate_webhook`]). Expired retired values of the
    /// automation are dropped in the same write.
    async fn automation_rotate_webhook(
        &self,
        tenant: TenantId,
        id: AutomationId,
        grace: TimeDelta,
    ) -> StoreResult<StoredAutomation>;
    /// Delete retired webhook tokens and signing secrets whose grace ended at or before
    /// `before`, at most `limit` (the retention service; they stopped working then).
    async fn retired_purge(&self, before: DateTime<Utc>, limit: usize) -> StoreResult<u64>;
    /// `secret` becomes the signing secret of the tenant's automation `id`; the old one
    /// keeps verifying for `overlap` ([`crate::rotation::rotate_signing_secret`]).
    async fn automation_rotate_signing_secret(
        &self,
        tenant: TenantId,
        id: AutomationId,
        overlap: TimeDelta,
        secret: String,
    ) -> StoreResult<StoredAutomation>;
    async fn automations_for_event(
        &self,
        tenant: TenantId,
        event: &str,
    ) -> StoreResult<Vec<StoredAutomation>>;
    /// Every automation, of every tenant, whose trigger is `poll` or `schedule` —
    /// enabled or paused (the scheduler cancels a paused one's pending tick) — oldest
    /// first. The scheduler's only cross-tenant read.
    async fn automations_timed(&self) -> StoreResult<Vec<StoredAutomation>>;
    async fn guard_admit(
        &self,
        tenant: TenantId,
        automation: AutomationId,
        ticket: TicketId,
        now: DateTime<Utc>,
        window: std::time::Duration,
        max: u32,
    ) -> StoreResult<bool>;
    /// Takes back one admission of the pair made at `at` (the `now` it was admitted at,
    /// to the millisecond): the run changed nothing, so it does not extend a chain. No
    /// such admission (pruned already): nothing happens.
    async fn guard_withdraw(
        &self,
        tenant: TenantId,
        automation: AutomationId,
        ticket: TicketId,
        at: DateTime<Utc>,
    ) -> StoreResult<()>;
}

/// An automation listening to a ticket event, as a store hands it to the sink: its id
/// and the version its run is pinned to (the current one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    pub id: AutomationId,
    pub version: u32,
}

/// What a store calls inside the transaction of a ticket write that changed something
/// and that at least one **enabled** automation of the tenant listens to (its trigger is
/// that event); it gets the event and those automations (oldest first), and the runs
/// it answers are inserted in that same transaction. The automation runtime installs one
/// that answers one automation run per listener (see `executor::event_sink`).
pub type TicketEventSink = std::sync::Arc<
    dyn Fn(&fronta_desk::store::TicketEvent, &[Listener]) -> Vec<fronta_engine::NewRun>
        + Send
        + Sync,
>;

// ---------------------------------------------------------------------------------------
// The plans of the writes
// ---------------------------------------------------------------------------------------

/// What `DeskError::NotFound` names for the rows of the automation runtime: one spelling
/// for every store (the desk's for tenants, automations and tickets).
pub mod names {
    pub use fronta_desk::store::names::{AUTOMATION, TENANT, TICKET};
    pub const WIDGET: &str = "widget";
    pub const SECRET: &str = "secret";
    pub const MCP_SERVER: &str = "MCP server";
    pub const MAIL_SERVER: &str = "mail server";
    pub const VERSION: &str = "automation version";
}

/// The prefix of webhook tokens, so a leaked one is easy to recognise.
pub const WEBHOOK_TOKEN_PREFIX: &str = "wh_";

/// A new webhook token: random and unguessable, behind [`WEBHOOK_TOKEN_PREFIX`]. Stores
/// hand it to the save plans, which decide whether a token is needed.
pub fn mint_webhook_token() -> String {
    fronta_desk::token::generate(WEBHOOK_TOKEN_PREFIX)
}

/// A delete by key that removed `rows` rows: none is `NotFound` naming `what`.
pub fn deleted(rows: u64, what: &'static str) -> StoreResult<()> {
    if rows == 0 {
        Err(DeskError::NotFound(what))
    } else {
        Ok(())
    }
}

/// An automation's row as a store reads it, decoded column by column; what it answers is
/// `StoredAutomation::from(columns)`.
#[derive(Debug, Clone, PartialEq)]
pub struct AutomationColumns {
    pub id: AutomationId,
    pub tenant: TenantId,
    pub definition: Automation,
    /// The `enabled` column.
    pub enabled: bool,
    /// The `webhook_token` column, kept whatever the trigger now is.
    pub webhook_token: Option<String>,
    pub signing_secret: Option<String>,
    /// The automation's rows of `automation_retired` ([`crate::rotation::parse_retired`]).
    pub retired: Vec<crate::rotation::Retired>,
    /// The `current_version` column.
    pub current_version: u32,
    /// The `in_flight` column (`finish`, `hold`).
    pub in_flight: InFlight,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<AutomationColumns> for StoredAutomation {
    /// The `enabled` column is the truth (every write keeps the definition's equal to
    /// it); the token is shown only while the trigger is a webhook, though the row keeps
    /// it, so that a trigger changed away and back answers at the URL it had.
    fn from(columns: AutomationColumns) -> Self {
        let mut automation = columns.definition;
        automation.enabled = columns.enabled;
        let webhook_token = match automation.trigger {
            Trigger::Webhook { .. } => columns.webhook_token,
            _ => None,
        };
        StoredAutomation {
            id: columns.id,
            tenant: columns.tenant,
            automation,
            webhook_token,
            signing_secret: columns.signing_secret,
            retired: columns.retired,
            current_version: columns.current_version,
            in_flight: columns.in_flight,
            created_at: columns.created_at,
            updated_at: columns.updated_at,
        }
    }
}

/// What an automation write stores: the definition (as JSON) and the columns the lookups
/// need, which mirror it.
#[derive(Debug, Clone, PartialEq)]
pub struct AutomationRow {
    pub automation: Automation,
    /// The `webhook_token` column.
    pub webhook_token: Option<String>,
    /// The version the save writes (a new row of the history) or keeps; its number is
    /// the `current_version` column.
    pub version: VersionWrite,
    /// The `in_flight` column.
    pub in_flight: InFlight,
    /// The `refs` column: what the definition's names are bound to; `None` keeps the
    /// column as it is (a pause or resume changes no name).
    pub refs: Option<Vec<Ref>>,
}

impl AutomationRow {
    /// The `refs` column as stored (JSON), `None` to keep it.
    pub fn refs_json(&self) -> Option<String> {
        self.refs
            .as_ref()
            .map(|refs| serde_json::to_string(refs).unwrap_or_else(|_| "[]".to_owned()))
    }

    /// The refs a new version row keeps (JSON).
    pub fn version_refs_json(&self) -> String {
        self.refs_json().unwrap_or_else(|| "[]".to_owned())
    }

    /// The `name` column (unique within a tenant).
    pub fn name(&self) -> &str {
        &self.automation.name
    }

    /// The `enabled` column.
    pub fn enabled(&self) -> bool {
        self.automation.enabled
    }

    /// The `trigger_kind` column (`webhook`, `event`, `poll`, `schedule`, `manual`).
    pub fn trigger_kind(&self) -> &'static str {
        self.automation.trigger.kind()
    }

    /// The `event` column: the event an event trigger listens to, `None` for others.
    pub fn event(&self) -> Option<&'static str> {
        match &self.automation.trigger {
            Trigger::Event { event } => Some(event.as_str()),
            _ => None,
        }
    }
}

/// The refusal of a name another automation of the tenant holds; a store answers it too
/// when its unique index catches a racing save of the same name.
pub fn name_taken(name: &str) -> DeskError {
    DeskError::Conflict(name_taken_message(name))
}

/// The message of [`name_taken`], for a store's mapping of its unique index.
pub fn name_taken_message(name: &str) -> String {
    format!("automation {name:?} already exists")
}

/// An automation on its way to being saved, its name checked: 1–200 characters, not
/// only white space (`Invalid`, the desk's rule). A store checks it before its
/// transaction begins, so a bad name is refused before anything is read (also for an
/// unknown tenant or id).
#[derive(Debug, Clone, PartialEq)]
pub struct Save(Automation, Vec<Ref>);

impl Save {
    pub fn check(automation: Automation) -> StoreResult<Save> {
        fronta_desk::plan::check_name(names::AUTOMATION, &automation.name)?;
        Ok(Save(automation, Vec::new()))
    }

    /// The name to look the holder up by.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Binds the names of the definition to the tenant's `groups` and `types` as the
    /// store read them inside its transaction ([`crate::refs::bind`]).
    pub fn bind(
        mut self,
        groups: &[fronta_desk::Group],
        types: &[fronta_desk::TicketType],
    ) -> Save {
        self.1 = crate::refs::bind(&self.0, groups, types);
        self
    }

    /// A create, version 1. `holder` is the tenant's automation already called so (the
    /// store's lookup by name); `mint` makes the token a webhook trigger gets, others get
    /// none.
    pub fn create(
        self,
        holder: Option<AutomationId>,
        mint: impl FnOnce() -> String,
    ) -> StoreResult<AutomationRow> {
        if holder.is_some() {
            return Err(name_taken(&self.0.name));
        }
        let webhook_token = is_webhook(&self.0.trigger).then(mint);
        let version = crate::versions::plan(None, &self.0, &self.1);
        Ok(AutomationRow {
            automation: self.0,
            webhook_token,
            version,
            in_flight: InFlight::Finish,
            refs: Some(self.1),
        })
    }

    /// An update of `id`, whose row as read inside the transaction is `current`.
    /// `holder` is the tenant's automation called so (`id` itself keeps its name
    /// freely); the row's token outlives a trigger that changes away, so back to a
    /// webhook the automation answers at the URL it had; `mint` is called only for a
    /// webhook that has none. A new version is written only when the definition changed;
    /// a resume through an update (`enabled` true) clears a hold.
    pub fn update(
        self,
        id: AutomationId,
        current: Current,
        holder: Option<AutomationId>,
        mint: impl FnOnce() -> String,
    ) -> StoreResult<AutomationRow> {
        if holder.is_some_and(|holder| holder != id) {
            return Err(name_taken(&self.0.name));
        }
        let webhook_token = match current.webhook_token {
            None if is_webhook(&self.0.trigger) => Some(mint()),
            kept => kept,
        };
        let version = if current.bound {
            crate::versions::plan(Some(&current.latest), &self.0, &self.1)
        } else {
            // Saved before names were bound: the current hash is over the names, so the
            // same definition is recognised by that hash.
            match crate::versions::plan(Some(&current.latest), &self.0, &[]) {
                VersionWrite::Unchanged(version) => VersionWrite::Unchanged(version),
                VersionWrite::New { version, .. } => VersionWrite::New {
                    version,
                    hash: crate::versions::bound_hash(&self.0, &self.1),
                },
            }
        };
        let in_flight = if self.0.enabled {
            InFlight::Finish
        } else {
            current.in_flight
        };
        Ok(AutomationRow {
            automation: self.0,
            webhook_token,
            version,
            in_flight,
            refs: Some(self.1),
        })
    }
}

/// What an update reads of the row it writes over, inside its transaction (Postgres:
/// with the row locked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// The `webhook_token` column, whatever the trigger now is.
    pub webhook_token: Option<String>,
    /// The current version and its hash.
    pub latest: Latest,
    pub in_flight: InFlight,
    /// Whether the row's names are bound (`refs` written by a save since refs exist).
    pub bound: bool,
}

fn is_webhook(trigger: &Trigger) -> bool {
    matches!(trigger, Trigger::Webhook { .. })
}

/// What pausing or resuming a stored automation writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Enable {
    /// It already is so: nothing is written, the stored automation is the answer.
    Unchanged(StoredAutomation),
    /// Write the `enabled` and `in_flight` columns (and the definition's mirror of
    /// `enabled`) and answer the row written; the version stays.
    Write {
        automation: Automation,
        in_flight: InFlight,
    },
}

/// Pausing (`enabled` false, `in_flight` saying what runs in flight do) or resuming
/// (`in_flight` becomes `Finish`) `stored`. Pausing a paused automation with another
/// `in_flight` writes the new choice.
pub fn set_enabled(stored: StoredAutomation, enabled: bool, in_flight: InFlight) -> Enable {
    let in_flight = if enabled { InFlight::Finish } else { in_flight };
    if stored.automation.enabled == enabled && stored.in_flight == in_flight {
        return Enable::Unchanged(stored);
    }
    let mut automation = stored.automation;
    automation.enabled = enabled;
    Enable::Write {
        automation,
        in_flight,
    }
}

/// The token a webhook lookup searches for: an empty one finds nothing (no automation
/// has one), so a store answers `None` without asking.
pub fn webhook_lookup(token: &str) -> Option<&str> {
    (!token.is_empty()).then_some(token)
}

/// One admission of the loop guard ([`AutomationStore::guard_admit`]), planned: the
/// window `(since, now]` in whole milliseconds (as SQLite keeps instants), and the two
/// decisions a store makes inside its transaction. The store first checks the targets
/// ([`GuardAdmission::targets`]), then prunes the pair's rows at or before `since`,
/// counts the rest and, when [`GuardAdmission::admits`] says so, inserts one at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardAdmission {
    pub now: DateTime<Utc>,
    pub since: DateTime<Utc>,
    pub max: u32,
}

impl GuardAdmission {
    /// An instant as admissions keep it: whole milliseconds.
    pub fn instant(at: DateTime<Utc>) -> DateTime<Utc> {
        crate::dates::whole_millis(at)
    }

    pub fn new(now: DateTime<Utc>, window: std::time::Duration, max: u32) -> Self {
        let now = Self::instant(now);
        let window = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let since = TimeDelta::try_milliseconds(window)
            .and_then(|window| now.checked_sub_signed(window))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        Self { now, since, max }
    }

    /// The automation and the ticket must both be the tenant's: `NotFound` naming the
    /// first that is not.
    pub fn targets(&self, automation_found: bool, ticket_found: bool) -> StoreResult<()> {
        if !automation_found {
            return Err(DeskError::NotFound(names::AUTOMATION));
        }
        if !ticket_found {
            return Err(DeskError::NotFound(names::TICKET));
        }
        Ok(())
    }

    /// Whether one more run is admitted when `admitted` runs of the pair are in the
    /// window: fewer than `max`. A refused run counts nothing.
    pub fn admits(&self, admitted: u64) -> bool {
        admitted < u64::from(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn automation(value: serde_json::Value) -> Automation {
        Automation::from_value(&value)
            .unwrap_or_else(|problems| panic!("the test automation parses: {problems:?}"))
    }

    fn steps() -> serde_json::Value {
        json!([{"name": "note", "op": "flow/log", "input": {"message": "hi"}}])
    }

    fn webhook(name: &str) -> Automation {
        automation(
            json!({"name": name, "trigger": {"type": "webhook", "params": []}, "steps": steps()}),
        )
    }

    fn manual(name: &str) -> Automation {
        automation(json!({"name": name, "trigger": {"type": "manual"}, "steps": steps()}))
    }

    fn named(mut automation: Automation, name: &str) -> Automation {
        automation.name = name.to_owned();
        automation
    }

    fn minted() -> String {
        "wh_minted".to_owned()
    }

    fn never() -> String {
        panic!("no token may be minted here")
    }

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_700_000_000_000 + ms).expect("an instant")
    }

    /// A row as an update reads it: `token`, on version 3 of `of`.
    fn current(token: Option<&str>, of: &Automation) -> Current {
        Current {
            webhook_token: token.map(str::to_owned),
            latest: Latest {
                version: 3,
                hash: crate::versions::content_hash(of),
            },
            in_flight: InFlight::Hold,
            bound: true,
        }
    }

    #[test]
    fn a_blank_or_overlong_name_is_refused_before_anything_is_read() {
        let blank = Save::check(named(manual("x"), "  ")).expect_err("blank");
        assert_eq!(
            blank,
            DeskError::Invalid("automation name must not be empty".into()),
            "the desk's name rule, naming an automation"
        );
        let long = Save::check(named(manual("x"), &"x".repeat(201))).expect_err("too long");
        assert!(
            matches!(long, DeskError::Invalid(ref message) if message.contains("200")),
            "names the limit: {long:?}"
        );
        assert!(Save::check(manual("Orders")).is_ok(), "a good name passes");
    }

    #[test]
    fn a_taken_name_is_refused_with_the_name_quoted() {
        let save = Save::check(manual("Orders")).expect("checked");
        let err = save
            .clone()
            .create(Some(AutomationId::new()), never)
            .expect_err("taken");
        assert_eq!(
            err,
            DeskError::Conflict("automation \"Orders\" already exists".into()),
            "the message quotes the name"
        );
        let id = AutomationId::new();
        assert!(
            save.clone()
                .update(id, current(None, &manual("Orders")), Some(id), never)
                .is_ok(),
            "an update keeps its own name"
        );
        assert_eq!(
            save.update(
                id,
                current(None, &manual("Orders")),
                Some(AutomationId::new()),
                never
            ),
            Err(name_taken("Orders")),
            "an update onto another's name is refused"
        );
    }

    #[test]
    fn only_a_webhook_gets_a_token_at_creation() {
        let row = Save::check(webhook("Hook"))
            .and_then(|save| save.create(None, minted))
            .expect("created");
        assert_eq!(row.webhook_token.as_deref(), Some("wh_minted"), "minted");
        assert_eq!(row.trigger_kind(), "webhook", "the kind column");
        let row = Save::check(manual("Hand"))
            .and_then(|save| save.create(None, never))
            .expect("created");
        assert_eq!(row.webhook_token, None, "a manual trigger has none");
    }

    #[test]
    fn the_token_is_kept_across_updates_and_minted_only_for_a_webhook_without_one() {
        let id = AutomationId::new();
        let kept = Save::check(manual("Hook"))
            .and_then(|save| save.update(id, current(Some("wh_old"), &manual("x")), None, never))
            .expect("updated");
        assert_eq!(
            kept.webhook_token.as_deref(),
            Some("wh_old"),
            "a trigger changed away keeps the token in the row"
        );
        let back = Save::check(webhook("Hook"))
            .and_then(|save| save.update(id, current(Some("wh_old"), &manual("x")), None, never))
            .expect("updated");
        assert_eq!(
            back.webhook_token.as_deref(),
            Some("wh_old"),
            "back to a webhook: the URL it had"
        );
        let first = Save::check(webhook("Hook"))
            .and_then(|save| save.update(id, current(None, &manual("x")), None, minted))
            .expect("updated");
        assert_eq!(
            first.webhook_token.as_deref(),
            Some("wh_minted"),
            "a webhook without a token gets one"
        );
    }

    #[test]
    fn the_row_mirrors_the_definition_in_its_lookup_columns() {
        let mut listener = automation(json!({"name": "L",
            "trigger": {"type": "event", "event": "ticket.changed"}, "steps": steps()}));
        listener.enabled = false;
        let row = AutomationRow {
            automation: listener,
            webhook_token: None,
            version: VersionWrite::Unchanged(1),
            in_flight: InFlight::Finish,
            refs: None,
        };
        assert_eq!(row.name(), "L", "name");
        assert!(!row.enabled(), "enabled");
        assert_eq!(row.trigger_kind(), "event", "kind");
        assert_eq!(row.event(), Some("ticket.changed"), "the event listened to");
        let hook = AutomationRow {
            automation: webhook("H"),
            webhook_token: None,
            version: VersionWrite::Unchanged(1),
            in_flight: InFlight::Finish,
            refs: None,
        };
        assert_eq!(hook.event(), None, "other triggers listen to no event");
    }

    #[test]
    fn a_stored_row_shows_its_token_only_while_the_trigger_is_a_webhook() {
        let columns = |definition: Automation| AutomationColumns {
            id: AutomationId::new(),
            tenant: TenantId::new(),
            definition,
            enabled: false,
            webhook_token: Some("wh_kept".into()),
            signing_secret: None,
            retired: Vec::new(),
            current_version: 1,
            in_flight: InFlight::Finish,
            created_at: at(0),
            updated_at: at(0),
        };
        let hook = StoredAutomation::from(columns(webhook("H")));
        assert_eq!(hook.webhook_token.as_deref(), Some("wh_kept"), "shown");
        assert!(!hook.automation.enabled, "the enabled column is the truth");
        let hand = StoredAutomation::from(columns(manual("M")));
        assert_eq!(hand.webhook_token, None, "kept in the row, not shown");
    }

    #[test]
    fn pausing_what_is_paused_writes_nothing() {
        let stored = StoredAutomation::from(AutomationColumns {
            id: AutomationId::new(),
            tenant: TenantId::new(),
            definition: manual("M"),
            enabled: true,
            webhook_token: None,
            signing_secret: None,
            retired: Vec::new(),
            current_version: 2,
            in_flight: InFlight::Finish,
            created_at: at(0),
            updated_at: at(0),
        });
        assert_eq!(
            set_enabled(stored.clone(), true, InFlight::Hold),
            Enable::Unchanged(stored.clone()),
            "already enabled: a resume never holds"
        );
        let Enable::Write {
            automation,
            in_flight,
        } = set_enabled(stored.clone(), false, InFlight::Hold)
        else {
            panic!("a change is written")
        };
        assert!(!automation.enabled, "the definition written is paused");
        assert_eq!(in_flight, InFlight::Hold, "holding its runs");
        let mut paused = stored;
        paused.automation.enabled = false;
        assert!(
            matches!(
                set_enabled(paused.clone(), false, InFlight::Hold),
                Enable::Write {
                    in_flight: InFlight::Hold,
                    ..
                }
            ),
            "paused again, now holding: the choice is written"
        );
        assert_eq!(
            set_enabled(paused.clone(), false, InFlight::Finish),
            Enable::Unchanged(paused),
            "paused again the same way: nothing"
        );
    }

    #[test]
    fn an_update_writes_a_version_only_for_a_changed_definition_and_keeps_a_hold() {
        let id = AutomationId::new();
        let mut same = manual("M");
        same.enabled = false;
        let row = Save::check(same)
            .and_then(|save| save.update(id, current(None, &manual("M")), None, never))
            .expect("updated");
        assert_eq!(
            row.version,
            VersionWrite::Unchanged(3),
            "pausing through an update is no new version"
        );
        assert_eq!(
            row.in_flight,
            InFlight::Hold,
            "a paused update keeps the hold"
        );
        let edited = automation(json!({"name": "M", "trigger": {"type": "manual"},
            "steps": [{"name": "other", "op": "flow/log", "input": {"message": "x"}}]}));
        let row = Save::check(edited)
            .and_then(|save| save.update(id, current(None, &manual("M")), None, never))
            .expect("updated");
        assert_eq!(row.version.current(), 4, "an edit is the next number");
        assert_eq!(row.in_flight, InFlight::Finish, "enabled again: no hold");
        let created = Save::check(manual("New"))
            .and_then(|save| save.create(None, never))
            .expect("created");
        assert_eq!(created.version.current(), 1, "a create is version 1");
    }

    #[test]
    fn an_empty_webhook_token_finds_nothing() {
        assert_eq!(webhook_lookup(""), None, "empty");
        assert_eq!(
            webhook_lookup("wh_x"),
            Some("wh_x"),
            "any other is looked up"
        );
    }

    #[test]
    fn the_guard_admits_fewer_than_max_in_a_window_of_whole_milliseconds() {
        let now = at(5) + TimeDelta::microseconds(700);
        let guard = GuardAdmission::new(now, Duration::from_secs(60), 5);
        assert_eq!(guard.now, at(5), "whole milliseconds");
        assert_eq!(guard.since, at(5 - 60_000), "the window reaches back 60 s");
        assert!(guard.admits(4), "the fifth run is admitted");
        assert!(!guard.admits(5), "the sixth is not");
        let endless = GuardAdmission::new(now, Duration::MAX, 1);
        assert_eq!(
            endless.since,
            DateTime::<Utc>::MIN_UTC,
            "a window longer than time reaches back to the start"
        );
    }

    #[test]
    fn the_guard_names_the_missing_target() {
        let guard = GuardAdmission::new(at(0), Duration::from_secs(60), 5);
        assert_eq!(
            guard.targets(false, false),
            Err(DeskError::NotFound("automation")),
            "the automation first"
        );
        assert_eq!(
            guard.targets(true, false),
            Err(DeskError::NotFound("ticket")),
            "then the ticket"
        );
        assert_eq!(guard.targets(true, true), Ok(()), "both found");
    }

    #[test]
    fn a_delete_that_found_nothing_names_what_it_looked_for() {
        assert_eq!(
            deleted(0, names::SECRET),
            Err(DeskError::NotFound("secret")),
            "nothing deleted"
        );
        assert_eq!(deleted(1, names::SECRET), Ok(()), "one row deleted");
    }
}
