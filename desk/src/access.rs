//! Who may do what: a tenant's named API tokens, each with a [`Role`], and the operator's
//! named admin tokens.
//!
//! A token is shown once, when it is made; stores keep only its hash
//! ([`crate::token::hash`]) beside its id, name, role, expiry and last use. A request
//! presenting it is that token's [`Principal`] until the token expires or is revoked —
//! both take effect at the next request, since every request looks the hash up.
//!
//! ```text
//!   made (POST /api/tokens, tenant create) ──► live ──► expired   (expiresAt passed)
//!                                               │
//!                                               └────► revoked    (DELETE: the row goes)
//! ```
//!
//! Roles are ordered, each allowing what the one below allows:
//! - `viewer`: every read of the tenant (the dashboard on a wall);
//! - `editor`: also every write of automations, setup, tickets and runs — not tokens;
//! - `admin`: also the tenant's tokens and audit log.
//!
//! Rules here: names are checked like the desk's other names and are unique in a tenant
//! (the store's unique index decides races); an expiry lies in the future; a tenant keeps
//! at least one live admin token ([`plan_revoke`]), so it can never lock itself out.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::TenantId;
use crate::store::{DeskError, DeskResult};
use crate::{rules, token};

crate::model::id_type!(
    /// A tenant's API token or an operator's admin token (not the secret: the row).
    TokenId
);

/// The prefix of the operator's admin tokens made by `fronta admin-token new`.
pub const ADMIN_TOKEN_PREFIX: &str = "fa_";

/// What a tenant token may do. Ordered: `Viewer < Editor < Admin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads only.
    Viewer,
    /// Reads and the writes of automations, setup, tickets and runs.
    Editor,
    /// Everything of the tenant, its tokens and audit log included.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Editor, Role::Admin];

    /// The role's name on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
            Role::Admin => "admin",
        }
    }

    /// A role from its name, or the error naming the field and the choices.
    pub fn parse(text: &str) -> DeskResult<Role> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == text)
            .ok_or_else(|| {
                DeskError::Invalid(format!(
                    "role: unknown role {text:?} (admin, editor or viewer)"
                ))
            })
    }

    /// Whether a token of this role may call what `needed` allows.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tenant's API token as stores keep it (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub id: TokenId,
    pub tenant: TenantId,
    pub name: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

impl ApiToken {
    /// Whether it still opens the API at `now`.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_none_or(|at| at > now)
    }
}

/// An operator's admin token as stores keep it (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminToken {
    pub id: TokenId,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// What a request asks for a new tenant token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    pub name: String,
    pub role: Role,
    pub expires_at: Option<DateTime<Utc>>,
}

/// The name of the admin token made with a tenant.
pub const FIRST_TOKEN_NAME: &str = "admin";

/// A new token of `tenant`: the row and the secret (shown once). Checks the name and that
/// an expiry lies after `now`; the store checks the name is free in the tenant.
pub fn plan_token(
    tenant: TenantId,
    new: NewToken,
    now: DateTime<Utc>,
) -> DeskResult<(ApiToken, String)> {
    check_token_name(&new.name)?;
    if let Some(at) = new.expires_at
        && at <= now
    {
        return Err(DeskError::Invalid(format!(
            "expiresAt: {} is not in the future",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )));
    }
    let row = ApiToken {
        id: TokenId::new(),
        tenant,
        name: new.name,
        role: new.role,
        created_at: now,
        expires_at: new.expires_at,
        last_used_at: None,
    };
    Ok((row, token::generate(token::TENANT_TOKEN_PREFIX)))
}

/// The admin token made with a new tenant.
pub fn plan_first_token(tenant: TenantId, now: DateTime<Utc>) -> (ApiToken, String) {
    let row = ApiToken {
        id: TokenId::new(),
        tenant,
        name: FIRST_TOKEN_NAME.to_owned(),
        role: Role::Admin,
        created_at: now,
        expires_at: None,
        last_used_at: None,
    };
    (row, token::generate(token::TENANT_TOKEN_PREFIX))
}

/// A new admin token of the operator called `name`: the row and the secret.
pub fn plan_admin_token(name: &str, now: DateTime<Utc>) -> DeskResult<(AdminToken, String)> {
    check_token_name(name)?;
    let row = AdminToken {
        id: TokenId::new(),
        name: name.to_owned(),
        created_at: now,
        last_used_at: None,
    };
    Ok((row, token::generate(ADMIN_TOKEN_PREFIX)))
}

/// The error of a token name already used (409, naming the field).
pub fn name_taken(name: &str) -> DeskError {
    DeskError::Conflict(taken_message(name))
}

