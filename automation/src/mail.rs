//! `mail/send`: the per-tenant mail servers a step names by its `server` input (the
//! [`MailServerStore`] port that keeps them), and the rules of the step — what its input
//! must be ([`SendInput::read`], and on save [`literal_problems`]), what an e-mail
//! address is ([`parse_mailbox`], [`parse_mailboxes`]), the `Message-ID` it is sent
//! with ([`message_id`]) and what each way an SMTP dialogue can fail means for a retry
//! ([`classify`]). The SMTP client itself is `fronta-connectors`' (this crate has no
//! network code).
//!
//! A mail server:
//!
//! ```json
//! {"name": "desk", "host": "smtp.firm.example", "port": 587, "security": "starttls",
//!  "user": "desk@firm.example", "password": "{{secrets.smtp_password}}",
//!  "from": "Service desk <desk@firm.example>"}
//! ```
//!
//! `security` is `tls` (the default: TLS from the first byte, port 465 by default), `starttls` (plain
//! text upgraded with STARTTLS before anything else is said, port 587; a server that does
//! not offer STARTTLS is refused, never used in the clear) or `none` (plain text, port
//! 25; then no `user` and `password`: a password is never sent unencrypted). The password
//! is a `{{secrets.<name>}}` reference, revealed only when a step connects. The host is
//! judged by the SSRF guard's address policy ([`HostPolicy`]) on save as far as it can be
//! without a lookup (a literal private address, `localhost`), and again with every
//! address it resolves to when a step connects.
//!
//! # Retried or not (DESIGN.md §4.5)
//!
//! An SMTP dialogue has one point after which a failure leaves a doubt: the moment the
//! message data goes out after the server's `354` to `DATA`. Before it, nothing was
//! handed over; after it, the server may have taken the message even if its final reply
//! never arrived. [`classify`]:
//!
//! | what happened | before the data | after the data was sent |
//! |---|---|---|
//! | a 4xx reply (greeting, EHLO, AUTH, MAIL, RCPT, DATA or the final one) | retried | retried: a 4xx final reply says the message was not taken |
//! | a 5xx reply | final | final |
//! | the connection failed or closed | retried | final: it may have been sent |
//! | no answer within the time limit | retried | final: it may have been sent |
//! | an answer that is not SMTP | final | final |

use std::fmt;

use async_trait::async_trait;
use fronta_desk::TenantId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::connector::HostPolicy;
use crate::retry::Cause;
use crate::store::StoreResult;
use crate::template;

/// At most this many recipients (`to` and `cc` together) in one message.
pub const MAX_RECIPIENTS: usize = 50;
/// The longest subject, in characters (one header line of RFC 5322).
pub const MAX_SUBJECT_CHARS: usize = 998;
/// The largest `text` and `html` together, in bytes.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The longest address (RFC 5321's path limit).
pub const MAX_ADDRESS_BYTES: usize = 254;
/// The longest local part (before the `@`).
const MAX_LOCAL_BYTES: usize = 64;

/// How the connection to a mail server is protected.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MailSecurity {
    /// TLS from the first byte ("implicit TLS", SMTPS).
    Tls,
    /// Plain text upgraded with STARTTLS before the login; refused when not offered.
    Starttls,
    /// Plain text throughout (a relay inside the operator's network): no login.
    None,
}

impl MailSecurity {
    /// What a server that names none gets: TLS from the first byte (RFC 8314 prefers it
    /// to STARTTLS, and the mail poll's IMAP does the same).
    pub const DEFAULT: MailSecurity = MailSecurity::Tls;

    /// The port a server gets when it names none.
    pub fn default_port(self) -> u16 {
        match self {
            MailSecurity::Tls => 465,
            MailSecurity::Starttls => 587,
            MailSecurity::None => 25,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MailSecurity::Tls => "tls",
            MailSecurity::Starttls => "starttls",
            MailSecurity::None => "none",
        }
    }
}

/// One configured mail server of a tenant.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MailServer {
    pub name: String,
    /// A bare name or address: `smtp.firm.example`, `192.0.2.7`, `[2001:db8::7]`.
    pub host: String,
    pub port: u16,
    pub security: MailSecurity,
    /// The login, with `password`; both absent for a server that takes mail without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{{secrets.<name>}}` reference, never a value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The sender of every message: `desk@firm.example` or `Service desk <desk@firm.example>`.
    pub from: String,
}

