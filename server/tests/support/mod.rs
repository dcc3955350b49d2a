//! The test harness of the router tests: a real SQLite store in a temp dir with every
//! port, the executor registered, the ticket event sink installed, and the router called
//! in-process with `oneshot` (no sockets).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use fronta_automation::executor::{self, Runtime};
use fronta_automation::service_limits::{LimitedConnector, LimitsConfig};
use fronta_automation::store::AutomationStore;
use fronta_desk::{DeskStore, TenantId};
use fronta_engine::{
    Clock, Dispatcher, ManualClock, Registry, RunStore, SystemClock, Worker, WorkerConfig,
};
use fronta_server::{App, Ports, ServerConfig};
use fronta_store_sqlite::{SqliteConfig, SqliteStore, Synchronous};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The admin token of every harness.
pub const ADMIN: &str = "fa_test_admin_token";

/// The secret key of every harness (secrets are sealed with it as version 1).
pub const TEST_SECRET_KEY: [u8; 32] = [42; 32];

/// Wraps the store's poll cursors port (see [`Harness::with_poll_cursors`]).
pub type CursorWrap = Box<
    dyn FnOnce(
        Arc<dyn fronta_automation::poll::PollCursors>,
    ) -> Arc<dyn fronta_automation::poll::PollCursors>,
>;

/// One server over a fresh database.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: SqliteStore,
    pub registry: Arc<Registry>,
    pub router: Router,
    pub app: App,
}

/// What the router answered.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub bytes: Bytes,
    /// The body as JSON (`Value::Null` when it is not JSON).
    pub json: Value,
}

impl Reply {
    /// `json[key]` as text, or a panic naming the answer.
    pub fn text(&self, key: &str) -> String {
        self.json[key]
            .as_str()
            .unwrap_or_else(|| panic!("no text field {key:?} in {} {}", self.status, self.json))
            .to_owned()
    }

    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
}

/// A configuration without rate limits (tests of limits set their own) and with the
/// admin token of the harness.
pub fn test_config() -> ServerConfig {
    ServerConfig {
        admin_token_hash: Some(fronta_desk::token::hash(ADMIN)),
        webhook_rate_per_token: None,
        webhook_rate_per_tenant: None,
        api_rate_per_tenant: None,
        auth_failure_rate: None,
        ..ServerConfig::default()
    }
}

impl Harness {
    pub fn new() -> Self {
        Self::with_config(test_config())
    }

    pub fn with_config(config: ServerConfig) -> Self {
        Self::build(config, LimitsConfig::default(), None, None)
    }

    /// A harness on `clock` whose executor reaches poll cursors through `wrap` around the
    /// store (tests inject failures there).
    pub fn with_poll_cursors(clock: ManualClock, wrap: CursorWrap) -> Self {
        Self::build(
            test_config(),
            LimitsConfig::default(),
            Some(clock),
            Some(wrap),
        )
    }

    /// A harness whose store, executor and limits run on `clock` (moved by the test),
    /// with connector calls limited by `limits`.
    pub fn with_limits(limits: LimitsConfig, clock: ManualClock) -> Self {
        Self::build(test_config(), limits, Some(clock), None)
    }

