//! What every working process is handed to reach the outside world: the connectors
//! (`http/request`, `mcp/call-tool`, `mail/send` over SMTP and the `mail` poll's IMAP,
//! all behind the SSRF guard), the secret keyring and the per-(tenant, service) limits.
//!
//! Each setting is a flag of `fronta serve` and `fronta worker` with its `FRONTA_*`
//! variable ([`ConnectorArgs`]; `--help` lists them by group with their defaults, and the
//! README has the same table). A variable set to a blank value counts as unset. A bad
//! value stops the process with a message naming the setting. `fronta demo` and
//! `fronta bench webhook` read the same variables ([`ConnectorArgs::from_environment`]).
//! Secret keys are never shown: not by `--help`, not in an error, not by `Debug`.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{Args, Parser};
use fronta_automation::connector::Connector;
use fronta_automation::mail::MailServerStore;
use fronta_automation::mcp::McpServerStore;
use fronta_automation::poll::PollLimits;
use fronta_automation::secrets::{SecretCipher, SecretVault};
use fronta_automation::service_limits::{LimitRules, LimitsConfig};
use fronta_connectors::{
    AddressPolicy, AllowList, Connectors, HttpConnector, HttpLimits, Keyring, MailConnector,
    MailLimits, McpConnector, McpLimits, SmtpConnector, SmtpLimits,
};

use crate::duration;

const HTTP: &str = "Connectors: http/request";
const MCP: &str = "Connectors: mcp/call-tool";
const MAIL: &str = "Poll sources";
const SMTP: &str = "Connectors: mail/send";
const SECRETS: &str = "Secrets";
const LIMITS: &str = "Per-service limits and breakers";
const RUNS: &str = "Automation runs";

/// The settings of the connectors, the keyring and the limits.
#[derive(Args, Debug, Clone)]
pub(crate) struct ConnectorArgs {
    /// Hosts, addresses and networks connectors may reach although private
    /// (`jira.internal, 10.1.0.0/16`). Default: none.
    #[arg(long, env = "FRONTA_HTTP_ALLOW", value_name = "LIST", value_parser = setting(AllowList::parse), help_heading = HTTP)]
    http_allow: Option<AllowList>,
    /// `timeoutSec` of a step that gives none.
    #[arg(long, env = "FRONTA_HTTP_TIMEOUT", default_value = "30s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = HTTP)]
    http_timeout: Duration,
    /// The largest `timeoutSec` a step may ask for.
    #[arg(long, env = "FRONTA_HTTP_MAX_TIMEOUT", default_value = "5m", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = HTTP)]
    http_max_timeout: Duration,
    /// Name lookup + TCP + TLS (a timeout here is retried).
    #[arg(long, env = "FRONTA_HTTP_CONNECT_TIMEOUT", default_value = "10s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = HTTP)]
    http_connect_timeout: Duration,
    /// The largest answer body, in bytes.
    #[arg(long, env = "FRONTA_HTTP_MAX_RESPONSE_BYTES", default_value = "1048576", value_name = "BYTES", value_parser = setting(whole_number), help_heading = HTTP)]
    http_max_response_bytes: usize,
    /// Redirect hops followed.
    #[arg(long, env = "FRONTA_HTTP_MAX_REDIRECTS", default_value = "5", value_name = "N", value_parser = setting(whole_number), help_heading = HTTP)]
    http_max_redirects: usize,
    /// A longer `Retry-After` is cut to this.
    #[arg(long, env = "FRONTA_HTTP_MAX_RETRY_AFTER", default_value = "1h", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = HTTP)]
    http_max_retry_after: Duration,

    /// 1: tenants' `stdio` MCP servers may run local commands on this host (0: they fail
    /// as not configured).
    #[arg(long, env = "FRONTA_MCP_STDIO", default_value = "0", value_name = "0|1", action = clap::ArgAction::Set, value_parser = setting(flag), help_heading = MCP)]
    mcp_stdio: bool,
    /// Name lookup + TCP + TLS of an MCP server over HTTP.
    #[arg(long, env = "FRONTA_MCP_CONNECT_TIMEOUT", default_value = "10s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = MCP)]
    mcp_connect_timeout: Duration,
    /// The largest JSON answer of an MCP server, in bytes.
    #[arg(long, env = "FRONTA_MCP_MAX_RESULT_BYTES", default_value = "1048576", value_name = "BYTES", value_parser = setting(whole_number), help_heading = MCP)]
    mcp_max_result_bytes: usize,

