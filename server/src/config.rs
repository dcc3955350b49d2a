//! [`ServerConfig`]: every limit and switch of the HTTP server, named, with the defaults
//! API.md and DESIGN.md ask for. The binary fills it from flags and the environment;
//! tests shrink the limits.
//!
//! Left out: where the values come from (flags, files) and the stores themselves.

use std::time::Duration;

/// A token bucket: `burst` requests at once, refilled at `per_second`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Sustained requests per second.
    pub per_second: f64,
    /// Requests allowed at once after a quiet spell (the bucket's size).
    pub burst: u32,
}

impl RateLimit {
    pub fn new(per_second: f64, burst: u32) -> Self {
        Self { per_second, burst }
    }
}

/// The HTTP server's settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Lowercase hex SHA-256 of the admin token (`fronta_desk::token::hash`); `None` = no
    /// admin routes (every admin call answers 401).
    pub admin_token_hash: Option<String>,
    /// The URL clients reach this server at (`https://desk.example.com`), used for
    /// webhook URLs; `None` = scheme and `Host` as the client reached us.
    pub public_base_url: Option<String>,
    /// Honour `X-Forwarded-Proto` / `X-Forwarded-Host` when building URLs. Only behind a
    /// proxy that sets them: otherwise any client could choose the URL we print.
    pub trust_proxy_headers: bool,
    /// The largest request body, in bytes (API.md: 1 MiB by default).
    pub body_limit: usize,
    /// Webhook calls per webhook token (per automation).
    pub webhook_rate_per_token: Option<RateLimit>,
    /// Webhook calls per tenant, all its automations together.
    pub webhook_rate_per_tenant: Option<RateLimit>,
    /// REST calls per tenant token's tenant.
    pub api_rate_per_tenant: Option<RateLimit>,
    /// Failed authentications (a missing, unknown, expired or revoked token) per client
    /// address: past the burst, every request from that address answers 429 with
    /// `Retry-After` until the bucket refills, whatever token it carries.
    pub auth_failure_rate: Option<RateLimit>,
    /// Buckets kept per limiter before idle (full) ones are dropped.
    pub rate_limit_max_keys: usize,
    /// Standard Webhooks: how far `webhook-timestamp` may be from now, either way.
    pub signature_tolerance: Duration,
    /// Items per page when `?limit=` is not given.
    pub page_default: usize,
    /// The largest `?limit=` accepted (larger is clamped).
    pub page_max: usize,
    /// The most runs read from the store to fill one filtered page of runs.
    pub runs_scan_max: usize,
    /// The most runs a bulk action's preview reads to count its matches (more: it
    /// answers "at least" the count so far).
    pub bulk_preview_max: u64,
    /// `GET /readyz` answers 503 when the run store takes longer than this.
    pub ready_timeout: Duration,
    /// How often `GET /api/stream` looks at a streamed tenant's newest runs, tickets and
    /// incidents for changes made elsewhere (the worker, other processes).
    pub stream_poll_interval: Duration,
    /// How often an open `GET /api/stream` looks whether its token is still live: a
    /// revoked or expired token's stream ends within this long.
    pub stream_token_check: Duration,
    /// A keep-alive comment on an idle stream this often.
    pub stream_keep_alive: Duration,
    /// Dashboard widgets: `ttlSec` bounds, how many per tenant, the largest cached data,
    /// the refresh lease.
    pub widgets: fronta_automation::widget::WidgetLimits,
    /// The `Retry-After` of every 503 (the database did not answer), rounded up to whole
    /// seconds: how long a client is asked to wait before repeating.
    pub unavailable_retry_after: Duration,
    /// How long a webhook request waits for the database (finding its automation; the
    /// enqueue and its commit) before it answers 503. Bounds a request when the database
    /// stops answering without closing its connections (a partition), where only the
    /// pool's acquire timeout would not.
    pub webhook_store_deadline: Duration,
    /// The shortest time between two ticks of a schedule an automation may have
    /// (`--min-schedule-interval`): a cron firing more often is refused on save.
    pub min_schedule_interval: Duration,
    /// The longest `flow/pause` an automation may have (`--max-pause`): a longer literal
    /// is refused on save (the executor holds templated values to the same bound).
    pub max_pause: Duration,
    /// How long a dry run (`POST /api/automations/test`) may walk before it stops and
    /// answers what it did so far (`--test-time-limit`).
    pub test_time_limit: Duration,
    /// The operator's retention of finished runs (`--retain-*`): a tenant's own may only
    /// keep runs shorter.
    pub retention: fronta_engine::retention::Retention,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            admin_token_hash: None,
            public_base_url: None,
            trust_proxy_headers: false,
            body_limit: 1024 * 1024,
            webhook_rate_per_token: Some(RateLimit::new(50.0, 100)),
            webhook_rate_per_tenant: Some(RateLimit::new(200.0, 400)),
            api_rate_per_tenant: Some(RateLimit::new(50.0, 100)),
            auth_failure_rate: Some(RateLimit::new(0.5, 20)),
            rate_limit_max_keys: 10_000,
            signature_tolerance: Duration::from_secs(5 * 60),
            page_default: 50,
            page_max: 500,
            runs_scan_max: 5_000,
            bulk_preview_max: 100_000,
            ready_timeout: Duration::from_secs(2),
            stream_poll_interval: Duration::from_millis(500),
            stream_token_check: Duration::from_millis(500),
            stream_keep_alive: Duration::from_secs(15),
            widgets: fronta_automation::widget::WidgetLimits::default(),
            unavailable_retry_after: Duration::from_secs(5),
            webhook_store_deadline: Duration::from_secs(10),
            min_schedule_interval: Duration::from_secs(
                fronta_automation::validate::MIN_SCHEDULE_INTERVAL_SEC,
            ),
            max_pause: fronta_automation::steps::MAX_PAUSE,
            test_time_limit: fronta_automation::dry_run::DEFAULT_TIME_LIMIT,
            retention: fronta_engine::retention::Retention::default(),
        }
    }
}

