//! The outside world for fronta's automations: the `http/request` connector step
//! ([`http`]) behind an SSRF guard ([`ssrf`]), the `mcp/call-tool` step ([`mcp`], the
//! official `rmcp` client over streamable HTTP through the same guard, or stdio when the
//! operator allows it), and the cipher that seals per-tenant secrets at rest
//! ([`keyring`]), and `poll/mail`, the `mail` poll source over IMAP ([`mail`]).
//! [`Connectors`] implements the automation runtime's `Connector` port and
//! dispatches by op.
//!
//! Left out: the circuit breaker and per-(tenant, service) caps (a decorator around the
//! port), storage of secrets and MCP servers (the stores implement `SecretStore` and
//! `McpServerStore`).

pub mod http;
pub mod keyring;
pub mod mail;
pub mod mcp;
pub mod ssrf;

use async_trait::async_trait;
use fronta_automation::Op;
use fronta_automation::connector::{
    Connector, ConnectorCall, ConnectorFailure, ConnectorReply, not_installed,
};

pub use http::{HttpConnector, HttpLimits};
pub use keyring::{Keyring, KeyringError};
pub use mail::{MailConnector, MailLimits};
pub use mcp::{McpConnector, McpLimits};
pub use ssrf::{AddressPolicy, AllowList};

/// Every connector this build has, dispatched by op.
#[derive(Debug, Clone)]
pub struct Connectors {
    pub http: HttpConnector,
    /// `None`: `mcp/call-tool` answers `NotConfigured` (no MCP server directory).
    pub mcp: Option<McpConnector>,
    /// `None`: `poll/mail` (the `mail` poll source) answers `NotConfigured`.
    pub mail: Option<MailConnector>,
}

impl Connectors {
    pub fn new(http: HttpConnector) -> Self {
        Self {
            http,
            mcp: None,
            mail: None,
        }
    }

    /// Adds `poll/mail`.
    pub fn with_mail(mut self, mail: MailConnector) -> Self {
        self.mail = Some(mail);
        self
    }

    /// Adds `mcp/call-tool`.
    pub fn with_mcp(mut self, mcp: McpConnector) -> Self {
        self.mcp = Some(mcp);
        self
    }
}

#[async_trait]
impl Connector for Connectors {
    async fn call(&self, call: ConnectorCall<'_>) -> Result<ConnectorReply, ConnectorFailure> {
        match (call.op, &self.mcp) {
            (Op::HttpRequest, _) => self.http.call(call).await,
            (Op::McpCallTool, Some(mcp)) => mcp.call(call).await,
            (Op::PollMail, _) if self.mail.is_some() => match &self.mail {
                Some(mail) => mail.call(call).await,
                None => Err(not_installed(call.op)),
            },
            (other, _) => {
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
