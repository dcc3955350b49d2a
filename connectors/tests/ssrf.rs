//! The SSRF guard, encoding by encoding: every spelling of a forbidden address is refused
//! by the URL check, names are refused by name or by what they resolve to (a fixed
//! resolver stands in for DNS), and the connector refuses them before any connection.
//! Only loopback addresses ever reach the connector here, so a guard that failed would
//! still send nothing off this machine.

use std::net::IpAddr;
use std::sync::Arc;

use fronta_automation::Op;
use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::retry::Cause;
use fronta_automation::secrets::Revealed;
use fronta_connectors::ssrf::{FixedLookup, GuardedResolver, forbidden_reason};
use fronta_connectors::{AddressPolicy, AllowList, HttpConnector, HttpLimits};
use fronta_desk::TenantId;
use reqwest::dns::Resolve;
use serde_json::{Value, json};
use url::Url;

/// Every spelling of a forbidden literal address, and forbidden names.
const REFUSED_URLS: &[&str] = &[
    // Loopback, every encoding the URL parser knows.
    "http://127.0.0.1/",
    "http://127.1/",
    "http://127.0.1/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0x7f.0x0.0x0.0x1/",
    "http://0x7f.1/",
    "http://0177.0.0.1/",
    "http://017700000001/",
    "http://127.000.000.001/",
    "http://127.255.255.254/",
    "https://127.0.0.1:443/",
    "http://0/",
    "http://0.0.0.0/",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::127.0.0.1]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[2002:7f00:1::]/",
    // Cloud metadata.
    "http://169.254.169.254/latest/meta-data/",
    "http://2852039166/",
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[fd00:ec2::254]/",
    "http://168.63.129.16/",
    "http://100.100.100.200/",
    // Private, CGNAT, link-local, unique-local and the rest.
    "http://10.0.0.1/",
    "http://172.16.0.1/",
    "http://172.31.255.255/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",
    "http://169.254.1.1/",
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://[fe80::1]/",
    "http://[fec0::1]/",
    "http://255.255.255.255/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://192.0.0.170/",
    "http://198.18.0.1/",
    "http://240.0.0.1/",
    "http://[2001::1]/",
    "http://[2001:db8::1]/",
    // Names refused by name.
    "http://localhost/",
    "http://localhost./",
    "http://LOCALHOST:8080/",
    "http://api.localhost/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata.google.internal./",
    "http://metadata/",
    // Schemes other than http and https.
    "file:///etc/passwd",
    "gopher://127.0.0.1:70/",
    "ftp://example.com/",
];

#[test]
fn every_encoding_of_a_forbidden_address_is_refused_by_the_url_check() {
    assert!(REFUSED_URLS.len() >= 40, "at least 40 encodings");
    let policy = AddressPolicy::default();
    for text in REFUSED_URLS {
        let url = Url::parse(text).unwrap_or_else(|err| panic!("{text} parses: {err}"));
        let verdict = policy.check_url(&url);
        assert!(verdict.is_err(), "{text} (parsed as {url}) must be refused");
    }
}

#[test]
fn public_urls_pass_the_url_check() {
    let policy = AddressPolicy::default();
    for text in [
        "https://api.example.com/orders",
        "http://93.184.216.34/",
        "https://[2606:4700::1111]/",
        "http://8.8.8.8:8080/x",
    ] {
        let url = Url::parse(text).expect("parses");
        assert_eq!(policy.check_url(&url), Ok(()), "{text} may be requested");
    }
}

#[test]
fn the_allow_list_opens_exactly_what_it_names() {
    let policy =
        AddressPolicy::new(AllowList::parse("10.1.0.0/16, jira.internal").expect("parses"));
    let check = |text: &str| policy.check_url(&Url::parse(text).expect("parses"));
    assert_eq!(
        check("http://10.1.2.3/"),
        Ok(()),
        "inside the allowed network"
    );
    assert!(check("http://10.2.0.1/").is_err(), "outside it");
    assert!(
        check("http://169.254.169.254/").is_err(),
        "metadata stays refused"
    );
    assert_eq!(
        policy.check_resolved("jira.internal", &["10.9.9.9".parse().expect("ip")]),
        Ok(()),
        "an allowed host may resolve to a private address"
    );
}

#[test]
fn forbidden_reasons_name_the_range() {
    let reason = |ip: &str| forbidden_reason(ip.parse::<IpAddr>().expect("ip"));
    assert_eq!(
        reason("100.64.0.1"),
        Some("a carrier-grade NAT address (100.64.0.0/10)"),
        "CGNAT"
    );
    assert_eq!(
        reason("169.254.169.254"),
        Some("the cloud metadata address"),
        "metadata"
    );
    assert_eq!(
        reason("fe80::1"),
        Some("a link-local address (fe80::/10)"),
        "link-local v6"
    );
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter()
        .map(|ip| ip.parse().expect("an address"))
        .collect()
}

fn fake_dns() -> FixedLookup {
    FixedLookup::new()
        .with("loopback.test", &ips(&["127.0.0.1"]))
        .with("loopback2.test", &ips(&["127.0.0.2"]))
        .with("v6loop.test", &ips(&["::1"]))
        .with("mapped.test", &ips(&["::ffff:127.0.0.1"]))
        .with("rebind.test", &ips(&["93.184.216.34", "127.0.0.1"]))
        .with("meta.test", &ips(&["169.254.169.254"]))
        .with("private.test", &ips(&["10.1.2.3"]))
        .with("cgnat.test", &ips(&["100.64.1.1"]))
        .with("ula.test", &ips(&["fd00::5"]))
        .with("metadata.google.internal", &ips(&["169.254.169.254"]))
        .with("public.test", &ips(&["93.184.216.34"]))
}

