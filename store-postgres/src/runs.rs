//! The runs port in SQL: every statement the store sends, and the functions that bind
//! and decode them on a connection the caller holds (a pooled connection, the claim's
//! transaction, or a caller's [`crate::PgTx`]). Transactions, notifications to this
//! process and the pool live in `lib.rs`, not here.
//!
//! Time: every statement takes the store's now as `$1` (`Option<DateTime<Utc>>`):
//! `NULL` means the database's `now()` — one clock for every process, so a worker with a
//! skewed clock never steals a live run — and an instant means an injected clock (tests).
//! Either way it is truncated to the millisecond, like SQLite's integer milliseconds, and
//! every stored instant is that now plus whole milliseconds.
//!
//! Batching: a claim round is one statement per fairness level; heartbeats, finishes and
//! enqueues are one statement each for the whole batch (`unnest` of parallel arrays),
//! never one round trip per run. The statements are public so the plan tests `EXPLAIN`
//! exactly what runs.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use fronta_engine::StoreError;
use fronta_engine::liveness::ProcessId;
use fronta_engine::model::{NewRun, OwnerToken, Run, RunId, RunStatus, Trigger};
use fronta_engine::store::{
    CancelReply, ClaimBatch, ClaimParams, ClaimedRun, Enqueued, Finish, FinishAction, FinishReply,
    HeartbeatReply, LeaseRenewal, Prune, RunFilter, RunStats, StoreResult,
};
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgConnection, Row};
use uuid::Uuid;

use crate::map_err;

/// The stored `status` of a pending run (scheduled or queued, told apart by `run_at`).
pub const PENDING: i16 = 0;
/// The stored `status` of a running run (it holds an owner token:
/// `runs_owner_iff_running`).
pub const RUNNING: i16 = 1;
/// The stored `status` of a completed run.
pub const COMPLETED: i16 = 2;
/// The stored `status` of a failed run.
pub const FAILED: i16 = 3;
/// The stored `status` of a cancelled run.
pub const CANCELLED: i16 = 4;
/// The stored `status` of a suppressed run.
pub const SUPPRESSED: i16 = 5;

/// The longest delay or lease a statement adds to now: 100 years. Longer ones are clamped
/// so "now + delay" stays a valid `timestamptz` and a valid `chrono` instant — a delay
/// can never mean "never" nor overflow.
pub const MAX_DELAY_MS: i64 = 100 * 366 * 24 * 3600 * 1000;

/// How often an enqueue re-tries runs whose unique key's holder finished between the
/// insert and the look-up of the holder, before it gives up as `Unavailable`.
const MAX_KEY_ROUNDS: usize = 8;

type SqlResult<T> = Result<T, StoreError>;

/// The store's now in SQL: the injected instant `$1`, else the database clock.
macro_rules! now {
    () => {
        "date_trunc('milliseconds', coalesce($1::timestamptz, now()))"
    };
}

/// Every column of a run, in the order [`run_of`] reads them, then `later` (pending and
/// not yet due, judged by the store's now).
macro_rules! columns {
    () => {
        concat!(
            "runs.id, runs.tenant, runs.kind, runs.payload, runs.state, runs.trigger, ",
            "runs.unique_key, runs.priority, runs.status, runs.run_at, runs.attempts, ",
            "runs.max_retries, runs.reclaims, runs.parks, runs.locked_by, runs.locked_until, ",
            "runs.heartbeat_at, runs.cancel_requested, runs.created_at, runs.updated_at, ",
            "runs.started_at, runs.completed_at, runs.failed_at, runs.cancelled_at, ",
            "runs.last_error, runs.result, runs.run_at > ",
            now!(),
            " AS later"
        )
    };
}

/// The lease of a run's kind in milliseconds: `$2` kinds and `$3` their leases (parallel
/// arrays, from `ClaimParams::leases`), else `$4`, the default lease.
macro_rules! lease_ms {
    () => {
        "coalesce((SELECT lease.ms FROM unnest($2::text[], $3::int8[]) AS lease(kind, ms) \
         WHERE lease.kind = runs.kind), $4::int8)"
    };
}

/// The column right after [`columns!`]: extra outputs of a statement start here.
const EXTRA: usize = 27;

/// Insert runs; a unique key held by a pending or running run of the same tenant skips
/// the row (the partial unique index is the `ON CONFLICT` arbiter, so a duplicate *id*
/// still fails the statement as a unique violation). Rows go in input order, so within
/// one batch the first run with a key wins. Tenants of inserted runs are noted as having
/// pending work and `fronta_runs` is notified, in the same statement.
///
/// `$2..$11`: id, tenant, kind, payload, trigger, unique_key, priority, run_at (absolute
/// or NULL), delay_ms (or NULL), max_retries. Answers the inserted ids.
pub const INSERT_RUNS: &str = concat!(
    "WITH input AS (
        SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[], $5::jsonb[], $6::text[],
                             $7::text[], $8::int2[], $9::timestamptz[], $10::int8[], $11::int8[])
            WITH ORDINALITY AS input(id, tenant, kind, payload, trigger, unique_key, priority,
                                     run_at, delay_ms, max_retries, ord)
    ),
    inserted AS (
        INSERT INTO runs (id, tenant, kind, payload, trigger, unique_key, priority, status,
                          run_at, max_retries, created_at, updated_at)
        SELECT id, tenant, kind, payload, trigger, unique_key, priority, 0,
               coalesce(date_trunc('milliseconds', run_at),
                        ",
    now!(),
    " + delay_ms * interval '1 millisecond',
                        ",
    now!(),
    "),
               max_retries, ",
    now!(),
    ", ",
    now!(),
    "
        FROM input
        ORDER BY ord
        ON CONFLICT (tenant, unique_key) WHERE unique_key IS NOT NULL AND status IN (0, 1)
            DO NOTHING
        RETURNING id, tenant
    ),
    noted AS MATERIALIZED (
        SELECT fronta_note_pending(ARRAY(SELECT tenant FROM inserted)) AS tenants
    )
    SELECT ARRAY(SELECT id FROM inserted) AS ids, (SELECT tenants FROM noted) AS tenants"
);

/// A hand-off (`run_enqueue_started`): insert one run already *running* — a fresh
/// owner token, the lease `$10` (ms), `heartbeat_at = started_at = run_at = now` — when
/// that overtakes nothing: no due pending run of its tenant at its priority or above, and
/// no pending or running holder of its unique key (the `ON CONFLICT` arbiter skips the
/// row). Neither `run_tenants` nor `fronta_runs` hears of it: it was never pending.
///
/// The two probes are separate on purpose: `priority = $8 AND run_at <= now` walks
/// `runs_pending` from the front of that priority's entries and stops at the first one
/// not yet due, however many scheduled runs the tenant has; higher priorities are read
/// whole (normally few). `$2..$9`: id, tenant, kind, payload, trigger, unique_key,
/// priority, max_retries. Answers the run's columns, or no row when it was not started.
pub const HAND_OFF: &str = concat!(
    "INSERT INTO runs (id, tenant, kind, payload, trigger, unique_key, priority, status,
                      run_at, max_retries, locked_by, locked_until, heartbeat_at, started_at,
                      created_at, updated_at, locked_proc)
    SELECT $2, $3, $4, $5, $6, $7, $8, 1, ",
    now!(),
    ", $9, gen_random_uuid(), ",
    now!(),
    " + $10::int8 * interval '1 millisecond', ",
    now!(),
    ", ",
    now!(),
    ", ",
    now!(),
    ", ",
    now!(),
    ", $11::uuid
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE runs.tenant = $3 AND runs.status = 0
                        AND runs.priority = $8 AND runs.run_at <= ",
    now!(),
    ")
      AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.tenant = $3 AND runs.status = 0
                        AND runs.priority > $8 AND runs.run_at <= ",
    now!(),
    ")
    ON CONFLICT (tenant, unique_key) WHERE unique_key IS NOT NULL AND status IN (0, 1)
        DO NOTHING
    RETURNING ",
    columns!()
);

