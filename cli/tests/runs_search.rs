//! Run search as a user meets it, through the real `fronta serve` and `fronta runs list`
//! on SQLite and on a fresh Postgres database: every filter of `GET /api/runs` alone and
//! combined (statuses, automation, version, trigger, ticket, from/to, text), paged,
//! scoped to the tenant, the same filters on the command line, and a mistyped parameter
//! refused by name instead of listing everything.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

const ADMIN: &str = "fa_runs_search_admin";
const DEADLINE: Duration = Duration::from_secs(90);

type Server = support::ApiServer;

fn orders(tag: &str) -> Value {
    json!({"name": "Orders", "trigger": {"type": "webhook", "params": [
            {"name": "id", "path": "id", "type": "string", "required": true}]},
           "steps": [{"name": "ticket", "op": "ticket/upsert",
                      "input": {"externalId": "order-{{id}}", "tags": [tag]}}]})
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a page: {page}"))
        .iter()
        .map(|run| run["id"].as_str().expect("an id").to_owned())
        .collect()
}

fn scenario(server: &Server, database: &str) {
    let token = server.tenant("Acme");
    let other = server.tenant("Globex");
    let saved = server.ok("POST", "/api/automations", &token, Some(orders("v1")));
    let orders_id = saved["id"].as_str().expect("an id").to_owned();
    let url = saved["webhookUrl"].as_str().expect("a webhook URL");
    let path = url[url.find("/webhook/").expect("a path")..].to_owned();
    let fail = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(
            json!({"name": "Broken", "trigger": {"type": "manual"}, "steps": [
            {"name": "close", "op": "ticket/close", "input": {"ticket": "not-an-id"}}]}),
        ),
    );
    let fail_id = fail["id"].as_str().expect("an id").to_owned();
    let send = |id: &str| {
        let (status, reply) = support::call(
            &server.address,
            "POST",
            &path,
            None,
            Some(&json!({"id": id})),
        );
        assert_eq!(status, 202, "{reply}");
        reply["runId"].as_str().expect("a run").to_owned()
    };
    let first = send("1");
    let second = send("2");
    server.until(
        &token,
        "/api/runs?status=completed",
        "two runs done",
        DEADLINE,
        |page| ids(page).len() == 2,
    );
    let between = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    server.ok(
        "PUT",
        &format!("/api/automations/{orders_id}"),
        &token,
        Some(orders("v2")),
    );
    let third = send("3");
    server.ok(
        "POST",
        &format!("/api/automations/{fail_id}/runs"),
        &token,
        Some(json!({})),
    );
    server.until(
        &token,
        "/api/runs?status=completed,failed",
        "all four ended",
        DEADLINE,
        |page| ids(page).len() == 4,
    );
    let list = |query: &str| server.ok("GET", &format!("/api/runs?{query}"), &token, None);

    assert_eq!(
        ids(&list("status=failed")).len(),
        1,
        "one failed (the store's own filter)"
    );
    assert_eq!(
        ids(&list(&format!("automation={orders_id}"))),
        vec![third.clone(), second.clone(), first.clone()],
        "newest first"
    );
    assert_eq!(
        ids(&list(&format!("automation={orders_id}&version=1"))),
        vec![second.clone(), first.clone()],
        "version 1's runs"
    );
    assert_eq!(
        ids(&list(&format!("automation={orders_id}&version=2"))),
        vec![third.clone()],
        "version 2's run"
    );
    assert_eq!(ids(&list("trigger=manual")).len(), 1, "the manual run");
    assert_eq!(
        ids(&list("trigger=webhook&status=failed")),
        Vec::<String>::new(),
        "no webhook run failed"
    );
    // The two orders ran side by side: which one got TK-1 is theirs to say.
    let tickets = server.ok("GET", "/api/tickets", &token, None);
    let ticket_of = |external: &str, field: &str| {
        tickets["items"]
            .as_array()
            .expect("tickets")
            .iter()
            .find(|ticket| ticket["externalId"] == external)
            .unwrap_or_else(|| panic!("the ticket {external}: {tickets}"))[field]
            .as_str()
            .expect("a text")
            .to_owned()
    };
    let number = ticket_of("order-1", "number");
    assert_eq!(
        ids(&list(&format!("ticket={number}"))),
        vec![first.clone()],
        "the run that created order-1, by its number {number}"
    );
    let id = ticket_of("order-2", "id");
    assert_eq!(
        ids(&list(&format!("ticket={id}"))),
        vec![second.clone()],
        "by the ticket's id too"
    );
    let broken = list("q=NOT A TICKET ID");
    assert_eq!(
        ids(&broken).len(),
        1,
        "text in the last error, case folded: {broken}"
    );
    assert!(
        broken["items"][0]["lastError"]
            .as_str()
            .is_some_and(|error| error.contains("not a ticket id")),
        "{broken}"
    );
    assert_eq!(ids(&list("q=attached")).len(), 0, "no step said attached");
    assert_eq!(
        ids(&list(&format!("automation={orders_id}&from={between}"))),
        vec![third.clone()],
        "created after the edit"
    );
    assert_eq!(
        ids(&list(&format!("automation={orders_id}&to={between}"))),
        vec![second.clone(), first.clone()],
        "created before it"
    );

    // Paged: two, then the last one.
    let page = list(&format!("automation={orders_id}&limit=2"));
    assert_eq!(ids(&page), vec![third.clone(), second.clone()], "{page}");
    let cursor = page["nextCursor"].as_str().expect("a next page").to_owned();
    let rest = list(&format!("automation={orders_id}&limit=2&cursor={cursor}"));
    assert_eq!(ids(&rest), vec![first.clone()], "{rest}");
    assert_eq!(rest["nextCursor"], Value::Null, "nothing follows");

    // Refusals: a mistyped parameter, a bad value, an unknown ticket.
    let (status, refused) = server.call("GET", "/api/runs?stauts=failed", &token, None);
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"stauts\"") && m.contains("status")),
        "names it: {refused}"
    );
    let (status, refused) = server.call("GET", "/api/runs?status=failde", &token, None);
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = server.call("GET", "/api/runs?ticket=TK-99", &token, None);
    assert_eq!(status, 404, "{refused}");
    let (status, refused) = server.call("GET", "/api/tickets?staus=open", &token, None);
    assert_eq!(
        status, 400,
        "every list refuses what it does not take: {refused}"
    );

    // Another tenant sees none of it, whatever it asks.
    let theirs = server.ok(
        "GET",
        &format!("/api/runs?automation={orders_id}&status=completed,failed"),
        &other,
        None,
    );
    assert_eq!(ids(&theirs), Vec::<String>::new(), "{theirs}");

    // The same filters on the command line.
    let out = Command::new(support::FRONTA)
        .args([
            "--database",
            database,
            "runs",
            "list",
            "--automation",
            &orders_id,
            "--version",
            "1",
            "--json",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("fronta runs list runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let listed: Vec<&str> = listed
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| run["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        listed,
        vec![second.as_str(), first.as_str()],
        "the command line filters alike"
    );
    let out = Command::new(support::FRONTA)
        .args([
            "--database",
            database,
            "runs",
            "list",
            "--text",
            "not a ticket",
            "--status",
            "failed,completed",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("fronta runs list runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.lines().count() == 2,
        "a header and the failed run:\n{text}"
    );
}

#[test]
fn runs_are_found_by_every_filter_on_sqlite() {
    support::on_sqlite_with("search.db", ADMIN, &[], scenario);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_found_by_every_filter_on_postgres() {
    support::on_postgres_with(ADMIN, &[], scenario).await;
}