/// The message of [`name_taken`] (for a store that learns it from a unique index).
pub fn taken_message(name: &str) -> String {
    format!("name: a token called {name:?} already exists")
}

fn check_token_name(name: &str) -> DeskResult<()> {
    rules::check_name("token", name)
        .map_err(|message| DeskError::Invalid(format!("name: {message}")))
}

/// Whether token `id` of a tenant whose tokens are `tokens` may be revoked at `now`:
/// `NotFound` when it is not among them; `Conflict` when it is the tenant's last live
/// admin token (a tenant keeps at least one, or nobody could make another).
pub fn plan_revoke(tokens: &[ApiToken], id: TokenId, now: DateTime<Utc>) -> DeskResult<()> {
    let target = tokens
        .iter()
        .find(|token| token.id == id)
        .ok_or(DeskError::NotFound("token"))?;
    let is_live_admin = |token: &ApiToken| token.role == Role::Admin && token.is_live(now);
    if is_live_admin(target) && tokens.iter().filter(|token| is_live_admin(token)).count() == 1 {
        return Err(DeskError::Conflict(
            "this is the tenant's last admin token: make another admin token before revoking it"
                .into(),
        ));
    }
    Ok(())
}

/// How often a token's `lastUsedAt` is written at most: a use within this long of the
/// last one written is not written again (a busy dashboard would otherwise write on
/// every request).
pub const LAST_USED_RESOLUTION: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether a use at `now` should be written, the last one written being `last`.
pub fn touch_due(last: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    last.is_none_or(|last| {
        now.signed_duration_since(last).to_std().unwrap_or_default() >= LAST_USED_RESOLUTION
    })
}

/// A tenant token that opened a request: its tenant and its row.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    pub tenant: crate::model::Tenant,
    pub token: ApiToken,
}

/// Which audit entries to list, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// One tenant's entries; `None`: every entry (the operator's view).
    pub tenant: Option<TenantId>,
    /// At or after.
    pub from: Option<DateTime<Utc>>,
    /// Before.
    pub to: Option<DateTime<Utc>>,
    /// A token's id or name (`fronta <command>` for the CLI, a name of an admin token).
    pub actor: Option<String>,
    /// An object: its id, its kind (`automation`), or both as `kind:id`.
    pub object: Option<AuditObject>,
    /// Older than this entry (`at`, `id`): the page after the one that ended there.
    pub before: Option<(DateTime<Utc>, uuid::Uuid)>,
    /// The most entries answered.
    pub limit: usize,
}

/// The `object` filter of the audit log, parsed ([`AuditObject::parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditObject {
    /// Entries about objects of this kind.
    Kind(String),
    /// Entries about the object with this id, whatever its kind.
    Id(String),
    /// Both.
    KindId(String, String),
}

impl AuditObject {
    /// `kind:id`, a known kind (letters and `-` only, as the routes name them), or an id.
    pub fn parse(text: &str) -> AuditObject {
        match text.split_once(':') {
            Some((kind, id)) if is_kind(kind) && !id.is_empty() => {
                AuditObject::KindId(kind.to_owned(), id.to_owned())
            }
            _ if is_kind(text) && uuid::Uuid::parse_str(text).is_err() => {
                AuditObject::Kind(text.to_owned())
            }
            _ => AuditObject::Id(text.to_owned()),
        }
    }
}

fn is_kind(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_lowercase() || c == '-')
}

/// The audit entries a retention pass deletes at most per call.
pub const AUDIT_PURGE_BATCH: usize = 5_000;

/// How long audit entries are kept by default (`--audit-retention`).
pub const DEFAULT_AUDIT_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(365 * 24 * 3600);