/// The pending or running holders of `($1 tenant, $2 unique_key)` pairs, by 1-based ordinal.
pub const FIND_KEY_HOLDERS: &str = "SELECT wanted.ord, runs.id
    FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS wanted(tenant, unique_key, ord)
    JOIN runs ON runs.tenant = wanted.tenant AND runs.unique_key = wanted.unique_key
             AND runs.status IN (0, 1)";

/// The first statement of a claim round — in the common cases the whole round, one
/// autocommitted statement (one round trip, one commit):
///
/// 1. `expired`: up to `$5` running runs whose lease ended (`locked_until < now`), oldest
///    lease first, locked with `SKIP LOCKED`; each is a reclaim, a crash loop (the
///    reclaim would push `reclaims` over `$6`) or a requested cancel;
/// 2. `turns`: the tenants with possible pending work, starting after `$7` (the tenant
///    the previous round ended at) and wrapping around;
/// 3. `shape`: the `target` (the limit less the reclaims) and the tenants' count, counted
///    up to `target` only (a round of one run among 1,000 tenants must not number them
///    all); the `share` each tenant is probed for is 1 when there are at least `target`
///    tenants, else `ceil(target / tenants)`;
/// 4. `candidates`: up to `share` due runs per tenant, in turn order — each probe is one
///    descent of `runs_pending` (`LIMIT share FOR UPDATE SKIP LOCKED`, so a run another
///    claimer holds is stepped over), ranked within the tenant. With a share of 1 the walk
///    stops once `target` runs are found; with a larger share every tenant is probed
///    (there are fewer tenants than `target`);
/// 5. `firsts`: the first `target` candidates by (rank, turn) — every tenant's n-th run
///    before any tenant's (n+1)-th. Candidates not chosen (fewer than the tenants' count)
///    stay pending;
/// 6. one `UPDATE` writes all of them: a fresh `gen_random_uuid()` owner token and the
///    kind's lease for the claimed, `failed` or `cancelled` for the others.
///
/// Answers every column of the run (as `run_get` reads them), then `expired`, `turn` and
/// `rank` (NULL for expired runs), then the tenants' count (up to `target`) and the share. A tenant that
/// gave its whole share may have more: [`CLAIM_MORE`] asks them when the round is short.
pub const CLAIM_FIRSTS: &str = concat!(
    "WITH expired AS MATERIALIZED (
        SELECT id, cancel_requested AS cancel,
               NOT cancel_requested AND reclaims + 1 > $6 AS crash
        FROM runs
        WHERE status = 1 AND locked_until < ",
    now!(),
    "
        ORDER BY locked_until
        LIMIT $5
        FOR UPDATE SKIP LOCKED
    ),
    turns AS MATERIALIZED (
        SELECT tenant, row_number() OVER (ORDER BY tenant <= $7, tenant) AS turn
        FROM run_tenants
    ),
    wanted AS MATERIALIZED (
        SELECT greatest($5 - (SELECT count(*) FROM expired WHERE NOT cancel AND NOT crash), 0)
            AS target
    ),
    shape AS MATERIALIZED (
        SELECT target, tenants,
               CASE WHEN tenants >= target THEN 1
                    ELSE (target + tenants - 1) / greatest(tenants, 1) END AS share
        FROM wanted,
             (SELECT count(*) AS tenants
              FROM (SELECT 1 FROM run_tenants LIMIT (SELECT target FROM wanted)) AS listed)
                 AS counted
    ),
    candidates AS MATERIALIZED (
        SELECT due.id, due.rank, turns.turn
        FROM turns
        CROSS JOIN LATERAL (
            SELECT locked.id, row_number() OVER () AS rank
            FROM (
                SELECT id FROM runs
                WHERE runs.tenant = turns.tenant AND status = 0 AND run_at <= ",
    now!(),
    "
                ORDER BY priority DESC, run_at
                LIMIT (SELECT share FROM shape)
                FOR UPDATE SKIP LOCKED
            ) AS locked
        ) AS due
        LIMIT (SELECT CASE WHEN tenants >= target THEN target END FROM shape)
    ),
    firsts AS MATERIALIZED (
        SELECT id, rank, turn FROM candidates
        ORDER BY rank, turn
        LIMIT (SELECT target FROM shape)
    ),
    picked AS (
        SELECT id, true AS expired, cancel, crash, NULL::bigint AS turn, NULL::bigint AS rank
        FROM expired
        UNION ALL
        SELECT id, false, false, false, turn, rank FROM firsts
    )
    UPDATE runs SET
        status = CASE WHEN picked.cancel THEN 4 WHEN picked.crash THEN 3 ELSE 1 END,
        locked_by = CASE WHEN picked.cancel OR picked.crash THEN NULL ELSE gen_random_uuid() END,
        locked_proc = CASE WHEN picked.cancel OR picked.crash THEN NULL ELSE $8::uuid END,
        locked_until = CASE WHEN picked.cancel OR picked.crash THEN NULL
            ELSE ",
    now!(),
    " + ",
    lease_ms!(),
    " * interval '1 millisecond' END,
        heartbeat_at = CASE WHEN picked.cancel OR picked.crash THEN runs.heartbeat_at
            ELSE ",
    now!(),
    " END,
        started_at = CASE WHEN picked.cancel OR picked.crash THEN runs.started_at
            ELSE coalesce(runs.started_at, ",
    now!(),
    ") END,
        reclaims = runs.reclaims + CASE WHEN picked.expired AND NOT picked.cancel THEN 1 ELSE 0 END,
        failed_at = CASE WHEN picked.crash THEN ",
    now!(),
    " ELSE runs.failed_at END,
        cancelled_at = CASE WHEN picked.cancel THEN ",
    now!(),
    " ELSE runs.cancelled_at END,
        last_error = CASE WHEN picked.crash
            THEN 'crash loop: the lease expired ' || (runs.reclaims + 1) || ' times (max_reclaims '
                 || $6 || '); the handler was not started again'
            ELSE runs.last_error END,
        updated_at = ",
    now!(),
    "
    FROM picked
    WHERE runs.id = ANY(ARRAY(SELECT id FROM picked))
      AND runs.id = picked.id
    RETURNING ",
    columns!(),
    ", picked.expired, picked.turn, picked.rank,
      (SELECT tenants FROM shape), (SELECT share FROM shape)"
);

/// A later level of a claim round (after the earlier levels committed, so the runs they
/// claimed are `running` now): up to `$6` more due runs from each tenant of `$5` (in turn order), then
/// the first `$7` of those by (rank within its tenant, turn) — every tenant's n-th run
/// before any tenant's (n+1)-th. Rows locked by `more` but not chosen stay pending.
pub const CLAIM_MORE: &str = concat!(
    "WITH active AS MATERIALIZED (
        SELECT tenant, turn FROM unnest($5::text[]) WITH ORDINALITY AS active(tenant, turn)
    ),
    more AS MATERIALIZED (
        SELECT due.id, due.rank, active.turn
        FROM active
        CROSS JOIN LATERAL (
            SELECT locked.id, row_number() OVER () AS rank
            FROM (
                SELECT id FROM runs
                WHERE runs.tenant = active.tenant AND status = 0 AND run_at <= ",
    now!(),
    "
                ORDER BY priority DESC, run_at
                LIMIT $6
                FOR UPDATE SKIP LOCKED
            ) AS locked
        ) AS due
    )
    UPDATE runs SET
        status = 1,
        locked_by = gen_random_uuid(),
        locked_proc = $8::uuid,
        locked_until = ",
    now!(),
    " + ",
    lease_ms!(),
    " * interval '1 millisecond',
        heartbeat_at = ",
    now!(),
    ",
        started_at = coalesce(runs.started_at, ",
    now!(),
    "),
        updated_at = ",
    now!(),
    "
    WHERE runs.id = ANY(ARRAY(SELECT id FROM more ORDER BY rank, turn LIMIT $7))
    RETURNING ",
    columns!()
);

