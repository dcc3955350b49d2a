//! The runtime scenarios (`fronta_store_tests::runtime_scenarios!`) on SQLite: the seed's
//! verified scenario and the executor's durability, through the engine worker, the
//! executor and one SQLite database holding runs, desk and automations.

use std::sync::{Arc, Mutex};

use fronta_engine::ManualClock;
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use fronta_store_tests::scenario_cases::{RuntimeFactory, RuntimeStores};
use tempfile::TempDir;

struct SqliteRuntimeFactory {
    dirs: Mutex<Vec<TempDir>>,
}

#[fronta_store_tests::async_trait]
impl RuntimeFactory for SqliteRuntimeFactory {
    async fn open_runtime(&self, clock: ManualClock) -> RuntimeStores {
        let dir = TempDir::new().expect("a temporary directory");
        let mut config = SqliteConfig::new(dir.path().join("fronta.db"));
        config.clock = Arc::new(clock);
        let store = SqliteStore::open(config).expect("a fresh SQLite store opens");
        self.dirs.lock().expect("dirs lock").push(dir);
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

fronta_store_tests::runtime_scenarios!(SqliteRuntimeFactory {
    dirs: Mutex::new(Vec::new())
});
