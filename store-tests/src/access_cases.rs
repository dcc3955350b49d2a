//! Cases of the access port (`fronta_desk::access::AccessStore`) and of the audit scope's
//! promise (`fronta_engine::audit`), run by [`crate::desk_conformance_suite!`] on every
//! store: named tokens with roles found by their hash only and gone at once when revoked,
//! a tenant's last admin token kept, expired tokens finding nothing, the operator's admin
//! tokens, and an audit entry that commits with its change — never without it, never
//! twice for one scope, never for a write outside any scope.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use fronta_desk::DeskError;
use fronta_desk::access::{AuditFilter, AuditObject, NewToken, Role};
use fronta_engine::audit::{self, Actor, Scope};

use crate::DeskStoreFactory;

fn new(name: &str, role: Role) -> NewToken {
    NewToken {
        name: name.into(),
        role,
        expires_at: None,
    }
}

fn scope_of(name: &str) -> Arc<Scope> {
    let scope = Scope::new(
        "POST",
        "/api/groups",
        "group",
        None,
        "Create a group",
        Some("10.0.0.7".into()),
    );
    scope.set_actor(
        Actor::Token {
            id: uuid::Uuid::now_v7(),
            name: name.into(),
            role: "editor".into(),
        },
        None,
    );
    scope
}

fn all() -> AuditFilter {
    AuditFilter {
        limit: 1000,
        ..AuditFilter::default()
    }
}

/// The first token is an admin token called `admin`; made tokens carry their name and
/// role, names are unique per tenant, a revoked token finds nothing at once, and the
/// tenant's last live admin token cannot be revoked.
pub async fn named_tokens_have_roles_and_revocation_is_at_once(factory: &dyn DeskStoreFactory) {
    let (desk, access) = factory.open_access().await;
    let (acme, first) = desk.tenant_create("Acme").await.expect("Acme");
    let (globex, _) = desk.tenant_create("Globex").await.expect("Globex");
    let principal = access
        .principal_by_token(&first)
        .await
        .expect("a lookup")
        .expect("the first token opens");
    assert_eq!(
        (
            principal.tenant.id,
            principal.token.name.as_str(),
            principal.token.role
        ),
        (acme.id, "admin", Role::Admin),
        "the tenant's first token"
    );
    let (wall, wall_secret) = access
        .token_create(acme.id, new("wall", Role::Viewer))
        .await
        .expect("a viewer token");
    assert_ne!(wall_secret, first, "a token of its own");
    let found = access
        .principal_by_token(&wall_secret)
        .await
        .expect("a lookup")
        .expect("the viewer token opens");
    assert_eq!((found.token.id, found.token.role), (wall.id, Role::Viewer));
    assert!(
        access
            .principal_by_token(&fronta_desk::token::hash(&wall_secret))
            .await
            .expect("a lookup")
            .is_none(),
        "the stored hash is no token"
    );
    match access
        .token_create(acme.id, new("wall", Role::Editor))
        .await
    {
        Err(DeskError::Conflict(message)) => assert!(message.starts_with("name:"), "{message}"),
        other => panic!("a taken name is a conflict naming the field: {other:?}"),
    }
    access
        .token_create(globex.id, new("wall", Role::Viewer))
        .await
        .expect("names are per tenant");
    let at = Utc::now();
    access.token_touch(wall.id, at).await.expect("a touch");
    let listed = access.token_list(acme.id).await.expect("a list");
    assert_eq!(
        listed[1].last_used_at.map(|t| t.timestamp_millis()),
        Some(at.timestamp_millis()),
        "the tenant token's last use"
    );
    assert_eq!(
        listed.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        vec!["admin", "wall"],
        "the tenant's tokens, oldest first"
    );
    assert_eq!(
        access.token_get(globex.id, wall.id).await,
        Err(DeskError::NotFound("token")),
        "another tenant's token is unknown"
    );
    assert_eq!(
        access.token_revoke(globex.id, wall.id).await.map(|t| t.id),
        Err(DeskError::NotFound("token")),
        "another tenant cannot revoke it"
    );
    access
        .token_revoke(acme.id, wall.id)
        .await
        .expect("the viewer token is revoked");
    assert!(
        access
            .principal_by_token(&wall_secret)
            .await
            .expect("a lookup")
            .is_none(),
        "a revoked token finds nothing at once"
    );
    assert!(
        matches!(
            access.token_revoke(acme.id, principal.token.id).await,
            Err(DeskError::Conflict(_))
        ),
        "the last admin token stays"
    );
    let (second, _) = access
        .token_create(acme.id, new("ops admin", Role::Admin))
        .await
        .expect("a second admin token");
    access
        .token_revoke(acme.id, principal.token.id)
        .await
        .expect("with another admin token, the first may go");
    assert!(
        matches!(
            access.token_revoke(acme.id, second.id).await,
            Err(DeskError::Conflict(_))
        ),
        "and now the second is the last"
    );
}

