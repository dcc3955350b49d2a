//! `fronta demo`: the seed's verified scenario against the real server. It starts
//! `fronta_server::serve` with its in-process worker on a fresh embedded SQLite file (a
//! temporary folder, or `--dir`) on a free local port, sets up a firm through the HTTP
//! API (a tenant, three groups, two ticket types, three automations by `POST /api/apply`),
//! replays the scenario over real HTTP and prints one line per check with its result and
//! time. Then it prints where the API is and a tenant token and keeps serving until
//! Ctrl-C; with `--exit` it stops after the checks, non-zero if any failed.
//!
//! `--engine` shows the engine's own promises instead (no server): `crate::demo_engine`.
//! `--server HOST:PORT` runs the same checks against a `fronta serve` started elsewhere
//! (the end-to-end tests do, on SQLite and on Postgres).
//!
//! While it serves, it prints the dashboard's address (`/`, the page of
//! `fronta_server::dashboard`) and the tenant token to sign in with.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use fronta_engine::WorkerConfig;
use fronta_server::{Listener, ServerConfig};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api_client::{Answer, ApiClient};
use crate::{Store, serve, wait_for_signal};

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Keep the demo database in this folder (default: a temporary folder, removed after).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The address to serve on (default: a free local port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Stop after the checks instead of serving until Ctrl-C; non-zero if any check failed.
    #[arg(long)]
    exit: bool,
    /// Show the engine's own promises instead (no server): group commit, drain, crash, cancel.
    #[arg(long)]
    engine: bool,
    /// Run the checks against a running `fronta serve` at HOST:PORT instead of starting
    /// one (it needs a worker and the admin token); implies --exit.
    #[arg(long, value_name = "HOST:PORT")]
    server: Option<String>,
    /// The admin token of --server.
    #[arg(long, env = "FRONTA_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Runs in the engine's throughput check (with --engine).
    #[arg(long, default_value_t = 20_000)]
    runs: u64,
}

/// How long the demo waits for the worker to finish something.
const PATIENCE: Duration = Duration::from_secs(20);

/// The checks so far, printed as they are recorded.
#[derive(Debug, Default)]
struct Checks {
    passed: usize,
    failed: usize,
}

impl Checks {
    /// Run one check: `work` answers a value for later checks and a line of detail.
    async fn check<T>(
        &mut self,
        name: &str,
        work: impl Future<Output = anyhow::Result<(T, String)>>,
    ) -> Option<T> {
        let started = Instant::now();
        let result = work.await;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        match result {
            Ok((value, detail)) => {
                self.passed += 1;
                println!("  ok    {name:<66} {ms:>8.1} ms  {detail}");
                Some(value)
            }
            Err(err) => {
                self.failed += 1;
                println!("  FAIL  {name:<66} {ms:>8.1} ms  {err:#}");
                None
            }
        }
    }
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if args.engine {
        return crate::demo_engine::run(args.dir, args.runs).await;
    }
    if let Some(server) = &args.server {
        return against(server, args.admin_token.as_deref()).await;
    }
    let temp = tempfile::tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("demo.db");
    if path.exists() {
        bail!("{} exists already; give an empty --dir", path.display());
    }
    let store = Store::Sqlite(
        SqliteStore::open(SqliteConfig::new(&path))
            .with_context(|| format!("opening {}", path.display()))?,
    );
    let admin = fronta_desk::token::generate("fa_");
    let config = ServerConfig {
        admin_token_hash: Some(fronta_desk::token::hash(&admin)),
        ..ServerConfig::default()
    };
    let worker_config = WorkerConfig {
        name: "demo".into(),
        poll_interval: Duration::from_millis(100),
        ..WorkerConfig::default()
    };
    let (app, worker) = serve::server_parts(
        &store,
        config,
        worker_config,
        &crate::connector_settings::ConnectorArgs::from_environment()?,
    )?;
    app.observe_worker(worker.metrics());
    app.run_here(worker.local_runs());
    let nudge = std::sync::Arc::new(tokio::sync::Notify::new());
    app.wake_scheduler_with(nudge.clone());
    let listener = Listener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let address = listener.local_addr()?;
    println!(
        "fronta demo — the seed scenario over HTTP on http://{address} (embedded SQLite {})\n",
        path.display()
    );

