//! The issue "every decision on the run, also when it fails" as a user meets it, through
//! the real `fronta serve` binary on SQLite and on a fresh Postgres database, over HTTP:
//!
//! 1. a run failing in the middle of a tree keeps every step it ran: `a`, the condition
//!    `c` with its compared values, `big`, and the failing `each`;
//! 2. `flow/pause` of `1e30` seconds is refused on save (422), and through a template it
//!    fails that one step, with an incident, never a panic;
//! 3. a webhook without its optional parameter completes;
//! 5. five changes by a person do not make the loop guard stop "On shipped close": the
//!    status change closes the ticket. Two automations undoing each other are stopped by
//!    a run with the status `suppressed`, listed as such, which a retry by hand starts.
//!
//! (Repro 6, the schedule's clock, and repro 7, a cancel reaching a call in flight, are
//! in `serve.rs`.) Every wait is for a state, bounded by a generous deadline.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ADMIN: &str = "fa_decisions_admin";
const DEADLINE: Duration = Duration::from_secs(90);

type Server = support::ApiServer;

/// What these repros do with a server besides plain calls.
trait Drive {
    /// Saves `automation`; its id and, for a webhook, the path to post to.
    fn automation(&self, token: &str, automation: Value) -> (String, String);
    /// Posts `body` to a webhook: the run it started.
    fn webhook(&self, path: &str, body: Value) -> String;
    /// Reads `path` until `done` holds, or panics at [`DEADLINE`] with what it saw.
    fn wait(&self, token: &str, path: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value;
    fn finished_run(&self, token: &str, id: &str) -> Value;
}

impl Drive for Server {
    fn automation(&self, token: &str, automation: Value) -> (String, String) {
        let saved = self.ok("POST", "/api/automations", token, Some(automation));
        let id = saved["id"].as_str().expect("an id").to_owned();
        let path = saved["webhookUrl"]
            .as_str()
            .and_then(|url| url.find("/webhook/").map(|at| url[at..].to_owned()))
            .unwrap_or_default();
        (id, path)
    }

    fn webhook(&self, path: &str, body: Value) -> String {
        let (status, reply) = support::call(&self.address, "POST", path, None, Some(&body));
        assert_eq!(status, 202, "webhook accepted: {reply}");
        reply["runId"].as_str().expect("a run id").to_owned()
    }

    fn wait(&self, token: &str, path: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.until(token, path, what, DEADLINE, done)
    }

    fn finished_run(&self, token: &str, id: &str) -> Value {
        self.wait(token, &format!("/api/runs/{id}"), "to its end", |run| {
            matches!(
                run["status"].as_str(),
                Some("completed" | "failed" | "cancelled" | "suppressed")
            )
        })
    }
}

fn log(name: &str, message: &str) -> Value {
    json!({"name": name, "op": "flow/log", "input": {"message": message}})
}

/// `(name, status, message)` of every line of a run's step log.
fn lines(run: &Value) -> Vec<(String, String, String)> {
    run["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .map(|step| {
                    let text = |key: &str| step[key].as_str().unwrap_or_default().to_owned();
                    (text("name"), text("status"), text("message"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn names_and_statuses(run: &Value) -> Vec<(String, String)> {
    lines(run)
        .into_iter()
        .map(|(name, status, _)| (name, status))
        .collect()
}

/// Repros 1–3.
fn failures_bounds_and_optional_parameters(server: &Server) {
    let token = server.tenant("Decisions");
    // 1: fails at `each`, after a log, a condition and a step of its branch.
    let (_, lists) = server.automation(
        &token,
        json!({"name": "Lists", "trigger": {"type": "webhook", "params": [
                {"name": "n", "path": "n", "type": "string", "required": true}]},
               "steps": [log("a", "started"),
                         {"name": "c", "type": "condition",
                          "rules": [{"field": "_body.n", "operator": "gt", "value": 5}],
                          "then": [log("big", "a big one")]},
                         {"name": "each", "type": "forEach", "items": "{{_body.list}}", "as": "item",
                          "steps": [log("say", "{{item}}")]}]}),
    );
    let run = server.webhook(&lists, json!({"n": "7", "list": "nope"}));
    let run = server.finished_run(&token, &run);
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        names_and_statuses(&run),
        [
            ("a".into(), "ok".into()),
            ("c".into(), "met".into()),
            ("big".into(), "ok".into()),
            ("each".into(), "failed".into())
        ],
        "every step it ran, the failing one last: {run}"
    );
    let condition = &lines(&run)[1].2;
    assert!(
        condition.contains('7') && condition.contains('5'),
        "the condition's line shows what it compared: {condition}"
    );
    assert!(
        lines(&run)[3].2.contains("list"),
        "the failing step says why: {run}"
    );
    let timeline: Vec<(String, String)> = run["timeline"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|entry| {
                    let text = |key: &str| entry[key].as_str().unwrap_or_default().to_owned();
                    (text("kind"), text("message"))
                })
                .collect()
        })
        .unwrap_or_default();
    let kinds: Vec<&str> = timeline.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "enqueued", "started", "step", "step", "step", "step", "ended"
        ],
        "one timeline from the enqueue to the end: {run}"
    );
    assert!(
        timeline[0].1.starts_with("enqueued by a webhook call")
            && timeline[1].1.starts_with("attempt 1 of 5 on worker serve-")
            && timeline[6].1.starts_with("failed: "),
        "{timeline:?}"
    );