impl MailServer {
    /// Every problem of this configuration, each a sentence (empty when it is fine).
    /// `hosts` is the address policy of the connectors' SSRF guard.
    pub fn problems(&self, hosts: &dyn HostPolicy) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(problem) = crate::mcp::check_name(&self.name) {
            problems.push(problem);
        }
        match host_problem(&self.host) {
            Some(problem) => problems.push(format!("host: {problem}")),
            None => {
                if let Some(refused) = hosts.host_refused(self.host.trim()) {
                    problems.push(format!("host: {refused}"));
                }
            }
        }
        if self.port == 0 {
            problems.push("port must be from 1 to 65535".to_owned());
        }
        match (&self.user, &self.password) {
            (None, None) => {}
            (Some(user), Some(password)) => {
                if self.security == MailSecurity::None {
                    problems.push(
                        "security \"none\" sends everything in plain text: a server with a user \
                         and password needs \"tls\" or \"starttls\""
                            .to_owned(),
                    );
                }
                if user.trim().is_empty() {
                    problems.push("user is empty".to_owned());
                }
                if !is_secret_reference(password) {
                    problems.push(
                        "password must be a secret reference such as \"{{secrets.smtp_password}}\" \
                         (store it with PUT /api/secrets/{name}); a literal password would be \
                         readable by everyone who can read the mail server"
                            .to_owned(),
                    );
                }
            }
            (Some(_), None) => problems.push("user is given without a password".to_owned()),
            (None, Some(_)) => problems.push("password is given without a user".to_owned()),
        }
        if let Err(problem) = parse_mailbox(&self.from) {
            problems.push(format!("from: {problem}"));
        }
        problems
    }

    /// The sender as parsed (a server that passed [`MailServer::problems`] has one).
    pub fn sender(&self) -> Result<Mailbox, String> {
        parse_mailbox(&self.from).map_err(|problem| format!("from: {problem}"))
    }

    /// `host:port` for messages (an IPv6 address in brackets).
    pub fn address(&self) -> String {
        let host = self.host.trim();
        if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{}", self.port)
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// What is wrong with a host as written, or `None`: it must be a bare name or address,
/// without a scheme, a path, a port or a template (a mail poll's mailbox host too).
pub fn host_problem(host: &str) -> Option<String> {
    let trimmed = host.trim();
    if trimmed.is_empty() {
        return Some("the host is empty".to_owned());
    }
    let bracketed = trimmed.starts_with('[') && trimmed.ends_with(']');
    let bad = trimmed.contains("://")
        || trimmed.contains(['/', ' ', '{', '}', '@', '?', '#'])
        || (!bracketed && trimmed.matches(':').count() == 1);
    bad.then(|| {
        format!(
            "host \"{host}\" must be a bare name or address (mail.example.com), without a \
             scheme, a port or a path"
        )
    })
}

/// Whether `text` is exactly one `{{secrets.<name>}}` reference.
pub fn is_secret_reference(text: &str) -> bool {
    match template::single_name(text) {
        Some(name) => name
            .strip_prefix("secrets.")
            .is_some_and(|secret| !secret.is_empty() && !secret.contains('.')),
        None => false,
    }
}

// ---------------------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------------------

/// An address with its optional display name: `Eva Novak <eva@shop.example>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mailbox {
    pub name: Option<String>,
    /// `local@domain`.
    pub address: String,
}

impl Mailbox {
    /// The part after the `@`.
    pub fn domain(&self) -> &str {
        self.address
            .rsplit_once('@')
            .map_or("", |(_, domain)| domain)
    }
}

impl fmt::Display for Mailbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name} <{}>", self.address),
            None => f.write_str(&self.address),
        }
    }
}

const HOW: &str = "expected name@example.com or \"Name <name@example.com>\"";

/// One address, bare (`eva@shop.example`), in angle brackets, or after a display name
/// (`Eva Novak <eva@shop.example>`, `"Novak, Eva" <eva@shop.example>`).
///
/// The address is `local@domain`: the local part a dot-atom (letters, digits and
/// ``!#$%&'*+-/=?^_`{|}~``, dots between them; letters beyond ASCII too), the domain two
/// or more labels of letters, digits and inner hyphens. Quoted local parts and address
/// literals (`[192.0.2.1]`) are not taken: real recipients do not use them, and a typo
/// that happens to fit them would otherwise go out.
pub fn parse_mailbox(text: &str) -> Result<Mailbox, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(format!("an address is empty ({HOW})"));
    }
    if trimmed.contains(['\r', '\n']) {
        return Err(format!(
            "{trimmed:?} is not an e-mail address: it holds a line break"
        ));
    }
    let (name, address) = match trimmed.rfind('<') {
        Some(open) => {
            let Some(inner) = trimmed[open + 1..].strip_suffix('>') else {
                return Err(format!(
                    "{trimmed:?} is not an e-mail address: '<' without a closing '>' at the end ({HOW})"
                ));
            };
            let name = display_name(&trimmed[..open])
                .map_err(|why| format!("{trimmed:?} is not an e-mail address: {why} ({HOW})"))?;
            (name, inner.trim())
        }
        None => (None, trimmed),
    };
    address_problem(address)
        .map(|why| {
            Err(format!(
                "{trimmed:?} is not an e-mail address: {why} ({HOW})"
            ))
        })
        .unwrap_or(Ok(()))?;
    Ok(Mailbox {
        name,
        address: address.to_owned(),
    })
}