/// Tenants of `run_tenants` other than `$1` with no pending run whose exclusive tenant
/// lock this transaction could take without waiting (an enqueue of that tenant in flight
/// holds it shared). `CASE` orders the two: the lock is tried only for empty tenants.
pub const FORGET_CANDIDATES: &str = "SELECT tenant FROM run_tenants
    WHERE tenant <> ALL($1::text[])
      AND CASE WHEN NOT EXISTS (SELECT 1 FROM runs
                                WHERE runs.tenant = run_tenants.tenant AND runs.status = 0)
               THEN pg_try_advisory_xact_lock(1718775662, hashtext(run_tenants.tenant))
               ELSE false END";

/// Forget the tenants `$1` (their locks are held) that still have no pending run. A
/// statement after [`FORGET_CANDIDATES`], so its snapshot sees every enqueue that
/// committed before the locks were taken.
pub const FORGET_TENANTS: &str = "DELETE FROM run_tenants
    WHERE tenant = ANY($1::text[])
      AND NOT EXISTS (SELECT 1 FROM runs
                      WHERE runs.tenant = run_tenants.tenant AND runs.status = 0)";

/// Renew leases `($2 id, $3 owner, $4 lease_ms)`, owner-checked; answers the renewed
/// `(id, owner)` pairs with their `cancel_requested` (a batch may carry one run under a
/// stale and a current token: each is answered by its own). Fenced by the owner check
/// alone, and so found by id, never through `runs_running`, as [`FINISH`] is.
pub const HEARTBEAT: &str = concat!(
    "UPDATE runs SET
        locked_until = ",
    now!(),
    " + renewal.lease_ms * interval '1 millisecond',
        heartbeat_at = ",
    now!(),
    ",
        updated_at = ",
    now!(),
    "
    FROM unnest($2::uuid[], $3::uuid[], $4::int8[]) AS renewal(id, owner, lease_ms)
    WHERE runs.id = ANY($2::uuid[])
      AND runs.id = renewal.id AND runs.locked_by = renewal.owner
    RETURNING runs.id, renewal.owner, runs.cancel_requested"
);

/// Store `$4` as run `$2`'s state and renew its lease by `$5` ms, owner-checked (`$3`).
pub const CHECKPOINT: &str = concat!(
    "UPDATE runs SET
        state = $4,
        locked_until = ",
    now!(),
    " + $5 * interval '1 millisecond',
        heartbeat_at = ",
    now!(),
    ",
        updated_at = ",
    now!(),
    "
    WHERE id = $2 AND status = 1 AND locked_by = $3"
);

/// Write finishes `($2 id, $3 owner, $4 action, $5 delay_ms, $6 error, $7 result)`,
/// owner-checked, in one statement. Actions: 0 complete, 1 fail, 2 retry, 3 snooze,
/// 4 park, 5 cancel, 6 release. With `cancel_requested`, 2, 3, 4 and 6 write `cancelled`
/// and move no counter. Runs put back to pending have their tenant noted (and
/// `fronta_runs` notified) by the same statement. Answers id, owner, status, later: a
/// batch may carry one run under a stale and a current token, and only the current one
/// joins the row.
///
/// The owner check alone fences: `runs_owner_iff_running` (migration 12) makes a set
/// `locked_by` mean `running`. Leaving `status = 1` out of the `WHERE` keeps the partial
/// index `runs_running` out of the plan: under a drain it holds tens of thousands of dead
/// entries (every finished run's old version, until vacuum), and a plan that bitmap-ANDed
/// it with the primary key, or joined on a one-row estimate, took twice as long.
pub const FINISH: &str = concat!(
    "WITH finish AS (
        SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::int2[], $5::int8[], $6::text[],
                             $7::jsonb[])
            AS finish(id, owner, action, delay_ms, error, result)
    ),
    done AS (
        UPDATE runs SET
            status = CASE
                WHEN finish.action = 0 THEN 2
                WHEN finish.action = 1 THEN 3
                WHEN finish.action = 7 THEN 5
                WHEN finish.action = 5 OR runs.cancel_requested THEN 4
                ELSE 0 END,
            completed_at = CASE WHEN finish.action = 0 THEN ",
    now!(),
    " ELSE runs.completed_at END,
            failed_at = CASE WHEN finish.action IN (1, 7) THEN ",
    now!(),
    " ELSE runs.failed_at END,
            cancelled_at = CASE WHEN finish.action = 5
                                  OR (finish.action IN (2, 3, 4, 6) AND runs.cancel_requested)
                THEN ",
    now!(),
    " ELSE runs.cancelled_at END,
            result = CASE WHEN finish.action = 0 THEN finish.result ELSE runs.result END,
            last_error = CASE WHEN finish.action IN (1, 2, 4, 7) THEN finish.error
                WHEN finish.action = 0 THEN NULL
                ELSE runs.last_error END,
            run_at = CASE
                WHEN finish.action IN (2, 3, 4)
                    THEN ",
    now!(),
    " + finish.delay_ms * interval '1 millisecond'
                WHEN finish.action = 6 THEN ",
    now!(),
    "
                ELSE runs.run_at END,
            attempts = runs.attempts
                + CASE WHEN finish.action = 2 AND NOT runs.cancel_requested THEN 1 ELSE 0 END,
            parks = runs.parks
                + CASE WHEN finish.action = 4 AND NOT runs.cancel_requested THEN 1 ELSE 0 END,
            locked_by = NULL,
            locked_until = NULL,
            updated_at = ",
    now!(),
    "
        FROM finish
        WHERE runs.id = ANY($2::uuid[])
          AND runs.id = finish.id AND runs.locked_by = finish.owner
        RETURNING runs.id, finish.owner, runs.status, runs.tenant, runs.run_at > ",
    now!(),
    " AS later
    ),
    noted AS MATERIALIZED (
        SELECT fronta_note_pending(ARRAY(SELECT tenant FROM done WHERE status = 0)) AS tenants
    )
    SELECT done.id, done.owner, done.status, done.later FROM done CROSS JOIN noted"
);

/// The update of a cancel request ([`REQUEST_CANCEL`]): a pending run cancelled, a
/// running one flagged; the caller's `WHERE` picks the runs.
macro_rules! cancel_set {
    () => {
        concat!(
            "UPDATE runs SET
        status = CASE WHEN status = 0 THEN 4 ELSE status END,
        cancelled_at = CASE WHEN status = 0 THEN ",
            now!(),
            " ELSE cancelled_at END,
        cancel_requested = CASE WHEN status = 1 THEN true ELSE cancel_requested END,
        updated_at = ",
            now!()
        )
    };
}

/// Cancel run `$2` if it is pending, or flag it if it is running; answers the status it
/// had (nothing when it is terminal or unknown). Every expression reads the version the
/// write applies to: when a claim commits first, the update waits and then re-reads the
/// row (now `running`, so it is flagged, not cancelled). A pending run leaves as
/// `cancelled` and a running one stays `running`, so the new status names the old one.
///
/// (An earlier form read the old status through a locking self-join; racing a claim it
/// could pair the pending status with the claimed row and write `cancelled` over a live
/// owner token. `runs_owner_iff_running` now refuses such a row.)
pub const REQUEST_CANCEL: &str = concat!(
    cancel_set!(),
    " WHERE id = $2 AND status IN (0, 1)
    RETURNING CASE WHEN status = 1 THEN 1 ELSE 0 END::smallint"
);

