//! `poll/mail`: the `mail` poll source over IMAP (async-imap on tokio, TLS by rustls with
//! ring and the web's roots; no OpenSSL).
//!
//! One connection per poll: connect (the host passes the SSRF address policy first — the
//! name, then every address it resolves to, as for `http/request`; the allow-list
//! `FRONTA_HTTP_ALLOW` applies), read the greeting, `LOGIN`, `EXAMINE` the folder (read
//! only: nothing is ever marked, moved or deleted; bodies are read with `BODY.PEEK`),
//! find the new messages, fetch them, `LOGOUT`.
//!
//! # Which messages are new
//!
//! The input carries the stored `cursor` (`{uidValidity, uid, at}` or null), `since` (an
//! RFC 3339 instant: when the automation was last saved) and `maxItems`.
//! - The folder's UIDVALIDITY equals the cursor's: messages with a UID above `uid`.
//! - No cursor (the first poll): messages received (IMAP `INTERNALDATE`) at or after
//!   `since`.
//! - Another UIDVALIDITY (the folder was rebuilt: old UIDs mean nothing): messages
//!   received at or after the cursor's `at`, the time of the poll that last moved it;
//!   logged as a warning. A message of that very second may come twice; none is lost.
//!
//! At most `maxItems` are taken, lowest UIDs first; the answer says how many are `left`.
//! The new cursor is `{uidValidity, uid: the highest taken, at: now}`; when nothing is
//! taken it stays as it was, except on the first look or after a UIDVALIDITY change,
//! where it becomes `{uidValidity, uid: UIDNEXT − 1, at: now}` so the next poll counts
//! from there.
//!
//! # What a message publishes
//!
//! `uid`, `messageId`, `from` (the address), `fromName`, `to` and `cc` (lists of
//! addresses), `subject`, `date` (the Date header as RFC 3339, else the received time),
//! `receivedAt`, `text` (the first text body, decoded, at most
//! [`MailLimits::text_bytes`]) and `textTruncated`. Only the first
//! [`MailLimits::message_bytes`] of each message are fetched.
//!
//! # Classification
//!
//! Reading mail is idempotent, so every network failure — refused, reset, timed out,
//! before or after a command — is a retried `Connection` cause. A refused login, an
//! unknown folder or an address the policy refuses is `BadInput` (a person must fix the
//! automation or the secret); an answer the client cannot parse is `BadAnswer`.

use std::fmt::Debug;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_imap::Client;
use async_imap::error::Error as ImapError;
use chrono::{DateTime, SecondsFormat, Utc};
use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::retry::Cause;
use futures_util::TryStreamExt;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::ssrf::{AddressPolicy, HostFailure, NameLookup, SystemLookup};

/// The mail poll's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailLimits {
    /// Name lookup + TCP + TLS (`FRONTA_MAIL_CONNECT_TIMEOUT`).
    pub connect_timeout: Duration,
    /// The whole poll after connecting (`FRONTA_MAIL_TIMEOUT`).
    pub timeout: Duration,
    /// Bytes fetched of each message (`FRONTA_MAIL_MESSAGE_BYTES`).
    pub message_bytes: usize,
    /// Bytes of decoded text published per message (`FRONTA_MAIL_TEXT_BYTES`).
    pub text_bytes: usize,
}

impl Default for MailLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(60),
            message_bytes: 1024 * 1024,
            text_bytes: 64 * 1024,
        }
    }
}

/// The `poll/mail` connector.
#[derive(Clone)]
pub struct MailConnector {
    policy: Arc<AddressPolicy>,
    lookup: Arc<dyn NameLookup>,
    limits: MailLimits,
    tls: tokio_rustls::TlsConnector,
}

impl Debug for MailConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailConnector")
            .field("limits", &self.limits)
            .finish()
    }
}

fn failure(cause: Cause, message: impl Into<String>) -> ConnectorFailure {
    ConnectorFailure::new(cause, message)
}

fn bad_input(message: impl Into<String>) -> ConnectorFailure {
    failure(Cause::BadInput, message)
}

/// The poll's input, read from the rendered `poll/mail` input.
struct Input {
    host: String,
    port: u16,
    tls: bool,
    user: String,
    password: String,
    folder: String,
    cursor: Option<(u32, u32, DateTime<Utc>)>,
    since: DateTime<Utc>,
    max_items: usize,
}

