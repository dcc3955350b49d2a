//! `fronta bench history`: what the hot paths cost against a long history of finished
//! runs (issue 21, "reads that stay flat"). For each size of `--sizes` (default 1 k,
//! 100 k, 1 M, 10 M), on a fresh database of its own:
//!
//! 1. **set-up** — the real server (the router of `fronta serve`) runs in this process with
//!    no worker; tenants are made through the admin API (one busy, four quiet, one with no
//!    runs at all) and a webhook automation in the busy one; one webhook's run is the
//!    template of the history's payloads; `--tickets` tickets are written through the desk
//!    port in the busy tenant.
//! 2. **history** — that many finished runs (kind `automation`, about 90 % completed, 7 %
//!    failed, 3 % cancelled; 90 % in the busy tenant, the rest spread over the quiet
//!    ones; created over the last three days, ids UUIDv7 of their creation) are written in
//!    batches of `--batch`, with progress on stderr. This is a bench-only bulk path: one
//!    insert statement per batch through the stores' public handles
//!    (`SqliteStore::transaction`, `PgStore::pool`), because the port inserts runs only
//!    queued, and finishing 10 M through claims would take longer than the bench. It
//!    names the columns of `runs` of both schemas; the stores' own triggers keep
//!    `run_counts`, so the counts `/metrics` reads are those of a real history. On
//!    Postgres the table is then vacuumed and analyzed and a checkpoint taken (what
//!    autovacuum and the checkpointer do on their own soon after such a load); on SQLite
//!    the file and its WAL are synced (the kernel's writeback of the load), so the
//!    measurements meet the steady state, not the load's wake.
//! 3. **measure** — `--samples` timed repetitions of each (a few untimed first), in
//!    rounds of one of each: the claim of one run (one run enqueued, then `run_claim`
//!    timed at the store, as `bench claim` does, then finished), and over one kept-alive
//!    HTTP/1.1 connection on loopback `GET /metrics`, `GET /api/runs?limit=50` of the
//!    busy and of the empty tenant, `GET /api/tickets?limit=50` and, as the floor of a
//!    round trip, `GET /healthz`; then webhook 202s one after the other (after the
//!    claims: each leaves a queued run).
//!
//! Every figure is reported as its median and p95 in ms, and its median's ratio to the
//! same figure at the smallest size; a ratio over 1.5× and a `/metrics` median over 20 ms
//! are flagged (the targets of issue 21), never failed. What each answer holds is checked
//! (a page of 50 runs for the busy tenant, none for the empty one, tickets on the ticket
//! page, a 202 with its run, the claimed run the one enqueued); a wrong answer fails the
//! bench. SQLite uses a fresh file in a temporary folder per size; with
//! `--database postgres://…` (any database of that server, to connect to) a database
//! `fronta_bench_history_<pid>_<size>` is created per size and dropped afterwards.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::Args;
use fronta_desk::store::TicketUpsert;
use fronta_desk::{Origin, TenantId};
use fronta_engine::store::{ClaimParams, Enqueued, Finish, FinishAction};
use fronta_engine::{Dispatcher, EnqueueRequest, RunId, RunStore, StoreError};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

use crate::api_client::ApiClient;
use crate::bench_webhook::{BenchServer, orders_webhook};
use crate::{DbArgs, Store, is_postgres, open_store};

/// A figure whose median grew past this many times its smallest-size median is flagged.
const RATIO_TARGET: f64 = 1.5;
/// A `/metrics` scrape whose median is above this is flagged.
const METRICS_TARGET_MS: f64 = 20.0;
/// Repetitions of each measurement before the timed ones (connections opened, caches
/// and prepared statements warm).
const WARM_UP: usize = 5;
/// The history spans this much time before the load started.
const HISTORY_SPAN: chrono::TimeDelta = chrono::TimeDelta::days(3);
/// How long each finished run of the history took, start to end.
const RUN_TOOK: chrono::TimeDelta = chrono::TimeDelta::milliseconds(40);
/// The page size of the list reads.
const PAGE: usize = 50;
/// Tenants that share the tenth of the history the busy one does not hold.
const QUIET_TENANTS: usize = 4;
/// The last error of the history's failed runs.
const FAILED_ERROR: &str = "step note: the connector answered 503 three times";

