//! Dashboard widgets over connector data: a widget is one connector call (`http/request`
//! or `mcp/call-tool`) whose answer the server caches for `ttlSec`, so opening the
//! dashboard does not cost a call per tile to services that have limits and cost money.
//!
//! ```json
//! {"name": "Open invoices", "op": "http/request", "service": "billing",
//!  "input": {"url": "https://billing.test/invoices/count",
//!            "headers": {"Authorization": "Bearer {{secrets.billing}}"}},
//!  "path": "body.count", "ttlSec": 300}
//! ```
//!
//! - `input` has the shape of the op's step input and may name only
//!   `{{secrets.<name>}}` (there is no trigger or step to provide anything else); it is
//!   checked on save by [`crate::validate::connector_call`].
//! - `path` picks part of the call's outputs (`body.count`, `body.items.0.total`: dot
//!   segments, numeric ones index arrays, as in the webhook contract); without it the
//!   data is the whole outputs object (`status`, `headers`, `body` for `http/request`).
//! - `ttlSec` is bounded by the operator's [`WidgetLimits`].
//!
//! # Serving ([`WidgetService::read`])
//!
//! A read that is not forced first looks at the widget (no write): fresh, or being
//! refreshed by another reader, it is answered at once. Otherwise:
//!
//! ```text
//!  read(widget, force) ──► store: widget_claim ──┬─ Fresh  (last attempt < ttlSec ago) ──► the cache, no call
//!                                                ├─ Busy   (another reader holds the lease) ─► the cache, refreshing: true
//!                                                └─ Claimed(token) ──► reveal secrets, render, call through the
//!                                                     guarded connectors (SSRF guard, caps and breaker), scrub,
//!                                                     pick `path` ──► store: widget_settle(token, outcome) ──► the new view
//! ```
//!
//! Decisions:
//! - **Freshness is judged on the last attempt**, not on the last success: a widget whose
//!   call failed is not called again by readers until `ttlSec` has passed (a forced
//!   refresh may go sooner). A failing service is therefore asked at most once per
//!   `ttlSec` per widget, and its breaker (per tenant and service) still applies.
//! - **One call per widget at a time, across processes**: a stale read claims the widget
//!   with a lease (a token and an expiry in the widget's row, taken atomically by the
//!   store). A concurrent reader does not wait and does not call: it gets the cached
//!   data (stale, or none yet) marked `refreshing`. A lease whose holder died expires
//!   after [`WidgetLimits::lease`]; its late answer is refused by the token check.
//! - **A failed call keeps the data**: the error and its time are stored beside the old
//!   data, whose age keeps growing, and both are answered.
//! - **"Not now"** (a full cap or an open breaker: the call was not made) changes nothing
//!   in the cache; the reader gets the cache and the reason, a forced refresh answers it
//!   as an error with the wait (the server: 503 with `Retry-After`).
//! - **Changing the call** (`op`, `service`, `input`, `path`) clears the cache and any
//!   lease, so data of the old call is never shown for the new one; renaming or a new
//!   `ttlSec` keeps it.
//! - **Secrets**: revealed only into the rendered input of the call; the outputs and
//!   every message are scrubbed ([`Revealed::scrub_value`]) before anything is picked,
//!   stored, logged or answered.
//! - Time is the store's clock (`now` in every [`WidgetView`]), like every other port.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_desk::{DeskError, TenantId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::catalogue::Op;
use crate::connector::{self, Connector, ConnectorCall, ConnectorFailure};
use crate::context::Context;
use crate::model::ActionStep;
use crate::problem::Problem;
use crate::secrets::{self, Revealed, SecretVault, WithSecrets};
use crate::store::{StoreResult, names};
use crate::{contract, template, validate};

/// Default shortest `ttlSec` (`FRONTA_WIDGET_MIN_TTL`).
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(10);
/// Default longest `ttlSec` (`FRONTA_WIDGET_MAX_TTL`).
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Default most widgets per tenant (`FRONTA_WIDGET_MAX_PER_TENANT`).
pub const DEFAULT_MAX_PER_TENANT: usize = 50;
/// Default largest cached data, as compact JSON (`FRONTA_WIDGET_MAX_DATA_BYTES`).
pub const DEFAULT_MAX_DATA_BYTES: usize = 64 * 1024;
/// Default lease of a widget's refresh (`FRONTA_WIDGET_LEASE`): longer than any
/// connector call may take, so only a crashed process's lease ever expires.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(600);
/// The longest widget name, in characters.
pub const MAX_NAME_CHARS: usize = 100;
/// The longest `service`.
pub const MAX_SERVICE: usize = 64;
/// The longest `path`.
pub const MAX_PATH: usize = 256;

