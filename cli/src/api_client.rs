//! The CLI's client of a fronta server's HTTP API (`fronta demo`, `fronta apply`,
//! `fronta bench webhook`): reqwest over HTTP/1.1, JSON in and out, `http://` or
//! `https://`. TLS is rustls with the ring provider and the web's roots (webpki-roots),
//! built here as the connectors build theirs: no aws-lc, no OpenSSL, no process-wide
//! provider. No proxy from the environment, no redirects followed, no retries.
//!
//! [`ApiClient::call`] sends one request on the client's pool; [`ApiClient::connection`]
//! is a client whose pool holds one kept-alive connection, so requests sent one after
//! the other from one task go over one socket (what `fronta bench webhook` measures with).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap};
use reqwest::{Method, Url};
use serde_json::Value;

/// How long one call may take, connecting included.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// One answer: status, headers, the whole body, and how long the request took from the
/// moment it was handed to the client to the last byte of the body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub elapsed: Duration,
}

impl Answer {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// A header's value, when it is there and printable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }
}

/// A client of the server at `base` (`http://HOST:PORT` or `https://HOST[:PORT][/prefix]`).
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: Url,
}

impl ApiClient {
    /// A client of `server`: a URL, or `HOST:PORT` (plain HTTP).
    pub fn new(server: &str) -> anyhow::Result<Self> {
        Self::build(server, None)
    }

    /// A client of the plain-HTTP server at `address`.
    pub fn at(address: SocketAddr) -> anyhow::Result<Self> {
        Self::new(&format!("http://{address}"))
    }

    /// A client of the same server whose pool keeps one connection: calls made one after
    /// the other reuse it (a new one is opened only if the server closed it).
    pub fn connection(&self) -> anyhow::Result<Self> {
        Self::build(self.base.as_str(), Some(1))
    }

    fn build(server: &str, pool: Option<usize>) -> anyhow::Result<Self> {
        let base = base_url(server)?;
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_config()?)
            .http1_only()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .tcp_nodelay(true)
            .timeout(TIMEOUT)
            .user_agent(concat!("fronta-cli/", env!("CARGO_PKG_VERSION")));
        if let Some(idle) = pool {
            builder = builder.pool_max_idle_per_host(idle);
        }
        let http = builder.build().context("the HTTP client cannot be built")?;
        Ok(Self { http, base })
    }

    /// `method path` with an optional bearer token and JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> anyhow::Result<Answer> {
        let body = body.map(|body| body.to_string().into_bytes());
        self.send(method, path, token, body).await
    }

    /// `method path` with an optional bearer token and a body already serialized as JSON.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        json_body: Option<Vec<u8>>,
    ) -> anyhow::Result<Answer> {
        let method = Method::from_bytes(method.as_bytes())
            .with_context(|| format!("{method:?} is not an HTTP method"))?;
        let url = self.url(path);
        let mut request = self.http.request(method.clone(), url.as_str());
        if let Some(token) = token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(body) = json_body {
            request = request.header(CONTENT_TYPE, "application/json").body(body);
        }
        let started = Instant::now();
        let exchange = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        };
        let (status, headers, body) = exchange.await.map_err(|err| explain(err, &method, &url))?;
        Ok(Answer {
            status,
            headers,
            body: body.to_vec(),
            elapsed: started.elapsed(),
        })
    }

    /// `path` (absolute, from `/`) under the base URL, whose own path is kept as a prefix.
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base.as_str().trim_end_matches('/'),)
    }
}

/// `server` as a base URL: `HOST:PORT` means `http://HOST:PORT`; only http and https.
fn base_url(server: &str) -> anyhow::Result<Url> {
    let server = server.trim();
    let text = if server.contains("://") {
        server.to_owned()
    } else {
        format!("http://{server}")
    };
    let url = Url::parse(&text).with_context(|| {
        format!("{server:?} is not a server address (HOST:PORT, http://HOST:PORT or https://HOST)")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        bail!(
            "{server:?}: the scheme {:?} is not http or https",
            url.scheme()
        );
    }
    if url.host_str().is_none_or(str::is_empty) {
        bail!("{server:?} names no host");
    }
    if url.query().is_some() || url.fragment().is_some() {
        bail!("{server:?}: a server address has no query or fragment");
    }
    Ok(url)
}

/// rustls with the ring provider and the web's roots.
fn tls_config() -> anyhow::Result<rustls::ClientConfig> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS configuration")?
    .with_root_certificates(roots)
    .with_no_client_auth())
}

