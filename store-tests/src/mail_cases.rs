//! The mail servers port (`fronta_automation::mail::MailServerStore`) call by call, as its
//! `# Contract` says: put creates or replaces whole, get and list answer exactly what was
//! put (list by name), delete removes and says `NotFound` when there is nothing, and
//! another tenant's server answers exactly like a missing one. Run in the automation
//! suite (`automation_conformance_suite!`).

use fronta_automation::mail::{MailSecurity, MailServer};
use fronta_automation::store::names;
use fronta_desk::{DeskError, TenantId};

use crate::AutomationStoreFactory;

fn mail_server(name: &str, host: &str) -> MailServer {
    MailServer {
        name: name.to_owned(),
        host: host.to_owned(),
        port: 587,
        security: MailSecurity::Starttls,
        user: Some("desk@firm.example".to_owned()),
        password: Some("{{secrets.smtp_password}}".to_owned()),
        from: "Service desk <desk@firm.example>".to_owned(),
    }
}

fn assert_mail_server_not_found<T: std::fmt::Debug>(result: Result<T, DeskError>, what: &str) {
    match result {
        Err(DeskError::NotFound(named)) => {
            assert_eq!(
                named,
                names::MAIL_SERVER,
                "{what}: NotFound names a mail server"
            )
        }
        other => panic!("{what}: expected NotFound, got {other:?}"),
    }
}

/// Put creates or replaces whole, get answers it exactly as given, list orders by name,
/// delete removes (and says when nothing).
pub async fn mail_servers_are_put_listed_read_replaced_and_deleted(
    factory: &dyn AutomationStoreFactory,
) {
    let (servers, desk) = factory.open_mail_servers().await;
    let (acme, _) = desk.tenant_create("Acme").await.expect("tenant");
    let acme = acme.id;
    let desk_server = mail_server("desk", "smtp.firm.example");
    assert_eq!(
        servers
            .mail_server_put(acme, desk_server.clone())
            .await
            .expect("put"),
        desk_server,
        "put answers the server"
    );
    let relay = MailServer {
        name: "billing".to_owned(),
        host: "192.0.2.25".to_owned(),
        port: 25,
        security: MailSecurity::None,
        user: None,
        password: None,
        from: "billing@firm.example".to_owned(),
    };
    servers
        .mail_server_put(acme, relay.clone())
        .await
        .expect("a second server");
    assert_eq!(
        servers.mail_server_get(acme, "desk").await.expect("get"),
        Some(desk_server.clone()),
        "exactly as given, the password a reference"
    );
    assert_eq!(
        servers.mail_server_list(acme).await.expect("list"),
        vec![relay.clone(), desk_server],
        "ordered by name, the optional fields kept absent"
    );
    let replaced = MailServer {
        security: MailSecurity::Tls,
        port: 465,
        ..mail_server("desk", "smtp2.firm.example")
    };
    servers
        .mail_server_put(acme, replaced.clone())
        .await
        .expect("put replaces");
    assert_eq!(
        servers.mail_server_get(acme, "desk").await.expect("get"),
        Some(replaced),
        "replaced whole"
    );
    servers
        .mail_server_delete(acme, "desk")
        .await
        .expect("delete");
    assert_eq!(
        servers.mail_server_get(acme, "desk").await.expect("get"),
        None,
        "deleted"
    );
    assert_mail_server_not_found(
        servers.mail_server_delete(acme, "desk").await,
        "deleting it again",
    );
    assert_eq!(
        servers.mail_server_list(acme).await.expect("list"),
        vec![relay],
        "the other one stays"
    );
}

/// Another tenant's mail server answers exactly like a missing one; a write for an
/// unknown tenant is `NotFound`.
pub async fn another_tenants_mail_server_answers_exactly_like_a_missing_one(
    factory: &dyn AutomationStoreFactory,
) {
    let (servers, desk) = factory.open_mail_servers().await;
    let (acme, _) = desk.tenant_create("Acme").await.expect("tenant");
    let (globex, _) = desk.tenant_create("Globex").await.expect("tenant");
    servers
        .mail_server_put(globex.id, mail_server("desk", "smtp.globex.example"))
        .await
        .expect("Globex's server");
    assert!(
        servers
            .mail_server_list(acme.id)
            .await
            .expect("list")
            .is_empty(),
        "Acme sees none"
    );
    assert_eq!(
        servers.mail_server_get(acme.id, "desk").await.expect("get"),
        None,
        "Acme cannot read it"
    );
    assert_mail_server_not_found(
        servers.mail_server_delete(acme.id, "desk").await,
        "Acme cannot delete it",
    );
    assert_eq!(
        servers
            .mail_server_get(globex.id, "desk")
            .await
            .expect("get"),
        Some(mail_server("desk", "smtp.globex.example")),
        "Globex still has it, unchanged"
    );
    match servers
        .mail_server_put(TenantId::new(), mail_server("desk", "smtp.x.example"))
        .await
    {
        Err(DeskError::NotFound(_)) => {}
        other => panic!("a write for an unknown tenant: expected NotFound, got {other:?}"),
    }
}
