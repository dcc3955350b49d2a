//! `fronta serve` as an operator meets it: the first start prints a generated admin token
//! once and keeps only its hash next to the database; the server answers health, admin
//! and tenant calls; a webhook becomes a ticket through the in-process worker; SIGTERM
//! stops it cleanly; a second start prints no token and the first one still works;
//! `FRONTA_ADMIN_TOKEN` wins over the file. HTTP is spoken through reqwest (`support::call`).
//! Timed automations run on their own, and a poll automation against an HTTP source
//! (wiremock) takes only new items, also across a restart of the binary. On Postgres,
//! `/metrics` counts the commits of group enqueue.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const FRONTA: &str = env!("CARGO_BIN_EXE_fronta");

struct Server {
    child: Child,
    address: String,
    /// Lines printed on stdout before it listened.
    stdout_lines: Vec<String>,
}

fn start(db: &Path, admin_token: Option<&str>) -> Server {
    start_with(db, admin_token, &[])
}

/// [`start`] with more environment for the server (over the defaults set here).
fn start_with(db: &Path, admin_token: Option<&str>, env: &[(&str, &str)]) -> Server {
    let mut command = Command::new(FRONTA);
    command
        .arg("--database")
        .arg(db)
        .args(["serve", "--listen", "127.0.0.1:0", "--poll", "20ms"])
        .env("RUST_LOG", "warn")
        .env("FRONTA_SCHEDULER_TICK", "1s")
        // Poll sources and connector steps of these tests live on this machine.
        .env("FRONTA_HTTP_ALLOW", "127.0.0.1")
        .env_remove("FRONTA_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(token) = admin_token {
        command.env("FRONTA_ADMIN_TOKEN", token);
    }
    // The caller's environment last: it may change what is set above.
    command.envs(env.iter().copied());
    let mut child = command.spawn().expect("fronta serve starts");
    let address = support::listening_address(&mut child);
    let stdout_lines = Vec::new();
    Server {
        child,
        address,
        stdout_lines,
    }
}

impl Server {
    /// Stop with SIGTERM; the exit must be clean. Returns everything left on stdout.
    fn stop(mut self) -> String {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "SIGTERM sent");
        let exit = self.child.wait().expect("the server exits");
        assert!(exit.success(), "a clean exit after SIGTERM: {exit:?}");
        let mut rest = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            stdout.read_to_string(&mut rest).expect("stdout");
        }
        self.stdout_lines.push(rest);
        self.stdout_lines.join("\n")
    }

    /// The generated admin token from the first line of stdout.
    fn printed_token(&mut self) -> String {
        let stdout = self.child.stdout.as_mut().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("a line");
        self.stdout_lines.push(line.clone());
        line.rsplit(' ')
            .next()
            .map(|token| token.trim().to_owned())
            .filter(|token| token.starts_with("fa_"))
            .unwrap_or_else(|| panic!("an admin token on stdout: {line:?}"))
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        support::call(&self.address, method, path, token, body.as_ref())
    }

    /// `call`, answering the body as text.
    fn call_text(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, String) {
        support::call_text(&self.address, method, path, token, body.as_ref())
    }

    /// Create the tenant `name` with the admin token; its API token.
    fn tenant(&self, admin: &str, name: &str) -> String {
        let (status, tenant) = self.call(
            "POST",
            "/api/admin/tenants",
            Some(admin),
            Some(json!({ "name": name })),
        );
        assert_eq!(status, 201, "tenant created: {tenant}");
        tenant["token"].as_str().expect("a tenant token").to_owned()
    }

    /// The value of the unlabelled Prometheus series `name` at `GET /metrics`.
    fn metric(&self, name: &str) -> Option<f64> {
        let (status, text) = self.call_text("GET", "/metrics", None, None);
        assert_eq!(status, 200, "metrics: {text}");
        text.lines()
            .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .find_map(|value| value.trim().parse().ok())
    }
}

