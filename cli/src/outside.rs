//! What every working process is handed to reach the outside world: the connectors
//! (`http/request`, `mcp/call-tool` and the `mail` poll's IMAP, all behind the SSRF
//! guard) and the secret
//! keyring, read from the environment once at start-up. A bad setting stops the process
//! with a clear message.
//!
//! | variable | default | what |
//! |---|---|---|
//! | `FRONTA_HTTP_ALLOW` | empty | hosts, addresses and networks connectors may reach although private |
//! | `FRONTA_HTTP_TIMEOUT` | 30s | `timeoutSec` when a step gives none |
//! | `FRONTA_HTTP_MAX_TIMEOUT` | 5m | the largest `timeoutSec` |
//! | `FRONTA_HTTP_CONNECT_TIMEOUT` | 10s | name lookup + TCP + TLS |
//! | `FRONTA_HTTP_MAX_RESPONSE_BYTES` | 1048576 | the largest answer body |
//! | `FRONTA_HTTP_MAX_REDIRECTS` | 5 | redirect hops followed |
//! | `FRONTA_HTTP_MAX_RETRY_AFTER` | 1h | a longer `Retry-After` is cut to this |
//! | `FRONTA_MCP_STDIO` | 0 | `1`: tenants' `stdio` MCP servers may run local commands on this host |
//! | `FRONTA_MCP_CONNECT_TIMEOUT` | 10s | name lookup + TCP + TLS of an MCP server |
//! | `FRONTA_MCP_MAX_RESULT_BYTES` | 1048576 | the largest JSON answer of an MCP server |
//! | `FRONTA_POLL_MAX_ITEMS` | 100 | items (messages) one poll takes at most; the rest wait for the next poll |
//! | `FRONTA_MAIL_CONNECT_TIMEOUT` | 10s | name lookup + TCP + TLS of an IMAP server (`mail` polls) |
//! | `FRONTA_MAIL_TIMEOUT` | 60s | one whole mail poll after connecting |
//! | `FRONTA_MAIL_MESSAGE_BYTES` | 1048576 | bytes fetched of each message |
//! | `FRONTA_MAIL_TEXT_BYTES` | 65536 | bytes of decoded text a message publishes (`text`) |
//! | `FRONTA_SECRET_KEY` | unset | base64 of 32 bytes; unset: secrets cannot be stored or used |
//! | `FRONTA_SECRET_KEY_VERSION` | 1 | the version new secrets are sealed with |
//! | `FRONTA_SECRET_OLD_KEYS` | empty | `version:base64,…`: older keys that still open values |
//! | `FRONTA_SERVICE_MAX_CONCURRENT` | 8 | calls in flight per (tenant, service), every process |
//! | `FRONTA_BREAKER_FAILURES` | 5 | consecutive retryable failures that open a service's breaker |
//! | `FRONTA_BREAKER_COOLDOWN` | 30s | how long an open breaker snoozes calls before one probe |
//! | `FRONTA_SERVICE_SLOT_LEASE` | 10m | a call's slot frees itself after this (a crashed process) |
//! | `FRONTA_SERVICE_FULL_DELAY` | 2s | snooze of a run that met a full cap or a busy probe |
//! | `FRONTA_SERVICE_JITTER` | 1s | the largest random delay added to every such snooze |
//! | `FRONTA_STORAGE_WAIT` | 2s | snooze of an automation run whose first reads met an unavailable database (no attempt spent) |

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use fronta_automation::connector::Connector;
use fronta_automation::limits::{self, LimitRules, LimitsConfig};
use fronta_automation::mcp::McpServerStore;
use fronta_automation::poll::PollLimits;
use fronta_automation::secrets::{SecretCipher, SecretVault};
use fronta_connectors::{
    AddressPolicy, AllowList, Connectors, HttpConnector, HttpLimits, Keyring, MailConnector,
    MailLimits, McpConnector, McpLimits,
};

/// The connectors' settings and the cipher of this process.
#[derive(Clone)]
pub(crate) struct Outside {
    http: HttpConnector,
    mail: MailConnector,
    policy: AddressPolicy,
    mcp: McpLimits,
    pub cipher: Option<Arc<dyn SecretCipher>>,
    /// Per-(tenant, service) limits the connectors are wrapped in.
    pub limits: LimitsConfig,
    /// `Runtime::storage_wait` of the automation executor.
    pub storage_wait: Duration,
    /// The poll's limits.
    pub poll: PollLimits,
}

