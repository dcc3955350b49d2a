//! Many `fronta worker` processes on one Postgres database (the real binary, the real
//! server): 3 workers drain 10,000 runs with every run executed exactly once, no two
//! owners overlapping, and the small tenant served fairly beside the big one; then a
//! crash: the leader is SIGKILLed and another worker's backend connections are
//! terminated mid-run — nothing is lost, durable runs resume from their checkpoints,
//! and leadership moves to a surviving process.

#[path = "../../store-postgres/tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

const FRONTA: &str = env!("CARGO_BIN_EXE_fronta");

fn fronta(url: &str) -> Command {
    let mut command = Command::new(FRONTA);
    command.arg("--database").arg(url).env("RUST_LOG", "warn");
    command
}

fn enqueue(url: &str, args: &[&str]) {
    let output = fronta(url)
        .arg("enqueue")
        .args(args)
        .output()
        .expect("run fronta enqueue");
    assert!(
        output.status.success(),
        "enqueue {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn worker(url: &str, probe_log: &Path, extra: &[&str]) -> Child {
    fronta(url)
        .arg("worker")
        .args(extra)
        .env("FRONTA_PROBE_LOG", probe_log)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a worker process")
}

struct Probe {
    pid: u32,
    start: u128,
    end: Option<u128>,
}

/// Each run's probe executions, from the log every worker appended to.
fn probes(log: &Path) -> HashMap<String, Vec<Probe>> {
    let text = std::fs::read_to_string(log).expect("read the probe log");
    let mut runs: HashMap<String, Vec<Probe>> = HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 4, "a whole probe line: {line:?}");
        let (run, pid, at) = (
            parts[1].to_owned(),
            parts[2].parse().expect("pid"),
            parts[3].parse().expect("nanos"),
        );
        let executions = runs.entry(run).or_default();
        match parts[0] {
            "start" => executions.push(Probe {
                pid,
                start: at,
                end: None,
            }),
            "end" => {
                let open = executions
                    .iter_mut()
                    .rev()
                    .find(|probe| probe.pid == pid && probe.end.is_none())
                    .expect("an end follows its start in the same process");
                open.end = Some(at);
            }
            other => panic!("unknown probe event {other:?}"),
        }
    }
    runs
}

async fn scalar(conn: &mut PgConnection, sql: &'static str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(conn)
        .await
        .expect(sql)
}

