//! The desk port ([`fronta_desk::DeskStore`]) on Postgres: tenants and their token hashes,
//! groups and members, ticket types, tickets with their per-tenant numbers and log, and
//! incidents — the same behaviour as the SQLite store (`fronta_store_sqlite::desk`),
//! pinned by the same conformance suite.
//!
//! Every write is one transaction; every read one statement (or two) on a pooled
//! connection. Every statement is scoped by the caller's tenant, so another tenant's id
//! finds nothing, exactly like an unknown one. Instants are the store's now (the injected
//! clock, else the database's clock), truncated to the millisecond like the runs', read
//! once per write, after its locks (`Db::now`).
//!
//! Concurrency. SQLite's single writer orders every write; here row locks do, taken in
//! one order so that concurrent writes wait for each other instead of deadlocking:
//!
//! 1. a ticket create first locks its tenant's counter row (`desk_ticket_counters`), so
//!    the creates of one tenant are ordered: holding it, a second look for the external
//!    id finds a ticket another create committed meanwhile, and the upsert attaches to it
//!    instead of creating a second one;
//! 2. a ticket write locks its ticket row (`FOR UPDATE`): no change is lost;
//! 3. then the rows it refers to `FOR SHARE` (the member it assigns, the group it names
//!    or assigns from, that group's members), so a rename or delete of them waits for the
//!    write, or the write for it (and then sees the result);
//! 4. then the per-member open counts it will move (`desk_member_open`), all in one
//!    statement sorted by member id ([`LOCK_MEMBER_OPEN`]) — for least busy, every member
//!    of the group: the counts it reads under that lock include every assignment committed
//!    before, and no concurrent assignment on the group can commit until it does. The
//!    triggers of migration 4 then change only rows this write holds.
//!
//! Ticket writes that name a type lock its row `FOR SHARE` (step 3);
//! `ticket_type_update` locks it `FOR UPDATE` first, then counts the open tickets holding
//! a status it removes and renames the tickets' `type_name`: a rename racing a write on a
//! ticket of that type can meet a deadlock (broken by Postgres, `Unavailable`).
//!
//! Deleting a member or a group locks the member (and group) rows first, then the open
//! tickets it unassigns, then their counts. A write racing a delete of the member it
//! assigns on the very ticket the delete unassigns can still meet a deadlock, which
//! Postgres breaks by failing one side (`Unavailable`: the call may be repeated).
//!
//! References (`fronta_automation::refs`): a rename, a delete or a status removal of a
//! group or type locks its row first, then the tenant's automation rows (`FOR UPDATE`)
//! to read and rewrite their refs; an automation save locks its own row, then reads the
//! tenant's groups and types `FOR SHARE` to bind its names. The two orders differ, so an
//! edit of an automation racing a rename can meet a deadlock (`Unavailable`, repeatable).
//!
//! Ticket events: `ticket_upsert`, `ticket_change` and `ticket_assign_least_busy` build a
//! `TicketEvent` when they created the ticket or changed something, and, when at least
//! one enabled automation of the tenant listens to it, hand it to the store's event sink
//! inside their transaction and insert the runs it answers there (`announce`); workers
//! of this process are woken after the commit (other processes hear the `NOTIFY` the
//! insert sends). Unassigning the tickets of a deleted member is not announced, as on
//! SQLite.
//!
//! Every rule of a write — its checks, its branches, the log lines, what it announces —
//! is a plan of [`fronta_desk::plan`], the same the SQLite store calls: this store takes
//! the locks above, reads what the plan needs, calls it and writes what it says
//! (`writes`), in the SQL of `rows`.
//!
//! Left out: custom field values are not checked against the ticket type's field
//! definitions (the port does not ask for it yet); a GIN index on tags (the tag filter
//! walks the tenant's tickets newest first, as on SQLite).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_automation::store::TicketEventSink;
use fronta_automation::ticket_events;
use fronta_desk::plan::{self, GroupPlan, RowWrite, TicketPlan, TypeUpdate, UpsertTarget, taken};
use fronta_desk::store::{
    AssignTo, Assignment, DeskResult, IncidentReport, TicketChange, TicketEvent, TicketFilter,
    TicketUpsert, TicketWrite,
};
use fronta_desk::token;
use fronta_desk::{
    Assignee, DeskError, DeskStore, FieldDef, Group, GroupId, Incident, IncidentId, IncidentStatus,
    Member, MemberId, Origin, Tenant, TenantId, TenantRetention, Ticket, TicketId, TicketLogEntry,
    TicketType, TicketTypeId,
};
use fronta_engine::StoreError;
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{AssertSqlSafe, PgConnection, Postgres, Row};
use uuid::Uuid;

