//! Poll automations end to end in one process: the scheduler enqueues a run per period,
//! the executor polls an HTTP source (wiremock) first, keeps only items past the
//! automation's cursor, publishes them as `poll.items` for a `forEach`, and moves the
//! cursor durably. Each item is handed to a sink endpoint, so a lost or repeated item
//! shows there. Time is a moved `ManualClock`. A mail poll reads a real dovecot (see
//! `connectors/tests/dovecot`) and turns each new message into a ticket.

mod support;

#[path = "../../connectors/tests/dovecot/mod.rs"]
mod dovecot;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use fronta_automation::poll::{Advance, PollCursors, StoredCursor};
use fronta_automation::scheduler::{Scheduler, SchedulerConfig};
use fronta_automation::store::{AutomationId, AutomationStore, StoreResult};
use fronta_desk::{DeskError, TenantId};
use fronta_engine::{Dispatcher, ManualClock, RunStore, Trigger as RunTrigger};
use serde_json::{Value, json};
use support::Harness;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The source: answers its current list of items.
#[derive(Clone, Default)]
struct Source(Arc<Mutex<Vec<Value>>>);

impl Source {
    fn set(&self, ids: &[i64]) {
        *self.0.lock().expect("lock") = ids
            .iter()
            .map(|id| json!({"id": id, "title": format!("Order {id}")}))
            .collect();
    }
}

impl Respond for Source {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let items = self.0.lock().expect("lock").clone();
        ResponseTemplate::new(200).set_body_json(json!({"data": {"items": items}}))
    }
}

struct Setup {
    harness: Harness,
    clock: ManualClock,
    server: MockServer,
    source: Source,
    token: String,
    automation: String,
    scheduler: Scheduler,
}

fn start() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339("2026-03-02T10:00:00Z")
        .expect("an instant")
        .with_timezone(&chrono::Utc)
}

async fn setup(harness: Harness, clock: ManualClock, items_path: &str) -> Setup {
    let server = MockServer::start().await;
    let source = Source::default();
    Mock::given(method("GET"))
        .and(path("/orders"))
        .respond_with(source.clone())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/sink"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": true})))
        .mount(&server)
        .await;
    let (_, token) = harness.tenant("Acme").await;
    let automation = harness
        .automation(
            &token,
            json!({
                "name": "Orders",
                "trigger": {"type": "poll", "source": "http", "intervalSec": 60,
                            "request": {"url": format!("{}/orders", server.uri()),
                                        "query": {"after": "{{_poll.cursor}}"}},
                            "items": items_path, "cursor": "id"},
                "steps": [{"name": "each", "type": "forEach", "items": "{{poll.items}}", "as": "order",
                           "steps": [{"name": "deliver", "op": "http/request",
                                      "input": {"method": "POST", "url": format!("{}/sink", server.uri()),
                                                "body": {"id": "{{order.id}}", "title": "{{order.title}}"}}}]}]
            }),
        )
        .await;
    let automations: Arc<dyn AutomationStore> = Arc::new(harness.store.clone());
    let dispatcher = Dispatcher::from_registry(
        Arc::new(harness.store.clone()) as Arc<dyn RunStore>,
        &harness.registry,
    );
    let scheduler = Scheduler::new(
        automations,
        dispatcher,
        Arc::new(clock.clone()),
        SchedulerConfig::default(),
    );
    Setup {
        harness,
        clock,
        server,
        source,
        token,
        automation: automation["id"].as_str().expect("an id").to_owned(),
        scheduler,
    }
}