#[test]
fn serve_prints_the_admin_token_once_runs_webhooks_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("serve.db");

    let mut server = start(&db, None);
    let admin = server.printed_token();
    assert!(
        dir.path().join("serve.db.admin-token").exists(),
        "the hash is kept next to the database"
    );
    let kept = std::fs::read_to_string(dir.path().join("serve.db.admin-token")).expect("the file");
    assert!(
        !kept.contains(&admin),
        "the file holds the hash, not the token"
    );

    let (status, _) = server.call("GET", "/healthz", None, None);
    assert_eq!(status, 200, "healthz");
    let (status, _) = server.call("GET", "/readyz", None, None);
    assert_eq!(status, 200, "readyz");
    let token = server.tenant(&admin, "Acme");
    let (status, _) = server.call(
        "POST",
        "/api/ticket-types",
        Some(&token),
        Some(json!({"name": "order", "statuses": ["new"]})),
    );
    assert_eq!(status, 201, "ticket type");
    let (status, automation) = server.call(
        "POST",
        "/api/automations",
        Some(&token),
        Some(json!({
            "name": "Orders",
            "trigger": {"type": "webhook", "params": [
                {"name": "orderId", "path": "id", "type": "string", "required": true}]},
            "steps": [{"name": "ticket", "op": "ticket/upsert",
                       "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
                                 "type": "order", "status": "new"}}]
        })),
    );
    assert_eq!(status, 201, "automation: {automation}");
    let url = automation["webhookUrl"].as_str().expect("a webhook URL");
    assert!(
        url.starts_with(&format!("http://{}/webhook/", server.address)),
        "the URL as we reached the server: {url}"
    );
    let path = &url[url.find("/webhook/").expect("a path")..];
    let (status, accepted) = server.call("POST", path, None, Some(json!({"id": "7"})));
    assert_eq!(status, 202, "webhook accepted: {accepted}");

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, tickets) = server.call("GET", "/api/tickets", Some(&token), None);
        if tickets["items"]
            .as_array()
            .is_some_and(|items| items.len() == 1)
        {
            assert_eq!(tickets["items"][0]["externalId"], "order-7", "the ticket");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the in-process worker made the ticket: {tickets}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The worker waits idle between webhooks: one arriving then is handed to it at
    // enqueue, already claimed (one commit), and counted. A webhook that meets the
    // worker in its poll's claim is queued instead, so a few more orders are sent until
    // one was handed over.
    let mut order = 7;
    while server
        .metric("fronta_worker_handed_off_total")
        .expect("the serve process reports its worker's hand-offs")
        < 1.0
    {
        order += 1;
        assert!(
            order <= 30,
            "no webhook of 23 was handed to the idle worker"
        );
        let (status, accepted) =
            server.call("POST", path, None, Some(json!({"id": order.to_string()})));
        assert_eq!(status, 202, "webhook accepted: {accepted}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, tickets) = server.call("GET", "/api/tickets", Some(&token), None);
            if tickets["items"].as_array().map(Vec::len) == Some(order - 6) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the worker made order {order}'s ticket: {tickets}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    server.stop();

    let again = start(&db, None);
    let (status, _) = again.call("GET", "/api/admin/tenants", Some(&admin), None);
    assert_eq!(status, 200, "the first token still works after a restart");
    let printed = again.stop();
    assert!(
        !printed.contains("fa_"),
        "no token printed the second time: {printed:?}"
    );

    let from_env = start(&db, Some("fa_from_the_environment"));
    let (status, _) = from_env.call(
        "GET",
        "/api/admin/tenants",
        Some("fa_from_the_environment"),
        None,
    );
    assert_eq!(status, 200, "FRONTA_ADMIN_TOKEN is the admin token");
    let (status, _) = from_env.call("GET", "/api/admin/tenants", Some(&admin), None);
    assert_eq!(status, 401, "and the file's token is not, while it is set");
    from_env.stop();
}

#[test]
fn fronta_apply_sends_a_setup_file_idempotently_and_refuses_a_bad_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("apply.db");
    let server = start(&db, Some("fa_apply_test_admin_token"));
    let token = server.tenant("fa_apply_test_admin_token", "Acme");
    let setup = dir.path().join("setup.json");
    std::fs::write(
        &setup,
        json!({
            "groups": [{"name": "warehouse", "members": [{"name": "Eva", "capacity": 5}]}],
            "ticketTypes": [{"name": "order", "statuses": ["waiting-to-pack", "shipped"]}],
            "automations": [{"name": "Orders", "trigger": {"type": "manual"},
                             "steps": [{"name": "note", "op": "flow/log", "input": {"message": "hi"}}]}]
        })
        .to_string(),
    )
    .expect("write the setup");
    let apply = |file: &Path| {
        Command::new(FRONTA)
            .args(["apply", "-f"])
            .arg(file)
            .args(["--server", &server.address, "--token", &token])
            .env("RUST_LOG", "warn")
            .output()
            .expect("run fronta apply")
    };
    let first = apply(&setup);
    let text = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(
        first.status.success(),
        "apply succeeds: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(text.contains("created"), "the first apply creates: {text}");
    // The same server by URL.
    let second = Command::new(FRONTA)
        .args(["apply", "-f"])
        .arg(&setup)
        .args(["--server", &format!("http://{}/", server.address)])
        .env("FRONTA_TOKEN", &token)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fronta apply");
    let text = String::from_utf8_lossy(&second.stdout).into_owned();
    assert!(
        second.status.success(),
        "apply again succeeds: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(
        text.contains("unchanged") && !text.contains("\"created\""),
        "the second apply changes nothing: {text}"
    );
    let (_, groups) = server.call("GET", "/api/groups", Some(&token), None);
    assert_eq!(
        groups["items"].as_array().map(Vec::len),
        Some(1),
        "one warehouse, not two: {groups}"
    );

    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        json!({"automations": [{"name": "Broken", "trigger": {"type": "manual"},
                                "steps": [{"name": "x", "op": "no/such-op", "input": {}}]}]})
        .to_string(),
    )
    .expect("write the bad setup");
    let refused = apply(&bad);
    let message = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success(), "a bad setup fails");
    assert!(
        message.contains("no/such-op"),
        "the error names the problem: {message}"
    );
    assert_eq!(message.trim().lines().count(), 1, "one line: {message}");
    server.stop();
}

