//! The `http/request` step: builds a request from the rendered input, sends it through
//! the SSRF guard, follows redirects itself (each hop checked), reads the answer within
//! the limits and answers `status`, `headers` and `body` (parsed when JSON).
//!
//! Classification (DESIGN.md §4.5, through [`Cause`]):
//!
//! | what happened | cause | retried |
//! |---|---|---|
//! | could not connect (refused, DNS failure, TLS) | `Connection` | yes |
//! | connecting took longer than `connect_timeout` | `TimeoutBeforeSend` | yes |
//! | 5xx, 429 | `HttpStatus` (+ `Retry-After`, seconds or HTTP-date) | yes |
//! | other 4xx | `HttpStatus` | no |
//! | no answer within `timeoutSec` after connecting | `TimeoutAfterSend` | no: it may have happened |
//! | connection broke after sending | `BrokenAfterSend` | no: same doubt |
//! | body over `max_response_bytes`, too many redirects | `BadAnswer` | no |
//! | bad method, URL, header, timeout; refused address | `BadInput` | no |
//!
//! Timeouts: connecting (name lookup, TCP, TLS) has its own limit, so a timeout there is
//! known to be "before the request was sent"; `timeoutSec` then bounds the wait for the
//! whole answer, redirects included.
//!
//! Redirects are followed by this code, not the client's, so that every hop is checked
//! and a hop to another origin drops `Authorization`, `Cookie` and every header holding a
//! secret. 303 (and 301/302 after a POST) continue as GET without a body; 307/308 keep
//! method and body.
//!
//! Never logged: the input, header values, query strings, bodies. Log lines name the
//! method, scheme, host, path and the outcome.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::retry::Cause;
use fronta_automation::secrets::Revealed;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value};
use tokio::time::Instant;
use url::Url;

use crate::ssrf::{AddressPolicy, GuardedResolver, NameLookup, Refused, SystemLookup};

