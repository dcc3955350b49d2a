//! Built-in kinds for operations, tests and benchmarks:
//! - `noop` (fire-and-forget): does nothing, successfully;
//! - `sleep` (durable): payload `{"seconds": N}`; sleeps one second at a time,
//!   checkpoints `{"done": k}` after each, and after a crash resumes where it stopped.
//!   Its result tells where it resumed from: `{"slept": N, "resumedFrom": k}`.
//! - `probe` (fire-and-forget, for the multi-process tests): payload `{"ms": N}`; appends
//!   `start|end <run> <pid> <unix-nanos>` lines to the file named by `FRONTA_PROBE_LOG`
//!   around an N-millisecond sleep, so a checker can prove no two owners overlapped.
//!
//! Test kinds, registered only when `FRONTA_TEST_KINDS=1` (the reliability harnesses,
//! `cli/tests/chaos.rs`, `fencing.rs`, `poison.rs`; never in production):
//! - `steps` (durable): payload `{"steps": N, "ms": M}`; step k (from the checkpoint on)
//!   appends `step <run> <k> <pid> <nanos>`, sleeps M ms, checkpoints `{"done": k+1}` and
//!   appends `saved <run> <k> <pid> <nanos>` once the checkpoint is committed, or
//!   `refused <run> <k> <pid> <nanos>` when the store refused it (lease lost), or
//!   `stopped <run> <k> <pid> <nanos>` when its stop signal fired. At the end it appends
//!   `done <run> <N> <pid> <nanos>` and answers `{"steps": N, "resumedFrom": k, "by": pid}`.
//!   A checker reads from the log that no step ran again after its checkpoint and that
//!   the owners of a run's committed steps follow each other without interleaving.
//! - `abort` (fire-and-forget): payload `{"ms": N}`; after N ms calls
//!   `std::process::abort()` — kills its own worker process every time it runs (the
//!   poison run of the crash-loop harness).
//! - `hang` (fire-and-forget, `cli/tests/hang.rs`): appends the probe's `start` line, then
//!   awaits forever and never looks at its stop signal — a call with no timeout of its
//!   own. Its timeout is `FRONTA_TEST_HANG_TIMEOUT` (default 1 s), its ladder one 100 ms
//!   step.
//! - `hang-blocking` (fire-and-forget, same timeout and ladder): appends `start`, then
//!   blocks its thread for payload `{"ms": N}` (default 30 s) — a blocking call inside an
//!   async handler — and appends `end` if it ever returns.

use std::time::Duration;

use fronta_engine::{KindConfig, Outcome, Registry, RunContext};
use serde_json::{Value, json};

/// The longest `sleep` accepted (a day).
pub const MAX_SLEEP_SECONDS: u64 = 86_400;

pub struct BuiltinSettings {
    /// The lease of the durable `sleep` kind.
    pub sleep_lease: Duration,
    /// Time for one `sleep` step (1 s; tests may shorten it).
    pub sleep_step: Duration,
}

pub fn register(registry: &mut Registry, settings: &BuiltinSettings) -> anyhow::Result<()> {
    registry.register(
        "noop",
        KindConfig::fire_and_forget(Duration::from_secs(30)),
        |_ctx: RunContext| async { Outcome::done() },
    )?;
    registry.register(
        "probe",
        KindConfig::fire_and_forget(Duration::from_secs(60)),
        |ctx: RunContext| async move { probe(ctx).await },
    )?;
    let step = settings.sleep_step;
    registry.register(
        "sleep",
        KindConfig::durable(
            settings.sleep_lease,
            Duration::from_secs(MAX_SLEEP_SECONDS + 3600),
        )
        .with_payload_check(check_sleep),
        move |ctx: RunContext| sleep(ctx, step),
    )?;
    if test_kinds_enabled() {
        let step_lease = settings.sleep_lease;
        registry.register(
            "steps",
            KindConfig::durable(step_lease, Duration::from_secs(MAX_SLEEP_SECONDS)),
            |ctx: RunContext| steps(ctx),
        )?;
        registry.register(
            "abort",
            KindConfig::fire_and_forget(Duration::from_secs(60)),
            |ctx: RunContext| abort(ctx),
        )?;
        let hang_timeout = hang_timeout()?;
        let ladder = fronta_engine::RetryLadder::new(vec![Duration::from_millis(100)]);
        let hang_kind = || match ladder.clone() {
            Some(ladder) => KindConfig::fire_and_forget(hang_timeout).with_ladder(ladder),
            None => KindConfig::fire_and_forget(hang_timeout),
        };
        registry.register("hang", hang_kind(), |ctx: RunContext| hang(ctx))?;
        registry.register("hang-blocking", hang_kind(), |ctx: RunContext| {
            hang_blocking(ctx)
        })?;
    }
    Ok(())
}

/// The timeout of the `hang` kinds: `FRONTA_TEST_HANG_TIMEOUT` (a duration), 1 s by default.
pub const HANG_TIMEOUT_ENV: &str = "FRONTA_TEST_HANG_TIMEOUT";

fn hang_timeout() -> anyhow::Result<Duration> {
    match std::env::var(HANG_TIMEOUT_ENV) {
        Ok(text) => crate::duration::parse(&text)
            .map_err(|err| anyhow::anyhow!("{HANG_TIMEOUT_ENV}={text:?}: {err}")),
        Err(_) => Ok(Duration::from_secs(1)),
    }
}

/// Never answers and never looks at its stop signal.
async fn hang(ctx: RunContext) -> Outcome {
    if let Err(err) = probe_append(&probe_line("start", ctx.run.id)) {
        return Outcome::Fail(format!("probe log: {err}"));
    }
    std::future::pending::<Outcome>().await
}

