//! Store-level cases: the `RunStore` port called directly, one case per line of its
//! `# Contract` — enqueue and unique keys, claim (owner tokens, leases, limits, order,
//! fairness, reclaims, crash loops), owner-checked writes (fencing, heartbeat, checkpoint,
//! finish actions), two-phase cancel, and the reads. Time moves only by the manual clock.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use fronta_engine::{
    CancelReply, CheckpointParams, ClaimedRun, EngineError, EnqueueRequest, Enqueued, Finish,
    FinishAction, FinishReply, HandOff, HeartbeatReply, LeaseRenewal, OwnerToken, RetryReply,
    RunFilter, RunId, RunStats, RunStatus, StoreError, Trigger, store::Prune,
};

use crate::StoreFactory;
use crate::support::{
    DURABLE_LEASE, Env, KIND_A, KIND_B, KIND_DURABLE, LEASE, PATIENCE, after, params,
    params_with_durable, request,
};

const MS: Duration = Duration::from_millis(1);

/// One of every finish action, for the fencing cases.
fn every_action() -> Vec<FinishAction> {
    vec![
        FinishAction::Complete {
            result: Some(serde_json::json!({ "late": true })),
        },
        FinishAction::Fail {
            error: "late failure".into(),
        },
        FinishAction::Retry {
            delay: Duration::from_secs(30),
            error: "late retry".into(),
        },
        FinishAction::Snooze {
            delay: Duration::from_secs(30),
        },
        FinishAction::Park {
            delay: Duration::from_secs(30),
            error: "late park".into(),
        },
        FinishAction::Cancel,
        FinishAction::Release,
        FinishAction::Suppress {
            reason: "late suppress".into(),
        },
    ]
}

// ---------------------------------------------------------------------------------------
// Enqueue
// ---------------------------------------------------------------------------------------

/// A new run is pending with every counter at zero, due at `run_at`, else now + `delay`,
/// else now; it reads back as written; `run_stats` counts it as queued or scheduled by
/// the store's clock.
pub async fn enqueue_inserts_pending_runs_due_now_or_later(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let t0 = env.now();
    let prepare = |request: EnqueueRequest| {
        env.dispatcher
            .prepare(request)
            .expect("a valid request is prepared")
    };
    let due_now = prepare(
        request(KIND_A)
            .tenant("acme")
            .priority(3)
            .trigger(Trigger::Webhook)
            .unique_key("order-1"),
    );
    let delayed = prepare(request(KIND_B).delay(Duration::from_secs(60)));
    let mut at_request = request(KIND_A);
    at_request.run_at = Some(after(t0, Duration::from_secs(3600)));
    let at_time = prepare(at_request);
    let mut both_request = request(KIND_A).delay(Duration::from_secs(10));
    both_request.run_at = Some(after(t0, Duration::from_secs(20)));
    let both = prepare(both_request);

    let answers = env
        .store
        .run_enqueue_many(vec![
            due_now.clone(),
            delayed.clone(),
            at_time.clone(),
            both.clone(),
        ])
        .await
        .expect("enqueue succeeds");
    assert_eq!(
        answers,
        vec![
            Enqueued::Inserted(due_now.id),
            Enqueued::Inserted(delayed.id),
            Enqueued::Inserted(at_time.id),
            Enqueued::Inserted(both.id),
        ],
        "every run is inserted under its own id, answered in input order"
    );

    let expectations = [
        (&due_now, RunStatus::Queued, t0, "due now"),
        (
            &delayed,
            RunStatus::Scheduled,
            after(t0, Duration::from_secs(60)),
            "delay 60 s",
        ),
        (
            &at_time,
            RunStatus::Scheduled,
            after(t0, Duration::from_secs(3600)),
            "run_at in an hour",
        ),
        (
            &both,
            RunStatus::Scheduled,
            after(t0, Duration::from_secs(20)),
            "run_at wins over delay",
        ),
    ];
    for (new, status, run_at, label) in expectations {
        let run = env.get(new.id).await;
        assert_eq!(run.status, status, "{label}: status");
        assert_eq!(run.run_at, run_at, "{label}: due time");
        assert_eq!(run.tenant, new.tenant, "{label}: tenant");
        assert_eq!(run.kind, new.kind, "{label}: kind");
        assert_eq!(run.payload, new.payload, "{label}: payload");
        assert_eq!(run.trigger, new.trigger, "{label}: trigger");
        assert_eq!(run.unique_key, new.unique_key, "{label}: unique key");
        assert_eq!(run.priority, new.priority, "{label}: priority");
        assert_eq!(run.max_retries, new.max_retries, "{label}: max_retries");
        assert_eq!(
            (run.attempts, run.reclaims, run.parks),
            (0, 0, 0),
            "{label}: a new run has spent nothing"
        );
        assert_eq!(run.state, None, "{label}: no checkpoint yet");
        assert_eq!(run.locked_by, None, "{label}: nobody owns a new run");
        assert!(!run.cancel_requested, "{label}: no cancel requested");
        assert_eq!(run.created_at, t0, "{label}: created by the store's clock");
        assert_eq!(run.started_at, None, "{label}: not started");
        assert_eq!(
            run.finished_at(),
            None,
            "{label}: no terminal timestamp on a new run"
        );
        assert_eq!(run.last_error, None, "{label}: no error yet");
        assert_eq!(run.result, None, "{label}: no result yet");
    }
    assert_eq!(
        env.get(delayed.id).await.tenant,
        fronta_engine::model::DEFAULT_TENANT,
        "a run enqueued without a tenant belongs to the default tenant"
    );

    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(
        (stats.queued, stats.scheduled, stats.total()),
        (1, 3, 4),
        "stats count one queued and three scheduled runs: {stats:?}"
    );
    assert_eq!(
        (stats.attempts, stats.reclaims, stats.parks),
        (0, 0, 0),
        "nothing spent yet: {stats:?}"
    );

    env.advance(Duration::from_secs(60));
    assert_eq!(
        env.get(delayed.id).await.status,
        RunStatus::Queued,
        "once the clock reaches its run_at a scheduled run reads as queued"
    );
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(
        (stats.queued, stats.scheduled),
        (3, 1),
        "stats judge scheduled vs queued by the store's clock: {stats:?}"
    );
    assert_eq!(
        env.store
            .run_get(RunId::new_v7())
            .await
            .expect("run_get succeeds"),
        None,
        "an unknown id reads as None"
    );
}

/// `run_enqueue_many` answers one entry per input, in input order, mixing inserts with
/// runs whose unique key is taken.
pub async fn enqueue_many_answers_in_input_order(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let holder = env.enqueue(request(KIND_A).unique_key("taken")).await;
    let batch: Vec<_> = (0..10)
        .map(|index| {
            let kind = if index % 2 == 0 { KIND_A } else { KIND_B };
            let mut request = request(kind).tenant(format!("tenant-{}", index % 3));
            if index == 4 {
                // The holder's tenant: unique keys are scoped to a tenant.
                request = crate::support::request(kind).unique_key("taken");
            }
            env.dispatcher.prepare(request).expect("valid request")
        })
        .collect();
    let answers = env
        .store
        .run_enqueue_many(batch.clone())
        .await
        .expect("enqueue succeeds");
    let expected: Vec<Enqueued> = batch
        .iter()
        .enumerate()
        .map(|(index, new)| {
            if index == 4 {
                Enqueued::Existing(holder)
            } else {
                Enqueued::Inserted(new.id)
            }
        })
        .collect();
    assert_eq!(
        answers, expected,
        "one answer per run, in input order; the taken key answers Existing"
    );
    for (index, new) in batch.iter().enumerate() {
        let stored = env.store.run_get(new.id).await.expect("run_get succeeds");
        if index == 4 {
            assert_eq!(stored, None, "the run with a taken key was not inserted");
        } else {
            let stored = stored.unwrap_or_else(|| panic!("run {index} was inserted"));
            assert_eq!(
                (stored.kind.as_str(), stored.tenant.as_str()),
                (new.kind.as_str(), new.tenant.as_str()),
                "run {index} reads back as enqueued"
            );
        }
    }
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(
        stats.total(),
        10,
        "the holder plus nine new runs: {stats:?}"
    );
}

/// An enqueue wakes the store's enqueue signal (after its commit), so idle workers need
/// not wait for their poll.
pub async fn enqueue_wakes_the_enqueue_signal(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let signal = env.store.enqueue_signal();
    let notified = signal.notified();
    let mut notified = std::pin::pin!(notified);
    notified.as_mut().enable();
    let id = env.enqueue_a().await;
    tokio::time::timeout(PATIENCE, notified)
        .await
        .expect("the enqueue signal fires after an enqueue");
    assert_eq!(
        env.get(id).await.status,
        RunStatus::Queued,
        "the run is visible to whoever the signal woke"
    );
}

/// A run with a delay or a `run_at` is not claimed before its time, and is claimed once
/// the clock reaches it (`run_at <= now` is due).
pub async fn delayed_run_is_claimed_only_once_its_time_has_come(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let t0 = env.now();
    let delayed = env
        .enqueue(request(KIND_A).delay(Duration::from_secs(10)))
        .await;
    let mut at_request = request(KIND_A);
    at_request.run_at = Some(after(t0, Duration::from_secs(20)));
    let at_time = env.enqueue(at_request).await;

    assert!(
        env.claim(params(10)).await.claimed.is_empty(),
        "nothing is due at enqueue time"
    );
    env.advance(Duration::from_secs(10) - MS);
    assert!(
        env.claim(params(10)).await.claimed.is_empty(),
        "a run is not claimed a millisecond before its run_at"
    );
    assert_eq!(
        env.get(delayed).await.status,
        RunStatus::Scheduled,
        "still scheduled a millisecond before its run_at"
    );
    env.advance(MS);
    let batch = env.claim(params(10)).await;
    let ids: Vec<RunId> = batch.claimed.iter().map(|claimed| claimed.run.id).collect();
    assert_eq!(
        ids,
        vec![delayed],
        "the delayed run is claimed at its run_at, the later one is not"
    );
    env.advance(Duration::from_secs(10) - MS);
    assert!(
        env.claim(params(10)).await.claimed.is_empty(),
        "a run with an absolute run_at is not claimed before it"
    );
    env.advance(MS);
    let batch = env.claim(params(10)).await;
    let ids: Vec<RunId> = batch.claimed.iter().map(|claimed| claimed.run.id).collect();
    assert_eq!(
        ids,
        vec![at_time],
        "the run is claimed once the clock reaches its run_at"
    );
}

/// While a run holding a unique key is pending (scheduled or queued) or running, an
/// enqueue with the same key inserts nothing and answers `Existing(that run)`.
pub async fn unique_key_held_by_a_pending_or_running_run_returns_it(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let first = env
        .enqueue(
            request(KIND_A)
                .unique_key("order-7")
                .delay(Duration::from_secs(30)),
        )
        .await;
    let again = env
        .dispatcher
        .enqueue(request(KIND_B).unique_key("order-7"))
        .await
        .expect("enqueue succeeds");
    assert_eq!(
        again,
        Enqueued::Existing(first),
        "a scheduled run holds its key"
    );

    env.advance(Duration::from_secs(30));
    assert_eq!(
        env.dispatcher
            .enqueue(request(KIND_A).unique_key("order-7"))
            .await
            .expect("enqueue succeeds"),
        Enqueued::Existing(first),
        "a queued run holds its key"
    );

    let claimed = env.claim_one().await;
    assert_eq!(claimed.run.id, first, "the keyed run is claimed");
    assert_eq!(
        env.dispatcher
            .enqueue(request(KIND_A).unique_key("order-7"))
            .await
            .expect("enqueue succeeds"),
        Enqueued::Existing(first),
        "a running run holds its key"
    );

    let other = env
        .dispatcher
        .enqueue(request(KIND_A).unique_key("order-8"))
        .await
        .expect("enqueue succeeds");
    assert!(
        matches!(other, Enqueued::Inserted(id) if id != first),
        "another key is inserted: {other:?}"
    );
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(
        stats.total(),
        2,
        "the repeated enqueues inserted nothing: {stats:?}"
    );
}

