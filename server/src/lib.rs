//! fronta's HTTP server: webhooks, the REST API of `API.md`, auth, limits, health and the
//! dashboard page, as one axum [`Router`](axum::Router) built by [`router`] from an
//! [`App`].
//!
//! This is the only crate with axum and wire types; it knows no SQL and no store crate.
//! Whoever starts it hands it the ports (`RunStore`, `DeskStore`, `AutomationStore`,
//! `SecretStore` and the secret cipher, if a key is configured) and a `Dispatcher` that
//! knows the automation kind:
//!
//! ```text
//! let app = App::new(ServerConfig::default(), Ports { runs, desk, automations, secrets, secret_cipher, limits, mcp_servers, mail_servers, hosts, … }, dispatcher)?;
//! fronta_server::serve(Listener::bind(address).await?, app, shutdown).await?;
//! ```
//!
//! Map of the crate: [`config`] (every limit, named), [`app`] (shared state),
//! [`auth`] (tenant and admin tokens), [`extract`] (bodies and queries in the API's
//! error shape), [`error`] (the one `ApiError → response` mapping), [`page`]
//! (pagination), [`wire`] (JSON views), [`ratelimit`], [`signature`] (Standard
//! Webhooks), [`base_url`] and [`routes`].
//!
//! [`stream`] is `GET /api/stream` (SSE) and its broadcast hub.
//!
//! [`metrics`] is `GET /metrics` (Prometheus text).
//!
//! [`openapi`] is `GET /api/openapi.json`, generated from the router's route table.
//!
//! [`dashboard`] is the page at `/` and its embedded assets (HTML, CSS, ES modules).
//!
//! Left out: running a worker (the binary does, beside the server).

pub mod app;
pub mod auth;
pub mod base_url;
pub mod config;
pub mod dashboard;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod openapi;
pub mod pagination;
pub mod ratelimit;
pub mod routes;
pub mod signature;
pub mod stream;
pub mod wire;

pub use app::{App, Ports};
pub use config::{RateLimit, ServerConfig};
pub use error::ApiError;
pub use routes::router;

use std::future::Future;
use std::net::SocketAddr;

/// A listening socket for [`serve`]: bound first, so the caller can report the address
/// (port 0 picks a free one) or a bind error before anything else starts.
#[derive(Debug)]
pub struct Listener(tokio::net::TcpListener);

impl Listener {
    pub async fn bind(address: SocketAddr) -> std::io::Result<Self> {
        tokio::net::TcpListener::bind(address).await.map(Listener)
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// Serve [`router`]`(app)` on `listener` until `shutdown` completes; then stop accepting,
/// let requests in flight finish, and return.
pub async fn serve(
    listener: Listener,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let hub_owner = app.clone();
    // Open streams never end on their own: close them, or the graceful shutdown waits.
    let shutdown = async move {
        shutdown.await;
        hub_owner.hub().close();
    };
    // The peer's address reaches the handlers (the audit log's client, the failed-auth
    // limit's key).
    axum::serve(
        listener.0,
        router(app).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
