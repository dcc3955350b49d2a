//! Per-(tenant, service) limits ([`ServiceLimits`]) on Postgres, like SQLite's: a
//! breaker row per (tenant, service) and a slot row per in-flight call with its lease's
//! expiry. Acquire and release each run in one transaction that first makes sure the
//! breaker row exists and then locks it (`SELECT … FOR UPDATE`): every process's
//! acquirers of one (tenant, service) queue on that row, so two racing for the last
//! slot cannot both count it free. The decisions are the plans
//! [`service_limits::plan_acquire`] and [`service_limits::plan_release`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_automation::service_limits::{
    self, AcquireRead, Admission, Breaker, BreakerState, CallResult, LimitRules, Released,
    ServiceLimits, ServiceStatus, ServiceTotals, Slot,
};
use fronta_automation::store::StoreResult;
use fronta_desk::{DeskError, TenantId};
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use crate::PgStore;
use crate::desk::{Db, DeskSql, sql_err, tenant_exists};

fn breaker_of(row: &PgRow) -> DeskSql<Breaker> {
    let state: String = row.try_get("state").map_err(sql_err)?;
    let failures: i32 = row.try_get("failures").map_err(sql_err)?;
    Ok(Breaker {
        state: BreakerState::from_column(&state)?,
        failures: u32::try_from(failures).unwrap_or(0),
        opened_at: row.try_get("opened_at").map_err(sql_err)?,
        retry_at: row.try_get("retry_at").map_err(sql_err)?,
    })
}

/// Make sure the breaker row exists, then lock it for this transaction.
async fn breaker_lock(
    db: &mut Db<'_>,
    tenant: TenantId,
    service: &str,
    now: DateTime<Utc>,
) -> DeskSql<(Breaker, Option<Uuid>)> {
    sqlx::query(
        "INSERT INTO service_breakers (tenant, service, state, failures, updated_at) \
         VALUES ($1, $2, 'closed', 0, $3) ON CONFLICT (tenant, service) DO NOTHING",
    )
    .bind(tenant.0)
    .bind(service)
    .bind(now)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    let row = sqlx::query(
        "SELECT state, failures, opened_at, retry_at, probe_slot FROM service_breakers \
         WHERE tenant = $1 AND service = $2 FOR UPDATE",
    )
    .bind(tenant.0)
    .bind(service)
    .fetch_one(db.c())
    .await
    .map_err(sql_err)?;
    Ok((
        breaker_of(&row)?,
        row.try_get("probe_slot").map_err(sql_err)?,
    ))
}

async fn breaker_put(
    db: &mut Db<'_>,
    tenant: TenantId,
    service: &str,
    breaker: &Breaker,
    probe: Option<Uuid>,
    now: DateTime<Utc>,
) -> DeskSql<()> {
    sqlx::query(
        "UPDATE service_breakers SET state = $3, failures = $4, opened_at = $5, \
         retry_at = $6, probe_slot = $7, updated_at = $8 WHERE tenant = $1 AND service = $2",
    )
    .bind(tenant.0)
    .bind(service)
    .bind(breaker.state.as_str())
    .bind(i32::try_from(breaker.failures).unwrap_or(i32::MAX))
    .bind(breaker.opened_at)
    .bind(breaker.retry_at)
    .bind(probe)
    .bind(now)
    .execute(db.c())
    .await
    .map_err(sql_err)?;
    Ok(())
}

