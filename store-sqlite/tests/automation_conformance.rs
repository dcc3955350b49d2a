//! The shared automation conformance suite
//! (`fronta_store_tests::automation_conformance_suite!`) run against the SQLite store:
//! saved automations, the loop guard, the ticket event sink and secrets. Every case gets a fresh
//! database file in its own temporary directory.

use std::sync::{Arc, Mutex};

use fronta_automation::secrets::SecretStore;
use fronta_automation::service_limits::ServiceLimits;
use fronta_automation::store::{AutomationStore, TicketEventSink};
use fronta_desk::DeskStore;
use fronta_engine::{ManualClock, RunStore};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use fronta_store_tests::AutomationStoreFactory;
use tempfile::TempDir;

/// Opens each store in a fresh temporary directory, kept until the factory is dropped
/// (the end of the case).
struct SqliteAutomationFactory {
    dirs: Mutex<Vec<TempDir>>,
}

impl SqliteAutomationFactory {
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
impl AutomationStoreFactory for SqliteAutomationFactory {
    async fn open_automations(&self) -> (Arc<dyn AutomationStore>, Arc<dyn DeskStore>) {
        let store = self.open();
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_with_sink(
        &self,
        sink: TicketEventSink,
    ) -> (
        Arc<dyn DeskStore>,
        Arc<dyn RunStore>,
        Arc<dyn AutomationStore>,
    ) {
        let store = self.open();
        store.set_ticket_event_sink(sink);
        (
            Arc::new(store.clone()),
            Arc::new(store.clone()),
            Arc::new(store),
        )
    }

    async fn open_secrets(&self) -> (Arc<dyn SecretStore>, Arc<dyn DeskStore>) {
        let store = self.open();
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_poll_cursors(
        &self,
    ) -> (
        Arc<dyn fronta_automation::poll::PollCursors>,
        Arc<dyn AutomationStore>,
        Arc<dyn DeskStore>,
    ) {
        let store = self.open();
        (
            Arc::new(store.clone()),
            Arc::new(store.clone()),
            Arc::new(store),
        )
    }

    async fn open_automations_at(
        &self,
        clock: ManualClock,
    ) -> (Arc<dyn AutomationStore>, Arc<dyn DeskStore>) {
        let dir = TempDir::new().expect("a temporary directory");
        let mut config = SqliteConfig::new(dir.path().join("fronta.db"));
        config.clock = Arc::new(clock);
        let store = SqliteStore::open(config).expect("a fresh SQLite store opens");
        self.dirs.lock().expect("dirs lock").push(dir);
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_limits(
        &self,
        clock: ManualClock,
    ) -> (Arc<dyn ServiceLimits>, Arc<dyn DeskStore>) {
        let dir = TempDir::new().expect("a temporary directory");
        let mut config = SqliteConfig::new(dir.path().join("fronta.db"));
        config.clock = Arc::new(clock);
        let store = SqliteStore::open(config).expect("a fresh SQLite store opens");
        self.dirs.lock().expect("dirs lock").push(dir);
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_mcp_servers(
        &self,
    ) -> (
        Arc<dyn fronta_automation::mcp::McpServerStore>,
        Arc<dyn DeskStore>,
    ) {
        let store = self.open();
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_mail_servers(
        &self,
    ) -> (
        Arc<dyn fronta_automation::mail::MailServerStore>,
        Arc<dyn DeskStore>,
    ) {
        let store = self.open();
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_widgets(
        &self,
        clock: ManualClock,
    ) -> (
        Arc<dyn fronta_automation::widget::WidgetStore>,
        Arc<dyn DeskStore>,
    ) {
        let dir = TempDir::new().expect("a temporary directory");
        let mut config = SqliteConfig::new(dir.path().join("fronta.db"));
        config.clock = Arc::new(clock);
        let store = SqliteStore::open(config).expect("a fresh SQLite store opens");
        self.dirs.lock().expect("dirs lock").push(dir);
        (Arc::new(store.clone()), Arc::new(store))
    }
}

fronta_store_tests::automation_conformance_suite!(SqliteAutomationFactory::new());