/// Default of [`HttpLimits::max_response_bytes`]: 1 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// Default of [`HttpLimits::default_timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`HttpLimits::max_timeout`].
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Default of [`HttpLimits::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`HttpLimits::max_redirects`].
pub const DEFAULT_MAX_REDIRECTS: usize = 5;
/// Default of [`HttpLimits::max_retry_after`].
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// How much of an error answer's body goes into the step's message.
pub const ERROR_BODY_EXCERPT: usize = 300;

/// Methods a step may use.
pub const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// Headers a step may not set: the client frames the request and picks the host.
const RESERVED_HEADERS: [&str; 10] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-connection",
];

/// The limits of `http/request`, each configurable (the `FRONTA_HTTP_*` settings of the
/// binary, `fronta serve --help`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// The largest answer body read; a larger one fails the step (`BadAnswer`).
    pub max_response_bytes: usize,
    /// `timeoutSec` when the step gives none.
    pub default_timeout: Duration,
    /// The largest `timeoutSec` a step may ask for.
    pub max_timeout: Duration,
    /// Name lookup + TCP + TLS.
    pub connect_timeout: Duration,
    /// Redirect hops followed before the step fails.
    pub max_redirects: usize,
    /// A longer `Retry-After` is cut to this.
    pub max_retry_after: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            default_timeout: DEFAULT_TIMEOUT,
            max_timeout: DEFAULT_MAX_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_redirects: DEFAULT_MAX_REDIRECTS,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
        }
    }
}

/// The `http/request` connector: one pooled client behind the SSRF guard.
#[derive(Clone)]
pub struct HttpConnector {
    client: reqwest::Client,
    policy: Arc<AddressPolicy>,
    limits: HttpLimits,
}

impl std::fmt::Debug for HttpConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConnector")
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .finish()
    }
}

/// The request a step's input describes.
struct Request {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Option<Vec<u8>>,
    timeout: Duration,
}

fn bad_input(message: impl Into<String>) -> ConnectorFailure {
    ConnectorFailure::new(Cause::BadInput, message)
}

/// `scheme://host[:port]/path`: what messages and logs show of a URL (no user, no query).
pub fn describe(url: &Url) -> String {
    let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    shown.push_str(url.path());
    shown
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// The outbound HTTP client behind the SSRF guard (shared by `http/request` and the MCP
/// client): ring TLS with the web's roots, names resolved through the guard, no redirects
/// followed, no retries, no proxy.
pub(crate) fn guarded_client(
    policy: Arc<AddressPolicy>,
    lookup: Arc<dyn NameLookup>,
    connect_timeout: Duration,
) -> Result<reqwest::Client, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|err| format!("TLS configuration: {err}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let resolver = GuardedResolver { policy, lookup };
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .dns_resolver(Arc::new(resolver))
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .no_proxy()
        .connect_timeout(connect_timeout)
        .user_agent(concat!("fronta/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|err| format!("the HTTP client cannot be built: {err}"))
}

impl HttpConnector {
    /// A connector resolving names with the system's resolver.
    pub fn new(policy: AddressPolicy, limits: HttpLimits) -> Result<Self, String> {
        Self::with_lookup(policy, limits, Arc::new(SystemLookup))
    }

    /// A connector resolving names with `lookup` (tests inject a fixed table).
    pub fn with_lookup(
        policy: AddressPolicy,
        limits: HttpLimits,
        lookup: Arc<dyn NameLookup>,
    ) -> Result<Self, String> {
        if limits.default_timeout.is_zero()
            || limits.connect_timeout.is_zero()
            || limits.default_timeout > limits.max_timeout
        {
            return Err(format!(
                "HTTP timeouts must be above zero and the default ({:?}) at most the maximum ({:?})",
                limits.default_timeout, limits.max_timeout
            ));
        }
        let policy = Arc::new(policy);
        let client = guarded_client(policy.clone(), lookup, limits.connect_timeout)?;
        Ok(Self {
            client,
            policy,
            limits,
        })
    }

    pub fn limits(&self) -> &HttpLimits {
        &self.limits
    }

    fn request(&self, input: &Map<String, Value>) -> Result<Request, ConnectorFailure> {
        let method = match input.get("method") {
            None | Some(Value::Null) => Method::GET,
            Some(Value::String(name)) if METHODS.contains(&name.to_ascii_uppercase().as_str()) => {
                Method::from_bytes(name.to_ascii_uppercase().as_bytes())
                    .map_err(|_| bad_input(format!("input \"method\": {name:?} is not a method")))?
            }
            Some(other) => {
                return Err(bad_input(format!(
                    "input \"method\" must be one of {}, got {other}",
                    METHODS.join(", ")
                )));
            }
        };
        let url_text = match input.get("url") {
            Some(Value::String(url)) if !url.trim().is_empty() => url.trim(),
            _ => return Err(bad_input("input \"url\" is required and must be text")),
        };
        let mut url = Url::parse(url_text)
            .map_err(|err| bad_input(format!("input \"url\" is not a URL: {err}")))?;
        match input.get("query") {
            None | Some(Value::Null) => {}
            Some(Value::Object(query)) => {
                let mut pairs = url.query_pairs_mut();
                for (key, value) in query {
                    let values = match value {
                        Value::Null => Vec::new(),
                        Value::Array(items) => items.iter().collect(),
                        one => vec![one],
                    };
                    for value in values {
                        let text = scalar_text(value).ok_or_else(|| {
                            bad_input(format!(
                                "input \"query\": {key:?} must be text, a number, a boolean or a list of them"
                            ))
                        })?;
                        pairs.append_pair(key, &text);
                    }
                }
            }
            Some(_) => return Err(bad_input("input \"query\" must be an object")),
        }
        let mut headers = HeaderMap::new();
        match input.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(given)) => {
                for (name, value) in given {
                    let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                        bad_input(format!("input \"headers\": {name:?} is not a header name"))
                    })?;
                    if RESERVED_HEADERS.contains(&header.as_str()) {
                        return Err(bad_input(format!(
                            "input \"headers\": {name:?} is set by the client and cannot be given"
                        )));
                    }
                    let text = scalar_text(value).ok_or_else(|| {
                        bad_input(format!("input \"headers\": {name:?} must be text"))
                    })?;
                    let value = HeaderValue::from_str(&text).map_err(|_| {
                        bad_input(format!(
                            "input \"headers\": the value of {name:?} holds characters a header cannot"
                        ))
                    })?;
                    headers.append(header, value);
                }
            }
            Some(_) => return Err(bad_input("input \"headers\" must be an object")),
        }
        let body = match input.get("body") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => {
                if !headers.contains_key(header::CONTENT_TYPE) {
                    headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; charset=utf-8"),
                    );
                }
                Some(text.clone().into_bytes())
            }
            Some(json) => {
                if !headers.contains_key(header::CONTENT_TYPE) {
                    headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
                Some(serde_json::to_vec(json).map_err(|err| bad_input(err.to_string()))?)
            }
        };
        let timeout = match input.get("timeoutSec") {
            None | Some(Value::Null) => self.limits.default_timeout,
            Some(value) => {
                let max = self.limits.max_timeout.as_secs_f64();
                let seconds = value
                    .as_f64()
                    .filter(|seconds| seconds.is_finite() && *seconds > 0.0 && *seconds <= max)
                    .ok_or_else(|| {
                        bad_input(format!(
                            "input \"timeoutSec\" must be a number above 0 and at most {max} (FRONTA_HTTP_MAX_TIMEOUT), got {value}"
                        ))
                    })?;
                Duration::from_secs_f64(seconds)
            }
        };
        Ok(Request {
            method,
            url,
            headers,
            body,
            timeout,
        })
    }

    /// Perform one `http/request` step.
    pub async fn call(&self, call: ConnectorCall<'_>) -> Result<ConnectorReply, ConnectorFailure> {
        let request = self.request(&call.input)?;
        let method = request.method.clone();
        let first = describe(&request.url);
        let result = self.send(request, call.secrets).await;
        match &result {
            Ok(reply) => tracing::info!(run = call.run_id, step = call.step_name,
                service = call.service.unwrap_or(""), tenant = %call.tenant,
                method = %method, url = %call.secrets.scrub(&first),
                outcome = %call.secrets.scrub(&reply.message), "http/request answered"),
            Err(failure) => tracing::warn!(run = call.run_id, step = call.step_name,
                service = call.service.unwrap_or(""), tenant = %call.tenant,
                method = %method, url = %call.secrets.scrub(&first), cause = ?failure.cause,
                retryable = failure.cause.retryable(),
                message = %call.secrets.scrub(&failure.message), "http/request failed"),
        }
        result
    }

    async fn send(
        &self,
        request: Request,
        secrets: &Revealed,
    ) -> Result<ConnectorReply, ConnectorFailure> {
        let Request {
            mut method,
            mut url,
            mut headers,
            mut body,
            timeout,
        } = request;
        let deadline = Instant::now() + timeout;
        let first = describe(&url);
        let mut hops = 0usize;
        loop {
            let what = if hops == 0 {
                format!("{method} {}", describe(&url))
            } else {
                format!("{method} {} (redirect {hops} from {first})", describe(&url))
            };
            self.policy
                .check_url(&url)
                .map_err(|Refused(reason)| bad_input(format!("{what}: refused: {reason}")))?;
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ConnectorFailure::new(
                    Cause::TimeoutAfterSend,
                    format!(
                        "{what}: the redirects took longer than {timeout:?}; an earlier hop was sent, so it is not retried"
                    ),
                ));
            }
            let mut builder = self
                .client
                .request(method.clone(), url.clone())
                .headers(headers.clone())
                .timeout(self.limits.connect_timeout + remaining);
            if let Some(body) = &body {
                builder = builder.body(body.clone());
            }
            let response = builder
                .send()
                .await
                .map_err(|err| self.classify(err, &what, timeout))?;
            let status = response.status();
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned);
            let Some(location) = location.filter(|_| status.is_redirection()) else {
                return self.answer(response, &what, deadline, timeout).await;
            };
            if hops >= self.limits.max_redirects {
                return Err(ConnectorFailure::new(
                    Cause::BadAnswer,
                    format!(
                        "{what}: more than {} redirects (FRONTA_HTTP_MAX_REDIRECTS)",
                        self.limits.max_redirects
                    ),
                ));
            }
            hops += 1;
            let next = url.join(&location).map_err(|err| {
                ConnectorFailure::new(
                    Cause::BadAnswer,
                    format!("{what}: answered {status} with a Location that is not a URL: {err}"),
                )
            })?;
            if let Err(Refused(reason)) = self.policy.check_url(&next) {
                tracing::warn!(from = %describe(&url), to = %describe(&next), %reason, "SSRF guard: redirect refused");
                return Err(bad_input(format!(
                    "{what}: answered {status}, a redirect to {} that was refused: {reason}",
                    describe(&next)
                )));
            }
            let as_get = status == StatusCode::SEE_OTHER
                || (matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND)
                    && method == Method::POST);
            if as_get {
                if method != Method::HEAD {
                    method = Method::GET;
                }
                body = None;
                headers.remove(header::CONTENT_TYPE);
            }
            if next.origin() != url.origin() {
                let dropped = drop_sensitive(&mut headers, secrets);
                if !dropped.is_empty() {
                    tracing::info!(from = %describe(&url), to = %describe(&next), dropped = ?dropped,
                        "redirect to another origin: headers with credentials dropped");
                }
            }
            tracing::debug!(from = %describe(&url), to = %describe(&next), %status, "following a redirect");
            url = next;
        }
    }

    fn classify(&self, err: reqwest::Error, what: &str, timeout: Duration) -> ConnectorFailure {
        if let Some(Refused(reason)) = find_source::<Refused>(&err) {
            return bad_input(format!("{what}: refused: {reason}"));
        }
        let detail = error_chain(&err);
        if err.is_connect() {
            if err.is_timeout() {
                return ConnectorFailure::new(
                    Cause::TimeoutBeforeSend,
                    format!(
                        "{what}: could not connect within {:?} (the request was not sent)",
                        self.limits.connect_timeout
                    ),
                );
            }
            return ConnectorFailure::new(
                Cause::Connection,
                format!("{what}: could not connect: {detail}"),
            );
        }
        if err.is_timeout() {
            return ConnectorFailure::new(
                Cause::TimeoutAfterSend,
                format!(
                    "{what}: the request was sent and no answer came within {timeout:?}; it may have reached the service, so it is not retried"
                ),
            );
        }
        if err.is_builder() {
            return bad_input(format!("{what}: {detail}"));
        }
        ConnectorFailure::new(
            Cause::BrokenAfterSend,
            format!(
                "{what}: the connection broke after the request was sent ({detail}); it may have reached the service, so it is not retried"
            ),
        )
    }

    async fn answer(
        &self,
        mut response: reqwest::Response,
        what: &str,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<ConnectorReply, ConnectorFailure> {
        let status = response.status();
        let max = self.limits.max_response_bytes;
        let too_large = || {
            ConnectorFailure::new(
                Cause::BadAnswer,
                format!(
                    "{what}: the answer's body is larger than {max} bytes (FRONTA_HTTP_MAX_RESPONSE_BYTES)"
                ),
            )
        };
        if response
            .content_length()
            .is_some_and(|length| length > max as u64)
        {
            return Err(too_large());
        }
        let mut headers: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in response.headers() {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            headers
                .entry(name.as_str().to_owned())
                .and_modify(|joined| {
                    joined.push_str(", ");
                    joined.push_str(&value);
                })
                .or_insert(value);
        }
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, SystemTime::now()))
            .map(|after| after.min(self.limits.max_retry_after));
        let is_json = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(is_json_type);
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            let chunk = match tokio::time::timeout_at(deadline, response.chunk()).await {
                Err(_) => {
                    return Err(ConnectorFailure::new(
                        Cause::TimeoutAfterSend,
                        format!(
                            "{what}: answered {status} but the body did not arrive within {timeout:?}; not retried"
                        ),
                    ));
                }
                Ok(Err(err)) => {
                    return Err(ConnectorFailure::new(
                        Cause::BrokenAfterSend,
                        format!(
                            "{what}: answered {status} but the body broke off ({}); not retried",
                            error_chain(&err)
                        ),
                    ));
                }
                Ok(Ok(None)) => break,
                Ok(Ok(Some(chunk))) => chunk,
            };
            if bytes.len() + chunk.len() > max {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        let body = if is_json && !bytes.is_empty() {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        } else if is_json {
            Value::Null
        } else {
            Value::String(String::from_utf8_lossy(&bytes).into_owned())
        };
        let code = status.as_u16();
        if status.is_client_error() || status.is_server_error() {
            let excerpt: String = String::from_utf8_lossy(&bytes)
                .chars()
                .take(ERROR_BODY_EXCERPT)
                .collect();
            let cause = Cause::HttpStatus(code);
            let mut message = format!("{what} answered {status}");
            if !excerpt.trim().is_empty() {
                message.push_str(&format!(": {}", excerpt.trim()));
            }
            if let (true, Some(after)) = (cause.retryable(), retry_after) {
                message.push_str(&format!(" (Retry-After: {after:?})"));
            }
            return Err(ConnectorFailure {
                cause,
                message,
                retry_after,
                not_now: None,
            });
        }
        let mut outputs = Map::new();
        outputs.insert("status".into(), Value::from(code));
        outputs.insert(
            "headers".into(),
            Value::Object(
                headers
                    .into_iter()
                    .map(|(name, value)| (name, Value::String(value)))
                    .collect(),
            ),
        );
        outputs.insert("body".into(), body);
        Ok(ConnectorReply {
            outputs,
            message: format!("{what} → {status} ({} bytes)", bytes.len()),
        })
    }
}

