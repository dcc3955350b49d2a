//! The desk's entities. Ids are UUIDv7 (sortable by creation); every entity but the
//! tenant carries its tenant, and every read of the port is scoped by it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub uuid::Uuid);

        impl $name {
            pub fn new() -> Self {
                Self(uuid::Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                uuid::Uuid::parse_str(text).map(Self)
            }
        }
    };
}

pub(crate) use id_type;

id_type!(
    /// A firm using fronta.
    TenantId
);
id_type!(GroupId);
id_type!(MemberId);
id_type!(TicketTypeId);
id_type!(TicketId);
id_type!(IncidentId);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// How long a tenant keeps its finished runs of one kind: forever, or this many seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Keep {
    Forever,
    Secs(u64),
}

/// A tenant's own retention of finished runs (`None`: the operator's), within the
/// operator's maximum (`fronta_engine::retention`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantRetention {
    pub completed: Option<Keep>,
    pub cancelled: Option<Keep>,
    /// Failed and suppressed runs.
    pub failed: Option<Keep>,
}

impl TenantRetention {
    /// Whether it says anything (all `None`: the operator's everywhere).
    pub fn is_empty(&self) -> bool {
        self.completed.is_none() && self.cancelled.is_none() && self.failed.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    pub id: GroupId,
    pub tenant: TenantId,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub id: MemberId,
    pub group: GroupId,
    pub name: String,
    pub email: Option<String>,
    /// How many open tickets this person can carry: least busy gives no new ticket to
    /// a member at capacity (see [`crate::rules::has_room`]).
    pub capacity: u32,
    /// Whether this person takes new work now (default `true`): least busy skips a
    /// member who is away; their open tickets stay theirs.
    #[serde(default = "available_by_default")]
    pub available: bool,
}

fn available_by_default() -> bool {
    true
}

/// The type of a custom field.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    String,
    Number,
    Boolean,
    Date,
}

#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldDef {
    pub name: String,
    #[serde(rename = "type")]
    pub field_type: FieldType,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TicketType {
    pub id: TicketTypeId,
    pub tenant: TenantId,
    pub name: String,
    /// The life cycle: a ticket of this type has exactly one of these.
    pub statuses: Vec<String>,
    pub fields: Vec<FieldDef>,
}

/// Who a ticket is assigned to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignee {
    pub id: MemberId,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ticket {
    pub id: TicketId,
    pub tenant: TenantId,
    /// Per tenant: 1, 2, …; shown as `TK-1`.
    pub number: i64,
    pub external_id: Option<String>,
    pub title: String,
    /// The ticket type's name, if it has one.
    #[serde(rename = "type")]
    pub ticket_type: Option<String>,
    pub status: Option<String>,
    pub closed: bool,
    pub tags: Vec<String>,
    pub assignee: Option<Assignee>,
    /// The group's name.
    pub group: Option<String>,
    pub fields: BTreeMap<String, serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Ticket {
    /// The human id: `TK-<number>`.
    pub fn human_id(&self) -> String {
        format!("TK-{}", self.number)
    }
}

/// One line of a ticket's log.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TicketLogEntry {
    pub at: DateTime<Utc>,
    /// `created`, `changed`, `event`, `run`, `guard`, `note`.
    pub kind: String,
    pub message: String,
    pub run_id: Option<String>,
}

/// Who made a change: a person (API) or an automation's run. Carried with each change,
/// per task — never in a global — so loop protection can see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "camelCase")]
pub enum Origin {
    Person,
    #[serde(rename_all = "camelCase")]
    Automation {
        automation_id: String,
        run_id: String,
        /// The automation runs whose changes led to this run, oldest first (the loop
        /// guard's chain; at most [`ORIGIN_CHAIN_KEPT`] kept).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        chain: Vec<OriginLink>,
    },
}

/// How many earlier links of a chain of automation runs an origin keeps.
pub const ORIGIN_CHAIN_KEPT: usize = 10;

/// One automation run of a chain: the run, and the automation it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OriginLink {
    pub automation_id: String,
    pub run_id: String,
}

#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IncidentStatus {
    Open,
    Resolved,
}

/// An incident: `title` and `impact` are for the tenant (no step names, no run ids);
/// `detail` is for platform admins only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Incident {
    pub id: IncidentId,
    pub tenant: TenantId,
    /// What makes two occurrences "the same cause": while one is open, a repeat bumps
    /// `count` instead of opening another.
    pub cause: String,
    pub title: String,
    pub impact: String,
    pub detail: serde_json::Value,
    pub status: IncidentStatus,
    pub count: u32,
    pub ticket: Option<TicketId>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
}
