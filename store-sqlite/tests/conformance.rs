//! The shared conformance suite (`fronta-store-tests`) run against the SQLite store: every
//! case gets a fresh database file in its own temporary directory and the case's manual
//! clock.

use std::sync::{Arc, Mutex};

use fronta_engine::{ManualClock, RunStore};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use fronta_store_tests::StoreFactory;
use tempfile::TempDir;

/// Opens each store in a fresh temporary directory, kept until the factory is dropped
/// (the end of the case).
struct SqliteFactory {
    dirs: Mutex<Vec<TempDir>>,
}

impl SqliteFactory {
    fn new() -> Self {
        Self {
            dirs: Mutex::new(Vec::new()),
        }
    }
}

#[fronta_store_tests::async_trait]
impl StoreFactory for SqliteFactory {
    async fn open(&self, clock: ManualClock) -> Arc<dyn RunStore> {
        let dir = TempDir::new().expect("a temporary directory");
        let mut config = SqliteConfig::new(dir.path().join("fronta.db"));
        config.clock = Arc::new(clock);
        let store = SqliteStore::open(config).expect("a fresh SQLite store opens");
        self.dirs.lock().expect("dirs lock").push(dir);
        Arc::new(store)
    }
}

fronta_store_tests::conformance_suite!(SqliteFactory::new());