/// A terminal run — completed, failed or cancelled — frees its unique key: the next
/// enqueue with it inserts a new run.
pub async fn unique_key_is_freed_when_its_run_ends(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let keyed = || request(KIND_A).unique_key("nightly-report");

    let completed = env.enqueue(keyed()).await;
    let claimed = env.claim_one().await;
    assert_eq!(
        env.finish(
            completed,
            claimed.owner,
            FinishAction::Complete { result: None }
        )
        .await,
        FinishReply::Applied {
            id: completed,
            status: RunStatus::Completed
        },
        "the first run completes"
    );

    let failed = env.enqueue(keyed()).await;
    assert_ne!(failed, completed, "a completed run freed its key");
    let claimed = env.claim_one().await;
    assert_eq!(
        env.finish(
            failed,
            claimed.owner,
            FinishAction::Fail {
                error: "broken".into()
            }
        )
        .await,
        FinishReply::Applied {
            id: failed,
            status: RunStatus::Failed
        },
        "the second run fails"
    );

    let cancelled = env.enqueue(keyed()).await;
    assert_ne!(cancelled, failed, "a failed run freed its key");
    assert_eq!(
        env.store
            .run_request_cancel(cancelled)
            .await
            .expect("cancel succeeds"),
        CancelReply::Cancelled,
        "the third run, pending, is cancelled at once"
    );

    let fourth = env.enqueue(keyed()).await;
    assert_ne!(fourth, cancelled, "a cancelled run freed its key");
    assert_eq!(
        env.dispatcher
            .enqueue(keyed())
            .await
            .expect("enqueue succeeds"),
        Enqueued::Existing(fourth),
        "the new pending run holds the key again"
    );
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(stats.total(), 4, "four runs were inserted: {stats:?}");
}

/// Two runs with one unique key in one enqueue batch: the first is inserted, the second
/// answers `Existing(first)` (one non-terminal run per key holds inside a batch too).
pub async fn unique_key_repeated_within_one_batch_inserts_once(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let first = env
        .dispatcher
        .prepare(request(KIND_A).unique_key("same"))
        .expect("valid request");
    let second = env
        .dispatcher
        .prepare(request(KIND_A).unique_key("same"))
        .expect("valid request");
    let answers = env
        .store
        .run_enqueue_many(vec![first.clone(), second.clone()])
        .await
        .expect("enqueue succeeds");
    assert_eq!(
        answers,
        vec![Enqueued::Inserted(first.id), Enqueued::Existing(first.id)],
        "the key is taken by the first run of the batch"
    );
    assert_eq!(
        env.store
            .run_get(second.id)
            .await
            .expect("run_get succeeds"),
        None,
        "the second run was not inserted"
    );
}

/// The dispatcher refuses an unknown kind and a negative `max_retries` with their own
/// error variants, and a batch holding either writes nothing at all.
pub async fn dispatcher_refuses_unknown_kind_and_negative_max_retries_and_writes_nothing(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let err = env
        .dispatcher
        .enqueue(request("kind-nobody-registered"))
        .await
        .expect_err("an unknown kind is refused");
    assert_eq!(
        err,
        EngineError::UnknownKind {
            kind: "kind-nobody-registered".into()
        },
        "unknown kind is its own error"
    );
    let err = env
        .dispatcher
        .enqueue(EnqueueRequest::new(KIND_A, serde_json::json!({}), -1))
        .await
        .expect_err("a negative max_retries is refused");
    assert_eq!(
        err,
        EngineError::NegativeMaxRetries(-1),
        "negative max_retries is its own error"
    );
    let err = env
        .dispatcher
        .enqueue_many(vec![
            request(KIND_A),
            request("kind-nobody-registered"),
            request(KIND_B),
        ])
        .await
        .expect_err("a batch with an unknown kind is refused");
    assert!(
        matches!(err, EngineError::UnknownKind { .. }),
        "the batch names the unknown kind: {err:?}"
    );
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(stats.total(), 0, "nothing was written: {stats:?}");
    let listed = env
        .store
        .run_list(RunFilter::default())
        .await
        .expect("run_list succeeds");
    assert!(listed.is_empty(), "no run is listed: {listed:?}");
}

// ---------------------------------------------------------------------------------------
// Claim
// ---------------------------------------------------------------------------------------

/// A claim hands each run a fresh owner token and sets `running`,
/// `locked_until = now + lease of its kind`, `heartbeat_at = now` and `started_at`.
pub async fn claim_sets_owner_status_lease_and_started_at(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let plain = env.enqueue_a().await;
    let durable = env.enqueue(request(KIND_DURABLE)).await;
    env.advance(Duration::from_secs(5));
    let t1 = env.now();

    let batch = env.claim(params_with_durable(10)).await;
    assert!(
        batch.crash_looped.is_empty() && batch.cancelled.is_empty(),
        "nothing crash-looped or cancelled: {batch:?}"
    );
    let by_id: HashMap<RunId, &ClaimedRun> = batch
        .claimed
        .iter()
        .map(|claimed| (claimed.run.id, claimed))
        .collect();
    assert_eq!(by_id.len(), 2, "both due runs are claimed: {batch:?}");
    for (id, lease, label) in [
        (plain, LEASE, "default lease"),
        (durable, DURABLE_LEASE, "per-kind lease"),
    ] {
        let claimed = by_id
            .get(&id)
            .unwrap_or_else(|| panic!("{label}: run claimed"));
        assert!(!claimed.reclaimed, "{label}: a first claim is no reclaim");
        assert_eq!(
            claimed.run.status,
            RunStatus::Running,
            "{label}: claimed run is running"
        );
        assert_eq!(
            claimed.run.locked_until,
            Some(after(t1, lease)),
            "{label}: locked until now + lease"
        );
        let stored = env.get(id).await;
        assert_eq!(
            stored.status,
            RunStatus::Running,
            "{label}: stored as running"
        );
        assert_eq!(
            stored.locked_by,
            Some(claimed.owner),
            "{label}: the row holds the claim's token"
        );
        assert_eq!(
            stored.locked_until,
            Some(after(t1, lease)),
            "{label}: stored lease"
        );
        assert_eq!(stored.heartbeat_at, Some(t1), "{label}: heartbeat_at = now");
        assert_eq!(stored.started_at, Some(t1), "{label}: started_at = now");
        assert_eq!(
            (stored.attempts, stored.reclaims, stored.parks),
            (0, 0, 0),
            "{label}: a claim spends nothing"
        );
    }
    assert_ne!(
        by_id[&plain].owner, by_id[&durable].owner,
        "every claim gets its own token"
    );
    assert!(
        env.claim(params_with_durable(10)).await.claimed.is_empty(),
        "running runs with a live lease are not claimed again"
    );
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(stats.running, 2, "stats count two running: {stats:?}");
}

/// A claim takes at most `limit` runs (0 takes none) and never the same run twice.
pub async fn claim_respects_its_limit(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    env.dispatcher
        .enqueue_many((0..10).map(|_| request(KIND_A)).collect())
        .await
        .expect("enqueue succeeds");
    let mut seen = HashSet::new();
    for (limit, expected) in [(0, 0), (3, 3), (4, 4), (10, 3), (10, 0)] {
        let batch = env.claim(params(limit)).await;
        assert_eq!(
            batch.claimed.len(),
            expected,
            "a claim with limit {limit} takes {expected} of what is left"
        );
        for claimed in batch.claimed {
            assert!(
                seen.insert(claimed.run.id),
                "run {} claimed twice",
                claimed.run.id
            );
        }
    }
    assert_eq!(seen.len(), 10, "every run was claimed once");
}

/// Among due runs of one tenant, a claim takes higher priority first, then the earlier
/// `run_at`.
pub async fn claim_takes_higher_priority_first_then_earlier_run_at(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let due_at_5 = env
        .enqueue(request(KIND_A).delay(Duration::from_secs(5)))
        .await;
    let due_at_2 = env
        .enqueue(request(KIND_A).delay(Duration::from_secs(2)))
        .await;
    env.advance(Duration::from_secs(10));
    let due_now = env.enqueue_a().await;
    let urgent = env.enqueue(request(KIND_A).priority(5)).await;

    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(env.claim_one().await.run.id);
    }
    assert_eq!(
        order,
        vec![urgent, due_at_2, due_at_5, due_now],
        "priority first (higher wins), then the earliest run_at"
    );
}

/// Concurrent claims on one store never hand out the same run twice; together they take
/// every run.
pub async fn concurrent_claims_never_return_the_same_run(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let total = 60;
    env.dispatcher
        .enqueue_many(
            (0..total)
                .map(|index| request(KIND_A).tenant(format!("tenant-{}", index % 4)))
                .collect(),
        )
        .await
        .expect("enqueue succeeds");
    let mut claimers = Vec::new();
    for _ in 0..4 {
        let store = env.store.clone();
        claimers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                match store.run_claim(params(4)).await {
                    Ok(batch) if batch.claimed.is_empty() => return mine,
                    Ok(batch) => mine.extend(batch.claimed.into_iter().map(|c| c.run.id)),
                    // A busy database may be retried (the contract says so).
                    Err(StoreError::Unavailable(_)) => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(err) => panic!("run_claim failed: {err}"),
                }
            }
        }));
    }
    let mut seen = HashSet::new();
    for claimer in claimers {
        for id in claimer.await.expect("claimer task ran") {
            assert!(seen.insert(id), "run {id} was claimed by two claims");
        }
    }
    assert_eq!(
        seen.len(),
        total,
        "the claimers together took every run once"
    );
}

/// Fairness: within one claim round no tenant gets a second run while another tenant
/// with due runs has none in that round — even when one tenant's runs are older and far
/// more numerous.
pub async fn claim_takes_one_run_per_tenant_before_a_second(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    env.dispatcher
        .enqueue_many((0..50).map(|_| request(KIND_A).tenant("noisy")).collect())
        .await
        .expect("enqueue succeeds");
    env.advance(Duration::from_secs(1));
    env.dispatcher
        .enqueue_many(
            ["quiet-b", "quiet-b", "quiet-c", "quiet-c"]
                .into_iter()
                .map(|tenant| request(KIND_A).tenant(tenant))
                .collect(),
        )
        .await
        .expect("enqueue succeeds");

    let count = |claimed: &[ClaimedRun]| {
        let mut per_tenant: HashMap<String, usize> = HashMap::new();
        for run in claimed {
            *per_tenant.entry(run.run.tenant.clone()).or_default() += 1;
        }
        per_tenant
    };
    let expect = |pairs: &[(&str, usize)]| -> HashMap<String, usize> {
        pairs
            .iter()
            .map(|(tenant, count)| ((*tenant).to_owned(), *count))
            .collect()
    };

    let first = env.claim(params(3)).await;
    assert_eq!(
        count(&first.claimed),
        expect(&[("noisy", 1), ("quiet-b", 1), ("quiet-c", 1)]),
        "limit 3 over three tenants takes one run of each, though the noisy tenant's 50 are older"
    );
    let second = env.claim(params(6)).await;
    assert_eq!(
        count(&second.claimed),
        expect(&[("noisy", 4), ("quiet-b", 1), ("quiet-c", 1)]),
        "limit 6: one of each tenant first, then the rest from the only tenant with more"
    );
    let third = env.claim(params(10)).await;
    assert_eq!(
        count(&third.claimed),
        expect(&[("noisy", 10)]),
        "with one tenant left, it gets the whole round"
    );
}

