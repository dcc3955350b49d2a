//! Retention as an operator meets it, through the real `fronta serve` on SQLite and on a
//! fresh Postgres database: the operator keeps completed runs an hour, failed runs a
//! second and cancelled runs forever (`--retain-completed 1h --retain-failed 1s
//! --retain-cancelled off --retention-every 200ms`); one tenant keeps its completed runs
//! only a second (`PUT /api/admin/tenants/{id}/retention`), and may not keep them longer
//! than the operator. Its finished runs go once their retention has passed, counted on
//! `/metrics`, while the other tenant's stay; a failed run an open incident refers to
//! stays until the incident is resolved; a run still waiting (a long pause) is never
//! touched; cancelled runs stay.

mod support;

use std::time::Duration;

use serde_json::{Value, json};

const ADMIN: &str = "fa_retention_admin";
const DEADLINE: Duration = Duration::from_secs(60);
const FLAGS: [&str; 8] = [
    "--retain-completed",
    "1h",
    "--retain-failed",
    "1s",
    "--retain-cancelled",
    "off",
    "--retention-every",
    "200ms",
];

type Server = support::ApiServer;

fn metrics(server: &Server) -> String {
    let (status, text) = support::call_text(&server.address, "GET", "/metrics", None, None);
    assert_eq!(status, 200, "{text}");
    text
}

fn count(page: &Value) -> usize {
    page["items"].as_array().map_or(0, Vec::len)
}