use crate::{PgStore, map_err, runs};

use fronta_desk::store::names::{GROUP, INCIDENT, MEMBER, TENANT, TICKET, TICKET_TYPE};

/// Lock the per-member open counts of the members `$1` (an array, duplicates allowed),
/// in member id order, and answer them: least busy's one probe per member (a walk of the
/// primary key), and the lock every write that moves a count takes first.
pub const LOCK_MEMBER_OPEN: &str = "SELECT member, open FROM desk_member_open \
     WHERE member = ANY($1::uuid[]) ORDER BY member FOR UPDATE";

macro_rules! group_columns {
    () => {
        "id, tenant, name"
    };
}
macro_rules! member_columns {
    () => {
        "id, group_id, name, email, capacity, available"
    };
}
macro_rules! type_columns {
    () => {
        "id, tenant, name, statuses, fields"
    };
}
macro_rules! ticket_columns {
    () => {
        "id, tenant, number, external_id, title, type_name, status, closed, tags, assignee, \
         assignee_name, group_name, fields, created_at, updated_at"
    };
}
macro_rules! incident_columns {
    () => {
        "id, tenant, cause, title, impact, detail, status, count, ticket, created_at, \
         updated_at, resolved_at"
    };
}

/// How a lookup inside a write locks the row it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lock {
    /// A plain read (reads, and lookups whose row nobody changes).
    None,
    /// `FOR SHARE`: the row is referred to; a rename or delete waits for this write.
    Share,
    /// `FOR UPDATE`: this write changes (or deletes) the row.
    Update,
}

pub(crate) type DeskSql<T> = Result<T, DeskError>;

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// The store's own failures (pool, transactions, run inserts), as desk errors.
pub(crate) fn from_store(err: StoreError) -> DeskError {
    fronta_automation::errors::desk_error(err)
}

/// A driver error as a desk error, as on SQLite: connection trouble, lock timeouts,
/// deadlocks and serialization failures are `Unavailable`, integrity violations
/// `Conflict`, anything else `Internal` (absent rows are handled where they can happen).
pub(crate) fn sql_err(err: sqlx::Error) -> DeskError {
    fronta_automation::errors::desk_error_of_driver(map_err(err))
}

/// Whether `err` is a unique violation (SQLSTATE 23505).
pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

/// A driver error, where a unique violation means `taken` (the name check lost a race).
pub(crate) fn unique_as(taken: impl FnOnce() -> String) -> impl FnOnce(sqlx::Error) -> DeskError {
    move |err| {
        if is_unique_violation(&err) {
            DeskError::Conflict(taken())
        } else {
            sql_err(err)
        }
    }
}

fn decode(what: &str) -> impl FnOnce(sqlx::Error) -> DeskError + '_ {
    move |err| DeskError::Internal(format!("cannot read a {what} row: {err}"))
}

/// An instant as SQLite keeps it: whole milliseconds.
pub(crate) fn to_millis(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.timestamp_millis()).unwrap_or(at)
}

// ---------------------------------------------------------------------------------------
// A connection with the store's clock and round-trip counter
// ---------------------------------------------------------------------------------------

/// A connection the desk and automation statements run on — a pooled one for a read, the
/// write's transaction for a write — with the store (its clock, its round-trip counter)
/// and the write's now, read once.
pub(crate) struct Db<'c> {
    conn: &'c mut PgConnection,
    store: &'c PgStore,
    now: Option<DateTime<Utc>>,
}

