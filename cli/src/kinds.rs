//! Built-in kinds for operations, tests and benchmarks:
//! - `noop` (fire-and-forget): does nothing, successfully;
//! - `sleep` (durable): payload `{"seconds": N}`; sleeps one second at a time,
//!   checkpoints `{"done": k}` after each, and after a crash resumes where it stopped.
//!   Its result tells where it resumed from: `{"slept": N, "resumedFrom": k}`.

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
    Ok(())
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
