//! Rotation of what leaks (issue 25, part 2), through the real `fronta serve` binary on
//! SQLite and on a fresh Postgres database, over real HTTP:
//!
//! 1. a webhook URL rotated with `graceSec: 2`: old and new both 202; after the grace the
//!    old one 404 like an unknown token, the new one 202; rotated again with grace 0: the
//!    old one 404 at once. Bad graces (negative, over 7 days) are 400s naming `graceSec`;
//!    a manual automation has no URL to rotate (409).
//! 2. a signing secret rotated with `overlapSec: 2`: requests signed with the old secret,
//!    the new one, or both verify during the overlap; after it only the new one does.
//! 3. `fronta secrets reseal` while the server runs: every secret sealed with key 1 is
//!    sealed again with key 2 (in batches, with a count), a second run does nothing more,
//!    and afterwards every secret opens with key 2 alone (the old key dropped).
//!
//! The waits for a grace to end are sleeps past its `expiresAt`, which is what they test.

mod support;

use std::time::Duration;

use fronta_automation::secrets::SecretCipher;
use serde_json::{Value, json};

const ADMIN: &str = "fa_rotation_admin";
/// Base64 of 32 bytes each: the old key (version 1) and the new one (version 2).
const KEY_1: &str = "MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE=";
const KEY_2: &str = "MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjI=";
const GRACE: Duration = Duration::from_secs(2);

type Server = support::ApiServer;

/// The path of a webhook URL (`/webhook/<token>`).
fn path_of(url: &str) -> String {
    let at = url
        .find("/webhook/")
        .unwrap_or_else(|| panic!("a webhook URL: {url}"));
    url[at..].to_owned()
}

/// `POST` a webhook with `headers`: the status.
fn post_webhook(server: &Server, path: &str, headers: &[(&str, String)]) -> u16 {
    let (address, path) = (server.address.clone(), path.to_owned());
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(name, value)| ((*name).to_owned(), value.clone()))
        .collect();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let client = support::http_client(0, Duration::from_secs(30));
            let mut request = client
                .post(format!("http://{address}{path}"))
                .header("content-type", "application/json")
                .body("{}");
            for (name, value) in headers {
                request = request.header(name, value);
            }
            request.send().await.expect("an answer").status().as_u16()
        })
    })
    .join()
    .expect("the call ran")
}

fn post(server: &Server, path: &str) -> u16 {
    post_webhook(server, path, &[])
}

/// The three Standard Webhooks headers of `{}` signed with each of `secrets`.
fn signed(secrets: &[&str]) -> Vec<(&'static str, String)> {
    let id = format!("msg_{}", uuid::Uuid::now_v7().simple());
    let now = chrono::Utc::now().timestamp();
    let signatures: Vec<String> = secrets
        .iter()
        .map(|secret| {
            fronta_server::signature::sign(secret, &id, now, b"{}").expect("a usable secret")
        })
        .collect();
    vec![
        ("webhook-id", id),
        ("webhook-timestamp", now.to_string()),
        ("webhook-signature", signatures.join(" ")),
    ]
}

fn rotate(server: &Server, token: &str, id: &str, body: Value) -> Value {
    server.ok(
        "POST",
        &format!("/api/automations/{id}/rotate-webhook"),
        token,
        Some(body),
    )
}