impl ServerConfig {
    /// What a save checks an automation against: the tenant's ticket types (name →
    /// statuses) and this server's limits.
    pub fn validation(
        &self,
        ticket_types: std::collections::HashMap<String, Vec<String>>,
    ) -> fronta_automation::validate::ValidationContext {
        fronta_automation::validate::ValidationContext {
            ticket_types,
            min_schedule_interval: self.min_schedule_interval,
            max_pause: self.max_pause,
            groups: std::collections::HashMap::new(),
        }
    }

    /// Refuses limits that make no sense (a typo should stop the start, not the traffic).
    pub fn validate(&self) -> Result<(), String> {
        for (name, limit) in [
            ("webhook rate per token", self.webhook_rate_per_token),
            ("webhook rate per tenant", self.webhook_rate_per_tenant),
            ("API rate per tenant", self.api_rate_per_tenant),
        ] {
            if let Some(limit) = limit
                && (!(limit.per_second.is_finite() && limit.per_second > 0.0) || limit.burst == 0)
            {
                return Err(format!(
                    "{name}: the rate must be above 0 per second and the burst at least 1"
                ));
            }
        }
        if self.stream_poll_interval.is_zero()
            || self.stream_keep_alive.is_zero()
            || self.stream_token_check.is_zero()
        {
            return Err(
                "the stream's poll interval, token check and keep-alive must be above 0".into(),
            );
        }
        self.widgets.check()?;
        if self.unavailable_retry_after.is_zero() {
            return Err(
                "unavailable_retry_after (FRONTA_UNAVAILABLE_RETRY_AFTER) must be above 0".into(),
            );
        }
        if self.webhook_store_deadline.is_zero() {
            return Err(
                "webhook_store_deadline (FRONTA_WEBHOOK_STORE_DEADLINE) must be above 0".into(),
            );
        }
        if self.body_limit == 0 {
            return Err("the body limit must be at least 1 byte".into());
        }
        if self.page_default == 0 || self.page_max < self.page_default {
            return Err("page sizes: 1 ≤ default ≤ max".into());
        }
        if self.runs_scan_max < self.page_max {
            return Err("runs_scan_max must be at least page_max".into());
        }
        if let Some(url) = &self.public_base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!(
                "the public base URL must start with http:// or https://, got {url:?}"
            ));
        }
        if let Some(hash) = &self.admin_token_hash
            && (hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err("the admin token hash must be 64 hex digits (SHA-256)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_limit_bodies_to_one_mebibyte() {
        let config = ServerConfig::default();
        assert_eq!(config.validate(), Ok(()), "defaults validate");
        assert_eq!(config.body_limit, 1_048_576, "API.md's 1 MiB");
    }

    #[test]
    fn nonsense_limits_are_refused() {
        let zero_rate = ServerConfig {
            api_rate_per_tenant: Some(RateLimit::new(0.0, 10)),
            ..ServerConfig::default()
        };
        assert!(zero_rate.validate().is_err(), "a zero rate");
        let bad_url = ServerConfig {
            public_base_url: Some("desk.example.com".into()),
            ..ServerConfig::default()
        };
        assert!(bad_url.validate().is_err(), "a base URL without scheme");
        let bad_hash = ServerConfig {
            admin_token_hash: Some("secret".into()),
            ..ServerConfig::default()
        };
        assert!(
            bad_hash.validate().is_err(),
            "a hash that is not SHA-256 hex"
        );
        let no_wait = ServerConfig {
            unavailable_retry_after: Duration::ZERO,
            ..ServerConfig::default()
        };
        let refused = no_wait.validate().expect_err("a zero Retry-After");
        assert!(
            refused.contains("unavailable_retry_after"),
            "named: {refused}"
        );
        let no_deadline = ServerConfig {
            webhook_store_deadline: Duration::ZERO,
            ..ServerConfig::default()
        };
        let refused = no_deadline.validate().expect_err("a zero deadline");
        assert!(
            refused.contains("webhook_store_deadline"),
            "named: {refused}"
        );
    }
}
