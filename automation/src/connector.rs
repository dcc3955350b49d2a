//! The port to third-party services: the executor hands a connector step's rendered
//! input to a [`Connector`] and gets outputs or a failure described by its [`Cause`].
//!
//! This crate knows no HTTP: `fronta-connectors` implements the port (`http/request`,
//! `mcp/call-tool`, `mail/send`, `poll/mail`), and [`HostPolicy`], the address policy a
//! saved configuration is judged by. A process that installs no connector answers
//! connector steps with a fatal "not available" error. Per-(tenant, service) limits and a
//! circuit breaker wrap a `Connector` as a decorator: every call names its tenant and its
//! `service`.

use std::time::Duration;

use async_trait::async_trait;
use fronta_desk::TenantId;
use serde_json::{Map, Value};

use crate::catalogue::Op;
use crate::retry::Cause;
use crate::secrets::Revealed;
use crate::steps::StepError;

/// One connector call. (No `Debug`: the input holds secret values.)
pub struct ConnectorCall<'a> {
    pub op: &'a Op,
    pub tenant: TenantId,
    /// The step's `service` (the unit of per-(tenant, service) limits).
    pub service: Option<&'a str>,
    /// The rendered input, secrets included: never log it or keep it.
    pub input: Map<String, Value>,
    /// The secret values inside `input`: a connector scrubs them from its own log lines
    /// and drops headers holding them on a redirect to another origin.
    pub secrets: &'a Revealed,
    pub run_id: &'a str,
    pub step_name: &'a str,
}

/// What a successful call answers (the executor scrubs secrets from both).
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectorReply {
    pub outputs: Map<String, Value>,
    /// One line for the step log.
    pub message: String,
}

/// Why a call failed: its [`Cause`] decides retry or not (DESIGN.md §4.5).
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectorFailure {
    pub cause: Cause,
    pub message: String,
    /// The other side's Retry-After (kept only when the cause is retryable).
    pub retry_after: Option<Duration>,
    /// "Not now, try after this long": the call was not made (a full cap, an open
    /// circuit; see [`crate::service_limits`]). The executor snoozes the run, spending no attempt
    /// and leaving the cursor on the step; `cause` is then not acted on.
    pub not_now: Option<Duration>,
}

impl ConnectorFailure {
    pub fn new(cause: Cause, message: impl Into<String>) -> Self {
        Self {
            cause,
            message: message.into(),
            retry_after: None,
            not_now: None,
        }
    }

    /// The call was not made and should be tried again after `wait` (see `not_now`).
    pub fn not_now(wait: Duration, message: impl Into<String>) -> Self {
        Self {
            not_now: Some(wait),
            ..Self::new(Cause::Connection, message)
        }
    }

    /// The step error the executor acts on.
    pub fn into_step_error(self) -> StepError {
        self.cause.step_error(self.message, self.retry_after)
    }
}

/// Calls third-party services for connector steps.
///
/// # Contract
///
/// - `call` performs the step's op (`http/request`, `mcp/call-tool`) with the rendered
///   input and answers its outputs (the op's catalogue outputs) or a failure whose
///   [`Cause`] is exactly what happened: connection refused or timed out before the
///   request was sent, the other side's status, a timeout or a broken connection after
///   sending, bad input (including an address the SSRF guard refuses), an unusable
///   answer, missing configuration. The executor retries by the cause's table only.
/// - An op this connector does not serve answers [`Cause::NotConfigured`].
/// - It never logs the input, a header value or a secret; messages it answers name the
///   method, the address and what happened (the executor scrubs secrets from them too).
/// - It is cancel-safe: the executor may drop the future when the run is stopped.
/// - A failure with `not_now` set says the call was **not** made (a limit in front of
///   the service refused it for now): the executor snoozes the run for that long.
#[async_trait]
pub trait Connector: Send + Sync + 'static {
    async fn call(&self, call: ConnectorCall<'_>) -> Result<ConnectorReply, ConnectorFailure>;
}

/// The SSRF guard's address policy as far as a host can be judged without looking it
/// up: a literal address as that address, a name against the names refused outright
/// (`localhost`, metadata names) unless the operator's allow-list names it. What a name
/// resolves to is judged again, address by address, each time a connector connects.
/// Implemented by `fronta-connectors` (`AddressPolicy`); the server checks a saved
/// configuration (a mail server's host) with it, so a refusal that can be known on save
/// is said then.
pub trait HostPolicy: Send + Sync + 'static {
    /// Why `host` (a bare name or address, IPv6 with or without brackets) may not be
    /// reached, as a sentence; `None` when it may, as far as can be told now.
    fn host_refused(&self, host: &str) -> Option<String>;
}

/// The failure of a connector step in a process without connectors.
pub fn not_installed(op: &Op) -> ConnectorFailure {
    ConnectorFailure::new(
        Cause::NotConfigured,
        format!(
            "{} is not available in this build: connector steps are not installed",
            op.as_str()
        ),
    )
}
