//! Per-(tenant, service) limits ([`ServiceLimits`]) on Postgres, like SQLite's: a
//! breaker row per (tenant, service) and a slot row per in-flight call with its lease's
//! expiry. Acquire and release each run in one transaction that first makes sure the
//! breaker row exists and then locks it (`SELECT … FOR UPDATE`): every process's
//! acquirers of one (tenant, service) queue on that row, so two racing for the last
//! slot cannot both count it free. The decisions are the shared pure functions
//! [`limits::gate`] and [`limits::record`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_automation::limits::{
    self, Admission, Breaker, BreakerState, CallResult, Gate, LimitRules, Released, ServiceLimits,
    ServiceStatus, ServiceTotals, Slot,
};
use fronta_automation::store::StoreResult;
use fronta_desk::{DeskError, TenantId};
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use crate::PgStore;
use crate::desk::{Db, DeskSql, sql_err, tenant_exists};

fn state_of(text: &str) -> DeskSql<BreakerState> {
    BreakerState::parse(text)
        .ok_or_else(|| DeskError::Internal(format!("unknown breaker state {text:?}")))
}

fn breaker_of(row: &PgRow) -> DeskSql<Breaker> {
    let state: String = row.try_get("state").map_err(sql_err)?;
    let failures: i32 = row.try_get("failures").map_err(sql_err)?;
    Ok(Breaker {
        state: state_of(&state)?,
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

fn lease_end(now: DateTime<Utc>, lease: std::time::Duration) -> DateTime<Utc> {
    fronta_engine::clock::add(now, lease)
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
        let (is_probe, next) = match limits::gate(&breaker, probe_in_flight, now) {
            (Gate::Open { retry_at }, _) => {
                self.desk_commit(tx).await?;
                return Ok(Admission::Open { retry_at });
            }
            (Gate::ProbeBusy, _) => {
                self.desk_commit(tx).await?;
                return Ok(Admission::ProbeBusy);
            }
            (Gate::Pass { probe }, next) => (probe, next),
        };
        let in_flight: i64 =
            sqlx::query("SELECT count(*) FROM service_slots WHERE tenant = $1 AND service = $2")
                .bind(tenant.0)
                .bind(service)
                .fetch_one(db.c())
                .await
                .and_then(|row| row.try_get(0))
                .map_err(sql_err)?;
        if in_flight >= i64::from(rules.max_concurrent) {
            self.desk_commit(tx).await?;
            return Ok(Admission::Full);
        }
        let id = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO service_slots (id, tenant, service, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(id)
        .bind(tenant.0)
        .bind(service)
        .bind(lease_end(now, rules.slot_lease))
        .execute(db.c())
        .await
        .map_err(sql_err)?;
        breaker_put(
            &mut db,
            tenant,
            service,
            &next,
            if is_probe { Some(id) } else { None },
            now,
        )
        .await?;
        self.desk_commit(tx).await?;
        Ok(Admission::Admitted(Slot {
            id: id.to_string(),
            probe: is_probe,
        }))
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
        let is_probe = probe == Some(slot_id);
        let after = limits::record(&before, result, is_probe, rules, now);
        let probe = if is_probe { None } else { probe };
        breaker_put(&mut db, tenant, service, &after, probe, now).await?;
        self.desk_commit(tx).await?;
        Ok(Released { before, after })
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
        let mut breakers: Vec<(BreakerState, u64)> =
            BreakerState::ALL.iter().map(|state| (*state, 0)).collect();
        for row in &rows {
            let state: String = row.try_get("state").map_err(sql_err)?;
            let count: i64 = row.try_get("n").map_err(sql_err)?;
            let state = state_of(&state)?;
            if let Some(entry) = breakers.iter_mut().find(|(s, _)| *s == state) {
                entry.1 = u64::try_from(count).unwrap_or(0);
            }
        }
        let in_flight: i64 =
            sqlx::query("SELECT count(*) FROM service_slots WHERE expires_at > $1")
                .bind(now)
                .fetch_one(db.c())
                .await
                .and_then(|row| row.try_get(0))
                .map_err(sql_err)?;
        Ok(ServiceTotals {
            breakers,
            in_flight: u64::try_from(in_flight).unwrap_or(0),
        })
    }
}
