//! What only the SQLite store promises, beyond the shared conformance suite: the claim
//! queries walk their indexes (their cost does not grow with the queue), concurrent
//! writes share one group commit, a caller's transaction carries its enqueues, a
//! panicking write fails alone while a stopped writer fails every write and readiness,
//! the pragmas hold on every connection, and migrations run once.

use std::sync::Arc;
use std::time::Duration;

use fronta_engine::{Dispatcher, EnqueueRequest, RunStore, StoreError};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};

fn open(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(SqliteConfig::new(dir.path().join("test.db"))).expect("open store")
}

fn plan(conn: &rusqlite::Connection, sql: &str) -> String {
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .expect("explain prepares");
    let rows: Vec<String> = stmt
        .query_map([], |row| row.get::<_, String>(3))
        .expect("explain runs")
        .collect::<Result<_, _>>()
        .expect("explain rows");
    rows.join(" | ")
}

#[test]
fn claim_queries_walk_their_indexes_without_sorting_the_queue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _store = open(&dir);
    let conn = rusqlite::Connection::open(dir.path().join("test.db")).expect("open");
    let due = plan(
        &conn,
        "SELECT seq, kind FROM runs INDEXED BY runs_pending \
         WHERE tenant = 't' AND status = 0 AND run_at <= 5 ORDER BY priority DESC, run_at LIMIT 10",
    );
    assert!(
        due.contains("runs_pending"),
        "due-run probe uses runs_pending: {due}"
    );
    assert!(
        !due.contains("TEMP B-TREE"),
        "due-run probe must not sort: {due}"
    );
    assert!(
        !due.starts_with("SCAN runs"),
        "due-run probe must not scan: {due}"
    );
    let expired = plan(
        &conn,
        "SELECT seq, reclaims, cancel_requested, kind FROM runs INDEXED BY runs_running \
         WHERE status = 1 AND locked_until < 5 ORDER BY locked_until LIMIT 10",
    );
    assert!(
        expired.contains("runs_running"),
        "expired-lease probe uses runs_running: {expired}"
    );
    assert!(
        !expired.contains("TEMP B-TREE"),
        "expired-lease probe must not sort: {expired}"
    );
    let busy = plan(
        &conn,
        "SELECT EXISTS (SELECT 1 FROM runs INDEXED BY runs_running WHERE status = 1) \
             OR EXISTS (SELECT 1 FROM runs INDEXED BY runs_pending WHERE status = 0 AND run_at <= 5)",
    );
    assert!(
        busy.contains("runs_running")
            && busy.contains("runs_pending")
            && !busy.contains("SCAN runs\n"),
        "the idle check reads only the partial indexes of live runs: {busy}"
    );
    let finish = plan(
        &conn,
        "UPDATE runs SET status = 2 WHERE id = x'00' AND status = 1 AND locked_by = x'00'",
    );
    assert!(
        finish.contains("sqlite_autoindex_runs_1") || finish.contains("USING INDEX"),
        "an owner-checked write finds its row by id: {finish}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_share_one_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let dispatcher = Dispatcher::new(Arc::new(store.clone()), ["noop"]);
    // Hold the writer inside a transaction until all 64 enqueues have been handed to it.
    // The enqueues are sent only once the writer is inside it (not merely once it was
    // sent): a writer that had not yet taken the blocking job would take it with the 64
    // in one group.
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (inside_tx, inside_rx) = tokio::sync::oneshot::channel::<()>();
    let blocker = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .transaction(move |_tx| {
                    let _ = inside_tx.send(());
                    let _ = release_rx.recv_timeout(Duration::from_secs(10));
                    Ok(())
                })
                .await
        }
    });
    tokio::time::timeout(Duration::from_secs(10), inside_rx)
        .await
        .expect("the writer runs the blocking transaction within 10 s")
        .expect("the blocking transaction started");
    let before = store.writer_stats();
    let mut enqueues = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let dispatcher = dispatcher.clone();
        enqueues.spawn(async move {
            dispatcher
                .enqueue(EnqueueRequest::new("noop", serde_json::json!({}), 0))
                .await
        });
    }
    while store.writer_stats().jobs_sent < before.jobs_sent + 64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    release_tx.send(()).expect("release the writer");
    blocker.await.expect("blocker task").expect("blocker tx");
    while let Some(done) = enqueues.join_next().await {
        done.expect("task").expect("enqueue");
    }
    let after = store.writer_stats();
    assert_eq!(
        after.commits - before.commits,
        2,
        "the blocking transaction commits once, then the 64 enqueues that waited behind it \
         share one commit (writer stats {after:?})"
    );
    assert_eq!(
        store.run_stats().await.expect("stats").queued,
        64,
        "all 64 enqueued"
    );
}

