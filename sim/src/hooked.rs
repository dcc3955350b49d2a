//! A [`MemoryStore`] with hooks on a worker's three writes — the claim round, the
//! heartbeat and the finish batch — for tests that watch a worker through its store
//! (count rounds, record batches, cut heartbeats). A test implements [`Hooks`] for the
//! calls it watches; the defaults and every other call of the port go to the memory
//! store as they are.

use std::sync::Arc;

use async_trait::async_trait;
use fronta_engine::store::{
    CancelReply, CheckpointParams, ClaimBatch, ClaimParams, Enqueued, Finish, FinishReply,
    HeartbeatReply, LeaseRenewal, RetryReply, RunFilter, RunStats, StoreResult,
};
use fronta_engine::{NewRun, Run, RunId, RunStore};
use tokio::sync::Notify;

use crate::memory::MemoryStore;

/// What a test does around the memory store's writes; each default passes the call on.
#[async_trait]
pub trait Hooks: Send + Sync + 'static {
    async fn claim(&self, store: &MemoryStore, params: ClaimParams) -> StoreResult<ClaimBatch> {
        store.run_claim(params).await
    }

    async fn heartbeat(
        &self,
        store: &MemoryStore,
        renewals: Vec<LeaseRenewal>,
    ) -> StoreResult<Vec<HeartbeatReply>> {
        store.run_heartbeat_many(renewals).await
    }

    async fn finish(
        &self,
        store: &MemoryStore,
        finishes: Vec<Finish>,
    ) -> StoreResult<Vec<FinishReply>> {
        store.run_finish_many(finishes).await
    }
}

/// The memory store `store`, its claims, heartbeats and finishes going through `hooks`.
pub struct Hooked<H> {
    pub store: MemoryStore,
    pub hooks: H,
}

#[async_trait]
impl<H: Hooks> RunStore for Hooked<H> {
    async fn run_enqueue_many(&self, runs: Vec<NewRun>) -> StoreResult<Vec<Enqueued>> {
        self.store.run_enqueue_many(runs).await
    }
    async fn run_claim(&self, params: ClaimParams) -> StoreResult<ClaimBatch> {
        self.hooks.claim(&self.store, params).await
    }
    async fn run_heartbeat_many(
        &self,
        renewals: Vec<LeaseRenewal>,
    ) -> StoreResult<Vec<HeartbeatReply>> {
        self.hooks.heartbeat(&self.store, renewals).await
    }
    async fn run_checkpoint(&self, params: CheckpointParams) -> StoreResult<()> {
        self.store.run_checkpoint(params).await
    }
    async fn run_finish_many(&self, finishes: Vec<Finish>) -> StoreResult<Vec<FinishReply>> {
        self.hooks.finish(&self.store, finishes).await
    }
    async fn run_request_cancel(&self, id: RunId) -> StoreResult<CancelReply> {
        self.store.run_request_cancel(id).await
    }
    async fn run_retry(&self, id: RunId) -> StoreResult<RetryReply> {
        self.store.run_retry(id).await
    }
    async fn run_get(&self, id: RunId) -> StoreResult<Option<Run>> {
        self.store.run_get(id).await
    }
    async fn run_find_by_key(&self, tenant: &str, key: &str) -> StoreResult<Option<Run>> {
        self.store.run_find_by_key(tenant, key).await
    }
    async fn run_list(&self, filter: RunFilter) -> StoreResult<Vec<Run>> {
        self.store.run_list(filter).await
    }
    async fn reclaim_space(&self, pages: u32) -> StoreResult<u64> {
        self.store.reclaim_space(pages).await
    }
    async fn oldest_finished(&self) -> StoreResult<Option<chrono::DateTime<chrono::Utc>>> {
        self.store.oldest_finished().await
    }
    async fn run_prune(&self, prune: &fronta_engine::store::Prune) -> StoreResult<u64> {
        self.store.run_prune(prune).await
    }
    async fn run_stats(&self) -> StoreResult<RunStats> {
        self.store.run_stats().await
    }
    async fn run_busy(&self) -> StoreResult<bool> {
        self.store.run_busy().await
    }
    async fn store_ready(&self) -> StoreResult<()> {
        self.store.store_ready().await
    }
    fn enqueue_signal(&self) -> Arc<Notify> {
        self.store.enqueue_signal()
    }
}
