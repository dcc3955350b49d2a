//! `mail/send` against a real SMTP server (aiosmtpd, started by the test on a free port,
//! see `smtp_server/mod.rs`): a message arrives with its subject, bodies, recipients and
//! Message-ID; STARTTLS and implicit TLS log in with the password from a tenant secret
//! and check the certificate against the server's *name* while connecting to the address
//! the guard approved; a refused recipient (5xx) and a refused login are final, a
//! temporary refusal (4xx) is retried and goes through once accepted, a timeout before
//! the data is retried, one after the data (or a connection dropped there) is final and
//! says the message may have been sent; nothing listening is a retried connection failure; a private host without the
//! allow-list, an untrusted certificate, a `to` that is not an address and a server that
//! does not offer the STARTTLS it is configured for are final errors naming what is wrong.

mod smtp_server;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fronta_automation::Op;
use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::mail::{MailSecurity, MailServer, MailServerStore};
use fronta_automation::retry::Cause;
use fronta_automation::secrets::{
    Revealed, SealedSecret, SecretCipher, SecretInfo, SecretStore, SecretVault,
};
use fronta_automation::store::StoreResult;
use fronta_connectors::ssrf::FixedLookup;
use fronta_connectors::{AddressPolicy, AllowList, Keyring, SmtpConnector, SmtpLimits};
use fronta_desk::{DeskError, TenantId};
use serde_json::{Value, json};
use smtp_server::{Options, SmtpServer, TLS_NAME, ca_pem, header};

const USER: &str = "desk@firm.example";
const PASSWORD: &str = "s3cret-smtp-pw";

/// The mail servers of each tenant, in memory.
#[derive(Default)]
struct Servers(Mutex<HashMap<(TenantId, String), MailServer>>);

