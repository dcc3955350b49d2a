//! Rows and lookups of the Postgres desk store: each table's row as the desk's type, and
//! the lookups by id and by name that reads and writes share, locked as the caller asks
//! ([`Lock`](super::Lock)).

use super::*;

// ---------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------

pub(crate) fn tenant_of(row: &PgRow) -> DeskSql<Tenant> {
    let read = || -> Result<Tenant, sqlx::Error> {
        Ok(Tenant {
            id: TenantId(row.try_get(0)?),
            name: row.try_get(1)?,
            created_at: row.try_get(2)?,
        })
    };
    read().map_err(decode(TENANT))
}

pub(crate) fn group_of(row: &PgRow) -> DeskSql<Group> {
    let read = || -> Result<Group, sqlx::Error> {
        Ok(Group {
            id: GroupId(row.try_get(0)?),
            tenant: TenantId(row.try_get(1)?),
            name: row.try_get(2)?,
        })
    };
    read().map_err(decode(GROUP))
}

pub(crate) fn member_of(row: &PgRow) -> DeskSql<Member> {
    let read = || -> Result<Member, sqlx::Error> {
        let capacity: i64 = row.try_get(4)?;
        Ok(Member {
            id: MemberId(row.try_get(0)?),
            group: GroupId(row.try_get(1)?),
            name: row.try_get(2)?,
            email: row.try_get(3)?,
            capacity: u32::try_from(capacity).unwrap_or(u32::MAX),
            available: row.try_get(5)?,
        })
    };
    read().map_err(decode(MEMBER))
}

pub(crate) fn type_of(row: &PgRow) -> DeskSql<TicketType> {
    let read = || -> Result<TicketType, sqlx::Error> {
        Ok(TicketType {
            id: TicketTypeId(row.try_get(0)?),
            tenant: TenantId(row.try_get(1)?),
            name: row.try_get(2)?,
            statuses: row.try_get::<Json<Vec<String>>, _>(3)?.0,
            fields: row.try_get::<Json<Vec<FieldDef>>, _>(4)?.0,
        })
    };
    read().map_err(decode(TICKET_TYPE))
}

pub(crate) fn ticket_of(row: &PgRow) -> DeskSql<Ticket> {
    let read = || -> Result<Ticket, sqlx::Error> {
        let assignee_id: Option<Uuid> = row.try_get(9)?;
        let assignee_name: Option<String> = row.try_get(10)?;
        let assignee = match (assignee_id, assignee_name) {
            (Some(id), Some(name)) => Some(Assignee {
                id: MemberId(id),
                name,
            }),
            _ => None,
        };
        Ok(Ticket {
            id: TicketId(row.try_get(0)?),
            tenant: TenantId(row.try_get(1)?),
            number: row.try_get(2)?,
            external_id: row.try_get(3)?,
            title: row.try_get(4)?,
            ticket_type: row.try_get(5)?,
            status: row.try_get(6)?,
            closed: row.try_get(7)?,
            tags: row.try_get::<Json<Vec<String>>, _>(8)?.0,
            assignee,
            group: row.try_get(11)?,
            fields: row.try_get::<Json<BTreeMap<String, Value>>, _>(12)?.0,
            created_at: row.try_get(13)?,
            updated_at: row.try_get(14)?,
        })
    };
    read().map_err(decode(TICKET))
}

pub(crate) fn incident_of(row: &PgRow) -> DeskSql<Incident> {
    let read = || -> Result<Incident, sqlx::Error> {
        let status: String = row.try_get(6)?;
        let count: i64 = row.try_get(7)?;
        Ok(Incident {
            id: IncidentId(row.try_get(0)?),
            tenant: TenantId(row.try_get(1)?),
            cause: row.try_get(2)?,
            title: row.try_get(3)?,
            impact: row.try_get(4)?,
            detail: row.try_get(5)?,
            status: if status == "open" {
                IncidentStatus::Open
            } else {
                IncidentStatus::Resolved
            },
            count: u32::try_from(count).unwrap_or(u32::MAX),
            ticket: row.try_get::<Option<Uuid>, _>(8)?.map(TicketId),
            created_at: row.try_get(9)?,
            updated_at: row.try_get(10)?,
            resolved_at: row.try_get(11)?,
        })
    };
    read().map_err(decode(INCIDENT))
}