impl Setup {
    /// What the sink received, in order.
    async fn delivered(&self) -> Vec<i64> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|request| request.url.path() == "/sink")
            .filter_map(|request| {
                let body: Value = serde_json::from_slice(&request.body).ok()?;
                body["id"].as_i64()
            })
            .collect()
    }

    async fn fetches(&self) -> Vec<String> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|request| request.url.path() == "/orders")
            .map(|request| request.url.query().unwrap_or("").to_owned())
            .collect()
    }

    /// One period: move the clock past it, tick, run everything due.
    async fn period(&self) -> Value {
        self.clock.advance(Duration::from_secs(61));
        let report = self.scheduler.tick().await;
        assert_eq!(report.enqueued, 1, "one poll run per period: {report:?}");
        self.harness.drain().await;
        self.newest_run().await
    }

    async fn newest_run(&self) -> Value {
        let page = self
            .harness
            .get(
                &format!("/api/runs?automation={}", self.automation),
                &self.token,
            )
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.json);
        let newest = page.json["items"]
            .as_array()
            .and_then(|runs| {
                runs.iter()
                    .filter(|run| run["status"] != "scheduled" && run["status"] != "queued")
                    .max_by_key(|run| run["createdAt"].as_str().unwrap_or("").to_owned())
            })
            .cloned()
            .expect("a run");
        let one = self
            .harness
            .get(
                &format!("/api/runs/{}", newest["id"].as_str().expect("id")),
                &self.token,
            )
            .await;
        one.json
    }
}

