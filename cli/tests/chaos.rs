//! Crash chaos (issue 9 item 1): real `fronta worker` processes drain fire-and-forget
//! `probe` runs and durable `steps` runs while the harness SIGKILLs a worker every
//! 1–4 s (quick tier: 0.5–1.5 s) and starts a fresh one in its place; on Postgres there
//! are 3 workers, the harness also terminates a survivor's backend connections
//! (`pg_terminate_backend`, by `application_name`) at every kill, and the full tier
//! restarts the Postgres server once. When the work runs out before the last kill a new
//! wave of durable runs is enqueued, so every kill lands under load. At the end the
//! survivors are SIGKILLed too and one `--until-idle` worker drains what is left.
//!
//! The checker, from the database (every row, through the store crates) and the probe
//! log: no run lost (every enqueued run is there, counted by id) and every run completed;
//! `attempts` untouched by kills (0 everywhere); `reclaims` counted (the store's total is
//! the rows' sum, and a run executed by k processes has at least k − 1 reclaims); for
//! each durable run no step ran again after its checkpoint was committed, committed steps
//! come once each and in order, its owners follow each other without interleaving, and
//! its result comes from the process that last finished it.
//!
//! Quick tier by default; `FRONTA_CHAOS_FULL=1` runs the issue's numbers (100,000 + 5,000
//! runs, 50 kills, 1–4 s apart; `.ci/full`). `FRONTA_CHAOS_SEED` replays a kill schedule.

mod support;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fronta_engine::{RunId, RunStatus, RunStore};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use support::{Rng, all_runs, check_steps, enqueue, pg, read_log, worker};

/// `FRONTA_CHAOS_FULL=1` selects the full tier.
const FULL_ENV: &str = "FRONTA_CHAOS_FULL";
/// A run reclaimed more often than this fails; far above what the kills can cause.
const MAX_RECLAIMS: &str = "10";

struct Plan {
    fire: u64,
    durable: u64,
    steps: u64,
    step_ms: u64,
    kills: u32,
    gap_ms: (u64, u64),
    workers: usize,
    lease: &'static str,
    drain_timeout: Duration,
    /// Postgres only: terminate a survivor's connections at each kill.
    terminate: bool,
    /// Postgres only: restart the server once, half-way through the kills.
    restart_postgres: bool,
}

fn full() -> bool {
    std::env::var(FULL_ENV).is_ok_and(|value| value == "1")
}

fn plan(postgres: bool) -> Plan {
    match (full(), postgres) {
        (false, false) => Plan {
            fire: 5_000,
            durable: 300,
            steps: 4,
            step_ms: 40,
            kills: 5,
            gap_ms: (500, 1_500),
            workers: 1,
            lease: "2s",
            drain_timeout: Duration::from_secs(180),
            terminate: false,
            restart_postgres: false,
        },
        (false, true) => Plan {
            fire: 3_000,
            durable: 200,
            steps: 4,
            step_ms: 40,
            kills: 4,
            gap_ms: (500, 1_500),
            workers: 3,
            lease: "2s",
            drain_timeout: Duration::from_secs(180),
            terminate: true,
            restart_postgres: false,
        },
        (true, postgres) => Plan {
            fire: 100_000,
            durable: 5_000,
            steps: 10,
            step_ms: 50,
            kills: 50,
            gap_ms: (1_000, 4_000),
            workers: if postgres { 3 } else { 1 },
            lease: "2s",
            drain_timeout: Duration::from_secs(1_800),
            terminate: postgres,
            restart_postgres: postgres,
        },
    }
}

enum Db {
    Sqlite(PathBuf),
    Postgres(pg::TestDb),
}

impl Db {
    fn url(&self) -> String {
        match self {
            Db::Sqlite(path) => path.display().to_string(),
            Db::Postgres(db) => db.url.clone(),
        }
    }

    async fn store(&self) -> Arc<dyn RunStore> {
        match self {
            Db::Sqlite(path) => {
                Arc::new(SqliteStore::open(SqliteConfig::new(path)).expect("open the database"))
            }
            Db::Postgres(db) => Arc::new(db.store(None).await),
        }
    }
}