/// The operator's limits on widgets (see the `DEFAULT_*` constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WidgetLimits {
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    pub max_per_tenant: usize,
    pub max_data_bytes: usize,
    pub lease: Duration,
}

impl Default for WidgetLimits {
    fn default() -> Self {
        Self {
            min_ttl: DEFAULT_MIN_TTL,
            max_ttl: DEFAULT_MAX_TTL,
            max_per_tenant: DEFAULT_MAX_PER_TENANT,
            max_data_bytes: DEFAULT_MAX_DATA_BYTES,
            lease: DEFAULT_LEASE,
        }
    }
}

impl WidgetLimits {
    /// Refuses limits that make no sense.
    pub fn check(&self) -> Result<(), String> {
        if self.min_ttl.is_zero() || self.max_ttl < self.min_ttl {
            return Err(format!(
                "widget ttl limits: 0 < min ({:?}) ≤ max ({:?})",
                self.min_ttl, self.max_ttl
            ));
        }
        if self.max_per_tenant == 0 || self.max_data_bytes == 0 || self.lease.is_zero() {
            return Err(
                "widget limits: the per-tenant count, the data size and the lease must be above 0"
                    .to_owned(),
            );
        }
        Ok(())
    }
}

/// A widget's definition (what is saved; the id is the store's row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WidgetDef {
    pub name: String,
    pub op: Op,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(default)]
    pub input: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub ttl_sec: u64,
}

/// The fields of a widget in JSON.
pub const FIELDS: [&str; 6] = ["name", "op", "service", "input", "path", "ttlSec"];

impl WidgetDef {
    /// Reads a definition from JSON, naming the field of every problem of shape (an
    /// unknown field, a missing one, a wrong type). `null` leaves `service` and `path`
    /// out. Check the values with [`WidgetDef::problems`] afterwards.
    pub fn from_json(value: &Value) -> Result<WidgetDef, Vec<Problem>> {
        let Value::Object(map) = value else {
            return Err(vec![Problem::new(
                "",
                "a widget is a JSON object: {\"name\", \"op\", \"input\", \"ttlSec\", …}",
            )]);
        };
        let mut problems = Vec::new();
        for key in map.keys() {
            if !FIELDS.contains(&key.as_str()) {
                problems.push(Problem::new(
                    key.as_str(),
                    format!("unknown field (a widget has: {})", FIELDS.join(", ")),
                ));
            }
        }
        let mut text = |key: &str, required: bool| -> Option<String> {
            match map.get(key) {
                Some(Value::String(text)) => Some(text.clone()),
                None | Some(Value::Null) if !required => None,
                None | Some(Value::Null) => {
                    problems.push(Problem::new(key, "required"));
                    None
                }
                Some(other) => {
                    problems.push(Problem::new(
                        key,
                        format!("must be a string, found {other}"),
                    ));
                    None
                }
            }
        };
        let name = text("name", true);
        let op = text("op", true);
        let service = text("service", false);
        let path = text("path", false);
        let input = match map.get("input") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(input)) => input.clone(),
            Some(other) => {
                problems.push(Problem::new(
                    "input",
                    format!("must be an object (the op's input), found {other}"),
                ));
                Map::new()
            }
        };
        let ttl_sec = match map.get("ttlSec") {
            Some(Value::Number(number)) if number.as_u64().is_some() => number.as_u64(),
            None | Some(Value::Null) => {
                problems.push(Problem::new(
                    "ttlSec",
                    "required (seconds the data is kept)",
                ));
                None
            }
            Some(other) => {
                problems.push(Problem::new(
                    "ttlSec",
                    format!("must be a whole number of seconds, found {other}"),
                ));
                None
            }
        };
        match (name, op, ttl_sec) {
            (Some(name), Some(op), Some(ttl_sec)) if problems.is_empty() => Ok(WidgetDef {
                name,
                op: Op::parse(&op),
                service,
                input,
                path,
                ttl_sec,
            }),
            _ => Err(problems),
        }
    }

    /// Every problem of this definition, each naming its field (`name`, `op`, `service`,
    /// `input.url`, `path`, `ttlSec`); empty when it may be saved.
    pub fn problems(&self, limits: &WidgetLimits) -> Vec<Problem> {
        let mut problems = Vec::new();
        let chars = self.name.chars().count();
        if self.name.trim().is_empty() || chars > MAX_NAME_CHARS {
            problems.push(Problem::new(
                "name",
                format!("a widget needs a name of 1 to {MAX_NAME_CHARS} characters, found {chars}"),
            ));
        }
        if let Some(service) = &self.service
            && (service.is_empty()
                || service.len() > MAX_SERVICE
                || !service
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b)))
        {
            problems.push(Problem::new(
                "service",
                format!(
                    "service {service:?} must have 1 to {MAX_SERVICE} of letters, digits, '_', '-', '.', '/'"
                ),
            ));
        }
        problems.extend(validate::connector_call(&self.action()));
        if let Some(path) = &self.path {
            if let Some(reason) = contract::path_problem(path) {
                problems.push(Problem::new("path", format!("path {path:?}: {reason}")));
            } else if path.len() > MAX_PATH {
                problems.push(Problem::new(
                    "path",
                    format!(
                        "a path has at most {MAX_PATH} characters, found {}",
                        path.len()
                    ),
                ));
            }
        }
        let (min, max) = (limits.min_ttl.as_secs(), limits.max_ttl.as_secs());
        if self.ttl_sec < min || self.ttl_sec > max {
            problems.push(Problem::new(
                "ttlSec",
                format!(
                    "ttlSec must be between {min} and {max} seconds, found {}",
                    self.ttl_sec
                ),
            ));
        }
        problems
    }

    /// The call as a step, for validation and rendering.
    pub fn action(&self) -> ActionStep {
        ActionStep {
            name: "widget".to_owned(),
            op: self.op.clone(),
            service: self.service.clone(),
            input: self.input.clone(),
        }
    }

    /// Whether `other` makes a different call (so this one's cache does not hold for it).
    pub fn same_call(&self, other: &WidgetDef) -> bool {
        self.op == other.op
            && self.service == other.service
            && self.input == other.input
            && self.path == other.path
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_sec)
    }
}

