//! A very small HTTP/1.1 client for the demo: one request per connection
//! (`Connection: close`), JSON in and out, over a plain tokio `TcpStream`.
//!
//! Why hand-written: the demo only talks to our own server on localhost; a client crate
//! (reqwest, hyper-util) would add a TLS stack and dozens of dependencies to the binary
//! for a dozen plain requests. Left out: TLS, keep-alive, redirects, streaming bodies
//! (a chunked answer is read whole and decoded).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One answer: status, headers (names lower-cased), the raw body, and how long the
/// request took from connect to the last byte.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub elapsed: Duration,
}

impl Answer {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A client of one server.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    pub address: SocketAddr,
    pub timeout: Duration,
}

impl Client {
    pub fn new(address: SocketAddr) -> Self {
        Self {
            address,
            timeout: Duration::from_secs(10),
        }
    }

    /// `method path` with an optional bearer token and JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> anyhow::Result<Answer> {
        tokio::time::timeout(self.timeout, self.exchange(method, path, token, body))
            .await
            .with_context(|| format!("{method} {path}: no answer within {:?}", self.timeout))?
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> anyhow::Result<Answer> {
        let started = Instant::now();
        let mut stream = TcpStream::connect(self.address)
            .await
            .with_context(|| format!("connecting to {}", self.address))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.address,
            body.len()
        );
        if !body.is_empty() {
            request.push_str("Content-Type: application/json\r\n");
        }
        if let Some(token) = token {
            request.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        let mut answer = parse(&raw)?;
        answer.elapsed = started.elapsed();
        Ok(answer)
    }
}

/// An HTTP/1.1 answer read to its end.
fn parse(raw: &[u8]) -> anyhow::Result<Answer> {
    let split = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .context("an HTTP answer without the end of its headers")?;
    let head = std::str::from_utf8(&raw[..split]).context("headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .context("no status line")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(name, value)| name == "transfer-encoding" && value.contains("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Ok(Answer {
        status,
        headers,
        body,
        elapsed: Duration::ZERO,
    })
}

fn dechunk(mut rest: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|window| window == b"\r\n")
            .context("a chunk without its size line")?;
        let size_text = std::str::from_utf8(&rest[..line_end])?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("a chunk size {size_text:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size {
            bail!("a chunk cut short");
        }
        body.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_with_plain_and_chunked_bodies() {
        let plain =
            parse(b"HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\n\r\n{\"a\":1}")
                .expect("parses");
        assert_eq!(plain.status, 202, "the status");
        assert_eq!(plain.json()["a"], 1, "the body");
        assert_eq!(
            plain.header("content-type"),
            Some("application/json"),
            "headers by name"
        );
        let chunked =
            parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"b\r\n4\r\n\":2}\r\n0\r\n\r\n")
                .expect("parses");
        assert_eq!(chunked.json()["b"], 2, "chunks joined: {chunked:?}");
    }
}