#[derive(Args, Debug, Clone)]
pub struct HistoryBenchArgs {
    /// Finished runs in the history, one fresh database per size (comma separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,100000,1000000,10000000"
    )]
    sizes: Vec<u64>,
    /// Timed repetitions of each measurement per size.
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Finished runs per insert statement while the history is written.
    #[arg(long, default_value_t = 10_000)]
    batch: u64,
    /// Tickets written in the busy tenant (the ticket page reads the first 50).
    #[arg(long, default_value_t = 200)]
    tickets: u64,
    /// The most time one measure's samples may take at one size (`60s`, `2m`): a measure
    /// that slow stops early (at least 5 samples are taken) and its figure says how many
    /// it got.
    #[arg(long, default_value = "60s", value_parser = crate::duration::parse)]
    measure_cap: Duration,
    /// Keep each size's database afterwards (its path or name is printed on stderr), to
    /// look at its plans; otherwise it is removed.
    #[arg(long)]
    keep: bool,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

/// What is measured, in the order it is printed: (JSON key, label). `healthz` touches no
/// database: it is the floor of an HTTP round trip here, and its ratio says how much the
/// machine itself drifted between sizes (it is never flagged).
const MEASURES: [(&str, &str); 7] = [
    ("claim", "claim of one run (store)"),
    ("webhook", "webhook 202"),
    ("metrics", "GET /metrics"),
    ("runsBusy", "GET /api/runs?limit=50, busy tenant"),
    ("runsEmpty", "GET /api/runs?limit=50, empty tenant"),
    ("tickets", "GET /api/tickets?limit=50"),
    ("healthz", "GET /healthz (reference, no database)"),
];

/// One measurement at one size.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Figure {
    /// Timed samples (fewer than `--samples` when the measure reached `--measure-cap`).
    samples: usize,
    median_ms: f64,
    p95_ms: f64,
    min_ms: f64,
    max_ms: f64,
    /// The median over the same figure's median at the smallest size.
    ratio: f64,
    /// The targets this figure misses (empty when it meets them).
    flags: Vec<String>,
}

/// Everything measured at one size.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct SizeFigures {
    runs: u64,
    /// How long writing the history took, and its rate.
    insert_seconds: f64,
    inserted_per_second: f64,
    /// Settling after the load (Postgres: VACUUM ANALYZE, CHECKPOINT; 0 on SQLite).
    settle_seconds: f64,
    /// The runs the busy tenant holds in the history.
    busy_tenant_runs: u64,
    figures: std::collections::BTreeMap<String, Figure>,
}

/// Which database, as the figures name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sqlite,
    Postgres,
}