/// The display name before `<…>`: unquoted words, or one quoted string.
fn display_name(text: &str) -> Result<Option<String>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Some(quoted) = text.strip_prefix('"') {
        let Some(inner) = quoted.strip_suffix('"') else {
            return Err("the display name's quotes are not closed".to_owned());
        };
        let mut name = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => name.extend(chars.next()),
                '"' => return Err("a quote inside the quoted display name".to_owned()),
                other => name.push(other),
            }
        }
        return Ok(Some(name));
    }
    if text.contains(['"', '<', '>', '@', ',', ';', ':']) {
        return Err("the display name holds one of \" < > @ , ; : (put it in quotes)".to_owned());
    }
    Ok(Some(text.to_owned()))
}

fn is_atext(c: char) -> bool {
    c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c)
}

/// Why `address` is not `local@domain`, or `None`.
fn address_problem(address: &str) -> Option<String> {
    if address.len() > MAX_ADDRESS_BYTES {
        return Some(format!("longer than {MAX_ADDRESS_BYTES} bytes"));
    }
    let Some((local, domain)) = address.rsplit_once('@') else {
        return Some("no '@'".to_owned());
    };
    if local.is_empty() {
        return Some("nothing before the '@'".to_owned());
    }
    if local.len() > MAX_LOCAL_BYTES {
        return Some(format!(
            "the part before the '@' is longer than {MAX_LOCAL_BYTES} bytes"
        ));
    }
    if local
        .split('.')
        .any(|atom| atom.is_empty() || !atom.chars().all(is_atext))
    {
        return Some(format!(
            "{local:?} before the '@' may hold letters, digits and !#$%&'*+-/=?^_`{{|}}~, \
             with single dots between them"
        ));
    }
    if domain.is_empty() {
        return Some("nothing after the '@'".to_owned());
    }
    let labels: Vec<&str> = domain.trim_end_matches('.').split('.').collect();
    if labels.len() < 2 {
        return Some(format!("the domain {domain:?} has no dot"));
    }
    let label_ok = |label: &&str| {
        !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if !labels.iter().all(label_ok) {
        return Some(format!(
            "the domain {domain:?} is not a host name (labels of letters, digits and inner hyphens)"
        ));
    }
    None
}

/// A list of addresses separated by commas or semicolons (commas inside quotes and angle
/// brackets belong to the address): `eva@shop.example, "Novak, Jan" <jan@shop.example>`.
/// Empty entries are skipped; at least one address must be there.
pub fn parse_mailboxes(text: &str) -> Result<Vec<Mailbox>, String> {
    let mut entries = Vec::new();
    let (mut quoted, mut angled, mut escaped) = (false, false, false);
    let mut start = 0;
    for (at, c) in text.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '<' if !quoted => angled = true,
            '>' if !quoted => angled = false,
            ',' | ';' if !quoted && !angled => {
                entries.push(&text[start..at]);
                start = at + c.len_utf8();
            }
            _ => {}
        }
    }
    entries.push(&text[start..]);
    let found: Vec<Mailbox> = entries
        .into_iter()
        .filter(|entry| !entry.trim().is_empty())
        .map(parse_mailbox)
        .collect::<Result<_, _>>()?;
    if found.is_empty() {
        return Err(format!("no address in {:?} ({HOW})", text.trim()));
    }
    Ok(found)
}

// ---------------------------------------------------------------------------------------
// The step's input
// ---------------------------------------------------------------------------------------

/// A `mail/send` step's rendered input, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendInput {
    /// The mail server's name (`/api/mail-servers/{name}`).
    pub server: String,
    pub to: Vec<Mailbox>,
    pub cc: Vec<Mailbox>,
    /// One line: line breaks a template brought in are spaces.
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
}

/// The text of `input.<key>`: text as is, numbers and booleans written out.
fn input_text(input: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(value @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(value.to_string())),
        Some(other) => Err(format!(
            "input {key:?} must be text, found {}",
            crate::model::json_kind(other)
        )),
    }
}