#[tokio::test]
async fn an_enqueue_inside_a_failed_transaction_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let dispatcher = Dispatcher::new(Arc::new(store.clone()), ["noop"]);
    let inside = dispatcher.clone();
    let failed = store
        .transaction(move |tx| {
            tx.connection()
                .execute_batch("CREATE TABLE IF NOT EXISTS business (n INTEGER); INSERT INTO business VALUES (1);")
                .map_err(|err| StoreError::Internal(err.to_string()))?;
            inside
                .enqueue_in(tx, EnqueueRequest::new("noop", serde_json::json!({}), 0))
                .map_err(|err| StoreError::Internal(err.to_string()))?;
            Err::<(), _>(StoreError::Conflict("the business rule said no".into()))
        })
        .await;
    assert!(failed.is_err(), "the transaction reports its failure");
    assert_eq!(
        store.run_stats().await.expect("stats").total(),
        0,
        "the enqueue rolled back with it"
    );

    let inside = dispatcher.clone();
    let id = store
        .transaction(move |tx| {
            tx.connection()
                .execute_batch("CREATE TABLE IF NOT EXISTS business (n INTEGER); INSERT INTO business VALUES (2);")
                .map_err(|err| StoreError::Internal(err.to_string()))?;
            inside
                .enqueue_in(tx, EnqueueRequest::new("noop", serde_json::json!({}), 0))
                .map_err(|err| StoreError::Internal(err.to_string()))
        })
        .await
        .expect("committed transaction");
    assert!(
        store.run_get(id.id()).await.expect("get").is_some(),
        "the run committed with the business write"
    );
    let conn = rusqlite::Connection::open(dir.path().join("test.db")).expect("open");
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM business WHERE n = 2", [], |row| {
            row.get(0)
        })
        .expect("count");
    assert_eq!(rows, 1, "the business write committed with the run");
}

#[test]
fn pragmas_hold_and_migrations_run_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("test.db");
    let _first = SqliteStore::open(SqliteConfig::new(&path)).expect("first open");
    let _second =
        SqliteStore::open(SqliteConfig::new(&path)).expect("second open of the same file");
    let conn = rusqlite::Connection::open(&path).expect("open");
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .expect("journal mode");
    assert_eq!(mode.to_lowercase(), "wal", "the database is in WAL mode");
    let versions: i64 = conn
        .query_row("SELECT count(*) FROM schema_migrations", [], |row| {
            row.get(0)
        })
        .expect("migrations");
    assert_eq!(
        versions as usize,
        fronta_store_sqlite::schema::MIGRATIONS.len(),
        "each migration recorded once"
    );
}

#[test]
fn a_database_that_cannot_be_opened_is_a_clear_error() {
    let err = SqliteStore::open(SqliteConfig::new("/nonexistent-folder/x/y.db"))
        .expect_err("no such folder");
    assert!(
        err.to_string().contains("cannot open SQLite database"),
        "the error names the problem: {err}"
    );
}

#[tokio::test]
async fn a_panicking_write_fails_alone_and_the_store_stays_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let dispatcher = Dispatcher::new(Arc::new(store.clone()), ["noop"]);
    let inside = dispatcher.clone();
    let planted = store
        .transaction(move |tx| -> Result<(), StoreError> {
            inside
                .enqueue_in(tx, EnqueueRequest::new("noop", serde_json::json!({}), 0))
                .map_err(|err| StoreError::Internal(err.to_string()))?;
            panic!("planted panic in a write")
        })
        .await;
    match planted {
        Err(StoreError::Internal(message)) => assert!(
            message.contains("panicked") && message.contains("planted panic in a write"),
            "the caller hears that its write panicked: {message}"
        ),
        other => panic!("a panicking write answers Internal, got {other:?}"),
    }
    assert!(store.writer_running(), "the writer thread goes on");
    assert_eq!(
        store.writer_stats().jobs_panicked,
        1,
        "the panic is counted"
    );
    dispatcher
        .enqueue(EnqueueRequest::new("noop", serde_json::json!({}), 0))
        .await
        .expect("the next write is written");
    assert_eq!(
        store.run_stats().await.expect("stats").queued,
        1,
        "only the later enqueue: the panicking write's run was rolled back"
    );
    store.store_ready().await.expect("the store is still ready");
}

