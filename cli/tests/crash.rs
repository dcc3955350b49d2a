//! A real `fronta worker` process is killed with SIGKILL in the middle of durable `sleep`
//! runs; a second worker process takes them over once the lease expires, resumes each
//! from its last checkpoint (not from zero) and finishes them: nothing lost, `reclaims`
//! counted, `attempts` untouched. The lease is short by configuration, not by waiting.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use fronta_engine::{RunFilter, RunStatus, RunStore};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use support::{checkpoint_of, fronta};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_s_durable_runs_resume_from_their_checkpoints_in_another_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("crash.db");
    let status = fronta(&db)
        .args([
            "enqueue",
            "sleep",
            "--payload",
            r#"{"seconds": 12}"#,
            "--count",
            "4",
            "--max-retries",
            "2",
        ])
        .status()
        .expect("run fronta enqueue");
    assert!(status.success(), "enqueue of 4 sleep runs succeeds");

    let mut first = fronta(&db)
        .args([
            "worker",
            "--concurrency",
            "4",
            "--lease",
            "1s",
            "--poll",
            "50ms",
            "--sleep-step",
            "150ms",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the first worker");

    let store = SqliteStore::open(SqliteConfig::new(&db)).expect("open the database");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let runs = store
            .run_list(RunFilter::default())
            .await
            .expect("list runs");
        assert_eq!(runs.len(), 4, "four runs exist");
        if runs.iter().all(|run| checkpoint_of(&run.state) >= 3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first worker checkpointed nothing in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().expect("SIGKILL the first worker");
    first.wait().expect("reap the first worker");

    let at_kill: Vec<(fronta_engine::RunId, u64)> = store
        .run_list(RunFilter::default())
        .await
        .expect("list runs")
        .into_iter()
        .map(|run| {
            assert_eq!(
                run.status,
                RunStatus::Running,
                "a killed worker's run still looks running"
            );
            assert!(
                checkpoint_of(&run.state) < 12,
                "the run {} was killed mid-way",
                run.id
            );
            (run.id, checkpoint_of(&run.state))
        })
        .collect();

    let second = fronta(&db)
        .args([
            "worker",
            "--concurrency",
            "4",
            "--lease",
            "1s",
            "--poll",
            "50ms",
            "--sleep-step",
            "150ms",
            "--until-idle",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the second worker");
    let output = tokio::time::timeout(Duration::from_secs(60), async move {
        tokio::task::spawn_blocking(move || second.wait_with_output())
            .await
            .expect("join")
    })
    .await
    .expect("the second worker finished within 60 s")
    .expect("second worker output");
    assert!(
        output.status.success(),
        "the second worker exits 0 when idle: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    for (id, checkpoint) in at_kill {
        let run = store.run_get(id).await.expect("get").expect("run exists");
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "run {id} completed: {:?}",
            run.last_error
        );
        assert_eq!(
            run.reclaims, 1,
            "run {id}: the crash counted as one reclaim"
        );
        assert_eq!(run.attempts, 0, "run {id}: a crash spends no attempt");
        let result = run.result.expect("a sleep run has a result");
        assert_eq!(
            result["slept"], 12,
            "run {id} slept its whole time: {result}"
        );
        assert_eq!(
            result["resumedFrom"].as_u64(),
            Some(checkpoint),
            "run {id} resumed from its last checkpoint ({checkpoint}), not from zero: {result}"
        );
    }
    let stats = store.run_stats().await.expect("stats");
    assert_eq!(stats.completed, 4, "nothing lost: {stats:?}");
    assert_eq!(
        (stats.reclaims, stats.attempts),
        (4, 0),
        "counters: {stats:?}"
    );
}