struct Workers<'a> {
    url: String,
    log: &'a Path,
    dir: &'a Path,
    args: Vec<String>,
    children: Vec<Child>,
    started: usize,
}

impl Workers<'_> {
    fn spawn(&mut self) -> Child {
        self.started += 1;
        let stderr = self.dir.join(format!("worker-{}.err", self.started));
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        worker(&self.url, self.log, &stderr, &args)
    }

    /// Workers that exited on their own (not killed by the harness) are replaced.
    fn replace_exited(&mut self) -> u32 {
        let mut exited = 0;
        for index in 0..self.children.len() {
            if let Some(status) = self.children[index].try_wait().expect("try_wait") {
                eprintln!("chaos: a worker exited on its own ({status}); starting another");
                exited += 1;
                self.children[index] = self.spawn();
            }
        }
        exited
    }
}

fn postgres_restart() {
    let versions = std::fs::read_dir("/etc/postgresql").expect("read /etc/postgresql");
    for version in versions {
        let version = version.expect("entry").file_name();
        let status = std::process::Command::new("pg_ctlcluster")
            .arg("--skip-systemctl-redirect")
            .arg(&version)
            .args(["main", "restart"])
            .status()
            .expect("run pg_ctlcluster");
        assert!(status.success(), "restart Postgres {version:?}");
    }
}

async fn terminate_backends(url: &str, pid: u32) -> i64 {
    let mut conn = loop {
        match <sqlx::PgConnection as sqlx::Connection>::connect(url).await {
            Ok(conn) => break conn,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name LIKE $1 || '%') t",
    )
    .bind(format!("fronta-worker-{pid}"))
    .fetch_one(&mut conn)
    .await
    .expect("terminate backends")
}