#[tokio::test]
async fn a_stopped_writer_fails_every_write_and_readiness_but_not_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let dispatcher = Dispatcher::new(Arc::new(store.clone()), ["noop"]);
    dispatcher
        .enqueue(EnqueueRequest::new("noop", serde_json::json!({}), 0))
        .await
        .expect("an enqueue before the stop");
    store.store_ready().await.expect("ready before the stop");
    store.stop_writer().await;
    assert!(!store.writer_running(), "the store knows its writer ended");
    let refused = dispatcher
        .enqueue(EnqueueRequest::new("noop", serde_json::json!({}), 0))
        .await;
    assert!(
        matches!(
            refused,
            Err(fronta_engine::EngineError::Store(StoreError::Unavailable(
                _
            )))
        ),
        "a write answers Unavailable: {refused:?}"
    );
    let ready = store.store_ready().await;
    assert!(
        matches!(ready, Err(StoreError::Unavailable(_))),
        "readiness fails with the write path gone: {ready:?}"
    );
    assert_eq!(
        store.run_stats().await.expect("reads still answer").queued,
        1,
        "the run written before the stop is still there"
    );
}

/// Retention walks `runs_finished` (no scan of the history), and a new database gives the
/// pages deletes free back to the file system step by step: after every run is pruned and
/// space reclaimed, the file has shrunk and no page is left free.
#[tokio::test]
async fn retention_walks_its_index_and_gives_freed_pages_back() {
    use fronta_engine::store::Prune;
    use fronta_engine::{ClaimParams, Finish, FinishAction, RunStatus};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let conn = rusqlite::Connection::open(dir.path().join("test.db")).expect("open");
    let mode: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
        .expect("a mode");
    assert_eq!(mode, 2, "a new database has incremental vacuum");
    let ended = plan(
        &conn,
        "SELECT r.seq FROM runs r WHERE r.status = 2 AND r.status >= 2 \
         AND coalesce(r.completed_at, r.failed_at, r.cancelled_at) < 5 \
         ORDER BY coalesce(r.completed_at, r.failed_at, r.cancelled_at) LIMIT 10",
    );
    assert!(
        ended.contains("runs_finished") && !ended.contains("TEMP B-TREE"),
        "the prune's choice walks runs_finished in order: {ended}"
    );
    let oldest = plan(
        &conn,
        "SELECT min(coalesce(completed_at, failed_at, cancelled_at)) FROM runs WHERE status = 3 AND status >= 2",
    );
    assert!(
        oldest.contains("runs_finished"),
        "the oldest end is an index probe: {oldest}"
    );

    let dispatcher = Dispatcher::new(Arc::new(store.clone()), ["bulk"]);
    let payload = serde_json::json!({"padding": "x".repeat(4000)});
    for _ in 0..4 {
        let batch: Vec<EnqueueRequest> = (0..250)
            .map(|_| EnqueueRequest::new("bulk", payload.clone(), 0))
            .collect();
        dispatcher.enqueue_many(batch).await.expect("enqueued");
    }
    loop {
        let claimed = store
            .run_claim(ClaimParams {
                limit: 500,
                default_lease: Duration::from_secs(60),
                leases: Default::default(),
                max_reclaims: 5,
                holder: None,
            })
            .await
            .expect("a claim");
        if claimed.claimed.is_empty() {
            break;
        }
        let finishes = claimed
            .claimed
            .iter()
            .map(|run| Finish {
                id: run.run.id,
                owner: run.owner,
                action: FinishAction::Complete { result: None },
            })
            .collect();
        store.run_finish_many(finishes).await.expect("finished");
    }
    let pages = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row("PRAGMA page_count", [], |row| row.get(0))
            .expect("pages")
    };
    let before = pages(&conn);
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let mut deleted = 0;
    loop {
        let batch = store
            .run_prune(&Prune {
                status: RunStatus::Completed,
                tenant: None,
                skip_tenants: Vec::new(),
                finished_before: later,
                keyed_finished_before: later,
                keep: Vec::new(),
                keep_newest_of: Vec::new(),
                limit: 300,
            })
            .await
            .expect("pruned");
        deleted += batch;
        if batch < 300 {
            break;
        }
    }
    assert_eq!(deleted, 1000, "every completed run");
    let mut steps = 0;
    while store.reclaim_space(256).await.expect("reclaimed") > 0 {
        steps += 1;
        assert!(steps < 1000, "the free pages run out");
    }
    let after = pages(&conn);
    assert!(
        after * 2 < before,
        "the file gave most of its pages back: {before} → {after} pages ({steps} steps)"
    );
    let free: i64 = conn
        .query_row("PRAGMA freelist_count", [], |row| row.get(0))
        .expect("free pages");
    assert_eq!(free, 0, "no page is left free");
}
