//! `mail/send`: one message through one of the tenant's mail servers, over SMTP with
//! lettre's client on tokio (TLS by rustls with ring and the web's roots; no OpenSSL).
//!
//! The step's input is read and checked by the automation crate's rules
//! (`fronta_automation::mail::SendInput::read`: a `to` that is not an address is a final
//! error naming it); the server comes from the [`MailServerStore`] port and its password
//! secret is revealed through the [`SecretVault`] only here, when the step connects.
//!
//! # Where it connects
//!
//! The host passes the SSRF guard's address policy first, the same one as `http/request`,
//! MCP and the IMAP poll ([`AddressPolicy::checked_addresses`]: a literal address as
//! itself; a name looked up once and every address of the answer checked; the allow-list
//! `FRONTA_HTTP_ALLOW` applies). lettre is then handed those addresses as socket
//! addresses, one after the other, so it never resolves the name again; TLS (implicit, or
//! after STARTTLS) still sends the server's *name* for SNI and checks the certificate
//! against it. `security: "starttls"` never falls back to plain text: a server that does
//! not offer STARTTLS is a final error.
//!
//! # The dialogue, and what a failure means
//!
//! lettre's `AsyncSmtpConnection::send` does `MAIL FROM`, every `RCPT TO`, `DATA` and the
//! data in one call, so a failure inside it cannot be placed before or after the moment
//! the message went out. The dialogue is therefore driven command by command here, in two
//! phases with their own time limits ([`SmtpLimits`]):
//!
//! 1. **Before the data** (`FRONTA_SMTP_TIMEOUT`, each TCP connection also within
//!    `FRONTA_SMTP_CONNECT_TIMEOUT`): connect, the greeting and EHLO, STARTTLS, the
//!    login, `MAIL FROM`, `RCPT TO` for each recipient, `DATA` up to the server's `354`.
//!    Nothing of the message was handed over: a timeout or a lost connection is retried,
//!    like a 4xx reply; a 5xx reply (a refused recipient, a refused login) is final.
//! 2. **The data** (`FRONTA_SMTP_DATA_TIMEOUT`): lettre's `message` writes the message and
//!    the closing dot and reads the final reply in one call. A 4xx or 5xx final reply is
//!    the server's word (4xx: not taken, retried; 5xx: final). A timeout or a lost
//!    connection here is **final** and says the message **may have been sent**: the
//!    server may have taken it just before the connection went. (A failure while the
//!    data was still being written, before the dot, could not have delivered it; lettre
//!    does not say which write failed, so the doubt is taken the safe way: the message is
//!    not sent twice.)
//!
//! The pure table is `fronta_automation::mail::classify`; this module only says which
//! phase and what trouble. lettre reports a connection closed in the middle of a reply as
//! a response error "incomplete response"; that one is read as a lost connection. A
//! certificate that does not verify for the server's name is final (a person must fix the
//! host name or the server), other TLS failures are connection failures.
//!
//! # What it publishes
//!
//! `messageId` (the `Message-ID` sent, without angle brackets; the same for a message
//! sent again by hand, see `fronta_automation::mail::message_id`), `reply` (the server's
//! final reply, `250 2.0.0 Ok: queued as …`), `from`, `to`, `cc` (the addresses) and
//! `subject`; the step log's line says what went to whom through which server. Never in a
//! log line or an answer: the password, the body.

use std::error::Error as StdError;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::context::Context;
use fronta_automation::mail::{
    self, MailSecurity, MailServer, MailServerStore, Mailbox, SendInput, SmtpPhase, SmtpTrouble,
};
use fronta_automation::retry::Cause;
use fronta_automation::secrets::{Revealed, SecretVault, WithSecrets};
use fronta_automation::template;
use fronta_desk::{DeskError, TenantId};
use lettre::message::{MultiPart, SinglePart};
use lettre::transport::smtp::Error as SmtpError;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{
    AsyncSmtpConnection, Certificate, CertificateStore, TlsParameters,
};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use lettre::transport::smtp::response::Response;
use serde_json::{Map, Value, json};

use crate::ssrf::{AddressPolicy, HostFailure, NameLookup, SystemLookup};