async fn leader(conn: &mut PgConnection) -> Option<String> {
    sqlx::query_scalar::<_, String>(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND ((l.classid::bigint << 32) | l.objid::bigint) = $1",
    )
    .bind(fronta_store_postgres::leader::LEADER_LOCK_KEY)
    .fetch_optional(conn)
    .await
    .expect("leader query")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_worker_processes_run_every_run_once_and_fairly() {
    let db = support::TestDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("probes.log");
    // The big tenant's runs first, then the small tenant's: fairness must not make the
    // small one wait for the big one's 9,000.
    enqueue(
        &db.url,
        &[
            "probe",
            "--count",
            "9000",
            "--tenant",
            "big",
            "--payload",
            r#"{"ms": 0}"#,
        ],
    );
    enqueue(
        &db.url,
        &[
            "probe",
            "--count",
            "1000",
            "--tenant",
            "small",
            "--payload",
            r#"{"ms": 0}"#,
        ],
    );
    let args = ["--until-idle", "--concurrency", "8", "--poll", "20ms"];
    let workers: Vec<Child> = (0..3).map(|_| worker(&db.url, &log, &args)).collect();
    let pids: Vec<u32> = workers.iter().map(Child::id).collect();
    for child in workers {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("worker");
        assert!(
            output.status.success(),
            "a worker failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let runs = probes(&log);
    assert_eq!(runs.len(), 10_000, "every run executed");
    for (run, executions) in &runs {
        assert_eq!(executions.len(), 1, "run {run} executed exactly once");
        assert!(
            executions[0].end.is_some(),
            "run {run} finished its execution"
        );
    }
    let busy: std::collections::HashSet<u32> =
        runs.values().map(|executions| executions[0].pid).collect();
    assert!(
        busy.len() >= 2,
        "the work was shared by the processes ({busy:?} of {pids:?})"
    );

    let mut conn = PgConnection::connect(&db.url).await.expect("connect");
    assert_eq!(
        scalar(&mut conn, "SELECT count(*) FROM runs WHERE status = 2").await,
        10_000,
        "all completed"
    );
    assert_eq!(
        scalar(
            &mut conn,
            "SELECT coalesce(sum(reclaims), 0)::bigint FROM runs"
        )
        .await,
        0,
        "no run was taken from a live owner"
    );
    // Fairness across processes: the small tenant's last run started long before the
    // big tenant's queue was through.
    let small: std::collections::HashSet<String> =
        sqlx::query_scalar::<_, uuid::Uuid>("SELECT id FROM runs WHERE tenant = 'small'")
            .fetch_all(&mut conn)
            .await
            .expect("small runs")
            .into_iter()
            .map(|id| id.to_string())
            .collect();
    let mut starts: Vec<(u128, bool)> = runs
        .iter()
        .map(|(run, e)| (e[0].start, small.contains(run)))
        .collect();
    starts.sort();
    let last_small = starts
        .iter()
        .rposition(|(_, is_small)| *is_small)
        .expect("small runs ran");
    assert!(
        last_small < 5_000,
        "the small tenant's 1,000 runs all started among the first 5,000 (last at {last_small})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_leader_and_cut_connections_lose_nothing_and_leadership_moves() {
    let db = support::TestDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("probes.log");
    enqueue(
        &db.url,
        &["sleep", "--count", "6", "--payload", r#"{"seconds": 12}"#],
    );
    enqueue(
        &db.url,
        &["probe", "--count", "300", "--payload", r#"{"ms": 20}"#],
    );
    // Two slots per worker for the six durable runs: once all six are under way, every
    // worker holds two of them, so the leader killed below always leaves durable runs
    // to reclaim (with four slots the leader could hold none, and the test would fail
    // for want of a reclaim, depending on which worker started first).
    let args = [
        "--concurrency",
        "2",
        "--lease",
        "1s",
        "--poll",
        "50ms",
        "--leader-retry",
        "200ms",
        "--sleep-step",
        "150ms",
        "--shutdown-grace",
        "5s",
    ];
    let mut workers: Vec<Child> = (0..3).map(|_| worker(&db.url, &log, &args)).collect();
    let mut conn = PgConnection::connect(&db.url).await.expect("connect");

    // Wait for a leader and for every durable run to be under way.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first_leader = loop {
        let checkpointed = scalar(
            &mut conn,
            "SELECT count(*) FROM runs WHERE kind = 'sleep' AND (convert_from(state, 'UTF8')::jsonb->>'done')::int >= 2",
        )
        .await;
        if let Some(name) = leader(&mut conn).await
            && checkpointed == 6
        {
            break name;
        }
        assert!(
            Instant::now() < deadline,
            "no leader or no checkpoints after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let leader_pid: u32 = first_leader
        .trim_start_matches("fronta-worker-")
        .trim_end_matches("-leader")
        .parse()
        .expect("the leader's name carries its pid");
    let index = workers
        .iter()
        .position(|child| child.id() == leader_pid)
        .expect("the leader is one of ours");
    let mut killed = workers.remove(index);
    killed.kill().expect("SIGKILL the leader");
    killed.wait().expect("reap it");
    // Cut another worker's database connections from the server side.
    let victim = format!("fronta-worker-{}", workers[0].id());
    let cut: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1 || '%') t",
    )
    .bind(&victim)
    .fetch_one(&mut conn)
    .await
    .expect("terminate backends");
    assert!(cut >= 1, "the victim had connections to cut");

    let deadline = Instant::now() + Duration::from_secs(90);
    let mut new_leader = None;
    loop {
        if new_leader.is_none()
            && let Some(name) = leader(&mut conn).await
            && name != first_leader
        {
            new_leader = Some(name);
        }
        let open = scalar(
            &mut conn,
            "SELECT count(*) FROM runs WHERE status NOT IN (2, 3, 4)",
        )
        .await;
        if open == 0 && new_leader.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not done after 90 s: {open} runs open, new leader {new_leader:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for child in &workers {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
    }
    for child in workers {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("worker");
        assert!(
            output.status.success(),
            "a surviving worker stopped cleanly: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    assert_eq!(
        scalar(&mut conn, "SELECT count(*) FROM runs WHERE status = 2").await,
        306,
        "nothing lost: every run completed"
    );
    assert_eq!(
        scalar(
            &mut conn,
            "SELECT coalesce(sum(attempts), 0)::bigint FROM runs"
        )
        .await,
        0,
        "crashes and cut connections spend no attempt"
    );
    let resumed = scalar(
        &mut conn,
        "SELECT count(*) FROM runs WHERE kind = 'sleep' AND reclaims >= 1 AND (result->>'resumedFrom')::int >= 2 AND (result->>'slept')::int = 12",
    )
    .await;
    let reclaimed = scalar(
        &mut conn,
        "SELECT count(*) FROM runs WHERE kind = 'sleep' AND reclaims >= 1",
    )
    .await;
    assert!(
        reclaimed >= 1,
        "the killed worker's durable runs were reclaimed"
    );
    assert_eq!(
        resumed, reclaimed,
        "every reclaimed durable run resumed from its checkpoint, not from zero"
    );
    // A probe may run twice only if its first owner died mid-run: never at the same time.
    for (run, executions) in probes(&log) {
        let mut spans: Vec<(u128, u128)> = executions
            .iter()
            .map(|probe| (probe.start, probe.end.unwrap_or(probe.start)))
            .collect();
        spans.sort();
        for pair in spans.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "run {run}: two owners overlapped: {spans:?}"
            );
        }
    }
}

/// Two worker processes on one Postgres database, both able to schedule: the leader ticks,
/// and whichever process ended a run plans the next one. A cron with seconds ticks every
/// two seconds; each tick has exactly one run, whoever planned it (the unique key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_schedules_and_each_tick_runs_once() {
    use fronta_automation::Automation;
    use fronta_automation::store::AutomationStore;
    use fronta_desk::DeskStore;
    use std::io::Read;

    let db = support::TestDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("probes.log");
    let store = db.store(None).await;
    let (tenant, _) = store.tenant_create("Acme").await.expect("a tenant");
    let automation = Automation::from_value(&serde_json::json!({
        "name": "Every two seconds",
        "trigger": {"type": "schedule", "cron": "*/2 * * * * *"},
        "steps": [{"name": "note", "op": "flow/log", "input": {"message": "tick"}}]
    }))
    .expect("the automation parses");
    let stored = store
        .automation_create(
            tenant.id,
            automation,
            None,
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("saved");
    let args = ["--poll", "50ms", "--leader-retry", "200ms"];
    let mut workers: Vec<Child> = (0..2)
        .map(|_| {
            fronta(&db.url)
                .arg("worker")
                .args(args)
                .env("FRONTA_PROBE_LOG", &log)
                .env("FRONTA_SCHEDULER_TICK", "1s")
                .env("RUST_LOG", "warn,fronta_automation::scheduler=info")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a worker process")
        })
        .collect();
    let mut conn = PgConnection::connect(&db.url).await.expect("connect");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM runs WHERE trigger = 'schedule' AND status = 2",
        )
        .fetch_one(&mut conn)
        .await
        .expect("count");
        if done >= 4 {
            break;
        }
        assert!(Instant::now() < deadline, "four ticks ran within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (runs, ticks): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT run_at) FROM runs WHERE unique_key = $1")
            .bind(format!("schedule:{}", stored.id))
            .fetch_one(&mut conn)
            .await
            .expect("counts");
    assert_eq!(runs, ticks, "one run per tick, never two");
    // Both stop at once: a leader steps down as soon as its SIGTERM arrives, and a
    // follower still running then would take the lock and plan the next tick itself.
    let status = Command::new("kill")
        .arg("-TERM")
        .args(workers.iter().map(|child| child.id().to_string()))
        .status()
        .expect("kill runs");
    assert!(status.success(), "SIGTERM sent");
    let mut planners = 0;
    for mut child in workers.drain(..) {
        child.wait().expect("the worker exits");
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .expect("read stderr");
        if stderr.contains("scheduler: next run enqueued") {
            planners += 1;
        }
    }
    assert!(
        (1..=2).contains(&planners),
        "the ticks were planned (by the leader, or where a run ended): {planners} processes"
    );
}