pub(crate) fn log_entry_of(row: &PgRow) -> DeskSql<TicketLogEntry> {
    let read = || -> Result<TicketLogEntry, sqlx::Error> {
        Ok(TicketLogEntry {
            at: row.try_get(0)?,
            kind: row.try_get(1)?,
            message: row.try_get(2)?,
            run_id: row.try_get(3)?,
        })
    };
    read().map_err(decode("ticket log"))
}

// ---------------------------------------------------------------------------------------
// Lookups, for reads and inside writes
// ---------------------------------------------------------------------------------------

pub(crate) async fn tenant_exists(db: &mut Db<'_>, tenant: TenantId) -> DeskSql<()> {
    let found: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM desk_tenants WHERE id = $1)")
            .bind(tenant.0)
            .fetch_one(db.c())
            .await
            .map_err(sql_err)?;
    if found {
        Ok(())
    } else {
        Err(DeskError::NotFound(TENANT))
    }
}

/// `sql` (one of three texts, by `lock`) run with `binds`, at most one row.
macro_rules! locked {
    ($lock:expr, $sql:expr) => {
        match $lock {
            Lock::None => $sql,
            Lock::Share => concat!($sql, " FOR SHARE"),
            Lock::Update => concat!($sql, " FOR UPDATE"),
        }
    };
}

/// The one row `query` finds, decoded by `decode`, or `NotFound(what)`.
async fn one<'q, T>(
    db: &mut Db<'_>,
    query: sqlx::query::Query<'q, Postgres, <Postgres as sqlx::Database>::Arguments>,
    decode: fn(&PgRow) -> DeskSql<T>,
    what: &'static str,
) -> DeskSql<T> {
    let row = query.fetch_optional(db.c()).await.map_err(sql_err)?;
    row.as_ref()
        .map(decode)
        .transpose()?
        .ok_or(DeskError::NotFound(what))
}

/// The tenant's groups, by name (`lock`: `FOR SHARE` when a save binds names to them,
/// so a rename or a delete waits for it, or it for them).
pub(crate) async fn groups_of_tenant(
    db: &mut Db<'_>,
    tenant: TenantId,
    lock: Lock,
) -> DeskSql<Vec<Group>> {
    let rows = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            group_columns!(),
            " FROM desk_groups WHERE tenant = $1 ORDER BY name, id"
        )
    ))
    .bind(tenant.0)
    .fetch_all(db.c())
    .await
    .map_err(sql_err)?;
    rows.iter().map(group_of).collect()
}

/// The tenant's ticket types, by name (`lock` as for [`groups_of_tenant`]).
pub(crate) async fn types_of_tenant(
    db: &mut Db<'_>,
    tenant: TenantId,
    lock: Lock,
) -> DeskSql<Vec<TicketType>> {
    let rows = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            type_columns!(),
            " FROM desk_ticket_types WHERE tenant = $1 ORDER BY name, id"
        )
    ))
    .bind(tenant.0)
    .fetch_all(db.c())
    .await
    .map_err(sql_err)?;
    rows.iter().map(type_of).collect()
}

pub(crate) async fn group_get(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: GroupId,
    lock: Lock,
) -> DeskSql<Group> {
    let query = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            group_columns!(),
            " FROM desk_groups WHERE tenant = $1 AND id = $2"
        )
    ))
    .bind(tenant.0)
    .bind(id.0);
    one(db, query, group_of, GROUP).await
}

pub(crate) async fn group_by_name(
    db: &mut Db<'_>,
    tenant: TenantId,
    name: &str,
    lock: Lock,
) -> DeskSql<Group> {
    let query = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            group_columns!(),
            " FROM desk_groups WHERE tenant = $1 AND name = $2"
        )
    ))
    .bind(tenant.0)
    .bind(name);
    one(db, query, group_of, GROUP).await
}