impl<'c> Db<'c> {
    pub(crate) fn new(conn: &'c mut PgConnection, store: &'c PgStore) -> Self {
        Self {
            conn,
            store,
            now: None,
        }
    }

    /// The connection for one statement (counted as a round trip).
    pub(crate) fn c(&mut self) -> &mut PgConnection {
        self.store.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        &mut *self.conn
    }

    /// The store's now for this write: the injected clock's instant, else the database
    /// clock, truncated to the millisecond; read once, the same for every statement of
    /// the write.
    ///
    /// The database clock is `statement_timestamp()`, not the transaction's start
    /// (`now()`, which the runs use): writes read it after they locked their ticket, so
    /// a write that waited for another write of the same ticket is stamped after it —
    /// a ticket's `updated_at` and its log never go back in time.
    pub(crate) async fn now(&mut self) -> DeskSql<DateTime<Utc>> {
        if let Some(now) = self.now {
            return Ok(now);
        }
        let injected = self.store.now();
        let now: DateTime<Utc> = sqlx::query_scalar(
            "SELECT date_trunc('milliseconds', coalesce($1::timestamptz, statement_timestamp()))",
        )
        .bind(injected)
        .fetch_one(self.c())
        .await
        .map_err(sql_err)?;
        self.now = Some(now);
        Ok(now)
    }
}

impl PgStore {
    /// Begin one desk (or automation) write.
    pub(crate) async fn desk_begin(&self) -> DeskResult<sqlx::Transaction<'static, Postgres>> {
        self.begin_tx().await.map_err(from_store)
    }

    pub(crate) async fn desk_commit(
        &self,
        tx: sqlx::Transaction<'static, Postgres>,
    ) -> DeskResult<()> {
        self.commit_tx(tx).await.map_err(from_store)
    }

    /// A pooled connection for one desk (or automation) read.
    pub(crate) async fn desk_connection(&self) -> DeskResult<sqlx::pool::PoolConnection<Postgres>> {
        self.connection().await.map_err(from_store)
    }

    /// One batch of a retention purge: `sql` deletes at most `$2` rows older than `$1`;
    /// the rows deleted.
    pub(crate) async fn purge_batch(
        &self,
        sql: &'static str,
        before: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> DeskResult<u64> {
        let mut conn = self.desk_connection().await?;
        let gone = sqlx::query(sql)
            .bind(before)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .execute(Db::new(&mut conn, self).c())
            .await
            .map_err(sql_err)?;
        Ok(gone.rows_affected())
    }
}

mod admin;
mod rows;
mod writes;

pub(crate) use admin::*;
pub(crate) use rows::*;
pub(crate) use writes::*;

// ---------------------------------------------------------------------------------------
// The port
// ---------------------------------------------------------------------------------------

/// The three ticket writes, run by [`PgStore::ticket_write`].
enum TicketOp {
    Upsert(TicketUpsert),
    Change(TicketId, TicketChange),
    Assign(TicketId, String, AssignTo),
}

impl PgStore {
    /// One ticket write: one transaction that also announces what it did ([`announce`]):
    /// the event sink's runs are inserted in it, so they commit with the write or not at
    /// all; this process's workers are woken after the commit.
    async fn ticket_write(
        &self,
        tenant: TenantId,
        origin: Origin,
        op: TicketOp,
    ) -> DeskResult<Assignment> {
        let sink = self.ticket_event_sink();
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let assignment = match op {
            TicketOp::Upsert(upsert) => {
                Assignment::Assigned(ticket_upsert(&mut db, tenant, upsert, &origin).await?)
            }
            TicketOp::Change(id, change) => {
                Assignment::Assigned(ticket_change(&mut db, tenant, id, change, &origin).await?)
            }
            TicketOp::Assign(id, group, to) => {
                ticket_assign(&mut db, tenant, id, &group, &to, &origin).await?
            }
        };
        let inserted = match (&sink, &assignment) {
            (Some(sink), Assignment::Assigned(write)) => {
                announce(&mut db, sink, write, origin).await?
            }
            _ => false,
        };
        self.desk_commit(tx).await?;
        if inserted {
            self.wake_workers();
        }
        Ok(assignment)
    }