/// What the API and the CLI ask of storage about tokens and the audit log. Writes take
/// their audit entry from the current scope (`fronta_engine::audit`), like every write.
#[async_trait::async_trait]
pub trait AccessStore: Send + Sync + 'static {
    /// The live token (not expired) with this secret, and its tenant.
    async fn principal_by_token(&self, token: &str) -> DeskResult<Option<Principal>>;
    /// A new token of the tenant ([`plan_token`]); 409 when the name is taken.
    async fn token_create(&self, tenant: TenantId, new: NewToken)
    -> DeskResult<(ApiToken, String)>;
    /// The tenant's tokens, oldest first (expired ones included, to be revoked).
    async fn token_list(&self, tenant: TenantId) -> DeskResult<Vec<ApiToken>>;
    async fn token_get(&self, tenant: TenantId, id: TokenId) -> DeskResult<ApiToken>;
    /// Revoke (delete) a token, refused by [`plan_revoke`] for the last admin token.
    async fn token_revoke(&self, tenant: TenantId, id: TokenId) -> DeskResult<ApiToken>;
    /// Record a use of the token, a tenant's or an admin token (its `lastUsedAt`; ids are
    /// unique across both).
    async fn token_touch(&self, id: TokenId, at: DateTime<Utc>) -> DeskResult<()>;

    /// A new admin token of the operator; 409 when the name is taken.
    async fn admin_token_create(&self, name: &str) -> DeskResult<(AdminToken, String)>;
    async fn admin_token_list(&self) -> DeskResult<Vec<AdminToken>>;
    /// Revoke an admin token by id or name.
    async fn admin_token_revoke(&self, id_or_name: &str) -> DeskResult<AdminToken>;
    async fn admin_token_by_token(&self, token: &str) -> DeskResult<Option<AdminToken>>;

    /// Audit entries matching `filter`, newest first, at most `filter.limit`.
    async fn audit_list(
        &self,
        filter: &AuditFilter,
    ) -> DeskResult<Vec<fronta_engine::audit::AuditEntry>>;
    /// Delete entries older than `before`, at most `limit`; how many went.
    async fn audit_purge(&self, before: DateTime<Utc>, limit: usize) -> DeskResult<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 6, 12, 0, 0)
            .single()
            .expect("a time")
    }

    fn new(name: &str, role: Role) -> NewToken {
        NewToken {
            name: name.into(),
            role,
            expires_at: None,
        }
    }

    #[test]
    fn roles_are_ordered_and_parsed_by_name() {
        assert!(Role::Admin.allows(Role::Editor) && Role::Editor.allows(Role::Viewer));
        assert!(!Role::Viewer.allows(Role::Editor) && !Role::Editor.allows(Role::Admin));
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Ok(role));
        }
        let err = Role::parse("owner").expect_err("refused").to_string();
        assert!(err.contains("role:") && err.contains("owner"), "{err}");
    }

    #[test]
    fn a_token_needs_a_name_and_a_future_expiry() {
        let tenant = TenantId::new();
        let (row, secret) = plan_token(tenant, new("wall", Role::Viewer), now()).expect("a token");
        assert_eq!((row.name.as_str(), row.role), ("wall", Role::Viewer));
        assert!(secret.starts_with(token::TENANT_TOKEN_PREFIX));
        let empty = plan_token(tenant, new(" ", Role::Viewer), now()).expect_err("refused");
        assert!(empty.to_string().contains("name:"), "{empty}");
        let past = NewToken {
            expires_at: Some(now() - chrono::Duration::seconds(1)),
            ..new("old", Role::Editor)
        };
        let err = plan_token(tenant, past, now())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("expiresAt:"), "{err}");
    }

    #[test]
    fn the_last_live_admin_token_cannot_be_revoked() {
        let tenant = TenantId::new();
        let (first, _) = plan_first_token(tenant, now());
        let (viewer, _) = plan_token(tenant, new("wall", Role::Viewer), now()).expect("a token");
        let tokens = vec![first.clone(), viewer.clone()];
        assert!(matches!(
            plan_revoke(&tokens, first.id, now()),
            Err(DeskError::Conflict(_))
        ));
        assert_eq!(plan_revoke(&tokens, viewer.id, now()), Ok(()));
        assert_eq!(
            plan_revoke(&tokens, TokenId::new(), now()),
            Err(DeskError::NotFound("token"))
        );
        // A second admin that has expired does not count as a way back in.
        let expired = ApiToken {
            expires_at: Some(now() - chrono::Duration::seconds(5)),
            ..plan_token(
                tenant,
                new("old admin", Role::Admin),
                now() - chrono::Duration::days(1),
            )
            .expect("a token")
            .0
        };
        let mut with_expired = tokens.clone();
        with_expired.push(expired.clone());
        assert!(plan_revoke(&with_expired, first.id, now()).is_err());
        assert_eq!(plan_revoke(&with_expired, expired.id, now()), Ok(()));
        let (second, _) = plan_token(tenant, new("ops", Role::Admin), now()).expect("a token");
        with_expired.push(second);
        assert_eq!(plan_revoke(&with_expired, first.id, now()), Ok(()));
    }

    #[test]
    fn last_use_is_written_at_most_once_a_minute() {
        assert!(touch_due(None, now()));
        assert!(!touch_due(
            Some(now() - chrono::Duration::seconds(59)),
            now()
        ));
        assert!(touch_due(
            Some(now() - chrono::Duration::seconds(60)),
            now()
        ));
    }
}