/// Blocks its thread (a blocking call in an async handler), deaf to its signal.
async fn hang_blocking(ctx: RunContext) -> Outcome {
    if let Err(err) = probe_append(&probe_line("start", ctx.run.id)) {
        return Outcome::Fail(format!("probe log: {err}"));
    }
    let ms = ctx
        .run
        .payload
        .get("ms")
        .and_then(Value::as_u64)
        .unwrap_or(30_000);
    std::thread::sleep(Duration::from_millis(ms));
    let _ = probe_append(&probe_line("end", ctx.run.id));
    Outcome::done()
}

/// The environment variable that registers the test kinds (`steps`, `abort`) when `1`.
pub const TEST_KINDS_ENV: &str = "FRONTA_TEST_KINDS";

fn test_kinds_enabled() -> bool {
    let enabled = std::env::var(TEST_KINDS_ENV).is_ok_and(|value| value == "1");
    if enabled {
        tracing::warn!(
            "{TEST_KINDS_ENV}=1: the test kinds `steps`, `abort`, `hang` and `hang-blocking` are registered"
        );
    }
    enabled
}

fn check_sleep(payload: &Value) -> Result<(), String> {
    match payload.get("seconds").and_then(Value::as_u64) {
        Some(seconds) if seconds <= MAX_SLEEP_SECONDS => Ok(()),
        Some(seconds) => Err(format!(
            "seconds {seconds} is over the limit of {MAX_SLEEP_SECONDS}"
        )),
        None => {
            Err(r#"the payload needs "seconds": a whole number ≥ 0, e.g. {"seconds": 5}"#.into())
        }
    }
}

async fn sleep(ctx: RunContext, step: Duration) -> Outcome {
    let total = ctx
        .run
        .payload
        .get("seconds")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let resumed_from = ctx
        .run
        .state
        .as_deref()
        .and_then(|bytes| serde_json::from_slice::<Value>(bytes).ok())
        .and_then(|state| state.get("done").and_then(Value::as_u64))
        .unwrap_or(0);
    if resumed_from > 0 {
        tracing::info!(run = %ctx.run.id, resumed_from, total, "sleep: resuming from checkpoint");
    }
    for done in resumed_from..total {
        tokio::select! {
            _ = ctx.signal.stopped() => return Outcome::Fail("stopped".into()),
            _ = tokio::time::sleep(step) => {}
        }
        let state = json!({ "done": done + 1 }).to_string().into_bytes();
        if ctx.checkpointer.save(state).await.is_err() {
            return Outcome::Fail("lease lost".into());
        }
    }
    Outcome::Done(Some(json!({ "slept": total, "resumedFrom": resumed_from })))
}

/// The environment variable naming the file `probe` runs append to.
pub const PROBE_LOG_ENV: &str = "FRONTA_PROBE_LOG";

fn probe_line(event: &str, run: fronta_engine::RunId) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or(0);
    format!("{event} {run} {} {nanos}\n", std::process::id())
}

fn probe_append(line: &str) -> std::io::Result<()> {
    use std::io::Write;
    let Ok(path) = std::env::var(PROBE_LOG_ENV) else {
        return Ok(());
    };
    // One write of a short line with O_APPEND: lines of several processes never interleave.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

async fn probe(ctx: RunContext) -> Outcome {
    let ms = ctx
        .run
        .payload
        .get("ms")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if let Err(err) = probe_append(&probe_line("start", ctx.run.id)) {
        return Outcome::Fail(format!("probe log: {err}"));
    }
    tokio::select! {
        _ = ctx.signal.stopped() => return Outcome::Fail("stopped".into()),
        _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
    }
    if let Err(err) = probe_append(&probe_line("end", ctx.run.id)) {
        return Outcome::Fail(format!("probe log: {err}"));
    }
    Outcome::done()
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or(0)
}

fn steps_line(event: &str, run: fronta_engine::RunId, step: u64) -> String {
    format!(
        "{event} {run} {step} {} {}\n",
        std::process::id(),
        now_nanos()
    )
}

async fn steps(ctx: RunContext) -> Outcome {
    let payload = &ctx.run.payload;
    let total = payload.get("steps").and_then(Value::as_u64).unwrap_or(0);
    let ms = payload.get("ms").and_then(Value::as_u64).unwrap_or(0);
    let resumed_from = ctx
        .run
        .state
        .as_deref()
        .and_then(|bytes| serde_json::from_slice::<Value>(bytes).ok())
        .and_then(|state| state.get("done").and_then(Value::as_u64))
        .unwrap_or(0);
    let log = |event: &str, step: u64| probe_append(&steps_line(event, ctx.run.id, step));
    for step in resumed_from..total {
        if let Err(err) = log("step", step) {
            return Outcome::Fail(format!("probe log: {err}"));
        }
        tokio::select! {
            _ = ctx.signal.stopped() => {
                let _ = log("stopped", step);
                return Outcome::Fail("stopped".into());
            }
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
        }
        let state = json!({ "done": step + 1 }).to_string().into_bytes();
        if ctx.checkpointer.save(state).await.is_err() {
            let _ = log("refused", step);
            return Outcome::Fail("lease lost".into());
        }
        if let Err(err) = log("saved", step) {
            return Outcome::Fail(format!("probe log: {err}"));
        }
    }
    if let Err(err) = log("done", total) {
        return Outcome::Fail(format!("probe log: {err}"));
    }
    Outcome::Done(Some(json!({
        "steps": total,
        "resumedFrom": resumed_from,
        "by": std::process::id(),
    })))
}

async fn abort(ctx: RunContext) -> Outcome {
    let ms = ctx
        .run
        .payload
        .get("ms")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    tracing::error!(run = %ctx.run.id, "abort: the test kind kills its own process now");
    std::process::abort()
}
