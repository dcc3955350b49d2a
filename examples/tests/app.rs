//! The example application (`examples/src/lib.rs`) run end to end on both stores, and
//! the typed payloads' refusals. Pins down seed 002's recipe as an embedding application
//! lives it:
//! - a sign-up enqueues its welcome mail in the transaction of its `users` row: the
//!   committed sign-up's mail is sent once, the rolled-back one's user and run are both
//!   absent;
//! - the durable import, interrupted once, resumes from its checkpoint: every batch done
//!   exactly once, in order, with one attempt spent;
//! - a payload that does not decode as the kind's type is refused at enqueue with the
//!   kind and serde's message; one written without that check (an older version's
//!   payload) fails its run with the message and is not retried.
//!
//! The Postgres case needs the server of the other Postgres tests
//! (`FRONTA_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`)
//! and makes a database of its own; an unreachable server fails the test.

use std::sync::Arc;
use std::time::Duration;

use fronta_engine::{
    Dispatcher, EngineError, EnqueueRequest, RunFilter, RunStatus, RunStore, Worker, WorkerConfig,
};
use fronta_examples::{Database, Effects, Report, registry, run_app};
use fronta_store_postgres::sqlx::{self, Connection};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use tokio_util::sync::CancellationToken;

fn check_report(report: &Report, store: &str) {
    assert_eq!(
        report.users,
        vec!["ada@example.com".to_owned()],
        "{store}: the rolled-back sign-up left no user"
    );
    assert_eq!(
        report.mails,
        vec!["ada@example.com".to_owned()],
        "{store}: one welcome mail, the committed user's"
    );
    let welcome: Vec<_> = report
        .runs
        .iter()
        .filter(|run| run.kind == "welcome:send")
        .collect();
    assert_eq!(
        welcome.len(),
        1,
        "{store}: the rolled-back sign-up enqueued nothing"
    );
    assert_eq!(
        welcome[0].status,
        RunStatus::Completed,
        "{store}: the mail's run completed"
    );
    assert_eq!(
        report.batches,
        (0..10).collect::<Vec<u32>>(),
        "{store}: every batch imported once, in order, across the interruption"
    );
    let import = report
        .runs
        .iter()
        .find(|run| run.kind == "import:bulk")
        .expect("the import's run");
    assert_eq!(
        import.status,
        RunStatus::Completed,
        "{store}: the import completed"
    );
    assert_eq!(
        import.attempts, 1,
        "{store}: the interruption spent one attempt"
    );
}

#[tokio::test]
async fn the_application_on_sqlite_enqueues_in_its_own_transaction_and_resumes_its_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = run_app(&Database::Sqlite(dir.path().join("app.db")))
        .await
        .expect("the application runs on SQLite");
    check_report(&report, "SQLite");
}

#[tokio::test]
async fn the_same_application_on_postgres_with_its_own_pool() {
    let base = std::env::var("FRONTA_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let name = format!(
        "fronta_test_{}_examples_{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_secs())
            .unwrap_or(0),
        std::process::id()
    );
    let mut admin = sqlx::PgConnection::connect(&base).await.unwrap_or_else(|err| {
        panic!("cannot reach the Postgres test server at {base}: {err} (set FRONTA_TEST_DATABASE_URL)")
    });
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create the example's database");
    let url = match base.rfind('/') {
        Some(at) if base[..at].ends_with(|c: char| c != '/') => format!("{}/{name}", &base[..at]),
        _ => format!("{base}/{name}"),
    };
    let report = run_app(&Database::Postgres(url)).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .expect("drop the example's database");
    check_report(
        &report.expect("the application runs on Postgres"),
        "Postgres",
    );
}

#[tokio::test]
async fn a_payload_that_does_not_decode_is_refused_at_enqueue_and_fails_its_run_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Arc::new(SqliteStore::open(SqliteConfig::new(dir.path().join("bad.db"))).expect("open"));
    let effects = Effects::default();
    let registry = Arc::new(registry(&effects).expect("registry"));
    let dispatcher = Dispatcher::from_registry(store.clone(), &registry);

    let refused = dispatcher
        .enqueue(EnqueueRequest::new(
            "welcome:send",
            serde_json::json!({"user": 7}),
            3,
        ))
        .await
        .expect_err("a payload without the type's fields is refused");
    match &refused {
        EngineError::Payload { kind, reason } => {
            assert_eq!(kind, "welcome:send", "the error names the kind");
            assert!(
                reason.contains("missing field `user_id`"),
                "serde's message: {reason}"
            );
        }
        other => panic!("a payload error, got {other:?}"),
    }
    assert!(
        store
            .run_list(RunFilter::default())
            .await
            .expect("list")
            .is_empty(),
        "nothing was written"
    );

    // A payload written without the check, as an older version of the type would have.
    let unchecked = Dispatcher::new(store.clone(), ["welcome:send"]);
    unchecked
        .enqueue(EnqueueRequest::new(
            "welcome:send",
            serde_json::json!({"user": 7}),
            3,
        ))
        .await
        .expect("enqueued without a check");
    let config = WorkerConfig {
        until_idle: true,
        poll_interval: Duration::from_millis(20),
        ..WorkerConfig::default()
    };
    Worker::new(store.clone(), registry, config)
        .expect("worker")
        .run(CancellationToken::new())
        .await
        .expect("the worker drains");
    let runs = store.run_list(RunFilter::default()).await.expect("list");
    assert_eq!(runs.len(), 1, "one run");
    assert_eq!(
        runs[0].status,
        RunStatus::Failed,
        "the undecodable run failed"
    );
    assert_eq!(runs[0].attempts, 0, "and was not retried");
    let error = runs[0].last_error.as_deref().unwrap_or_default();
    assert!(
        error.contains("welcome:send") && error.contains("missing field `user_id`"),
        "its error names the kind and serde's message: {error:?}"
    );
    assert!(
        effects.mails.lock().expect("mails").is_empty(),
        "no mail was sent"
    );
}