    /// Items (messages) one poll takes at most; the rest wait for the next poll.
    #[arg(long, env = "FRONTA_POLL_MAX_ITEMS", default_value = "100", value_name = "N", value_parser = setting(count), help_heading = MAIL)]
    poll_max_items: u32,
    /// Name lookup + TCP + TLS of an IMAP server (`mail` polls).
    #[arg(long, env = "FRONTA_MAIL_CONNECT_TIMEOUT", default_value = "10s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = MAIL)]
    mail_connect_timeout: Duration,
    /// One whole mail poll after connecting.
    #[arg(long, env = "FRONTA_MAIL_TIMEOUT", default_value = "60s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = MAIL)]
    mail_timeout: Duration,
    /// Bytes fetched of each message.
    #[arg(long, env = "FRONTA_MAIL_MESSAGE_BYTES", default_value = "1048576", value_name = "BYTES", value_parser = setting(whole_number), help_heading = MAIL)]
    mail_message_bytes: usize,
    /// Bytes of decoded text a message publishes (`text`).
    #[arg(long, env = "FRONTA_MAIL_TEXT_BYTES", default_value = "65536", value_name = "BYTES", value_parser = setting(whole_number), help_heading = MAIL)]
    mail_text_bytes: usize,

    /// One TCP connection to one address of a mail server (`mail/send`).
    #[arg(long, env = "FRONTA_SMTP_CONNECT_TIMEOUT", default_value = "10s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = SMTP)]
    smtp_connect_timeout: Duration,
    /// Everything before the message data (connecting, TLS, login, recipients): a timeout
    /// here is retried, nothing was sent.
    #[arg(long, env = "FRONTA_SMTP_TIMEOUT", default_value = "60s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = SMTP)]
    smtp_timeout: Duration,
    /// Sending the message data and waiting for the final reply: a timeout here is final
    /// (the message may have been sent).
    #[arg(long, env = "FRONTA_SMTP_DATA_TIMEOUT", default_value = "2m", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = SMTP)]
    smtp_data_timeout: Duration,

    /// Base64 of 32 random bytes (`head -c32 /dev/urandom | base64`); unset: secrets
    /// cannot be stored or used. Prefer the variable: a flag shows in `ps`.
    #[arg(long, env = "FRONTA_SECRET_KEY", hide_env_values = true, value_name = "BASE64", value_parser = secret, help_heading = SECRETS)]
    secret_key: Option<Secret>,
    /// The version new secrets are sealed with (a whole number from 1).
    #[arg(long, env = "FRONTA_SECRET_KEY_VERSION", default_value = "1", value_name = "N", help_heading = SECRETS)]
    secret_key_version: String,
    /// `version:base64,…`: older keys that still open the secrets sealed with them.
    /// Default: none.
    #[arg(long, env = "FRONTA_SECRET_OLD_KEYS", hide_env_values = true, value_name = "LIST", value_parser = secret, help_heading = SECRETS)]
    secret_old_keys: Option<Secret>,

    /// Connector calls in flight per (tenant, service), over every process on the database.
    #[arg(long, env = "FRONTA_SERVICE_MAX_CONCURRENT", default_value = "8", value_name = "N", value_parser = setting(count), help_heading = LIMITS)]
    service_max_concurrent: u32,
    /// Consecutive retryable failures (5xx, 429, connection errors) that open a
    /// service's breaker.
    #[arg(long, env = "FRONTA_BREAKER_FAILURES", default_value = "5", value_name = "N", value_parser = setting(count), help_heading = LIMITS)]
    breaker_failures: u32,
    /// How long an open breaker snoozes calls before it lets one probe through.
    #[arg(long, env = "FRONTA_BREAKER_COOLDOWN", default_value = "30s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = LIMITS)]
    breaker_cooldown: Duration,
    /// A call's slot frees itself after this (when its process died mid-call); longer
    /// than the longest HTTP call.
    #[arg(long, env = "FRONTA_SERVICE_SLOT_LEASE", default_value = "10m", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = LIMITS)]
    service_slot_lease: Duration,
    /// How long a run that met a full cap (or a probe in flight) is snoozed.
    #[arg(long, env = "FRONTA_SERVICE_FULL_DELAY", default_value = "2s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = LIMITS)]
    service_full_delay: Duration,
    /// The largest random delay added to every such snooze.
    #[arg(long, env = "FRONTA_SERVICE_JITTER", default_value = "1s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = LIMITS)]
    service_jitter: Duration,

