//! Bulk actions (`fronta_automation::bulk`) against a store: a walk acts on every match of
//! its tenant, page by page, and a page replayed after a crash (the checkpoint before it)
//! acts on no run a second time — for a retry even when the run failed again since, for a
//! cancel whether the run was waiting or running.

use std::time::Duration;

use std::sync::Arc;

use fronta_automation::bulk::{
    BULK_KIND, BulkAction, BulkFilter, BulkPayload, BulkProgress, Phase, Walk, execute, step,
};
use fronta_automation::executor::AUTOMATION_KIND;
use fronta_automation::run_search::RunSearch;
use fronta_engine::registry::{Checkpointer, StopReason, StopSignal};
use fronta_engine::store::CheckpointParams;
use fronta_engine::{
    Dispatcher, EnqueueRequest, Enqueued, FinishAction, Outcome, Run, RunContext, RunId, RunStatus,
    RunStore,
};

use crate::StoreFactory;
use crate::support::{Env, LEASE, params};

const BULK: &str = BULK_KIND;

fn dispatcher(env: &Env) -> Dispatcher {
    Dispatcher::new(env.store.clone(), [AUTOMATION_KIND, BULK])
}

async fn enqueue(dispatcher: &Dispatcher, kind: &str, tenant: &str) -> RunId {
    inserted(
        dispatcher,
        EnqueueRequest::new(kind, serde_json::json!({}), 3).tenant(tenant),
    )
    .await
}

async fn enqueue_keyed(dispatcher: &Dispatcher, key: &str) -> RunId {
    let request = EnqueueRequest::new(AUTOMATION_KIND, serde_json::json!({}), 3)
        .tenant("acme")
        .unique_key(key);
    inserted(dispatcher, request).await
}

async fn inserted(dispatcher: &Dispatcher, request: EnqueueRequest) -> RunId {
    match dispatcher.enqueue(request).await.expect("enqueue") {
        Enqueued::Inserted(id) => id,
        other => panic!("a new run, got {other:?}"),
    }
}

/// Claims every due run and fails it.
async fn fail_all(env: &Env) {
    let batch = env.claim(params(100)).await;
    for claimed in batch.claimed {
        env.finish(
            claimed.run.id,
            claimed.owner,
            FinishAction::Fail {
                error: "the carrier said no".into(),
            },
        )
        .await;
    }
}

async fn status(store: &dyn RunStore, id: RunId) -> RunStatus {
    store
        .run_get(id)
        .await
        .expect("run_get")
        .expect("the run")
        .status
}

/// Walks from `progress` until the walk is over, one page at a time.
async fn walk_to_the_end(
    store: &dyn RunStore,
    walk: &Walk<'_>,
    mut progress: BulkProgress,
) -> BulkProgress {
    for _ in 0..100 {
        let (next, finished) = step(store, walk, progress).await.expect("a page");
        progress = next;
        if finished {
            return progress;
        }
    }
    panic!("the walk did not end in 100 pages: {progress:?}");
}