/// A failed call as one line: what was called, and why it failed (the causes joined).
fn explain(err: reqwest::Error, method: &Method, url: &str) -> anyhow::Error {
    if err.is_timeout() {
        return anyhow::anyhow!("{method} {url}: no answer within {TIMEOUT:?}");
    }
    let what = if err.is_connect() && url.starts_with("https:") {
        "cannot connect (TCP, then the TLS handshake)"
    } else if err.is_connect() {
        "cannot connect"
    } else if err.is_body() || err.is_decode() {
        "the answer was cut short"
    } else {
        "the request failed"
    };
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        let text = cause.to_string();
        // hyper's "client error (Connect)" only repeats what `what` says.
        if !text.starts_with("client error (") && !causes.contains(&text) {
            causes.push(text);
        }
        source = cause.source();
    }
    if causes.is_empty() {
        causes.push(err.without_url().to_string());
    }
    anyhow::anyhow!("{method} {url}: {what}: {}", causes.join(": "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn server_addresses_read_as_http_or_https_urls() {
        let cases = [
            ("127.0.0.1:8080", "http://127.0.0.1:8080/"),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/"),
            ("https://desk.example.com", "https://desk.example.com/"),
            (
                "https://desk.example.com/fronta/",
                "https://desk.example.com/fronta/",
            ),
        ];
        for (given, expected) in cases {
            let url = base_url(given).unwrap_or_else(|err| panic!("{given:?}: {err:#}"));
            assert_eq!(url.as_str(), expected, "{given:?}");
        }
        for (given, why) in [
            ("ftp://127.0.0.1:21", "not http or https"),
            ("https://example.com/?a=1", "no query"),
            ("http://", "not a server address"),
        ] {
            let message = format!("{:#}", base_url(given).expect_err(given));
            assert!(message.contains(why), "{given:?}: {message}");
        }
    }

    #[test]
    fn paths_go_under_the_base_urls_own_path() {
        let client = ApiClient::new("https://desk.example.com/fronta/").expect("a client");
        assert_eq!(
            client.url("/api/apply"),
            "https://desk.example.com/fronta/api/apply",
            "a prefix is kept"
        );
        let client = ApiClient::new("127.0.0.1:1").expect("a client");
        assert_eq!(
            client.url("/healthz"),
            "http://127.0.0.1:1/healthz",
            "no prefix"
        );
    }

    /// A server answering every request `{"n": k}` (k counting requests), which counts the
    /// connections it accepted.
    async fn counting_server() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let address = listener.local_addr().expect("an address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let answered = answered.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        // Requests here have no body: each ends with its headers.
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            let n = answered.fetch_add(1, Ordering::SeqCst) + 1;
                            let body = format!("{{\"n\":{n}}}");
                            let answer = format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if socket.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => seen.extend_from_slice(&chunk[..read]),
                        }
                    }
                });
            }
        });
        (address, accepted)
    }

    #[tokio::test]
    async fn a_connection_sends_request_after_request_on_one_socket() {
        let (address, accepted) = counting_server().await;
        let connection = ApiClient::at(address)
            .and_then(|client| client.connection())
            .expect("a client");
        for n in 1..=3 {
            let answer = connection
                .call("GET", "/x", Some("ft_token"), None)
                .await
                .expect("an answer");
            assert_eq!(answer.status, 200, "answer {n}");
            assert_eq!(answer.json()["n"], n, "answer {n}, in order");
            assert_eq!(
                answer.header("content-type"),
                Some("application/json"),
                "headers by name"
            );
        }
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "three calls, one connection"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_reads_as_one_line_naming_the_call() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
        let address = listener.local_addr().expect("an address");
        drop(listener);
        let client = ApiClient::at(address).expect("a client");
        let message = format!(
            "{:#}",
            client
                .call("POST", "/api/apply", None, Some(&serde_json::json!({})))
                .await
                .expect_err("nobody listens")
        );
        assert!(
            message.starts_with(&format!(
                "POST http://{address}/api/apply: cannot connect: "
            )),
            "what was called and what failed: {message}"
        );
        assert!(
            !message.contains("client error (") && !message.contains('\n'),
            "one line without hyper's wrapper: {message}"
        );
    }
}