/// The status of run `$2` and whether it is not yet due.
pub const STATUS_OF: &str = concat!(
    "SELECT status, run_at > ",
    now!(),
    " AS later FROM runs WHERE id = $2"
);

/// One run by id (`$2`).
pub const GET: &str = concat!("SELECT ", columns!(), " FROM runs WHERE runs.id = $2");

/// The newest run of tenant `$2` with unique key `$3`, of any status
/// (`RunStore::run_find_by_key`; ids are UUIDv7, so the largest is the newest).
pub const FIND_BY_KEY: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM runs WHERE runs.tenant = $2 AND runs.unique_key = $3 ORDER BY runs.id DESC LIMIT 1"
);

/// Counts per status (pending split by due-ness) and the counters' sums: the finished
/// runs from `run_counts` (kept by triggers, migration 19, its shards summed), the live
/// ones through their partial indexes — the cost follows the kinds and the live runs,
/// never the history.
pub const STATS: &str = concat!(
    "SELECT kind, status, false, sum(runs)::int8, sum(attempts)::int8, sum(reclaims)::int8, \
       sum(parks)::int8 FROM run_counts GROUP BY 1, 2 HAVING sum(runs) <> 0
    UNION ALL
    SELECT kind, status, run_at > ",
    now!(),
    " AS later, count(*), sum(attempts)::int8, sum(reclaims)::int8, sum(parks)::int8
    FROM runs WHERE status = 0 GROUP BY 1, 2, 3
    UNION ALL
    SELECT kind, status, false, count(*), sum(attempts)::int8, sum(reclaims)::int8, \
       sum(parks)::int8 FROM runs WHERE status = 1 GROUP BY 1, 2"
);

/// `RunStore::compact_counts`: the shards of `run_counts` whose backend is gone, folded
/// into shard 0 in one statement.
pub const COMPACT_COUNTS: &str = "\
    WITH gone AS (
        DELETE FROM run_counts WHERE shard <> 0
            AND shard NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
        RETURNING kind, status, runs, attempts, reclaims, parks
    )
    INSERT INTO run_counts AS c (kind, status, shard, runs, attempts, reclaims, parks)
        SELECT kind, status, 0, sum(runs), sum(attempts), sum(reclaims), sum(parks)
        FROM gone GROUP BY kind, status ORDER BY kind, status
        ON CONFLICT (kind, status, shard) DO UPDATE SET runs = c.runs + excluded.runs,
            attempts = c.attempts + excluded.attempts,
            reclaims = c.reclaims + excluded.reclaims, parks = c.parks + excluded.parks";

/// The store's now and a round-trip counter, handed to every function here.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// `None`: the database clock.
    pub now: Option<DateTime<Utc>>,
    pub round_trips: &'a AtomicU64,
}

impl Ctx<'_> {
    pub(crate) fn trip(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }
}

/// A duration in whole milliseconds, clamped to [`MAX_DELAY_MS`].
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .unwrap_or(i64::MAX)
        .min(MAX_DELAY_MS)
}