fn poll_line(run: &Value) -> Value {
    run["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|step| step["name"] == "poll"))
        .cloned()
        .unwrap_or_else(|| panic!("no poll step in {run:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_poll_takes_every_item_first_then_only_new_ones_and_an_empty_poll_ends_quickly() {
    let clock = ManualClock::new(start());
    let harness = Harness::with_limits(Default::default(), clock.clone());
    let setup = setup(harness, clock, "body.data.items").await;
    setup.source.set(&[2, 1, 3]);

    let first = setup.period().await;
    assert_eq!(first["status"], "completed", "{first:#}");
    assert_eq!(first["trigger"], json!(RunTrigger::Poll.as_str()));
    let line = poll_line(&first);
    assert_eq!(line["op"], "poll/http");
    assert_eq!(line["message"], "3 new items; cursor → 3", "{line:#}");
    assert_eq!(
        setup.delivered().await,
        vec![1, 2, 3],
        "oldest first, each once"
    );
    assert_eq!(
        setup.fetches().await,
        vec![String::new()],
        "no cursor yet: a null query value is left out"
    );

    setup.source.set(&[1, 2, 3, 4, 5]);
    let second = setup.period().await;
    assert_eq!(second["status"], "completed", "{second:#}");
    assert_eq!(poll_line(&second)["message"], "2 new items; cursor 3 → 5");
    assert_eq!(
        setup.delivered().await,
        vec![1, 2, 3, 4, 5],
        "only 4 and 5 were new"
    );
    assert_eq!(
        setup.fetches().await.last().map(String::as_str),
        Some("after=3"),
        "the request names the stored cursor"
    );

    let empty = setup.period().await;
    assert_eq!(empty["status"], "completed", "{empty:#}");
    assert_eq!(poll_line(&empty)["message"], "no new items; cursor stays 5");
    assert_eq!(
        empty["steps"].as_array().map(Vec::len),
        Some(1),
        "the tree did not run: {empty:#}"
    );
    assert_eq!(setup.delivered().await.len(), 5, "nothing delivered again");
}

/// The cursor store refuses the first move, as if the process died between the poll's
/// checkpoint and the move.
struct FailFirstMove {
    inner: Arc<dyn PollCursors>,
    failures_left: AtomicUsize,
}

#[async_trait::async_trait]
impl PollCursors for FailFirstMove {
    async fn poll_cursor_get(
        &self,
        tenant: TenantId,
        automation: AutomationId,
    ) -> StoreResult<Option<StoredCursor>> {
        self.inner.poll_cursor_get(tenant, automation).await
    }

    async fn poll_cursor_advance(
        &self,
        tenant: TenantId,
        automation: AutomationId,
        from: Option<&Value>,
        to: &Value,
        run: &str,
    ) -> StoreResult<Advance> {
        if self
            .failures_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .is_ok()
        {
            return Err(DeskError::Unavailable(
                "injected: the process died here".into(),
            ));
        }
        self.inner
            .poll_cursor_advance(tenant, automation, from, to, run)
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_between_the_polls_checkpoint_and_the_cursor_move_loses_and_repeats_nothing() {
    let clock = ManualClock::new(start());
    let harness = Harness::with_poll_cursors(
        clock.clone(),
        Box::new(|inner| {
            Arc::new(FailFirstMove {
                inner,
                failures_left: AtomicUsize::new(1),
            })
        }),
    );
    let setup = setup(harness, clock, "body.data.items").await;
    setup.source.set(&[1, 2]);
    setup.clock.advance(Duration::from_secs(61));
    assert_eq!(setup.scheduler.tick().await.enqueued, 1);
    setup.harness.drain().await;
    // The retry waits out its backoff on the moved clock.
    for _ in 0..3 {
        setup.clock.advance(Duration::from_secs(60));
        setup.harness.drain().await;
    }
    let run = setup.newest_run().await;
    assert_eq!(run["status"], "completed", "{run:#}");
    assert_eq!(run["attempts"], json!(1), "one retry: {run:#}");
    assert_eq!(
        setup.fetches().await.len(),
        1,
        "the retry resumed from the checkpoint and did not fetch again"
    );
    assert_eq!(setup.delivered().await, vec![1, 2], "each item once");

    setup.source.set(&[1, 2, 3]);
    let next = setup.period().await;
    assert_eq!(poll_line(&next)["message"], "1 new items; cursor 2 → 3");
    assert_eq!(
        setup.delivered().await,
        vec![1, 2, 3],
        "the cursor had moved to 2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_failing_after_the_poll_is_retried_without_polling_again() {
    let clock = ManualClock::new(start());
    let harness = Harness::with_limits(Default::default(), clock.clone());
    let setup = setup(harness, clock, "body.data.items").await;
    // The sink is down for its first call.
    Mock::given(method("POST"))
        .and(path("/sink"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&setup.server)
        .await;
    setup.source.set(&[7, 8]);
    setup.clock.advance(Duration::from_secs(61));
    assert_eq!(setup.scheduler.tick().await.enqueued, 1);
    setup.harness.drain().await;
    // The retry waits out its backoff on the moved clock.
    for _ in 0..3 {
        setup.clock.advance(Duration::from_secs(60));
        setup.harness.drain().await;
    }
    let run = setup.newest_run().await;
    assert_eq!(run["status"], "completed", "{run:#}");
    assert_eq!(setup.fetches().await.len(), 1, "polled once");
    assert_eq!(
        setup.delivered().await,
        vec![7, 7, 8],
        "7 failed once (503) and was delivered on the retry; 8 once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_items_path_is_a_final_error_naming_it_and_the_cursor_stays() {
    let clock = ManualClock::new(start());
    let harness = Harness::with_limits(Default::default(), clock.clone());
    let setup = setup(harness, clock, "body.data.rows").await;
    setup.source.set(&[1]);
    let run = setup.period().await;
    assert_eq!(run["status"], "failed", "{run:#}");
    assert_eq!(run["attempts"], json!(0), "final, not retried: {run:#}");
    let error = run["lastError"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.contains("trigger.items: the answer has nothing at \"body.data.rows\""),
        "{run:#}"
    );
    assert!(setup.delivered().await.is_empty());
    let automation: AutomationId = setup.automation.parse().expect("an id");
    let tenant = setup
        .harness
        .store
        .automations_timed()
        .await
        .expect("timed")[0]
        .tenant;
    assert_eq!(
        PollCursors::poll_cursor_get(&setup.harness.store, tenant, automation)
            .await
            .expect("get"),
        None,
        "no cursor moved"
    );
}

#[tokio::test]
async fn a_poll_automation_without_its_source_settings_is_refused_on_save_naming_the_fields() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let reply = harness
        .post(
            "/api/automations",
            &token,
            json!({"name": "Inbox", "trigger": {"type": "poll", "source": "mail",
                   "mailbox": {"host": "imap.firm.test", "user": "desk", "password": "hunter2"}}}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.json
    );
    let text = reply.json.to_string();
    assert!(text.contains("trigger.mailbox.password"), "{text}");
    assert!(
        !text.contains("hunter2\""),
        "a literal password is not echoed back: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_poll_turns_each_new_message_into_a_ticket_once() {
    let Some(imap) = dovecot::Dovecot::start() else {
        return;
    };
    let message = |id: &str, subject: &str| {
        format!(
            "From: Eva Novak <eva@shop.test>\r\nTo: desk@firm.test\r\nSubject: {subject}\r\n\
             Message-ID: <{id}@shop.test>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n\
             Please help with {subject}.\r\n"
        )
    };
    // Real time: the first poll takes the messages received since the automation was
    // saved, and IMAP's received times are the server's clock.
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let put = harness
        .call(
            axum::http::Method::PUT,
            "/api/secrets/mail",
            Some(&token),
            Some(json!({"value": dovecot::PASSWORD})),
        )
        .await;
    assert!(put.status.is_success(), "secret stored: {}", put.json);
    let reply = harness
        .post(
            "/api/ticket-types",
            &token,
            json!({"name": "mail", "statuses": ["new", "done"],
                   "fields": [{"name": "from", "type": "string"}]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
    let created = harness
        .automation(
            &token,
            json!({
                "name": "Support inbox",
                "trigger": {"type": "poll", "source": "mail",
                            "mailbox": {"host": "127.0.0.1", "port": imap.port, "tls": false,
                                        "user": dovecot::USER, "password": "{{secrets.mail}}"}},
                "steps": [{"name": "each", "type": "forEach", "items": "{{poll.items}}", "as": "mail",
                           "steps": [{"name": "ticket", "op": "ticket/upsert",
                                      "input": {"externalId": "{{mail.messageId}}", "title": "{{mail.subject}}",
                                                "type": "mail", "fields": {"from": "{{mail.from}}"}}}]}]
            }),
        )
        .await;
    let automation: AutomationId = created["id"].as_str().expect("an id").parse().expect("id");
    imap.deliver_maildir("one", &message("m1", "printer on fire"));
    imap.deliver_maildir("two", &message("m2", "VPN down"));
    let stored = harness
        .store
        .automations_timed()
        .await
        .expect("timed")
        .into_iter()
        .find(|stored| stored.id == automation)
        .expect("the poll automation");
    let dispatcher = Dispatcher::from_registry(
        Arc::new(harness.store.clone()) as Arc<dyn RunStore>,
        &harness.registry,
    );
    let poll_once = |context: &str| {
        let request = fronta_automation::executor::run_request(
            &stored,
            RunTrigger::Poll,
            serde_json::from_value(json!({"_poll": {"source": "mail", "tick": context}}))
                .expect("a context"),
        );
        let dispatcher = dispatcher.clone();
        async move {
            dispatcher.enqueue(request).await.expect("enqueued");
        }
    };
    poll_once("first").await;
    harness.drain().await;
    assert_eq!(
        mail_titles(&harness, &token).await,
        vec!["VPN down".to_string(), "printer on fire".to_string()],
        "both messages became tickets"
    );
    let cursor = PollCursors::poll_cursor_get(&harness.store, stored.tenant, automation)
        .await
        .expect("get")
        .expect("the cursor moved");
    assert_eq!(cursor.value["uid"], json!(2), "{:?}", cursor.value);

    imap.deliver_maildir("three", &message("m3", "new laptop"));
    poll_once("second").await;
    harness.drain().await;
    let titles = mail_titles(&harness, &token).await;
    assert_eq!(titles.len(), 3, "one more ticket: {titles:?}");
    assert!(titles.contains(&"new laptop".to_string()), "{titles:?}");
    let cursor = PollCursors::poll_cursor_get(&harness.store, stored.tenant, automation)
        .await
        .expect("get")
        .expect("a cursor");
    assert_eq!(cursor.value["uid"], json!(3), "{:?}", cursor.value);
}

async fn mail_titles(harness: &Harness, token: &str) -> Vec<String> {
    let page = harness.get("/api/tickets?type=mail", token).await;
    let mut titles: Vec<String> = page.json["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|ticket| ticket["title"].as_str().unwrap_or("").to_owned())
        .collect();
    titles.sort();
    titles
}