/// A saved widget.
#[derive(Debug, Clone, PartialEq)]
pub struct Widget {
    pub id: Uuid,
    pub def: WidgetDef,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What the cache holds for one widget.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WidgetCache {
    /// The data of the last successful call (`path` applied), scrubbed.
    pub data: Option<Value>,
    /// When that call answered (the store's clock).
    pub fetched_at: Option<DateTime<Utc>>,
    /// When the last call (success or failure) ended: freshness is judged on it.
    pub checked_at: Option<DateTime<Utc>>,
    /// Why the last call failed, when it did (cleared by a success), scrubbed.
    pub error: Option<String>,
    pub error_at: Option<DateTime<Utc>>,
}

impl WidgetCache {
    /// The cache after a claimed call ended at `now` (the store's settle, once it knows
    /// the token still holds the lease): `Data` replaces the data, stamps `fetched_at`
    /// and `checked_at` and clears the error; `Failed` keeps the data and its age,
    /// records the error and stamps `error_at` and `checked_at`; `NotMade` changes
    /// nothing.
    pub fn settled(self, outcome: Fetched, now: DateTime<Utc>) -> WidgetCache {
        match outcome {
            Fetched::Data(data) => WidgetCache {
                data: Some(data),
                fetched_at: Some(now),
                checked_at: Some(now),
                error: None,
                error_at: None,
            },
            Fetched::Failed(message) => WidgetCache {
                checked_at: Some(now),
                error: Some(message),
                error_at: Some(now),
                ..self
            },
            Fetched::NotMade => self,
        }
    }
}

/// A widget with its cache, as the store answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct WidgetView {
    pub widget: Widget,
    pub cache: WidgetCache,
    /// A refresh holds an unexpired lease (another reader is calling out now).
    pub refreshing: bool,
    /// The store's now when this was read: ages are measured from it.
    pub now: DateTime<Utc>,
}

impl WidgetView {
    /// A widget as a store read it, seen at the store's `now`: `refreshing` while a lease
    /// is held that expires after `now`.
    pub fn at(
        widget: Widget,
        cache: WidgetCache,
        lease_until: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Self {
        WidgetView {
            widget,
            cache,
            refreshing: lease_until.is_some_and(|until| until > now),
            now,
        }
    }

    /// Whether a reader would call out: no attempt yet, or the last one `ttlSec` ago or more.
    pub fn fresh(&self) -> bool {
        is_fresh(&self.cache, self.widget.def.ttl(), self.now)
    }

    /// The data's age, `None` without data.
    pub fn age(&self) -> Option<Duration> {
        self.cache
            .fetched_at
            .map(|at| (self.now - at).to_std().unwrap_or_default())
    }

    /// The data is missing or older than `ttlSec` (the last call failed or is running).
    pub fn stale(&self) -> bool {
        self.age().is_none_or(|age| age >= self.widget.def.ttl())
    }
}

/// The freshness rule (see the module's decisions): fresh while the last attempt ended
/// less than `ttl` before `now`.
pub fn is_fresh(cache: &WidgetCache, ttl: Duration, now: DateTime<Utc>) -> bool {
    cache
        .checked_at
        .is_some_and(|at| now < fronta_engine::clock::add(at, ttl))
}

/// What a claim answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Fresh and not forced: serve the cache, call nothing.
    Fresh(WidgetView),
    /// Another reader holds an unexpired lease: serve the cache, call nothing.
    Busy(WidgetView),
    /// This caller holds the lease: call, then settle with `token`.
    Claimed { token: String, view: WidgetView },
}