/// Removes the headers that must not follow a redirect to another origin: credentials
/// and every header holding a secret. Answers the names removed.
fn drop_sensitive(headers: &mut HeaderMap, secrets: &Revealed) -> Vec<String> {
    let names: Vec<HeaderName> = headers
        .iter()
        .filter(|(name, value)| {
            matches!(name.as_str(), "authorization" | "cookie")
                || secrets.contains_secret(&String::from_utf8_lossy(value.as_bytes()))
        })
        .map(|(name, _)| name.clone())
        .collect();
    for name in &names {
        headers.remove(name);
    }
    let mut dropped: Vec<String> = names.iter().map(|name| name.as_str().to_owned()).collect();
    dropped.dedup();
    dropped
}

/// `application/json`, `application/problem+json`, …
fn is_json_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// A `Retry-After` value: delay-seconds, or an HTTP-date (a date in the past is "now").
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn find_source<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<T>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// The error's causes joined, without the URL (it may hold a secret in its query).
fn error_chain(err: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut current: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(error) = current {
        let text = error.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        current = error.source();
    }
    if parts.is_empty() {
        let mut bare = err.to_string();
        if let Some(url) = err.url() {
            bare = bare.replace(url.as_str(), &describe(url));
        }
        parts.push(bare);
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("a date");
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120)),
            "seconds"
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30)),
            "an HTTP-date 30 s ahead"
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past is now"
        );
        assert_eq!(parse_retry_after("soon", now), None, "nonsense is ignored");
        assert_eq!(parse_retry_after("-5", now), None, "a negative is ignored");
    }

    #[test]
    fn json_content_types_are_recognised() {
        assert!(
            is_json_type("application/json; charset=utf-8"),
            "plain JSON"
        );
        assert!(is_json_type("application/problem+json"), "a +json type");
        assert!(!is_json_type("text/plain"), "text");
    }

    #[test]
    fn descriptions_leave_out_user_and_query() {
        let url = Url::parse("https://user:pw@api.test:8443/a/b?token=x").expect("a URL");
        assert_eq!(
            describe(&url),
            "https://api.test:8443/a/b",
            "no user, no query"
        );
    }
}
