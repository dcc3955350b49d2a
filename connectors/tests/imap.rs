//! `poll/mail` against a real IMAP server (Debian's dovecot, started by the test on a
//! free port, see `dovecot/mod.rs`): the first poll takes the messages received since
//! the automation was saved, the next only newer UIDs, an empty poll keeps the cursor,
//! the item limit leaves the rest for later, a UIDVALIDITY change starts over from the
//! last poll's time, nothing is marked seen, and a wrong password, an unknown folder or
//! a private address without the allow-list are named final errors. Mail is delivered
//! with IMAP APPEND.

mod dovecot;

use std::time::Duration;

use chrono::{DateTime, Utc};
use dovecot::{Dovecot, PASSWORD, USER};
use fronta_automation::Op;
use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::retry::Cause;
use fronta_automation::secrets::Revealed;
use fronta_connectors::{AddressPolicy, AllowList, MailConnector, MailLimits};
use fronta_desk::TenantId;
use futures_util::TryStreamExt;
use serde_json::{Map, Value, json};

fn connector(limits: MailLimits) -> MailConnector {
    MailConnector::new(
        AddressPolicy::new(AllowList::parse("127.0.0.1").expect("an allow-list")),
        limits,
    )
    .expect("a mail connector")
}

fn input(port: u16, cursor: Value, since: DateTime<Utc>, max_items: usize) -> Map<String, Value> {
    json!({
        "host": "127.0.0.1", "port": port, "tls": false, "user": USER, "password": PASSWORD,
        "folder": "INBOX", "cursor": cursor,
        "since": since.to_rfc3339(), "maxItems": max_items,
    })
    .as_object()
    .cloned()
    .expect("an object")
}

async fn poll(
    connector: &MailConnector,
    input: Map<String, Value>,
) -> Result<ConnectorReply, ConnectorFailure> {
    let secrets = Revealed::default();
    connector
        .call(ConnectorCall {
            op: &Op::PollMail,
            tenant: TenantId::default(),
            service: None,
            input,
            secrets: &secrets,
            run_id: "test-run",
            step_name: "poll",
        })
        .await
}

type Session = async_imap::Session<tokio::net::TcpStream>;

async fn session(port: u16) -> Session {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connects");
    let mut client = async_imap::Client::new(stream);
    client
        .read_response()
        .await
        .expect("greeting")
        .expect("a greeting");
    client
        .login(USER, PASSWORD)
        .await
        .map_err(|(err, _)| err)
        .expect("logs in")
}

/// Delivers a message with APPEND; `received` is its INTERNALDATE (`None`: now).
async fn deliver(port: u16, subject: &str, body: &str, received: Option<&str>) {
    let mut session = session(port).await;
    let raw = format!(
        "From: Eva Novak <eva@shop.test>\r\nTo: desk@firm.test\r\nSubject: {subject}\r\n\
         Date: Mon, 30 Nov 2026 10:00:00 +0000\r\nMessage-ID: <{subject}@shop.test>\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
    );
    session
        .append("INBOX", None, received, raw.as_bytes())
        .await
        .expect("APPEND");
    session.logout().await.expect("logout");
}

