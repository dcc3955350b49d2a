//! The seed's verified scenario, end to end on one store: a firm with warehouse (3),
//! shipping (2) and IT (3); ticket types `order` and `error`; orders arriving by webhook
//! become `order` tickets, the ticket's creation routes them to the least busy warehouse
//! member (5001 and 5002 to different people), and a converter error with the nested path
//! `errors.0.message` becomes an `error` ticket for IT plus an incident whose detail only
//! admins see. Runs go through the real engine worker, the executor and the store.
//!
//! Also here: the executor's durability on a store — a run crashed between two steps
//! resumes at the next step without repeating the first; a 26-item loop of 2 steps is
//! not stopped by the tree's step cap; `MAX_ACTIONS` stops a runaway loop saying so; a
//! change by an automation never starts itself; a long pause snoozes the run.

use std::sync::Arc;
use std::time::Duration;

use fronta_automation::executor::{self, ExecState, Runtime};
use fronta_automation::store::{AutomationId, AutomationStore, StoredAutomation, TicketEventSink};
use fronta_automation::{Automation, Trigger, contract};
use fronta_desk::store::TicketFilter;
use fronta_desk::{DeskStore, FieldDef, IncidentStatus, TenantId};
use fronta_engine::Clock as _;
use fronta_engine::{
    ClaimParams, Dispatcher, ManualClock, Registry, RunFilter, RunStatus, RunStore,
    Trigger as RunTrigger, Worker, WorkerConfig,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The firm's one outside service: an HTTP source whose list of items is empty, so a
/// poll automation's run finds nothing new (the poll itself is pinned in each store's
/// and the server's poll tests).
struct EmptyInbox;

/// The `/flaky/` URLs [`EmptyInbox`] failed once already (each test uses its own URL).
static FAILED_ONCE: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The inputs of every `mail/send` [`EmptyInbox`] took, as rendered (each test finds its
/// own by their text).
static SENT: std::sync::Mutex<Vec<serde_json::Map<String, Value>>> =
    std::sync::Mutex::new(Vec::new());

#[async_trait::async_trait]
impl fronta_automation::connector::Connector for EmptyInbox {
    async fn call(
        &self,
        call: fronta_automation::connector::ConnectorCall<'_>,
    ) -> Result<
        fronta_automation::connector::ConnectorReply,
        fronta_automation::connector::ConnectorFailure,
    > {
        match call.op {
            // A service that fails a URL with `/flaky/` once (503), then answers.
            fronta_automation::Op::HttpRequest
                if call
                    .input
                    .get("url")
                    .and_then(Value::as_str)
                    .is_some_and(|url| url.contains("/flaky/"))
                    && FAILED_ONCE
                        .lock()
                        .expect("the set")
                        .insert(call.input["url"].to_string()) =>
            {
                Err(fronta_automation::connector::ConnectorFailure::new(
                    fronta_automation::retry::Cause::HttpStatus(503),
                    "503 Service Unavailable",
                ))
            }
            fronta_automation::Op::HttpRequest => {
                Ok(fronta_automation::connector::ConnectorReply {
                    outputs: json!({"status": 200, "headers": {}, "body": {"items": []}})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    message: "200 OK".into(),
                })
            }
            // A mail server that takes every message: kept in [`SENT`] as the step
            // rendered it (the SMTP side is tested against a real server in
            // `server/tests/mail.rs`).
            fronta_automation::Op::MailSend => {
                let subject = call.input.get("subject").cloned().unwrap_or(Value::Null);
                SENT.lock().expect("the list").push(call.input.clone());
                Ok(fronta_automation::connector::ConnectorReply {
                    outputs: json!({"messageId": format!("{}@test", call.run_id),
                                    "reply": "250 2.0.0 Ok", "subject": subject})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                    message: "250 2.0.0 Ok".into(),
                })
            }
            // A bug inside a step, on purpose: the executor must survive it.
            fronta_automation::Op::McpCallTool
                if call.input.get("tool").and_then(Value::as_str) == Some("panic") =>
            {
                panic!("the test connector panics")
            }
            other => Err(fronta_automation::connector::not_installed(other)),
        }
    }
}

/// Every store the runtime needs, on one database, and a way to install the event sink.
pub struct RuntimeStores {
    pub runs: Arc<dyn RunStore>,
    pub desk: Arc<dyn DeskStore>,
    pub automations: Arc<dyn AutomationStore>,
    pub cursors: Arc<dyn fronta_automation::poll::PollCursors>,
    pub install_sink: Box<dyn Fn(TicketEventSink) + Send + Sync>,
}

/// Opens fresh runtime stores for the scenario cases.
#[async_trait::async_trait]
pub trait RuntimeFactory: Send + Sync {
    /// A fresh database whose run store judges time by `clock`.
    async fn open_runtime(&self, clock: ManualClock) -> RuntimeStores;
}

struct Firm {
    stores: RuntimeStores,
    clock: ManualClock,
    registry: Arc<Registry>,
    dispatcher: Dispatcher,
    tenant: TenantId,
}

const LEASE: Duration = Duration::from_secs(30);

impl Firm {
    async fn open(factory: &dyn RuntimeFactory) -> Firm {
        Self::open_at(factory, chrono::Utc::now()).await
    }

    /// As [`Firm::open`], with the clock starting at `start`.
    async fn open_at(factory: &dyn RuntimeFactory, start: chrono::DateTime<chrono::Utc>) -> Firm {
        let clock = ManualClock::new(start);
        let stores = factory.open_runtime(clock.clone()).await;
        let runtime = Arc::new(Runtime {
            desk: stores.desk.clone(),
            automations: stores.automations.clone(),
            clock: Arc::new(clock.clone()),
            connectors: Some(Arc::new(EmptyInbox)),
            secrets: None,
            storage_wait: executor::DEFAULT_STORAGE_WAIT,
            cursors: Some(stores.cursors.clone()),
            poll: Default::default(),
            max_pause: fronta_automation::steps::MAX_PAUSE,
        });
        let mut registry = Registry::new();
        executor::register(&mut registry, runtime, LEASE).expect("automation kinds register");
        let registry = Arc::new(registry);
        let dispatcher = Dispatcher::from_registry(stores.runs.clone(), &registry);
        (stores.install_sink)(executor::event_sink(dispatcher.clone()));
        let (tenant, _token) = stores.desk.tenant_create("Acme").await.expect("tenant");
        let firm = Firm {
            stores,
            clock,
            registry,
            dispatcher,
            tenant: tenant.id,
        };
        for (group, people) in [
            ("warehouse", &["Eva", "Jan", "Petr"][..]),
            ("shipping", &["Lucie", "Marek"][..]),
            ("IT", &["Ota", "Rita", "Sara"][..]),
        ] {
            let created = firm
                .stores
                .desk
                .group_create(firm.tenant, group)
                .await
                .expect("group");
            for person in people {
                firm.stores
                    .desk
                    .member_add(firm.tenant, created.id, person, None, 5)
                    .await
                    .expect("member");
            }
        }
        let order_statuses = vec!["waiting-to-pack".to_string(), "shipped".to_string()];
        let amount = FieldDef {
            name: "amount".into(),
            field_type: fronta_desk::FieldType::Number,
        };
        firm.stores
            .desk
            .ticket_type_create(firm.tenant, "order", &order_statuses, &[amount])
            .await
            .expect("order type");
        firm.stores
            .desk
            .ticket_type_create(
                firm.tenant,
                "error",
                &["new".to_string(), "resolved".to_string()],
                &[],
            )
            .await
            .expect("error type");
        firm
    }

    async fn automation(&self, json: Value) -> StoredAutomation {
        let automation = Automation::from_value(&json)
            .unwrap_or_else(|problems| panic!("automation parses: {problems:?}"));
        self.stores
            .automations
            .automation_create(
                self.tenant,
                automation,
                None,
                fronta_automation::versions::BY_TENANT,
            )
            .await
            .expect("automation saved")
    }

    /// What `POST /webhook/{token}` does: the contract, then a durable enqueue.
    async fn webhook(&self, stored: &StoredAutomation, body: Value) -> fronta_engine::RunId {
        let Trigger::Webhook { params } = &stored.automation.trigger else {
            panic!("not a webhook automation");
        };
        let context = contract::extract(params, &body)
            .unwrap_or_else(|err| panic!("the body fits the contract: {err:?}"));
        self.dispatcher
            .enqueue(executor::run_request(stored, RunTrigger::Webhook, context))
            .await
            .expect("webhook run enqueued")
            .id()
    }

    /// What a manual run does (`POST /api/automations/{id}/runs` with `context` as the
    /// run's start): a durable enqueue.
    async fn manual(
        &self,
        stored: &StoredAutomation,
        context: serde_json::Map<String, Value>,
    ) -> fronta_engine::RunId {
        self.dispatcher
            .enqueue(executor::run_request(stored, RunTrigger::Manual, context))
            .await
            .expect("manual run enqueued")
            .id()
    }

    /// The tenant's incidents.
    async fn incidents(&self) -> Vec<fronta_desk::Incident> {
        self.stores
            .desk
            .incident_list(Some(self.tenant))
            .await
            .expect("incidents")
    }

    fn worker_config(&self) -> WorkerConfig {
        WorkerConfig {
            name: "scenario".into(),
            max_in_flight: 4,
            poll_interval: Duration::from_millis(10),
            until_idle: true,
            ..WorkerConfig::default()
        }
    }

    async fn drain(&self) {
        let worker = Worker::new(
            self.stores.runs.clone(),
            self.registry.clone(),
            self.worker_config(),
        )
        .expect("worker");
        tokio::time::timeout(
            Duration::from_secs(30),
            worker.run(CancellationToken::new()),
        )
        .await
        .expect("the worker went idle within 30 s")
        .expect("the worker ran");
    }

    /// The tenant's first ticket (the scenario made one).
    async fn first_ticket(&self) -> fronta_desk::Ticket {
        self.stores
            .desk
            .ticket_list(self.tenant, TicketFilter::default())
            .await
            .expect("tickets")
            .remove(0)
    }

    async fn run(&self, id: fronta_engine::RunId) -> fronta_engine::Run {
        self.stores
            .runs
            .run_get(id)
            .await
            .expect("get run")
            .expect("run exists")
    }
}

fn orders_automation() -> Value {
    json!({
        "name": "Orders from the web shop",
        "trigger": {"type": "webhook", "params": [
            {"name": "kind", "path": "kind", "type": "string", "required": true},
            {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}
        ]},
        "steps": [
            {"name": "ticket", "op": "ticket/upsert",
             "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
                       "type": "order", "status": "waiting-to-pack", "tags": ["waiting-to-pack"]}}
        ]
    })
}

fn routing_automation() -> Value {
    json!({
        "name": "Orders to the warehouse",
        "trigger": {"type": "event", "event": "ticket.created"},
        "steps": [
            {"name": "isOrder", "type": "condition", "match": "all",
             "rules": [{"field": "ticket.type", "operator": "eq", "value": "order"},
                       {"field": "ticket.tags", "operator": "contains", "value": "waiting-to-pack"}],
             "then": [{"name": "assign", "op": "ticket/assign-least-busy",
                       "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}]}
        ]
    })
}

fn converter_automation() -> Value {
    json!({
        "name": "Converter errors",
        "trigger": {"type": "webhook", "params": [
            {"name": "docId", "path": "document.id", "type": "string", "required": true},
            {"name": "errorMessage", "path": "errors.0.message", "type": "string", "required": true}
        ]},
        "steps": [
            {"name": "ticket", "op": "ticket/upsert",
             "input": {"externalId": "doc-{{docId}}", "title": "Converter error: {{errorMessage}}",
                       "type": "error", "status": "new", "tags": ["converter"]}},
            {"name": "assign", "op": "ticket/assign-least-busy", "input": {"ticket": "{{ticket.id}}", "group": "IT"}},
            {"name": "alert", "op": "incident/create",
             "input": {"title": "Document {{docId}} could not be read", "impact": "{{errorMessage}}", "ticket": "{{ticket.id}}"}}
        ]
    })
}

/// The seed's scenario: two orders to two warehouse people, a converter error to IT with
/// an incident.
pub async fn seed_scenario_orders_and_converter_error(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    let orders = firm.automation(orders_automation()).await;
    firm.automation(routing_automation()).await;
    let converter = firm.automation(converter_automation()).await;

    let first = firm
        .webhook(
            &orders,
            json!({"kind": "order.created", "data": {"order": {"id": "5001"}}}),
        )
        .await;
    firm.drain().await;
    let second = firm
        .webhook(
            &orders,
            json!({"kind": "order.created", "data": {"order": {"id": "5002"}}}),
        )
        .await;
    let error = firm
        .webhook(&converter, json!({"document": {"id": "D-99"}, "errors": [{"code": "OCR_FAIL", "message": "Could not read the amount"}]}))
        .await;
    firm.drain().await;

    for id in [first, second, error] {
        let run = firm.run(id).await;
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "run {id} completed: {:?}",
            run.last_error
        );
        assert_eq!(
            (run.attempts, run.reclaims),
            (0, 0),
            "run {id} spent nothing"
        );
    }
    let tickets = firm
        .stores
        .desk
        .ticket_list(firm.tenant, TicketFilter::default())
        .await
        .expect("tickets");
    let order = |external: &str| {
        tickets
            .iter()
            .find(|ticket| ticket.external_id.as_deref() == Some(external))
            .unwrap_or_else(|| panic!("ticket {external} exists: {tickets:?}"))
    };
    let (t5001, t5002, doc) = (order("order-5001"), order("order-5002"), order("doc-D-99"));
    assert_eq!(
        t5001.ticket_type.as_deref(),
        Some("order"),
        "5001 is an order"
    );
    assert_eq!(
        t5001.status.as_deref(),
        Some("waiting-to-pack"),
        "5001 waits to be packed"
    );
    assert!(
        t5001.tags.contains(&"waiting-to-pack".to_string()),
        "5001 is tagged"
    );
    assert_eq!(
        t5001.group.as_deref(),
        Some("warehouse"),
        "5001 went to the warehouse"
    );
    assert_eq!(
        t5002.group.as_deref(),
        Some("warehouse"),
        "5002 went to the warehouse"
    );
    let (a1, a2) = (
        t5001.assignee.clone().expect("5001 assigned"),
        t5002.assignee.clone().expect("5002 assigned"),
    );
    assert_ne!(
        a1.id, a2.id,
        "the second order goes to another person ({} and {})",
        a1.name, a2.name
    );
    assert_eq!(
        doc.ticket_type.as_deref(),
        Some("error"),
        "the converter error is an error ticket"
    );
    assert_eq!(
        doc.title, "Converter error: Could not read the amount",
        "the nested path errors.0.message arrived"
    );
    assert_eq!(doc.group.as_deref(), Some("IT"), "IT got the error");
    assert!(doc.assignee.is_some(), "an IT person has it");

    let incidents = firm.incidents().await;
    assert_eq!(incidents.len(), 1, "one incident: {incidents:?}");
    assert_eq!(
        incidents[0].title, "Document D-99 could not be read",
        "the incident's title"
    );
    assert_eq!(incidents[0].status, IncidentStatus::Open, "it is open");
    assert_eq!(incidents[0].ticket, Some(doc.id), "it names the ticket");

    let log = firm
        .stores
        .desk
        .ticket_log(firm.tenant, t5001.id)
        .await
        .expect("log");
    assert!(
        log.iter()
            .any(|entry| entry.kind == "run" && entry.message.contains("Orders to the warehouse")),
        "the routing run's result is in the ticket's log: {log:?}"
    );
}

/// A change made by automation X never starts X, and an automation re-running over one
/// ticket is stopped after 5 runs in a minute, saying so on the ticket.
pub async fn an_automation_never_triggers_itself(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    // On every change, add a tag: its own change must not start it again.
    firm.automation(json!({
        "name": "Tagger",
        "trigger": {"type": "event", "event": "ticket.changed"},
        "steps": [{"name": "tag", "op": "ticket/add-tags", "input": {"ticket": "{{ticket.id}}", "tags": ["seen"]}}]
    }))
    .await;
    let orders = firm.automation(orders_automation()).await;
    firm.webhook(
        &orders,
        json!({"kind": "x", "data": {"order": {"id": "7"}}}),
    )
    .await;
    firm.drain().await;
    let ticket = firm.first_ticket().await;
    let change = fronta_desk::store::TicketChange {
        status: Some("shipped".into()),
        ..Default::default()
    };
    firm.stores
        .desk
        .ticket_change(firm.tenant, ticket.id, change, fronta_desk::Origin::Person)
        .await
        .expect("a person's change");
    firm.drain().await;
    let runs = firm
        .stores
        .runs
        .run_list(RunFilter {
            kind: Some(executor::AUTOMATION_KIND.into()),
            ..RunFilter::default()
        })
        .await
        .expect("runs");
    assert_eq!(
        runs.len(),
        2,
        "the webhook run and one Tagger run, not a loop: {runs:?}"
    );
    let ticket = firm
        .stores
        .desk
        .ticket_get(firm.tenant, ticket.id)
        .await
        .expect("ticket");
    assert!(
        ticket.tags.contains(&"seen".to_string()),
        "the tagger ran once: {:?}",
        ticket.tags
    );
}

/// A durable automation run crashed after its first step resumes at the second and does
/// not repeat the first (the incident count proves the first ran once).
pub async fn crashed_automation_run_resumes_at_the_next_step(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    let stored = firm
        .automation(json!({
            "name": "Two steps",
            "trigger": {"type": "manual"},
            "steps": [
                {"name": "first", "op": "incident/create", "input": {"title": "first step ran", "impact": "counted"}},
                {"name": "second", "op": "flow/log", "input": {"message": "second step"}}
            ]
        }))
        .await;
    let id = firm.manual(&stored, serde_json::Map::new()).await;
    // A worker that "dies" right after the first step's checkpoint: run it with a claim
    // we own, let the executor do one step, then abandon it by never finishing.
    let claimed = firm
        .stores
        .runs
        .run_claim(ClaimParams {
            limit: 1,
            default_lease: LEASE,
            leases: Default::default(),
            max_reclaims: 5,
            holder: None,
        })
        .await
        .expect("claim");
    assert_eq!(claimed.claimed.len(), 1, "claimed the run");
    let mut state: ExecState = ExecState::decode(
        &serde_json::to_vec(&json!({
            "stack": [{"block": [], "index": 0}],
            "context": {}, "executed": 0, "steps": [], "ticket": null, "pauseUntil": null
        }))
        .expect("json"),
    )
    .expect("a fresh state decodes");
    // Do the first step as the dying worker would, through the real store.
    let (incident, opened) = firm
        .stores
        .desk
        .incident_report(
            firm.tenant,
            fronta_desk::store::IncidentReport {
                cause: format!("automation:{}:step:first", stored.id),
                title: "first step ran".into(),
                impact: "counted".into(),
                detail: json!({}),
                ticket: None,
            },
        )
        .await
        .expect("first step's side effect");
    assert!(opened, "the first step opened the incident");
    state.stack[0].index = 1;
    state.executed = 1;
    firm.stores
        .runs
        .run_checkpoint(fronta_engine::CheckpointParams {
            id,
            owner: claimed.claimed[0].owner,
            state: serde_json::to_vec(&state).expect("state"),
            lease: LEASE,
        })
        .await
        .expect("checkpoint after the first step");
    // The worker dies; the lease runs out; a real worker reclaims and resumes.
    firm.clock.advance(LEASE * 2);
    firm.drain().await;
    let run = firm.run(id).await;
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "the run finished: {:?}",
        run.last_error
    );
    assert_eq!(
        (run.reclaims, run.attempts),
        (1, 0),
        "one reclaim, no attempt spent"
    );
    let incident = firm
        .stores
        .desk
        .incident_get(Some(firm.tenant), incident.id)
        .await
        .expect("incident");
    assert_eq!(
        incident.count, 1,
        "the first step was not repeated after the crash"
    );
    let steps = run.result.expect("a result")["steps"].clone();
    assert_eq!(
        steps.as_array().map(Vec::len),
        Some(2),
        "the reclaim's line, then only the second step: {steps}"
    );
    assert_eq!(
        (&steps[0]["op"], &steps[0]["status"]),
        (&json!(executor::LIFECYCLE_OP), &json!("reclaimed")),
        "the log says the run was reclaimed: {steps}"
    );
    assert_eq!(steps[1]["name"], "second", "{steps}");
}

/// A loop of 2 steps over 26 items is 52 executed steps: fine (the tree has 3 steps);
/// MAX_ACTIONS stops a run that executes more than 1000 steps, saying so, with an incident.
pub async fn loops_count_against_max_actions_not_the_step_cap(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    let letters: Vec<Value> = (b'a'..=b'z')
        .map(|c| json!((c as char).to_string()))
        .collect();
    let small = firm
        .automation(json!({
            "name": "Alphabet", "trigger": {"type": "webhook", "params": []},
            "steps": [{"name": "each", "type": "forEach", "items": "{{_body.letters}}", "as": "letter", "steps": [
                {"name": "a", "op": "flow/log", "input": {"message": "{{letter}}"}},
                {"name": "b", "op": "flow/log", "input": {"message": "again {{letter}}"}}
            ]}]
        }))
        .await;
    let ok = firm.webhook(&small, json!({"letters": letters})).await;
    let many: Vec<Value> = (0..600).map(|n| json!(n)).collect();
    let big = firm.webhook(&small, json!({"letters": many})).await;
    firm.drain().await;
    let ok = firm.run(ok).await;
    assert_eq!(
        ok.status,
        RunStatus::Completed,
        "26 × 2 steps run: {:?}",
        ok.last_error
    );
    assert_eq!(
        ok.result.expect("result")["steps"].as_array().map(Vec::len),
        Some(53),
        "1 loop + 52 steps logged"
    );
    let big = firm.run(big).await;
    assert_eq!(
        big.status,
        RunStatus::Failed,
        "600 × 2 steps exceed MAX_ACTIONS"
    );
    let error = big.last_error.unwrap_or_default();
    assert!(
        error.contains("MAX_ACTIONS = 1000"),
        "the run says which cap stopped it: {error}"
    );
    let incidents = firm.incidents().await;
    assert_eq!(incidents.len(), 1, "the stopped run opened an incident");
    assert!(
        incidents[0].detail["message"]
            .as_str()
            .unwrap_or("")
            .contains("MAX_ACTIONS"),
        "the detail says why"
    );
    assert!(
        !incidents[0].title.contains("each"),
        "the title names no step: {}",
        incidents[0].title
    );
}

/// A long `flow/pause` snoozes the run (no worker held) and it resumes at the next step
/// once the (store's) clock passes the pause.
pub async fn long_pause_snoozes_and_resumes_at_the_next_step(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    let stored = firm
        .automation(json!({
            "name": "Remind in three days", "trigger": {"type": "manual"},
            "steps": [
                {"name": "wait", "op": "flow/pause", "input": {"seconds": 259200}},
                {"name": "remind", "op": "flow/log", "input": {"message": "three days later"}}
            ]
        }))
        .await;
    let id = firm.manual(&stored, serde_json::Map::new()).await;
    firm.drain().await;
    let run = firm.run(id).await;
    assert_eq!(
        run.status,
        RunStatus::Scheduled,
        "the paused run sleeps as a scheduled run"
    );
    assert_eq!(run.attempts, 0, "a pause spends no attempt");
    let due_in = run.run_at - firm.clock.now();
    assert!(due_in.num_hours() >= 71, "due in three days, got {due_in}");
    firm.clock.advance(Duration::from_secs(259_200 + 1));
    firm.drain().await;
    let run = firm.run(id).await;
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "resumed after the pause: {:?}",
        run.last_error
    );
    let steps = run.result.expect("result")["steps"].clone();
    let names: Vec<&str> = steps
        .as_array()
        .map(|all| all.iter().filter_map(|s| s["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        names,
        vec!["wait", "remind"],
        "the pause ran once, then the next step: {steps}"
    );
    assert_eq!(
        steps[0]["status"], "ok",
        "the pause's line has its final status once it is over: {steps}"
    );
    assert!(
        steps[0]["message"]
            .as_str()
            .is_some_and(|message| message.contains("resumed at")),
        "{steps}"
    );
}

/// Two automations that undo each other's change (X ↔ Y) would loop forever; the loop
/// guard lets each run at most 5 times over one ticket in a minute, and says so on the
/// ticket.
pub async fn a_loop_between_two_automations_is_stopped_and_logged(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    for (name, from, to) in [
        ("Ship", "waiting-to-pack", "shipped"),
        ("Unship", "shipped", "waiting-to-pack"),
    ] {
        firm.automation(json!({
            "name": name,
            "trigger": {"type": "event", "event": "ticket.changed"},
            "steps": [{"name": "check", "type": "condition",
                       "rules": [{"field": "ticket.status", "operator": "eq", "value": from}],
                       "then": [{"name": "flip", "op": "ticket/set-status",
                                 "input": {"ticket": "{{ticket.id}}", "status": to}}]}]
        }))
        .await;
    }
    let orders = firm.automation(orders_automation()).await;
    firm.webhook(
        &orders,
        json!({"kind": "x", "data": {"order": {"id": "9"}}}),
    )
    .await;
    firm.drain().await;
    let ticket = firm.first_ticket().await;
    // A person tags it: the change starts the ping-pong.
    let change = fronta_desk::store::TicketChange {
        add_tags: vec!["vip".into()],
        ..Default::default()
    };
    firm.stores
        .desk
        .ticket_change(firm.tenant, ticket.id, change, fronta_desk::Origin::Person)
        .await
        .expect("a person's change");
    firm.drain().await;
    let runs = firm
        .stores
        .runs
        .run_list(RunFilter {
            kind: Some(executor::AUTOMATION_KIND.into()),
            limit: 1000,
            ..RunFilter::default()
        })
        .await
        .expect("runs");
    let suppressed: Vec<&fronta_engine::Run> = runs
        .iter()
        .filter(|run| run.status == RunStatus::Suppressed)
        .collect();
    assert_eq!(
        suppressed.len(),
        1,
        "the guard stopped the loop once: {} runs",
        runs.len()
    );
    let stopped = suppressed[0];
    let reason = stopped.last_error.as_deref().unwrap_or_default();
    assert!(
        reason.contains("5 times") && reason.contains("Chain: \"") && reason.contains("→ this run"),
        "the reason names the cap and the chain: {reason}"
    );
    let state = ExecState::decode(
        stopped
            .state
            .as_deref()
            .expect("a suppressed run keeps its log"),
    )
    .expect("its state decodes");
    assert_eq!(
        state
            .steps
            .iter()
            .map(|step| step.status.as_str())
            .collect::<Vec<_>>(),
        ["suppressed"],
        "its step log says it was suppressed"
    );
    // Each automation flips the ticket at most 5 times as a link of the chain, plus
    // once when a change made outside the chain (the person's, the webhook's) started it.
    let mut flips: std::collections::HashMap<String, usize> = Default::default();
    for run in &runs {
        let flipped = run.result.as_ref().is_some_and(|result| {
            result["steps"].as_array().is_some_and(|steps| {
                steps
                    .iter()
                    .any(|step| step["name"] == "flip" && step["status"] == "ok")
            })
        });
        if flipped {
            *flips
                .entry(run.payload["automationId"].to_string())
                .or_default() += 1;
        }
    }
    assert!(
        flips.values().all(|&n| n <= 5 + 1) && flips.len() == 2,
        "at most 5 flips in the chain per automation: {flips:?} of {} runs",
        runs.len()
    );
    let log = firm
        .stores
        .desk
        .ticket_log(firm.tenant, ticket.id)
        .await
        .expect("log");
    assert!(
        log.iter()
            .any(|entry| entry.kind == "guard" && entry.message.contains("5 times")),
        "the ticket's log says the guard stopped an automation: {log:?}"
    );
    // A person starts the suppressed run: it runs (the guard does not stop it), flips the
    // ticket, and the loop goes on only until the guard stops it again.
    let stopped = stopped.id;
    assert_eq!(
        firm.stores.runs.run_retry(stopped).await.expect("retry"),
        fronta_engine::RetryReply::Requeued
    );
    firm.drain().await;
    let run = firm.run(stopped).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.last_error);
    let statuses = step_statuses(&run);
    assert_eq!(
        statuses.first().map(String::as_str),
        Some("suppressed"),
        "{statuses:?}"
    );
    assert_eq!(
        statuses.get(1).map(String::as_str),
        Some("retried by hand"),
        "{statuses:?}"
    );
}

/// The scheduler keeps one run ahead for each timed automation: a poll runs now and then
/// one interval after its last run; a cron tick is enqueued ahead for its time; ticks
/// missed while nothing ran them (downtime) run once, counted in the context; a paused
/// automation's pending tick is cancelled. Driven by a moved clock, on the real store.
pub async fn scheduler_keeps_one_run_ahead_and_runs_missed_ticks_once(
    factory: &dyn RuntimeFactory,
) {
    use fronta_automation::scheduler::{Scheduler, SchedulerConfig, TickReport};

    let start = instant("2026-03-02T10:03:00Z");
    let firm = Firm::open_at(factory, start).await;
    let poll = firm
        .automation(json!({
            "name": "Poll the shop", "trigger": {"type": "poll", "source": "http", "intervalSec": 60,
                "request": {"url": "https://shop.test/orders"}, "items": "body.items", "cursor": "id"},
            "steps": [{"name": "note", "op": "flow/log", "input": {"message": "polled at {{_poll.tick}}"}}]
        }))
        .await;
    let quarterly = firm
        .automation(json!({
            "name": "Every quarter hour", "trigger": {"type": "schedule", "cron": "*/15 * * * *"},
            "steps": [{"name": "note", "op": "flow/log",
                       "input": {"message": "tick {{_schedule.scheduledFor}}, missed {{_schedule.missedTicks}}"}}]
        }))
        .await;
    let scheduler = Scheduler::new(
        firm.stores.automations.clone(),
        firm.dispatcher.clone(),
        Arc::new(firm.clock.clone()),
        SchedulerConfig::default(),
    );
    let newest = |stored: &StoredAutomation, prefix: &str| {
        let key = format!("{prefix}:{}", stored.id);
        let runs = firm.stores.runs.clone();
        let tenant = stored.tenant.to_string();
        async move {
            runs.run_find_by_key(&tenant, &key)
                .await
                .expect("find by key")
                .expect("a keyed run")
        }
    };
    let message = |run: &fronta_engine::Run| -> String {
        let steps = run.result.as_ref().expect("a result")["steps"].clone();
        steps[0]["message"].as_str().unwrap_or_default().to_owned()
    };

    let report = scheduler.tick().await;
    assert_eq!(
        report,
        TickReport {
            automations: 2,
            enqueued: 2,
            cancelled: 0,
            skipped: 0
        },
        "one run each"
    );
    assert_eq!(
        scheduler.tick().await.enqueued,
        0,
        "a second tick adds nothing: one pending run per automation"
    );
    let polled = newest(&poll, "poll").await;
    assert_eq!(
        (polled.status, polled.trigger),
        (RunStatus::Queued, RunTrigger::Poll)
    );
    let tick = newest(&quarterly, "schedule").await;
    assert_eq!(
        (tick.status, tick.run_at, tick.trigger),
        (
            RunStatus::Scheduled,
            instant("2026-03-02T10:15:00Z"),
            RunTrigger::Schedule
        ),
        "the cron tick waits, enqueued ahead for its time"
    );

    firm.drain().await;
    assert_eq!(
        firm.run(polled.id).await.status,
        RunStatus::Completed,
        "polled"
    );
    assert_eq!(scheduler.tick().await.enqueued, 1, "the next poll");
    let next_poll = newest(&poll, "poll").await;
    assert_ne!(next_poll.id, polled.id);
    assert_eq!(
        (next_poll.status, next_poll.run_at),
        (RunStatus::Scheduled, instant("2026-03-02T10:04:00Z")),
        "one interval after the last poll"
    );

    firm.clock.set(instant("2026-03-02T10:16:00Z"));
    firm.drain().await;
    let ran = firm.run(tick.id).await;
    assert_eq!(ran.status, RunStatus::Completed, "the 10:15 tick ran");
    assert_eq!(message(&ran), "tick 2026-03-02T10:15:00.000Z, missed 0");
    assert_eq!(scheduler.tick().await.enqueued, 2, "the next of each");
    let next_tick = newest(&quarterly, "schedule").await;
    assert_eq!(
        next_tick.run_at,
        instant("2026-03-02T10:30:00Z"),
        "the next quarter"
    );

    // Downtime: nothing ran from 10:16 to 12:19. The pending 10:30 tick runs late, once;
    // the ticks from 10:45 to 12:15 (seven) were never enqueued and run once, now.
    firm.clock.set(instant("2026-03-02T12:19:00Z"));
    firm.drain().await;
    assert_eq!(firm.run(next_tick.id).await.status, RunStatus::Completed);
    scheduler.tick().await;
    let catch_up = newest(&quarterly, "schedule").await;
    assert_eq!(
        catch_up.run_at,
        instant("2026-03-02T12:19:00Z"),
        "the missed ticks run now"
    );
    firm.drain().await;
    let caught = firm.run(catch_up.id).await;
    assert_eq!(caught.status, RunStatus::Completed);
    assert_eq!(
        message(&caught),
        "tick 2026-03-02T12:15:00.000Z, missed 7",
        "once, for the last missed tick, with the count"
    );
    scheduler.tick().await;
    let ahead = newest(&quarterly, "schedule").await;
    assert_eq!(
        ahead.run_at,
        instant("2026-03-02T12:30:00Z"),
        "back on the quarter"
    );
    let schedule_runs = firm
        .stores
        .runs
        .run_list(fronta_engine::RunFilter::default())
        .await
        .expect("runs")
        .into_iter()
        .filter(|run| run.unique_key.as_deref() == Some(&format!("schedule:{}", quarterly.id)))
        .count();
    assert_eq!(
        schedule_runs, 4,
        "10:15, 10:30, the catch-up and 12:30 — no storm"
    );

    // Paused: its pending tick is cancelled and nothing new is planned.
    firm.stores
        .automations
        .automation_set_enabled(
            firm.tenant,
            quarterly.id,
            false,
            fronta_automation::store::InFlight::Finish,
        )
        .await
        .expect("paused");
    let report = scheduler.tick().await;
    assert_eq!(report.cancelled, 1, "the paused one's tick: {report:?}");
    assert_eq!(firm.run(ahead.id).await.status, RunStatus::Cancelled);
    let report = scheduler.tick().await;
    assert_eq!(
        (report.enqueued, report.cancelled),
        (0, 0),
        "nothing planned for the paused one (the poll's next run is still pending)"
    );
    assert_eq!(
        newest(&quarterly, "schedule").await.id,
        ahead.id,
        "the cancelled tick is its newest run"
    );
}

fn instant(text: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(text)
        .expect("an RFC 3339 instant")
        .with_timezone(&chrono::Utc)
}

/// The names and messages of a finished automation run's step log.
/// The status of every line of a completed run's step log.
fn step_statuses(run: &fronta_engine::Run) -> Vec<String> {
    run.result.as_ref().expect("result")["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .map(|step| step["status"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn step_lines(run: &fronta_engine::Run) -> Vec<(String, String)> {
    let steps = run
        .result
        .as_ref()
        .map(|result| result["steps"].clone())
        .unwrap_or(Value::Null);
    steps
        .as_array()
        .map(|all| {
            all.iter()
                .map(|step| {
                    (
                        step["name"].as_str().unwrap_or_default().to_owned(),
                        step["message"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn log_step(name: &str, message: &str) -> Value {
    json!({"name": name, "op": "flow/log", "input": {"message": message}})
}

fn pause_step(seconds: u64) -> Value {
    json!({"name": "p", "op": "flow/pause", "input": {"seconds": seconds}})
}

/// The version a run is pinned to, read from its payload.
fn pinned_version(run: &fronta_engine::Run) -> u32 {
    serde_json::from_value::<executor::RunPayload>(run.payload.clone())
        .expect("an automation run payload")
        .automation_version
}

/// An automation edited while a run sleeps in `flow/pause` (the repro 1, and the
/// pause inside a condition): the resumed run finishes the tree it started with — each
/// step of version 1 once, none of version 2 — while a run started after the edit runs
/// version 2.
pub async fn an_edit_during_a_pause_finishes_the_version_the_run_started_with(
    factory: &dyn RuntimeFactory,
) {
    let firm = Firm::open(factory).await;
    let flat = firm
        .automation(
            json!({"name": "Flat", "trigger": {"type": "manual"}, "steps": [
            log_step("s1", "one (v1)"), pause_step(20), log_step("s2", "two (v1)"),
            log_step("s3", "three (v1)")]}),
        )
        .await;
    let nested = firm
        .automation(
            json!({"name": "Nested", "trigger": {"type": "manual"}, "steps": [
            {"name": "c", "type": "condition",
             "rules": [{"field": "go", "operator": "eq", "value": "yes"}],
             "then": [pause_step(20), log_step("inner", "inner (v1)")]},
            log_step("after", "after (v1)")]}),
        )
        .await;
    assert_eq!(flat.current_version, 1, "a create is version 1");
    let mut go = serde_json::Map::new();
    go.insert("go".into(), json!("yes"));
    let mut ids = Vec::new();
    for (stored, context) in [(&flat, serde_json::Map::new()), (&nested, go.clone())] {
        ids.push(
            firm.dispatcher
                .enqueue(executor::run_request(stored, RunTrigger::Manual, context))
                .await
                .expect("enqueue")
                .id(),
        );
    }
    firm.drain().await;
    for id in &ids {
        assert_eq!(
            firm.run(*id).await.status,
            RunStatus::Scheduled,
            "asleep in the pause"
        );
    }
    let edit = |json: Value| {
        Automation::from_value(&json).unwrap_or_else(|problems| panic!("parses: {problems:?}"))
    };
    let flat_v2 = firm
        .stores
        .automations
        .automation_update(
            firm.tenant,
            flat.id,
            edit(
                json!({"name": "Flat", "trigger": {"type": "manual"}, "steps": [
                log_step("n0", "zero (v2)"), log_step("n1", "one-new (v2)"),
                log_step("s3", "three (v2)"), log_step("s1", "one (v2)")]}),
            ),
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("edited");
    assert_eq!(flat_v2.current_version, 2, "the edit is version 2");
    firm.stores
        .automations
        .automation_update(
            firm.tenant,
            nested.id,
            edit(
                json!({"name": "Nested", "trigger": {"type": "manual"}, "steps": [
                log_step("after", "after (v2)")]}),
            ),
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("edited");
    firm.clock.advance(Duration::from_secs(21));
    firm.drain().await;
    let run = firm.run(ids[0]).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.last_error);
    assert_eq!(pinned_version(&run), 1, "the run says version 1");
    assert_eq!(
        step_lines(&run),
        vec![
            ("s1".to_owned(), "one (v1)".to_owned()),
            ("p".to_owned(), step_lines(&run)[1].1.clone()),
            ("s2".to_owned(), "two (v1)".to_owned()),
            ("s3".to_owned(), "three (v1)".to_owned()),
        ],
        "version 1 to its end, each step once"
    );
    let run = firm.run(ids[1]).await;
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "the checkpoint inside the condition fits its own tree: {:?}",
        run.last_error
    );
    let names: Vec<String> = step_lines(&run).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, vec!["c", "p", "inner", "after"], "version 1's tree");
    assert_eq!(
        step_lines(&run).last().map(|line| line.1.clone()),
        Some("after (v1)".to_owned()),
        "version 1's text"
    );
    let after = firm.manual(&flat_v2, serde_json::Map::new()).await;
    firm.drain().await;
    let run = firm.run(after).await;
    assert_eq!(pinned_version(&run), 2, "a new run is pinned to version 2");
    let names: Vec<String> = step_lines(&run).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, vec!["n0", "n1", "s3", "s1"], "version 2's tree");
    let history = firm
        .stores
        .automations
        .automation_versions(firm.tenant, flat.id, None, 10)
        .await
        .expect("history");
    let numbers: Vec<u32> = history.iter().map(|version| version.version).collect();
    assert_eq!(numbers, vec![2, 1], "newest first");
}

/// Pausing never fails a run (the repro 2): a run asleep in `flow/pause` when its
/// automation is paused finishes on its version with no incident; paused with
/// `inFlight: hold`, a run waits at its next step — no attempt spent, one "held" line —
/// and goes on when the automation is resumed.
pub async fn a_pause_lets_runs_finish_or_holds_them_and_never_fails_one(
    factory: &dyn RuntimeFactory,
) {
    use fronta_automation::store::InFlight;
    let firm = Firm::open(factory).await;
    let stored = firm
        .automation(
            json!({"name": "Slow", "trigger": {"type": "manual"}, "steps": [
            log_step("s1", "one"), pause_step(20), log_step("s2", "two")]}),
        )
        .await;
    let start = |firm: &Firm| {
        let stored = stored.clone();
        let dispatcher = firm.dispatcher.clone();
        async move {
            dispatcher
                .enqueue(executor::run_request(
                    &stored,
                    RunTrigger::Manual,
                    serde_json::Map::new(),
                ))
                .await
                .expect("enqueue")
                .id()
        }
    };
    let switch = |enabled: bool, in_flight: InFlight| {
        let automations = firm.stores.automations.clone();
        let (tenant, id) = (firm.tenant, stored.id);
        async move {
            automations
                .automation_set_enabled(tenant, id, enabled, in_flight)
                .await
                .expect("switched")
        }
    };
    let finishing = start(&firm).await;
    firm.drain().await;
    let paused = switch(false, InFlight::Finish).await;
    assert!(!paused.automation.enabled, "paused");
    assert_eq!(paused.current_version, 1, "a pause is no new version");
    firm.clock.advance(Duration::from_secs(21));
    firm.drain().await;
    let run = firm.run(finishing).await;
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "a pause lets it finish: {:?}",
        run.last_error
    );
    assert_eq!(run.attempts, 0, "no attempt spent");

    switch(true, InFlight::Finish).await;
    let held = start(&firm).await;
    firm.drain().await;
    switch(false, InFlight::Hold).await;
    firm.clock.advance(Duration::from_secs(21));
    firm.drain().await;
    let run = firm.run(held).await;
    assert_eq!(run.status, RunStatus::Scheduled, "held, not failed");
    assert_eq!(run.attempts, 0, "holding spends no attempt");
    let state = ExecState::decode(run.state.as_deref().expect("a checkpoint")).expect("decodes");
    let last = state.steps.last().expect("a step line");
    assert_eq!(last.status, executor::HELD_STATUS, "{last:?}");
    assert!(
        last.message.contains("paused with inFlight hold"),
        "says why: {}",
        last.message
    );
    // Looking again while still held adds no second line.
    firm.clock.advance(executor::HOLD_RECHECK);
    firm.drain().await;
    let state = ExecState::decode(firm.run(held).await.state.as_deref().expect("checkpoint"))
        .expect("decodes");
    assert_eq!(
        state
            .steps
            .iter()
            .filter(|step| step.status == executor::HELD_STATUS)
            .count(),
        1,
        "one held line however often it looks"
    );
    switch(true, InFlight::Finish).await;
    firm.clock.advance(executor::HOLD_RECHECK);
    firm.drain().await;
    let run = firm.run(held).await;
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "released by the resume: {:?}",
        run.last_error
    );
    let names: Vec<String> = step_lines(&run).into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        vec!["s1", "p", "held", "s2"],
        "held once between p and s2"
    );
    let incidents = firm.incidents().await;
    assert!(incidents.is_empty(), "no incident: {incidents:?}");
}

/// A `ticket/upsert` whose custom field does not fit the ticket type fails its step at
/// once (a final error: retrying cannot make "lots" a number), naming the field, the
/// expected and the found type.
pub async fn a_mistyped_field_fails_the_step_at_once_naming_it(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    let stored = firm
        .automation(json!({
            "name": "Typed orders",
            "trigger": {"type": "webhook", "params": [
                {"name": "orderId", "path": "id", "type": "string", "required": true},
                {"name": "amount", "path": "amount", "type": "string", "required": true}
            ]},
            "steps": [
                log_step("first", "before the ticket"),
                {"name": "ticket", "op": "ticket/upsert",
                 "input": {"externalId": "order-{{orderId}}", "type": "order",
                           "fields": {"amount": "{{amount}}"}}}
            ]
        }))
        .await;
    let id = firm
        .webhook(&stored, json!({"id": "7", "amount": "lots"}))
        .await;
    firm.drain().await;
    let run = firm.run(id).await;
    assert_eq!(run.status, RunStatus::Failed, "{:?}", run.last_error);
    assert_eq!(run.attempts, 0, "a final error spends no retry");
    let error = run.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("\"amount\"") && error.contains("expects a number, found a string"),
        "the error names the field and both types: {error}"
    );
}

/// A rename never breaks a run: a run asleep on version 1 while the automation is edited
/// (version 2) and its group renamed finds the group by id under its new name; a run of
/// the current version, started after the rename, does too.
pub async fn a_renamed_group_is_found_by_every_version_that_names_it(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    let tree = |note: &str| {
        json!({"name": "Route", "trigger": {"type": "manual"}, "steps": [
            {"name": "ticket", "op": "ticket/upsert",
             "input": {"externalId": "r-{{n}}", "type": "order", "status": "waiting-to-pack"}},
            pause_step(20),
            log_step("note", note),
            {"name": "assign", "op": "ticket/assign-least-busy",
             "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}]})
    };
    let stored = firm.automation(tree("v1")).await;
    let start = |stored: StoredAutomation, n: &str| {
        let dispatcher = firm.dispatcher.clone();
        let n = n.to_owned();
        async move {
            let mut context = serde_json::Map::new();
            context.insert("n".into(), json!(n));
            dispatcher
                .enqueue(executor::run_request(&stored, RunTrigger::Manual, context))
                .await
                .expect("enqueue")
                .id()
        }
    };
    let old = start(stored.clone(), "1").await;
    firm.drain().await;
    let edited = firm
        .stores
        .automations
        .automation_update(
            firm.tenant,
            stored.id,
            Automation::from_value(&tree("v2")).expect("parses"),
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("edited");
    assert_eq!(edited.current_version, 2, "the edit is version 2");
    let warehouse = firm
        .stores
        .desk
        .group_by_name(firm.tenant, "warehouse")
        .await
        .expect("group");
    firm.stores
        .desk
        .group_rename(firm.tenant, warehouse.id, "sklad")
        .await
        .expect("renamed");
    let current = firm
        .stores
        .automations
        .automation_get(firm.tenant, stored.id)
        .await
        .expect("reads");
    let new = start(current, "2").await;
    firm.clock.advance(Duration::from_secs(21));
    firm.drain().await;
    firm.clock.advance(Duration::from_secs(21));
    firm.drain().await;
    for (id, version) in [(old, 1), (new, 2)] {
        let run = firm.run(id).await;
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "version {version} finds the renamed group: {:?}",
            run.last_error
        );
        assert_eq!(pinned_version(&run), version);
        let assign = step_lines(&run).last().cloned().unwrap_or_default();
        assert!(
            assign.0 == "assign" && assign.1.contains("(sklad, least busy)"),
            "assigned within the group under its new name: {assign:?}"
        );
    }
}

/// A failing run keeps its step log: `a` (a log line), the condition with its compared
/// values, and the failing `forEach` with its error, though no action checkpointed them;
/// a templated `flow/pause` beyond `--max-pause` fails its step cleanly (no panic), with an
/// incident and the step's line.
pub async fn a_failing_run_keeps_every_step_it_ran(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    let stored = firm
        .automation(json!({
            "name": "Lists", "trigger": {"type": "webhook", "params": [
                {"name": "n", "path": "n", "type": "string", "required": true}]},
            "steps": [
                log_step("a", "started"),
                {"name": "c", "type": "condition",
                 "rules": [{"field": "_body.n", "operator": "gt", "value": 5}],
                 "then": [log_step("big", "a big one")]},
                {"name": "each", "type": "forEach", "items": "{{_body.list}}", "as": "item",
                 "steps": [log_step("say", "{{item}}")]}
            ]
        }))
        .await;
    let id = firm
        .webhook(&stored, json!({"n": "7", "list": "nope"}))
        .await;
    let pausing = firm
        .automation(json!({
            "name": "Pausing", "trigger": {"type": "webhook", "params": [
                {"name": "wait", "path": "wait", "type": "number", "required": true}]},
            "steps": [log_step("before", "before"),
                      {"name": "p", "op": "flow/pause", "input": {"seconds": "{{wait}}"}}]
        }))
        .await;
    let paused = firm.webhook(&pausing, json!({"wait": 1e30})).await;
    firm.drain().await;

    let run = firm.run(id).await;
    assert_eq!(run.status, RunStatus::Failed, "{:?}", run.last_error);
    let state = ExecState::decode(
        run.state
            .as_deref()
            .expect("the log is saved with the failure"),
    )
    .expect("decodes");
    let lines: Vec<(&str, &str)> = state
        .steps
        .iter()
        .map(|step| (step.name.as_str(), step.status.as_str()))
        .collect();
    assert_eq!(
        lines,
        [("a", "ok"), ("c", "met"), ("big", "ok"), ("each", "failed")],
        "every step that ran, the failing one last: {:?}",
        state.steps
    );
    assert!(
        state.steps[1].message.contains('7') && state.steps[1].message.contains('5'),
        "the condition says what it compared: {}",
        state.steps[1].message
    );
    assert!(
        state.steps[3].message.contains("items must be a list"),
        "the failing step carries its error: {}",
        state.steps[3].message
    );
    // Retried by hand, the run goes on from where it failed: the failing step runs
    // again (it is not skipped), after a line that says the run was started by hand.
    firm.stores
        .runs
        .run_retry(id)
        .await
        .expect("retried by hand");
    firm.drain().await;
    let again = firm.run(id).await;
    assert_eq!(again.status, RunStatus::Failed, "{:?}", again.last_error);
    let state = ExecState::decode(again.state.as_deref().expect("saved")).expect("decodes");
    let lines: Vec<(&str, &str)> = state
        .steps
        .iter()
        .map(|step| (step.name.as_str(), step.status.as_str()))
        .collect();
    assert_eq!(
        lines,
        [
            ("a", "ok"),
            ("c", "met"),
            ("big", "ok"),
            ("each", "failed"),
            ("run", "retried by hand"),
            ("each", "failed")
        ],
        "{:?}",
        state.steps
    );

    let run = firm.run(paused).await;
    assert_eq!(run.status, RunStatus::Failed, "{:?}", run.last_error);
    let error = run.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("outside 0") && error.contains("--max-pause") && !error.contains("panick"),
        "the step names the value and the bound: {error}"
    );
    let state = ExecState::decode(run.state.as_deref().expect("saved")).expect("decodes");
    assert_eq!(
        state
            .steps
            .last()
            .map(|step| (step.name.as_str(), step.status.as_str())),
        Some(("p", "failed")),
        "{:?}",
        state.steps
    );
    let incidents = firm.incidents().await;
    assert_eq!(incidents.len(), 2, "each failed run opened an incident");
}

/// A panic inside a step (a bug) fails the run like any other failure: the step log ends
/// with a `failed` line carrying the panic message, after the steps that ran, and an
/// incident opens whose admin detail names the panic.
pub async fn a_panicking_step_fails_the_run_with_its_log_and_an_incident(
    factory: &dyn RuntimeFactory,
) {
    let firm = Firm::open(factory).await;
    let stored = firm
        .automation(json!({
            "name": "Buggy", "trigger": {"type": "manual"},
            "steps": [
                {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "bug-1"}},
                {"name": "tool", "op": "mcp/call-tool", "input": {"server": "x", "tool": "panic"}}
            ]
        }))
        .await;
    let id = firm.manual(&stored, serde_json::Map::new()).await;
    firm.drain().await;
    let run = firm.run(id).await;
    assert_eq!(run.status, RunStatus::Failed, "{:?}", run.last_error);
    let error = run.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("panicked") && error.contains("the test connector panics"),
        "{error}"
    );
    let state = ExecState::decode(run.state.as_deref().expect("saved")).expect("decodes");
    let lines: Vec<(&str, &str)> = state
        .steps
        .iter()
        .map(|step| (step.name.as_str(), step.status.as_str()))
        .collect();
    assert_eq!(
        lines,
        [("ticket", "ok"), ("run", "failed")],
        "the checkpointed step, then the panic: {:?}",
        state.steps
    );
    let incidents = firm.incidents().await;
    assert_eq!(incidents.len(), 1, "the panic opened an incident");
    assert!(
        incidents[0]
            .detail
            .to_string()
            .contains("the test connector panics"),
        "the admin detail carries the panic: {}",
        incidents[0].detail
    );
}

/// An optional webhook parameter that was not sent is `null` in the run: inside text it
/// renders as nothing, alone it stays `null`, and a condition says it has not arrived —
/// the run completes instead of failing "has no value".
pub async fn an_optional_parameter_not_sent_is_null_and_the_run_completes(
    factory: &dyn RuntimeFactory,
) {
    let firm = Firm::open(factory).await;
    let stored = firm
        .automation(json!({
            "name": "Optional", "trigger": {"type": "webhook", "params": [
                {"name": "order", "path": "id", "type": "string", "required": true},
                {"name": "first", "path": "items.0.sku", "type": "string"}]},
            "steps": [
                log_step("say", "order {{order}}, first [{{first}}]"),
                {"name": "c", "type": "condition",
                 "rules": [{"field": "first", "operator": "isNotEmpty"}],
                 "then": [log_step("sku", "{{first}}")]}
            ]
        }))
        .await;
    let id = firm.webhook(&stored, json!({"id": "5001"})).await;
    firm.drain().await;
    let run = firm.run(id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.last_error);
    let lines = step_lines(&run);
    assert_eq!(
        lines[0].1, "order 5001, first []",
        "null renders as nothing"
    );
    assert_eq!(lines.len(), 2, "the condition was not met: {lines:?}");
    assert!(
        lines[1].1.contains("first = null (has not arrived)"),
        "{}",
        lines[1].1
    );
}

/// What happens between attempts is on the run's log: a step that failed retryably says
/// which attempt it was, and the next attempt begins with a `retried` line naming the
/// attempt and the error it follows; the completed run has no `lastError`.
pub async fn a_retry_is_a_line_on_the_run(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    let stored = firm
        .automation(json!({
            "name": "Flaky", "trigger": {"type": "manual"},
            "steps": [{"name": "call", "op": "http/request", "service": "shop",
                       "input": {"url": "https://shop.test/flaky/retry-line"}}]
        }))
        .await;
    let id = firm.manual(&stored, serde_json::Map::new()).await;
    firm.drain().await;
    let first = firm.run(id).await;
    assert_eq!(first.attempts, 1, "one retry spent: {:?}", first.last_error);
    firm.clock.advance(Duration::from_secs(3600));
    firm.drain().await;
    let run = firm.run(id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.last_error);
    assert_eq!(run.last_error, None, "a completed run keeps no error");
    let lines = step_lines(&run);
    let statuses = step_statuses(&run);
    assert_eq!(statuses, ["failed", "retried", "ok"], "{lines:?}");
    assert!(
        lines[0].1.contains("503") && lines[0].1.contains("will be retried"),
        "{lines:?}"
    );
    assert!(
        lines[1].1.starts_with("attempt 2 of") && lines[1].1.contains("503"),
        "the retry says which attempt and after what: {lines:?}"
    );
}

/// The loop guard counts loops, not people (issue 19, repro 5): five changes by a person
/// each start "On shipped close" (its condition not met); then the status change closes
/// the ticket. Runs started by an automation's changes are counted, but one that changed
/// nothing is taken back: six tag upserts by a webhook automation (each starting a run
/// that changes nothing) do not stop the close either.
pub async fn the_loop_guard_counts_loops_not_people(factory: &dyn RuntimeFactory) {
    let firm = Firm::open(factory).await;
    let close = firm
        .automation(json!({
            "name": "On shipped close",
            "trigger": {"type": "event", "event": "ticket.changed"},
            "steps": [{"name": "shipped", "type": "condition",
                       "rules": [{"field": "ticket.status", "operator": "eq", "value": "shipped"}],
                       "then": [{"name": "close", "op": "ticket/close",
                                 "input": {"ticket": "{{ticket.id}}"}}]}]
        }))
        .await;
    let tagger = firm
        .automation(json!({
            "name": "Tag from the shop",
            "trigger": {"type": "webhook", "params": [
                {"name": "tag", "path": "tag", "type": "string", "required": true},
                {"name": "status", "path": "status", "type": "string", "required": true}]},
            "steps": [{"name": "tag", "op": "ticket/upsert",
                       "input": {"externalId": "order-5", "title": "Order 5", "type": "order",
                                 "status": "{{status}}", "tags": ["{{tag}}"],
                                 "onExisting": ["status", "tags"]}}]
        }))
        .await;
    firm.webhook(&tagger, json!({"tag": "new", "status": "waiting-to-pack"}))
        .await;
    firm.drain().await;
    let ticket = firm.first_ticket().await;
    for n in 0..5 {
        let change = fronta_desk::store::TicketChange {
            add_tags: vec![format!("person-{n}")],
            ..Default::default()
        };
        firm.stores
            .desk
            .ticket_change(firm.tenant, ticket.id, change, fronta_desk::Origin::Person)
            .await
            .expect("a person's change");
        firm.drain().await;
    }
    for n in 0..6 {
        firm.webhook(
            &tagger,
            json!({"tag": format!("shop-{n}"), "status": "waiting-to-pack"}),
        )
        .await;
        firm.drain().await;
    }
    let runs_of = |automation: AutomationId| {
        let runs = firm.stores.runs.clone();
        async move {
            runs.run_list(RunFilter {
                kind: Some(executor::AUTOMATION_KIND.into()),
                limit: 1000,
                ..RunFilter::default()
            })
            .await
            .expect("runs")
            .into_iter()
            .filter(|run| {
                serde_json::from_value::<executor::RunPayload>(run.payload.clone())
                    .is_ok_and(|payload| payload.automation_id == automation)
            })
            .collect::<Vec<_>>()
        }
    };
    let before = runs_of(close.id).await;
    assert_eq!(
        before.len(),
        11,
        "5 by a person, 6 by the shop's automation"
    );
    assert!(
        before.iter().all(|run| run.status == RunStatus::Completed
            && run
                .result
                .as_ref()
                .is_some_and(|r| r.get("suppressed").is_none())),
        "none was suppressed: {:?}",
        before.iter().map(|run| &run.result).collect::<Vec<_>>()
    );
    firm.webhook(&tagger, json!({"tag": "sent", "status": "shipped"}))
        .await;
    firm.drain().await;
    let ticket = firm
        .stores
        .desk
        .ticket_get(firm.tenant, ticket.id)
        .await
        .expect("the ticket");
    assert!(
        ticket.closed,
        "the status change closed the ticket: {ticket:?}"
    );
    let log = firm
        .stores
        .desk
        .ticket_log(firm.tenant, ticket.id)
        .await
        .expect("log");
    assert!(
        !log.iter().any(|entry| entry.kind == "guard"),
        "no guard line: {log:?}"
    );
}

/// Error workflows (`fronta_automation::error_events`) on the store: a failed run starts
/// the tenant's `run.failed` and `incident.opened` automations once each, with the
/// failure's tenant-facing words and not its full message; announcing the same failure
/// again (as after a crash between the announcement and the run's end) finds the runs by
/// their unique keys, finished as they are, and starts nothing more.
pub async fn a_failed_run_starts_its_error_workflows_once(factory: &dyn RuntimeFactory) {
    use fronta_automation::error_events::{self, FailedStep, Notice, Source};
    let firm = Firm::open(factory).await;
    let orders = firm
        .automation(json!({
            "name": "Orders",
            "trigger": {"type": "webhook", "params": [
                {"name": "orderId", "path": "id", "type": "string", "required": true},
                {"name": "newStatus", "path": "status", "type": "string", "required": true}]},
            "steps": [
                {"name": "ticket", "op": "ticket/upsert",
                 "input": {"externalId": "order-{{orderId}}", "type": "order"}},
                {"name": "status", "op": "ticket/set-status",
                 "input": {"ticket": "{{ticket.id}}", "status": "{{newStatus}}"}}]
        }))
        .await;
    let tell = firm
        .automation(json!({
            "name": "Tell us",
            "trigger": {"type": "event", "event": "run.failed"},
            "steps": [log_step("say", "{{automation.name}} failed at {{step.key}} on {{ticket.number}}: {{message}}")]
        }))
        .await;
    let watch = firm
        .automation(json!({
            "name": "Watch",
            "trigger": {"type": "event", "event": "incident.opened"},
            "steps": [log_step("say", "{{incident.title}}")]
        }))
        .await;
    let failed = firm
        .webhook(&orders, json!({"id": "7", "status": "vanished"}))
        .await;
    firm.drain().await;
    let failed = firm.run(failed).await;
    assert_eq!(failed.status, RunStatus::Failed, "{:?}", failed.last_error);
    let runs_of = |automation: AutomationId| {
        let runs = firm.stores.runs.clone();
        async move {
            runs.run_list(RunFilter {
                kind: Some(executor::AUTOMATION_KIND.into()),
                ..RunFilter::default()
            })
            .await
            .expect("runs")
            .into_iter()
            .filter(|run| {
                serde_json::from_value::<executor::RunPayload>(run.payload.clone())
                    .is_ok_and(|payload| payload.automation_id == automation)
            })
            .collect::<Vec<_>>()
        }
    };
    let told = runs_of(tell.id).await;
    assert_eq!(told.len(), 1, "one run.failed run: {told:?}");
    assert_eq!(
        told[0].status,
        RunStatus::Completed,
        "{:?}",
        told[0].last_error
    );
    let context = &told[0].payload["context"];
    let title = "The automation for ticket TK-1 did not finish; we lost no data.";
    assert_eq!(context["automation"]["name"], "Orders");
    assert_eq!(
        context["step"],
        json!({"key": "status", "op": "ticket/set-status"})
    );
    assert_eq!(context["message"], title);
    assert_eq!(context["ticket"]["number"], "TK-1");
    assert!(
        !context.to_string().contains("vanished"),
        "the full message stays with the admins: {context}"
    );
    assert_eq!(
        step_lines(&told[0]),
        vec![(
            "say".to_owned(),
            format!("Orders failed at status on TK-1: {title}")
        )]
    );
    let watched = runs_of(watch.id).await;
    assert_eq!(watched.len(), 1, "one incident.opened run: {watched:?}");
    assert_eq!(watched[0].payload["context"]["incident"]["title"], title);

    // The same failure announced again: both keys are found, nothing is started.
    let incident = firm.incidents().await.remove(0);
    let notice = Notice {
        source: Source {
            tenant: firm.tenant,
            automation_id: orders.id,
            automation_name: "Orders".into(),
            version: 1,
            run_id: failed.id.to_string(),
            caused_by: None,
            started_by: None,
        },
        failed: Some(FailedStep {
            key: "status".into(),
            op: "ticket/set-status".into(),
            message: title.into(),
            impact: String::new(),
            generation: 0,
            ticket: incident.ticket,
        }),
        incident: Some(error_events::IncidentBrief::of(&incident, true)),
        by_failure: true,
    };
    let line = error_events::announce(
        &firm.dispatcher,
        firm.stores.automations.as_ref(),
        firm.stores.desk.as_ref(),
        &notice,
    )
    .await
    .expect("announced")
    .expect("a line");
    assert_eq!(
        line.matches("was started already").count(),
        2,
        "both runs found by key: {line}"
    );
    firm.drain().await;
    assert_eq!(runs_of(tell.id).await.len(), 1, "still one run.failed run");
    assert_eq!(
        runs_of(watch.id).await.len(),
        1,
        "still one incident.opened run"
    );
}

/// Issue 23, timers in minutes: the documented recipe (`docs/recipes/sla-breach.json`) on
/// a moved clock. Each `ticket.created` run pauses 4 h — a scheduled run due at exactly
/// creation + 4 h, holding no worker — then reads its ticket as it is now (`ticket/get`),
/// and only a ticket still open and unassigned is tagged `sla-breach`, given to the lead
/// and mailed about, with a note on its log. Nothing fires a second early; everything
/// fires once the clock reaches its time, picked up by the worker's next look for due
/// runs (every 500 ms by default) — not by an hourly sweep.
pub async fn an_sla_timer_fires_at_its_time_on_the_ticket_as_it_is_then(
    factory: &dyn RuntimeFactory,
) {
    let start = chrono::DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z")
        .expect("an instant")
        .with_timezone(&chrono::Utc);
    let firm = Firm::open_at(factory, start).await;
    let desk = &firm.stores.desk;
    let leads = desk
        .group_create(firm.tenant, "leads")
        .await
        .expect("leads");
    desk.member_add(firm.tenant, leads.id, "Lena", None, 100)
        .await
        .expect("the lead");
    let recipe: Value = serde_json::from_str(include_str!("../../docs/recipes/sla-breach.json"))
        .expect("the recipe is JSON");
    let automation = Automation::from_value(&recipe).expect("the recipe parses");
    let context = fronta_automation::ValidationContext::with_ticket_types([(
        "order",
        vec!["waiting-to-pack", "shipped"],
    )]);
    assert_eq!(
        fronta_automation::validate::validate(&automation, &context),
        Vec::new(),
        "the recipe saves as documented"
    );
    let sla = firm.automation(recipe).await;
    let eva = desk
        .member_list(
            firm.tenant,
            desk.group_by_name(firm.tenant, "warehouse")
                .await
                .expect("warehouse")
                .id,
        )
        .await
        .expect("members")
        .into_iter()
        .find(|member| member.name == "Eva")
        .expect("Eva");
    let mut tickets = Vec::new();
    for name in ["forgotten", "taken", "closed"] {
        let write = desk
            .ticket_upsert(
                firm.tenant,
                fronta_desk::store::TicketUpsert {
                    external_id: format!("sla-{name}"),
                    title: Some(format!("Order {name}")),
                    ..Default::default()
                },
                fronta_desk::Origin::Person,
            )
            .await
            .expect("a new ticket");
        tickets.push(write.ticket);
    }
    let due = start + chrono::Duration::hours(4);
    firm.drain().await;
    let runs = || sla_runs(&firm, sla.id, &tickets);
    let paused = runs().await;
    assert_eq!(paused.len(), 3, "one SLA run per new ticket: {paused:?}");
    for run in &paused {
        assert_eq!(
            run.status,
            RunStatus::Scheduled,
            "paused: {:?}",
            run.last_error
        );
        assert_eq!(run.attempts, 0, "a pause spends no attempt");
        assert_eq!(
            run.run_at, due,
            "due exactly 4 h after the ticket was created"
        );
    }
    assert!(
        WorkerConfig::default().poll_interval <= Duration::from_secs(1),
        "a worker looks for due runs at least every second, so a run due at T starts within \
         a second of T"
    );

    // Meanwhile a person takes one ticket and closes another.
    firm.clock.set(start + chrono::Duration::hours(1));
    desk.ticket_change(
        firm.tenant,
        tickets[1].id,
        fronta_desk::store::TicketChange {
            assignee: Some(Some(eva.id)),
            ..Default::default()
        },
        fronta_desk::Origin::Person,
    )
    .await
    .expect("Eva takes it");
    firm.clock.set(start + chrono::Duration::hours(2));
    desk.ticket_change(
        firm.tenant,
        tickets[2].id,
        fronta_desk::store::TicketChange {
            closed: Some(true),
            ..Default::default()
        },
        fronta_desk::Origin::Person,
    )
    .await
    .expect("closed");

    // A second before its time nothing fires.
    firm.clock.set(due - chrono::Duration::seconds(1));
    firm.drain().await;
    assert!(
        runs()
            .await
            .iter()
            .all(|run| run.status == RunStatus::Scheduled && run.run_at == due),
        "not yet: {:?}",
        runs().await
    );
    let forgotten = desk
        .ticket_get(firm.tenant, tickets[0].id)
        .await
        .expect("read");
    assert!(forgotten.tags.is_empty(), "untouched: {forgotten:?}");

    // At its time, every run goes on with the ticket as it is now.
    firm.clock.set(due);
    firm.drain().await;
    let done = runs().await;
    for run in &done {
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "fired at its time: {:?}",
            run.last_error
        );
    }
    let steps_of = |run: &fronta_engine::Run| -> Vec<(String, String, String)> {
        run.result.as_ref().expect("a result")["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .map(|step| {
                (
                    step["name"].as_str().unwrap_or("").to_owned(),
                    step["status"].as_str().unwrap_or("").to_owned(),
                    step["message"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };
    let names = |run: &fronta_engine::Run| -> Vec<String> {
        steps_of(run).into_iter().map(|(name, _, _)| name).collect()
    };
    assert_eq!(
        names(&done[0]),
        [
            "wait",
            "now",
            "stillWaiting",
            "breach",
            "lead",
            "tell",
            "note"
        ],
        "the forgotten ticket breached: {:?}",
        steps_of(&done[0])
    );
    assert_eq!(
        steps_of(&done[0])[1].2,
        "TK-1 is open, unassigned, tags []",
        "ticket/get read it as it is at 4 h"
    );
    let breached = desk
        .ticket_get(firm.tenant, tickets[0].id)
        .await
        .expect("read");
    assert_eq!(breached.tags, ["sla-breach"]);
    assert_eq!(
        breached.assignee.as_ref().map(|a| a.name.as_str()),
        Some("Lena"),
        "given to the lead"
    );
    let sent: Vec<serde_json::Map<String, Value>> = SENT
        .lock()
        .expect("the list")
        .iter()
        .filter(|input| input["subject"] == json!("SLA breach: TK-1 Order forgotten"))
        .cloned()
        .collect();
    assert_eq!(sent.len(), 1, "the leads were told once: {sent:?}");
    assert_eq!(sent[0]["to"], "leads@firm.example");
    assert_eq!(
        sent[0]["text"],
        "TK-1 (Order forgotten) waited 4 hours with nobody on it. It is now with Lena."
    );
    let log = desk
        .ticket_log(firm.tenant, tickets[0].id)
        .await
        .expect("the log");
    let note = log
        .iter()
        .find(|line| line.kind == fronta_automation::steps::NOTE_KIND)
        .unwrap_or_else(|| panic!("a note: {log:?}"));
    assert_eq!(
        note.message,
        "Note by automation \"SLA: nobody took it within 4 hours\" (version 1): Nobody took \
         this ticket within 4 hours: tagged sla-breach, given to Lena, the leads were told."
    );
    assert_eq!(note.at, due, "written at the run's time");
    for (run, ticket) in done[1..].iter().zip(&tickets[1..]) {
        assert_eq!(
            names(run),
            ["wait", "now", "stillWaiting", "inTime"],
            "{}: taken or closed in time: {:?}",
            ticket.human_id(),
            steps_of(run)
        );
        let now = desk.ticket_get(firm.tenant, ticket.id).await.expect("read");
        assert!(now.tags.is_empty(), "no breach on {now:?}");
    }
    assert_eq!(
        steps_of(&done[1])[1].2,
        "TK-2 is open, assigned to Eva, tags []"
    );
    assert_eq!(
        steps_of(&done[2])[1].2,
        "TK-3 is closed, unassigned, tags []"
    );
}

/// The runs of automation `sla`, in the order of the tickets they are about.
async fn sla_runs(
    firm: &Firm,
    sla: AutomationId,
    tickets: &[fronta_desk::Ticket],
) -> Vec<fronta_engine::Run> {
    let mut runs: Vec<(Option<usize>, fronta_engine::Run)> = firm
        .stores
        .runs
        .run_list(RunFilter {
            kind: Some(executor::AUTOMATION_KIND.into()),
            ..RunFilter::default()
        })
        .await
        .expect("runs")
        .into_iter()
        .filter_map(|run| {
            let payload: executor::RunPayload = serde_json::from_value(run.payload.clone()).ok()?;
            (payload.automation_id == sla).then(|| {
                let at = tickets
                    .iter()
                    .position(|ticket| payload.ticket == Some(ticket.id));
                (at, run)
            })
        })
        .collect();
    runs.sort_by_key(|(at, _)| *at);
    runs.into_iter().map(|(_, run)| run).collect()
}
