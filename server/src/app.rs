//! [`App`]: what every handler shares — the configuration, the ports ([`Ports`]: runs,
//! desk, automations, secrets, service limits, MCP and mail servers, widgets, the guarded
//! connectors and their address policy), the dispatcher, the rate limiters, the stream hub and the metrics it
//! reports. Cheap to clone.
//!
//! The server depends on no store crate: it gets each port as an `Arc<dyn …>` from
//! whoever starts it (the binary, a test), and a [`Dispatcher`] built from a registry that
//! knows the automation kind (`fronta_automation::executor::AUTOMATION_KIND`).
//!
//! Left out: the worker (the binary runs one beside the server, or not).

use std::sync::{Arc, OnceLock};

use fronta_automation::connector::{Connector, HostPolicy};
use fronta_automation::mail::MailServerStore;
use fronta_automation::mcp::McpServerStore;
use fronta_automation::secrets::{SecretCipher, SecretStore, SecretVault};
use fronta_automation::service_limits::ServiceLimits;
use fronta_automation::store::AutomationStore;
use fronta_automation::widget::{WidgetService, WidgetStore};
use fronta_desk::DeskStore;
use fronta_desk::access::AccessStore;
use fronta_engine::{Clock, Dispatcher, RunStore, SystemClock, WorkerMetrics};

use crate::config::ServerConfig;
use crate::metrics::{StoreCounters, WebhookMetrics};
use crate::ratelimit::Limiter;
use crate::stream::Hub;

/// The storage ports the server works on.
#[derive(Clone)]
pub struct Ports {
    pub runs: Arc<dyn RunStore>,
    pub desk: Arc<dyn DeskStore>,
    /// Named tokens with roles, the operator's admin tokens, the audit log.
    pub access: Arc<dyn AccessStore>,
    pub automations: Arc<dyn AutomationStore>,
    /// Per-tenant sealed secrets (`/api/secrets`).
    pub secrets: Arc<dyn SecretStore>,
    /// Seals secret values; `None` when no key is configured (`PUT /api/secrets/…`
    /// then answers 409 `secrets_not_configured`).
    pub secret_cipher: Option<Arc<dyn SecretCipher>>,
    /// Per-(tenant, service) limits and breakers (`/api/services`, `/metrics`).
    pub limits: Arc<dyn ServiceLimits>,
    /// Per-tenant MCP servers (`/api/mcp-servers`).
    pub mcp_servers: Arc<dyn McpServerStore>,
    /// Per-tenant mail servers (`/api/mail-servers`).
    pub mail_servers: Arc<dyn MailServerStore>,
    /// The connectors' address policy (the SSRF guard with the operator's allow-list): a
    /// saved host it refuses (a private address, `localhost`) is refused on save.
    pub hosts: Arc<dyn HostPolicy>,
    /// Dashboard widgets and their cached data (`/api/widgets`).
    pub widgets: Arc<dyn WidgetStore>,
    /// The guarded connectors widgets call (the same SSRF guard, caps and breaker as the
    /// executor's); `None`: a widget refresh fails with "not available".
    pub connectors: Option<Arc<dyn Connector>>,
}

impl std::fmt::Debug for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ports")
    }
}

/// The shared state of the router.
#[derive(Clone, Debug)]
pub struct App {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub config: ServerConfig,
    pub ports: Ports,
    pub dispatcher: Dispatcher,
    /// Judges webhook timestamps (tests may move it).
    pub clock: Arc<dyn Clock>,
    pub webhook_per_token: Option<Limiter>,
    pub webhook_per_tenant: Option<Limiter>,
    pub api_per_tenant: Option<Limiter>,
    /// Failed authentications per client address.
    pub auth_failures: Option<Limiter>,
    /// The broadcast channels of `GET /api/stream`.
    pub hub: Hub,
    /// What `GET /metrics` tells of webhook requests.
    pub webhook_metrics: WebhookMetrics,
    /// What `GET /metrics` tells of the worker in this process, when there is one.
    pub worker_metrics: OnceLock<Arc<WorkerMetrics>>,
    pub store_counters: OnceLock<StoreCounters>,
    /// Runs deleted by this process's retention ([`App::observe_retention`]).
    pub pruned: OnceLock<Arc<fronta_engine::retention::PruneCounters>>,
    /// Wakes this process's scheduler after a save of a timed automation
    /// ([`App::schedule_now`]); unset when no scheduler runs here.
    pub scheduler_nudge: OnceLock<Arc<tokio::sync::Notify>>,
    /// The runs this process's worker has in flight ([`App::cancel_here`]).
    pub local_runs: OnceLock<fronta_engine::LocalRuns>,
    /// Serves widgets from their cache and refreshes them.
    pub widgets: WidgetService,
}

impl App {
    /// Refuses a configuration whose limits make no sense.
    pub fn new(config: ServerConfig, ports: Ports, dispatcher: Dispatcher) -> Result<Self, String> {
        Self::with_clock(config, ports, dispatcher, Arc::new(SystemClock))
    }

