//! The shared conformance suite (`fronta-store-tests`) run against [`MemoryStore`]: the
//! proof that the simulation's store keeps the same contract as the SQLite and Postgres
//! stores, case for case.

use std::sync::Arc;

use fronta_engine::{ManualClock, RunStore};
use fronta_sim::MemoryStore;
use fronta_store_tests::StoreFactory;

struct MemoryFactory;

#[fronta_store_tests::async_trait]
impl StoreFactory for MemoryFactory {
    async fn open(&self, clock: ManualClock) -> Arc<dyn RunStore> {
        Arc::new(MemoryStore::new(Arc::new(clock)))
    }
}

fronta_store_tests::conformance_suite!(MemoryFactory);
