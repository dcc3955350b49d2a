//! The handler's zone on Postgres (`fronta_engine::guard`, seed 002: a handler may not
//! hold a transaction across slow work): through a real `Worker`, a handler that calls
//! `PgStore::begin` is refused with an error naming the call and the run, and its short
//! writes through the store's own methods still work; outside a handler `begin` works.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fronta_engine::{
    Dispatcher, EnqueueRequest, KindConfig, Outcome, Registry, RunContext, RunFilter, RunStatus,
    RunStore, Worker, WorkerConfig,
};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_handler_cannot_begin_a_transaction_on_the_store_but_its_caller_can() {
    let db = support::TestDb::create().await;
    let store = db.store(None).await;
    let seen: Arc<Mutex<Option<String>>> = Arc::default();
    let mut registry = Registry::new();
    let (handler_store, handler_seen) = (store.clone(), seen.clone());
    registry
        .register(
            "tx:inside",
            KindConfig::fire_and_forget(Duration::from_secs(30)),
            move |ctx: RunContext| {
                let (store, seen) = (handler_store.clone(), handler_seen.clone());
                async move {
                    let answer = match store.begin().await {
                        Ok(_) => "began".to_owned(),
                        Err(err) => err.to_string(),
                    };
                    *seen.lock().expect("seen") = Some(answer);
                    // The store's own short writes stay allowed.
                    match ctx.checkpointer.save(b"1".to_vec()).await {
                        Ok(()) => Outcome::done(),
                        Err(_) => Outcome::Fail("checkpoint refused".into()),
                    }
                }
            },
        )
        .expect("register");
    let registry = Arc::new(registry);
    let store: Arc<dyn RunStore> = Arc::new(store);
    Dispatcher::from_registry(store.clone(), &registry)
        .enqueue(EnqueueRequest::new("tx:inside", serde_json::json!({}), 0))
        .await
        .expect("enqueue");
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

    let answer = seen.lock().expect("seen").clone().expect("the handler ran");
    assert!(
        answer.contains("PgStore::begin inside the handler of run")
            && answer.contains("may not begin a transaction"),
        "begin refused inside the handler, saying why: {answer}"
    );
    let runs = store.run_list(RunFilter::default()).await.expect("list");
    assert_eq!(
        runs[0].status,
        RunStatus::Completed,
        "its checkpoint and finish worked"
    );

    let outside = db.store(None).await;
    let tx = outside
        .begin()
        .await
        .expect("outside a handler, begin works");
    tx.rollback().await.expect("rollback");
}
