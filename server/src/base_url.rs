//! The base URL printed in webhook URLs (`webhookUrl`, the `GET /webhook/{token}` help):
//! the configured public base URL, or the scheme and `Host` the client used.
//!
//! `X-Forwarded-Proto` / `X-Forwarded-Host` are honoured only when the configuration
//! says a proxy sets them; otherwise a client could make us print any host. A `Host`
//! that is not a valid authority falls back to `localhost`. Without a proxy this server
//! speaks plain HTTP, so the scheme is `http`.
//!
//! Left out: TLS (terminated by a proxy in front, if any).

use axum::http::HeaderMap;
use axum::http::uri::Authority;

use crate::config::ServerConfig;

/// `scheme://host[:port]`, without a trailing slash.
pub fn base_url(config: &ServerConfig, headers: &HeaderMap) -> String {
    if let Some(url) = &config.public_base_url {
        return url.trim_end_matches('/').to_owned();
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            // A proxy chain appends: the first value is the client's.
            .and_then(|value| value.split(',').next())
            .map(str::trim)
            .filter(|value| !value.is_empty())
    };
    let forwarded = |name| config.trust_proxy_headers.then(|| header(name)).flatten();
    let scheme = match forwarded("x-forwarded-proto") {
        Some("https") => "https",
        _ => "http",
    };
    let host = forwarded("x-forwarded-host")
        .or_else(|| header("host"))
        .filter(|host| host.parse::<Authority>().is_ok_and(|a| a.as_str() == *host))
        .filter(|host| !host.contains('@'))
        .unwrap_or("localhost");
    format!("{scheme}://{host}")
}

/// The webhook URL of a token.
pub fn webhook_url(base: &str, token: &str) -> String {
    format!("{base}/webhook/{token}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn configured_base_url_wins() {
        let config = ServerConfig {
            public_base_url: Some("https://desk.example.com/".into()),
            ..ServerConfig::default()
        };
        assert_eq!(
            base_url(&config, &headers(&[("host", "10.0.0.5:8080")])),
            "https://desk.example.com",
            "configured, trailing slash trimmed"
        );
    }

    #[test]
    fn host_header_is_used_and_forwarded_headers_only_when_trusted() {
        let request = headers(&[
            ("host", "127.0.0.1:8080"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "desk.example.com"),
        ]);
        let plain = ServerConfig::default();
        assert_eq!(
            base_url(&plain, &request),
            "http://127.0.0.1:8080",
            "forwarded headers ignored by default"
        );
        let behind_proxy = ServerConfig {
            trust_proxy_headers: true,
            ..ServerConfig::default()
        };
        assert_eq!(
            base_url(&behind_proxy, &request),
            "https://desk.example.com",
            "trusted proxy"
        );
        assert_eq!(
            base_url(&plain, &headers(&[("host", "evil/path")])),
            "http://localhost",
            "an invalid host falls back"
        );
    }
}
