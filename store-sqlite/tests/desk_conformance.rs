//! The shared desk conformance suite (`fronta_store_tests::desk_conformance_suite!`) run
//! against the SQLite store: every case gets a fresh database file in its own temporary
//! directory.

use std::sync::{Arc, Mutex};

use fronta_desk::DeskStore;
use fronta_desk::access::AccessStore;
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use fronta_store_tests::DeskStoreFactory;
use tempfile::TempDir;

/// Opens each store in a fresh temporary directory, kept until the factory is dropped
/// (the end of the case).
struct SqliteDeskFactory {
    dirs: Mutex<Vec<TempDir>>,
}

impl SqliteDeskFactory {
    fn new() -> Self {
        Self {
            dirs: Mutex::new(Vec::new()),
        }
    }

    fn open(&self) -> SqliteStore {
        let dir = TempDir::new().expect("a temporary directory");
        let config = SqliteConfig::new(dir.path().join("fronta.db"));
        let store = SqliteStore::open(config).expect("a fresh SQLite store opens");
        self.dirs.lock().expect("dirs lock").push(dir);
        store
    }
}

#[fronta_store_tests::async_trait]
impl DeskStoreFactory for SqliteDeskFactory {
    async fn open_desk(&self) -> Arc<dyn DeskStore> {
        Arc::new(self.open())
    }

    async fn open_access(&self) -> (Arc<dyn DeskStore>, Arc<dyn AccessStore>) {
        let store = self.open();
        (Arc::new(store.clone()), Arc::new(store))
    }
}

fronta_store_tests::desk_conformance_suite!(SqliteDeskFactory::new());