    /// How long an automation run is snoozed when its first reads meet an unavailable
    /// database (no attempt spent).
    #[arg(long, env = "FRONTA_STORAGE_WAIT", default_value = "2s", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = RUNS)]
    storage_wait: Duration,
    /// The longest `flow/pause` a step may take: a longer literal is refused on save, a
    /// longer templated value fails its step. At most 3660 days.
    #[arg(long, env = "FRONTA_MAX_PAUSE", default_value = "366d", value_name = "DURATION", value_parser = setting(duration::parse), help_heading = RUNS)]
    pub(crate) max_pause: Duration,
    /// Runs a bulk action (`POST /api/runs/bulk`) reads per page, acts on in one store
    /// call and checkpoints after: a crash replays at most one page.
    #[arg(long, env = "FRONTA_BULK_BATCH", default_value_t = fronta_automation::bulk::DEFAULT_BULK_BATCH, value_name = "RUNS", value_parser = clap::value_parser!(u64).range(1..=10_000).map(|runs| runs as usize), help_heading = RUNS)]
    bulk_batch: usize,
}

/// Only the settings, for commands that have no flags for them: read from the
/// environment and the defaults.
#[derive(Parser, Debug)]
#[command(name = "fronta")]
struct EnvironmentOnly {
    #[command(flatten)]
    outside: ConnectorArgs,
}

impl ConnectorArgs {
    /// The settings as the environment gives them (`fronta demo`, `fronta bench webhook`).
    pub(crate) fn from_environment() -> anyhow::Result<Self> {
        EnvironmentOnly::try_parse_from(["fronta"])
            .map(|only| only.outside)
            .map_err(|err| anyhow!("{}", err.to_string().trim().trim_start_matches("error: ")))
    }
}

/// A secret setting's value: `Debug` never shows it.
#[derive(Clone)]
pub(crate) struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

pub(crate) fn secret(text: &str) -> Result<Secret, std::convert::Infallible> {
    Ok(Secret(text.to_owned()))
}

/// The value parser of a setting: `parse` the text, where a blank value (an empty
/// variable) stands for the default, as an unset one does; an error names the setting by
/// its variable and its flag, and quotes only what `parse` says.
#[derive(Clone)]
pub(crate) struct Setting<F>(F);

pub(crate) fn setting<T, F>(parse: F) -> Setting<F>
where
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    Setting(parse)
}

impl<T, F> TypedValueParser for Setting<F>
where
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let fail = |message: String| {
            let name = arg.map(setting_name).unwrap_or_else(|| "a setting".into());
            clap::Error::raw(ErrorKind::ValueValidation, format!("{name}: {message}\n"))
                .with_cmd(cmd)
        };
        let text = value.to_str().ok_or_else(|| fail("not UTF-8".into()))?;
        let default = arg
            .and_then(|arg| arg.get_default_values().first())
            .and_then(|default| default.to_str());
        let text = match default {
            Some(default) if text.trim().is_empty() => default,
            _ => text,
        };
        (self.0)(text).map_err(fail)
    }
}

/// `FRONTA_X (--x)`, or `--x` for a flag with no variable.
fn setting_name(arg: &clap::Arg) -> String {
    let long = arg
        .get_long()
        .map_or_else(|| arg.get_id().to_string(), |long| format!("--{long}"));
    match arg.get_env() {
        Some(env) => format!("{} ({long})", env.to_string_lossy()),
        None => long,
    }
}

fn whole_number(text: &str) -> Result<usize, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("not a whole number: {text:?}"))
}

/// A whole number from 1 to `u32::MAX`.
fn count(text: &str) -> Result<u32, String> {
    let value = whole_number(text)?;
    match u32::try_from(value) {
        Ok(value) if value > 0 => Ok(value),
        _ => Err(format!("must be from 1 to {}, got {value}", u32::MAX)),
    }
}

fn flag(text: &str) -> Result<bool, String> {
    match text.trim() {
        "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        other => Err(format!("expected 1 or 0, got {other:?}")),
    }
}

/// The connectors' settings and the cipher of this process.
#[derive(Clone)]
pub(crate) struct ConnectorSetup {
    http: HttpConnector,
    mail: MailConnector,
    policy: AddressPolicy,
    mcp: McpLimits,
    smtp: SmtpLimits,
    pub cipher: Option<Arc<dyn SecretCipher>>,
    /// Per-(tenant, service) limits the connectors are wrapped in.
    pub limits: LimitsConfig,
    /// `Runtime::storage_wait` of the automation executor.
    pub storage_wait: Duration,
    /// `Runtime::max_pause` of the automation executor.
    pub max_pause: Duration,
    /// The page of a bulk action (`fronta_automation::bulk::register`).
    pub bulk_batch: usize,
    /// The poll's limits.
    pub poll: PollLimits,
}

