//! The writes of groups, members and ticket types on Postgres, each inside the caller's
//! transaction: a route's own (one write), or a whole setup's
//! ([`fronta_automation::setup`], one transaction for all of it).

use fronta_automation::refs::{Kind, Target};

use super::*;
use crate::automations::{carry_rename, users_of};

/// Creates `group` (planned by `plan::group_new`); a taken name is refused.
pub(crate) async fn group_insert(
    db: &mut Db<'_>,
    tenant: TenantId,
    group: Group,
) -> DeskSql<Group> {
    let name = group.name.as_str();
    tenant_exists(db, tenant).await?;
    if taken(group_by_name(db, tenant, name, Lock::None).await)? {
        return Err(plan::group_name_taken(name));
    }
    let now = db.now().await?;
    // The name check above answers the usual case; a concurrent create of the same
    // name is caught by the unique index.
    let inserted = sqlx::query(
        "INSERT INTO desk_groups (id, tenant, name, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (tenant, name) DO NOTHING",
    )
    .bind(group.id.0)
    .bind(tenant.0)
    .bind(&group.name)
    .bind(now)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    if inserted.rows_affected() == 0 {
        return Err(plan::group_name_taken(name));
    }
    Ok(group)
}

/// Adds a member to `group` (planned by `plan::member_add`) with its open count (0).
pub(crate) async fn member_insert(
    db: &mut Db<'_>,
    tenant: TenantId,
    group: GroupId,
    name: &str,
    email: Option<&str>,
    capacity: u32,
) -> DeskSql<Member> {
    group_get(db, tenant, group, Lock::Share).await?;
    let member = plan::member_add(group, name, email, capacity)?;
    let now = db.now().await?;
    // The member and its open count (0), which least busy locks before it reads.
    sqlx::query(
        "WITH member AS (
            INSERT INTO desk_members (id, tenant, group_id, name, email, capacity, created_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            RETURNING id
        )
        INSERT INTO desk_member_open (member, open) SELECT id, 0 FROM member
        ON CONFLICT (member) DO NOTHING",
    )
    .bind(member.id.0)
    .bind(tenant.0)
    .bind(group.0)
    .bind(&member.name)
    .bind(&member.email)
    .bind(i64::from(member.capacity))
    .bind(now)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(member)
}

/// Updates the member as `plan::member_update` says; a rename is carried to the tickets
/// assigned to them.
pub(crate) async fn member_rewrite(
    db: &mut Db<'_>,
    tenant: TenantId,
    member: MemberId,
    name: Option<&str>,
    email: Option<Option<&str>>,
    capacity: Option<u32>,
) -> DeskSql<Member> {
    let updated = plan::member_update(
        member_get(db, tenant, member, Lock::Update).await?,
        name,
        email,
        capacity,
    )?;
    sqlx::query("UPDATE desk_members SET name = $1, email = $2, capacity = $3 WHERE id = $4")
        .bind(&updated.name)
        .bind(&updated.email)
        .bind(i64::from(updated.capacity))
        .bind(member.0)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    // Tickets show their assignee's name: a rename is carried to them.
    sqlx::query("UPDATE desk_tickets SET assignee_name = $1 WHERE tenant = $2 AND assignee = $3")
        .bind(&updated.name)
        .bind(tenant.0)
        .bind(member.0)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    Ok(updated)
}

/// Inserts `ticket_type` (planned by `plan::type_new`) for `tenant`; a taken name is
/// refused.
pub(crate) async fn type_insert(
    db: &mut Db<'_>,
    tenant: TenantId,
    ticket_type: TicketType,
) -> DeskSql<TicketType> {
    tenant_exists(db, tenant).await?;
    if taken(type_by_name(db, tenant, &ticket_type.name, Lock::None).await)? {
        return Err(plan::type_name_taken(&ticket_type.name));
    }
    let now = db.now().await?;
    let inserted = sqlx::query(
        "INSERT INTO desk_ticket_types (id, tenant, name, statuses, fields, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, name) DO NOTHING",
    )
    .bind(ticket_type.id.0)
    .bind(tenant.0)
    .bind(&ticket_type.name)
    .bind(Json(&ticket_type.statuses))
    .bind(Json(&ticket_type.fields))
    .bind(now)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    if inserted.rows_affected() == 0 {
        return Err(plan::type_name_taken(&ticket_type.name));
    }
    Ok(ticket_type)
}