/// A run whose lease expired (`locked_until < now`, not `<=`) is claimed again with a
/// fresh owner token, a new lease from now, and its first `started_at` kept.
pub async fn expired_lease_is_reclaimed_with_a_fresh_owner_token(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let t0 = env.now();
    let (id, first_owner) = env.running_run().await;

    env.advance(LEASE);
    assert!(
        env.claim(params(1)).await.claimed.is_empty(),
        "at exactly locked_until the lease has not expired yet"
    );
    env.advance(MS);
    let batch = env.claim(params(1)).await;
    assert_eq!(batch.claimed.len(), 1, "the expired run is reclaimed");
    let second = &batch.claimed[0];
    assert_eq!(second.run.id, id, "the same run comes back");
    assert!(second.reclaimed, "the claim says it was a reclaim");
    assert_ne!(
        second.owner, first_owner,
        "a reclaim gets a fresh owner token"
    );
    let stored = env.get(id).await;
    assert_eq!(
        stored.locked_by,
        Some(second.owner),
        "the row holds the new token"
    );
    assert_eq!(
        stored.locked_until,
        Some(after(env.now(), LEASE)),
        "the new lease runs from now"
    );
    assert_eq!(stored.status, RunStatus::Running, "still running");
    assert_eq!(
        stored.started_at,
        Some(t0),
        "started_at keeps the first start"
    );
}

/// A reclaim counts `reclaims += 1` and leaves `attempts` as it was.
pub async fn expired_lease_is_reclaimed_with_reclaims_not_attempts(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let (id, owner) = env.running_run().await;
    assert!(
        matches!(
            env.finish(
                id,
                owner,
                FinishAction::Retry {
                    delay: Duration::ZERO,
                    error: "first try failed".into()
                }
            )
            .await,
            FinishReply::Applied { .. }
        ),
        "a retry is written"
    );
    let claimed = env.claim_one().await;
    assert!(
        !claimed.reclaimed,
        "a retried run is claimed, not reclaimed"
    );
    assert_eq!(
        (claimed.run.attempts, claimed.run.reclaims),
        (1, 0),
        "one attempt spent"
    );

    for expected_reclaims in 1..=2 {
        env.advance(LEASE + MS);
        let claimed = env.claim_one().await;
        assert!(claimed.reclaimed, "an expired lease is a reclaim");
        assert_eq!(
            claimed.run.reclaims, expected_reclaims,
            "the claimed run already counts this reclaim"
        );
        assert_eq!(claimed.run.attempts, 1, "a reclaim never spends an attempt");
        let stored = env.get(id).await;
        assert_eq!(
            (stored.attempts, stored.reclaims),
            (1, expected_reclaims),
            "stored counters after reclaim {expected_reclaims}"
        );
    }
}

/// A reclaim that would push `reclaims` over `max_reclaims` fails the run as a crash loop
/// instead: returned in `crash_looped`, never in `claimed`, never claimed again.
pub async fn reclaim_over_max_reclaims_fails_the_run_as_a_crash_loop(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let max_two = || {
        let mut params = params(5);
        params.max_reclaims = 2;
        params
    };
    let id = env.enqueue_a().await;
    let first = env.claim(max_two()).await;
    assert_eq!(first.claimed.len(), 1, "first claim");
    let mut owner = first.claimed[0].owner;
    for reclaims in 1..=2u32 {
        env.advance(LEASE + MS);
        let batch = env.claim(max_two()).await;
        assert_eq!(
            batch.claimed.len(),
            1,
            "reclaim {reclaims} is within max_reclaims 2"
        );
        assert_eq!(batch.claimed[0].run.reclaims, reclaims, "reclaims counted");
        owner = batch.claimed[0].owner;
    }
    env.advance(LEASE + MS);
    let batch = env.claim(max_two()).await;
    assert!(
        batch.claimed.is_empty(),
        "a crash-looping run is never handed to a handler: {batch:?}"
    );
    assert_eq!(
        batch.crash_looped.len(),
        1,
        "the run is reported as crash-looped"
    );
    let looped = &batch.crash_looped[0];
    assert_eq!(looped.id, id, "the crash-looped run is ours");
    assert_eq!(
        looped.status,
        RunStatus::Failed,
        "the returned run is failed"
    );
    let stored = env.get(id).await;
    assert_eq!(stored.status, RunStatus::Failed, "stored as failed");
    assert_eq!(stored.failed_at, Some(env.now()), "failed_at = now");
    let error = stored.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("crash loop"),
        "last_error says crash loop: {error:?}"
    );
    assert_eq!(stored.attempts, 0, "a crash loop spends no attempt");

    env.advance(LEASE * 10);
    let later = env.claim(max_two()).await;
    assert!(
        later.claimed.is_empty() && later.crash_looped.is_empty(),
        "a failed run is never claimed again: {later:?}"
    );
    assert_eq!(
        env.finish(id, owner, FinishAction::Complete { result: None })
            .await,
        FinishReply::LeaseLost { id },
        "the last owner can no longer finish it"
    );
}

// ---------------------------------------------------------------------------------------
// Owner-checked writes
// ---------------------------------------------------------------------------------------

/// After a reclaim, every write of the previous owner — checkpoint, heartbeat and each
/// finish action — is refused as lease lost and changes nothing; the new owner's writes
/// succeed. A run that is not running accepts no owner-checked write either.
pub async fn fenced_owner_writes_are_lease_lost_and_change_nothing(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let (id, stale) = env.running_run().await;
    env.advance(LEASE + MS);
    let current = env.claim_one().await;
    assert!(current.reclaimed, "the second owner reclaimed the run");
    let snapshot = env.get(id).await;

    let checkpoint = env
        .store
        .run_checkpoint(CheckpointParams {
            id,
            owner: stale,
            state: b"stale".to_vec(),
            lease: LEASE,
        })
        .await;
    assert_eq!(
        checkpoint,
        Err(StoreError::LeaseLost),
        "the stale owner's checkpoint is lease lost"
    );
    let replies = env
        .store
        .run_heartbeat_many(vec![LeaseRenewal {
            id,
            owner: stale,
            lease: LEASE,
        }])
        .await
        .expect("heartbeat succeeds");
    assert_eq!(replies.len(), 1, "one reply per renewal: {replies:?}");
    assert!(
        replies[0].id == id && replies[0].lost,
        "the stale owner's heartbeat is told the lease is lost: {replies:?}"
    );
    for action in every_action() {
        let name = action.name();
        assert_eq!(
            env.finish(id, stale, action).await,
            FinishReply::LeaseLost { id },
            "the stale owner's {name} is lease lost"
        );
    }
    for action in every_action() {
        let name = action.name();
        assert_eq!(
            env.finish(id, OwnerToken::fresh(), action).await,
            FinishReply::LeaseLost { id },
            "a forged token's {name} is lease lost"
        );
    }
    assert_eq!(
        env.get(id).await,
        snapshot,
        "refused writes left the row exactly as it was"
    );

    env.store
        .run_checkpoint(CheckpointParams {
            id,
            owner: current.owner,
            state: b"fresh".to_vec(),
            lease: LEASE,
        })
        .await
        .expect("the current owner's checkpoint is written");
    let replies = env
        .store
        .run_heartbeat_many(vec![LeaseRenewal {
            id,
            owner: current.owner,
            lease: LEASE,
        }])
        .await
        .expect("heartbeat succeeds");
    assert_eq!(
        replies,
        vec![HeartbeatReply {
            id,
            lost: false,
            cancel_requested: false
        }],
        "the current owner's heartbeat is accepted"
    );
    assert_eq!(
        env.finish(
            id,
            current.owner,
            FinishAction::Complete {
                result: Some(serde_json::json!("done"))
            }
        )
        .await,
        FinishReply::Applied {
            id,
            status: RunStatus::Completed
        },
        "the current owner completes the run"
    );

    // A pending run is owned by nobody.
    let pending = env.enqueue_a().await;
    let before = env.get(pending).await;
    let token = OwnerToken::fresh();
    assert_eq!(
        env.store
            .run_checkpoint(CheckpointParams {
                id: pending,
                owner: token,
                state: vec![1],
                lease: LEASE
            })
            .await,
        Err(StoreError::LeaseLost),
        "a checkpoint of a pending run is lease lost"
    );
    let replies = env
        .store
        .run_heartbeat_many(vec![LeaseRenewal {
            id: pending,
            owner: token,
            lease: LEASE,
        }])
        .await
        .expect("heartbeat succeeds");
    assert!(
        replies.len() == 1 && replies[0].lost,
        "a heartbeat of a pending run is lost: {replies:?}"
    );
    for action in every_action() {
        let name = action.name();
        assert_eq!(
            env.finish(pending, token, action).await,
            FinishReply::LeaseLost { id: pending },
            "a {name} of a pending run is lease lost"
        );
    }
    assert_eq!(
        env.get(pending).await,
        before,
        "the pending run is unchanged"
    );
}

/// A lease that expired but was not reclaimed still belongs to its owner: heartbeat,
/// checkpoint and finish are all accepted.
pub async fn expired_but_unreclaimed_lease_still_accepts_its_owner(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let (id, owner) = env.running_run().await;

    env.advance(LEASE * 2);
    let replies = env
        .store
        .run_heartbeat_many(vec![LeaseRenewal {
            id,
            owner,
            lease: LEASE,
        }])
        .await
        .expect("heartbeat succeeds");
    assert_eq!(
        replies,
        vec![HeartbeatReply {
            id,
            lost: false,
            cancel_requested: false
        }],
        "a heartbeat after expiry, before any reclaim, is accepted"
    );
    assert_eq!(
        env.get(id).await.locked_until,
        Some(after(env.now(), LEASE)),
        "the late heartbeat renewed the lease from now"
    );

    env.advance(LEASE * 2);
    env.store
        .run_checkpoint(CheckpointParams {
            id,
            owner,
            state: b"late but ours".to_vec(),
            lease: LEASE,
        })
        .await
        .expect("a checkpoint after expiry, before any reclaim, is accepted");

    env.advance(LEASE * 2);
    assert_eq!(
        env.finish(id, owner, FinishAction::Complete { result: None })
            .await,
        FinishReply::Applied {
            id,
            status: RunStatus::Completed
        },
        "a finish after expiry, before any reclaim, is accepted"
    );
    let stored = env.get(id).await;
    assert_eq!(
        stored.reclaims, 0,
        "nobody reclaimed it: {}",
        stored.reclaims
    );
    assert_eq!(
        stored.state.as_deref(),
        Some(&b"late but ours"[..]),
        "the late checkpoint was stored"
    );
}

