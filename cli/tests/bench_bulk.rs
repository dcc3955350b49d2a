//! `fronta bench bulk` through the binary, small: it must keep measuring what it says (a
//! bulk cancel over every matching run, checked by the bench itself) and print every
//! figure. No timing is asserted.

mod support;

use std::process::Command;

#[test]
fn the_bulk_bench_cancels_every_match_once_and_reports_its_memory() {
    let out = Command::new(support::FRONTA)
        .args([
            "bench", "bulk", "--runs", "1500", "--batch", "100", "--json",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("fronta bench bulk runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the figures as JSON");
    assert_eq!(figures["runs"], 1500, "{figures}");
    assert_eq!(
        figures["acted"], 1500,
        "every match acted on once: {figures}"
    );
    assert_eq!(figures["skipped"], 0, "{figures}");
    for figure in [
        "seconds",
        "matchesPerSecond",
        "rssBeforeMib",
        "peakRssMib",
        "peakGrowthMib",
    ] {
        assert!(
            figures[figure].as_f64().is_some_and(|value| value >= 0.0),
            "{figure}: {figures}"
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("enqueued 1500/1500"),
        "progress is shown: {stderr}"
    );
}