    let shutdown = CancellationToken::new();
    let background = crate::leadership::Leadership::start(
        &store,
        None,
        "fronta-demo",
        &worker,
        &crate::leadership::LeadArgs::default(),
        Some(nudge),
        shutdown.clone(),
    )?;
    let worker = tokio::spawn(worker.run(shutdown.clone()));
    let server = tokio::spawn(fronta_server::serve(
        listener,
        app,
        shutdown.clone().cancelled_owned(),
    ));

    let mut checks = Checks::default();
    let scenario = scenario(ApiClient::at(address)?, &admin, &mut checks).await;
    println!(
        "\n{} checks passed, {} failed",
        checks.passed, checks.failed
    );

    if !args.exit {
        let signalled = wait_for_signal();
        println!("\ndashboard at http://{address}/ (sign in with the tenant token below)");
        println!(
            "OpenAPI at http://{address}/api/openapi.json, metrics at /metrics, events at /api/stream"
        );
        println!("admin token:  {admin}");
        if let Some(scenario) = &scenario {
            println!("tenant token: {}", scenario.tenant_token);
            println!("orders webhook: {}", scenario.orders_url);
            println!(
                "try: curl -s -H 'Authorization: Bearer {}' http://{address}/api/tickets",
                scenario.tenant_token
            );
        }
        println!("serving until Ctrl-C");
        tokio::select! {
            _ = signalled => {}
            _ = shutdown.cancelled() => {}
        }
    }
    shutdown.cancel();
    server
        .await
        .context("the server task")?
        .context("serving HTTP")?;
    worker.await.context("the worker task")??;
    background.stop().await;
    if args.dir.is_some() {
        println!("database kept in {}", path.display());
    }
    if checks.failed > 0 {
        bail!(
            "{} of {} checks failed",
            checks.failed,
            checks.passed + checks.failed
        );
    }
    Ok(())
}

/// The checks against a server started elsewhere (`--server`).
async fn against(server: &str, admin: Option<&str>) -> anyhow::Result<()> {
    let admin = admin.context("--server needs --admin-token (or FRONTA_ADMIN_TOKEN)")?;
    let address = tokio::net::lookup_host(server)
        .await
        .with_context(|| format!("resolving {server}"))?
        .next()
        .with_context(|| format!("{server} resolves to no address"))?;
    println!("fronta demo — the seed scenario over HTTP against http://{address}\n");
    let mut checks = Checks::default();
    scenario(ApiClient::at(address)?, admin, &mut checks).await;
    println!(
        "\n{} checks passed, {} failed",
        checks.passed, checks.failed
    );
    if checks.failed > 0 {
        bail!(
            "{} of {} checks failed",
            checks.failed,
            checks.passed + checks.failed
        );
    }
    Ok(())
}

/// What the scenario leaves for the user to play with.
struct Scenario {
    tenant_token: String,
    orders_url: String,
}