/// A heartbeat sets `locked_until = now + lease` and `heartbeat_at = now`, so a renewed
/// run is not reclaimable when its original lease would have run out; a batch answers
/// per run.
pub async fn heartbeat_renews_the_lease_from_now(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let t0 = env.now();
    let (ours, owner) = env.running_run().await;
    let (theirs, _) = env.running_run().await;

    env.advance(Duration::from_secs(40));
    let replies = env
        .store
        .run_heartbeat_many(vec![
            LeaseRenewal {
                id: ours,
                owner,
                lease: LEASE,
            },
            LeaseRenewal {
                id: theirs,
                owner: OwnerToken::fresh(),
                lease: LEASE,
            },
        ])
        .await
        .expect("heartbeat succeeds");
    let by_id: HashMap<RunId, HeartbeatReply> =
        replies.iter().map(|reply| (reply.id, *reply)).collect();
    assert_eq!(by_id.len(), 2, "one reply per renewal: {replies:?}");
    assert!(
        !by_id[&ours].lost && !by_id[&ours].cancel_requested,
        "our renewal is accepted: {replies:?}"
    );
    assert!(
        by_id[&theirs].lost,
        "a renewal with a wrong token is lost, per run: {replies:?}"
    );
    let stored = env.get(ours).await;
    assert_eq!(
        stored.locked_until,
        Some(after(t0, Duration::from_secs(40) + LEASE)),
        "locked_until = heartbeat time + lease"
    );
    assert_eq!(
        stored.heartbeat_at,
        Some(after(t0, Duration::from_secs(40))),
        "heartbeat_at = heartbeat time"
    );

    // Past the original lease (t0 + 60 s), inside the renewed one (t0 + 100 s).
    env.advance(Duration::from_secs(30));
    let batch = env.claim(params(10)).await;
    let reclaimed: Vec<RunId> = batch.claimed.iter().map(|claimed| claimed.run.id).collect();
    assert_eq!(
        reclaimed,
        vec![theirs],
        "only the run that was not renewed is reclaimable"
    );
    env.advance(Duration::from_secs(30) + MS);
    let batch = env.claim(params(10)).await;
    assert!(
        batch.claimed.len() == 1 && batch.claimed[0].run.id == ours,
        "once the renewed lease runs out the run is reclaimable: {batch:?}"
    );
}

/// A checkpoint stores the state and renews the lease like a heartbeat; the next owner
/// after a crash gets the last state.
pub async fn checkpoint_stores_state_and_renews_the_lease(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let t0 = env.now();
    let (id, owner) = env.running_run().await;

    env.advance(Duration::from_secs(50));
    env.store
        .run_checkpoint(CheckpointParams {
            id,
            owner,
            state: b"step-1".to_vec(),
            lease: LEASE,
        })
        .await
        .expect("the owner's checkpoint is written");
    let stored = env.get(id).await;
    assert_eq!(
        stored.state.as_deref(),
        Some(&b"step-1"[..]),
        "the state is stored"
    );
    assert_eq!(
        stored.locked_until,
        Some(after(t0, Duration::from_secs(50) + LEASE)),
        "the checkpoint renewed the lease from now"
    );
    assert_eq!(
        stored.heartbeat_at,
        Some(after(t0, Duration::from_secs(50))),
        "the checkpoint counts as a heartbeat"
    );

    env.advance(Duration::from_secs(20));
    assert!(
        env.claim(params(1)).await.claimed.is_empty(),
        "past the original lease, the checkpointed run is not reclaimable"
    );
    env.store
        .run_checkpoint(CheckpointParams {
            id,
            owner,
            state: b"step-2".to_vec(),
            lease: LEASE,
        })
        .await
        .expect("a second checkpoint is written");
    assert_eq!(
        env.get(id).await.state.as_deref(),
        Some(&b"step-2"[..]),
        "a checkpoint replaces the previous state"
    );

    env.advance(LEASE + MS);
    let claimed = env.claim_one().await;
    assert!(
        claimed.reclaimed,
        "the run is reclaimed after its owner went quiet"
    );
    assert_eq!(
        claimed.run.state.as_deref(),
        Some(&b"step-2"[..]),
        "the next owner gets the last checkpoint"
    );
}

/// Each finish action writes what the contract says, clears the owner, and the runs put
/// back come due when their delay has passed (claimed as new claims, not reclaims).
pub async fn finish_actions_write_what_they_say(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    env.dispatcher
        .enqueue_many((0..7).map(|_| request(KIND_A)).collect())
        .await
        .expect("enqueue succeeds");
    let batch = env.claim(params(10)).await;
    assert_eq!(batch.claimed.len(), 7, "all seven runs claimed");
    env.advance(Duration::from_secs(5));
    let t1 = env.now();

    let actions = [
        FinishAction::Complete {
            result: Some(serde_json::json!({ "ok": true })),
        },
        FinishAction::Fail {
            error: "boom".into(),
        },
        FinishAction::Retry {
            delay: Duration::from_secs(45),
            error: "flaky".into(),
        },
        FinishAction::Snooze {
            delay: Duration::from_secs(120),
        },
        FinishAction::Park {
            delay: Duration::from_secs(10),
            error: "no handler here".into(),
        },
        FinishAction::Cancel,
        FinishAction::Release,
    ];
    let finishes: Vec<Finish> = batch
        .claimed
        .iter()
        .zip(actions.iter().cloned())
        .map(|(claimed, action)| Finish {
            id: claimed.run.id,
            owner: claimed.owner,
            action,
        })
        .collect();
    let ids: Vec<RunId> = finishes.iter().map(|finish| finish.id).collect();
    let replies = env
        .store
        .run_finish_many(finishes)
        .await
        .expect("run_finish_many succeeds");
    let statuses: HashMap<RunId, RunStatus> = replies
        .iter()
        .map(|reply| match reply {
            FinishReply::Applied { id, status } => (*id, *status),
            FinishReply::LeaseLost { id } => panic!("the owner's finish of {id} was refused"),
        })
        .collect();
    assert_eq!(statuses.len(), 7, "one reply per finish: {replies:?}");
    let expected_status = [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Scheduled,
        RunStatus::Scheduled,
        RunStatus::Scheduled,
        RunStatus::Cancelled,
        RunStatus::Queued,
    ];
    for ((id, action), status) in ids.iter().zip(&actions).zip(expected_status) {
        let name = action.name();
        assert_eq!(
            statuses.get(id),
            Some(&status),
            "{name}: the reply tells the new status"
        );
        let run = env.get(*id).await;
        assert_eq!(run.status, status, "{name}: stored status");
        assert_eq!(run.locked_by, None, "{name}: the owner token is cleared");
        assert_eq!(run.reclaims, 0, "{name}: no reclaim counted");
    }

    let [complete, fail, retry, snooze, park, cancel, release] =
        <[RunId; 7]>::try_from(ids.clone()).expect("invariant: seven ids");
    let run = env.get(complete).await;
    assert_eq!(
        run.result,
        Some(serde_json::json!({ "ok": true })),
        "complete: result stored"
    );
    assert_eq!(run.completed_at, Some(t1), "complete: completed_at = now");

    let run = env.get(fail).await;
    assert_eq!(
        run.last_error.as_deref(),
        Some("boom"),
        "fail: last_error stored"
    );
    assert_eq!(run.failed_at, Some(t1), "fail: failed_at = now");
    assert_eq!(run.attempts, 0, "fail: no attempt counted");

    let run = env.get(retry).await;
    assert_eq!(run.attempts, 1, "retry: attempts + 1");
    assert_eq!(
        run.run_at,
        after(t1, Duration::from_secs(45)),
        "retry: due at now + delay"
    );
    assert_eq!(
        run.last_error.as_deref(),
        Some("flaky"),
        "retry: last_error stored"
    );
    assert_eq!(run.parks, 0, "retry: no park counted");

    let run = env.get(snooze).await;
    assert_eq!(
        (run.attempts, run.parks),
        (0, 0),
        "snooze: no counter moves"
    );
    assert_eq!(
        run.run_at,
        after(t1, Duration::from_secs(120)),
        "snooze: due at now + delay"
    );

    let run = env.get(park).await;
    assert_eq!(run.parks, 1, "park: parks + 1");
    assert_eq!(run.attempts, 0, "park: never spends an attempt");
    assert_eq!(
        run.run_at,
        after(t1, Duration::from_secs(10)),
        "park: due at now + delay"
    );
    assert_eq!(
        run.last_error.as_deref(),
        Some("no handler here"),
        "park: last_error stored"
    );

    let run = env.get(cancel).await;
    assert_eq!(run.cancelled_at, Some(t1), "cancel: cancelled_at = now");

    let run = env.get(release).await;
    assert_eq!(run.run_at, t1, "release: due now");
    assert_eq!(
        (run.attempts, run.parks),
        (0, 0),
        "release: no counter moves"
    );

    // What was put back comes due in order of its delay.
    let claimed = env.claim(params(10)).await;
    let now_due: Vec<RunId> = claimed.claimed.iter().map(|c| c.run.id).collect();
    assert_eq!(
        now_due,
        vec![release],
        "only the released run is due at once"
    );
    assert!(
        !claimed.claimed[0].reclaimed,
        "a released run is claimed, not reclaimed"
    );
    env.advance(Duration::from_secs(45));
    let claimed = env.claim(params(10)).await;
    let now_due: HashSet<RunId> = claimed.claimed.iter().map(|c| c.run.id).collect();
    assert_eq!(
        now_due,
        HashSet::from([retry, park]),
        "after 45 s the retried and the parked runs are due, the snoozed one is not"
    );
    assert!(
        claimed.claimed.iter().all(|c| !c.reclaimed),
        "put-back runs are claimed, not reclaimed"
    );
}

/// Once a run has left `running` (finished, or put back), its former owner's writes are
/// lease lost and change nothing: a late or repeated completion never overwrites.
pub async fn finish_of_a_run_no_longer_running_is_lease_lost(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let (done, owner) = env.running_run().await;
    assert_eq!(
        env.finish(done, owner, FinishAction::Complete { result: None })
            .await,
        FinishReply::Applied {
            id: done,
            status: RunStatus::Completed
        },
        "the first completion is written"
    );
    let snapshot = env.get(done).await;
    for action in every_action() {
        let name = action.name();
        assert_eq!(
            env.finish(done, owner, action).await,
            FinishReply::LeaseLost { id: done },
            "a {name} after completion is lease lost"
        );
    }
    assert_eq!(
        env.get(done).await,
        snapshot,
        "the completed run is unchanged"
    );

    let (released, owner) = env.running_run().await;
    assert_eq!(
        env.finish(released, owner, FinishAction::Release).await,
        FinishReply::Applied {
            id: released,
            status: RunStatus::Queued
        },
        "the run is given back"
    );
    let snapshot = env.get(released).await;
    assert_eq!(
        env.finish(released, owner, FinishAction::Complete { result: None })
            .await,
        FinishReply::LeaseLost { id: released },
        "the former owner cannot complete a run it gave back"
    );
    assert_eq!(
        env.store
            .run_checkpoint(CheckpointParams {
                id: released,
                owner,
                state: vec![9],
                lease: LEASE
            })
            .await,
        Err(StoreError::LeaseLost),
        "nor checkpoint it"
    );
    assert_eq!(
        env.get(released).await,
        snapshot,
        "the released run is unchanged"
    );
}

