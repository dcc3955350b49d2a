//! `fronta bench mixed` through the binary, tiny, on Postgres: two worker processes, a
//! few seconds of paced arrivals with a handful of long runs. It must keep measuring what
//! it says (every run started and ended once, checked by the bench itself) and print every
//! figure. No timing is asserted.

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mixed_bench_runs_every_arrival_once_and_reports_both_start_delays() {
    let db = support::pg::TestDb::create().await;
    let out = support::fronta(&db.url)
        .args([
            "bench",
            "mixed",
            "--rate",
            "40",
            "--seconds",
            "2",
            "--long-every",
            "10",
            "--long-ms",
            "200",
            "--processes",
            "2",
            "--in-flight",
            "8",
            "--drain-cap",
            "30s",
            "--json",
        ])
        .output()
        .expect("fronta bench mixed runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the figures as JSON");
    assert_eq!(figures["ok"], true, "{figures}");
    assert_eq!(figures["database"], "postgres", "{figures}");
    assert_eq!(figures["runs"], 80, "40/s for 2 s: {figures}");
    assert_eq!(figures["completed"], 80, "{figures}");
    assert_eq!(figures["claimed"], 80, "each run claimed once: {figures}");
    assert_eq!(figures["reclaims"], 0, "{figures}");
    assert_eq!(figures["short"]["runs"], 72, "{figures}");
    assert_eq!(figures["long"]["runs"], 8, "one in 10 is long: {figures}");
    assert_eq!(figures["startDelayFrom"], "enqueue call made", "{figures}");
    for figure in [
        "arrivalSeconds",
        "arrivalLagMaxMs",
        "wallSeconds",
        "runsPerSecond",
        "enqueueP50Ms",
        "enqueueP99Ms",
    ] {
        assert!(
            figures[figure].as_f64().is_some_and(|value| value >= 0.0),
            "{figure}: {figures}"
        );
    }
    for class in ["short", "long"] {
        for figure in ["p50Ms", "p95Ms", "p99Ms", "maxMs"] {
            assert!(
                figures[class][figure]
                    .as_f64()
                    .is_some_and(|value| value >= 0.0),
                "{class}.{figure}: {figures}"
            );
        }
    }
    let by_process = figures["startedByProcess"]
        .as_array()
        .expect("runs started by each process");
    assert_eq!(by_process.len(), 2, "one entry per process: {figures}");
    let started: u64 = by_process
        .iter()
        .flat_map(|counts| counts.as_array().into_iter().flatten())
        .filter_map(serde_json::Value::as_u64)
        .sum();
    assert_eq!(started, 80, "every run started by one of them: {figures}");
}