/// The addresses of `input.<key>`: one text of addresses separated by commas, or a list
/// of such texts.
fn input_mailboxes(input: &Map<String, Value>, key: &str) -> Result<Vec<Mailbox>, String> {
    let in_key = |why: String| format!("input {key:?}: {why}");
    match input.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => parse_mailboxes(text).map_err(in_key),
        Some(Value::Array(items)) => {
            let mut found = Vec::new();
            for (index, item) in items.iter().enumerate() {
                match item {
                    Value::String(text) => found.extend(
                        parse_mailboxes(text)
                            .map_err(|why| format!("input \"{key}[{index}]\": {why}"))?,
                    ),
                    other => {
                        return Err(format!(
                            "input \"{key}[{index}]\" must be an address, found {}",
                            crate::model::json_kind(other)
                        ));
                    }
                }
            }
            Ok(found)
        }
        Some(other) => Err(format!(
            "input {key:?} must be an address, addresses separated by commas, or a list of \
             them; found {}",
            crate::model::json_kind(other)
        )),
    }
}

impl SendInput {
    /// Reads the rendered input, naming the input and the value that is wrong.
    pub fn read(input: &Map<String, Value>) -> Result<SendInput, String> {
        let server = match input_text(input, "server")? {
            Some(server) if !server.trim().is_empty() => server.trim().to_owned(),
            _ => return Err("input \"server\" is required: the name of a mail server".to_owned()),
        };
        crate::mcp::check_name(&server).map_err(|why| format!("input \"server\": {why}"))?;
        let to = input_mailboxes(input, "to")?;
        if to.is_empty() {
            return Err("input \"to\" is required: at least one address".to_owned());
        }
        let cc = input_mailboxes(input, "cc")?;
        if to.len() + cc.len() > MAX_RECIPIENTS {
            return Err(format!(
                "{} recipients in \"to\" and \"cc\"; at most {MAX_RECIPIENTS} are allowed",
                to.len() + cc.len()
            ));
        }
        let Some(subject) = input_text(input, "subject")? else {
            return Err("input \"subject\" is required".to_owned());
        };
        let subject = one_line(&subject);
        if subject.chars().count() > MAX_SUBJECT_CHARS {
            return Err(format!(
                "input \"subject\" has {} characters; at most {MAX_SUBJECT_CHARS} are allowed",
                subject.chars().count()
            ));
        }
        let text = input_text(input, "text")?;
        let html = input_text(input, "html")?;
        if text.is_none() && html.is_none() {
            return Err("mail/send needs a body: input \"text\", \"html\" or both".to_owned());
        }
        let bytes = text.as_ref().map_or(0, String::len) + html.as_ref().map_or(0, String::len);
        if bytes > MAX_BODY_BYTES {
            return Err(format!(
                "\"text\" and \"html\" hold {bytes} bytes; at most {MAX_BODY_BYTES} are allowed"
            ));
        }
        Ok(SendInput {
            server,
            to,
            cc,
            subject,
            text,
            html,
        })
    }

    /// Every recipient, `to` first.
    pub fn recipients(&self) -> impl Iterator<Item = &Mailbox> {
        self.to.iter().chain(&self.cc)
    }
}

/// `text` on one line: each run of line breaks (and the spaces around it) is one space.
fn one_line(text: &str) -> String {
    if !text.contains(['\r', '\n']) {
        return text.to_owned();
    }
    text.split(['\r', '\n'])
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The problems of a `mail/send` input that can be known on save, as (input key, message):
/// a literal `server` name, literal addresses in `to` and `cc` (a text holding a template
/// is checked when the step runs), and a body. Required inputs are checked by the
/// catalogue.
pub fn literal_problems(input: &Map<String, Value>) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if let Some(Value::String(server)) = input.get("server")
        && template::is_literal(server)
        && let Err(why) = crate::mcp::check_name(server.trim())
    {
        problems.push(("server".to_owned(), why));
    }
    for key in ["to", "cc"] {
        match input.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => {
                if template::is_literal(text)
                    && let Err(why) = parse_mailboxes(text)
                {
                    problems.push((key.to_owned(), why));
                }
            }
            Some(Value::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    match item {
                        Value::String(text) => {
                            if template::is_literal(text)
                                && let Err(why) = parse_mailboxes(text)
                            {
                                problems.push((format!("{key}[{index}]"), why));
                            }
                        }
                        other => problems.push((
                            format!("{key}[{index}]"),
                            format!(
                                "must be an address, found {}",
                                crate::model::json_kind(other)
                            ),
                        )),
                    }
                }
            }
            Some(other) => problems.push((
                key.to_owned(),
                format!(
                    "must be an address, addresses separated by commas, a list of them or one \
                     {{{{name}}}}; found {}",
                    crate::model::json_kind(other)
                ),
            )),
        }
    }
    for key in ["subject", "text", "html"] {
        if let Some(value @ (Value::Object(_) | Value::Array(_))) = input.get(key) {
            problems.push((
                key.to_owned(),
                format!("must be text, found {}", crate::model::json_kind(value)),
            ));
        }
    }
    let body = |key: &str| input.get(key).is_some_and(|value| !value.is_null());
    if !body("text") && !body("html") {
        problems.push((
            "text".to_owned(),
            "mail/send needs a body: input \"text\", \"html\" or both".to_owned(),
        ));
    }
    problems
}

