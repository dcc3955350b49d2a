//! Per-(tenant, service) limits ([`ServiceLimits`]) on SQLite: a breaker row per
//! (tenant, service) and a slot row per in-flight call with its lease's expiry.
//! Acquire and release are one job each on the writer thread, so they are serialised
//! against every other write of every process on the file (SQLite has one writer); the
//! decisions are the plans [`service_limits::plan_acquire`] and [`service_limits::plan_release`].

use async_trait::async_trait;
use fronta_automation::service_limits::{
    self, AcquireRead, Admission, Breaker, BreakerState, CallResult, LimitRules, Released,
    ServiceLimits, ServiceStatus, ServiceTotals, Slot,
};
use fronta_automation::store::StoreResult;
use fronta_desk::TenantId;
use rusqlite::{Connection, OptionalExtension, params};

use crate::SqliteStore;
use crate::desk::{DeskSql, instant, key, many, sql_err, tenant_exists};

/// The stored breaker and its probe slot (a missing row is a closed breaker).
fn breaker_get(
    conn: &Connection,
    tenant: TenantId,
    service: &str,
) -> DeskSql<(Breaker, Option<String>)> {
    let row = conn
        .prepare_cached(
            "SELECT state, failures, opened_at, retry_at, probe_slot FROM service_breakers \
             WHERE tenant = ?1 AND service = ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![key(&tenant.0), service], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, Option<i64>>(2)?,
                    row.get::<_, Option<i64>>(3)?,
                    row.get::<_, Option<String>>(4)?,
                ))
            })
            .optional()
        })
        .map_err(sql_err)?;
    let Some((state, failures, opened_at, retry_at, probe)) = row else {
        return Ok((Breaker::default(), None));
    };
    Ok((
        Breaker {
            state: BreakerState::from_column(&state)?,
            failures: u32::try_from(failures).unwrap_or(u32::MAX),
            opened_at: opened_at.map(instant),
            retry_at: retry_at.map(instant),
        },
        probe,
    ))
}

fn breaker_put(
    conn: &Connection,
    tenant: TenantId,
    service: &str,
    breaker: &Breaker,
    probe: Option<&str>,
    now: i64,
) -> DeskSql<()> {
    conn.prepare_cached(
        "INSERT INTO service_breakers \
         (tenant, service, state, failures, opened_at, retry_at, probe_slot, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (tenant, service) DO UPDATE SET state = excluded.state, \
         failures = excluded.failures, opened_at = excluded.opened_at, \
         retry_at = excluded.retry_at, probe_slot = excluded.probe_slot, \
         updated_at = excluded.updated_at",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            key(&tenant.0),
            service,
            breaker.state.as_str(),
            i64::from(breaker.failures),
            breaker.opened_at.map(|at| at.timestamp_millis()),
            breaker.retry_at.map(|at| at.timestamp_millis()),
            probe,
            now
        ])
    })
    .map_err(sql_err)?;
    Ok(())
}

fn slot_live(conn: &Connection, id: &str) -> DeskSql<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM service_slots WHERE id = ?1)")
        .and_then(|mut stmt| stmt.query_row([id], |row| row.get(0)))
        .map_err(sql_err)
}

