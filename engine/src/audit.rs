//! Who changed what: the audit entry a write leaves, written by the store **in the same
//! transaction as the change**, so there is never a change without its entry nor an entry
//! without its change.
//!
//! The caller (the HTTP server for a request, the CLI for a command) opens a [`Scope`]
//! around the work and says who acts ([`Actor`]), from where, and what (the route, the
//! kind and id of the object, a short summary). Stores do not take the scope as an
//! argument: their commit paths ask [`current`] for it and, when it holds an actor and its
//! entry has not been written yet, insert [`Scope::take_entry`]'s entry before they commit.
//! The first write transaction of a scope carries the entry; later ones in the same scope
//! write none (one entry per request or command).
//!
//! Where the scope is found:
//! - on the task that runs the work: a `tokio` task-local set by [`scoped`]; stores that
//!   write on the caller's task (Postgres) find it there;
//! - on a store's own writer thread: a thread-local the store sets around the job it runs
//!   for that caller ([`on_thread`]), the scope having been taken with [`current`] on the
//!   caller's task when the job was sent (SQLite's writer).
//!
//! A write that makes an object learns its id only in the store: the store tells the scope
//! with [`created`], so the entry names what was made.
//!
//! Never in an entry: a request body, a secret's value, a token. The summary is the
//! route's own description plus details the caller chose (names, roles, counts).
//!
//! Left out: tasks the work spawns (a task-local does not follow `tokio::spawn`): writes
//! made there are not the caller's and carry no entry.

use std::cell::RefCell;
use std::future::Future;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Who acts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Actor {
    /// A tenant's API token.
    Token {
        /// The token's id.
        id: Uuid,
        /// The token's name.
        name: String,
        /// The token's role.
        role: String,
    },
    /// The operator, with one of the admin tokens.
    Admin {
        /// The admin token's id; `None`: the configured one.
        id: Option<Uuid>,
        /// The admin token's name.
        name: String,
    },
    /// A command of the `fronta` binary run on the database.
    Cli {
        /// The command (`admin-token new`).
        command: String,
    },
}

impl Actor {
    /// `token`, `admin` or `cli`.
    pub fn kind(&self) -> &'static str {
        match self {
            Actor::Token { .. } => "token",
            Actor::Admin { .. } => "admin",
            Actor::Cli { .. } => "cli",
        }
    }

    /// The token's id, if any.
    pub fn id(&self) -> Option<Uuid> {
        match self {
            Actor::Token { id, .. } => Some(*id),
            Actor::Admin { id, .. } => *id,
            Actor::Cli { .. } => None,
        }
    }

    /// The name shown for the actor (a token's name, `fronta <command>`).
    pub fn name(&self) -> String {
        match self {
            Actor::Token { name, .. } | Actor::Admin { name, .. } => name.clone(),
            Actor::Cli { command } => format!("fronta {command}"),
        }
    }

    /// The token's role (`admin` for the operator, none for the CLI).
    pub fn role(&self) -> Option<&str> {
        match self {
            Actor::Token { role, .. } => Some(role),
            Actor::Admin { .. } => Some("operator"),
            Actor::Cli { .. } => None,
        }
    }
}

/// One line of the audit log, as stores keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Time-ordered (UUID v7).
    pub id: Uuid,
    /// When the change committed (the store's clock).
    pub at: DateTime<Utc>,
    /// The tenant the change belongs to; `None`: the operator's, outside any tenant.
    pub tenant: Option<Uuid>,
    /// [`Actor::kind`].
    pub actor_kind: String,
    /// [`Actor::id`].
    pub actor_id: Option<Uuid>,
    /// [`Actor::name`].
    pub actor_name: String,
    /// [`Actor::role`].
    pub actor_role: Option<String>,
    /// The client's address as seen (after trusted proxies); `None` for the CLI.
    pub client: Option<String>,
    /// `POST`, `PUT`, `PATCH`, `DELETE`, or `CLI`.
    pub method: String,
    /// The route's template (`/api/groups/{id}`) or the command (`admin-token new`).
    pub route: String,
    /// `group`, `automation`, `token`, …
    pub object_kind: String,
    /// The object's id, when known.
    pub object_id: Option<String>,
    /// What was done, for a person; never a secret or a body.
    pub summary: String,
}

/// The longest summary kept, in characters (a longer one is cut with `…`).
pub const MAX_SUMMARY_CHARS: usize = 300;

/// What one request or command does, filled as it goes.
#[derive(Debug)]
pub struct Scope {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    actor: Option<Actor>,
    tenant: Option<Uuid>,
    client: Option<String>,
    method: String,
    route: String,
    object_kind: String,
    object_id: Option<String>,
    summary: String,
    details: Vec<String>,
    written: bool,
    /// The write being committed changed nothing (a cancel of a finished run): it
    /// carries no entry; the scope's next write may.
    unchanged: bool,
}