fn text_of(input: &Map<String, Value>, key: &str) -> Result<String, ConnectorFailure> {
    match input.get(key) {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
        _ => Err(bad_input(format!(
            "trigger.mailbox.{key}: missing or empty"
        ))),
    }
}

fn instant(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

impl Input {
    fn read(input: &Map<String, Value>) -> Result<Input, ConnectorFailure> {
        let port = input
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|port| u16::try_from(port).ok())
            .ok_or_else(|| bad_input("trigger.mailbox.port: not a port number"))?;
        let cursor = match input.get("cursor") {
            None | Some(Value::Null) => None,
            Some(cursor) => {
                let number = |key: &str| {
                    cursor
                        .get(key)
                        .and_then(Value::as_u64)
                        .and_then(|n| u32::try_from(n).ok())
                };
                let at = cursor.get("at").and_then(Value::as_str).and_then(instant);
                match (number("uidValidity"), number("uid"), at) {
                    (Some(validity), Some(uid), Some(at)) => Some((validity, uid, at)),
                    _ => {
                        return Err(bad_input(format!(
                            "the stored mail cursor {cursor} is not {{uidValidity, uid, at}}"
                        )));
                    }
                }
            }
        };
        Ok(Input {
            host: text_of(input, "host")?,
            port,
            tls: input.get("tls").and_then(Value::as_bool).unwrap_or(true),
            user: text_of(input, "user")?,
            password: text_of(input, "password")?,
            folder: text_of(input, "folder")?,
            cursor,
            since: input
                .get("since")
                .and_then(Value::as_str)
                .and_then(instant)
                .unwrap_or_else(Utc::now),
            max_items: input
                .get("maxItems")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(fronta_automation::poll::DEFAULT_MAX_ITEMS)
                .max(1),
        })
    }
}

/// What a failed IMAP command means (see "Classification").
fn imap_failure(doing: &str, err: ImapError) -> ConnectorFailure {
    match err {
        ImapError::Io(_) | ImapError::ConnectionLost => failure(
            Cause::Connection,
            format!("IMAP {doing}: the connection failed: {err}"),
        ),
        ImapError::No(_) | ImapError::Bad(_) | ImapError::Validate(_) => {
            bad_input(format!("IMAP {doing}: the server refused: {err}"))
        }
        other => failure(
            Cause::BadAnswer,
            format!("IMAP {doing}: an answer the client cannot read: {other}"),
        ),
    }
}

