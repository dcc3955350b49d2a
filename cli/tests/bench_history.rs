//! `fronta bench history` through the real binary on SQLite, tiny: it writes its history,
//! measures, and prints every figure of every size in its JSON, so the bench cannot rot
//! (a schema change its bulk insert no longer fits, a route that moved, a figure dropped).
//! Timings are never judged here: only that each figure is there and is a number.

use std::process::Command;

use serde_json::Value;

const FRONTA: &str = env!("CARGO_BIN_EXE_fronta");

/// The measures the bench reports, by their JSON key.
const MEASURES: [&str; 7] = [
    "claim",
    "webhook",
    "metrics",
    "runsBusy",
    "runsEmpty",
    "tickets",
    "healthz",
];

#[test]
fn the_history_bench_reports_every_figure_of_every_size_as_json() {
    let output = Command::new(FRONTA)
        .args([
            "--synchronous",
            "normal",
            "bench",
            "history",
            "--sizes",
            "1000,2000",
            "--samples",
            "5",
            "--tickets",
            "60",
            "--batch",
            "300",
            "--json",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fronta bench history");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench history failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("history 2000: 2000 finished runs written"),
        "the history's writing is reported on stderr:\n{stderr}"
    );
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("stdout is not JSON ({err}):\n{stdout}"));
    assert_eq!(report["database"], "sqlite", "{report}");
    assert_eq!(
        report["baseRuns"], 1000,
        "ratios are to the smallest size: {report}"
    );
    assert!(
        report["flagged"].is_array(),
        "the flags are listed: {report}"
    );
    let sizes = report["sizes"].as_array().expect("a list of sizes");
    assert_eq!(
        sizes
            .iter()
            .map(|size| size["runs"].clone())
            .collect::<Vec<_>>(),
        vec![Value::from(1000), Value::from(2000)],
        "one entry per size, smallest first: {report}"
    );
    for size in sizes {
        let runs = size["runs"].as_u64().expect("runs");
        let busy = size["busyTenantRuns"].as_u64().expect("busyTenantRuns");
        assert!(
            busy > runs / 2 && busy < runs,
            "the busy tenant holds most of the history, not all: {size}"
        );
        assert!(size["insertSeconds"].is_number(), "{size}");
        for key in MEASURES {
            let figure = &size["figures"][key];
            for number in ["medianMs", "p95Ms", "minMs", "maxMs", "ratio"] {
                assert!(
                    figure[number].as_f64().is_some_and(f64::is_finite),
                    "{runs} runs: {key}.{number} is a number: {figure}"
                );
            }
            assert_eq!(
                figure["samples"], 5,
                "{runs} runs: {key} took every sample: {figure}"
            );
            assert!(figure["flags"].is_array(), "{runs} runs: {key}: {figure}");
        }
    }
    let first = &sizes[0]["figures"];
    for key in MEASURES {
        assert_eq!(
            first[key]["ratio"], 1.0,
            "the smallest size is its own base: {key}"
        );
    }
}