    /// [`Self::ticket_write`] of an upsert or a change, which always writes.
    async fn ticket_written(
        &self,
        tenant: TenantId,
        origin: Origin,
        op: TicketOp,
    ) -> DeskResult<TicketWrite> {
        match self.ticket_write(tenant, origin, op).await? {
            Assignment::Assigned(write) => Ok(write),
            Assignment::Waiting { .. } => Err(DeskError::Internal(
                "invariant: only an assignment waits".into(),
            )),
        }
    }
}

#[async_trait]
impl DeskStore for PgStore {
    async fn tenant_create(&self, name: &str) -> DeskResult<(Tenant, String)> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let now = db.now().await?;
        let (tenant, first, raw) = plan::tenant_new(name, now)?;
        sqlx::query(
            "WITH tenant AS (
                INSERT INTO desk_tenants (id, name, created_at) VALUES ($1, $2, $4)
                RETURNING id
            ),
            token AS (
                INSERT INTO desk_tenant_tokens (hash, tenant, created_at, id, name, role)
                SELECT $3, id, $4, $5, $6, $7 FROM tenant
            )
            INSERT INTO desk_ticket_counters (tenant, last_number) SELECT id, 0 FROM tenant",
        )
        .bind(tenant.id.0)
        .bind(&tenant.name)
        .bind(token::hash(&raw))
        .bind(now)
        .bind(first.id.0)
        .bind(&first.name)
        .bind(first.role.as_str())
        .execute(db.c())
        .await
        .map_err(sql_err)?;
        fronta_engine::audit::created(&tenant.id);
        if let Some(scope) = fronta_engine::audit::current() {
            scope.set_tenant(tenant.id.0);
        }
        self.desk_commit(tx).await?;
        Ok((tenant, raw))
    }

    async fn tenant_by_token(&self, token: &str) -> DeskResult<Option<Tenant>> {
        // The live token's principal (`access`): one lookup, one expiry rule.
        let principal = fronta_desk::access::AccessStore::principal_by_token(self, token).await?;
        Ok(principal.map(|principal| principal.tenant))
    }

    async fn tenant_list(&self) -> DeskResult<Vec<Tenant>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows =
            sqlx::query("SELECT id, name, created_at FROM desk_tenants ORDER BY created_at, id")
                .fetch_all(db.c())
                .await
                .map_err(sql_err)?;
        rows.iter().map(tenant_of).collect()
    }

    async fn tenant_retention_set(
        &self,
        tenant: TenantId,
        retention: TenantRetention,
    ) -> DeskResult<()> {
        let value = plan::retention_stored(&retention)?;
        // A transaction of its own: the change commits with its audit entry.
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let done = sqlx::query("UPDATE desk_tenants SET retention = $1 WHERE id = $2")
            .bind(value.map(Json))
            .bind(tenant.0)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        if done.rows_affected() == 0 {
            return Err(DeskError::NotFound(TENANT));
        }
        self.desk_commit(tx).await
    }

    async fn tenant_retentions(&self) -> DeskResult<Vec<(TenantId, TenantRetention)>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows: Vec<(Uuid, Json<TenantRetention>)> = sqlx::query_as(
            "SELECT id, retention FROM desk_tenants WHERE retention IS NOT NULL \
             ORDER BY created_at, id",
        )
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        Ok(rows
            .into_iter()
            .map(|(id, Json(retention))| (TenantId(id), retention))
            .collect())
    }

    async fn group_create(&self, tenant: TenantId, name: &str) -> DeskResult<Group> {
        let group = plan::group_new(tenant, name)?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let done = group_insert(&mut db, tenant, group).await?;
        self.desk_commit(tx).await?;
        Ok(done)
    }

    async fn group_list(&self, tenant: TenantId) -> DeskResult<Vec<Group>> {
        let mut conn = self.desk_connection().await?;
        groups_of_tenant(&mut Db::new(&mut conn, self), tenant, Lock::None).await
    }

    async fn group_get(&self, tenant: TenantId, id: GroupId) -> DeskResult<Group> {
        let mut conn = self.desk_connection().await?;
        group_get(&mut Db::new(&mut conn, self), tenant, id, Lock::None).await
    }

    async fn group_by_name(&self, tenant: TenantId, name: &str) -> DeskResult<Group> {
        let mut conn = self.desk_connection().await?;
        group_by_name(&mut Db::new(&mut conn, self), tenant, name, Lock::None).await
    }

    async fn group_rename(&self, tenant: TenantId, id: GroupId, name: &str) -> DeskResult<Group> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let mut group = group_get(&mut db, tenant, id, Lock::Update).await?;
        if !plan::group_rename(&group, name)? {
            return Ok(group);
        }
        if taken(group_by_name(&mut db, tenant, name, Lock::None).await)? {
            return Err(plan::group_name_taken(name));
        }
        crate::automations::carry_rename(
            &mut db,
            tenant,
            fronta_automation::refs::Kind::Group,
            id.0,
            name,
        )
        .await?;
        sqlx::query("UPDATE desk_groups SET name = $1 WHERE id = $2")
            .bind(name)
            .bind(id.0)
            .execute(db.c())
            .await
            .map_err(|err| {
                if is_unique_violation(&err) {
                    plan::group_name_taken(name)
                } else {
                    sql_err(err)
                }
            })?;
        // Tickets name their group: the rename is carried to them.
        sqlx::query(
            "UPDATE desk_tickets SET group_name = $1 WHERE tenant = $2 AND group_name = $3",
        )
        .bind(name)
        .bind(tenant.0)
        .bind(&group.name)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
        self.desk_commit(tx).await?;
        group.name = name.to_owned();
        Ok(group)
    }

    async fn group_delete(&self, tenant: TenantId, id: GroupId) -> DeskResult<()> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let group = group_get(&mut db, tenant, id, Lock::Update).await?;
        group_removable(&mut db, tenant, &group).await?;
        let members = members_of(&mut db, group.id, Lock::Update).await?;
        unassign_open_tickets(&mut db, tenant, &members).await?;
        sqlx::query("DELETE FROM desk_members WHERE group_id = $1")
            .bind(id.0)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        sqlx::query("DELETE FROM desk_groups WHERE id = $1")
            .bind(id.0)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        self.desk_commit(tx).await
    }

    async fn member_add(
        &self,
        tenant: TenantId,
        group: GroupId,
        name: &str,
        email: Option<&str>,
        capacity: u32,
    ) -> DeskResult<Member> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let done = member_insert(&mut db, tenant, group, name, email, capacity).await?;
        self.desk_commit(tx).await?;
        Ok(done)
    }

    async fn member_list(&self, tenant: TenantId, group: GroupId) -> DeskResult<Vec<Member>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        group_get(&mut db, tenant, group, Lock::None).await?;
        members_of(&mut db, group, Lock::None).await
    }

    async fn member_update(
        &self,
        tenant: TenantId,
        member: MemberId,
        name: Option<&str>,
        email: Option<Option<&str>>,
        capacity: Option<u32>,
    ) -> DeskResult<Member> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let old = member_get(&mut db, tenant, member, Lock::Update).await?;
        let done = member_rewrite(&mut db, tenant, member, name, email, capacity).await?;
        if plan::member_makes_room(&old, &done) {
            wake_group(&mut db, done.group.0).await?;
        }
        self.desk_commit(tx).await?;
        Ok(done)
    }

    async fn member_set_available(
        &self,
        tenant: TenantId,
        member: MemberId,
        available: bool,
    ) -> DeskResult<Member> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let done = member_available(&mut db, tenant, member, available).await?;
        self.desk_commit(tx).await?;
        Ok(done)
    }

    async fn member_delete(&self, tenant: TenantId, member: MemberId) -> DeskResult<()> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let member = member_get(&mut db, tenant, member, Lock::Update).await?;
        unassign_open_tickets(&mut db, tenant, std::slice::from_ref(&member)).await?;
        sqlx::query("DELETE FROM desk_members WHERE id = $1")
            .bind(member.id.0)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        self.desk_commit(tx).await
    }

    async fn ticket_type_create(
        &self,
        tenant: TenantId,
        name: &str,
        statuses: &[String],
        fields: &[FieldDef],
    ) -> DeskResult<TicketType> {
        let ticket_type = plan::type_new(tenant, name, statuses, fields)?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let done = type_insert(&mut db, tenant, ticket_type).await?;
        self.desk_commit(tx).await?;
        Ok(done)
    }

    async fn ticket_type_list(&self, tenant: TenantId) -> DeskResult<Vec<TicketType>> {
        let mut conn = self.desk_connection().await?;
        types_of_tenant(&mut Db::new(&mut conn, self), tenant, Lock::None).await
    }

    async fn ticket_type_delete(&self, tenant: TenantId, id: TicketTypeId) -> DeskResult<()> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        type_remove(&mut db, tenant, id).await?;
        self.desk_commit(tx).await
    }

    async fn ticket_type_get(&self, tenant: TenantId, id: TicketTypeId) -> DeskResult<TicketType> {
        let mut conn = self.desk_connection().await?;
        type_get(&mut Db::new(&mut conn, self), tenant, id, Lock::None).await
    }

    async fn ticket_type_by_name(&self, tenant: TenantId, name: &str) -> DeskResult<TicketType> {
        let mut conn = self.desk_connection().await?;
        type_by_name(&mut Db::new(&mut conn, self), tenant, name, Lock::None).await
    }

    async fn ticket_type_update(
        &self,
        tenant: TenantId,
        id: TicketTypeId,
        name: Option<&str>,
        statuses: Option<&[String]>,
        fields: Option<&[FieldDef]>,
    ) -> DeskResult<TicketType> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let done = type_rewrite(&mut db, tenant, id, name, statuses, fields).await?;
        self.desk_commit(tx).await?;
        Ok(done)
    }

    async fn ticket_upsert(
        &self,
        tenant: TenantId,
        upsert: TicketUpsert,
        origin: Origin,
    ) -> DeskResult<TicketWrite> {
        self.ticket_written(tenant, origin, TicketOp::Upsert(upsert))
            .await
    }

    async fn ticket_change(
        &self,
        tenant: TenantId,
        id: TicketId,
        change: TicketChange,
        origin: Origin,
    ) -> DeskResult<TicketWrite> {
        self.ticket_written(tenant, origin, TicketOp::Change(id, change))
            .await
    }

    async fn ticket_assign(
        &self,
        tenant: TenantId,
        id: TicketId,
        group: &str,
        to: AssignTo,
        origin: Origin,
    ) -> DeskResult<Assignment> {
        self.ticket_write(tenant, origin, TicketOp::Assign(id, group.to_owned(), to))
            .await
    }

    async fn ticket_get(&self, tenant: TenantId, id: TicketId) -> DeskResult<Ticket> {
        let mut conn = self.desk_connection().await?;
        ticket_get(&mut Db::new(&mut conn, self), tenant, id, Lock::None).await
    }

    async fn ticket_by_external_id(
        &self,
        tenant: TenantId,
        external_id: &str,
    ) -> DeskResult<Option<Ticket>> {
        let mut conn = self.desk_connection().await?;
        ticket_by_external_id(
            &mut Db::new(&mut conn, self),
            tenant,
            external_id,
            Lock::None,
        )
        .await
    }

    async fn member_open_counts(
        &self,
        tenant: TenantId,
        group: GroupId,
    ) -> DeskResult<BTreeMap<MemberId, i64>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        group_get(&mut db, tenant, group, Lock::None).await?;
        let rows: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT m.id, o.open FROM desk_members m \
             JOIN desk_member_open o ON o.member = m.id WHERE m.group_id = $1",
        )
        .bind(group.0)
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        Ok(rows
            .into_iter()
            .map(|(member, open)| (MemberId(member), open))
            .collect())
    }

    async fn ticket_log(&self, tenant: TenantId, id: TicketId) -> DeskResult<Vec<TicketLogEntry>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        ticket_get(&mut db, tenant, id, Lock::None).await?;
        let rows = sqlx::query(
            "SELECT at, kind, message, run_id FROM desk_ticket_log WHERE ticket = $1 ORDER BY seq",
        )
        .bind(id.0)
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter().map(log_entry_of).collect()
    }

    async fn ticket_log_append(
        &self,
        tenant: TenantId,
        id: TicketId,
        entry: TicketLogEntry,
    ) -> DeskResult<()> {
        plan::check_log_line(&entry)?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        ticket_get(&mut db, tenant, id, Lock::None).await?;
        log_insert(&mut db, id, &entry).await?;
        self.desk_commit(tx).await
    }

    async fn ticket_list(&self, tenant: TenantId, filter: TicketFilter) -> DeskResult<Vec<Ticket>> {
        let mut conn = self.desk_connection().await?;
        ticket_list(&mut Db::new(&mut conn, self), tenant, &filter).await
    }

    async fn incident_report(
        &self,
        tenant: TenantId,
        report: IncidentReport,
    ) -> DeskResult<(Incident, bool)> {
        let mut tx = self.desk_begin().await?;
        let answer = incident_report(&mut Db::new(&mut tx, self), tenant, report).await?;
        self.desk_commit(tx).await?;
        Ok(answer)
    }

    async fn incident_open_all(&self) -> DeskResult<Vec<Incident>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = sqlx::query(concat!(
            "SELECT ",
            incident_columns!(),
            " FROM desk_incidents WHERE status = 'open' ORDER BY created_at DESC, id DESC"
        ))
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter().map(incident_of).collect()
    }

    async fn incident_recent(&self, tenant: TenantId, limit: usize) -> DeskResult<Vec<Incident>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = sqlx::query(concat!(
            "SELECT ",
            incident_columns!(),
            " FROM desk_incidents WHERE tenant = $1 ORDER BY updated_at DESC, id DESC LIMIT $2"
        ))
        .bind(tenant.0)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter().map(incident_of).collect()
    }

    async fn incident_list(&self, tenant: Option<TenantId>) -> DeskResult<Vec<Incident>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let rows = match tenant {
            Some(tenant) => sqlx::query(concat!(
                "SELECT ",
                incident_columns!(),
                " FROM desk_incidents WHERE tenant = $1 ORDER BY created_at DESC, id DESC"
            ))
            .bind(tenant.0)
            .fetch_all(db.c())
            .await
            .map_err(sql_err)?,
            None => sqlx::query(concat!(
                "SELECT ",
                incident_columns!(),
                " FROM desk_incidents ORDER BY created_at DESC, id DESC"
            ))
            .fetch_all(db.c())
            .await
            .map_err(sql_err)?,
        };
        rows.iter().map(incident_of).collect()
    }

    async fn incident_get(&self, tenant: Option<TenantId>, id: IncidentId) -> DeskResult<Incident> {
        let mut conn = self.desk_connection().await?;
        incident_get(&mut Db::new(&mut conn, self), tenant, id, Lock::None).await
    }

    async fn incident_resolve(&self, tenant: TenantId, id: IncidentId) -> DeskResult<Incident> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let incident = incident_get(&mut db, Some(tenant), id, Lock::Update).await?;
        if incident.status == IncidentStatus::Resolved {
            return Ok(incident);
        }
        let now = db.now().await?;
        let row = sqlx::query(concat!(
            "UPDATE desk_incidents SET status = 'resolved', resolved_at = $1, updated_at = $1 \
             WHERE id = $2 RETURNING ",
            incident_columns!()
        ))
        .bind(now)
        .bind(id.0)
        .fetch_one(db.c())
        .await
        .map_err(sql_err)?;
        let resolved = incident_of(&row)?;
        self.desk_commit(tx).await?;
        Ok(resolved)
    }
}
