//! What only the Postgres store promises, beyond the shared conformance suite: the claim
//! walks its indexes (no sort or scan of the queue, in custom and generic plans), batched
//! writes are one statement per batch, migrations run once when processes start
//! together, another process's enqueue wakes this one through LISTEN, the database clock
//! rules when no clock is injected, a caller's transaction carries its enqueues, two
//! processes never claim one run, and the tenant list never loses a tenant with work.
//!
//! Every test makes its own database on the test server (see `support`).

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fronta_engine::{
    CancelReply, ClaimBatch, ClaimParams, Clock, Dispatcher, EnqueueRequest, Enqueued, Finish,
    FinishAction, FinishReply, LeaseRenewal, ManualClock, NewRun, OwnerToken, RunId, RunStatus,
    RunStore, StoreError,
};
use fronta_store_postgres::runs::{CLAIM_FIRSTS, CLAIM_MORE, FINISH, HAND_OFF, HEARTBEAT};
use fronta_store_postgres::{PgConfig, PgStore, schema};
use serde_json::Value;
use sqlx::{AssertSqlSafe, PgConnection};

use crate::support::TestDb;

const KIND: &str = "job";
const LEASE: Duration = Duration::from_secs(60);

fn params(limit: usize) -> ClaimParams {
    ClaimParams {
        limit,
        default_lease: LEASE,
        leases: HashMap::new(),
        max_reclaims: 5,
        holder: None,
    }
}

/// A `Complete` finish for every run of a claim, under its owner token.
fn completions(batch: &ClaimBatch) -> Vec<Finish> {
    batch
        .claimed
        .iter()
        .map(|claimed| Finish {
            id: claimed.run.id,
            owner: claimed.owner,
            action: FinishAction::Complete { result: None },
        })
        .collect()
}

/// A renewal of every run of a claim by [`LEASE`], under its owner token.
fn renewals(batch: &ClaimBatch) -> Vec<LeaseRenewal> {
    batch
        .claimed
        .iter()
        .map(|claimed| LeaseRenewal {
            id: claimed.run.id,
            owner: claimed.owner,
            lease: LEASE,
        })
        .collect()
}

fn dispatcher(store: &PgStore) -> Dispatcher {
    Dispatcher::new(Arc::new(store.clone()), [KIND])
}

fn request() -> EnqueueRequest {
    EnqueueRequest::new(KIND, serde_json::json!({}), 0)
}

fn prepare(dispatcher: &Dispatcher, request: EnqueueRequest) -> NewRun {
    dispatcher.prepare(request).expect("a valid request")
}

// ---------------------------------------------------------------------------------------
// Plans
// ---------------------------------------------------------------------------------------

/// Every node of an `EXPLAIN (FORMAT JSON)` plan, depth first, with its subtree's nodes.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut out = vec![plan];
    if let Some(children) = plan.get("Plans").and_then(Value::as_array) {
        for child in children {
            out.extend(nodes(child));
        }
    }
    out
}

fn root(explained: &Value) -> &Value {
    explained
        .get(0)
        .and_then(|first| first.get("Plan"))
        .unwrap_or_else(|| panic!("an EXPLAIN (FORMAT JSON) answer: {explained}"))
}

/// A node that reads rows of `runs` (the `ModifyTable` of an `UPDATE` writes them).
fn scans_runs(node: &Value) -> bool {
    node.get("Relation Name").and_then(Value::as_str) == Some("runs")
        && node["Node Type"] != "ModifyTable"
}

/// The plan never reads the queue wholesale: no sequential scan of `runs`, every scan of
/// it goes through one of its indexes, and no sort has a scan of `runs` beneath it.
/// Answers the indexes used, or what is wrong.
fn check_walks_indexes(label: &str, explained: &Value) -> Result<HashSet<String>, String> {
    let mut indexes = HashSet::new();
    for node in nodes(root(explained)) {
        if scans_runs(node) {
            let kind = node["Node Type"].as_str().unwrap_or("?");
            if kind == "Seq Scan" {
                return Err(format!("{label}: a sequential scan of runs: {explained:#}"));
            }
            match node.get("Index Name").and_then(Value::as_str) {
                Some(index) => indexes.insert(index.to_owned()),
                None => {
                    return Err(format!(
                        "{label}: a scan of runs without an index ({kind}): {explained:#}"
                    ));
                }
            };
        }
        if node["Node Type"] == "Sort" && nodes(node).iter().any(|below| scans_runs(below)) {
            return Err(format!("{label}: a sort over rows of runs: {explained:#}"));
        }
    }
    Ok(indexes)
}

fn assert_walks_indexes(label: &str, explained: &Value) -> HashSet<String> {
    check_walks_indexes(label, explained).unwrap_or_else(|problem| panic!("{problem}"))
}

/// Rows the scans of `runs` in an `EXPLAIN ANALYZE` read, over all their loops.
fn rows_of_runs_read(analyzed: &Value) -> f64 {
    nodes(root(analyzed))
        .into_iter()
        .filter(|node| scans_runs(node))
        .map(|node| {
            node["Actual Rows"].as_f64().unwrap_or(0.0)
                * node["Actual Loops"].as_f64().unwrap_or(1.0)
        })
        .sum()
}

/// Enqueues `count` runs (`request_of(index)`) in calls of 5,000.
async fn enqueue_in_chunks(
    store: &PgStore,
    dispatcher: &Dispatcher,
    count: usize,
    request_of: impl Fn(usize) -> EnqueueRequest,
) {
    for start in (0..count).step_by(5_000) {
        let runs: Vec<NewRun> = (start..(start + 5_000).min(count))
            .map(|index| prepare(dispatcher, request_of(index)))
            .collect();
        store
            .run_enqueue_many(runs)
            .await
            .expect("enqueue a chunk of runs");
    }
}

