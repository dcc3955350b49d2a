//! The outside world for fronta's automations: the `http/request` connector step
//! ([`http`]) behind an SSRF guard ([`ssrf`]), the `mcp/call-tool` step ([`mcp`], the
//! official `rmcp` client over streamable HTTP through the same guard, or stdio when the
//! operator allows it), `mail/send` over SMTP through the tenant's mail servers
//! ([`smtp`]), `poll/mail`, the `mail` poll source over IMAP ([`mail`]), and the cipher
//! that seals per-tenant secrets at rest ([`keyring`]).
//! [`Connectors`] implements the automation runtime's `Connector` port and
//! dispatches by op.
//!
//! Left out: the circuit breaker and per-(tenant, service) caps (a decorator around the
//! port), storage of secrets, MCP and mail servers (the stores implement `SecretStore`,
//! `McpServerStore` and `MailServerStore`).

pub mod http;
pub mod keyring;
pub mod mail;
pub mod mcp;
pub mod smtp;
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
pub use smtp::{SmtpConnector, SmtpLimits};
pub use ssrf::{AddressPolicy, AllowList};

/// Every connector this build has, dispatched by op.
#[derive(Debug, Clone)]
pub struct Connectors {
    pub http: HttpConnector,
    /// `None`: `mcp/call-tool` answers `NotConfigured` (no MCP server directory).
    pub mcp: Option<McpConnector>,
    /// `None`: `poll/mail` (the `mail` poll source) answers `NotConfigured`.
    pub mail: Option<MailConnector>,
    /// `None`: `mail/send` answers `NotConfigured` (no mail server directory).
    pub smtp: Option<SmtpConnector>,
}

impl Connectors {
    pub fn new(http: HttpConnector) -> Self {
        Self {
            http,
            mcp: None,
            mail: None,
            smtp: None,
        }
    }

    /// Adds `poll/mail`.
    pub fn with_mail(mut self, mail: MailConnector) -> Self {
        self.mail = Some(mail);
        self
    }

    /// Adds `mail/send`.
    pub fn with_smtp(mut self, smtp: SmtpConnector) -> Self {
        self.smtp = Some(smtp);
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
        match call.op {
            Op::HttpRequest => self.http.call(call).await,
            Op::McpCallTool if let Some(mcp) = &self.mcp => mcp.call(call).await,
            Op::MailSend if let Some(smtp) = &self.smtp => smtp.call(call).await,
            Op::PollMail if let Some(mail) = &self.mail => mail.call(call).await,
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