pub async fn run(db: &DbArgs, args: HistoryBenchArgs) -> anyhow::Result<()> {
    if args.sizes.is_empty() || args.sizes.contains(&0) {
        bail!("--sizes must list at least one size, each at least 1");
    }
    if args.samples == 0 || args.batch == 0 {
        bail!("--samples and --batch must be at least 1");
    }
    let kind = match db.database.as_deref() {
        None => Kind::Sqlite,
        Some(url) if is_postgres(url) => Kind::Postgres,
        Some(url) => bail!(
            "bench history makes a fresh SQLite file per size, or a fresh Postgres database per \
             size on the server --database postgres://… names; {url:?} is neither: leave out \
             --database for SQLite"
        ),
    };
    let mut sizes = args.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let mut measured: Vec<SizeFigures> = Vec::new();
    for &size in &sizes {
        eprintln!("history {size}: a fresh database…");
        let figures = match kind {
            Kind::Sqlite => {
                let temp = tempfile::tempdir()
                    .context("creating a temporary folder for the bench database")?;
                let path = temp.path().join("bench-history.db");
                let at = DbArgs {
                    database: Some(path.display().to_string()),
                    ..db.clone()
                };
                let result = one_size(&at, kind, size, &args).await?;
                if args.keep {
                    let _ = temp.keep();
                    eprintln!("history {size}: kept {}", path.display());
                }
                result
            }
            Kind::Postgres => {
                let server = db.database.clone().unwrap_or_default();
                let name = format!("fronta_bench_history_{}_{size}", std::process::id());
                let url = with_database(&server, &name)?;
                admin_statement(&server, &format!("CREATE DATABASE {name}")).await?;
                let at = DbArgs {
                    database: Some(url),
                    ..db.clone()
                };
                let result = one_size(&at, kind, size, &args).await;
                let dropped = admin_statement(
                    &server,
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                )
                .await;
                let result = result?;
                dropped?;
                result
            }
        };
        measured.push(figures);
    }
    let report = report(kind, db, &args, measured);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// The figures of every size, ratios and flags filled in against the smallest size.
fn report(kind: Kind, db: &DbArgs, args: &HistoryBenchArgs, measured: Vec<SizeFigures>) -> Value {
    let base: HashMap<&str, f64> = measured
        .first()
        .map(|figures| {
            figures
                .figures
                .iter()
                .filter_map(|(key, figure)| {
                    MEASURES
                        .iter()
                        .find(|(name, _)| name == key)
                        .map(|(name, _)| (*name, figure.median_ms))
                })
                .collect()
        })
        .unwrap_or_default();
    let base_runs = measured.first().map_or(0, |figures| figures.runs);
    let mut flagged = Vec::new();
    let mut sizes = Vec::new();
    for mut figures in measured {
        let size = figures.runs;
        for (key, figure) in figures.figures.iter_mut() {
            let first = base.get(key.as_str()).copied().unwrap_or(figure.median_ms);
            figure.ratio = if first > 0.0 {
                figure.median_ms / first
            } else {
                1.0
            };
            if figure.ratio > RATIO_TARGET && key != "healthz" {
                figure.flags.push(format!(
                    "median {:.2}× its {base_runs}-run figure (target ≤ {RATIO_TARGET}×)",
                    figure.ratio
                ));
            }
            if key == "metrics" && figure.median_ms > METRICS_TARGET_MS {
                figure.flags.push(format!(
                    "median {:.1} ms (target ≤ {METRICS_TARGET_MS} ms)",
                    figure.median_ms
                ));
            }
            for flag in &figure.flags {
                flagged.push(format!("{size} runs, {key}: {flag}"));
            }
        }
        sizes.push(figures);
    }
    json!({
        "database": match kind { Kind::Sqlite => "sqlite", Kind::Postgres => "postgres" },
        "synchronous": match kind {
            Kind::Sqlite => Value::from(format!("{:?}", db.synchronous).to_lowercase()),
            Kind::Postgres => Value::Null,
        },
        "samples": args.samples,
        "baseRuns": base_runs,
        "ratioTarget": RATIO_TARGET,
        "metricsTargetMs": METRICS_TARGET_MS,
        "measures": MEASURES.iter().map(|(key, label)| json!({"key": key, "label": label})).collect::<Vec<_>>(),
        "sizes": sizes,
        "flagged": flagged,
    })
}

fn print_table(report: &Value) {
    let database = match report["database"].as_str() {
        Some("postgres") => "Postgres".to_owned(),
        _ => format!(
            "SQLite synchronous={}",
            report["synchronous"].as_str().unwrap_or("?")
        ),
    };
    let sizes = report["sizes"].as_array().cloned().unwrap_or_default();
    println!(
        "fronta bench history — {database}, real HTTP/1.1 on loopback, no worker; median / p95 ms over {} samples, ×: median over the {}-run median",
        report["samples"], report["baseRuns"]
    );
    for size in &sizes {
        println!(
            "  history {:>10} runs (busy tenant {}): written in {:.1} s ({:.0}/s), settled in {:.1} s",
            size["runs"],
            size["busyTenantRuns"],
            size["insertSeconds"].as_f64().unwrap_or(0.0),
            size["insertedPerSecond"].as_f64().unwrap_or(0.0),
            size["settleSeconds"].as_f64().unwrap_or(0.0),
        );
    }
    let mut header = format!("  {:<38}", "");
    for size in &sizes {
        header.push_str(&format!(" {:>24}", format!("{} runs", size["runs"])));
    }
    println!("{header}");
    for (key, label) in MEASURES {
        let mut line = format!("  {label:<38}");
        for size in &sizes {
            let figure = &size["figures"][key];
            let mark = if figure["flags"]
                .as_array()
                .is_some_and(|flags| !flags.is_empty())
            {
                "!"
            } else {
                " "
            };
            line.push_str(&format!(
                " {:>24}",
                format!(
                    "{:.2} / {:.2} {:.2}×{mark}",
                    figure["medianMs"].as_f64().unwrap_or(0.0),
                    figure["p95Ms"].as_f64().unwrap_or(0.0),
                    figure["ratio"].as_f64().unwrap_or(0.0),
                )
            ));
        }
        println!("{line}");
    }
    match report["flagged"].as_array() {
        Some(flagged) if !flagged.is_empty() => {
            println!("  flagged (! above; targets of issue 21, not failures):");
            for flag in flagged {
                println!("    {}", flag.as_str().unwrap_or_default());
            }
        }
        _ => println!(
            "  every figure within {RATIO_TARGET}× of its smallest-size figure, /metrics ≤ {METRICS_TARGET_MS} ms"
        ),
    }
}

/// `url` with its database replaced by `name` (the query string kept).
fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let host_at = base
        .find("://")
        .map(|at| at + 3)
        .context("a postgres:// URL")?;
    let path_at = base[host_at..]
        .find('/')
        .map_or(base.len(), |at| at + host_at);
    Ok(format!(
        "{}/{name}{}",
        &base[..path_at],
        query.map(|query| format!("?{query}")).unwrap_or_default()
    ))
}