/// The `Message-ID` of a step's message (without the angle brackets): the same for the
/// same run, step and rendered message, so a message sent again by hand after a "may have
/// been sent" carries the id of the first and a recipient's mail program can tell them
/// apart from two orders; distinct for each pass of a `forEach` that sends something
/// else. The domain is the sender's when it is ASCII.
pub fn message_id(run_id: &str, step: &str, input: &SendInput, sender: &Mailbox) -> String {
    let mut hasher = Sha256::new();
    for part in [run_id, step, &input.server, &input.subject] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    for mailbox in input.recipients() {
        hasher.update(mailbox.address.as_bytes());
        hasher.update([0]);
    }
    for part in [&input.text, &input.html] {
        hasher.update(part.as_deref().unwrap_or("").as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let hex: String = digest[..12]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let domain = sender.domain();
    let domain = if domain.is_ascii() && !domain.is_empty() {
        domain.trim_end_matches('.')
    } else {
        "fronta.invalid"
    };
    let run: String = run_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    format!("{run}.{hex}@{domain}")
}

// ---------------------------------------------------------------------------------------
// Classification
// ---------------------------------------------------------------------------------------

/// Where the SMTP dialogue was when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpPhase {
    /// Connecting, the greeting, EHLO, TLS, the login, `MAIL FROM`, `RCPT TO`, up to the
    /// server's `354` to `DATA`: no part of the message was sent.
    BeforeData,
    /// The message data was being sent, or its final reply awaited.
    AfterData,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTrouble {
    /// The server answered with this reply code.
    Reply(u16),
    /// No answer within the time limit.
    TimedOut,
    /// The connection could not be made, failed or was closed.
    ConnectionLost,
    /// An answer that is not SMTP.
    Unreadable,
}

/// The cause of an SMTP failure, and what it means in words for the step log (see the
/// module's table).
pub fn classify(phase: SmtpPhase, trouble: SmtpTrouble) -> (Cause, &'static str) {
    use SmtpPhase::{AfterData, BeforeData};
    use SmtpTrouble::{ConnectionLost, Reply, TimedOut, Unreadable};
    match (phase, trouble) {
        (_, Reply(code)) if (400..=499).contains(&code) => (
            Cause::SmtpReply(code),
            "a temporary refusal: the message was not taken and is tried again later",
        ),
        (_, Reply(code)) if (500..=599).contains(&code) => (
            Cause::SmtpReply(code),
            "a permanent refusal: the message was not taken and is not tried again",
        ),
        (_, Reply(_) | Unreadable) => (
            Cause::BadAnswer,
            "an answer that is not SMTP: not tried again",
        ),
        (BeforeData, TimedOut) => (
            Cause::TimeoutBeforeSend,
            "nothing of the message was sent yet: tried again later",
        ),
        (BeforeData, ConnectionLost) => (
            Cause::Connection,
            "nothing of the message was sent yet: tried again later",
        ),
        (AfterData, TimedOut) => (
            Cause::TimeoutAfterSend,
            "the message data was sent and no final reply came: it may have been sent, so it \
             is not sent again",
        ),
        (AfterData, ConnectionLost) => (
            Cause::BrokenAfterSend,
            "the message data was sent and the connection failed before the final reply: it \
             may have been sent, so it is not sent again",
        ),
    }
}

// ---------------------------------------------------------------------------------------
// The port
// ---------------------------------------------------------------------------------------

/// The mail servers of each tenant.
///
/// # Contract
///
/// - Every method is scoped by tenant; another tenant's server answers exactly like one
///   that does not exist. A write for an unknown tenant is `NotFound`.
/// - `mail_server_put` creates the server or replaces it whole (by `server.name`).
/// - `mail_server_get` answers the server or `None`; `mail_server_list` answers the
///   tenant's servers ordered by name.
/// - `mail_server_delete` removes it; `NotFound` (naming `names::MAIL_SERVER`) when
///   there is none.
/// - Stores keep the configuration as given (it was checked with
///   [`MailServer::problems`] before); the password holds a secret *reference*, never a
///   value.
#[async_trait]
pub trait MailServerStore: Send + Sync + 'static {
    async fn mail_server_put(
        &self,
        tenant: TenantId,
        server: MailServer,
    ) -> StoreResult<MailServer>;
    async fn mail_server_get(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> StoreResult<Option<MailServer>>;
    async fn mail_server_list(&self, tenant: TenantId) -> StoreResult<Vec<MailServer>>;
    async fn mail_server_delete(&self, tenant: TenantId, name: &str) -> StoreResult<()>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The guard's policy as far as these tests need it: `127.0.0.1` is allowed (the
    /// operator's list), other loopback and private addresses and `localhost` are not.
    struct Policy;

    impl HostPolicy for Policy {
        fn host_refused(&self, host: &str) -> Option<String> {
            let private = host == "localhost"
                || host.starts_with("10.")
                || host.starts_with("192.168.")
                || (host.starts_with("127.") && host != "127.0.0.1");
            private.then(|| format!("{host} is private"))
        }
    }

    fn server() -> MailServer {
        MailServer {
            name: "desk".into(),
            host: "smtp.firm.example".into(),
            port: 587,
            security: MailSecurity::Starttls,
            user: Some("desk@firm.example".into()),
            password: Some("{{secrets.smtp_password}}".into()),
            from: "Service desk <desk@firm.example>".into(),
        }
    }

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().expect("an object")
    }

    #[test]
    fn a_mail_server_reads_from_json_and_checks() {
        let read: MailServer = serde_json::from_value(json!({
            "name": "desk", "host": "smtp.firm.example", "port": 587, "security": "starttls",
            "user": "desk@firm.example", "password": "{{secrets.smtp_password}}",
            "from": "Service desk <desk@firm.example>"
        }))
        .expect("parses");
        assert_eq!(read, server(), "every field read");
        assert!(
            read.problems(&Policy).is_empty(),
            "{:?}",
            read.problems(&Policy)
        );
        let relay = MailServer {
            security: MailSecurity::None,
            user: None,
            password: None,
            host: "127.0.0.1".into(),
            port: 25,
            ..server()
        };
        assert!(
            relay.problems(&Policy).is_empty(),
            "an allowed relay without a login: {:?}",
            relay.problems(&Policy)
        );
        assert_eq!(MailSecurity::Tls.default_port(), 465);
        assert!(
            serde_json::from_value::<MailServer>(json!({"name": "x", "host": "h", "port": 25,
                "security": "ssl", "from": "a@b.example"}))
            .is_err(),
            "an unknown security is refused"
        );
    }

    #[test]
    fn bad_mail_servers_say_what_is_wrong() {
        let bad = MailServer {
            name: "bad name".into(),
            host: "10.0.0.5".into(),
            port: 0,
            security: MailSecurity::None,
            user: Some(" ".into()),
            password: Some("hunter2".into()),
            from: "desk".into(),
        };
        let problems = bad.problems(&Policy);
        let expected = [
            "may use only letters",
            "host: 10.0.0.5 is private",
            "port must be from 1",
            "security \"none\" sends everything in plain text",
            "user is empty",
            "password must be a secret reference",
            "from: \"desk\" is not an e-mail address",
        ];
        assert_eq!(problems.len(), expected.len(), "{problems:?}");
        for (problem, expected) in problems.iter().zip(expected) {
            assert!(problem.contains(expected), "{problem:?} names {expected:?}");
        }
        let with_scheme = MailServer {
            host: "smtps://smtp.firm.example".into(),
            ..server()
        };
        assert!(
            with_scheme.problems(&Policy)[0].contains("bare name or address"),
            "{:?}",
            with_scheme.problems(&Policy)
        );
        let with_port = MailServer {
            host: "smtp.firm.example:587".into(),
            ..server()
        };
        assert_eq!(with_port.problems(&Policy).len(), 1, "a port in the host");
        let localhost = MailServer {
            host: "localhost".into(),
            ..server()
        };
        assert_eq!(
            localhost.problems(&Policy),
            vec!["host: localhost is private".to_string()],
            "the policy judges names too"
        );
        let half = MailServer {
            password: None,
            ..server()
        };
        assert_eq!(
            half.problems(&Policy),
            vec!["user is given without a password".to_string()]
        );
        let ipv6 = MailServer {
            host: "[2001:db8::7]".into(),
            ..server()
        };
        assert!(
            ipv6.problems(&Policy).is_empty(),
            "a bracketed IPv6 address"
        );
        assert_eq!(ipv6.address(), "[2001:db8::7]:587");
    }

    #[test]
    fn addresses_are_parsed_with_their_names() {
        assert_eq!(
            parse_mailbox("eva@shop.example"),
            Ok(Mailbox {
                name: None,
                address: "eva@shop.example".into()
            })
        );
        let named = parse_mailbox(" Eva Novak <eva.novak+orders@shop.example> ").expect("named");
        assert_eq!(named.name.as_deref(), Some("Eva Novak"));
        assert_eq!(named.address, "eva.novak+orders@shop.example");
        assert_eq!(named.domain(), "shop.example");
        assert_eq!(
            named.to_string(),
            "Eva Novak <eva.novak+orders@shop.example>"
        );
        let quoted = parse_mailbox(r#""Novak, Eva \"E\"" <eva@shop.example>"#).expect("quoted");
        assert_eq!(quoted.name.as_deref(), Some(r#"Novak, Eva "E""#));
        let unicode = parse_mailbox("jiří@obchod.example").expect("beyond ASCII");
        assert_eq!(unicode.address, "jiří@obchod.example");
        assert_eq!(
            parse_mailbox("<eva@shop.example>").map(|m| m.name),
            Ok(None),
            "angle brackets alone"
        );
    }

    #[test]
    fn what_is_not_an_address_is_named() {
        for (text, why) in [
            ("eva", "no '@'"),
            ("eva@", "nothing after the '@'"),
            ("@shop.example", "nothing before the '@'"),
            ("eva@localhost", "has no dot"),
            ("eva@shop..example", "not a host name"),
            ("eva@-shop.example", "not a host name"),
            ("e va@shop.example", "may hold letters"),
            ("eva..n@shop.example", "may hold letters"),
            ("Eva <eva@shop.example", "without a closing"),
            ("Eva, N <eva@shop.example>", "put it in quotes"),
            ("", "empty"),
            ("eva@shop.example\r\nBcc: x@y.example", "line break"),
        ] {
            let refused = parse_mailbox(text).expect_err(text);
            assert!(refused.contains(why), "{text:?}: {refused:?} says {why:?}");
        }
        let long = format!("{}@shop.example", "a".repeat(65));
        assert!(parse_mailbox(&long).is_err(), "a local part over 64 bytes");
    }

    #[test]
    fn lists_split_on_commas_outside_quotes_and_brackets() {
        let list = parse_mailboxes(
            r#"eva@shop.example, "Novak, Jan" <jan@shop.example>; it@firm.example,"#,
        )
        .expect("three addresses");
        let addresses: Vec<&str> = list.iter().map(|m| m.address.as_str()).collect();
        assert_eq!(
            addresses,
            ["eva@shop.example", "jan@shop.example", "it@firm.example"]
        );
        assert_eq!(list[1].name.as_deref(), Some("Novak, Jan"));
        assert!(parse_mailboxes(" , ").is_err(), "no address at all");
        let refused = parse_mailboxes("eva@shop.example, nobody").expect_err("one bad");
        assert!(
            refused.contains("\"nobody\""),
            "names the bad one: {refused}"
        );
    }

    #[test]
    fn the_step_input_is_read_and_each_bad_value_named() {
        let input = SendInput::read(&object(json!({
            "server": "desk", "to": ["eva@shop.example", "Jan <jan@shop.example>"],
            "cc": "it@firm.example", "subject": "Order 5001\r\n  shipped",
            "text": "Hello", "html": null
        })))
        .expect("reads");
        assert_eq!(input.to.len(), 2);
        assert_eq!(input.cc[0].address, "it@firm.example");
        assert_eq!(input.subject, "Order 5001 shipped", "one line");
        assert_eq!(input.text.as_deref(), Some("Hello"));
        assert_eq!(input.html, None);
        assert_eq!(input.recipients().count(), 3);

        for (given, why) in [
            (
                json!({"to": "a@b.example", "subject": "s", "text": "t"}),
                "input \"server\" is required",
            ),
            (
                json!({"server": "desk", "subject": "s", "text": "t"}),
                "input \"to\" is required",
            ),
            (
                json!({"server": "desk", "to": "not-an-address", "subject": "s", "text": "t"}),
                "input \"to\": \"not-an-address\" is not an e-mail address",
            ),
            (
                json!({"server": "desk", "to": ["a@b.example", 5], "subject": "s", "text": "t"}),
                "input \"to[1]\" must be an address",
            ),
            (
                json!({"server": "desk", "to": "a@b.example", "cc": {"x": 1}, "subject": "s", "text": "t"}),
                "input \"cc\" must be an address",
            ),
            (
                json!({"server": "desk", "to": "a@b.example", "text": "t"}),
                "input \"subject\" is required",
            ),
            (
                json!({"server": "desk", "to": "a@b.example", "subject": "s"}),
                "needs a body",
            ),
            (
                json!({"server": "desk", "to": "a@b.example", "subject": ["s"], "text": "t"}),
                "input \"subject\" must be text",
            ),
        ] {
            let refused = SendInput::read(&object(given.clone())).expect_err("refused");
            assert!(refused.contains(why), "{given}: {refused:?} says {why:?}");
        }
        let many: Vec<String> = (0..=MAX_RECIPIENTS)
            .map(|n| format!("r{n}@shop.example"))
            .collect();
        let refused = SendInput::read(&object(
            json!({"server": "desk", "to": many, "subject": "s", "text": "t"}),
        ))
        .expect_err("too many");
        assert!(refused.contains("at most 50"), "{refused}");
    }

    #[test]
    fn literal_problems_are_known_on_save_and_templates_wait_for_the_run() {
        let problems = literal_problems(&object(json!({
            "server": "desk", "to": "not-an-address", "cc": ["{{ticket.fields.email}}", "x"],
            "subject": "Order {{orderId}}", "text": "t"
        })));
        let keys: Vec<&str> = problems.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(keys, ["to", "cc[1]"], "{problems:?}");
        assert!(problems[0].1.contains("\"not-an-address\""), "{problems:?}");
        let fine = literal_problems(&object(json!({
            "server": "desk", "to": "{{customer.email}}", "subject": "s", "html": "<p>hi</p>"
        })));
        assert!(fine.is_empty(), "{fine:?}");
        let no_body = literal_problems(&object(
            json!({"server": "x y", "to": "a@b.example", "subject": "s"}),
        ));
        let keys: Vec<&str> = no_body.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(keys, ["server", "text"], "{no_body:?}");
    }

    #[test]
    fn the_message_id_is_stable_for_a_message_and_differs_for_another() {
        let sender = parse_mailbox("Desk <desk@firm.example>").expect("sender");
        let input = SendInput::read(&object(
            json!({"server": "desk", "to": "eva@shop.example", "subject": "Order 5001", "text": "Hi"}),
        ))
        .expect("reads");
        let run = "0190f3a4-7b2c-7d4e-8f00-123456789abc";
        let first = message_id(run, "notify", &input, &sender);
        assert_eq!(first, message_id(run, "notify", &input, &sender), "stable");
        assert!(
            first.starts_with(run) && first.ends_with("@firm.example"),
            "{first}"
        );
        let other = SendInput {
            subject: "Order 5002".into(),
            ..input.clone()
        };
        assert_ne!(
            first,
            message_id(run, "notify", &other, &sender),
            "another message"
        );
        assert_ne!(
            first,
            message_id(run, "remind", &input, &sender),
            "another step"
        );
        let unicode = parse_mailbox("desk@obchod.příklad").expect("sender");
        assert!(message_id(run, "notify", &input, &unicode).ends_with("@fronta.invalid"));
    }

    #[test]
    fn failures_are_classified_by_phase_and_reply() {
        use SmtpPhase::{AfterData, BeforeData};
        use SmtpTrouble::{ConnectionLost, Reply, TimedOut, Unreadable};
        let cases = [
            (BeforeData, Reply(421), Cause::SmtpReply(421), true),
            (BeforeData, Reply(451), Cause::SmtpReply(451), true),
            (BeforeData, Reply(550), Cause::SmtpReply(550), false),
            (BeforeData, Reply(535), Cause::SmtpReply(535), false),
            (BeforeData, TimedOut, Cause::TimeoutBeforeSend, true),
            (BeforeData, ConnectionLost, Cause::Connection, true),
            (BeforeData, Unreadable, Cause::BadAnswer, false),
            (BeforeData, Reply(250), Cause::BadAnswer, false),
            (AfterData, Reply(452), Cause::SmtpReply(452), true),
            (AfterData, Reply(554), Cause::SmtpReply(554), false),
            (AfterData, TimedOut, Cause::TimeoutAfterSend, false),
            (AfterData, ConnectionLost, Cause::BrokenAfterSend, false),
            (AfterData, Unreadable, Cause::BadAnswer, false),
        ];
        for (phase, trouble, cause, retried) in cases {
            let (found, words) = classify(phase, trouble);
            assert_eq!(found, cause, "{phase:?} {trouble:?}");
            assert_eq!(found.retryable(), retried, "{phase:?} {trouble:?} retried?");
            let says_may_have = words.contains("may have been sent");
            assert_eq!(
                says_may_have,
                matches!((phase, trouble), (AfterData, TimedOut | ConnectionLost)),
                "only a loss after the data says the message may have been sent: {words}"
            );
        }
    }

    #[test]
    fn secret_references_are_exactly_one_secret() {
        assert!(is_secret_reference("{{secrets.smtp}}"));
        assert!(!is_secret_reference("{{secrets.smtp}}x"));
        assert!(!is_secret_reference("{{secrets.a.b}}"));
        assert!(!is_secret_reference("{{ticket.id}}"));
        assert!(!is_secret_reference("hunter2"));
    }
}