fn scenario(server: &Server) {
    let token = server.tenant("Acme");
    let tenants = server.ok("GET", "/api/admin/tenants", ADMIN, None);
    let acme = tenants["items"][0]["id"]
        .as_str()
        .expect("a tenant id")
        .to_owned();
    let retention = format!("/api/admin/tenants/{acme}/retention");
    let (status, refused) =
        server.call("PUT", &retention, ADMIN, Some(json!({"completed": "off"})));
    assert_eq!(status, 400, "longer than the operator: {refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("at most 3600 s")),
        "{refused}"
    );
    let (status, refused) = server.call("PUT", &retention, ADMIN, Some(json!({"completd": "1s"})));
    assert_eq!(status, 400, "a mistyped status: {refused}");
    let (status, refused) =
        server.call("PUT", &retention, &token, Some(json!({"completed": "1s"})));
    assert_eq!(status, 401, "a tenant does not set its own: {refused}");
    let set = server.ok("PUT", &retention, ADMIN, Some(json!({"completed": "1s"})));
    assert_eq!(set["own"]["completed"], 1, "{set}");
    assert_eq!(
        set["effective"],
        json!({"completed": 1, "cancelled": "off", "failed": 1}),
        "{set}"
    );
    assert_eq!(set["operator"]["completed"], 3600, "{set}");
    assert_eq!(server.ok("GET", &retention, ADMIN, None), set, "read back");
    // Another tenant follows the operator: its completed run stays an hour.
    let other = server.tenant("Globex");
    let kept = server.ok(
        "POST",
        "/api/automations",
        &other,
        Some(json!({"name": "Theirs", "trigger": {"type": "manual"},
            "steps": [{"name": "say", "op": "flow/log", "input": {"message": "kept"}}]})),
    );
    let theirs = server.ok(
        "POST",
        &format!(
            "/api/automations/{}/runs",
            kept["id"].as_str().expect("an id")
        ),
        &other,
        Some(json!({})),
    )["runId"]
        .as_str()
        .expect("a run")
        .to_owned();
    let start = |definition: Value| {
        let saved = server.ok("POST", "/api/automations", &token, Some(definition));
        let id = saved["id"].as_str().expect("an id").to_owned();
        move |server: &Server, token: &str| {
            server.ok(
                "POST",
                &format!("/api/automations/{id}/runs"),
                token,
                Some(json!({})),
            )["runId"]
                .as_str()
                .expect("a run")
                .to_owned()
        }
    };
    let quick = start(json!({"name": "Quick", "trigger": {"type": "manual"},
        "steps": [{"name": "say", "op": "flow/log", "input": {"message": "done"}}]}));
    let broken = start(json!({"name": "Broken", "trigger": {"type": "manual"},
        "steps": [{"name": "close", "op": "ticket/close", "input": {"ticket": "not-an-id"}}]}));
    let waiting = start(json!({"name": "Waits", "trigger": {"type": "manual"},
        "steps": [{"name": "wait", "op": "flow/pause", "input": {"seconds": 3600}}]}));
    let quick_runs: Vec<String> = (0..3).map(|_| quick(server, &token)).collect();
    let failed = broken(server, &token);
    let asleep = waiting(server, &token);
    // The third: a run that is cancelled while it waits, kept forever (`off`).
    let cancelled = waiting(server, &token);
    server.until(
        &token,
        &format!("/api/runs/{cancelled}"),
        "the run asleep",
        DEADLINE,
        |run| run["status"] == "scheduled",
    );
    server.ok(
        "POST",
        &format!("/api/runs/{cancelled}/cancel"),
        &token,
        None,
    );

    // The quick runs go once a second has passed since they ended.
    server.until(
        &token,
        "/api/runs?status=completed",
        "the completed runs deleted",
        DEADLINE,
        |page| count(page) == 0,
    );
    for id in &quick_runs {
        let (status, _) = server.call("GET", &format!("/api/runs/{id}"), &token, None);
        assert_eq!(status, 404, "run {id} was deleted");
    }
    let scraped = metrics(server);
    assert!(
        scraped.contains("fronta_runs_deleted_total{status=\"completed\"} 3"),
        "the deletions are counted:\n{}",
        scraped
            .lines()
            .filter(|line| line.contains("deleted") || line.contains("retention"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    assert!(
        scraped.contains("fronta_oldest_finished_run_age_seconds "),
        "the age of the oldest finished run is reported"
    );
    // The failed run stays while its incident is open, and goes once it is resolved.
    let run = server.ok("GET", &format!("/api/runs/{failed}"), &token, None);
    assert_eq!(run["status"], "failed", "{run}");
    let incidents = server.ok("GET", "/api/incidents", &token, None);
    let incident = incidents["items"][0]["id"]
        .as_str()
        .expect("an incident")
        .to_owned();
    // Eight more passes (at least 1.6 s, so well past its retention): it is still there.
    let passes = |text: &str| {
        text.lines()
            .find(|line| line.starts_with("fronta_retention_passes_total "))
            .and_then(|line| line.split(' ').nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let now = passes(&scraped);
    server.until(
        &token,
        "/api/runs?status=completed",
        "eight more passes",
        DEADLINE,
        |_| passes(&metrics(server)) >= now + 8,
    );
    let (status, _) = server.call("GET", &format!("/api/runs/{failed}"), &token, None);
    assert_eq!(status, 200, "an open incident keeps its run");
    server.ok(
        "POST",
        &format!("/api/incidents/{incident}/resolve"),
        &token,
        None,
    );
    server.until(
        &token,
        "/api/runs?status=failed",
        "the failed run deleted",
        DEADLINE,
        |page| count(page) == 0,
    );

    // The other tenant's completed run, an hour's retention: still there.
    let run = server.ok("GET", &format!("/api/runs/{theirs}"), &other, None);
    assert_eq!(
        run["status"], "completed",
        "the operator's hour keeps it: {run}"
    );
    // Not finished: never touched. Kept forever: still there.
    let run = server.ok("GET", &format!("/api/runs/{asleep}"), &token, None);
    assert_eq!(run["status"], "scheduled", "a waiting run stays: {run}");
    let run = server.ok("GET", &format!("/api/runs/{cancelled}"), &token, None);
    assert_eq!(
        run["status"], "cancelled",
        "--retain-cancelled off keeps it: {run}"
    );
}

#[test]
fn finished_runs_go_after_their_retention_on_sqlite() {
    support::on_sqlite_with("retention.db", ADMIN, &FLAGS, |server, _| scenario(server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_go_after_their_retention_on_postgres() {
    support::on_postgres_with(ADMIN, &FLAGS, |server, _| scenario(server)).await;
}