/// The members of `group`, by name then id.
pub(crate) async fn members_of(
    db: &mut Db<'_>,
    group: GroupId,
    lock: Lock,
) -> DeskSql<Vec<Member>> {
    let rows = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            member_columns!(),
            " FROM desk_members WHERE group_id = $1 ORDER BY name, id"
        )
    ))
    .bind(group.0)
    .fetch_all(db.c())
    .await
    .map_err(sql_err)?;
    rows.iter().map(member_of).collect()
}

pub(crate) async fn member_get(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: MemberId,
    lock: Lock,
) -> DeskSql<Member> {
    let query = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            member_columns!(),
            " FROM desk_members WHERE tenant = $1 AND id = $2"
        )
    ))
    .bind(tenant.0)
    .bind(id.0);
    one(db, query, member_of, MEMBER).await
}

pub(crate) async fn type_get(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: TicketTypeId,
    lock: Lock,
) -> DeskSql<TicketType> {
    let query = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            type_columns!(),
            " FROM desk_ticket_types WHERE tenant = $1 AND id = $2"
        )
    ))
    .bind(tenant.0)
    .bind(id.0);
    one(db, query, type_of, TICKET_TYPE).await
}

/// The tenant's ticket type called `name`; writes that depend on its statuses take it
/// `FOR SHARE` so a concurrent `ticket_type_update` cannot remove a status under them.
pub(crate) async fn type_by_name(
    db: &mut Db<'_>,
    tenant: TenantId,
    name: &str,
    lock: Lock,
) -> DeskSql<TicketType> {
    let query = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            type_columns!(),
            " FROM desk_ticket_types WHERE tenant = $1 AND name = $2"
        )
    ))
    .bind(tenant.0)
    .bind(name);
    one(db, query, type_of, TICKET_TYPE).await
}

pub(crate) async fn ticket_get(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: TicketId,
    lock: Lock,
) -> DeskSql<Ticket> {
    let query = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            ticket_columns!(),
            " FROM desk_tickets WHERE tenant = $1 AND id = $2"
        )
    ))
    .bind(tenant.0)
    .bind(id.0);
    one(db, query, ticket_of, TICKET).await
}

/// The tenant's ticket with `external_id`; a write that looks locks it (`Lock::Update`).
pub(crate) async fn ticket_by_external_id(
    db: &mut Db<'_>,
    tenant: TenantId,
    external_id: &str,
    lock: Lock,
) -> DeskSql<Option<Ticket>> {
    let row = sqlx::query(locked!(
        lock,
        concat!(
            "SELECT ",
            ticket_columns!(),
            " FROM desk_tickets WHERE tenant = $1 AND external_id = $2"
        )
    ))
    .bind(tenant.0)
    .bind(external_id)
    .fetch_optional(db.c())
    .await
    .map_err(sql_err)?;
    row.as_ref().map(ticket_of).transpose()
}

pub(crate) async fn incident_get(
    db: &mut Db<'_>,
    tenant: Option<TenantId>,
    id: IncidentId,
    lock: Lock,
) -> DeskSql<Incident> {
    let row = match tenant {
        Some(tenant) => sqlx::query(locked!(
            lock,
            concat!(
                "SELECT ",
                incident_columns!(),
                " FROM desk_incidents WHERE tenant = $1 AND id = $2"
            )
        ))
        .bind(tenant.0)
        .bind(id.0)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?,
        None => sqlx::query(locked!(
            lock,
            concat!(
                "SELECT ",
                incident_columns!(),
                " FROM desk_incidents WHERE id = $1"
            )
        ))
        .bind(id.0)
        .fetch_optional(db.c())
        .await
        .map_err(sql_err)?,
    };
    row.as_ref()
        .map(incident_of)
        .transpose()?
        .ok_or(DeskError::NotFound(INCIDENT))
}

/// Lock the open counts of `members` ([`LOCK_MEMBER_OPEN`]) and answer them by member; a
/// member without a row (none yet) is absent, which reads as 0.
pub(crate) async fn lock_member_open(
    db: &mut Db<'_>,
    members: &[Uuid],
) -> DeskSql<HashMap<Uuid, i64>> {
    if members.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(Uuid, i64)> = sqlx::query_as(LOCK_MEMBER_OPEN)
        .bind(members)
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
    Ok(rows.into_iter().collect())
}