/// The time limits of `mail/send`, each configurable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmtpLimits {
    /// One TCP connection to one of the server's addresses (`FRONTA_SMTP_CONNECT_TIMEOUT`).
    pub connect_timeout: Duration,
    /// Everything before the message data: connecting, greeting, EHLO, TLS, login,
    /// `MAIL FROM`, `RCPT TO`, `DATA` (`FRONTA_SMTP_TIMEOUT`). A timeout here is retried.
    pub timeout: Duration,
    /// Sending the message data and waiting for the final reply
    /// (`FRONTA_SMTP_DATA_TIMEOUT`). A timeout here is final: it may have been sent.
    pub data_timeout: Duration,
}

impl Default for SmtpLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(60),
            data_timeout: Duration::from_secs(120),
        }
    }
}

impl SmtpLimits {
    /// The longest a call may take (a service slot held over it must be longer).
    pub fn longest_call(&self) -> Duration {
        self.timeout + self.data_timeout + QUIT_TIMEOUT
    }
}

/// How long the polite `QUIT` after a sent message may take (it changes nothing).
const QUIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The `mail/send` connector.
#[derive(Clone)]
pub struct SmtpConnector {
    servers: Arc<dyn MailServerStore>,
    vault: Option<SecretVault>,
    policy: Arc<AddressPolicy>,
    lookup: Arc<dyn NameLookup>,
    limits: SmtpLimits,
    /// Certificates trusted beside the web's roots (a private CA; the tests' own).
    extra_roots: Vec<Certificate>,
}

impl std::fmt::Debug for SmtpConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpConnector")
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .field("extra_roots", &self.extra_roots.len())
            .finish()
    }
}

fn failure(cause: Cause, message: impl Into<String>) -> ConnectorFailure {
    ConnectorFailure::new(cause, message)
}

fn bad_input(message: impl Into<String>) -> ConnectorFailure {
    failure(Cause::BadInput, message)
}

impl SmtpConnector {
    /// A connector reading servers from `servers`, revealing their password secrets with
    /// `vault` (without one, a server with a login fails its step as `NotConfigured`),
    /// resolving names with the system's resolver.
    pub fn new(
        servers: Arc<dyn MailServerStore>,
        vault: Option<SecretVault>,
        policy: AddressPolicy,
        limits: SmtpLimits,
    ) -> Result<Self, String> {
        Self::with_lookup(servers, vault, policy, limits, Arc::new(SystemLookup))
    }

    /// Like [`SmtpConnector::new`] with `lookup` resolving names (tests).
    pub fn with_lookup(
        servers: Arc<dyn MailServerStore>,
        vault: Option<SecretVault>,
        policy: AddressPolicy,
        limits: SmtpLimits,
        lookup: Arc<dyn NameLookup>,
    ) -> Result<Self, String> {
        if limits.connect_timeout.is_zero()
            || limits.timeout.is_zero()
            || limits.data_timeout.is_zero()
        {
            return Err("SMTP time limits must be longer than zero".to_owned());
        }
        Ok(Self {
            servers,
            vault,
            policy: Arc::new(policy),
            lookup,
            limits,
            extra_roots: Vec::new(),
        })
    }

    /// Also trusts the certificates in `pem` (one or more) as roots.
    pub fn trusting(mut self, pem: &[u8]) -> Result<Self, String> {
        let certificate = Certificate::from_pem(pem)
            .map_err(|err| format!("a trusted certificate cannot be read: {err}"))?;
        self.extra_roots.push(certificate);
        Ok(self)
    }

    pub fn limits(&self) -> SmtpLimits {
        self.limits
    }