fn count(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

pub(crate) fn status_of(code: i16, later: bool) -> RunStatus {
    match code {
        PENDING if later => RunStatus::Scheduled,
        PENDING => RunStatus::Queued,
        RUNNING => RunStatus::Running,
        COMPLETED => RunStatus::Completed,
        FAILED => RunStatus::Failed,
        SUPPRESSED => RunStatus::Suppressed,
        _ => RunStatus::Cancelled,
    }
}

fn decode(err: sqlx::Error) -> StoreError {
    StoreError::Internal(format!("cannot read a run row: {err}"))
}

/// A row of [`columns!`] as a run.
fn run_of(row: &PgRow) -> SqlResult<Run> {
    let get = || -> Result<Run, sqlx::Error> {
        let trigger: String = row.try_get(5)?;
        Ok(Run {
            id: RunId(row.try_get(0)?),
            tenant: row.try_get(1)?,
            kind: row.try_get(2)?,
            payload: row.try_get(3)?,
            state: row.try_get(4)?,
            trigger: trigger.parse::<Trigger>().unwrap_or(Trigger::Api),
            unique_key: row.try_get(6)?,
            priority: row.try_get(7)?,
            status: status_of(row.try_get(8)?, row.try_get(26)?),
            run_at: row.try_get(9)?,
            attempts: count(row.try_get(10)?),
            max_retries: u32::try_from(row.try_get::<i64, _>(11)?).unwrap_or(u32::MAX),
            reclaims: count(row.try_get(12)?),
            parks: count(row.try_get(13)?),
            locked_by: row.try_get::<Option<Uuid>, _>(14)?.map(OwnerToken),
            locked_until: row.try_get(15)?,
            heartbeat_at: row.try_get(16)?,
            cancel_requested: row.try_get(17)?,
            created_at: row.try_get(18)?,
            updated_at: row.try_get(19)?,
            started_at: row.try_get(20)?,
            completed_at: row.try_get(21)?,
            failed_at: row.try_get(22)?,
            cancelled_at: row.try_get(23)?,
            last_error: row.try_get(24)?,
            result: row.try_get(25)?,
        })
    };
    get().map_err(decode)
}

fn claimed_of(run: Run, reclaimed: bool) -> SqlResult<ClaimedRun> {
    let owner = run.locked_by.ok_or_else(|| {
        StoreError::Internal("invariant: a claimed run has an owner token".into())
    })?;
    Ok(ClaimedRun {
        run,
        owner,
        reclaimed,
    })
}

/// Insert `runs` on `conn` and answer each in input order, plus whether any row was
/// inserted. Runs without a unique key need no transaction around this (one statement);
/// with keys, the caller holds one: a key whose holder finished between the insert and
/// the look-up is inserted again in a later round of the same transaction.
pub(crate) async fn insert_many(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    runs: &[NewRun],
) -> SqlResult<(Vec<Enqueued>, bool)> {
    let mut answers: Vec<Option<Enqueued>> = vec![None; runs.len()];
    let mut todo: Vec<usize> = (0..runs.len()).collect();
    let mut inserted_any = false;
    for _ in 0..MAX_KEY_ROUNDS {
        if todo.is_empty() {
            break;
        }
        let inserted = insert_rows(conn, ctx, runs, &todo).await?;
        inserted_any |= !inserted.is_empty();
        let mut missing = Vec::new();
        for &index in &todo {
            if inserted.contains(&runs[index].id.0) {
                answers[index] = Some(Enqueued::Inserted(runs[index].id));
            } else {
                missing.push(index);
            }
        }
        if missing.is_empty() {
            todo.clear();
            break;
        }
        // Only the unique-key arbiter skips a row: each missing run has a key and a holder.
        let (tenants, keys): (Vec<&str>, Vec<&str>) = missing
            .iter()
            .map(|&index| {
                let run = &runs[index];
                (run.tenant.as_str(), run.unique_key.as_deref().unwrap_or(""))
            })
            .unzip();
        ctx.trip();
        let holders: Vec<(i64, Uuid)> = sqlx::query_as(FIND_KEY_HOLDERS)
            .bind(&tenants)
            .bind(&keys)
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        let holders: HashMap<i64, Uuid> = holders.into_iter().collect();
        todo = Vec::new();
        for (position, &index) in missing.iter().enumerate() {
            match holders.get(&(position as i64 + 1)) {
                Some(&holder) => answers[index] = Some(Enqueued::Existing(RunId(holder))),
                // The holder ended after the insert looked: try this run again.
                None => todo.push(index),
            }
        }
    }
    if !todo.is_empty() {
        return Err(StoreError::Unavailable(format!(
            "the unique keys of {} runs kept changing hands during the enqueue; try again",
            todo.len()
        )));
    }
    let answers = answers
        .into_iter()
        .map(|answer| {
            answer.ok_or_else(|| StoreError::Internal("invariant: every run answered".into()))
        })
        .collect::<SqlResult<Vec<_>>>()?;
    Ok((answers, inserted_any))
}

async fn insert_rows(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    runs: &[NewRun],
    which: &[usize],
) -> SqlResult<HashSet<Uuid>> {
    let n = which.len();
    let mut ids = Vec::with_capacity(n);
    let mut tenants = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut triggers = Vec::with_capacity(n);
    let mut keys = Vec::with_capacity(n);
    let mut priorities = Vec::with_capacity(n);
    let mut run_ats = Vec::with_capacity(n);
    let mut delays = Vec::with_capacity(n);
    let mut max_retries = Vec::with_capacity(n);
    for &index in which {
        let run = &runs[index];
        ids.push(run.id.0);
        tenants.push(run.tenant.as_str());
        kinds.push(run.kind.as_str());
        payloads.push(&run.payload);
        triggers.push(run.trigger.as_str());
        keys.push(run.unique_key.as_deref());
        priorities.push(run.priority);
        run_ats.push(run.run_at);
        delays.push(run.delay.map(millis));
        max_retries.push(i64::from(run.max_retries));
    }
    ctx.trip();
    let row = sqlx::query(INSERT_RUNS)
        .bind(ctx.now)
        .bind(&ids)
        .bind(&tenants)
        .bind(&kinds)
        .bind(&payloads)
        .bind(&triggers)
        .bind(&keys)
        .bind(&priorities)
        .bind(&run_ats)
        .bind(&delays)
        .bind(&max_retries)
        .fetch_one(&mut *conn)
        .await
        .map_err(|err| match map_err(err) {
            StoreError::Conflict(message) => {
                StoreError::Conflict(format!("a run id already exists: {message}"))
            }
            other => other,
        })?;
    let inserted: Vec<Uuid> = row.try_get(0).map_err(decode)?;
    Ok(inserted.into_iter().collect())
}

/// Insert `run` already claimed with `lease` when it overtakes nothing ([`HAND_OFF`]);
/// `None` when it was not inserted (the caller enqueues it the usual way).
pub(crate) async fn hand_off(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    run: &NewRun,
    lease: Duration,
    holder: Option<ProcessId>,
) -> SqlResult<Option<ClaimedRun>> {
    ctx.trip();
    let row = sqlx::query(HAND_OFF)
        .bind(ctx.now)
        .bind(run.id.0)
        .bind(run.tenant.as_str())
        .bind(run.kind.as_str())
        .bind(&run.payload)
        .bind(run.trigger.as_str())
        .bind(run.unique_key.as_deref())
        .bind(run.priority)
        .bind(i64::from(run.max_retries))
        .bind(millis(lease))
        .bind(holder.map(|id| id.0))
        .fetch_optional(&mut *conn)
        .await
        .map_err(|err| match map_err(err) {
            StoreError::Conflict(message) => {
                StoreError::Conflict(format!("a run id already exists: {message}"))
            }
            other => other,
        })?;
    row.map(|row| claimed_of(run_of(&row)?, false)).transpose()
}

/// Whether a batched write keeps a prepared statement (sqlx's `persistent`): never. A prepared statement switches to a generic plan after five runs, and
/// the generic plan of [`FINISH`] and [`HEARTBEAT`] cannot see the batch's size: it
/// guesses ten entries and one matching row and joins them as a nested loop that reads
/// the whole batch once per run — measured at 690 ms for one batch of 1,000 finishes
/// (999,000 rows removed by the join filter). Sent unprepared, each batch is planned
/// with its arrays in hand (`unnest` and `id = ANY` are estimated from their real
/// lengths): a hash join or an index probe per run, linear in the batch, for a planning
/// cost paid once per batch, not per run.
const PREPARE_BATCHED_WRITES: bool = false;

/// The per-kind leases as parallel arrays (kinds sorted, so statements are repeatable).
fn lease_arrays(params: &ClaimParams) -> (Vec<&str>, Vec<i64>) {
    let mut leases: Vec<(&str, i64)> = params
        .leases
        .iter()
        .map(|(kind, lease)| (kind.as_str(), millis(*lease)))
        .collect();
    leases.sort();
    leases.into_iter().unzip()
}

/// One claim round on a pooled connection, each statement autocommitted (see
/// [`CLAIM_FIRSTS`] and [`CLAIM_MORE`]): a round is one statement when every tenant gave
/// what it was asked for, a later level only when a tenant gave its whole share and the
/// round is still short, and the tenant list is tidied (its own transaction) only when a
/// tenant visited gave nothing. Takes the tenant the previous round ended at and answers
/// the batch with the tenant this round ended at.
///
/// Each statement commits on its own, so a round's runs are `running` before the next
/// level looks: a later level never takes a run twice, and a process that dies between
/// levels leaves only leased runs, reclaimed as after any crash.
pub(crate) async fn claim(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    params: &ClaimParams,
    cursor: Option<&str>,
    tidy: TidyGate<'_>,
) -> SqlResult<(ClaimBatch, Option<String>)> {
    let mut batch = ClaimBatch::default();
    if params.limit == 0 {
        return Ok((batch, None));
    }
    let limit = i64::try_from(params.limit).unwrap_or(i64::MAX);
    let (kinds, lease_ms) = lease_arrays(params);
    let default_ms = millis(params.default_lease);

    // Level 1: reclaims, then up to a share of due runs per tenant.
    ctx.trip();
    let rows = sqlx::query(CLAIM_FIRSTS)
        .bind(ctx.now)
        .bind(&kinds)
        .bind(&lease_ms)
        .bind(default_ms)
        .bind(limit)
        .bind(i64::from(params.max_reclaims))
        .bind(cursor.unwrap_or(""))
        .bind(params.holder.map(|id| id.0))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let mut tenants_listed: Option<usize> = None;
    let mut share = 1_usize;
    let mut firsts: Vec<(i64, i64, ClaimedRun)> = Vec::new();
    for row in &rows {
        let run = run_of(row)?;
        let expired: bool = row.try_get(EXTRA).map_err(decode)?;
        let turn: Option<i64> = row.try_get(EXTRA + 1).map_err(decode)?;
        let rank: Option<i64> = row.try_get(EXTRA + 2).map_err(decode)?;
        let listed: i64 = row.try_get(EXTRA + 3).map_err(decode)?;
        let shared: i64 = row.try_get(EXTRA + 4).map_err(decode)?;
        tenants_listed = Some(usize::try_from(listed).unwrap_or(0));
        share = usize::try_from(shared).unwrap_or(1).max(1);
        if !expired {
            firsts.push((
                rank.unwrap_or(i64::MAX),
                turn.unwrap_or(i64::MAX),
                claimed_of(run, false)?,
            ));
            continue;
        }
        match run.status {
            RunStatus::Cancelled => batch.cancelled.push(run.id),
            RunStatus::Failed => batch.crash_looped.push(run),
            _ => batch.claimed.push(claimed_of(run, true)?),
        }
    }
    let first_level_target = params.limit.saturating_sub(batch.claimed.len());
    // With a share over 1 every listed tenant was probed; with a share of 1 the walk
    // stopped early unless it came back short.
    let visited_every_tenant = share > 1 || firsts.len() < first_level_target;
    firsts.sort_by_key(|(rank, turn, _)| (*rank, *turn));
    let mut given: HashMap<String, usize> = HashMap::new();
    let mut served: Vec<String> = Vec::new();
    for (_, _, claimed) in &firsts {
        let count = given.entry(claimed.run.tenant.clone()).or_default();
        if *count == 0 {
            served.push(claimed.run.tenant.clone());
        }
        *count += 1;
    }
    batch
        .claimed
        .extend(firsts.into_iter().map(|(_, _, claimed)| claimed));

    // Later levels: an equal share more from each tenant that gave its whole share.
    let mut remaining = params.limit.saturating_sub(batch.claimed.len());
    let mut active: Vec<String> = served
        .iter()
        .filter(|tenant| given.get(*tenant).copied() == Some(share))
        .cloned()
        .collect();
    while remaining > 0 && !active.is_empty() {
        let share = remaining.div_ceil(active.len());
        ctx.trip();
        let rows = sqlx::query(CLAIM_MORE)
            .bind(ctx.now)
            .bind(&kinds)
            .bind(&lease_ms)
            .bind(default_ms)
            .bind(&active)
            .bind(i64::try_from(share).unwrap_or(i64::MAX))
            .bind(i64::try_from(remaining).unwrap_or(i64::MAX))
            .bind(params.holder.map(|id| id.0))
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        if rows.is_empty() {
            break;
        }
        let mut taken = rows
            .iter()
            .map(|row| run_of(row).and_then(|run| claimed_of(run, false)))
            .collect::<SqlResult<Vec<_>>>()?;
        remaining = remaining.saturating_sub(taken.len());
        let turn_of: HashMap<&str, usize> = active
            .iter()
            .enumerate()
            .map(|(turn, tenant)| (tenant.as_str(), turn))
            .collect();
        // Claim order within the level: rank within the tenant, then the tenant's turn.
        taken.sort_by(|a, b| {
            (std::cmp::Reverse(a.run.priority), a.run.run_at)
                .cmp(&(std::cmp::Reverse(b.run.priority), b.run.run_at))
        });
        let mut per_tenant: HashMap<String, usize> = HashMap::new();
        let mut ranked: Vec<(usize, usize, ClaimedRun)> = taken
            .into_iter()
            .map(|claimed| {
                let rank = per_tenant.entry(claimed.run.tenant.clone()).or_default();
                *rank += 1;
                let turn = turn_of
                    .get(claimed.run.tenant.as_str())
                    .copied()
                    .unwrap_or(usize::MAX);
                (*rank, turn, claimed)
            })
            .collect();
        ranked.sort_by_key(|(rank, turn, _)| (*rank, *turn));
        batch
            .claimed
            .extend(ranked.into_iter().map(|(_, _, claimed)| claimed));
        // A tenant that gave less than its share has no more due runs free.
        active.retain(|tenant| per_tenant.get(tenant).copied() == Some(share));
    }

    // Tidy the tenant list only when a tenant probed gave nothing (or nothing was
    // claimed at all): a drain of busy tenants pays no extra round trip. And not for
    // every such round: see `TidyGate`. The count is capped at the round's target, so
    // beyond it `empty_met` is a lower bound (a walk that visited every tenant met at
    // least that many empty ones).
    let empty_met = tenants_listed.map(|listed| listed.saturating_sub(served.len()));
    let some_tenant_gave_nothing = empty_met != Some(0);
    if visited_every_tenant && some_tenant_gave_nothing && tidy.due(empty_met.unwrap_or(0)) {
        forget_empty_tenants(conn, ctx, &served).await?;
    }
    Ok((batch, served.last().cloned()))
}

/// When a claim round may tidy the tenant list: when it met at least
/// [`crate::TIDY_EMPTY_TENANTS`] empty tenants (each costs every round a probe), or when
/// this process last tidied at least `every` ago. Without the pause a tenant drained
/// and fed again at once (one run at a time) is deleted from the list after each run and
/// listed again by the next enqueue: a write and a commit per run for nothing.
#[derive(Clone, Copy)]
pub(crate) struct TidyGate<'a> {
    pub last: &'a std::sync::Mutex<Option<std::time::Instant>>,
    pub every: Duration,
}