pub async fn a_bulk_retry_replayed_after_a_crash_retries_no_run_twice(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let dispatcher = dispatcher(&env);
    let mut ours = Vec::new();
    for _ in 0..5 {
        ours.push(enqueue(&dispatcher, AUTOMATION_KIND, "acme").await);
        env.advance(Duration::from_millis(5));
    }
    let theirs = enqueue(&dispatcher, AUTOMATION_KIND, "other").await;
    fail_all(&env).await;
    env.advance(Duration::from_secs(1));
    let job: Run = env.get(enqueue(&dispatcher, BULK, "acme").await).await;
    env.advance(Duration::from_secs(1));

    let search = RunSearch {
        statuses: vec![RunStatus::Failed],
        ..RunSearch::default()
    };
    let walk = Walk {
        tenant: "acme",
        start: job.id,
        asked_at: job.created_at,
        action: BulkAction::Retry,
        search: &search,
        batch: 3,
    };
    let mut counting = BulkProgress::default();
    let acting = loop {
        let (next, finished) = step(env.store.as_ref(), &walk, counting)
            .await
            .expect("a page");
        assert!(!finished, "a count is never the end");
        if next.phase == Phase::Acting {
            break next;
        }
        counting = next;
    };
    assert_eq!(acting.total, 5, "the count: our five failed runs");
    assert!(
        acting.cursor.is_none(),
        "the acting walk starts at the job again"
    );

    // The first page acts on the three newest, then the process dies before its checkpoint.
    let (first, finished) = step(env.store.as_ref(), &walk, acting.clone())
        .await
        .expect("a page");
    assert!(!finished);
    assert_eq!((first.matched, first.acted), (3, 3), "{first:?}");
    for id in &ours[2..] {
        assert_eq!(status(env.store.as_ref(), *id).await, RunStatus::Queued);
    }
    // They run and fail again before the walk resumes.
    env.advance(Duration::from_secs(1));
    fail_all(&env).await;
    env.advance(Duration::from_secs(1));

    // The replay from the checkpoint before that page, to the end.
    let replayed = walk_to_the_end(env.store.as_ref(), &walk, acting).await;
    assert_eq!(replayed.phase, Phase::Done);
    assert_eq!(
        (replayed.matched, replayed.acted, replayed.skipped),
        (5, 2, 3),
        "the replayed page's runs are skipped, the rest acted on: {replayed:?}"
    );
    assert_eq!(
        replayed.skips,
        vec![("changed since the bulk retry was asked".to_owned(), 3)],
        "{replayed:?}"
    );
    for id in &ours[2..] {
        assert_eq!(
            status(env.store.as_ref(), *id).await,
            RunStatus::Failed,
            "retried once, failed again, not retried a second time"
        );
    }
    for id in &ours[..2] {
        assert_eq!(status(env.store.as_ref(), *id).await, RunStatus::Queued);
    }
    assert_eq!(
        status(env.store.as_ref(), theirs).await,
        RunStatus::Failed,
        "another tenant's run is not touched"
    );
}

pub async fn a_bulk_cancel_replayed_after_a_crash_cancels_each_run_once(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let dispatcher = dispatcher(&env);
    let finished_id = enqueue(&dispatcher, AUTOMATION_KIND, "acme").await;
    let claimed = env.claim_one().await;
    assert_eq!(claimed.run.id, finished_id);
    env.finish(
        finished_id,
        claimed.owner,
        FinishAction::Complete { result: None },
    )
    .await;
    env.advance(Duration::from_millis(5));
    let running = enqueue(&dispatcher, AUTOMATION_KIND, "acme").await;
    let claimed = env.claim_one().await;
    assert_eq!(claimed.run.id, running);
    env.advance(Duration::from_millis(5));
    let waiting = enqueue(&dispatcher, AUTOMATION_KIND, "acme").await;
    env.advance(Duration::from_secs(1));
    let job = env.get(enqueue(&dispatcher, BULK, "acme").await).await;
    env.advance(Duration::from_millis(5));
    let after = enqueue(&dispatcher, AUTOMATION_KIND, "acme").await;

    let search = RunSearch::default();
    let walk = Walk {
        tenant: "acme",
        start: job.id,
        asked_at: job.created_at,
        action: BulkAction::Cancel,
        search: &search,
        batch: 10,
    };
    let acting = BulkProgress {
        phase: Phase::Acting,
        total: 3,
        ..BulkProgress::default()
    };
    let done = walk_to_the_end(env.store.as_ref(), &walk, acting.clone()).await;
    assert_eq!(
        (done.matched, done.acted, done.skipped),
        (3, 2, 1),
        "{done:?}"
    );
    assert_eq!(done.skips, vec![("already completed".to_owned(), 1)]);
    assert_eq!(
        status(env.store.as_ref(), waiting).await,
        RunStatus::Cancelled
    );
    let asked = env.get(running).await;
    assert!(
        asked.status == RunStatus::Running && asked.cancel_requested,
        "a running run is asked to stop: {asked:?}"
    );
    assert_eq!(
        status(env.store.as_ref(), after).await,
        RunStatus::Queued,
        "a run enqueued after the bulk action was asked is not part of it"
    );
    assert_eq!(
        status(env.store.as_ref(), finished_id).await,
        RunStatus::Completed
    );

    let replayed = walk_to_the_end(env.store.as_ref(), &walk, acting).await;
    assert_eq!(
        (replayed.acted, replayed.skipped),
        (0, 3),
        "nothing twice: {replayed:?}"
    );
}