impl Scope {
    /// A scope for `method route` on an object of `object_kind` (its id when the route
    /// names one), described by `summary`, from `client`. No actor yet: a scope without
    /// an actor writes nothing.
    pub fn new(
        method: &str,
        route: &str,
        object_kind: &str,
        object_id: Option<String>,
        summary: &str,
        client: Option<String>,
    ) -> Arc<Scope> {
        Arc::new(Scope {
            state: Mutex::new(State {
                actor: None,
                tenant: None,
                client,
                method: method.to_owned(),
                route: route.to_owned(),
                object_kind: object_kind.to_owned(),
                object_id,
                summary: summary.to_owned(),
                details: Vec::new(),
                written: false,
                unchanged: false,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Who acts, and for which tenant (`None`: the operator's own change).
    pub fn set_actor(&self, actor: Actor, tenant: Option<Uuid>) {
        let mut state = self.lock();
        state.actor = Some(actor);
        state.tenant = tenant;
    }

    /// The tenant the change belongs to, when the actor's own does not say (the
    /// operator acting on a tenant).
    pub fn set_tenant(&self, tenant: Uuid) {
        self.lock().tenant = Some(tenant);
    }

    /// The id of the object the write made, when the route did not name one.
    pub fn set_created(&self, id: &dyn std::fmt::Display) {
        let mut state = self.lock();
        if state.object_id.is_none() {
            state.object_id = Some(id.to_string());
        }
    }

    /// A detail for the summary (`name "Support"`, `role viewer`). Never a secret.
    pub fn detail(&self, text: impl Into<String>) {
        self.lock().details.push(text.into());
    }

    /// The actor's name, if one is set (what an automation version records as its author).
    pub fn actor_name(&self) -> Option<String> {
        self.lock().actor.as_ref().map(Actor::name)
    }

    /// The entry to write with the commit being made, once per scope: `None` when there
    /// is no actor or it was taken already. A store calls it inside its transaction.
    pub fn take_entry(&self, at: DateTime<Utc>) -> Option<AuditEntry> {
        let mut state = self.lock();
        if std::mem::take(&mut state.unchanged) || state.written {
            return None;
        }
        let actor = state.actor.clone()?;
        state.written = true;
        let mut summary = state.summary.clone();
        if !state.details.is_empty() {
            summary.push_str(": ");
            summary.push_str(&state.details.join(", "));
        }
        Some(AuditEntry {
            id: Uuid::now_v7(),
            at,
            tenant: state.tenant,
            actor_kind: actor.kind().to_owned(),
            actor_id: actor.id(),
            actor_name: actor.name(),
            actor_role: actor.role().map(str::to_owned),
            client: state.client.clone(),
            method: state.method.clone(),
            route: state.route.clone(),
            object_kind: state.object_kind.clone(),
            object_id: state.object_id.clone(),
            summary: cut(&summary, MAX_SUMMARY_CHARS),
        })
    }

    /// Whether the scope's entry has been written.
    pub fn written(&self) -> bool {
        self.lock().written
    }

    /// Whether the scope has an entry still to write (an actor, not written yet): a store
    /// that would write outside a transaction of its own (a lone statement, a batch
    /// written by another task) writes in one of the caller's instead.
    pub fn pending(&self) -> bool {
        let state = self.lock();
        state.actor.is_some() && !state.written
    }

    /// Give the entry back after the transaction that took it rolled back, so the next
    /// write of the scope carries it.
    pub fn untake(&self) {
        self.lock().written = false;
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

tokio::task_local! {
    static TASK_SCOPE: Arc<Scope>;
}

thread_local! {
    static THREAD_SCOPE: RefCell<Option<Arc<Scope>>> = const { RefCell::new(None) };
}

/// Run `work` with `scope` as the current scope of its task.
pub async fn scoped<F: Future>(scope: Arc<Scope>, work: F) -> F::Output {
    TASK_SCOPE.scope(scope, work).await
}

/// The current scope: the one a store's writer thread runs a job for, else the task's.
pub fn current() -> Option<Arc<Scope>> {
    THREAD_SCOPE
        .with(|slot| slot.borrow().clone())
        .or_else(|| TASK_SCOPE.try_with(Arc::clone).ok())
}

/// Add a detail to the current scope's summary, if there is a scope (`"Support"`,
/// `changes status, assignee`). Names and field names only, never a value that may be
/// a secret.
pub fn detail(text: impl Into<String>) {
    if let Some(scope) = current() {
        scope.detail(text);
    }
}

/// The detail of a change: the fields it names, in the order given (`changes name,
/// capacity`); nothing when it names none.
pub fn changes(fields: &[(&str, bool)]) {
    let named: Vec<&str> = fields
        .iter()
        .filter(|(_, given)| *given)
        .map(|(name, _)| *name)
        .collect();
    if !named.is_empty() {
        detail(format!("changes {}", named.join(", ")));
    }
}

/// Tell the current scope, if any, the id of the object just made.
pub fn created(id: &dyn std::fmt::Display) {
    if let Some(scope) = current() {
        scope.set_created(id);
    }
}

/// Say that the write being made changed nothing (a cancel of a run already finished, a
/// retry of a run that has not failed): the commit it is in carries no entry.
pub fn unchanged() {
    if let Some(scope) = current() {
        scope.lock().unchanged = true;
    }
}

/// Whether the current scope has an entry still to write ([`Scope::pending`]).
pub fn pending() -> bool {
    current().is_some_and(|scope| scope.pending())
}

/// The current actor's name, if a scope with an actor is current.
pub fn actor_name() -> Option<String> {
    current().and_then(|scope| scope.actor_name())
}

/// Make `scope` current on this thread until the guard is dropped (a store's writer
/// thread, around the job it runs for a caller).
pub fn on_thread(scope: Option<Arc<Scope>>) -> ThreadScope {
    let previous = THREAD_SCOPE.with(|slot| slot.replace(scope));
    ThreadScope { previous }
}

/// Puts the thread's previous scope back when dropped.
#[derive(Debug)]
pub struct ThreadScope {
    previous: Option<Arc<Scope>>,
}

impl Drop for ThreadScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        THREAD_SCOPE.with(|slot| *slot.borrow_mut() = previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> Actor {
        Actor::Token {
            id: Uuid::now_v7(),
            name: "ops".into(),
            role: "editor".into(),
        }
    }

    #[tokio::test]
    async fn a_scope_gives_its_entry_once_and_only_with_an_actor() {
        let scope = Scope::new("POST", "/api/groups", "group", None, "Create a group", None);
        assert!(scope.take_entry(Utc::now()).is_none(), "no actor, no entry");
        let tenant = Uuid::now_v7();
        scope.set_actor(token(), Some(tenant));
        scoped(scope.clone(), async {
            created(&"g-1");
            current()
                .expect("current in the task")
                .detail("name \"Support\"");
        })
        .await;
        assert!(current().is_none(), "not current outside the task");
        let entry = scope.take_entry(Utc::now()).expect("an entry");
        assert_eq!(entry.object_id.as_deref(), Some("g-1"));
        assert_eq!(entry.summary, "Create a group: name \"Support\"");
        assert_eq!(
            (entry.actor_kind.as_str(), entry.actor_name.as_str()),
            ("token", "ops")
        );
        assert_eq!(entry.tenant, Some(tenant));
        assert!(scope.take_entry(Utc::now()).is_none(), "once");
        scope.untake();
        assert!(
            scope.take_entry(Utc::now()).is_some(),
            "given back after a rollback"
        );
    }

    #[test]
    fn a_thread_scope_is_current_until_dropped_and_the_previous_returns() {
        let outer = Scope::new("POST", "/a", "a", None, "a", None);
        let inner = Scope::new("POST", "/b", "b", None, "b", None);
        let _outer = on_thread(Some(outer.clone()));
        {
            let _inner = on_thread(Some(inner.clone()));
            assert!(Arc::ptr_eq(&current().expect("the inner scope"), &inner));
        }
        assert!(Arc::ptr_eq(
            &current().expect("the outer scope again"),
            &outer
        ));
    }

    #[test]
    fn a_write_that_changed_nothing_carries_no_entry_and_the_next_may() {
        let scope = Scope::new(
            "POST",
            "/api/runs/{id}/cancel",
            "run",
            None,
            "Cancel a run",
            None,
        );
        scope.set_actor(
            Actor::Cli {
                command: "runs cancel".into(),
            },
            None,
        );
        let _guard = on_thread(Some(scope.clone()));
        unchanged();
        assert!(
            scope.take_entry(Utc::now()).is_none(),
            "nothing changed, no entry"
        );
        assert!(
            scope.take_entry(Utc::now()).is_some(),
            "the next write carries it"
        );
    }

    #[test]
    fn long_summaries_are_cut() {
        let scope = Scope::new("PUT", "/x", "x", None, &"y".repeat(400), None);
        scope.set_actor(
            Actor::Cli {
                command: "apply".into(),
            },
            None,
        );
        let entry = scope.take_entry(Utc::now()).expect("an entry");
        assert_eq!(entry.summary.chars().count(), MAX_SUMMARY_CHARS);
        assert!(entry.summary.ends_with('…'));
        assert_eq!(entry.actor_name, "fronta apply");
    }
}
