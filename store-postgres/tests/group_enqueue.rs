//! Group enqueue on Postgres (`fronta_store_postgres::enqueue_group`): calls that arrive while
//! the store's writers are busy share one statement and one commit, each answered with
//! its own runs, a bad call failing alone, a dropped caller's runs still written.
//!
//! Each test holds the first write behind a `SHARE` lock on `runs` taken by a
//! transaction of its own, so the calls after it gather deterministically, then lets go.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fronta_engine::{Dispatcher, EnqueueRequest, Enqueued, NewRun, RunId, RunStore, StoreError};
use fronta_store_postgres::PgStore;
use fronta_store_postgres::enqueue_group::{GroupConfig, GroupStats};
use sqlx::{Connection, PgConnection};

use crate::support::TestDb;

const KIND: &str = "job";

async fn store(db: &TestDb, writers: usize) -> PgStore {
    let mut config = db.config(None);
    config.enqueue_groups = GroupConfig {
        writers,
        max_runs: 1_000,
    };
    PgStore::connect(config).await.expect("the store connects")
}

fn prepare(store: &PgStore, tenant: &str, key: Option<&str>) -> NewRun {
    let mut request = EnqueueRequest::new(KIND, serde_json::json!({}), 0).tenant(tenant);
    if let Some(key) = key {
        request = request.unique_key(key);
    }
    Dispatcher::new(Arc::new(store.clone()), [KIND])
        .prepare(request)
        .expect("a valid request")
}

async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(Instant::now() < deadline, "waited 20 s for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A transaction holding `runs` in `SHARE` mode: every insert waits until it ends.
async fn hold_inserts(db: &TestDb) -> PgConnection {
    let mut holder = db.connection().await;
    sqlx::query("BEGIN")
        .execute(&mut holder)
        .await
        .expect("begin");
    sqlx::query("LOCK TABLE runs IN SHARE MODE")
        .execute(&mut holder)
        .await
        .expect("lock runs");
    holder
}

async fn release(mut holder: PgConnection) {
    sqlx::query("COMMIT")
        .execute(&mut holder)
        .await
        .expect("commit");
    let _ = holder.close().await;
}

async fn inserts_waiting(db: &TestDb) -> i64 {
    let mut conn = db.connection().await;
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
         WHERE c.relname = 'runs' AND NOT l.granted",
    )
    .fetch_one(&mut conn)
    .await
    .expect("pg_locks")
}

async fn stored(db: &TestDb, ids: &[RunId]) -> i64 {
    let mut conn = db.connection().await;
    let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.0).collect();
    sqlx::query_scalar("SELECT count(*) FROM runs WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_one(&mut conn)
        .await
        .expect("count")
}

type Answer = tokio::task::JoinHandle<Result<Vec<Enqueued>, StoreError>>;

fn spawn_enqueue(store: &PgStore, runs: Vec<NewRun>) -> Answer {
    let store = store.clone();
    tokio::spawn(async move { store.run_enqueue_many(runs).await })
}