/// What a claim writes and answers, planned by [`plan_claim`].
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimPlan<T> {
    /// The lease to take; `None`: nothing to write (`Fresh` or `Busy`).
    pub lease: Option<Lease<T>>,
    pub answer: Claim,
}

/// A widget's refresh lease: the store's `token`, expiring at `until`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease<T> {
    pub token: T,
    pub until: DateTime<Utc>,
}

/// A claim of the widget a store read (`None`: the tenant has no such widget,
/// `NotFound`), seen at the store's now (after its lock, so a claimer that waited sees
/// the other's lease): with `force` false and a fresh cache ([`is_fresh`]) `Fresh`; else,
/// while another holds an unexpired lease, `Busy`; else the lease, with the token `token`
/// makes, expiring `lease` after now.
pub fn plan_claim<T: ToString>(
    stored: Option<WidgetView>,
    force: bool,
    lease: Duration,
    token: impl FnOnce() -> T,
) -> StoreResult<ClaimPlan<T>> {
    let view = stored.ok_or(DeskError::NotFound(names::WIDGET))?;
    let answer = |answer| ClaimPlan {
        lease: None,
        answer,
    };
    if !force && view.fresh() {
        return Ok(answer(Claim::Fresh(view)));
    }
    if view.refreshing {
        return Ok(answer(Claim::Busy(view)));
    }
    let token = token();
    Ok(ClaimPlan {
        answer: Claim::Claimed {
            token: token.to_string(),
            view: WidgetView {
                refreshing: true,
                ..view.clone()
            },
        },
        lease: Some(Lease {
            token,
            until: fronta_engine::clock::add(view.now, lease),
        }),
    })
}

/// A create when the tenant has `count` widgets already: at `max` it is refused
/// (`Conflict`, saying both numbers) and nothing is stored; else the widget to insert
/// and answer, with its new `id` and an empty cache, created and updated at `now`.
pub fn plan_create(
    def: WidgetDef,
    count: u64,
    max: usize,
    id: Uuid,
    now: DateTime<Utc>,
) -> StoreResult<Widget> {
    if usize::try_from(count).unwrap_or(usize::MAX) >= max {
        return Err(DeskError::Conflict(format!(
            "the tenant has {count} widgets, the most allowed is {max}"
        )));
    }
    fronta_engine::audit::created(&id);
    Ok(Widget {
        id,
        def,
        created_at: now,
        updated_at: now,
    })
}

/// An update of the widget a store read (`None`: the tenant has no such widget,
/// `NotFound`): the widget to write and answer, `def` replacing the definition and
/// `updated_at` moved to `now`. Emptying the cache is the caller's `reset`.
pub fn plan_update(
    stored: Option<Widget>,
    def: WidgetDef,
    now: DateTime<Utc>,
) -> StoreResult<Widget> {
    let stored = stored.ok_or(DeskError::NotFound(names::WIDGET))?;
    Ok(Widget {
        id: stored.id,
        def,
        created_at: stored.created_at,
        updated_at: now,
    })
}

/// How a claimed call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Fetched {
    /// The data (scrubbed, `path` applied): replaces the cache, clears the error.
    Data(Value),
    /// The call failed (scrubbed message): the data stays, the error is recorded.
    Failed(String),
    /// The call was not made (a full cap, an open breaker): the cache stays as it was.
    NotMade,
}