impl ConnectorSetup {
    /// The longest an HTTP connector call may take (connecting, then the largest
    /// `timeoutSec`): a lease held over a call must be longer.
    pub(crate) fn longest_call(&self) -> Duration {
        self.http.limits().connect_timeout + self.http.limits().max_timeout
    }

    /// The address policy every connector reaches the outside through (the server judges
    /// a saved mail server's host by it).
    pub(crate) fn address_policy(&self) -> AddressPolicy {
        self.policy.clone()
    }

    /// The connectors, reading MCP servers from `servers` and mail servers from
    /// `mail_servers`, revealing their secrets (headers, passwords) through `vault`.
    pub(crate) fn connectors(
        &self,
        servers: Arc<dyn McpServerStore>,
        mail_servers: Arc<dyn MailServerStore>,
        vault: SecretVault,
    ) -> anyhow::Result<Arc<dyn Connector>> {
        let mcp = McpConnector::new(
            servers,
            Some(vault.clone()),
            self.policy.clone(),
            self.mcp.clone(),
        )
        .map_err(|err| anyhow!("MCP connector: {err}"))?;
        let smtp = SmtpConnector::new(mail_servers, Some(vault), self.policy.clone(), self.smtp)
            .map_err(|err| anyhow!("mail/send connector (FRONTA_SMTP_*): {err}"))?;
        Ok(Arc::new(
            Connectors::new(self.http.clone())
                .with_mcp(mcp)
                .with_smtp(smtp)
                .with_mail(self.mail.clone()),
        ))
    }
}