impl TidyGate<'_> {
    /// Whether to tidy now; a yes counts as the tidy's time.
    fn due(self, empty_met: usize) -> bool {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let due = empty_met >= crate::TIDY_EMPTY_TENANTS
            || last.is_none_or(|at| at.elapsed() >= self.every);
        if due {
            *last = Some(std::time::Instant::now());
        }
        due
    }
}

/// Drop tenants with no pending run from `run_tenants` (all but `served`, which just gave
/// a run), in a transaction of its own: the advisory locks it takes last until its
/// commit. See the lock protocol in [`crate::schema::RUNS_V1`].
async fn forget_empty_tenants(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    served: &[String],
) -> SqlResult<()> {
    ctx.trip();
    let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(map_err)?;
    ctx.trip();
    let locked: Vec<String> = sqlx::query_scalar(FORGET_CANDIDATES)
        .bind(served)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
    if !locked.is_empty() {
        ctx.trip();
        sqlx::query(FORGET_TENANTS)
            .bind(&locked)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
    }
    ctx.trip();
    tx.commit().await.map_err(map_err)
}

pub(crate) async fn heartbeat(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    leases: &[LeaseRenewal],
) -> SqlResult<Vec<HeartbeatReply>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    // Rows are locked in id order, as the finish does: two batches of one worker never
    // wait on each other in opposite orders.
    let mut sorted: Vec<&LeaseRenewal> = leases.iter().collect();
    sorted.sort_by_key(|lease| lease.id);
    let ids: Vec<Uuid> = sorted.iter().map(|lease| lease.id.0).collect();
    let owners: Vec<Uuid> = sorted.iter().map(|lease| lease.owner.0).collect();
    let lease_ms: Vec<i64> = sorted.iter().map(|lease| millis(lease.lease)).collect();
    ctx.trip();
    // Planned with the batch in hand, never from a cached generic plan (see
    // `PREPARE_BATCHED_WRITES`).
    let renewed: Vec<(Uuid, Uuid, bool)> = sqlx::query_as(HEARTBEAT)
        .persistent(PREPARE_BATCHED_WRITES)
        .bind(ctx.now)
        .bind(&ids)
        .bind(&owners)
        .bind(&lease_ms)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let renewed: HashMap<(Uuid, Uuid), bool> = renewed
        .into_iter()
        .map(|(id, owner, cancel)| ((id, owner), cancel))
        .collect();
    Ok(leases
        .iter()
        .map(|lease| match renewed.get(&(lease.id.0, lease.owner.0)) {
            Some(&cancel_requested) => HeartbeatReply {
                id: lease.id,
                lost: false,
                cancel_requested,
            },
            None => HeartbeatReply {
                id: lease.id,
                lost: true,
                cancel_requested: false,
            },
        })
        .collect())
}

pub(crate) async fn checkpoint(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    id: RunId,
    owner: OwnerToken,
    state: &[u8],
    lease: Duration,
) -> SqlResult<()> {
    ctx.trip();
    let done = sqlx::query(CHECKPOINT)
        .bind(ctx.now)
        .bind(id.0)
        .bind(owner.0)
        .bind(state)
        .bind(millis(lease))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(StoreError::LeaseLost)
    }
}

/// The action code of [`FINISH`] and its delay, error and result.
fn encode_action(action: &FinishAction) -> (i16, i64, Option<&str>, Option<&serde_json::Value>) {
    match action {
        FinishAction::Complete { result } => (0, 0, None, result.as_ref()),
        FinishAction::Fail { error } => (1, 0, Some(error), None),
        FinishAction::Retry { delay, error } => (2, millis(*delay), Some(error), None),
        FinishAction::Snooze { delay } => (3, millis(*delay), None, None),
        FinishAction::Park { delay, error } => (4, millis(*delay), Some(error), None),
        FinishAction::Cancel => (5, 0, None, None),
        FinishAction::Release => (6, 0, None, None),
        FinishAction::Suppress { reason } => (7, 0, Some(reason), None),
    }
}