/// Updates the type `id` as `plan::type_update` says: a rename is carried to its tickets;
/// removing a status open tickets hold is refused.
pub(crate) async fn type_rewrite(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: TicketTypeId,
    name: Option<&str>,
    statuses: Option<&[String]>,
    fields: Option<&[FieldDef]>,
) -> DeskSql<TicketType> {
    // FOR UPDATE: ticket writes check statuses under FOR SHARE of this row, so none
    // can set a status this update removes between the count below and the commit.
    let old = type_get(db, tenant, id, Lock::Update).await?;
    let (new, renamed, removed) = match plan::type_update(&old, name, statuses, fields)? {
        TypeUpdate::Unchanged(same) => return Ok(same),
        TypeUpdate::Write {
            new,
            renamed,
            removed,
        } => (new, renamed, removed),
    };
    if renamed && taken(type_by_name(db, tenant, &new.name, Lock::None).await)? {
        return Err(plan::type_name_taken(&new.name));
    }
    if !removed.is_empty() {
        let others = types_of_tenant(db, tenant, Lock::None).await?;
        for status in &removed {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM desk_tickets \
                 WHERE tenant = $1 AND type_name = $2 AND status = $3 AND NOT closed",
            )
            .bind(tenant.0)
            .bind(&old.name)
            .bind(status)
            .fetch_one(db.c())
            .await
            .map_err(sql_err)?;
            plan::removable(
                plan::Removed::Status {
                    ticket_type: &old,
                    status,
                },
                users_of(db, tenant, Target::status(&old, status, &others)).await?,
                open,
            )?;
        }
    }
    if renamed {
        carry_rename(db, tenant, Kind::TicketType, id.0, &new.name).await?;
    }
    let updated = sqlx::query(
        "UPDATE desk_ticket_types SET name = $3, statuses = $4, fields = $5 \
         WHERE tenant = $1 AND id = $2",
    )
    .bind(tenant.0)
    .bind(id.0)
    .bind(&new.name)
    .bind(Json(&new.statuses))
    .bind(Json(&new.fields))
    .execute(db.c())
    .await;
    match updated {
        // A concurrent create took the name after the look above.
        Err(sqlx::Error::Database(err)) if err.is_unique_violation() => {
            return Err(plan::type_name_taken(&new.name));
        }
        other => {
            other.map_err(sql_err)?;
        }
    }
    if renamed {
        sqlx::query("UPDATE desk_tickets SET type_name = $3 WHERE tenant = $1 AND type_name = $2")
            .bind(tenant.0)
            .bind(&old.name)
            .bind(&new.name)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
    }
    Ok(new)
}

/// Deletes the ticket type `id`, unless a current automation version or an open ticket
/// uses it (`InUse`); closed tickets keep its name.
pub(crate) async fn type_remove(
    db: &mut Db<'_>,
    tenant: TenantId,
    id: TicketTypeId,
) -> DeskSql<()> {
    let found = type_get(db, tenant, id, Lock::Update).await?;
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM desk_tickets WHERE tenant = $1 AND type_name = $2 AND NOT closed",
    )
    .bind(tenant.0)
    .bind(&found.name)
    .fetch_one(db.c())
    .await
    .map_err(sql_err)?;
    plan::removable(
        plan::Removed::TicketType(&found),
        users_of(db, tenant, Target::TicketType(id.0)).await?,
        open,
    )?;
    sqlx::query("DELETE FROM desk_ticket_types WHERE tenant = $1 AND id = $2")
        .bind(tenant.0)
        .bind(id.0)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
    Ok(())
}

/// Refuses deleting the group `group` (locked by the caller) while a current automation
/// version or an open ticket uses it (`InUse`).
pub(crate) async fn group_removable(
    db: &mut Db<'_>,
    tenant: TenantId,
    group: &Group,
) -> DeskSql<()> {
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM desk_tickets WHERE tenant = $1 AND group_name = $2 AND NOT closed",
    )
    .bind(tenant.0)
    .bind(&group.name)
    .fetch_one(db.c())
    .await
    .map_err(sql_err)?;
    plan::removable(
        plan::Removed::Group(group),
        users_of(db, tenant, Target::Group(group.id.0)).await?,
        open,
    )
}
