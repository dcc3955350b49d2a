//! fronta's HTTP server: webhooks, the REST API of `API.md`, auth, limits and health, as
//! one axum [`Router`](axum::Router) built by [`router`] from an [`App`].
//!
//! This is the only crate with axum and wire types; it knows no SQL and no store crate.
//! Whoever starts it hands it the three ports (`RunStore`, `DeskStore`,
//! `AutomationStore`) and a `Dispatcher` that knows the automation kind:
//!
//! ```text
//! let app = App::new(ServerConfig::default(), Ports { runs, desk, automations }, dispatcher)?;
//! axum::serve(listener, fronta_server::router(app)).await?;
//! ```
//!
//! Map of the crate: [`config`] (every limit, named), [`app`] (shared state),
//! [`auth`] (tenant and admin tokens), [`extract`] (bodies and queries in the API's
//! error shape), [`error`] (the one `ApiError → response` mapping), [`page`]
//! (pagination), [`wire`] (JSON views), [`ratelimit`], [`signature`] (Standard
//! Webhooks), [`replay`] (repeated webhook ids), [`base_url`] and [`routes`].
//!
//! Left out: the SSE stream, metrics, the OpenAPI document and the dashboard page;
//! running a worker (the binary does, beside the server).

pub mod app;
pub mod auth;
pub mod base_url;
pub mod config;
pub mod error;
pub mod extract;
pub mod page;
pub mod ratelimit;
pub mod replay;
pub mod routes;
pub mod signature;
pub mod wire;

pub use app::{App, Ports};
pub use config::{RateLimit, ServerConfig};
pub use error::ApiError;
pub use routes::router;