async fn explain_generic(
    conn: &mut PgConnection,
    name: &str,
    types: &str,
    sql: &str,
    args: &str,
) -> Value {
    sqlx::raw_sql(AssertSqlSafe(format!("PREPARE {name}({types}) AS {sql}")))
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|err| panic!("PREPARE {name}: {err}"));
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .expect("force generic plans");
    let plan: Value = sqlx::query_scalar(AssertSqlSafe(format!(
        "EXPLAIN (FORMAT JSON) EXECUTE {name}({args})"
    )))
    .fetch_one(&mut *conn)
    .await
    .unwrap_or_else(|err| panic!("EXPLAIN EXECUTE {name}: {err}"));
    sqlx::raw_sql("RESET plan_cache_mode")
        .execute(&mut *conn)
        .await
        .expect("reset plan cache mode");
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_walks_its_indexes_and_never_the_queue() {
    let db = TestDb::create().await;
    let clock = ManualClock::at_fixed_start();
    let store = db.store(Some(Arc::new(clock.clone()))).await;
    let dispatcher = dispatcher(&store);
    let tenants = ["north", "south", "east", "west"];
    enqueue_in_chunks(&store, &dispatcher, 50_000, |index| {
        request().tenant(tenants[index % 4])
    })
    .await;
    let running = store.run_claim(params(2_000)).await.expect("claim 2,000");
    assert_eq!(running.claimed.len(), 2_000, "2,000 runs are running now");
    let mut conn = db.connection().await;
    sqlx::raw_sql("ANALYZE runs; ANALYZE run_tenants")
        .execute(&mut conn)
        .await
        .expect("analyze");

    // The checker itself catches a plan that reads the queue.
    let scan: Value = sqlx::query_scalar(
        "EXPLAIN (FORMAT JSON) SELECT id FROM runs WHERE status = 0 ORDER BY created_at LIMIT 1",
    )
    .fetch_one(&mut conn)
    .await
    .expect("explain a queue scan");
    assert!(
        check_walks_indexes("control", &scan).is_err(),
        "a sorted scan of the queue must fail the check: {scan:#}"
    );

    let now = Some(clock.now());
    let no_kinds: Vec<String> = Vec::new();
    let no_leases: Vec<i64> = Vec::new();
    // Custom plans, with the values a worker sends.
    let firsts: Value = sqlx::query_scalar(AssertSqlSafe(format!(
        "EXPLAIN (FORMAT JSON) {CLAIM_FIRSTS}"
    )))
    .bind(now)
    .bind(&no_kinds)
    .bind(&no_leases)
    .bind(60_000_i64)
    .bind(512_i64)
    .bind(5_i64)
    .bind("")
    .bind(None::<uuid::Uuid>)
    .fetch_one(&mut conn)
    .await
    .expect("explain the first claim level");
    let used = assert_walks_indexes("first level", &firsts);
    assert!(
        used.contains("runs_pending") && used.contains("runs_running"),
        "the first level probes due runs by runs_pending and expired leases by runs_running: {used:?}"
    );
    let active: Vec<String> = tenants.iter().map(|t| (*t).to_owned()).collect();
    let more: Value =
        sqlx::query_scalar(AssertSqlSafe(format!("EXPLAIN (FORMAT JSON) {CLAIM_MORE}")))
            .bind(now)
            .bind(&no_kinds)
            .bind(&no_leases)
            .bind(60_000_i64)
            .bind(&active)
            .bind(128_i64)
            .bind(508_i64)
            .bind(None::<uuid::Uuid>)
            .fetch_one(&mut conn)
            .await
            .expect("explain a later claim level");
    let used = assert_walks_indexes("later level", &more);
    assert!(
        used.contains("runs_pending"),
        "later levels probe runs_pending: {used:?}"
    );

    // Generic plans: what a prepared statement may switch to after five executions.
    let generic = explain_generic(
        &mut conn,
        "claim_firsts",
        "timestamptz, text[], int8[], int8, int8, int8, text, uuid",
        CLAIM_FIRSTS,
        "NULL, '{}', '{}', 60000, 512, 5, '', NULL",
    )
    .await;
    assert_walks_indexes("first level, generic plan", &generic);
    let generic = explain_generic(
        &mut conn,
        "claim_more",
        "timestamptz, text[], int8[], int8, text[], int8, int8, uuid",
        CLAIM_MORE,
        "NULL, '{}', '{}', 60000, '{north,south,east,west}', 128, 508, NULL",
    )
    .await;
    assert_walks_indexes("later level, generic plan", &generic);
    let generic = explain_generic(
        &mut conn,
        "heartbeat",
        "timestamptz, uuid[], uuid[], int8[]",
        HEARTBEAT,
        "NULL, ARRAY[gen_random_uuid()], ARRAY[gen_random_uuid()], '{60000}'",
    )
    .await;
    let used = assert_walks_indexes("heartbeat, generic plan", &generic);
    assert!(
        used.contains("runs_pkey"),
        "heartbeats find runs by id: {used:?}"
    );
    let generic = explain_generic(
        &mut conn,
        "finish",
        "timestamptz, uuid[], uuid[], int2[], int8[], text[], jsonb[]",
        FINISH,
        "NULL, ARRAY[gen_random_uuid()], ARRAY[gen_random_uuid()], '{0}', '{0}', '{NULL}', '{NULL}'",
    )
    .await;
    let used = assert_walks_indexes("finish, generic plan", &generic);
    assert!(
        used.contains("runs_pkey"),
        "finishes find runs by id: {used:?}"
    );

    // Executed (and rolled back): a round of 8 over 48,000 queued runs reads a handful.
    let mut tx = sqlx::Connection::begin(&mut conn).await.expect("begin");
    let analyzed: Value = sqlx::query_scalar(AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {CLAIM_FIRSTS}"
    )))
    .bind(now)
    .bind(&no_kinds)
    .bind(&no_leases)
    .bind(60_000_i64)
    .bind(8_i64)
    .bind(5_i64)
    .bind("")
    .bind(None::<uuid::Uuid>)
    .fetch_one(&mut *tx)
    .await
    .expect("explain analyze the first claim level");
    tx.rollback().await.expect("rollback");
    let read = rows_of_runs_read(&analyzed);
    eprintln!("one claim round of 8 read {read} rows of runs");
    assert!(
        read <= 16.0,
        "one claim round read {read} rows of runs for 4 tenants; it must not grow with the queue: {analyzed:#}"
    );
}

// ---------------------------------------------------------------------------------------
// Batched writes
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_writes_are_one_statement_per_batch() {
    let db = TestDb::create().await;
    let clock = ManualClock::at_fixed_start();
    let store = db.store(Some(Arc::new(clock.clone()))).await;
    let dispatcher = dispatcher(&store);
    let runs: Vec<NewRun> = (0..300)
        .map(|index| prepare(&dispatcher, request().tenant(format!("t{}", index % 3))))
        .collect();

    let before = store.round_trips();
    let answers = store.run_enqueue_many(runs).await.expect("enqueue 300");
    assert_eq!(answers.len(), 300, "one answer per run");
    assert_eq!(
        store.round_trips() - before,
        1,
        "300 runs without unique keys are enqueued by one statement"
    );

    let before = store.round_trips();
    let batch = store.run_claim(params(300)).await.expect("claim");
    assert_eq!(batch.claimed.len(), 300, "every run claimed");
    assert_eq!(
        store.round_trips() - before,
        1,
        "a claim round whose tenants each give their share is one autocommitted statement"
    );

    let before = store.round_trips();
    let renewals: Vec<LeaseRenewal> = renewals(&batch);
    let replies = store.run_heartbeat_many(renewals).await.expect("heartbeat");
    assert!(
        replies.iter().all(|reply| !reply.lost),
        "every lease renewed"
    );
    assert_eq!(
        store.round_trips() - before,
        1,
        "300 heartbeats are one statement"
    );

    clock.advance(Duration::from_secs(1));
    let actions = |index: usize| match index % 4 {
        0 => FinishAction::Complete {
            result: Some(serde_json::json!({ "index": index })),
        },
        1 => FinishAction::Fail {
            error: "boom".into(),
        },
        2 => FinishAction::Retry {
            delay: Duration::from_secs(30),
            error: "flaky".into(),
        },
        _ => FinishAction::Release,
    };
    let finishes: Vec<Finish> = batch
        .claimed
        .iter()
        .enumerate()
        .map(|(index, claimed)| Finish {
            id: claimed.run.id,
            owner: claimed.owner,
            action: actions(index),
        })
        .collect();
    let before = store.round_trips();
    let replies = store
        .run_finish_many(finishes.clone())
        .await
        .expect("finish 300");
    assert_eq!(
        store.round_trips() - before,
        1,
        "300 finishes are one statement"
    );
    let expected = [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Scheduled,
        RunStatus::Queued,
    ];
    for (index, (finish, reply)) in finishes.iter().zip(&replies).enumerate() {
        assert_eq!(
            *reply,
            FinishReply::Applied {
                id: finish.id,
                status: expected[index % 4]
            },
            "finish {index} answered in input order with its new status"
        );
    }
    let replies = store.run_finish_many(finishes).await.expect("finish again");
    assert!(
        replies
            .iter()
            .all(|reply| matches!(reply, FinishReply::LeaseLost { .. })),
        "a repeated batch is lease lost, run by run"
    );
    let stats = store.run_stats().await.expect("stats");
    assert_eq!(
        (stats.completed, stats.failed, stats.scheduled, stats.queued),
        (75, 75, 75, 75),
        "the batch wrote every action: {stats:?}"
    );
}

