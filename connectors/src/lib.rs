//! The outside world for fronta's automations: the `http/request` connector step
//! ([`http`]) behind an SSRF guard ([`ssrf`]), and the cipher that seals per-tenant
//! secrets at rest ([`keyring`]). [`Connectors`] implements the automation runtime's
//! `Connector` port and dispatches by op, so `mcp/call-tool` can be added beside
//! `http/request`.
//!
//! Left out: the circuit breaker and per-(tenant, service) caps (a decorator around the
//! port), MCP, storage of secrets (the stores implement `SecretStore`).

pub mod http;
pub mod keyring;
pub mod ssrf;

use async_trait::async_trait;
use fronta_automation::Op;
use fronta_automation::connector::{
    Connector, ConnectorCall, ConnectorFailure, ConnectorReply, not_installed,
};

pub use http::{HttpConnector, HttpLimits};
pub use keyring::{Keyring, KeyringError};
pub use ssrf::{AddressPolicy, AllowList};

/// Every connector this build has, dispatched by op.
#[derive(Debug, Clone)]
pub struct Connectors {
    pub http: HttpConnector,
}

impl Connectors {
    pub fn new(http: HttpConnector) -> Self {
        Self { http }
    }
}

#[async_trait]
impl Connector for Connectors {
    async fn call(&self, call: ConnectorCall<'_>) -> Result<ConnectorReply, ConnectorFailure> {
        match call.op {
            Op::HttpRequest => self.http.call(call).await,
            other => {
                tracing::warn!(
                    op = other.as_str(),
                    step = call.step_name,
                    run = call.run_id,
                    "connector step refused: not available in this build"
                );
                Err(not_installed(other))
            }
        }
    }
}