/// A batch that carries one run twice — its former owner's stale token and its current
/// owner's — answers each entry by its own token, in either order, as two separate calls
/// would: the stale one is lease lost, the current one is written. (A worker that stalled
/// past its lease and then claimed the same run again holds both tokens.)
pub async fn batched_writes_answer_each_entry_by_its_own_token(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let (id, stale) = env.running_run().await;
    env.advance(LEASE + MS);
    let current = env.claim_one().await;
    assert!(current.reclaimed, "the expired run is reclaimed");
    let current = current.owner;
    let renew = |owner| LeaseRenewal {
        id,
        owner,
        lease: LEASE,
    };
    for (order, leases, lost) in [
        (
            "stale first",
            vec![renew(stale), renew(current)],
            [true, false],
        ),
        (
            "current first",
            vec![renew(current), renew(stale)],
            [false, true],
        ),
    ] {
        let replies = env
            .store
            .run_heartbeat_many(leases)
            .await
            .expect("run_heartbeat_many succeeds");
        assert_eq!(
            replies.iter().map(|reply| reply.lost).collect::<Vec<_>>(),
            lost,
            "{order}: each renewal is answered by its own token: {replies:?}"
        );
    }
    let replies = env
        .store
        .run_finish_many(vec![
            Finish {
                id,
                owner: stale,
                action: FinishAction::Complete { result: None },
            },
            Finish {
                id,
                owner: current,
                action: FinishAction::Snooze {
                    delay: Duration::from_secs(5),
                },
            },
        ])
        .await
        .expect("run_finish_many succeeds");
    assert_eq!(
        replies,
        vec![
            FinishReply::LeaseLost { id },
            FinishReply::Applied {
                id,
                status: RunStatus::Scheduled
            }
        ],
        "the stale completion is refused and the current owner's snooze is written"
    );
    let run = env.get(id).await;
    assert_eq!(
        (run.status, run.locked_by),
        (RunStatus::Scheduled, None),
        "the run is snoozed, not completed"
    );
}

// ---------------------------------------------------------------------------------------
// Cancel
// ---------------------------------------------------------------------------------------

/// A cancel request on a pending run (queued or scheduled) cancels it at once; it is
/// never claimed.
pub async fn cancel_of_a_pending_run_cancels_it_at_once(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let t0 = env.now();
    let queued = env.enqueue_a().await;
    let scheduled = env
        .enqueue(request(KIND_A).delay(Duration::from_secs(3600)))
        .await;
    for (id, label) in [(queued, "queued"), (scheduled, "scheduled")] {
        assert_eq!(
            env.store
                .run_request_cancel(id)
                .await
                .expect("cancel succeeds"),
            CancelReply::Cancelled,
            "a {label} run is cancelled at once"
        );
        let run = env.get(id).await;
        assert_eq!(run.status, RunStatus::Cancelled, "{label}: status");
        assert_eq!(run.cancelled_at, Some(t0), "{label}: cancelled_at = now");
        assert_eq!(run.started_at, None, "{label}: never started");
    }
    env.advance(Duration::from_secs(7200));
    let batch = env.claim(params(10)).await;
    assert!(
        batch.claimed.is_empty(),
        "cancelled runs are never claimed: {batch:?}"
    );
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    assert_eq!(
        (stats.cancelled, stats.total()),
        (2, 2),
        "stats count two cancelled: {stats:?}"
    );
}

/// A cancel request on a running run sets its flag (status and owner unchanged) and
/// answers `Requested`; the owner's heartbeat reply carries `cancel_requested: true`;
/// the owner's `Cancel` then writes `cancelled_at`.
pub async fn cancel_of_a_running_run_is_requested_and_delivered_by_heartbeat(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let (id, owner) = env.running_run().await;
    for round in ["first", "repeated"] {
        assert_eq!(
            env.store
                .run_request_cancel(id)
                .await
                .expect("cancel succeeds"),
            CancelReply::Requested,
            "a {round} cancel of a running run is requested"
        );
    }
    let stored = env.get(id).await;
    assert_eq!(stored.status, RunStatus::Running, "the run keeps running");
    assert!(stored.cancel_requested, "the flag is on the row");
    assert_eq!(stored.locked_by, Some(owner), "the owner keeps the run");

    let replies = env
        .store
        .run_heartbeat_many(vec![LeaseRenewal {
            id,
            owner,
            lease: LEASE,
        }])
        .await
        .expect("heartbeat succeeds");
    assert_eq!(
        replies,
        vec![HeartbeatReply {
            id,
            lost: false,
            cancel_requested: true
        }],
        "the heartbeat delivers the cancel request to the owner"
    );
    env.store
        .run_checkpoint(CheckpointParams {
            id,
            owner,
            state: vec![1],
            lease: LEASE,
        })
        .await
        .expect("a cancel request does not fence the owner");

    env.advance(Duration::from_secs(1));
    assert_eq!(
        env.finish(id, owner, FinishAction::Cancel).await,
        FinishReply::Applied {
            id,
            status: RunStatus::Cancelled
        },
        "the owner writes the cancel"
    );
    let stored = env.get(id).await;
    assert_eq!(stored.status, RunStatus::Cancelled, "stored as cancelled");
    assert_eq!(stored.cancelled_at, Some(env.now()), "cancelled_at = now");
}

/// With a cancel requested, `Retry`, `Snooze`, `Park` and `Release` write `cancelled`
/// instead of putting the run back; `Complete` and `Fail` are written as they are.
pub async fn cancel_request_turns_putting_back_into_cancelled(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let cases = [
        (
            FinishAction::Retry {
                delay: Duration::from_secs(30),
                error: "flaky".into(),
            },
            RunStatus::Cancelled,
        ),
        (
            FinishAction::Snooze {
                delay: Duration::from_secs(30),
            },
            RunStatus::Cancelled,
        ),
        (
            FinishAction::Park {
                delay: Duration::from_secs(30),
                error: "no handler".into(),
            },
            RunStatus::Cancelled,
        ),
        (FinishAction::Release, RunStatus::Cancelled),
        (
            FinishAction::Complete {
                result: Some(serde_json::json!(1)),
            },
            RunStatus::Completed,
        ),
        (
            FinishAction::Fail {
                error: "broken".into(),
            },
            RunStatus::Failed,
        ),
    ];
    for (action, expected) in cases {
        let name = action.name();
        let (id, owner) = env.running_run().await;
        assert_eq!(
            env.store
                .run_request_cancel(id)
                .await
                .expect("cancel succeeds"),
            CancelReply::Requested,
            "{name}: cancel requested while running"
        );
        assert_eq!(
            env.finish(id, owner, action).await,
            FinishReply::Applied {
                id,
                status: expected
            },
            "{name} with a cancel requested is written as {expected}"
        );
        let stored = env.get(id).await;
        assert_eq!(stored.status, expected, "{name}: stored status");
        if expected == RunStatus::Cancelled {
            assert_eq!(
                stored.cancelled_at,
                Some(env.now()),
                "{name}: cancelled_at = now"
            );
        }
    }
    let batch = env.claim(params(10)).await;
    assert!(
        batch.claimed.is_empty(),
        "no cancelled run came back: {batch:?}"
    );
}

/// A running run with a cancel requested whose lease expires is cancelled by the next
/// claim (returned in `cancelled`, never restarted); a late completion by its old owner
/// is lease lost and the run stays cancelled.
pub async fn cancel_requested_run_whose_lease_expires_is_cancelled_by_the_next_claim(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let (id, owner) = env.running_run().await;
    assert_eq!(
        env.store
            .run_request_cancel(id)
            .await
            .expect("cancel succeeds"),
        CancelReply::Requested,
        "cancel requested while running"
    );
    env.advance(LEASE + MS);
    let batch = env.claim(params(10)).await;
    assert!(
        batch.claimed.is_empty(),
        "a cancel-requested run is not restarted: {batch:?}"
    );
    assert_eq!(
        batch.cancelled,
        vec![id],
        "the claim reports the run as cancelled"
    );
    assert!(batch.crash_looped.is_empty(), "no crash loop: {batch:?}");
    let stored = env.get(id).await;
    assert_eq!(stored.status, RunStatus::Cancelled, "stored as cancelled");
    assert_eq!(
        stored.cancelled_at,
        Some(env.now()),
        "cancelled_at = the claim's now"
    );

    assert_eq!(
        env.finish(
            id,
            owner,
            FinishAction::Complete {
                result: Some(serde_json::json!("late"))
            }
        )
        .await,
        FinishReply::LeaseLost { id },
        "a late completion after the cancel is lease lost"
    );
    assert_eq!(
        env.get(id).await,
        stored,
        "the run stays cancelled, unchanged"
    );
}

/// A cancel request on a terminal run answers `AlreadyFinished(status)` and changes
/// nothing; on an unknown id it is `NotFound`.
pub async fn cancel_of_a_finished_or_unknown_run_changes_nothing(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let mut terminal = Vec::new();
    for (action, status) in [
        (
            FinishAction::Complete { result: None },
            RunStatus::Completed,
        ),
        (
            FinishAction::Fail {
                error: "broken".into(),
            },
            RunStatus::Failed,
        ),
        (FinishAction::Cancel, RunStatus::Cancelled),
    ] {
        let (id, owner) = env.running_run().await;
        assert_eq!(
            env.finish(id, owner, action).await,
            FinishReply::Applied { id, status },
            "the run ends {status}"
        );
        terminal.push((id, status));
    }
    env.advance(Duration::from_secs(1));
    for (id, status) in terminal {
        let before = env.get(id).await;
        assert_eq!(
            env.store
                .run_request_cancel(id)
                .await
                .expect("cancel succeeds"),
            CancelReply::AlreadyFinished(status),
            "a cancel of a {status} run says it already finished"
        );
        assert_eq!(env.get(id).await, before, "the {status} run is unchanged");
    }
    assert_eq!(
        env.store.run_request_cancel(RunId::new_v7()).await,
        Err(StoreError::NotFound),
        "a cancel of an unknown run is NotFound"
    );
}

// ---------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------

/// `run_list` is newest first; filters by status (scheduled vs queued by the store's
/// clock), kind and tenant; honours `limit` and the `before` cursor; `limit 0` is a page
/// of 100.
pub async fn run_list_is_newest_first_with_filters_limit_and_cursor(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let mut runs = Vec::new();
    for index in 0..6 {
        let kind = if index % 2 == 0 { KIND_A } else { KIND_B };
        let tenant = if index < 3 { "north" } else { "south" };
        let mut request = request(kind).tenant(tenant);
        if index == 5 {
            request = request.delay(Duration::from_secs(3600));
        }
        runs.push(env.enqueue(request).await);
        if index == 0 {
            // The first run is the one running: claimed while it is the only one.
            let claimed = env.claim_one().await;
            assert_eq!(claimed.run.id, runs[0], "the only due run is claimed");
        }
        env.advance(Duration::from_secs(1));
    }

    let list = |filter: RunFilter| {
        let store = Arc::clone(&env.store);
        async move {
            store
                .run_list(filter)
                .await
                .expect("run_list succeeds")
                .into_iter()
                .map(|run| run.id)
                .collect::<Vec<RunId>>()
        }
    };
    let pick = |indexes: &[usize]| indexes.iter().map(|&i| runs[i]).collect::<Vec<_>>();

    assert_eq!(
        list(RunFilter::default()).await,
        pick(&[5, 4, 3, 2, 1, 0]),
        "newest first"
    );
    let by_status = |status| RunFilter {
        status: Some(status),
        ..RunFilter::default()
    };
    assert_eq!(
        list(by_status(RunStatus::Running)).await,
        pick(&[0]),
        "status running"
    );
    assert_eq!(
        list(by_status(RunStatus::Scheduled)).await,
        pick(&[5]),
        "status scheduled"
    );
    assert_eq!(
        list(by_status(RunStatus::Queued)).await,
        pick(&[4, 3, 2, 1]),
        "status queued"
    );
    assert_eq!(
        list(by_status(RunStatus::Completed)).await,
        Vec::<RunId>::new(),
        "status completed: none"
    );
    assert_eq!(
        list(RunFilter {
            kind: Some(KIND_B.into()),
            ..RunFilter::default()
        })
        .await,
        pick(&[5, 3, 1]),
        "kind filter"
    );
    assert_eq!(
        list(RunFilter {
            tenant: Some("north".into()),
            ..RunFilter::default()
        })
        .await,
        pick(&[2, 1, 0]),
        "tenant filter"
    );
    assert_eq!(
        list(RunFilter {
            kind: Some(KIND_A.into()),
            status: Some(RunStatus::Queued),
            ..RunFilter::default()
        })
        .await,
        pick(&[4, 2]),
        "kind and status together"
    );

    let page = |before: Option<RunId>| RunFilter {
        limit: 2,
        before,
        ..RunFilter::default()
    };
    assert_eq!(list(page(None)).await, pick(&[5, 4]), "first page of two");
    assert_eq!(
        list(page(Some(runs[4]))).await,
        pick(&[3, 2]),
        "page before the 5th run"
    );
    assert_eq!(
        list(page(Some(runs[2]))).await,
        pick(&[1, 0]),
        "page before the 3rd run"
    );
    assert_eq!(
        list(page(Some(runs[0]))).await,
        Vec::<RunId>::new(),
        "nothing before the oldest run"
    );

    env.dispatcher
        .enqueue_many((0..120).map(|_| request(KIND_A)).collect())
        .await
        .expect("enqueue succeeds");
    assert_eq!(
        list(RunFilter::default()).await.len(),
        100,
        "limit 0 reads one default page of 100"
    );
}