/// Every connection of a store runs with JIT off (`SESSION_SETTINGS`): the claim's
/// estimated cost grows with the backlog, and past `jit_above_cost` each execution would
/// compile — ~400 ms for a claim of one run with 1,000,000 queued and the table analyzed,
/// against 0.13 ms without. Here the database lowers every JIT threshold to 0, so a plain
/// connection compiles even a tiny query (checked when the server has JIT at all: the
/// control that the check can fail), while the store's connections do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_connections_never_jit_compile() {
    let db = TestDb::create().await;
    let mut plain = db.connection().await;
    for setting in [
        "jit_above_cost",
        "jit_inline_above_cost",
        "jit_optimize_above_cost",
    ] {
        sqlx::query(AssertSqlSafe(format!(
            "ALTER DATABASE \"{}\" SET {setting} = 0",
            db.name
        )))
        .execute(&mut plain)
        .await
        .expect("lower a JIT threshold");
    }
    let query = "EXPLAIN (ANALYZE, FORMAT JSON) SELECT sum(x) FROM generate_series(1, 1000) AS x";
    let compiled = |plan: &Value| plan[0].get("JIT").is_some();
    let available: bool = sqlx::query_scalar("SELECT pg_jit_available()")
        .fetch_one(&mut plain)
        .await
        .expect("ask whether the server has JIT");
    let mut fresh = db.connection().await;
    let plan: Value = sqlx::query_scalar(query)
        .fetch_one(&mut fresh)
        .await
        .expect("explain on a plain connection");
    assert_eq!(
        compiled(&plan),
        available,
        "control: a plain connection compiles when the server can: {plan}"
    );
    let store = db.store(None).await;
    let mut conn = store.pool().acquire().await.expect("a pooled connection");
    let jit: String = sqlx::query_scalar("SHOW jit")
        .fetch_one(&mut *conn)
        .await
        .expect("read jit");
    assert_eq!(jit, "off", "the store's session setting");
    let plan: Value = sqlx::query_scalar(query)
        .fetch_one(&mut *conn)
        .await
        .expect("explain on a store connection");
    assert!(
        !compiled(&plan),
        "a store connection never compiles: {plan}"
    );
}

/// Every pooled connection's socket has `TCP_NODELAY`: sqlx 0.9.0 left Nagle's algorithm
/// on, which held the last segment of a batch larger than one segment until the server's
/// delayed acknowledgement (up to 40 ms); 0.9.1 sets it when it connects, and the store
/// relies on that (ARCHITECTURE.md, "The Postgres driver"). Read off the sockets
/// themselves, so a driver that stops setting it fails here.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_send_without_nagles_delay() {
    let db = TestDb::create().await;
    let mut config = db.config(None);
    config.max_connections = 3;
    config.listen = false;
    let store = PgStore::connect(config).await.expect("connect");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(store.pool().acquire().await.expect("a pooled connection"));
    }
    for conn in &mut held {
        let (client, server): (i32, i32) =
            sqlx::query_as("SELECT inet_client_port(), inet_server_port()")
                .fetch_one(&mut **conn)
                .await
                .expect("the connection's ports");
        assert_eq!(
            nodelay::of_socket(client as u16, server as u16),
            Ok(true),
            "TCP_NODELAY on the pooled connection from port {client}"
        );
    }
    // Work flows over them: a batch larger than one segment goes through.
    drop(held);
    let dispatcher = dispatcher(&store);
    let runs: Vec<NewRun> = (0..1_000)
        .map(|_| prepare(&dispatcher, request()))
        .collect();
    let enqueued = store.run_enqueue_many(runs).await.expect("enqueue 1,000");
    assert_eq!(enqueued.len(), 1_000);
}

/// `TCP_NODELAY` of this process's socket from local port `client` to peer port
/// `server`, read through a duplicate of its descriptor (`pidfd_getfd` on this process:
/// no unsafe code). Test-only: the store itself never touches the driver's sockets.
#[cfg(target_os = "linux")]
mod nodelay {
    use std::net::SocketAddr;

    use rustix::net::{getpeername, getsockname, sockopt};
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

    pub(super) fn of_socket(client: u16, server: u16) -> Result<bool, String> {
        let me = pidfd_open(getpid(), PidfdFlags::empty()).map_err(|err| err.to_string())?;
        for entry in std::fs::read_dir("/proc/self/fd")
            .map_err(|err| err.to_string())?
            .flatten()
        {
            let Some(number) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let Ok(fd) = pidfd_getfd(&me, number, PidfdGetfdFlags::empty()) else {
                continue;
            };
            let port = |addr: Option<SocketAddr>| addr.map(|addr| addr.port());
            let local = port(getsockname(&fd).ok().and_then(|a| a.try_into().ok()));
            let peer = port(
                getpeername(&fd)
                    .ok()
                    .flatten()
                    .and_then(|a| a.try_into().ok()),
            );
            if local == Some(client) && peer == Some(server) {
                return sockopt::tcp_nodelay(&fd).map_err(|err| err.to_string());
            }
        }
        Err(format!(
            "no socket of this process from {client} to {server}"
        ))
    }
}