#[async_trait]
impl MailServerStore for Servers {
    async fn mail_server_put(
        &self,
        tenant: TenantId,
        server: MailServer,
    ) -> StoreResult<MailServer> {
        let mut servers = self.0.lock().expect("lock");
        servers.insert((tenant, server.name.clone()), server.clone());
        Ok(server)
    }
    async fn mail_server_get(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> StoreResult<Option<MailServer>> {
        let servers = self.0.lock().expect("lock");
        Ok(servers.get(&(tenant, name.to_owned())).cloned())
    }
    async fn mail_server_list(&self, tenant: TenantId) -> StoreResult<Vec<MailServer>> {
        let servers = self.0.lock().expect("lock");
        let mut list: Vec<MailServer> = servers
            .iter()
            .filter(|((owner, _), _)| *owner == tenant)
            .map(|(_, server)| server.clone())
            .collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(list)
    }
    async fn mail_server_delete(&self, tenant: TenantId, name: &str) -> StoreResult<()> {
        let mut servers = self.0.lock().expect("lock");
        servers
            .remove(&(tenant, name.to_owned()))
            .map(|_| ())
            .ok_or(DeskError::NotFound("mail server"))
    }
}

/// Sealed secrets in memory.
#[derive(Default)]
struct Secrets(Mutex<HashMap<(TenantId, String), SealedSecret>>);

#[async_trait]
impl SecretStore for Secrets {
    async fn secret_put(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: SealedSecret,
    ) -> StoreResult<SecretInfo> {
        let version = sealed.key_version;
        self.0
            .lock()
            .expect("lock")
            .insert((tenant, name.to_owned()), sealed);
        Ok(SecretInfo {
            name: name.to_owned(),
            key_version: version,
            updated_at: chrono::Utc::now(),
        })
    }
    async fn secret_list(&self, _tenant: TenantId) -> StoreResult<Vec<SecretInfo>> {
        Ok(Vec::new())
    }
    async fn secrets_get(
        &self,
        tenant: TenantId,
        names: &[String],
    ) -> StoreResult<Vec<(String, SealedSecret)>> {
        let secrets = self.0.lock().expect("lock");
        Ok(names
            .iter()
            .filter_map(|name| {
                secrets
                    .get(&(tenant, name.clone()))
                    .map(|sealed| (name.clone(), sealed.clone()))
            })
            .collect())
    }
    async fn secrets_page(
        &self,
        _after: Option<(TenantId, String)>,
        _limit: u32,
    ) -> StoreResult<Vec<fronta_automation::secrets::StoredSecret>> {
        Ok(Vec::new())
    }
    async fn secret_reseal(
        &self,
        _tenant: TenantId,
        _name: &str,
        _from: &SealedSecret,
        _to: SealedSecret,
    ) -> StoreResult<bool> {
        Ok(false)
    }
    async fn secret_delete(&self, _tenant: TenantId, _name: &str) -> StoreResult<()> {
        Ok(())
    }
}

struct Setup {
    connector: SmtpConnector,
    servers: Arc<Servers>,
    tenant: TenantId,
}

/// How the connector is built: the allow-list, the time limits, whether the test CA is
/// trusted, and where `mail.test` and `other.test` point (127.0.0.1).
struct Build {
    allow: &'static str,
    limits: SmtpLimits,
    trust_test_ca: bool,
}

impl Default for Build {
    fn default() -> Self {
        Self {
            allow: "127.0.0.1",
            limits: SmtpLimits::default(),
            trust_test_ca: true,
        }
    }
}

async fn setup_with(build: Build) -> Setup {
    let servers = Arc::new(Servers::default());
    let secrets = Arc::new(Secrets::default());
    let cipher: Arc<dyn SecretCipher> = Arc::new(Keyring::new(1, [7; 32]));
    let tenant = TenantId::new();
    let sealed = cipher
        .seal(tenant, "smtp_password", PASSWORD)
        .expect("sealed");
    secrets
        .secret_put(tenant, "smtp_password", sealed)
        .await
        .expect("stored");
    let vault = SecretVault {
        store: secrets,
        cipher: Some(cipher),
    };
    let loopback: IpAddr = "127.0.0.1".parse().expect("an address");
    let lookup = FixedLookup::new()
        .with(TLS_NAME, &[loopback])
        .with("other.test", &[loopback]);
    let mut connector = SmtpConnector::with_lookup(
        servers.clone(),
        Some(vault),
        AddressPolicy::new(AllowList::parse(build.allow).expect("an allow-list")),
        build.limits,
        Arc::new(lookup),
    )
    .expect("a connector");
    if build.trust_test_ca {
        connector = connector.trusting(&ca_pem()).expect("the test CA");
    }
    Setup {
        connector,
        servers,
        tenant,
    }
}

async fn setup() -> Setup {
    setup_with(Build::default()).await
}

/// A plain server on 127.0.0.1 without a login.
fn plain(port: u16) -> MailServer {
    MailServer {
        name: "desk".to_owned(),
        host: "127.0.0.1".to_owned(),
        port,
        security: MailSecurity::None,
        user: None,
        password: None,
        from: "Service desk <desk@firm.example>".to_owned(),
    }
}

/// `mail.test` with a login whose password is the tenant's secret.
fn protected(port: u16, security: MailSecurity) -> MailServer {
    MailServer {
        host: TLS_NAME.to_owned(),
        security,
        user: Some(USER.to_owned()),
        password: Some("{{secrets.smtp_password}}".to_owned()),
        ..plain(port)
    }
}

impl Setup {
    async fn add(&self, server: MailServer) {
        self.servers
            .mail_server_put(self.tenant, server)
            .await
            .expect("stored");
    }

    async fn send(&self, input: Value) -> Result<ConnectorReply, ConnectorFailure> {
        let Value::Object(input) = input else {
            panic!("an object")
        };
        self.connector
            .call(ConnectorCall {
                op: &Op::MailSend,
                tenant: self.tenant,
                service: Some("mail"),
                input,
                secrets: &Revealed::default(),
                run_id: "0190f3a4-7b2c-7d4e-8f00-123456789abc",
                step_name: "notify",
            })
            .await
    }