fn expect_status(answer: &Answer, status: u16) -> anyhow::Result<Value> {
    let body = answer.json();
    if answer.status != status {
        bail!(
            "expected {status}, got {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
    }
    Ok(body)
}

fn text(value: &Value, what: &str) -> anyhow::Result<String> {
    value
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no {what} in the answer"))
}

/// The path of a full URL (`http://host/webhook/…` → `/webhook/…`).
fn path_of(url: &str) -> anyhow::Result<String> {
    let start = url.find("/webhook/").context("a webhook URL")?;
    Ok(url[start..].to_owned())
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// Ask `probe` until it answers `Some`, for at most [`PATIENCE`].
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            bail!("{what}: not within {PATIENCE:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn setup() -> Value {
    json!({
        "groups": [
            {"name": "warehouse", "members": [{"name": "Eva"}, {"name": "Jan"}, {"name": "Petr"}]},
            {"name": "shipping", "members": [{"name": "Lucie"}, {"name": "Marek"}]},
            {"name": "IT", "members": [{"name": "Ota"}, {"name": "Rita"}, {"name": "Sara"}]}
        ],
        "ticketTypes": [
            {"name": "order", "statuses": ["waiting-to-pack", "shipped"],
             "fields": [{"name": "amount", "type": "number"}]},
            {"name": "error", "statuses": ["new", "resolved"]}
        ],
        "automations": [
            {
                "name": "Orders from the web shop",
                "trigger": {"type": "webhook", "params": [
                    {"name": "kind", "path": "kind", "type": "string", "required": true},
                    {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}
                ]},
                "steps": [
                    {"name": "ticket", "op": "ticket/upsert",
                     "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
                               "type": "order", "status": "waiting-to-pack",
                               "tags": ["waiting-to-pack"]}}
                ]
            },
            {
                "name": "Orders to the warehouse",
                "trigger": {"type": "event", "event": "ticket.created"},
                "steps": [
                    {"name": "isOrder", "type": "condition", "match": "all",
                     "rules": [{"field": "ticket.type", "operator": "eq", "value": "order"},
                               {"field": "ticket.tags", "operator": "contains", "value": "waiting-to-pack"}],
                     "then": [{"name": "assign", "op": "ticket/assign-least-busy",
                               "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}]}
                ]
            },
            {
                "name": "Converter errors",
                "trigger": {"type": "webhook", "params": [
                    {"name": "docId", "path": "document.id", "type": "string", "required": true},
                    {"name": "errorMessage", "path": "errors.0.message", "type": "string", "required": true}
                ]},
                "steps": [
                    {"name": "ticket", "op": "ticket/upsert",
                     "input": {"externalId": "doc-{{docId}}", "title": "Converter error: {{errorMessage}}",
                               "type": "error", "status": "new", "tags": ["converter"]}},
                    {"name": "assign", "op": "ticket/assign-least-busy",
                     "input": {"ticket": "{{ticket.id}}", "group": "IT"}},
                    {"name": "alert", "op": "incident/create",
                     "input": {"title": "Document {{docId}} could not be read",
                               "impact": "{{errorMessage}}", "ticket": "{{ticket.id}}"}}
                ]
            }
        ]
    })
}

/// What `POST /api/apply` answered, by name.
struct Applied {
    orders_url: String,
    orders_id: String,
    converter_url: String,
    /// Member ids of each group.
    warehouse: Vec<String>,
    it: Vec<String>,
}

fn read_applied(answer: &Value) -> anyhow::Result<Applied> {
    let automation = |name: &str| {
        answer["automations"]
            .as_array()
            .and_then(|items| items.iter().find(|item| item["name"] == name))
            .with_context(|| format!("automation {name:?} in the answer"))
    };
    let members = |name: &str| -> anyhow::Result<Vec<String>> {
        let group = answer["groups"]
            .as_array()
            .and_then(|items| items.iter().find(|item| item["name"] == name))
            .with_context(|| format!("group {name:?} in the answer"))?;
        group["members"]
            .as_array()
            .context("members")?
            .iter()
            .map(|member| text(&member["id"], "member id"))
            .collect()
    };
    let orders = automation("Orders from the web shop")?;
    Ok(Applied {
        orders_url: text(&orders["webhookUrl"], "webhookUrl")?,
        orders_id: text(&orders["id"], "automation id")?,
        converter_url: text(&automation("Converter errors")?["webhookUrl"], "webhookUrl")?,
        warehouse: members("warehouse")?,
        it: members("IT")?,
    })
}

/// Every `action` in the apply answer (groups, members, types, automations).
fn actions(answer: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for list in ["groups", "ticketTypes", "automations"] {
        for item in answer[list].as_array().into_iter().flatten() {
            found.extend(item["action"].as_str().map(str::to_owned));
            for member in item["members"].as_array().into_iter().flatten() {
                found.extend(member["action"].as_str().map(str::to_owned));
            }
        }
    }
    found
}

/// The scenario, check by check. `None` when the setup itself failed.
async fn scenario(client: ApiClient, admin: &str, checks: &mut Checks) -> Option<Scenario> {
    let c = &client;
    checks
        .check("GET /healthz and /readyz answer 200", async {
            let health = c.call("GET", "/healthz", None, None).await?;
            expect_status(&health, 200)?;
            let ready = c.call("GET", "/readyz", None, None).await?;
            expect_status(&ready, 200)?;
            Ok(((), "the database answers".to_owned()))
        })
        .await;

    let tenant = checks
        .check("the admin creates tenant Acme: 201 with a token", async {
            let answer = c
                .call(
                    "POST",
                    "/api/admin/tenants",
                    Some(admin),
                    Some(&json!({"name": "Acme"})),
                )
                .await?;
            let body = expect_status(&answer, 201)?;
            let token = text(&body["token"], "token")?;
            Ok((token, format!("tenant {}", body["id"])))
        })
        .await?;
    let other = checks
        .check("a second tenant, Globex, for the isolation checks", async {
            let answer = c
                .call(
                    "POST",
                    "/api/admin/tenants",
                    Some(admin),
                    Some(&json!({"name": "Globex"})),
                )
                .await?;
            let body = expect_status(&answer, 201)?;
            Ok((text(&body["token"], "token")?, String::new()))
        })
        .await;
    let tenant = tenant.as_str();

    let applied = checks
        .check(
            "POST /api/apply: 3 groups, 8 people, 2 ticket types, 3 automations",
            async {
                let answer = c
                    .call("POST", "/api/apply", Some(tenant), Some(&setup()))
                    .await?;
                let body = expect_status(&answer, 200)?;
                let done = actions(&body);
                if done.len() != 16 || done.iter().any(|action| action != "created") {
                    bail!("expected 16 items created, got {done:?}");
                }
                let applied = read_applied(&body)?;
                if applied.warehouse.len() != 3 || applied.it.len() != 3 {
                    bail!("warehouse and IT have 3 people each: {body}");
                }
                Ok((applied, "16 items created".to_owned()))
            },
        )
        .await?;
    checks
        .check("applying the same setup again changes nothing", async {
            let answer = c
                .call("POST", "/api/apply", Some(tenant), Some(&setup()))
                .await?;
            let done = actions(&expect_status(&answer, 200)?);
            if done.len() != 16 || done.iter().any(|action| action != "unchanged") {
                bail!("expected 16 items unchanged, got {done:?}");
            }
            Ok(((), "16 items unchanged".to_owned()))
        })
        .await;

    let orders_path = path_of(&applied.orders_url).ok()?;
    let converter_path = path_of(&applied.converter_url).ok()?;
    checks
        .check(
            "GET on the webhook shows its full URL and parameters",
            async {
                let answer = c.call("GET", &orders_path, None, None).await?;
                let help = expect_status(&answer, 200)?;
                if answer.header("content-type") != Some("application/json") {
                    bail!("a JSON answer: {:?}", answer.header("content-type"));
                }
                if help["url"] != applied.orders_url.as_str() || help["method"] != "POST" {
                    bail!("help with the full URL {}: {help}", applied.orders_url);
                }
                let names: Vec<&str> = help["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|param| param["name"].as_str())
                    .collect();
                if names != ["kind", "orderId"] {
                    bail!("parameters kind and orderId: {help}");
                }
                Ok(((), format!("POST {}", applied.orders_url)))
            },
        )
        .await;

    let order = |id: &str| json!({"kind": "order.created", "data": {"order": {"id": id}}});
    let first_run = checks
        .check(
            "order 5001: the webhook answers 202 and waits for nothing",
            async {
                let answer = c
                    .call("POST", &orders_path, None, Some(&order("5001")))
                    .await?;
                let body = expect_status(&answer, 202)?;
                if body["status"] != "queued" {
                    bail!("a queued run: {body}");
                }
                let run = text(&body["runId"], "runId")?;
                Ok((run, format!("202 in {}", ms(answer.elapsed))))
            },
        )
        .await;
    checks
        .check("the run of 5001 completes", async {
            let run = first_run
                .clone()
                .context("no run (an earlier check failed)")?;
            let started = Instant::now();
            let status = eventually("the run finishes", || async {
                let answer = c
                    .call("GET", &format!("/api/runs/{run}"), Some(tenant), None)
                    .await?;
                let body = expect_status(&answer, 200)?;
                Ok(match body["status"].as_str() {
                    Some("queued" | "running") => None,
                    _ => Some(body),
                })
            })
            .await?;
            if status["status"] != "completed" {
                bail!(
                    "the run ended {}: {}",
                    status["status"],
                    status["lastError"]
                );
            }
            Ok((
                (),
                format!("completed {} after the 202", ms(started.elapsed())),
            ))
        })
        .await;

    let ticket = |external: &'static str| async move {
        let answer = c.call("GET", "/api/tickets", Some(tenant), None).await?;
        let body = expect_status(&answer, 200)?;
        Ok::<_, anyhow::Error>(
            body["items"]
                .as_array()
                .and_then(|items| items.iter().find(|item| item["externalId"] == external))
                .cloned(),
        )
    };
    let assigned = |external: &'static str| async move {
        eventually(&format!("{external} is assigned"), || async {
            Ok(ticket(external)
                .await?
                .filter(|found| !found["assignee"].is_null()))
        })
        .await
    };

    let t5001 = checks
        .check(
            "ticket order-5001: type order, status and tag waiting-to-pack",
            async {
                let found = ticket("order-5001")
                    .await?
                    .context("no ticket order-5001")?;
                let tagged = found["tags"]
                    .as_array()
                    .is_some_and(|tags| tags.iter().any(|tag| tag == "waiting-to-pack"));
                if found["type"] != "order" || found["status"] != "waiting-to-pack" || !tagged {
                    bail!("an order waiting to be packed: {found}");
                }
                Ok((
                    found.clone(),
                    format!("{} {}", found["number"], found["title"]),
                ))
            },
        )
        .await;
    let first_person = checks
        .check("ticket.created hands 5001 to a warehouse member", async {
            let found = assigned("order-5001").await?;
            let person = text(&found["assignee"]["id"], "assignee id")?;
            if found["group"] != "warehouse" || !applied.warehouse.contains(&person) {
                bail!("a warehouse member has it: {found}");
            }
            Ok((person, format!("{}", found["assignee"]["name"])))
        })
        .await;
    checks
        .check("order 5002: the webhook answers 202", async {
            let answer = c
                .call("POST", &orders_path, None, Some(&order("5002")))
                .await?;
            expect_status(&answer, 202)?;
            Ok(((), format!("202 in {}", ms(answer.elapsed))))
        })
        .await;
    checks
        .check(
            "5002 goes to another warehouse member (the least busy)",
            async {
                let found = assigned("order-5002").await?;
                let person = text(&found["assignee"]["id"], "assignee id")?;
                if found["group"] != "warehouse" || !applied.warehouse.contains(&person) {
                    bail!("a warehouse member has it: {found}");
                }
                if first_person.as_deref() == Some(person.as_str()) {
                    bail!("the same person as 5001: {found}");
                }
                Ok(((), format!("{}", found["assignee"]["name"])))
            },
        )
        .await;

    let error_body = json!({"document": {"id": "D-99"},
        "errors": [{"code": "OCR_FAIL", "message": "Could not read the amount"}]});
    checks
        .check("a converter error (errors.0.message): 202", async {
            let answer = c
                .call("POST", &converter_path, None, Some(&error_body))
                .await?;
            expect_status(&answer, 202)?;
            Ok(((), format!("202 in {}", ms(answer.elapsed))))
        })
        .await;
    checks
        .check(
            "an error ticket with the nested message goes to IT",
            async {
                let found = assigned("doc-D-99").await?;
                let person = text(&found["assignee"]["id"], "assignee id")?;
                if found["type"] != "error"
                    || found["title"] != "Converter error: Could not read the amount"
                    || found["group"] != "IT"
                    || !applied.it.contains(&person)
                {
                    bail!("an error ticket for IT: {found}");
                }
                Ok((
                    (),
                    format!("{} for {}", found["title"], found["assignee"]["name"]),
                ))
            },
        )
        .await;
    let incident = checks
        .check("the tenant sees the incident, without its detail", async {
            let body = eventually("the incident is opened", || async {
                let answer = c.call("GET", "/api/incidents", Some(tenant), None).await?;
                let body = expect_status(&answer, 200)?;
                Ok(body["items"]
                    .as_array()
                    .filter(|items| !items.is_empty())
                    .cloned())
            })
            .await?;
            let [incident] = body.as_slice() else {
                bail!("one incident: {body:?}");
            };
            if incident["title"] != "Document D-99 could not be read"
                || incident["impact"] != "Could not read the amount"
                || incident.get("detail").is_some()
            {
                bail!("the incident without detail: {incident}");
            }
            let id = text(&incident["id"], "incident id")?;
            Ok((
                id,
                format!("{} ({})", incident["title"], incident["status"]),
            ))
        })
        .await;
    checks
        .check("the admin sees the same incident with its detail", async {
            let id = incident
                .clone()
                .context("no incident (an earlier check failed)")?;
            let answer = c
                .call(
                    "GET",
                    &format!("/api/admin/incidents/{id}"),
                    Some(admin),
                    None,
                )
                .await?;
            let body = expect_status(&answer, 200)?;
            if body.get("detail").is_none() {
                bail!("detail for the admin: {body}");
            }
            let answer = c
                .call(
                    "GET",
                    &format!("/api/admin/incidents/{id}"),
                    Some(tenant),
                    None,
                )
                .await?;
            expect_status(&answer, 401)?;
            Ok(((), "and a tenant token is refused there (401)".to_owned()))
        })
        .await;

    checks
        .check(
            "a missing parameter: 400 naming the parameter and path",
            async {
                let answer = c
                    .call(
                        "POST",
                        &converter_path,
                        None,
                        Some(&json!({"errors": [{"message": "x"}]})),
                    )
                    .await?;
                let body = expect_status(&answer, 400)?;
                let error = &body["error"];
                if error["code"] != "missing_parameter"
                    || error["parameter"] != "docId"
                    || error["path"] != "document.id"
                {
                    bail!("missing docId at document.id: {body}");
                }
                Ok(((), format!("{}", error["message"])))
            },
        )
        .await;
    checks
        .check(
            "a parameter of the wrong type: 400 invalid_parameter",
            async {
                let body = json!({"kind": "order.created", "data": {"order": {"id": 5003}}});
                let answer = c.call("POST", &orders_path, None, Some(&body)).await?;
                let body = expect_status(&answer, 400)?;
                if body["error"]["code"] != "invalid_parameter"
                    || body["error"]["parameter"] != "orderId"
                {
                    bail!("orderId has the wrong type: {body}");
                }
                Ok(((), format!("{}", body["error"]["message"])))
            },
        )
        .await;
    checks
        .check("an unknown webhook token: 404", async {
            let answer = c
                .call("POST", "/webhook/wh_nobody", None, Some(&order("1")))
                .await?;
            expect_status(&answer, 404)?;
            Ok(((), String::new()))
        })
        .await;
    checks
        .check(
            "another tenant's ticket: 404, the same bytes as no ticket",
            async {
                let other = other.clone().context("no second tenant")?;
                let found = t5001.clone().context("no ticket 5001")?;
                let id = text(&found["id"], "ticket id")?;
                let theirs = c
                    .call("GET", &format!("/api/tickets/{id}"), Some(&other), None)
                    .await?;
                let nobody = c
                    .call(
                        "GET",
                        "/api/tickets/00000000-0000-0000-0000-000000000000",
                        Some(&other),
                        None,
                    )
                    .await?;
                expect_status(&theirs, 404)?;
                if theirs.body != nobody.body || nobody.status != 404 {
                    bail!(
                        "the same 404: {:?} vs {:?}",
                        String::from_utf8_lossy(&theirs.body),
                        String::from_utf8_lossy(&nobody.body)
                    );
                }
                let list = c.call("GET", "/api/tickets", Some(&other), None).await?;
                let listed = expect_status(&list, 200)?;
                if listed["items"]
                    .as_array()
                    .is_none_or(|items| !items.is_empty())
                {
                    bail!("Globex lists no tickets: {listed}");
                }
                Ok(((), "and Globex lists no tickets".to_owned()))
            },
        )
        .await;
    checks
        .check("no token or an unknown one: 401", async {
            let none = c.call("GET", "/api/tickets", None, None).await?;
            expect_status(&none, 401)?;
            let unknown = c
                .call("GET", "/api/tickets", Some("ft_nobody"), None)
                .await?;
            expect_status(&unknown, 401)?;
            Ok(((), String::new()))
        })
        .await;
    checks
        .check(
            "a paused automation's webhook: 409 automation_paused",
            async {
                let pause = format!("/api/automations/{}/pause", applied.orders_id);
                expect_status(&c.call("POST", &pause, Some(tenant), None).await?, 200)?;
                let answer = c
                    .call("POST", &orders_path, None, Some(&order("5003")))
                    .await?;
                let body = expect_status(&answer, 409)?;
                if body["error"]["code"] != "automation_paused" {
                    bail!("automation_paused: {body}");
                }
                Ok(((), String::new()))
            },
        )
        .await;
    checks
        .check("resumed, the same webhook answers 202 again", async {
            let resume = format!("/api/automations/{}/resume", applied.orders_id);
            expect_status(&c.call("POST", &resume, Some(tenant), None).await?, 200)?;
            let answer = c
                .call("POST", &orders_path, None, Some(&order("5003")))
                .await?;
            expect_status(&answer, 202)?;
            Ok(((), format!("202 in {}", ms(answer.elapsed))))
        })
        .await;
    checks
        .check("GET /metrics counts the webhooks by status code", async {
            let answer = c.call("GET", "/metrics", None, None).await?;
            expect_status(&answer, 200)?;
            let text = String::from_utf8_lossy(&answer.body);
            let count = |series: &str| -> f64 {
                text.lines()
                    .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
                    .unwrap_or(0.0)
            };
            let accepted = count("fronta_webhook_requests_total{code=\"202\"}");
            let open = count("fronta_incidents_open");
            if accepted < 4.0 || open < 1.0 {
                bail!("4 webhooks accepted and an open incident: {text}");
            }
            Ok(((), format!("{accepted} accepted, {open} incident open")))
        })
        .await;
    checks
        .check("GET /api/openapi.json documents the API", async {
            let answer = c.call("GET", "/api/openapi.json", None, None).await?;
            let body = expect_status(&answer, 200)?;
            let paths = body["paths"].as_object().map_or(0, |paths| paths.len());
            if body["openapi"] != "3.1.0" || paths < 30 {
                bail!("an OpenAPI 3.1 document of every route ({paths} paths)");
            }
            Ok(((), format!("OpenAPI 3.1, {paths} paths")))
        })
        .await;
    checks
        .check("GET / serves the dashboard page without a token", async {
            let answer = c.call("GET", "/", None, None).await?;
            if answer.status != 200 {
                bail!("expected 200, got {}", answer.status);
            }
            let content_type = answer.header("content-type").unwrap_or_default();
            let page = String::from_utf8_lossy(&answer.body);
            if !content_type.starts_with("text/html") || !page.contains("/assets/app.js") {
                bail!("an HTML page loading /assets/app.js, got {content_type}");
            }
            Ok(((), format!("{content_type}, {} bytes", answer.body.len())))
        })
        .await;
    checks
        .check("every run completed, none failed", async {
            let runs = eventually("every run finishes", || async {
                let answer = c.call("GET", "/api/runs", Some(tenant), None).await?;
                let body = expect_status(&answer, 200)?;
                let items = body["items"].as_array().cloned().unwrap_or_default();
                let busy = items
                    .iter()
                    .any(|run| matches!(run["status"].as_str(), Some("queued" | "running")));
                // 3 orders + 1 error, and the ticket.created run of each of their tickets.
                Ok((!busy && items.len() >= 8).then_some(items))
            })
            .await?;
            let failed: Vec<&Value> = runs
                .iter()
                .filter(|run| run["status"] != "completed")
                .collect();
            if !failed.is_empty() {
                bail!("runs not completed: {failed:?}");
            }
            Ok(((), format!("{} runs", runs.len())))
        })
        .await;

    Some(Scenario {
        tenant_token: tenant.to_owned(),
        orders_url: applied.orders_url.clone(),
    })
}
