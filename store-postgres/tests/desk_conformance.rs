//! The shared desk conformance suite (`fronta_store_tests::desk_conformance_suite!`) run
//! against the Postgres store: every case gets a fresh database on the test server (see
//! `support`), judged by the database's clock (no desk case moves time).

mod support;

use std::sync::{Arc, Mutex};

use fronta_desk::DeskStore;
use fronta_desk::access::AccessStore;
use fronta_store_tests::DeskStoreFactory;

use crate::support::TestDb;

/// Opens each store on a fresh database, dropped with the factory (the end of the case).
struct PgDeskFactory {
    databases: Mutex<Vec<TestDb>>,
}

impl PgDeskFactory {
    fn new() -> Self {
        Self {
            databases: Mutex::new(Vec::new()),
        }
    }

    async fn open(&self) -> fronta_store_postgres::PgStore {
        let database = TestDb::create().await;
        let store = database.store(None).await;
        self.databases
            .lock()
            .expect("databases lock")
            .push(database);
        store
    }
}

#[fronta_store_tests::async_trait]
impl DeskStoreFactory for PgDeskFactory {
    async fn open_desk(&self) -> Arc<dyn DeskStore> {
        Arc::new(self.open().await)
    }

    async fn open_access(&self) -> (Arc<dyn DeskStore>, Arc<dyn AccessStore>) {
        let store = self.open().await;
        (Arc::new(store.clone()), Arc::new(store))
    }
}

fronta_store_tests::desk_conformance_suite!(PgDeskFactory::new());