    /// As [`App::new`], with the clock webhook timestamps are judged by.
    pub fn with_clock(
        config: ServerConfig,
        ports: Ports,
        dispatcher: Dispatcher,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        config.validate()?;
        let limiter = |limit: Option<crate::config::RateLimit>| {
            limit.map(|limit| Limiter::new(limit, config.rate_limit_max_keys))
        };
        let widgets = WidgetService {
            store: ports.widgets.clone(),
            connectors: ports.connectors.clone(),
            vault: SecretVault {
                store: ports.secrets.clone(),
                cipher: ports.secret_cipher.clone(),
            },
            limits: config.widgets,
        };
        let inner = Inner {
            widgets,
            webhook_per_token: limiter(config.webhook_rate_per_token),
            webhook_per_tenant: limiter(config.webhook_rate_per_tenant),
            api_per_tenant: limiter(config.api_rate_per_tenant),
            auth_failures: limiter(config.auth_failure_rate),
            hub: Hub::default(),
            webhook_metrics: WebhookMetrics::default(),
            worker_metrics: OnceLock::new(),
            scheduler_nudge: OnceLock::new(),
            local_runs: OnceLock::new(),
            store_counters: OnceLock::new(),
            pruned: OnceLock::new(),
            config,
            ports,
            dispatcher,
            clock,
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// What a dry run reads through and is bounded by: this process's stores, its
    /// guarded connectors (called only by a live test) and its secrets.
    pub(crate) fn dry_runner(&self) -> fronta_automation::dry_run::DryRunner {
        let ports = &self.inner.ports;
        fronta_automation::dry_run::DryRunner {
            desk: ports.desk.clone(),
            automations: ports.automations.clone(),
            connectors: ports.connectors.clone(),
            secrets: Some(SecretVault {
                store: ports.secrets.clone(),
                cipher: ports.secret_cipher.clone(),
            }),
            max_pause: self.inner.config.max_pause,
            time_limit: self.inner.config.test_time_limit,
        }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// Report the latencies of the worker running in this process at `GET /metrics`
    /// (the first worker given wins; a server without one reports none).
    /// The runs of this process's worker, so a cancel reaches them at once.
    pub fn run_here(&self, runs: fronta_engine::LocalRuns) {
        let _ = self.inner.local_runs.set(runs);
    }

    /// After the store recorded a cancel request of `run`: when it is in flight in this
    /// process, its handler is signalled now (an in-flight call is abandoned); elsewhere
    /// the worker hears it at its next heartbeat.
    pub fn cancel_here(&self, run: fronta_engine::RunId) -> bool {
        self.inner
            .local_runs
            .get()
            .is_some_and(|runs| runs.cancel(run))
    }

    /// The scheduler of this process, to wake after a save ([`App::schedule_now`]).
    pub fn wake_scheduler_with(&self, nudge: Arc<tokio::sync::Notify>) {
        let _ = self.inner.scheduler_nudge.set(nudge);
    }

    /// After a save, resume or rollback of `automation`: a timed one (poll, schedule)
    /// is planned now by this process's scheduler — a poll runs at once, a schedule's next
    /// run is enqueued — instead of at the scheduler's next tick.
    pub fn schedule_now(&self, automation: &fronta_automation::Automation) {
        let timed = matches!(
            automation.trigger,
            fronta_automation::Trigger::Poll { .. } | fronta_automation::Trigger::Schedule { .. }
        );
        if timed && let Some(nudge) = self.inner.scheduler_nudge.get() {
            nudge.notify_one();
        }
    }

    pub fn observe_worker(&self, metrics: Arc<WorkerMetrics>) {
        if self.inner.worker_metrics.set(metrics).is_err() {
            tracing::warn!("a second worker's metrics were offered; /metrics keeps the first");
        }
    }

    /// Report counters of this process's store at `GET /metrics` (read at each scrape;
    /// the first given wins), such as the Postgres store's group enqueue.
    /// `/metrics` reports what retention deleted in this process.
    pub fn observe_retention(&self, counters: Arc<fronta_engine::retention::PruneCounters>) {
        if self.inner.pruned.set(counters).is_err() {
            tracing::warn!("a second retention's counters were offered; /metrics keeps the first");
        }
    }

    pub fn observe_store(&self, counters: StoreCounters) {
        if self.inner.store_counters.set(counters).is_err() {
            tracing::warn!("a second store's counters were offered; /metrics keeps the first");
        }
    }

    /// The hub of `GET /api/stream`.
    pub fn hub(&self) -> &Hub {
        &self.inner.hub
    }

    pub(crate) fn runs(&self) -> &dyn RunStore {
        self.inner.ports.runs.as_ref()
    }

    pub(crate) fn access(&self) -> &dyn AccessStore {
        self.inner.ports.access.as_ref()
    }

    pub(crate) fn desk(&self) -> &dyn DeskStore {
        self.inner.ports.desk.as_ref()
    }

    pub(crate) fn automations(&self) -> &dyn AutomationStore {
        self.inner.ports.automations.as_ref()
    }

    pub(crate) fn secrets(&self) -> &dyn SecretStore {
        self.inner.ports.secrets.as_ref()
    }

    pub(crate) fn limits(&self) -> &dyn ServiceLimits {
        self.inner.ports.limits.as_ref()
    }

    pub(crate) fn mcp_servers(&self) -> &dyn McpServerStore {
        self.inner.ports.mcp_servers.as_ref()
    }

    pub(crate) fn mail_servers(&self) -> &dyn MailServerStore {
        self.inner.ports.mail_servers.as_ref()
    }

    pub(crate) fn hosts(&self) -> &dyn HostPolicy {
        self.inner.ports.hosts.as_ref()
    }

    pub(crate) fn widgets(&self) -> &WidgetService {
        &self.inner.widgets
    }

    pub(crate) fn secret_cipher(&self) -> Option<&dyn SecretCipher> {
        self.inner.ports.secret_cipher.as_deref()
    }
}