/// A token past its `expiresAt` finds nothing (waited for, not slept on); an expiry in
/// the past is refused naming the field.
pub async fn an_expired_token_finds_nothing(factory: &dyn DeskStoreFactory) {
    let (desk, access) = factory.open_access().await;
    let (acme, _) = desk.tenant_create("Acme").await.expect("Acme");
    let past = NewToken {
        expires_at: Some(Utc::now() - chrono::Duration::hours(1)),
        ..new("old", Role::Viewer)
    };
    match access.token_create(acme.id, past).await {
        Err(DeskError::Invalid(message)) => assert!(message.starts_with("expiresAt:"), "{message}"),
        other => panic!("an expiry in the past is refused: {other:?}"),
    }
    let soon = NewToken {
        expires_at: Some(Utc::now() + chrono::Duration::milliseconds(300)),
        ..new("soon", Role::Viewer)
    };
    let (row, secret) = access
        .token_create(acme.id, soon)
        .await
        .expect("a short token");
    assert!(row.expires_at.is_some(), "it keeps its expiry");
    let started = Instant::now();
    while access
        .principal_by_token(&secret)
        .await
        .expect("a lookup")
        .is_some()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the token never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        desk.tenant_by_token(&secret)
            .await
            .expect("a lookup")
            .is_none(),
        "nor does the tenant lookup find it"
    );
}

/// The operator's admin tokens: made with a unique name, found by their secret only,
/// listed without it, revoked by name or by id.
pub async fn admin_tokens_are_made_found_and_revoked(factory: &dyn DeskStoreFactory) {
    let (_, access) = factory.open_access().await;
    let (night, night_secret) = access.admin_token_create("night").await.expect("night");
    let (day, _) = access.admin_token_create("day").await.expect("day");
    assert!(matches!(
        access.admin_token_create("night").await,
        Err(DeskError::Conflict(_))
    ));
    assert_eq!(
        access
            .admin_token_by_token(&night_secret)
            .await
            .expect("a lookup")
            .map(|t| t.id),
        Some(night.id)
    );
    assert_eq!(
        access
            .admin_token_list()
            .await
            .expect("a list")
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        vec!["night", "day"]
    );
    // One touch for both kinds of token: the admin token's last use is kept.
    let at = Utc::now();
    access.token_touch(day.id, at).await.expect("a touch");
    let listed = access.admin_token_list().await.expect("a list");
    assert_eq!(
        listed[1].last_used_at.map(|t| t.timestamp_millis()),
        Some(at.timestamp_millis()),
        "the admin token's last use"
    );
    access.admin_token_revoke("night").await.expect("by name");
    access
        .admin_token_revoke(&day.id.to_string())
        .await
        .expect("by id");
    assert!(
        access
            .admin_token_by_token(&night_secret)
            .await
            .expect("a lookup")
            .is_none()
    );
    assert_eq!(
        access.admin_token_revoke("night").await.map(|t| t.id),
        Err(DeskError::NotFound("admin token"))
    );
}

