//! The runtime scenarios (`fronta_store_tests::runtime_scenarios!`) on Postgres: the
//! seed's verified scenario and the executor's durability, through the engine worker, the
//! executor and one database holding runs, desk and automations, with the case's manual
//! clock injected into every statement.

mod support;

use std::sync::{Arc, Mutex};

use fronta_engine::ManualClock;
use fronta_store_tests::scenario_cases::{RuntimeFactory, RuntimeStores};

use crate::support::TestDb;

/// Opens each store on a fresh database, dropped with the factory (the end of the case).
struct PgRuntimeFactory {
    databases: Mutex<Vec<TestDb>>,
}

#[fronta_store_tests::async_trait]
impl RuntimeFactory for PgRuntimeFactory {
    async fn open_runtime(&self, clock: ManualClock) -> RuntimeStores {
        let database = TestDb::create().await;
        let store = database.store(Some(Arc::new(clock))).await;
        self.databases
            .lock()
            .expect("databases lock")
            .push(database);
        let for_sink = store.clone();
        RuntimeStores {
            runs: Arc::new(store.clone()),
            desk: Arc::new(store.clone()),
            automations: Arc::new(store.clone()),
            cursors: Arc::new(store),
            install_sink: Box::new(move |sink| for_sink.set_ticket_event_sink(sink)),
        }
    }
}

fronta_store_tests::runtime_scenarios!(PgRuntimeFactory {
    databases: Mutex::new(Vec::new())
});