impl ConnectorArgs {
    /// The connectors, keyring and limits these settings describe; the checks between
    /// settings (a slot lease longer than the longest call, waits above zero).
    pub(crate) fn setup(&self) -> anyhow::Result<ConnectorSetup> {
        let limits = HttpLimits {
            max_response_bytes: self.http_max_response_bytes,
            default_timeout: self.http_timeout,
            max_timeout: self.http_max_timeout,
            connect_timeout: self.http_connect_timeout,
            max_redirects: self.http_max_redirects,
            max_retry_after: self.http_max_retry_after,
        };
        let allow = self.http_allow.clone().unwrap_or_default();
        if !allow.is_empty() {
            tracing::warn!(allow = %allow.describe(), "connectors may reach these private hosts and networks (FRONTA_HTTP_ALLOW)");
        }
        let policy = AddressPolicy::new(allow);
        let http = HttpConnector::new(policy.clone(), limits)
            .map_err(|err| anyhow!("HTTP connector: {err}"))?;
        tracing::info!(limits = ?http.limits(), "http/request connector ready");
        let cipher: Option<Arc<dyn SecretCipher>> = match self.keyring()? {
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
        let limits = self.limits()?;
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
        let smtp = SmtpLimits {
            connect_timeout: self.smtp_connect_timeout,
            timeout: self.smtp_timeout,
            data_timeout: self.smtp_data_timeout,
        };
        if [smtp.connect_timeout, smtp.timeout, smtp.data_timeout]
            .iter()
            .any(Duration::is_zero)
        {
            return Err(anyhow!(
                "FRONTA_SMTP_CONNECT_TIMEOUT, FRONTA_SMTP_TIMEOUT and FRONTA_SMTP_DATA_TIMEOUT \
                 must be longer than zero"
            ));
        }
        if limits.rules.slot_lease <= smtp.longest_call() {
            return Err(anyhow!(
                "FRONTA_SERVICE_SLOT_LEASE ({:?}) must be longer than the longest mail/send \
                 call (FRONTA_SMTP_TIMEOUT + FRONTA_SMTP_DATA_TIMEOUT and 5 s to close = {:?})",
                limits.rules.slot_lease,
                smtp.longest_call()
            ));
        }
        tracing::info!(limits = ?smtp, "mail/send connector ready");
        tracing::info!(?limits, "per-(tenant, service) limits and breakers");
        let mcp = McpLimits {
            connect_timeout: self.mcp_connect_timeout,
            max_result_bytes: self.mcp_max_result_bytes,
            allow_stdio: self.mcp_stdio,
        };
        if mcp.allow_stdio {
            tracing::warn!(
                "stdio MCP servers are on (FRONTA_MCP_STDIO): tenants' servers may run local commands on this host"
            );
        }
        tracing::info!(limits = ?mcp, "mcp/call-tool connector ready");
        if self.storage_wait.is_zero() {
            return Err(anyhow!("FRONTA_STORAGE_WAIT: must be longer than zero"));
        }
        if self.max_pause > fronta_automation::steps::MAX_PAUSE_CEILING {
            return Err(anyhow!(
                "--max-pause (FRONTA_MAX_PAUSE): {} is above the most it may be, {}",
                duration::format(self.max_pause),
                duration::format(fronta_automation::steps::MAX_PAUSE_CEILING)
            ));
        }
        let mail_limits = MailLimits {
            connect_timeout: self.mail_connect_timeout,
            timeout: self.mail_timeout,
            message_bytes: self.mail_message_bytes,
            text_bytes: self.mail_text_bytes,
        };
        let mail = MailConnector::new(policy.clone(), mail_limits)
            .map_err(|err| anyhow!("mail poll connector (FRONTA_MAIL_*): {err}"))?;
        let poll = PollLimits {
            max_items: self.poll_max_items as usize,
        };
        tracing::info!(mail = ?mail_limits, ?poll, "poll sources ready (http, messages, mail)");
        Ok(ConnectorSetup {
            http,
            mail,
            poll,
            policy,
            mcp,
            smtp,
            cipher,
            limits,
            storage_wait: self.storage_wait,
            max_pause: self.max_pause,
            bulk_batch: self.bulk_batch,
        })
    }

    /// The keyring, or `None` without `FRONTA_SECRET_KEY`.
    fn keyring(&self) -> anyhow::Result<Option<Keyring>> {
        let Some(key) = &self.secret_key else {
            return Ok(None);
        };
        Keyring::from_config(
            key.expose(),
            Some(&self.secret_key_version),
            self.secret_old_keys.as_ref().map(Secret::expose),
        )
        .map(Some)
        .map_err(|err| anyhow!("{err}"))
    }

    /// The `FRONTA_SERVICE_*` and `FRONTA_BREAKER_*` settings.
    fn limits(&self) -> anyhow::Result<LimitsConfig> {
        let rules = LimitRules {
            max_concurrent: self.service_max_concurrent,
            breaker_failures: self.breaker_failures,
            cooldown: self.breaker_cooldown,
            slot_lease: self.service_slot_lease,
        };
        if rules.slot_lease.is_zero() {
            return Err(anyhow!(
                "FRONTA_SERVICE_SLOT_LEASE: must be longer than zero"
            ));
        }
        Ok(LimitsConfig {
            rules,
            full_delay: self.service_full_delay,
            jitter: self.service_jitter,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    struct Given {
        #[command(flatten)]
        outside: ConnectorArgs,
    }

    fn given(args: &[&str]) -> Result<ConnectorArgs, clap::Error> {
        Given::try_parse_from(std::iter::once("fronta").chain(args.iter().copied()))
            .map(|given| given.outside)
    }

    #[test]
    fn the_defaults_shown_in_help_are_the_libraries_defaults() {
        let args = given(&[]).expect("no flags parse");
        let http = HttpLimits::default();
        assert_eq!(
            (
                args.http_timeout,
                args.http_max_timeout,
                args.http_connect_timeout,
                args.http_max_response_bytes,
                args.http_max_redirects,
                args.http_max_retry_after,
            ),
            (
                http.default_timeout,
                http.max_timeout,
                http.connect_timeout,
                http.max_response_bytes,
                http.max_redirects,
                http.max_retry_after,
            ),
            "http/request"
        );
        let mcp = McpLimits::default();
        assert_eq!(
            (
                args.mcp_stdio,
                args.mcp_connect_timeout,
                args.mcp_max_result_bytes
            ),
            (mcp.allow_stdio, mcp.connect_timeout, mcp.max_result_bytes),
            "mcp/call-tool"
        );
        let mail = MailLimits::default();
        assert_eq!(
            (
                args.poll_max_items as usize,
                args.mail_connect_timeout,
                args.mail_timeout,
                args.mail_message_bytes,
                args.mail_text_bytes,
            ),
            (
                PollLimits::default().max_items,
                mail.connect_timeout,
                mail.timeout,
                mail.message_bytes,
                mail.text_bytes,
            ),
            "polls"
        );
        let smtp = SmtpLimits::default();
        assert_eq!(
            (
                args.smtp_connect_timeout,
                args.smtp_timeout,
                args.smtp_data_timeout
            ),
            (smtp.connect_timeout, smtp.timeout, smtp.data_timeout),
            "mail/send"
        );
        let limits = args.limits().expect("the default limits");
        assert_eq!(limits, LimitsConfig::default(), "limits and breakers");
        assert_eq!(
            args.storage_wait,
            fronta_automation::executor::DEFAULT_STORAGE_WAIT,
            "storage wait"
        );
        assert!(
            args.secret_key.is_none() && args.secret_old_keys.is_none(),
            "no keys unless given"
        );
    }

    #[test]
    fn a_blank_value_is_the_default_as_an_unset_variable_is() {
        let args = given(&[
            "--http-timeout",
            "",
            "--poll-max-items",
            "  ",
            "--mcp-stdio",
            "",
        ])
        .expect("blank values parse");
        assert_eq!(args.http_timeout, Duration::from_secs(30), "a duration");
        assert_eq!(args.poll_max_items, 100, "a count");
        assert!(!args.mcp_stdio, "a flag");
        let args = given(&["--http-timeout", "1.5s", "--mcp-stdio", "1"]).expect("parses");
        assert_eq!(
            args.http_timeout,
            Duration::from_millis(1500),
            "a value given"
        );
        assert!(args.mcp_stdio, "1 turns stdio on");
    }

    #[test]
    fn a_bad_value_names_the_setting_by_variable_and_flag() {
        let cases = [
            (
                &["--http-timeout", "soon"][..],
                "FRONTA_HTTP_TIMEOUT (--http-timeout)",
            ),
            (&["--http-max-redirects=-1"], "FRONTA_HTTP_MAX_REDIRECTS"),
            (&["--service-max-concurrent", "0"], "must be from 1"),
            (
                &["--breaker-failures", "4294967296"],
                "FRONTA_BREAKER_FAILURES",
            ),
            (&["--mcp-stdio", "yes"], "expected 1 or 0"),
            (
                &["--http-allow", "10.0.0.0/99"],
                "FRONTA_HTTP_ALLOW (--http-allow)",
            ),
            (
                &["--service-jitter", "99999999999999999999d"],
                "too long a duration",
            ),
        ];
        for (args, expected) in cases {
            let message = given(args).expect_err("refused").to_string();
            assert!(
                message.contains(expected),
                "{args:?}: expected {expected:?} in {message:?}"
            );
            assert_eq!(
                message.trim().lines().count(),
                1,
                "{args:?}: one line: {message:?}"
            );
        }
    }

    #[test]
    fn checks_between_settings_still_hold() {
        let short_lease = given(&["--service-slot-lease", "1m"]).expect("parses");
        let message = short_lease.setup().err().expect("refused").to_string();
        assert!(
            message.contains("FRONTA_SERVICE_SLOT_LEASE") && message.contains("longest HTTP call"),
            "{message}"
        );
        let slow_mail = given(&["--smtp-data-timeout", "10m"]).expect("parses");
        let message = slow_mail.setup().err().expect("refused").to_string();
        assert!(
            message.contains("FRONTA_SERVICE_SLOT_LEASE") && message.contains("mail/send"),
            "{message}"
        );
        let no_wait = given(&["--storage-wait", "0s"]).expect("parses");
        let message = no_wait.setup().err().expect("refused").to_string();
        assert!(message.contains("FRONTA_STORAGE_WAIT"), "{message}");
    }

    #[test]
    fn secret_keys_are_never_shown() {
        let key = "c2VjcmV0LWtleS1tYXRlcmlhbC10aGF0LWxlYWtz";
        let args = given(&[
            "--secret-key",
            key,
            "--secret-old-keys",
            &format!("2:{key}"),
        ])
        .expect("parses");
        assert!(
            !format!("{args:?}").contains(key),
            "Debug hides the keys: {args:?}"
        );
        let message = args
            .setup()
            .err()
            .expect("a key of the wrong length")
            .to_string();
        assert!(
            message.contains("FRONTA_SECRET_KEY") && !message.contains(key),
            "the error names the setting, not the key: {message}"
        );
        let good = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
        let args = given(&["--secret-key", good, "--secret-key-version", "2"]).expect("parses");
        let outside = args.setup().expect("a good key");
        assert!(outside.cipher.is_some(), "a keyring");
    }
}