/// Repro 1: the webhook URL.
fn webhook_url_rotation(server: &Server) {
    let token = server.tenant("Hooks");
    let created = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(
            json!({"name": "Orders", "trigger": {"type": "webhook", "params": []},
                    "steps": [{"name": "n", "op": "flow/log", "input": {"message": "hi"}}]}),
        ),
    );
    let id = created["id"].as_str().expect("an id").to_owned();
    let first = created["webhookUrl"].as_str().expect("a URL").to_owned();
    assert_eq!(post(server, &path_of(&first)), 202, "the URL works");

    let rotated = rotate(server, &token, &id, json!({"graceSec": 2}));
    let second = rotated["webhookUrl"]
        .as_str()
        .expect("a new URL")
        .to_owned();
    assert_ne!(second, first, "a new URL");
    assert_eq!(
        rotated["previousWebhooks"][0]["url"].as_str(),
        Some(first.as_str()),
        "the old URL is listed: {rotated}"
    );
    assert!(
        rotated["previousWebhooks"][0]["expiresAt"].is_string(),
        "with its end: {rotated}"
    );
    let read = server.ok("GET", &format!("/api/automations/{id}"), &token, None);
    assert_eq!(
        read["previousWebhooks"], rotated["previousWebhooks"],
        "a read lists it too"
    );
    assert_eq!(
        post(server, &path_of(&first)),
        202,
        "the old URL in its grace"
    );
    assert_eq!(post(server, &path_of(&second)), 202, "the new URL");

    std::thread::sleep(GRACE + Duration::from_millis(300));
    assert_eq!(post(server, &path_of(&first)), 404, "the grace is over");
    assert_eq!(post(server, &path_of(&second)), 202, "the new URL stays");
    let read = server.ok("GET", &format!("/api/automations/{id}"), &token, None);
    assert!(
        read.get("previousWebhooks").is_none(),
        "nothing listed after the grace: {read}"
    );

    let third = rotate(server, &token, &id, json!({"graceSec": 0}));
    let third = third["webhookUrl"].as_str().expect("a URL").to_owned();
    assert_eq!(post(server, &path_of(&second)), 404, "grace 0: at once");
    assert_eq!(post(server, &path_of(&third)), 202, "the newest URL");
    let defaulted = server.ok(
        "POST",
        &format!("/api/automations/{id}/rotate-webhook"),
        &token,
        None,
    );
    let fourth = defaulted["webhookUrl"].as_str().expect("a URL").to_owned();
    assert_eq!(post(server, &path_of(&third)), 404, "no body: grace 0");
    assert_eq!(post(server, &path_of(&fourth)), 202);

    for bad in [json!({"graceSec": -1}), json!({"graceSec": 604_801})] {
        let (status, reply) = server.call(
            "POST",
            &format!("/api/automations/{id}/rotate-webhook"),
            &token,
            Some(bad.clone()),
        );
        assert_eq!(status, 400, "{bad}: {reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .is_some_and(|message| message.contains("graceSec")),
            "names the field: {reply}"
        );
    }
    assert_eq!(
        post(server, &path_of(&fourth)),
        202,
        "a refusal changes nothing"
    );
    let week = rotate(server, &token, &id, json!({"graceSec": 604_800}));
    assert!(week["previousWebhooks"].is_array(), "7 days is allowed");

    let manual = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(json!({"name": "Hand", "trigger": {"type": "manual"},
                    "steps": [{"name": "n", "op": "flow/log", "input": {"message": "hi"}}]})),
    );
    let (status, reply) = server.call(
        "POST",
        &format!(
            "/api/automations/{}/rotate-webhook",
            manual["id"].as_str().expect("id")
        ),
        &token,
        None,
    );
    assert_eq!(status, 409, "a manual automation has no URL: {reply}");
    let other = server.tenant("Other");
    let (status, _) = server.call(
        "POST",
        &format!("/api/automations/{id}/rotate-webhook"),
        &other,
        None,
    );
    assert_eq!(status, 404, "another tenant's automation is unknown");
}

/// Repro 2: the signing secret.
fn signing_secret_rotation(server: &Server) {
    let token = server.tenant("Signed");
    let created = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(
            json!({"name": "Signed", "trigger": {"type": "webhook", "params": []},
                    "signingSecret": true,
                    "steps": [{"name": "n", "op": "flow/log", "input": {"message": "hi"}}]}),
        ),
    );
    let id = created["id"].as_str().expect("an id").to_owned();
    let path = path_of(created["webhookUrl"].as_str().expect("a URL"));
    let old = created["signingSecret"]
        .as_str()
        .expect("shown once")
        .to_owned();
    assert_eq!(post_webhook(server, &path, &signed(&[&old])), 202);

    let (status, reply) = server.call(
        "POST",
        &format!("/api/automations/{id}/rotate-signing-secret"),
        &token,
        Some(json!({"overlapSec": 604_801})),
    );
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("overlapSec")),
        "names the field: {reply}"
    );

    let rotated = server.ok(
        "POST",
        &format!("/api/automations/{id}/rotate-signing-secret"),
        &token,
        Some(json!({"overlapSec": 2})),
    );
    let new = rotated["signingSecret"]
        .as_str()
        .expect("the new secret, shown once")
        .to_owned();
    assert_ne!(new, old);
    assert_eq!(rotated["signed"], json!(true));
    assert!(
        rotated["previousSigningSecrets"][0]["expiresAt"].is_string(),
        "the old one's end is listed: {rotated}"
    );
    let read = server.ok("GET", &format!("/api/automations/{id}"), &token, None);
    assert!(read.get("signingSecret").is_none(), "never shown again");
    assert!(
        !read.to_string().contains(&old) && !read.to_string().contains(&new),
        "no secret in a read"
    );
    assert_eq!(
        post_webhook(server, &path, &signed(&[&old])),
        202,
        "the old secret in the overlap"
    );
    assert_eq!(
        post_webhook(server, &path, &signed(&[&new])),
        202,
        "the new one"
    );
    assert_eq!(
        post_webhook(server, &path, &signed(&[&new, &old])),
        202,
        "both"
    );

    std::thread::sleep(GRACE + Duration::from_millis(300));
    assert_eq!(
        post_webhook(server, &path, &signed(&[&old])),
        401,
        "the old secret after the overlap"
    );
    assert_eq!(
        post_webhook(server, &path, &signed(&[&new])),
        202,
        "the new one"
    );
    assert_eq!(
        post_webhook(server, &path, &signed(&[&old, &new])),
        202,
        "a sender still signing with both"
    );

    let unsigned = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(
            json!({"name": "Plain", "trigger": {"type": "webhook", "params": []},
                    "steps": [{"name": "n", "op": "flow/log", "input": {"message": "hi"}}]}),
        ),
    );
    let (status, reply) = server.call(
        "POST",
        &format!(
            "/api/automations/{}/rotate-signing-secret",
            unsigned["id"].as_str().expect("id")
        ),
        &token,
        None,
    );
    assert_eq!(status, 409, "no secret to rotate: {reply}");
}