/// Starts one call, which the lock holds in its write, then `calls` more, and waits until
/// they all wait for the writer.
async fn gather(db: &TestDb, store: &PgStore, calls: Vec<Vec<NewRun>>) -> (Answer, Vec<Answer>) {
    let first = spawn_enqueue(store, vec![prepare(store, "acme", None)]);
    until("the first write to wait for the lock", async || {
        inserts_waiting(db).await >= 1
    })
    .await;
    // One call at a time, each waiting until it queued: tasks spawned together reach the
    // queue in whatever order the runtime runs them, and the tests rely on the call order.
    let mut rest = Vec::with_capacity(calls.len());
    for (index, runs) in calls.into_iter().enumerate() {
        rest.push(spawn_enqueue(store, runs));
        let queued = index as u64 + 1;
        until("the later call to queue", async || {
            store.enqueue_group_stats().waiting >= queued
        })
        .await;
    }
    (first, rest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_arriving_while_the_writer_is_busy_share_one_commit_each_answered_its_own() {
    let db = TestDb::create().await;
    let store = store(&db, 1).await;
    let holder = hold_inserts(&db).await;
    let calls: Vec<Vec<NewRun>> = (0..31)
        .map(|index| {
            (0..1 + index % 3)
                .map(|_| prepare(&store, &format!("tenant-{}", index % 4), None))
                .collect()
        })
        .collect();
    let (first, rest) = gather(&db, &store, calls.clone()).await;
    release(holder).await;
    let first = first.await.expect("task").expect("the first call");
    assert!(matches!(first[..], [Enqueued::Inserted(_)]), "{first:?}");
    for (runs, answer) in calls.iter().zip(rest) {
        let answers = answer.await.expect("task").expect("a grouped call");
        let want: Vec<Enqueued> = runs.iter().map(|run| Enqueued::Inserted(run.id)).collect();
        assert_eq!(
            answers, want,
            "each call is answered its own runs, in its order"
        );
    }
    let ids: Vec<RunId> = calls.iter().flatten().map(|run| run.id).collect();
    assert_eq!(
        stored(&db, &ids).await,
        ids.len() as i64,
        "every run is stored"
    );
    assert_eq!(
        store.enqueue_group_stats(),
        GroupStats {
            groups: 2,
            calls: 32,
            split: 0,
            waiting: 0
        },
        "the first call alone, then the 31 that gathered behind it in one group"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_repeated_across_the_calls_of_a_group_goes_to_the_earliest_call() {
    let db = TestDb::create().await;
    let store = store(&db, 1).await;
    let holder = hold_inserts(&db).await;
    let calls = vec![
        vec![prepare(&store, "acme", Some("order-7"))],
        vec![
            prepare(&store, "acme", None),
            prepare(&store, "acme", Some("order-7")),
        ],
        vec![prepare(&store, "other", Some("order-7"))],
    ];
    let (first, rest) = gather(&db, &store, calls.clone()).await;
    release(holder).await;
    first.await.expect("task").expect("the first call");
    let mut answers = Vec::new();
    for answer in rest {
        answers.push(answer.await.expect("task").expect("a grouped call"));
    }
    let holder_id = calls[0][0].id;
    assert_eq!(answers[0], vec![Enqueued::Inserted(holder_id)]);
    assert_eq!(
        answers[1],
        vec![
            Enqueued::Inserted(calls[1][0].id),
            Enqueued::Existing(holder_id)
        ],
        "the later call is told the earlier call's run, as if they came one after the other"
    );
    assert_eq!(
        answers[2],
        vec![Enqueued::Inserted(calls[2][0].id)],
        "another tenant's key is its own"
    );
    assert_eq!(store.enqueue_group_stats().groups, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_call_fails_alone_and_its_group_is_written_call_by_call() {
    let db = TestDb::create().await;
    let store = store(&db, 1).await;
    let taken = prepare(&store, "acme", None);
    store
        .run_enqueue_many(vec![taken.clone()])
        .await
        .expect("the first run of that id");
    let holder = hold_inserts(&db).await;
    let good_before = prepare(&store, "acme", None);
    let good_after = prepare(&store, "acme", None);
    let calls = vec![
        vec![good_before.clone()],
        vec![prepare(&store, "acme", None), taken.clone()],
        vec![good_after.clone()],
    ];
    let (first, rest) = gather(&db, &store, calls.clone()).await;
    release(holder).await;
    first.await.expect("task").expect("the first call");
    let mut answers = Vec::new();
    for answer in rest {
        answers.push(answer.await.expect("task"));
    }
    assert_eq!(answers[0], Ok(vec![Enqueued::Inserted(good_before.id)]));
    assert!(
        matches!(&answers[1], Err(StoreError::Conflict(_))),
        "the call reusing a stored id fails: {:?}",
        answers[1]
    );
    assert_eq!(answers[2], Ok(vec![Enqueued::Inserted(good_after.id)]));
    assert_eq!(
        stored(&db, &[calls[1][0].id]).await,
        0,
        "the bad call wrote nothing, not even its good run"
    );
    assert_eq!(stored(&db, &[good_before.id, good_after.id]).await, 2);
    let stats = store.enqueue_group_stats();
    // The stored run's own enqueue, the held first call, then the group of three.
    assert_eq!(
        (stats.groups, stats.calls, stats.split),
        (3, 5, 1),
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_stops_waiting_still_has_its_runs_written() {
    let db = TestDb::create().await;
    let store = store(&db, 1).await;
    let holder = hold_inserts(&db).await;
    let dropped = prepare(&store, "acme", None);
    let (first, rest) = gather(&db, &store, vec![vec![dropped.clone()]]).await;
    for answer in rest {
        answer.abort();
        assert!(answer.await.is_err(), "the caller was stopped");
    }
    release(holder).await;
    first.await.expect("task").expect("the first call");
    until("the dropped caller's run to be stored", async || {
        stored(&db, &[dropped.id]).await == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_writers_every_call_is_its_own_transaction() {
    let db = TestDb::create().await;
    let store = store(&db, 0).await;
    let calls: Vec<Answer> = (0..8)
        .map(|_| spawn_enqueue(&store, vec![prepare(&store, "acme", None)]))
        .collect();
    for call in calls {
        call.await.expect("task").expect("enqueued");
    }
    assert_eq!(store.enqueue_group_stats(), GroupStats::default());
}