/// One statement on its own connection to the database `url` names (CREATE / DROP
/// DATABASE, which no transaction may hold).
async fn admin_statement(url: &str, statement: &str) -> anyhow::Result<()> {
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .with_context(|| format!("connecting to {}", fronta_store_postgres::redact(url)))?;
    sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
        .execute(&mut conn)
        .await
        .with_context(|| format!("{statement} on {}", fronta_store_postgres::redact(url)))?;
    conn.close().await.ok();
    Ok(())
}

/// The tenants of the bench, as the API made them.
struct Tenants {
    busy: (TenantId, String),
    quiet: Vec<TenantId>,
    empty_token: String,
}

/// One size on the fresh database `db` names: set-up, history, measurements.
async fn one_size(
    db: &DbArgs,
    kind: Kind,
    size: u64,
    args: &HistoryBenchArgs,
) -> anyhow::Result<SizeFigures> {
    let store = open_store(db, "fronta-bench-history").await?;
    let runs = store.runs();
    // No worker: webhook runs stay queued, and nothing but the bench claims.
    let server = BenchServer::start(&store, "bench-history").await?;
    let (address, admin) = (server.address, server.admin.clone());
    let result = async {
        let client = ApiClient::at(address)?.connection()?;
        let (tenants, webhook) = setup(&client, &admin).await?;
        let payload = template_payload(&client, &webhook, runs.clone()).await?;
        write_tickets(&store, tenants.busy.0, args.tickets).await?;
        let (insert_seconds, busy_runs) = write_history(&store, &tenants, &payload, size, args).await?;
        let settle_seconds = settle(&store).await?;
        let stats = runs.run_stats().await?;
        let finished = stats.completed + stats.failed + stats.cancelled;
        // The history plus the template's run, finished by the set-up.
        if finished != size + 1 || stats.queued + stats.running + stats.scheduled > 0 {
            bail!(
                "the history is not what was written: {finished} finished runs and {} pending for {} written",
                stats.queued + stats.running + stats.scheduled,
                size + 1
            );
        }
        eprintln!(
            "history {size}: measuring ({} samples each, server on http://{address})…",
            args.samples
        );
        let samples = measure(&client, runs.clone(), &tenants, &webhook, args).await?;
        let figures = samples
            .iter()
            .map(|(key, times)| ((*key).to_owned(), figure_of(times)))
            .collect();
        Ok::<_, anyhow::Error>(SizeFigures {
            runs: size,
            insert_seconds,
            inserted_per_second: size as f64 / insert_seconds.max(1e-9),
            settle_seconds,
            busy_tenant_runs: busy_runs,
            figures,
        })
    }
    .await;
    server.stop().await?;
    if let Store::Postgres(pg) = &store {
        pg.pool().close().await;
    }
    drop(store);
    if let Ok(figures) = &result {
        let line: Vec<String> = MEASURES
            .iter()
            .map(|(key, _)| {
                let figure = &figures.figures[*key];
                format!("{key} {:.2}/{:.2}", figure.median_ms, figure.p95_ms)
            })
            .collect();
        eprintln!(
            "history {size} ({}): {} (median/p95 ms)",
            match kind {
                Kind::Sqlite => "sqlite",
                Kind::Postgres => "postgres",
            },
            line.join(", ")
        );
    }
    result
}

/// Median, p95, min and max (ms) of `times` (µs-precise ms); ratio and flags are filled
/// in by [`report`].
fn figure_of(times: &[f64]) -> Figure {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |p: f64| {
        if sorted.is_empty() {
            return 0.0;
        }
        let index = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[index]
    };
    Figure {
        samples: sorted.len(),
        median_ms: at(0.5),
        p95_ms: at(0.95),
        min_ms: sorted.first().copied().unwrap_or(0.0),
        max_ms: sorted.last().copied().unwrap_or(0.0),
        ratio: 1.0,
        flags: Vec::new(),
    }
}