/// Every finished run leaves a dead entry in `runs_running` until vacuum: under a drain,
/// tens of thousands. The finish finds its runs by primary key and never through that
/// index (a plan that ANDed it with the key, or joined on its estimate, took twice as
/// long), and the owner check alone fences because a set owner token means `running`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_finds_runs_by_id_past_the_dead_entries_of_runs_running() {
    let db = TestDb::create().await;
    let clock = ManualClock::at_fixed_start();
    let store = db.store(Some(Arc::new(clock.clone()))).await;
    let dispatcher = dispatcher(&store);
    enqueue_in_chunks(&store, &dispatcher, 40_000, |_| request()).await;
    let running = store.run_claim(params(2_000)).await.expect("claim 2,000");
    assert_eq!(running.claimed.len(), 2_000, "2,000 runs are running now");
    let mut conn = db.connection().await;
    sqlx::raw_sql("ANALYZE runs")
        .execute(&mut conn)
        .await
        .expect("analyze");
    let finishes = completions(&running);
    let (done, left) = finishes.split_at(1_800);
    store
        .run_finish_many(done.to_vec())
        .await
        .expect("finish 1,800");

    let ids: Vec<uuid::Uuid> = left.iter().map(|finish| finish.id.0).collect();
    let owners: Vec<uuid::Uuid> = left.iter().map(|finish| finish.owner.0).collect();
    let actions = vec![0_i16; left.len()];
    let delays = vec![0_i64; left.len()];
    let errors: Vec<Option<String>> = vec![None; left.len()];
    let results: Vec<Option<Value>> = vec![None; left.len()];
    let mut tx = sqlx::Connection::begin(&mut conn).await.expect("begin");
    let analyzed: Value = sqlx::query_scalar(AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {FINISH}"
    )))
    .bind(Some(clock.now()))
    .bind(&ids)
    .bind(&owners)
    .bind(&actions)
    .bind(&delays)
    .bind(&errors)
    .bind(&results)
    .fetch_one(&mut *tx)
    .await
    .expect("explain analyze a finish of 200");
    tx.rollback().await.expect("rollback");
    let used = assert_walks_indexes("finish of 200", &analyzed);
    assert!(
        used.contains("runs_pkey") && !used.contains("runs_running"),
        "a finish finds its runs by id, never through runs_running: {used:?}"
    );
    let read = rows_of_runs_read(&analyzed);
    assert!(
        read <= 2.0 * left.len() as f64,
        "a finish of {} read {read} rows of runs: {analyzed:#}",
        left.len()
    );

    // The constraint the owner check leans on: no owner token outside `running`, and
    // none missing inside it.
    for (label, write) in [
        (
            "a finished run keeping its owner token",
            "UPDATE runs SET status = 2 WHERE id = $1",
        ),
        (
            "a running run without an owner token",
            "UPDATE runs SET locked_by = NULL WHERE id = $1",
        ),
    ] {
        let refused = sqlx::query(AssertSqlSafe(write))
            .bind(ids[0])
            .execute(&mut conn)
            .await
            .expect_err(label);
        let code = refused
            .as_database_error()
            .and_then(|err| err.code())
            .map(|code| code.into_owned());
        assert_eq!(
            code.as_deref(),
            Some("23514"),
            "{label} is a check violation: {refused}"
        );
    }
    let pending: uuid::Uuid = sqlx::query_scalar("SELECT id FROM runs WHERE status = 0 LIMIT 1")
        .fetch_one(&mut conn)
        .await
        .expect("a pending run");
    let refused = sqlx::query("UPDATE runs SET locked_by = gen_random_uuid() WHERE id = $1")
        .bind(pending)
        .execute(&mut conn)
        .await
        .expect_err("a pending run with an owner token is refused");
    assert!(
        refused.to_string().contains("runs_owner_iff_running"),
        "the constraint names itself: {refused}"
    );
}

/// Index pages and heap pages the scans of `runs` in an `EXPLAIN (ANALYZE, BUFFERS)`
/// touched: what a probe that steps over index entries without returning them costs.
fn pages_of_runs_touched(analyzed: &Value) -> f64 {
    nodes(root(analyzed))
        .into_iter()
        .filter(|node| scans_runs(node))
        .map(|node| {
            node["Shared Hit Blocks"].as_f64().unwrap_or(0.0)
                + node["Shared Read Blocks"].as_f64().unwrap_or(0.0)
        })
        .sum()
}

/// The hand-off's probes for a due run of the tenant stop at the first entry of
/// `runs_pending` not yet due: a tenant with 20,000 runs scheduled for later costs a few
/// pages, not a walk of them all. A handed-over run is never listed in `run_tenants`
/// and notifies no other process (it was never pending), while an ordinary enqueue of
/// the same process does (the control that shows the check can hear).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_off_probes_stop_at_the_first_run_not_yet_due_and_wake_nobody() {
    let db = TestDb::create().await;
    let clock = ManualClock::at_fixed_start();
    let store = db.store(Some(Arc::new(clock.clone()))).await;
    let dispatcher = dispatcher(&store);
    enqueue_in_chunks(&store, &dispatcher, 20_000, |index| {
        request()
            .tenant("scheduled")
            .delay(Duration::from_secs(3600 + index as u64))
    })
    .await;
    let mut conn = db.connection().await;
    sqlx::raw_sql("ANALYZE runs")
        .execute(&mut conn)
        .await
        .expect("analyze");

    let run = prepare(&dispatcher, request().tenant("scheduled"));
    let mut tx = sqlx::Connection::begin(&mut conn).await.expect("begin");
    let analyzed: Value = sqlx::query_scalar(AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {HAND_OFF}"
    )))
    .bind(Some(clock.now()))
    .bind(run.id.0)
    .bind(run.tenant.as_str())
    .bind(run.kind.as_str())
    .bind(&run.payload)
    .bind(run.trigger.as_str())
    .bind(run.unique_key.as_deref())
    .bind(run.priority)
    .bind(i64::from(run.max_retries))
    .bind(60_000_i64)
    .bind(None::<uuid::Uuid>)
    .fetch_one(&mut *tx)
    .await
    .expect("explain analyze a hand-off");
    tx.rollback().await.expect("rollback");
    let used = assert_walks_indexes("hand-off", &analyzed);
    assert!(
        used.contains("runs_pending"),
        "the probes walk runs_pending: {used:?}"
    );
    let pages = pages_of_runs_touched(&analyzed);
    assert!(
        pages <= 12.0,
        "the probes touched {pages} pages of runs past 20,000 scheduled runs: {analyzed:#}"
    );

    // Nobody hears of a handed-over run; an ordinary enqueue is heard (the control).
    let listener = db.store(None).await;
    let signal = listener.enqueue_signal();
    let heard = signal.notified();
    let mut heard = std::pin::pin!(heard);
    heard.as_mut().enable();
    let answer = store
        .run_enqueue_started(prepare(&dispatcher, request().tenant("fresh")), LEASE, None)
        .await
        .expect("hand-off");
    assert!(
        matches!(answer, fronta_engine::HandOff::Started(_)),
        "an idle tenant's run is handed over: {answer:?}"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), heard.as_mut())
            .await
            .is_err(),
        "a handed-over run notifies no other process"
    );
    assert!(
        !listed_tenants(&store).await.contains(&"fresh".to_owned()),
        "a handed-over run was never pending: its tenant is not listed"
    );
    dispatcher
        .enqueue(request().tenant("fresh"))
        .await
        .expect("an ordinary enqueue");
    tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .expect("an ordinary enqueue is heard by the other process");
    assert!(listed_tenants(&store).await.contains(&"fresh".to_owned()));
}