#[async_trait]
impl ServiceLimits for PgStore {
    async fn service_acquire(
        &self,
        tenant: TenantId,
        service: &str,
        rules: &LimitRules,
    ) -> StoreResult<Admission> {
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        tenant_exists(&mut db, tenant).await?;
        let now = db.now().await?;
        let (breaker, probe) = breaker_lock(&mut db, tenant, service, now).await?;
        sqlx::query(
            "DELETE FROM service_slots WHERE tenant = $1 AND service = $2 AND expires_at <= $3",
        )
        .bind(tenant.0)
        .bind(service)
        .bind(now)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
        let probe_in_flight = match probe {
            Some(id) => sqlx::query("SELECT EXISTS (SELECT 1 FROM service_slots WHERE id = $1)")
                .bind(id)
                .fetch_one(db.c())
                .await
                .and_then(|row| row.try_get::<bool, _>(0))
                .map_err(sql_err)?,
            None => false,
        };
        let in_flight: i64 =
            sqlx::query("SELECT count(*) FROM service_slots WHERE tenant = $1 AND service = $2")
                .bind(tenant.0)
                .bind(service)
                .fetch_one(db.c())
                .await
                .and_then(|row| row.try_get(0))
                .map_err(sql_err)?;
        let read = AcquireRead {
            breaker,
            probe_in_flight,
            in_flight: u64::try_from(in_flight).unwrap_or(0),
        };
        let plan = service_limits::plan_acquire(&read, rules, now, Uuid::new_v4);
        let Some(slot) = plan.slot else {
            self.desk_commit(tx).await?;
            return Ok(plan.answer);
        };
        sqlx::query(
            "INSERT INTO service_slots (id, tenant, service, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(slot.id)
        .bind(tenant.0)
        .bind(service)
        .bind(slot.lease_until)
        .execute(db.c())
        .await
        .map_err(sql_err)?;
        breaker_put(
            &mut db,
            tenant,
            service,
            &slot.breaker,
            slot.probe_slot,
            now,
        )
        .await?;
        self.desk_commit(tx).await?;
        Ok(plan.answer)
    }

    async fn service_release(
        &self,
        tenant: TenantId,
        service: &str,
        slot: &Slot,
        result: CallResult,
        rules: &LimitRules,
    ) -> StoreResult<Released> {
        let slot_id = Uuid::parse_str(&slot.id)
            .map_err(|_| DeskError::Invalid(format!("{:?} is not a slot id", slot.id)))?;
        let mut tx = self.desk_begin().await?;
        let mut db = Db::new(&mut tx, self);
        let now = db.now().await?;
        let (before, probe) = breaker_lock(&mut db, tenant, service, now).await?;
        sqlx::query("DELETE FROM service_slots WHERE id = $1 AND tenant = $2 AND service = $3")
            .bind(slot_id)
            .bind(tenant.0)
            .bind(service)
            .execute(db.c())
            .await
            .map_err(sql_err)?;
        let plan = service_limits::plan_release(before, probe, &slot_id, result, rules, now);
        breaker_put(
            &mut db,
            tenant,
            service,
            &plan.breaker,
            plan.probe_slot,
            now,
        )
        .await?;
        self.desk_commit(tx).await?;
        Ok(plan.answer)
    }

    async fn service_list(&self, tenant: TenantId) -> StoreResult<Vec<ServiceStatus>> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let now = db.now().await?;
        let rows = sqlx::query(
            "SELECT b.service, b.state, b.failures, b.opened_at, b.retry_at, \
             (SELECT count(*) FROM service_slots s WHERE s.tenant = b.tenant \
              AND s.service = b.service AND s.expires_at > $2) AS in_flight \
             FROM service_breakers b WHERE b.tenant = $1 ORDER BY b.service",
        )
        .bind(tenant.0)
        .bind(now)
        .fetch_all(db.c())
        .await
        .map_err(sql_err)?;
        rows.iter()
            .map(|row| {
                let in_flight: i64 = row.try_get("in_flight").map_err(sql_err)?;
                Ok(ServiceStatus {
                    service: row.try_get("service").map_err(sql_err)?,
                    breaker: breaker_of(row)?,
                    in_flight: u32::try_from(in_flight).unwrap_or(u32::MAX),
                })
            })
            .collect()
    }

    async fn service_totals(&self) -> StoreResult<ServiceTotals> {
        let mut conn = self.desk_connection().await?;
        let mut db = Db::new(&mut conn, self);
        let now = db.now().await?;
        let rows = sqlx::query("SELECT state, count(*) AS n FROM service_breakers GROUP BY state")
            .fetch_all(db.c())
            .await
            .map_err(sql_err)?;
        let counts = rows
            .iter()
            .map(|row| {
                let state: String = row.try_get("state").map_err(sql_err)?;
                let count: i64 = row.try_get("n").map_err(sql_err)?;
                Ok((
                    BreakerState::from_column(&state)?,
                    u64::try_from(count).unwrap_or(0),
                ))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let in_flight: i64 =
            sqlx::query("SELECT count(*) FROM service_slots WHERE expires_at > $1")
                .bind(now)
                .fetch_one(db.c())
                .await
                .and_then(|row| row.try_get(0))
                .map_err(sql_err)?;
        Ok(ServiceTotals::from_counts(
            counts,
            u64::try_from(in_flight).unwrap_or(0),
        ))
    }
}