    // 2: a pause out of bounds.
    let (status, refused) = server.call(
        "POST",
        "/api/automations",
        &token,
        Some(json!({"name": "Forever", "trigger": {"type": "manual"},
                    "steps": [{"name": "p", "op": "flow/pause", "input": {"seconds": 1e30}}]})),
    );
    assert_eq!(status, 422, "refused on save: {refused}");
    assert!(
        refused.to_string().contains("seconds"),
        "the refusal names the input: {refused}"
    );
    let (_, pausing) = server.automation(
        &token,
        json!({"name": "Pausing", "trigger": {"type": "webhook", "params": [
                {"name": "wait", "path": "wait", "type": "number", "required": true}]},
               "steps": [log("before", "before"),
                         {"name": "p", "op": "flow/pause", "input": {"seconds": "{{wait}}"}}]}),
    );
    let run = server.webhook(&pausing, json!({"wait": 1e30}));
    let run = server.finished_run(&token, &run);
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        names_and_statuses(&run),
        [
            ("before".into(), "ok".into()),
            ("p".into(), "failed".into())
        ],
        "one step failed cleanly: {run}"
    );
    let incidents = server.wait(&token, "/api/incidents", "an incident", |page| {
        page["items"]
            .as_array()
            .is_some_and(|items| !items.is_empty())
    });
    assert_eq!(incidents["items"][0]["status"], "open", "{incidents}");

    // 3: the optional parameter is not sent. The save accepted the template, and said
    // beside the automation that it reads the parameter unchecked.
    let saved = server.ok(
        "POST",
        "/api/automations",
        &token,
        Some(
            json!({"name": "Optional", "trigger": {"type": "webhook", "params": [
                {"name": "order", "path": "id", "type": "string", "required": true},
                {"name": "first", "path": "items.0.sku", "type": "string"}]},
               "steps": [log("say", "order {{order}}, first [{{first}}]")]}),
        ),
    );
    assert_eq!(
        saved["warnings"][0]["path"], "steps[0].input.message",
        "the save warns of the unchecked read: {saved}"
    );
    assert!(
        saved["warnings"][0]["message"]
            .as_str()
            .is_some_and(|message| message.contains("\"first\"")),
        "{saved}"
    );
    let url = saved["webhookUrl"].as_str().expect("a webhook URL");
    let optional = url[url.find("/webhook/").expect("a path")..].to_owned();
    let run = server.webhook(&optional, json!({"id": "5001"}));
    let run = server.finished_run(&token, &run);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(lines(&run)[0].2, "order 5001, first []", "{run}");
}