/// Write `finishes` in one statement; answers in input order, plus whether any run went
/// back to pending (workers should be woken).
pub(crate) async fn finish(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    finishes: &[Finish],
) -> SqlResult<(Vec<FinishReply>, bool)> {
    if finishes.is_empty() {
        return Ok((Vec::new(), false));
    }
    // The first finish of an (id, owner) pair is the one written; a repeat in the same
    // batch finds the owner token cleared, as it would one after another. Entries of one
    // id under different owners all go: only the row's current owner joins it.
    let mut seen = HashSet::new();
    let mut sorted: Vec<&Finish> = finishes
        .iter()
        .filter(|finish| seen.insert((finish.id, finish.owner)))
        .collect();
    sorted.sort_by_key(|finish| finish.id);
    let n = sorted.len();
    let mut ids = Vec::with_capacity(n);
    let mut owners = Vec::with_capacity(n);
    let mut actions = Vec::with_capacity(n);
    let mut delays = Vec::with_capacity(n);
    let mut errors = Vec::with_capacity(n);
    let mut results = Vec::with_capacity(n);
    for finish in &sorted {
        let (action, delay, error, result) = encode_action(&finish.action);
        ids.push(finish.id.0);
        owners.push(finish.owner.0);
        actions.push(action);
        delays.push(delay);
        errors.push(error);
        results.push(result);
    }
    ctx.trip();
    // Planned with the batch in hand, never from a cached generic plan (see
    // `PREPARE_BATCHED_WRITES`).
    let written: Vec<(Uuid, Uuid, i16, bool)> = sqlx::query_as(FINISH)
        .persistent(PREPARE_BATCHED_WRITES)
        .bind(ctx.now)
        .bind(&ids)
        .bind(&owners)
        .bind(&actions)
        .bind(&delays)
        .bind(&errors)
        .bind(&results)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let put_back = written.iter().any(|(_, _, status, _)| *status == PENDING);
    let mut written: HashMap<(Uuid, Uuid), RunStatus> = written
        .into_iter()
        .map(|(id, owner, status, later)| ((id, owner), status_of(status, later)))
        .collect();
    let replies = finishes
        .iter()
        .map(
            |finish| match written.remove(&(finish.id.0, finish.owner.0)) {
                Some(status) => FinishReply::Applied {
                    id: finish.id,
                    status,
                },
                None => FinishReply::LeaseLost { id: finish.id },
            },
        )
        .collect();
    Ok((replies, put_back))
}

pub(crate) async fn request_cancel(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    id: RunId,
) -> SqlResult<CancelReply> {
    // A run that is neither pending nor running stays so; one that did not exist may
    // appear (its enqueue committed in between): then look again.
    for _ in 0..3 {
        ctx.trip();
        let old: Option<i16> = sqlx::query_scalar(REQUEST_CANCEL)
            .bind(ctx.now)
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        match old {
            Some(PENDING) => return Ok(CancelReply::Cancelled),
            Some(_) => return Ok(CancelReply::Requested),
            None => {}
        }
        ctx.trip();
        let found: Option<(i16, bool)> = sqlx::query_as(STATUS_OF)
            .bind(ctx.now)
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        match found {
            None => return Err(StoreError::NotFound),
            Some((status, later)) if status != PENDING && status != RUNNING => {
                return Ok(CancelReply::AlreadyFinished(status_of(status, later)));
            }
            Some(_) => {}
        }
    }
    Err(StoreError::Unavailable(format!(
        "run {id} kept changing while it was being cancelled; try again"
    )))
}

/// [`REQUEST_CANCEL`] of many runs in one statement: the ids it changed, each with `1`
/// when it was running (asked to stop) or `0` when it was pending (cancelled).
const REQUEST_CANCEL_MANY: &str = concat!(
    cancel_set!(),
    " WHERE id = ANY($2::uuid[]) AND status IN (0, 1)
    RETURNING id, CASE WHEN status = 1 THEN 1 ELSE 0 END::smallint"
);

/// The status of each of the runs `$2` and whether it is not yet due.
const STATUS_OF_MANY: &str = concat!(
    "SELECT id, status, run_at > ",
    now!(),
    " AS later FROM runs WHERE id = ANY($2::uuid[])"
);

/// `RunStore::run_request_cancel_many` on `conn` (the caller's transaction): one
/// statement for the runs still going, one read for the others; a run that changed in
/// between (an enqueue committed meanwhile) is asked again on its own.
pub(crate) async fn request_cancel_many(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    ids: &[RunId],
) -> SqlResult<Vec<StoreResult<CancelReply>>> {
    let keys: Vec<Uuid> = ids.iter().map(|id| id.0).collect();
    ctx.trip();
    let changed: Vec<(Uuid, i16)> = sqlx::query_as(REQUEST_CANCEL_MANY)
        .bind(ctx.now)
        .bind(&keys)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let mut replies: HashMap<Uuid, StoreResult<CancelReply>> = changed
        .into_iter()
        .map(|(id, was_running)| {
            let reply = if was_running == 1 {
                CancelReply::Requested
            } else {
                CancelReply::Cancelled
            };
            (id, Ok(reply))
        })
        .collect();
    let missing: Vec<Uuid> = keys
        .iter()
        .filter(|key| !replies.contains_key(key))
        .copied()
        .collect();
    if !missing.is_empty() {
        let found = statuses_of(conn, ctx, &missing).await?;
        for key in missing {
            let reply = match found.get(&key) {
                None => Err(StoreError::NotFound),
                Some((status, later)) if *status != PENDING && *status != RUNNING => {
                    Ok(CancelReply::AlreadyFinished(status_of(*status, *later)))
                }
                Some(_) => request_cancel(conn, ctx, RunId(key)).await,
            };
            replies.insert(key, reply);
        }
    }
    Ok(keys
        .iter()
        .map(|key| replies.remove(key).unwrap_or(Err(StoreError::NotFound)))
        .collect())
}

/// The status code of each of `ids` and whether it is not yet due ([`STATUS_OF_MANY`]);
/// an id that is not there is left out. An empty `ids` reads nothing.
pub(crate) async fn statuses_of(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    ids: &[Uuid],
) -> SqlResult<HashMap<Uuid, (i16, bool)>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    ctx.trip();
    let rows: Vec<(Uuid, i16, bool)> = sqlx::query_as(STATUS_OF_MANY)
        .bind(ctx.now)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(rows
        .into_iter()
        .map(|(id, status, later)| (id, (status, later)))
        .collect())
}

pub(crate) async fn get(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    id: RunId,
) -> SqlResult<Option<Run>> {
    ctx.trip();
    let row = sqlx::query(GET)
        .bind(ctx.now)
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    row.as_ref().map(run_of).transpose()
}

/// The newest run of `tenant` with unique key `key`, of any status (UUIDv7 ids order by
/// time); walks `runs_key_history`.
pub(crate) async fn find_by_key(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    tenant: &str,
    key: &str,
) -> SqlResult<Option<Run>> {
    ctx.trip();
    let row = sqlx::query(FIND_BY_KEY)
        .bind(ctx.now)
        .bind(tenant)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    row.as_ref().map(run_of).transpose()
}