/// `run_stats` counts runs per status, in all and per kind.
pub async fn run_stats_counts_every_status(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    env.dispatcher
        .enqueue_many((0..5).map(|_| request(KIND_A)).collect())
        .await
        .expect("enqueue succeeds");
    let batch = env.claim(params(5)).await;
    assert_eq!(batch.claimed.len(), 5, "five runs claimed");
    let actions = [
        Some(FinishAction::Complete { result: None }),
        Some(FinishAction::Fail {
            error: "broken".into(),
        }),
        Some(FinishAction::Cancel),
        Some(FinishAction::Release),
        None, // stays running
    ];
    for (claimed, action) in batch.claimed.iter().zip(actions) {
        if let Some(action) = action {
            let reply = env.finish(claimed.run.id, claimed.owner, action).await;
            assert!(
                matches!(reply, FinishReply::Applied { .. }),
                "finish written: {reply:?}"
            );
        }
    }
    env.enqueue_a().await;
    env.enqueue(request(KIND_B).delay(Duration::from_secs(60)))
        .await;
    let stats = env.store.run_stats().await.expect("run_stats succeeds");
    for (status, expected) in [
        (RunStatus::Scheduled, 1),
        (RunStatus::Queued, 2),
        (RunStatus::Running, 1),
        (RunStatus::Completed, 1),
        (RunStatus::Failed, 1),
        (RunStatus::Cancelled, 1),
    ] {
        assert_eq!(
            stats.count(status),
            expected,
            "{status} runs counted: {stats:?}"
        );
    }
    assert_eq!(stats.total(), 7, "every run counted once: {stats:?}");
    let kinds: Vec<&str> = stats.by_kind.keys().map(String::as_str).collect();
    assert_eq!(kinds, [KIND_A, KIND_B], "one entry per kind with runs");
    let a = &stats.by_kind[KIND_A];
    let b = &stats.by_kind[KIND_B];
    for (status, in_a, in_b) in [
        (RunStatus::Scheduled, 0, 1),
        (RunStatus::Queued, 2, 0),
        (RunStatus::Running, 1, 0),
        (RunStatus::Completed, 1, 0),
        (RunStatus::Failed, 1, 0),
        (RunStatus::Cancelled, 1, 0),
    ] {
        assert_eq!(a.count(status), in_a, "{status} runs of {KIND_A}: {a:?}");
        assert_eq!(b.count(status), in_b, "{status} runs of {KIND_B}: {b:?}");
    }
}

/// `run_find_by_key` finds a keyed run while it is pending and after it finished, the
/// newest one when the freed key was used again, and never another tenant's.
pub async fn find_by_key_finds_finished_runs_and_the_newest(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let find = |tenant: &'static str, key: &'static str| {
        let store = env.store.clone();
        async move {
            store
                .run_find_by_key(tenant, key)
                .await
                .expect("run_find_by_key succeeds")
        }
    };
    assert!(find("acme", "webhook:1").await.is_none(), "nothing yet");
    let first = env
        .enqueue(request(KIND_A).tenant("acme").unique_key("webhook:1"))
        .await;
    let found = find("acme", "webhook:1")
        .await
        .expect("found while pending");
    assert_eq!(
        (found.id, found.status),
        (first, RunStatus::Queued),
        "the pending run"
    );
    let claimed = env.claim_one().await;
    assert_eq!(claimed.run.id, first, "the keyed run is claimed");
    let reply = env
        .finish(
            first,
            claimed.owner,
            FinishAction::Complete { result: None },
        )
        .await;
    assert!(
        matches!(reply, FinishReply::Applied { .. }),
        "completed: {reply:?}"
    );
    let found = find("acme", "webhook:1")
        .await
        .expect("found after it finished");
    assert_eq!(
        (found.id, found.status),
        (first, RunStatus::Completed),
        "the finished run is still found"
    );
    assert!(
        find("globex", "webhook:1").await.is_none(),
        "another tenant never sees it"
    );
    assert!(
        find("acme", "webhook:2").await.is_none(),
        "another key finds nothing"
    );
    let second = env
        .enqueue(request(KIND_A).tenant("acme").unique_key("webhook:1"))
        .await;
    assert_ne!(second, first, "the finished run freed its key");
    let found = find("acme", "webhook:1").await.expect("found again");
    assert_eq!(found.id, second, "the newest run with the key");
}

/// Unique keys belong to a tenant: the same key in two tenants makes two runs, and a
/// repeat within one tenant returns that tenant's run.
pub async fn unique_key_is_scoped_to_its_tenant(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let acme = env
        .enqueue(request(KIND_A).tenant("acme").unique_key("order-5001"))
        .await;
    let globex = env
        .enqueue(request(KIND_A).tenant("globex").unique_key("order-5001"))
        .await;
    assert_ne!(acme, globex, "another tenant's key never collides");
    let again = env
        .dispatcher
        .enqueue(request(KIND_A).tenant("acme").unique_key("order-5001"))
        .await
        .expect("enqueue answers");
    assert_eq!(
        again,
        Enqueued::Existing(acme),
        "a repeat within the tenant returns its run"
    );
}

/// A retry or park that turns into a cancel (the cancel was requested meanwhile) spends
/// no attempt and no park: the run did not fail, somebody stopped it.
pub async fn put_back_turned_cancel_spends_no_counter(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    for action in [
        FinishAction::Retry {
            delay: Duration::from_secs(30),
            error: "flaky".into(),
        },
        FinishAction::Park {
            delay: Duration::from_secs(30),
            error: "no handler".into(),
        },
    ] {
        let (id, owner) = env.running_run().await;
        assert_eq!(
            env.store.run_request_cancel(id).await.expect("cancel"),
            CancelReply::Requested,
            "a running run's cancel is requested"
        );
        let name = action.name();
        env.finish(id, owner, action).await;
        let run = env.get(id).await;
        assert_eq!(
            run.status,
            RunStatus::Cancelled,
            "{name}: cancelled instead"
        );
        assert_eq!(
            (run.attempts, run.parks),
            (0, 0),
            "{name}: a cancel spends no attempt and no park"
        );
    }
}

/// A manual retry puts a failed run back in the queue, due now, with its checkpoint and a
/// fresh budget; anything but a failed run is left alone; an unknown id is `NotFound`.
pub async fn manual_retry_requeues_a_failed_run_from_its_checkpoint(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let (id, owner) = env.running_run().await;
    env.store
        .run_checkpoint(CheckpointParams {
            id,
            owner,
            state: vec![7],
            lease: LEASE,
        })
        .await
        .expect("checkpoint");
    env.finish(
        id,
        owner,
        FinishAction::Fail {
            error: "the other side said no".into(),
        },
    )
    .await;
    assert_eq!(
        env.store.run_retry(id).await.expect("retry"),
        fronta_engine::RetryReply::Requeued,
        "a failed run is requeued"
    );
    let run = env.get(id).await;
    assert_eq!(run.status, RunStatus::Queued, "queued again");
    assert_eq!(run.run_at, env.now(), "due now");
    assert_eq!(run.state, Some(vec![7]), "it keeps its checkpoint");
    assert_eq!(
        (run.attempts, run.reclaims, run.parks),
        (0, 0, 0),
        "a fresh budget"
    );
    assert!(run.failed_at.is_none(), "no longer failed");
    assert_eq!(
        run.last_error.as_deref(),
        Some("the other side said no"),
        "the last error stays readable"
    );
    assert_eq!(
        env.store.run_retry(id).await.expect("retry"),
        fronta_engine::RetryReply::NotFailed(RunStatus::Queued),
        "a queued run is not retried"
    );
    let claimed = env.claim_one().await;
    assert_eq!(
        claimed.run.state,
        Some(vec![7]),
        "the next claim resumes from the checkpoint"
    );
    env.finish(id, claimed.owner, FinishAction::Complete { result: None })
        .await;
    assert_eq!(
        env.store.run_retry(id).await.expect("retry"),
        fronta_engine::RetryReply::NotFailed(RunStatus::Completed),
        "a completed run is not retried"
    );
    assert_eq!(
        env.store.run_retry(RunId::new_v7()).await,
        Err(StoreError::NotFound),
        "an unknown run is not found"
    );
}