fn subjects(reply: &ConnectorReply) -> Vec<String> {
    reply.outputs["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| item["subject"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_poll_takes_new_messages_once_by_uid_and_marks_nothing() {
    let Some(server) = Dovecot::start() else {
        return;
    };
    let port = server.port;
    let mail = connector(MailLimits::default());
    // Saved an hour ago: a message of two days ago is older than the automation.
    let since = Utc::now() - chrono::Duration::hours(1);
    deliver(
        port,
        "old",
        "before the automation",
        Some("\"28-Nov-2026 10:00:00 +0000\""),
    )
    .await;
    deliver(port, "first", "Hello,\r\nplease ship 5001.", None).await;
    deliver(port, "second", "and 5002", None).await;

    let first = poll(&mail, input(port, Value::Null, since, 100))
        .await
        .expect("the first poll");
    assert_eq!(
        subjects(&first),
        vec!["first", "second"],
        "received since saved"
    );
    let item = &first.outputs["items"][0];
    assert_eq!(item["from"], json!("eva@shop.test"));
    assert_eq!(item["fromName"], json!("Eva Novak"));
    assert_eq!(item["to"], json!(["desk@firm.test"]));
    assert_eq!(item["messageId"], json!("first@shop.test"));
    assert_eq!(item["text"], json!("Hello,\r\nplease ship 5001.\r\n"));
    let cursor = first.outputs["cursor"].clone();
    assert_eq!(
        cursor["uid"], first.outputs["items"][1]["uid"],
        "the highest taken"
    );
    assert!(
        cursor["uidValidity"].as_u64().is_some_and(|v| v > 0),
        "{cursor}"
    );

    // Nothing new: the cursor stays exactly as it was.
    let empty = poll(&mail, input(port, cursor.clone(), since, 100))
        .await
        .expect("an empty poll");
    assert!(subjects(&empty).is_empty());
    assert_eq!(empty.outputs["cursor"], cursor, "unchanged");

    deliver(port, "third", "5003", None).await;
    deliver(port, "fourth", "5004", None).await;
    let limited = poll(&mail, input(port, cursor.clone(), since, 1))
        .await
        .expect("a limited poll");
    assert_eq!(subjects(&limited), vec!["third"], "one at a time");
    assert_eq!(limited.outputs["left"], json!(1));
    let next = poll(
        &mail,
        input(port, limited.outputs["cursor"].clone(), since, 100),
    )
    .await
    .expect("the next poll");
    assert_eq!(subjects(&next), vec!["fourth"], "only UIDs past the cursor");

    // The folder's UIDVALIDITY changed (simulated by a cursor of another one): start over
    // from the messages received since the cursor's time.
    let mut stale = next.outputs["cursor"].clone();
    stale["uidValidity"] = json!(stale["uidValidity"].as_u64().expect("a number") + 1);
    stale["at"] = json!("2026-11-29T00:00:00Z");
    let rebuilt = poll(&mail, input(port, stale, since, 100))
        .await
        .expect("a poll after a UIDVALIDITY change");
    assert_eq!(
        subjects(&rebuilt),
        vec!["first", "second", "third", "fourth"],
        "everything received since the last poll's time, not the older message"
    );
    assert_eq!(
        rebuilt.outputs["cursor"]["uidValidity"], cursor["uidValidity"],
        "the cursor takes the folder's UIDVALIDITY"
    );

    // Polling marked nothing: no message is \Seen.
    let mut check = session(port).await;
    check.examine("INBOX").await.expect("EXAMINE");
    let flags: Vec<String> = check
        .fetch("1:*", "FLAGS")
        .await
        .expect("FETCH")
        .map_ok(|fetch| format!("{:?}", fetch.flags().collect::<Vec<_>>()))
        .try_collect()
        .await
        .expect("flags");
    assert_eq!(flags.len(), 5, "every message is still there");
    assert!(
        flags.iter().all(|flags| !flags.contains("Seen")),
        "nothing was marked seen: {flags:?}"
    );
    check.logout().await.expect("logout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_poll_limits_text_and_names_final_errors() {
    let Some(server) = Dovecot::start() else {
        return;
    };
    let port = server.port;
    let since = Utc::now() - chrono::Duration::hours(1);
    deliver(port, "long", &"x".repeat(5000), None).await;
    let small = connector(MailLimits {
        text_bytes: 100,
        ..MailLimits::default()
    });
    let reply = poll(&small, input(port, Value::Null, since, 100))
        .await
        .expect("a poll");
    let item = &reply.outputs["items"][0];
    assert_eq!(
        item["text"].as_str().map(str::len),
        Some(100),
        "cut to text_bytes"
    );
    assert_eq!(item["textTruncated"], json!(true));

    let mut wrong = input(port, Value::Null, since, 100);
    wrong.insert("password".into(), json!("not-it"));
    let refused = poll(&small, wrong).await.expect_err("a wrong password");
    assert_eq!(refused.cause, Cause::BadInput, "final: {}", refused.message);
    assert!(
        refused.message.contains("refused the login of \"desk\""),
        "{}",
        refused.message
    );
    assert!(
        !refused.message.contains("not-it"),
        "the password is never said"
    );

    let mut folder = input(port, Value::Null, since, 100);
    folder.insert("folder".into(), json!("Orders"));
    let missing = poll(&small, folder).await.expect_err("no such folder");
    assert_eq!(missing.cause, Cause::BadInput);
    assert!(
        missing
            .message
            .starts_with("trigger.mailbox.folder: the IMAP server has no folder \"Orders\""),
        "{}",
        missing.message
    );

    let guarded = MailConnector::new(AddressPolicy::default(), MailLimits::default())
        .expect("a connector without the allow-list");
    let blocked = poll(&guarded, input(port, Value::Null, since, 100))
        .await
        .expect_err("loopback is private");
    assert_eq!(blocked.cause, Cause::BadInput);
    assert!(
        blocked.message.contains("127.0.0.1 is") && blocked.message.contains("FRONTA_HTTP_ALLOW"),
        "{}",
        blocked.message
    );

    // A server that is not there: retried.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        listener.local_addr().expect("an address").port()
    };
    let down = poll(&small, input(closed, Value::Null, since, 100))
        .await
        .expect_err("nothing listens");
    assert_eq!(down.cause, Cause::Connection, "{}", down.message);
    let _ = Duration::ZERO;
}