    fn build(
        config: ServerConfig,
        limits: LimitsConfig,
        clock: Option<ManualClock>,
        wrap: Option<CursorWrap>,
    ) -> Self {
        let clock: Arc<dyn Clock> = match clock {
            Some(clock) => Arc::new(clock),
            None => Arc::new(SystemClock),
        };
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut sqlite = SqliteConfig::new(dir.path().join("server-test.db"));
        sqlite.synchronous = Synchronous::Normal;
        sqlite.clock = clock.clone();
        let store = SqliteStore::open(sqlite).expect("the store opens");
        let runs: Arc<dyn RunStore> = Arc::new(store.clone());
        let desk: Arc<dyn DeskStore> = Arc::new(store.clone());
        let automations: Arc<dyn AutomationStore> = Arc::new(store.clone());
        let cipher: Arc<dyn fronta_automation::secrets::SecretCipher> =
            Arc::new(fronta_connectors::Keyring::new(1, TEST_SECRET_KEY));
        // Connector steps may reach this machine's test servers (wiremock on 127.0.0.1)
        // and nothing else private: the allow-list names that one address.
        let http = fronta_connectors::HttpConnector::new(
            fronta_connectors::AddressPolicy::new(
                fronta_connectors::AllowList::parse("127.0.0.1").expect("an allow-list"),
            ),
            fronta_connectors::HttpLimits::default(),
        )
        .expect("an HTTP connector");
        let vault = fronta_automation::secrets::SecretVault {
            store: Arc::new(store.clone()),
            cipher: Some(cipher.clone()),
        };
        let mcp = fronta_connectors::McpConnector::new(
            Arc::new(store.clone()),
            Some(vault.clone()),
            fronta_connectors::AddressPolicy::new(
                fronta_connectors::AllowList::parse("127.0.0.1").expect("an allow-list"),
            ),
            fronta_connectors::McpLimits::default(),
        )
        .expect("an MCP connector");
        // mail/send: the tests' SMTP server is on 127.0.0.1 too, in plain text (TLS and
        // logins are tested in connectors/tests/smtp.rs).
        let smtp = fronta_connectors::SmtpConnector::new(
            Arc::new(store.clone()),
            Some(vault.clone()),
            fronta_connectors::AddressPolicy::new(
                fronta_connectors::AllowList::parse("127.0.0.1").expect("an allow-list"),
            ),
            fronta_connectors::SmtpLimits::default(),
        )
        .expect("an SMTP connector");
        let connectors: Arc<dyn fronta_automation::connector::Connector> =
            Arc::new(LimitedConnector::new(
                Arc::new(
                    fronta_connectors::Connectors::new(http)
                        .with_mcp(mcp)
                        .with_smtp(smtp)
                        .with_mail(
                            fronta_connectors::MailConnector::new(
                                fronta_connectors::AddressPolicy::new(
                                    fronta_connectors::AllowList::parse("127.0.0.1")
                                        .expect("an allow-list"),
                                ),
                                fronta_connectors::MailLimits::default(),
                            )
                            .expect("a mail connector"),
                        ),
                ),
                Arc::new(store.clone()),
                limits,
                clock.clone(),
            ));
        let runtime = Arc::new(Runtime {
            desk: desk.clone(),
            automations: automations.clone(),
            clock: clock.clone(),
            connectors: Some(connectors.clone()),
            secrets: Some(vault),
            storage_wait: executor::DEFAULT_STORAGE_WAIT,
            cursors: Some(match wrap {
                Some(wrap) => wrap(Arc::new(store.clone())),
                None => Arc::new(store.clone()),
            }),
            poll: Default::default(),
            max_pause: fronta_automation::steps::MAX_PAUSE,
        });
        let mut registry = Registry::new();
        executor::register(&mut registry, runtime, Duration::from_secs(60))
            .expect("the executor registers");
        fronta_automation::bulk::register(
            &mut registry,
            runs.clone(),
            Duration::from_secs(60),
            fronta_automation::bulk::DEFAULT_BULK_BATCH,
        )
        .expect("bulk actions register");
        let registry = Arc::new(registry);
        let dispatcher = Dispatcher::from_registry(runs.clone(), &registry);
        store.set_ticket_event_sink(executor::event_sink(dispatcher.clone()));
        let app = App::new(
            config,
            Ports {
                runs,
                desk,
                access: Arc::new(store.clone()),
                automations,
                secrets: Arc::new(store.clone()),
                secret_cipher: Some(cipher),
                limits: Arc::new(store.clone()),
                mcp_servers: Arc::new(store.clone()),
                mail_servers: Arc::new(store.clone()),
                // The same allow-list as the connectors: 127.0.0.1 may be saved.
                hosts: Arc::new(fronta_connectors::AddressPolicy::new(
                    fronta_connectors::AllowList::parse("127.0.0.1").expect("an allow-list"),
                )),
                widgets: Arc::new(store.clone()),
                // Widgets call through the same guarded, limited connectors as steps.
                connectors: Some(connectors),
            },
            dispatcher,
        )
        .expect("a valid configuration");
        Self {
            dir,
            store,
            registry,
            router: fronta_server::router(app.clone()),
            app,
        }
    }

    pub fn desk(&self) -> &dyn DeskStore {
        &self.store
    }

    pub fn runs(&self) -> &dyn RunStore {
        &self.store
    }