impl Outside {
    /// The longest an HTTP connector call may take (connecting, then the largest
    /// `timeoutSec`): a lease held over a call must be longer.
    pub(crate) fn longest_call(&self) -> Duration {
        self.http.limits().connect_timeout + self.http.limits().max_timeout
    }

    /// The connectors, reading MCP servers from `servers` and revealing their header
    /// secrets through `vault`.
    pub(crate) fn connectors(
        &self,
        servers: Arc<dyn McpServerStore>,
        vault: SecretVault,
    ) -> anyhow::Result<Arc<dyn Connector>> {
        let mcp = McpConnector::new(servers, Some(vault), self.policy.clone(), self.mcp.clone())
            .map_err(|err| anyhow!("MCP connector: {err}"))?;
        Ok(Arc::new(
            Connectors::new(self.http.clone())
                .with_mcp(mcp)
                .with_mail(self.mail.clone()),
        ))
    }
}

fn flag_var(name: &str) -> anyhow::Result<bool> {
    match var(name).as_deref().map(str::trim) {
        None | Some("0") | Some("false") => Ok(false),
        Some("1") | Some("true") => Ok(true),
        Some(other) => Err(anyhow!("{name}: expected 1 or 0, got {other:?}")),
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

fn duration_var(name: &str, default: Duration) -> anyhow::Result<Duration> {
    match var(name) {
        None => Ok(default),
        Some(text) => crate::duration::parse(&text).map_err(|err| anyhow!("{name}: {err}")),
    }
}

fn number_var(name: &str, default: usize) -> anyhow::Result<usize> {
    match var(name) {
        None => Ok(default),
        Some(text) => text
            .trim()
            .parse()
            .with_context(|| format!("{name}: not a whole number: {text:?}")),
    }
}

/// Read the settings above.
pub(crate) fn from_env() -> anyhow::Result<Outside> {
    let defaults = HttpLimits::default();
    let limits = HttpLimits {
        max_response_bytes: number_var(
            "FRONTA_HTTP_MAX_RESPONSE_BYTES",
            defaults.max_response_bytes,
        )?,
        default_timeout: duration_var("FRONTA_HTTP_TIMEOUT", defaults.default_timeout)?,
        max_timeout: duration_var("FRONTA_HTTP_MAX_TIMEOUT", defaults.max_timeout)?,
        connect_timeout: duration_var("FRONTA_HTTP_CONNECT_TIMEOUT", defaults.connect_timeout)?,
        max_redirects: number_var("FRONTA_HTTP_MAX_REDIRECTS", defaults.max_redirects)?,
        max_retry_after: duration_var("FRONTA_HTTP_MAX_RETRY_AFTER", defaults.max_retry_after)?,
    };
    let allow = AllowList::parse(&var("FRONTA_HTTP_ALLOW").unwrap_or_default())
        .map_err(|err| anyhow!("FRONTA_HTTP_ALLOW: {err}"))?;
    if !allow.is_empty() {
        tracing::warn!(allow = %allow.describe(), "connectors may reach these private hosts and networks (FRONTA_HTTP_ALLOW)");
    }
    let policy = AddressPolicy::new(allow);
    let http = HttpConnector::new(policy.clone(), limits)
        .map_err(|err| anyhow!("HTTP connector: {err}"))?;
    tracing::info!(limits = ?http.limits(), "http/request connector ready");
    let keyring = Keyring::from_env().map_err(|err| anyhow!("{err}"))?;
    let cipher: Option<Arc<dyn SecretCipher>> = match keyring {
        Some(keyring) => {
            tracing::info!(versions = ?keyring.versions(), current = keyring.current_version(), "secret keys configured");
            Some(Arc::new(keyring))
        }
        None => {
            tracing::info!(
                "no secret key (FRONTA_SECRET_KEY): steps that use secrets will fail, and secrets cannot be stored"
            );
            None
        }
    };
    let limits = limits_from_env()?;
    // A slot must outlive the longest call, or a live call's slot could expire and the
    // cap be exceeded.
    let longest = http.limits().connect_timeout + http.limits().max_timeout;
    if limits.rules.slot_lease <= longest {
        return Err(anyhow!(
            "FRONTA_SERVICE_SLOT_LEASE ({:?}) must be longer than the longest HTTP call \
             (FRONTA_HTTP_CONNECT_TIMEOUT + FRONTA_HTTP_MAX_TIMEOUT = {longest:?})",
            limits.rules.slot_lease
        ));
    }
    tracing::info!(?limits, "per-(tenant, service) limits and breakers");
    let mcp_defaults = McpLimits::default();
    let mcp = McpLimits {
        connect_timeout: duration_var("FRONTA_MCP_CONNECT_TIMEOUT", mcp_defaults.connect_timeout)?,
        max_result_bytes: number_var("FRONTA_MCP_MAX_RESULT_BYTES", mcp_defaults.max_result_bytes)?,
        allow_stdio: flag_var("FRONTA_MCP_STDIO")?,
    };
    if mcp.allow_stdio {
        tracing::warn!(
            "stdio MCP servers are on (FRONTA_MCP_STDIO): tenants' servers may run local commands on this host"
        );
    }
    tracing::info!(limits = ?mcp, "mcp/call-tool connector ready");
    let storage_wait = duration_var(
        "FRONTA_STORAGE_WAIT",
        fronta_automation::executor::DEFAULT_STORAGE_WAIT,
    )?;
    if storage_wait.is_zero() {
        return Err(anyhow!("FRONTA_STORAGE_WAIT: must be longer than zero"));
    }
    let mail_defaults = MailLimits::default();
    let mail_limits = MailLimits {
        connect_timeout: duration_var(
            "FRONTA_MAIL_CONNECT_TIMEOUT",
            mail_defaults.connect_timeout,
        )?,
        timeout: duration_var("FRONTA_MAIL_TIMEOUT", mail_defaults.timeout)?,
        message_bytes: number_var("FRONTA_MAIL_MESSAGE_BYTES", mail_defaults.message_bytes)?,
        text_bytes: number_var("FRONTA_MAIL_TEXT_BYTES", mail_defaults.text_bytes)?,
    };
    let mail = MailConnector::new(policy.clone(), mail_limits)
        .map_err(|err| anyhow!("mail poll connector (FRONTA_MAIL_*): {err}"))?;
    let poll = PollLimits {
        max_items: count_var(
            "FRONTA_POLL_MAX_ITEMS",
            u32::try_from(fronta_automation::poll::DEFAULT_MAX_ITEMS).unwrap_or(100),
        )? as usize,
    };
    tracing::info!(mail = ?mail_limits, ?poll, "poll sources ready (http, messages, mail)");
    Ok(Outside {
        http,
        mail,
        poll,
        policy,
        mcp,
        cipher,
        limits,
        storage_wait,
    })
}

fn count_var(name: &str, default: u32) -> anyhow::Result<u32> {
    let value = number_var(name, default as usize)?;
    match u32::try_from(value) {
        Ok(value) if value > 0 => Ok(value),
        _ => Err(anyhow!(
            "{name}: must be from 1 to {}, got {value}",
            u32::MAX
        )),
    }
}

/// The `FRONTA_SERVICE_*` and `FRONTA_BREAKER_*` settings.
fn limits_from_env() -> anyhow::Result<LimitsConfig> {
    let rules = LimitRules {
        max_concurrent: count_var(
            "FRONTA_SERVICE_MAX_CONCURRENT",
            limits::DEFAULT_MAX_CONCURRENT,
        )?,
        breaker_failures: count_var("FRONTA_BREAKER_FAILURES", limits::DEFAULT_BREAKER_FAILURES)?,
        cooldown: duration_var("FRONTA_BREAKER_COOLDOWN", limits::DEFAULT_BREAKER_COOLDOWN)?,
        slot_lease: duration_var("FRONTA_SERVICE_SLOT_LEASE", limits::DEFAULT_SLOT_LEASE)?,
    };
    if rules.slot_lease.is_zero() {
        return Err(anyhow!(
            "FRONTA_SERVICE_SLOT_LEASE: must be longer than zero"
        ));
    }
    Ok(LimitsConfig {
        rules,
        full_delay: duration_var("FRONTA_SERVICE_FULL_DELAY", limits::DEFAULT_FULL_DELAY)?,
        jitter: duration_var("FRONTA_SERVICE_JITTER", limits::DEFAULT_JITTER)?,
    })
}
