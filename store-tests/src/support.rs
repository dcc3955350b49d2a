//! Shared fixtures of the cases: a store with its manual clock, enqueue and claim
//! shortcuts, and a bounded wait for things the worker does on its own time. Nothing
//! here asserts on speed: waits are liveness bounds, generous on purpose.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fronta_engine::{
    ClaimBatch, ClaimParams, ClaimedRun, Clock, Dispatcher, EnqueueRequest, Enqueued, Finish,
    FinishAction, FinishReply, ManualClock, OwnerToken, Run, RunId, RunStatus, RunStore,
};

use crate::StoreFactory;

/// The kinds every store-level case's dispatcher knows.
pub const KIND_A: &str = "kind-a";
pub const KIND_B: &str = "kind-b";
/// A kind with a lease of its own in [`params_with_durable`].
pub const KIND_DURABLE: &str = "kind-durable";

/// The lease of kinds without their own in the store-level cases.
pub const LEASE: Duration = Duration::from_secs(60);
/// The lease of [`KIND_DURABLE`] in [`params_with_durable`].
pub const DURABLE_LEASE: Duration = Duration::from_secs(600);

/// How long a case waits for something the worker does by itself before it gives up.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A fresh store and the clock it reads.
pub struct Env {
    pub store: Arc<dyn RunStore>,
    pub clock: ManualClock,
    pub dispatcher: Dispatcher,
}

impl Env {
    pub async fn open(factory: &dyn StoreFactory) -> Self {
        let clock = ManualClock::at_fixed_start();
        let store = factory.open(clock.clone()).await;
        let dispatcher = Dispatcher::new(store.clone(), [KIND_A, KIND_B, KIND_DURABLE]);
        Self {
            store,
            clock,
            dispatcher,
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Enqueue one run through the dispatcher; it must be inserted.
    pub async fn enqueue(&self, request: EnqueueRequest) -> RunId {
        match self
            .dispatcher
            .enqueue(request)
            .await
            .expect("enqueue of a valid request succeeds")
        {
            Enqueued::Inserted(id) => id,
            other => panic!("expected a new run to be inserted, got {other:?}"),
        }
    }

    /// Enqueue a due run of [`KIND_A`] with 3 retries.
    pub async fn enqueue_a(&self) -> RunId {
        self.enqueue(request(KIND_A)).await
    }

    pub async fn get(&self, id: RunId) -> Run {
        self.store
            .run_get(id)
            .await
            .expect("run_get succeeds")
            .unwrap_or_else(|| panic!("run {id} exists"))
    }

    pub async fn claim(&self, params: ClaimParams) -> ClaimBatch {
        self.store
            .run_claim(params)
            .await
            .expect("run_claim succeeds")
    }

    /// Claim exactly one run (with [`params`]`(1)`) and hand it back.
    pub async fn claim_one(&self) -> ClaimedRun {
        let mut batch = self.claim(params(1)).await;
        assert_eq!(
            batch.claimed.len(),
            1,
            "expected one claimable run, got {:?}",
            batch.claimed
        );
        batch.claimed.remove(0)
    }

    /// Enqueue a run of [`KIND_A`] and claim it.
    pub async fn running_run(&self) -> (RunId, OwnerToken) {
        let id = self.enqueue_a().await;
        let claimed = self.claim_one().await;
        assert_eq!(claimed.run.id, id, "the only due run is claimed");
        (id, claimed.owner)
    }

    pub async fn finish(&self, id: RunId, owner: OwnerToken, action: FinishAction) -> FinishReply {
        let mut replies = self
            .store
            .run_finish_many(vec![Finish { id, owner, action }])
            .await
            .expect("run_finish_many succeeds");
        assert_eq!(replies.len(), 1, "one reply per finish: {replies:?}");
        replies.remove(0)
    }
}

/// A request for a due run of `kind` with 3 retries.
pub fn request(kind: &str) -> EnqueueRequest {
    EnqueueRequest::new(kind, serde_json::json!({ "kind": kind }), 3)
}

/// Claim params: `limit`, the default [`LEASE`], no per-kind leases, 5 reclaims.
pub fn params(limit: usize) -> ClaimParams {
    ClaimParams {
        limit,
        default_lease: LEASE,
        leases: HashMap::new(),
        max_reclaims: 5,
        holder: None,
    }
}

/// [`params`] plus [`DURABLE_LEASE`] for [`KIND_DURABLE`].
pub fn params_with_durable(limit: usize) -> ClaimParams {
    let mut params = params(limit);
    params.leases.insert(KIND_DURABLE.to_owned(), DURABLE_LEASE);
    params
}

/// `at + by`.
pub fn after(at: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    fronta_engine::clock::add(at, by)
}

/// Wait until `check` holds, polling every 10 ms; panic after [`PATIENCE`].
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up after {PATIENCE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Wait until run `id` has `status`.
pub async fn wait_for_status(store: &Arc<dyn RunStore>, id: RunId, status: RunStatus) -> Run {
    let mut last = None;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let run = store.run_get(id).await.expect("run_get succeeds");
        if let Some(run) = run {
            if run.status == status {
                return run;
            }
            last = Some(run);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up after {PATIENCE:?} waiting for run {id} to be {status}; last seen: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