/// An audit entry commits with the first write of its scope, names what the write made,
/// is written once per scope, is not written by a write that fails (the scope's next
/// write carries it) nor by a write outside any scope; the log is read newest first with
/// its filters and purged by age.
pub async fn an_audit_entry_commits_with_its_change_only(factory: &dyn DeskStoreFactory) {
    let (desk, access) = factory.open_access().await;
    let (acme, _) = desk
        .tenant_create("Acme")
        .await
        .expect("a tenant, outside any scope");
    assert!(
        access.audit_list(&all()).await.expect("the log").is_empty(),
        "a write outside any scope leaves no entry"
    );

    let scope = scope_of("ops");
    let group = audit::scoped(scope.clone(), async {
        let group = desk
            .group_create(acme.id, "packers")
            .await
            .expect("a group");
        desk.group_create(acme.id, "pickers")
            .await
            .expect("a second write");
        group
    })
    .await;
    let entries = access.audit_list(&all()).await.expect("the log");
    assert_eq!(entries.len(), 1, "one entry per scope: {entries:?}");
    let entry = &entries[0];
    assert_eq!(
        entry.object_id.as_deref(),
        Some(group.id.to_string().as_str()),
        "names what it made"
    );
    assert_eq!(
        (
            entry.actor_name.as_str(),
            entry.client.as_deref(),
            entry.route.as_str()
        ),
        ("ops", Some("10.0.0.7"), "/api/groups")
    );

    // A refused write leaves nothing; the scope's next write carries the entry.
    let failing = scope_of("eva");
    audit::scoped(failing.clone(), async {
        assert!(
            desk.group_create(acme.id, "packers").await.is_err(),
            "a taken name is refused"
        );
    })
    .await;
    assert_eq!(
        access.audit_list(&all()).await.expect("the log").len(),
        1,
        "a refused write leaves no entry"
    );
    assert!(!failing.written(), "the entry is still to write");
    audit::scoped(failing.clone(), async {
        desk.group_create(acme.id, "loaders")
            .await
            .expect("a write that passes");
    })
    .await;
    let entries = access.audit_list(&all()).await.expect("the log");
    assert_eq!(entries.len(), 2, "now written");
    assert_eq!(entries[0].actor_name, "eva", "newest first");

    // Filters and pages.
    let by = |filter: AuditFilter| {
        let access = access.clone();
        async move { access.audit_list(&filter).await.expect("the log") }
    };
    assert_eq!(
        by(AuditFilter {
            actor: Some("ops".into()),
            ..all()
        })
        .await
        .len(),
        1
    );
    assert_eq!(
        by(AuditFilter {
            object: Some(AuditObject::parse(&format!("group:{}", group.id))),
            ..all()
        })
        .await
        .len(),
        1
    );
    assert_eq!(
        by(AuditFilter {
            object: Some(AuditObject::parse("group")),
            ..all()
        })
        .await
        .len(),
        2
    );
    let first_page = by(AuditFilter { limit: 1, ..all() }).await;
    let second_page = by(AuditFilter {
        limit: 1,
        before: Some((first_page[0].at, first_page[0].id)),
        ..all()
    })
    .await;
    assert_eq!(second_page.len(), 1, "the page after the first");
    assert_ne!(second_page[0].id, first_page[0].id);
    assert!(
        by(AuditFilter {
            from: Some(Utc::now() + chrono::Duration::hours(1)),
            ..all()
        })
        .await
        .is_empty(),
        "nothing from the future"
    );

    // Retention: entries older than the cut go, in batches.
    assert_eq!(
        access
            .audit_purge(Utc::now() - chrono::Duration::hours(1), 100)
            .await
            .expect("a purge"),
        0,
        "nothing is an hour old"
    );
    assert_eq!(
        access
            .audit_purge(Utc::now() + chrono::Duration::hours(1), 1)
            .await
            .expect("a purge"),
        1,
        "one batch of one"
    );
    assert_eq!(access.audit_list(&all()).await.expect("the log").len(), 1);
}
