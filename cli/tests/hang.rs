//! Hung poison runs (issue 24 item 4; `RELIABILITY.md` §8b): handlers that never return
//! and never look at their stop signal, beside normal `probe` runs, in the real
//! `fronta worker`.
//!
//! - `hang` awaits forever (a call without a timeout of its own). Two of them at
//!   `--concurrency 2` would hold both slots forever if a timeout waited for the handler
//!   to heed its signal. Checked: each is stopped at its kind's timeout every time, counted
//!   (`timed out` in the worker's report), retried by its ladder until `max_retries` is
//!   spent, then failed with the timeout as its error; every normal run completed once with
//!   no attempt spent; the worker stops on SIGTERM without waiting for anything hung.
//! - `hang-blocking` blocks its thread (a blocking call inside an async handler): no abort
//!   reaches it. At `--concurrency 1` the normal runs could only start once it returned
//!   (after 120 s). Checked: it is failed at its timeout, every normal run completes while
//!   it still blocks (its probe log has no `end` line), the worker logs and counts it as
//!   stuck, and on SIGTERM the process exits without waiting for the blocked thread.
//!
//! Every wait is for a state (the worker's exit, rows, a log line), with a generous
//! deadline; the timeouts' figures are reported, not asserted.

mod support;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use fronta_engine::{Run, RunStatus};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use support::{all_runs, enqueue, read_log, signal};

const FULL_ENV: &str = "FRONTA_CHAOS_FULL";
/// A state the test waits for must arrive within this (a loaded machine is slow, but not
/// this slow); the blocked handler blocks for longer, so its end can never be mistaken for
/// the worker's work.
const STATE_DEADLINE: Duration = Duration::from_secs(90);
const BLOCK_MS: &str = "120000";

fn full() -> bool {
    std::env::var(FULL_ENV).is_ok_and(|value| value == "1")
}

/// A worker with the hang kinds' timeout set to 1 s.
fn hang_worker(db: &Path, log: &Path, stderr: &Path, args: &[&str]) -> Child {
    let err = std::fs::File::create(stderr).expect("create the worker's stderr file");
    support::fronta(db)
        .arg("worker")
        .args(args)
        .env("FRONTA_PROBE_LOG", log)
        .env("FRONTA_TEST_HANG_TIMEOUT", "1s")
        .stdout(std::process::Stdio::null())
        .stderr(err)
        .spawn()
        .expect("start a worker process")
}