/// The ticket type `order` and a webhook automation making its tickets: the path of the
/// webhook.
fn orders_webhook(server: &Server, token: &str) -> String {
    server.ok(
        "POST",
        "/api/ticket-types",
        token,
        Some(json!({"name": "order", "statuses": ["waiting-to-pack", "shipped"]})),
    );
    let (_, webhook) = server.automation(
        token,
        json!({"name": "Orders", "trigger": {"type": "webhook", "params": [
                {"name": "id", "path": "id", "type": "string", "required": true}]},
               "steps": [{"name": "ticket", "op": "ticket/upsert",
                          "input": {"externalId": "order-{{id}}", "title": "Order {{id}}",
                                    "type": "order", "status": "waiting-to-pack"}}]}),
    );
    webhook
}

/// Repro 5 and the loop it still stops.
fn the_loop_guard(server: &Server) {
    let token = server.tenant("Guarded");
    let orders = orders_webhook(server, &token);
    server.automation(
        &token,
        json!({"name": "On shipped close", "trigger": {"type": "event", "event": "ticket.changed"},
               "steps": [{"name": "shipped", "type": "condition",
                          "rules": [{"field": "ticket.status", "operator": "eq", "value": "shipped"}],
                          "then": [{"name": "close", "op": "ticket/close",
                                    "input": {"ticket": "{{ticket.id}}"}}]}]}),
    );
    let created = server.webhook(&orders, json!({"id": "1"}));
    server.finished_run(&token, &created);
    let tickets = server.ok("GET", "/api/tickets", &token, None);
    let ticket = tickets["items"][0]["id"]
        .as_str()
        .expect("the order's ticket")
        .to_owned();
    let path = format!("/api/tickets/{ticket}");
    for n in 0..5 {
        server.ok(
            "PATCH",
            &path,
            &token,
            Some(json!({"addTags": [format!("person-{n}")]})),
        );
    }
    server.ok("PATCH", &path, &token, Some(json!({"status": "shipped"})));
    let closed = server.wait(&token, &path, "closed", |ticket| ticket["closed"] == true);
    assert!(
        !closed["log"]
            .as_array()
            .is_some_and(|log| log.iter().any(|line| line["kind"] == "guard")),
        "no guard line on the ticket: {closed}"
    );

    // Two automations undoing each other's change: stopped by a suppressed run.
    let token = server.tenant("Looping");
    let orders = orders_webhook(server, &token);
    for (name, from, to) in [
        ("Ship", "waiting-to-pack", "shipped"),
        ("Unship", "shipped", "waiting-to-pack"),
    ] {
        server.automation(
            &token,
            json!({"name": name, "trigger": {"type": "event", "event": "ticket.changed"},
                   "steps": [{"name": "check", "type": "condition",
                              "rules": [{"field": "ticket.status", "operator": "eq", "value": from}],
                              "then": [{"name": "flip", "op": "ticket/set-status",
                                        "input": {"ticket": "{{ticket.id}}", "status": to}}]}]}),
        );
    }
    let created = server.webhook(&orders, json!({"id": "2"}));
    server.finished_run(&token, &created);
    let ticket = server.ok("GET", "/api/tickets", &token, None)["items"][0]["id"]
        .as_str()
        .expect("the order's ticket")
        .to_owned();
    server.ok(
        "PATCH",
        &format!("/api/tickets/{ticket}"),
        &token,
        Some(json!({"addTags": ["vip"]})),
    );
    let suppressed = server.wait(
        &token,
        "/api/runs?status=suppressed",
        "a suppressed run",
        |page| {
            page["items"]
                .as_array()
                .is_some_and(|items| !items.is_empty())
        },
    );
    let run = suppressed["items"][0]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let read = server.ok("GET", &format!("/api/runs/{run}"), &token, None);
    let reason = read["lastError"].as_str().unwrap_or_default();
    assert!(
        reason.contains("5 times") && reason.contains("Chain: \"") && reason.contains("\"Ship\""),
        "the reason names the cap and the chain: {read}"
    );
    assert_eq!(
        names_and_statuses(&read),
        [("run".into(), "suppressed".into())],
        "{read}"
    );
    let retried = server.ok("POST", &format!("/api/runs/{run}/retry"), &token, None);
    assert_eq!(retried["status"], "queued", "{retried}");
    let done = server.wait(&token, &format!("/api/runs/{run}"), "to complete", |run| {
        run["status"] == "completed"
    });
    let statuses: Vec<String> = lines(&done)
        .into_iter()
        .map(|(_, status, _)| status)
        .collect();
    assert_eq!(
        &statuses[..2],
        ["suppressed", "retried by hand"],
        "started by hand, said so: {done}"
    );
}