/// Makes sure some run is held by a worker: when nothing is open, enqueues a wave of a
/// fifth of the durable runs (answers `true`), then waits until the stats show a run
/// `running` (claimed: executing, or waiting in a worker's local queue).
async fn under_load(store: &dyn RunStore, url: &str, payload: &str, durable: u64) -> bool {
    let stats = loop {
        match store.run_stats().await {
            Ok(stats) => break stats,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let mut waved = false;
    if stats.queued + stats.running + stats.scheduled == 0 {
        let wave = (durable / 5).max(1);
        enqueue(
            url,
            &["steps", "--count", &wave.to_string(), "--payload", payload],
        );
        waved = true;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(stats) = store.run_stats().await
            && stats.running > 0
        {
            return waved;
        }
        assert!(
            Instant::now() < deadline,
            "no worker took a run within a minute"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn ids(store: &dyn RunStore) -> HashSet<RunId> {
    all_runs(store)
        .await
        .into_iter()
        .map(|run| run.id)
        .collect()
}

async fn chaos(db: Db, plan: Plan) {
    let seed = std::env::var("FRONTA_CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|since| since.as_nanos() as u64)
                .unwrap_or(0)
        });
    let mut rng = Rng(seed);
    let store_name = match db {
        Db::Sqlite(_) => "SQLite",
        Db::Postgres(_) => "Postgres",
    };
    eprintln!("chaos on {store_name}: FRONTA_CHAOS_SEED={seed}");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("probes.log");
    let url = db.url();
    let store = db.store().await;
    let began = Instant::now();

    let fire = plan.fire.to_string();
    let durable_payload = format!(r#"{{"steps": {}, "ms": {}}}"#, plan.steps, plan.step_ms);
    enqueue(
        &url,
        &["probe", "--count", &fire, "--payload", r#"{"ms": 0}"#],
    );
    let durable = plan.durable.to_string();
    enqueue(
        &url,
        &["steps", "--count", &durable, "--payload", &durable_payload],
    );
    let mut enqueued = plan.fire + plan.durable;
    let mut expected = ids(store.as_ref()).await;
    assert_eq!(
        expected.len() as u64,
        enqueued,
        "every enqueued run is there"
    );

    let mut workers = Workers {
        url: url.clone(),
        log: &log,
        dir: dir.path(),
        args: [
            "--concurrency",
            "16",
            "--lease",
            plan.lease,
            "--poll",
            "50ms",
            "--max-reclaims",
            MAX_RECLAIMS,
        ]
        .map(String::from)
        .to_vec(),
        children: Vec::new(),
        started: 0,
    };
    for _ in 0..plan.workers {
        let child = workers.spawn();
        workers.children.push(child);
    }

    let (mut kills, mut cut, mut waves, mut unplanned, mut restarts) =
        (0u32, 0i64, 0u32, 0u32, 0u32);
    while kills < plan.kills {
        tokio::time::sleep(Duration::from_millis(
            rng.between(plan.gap_ms.0, plan.gap_ms.1),
        ))
        .await;
        unplanned += workers.replace_exited();
        // Keep every kill under load: a new wave when the work ran out, and the kill
        // waits until a worker holds runs (workers drain fast; a fixed gap alone may
        // find them idle).
        if under_load(store.as_ref(), &url, &durable_payload, plan.durable).await {
            waves += 1;
            enqueued += (plan.durable / 5).max(1);
            expected.extend(ids(store.as_ref()).await);
        }
        let victim = (rng.next() % workers.children.len() as u64) as usize;
        workers.children[victim].kill().expect("SIGKILL a worker");
        workers.children[victim].wait().expect("reap it");
        workers.children[victim] = workers.spawn();
        kills += 1;
        if plan.terminate {
            let survivor = (victim + 1) % workers.children.len();
            cut += terminate_backends(&url, workers.children[survivor].id()).await;
        }
        if plan.restart_postgres && restarts == 0 && kills >= plan.kills / 2 {
            postgres_restart();
            restarts += 1;
        }
    }
    // The survivors die too, holding runs: no graceful release, so every second owner is
    // a reclaim (and at least one run is reclaimed).
    if under_load(store.as_ref(), &url, &durable_payload, plan.durable).await {
        waves += 1;
        enqueued += (plan.durable / 5).max(1);
        expected.extend(ids(store.as_ref()).await);
    }
    for mut child in std::mem::take(&mut workers.children) {
        let _ = child.kill();
        let _ = child.wait();
    }
    let chaos_time = began.elapsed();
    let drain_err = dir.path().join("drain.err");
    let mut args: Vec<&str> = workers.args.iter().map(String::as_str).collect();
    args.push("--until-idle");
    let drain = worker(&url, &log, &drain_err, &args);
    let status = tokio::time::timeout(
        plan.drain_timeout,
        tokio::task::spawn_blocking(move || {
            let mut drain = drain;
            drain.wait()
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("the drain finished within {:?}", plan.drain_timeout))
    .expect("join")
    .expect("drain worker");
    assert!(
        status.success(),
        "the drain worker exits 0 when idle: {}",
        std::fs::read_to_string(&drain_err).unwrap_or_default()
    );
    let total_time = began.elapsed();

    // The checker.
    let runs = all_runs(store.as_ref()).await;
    assert_eq!(runs.len() as u64, enqueued, "no run lost and none made up");
    let present: HashSet<RunId> = runs.iter().map(|run| run.id).collect();
    let lost: Vec<&RunId> = expected.difference(&present).collect();
    assert!(lost.is_empty(), "runs lost: {lost:?}");
    let (steps_log, probes) = read_log(&log);
    let (mut reclaims, mut reclaimed_runs, mut repeated_steps, mut probe_repeats, mut refused) =
        (0u64, 0u64, 0usize, 0usize, 0usize);
    for run in &runs {
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "run {} ({}) completed: {:?}",
            run.id,
            run.kind,
            run.last_error
        );
        assert_eq!(run.attempts, 0, "run {}: kills spend no attempt", run.id);
        reclaims += u64::from(run.reclaims);
        reclaimed_runs += u64::from(run.reclaims > 0);
        let key = run.id.to_string();
        let owners = match run.kind.as_str() {
            "steps" => {
                let lines = steps_log
                    .get(&key)
                    .unwrap_or_else(|| panic!("run {key} was executed"));
                let figures = check_steps(run, lines, plan.steps);
                repeated_steps += figures.repeated_steps;
                refused += figures.refused;
                figures.owners
            }
            "probe" => {
                let starts = probes
                    .get(&key)
                    .unwrap_or_else(|| panic!("probe run {key} was executed"));
                probe_repeats += starts.len() - 1;
                starts.len()
            }
            other => panic!("unexpected kind {other}"),
        };
        assert!(
            owners as u64 <= 1 + u64::from(run.reclaims),
            "run {key}: executed by {owners} processes but only {} reclaims counted",
            run.reclaims
        );
    }
    let stats = store.run_stats().await.expect("stats");
    assert_eq!(stats.completed, enqueued, "stats: {stats:?}");
    assert_eq!(
        (stats.attempts, stats.reclaims),
        (0, reclaims),
        "stats: {stats:?}"
    );
    assert!(reclaims >= 1, "the kills hit runs in flight");
    eprintln!(
        "chaos on {store_name}: {enqueued} runs ({} fire-and-forget, {} durable × {} steps, \
         {waves} extra waves), {} workers, {kills} kills, {cut} connections terminated, \
         {restarts} Postgres restarts, {unplanned} workers exited on their own; \
         chaos {:.1} s, total {:.1} s; {reclaims} reclaims over {reclaimed_runs} runs, \
         {repeated_steps} durable steps repeated before their checkpoint (none after), \
         {probe_repeats} fire-and-forget re-executions, {refused} stale checkpoints refused; \
         every run completed, attempts 0",
        plan.fire,
        enqueued - plan.fire,
        plan.steps,
        plan.workers,
        chaos_time.as_secs_f64(),
        total_time.as_secs_f64(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_worker_kills_lose_no_run_and_repeat_no_checkpointed_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    chaos(Db::Sqlite(dir.path().join("chaos.db")), plan(false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_worker_kills_and_cut_connections_lose_no_run() {
    let db = pg::TestDb::create().await;
    chaos(Db::Postgres(db), plan(true)).await;
}

// The checker itself can fail: each planted log breaks one of its rules.

#[test]
fn the_checker_passes_a_crash_that_repeats_an_uncommitted_step() {
    let log = support::lines(&[
        ("step", 0, 1),
        ("saved", 0, 1),
        ("step", 1, 1),
        ("step", 1, 2),
        ("saved", 1, 2),
        ("done", 2, 2),
    ]);
    let (figures, done_by) = support::check_step_lines("r", &log);
    assert_eq!(
        (figures.owners, figures.repeated_steps, done_by),
        (2, 1, Some(2))
    );
}

#[test]
#[should_panic(expected = "ran again after its checkpoint")]
fn the_checker_catches_a_step_run_again_after_its_checkpoint() {
    let log = support::lines(&[("step", 0, 1), ("saved", 0, 1), ("step", 0, 2)]);
    support::check_step_lines("r", &log);
}

#[test]
#[should_panic(expected = "acts again after")]
fn the_checker_catches_interleaved_owners() {
    let log = support::lines(&[
        ("step", 0, 1),
        ("step", 0, 2),
        ("saved", 0, 2),
        ("step", 1, 1),
    ]);
    support::check_step_lines("r", &log);
}

#[test]
#[should_panic(expected = "committed out of order or twice")]
fn the_checker_catches_a_step_committed_twice() {
    let log = support::lines(&[("step", 0, 1), ("saved", 0, 1), ("saved", 0, 1)]);
    support::check_step_lines("r", &log);
}

#[test]
#[should_panic(expected = "a step after done")]
fn the_checker_catches_a_step_after_done() {
    let log = support::lines(&[("done", 0, 1), ("step", 0, 2)]);
    support::check_step_lines("r", &log);
}