    /// Serves `mail/send` (see the module docs).
    pub async fn call(&self, call: ConnectorCall<'_>) -> Result<ConnectorReply, ConnectorFailure> {
        let input = SendInput::read(&call.input).map_err(bad_input)?;
        let server = self.server(call.tenant, &input.server).await?;
        let shown = format!("mail server {:?} ({})", server.name, server.address());
        let sender = server
            .sender()
            .map_err(|why| bad_input(format!("{shown}: {why}")))?;
        let (credentials, revealed) = self.credentials(call.tenant, &server).await?;
        let message_id = mail::message_id(call.run_id, call.step_name, &input, &sender);
        let message = build(&sender, &input, &message_id)
            .map_err(|why| bad_input(format!("mail/send: {why}")))?;
        let envelope = message.envelope().clone();
        let bytes = message.formatted();
        let started = std::time::Instant::now();
        let outcome = self
            .deliver(&server, &shown, &sender, credentials, &envelope, &bytes)
            .await
            .map_err(|failed| ConnectorFailure {
                message: revealed.scrub(&failed.message),
                ..failed
            });
        match &outcome {
            Ok(reply) => tracing::info!(tenant = %call.tenant, run = call.run_id,
                step = call.step_name, server = %server.name, address = %server.address(),
                recipients = envelope.to().len(), reply = %reply, elapsed = ?started.elapsed(),
                "mail/send accepted"),
            Err(failed) => tracing::warn!(tenant = %call.tenant, run = call.run_id,
                step = call.step_name, server = %server.name, address = %server.address(),
                cause = ?failed.cause, retryable = failed.cause.retryable(),
                message = %failed.message, "mail/send failed"),
        }
        let reply = outcome?;
        let addresses = |list: &[Mailbox]| -> Value {
            Value::Array(list.iter().map(|m| json!(m.address)).collect())
        };
        let mut outputs = Map::new();
        outputs.insert("messageId".into(), json!(message_id));
        outputs.insert("reply".into(), json!(reply));
        outputs.insert("from".into(), json!(sender.address));
        outputs.insert("to".into(), addresses(&input.to));
        outputs.insert("cc".into(), addresses(&input.cc));
        outputs.insert("subject".into(), json!(input.subject));
        let list = |list: &[Mailbox]| {
            list.iter()
                .map(|m| m.address.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let cc = if input.cc.is_empty() {
            String::new()
        } else {
            format!(" (cc {})", list(&input.cc))
        };
        Ok(ConnectorReply {
            outputs,
            message: format!(
                "sent {:?} from {} to {}{cc} through {shown}: {reply}",
                input.subject,
                sender.address,
                list(&input.to)
            ),
        })
    }

    async fn server(&self, tenant: TenantId, name: &str) -> Result<MailServer, ConnectorFailure> {
        match self.servers.mail_server_get(tenant, name).await {
            Ok(Some(server)) => Ok(server),
            Ok(None) => Err(bad_input(format!(
                "mail server {name:?} is not configured for this tenant (PUT /api/mail-servers/{name})"
            ))),
            Err(DeskError::Unavailable(message)) => Err(failure(
                Cause::StorageUnavailable,
                format!("mail servers could not be read: {message}"),
            )),
            Err(other) => Err(failure(
                Cause::Bug,
                format!("mail servers could not be read: {other}"),
            )),
        }
    }

    /// The login with its password revealed, and the revealed values (to scrub them from
    /// whatever the call answers).
    async fn credentials(
        &self,
        tenant: TenantId,
        server: &MailServer,
    ) -> Result<(Option<Credentials>, Revealed), ConnectorFailure> {
        let (Some(user), Some(password)) = (&server.user, &server.password) else {
            return Ok((None, Revealed::default()));
        };
        if server.security == MailSecurity::None {
            return Err(bad_input(format!(
                "mail server {:?}: a password is never sent in plain text (security \"none\")",
                server.name
            )));
        }
        let input: Map<String, Value> =
            std::iter::once(("password".to_owned(), Value::String(password.clone()))).collect();
        let names = fronta_automation::secrets::names_in(&input);
        let Some(vault) = &self.vault else {
            return Err(failure(
                Cause::NotConfigured,
                format!(
                    "mail server {:?} logs in with a secret password, and secrets are not available here",
                    server.name
                ),
            ));
        };
        let revealed = vault
            .reveal(tenant, &names)
            .await
            .map_err(|err| ConnectorFailure {
                cause: if err.retryable {
                    Cause::StorageUnavailable
                } else {
                    Cause::BadInput
                },
                message: format!("mail server {:?}: {}", server.name, err.message),
                retry_after: None,
                not_now: None,
            })?;
        let context = Context::default();
        let scope = WithSecrets {
            context: &context,
            revealed: &revealed,
        };
        let rendered = template::render_str(password, &scope)
            .map_err(|err| bad_input(format!("mail server {:?}: password: {err}", server.name)))?;
        Ok((
            Some(Credentials::new(user.clone(), template::to_text(&rendered))),
            revealed,
        ))
    }

    fn tls(&self, server: &MailServer) -> Result<TlsParameters, ConnectorFailure> {
        let host = server.host.trim().trim_matches(['[', ']']).to_owned();
        let mut builder =
            TlsParameters::builder(host).certificate_store(CertificateStore::WebpkiRoots);
        for root in &self.extra_roots {
            builder = builder.add_root_certificate(root.clone());
        }
        builder.build_rustls().map_err(|err| {
            failure(
                Cause::NotConfigured,
                format!(
                    "TLS for mail server {:?} cannot be set up: {err}",
                    server.name
                ),
            )
        })
    }

    /// The whole dialogue; the final reply as text.
    async fn deliver(
        &self,
        server: &MailServer,
        shown: &str,
        sender: &Mailbox,
        credentials: Option<Credentials>,
        envelope: &lettre::address::Envelope,
        bytes: &[u8],
    ) -> Result<String, ConnectorFailure> {
        let addresses = self
            .policy
            .checked_addresses(self.lookup.as_ref(), &server.host)
            .await
            .map_err(|failed| match failed {
                HostFailure::Refused(refused) => {
                    tracing::warn!(server = %server.name, host = %server.host,
                        "mail/send refused by the address guard");
                    bad_input(format!("{shown}: {}", refused.0))
                }
                HostFailure::Lookup(err) => failure(
                    Cause::Connection,
                    format!("{shown}: the host could not be looked up: {err}; nothing was sent"),
                ),
            })?;
        let tls = match server.security {
            MailSecurity::None => None,
            MailSecurity::Tls | MailSecurity::Starttls => Some(self.tls(server)?),
        };
        let domain = sender.domain();
        let hello = ClientId::Domain(if domain.is_ascii() && !domain.is_empty() {
            domain.to_owned()
        } else {
            "localhost".to_owned()
        });
        let attempt = Attempt {
            server,
            addresses: &addresses,
            hello,
            tls,
            credentials,
            envelope,
            bytes,
            connect_timeout: self.limits.connect_timeout,
        };
        // What the dialogue is doing, for a timeout's message.
        let mut doing = String::from("connecting");
        let before = attempt.before_data(&mut doing);
        let mut connection = match tokio::time::timeout(self.limits.timeout, before).await {
            Ok(Ok(connection)) => connection,
            Ok(Err((trouble, what))) => {
                return Err(smtp_failure(shown, SmtpPhase::BeforeData, trouble, &what));
            }
            Err(_) => {
                return Err(smtp_failure(
                    shown,
                    SmtpPhase::BeforeData,
                    Trouble::Smtp(SmtpTrouble::TimedOut),
                    &format!(
                        "no answer within {:?} (FRONTA_SMTP_TIMEOUT) while {doing}",
                        self.limits.timeout
                    ),
                ));
            }
        };
        let answer =
            tokio::time::timeout(self.limits.data_timeout, connection.message(bytes)).await;
        let reply = match answer {
            Ok(Ok(response)) => reply_text(&response),
            Ok(Err(err)) => {
                let _ = tokio::time::timeout(QUIT_TIMEOUT, connection.abort()).await;
                let what = format!("the final reply to the message data: {}", error_text(&err));
                return Err(smtp_failure(
                    shown,
                    SmtpPhase::AfterData,
                    trouble_of(&err),
                    &what,
                ));
            }
            Err(_) => {
                return Err(smtp_failure(
                    shown,
                    SmtpPhase::AfterData,
                    Trouble::Smtp(SmtpTrouble::TimedOut),
                    &format!(
                        "no final reply within {:?} (FRONTA_SMTP_DATA_TIMEOUT)",
                        self.limits.data_timeout
                    ),
                ));
            }
        };
        // Saying goodbye changes nothing: bounded, and its failure is not the step's.
        tokio::spawn(async move {
            let _ = tokio::time::timeout(QUIT_TIMEOUT, connection.quit()).await;
        });
        Ok(reply)
    }
}

/// One delivery's dialogue up to the data.
struct Attempt<'a> {
    server: &'a MailServer,
    /// What the address policy let through, in order.
    addresses: &'a [IpAddr],
    hello: ClientId,
    tls: Option<TlsParameters>,
    credentials: Option<Credentials>,
    envelope: &'a lettre::address::Envelope,
    bytes: &'a [u8],
    connect_timeout: Duration,
}

impl Attempt<'_> {
    /// Connect, greet, protect, log in, name the sender and the recipients, and open the
    /// data: a connection the server answered `354` on. A failure says what was being
    /// done; `doing` keeps it for a timeout, which drops this future.
    async fn before_data(
        self,
        doing: &mut String,
    ) -> Result<AsyncSmtpConnection, (Trouble, String)> {
        let implicit = match self.server.security {
            MailSecurity::Tls => self.tls.clone(),
            _ => None,
        };
        let mut connection = None;
        let mut last = None;
        for ip in self.addresses {
            let address = SocketAddr::new(*ip, self.server.port);
            *doing = format!("connecting to {address}, the greeting and EHLO");
            match AsyncSmtpConnection::connect_tokio1(
                address,
                Some(self.connect_timeout),
                &self.hello,
                implicit.clone(),
                None,
            )
            .await
            {
                Ok(connected) => {
                    connection = Some(connected);
                    break;
                }
                Err(err) => {
                    let trouble = trouble_of(&err);
                    let what = format!("{doing}: {}", error_text(&err));
                    // Another address may answer; a reply or a certificate would not change.
                    if matches!(
                        trouble,
                        Trouble::Smtp(SmtpTrouble::ConnectionLost | SmtpTrouble::TimedOut)
                    ) {
                        last = Some((trouble, what));
                        continue;
                    }
                    return Err((trouble, what));
                }
            }
        }
        let Some(mut connection) = connection else {
            return Err(last.unwrap_or((
                Trouble::Smtp(SmtpTrouble::ConnectionLost),
                "no address to connect to".to_owned(),
            )));
        };
        match self.dialogue(&mut connection, doing).await {
            Ok(()) => Ok(connection),
            Err(failed) => {
                // QUIT (when still possible) and close: nothing was sent.
                let _ = tokio::time::timeout(QUIT_TIMEOUT, connection.abort()).await;
                Err(failed)
            }
        }
    }