    /// Send a request through the router.
    pub async fn send(&self, request: Request<Body>) -> Reply {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router never fails");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("the body is read");
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            bytes,
            json,
        }
    }

    /// A JSON call with an optional bearer token and body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "fronta.test");
        if let Some(token) = token {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let body = match body {
            Some(body) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Body::from(body.to_string())
            }
            None => Body::empty(),
        };
        self.send(builder.body(body).expect("a request")).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Reply {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    /// A new tenant through the admin API: its id and token.
    pub async fn tenant(&self, name: &str) -> (TenantId, String) {
        let reply = self
            .post("/api/admin/tenants", ADMIN, json!({"name": name}))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "tenant created: {}",
            reply.json
        );
        let id = reply.text("id").parse().expect("a tenant id");
        (id, reply.text("token"))
    }

    /// Create an automation through the API; its JSON answer.
    pub async fn automation(&self, token: &str, definition: Value) -> Value {
        let reply = self.post("/api/automations", token, definition).await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "automation created: {}",
            reply.json
        );
        reply.json
    }

    /// Post a JSON body to a webhook URL path (`/webhook/…`) with extra headers.
    pub async fn webhook(&self, path: &str, body: &str, headers: &[(&str, String)]) -> Reply {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::HOST, "fronta.test")
            .header(header::CONTENT_TYPE, "application/json");
        for (name, value) in headers {
            builder = builder.header(*name, value);
        }
        self.send(
            builder
                .body(Body::from(body.to_owned()))
                .expect("a request"),
        )
        .await
    }

    /// Every stored run row (payload, checkpoint, result, error) as text: what the
    /// database holds, for tests that prove something is not in it.
    pub async fn runs_raw(&self) -> String {
        let path = self.dir.path().join("server-test.db");
        let conn = rusqlite::Connection::open(path).expect("open the test database");
        let mut stmt = conn
            .prepare("SELECT coalesce(payload, ''), coalesce(CAST(state AS TEXT), ''), coalesce(result, ''), coalesce(last_error, '') FROM runs")
            .expect("prepare");
        let rows = stmt
            .query_map([], |row| {
                Ok(format!(
                    "{} {} {} {}",
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?
                ))
            })
            .expect("query")
            .collect::<Result<Vec<_>, _>>()
            .expect("rows");
        rows.join("\n")
    }

    /// Run a worker with the executor until nothing is left to do.
    pub async fn drain(&self) {
        let config = WorkerConfig {
            name: "test-worker".into(),
            until_idle: true,
            poll_interval: Duration::from_millis(10),
            ..WorkerConfig::default()
        };
        let worker = Worker::new(Arc::new(self.store.clone()), self.registry.clone(), config)
            .expect("a worker");
        self.app.observe_worker(worker.metrics());
        tokio::time::timeout(
            Duration::from_secs(30),
            worker.run(CancellationToken::new()),
        )
        .await
        .expect("the worker drains within 30 s")
        .expect("the worker ends cleanly");
    }
}

/// The path of a webhook URL (`http://host/webhook/…` → `/webhook/…`).
pub fn webhook_path(automation: &Value) -> String {
    let url = automation["webhookUrl"]
        .as_str()
        .unwrap_or_else(|| panic!("no webhookUrl in {automation}"));
    let at = url.find("/webhook/").expect("a webhook path");
    url[at..].to_owned()
}

/// A webhook automation whose run fails: it closes a ticket the body names, and none is.
pub fn failing_automation() -> Value {
    json!({
        "name": "Close by reference",
        "trigger": {"type": "webhook", "params": [
            {"name": "ref", "path": "ref", "type": "string", "required": true}]},
        "steps": [{"name": "close", "op": "ticket/close", "input": {"ticket": "{{ref}}"}}]
    })
}

/// The orders automation of API.md.
pub fn orders_automation() -> Value {
    json!({
        "name": "Orders from the web shop",
        "trigger": {"type": "webhook", "params": [
            {"name": "kind", "path": "kind", "type": "string", "required": true},
            {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}
        ]},
        "steps": [
            {"name": "ticket", "op": "ticket/upsert",
             "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
                       "type": "order", "status": "waiting-to-pack", "tags": ["waiting-to-pack"]}}
        ]
    })
}

/// The `order` ticket type the orders automation needs.
pub fn order_type() -> Value {
    json!({"name": "order", "statuses": ["waiting-to-pack", "shipped"],
           "fields": [{"name": "amount", "type": "number"}]})
}

/// An order body.
pub fn order_body(id: &str) -> String {
    json!({"kind": "order.created", "data": {"order": {"id": id}}}).to_string()
}