/// A suppressed run (a guard stopped it on purpose) is terminal, says why in
/// `last_error`, has its end, frees its unique key, and is started by a manual retry
/// like a failed one.
pub async fn a_suppressed_run_is_terminal_and_started_by_a_manual_retry(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let id = env.enqueue(request(KIND_A).unique_key("guarded")).await;
    let claimed = env.claim_one().await;
    assert_eq!(claimed.run.id, id);
    env.finish(
        id,
        claimed.owner,
        FinishAction::Suppress {
            reason: "ran 5 times over this ticket in the last minute".into(),
        },
    )
    .await;
    let run = env.get(id).await;
    assert_eq!(run.status, RunStatus::Suppressed);
    assert!(run.status.is_terminal());
    assert_eq!(
        run.last_error.as_deref(),
        Some("ran 5 times over this ticket in the last minute"),
        "the reason is readable"
    );
    assert!(run.finished_at().is_some(), "it has its end");
    assert_eq!(run.attempts, 0, "no attempt spent");
    let listed = env
        .store
        .run_list(RunFilter {
            status: Some(RunStatus::Suppressed),
            limit: 10,
            ..RunFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(
        listed.iter().map(|run| run.id).collect::<Vec<_>>(),
        [id],
        "listed by its status"
    );
    let stats = env.store.run_stats().await.expect("stats");
    assert_eq!(stats.count(RunStatus::Suppressed), 1, "{stats:?}");
    assert_eq!(
        env.store
            .run_find_by_key(fronta_engine::model::DEFAULT_TENANT, "guarded")
            .await
            .expect("find")
            .map(|run| run.status),
        Some(RunStatus::Suppressed)
    );
    assert_eq!(
        env.store.run_retry(id).await.expect("retry"),
        fronta_engine::RetryReply::Requeued,
        "a suppressed run is started by hand"
    );
    let run = env.get(id).await;
    assert_eq!(run.status, RunStatus::Queued);
    assert!(run.finished_at().is_none(), "no longer ended");
}

/// A failed run whose unique key a newer pending run holds cannot be retried: the key
/// stays with one non-terminal run.
pub async fn manual_retry_never_breaks_a_unique_key(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let first = env.enqueue(request(KIND_A).unique_key("nightly")).await;
    let claimed = env.claim_one().await;
    env.finish(
        first,
        claimed.owner,
        FinishAction::Fail {
            error: "broken".into(),
        },
    )
    .await;
    let second = env
        .enqueue(
            request(KIND_A)
                .unique_key("nightly")
                .delay(Duration::from_secs(60)),
        )
        .await;
    assert_ne!(first, second, "the failed run freed its key");
    assert!(
        matches!(
            env.store.run_retry(first).await,
            Err(StoreError::Conflict(_))
        ),
        "the retry would make two runs hold the key"
    );
    assert_eq!(
        env.get(first).await.status,
        RunStatus::Failed,
        "the refused retry changed nothing"
    );
}

/// `run_busy` is true exactly while some run is running or due: a run delayed into the
/// future and finished runs do not count.
pub async fn run_busy_tells_running_or_due_runs_from_idle(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    assert!(
        !env.store.run_busy().await.expect("busy"),
        "an empty store is idle"
    );
    env.enqueue(request(KIND_A).delay(Duration::from_secs(60)))
        .await;
    assert!(
        !env.store.run_busy().await.expect("busy"),
        "a run due later is not work now"
    );
    let (id, owner) = env.running_run().await;
    assert!(
        env.store.run_busy().await.expect("busy"),
        "a running run is work"
    );
    env.finish(id, owner, FinishAction::Complete { result: None })
        .await;
    assert!(
        !env.store.run_busy().await.expect("busy"),
        "finished runs are not work"
    );
    env.advance(Duration::from_secs(61));
    assert!(
        env.store.run_busy().await.expect("busy"),
        "the delayed run came due"
    );
}

/// Readiness (`store_ready`): a working store is ready, empty or holding runs, and the
/// probe changes nothing — every run reads back as it was (no `updated_at` moved, though
/// the clock did) and the counts are the same.
pub async fn store_ready_answers_a_working_store_and_changes_nothing(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    env.store
        .store_ready()
        .await
        .expect("an empty store is ready");
    let (running, _owner) = env.running_run().await;
    let queued = env.enqueue_a().await;
    let scheduled = env
        .enqueue(request(KIND_B).delay(Duration::from_secs(60)))
        .await;
    let ids = [running, queued, scheduled];
    let mut before = Vec::new();
    for id in ids {
        before.push(env.get(id).await);
    }
    let stats = env.store.run_stats().await.expect("stats");
    env.advance(Duration::from_secs(1));
    for probe in 0..3 {
        env.store
            .store_ready()
            .await
            .unwrap_or_else(|err| panic!("probe {probe}: a store holding runs is ready: {err}"));
    }
    let mut after = Vec::new();
    for id in ids {
        after.push(env.get(id).await);
    }
    assert_eq!(after, before, "the probes changed no run");
    assert_eq!(
        env.store.run_stats().await.expect("stats"),
        stats,
        "the probes added or moved no run"
    );
}

/// Hand one run to `run_enqueue_started` with `lease`.
async fn hand_off(env: &Env, request: EnqueueRequest, lease: Duration) -> (RunId, HandOff) {
    let run = env
        .dispatcher
        .prepare(request)
        .expect("the request is valid");
    let id = run.id;
    let answer = env
        .store
        .run_enqueue_started(run, lease, None)
        .await
        .expect("run_enqueue_started succeeds");
    (id, answer)
}

/// Hand-off: with nothing due to overtake, the run is inserted already running, exactly
/// as a claim at that instant would leave it (fresh owner token that fences like a
/// claim's, `locked_until = now + lease`, `heartbeat_at = started_at = run_at = now`,
/// counters 0, not a reclaim); no claim returns it, and no enqueue signal fires.
pub async fn hand_off_inserts_a_run_already_claimed_when_nothing_is_due(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let lease = Duration::from_secs(45);
    let signal = env.store.enqueue_signal();
    let notified = signal.notified();
    let mut notified = std::pin::pin!(notified);
    notified.as_mut().enable();
    let t0 = env.now();

    let (id, answer) = hand_off(&env, request(KIND_A), lease).await;
    let HandOff::Started(claimed) = answer else {
        panic!("an idle store hands the run over, got {answer:?}");
    };
    assert_eq!(claimed.run.id, id, "the handed run is the enqueued one");
    assert!(!claimed.reclaimed, "a hand-off is no reclaim");
    let stored = env.get(id).await;
    for (run, label) in [(&claimed.run, "answered"), (&stored, "stored")] {
        assert_eq!(run.status, RunStatus::Running, "{label}: running");
        assert_eq!(
            run.locked_by,
            Some(claimed.owner),
            "{label}: holds the token"
        );
        assert_eq!(
            run.locked_until,
            Some(after(t0, lease)),
            "{label}: lease from now"
        );
        assert_eq!(run.heartbeat_at, Some(t0), "{label}: heartbeat now");
        assert_eq!(run.started_at, Some(t0), "{label}: started now");
        assert_eq!(run.run_at, t0, "{label}: due now");
        assert_eq!(
            (run.attempts, run.reclaims, run.parks),
            (0, 0, 0),
            "{label}: no counter spent"
        );
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(200), notified)
            .await
            .is_err(),
        "a handed-over run wakes no worker: nobody else has anything to claim"
    );
    assert!(
        env.claim(params(10)).await.claimed.is_empty(),
        "a claim never returns a handed-over run"
    );

    // The token fences like a claim's: a stranger is refused, the owner finishes.
    let stranger = env
        .finish(id, OwnerToken::fresh(), FinishAction::Cancel)
        .await;
    assert_eq!(
        stranger,
        FinishReply::LeaseLost { id },
        "a stranger is fenced"
    );
    let done = env
        .finish(id, claimed.owner, FinishAction::Complete { result: None })
        .await;
    assert_eq!(
        done,
        FinishReply::Applied {
            id,
            status: RunStatus::Completed
        },
        "the owner completes it"
    );

    // Given back (a stopping worker's `Release`), a handed-over run is pending like any
    // other, and the next claim takes it — also for a tenant that never had a run
    // enqueued the ordinary way (a store that lists tenants with pending runs learns of
    // it from the release).
    let (given_back, answer) =
        hand_off(&env, request(KIND_A).tenant("only-hand-offs"), lease).await;
    let HandOff::Started(claimed) = answer else {
        panic!("an idle store hands the run over, got {answer:?}");
    };
    let released = env
        .finish(given_back, claimed.owner, FinishAction::Release)
        .await;
    assert_eq!(
        released,
        FinishReply::Applied {
            id: given_back,
            status: RunStatus::Queued
        },
        "the owner gives it back"
    );
    let batch = env.claim(params(10)).await;
    assert_eq!(
        batch.claimed.iter().map(|c| c.run.id).collect::<Vec<_>>(),
        vec![given_back],
        "the next claim takes the given-back run"
    );
}

/// Hand-off never overtakes: a due pending run of the tenant at the run's priority or
/// above, a delay, a `run_at` or a held unique key each make it an ordinary enqueue
/// (`Queued`, answered as `run_enqueue_many` answers). Runs that a claim would take after
/// it (lower priority, scheduled for later, other tenants) do not stop it.
pub async fn hand_off_queues_a_run_that_would_overtake_a_due_one(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let lease = LEASE;

    // A due run of the tenant at the same priority: queued behind it.
    let waiting = env.enqueue(request(KIND_A).tenant("same")).await;
    let (behind, answer) = hand_off(&env, request(KIND_A).tenant("same"), lease).await;
    assert!(
        matches!(answer, HandOff::Queued(Enqueued::Inserted(id)) if id == behind),
        "queued behind a due run of its priority, got {answer:?}"
    );
    assert_eq!(env.get(behind).await.status, RunStatus::Queued);
    assert_ne!(waiting, behind);

    // A due run of higher priority: queued.
    env.enqueue(request(KIND_A).tenant("high").priority(5))
        .await;
    let (low, answer) = hand_off(&env, request(KIND_A).tenant("high"), lease).await;
    assert!(
        matches!(answer, HandOff::Queued(Enqueued::Inserted(id)) if id == low),
        "queued behind a due run of higher priority, got {answer:?}"
    );

    // A due run of lower priority would be claimed after it anyway: started.
    env.enqueue(request(KIND_A).tenant("low")).await;
    let (_, answer) = hand_off(&env, request(KIND_A).tenant("low").priority(5), lease).await;
    assert!(
        matches!(answer, HandOff::Started(_)),
        "a lower-priority due run does not stop it, got {answer:?}"
    );

    // Runs of the tenant scheduled for later do not stop it.
    env.enqueue(
        request(KIND_A)
            .tenant("scheduled")
            .delay(Duration::from_secs(60)),
    )
    .await;
    let (_, answer) = hand_off(&env, request(KIND_A).tenant("scheduled"), lease).await;
    assert!(
        matches!(answer, HandOff::Started(_)),
        "a run scheduled for later does not stop it, got {answer:?}"
    );

    // A delay or a run_at: queued for its time, like any enqueue.
    let (delayed, answer) = hand_off(
        &env,
        request(KIND_A)
            .tenant("later")
            .delay(Duration::from_secs(10)),
        lease,
    )
    .await;
    assert!(
        matches!(answer, HandOff::Queued(Enqueued::Inserted(id)) if id == delayed),
        "a delayed run is queued, got {answer:?}"
    );
    assert_eq!(env.get(delayed).await.status, RunStatus::Scheduled);
    let mut at = request(KIND_A).tenant("later");
    at.run_at = Some(env.now());
    let (timed, answer) = hand_off(&env, at, lease).await;
    assert!(
        matches!(answer, HandOff::Queued(Enqueued::Inserted(id)) if id == timed),
        "a run with a run_at is queued, got {answer:?}"
    );

    // A unique key held by a running (handed-over) run: the holder answers.
    let (holder, answer) =
        hand_off(&env, request(KIND_A).tenant("keyed").unique_key("k"), lease).await;
    assert!(
        matches!(answer, HandOff::Started(_)),
        "a free key is no obstacle, got {answer:?}"
    );
    let (_, answer) = hand_off(&env, request(KIND_A).tenant("keyed").unique_key("k"), lease).await;
    assert!(
        matches!(answer, HandOff::Queued(Enqueued::Existing(id)) if id == holder),
        "a held key answers its holder and inserts nothing, got {answer:?}"
    );
    let keyed = env
        .store
        .run_list(RunFilter {
            tenant: Some("keyed".into()),
            ..RunFilter::default()
        })
        .await
        .expect("run_list succeeds");
    assert_eq!(keyed.len(), 1, "one run holds the key: {keyed:?}");
}

/// A completion clears the error an earlier attempt left: a completed run has no
/// `last_error` (the failed attempt is history, counted in `attempts`).
pub async fn completion_clears_the_error_of_an_earlier_attempt(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let (id, owner) = env.running_run().await;
    env.finish(
        id,
        owner,
        FinishAction::Retry {
            delay: Duration::ZERO,
            error: "first try failed".into(),
        },
    )
    .await;
    assert_eq!(
        env.get(id).await.last_error.as_deref(),
        Some("first try failed"),
        "a retry keeps its reason"
    );
    let claimed = env.claim_one().await;
    assert!(
        matches!(
            env.finish(id, claimed.owner, FinishAction::Complete { result: None })
                .await,
            FinishReply::Applied { .. }
        ),
        "the second attempt completes"
    );
    let stored = env.get(id).await;
    assert_eq!(stored.status, RunStatus::Completed);
    assert_eq!(stored.last_error, None, "no error left on a completed run");
    assert_eq!(stored.attempts, 1, "the failed attempt is still counted");
}

// ---------------------------------------------------------------------------------------
// Retention
// ---------------------------------------------------------------------------------------

/// A run of `tenant` (with `key`, if any) taken to its end by `action` at the store's now.
async fn ended(env: &Env, tenant: &str, key: Option<&str>, action: FinishAction) -> RunId {
    let mut asked = request(KIND_A).tenant(tenant);
    if let Some(key) = key {
        asked = asked.unique_key(key);
    }
    let id = env.enqueue(asked).await;
    let claimed = env.claim_one().await;
    assert_eq!(claimed.run.id, id, "the one pending run is claimed");
    env.finish(id, claimed.owner, action).await;
    env.advance(Duration::from_secs(1));
    id
}

fn complete() -> FinishAction {
    FinishAction::Complete { result: None }
}

/// Retention deletes only finished runs of the status it names, whose end is past the
/// cutoff (a keyed run's past the key cutoff too), oldest end first, at most `limit` a
/// batch, never a kept run, the newest run of a kept key prefix, a run of a skipped
/// tenant — and never a pending or running one.
pub async fn prune_deletes_only_finished_runs_past_their_end_in_bounded_batches(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let c1 = ended(&env, "acme", None, complete()).await;
    let c2 = ended(&env, "acme", None, complete()).await;
    let s1 = ended(&env, "acme", Some("schedule:x"), complete()).await;
    let s2 = ended(&env, "acme", Some("schedule:x"), complete()).await;
    let w1 = ended(&env, "acme", Some("webhook:a:1"), complete()).await;
    let c3 = ended(&env, "acme", None, complete()).await;
    let b1 = ended(&env, "globex", None, complete()).await;
    let failed = ended(
        &env,
        "acme",
        None,
        FinishAction::Fail {
            error: "boom".into(),
        },
    )
    .await;
    let cancelled = ended(&env, "acme", None, FinishAction::Cancel).await;
    let running = env.enqueue(request(KIND_A).tenant("acme")).await;
    let claimed = env.claim_one().await;
    assert_eq!(claimed.run.id, running);
    let pending = env.enqueue(request(KIND_A).tenant("acme")).await;
    let now = env.now();
    let later = after(now, Duration::from_secs(3600));
    let prune = |limit| Prune {
        status: RunStatus::Completed,
        tenant: None,
        skip_tenants: Vec::new(),
        finished_before: later,
        keyed_finished_before: later,
        keep: vec![c2],
        keep_newest_of: vec!["schedule:".to_owned()],
        limit,
    };
    let exists = |id: RunId| {
        let store = env.store.clone();
        async move { store.run_get(id).await.expect("a read").is_some() }
    };

    // Keyed runs whose end is within the key window stay, whatever the status cutoff.
    let within_window = Prune {
        keyed_finished_before: env.now() - chrono::Duration::hours(1),
        ..prune(100)
    };
    assert_eq!(
        env.store.run_prune(&within_window).await.expect("prune"),
        3,
        "c1, c3, b1"
    );
    assert!(
        exists(s1).await && exists(w1).await,
        "keyed runs within the window stay"
    );
    assert!(!exists(c1).await && !exists(c3).await && !exists(b1).await);

    // Bounded batches, oldest end first: s1 (the older of its key) then w1.
    assert_eq!(
        env.store.run_prune(&prune(1)).await.expect("prune"),
        1,
        "one a batch"
    );
    assert!(
        !exists(s1).await && exists(w1).await,
        "the oldest end goes first"
    );
    assert_eq!(env.store.run_prune(&prune(1)).await.expect("prune"), 1);
    assert!(!exists(w1).await);
    assert_eq!(
        env.store.run_prune(&prune(10)).await.expect("prune"),
        0,
        "nothing left to delete"
    );
    assert!(exists(c2).await, "a kept run stays");
    assert!(exists(s2).await, "the newest run of a schedule stays");
    for id in [failed, cancelled, running, pending] {
        assert!(exists(id).await, "{id}: another status, or not finished");
    }

    // Another status; a status that is not finished deletes nothing.
    for status in [RunStatus::Running, RunStatus::Queued, RunStatus::Scheduled] {
        let asked = Prune {
            status,
            keep: Vec::new(),
            ..prune(100)
        };
        assert_eq!(
            env.store.run_prune(&asked).await.expect("prune"),
            0,
            "{status:?} is not finished"
        );
    }
    assert!(exists(running).await && exists(pending).await);

    // A tenant's own pass, and a pass that skips it.
    let other = ended(
        &env,
        "globex",
        None,
        FinishAction::Fail { error: "x".into() },
    )
    .await;
    let failed_prune = |tenant: Option<&str>, skip: &[&str]| Prune {
        status: RunStatus::Failed,
        tenant: tenant.map(str::to_owned),
        skip_tenants: skip.iter().map(|tenant| (*tenant).to_owned()).collect(),
        keep: Vec::new(),
        finished_before: after(env.now(), Duration::from_secs(3600)),
        keyed_finished_before: after(env.now(), Duration::from_secs(3600)),
        ..prune(100)
    };
    assert_eq!(
        env.store
            .run_prune(&failed_prune(None, &["acme", "globex"]))
            .await
            .expect("prune"),
        0
    );
    assert_eq!(
        env.store
            .run_prune(&failed_prune(Some("globex"), &[]))
            .await
            .expect("prune"),
        1
    );
    assert!(
        !exists(other).await && exists(failed).await,
        "only globex's"
    );
    assert_eq!(
        env.store
            .run_prune(&failed_prune(None, &["globex"]))
            .await
            .expect("prune"),
        1
    );
    assert!(!exists(failed).await);

    // A run whose end is not past the cutoff stays.
    let early = Prune {
        status: RunStatus::Cancelled,
        finished_before: now - chrono::Duration::hours(1),
        keep: Vec::new(),
        ..prune(100)
    };
    assert_eq!(env.store.run_prune(&early).await.expect("prune"), 0);
    assert!(exists(cancelled).await);
}

/// What `run_stats` answers, recounted from every row `run_list` reads: the counts per
/// status and kind and the counters' sums.
async fn recount(env: &Env) -> RunStats {
    let mut stats = RunStats::default();
    let mut before = None;
    loop {
        let page = env
            .store
            .run_list(RunFilter {
                before,
                limit: RunFilter::MAX_PAGE,
                ..RunFilter::default()
            })
            .await
            .expect("a list");
        for run in &page {
            stats.add(
                &run.kind,
                run.status,
                1,
                [
                    u64::from(run.attempts),
                    u64::from(run.reclaims),
                    u64::from(run.parks),
                ],
            );
        }
        match page.last() {
            Some(last) if page.len() == RunFilter::MAX_PAGE => before = Some(last.id),
            _ => return stats,
        }
    }
}

/// `run_stats` does not scan the history, yet after every kind of write into and out of
/// a finished status — a finish of each kind, a cancel of a pending run, a retry that
/// takes a failed run back to pending, a finish of the retried run, a delete by
/// retention — it answers exactly what a count of every row does, counters included;
/// `compact_counts` changes none of it.
pub async fn run_stats_follow_every_write_into_and_out_of_finished(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let check = |when: &'static str| {
        let env = &env;
        async move {
            let stats = env.store.run_stats().await.expect("run_stats succeeds");
            assert_eq!(
                stats,
                recount(env).await,
                "after {when}: counted as every row is"
            );
        }
    };
    check("nothing").await;
    let done = ended(&env, "acme", None, complete()).await;
    ended(&env, "acme", None, complete()).await;
    ended(&env, "globex", None, FinishAction::Cancel).await;
    let failed = ended(
        &env,
        "acme",
        None,
        FinishAction::Fail {
            error: "broken".into(),
        },
    )
    .await;
    env.enqueue(request(KIND_B).tenant("acme")).await;
    check("finishes").await;
    let pending = env.enqueue(request(KIND_B).tenant("globex")).await;
    let cancelled = env.store.run_request_cancel(pending).await.expect("cancel");
    assert_eq!(cancelled, CancelReply::Cancelled);
    check("a cancel of a pending run").await;
    assert_eq!(
        env.store.run_retry(failed).await.expect("retry"),
        RetryReply::Requeued
    );
    check("a retry out of failed").await;
    let mut claimed = env.claim(params(5)).await.claimed;
    claimed.retain(|run| run.run.id == failed);
    let again = claimed.pop().expect("the retried run is claimed again");
    env.finish(failed, again.owner, complete()).await;
    check("the retried run completed, with two attempts").await;
    env.advance(Duration::from_secs(3600));
    let deleted = env
        .store
        .run_prune(&Prune {
            status: RunStatus::Completed,
            tenant: Some("acme".into()),
            skip_tenants: Vec::new(),
            finished_before: env.now(),
            keyed_finished_before: env.now(),
            keep: vec![done],
            keep_newest_of: Vec::new(),
            limit: 100,
        })
        .await
        .expect("prune");
    assert_eq!(deleted, 2, "the completed runs of acme but the kept one");
    check("a delete by retention").await;
    env.store.compact_counts().await.expect("compact");
    check("compacting the counts").await;
}