#[test]
fn webhook_urls_and_signing_secrets_rotate_through_fronta_serve_on_sqlite() {
    support::on_sqlite("rotation.db", ADMIN, |server| {
        webhook_url_rotation(server);
        signing_secret_rotation(server);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_urls_and_signing_secrets_rotate_through_fronta_serve_on_postgres() {
    support::on_postgres(ADMIN, |server| {
        webhook_url_rotation(server);
        signing_secret_rotation(server);
    })
    .await;
}

/// `fronta secrets reseal` on `database`, with key 2 current and key 1 old: its output.
fn reseal(database: &str) -> String {
    let out = support::fronta(database)
        .args(["secrets", "reseal", "--batch", "2"])
        .env("FRONTA_SECRET_KEY", KEY_2)
        .env("FRONTA_SECRET_KEY_VERSION", "2")
        .env("FRONTA_SECRET_OLD_KEYS", format!("1:{KEY_1}"))
        .output()
        .expect("fronta secrets reseal runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "reseal succeeds: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for key in [KEY_1, KEY_2] {
        assert!(!stdout.contains(key), "no key is printed");
    }
    stdout
}

/// The values written by [`reseal_repro`], by tenant name.
const VALUES: [(&str, &str); 5] = [
    ("a", "alpha-value"),
    ("b", "beta-value"),
    ("c", "gamma-value"),
    ("d", "delta-value"),
    ("e", "epsilon-value"),
];

/// Repro 3 on a server sealing with key 1: five secrets; `reseal` while it runs; then
/// every secret, read through the store, opens with key 2 alone.
fn reseal_repro(server: &Server, database: &str) {
    let token = server.tenant("Keys");
    for (name, value) in VALUES {
        let (status, reply) = server.call(
            "PUT",
            &format!("/api/secrets/{name}"),
            &token,
            Some(json!({"value": value})),
        );
        assert_eq!(status, 204, "{name}: {reply}");
    }
    let first = reseal(database);
    assert!(
        first.contains("resealed 5 of 5 secrets; 0 already on version 2"),
        "{first}"
    );
    assert!(first.contains("  2 read:"), "progress per batch: {first}");
    let again = reseal(database);
    assert!(
        again.contains("resealed 0 of 5 secrets; 5 already on version 2"),
        "again: nothing more to do: {again}"
    );
    let listed = server.ok("GET", "/api/secrets", &token, None);
    let versions: Vec<u64> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| item["keyVersion"].as_u64().expect("a version"))
        .collect();
    assert_eq!(versions, [2, 2, 2, 2, 2], "all on version 2: {listed}");
    // The operator's audit log: one entry for the reseal that changed something (the
    // second changed nothing and wrote nothing), no value in it.
    let audit = server.ok(
        "GET",
        "/api/admin/audit?actor=fronta%20secrets%20reseal",
        ADMIN,
        None,
    );
    let entries = audit["items"].as_array().expect("entries");
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(
        entries[0]["summary"], "Re-seal every stored secret with the current key: to key version 2",
        "{audit}"
    );
    for (_, value) in VALUES {
        assert!(
            !audit.to_string().contains(value),
            "no secret's value in the log"
        );
    }
}

/// Every stored secret of `secrets` opens with key 2 alone, to the value written.
async fn open_with_key_2_alone(secrets: &dyn fronta_automation::secrets::SecretStore) {
    let keyring =
        fronta_connectors::Keyring::from_config(KEY_2, Some("2"), None).expect("key 2 alone");
    let stored = secrets.secrets_page(None, 100).await.expect("the secrets");
    assert_eq!(stored.len(), VALUES.len(), "every secret");
    for secret in stored {
        let value = keyring
            .open(secret.tenant, &secret.name, &secret.sealed)
            .unwrap_or_else(|err| panic!("{} opens with key 2 alone: {err}", secret.name));
        let expected = VALUES
            .iter()
            .find(|(name, _)| *name == secret.name)
            .map(|(_, value)| *value);
        assert_eq!(Some(value.as_str()), expected, "{}", secret.name);
    }
}

#[test]
fn secrets_reseal_moves_every_secret_to_the_current_key_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let database = dir.path().join("reseal.db").to_string_lossy().into_owned();
    let server = Server::start_with(&database, ADMIN, &["--secret-key", KEY_1]);
    reseal_repro(&server, &database);
    server.stop();
    let store =
        fronta_store_sqlite::SqliteStore::open(fronta_store_sqlite::SqliteConfig::new(&database))
            .expect("the store opens");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(open_with_key_2_alone(&store));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reseal_moves_every_secret_to_the_current_key_on_postgres() {
    let db = support::pg::TestDb::create().await;
    let url = db.url.clone();
    tokio::task::spawn_blocking(move || {
        let server = Server::start_with(&url, ADMIN, &["--secret-key", KEY_1]);
        reseal_repro(&server, &url);
        server.stop();
    })
    .await
    .expect("the repro ran");
    let store = db.store(None).await;
    open_with_key_2_alone(&store).await;
}