    async fn dialogue(
        self,
        connection: &mut AsyncSmtpConnection,
        doing: &mut String,
    ) -> Result<(), (Trouble, String)> {
        let at = |doing: &str, err: &SmtpError| {
            (trouble_of(err), format!("{doing}: {}", error_text(err)))
        };
        if self.server.security == MailSecurity::Starttls {
            *doing = "STARTTLS".to_owned();
            if !connection
                .server_info()
                .supports_feature(Extension::StartTls)
            {
                return Err((
                    Trouble::Refusal(Cause::BadInput),
                    "the server does not offer STARTTLS, and security \"starttls\" never sends \
                     in plain text (use \"tls\" if it takes TLS from the first byte)"
                        .to_owned(),
                ));
            }
            let Some(tls) = self.tls else {
                return Err((
                    Trouble::Refusal(Cause::Bug),
                    "no TLS parameters for STARTTLS".to_owned(),
                ));
            };
            connection
                .starttls(tls, &self.hello)
                .await
                .map_err(|err| at("STARTTLS", &err))?;
        }
        if let Some(credentials) = &self.credentials {
            let user = self.server.user.as_deref().unwrap_or_default();
            *doing = format!("the login of {user:?}");
            connection
                .auth(&[Mechanism::Plain, Mechanism::Login], credentials)
                .await
                .map_err(|err| match trouble_of(&err) {
                    Trouble::Refusal(_) => (
                        Trouble::Refusal(Cause::BadInput),
                        format!(
                            "the server offers no login this client speaks (AUTH PLAIN or \
                             LOGIN): {}",
                            error_text(&err)
                        ),
                    ),
                    trouble => (
                        trouble,
                        format!(
                            "the login of {user:?} (check the user and the password secret): {}",
                            error_text(&err)
                        ),
                    ),
                })?;
        }
        let mut options = Vec::new();
        let info = connection.server_info();
        let non_ascii_addresses = self
            .envelope
            .from()
            .into_iter()
            .chain(self.envelope.to())
            .any(|address| !AsRef::<str>::as_ref(address).is_ascii());
        if non_ascii_addresses {
            if !info.supports_feature(Extension::SmtpUtfEight) {
                return Err((
                    Trouble::Refusal(Cause::BadInput),
                    "an address holds letters beyond ASCII, and the server does not take them \
                     (no SMTPUTF8)"
                        .to_owned(),
                ));
            }
            options.push(MailParameter::SmtpUtfEight);
        }
        if !self.bytes.is_ascii() {
            if !info.supports_feature(Extension::EightBitMime) {
                return Err((
                    Trouble::Refusal(Cause::BadInput),
                    "the message holds 8-bit text, and the server does not take it (no 8BITMIME)"
                        .to_owned(),
                ));
            }
            options.push(MailParameter::Body(MailBodyParameter::EightBitMime));
        }
        let from = self.envelope.from().cloned();
        *doing = format!(
            "MAIL FROM <{}>",
            from.as_ref().map(ToString::to_string).unwrap_or_default()
        );
        connection
            .command(Mail::new(from, options))
            .await
            .map_err(|err| at(doing.as_str(), &err))?;
        for recipient in self.envelope.to() {
            *doing = format!("RCPT TO <{recipient}>");
            connection
                .command(Rcpt::new(recipient.clone(), Vec::new()))
                .await
                .map_err(|err| at(doing.as_str(), &err))?;
        }
        *doing = "DATA".to_owned();
        connection
            .command(Data)
            .await
            .map_err(|err| at(doing.as_str(), &err))?;
        Ok(())
    }
}