/// A prepared statement switches to a generic plan after five executions, and the
/// generic plan of a batched finish cannot see the batch's size: it joined 1,000 finishes
/// to their rows as a nested loop reading the batch once per run (690 ms for one batch).
/// Batched finishes and heartbeats are therefore sent unprepared, planned with their
/// arrays in hand. Checked where it is decided: on the store's only connection, after
/// more executions than the switch needs, no finish or heartbeat statement is prepared,
/// while the claim (a control: the check can see prepared statements) is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_writes_are_planned_per_batch_never_from_a_cached_generic_plan() {
    let db = TestDb::create().await;
    let clock = ManualClock::at_fixed_start();
    let mut config = db.config(Some(Arc::new(clock.clone())));
    config.max_connections = 1;
    config.listen = false;
    let store = PgStore::connect(config).await.expect("connect");
    let dispatcher = dispatcher(&store);
    let runs: Vec<NewRun> = (0..800).map(|_| prepare(&dispatcher, request())).collect();
    store.run_enqueue_many(runs).await.expect("enqueue 800");
    for round in 0..8 {
        let batch = store.run_claim(params(100)).await.expect("claim");
        assert_eq!(batch.claimed.len(), 100, "round {round} claims 100");
        let renewals: Vec<LeaseRenewal> = renewals(&batch);
        let renewed = store.run_heartbeat_many(renewals).await.expect("heartbeat");
        assert!(
            renewed.iter().all(|reply| !reply.lost),
            "every lease renewed"
        );
        let finishes: Vec<Finish> = completions(&batch);
        let replies = store.run_finish_many(finishes).await.expect("finish");
        assert!(
            replies
                .iter()
                .all(|reply| matches!(reply, FinishReply::Applied { .. })),
            "every finish applied"
        );
    }
    let prepared: Vec<String> = sqlx::query_scalar("SELECT statement FROM pg_prepared_statements")
        .fetch_all(store.pool())
        .await
        .expect("read the connection's prepared statements");
    assert!(
        prepared
            .iter()
            .any(|statement| statement.as_str() == CLAIM_FIRSTS),
        "control: the claim is a prepared statement on this connection: {prepared:#?}"
    );
    for (name, text) in [("finish", FINISH), ("heartbeat", HEARTBEAT)] {
        assert!(
            !prepared.iter().any(|statement| statement.as_str() == text),
            "the batched {name} must not be prepared (a cached generic plan is quadratic in the batch)"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Migrations
// ---------------------------------------------------------------------------------------

/// A database as a release before migration `below` left it: the migrations before it,
/// applied and recorded as `migrate` does.
async fn old_schema(conn: &mut PgConnection, below: i64) {
    sqlx::raw_sql(
        "CREATE TABLE schema_migrations (
            version    bigint      PRIMARY KEY,
            name       text        NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&mut *conn)
    .await
    .expect("create schema_migrations");
    for (version, name, sql) in schema::MIGRATIONS.iter().filter(|(v, _, _)| *v < below) {
        sqlx::raw_sql(*sql)
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|err| panic!("migration {version}: {err}"));
        sqlx::query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)")
            .bind(version)
            .bind(*name)
            .execute(&mut *conn)
            .await
            .expect("record the migration");
    }
}

/// Migration 12 adds `runs_owner_iff_running` to databases that may hold rows an older
/// cancel wrote in a race (`cancelled` with the claim's token kept): it repairs them
/// first instead of failing the start-up, and leaves sound rows alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_constraint_migration_repairs_rows_written_before_it() {
    let db = TestDb::create().await;
    let mut conn = db.connection().await;
    old_schema(&mut conn, 12).await;
    let held = uuid::Uuid::new_v4();
    let (stale, orphan, sound) = (
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
    );
    for (id, status, owner) in [
        (stale, 4_i16, Some(uuid::Uuid::new_v4())),
        (orphan, 1, None),
        (sound, 1, Some(held)),
    ] {
        sqlx::query(
            "INSERT INTO runs (id, tenant, kind, payload, trigger, status, run_at, max_retries,
                               locked_by, locked_until, created_at, updated_at)
             VALUES ($1, 't', 'k', '{}', 'api', $2, now(), 0, $3, now() + interval '1 minute',
                     now(), now())",
        )
        .bind(id)
        .bind(status)
        .bind(owner)
        .execute(&mut conn)
        .await
        .expect("insert a row as an older version could leave it");
    }

    let store = db.store(None).await;
    let owner_of = |id: uuid::Uuid| {
        let store = store.clone();
        async move {
            store
                .run_get(RunId(id))
                .await
                .expect("read the run")
                .expect("the run exists")
                .locked_by
        }
    };
    assert_eq!(
        owner_of(stale).await,
        None,
        "a cancelled run drops its stale token"
    );
    assert!(
        owner_of(orphan).await.is_some(),
        "a running run without a token gets one nobody holds (reclaimed when its lease ends)"
    );
    assert_eq!(
        owner_of(sound).await,
        Some(OwnerToken(held)),
        "a sound run keeps its token"
    );
    let constrained: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'runs_owner_iff_running')",
    )
    .fetch_one(&mut conn)
    .await
    .expect("read pg_constraint");
    assert!(constrained, "the constraint is in place after the repair");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_starting_together_migrate_once() {
    let db = TestDb::create().await;
    let (a, b, c) = tokio::join!(
        PgStore::connect(db.config(None)),
        PgStore::connect(db.config(None)),
        PgStore::connect(db.config(None)),
    );
    for (label, store) in [("first", a), ("second", b), ("third", c)] {
        store.unwrap_or_else(|err| panic!("the {label} concurrent connect succeeds: {err}"));
    }
    let mut conn = db.connection().await;
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM schema_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .expect("read schema_migrations");
    let expected: Vec<i64> = schema::MIGRATIONS
        .iter()
        .map(|(version, _, _)| *version)
        .collect();
    assert_eq!(versions, expected, "each migration is recorded once");

    let again = schema::migrate(db.store(None).await.pool())
        .await
        .expect("migrate an up-to-date database");
    assert!(again.is_empty(), "nothing is applied twice: {again:?}");
}

// ---------------------------------------------------------------------------------------
// Wake-ups
// ---------------------------------------------------------------------------------------