/// Poll and schedule automations run on their own through the real binary: the
/// scheduler (every second here) keeps one run ahead for each; a cron with seconds runs
/// every two seconds; a poll runs at once and then not again within its interval; a
/// paused schedule stops, its pending tick cancelled.
#[test]
fn timed_automations_run_on_their_own_and_stop_when_paused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("timed.db");
    let admin = "fa_timed_admin_token";
    // Every two seconds is under the default MIN_SCHEDULE_INTERVAL (10 s): this server
    // allows it, as an operator may.
    let server = start_with(&db, Some(admin), &[("FRONTA_MIN_SCHEDULE_INTERVAL", "1s")]);
    let token = server.tenant(admin, "Acme");
    let (status, refused) = {
        let strict = start(&dir.path().join("strict.db"), Some(admin));
        let strict_token = strict.tenant(admin, "Strict");
        let answer = strict.call(
            "POST",
            "/api/automations",
            Some(&strict_token),
            Some(json!({"name": "Too often", "trigger": {"type": "schedule", "cron": "*/2 * * * * *"},
                "steps": [{"name": "note", "op": "flow/log", "input": {"message": "x"}}]})),
        );
        strict.stop();
        answer
    };
    assert_eq!(status, 422, "every 2 s is refused by default: {refused}");
    assert!(
        refused.to_string().contains("MIN_SCHEDULE_INTERVAL"),
        "names the limit: {refused}"
    );
    let create = |name: &str, trigger: Value| {
        let (status, created) = server.call(
            "POST",
            "/api/automations",
            Some(&token),
            Some(json!({"name": name, "trigger": trigger,
                "steps": [{"name": "note", "op": "flow/log", "input": {"message": "tick"}}]})),
        );
        assert_eq!(status, 201, "{name} saved: {created}");
        created["id"].as_str().expect("an id").to_owned()
    };
    let (status, refused) = server.call(
        "POST",
        "/api/automations",
        Some(&token),
        Some(json!({"name": "Bad", "trigger": {"type": "schedule", "cron": "0 7 * * *", "timezone": "Mars/Olympus"},
            "steps": [{"name": "note", "op": "flow/log", "input": {"message": "x"}}]})),
    );
    assert_eq!(
        status, 422,
        "an unknown time zone is refused on save: {refused}"
    );
    let every_two = create(
        "Every two seconds",
        json!({"type": "schedule", "cron": "*/2 * * * * *"}),
    );
    // The poll's source: an empty list, so each poll finds nothing new.
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let source = runtime.block_on(wiremock::MockServer::start());
    runtime.block_on(
        wiremock::Mock::given(wiremock::matchers::path("/orders"))
            .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(json!({"items": []})))
            .mount(&source),
    );
    let poll = create(
        "Poll",
        json!({"type": "poll", "source": "http", "intervalSec": 60,
               "request": {"url": format!("{}/orders", source.uri())},
               "items": "body.items", "cursor": "id"}),
    );

    let runs_of = |automation: &str| -> Vec<Value> {
        let (status, page) = server.call(
            "GET",
            &format!("/api/runs?automation={automation}"),
            Some(&token),
            None,
        );
        assert_eq!(status, 200, "runs: {page}");
        page["items"].as_array().cloned().unwrap_or_default()
    };
    let completed = |runs: &[Value]| {
        runs.iter()
            .filter(|run| run["status"] == "completed")
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ticks, polls) = (runs_of(&every_two), runs_of(&poll));
        if completed(&ticks) >= 3 && completed(&polls) >= 1 {
            assert!(
                ticks.iter().all(|run| run["trigger"] == "schedule"),
                "recorded as schedule: {ticks:?}"
            );
            assert!(
                polls.iter().all(|run| run["trigger"] == "poll"),
                "recorded as poll: {polls:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "three schedule runs and a poll within 30 s: {ticks:?} {polls:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let polls = runs_of(&poll);
    assert_eq!(
        completed(&polls),
        1,
        "one poll within its 60 s interval: {polls:?}"
    );
    assert_eq!(
        polls
            .iter()
            .filter(|run| matches!(run["status"].as_str(), Some("scheduled" | "queued")))
            .count(),
        1,
        "the next poll waits ahead: {polls:?}"
    );

    let (status, _) = server.call(
        "POST",
        &format!("/api/automations/{every_two}/pause"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "paused");
    // Within a few scheduler ticks the pending tick is cancelled and nothing new starts.
    let deadline = Instant::now() + Duration::from_secs(15);
    let settled = loop {
        let ticks = runs_of(&every_two);
        let pending = ticks
            .iter()
            .filter(|run| {
                matches!(
                    run["status"].as_str(),
                    Some("scheduled" | "queued" | "running")
                )
            })
            .count();
        // The pending tick, if the scheduler had planned one, is cancelled.
        if pending == 0 {
            break ticks.len();
        }
        assert!(
            Instant::now() < deadline,
            "the paused schedule settles: {ticks:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        runs_of(&every_two).len(),
        settled,
        "no run of a paused schedule after it settled"
    );
    server.stop();
}

/// The source of the poll test: answers its current items; the sink records what the
/// automation hands it.
#[derive(Clone, Default)]
struct Items(std::sync::Arc<std::sync::Mutex<Vec<Value>>>);

impl Items {
    fn set(&self, ids: &[i64]) {
        *self.0.lock().expect("lock") = ids.iter().map(|id| json!({"id": id})).collect();
    }
}

impl wiremock::Respond for Items {
    fn respond(&self, _: &wiremock::Request) -> wiremock::ResponseTemplate {
        let items = self.0.lock().expect("lock").clone();
        wiremock::ResponseTemplate::new(200).set_body_json(json!({"items": items}))
    }
}

/// A poll automation through the real binary: the scheduler starts poll runs (trigger
/// `poll`), the first takes every item of the source, and after a restart of
/// `fronta serve` on the same database the next poll hands on only the items added
/// since — the cursor is in the database, not in the process.
#[test]
fn a_poll_automation_hands_on_only_new_items_also_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("poll.db");
    let admin = "fa_poll_admin_token";
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let mock = runtime.block_on(wiremock::MockServer::start());
    let items = Items::default();
    runtime.block_on(async {
        wiremock::Mock::given(wiremock::matchers::path("/orders"))
            .respond_with(items.clone())
            .mount(&mock)
            .await;
        wiremock::Mock::given(wiremock::matchers::path("/sink"))
            .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(json!({})))
            .mount(&mock)
            .await;
    });
    let delivered = || -> Vec<i64> {
        runtime
            .block_on(mock.received_requests())
            .unwrap_or_default()
            .iter()
            .filter(|request| request.url.path() == "/sink")
            .filter_map(|request| {
                serde_json::from_slice::<Value>(&request.body)
                    .ok()
                    .and_then(|body| body["id"].as_i64())
            })
            .collect()
    };
    items.set(&[1, 2]);

    let server = start(&db, Some(admin));
    let token = server.tenant(admin, "Acme");
    let (status, created) = server.call(
        "POST",
        "/api/automations",
        Some(&token),
        Some(json!({
            "name": "Orders",
            "trigger": {"type": "poll", "source": "http", "intervalSec": 10,
                        "request": {"url": format!("{}/orders", mock.uri())},
                        "items": "body.items", "cursor": "id"},
            "steps": [{"name": "each", "type": "forEach", "items": "{{poll.items}}", "as": "order",
                       "steps": [{"name": "deliver", "op": "http/request",
                                  "input": {"method": "POST", "url": format!("{}/sink", mock.uri()),
                                            "body": {"id": "{{order.id}}"}}}]}]
        })),
    );
    assert_eq!(status, 201, "saved: {created}");
    let automation = created["id"].as_str().expect("an id").to_owned();
    let wait_for = |want: &[i64], what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while delivered().len() < want.len() {
            assert!(
                Instant::now() < deadline,
                "{what}: delivered {:?}, want {want:?}",
                delivered()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(delivered(), want, "{what}: each item once, oldest first");
    };
    wait_for(&[1, 2], "the first poll takes every item");
    server.stop();

    items.set(&[1, 2, 3, 4]);
    let server = start(&db, Some(admin));
    wait_for(&[1, 2, 3, 4], "after the restart only 3 and 4 are new");

    // The sink sees item 4 a moment before the run that sent it records its own
    // completion, so the runs are read until both polls stand completed.
    let polls_logged = || -> Vec<String> {
        let (status, page) = server.call(
            "GET",
            &format!("/api/runs?automation={automation}"),
            Some(&token),
            None,
        );
        assert_eq!(status, 200, "runs: {page}");
        let runs = page["items"].as_array().cloned().unwrap_or_default();
        assert!(
            runs.iter().all(|run| run["trigger"] == "poll"),
            "recorded as poll: {runs:?}"
        );
        let mut polled: Vec<String> = Vec::new();
        for run in runs.iter().filter(|run| run["status"] == "completed") {
            let (_, one) = server.call(
                "GET",
                &format!("/api/runs/{}", run["id"].as_str().expect("id")),
                Some(&token),
                None,
            );
            if let Some(line) = one["steps"]
                .as_array()
                .and_then(|steps| steps.iter().find(|step| step["name"] == "poll"))
            {
                polled.push(line["message"].as_str().unwrap_or("").to_owned());
            }
        }
        polled.sort();
        polled
    };
    let want = ["2 new items; cursor → 2", "2 new items; cursor 2 → 4"];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let polled = polls_logged();
        if want.iter().all(|line| polled.iter().any(|got| got == line)) {
            break;
        }
        assert!(Instant::now() < deadline, "the poll steps' log: {polled:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
}

/// On Postgres, webhooks' enqueues go through group enqueue, and `/metrics` counts it:
/// every call answered, in no more commits than calls. The hand-off is off, so no
/// webhook's run takes the other path.
#[test]
fn on_postgres_metrics_count_the_commits_of_group_enqueue() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let db = runtime.block_on(support::pg::TestDb::create());
    let admin = "fa_group_admin_token";
    let server = start_with(
        Path::new(&db.url),
        Some(admin),
        &[("FRONTA_HAND_OFF", "false")],
    );
    let token = server.tenant(admin, "Acme");
    let (status, automation) = server.call(
        "POST",
        "/api/automations",
        Some(&token),
        Some(json!({
            "name": "Pings",
            "trigger": {"type": "webhook"},
            "steps": [{"name": "note", "op": "flow/log", "input": {"message": "ping"}}]
        })),
    );
    assert_eq!(status, 201, "automation: {automation}");
    let url = automation["webhookUrl"].as_str().expect("a webhook URL");
    let path = url[url.find("/webhook/").expect("a path")..].to_owned();
    let before = server
        .metric("fronta_pg_enqueue_grouped_calls_total")
        .expect("a Postgres store reports group enqueue");
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..5 {
                    let (status, accepted) = server.call("POST", &path, None, Some(json!({})));
                    assert_eq!(status, 202, "webhook accepted: {accepted}");
                }
            });
        }
    });
    let calls = server
        .metric("fronta_pg_enqueue_grouped_calls_total")
        .expect("calls")
        - before;
    let groups = server
        .metric("fronta_pg_enqueue_groups_total")
        .expect("groups");
    assert!(
        calls >= 40.0,
        "each of the 40 webhooks' enqueues was answered by a group: {calls}"
    );
    assert!(
        groups >= 1.0
            && groups
                <= server
                    .metric("fronta_pg_enqueue_grouped_calls_total")
                    .expect("calls"),
        "no more commits than calls: {groups} for {calls}"
    );
    assert_eq!(
        server.metric("fronta_pg_enqueue_groups_split_total"),
        Some(0.0),
        "no group failed"
    );
    server.stop();
}