/// Cut `text` to at most `limit` bytes at a character boundary.
fn cut(text: &str, limit: usize) -> (String, bool) {
    if text.len() <= limit {
        return (text.to_owned(), false);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
}

/// One fetched message as published (see "What a message publishes").
fn message_json(
    uid: u32,
    received: Option<DateTime<Utc>>,
    raw: &[u8],
    fetched_all: bool,
    text_bytes: usize,
) -> Value {
    let parsed = mail_parser::MessageParser::default().parse(raw);
    let received_text = received.map(|at| at.to_rfc3339_opts(SecondsFormat::Secs, true));
    let Some(message) = parsed else {
        return json!({"uid": uid, "receivedAt": received_text, "date": received_text,
                      "text": "", "textTruncated": !fetched_all});
    };
    let addresses = |address: Option<&mail_parser::Address<'_>>| -> Vec<Value> {
        address
            .map(|address| {
                address
                    .iter()
                    .filter_map(|addr| addr.address().map(|a| json!(a)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let from = message.from().and_then(|from| from.first());
    let body = message.body_text(0).unwrap_or_default();
    let (text, cut_here) = cut(&body, text_bytes);
    let date = message
        .date()
        .map(|date| date.to_rfc3339())
        .or_else(|| received_text.clone());
    json!({
        "uid": uid,
        "messageId": message.message_id(),
        "from": from.and_then(|from| from.address()),
        "fromName": from.and_then(|from| from.name()),
        "to": addresses(message.to()),
        "cc": addresses(message.cc()),
        "subject": message.subject().unwrap_or_default(),
        "date": date,
        "receivedAt": received_text,
        "text": text,
        "textTruncated": cut_here || !fetched_all,
    })
}

/// A set of UIDs for a command: `3,5,9`.
fn uid_set(uids: &[u32]) -> String {
    uids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl MailConnector {
    /// A connector resolving names with the system's resolver.
    pub fn new(policy: AddressPolicy, limits: MailLimits) -> Result<Self, String> {
        Self::with_lookup(policy, limits, Arc::new(SystemLookup))
    }

    /// A connector resolving names with `lookup` (tests inject a fixed table).
    pub fn with_lookup(
        policy: AddressPolicy,
        limits: MailLimits,
        lookup: Arc<dyn NameLookup>,
    ) -> Result<Self, String> {
        if limits.connect_timeout.is_zero() || limits.timeout.is_zero() {
            return Err("mail timeouts must be longer than zero".into());
        }
        if limits.message_bytes == 0 || limits.text_bytes == 0 {
            return Err("mail byte limits must be above zero".into());
        }
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
        Ok(Self {
            policy: Arc::new(policy),
            lookup,
            limits,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        })
    }

    pub fn limits(&self) -> MailLimits {
        self.limits
    }

    /// The addresses of `host` the policy lets through.
    async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, ConnectorFailure> {
        self.policy
            .checked_addresses(self.lookup.as_ref(), host)
            .await
            .map_err(|failed| match failed {
                HostFailure::Refused(refused) => {
                    bad_input(format!("trigger.mailbox.host: {}", refused.0))
                }
                HostFailure::Lookup(err) => failure(
                    Cause::Connection,
                    format!("the IMAP host {host:?} could not be looked up: {err}"),
                ),
            })
    }

    async fn connect(&self, input: &Input) -> Result<TcpStream, ConnectorFailure> {
        let addresses = self.addresses(&input.host).await?;
        let mut last = String::from("no address");
        for ip in addresses {
            match tokio::time::timeout(
                self.limits.connect_timeout,
                TcpStream::connect(SocketAddr::new(ip, input.port)),
            )
            .await
            {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(err)) => last = err.to_string(),
                Err(_) => last = format!("no answer within {:?}", self.limits.connect_timeout),
            }
        }
        Err(failure(
            Cause::Connection,
            format!(
                "the IMAP server {}:{} could not be reached: {last}",
                input.host, input.port
            ),
        ))
    }

    /// Serves `poll/mail` (see the module docs).
    pub async fn call(&self, call: ConnectorCall<'_>) -> Result<ConnectorReply, ConnectorFailure> {
        let input = Input::read(&call.input)?;
        let started = std::time::Instant::now();
        let tcp = self.connect(&input).await?;
        let reply = if input.tls {
            let name =
                rustls::pki_types::ServerName::try_from(input.host.clone()).map_err(|_| {
                    bad_input(format!(
                        "trigger.mailbox.host: {:?} is not a name TLS can check",
                        input.host
                    ))
                })?;
            let stream =
                tokio::time::timeout(self.limits.connect_timeout, self.tls.connect(name, tcp))
                    .await
                    .map_err(|_| {
                        failure(
                            Cause::Connection,
                            format!(
                                "the TLS handshake with {} took longer than {:?}",
                                input.host, self.limits.connect_timeout
                            ),
                        )
                    })?
                    .map_err(|err| {
                        failure(
                            Cause::Connection,
                            format!("the TLS handshake with {} failed: {err}", input.host),
                        )
                    })?;
            self.session(stream, &input).await
        } else {
            self.session(tcp, &input).await
        };
        match &reply {
            Ok(reply) => {
                tracing::info!(run = call.run_id, host = %input.host, folder = %input.folder,
                elapsed = ?started.elapsed(), message = %reply.message, "poll/mail done")
            }
            Err(err) => {
                tracing::warn!(run = call.run_id, host = %input.host, folder = %input.folder,
                cause = ?err.cause, message = %err.message, "poll/mail failed")
            }
        }
        reply
    }

    async fn session<T>(&self, stream: T, input: &Input) -> Result<ConnectorReply, ConnectorFailure>
    where
        T: AsyncRead + AsyncWrite + Unpin + Debug + Send,
    {
        match tokio::time::timeout(self.limits.timeout, self.session_inner(stream, input)).await {
            Ok(reply) => reply,
            Err(_) => Err(failure(
                Cause::Connection,
                format!(
                    "the IMAP server {} did not finish the poll within {:?} (FRONTA_MAIL_TIMEOUT)",
                    input.host, self.limits.timeout
                ),
            )),
        }
    }

    async fn session_inner<T>(
        &self,
        stream: T,
        input: &Input,
    ) -> Result<ConnectorReply, ConnectorFailure>
    where
        T: AsyncRead + AsyncWrite + Unpin + Debug + Send,
    {
        let mut client = Client::new(stream);
        match client.read_response().await {
            Ok(Some(_greeting)) => {}
            Ok(None) => {
                return Err(failure(
                    Cause::Connection,
                    "the IMAP server closed the connection before its greeting",
                ));
            }
            Err(err) => return Err(imap_failure("greeting", err.into())),
        }
        let mut session = client
            .login(&input.user, &input.password)
            .await
            .map_err(|(err, _)| match err {
                ImapError::No(_) | ImapError::Bad(_) => bad_input(format!(
                    "trigger.mailbox: the IMAP server refused the login of {:?} (check the user and the password secret)",
                    input.user
                )),
                other => imap_failure("login", other),
            })?;
        let mailbox = session
            .examine(&input.folder)
            .await
            .map_err(|err| match err {
                ImapError::No(_) | ImapError::Bad(_) => bad_input(format!(
                    "trigger.mailbox.folder: the IMAP server has no folder {:?} for this user ({err})",
                    input.folder
                )),
                other => imap_failure("EXAMINE", other),
            })?;
        let Some(validity) = mailbox.uid_validity else {
            return Err(failure(
                Cause::BadAnswer,
                "the IMAP server gave the folder no UIDVALIDITY: new messages cannot be told from old ones",
            ));
        };
        let now = Utc::now();
        let (candidates, mode) = match input.cursor {
            Some((cursor_validity, last, _)) if cursor_validity == validity => {
                let found = session
                    .uid_search(format!("UID {}:*", last.saturating_add(1)))
                    .await
                    .map_err(|err| imap_failure("UID SEARCH", err))?;
                let mut uids: Vec<u32> = found.into_iter().filter(|uid| *uid > last).collect();
                uids.sort_unstable();
                (uids, "by UID")
            }
            other => {
                let since = match other {
                    Some((old, _, at)) => {
                        tracing::warn!(folder = %input.folder, old_validity = old, validity,
                            since = %at, "poll/mail: the folder's UIDVALIDITY changed; starting over from the messages received since the last poll");
                        at
                    }
                    None => input.since,
                };
                let day = since.format("%d-%b-%Y").to_string();
                let found = session
                    .uid_search(format!("SINCE {day}"))
                    .await
                    .map_err(|err| imap_failure("UID SEARCH", err))?;
                let mut uids: Vec<u32> = found.into_iter().collect();
                uids.sort_unstable();
                let mut kept = Vec::with_capacity(uids.len());
                if !uids.is_empty() {
                    let dates: Vec<(u32, Option<DateTime<Utc>>)> = session
                        .uid_fetch(uid_set(&uids), "(UID INTERNALDATE)")
                        .await
                        .map_err(|err| imap_failure("UID FETCH", err))?
                        .map_ok(|fetch| {
                            (
                                fetch.uid.unwrap_or(0),
                                fetch.internal_date().map(|at| at.with_timezone(&Utc)),
                            )
                        })
                        .try_collect()
                        .await
                        .map_err(|err| imap_failure("UID FETCH", err))?;
                    for (uid, received) in dates {
                        // Received in the second of `since` or later (IMAP dates have seconds).
                        if uid > 0 && received.is_none_or(|at| at.timestamp() >= since.timestamp())
                        {
                            kept.push(uid);
                        }
                    }
                    kept.sort_unstable();
                }
                (
                    kept,
                    if other.is_some() {
                        "since the last poll (UIDVALIDITY changed)"
                    } else {
                        "received since the automation was saved"
                    },
                )
            }
        };
        let take: Vec<u32> = candidates.iter().copied().take(input.max_items).collect();
        let left = candidates.len() - take.len();
        let mut items = Vec::with_capacity(take.len());
        if !take.is_empty() {
            let query = format!(
                "(UID INTERNALDATE RFC822.SIZE BODY.PEEK[]<0.{}>)",
                self.limits.message_bytes
            );
            let mut fetched: Vec<(u32, Value)> = session
                .uid_fetch(uid_set(&take), query)
                .await
                .map_err(|err| imap_failure("UID FETCH", err))?
                .map_ok(|fetch| {
                    let uid = fetch.uid.unwrap_or(0);
                    let received = fetch.internal_date().map(|at| at.with_timezone(&Utc));
                    let raw = fetch.body().unwrap_or_default();
                    let whole = fetch
                        .size
                        .is_none_or(|size| (size as usize) <= self.limits.message_bytes);
                    (
                        uid,
                        message_json(uid, received, raw, whole, self.limits.text_bytes),
                    )
                })
                .try_collect()
                .await
                .map_err(|err| imap_failure("UID FETCH", err))?;
            fetched.sort_by_key(|(uid, _)| *uid);
            items = fetched
                .into_iter()
                .filter(|(uid, _)| take.contains(uid))
                .map(|(_, item)| item)
                .collect();
        }
        let _ = session.logout().await;
        let at = now.to_rfc3339_opts(SecondsFormat::Secs, true);
        let cursor = match (take.last(), input.cursor) {
            (Some(uid), _) => Some(json!({"uidValidity": validity, "uid": uid, "at": at})),
            // Nothing new, same folder: the cursor stays.
            (None, Some((cursor_validity, uid, at))) if cursor_validity == validity => Some(
                json!({"uidValidity": validity, "uid": uid, "at": at.to_rfc3339_opts(SecondsFormat::Secs, true)}),
            ),
            // First look or a rebuilt folder with nothing to take: count from UIDNEXT.
            (None, _) => {
                let next = mailbox.uid_next.unwrap_or(1);
                Some(json!({"uidValidity": validity, "uid": next.saturating_sub(1), "at": at}))
            }
        };
        let message = format!(
            "{} new messages {mode} in {} ({} left for the next poll)",
            items.len(),
            input.folder,
            left
        );
        let mut outputs = Map::new();
        outputs.insert("items".into(), Value::Array(items));
        outputs.insert("cursor".into(), cursor.unwrap_or(Value::Null));
        outputs.insert("left".into(), json!(left));
        Ok(ConnectorReply { outputs, message })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        assert_eq!(cut("ťž", 3), ("ť".to_string(), true), "byte 3 is inside ž");
        assert_eq!(
            cut("žluť", 3),
            ("žl".to_string(), true),
            "ž is 2 bytes, l one"
        );
        assert_eq!(cut("abc", 3), ("abc".to_string(), false));
    }

    #[test]
    fn a_message_publishes_its_headers_and_text() {
        let raw = b"From: Eva Novak <eva@shop.test>\r\nTo: desk@firm.test, it@firm.test\r\n\
Subject: =?UTF-8?Q?Objedn=C3=A1vka?= 5001\r\nDate: Mon, 30 Nov 2026 10:00:00 +0100\r\n\
Message-ID: <m1@shop.test>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nHello,\r\nplease ship.\r\n";
        let item = message_json(7, None, raw, true, 64);
        assert_eq!(item["uid"], json!(7));
        assert_eq!(item["from"], json!("eva@shop.test"));
        assert_eq!(item["fromName"], json!("Eva Novak"));
        assert_eq!(item["to"], json!(["desk@firm.test", "it@firm.test"]));
        assert_eq!(
            item["subject"],
            json!("Objednávka 5001"),
            "encoded words decoded"
        );
        assert_eq!(item["messageId"], json!("m1@shop.test"));
        assert_eq!(item["date"], json!("2026-11-30T10:00:00+01:00"));
        assert_eq!(item["text"], json!("Hello,\r\nplease ship.\r\n"));
        assert_eq!(item["textTruncated"], json!(false));
        let short = message_json(7, None, raw, true, 5);
        assert_eq!(short["text"], json!("Hello"));
        assert_eq!(short["textTruncated"], json!(true));
    }

    #[tokio::test]
    async fn a_private_host_is_refused_before_connecting_unless_allowed() {
        let connector =
            MailConnector::new(AddressPolicy::default(), MailLimits::default()).expect("built");
        let refused = connector
            .addresses("127.0.0.1")
            .await
            .expect_err("loopback");
        assert_eq!(refused.cause, Cause::BadInput);
        assert!(
            refused.message.contains("trigger.mailbox.host"),
            "{}",
            refused.message
        );
        let named = connector
            .addresses("localhost")
            .await
            .expect_err("localhost");
        assert_eq!(named.cause, Cause::BadInput, "{}", named.message);
        let allowed = MailConnector::new(
            AddressPolicy::new(crate::AllowList::parse("127.0.0.1").expect("a list")),
            MailLimits::default(),
        )
        .expect("built");
        assert_eq!(
            allowed.addresses("127.0.0.1").await.expect("allowed"),
            vec!["127.0.0.1".parse::<IpAddr>().expect("an address")]
        );
    }
}
