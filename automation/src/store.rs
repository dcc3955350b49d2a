//! The [`AutomationStore`] port: saved automations of a tenant, their webhook tokens, and
//! the loop guard's per-ticket counter. Stores implement it beside `RunStore` and
//! `DeskStore`; errors reuse the desk's kinds ([`DeskError`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_desk::{DeskError, TenantId, TicketId};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::Automation;

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
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
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
    ) -> StoreResult<StoredAutomation>;
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
    ) -> StoreResult<StoredAutomation>;
    async fn automation_set_enabled(
        &self,
        tenant: TenantId,
        id: AutomationId,
        enabled: bool,
    ) -> StoreResult<StoredAutomation>;
    async fn automation_delete(&self, tenant: TenantId, id: AutomationId) -> StoreResult<()>;
    async fn automation_by_webhook_token(
        &self,
        token: &str,
    ) -> StoreResult<Option<StoredAutomation>>;
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
}

/// What a store calls inside the transaction of a ticket write that changed something
/// and that at least one **enabled** automation of the tenant listens to (its trigger is
/// that event); it gets the event and those automations' ids (oldest first), and the runs
/// it answers are inserted in that same transaction. The automation runtime installs one
/// that answers one automation run per listener (see `executor::event_sink`).
pub type TicketEventSink = std::sync::Arc<
    dyn Fn(&fronta_desk::store::TicketEvent, &[AutomationId]) -> Vec<fronta_engine::NewRun>
        + Send
        + Sync,
>;