/// What went wrong, as the classification reads it, or a refusal that is no SMTP trouble
/// (a feature the server lacks, a certificate that does not verify) with its cause.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Trouble {
    Smtp(SmtpTrouble),
    Refusal(Cause),
}

fn smtp_failure(shown: &str, phase: SmtpPhase, trouble: Trouble, what: &str) -> ConnectorFailure {
    match trouble {
        Trouble::Smtp(trouble) => {
            let (cause, consequence) = mail::classify(phase, trouble);
            failure(cause, format!("{shown}: {what}: {consequence}"))
        }
        Trouble::Refusal(cause) => failure(cause, format!("{shown}: {what}: not tried again")),
    }
}

/// The reply as one line: `250 2.0.0 Ok: queued as 1`.
fn reply_text(response: &Response) -> String {
    let code = u16::from(response.code());
    let text = response.message().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        code.to_string()
    } else {
        format!("{code} {text}")
    }
}

/// A lettre error in one line: the reply (`550 5.1.1 no such user`) or what failed.
fn error_text(err: &SmtpError) -> String {
    match (err.status(), err.source()) {
        (Some(code), Some(text)) => format!("{} {text}", u16::from(code)),
        (Some(code), None) => u16::from(code).to_string(),
        _ => {
            if let Some(tls) = tls_error(err) {
                return format!("TLS: {tls}");
            }
            // lettre's text holds its source's; add only what the deeper ones say anew.
            let mut text = err.to_string();
            let mut current = err.source();
            while let Some(inner) = current {
                let said = inner.to_string();
                if !text.contains(&said) {
                    text.push_str(": ");
                    text.push_str(&said);
                }
                current = inner.source();
            }
            text
        }
    }
}