#[test]
fn every_decision_on_the_run_through_fronta_serve_on_sqlite() {
    support::on_sqlite("decisions.db", ADMIN, |server| {
        failures_bounds_and_optional_parameters(server);
        the_loop_guard(server);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_on_the_run_through_fronta_serve_on_postgres() {
    support::on_postgres(ADMIN, |server| {
        failures_bounds_and_optional_parameters(server);
        the_loop_guard(server);
    })
    .await;
}

/// Repro 7 across processes: the API is one `fronta serve --no-worker`, the run is in
/// flight in a separate `fronta worker` on the same Postgres database, inside a call the
/// service answers only after 40 s. The cancel reaches that worker through the database
/// at once (its heartbeat would come only after a third of the 5 min lease): the run is
/// `cancelled`, its call's entry saying it may have happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_a_call_in_flight_in_another_process_on_postgres() {
    use std::process::Stdio;
    let db = support::pg::TestDb::create().await;
    let slow = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path("/slow"))
        .respond_with(
            wiremock::ResponseTemplate::new(200)
                .set_delay(Duration::from_secs(40))
                .set_body_json(json!({"ok": true})),
        )
        .mount(&slow)
        .await;
    let url = db.url.clone();
    let service = format!("{}/slow", slow.uri());
    let asked = tokio::task::spawn_blocking(move || {
        let mut api = Command::new(support::FRONTA)
            .args(["--database", &url])
            .args(["serve", "--no-worker", "--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .env("FRONTA_ADMIN_TOKEN", ADMIN)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("fronta serve starts");
        let address = support::listening_address(&mut api);
        let server = Server::of(api, address, ADMIN);
        let worker = Command::new(support::FRONTA)
            .args(["--database", &url, "worker", "--poll", "20ms"])
            .env("RUST_LOG", "warn")
            .env("FRONTA_HTTP_ALLOW", "127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fronta worker starts");
        let token = server.tenant("Far");
        let (id, _) = server.automation(
            &token,
            json!({"name": "Slow call", "trigger": {"type": "manual"},
                   "steps": [{"name": "call", "op": "http/request", "service": "slow",
                              "input": {"url": service, "timeoutSec": 60}}]}),
        );
        let started = server.ok(
            "POST",
            &format!("/api/automations/{id}/runs"),
            &token,
            Some(json!({})),
        );
        let run = started["runId"].as_str().expect("a run id");
        let path = format!("/api/runs/{run}");
        server.wait(&token, &path, "running", |run| run["status"] == "running");
        (server, worker, token, path)
    })
    .await
    .expect("the run started");
    let (server, mut worker, token, path) = asked;
    // The call is in flight once the service has the request.
    let deadline = Instant::now() + Duration::from_secs(30);
    while slow
        .received_requests()
        .await
        .is_none_or(|requests| requests.is_empty())
    {
        assert!(Instant::now() < deadline, "the call never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::task::spawn_blocking(move || {
        let cancel_sent = Instant::now();
        let answer = server.ok("POST", &format!("{path}/cancel"), &token, None);
        assert_eq!(answer["cancel"], "requested", "it was running: {answer}");
        let shown = loop {
            let shown = server.ok("GET", &path, &token, None);
            if shown["status"] == "cancelled" {
                break shown;
            }
            assert!(
                cancel_sent.elapsed() < Duration::from_secs(20),
                "still not cancelled, though the call would answer only after 40 s \
                 and the worker's heartbeat comes later still: {shown}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let last = shown["steps"]
            .as_array()
            .and_then(|steps| steps.last())
            .cloned()
            .unwrap_or_default();
        assert_eq!(last["status"], "cancelled", "{shown}");
        support::signal(worker.id(), "TERM");
        let exit = worker.wait().expect("the worker exits");
        assert!(exit.success(), "a clean exit: {exit:?}");
        server.stop();
    })
    .await
    .expect("the cancel reached the other process");
}