/// Dashboard widgets and their cached data, per tenant, shared by every process on one
/// database.
///
/// # Contract
///
/// - Every method is scoped by tenant; another tenant's widget answers exactly like one
///   that does not exist (`NotFound` or `None`). A write for an unknown tenant is
///   `NotFound`.
/// - `widget_create` stores a new widget with a fresh id and an empty cache; when the
///   tenant has `max` widgets already it answers `Conflict` and stores nothing (counted
///   in the same transaction, so racing creates cannot pass the limit).
/// - `widget_update` replaces the definition (`updated_at` moves); when `reset` it also
///   empties the cache and drops any lease (the call changed); `NotFound` when missing.
/// - `widget_get` / `widget_list` answer the widget(s) with the cache, whether an
///   unexpired lease is held, and the store's now; the list is ordered by name, then id.
/// - `widget_delete` removes the widget and its cache; `NotFound` when missing.
/// - `widget_claim` is atomic per widget, in one process or across processes: with
///   `force` false and the cache fresh by [`is_fresh`] it answers `Fresh`; else, when an
///   unexpired lease is held, `Busy`; else it takes the lease (a new random token,
///   expiring `lease` after the store's now) and answers `Claimed`. Of two racing
///   claimers of a stale widget exactly one gets `Claimed`.
/// - `widget_settle` applies the outcome only when `token` still holds the lease (not
///   taken over after expiry, not dropped by a reset or a delete): `Data` sets the data,
///   `fetched_at` and `checked_at` to now and clears the error; `Failed` keeps the data,
///   sets the error, `error_at` and `checked_at` to now; `NotMade` changes no cache field.
///   Each releases the lease and answers the view; a lost lease answers `None` and
///   changes nothing.
/// - Storage errors are `DeskError::Unavailable`; nothing is half written.
#[async_trait]
pub trait WidgetStore: Send + Sync + 'static {
    async fn widget_create(
        &self,
        tenant: TenantId,
        def: WidgetDef,
        max: usize,
    ) -> StoreResult<Widget>;
    async fn widget_update(
        &self,
        tenant: TenantId,
        id: Uuid,
        def: WidgetDef,
        reset: bool,
    ) -> StoreResult<Widget>;
    async fn widget_get(&self, tenant: TenantId, id: Uuid) -> StoreResult<Option<WidgetView>>;
    async fn widget_list(&self, tenant: TenantId) -> StoreResult<Vec<WidgetView>>;
    async fn widget_delete(&self, tenant: TenantId, id: Uuid) -> StoreResult<()>;
    async fn widget_claim(
        &self,
        tenant: TenantId,
        id: Uuid,
        force: bool,
        lease: Duration,
    ) -> StoreResult<Claim>;
    async fn widget_settle(
        &self,
        tenant: TenantId,
        id: Uuid,
        token: &str,
        outcome: Fetched,
    ) -> StoreResult<Option<WidgetView>>;
}

/// One read of a widget: the view to answer and what happened on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub view: WidgetView,
    /// This read called the connector.
    pub called: bool,
    /// The call was not made now (a full cap, an open breaker): wait this long. Scrubbed
    /// message beside it.
    pub not_now: Option<(Duration, String)>,
}

/// Serves widgets from the cache and refreshes them through the connectors (see the
/// module's docs).
#[derive(Clone)]
pub struct WidgetService {
    pub store: Arc<dyn WidgetStore>,
    /// The guarded connectors (SSRF guard, caps and breaker); `None`: every refresh fails
    /// with "not available".
    pub connectors: Option<Arc<dyn Connector>>,
    pub vault: SecretVault,
    pub limits: WidgetLimits,
}

impl std::fmt::Debug for WidgetService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WidgetService")
            .field("limits", &self.limits)
            .finish()
    }
}

impl WidgetService {
    /// The widget, refreshed first when it is stale (or `force`) and no other reader is
    /// refreshing it. `NotFound` when there is no such widget for this tenant.
    pub async fn read(&self, tenant: TenantId, id: Uuid, force: bool) -> StoreResult<Reading> {
        // A plain read first: a fresh widget (the common case) costs no write.
        if !force {
            let view = self
                .store
                .widget_get(tenant, id)
                .await?
                .ok_or(DeskError::NotFound(names::WIDGET))?;
            if view.fresh() || view.refreshing {
                tracing::debug!(%tenant, widget = %id, refreshing = view.refreshing, "widget served from its cache");
                return Ok(Reading {
                    view,
                    called: false,
                    not_now: None,
                });
            }
        }
        let claim = self
            .store
            .widget_claim(tenant, id, force, self.limits.lease)
            .await?;
        let (token, claimed) = match claim {
            Claim::Fresh(view) => {
                tracing::debug!(%tenant, widget = %id, "widget served from a fresh cache");
                return Ok(Reading {
                    view,
                    called: false,
                    not_now: None,
                });
            }
            Claim::Busy(view) => {
                tracing::info!(%tenant, widget = %id, force, "widget being refreshed by another reader: the cache is served");
                return Ok(Reading {
                    view,
                    called: false,
                    not_now: None,
                });
            }
            Claim::Claimed { token, view } => (token, view),
        };
        let def = &claimed.widget.def;
        tracing::info!(%tenant, widget = %id, force, op = %def.op, service = ?def.service, "widget refresh: calling out");
        let (outcome, not_now) = self.call(tenant, id, def).await;
        match &outcome {
            Fetched::Data(_) => {
                tracing::info!(%tenant, widget = %id, "widget refreshed")
            }
            Fetched::Failed(message) => {
                tracing::warn!(%tenant, widget = %id, error = %message, "widget refresh failed: the old data is kept")
            }
            Fetched::NotMade => {
                tracing::info!(%tenant, widget = %id, reason = ?not_now.as_ref().map(|n| &n.1), "widget refresh not made now (cap or breaker)")
            }
        }
        let settled = self
            .store
            .widget_settle(tenant, id, &token, outcome)
            .await?;
        let view = match settled {
            Some(view) => view,
            None => {
                tracing::warn!(%tenant, widget = %id, "widget refresh lost its lease (changed, deleted or taken over): its answer was dropped");
                self.store
                    .widget_get(tenant, id)
                    .await?
                    .ok_or(DeskError::NotFound(names::WIDGET))?
            }
        };
        Ok(Reading {
            view,
            called: true,
            not_now,
        })
    }