/// Enqueues one run on `producer` and waits (up to 10 s) for `signal` to fire; `what`
/// names the expectation when it does not.
async fn enqueue_and_hear(producer: &PgStore, signal: &tokio::sync::Notify, what: &str) {
    let heard = signal.notified();
    let mut heard = std::pin::pin!(heard);
    heard.as_mut().enable();
    dispatcher(producer)
        .enqueue(request())
        .await
        .expect("enqueue on the producer");
    tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .unwrap_or_else(|_| panic!("{what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_enqueue_wakes_this_one_through_listen() {
    let db = TestDb::create().await;
    let producer = db.store(None).await;
    let consumer = db.store(None).await;
    let signal = consumer.enqueue_signal();

    for round in ["enqueue", "second enqueue"] {
        enqueue_and_hear(
            &producer,
            &signal,
            &format!("{round}: the consumer's signal fires for the producer's enqueue"),
        )
        .await;
    }

    // A finish that puts a run back wakes other processes too.
    let claimed = consumer.run_claim(params(10)).await.expect("claim");
    assert_eq!(claimed.claimed.len(), 2, "both runs claimed");
    let signal = producer.enqueue_signal();
    let notified = signal.notified();
    let mut notified = std::pin::pin!(notified);
    notified.as_mut().enable();
    let listener_only = db.store(None).await;
    let other_signal = listener_only.enqueue_signal();
    let other = other_signal.notified();
    let mut other = std::pin::pin!(other);
    other.as_mut().enable();
    let skipped_before = consumer.own_wakeups_skipped();
    consumer
        .run_finish_many(vec![Finish {
            id: claimed.claimed[0].run.id,
            owner: claimed.claimed[0].owner,
            action: FinishAction::Release,
        }])
        .await
        .expect("release");
    tokio::time::timeout(Duration::from_secs(10), other)
        .await
        .expect("a released run wakes another process");
    tokio::time::timeout(Duration::from_secs(10), notified)
        .await
        .expect("and the producer");

    // A process's own writes wake it once, after their commit; its listener skips the
    // notification they sent (and counts it), while it still hears other processes. The
    // release above was the consumer's own write too: its notification may reach the
    // consumer's listener after the other processes have heard it, so wait for that
    // skip before counting the enqueue's.
    wait_for_skips(&consumer, skipped_before + 1, "the release's").await;
    dispatcher(&consumer)
        .enqueue(request())
        .await
        .expect("enqueue on the consumer");
    wait_for_skips(&consumer, skipped_before + 2, "the enqueue's").await;
    enqueue_and_hear(
        &producer,
        &consumer.enqueue_signal(),
        "the consumer's listener still hears other processes",
    )
    .await;
    assert_eq!(
        consumer.own_wakeups_skipped(),
        skipped_before + 2,
        "another process's notification is not skipped"
    );
}

/// Waits (up to 10 s) until `store`'s listener has skipped `count` of its own
/// notifications in all; `which` names the write whose notification is awaited.
async fn wait_for_skips(store: &PgStore, count: u64, which: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.own_wakeups_skipped() < count {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener never recognised {which} notification as its own"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------------

async fn database_now(conn: &mut PgConnection) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT date_trunc('milliseconds', clock_timestamp())")
        .fetch_one(&mut *conn)
        .await
        .expect("read the database clock")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_injected_clock_the_database_clock_rules() {
    let db = TestDb::create().await;
    let store = db.store(None).await;
    assert_eq!(store.now(), None, "no injected clock");
    let dispatcher = dispatcher(&store);
    let mut conn = db.connection().await;

    let before = database_now(&mut conn).await;
    let due = dispatcher.enqueue(request()).await.expect("enqueue").id();
    let later = dispatcher
        .enqueue(request().delay(Duration::from_secs(3600)))
        .await
        .expect("enqueue delayed")
        .id();
    let after = database_now(&mut conn).await;

    let run = store.run_get(due).await.expect("get").expect("exists");
    assert!(
        before <= run.run_at && run.run_at <= after,
        "due at the database's now: {before} <= {} <= {after}",
        run.run_at
    );
    assert_eq!(run.status, RunStatus::Queued, "due by the database clock");
    assert_eq!(
        run.created_at, run.run_at,
        "created and due at the same now"
    );
    assert_eq!(
        run.run_at.timestamp_subsec_micros() % 1000,
        0,
        "kept to the millisecond"
    );
    let delayed = store.run_get(later).await.expect("get").expect("exists");
    assert_eq!(
        delayed.status,
        RunStatus::Scheduled,
        "an hour away by the database clock"
    );
    assert_eq!(
        delayed.run_at - delayed.created_at,
        chrono::Duration::hours(1),
        "due exactly an hour after its creation"
    );

    let batch = store.run_claim(params(10)).await.expect("claim");
    let ids: Vec<RunId> = batch.claimed.iter().map(|claimed| claimed.run.id).collect();
    assert_eq!(ids, vec![due], "only the due run is claimed");
    let claimed = &batch.claimed[0].run;
    let started = claimed.started_at.expect("started");
    assert!(
        after <= started && started <= database_now(&mut conn).await,
        "started at the database's now"
    );
    assert_eq!(
        claimed.locked_until,
        Some(started + chrono::Duration::seconds(60)),
        "the lease runs from the database's now"
    );
}

// ---------------------------------------------------------------------------------------
// The caller's transaction
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_transaction_commits_or_drops_its_runs_with_its_own_writes() {
    let db = TestDb::create().await;
    let store = db
        .store(Some(Arc::new(ManualClock::at_fixed_start())))
        .await;
    let dispatcher = dispatcher(&store);
    sqlx::raw_sql("CREATE TABLE tickets (id bigint PRIMARY KEY)")
        .execute(store.pool())
        .await
        .expect("a business table");
    let tickets = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM tickets")
            .fetch_one(store.pool())
            .await
            .expect("count tickets")
    };

    // Committed: the ticket and its run together; the signal fires after the commit.
    let signal = store.enqueue_signal();
    let notified = signal.notified();
    let mut notified = std::pin::pin!(notified);
    notified.as_mut().enable();
    let mut tx = store.begin().await.expect("begin");
    sqlx::query("INSERT INTO tickets VALUES (1)")
        .execute(tx.connection())
        .await
        .expect("insert a ticket");
    let run = prepare(&dispatcher, request().unique_key("ticket-1"));
    let answer = tx.run_insert(&run).await.expect("enqueue inside");
    assert_eq!(
        answer,
        Enqueued::Inserted(run.id),
        "inserted inside the transaction"
    );
    assert_eq!(
        store.run_get(run.id).await.expect("get"),
        None,
        "invisible to others before the commit"
    );
    tx.commit().await.expect("commit");
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("the commit wakes this process's workers");
    assert_eq!(tickets().await, 1, "the ticket is committed");
    assert!(
        store.run_get(run.id).await.expect("get").is_some(),
        "and its run"
    );

    // A duplicate id fails alone (savepoint); the rest of the transaction carries on.
    let plain = prepare(&dispatcher, request());
    store
        .run_enqueue_many(vec![plain.clone()])
        .await
        .expect("enqueue a run without a key");
    let mut tx = store.begin().await.expect("begin");
    let err = tx
        .run_insert(&plain)
        .await
        .expect_err("a duplicate id is refused");
    assert!(
        matches!(err, StoreError::Conflict(_)),
        "a duplicate id is a conflict: {err:?}"
    );
    let again = prepare(&dispatcher, request().unique_key("ticket-1"));
    assert_eq!(
        tx.run_insert(&again)
            .await
            .expect("the transaction is still usable"),
        Enqueued::Existing(run.id),
        "the key is held by the committed run"
    );
    sqlx::query("INSERT INTO tickets VALUES (2)")
        .execute(tx.connection())
        .await
        .expect("the caller's statements still work");
    tx.commit().await.expect("commit");
    assert_eq!(tickets().await, 2, "the second ticket is committed");

    // Rolled back (explicitly, or by dropping the handle): neither the ticket nor the run.
    for how in ["rollback", "drop"] {
        let mut tx = store.begin().await.expect("begin");
        sqlx::query("INSERT INTO tickets VALUES (3)")
            .execute(tx.connection())
            .await
            .expect("insert a ticket");
        let dropped = prepare(&dispatcher, request());
        tx.run_insert(&dropped).await.expect("enqueue inside");
        if how == "rollback" {
            tx.rollback().await.expect("rollback");
        } else {
            drop(tx);
        }
        assert_eq!(tickets().await, 2, "{how}: the ticket is gone");
        assert_eq!(
            store.run_get(dropped.id).await.expect("get"),
            None,
            "{how}: the run is gone with it"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Several processes
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_claiming_at_once_never_share_a_run() {
    let db = TestDb::create().await;
    let stores = [db.store(None).await, db.store(None).await];
    let total = 600;
    let runs: Vec<NewRun> = (0..total)
        .map(|index| {
            prepare(
                &dispatcher(&stores[0]),
                request().tenant(format!("t{}", index % 3)),
            )
        })
        .collect();
    stores[0].run_enqueue_many(runs).await.expect("enqueue");

    let mut claimers = Vec::new();
    for store in stores.iter().chain(stores.iter()).chain(stores.iter()) {
        let store = store.clone();
        claimers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let batch = match store.run_claim(params(7)).await {
                    Ok(batch) => batch,
                    Err(StoreError::Unavailable(_)) => continue,
                    Err(err) => panic!("claim failed: {err}"),
                };
                if batch.claimed.is_empty() {
                    return mine;
                }
                let finishes: Vec<Finish> = completions(&batch);
                let replies = store.run_finish_many(finishes).await.expect("finish");
                assert!(
                    replies
                        .iter()
                        .all(|reply| matches!(reply, FinishReply::Applied { .. })),
                    "every claim is still owned at its finish: {replies:?}"
                );
                mine.extend(batch.claimed.into_iter().map(|claimed| claimed.run.id));
            }
        }));
    }
    let mut seen = HashSet::new();
    for claimer in claimers {
        for id in claimer.await.expect("claimer task") {
            assert!(seen.insert(id), "run {id} was claimed twice");
        }
    }
    assert_eq!(seen.len(), total, "together they claimed every run once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_of_one_unique_key_insert_one_run() {
    let db = TestDb::create().await;
    let stores = [db.store(None).await, db.store(None).await];
    let mut tasks = Vec::new();
    for index in 0..20 {
        let store = stores[index % 2].clone();
        tasks.push(tokio::spawn(async move {
            dispatcher(&store)
                .enqueue(request().unique_key("one-and-only"))
                .await
                .expect("enqueue")
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("task"));
    }
    let inserted: Vec<RunId> = answers
        .iter()
        .filter_map(|answer| match answer {
            Enqueued::Inserted(id) => Some(*id),
            Enqueued::Existing(_) => None,
        })
        .collect();
    assert_eq!(inserted.len(), 1, "exactly one insert: {answers:?}");
    assert!(
        answers.iter().all(|answer| answer.id() == inserted[0]),
        "everyone else is told the one run: {answers:?}"
    );
}

async fn listed_tenants(store: &PgStore) -> Vec<String> {
    sqlx::query_scalar("SELECT tenant FROM run_tenants ORDER BY tenant")
        .fetch_all(store.pool())
        .await
        .expect("read run_tenants")
}

/// A tenant drained and fed again at once is not deleted and re-listed for every run:
/// the list is tidied at most once per `tenant_tidy_every` — unless a round met
/// `TIDY_EMPTY_TENANTS` empty tenants, which it tidies at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_list_is_tidied_at_a_pace_unless_many_tenants_are_empty() {
    let db = TestDb::create().await;
    let clock = ManualClock::at_fixed_start();
    let mut config = db.config(Some(Arc::new(clock.clone())));
    config.tenant_tidy_every = Duration::from_secs(3600);
    let store = PgStore::connect(config).await.expect("connect");
    let dispatcher = dispatcher(&store);

    for round in 0..2 {
        dispatcher
            .enqueue(request().tenant("a"))
            .await
            .expect("enqueue");
        let batch = store.run_claim(params(10)).await.expect("claim");
        assert_eq!(batch.claimed.len(), 1, "round {round}: a's run");
        store
            .run_finish_many(completions(&batch))
            .await
            .expect("finish");
        let empty = store.run_claim(params(10)).await.expect("an empty claim");
        assert!(empty.claimed.is_empty(), "round {round}: nothing left");
        let listed = listed_tenants(&store).await;
        if round == 0 {
            assert!(
                listed.is_empty(),
                "the first tidy is due at once: {listed:?}"
            );
        } else {
            assert_eq!(
                listed,
                ["a"],
                "a second tidy within the pause is not due: a stays listed"
            );
        }
    }

    let many = fronta_store_postgres::TIDY_EMPTY_TENANTS + 8;
    let runs: Vec<NewRun> = (0..many)
        .map(|index| prepare(&dispatcher, request().tenant(format!("t{index:02}"))))
        .collect();
    store.run_enqueue_many(runs).await.expect("enqueue");
    let batch = store.run_claim(params(100)).await.expect("claim");
    assert_eq!(batch.claimed.len(), many, "one run of each tenant");
    store
        .run_finish_many(completions(&batch))
        .await
        .expect("finish");
    assert_eq!(
        listed_tenants(&store).await.len(),
        many + 1,
        "a round that met one empty tenant (a) does not tidy within the pause"
    );
    dispatcher
        .enqueue(request().tenant("z"))
        .await
        .expect("enqueue");
    let batch = store.run_claim(params(100)).await.expect("claim");
    assert_eq!(batch.claimed.len(), 1, "z's run");
    assert_eq!(
        listed_tenants(&store).await,
        ["z"],
        "a round that met {} empty tenants tidies at once, whatever the pause",
        many + 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_list_forgets_drained_tenants_and_never_loses_one_with_work() {
    let db = TestDb::create().await;
    let clock = ManualClock::at_fixed_start();
    let mut config = db.config(Some(Arc::new(clock.clone())));
    config.tenant_tidy_every = Duration::ZERO;
    let store = PgStore::connect(config).await.expect("connect");
    let dispatcher = dispatcher(&store);
    for tenant in ["a", "b"] {
        dispatcher
            .enqueue(request().tenant(tenant))
            .await
            .expect("enqueue");
    }
    dispatcher
        .enqueue(request().tenant("c").delay(Duration::from_secs(60)))
        .await
        .expect("enqueue a scheduled run");
    assert_eq!(
        listed_tenants(&store).await,
        ["a", "b", "c"],
        "every tenant with work is listed"
    );
    let batch = store.run_claim(params(10)).await.expect("claim");
    assert_eq!(batch.claimed.len(), 2, "the two due runs");
    store.run_claim(params(10)).await.expect("an empty claim");
    assert_eq!(
        listed_tenants(&store).await,
        ["c"],
        "drained tenants are forgotten; one with a scheduled run is kept"
    );
    store
        .run_finish_many(vec![Finish {
            id: batch.claimed[0].run.id,
            owner: batch.claimed[0].owner,
            action: FinishAction::Retry {
                delay: Duration::ZERO,
                error: "again".into(),
            },
        }])
        .await
        .expect("retry");
    let tenant = batch.claimed[0].run.tenant.clone();
    assert!(
        listed_tenants(&store).await.contains(&tenant),
        "a run put back lists its tenant again"
    );
    let cancelled = store
        .run_request_cancel(batch.claimed[1].run.id)
        .await
        .expect("cancel");
    assert_eq!(cancelled, CancelReply::Requested, "the other is running");

    // An enqueue not yet committed keeps its tenant listed: the claim that finds the
    // tenant empty cannot take its lock, so it does not forget it.
    dispatcher
        .enqueue(request().tenant("d"))
        .await
        .expect("enqueue");
    let taken = store.run_claim(params(10)).await.expect("claim");
    assert!(
        taken
            .claimed
            .iter()
            .any(|claimed| claimed.run.tenant == "d"),
        "d's run is claimed"
    );
    let mut tx = store.begin().await.expect("begin");
    let pending = prepare(&dispatcher, request().tenant("d"));
    tx.run_insert(&pending).await.expect("enqueue inside");
    store
        .run_claim(params(10))
        .await
        .expect("a claim that finds d empty");
    assert!(
        listed_tenants(&store).await.contains(&"d".to_owned()),
        "d stays listed while its enqueue is in flight"
    );
    tx.commit().await.expect("commit");
    let taken = store.run_claim(params(10)).await.expect("claim");
    assert!(
        taken
            .claimed
            .iter()
            .any(|claimed| claimed.run.id == pending.id),
        "the committed run is claimed: its tenant was never lost"
    );

    // Enqueues racing claims that forget tenants: every run is claimed in the end.
    let producers = [db.store(None).await, db.store(None).await];
    let consumer = db.store(None).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drainer = {
        let consumer = consumer.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut done = 0usize;
            loop {
                let finished = stop.load(std::sync::atomic::Ordering::SeqCst);
                let batch = consumer.run_claim(params(16)).await.expect("claim");
                if batch.claimed.is_empty() && finished {
                    return done;
                }
                done += batch.claimed.len();
                let finishes = completions(&batch);
                consumer.run_finish_many(finishes).await.expect("finish");
            }
        })
    };
    let mut enqueuers = Vec::new();
    for (index, producer) in producers.iter().enumerate() {
        let producer = producer.clone();
        enqueuers.push(tokio::spawn(async move {
            let dispatcher = self::dispatcher(&producer);
            for round in 0..150 {
                dispatcher
                    .enqueue(request().tenant(format!("racer-{}", (round + index) % 3)))
                    .await
                    .expect("enqueue");
                if round % 10 == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }));
    }
    for enqueuer in enqueuers {
        enqueuer.await.expect("enqueuer");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let drained = tokio::time::timeout(Duration::from_secs(60), drainer)
        .await
        .expect("the drain ends")
        .expect("drainer task");
    assert_eq!(
        drained, 300,
        "every raced run was claimed: none was hidden by a forgotten tenant"
    );
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runs WHERE tenant LIKE 'racer-%' AND status = 0")
            .fetch_one(consumer.pool())
            .await
            .expect("count");
    assert_eq!(left, 0, "no raced run is left pending");
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_unavailable_and_a_bad_url_invalid() {
    let mut config = PgConfig::new("postgres://postgres@127.0.0.1:1/nowhere");
    config.acquire_timeout = Duration::from_secs(2);
    let err = PgStore::connect(config)
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(err, StoreError::Unavailable(_)),
        "unreachable is Unavailable: {err:?}"
    );

    let err = PgStore::connect(PgConfig::new("mysql://nope"))
        .await
        .expect_err("not a Postgres URL");
    assert!(
        matches!(err, StoreError::Invalid(_)),
        "a bad URL is Invalid: {err:?}"
    );

    let err = PgStore::connect(PgConfig::new("postgres://u:hunter2@127.0.0.1:1/x"))
        .await
        .expect_err("unreachable");
    assert!(
        !err.to_string().contains("hunter2"),
        "the password never reaches an error: {err}"
    );
}

/// A database as it was before automation versions and references (migrations 1–12),
/// holding an automation that names a group: opened, the automation is version 1 with
/// its hash, saving it unchanged makes no version, a rename of the group reaches its
/// definition, and the group cannot be deleted while the automation names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automation_saved_before_versions_is_version_1_and_follows_renames() {
    let db = TestDb::create().await;
    let mut conn = db.connection().await;
    old_schema(&mut conn, 13).await;
    let (tenant, group, automation) = (
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7(),
    );
    let definition = serde_json::json!({
        "name": "Route", "enabled": true, "trigger": {"type": "manual"},
        "steps": [{"name": "assign", "op": "ticket/assign-least-busy",
                   "input": {"ticket": "{{_body.ticket}}", "group": "support"}}]
    });
    for (sql, step) in [
        (
            "INSERT INTO desk_tenants (id, name, created_at) VALUES ($1, 'Acme', now())",
            "tenant",
        ),
        (
            "INSERT INTO desk_groups (id, tenant, name, created_at) \
             VALUES ($2, $1, 'support', now())",
            "group",
        ),
        (
            "INSERT INTO automations (id, tenant, name, definition, enabled, trigger_kind, \
             created_at, updated_at) VALUES ($3, $1, 'Route', $4, true, 'manual', now(), now())",
            "automation",
        ),
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .bind(tenant)
            .bind(group)
            .bind(automation)
            .bind(sqlx::types::Json(&definition))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|err| panic!("{step}: {err}"));
    }
    let store = db.store(None).await;
    fronta_store_tests::automation_cases::an_automation_saved_before_versions_is_version_1_and_follows_renames(
        &store,
        &store,
        fronta_desk::TenantId(tenant),
        fronta_automation::store::AutomationId(automation),
        fronta_desk::GroupId(group),
    )
    .await;
}
