//! Fencing across processes (issue 9 item 2): worker A is frozen with SIGSTOP in the
//! middle of a durable `steps` run and a fire-and-forget `probe` run, past its lease;
//! worker B takes both over (reclaims) and completes them; then A is woken with SIGCONT.
//! Checked: every write A attempts afterwards is refused (its stderr says "lease lost",
//! its exit report completes nothing, and the rows are byte-for-byte what B left); each
//! run completed exactly once (one `done` line, by B); the steps log's record of owners is
//! monotonic (A's commits all come before B's first line, A never commits after B took
//! over) and no step committed by A ran again in B.

mod support;

use std::time::{Duration, Instant};

use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use support::{
    TakenOver, all_runs, check_taken_over, checkpoint_of, enqueue, read_log, signal, worker,
};

const STEPS: u64 = 8;

fn report_completed(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|line| line.contains("worker done:"))
        .unwrap_or_else(|| panic!("an exit report: {stderr}"));
    let after = line.split("claimed, ").nth(1).expect("report shape");
    after
        .split(' ')
        .next()
        .and_then(|count| count.parse().ok())
        .expect("completed count")
}

async fn wait_exit(child: std::process::Child, within: Duration) -> std::process::ExitStatus {
    tokio::time::timeout(
        within,
        tokio::task::spawn_blocking(move || {
            let mut child = child;
            child.wait()
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("the worker exited within {within:?}"))
    .expect("join")
    .expect("wait")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_s_writes_are_all_refused_after_another_took_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("fencing.db");
    let log = dir.path().join("probes.log");
    enqueue(
        &db,
        &[
            "steps",
            "--payload",
            &format!(r#"{{"steps": {STEPS}, "ms": 250}}"#),
        ],
    );
    enqueue(&db, &["probe", "--payload", r#"{"ms": 2500}"#]);
    let args = [
        "--concurrency",
        "2",
        "--lease",
        "2s",
        "--poll",
        "50ms",
        "--until-idle",
    ];
    let a_err = dir.path().join("a.err");
    let a = worker(&db, &log, &a_err, &args);
    let a_pid = a.id();
    let store = SqliteStore::open(SqliteConfig::new(&db)).expect("open the database");

    // Freeze A right after one of its checkpoints commits (between its writes).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = 0;
    loop {
        let runs = all_runs(&store).await;
        let step = runs
            .iter()
            .find(|run| run.kind == "steps")
            .map_or(0, |run| checkpoint_of(&run.state));
        let probe_started = read_log(&log)
            .1
            .values()
            .any(|starts| starts.contains(&a_pid));
        if step >= 2 && step > seen && probe_started {
            signal(a_pid, "STOP");
            break;
        }
        seen = step;
        assert!(Instant::now() < deadline, "A made no progress in 30 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let frozen_at = checkpoint_of(
        &all_runs(&store)
            .await
            .into_iter()
            .find(|run| run.kind == "steps")
            .expect("steps run")
            .state,
    );

    // B takes both runs over once A's lease has expired, and completes them.
    let b_err = dir.path().join("b.err");
    let b = worker(&db, &log, &b_err, &args);
    let b_pid = b.id();
    let status = wait_exit(b, Duration::from_secs(60)).await;
    let b_text = std::fs::read_to_string(&b_err).unwrap_or_default();
    assert!(status.success(), "B exits 0: {b_text}");
    assert_eq!(report_completed(&b_text), 2, "B completed both: {b_text}");
    let after_b = serde_json::to_value(all_runs(&store).await).expect("json");

    // A wakes up: whatever it tries to write is refused.
    signal(a_pid, "CONT");
    let status = wait_exit(a, Duration::from_secs(60)).await;
    let a_text = std::fs::read_to_string(&a_err).unwrap_or_default();
    assert!(status.success(), "A exits 0 once idle: {a_text}");
    assert!(
        a_text.contains("lease lost"),
        "A was told its lease was lost: {a_text}"
    );
    assert_eq!(
        report_completed(&a_text),
        0,
        "A completed nothing: {a_text}"
    );
    let after_a = serde_json::to_value(all_runs(&store).await).expect("json");
    assert_eq!(after_a, after_b, "A's writes changed nothing");

    let runs = all_runs(&store).await;
    let TakenOver { refused, .. } = check_taken_over(
        &runs,
        &log,
        STEPS,
        (a_pid, b_pid),
        |_| frozen_at,
        "B resumed from A's last checkpoint",
    );
    eprintln!(
        "fencing: A (pid {a_pid}) frozen at step {frozen_at} of {STEPS}; B (pid {b_pid}) took \
         both runs over and completed them; on SIGCONT A's writes were refused \
         ({refused} checkpoints refused in the steps log), rows unchanged, one completion each"
    );
}