    /// Reveal, render, call, scrub, pick: the outcome to settle with.
    async fn call(
        &self,
        tenant: TenantId,
        id: Uuid,
        def: &WidgetDef,
    ) -> (Fetched, Option<(Duration, String)>) {
        let names = secrets::names_in(&def.input);
        let revealed = match self.vault.reveal(tenant, &names).await {
            Ok(revealed) => revealed,
            Err(err) => return (Fetched::Failed(err.message), None),
        };
        let empty = Context::new();
        let scope = WithSecrets {
            context: &empty,
            revealed: &revealed,
        };
        let input = match template::render_map(&def.input, &scope) {
            Ok(input) => input,
            Err(err) => return (Fetched::Failed(revealed.scrub(&err.to_string())), None),
        };
        let run_id = format!("widget:{id}");
        let answer = match &self.connectors {
            None => Err(connector::not_installed(&def.op)),
            Some(connectors) => {
                connectors
                    .call(ConnectorCall {
                        op: &def.op,
                        tenant,
                        service: def.service.as_deref(),
                        input,
                        secrets: &revealed,
                        run_id: &run_id,
                        step_name: &def.name,
                    })
                    .await
            }
        };
        match answer {
            Ok(reply) => (
                pick(
                    &revealed,
                    Value::Object(reply.outputs),
                    def,
                    self.limits.max_data_bytes,
                ),
                None,
            ),
            Err(ConnectorFailure {
                not_now: Some(wait),
                message,
                ..
            }) => (Fetched::NotMade, Some((wait, revealed.scrub(&message)))),
            Err(failure) => (Fetched::Failed(revealed.scrub(&failure.message)), None),
        }
    }
}