/// Waits for the child's exit, at most [`STATE_DEADLINE`]; kills it and fails past that.
fn wait_exit(child: &mut Child, what: &str, stderr: &Path) -> std::process::ExitStatus {
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("poll the worker") {
            return status;
        }
        if began.elapsed() > STATE_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: the worker did not exit within {STATE_DEADLINE:?}: {}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The numbers of the worker's closing `worker done:` line, by their label.
fn report_number(stderr: &str, label: &str) -> u64 {
    let line = stderr
        .lines()
        .find_map(|line| line.split("worker done: ").nth(1))
        .unwrap_or_else(|| panic!("the worker printed no report: {stderr}"));
    line.split(", ")
        .find_map(|part| part.strip_suffix(label))
        .and_then(|number| number.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in the report {line:?}"))
}

async fn runs_of(db: &Path) -> Vec<Run> {
    let store = SqliteStore::open(SqliteConfig::new(db)).expect("open the database");
    all_runs(&store).await
}

/// Waits until every run is terminal and `also` holds of the worker's stderr so far,
/// at most [`STATE_DEADLINE`]; fails if the worker dies first.
async fn wait_all_terminal(
    child: &mut Child,
    db: &Path,
    stderr: &Path,
    also: impl Fn(&str) -> bool,
) -> Vec<Run> {
    let deadline = Instant::now() + STATE_DEADLINE;
    loop {
        assert!(
            child.try_wait().expect("poll the worker").is_none(),
            "the worker died: {}",
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
        let runs = runs_of(db).await;
        let text = std::fs::read_to_string(stderr).unwrap_or_default();
        if runs.iter().all(|run| run.status.is_terminal()) && also(&text) {
            return runs;
        }
        assert!(
            Instant::now() < deadline,
            "the runs were not all terminal (or the worker's log lacked its line) within \
             {STATE_DEADLINE:?}: {:?}\n{text}",
            runs.iter()
                .filter(|run| !run.status.is_terminal())
                .map(|run| (run.kind.as_str(), run.status))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn check_normal_runs(runs: &[Run], probes: &std::collections::HashMap<String, Vec<u32>>) {
    for run in runs.iter().filter(|run| run.kind == "probe") {
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "normal run {} completed beside the hung ones: {:?}",
            run.id,
            run.last_error
        );
        assert_eq!(run.attempts, 0, "run {}: no attempt spent", run.id);
        let starts = probes.get(&run.id.to_string()).map_or(0, Vec::len);
        assert_eq!(starts, 1, "normal run {} executed once", run.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_deaf_to_its_signal_is_stopped_at_its_timeout_each_attempt_and_fails_by_its_ladder()
 {
    let (hung, normal): (usize, u64) = if full() { (8, 2_000) } else { (2, 200) };
    let max_retries = 2u32;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("hang.db");
    let log = dir.path().join("probes.log");
    let stderr = dir.path().join("worker.err");
    let began = Instant::now();
    // The hung runs first, so they are among the first claims and take both slots.
    enqueue(
        &db,
        &[
            "hang",
            "--count",
            &hung.to_string(),
            "--max-retries",
            &max_retries.to_string(),
        ],
    );
    enqueue(
        &db,
        &[
            "probe",
            "--count",
            &normal.to_string(),
            "--payload",
            r#"{"ms": 2}"#,
        ],
    );
    let mut child = hang_worker(
        &db,
        &log,
        &stderr,
        &["--concurrency", "2", "--poll", "50ms"],
    );
    // The state: every run terminal (the hung runs' retries are delayed by their ladder,
    // so `--until-idle` could exit between them); then the worker is stopped.
    let runs = wait_all_terminal(&mut child, &db, &stderr, |_| true).await;
    signal(child.id(), "TERM");
    let status = wait_exit(&mut child, "hang", &stderr);
    let text = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(
        status.success(),
        "the worker stopped on SIGTERM and exited 0: {status}: {text}"
    );
    assert!(!text.contains("panicked"), "no panic: {text}");
    assert_eq!(runs.len() as u64, normal + hung as u64, "no run lost");
    let (_, probes) = read_log(&log);
    let executions = max_retries as usize + 1;
    for run in runs.iter().filter(|run| run.kind == "hang") {
        assert_eq!(run.status, RunStatus::Failed, "hung run {} failed", run.id);
        assert_eq!(
            run.attempts, max_retries,
            "hung run {}: every retry of its ladder spent",
            run.id
        );
        let error = run.last_error.as_deref().unwrap_or_default();
        assert!(
            error.contains("timed out after 1s"),
            "hung run {}: its error names the timeout: {error:?}",
            run.id
        );
        let starts = probes.get(&run.id.to_string()).map_or(0, Vec::len);
        assert_eq!(
            starts, executions,
            "hung run {}: started once per attempt",
            run.id
        );
    }
    check_normal_runs(&runs, &probes);
    let timed_out = report_number(&text, "timed out");
    assert_eq!(
        timed_out,
        (hung * executions) as u64,
        "every execution of a hung run was counted as timed out: {text}"
    );
    assert_eq!(
        report_number(&text, "stuck"),
        0,
        "an awaiting handler is aborted, never stuck: {text}"
    );
    eprintln!(
        "hang: {hung} hung runs × {executions} attempts stopped at their 1 s timeout and failed, \
         {normal} normal runs completed beside them at concurrency 2, {:.1} s",
        began.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_blocking_its_thread_loses_its_slot_at_its_timeout_and_is_counted_stuck() {
    let normal: u64 = if full() { 500 } else { 50 };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("hang-blocking.db");
    let log = dir.path().join("probes.log");
    let stderr = dir.path().join("worker.err");
    let began = Instant::now();
    enqueue(
        &db,
        &[
            "hang-blocking",
            "--max-retries",
            "0",
            "--payload",
            &format!(r#"{{"ms": {BLOCK_MS}}}"#),
        ],
    );
    enqueue(
        &db,
        &[
            "probe",
            "--count",
            &normal.to_string(),
            "--payload",
            r#"{"ms": 2}"#,
        ],
    );
    // One slot: the normal runs can only run once the blocked handler's slot is freed.
    let mut child = hang_worker(
        &db,
        &log,
        &stderr,
        &["--concurrency", "1", "--poll", "50ms"],
    );
    // The state: every run terminal, and the worker's stuck line written.
    let runs = wait_all_terminal(&mut child, &db, &stderr, |text| {
        text.contains("handler stuck")
    })
    .await;
    let blocked = runs
        .iter()
        .find(|run| run.kind == "hang-blocking")
        .expect("the blocking run is there");
    assert_eq!(blocked.status, RunStatus::Failed, "the blocking run failed");
    let error = blocked.last_error.as_deref().unwrap_or_default();
    assert!(
        error.contains("timed out after 1s"),
        "its error names the timeout: {error:?}"
    );
    let (_, probes) = read_log(&log);
    check_normal_runs(&runs, &probes);
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains(&format!("end {} ", blocked.id)),
        "the normal runs completed while the blocked handler still blocked"
    );

    signal(child.id(), "TERM");
    let status = wait_exit(&mut child, "hang-blocking", &stderr);
    let text = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(
        status.success(),
        "the worker stopped on SIGTERM without waiting for the blocked thread: {status}: {text}"
    );
    assert_eq!(report_number(&text, "timed out"), 1, "counted: {text}");
    assert_eq!(report_number(&text, "stuck"), 1, "counted stuck: {text}");
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains(&format!("end {} ", blocked.id)),
        "the process exited before the blocked handler returned"
    );
    eprintln!(
        "hang-blocking: 1 handler blocking its thread for {BLOCK_MS} ms failed at its 1 s timeout, \
         {normal} normal runs completed in its freed slot, counted stuck, process stopped on \
         SIGTERM, {:.1} s",
        began.elapsed().as_secs_f64()
    );
}
