//! The real `Worker` under seeded chaos on `MemoryStore` (see `fronta_sim::workers`).
//!
//! `FRONTA_SIM_SEEDS=<n>` sets the number of seeds (default 150 here, 2,000 in the full
//! tier), `FRONTA_SIM_SEED_BASE=<n>` the first, `FRONTA_SIM_SEED=<n>` replays one.

use std::sync::Arc;
use std::time::Instant;

use fronta_engine::{Clock, ManualClock};
use fronta_sim::MemoryStore;
use fronta_sim::memory::Defect;
use fronta_sim::simulation::SeedPlan;
use fronta_sim::workers::{PausedClock, WorkerSimConfig, WorkerSimReport, simulate_workers};

const QUICK_SEEDS: u64 = 150;

fn one_seed(seed: u64, config: &WorkerSimConfig) -> Result<WorkerSimReport, String> {
    seed_with(seed, config, None)
}

fn seed_with(
    seed: u64,
    config: &WorkerSimConfig,
    defect: Option<Defect>,
) -> Result<WorkerSimReport, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|err| format!("a runtime: {err}"))?;
    runtime.block_on(async {
        let base = ManualClock::at_fixed_start().now();
        let clock = Arc::new(PausedClock::new(base));
        let store = Arc::new(match defect {
            None => MemoryStore::new(clock),
            Some(defect) => MemoryStore::with_defect(clock, defect),
        });
        simulate_workers(seed, store, config).await
    })
}

#[test]
fn real_workers_keep_every_promise_through_crashes_storms_and_cancels() {
    let plan = SeedPlan::from_env(QUICK_SEEDS).expect("the seed settings");
    let config = WorkerSimConfig::default();
    let started = Instant::now();
    let mut total = WorkerSimReport::default();
    for seed in plan.seeds() {
        match one_seed(seed, &config) {
            Ok(report) => total.add(&report),
            Err(broken) => panic!(
                "seed {seed} broke a promise: {broken}\nreplay: FRONTA_SIM_SEED={seed} cargo test -p fronta-sim --test worker_simulation -- --nocapture"
            ),
        }
    }
    eprintln!(
        "worker simulation: {} seeds in {:.1?}: {} runs, {} executions, {} crashes, {} storms, {} cuts, {} faults, {} reclaims, {} cancels, {} hand-offs; {} completed, {} failed, {} cancelled; {} checks held",
        plan.count,
        started.elapsed(),
        total.runs,
        total.executions,
        total.crashes,
        total.storms,
        total.cuts,
        total.faults,
        total.reclaims,
        total.cancels,
        total.hand_offs,
        total.completed,
        total.failed,
        total.cancelled,
        total.checks
    );
    // The world must have happened, or the checks above prove nothing.
    assert!(total.runs >= plan.count * config.runs as u64);
    if plan.count >= 20 {
        assert!(total.crashes > 0, "no crash was drawn");
        assert!(total.faults > 0, "no storage fault was drawn");
        assert!(total.reclaims > 0, "no lease expired: {total:?}");
        assert!(total.cancelled > 0, "no cancel landed: {total:?}");
        assert!(
            total.hand_offs > 0,
            "no run was handed over at enqueue: {total:?}"
        );
        assert!(total.completed > total.failed, "{total:?}");
    }
}

/// The checks can fail: each planted store defect is caught within a few seeds.
#[test]
fn every_planted_store_defect_is_caught() {
    const WITHIN: u64 = 300;
    let config = WorkerSimConfig::default();
    for defect in [
        Defect::FinishIgnoresOwner,
        Defect::ReclaimNotCounted,
        Defect::ClaimStealsLiveLeases,
        Defect::PutBackIgnoresCancel,
    ] {
        let caught = (0..WITHIN).find_map(|seed| {
            seed_with(seed, &config, Some(defect))
                .err()
                .map(|broken| (seed, broken))
        });
        match caught {
            Some((seed, broken)) => eprintln!("{defect:?}: caught by seed {seed}: {broken}"),
            None => panic!("{defect:?} went unnoticed for {WITHIN} seeds"),
        }
    }
}
