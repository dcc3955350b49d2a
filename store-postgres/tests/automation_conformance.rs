//! The shared automation conformance suite
//! (`fronta_store_tests::automation_conformance_suite!`) run against the Postgres store:
//! saved automations, the loop guard, the ticket event sink and secrets. Every case gets a fresh
//! database on the test server (see `support`), judged by the database's clock (the
//! guard is given its `now` by the cases).

mod support;

use std::sync::{Arc, Mutex};

use fronta_automation::secrets::SecretStore;
use fronta_automation::service_limits::ServiceLimits;
use fronta_automation::store::{AutomationStore, TicketEventSink};
use fronta_desk::DeskStore;
use fronta_engine::{ManualClock, RunStore};
use fronta_store_postgres::PgStore;
use fronta_store_tests::AutomationStoreFactory;

use crate::support::TestDb;

/// Opens each store on a fresh database, dropped with the factory (the end of the case).
struct PgAutomationFactory {
    databases: Mutex<Vec<TestDb>>,
}

impl PgAutomationFactory {
    fn new() -> Self {
        Self {
            databases: Mutex::new(Vec::new()),
        }
    }

    async fn open(&self) -> PgStore {
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
impl AutomationStoreFactory for PgAutomationFactory {
    async fn open_automations(&self) -> (Arc<dyn AutomationStore>, Arc<dyn DeskStore>) {
        let store = self.open().await;
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
        let store = self.open().await;
        store.set_ticket_event_sink(sink);
        (
            Arc::new(store.clone()),
            Arc::new(store.clone()),
            Arc::new(store),
        )
    }

    async fn open_secrets(&self) -> (Arc<dyn SecretStore>, Arc<dyn DeskStore>) {
        let store = self.open().await;
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_poll_cursors(
        &self,
    ) -> (
        Arc<dyn fronta_automation::poll::PollCursors>,
        Arc<dyn AutomationStore>,
        Arc<dyn DeskStore>,
    ) {
        let store = self.open().await;
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
        let database = TestDb::create().await;
        let store = database.store(Some(Arc::new(clock))).await;
        self.databases
            .lock()
            .expect("databases lock")
            .push(database);
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_limits(
        &self,
        clock: ManualClock,
    ) -> (Arc<dyn ServiceLimits>, Arc<dyn DeskStore>) {
        let database = TestDb::create().await;
        let store = database.store(Some(Arc::new(clock))).await;
        self.databases
            .lock()
            .expect("databases lock")
            .push(database);
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_mcp_servers(
        &self,
    ) -> (
        Arc<dyn fronta_automation::mcp::McpServerStore>,
        Arc<dyn DeskStore>,
    ) {
        let store = self.open().await;
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_mail_servers(
        &self,
    ) -> (
        Arc<dyn fronta_automation::mail::MailServerStore>,
        Arc<dyn DeskStore>,
    ) {
        let store = self.open().await;
        (Arc::new(store.clone()), Arc::new(store))
    }

    async fn open_widgets(
        &self,
        clock: ManualClock,
    ) -> (
        Arc<dyn fronta_automation::widget::WidgetStore>,
        Arc<dyn DeskStore>,
    ) {
        let database = TestDb::create().await;
        let store = database.store(Some(Arc::new(clock))).await;
        self.databases
            .lock()
            .expect("databases lock")
            .push(database);
        (Arc::new(store.clone()), Arc::new(store))
    }
}

fronta_store_tests::automation_conformance_suite!(PgAutomationFactory::new());