/// A schedule keeps its own clock, whatever the scheduler's: with a scheduler tick of an
/// hour, a `*/2` seconds schedule saved after the scheduler's first look gets its first
/// run at once (the save wakes the scheduler), and every later run is planned the moment
/// the one before ended, due at its exact fire instant: consecutive runs stand for
/// consecutive ticks, each due at the instant it stands for, none missed.
#[test]
fn a_schedule_runs_at_each_fire_instant_whatever_the_scheduler_tick() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("nudge.db");
    let admin = "fa_nudge_admin_token";
    let server = start_with(
        &db,
        Some(admin),
        &[
            ("FRONTA_SCHEDULER_TICK", "1h"),
            ("FRONTA_MIN_SCHEDULE_INTERVAL", "1s"),
        ],
    );
    let token = server.tenant(admin, "Acme");
    let (status, created) = server.call(
        "POST",
        "/api/automations",
        Some(&token),
        Some(
            json!({"name": "Soon", "trigger": {"type": "schedule", "cron": "*/2 * * * * *"},
            "steps": [{"name": "note", "op": "flow/log", "input": {"message": "tick"}}]}),
        ),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("an id").to_owned();
    let wanted = 4;
    let started = std::time::Instant::now();
    let runs = loop {
        let (_, page) = server.call(
            "GET",
            &format!("/api/runs?automation={id}&status=completed"),
            Some(&token),
            None,
        );
        let runs = page["items"].as_array().cloned().unwrap_or_default();
        if runs.len() >= wanted {
            break runs;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{} of {wanted} runs of the schedule, though the scheduler looks only hourly: {page}",
            runs.len()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut ticks: Vec<(chrono::DateTime<chrono::Utc>, serde_json::Value)> = runs
        .iter()
        .map(|run| {
            let (status, run) = server.call(
                "GET",
                &format!("/api/runs/{}", run["id"].as_str().expect("a run id")),
                Some(&token),
                None,
            );
            assert_eq!(status, 200, "{run}");
            let tick = run["input"]["_schedule"]["scheduledFor"]
                .as_str()
                .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                .unwrap_or_else(|| panic!("a schedule run names its tick: {run}"))
                .with_timezone(&chrono::Utc);
            (tick, run)
        })
        .collect();
    ticks.sort_by_key(|(tick, _)| *tick);
    for pair in ticks.windows(2) {
        let ((before, _), (after, run)) = (&pair[0], &pair[1]);
        assert_eq!(
            (*after - *before).num_milliseconds(),
            2000,
            "consecutive runs stand for consecutive ticks: {run}"
        );
    }
    for (tick, run) in &ticks {
        let due = run["runAt"]
            .as_str()
            .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
            .unwrap_or_else(|| panic!("a run has its due time: {run}"));
        assert_eq!(
            due.with_timezone(&chrono::Utc),
            *tick,
            "planned ahead, due at the very instant it stands for: {run}"
        );
        assert_eq!(run["input"]["_schedule"]["missedTicks"], 0, "{run}");
    }
    server.stop();
}

/// A cancel reaches a step in flight: an `http/request` to a service that answers after
/// 40 s is abandoned when the run is cancelled through the API of the process running it,
/// and the run is `cancelled` long before the answer would have come, its log saying the
/// call may have happened.
#[test]
fn a_cancel_abandons_a_call_in_flight() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("cancel.db");
    let admin = "fa_cancel_admin_token";
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let slow = runtime.block_on(wiremock::MockServer::start());
    runtime.block_on(
        wiremock::Mock::given(wiremock::matchers::path("/slow"))
            .respond_with(
                wiremock::ResponseTemplate::new(200)
                    .set_delay(Duration::from_secs(40))
                    .set_body_json(json!({"ok": true})),
            )
            .mount(&slow),
    );
    let server = start(&db, Some(admin));
    let token = server.tenant(admin, "Acme");
    let (status, created) = server.call(
        "POST",
        "/api/automations",
        Some(&token),
        Some(json!({"name": "Slow call", "trigger": {"type": "manual"},
            "steps": [{"name": "call", "op": "http/request", "service": "slow",
                       "input": {"url": format!("{}/slow", slow.uri()), "timeoutSec": 60}}]})),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("an id");
    let (status, started) = server.call(
        "POST",
        &format!("/api/automations/{id}/runs"),
        Some(&token),
        Some(json!({})),
    );
    assert_eq!(status, 202, "{started}");
    let run = started["runId"].as_str().expect("a run id").to_owned();
    let path = format!("/api/runs/{run}");
    let deadline = Instant::now() + Duration::from_secs(20);
    // The call is in flight once the service has the request.
    while runtime
        .block_on(slow.received_requests())
        .is_none_or(|requests| requests.is_empty())
    {
        assert!(Instant::now() < deadline, "the call never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let cancel_sent = Instant::now();
    let (status, answer) = server.call("POST", &format!("{path}/cancel"), Some(&token), None);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["cancel"], "requested", "it was running: {answer}");
    let shown = loop {
        let (_, shown) = server.call("GET", &path, Some(&token), None);
        if shown["status"] == "cancelled" {
            break shown;
        }
        assert!(
            cancel_sent.elapsed() < Duration::from_secs(20),
            "still not cancelled, though the call would answer only after 40 s: {shown}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let last = shown["steps"]
        .as_array()
        .and_then(|steps| steps.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["status"], "cancelled", "{shown}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|message| message.contains("may have happened")),
        "{shown}"
    );
    server.stop();
}

/// A cancel between two steps ends the run's log with a `cancelled` line: the run sits
/// in a short `flow/pause` when it is cancelled through the API of the process running it.
#[test]
fn a_cancel_between_steps_ends_the_log_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("cancel-between.db");
    let admin = "fa_cancel_between_admin";
    let server = start(&db, Some(admin));
    let token = server.tenant(admin, "Acme");
    let (status, created) = server.call(
        "POST",
        "/api/automations",
        Some(&token),
        Some(json!({"name": "Short pause", "trigger": {"type": "manual"},
            "steps": [{"name": "a", "op": "flow/log", "input": {"message": "before"}},
                      {"name": "p", "op": "flow/pause", "input": {"seconds": 3}},
                      {"name": "b", "op": "flow/log", "input": {"message": "after"}}]})),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("an id");
    let (_, started) = server.call(
        "POST",
        &format!("/api/automations/{id}/runs"),
        Some(&token),
        Some(json!({})),
    );
    let path = format!("/api/runs/{}", started["runId"].as_str().expect("a run id"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, shown) = server.call("GET", &path, Some(&token), None);
        if shown["status"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "never running: {shown}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, answer) = server.call("POST", &format!("{path}/cancel"), Some(&token), None);
    assert_eq!(status, 200, "{answer}");
    let shown = loop {
        let (_, shown) = server.call("GET", &path, Some(&token), None);
        if shown["status"] == "cancelled" {
            break shown;
        }
        assert!(Instant::now() < deadline, "never cancelled: {shown}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let steps = shown["steps"].as_array().cloned().unwrap_or_default();
    let last = steps.last().cloned().unwrap_or_default();
    assert_eq!(
        (&last["op"], &last["status"]),
        (&json!("run/lifecycle"), &json!("cancelled")),
        "the log ends with the cancel: {shown}"
    );
    assert!(
        steps.iter().all(|step| step["name"] != "b"),
        "nothing after the cancel ran: {shown}"
    );
    server.stop();
}

/// The longest `flow/pause` is the server's setting (`FRONTA_MAX_PAUSE`): a literal over
/// it is refused on save naming the setting, one within is saved; a setting above the
/// ceiling stops the server before it serves.
#[test]
fn the_longest_pause_is_the_servers_setting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("pause.db");
    let admin = "fa_pause_admin_token";
    let server = start_with(&db, Some(admin), &[("FRONTA_MAX_PAUSE", "1h")]);
    let token = server.tenant(admin, "Acme");
    let pausing = |seconds: u64| {
        json!({"name": format!("Pause {seconds}"), "trigger": {"type": "manual"},
               "steps": [{"name": "p", "op": "flow/pause", "input": {"seconds": seconds}}]})
    };
    let (status, refused) = server.call(
        "POST",
        "/api/automations",
        Some(&token),
        Some(pausing(3601)),
    );
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused.to_string().contains("outside 0 … 3600")
            && refused.to_string().contains("--max-pause"),
        "the refusal names the bound and the setting: {refused}"
    );
    let (status, saved) = server.call(
        "POST",
        "/api/automations",
        Some(&token),
        Some(pausing(3600)),
    );
    assert_eq!(status, 201, "{saved}");
    server.stop();

    let mut child = Command::new(FRONTA)
        .arg("--database")
        .arg(dir.path().join("ceiling.db"))
        .args(["serve", "--listen", "127.0.0.1:0", "--max-pause", "4000d"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fronta serve starts");
    let started = std::time::Instant::now();
    let exit = loop {
        if let Some(exit) = child.try_wait().expect("wait") {
            break exit;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("fronta serve took a max pause over the ceiling and served");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(!exit.success(), "refused: {stderr}");
    assert!(stderr.contains("--max-pause"), "{stderr}");
}