pub async fn batched_retries_and_cancels_answer_each_run_and_a_conflict_fails_alone(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let dispatcher = dispatcher(&env);
    let keyed = enqueue_keyed(&dispatcher, "order-7").await;
    let plain = enqueue(&dispatcher, AUTOMATION_KIND, "acme").await;
    fail_all(&env).await;
    // Another live run now holds the failed run's key.
    // (The key is free once its run failed.)
    let holder = enqueue_keyed(&dispatcher, "order-7").await;
    let unknown = RunId::new_v7();
    let replies = env
        .store
        .run_retry_many(vec![keyed, unknown, plain])
        .await
        .expect("the batch");
    assert!(
        matches!(replies[0], Err(fronta_engine::StoreError::Conflict(_))),
        "{replies:?}"
    );
    assert_eq!(replies[1], Err(fronta_engine::StoreError::NotFound));
    assert_eq!(replies[2], Ok(fronta_engine::RetryReply::Requeued));
    assert_eq!(status(env.store.as_ref(), keyed).await, RunStatus::Failed);
    assert_eq!(status(env.store.as_ref(), plain).await, RunStatus::Queued);

    let replies = env
        .store
        .run_request_cancel_many(vec![plain, unknown, keyed, holder])
        .await
        .expect("the batch");
    assert_eq!(
        replies,
        vec![
            Ok(fronta_engine::store::CancelReply::Cancelled),
            Err(fronta_engine::StoreError::NotFound),
            Ok(fronta_engine::store::CancelReply::AlreadyFinished(
                RunStatus::Failed
            )),
            Ok(fronta_engine::store::CancelReply::Cancelled),
        ]
    );
    assert_eq!(
        status(env.store.as_ref(), holder).await,
        RunStatus::Cancelled
    );
}

pub async fn a_cancelled_bulk_action_stops_between_two_pages_and_keeps_what_it_did(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let dispatcher = dispatcher(&env);
    let mut waiting = Vec::new();
    for _ in 0..10 {
        let request = EnqueueRequest::new(AUTOMATION_KIND, serde_json::json!({}), 3)
            .tenant("acme")
            .delay(std::time::Duration::from_secs(3600));
        waiting.push(inserted(&dispatcher, request).await);
        env.advance(Duration::from_millis(5));
    }
    let payload = BulkPayload {
        action: BulkAction::Cancel,
        filter: BulkFilter {
            status: Some("scheduled".into()),
            ..BulkFilter::default()
        },
        by: "test".into(),
    };
    let request = EnqueueRequest::new(BULK, serde_json::to_value(&payload).expect("a payload"), 3)
        .tenant("acme");
    let job = inserted(&dispatcher, request).await;
    let claimed = env.claim_one().await;
    assert_eq!(claimed.run.id, job, "the bulk action is the only run due");

    // Its count and its first page of three, saved as its checkpoint.
    let search = payload.filter.search().expect("a search");
    let walk = Walk {
        tenant: "acme",
        start: job,
        asked_at: claimed.run.created_at,
        action: BulkAction::Cancel,
        search: &search,
        batch: 3,
    };
    let mut progress = BulkProgress::default();
    while progress.phase == Phase::Counting {
        progress = step(env.store.as_ref(), &walk, progress)
            .await
            .expect("a page")
            .0;
    }
    let (progress, _) = step(env.store.as_ref(), &walk, progress)
        .await
        .expect("a page");
    assert_eq!((progress.total, progress.acted), (10, 3), "{progress:?}");
    env.store
        .run_checkpoint(CheckpointParams {
            id: job,
            owner: claimed.owner,
            state: serde_json::to_vec(&progress).expect("progress"),
            lease: LEASE,
        })
        .await
        .expect("the checkpoint");

    // Cancelled before its next page: it stops there, saying how far it got.
    let signal = StopSignal::new();
    signal.stop(StopReason::Cancel);
    let ctx = RunContext {
        run: Arc::new(env.get(job).await),
        signal: signal.clone(),
        checkpointer: Checkpointer::new(env.store.clone(), job, claimed.owner, LEASE, signal),
        dispatcher: dispatcher.clone(),
        worker: "test".into(),
    };
    let outcome = execute(env.store.clone(), 3, ctx).await;
    assert_eq!(
        outcome,
        Outcome::Fail("cancelled after 3 of 10 matches (3 acted on)".into())
    );
    let mut cancelled = 0;
    for id in &waiting {
        match status(env.store.as_ref(), *id).await {
            RunStatus::Cancelled => cancelled += 1,
            RunStatus::Scheduled => {}
            other => panic!("run {id} is {other}"),
        }
    }
    assert_eq!(cancelled, 3, "what it did stays done, nothing more");
}
