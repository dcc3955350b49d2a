//! The shared conformance suite (`fronta-store-tests`) run against the Postgres store:
//! every case gets a fresh database on the test server (`FRONTA_TEST_DATABASE_URL`,
//! default `postgres://postgres@127.0.0.1:5432/postgres`) and the case's manual clock,
//! injected into every statement in place of the database's `now()`.

mod support;

use std::sync::{Arc, Mutex};

use fronta_engine::{ManualClock, RunStore};
use fronta_store_tests::StoreFactory;

use crate::support::TestDb;

/// Opens each store on a fresh database, dropped with the factory (the end of the case).
struct PgFactory {
    databases: Mutex<Vec<TestDb>>,
}

impl PgFactory {
    fn new() -> Self {
        Self {
            databases: Mutex::new(Vec::new()),
        }
    }
}

#[fronta_store_tests::async_trait]
impl StoreFactory for PgFactory {
    async fn open(&self, clock: ManualClock) -> Arc<dyn RunStore> {
        let database = TestDb::create().await;
        let store = database.store(Some(Arc::new(clock))).await;
        self.databases
            .lock()
            .expect("databases lock")
            .push(database);
        Arc::new(store)
    }
}

fronta_store_tests::conformance_suite!(PgFactory::new());
