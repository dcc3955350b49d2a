//! The `fronta` command line as a user meets it: enqueue, worker --until-idle, runs
//! list/show/cancel/stats, and bad input answered with one clear line, a non-zero exit
//! and nothing written.

use std::path::Path;
use std::process::{Command, Output};

const FRONTA: &str = env!("CARGO_BIN_EXE_fronta");

fn fronta(db: &Path, args: &[&str]) -> Output {
    Command::new(FRONTA)
        .arg("--database")
        .arg(db)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fronta")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stats(db: &Path) -> serde_json::Value {
    let output = fronta(db, &["runs", "stats", "--json"]);
    assert!(output.status.success(), "stats: {}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("stats is JSON")
}

#[test]
fn enqueue_then_a_worker_until_idle_completes_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("cli.db");
    let output = fronta(
        &db,
        &["enqueue", "noop", "--count", "25", "--tenant", "acme"],
    );
    assert!(output.status.success(), "enqueue: {}", stderr(&output));
    let output = fronta(&db, &["enqueue", "sleep", "--payload", r#"{"seconds": 0}"#]);
    assert!(
        output.status.success(),
        "enqueue sleep: {}",
        stderr(&output)
    );
    let sleep_id = stdout(&output).trim().to_owned();
    assert_eq!(stats(&db)["queued"], 26, "26 queued before the worker");

    let output = fronta(
        &db,
        &[
            "worker",
            "--until-idle",
            "--concurrency",
            "8",
            "--poll",
            "20ms",
        ],
    );
    assert!(output.status.success(), "worker: {}", stderr(&output));
    let after = stats(&db);
    assert_eq!(after["completed"], 26, "all completed: {after}");
    assert_eq!(after["queued"], 0, "none left: {after}");

    let output = fronta(&db, &["runs", "show", &sleep_id, "--json"]);
    assert!(output.status.success(), "show: {}", stderr(&output));
    let run: serde_json::Value = serde_json::from_slice(&output.stdout).expect("run JSON");
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"]["slept"], 0, "{run}");

    let output = fronta(
        &db,
        &[
            "runs",
            "list",
            "--status",
            "completed",
            "--limit",
            "5",
            "--json",
        ],
    );
    let list: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).expect("list JSON");
    assert_eq!(list.len(), 5, "limit respected");
}

#[test]
fn a_delayed_run_is_cancelled_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("cli.db");
    let output = fronta(&db, &["enqueue", "noop", "--delay", "3600"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let id = stdout(&output).trim().to_owned();
    assert_eq!(stats(&db)["scheduled"], 1, "a delayed run is scheduled");
    let output = fronta(&db, &["runs", "cancel", &id]);
    assert!(stdout(&output).contains("cancelled"), "{}", stdout(&output));
    assert_eq!(stats(&db)["cancelled"], 1, "cancelled at once");
    let output = fronta(&db, &["runs", "cancel", &id]);
    assert!(
        stdout(&output).contains("already cancelled"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_unique_key_returns_the_existing_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("cli.db");
    let first = fronta(
        &db,
        &[
            "enqueue",
            "noop",
            "--unique-key",
            "order-1",
            "--delay",
            "60",
        ],
    );
    let second = fronta(&db, &["enqueue", "noop", "--unique-key", "order-1"]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(
        stdout(&first),
        stdout(&second),
        "the second enqueue answers the first run's id"
    );
    assert_eq!(stats(&db)["scheduled"], 1, "only one run exists");
}

#[test]
fn bad_input_is_one_clear_line_a_failure_and_nothing_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("cli.db");
    let cases: [(&[&str], &str); 6] = [
        (&["enqueue", "no-such-kind"], "unknown kind"),
        (&["enqueue", "noop", "--max-retries", "-1"], "max_retries"),
        (
            &["enqueue", "noop", "--payload", "{not json"],
            "not valid JSON",
        ),
        (
            &["enqueue", "sleep", "--payload", "{}", "--count", "3"],
            "seconds",
        ),
        (&["runs", "show", "not-an-id"], "not a run id"),
        (
            &["runs", "cancel", "0190a5e0-0000-7000-8000-000000000000"],
            "no run with id",
        ),
    ];
    for (args, expected) in cases {
        let output = fronta(&db, args);
        assert!(!output.status.success(), "{args:?} must fail");
        let message = stderr(&output);
        assert!(
            message.contains(expected),
            "{args:?}: expected {expected:?} in {message:?}"
        );
        assert_eq!(
            message.trim().lines().count(),
            1,
            "{args:?}: one line, got {message:?}"
        );
    }
    assert_eq!(stats(&db)["queued"], 0, "nothing was written");
    let output = fronta(&db, &["worker", "--lease", "0.5ms"]);
    assert!(
        !output.status.success(),
        "a sub-millisecond lease is refused at start"
    );
    assert!(
        stderr(&output).contains("under 1 ms"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn durations_take_units_and_an_out_of_range_one_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("cli.db");
    for delay in ["90", "1.5", "500ms", "5m", "2h", "1d"] {
        let output = fronta(&db, &["enqueue", "noop", "--delay", delay]);
        assert!(
            output.status.success(),
            "--delay {delay}: {}",
            stderr(&output)
        );
    }
    // Every delayed run is written (the shortest may have come due already on a busy
    // machine: scheduled and queued are counted together).
    let before = stats(&db);
    let written =
        before["scheduled"].as_u64().unwrap_or(0) + before["queued"].as_u64().unwrap_or(0);
    assert_eq!(written, 6, "every delayed run is written: {before}");
    assert!(
        before["scheduled"].as_u64().unwrap_or(0) >= 4,
        "the runs delayed by minutes or more are scheduled: {before}"
    );
    for args in [
        &["enqueue", "noop", "--delay", "99999999999999999999d"][..],
        &["worker", "--until-idle", "--lease", "99999999999999999999d"],
        &["worker", "--until-idle", "--poll", "18446744073709551616s"],
    ] {
        let output = fronta(&db, args);
        let message = stderr(&output);
        assert!(!output.status.success(), "{args:?} must fail");
        assert!(
            !message.contains("panicked"),
            "{args:?}: no panic: {message}"
        );
        assert!(
            message.contains("too long a duration"),
            "{args:?}: the message says what is wrong: {message}"
        );
    }
    // The 500 ms run may have come due meanwhile (scheduled → queued): the six runs
    // are counted together, whatever the clock did while the refused commands ran.
    let after = stats(&db);
    let written = after["scheduled"].as_u64().unwrap_or(0) + after["queued"].as_u64().unwrap_or(0);
    assert_eq!(written, 6, "nothing more was written: {after}");
}

/// Every setting of a working process, by its variable.
const SETTINGS: [&str; 28] = [
    "FRONTA_HTTP_ALLOW",
    "FRONTA_HTTP_TIMEOUT",
    "FRONTA_HTTP_MAX_TIMEOUT",
    "FRONTA_HTTP_CONNECT_TIMEOUT",
    "FRONTA_HTTP_MAX_RESPONSE_BYTES",
    "FRONTA_HTTP_MAX_REDIRECTS",
    "FRONTA_HTTP_MAX_RETRY_AFTER",
    "FRONTA_MCP_STDIO",
    "FRONTA_MCP_CONNECT_TIMEOUT",
    "FRONTA_MCP_MAX_RESULT_BYTES",
    "FRONTA_POLL_MAX_ITEMS",
    "FRONTA_MAIL_CONNECT_TIMEOUT",
    "FRONTA_MAIL_TIMEOUT",
    "FRONTA_MAIL_MESSAGE_BYTES",
    "FRONTA_MAIL_TEXT_BYTES",
    "FRONTA_SMTP_CONNECT_TIMEOUT",
    "FRONTA_SMTP_TIMEOUT",
    "FRONTA_SMTP_DATA_TIMEOUT",
    "FRONTA_SECRET_KEY",
    "FRONTA_SECRET_KEY_VERSION",
    "FRONTA_SECRET_OLD_KEYS",
    "FRONTA_SERVICE_MAX_CONCURRENT",
    "FRONTA_BREAKER_FAILURES",
    "FRONTA_BREAKER_COOLDOWN",
    "FRONTA_SERVICE_SLOT_LEASE",
    "FRONTA_SERVICE_FULL_DELAY",
    "FRONTA_SERVICE_JITTER",
    "FRONTA_STORAGE_WAIT",
];

#[test]
fn help_lists_every_setting_with_its_default_and_never_a_secret() {
    let key = "c2VjcmV0LWtleS1tYXRlcmlhbC10aGF0LWxlYWtz";
    let admin = "fa_an_admin_token_that_must_not_show";
    for command in ["serve", "worker"] {
        let output = Command::new(FRONTA)
            .args([command, "--help"])
            .env("FRONTA_SECRET_KEY", key)
            .env("FRONTA_SECRET_OLD_KEYS", format!("1:{key}"))
            .env("FRONTA_ADMIN_TOKEN", admin)
            .output()
            .expect("run fronta --help");
        let help = stdout(&output);
        assert!(
            output.status.success(),
            "{command} --help: {}",
            stderr(&output)
        );
        for setting in SETTINGS {
            assert!(
                help.contains(&format!("[env: {setting}")),
                "{command} --help lists {setting}:\n{help}"
            );
        }
        for (flag, default) in [
            ("--http-timeout", "[default: 30s]"),
            ("--service-slot-lease", "[default: 10m]"),
            ("--mail-text-bytes", "[default: 65536]"),
            ("--smtp-data-timeout", "[default: 2m]"),
        ] {
            let line = help
                .lines()
                .skip_while(|line| !line.contains(flag))
                .take(2)
                .collect::<String>();
            assert!(line.contains(default), "{flag} shows {default}: {line}");
        }
        assert!(
            !help.contains(key) && !help.contains(admin),
            "{command} --help shows no secret:\n{help}"
        );
    }
}

#[test]
fn a_bad_setting_in_the_environment_stops_the_worker_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("cli.db");
    let cases = [
        (
            "FRONTA_BREAKER_COOLDOWN",
            "soon",
            "FRONTA_BREAKER_COOLDOWN (--breaker-cooldown)",
        ),
        ("FRONTA_POLL_MAX_ITEMS", "0", "must be from 1"),
        (
            "FRONTA_HTTP_TIMEOUT",
            "99999999999999999999d",
            "too long a duration",
        ),
        (
            "FRONTA_SERVICE_SLOT_LEASE",
            "1m",
            "longer than the longest HTTP call",
        ),
        (
            "FRONTA_SECRET_KEY",
            "bm90LTMyLWJ5dGVzLWJ1dC1zZWNyZXQ=",
            "FRONTA_SECRET_KEY: not base64 of exactly 32 bytes",
        ),
    ];
    for (setting, value, expected) in cases {
        let output = Command::new(FRONTA)
            .arg("--database")
            .arg(&db)
            .args(["worker", "--until-idle"])
            .env("RUST_LOG", "warn")
            .env(setting, value)
            .output()
            .expect("run fronta worker");
        let message = stderr(&output);
        assert!(
            !output.status.success(),
            "{setting}={value} stops the worker"
        );
        assert!(
            message.contains(expected),
            "{setting}={value}: expected {expected:?} in {message:?}"
        );
        assert_eq!(
            message.trim().lines().count(),
            1,
            "{setting}: one line: {message:?}"
        );
        if setting == "FRONTA_SECRET_KEY" {
            assert!(!message.contains(value), "the key is not echoed: {message}");
        }
    }
    let output = Command::new(FRONTA)
        .arg("--database")
        .arg(&db)
        .args(["worker", "--until-idle"])
        .env("RUST_LOG", "warn")
        .env("FRONTA_HTTP_TIMEOUT", "")
        .env("FRONTA_SERVICE_JITTER", " ")
        .output()
        .expect("run fronta worker");
    assert!(
        output.status.success(),
        "blank settings are their defaults: {}",
        stderr(&output)
    );
}

/// No TLS server can be made here without a certificate generator, so the test stands in
/// for one: it reads what `apply` sends to an `https://` address (a TLS handshake record,
/// not HTTP) and hangs up; the error then says where and why.
#[test]
fn apply_speaks_tls_to_an_https_server_and_says_why_it_failed() {
    use std::io::Read;
    let dir = tempfile::tempdir().expect("tempdir");
    let setup = dir.path().join("setup.json");
    std::fs::write(&setup, r#"{"groups": []}"#).expect("write the setup");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
    let address = listener.local_addr().expect("an address");
    let server = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().expect("apply connects");
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("a timeout");
        let mut head = [0u8; 3];
        socket.read_exact(&mut head).expect("the first bytes");
        head
    });
    let output = Command::new(FRONTA)
        .args(["apply", "-f"])
        .arg(&setup)
        .args([
            "--server",
            &format!("https://{address}"),
            "--token",
            "ft_test",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fronta apply");
    // Had apply not connected, this connection would be the one read (and fail the test);
    // once the listener has served apply it is closed and this one is refused.
    if let Ok(mut poke) = std::net::TcpStream::connect(address) {
        let _ = std::io::Write::write_all(&mut poke, b"not TLS");
    }
    let head = server.join().expect("the listener read the first bytes");
    assert_eq!(
        (head[0], head[1]),
        (0x16, 0x03),
        "apply opened with a TLS handshake record: {head:02x?}"
    );
    let message = stderr(&output);
    assert!(
        !output.status.success(),
        "a server that hangs up is a failure"
    );
    assert!(
        message.contains(&format!("POST https://{address}/api/apply"))
            && message.contains("TLS handshake"),
        "the error says what was called and at which step it failed: {message}"
    );
    assert_eq!(message.trim().lines().count(), 1, "one line: {message}");
    let output = Command::new(FRONTA)
        .args(["apply", "-f"])
        .arg(&setup)
        .args(["--server", "ftp://127.0.0.1:1", "--token", "ft_test"])
        .output()
        .expect("run fronta apply");
    assert!(
        stderr(&output).contains("not http or https"),
        "another scheme is refused by name: {}",
        stderr(&output)
    );
}

#[test]
fn the_demo_runs_the_seed_scenario_over_http_and_every_check_passes() {
    let output = Command::new(FRONTA)
        .args(["demo", "--exit"])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fronta demo");
    let text = stdout(&output);
    assert!(
        output.status.success(),
        "demo failed:\n{text}\n{}",
        stderr(&output)
    );
    let passed = text
        .lines()
        .filter(|line| line.starts_with("  ok "))
        .count();
    assert!(passed >= 19, "at least 19 checks, got {passed}:\n{text}");
    assert!(!text.contains("FAIL"), "no check failed:\n{text}");
    assert!(
        text.contains(&format!("{passed} checks passed, 0 failed")),
        "the summary counts every check:\n{text}"
    );
    assert!(
        text.contains("on http://127.0.0.1:"),
        "the demo names the server it talks to:\n{text}"
    );
}

#[test]
fn the_engine_demo_passes_every_check_and_says_so() {
    let output = Command::new(FRONTA)
        .args(["demo", "--engine", "--runs", "2000"])
        .output()
        .expect("run fronta demo --engine");
    let text = stdout(&output);
    assert!(
        output.status.success(),
        "demo failed:\n{text}\n{}",
        stderr(&output)
    );
    assert!(
        text.contains("6 checks passed, 0 failed"),
        "demo summary:\n{text}"
    );
    assert!(!text.contains("FAIL"), "no check failed:\n{text}");
}

#[test]
fn two_worker_processes_share_one_database_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("shared.db");
    let output = fronta(
        &db,
        &["enqueue", "noop", "--count", "3000", "--tenant", "a"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let output = fronta(
        &db,
        &["enqueue", "noop", "--count", "1000", "--tenant", "b"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let spawn = || {
        Command::new(FRONTA)
            .arg("--database")
            .arg(&db)
            .args([
                "worker",
                "--until-idle",
                "--concurrency",
                "16",
                "--poll",
                "10ms",
            ])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start a worker")
    };
    let (first, second) = (spawn(), spawn());
    for worker in [first, second] {
        let output = worker.wait_with_output().expect("worker output");
        assert!(output.status.success(), "worker: {}", stderr(&output));
    }
    let after = stats(&db);
    assert_eq!(
        after["completed"], 4000,
        "every run completed once: {after}"
    );
    assert_eq!(after["failed"], 0, "none failed: {after}");
    assert_eq!(
        after["reclaims"], 0,
        "no run was taken from a live worker: {after}"
    );
}

#[test]
fn the_webhook_bench_runs_over_http_and_checks_every_accepted_run() {
    let output = Command::new(FRONTA)
        .args([
            "bench",
            "webhook",
            "--seconds",
            "1",
            "--requests",
            "500",
            "--connections",
            "4",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fronta bench webhook");
    let text = stdout(&output);
    assert!(
        output.status.success(),
        "bench webhook failed:\n{text}\n{}",
        stderr(&output)
    );
    assert!(
        text.contains("paced") && text.contains("p99") && text.contains("req/s"),
        "the figures are printed:\n{text}"
    );
    assert!(
        text.contains("check        ok"),
        "the check passed and is printed:\n{text}"
    );
    assert!(
        text.contains("1500 answered 202") && text.contains("1500 runs queued in the store"),
        "1,000 paced + 500 throughput requests, each a queued run:\n{text}"
    );
}

fn json_of(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}):\n{}", stdout(output)))
}

#[test]
fn an_enqueue_only_bench_leaves_every_run_queued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("enqueue.db");
    let output = fronta(
        &db,
        &[
            "bench",
            "--runs",
            "1000",
            "--callers",
            "3",
            "--batch",
            "100",
            "--no-drain",
            "--json",
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let figures = json_of(&output);
    assert_eq!(figures["runs"], 1000, "{figures}");
    assert_eq!(figures["batch"], 100, "{figures}");
    assert_eq!(figures["ok"], true, "{figures}");
    let after = stats(&db);
    assert_eq!(after["queued"], 1000, "nothing drained: {after}");
    assert_eq!(after["completed"], 0, "nothing drained: {after}");
}

#[test]
fn a_capped_drain_counts_what_ran_and_leaves_the_rest_pending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("capped.db");
    // One run in flight, every claim and completion on disk: 20,000 runs cannot drain in
    // 200 ms, so the cap stops the worker.
    let output = fronta(
        &db,
        &[
            "bench",
            "--runs",
            "20000",
            "--callers",
            "1",
            "--batch",
            "1000",
            "--in-flight",
            "1",
            "--latency-runs",
            "0",
            "--drain-cap",
            "200ms",
            "--json",
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let figures = json_of(&output);
    assert_eq!(figures["drainCapped"], true, "{figures}");
    assert_eq!(figures["ok"], true, "{figures}");
    let drained = figures["drained"].as_u64().expect("drained");
    assert!(drained < 20_000, "{figures}");
    let after = stats(&db);
    assert_eq!(after["completed"], drained, "{after}");
    assert_eq!(
        after["queued"].as_u64().expect("queued") + after["running"].as_u64().expect("running"),
        20_000 - drained,
        "the rest is still pending: {after}"
    );
    assert_eq!(after["reclaims"], 0, "{after}");
}

#[test]
fn the_claim_bench_claims_each_run_once_and_refuses_a_backlog_too_small() {
    let output = Command::new(FRONTA)
        .args([
            "bench",
            "claim",
            "--queued",
            "300",
            "--tenants",
            "3",
            "--samples",
            "100",
            "--limit",
            "2",
            "--json",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fronta bench claim");
    assert!(output.status.success(), "{}", stderr(&output));
    let figures = json_of(&output);
    assert_eq!(figures["ok"], true, "{figures}");
    assert_eq!(figures["queued"], 300, "{figures}");
    assert!(
        figures["claimP50Micros"].as_f64().expect("p50") > 0.0,
        "{figures}"
    );

    let output = Command::new(FRONTA)
        .args([
            "bench",
            "claim",
            "--queued",
            "100",
            "--samples",
            "60",
            "--limit",
            "2",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fronta bench claim");
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("--samples × --limit must not exceed --queued"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn the_rss_bench_reads_a_worker_process_resident_set() {
    let output = Command::new(FRONTA)
        .args([
            "bench",
            "rss",
            "--queued",
            "2000",
            "--tenants",
            "10",
            "--seconds",
            "1s",
            "--concurrency",
            "8",
            "--json",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fronta bench rss");
    assert!(output.status.success(), "{}", stderr(&output));
    let figures = json_of(&output);
    assert_eq!(figures["ok"], true, "{figures}");
    assert_eq!(figures["tenants"], 10, "{figures}");
    assert!(
        figures["peakRssKiB"].as_u64().expect("rss") > 0,
        "the worker's resident set was read: {figures}"
    );
}
