//! Poison runs (issue 9 item 4): a run whose handler aborts its worker process every time
//! (the test kind `abort`) beside normal `probe` runs. Worker processes are started one
//! after another (`--until-idle`), each dying with SIGABRT whenever it executes the
//! poison run; the run is reclaimed after each death until `--max-reclaims` is spent, then
//! the next claim fails it as a crash loop, and the next worker drains the rest and exits
//! 0. Checked: exactly `max_reclaims + 1` worker deaths, the poison run failed with
//! `reclaims = max_reclaims + 1` (every lease expiry counted, the failing one too) and a
//! crash-loop error, `attempts` untouched, and every normal
//! run completed (each executed by at most `1 + reclaims` processes).
//!
//! Quick tier: 1 poison + 200 normal runs; `FRONTA_CHAOS_FULL=1`: 1 + 1,000.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::time::Instant;

use fronta_engine::RunStatus;
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use support::{all_runs, enqueue, read_log, worker};

const MAX_RECLAIMS: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_kills_its_worker_fails_after_max_reclaims_and_the_rest_complete() {
    let normal: u64 = if std::env::var("FRONTA_CHAOS_FULL").is_ok_and(|value| value == "1") {
        1_000
    } else {
        200
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("poison.db");
    let log = dir.path().join("probes.log");
    let began = Instant::now();
    // The poison first, so it is among the first claims; it aborts 300 ms in, long
    // enough for the runs claimed beside it to finish and be written.
    enqueue(&db, &["abort", "--payload", r#"{"ms": 300}"#]);
    enqueue(
        &db,
        &[
            "probe",
            "--count",
            &normal.to_string(),
            "--payload",
            r#"{"ms": 1}"#,
        ],
    );
    let max_reclaims = MAX_RECLAIMS.to_string();
    let args = [
        "--concurrency",
        "4",
        "--lease",
        "1s",
        "--poll",
        "50ms",
        "--max-reclaims",
        &max_reclaims,
        "--until-idle",
    ];
    let mut deaths = 0u32;
    let mut workers = 0u32;
    loop {
        workers += 1;
        assert!(
            workers <= MAX_RECLAIMS + 2,
            "the crash loop was not stopped: {deaths} deaths"
        );
        let stderr = dir.path().join(format!("worker-{workers}.err"));
        let mut child = worker(&db, &log, &stderr, &args);
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .expect("join")
            .expect("worker");
        let text = std::fs::read_to_string(&stderr).unwrap_or_default();
        if status.success() {
            break;
        }
        assert_eq!(
            status.signal(),
            Some(6),
            "a worker dies only by the poison's abort: {status}: {text}"
        );
        assert!(
            text.contains("abort: the test kind kills its own process"),
            "{text}"
        );
        deaths += 1;
    }
    assert_eq!(
        deaths,
        MAX_RECLAIMS + 1,
        "the poison ran once and once per allowed reclaim, then was failed unexecuted"
    );

    let store = SqliteStore::open(SqliteConfig::new(&db)).expect("open the database");
    let runs = all_runs(&store).await;
    assert_eq!(runs.len() as u64, normal + 1, "no run lost");
    let (_, probes) = read_log(&log);
    let mut neighbour_reclaims = 0u64;
    for run in &runs {
        assert_eq!(run.attempts, 0, "run {}: deaths spend no attempt", run.id);
        if run.kind == "abort" {
            assert_eq!(run.status, RunStatus::Failed, "the poison run failed");
            // Every expiry of its lease is counted, the last one (which failed it) too.
            assert_eq!(run.reclaims, MAX_RECLAIMS + 1, "its reclaims: {run:?}");
            let error = run.last_error.as_deref().unwrap_or_default();
            assert!(error.contains("crash loop"), "a crash-loop error: {error}");
            continue;
        }
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "normal run {} completed: {:?}",
            run.id,
            run.last_error
        );
        let starts = probes.get(&run.id.to_string()).map_or(0, Vec::len);
        assert!(
            (1..=1 + run.reclaims as usize).contains(&starts),
            "run {}: {starts} executions, {} reclaims",
            run.id,
            run.reclaims
        );
        neighbour_reclaims += u64::from(run.reclaims);
    }
    eprintln!(
        "poison: 1 poison + {normal} normal runs, {deaths} worker deaths, {workers} workers, \
         poison failed as a crash loop after {MAX_RECLAIMS} reclaims, {neighbour_reclaims} reclaims of \
         neighbours caught in a death, every normal run completed, {:.1} s",
        began.elapsed().as_secs_f64()
    );
}