    async fn failure(&self, input: Value) -> ConnectorFailure {
        match self.send(input).await {
            Ok(reply) => panic!("expected a failure, got {reply:?}"),
            Err(failure) => failure,
        }
    }
}

fn order(to: &str) -> Value {
    json!({"server": "desk", "to": to, "subject": "Order 5001 shipped", "text": "Your order is on its way."})
}

#[tokio::test]
async fn a_message_arrives_with_its_subject_bodies_recipients_and_message_id() {
    let Some(smtp) = SmtpServer::start(Options::default()) else {
        return;
    };
    let setup = setup().await;
    setup.add(plain(smtp.port)).await;
    let reply = setup
        .send(json!({"server": "desk",
            "to": ["Eva Novak <eva@shop.example>", "jan@shop.example"], "cc": "it@firm.example",
            "subject": "Objednávka 5001 odeslána", "text": "Dobrý den,\nbalík je na cestě.",
            "html": "<p>Dobrý den, balík je na cestě.</p>"}))
        .await
        .expect("sent");
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1, "one message arrived: {messages:?}");
    let message = &messages[0];
    assert_eq!(
        message["mailFrom"], "desk@firm.example",
        "the envelope sender"
    );
    assert_eq!(
        message["rcptTos"],
        json!(["eva@shop.example", "jan@shop.example", "it@firm.example"]),
        "to and cc are the envelope's recipients"
    );
    let data = message["data"].as_str().expect("the data");
    let parsed = mail_parser::MessageParser::default()
        .parse(data.as_bytes())
        .expect("the message parses");
    assert_eq!(parsed.subject(), Some("Objednávka 5001 odeslána"));
    assert_eq!(
        parsed.body_text(0).as_deref(),
        Some("Dobrý den,\r\nbalík je na cestě."),
        "the text as sent: lines end in CRLF on the wire"
    );
    assert_eq!(
        parsed.body_html(0).as_deref(),
        Some("<p>Dobrý den, balík je na cestě.</p>")
    );
    let message_id = reply.outputs["messageId"].as_str().expect("messageId");
    assert_eq!(
        parsed.message_id(),
        Some(message_id),
        "the output is the header sent"
    );
    assert!(message_id.ends_with("@firm.example"), "{message_id}");
    assert_eq!(reply.outputs["reply"], "250 2.0.0 Ok: queued as 1");
    assert_eq!(reply.outputs["from"], "desk@firm.example");
    assert_eq!(
        reply.outputs["to"],
        json!(["eva@shop.example", "jan@shop.example"])
    );
    assert_eq!(reply.outputs["cc"], json!(["it@firm.example"]));
    assert_eq!(
        reply.message,
        format!(
            "sent \"Objednávka 5001 odeslána\" from desk@firm.example to eva@shop.example, \
             jan@shop.example (cc it@firm.example) through mail server \"desk\" \
             (127.0.0.1:{}): 250 2.0.0 Ok: queued as 1",
            smtp.port
        ),
        "the step log says what went to whom"
    );
    assert_eq!(
        header(message, "From").as_deref(),
        Some("\"Service desk\" <desk@firm.example>")
    );
}

#[tokio::test]
async fn starttls_logs_in_with_the_secret_password_and_checks_the_certificate_by_name() {
    let Some(smtp) = SmtpServer::start(Options {
        security: "starttls",
        login: Some((USER, PASSWORD)),
        ..Options::default()
    }) else {
        return;
    };
    let setup = setup().await;
    setup
        .add(protected(smtp.port, MailSecurity::Starttls))
        .await;
    let reply = setup
        .send(order("eva@shop.example"))
        .await
        .expect("sent over STARTTLS after a login");
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(
        messages[0]["login"], USER,
        "the server took the login with the secret's password"
    );
    assert!(
        !reply.message.contains(PASSWORD)
            && !reply
                .outputs
                .values()
                .any(|v| v.to_string().contains(PASSWORD)),
        "the password is nowhere in the answer"
    );
}

#[tokio::test]
async fn implicit_tls_logs_in_too() {
    let Some(smtp) = SmtpServer::start(Options {
        security: "tls",
        login: Some((USER, PASSWORD)),
        ..Options::default()
    }) else {
        return;
    };
    let setup = setup().await;
    setup.add(protected(smtp.port, MailSecurity::Tls)).await;
    setup
        .send(order("eva@shop.example"))
        .await
        .expect("sent over implicit TLS after a login");
    assert_eq!(smtp.messages()[0]["login"], USER);
}