/// The data a widget keeps of a call's outputs: scrubbed, `path` applied, within the
/// size limit.
pub fn pick(revealed: &Revealed, outputs: Value, def: &WidgetDef, max_bytes: usize) -> Fetched {
    let outputs = revealed.scrub_value(outputs);
    let data = match &def.path {
        None => outputs,
        Some(path) => match template::walk(&outputs, path) {
            Some(found) => found.clone(),
            None => {
                return Fetched::Failed(format!(
                    "path {path:?} finds nothing in the answer ({} answers: {})",
                    def.op,
                    def.op.outputs().join(", ")
                ));
            }
        },
    };
    let size = serde_json::to_string(&data).map_or(0, |text| text.len());
    if size > max_bytes {
        return Fetched::Failed(format!(
            "the data is {size} bytes, more than the {max_bytes} a widget may keep: pick less with \"path\""
        ));
    }
    Fetched::Data(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use serde_json::json;

    fn def(value: Value) -> WidgetDef {
        serde_json::from_value(value).expect("a widget parses")
    }

    fn fields(problems: &[Problem]) -> Vec<&str> {
        problems.iter().map(|p| p.path.as_str()).collect()
    }

    #[test]
    fn a_good_definition_has_no_problems() {
        let widget = def(json!({
            "name": "Open invoices", "op": "http/request", "service": "billing",
            "input": {"url": "https://billing.test/count",
                      "headers": {"Authorization": "Bearer {{secrets.billing}}"}},
            "path": "body.count", "ttlSec": 300
        }));
        assert_eq!(widget.problems(&WidgetLimits::default()), vec![]);
        let mcp = def(json!({"name": "CRM", "op": "mcp/call-tool",
            "input": {"server": "crm", "tool": "count"}, "ttlSec": 60}));
        assert_eq!(mcp.problems(&WidgetLimits::default()), vec![]);
    }

    #[test]
    fn every_bad_field_is_named() {
        let widget = def(json!({
            "name": " ", "op": "ticket/close", "ttlSec": 1, "path": "body..x",
            "service": "no spaces"
        }));
        let problems = widget.problems(&WidgetLimits::default());
        assert_eq!(
            fields(&problems),
            vec!["name", "service", "op", "path", "ttlSec"],
            "{problems:?}"
        );
        let input = def(json!({
            "name": "x", "op": "http/request", "ttlSec": 60,
            "input": {"url": "ftp://x/{{ticket.id}}", "method": "FETCH", "bogus": 1}
        }));
        let problems = input.problems(&WidgetLimits::default());
        assert_eq!(
            fields(&problems),
            vec!["input.bogus", "input.url", "input.method"],
            "{problems:?}"
        );
        assert!(
            problems[1].message.contains("only {{secrets.<name>}}"),
            "{problems:?}"
        );
        let missing = def(json!({"name": "x", "op": "http/request", "ttlSec": 60}));
        assert_eq!(
            fields(&missing.problems(&WidgetLimits::default())),
            vec!["input.url"]
        );
    }

    #[test]
    fn shape_problems_name_their_field() {
        let problems = WidgetDef::from_json(&json!({
            "name": 5, "input": [], "ttlSec": "60", "colour": "red"
        }))
        .expect_err("bad shape");
        assert_eq!(
            fields(&problems),
            vec!["colour", "name", "op", "input", "ttlSec"],
            "{problems:?}"
        );
        let good = WidgetDef::from_json(&json!({"name": "x", "op": "http/request",
            "input": {"url": "https://x.test"}, "ttlSec": 60, "path": null}))
        .expect("good shape");
        assert_eq!(good.path, None);
        assert_eq!(
            serde_json::to_value(&good).expect("serializes"),
            json!({"name": "x", "op": "http/request", "input": {"url": "https://x.test"}, "ttlSec": 60})
        );
    }

    #[test]
    fn ttl_bounds_are_the_operators() {
        let limits = WidgetLimits {
            min_ttl: Duration::from_secs(30),
            max_ttl: Duration::from_secs(60),
            ..WidgetLimits::default()
        };
        let widget = |ttl: u64| {
            def(json!({"name": "x", "op": "http/request",
                "input": {"url": "https://x.test"}, "ttlSec": ttl}))
        };
        assert!(widget(30).problems(&limits).is_empty());
        assert!(widget(60).problems(&limits).is_empty());
        let problems = widget(61).problems(&limits);
        assert_eq!(
            problems[0].message,
            "ttlSec must be between 30 and 60 seconds, found 61"
        );
        assert_eq!(fields(&widget(29).problems(&limits)), vec!["ttlSec"]);
    }

    #[test]
    fn freshness_is_judged_on_the_last_attempt() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).expect("an instant");
        let ttl = Duration::from_secs(60);
        assert!(!is_fresh(&WidgetCache::default(), ttl, at), "never tried");
        let cache = WidgetCache {
            checked_at: Some(at),
            ..WidgetCache::default()
        };
        assert!(is_fresh(&cache, ttl, at + chrono::Duration::seconds(59)));
        assert!(!is_fresh(&cache, ttl, at + chrono::Duration::seconds(60)));
    }

    #[test]
    fn pick_scrubs_then_applies_the_path_and_the_size_limit() {
        let revealed = Revealed::new(BTreeMap::from([("k".to_owned(), "s3cr3t".to_owned())]));
        let widget = def(json!({"name": "x", "op": "http/request",
            "input": {"url": "https://x.test"}, "path": "body.items.1", "ttlSec": 60}));
        let outputs = json!({"status": 200, "body": {"items": ["a", "echo s3cr3t"]}});
        assert_eq!(
            pick(&revealed, outputs.clone(), &widget, 1000),
            Fetched::Data(json!("echo [secret k]"))
        );
        let Fetched::Failed(message) = pick(&revealed, outputs.clone(), &widget, 5) else {
            panic!("too big")
        };
        assert!(message.contains("more than the 5"), "{message}");
        let nothing = WidgetDef {
            path: Some("body.count".into()),
            ..widget
        };
        let Fetched::Failed(message) = pick(&revealed, outputs, &nothing, 1000) else {
            panic!("a path finding nothing")
        };
        assert!(
            message.contains("\"body.count\" finds nothing"),
            "{message}"
        );
    }

    fn instant(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).expect("an instant")
    }

    fn saved(ttl: u64) -> Widget {
        Widget {
            id: Uuid::nil(),
            def: def(json!({"name": "x", "op": "http/request",
                "input": {"url": "https://x.test"}, "ttlSec": ttl})),
            created_at: instant(0),
            updated_at: instant(0),
        }
    }

    #[test]
    fn a_create_at_the_tenants_limit_is_refused_saying_both_numbers() {
        let widget = saved(60);
        let refused = plan_create(widget.def.clone(), 3, 3, Uuid::nil(), instant(5))
            .expect_err("at the limit");
        assert_eq!(
            refused,
            DeskError::Conflict("the tenant has 3 widgets, the most allowed is 3".into()),
            "says the count and the limit"
        );
        let created = plan_create(widget.def.clone(), 2, 3, Uuid::max(), instant(5))
            .expect("under the limit");
        assert_eq!(
            (created.id, created.created_at, created.updated_at),
            (Uuid::max(), instant(5), instant(5)),
            "the new id, created and updated now"
        );
    }

    #[test]
    fn an_update_keeps_the_creation_and_moves_updated_at() {
        let stored = saved(60);
        let renamed = WidgetDef {
            name: "y".into(),
            ..stored.def.clone()
        };
        let updated =
            plan_update(Some(stored.clone()), renamed.clone(), instant(9)).expect("found");
        assert_eq!(
            updated,
            Widget {
                def: renamed.clone(),
                updated_at: instant(9),
                ..stored
            },
            "the new definition, created_at kept"
        );
        assert_eq!(
            plan_update(None, renamed, instant(9)),
            Err(DeskError::NotFound("widget")),
            "a missing widget"
        );
    }

    #[test]
    fn a_view_is_refreshing_only_while_its_lease_is_unexpired() {
        let view = |lease: Option<i64>| {
            WidgetView::at(
                saved(60),
                WidgetCache::default(),
                lease.map(instant),
                instant(10),
            )
            .refreshing
        };
        assert!(view(Some(11)), "a lease expiring later");
        assert!(!view(Some(10)), "a lease expiring now is gone");
        assert!(!view(None), "no lease");
    }

    #[test]
    fn a_claim_serves_fresh_data_leaves_a_held_lease_and_otherwise_takes_the_lease() {
        let cache = WidgetCache {
            checked_at: Some(instant(0)),
            ..WidgetCache::default()
        };
        let lease = Duration::from_secs(600);
        let fresh = WidgetView::at(saved(60), cache.clone(), None, instant(30));
        let never = || -> Uuid { panic!("no token for a claim that takes nothing") };
        assert_eq!(
            plan_claim(Some(fresh.clone()), false, lease, never),
            Ok(ClaimPlan {
                lease: None,
                answer: Claim::Fresh(fresh.clone())
            }),
            "fresh and not forced"
        );
        let held = WidgetView::at(saved(60), cache.clone(), Some(instant(90)), instant(30));
        assert_eq!(
            plan_claim(Some(held.clone()), true, lease, never),
            Ok(ClaimPlan {
                lease: None,
                answer: Claim::Busy(held)
            }),
            "forced, but another holds the lease"
        );
        let stale = WidgetView::at(saved(60), cache, None, instant(60));
        let Ok(ClaimPlan {
            lease: Some(Lease { token, until }),
            answer,
        }) = plan_claim(Some(stale.clone()), false, lease, Uuid::max)
        else {
            panic!("a stale widget is claimed")
        };
        assert_eq!((token, until), (Uuid::max(), instant(660)), "the lease");
        assert_eq!(
            answer,
            Claim::Claimed {
                token: Uuid::max().to_string(),
                view: WidgetView {
                    refreshing: true,
                    ..stale
                },
            },
            "answered as refreshing, with the token"
        );
        assert_eq!(
            plan_claim(None, false, lease, never),
            Err(DeskError::NotFound("widget")),
            "a missing widget"
        );
    }

    #[test]
    fn a_settle_replaces_the_data_keeps_it_beside_an_error_or_changes_nothing() {
        let old = WidgetCache {
            data: Some(json!(1)),
            fetched_at: Some(instant(0)),
            checked_at: Some(instant(0)),
            error: Some("earlier".into()),
            error_at: Some(instant(0)),
        };
        assert_eq!(
            old.clone().settled(Fetched::Data(json!(2)), instant(9)),
            WidgetCache {
                data: Some(json!(2)),
                fetched_at: Some(instant(9)),
                checked_at: Some(instant(9)),
                error: None,
                error_at: None,
            },
            "new data, the error cleared"
        );
        assert_eq!(
            old.clone()
                .settled(Fetched::Failed("down".into()), instant(9)),
            WidgetCache {
                checked_at: Some(instant(9)),
                error: Some("down".into()),
                error_at: Some(instant(9)),
                ..old.clone()
            },
            "the data and its age kept beside the error"
        );
        assert_eq!(
            old.clone().settled(Fetched::NotMade, instant(9)),
            old,
            "a call not made changes nothing"
        );
    }
}