/// `run_finish_and_claim` writes the finishes first, answering each by its own token (a
/// stale one is lease lost), then makes the claim round, which may take a run those
/// finishes just put back due now; with no finishes it is a claim.
pub async fn finish_and_claim_writes_the_finishes_then_claims(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let ids: Vec<RunId> = env
        .dispatcher
        .enqueue_many((0..3).map(|_| request(KIND_A)).collect())
        .await
        .expect("enqueue succeeds")
        .into_iter()
        .map(Enqueued::id)
        .collect();
    let first = env.claim(params(2)).await.claimed;
    assert_eq!(first.len(), 2, "two of the three claimed");
    let (done, released) = (&first[0], &first[1]);
    let waiting = *ids
        .iter()
        .find(|id| **id != done.run.id && **id != released.run.id)
        .expect("one run still pending");
    let finishes = vec![
        Finish {
            id: done.run.id,
            owner: done.owner,
            action: FinishAction::Complete { result: None },
        },
        Finish {
            id: released.run.id,
            owner: released.owner,
            action: FinishAction::Release,
        },
        Finish {
            id: waiting,
            owner: OwnerToken::fresh(),
            action: FinishAction::Complete { result: None },
        },
    ];
    let (replies, claimed) = env
        .store
        .run_finish_and_claim(finishes, params(5))
        .await
        .expect("the finishes are written");
    assert_eq!(
        replies,
        vec![
            FinishReply::Applied {
                id: done.run.id,
                status: RunStatus::Completed
            },
            FinishReply::Applied {
                id: released.run.id,
                status: RunStatus::Queued
            },
            FinishReply::LeaseLost { id: waiting },
        ],
        "each finish answered in order, by its own token"
    );
    let claimed = claimed.expect("the claim round is made");
    let mut taken: Vec<RunId> = claimed.claimed.iter().map(|c| c.run.id).collect();
    taken.sort();
    let mut expected = vec![released.run.id, waiting];
    expected.sort();
    assert_eq!(
        taken, expected,
        "the round takes the pending run and the one just given back"
    );
    let again = claimed
        .claimed
        .iter()
        .find(|c| c.run.id == released.run.id)
        .expect("the released run was claimed again");
    assert_ne!(again.owner, released.owner, "with a fresh owner token");
    assert!(!again.reclaimed, "as a claim, not a reclaim");
    assert_eq!(env.get(done.run.id).await.status, RunStatus::Completed);

    let (replies, empty) = env
        .store
        .run_finish_and_claim(Vec::new(), params(5))
        .await
        .expect("a claim alone");
    assert!(replies.is_empty());
    assert!(
        empty.expect("the claim round is made").claimed.is_empty(),
        "nothing left to claim"
    );
}