#[tokio::test]
async fn a_certificate_of_an_unknown_ca_or_for_another_name_is_final() {
    let Some(smtp) = SmtpServer::start(Options {
        security: "tls",
        login: Some((USER, PASSWORD)),
        ..Options::default()
    }) else {
        return;
    };
    let untrusting = setup_with(Build {
        trust_test_ca: false,
        ..Build::default()
    })
    .await;
    untrusting
        .add(protected(smtp.port, MailSecurity::Tls))
        .await;
    let unknown = untrusting.failure(order("eva@shop.example")).await;
    assert_eq!(unknown.cause, Cause::BadInput, "{}", unknown.message);
    assert!(
        unknown.message.contains("certificate") && unknown.message.contains("not tried again"),
        "{}",
        unknown.message
    );

    let setup = setup().await;
    setup
        .add(MailServer {
            host: "other.test".to_owned(),
            ..protected(smtp.port, MailSecurity::Tls)
        })
        .await;
    let other_name = setup.failure(order("eva@shop.example")).await;
    assert_eq!(other_name.cause, Cause::BadInput, "{}", other_name.message);
    assert!(
        other_name.message.contains("certificate"),
        "the certificate is for mail.test, not other.test: {}",
        other_name.message
    );
    assert!(smtp.messages().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_wrong_password_is_a_final_refusal_that_shows_no_password() {
    let Some(smtp) = SmtpServer::start(Options {
        security: "starttls",
        login: Some((USER, "another-password")),
        ..Options::default()
    }) else {
        return;
    };
    let setup = setup().await;
    setup
        .add(protected(smtp.port, MailSecurity::Starttls))
        .await;
    let refused = setup.failure(order("eva@shop.example")).await;
    assert_eq!(refused.cause, Cause::SmtpReply(535), "{}", refused.message);
    assert!(!refused.cause.retryable(), "a refused login is final");
    assert!(
        refused
            .message
            .contains("the login of \"desk@firm.example\"")
            && refused
                .message
                .contains("check the user and the password secret"),
        "{}",
        refused.message
    );
    assert!(!refused.message.contains(PASSWORD), "{}", refused.message);
}

#[tokio::test]
async fn a_refused_recipient_is_final_and_nothing_is_sent() {
    let Some(smtp) = SmtpServer::start(Options {
        rules: json!({"nobody@shop.example": {"reply": "550 5.1.1 <nobody@shop.example>: no such user"}}),
        ..Options::default()
    }) else {
        return;
    };
    let setup = setup().await;
    setup.add(plain(smtp.port)).await;
    let refused = setup
        .failure(order("eva@shop.example, nobody@shop.example"))
        .await;
    assert_eq!(refused.cause, Cause::SmtpReply(550), "{}", refused.message);
    assert!(!refused.cause.retryable(), "a 5xx is final");
    assert!(
        refused.message.contains(
            "RCPT TO <nobody@shop.example>: 550 5.1.1 <nobody@shop.example>: no such user"
        ) && refused.message.contains("permanent refusal"),
        "the refusal names the recipient and the reply: {}",
        refused.message
    );
    assert!(smtp.messages().is_empty(), "no message went out");
}

#[tokio::test]
async fn a_temporary_refusal_is_retried_and_the_next_attempt_goes_through() {
    let Some(smtp) = SmtpServer::start(Options {
        rules: json!({"busy@shop.example": {"reply": "451 4.3.0 mailbox busy, try later", "times": 1}}),
        ..Options::default()
    }) else {
        return;
    };
    let setup = setup().await;
    setup.add(plain(smtp.port)).await;
    let first = setup.failure(order("busy@shop.example")).await;
    assert_eq!(first.cause, Cause::SmtpReply(451), "{}", first.message);
    assert!(first.cause.retryable(), "a 4xx is retried");
    assert!(
        first.message.contains("tried again later"),
        "{}",
        first.message
    );
    assert!(smtp.messages().is_empty(), "the first attempt sent nothing");
    setup
        .send(order("busy@shop.example"))
        .await
        .expect("the retry goes through");
    assert_eq!(smtp.messages().len(), 1, "exactly one message arrived");
}

#[tokio::test]
async fn a_timeout_before_the_data_is_retried() {
    let Some(smtp) = SmtpServer::start(Options {
        rules: json!({"slow@shop.example": {"hang": "rcpt"}}),
        ..Options::default()
    }) else {
        return;
    };
    let setup = setup_with(Build {
        limits: SmtpLimits {
            timeout: Duration::from_secs(1),
            ..SmtpLimits::default()
        },
        ..Build::default()
    })
    .await;
    setup.add(plain(smtp.port)).await;
    let failed = setup.failure(order("slow@shop.example")).await;
    assert_eq!(failed.cause, Cause::TimeoutBeforeSend, "{}", failed.message);
    assert!(failed.cause.retryable());
    assert!(
        failed.message.contains("FRONTA_SMTP_TIMEOUT")
            && failed.message.contains("RCPT TO <slow@shop.example>")
            && failed.message.contains("nothing of the message was sent"),
        "{}",
        failed.message
    );
}

#[tokio::test]
async fn a_timeout_after_the_data_is_final_and_says_it_may_have_been_sent() {
    let Some(smtp) = SmtpServer::start(Options {
        rules: json!({"sink@shop.example": {"hang": "data"}}),
        ..Options::default()
    }) else {
        return;
    };
    let setup = setup_with(Build {
        limits: SmtpLimits {
            data_timeout: Duration::from_secs(1),
            ..SmtpLimits::default()
        },
        ..Build::default()
    })
    .await;
    setup.add(plain(smtp.port)).await;
    let failed = setup.failure(order("sink@shop.example")).await;
    assert_eq!(failed.cause, Cause::TimeoutAfterSend, "{}", failed.message);
    assert!(!failed.cause.retryable(), "it may have been sent: final");
    assert!(
        failed.message.contains("may have been sent")
            && failed.message.contains("FRONTA_SMTP_DATA_TIMEOUT"),
        "{}",
        failed.message
    );
}

#[tokio::test]
async fn a_connection_lost_after_the_data_is_final_and_says_it_may_have_been_sent() {
    let Some(smtp) = SmtpServer::start(Options {
        rules: json!({"flaky@shop.example": {"close": "data"}}),
        ..Options::default()
    }) else {
        return;
    };
    let setup = setup().await;
    setup.add(plain(smtp.port)).await;
    let failed = setup.failure(order("flaky@shop.example")).await;
    assert_eq!(failed.cause, Cause::BrokenAfterSend, "{}", failed.message);
    assert!(!failed.cause.retryable(), "it may have been sent: final");
    assert!(
        failed.message.contains("may have been sent"),
        "{}",
        failed.message
    );
}

#[tokio::test]
async fn nothing_listening_is_a_retried_connection_failure() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port");
    let setup = setup().await;
    setup.add(plain(port)).await;
    let failed = setup.failure(order("eva@shop.example")).await;
    assert_eq!(failed.cause, Cause::Connection, "{}", failed.message);
    assert!(failed.cause.retryable());
    assert!(
        failed.message.contains("nothing of the message was sent"),
        "{}",
        failed.message
    );
}

#[tokio::test]
async fn a_private_host_without_the_allow_list_is_refused_before_connecting() {
    let Some(smtp) = SmtpServer::start(Options::default()) else {
        return;
    };
    let setup = setup_with(Build {
        allow: "",
        ..Build::default()
    })
    .await;
    setup.add(plain(smtp.port)).await;
    let refused = setup.failure(order("eva@shop.example")).await;
    assert_eq!(refused.cause, Cause::BadInput, "{}", refused.message);
    assert!(
        refused.message.contains("loopback") && refused.message.contains("FRONTA_HTTP_ALLOW"),
        "{}",
        refused.message
    );
    setup
        .add(MailServer {
            host: TLS_NAME.to_owned(),
            ..plain(smtp.port)
        })
        .await;
    let resolved = setup.failure(order("eva@shop.example")).await;
    assert_eq!(resolved.cause, Cause::BadInput, "{}", resolved.message);
    assert!(
        resolved.message.contains("resolves to 127.0.0.1"),
        "a name is judged by its addresses: {}",
        resolved.message
    );
    assert!(smtp.messages().is_empty());
}

#[tokio::test]
async fn bad_input_and_missing_configuration_are_final_and_named() {
    let Some(smtp) = SmtpServer::start(Options::default()) else {
        return;
    };
    let setup = setup().await;
    setup.add(plain(smtp.port)).await;
    let not_an_address = setup.failure(order("not-an-address")).await;
    assert_eq!(not_an_address.cause, Cause::BadInput);
    assert!(
        not_an_address
            .message
            .contains("input \"to\": \"not-an-address\" is not an e-mail address"),
        "{}",
        not_an_address.message
    );
    let unknown = setup
        .failure(json!({"server": "billing", "to": "a@b.example", "subject": "s", "text": "t"}))
        .await;
    assert_eq!(unknown.cause, Cause::BadInput);
    assert!(
        unknown
            .message
            .contains("mail server \"billing\" is not configured"),
        "{}",
        unknown.message
    );
    // The server speaks plain text only: "starttls" must not fall back to it.
    setup
        .add(MailServer {
            security: MailSecurity::Starttls,
            ..plain(smtp.port)
        })
        .await;
    let no_starttls = setup.failure(order("eva@shop.example")).await;
    assert_eq!(
        no_starttls.cause,
        Cause::BadInput,
        "{}",
        no_starttls.message
    );
    assert!(
        no_starttls.message.contains("does not offer STARTTLS"),
        "{}",
        no_starttls.message
    );
    assert!(smtp.messages().is_empty(), "nothing was sent");
}