/// `RunStore::run_list`, newest first. A tenant's list walks `runs_by_tenant`, or
/// `runs_finished_by_tenant` for one finished status (migration 19).
pub(crate) async fn list(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
    filter: &RunFilter,
) -> SqlResult<Vec<Run>> {
    // Only fixed fragments go into the text; every value is a bind.
    let mut sql = String::from(concat!("SELECT ", columns!(), " FROM runs WHERE true"));
    let mut next = 2;
    let mut param = |sql: &mut String, fragment: &str| {
        sql.push_str(&fragment.replace('?', &format!("${next}")));
        next += 1;
    };
    let mut status_code = None;
    if let Some(status) = filter.status {
        let (code, due) = match status {
            RunStatus::Scheduled => (PENDING, Some(concat!(" AND runs.run_at > ", now!()))),
            RunStatus::Queued => (PENDING, Some(concat!(" AND runs.run_at <= ", now!()))),
            RunStatus::Running => (RUNNING, None),
            RunStatus::Completed => (COMPLETED, None),
            RunStatus::Failed => (FAILED, None),
            RunStatus::Cancelled => (CANCELLED, None),
            RunStatus::Suppressed => (SUPPRESSED, None),
        };
        param(&mut sql, " AND runs.status = ?");
        status_code = Some(code);
        if code >= COMPLETED {
            // Lets even a generic plan use the partial index `runs_finished_by_tenant`.
            sql.push_str(" AND runs.status >= 2");
        }
        if let Some(due) = due {
            sql.push_str(due);
        }
    }
    if filter.kind.is_some() {
        param(&mut sql, " AND runs.kind = ?");
    }
    if filter.tenant.is_some() {
        param(&mut sql, " AND runs.tenant = ?");
    }
    if filter.before.is_some() {
        param(&mut sql, " AND runs.id < ?");
    }
    param(&mut sql, " ORDER BY runs.id DESC LIMIT ?");
    let limit = filter.page();
    let mut query = sqlx::query(AssertSqlSafe(sql)).bind(ctx.now);
    if let Some(code) = status_code {
        query = query.bind(code);
    }
    if let Some(kind) = &filter.kind {
        query = query.bind(kind.as_str());
    }
    if let Some(tenant) = &filter.tenant {
        query = query.bind(tenant.as_str());
    }
    if let Some(before) = filter.before {
        query = query.bind(before.0);
    }
    query = query.bind(limit as i64);
    ctx.trip();
    let rows = query.fetch_all(&mut *conn).await.map_err(map_err)?;
    rows.iter().map(run_of).collect()
}

/// The end of a finished run, as the retention index `runs_finished` (migration 16) reads it.
const ENDED: &str = "COALESCE(r.completed_at, r.failed_at, r.cancelled_at)";

/// `RunStore::run_prune`: one bounded delete, the status checked by the delete itself;
/// rows another transaction holds are skipped (the next batch takes them). The batch is
/// chosen once (a materialized CTE): a `LIMIT` inside `IN (…)` may be evaluated again
/// and delete more than the batch.
pub(crate) async fn prune(conn: &mut PgConnection, ctx: Ctx<'_>, prune: &Prune) -> SqlResult<u64> {
    let code = match prune.status {
        RunStatus::Completed => COMPLETED,
        RunStatus::Failed => FAILED,
        RunStatus::Cancelled => CANCELLED,
        RunStatus::Suppressed => SUPPRESSED,
        _ => return Ok(0),
    };
    let sql = format!(
        "WITH doomed AS MATERIALIZED (\
           SELECT r.id FROM runs r WHERE r.status = $1 AND {ENDED} < $2 \
             AND (r.unique_key IS NULL OR {ENDED} < $3) \
             AND ($4::text IS NULL OR r.tenant = $4) \
             AND r.tenant <> ALL($5::text[]) \
             AND r.id <> ALL($6::uuid[]) \
             AND NOT (r.unique_key IS NOT NULL \
               AND EXISTS (SELECT 1 FROM unnest($7::text[]) AS p(prefix) WHERE starts_with(r.unique_key, p.prefix)) \
               AND NOT EXISTS (SELECT 1 FROM runs n WHERE n.tenant = r.tenant \
                 AND n.unique_key = r.unique_key AND n.id > r.id)) \
           ORDER BY {ENDED} LIMIT $8 FOR UPDATE SKIP LOCKED) \
         DELETE FROM runs USING doomed WHERE runs.id = doomed.id AND runs.status = $1"
    );
    let keep: Vec<Uuid> = prune.keep.iter().map(|id| id.0).collect();
    ctx.trip();
    let done = sqlx::query(AssertSqlSafe(sql))
        .bind(code)
        .bind(prune.finished_before)
        .bind(prune.keyed_finished_before)
        .bind(prune.tenant.as_deref())
        .bind(&prune.skip_tenants)
        .bind(&keep)
        .bind(&prune.keep_newest_of)
        .bind(i64::try_from(prune.limit).unwrap_or(i64::MAX))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(done.rows_affected())
}

/// `RunStore::oldest_finished`: one probe of `runs_finished` per finished status.
pub(crate) async fn oldest_finished(
    conn: &mut PgConnection,
    ctx: Ctx<'_>,
) -> SqlResult<Option<DateTime<Utc>>> {
    ctx.trip();
    let oldest: (Option<DateTime<Utc>>,) = sqlx::query_as(
        "SELECT min(ended) FROM (\
           SELECT min(COALESCE(completed_at, failed_at, cancelled_at)) AS ended FROM runs WHERE status = 2 \
           UNION ALL SELECT min(COALESCE(completed_at, failed_at, cancelled_at)) FROM runs WHERE status = 3 \
           UNION ALL SELECT min(COALESCE(completed_at, failed_at, cancelled_at)) FROM runs WHERE status = 4 \
           UNION ALL SELECT min(COALESCE(completed_at, failed_at, cancelled_at)) FROM runs WHERE status = 5) AS ends",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(oldest.0)
}

pub(crate) async fn stats(conn: &mut PgConnection, ctx: Ctx<'_>) -> SqlResult<RunStats> {
    ctx.trip();
    let rows: Vec<(String, i16, bool, i64, i64, i64, i64)> = sqlx::query_as(STATS)
        .bind(ctx.now)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let mut stats = RunStats::default();
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    for (kind, code, later, n, attempts, reclaims, parks) in rows {
        stats.add(
            &kind,
            status_of(code, later),
            count(n),
            [count(attempts), count(reclaims), count(parks)],
        );
    }
    Ok(stats)
}

pub(crate) async fn compact_counts(conn: &mut PgConnection, ctx: Ctx<'_>) -> SqlResult<u64> {
    ctx.trip();
    let done = sqlx::query(COMPACT_COUNTS)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(done.rows_affected())
}

/// Whether any run is running or due: two index probes on the partial indexes.
pub const BUSY: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM runs WHERE status = 1) \
         OR EXISTS (SELECT 1 FROM runs WHERE status = 0 AND run_at <= ",
    now!(),
    ")"
);

pub(crate) async fn busy(conn: &mut PgConnection, ctx: Ctx<'_>) -> SqlResult<bool> {
    ctx.trip();
    sqlx::query_scalar(BUSY)
        .bind(ctx.now)
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_whole_milliseconds_and_clamped() {
        assert_eq!(millis(Duration::from_micros(1_999)), 1, "truncated to ms");
        assert_eq!(
            millis(Duration::MAX),
            MAX_DELAY_MS,
            "a huge delay is clamped"
        );
        let far = chrono::DateTime::<Utc>::MAX_UTC - chrono::Duration::milliseconds(MAX_DELAY_MS);
        assert!(
            far.timestamp() > Utc::now().timestamp(),
            "now + the longest delay stays a valid chrono instant"
        );
    }

    #[test]
    fn every_finish_action_has_its_own_code() {
        let actions = [
            FinishAction::Complete { result: None },
            FinishAction::Fail { error: "e".into() },
            FinishAction::Retry {
                delay: Duration::ZERO,
                error: "e".into(),
            },
            FinishAction::Snooze {
                delay: Duration::ZERO,
            },
            FinishAction::Park {
                delay: Duration::ZERO,
                error: "e".into(),
            },
            FinishAction::Cancel,
            FinishAction::Release,
            FinishAction::Suppress { reason: "e".into() },
        ];
        let codes: HashSet<i16> = actions.iter().map(|a| encode_action(a).0).collect();
        assert_eq!(codes.len(), actions.len(), "codes are distinct: {codes:?}");
    }
}