#[tokio::test]
async fn names_resolving_to_forbidden_addresses_are_refused_by_the_resolver() {
    let resolver = GuardedResolver {
        policy: Arc::new(AddressPolicy::default()),
        lookup: Arc::new(fake_dns()),
    };
    for name in [
        "loopback.test",
        "v6loop.test",
        "mapped.test",
        "rebind.test",
        "meta.test",
        "private.test",
        "cgnat.test",
        "ula.test",
        "metadata.google.internal",
        "localhost",
    ] {
        let answer = resolver.resolve(name.parse().expect("a name")).await;
        let err = match answer {
            Ok(addresses) => panic!(
                "{name} must be refused, got {:?}",
                addresses.collect::<Vec<_>>()
            ),
            Err(err) => err,
        };
        assert!(
            err.downcast_ref::<fronta_connectors::ssrf::Refused>()
                .is_some(),
            "{name} is refused by the guard, not failed: {err}"
        );
    }
    let public: Vec<_> = resolver
        .resolve("public.test".parse().expect("a name"))
        .await
        .expect("a public name resolves")
        .map(|address| address.ip())
        .collect();
    assert_eq!(
        public,
        ips(&["93.184.216.34"]),
        "exactly the checked addresses are handed on"
    );
}

fn connector(allow: &str) -> HttpConnector {
    HttpConnector::with_lookup(
        AddressPolicy::new(AllowList::parse(allow).expect("allow-list")),
        HttpLimits::default(),
        Arc::new(fake_dns()),
    )
    .expect("a connector")
}

async fn request(
    connector: &HttpConnector,
    input: Value,
) -> Result<ConnectorReply, ConnectorFailure> {
    let Value::Object(input) = input else {
        panic!("an object")
    };
    let secrets = Revealed::default();
    connector
        .call(ConnectorCall {
            op: &Op::HttpRequest,
            tenant: TenantId::new(),
            service: Some("test"),
            input,
            secrets: &secrets,
            run_id: "run",
            step_name: "call",
        })
        .await
}

#[tokio::test]
async fn the_connector_refuses_loopback_in_every_form_as_bad_input() {
    let connector = connector("");
    for url in [
        "http://127.0.0.1:9/",
        "http://2130706433:9/",
        "http://0x7f.1:9/",
        "http://0177.0.0.1:9/",
        "http://[::1]:9/",
        "http://[::ffff:7f00:1]:9/",
        "http://localhost:9/",
        "http://localhost.:9/",
        "http://loopback.test:9/",
        "http://v6loop.test:9/",
        "http://mapped.test:9/",
    ] {
        let failure = request(&connector, json!({"url": url}))
            .await
            .expect_err(&format!("{url} must be refused"));
        assert_eq!(
            failure.cause,
            Cause::BadInput,
            "{url}: a refusal is bad input, not retried: {}",
            failure.message
        );
        assert!(
            failure.message.contains("refused"),
            "{url}: the message says refused: {}",
            failure.message
        );
    }
}

mod redirects {
    use super::*;
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    #[tokio::test]
    async fn a_redirect_from_an_allowed_server_to_a_forbidden_address_is_refused() {
        let server = MockServer::start().await;
        let port = server.address().port();
        let targets = [
            format!("http://127.0.0.2:{port}/secret"),
            format!("http://[::1]:{port}/secret"),
            format!("http://localhost:{port}/secret"),
            format!("http://loopback2.test:{port}/secret"),
            format!("http://[::ffff:127.0.0.2]:{port}/secret"),
        ];
        for (index, target) in targets.iter().enumerate() {
            Mock::given(method("GET"))
                .and(path(format!("/hop{index}")))
                .respond_with(ResponseTemplate::new(302).insert_header("location", target.as_str()))
                .mount(&server)
                .await;
        }
        Mock::given(path("/secret"))
            .respond_with(ResponseTemplate::new(200).set_body_string("inside"))
            .expect(0)
            .mount(&server)
            .await;
        // Only the wiremock address itself is allowed, not the loopback range.
        let connector = connector("127.0.0.1");
        for (index, target) in targets.iter().enumerate() {
            let failure = request(
                &connector,
                json!({"url": format!("{}/hop{index}", server.uri())}),
            )
            .await
            .expect_err(&format!("the hop to {target} must be refused"));
            assert_eq!(
                failure.cause,
                Cause::BadInput,
                "{target}: refused, not retried: {}",
                failure.message
            );
            assert!(
                failure.message.contains("redirect"),
                "{target}: the message names the redirect: {}",
                failure.message
            );
        }
        // `expect(0)` on /secret is verified when the server drops.
    }

    #[tokio::test]
    async fn a_redirect_to_an_allowed_address_is_followed() {
        let server = MockServer::start().await;
        Mock::given(path("/from"))
            .respond_with(ResponseTemplate::new(301).insert_header("location", "/to"))
            .mount(&server)
            .await;
        Mock::given(path("/to"))
            .respond_with(ResponseTemplate::new(200).set_body_string("arrived"))
            .mount(&server)
            .await;
        let reply = request(
            &connector("127.0.0.1"),
            json!({"url": format!("{}/from", server.uri())}),
        )
        .await
        .expect("the same-server hop is followed");
        assert_eq!(reply.outputs["body"], json!("arrived"), "the final answer");
    }
}