/// Tenants through the admin API and a webhook automation in the busy one; answers them
/// and the webhook's path.
async fn setup(client: &ApiClient, admin: &str) -> anyhow::Result<(Tenants, String)> {
    let mut made = Vec::new();
    let names = [
        "Busy Ltd",
        "Quiet 1",
        "Quiet 2",
        "Quiet 3",
        "Quiet 4",
        "Empty Ltd",
    ];
    for name in names {
        let answer = client
            .call(
                "POST",
                "/api/admin/tenants",
                Some(admin),
                Some(&json!({ "name": name })),
            )
            .await?;
        if answer.status != 201 {
            bail!(
                "creating the tenant {name}: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            );
        }
        let body = answer.json();
        let id: TenantId = body["id"]
            .as_str()
            .context("a tenant id")?
            .parse()
            .map_err(|err| anyhow::anyhow!("tenant id: {err:?}"))?;
        let token = body["token"].as_str().context("a tenant token")?.to_owned();
        made.push((id, token));
    }
    debug_assert_eq!(made.len(), QUIET_TENANTS + 2);
    let webhook = orders_webhook(client, &made[0].1).await?;
    let empty_token = made[QUIET_TENANTS + 1].1.clone();
    let quiet = made[1..=QUIET_TENANTS].iter().map(|(id, _)| *id).collect();
    Ok((
        Tenants {
            busy: made[0].clone(),
            quiet,
            empty_token,
        },
        webhook,
    ))
}

fn webhook_body(n: u64) -> Vec<u8> {
    format!(r#"{{"kind":"order.created","data":{{"order":{{"id":"{n}"}}}}}}"#).into_bytes()
}

/// One webhook's run, read back: its payload is the history's; the run is then claimed
/// and completed (untimed), so no run waits when the claims are timed.
async fn template_payload(
    client: &ApiClient,
    webhook: &str,
    runs: Arc<dyn RunStore>,
) -> anyhow::Result<Value> {
    let answer = client
        .send("POST", webhook, None, Some(webhook_body(0)))
        .await?;
    if answer.status != 202 {
        bail!(
            "the template webhook answered {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
    }
    let id: RunId = answer.json()["runId"]
        .as_str()
        .context("a runId")?
        .parse()
        .map_err(|err| anyhow::anyhow!("runId: {err}"))?;
    let run = runs
        .run_get(id)
        .await?
        .context("the template webhook's run is not in the store")?;
    let claimed = runs.run_claim(claim_params()).await?.claimed;
    match claimed.as_slice() {
        [one] if one.run.id == id => {
            runs.run_finish_many(vec![Finish {
                id,
                owner: one.owner,
                action: FinishAction::Complete { result: None },
            }])
            .await?;
        }
        _ => bail!(
            "claiming the template webhook's run answered {} runs",
            claimed.len()
        ),
    }
    Ok(run.payload)
}

fn claim_params() -> ClaimParams {
    ClaimParams {
        limit: 1,
        default_lease: Duration::from_secs(300),
        leases: Default::default(),
        max_reclaims: 5,
        holder: None,
    }
}

/// `count` tickets in `tenant` through the desk port.
async fn write_tickets(store: &Store, tenant: TenantId, count: u64) -> anyhow::Result<()> {
    let (_, desk, _) = store.ports();
    for n in 0..count {
        desk.ticket_upsert(
            tenant,
            TicketUpsert {
                external_id: format!("order-{n}"),
                title: Some(format!("Order {n} did not arrive")),
                tags: vec!["bench".into()],
                ..TicketUpsert::default()
            },
            Origin::Person,
        )
        .await
        .map_err(|err| anyhow::anyhow!("writing ticket {n}: {err}"))?;
    }
    Ok(())
}

/// One finished run of the history.
struct HistoryRun {
    id: uuid::Uuid,
    tenant: usize,
    status: i16,
    created: DateTime<Utc>,
}

/// The `i`-th of `size` runs of the history, the newest `start`: its tenant (0 the busy
/// one, 1..=4 the quiet ones) and status spread by two multiplicative hashes, so every
/// stretch of the history holds the same mix.
fn history_run(i: u64, size: u64, start: DateTime<Utc>) -> HistoryRun {
    let span = HISTORY_SPAN.num_microseconds().unwrap_or(i64::MAX) as f64;
    let back = span * (size - 1 - i) as f64 / size.max(2) as f64;
    let created = start - chrono::TimeDelta::microseconds(back as i64);
    let share = i.wrapping_mul(2_654_435_761) % 1000;
    let tenant = if share < 900 {
        0
    } else {
        1 + (share - 900) as usize * QUIET_TENANTS / 100
    };
    let mix = i.wrapping_mul(40_503).wrapping_add(7) % 100;
    let status = match mix {
        0..90 => 2,
        90..97 => 3,
        _ => 4,
    };
    let millis = created.timestamp_millis().max(0) as u64;
    let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        millis / 1000,
        (millis % 1000) as u32 * 1_000_000,
    ));
    HistoryRun {
        id,
        tenant,
        status,
        created,
    }
}

/// Writes `size` finished runs in batches, two batches in flight (SQLite: the next one is
/// built while the writer writes one; Postgres: two connections). Answers the seconds it
/// took and the busy tenant's share.
async fn write_history(
    store: &Store,
    tenants: &Tenants,
    payload: &Value,
    size: u64,
    args: &HistoryBenchArgs,
) -> anyhow::Result<(f64, u64)> {
    let names: Arc<Vec<String>> = Arc::new(
        std::iter::once(tenants.busy.0)
            .chain(tenants.quiet.iter().copied())
            .map(|id| id.to_string())
            .collect(),
    );
    let payload_text = Arc::new(serde_json::to_string(payload)?);
    let payload = Arc::new(payload.clone());
    let start = Utc::now() - chrono::TimeDelta::minutes(1);
    let written = Arc::new(AtomicU64::new(0));
    let done = CancellationToken::new();
    {
        let (written, done) = (written.clone(), done.clone());
        tokio::spawn(async move {
            let began = Instant::now();
            loop {
                tokio::select! {
                    _ = done.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                }
                let n = written.load(Ordering::Relaxed);
                let rate = n as f64 / began.elapsed().as_secs_f64();
                let left = (size - n.min(size)) as f64 / rate.max(1.0);
                eprintln!("history {size}: written {n}/{size} ({rate:.0}/s, ~{left:.0} s left)");
            }
        });
    }
    let began = Instant::now();
    let mut busy = 0u64;
    let mut in_flight = tokio::task::JoinSet::new();
    let mut next = 0u64;
    while next < size {
        let end = (next + args.batch).min(size);
        let rows: Vec<HistoryRun> = (next..end).map(|i| history_run(i, size, start)).collect();
        busy += rows.iter().filter(|row| row.tenant == 0).count() as u64;
        let count = end - next;
        next = end;
        let written = written.clone();
        match store {
            Store::Sqlite(sqlite) => {
                let (sqlite, names, payload) =
                    (sqlite.clone(), names.clone(), payload_text.clone());
                in_flight.spawn(async move {
                    sqlite
                        .transaction(move |tx| {
                            let internal = |err: &dyn std::fmt::Display| {
                                StoreError::Internal(format!("writing the history: {err}"))
                            };
                            let mut insert = tx
                                .connection()
                                .prepare_cached(INSERT_SQLITE)
                                .map_err(|err| internal(&err))?;
                            for row in &rows {
                                let created = row.created.timestamp_millis();
                                insert
                                    .execute((
                                        row.id.as_bytes().as_slice(),
                                        names[row.tenant].as_str(),
                                        payload.as_str(),
                                        i64::from(row.status),
                                        created,
                                        created + RUN_TOOK.num_milliseconds(),
                                        FAILED_ERROR,
                                    ))
                                    .map_err(|err| internal(&err))?;
                            }
                            Ok(())
                        })
                        .await?;
                    written.fetch_add(count, Ordering::Relaxed);
                    Ok::<_, anyhow::Error>(())
                });
            }
            Store::Postgres(pg) => {
                let (pool, names, payload) = (pg.pool().clone(), names.clone(), payload.clone());
                in_flight.spawn(async move {
                    insert_postgres(&pool, &rows, &names, &payload).await?;
                    written.fetch_add(count, Ordering::Relaxed);
                    Ok::<_, anyhow::Error>(())
                });
            }
        }
        if in_flight.len() >= 2
            && let Some(finished) = in_flight.join_next().await
        {
            finished??;
        }
    }
    while let Some(finished) = in_flight.join_next().await {
        finished??;
    }
    done.cancel();
    let seconds = began.elapsed().as_secs_f64();
    eprintln!(
        "history {size}: {size} finished runs written in {seconds:.1} s ({:.0}/s)",
        size as f64 / seconds.max(1e-9)
    );
    Ok((seconds, busy))
}

/// The insert of one finished run into SQLite's `runs`: ?1 id, ?2 tenant, ?3 payload,
/// ?4 status, ?5 created (ms), ?6 ended (ms), ?7 the error of a failed run.
const INSERT_SQLITE: &str = "INSERT INTO runs (id, tenant, kind, payload, trigger, status, run_at, \
     attempts, max_retries, created_at, updated_at, started_at, completed_at, failed_at, \
     cancelled_at, last_error) \
     VALUES (?1, ?2, 'automation', ?3, 'webhook', ?4, ?5, 1, 3, ?5, ?6, ?5, \
             CASE WHEN ?4 = 2 THEN ?6 END, CASE WHEN ?4 = 3 THEN ?6 END, \
             CASE WHEN ?4 = 4 THEN ?6 END, CASE WHEN ?4 = 3 THEN ?7 END)";

/// The rows of a batch into Postgres' `runs`: one statement over arrays.
async fn insert_postgres(
    pool: &sqlx::PgPool,
    rows: &[HistoryRun],
    tenants: &[String],
    payload: &Value,
) -> anyhow::Result<()> {
    let ids: Vec<uuid::Uuid> = rows.iter().map(|row| row.id).collect();
    let names: Vec<&str> = rows
        .iter()
        .map(|row| tenants[row.tenant].as_str())
        .collect();
    let statuses: Vec<i16> = rows.iter().map(|row| row.status).collect();
    let created: Vec<DateTime<Utc>> = rows.iter().map(|row| row.created).collect();
    sqlx::query(
        "INSERT INTO runs (id, tenant, kind, payload, trigger, status, run_at, attempts, \
         max_retries, created_at, updated_at, started_at, completed_at, failed_at, \
         cancelled_at, last_error) \
         SELECT r.id, r.tenant, 'automation', $5, 'webhook', r.status, r.created, 1, 3, \
                r.created, r.ended, r.created, \
                CASE WHEN r.status = 2 THEN r.ended END, CASE WHEN r.status = 3 THEN r.ended END, \
                CASE WHEN r.status = 4 THEN r.ended END, CASE WHEN r.status = 3 THEN $6 END \
         FROM (SELECT u.id, u.tenant, u.status, u.created, u.created + $7 AS ended \
               FROM unnest($1::uuid[], $2::text[], $3::int2[], $4::timestamptz[]) \
                    AS u (id, tenant, status, created)) AS r",
    )
    .bind(ids)
    .bind(names)
    .bind(statuses)
    .bind(created)
    .bind(payload)
    .bind(FAILED_ERROR)
    .bind(RUN_TOOK)
    .execute(pool)
    .await
    .context("writing a batch of the history")?;
    Ok(())
}

/// Lets the database settle after the load; answers the seconds it took. Postgres:
/// `VACUUM (ANALYZE) runs` (the visibility map and statistics autovacuum would write
/// within a minute or so of an insert-only load) and a `CHECKPOINT`. SQLite plans
/// without statistics and checkpoints its WAL by itself; what is left is the kernel's
/// writeback of the gigabytes just written: the database file and its WAL are synced
/// here (the kernel would write them out within half a minute by itself), or the first
/// commits measured wait behind that flush — at 10 M runs it put the claims measured
/// right after the load at 4 ms instead of 0.3.
async fn settle(store: &Store) -> anyhow::Result<f64> {
    let began = Instant::now();
    match store {
        Store::Postgres(pg) => {
            for statement in ["VACUUM (ANALYZE) runs", "CHECKPOINT"] {
                sqlx::query(statement)
                    .execute(pg.pool())
                    .await
                    .with_context(|| format!("settling the history: {statement}"))?;
            }
        }
        Store::Sqlite(sqlite) => {
            let path = sqlite.config().path.clone();
            tokio::task::spawn_blocking(move || {
                let mut wal = path.clone().into_os_string();
                wal.push("-wal");
                for file in [path, wal.into()] {
                    match std::fs::File::open(&file) {
                        Ok(open) => open
                            .sync_all()
                            .with_context(|| format!("syncing {}", file.display()))?,
                        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                        Err(err) => {
                            return Err(err).with_context(|| format!("opening {}", file.display()));
                        }
                    }
                }
                Ok::<_, anyhow::Error>(())
            })
            .await
            .context("the sync task")??;
        }
    }
    Ok(began.elapsed().as_secs_f64())
}

/// The timed repetitions; answers each measure's times in ms.
async fn measure(
    client: &ApiClient,
    runs: Arc<dyn RunStore>,
    tenants: &Tenants,
    webhook: &str,
    args: &HistoryBenchArgs,
) -> anyhow::Result<HashMap<&'static str, Vec<f64>>> {
    let samples = args.samples;
    let mut times: HashMap<&'static str, Vec<f64>> = HashMap::new();
    let ms = |elapsed: Duration| elapsed.as_secs_f64() * 1000.0;
    // Whether `key` has used up its time (`--measure-cap`) with enough samples.
    let cap_ms = ms(args.measure_cap);
    let capped = |times: &HashMap<&'static str, Vec<f64>>, key: &str| {
        times
            .get(key)
            .is_some_and(|taken| taken.len() >= WARM_UP && taken.iter().sum::<f64>() >= cap_ms)
    };

    // 1. Rounds of one claim and one of each read, so that a drift of the machine
    //    during the rounds falls on all of them alike. Claims come before any webhook:
    //    a webhook leaves a queued run the next claim would take.
    // Enqueue only: the bench claims and finishes these runs itself, no handler runs.
    let dispatcher = Dispatcher::new(runs.clone(), ["noop"]);
    let busy_token = tenants.busy.1.as_str();
    let empty_token = tenants.empty_token.as_str();
    let page = format!("/api/runs?limit={PAGE}");
    let tickets = format!("/api/tickets?limit={PAGE}");
    let reads: [(&'static str, &str, Option<&str>); 5] = [
        ("metrics", "/metrics", None),
        ("runsBusy", &page, Some(busy_token)),
        ("runsEmpty", &page, Some(empty_token)),
        ("tickets", &tickets, Some(busy_token)),
        ("healthz", "/healthz", None),
    ];
    for round in 0..WARM_UP + samples {
        if !capped(&times, "claim") {
            let mut request = EnqueueRequest::new("noop", json!({}), 0);
            request.tenant = Some(tenants.busy.0.to_string());
            let id = match dispatcher.enqueue(request).await? {
                Enqueued::Inserted(id) | Enqueued::Existing(id) => id,
            };
            let began = Instant::now();
            let batch = runs.run_claim(claim_params()).await?;
            let took = began.elapsed();
            let claimed = match batch.claimed.as_slice() {
                [one] if one.run.id == id => one,
                _ => bail!(
                    "the claim answered {} runs, not the one run enqueued",
                    batch.claimed.len()
                ),
            };
            runs.run_finish_many(vec![Finish {
                id,
                owner: claimed.owner,
                action: FinishAction::Complete { result: None },
            }])
            .await?;
            if round >= WARM_UP {
                times.entry("claim").or_default().push(ms(took));
            }
        }
        for (key, path, token) in reads {
            if capped(&times, key) {
                continue;
            }
            let answer = client.call("GET", path, token, None).await?;
            if answer.status != 200 {
                bail!(
                    "GET {path} answered {}: {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                );
            }
            let items = answer.json()["items"]
                .as_array()
                .map_or(0, |items| items.len());
            let wrong = match key {
                "runsBusy" => (items != PAGE).then(|| format!("{items} runs, not {PAGE}")),
                "runsEmpty" => (items != 0).then(|| format!("{items} runs, not none")),
                "tickets" => (items == 0).then(|| "no ticket".to_owned()),
                "healthz" => None,
                _ => (!answer.body.starts_with(b"#")).then(|| "no metrics text".to_owned()),
            };
            if let Some(wrong) = wrong {
                bail!("GET {path} for {key} answered {wrong}");
            }
            if round >= WARM_UP {
                times.entry(key).or_default().push(ms(answer.elapsed));
            }
        }
    }
    for key in std::iter::once("claim").chain(reads.iter().map(|(key, _, _)| *key)) {
        if capped(&times, key) && times[key].len() < samples {
            eprintln!(
                "{key}: stopped at --measure-cap after {} samples",
                times[key].len()
            );
        }
    }

    // 2. Webhooks, one after the other; each 202's run must be in the store.
    let mut sent = 0usize;
    for round in 0..WARM_UP + samples {
        if capped(&times, "webhook") {
            eprintln!(
                "webhook: stopped at --measure-cap after {} samples",
                times["webhook"].len()
            );
            break;
        }
        sent += 1;
        let answer = client
            .send("POST", webhook, None, Some(webhook_body(round as u64 + 1)))
            .await?;
        let run_id = answer.json()["runId"].as_str().map(str::to_owned);
        let Some(run_id) = run_id.filter(|_| answer.status == 202) else {
            bail!(
                "the webhook answered {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            );
        };
        if round >= WARM_UP {
            times.entry("webhook").or_default().push(ms(answer.elapsed));
        }
        if round + 1 == WARM_UP + samples || capped(&times, "webhook") {
            let id: RunId = run_id
                .parse()
                .map_err(|err| anyhow::anyhow!("runId: {err}"))?;
            if runs.run_get(id).await?.is_none() {
                bail!("the last webhook's run {run_id} is not in the store");
            }
        }
    }
    let stats = runs.run_stats().await?;
    if stats.queued != sent as u64 {
        bail!(
            "{} runs queued after {sent} webhooks answered 202",
            stats.queued
        );
    }
    Ok(times)
}