#[async_trait]
impl ServiceLimits for SqliteStore {
    async fn service_acquire(
        &self,
        tenant: TenantId,
        service: &str,
        rules: &LimitRules,
    ) -> StoreResult<Admission> {
        let service = service.to_owned();
        let rules = *rules;
        self.desk_write(move |conn, now| {
            tenant_exists(conn, tenant)?;
            conn.prepare_cached(
                "DELETE FROM service_slots WHERE tenant = ?1 AND service = ?2 AND expires_at <= ?3",
            )
            .and_then(|mut stmt| stmt.execute(params![key(&tenant.0), service, now]))
            .map_err(sql_err)?;
            let (breaker, probe) = breaker_get(conn, tenant, &service)?;
            let probe_in_flight = match &probe {
                Some(id) => slot_live(conn, id)?,
                None => false,
            };
            let in_flight: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM service_slots WHERE tenant = ?1 AND service = ?2",
                )
                .and_then(|mut stmt| {
                    stmt.query_row(params![key(&tenant.0), service], |row| row.get(0))
                })
                .map_err(sql_err)?;
            let read = AcquireRead {
                breaker,
                probe_in_flight,
                in_flight: u64::try_from(in_flight).unwrap_or(0),
            };
            let new_id = || uuid::Uuid::new_v4().to_string();
            let plan = service_limits::plan_acquire(&read, &rules, instant(now), new_id);
            let Some(slot) = plan.slot else {
                return Ok(plan.answer);
            };
            conn.prepare_cached(
                "INSERT INTO service_slots (id, tenant, service, expires_at) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    slot.id,
                    key(&tenant.0),
                    service,
                    slot.lease_until.timestamp_millis()
                ])
            })
            .map_err(sql_err)?;
            breaker_put(
                conn,
                tenant,
                &service,
                &slot.breaker,
                slot.probe_slot.as_deref(),
                now,
            )?;
            Ok(plan.answer)
        })
        .await
    }

    async fn service_release(
        &self,
        tenant: TenantId,
        service: &str,
        slot: &Slot,
        result: CallResult,
        rules: &LimitRules,
    ) -> StoreResult<Released> {
        let service = service.to_owned();
        let slot = slot.clone();
        let rules = *rules;
        self.desk_write(move |conn, now| {
            conn.prepare_cached(
                "DELETE FROM service_slots WHERE id = ?1 AND tenant = ?2 AND service = ?3",
            )
            .and_then(|mut stmt| stmt.execute(params![slot.id, key(&tenant.0), service]))
            .map_err(sql_err)?;
            let (before, probe) = breaker_get(conn, tenant, &service)?;
            let plan =
                service_limits::plan_release(before, probe, &slot.id, result, &rules, instant(now));
            breaker_put(
                conn,
                tenant,
                &service,
                &plan.breaker,
                plan.probe_slot.as_deref(),
                now,
            )?;
            Ok(plan.answer)
        })
        .await
    }

    async fn service_list(&self, tenant: TenantId) -> StoreResult<Vec<ServiceStatus>> {
        self.read_with(
            move |conn, now| {
                let rows = many(
                    conn,
                    "SELECT b.service, b.state, b.failures, b.opened_at, b.retry_at, \
                     (SELECT count(*) FROM service_slots s WHERE s.tenant = b.tenant \
                      AND s.service = b.service AND s.expires_at > ?2) \
                     FROM service_breakers b WHERE b.tenant = ?1 ORDER BY b.service",
                    params![key(&tenant.0), now],
                    |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, String>(1)?,
                            row.get::<_, i64>(2)?,
                            row.get::<_, Option<i64>>(3)?,
                            row.get::<_, Option<i64>>(4)?,
                            row.get::<_, i64>(5)?,
                        ))
                    },
                )?;
                rows.into_iter()
                    .map(
                        |(service, state, failures, opened_at, retry_at, in_flight)| {
                            Ok(ServiceStatus {
                                service,
                                breaker: Breaker {
                                    state: BreakerState::from_column(&state)?,
                                    failures: u32::try_from(failures).unwrap_or(u32::MAX),
                                    opened_at: opened_at.map(instant),
                                    retry_at: retry_at.map(instant),
                                },
                                in_flight: u32::try_from(in_flight).unwrap_or(u32::MAX),
                            })
                        },
                    )
                    .collect()
            },
            crate::desk::from_store,
        )
        .await
    }

    async fn service_totals(&self) -> StoreResult<ServiceTotals> {
        self.read_with(
            move |conn, now| {
                let counts = many(
                    conn,
                    "SELECT state, count(*) FROM service_breakers GROUP BY state",
                    [],
                    |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)),
                )?;
                let counts = counts
                    .into_iter()
                    .map(|(state, count)| {
                        Ok((
                            BreakerState::from_column(&state)?,
                            u64::try_from(count).unwrap_or(0),
                        ))
                    })
                    .collect::<StoreResult<Vec<_>>>()?;
                let in_flight: i64 = conn
                    .prepare_cached("SELECT count(*) FROM service_slots WHERE expires_at > ?1")
                    .and_then(|mut stmt| stmt.query_row([now], |row| row.get(0)))
                    .map_err(sql_err)?;
                Ok(ServiceTotals::from_counts(
                    counts,
                    u64::try_from(in_flight).unwrap_or(0),
                ))
            },
            crate::desk::from_store,
        )
        .await
    }
}