/// The rustls error inside `err`, if TLS failed (it sits inside an `io::Error`, whose
/// `source` skips it).
fn tls_error(err: &SmtpError) -> Option<&rustls::Error> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(inner) = current {
        if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(tls) = inner
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|io| io.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        current = inner.source();
    }
    None
}

/// What a lettre error means (see the module docs).
fn trouble_of(err: &SmtpError) -> Trouble {
    if let Some(code) = err.status() {
        return Trouble::Smtp(SmtpTrouble::Reply(u16::from(code)));
    }
    if err.is_timeout() {
        return Trouble::Smtp(SmtpTrouble::TimedOut);
    }
    if let Some(rustls::Error::InvalidCertificate(_)) = tls_error(err) {
        return Trouble::Refusal(Cause::BadInput);
    }
    if err.is_response() {
        // lettre's word for a connection closed in the middle of a reply.
        if err.to_string().contains("incomplete response") {
            return Trouble::Smtp(SmtpTrouble::ConnectionLost);
        }
        return Trouble::Smtp(SmtpTrouble::Unreadable);
    }
    if err.is_client() {
        return Trouble::Refusal(Cause::BadInput);
    }
    Trouble::Smtp(SmtpTrouble::ConnectionLost)
}

/// The message as lettre builds it: From, To, Cc, Subject, Message-ID, Date, and the
/// text, the HTML or both as `multipart/alternative`.
fn build(sender: &Mailbox, input: &SendInput, message_id: &str) -> Result<lettre::Message, String> {
    let mailbox = |mailbox: &Mailbox| -> Result<lettre::message::Mailbox, String> {
        let address: lettre::Address = mailbox.address.parse().map_err(|err| {
            format!(
                "{:?} is not an address the mail client takes: {err}",
                mailbox.address
            )
        })?;
        Ok(lettre::message::Mailbox::new(mailbox.name.clone(), address))
    };
    let mut builder = lettre::Message::builder()
        .from(mailbox(sender)?)
        .subject(input.subject.clone())
        .message_id(Some(format!("<{message_id}>")))
        .date_now();
    for to in &input.to {
        builder = builder.to(mailbox(to)?);
    }
    for cc in &input.cc {
        builder = builder.cc(mailbox(cc)?);
    }
    let built = match (&input.text, &input.html) {
        (Some(text), Some(html)) => builder.multipart(MultiPart::alternative_plain_html(
            text.clone(),
            html.clone(),
        )),
        (None, Some(html)) => builder.singlepart(SinglePart::html(html.clone())),
        (text, None) => builder.singlepart(SinglePart::plain(text.clone().unwrap_or_default())),
    };
    built.map_err(|err| format!("the message cannot be built: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(value: Value) -> SendInput {
        SendInput::read(value.as_object().expect("an object")).expect("reads")
    }

    #[test]
    fn the_message_carries_its_headers_and_both_bodies() {
        let sender = mail::parse_mailbox("Service desk <desk@firm.example>").expect("sender");
        let given = input(
            json!({"server": "desk", "to": "Eva Novak <eva@shop.example>",
            "cc": "it@firm.example", "subject": "Objednávka 5001", "text": "Dobrý den",
            "html": "<p>Dobrý den</p>"}),
        );
        let message = build(&sender, &given, "run.abc@firm.example").expect("built");
        let text = String::from_utf8(message.formatted()).expect("text");
        assert!(
            text.is_ascii(),
            "headers and bodies encoded for 7-bit transport"
        );
        for header in [
            "From: \"Service desk\" <desk@firm.example>",
            "To: \"Eva Novak\" <eva@shop.example>",
            "Cc: it@firm.example",
            "Message-ID: <run.abc@firm.example>",
            "Content-Type: multipart/alternative",
            "Content-Type: text/plain; charset=utf-8",
            "Content-Type: text/html; charset=utf-8",
        ] {
            assert!(text.contains(header), "{header:?} in\n{text}");
        }
        let parsed = mail_parser::MessageParser::default()
            .parse(text.as_bytes())
            .expect("parses back");
        assert_eq!(
            parsed.subject(),
            Some("Objednávka 5001"),
            "encoded word decoded"
        );
        assert_eq!(parsed.body_text(0).as_deref(), Some("Dobrý den"));
        assert_eq!(parsed.body_html(0).as_deref(), Some("<p>Dobrý den</p>"));
        let envelope = message.envelope();
        let recipients: Vec<String> = envelope.to().iter().map(ToString::to_string).collect();
        assert_eq!(
            recipients,
            ["eva@shop.example", "it@firm.example"],
            "to and cc"
        );
        assert_eq!(
            envelope.from().map(ToString::to_string).as_deref(),
            Some("desk@firm.example")
        );
    }

    #[test]
    fn only_html_or_only_text_is_a_single_part() {
        let sender = mail::parse_mailbox("desk@firm.example").expect("sender");
        let html = build(
            &sender,
            &input(json!({"server": "d", "to": "a@b.example", "subject": "s", "html": "<b>x</b>"})),
            "x@firm.example",
        )
        .expect("built");
        let text = String::from_utf8(html.formatted()).expect("text");
        assert!(text.contains("Content-Type: text/html"), "{text}");
        assert!(!text.contains("multipart"), "{text}");
    }
}
