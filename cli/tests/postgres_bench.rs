//! The benchmarks' Postgres paths through the real binary: `fronta bench webhook` ingests
//! into an empty Postgres database and reads every accepted run back, and the latency
//! phase of `fronta bench` starts its runs by hand-off at enqueue (one commit) on
//! Postgres as on SQLite. Figures are printed, never judged here: only what the bench
//! checks (each run once, every 202 stored) and what it did (hand-offs) are asserted.

mod support;

use serde_json::Value;

/// Run `fronta --database url <args> --json` and parse its figures (stdout holds only
/// them; logs go to stderr).
fn bench_json(url: &str, args: &[&str]) -> Value {
    let output = support::fronta(url)
        .args(args)
        .arg("--json")
        .output()
        .expect("fronta runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "fronta {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}):\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_bench_ingests_into_postgres_and_reads_every_run_back() {
    let db = support::pg::TestDb::create().await;
    let figures = bench_json(
        &db.url,
        &[
            "bench",
            "webhook",
            "--seconds",
            "1",
            "--rate",
            "200",
            "--requests",
            "300",
            "--connections",
            "4",
        ],
    );
    assert_eq!(figures["database"], "postgres", "{figures}");
    assert_eq!(figures["check"]["ok"], true, "{figures}");
    let text = figures["check"]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("500 answered 202") && text.contains("500 runs queued in the store"),
        "200 paced + 300 throughput requests, each a queued run: {text}"
    );

    // The database now holds runs: a second bench on it would count them as its own.
    let output = support::fronta(&db.url)
        .args(["bench", "webhook", "--seconds", "1"])
        .output()
        .expect("fronta runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("needs an empty database"),
        "a database with runs is refused: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latency_phase_on_postgres_starts_runs_by_hand_off() {
    let db = support::pg::TestDb::create().await;
    let figures = bench_json(
        &db.url,
        &[
            "bench",
            "--runs",
            "10",
            "--callers",
            "1",
            "--in-flight",
            "4",
            "--latency-runs",
            "100",
            "--latency-rate",
            "100",
        ],
    );
    assert_eq!(figures["ok"], true, "every run once: {figures}");
    let handed = figures["latencyHandedOff"].as_u64().unwrap_or(0);
    assert!(
        handed > 0,
        "runs enqueued while the worker waited idle were handed over: {figures}"
    );
    eprintln!(
        "latency phase on Postgres: {handed} of 100 handed over, p50 {} ms",
        figures["latencyP50Ms"]
    );
}
