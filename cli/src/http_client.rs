//! A very small HTTP/1.1 client for the demo and the benches, JSON in and out, over a
//! plain tokio `TcpStream`: [`Client::call`] makes one request per connection
//! (`Connection: close`); [`Connection`] keeps one keep-alive connection open and sends
//! request after request on it (what `fronta bench webhook` measures with).
//!
//! Why hand-written: the demo only talks to our own server on localhost; a client crate
//! (reqwest, hyper-util) would add a TLS stack and dozens of dependencies to the binary
//! for a dozen plain requests. Left out: TLS, redirects, pipelining, streaming bodies
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

/// One kept-alive HTTP/1.1 connection: requests go one after the other (no pipelining);
/// each answer is read by its `Content-Length` (or its chunks), so the connection stays
/// open for the next request. A server that closes it makes the next call fail.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    host: String,
    /// Bytes read past the end of the previous answer (none unless the server misbehaves).
    buffer: Vec<u8>,
}

impl Connection {
    pub async fn open(address: SocketAddr) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(address)
            .await
            .with_context(|| format!("connecting to {address}"))?;
        // Small requests: send each at once instead of waiting for an ACK (Nagle).
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            host: address.to_string(),
            buffer: Vec::with_capacity(4096),
        })
    }

    /// `method path` with an optional bearer token and a body already serialized as JSON;
    /// `elapsed` runs from the first byte written to the last byte read.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        json_body: &[u8],
    ) -> anyhow::Result<Answer> {
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.host,
            json_body.len()
        )
        .into_bytes();
        if !json_body.is_empty() {
            request.extend_from_slice(b"Content-Type: application/json\r\n");
        }
        if let Some(token) = token {
            request.extend_from_slice(format!("Authorization: Bearer {token}\r\n").as_bytes());
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(json_body);
        let started = Instant::now();
        self.stream.write_all(&request).await?;
        let length = self.read_answer().await?;
        let mut answer = parse(&self.buffer[..length])?;
        self.buffer.drain(..length);
        answer.elapsed = started.elapsed();
        Ok(answer)
    }

    /// Read until `buffer` holds one whole answer; its length in bytes.
    async fn read_answer(&mut self) -> anyhow::Result<usize> {
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(length) = answer_length(&self.buffer)? {
                return Ok(length);
            }
            let read = self.stream.read(&mut chunk).await?;
            if read == 0 {
                bail!("the server closed the connection mid-answer");
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }
}

/// The length of the first whole answer in `raw`, `None` while it is incomplete.
fn answer_length(raw: &[u8]) -> anyhow::Result<Option<usize>> {
    let Some(split) = raw.windows(4).position(|window| window == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&raw[..split]).context("headers are not UTF-8")?;
    let body_start = split + 4;
    let mut content_length = None;
    let mut chunked = false;
    for line in head.split("\r\n").skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = Some(
                value
                    .trim()
                    .parse::<usize>()
                    .with_context(|| format!("a Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked") {
            chunked = true;
        }
    }
    if chunked {
        // The last chunk and the empty trailer end the answer.
        let body = &raw[body_start..];
        return Ok(body
            .windows(5)
            .position(|window| window == b"0\r\n\r\n")
            .filter(|&at| at == 0 || body[..at].ends_with(b"\r\n"))
            .map(|at| body_start + at + 5));
    }
    let length = body_start + content_length.unwrap_or(0);
    Ok((raw.len() >= length).then_some(length))
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

    #[test]
    fn answer_length_waits_for_the_whole_body_and_stops_at_its_end() {
        let head = b"HTTP/1.1 202 Accepted\r\nContent-Length: 7\r\n\r\n";
        let mut raw = head.to_vec();
        assert_eq!(answer_length(&raw).expect("reads"), None, "no body yet");
        raw.extend_from_slice(b"{\"a\":1}HTTP/1.1");
        assert_eq!(
            answer_length(&raw).expect("reads"),
            Some(head.len() + 7),
            "the answer ends after Content-Length bytes, not at the next one"
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(
            answer_length(chunked).expect("reads"),
            Some(chunked.len()),
            "a chunked answer ends at its last chunk"
        );
        assert_eq!(
            answer_length(&chunked[..chunked.len() - 2]).expect("reads"),
            None,
            "a chunked answer without its end is incomplete"
        );
    }

    #[tokio::test]
    async fn a_connection_sends_many_requests_on_one_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let address = listener.local_addr().expect("an address");
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("one connection");
            let mut seen = Vec::new();
            let mut answered = 0;
            let mut chunk = [0u8; 1024];
            while answered < 3 {
                let read = socket.read(&mut chunk).await.expect("reads");
                seen.extend_from_slice(&chunk[..read]);
                // Each request here has a 2-byte body after its headers.
                while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                    if seen.len() < end + 6 {
                        break;
                    }
                    seen.drain(..end + 6);
                    answered += 1;
                    let answer = format!(
                        "HTTP/1.1 202 Accepted\r\nContent-Length: 7\r\n\r\n{{\"n\":{answered}}}"
                    );
                    socket.write_all(answer.as_bytes()).await.expect("writes");
                }
            }
        });
        let mut connection = Connection::open(address).await.expect("connects");
        for n in 1..=3 {
            let answer = tokio::time::timeout(
                Duration::from_secs(5),
                connection.send("POST", "/x", None, b"{}"),
            )
            .await
            .expect("an answer within 5 s")
            .expect("an answer");
            assert_eq!(answer.status, 202, "answer {n}");
            assert_eq!(answer.json()["n"], n, "answer {n} in order on one socket");
        }
        server
            .await
            .expect("the server saw three requests on one connection");
    }
}
